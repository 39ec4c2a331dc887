// Command toxiproxy-server is Shopify's toxiproxy server (github.com/Shopify/toxiproxy/v2,
// unchanged) with one more toxic, "latency_us", for sidecache's latency benchmark
// (bench/latency.sh).
//
// Why: toxiproxy's own "latency" toxic takes whole milliseconds and sleeps with Go
// timers, which on Linux wake up to about 1 ms late for sub-millisecond sleeps (Go's
// netpoller waits in whole milliseconds). A data-centre network is 0.1–1 ms, so the
// benchmark needs 200 µs and 500 µs.
//
// latency_us delays every chunk of data by "latency" microseconds (± "jitter"),
// counted from the moment toxiproxy read the chunk, like "latency" does, but
// sleeps on a timerfd(2) read through Go's netpoller (precise.go), so the delay
// is the one asked for plus the kernel's wake-up time (tens of µs on a busy host;
// bench/latency.sh measures the round trip it really got and corrects for it).
//
//	curl -X POST http://127.0.0.1:8474/proxies/redis/toxics \
//	  -d '{"type":"latency_us","stream":"downstream","attributes":{"latency":500}}'
package main

import (
	"flag"
	"math/rand"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
)

// LatencyUsToxic passes data through after latency ± jitter microseconds.
type LatencyUsToxic struct {
	Latency int64 `json:"latency"` // µs
	Jitter  int64 `json:"jitter"`  // µs
}

func (t *LatencyUsToxic) GetBufferSize() int { return 1024 }

func (t *LatencyUsToxic) delay() time.Duration {
	d := t.Latency
	if t.Jitter > 0 {
		d += rand.Int63n(t.Jitter*2) - t.Jitter //#nosec G404 -- jitter, not security
	}
	return time.Duration(d) * time.Microsecond
}

func (t *LatencyUsToxic) Pipe(stub *toxics.ToxicStub) {
	timer, err := newPreciseTimer()
	if err != nil {
		panic("latency_us: timerfd: " + err.Error())
	}
	defer timer.close()
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			// At most one delay long: an interrupt (the toxic is changed or
			// removed) waits for it, and no data is dropped.
			if err := timer.sleep(t.delay() - time.Since(c.Timestamp)); err != nil {
				panic("latency_us: timerfd: " + err.Error())
			}
			stub.Output <- c
		}
	}
}

func main() {
	host := flag.String("host", "localhost", "host for toxiproxy's API to listen on")
	port := flag.String("port", "8474", "port for toxiproxy's API to listen on")
	flag.Parse()

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		os.Exit(0)
	}()

	toxics.Register("latency_us", new(LatencyUsToxic))
	logger := zerolog.New(os.Stderr).With().Timestamp().Logger().Level(zerolog.WarnLevel)
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), logger)
	server.Listen(*host, *port)
}
