"""
tests/integration/test_cluster.py — sidecache in front of a Redis Cluster
master, with key-prefix {N} (JuiceFS keeps a volume under that hash tag,
in one slot): CLUSTER SLOTS names sidecache, at the address the client
reached it by, as the master of every range, with the id of the upstream,
so that a cluster client sends the volume's commands through it (and never
learns another node to read the topology from); the bounds of the ranges
are Redis's. When the slot moves (a resharding, a failover), Redis's MOVED
empties the cache and moves the upstream to the slot's new master. (A
go-redis ClusterClient against a two-master cluster:
tests/interop/cluster_test.go.)
"""
import re
import select
import socket
import threading
import time

import pytest

from cachehelpers import Stats, warm
from helpers import REDIS_VERSION, ConnectionClosed, Listener, encode, pump

pytestmark = pytest.mark.proxy_only


def add_slots(c, lo, hi):
    """CLUSTER ADDSLOTSRANGE lo hi, or on Redis 6.2 (which lacks it) ADDSLOTS
    of every slot in the range."""
    if REDIS_VERSION >= (7, 0):
        return c.call("CLUSTER", "ADDSLOTSRANGE", lo, hi)
    return c.call("CLUSTER", "ADDSLOTS", *[str(s) for s in range(int(lo), int(hi) + 1)])


def one_node_cluster(redis_factory, *args):
    """A one-node cluster holding every slot (args: more for redis-server)."""
    n = redis_factory(args=("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf") + args,
                      name="cluster")
    with n.raw(auth=True) as c:
        assert add_slots(c, "0", "16383") == b"OK"
        deadline = time.monotonic() + 10
        while b"cluster_state:ok" not in c.call("CLUSTER", "INFO"):
            assert time.monotonic() < deadline, "the cluster did not come up"
            time.sleep(0.05)
    return n


@pytest.fixture
def cluster_node(redis_factory):
    return one_node_cluster(redis_factory)


def wait_tracking_active(c):
    """(The test helpers' Stats sends SELECT, which a cluster refuses.)"""
    deadline = time.monotonic() + 10
    while b"tracking_state:active" not in c.call("INFO", "sidecache"):
        assert time.monotonic() < deadline, "tracking not active"
        time.sleep(0.02)


def slots_reply(target, protocol):
    with target.raw(auth=True, protocol=protocol) as c:
        return c.cmd("CLUSTER", "SLOTS").raw


@pytest.mark.parametrize("protocol", [2, 3])
def test_cluster_slots_names_sidecache_as_the_master_of_the_volume_slot(proxy_factory, cluster_node, protocol):
    p = proxy_factory(up=cluster_node, args=("--key-prefix", "{1}"))
    with cluster_node.raw(auth=True) as c:
        node_id = c.call("CLUSTER", "MYID")
    direct = slots_reply(cluster_node, protocol)
    meta = b"*0\r\n" if protocol == 2 else b"%0\r\n"
    # a node that met no other knows no address of its own: ""; 7.0 adds
    # the node's metadata (none here), 6.2 has none
    master = b"*%d\r\n$0\r\n\r\n:%d\r\n$40\r\n%s\r\n%s" % ((4, cluster_node.port, node_id, meta)
                                                        if REDIS_VERSION >= (7, 0) else (3, cluster_node.port, node_id, b""))
    assert direct == b"*1\r\n*3\r\n:0\r\n:16383\r\n" + master
    here = b"*3\r\n$9\r\n127.0.0.1\r\n:%d\r\n$40\r\n%s\r\n" % (p.port, node_id)
    assert slots_reply(p, protocol) == b"*1\r\n*3\r\n:0\r\n:16383\r\n" + here


@pytest.mark.parametrize("prefix", [None, "jfs:", "{}"], ids=["no-prefix", "no-tag", "empty-tag"])
def test_cluster_slots_is_relayed_unchanged_without_a_hash_tag_prefix(proxy_factory, cluster_node, prefix):
    """Keys that may fall in any slot: no one master to stand for."""
    p = proxy_factory(up=cluster_node, args=("--key-prefix", prefix) if prefix else ())
    assert slots_reply(p, 2) == slots_reply(cluster_node, 2)


def test_volume_reads_through_the_named_master_hit_the_cache(proxy_factory, cluster_node):
    p = proxy_factory(up=cluster_node, args=("--key-prefix", "{1}"))
    with p.raw(auth=True) as c:
        wait_tracking_active(c)
        assert c.call("SET", "{1}i2", "attr") == b"OK"
        assert [c.call("GET", "{1}i2") for _ in range(3)] == [b"attr"] * 3
        info = c.call("INFO", "sidecache").decode()
    assert int(info.split("cache_hits:")[1].split("\r\n")[0]) >= 1
    assert "tracking_state:active" in info


@pytest.mark.parametrize("prefix", [None, "jfs:"], ids=["no-prefix", "prefix-without-tag"])
def test_a_cluster_node_without_a_hash_tag_prefix_gets_no_cache(proxy_factory, cluster_node, prefix):
    """In front of a cluster node without a hash-tag key-prefix, cached keys
    may be in any slot, and no probe watches them: a migration would go
    unseen, and a key written on its target would leave a nil cached here
    for good. So the cache stays off (INFO server says redis_mode:cluster),
    and says why. Every read is Redis's: an MGET of two slots gets
    CROSSSLOT (it was answered from the cache), and a WATCH of two slots
    CROSSSLOT (not +OK ahead, then a disconnect)."""
    p = proxy_factory(up=cluster_node, args=("--key-prefix", prefix) if prefix else ())
    pre = prefix or ""
    i2, i3, i4 = pre + "i2", pre + "i3", pre + "i4{%si2}" % pre
    with cluster_node.raw(auth=True) as d:
        for k in (i2, i3, i4):
            assert d.call("SET", k, "attr") == b"OK"
        assert d.call("CLUSTER", "KEYSLOT", i2) != d.call("CLUSTER", "KEYSLOT", i3)
        assert d.call("CLUSTER", "KEYSLOT", i2) == d.call("CLUSTER", "KEYSLOT", i4)
        want = [d.cmd("MGET", i2, i3).raw, d.cmd("MGET", i2, i4).raw, d.cmd("WATCH", i2, i3).raw]
    assert want[0].startswith(b"-CROSSSLOT ") and want[2].startswith(b"-CROSSSLOT "), want
    with p.raw(auth=True) as c:
        wait_tracking_active(c)
        assert info_number(c, "cluster_untagged") == 1
        for _ in range(3):
            assert [c.call("GET", k) for k in (i2, i3, i4)] == [b"attr"] * 3
            assert [c.cmd("MGET", i2, i3).raw, c.cmd("MGET", i2, i4).raw, c.cmd("WATCH", i2, i3).raw] == want
        assert info_number(c, "cache_hits") == 0
        assert info_number(c, "cache_mget_hits") == 0
        assert c.call("PING") == b"PONG"
    assert "cache off: the upstream is a Redis Cluster node (INFO server says redis_mode:cluster)" in \
        open(p.logpath).read()


def test_a_cluster_node_that_may_not_say_so_is_known_by_its_first_redirection(proxy_factory, two_masters):
    """The upstream user may not run INFO: the node's redis_mode is not
    known, and the cache serves, until Redis's first MOVED or ASK shows a
    cluster node; from then on it is off, as above."""
    a, b, id_a, id_b = two_masters
    with a.raw(auth=True) as d:
        assert d.call("ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info") == b"OK"
    p = proxy_factory(up=a, upstream_url="redis://noinfo:pw@127.0.0.1:%d" % a.port)
    ours, theirs = "i2{2}", "i1{1}"  # slots 5649 (A) and 9842 (B)
    with p.raw(auth=True) as c:
        wait_tracking_active(c)
        assert c.call("SET", ours, "attr") == b"OK"
        assert [c.call("GET", ours) for _ in range(3)] == [b"attr"] * 3
        hits = info_number(c, "cache_hits")
        assert hits >= 1 and info_number(c, "cluster_untagged") == 0
        assert c.cmd("GET", theirs).raw.startswith(b"-MOVED 9842 ")
        assert info_number(c, "cluster_untagged") == 1
        assert [c.call("GET", ours) for _ in range(3)] == [b"attr"] * 3
        assert info_number(c, "cache_hits") == hits
    assert "cache off: the upstream is a Redis Cluster node (it answered a redirection)" in open(p.logpath).read()


def test_a_cluster_node_with_a_hash_tag_prefix_keeps_its_cache(proxy_factory, cluster_node):
    p = proxy_factory(up=cluster_node, args=("--key-prefix", "{1}"))
    with p.raw(auth=True) as c:
        wait_tracking_active(c)
        assert info_number(c, "cluster_untagged") == 0
        assert c.call("SET", "{1}i2", "attr") == b"OK"
        assert [c.call("GET", "{1}i2") for _ in range(3)] == [b"attr"] * 3
        assert info_number(c, "cache_hits") >= 1


def info_number(c, name):
    info = c.call("INFO", "sidecache").decode()
    return int(info.split(name + ":")[1].split("\r\n")[0])


