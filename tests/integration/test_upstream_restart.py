"""Redis restarted under load: while Redis is down, commands fail fast with
an error that names the upstream (no hangs, no closed client connections):
-MASTERDOWN for a command that could not be sent (nothing ran; go-redis
retries it as it retries a refused connection), -ERR for one that was on
its way when the connection was lost (-MASTERDOWN for a read: it changed
nothing, and go-redis sends it again);
after Redis is back on the same port the same connections work again, and
nothing stale is served from the cache. Redis restarted with data is LOADING
for a while: that is not taken for a password (see below)."""
import threading
import time

import pytest

from cachehelpers import Stats, wait_tracking_active
from helpers import ConnectionClosed, Err, encode, port_accepts

DOWN_FOR = 2.0           # seconds Redis stays dead
ERR_WITHIN = 0.5         # after the kill, every reply must be an error after this
MAX_LATENCY = 4.0        # no single command may take longer than this
RECOVER_WITHIN = 10.0    # after the restart, every client must succeed by then


def upstream_down(raw):
    """Redis could not be reached (MASTERDOWN), or the connection was lost
    with the command on its way (ERR): either names the upstream."""
    return (isinstance(raw, bytes) and raw.startswith((b"-MASTERDOWN sidecache: ", b"-ERR sidecache: "))
            and b"upstream" in raw.lower())


class Hammer(threading.Thread):
    """One client connection doing SET/GET in a loop; it records every reply
    and never reconnects."""

    def __init__(self, proxy, idx, protocol):
        super().__init__(daemon=True)
        self.idx = idx
        self.c = proxy.raw(timeout=MAX_LATENCY + 4, protocol=3 if protocol == 3 else None)
        self.stop = threading.Event()
        self.log = []          # (t_sent, t_recv, cmd, raw reply or "<closed>"/"<hang>")
        self.fatal = None
        self.last_set = None

    def op(self, *cmd):
        t0 = time.monotonic()
        self.c.send(encode(*cmd))
        try:
            f = self.c.read_frame(timeout=MAX_LATENCY + 4)
            raw = f.raw
        except ConnectionClosed:
            raw = "<closed>"
        except OSError as e:
            raw = "<hang: %r>" % e
        self.log.append((t0, time.monotonic(), cmd, raw))
        if isinstance(raw, str):
            self.fatal = "%s -> %s" % (cmd, raw)
        return raw

    def run(self):
        j = 0
        key = "w%d" % self.idx
        while not self.stop.is_set() and self.fatal is None:
            j += 1
            if self.op("SET", key, j) == b"+OK\r\n":
                self.last_set = j
            got = self.op("GET", key)
            if isinstance(got, bytes) and not got.startswith(b"-") and self.last_set is not None:
                want = b"$%d\r\n%d\r\n" % (len(str(self.last_set)), self.last_set)
                # nil is fine: Redis came back empty.
                if got != want and got not in (b"$-1\r\n", b"_\r\n"):
                    self.fatal = "GET %s returned %r after SET %d" % (key, got, self.last_set)
            self.op("GET", "i1")
            time.sleep(0.005)
        self.c.close()

    def successes_after(self, t):
        return [e for e in self.log if e[0] >= t and isinstance(e[3], bytes)
                and not e[3].startswith(b"-")]


