"""
tests/integration/test_name_lookup.py — an upstream named by a host name.
A lookup that hangs (a DNS server that does not answer: a partition, a
node's resolver down, a pod's DNS) does not stop the proxy: getaddrinfo()
has no timeout of its own; the proxy waits for lookups at most 100 ms a
second (proxy/resolve.h), answers its clients meanwhile (an error naming the
lookup, as for a refused connect), and takes the lookup's answer when it
comes. Each address of a name is tried in turn. A name that comes to point
elsewhere (a managed Redis's failover) is followed.

The resolver is fake_resolver.c, preloaded into the proxy: names ending in
.slow.test take SLOW_LOOKUP_MS, then resolve to 127.0.0.1; names ending in
.file.test resolve to what the file FAKE_HOSTS says when asked.
"""
import os
import socket
import subprocess
import time

import pytest

from cachehelpers import Stats, wait_tracking_active, warm
from helpers import HOST, ConnectionClosed, Err, Forwarder, wait_until
from test_connect_timeout import timed

pytestmark = [pytest.mark.proxy_only, pytest.mark.timeout(60)]

LOOKUP_MS = 2500   # how long each lookup of a .slow.test name takes
PROMPT = 0.5       # a reply later than this waited for the lookup
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def slow_resolver(tmp_path_factory):
    lib = str(tmp_path_factory.mktemp("fakedns") / "fake_resolver.so")
    subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", "-O1", "-o", lib,
                    os.path.join(HERE, "fake_resolver.c"), "-ldl"], check=True)
    return lib


def preload_env(lib, **extra):
    asan = os.environ.get("ASAN_OPTIONS", "")
    return dict({"LD_PRELOAD": lib,
                 # an ASan build checks that its runtime is the first library loaded
                 "ASAN_OPTIONS": (asan + ":" if asan else "") + "verify_asan_link_order=0"}, **extra)


def slow_env(lib, log):
    return preload_env(lib, SLOW_LOOKUP_MS=str(LOOKUP_MS), SLOW_LOOKUP_LOG=str(log))


def point(hosts, name, *servers):
    """The name resolves to these redis-servers (or (address, port) pairs),
    in order, from now on."""
    pairs = [s if isinstance(s, tuple) else ("127.0.0.1", s.port) for s in servers]
    tmp = str(hosts) + ".new"
    with open(tmp, "w") as f:
        f.write("%s %s\n" % (name, " ".join("%s %d" % pr for pr in pairs)))
    os.replace(tmp, str(hosts))


def lookups(log):
    return open(log).read().split() if os.path.exists(log) else []


def test_a_hanging_lookup_holds_no_client_up(proxy_factory, upstream, slow_resolver, tmp_path):
    """Started on a name whose lookup takes 2.5 s: each request meanwhile gets
    an error at once that says the name is being looked up; once the answer
    is in, requests reach Redis."""
    log = tmp_path / "lookups"
    name = "redis-upstream.slow.test"
    p = proxy_factory(upstream_url="redis://%s:%d" % (name, upstream.port), env=slow_env(slow_resolver, log))
    c = p.raw(auth=True)
    raw, took = timed(c, "SET", "k", "v")
    assert took < PROMPT, "the reply waited %.2fs for the lookup" % took
    # (a proxy that waits for lookups has Redis's +OK here: it held its start)
    assert raw.startswith(b"-") and b"looking up " + name.encode() in raw, raw
    upstream.client().set("k", "before")
    wait_until(lambda: c.cmd("GET", "k", timeout=10).raw == b"$6\r\nbefore\r\n", timeout=10, interval=0.05,
               what="the lookup's answer to be taken")
    assert c.cmd("SET", "k", "through").raw == b"+OK\r\n"
    assert upstream.client().get("k") == b"through"
    assert name in lookups(log)


