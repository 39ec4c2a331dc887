"""
UNWATCH with nothing watched, answered by the proxy.

go-redis ends every transaction with UNWATCH (Tx.Close), after EXEC has
already dropped the watches; JuiceFS pays that round trip on every
metadata write. Once Redis has answered +OK to an UNWATCH of a client's
identity (so its ACL allows the command), the proxy answers an UNWATCH on a
shared connection itself. These tests check that the answer is exactly
Redis's, that Redis no longer sees those UNWATCHes, that WATCH still works
around them, and that every case where Redis would answer otherwise
(arguments, ACL, no AUTH) still reaches Redis.
"""
import pytest

from cachehelpers import NO_ACL_CHECKS, wait_first_acl_check
from exacthelpers import assert_noauth_after_others_learned, assert_same_both_ways, diff_transcripts, sidecache_info
from helpers import run_steps

PROTOCOLS = [pytest.param(2, id="resp2"), pytest.param(3, id="resp3")]


def unwatch_calls(server):
    """How many UNWATCH commands Redis has run (INFO commandstats)."""
    stats = server.client().info("commandstats")
    return stats.get("cmdstat_unwatch", {}).get("calls", 0)


def go_redis_txn(c, key):
    """One go-redis Watch(): WATCH, a read, MULTI/INCR/EXEC, then UNWATCH."""
    assert c.cmd("WATCH", key).raw == b"+OK\r\n"
    c.cmd("GET", key)
    assert c.cmd("MULTI").raw == b"+OK\r\n"
    assert c.cmd("INCR", key).raw == b"+QUEUED\r\n"
    ex = c.cmd("EXEC").raw
    return ex, c.cmd("UNWATCH").raw


