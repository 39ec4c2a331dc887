"""
tests/integration/test_connect_timeout.py — upstream-connect-timeout: a
connect to a Redis host that answers nothing (its SYNs dropped: a dead node,
a security group, a partition) fails after that deadline, as a refused one
does, instead of holding every request for upstream-timeout (30 s) and the
connect for the kernel's ~2 minutes.

The unreachable host is a blackhole on loopback: a listening socket with a
backlog of 0 that never accepts, whose accept queue is filled first; Linux
then drops every further SYN to it (Blackhole checks that it does). For
TLS, a listener that completes TCP connects and never says a word.
"""
import signal
import socket
import subprocess
import time

import pytest

from helpers import HOST, RawClient, RedisServer, free_port, port_accepts, wait_until
from test_reload import sidecache_bin, wait_for
from test_sentinel import FakeSentinel

pytestmark = [pytest.mark.proxy_only, pytest.mark.timeout(60)]

MS = 300           # the connect timeout the tests set
SLOW = 2.0         # an error later than this came from something else
# what a refused connect gives too: nothing ran, and go-redis retries MASTERDOWN
ERROR = b"-MASTERDOWN sidecache: upstream %s:%d unavailable: connect timed out after %d ms (upstream-connect-timeout)\r\n"


class Blackhole:
    """A loopback port whose SYNs go unanswered (see the module's doc)."""

    def __init__(self):
        self.listener = socket.socket()
        self.listener.bind((HOST, free_port()))
        self.listener.listen(0)
        self.port = self.listener.getsockname()[1]
        self.url = "redis://%s:%d" % (HOST, self.port)
        self.fillers = []
        for _ in range(4):
            s = socket.socket()
            s.settimeout(0.3)
            self.fillers.append(s)
            try:
                s.connect((HOST, self.port))
            except socket.timeout:
                return  # the queue is full: this SYN was dropped, so are the next ones
        self.close()
        raise RuntimeError("connects to a full backlog-0 listener still complete: no blackhole here")

    def close(self):
        """The listener first: the connections queued in it are reset, so
        the port can be listened on again at once."""
        self.listener.close()
        for s in self.fillers:
            s.close()


@pytest.fixture
def blackhole():
    bh = Blackhole()
    yield bh
    bh.close()


def timed(c, *args):
    """One command on raw client c: (reply bytes, seconds it took)."""
    t0 = time.monotonic()
    raw = c.cmd(*args, timeout=10).raw
    return raw, time.monotonic() - t0


def log_lines(p, needle):
    with open(p.logpath) as f:
        return [l for l in f.read().splitlines() if needle in l]


def test_blackholed_upstream_errors_at_the_connect_timeout(proxy_factory, blackhole):
    """A request meets the connect timeout's error, naming it, within about
    the timeout (upstream-timeout is 30 s); the proxy stays up, and the next
    request gets an error again, not a hang. A timed-out connect logs a
    warning that names the address and the deadline."""
    p = proxy_factory(upstream_url=blackhole.url,
                      args=("--upstream-connect-timeout", MS, "--upstream-timeout", "30"))
    c = p.raw()
    for _ in range(3):
        raw, took = timed(c, "SET", "k", "v")
        assert raw == ERROR % (HOST.encode(), blackhole.port, MS), raw
        assert took < SLOW, took
        time.sleep(0.3)  # now and then past the pool's back-off: a new connect
    assert p.alive()
    warnings = log_lines(p, "upstream connect failed")
    assert warnings, open(p.logpath).read()
    for w in warnings:
        assert 'addr=%s:%d err="connect timed out after %d ms (upstream-connect-timeout)"' % (
            HOST, blackhole.port, MS) in w, w


def test_default_connect_timeout_is_2000_ms(proxy_factory, blackhole):
    """Without the directive the deadline is its default, 2 s: well before
    upstream-timeout."""
    p = proxy_factory(upstream_url=blackhole.url, args=("--upstream-timeout", "30"))
    raw, took = timed(p.raw(), "GET", "k")
    assert raw == ERROR % (HOST.encode(), blackhole.port, 2000), raw
    assert took < 2.0 + SLOW, took


def test_connect_timeout_0_waits(proxy_factory, blackhole):
    """The control: with upstream-connect-timeout 0 the same request is
    still unanswered after 1.5 s (it would be until upstream-timeout)."""
    p = proxy_factory(upstream_url=blackhole.url,
                      args=("--upstream-connect-timeout", "0", "--upstream-timeout", "30"))
    with p.raw() as c:
        c.send_cmd("GET", "k")
        c.expect_silence(1.5)


def test_tls_handshake_counts_in_the_connect(proxy_factory):
    """rediss://: a host whose TCP answers (the kernel completes connects
    into the backlog) but that never speaks TLS is a connect not over."""
    mute = socket.socket()
    mute.bind((HOST, free_port()))
    mute.listen(64)  # connects complete in the backlog; nothing is ever read or written
    try:
        port = mute.getsockname()[1]
        p = proxy_factory(upstream_url="rediss://%s:%d" % (HOST, port),
                          args=("--upstream-connect-timeout", MS, "--upstream-timeout", "30"))
        raw, took = timed(p.raw(), "GET", "k")
        assert raw == ERROR % (HOST.encode(), port, MS), raw
        assert took < SLOW, took
    finally:
        mute.close()


