"""
tests/integration/test_slow_clients.py — clients that are slow on purpose.

- Slowloris: maxclients connections, each trickling a partial command one
  byte at a time. One more client is refused with Redis's "-ERR max number
  of clients reached"; when some trickling connections go away, normal
  clients get their slots and work; a trickled command, once complete, is
  executed like any other. With partial-command-timeout the proxy frees the
  slots itself.
- Slow reader: a client that requests many 1 MB values and reads nothing.
  With client-output-buffer-limit 8mb it is disconnected, the proxy's
  memory stays bounded (peak RSS from /proc/<pid>/status, printed: run
  with -s or -rP to see it), and other clients are not held up.

Counters come from the proxy's /metrics (a connection for INFO would take
a client slot).
"""
import contextlib
import os
import signal
import socket
import struct
import subprocess
import threading
import time

import pytest

from faulthelpers import Metrics, RssSampler, direct_get, mb, proc_status
from helpers import HOST, Err, RawClient, encode, free_port, port_accepts

pytestmark = [pytest.mark.proxy_only, pytest.mark.timeout(40)]

MB = 1024 * 1024


# ---------------------------------------------------------------------------
# Slowloris


class Trickler:
    """Opens n connections and sends each its payload one byte every
    `interval` seconds (all connections in step), in a thread."""

    def __init__(self, port, payloads, interval=0.02):
        self.socks = []
        self.payloads = payloads
        self.sent = [0] * len(payloads)
        self.interval = interval
        self.lock = threading.Lock()
        self.stop_ev = threading.Event()
        self.errors = []
        for _ in payloads:
            s = socket.create_connection((HOST, port), timeout=5)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.socks.append(s)
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.stop_ev.is_set():
            with self.lock:
                for i, s in enumerate(self.socks):
                    if s is None or self.sent[i] >= len(self.payloads[i]):
                        continue
                    try:
                        s.send(self.payloads[i][self.sent[i]:self.sent[i] + 1])
                        self.sent[i] += 1
                    except OSError as e:
                        self.errors.append((i, e))
                        s.close()
                        self.socks[i] = None
            time.sleep(self.interval)

    def take(self, i):
        """Stops trickling on connection i and hands its socket over."""
        with self.lock:
            s, self.socks[i] = self.socks[i], None
            return s, self.sent[i]

    def close(self, i):
        s, _ = self.take(i)
        if s is not None:
            s.close()

    def stop(self):
        self.stop_ev.set()
        self.t.join(5)
        for i in range(len(self.socks)):
            self.close(i)


def slow_payload(i, bulk=4000):
    """A command that takes long to arrive: half of them multibulk (SET
    slowNN <4000 bytes>), half inline (SET slowNN xxxx...)."""
    if i % 2 == 0:
        head = b"*3\r\n$3\r\nSET\r\n$6\r\nslow%02d\r\n$%d\r\n" % (i, bulk)
        return head + b"x" * bulk + b"\r\n"
    return b"SET slow%02d " % i + b"y" * bulk + b"\r\n"


def refused(port):
    """Connects and expects the maxclients error, then the close."""
    with RawClient(port, timeout=3) as c:
        f = c.read_frame(3)
        assert isinstance(f.value, Err) and f.value.text == "ERR max number of clients reached", f
        c.expect_closed(3)


def raw_from_socket(s, timeout=5.0):
    """A RawClient on an already connected socket."""
    c = RawClient.__new__(RawClient)
    c.sock, c.buf, c.timeout, c.closed = s, bytearray(), timeout, False
    s.settimeout(timeout)
    return c


def no_clients_yet(m):
    """The port probe of ProxyProcess.start() is a client too until the
    proxy has seen it close: wait for that, or it takes a slot."""
    time.sleep(0.1)
    m.wait(lambda d: d["connected_clients"] == 0, 5, "no client connected")


def works(c, key):
    assert c.call("SET", key, "v") == b"OK"
    assert c.call("GET", key) == b"v"


def start_slowloris(proxy_factory, maxclients, partial_timeout):
    """A proxy with maxclients slots, all taken by connections that trickle
    a command in (their count watched through /metrics): (proxy, metrics,
    trickler)."""
    mport = free_port()
    p = proxy_factory(args=("--maxclients", str(maxclients), "--metrics-port", str(mport),
                            "--partial-command-timeout", str(partial_timeout)))
    m = Metrics(mport)
    no_clients_yet(m)
    return p, m, Trickler(p.port, [slow_payload(i) for i in range(maxclients)])