@pytest.mark.proxy_only
@pytest.mark.slow
@pytest.mark.timeout(90)
def test_redis_restarted_under_load_errors_then_recovers_on_same_connections(proxy, upstream):
    r = proxy.client()
    r.set("i1", "before-restart")
    r.hset("d1", "name", "old-entry")
    for _ in range(3):
        assert r.get("i1") == b"before-restart"
        assert r.hget("d1", "name") == b"old-entry"
    r.close()

    # Clients that are idle across the restart, one of them in db 3.
    idle = proxy.raw()
    idle_db3 = proxy.raw()
    assert idle_db3.cmd("SELECT", 3).raw == b"+OK\r\n"
    idle3 = proxy.raw(protocol=3)

    hammers = [Hammer(proxy, i, 3 if i % 3 == 0 else 2) for i in range(8)]
    for h in hammers:
        h.start()
    try:
        time.sleep(0.5)
        for h in hammers:
            assert h.successes_after(0), "hammer %d never succeeded before the kill" % h.idx

        t_kill = time.monotonic()
        upstream.kill()
        time.sleep(DOWN_FOR)
        assert not port_accepts(upstream.port)
        t_restart = time.monotonic()
        upstream.restart()

        deadline = t_restart + RECOVER_WITHIN
        while time.monotonic() < deadline:
            if all(h.successes_after(t_restart + 0.01) or h.fatal for h in hammers):
                break
            time.sleep(0.05)
        time.sleep(0.3)
    finally:
        for h in hammers:
            h.stop.set()
        for h in hammers:
            h.join(MAX_LATENCY + 6)

    problems = []
    for h in hammers:
        if h.fatal:
            problems.append("client %d: %s" % (h.idx, h.fatal))
        for t0, t1, cmd, raw in h.log:
            if t1 - t0 > MAX_LATENCY:
                problems.append("client %d: %r took %.1fs" % (h.idx, cmd, t1 - t0))
            if t_kill + ERR_WITHIN <= t0 and t1 <= t_restart:
                if not upstream_down(raw):
                    problems.append("client %d: %r while Redis was down -> %r (want -MASTERDOWN/-ERR ... upstream)"
                                    % (h.idx, cmd, raw))
        down = [e for e in h.log if t_kill + ERR_WITHIN <= e[0] and e[1] <= t_restart]
        if not down:
            problems.append("client %d: no reply at all while Redis was down (hung?)" % h.idx)
        if not h.successes_after(t_restart):
            problems.append("client %d: no success within %.0fs of the restart" % (h.idx, RECOVER_WITHIN))
    assert not problems, "\n".join(problems[:20])

    # The idle connections work without reconnecting (a retry on the same
    # connection is allowed).
    for name, c, expect_db in (("idle", idle, 0), ("idle-db3", idle_db3, 3), ("idle-resp3", idle3, 0)):
        deadline = time.monotonic() + RECOVER_WITHIN
        while True:
            f = c.cmd("SET", "idle:" + name, "back", timeout=MAX_LATENCY + 2)
            if f.raw == b"+OK\r\n":
                break
            assert upstream_down(f.raw), (name, f)
            assert time.monotonic() < deadline, "%s never recovered: %r" % (name, f)
            time.sleep(0.1)
    d = upstream.client()
    assert d.get("idle:idle") == b"back"
    assert upstream.client(db=3).get("idle:idle-db3") == b"back", \
        "a client that had SELECTed 3 must still be in db 3 after the upstream came back"
    idle.close(); idle_db3.close(); idle3.close()

    # Redis came back empty: nothing from before may be served from a cache.
    r = proxy.client()
    assert r.get("i1") is None, "stale cached i1 served after the upstream restarted empty"
    assert r.hget("d1", "name") is None, "stale cached d1 served after the upstream restarted empty"
    r.set("i1", "after")
    assert r.get("i1") == b"after"
    assert proxy.alive()


@pytest.mark.proxy_only
@pytest.mark.timeout(30)
def test_redis_down_command_errors_name_upstream_and_connection_stays_open(proxy, upstream):
    """A single client: kill Redis, its next commands get -MASTERDOWN ...
    upstream ... promptly (nothing ran: a client retries that); start Redis
    again; the same connection works."""
    with proxy.raw() as c:
        assert c.cmd("SET", "k", "v").raw == b"+OK\r\n"
        upstream.kill()
        time.sleep(0.3)
        for cmd in (("GET", "k"), ("SET", "k", "2"), ("GET", "i5"), ("HGET", "d5", "x"), ("INCR", "n")):
            t0 = time.monotonic()
            f = c.cmd(*cmd, timeout=MAX_LATENCY + 2)
            assert time.monotonic() - t0 < MAX_LATENCY
            assert isinstance(f.value, Err) and f.raw.startswith(b"-MASTERDOWN sidecache: upstream "), (cmd, f)
            assert b"unavailable" in f.raw, (cmd, f)
        upstream.restart()
        deadline = time.monotonic() + RECOVER_WITHIN
        while c.cmd("PING").raw != b"+PONG\r\n" or c.cmd("SET", "k", "3").raw != b"+OK\r\n":
            assert time.monotonic() < deadline, "no recovery"
            time.sleep(0.1)
        assert c.cmd("GET", "k").raw == b"$1\r\n3\r\n"


