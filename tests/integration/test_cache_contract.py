"""
The consistency contract of DESIGN.md ("The consistency contract", C1-C10),
one or more tests per item, named after it.

Where a property could also hold by luck (an invalidation from Redis racing
the proxy's own local invalidation), the proxy runs behind a Relay
(cachehelpers.py) that holds back what Redis sends on the invalidation
connection, so only the behaviour under test can produce the right answer.
Cache hits are proven with the INFO # sidecache counters; values are checked
against Redis itself.
"""
import contextlib
import hashlib
import shutil
import socket
import threading
import time

import pytest

from cachehelpers import (MODES, RELAY_ARGS, cmd_matcher, confirm_cached, direct_read,  # noqa: F401
                          make_tracked, parse_sidecache_section, relay, relay_settle, settle, start_cached,
                          suite_tracking_mode, tracked_key, value_of, wait_stat, wait_tracking_active, warm)
from helpers import HOST, ConnectionClosed, Err, SeveringForwarder, TracedRedisServer, encode, wait_until

pytestmark = pytest.mark.proxy_only


def direct_setup(relay, st, write, *keys):
    """Runs write() (direct writes of `keys` on Redis) and waits until their
    invalidations went through the relay and were counted by the proxy, so
    that none of them can purge an entry warmed afterwards."""
    base_relay, base_keys = relay.invalidation_count(), st["invalidation_keys"]
    write()
    relay_settle(relay, st, base_relay, base_keys, keys)


# ---------------------------------------------------------------------------
# C1 read-your-writes

SET_SCRIPT = "return redis.call('SET', KEYS[1], ARGV[1])"
SET_SCRIPT_SHA = hashlib.sha1(SET_SCRIPT.encode()).hexdigest()
FUNC_LIB = ("#!lua name=sidecachetest\n"
            "redis.register_function('setkey', function(keys, args) "
            "return redis.call('SET', keys[1], args[1]) end)")

# name: (direct setup, reads warmed then checked, write steps, mode)
#   how "seq": steps one at a time on the proxy connection;
#        "pipeline": all steps in one write, the last step is a read whose
#                    reply must be the new value;
#        "other": the steps run on a second proxy connection;
#        steps ("SLEEP", s) pause.
C1_CASES = {
    "set_cold": ([("SET", "i9000", "old")], [], [("SET", "i9000", "new")], "seq"),
    "set": ([("SET", "i9001", "old")], [("GET", "i9001")], [("SET", "i9001", "new")], "seq"),
    "set_get_option": ([("SET", "i9002", "old")], [("GET", "i9002")],
                       [("SET", "i9002", "new", "GET")], "seq"),
    "set_nx_on_missing": ([], [("GET", "i9003")], [("SET", "i9003", "new", "NX")], "seq"),
    "getdel": ([("SET", "i9004", "old")], [("GET", "i9004")], [("GETDEL", "i9004")], "seq"),
    "append": ([("SET", "i9005", "old")], [("GET", "i9005")], [("APPEND", "i9005", "+x")], "seq"),
    "incr": ([("SET", "i9006", "10")], [("GET", "i9006")], [("INCR", "i9006")], "seq"),
    "setrange": ([("SET", "i9007", "old")], [("GET", "i9007")],
                 [("SETRANGE", "i9007", "0", "N")], "seq"),
    "mset": ([("SET", "i9008", "old"), ("SET", "i9009", "old")],
             [("GET", "i9008"), ("GET", "i9009")],
             [("MSET", "i9008", "new1", "i9009", "new2")], "seq"),
    "del": ([("SET", "i9010", "old")], [("GET", "i9010")], [("DEL", "i9010")], "seq"),
    "unlink": ([("SET", "i9011", "old")], [("GET", "i9011")], [("UNLINK", "i9011")], "seq"),
    "pexpire_then_read": ([("SET", "i9012", "old")], [("GET", "i9012")],
                          [("PEXPIRE", "i9012", "1"), ("SLEEP", 0.05)], "seq"),
    "expire_zero": ([("SET", "i9013", "old")], [("GET", "i9013")],
                    [("EXPIRE", "i9013", "0")], "seq"),
    "rename_both_keys": ([("SET", "i9014", "src"), ("SET", "i9015", "dst")],
                         [("GET", "i9014"), ("GET", "i9015")],
                         [("RENAME", "i9014", "i9015")], "seq"),
    "renamenx": ([("SET", "i9016", "src")], [("GET", "i9016"), ("GET", "i9017")],
                 [("RENAMENX", "i9016", "i9017")], "seq"),
    "copy_replace": ([("SET", "i9018", "src"), ("SET", "i9019", "dst")], [("GET", "i9019")],
                     [("COPY", "i9018", "i9019", "REPLACE")], "seq"),
    "move_to_db1": ([("SET", "i9020", "old")], [("GET", "i9020")], [("MOVE", "i9020", "1")], "seq"),
    "hset": ([("HSET", "d9001", "f", "old")], [("HGET", "d9001", "f")],
             [("HSET", "d9001", "f", "new")], "seq"),
    "hset_new_field_negative_cached": ([("HSET", "d9002", "g", "x")], [("HGET", "d9002", "f")],
                                       [("HSET", "d9002", "f", "new")], "seq"),
    "hsetnx": ([("HSET", "d9003", "g", "x")], [("HGET", "d9003", "f")],
               [("HSETNX", "d9003", "f", "new")], "seq"),
    "hmset_two_fields": ([("HSET", "d9004", "f", "old", "g", "old")],
                         [("HGET", "d9004", "f"), ("HGET", "d9004", "g")],
                         [("HMSET", "d9004", "f", "new1", "g", "new2")], "seq"),
    "hincrby": ([("HSET", "d9005", "f", "1")], [("HGET", "d9005", "f")],
                [("HINCRBY", "d9005", "f", "5")], "seq"),
    "hdel": ([("HSET", "d9006", "f", "old", "g", "keep")], [("HGET", "d9006", "f")],
             [("HDEL", "d9006", "f")], "seq"),
    "del_hash_purges_all_fields": ([("HSET", "d9007", "f", "1", "g", "2")],
                                   [("HGET", "d9007", "f"), ("HGET", "d9007", "g")],
                                   [("DEL", "d9007")], "seq"),
    "hash_becomes_string": ([("HSET", "d9008", "f", "old")], [("HGET", "d9008", "f")],
                            [("DEL", "d9008"), ("SET", "d9008", "str")], "seq"),
    "sort_store_changes_type": ([("SET", "i9021", "old"), ("RPUSH", "l9021", "2", "1")],
                                [("GET", "i9021")], [("SORT", "l9021", "STORE", "i9021")], "seq"),
    "bitop_dest": ([("SET", "i9022", "old"), ("SET", "s9022", "zz")], [("GET", "i9022")],
                   [("BITOP", "OR", "i9022", "s9022")], "seq"),
    "eval_declared_keys": ([("SET", "i9023", "old")], [("GET", "i9023")],
                           [("EVAL", SET_SCRIPT, "1", "i9023", "new")], "seq"),
    "evalsha_declared_keys": ([("SET", "i9024", "old"), ("SCRIPT", "LOAD", SET_SCRIPT)],
                              [("GET", "i9024")],
                              [("EVALSHA", SET_SCRIPT_SHA, "1", "i9024", "new")], "seq"),
    "eval_undeclared_key": ([("SET", "i9025", "old")], [("GET", "i9025")],
                            [("EVAL", "return redis.call('SET', 'i9025', 'new')", "0")], "seq"),
    "fcall_declared_keys": ([("SET", "i9026", "old"), ("FUNCTION", "LOAD", "REPLACE", FUNC_LIB)],
                            [("GET", "i9026")], [("FCALL", "setkey", "1", "i9026", "new")], "seq"),
    "multi_exec": ([("SET", "i9027", "old"), ("HSET", "d9027", "f", "old")],
                   [("GET", "i9027"), ("HGET", "d9027", "f")],
                   [("MULTI",), ("SET", "i9027", "new"), ("HSET", "d9027", "f", "new"), ("EXEC",)],
                   "seq"),
    "watch_multi_exec": ([("SET", "i9028", "old")], [("GET", "i9028")],
                         [("WATCH", "i9028"), ("MULTI",), ("SET", "i9028", "new"), ("EXEC",)],
                         "seq"),
    "pipeline_set_get": ([("SET", "i9029", "old")], [("GET", "i9029")],
                         [("SET", "i9029", "new"), ("GET", "i9029")], "pipeline"),
    "pipeline_get_set_get": ([("SET", "i9030", "old")], [("GET", "i9030")],
                             [("GET", "i9030"), ("SET", "i9030", "new"), ("GET", "i9030")],
                             "pipeline"),
    "pipeline_hset_hget": ([("HSET", "d9031", "f", "old")], [("HGET", "d9031", "f")],
                           [("HSET", "d9031", "f", "new"), ("HGET", "d9031", "f")], "pipeline"),
    "pipeline_multi_exec_get": ([("SET", "i9032", "old")], [("GET", "i9032")],
                                [("MULTI",), ("SET", "i9032", "new"), ("EXEC",), ("GET", "i9032")],
                                "pipeline"),
    "write_by_other_client": ([("SET", "i9033", "old")], [("GET", "i9033")],
                              [("SET", "i9033", "new")], "other"),
}


# every case in bcast mode; a sample in the per-connection modes
C1_OTHER_MODES = ("set", "hset", "hdel", "rename_both_keys", "multi_exec", "pipeline_set_get",
                  "eval_undeclared_key", "write_by_other_client")
# cases that use what older servers lack
C1_NEEDS = {"fcall_declared_keys": pytest.mark.redis(7, 0, "FUNCTION and FCALL")}
C1_PARAMS = ([pytest.param("bcast", c, id=c, marks=C1_NEEDS.get(c, ())) for c in sorted(C1_CASES)]
             + [pytest.param(m, c, id="%s-%s" % (m, c)) for m in MODES[1:] for c in C1_OTHER_MODES])


@pytest.mark.parametrize("mode,case", C1_PARAMS)
def test_c1_read_your_writes(mode, case, relay, proxy_factory, upstream):
    """A write forwarded by the proxy invalidates every key it touches before
    its reply reaches the client: the read that follows at once (same
    connection, or another client of the same proxy) returns what Redis now
    holds, although the key was cached before the write (proved: the warm-up
    read was a hit) and Redis's own invalidation for the write is held back
    by the relay until the end."""
    setup, reads, steps, how = C1_CASES[case]
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS, mode=mode)
    base_relay, base_keys = relay.invalidation_count(), st["invalidation_keys"]
    with upstream.raw(auth=True) as d:
        for s in setup:
            f = d.cmd(*s)
            assert not isinstance(f.value, Err), (s, f)
    # their invalidations must not purge what is warmed next
    relay_settle(relay, st, base_relay, base_keys,
                 {s[1] for s in setup if len(s) > 1 and tracked_key(s[1])})
    c = p.raw(auth=True)
    cached = warm(c, st, *reads)
    relay.hold_tracking()
    try:
        assert confirm_cached(c, st, *reads) == cached
        if how == "pipeline":
            c.send(b"".join(encode(*s) for s in steps))
            replies = c.read_frames(len(steps))
            last = steps[-1]
            assert value_of(replies[-1]) == direct_read(upstream, last), (
                "pipelined %r after the write returned %r, Redis holds %r"
                % (last, replies[-1], direct_read(upstream, last)))
        else:
            w = p.raw(auth=True) if how == "other" else c
            for s in steps:
                if s[0] == "SLEEP":
                    time.sleep(s[1])
                    continue
                f = w.cmd(*s)
                assert not isinstance(f.value, Err) or s[0] == "EXEC", (s, f)
        checks = reads or [("GET", "i9000")]
        for rd, old in zip(checks, cached or [b"old"]):
            want = direct_read(upstream, rd)
            assert want != old, "test bug: the write did not change %r" % (rd,)
            got = value_of(c.cmd(*rd))
            assert got == want, (
                "%s: %r right after the write returned %r; Redis holds %r (cached before: %r)"
                % (case, rd, got, want, old))
    finally:
        relay.release_tracking()
    c.close()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["GET", "HGET"])
