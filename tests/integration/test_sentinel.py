"""
upstream-sentinel: one master, one replica and three sentinels on loopback.
The proxy takes the master from the sentinels, follows a failover (the master
killed), empties its cache on the switch (C6), loses no acknowledged write,
and serves nothing older than the switch.
"""
import os
import socket
import time

import pytest

from cachehelpers import Stats, wait_tracking_active, warm
from helpers import HOST, REDIS_SERVER, RedisServer, wait_until

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
