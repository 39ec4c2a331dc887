"""
tests/integration/test_failover_address.py - a failover behind an address
that follows the master (a virtual IP, a Kubernetes Service, an L4 load
balancer: docs/DEPLOY.md, "Failover"). New connections to the address reach
the new master; established ones stay on the old node, demoted, as long as
it lives (conntrack keeps their flows). A forwarder (helpers.Forwarder)
stands for the address: its target changes for new connections only.

sidecache must not stay on the demoted node (a direct go-redis client closes
a connection that answers READONLY and reaches the new master with its
next), and must never read from one server what the invalidation connection
of another would have to tell it about (review-cluster-failover F1).
"""
import socket
import time

import pytest

from cachehelpers import Stats, wait_tracking_active, warm
from helpers import HOST, LONG_SCRIPT, Forwarder, busy_threshold_args, free_port, wait_until
from test_watch_ahead import busy_redis

pytestmark = [pytest.mark.proxy_only, pytest.mark.timeout(60)]


@pytest.fixture
def front():
    fronts = []

    def make(server):
        f = Forwarder(server.port)
        fronts.append(f)
        return f

    yield make
    for f in fronts:
        f.stop_accepting()


def master_and_replica(redis_factory):
    a = redis_factory(name="a")
    b = redis_factory(name="b", args=("--replicaof", HOST, str(a.port)))
    wait_until(lambda: b.client().info("replication")["master_link_status"] == "up", timeout=10,
               what="b to sync")
    return a, b


def cached_behind(proxy_factory, fwd, a, b):
    """A proxy whose upstream is the front, a's value of i1 read through it
    (and replicated to b). Returns (proxy, stats, client)."""
    p = proxy_factory(up=a, upstream_url="redis://%s:%d" % (HOST, fwd.port))
    st = Stats(p)
    wait_tracking_active(p, stats=st)
    c = p.raw()
    assert c.cmd("SET", "i1", "v1").raw == b"+OK\r\n"
    assert c.cmd("GET", "i1").raw == b"$2\r\nv1\r\n"  # a shared connection is up, on a
    wait_until(lambda: b.client().get("i1") == b"v1", what="replication")
    return p, st, c


def moves_logged(p):
    return open(p.logpath).read().count("upstream answered READONLY")


def promote_b_cut_off_a(fwd, a, b):
    """b the master, the address leading new connections to it, and a,
    demoted, replicating from nowhere (it keeps its old values)."""
    b.client().replicaof("no", "one")
    fwd.target = b.port
    a.client().replicaof(HOST, str(free_port()))


def promote_b_behind_a_replica(fwd, a, b):
    """b the master, the address leading new connections to it, and a a
    healthy replica of b."""
    b.client().replicaof("no", "one")
    a.client().replicaof(HOST, str(b.port))
    wait_until(lambda: a.client().info("replication")["master_link_status"] == "up", timeout=10,
               what="a to replicate b")
    fwd.target = b.port


def wait_invalidation_connection_on(r):
    wait_until(lambda: any(x.get("name") == "sidecache-invalidation" for x in r.client().client_list()),
               timeout=5, what="the invalidation connection to reach :%d" % r.port)


def tracking_blip_to_b(p, st, a, b):
    """The invalidation connection on a lost once; it comes back through
    the address, to b."""
    a.client().client_kill_filter(_type="pubsub")
    wait_invalidation_connection_on(b)
    wait_tracking_active(p, stats=st)


def a_lags_b_writing_i1(a, b):
    """b writes i1 = v2 while a, paused, has not yet (a answers reads while
    paused: v1 would come from there); b's invalidation is in."""
    a.client().execute_command("CLIENT", "PAUSE", "500", "WRITE")
    b.client().set("i1", "v2")
    time.sleep(0.05)