def test_slowloris_up_to_maxclients(upstream, proxy_factory):
    p, m, tr = start_slowloris(proxy_factory, 50, 0)
    try:
        m.wait(lambda d: d["connected_clients"] == 50, 5, "50 clients")
        time.sleep(0.3)  # every connection has a partial command by now
        assert all(n > 0 for n in tr.sent), tr.sent
        # the 51st
        refused(p.port)
        refused(p.port)
        # the trickling connections were not answered or closed meanwhile
        assert not tr.errors, tr.errors
        for s in tr.socks[:10]:
            s.setblocking(False)
            try:
                got = s.recv(100)
                raise AssertionError("a trickling connection got %r" % got)
            except BlockingIOError:
                pass
            finally:
                s.setblocking(True)
                s.settimeout(5)
        # free five slots: five normal clients fit, a sixth does not
        for i in range(5):
            tr.close(i)
        m.wait(lambda d: d["connected_clients"] == 45, 5, "45 clients after 5 closed")
        normal = [p.raw(auth=True, timeout=5) for _ in range(5)]
        try:
            for j, c in enumerate(normal):
                works(c, "normal%d" % j)
            refused(p.port)
            # normal clients keep working while the other 45 go on trickling
            t0 = time.monotonic()
            for k in range(50):
                works(normal[k % 5], "normal-more%d" % k)
            took = time.monotonic() - t0
            assert took < 2.0, "100 commands took %.2fs beside the slowloris" % took
            # a trickled command, once it completes, is executed
            s, sent = tr.take(10)
            rest = slow_payload(10)[sent:]
            s.sendall(rest)
            with raw_from_socket(s) as c:
                assert c.read_frame(5).raw == b"+OK\r\n"
                assert c.call("GET", "slow10") == b"x" * 4000
            assert direct_get(upstream, "slow10") == b"x" * 4000
        finally:
            for c in normal:
                c.close()
        assert not tr.errors, tr.errors
        print("\n[slowloris] %s trickled bytes per connection by the end; clients %d"
              % (max(tr.sent), m["connected_clients"]))
    finally:
        tr.stop()


def test_slowloris_partial_command_timeout_frees_slots(upstream, proxy_factory):
    p, m, tr = start_slowloris(proxy_factory, 20, 1)
    try:
        m.wait(lambda d: d["connected_clients"] == 20, 5, "20 clients")
        time.sleep(0.1)
        refused(p.port)
        t0 = time.monotonic()
        # trickling does not count as progress: each is closed ~1 s after
        # its command began
        m.wait(lambda d: d["connected_clients"] == 0, 4, "the trickling clients closed")
        took = time.monotonic() - t0
        for i, s in enumerate(tr.socks):
            if s is None:
                continue
            s2, _ = tr.take(i)
            s2.settimeout(3)
            try:
                assert s2.recv(100) == b""
            except ConnectionResetError:
                pass
            s2.close()
        with p.raw(auth=True) as c:
            works(c, "after")
        print("\n[slowloris] partial-command-timeout 1: all 20 closed %.2fs after the 21st "
              "was refused" % took)
    finally:
        tr.stop()


# ---------------------------------------------------------------------------
# Slow reader of large replies


