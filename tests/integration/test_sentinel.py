"""
upstream-sentinel: one master, one replica and three sentinels on loopback.
The proxy takes the master from the sentinels, follows a failover (the master
killed), empties its cache on the switch (C6), loses no acknowledged write,
and serves nothing older than the switch.
"""
import contextlib
import os
import socket
import time

import pytest

from cachehelpers import RELAY_ARGS, Relay, Stats, wait_tracking_active, warm
from helpers import HOST, REDIS_SERVER, ConnectionClosed, Forwarder, Listener, RedisServer, encode, wait_until

pytestmark = pytest.mark.proxy_only


class Sentinel(RedisServer):
    def __init__(self, workdir, master_port):
        super().__init__(workdir, name="sentinel")
        self.master_port = master_port

    def argv(self):
        conf = os.path.join(self.workdir, "sentinel-%s.conf" % self.port)
        with open(conf, "w") as f:
            f.write("sentinel monitor mymaster %s %d 2\n" % (HOST, self.master_port))
            f.write("sentinel down-after-milliseconds mymaster 400\n")
            f.write("sentinel failover-timeout mymaster 4000\n")
            f.write("sentinel parallel-syncs mymaster 1\n")
        return [REDIS_SERVER, conf, "--sentinel", "--port", str(self.port), "--bind", HOST,
                "--daemonize", "no", "--protected-mode", "no", "--dir", self.workdir,
                "--logfile", self.logpath]


@pytest.fixture
def sentinel_setup(redis_factory, tmp_path_factory):
    master = redis_factory(name="master")
    replica = redis_factory(name="replica", args=("--replicaof", HOST, str(master.port)))
    wait_until(lambda: replica.client().info("replication")["master_link_status"] == "up", timeout=10,
               what="the replica to sync")
    sentinels = []
    for _ in range(3):
        s = Sentinel(tmp_path_factory.mktemp("sentinel"), master.port)
        s.start()
        sentinels.append(s)
    # every sentinel knows the replica and the other sentinels
    wait_until(lambda: all(int(s.client().sentinel_master("mymaster")["num-other-sentinels"]) == 2 and
                           int(s.client().sentinel_master("mymaster")["num-slaves"]) == 1 for s in sentinels),
               timeout=15, what="sentinels to discover each other")
    yield master, replica, sentinels
    for s in sentinels:
        s.stop()


def test_follows_failover(sentinel_setup, proxy_factory):
    master, replica, sentinels = sentinel_setup
    addrs = ",".join("%s:%d" % (HOST, s.port) for s in sentinels)
    p = proxy_factory(args=("--upstream-sentinel", "mymaster", addrs, "--sentinel-check-ms", "100",
                            "--tracking-keepalive-ms", "100", "--tracking-timeout-ms", "500"))
    st = Stats(p)
    wait_tracking_active(p, stats=st)
    # the log names the sentinels' master, not the URL's unused address
    with open(p.logpath) as f:
        log = f.read()
    assert 'ready upstream-sentinel="mymaster %s"' % addrs in log, log
    assert "sentinel: master at %s:%d" % (HOST, master.port) in log, log
    c = p.raw(auth=True)
    # through the proxy to the master; cached
    assert c.cmd("SET", "i1", "before").raw == b"+OK\r\n"
    assert master.client().get("i1") == b"before"
    warm(c, st, ("GET", "i1"))
    acked = {}
    for i in range(200):
        k = "k%d" % i
        assert c.cmd("SET", k, str(i)).raw == b"+OK\r\n"
        acked[k] = str(i).encode()
    # the replica has them before the master dies (what Redis promises
    # for acknowledged writes across a failover needs WAIT)
    assert c.cmd("WAIT", "1", "5000").raw == b":1\r\n"
    flushes_before = st.get()["cache_flushes"]

    master.kill()
    # the proxy follows: a write through it reaches the promoted replica
    def write_goes_to_new_master():
        r = c.cmd("SET", "after_switch", "yes", timeout=5)
        return r.raw == b"+OK\r\n" and replica.client().get("after_switch") == b"yes"
    wait_until(write_goes_to_new_master, timeout=30, interval=0.1, what="the proxy to follow the failover")
    assert replica.client().info("replication")["role"] == "master"
    # the cache was emptied on the switch, and tracking is back on the new master
    info = wait_tracking_active(p, stats=st)
    assert info["cache_flushes"] > flushes_before, info
    # nothing acknowledged is lost
    new = replica.client()
    for k, v in acked.items():
        assert new.get(k) == v, k
    # nothing older than the switch: a change made on the new master is seen
    new.set("i1", "after")
    wait_until(lambda: c.cmd("GET", "i1").raw == b"$5\r\nafter\r\n", timeout=2, interval=0.01,
               what="the new value through the proxy")
    # and it is cached again, and invalidated again, on the new master
    warm(c, st, ("GET", "i1"))
    new.set("i1", "again")
    wait_until(lambda: c.cmd("GET", "i1").raw == b"$5\r\nagain\r\n", timeout=2, interval=0.01,
               what="invalidation from the new master")