def test_recovers_when_the_blackhole_lifts(proxy_factory, tmp_path_factory):
    """The host comes back (a real redis-server on the address that dropped
    SYNs): after at most the pool's back-off, requests reach it."""
    bh = Blackhole()
    redis = None
    try:
        p = proxy_factory(upstream_url=bh.url, args=("--upstream-connect-timeout", MS, "--upstream-timeout", "30"))
        c = p.raw()
        raw, _ = timed(c, "SET", "k", "v")
        assert raw == ERROR % (HOST.encode(), bh.port, MS), raw
        bh.close()
        redis = RedisServer(tmp_path_factory.mktemp("redis"))
        redis.port = bh.port
        redis.start()
        t0 = time.monotonic()
        wait_until(lambda: c.cmd("SET", "k", "v", timeout=10).raw == b"+OK\r\n", timeout=5, interval=0.05,
                   what="a write through the proxy to reach the returned Redis")
        assert time.monotonic() - t0 < 2.0 + 1.0  # the back-off is 2 s at most
        assert redis.client().get("k") == b"v"
    finally:
        bh.close()
        if redis is not None:
            redis.stop()


class CountingSentinel(FakeSentinel):
    """A FakeSentinel that counts the asks it answered (the proxy closes
    the connection once it has the answer)."""

    asks = 0

    def _accepted(self, s):
        super()._accepted(s)
        self.asks += 1


def test_sentinel_is_asked_at_once_after_a_connect_timeout(proxy_factory, upstream, blackhole):
    """With Sentinel, a connect that times out asks the sentinels where the
    master is at once, as a refused one does: the failover is followed
    within the connect timeout, not after upstream-timeout (the periodic
    ask is an hour away here)."""
    sentinel = CountingSentinel(blackhole.port)
    try:
        p = proxy_factory(args=("--upstream-sentinel", "mymaster", sentinel.addr,
                                "--sentinel-check-ms", "3600000", "--cache-max-memory", "0",
                                "--upstream-connect-timeout", MS, "--upstream-timeout", "30"))
        # the connect made at start timed out, and the sentinel was asked again
        wait_until(lambda: sentinel.asks >= 2, timeout=SLOW, what="the sentinel asked again")
        sentinel.master = upstream.port  # the failover
        c = p.raw()
        raw, took = timed(c, "SET", "k", "v")  # on the old master's address
        assert raw == ERROR % (HOST.encode(), blackhole.port, MS), raw
        assert took < SLOW, took
        wait_until(lambda: c.cmd("SET", "k", "v", timeout=10).raw == b"+OK\r\n", timeout=SLOW + 1, interval=0.05,
                   what="a write through the proxy to reach the new master")
        assert upstream.client().get("k") == b"v"
        assert log_lines(p, "sentinel: master moved from=%s:%d to=%s:%d" % (HOST, blackhole.port, HOST, upstream.port))
    finally:
        sentinel.close()


def test_sighup_applies_a_new_connect_timeout(tmp_path, blackhole):
    """upstream-connect-timeout is reloadable, with no restart asked for:
    connects begun after SIGHUP get the new deadline, and one begun before
    keeps its own. Two clients in a row use the pool's two shared
    connections: the one made at start, before the reload (3000 ms), and a
    new one (300 ms)."""
    port = free_port()
    conf = tmp_path / "sidecache.conf"
    log = tmp_path / "sidecache.log"
    base = ("upstream %s\nport %d\nlogfile %s\ncache-max-memory 0\nupstream-timeout 30\n"
            "upstream-connections 2\n" % (blackhole.url, port, log))
    conf.write_text(base + "upstream-connect-timeout 3000\n")
    proc = subprocess.Popen([sidecache_bin(), str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    clients = []
    try:
        wait_for(lambda: port_accepts(port))
        conf.write_text(base + "upstream-connect-timeout %d\n" % MS)
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reloaded" in log.read_text())
        assert "upstream_connect_timeout=%d" % MS in log.read_text()
        assert "need a restart" not in log.read_text()
        clients = [RawClient(port), RawClient(port)]
        t0 = time.monotonic()
        for c in clients:
            c.send_cmd("GET", "k")
        got = {}  # reply -> seconds it took
        while len(got) < 2 and time.monotonic() - t0 < 5:
            for c in clients:
                try:
                    got[c.read_frame(timeout=0.01).raw] = time.monotonic() - t0
                except socket.timeout:
                    pass
        new, old = ERROR % (HOST.encode(), blackhole.port, MS), ERROR % (HOST.encode(), blackhole.port, 3000)
        assert sorted(got) == sorted([new, old]), got
        assert got[new] < SLOW, got
    finally:
        for c in clients:
            c.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0, proc.stderr.read().decode(errors="replace")