def slow_reader(port, nreq, keys, rcvbuf=16384):
    """A socket with a small receive buffer that pipelines nreq GETs of the
    big keys and reads nothing."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(10)
    s.connect((HOST, port))
    s.sendall(b"".join(encode("GET", keys[i % len(keys)]) for i in range(nreq)))
    return s


def drain_until_closed(s, timeout=10.0):
    """Reads everything until EOF or reset; returns the byte count."""
    n = 0
    deadline = time.monotonic() + timeout
    s.settimeout(1.0)
    while True:
        try:
            chunk = s.recv(1 << 20)
        except socket.timeout:
            if time.monotonic() > deadline:
                raise AssertionError("slow reader still connected %.0fs later (%d bytes read)"
                                     % (timeout, n))
            continue
        except ConnectionResetError:
            return n
        if not chunk:
            return n
        n += len(chunk)


def redis_done(upstream):
    """True when Redis has no reply bytes left queued for any client."""
    with upstream.raw(auth=True) as c:
        lst = c.call("CLIENT", "LIST").decode()
    for line in lst.splitlines():
        f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if f.get("cmd") == "client|list":
            continue
        if int(f.get("omem", "0")) > 0 or int(f.get("obl", "0")) > 0 or int(f.get("oll", "0")) > 0:
            return False
    return True


def output_limit_closes(p):
    with open(p.logpath, "rb") as f:
        return f.read().count(b"client output buffer limit reached")


class Pinger:
    """A normal client doing SET/GET through the proxy meanwhile; records
    the slowest round trip and any failure."""

    def __init__(self, ep):
        self.ep = ep
        self.worst = 0.0
        self.n = 0
        self.fail = []
        self.stop_ev = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        try:
            with self.ep.raw(auth=True, timeout=10) as c:
                while not self.stop_ev.is_set():
                    t0 = time.monotonic()
                    works(c, "pinger")
                    self.worst = max(self.worst, time.monotonic() - t0)
                    self.n += 1
                    time.sleep(0.01)
        except Exception as e:
            self.fail.append(repr(e))

    def stop(self):
        self.stop_ev.set()
        self.t.join(15)


def asan_binary(pid):
    """Is the process built with AddressSanitizer (make SANITIZE=1)?"""
    try:
        with open("/proc/%d/maps" % pid) as f:
            return "libasan" in f.read()
    except OSError:
        return False


@pytest.mark.timeout(60)
@pytest.mark.parametrize("readers,nreq", [(1, 250), (8, 32)])
def test_slow_reader_of_large_replies_is_disconnected(upstream, proxy_factory, readers, nreq,
                                                      monkeypatch):
    """`readers` clients each pipeline `nreq` GETs of 1 MB values (250 MB
    of replies in all) and read nothing: each must be disconnected once
    8 MB wait for it, the proxy's peak RSS must stay under 200 MB (less
    than what was requested: it cannot have held it all), and a normal
    client must keep working meanwhile. (Redis itself buffers every reply
    it has not sent: the sizes are kept modest for small CI machines.)"""
    # Under ASan (CI) freed memory sits in a 256 MB quarantine by default,
    # which RSS counts: keep it small so the bound measures the proxy.
    asan = os.environ.get("ASAN_OPTIONS", "")
    monkeypatch.setenv("ASAN_OPTIONS", (asan + ":" if asan else "") + "quarantine_size_mb=8")
    mport = free_port()
    p = proxy_factory(args=("--client-output-buffer-limit", "8mb", "--metrics-port", str(mport)))
    m = Metrics(mport)
    value = b"v" * MB
    keys = ["big%d" % i for i in range(4)]
    with upstream.raw(auth=True) as c:
        for k in keys:
            assert c.call("SET", k, value) == b"OK"
    with p.raw(auth=True) as c:   # the upstream connections exist
        assert c.call("GET", keys[0]) == value
    base = proc_status(p.proc.pid)
    pinger = Pinger(p)
    socks = []
    try:
        with RssSampler(p.proc.pid) as rs:
            t0 = time.monotonic()
            for _ in range(readers):
                socks.append(slow_reader(p.port, nreq, keys))
            deadline = time.monotonic() + 30
            while output_limit_closes(p) < readers:
                assert time.monotonic() < deadline, (
                    "%d of %d slow readers disconnected after 30s (metrics: %d clients)"
                    % (output_limit_closes(p), readers, m["connected_clients"]))
                time.sleep(0.01)
            t_cut = time.monotonic() - t0
            # let Redis hand over everything it had queued, and the proxy
            # swallow it
            deadline = time.monotonic() + 30
            while not redis_done(upstream):
                assert time.monotonic() < deadline, "Redis still sending replies after 30s"
                time.sleep(0.05)
            time.sleep(0.3)
            with p.raw(auth=True, timeout=10) as c:
                assert c.call("GET", keys[1]) == value
        received = [drain_until_closed(s) for s in socks]
    finally:
        pinger.stop()
        for s in socks:
            s.close()
    # (the pinger shares the pool's upstream connections with the slow
    # readers: its replies queue behind the megabytes Redis still sends for
    # them, which the proxy must read and drop - so its round trip is
    # reported, not bounded)
    assert not pinger.fail, pinger.fail
    assert pinger.n > 0
    for n in received:
        assert n < min(nreq * MB, 64 * MB) * 0.9, (
            "a slow reader received %d bytes: it was not cut off" % n)
    print("\n[slow reader x%d%s] %d x 1 MB requested each; cut off after %.2fs (bytes each "
          "reader got before the close: %s MB); proxy RSS before %.1f MB, peak sampled "
          "%.1f MB, VmHWM %.1f MB; pinger worst round trip %.0f ms over %d"
          % (readers, " ASan" if asan_binary(p.proc.pid) else "", nreq, t_cut,
             ", ".join("%.1f" % mb(n) for n in received), mb(base.get("VmRSS", 0)),
             mb(rs.peak), mb(rs.hwm), pinger.worst * 1000, pinger.n))
    assert rs.hwm < 200 * MB, "proxy peak RSS %.1f MB (limit 200 MB)" % mb(rs.hwm)


class BackgroundSend:
    """Sends data on the connection of RawClient c from a thread, through a
    second socket object: its sendall blocks while the proxy does not read,
    without the reader's timeouts. .grown(pid) after `settle` seconds: how
    much the proxy's RSS grew meanwhile."""

    def __init__(self, c, data):
        self.sock = socket.socket(fileno=os.dup(c.sock.fileno()))
        self.sock.settimeout(None)
        self.t = threading.Thread(target=self.sock.sendall, args=(data,), daemon=True)

    def start_and_measure(self, pid, settle=3.0):
        base = proc_status(pid)["VmRSS"]
        self.t.start()
        time.sleep(settle)  # the proxy reads what it will
        return proc_status(pid)["VmRSS"] - base

    def join(self):
        self.t.join(10)
        self.sock.close()