def test_c1_read_your_writes_while_own_write_in_flight(mode, kind, relay, proxy_factory,
                                                       upstream):
    """Client A sends a write, which the relay keeps from Redis. Meanwhile
    client C (another pool) reads the key twice: Redis still has the old
    value, and the proxy may well cache it (nothing is wrong yet: the write
    is not acknowledged). A, its write still unanswered, then reads the key:
    it must get the new value (its read must not be served from the cache
    while its own write is in flight), and its replies arrive in order. Once
    A's write is answered, C reads the new value too (the write's keys are
    invalidated again when its reply comes). Redis's invalidations are held
    back throughout."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS, mode=mode)
    key = "i9041" if kind == "GET" else "d9041"
    rd = ("GET", key) if kind == "GET" else ("HGET", key, "f")
    wr = ("SET", key, "new") if kind == "GET" else ("HSET", key, "f", "new")
    d = upstream.client()
    settle(st, lambda: d.set(key, "old") if kind == "GET" else d.hset(key, "f", "old"))
    a = p.raw(auth=True)
    cc = p.raw(auth=True, protocol=3)
    make_tracked(cc, st)
    relay.hold_tracking()
    try:
        hq = relay.hold_request(wr)
        a.send_cmd(*wr)
        hq.wait()
        assert cc.cmd(*rd).value == b"old"
        with st.delta() as dd:
            assert cc.cmd(*rd).value == b"old"
        print("old value cached while A's write was in flight: %s" % (dd["cache_hits"] == 1))
        a.send_cmd(*rd)
        time.sleep(0.05)            # the proxy has dispatched A's read by now
        hq.release()
        r1, r2 = a.read_frames(2)
        assert r1.raw in (b"+OK\r\n", b":1\r\n", b":0\r\n"), (
            "A's first reply must answer its write: %r" % r1)
        assert r2.value == b"new", "A read %r behind its own write" % (r2,)
        assert cc.cmd(*rd).value == b"new", "C read the old value after A's write was answered"
    finally:
        relay.release_tracking()


def writer_and_reader(relay, proxy_factory, upstream, *keys, mode=None):
    """A proxy behind the relay, A (a client) and C (a tracked client), with
    keys set to old on Redis."""
    kw = {} if mode is None else {"mode": mode}
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS, **kw)
    d = upstream.client()
    settle(st, lambda: [d.set(k, "old") for k in keys])
    a = p.raw(auth=True)
    cc = p.raw(auth=True, protocol=3)
    make_tracked(cc, st)
    return st, a, cc


def cached_twice(cc, st, key):
    """C reads key twice: the second read must be a cache hit (the setup of
    a test that needs the old value cached)."""
    assert cc.cmd("GET", key).value == b"old"
    with st.delta() as dd:
        assert cc.cmd("GET", key).value == b"old"
    assert dd["cache_hits"] == 1, "setup: the old value of %s was not cached" % key


@pytest.mark.parametrize("later", [0, 2], ids=["one-write", "later-writes"])
@pytest.mark.parametrize("mode", MODES)
def test_c1_fill_between_queued_write_and_exec(mode, later, relay, proxy_factory, upstream):
    """Client A queues a write in a WATCH transaction (its keys are purged
    when queued). Before A's EXEC, client C reads the key: Redis still
    holds the old value and the proxy caches it again (proved: C's second
    read is a hit). A's EXEC runs the write; C's read right after EXEC's
    reply must get the new value although Redis's invalidation is held
    back: EXEC's reply purges the queued keys once more. With later-writes,
    A queues two more writes, each in a read of its own, after C's fill:
    their early purges must not hide that fill from EXEC's reply (the purge
    there is skipped only when the cache began no entry since the
    transaction's first early purge)."""
    st, a, cc = writer_and_reader(relay, proxy_factory, upstream, "i9042", mode=mode)
    relay.hold_tracking()
    try:
        assert a.cmd("WATCH", "w9042").raw == b"+OK\r\n"
        assert a.cmd("MULTI").raw == b"+OK\r\n"
        assert a.cmd("SET", "i9042", "new").raw == b"+QUEUED\r\n"
        cached_twice(cc, st, "i9042")
        for k in ("x9043", "i9043")[:later]:
            assert a.cmd("SET", k, "x").raw == b"+QUEUED\r\n"
        assert a.cmd("EXEC").raw == b"*%d\r\n" % (1 + later) + b"+OK\r\n" * (1 + later)
        assert cc.cmd("GET", "i9042").value == b"new", "C read the old value after A's EXEC was answered"
    finally:
        relay.release_tracking()


def test_c1_pipelined_discard_keeps_the_exec_keys(relay, proxy_factory, upstream):
    """A pipelines, on its own connection, a transaction and then a second
    one that it discards; C fills the first one's key while the relay holds
    its write: the DISCARD must not take the first one's keys from its
    EXEC's reply, which must purge that fill."""
    st, a, cc = writer_and_reader(relay, proxy_factory, upstream, "i9044")
    relay.hold_tracking()
    try:
        hold = relay.hold_request(("SET", "i9044", "new"))
        steps = [("WATCH", "w9044"), ("MULTI",), ("SET", "i9044", "new"), ("EXEC",),
                 ("MULTI",), ("SET", "i9045", "x"), ("DISCARD",)]
        a.send(b"".join(encode(*s) for s in steps))
        hold.wait()
        cached_twice(cc, st, "i9044")  # after the early purge, before the write runs
        hold.release()
        got = [f.raw for f in a.read_frames(len(steps))]
        assert got == [b"+OK\r\n", b"+OK\r\n", b"+QUEUED\r\n", b"*1\r\n+OK\r\n",
                       b"+OK\r\n", b"+QUEUED\r\n", b"+OK\r\n"], got
        assert cc.cmd("GET", "i9044").value == b"new", "the DISCARD took the first EXEC's keys"
    finally:
        relay.release_tracking()


def test_c1_pipelined_exec_keeps_its_own_keys(relay, proxy_factory, upstream):
    """A pipelines two transactions; the relay holds the second one's write
    while C fills its key: the second EXEC's reply must purge it (the first
    EXEC's reply must not have used up its keys)."""
    st, a, cc = writer_and_reader(relay, proxy_factory, upstream, "i9047")
    relay.hold_tracking()
    try:
        hold = relay.hold_request(("SET", "i9047", "new"))
        steps = [("WATCH", "w9046"), ("MULTI",), ("SET", "i9046", "new"), ("EXEC",),
                 ("MULTI",), ("SET", "i9047", "new"), ("EXEC",)]
        a.send(b"".join(encode(*s) for s in steps))
        hold.wait()
        first = [f.raw for f in a.read_frames(5)]
        assert first[3] == b"*1\r\n+OK\r\n", first
        cached_twice(cc, st, "i9047")
        hold.release()
        rest = [f.raw for f in a.read_frames(2)]
        assert rest == [b"+QUEUED\r\n", b"*1\r\n+OK\r\n"], rest
        assert cc.cmd("GET", "i9047").value == b"new", "the second EXEC's reply did not purge its key"
    finally:
        relay.release_tracking()


def test_reset_forgets_the_abandoned_transaction(relay, proxy_factory, upstream):
    """RESET in MULTI on the client's own connection drops the transaction:
    its queued write never runs, so the next transaction's EXEC does not
    purge that key again (a cached value of it stays a hit)."""
    st, a, cc = writer_and_reader(relay, proxy_factory, upstream, "i9050")
    assert a.cmd("WATCH", "w9050").raw == b"+OK\r\n"
    assert a.cmd("MULTI").raw == b"+OK\r\n"
    assert a.cmd("SET", "i9050", "new").raw == b"+QUEUED\r\n"
    assert a.cmd("RESET").raw == b"+RESET\r\n"
    cached_twice(cc, st, "i9050")
    assert a.cmd("WATCH", "w9051").raw == b"+OK\r\n"
    assert a.cmd("MULTI").raw == b"+OK\r\n"
    assert a.cmd("SET", "x9051", "x").raw == b"+QUEUED\r\n"
    assert a.cmd("EXEC").raw == b"*1\r\n+OK\r\n"
    with st.delta() as dd:
        assert cc.cmd("GET", "i9050").value == b"old"
    assert dd["cache_hits"] == 1, "the abandoned transaction's key was purged by the next EXEC"


@pytest.mark.parametrize("then", ["one-write", "two-writes", "EXEC", "DISCARD"])
def test_c1_writes_after_a_refused_multi(then, relay, proxy_factory, upstream):
    """A user whose ACL denies MULTI sends, on its own connection (after a
    WATCH), MULTI and writes in one go: Redis refuses the MULTI and runs the
    writes, which the proxy (not waiting for MULTI's reply) took as queued.
    C fills the old value while the relay holds the first write back; once
    A has that write's reply, C must read the new value (with two-writes,
    the second write's reply is held too: the first reply is relayed before
    the last one of the run; with EXEC or DISCARD sent with them, its reply
    is held, and the transaction's keys had gone with it: review-watch-txn
    F2)."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS)
    d = upstream.client()
    settle(st, lambda: d.set("i9060", "old"))
    d.execute_command("ACL", "SETUSER", "w", "on", ">pw", "~*", "+@all", "-multi")
    a, cc = p.raw(), p.raw(protocol=3)
    for conn in (a, cc):  # one user: one cache partition (C8)
        assert conn.cmd("AUTH", "w", "pw").raw == b"+OK\r\n"
    make_tracked(cc, st)
    relay.hold_tracking()
    held_reply = None
    try:
        assert a.cmd("WATCH", "w9060").raw == b"+OK\r\n"
        hold = relay.hold_request(("SET", "i9060", "new"))
        rest = () if then == "one-write" else ("SET", "x9060", "1") if then == "two-writes" else (then,)
        if rest:
            held_reply = relay.hold_reply(rest)
        a.send(encode("MULTI") + encode("SET", "i9060", "new") + (encode(*rest) if rest else b""))
        hold.wait()
        cached_twice(cc, st, "i9060")
        hold.release()
        got = [f.raw for f in a.read_frames(2)]
        assert got[0].startswith(b"-NOPERM") and got[1] == b"+OK\r\n", got
        assert cc.cmd("GET", "i9060").value == b"new", "C read the old value after A's write was answered"
    finally:
        if held_reply is not None:
            held_reply.release()
        relay.release_tracking()


# ---------------------------------------------------------------------------
# C2 no hits under WATCH or inside MULTI


def test_c2_no_hits_under_watch(relay, proxy_factory, upstream):
    """From WATCH until EXEC/DISCARD/UNWATCH/RESET reads go to Redis: a value
    changed directly on Redis, whose invalidation the relay holds back (so
    the proxy's cached copy is stale), is read fresh under WATCH, and the
    cache_hits counter does not move while watching."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS)
    d = upstream.client()
    direct_setup(relay, st, lambda: (d.set("i9101", "old"), d.hset("d9101", "f", "old")),
                 "i9101", "d9101")
    c = p.raw(auth=True)
    warm(c, st, ("GET", "i9101"), ("HGET", "d9101", "f"))
    relay.hold_tracking()
    try:
        d.set("i9101", "new")
        d.hset("d9101", "f", "new")
        # Setup check: the proxy's copy is now stale (the invalidation is held).
        with st.delta() as dd:
            assert c.cmd("GET", "i9101").value == b"old"
        assert dd["cache_hits"] == 1

        enders = [("EXEC",), ("DISCARD",), ("UNWATCH",), ("RESET",)]
        for end in enders:
            with st.delta() as dd:
                assert c.cmd("WATCH", "i9101", "d9101").raw == b"+OK\r\n"
                for _ in range(3):
                    assert c.cmd("GET", "i9101").value == b"new", "GET under WATCH (%s)" % end
                    assert c.cmd("HGET", "d9101", "f").value == b"new", "HGET under WATCH"
                if end in (("EXEC",), ("DISCARD",)):
                    assert c.cmd("MULTI").raw == b"+OK\r\n"
                    assert c.cmd("GET", "i9101").raw == b"+QUEUED\r\n"
                    f = c.cmd(*end)
                    if end == ("EXEC",):
                        assert f.value == [b"new"], f
                else:
                    f = c.cmd(*end)
                    assert not isinstance(f.value, Err), f
            assert dd["cache_hits"] == 0, (
                "cache hits under WATCH (ended by %s): %r" % (end[0], dict(dd)))
    finally:
        relay.release_tracking()


def test_c2_no_hits_inside_multi(relay, proxy_factory, upstream):
    """Reads queued inside MULTI go to Redis (EXEC returns Redis's current
    values, not the stale cached ones) and count no hit."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS)
    d = upstream.client()
    direct_setup(relay, st, lambda: (d.set("i9111", "old"), d.hset("d9111", "f", "old")),
                 "i9111", "d9111")
    c = p.raw(auth=True)
    warm(c, st, ("GET", "i9111"), ("HGET", "d9111", "f"))
    relay.hold_tracking()
    try:
        confirm_cached(c, st, ("GET", "i9111"), ("HGET", "d9111", "f"))
        d.set("i9111", "new")
        d.hset("d9111", "f", "new")
        with st.delta() as dd:
            assert c.cmd("MULTI").raw == b"+OK\r\n"
            assert c.cmd("GET", "i9111").raw == b"+QUEUED\r\n"
            assert c.cmd("HGET", "d9111", "f").raw == b"+QUEUED\r\n"
            f = c.cmd("EXEC")
        assert f.value == [b"new", b"new"], "EXEC served cached values: %r" % (f,)
        assert dd["cache_hits"] == 0, dict(dd)
        # Pipelined transaction too.
        with st.delta() as dd:
            c.send(encode("MULTI") + encode("GET", "i9111") + encode("EXEC"))
            fs = c.read_frames(3)
        assert fs[2].value == [b"new"], fs
        assert dd["cache_hits"] == 0, dict(dd)
    finally:
        relay.release_tracking()


def test_c2_exec_results_never_cached(proxy_factory, upstream):
    """A value read by a transaction is not put in the cache: the first plain
    read after EXEC is a miss, the second a hit."""
    p, st = start_cached(proxy_factory)
    d = upstream.client()
    d.set("i9121", "v")
    d.hset("d9121", "f", "v")
    c = p.raw(auth=True)
    make_tracked(c, st)
    assert c.cmd("MULTI").raw == b"+OK\r\n"
    c.cmd("GET", "i9121")
    c.cmd("HGET", "d9121", "f")
    assert c.cmd("EXEC").value == [b"v", b"v"]
    # a transaction that writes then reads
    assert c.cmd("MULTI").raw == b"+OK\r\n"
    c.cmd("SET", "i9122", "w")
    c.cmd("GET", "i9122")
    assert c.cmd("EXEC").value == [b"OK", b"w"]
    for rd, want in ((("GET", "i9121"), b"v"), (("HGET", "d9121", "f"), b"v"),
                     (("GET", "i9122"), b"w")):
        with st.delta() as dd:
            assert c.cmd(*rd).value == want
        assert dd["cache_hits"] == 0 and dd["cache_misses"] == 1, (
            "first read of %r after EXEC: %r (EXEC results must not fill)" % (rd, dict(dd)))
        with st.delta() as dd:
            assert c.cmd(*rd).value == want
        assert dd["cache_hits"] == 1, (rd, dict(dd))


# ---------------------------------------------------------------------------
# C3 race-free fills


def _wait_processed(st, field, before, what):
    return wait_stat(st, field, before + 1, timeout=3.0, what=what)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["GET", "HGET"])
def test_c3_race_free_fills_invalidation_during_read(mode, kind, relay, proxy_factory, upstream):
    """A read's reply is held back (relay) while the key is changed directly
    on Redis and the invalidation reaches the proxy; the old reply, released
    afterwards, must not fill the cache (cache_fills_rejected moves), and the
    next read returns the new value."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS, mode=mode)
    d = upstream.client()
    key = "i9301" if kind == "GET" else "d9301"
    read = ("GET", key) if kind == "GET" else ("HGET", key, "f")

    def write(v):
        d.set(key, v) if kind == "GET" else d.hset(key, "f", v)

    settle(st, lambda: write("old"))
    a = p.raw(auth=True)
    make_tracked(a, st)
    h = relay.hold_reply(read)
    a.send_cmd(*read)
    h.wait()
    assert h.value == b"old"
    before = st.get()
    n = relay.invalidation_count()
    write("new")
    relay.wait_invalidation(key, since=n)
    _wait_processed(st, "invalidation_keys", before["invalidation_keys"], "invalidation")
    with st.delta() as dd:
        h.release()
        assert a.read_frame().value == b"old"   # read before the write: fine to return
    assert dd["cache_fills"] == 0 and dd["cache_fills_rejected"] >= 1, (
        "the reply read before the write was offered to the cache after the "
        "invalidation: %r" % dict(dd))
    for _ in range(2):
        got = a.cmd(*read).value
        assert got == b"new", "read after the invalidated fill returned %r" % got
    a.close()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["GET", "HGET"])
