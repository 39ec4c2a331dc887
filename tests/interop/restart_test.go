package interop

// Redis restarts under a go-redis client, as under JuiceFS. Connected to
// Redis itself, the client's commands meet a refused connection, which
// go-redis retries after a pause (MaxRetries, 20 ms to 10 s for JuiceFS):
// a restart of a few seconds is a stall, not an error. Through sidecache
// the connection to sidecache stays up, so sidecache answers the commands
// it could not send MASTERDOWN (nothing ran), which go-redis retries the
// same way; an ERR would reach the application (JuiceFS: EIO).

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestRedisRestartIsAStallNotAnError(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	port := freePort(t)
	must(t, startRedisOn(t, port))
	target := port
	if !targetDirect() {
		target = startProxy(t, proxyBin(t), port, "")
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(target),
		MaxRetries: 10, MinRetryBackoff: 20 * time.Millisecond, MaxRetryBackoff: 500 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	must(t, c.Set(ctx, "i2", "attr", 0).Err())

	// the redis-server of this test is stopped, and a new one started on the
	// same port 1.5 s later; the client's commands meanwhile must succeed
	direct := nodeClient(t, port)
	_ = direct.Do(ctx, "SHUTDOWN", "NOSAVE").Err() // the connection closes: no reply
	restarted := make(chan error, 1)
	go func() {
		time.Sleep(1500 * time.Millisecond)
		restarted <- startRedisOn(t, port)
	}()
	for i := 0; i < 20; i++ {
		key := fmt.Sprintf("i%d", 100+i)
		if err := c.Set(ctx, key, "v", 0).Err(); err != nil {
			t.Fatalf("SET %s while Redis restarts: %v (a client retries a refused connection; this it gave up on)",
				key, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	must(t, <-restarted)
	if v, err := c.Get(ctx, "i119").Result(); err != nil || v != "v" {
		t.Fatalf("GET i119 = %q, %v", v, err)
	}
}

// startRedisOn starts a redis-server on port, which the test may shut down
// (and start again on that port); stopped at the end of the test if up.
func startRedisOn(t *testing.T, port int) error {
	dir := t.TempDir()
	argv := []string{"/usr/bin/redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no", "--protected-mode", "no"}
	p, err := startProc(t, "redis-server", filepath.Join(dir, "redis.log"), argv...)
	if err != nil {
		return err
	}
	p.mayExit = true
	t.Cleanup(func() { _ = p.stop() })
	return waitReady(p, "127.0.0.1:"+strconv.Itoa(port), true, "")
}

// A JuiceFS lookup (EVALSHA of its script) on its way to Redis when
// sidecache's connection to Redis is lost (here Redis hangs past
// upstream-timeout; a restart or a Sentinel switch does the same). Against
// Redis itself go-redis sees the connection fail and sends the command again;
// JuiceFS treats any other error text from the script as "unexpected" and
// stops using the script for the life of the process (handleLuaResult). A
// read changed nothing whether it ran or not: sidecache's error for it must
// be one go-redis retries, so that the lookup gets its answer once Redis
// answers again, as it would directly.
func TestLookupInFlightWhenTheUpstreamConnectionIsLostIsRetried(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	rport := startRedis(t, "", debugCommandArgs(t)...)
	target := rport
	if !targetDirect() {
		target = startProxy(t, proxyBin(t), rport, "", "--upstream-timeout", "1")
	}
	direct := nodeClient(t, rport)
	must(t, direct.ScriptLoad(ctx, jfsLookupScript).Err())
	attr := strings.Repeat("a", 71) + "\x00"
	must(t, direct.HSet(ctx, "d1", "f", "\x01\x00\x00\x00\x00\x00\x00\x00\x02").Err())
	must(t, direct.Set(ctx, "i2", attr, 0).Err())
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(target), ReadTimeout: 20 * time.Second,
		MaxRetries: 10, MinRetryBackoff: 20 * time.Millisecond, MaxRetryBackoff: 500 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	if !targetDirect() {
		waitTrackingActive(t, ctx, c)
	}
	slept := make(chan error, 1)
	// its own client: go-redis's default read timeout is the sleep's 3 s,
	// and a reply a little late (an ASan build on a loaded machine) was a
	// timeout, retried: Redis slept 3 s four times over
	sleeper := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(rport), ReadTimeout: 20 * time.Second,
		MaxRetries: -1})
	t.Cleanup(func() { _ = sleeper.Close() })
	go func() { slept <- sleeper.Do(ctx, "DEBUG", "SLEEP", "3").Err() }()
	time.Sleep(300 * time.Millisecond)
	res, err := c.EvalSha(ctx, jfsLookupSHA, []string{"d1", "f"}).Result()
	if err != nil {
		t.Fatalf("lookup while the connection to Redis was lost: %v (JuiceFS: \"unexpected error\", the script "+
			"is off for the life of the process; against Redis go-redis retries)", err)
	}
	if v, ok := res.([]interface{}); !ok || len(v) != 2 || v[0] != int64(2) || v[1] != attr {
		t.Fatalf("lookup = %#v", res)
	}
	must(t, <-slept)
}