def test_one_reply_above_the_output_limit_reaches_a_client_that_reads(upstream, proxy_factory):
    """client-output-buffer-limit is for output a client leaves unread: one
    reply larger than the limit (a 20 MB value, limit 8mb) reaches a client
    that reads it, as from Redis, and the connection stays. It used to be
    closed the moment the reply was queued."""
    p = proxy_factory(args=("--client-output-buffer-limit", "8mb"))
    value = b"x" * (20 * MB)
    with upstream.raw(auth=True) as d:
        assert d.call("SET", "huge", value) == b"OK"
    with p.raw(auth=True, timeout=30) as c:
        assert c.call("GET", "huge") == value
        assert c.call("PING") == b"PONG"
    assert output_limit_closes(p) == 0


def test_slow_reader_of_cache_hits_is_disconnected(upstream, proxy_factory):
    """Hits count in the output limit too: a client that pipelines small
    GETs of a large cached value (20 request bytes for 60 KB of reply each)
    and reads nothing is closed at client-output-buffer-limit, not left
    holding all of them."""
    p = proxy_factory(args=("--client-output-buffer-limit", "8mb", "--tracking-timeout-ms", "60000"))
    with upstream.raw(auth=True) as d:
        assert d.call("SET", "i1", "v" * 60000) == b"OK"
    with p.raw(auth=True) as c:
        for _ in range(3):
            assert len(c.call("GET", "i1")) == 60000
    def hits():
        with p.raw(auth=True) as q:
            return int(q.call("INFO", "sidecache").decode().split("cache_hits:")[1].split("\r\n")[0])
    hits0 = hits()
    s = slow_reader(p.port, 2000, ["i1"])  # 120 MB of hits
    # read nothing until the proxy gave up on it (or 15 s passed): a reader
    # draining at once may keep up with a slow (sanitizer) build
    deadline = time.monotonic() + 15
    while output_limit_closes(p) == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    got = drain_until_closed(s, timeout=20)
    s.close()
    assert hits() > hits0 + 100, "the GETs were not hits"
    assert got < 40 * MB, "client got %.0f MB past an 8 MB limit" % mb(got)
    assert output_limit_closes(p) == 1


@pytest.mark.timeout(60)
def test_closing_client_that_does_not_read_times_out(upstream, proxy_factory):
    """`timeout` applies to a client that is closing too: after QUIT behind
    replies it never reads, it is dropped once idle for `timeout` seconds
    (as Redis drops it), not kept with its output for ever."""
    p = proxy_factory(args=("--timeout", "2"))
    with upstream.raw(auth=True) as d:
        assert d.call("SET", "bigv", "b" * MB) == b"OK"
    s = slow_reader(p.port, 50, ["bigv"])
    s.sendall(encode("QUIT"))
    time.sleep(6)  # timeout, plus the once-a-second check, plus slack
    got = drain_until_closed(s, timeout=10)
    s.close()
    assert got < 40 * MB, "client got %.0f MB: it was kept open" % mb(got)


