"""
Cache behaviour beyond the contract items: negative caching, one cached
entry serving RESP2 and RESP3 clients, the INFO section, which reads are
cacheable, and the directives that turn caching off or change the rules.
"""
import hashlib
import threading
import time

import pytest

from cachehelpers import (MODES, SIDECACHE_FIELDS, Stats, make_tracked, parse_sidecache_section,
                          start_cached, wait_reclaimed, wait_stat, wait_tracking_active, warm)
from faulthelpers import Metrics, toxiproxy, toxiproxy_bin  # noqa: F401 (fixtures)
from helpers import HOST, acl_without, encode, free_port, wait_until

pytestmark = pytest.mark.proxy_only


@pytest.mark.parametrize("kind", ["GET", "HGET"])
def test_negative_caching(kind, proxy_factory, upstream):
    """A read of a missing key / field is cached as nil (the second read is a
    hit and returns nil); once the field is created directly on Redis, the
    proxy shows it (bounded), and then serves the value from the cache."""
    p, st = start_cached(proxy_factory)
    rd = ("GET", "i9801") if kind == "GET" else ("HGET", "d9801", "missing")
    d = upstream.client()
    d.hset("d9801", "other", "x")       # the hash exists, the field does not
    c = p.raw(auth=True)
    assert warm(c, st, rd) == [None]
    d.set("i9801", "now") if kind == "GET" else d.hset("d9801", "missing", "now")
    wait_until(lambda: c.cmd(*rd).value == b"now", timeout=2.0, interval=0.005,
               what="the new field to show through the proxy")
    assert warm(c, st, rd) == [b"now"]


def test_nil_and_values_in_each_clients_protocol(proxy_factory, upstream):
    """One cached entry serves RESP2 and RESP3 clients, each in its own
    encoding: nil is $-1 for RESP2 and _ for RESP3 (both served as hits),
    whichever protocol filled the entry; a value is the same bulk string."""
    p, st = start_cached(proxy_factory)
    d = upstream.client()
    d.set("i9811", "val")
    r2 = p.raw(auth=True)
    r3 = p.raw(auth=True, protocol=3)
    make_tracked(r2, st)
    make_tracked(r3, st)
    cases = [
        (r2, ("GET", "i9812")),               # nil filled by a RESP2 client
        (r3, ("HGET", "d9812", "f")),         # nil filled by a RESP3 client
        (r2, ("GET", "i9811")),               # a value
    ]
    for filler, rd in cases:
        filler.cmd(*rd)
        for cl, nil in ((r2, b"$-1\r\n"), (r3, b"_\r\n")):
            with st.delta() as dd:
                f = cl.cmd(*rd)
            assert dd["cache_hits"] == 1, (rd, dict(dd))
            if rd == ("GET", "i9811"):
                assert f.raw == b"$3\r\nval\r\n", f
            else:
                assert f.raw == nil, "%r for a RESP%s client: %r" % (rd, 2 if cl is r2 else 3, f)


def test_info_section(proxy_factory):
    """INFO through the proxy has the # sidecache section with every field,
    tracking active, and the configured memory bound."""
    p, st = start_cached(proxy_factory, args=("--cache-max-memory", "8mb"))
    s = st.get()
    missing = [f for f in SIDECACHE_FIELDS if f not in s]
    assert not missing, "missing fields %r in %r" % (missing, s)
    assert s["cache_enabled"] == 1
    assert s["tracking_state"] == "active"
    assert s["cache_max_bytes"] == 8 * 1024 * 1024
    assert s["tracking_connects"] >= 1
    # plain INFO (no section) carries it too, along with Redis's own sections
    with p.raw(auth=True) as c:
        text = bytes(c.call("INFO")).decode()
    assert "# sidecache" in text and "redis_version" in text
    assert parse_sidecache_section(text)["cache_enabled"] == 1


