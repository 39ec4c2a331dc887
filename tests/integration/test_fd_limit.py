"""
tests/integration/test_fd_limit.py — the proxy short of file descriptors.

- Started with a low open files limit (soft = hard = 64) and the default
  maxclients (10000, which needs 2 x 10000 + 32 descriptors: a client's
  socket and a pinned upstream connection each, and a reserve), the proxy
  lowers maxclients to what fits, (64 - 32) / 2 = 16, and says so at start.
  The clients past it get "-ERR max number of clients reached" instead of
  waiting unanswered in the backlog while accept() fails with EMFILE.
- When descriptors run out anyway (the limit lowered under the running
  proxy with prlimit(2)), accept() fails with EMFILE: the listeners pause
  and try again a little later, the proxy stays idle, logs a line a second
  at most, and serves a new client once others have left. On the TCP, unix
  and TLS listeners.

The proxy's CPU time is read from /proc/<pid>/stat: a bound against a busy
loop (which takes a whole core), not a benchmark. Accept errors are counted
in the proxy's log and in its stderr, where libevent's own
"Error from accept() call" warnings go.
"""
import os
import resource
import signal
import socket
import ssl
import subprocess
import time

import pytest

from cachehelpers import wait_tracking_active
from helpers import HOST, RawClient, encode, free_port, port_accepts, wait_until

pytestmark = [pytest.mark.proxy_only, pytest.mark.timeout(40)]

LIMIT = 64
FITTING = (LIMIT - 32) // 2  # proxy/fdlimit.h: 2 per client, 32 kept aside
TOO_MANY = 80
MAX_CPU = 0.3                # seconds of CPU in one second of wall clock
SIDECACHE_BIN = os.environ.get("SIDECACHE_BIN") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "sidecache")


def cpu_seconds(pid):
    """utime + stime of a process, in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_over_one_second(p):
    before = cpu_seconds(p.proc.pid)
    time.sleep(1.0)
    return cpu_seconds(p.proc.pid) - before


def accept_error_lines(p):
    """Lines about failed accepts in the proxy's log and stderr."""
    n = 0
    for path in (p.logpath, p.outpath):
        try:
            with open(path, "rb") as f:
                n += sum(1 for line in f if b"accept" in line.lower())
        except FileNotFoundError:
            pass
    return n


def log_text(p):
    with open(p.logpath, "rb") as f:
        return f.read().decode("utf-8", "replace")


def assert_ping(c):
    f = c.cmd("PING", timeout=5)
    assert f.raw == b"+PONG\r\n", f


def test_low_fd_limit_lowers_maxclients(proxy_factory):
    p = proxy_factory(nofile=(LIMIT, LIMIT))
    socks = [socket.create_connection((HOST, p.port), timeout=5) for _ in range(TOO_MANY)]
    try:
        # The first connected are accepted first: three of them block,
        # each on an upstream connection of its own (the repro).
        for s in socks[:3]:
            s.sendall(encode("BLPOP", "fdq", "0"))
        time.sleep(0.5)
        cpu = cpu_over_one_second(p)
        assert cpu < MAX_CPU, "the proxy spins: %.2fs of CPU in 1s" % cpu
        lines = accept_error_lines(p)
        assert lines < 100, "%d accept error lines in the log" % lines
        # The clients past maxclients are told so and closed.
        refused = 0
        for s in socks[3:]:
            s.settimeout(0.2)
            try:
                data = s.recv(100)
            except socket.timeout:
                continue
            assert data == b"-ERR max number of clients reached\r\n", data
            refused += 1
        assert refused >= TOO_MANY - FITTING, "only %d refused" % refused
    finally:
        for s in socks:
            s.close()
    with RawClient(p.port, timeout=5) as c:
        assert_ping(c)
    assert "maxclients lowered to fit the open files limit: maxclients=%d requested=10000" \
        % FITTING in log_text(p)