@pytest.mark.timeout(60)
def test_client_reading_a_long_reply_does_not_time_out(upstream, proxy_factory):
    """A client that reads its replies, slowly, is active (Redis's last
    interaction counts writes): `timeout` does not cut it off even when it
    sends nothing for longer than that."""
    p = proxy_factory(args=("--timeout", "1"))
    with upstream.raw(auth=True) as d:
        assert d.call("SET", "bigv", "b" * MB) == b"OK"
    s = socket.create_connection((HOST, p.port))
    s.sendall(encode("GET", "bigv") * 40)
    n, deadline = 0, time.monotonic() + 30
    while n < 40 * MB and time.monotonic() < deadline:
        chunk = s.recv(MB)  # about 10 MB a second: 4 s in all
        if not chunk:
            break
        n += len(chunk)
        time.sleep(0.1)
    s.close()
    assert n >= 40 * MB, "cut off after %d bytes" % n


def bg_send(c, data):
    """Sends data on c's socket from a thread (the proxy may stop reading
    it for a while); returns the socket (a duplicate) and the thread."""
    s = socket.socket(fileno=os.dup(c.sock.fileno()))
    s.settimeout(None)

    def run():
        try:
            s.sendall(data)
        except OSError:
            pass
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return s, t


@pytest.mark.timeout(90)
def test_local_replies_behind_blocked_command_are_bounded(proxy, upstream):
    """ECHO answered by the proxy, pipelined behind BLPOP 0: each 1 MB reply
    waits in a slot until the BLPOP's reply is in. Those bytes count in the
    64 MB that pause the client's input, as forwarded requests do; the rest
    waits in the socket, not in the proxy's memory."""
    n, arg = 240, "e" * MB
    c = proxy.raw(auth=True, timeout=60)
    assert c.call("ECHO", "x") == b"x"          # ECHO now answered locally
    pid = proxy.proc.pid
    base = proc_status(pid)["VmRSS"]
    s, t = bg_send(c, encode("BLPOP", "bq", 0) + encode("ECHO", arg) * n)
    time.sleep(4)
    grown = proc_status(pid)["VmRSS"] - base
    upstream.raw(auth=True).cmd("RPUSH", "bq", "x")
    frames = c.read_many_fast(n + 1, timeout=60)
    t.join(10)
    s.close()
    assert frames[0].value == [b"bq", b"x"]
    assert all(f.value == arg.encode() for f in frames[1:])
    assert grown < 160 * MB, "proxy RSS grew %.0f MB" % mb(grown)


@pytest.mark.timeout(90)
def test_idle_clients_do_not_keep_their_largest_buffers(proxy):
    """8 clients each get one 100 MB ECHO reply (read in full) and then sit
    idle: as Redis, the proxy does not keep a buffer of that size for each
    (the reply was made in the client's scratch buffer)."""
    pid = proxy.proc.pid
    cs = [proxy.raw(auth=True, timeout=60) for _ in range(8)]
    for c in cs:
        assert c.call("ECHO", "x") == b"x"
    base = proc_status(pid)["VmRSS"]
    arg = "e" * (100 * MB)
    for c in cs:
        assert len(c.call("ECHO", arg)) == 100 * MB
    time.sleep(2)
    grown = proc_status(pid)["VmRSS"] - base
    for c in cs:
        c.close()
    assert grown < 200 * MB, "8 idle clients hold %.0f MB" % mb(grown)


@contextlib.contextmanager
def stopped(upstream):
    """Redis stopped (SIGSTOP) for the with block."""
    upstream.proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        upstream.proc.send_signal(signal.SIGCONT)