CACHE_OFF = pytest.mark.parametrize("args", [("--cache-max-memory", "0"), ("--profile", "none")],
                                    ids=["max-memory-0", "profile-none"])


@CACHE_OFF
def test_cache_off_means_no_hits(args, proxy_factory, upstream):
    """cache-max-memory 0 (or no rules at all) turns caching off: no read is
    ever served from a cache: a change made directly on Redis is seen at
    once, every time (60 changes, each read twice right after), and if INFO
    shows our section its hit counter stays 0."""
    p = proxy_factory(args=args)
    st = Stats(p)
    d = upstream.raw(auth=True)
    c = p.raw(auth=True)
    for i in range(30):
        d.cmd("SET", "i9821", str(i))
        d.cmd("HSET", "d9821", "f", str(i))
        for _ in range(2):
            assert c.cmd("GET", "i9821").value == str(i).encode()
            assert c.cmd("HGET", "d9821", "f").value == str(i).encode()
    s = st.get(required=False)
    assert s.get("cache_hits", 0) == 0, s
    assert s.get("cache_enabled", 0) == 0, s


@CACHE_OFF
def test_info_section_when_cache_off(args, proxy_factory):
    """With caching off, INFO still has the # sidecache section, saying
    cache_enabled:0 (the section is how an operator sees the cache is off)."""
    p = proxy_factory(args=args)
    with p.raw(auth=True) as c:
        text = bytes(c.call("INFO")).decode()
    s = parse_sidecache_section(text)
    assert s, "INFO has no # sidecache section when caching is off"
    assert s["cache_enabled"] == 0, s


def test_only_rule_matching_reads_are_cached(proxy_factory, upstream):
    """The juicefs profile caches GET i[1-9]* and HGET d[1-9]* only (and MGET
    when all its keys are inode keys): not GET of i0 / iX keys, not GET of a
    d key, not HGET of an i key, not an MGET with one other key, not other
    reads (HGETALL, GETRANGE, STRLEN)."""
    p, st = start_cached(proxy_factory)
    d = upstream.client()
    for k in ("i0", "ix1", "i", "d1s", "x1"):
        d.set(k, "v")
    d.hset("i5h", "f", "v")
    d.hset("d0", "f", "v")
    d.hset("dx", "f", "v")
    c = p.raw(auth=True)
    reads = [("GET", "i0"), ("GET", "ix1"), ("GET", "i"), ("GET", "d1s"), ("GET", "x1"),
             ("HGET", "i5h", "f"), ("HGET", "d0", "f"), ("HGET", "dx", "f"),
             ("MGET", "i1", "x1"), ("HGETALL", "d1"), ("GETRANGE", "i1", "0", "-1"),
             ("STRLEN", "i1"), ("HMGET", "d1", "f")]
    with st.delta() as dd:
        for rd in reads:
            for _ in range(3):
                c.cmd(*rd)
    assert dd["cache_hits"] == 0 and dd["cache_fills"] == 0, dict(dd)
    # while the cacheable shapes are
    d.set("i1", "v")
    d.hset("d1", "f", "v")
    warm(c, st, ("GET", "i1"), ("HGET", "d1", "f"))


def test_cache_rule_directive(proxy_factory, upstream):
    """--profile none --cache-rule GET 'user:*' caches exactly that."""
    p, st = start_cached(proxy_factory, args=("--profile", "none",
                                              "--cache-rule", "GET", "user:*"))
    d = upstream.client()
    d.set("user:1", "u")
    d.set("i1", "v")
    c = p.raw(auth=True)
    assert warm(c, st, ("GET", "user:1")) == [b"u"]
    with st.delta() as dd:
        for _ in range(3):
            assert c.cmd("GET", "i1").value == b"v"
    assert dd["cache_hits"] == 0, dict(dd)
    d.set("user:1", "u2")
    wait_until(lambda: c.cmd("GET", "user:1").value == b"u2", timeout=2.0, interval=0.005,
               what="invalidation of a custom-rule key")