def test_c3_race_free_fills_local_write_during_read(mode, kind, relay, proxy_factory, upstream):
    """Client A's read reply is held while client B writes the key through the
    same proxy (the local-write path; Redis's invalidation is held back too).
    A's old reply must not fill."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS, mode=mode)
    d = upstream.client()
    key = "i9311" if kind == "GET" else "d9311"
    read = ("GET", key) if kind == "GET" else ("HGET", key, "f")
    write_new = ("SET", key, "new") if kind == "GET" else ("HSET", key, "f", "new")
    settle(st, lambda: d.set(key, "old") if kind == "GET" else d.hset(key, "f", "old"))
    a = p.raw(auth=True)
    b = p.raw(auth=True, protocol=3)         # another pool: not queued behind A
    make_tracked(a, st)
    relay.hold_tracking()
    try:
        h = relay.hold_reply(read)
        a.send_cmd(*read)
        h.wait()
        f = b.cmd(*write_new)
        assert not isinstance(f.value, Err), f
        with st.delta() as dd:
            h.release()
            assert a.read_frame().value == b"old"
        assert dd["cache_fills"] == 0, "old reply filled after a local write: %r" % dict(dd)
        for cl in (a, b):
            got = cl.cmd(*read).value
            assert got == b"new", "read after B's write returned %r" % got
    finally:
        relay.release_tracking()


@pytest.mark.parametrize("watch", [True, False], ids=["own-connection", "local"])
def test_c3_race_free_fills_local_transaction_during_read(watch, relay, proxy_factory, upstream):
    """Client A's read reply is held while client B's transaction writing
    the key is sent through the same proxy (with WATCH on B's own
    connection, or without, answered here and sent as one block). The relay
    keeps the transaction from running: A's old reply must not fill, as a
    local write of the key was sent between A's read and its reply (C3).
    Then the transaction runs, and reads get the new value."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS)
    d = upstream.client()
    settle(st, lambda: d.set("i9330", "old"))
    a = p.raw(auth=True)
    b = p.raw(auth=True, protocol=3)  # another pool: not queued behind A
    make_tracked(a, st)
    relay.hold_tracking()
    try:
        h = relay.hold_reply(("GET", "i9330"))
        a.send_cmd("GET", "i9330")
        h.wait()
        steps = ([("WATCH", "w9330")] if watch else []) + [("MULTI",), ("SET", "i9330", "new"), ("EXEC",)]
        # the transaction must not run: on its own connection, B's WATCH
        # (and what follows) is held; the local transaction's checks
        # (MULTI SET DISCARD) pass, and its block is held at EXEC
        hold = relay.hold_request(steps[0] if watch else ("EXEC",))
        b.send(b"".join(encode(*s) for s in steps))
        hold.wait()
        with st.delta() as dd:
            h.release()
            assert a.read_frame().value == b"old"
        assert dd["cache_fills"] == 0, "old reply filled after a local transaction was sent: %r" % dict(dd)
        hold.release()
        got = [f.raw for f in b.read_frames(len(steps))]
        assert got[-1] == b"*1\r\n+OK\r\n", got
        for cl in (a, b):
            assert cl.cmd("GET", "i9330").value == b"new"
    finally:
        relay.release_tracking()


@pytest.mark.parametrize("mode", MODES)
def test_c3_race_free_fills_aba(mode, relay, proxy_factory, upstream):
    """ABA: read A (reply v0 held), invalidation, read B (a new fill, reply v1
    held too), then A's v0 arrives: it must not fill although a fill of the
    same key is pending again. A third read must get v1 from Redis."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS, mode=mode)
    d = upstream.client()
    settle(st, lambda: d.set("i9321", "v0"))
    a = p.raw(auth=True)
    b = p.raw(auth=True, protocol=3)        # RESP3 pool: another upstream connection
    make_tracked(a, st, "i9398")
    make_tracked(b, st, "i9397")
    ha = relay.hold_reply(("GET", "i9321"))
    a.send_cmd("GET", "i9321")
    ha.wait()
    assert ha.value == b"v0"
    before = st.get()
    n = relay.invalidation_count()
    d.set("i9321", "v1")
    relay.wait_invalidation("i9321", since=n)
    _wait_processed(st, "invalidation_keys", before["invalidation_keys"], "invalidation")
    hb = relay.hold_reply(("GET", "i9321"))
    b.send_cmd("GET", "i9321")
    hb.wait()
    assert hb.value == b"v1"
    try:
        with st.delta() as dd:
            ha.release()
            assert a.read_frame().value == b"v0"
        assert dd["cache_fills"] == 0 and dd["cache_fills_rejected"] >= 1, dict(dd)
        with p.raw(auth=True) as c:
            got = c.cmd("GET", "i9321").value
        assert got == b"v1", "ABA: the stale reply v0 was cached (third read got %r)" % got
    finally:
        hb.release()
    assert b.read_frame().value == b"v1"
    for _ in range(2):
        assert a.cmd("GET", "i9321").value == b"v1"


# ---------------------------------------------------------------------------
# C4 loss means flush


def _pubsub_ids(server):
    with server.raw(auth=True) as c:
        lst = c.call("CLIENT", "LIST", "TYPE", "pubsub")
    return [line for line in bytes(lst).decode().splitlines() if line]


@pytest.mark.parametrize("mode", MODES)
def test_c4_loss_means_flush_client_kill(mode, proxy_factory, upstream):
    """CLIENT KILL of the invalidation connection on Redis: the cache is
    emptied before another hit (a value changed right after the kill, for
    which no invalidation can come any more, is read fresh); tracking comes
    back and hits resume."""
    p, st = start_cached(proxy_factory, mode=mode)
    d = upstream.client()
    d.set("i9401", "old")
    d.hset("d9401", "f", "old")
    c = p.raw(auth=True)
    warm(c, st, ("GET", "i9401"), ("HGET", "d9401", "f"))
    before = st.get()
    assert before["cache_entries"] >= 2
    subs = _pubsub_ids(upstream)
    assert len(subs) == 1 and " sub=1 " in subs[0], subs
    assert d.execute_command("CLIENT", "KILL", "TYPE", "pubsub") == 1
    d.set("i9401", "new")
    d.hset("d9401", "f", "new")
    assert c.cmd("GET", "i9401").value == b"new", "stale value served after tracking loss"
    assert c.cmd("HGET", "d9401", "f").value == b"new", "stale value served after tracking loss"
    after = st.get()
    assert after["cache_flushes_tracking_lost"] > before["cache_flushes_tracking_lost"], after
    assert after["tracking_losses"] > before["tracking_losses"], after
    after = wait_tracking_active(p, stats=st)
    assert after["tracking_connects"] > before["tracking_connects"], after
    warm(c, st, ("GET", "i9401"))
    assert c.cmd("GET", "i9401").value == b"new"


@pytest.mark.parametrize("mode", MODES)
def test_c4_loss_means_flush_keepalive_deadline(mode, relay, proxy_factory, upstream):
    """The invalidation connection stays open but goes silent (the relay
    holds everything Redis sends on it, PING answers included): after
    keepalive + timeout the cache is emptied, a value changed meanwhile is
    read fresh, no hit is served until tracking is confirmed again, then
    hits resume."""
    p, st = start_cached(proxy_factory, up=relay,
                         args=("--tracking-keepalive-ms", "100", "--tracking-timeout-ms", "300"),
                         mode=mode)
    d = upstream.client()
    direct_setup(relay, st, lambda: d.set("i9411", "old"), "i9411")
    c = p.raw(auth=True)
    warm(c, st, ("GET", "i9411"))
    before = st.get()
    relay.hold_tracking()
    try:
        t0 = time.monotonic()
        d.set("i9411", "new")
        wait_stat(st, "cache_flushes_tracking_lost", before["cache_flushes_tracking_lost"] + 1,
                  timeout=3.0, what="flush on a missed keep-alive deadline")
        elapsed = time.monotonic() - t0
        assert elapsed < 2.0, "flush took %.2fs after the link went silent" % elapsed
        assert st["cache_entries"] == 0
        with st.delta() as dd:
            for _ in range(3):
                assert c.cmd("GET", "i9411").value == b"new"
        assert dd["cache_hits"] == 0, "hits before tracking was confirmed again: %r" % dict(dd)
        assert st["tracking_state"] != "active"
    finally:
        relay.release_tracking()
    wait_tracking_active(p, stats=st)
    warm(c, st, ("GET", "i9411"))


@pytest.mark.parametrize("mode", MODES)
def test_c4_no_hits_until_tracking_confirmed(mode, relay, proxy_factory, upstream):
    """The invalidation connection is cut and its re-setup is held back
    (CLIENT TRACKING / SUBSCRIBE answers withheld): the cache is empty, reads
    are served by Redis with no hit and never stale, until tracking is
    confirmed; then hits resume."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS, mode=mode)
    d = upstream.client()
    direct_setup(relay, st, lambda: (d.set("i9421", "old"), d.hset("d9421", "f", "old")),
                 "i9421", "d9421")
    c = p.raw(auth=True)
    warm(c, st, ("GET", "i9421"), ("HGET", "d9421", "f"))
    before = st.get()
    relay.hold_tracking()
    try:
        d.set("i9421", "new")            # its invalidation is held, then lost
        assert relay.cut_tracking() == 1
        wait_stat(st, "tracking_losses", before["tracking_losses"] + 1, what="loss noticed")
        wait_until(lambda: len(relay.tracking_conns()) >= 1, timeout=5,
                   what="the proxy to set tracking up again")
        field = b"old"
        for i in range(10):
            with st.delta() as dd:
                assert c.cmd("GET", "i9421").value == b"new"
                assert c.cmd("HGET", "d9421", "f").value == field
            assert dd["cache_hits"] == 0, "hit #%d while tracking unconfirmed: %r" % (i, dict(dd))
            field = b"new%d" % i
            d.hset("d9421", "f", field)     # invalidations are held: never seen
            time.sleep(0.02)
        assert st["tracking_state"] != "active"
        assert st["cache_flushes_tracking_lost"] > before["cache_flushes_tracking_lost"]
    finally:
        relay.release_tracking()
    wait_tracking_active(p, stats=st)
    warm(c, st, ("GET", "i9421"))


def _tracked_data_connection_commands(server):
    """Redis's view of the proxy's data connections that have tracking on:
    id -> the last command each ran."""
    with server.raw(auth=True) as c:
        lst = bytes(c.call("CLIENT", "LIST", "TYPE", "normal")).decode()
    out = {}
    for line in lst.splitlines():
        f = dict(kv.split("=", 1) for kv in line.split(" ") if "=" in kv)
        if "t" in f.get("flags", "") and f.get("sub") == "0":
            out[f["id"]] = f.get("cmd")
    return out


def _tracked_data_connections(server):
    """Redis's ids of the proxy's data connections that have tracking on."""
    return list(_tracked_data_connection_commands(server))


