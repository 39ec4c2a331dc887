"""Every data type round-trips through the proxy exactly as through Redis.

Each scenario runs on a fresh upstream (behind the proxy) and on a fresh
reference redis-server; the raw reply bytes must be identical, in RESP2 and
in RESP3. Reads are repeated so that a second read (possibly served from the
proxy's cache) is checked too.
"""
import os

import pytest

from helpers import Err, assert_same_runs, assert_same_steps, encode

BINARY = b"a\r\nb\x00c\r\n\x00\xff\xfe" + bytes(range(256)) + b"\r\n"
# Short enough (<= 64 bytes) that hashes stay listpack-encoded: their reply
# order is then insertion order, the same on two servers. (A hashtable's order
# depends on each server's random hash seed.)
SHORT_BIN = b"a\r\nb\x00c\r\n\x00\xff\xfe"


def twice(*cmd):
    return [cmd, cmd]


STRINGS = (
    [("SET", "s:plain", "hello"), ("GET", "s:plain"), ("GET", "s:plain"),
     ("SET", "s:empty", ""), ("GET", "s:empty"), ("GET", "s:empty"), ("STRLEN", "s:empty"),
     ("SET", "s:bin", BINARY), ("GET", "s:bin"), ("GET", "s:bin"),
     ("SET", b"key\r\nwith\x00nul", BINARY), ("GET", b"key\r\nwith\x00nul"),
     ("SET", "i1", BINARY), ("GET", "i1"), ("GET", "i1"),          # JuiceFS inode shape
     ("SET", "i2", ""), ("GET", "i2"), ("GET", "i2"),
     ("GET", "i3"), ("GET", "i3"),                                 # missing -> nil
     ("MGET", "i1", "i2", "i3", "s:plain"), ("MGET", "i1", "i2", "i3", "s:plain"),
     ("APPEND", "s:plain", " world"), ("GET", "s:plain"),
     ("INCR", "s:n"), ("INCRBY", "s:n", 41), ("INCRBYFLOAT", "s:f", "1.5"), ("GET", "s:f"),
     ("GETRANGE", "s:bin", 0, 4), ("SETRANGE", "s:bin", 1, b"\x00\x00"), ("GET", "s:bin"),
     ("GETDEL", "s:plain"), ("GET", "s:plain"), ("SETNX", "s:nx", "1"), ("SETNX", "s:nx", "2"),
     ("GETSET", "s:nx", "3"), ("GET", "s:nx"), ("MSET", "m1", "a", "m2", "b"),
     ("MGET", "m1", "m2", "m3"), ("TYPE", "s:bin"), ("EXISTS", "s:bin", "s:none"),
     ("LCS", "m1", "m2"), ("INCR", "s:bin")]
)

LISTS = [("RPUSH", "l", "a", "b", BINARY, ""), ("LRANGE", "l", 0, -1), ("LRANGE", "l", 0, -1),
         ("LPUSH", "l", "z"), ("LLEN", "l"), ("LINDEX", "l", 3), ("LPOS", "l", "b"),
         ("LINSERT", "l", "BEFORE", "b", "x"), ("LSET", "l", 0, "y"), ("LREM", "l", 0, "x"),
         ("LPOP", "l"), ("RPOP", "l", 2), ("LMOVE", "l", "l2", "LEFT", "RIGHT"),
         ("LRANGE", "l2", 0, -1), ("LTRIM", "l", 0, 0), ("LRANGE", "l", 0, -1),
         ("LPOP", "nolist"), ("LPOP", "nolist", 2), ("TYPE", "l"), ("GET", "l")]

HASHES = [("HSET", "h", "f1", "v1", "f2", SHORT_BIN, "", "empty-field", "e", ""),
          ("HGETALL", "h"), ("HGETALL", "h"), ("HGET", "h", "f2"), ("HGET", "h", "f2"),
          ("HGET", "h", ""), ("HGET", "h", "nofield"), ("HMGET", "h", "f1", "nofield", "e"),
          ("HLEN", "h"), ("HEXISTS", "h", "f1"), ("HINCRBY", "h", "n", 5),
          ("HINCRBYFLOAT", "h", "x", "2.5"), ("HKEYS", "h"), ("HVALS", "h"), ("HSTRLEN", "h", "f2"),
          ("HDEL", "h", "f1"), ("HGET", "h", "f1"), ("HSETNX", "h", "f1", "again"),
          ("HRANDFIELD", "nohash"),
          # JuiceFS directory entry shape: d<parent> <name>
          ("HSET", "d1", "name", b"\x01\x00\x00\x00\x00\x00\x00\x00\x02", "47x", "v"),
          ("HGET", "d1", "name"), ("HGET", "d1", "name"), ("HGET", "d1", "missing"),
          ("HGET", "d1", "missing"), ("HGET", "d9", "x"), ("HGET", "d9", "x"),
          ("HDEL", "d1", "name"), ("HGET", "d1", "name")]