def test_a_readonly_moves_the_connections_to_the_address_again(redis_factory, proxy_factory, front):
    """b is promoted, the address leads to it, and a, demoted, is cut off
    from it (its master is gone) and keeps running. The first write through
    sidecache meets a (READONLY, as a direct client's would); from then on
    writes reach b, and reads give b's value (before: READONLY for good,
    and a's stale values from the cache and from a)."""
    a, b = master_and_replica(redis_factory)
    fwd = front(a)
    p, st, c = cached_behind(proxy_factory, fwd, a, b)
    warm(c, st, ("GET", "i1"))

    promote_b_cut_off_a(fwd, a, b)
    b.client().set("i1", "v2")  # another client, on the new master

    replies = []
    for _ in range(20):
        replies.append((c.cmd("SET", "k", "x").raw, c.cmd("GET", "i1").raw))
        time.sleep(0.02)
    assert replies[0][0].startswith(b"-READONLY "), replies[0]
    assert all(s == b"+OK\r\n" for s, _ in replies[1:]), replies
    assert all(g == b"$2\r\nv2\r\n" for _, g in replies), replies
    assert b.client().get("k") == b"x"
    assert moves_logged(p) == 1
    wait_tracking_active(p, stats=st)
    assert warm(c, st, ("GET", "i1")) == [b"v2"]


def test_a_replica_upstream_is_not_reconnected_at_every_write(redis_factory, proxy_factory):
    """An upstream that is a replica answers every write READONLY: each
    move empties the cache and reconnects, so moves come at most 1 s, then
    2 s, 4 s... apart (a write every 50 ms for 3.5 s: moves at 0, 1 and 3 s),
    and each write gets Redis's READONLY."""
    a, b = master_and_replica(redis_factory)
    p = proxy_factory(up=b)
    wait_tracking_active(p)
    c = p.raw()
    end = time.monotonic() + 3.5
    while time.monotonic() < end:
        assert c.cmd("SET", "k", "x").raw.startswith(b"-READONLY "), "a write to a replica"
        time.sleep(0.05)
    assert 2 <= moves_logged(p) <= 3, open(p.logpath).read()[-3000:]


def test_tracking_back_after_a_loss_retires_the_data_connections(redis_factory, proxy_factory, front):
    """After a failover behind the address, a a healthy replica of b: the
    invalidation connection, lost once, comes back through the address to
    b, while the data connections made before stay on a. A read there that
    a's replication lag makes old would fill the cache after b's
    invalidation went by, for good (before: v1 served as a hit after a had
    caught up). The data connections retire when tracking is back, and the
    next ones reach b too."""
    a, b = master_and_replica(redis_factory)
    fwd = front(a)
    p, st, c = cached_behind(proxy_factory, fwd, a, b)

    promote_b_behind_a_replica(fwd, a, b)
    tracking_blip_to_b(p, st, a, b)
    a_lags_b_writing_i1(a, b)
    assert c.cmd("GET", "i1").raw == b"$2\r\nv2\r\n"
    wait_until(lambda: a.client().get("i1") == b"v2", timeout=5, what="a to catch up")
    assert [c.cmd("GET", "i1").raw for _ in range(3)] == [b"$2\r\nv2\r\n"] * 3


def test_tracking_back_after_a_loss_keeps_a_clients_own_connection_from_filling(redis_factory, proxy_factory,
                                                                              front):
    """The case above for a connection of a client's own (WATCH holds it):
    made on a before the blip, it stays the client's until its EXEC, and
    what it reads there while a lags must fill nothing (a's old i1, read
    after b's invalidation went by, would be cached for good): reads fill
    only from shared connections."""
    a, b = master_and_replica(redis_factory)
    fwd = front(a)
    p, st, c = cached_behind(proxy_factory, fwd, a, b)
    w = p.raw()
    assert w.cmd("WATCH", "k").raw == b"+OK\r\n"
    assert w.cmd("GET", "k").raw == b"$-1\r\n"  # its own connection, to a

    promote_b_behind_a_replica(fwd, a, b)
    tracking_blip_to_b(p, st, a, b)
    a_lags_b_writing_i1(a, b)
    assert w.cmd("GET", "i1").raw == b"$2\r\nv1\r\n"  # a's, on the watching client's connection
    wait_until(lambda: a.client().get("i1") == b"v2", timeout=5, what="a to catch up")
    assert [c.cmd("GET", "i1").raw for _ in range(3)] == [b"$2\r\nv2\r\n"] * 3
    assert w.cmd("MULTI").raw == b"+OK\r\n"
    assert w.cmd("EXEC").raw == b"*0\r\n"


def other_server_moves(p):
    return open(p.logpath).read().count("leads to another Redis than the invalidation connection reached")