def test_bad_sentinel_directive(proxy_factory):
    with pytest.raises(RuntimeError) as e:
        proxy_factory(args=("--upstream-sentinel", "mymaster", "127.0.0.1"))
    assert "is not host:port" in str(e.value)


class Ipv6Sentinel(Sentinel):
    """A sentinel that listens on ::1 too."""

    def argv(self):
        a = super().argv()
        i = a.index("--bind") + 2
        return a[:i] + ["::1"] + a[i:]   # (6.2 takes the addresses as words of their own)


def test_sentinel_given_as_a_bracketed_ipv6_address(redis_factory, tmp_path_factory, proxy_factory):
    """upstream-sentinel takes [::1]:PORT, as a URL writes an IPv6 address:
    the sentinel is asked at ::1, not looked up as a host name."""
    master = redis_factory(name="master")
    s = Ipv6Sentinel(tmp_path_factory.mktemp("sentinel6"), master.port)
    s.start()
    try:
        p = proxy_factory(args=("--upstream-sentinel", "mymaster", "[::1]:%d" % s.port))
        c = p.raw(auth=True)
        wait_until(lambda: c.cmd("SET", "k", "v", timeout=10).raw == b"+OK\r\n", timeout=10, interval=0.05,
                   what="the master, from the sentinel at [::1]")
        assert master.client().get("k") == b"v"
    finally:
        s.stop()


def test_hung_sentinel_first_in_list_does_not_stall(redis_factory, tmp_path_factory, proxy_factory):
    """The first sentinel listed accepts connections and never answers; the
    second answers. Each ask waits up to 250 ms in the event loop, so asking
    the hung one first at every check (here every 100 ms) stalled every
    client for 250 ms each time; once the second has answered it is asked
    first, and the clients are not held up."""
    master = redis_factory(name="master")
    s = Sentinel(tmp_path_factory.mktemp("sentinel"), master.port)
    s.start()
    hung = socket.socket()
    hung.bind((HOST, 0))
    hung.listen(64)  # connects complete in the backlog; nothing is ever read or written
    try:
        p = proxy_factory(args=("--upstream-sentinel", "mymaster",
                                "%s:%d,%s:%d" % (HOST, hung.getsockname()[1], HOST, s.port),
                                "--sentinel-check-ms", "100"))
        c = p.raw()
        assert c.cmd("SET", "k", "v").raw == b"+OK\r\n"
        slow, t_end = [], time.monotonic() + 2.0
        while time.monotonic() < t_end:
            t0 = time.monotonic()
            assert c.cmd("GET", "k").raw == b"$1\r\nv\r\n"
            dt = time.monotonic() - t0
            if dt > 0.2:
                slow.append(dt)
            time.sleep(0.01)
        assert len(slow) <= 1, "GETs held up over 200 ms: %s" % ["%.0f ms" % (x * 1000) for x in slow]
    finally:
        hung.close()
        s.stop()


class FakeSentinel(Listener):
    """Answers SENTINEL get-master-addr-by-name with self.master (changeable)."""

    def __init__(self, port):
        self.master = port
        self.asks = 0
        super().__init__()
        self.addr = "%s:%d" % (HOST, self.port)

    def _accepted(self, s):
        buf = b""
        with s:
            while True:
                try:
                    x = s.recv(4096)
                except OSError:
                    return
                if not x:
                    return
                buf += x
                if buf.count(b"\r\n") >= 7:  # *3 SENTINEL get-master-addr-by-name <name>
                    self.asks += 1
                    p = str(self.master).encode()
                    s.sendall(b"*2\r\n$9\r\n127.0.0.1\r\n$%d\r\n%s\r\n" % (len(p), p))
                    buf = b""

    def close(self):
        self.stop_accepting()  # (close alone leaves its accept thread listening)