def test_a_node_that_says_the_cluster_is_down_serves_nothing_from_the_cache(proxy_factory, cluster_node):
    """A master cut off from most of the cluster's masters (a partition)
    answers keyed commands CLUSTERDOWN, so as to serve nothing stale while
    the majority promotes its replica and takes writes there, and answers
    PING as ever: the invalidation connection stays on. (Here the node's
    cluster is down because a slot, not the volume's, has no owner: the
    same answer.) sidecache's probe of the volume's slot meets it within
    tracking-keepalive-ms; from then on the cache serves nothing (before:
    the cached value, for as long as the partition lasted), until the node
    serves the slot again (review-cluster-failover F3)."""
    p = proxy_factory(up=cluster_node, args=("--key-prefix", "{1}", "--tracking-keepalive-ms", "100"))
    down = b"-CLUSTERDOWN The cluster is down\r\n"
    with p.raw(auth=True) as c, cluster_node.raw(auth=True) as d:
        wait_tracking_active(c)
        assert c.call("SET", "{1}i2", "v1") == b"OK"
        assert [c.call("GET", "{1}i2") for _ in range(3)] == [b"v1"] * 3
        flushes = failover_flushes(c)
        assert d.call("CLUSTER", "DELSLOTS", "0") == b"OK"
        wait_for("the node to say the cluster is down", lambda: d.cmd("GET", "{1}i2").raw == down, timeout=5)
        wait_for("the probe to meet CLUSTERDOWN", lambda: failover_flushes(c) > flushes, timeout=5)
        hits = info_number(c, "cache_hits")
        assert [c.cmd("GET", "{1}i2").raw for _ in range(3)] == [down] * 3
        assert info_number(c, "cache_hits") == hits
        # the cache stays off while the node says so, probe after probe
        time.sleep(0.3)
        assert c.cmd("GET", "{1}i2").raw == down
        assert add_slots(d, "0", "0") == b"OK"
        wait_for("the node to serve the slot", lambda: d.cmd("GET", "{1}i2").raw == b"$2\r\nv1\r\n", timeout=5)
        wait_for("a hit once the probe finds the slot served",
                 lambda: c.call("GET", "{1}i2") == b"v1" and info_number(c, "cache_hits") > hits, timeout=5)
    assert "the cluster is down for this node" in open(p.logpath).read()


class BusFront(Listener):
    """In front of one cluster node's bus (ip:bus_port), on ip:self.port:
    drops the connections from the addresses in self.blocked (each node
    binds an address of its own and sends from it: bind-source-addr)."""

    def __init__(self, ip, bus_port):
        self.ip, self.bus_port = ip, bus_port
        self.blocked = set()
        self.conns = []
        super().__init__(ip)

    def _accepted(self, c):
        src = c.getpeername()[0]
        if src in self.blocked:
            c.close()
            return
        try:
            t = socket.create_connection((self.ip, self.bus_port))
        except OSError:
            c.close()
            return
        self.conns.append((src, c, t))
        for a, b in ((c, t), (t, c)):
            threading.Thread(target=pump, args=(a, b), daemon=True).start()

    def block(self, ips):
        self.blocked |= set(ips)
        for src, c, t in self.conns:
            if src in self.blocked:
                for x in (c, t):
                    try:
                        x.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass


@pytest.mark.skipif(REDIS_VERSION < (7, 0), reason="bind-source-addr is Redis 7's")
@pytest.mark.timeout(120)
def test_a_master_cut_off_in_a_minority_partition_serves_nothing_from_the_cache(proxy_factory, redis_factory):
    """The partition itself: masters A (the volume's slot), C and D, B a
    replica of A, each node on an address of its own, its cluster bus
    behind a front that drops A's traffic. Once A's bus is cut off, the
    majority promotes B, a client writes the key there, and A (still
    reachable by sidecache, answering PING) refuses keyed commands
    CLUSTERDOWN. sidecache must not serve its cached value meanwhile
    (before: the old value, for as long as the partition lasted;
    review-cluster-failover F3)."""
    ips = {"a": "127.0.0.2", "b": "127.0.0.3", "c": "127.0.0.4", "d": "127.0.0.5"}
    nodes, fronts = {}, {}
    try:
        for n, ip in ips.items():
            nodes[n] = redis_factory(name="node-" + n, args=(
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "500",
                "--bind", "127.0.0.1 " + ip, "--bind-source-addr", ip, "--cluster-announce-ip", ip))
            fronts[n] = BusFront(ip, nodes[n].port + 10000)
            nodes[n].client().config_set("cluster-announce-bus-port", str(fronts[n].port))
        ca = nodes["a"].client()
        with nodes["c"].raw() as c:
            add_slots(c, "0", "5460")
        with nodes["a"].raw() as c:
            add_slots(c, "5461", "10922")
        with nodes["d"].raw() as c:
            add_slots(c, "10923", "16383")
        for n in ("b", "c", "d"):
            ca.execute_command("CLUSTER", "MEET", ips[n], str(nodes[n].port), str(fronts[n].port))
        wait_for("the nodes to meet", lambda: all(
            len(nodes[n].client().execute_command("CLUSTER", "NODES").splitlines()) == 4 for n in nodes))
        nodes["b"].client().execute_command("CLUSTER", "REPLICATE", ca.execute_command("CLUSTER", "MYID"))
        wait_for("the cluster to be ok", lambda: all(nodes[n].client().cluster("info")["cluster_state"] == "ok"
                                                     for n in nodes)
                 and nodes["b"].client().info("replication")["master_link_status"] == "up")

        p = proxy_factory(up=nodes["a"], args=("--key-prefix", "{1}", "--tracking-keepalive-ms", "100"))
        with p.raw() as c:
            wait_tracking_active(c)
            assert c.call("SET", "{1}i1", "v1") == b"OK"
            assert [c.call("GET", "{1}i1") for _ in range(3)] == [b"v1"] * 3
            assert info_number(c, "cache_hits") >= 1
            for n in ("b", "c", "d"):
                fronts[n].block([ips["a"]])
            fronts["a"].block([ips[n] for n in ("b", "c", "d")])
            wait_for("B to be promoted", lambda: nodes["b"].client().info("replication")["role"] == "master")
            wait_for("A to see itself in the minority", lambda: ca.cluster("info")["cluster_state"] == "fail")
            assert nodes["b"].client().set("{1}i1", "v2")
            with nodes["a"].raw() as direct:
                down = direct.cmd("GET", "{1}i1").raw
            assert down.startswith(b"-CLUSTERDOWN "), down
            wait_for("the probe to meet CLUSTERDOWN", lambda: c.cmd("GET", "{1}i1").raw == down, timeout=5)
            hits = info_number(c, "cache_hits")
            assert [c.cmd("GET", "{1}i1").raw for _ in range(3)] == [down] * 3
            assert info_number(c, "cache_hits") == hits
    finally:
        for f in fronts.values():
            f.stop_accepting()


@pytest.fixture
def two_masters(redis_factory):
    return make_two_masters(redis_factory)


def make_two_masters(redis_factory, *extra, third=False):
    """A cluster of two masters: A with slots 0-8191, B with 8192-16383 ({1}
    is slot 9842, on B). Returns (A, B, A's id, B's id). third: a third
    master, C, takes B's slots from 12000 on (a failover after a master
    dies needs the votes of a majority of the masters)."""
    nodes, ids = make_masters(redis_factory, *extra, count=3 if third else 2)
    return nodes[0], nodes[1], ids[0], ids[1]


def make_masters(redis_factory, *extra, count=3):
    """A cluster of count (2 or 3) masters: A with slots 0-8191, B with
    8192-11999 ({1}: 9842), C with 12000-16383; with two, B has 8192-16383.
    Returns ((A, B[, C]), (their ids))."""
    args = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf") + extra
    nodes = [redis_factory(args=args, name=n) for n in ("node-a", "node-b", "node-c")[:count]]
    ranges = [("0", "8191"), ("8192", "11999" if count == 3 else "16383"), ("12000", "16383")]
    conns = [n.raw(auth=True) for n in nodes]
    try:
        for c, (lo, hi) in zip(conns, ranges):
            assert add_slots(c, lo, hi) == b"OK"
        for n in nodes[1:]:
            assert conns[0].call("CLUSTER", "MEET", "127.0.0.1", str(n.port)) == b"OK"
        wait_for("the nodes did not form a cluster", lambda: all(
            b"cluster_state:ok" in c.call("CLUSTER", "INFO") and len(c.call("CLUSTER", "SLOTS")) == count
            for c in conns))
        return tuple(nodes), tuple(c.call("CLUSTER", "MYID") for c in conns)
    finally:
        for c in conns:
            c.close()


def test_cluster_slots_names_sidecache_for_every_range(proxy_factory, two_masters):
    """Two masters: both ranges name the proxy, with B's id (the upstream),
    and nothing else: a client that reads the topology again from a node it
    learned would learn B's own address, and go around the cache."""
    a, b, id_a, id_b = two_masters
    p = proxy_factory(up=b, args=("--key-prefix", "{1}"))
    here = b"*3\r\n$9\r\n127.0.0.1\r\n:%d\r\n$40\r\n%s\r\n" % (p.port, id_b)
    for protocol in (2, 3):
        assert slots_reply(p, protocol) == (b"*2\r\n*3\r\n:0\r\n:8191\r\n" + here +
                                            b"*3\r\n:8192\r\n:16383\r\n" + here)
    # a key of A's range: Redis's MOVED sends the client to A
    with p.raw(auth=True) as c:
        assert c.cmd("SET", "bar", "x").raw == b"-MOVED 5061 127.0.0.1:%d\r\n" % a.port


def wait_log(p, text, timeout=10):
    deadline = time.monotonic() + timeout
    while True:
        with open(p.logpath) as f:
            log = f.read()
        if text in log:
            return log
        assert time.monotonic() < deadline, "no %r in the log:\n%s" % (text, log[-3000:])
        time.sleep(0.02)


