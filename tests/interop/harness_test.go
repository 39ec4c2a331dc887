package interop

// The test harness: every test starts its own redis-server and its own
// sidecache in front of it, on free loopback ports, and stops both at
// cleanup.
//
// Environment:
//   SIDECACHE_BIN            the proxy binary (default ../../sidecache, i.e. the
//                            repository's top-level ./sidecache)
//   SIDECACHE_ALLOW_MISSING  1: skip (instead of fail) when the binary is missing
//   SIDECACHE_TARGET         "direct": point the clients at redis-server itself
//                            (checks the tests; no proxy is started)
//   REDIS_SERVER             redis-server binary (default /usr/bin/redis-server)

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	startTimeout = 10 * time.Second
	stopTimeout  = 5 * time.Second
)

// env is one test's world: a redis-server and (unless SIDECACHE_TARGET=direct)
// a sidecache in front of it.
type env struct {
	t         *testing.T
	redisAddr string // redis-server, always reachable directly
	proxyAddr string // sidecache; equal to redisAddr when the target is direct
	password  string // requirepass of redis-server, "" for none
}

type envOpts struct {
	password string // start redis-server with --requirepass
}

func targetDirect() bool { return os.Getenv("SIDECACHE_TARGET") == "direct" }

// proxyBin returns the sidecache binary to test. It fails the test when the
// binary is missing, or skips it when SIDECACHE_ALLOW_MISSING=1.
func proxyBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("SIDECACHE_BIN")
	if bin == "" {
		bin = filepath.Join("..", "..", "sidecache")
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		t.Fatalf("SIDECACHE_BIN %q: %v", bin, err)
	}
	st, err := os.Stat(abs)
	if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		msg := fmt.Sprintf("sidecache binary %s is missing or not executable (set SIDECACHE_BIN, or build it with `make`)", abs)
		if os.Getenv("SIDECACHE_ALLOW_MISSING") == "1" {
			t.Skip(msg + "; skipped because SIDECACHE_ALLOW_MISSING=1")
		}
		t.Fatal(msg)
	}
	return abs
}

// newEnv starts redis-server and the proxy for test t; both stop at cleanup.
func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	var bin string
	if !targetDirect() {
		bin = proxyBin(t) // before starting anything, so a skip leaves nothing behind
	}
	e := &env{t: t, password: o.password}
	rport := startRedis(t, o.password)
	e.redisAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(rport))
	if targetDirect() {
		e.proxyAddr = e.redisAddr
		return e
	}
	pport := startProxy(t, bin, rport, o.password)
	e.proxyAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(pport))
	return e
}

// client returns a go-redis client of the proxy with go-redis's defaults
// (protocol 3) except: DB 1 (so SELECT is sent), a client name (so CLIENT
// SETNAME is sent), and the password of the environment. mod may change more.
func (e *env) client(mod func(*redis.Options)) *redis.Client {
	o := &redis.Options{
		Addr:       e.proxyAddr,
		DB:         1,
		ClientName: "interop-" + sanitize(e.t.Name()),
		Password:   e.password,
	}
	if mod != nil {
		mod(o)
	}
	c := redis.NewClient(o)
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

// direct returns a plain client of redis-server itself on database db, for
// checking what the proxy did.
func (e *env) direct(db int) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: e.redisAddr, DB: db, Password: e.password, Protocol: 2})
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, s)
}

// freePort asks the kernel for a free loopback port. The port is free when
// this returns; a race with another process is possible, so callers retry.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// clusterBusOffset: a cluster node also listens on its port + 10000.
const clusterBusOffset = 10000

// freeClusterPort is a free port whose cluster bus port is free too (Redis
// refuses a port above 55535 and exits when it cannot bind the bus).
func freeClusterPort(t *testing.T) int {
	t.Helper()
	for i := 0; i < 200; i++ {
		port := freePort(t)
		if port+clusterBusOffset > 65535 {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+clusterBusOffset)))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatalf("no free port with a free cluster bus port")
	return 0
}

// proc is a child process whose output goes to a log file.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error // valid once done is closed
	stopped bool  // we sent SIGTERM
	mayExit bool  // the test ends it itself (a redis-server it shuts down)
}

func startProc(t *testing.T, name, logPath string, argv ...string) (*proc, error) {
	t.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// logTail returns the last n lines of the process's log.
func (p *proc) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// stop sends SIGTERM and waits; SIGKILL after stopTimeout. It returns an error
// when the process had already died on its own, ended with a non-zero status
// or a signal other than SIGTERM, or had to be killed.
func (p *proc) stop() error {
	if p.exited() {
		if p.mayExit {
			return nil
		}
		return fmt.Errorf("%s exited before the end of the test: %v", p.name, p.err)
	}
	p.stopped = true
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not exit within %v of SIGTERM; killed", p.name, stopTimeout)
	}
	if p.err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
			return nil
		}
	}
	return fmt.Errorf("%s exited badly after SIGTERM: %v", p.name, p.err)
}

