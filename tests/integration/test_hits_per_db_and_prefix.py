"""
tests/integration/test_hits_per_db_and_prefix.py — cache hits in every
database and protocol, and key-prefix read-your-write, as a regression
sweep probed them by hand:

  - RESP2 and RESP3 hits in db 0 and db 1 (GET, HGET, MGET with duplicate
    and missing keys, the lookup script: found, missing name, nil attr),
    byte for byte what a reference redis-server answers, one by one and
    pipelined; lookup entries and their attrs kept apart per db;
  - key-prefix {1}: a write through the proxy is seen by the writer's next
    read on every path (plain, MULTI, pipelined batch) while Redis's
    invalidations are held back (the proxy's own purge, C1).
"""
import pytest

from cachehelpers import RELAY_ARGS, caches_lookups, relay, start_cached, warm  # noqa: F401 (relay: fixture)
from helpers import encode
from test_lookup_script import LOOKUP_V1, SHA_V1, dentry

pytestmark = pytest.mark.proxy_only


def lookup(name, parent="d1"):
    return ("EVALSHA", SHA_V1, "2", parent, name)


def _seed(server):
    d = server.client()
    d.execute_command("SCRIPT", "LOAD", LOOKUP_V1)
    for db, (ino_a, attr) in ((0, (2, b"attr-db0")), (1, (3, b"attr-db1"))):
        c = server.client(db=db)
        c.hset("d1", "a", dentry(ino_a))
        c.hset("d1", "m", dentry(77))          # points at a missing inode
        c.set("i%d" % ino_a, attr)
        c.set("i5", b"v\r\n5-db%d" % db)
        c.hset("d1", "f", b"dent-db%d" % db)


READS = [("GET", "i5"), ("GET", "i404"), ("HGET", "d1", "f"), ("HGET", "d1", "nope"), ("HGET", "d404", "f"),
         ("MGET", "i5", "i404", "i5", "i404"), lookup("a"), lookup("nosuch"), lookup("m")]


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("db", [0, 1])
def test_hits_byte_identical_per_db_and_protocol(proxy_factory, upstream, ref, proto, db):
    _seed(upstream)
    _seed(ref)
    p, st = start_cached(proxy_factory)
    c = p.raw()
    if proto == 3:
        c.cmd("HELLO", "3")
    assert c.cmd("SELECT", db).raw == b"+OK\r\n"
    c.cmd("SCRIPT", "LOAD", LOOKUP_V1)
    for rd in READS:            # a lookup Redis answered is what a later lookup hit needs
        c.cmd(*rd)
    warm(c, st, ("GET", "i5"), ("HGET", "d1", "f"), ("GET", "i404"))
    for _ in range(2):          # lookup hits count twice in cache_hits: not warm()ed
        c.cmd(*lookup("a")), c.cmd(*lookup("nosuch"))
    if caches_lookups(st):
        assert st.get()["cache_script_hits"] >= 2
    r = ref.raw()
    if proto == 3:
        r.cmd("HELLO", "3")
    r.cmd("SELECT", db)
    want = [r.cmd(*rd).raw for rd in READS]
    for _ in range(2):
        got = [c.cmd(*rd).raw for rd in READS]
        assert got == want
    # the same reads pipelined (then only entries fully cached are answered here)
    c.send(b"".join(encode(*rd) for rd in READS))
    assert [f.raw for f in c.read_frames(len(READS))] == want


@pytest.mark.parametrize("how", ["plain", "multi", "pipeline"])
def test_key_prefix_write_through_proxy_seen_at_once(relay, proxy_factory, upstream, how):
    """key-prefix {1}: the proxy's own purge (not Redis's invalidation, which
    the relay holds back) makes the writer's next read fresh."""
    d = upstream.client()
    d.set("{1}i1", "old")
    d.hset("{1}d1", "f", "old")
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS + ("--key-prefix", "{1}"))
    c = p.raw()
    warm(c, st, ("GET", "{1}i1"), ("HGET", "{1}d1", "f"), ("MGET", "{1}i1", "{1}i2"))
    relay.hold_tracking()
    writes = [("SET", "{1}i1", "new"), ("HSET", "{1}d1", "f", "new")]
    if how == "plain":
        for w in writes:
            c.cmd(*w)
    elif how == "multi":
        c.send(encode("MULTI") + b"".join(encode(*w) for w in writes) + encode("EXEC"))
        c.read_frames(len(writes) + 2)
    else:
        c.send(b"".join(encode(*w) for w in writes))
        c.read_frames(len(writes))
    assert c.cmd("GET", "{1}i1").raw == b"$3\r\nnew\r\n"
    assert c.cmd("HGET", "{1}d1", "f").raw == b"$3\r\nnew\r\n"
    assert c.cmd("MGET", "{1}i1", "{1}i2").raw == b"*2\r\n$3\r\nnew\r\n$-1\r\n"
    relay.release_tracking()