SETS = [("SADD", "set", "a", "b", "c", BINARY, ""), ("SCARD", "set"), ("SISMEMBER", "set", BINARY),
        ("SMISMEMBER", "set", "a", "zz"), ("SREM", "set", "c"), ("SADD", "set2", "a", "q"),
        ("SINTER", "set", "set2"), ("SINTERCARD", 2, "set", "set2"), ("SMOVE", "set", "set2", "b"),
        ("SCARD", "set2"), ("SMEMBERS", "empty-set"), ("SADD", "ints", 1, 2, 3),
        ("SMEMBERS", "ints"), ("TYPE", "set")]

ZSETS = [("ZADD", "z", 1, "a", "2.5", "b", "-inf", BINARY, "+inf", ""),
         ("ZRANGE", "z", 0, -1, "WITHSCORES"), ("ZRANGE", "z", 0, -1, "WITHSCORES"),
         ("ZSCORE", "z", "b"), ("ZSCORE", "z", "b"), ("ZSCORE", "z", "nope"), ("ZSCORE", "z", ""),
         ("ZMSCORE", "z", "a", "nope"), ("ZINCRBY", "z", "0.5", "a"), ("ZRANK", "z", "a"),
         ("ZREVRANGEBYSCORE", "z", "+inf", "-inf", "WITHSCORES", "LIMIT", 0, 2),
         ("ZRANGEBYLEX", "z", "-", "+"), ("ZCARD", "z"), ("ZCOUNT", "z", 0, 10),
         ("ZPOPMIN", "z"), ("ZPOPMAX", "z", 2), ("ZRANGE", "z", 0, -1, "WITHSCORES"),
         ("ZADD", "z", "INCR", 3, "a"), ("ZUNIONSTORE", "z2", 1, "z"), ("ZRANGE", "z2", 0, -1)]

STREAMS = [("XADD", "st", "1-1", "f", "v", "bin", BINARY), ("XADD", "st", "1-2", "empty", ""),
           ("XADD", "st", "2-0", "n", "1"), ("XLEN", "st"), ("XRANGE", "st", "-", "+"),
           ("XRANGE", "st", "-", "+"), ("XREVRANGE", "st", "+", "-", "COUNT", 1),
           ("XREAD", "COUNT", 2, "STREAMS", "st", "0"), ("XGROUP", "CREATE", "st", "g", "0"),
           ("XREADGROUP", "GROUP", "g", "c1", "COUNT", 2, "STREAMS", "st", ">"),
           ("XPENDING", "st", "g"), ("XACK", "st", "g", "1-1"), ("XDEL", "st", "1-2"),
           ("XTRIM", "st", "MAXLEN", 1), ("XRANGE", "st", "-", "+"), ("XADD", "st", "1-0", "f", "v"),
           ("XREAD", "STREAMS", "nostream", "0"), ("TYPE", "st")]

BITMAPS = [("SETBIT", "bm", 7, 1), ("SETBIT", "bm", 100, 1), ("GETBIT", "bm", 7), ("GETBIT", "bm", 8),
           ("BITCOUNT", "bm"), ("BITPOS", "bm", 1), ("BITPOS", "bm", 0), ("GET", "bm"), ("GET", "bm"),
           ("SET", "bm2", b"\xff\x00"), ("BITOP", "AND", "bm3", "bm", "bm2"), ("GET", "bm3"),
           ("BITFIELD", "bf", "SET", "u8", 0, 200, "INCRBY", "u8", 0, 100, "GET", "i4", 0),
           ("BITFIELD_RO", "bf", "GET", "u8", 0), ("SETBIT", "bm", -1, 1)]

HLL = [("PFADD", "hll", "a", "b", "c", BINARY), ("PFADD", "hll", "a"), ("PFCOUNT", "hll"),
       ("PFADD", "hll2", "x", "y"), ("PFMERGE", "hll3", "hll", "hll2"), ("PFCOUNT", "hll3"),
       ("PFCOUNT", "hll", "hll2"), ("GET", "hll2"), ("GET", "hll2"), ("PFADD", "s:notahll")]