CASES = {
    "after_exec": [("WATCH", "t"), ("MULTI",), ("SET", "t", "1"), ("EXEC",), ("UNWATCH",),
                   ("UNWATCH",), ("unwatch",), ("GET", "t")],
    "with_arguments": [("UNWATCH",), ("UNWATCH", "t"), ("UNWATCH",), ("UNWATCH", "a", "b")],
    "while_watching": [("UNWATCH",), ("WATCH", "t"), ("UNWATCH",), ("SET", "t", "x"), ("MULTI",),
                       ("INCR", "t"), ("EXEC",), ("UNWATCH",)],
    "inside_multi": [("UNWATCH",), ("MULTI",), ("UNWATCH",), ("SET", "t", "1"), ("EXEC",),
                     ("UNWATCH",)],
    "after_discard": [("UNWATCH",), ("WATCH", "t"), ("MULTI",), ("DISCARD",), ("UNWATCH",),
                      ("UNWATCH",)],
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_unwatch_transcript_matches_redis(proxy, ref, case, protocol):
    """Byte for byte as Redis, one command at a time and in one write."""
    assert_same_both_ways(proxy, ref, CASES[case], protocol)


def test_unwatch_after_exec_does_not_reach_redis(proxy, upstream):
    """Ten go-redis transactions: the first UNWATCH teaches the proxy, the
    other nine are answered without a round trip; every EXEC committed."""
    wait_first_acl_check(proxy)
    before = unwatch_calls(upstream)
    local_before = int(sidecache_info(proxy).get("unwatch_local", 0))
    with proxy.raw(auth=True) as c:
        for i in range(10):
            ex, unw = go_redis_txn(c, "cnt")
            assert ex == b"*1\r\n:%d\r\n" % (i + 1)
            assert unw == b"+OK\r\n"
    assert unwatch_calls(upstream) - before == 1
    assert int(sidecache_info(proxy)["unwatch_local"]) - local_before == 9
    assert upstream.client().get("cnt") == b"10"


def test_watch_still_detects_conflicts_after_a_local_unwatch(proxy, upstream):
    """A local UNWATCH must not leave a watch behind nor lose the next one:
    a conflicting write after the next WATCH aborts that EXEC, and a
    transaction after it commits."""
    with proxy.raw(auth=True) as c, proxy.raw(auth=True) as other:
        assert c.cmd("UNWATCH").raw == b"+OK\r\n"  # learned
        assert c.cmd("WATCH", "w").raw == b"+OK\r\n"
        assert c.cmd("MULTI").raw == b"+OK\r\n"
        assert c.cmd("SET", "w", "1").raw == b"+QUEUED\r\n"
        assert c.cmd("EXEC").raw == b"*1\r\n+OK\r\n"
        assert c.cmd("UNWATCH").raw == b"+OK\r\n"  # local
        assert c.cmd("WATCH", "w").raw == b"+OK\r\n"
        assert other.cmd("SET", "w", "theirs").raw == b"+OK\r\n"
        assert c.cmd("MULTI").raw == b"+OK\r\n"
        assert c.cmd("SET", "w", "mine").raw == b"+QUEUED\r\n"
        assert c.cmd("EXEC").raw in (b"*-1\r\n", b"_\r\n")
        assert c.cmd("UNWATCH").raw == b"+OK\r\n"
        assert c.cmd("MULTI").raw == b"+OK\r\n"
        assert c.cmd("SET", "w", "later").raw == b"+QUEUED\r\n"
        assert c.cmd("EXEC").raw == b"*1\r\n+OK\r\n"
    assert upstream.client().get("w") == b"later"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_unwatch_denied_by_acl_is_never_answered_here(proxy, upstream, ref, protocol):
    """A user whose ACL denies UNWATCH gets Redis's NOPERM every time: the
    proxy never learned that it may answer."""
    cmds = [("UNWATCH",), ("WATCH", "t"), ("MULTI",), ("SET", "t", "1"), ("EXEC",), ("UNWATCH",),
            ("UNWATCH",)]
    for s in (upstream, ref):
        s.client().execute_command("ACL", "SETUSER", "default", "-unwatch")
    try:
        want = [r for _, r in run_steps(ref, cmds, protocol=protocol)]
        got = [r for _, r in run_steps(proxy, cmds, protocol=protocol)]
    finally:
        for s in (upstream, ref):
            s.client().execute_command("ACL", "SETUSER", "default", "+unwatch")
    assert want[0].startswith(b"-NOPERM"), want[0]
    msg = diff_transcripts(cmds, want, got)
    assert msg is None, msg


def test_acl_change_through_the_proxy_makes_it_ask_again(proxy_factory, upstream):
    """Learned, then UNWATCH denied by an ACL SETUSER sent through the
    proxy: the next UNWATCH goes to Redis and gets NOPERM; allowed again,
    it is learned again. (Without acl-check-ms: a list it reads asks every
    permission again too, at a moment of its own; test_cache_contract's C8
    tests cover those.)"""
    proxy = proxy_factory(args=NO_ACL_CHECKS)
    with proxy.raw(auth=True) as c:
        assert c.cmd("UNWATCH").raw == b"+OK\r\n"
        assert c.cmd("UNWATCH").raw == b"+OK\r\n"
        local = int(sidecache_info(proxy)["unwatch_local"])
        assert local >= 1
        try:
            assert c.cmd("ACL", "SETUSER", "default", "-unwatch").raw == b"+OK\r\n"
            assert c.cmd("UNWATCH").raw.startswith(b"-NOPERM")
            assert c.cmd("UNWATCH").raw.startswith(b"-NOPERM")
        finally:
            assert c.cmd("ACL", "SETUSER", "default", "+unwatch").raw == b"+OK\r\n"
        assert int(sidecache_info(proxy)["unwatch_local"]) == local
        before = unwatch_calls(upstream)
        assert c.cmd("UNWATCH").raw == b"+OK\r\n"
        assert c.cmd("UNWATCH").raw == b"+OK\r\n"
        assert unwatch_calls(upstream) - before == 1


def test_unwatch_without_auth_gets_noauth(redis_factory, proxy_factory):
    """Behind requirepass, a client that logged in teaches the proxy; one
    that did not still gets Redis's NOAUTH."""
    assert_noauth_after_others_learned(redis_factory, proxy_factory, "UNWATCH")