def test_the_lookup_again_after_redis_went_away_holds_no_client_up(proxy_factory, upstream, slow_resolver,
                                                                   tmp_path):
    """Redis goes away: the connects that fail look the name up again (it may
    point elsewhere now), and that lookup hangs. The proxy goes on answering
    at once, and is back once Redis is."""
    log = tmp_path / "lookups"
    name = "redis-upstream.slow.test"
    p = proxy_factory(upstream_url="redis://%s:%d" % (name, upstream.port), env=slow_env(slow_resolver, log))
    c = p.raw(auth=True)
    wait_until(lambda: c.cmd("SET", "k", "v1", timeout=10).raw == b"+OK\r\n", timeout=10, interval=0.05,
               what="the first lookup's answer to be taken")
    before = len(lookups(log))
    upstream.kill()
    slowest = 0.0
    deadline = time.monotonic() + 2 * LOOKUP_MS / 1000.0
    while time.monotonic() < deadline:
        raw, took = timed(c, "GET", "k")
        assert raw.startswith(b"-"), raw
        slowest = max(slowest, took)
        time.sleep(0.05)
    assert len(lookups(log)) > before, "the name was not looked up again"
    assert slowest < PROMPT, "a reply waited %.2fs for the lookup" % slowest
    upstream.restart()
    wait_until(lambda: c.cmd("SET", "k", "v2", timeout=10).raw == b"+OK\r\n", timeout=15, interval=0.05,
               what="requests to reach Redis again")
    assert upstream.client().get("k") == b"v2"


def test_each_address_of_a_name_is_tried(proxy_factory, upstream, slow_resolver, tmp_path):
    """A name's first address refuses the connect (localhost gives ::1 first,
    and Redis listens on 127.0.0.1 only): the next connect goes to its next
    address, as redis-cli's would, instead of to the first one for ever."""
    hosts = tmp_path / "hosts"
    name = "redis-up.file.test"
    point(hosts, name, ("::1", upstream.port), upstream)
    p = proxy_factory(upstream_url="redis://%s:%d" % (name, upstream.port),
                      env=preload_env(slow_resolver, FAKE_HOSTS=str(hosts)))
    c = p.raw(auth=True)
    wait_until(lambda: c.cmd("SET", "k", "v", timeout=10).raw == b"+OK\r\n", timeout=10, interval=0.05,
               what="a connect to the name's second address")
    assert upstream.client().get("k") == b"v"


def proxy_on_a_name(proxy_factory, upstream, resolver, tmp_path, at=None):
    """A proxy whose upstream is a name that resolves to `upstream` (or to
    the (address, port) at); and a function that points the name at
    another redis-server."""
    hosts = tmp_path / "hosts"
    name = "redis-up.file.test"
    point(hosts, name, at or upstream)
    p = proxy_factory(upstream_url="redis://%s:%d" % (name, upstream.port),
                      env=preload_env(resolver, FAKE_HOSTS=str(hosts)))
    return p, lambda server: point(hosts, name, server)


def test_a_name_that_points_elsewhere_is_followed(proxy_factory, upstream, redis_factory, slow_resolver,
                                                  tmp_path):
    """The name comes to point at another Redis (a managed Redis's failover,
    a migration) while the one it pointed at stays up: within the name's
    check (every 5 s) the connections move there, and the cache is emptied
    first, so nothing read from the old one is served."""
    b = redis_factory(name="b")
    p, move_to = proxy_on_a_name(proxy_factory, upstream, slow_resolver, tmp_path)
    c = cached_from_a(p, upstream, b)
    move_to(b)
    t0 = time.monotonic()
    wait_until(lambda: c.cmd("GET", "i1", timeout=10).value == b"on-b", timeout=12, interval=0.1,
               what="the proxy to follow the name")
    assert time.monotonic() - t0 < 8
    assert c.cmd("SET", "k", "on-b-now").raw == b"+OK\r\n"
    assert b.client().get("k") == b"on-b-now"
    assert upstream.client().get("k") is None
    assert "upstream name now points elsewhere" in open(p.logpath).read()


def cached_from_a(p, a, b):
    """i1 is on-a on a and on-b on b; a client of p, with i1 cached from a."""
    st = Stats(p)
    wait_tracking_active(p, stats=st)
    a.client().set("i1", "on-a")
    b.client().set("i1", "on-b")
    c = p.raw(auth=True)
    warm(c, st, ("GET", "i1"))
    assert c.cmd("GET", "i1").value == b"on-a"
    return c


