"""
MULTI/EXEC/DISCARD (and WATCH) through the proxy, byte for byte as Redis
answers them, in RESP2 and RESP3, with the commands sent one at a time and
all in one pipelined write; what a transaction does to the cache; a client
that leaves in the middle of one; SELECT inside one; many of them at once;
and whether a transaction without WATCH holds an upstream connection of its
own (test_multi_without_watch_is_not_pinned: expected to fail until MULTI
travels on the shared connections).

Every transcript is compared with the same commands sent to a reference
Redis (the `ref` fixture: a separate redis-server configured like the
upstream).
"""
import socket
import threading
import time

import pytest

from cachehelpers import (RELAY_ARGS, confirm_cached, relay, relay_settle,  # noqa: F401
                          start_cached, warm)
from exacthelpers import (assert_same_both_ways, assert_same_pipeline, diff_transcripts, pipeline_raw,
                          upstream_clients)
from helpers import assert_same_runs, encode, run_steps

PROTOCOLS = [pytest.param(2, id="resp2"), pytest.param(3, id="resp3")]

BIG = "x" * 100_000

# name: commands. Each case runs on a fresh connection (after HELLO 3 in
# RESP3), on the proxy and on the reference Redis.
CASES = {
    "basic": [("MULTI",), ("SET", "t", "1"), ("INCR", "t"), ("GET", "t"),
              ("HSET", "d5", "n", "v"), ("HGET", "d5", "n"), ("GET", "i5"), ("EXEC",),
              ("GET", "t"), ("HGET", "d5", "n")],
    "empty": [("MULTI",), ("EXEC",), ("MULTI",), ("DISCARD",)],
    # Redis refuses these with an argument, and nothing changes (queued in
    # MULTI: the transaction aborts at EXEC)
    "arity_errors": [("MULTI", "x"), ("EXEC", "x"), ("DISCARD", "x"), ("UNWATCH", "x"), ("RESET", "x"),
                     ("SET", "t", "1"), ("MULTI",), ("INCR", "t"), ("EXEC", "x"), ("DISCARD", "x"),
                     ("MULTI", "x"), ("EXEC",), ("GET", "t")],
    "reply_types": [("HSET", "h", "a", "1", "b", "2"), ("SADD", "s", "m"), ("RPUSH", "l", "1", "2"),
                    ("MULTI",), ("HGETALL", "h"), ("ZADD", "z", "1.5", "a"),
                    ("ZSCORE", "z", "a"), ("ZINCRBY", "z", "0.25", "a"), ("SMEMBERS", "s"),
                    ("LRANGE", "l", "0", "-1"), ("EXISTS", "h", "s", "nope"), ("GET", "nope"),
                    ("HGET", "h", "nope"), ("TYPE", "z"), ("OBJECT", "ENCODING", "l"),
                    ("SET", "f", "1.5"), ("INCRBYFLOAT", "f", "1"), ("SCAN", "0", "MATCH", "nope*"),
                    ("EXEC",)],
    "queue_error_unknown_command": [("MULTI",), ("SET", "t", "x"), ("NOSUCHCMD", "a"),
                                    ("SET", "t", "y"), ("EXEC",), ("GET", "t")],
    "queue_error_wrong_arity": [("MULTI",), ("SET", "t", "x"), ("GET",), ("HSET", "d5", "x"),
                                ("SET", "t", "y"), ("EXEC",), ("GET", "t"), ("HGET", "d5", "x")],
    "queue_error_unknown_subcommand": [("MULTI",), ("SET", "t", "x"), ("OBJECT", "NOPE", "t"),
                                       ("EXEC",), ("GET", "t")],
    "queue_error_not_allowed_in_multi": [("MULTI",), ("SET", "t", "x"), ("SAVE",),
                                         ("SET", "t", "y"), ("EXEC",), ("GET", "t")],
    "queue_error_then_discard": [("MULTI",), ("SET", "t", "x"), ("GET",), ("DISCARD",),
                                 ("GET", "t"), ("EXEC",)],
    "runtime_errors_in_exec": [("SET", "s", "str"), ("RPUSH", "l", "a"), ("HSET", "d5", "f", "v"),
                               ("MULTI",), ("INCR", "s"), ("LPUSH", "s", "x"), ("GET", "l"),
                               ("SET", "t", "after"), ("INCRBYFLOAT", "s", "1"),
                               ("SET", "a", "x", "y"), ("GET", "d5"), ("HINCRBY", "d5", "f", "1"),
                               ("EVAL", "return redis.call('INCR', KEYS[1])", "1", "s"),
                               ("EVAL", "return redis.error_reply('MYERR own text')", "0"),
                               ("INCR", "t2"), ("EXEC",), ("GET", "t"), ("GET", "t2"),
                               ("GET", "s")],
    "discard": [("SET", "t", "before"), ("MULTI",), ("SET", "t", "discarded"),
                ("HSET", "d5", "x", "discarded"), ("DISCARD",), ("GET", "t"),
                ("HGET", "d5", "x"), ("EXEC",)],
    "discard_without_multi": [("DISCARD",), ("SET", "t", "1"), ("DISCARD",), ("GET", "t")],
    "exec_without_multi": [("EXEC",), ("SET", "t", "1"), ("EXEC",), ("GET", "t"),
                           ("MULTI",), ("EXEC",), ("EXEC",)],
    "nested_multi": [("MULTI",), ("SET", "t", "1"), ("MULTI",), ("INCR", "t"), ("MULTI",),
                     ("EXEC",), ("GET", "t"), ("EXEC",)],
    "watch_inside_multi": [("MULTI",), ("SET", "t", "1"), ("WATCH", "t"), ("INCR", "t"),
                           ("EXEC",), ("GET", "t")],
    "unwatch_inside_multi": [("MULTI",), ("UNWATCH",), ("SET", "t", "1"), ("EXEC",)],
    "watch_no_conflict": [("SET", "t", "1"), ("WATCH", "t", "i5"), ("GET", "t"), ("MULTI",),
                          ("INCR", "t"), ("EXEC",), ("GET", "t")],
    "watch_conflict_by_own_write": [("WATCH", "t", "i5"), ("SET", "i5", "mine"), ("MULTI",),
                                    ("INCR", "t"), ("EXEC",), ("GET", "t"), ("GET", "i5")],
    "watch_then_discard_then_multi": [("WATCH", "t"), ("MULTI",), ("DISCARD",), ("SET", "t", "x"),
                                      ("MULTI",), ("INCR", "t2"), ("EXEC",)],
    "reads_of_cacheable_keys": [("SET", "i5", "five"), ("HSET", "d5", "x", "dx"), ("GET", "i5"),
                                ("GET", "i5"), ("HGET", "d5", "x"), ("HGET", "d5", "x"),
                                ("MULTI",), ("GET", "i5"), ("HGET", "d5", "x"), ("GET", "i6"),
                                ("HGET", "d6", "x"), ("HGET", "d5", "nope"), ("EXEC",),
                                ("GET", "i5"), ("HGET", "d5", "x"), ("GET", "i6"),
                                ("HGET", "d6", "x")],
    "writes_of_cached_keys": [("SET", "i5", "old"), ("HSET", "d5", "x", "old", "y", "old"),
                              ("GET", "i5"), ("GET", "i5"), ("HGET", "d5", "x"),
                              ("HGET", "d5", "x"), ("HGET", "d5", "y"), ("HGET", "d5", "y"),
                              ("MULTI",), ("SET", "i5", "new"), ("HSET", "d5", "x", "new"),
                              ("HDEL", "d5", "y"), ("GET", "i5"), ("EXEC",), ("GET", "i5"),
                              ("HGET", "d5", "x"), ("HGET", "d5", "y"), ("GET", "i5"),
                              ("HGET", "d5", "x"), ("HGET", "d5", "y")],
    "blpop_inside_multi": [("MULTI",), ("BLPOP", "nolist", "0"), ("RPUSH", "l", "a"),
                           ("BLPOP", "l", "0"), ("EXEC",)],
    "eval_inside_multi": [("MULTI",), ("EVAL", "return redis.call('SET', KEYS[1], ARGV[1])", "1",
                                       "i5", "ev"), ("GET", "i5"), ("EXEC",), ("GET", "i5")],
    "big_values": [("MULTI",), ("SET", "big", BIG), ("GET", "big"), ("APPEND", "big", "y"),
                   ("EXEC",), ("STRLEN", "big")],
    "ping_echo_inside_multi": [("MULTI",), ("PING",), ("PING", "hi"), ("ECHO", "e"), ("EXEC",)],
    "client_setname_inside_multi": [("MULTI",), ("CLIENT", "SETNAME", "inmulti"),
                                    ("CLIENT", "GETNAME"), ("EXEC",), ("CLIENT", "GETNAME")],
    "multi_in_db2": [("SELECT", "2"), ("MULTI",), ("SET", "k", "v2"), ("GET", "k"), ("EXEC",),
                     ("GET", "k"), ("SELECT", "0"), ("GET", "k")],
    "select_inside_multi": [("MULTI",), ("SELECT", "3"), ("SET", "k", "db3"), ("EXEC",),
                            ("GET", "k"), ("MULTI",), ("GET", "k"), ("SELECT", "0"), ("GET", "k"),
                            ("EXEC",), ("GET", "k")],
    "select_out_of_range_inside_multi": [("MULTI",), ("SELECT", "99"), ("SET", "k", "x"),
                                         ("EXEC",), ("GET", "k")],
    "reset_inside_multi": [("SET", "q", "0"), ("MULTI",), ("SET", "q", "1"), ("RESET",),
                           ("EXEC",), ("GET", "q")],
    "many_queued": [("MULTI",)] + [("INCR", "cnt")] * 300 + [("EXEC",), ("GET", "cnt")],
    "queue_error_subcommand_arity": [("MULTI",), ("SET", "t", "x"), ("CONFIG", "GET"),
                                     ("EXEC",), ("GET", "t")],
    "unknown_command_case_and_empty": [("MULTI",), ("set", "t", "x"), ("SeT", "t", "y"),
                                       ("",), ("EXEC",), ("GET", "t")],
    # pinned by WATCH: the queued commands travel as one run of replies,
    # here with queue-time errors and a push-free mix of reply types inside
    "watch_long_run_with_queue_errors": [("WATCH", "t"), ("MULTI",)] + [
        c for i in range(600) for c in (
            [("SET", "k%d" % i, "v"), ("INCR", "n")]
            + ([("NOSUCHCMD", "x")] if i % 97 == 5 else [])
            + ([("GET",)] if i % 131 == 7 else []))] + [("EXEC",), ("GET", "n"), ("UNWATCH",)],
    "watch_long_run_executes": [("SET", "t", "0"), ("WATCH", "t"), ("MULTI",)]
    + [("INCR", "t")] * 2500 + [("HSET", "d5", "x", "y"), ("GET", "t"), ("EXEC",), ("GET", "t"),
                                ("HGET", "d5", "x")],
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_transaction_transcript_matches_redis(proxy, ref, case, protocol):
    """Every reply, +OK/+QUEUED/errors/EXECABORT/the EXEC array, is
    byte-identical to what Redis sends: the commands sent one at a time,
    then (on the data that left, the same on both) all in one write."""
    assert_same_both_ways(proxy, ref, CASES[case], protocol)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_subscribe_inside_multi_subscribes_at_exec(proxy, ref, protocol):
    """SUBSCRIBE queued in MULTI runs at EXEC: the client is then subscribed
    (a RESP2 client can only run pub/sub commands), gets the messages, and
    leaves pub/sub mode with UNSUBSCRIBE."""
    steps = [("MULTI",), ("SUBSCRIBE", "chx"), ("EXEC",), ("PING",), ("SET", "a", "1"),
             ("UNSUBSCRIBE", "chx"), ("PING",), ("SET", "a", "2"), ("GET", "a")]

    def run(ep):
        out = []
        with ep.raw(auth=True, protocol=protocol) as c:
            for st in steps[:3]:
                out.append(c.cmd(*st).raw)
            with ep.raw(auth=True) as pub:
                out.append(pub.cmd("PUBLISH", "chx", "hello").raw)
            out.append(c.read_frame().raw)          # the message
            for st in steps[3:]:
                out.append(c.cmd(*st).raw)
        return out

    want = run(ref)
    got = run(proxy)
    assert got == want, "\n".join("%r\n  redis %r\n  proxy %r" % (i, w, g)
                                  for i, (w, g) in enumerate(zip(want, got)) if w != g)


# ---------------------------------------------------------------------------
# The cache around transactions


@pytest.mark.proxy_only
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_reads_inside_multi_are_not_served_from_cache_nor_fill(relay, proxy_factory, upstream,
                                                               protocol):
    """i/d keys cached, then changed directly on Redis while the relay holds
    the invalidation back (the cached copy is stale): GET/HGET queued in
    MULTI answer +QUEUED, EXEC returns Redis's current values, no hit or fill
    is counted, and after EXEC the plain reads still give exact bytes."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS)
    d = upstream.client()
    base_relay, base_keys = relay.invalidation_count(), st["invalidation_keys"]
    d.set("i5", "old")
    d.hset("d5", "x", "old")
    relay_settle(relay, st, base_relay, base_keys, ["i5", "d5"])
    c = p.raw(auth=True, protocol=protocol)
    warm(c, st, ("GET", "i5"), ("HGET", "d5", "x"))
    relay.hold_tracking()
    try:
        confirm_cached(c, st, ("GET", "i5"), ("HGET", "d5", "x"))
        d.set("i5", "new!")
        d.hset("d5", "x", "new!")
        with st.delta() as dd:
            assert c.cmd("MULTI").raw == b"+OK\r\n"
            assert c.cmd("GET", "i5").raw == b"+QUEUED\r\n"
            assert c.cmd("HGET", "d5", "x").raw == b"+QUEUED\r\n"
            assert c.cmd("GET", "i6").raw == b"+QUEUED\r\n"
            assert c.cmd("EXEC").raw == (b"*3\r\n$4\r\nnew!\r\n$4\r\nnew!\r\n"
                                         + (b"_\r\n" if protocol == 3 else b"$-1\r\n"))
            # and pipelined in one write
            c.send(encode("MULTI") + encode("GET", "i5") + encode("HGET", "d5", "x")
                   + encode("EXEC"))
            fs = c.read_frames(4)
            assert [f.raw for f in fs] == [b"+OK\r\n", b"+QUEUED\r\n", b"+QUEUED\r\n",
                                           b"*2\r\n$4\r\nnew!\r\n$4\r\nnew!\r\n"]
        assert dd["cache_hits"] == 0, "hits inside MULTI: %r" % dict(dd)
        assert dd["cache_fills"] == 0, "EXEC results filled the cache: %r" % dict(dd)
    finally:
        relay.release_tracking()
    # once the held invalidations are through, plain reads are exact
    for _ in range(3):
        for rd, want in ((("GET", "i5"), b"$4\r\nnew!\r\n"), (("HGET", "d5", "x"), b"$4\r\nnew!\r\n"),
                         (("GET", "i6"), b"_\r\n" if protocol == 3 else b"$-1\r\n")):
            deadline = time.monotonic() + 3
            while True:
                got = c.cmd(*rd).raw
                if got == want or time.monotonic() > deadline:
                    break
                time.sleep(0.01)
            assert got == want, (rd, got)
    c.close()


def _exec_then_read(c, other, writes, reads, pipelined):
    """MULTI writes EXEC on c, then each read on c and on other; returns
    (exec reply, [reads on c], [reads on other])."""
    if pipelined:
        cmds = [("MULTI",)] + writes + [("EXEC",)] + reads
        c.send(b"".join(encode(*x) for x in cmds))
        fs = c.read_frames(len(cmds))
        ex = fs[len(writes) + 1].raw
        mine = [f.raw for f in fs[len(writes) + 2:]]
    else:
        assert c.cmd("MULTI").raw == b"+OK\r\n"
        for w in writes:
            assert c.cmd(*w).raw == b"+QUEUED\r\n"
        ex = c.cmd("EXEC").raw
        mine = [c.cmd(*r).raw for r in reads]
    theirs = [other.cmd(*r).raw for r in reads]
    return ex, mine, theirs


@pytest.mark.proxy_only
@pytest.mark.parametrize("pipelined", [False, True], ids=["separate", "pipelined"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_exec_invalidates_before_its_reply(relay, proxy_factory, upstream, protocol, pipelined):
    """Keys cached before the transaction, written by it: the first GET/HGET
    after the EXEC reply (same client, or another client of the proxy) sees
    the new values, with Redis's own invalidations held back by the relay
    (only the proxy's invalidation at EXEC can make this right)."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS)
    d = upstream.client()
    base_relay, base_keys = relay.invalidation_count(), st["invalidation_keys"]
    d.set("i5", "old")
    d.set("i7", "old")
    d.hset("d5", mapping={"x": "old", "y": "old"})
    relay_settle(relay, st, base_relay, base_keys, ["i5", "i7", "d5"])
    c = p.raw(auth=True, protocol=protocol)
    other = p.raw(auth=True)
    reads = [("GET", "i5"), ("HGET", "d5", "x"), ("HGET", "d5", "y"), ("GET", "i7"),
             ("GET", "i8")]
    warm(c, st, *reads)
    warm(other, st, *reads)
    relay.hold_tracking()
    try:
        confirm_cached(c, st, *reads)
        writes = [("SET", "i5", "new"), ("HSET", "d5", "x", "new"), ("HDEL", "d5", "y"),
                  ("DEL", "i7"), ("SET", "i8", "born")]
        ex, mine, theirs = _exec_then_read(c, other, writes, reads, pipelined)
        nil = b"_\r\n" if protocol == 3 else b"$-1\r\n"
        assert ex == b"*5\r\n+OK\r\n:0\r\n:1\r\n:1\r\n+OK\r\n", ex
        assert mine == [b"$3\r\nnew\r\n", b"$3\r\nnew\r\n", nil, nil, b"$4\r\nborn\r\n"], mine
        assert theirs == [b"$3\r\nnew\r\n", b"$3\r\nnew\r\n", b"$-1\r\n", b"$-1\r\n",
                          b"$4\r\nborn\r\n"], theirs
    finally:
        relay.release_tracking()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_exec_writes_seen_at_once_without_relay(proxy, upstream, protocol):
    """The same without the relay, many rounds, the keys re-cached each
    round: every read right after EXEC returns the round's value."""
    c = proxy.raw(auth=True, protocol=protocol)
    other = proxy.raw(auth=True)
    for n in range(30):
        for r in (("GET", "i11"), ("HGET", "d11", "f")):
            c.cmd(*r)
            other.cmd(*r)
            other.cmd(*r)
        ex, mine, theirs = _exec_then_read(
            c, other, [("SET", "i11", "v%d" % n), ("HSET", "d11", "f", "v%d" % n)],
            [("GET", "i11"), ("HGET", "d11", "f")], pipelined=bool(n % 2))
        v = b"$%d\r\nv%d\r\n" % (len(b"v%d" % n), n)
        assert ex in (b"*2\r\n+OK\r\n:1\r\n", b"*2\r\n+OK\r\n:0\r\n"), ex
        assert mine == [v, v], (n, mine)
        assert theirs == [v, v], (n, theirs)


# ---------------------------------------------------------------------------
# Clients that leave, interleave, SELECT


def _keys(upstream, db=0):
    with upstream.raw(auth=True) as d:
        if db:
            d.cmd("SELECT", db)
        return sorted(d.call("KEYS", "*"))


@pytest.mark.parametrize("how", ["read_replies", "no_reading", "half_exec"])
def test_client_leaving_mid_transaction_executes_nothing(proxy_factory, upstream, how):
    """A client sends MULTI and writes (no EXEC) and disconnects: nothing of
    its transaction ever runs, and no other client's transaction or command
    picks up its queued commands (one upstream connection, so a shared
    connection would be the same one)."""
    p = proxy_factory(args=("--upstream-connections", "1"))
    a = p.raw(auth=True)
    writes = [("SET", "gone1", "x"), ("INCR", "gone2"), ("HSET", "d7", "f", "v"),
              ("SET", "i7", "x")]
    if how == "read_replies":
        assert a.cmd("MULTI").raw == b"+OK\r\n"
        for w in writes:
            assert a.cmd(*w).raw == b"+QUEUED\r\n"
    else:
        data = encode("MULTI") + b"".join(encode(*w) for w in writes)
        if how == "half_exec":
            data += b"*1\r\n$4\r\nEX"               # EXEC cut in the middle
        a.send(data)
        time.sleep(0.1)
    a.close()
    b = p.raw(auth=True)
    # another transaction on the (same) shared connection: only its own command
    assert b.cmd("MULTI").raw == b"+OK\r\n"
    assert b.cmd("SET", "mine", "1").raw == b"+QUEUED\r\n"
    assert b.cmd("EXEC").raw == b"*1\r\n+OK\r\n"
    assert b.cmd("SET", "plain", "1").raw == b"+OK\r\n"
    for r in (("GET", "gone1"), ("GET", "gone2"), ("HGET", "d7", "f"), ("GET", "i7")):
        assert b.cmd(*r).raw == b"$-1\r\n", r
    time.sleep(0.3)
    assert _keys(upstream) == [b"mine", b"plain"]
    b.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_other_clients_unaffected_by_an_open_transaction(proxy_factory, upstream, protocol):
    """While client A's transaction is open, client B's plain commands run at
    once (not queued in A's transaction), B's own transaction is its own,
    and A's EXEC returns only A's commands (one upstream connection)."""
    p = proxy_factory(args=("--upstream-connections", "1"))
    a = p.raw(auth=True, protocol=protocol)
    b = p.raw(auth=True, protocol=protocol)
    d = upstream.raw(auth=True)
    assert a.cmd("MULTI").raw == b"+OK\r\n"
    assert a.cmd("SET", "k", "A").raw == b"+QUEUED\r\n"
    assert b.cmd("SET", "b", "2").raw == b"+OK\r\n"
    assert d.cmd("GET", "b").raw == b"$1\r\n2\r\n", "B's SET did not run at once"
    assert b.cmd("GET", "k").raw == (b"_\r\n" if protocol == 3 else b"$-1\r\n")
    assert b.cmd("MULTI").raw == b"+OK\r\n"
    assert a.cmd("INCR", "n").raw == b"+QUEUED\r\n"
    assert b.cmd("SET", "k", "B").raw == b"+QUEUED\r\n"
    assert b.cmd("INCR", "n").raw == b"+QUEUED\r\n"
    assert b.cmd("EXEC").raw == b"*2\r\n+OK\r\n:1\r\n"
    assert d.cmd("GET", "k").raw == b"$1\r\nB\r\n"
    assert a.cmd("GET", "k").raw == b"+QUEUED\r\n"
    assert a.cmd("EXEC").raw == b"*3\r\n+OK\r\n:2\r\n$1\r\nA\r\n"
    assert d.cmd("GET", "k").raw == b"$1\r\nA\r\n"
    for c in (a, b, d):
        c.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("conns", ["1", "2"])
def test_select_inside_multi_applies_after_exec_for_that_client_only(proxy_factory, upstream,
                                                                     protocol, conns):
    """SELECT queued in MULTI changes the client's database when EXEC runs it,
    and only that client's: its later commands (plain, cached reads,
    another transaction) go to db 3; another client stays in db 0."""
    p = proxy_factory(args=("--upstream-connections", conns))
    d = upstream.client()
    d.set("i5", "zero")
    d3 = upstream.client(db=3)
    d3.set("i5", "three")
    a = p.raw(auth=True, protocol=protocol)
    b = p.raw(auth=True, protocol=protocol)
    for c in (a, b):                                # cached in db 0
        assert c.cmd("GET", "i5").raw == b"$4\r\nzero\r\n"
        assert c.cmd("GET", "i5").raw == b"$4\r\nzero\r\n"
    assert a.cmd("MULTI").raw == b"+OK\r\n"
    assert a.cmd("SELECT", "3").raw == b"+QUEUED\r\n"
    assert a.cmd("SET", "k", "in3").raw == b"+QUEUED\r\n"
    assert b.cmd("SET", "k", "in0").raw == b"+OK\r\n"
    assert a.cmd("EXEC").raw == b"*2\r\n+OK\r\n+OK\r\n"
    assert a.cmd("SET", "k2", "a-after").raw == b"+OK\r\n"
    assert b.cmd("SET", "k2", "b-after").raw == b"+OK\r\n"
    for _ in range(2):
        assert a.cmd("GET", "i5").raw == b"$5\r\nthree\r\n"
        assert b.cmd("GET", "i5").raw == b"$4\r\nzero\r\n"
        assert a.cmd("GET", "k").raw == b"$3\r\nin3\r\n"
        assert b.cmd("GET", "k").raw == b"$3\r\nin0\r\n"
    assert a.cmd("MULTI").raw == b"+OK\r\n"
    assert a.cmd("GET", "k2").raw == b"+QUEUED\r\n"
    assert a.cmd("EXEC").raw == b"*1\r\n$7\r\na-after\r\n"
    assert d.get("k") == b"in0" and d.get("k2") == b"b-after"
    assert d3.get("k") == b"in3" and d3.get("k2") == b"a-after"
    # a SELECT that fails inside EXEC changes nothing
    assert a.cmd("MULTI").raw == b"+OK\r\n"
    a.cmd("SELECT", "99")
    a.cmd("SET", "k3", "x")
    assert a.cmd("EXEC").raw == b"*2\r\n-ERR DB index is out of range\r\n+OK\r\n"
    assert d3.get("k3") == b"x"
    assert a.cmd("GET", "i5").raw == b"$5\r\nthree\r\n"
    a.close()
    b.close()


# ---------------------------------------------------------------------------
# Many at once


@pytest.mark.parametrize("conns", ["1", "2"])
def test_concurrent_transactions_on_one_counter(proxy_factory, upstream, conns):
    """24 clients (RESP2 and RESP3, some pipelining the whole transaction,
    some sending it command by command) each run 40 MULTI/INCR x3/EXEC on
    the same counter: every EXEC is exactly three consecutive integers
    (atomic), every value 1..N is returned exactly once, and the counter
    ends at N."""
    p = proxy_factory(args=("--upstream-connections", conns))
    nclients, rounds = 24, 40
    results = [[] for _ in range(nclients)]
    errors = []

    def run(i):
        try:
            with p.raw(auth=True, protocol=3 if i % 3 == 0 else None) as c:
                for _ in range(rounds):
                    if i % 2:
                        c.send(encode("MULTI") + encode("INCR", "ctr") * 3 + encode("EXEC"))
                        fs = c.read_frames(5)
                        assert [f.raw for f in fs[:4]] == [b"+OK\r\n"] + [b"+QUEUED\r\n"] * 3, fs
                        ex = fs[4]
                    else:
                        assert c.cmd("MULTI").raw == b"+OK\r\n"
                        for _ in range(3):
                            assert c.cmd("INCR", "ctr").raw == b"+QUEUED\r\n"
                        ex = c.cmd("EXEC")
                    results[i].append(ex.raw)
        except Exception as e:
            errors.append("client %d: %r" % (i, e))

    ts = [threading.Thread(target=run, args=(i,)) for i in range(nclients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(50)
    assert not errors, errors[:5]
    seen = []
    for i, rs in enumerate(results):
        assert len(rs) == rounds, (i, len(rs))
        for raw in rs:
            assert raw.startswith(b"*3\r\n:"), raw
            parts = raw[4:].split(b"\r\n")
            vals = [int(x[1:]) for x in parts if x]
            assert len(vals) == 3 and raw == b"*3\r\n" + b"".join(b":%d\r\n" % v for v in vals), raw
            assert vals[1] == vals[0] + 1 and vals[2] == vals[0] + 2, "not atomic: %r" % raw
            seen += vals
    n = nclients * rounds * 3
    assert sorted(seen) == list(range(1, n + 1))
    assert upstream.client().get("ctr") == str(n).encode()


# ---------------------------------------------------------------------------
# Pinning


def _proxy_conns(upstream):
    return [c for c in upstream_clients(upstream)]


@pytest.mark.proxy_only
@pytest.mark.timeout(60)
def test_multi_without_watch_is_not_pinned(proxy_factory, upstream):
    """EXPECTED TO FAIL until MULTI...EXEC without WATCH travels on the shared
    connections. With --upstream-connections 2, 50 clients each hold a
    transaction open (MULTI + a queued SET) at the same time, then all run
    EXEC, then all loop MULTI/SET/EXEC: the number of connections the proxy
    has on Redis (CLIENT LIST) must stay at most upstream-connections + the
    invalidation connection + a few, never one per transaction."""
    p = proxy_factory(args=("--upstream-connections", "2"))
    limit = 2 + 1 + 3
    nclients = 50
    cs = [p.raw(auth=True) for _ in range(nclients)]
    for i, c in enumerate(cs):
        assert c.cmd("MULTI").raw == b"+OK\r\n"
        assert c.cmd("SET", "np%d" % i, "0").raw == b"+QUEUED\r\n"
    open_now = _proxy_conns(upstream)
    for i, c in enumerate(cs):
        assert c.cmd("EXEC").raw == b"*1\r\n+OK\r\n"
    peak = [len(open_now)]
    stop = threading.Event()
    errors = []

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], len(_proxy_conns(upstream)))
            time.sleep(0.01)

    def loop(i, c):
        try:
            for n in range(20):
                c.send(encode("MULTI") + encode("SET", "np%d" % i, n) + encode("EXEC"))
                fs = c.read_frames(3)
                assert [f.raw for f in fs] == [b"+OK\r\n", b"+QUEUED\r\n", b"*1\r\n+OK\r\n"], fs
                assert c.cmd("MULTI").raw == b"+OK\r\n"
                assert c.cmd("INCR", "npc").raw == b"+QUEUED\r\n"
                assert c.cmd("EXEC").raw.startswith(b"*1\r\n:")
        except Exception as e:
            errors.append(repr(e))

    smp = threading.Thread(target=sample)
    smp.start()
    ts = [threading.Thread(target=loop, args=(i, c)) for i, c in enumerate(cs)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(40)
    stop.set()
    smp.join()
    for c in cs:
        c.close()
    assert not errors, errors[:3]
    assert upstream.client().get("npc") == b"1000"
    assert len(open_now) <= limit, (
        "with 50 transactions open (no WATCH) the proxy holds %d connections on Redis "
        "(limit %d): MULTI is pinned; %d of them are inside MULTI on Redis (multi!=-1)"
        % (len(open_now), limit, sum(1 for c in open_now if c.get("multi") != "-1")))
    assert peak[0] <= limit, "peak %d upstream connections during the loop (limit %d)" % (
        peak[0], limit)


@pytest.mark.timeout(60)
def test_multi_with_watch_may_pin_and_stays_correct(proxy_factory, upstream):
    """With WATCH a transaction may hold a connection of its own; 30 clients
    at once, each WATCHing its key: each EXEC is right (nil where another
    client touched the watched key). The number of upstream connections
    afterwards is only printed."""
    p = proxy_factory(args=("--upstream-connections", "2"))
    nclients = 30
    cs = [p.raw(auth=True) for _ in range(nclients)]
    for i, c in enumerate(cs):
        assert c.cmd("WATCH", "w%d" % i).raw == b"+OK\r\n"
        assert c.cmd("MULTI").raw == b"+OK\r\n"
        assert c.cmd("SET", "w%d" % i, "mine").raw == b"+QUEUED\r\n"
    # every third watched key is touched by someone else before EXEC
    other = p.raw(auth=True)
    for i in range(0, nclients, 3):
        assert other.cmd("SET", "w%d" % i, "theirs").raw == b"+OK\r\n"
    for i, c in enumerate(cs):
        want = b"*-1\r\n" if i % 3 == 0 else b"*1\r\n+OK\r\n"
        assert c.cmd("EXEC").raw == want, i
        assert c.cmd("GET", "w%d" % i).raw == (b"$6\r\ntheirs\r\n" if i % 3 == 0
                                               else b"$4\r\nmine\r\n")
    for c in cs:
        c.close()
    other.close()
    time.sleep(0.2)
    print("upstream connections after WATCH transactions: %d" % len(_proxy_conns(upstream)))


# ---------------------------------------------------------------------------
# What only Redis can answer when a command is queued, and session state
# changed by EXEC


def _compare_runs(proxy, ref, cmds, protocol, how, mask=None):
    if how == "separate":
        want = [r for _, r in run_steps(ref, cmds, protocol=protocol)]
        got = [r for _, r in run_steps(proxy, cmds, protocol=protocol)]
    else:
        want = pipeline_raw(ref, cmds, protocol)
        got = pipeline_raw(proxy, cmds, protocol)
    if mask is not None:
        want, got = [mask(x) for x in want], [mask(x) for x in got]
    msg = diff_transcripts(cmds, want, got)
    if msg:
        raise AssertionError(msg)


@pytest.mark.parametrize("how", ["separate", "pipelined"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_queue_time_oom_inside_multi(proxy, upstream, ref, protocol, how):
    """With Redis over maxmemory (noeviction), a write queued in MULTI is
    refused when queued (-OOM, not +QUEUED) and EXEC is EXECABORT: the proxy
    must send Redis's replies, not +QUEUED of its own."""
    cmds = [("MULTI",), ("SET", "a", "1"), ("GET", "a"), ("DEL", "a"), ("EXEC",),
            ("SET", "b", "1"), ("DEL", "b"), ("GET", "b")]
    for s in (upstream, ref):
        s.client().config_set("maxmemory", "1")
    try:
        _compare_runs(proxy, ref, cmds, protocol, how)
    finally:
        for s in (upstream, ref):
            s.client().config_set("maxmemory", "0")


def runs_over_maxmemory(proxy, upstream, ref, protocol, before, over):
    """Sends `before`, puts the server over maxmemory, sends `over`, lifts
    the limit and reads a; through the proxy and on Redis alike. Returns
    the transcript (asserted the same)."""
    def scenario(ep):
        server = ref if ep is ref else upstream
        out = []
        with ep.raw(protocol=protocol) as c:
            for st in before:
                out.append((st, c.cmd(*st).raw))
            server.client().config_set("maxmemory", "1")
            try:
                for st in over:
                    out.append((st, c.cmd(*st).raw))
            finally:
                server.client().config_set("maxmemory", "0")
            out.append((("GET", "a"), c.cmd("GET", "a").raw))
        return out

    return assert_same_runs(scenario, proxy, ref)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_out_of_memory_between_queue_and_exec(proxy, upstream, ref, protocol):
    """Redis goes over maxmemory after the commands were queued: Redis
    refuses EXEC itself, naming the error (EXECABORT ... because of: OOM
    ...), and nothing runs. Through the proxy the transaction reaches Redis
    only at EXEC, where its commands meet the OOM: the client must get
    Redis's words for it, not "previous errors" (it saw no error)."""
    got = runs_over_maxmemory(proxy, upstream, ref, protocol, [("MULTI",), ("SET", "a", "1"), ("DEL", "b")],
                              [("EXEC",)])
    assert got[3][1].startswith(b"-EXECABORT Transaction discarded because of: OOM "), got[3][1]


@pytest.mark.parametrize("queued", ["write", "read"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_out_of_memory_after_one_command_queued_then_a_refused_one(proxy, upstream, ref, protocol, queued):
    """A command queued; Redis goes over maxmemory; the next command gets
    -OOM (the client sees it: the transaction is dirty); EXEC. Redis refuses
    EXEC itself for OOM when a queued command may use memory (denyoom: the
    SET), naming it; with only a read queued it does not, and EXEC answers
    for the previous errors. Through the proxy the queued command reaches
    Redis only at EXEC, where it meets the OOM."""
    first = ("SET", "a", "1") if queued == "write" else ("GET", "a")
    got = runs_over_maxmemory(proxy, upstream, ref, protocol, [("MULTI",), first], [("SET", "b", "2"), ("EXEC",)])
    assert got[2][1].startswith(b"-OOM "), got[2][1]
    if queued == "write":
        assert got[3][1].startswith(b"-EXECABORT Transaction discarded because of: OOM "), got[3][1]
    else:
        assert got[3][1] == b"-EXECABORT Transaction discarded because of previous errors.\r\n", got[3][1]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_out_of_memory_with_a_write_sent_after_a_refused_command(proxy, upstream, ref, protocol):
    """A read queued, an unknown command refused, a write answered +QUEUED,
    then Redis goes over maxmemory and EXEC comes. Redis queues nothing
    after a refusal, so its transaction holds only the read: EXEC is not
    refused for OOM, and answers for the previous errors."""
    got = runs_over_maxmemory(proxy, upstream, ref, protocol,
                              [("MULTI",), ("GET", "a"), ("NOSUCHCMD",), ("SET", "b", "1")], [("EXEC",)])
    assert got[4][1] == b"-EXECABORT Transaction discarded because of previous errors.\r\n", got[4][1]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_replica_without_its_master_between_queue_and_exec(proxy, upstream, ref, protocol):
    """A read and a write queued; then Redis becomes a replica whose master
    link is down (replica-serve-stale-data no). Redis refuses EXEC at the
    first of its checks that fails, READONLY (before MASTERDOWN), though the
    read queued first would meet MASTERDOWN."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    nobody = s.getsockname()[1]
    s.close()

    def scenario(ep):
        server = ref if ep is ref else upstream
        out = []
        with ep.raw(protocol=protocol) as c:
            for st in [("MULTI",), ("GET", "a"), ("SET", "a", "1")]:
                out.append((st, c.cmd(*st).raw))
            sc = server.client()
            sc.config_set("replica-serve-stale-data", "no")
            sc.execute_command("REPLICAOF", "127.0.0.1", str(nobody))
            try:
                out.append((("EXEC",), c.cmd("EXEC").raw))
            finally:
                sc.execute_command("REPLICAOF", "NO", "ONE")
                sc.config_set("replica-serve-stale-data", "yes")
        return out

    got = assert_same_runs(scenario, proxy, ref)
    assert got[3][1].startswith(b"-EXECABORT Transaction discarded because of: READONLY "), got[3][1]


@pytest.mark.parametrize("how", ["separate", "pipelined"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_queue_time_noperm_for_a_restricted_default_user(proxy, upstream, ref, protocol, how):
    """The default user itself restricted by ACL to some keys: a write to
    another key queued in MULTI gets -NOPERM when queued and EXEC is
    EXECABORT, exactly as direct."""
    cmds = [("MULTI",), ("SET", "ok:1", "1"), ("SET", "no:1", "1"), ("EXEC",), ("GET", "ok:1"),
            ("MULTI",), ("SET", "ok:2", "2"), ("EXEC",), ("GET", "ok:2")]
    for s in (upstream, ref):
        s.client().execute_command("ACL", "SETUSER", "default", "resetkeys", "~ok:*", "~i*",
                                   "~d*")
    try:
        _compare_runs(proxy, ref, cmds, protocol, how)
    finally:
        for s in (upstream, ref):
            s.client().execute_command("ACL", "SETUSER", "default", "allkeys")


@pytest.mark.parametrize("how", ["separate", "pipelined"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_auth_inside_multi_changes_that_clients_user_only(proxy_factory, upstream, ref, protocol,
                                                          how):
    """AUTH queued in MULTI authenticates the connection when EXEC runs it:
    that client's later commands run as the new user (NOPERM outside its
    keys), a wrong password inside EXEC changes nothing, and another client
    of the proxy (one upstream connection) stays the default user."""
    p = proxy_factory(args=("--upstream-connections", "1"))
    for s in (upstream, ref):
        s.client().execute_command("ACL", "SETUSER", "lim", "on", ">pw", "~ok:*", "+@all")
    cmds = [("MULTI",), ("AUTH", "lim", "bad"), ("SET", "x:0", "1"), ("EXEC",), ("SET", "x:1", "1"),
            ("MULTI",), ("AUTH", "lim", "pw"), ("SET", "ok:0", "1"), ("EXEC",),
            ("SET", "no:2", "x"), ("SET", "ok:1", "y"), ("GET", "ok:1"), ("GET", "no:2"),
            ("MULTI",), ("SET", "no:3", "z"), ("EXEC",), ("GET", "no:3")]
    _compare_runs(p, ref, cmds, protocol, how)
    with p.raw(auth=True) as b:
        assert b.cmd("SET", "no:4", "b").raw == b"+OK\r\n"
        assert b.cmd("GET", "no:4").raw == b"$1\r\nb\r\n"
        assert b.cmd("MULTI").raw == b"+OK\r\n"
        assert b.cmd("SET", "no:5", "b").raw == b"+QUEUED\r\n"
        assert b.cmd("EXEC").raw == b"*1\r\n+OK\r\n"


def _mask_hello_id(raw):
    import re
    return re.sub(rb"\$2\r\nid\r\n:\d+\r\n", b"$2\r\nid\r\n:<id>\r\n", raw)


@pytest.mark.parametrize("how", ["separate", "pipelined"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_hello_inside_multi_switches_protocol_at_exec(proxy, ref, protocol, how):
    """HELLO queued in MULTI switches the connection's protocol when EXEC
    runs it: the replies after EXEC (nil, a map, a double) are in the new
    protocol, as from Redis (the connection id in HELLO's reply masked)."""
    other = 5 - protocol
    cmds = [("HSET", "h", "a", "1"), ("ZADD", "z", "1.5", "m"), ("MULTI",), ("HELLO", other),
            ("GET", "nil"), ("EXEC",), ("GET", "nil"), ("HGETALL", "h"), ("ZSCORE", "z", "m"),
            ("GET", "i5"), ("GET", "i5"), ("HGET", "d5", "x"), ("HGET", "d5", "x")]
    _compare_runs(proxy, ref, cmds, protocol, how, mask=_mask_hello_id)


def test_quit_inside_multi_executes_nothing(proxy, upstream, ref):
    """QUIT inside MULTI: +OK, the connection closes, nothing queued runs."""
    for ep in (ref, proxy):
        with ep.raw(auth=True) as c:
            assert c.cmd("MULTI").raw == b"+OK\r\n"
            assert c.cmd("SET", "q", "1").raw == b"+QUEUED\r\n"
            assert c.cmd("QUIT").raw == b"+OK\r\n"
            c.expect_closed()
    time.sleep(0.2)
    assert upstream.client().exists("q") == 0
    assert ref.client().exists("q") == 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_long_transaction_matches_redis(proxy, ref, protocol):
    """12,000 queued commands with 1 kB values (past any local queue limit
    the proxy may have), pipelined: every +QUEUED and the EXEC array exact."""
    cmds = ([("MULTI",)] + [("SET", "k%d" % (i % 500), "v" * 1000) for i in range(12000)]
            + [("DBSIZE",), ("EXEC",), ("DBSIZE",)])
    assert_same_pipeline(proxy, ref, cmds, protocol=protocol)


def _pieces_raw(ep, cmds, protocol, seed):
    """Sends cmds as one byte stream cut in random pieces of 1 to 900 bytes,
    with a pause now and then so that the proxy reads them apart (frames
    split across reads, runs of queued commands cut anywhere); returns the
    raw reply of each command."""
    import random
    rnd = random.Random(seed)
    data = b"".join(encode(*x) for x in cmds)
    c = ep.raw(auth=True, protocol=protocol, timeout=30.0)
    try:
        err = []

        def run():
            try:
                at = 0
                while at < len(data):
                    n = rnd.randint(1, 900)
                    c.send(data[at:at + n])
                    at += n
                    if rnd.random() < 0.2:
                        time.sleep(0.001)
            except Exception as e:  # reported below
                err.append(e)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        frames = c.read_many_fast(len(cmds), 30.0)
        t.join(30.0)
        assert not err, err
        return [f.raw for f in frames]
    finally:
        c.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_transaction_in_pieces_matches_redis(proxy, ref, protocol):
    """A WATCHed transaction of 1,200 queued commands (the JuiceFS batch
    unlink's shape) and one without WATCH, arriving in random pieces: the
    proxy forwards the frames of the client's input by reference, and each
    piece it reads ends such a run somewhere else. Every reply byte as
    Redis's, and the data as Redis's after it. PING and ECHO, which the
    proxy answers itself, come between forwarded frames: a reference that
    ran on over them would send them to Redis too."""
    cmds = [("SET", "w1", "0"), ("WATCH", "w1", "d7"), ("GET", "w1"), ("PING",), ("ECHO", "e"),
            ("GET", "w1"), ("PING",), ("MULTI",)]
    for i in range(400):
        cmds += [("HSET", "d7", "f%d" % i, "v" * (i % 37)), ("SET", "i%d" % (7000 + i), "a" * (i % 90)),
                 ("INCRBY", "used", "-%d" % i)]
    cmds += [("GET", "nope"), ("EXEC",), ("HLEN", "d7"), ("GET", "i7399"), ("GET", "used"),
             ("MULTI",), ("DEL", "i7001"), ("HDEL", "d7", "f1", "f2"), ("EXEC",), ("UNWATCH",),
             ("HLEN", "d7"), ("EXISTS", "i7001")]
    for seed in (1, 2, 3):
        for ep in (proxy, ref):
            c = ep.raw(auth=True)
            c.cmd("FLUSHALL")
            c.close()
        want = _pieces_raw(ref, cmds, protocol, seed)
        got = _pieces_raw(proxy, cmds, protocol, seed)
        msg = diff_transcripts(cmds, want, got, "proxy")
        assert msg is None, "seed %d: %s" % (seed, msg)