def test_fd_limit_raised_for_maxclients(proxy_factory):
    """A soft limit under what maxclients needs is raised, up to the hard
    limit: then maxclients stays as configured."""
    p = proxy_factory(args=("--maxclients", "100"), nofile=(LIMIT, 1024))
    soft, hard = resource.prlimit(p.proc.pid, resource.RLIMIT_NOFILE)
    assert (soft, hard) == (2 * 100 + 32, 1024)
    log = log_text(p)
    assert "open files limit raised from=%d to=232 for maxclients=100" % LIMIT in log
    assert "maxclients lowered" not in log


def test_reload_fits_maxclients_again(upstream, tmp_path):
    """A maxclients that SIGHUP brings (from the file: the command line
    stays the same) is fitted to the limit too."""
    port = free_port()
    conf, log = tmp_path / "sidecache.conf", tmp_path / "sidecache.log"
    text = "upstream redis://%s:%d\nport %d\nlogfile %s\nmaxclients %%d\n" % (HOST, upstream.port, port, log)
    conf.write_text(text % 10)
    proc = subprocess.Popen([SIDECACHE_BIN, str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT)))
    try:
        wait_until(lambda: port_accepts(port), what="the proxy listening")
        assert "maxclients lowered" not in log.read_text()
        conf.write_text(text % 5000)
        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "reloaded" in log.read_text(), what="the reload")
        lines = log.read_text()
        assert "maxclients lowered to fit the open files limit: maxclients=%d requested=5000" % FITTING in lines
        reloaded = [line for line in lines.splitlines() if " reloaded " in line]
        assert len(reloaded) == 1 and " maxclients=%d " % FITTING in reloaded[0], reloaded
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def tls_cert(d):
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=localhost"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return cert, key


def listener_of(kind, proxy_factory, d):
    """A proxy with a listener of that kind, and a function connecting a
    plain socket to it."""
    args = []
    if kind == "unix":
        path = os.path.join(d, "s.sock")
        assert len(path) < 100, path
        args = ["--unixsocket", path]
    elif kind == "tls":
        cert, key = tls_cert(d)
        tport = free_port()
        args = ["--tls-port", tport, "--tls-cert-file", cert, "--tls-key-file", key,
                "--tls-auth-clients", "no"]
    p = proxy_factory(args=args, nofile=(LIMIT, LIMIT))

    def connect():
        if kind == "unix":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            s.connect(path)
            return s
        return socket.create_connection((HOST, tport if kind == "tls" else p.port), timeout=5)

    return p, connect


def ping_over(kind, sock):
    if kind == "tls":
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        sock = ctx.wrap_socket(sock)
    try:
        sock.sendall(b"PING\r\n")
        data = b""
        while not data.endswith(b"\r\n"):
            chunk = sock.recv(100)
            assert chunk, "closed after %r" % data
            data += chunk
        assert data == b"+PONG\r\n", data
    finally:
        sock.close()


@pytest.mark.parametrize("kind", ["tcp", "unix", "tls"])
def test_out_of_fds_pauses_accepting(proxy_factory, tmp_path, kind):
    p, connect = listener_of(kind, proxy_factory, str(tmp_path))
    wait_tracking_active(p)  # its connections made: no descriptor wanted but clients'
    time.sleep(0.2)
    pid = p.proc.pid
    top = max(int(fd) for fd in os.listdir("/proc/%d/fd" % pid))
    # Room for 3 more descriptors, far under maxclients (16 here).
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (top + 4, LIMIT))
    started = time.monotonic()
    socks = [connect() for _ in range(20)]
    try:
        time.sleep(0.3)
        cpu = cpu_over_one_second(p)
        assert cpu < MAX_CPU, "the proxy spins: %.2fs of CPU in 1s" % cpu
        lines = accept_error_lines(p)
        # one line a second at most
        assert lines <= time.monotonic() - started + 2, "%d accept error lines in the log" % lines
        assert 'accept failed err="Too many open files" paused_ms=100' in log_text(p)
    finally:
        for s in socks:
            s.close()
    # With the same low limit, once the others have gone a new client is served.
    ping_over(kind, connect())
    assert p.alive()
