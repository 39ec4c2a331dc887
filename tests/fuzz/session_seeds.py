#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_session (tests/fuzz/corpus/fuzz_session/).

Each seed is one client session in the input layout fuzz_session.c
describes: two flag bytes, the number of chunk-size bytes, the script
length, the chunk sizes, the script, then the client's bytes.

    python3 tests/fuzz/session_seeds.py     # from the repository root
"""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "fuzz_session")

# flags (fuzz_session.c, F_*)
BCAST, DEFAULT, OPTIN = 1, 2, 3
REQUIREPASS = 1 << 2
ONE_CONN = 1 << 3
BATCH2 = 1 << 4
SMALL_LIMITS = 1 << 5
DB1 = 1 << 6
UP_CREDS = 1 << 7
ALL_KEYS = 1 << 8
KEY_PREFIX = 1 << 9
SETTLE = 1 << 10
SMALL_CACHE = 1 << 11
SMALL_OUTPUT = 1 << 12
FULL_TABLE = 1 << 13
TIMEOUT = 1 << 14
SLOW_READER = 1 << 15

# script bytes at an idle point: what the driver does
IDLE_INVALIDATE, IDLE_NULL_INVALIDATION, IDLE_CLOSE_CONN, IDLE_CRON, IDLE_UNSOLICITED = 3, 4, 5, 6, 7
IDLE_OTHER_GET, IDLE_OTHER_SET, IDLE_STOP, IDLE_REDIS_DOWN, IDLE_REDIS_UP, IDLE_HANG_UP = 8, 9, 10, 11, 12, 13

# script bytes: how the fake Redis answers one request
NOW, ALT, ERR, CLOSE, GARBAGE = 0, 4, 5, 6, 7
SPLIT, HOLD1, HOLD2 = 1 << 3, 2 << 3, 3 << 3
PUSH, CLOSE_AFTER, BIG = 1 << 5, 1 << 6, 1 << 7


def cmd(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def seed(name, flags, stream, script=b"", chunks=b""):
    assert len(chunks) < 16 and len(script) < 256
    data = struct.pack("<HBB", flags, len(chunks), len(script)) + bytes(chunks) + bytes(script) + stream
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def seed_writes(name, flags, writes, script=b""):
    """A seed whose client writes are exactly `writes` (each 1-128 bytes)."""
    assert all(1 <= len(w) <= 128 for w in writes)
    seed(name, flags, b"".join(writes), script, [len(w) - 1 for w in writes])


def main():
    os.makedirs(OUT, exist_ok=True)
    dentry = b"\x01" + struct.pack(">Q", 5)
    lookup_sha = "8526c64984678fc27f67f44755c8ba7dcdf7ea60"

    seed("pipeline-get-set", BCAST | SETTLE,
         cmd("SET", "i1", "attr1") + cmd("GET", "i1") + cmd("GET", "i1") + cmd("MGET", "i1", "i2", "i3")
         + cmd("DEL", "i1") + cmd("GET", "i1") + cmd("HSET", "d1", "name", dentry) + cmd("HGET", "d1", "name")
         + cmd("HGET", "d1", "name") + cmd("PING") + cmd("ECHO", "hi"))
    seed("pipeline-chunked", BCAST | SETTLE,
         cmd("SET", "i7", "x") + cmd("GET", "i7") + cmd("GET", "i7") + cmd("INCR", "n") + cmd("GET", "n"),
         script=[NOW, HOLD1, SPLIT, NOW, 3, HOLD2, NOW, 4], chunks=[5, 20, 0x81])
    seed("multi-exec-local", BCAST | SETTLE,
         cmd("MULTI") + cmd("SET", "i1", "a") + cmd("INCR", "c") + cmd("GET", "i1") + cmd("EXEC")
         + cmd("GET", "i1") + cmd("MULTI") + cmd("SET", "k", "v") + cmd("DISCARD"))
    seed("multi-exec-pinned", 0,
         cmd("MULTI") + cmd("SET", "a", "1") + cmd("INCR", "a") + cmd("NOSUCHCMD") + cmd("EXEC")
         + cmd("MULTI") + cmd("GET", "a") + cmd("EXEC"))
    seed("watch", BCAST | SETTLE,
         cmd("WATCH", "i1") + cmd("GET", "i1") + cmd("MULTI") + cmd("SET", "i1", "2") + cmd("EXEC")
         + cmd("WATCH", "i1") + cmd("MULTI") + cmd("SET", "i1", "3") + cmd("EXEC") + cmd("UNWATCH")
         + cmd("GET", "i1"),
         script=[0] * 9 + [ALT])
    seed("subscribe", 0,
         cmd("SUBSCRIBE", "ch", "other") + cmd("PING") + cmd("PSUBSCRIBE", "c*") + cmd("UNSUBSCRIBE")
         + cmd("PUNSUBSCRIBE"),
         script=[NOW, PUSH, 7, 7 | 8, NOW, 7])
    seed("hello3", BCAST | SETTLE,
         cmd("HELLO", "3") + cmd("GET", "i1") + cmd("SET", "i1", "v") + cmd("GET", "i1") + cmd("GET", "i1")
         + cmd("HGET", "d1", "x") + cmd("CLIENT", "TRACKING", "ON") + cmd("GET", "i1") + cmd("HELLO", "2")
         + cmd("PING"),
         script=[NOW, PUSH, NOW, NOW, NOW, ALT])
    seed("hello3-auth-setname", REQUIREPASS | DEFAULT | SETTLE,
         cmd("HELLO", "3", "AUTH", "default", "pw", "SETNAME", "me") + cmd("GET", "i2") + cmd("GET", "i2")
         + cmd("CLIENT", "GETNAME") + cmd("HELLO", "3", "AUTH", "default", "bad"))
    seed("auth", REQUIREPASS | BCAST | UP_CREDS | SETTLE,
         cmd("PING") + cmd("GET", "i1") + cmd("AUTH", "wrong") + cmd("AUTH", "pw") + cmd("GET", "i1")
         + cmd("SET", "i1", "z") + cmd("GET", "i1") + cmd("AUTH", "alice", "secret") + cmd("GET", "i1")
         + cmd("SELECT", "3") + cmd("GET", "i1") + cmd("SELECT", "99"))
    seed("auth-unknown-access", REQUIREPASS,
         cmd("PING") + cmd("ECHO", "x") + cmd("AUTH", "default", "pw") + cmd("PING"))
    seed("bad-input", 0,
         cmd("GET", "a") + b"*2\r\n$3\r\nGET\r\n$-5\r\n" + cmd("PING"))
    seed("bad-inline", SMALL_LIMITS,
         b"PING\r\nECHO \"unbalanced\r\nGET x\r\n")
    seed("inline", BCAST | SETTLE,
         b"PING\r\nECHO hello\r\nSET \"i9\" 'v v'\r\nGET i9\r\nGET i9\r\n\r\nMGET i9 i8\r\n")
    seed("huge-count", SMALL_LIMITS,
         b"*100\r\n$3\r\nSET\r\n")
    seed("batch", BCAST | BATCH2 | SETTLE,
         cmd("SET", "a", "1") + cmd("SET", "b", "2") + cmd("SET", "c", "3") + cmd("GET", "a")
         + cmd("INCR", "x") + cmd("INCR", "x") + cmd("DEL", "a", "b"),
         script=[0, 0, 0, 0, 0, 0, 0, ERR])
    seed("batch-execabort", BCAST | BATCH2 | SETTLE,
         cmd("SET", "a", "1") + cmd("SET", "b", "2") + cmd("SET", "c", "3"),
         script=[0, 0, 0, 0, ERR, 0, 0, 0, 0, 0])
    seed("lookup", BCAST | SETTLE,
         cmd("HSET", "d1", "name", dentry) + cmd("SET", "i5", "attr5") + cmd("HGET", "d1", "name")
         + cmd("GET", "i5") + cmd("EVALSHA", lookup_sha, "2", "d1", "name")
         + cmd("EVALSHA", lookup_sha, "2", "d1", "name") + cmd("EVALSHA", lookup_sha, "2", "d1", "gone")
         + cmd("EVALSHA", lookup_sha, "2", "d1", "gone") + cmd("SCRIPT", "FLUSH")
         + cmd("EVALSHA", lookup_sha, "2", "d1", "name"))
    seed("blocking", 0,
         cmd("BLPOP", "q", "0") + cmd("GET", "a") + cmd("BRPOP", "q", "1") + cmd("PING"),
         script=[HOLD2, NOW, HOLD1 | ALT])
    seed("client-reply", 0,
         cmd("CLIENT", "REPLY", "OFF") + cmd("SET", "a", "1") + cmd("CLIENT", "REPLY", "ON") + cmd("GET", "a")
         + cmd("CLIENT", "REPLY", "SKIP") + cmd("GET", "a") + cmd("GET", "a"))
    seed("monitor", 0, cmd("MONITOR") + cmd("PING"), script=[NOW, PUSH, PUSH])
    seed("session-state", DB1 | BCAST | SETTLE,
         cmd("CLIENT", "SETNAME", "app") + cmd("CLIENT", "GETNAME") + cmd("SELECT", "1") + cmd("SELECT", "2")
         + cmd("GET", "i1") + cmd("CLIENT", "SETINFO", "LIB-NAME", "x") + cmd("CLIENT", "ID")
         + cmd("READONLY") + cmd("GET", "i1") + cmd("RESET") + cmd("GET", "i1") + cmd("QUIT") + cmd("PING"))
    seed("upstream-trouble", BCAST | SETTLE,
         cmd("GET", "i1") + cmd("GET", "i2") + cmd("GET", "i3") + cmd("SET", "i1", "x") + cmd("GET", "i1"),
         script=[0, 0, 0, 0, 0, 0, CLOSE, GARBAGE, CLOSE_AFTER])
    seed("optin-all-keys", OPTIN | ALL_KEYS | SETTLE,
         cmd("GET", "k") + cmd("GET", "k") + cmd("SET", "k", "2") + cmd("GET", "k") + cmd("HGET", "h1", "f")
         + cmd("HGET", "h1", "f"))
    # keys with a TTL: PTTL behind each fill ('x' keys expire in 3 ms in the
    # fake), replies held back, split, refused; the cron ends the entries
    seed("ttl-keys", BCAST | ALL_KEYS | SETTLE,
         cmd("SET", "x1", "v") + cmd("SET", "k1", "w") + cmd("GET", "x1") + cmd("GET", "k1")
         + cmd("MGET", "x1", "k1", "x2") + cmd("GET", "x1") + cmd("HGET", "h1", "f") + cmd("GET", "x1"),
         script=[0, 0, HOLD1, 0, SPLIT, ERR, 0, 0, IDLE_CRON, 0, ALT, 0, IDLE_INVALIDATE, 0])
    seed("prefix-small-cache", BCAST | KEY_PREFIX | SMALL_CACHE | SETTLE,
         cmd("SET", "{1}i1", "0123456789abcdef0123") + cmd("GET", "{1}i1") + cmd("GET", "{1}i1")
         + cmd("SET", "{1}i2", "short") + cmd("GET", "{1}i2") + cmd("GET", "{1}i2") + cmd("FLUSHALL")
         + cmd("GET", "{1}i2"))
    seed("info-big", BCAST | SMALL_OUTPUT | SETTLE,
         cmd("INFO") + cmd("INFO", "sidecache") + cmd("SET", "i1", "x") + cmd("GET", "i1"),
         script=[0, 0, 0, 0, 0, 0, BIG, 0, 0, BIG])
    seed("slow-reader-big", BCAST | SLOW_READER | SETTLE,
         cmd("SET", "i1", "abcdefgh") + cmd("GET", "i1") + cmd("GET", "i1") + cmd("GET", "i1"),
         script=[0, 0, 0, 0, 0, 0, BIG, BIG, BIG])
    seed("full-table", BCAST | FULL_TABLE | SETTLE,
         cmd("COMMAND", "COUNT") + cmd("SORT", "l", "STORE", "d") + cmd("GET", "d") + cmd("OBJECT", "ENCODING", "x"))
    seed("cron-timeout", TIMEOUT | BCAST | SETTLE,
         cmd("GET", "i1") + b"*2\r\n$3\r\nGET\r\n",
         script=[0, 0, 0, 0, 0, 0, 0, 6])
    # one write per group of commands: the script then reads as the
    # handshakes' replies, then per write its replies and one idle point
    seed_writes("other-client-set", BCAST | SETTLE | ONE_CONN,
                [cmd("SET", "i1", "a"), cmd("GET", "i1"), cmd("GET", "i1"), cmd("GET", "i1")],
                script=[0] * 5 + [0, IDLE_OTHER_SET, 0, 0, IDLE_OTHER_GET, 0, IDLE_INVALIDATE, 0, 0])
    seed_writes("graceful-stop", BCAST | SETTLE,
                [cmd("GET", "i1"), cmd("BLPOP", "q", "0"), cmd("GET", "i2")],
                script=[0] * 5 + [0, 0, 0, 0, HOLD2, IDLE_STOP])
    seed_writes("redis-down-up", SETTLE,
                [cmd("GET", "a"), cmd("GET", "b"), cmd("SET", "a", "1"), cmd("GET", "a")],
                script=[0, 0, 0, IDLE_REDIS_DOWN, IDLE_REDIS_UP, 0, 0, 0, 0])
    seed_writes("hang-up-in-flight", 0,
                [cmd("MULTI") + cmd("SET", "a", "1") + cmd("GET", "a"), cmd("EXEC")],
                script=[0, 0, HOLD2, 0, 0, IDLE_HANG_UP])
    seed_writes("close-upstream-in-flight", SETTLE | ONE_CONN,
                [cmd("GET", "a") + cmd("GET", "b"), cmd("GET", "c")],
                script=[0, HOLD1, 0, IDLE_CLOSE_CONN, 0, 0])

if __name__ == "__main__":
    main()