def test_a_data_connection_made_anew_on_the_new_master_moves_tracking_there(redis_factory, proxy_factory,
                                                                             front):
    """b is promoted behind the address, a, demoted, is cut off from it and
    keeps the invalidation connection; no write goes through sidecache.
    A data connection made anew (a's were closed) reaches b, and its
    handshake's INFO names another run_id than the invalidation
    connection's: what it reads fills nothing, and every connection, the
    invalidation one too, moves to the address again (before: i2 read on
    b was cached, and b's later change of it, which a never hears of, was
    never invalidated: the old value served for good)."""
    a, b = master_and_replica(redis_factory)
    fwd = front(a)
    p, st, c = cached_behind(proxy_factory, fwd, a, b)

    promote_b_cut_off_a(fwd, a, b)
    b.client().set("i2", "x1")
    a.client().client_kill_filter(_type="normal")  # the data connections; not the invalidation one (pubsub)

    # on a connection made anew, to b (one written before sidecache read
    # the old one's end gets an error, as a direct client's would)
    wait_until(lambda: c.cmd("GET", "i2").raw == b"$2\r\nx1\r\n", timeout=3, what="b's i2")
    b.client().set("i2", "x2")
    wait_until(lambda: c.cmd("GET", "i2").raw == b"$2\r\nx2\r\n", timeout=3, what="b's new value of i2")
    assert other_server_moves(p) == 1
    wait_invalidation_connection_on(b)
    wait_tracking_active(p, stats=st)
    # caching again, coherent with b
    assert warm(c, st, ("GET", "i2")) == [b"x2"]
    b.client().set("i2", "x3")
    wait_until(lambda: c.cmd("GET", "i2").raw == b"$2\r\nx3\r\n", timeout=3, what="b's invalidation of i2")
    assert other_server_moves(p) == 1


def test_a_connection_whose_info_met_a_busy_script_fills_nothing_until_its_server_is_known(
        redis_factory, proxy_factory, front):
    """The case above, with b running a script past busy-reply-threshold
    when the data connection is made anew there: INFO (and PING) answer
    BUSY, and the handshake goes through with the server not known. That
    connection fills nothing, INFO is asked again each second, and its
    answer once the script ended moves every connection to b (before: the
    connection filled from b once the script ended, and b's later change
    was never invalidated)."""
    a = redis_factory(name="a")
    b = redis_factory(name="b", args=("--replicaof", HOST, str(a.port)) + busy_threshold_args(50))
    wait_until(lambda: b.client().info("replication")["master_link_status"] == "up", timeout=10,
               what="b to sync")
    fwd = front(a)
    p, st, c = cached_behind(proxy_factory, fwd, a, b)
    promote_b_cut_off_a(fwd, a, b)
    b.client().set("i2", "x1")

    script = b.raw()
    script.send_cmd("EVAL", LONG_SCRIPT, 0, 3000000)
    probe = b.raw()
    wait_until(lambda: probe.cmd("PING").raw.startswith(b"-BUSY "), timeout=2, what="b to run the script")
    a.client().client_kill_filter(_type="normal")
    # a connection made anew to b, its handshake answered BUSY
    wait_until(lambda: c.cmd("GET", "i2").raw.startswith(b"-BUSY "), timeout=2, what="a read to meet the script")
    assert script.read_frame(timeout=10).raw == b":1\r\n"
    assert [c.cmd("GET", "i2").raw for _ in range(3)] == [b"$2\r\nx1\r\n"] * 3
    b.client().set("i2", "x2")
    wait_until(lambda: c.cmd("GET", "i2").raw == b"$2\r\nx2\r\n", timeout=3, what="b's new value of i2")
    wait_until(lambda: other_server_moves(p) == 1, timeout=5, what="INFO asked again, and the move")
    wait_tracking_active(p, stats=st)
    assert warm(c, st, ("GET", "i2")) == [b"x2"]
    b.client().set("i2", "x3")
    wait_until(lambda: c.cmd("GET", "i2").raw == b"$2\r\nx3\r\n", timeout=3, what="b's invalidation of i2")


def monitored(mon, seconds):
    """What a MONITOR connection printed within `seconds`, one line each."""
    lines = []
    end = time.monotonic() + seconds
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return lines
        try:
            lines.append(mon.read_frame(timeout=left).value.decode())
        except socket.timeout:
            return lines