@pytest.mark.parametrize("mode", MODES)
def test_c4_loss_of_tracked_data_connection(mode, proxy_factory, upstream):
    """In the default and optin modes Redis tracks reads per data connection:
    when such a connection is lost (CLIENT KILL), Redis forgets what it read
    and will never invalidate those keys, so the cache must be emptied
    (cache_flushes_tracking_lost moves) and a value changed right after is
    read fresh at once. In bcast mode the data connections are not tracked:
    the change still shows (within the staleness bound)."""
    p, st = start_cached(proxy_factory, mode=mode)
    d = upstream.client()
    d.set("i9431", "old")
    d.hset("d9431", "f", "old")
    c = p.raw(auth=True)
    warm(c, st, ("GET", "i9431"), ("HGET", "d9431", "f"))
    before = st.get()
    ids = _tracked_data_connections(upstream)
    if mode == "bcast":
        assert ids == [], "bcast mode must not track on data connections: %r" % ids
        with upstream.raw(auth=True) as k:
            lst = bytes(k.call("CLIENT", "LIST", "TYPE", "normal")).decode()
        ids = [dict(kv.split("=", 1) for kv in ln.split(" ") if "=" in kv)["id"]
               for ln in lst.splitlines() if "cmd=client|list" not in ln]
    assert ids, "no data connection found"
    for i in ids:
        d.execute_command("CLIENT", "KILL", "ID", i)
    d.set("i9431", "new")
    d.hset("d9431", "f", "new")
    if mode == "bcast":
        wait_until(lambda: c.cmd("GET", "i9431").value == b"new"
                   and c.cmd("HGET", "d9431", "f").value == b"new",
                   timeout=2.0, interval=0.005, what="the change to show")
        return
    assert c.cmd("GET", "i9431").value == b"new", "stale after the tracked connection was lost"
    assert c.cmd("HGET", "d9431", "f").value == b"new", "stale after the tracked connection was lost"
    after = st.get()
    assert after["cache_flushes_tracking_lost"] > before["cache_flushes_tracking_lost"], after
    warm(c, st, ("GET", "i9431"))


@pytest.mark.parametrize("mode", ["default", "optin"])
def test_c4_a_tracked_connections_end_not_handled_yet_holds_hits(mode, proxy_factory, upstream):
    """The case above, with the end of the killed connection and a read
    sent after the write's reply handled in one turn of sidecache's loop,
    the read first (sidecache stopped across the kill and the write): the
    read waits for the end, which empties the cache, as for an invalidation
    connection with bytes not handled yet. Before, it was answered the old
    value (review-loss 2)."""
    import signal
    p, st = start_cached(proxy_factory, mode=mode, args=("--tracking-keepalive-ms", "60000"))
    d = upstream.client()
    d.set("i9432", "old")
    d.set("i9433", "x")
    c = p.raw(auth=True)
    warm(c, st, ("GET", "i9432"), ("GET", "i9433"))
    ids = _tracked_data_connections(upstream)
    assert ids, "no tracked data connection found"
    p.proc.send_signal(signal.SIGSTOP)
    try:
        c.send_cmd("GET", "i9433")     # the client's socket is ready first
        time.sleep(0.05)
        for i in ids:
            d.execute_command("CLIENT", "KILL", "ID", i)
        d.set("i9432", "new")          # answered, and no invalidation: nobody tracks it now
        c.send_cmd("GET", "i9432")
        time.sleep(0.05)
    finally:
        p.proc.send_signal(signal.SIGCONT)
    assert c.read_frame(timeout=5).value == b"x"
    assert c.read_frame(timeout=5).value == b"new", "a hit before the tracked connection's end was seen"
    assert st.get()["cache_flushes_tracking_lost"] >= 1


@pytest.mark.parametrize("mode", ["default", "optin"])
def test_c4_an_mget_merge_waits_for_a_tracked_connections_end_not_handled_yet(mode, relay, proxy_factory,
                                                                                upstream):
    """The case above for an MGET partly answered from the cache: i9701
    cached from a read on connection A; the MGET's other key, i9702, read
    from Redis on connection B. Redis closes A (CLIENT KILL) and forgets
    that A read i9701; a transaction then changes both keys, and no
    invalidation is sent for either; B's part runs after it (new). A's end
    and B's reply reach sidecache in one turn of its loop, B's first (a
    reply of another client's was waiting on B). The merge must not take
    the cached old i9701 beside the new i9702, a pair Redis never held: it
    is sent again whole, as when the invalidation connection has bytes not
    handled yet. Before, it answered [old, new] (review-modes M2)."""
    import signal
    p, st = start_cached(proxy_factory, up=relay, mode=mode,
                         args=RELAY_ARGS + ("--upstream-connections", "1", "--acl-check-ms", "0"))
    d = upstream.client()
    d.set("i9701", "old")
    d.set("i9702", "old")
    d.set("i9709", "x")
    x = p.raw(auth=True)                 # RESP2 pool: connection A
    y = p.raw(auth=True, protocol=3)     # RESP3 pool: connection B
    w = p.raw(auth=True, protocol=3)     # RESP3 pool too: connection B
    warm(x, st, ("GET", "i9701"))        # cached, read on A only
    warm(y, st, ("GET", "i9708"))        # B tracked (its reads may fill)
    y.cmd("MGET", "i9707")               # the client's first MGET goes whole
    w.cmd("HGET", "d9709", "f")          # B's last command: HGET, to tell A and B apart
    conns = _tracked_data_connection_commands(upstream)
    a = [i for i, cmd in conns.items() if cmd == "get"]
    b = [i for i, cmd in conns.items() if cmd == "hget"]
    assert len(a) == 1 and len(b) == 1 and a != b, conns
    held = relay.hold_reply(cmd_matcher("GET", "i9709"))
    rest = relay.hold_request(cmd_matcher("MGET", "i9702"))
    try:
        w.send_cmd("GET", "i9709")           # its reply waits in the relay
        held.wait()
        y.send_cmd("MGET", "i9701", "i9702")  # i9701 from the cache; MGET i9702 held before Redis
        rest.wait()
        p.proc.send_signal(signal.SIGSTOP)
        try:
            held.release()                   # B has bytes to read in the loop's next turn
            time.sleep(0.05)
            d.execute_command("CLIENT", "KILL", "ID", a[0])   # Redis forgets what A read
            time.sleep(0.05)                 # (the relay passes A's end on)
            with upstream.raw(auth=True) as t:
                t.raw_cmds([("MULTI",), ("SET", "i9701", "new"), ("SET", "i9702", "new"), ("EXEC",)])
            rest.release()                   # Redis reads i9702 now: new
            time.sleep(0.1)
        finally:
            p.proc.send_signal(signal.SIGCONT)
        assert w.read_frame(timeout=5).value == b"x"
        got = y.read_frame(timeout=5).value
    finally:
        held.release()
        rest.release()
    assert got == [b"new", b"new"], "MGET gave %r: Redis held (old, old), then (new, new)" % (got,)


@pytest.mark.parametrize("mode", ["default", "optin"])
def test_c4_a_tracked_connections_end_that_never_arrives_is_found_by_a_ping(mode, proxy_factory, upstream):
    """Redis closes a tracked data connection and the end never reaches
    sidecache (a NAT entry expired on the connection the hits left idle):
    Redis forgot what was read there, and a direct write of it sends no
    invalidation. sidecache PINGs an idle tracked connection once a second;
    one whose packets go nowhere meets upstream-timeout (here 2 s), and its
    loss empties the cache. Before, the old value was served until TCP's
    keep-alive ended the connection, minutes later (review-loss 1)."""
    front = SeveringForwarder(upstream.port)
    try:
        p, st = start_cached(proxy_factory, mode=mode, upstream_url="redis://%s:%d" % (HOST, front.port),
                             args=("--tracking-upstream", "redis://%s:%d" % (HOST, upstream.port),
                                   "--upstream-timeout", "2", "--upstream-connections", "1",
                                   # (its ACL LIST, each second on a shared connection, would be such a PING)
                                   "--acl-check-ms", "0"))
        d = upstream.client()
        d.set("i9434", "old")
        c = p.raw(auth=True)
        warm(c, st, ("GET", "i9434"))
        assert _tracked_data_connections(upstream), "no tracked data connection"
        front.sever()
        wait_until(lambda: _tracked_data_connections(upstream) == [], what="Redis to free the connection")
        d.set("i9434", "new")
        wait_until(lambda: c.cmd("GET", "i9434").value == b"new", timeout=8, interval=0.1,
                   what="the loss of the severed connection to empty the cache")
    finally:
        front.stop_accepting()


# ---------------------------------------------------------------------------
# C5 null invalidation


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("flush", [("FLUSHALL",), ("FLUSHALL", "ASYNC"), ("FLUSHDB",),
                                   ("FLUSHDB", "SYNC")],
                         ids=["FLUSHALL", "FLUSHALL-ASYNC", "FLUSHDB", "FLUSHDB-SYNC"])
def test_c5_null_invalidation_direct_flush(mode, flush, proxy_factory, upstream):
    """FLUSHALL/FLUSHDB sent directly to Redis arrive as a null invalidation:
    the whole cache is emptied (the counter moves, no entry is left, the
    next read is a miss that returns nil)."""
    p, st = start_cached(proxy_factory, mode=mode)
    d = upstream.client()
    d.set("i9501", "v")
    d.hset("d9501", "f", "v")
    c = p.raw(auth=True)
    warm(c, st, ("GET", "i9501"), ("HGET", "d9501", "f"))
    before = st.get()
    d.execute_command(*flush)
    after = wait_stat(st, "cache_flushes_null_invalidation",
                      before["cache_flushes_null_invalidation"] + 1, timeout=2.0,
                      what="null invalidation after %s" % " ".join(flush))
    assert after["cache_entries"] == 0, after
    with st.delta() as dd:
        assert c.cmd("GET", "i9501").value is None
        assert c.cmd("HGET", "d9501", "f").value is None
    assert dd["cache_hits"] == 0, dict(dd)


@pytest.mark.parametrize("flush", [("FLUSHALL",), ("FLUSHALL", "ASYNC"), ("FLUSHDB",),
                                   ("FLUSHDB", "SYNC")],
                         ids=["FLUSHALL", "FLUSHALL-ASYNC", "FLUSHDB", "FLUSHDB-SYNC"])
def test_c5_flush_through_proxy(flush, relay, proxy_factory, upstream):
    """FLUSHALL/FLUSHDB through the proxy empty the cache before their reply,
    without waiting for Redis's null invalidation (held back by the relay)."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS)
    d = upstream.client()
    direct_setup(relay, st, lambda: (d.set("i9511", "v"), d.hset("d9511", "f", "v")),
                 "i9511", "d9511")
    c = p.raw(auth=True)
    warm(c, st, ("GET", "i9511"), ("HGET", "d9511", "f"))
    relay.hold_tracking()
    try:
        confirm_cached(c, st, ("GET", "i9511"), ("HGET", "d9511", "f"))
        other = p.raw(auth=True)
        assert not isinstance(other.cmd(*flush).value, Err)
        assert c.cmd("GET", "i9511").value is None, "cached value served after %s" % (flush,)
        assert c.cmd("HGET", "d9511", "f").value is None
        assert other.cmd("GET", "i9511").value is None
    finally:
        relay.release_tracking()


def test_c5_swapdb_through_proxy(relay, proxy_factory, upstream):
    """SWAPDB through the proxy empties the cache: after SWAPDB 0 1, a key
    cached in db 0 reads db 1's old value (Redis sends no invalidation for
    SWAPDB, and the relay holds back anything it might send)."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS)
    d0 = upstream.client(db=0)
    d1 = upstream.client(db=1)
    direct_setup(relay, st, lambda: (d0.set("i9521", "zero"), d1.set("i9521", "one")),
                 "i9521")
    c0 = p.raw(auth=True)
    c1 = p.raw(auth=True)
    assert c1.cmd("SELECT", "1").raw == b"+OK\r\n"
    assert warm(c0, st, ("GET", "i9521")) == [b"zero"]
    assert warm(c1, st, ("GET", "i9521")) == [b"one"]
    relay.hold_tracking()
    try:
        assert confirm_cached(c0, st, ("GET", "i9521")) == [b"zero"]
        assert confirm_cached(c1, st, ("GET", "i9521")) == [b"one"]
        assert c0.cmd("SWAPDB", "0", "1").raw == b"+OK\r\n"
        assert c0.cmd("GET", "i9521").value == b"one", "db 0 served its pre-SWAPDB value"
        assert c1.cmd("GET", "i9521").value == b"zero", "db 1 served its pre-SWAPDB value"
    finally:
        relay.release_tracking()


@pytest.mark.parametrize("mode", MODES)
def test_c5_same_key_in_two_databases(mode, proxy_factory, upstream):
    """The same key in db 0 and db 1 is cached separately (each db reads its
    own value, both from the cache), and an invalidation of the key, which
    names no db, purges both."""
    p, st = start_cached(proxy_factory, mode=mode)
    d0 = upstream.client(db=0)
    d1 = upstream.client(db=1)
    d0.set("i9531", "zero")
    d1.set("i9531", "one")
    d0.hset("d9531", "f", "zero")
    d1.hset("d9531", "f", "one")
    c0 = p.raw(auth=True)
    c1 = p.raw(auth=True)
    assert c1.cmd("SELECT", "1").raw == b"+OK\r\n"
    assert warm(c0, st, ("GET", "i9531"), ("HGET", "d9531", "f")) == [b"zero", b"zero"]
    assert warm(c1, st, ("GET", "i9531"), ("HGET", "d9531", "f")) == [b"one", b"one"]
    before = st.get()
    d1.set("i9531", "one2")
    d1.hset("d9531", "f", "one2")
    wait_stat(st, "invalidation_keys", before["invalidation_keys"] + 2, what="invalidations")
    with st.delta() as dd:
        assert c1.cmd("GET", "i9531").value == b"one2"
        assert c1.cmd("HGET", "d9531", "f").value == b"one2"
        assert c0.cmd("GET", "i9531").value == b"zero"
        assert c0.cmd("HGET", "d9531", "f").value == b"zero"
    assert dd["cache_hits"] == 0 and dd["cache_misses"] == 4, (
        "an invalidation must purge the key in every db: %r" % dict(dd))