def test_key_prefix_directive(proxy_factory, upstream):
    """--key-prefix {1}: the rules follow the prefix ({1}i5 cached, i5 not),
    and invalidations of prefixed keys arrive."""
    p, st = start_cached(proxy_factory, args=("--key-prefix", "{1}"))
    d = upstream.client()
    d.set("{1}i5", "p")
    d.set("i5", "n")
    d.hset("{1}d5", "f", "p")
    c = p.raw(auth=True)
    assert warm(c, st, ("GET", "{1}i5"), ("HGET", "{1}d5", "f")) == [b"p", b"p"]
    with st.delta() as dd:
        for _ in range(3):
            assert c.cmd("GET", "i5").value == b"n"
    assert dd["cache_hits"] == 0, dict(dd)
    d.set("{1}i5", "p2")
    wait_until(lambda: c.cmd("GET", "{1}i5").value == b"p2", timeout=2.0, interval=0.005,
               what="invalidation of a prefixed key")


def _invalidated_keys(st, d, writes, then_key):
    """Sends `writes` directly to Redis, then a SET of `then_key` (tracked):
    once that invalidation is counted, every one Redis sent before it is
    (one connection, in order). Returns how many keys were counted besides
    then_key's."""
    before = st.get()["invalidation_keys"]
    for w in writes:
        d.execute_command(*w)
    d.set(then_key, "v")
    after = wait_stat(st, "invalidation_keys", before + 1, what="the last write's invalidation")
    return after["invalidation_keys"] - before - 1


def test_juicefs_profile_tracks_by_i_and_d(proxy_factory, upstream):
    """The juicefs profile has Redis track by i and d (two prefixes, as
    JuiceFS's own client-side cache; cache/rules.h): a write of a d key that
    is never cached (dirUsedSpace, delfiles) is sent to the proxy, a write
    of any other JuiceFS key is not."""
    p, st = start_cached(proxy_factory, mode="bcast")
    d = upstream.client()
    assert _invalidated_keys(st, d, [("HINCRBY", "dirUsedSpace", "1", "5")], "i1") == 1
    assert _invalidated_keys(st, d, [("ZADD", "delfiles", "1", "2:0")], "i1") == 1
    others = [("INCRBY", "usedSpace", "4096"), ("INCR", "nextinode"), ("RPUSH", "c1_0", "s"),
              ("HINCRBY", "sliceRef", "k1_4", "1"), ("SET", "setting", "{}")]
    assert _invalidated_keys(st, d, others, "d1") == 0


@pytest.mark.parametrize("track", [False, True], ids=["derived", "cache-track-prefix"])
def test_cache_track_prefix_directive(track, proxy_factory, upstream):
    """The rule GET user:[0-9]* is tracked by user:0 ... user:9; with
    --cache-track-prefix user: by user:, so a write of user:x is sent to the
    proxy too. Either way a cached key is invalidated."""
    args = ("--profile", "none", "--cache-rule", "GET", "user:[0-9]*")
    if track:
        args += ("--cache-track-prefix", "user:")
    p, st = start_cached(proxy_factory, args=args, mode="bcast")
    d = upstream.client()
    d.set("user:1", "a")
    c = p.raw(auth=True)
    assert warm(c, st, ("GET", "user:1")) == [b"a"]
    assert _invalidated_keys(st, d, [("SET", "user:x", "1"), ("SET", "other", "1")], "user:2") == int(track)
    d.set("user:1", "b")
    wait_until(lambda: c.cmd("GET", "user:1").value == b"b", timeout=2.0, interval=0.005,
               what="invalidation of a cached key")


def test_cache_track_prefix_must_not_be_empty(proxy_factory):
    """An empty tracking prefix would be every key: refused at start-up."""
    with pytest.raises(RuntimeError) as e:
        proxy_factory(args=("--cache-track-prefix", ""))
    assert "cache-track-prefix: the prefix must be one word, not empty" in str(e.value)