def test_pipeline_behind_blocked_command_is_bounded(proxy_factory, upstream):
    """A client pipelines 300,000 PINGs behind a BLPOP 0. Redis would keep
    them in its query buffer; the proxy stops reading the client once it
    holds 16,384 reply slots (PX_CLIENT_MAX_SLOTS), so what the client sends
    waits in the socket buffers, and the proxy's memory stays bounded (each
    queued PING used to hold about 1.3 KB: ~400 MB here). Once the BLPOP is
    answered, every reply arrives, in order."""
    n = 300000
    p = proxy_factory()
    c = p.raw()
    assert c.cmd("PING").raw == b"+PONG\r\n"
    send = BackgroundSend(c, encode("BLPOP", "bq", 0) + encode("PING") * n)
    grown = send.start_and_measure(p.proc.pid, settle=2)
    upstream.raw(auth=True).cmd("RPUSH", "bq", "x")
    frames = c.read_many_fast(n + 1, timeout=60)
    send.join()
    assert frames[0].raw == b"*2\r\n$2\r\nbq\r\n$1\r\nx\r\n"
    assert all(f.raw == b"+PONG\r\n" for f in frames[1:])
    print("\n[pipeline behind BLPOP] proxy RSS grew %.1f MB while %d PINGs waited" % (mb(grown), n))
    assert grown < 100 * MB, "proxy RSS grew %.1f MB" % mb(grown)


@pytest.mark.timeout(90)
def test_local_replies_behind_blocked_commands_of_many_clients_are_bounded(proxy, upstream):
    """40 clients each send BLPOP 0 and then 16,383 PINGs (98 KB): the PINGs
    answered here wait behind the BLPOP, as one slot per run of them, not a
    slot (a record and a 1 KB buffer) each: about 21 MB per client before,
    840 MB here, where Redis would hold what they sent."""
    n, clients = 16383, 40
    cs = [proxy.raw(auth=True, timeout=60) for _ in range(clients)]
    for c in cs:
        assert c.cmd("PING").raw == b"+PONG\r\n"  # answered locally from now on
    pid = proxy.proc.pid
    base = proc_status(pid)["VmRSS"]
    for i, c in enumerate(cs):
        c.send(encode("BLPOP", "bq%d" % i, 0) + b"PING\r\n" * n)
    time.sleep(3)
    grown = proc_status(pid)["VmRSS"] - base
    d = upstream.raw(auth=True)
    for i, c in enumerate(cs):
        d.cmd("RPUSH", "bq%d" % i, "x")
        frames = c.read_many_fast(n + 1, timeout=60)
        assert frames[0].value == [b"bq%d" % i, b"x"]
        assert all(f.raw == b"+PONG\r\n" for f in frames[1:])
        c.close()
    print("\n[local replies behind BLPOP, %d clients] proxy RSS grew %.1f MB" % (clients, mb(grown)))
    assert grown < 60 * MB, "proxy RSS grew %.1f MB" % mb(grown)


def test_clients_that_reset_during_a_stall_free_their_place_at_once(proxy_factory, upstream):
    """Redis stalls; 50 clients (maxclients 50) each send a GET and reset
    the connection (a client that timed out and redials). Nothing can be
    written to them: their sockets and places go at once, while their GETs
    wait for Redis, and a new client is served (before: refused with "max
    number of clients reached" until Redis answered or upstream-timeout)."""
    p = proxy_factory(args=("--maxclients", "50"))
    with p.raw() as w:
        assert w.cmd("PING").raw == b"+PONG\r\n"  # answered locally from now on
    with stopped(upstream):
        for i in range(50):
            s = socket.create_connection((HOST, p.port))
            s.sendall(encode("GET", "k%d" % i))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        time.sleep(1)
        with p.raw() as c:
            assert c.cmd("PING", timeout=5).raw == b"+PONG\r\n"
    with p.raw() as c:
        assert c.cmd("GET", "k1", timeout=10).raw == b"$-1\r\n"


def test_pipeline_to_stopped_redis_is_bounded(proxy_factory, upstream):
    """Redis stops reading (SIGSTOP) while a client pipelines 3,000 SETs of
    100 KB (300 MB; write batching off, which would hold it at one block):
    the proxy stops reading the client once 64 MB of its requests are in
    flight (PX_CLIENT_MAX_INFLIGHT_BYTES) instead of buffering all of them.
    Once Redis runs again every SET is answered, in order, and stored."""
    n, value = 3000, b"v" * 100000
    p = proxy_factory(args=("--batch-max-commands", "0"))
    c = p.raw()
    assert c.cmd("PING").raw == b"+PONG\r\n"
    assert c.cmd("SET", "warm", "1").raw == b"+OK\r\n"  # the upstream connection exists
    payload = b"".join(encode("SET", "big%d" % i, value) for i in range(n))
    send = BackgroundSend(c, payload)
    with stopped(upstream):
        grown = send.start_and_measure(p.proc.pid)
    frames = c.read_many_fast(n, timeout=60)
    send.join()
    assert all(f.raw == b"+OK\r\n" for f in frames)
    assert upstream.raw(auth=True).cmd("STRLEN", "big%d" % (n - 1)).value == len(value)
    print("\n[pipeline to a stopped Redis] proxy RSS grew %.1f MB while %d MB waited" % (mb(grown), mb(len(payload))))
    assert grown < 160 * MB, "proxy RSS grew %.1f MB" % mb(grown)