# ---------------------------------------------------------------------------
# C6 failover


def test_c6_failover_replicaof(redis_factory, proxy_factory, upstream):
    """The upstream becomes a replica of another server (REPLICAOF, full
    resync): the proxy stops serving the old master's values (bounded), and
    a -READONLY reply to a write through the proxy empties the cache
    (cache_flushes_failover moves, no entry left, the next read a miss)."""
    newmaster = redis_factory(name="newmaster")
    newmaster.client().set("i9601", "from-new-master")
    newmaster.client().hset("d9601", "f", "from-new-master")
    p, st = start_cached(proxy_factory)
    d = upstream.client()
    d.set("i9601", "from-old")
    d.hset("d9601", "f", "from-old")
    c = p.raw(auth=True)
    warm(c, st, ("GET", "i9601"), ("HGET", "d9601", "f"))
    d.execute_command("REPLICAOF", newmaster.host, str(newmaster.port))

    def synced():
        info = d.info("replication")
        return info.get("master_link_status") == "up" and d.get("i9601") == b"from-new-master"

    wait_until(synced, timeout=15, what="the upstream to sync from the new master")
    t0 = time.monotonic()
    wait_until(lambda: c.cmd("GET", "i9601").value == b"from-new-master"
               and c.cmd("HGET", "d9601", "f").value == b"from-new-master",
               timeout=2.0, interval=0.01, what="the proxy to drop the old master's values")
    print("old master's values gone from the proxy %.3fs after the resync" % (time.monotonic() - t0))
    if st["tracking_state"] != "active":
        wait_tracking_active(p, stats=st)
    warm(c, st, ("GET", "i9601"))
    before = st.get()
    f = c.cmd("SET", "i9602", "x")
    assert isinstance(f.value, Err) and f.value.code == "READONLY", f
    after = st.get()
    assert after["cache_flushes_failover"] > before["cache_flushes_failover"], after
    assert after["cache_entries"] == 0, after
    with st.delta() as dd:
        assert c.cmd("GET", "i9601").value == b"from-new-master"
    assert dd["cache_hits"] == 0, dict(dd)


@pytest.mark.parametrize("reply", [
    b"-LOADING Redis is loading the dataset in memory\r\n",
    b"-MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.\r\n",
    b"-READONLY You can't write against a read only replica.\r\n",
], ids=["LOADING", "MASTERDOWN", "READONLY"])
@pytest.mark.parametrize("on", ["read", "write"])
def test_c6_failover_error_reply_flushes(reply, on, relay, proxy_factory, upstream):
    """A LOADING / MASTERDOWN / READONLY reply (injected by the relay in place
    of Redis's real reply to a read or a write) means Redis is not the master
    we cached from: the cache is emptied, the client gets the error as is."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS)
    d = upstream.client()
    d.set("i9611", "v")
    d.set("i9612", "w")
    c = p.raw(auth=True)
    warm(c, st, ("GET", "i9611"))
    cmd = ("GET", "i9612") if on == "read" else ("SET", "i9613", "x")
    rw = relay.rewrite_reply(cmd, reply)
    before = st.get()
    f = c.cmd(*cmd)
    assert rw.done.is_set()
    assert f.raw == reply, "the client must get the error as Redis sent it: %r" % f
    after = st.get()
    assert after["cache_flushes_failover"] > before["cache_flushes_failover"], after
    assert after["cache_entries"] == 0, after
    with st.delta() as dd:
        assert c.cmd("GET", "i9611").value == b"v"
        assert c.cmd("GET", "i9612").value == b"w"
    assert dd["cache_hits"] == 0, dict(dd)


# ---------------------------------------------------------------------------
# C7 errors are never cached


def test_c7_errors_never_cached_wrongtype(proxy_factory, upstream):
    """GET of a hash key and HGET of a string key: every attempt gets Redis's
    WRONGTYPE error from Redis (misses, no fill, no hit, no entry); once the
    type is fixed on Redis the value is read at once."""
    p, st = start_cached(proxy_factory)
    d = upstream.client()
    d.hset("i9701", "f", "v")
    d.set("d9701", "str")
    c = p.raw(auth=True)
    for rd in (("GET", "i9701"), ("HGET", "d9701", "f")):
        want = direct_read(upstream, rd)
        assert want[0] == "ERR" and want[1].startswith(b"WRONGTYPE"), want
        with st.delta() as dd:
            for _ in range(3):
                assert value_of(c.cmd(*rd)) == want
        assert dd["cache_hits"] == 0 and dd["cache_fills"] == 0, (rd, dict(dd))
        assert dd["cache_entries"] == 0, (rd, dict(dd))
    d.delete("i9701", "d9701")
    d.set("i9701", "now-a-string")
    d.hset("d9701", "f", "now-a-field")
    assert c.cmd("GET", "i9701").value == b"now-a-string"
    assert c.cmd("HGET", "d9701", "f").value == b"now-a-field"


@pytest.mark.parametrize("reply", [
    b"-ERR injected failure\r\n",
    b"-NOPERM injected\r\n",
    b":42\r\n",
    b"+real\r\n",
    b"*1\r\n$4\r\nreal\r\n",
    b"*-1\r\n",
], ids=["error", "noperm", "integer", "simple", "array", "nullarray"])
@pytest.mark.parametrize("kind", ["GET", "HGET"])
def test_c7_errors_never_cached_unexpected_reply(reply, kind, relay, proxy_factory, upstream):
    """Only a bulk string or a nil reply to the cacheable read is cached: an
    error or any other reply type (injected by the relay in place of the
    real reply) passes to the client once and is never served again."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS)
    d = upstream.client()
    key = "i9711" if kind == "GET" else "d9711"
    rd = ("GET", key) if kind == "GET" else ("HGET", key, "f")
    settle(st, lambda: d.set(key, "real") if kind == "GET" else d.hset(key, "f", "real"))
    c = p.raw(auth=True)
    relay.rewrite_reply(rd, reply)
    f = c.cmd(*rd)
    assert f.raw == reply
    for _ in range(3):
        f = c.cmd(*rd)
        assert f.raw == b"$4\r\nreal\r\n", "the injected reply %r was served again: %r" % (reply, f)


# ---------------------------------------------------------------------------
# C8 ACL


def _acl_users(upstream):
    d = upstream.client()
    d.execute_command("ACL", "SETUSER", "alice", "on", ">pa", "~i1*", "~d1*", "+@all")
    d.execute_command("ACL", "SETUSER", "bob", "on", ">pb", "~i2*", "~d2*", "+@all")
    d.set("i1801", "alice-secret")
    d.hset("d1801", "f", "alice-secret")
    d.set("i2801", "bob-data")
    return d


def test_c8_acl_partition(proxy_factory, upstream):
    """Two ACL users with disjoint key permissions: after one user filled the
    cache with a key, the other gets NOPERM from Redis for it, every time,
    never the cached value; also after AUTH switches the user of a
    connection, and with HELLO AUTH."""
    _acl_users(upstream)
    p, st = start_cached(proxy_factory)
    alice = p.raw()
    assert alice.cmd("AUTH", "alice", "pa").raw == b"+OK\r\n"
    warm(alice, st, ("GET", "i1801"), ("HGET", "d1801", "f"))
    dflt = p.raw()
    warm(dflt, st, ("GET", "i1801"))
    bob = p.raw()
    assert bob.cmd("AUTH", "bob", "pb").raw == b"+OK\r\n"
    with upstream.raw() as direct_bob:
        direct_bob.cmd("AUTH", "bob", "pb")
        want = value_of(direct_bob.cmd("GET", "i1801"))
        want_h = value_of(direct_bob.cmd("HGET", "d1801", "f"))
    assert want[0] == "ERR" and want[1].startswith(b"NOPERM"), want
    with st.delta() as dd:
        for _ in range(3):
            assert value_of(bob.cmd("GET", "i1801")) == want
            assert value_of(bob.cmd("HGET", "d1801", "f")) == want_h
    assert dd["cache_hits"] == 0, dict(dd)
    # the other way round
    warm(bob, st, ("GET", "i2801"))
    with st.delta() as dd:
        for _ in range(2):
            f = alice.cmd("GET", "i2801")
            assert isinstance(f.value, Err) and f.value.code == "NOPERM", f
    assert dd["cache_hits"] == 0, dict(dd)
    # the same connection changes user
    sw = p.raw()
    assert sw.cmd("AUTH", "alice", "pa").raw == b"+OK\r\n"
    assert sw.cmd("GET", "i1801").value == b"alice-secret"
    assert sw.cmd("AUTH", "bob", "pb").raw == b"+OK\r\n"
    f = sw.cmd("GET", "i1801")
    assert isinstance(f.value, Err) and f.value.code == "NOPERM", (
        "after AUTH as bob the connection got %r" % f)
    # HELLO 3 AUTH
    h3 = p.raw()
    assert not isinstance(h3.call("HELLO", "3", "AUTH", "bob", "pb"), Err)
    f = h3.cmd("GET", "i1801")
    assert isinstance(f.value, Err) and b"NOPERM" in bytes(f.value), f


def test_c8_acl_revoked_through_proxy(proxy_factory, upstream):
    """ACL SETUSER sent through the proxy takes a user's key permission away:
    that user's cached reads must not be served any more (Redis refuses)."""
    _acl_users(upstream)
    p, st = start_cached(proxy_factory)
    alice = p.raw()
    assert alice.cmd("AUTH", "alice", "pa").raw == b"+OK\r\n"
    warm(alice, st, ("GET", "i1801"))
    admin = p.client()
    admin.execute_command("ACL", "SETUSER", "alice", "resetkeys", "~i3*")
    f = alice.cmd("GET", "i1801")
    assert isinstance(f.value, Err) and f.value.code == "NOPERM", (
        "after revocation alice still got %r (Redis refuses her the key)" % f)


def test_c8_acl_revoked_directly_on_redis(proxy_factory, upstream):
    """Same as above, but the ACL change is made directly on Redis, which
    sends no invalidation for it: sidecache asks ACL LIST every
    acl-check-ms (default 1 s) and empties the cache when the list changed,
    so the revocation holds within about that long, and for good."""
    d = _acl_users(upstream)
    p, st = start_cached(proxy_factory)
    alice = p.raw()
    assert alice.cmd("AUTH", "alice", "pa").raw == b"+OK\r\n"
    warm(alice, st, ("GET", "i1801"))
    base = st["cache_flushes_acl_changed"]
    d.execute_command("ACL", "SETUSER", "alice", "resetkeys", "~i3*")
    t0 = time.monotonic()
    wait_until(lambda: isinstance(alice.cmd("GET", "i1801").value, Err), timeout=5, interval=0.02,
               what="alice's GET of a key she may no longer read to be refused")
    took = time.monotonic() - t0
    print("revocation honoured after %.3f s" % took)
    for _ in range(3):
        f = alice.cmd("GET", "i1801")
        assert isinstance(f.value, Err) and f.value.code == "NOPERM", f
    assert st["cache_flushes_acl_changed"] == base + 1
    assert took < 2.5, "the revocation took %.2f s (acl-check-ms 1000)" % took


def _acl_list_calls(d):
    """ACL LIST calls Redis counted (Redis 6 counts ACL's subcommands
    together)."""
    stats = d.info("commandstats")
    return stats.get("cmdstat_acl|list", stats.get("cmdstat_acl", {})).get("calls", 0)


def test_c8_unchanged_acl_list_keeps_the_cache(proxy_factory, upstream):
    """ACL LIST asked every 50 ms and the same each time: nothing is
    flushed, hits go on; the next change flushes once."""
    d = _acl_users(upstream)
    p, st = start_cached(proxy_factory, args=("--acl-check-ms", "50"))
    alice = p.raw()
    assert alice.cmd("AUTH", "alice", "pa").raw == b"+OK\r\n"
    warm(alice, st, ("GET", "i1801"))
    base, asked = st["cache_flushes"], _acl_list_calls(upstream.client())
    answered = st["acl_checks"]
    time.sleep(0.5)
    with st.delta() as dd:
        assert alice.cmd("GET", "i1801").value == b"alice-secret"
    assert dd["cache_hits"] == 1, dict(dd)
    assert st["cache_flushes"] == base
    calls = _acl_list_calls(upstream.client())
    assert calls >= asked + 5, (asked, calls)
    assert st["acl_checks"] >= answered + 5  # INFO counts the lists read
    d.execute_command("ACL", "SETUSER", "bob", "resetkeys", "~i9*")
    wait_until(lambda: st["cache_flushes_acl_changed"] == 1, timeout=3, what="the change to be seen")
    time.sleep(0.3)
    assert st["cache_flushes_acl_changed"] == 1