def test_cache_ttl_directive(proxy_factory, upstream):
    """--cache-ttl 1: an entry older than a second is read again from Redis."""
    p, st = start_cached(proxy_factory, args=("--cache-ttl", "1"))
    upstream.client().set("i9831", "v")
    c = p.raw(auth=True)
    warm(c, st, ("GET", "i9831"))
    time.sleep(1.2)
    with st.delta() as dd:
        assert c.cmd("GET", "i9831").value == b"v"
    assert dd["cache_hits"] == 0 and dd["cache_misses"] == 1, dict(dd)


@pytest.mark.parametrize("mode", MODES)
def test_no_hits_when_tracking_refused(mode, proxy_factory, redis_factory):
    """Redis refuses CLIENT TRACKING to the user (ACL -client|tracking) that
    both the proxy (its invalidation connection) and the client (its data
    connections) use: in bcast mode tracking never becomes active, in the
    default and optin modes no data connection is tracked. Either way the
    proxy passes through: no hit, ever, and changes are seen at once."""
    up = redis_factory(requirepass="pw", name="noacl")
    a = up.client()
    a.execute_command("ACL", "SETUSER", "sc", "on", ">scpw", "~*", "&*", "+@all",
                      *acl_without("tracking"))
    p = proxy_factory(up=up, upstream_url="redis://sc:scpw@127.0.0.1:%d" % up.port,
                      args=("--tracking-mode", mode))
    st = Stats(p)
    wait_until(lambda: st.get(required=False).get("tracking_state")
               not in (None, "idle", "connecting", "setup"),
               timeout=5, what="tracking setup to end")
    s = st.get()
    assert s["tracking_mode"] == mode, s
    if mode == "bcast":
        assert s["tracking_state"] != "active", s
    c = p.raw()
    assert c.cmd("AUTH", "sc", "scpw").raw == b"+OK\r\n"
    with st.delta() as dd:
        for i in range(5):
            a.set("i9841", str(i))
            a.hset("d9841", "f", str(i))
            for _ in range(3):
                assert c.cmd("GET", "i9841").value == str(i).encode()
                assert c.cmd("HGET", "d9841", "f").value == str(i).encode()
    assert dd["cache_hits"] == 0 and dd["cache_fills"] == 0, dict(dd)


@pytest.mark.parametrize("protocol", [2, 3])
def test_mget_served_and_merged(protocol, proxy_factory, upstream, ref):
    """MGET of inode keys: all cached -> answered here; some cached -> only
    the others go to Redis and the reply is merged in order; the bytes are
    what Redis sends (nil in the client's protocol, duplicates, a missing
    key); a key changed on Redis is seen in the next MGET."""
    p, st = start_cached(proxy_factory)
    d = upstream.client()
    rd = ref.client()
    for cl in (d, rd):
        cl.set("i9901", "one")
        cl.set("i9902", b"\x00two\r\n")
        cl.set("i9904", "")
    c = p.raw(auth=True, protocol=protocol)
    want = ref.raw(protocol=protocol)
    make_tracked(c, st)
    warm(c, st, ("GET", "i9901"), ("GET", "i9903"))     # one value, one nil cached
    c.cmd("MGET", "i9909")     # a user's first MGET goes whole: Redis shows its ACL allows MGET
    cmd = ("MGET", "i9902", "i9901", "i9903", "i9904", "i9901")
    with st.delta() as dd:
        got = c.cmd(*cmd)
    assert got.raw == want.cmd(*cmd).raw
    assert dd["cache_mget_partial"] == 1 and dd["cache_mget_keys_cached"] == 3, dict(dd)
    assert dd["cache_hits"] == 3 and dd["cache_misses"] == 2, dict(dd)   # each key counted once
    with st.delta() as dd:
        again = c.cmd(*cmd)
    assert again.raw == got.raw
    assert dd["cache_mget_hits"] == 1, dict(dd)
    # a change on Redis: invalidated, and the next MGET fetches it
    d.set("i9901", "uno")
    rd.set("i9901", "uno")
    wait_until(lambda: c.cmd(*cmd).raw == want.cmd(*cmd).raw, timeout=2.0, interval=0.005,
               what="the changed key in MGET through the proxy")
    # a write through the proxy is seen at once (C1)
    c.cmd("SET", "i9903", "three")
    want.cmd("SET", "i9903", "three")
    assert c.cmd(*cmd).raw == want.cmd(*cmd).raw