def test_many_clients_to_stopped_redis_are_bounded_together(proxy_factory, upstream):
    """The per-client bound lets each client hold 64 MB for a Redis that
    stopped reading; 8 clients pipelining 40 MB each used to make the proxy
    hold all 320 MB. upstream-output-limit bounds them together: past it no
    client is read (the rest waits in the socket buffers), and when Redis
    reads again every client is read again, in turn, and every command is
    answered, in order, and stored."""
    nclients, n, value = 8, 400, b"v" * 100000
    mport = free_port()
    p = proxy_factory(args=("--upstream-output-limit", "32mb", "--metrics-port", str(mport)))
    m = Metrics(mport)
    clients = [p.raw() for _ in range(nclients)]
    for c in clients:
        assert c.cmd("SET", "warm", "1").raw == b"+OK\r\n"  # its upstream connection exists
    sends = [BackgroundSend(c, b"".join(encode("SET", "many%d:%d" % (i, j), value) for j in range(n)))
             for i, c in enumerate(clients)]
    base = proc_status(p.proc.pid)["VmRSS"]
    with stopped(upstream):
        for s in sends:
            s.t.start()
        m.wait(lambda d: d["clients_paused_upstream_output"] == nclients, 10, "every client paused")
        time.sleep(1)  # the proxy reads what it will
        grown = proc_status(p.proc.pid)["VmRSS"] - base
        d = m.get()
        assert d["upstream_output_bytes"] < 40 * MB, d["upstream_output_bytes"]
        assert d["upstream_output_limit_pauses"] >= nclients
    for c in clients:
        assert [f.raw for f in c.read_many_fast(n, timeout=60)] == [b"+OK\r\n"] * n
    for s in sends:
        s.join()
    m.wait(lambda d: d["clients_paused_upstream_output"] == 0 and d["upstream_output_bytes"] == 0, 5, "none paused")
    with upstream.raw(auth=True) as d:
        assert [d.call("STRLEN", "many%d:%d" % (i, n - 1)) for i in range(nclients)] == [len(value)] * nclients
    print("\n[%d clients to a stopped Redis] proxy RSS grew %.1f MB while %d MB waited"
          % (nclients, mb(grown), mb(nclients * n * len(value))))
    assert grown < 100 * MB, "proxy RSS grew %.1f MB" % mb(grown)


def test_records_of_small_requests_to_stopped_redis_count_in_the_limit(proxy_factory, upstream):
    """Many clients pipeline small GETs (about 30 bytes each) to a stopped
    Redis: what upstream-output-limit counted was their bytes, but each
    request also holds a record of some 200 bytes until Redis answers, ten
    times its bytes, so with a 2mb limit the records grew to some 45 MB. The
    limit now counts the records of the requests awaited on shared
    connections too: the proxy holds about 2 MB for them. When Redis runs
    again every GET is answered, in order."""
    nclients, n = 24, 12000
    mport = free_port()
    p = proxy_factory(args=("--upstream-output-limit", "2mb", "--metrics-port", str(mport)))
    m = Metrics(mport)
    clients = [p.raw() for _ in range(nclients)]
    for c in clients:
        assert c.cmd("GET", "warm").raw == b"$-1\r\n"
    sends = [BackgroundSend(c, b"".join(encode("GET", "r%d:%d" % (i, j)) for j in range(n)))
             for i, c in enumerate(clients)]
    base = proc_status(p.proc.pid)["VmRSS"]
    with stopped(upstream):
        for s in sends:
            s.t.start()
        time.sleep(3)  # the proxy reads what it will
        grown = proc_status(p.proc.pid)["VmRSS"] - base
        d = m.get()
    print("\n[%d clients, %d small GETs to a stopped Redis] proxy RSS grew %.1f MB; %d requests pending, "
          "%d bytes unwritten" % (nclients, nclients * n, mb(grown), d.get("upstream_requests_pending", -1),
                                  d["upstream_output_bytes"]))
    assert grown < 20 * MB, "proxy RSS grew %.1f MB" % mb(grown)
    assert d["clients_paused_upstream_output"] >= 1, d
    assert d["upstream_requests_pending"] * 200 < 3 * MB, d
    for c in clients:
        assert [f.raw for f in c.read_many_fast(n, timeout=60)] == [b"$-1\r\n"] * n
    for s in sends:
        s.join()
    m.wait(lambda d: d["clients_paused_upstream_output"] == 0 and d["upstream_requests_pending"] == 0, 5,
           "none paused, none pending")