def test_c8_password_given_to_the_default_user_on_redis(proxy_factory, upstream):
    """requirepass set on Redis directly: Redis keeps the connections that
    were logged in as the default user, so those that sidecache's clients
    without credentials share would go on answering them (from the cache
    too). Once ACL LIST shows the change, they are replaced: a client that
    has not authenticated gets Redis's NOAUTH, no hit; one that AUTHs reads
    again; and without the password again, clients get in again."""
    d = upstream.client()
    d.set("i5", "v")
    p, st = start_cached(proxy_factory)
    c = p.raw()
    warm(c, st, ("GET", "i5"))
    d.config_set("requirepass", "pw")
    t0 = time.monotonic()

    def refused():
        with p.raw() as n:
            return n.cmd("GET", "i5").raw.startswith(b"-NOAUTH")
    wait_until(refused, timeout=5, interval=0.05, what="a client without credentials to get NOAUTH")
    print("NOAUTH after %.3f s" % (time.monotonic() - t0))
    with p.raw() as a:   # (INFO goes to Redis: it needs the password now)
        assert a.cmd("AUTH", "pw").raw == b"+OK\r\n"
        hits = int(parse_sidecache_section(a.call("INFO", "sidecache"))["cache_hits"])
        with p.raw() as n:
            assert n.cmd("GET", "i5").raw == b"-NOAUTH Authentication required.\r\n"
        assert int(parse_sidecache_section(a.call("INFO", "sidecache"))["cache_hits"]) == hits
        assert a.cmd("GET", "i5").raw == b"$1\r\nv\r\n"
    with upstream.raw() as r:
        assert r.cmd("AUTH", "pw").raw == b"+OK\r\n"
        assert r.cmd("CONFIG", "SET", "requirepass", "").raw == b"+OK\r\n"

    def admitted():
        with p.raw() as n:
            return n.cmd("GET", "i5").raw == b"$1\r\nv\r\n"
    wait_until(admitted, timeout=5, interval=0.05, what="a client without credentials to get in again")


def test_c8_acl_checks_stop_when_the_upstream_user_may_not_list(proxy_factory, upstream, tmp_path):
    """The upstream user may not run ACL LIST: a notice says that changes
    made on Redis are not seen, no more checks are sent, and the cache works
    as before."""
    d = upstream.client()
    d.execute_command("ACL", "SETUSER", "noadmin", "on", ">pw", "~*", "&*", "+@all", "-acl")
    d.set("i5", "v")
    p, st = start_cached(proxy_factory, args=("--acl-check-ms", "50"),
                         upstream_url="redis://noadmin:pw@127.0.0.1:%d" % upstream.port)
    c = p.raw()
    warm(c, st, ("GET", "i5"))
    wait_until(lambda: "Redis refused ACL LIST (-NOPERM" in open(p.logpath).read(), timeout=3,
               what="the notice")
    calls = _acl_list_calls(d)
    time.sleep(0.3)
    assert _acl_list_calls(d) == calls
    assert st["acl_checks"] == 1  # the refusal: an answer, the last
    with st.delta() as dd:
        assert c.cmd("GET", "i5").value == b"v"
    assert dd["cache_hits"] == 1, dict(dd)
    assert st["cache_flushes_acl_changed"] == 0


# ---------------------------------------------------------------------------
# C9 bounded memory