@pytest.mark.parametrize("mode", ["default", "optin"])
def test_a_connection_on_another_server_turns_no_tracking_on_there(redis_factory, proxy_factory, front, mode):
    """default/optin: a data connection turns tracking on redirected to the
    invalidation connection, by its id on its server. Made anew on b while
    the invalidation connection is on a, it would name an id that on b may
    be an unrelated client's, which would get the invalidations: it waits
    for its INFO, which names another server, and sends no CLIENT TRACKING
    (before: sent at once). Once every connection moved to b, tracking
    there redirects to the new invalidation connection, and the cache is
    coherent with b."""
    a, b = master_and_replica(redis_factory)
    fwd = front(a)
    p = proxy_factory(up=a, upstream_url="redis://%s:%d" % (HOST, fwd.port), args=("--tracking-mode", mode))
    st = Stats(p)
    wait_tracking_active(p, stats=st)
    inv_on_a = [x["id"] for x in a.client().client_list() if x.get("name") == "sidecache-invalidation"]
    c = p.raw()
    assert c.cmd("SET", "i1", "v1").raw == b"+OK\r\n"
    wait_until(lambda: b.client().get("i1") == b"v1", what="replication")

    mon = b.raw()
    assert mon.cmd("MONITOR").raw == b"+OK\r\n"
    promote_b_cut_off_a(fwd, a, b)
    a.client().client_kill_filter(_type="normal")
    wait_until(lambda: c.cmd("GET", "i1").raw == b"$2\r\nv1\r\n", timeout=3, what="a read on b")
    wait_until(lambda: other_server_moves(p) == 1, timeout=3, what="the move")
    wait_invalidation_connection_on(b)
    wait_tracking_active(p, stats=st)
    redirects = [ln for ln in monitored(mon, 0.3) if '"tracking" "on" "redirect"' in ln.lower()]
    assert not [ln for ln in redirects if '"%s"' % inv_on_a[0] in ln], redirects

    assert warm(c, st, ("GET", "i1"), attempts=20) == [b"v1"]
    b.client().set("i1", "v2")
    wait_until(lambda: c.cmd("GET", "i1").raw == b"$2\r\nv2\r\n", timeout=3, what="b's invalidation of i1")


def test_a_user_without_info_caches_as_before(redis_factory, proxy_factory):
    """The upstream user may not run INFO: each connection's server stays
    unknown, nothing is compared, and the handshake and the cache go on."""
    r = redis_factory()
    r.client().execute_command("ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info")
    p = proxy_factory(up=r, upstream_url="redis://noinfo:pw@%s:%d" % (HOST, r.port))
    st = Stats(p)
    wait_tracking_active(p, stats=st)
    c = p.raw()
    assert c.cmd("SET", "i1", "v1").raw == b"+OK\r\n"
    assert warm(c, st, ("GET", "i1")) == [b"v1"]
    r.client().set("i1", "v2")
    wait_until(lambda: c.cmd("GET", "i1").raw == b"$2\r\nv2\r\n", timeout=3, what="the invalidation of i1")
    assert other_server_moves(p) == 0
    assert "handshake refused" not in open(p.logpath).read()


def sidecache_data_connections(r):
    """The ids of the normal (not pub/sub: the invalidation connection is
    one) connections on r but the asking one's."""
    own = str(r.client_id())
    return {x["id"] for x in r.client_list(_type="normal") if x["id"] != own}


@pytest.mark.parametrize("mode", ["bcast", "default", "optin"])
def test_tracking_back_on_the_same_server_keeps_the_data_connections(redis_factory, proxy_factory, mode):
    """A blip of the invalidation connection alone: it comes back to the
    same Redis (the same run_id as every data connection's), which the data
    connections never left; they stay (before: all made again at each
    blip), and the cache is coherent with that Redis again (default,
    optin: the kept connections redirect their tracking to the new
    invalidation connection)."""
    r = redis_factory()
    p = proxy_factory(up=r, args=("--tracking-mode", mode))
    st = Stats(p)
    wait_tracking_active(p, stats=st)
    c = p.raw()
    assert c.cmd("SET", "i1", "v1").raw == b"+OK\r\n"
    assert warm(c, st, ("GET", "i1")) == [b"v1"]
    admin = r.client()
    before = sidecache_data_connections(admin)
    inv = [x["id"] for x in admin.client_list() if x.get("name") == "sidecache-invalidation"]
    admin.client_kill_filter(_type="pubsub")
    wait_until(lambda: any(x.get("name") == "sidecache-invalidation" and x["id"] not in inv
                           for x in admin.client_list()), timeout=5, what="tracking to come back")
    wait_tracking_active(p, stats=st)
    assert sidecache_data_connections(admin) == before
    admin.set("i1", "v2")
    wait_until(lambda: c.cmd("GET", "i1").raw == b"$2\r\nv2\r\n", timeout=3, what="the invalidation of i1")
    assert warm(c, st, ("GET", "i1")) == [b"v2"]
    assert sidecache_data_connections(admin) == before


