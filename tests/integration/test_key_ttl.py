"""
Keys with a TTL: a cached value must not outlive its key.

Redis sends the invalidation of an expired key only when it deletes the key:
when a client reads it there, or when its background expiry, which samples a
few keys at a time, comes to it. Each test here turns that background expiry
off (DEBUG SET-ACTIVE-EXPIRE 0) and never reads the key directly before the
proxy does, so no invalidation comes at all: what the proxy answers after the
expiry time is what it knows of the TTL by itself. Redis answers nil then;
so must the proxy.

A fill of a key whose rules allow a TTL (cache-rule, with cache-ask-ttl yes,
the default) sends PTTL behind the read; the entry ends when the key expires.
The JuiceFS profile's rules (i…, d…) never ask: JuiceFS gives those keys no
TTL.
"""
import time

import pytest

from cachehelpers import MODES, Stats, make_tracked, start_cached, wait_tracking_active, warm
from faulthelpers import Metrics, toxiproxy, toxiproxy_bin  # noqa: F401 (fixtures)
from helpers import HOST, free_port, wait_until

pytestmark = pytest.mark.proxy_only

RULES = ("--cache-rule", "GET", "s*", "--cache-rule", "HGET", "h*")
LIFE = 0.6  # seconds: long enough to warm the entry, short for the test


def no_background_expiry(upstream):
    d = upstream.client()
    d.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "0")
    return d


def cached_client(proxy_factory, upstream, mode=None):
    """Redis with no background expiry (a redis-py client on it), and a
    caching proxy with RULES: its stats and a client whose connection fills."""
    d = no_background_expiry(upstream)
    p, st = start_cached(proxy_factory, args=RULES, mode=mode)
    c = p.raw(auth=True)
    make_tracked(c, st)
    return d, st, c


def redis_pttl_calls(d):
    return d.info("commandstats").get("cmdstat_pttl", {}).get("calls", 0)