@pytest.mark.proxy_only
@pytest.mark.timeout(30)
def test_proxy_starts_while_redis_is_down_and_serves_once_it_is_up(proxy_factory, redis_factory):
    up = redis_factory()
    up.kill()
    proxy = proxy_factory(up=up)
    with proxy.raw() as c:
        f = c.cmd("GET", "k", timeout=MAX_LATENCY + 2)
        assert f.raw.startswith(b"-MASTERDOWN sidecache: upstream ") and b"unavailable" in f.raw, f
        up.restart()
        deadline = time.monotonic() + RECOVER_WITHIN
        while c.cmd("SET", "k", "v").raw != b"+OK\r\n":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert c.cmd("GET", "k").raw == b"$1\r\nv\r\n"


def _log(proxy):
    with open(proxy.logpath) as f:
        return f.read()


@pytest.mark.proxy_only
@pytest.mark.timeout(30)
def test_start_log_says_upstream_not_reached_until_redis_answers(proxy_factory, redis_factory):
    """"ready" at start means listening, not that Redis answered: with Redis
    down it says upstream_reached=no (it said only "ready upstream=..."), and
    one "upstream reached" line follows once Redis first answers, not one
    per connection nor again after Redis restarts."""
    up = redis_factory()
    up.kill()
    proxy = proxy_factory(up=up)
    addr = "127.0.0.1:%d" % up.port
    log = _log(proxy)
    assert "ready upstream=redis://%s upstream_connections=2 upstream_reached=no" % addr in log, log
    assert "upstream reached" not in log, log
    up.restart()
    with proxy.raw() as c:
        deadline = time.monotonic() + RECOVER_WITHIN
        while c.cmd("SET", "k", "v").raw != b"+OK\r\n":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        wait_tracking_active(proxy)
        up.kill()
        up.restart()
        deadline = time.monotonic() + RECOVER_WITHIN
        while c.cmd("SET", "k", "w").raw != b"+OK\r\n":
            assert time.monotonic() < deadline
            time.sleep(0.1)
    log = _log(proxy)
    assert log.count("upstream reached") == 1, log
    assert "level=notice upstream reached addr=%s" % addr in log, log



# ---------------------------------------------------------------------------
# Redis restarted with data: LOADING is not a password
#
# A Redis that reads its dataset answers -LOADING to nearly every command,
# the PING that probes a new upstream connection for access included. That
# says nothing about whether Redis wants a password: once it has loaded, a
# client without credentials must get what Redis gives it (PONG; an MSET of
# more than 10 arguments and a bulk over 16 KB, which Redis refuses before
# AUTH where it wants one), not NOAUTH or a protocol error, and its reads
# must be served from the cache again.

# key-load-delay (Redis 7, microseconds per key read) stretches the load to a
# few seconds; Redis answers clients (-LOADING) every KB meanwhile.
SLOW_LOAD = ("--key-load-delay", "1000", "--loading-process-events-interval-bytes", "1024")
LOAD_KEYS = 4000  # about 4 s of LOADING


def redis_loading(up):
    with up.raw() as c:
        info = c.call("INFO", "persistence")
    assert not isinstance(info, Err), info
    return b"loading:1" in bytes(info)


def restart_loading(up):
    """Fills up with LOAD_KEYS keys, saves them, kills it and starts it
    again on the same port and dir: it is LOADING for a few seconds."""
    with up.raw() as c:
        if c.call("CONFIG", "GET", "key-load-delay") == []:
            pytest.skip("this redis-server has no key-load-delay")
        assert c.cmd("DEBUG", "POPULATE", LOAD_KEYS, "load").raw == b"+OK\r\n"
        assert c.cmd("SAVE").raw == b"+OK\r\n"
    up.kill()
    up.restart()
    assert redis_loading(up), "Redis loaded too fast for this test"