def test_a_readonly_has_the_name_looked_up_at_once(proxy_factory, upstream, redis_factory, slow_resolver,
                                                   tmp_path):
    """A managed failover: the name moves to the new primary and the old one
    becomes its replica, still taking connections. The READONLY a write gets
    there has the name looked up again at the next check (a second), not
    after the 5 s an answer is kept."""
    b = redis_factory(name="b")
    p, move_to = proxy_on_a_name(proxy_factory, upstream, slow_resolver, tmp_path)
    c = p.raw(auth=True)
    wait_until(lambda: c.cmd("SET", "k", "v1", timeout=10).raw == b"+OK\r\n", timeout=10, interval=0.05,
               what="the upstream to be reached")
    move_to(b)
    upstream.client().execute_command("REPLICAOF", "127.0.0.1", str(b.port))
    try:
        t0 = time.monotonic()
        first = c.cmd("SET", "k", "v2").raw
        assert first.startswith(b"-READONLY"), first
        wait_until(lambda: c.cmd("SET", "k", "v2", timeout=10).raw == b"+OK\r\n", timeout=10, interval=0.05,
                   what="writes to reach the new primary")
        assert time.monotonic() - t0 < 3.5
        assert b.client().get("k") == b"v2"
    finally:
        upstream.client().execute_command("REPLICAOF", "NO", "ONE")


def subscribes(p, keep):
    """Whether a new client's SUBSCRIBE (a connection of its own, made
    now) works: the proxy closes a client whose connect failed."""
    s = p.raw(auth=True)
    try:
        f = s.cmd("SUBSCRIBE", "ch", timeout=5)
    except ConnectionClosed:
        return False
    keep.append(s)
    return not isinstance(f.value, Err)


def test_a_name_taken_after_a_failed_connect_is_a_move(proxy_factory, upstream, redis_factory, slow_resolver,
                                                       tmp_path):
    """test_a_name_that_points_elsewhere_is_followed, with a connect to the
    old Redis failing after the name moved (the old one stays up: a
    migration, a primary fenced by DNS alone). The next connect looks the
    name up again and goes to the new one; the connections still open to
    the old one, the invalidation connection and what the cache holds from
    it must move and go too, as at the name's check: the check compares
    where those went, not where the last connect went; and a connect that
    reaches another address makes the move at the next check."""
    b = redis_factory(name="b")
    a_front = Forwarder(upstream.port)
    p, move_to = proxy_on_a_name(proxy_factory, upstream, slow_resolver, tmp_path, at=(HOST, a_front.port))
    c = cached_from_a(p, upstream, b)
    move_to(b)
    a_front.stop_accepting()
    keep = []
    assert not subscribes(p, keep), "a connect to the old address is refused now"
    time.sleep(0.5)  # the pool's back-off
    wait_until(lambda: subscribes(p, keep), timeout=5, interval=0.2, what="a connect to the new address")
    wait_until(lambda: c.cmd("GET", "i1", timeout=10).value == b"on-b", timeout=8, interval=0.1,
               what="the proxy to serve the new Redis's i1")
    assert "upstream reached at another address" in open(p.logpath).read()


def test_a_late_failed_connect_leaves_the_address_that_works(proxy_factory, upstream, slow_resolver, tmp_path):
    """The name gives X, which drops connects (a full accept queue: the
    kernel drops the SYNs), then the working address G. Two connects to X
    are in flight; the first times out and G is taken, and works; then the
    second times out. That says nothing of G: the next connect goes to G at
    once, not back to X to wait out its timeout."""
    x = socket.socket()
    x.bind((HOST, 0))
    x.listen(0)
    xport = x.getsockname()[1]
    fillers = []
    for _ in range(3):
        f = socket.socket()
        f.setblocking(False)
        try:
            f.connect((HOST, xport))
        except BlockingIOError:
            pass
        fillers.append(f)
    time.sleep(0.3)
    hosts = tmp_path / "hosts"
    name = "redis-up.file.test"
    point(hosts, name, (HOST, xport), upstream)
    p = proxy_factory(upstream_url="redis://%s:%d" % (name, upstream.port),
                      args=("--upstream-connect-timeout", "1000"),
                      env=preload_env(slow_resolver, FAKE_HOSTS=str(hosts)))

    def reply(cl):
        try:
            return cl.read_frame(timeout=5).raw
        except ConnectionClosed:
            return b"closed"

    # (at its start the proxy's first connect, to X, times out at ~1 s, and
    # the name's next address, G, is taken)
    c1 = p.raw()
    time.sleep(0.5)
    c1.send_cmd("SUBSCRIBE", "b")  # a connect to X, in flight while G is taken
    time.sleep(0.8)                # the first timed out, its back-off is over
    c2 = p.raw()
    c2.send_cmd("SUBSCRIBE", "c")  # G: works
    assert reply(c2).startswith(b"*3"), "G works"
    reply(c1)                      # its connect to X times out (~1.5 s)
    time.sleep(0.3)
    c3 = p.raw()
    raw, took = timed(c3, "SUBSCRIBE", "d")
    assert raw.startswith(b"*3") and took < 0.5, (raw, took)
    x.close()
    for f in fillers:
        f.close()