def test_failover_disconnects_every_client_with_its_own_connection(redis_factory, proxy_factory):
    """A master switch closes the connection of every client that has one of
    its own (README: Failover). Subscribers, a WATCH and a sticky client."""
    a, b = redis_factory(name="a"), redis_factory(name="b")
    s = FakeSentinel(a.port)
    try:
        p = proxy_factory(up=a, args=("--upstream-sentinel", "mymaster", s.addr, "--sentinel-check-ms", "100"))
        subs = [p.raw() for _ in range(3)]
        for i, c in enumerate(subs):
            assert c.cmd("SUBSCRIBE", "ch%d" % i).raw.startswith(b"*3\r\n$9\r\nsubscribe")
        w = p.raw()
        assert w.cmd("WATCH", "x").raw == b"+OK\r\n"
        st = p.raw()
        assert st.cmd("CLIENT", "ID").raw.startswith(b":")
        s.master = b.port  # failover
        for c in subs + [w, st]:
            c.expect_closed(timeout=5)
        assert a.client().pubsub_numsub("ch0", "ch1", "ch2") == [(b"ch0", 0), (b"ch1", 0), (b"ch2", 0)]
    finally:
        s.close()


def test_a_port_out_of_range_from_a_sentinel_is_not_followed(redis_factory, proxy_factory):
    """A sentinel that names the master at port 99999 (or 0): not a port, so
    not a new master; the next sentinel is asked, the proxy stays on the
    master it has, with the clients and connections it has, and logs why.
    The port used to be taken as it came, truncated to 16 bits: a switch to
    some other port, which closed every client's own connection; then, the
    other sentinels were not asked."""
    a = redis_factory(name="a")
    s, s2 = FakeSentinel(a.port), FakeSentinel(a.port)
    try:
        p = proxy_factory(up=a, args=("--upstream-sentinel", "mymaster", "%s,%s" % (s.addr, s2.addr),
                                      "--sentinel-check-ms", "100"))
        w = p.raw()
        assert w.cmd("WATCH", "x").raw == b"+OK\r\n"
        c = p.raw()
        assert c.cmd("SET", "k", "v").raw == b"+OK\r\n"
        # the first sentinel answers 99999, then 0; the one asked first
        # after it answered well is the second
        for bad, first, then in ((99999, s, s2), (0, s2, s)):
            first.master = bad
            asks, asks2 = first.asks, then.asks
            wait_until(lambda: first.asks > asks and then.asks > asks2, timeout=10, interval=0.05,
                       what="the proxy to ask again, the next sentinel too")
            assert c.cmd("GET", "k").raw == b"$1\r\nv\r\n"
            assert w.cmd("GET", "x").raw == b"$-1\r\n"  # still its own connection, still watching
        assert "not a port" in open(p.logpath).read()
    finally:
        s.close()
        s2.close()


@contextlib.contextmanager
def tunnel_behind_a_relay_with_a_sentinel(redis_factory, proxy_factory):
    """Masters a (behind a Relay, which the FakeSentinel names first) and b,
    a caching proxy following the sentinel, and a tunnel client (CLIENT
    REPLY ON). Yields (a, b, sentinel, relay, tunnel)."""
    a, b = redis_factory(name="a"), redis_factory(name="b")
    relay = Relay(a)
    s = FakeSentinel(relay.port)
    try:
        p = proxy_factory(up=a, args=RELAY_ARGS + ("--upstream-sentinel", "mymaster", s.addr,
                                                   "--sentinel-check-ms", "100"))
        wait_tracking_active(p)
        t = p.raw()
        assert t.cmd("CLIENT", "REPLY", "ON").raw == b"+OK\r\n"
        yield a, b, s, relay, t
    finally:
        relay.release_tracking()
        relay.close()
        s.close()


def test_a_tunnels_reply_held_for_its_barrier_is_relayed_before_a_failover_closes_it(redis_factory,
                                                                                     proxy_factory):
    """A tunnel's write reply waits for its barrier (a PING on the
    invalidation connection, which the relay holds back) when the master
    switches. The switch empties the cache and restarts tracking, which
    passes every barrier, then closes the tunnel's connection: the client
    gets the reply Redis sent before the close, then the close, as without
    a barrier (review-barrier #5: the reply was dropped)."""
    with tunnel_behind_a_relay_with_a_sentinel(redis_factory, proxy_factory) as (a, b, s, relay, t):
        relay.hold_tracking()
        t.send_cmd("SET", "i7", "new")  # a cached key: its reply waits for a barrier
        wait_until(lambda: a.client().get("i7") == b"new", what="the SET to run")
        with pytest.raises(socket.timeout):
            t.read_frame(timeout=0.3)
        s.master = b.port  # failover
        assert t.read_frame(timeout=5).raw == b"+OK\r\n"
        t.expect_closed(timeout=5)