def mismatches_logged(p):
    """(connections on another server that emptied the cache, those that
    did not: a move for an earlier one was waiting)"""
    log = open(p.logpath).read()
    return (log.count("than the invalidation connection (") - log.count(") too: reads on it fill nothing"),
            log.count(") too: reads on it fill nothing"))


def test_connections_on_another_server_empty_the_cache_once_a_move(redis_factory, proxy_factory, front):
    """An address that leads new connections to either of two servers (a
    Service whose selector matches two pods; docs/DEPLOY.md asks for one
    server at a time). The first data connection made on the other server
    than the invalidation connection's empties the cache and asks for a
    move; those made while the move waits for its time (1 s, doubling) fill
    nothing, not even with the reads sent before their INFO was answered
    (whose replies come after that answer), and empty the cache no more (before: each one emptied it, and a front
    that alternates left sidecache caching next to nothing)."""
    a = redis_factory(name="a")
    b = redis_factory(name="b")
    for db in range(6):
        a.client(db=db).set("i1", "a")
        b.client(db=db).set("i1", "b")
    fwd = front(a)
    p = proxy_factory(up=a, upstream_url="redis://%s:%d" % (HOST, fwd.port))
    st = Stats(p)
    wait_tracking_active(p, stats=st)
    c = p.raw()
    assert warm(c, st, ("GET", "i1")) == [b"a"]
    # sessions in dbs 2 to 5, whose connections the move below remakes
    clients = []
    for db in range(2, 6):
        x = p.raw()
        assert x.cmd("SELECT", db).raw == b"+OK\r\n"
        clients.append(x)

    # the first on b: the cache is emptied, every connection moves to b
    fwd.target = b.port
    c1 = p.raw()
    assert c1.cmd("SELECT", 1).raw == b"+OK\r\n"
    assert c1.cmd("GET", "i1").raw == b"$1\r\nb\r\n"
    wait_until(lambda: other_server_moves(p) == 1, timeout=3, what="the first move")
    wait_invalidation_connection_on(b)
    wait_tracking_active(p, stats=st)
    assert warm(c, st, ("GET", "i1")) == [b"b"]

    # within a second of that move, connections made on a (each GET goes
    # right behind its connection's handshake): the first empties the
    # cache and asks for a move, which waits for its time
    fwd.target = a.port

    def read_on_a(xs):
        for x in xs:
            x.send_cmd("GET", "i1")
        assert [x.read_frame().raw for x in xs] == [b"$1\r\na\r\n"] * len(xs)

    read_on_a(clients[:1])
    wait_until(lambda: mismatches_logged(p) == (2, 0), timeout=3, what="the connection on a to be told apart")
    assert warm(c, st, ("GET", "i1")) == [b"b"]
    # the next ones do not empty it
    read_on_a(clients[1:])
    wait_until(lambda: mismatches_logged(p) == (2, 3), timeout=3, what="the connections on a to be told apart")
    with st.delta() as d:
        assert c.cmd("GET", "i1").raw == b"$1\r\nb\r\n"
    assert d["cache_hits"] == 1
    # a changes i1 in db 3: nothing on b tells sidecache, and what the
    # connection there read before its INFO's answer was not cached
    a.client(db=3).set("i1", "a2")
    assert [clients[1].cmd("GET", "i1").raw for _ in range(3)] == [b"$2\r\na2\r\n"] * 3
    assert other_server_moves(p) == 1, "the move came too early to see what this tests"
    wait_until(lambda: other_server_moves(p) == 2, timeout=3, what="the move asked for")