def test_each_address_of_a_sentinels_name_is_tried(redis_factory, tmp_path_factory, proxy_factory, slow_resolver,
                                                   tmp_path):
    """A sentinel named by a host name whose first address refuses (::1; the
    sentinel listens on 127.0.0.1 only) is asked at its next address the
    next time, as the upstream's name is."""
    from test_sentinel import Sentinel
    master = redis_factory(name="master")
    s = Sentinel(tmp_path_factory.mktemp("sentinel"), master.port)
    s.start()
    try:
        hosts = tmp_path / "hosts"
        name = "sentinel.file.test"
        point(hosts, name, ("::1", s.port), (HOST, s.port))
        p = proxy_factory(args=("--upstream-sentinel", "mymaster", "%s:%d" % (name, s.port)),
                          env=preload_env(slow_resolver, FAKE_HOSTS=str(hosts)))
        c = p.raw(auth=True)
        wait_until(lambda: c.cmd("SET", "k", "v", timeout=10).raw == b"+OK\r\n", timeout=10, interval=0.2,
                   what="the master, from the sentinel's second address")
        assert master.client().get("k") == b"v"
    finally:
        s.stop()


def free_port():
    s = socket.socket()
    s.bind((HOST, 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_a_name_narrowed_to_its_refused_first_address_is_a_move(proxy_factory, upstream, redis_factory,
                                                                 slow_resolver, tmp_path):
    """The name gives [X, A]; X refuses (nothing listens there yet), so the
    connections go to A. Later the name gives only X, which now leads to
    another Redis: a move, for the cache holds A's values. What the check
    compares is where the connections went (A), not the name's first
    address."""
    b = redis_factory(name="b")
    xport = free_port()
    hosts = tmp_path / "hosts"
    name = "redis-up.file.test"
    point(hosts, name, (HOST, xport), upstream)
    p = proxy_factory(upstream_url="redis://%s:%d" % (name, upstream.port),
                      env=preload_env(slow_resolver, FAKE_HOSTS=str(hosts)))
    c = cached_from_a(p, upstream, b)
    x_front = Forwarder(b.port, port=xport)
    point(hosts, name, (HOST, xport))
    wait_until(lambda: c.cmd("GET", "i1", timeout=10).value == b"on-b", timeout=15, interval=0.2,
               what="the proxy to serve what X's Redis holds")
    x_front.stop_accepting()


def test_a_refused_first_address_dropped_from_the_name_is_no_move(proxy_factory, upstream, redis_factory,
                                                                  slow_resolver, tmp_path):
    """[X, A], X refuses, the connections go to A; the name then drops X
    and gives [A]: nothing moved, and the cache stays."""
    b = redis_factory(name="b")
    hosts = tmp_path / "hosts"
    name = "redis-up.file.test"
    point(hosts, name, (HOST, free_port()), upstream)
    p = proxy_factory(upstream_url="redis://%s:%d" % (name, upstream.port),
                      env=preload_env(slow_resolver, FAKE_HOSTS=str(hosts)))
    cached_from_a(p, upstream, b)
    point(hosts, name, upstream)
    time.sleep(7)  # the name's answer is looked up again after 5 s
    log = open(p.logpath).read()
    assert "points elsewhere" not in log and "another address" not in log