// waitReady polls addr until it accepts a connection and, when ping is set,
// answers PING (with AUTH first when password is set).
func waitReady(p *proc, addr string, ping bool, password string) error {
	deadline := time.Now().Add(startTimeout)
	var last error
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("%s exited during start-up: %v", p.name, p.err)
		}
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			if !ping {
				c.Close()
				return nil
			}
			err = rawPing(c, password)
			c.Close()
			if err == nil {
				return nil
			}
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready on %s within %v: %v", p.name, addr, startTimeout, last)
}

// rawPing speaks RESP2 by hand so the harness does not depend on the client
// library under test.
func rawPing(c net.Conn, password string) error {
	_ = c.SetDeadline(time.Now().Add(time.Second))
	var req bytes.Buffer
	if password != "" {
		fmt.Fprintf(&req, "*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(password), password)
	}
	req.WriteString("*1\r\n$4\r\nPING\r\n")
	if _, err := c.Write(req.Bytes()); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	if password != "" {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if line != "+OK\r\n" {
			return fmt.Errorf("AUTH: %q", line)
		}
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING: %q", line)
	}
	return nil
}

// startRedis starts redis-server on a free loopback port in a temporary
// directory, with extra arguments, and returns the port.
// redisServerBin is the redis-server the tests start (REDIS_SERVER).
func redisServerBin() string {
	if bin := os.Getenv("REDIS_SERVER"); bin != "" {
		return bin
	}
	return "/usr/bin/redis-server"
}

// debugCommandArgs are the arguments that let a client send DEBUG: Redis 7
// refuses it unless enable-debug-command says so, a directive Redis 6 does
// not know (and refuses to start with).
func debugCommandArgs(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command(redisServerBin(), "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", redisServerBin(), err)
	}
	if strings.Contains(string(out), " v=6.") {
		return nil
	}
	return []string{"--enable-debug-command", "yes"}
}

func startRedis(t *testing.T, password string, extra ...string) int {
	t.Helper()
	bin := redisServerBin()
	dir := t.TempDir()
	var lastErr error
	pickPort := freePort
	if slices.Contains(extra, "--cluster-enabled") {
		pickPort = freeClusterPort
	}
	for attempt := 0; attempt < 3; attempt++ {
		port := pickPort(t)
		argv := []string{bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no",
			"--protected-mode", "no", "--databases", "16"}
		if password != "" {
			argv = append(argv, "--requirepass", password)
		}
		argv = append(argv, extra...)
		p, err := startProc(t, "redis-server", filepath.Join(dir, fmt.Sprintf("redis-%d.log", port)), argv...)
		if err != nil {
			t.Fatalf("%v", err)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err := waitReady(p, addr, true, password); err != nil {
			lastErr = fmt.Errorf("%v\n--- redis log ---\n%s", err, p.logTail(20))
			_ = p.stop()
			continue
		}
		t.Cleanup(func() {
			if err := p.stop(); err != nil {
				t.Errorf("%v\n--- redis log ---\n%s", err, p.logTail(20))
			}
		})
		return port
	}
	t.Fatalf("redis-server did not start: %v", lastErr)
	return 0
}

// startProxy starts sidecache in front of redis on rport, with extra
// arguments, and returns its port.
// With a password, the upstream URL carries it (the proxy's own connections to
// Redis must authenticate); clients still have to authenticate themselves.
func startProxy(t *testing.T, bin string, rport int, password string, extra ...string) int {
	t.Helper()
	dir := t.TempDir()
	up := fmt.Sprintf("redis://127.0.0.1:%d", rport)
	if password != "" {
		up = fmt.Sprintf("redis://:%s@127.0.0.1:%d", password, rport)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port := freePort(t)
		argv := []string{bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
			"--upstream", up, "--loglevel", "notice"}
		argv = append(argv, extra...)
		p, err := startProc(t, "sidecache", filepath.Join(dir, fmt.Sprintf("sidecache-%d.log", port)), argv...)
		if err != nil {
			t.Fatalf("%v", err)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err := waitReady(p, addr, false, ""); err != nil {
			lastErr = fmt.Errorf("%v\n--- sidecache log ---\n%s", err, p.logTail(30))
			_ = p.stop()
			continue
		}
		t.Cleanup(func() {
			err := p.stop()
			if err != nil {
				t.Errorf("%v\n--- sidecache log ---\n%s", err, p.logTail(30))
			} else if t.Failed() {
				t.Logf("--- sidecache log (%s) ---\n%s", strings.Join(argv, " "), p.logTail(30))
			}
		})
		return port
	}
	t.Fatalf("sidecache did not start: %v", lastErr)
	return 0
}

// ctx returns a context that bounds one test's commands.
func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