def test_a_read_behind_an_unwatch_answered_ahead_does_not_fill_from_a_demoted_node(
        redis_factory, proxy_factory, front):  # noqa: F811
    """A watching client's own connection stays on the old master (a)
    after the invalidation connection moved to the new one (b). Its UNWATCH
    is answered ahead; the read it sends behind it (a miss) must not fill
    the cache from a: it waits for that UNWATCH's reply and goes, unpinned,
    on the shared connection, to b. (Found by review: it had gone on the
    client's own connection, to a, and filled a's old value, served to
    every client after.)"""
    a, b = master_and_replica(redis_factory)
    fwd = front(a)
    p, st, c = cached_behind(proxy_factory, fwd, a, b)
    w = p.raw()
    assert w.cmd("WATCH", "k").raw == b"+OK\r\n"
    assert w.cmd("GET", "k").raw == b"$-1\r\n"  # w's own connection, to a

    promote_b_cut_off_a(fwd, a, b)            # a keeps i1 = v1 for good
    tracking_blip_to_b(p, st, a, b)           # invalidations now come from b
    b.client().set("i1", "v2")
    time.sleep(0.1)
    x = p.raw()
    for _ in range(2):                        # the identity's UNWATCH learned
        assert x.cmd("UNWATCH").raw == b"+OK\r\n"
    ahead0 = int(st.get()["unwatch_ahead"])
    with busy_redis(a, 1.0):
        assert w.cmd("UNWATCH", timeout=0.8).raw == b"+OK\r\n"   # answered ahead
        w.send_cmd("GET", "i1")
    assert w.read_frame(timeout=5).raw == b"$2\r\nv2\r\n"
    assert int(st.get()["unwatch_ahead"]) == ahead0 + 1
    time.sleep(0.1)
    assert [c.cmd("GET", "i1").raw for _ in range(3)] == [b"$2\r\nv2\r\n"] * 3


def test_tracking_upstream_leading_to_another_server_than_the_data_path_caches_nothing(
        redis_factory, proxy_factory, front):
    """tracking-upstream is another path to the same Redis. When the
    upstream's address comes to lead elsewhere (a failover or a restart
    behind a virtual IP that the tracking path does not follow), the data
    connections read b while the invalidations come from a: the run_id of
    each data connection's handshake, compared with the invalidation
    connection's as without tracking-upstream, says so, and what they read
    fills nothing (before: the comparison was off with tracking-upstream,
    b's i1 was cached and b's change of it, which a never tells of, never
    seen: review-loss 3)."""
    a = redis_factory(name="a")
    b = redis_factory(name="b")
    fwd = front(a)
    p = proxy_factory(up=a, upstream_url="redis://%s:%d" % (HOST, fwd.port),
                      args=("--tracking-upstream", "redis://%s:%d" % (HOST, a.port)))
    st = Stats(p)
    wait_tracking_active(p, stats=st)
    a.client().set("i1", "a1")
    c = p.raw()
    assert warm(c, st, ("GET", "i1")) == [b"a1"]     # the paths agree: cached
    a.client().set("i1", "a2")
    wait_until(lambda: c.cmd("GET", "i1").raw == b"$2\r\na2\r\n", timeout=3, what="a's invalidation of i1")

    b.client().set("i1", "b1")
    fwd.target = b.port
    a.client().client_kill_filter(_type="normal")   # the data connections; not the invalidation one
    wait_until(lambda: c.cmd("GET", "i1").raw == b"$2\r\nb1\r\n", timeout=3, what="b's i1")
    for _ in range(5):
        assert c.cmd("GET", "i1").raw == b"$2\r\nb1\r\n"
    b.client().set("i1", "b2")
    assert [c.cmd("GET", "i1").raw for _ in range(3)] == [b"$2\r\nb2\r\n"] * 3
    assert "tracking-upstream must lead to the same Redis as upstream" in open(p.logpath).read()
    # back on one server: cached again
    fwd.target = a.port
    a.client().set("i1", "a3")
    b.client().client_kill_filter(_type="normal")
    wait_until(lambda: c.cmd("GET", "i1").raw == b"$2\r\na3\r\n", timeout=5, what="a again")
    wait_tracking_active(p, stats=st)
    wait_until(lambda: warm(c, st, ("GET", "i1")) == [b"a3"], timeout=5, what="caching again")