def test_reload_that_lifts_upstream_output_limit_reads_paused_clients(tmp_path, upstream):
    """Clients paused at upstream-output-limit are read again as soon as a
    reload (SIGHUP) lifts the limit, Redis still stopped; then everything is
    answered."""
    n, value = 200, b"v" * 100000
    port, mport = free_port(), free_port()
    conf = tmp_path / "sidecache.conf"
    text = "upstream redis://127.0.0.1:%d\nport %d\nmetrics-port %d\nupstream-output-limit %%s\n" % (
        upstream.port, port, mport)
    conf.write_text(text % "8mb")
    bin_ = os.environ.get("SIDECACHE_BIN") or os.path.join(os.path.dirname(__file__), "..", "..", "sidecache")
    proc = subprocess.Popen([bin_, str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        m = Metrics(mport)
        deadline = time.monotonic() + 5
        while not port_accepts(port):
            assert time.monotonic() < deadline, "the proxy does not listen"
            time.sleep(0.05)
        clients = [RawClient(port) for _ in range(2)]
        for c in clients:
            assert c.cmd("SET", "warm", "1").raw == b"+OK\r\n"
        sends = [BackgroundSend(c, b"".join(encode("SET", "lift%d:%d" % (i, j), value) for j in range(n)))
                 for i, c in enumerate(clients)]
        with stopped(upstream):
            for s in sends:
                s.t.start()
            m.wait(lambda d: d["clients_paused_upstream_output"] == 2, 10, "both clients paused")
            conf.write_text(text % "0")
            proc.send_signal(signal.SIGHUP)
            m.wait(lambda d: d["clients_paused_upstream_output"] == 0 and d["upstream_output_bytes"] > 16 * MB,
                   10, "the clients read again")
        for c in clients:
            assert [f.raw for f in c.read_many_fast(n, timeout=60)] == [b"+OK\r\n"] * n
        for s in sends:
            s.join()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


@pytest.mark.parametrize("session", ["watch-multi", "tunnel"])
def test_own_connection_to_stopped_redis_is_bounded(proxy_factory, upstream, session):
    """The same on a connection of the client's own: commands queued in a
    WATCH ... MULTI (one reply record for all of them), or sent through a
    tunnel (after UNSUBSCRIBE), while Redis stops reading. The proxy stops
    reading the client once 64 MB wait to be written to that connection,
    where it used to buffer all 300 MB; once Redis runs again, everything
    arrives and is answered."""
    n, value = 3000, b"v" * 100000
    p = proxy_factory()
    c = p.raw()
    if session == "watch-multi":
        assert c.cmd("WATCH", "w").raw == b"+OK\r\n"
        assert c.cmd("MULTI").raw == b"+OK\r\n"
        want = [b"+QUEUED\r\n"] * n
    else:
        assert c.cmd("UNSUBSCRIBE").raw.startswith(b"*3\r\n$11\r\nunsubscribe\r\n")
        want = [b"+OK\r\n"] * n
    payload = b"".join(encode("SET", "own%d" % i, value) for i in range(n))
    send = BackgroundSend(c, payload)
    with stopped(upstream):
        grown = send.start_and_measure(p.proc.pid)
    assert [f.raw for f in c.read_many_fast(n, timeout=60)] == want
    send.join()
    if session == "watch-multi":
        assert len(c.cmd("EXEC", timeout=60).value) == n
    assert upstream.raw(auth=True).cmd("STRLEN", "own%d" % (n - 1)).value == len(value)
    print("\n[%s to a stopped Redis] proxy RSS grew %.1f MB while %d MB waited"
          % (session, mb(grown), mb(len(payload))))
    assert grown < 160 * MB, "proxy RSS grew %.1f MB" % mb(grown)