GEO = [("GEOADD", "geo", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania"),
       ("GEODIST", "geo", "Palermo", "Catania", "km"), ("GEOPOS", "geo", "Palermo", "Nowhere"),
       ("GEOHASH", "geo", "Palermo"),
       ("GEOSEARCH", "geo", "FROMLONLAT", 15, 37, "BYRADIUS", 200, "km", "ASC",
        "WITHCOORD", "WITHDIST", "WITHHASH"),
       ("GEORADIUS", "geo", 15, 37, 200, "km", "WITHDIST", "ASC"),
       ("GEOADD", "geo", "XX", "CH", "13.4", "38.1", "Palermo"), ("ZRANGE", "geo", 0, -1, "WITHSCORES")]

GROUPS = {"string": STRINGS, "list": LISTS, "hash": HASHES, "set": SETS, "zset": ZSETS,
          "stream": STREAMS, "bitmap": BITMAPS, "hyperloglog": HLL, "geo": GEO}


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("group", list(GROUPS))
def test_data_type_round_trip_matches_redis(proxy, ref, group, protocol):
    """Each command's reply bytes equal Redis's, one command at a time."""
    steps = GROUPS[group]
    # SMEMBERS/SINTER order follows the set's internal encoding, identical on
    # two servers given the same operations, so byte comparison holds.
    got = assert_same_steps(proxy, ref, steps, protocol=protocol)
    assert len(got) == len(steps)


@pytest.mark.parametrize("protocol", [2, 3])
def test_data_types_pipelined_in_one_write_match_redis(proxy, ref, protocol):
    """All groups at once, sent in a single write: same bytes, same order."""
    steps = [s for g in GROUPS.values() for s in g]

    def scenario(ep):
        with ep.raw(protocol=protocol) as c:
            c.send(b"".join(encode(*s) for s in steps))
            return list(zip(steps, (f.raw for f in c.read_many_fast(len(steps), timeout=20))))

    assert_same_runs(scenario, proxy, ref)


@pytest.mark.parametrize("protocol", [2, 3])
def test_binary_safe_values_round_trip(proxy, protocol):
    """Values and keys with CR, LF, NUL and every byte value come back intact;
    the empty string is the empty string, not nil."""
    r = proxy.client(protocol=protocol)
    keys = [b"bin", b"\r\n", b"\x00", b"i10", b"k\x00\r\nk"]
    for k in keys:
        r.set(k, BINARY + k)
    for _ in range(2):
        for k in keys:
            assert r.get(k) == BINARY + k
    r.set("empty", b"")
    assert r.get("empty") == b""
    assert r.get("empty") == b""
    assert r.exists("empty") == 1
    r.hset("d5", mapping={b"\x00name\r\n": BINARY, b"": b""})
    assert r.hget("d5", b"\x00name\r\n") == BINARY
    assert r.hget("d5", b"") == b""
    assert r.hget("d5", b"other") is None
    assert r.hgetall("d5") == {b"\x00name\r\n": BINARY, b"": b""}


@pytest.mark.parametrize("protocol", [2, 3])
def test_one_megabyte_value_round_trips(proxy, upstream, protocol):
    """A 1 MB value (and a 4 MB one) is stored and read back byte for byte,
    through the proxy and as Redis holds it."""
    r = proxy.client(protocol=protocol)
    big = os.urandom(1 << 20)
    huge = os.urandom(4 << 20)
    r.set("big", big)
    r.set("i20", big)            # a cacheable-looking key with a value too big to cache
    r.hset("d20", "f", huge)
    for _ in range(2):
        assert r.get("big") == big
        assert r.get("i20") == big
        assert r.hget("d20", "f") == huge
    assert upstream.client().get("big") == big
    assert r.strlen("big") == len(big)
    # Then overwritten with a small one: no stale big value afterwards.
    r.set("i20", "small")
    assert r.get("i20") == b"small"


def test_wrong_type_errors_match_redis(proxy, ref):
    steps = [("SET", "k", "v"), ("LPUSH", "k", "x"), ("HGET", "k", "f"), ("HSET", "h", "f", "v"),
             ("GET", "h"), ("GET", "h"), ("SADD", "h", "m"), ("NOSUCHCOMMAND", "x"),
             ("GET",), ("SET", "k"), ("INCR", "k"), ("GET", "k")]
    got = assert_same_steps(proxy, ref, steps)
    assert Err(got[1][1][1:-2]).code == "WRONGTYPE"