def test_volume_slot_moved_away_empties_the_cache_and_the_upstream_follows(proxy_factory, two_masters):
    """The volume's slot moves from the upstream (B) to A, as in a
    resharding: Redis answers the proxy MOVED, which empties the cache (C6)
    and which the client gets as a TRYAGAIN; the proxy follows the slot to A:
    the volume's reads go to A and hit the cache again (once tracking is
    active there), and CLUSTER SLOTS through the proxy names the proxy,
    now with A's id."""
    a, b, id_a, id_b = two_masters
    p = proxy_factory(up=b, args=("--key-prefix", "{1}"))
    with p.raw(auth=True) as c:
        wait_tracking_active(c)
        assert b"127.0.0.1\r\n:%d\r\n" % p.port in c.cmd("CLUSTER", "SLOTS").raw
        assert c.call("SET", "{1}i2", "v1") == b"OK"
        assert [c.call("GET", "{1}i2") for _ in range(2)] == [b"v1"] * 2
        with a.raw(auth=True) as ca, b.raw(auth=True) as cb:
            assert ca.call("CLUSTER", "SETSLOT", "9842", "IMPORTING", id_b) == b"OK"
            assert cb.call("CLUSTER", "SETSLOT", "9842", "MIGRATING", id_a) == b"OK"
            assert cb.call("MIGRATE", "127.0.0.1", str(a.port), "", "0", "5000", "KEYS", "{1}i2") == b"OK"
            for n in (ca, cb):
                assert n.call("CLUSTER", "SETSLOT", "9842", "NODE", id_a) == b"OK"
            assert ca.call("SET", "{1}i2", "v2") == b"OK"
            direct = cb.cmd("GET", "{1}i2").raw
        assert direct == b"-MOVED 9842 127.0.0.1:%d\r\n" % a.port
        flushes = failover_flushes(c)
        assert c.cmd("GET", "{1}i2").raw == tryagain(a)
        assert failover_flushes(c) > flushes
    wait_log(p, "cluster: slot 9842 of key-prefix {1} moved from=127.0.0.1:%d to=127.0.0.1:%d" % (b.port, a.port))
    with p.raw(auth=True) as c:
        wait_tracking_active(c)
        hits = int(c.call("INFO", "sidecache").decode().split("cache_hits:")[1].split("\r\n")[0])
        assert [c.call("GET", "{1}i2") for _ in range(3)] == [b"v2"] * 3
        info = c.call("INFO", "sidecache").decode()
        assert int(info.split("cache_hits:")[1].split("\r\n")[0]) > hits
        # A's ranges now: 0-8191, 9842; B's: 8192-9841, 9843-16383
        with a.raw(auth=True) as ca:
            ranges = ca.call("CLUSTER", "SLOTS")
        assert len(ranges) == 4
        here = b"*3\r\n$9\r\n127.0.0.1\r\n:%d\r\n$40\r\n%s\r\n" % (p.port, id_a)
        assert c.cmd("CLUSTER", "SLOTS").raw == b"*4\r\n" + b"".join(
            b"*3\r\n:%d\r\n:%d\r\n" % (r[0], r[1]) + here for r in ranges)
        # a write on A itself reaches the cache through the invalidations
        with a.raw(auth=True) as ca:
            assert ca.call("SET", "{1}i2", "v3") == b"OK"
        deadline = time.monotonic() + 5
        while c.call("GET", "{1}i2") != b"v3":
            assert time.monotonic() < deadline, "a write on the new master was not seen"
            time.sleep(0.01)


def tryagain(node):
    """What a client gets for Redis's MOVED of the volume's slot to node:
    nothing ran, retry (here, where the proxy follows the slot); a MOVED
    would teach a cluster client the node, from which it would read the
    topology (and go around the cache) later."""
    return b"-TRYAGAIN sidecache: slot 9842 moved to 127.0.0.1:%d, which sidecache follows\r\n" % node.port


def failover_flushes(c):
    info = c.call("INFO", "sidecache").decode()
    return int(info.split("cache_flushes_failover:")[1].split("\r\n")[0])


def test_moved_for_another_slot_leaves_the_cache(proxy_factory, two_masters):
    """A client reads a key of A's range through the proxy in front of B
    (redis-cli without -c, a stray key): Redis answers MOVED for slot 5061,
    which says nothing of the volume's slot 9842, the only one the cache can
    hold keys of (key-prefix {1}): the cache stays. (Any client could
    otherwise empty everyone's cache, as often as it likes.)"""
    a, b, _, _ = two_masters
    p = proxy_factory(up=b, args=("--key-prefix", "{1}"))
    with p.raw(auth=True) as c:
        wait_tracking_active(c)
        assert c.call("SET", "{1}i2", "v1") == b"OK"
        assert [c.call("GET", "{1}i2") for _ in range(3)] == [b"v1"] * 3
        flushes = failover_flushes(c)
        assert c.cmd("GET", "bar").raw == b"-MOVED 5061 127.0.0.1:%d\r\n" % a.port
        assert failover_flushes(c) == flushes


def test_a_script_error_saying_moved_is_no_failover(proxy_factory, upstream):
    """A script may return any error text (redis.error_reply): one that
    reads like MOVED (or LOADING, READONLY, MASTERDOWN) tells nothing of
    Redis's role, and empties no cache for failover (C6)."""
    p = proxy_factory(args=("--key-prefix", "{1}"))
    with p.raw(auth=True) as c:
        wait_tracking_active(c)
        flushes = failover_flushes(c)
        for err in ("MOVED 9842 127.0.0.1:1", "READONLY not really"):
            r = c.cmd("EVAL", "return redis.error_reply('%s')" % err, "0").raw
            assert r == b"-%s\r\n" % err.encode()
        assert failover_flushes(c) == flushes


@pytest.mark.redis(7, 0, "cluster-preferred-endpoint-type")
def test_cluster_slots_names_sidecache_when_redis_prefers_hostnames(proxy_factory, redis_factory):
    """cluster-preferred-endpoint-type hostname (Redis 7): CLUSTER SLOTS
    names each master by its announced hostname, the address in its
    metadata; the upstream (an address) is recognised there all the same."""
    n = one_node_cluster(redis_factory, "--cluster-announce-hostname", "node-b.example",
                         "--cluster-preferred-endpoint-type", "hostname")
    assert b"node-b.example" in slots_reply(n, 2)
    p = proxy_factory(up=n, args=("--key-prefix", "{1}"))
    assert b"$9\r\n127.0.0.1\r\n:%d\r\n" % p.port in slots_reply(p, 2)