def test_mget_wrong_type_key(proxy_factory, upstream, ref):
    """An MGET key holding a hash reads as nil, as Redis answers, cached or not."""
    p, st = start_cached(proxy_factory)
    for cl in (upstream.client(), ref.client()):
        cl.hset("i9921", "f", "v")
        cl.set("i9922", "x")
    c = p.raw(auth=True)
    want = ref.raw()
    for _ in range(3):
        assert c.cmd("MGET", "i9921", "i9922").raw == want.cmd("MGET", "i9921", "i9922").raw
    # MGET's nil for a hash is not GET's answer (WRONGTYPE): it fills nothing
    for _ in range(2):
        assert c.cmd("GET", "i9921").raw == want.cmd("GET", "i9921").raw


@pytest.mark.parametrize("change", ["write", "flushall"])
def test_mget_merge_sees_change_made_meanwhile(change, toxiproxy, proxy_factory, upstream):
    """A partly cached MGET whose cached key changes on Redis while the rest
    is read answers what Redis holds after the change: never the value taken
    from the cache before it merged with one read after it (a pair Redis
    never held), nor a value of a cache the FLUSHALL emptied. The data path
    delays requests by 300 ms (toxiproxy); the invalidation connection goes
    to Redis directly, so the change's invalidation arrives first."""
    data = toxiproxy.create("data", upstream.port)
    mport = free_port()
    p = proxy_factory(upstream_url=data.url, args=("--tracking-upstream", "redis://%s:%d" % (HOST, upstream.port),
                                                   "--metrics-port", str(mport)))
    st = Stats(p)
    wait_tracking_active(p, stats=st)
    d = upstream.raw(auth=True)
    d.cmd("SET", "i9401", "old")
    d.cmd("SET", "i9402", "old")
    c = p.raw(auth=True)
    make_tracked(c, st)
    warm(c, st, ("GET", "i9401"))  # cached; i9402 is not
    c.cmd("MGET", "i9409")         # a user's first MGET goes whole (its ACL allows MGET)
    data.toxic("latency", stream="upstream", latency=300)
    base = st.get()
    c.send_cmd("MGET", "i9401", "i9402")  # MGET i9402 on its way
    # (/metrics: an INFO would wait behind the toxic as long as the MGET)
    Metrics(mport).wait(lambda m: m["cache_mget_partial"] > base["cache_mget_partial"], 5,
                        "the MGET split: i9401 from the cache, i9402 on its way")
    if change == "write":
        d.raw_cmds([("MULTI",), ("SET", "i9401", "new"), ("SET", "i9402", "new"), ("EXEC",)])
        want = [b"new", b"new"]
    else:
        d.cmd("FLUSHALL")
        want = [None, None]
    assert c.read_frame(timeout=5).value == want
    assert st.get()["cache_mget_resent"] - base["cache_mget_resent"] == 1
    data.clear()
    assert c.cmd("MGET", "i9401", "i9402").value == want