def wait_loaded(up, timeout=30.0):
    deadline = time.monotonic() + timeout
    with up.raw() as c:
        while c.cmd("PING").raw != b"+PONG\r\n":
            assert time.monotonic() < deadline, "Redis still loading after %.0fs" % timeout
            time.sleep(0.05)


def proxy_clients(proxy, n=4):
    """n clients in a row: consecutive ids, so that between them they use
    every shared connection of the pool (2 by default)."""
    return [proxy.raw(timeout=MAX_LATENCY + 4) for _ in range(n)]


def get_loading_through(up, clients):
    """A GET from each client until Redis answers it -LOADING: then the
    shared connection it uses was made, and its access probe answered,
    while Redis was loading (a connection the proxy has not yet seen
    closed may fail a request first)."""
    for c in clients:
        deadline = time.monotonic() + RECOVER_WITHIN
        while True:
            f = c.cmd("GET", "i1", timeout=MAX_LATENCY + 2)
            if f.raw.startswith(b"-LOADING"):
                break
            assert upstream_down(f.raw), f
            assert time.monotonic() < deadline, "no -LOADING through the proxy: %r" % f
            time.sleep(0.02)
    assert redis_loading(up), "Redis loaded too fast for this test"


def served_as_open(proxy, up, clients):
    """After the load: what a client without credentials gets is what Redis
    gives it, and its reads are hits again."""
    mset = ["MSET"] + [x for i in range(6) for x in ("m%d" % i, str(i))]  # 12 arguments
    with up.raw() as direct:
        for c in clients:
            for cmd in (("PING",), mset, ("SET", "big", "x" * 20000), ("MGET", "m0", "m5")):
                want = direct.cmd(*cmd).raw
                assert c.cmd(*cmd).raw == want, (cmd[0], "want %r" % want[:60])

    # Read on db 0's own shared connections: a new pool would probe anew.
    st = Stats(proxy, db=0)
    wait_tracking_active(proxy, stats=st)
    c = clients[0]
    assert c.cmd("SET", "i1", "v").raw == b"+OK\r\n"
    deadline = time.monotonic() + RECOVER_WITHIN
    while True:
        before = st["cache_hits"]
        for _ in range(3):
            assert c.cmd("GET", "i1").raw == b"$1\r\nv\r\n"
        if st["cache_hits"] > before:
            break
        assert time.monotonic() < deadline, "no hit for a client without credentials after the load"
        time.sleep(0.2)
    st.close()


@pytest.mark.proxy_only
@pytest.mark.timeout(60)
@pytest.mark.redis(7, 0, "loading-process-events-interval-bytes: a LOADING that answers")
def test_redis_loading_after_restart_is_not_taken_for_a_password(proxy_factory, redis_factory):
    up = redis_factory(args=SLOW_LOAD)
    proxy = proxy_factory(up=up)
    clients = proxy_clients(proxy)
    for c in clients:
        assert c.cmd("PING").raw == b"+PONG\r\n"
    restart_loading(up)
    get_loading_through(up, clients)
    wait_loaded(up)
    served_as_open(proxy, up, clients)
    for c in clients:
        c.close()


@pytest.mark.proxy_only
@pytest.mark.timeout(60)
@pytest.mark.redis(7, 0, "loading-process-events-interval-bytes: a LOADING that answers")
def test_proxy_started_while_redis_loads_learns_access_once_loaded(proxy_factory, redis_factory):
    """Every probe meets LOADING, so nothing is known: the proxy asks again
    on its (long-lived) connections, and learns once Redis has loaded."""
    up = redis_factory(args=SLOW_LOAD)
    restart_loading(up)
    proxy = proxy_factory(up=up)
    clients = proxy_clients(proxy)
    get_loading_through(up, clients)
    wait_loaded(up)
    served_as_open(proxy, up, clients)
    for c in clients:
        c.close()