def wait_for(what, check, timeout=20, status=None):
    """Until check() is true; on a timeout the assertion says what, with
    status() if given (what was seen)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what if status is None else "%s: %s" % (what, status())
        time.sleep(0.05)


@pytest.fixture
def replica_of_b(redis_factory, two_masters):
    return add_replica_of_b(redis_factory, two_masters)


def add_replica_of_b(redis_factory, two_masters, *extra):
    """R, a replica of B (the master of {1}'s slot), in the cluster of
    two_masters. Returns (A, B, R, R's id)."""
    a, b, _, id_b = two_masters
    r = redis_factory(args=("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf") + extra,
                      name="node-r")
    with r.raw(auth=True) as cr:
        assert cr.call("CLUSTER", "MEET", "127.0.0.1", str(a.port)) == b"OK"
        wait_for("R did not learn B", lambda: id_b in cr.call("CLUSTER", "NODES"))
        assert cr.call("CLUSTER", "REPLICATE", id_b) == b"OK"
        wait_for("R did not sync with B", lambda: b"master_link_status:up" in cr.call("INFO", "replication"))
        # an election R starts asks for votes in the epoch after its own:
        # until it knows the cluster's, the masters ignore it (Redis 6.2
        # often started one too early)
        wait_for("R did not learn the cluster's epoch", lambda: epochs_settled(cr, (a, b, r)))
        # and a manual failover needs R's cluster link to B
        wait_for("R has no link to B", lambda: link_up(cr, id_b))
        # and the masters' votes: a master that still takes R for a master
        # denies it its vote ("it is a master node"; 6.2, often)
        id_r = cr.call("CLUSTER", "MYID")
        wait_for("the masters do not know R as B's replica",
                 lambda: all(replica_of(n, id_r) == id_b for n in (a, b)))
        return a, b, r, id_r


def cluster_nodes(c):
    """CLUSTER NODES on connection c: node id -> the fields of its line
    (id, address, flags, master, ping, pong, config epoch, link, slots...)."""
    return {f[0]: f for f in (ln.split() for ln in c.call("CLUSTER", "NODES").split(b"\n")) if f}


def replica_of(node, node_id):
    """The id of the master node_id replicates, as node sees it (None: a master)."""
    with node.raw(auth=True) as c:
        f = cluster_nodes(c).get(node_id)
    return f[3] if f is not None and f[3] != b"-" else None


def link_up(c, node_id):
    """Whether the node of connection c has its cluster bus link to node_id up."""
    f = cluster_nodes(c)[node_id]
    return f[7] == b"connected" and b"fail" not in f[2]


def manual_failover(cr, cb):
    """CLUSTER FAILOVER on R (connection cr), until R is the master and B
    (cb) its replica. An election that gets no majority in time ends the
    manual failover after 5 s (add_replica_of_b waits for what the votes
    need; this is the last resort): it is asked again, up to 3 times."""
    def took_over():
        return b"role:master" in cr.call("INFO", "replication") and b"role:slave" in cb.call("INFO", "replication")
    for attempt in range(3):
        if b"role:master" not in cr.call("INFO", "replication"):
            assert cr.call("CLUSTER", "FAILOVER") == b"OK"
        deadline = time.monotonic() + 7
        while not took_over():
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        else:
            return
    raise AssertionError("R did not take over")


def epochs_settled(c, nodes):
    """The masters' config epochs are apart (two masters that both start
    at 0 move one of them up, some time after they meet), as c's node sees
    them, and every node has the same current epoch."""
    config = [f[6] for f in cluster_nodes(c).values() if b"master" in f[2] and len(f) > 8]  # (with slots)
    return len(set(config)) == len(config) and len({current_epoch(n) for n in nodes}) == 1


def current_epoch(node):
    with node.raw(auth=True) as c:
        return c.call("CLUSTER", "INFO").split(b"cluster_current_epoch:")[1].split(b"\r\n")[0]


def test_failover_in_the_cluster_moves_the_upstream_gently(proxy_factory, replica_of_b):
    """R takes over B's slots (CLUSTER FAILOVER). The proxy, in front of B,
    learns it from B's MOVED: the cache is emptied, the upstream moves to
    R, and the volume's reads hit the cache again, coherent with writes
    made on R. Gently: a client with a connection of its own (WATCH) is not
    disconnected; it gets B's MOVED, and once it gives that connection back,
    its commands go to R."""
    a, b, r, id_r = replica_of_b
    p = proxy_factory(up=b, args=("--key-prefix", "{1}"))
    with p.raw(auth=True) as c, p.raw(auth=True) as w:
        wait_tracking_active(c)
        assert c.call("SET", "{1}i2", "v1") == b"OK"
        assert [c.call("GET", "{1}i2") for _ in range(2)] == [b"v1"] * 2
        assert w.call("WATCH", "{1}i2") == b"OK"       # w has a connection to B of its own

        with r.raw(auth=True) as cr, b.raw(auth=True) as cb:
            manual_failover(cr, cb)
            assert cr.call("SET", "{1}i2", "v2") == b"OK"
            moved = b"-MOVED 9842 127.0.0.1:%d\r\n" % r.port
            wait_for("B did not send clients to R", lambda: cb.cmd("GET", "{1}i2").raw == moved)

        # v1 is gone from the cache (B's invalidation, or its MOVED), and the
        # reads end up on R
        seen = []
        wait_for("the proxy did not follow the slot to R",
                 lambda: seen.append(c.cmd("GET", "{1}i2").raw) or seen[-1] == b"$2\r\nv2\r\n", timeout=10,
                 status=lambda: "replies %r; B: %r; log:\n%s" % (
                     sorted(set(seen)), b.raw(auth=True).call("INFO", "replication"), open(p.logpath).read()[-3000:]))
        wait_log(p, "cluster: slot 9842 of key-prefix {1} moved from=127.0.0.1:%d to=127.0.0.1:%d"
                 % (b.port, r.port))
        wait_tracking_active(c)
        hits = int(c.call("INFO", "sidecache").decode().split("cache_hits:")[1].split("\r\n")[0])
        assert [c.call("GET", "{1}i2") for _ in range(3)] == [b"v2"] * 3
        assert int(c.call("INFO", "sidecache").decode().split("cache_hits:")[1].split("\r\n")[0]) > hits
        with r.raw(auth=True) as cr:
            assert cr.call("SET", "{1}i2", "v3") == b"OK"
        wait_for("a write on R was not seen", lambda: c.call("GET", "{1}i2") == b"v3", timeout=5)
        here = b"*3\r\n$9\r\n127.0.0.1\r\n:%d\r\n$40\r\n%s\r\n" % (p.port, id_r)
        assert c.cmd("CLUSTER", "SLOTS").raw == (b"*2\r\n*3\r\n:0\r\n:8191\r\n" + here +
                                                 b"*3\r\n:8192\r\n:16383\r\n" + here)

        # w: still connected, on B, which now answers MOVED: w gets it as it
        # is (a TRYAGAIN would come back to B, which holds w's WATCH)
        assert w.cmd("GET", "{1}i2").raw == moved
        assert w.call("UNWATCH") == b"OK"
        assert w.call("GET", "{1}i2") == b"v3"


@pytest.mark.parametrize("topology", ["read by a client", "never read by a client"])
def test_master_dies_and_the_upstream_follows_the_promoted_replica(proxy_factory, redis_factory, topology):
    """B, the upstream, is killed; the cluster promotes R. No MOVED can say
    so (B is gone), so the proxy asks the nodes the last CLUSTER SLOTS
    named where the slot is now (a client's through it, or its own: it asks
    with its probes of the slot, slotwatch.h), and moves there: the volume's
    commands work again through the proxy, and its reads hit the cache.
    Until then commands get CLUSTERDOWN (they did not run)."""
    fast = ("--cluster-node-timeout", "1000")
    a, b, r, id_r = add_replica_of_b(redis_factory, make_two_masters(redis_factory, *fast, third=True), *fast)
    p = proxy_factory(up=b, args=("--key-prefix", "{1}"))
    with p.raw(auth=True) as c:
        wait_tracking_active(c)
        assert c.call("SET", "{1}i2", "v1") == b"OK"
        with r.raw(auth=True) as cr:                       # R has it (replication is async)
            assert cr.call("READONLY") == b"OK"
            wait_for("R did not get v1", lambda: cr.call("GET", "{1}i2") == b"v1")
        if topology == "read by a client":
            c.cmd("CLUSTER", "SLOTS")                       # as a cluster client reads it
        else:
            time.sleep(1.5)                                 # the proxy's first probe asked it
    b.kill()
    seen = []
    with p.raw(auth=True) as c:
        # at once, while R cannot be master yet (the node timeout, 1 s, and
        # an election): later the proxy may have moved before a first GET
        seen.append(c.cmd("GET", "{1}i2").raw)
        with r.raw(auth=True) as cr:
            wait_for("R was not promoted", lambda: b"role:master" in cr.call("INFO", "replication"))
        wait_for("the proxy did not move to R", lambda: seen.append(c.cmd("GET", "{1}i2").raw) or
                 seen[-1] == b"$2\r\nv1\r\n", timeout=15,
                 status=lambda: "replies %r; log:\n%s" % (sorted(set(seen)), open(p.logpath).read()[-3000:]))
        wait_log(p, "cluster: slot 9842 of key-prefix {1} moved from=127.0.0.1:%d to=127.0.0.1:%d "
                 "(upstream unreachable" % (b.port, r.port))
        # meanwhile: CLUSTERDOWN, which a cluster client retries after a
        # pause (go-redis, JuiceFS), as a cluster answers while a slot's
        # master is down; not an ERR it gives up on (the first GET may have
        # met the connection B's death closed: "upstream connection lost")
        down = [f for f in seen if f != b"$2\r\nv1\r\n"]
        assert down and all(f.startswith(b"-CLUSTERDOWN sidecache: upstream 127.0.0.1:%d unavailable" % b.port) or
                            f.startswith(b"-CLUSTERDOWN sidecache: upstream connection lost")
                            for f in down), sorted(set(down))
        wait_tracking_active(c)
        hits = int(c.call("INFO", "sidecache").decode().split("cache_hits:")[1].split("\r\n")[0])
        assert [c.call("GET", "{1}i2") for _ in range(3)] == [b"v1"] * 3
        assert int(c.call("INFO", "sidecache").decode().split("cache_hits:")[1].split("\r\n")[0]) > hits
        assert c.call("SET", "{1}i2", "v2") == b"OK"
    with r.raw(auth=True) as cr:
        assert cr.call("GET", "{1}i2") == b"v2"


def test_two_nodes_that_name_each_other_for_the_slot_move_the_upstream_once_a_second(proxy_factory, two_masters):
    """B gave the slot to A (SETSLOT NODE) while A, still importing it, names
    B: each answers MOVED to the other, as for a moment in a resharding
    applied in the wrong order. Every request of a client retrying moved
    the whole upstream (the cache emptied, every connection and the
    invalidation connection made anew: 1,700 connections a second,
    review-cluster F2); now a move that a MOVED asks for comes at least
    PX_FOLLOW_MIN_GAP_MS (1 s) after the last, and clients meanwhile get
    TRYAGAIN."""
    a, b, id_a, id_b = two_masters
    p = proxy_factory(up=b, args=("--key-prefix", "{1}"))
    with p.raw(auth=True) as c:
        wait_tracking_active(c)
    with a.raw(auth=True) as ca, b.raw(auth=True) as cb:
        assert ca.call("CLUSTER", "SETSLOT", "9842", "IMPORTING", id_b) == b"OK"
        assert cb.call("CLUSTER", "SETSLOT", "9842", "NODE", id_a) == b"OK"
    replies = set()
    t0 = time.monotonic()
    with p.raw(auth=True) as c:
        while time.monotonic() - t0 < 3:
            replies.add(c.cmd("GET", "{1}i1").raw[:40])
    moves = open(p.logpath).read().count("cluster: slot 9842 of key-prefix {1} moved")
    assert 1 <= moves <= 5, (moves, replies)
    assert all(r.startswith(b"-TRYAGAIN ") or r.startswith(b"-MOVED ") or r.startswith(b"-CLUSTERDOWN ")
               for r in replies), replies


def test_a_master_that_hangs_is_left_for_the_promoted_replica(proxy_factory, redis_factory):
    """B, the upstream, hangs (SIGSTOP: its host takes connections, its
    Redis answers nothing); the cluster promotes R. Only a failed connect
    had the proxy ask the cluster's nodes where the slot went: every
    command of the volume through it failed or hung for as long as B did,
    for good if B never came back (review-cluster F1). Now a keep-alive
    PING unanswered past tracking-timeout-ms starts the asks too, each
    second while B answers nothing, and the proxy moves to R."""
    import signal
    fast = ("--cluster-node-timeout", "1000")
    a, b, r, id_r = add_replica_of_b(redis_factory, make_two_masters(redis_factory, *fast, third=True), *fast)
    p = proxy_factory(up=b, args=("--key-prefix", "{1}", "--tracking-keepalive-ms", "200",
                                  "--tracking-timeout-ms", "1000"))
    with p.raw(auth=True) as c:
        wait_tracking_active(c)
        assert c.call("SET", "{1}i2", "v1") == b"OK"
        with r.raw(auth=True) as cr:
            assert cr.call("READONLY") == b"OK"
            wait_for("R did not get v1", lambda: cr.call("GET", "{1}i2") == b"v1")
        c.cmd("CLUSTER", "SLOTS")  # as a cluster client reads it: the nodes to ask
    b.proc.send_signal(signal.SIGSTOP)
    seen = []

    def get():
        try:
            with p.raw(auth=True, timeout=1.0) as c:
                seen.append(c.cmd("GET", "{1}i2").raw)
        except (socket.timeout, OSError, ConnectionClosed) as e:
            seen.append(repr(e))
        return seen[-1] == b"$2\r\nv1\r\n"
    try:
        with r.raw(auth=True) as cr:
            wait_for("R was not promoted", lambda: b"role:master" in cr.call("INFO", "replication"), timeout=20)
        wait_for("the proxy did not move to R", get, timeout=15,
                 status=lambda: "replies %r; log:\n%s" % (sorted(set(map(str, seen))),
                                                            open(p.logpath).read()[-3000:]))
        wait_log(p, "upstream not answering (the invalidation connection got no answer in time)")
        wait_log(p, "cluster: slot 9842 of key-prefix {1} moved from=127.0.0.1:%d to=127.0.0.1:%d "
                 "(upstream unreachable" % (b.port, r.port))
        with p.raw(auth=True) as c:
            assert c.call("SET", "{1}i2", "v2") == b"OK"
        with r.raw(auth=True) as cr:
            assert cr.call("GET", "{1}i2") == b"v2"
    finally:
        b.proc.send_signal(signal.SIGCONT)


def test_cluster_slots_after_a_failover_names_the_proxy_and_the_upstream_follows(proxy_factory, replica_of_b):
    """R took over B's slots, and the first thing a client asks the proxy is
    the topology (go-redis reloads it every 10 s): the proxy learns there
    that the slot is on R, follows it, and names itself, not the nodes, from
    which the client would read the topology from then on."""
    a, b, r, id_r = replica_of_b
    p = proxy_factory(up=b, args=("--key-prefix", "{1}"))
    with p.raw(auth=True) as c:
        wait_tracking_active(c)
        with r.raw(auth=True) as cr, b.raw(auth=True) as cb:
            manual_failover(cr, cb)
        here = b"*3\r\n$9\r\n127.0.0.1\r\n:%d\r\n$40\r\n%s\r\n" % (p.port, id_r)
        assert c.cmd("CLUSTER", "SLOTS").raw == (b"*2\r\n*3\r\n:0\r\n:8191\r\n" + here +
                                                 b"*3\r\n:8192\r\n:16383\r\n" + here)
        wait_log(p, "cluster: slot 9842 of key-prefix {1} moved from=127.0.0.1:%d to=127.0.0.1:%d (MOVED)"
                 % (b.port, r.port))
        assert c.call("SET", "{1}i2", "v") == b"OK"
    with r.raw(auth=True) as cr:
        assert cr.call("GET", "{1}i2") == b"v"


def test_the_upstream_follows_with_the_cache_off(proxy_factory, replica_of_b):
    """cache-max-memory 0 (a plain proxy): the MOVED of a failover moves the
    upstream all the same, so that the volume's commands keep coming
    through the proxy, which CLUSTER SLOTS names."""
    a, b, r, _ = replica_of_b
    p = proxy_factory(up=b, args=("--key-prefix", "{1}", "--cache-max-memory", "0"))
    with p.raw(auth=True) as c:
        assert c.call("SET", "{1}i2", "v1") == b"OK"
        with r.raw(auth=True) as cr, b.raw(auth=True) as cb:
            manual_failover(cr, cb)
        assert c.cmd("SET", "{1}i2", "v2").raw == tryagain(r)
        wait_log(p, "cluster: slot 9842 of key-prefix {1} moved")
        assert c.call("SET", "{1}i2", "v2") == b"OK"
    with r.raw(auth=True) as cr:
        assert cr.call("GET", "{1}i2") == b"v2"


class HangingForwarder:
    """A TCP forwarder to a node that can stop accepting with its accept
    queue full, so that a connect to it hangs (its SYNs are dropped), and
    then close, so that the hanging connect is refused. Its target (a port)
    may be changed: the connections it accepts from then on go there, as a
    name that resolves to new addresses."""

    def __init__(self, target_port):
        self.target = target_port
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(1)
        self.port = self.ls.getsockname()[1]
        self.accepting = True
        self.fillers = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                ready, _, _ = select.select([self.ls], [], [], 0.05)
            except (OSError, ValueError):
                return
            if not self.accepting or not ready:
                continue
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            t = socket.create_connection(("127.0.0.1", self.target))
            for x, y in ((c, t), (t, c)):
                threading.Thread(target=pump, args=(x, y), daemon=True).start()

    def hang(self):
        self.accepting = False
        time.sleep(0.2)
        for _ in range(4):
            f = socket.socket()
            f.setblocking(False)
            f.connect_ex(("127.0.0.1", self.port))
            self.fillers.append(f)
        time.sleep(0.2)

    def close(self):
        self.ls.close()
        for f in self.fillers:
            f.close()


def test_a_connect_to_the_old_node_that_fails_late_keeps_the_followed_upstream(proxy_factory, replica_of_b):
    """A client's own connection to B is still connecting when the proxy
    follows the slot to R; then that connect is refused. It went to where
    Redis was: the proxy stays on R (it had gone back to B, gone for good,
    and every command failed)."""
    a, b, r, _ = replica_of_b
    fwd = HangingForwarder(b.port)
    p = proxy_factory(upstream_url="redis://127.0.0.1:%d" % fwd.port, args=("--key-prefix", "{1}"))
    try:
        with p.raw(auth=True) as c1, p.raw(auth=True) as c2:
            wait_tracking_active(c1)
            assert c1.call("SET", "{1}i1", "v1") == b"OK"
            with r.raw(auth=True) as cr, b.raw(auth=True) as cb:
                manual_failover(cr, cb)
            fwd.hang()
            c2.send_cmd("WATCH", "{1}i1")            # its own connection: the connect hangs
            time.sleep(0.3)
            # B's MOVED for this GET makes the proxy follow the slot to R, unless
            # another of its requests met one first (a slow machine: then R answers)
            assert c1.cmd("GET", "{1}x").raw in (tryagain(r), b"$-1\r\n")
            wait_log(p, "cluster: slot 9842 of key-prefix {1} moved")
            fwd.close()                              # the hanging connect is refused
            wait_log(p, "Connection refused")
            with r.raw(auth=True) as cr:             # R drops the proxy's connections
                cr.call("CLIENT", "KILL", "TYPE", "normal")
            time.sleep(0.5)
            seen = []
            wait_for("the proxy left R", lambda: seen.append(p.raw(auth=True).cmd("GET", "{1}i1").raw) or
                     seen[-1] == b"$2\r\nv1\r\n", timeout=5,
                     status=lambda: "replies %r; log:\n%s" % (sorted(set(seen)), open(p.logpath).read()[-3000:]))
    finally:
        fwd.close()


def cache_hits(c):
    return int(c.call("INFO", "sidecache").decode().split("cache_hits:")[1].split("\r\n")[0])


def test_when_no_known_node_answers_the_configured_address_is_asked_where_the_slot_is(proxy_factory,
                                                                                        redis_factory):
    """The proxy is configured at F (a name: a Kubernetes service) that led
    to A; it followed the volume's slot to B (A's MOVED) and remembers A and
    B (a client's CLUSTER SLOTS). Then the cluster comes back on new pods:
    A and B are gone, and F leads to D, of the new cluster (D, E; the slot
    on E). No node the proxy knows answers, so it asks the configured
    address, resolved again, where the slot is, and follows it to E (it
    asked A and B for ever, and stayed down). What the cache held of B is
    not served after the move (C6)."""
    (a, b), _ = make_masters(redis_factory, count=2)
    fwd = HangingForwarder(a.port)
    p = proxy_factory(upstream_url="redis://127.0.0.1:%d" % fwd.port, args=("--key-prefix", "{1}"))
    try:
        with p.raw(auth=True) as c:
            assert c.cmd("GET", "{1}i2").raw == tryagain(b)   # A's MOVED: the upstream follows the slot to B
            wait_log(p, "moved from=127.0.0.1:%d to=127.0.0.1:%d (MOVED)" % (fwd.port, b.port))
            wait_tracking_active(c)
            assert c.call("SET", "{1}i2", "old") == b"OK"
            # "old" is in the cache (tracking per read, a read fills once
            # its connection's CLIENT TRACKING is confirmed: maybe not the
            # first; db 0, as a cluster has no other)
            assert warm(c, Stats(p, db=0), ("GET", "{1}i2")) == [b"old"]
            c.cmd("CLUSTER", "SLOTS")                          # the nodes to ask: A and B
        (d, e), _ = make_masters(redis_factory, count=2)
        with e.raw(auth=True) as ce:
            assert ce.call("SET", "{1}i2", "new") == b"OK"
        fwd.target = d.port
        a.kill()
        b.kill()
        seen = []
        with p.raw(auth=True) as c:
            wait_for("the proxy did not move to E", lambda: seen.append(c.cmd("SET", "{1}w", "1").raw) or
                     seen[-1] == b"+OK\r\n", timeout=10,
                     status=lambda: "replies %r; log:\n%s" % (sorted(set(seen)), open(p.logpath).read()[-3000:]))
            wait_log(p, "moved from=127.0.0.1:%d to=127.0.0.1:%d (upstream unreachable, 127.0.0.1:%d names it)"
                     % (b.port, e.port, fwd.port))
            assert c.call("GET", "{1}i2") == b"new"
            wait_tracking_active(c)
            assert [c.call("GET", "{1}i2") for _ in range(2)] == [b"new"] * 2
        with e.raw(auth=True) as ce:
            assert ce.call("GET", "{1}w") == b"1"
    finally:
        fwd.close()


def test_a_configured_address_among_the_remembered_nodes_is_asked_once_a_round(proxy_factory, redis_factory):
    """The proxy is configured at A as the cluster names it (127.0.0.1:port)
    and followed the slot to B; then A and B are gone. Each round of asks
    names A once: the configured address is added to the remembered nodes
    only when it is not one of them (a node that does not answer holds the
    event loop up to 250 ms each time it is asked)."""
    (a, b), _ = make_masters(redis_factory, count=2)
    p = proxy_factory(up=a, args=("--key-prefix", "{1}"), loglevel="verbose")
    with p.raw(auth=True) as c:
        assert c.cmd("GET", "{1}i2").raw == tryagain(b)     # A's MOVED: the upstream follows the slot to B
        wait_log(p, "moved from=127.0.0.1:%d to=127.0.0.1:%d (MOVED)" % (a.port, b.port))
        c.cmd("CLUSTER", "SLOTS")                            # the nodes to ask: A and B
    a.kill()
    b.kill()
    with p.raw(auth=True) as c:
        c.cmd("GET", "{1}i2")                                # a connect to B fails: the nodes are asked

    def asked():
        return re.findall(r"cluster: asked (\S+) where the slot is", open(p.logpath).read())
    wait_for("the nodes were not asked", lambda: len(asked()) >= 6, timeout=10, status=asked)
    want = ["127.0.0.1:%d" % a.port, "127.0.0.1:%d" % b.port] * 3
    assert sorted(asked()[:6]) == sorted(want)


def test_a_pipeline_of_writes_to_two_slots_of_the_upstream_runs_as_sent(proxy_factory, cluster_node):
    """A client pipelines writes to keys of two slots that the upstream
    serves (any cluster client may: sidecache names itself the master of
    every slot, so go-redis sends it every pipeline). Redis runs each
    command as sent. In one write batch (MULTI ... EXEC) Redis refuses the
    EXEC with -CROSSSLOT and runs nothing; the writes must still get the
    replies Redis gives them alone, and the next batches must still go."""
    from exacthelpers import sidecache_info
    p = proxy_factory(up=cluster_node, args=("--key-prefix", "{1}"))
    cmds = [("SET", "{a}k", "1"), ("SET", "{b}k", "2"), ("INCR", "{a}n"), ("INCR", "{b}n")]
    with cluster_node.raw(auth=True) as d:
        want = [f.raw for f in d.pipeline(cmds)]
        assert d.call("FLUSHALL") == b"OK"
    assert want == [b"+OK\r\n", b"+OK\r\n", b":1\r\n", b":1\r\n"]
    with p.raw(auth=True) as c:
        wait_tracking_active(c)
        assert [f.raw for f in c.pipeline(cmds)] == want
        assert [c.call("GET", k) for k in ("{a}k", "{b}k", "{a}n", "{b}n")] == [b"1", b"2", b"1", b"1"]
        blocks = sidecache_info(p)["batch_blocks"]
        assert [f.raw for f in c.pipeline([("SET", "{1}x%d" % i, "v") for i in range(5)])] == [b"+OK\r\n"] * 5
        assert sidecache_info(p)["batch_blocks"] == blocks + 1, "batching stopped for the user"
    with open(p.logpath) as f:
        assert "refused a MULTI, EXEC or DISCARD" not in f.read()


def test_a_cross_slot_transaction_gets_crossslot_and_nothing_else_changes(proxy_factory, cluster_node):
    """MULTI, writes to two slots of the upstream, EXEC: Redis answers the
    EXEC -CROSSSLOT, having discarded the transaction (nothing ran, the
    connection is clean). That is the client's answer; it is no sign that
    the user may not send MULTI: the shared connection stays (other
    clients' requests on it are not failed) and the user's later
    transactions and write batches are still made on it."""
    from exacthelpers import sidecache_info
    p = proxy_factory(up=cluster_node, args=("--key-prefix", "{1}"))
    cmds = [("MULTI",), ("SET", "{a}k", "1"), ("SET", "{b}k", "2"), ("EXEC",)]
    with cluster_node.raw(auth=True) as d:
        want = [f.raw for f in d.pipeline(cmds)]
    assert want[-1].startswith(b"-CROSSSLOT")
    with p.raw(auth=True) as c:
        wait_tracking_active(c)
        assert [f.raw for f in c.pipeline(cmds)] == want
        before = sidecache_info(p)
        assert [f.raw for f in c.pipeline([("MULTI",), ("SET", "{1}x", "1"), ("EXEC",)])] == \
            [b"+OK\r\n", b"+QUEUED\r\n", b"*1\r\n+OK\r\n"]
        assert [f.raw for f in c.pipeline([("SET", "{1}y%d" % i, "v") for i in range(5)])] == [b"+OK\r\n"] * 5
        after = sidecache_info(p)
    assert after["txn_shared"] == before["txn_shared"] + 1, "the MULTI went to a connection of its own"
    assert after["batch_blocks"] == before["batch_blocks"] + 1, "batching stopped for the user"
    with open(p.logpath) as f:
        assert "refused a MULTI, EXEC or DISCARD" not in f.read()


@pytest.mark.parametrize("at", [2, 3], ids=["refused-between", "refused-last"])
def test_a_cross_slot_transaction_with_a_refused_command_as_redis_answers_it(proxy_factory, cluster_node, at):
    """The same with an unknown command queued: Redis's EXEC answer depends
    on where (after both writes: -CROSSSLOT, the slots of EXEC's queued keys
    being checked before the refusal), and the proxy's is Redis's."""
    p = proxy_factory(up=cluster_node, args=("--key-prefix", "{1}"))
    cmds = [("MULTI",), ("SET", "{a}k", "1"), ("SET", "{b}k", "2"), ("EXEC",)]
    cmds.insert(at, ("NOSUCHCMD",))
    with cluster_node.raw(auth=True) as d:
        want = [f.raw for f in d.pipeline(cmds)]
    assert at != 3 or want[-1].startswith(b"-CROSSSLOT"), want
    with p.raw(auth=True) as c:
        wait_tracking_active(c)
        assert [f.raw for f in c.pipeline(cmds)] == want
        assert c.cmd("GET", "{1}x").raw == b"$-1\r\n"


@pytest.mark.parametrize("late", ["moved", "cluster-slots"])
def test_a_late_answer_of_the_first_old_node_does_not_move_the_upstream_back(proxy_factory, redis_factory, late):
    """The slot moves twice, B to A to C, and the proxy follows. W, a
    client with a connection of its own to B (retired at the first move,
    and W keeps it), gets B's answer only after the second move (B was
    busy meanwhile): a MOVED, or a CLUSTER SLOTS, that names A, where the
    slot was when B knew it. That says nothing of C: the proxy stays there
    (it moved back to A, and every command of the volume got A's MOVED)."""
    (a, b, c3), (id_a, id_b, id_c) = make_masters(redis_factory)
    p = proxy_factory(up=b, args=("--key-prefix", "{1}"))
    with p.raw(auth=True) as c, p.raw(auth=True) as w:
        wait_tracking_active(c)
        assert w.call("WATCH", "{1}w") == b"OK"            # w: a connection of its own, to B
        with a.raw(auth=True) as ca, b.raw(auth=True) as cb, c3.raw(auth=True) as cc:
            for n in (ca, cb, cc):
                assert n.call("CLUSTER", "SETSLOT", "9842", "NODE", id_a) == b"OK"
        assert c.cmd("GET", "{1}x").raw == tryagain(a)
        wait_log(p, "moved from=127.0.0.1:%d to=127.0.0.1:%d" % (b.port, a.port))
        # B sleeps; what w sent behind, B answers afterwards, as it knows
        # the slot: A's. Meanwhile the slot moves on to C.
        asked = ("GET", "{1}x") if late == "moved" else ("CLUSTER", "SLOTS")
        w.send(encode("DEBUG", "SLEEP", "2") + encode(*asked))
        time.sleep(0.2)
        with a.raw(auth=True) as ca, c3.raw(auth=True) as cc:
            for n in (ca, cc):
                assert n.call("CLUSTER", "SETSLOT", "9842", "NODE", id_c) == b"OK"
        assert c.cmd("GET", "{1}x").raw == tryagain(c3)
        wait_log(p, "moved from=127.0.0.1:%d to=127.0.0.1:%d" % (a.port, c3.port))
        assert w.read_frame(timeout=5).raw == b"+OK\r\n"
        answer = w.read_frame(timeout=5).raw
        if late == "moved":
            assert answer == b"-MOVED 9842 127.0.0.1:%d\r\n" % a.port
        time.sleep(0.2)
        # the proxy is on C: the volume's commands run there
        assert c.cmd("SET", "{1}x", "v").raw == b"+OK\r\n", open(p.logpath).read()[-2000:]
        assert "moved from=127.0.0.1:%d to=127.0.0.1:%d" % (c3.port, a.port) not in open(p.logpath).read()
    with c3.raw(auth=True) as cc:
        assert cc.call("GET", "{1}x") == b"v"


def fail_one_connect(p, node):
    """node, started with --tcp-backlog 8, takes no connection for a moment
    (it sleeps, with its accept queue full): the proxy's next new connection
    to it times out (upstream-connect-timeout 300), while those it has stay
    up. Returns once node is awake again."""
    with node.raw(auth=True) as cn, p.raw(auth=True) as w2:
        cn.send_cmd("DEBUG", "SLEEP", "1.5")
        time.sleep(0.1)
        fillers = []
        try:
            for _ in range(16):
                f = socket.socket()
                f.setblocking(False)
                f.connect_ex(("127.0.0.1", node.port))
                fillers.append(f)
            time.sleep(0.1)
            w2.send_cmd("WATCH", "{1}other")                 # a connection of its own: its connect hangs
            wait_log(p, "connect timed out after 300 ms")
            assert cn.read_frame(timeout=5).raw == b"+OK\r\n"
        finally:
            for f in fillers:
                f.close()


def slots_asked(node):
    with node.raw(auth=True) as cn:
        stats = cn.call("INFO", "commandstats").decode()
    if "cmdstat_cluster|slots:" not in stats:
        return 0
    return int(stats.split("cmdstat_cluster|slots:calls=")[1].split(",")[0])


def test_a_connect_that_fails_once_moves_nothing(proxy_factory, redis_factory):
    """One connect to B, the configured upstream, times out while B is
    busy; the connections the proxy has stay up. Asked where the slot is, A
    names B: nothing moved. The proxy neither empties its cache nor closes
    its connections (it moved "from B to B", hard: every client with a
    connection of its own was disconnected), and stops asking."""
    a, b, _, _ = make_two_masters(redis_factory, "--tcp-backlog", "8")
    p = proxy_factory(up=b, args=("--key-prefix", "{1}", "--upstream-connect-timeout", "300",
                                  "--tracking-timeout-ms", "10000"))
    with p.raw(auth=True) as c, p.raw(auth=True) as w:
        wait_tracking_active(c)
        c.cmd("CLUSTER", "SLOTS")                           # the nodes to ask, as a cluster client reads it
        assert c.call("SET", "{1}i2", "v1") == b"OK"
        assert w.call("WATCH", "{1}i2") == b"OK"            # w: a connection of its own, to B
        flushes = failover_flushes(c)
        fail_one_connect(p, b)
        time.sleep(2.5)                                     # the cron asks the nodes where the slot is
        assert "cluster: slot 9842" not in open(p.logpath).read()
        assert w.cmd("GET", "{1}i2").raw == b"$2\r\nv1\r\n"  # w keeps its connection
        assert failover_flushes(c) == flushes
        asked = slots_asked(a)
        time.sleep(2.5)
        assert slots_asked(a) == asked, "the proxy keeps asking where the slot is"


def test_after_a_connect_that_failed_once_the_followed_node_is_not_asked_for_ever(proxy_factory, redis_factory):
    """The proxy follows the slot from B to R (a failover). One connect to R
    times out while R is busy; the connections the proxy has stay up. A
    node it asks names R: the proxy stays, and asks no more (it asked two
    nodes every second for as long as no new connection succeeded, each
    ask a blocking exchange in the event loop, up to 250 ms for a node
    that does not answer)."""
    a, b, r, _ = add_replica_of_b(redis_factory, make_two_masters(redis_factory), "--tcp-backlog", "8")
    p = proxy_factory(up=b, args=("--key-prefix", "{1}", "--upstream-connect-timeout", "300",
                                  "--tracking-timeout-ms", "10000"))
    with p.raw(auth=True) as c:
        wait_tracking_active(c)
        c.cmd("CLUSTER", "SLOTS")                           # the nodes to ask
        with r.raw(auth=True) as cr, b.raw(auth=True) as cb:
            assert cr.call("CLUSTER", "FAILOVER") == b"OK"
            wait_for("R did not take over", lambda: b"role:master" in cr.call("INFO", "replication") and
                     b"role:slave" in cb.call("INFO", "replication"))
        assert c.cmd("SET", "{1}i2", "v1").raw == tryagain(r)
        wait_log(p, "moved from=127.0.0.1:%d to=127.0.0.1:%d" % (b.port, r.port))
        assert c.call("SET", "{1}i2", "v1") == b"OK"
        fail_one_connect(p, r)
        time.sleep(2.5)
        asked = slots_asked(a) + slots_asked(b)
        time.sleep(2.5)
        assert slots_asked(a) + slots_asked(b) == asked, "the proxy keeps asking where the slot is"
        assert c.call("GET", "{1}i2") == b"v1"


def test_a_write_batch_whose_exec_gets_moved_ran_nothing(proxy_factory, two_masters):
    """The slot moves from B while B reads a write batch (MULTI, 250 SETs,
    EXEC, 16 KB at a time): the SETs queued before the move make B answer
    the EXEC itself with MOVED, and discard the transaction. Nothing ran:
    each SET gets what it gets alone (B's MOVED, as TRYAGAIN), and nothing
    says that Redis refused EXEC to the user (it took it so: the connection
    was closed, failing what else waited on it, every SET got "unexpected
    reply to a write batch", and the user's writes were never batched
    again, nor its MULTIs answered here)."""
    a, b, id_a, id_b = two_masters
    p = proxy_factory(up=b, args=("--key-prefix", "{1}"))
    n = 250
    with p.raw(auth=True) as c, b.raw(auth=True) as sleeper, b.raw(auth=True) as admin:
        wait_tracking_active(c)
        assert c.call("SET", "{1}warm", "x") == b"OK"
        assert c.call("DEL", "{1}warm") == 1
        sleeper.send_cmd("DEBUG", "SLEEP", "1")
        time.sleep(0.1)
        # one write batch, waiting in B's socket while B sleeps
        c.send(b"".join(encode("SET", "{1}k%d" % i, "v" * 200) for i in range(n)))
        time.sleep(0.3)
        with a.raw(auth=True) as ca:
            assert ca.call("CLUSTER", "SETSLOT", "9842", "NODE", id_a) == b"OK"
        # B runs it once awake, after the first 16 KB of the batch
        admin.send_cmd("CLUSTER", "SETSLOT", "9842", "NODE", id_a)
        replies = [f.raw for f in c.read_frames(n, timeout=10)]
        assert admin.read_frame(timeout=5).raw == b"+OK\r\n", "the batch ran before the move"
        assert sleeper.read_frame(timeout=5).raw == b"+OK\r\n"
    log = open(p.logpath).read()
    assert "Redis refused a MULTI, EXEC or DISCARD" not in log, log[-2000:]
    assert all(r == tryagain(a) for r in replies), sorted(set(replies))
    with a.raw(auth=True) as ca:
        assert ca.call("EXISTS", *("{1}k%d" % i for i in range(n))) == 0


def test_a_transaction_whose_exec_gets_moved_ran_nothing(proxy_factory, two_masters):
    """The same for a transaction without WATCH (MULTI answered here, the
    block sent at EXEC): the client gets B's MOVED for EXEC as TRYAGAIN
    (nothing ran), and the user keeps its local MULTI and write batches."""
    a, b, id_a, id_b = two_masters
    p = proxy_factory(up=b, args=("--key-prefix", "{1}"))
    n = 250
    with p.raw(auth=True) as c, b.raw(auth=True) as sleeper, b.raw(auth=True) as admin:
        wait_tracking_active(c)
        assert c.call("MULTI") == b"OK"
        c.send(b"".join(encode("SET", "{1}k%d" % i, "v" * 200) for i in range(n)))
        assert all(f.raw == b"+QUEUED\r\n" for f in c.read_frames(n, timeout=10))
        sleeper.send_cmd("DEBUG", "SLEEP", "1")
        time.sleep(0.1)
        c.send_cmd("EXEC")                                  # the block waits in B's socket
        time.sleep(0.3)
        with a.raw(auth=True) as ca:
            assert ca.call("CLUSTER", "SETSLOT", "9842", "NODE", id_a) == b"OK"
        admin.send_cmd("CLUSTER", "SETSLOT", "9842", "NODE", id_a)
        assert c.read_frame(timeout=10).raw == tryagain(a)
        assert admin.read_frame(timeout=5).raw == b"+OK\r\n", "the transaction ran before the move"
    log = open(p.logpath).read()
    assert "Redis refused a MULTI, EXEC or DISCARD" not in log, log[-2000:]
    with a.raw(auth=True) as ca:
        assert ca.call("EXISTS", *("{1}k%d" % i for i in range(n))) == 0


def watch_ahead_count(c):
    info = c.call("INFO", "sidecache").decode()
    return int(info.split("watch_ahead:")[1].split("\r\n")[0])


def test_a_watch_of_another_slot_gets_redis_answer_not_one_ahead(proxy_factory, two_masters):
    """WATCH is answered ahead (+OK once it is on its way) only where
    Redis's answer is known to be +OK: on a cluster, a key outside the
    volume's slot may be another master's (MOVED) or two slots
    (CROSSSLOT). The client gets Redis's answer for those, and keeps its
    connection; a WATCH of the volume's keys is still answered ahead."""
    a, b, id_a, id_b = two_masters
    p = proxy_factory(up=b, args=("--key-prefix", "{1}"))
    # {2}: slot 5649, A's; y: slot 12222, B's, but not {1}'s 9842
    cases = [("WATCH", "{2}x"), ("WATCH", "{1}a", "y")]
    with b.raw(auth=True) as d:
        want = [d.cmd(*w).raw for w in cases]
        assert d.cmd("UNWATCH").raw == b"+OK\r\n"
    assert want[0].startswith(b"-MOVED ") and want[1].startswith(b"-CROSSSLOT"), want
    with p.raw(auth=True) as c:
        wait_tracking_active(c)
        assert c.cmd("WATCH", "{1}a").raw == b"+OK\r\n"    # Redis's: teaches that WATCH is allowed
        assert c.cmd("UNWATCH").raw == b"+OK\r\n"
        before = watch_ahead_count(c)
        assert c.cmd("WATCH", "{1}a", "{1}b").raw == b"+OK\r\n"
        assert watch_ahead_count(c) == before + 1, "a WATCH of the volume's keys is answered ahead"
        assert c.cmd("UNWATCH").raw == b"+OK\r\n"
        for w, reply in zip(cases, want):
            assert c.cmd(*w).raw == reply
        assert c.cmd("PING").raw == b"+PONG\r\n"
        assert watch_ahead_count(c) == before + 1


def test_asking_sets_the_flag_of_its_own_client_only(proxy_factory, two_masters):
    """ASKING lets the next command of its connection be served for a slot
    the node is importing (after an ASK). Through the proxy that is the
    connection of the client that sent it: its GET is served, as on Redis,
    and another client's GET of that slot, on the shared connection, still
    gets MOVED."""
    a, b, id_a, id_b = two_masters
    with b.raw(auth=True) as d:
        assert d.call("CLUSTER", "SETSLOT", "5649", "IMPORTING", id_a) == b"OK"   # {2}: A's slot
        want = [d.cmd("ASKING").raw, d.cmd("GET", "{2}k").raw, d.cmd("GET", "{2}k").raw]
    assert want[:2] == [b"+OK\r\n", b"$-1\r\n"] and want[2].startswith(b"-MOVED 5649 "), want
    p = proxy_factory(up=b, args=("--upstream-connections", "1"))
    with p.raw(auth=True) as x, p.raw(auth=True) as y:
        assert x.cmd("ASKING").raw == want[0]
        assert y.cmd("GET", "{2}k").raw == want[2], "ASKING reached another client's command"
        assert x.cmd("GET", "{2}k").raw == want[1]
        assert x.cmd("GET", "{2}k").raw == want[2]


# --- A migration of the volume's slot (proxy/slotwatch.h) -------------------
# B holds {1} (slot 9842) and starts moving it to A as redis-cli --cluster
# reshard does: IMPORTING on A, MIGRATING on B. A key B does not hold is then
# written on A (the writer follows B's ASK), where no invalidation connection
# of sidecache's hears it.

def info_int(c, field):
    return int(c.call("INFO", "sidecache").decode().split(field + ":")[1].split("\r\n")[0])


def start_migration(a, b, id_a, id_b):
    with a.raw(auth=True) as ca, b.raw(auth=True) as cb:
        assert ca.call("CLUSTER", "SETSLOT", "9842", "IMPORTING", id_b) == b"OK"
        assert cb.call("CLUSTER", "SETSLOT", "9842", "MIGRATING", id_a) == b"OK"


def finish_migration(a, b, id_a):
    with a.raw(auth=True) as ca, b.raw(auth=True) as cb:
        for n in (ca, cb):
            assert n.call("CLUSTER", "SETSLOT", "9842", "NODE", id_a) == b"OK"


def write_after_ask(a, *cmd):
    """Another mount's write that followed B's ASK: ASKING, then it, on A."""
    with a.raw(auth=True) as ca:
        assert ca.call("ASKING") == b"OK"
        return ca.cmd(*cmd).raw


def slot_migrating(c):
    return info_int(c, "cluster_slot_migrating") == 1


@pytest.mark.parametrize("read", ["get", "hget"])
def test_a_cached_nil_is_not_served_once_a_probe_saw_the_slot_migrate(proxy_factory, two_masters, read):
    """A nil cached before the migration (no such inode, no such name) must
    not answer once the key was written on the target: from the probe that
    finds the slot migrating on, the cache is off, and reads get what Redis
    answers them (B's ASK); so do an MGET (TRYAGAIN) and a WATCH (ASK, not a
    +OK ahead and a closed connection). Once the migration ended the proxy
    follows the slot to A, and the cache is on again."""
    a, b, id_a, id_b = two_masters
    p = proxy_factory(up=b, args=("--key-prefix", "{1}", "--tracking-keepalive-ms", "100"))
    rd = ("GET", "{1}i7") if read == "get" else ("HGET", "{1}d7", "name")
    wr = ("SET", "{1}i7", "attr") if read == "get" else ("HSET", "{1}d7", "name", "ino")
    with p.raw(auth=True) as c:
        wait_tracking_active(c)
        assert c.call("SET", "{1}i2", "v2") == b"OK"
        assert [c.cmd(*rd).raw for _ in range(2)] == [b"$-1\r\n"] * 2
        h = cache_hits(c)
        assert c.cmd(*rd).raw == b"$-1\r\n" and cache_hits(c) == h + 1, "the nil is cached"
        flushes = info_int(c, "cache_flushes_slot_migrating")
        start_migration(a, b, id_a, id_b)
        assert write_after_ask(a, *wr) in (b"+OK\r\n", b":1\r\n")
        wait_for("a probe to see the slot migrate", lambda: slot_migrating(c), timeout=5)
        assert info_int(c, "cache_flushes_slot_migrating") == flushes + 1
        with b.raw(auth=True) as cb:
            for cmd in (rd, ("MGET", "{1}i2", "{1}i7"), ("WATCH", "{1}d7")):
                want = cb.cmd(*cmd).raw
                assert c.cmd(*cmd).raw == want, cmd
            assert want.startswith(b"-ASK 9842 "), want
            assert c.cmd("UNWATCH").raw == cb.cmd("UNWATCH").raw == b"+OK\r\n"
            # B gives up the slot only once its keys moved
            assert cb.call("MIGRATE", "127.0.0.1", str(a.port), "", "0", "5000", "KEYS", "{1}i2") == b"OK"
        finish_migration(a, b, id_a)
        want = b"$4\r\nattr\r\n" if read == "get" else b"$3\r\nino\r\n"
        wait_for("the proxy to follow the slot", lambda: c.cmd(*rd).raw == want, timeout=10,
                 status=lambda: c.cmd(*rd).raw)
        wait_for("the cache on again", lambda: not slot_migrating(c), timeout=5)
        wait_tracking_active(c)
        h = cache_hits(c)
        wait_for("a hit", lambda: c.cmd(*rd).raw == want and cache_hits(c) > h, timeout=5)


def test_a_clients_ask_turns_the_cache_off_before_any_probe(proxy_factory, two_masters):
    """Probes every 60 s: the first ASK a client of the proxy meets is
    enough to turn the cache off (a cached nil of another key could be one
    written on the target already)."""
    a, b, id_a, id_b = two_masters
    p = proxy_factory(up=b, args=("--key-prefix", "{1}", "--tracking-keepalive-ms", "60000"))
    with p.raw(auth=True) as c:
        wait_tracking_active(c)
        assert [c.cmd("GET", "{1}i7").raw for _ in range(2)] == [b"$-1\r\n"] * 2
        start_migration(a, b, id_a, id_b)
        assert write_after_ask(a, "SET", "{1}i7", "attr") == b"+OK\r\n"
        assert c.cmd("GET", "{1}i8").raw == b"-ASK 9842 127.0.0.1:%d\r\n" % a.port
        assert c.cmd("GET", "{1}i7").raw == b"-ASK 9842 127.0.0.1:%d\r\n" % a.port
        assert slot_migrating(c)


def test_keys_a_node_dropped_for_a_forced_slot_owner_are_not_served(proxy_factory, two_masters):
    """A slot given to A by force (SETSLOT NODE without MIGRATE): B drops
    its keys without an invalidation (Redis 7.0). The probe meets B's MOVED,
    which empties the cache and moves the upstream to A."""
    a, b, id_a, id_b = two_masters
    p = proxy_factory(up=b, args=("--key-prefix", "{1}", "--tracking-keepalive-ms", "100"))
    with p.raw(auth=True) as c:
        wait_tracking_active(c)
        assert c.call("SET", "{1}i2", "v1") == b"OK"
        assert [c.call("GET", "{1}i2") for _ in range(2)] == [b"v1"] * 2
        with a.raw(auth=True) as ca:
            assert ca.call("CLUSTER", "SETSLOT", "9842", "IMPORTING", id_b) == b"OK"
            assert ca.call("CLUSTER", "SETSLOT", "9842", "NODE", id_a) == b"OK"
        with b.raw(auth=True) as cb:
            wait_for("B to drop the slot", lambda: cb.call("DBSIZE") == 0, timeout=10)
        with a.raw(auth=True) as ca:
            assert ca.call("SET", "{1}i2", "v2") == b"OK"
        wait_for("the proxy to serve A's value", lambda: c.call("GET", "{1}i2") == b"v2", timeout=5,
                 status=lambda: c.cmd("GET", "{1}i2").raw)


def test_a_local_transaction_whose_slot_moved_before_exec_gets_what_redis_answers(proxy_factory, two_masters):
    """MULTI and a command queued while B holds the volume's slot, then the
    slot moves to A, then EXEC: Redis checks the queued commands' keys at
    EXEC and answers it MOVED (nothing ran); through sidecache, whose block
    met MOVED for the queued command, EXEC gets that answer too (as
    sidecache's TRYAGAIN), not EXECABORT for previous errors."""
    a, b, id_a, id_b = two_masters
    p = proxy_factory(up=b, args=("--key-prefix", "{1}"))
    with p.raw(auth=True) as c:
        wait_tracking_active(c)
        assert [c.cmd("MULTI").raw, c.cmd("SET", "{1}k", "v").raw] == [b"+OK\r\n", b"+QUEUED\r\n"]
        finish_migration(a, b, id_a)
        assert c.cmd("EXEC").raw == tryagain(a)
    with a.raw(auth=True) as ca:
        assert ca.call("EXISTS", "{1}k") == 0


def test_a_probe_key_someone_wrote_is_no_proof_of_a_stable_slot(proxy_factory, two_masters):
    """The probe reads a key nobody writes: a source holding it would answer
    it during a migration too. If it exists, the probe says so in the log
    and proves nothing; a client's ASK still turns the cache off, and it
    stays off while the probe cannot tell."""
    a, b, id_a, id_b = two_masters
    p = proxy_factory(up=b, args=("--key-prefix", "{1}", "--tracking-keepalive-ms", "100"))
    with p.raw(auth=True) as c:
        wait_tracking_active(c)
        assert c.call("SET", "{1}sidecache:slot-probe", "x") == b"OK"
        wait_log(p, "the probe of the volume's cluster slot tells nothing")
        start_migration(a, b, id_a, id_b)
        assert c.cmd("GET", "{1}i8").raw == b"-ASK 9842 127.0.0.1:%d\r\n" % a.port
        assert slot_migrating(c)
        time.sleep(0.5)  # probes answered :1 meanwhile
        assert slot_migrating(c)