def test_pipelined_partly_cached_mgets_go_whole(proxy_factory, upstream):
    """A partly cached MGET answered by a merge holds the client's next
    request until Redis's part is in (it may have to go again whole), so in
    a pipeline such MGETs go to Redis whole instead of one round trip each;
    the last of the pipeline, with nothing after it, may still be merged."""
    p, st = start_cached(proxy_factory)
    d = upstream.raw(auth=True)
    d.cmd("SET", "i9501", "a")
    c = p.raw(auth=True)
    make_tracked(c, st)
    warm(c, st, ("GET", "i9501"))  # cached; i9502 does not exist (an MGET's nil fills nothing)
    base = st.get()
    c.send(encode("MGET", "i9501", "i9502") * 12)
    assert [f.value for f in c.read_frames(12, timeout=5)] == [[b"a", None]] * 12
    # at most the first (the write may reach the proxy in two reads) and the last
    assert st.get()["cache_mget_partial"] - base["cache_mget_partial"] <= 2


@pytest.mark.parametrize("writer", ["proxy", "redis"])
def test_large_directory_purge(writer, proxy_factory, upstream):
    """A directory of 3,000 cached names (one key, over the cache's lazy
    purge limit) is purged at once by a write to it, made through the proxy
    (purged as it is sent) or on Redis (purged by the invalidation): no name
    is served from the cache again, the write is seen at once, the entries
    leave cache_entries at once, and their memory is freed soon after
    (cache_reclaiming back to 0, cache_used_bytes back down)."""
    p, st = start_cached(proxy_factory)
    key, n = "d9850", 3000
    d = upstream.raw(auth=True)
    d.pipeline([("HSET", key, "f%d" % i, "v%d" % i) for i in range(n)])
    c = p.raw(auth=True)
    make_tracked(c, st)
    base = st.get()
    for _ in range(2):  # the first reads fill, the second are hits
        replies = c.pipeline([("HGET", key, "f%d" % i) for i in range(n)])
        assert [f.value for f in replies] == [b"v%d" % i for i in range(n)]
    full = st.get()
    assert full["cache_entries"] - base["cache_entries"] >= n - 5, (base, full)
    assert full["cache_hits"] - base["cache_hits"] >= n - 5, (base, full)

    if writer == "proxy":
        assert c.cmd("HSET", key, "f7", "new").value == 0
        assert c.cmd("HGET", key, "f7").value == b"new"  # at once (C1)
    else:
        d.cmd("HSET", key, "f7", "new")
        wait_until(lambda: c.cmd("HGET", key, "f7").value == b"new", timeout=2.0, interval=0.005,
                   what="the write on Redis to show through the proxy")
    after = st.get()
    assert after["cache_keys_purged"] - full["cache_keys_purged"] >= n, (full, after)
    assert after["cache_entries"] <= base["cache_entries"] + 5, (base, after)
    # no name comes from the cache until read again; then the new value
    with st.delta() as dd:
        replies = c.pipeline([("HGET", key, "f%d" % i) for i in range(n)])
    assert dd["cache_hits"] == 0, dict(dd)
    assert [f.value for f in replies] == [b"new" if i == 7 else b"v%d" % i for i in range(n)]
    # the purged entries' memory is freed in slices, soon
    freed = wait_reclaimed(st, timeout=2.0, what="cache_reclaiming back to 0")
    assert freed["cache_used_bytes"] < full["cache_used_bytes"] + 64 * 1024, (full, freed)