READS = {
    "GET": (("SET", "s1", "v"), ("PEXPIRE", "s1", int(LIFE * 1000)), ("GET", "s1"), b"v"),
    "HGET": (("HSET", "h1", "f", "v"), ("PEXPIRE", "h1", int(LIFE * 1000)), ("HGET", "h1", "f"), b"v"),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", sorted(READS))
def test_cached_value_ends_with_its_key(kind, mode, proxy_factory, upstream):
    """A value cached from a key with a TTL is served from the cache until
    the key expires, and nil (as Redis) from then on, though Redis sent no
    invalidation."""
    d, st, c = cached_client(proxy_factory, upstream, mode)
    write, expire, read, value = READS[kind]
    d.execute_command(*write)
    d.execute_command(*expire)
    born = time.monotonic()
    with st.delta() as dd:
        assert warm(c, st, read) == [value]
    assert dd["cache_ttl_asked"] >= 1, dict(dd)
    assert time.monotonic() - born < LIFE, "the machine was too slow to warm the entry in time"
    time.sleep(max(0.0, born + LIFE + 0.05 - time.monotonic()))
    with st.delta() as dd:
        got = c.cmd(*read).value
    assert got is None, "%r served %r after its key expired" % (read, got)
    assert dd["cache_expired"] == 1 and dd["cache_hits"] == 0, dict(dd)
    assert d.execute_command(*read) is None


def test_mget_keys_end_with_theirs(proxy_factory, upstream):
    """MGET: each key's cached value ends with that key; keys without a TTL
    stay cached."""
    d, st, c = cached_client(proxy_factory, upstream)
    d.set("s1", "v1", px=int(LIFE * 1000))
    d.set("s2", "v2")
    born = time.monotonic()
    mget = ("MGET", "s1", "s2")
    assert c.cmd(*mget).value == [b"v1", b"v2"]
    wait_until(lambda: st.get()["cache_entries"] >= 3, timeout=2.0, interval=0.01,
               what="both keys cached (their PTTLs answered)")
    with st.delta() as dd:
        assert c.cmd(*mget).value == [b"v1", b"v2"]
    assert dd["cache_mget_hits"] == 1, dict(dd)
    assert time.monotonic() - born < LIFE, "the machine was too slow to warm the entries in time"
    time.sleep(max(0.0, born + LIFE + 0.05 - time.monotonic()))
    with st.delta() as dd:
        assert c.cmd(*mget).value == [None, b"v2"]
    assert dd["cache_mget_partial"] == 1 and dd["cache_expired"] == 1, dict(dd)


def test_ttl_given_after_the_fill(proxy_factory, upstream):
    """A key cached without a TTL that gets one later: the EXPIRE's
    invalidation purges it, the next fill learns the TTL, and the value ends
    with the key."""
    d, st, c = cached_client(proxy_factory, upstream)
    d.set("s1", "v")
    assert warm(c, st, ("GET", "s1")) == [b"v"]
    time.sleep(LIFE)
    with st.delta() as dd:
        assert c.cmd("GET", "s1").value == b"v"   # no TTL: cached for good
    assert dd["cache_hits"] == 1, dict(dd)
    d.pexpire("s1", int(LIFE * 1000))
    born = time.monotonic()
    wait_until(lambda: st.get()["cache_keys_purged"] > 0, timeout=2.0, interval=0.005,
               what="the invalidation of the EXPIRE")
    assert warm(c, st, ("GET", "s1")) == [b"v"]
    time.sleep(max(0.0, born + LIFE + 0.05 - time.monotonic()))
    assert c.cmd("GET", "s1").value is None


def test_long_ttl_stays_cached(proxy_factory, upstream):
    """A key whose TTL is far off is served from the cache as any other."""
    d, st, c = cached_client(proxy_factory, upstream)
    d.set("s1", "v", ex=3600)
    d.hset("h1", "f", "w")
    d.expire("h1", 3600)
    assert warm(c, st, ("GET", "s1"), ("HGET", "h1", "f")) == [b"v", b"w"]
    time.sleep(0.2)
    with st.delta() as dd:
        assert c.cmd("GET", "s1").value == b"v"
        assert c.cmd("HGET", "h1", "f").value == b"w"
    assert dd["cache_hits"] == 2, dict(dd)


def test_nil_needs_no_ttl(proxy_factory, upstream):
    """A missing key, or a field missing from a hash with a TTL, is nil
    whatever the TTL: the nil is cached as soon as its reply comes, and
    stays nil after the hash expired."""
    d, st, c = cached_client(proxy_factory, upstream)
    d.hset("h1", "f", "v")
    d.pexpire("h1", int(LIFE * 1000))
    assert warm(c, st, ("GET", "s-missing"), ("HGET", "h1", "missing")) == [None, None]
    time.sleep(LIFE + 0.05)
    with st.delta() as dd:
        assert c.cmd("GET", "s-missing").value is None
        assert c.cmd("HGET", "h1", "missing").value is None
    assert dd["cache_hits"] == 2, dict(dd)


def test_which_rules_ask(proxy_factory, upstream):
    """The JuiceFS profile's rules never send PTTL (JuiceFS gives i… and d…
    keys no TTL); cache-rule keys do, unless cache-ask-ttl no."""
    d = upstream.client()
    d.set("i1", "attr")
    d.hset("d1", "name", "entry")
    d.set("s1", "v")
    cases = [((), ("GET", "i1"), 0), ((), ("HGET", "d1", "name"), 0), ((), ("GET", "s1"), 1),
             (("--cache-ask-ttl", "no"), ("GET", "s1"), 0)]
    for args, read, asks in cases:
        p, st = start_cached(proxy_factory, args=RULES + args)
        c = p.raw(auth=True)
        make_tracked(c, st, key="i9398")
        before = redis_pttl_calls(d)
        with st.delta() as dd:
            warm(c, st, read)
        assert dd["cache_ttl_asked"] == asks, (args, read, dict(dd))
        assert redis_pttl_calls(d) - before == asks, (args, read)


def test_user_without_pttl_gets_redis_answers(proxy_factory, upstream):
    """A user whose ACL denies PTTL gets every reply from Redis: its first
    fill waits for a PTTL that Redis refuses, so it never stores, and from
    then on its reads that would need one fill nothing and ask nothing
    (the JuiceFS profile's keys, which need none, still fill). An ACL change
    through the proxy makes it ask again."""
    d = upstream.client()
    d.execute_command("ACL", "SETUSER", "nopttl", "on", ">pw", "~*", "+@all", "-pttl")
    d.set("s1", "v")
    d.set("i1", "attr")
    p, st = start_cached(proxy_factory, args=RULES)
    c = p.raw()
    assert c.cmd("AUTH", "nopttl", "pw").raw == b"+OK\r\n"
    with st.delta() as dd:
        for _ in range(4):
            assert c.cmd("GET", "s1").value == b"v"
            assert c.cmd("MGET", "s1", "s2").value == [b"v", None]
    assert dd["cache_hits"] == 0 and dd["cache_ttl_asked"] == 1, dict(dd)
    assert warm(c, st, ("GET", "i1")) == [b"attr"]
    d.set("s1", "w")
    assert c.cmd("GET", "s1").value == b"w"
    admin = p.raw(auth=True)
    assert admin.cmd("ACL", "SETUSER", "nopttl", "+pttl").raw == b"+OK\r\n"
    assert warm(c, st, ("GET", "s1")) == [b"w"]


@pytest.mark.timeout(60)
def test_randomized_reads_never_outlive_the_ttl(proxy_factory, upstream):
    """5 s of a writer on Redis setting four keys again and again, each time
    with a short TTL (20-200 ms) or none, while three readers through the
    proxy GET and MGET them. No read may return a value that had expired
    (by Redis's own clock, as far as the writer can bound it) before the
    read began. The cache must have served hits and dropped expired entries
    by itself, or the run proves little."""
    import random
    import threading

    d = no_background_expiry(upstream)
    p, st = start_cached(proxy_factory, args=RULES)
    keys = ["s%d" % i for i in range(4)]
    expires = {}            # value -> latest moment Redis may still hold it (None: no TTL)
    lock = threading.Lock()
    stop = time.monotonic() + 5.0
    violations, reads = [], [0]
    slack = 0.002           # Redis keeps expiry times in whole milliseconds

    def writer():
        w = upstream.client()
        rng = random.Random(7)
        n = 0
        while time.monotonic() < stop:
            n += 1
            key = rng.choice(keys)
            val = "%s-v%d" % (key, n)
            ttl = rng.choice([None, rng.randint(20, 200)])
            with lock:      # readable as soon as Redis runs it: before its ack
                expires[val.encode()] = None if ttl is None else float("inf")
            if ttl is None:
                w.set(key, val)
            else:
                w.set(key, val, px=ttl)
                acked = time.monotonic()
                with lock:
                    expires[val.encode()] = acked + ttl / 1000.0
            time.sleep(rng.uniform(0.0, 0.01))

    def reader(seed):
        c = p.raw(auth=True)
        rng = random.Random(seed)
        while time.monotonic() < stop:
            if rng.random() < 0.5:
                key = rng.choice(keys)
                began = time.monotonic()
                got = [(key, c.cmd("GET", key).value)]
            else:
                began = time.monotonic()
                got = list(zip(keys, c.cmd("MGET", *keys).value))
            reads[0] += 1
            for key, val in got:
                if val is None:
                    continue
                with lock:
                    until = expires.get(val, "unknown")
                if until == "unknown":
                    violations.append("%s: %r was never written" % (key, val))
                elif until is not None and began > until + slack:
                    violations.append("%s: %r served %.1f ms after it expired" % (key, val, (began - until) * 1000))
        c.close()

    before = st.get()
    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = st.get()
    hits = after["cache_hits"] - before["cache_hits"]
    expired = after["cache_expired"] - before["cache_expired"]
    print("reads %d, hits %d, expired %d, PTTLs %d" % (reads[0], hits, expired,
                                                       after["cache_ttl_asked"] - before["cache_ttl_asked"]))
    assert not violations, "%d of %d reads: %s" % (len(violations), reads[0], violations[:5])
    assert hits > 200 and expired > 10, (hits, expired)


@pytest.mark.parametrize("mode", ["bcast", "optin"])
def test_pipelined_reads_pair_with_their_own_pttl(mode, proxy_factory, upstream):
    """Pipelined reads of keys with and without a TTL, and of keys whose
    rules never ask (the profile's): each fill ends with its own key's TTL,
    not with that of a neighbour's PTTL on the same connection."""
    d, st, c = cached_client(proxy_factory, upstream, mode)
    d.set("s1", "a")
    d.set("s2", "b", px=int(LIFE * 1000))
    d.set("i91", "x")
    d.set("s3", "c")
    d.set("s4", "e", px=int(LIFE * 1000))
    born = time.monotonic()
    reads = [("GET", "s1"), ("GET", "s2"), ("GET", "i91"), ("GET", "s3"), ("GET", "s4")]
    assert [f.value for f in c.pipeline(reads)] == [b"a", b"b", b"x", b"c", b"e"]
    wait_until(lambda: st.get()["cache_pending_fills"] == 0, timeout=2.0, interval=0.01,
               what="the fills to complete")
    with st.delta() as dd:
        assert [c.cmd(*r).value for r in reads] == [b"a", b"b", b"x", b"c", b"e"]
    assert dd["cache_hits"] == 5, dict(dd)
    assert time.monotonic() - born < LIFE, "the machine was too slow to warm the entries in time"
    time.sleep(max(0.0, born + LIFE + 0.05 - time.monotonic()))
    assert [c.cmd(*r).value for r in reads] == [b"a", None, b"x", b"c", None]


def test_mget_of_keys_that_ask_and_keys_that_do_not(proxy_factory, upstream):
    """An MGET mixing the profile's keys (no PTTL) with keys that ask: the
    PTTLs behind it pair with the keys that asked, in order."""
    d, st, c = cached_client(proxy_factory, upstream)
    d.set("i91", "x")
    d.set("s1", "a", px=int(LIFE * 1000))
    d.set("i92", "y")
    d.set("s2", "b")
    born = time.monotonic()
    mget = ("MGET", "i91", "s1", "i92", "s2")
    with st.delta() as dd:
        assert c.cmd(*mget).value == [b"x", b"a", b"y", b"b"]
        wait_until(lambda: st.get()["cache_pending_fills"] == 0, timeout=2.0, interval=0.01,
                   what="the fills to complete")
    assert dd["cache_ttl_asked"] == 2, dict(dd)
    with st.delta() as dd:
        assert c.cmd(*mget).value == [b"x", b"a", b"y", b"b"]
    assert dd["cache_mget_hits"] == 1, dict(dd)
    assert time.monotonic() - born < LIFE, "the machine was too slow to warm the entries in time"
    time.sleep(max(0.0, born + LIFE + 0.05 - time.monotonic()))
    assert c.cmd(*mget).value == [b"x", None, b"y", b"b"]


def _behind_toxiproxy(toxiproxy, proxy_factory, upstream, mode=None):
    """A caching proxy whose data connections go through toxiproxy (its
    invalidation connection does not): the toxiproxy, stats, and a client
    whose connection fills."""
    data = toxiproxy.create("data", upstream.port)
    mport = free_port()
    p = proxy_factory(upstream_url=data.url,
                      args=RULES + ("--tracking-upstream", "redis://%s:%d" % (HOST, upstream.port),
                                    "--metrics-port", str(mport))
                      + (("--tracking-mode", mode) if mode else ()))
    st = Stats(p)
    wait_tracking_active(p, stats=st)
    c = p.raw(auth=True)
    make_tracked(c, st)
    st.metrics = Metrics(mport)  # local counters: an INFO waits behind the toxic
    return data, st, c


def test_entry_life_counts_from_the_pttl_sent(toxiproxy, proxy_factory, upstream):
    """Replies 400 ms late: an entry's life counts from when its PTTL left,
    not from when the reply came, so it ends when Redis's key does."""
    d = no_background_expiry(upstream)
    data, st, c = _behind_toxiproxy(toxiproxy, proxy_factory, upstream)
    data.toxic("latency", stream="downstream", latency=400)
    d.set("s1", "v", px=1000)
    born = time.monotonic()
    assert c.cmd("GET", "s1", timeout=5).value == b"v"
    data.clear()
    with st.delta() as dd:
        assert c.cmd("GET", "s1").value == b"v"
    assert dd["cache_hits"] == 1, dict(dd)
    time.sleep(max(0.0, born + 1.05 - time.monotonic()))
    assert c.cmd("GET", "s1").value is None


def test_mget_sent_again_keeps_its_ttls(toxiproxy, proxy_factory, upstream):
    """A partly cached MGET whose cached value changes while the rest is
    read goes again whole; the fills waiting for their PTTLs meanwhile keep
    their own keys' TTLs."""
    d = no_background_expiry(upstream)
    data, st, c = _behind_toxiproxy(toxiproxy, proxy_factory, upstream)
    d.set("s1", "old")
    warm(c, st, ("GET", "s1"))
    c.cmd("MGET", "s9")          # a user's first MGET goes whole (its ACL allows MGET)
    d.set("s2", "v2", px=2000)
    born = time.monotonic()
    data.toxic("latency", stream="upstream", latency=300)
    with st.delta() as dd:
        before = st.metrics["cache_mget_partial"]
        c.send_cmd("MGET", "s1", "s2")
        st.metrics.wait(lambda m: m["cache_mget_partial"] > before, 5,
                        "the MGET split: s1 from the cache, s2 on its way")
        d.set("s1", "new")
        assert c.read_frame(timeout=5).value == [b"new", b"v2"]
    assert dd["cache_mget_resent"] == 1, dict(dd)
    data.clear()
    wait_until(lambda: st.get()["cache_pending_fills"] == 0, timeout=2.0, interval=0.01,
               what="the fills to complete")
    with st.delta() as dd:
        assert c.cmd("GET", "s2").value == b"v2"
    assert dd["cache_hits"] == 1, dict(dd)
    time.sleep(max(0.0, born + 2.05 - time.monotonic()))
    assert c.cmd("GET", "s2").value is None


@pytest.mark.parametrize("mode", MODES)
def test_mget_merge_takes_no_value_whose_key_expired_meanwhile(toxiproxy, proxy_factory, upstream, mode):
    """A partly cached MGET whose cached key expires on Redis while Redis
    reads the rest, and whose other key is written after that expiry,
    answers what Redis holds then: nil and the new value, never the pair
    [alive, new] that Redis never held. No invalidation tells of the
    expiry (Redis sends one when it deletes the key: here, with active
    expiry off, never), and in the per-read modes none of the write of a
    key the proxy never read."""
    d = no_background_expiry(upstream)
    data, st, c = _behind_toxiproxy(toxiproxy, proxy_factory, upstream, mode)
    c.cmd("MGET", "s9")  # a user's first MGET goes whole (its ACL allows MGET)
    d.set("s2", "old")
    d.set("s1", "alive", px=700)
    t0 = time.monotonic()
    warm(c, st, ("GET", "s1"))
    data.toxic("latency", stream="upstream", latency=600)
    time.sleep(max(0.0, t0 + 0.5 - time.monotonic()))
    c.send_cmd("MGET", "s1", "s2")  # s1 from the cache if still there, s2 reaches Redis after t0 + 1.1 s
    time.sleep(max(0.0, t0 + 0.8 - time.monotonic()))
    d.set("s2", "new")              # after s1 expired, before Redis reads the MGET
    assert c.read_frame(timeout=10).value == [None, b"new"]


def test_value_above_cache_max_value_on_a_key_that_asks(proxy_factory, upstream):
    """A value too big to cache is relayed whole and not cached, TTL or not."""
    d = upstream.client()
    big = b"y" * 70000
    d.set("s1", big, ex=3600)
    p, st = start_cached(proxy_factory, args=RULES)
    c = p.raw(auth=True)
    with st.delta() as dd:
        for _ in range(3):
            assert c.cmd("GET", "s1").value == big
    assert dd["cache_hits"] == 0 and dd["cache_fills_too_big"] >= 1, dict(dd)