@pytest.mark.timeout(120)
def test_c9_bounded_memory(proxy_factory, upstream):
    """200,000 distinct cacheable keys read through a proxy with
    cache-max-memory 4mb: cache_used_bytes never exceeds cache_max_bytes
    (sampled during the run and at the end), entries are evicted, and every
    value read is right."""
    n = 200000
    d = upstream.client()
    d.execute_command("DEBUG", "POPULATE", str(n), "i1")
    assert d.dbsize() == n
    p, st = start_cached(proxy_factory, args=("--cache-max-memory", "4mb"))
    r = p.client()
    samples = []
    batch = 1000
    for start in range(0, n, batch):
        pipe = r.pipeline(transaction=False)
        for i in range(start, start + batch):
            pipe.get("i1:%d" % i)
        vals = pipe.execute()
        if start % 20000 == 0:
            for i in (start, start + batch // 2, start + batch - 1):
                assert vals[i - start] == b"value:%d" % i
            s = st.get()
            samples.append((s["cache_used_bytes"], s["cache_entries"]))
            assert s["cache_used_bytes"] <= s["cache_max_bytes"], s
    # a second pass over a slice: part of it is served from the cache
    pipe = r.pipeline(transaction=False)
    for i in range(n - 2000, n):
        pipe.get("i1:%d" % i)
    assert pipe.execute() == [b"value:%d" % i for i in range(n - 2000, n)]
    s = st.get()
    print("cache_used_bytes/entries samples: %r; final %r" % (
        samples, {k: s[k] for k in ("cache_used_bytes", "cache_max_bytes", "cache_entries",
                                    "cache_evictions", "cache_fills", "cache_hits")}))
    assert s["cache_max_bytes"] == 4 * 1024 * 1024
    assert s["cache_used_bytes"] <= s["cache_max_bytes"], s
    assert s["cache_evictions"] > 0, s
    assert s["cache_entries"] > 1000, s
    assert s["cache_hits"] > 0, s


def test_c9_values_above_max_value_not_cached(proxy_factory, upstream):
    """A value above cache-max-value (here 64kb) passes through uncached: two
    reads are two misses, no fill, no hit, the right bytes both times. A
    value under it is cached (the limit is about size)."""
    p, st = start_cached(proxy_factory, args=("--cache-max-value", "64kb"))
    big = b"x" * 100000
    small = b"y" * 60000
    d = upstream.client()
    d.set("i9901", big)
    d.hset("d9901", "f", big)
    d.set("i9902", small)
    c = p.raw(auth=True)
    for rd in (("GET", "i9901"), ("HGET", "d9901", "f")):
        with st.delta() as dd:
            assert c.cmd(*rd).value == big
            assert c.cmd(*rd).value == big
        assert dd["cache_hits"] == 0 and dd["cache_fills"] == 0, (rd, dict(dd))
        assert dd["cache_misses"] == 2, (rd, dict(dd))
    assert warm(c, st, ("GET", "i9902")) == [small]


def test_c9_bounded_memory_large_values(proxy_factory, upstream):
    """Large values near the memory bound: with cache-max-memory 1mb and
    cache-max-value 512kb, reading 12 values of 300 KB never lets
    cache_used_bytes exceed cache_max_bytes."""
    p, st = start_cached(proxy_factory, args=("--cache-max-memory", "1mb",
                                              "--cache-max-value", "512kb"))
    d = upstream.client()
    for i in range(12):
        d.set("i99%02d" % (10 + i), bytes([65 + i]) * 300000)
    c = p.raw(auth=True)
    for rnd in range(2):
        for i in range(12):
            v = c.cmd("GET", "i99%02d" % (10 + i)).value
            assert v == bytes([65 + i]) * 300000
            s = st.get()
            assert s["cache_used_bytes"] <= s["cache_max_bytes"], s
    assert st["cache_evictions"] > 0


# ---------------------------------------------------------------------------
# C10 bounded cross-node staleness


def _percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def test_c6_failover_error_among_queued_replies_flushes(relay, proxy_factory, upstream):
    """The same inside a WATCH transaction, where the queued commands'
    replies travel as one run: a READONLY in the middle of the +QUEUED
    replies (here injected for the second of three) still empties the
    cache, and every reply reaches the client in order."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS)
    upstream.client().set("i9621", "v")
    c = p.raw(auth=True)
    warm(c, st, ("GET", "i9621"))
    reply = b"-READONLY You can't write against a read only replica.\r\n"
    rw = relay.rewrite_reply(("SET", "k9622", "y"), reply)
    assert c.cmd("WATCH", "w9621").raw == b"+OK\r\n"
    assert c.cmd("MULTI").raw == b"+OK\r\n"
    before = st.get()
    queued = [("SET", "k9621", "x"), ("SET", "k9622", "y"), ("SET", "k9623", "z")]
    c.send(b"".join(encode(*q) for q in queued))
    got = [c.read_frame(5).raw for _ in queued]
    assert rw.done.is_set()
    assert got == [b"+QUEUED\r\n", reply, b"+QUEUED\r\n"], got
    after = st.get()
    assert after["cache_flushes_failover"] > before["cache_flushes_failover"], after
    assert after["cache_entries"] == 0, after
    c.cmd("DISCARD")
    c.close()


@pytest.mark.parametrize("mode", MODES)
def test_c10_bounded_cross_node_staleness(mode, proxy_factory, upstream):
    """200 times: with the value cached in the proxy, change it directly on
    Redis (another node), then read through the proxy until the new value
    shows. Reports p50/p99/max of that delay; asserts every change shows
    within 2 s and p99 < 1 s, and that each round started from a cached
    value (hits counted)."""
    p, st = start_cached(proxy_factory, mode=mode)
    d = upstream.raw(auth=True)
    c = p.raw(auth=True)
    d.cmd("SET", "i9951", "0")
    d.cmd("HSET", "d9951", "f", "0")
    delays = []
    before = st.get()
    for n in range(1, 201):
        rd = ("GET", "i9951") if n % 2 else ("HGET", "d9951", "f")
        c.cmd(*rd)                       # cached (fill or hit)
        want = str(n).encode()
        if rd[0] == "GET":
            d.cmd("SET", "i9951", want)
        else:
            d.cmd("HSET", "d9951", "f", want)
        t0 = time.monotonic()
        while True:
            v = c.cmd(*rd).value
            if v == want:
                break
            assert time.monotonic() - t0 < 2.0, (
                "round %d: change not visible through the proxy after 2s (still %r)" % (n, v))
        delays.append(time.monotonic() - t0)
    after = st.get()
    p50, p99 = _percentile(delays, 0.5), _percentile(delays, 0.99)
    print("C10 cross-node staleness over %d changes: p50=%.3fms p99=%.3fms max=%.3fms"
          % (len(delays), p50 * 1e3, p99 * 1e3, max(delays) * 1e3))
    assert p99 < 1.0, "p99 staleness %.3fs" % p99
    hits = after["cache_hits"] - before["cache_hits"]
    assert hits >= 150, "rounds did not start from cached values (hits %d)" % hits


def _stale_rounds(c, d, key, rounds):
    """Rounds of: read key through the proxy (c: cached), SET it directly
    on Redis (d), read it through the proxy again. Returns the rounds whose
    second read was not the value just set, as (round, value)."""
    stale = []
    for n in range(rounds):
        c.cmd("GET", key)
        assert d.cmd("SET", key, str(n)).raw == b"+OK\r\n"
        v = c.cmd("GET", key).value
        if v != str(n).encode():
            stale.append((n, v))
    return stale


@pytest.mark.parametrize("mode", [m if m == "bcast" else pytest.param(m, marks=pytest.mark.xfail(
    strict=False, reason="with tracking per read (default, optin) Redis may write the invalidation after the "
    "write's reply (measured: 226 of 5,000 SETs): a read the reply set off can "
    "come first (known gap of C10)")) for m in MODES])
def test_c10_a_read_set_off_by_a_direct_writes_reply_sees_it(mode, proxy_factory, upstream):
    """Redis writes a write's invalidation before the write's reply: so a
    read through the proxy that the reply set off (the writer, another
    node, tells the reader) must see the new value, even when the proxy
    gets the read and the invalidation in the same pass of its loop (two
    other clients keep it busy). 15,000 rounds of: read (cached), write
    directly on Redis, read through the proxy. (Before the invalidation
    connection was served first: about 1 round in 2,000 to 10,000 read the
    old value. Then, once, under CI load on Redis 6.2: 1 round of 15,000,
    a keep-alive PING in the write's pass: see the two tests below.)"""
    p, st = start_cached(proxy_factory, mode=mode)
    stop = threading.Event()

    def busy():
        with p.raw(auth=True) as b:
            while not stop.is_set():
                b.cmd("GET", "i9999")
    others = [threading.Thread(target=busy, daemon=True) for _ in range(2)]
    for t in others:
        t.start()
    try:
        with upstream.raw(auth=True) as d, p.raw(auth=True) as c:
            stale = _stale_rounds(c, d, "i9952", 15000)
    finally:
        stop.set()
        for t in others:
            t.join(5)
    assert st.get()["cache_hits"] >= 7500, "the reads were not served from the cache"
    assert not stale, "%d reads after the write's reply got an older value: %r" % (len(stale), stale[:5])


@pytest.mark.parametrize("flush", ["FLUSHDB", "FLUSHALL"])
def test_c10_reads_go_to_redis_while_a_flush_sent_here_is_unsettled(proxy_factory, upstream, flush):
    """A flush writes its null invalidation in the middle of Redis's pass,
    which puts the invalidation connection's output behind the reply of a
    direct write run later in that pass: that write's invalidation comes
    after its reply. From a flush's send until a PING sent after its reply
    is answered, reads go to Redis, never to an entry filled meanwhile.
    Here the entry is filled again while the flush waits in a MULTI, then
    EXEC is sent while Redis sleeps: a read of the entry then reaches
    Redis (counted by Redis) and returns the write made in the same pass
    as the flush. Once it has settled, hits resume."""
    p, st = start_cached(proxy_factory)
    d, f, c = upstream.raw(auth=True), p.raw(auth=True), p.raw(auth=True)
    sleeper = upstream.raw(auth=True)
    d.cmd("SET", "i9960", "old")
    assert f.cmd("SELECT", "9").raw == b"+OK\r\n"
    assert f.cmd("MULTI").raw == b"+OK\r\n"
    assert f.cmd(flush).raw == b"+QUEUED\r\n"
    assert warm(c, st, ("GET", "i9960")) == [b"old"]

    admin = upstream.client()

    def gets():  # GETs Redis has run
        return admin.info("commandstats")["cmdstat_get"]["calls"]
    before = gets()
    sleeper.send(encode("DEBUG", "SLEEP", "0.5"))
    time.sleep(0.1)
    f.send(encode("EXEC"))
    d.send(encode("SET", "i9960", "new"))  # runs in the pass of the flush
    time.sleep(0.1)
    got = c.cmd("GET", "i9960").value
    assert d.read_frame(timeout=3).raw == b"+OK\r\n"
    assert gets() == before + 1, "the read was answered from the cache while the flush was in flight"
    assert f.read_frame(timeout=3).raw == b"*1\r\n+OK\r\n"
    assert sleeper.read_frame(timeout=3).raw == b"+OK\r\n"
    # (Redis may run the SET before the FLUSHALL, or after: the read ran
    # after both)
    now = d.cmd("GET", "i9960").value
    assert got == now == (b"new" if flush == "FLUSHDB" else now)
    assert st.get()["cache_bypassed_flush"] >= 1
    d.cmd("SET", "i9960", "new")
    assert warm(c, st, ("GET", "i9960")) == [b"new"]


def _pipelined_hits(port, key, stop):
    """(A process of its own, to keep the proxy's loop busy: threads of
    the test's would share its interpreter.) Pipelines 1,000 GETs of key,
    a cached key, at a time, until stop is set."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        batch = encode("GET", key) * 1000
        while not stop.is_set():
            s.sendall(batch)
            want = len(b"$2\r\nv7\r\n") * 1000
            while want > 0:
                got = s.recv(1 << 20)
                if not got:
                    return
                want -= len(got)


@contextlib.contextmanager
def _hits_pipelined_beside(p):
    """Three processes pipelining hits of i7 (set to "v7" first) on proxy
    p for the with block: its passes of the loop grow long."""
    import multiprocessing
    stop = multiprocessing.Event()
    loaders = [multiprocessing.Process(target=_pipelined_hits, args=(p.port, "i7", stop), daemon=True)
               for _ in range(3)]
    try:
        for loader in loaders:
            loader.start()
        yield
    finally:
        stop.set()
        for loader in loaders:
            loader.join(5)


# GET i5 in two sends: the first leaves the reader's socket ready in the
# proxy's next poll, the second completes the command after a write
GET_I5 = encode("GET", "i5")
GET_I5_HEAD, GET_I5_TAIL = GET_I5[:14], GET_I5[14:]  # "*2\r\n$3\r\nGET\r\n" | "$2\r\ni5\r\n"


def test_c10_a_read_completed_after_a_direct_writes_reply_sees_it(proxy_factory, upstream):
    """The reader sends the first bytes of GET i5, so that its socket is
    ready in the proxy's next poll; SET i5 goes to Redis directly and is
    answered; then the rest of the GET. Redis never answers such a GET with
    the old value (the command runs once whole). The proxy did, in a few
    rounds of a thousand, with three clients pipelining hits beside it: its
    loop runs the invalidation connection first only among the events of
    one poll, and the reader's read, late in a long pass, took bytes that
    came after an invalidation still unread (review-stale, finding 2;
    a pipelining reader met it too). Now a hit waits a turn of the loop
    while the invalidation connection has bytes it has not handled."""
    p, st = start_cached(proxy_factory, mode="bcast")
    with upstream.raw(auth=True) as d:
        d.cmd("SET", "i5", "v0")
        d.cmd("SET", "i7", "v7")
    stale = []
    with upstream.raw(auth=True) as d, p.raw(auth=True) as c:
        warm(c, st, ("GET", "i7"), ("GET", "i5"))
        with _hits_pipelined_beside(p):
            time.sleep(0.3)
            for n in range(1, 4001):
                c.send(GET_I5_HEAD)
                assert d.cmd("SET", "i5", "v%d" % n).raw == b"+OK\r\n"
                c.send(GET_I5_TAIL)
                got = c.read_frame().value
                if got != b"v%d" % n:
                    stale.append((n, got))
    assert not stale, "%d reads completed after the write's reply got an older value: %r" % (len(stale), stale[:5])
    assert st.get()["cache_hits"] >= 10000, "the loaders' reads were not hits"


@pytest.mark.timeout(180)
def test_c4_a_read_completed_after_the_invalidation_connection_was_killed_sees_the_write(proxy_factory, upstream):
    """As the test above, with the invalidation connection killed on Redis
    by the writer, in one MULTI with the write (CLIENT KILL TYPE pubsub;
    SET i5): that write's invalidation is never sent, and Redis closes the
    connection before it answers the EXEC. A read completed after the reply
    was answered from the cache in some rounds of a hundred (review-stale3,
    finding 1): the check for bytes the invalidation connection had not
    handled took its close for nothing unread, and the loss, which empties
    the cache (C4), was seen only after the hit. Now a close or a reset not
    handled yet holds the hit a turn of the loop too."""
    p, st = start_cached(proxy_factory, mode="bcast")
    with upstream.raw(auth=True) as d:
        d.cmd("SET", "i5", "v0")
        d.cmd("SET", "i7", "v7")
    kill = encode("CLIENT", "KILL", "TYPE", "pubsub")
    stale, rounds = [], 300
    with upstream.raw(auth=True) as d, p.raw(auth=True) as c, _hits_pipelined_beside(p):
        for n in range(1, rounds + 1):
            wait_tracking_active(p, stats=st)
            # (filled, then most likely a hit: the loaders' hits hide which)
            assert [c.cmd("GET", "i5").value for _ in range(2)] == [b"v%d" % (n - 1)] * 2
            c.send(GET_I5_HEAD)
            d.send(encode("MULTI") + kill + encode("SET", "i5", "v%d" % n) + encode("EXEC"))
            replies = [d.read_frame().raw for _ in range(4)]
            assert replies[3] == b"*2\r\n:1\r\n+OK\r\n", replies
            c.send(GET_I5_TAIL)
            got = c.read_frame().value
            if got != b"v%d" % n:
                stale.append((n, got))
    assert not stale, "%d of %d reads completed after the write's reply got an older value: %r" % (
        len(stale), rounds, stale[:5])
    assert st.get()["tracking_losses"] >= rounds


# The relay holds a PING's answer for as long as a test needs: the hold of
# hits, 100 ms by default, must not end first.
HOLD_ARGS = ("--tracking-ping-hold-ms", "20000")


def _wait_ping_held(relay):
    """Called once relay.hold_tracking() holds what Redis sends on the
    invalidation connection: waits for a keep-alive PING sent after it,
    whose answer is then held."""
    pings = relay.tracking_pings()
    wait_until(lambda: relay.tracking_pings() > pings, timeout=3.0,
               what="a keep-alive PING sent while the relay holds the answers")


def test_c10_no_hit_while_the_tracking_keepalive_is_unanswered(relay, proxy_factory, upstream):
    """Redis writes a write's invalidation before the write's reply, except
    when the invalidation connection already has output waiting in that
    pass of Redis's loop: a keep-alive PING that Redis ran just before the
    write. Then the writer gets its reply first, and the PONG and the
    invalidation follow, in one write (seen with strace on Redis 6.2 and
    7.0). So while its PING is unanswered the proxy serves no hit: a read
    it would answer waits for the PONG, and for the invalidations read with
    it. Here the relay holds the PONG and the invalidations of direct
    writes: reads (GET, HGET, MGET) set off by the writes' replies wait,
    then see the writes once the relay lets the PONG through. (Past
    tracking-ping-hold-ms the hold ends: see the next test.)"""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS + HOLD_ARGS + ("--tracking-keepalive-ms", "50"))
    d = upstream.client()
    d.set("i9971", "old")
    d.hset("d9971", "f", "old")
    c = p.raw(auth=True)
    warm(c, st, ("GET", "i9971"), ("HGET", "d9971", "f"))
    assert c.cmd("MGET", "i9971", "i9972").raw == b"*2\r\n$3\r\nold\r\n$-1\r\n"
    relay.hold_tracking()
    try:
        _wait_ping_held(relay)
        d.set("i9971", "new")
        d.hset("d9971", "f", "new")
        before = st.get()
        c.send(encode("GET", "i9971") + encode("HGET", "d9971", "f") + encode("MGET", "i9971", "i9972"))
        with pytest.raises(socket.timeout):
            c.read_frame(0.3)
        assert st.get()["cache_held_keepalive"] == before["cache_held_keepalive"] + 1
    finally:
        relay.release_tracking()
    assert [f.raw for f in c.read_frames(3, 5)] == [b"$3\r\nnew\r\n", b"$3\r\nnew\r\n",
                                                  b"*2\r\n$3\r\nnew\r\n$-1\r\n"]
    after = st.get()
    assert after["cache_hits"] == before["cache_hits"], after   # the two entries were purged first
    # once the PONG is in, reads are hits again: i9972's nil, cached by the MGETs
    wait_until(lambda: c.cmd("GET", "i9972").value is None and st.get()["cache_hits"] > after["cache_hits"],
               timeout=3.0, what="hits again once the PONG is in")
    assert c.cmd("GET", "i9971").value == b"new"


def test_c10_no_hit_while_a_barrier_ping_is_unanswered(relay, proxy_factory, upstream):
    """The same for a tunnel's barrier PING (a tunnel that wrote a cached
    key, reading): while it is unanswered, Redis may write a direct
    writer's reply before that write's invalidation, so a read that comes
    meanwhile waits for its answer. The relay holds the PONG and the
    invalidation behind it."""
    p, st = start_cached(proxy_factory, up=relay,
                         args=RELAY_ARGS + ("--tracking-ping-hold-ms", "20000", "--tracking-keepalive-ms", "600000"))
    d = upstream.client()
    d.set("i9971", "old")
    c = p.raw(auth=True)
    warm(c, st, ("GET", "i9971"))
    t = p.raw(auth=True)
    assert t.cmd("CLIENT", "REPLY", "ON").raw == b"+OK\r\n"  # a tunnel
    assert t.cmd("SET", "i9990", "x").raw == b"+OK\r\n"  # that wrote a cached key
    relay.hold_tracking()
    try:
        pings = relay.tracking_pings()
        t.send_cmd("GET", "counter")  # its reply sends a barrier PING, whose answer is held
        wait_until(lambda: relay.tracking_pings() > pings, timeout=3.0, what="a barrier PING")
        d.set("i9971", "new")  # its invalidation comes behind the PONG
        c.send_cmd("GET", "i9971")  # a read the writer's reply set off
        with pytest.raises(socket.timeout):
            c.read_frame(0.5)
    finally:
        relay.release_tracking()
    assert c.read_frame(5).raw == b"$3\r\nnew\r\n"


def test_c10_a_read_waits_for_the_keepalive_at_most_tracking_ping_hold_ms_then_redis_answers(
        relay, proxy_factory, upstream):
    """A PING Redis has not answered after tracking-ping-hold-ms: Redis is
    stalled (a fork, a long script) or the network slow, and its answer may
    still have invalidations behind it. So a read the cache would answer
    waits about the hold (1 s), then goes to Redis, as it would without a
    cache; so do later reads while the PING is out. Here the relay holds
    the PONG and the invalidation of a direct write: the cached value is
    stale (before, a hit past the hold served it)."""
    p, st = start_cached(proxy_factory, up=relay,
                         args=RELAY_ARGS + ("--tracking-keepalive-ms", "1000", "--tracking-ping-hold-ms", "1000",
                                            "--tracking-timeout-ms", "20000"))
    d = upstream.client()
    d.set("i9973", "v")
    c = p.raw(auth=True)
    warm(c, st, ("GET", "i9973"), ("MGET", "i9973"))
    relay.hold_tracking()
    try:
        _wait_ping_held(relay)
        d.set("i9973", "new")  # its invalidation comes behind the PONG
        with st.delta() as dd:
            assert c.cmd("GET", "i9973").value == b"new"
        assert dd["cache_held_keepalive"] == 1 and dd["cache_sent_past_hold"] == 1, dict(dd)
        assert dd["cache_hits"] == 0, dict(dd)
        # held no longer: later reads go to Redis at once
        d.set("i9973", "newer")
        with st.delta() as dd:
            assert c.cmd("GET", "i9973").value == b"newer"
            assert c.cmd("MGET", "i9973", "i9974").raw == b"*2\r\n$5\r\nnewer\r\n$-1\r\n"
        assert dd["cache_held_keepalive"] == 0 and dd["cache_sent_past_hold"] == 2, dict(dd)
        assert dd["cache_hits"] == 0 and dd["cache_mget_partial"] == 0, dict(dd)
        hits = st.get()["cache_hits"]
    finally:
        relay.release_tracking()
    # the PONG is in: hits again, of the value Redis has
    wait_until(lambda: c.cmd("GET", "i9973").value == b"newer" and st.get()["cache_hits"] > hits,
               timeout=3.0, what="hits again once the PONG is in")


@pytest.fixture
def traced_upstream(tmp_path_factory):
    """A redis-server under strace (helpers.TracedRedisServer)."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (scripts/install-deps.sh test installs it)")
    s = TracedRedisServer(tmp_path_factory.mktemp("traced"), name="traced")
    try:
        s.start()
    except RuntimeError as e:
        s.stop()
        pytest.skip("redis-server did not start under strace (is ptrace refused here?): %s" % e)
    yield s
    s.stop()


@pytest.mark.xfail(suite_tracking_mode() != "bcast", strict=False,
                   reason="with tracking per read (default, optin) Redis may write the invalidation after the "
                   "write's reply, PING or not (known gap of C10)")