def test_a_large_flush_empties_the_cache_at_once_and_frees_it_in_slices(proxy_factory, upstream):
    """A FLUSHALL, through the proxy, of a cache of 60,000 entries: the
    cache is empty when its reply comes (cache_entries 0, nothing served
    from it again), but its memory is not freed in one go, which held every
    client up (~20 ms for 200,000 entries): the INFO pipelined behind the
    FLUSHALL still counts entries in cache_reclaiming (the slices, at most
    ~2,000 entries a millisecond, free some while Redis flushes). They are
    all freed within seconds, while the keys are read and cached again."""
    p, st = start_cached(proxy_factory)
    n = 60000
    d = upstream.raw(auth=True)
    c = p.raw(auth=True)
    make_tracked(c, st)
    for i in range(0, n, 5000):
        d.pipeline([("SET", "i%d" % j, "v%d" % j) for j in range(i, i + 5000)])
    for _ in range(2):  # the first reads fill, the second are hits
        for i in range(0, n, 5000):
            c.pipeline([("GET", "i%d" % j) for j in range(i, i + 5000)])
    full = st.get()
    assert full["cache_entries"] >= n - 5, full  # (a read that met a write's invalidation may not fill: C3)

    flush, info = c.pipeline([("FLUSHALL",), ("INFO", "sidecache")])
    assert flush.value == b"OK", flush
    now = parse_sidecache_section(info.value)
    assert now["cache_entries"] == 0, now
    assert now["cache_reclaiming"] > 0, (full, now)
    assert now["cache_flushes"] > full["cache_flushes"], (full, now)
    # nothing comes from the cache; new values fill it again meanwhile
    with st.delta() as dd:
        assert [f.value for f in c.pipeline([("GET", "i%d" % j) for j in range(100)])] == [None] * 100
    assert dd["cache_hits"] == 0, dict(dd)
    d.pipeline([("SET", "i%d" % j, "new%d" % j) for j in range(100)])
    warm(c, st, ("GET", "i7"))
    assert [f.value for f in c.pipeline([("GET", "i%d" % j) for j in range(100)])] == \
        [b"new%d" % j for j in range(100)]
    freed = wait_reclaimed(st, timeout=5.0, what="cache_reclaiming back to 0")
    assert freed["cache_used_bytes"] < full["cache_used_bytes"] // 10, (full, freed)