def test_a_tunnels_held_reset_then_commands_at_a_failover_go_to_the_new_master(redis_factory, proxy_factory):
    """The same, with RESET and a write pipelined behind the tunnel's write:
    relayed at the failover, the RESET ends the tunnel and the client goes
    on with its write, which must reach the new master, not the old one's
    connections that the failover closes next (review-session26-diff F4:
    "-ERR sidecache: pool closed", the write perhaps run on the old one)."""
    with tunnel_behind_a_relay_with_a_sentinel(redis_factory, proxy_factory) as (a, b, s, relay, t):
        assert t.cmd("GET", "k").raw == b"$-1\r\n"  # the shared connections are up
        relay.hold_tracking()
        # the write's reply and RESET's come in one read, held together
        t.send(encode("SET", "i7", "new") + encode("RESET") + encode("SET", "k", "after"))
        wait_until(lambda: a.client().get("i7") == b"new", what="the SET to run")
        time.sleep(0.3)
        with pytest.raises(socket.timeout):
            t.read_frame(timeout=0.2)
        s.master = b.port  # failover
        assert t.read_frame(timeout=5).raw == b"+OK\r\n"
        assert t.read_frame(timeout=5).raw == b"+RESET\r\n"
        assert t.read_frame(timeout=5).raw == b"+OK\r\n"
        assert b.client().get("k") == b"after"
        assert a.client().get("k") is None


def test_readonly_replies_ask_the_sentinels_at_most_every_100ms(redis_factory, proxy_factory):
    """A failover under way: the master the sentinels still name has been
    made a replica, and every write to it answers READONLY. Each READONLY
    asks the sentinels where the master is, a blocking exchange in the event
    loop; asked on every one, the proxy held every client up for a round trip
    to a sentinel per loop iteration. At most one ask per 100 ms, and the
    switch still follows the first READONLY after the sentinels name the new
    master (the periodic ask is an hour away here)."""
    a, b = redis_factory(name="a"), redis_factory(name="b")
    s = FakeSentinel(a.port)
    try:
        p = proxy_factory(up=a, args=("--upstream-sentinel", "mymaster", s.addr, "--sentinel-check-ms", "3600000"))
        c = p.raw()
        assert c.cmd("SET", "k", "0").raw == b"+OK\r\n"
        a.client().replicaof(HOST, b.port)
        asks0, t0 = s.asks, time.monotonic()
        for i in range(500):
            assert c.cmd("SET", "k", str(i)).raw.startswith(b"-READONLY")
        elapsed = time.monotonic() - t0
        asked = s.asks - asks0
        assert 1 <= asked <= elapsed / 0.1 + 2, "%d asks in %.2f s" % (asked, elapsed)
        s.master = b.port  # the sentinels name the new master
        t0 = time.monotonic()
        wait_until(lambda: c.cmd("SET", "k", "new").raw == b"+OK\r\n", timeout=2, interval=0.02,
                   what="a write to reach the new master")
        assert b.client().get("k") == b"new"
        print("switched %.3f s after the sentinels named the new master" % (time.monotonic() - t0))
    finally:
        s.close()


def test_failed_connect_then_new_master_moves_every_connection(redis_factory, proxy_factory):
    """A connect to the master fails once (its shared connections stay up),
    then the sentinels name another master: the proxy must switch as on any
    failover (cache emptied, old connections closed), not add the new master
    beside the old one."""
    a, b = redis_factory(name="a"), redis_factory(name="b")
    fwd = Forwarder(a.port)
    s = FakeSentinel(fwd.port)
    try:
        p = proxy_factory(up=a, args=("--upstream-sentinel", "mymaster", s.addr, "--sentinel-check-ms", "100"))
        c = p.raw()
        assert c.cmd("SET", "i7", "old").raw == b"+OK\r\n"
        fwd.stop_accepting()
        w = p.raw()
        # the connect failed: nothing ran, and go-redis retries MASTERDOWN
        assert w.cmd("WATCH", "k").raw.startswith(b"-MASTERDOWN sidecache: upstream")
        s.master = b.port  # failover
        b.client().set("i7", "new")

        def on_new_master():
            try:
                c.cmd("SET", "probe", "1", timeout=2)
            except (ConnectionClosed, OSError):
                return False
            return b.client().get("probe") == b"1"
        wait_until(on_new_master, timeout=5, interval=0.2, what="writes to go to the new master")
        assert c.cmd("GET", "i7").raw == b"$3\r\nnew\r\n"
    finally:
        s.close()