def test_c10_a_keepalive_ping_in_the_writes_pass_leaves_no_stale_read(traced_upstream, proxy_factory):
    """The race of the test above on a real Redis: a keep-alive PING every
    10 ms, and Redis under strace, which widens the gap between the two
    writes of a pass (the writer's +OK, then the PONG and the invalidation)
    to where a read set off by the +OK reaches the proxy first. 6,000
    rounds of: read (cached), write directly on Redis, read through the
    proxy. (Before, when the cache answered while the PING was unanswered:
    2 to 44 stale reads in four runs of this test, and 46 to 119 in 5,000
    rounds of a faster client, Redis 6.2 and 7.0.)"""
    p, st = start_cached(proxy_factory, up=traced_upstream, args=("--tracking-keepalive-ms", "10"))
    with traced_upstream.raw() as d, p.raw(auth=True) as c:
        stale = _stale_rounds(c, d, "i9953", 6000)
    after = st.get()
    assert not stale, "%d reads after the write's reply got an older value: %r" % (len(stale), stale[:5])
    assert after["cache_hits"] >= 4000, "the reads were not served from the cache"
    assert after["cache_held_keepalive"] > 0, "no read met an unanswered PING: the race was not run"


def test_c10_an_mget_merge_is_read_again_while_the_tracking_keepalive_is_unanswered(relay, proxy_factory,
                                                                                     upstream):
    """An MGET partly answered from the cache merges its cached values with
    Redis's reply for the rest. If Redis read the rest while the proxy's
    keep-alive PING was unanswered, it may have read it after a write whose
    invalidation is still behind the PONG: the merge could show what Redis
    never held (here a transaction changed both keys: old and new side by
    side). The proxy sends the MGET again whole instead."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS + HOLD_ARGS + ("--tracking-keepalive-ms", "1000"))
    d = upstream.client()
    d.set("i9981", "old")
    d.set("i9982", "old")
    c = p.raw(auth=True)
    make_tracked(c, st)
    warm(c, st, ("GET", "i9981"))  # cached; i9982 is not
    c.cmd("MGET", "i9989")         # a user's first MGET goes whole (its ACL allows MGET)
    rest = relay.hold_request(lambda cmd: bool(cmd) and bytes(cmd[0]).upper() == b"MGET" and
                              [bytes(a) for a in cmd[1:]] == [b"i9982"])
    before = st.get()
    c.send_cmd("MGET", "i9981", "i9982")      # i9981 from the cache, MGET i9982 held
    rest.wait()
    relay.hold_tracking()
    try:
        _wait_ping_held(relay)
        with upstream.raw(auth=True) as w:
            w.raw_cmds([("MULTI",), ("SET", "i9981", "new"), ("SET", "i9982", "new"), ("EXEC",)])
        rest.release()
        assert c.read_frame(5).raw == b"*2\r\n$3\r\nnew\r\n$3\r\nnew\r\n"
        after = st.get()
        assert after["cache_mget_partial"] == before["cache_mget_partial"] + 1, after
        assert after["cache_mget_resent"] == before["cache_mget_resent"] + 1, after
    finally:
        relay.release_tracking()


def test_c3_an_mget_merge_takes_no_value_changed_back_and_filled_again(relay, proxy_factory, upstream):
    """An MGET partly answered from the cache (i9601: v1) while Redis reads
    the rest (i9602): meanwhile i9601 becomes v2, i9602 new (Redis's part
    reads new), then i9602 newer and i9601 v1 again, and another client's
    read fills i9601 with v1 anew. The cached v1 has the same bytes, but it
    was not valid all the while: merged with Redis's part it gives [v1,
    new], which Redis never held. The proxy sends the MGET again whole
    (review-fill F1: it compared the bytes only)."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS)
    d = upstream.client()
    direct_setup(relay, st, lambda: (d.set("i9601", "v1"), d.set("i9602", "old")), "i9601", "i9602")
    a = p.raw(auth=True)
    b = p.raw(auth=True, protocol=3)  # another pool: another connection to Redis
    make_tracked(a, st, "i9698")
    make_tracked(b, st, "i9697")
    warm(a, st, ("GET", "i9601"))  # cached; i9602 is not
    a.cmd("MGET", "i9609")         # a user's first MGET goes whole
    req = relay.hold_request(cmd_matcher("MGET", "i9602"))
    rep = relay.hold_reply(cmd_matcher("MGET", "i9602"))
    try:
        before = st.get()
        a.send_cmd("MGET", "i9601", "i9602")
        req.wait()
        direct_setup(relay, st, lambda: (d.set("i9601", "v2"), d.set("i9602", "new")), "i9601", "i9602")
        req.release()
        rep.wait()  # Redis's part: [new]
        direct_setup(relay, st, lambda: (d.set("i9602", "newer"), d.set("i9601", "v1")), "i9602", "i9601")
        warm(b, st, ("GET", "i9601"))  # v1 cached again
        rep.release()
        got = a.read_frame(timeout=5).value
        after = st.get()
    finally:
        req.release()
        rep.release()
    assert got == [b"v1", b"newer"], "MGET gave %r: Redis held (v1, old) (v2, old) (v2, new) (v2, newer) (v1, newer)" % (
        got,)
    assert after["cache_mget_partial"] == before["cache_mget_partial"] + 1, after
    assert after["cache_mget_resent"] == before["cache_mget_resent"] + 1, after


def test_c10_expiry_becomes_visible(proxy_factory, upstream):
    """A key cached through the proxy that expires on Redis disappears
    through the proxy within a bound after its TTL."""
    p, st = start_cached(proxy_factory)
    d = upstream.client()
    d.set("i9961", "v", px=300)
    c = p.raw(auth=True)
    warm(c, st, ("GET", "i9961"))
    t0 = time.monotonic()
    wait_until(lambda: c.cmd("GET", "i9961").value is None, timeout=3.0, interval=0.005,
               what="the expired key to vanish through the proxy")
    print("expired key gone through the proxy after %.3fs (ttl 0.3s)" % (time.monotonic() - t0))
    assert time.monotonic() - t0 < 2.3


def tunnel_and_two_clients(relay, proxy_factory, upstream):
    """A proxy behind the relay, i7 "old" on Redis with its invalidation
    in, and three clients: a tunnel (CLIENT REPLY ON) and two others."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS)
    base_relay, base_keys = relay.invalidation_count(), st["invalidation_keys"]
    with upstream.raw(auth=True) as d:
        d.cmd("SET", "i7", "old")
    relay_settle(relay, st, base_relay, base_keys, ["i7"])
    t, r, x = p.raw(auth=True), p.raw(auth=True), p.raw(auth=True)
    assert t.cmd("CLIENT", "REPLY", "ON").raw == b"+OK\r\n"
    return t, r, x


def test_c1_tunnel_write_then_racing_fill(relay, proxy_factory, upstream):
    """A tunnelled client's write, then a GET that Redis runs before it:
    after the write's reply, the old value must not be served. A tunnel
    matches no reply, so the write's reply is held until the write's
    invalidation is in (a PING on the invalidation connection, answered
    after it): while the relay holds that connection, the tunnel gets
    nothing; once it lets go, the reply, and the new value for all."""
    t, r, x = tunnel_and_two_clients(relay, proxy_factory, upstream)
    relay.hold_tracking()
    try:
        hs = relay.hold_request(cmd_matcher("SET", "i7", "new"))
        t.send_cmd("SET", "i7", "new")     # purged when sent, held before Redis
        hs.wait()
        h = relay.hold_reply(cmd_matcher("GET", "i7"))
        r.send_cmd("GET", "i7")            # a fill begun after the purge; runs first on Redis
        h.wait()
        hs.release()
        # the SET ran; its reply is at the proxy, its invalidation held
        with pytest.raises(socket.timeout):
            t.read_frame(timeout=0.5)
        h.release()
        assert r.read_frame().value == b"old"
        relay.release_tracking()
        assert t.read_frame().raw == b"+OK\r\n"   # the write's reply delivered
        assert x.cmd("GET", "i7").value == b"new", "stale after the tunnel write's reply"
    finally:
        relay.release_tracking()


def test_c1_tunnel_without_writes_is_not_held(relay, proxy_factory, upstream):
    """Only a tunnel that wrote a key the cache may hold waits for the
    invalidation connection: a subscriber's messages, and a tunnel's reads
    and writes of keys no rule caches, come while that connection is held."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS)
    t = p.raw(auth=True)
    assert t.cmd("CLIENT", "REPLY", "ON").raw == b"+OK\r\n"
    relay.hold_tracking()
    try:
        assert t.cmd("SET", "counter", "1").raw == b"+OK\r\n"
        assert t.cmd("GET", "i7").raw == b"$-1\r\n"
        # the first write of a cached key: from its reply on, replies wait
        t.send_cmd("SET", "i8", "v")
        with pytest.raises(socket.timeout):
            t.read_frame(timeout=0.5)
        relay.release_tracking()
        assert t.read_frame().raw == b"+OK\r\n"
        assert t.cmd("GET", "i8").raw == b"$1\r\nv\r\n"
    finally:
        relay.release_tracking()


def test_c1_tunnel_reply_held_for_a_barrier_goes_when_tracking_is_lost(relay, proxy_factory, upstream):
    """The invalidation connection is lost while a tunnel's reply waits for
    its barrier: the cache is emptied (C4), and the reply goes at once,
    not after tracking-timeout-ms."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS)
    t = p.raw(auth=True)
    assert t.cmd("CLIENT", "REPLY", "ON").raw == b"+OK\r\n"
    flushes = st.get()["cache_flushes"]
    relay.hold_tracking()
    try:
        t.send_cmd("SET", "i8", "v")
        with pytest.raises(socket.timeout):
            t.read_frame(timeout=0.5)
        assert relay.cut_tracking() == 1
        t0 = time.monotonic()
        assert t.read_frame(timeout=5).raw == b"+OK\r\n"
        assert time.monotonic() - t0 < 3
        assert st.get()["cache_flushes"] > flushes
    finally:
        relay.release_tracking()


def test_c1_tunnel_reply_waits_for_its_barrier_when_the_connection_ends(relay, proxy_factory, upstream):
    """A tunnel's write reply waits for its barrier; Redis then closes the
    connection (QUIT here; CLIENT KILL, a pubsub output limit) and the
    client writes on, so that the proxy's write to Redis fails. The held
    reply still waits for the barrier: a fill that raced the write must not
    be served after the client has the write's reply (C1). Once the barrier
    passes, the client gets the reply, then the end."""
    t, r, x = tunnel_and_two_clients(relay, proxy_factory, upstream)
    relay.hold_tracking()
    try:
        hs = relay.hold_request(cmd_matcher("SET", "i7", "new"))
        t.send(encode("SET", "i7", "new") + encode("QUIT"))  # purged when sent, held before Redis
        hs.wait()
        h = relay.hold_reply(cmd_matcher("GET", "i7"))
        r.send_cmd("GET", "i7")  # a fill begun after the purge, run first on Redis
        h.wait()
        hs.release()  # SET and QUIT run; Redis closes t's connection
        time.sleep(0.3)
        h.release()
        assert r.read_frame().value == b"old"  # filled: the invalidation is held
        with pytest.raises(socket.timeout):
            t.read_frame(timeout=0.3)
        for _ in range(5):  # the client writes on: the proxy's write to Redis fails
            try:
                t.send_cmd("PING")
            except OSError:
                break
            time.sleep(0.1)
        try:
            got = t.read_frame(timeout=1.0).raw
        except (socket.timeout, OSError, ConnectionClosed):
            got = None
        assert got is None, "the write's reply %r went before its invalidation (GET gives %r)" % (
            got, x.cmd("GET", "i7").value)
        relay.release_tracking()
        assert t.read_frame(timeout=5).raw == b"+OK\r\n"
        assert x.cmd("GET", "i7").value == b"new"
    finally:
        relay.release_tracking()


def test_c1_tunnel_entered_in_multi_without_cached_writes_is_not_held(relay, proxy_factory, upstream):
    """A tunnel entered inside MULTI (CLIENT REPLY ON queued) whose queued
    commands write no key the cache may hold waits for no barrier: its
    replies come while the invalidation connection is slow."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS)
    t = p.raw(auth=True)
    relay.hold_tracking()
    try:
        assert t.cmd("MULTI").raw == b"+OK\r\n"
        assert t.cmd("SET", "counter", "1").raw == b"+QUEUED\r\n"
        t.send_cmd("CLIENT", "REPLY", "ON")  # a tunnel from here
        assert t.read_frame(5).raw == b"+QUEUED\r\n"
        t.send_cmd("EXEC")
        got = t.read_frame(2).raw
        assert got.startswith(b"*2\r\n"), got
    finally:
        relay.release_tracking()


def test_c8_get_not_answered_from_mget_fills_for_a_user_denied_get(proxy_factory, upstream):
    """C8: a user denied GET fills GET entries with MGET; its GET of the same
    key still gets Redis's NOPERM. And the other way round: a user denied
    MGET gets NOPERM for an MGET whose keys its GETs cached."""
    d = upstream.client()
    d.execute_command("ACL", "SETUSER", "noget", "reset", "on", ">pw", "~*", "&*", "+@all", "-get")
    d.execute_command("ACL", "SETUSER", "nomget", "reset", "on", ">pw", "~*", "&*", "+@all", "-mget")
    d.set("i3", b"attr")
    p, st = start_cached(proxy_factory)
    for user, fill, denied in (("noget", ("MGET", "i3"), ("GET", "i3")),
                               ("nomget", ("GET", "i3"), ("MGET", "i3"))):
        with upstream.raw() as r:
            r.cmd("AUTH", user, "pw")
            want = r.cmd(*denied).raw
        assert want.startswith(b"-NOPERM"), want
        c = p.raw()
        assert c.cmd("AUTH", user, "pw").raw == b"+OK\r\n"
        for _ in range(3):
            c.cmd(*fill)
        for _ in range(2):
            assert c.cmd(*denied).raw == want, (user, denied)