def test_a_large_purge_is_freed_while_clients_keep_the_proxy_busy(proxy_factory, upstream):
    """The memory of a purged directory of 20,000 cached names is freed in
    slices that wait for moments with nothing else to handle (the event
    loop's idle priority): with three connections sending pipelines of hits
    all along, it is still freed within seconds (cache_reclaiming back to
    0), and every reply of that traffic is the cached value."""
    p, st = start_cached(proxy_factory)
    key, n = "d9851", 20000
    d = upstream.raw(auth=True)
    for i in range(0, n, 5000):
        d.pipeline([("HSET", key, "f%d" % j, "v") for j in range(i, i + 5000)])
    d.cmd("SET", "i9851", "attr")
    c = p.raw(auth=True)
    make_tracked(c, st)
    for _ in range(2):  # the first reads fill, the second are hits
        for i in range(0, n, 5000):
            c.pipeline([("HGET", key, "f%d" % j) for j in range(i, i + 5000)])
    warm(c, st, ("GET", "i9851"))
    full = st.get()
    assert full["cache_entries"] >= n, full

    stop, errors, rounds = threading.Event(), [], [0, 0, 0]

    def traffic(k):
        try:
            with p.raw(auth=True) as t:
                while not stop.is_set():
                    values = [f.value for f in t.pipeline([("GET", "i9851")] * 100)]
                    if values != [b"attr"] * 100:
                        errors.append(values[:3])
                        return
                    rounds[k] += 1
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    threads = [threading.Thread(target=traffic, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: min(rounds) >= 5, timeout=5.0, interval=0.01, what="the traffic to run")
        before = list(rounds)
        d.cmd("HSET", key, "f7", "new")  # the invalidation purges all 20,000 names
        wait_stat(st, "cache_keys_purged", full["cache_keys_purged"] + n, timeout=2.0, what="the directory's purge")
        freed = wait_reclaimed(st, timeout=5.0, what="cache_reclaiming back to 0 under traffic")
        during = [b - a for a, b in zip(before, rounds)]
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
    assert not errors, errors
    assert sum(during) > 0, during  # the traffic was served meanwhile
    assert freed["cache_used_bytes"] < full["cache_used_bytes"] - n * 20, (full, freed)


# SHA1s of JuiceFS's resolve script (pkg/meta/lua_scripts.go, scriptResolve):
# 1.x (string.format keys, the 2^52-1 inode limit) and 0.x (tostring keys).
# The gateway and the SDKs send it for every path they open; it only reads
# (HGET d…, GET i…, none of them declared in KEYS).
JUICEFS_RESOLVE = ["300202e21baa6d1b65acb3a4d96ff95fcfb2b23a",
                   "f081486b7addbf26f62d55b98784a285dd12f7fb"]
READ_SCRIPT = "return redis.call('GET', KEYS[1])"


@pytest.mark.parametrize("sha", JUICEFS_RESOLVE)
def test_juicefs_resolve_script_keeps_the_cache(sha, proxy_factory, upstream):
    """An EVALSHA of JuiceFS's resolve script writes nothing: with profile
    juicefs it leaves the cache as it was (an unknown script empties it, as
    its writes cannot be known). Its reply is Redis's own (here NOSCRIPT:
    the body is JuiceFS's, not loaded)."""
    p, st = start_cached(proxy_factory)
    upstream.client().set("i9901", "attr")
    c = p.raw(auth=True)
    assert warm(c, st, ("GET", "i9901")) == [b"attr"]
    resolve = ("EVALSHA", sha, "3", "1", "dir/file", "0", "0")
    with st.delta() as dd:
        got = c.cmd(*resolve)
        assert c.cmd("GET", "i9901").value == b"attr"
    assert got.raw == upstream.raw().cmd(*resolve).raw, got
    assert dd["cache_flushes_write_unknown_keys"] == 0, dict(dd)
    assert dd["cache_hits"] == 1, dict(dd)
    # any other script still empties the cache (C1)
    with st.delta() as dd:
        c.cmd("EVALSHA", "0" * 40, "0")
        assert c.cmd("GET", "i9901").value == b"attr"
    assert dd["cache_flushes_write_unknown_keys"] >= 1, dict(dd)
    assert dd["cache_hits"] == 0, dict(dd)


def test_cache_readonly_script_directive(proxy_factory, upstream):
    """cache-readonly-script SHA: that script's EVALSHA keeps the cache, and
    its reply is Redis's; without the directive the same call empties it."""
    sha = hashlib.sha1(READ_SCRIPT.encode()).hexdigest()
    upstream.client().set("i9902", "attr")
    assert upstream.client().script_load(READ_SCRIPT) == sha
    for listed in (True, False):
        p, st = start_cached(proxy_factory, args=("--cache-readonly-script", sha) if listed else ())
        c = p.raw(auth=True)
        assert warm(c, st, ("GET", "i9902")) == [b"attr"]
        with st.delta() as dd:
            assert c.cmd("EVALSHA", sha, "1", "i9902").value == b"attr"
            assert c.cmd("GET", "i9902").value == b"attr"
        assert (dd["cache_flushes_write_unknown_keys"] > 0) != listed, (listed, dict(dd))
        assert dd["cache_hits"] == (1 if listed else 0), (listed, dict(dd))


def test_default_user_denied_ping_still_gets_hits(proxy_factory, upstream):
    """The proxy learns whether Redis wants a password from a PING without
    AUTH: NOAUTH says it does. A default user that needs none but may not
    run PING answers NOPERM, which says the same as +PONG: no password. Its
    clients (no AUTH sent) are served from the cache."""
    d = upstream.client()
    d.execute_command("ACL", "SETUSER", "pinger", "on", ">pw", "~*", "&*", "+@all")
    d.set("i9911", "attr")
    d.execute_command("ACL", "SETUSER", "default", "-ping")
    p, st = start_cached(proxy_factory, upstream_url="redis://pinger:pw@127.0.0.1:%d" % upstream.port)
    c = p.raw()     # no AUTH: the default user
    assert warm(c, st, ("GET", "i9911")) == [b"attr"]
