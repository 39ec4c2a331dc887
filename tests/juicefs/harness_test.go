package juicefs

// What TestTwoMounts starts around the JuiceFS clients: sidecaches in front
// of the Redis it is given, and a relay that holds back what Redis sends on
// their invalidation connections.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startDelayRelay listens on a free loopback port and relays each
// connection to target, holding what target sends back for delay (in
// order); what the client sends goes on at once. Returns its address.
func startDelayRelay(t *testing.T, target string, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("relay: %v", err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				down.Close()
				continue
			}
			track(down)
			track(up)
			go relayNow(up, down)
			go relayHeld(down, up, delay)
		}
	}()
	return ln.Addr().String()
}

func relayNow(dst, src net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
}

// relayHeld copies src to dst, each piece delay after it was read.
func relayHeld(dst, src net.Conn, delay time.Duration) {
	type piece struct {
		at   time.Time
		data []byte
	}
	q := make(chan piece, 4096)
	go func() {
		defer dst.Close()
		for p := range q {
			time.Sleep(time.Until(p.at))
			if _, err := dst.Write(p.data); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- piece{time.Now().Add(delay), append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			break
		}
	}
	close(q)
	src.Close()
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startProxy runs bin (sidecache) on a free loopback port in front of the
// Redis at redisAddr, with args; returns its address once its tracking is
// active. At the test's end it must exit 0 on SIGTERM.
func startProxy(t *testing.T, bin, redisAddr string, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	var last string
	for attempt := 0; attempt < 3; attempt++ {
		port := freePort(t)
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		logPath := filepath.Join(dir, fmt.Sprintf("sidecache-%d.log", port))
		logf, err := os.Create(logPath)
		if err != nil {
			t.Fatalf("%v", err)
		}
		argv := append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
			"--upstream", "redis://" + redisAddr, "--loglevel", "notice"}, args...)
		cmd := exec.Command(bin, argv...)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatalf("%s: %v", bin, err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait(); logf.Close() }()
		tail := func() string {
			b, _ := os.ReadFile(logPath)
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if len(lines) > 20 {
				lines = lines[len(lines)-20:]
			}
			return strings.Join(lines, "\n")
		}
		state := ""
		deadline := time.Now().Add(10 * time.Second)
	wait:
		for time.Now().Before(deadline) {
			select {
			case err := <-exited:
				last = fmt.Sprintf("sidecache %s exited (%v):\n%s", strings.Join(argv, " "), err, tail())
				break wait
			case <-time.After(50 * time.Millisecond):
			}
			state = proxyInfoAt(addr)["tracking_state"]
			if state == "active" {
				break wait
			}
		}
		if state != "active" {
			if last == "" {
				_ = cmd.Process.Kill()
				<-exited
				last = fmt.Sprintf("sidecache %s: tracking %q after 10 s:\n%s", strings.Join(argv, " "), state, tail())
			}
			continue
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("sidecache on %s: exit on SIGTERM: %v\n%s", addr, err, tail())
				}
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				t.Errorf("sidecache on %s: still running 10 s after SIGTERM\n%s", addr, tail())
			}
		})
		return addr
	}
	t.Fatalf("%s", last)
	return ""
}

// proxyInfoAt: INFO sidecache of the proxy at addr, field -> value (empty
// when it does not answer).
func proxyInfoAt(addr string) map[string]string {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	out := map[string]string{}
	s, err := c.Info(ctx, "sidecache").Result()
	if err != nil {
		return out
	}
	for _, l := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok {
			out[k] = v
		}
	}
	return out
}
