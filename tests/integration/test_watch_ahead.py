"""
WATCH answered ahead (and UNWATCH of watched keys).

A client that watches keys waits for +OK before it reads them (go-redis's
Watch; JuiceFS does it twice per batch unlink). Once Redis has accepted a
WATCH of a client's identity, the proxy writes the next WATCH to the
client's own connection and answers +OK at once; EXEC waits until Redis's
own +OK has arrived. These tests check that every transcript is Redis's,
that each WATCH still reaches Redis and still guards the transaction (also
against a write made elsewhere right after the early +OK), that a WATCH
Redis refuses after all disconnects the client before any EXEC of it ran,
and that every case where Redis could answer otherwise still reaches Redis.
An UNWATCH of keys watched (go-redis's Watch without EXEC: JuiceFS 1.2's
getattr is WATCH, GET, UNWATCH) is answered ahead the same way.
"""
import contextlib
import socket
import threading
import time

import pytest

from exacthelpers import assert_noauth_after_others_learned, assert_same_both_ways, sidecache_info
from cachehelpers import NO_ACL_CHECKS, RELAY_ARGS, relay, wait_first_acl_check  # noqa: F401
from helpers import REDIS_VERSION, ConnectionClosed, encode, wait_until

PROTOCOLS = [pytest.param(2, id="resp2"), pytest.param(3, id="resp3")]


def watch_calls(server):
    """How many WATCH commands Redis has run (INFO commandstats)."""
    stats = server.client().info("commandstats")
    return stats.get("cmdstat_watch", {}).get("calls", 0)


@contextlib.contextmanager
def busy_redis(server, seconds):
    """Redis runs a script that spins for `seconds` (from another thread)
    while the body runs; waits for it to end on exit."""
    script = ("local function now() local t = redis.call('TIME') return t[1] * 1e6 + t[2] end "
              "local s = now() while now() - s < tonumber(ARGV[1]) do end return 1")
    c = server.client()
    t = threading.Thread(target=c.eval, args=(script, 0, int(seconds * 1e6)))
    t.start()
    # the script has started once a PING waits (below busy-reply-threshold
    # Redis answers nothing while it runs)
    deadline = time.monotonic() + 5
    while True:
        with server.raw(auth=True) as probe:
            probe.send_cmd("PING")
            try:
                probe.read_frame(timeout=0.1)
            except (socket.timeout, TimeoutError):
                break
        assert time.monotonic() < deadline, "the script did not start"
    try:
        yield
    finally:
        t.join()


@contextlib.contextmanager
def denied_watch_answered_ahead(proxy, upstream, then):
    """User w may watch only `ok*` keys. Logs in, teaches the proxy with a
    WATCH of an allowed key, then, while Redis is busy (so the +OK can only
    be the proxy's, and what follows reaches the proxy before Redis refuses
    the WATCH), sends WATCH of a denied key and, after its +OK, the bytes
    `then`. Yields the client and an admin connection to Redis."""
    admin = upstream.client()
    admin.execute_command("ACL", "SETUSER", "w", "on", ">pw", "~ok*", "+@all")
    with proxy.raw() as c:
        assert c.cmd("AUTH", "w", "pw").raw == b"+OK\r\n"
        assert c.cmd("WATCH", "ok1").raw == b"+OK\r\n"  # learned
        with busy_redis(upstream, 1.5):
            assert c.cmd("WATCH", "secret", timeout=1.0).raw == b"+OK\r\n"
            c.send(then)
        yield c, admin


def ahead(proxy):
    return int(sidecache_info(proxy).get("watch_ahead", 0))


CASES = {
    "commits": [("WATCH", "k"), ("WATCH", "k", "j"), ("GET", "k"), ("MULTI",), ("SET", "k", "1"),
                ("EXEC",), ("WATCH", "k"), ("MULTI",), ("INCR", "k"), ("EXEC",), ("GET", "k")],
    "own_write_aborts": [("WATCH", "k"), ("EXEC",), ("WATCH", "k"), ("SET", "k", "2"), ("MULTI",),
                         ("INCR", "k"), ("EXEC",), ("GET", "k")],
    "errors": [("WATCH", "k"), ("UNWATCH",), ("WATCH",), ("WATCH", "k"), ("MULTI",), ("WATCH", "j"),
               ("EXEC",), ("EXEC",), ("DISCARD",)],
    "unwatch_then_exec": [("WATCH", "k"), ("WATCH", "k"), ("UNWATCH",), ("SET", "k", "3"), ("MULTI",),
                          ("INCR", "k"), ("EXEC",), ("UNWATCH",)],
    "many_keys": [("WATCH", "k")] + [("WATCH",) + tuple("f%d" % i for i in range(250))] +
                 [("MGET", "f1", "f2"), ("MULTI",), ("SET", "f7", "x"), ("EXEC",)],
    # JuiceFS 1.2's getattr (WATCH, GET, UNWATCH), twice, then a transaction
    "read_then_unwatch": [("SET", "k", "v"), ("WATCH", "k"), ("GET", "k"), ("UNWATCH",), ("WATCH", "k"),
                          ("GET", "k"), ("UNWATCH",), ("UNWATCH",), ("WATCH", "k"), ("MULTI",),
                          ("INCR", "n"), ("EXEC",), ("UNWATCH", "extra")],
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_watch_transcript_matches_redis(proxy, ref, case, protocol):
    """Byte for byte as Redis, one command at a time (where WATCH is
    answered ahead) and in one write (where it is not)."""
    assert_same_both_ways(proxy, ref, CASES[case], protocol)


@pytest.mark.proxy_only
def test_watch_ahead_still_reaches_redis_and_guards(proxy, upstream):
    """Fifty go-redis-style transactions, each with a write to the watched
    key made directly on Redis right after the early +OK: every EXEC aborts,
    exactly as with Redis, and every WATCH reached Redis."""
    direct = upstream.client()
    wait_first_acl_check(proxy)
    before = watch_calls(upstream)
    with proxy.raw(auth=True) as c:
        assert c.cmd("WATCH", "g").raw == b"+OK\r\n"  # learned
        assert c.cmd("UNWATCH").raw == b"+OK\r\n"
        first = ahead(proxy)
        for i in range(50):
            assert c.cmd("WATCH", "g").raw == b"+OK\r\n"
            direct.set("g", "theirs-%d" % i)
            assert c.cmd("GET", "g").raw == b"$%d\r\ntheirs-%d\r\n" % (len("theirs-%d" % i), i)
            assert c.cmd("MULTI").raw == b"+OK\r\n"
            assert c.cmd("SET", "g", "mine").raw == b"+QUEUED\r\n"
            assert c.cmd("EXEC").raw == b"*-1\r\n"
        assert ahead(proxy) - first == 50
        assert c.cmd("WATCH", "g").raw == b"+OK\r\n"
        assert c.cmd("MULTI").raw == b"+OK\r\n"
        assert c.cmd("SET", "g", "mine").raw == b"+QUEUED\r\n"
        assert c.cmd("EXEC").raw == b"*1\r\n+OK\r\n"
    assert watch_calls(upstream) - before == 52
    assert direct.get("g") == b"mine"


def unwatch_calls(server):
    stats = server.client().info("commandstats")
    return stats.get("cmdstat_unwatch", {}).get("calls", 0)


def unwatch_ahead(proxy):
    return int(sidecache_info(proxy).get("unwatch_ahead", 0))


@pytest.mark.proxy_only
def test_unwatch_of_watched_keys_is_answered_ahead_and_reaches_redis(proxy, upstream):
    """WATCH, GET, UNWATCH as go-redis's Watch without EXEC sends it: once
    Redis answered one UNWATCH of the identity, the UNWATCH is answered
    while Redis is busy (so the +OK can only be the proxy's), and so is the
    WATCH after it (the reply it would wait behind is one answered ahead);
    both reach Redis, and that WATCH still guards the next transaction."""
    direct = upstream.client()
    direct.set("g", "v")
    wait_first_acl_check(proxy)
    before = unwatch_calls(upstream)
    with proxy.raw(auth=True) as c:
        for _ in range(2):  # the first UNWATCH asks Redis
            assert c.cmd("WATCH", "g").raw == b"+OK\r\n"
            assert c.cmd("GET", "g").raw == b"$1\r\nv\r\n"
            assert c.cmd("UNWATCH").raw == b"+OK\r\n"
        n = unwatch_ahead(proxy)
        assert n >= 1
        assert c.cmd("WATCH", "g").raw == b"+OK\r\n"
        assert c.cmd("GET", "g").raw == b"$1\r\nv\r\n"
        with busy_redis(upstream, 1.5):
            t0 = time.monotonic()
            assert c.cmd("UNWATCH", timeout=1.0).raw == b"+OK\r\n"
            assert c.cmd("WATCH", "g", timeout=1.0).raw == b"+OK\r\n"
            assert time.monotonic() - t0 < 1.0
        assert unwatch_ahead(proxy) == n + 1
        direct.set("g", "theirs")
        assert c.cmd("GET", "g").raw == b"$6\r\ntheirs\r\n"
        assert c.cmd("MULTI").raw == b"+OK\r\n"
        assert c.cmd("SET", "g", "mine").raw == b"+QUEUED\r\n"
        assert c.cmd("EXEC").raw == b"*-1\r\n"
    assert unwatch_calls(upstream) - before == 3
    assert direct.get("g") == b"theirs"


@pytest.mark.proxy_only
def test_reads_after_an_unwatch_answered_ahead_are_hits_and_after_a_watch_not(proxy, upstream):
    """Behind an UNWATCH answered ahead (its reply from Redis not in yet),
    nothing is watched and nothing of the client's awaited: a read the
    cache holds is answered from it at once (JuiceFS 1.2's lookup after
    its getattr), while Redis is busy. Behind a WATCH answered ahead, the
    same read goes to Redis (C2) and waits for it."""
    direct = upstream.client()
    direct.set("i7", "cached")
    wait_first_acl_check(proxy)
    with proxy.raw(auth=True) as c:
        for _ in range(2):  # the identity's WATCH and UNWATCH learned
            assert c.cmd("WATCH", "i1").raw == b"+OK\r\n"
            assert c.cmd("UNWATCH").raw == b"+OK\r\n"
        wait_until(lambda: c.cmd("GET", "i7").raw == b"$6\r\ncached\r\n" and
                   int(sidecache_info(proxy)["cache_entries"]) > 0, timeout=5)
        assert c.cmd("WATCH", "i1").raw == b"+OK\r\n"
        assert c.cmd("GET", "i1").raw == b"$-1\r\n"
        hits = int(sidecache_info(proxy)["cache_hits"])
        with busy_redis(upstream, 1.5):
            # (INFO, which Redis answers too, only once it is free again)
            assert c.cmd("UNWATCH", timeout=0.5).raw == b"+OK\r\n"
            assert c.cmd("GET", "i7", timeout=0.5).raw == b"$6\r\ncached\r\n"
            assert c.cmd("WATCH", "i1", timeout=0.5).raw == b"+OK\r\n"
            c.send(encode("GET", "i7"))
            with pytest.raises((socket.timeout, TimeoutError)):
                c.read_frame(timeout=0.3)
        assert c.read_frame(timeout=5).raw == b"$6\r\ncached\r\n"
        assert int(sidecache_info(proxy)["cache_hits"]) == hits + 1
        assert c.cmd("UNWATCH").raw == b"+OK\r\n"


@pytest.mark.proxy_only
@pytest.mark.parametrize("mode", ["bcast", "default", "optin"])
def test_a_miss_behind_an_unwatch_answered_ahead_fills_in_every_tracking_mode(proxy_factory, upstream, mode):
    """JuiceFS 1.2's getattr, then a read the cache does not hold yet: it
    waits for the UNWATCH's reply and goes on the shared connection, whose
    reply fills the cache in every mode (a client's own connection is not
    tracked in default and optin), so the same read after a next getattr
    is a hit. (Found by review.)"""
    p = proxy_factory(args=("--tracking-mode", mode))
    wait_first_acl_check(p)
    upstream.client().set("i7", "v")
    with p.raw(auth=True) as w:
        for _ in range(2):  # WATCH and UNWATCH learned
            assert w.cmd("WATCH", "i1").raw == b"+OK\r\n"
            assert w.cmd("UNWATCH").raw == b"+OK\r\n"
        info = sidecache_info(p)
        hits0, ahead0 = int(info["cache_hits"]), int(info["unwatch_ahead"])
        for _ in range(3):
            assert w.cmd("WATCH", "i1").raw == b"+OK\r\n"
            assert w.cmd("GET", "i1").raw == b"$-1\r\n"
            with busy_redis(upstream, 0.3):
                assert w.cmd("UNWATCH", timeout=0.25).raw == b"+OK\r\n"
                w.send_cmd("GET", "i7")
            assert w.read_frame(timeout=5).raw == b"$1\r\nv\r\n"
        info = sidecache_info(p)
        assert int(info["unwatch_ahead"]) == ahead0 + 3
        # (at least one: Redis busy with a script may delay tracking's
        # keep-alive past its hold and empty the cache in between)
        assert int(info["cache_hits"]) > hits0, "the read after getattr never filled"


@pytest.mark.proxy_only
def test_unwatch_refused_after_the_early_ok_disconnects(proxy_factory, upstream):
    """The user's UNWATCH is taken away directly on Redis (the proxy does
    not look: acl-check-ms 0) after the proxy learned it: the next UNWATCH
    of watched keys is answered +OK ahead, Redis refuses it, and the client
    is disconnected before the EXEC it sent after ran."""
    proxy = proxy_factory(args=NO_ACL_CHECKS)
    admin = upstream.client()
    admin.execute_command("ACL", "SETUSER", "u", "on", ">pw", "~*", "+@all")
    with proxy.raw() as c:
        assert c.cmd("AUTH", "u", "pw").raw == b"+OK\r\n"
        for _ in range(2):
            assert c.cmd("WATCH", "k").raw == b"+OK\r\n"
            assert c.cmd("UNWATCH").raw == b"+OK\r\n"
        assert c.cmd("WATCH", "k").raw == b"+OK\r\n"
        admin.execute_command("ACL", "SETUSER", "u", "-unwatch")
        with busy_redis(upstream, 1.0):
            assert c.cmd("UNWATCH", timeout=0.8).raw == b"+OK\r\n"
            c.send(encode("MULTI") + encode("SET", "k", "ran") + encode("EXEC"))
        got = []
        with pytest.raises((ConnectionClosed, ConnectionError)):
            while True:
                got.append(c.read_frame(timeout=5).raw)
        assert got == [], got
    assert admin.get("k") is None
    assert int(sidecache_info(proxy)["watch_ahead_refused"]) == 1


@pytest.mark.proxy_only
def test_watch_refused_after_the_early_ok_disconnects_before_exec(proxy, upstream):
    """A user may watch only `ok*` keys. After a WATCH of an allowed key
    taught the proxy, a WATCH of a denied key is answered +OK ahead; Redis
    then refuses it, so the client is disconnected and the EXEC it sent
    never runs. The next WATCH of the denied key gets Redis's NOPERM, and
    the user is learned again from an allowed one."""
    then = encode("MULTI") + encode("SET", "ok2", "ran") + encode("EXEC")
    with denied_watch_answered_ahead(proxy, upstream, then) as (c, admin):
        got = []
        with pytest.raises((ConnectionClosed, ConnectionError)):
            while True:
                got.append(c.read_frame(timeout=5).raw)
        # closed at Redis's refusal: the replies after it are not relayed
        assert got == [], got
    assert admin.get("ok2") is None
    info = sidecache_info(proxy)
    assert int(info["watch_ahead_refused"]) == 1
    with proxy.raw() as c:
        assert c.cmd("AUTH", "w", "pw").raw == b"+OK\r\n"
        assert c.cmd("WATCH", "secret").raw.startswith(b"-NOPERM")
        n = ahead(proxy)
        assert c.cmd("WATCH", "ok1").raw == b"+OK\r\n"  # learned again
        assert c.cmd("WATCH", "ok3").raw == b"+OK\r\n"
        assert ahead(proxy) == n + 1
        assert c.cmd("MULTI").raw == b"+OK\r\n"
        assert c.cmd("SET", "ok2", "later").raw == b"+QUEUED\r\n"
        assert c.cmd("EXEC").raw == b"*1\r\n+OK\r\n"
    assert admin.get("ok2") == b"later"


@pytest.mark.proxy_only
def test_watch_refused_after_the_early_ok_ends_a_blocked_command(proxy, upstream):
    """The client sent BLPOP after its WATCH was answered ahead; Redis
    refuses the WATCH: the client is closed at once, not after a BLPOP that
    might never return, and its connection to Redis with it (an item pushed
    later stays in the list)."""
    with denied_watch_answered_ahead(proxy, upstream, encode("BLPOP", "okq", "0")) as (c, admin):
        c.expect_closed(timeout=3)
    deadline = time.monotonic() + 3
    while any(cl.get("cmd") == "blpop" for cl in admin.client_list()):
        assert time.monotonic() < deadline, admin.client_list()
        time.sleep(0.02)
    admin.rpush("okq", "x")
    time.sleep(0.1)
    assert admin.llen("okq") == 1


@pytest.mark.proxy_only
def test_a_sticky_session_of_another_user_teaches_nothing(proxy, upstream):
    """User a may not WATCH. Its session turns STICKY (CLIENT NO-EVICT, on
    6.2 CLIENT ID) and
    logs in as b, whose WATCH Redis accepts: that must not teach a's pool.
    Another client of a, pinned on a ready connection, still gets NOPERM."""
    admin = upstream.client()
    admin.execute_command("ACL", "SETUSER", "a", "on", ">pa", "~*", "+@all", "-watch")
    admin.execute_command("ACL", "SETUSER", "b", "on", ">pb", "~*", "+@all")
    with proxy.raw() as s, proxy.raw() as other:
        assert s.cmd("AUTH", "a", "pa").raw == b"+OK\r\n"
        if REDIS_VERSION >= (7, 0):
            assert s.cmd("CLIENT", "NO-EVICT", "on").raw == b"+OK\r\n"
        else:  # (6.2 has no NO-EVICT; CLIENT ID is sticky too)
            assert s.cmd("CLIENT", "ID").raw.startswith(b":")
        assert s.cmd("AUTH", "b", "pb").raw == b"+OK\r\n"
        assert s.cmd("WATCH", "k").raw == b"+OK\r\n"
        assert other.cmd("AUTH", "a", "pa").raw == b"+OK\r\n"
        assert other.cmd("BLPOP", "q", "0.01").raw in (b"*-1\r\n", b"_\r\n")  # a ready pinned connection
        for _ in range(3):
            assert other.cmd("WATCH", "k").raw.startswith(b"-NOPERM")
    assert int(sidecache_info(proxy).get("watch_ahead_refused", 0)) == 0


@pytest.mark.proxy_only
def test_acl_queued_in_multi_counts_when_exec_runs_it(proxy, upstream):
    """An ACL SETUSER queued in MULTI changes permissions at EXEC. A WATCH
    accepted in between must not make the proxy answer the next WATCH ahead
    once EXEC has denied it: that one gets Redis's NOPERM."""
    admin = upstream.client()
    admin.execute_command("ACL", "SETUSER", "w", "on", ">pw", "~*", "+@all")
    with proxy.raw(auth=True) as adm, proxy.raw() as c:
        assert c.cmd("AUTH", "w", "pw").raw == b"+OK\r\n"
        assert c.cmd("WATCH", "k").raw == b"+OK\r\n"
        assert adm.cmd("MULTI").raw == b"+OK\r\n"
        assert adm.cmd("ACL", "SETUSER", "w", "-watch").raw == b"+QUEUED\r\n"
        assert c.cmd("WATCH", "k").raw == b"+OK\r\n"  # asks Redis: learned again
        assert adm.cmd("EXEC").raw == b"*1\r\n+OK\r\n"
        assert c.cmd("WATCH", "k").raw.startswith(b"-NOPERM")
        assert c.cmd("PING").raw == b"+PONG\r\n"
    assert int(sidecache_info(proxy).get("watch_ahead_refused", 0)) == 0


@pytest.mark.proxy_only
def test_acl_through_a_tunnel_counts_when_its_reply_comes(relay, proxy_factory, upstream):
    """An ACL SETUSER sent through a tunnel (here the client's own CLIENT
    TRACKING) is not matched to its reply. A WATCH that Redis accepts while
    the relay still holds the ACL command back must not make the proxy
    answer the next WATCH ahead once the ACL has run: that one gets Redis's
    NOPERM, and nobody is disconnected."""
    p = proxy_factory(up=relay, args=RELAY_ARGS + NO_ACL_CHECKS)
    upstream.client().execute_command("ACL", "SETUSER", "w", "on", ">pw", "~*", "+@all")
    with p.raw(auth=True) as t, p.raw() as c:
        assert c.cmd("AUTH", "w", "pw").raw == b"+OK\r\n"
        assert c.cmd("WATCH", "k").raw == b"+OK\r\n"
        assert t.cmd("CLIENT", "TRACKING", "on").raw == b"+OK\r\n"
        hold = relay.hold_request(("ACL", "SETUSER", "w", "-watch"))
        t.send(encode("ACL", "SETUSER", "w", "-watch"))
        hold.wait()
        assert c.cmd("WATCH", "k").raw == b"+OK\r\n"  # asks Redis: learned again
        hold.release()
        assert t.read_frames(1)[0].raw == b"+OK\r\n"
        assert c.cmd("WATCH", "k").raw.startswith(b"-NOPERM")
        assert c.cmd("PING").raw == b"+PONG\r\n"
        # once the tunnel is gone, what Redis answers is learned again: the
        # first WATCH asks Redis, the next is answered ahead
        upstream.client().execute_command("ACL", "SETUSER", "w", "+watch")
        t.close()
        # connected: c and the INFO query's own connection
        wait_until(lambda: int(sidecache_info(p)["connected_clients"]) == 2, what="the tunnel close")
        n = ahead(p)
        assert c.cmd("WATCH", "k").raw == b"+OK\r\n"
        assert ahead(p) == n
        assert c.cmd("WATCH", "k").raw == b"+OK\r\n"
        assert ahead(p) == n + 1, "no WATCH answered ahead after the tunnel closed"
    assert int(sidecache_info(p).get("watch_ahead_refused", 0)) == 0


@pytest.mark.proxy_only
def test_watch_is_not_answered_ahead_when_redis_must_answer(proxy_factory, upstream):
    """Not before Redis accepted one WATCH of the identity, not when the
    client sent more after the WATCH (it does not wait), not for WATCH
    without keys or inside MULTI, and not after an ACL command through the
    proxy until Redis accepts a WATCH again. (Without acl-check-ms: a list
    it reads, the first or one the SETUSER changed, asks again at a moment
    of its own; test_cache_contract's C8 tests cover those.)"""
    proxy = proxy_factory(args=NO_ACL_CHECKS)
    with proxy.raw(auth=True) as c:
        n = ahead(proxy)
        assert c.cmd("WATCH", "a").raw == b"+OK\r\n"
        assert ahead(proxy) == n  # the first one asks Redis
        c.send(encode("WATCH", "b") + encode("GET", "b"))
        assert [f.raw for f in c.read_frames(2)] == [b"+OK\r\n", b"$-1\r\n"]
        assert ahead(proxy) == n
        assert c.cmd("WATCH").raw.startswith(b"-ERR wrong number of arguments")
        assert c.cmd("MULTI").raw == b"+OK\r\n"
        assert c.cmd("WATCH", "a").raw == b"-ERR WATCH inside MULTI is not allowed\r\n"
        assert c.cmd("DISCARD").raw == b"+OK\r\n"
        assert ahead(proxy) == n
        assert c.cmd("WATCH", "a").raw == b"+OK\r\n"
        assert ahead(proxy) == n + 1
        try:
            assert c.cmd("ACL", "SETUSER", "default", "-watch").raw == b"+OK\r\n"
            assert c.cmd("WATCH", "a").raw.startswith(b"-NOPERM")
            assert c.cmd("WATCH", "a").raw.startswith(b"-NOPERM")
        finally:
            assert c.cmd("ACL", "SETUSER", "default", "+watch").raw == b"+OK\r\n"
        assert c.cmd("WATCH", "a").raw == b"+OK\r\n"
        assert ahead(proxy) == n + 1
        assert c.cmd("WATCH", "a").raw == b"+OK\r\n"
        assert ahead(proxy) == n + 2


@pytest.mark.proxy_only
def test_watch_ahead_off(proxy_factory, upstream):
    """`watch-ahead no`: every WATCH waits for Redis."""
    p = proxy_factory(args=["--watch-ahead", "no"])
    with p.raw(auth=True) as c:
        for _ in range(5):
            assert c.cmd("WATCH", "a").raw == b"+OK\r\n"
    assert ahead(p) == 0


def test_watch_without_auth_gets_noauth(redis_factory, proxy_factory):
    """Behind requirepass, a client that logged in teaches the proxy; one
    that did not still gets Redis's NOAUTH."""
    assert_noauth_after_others_learned(redis_factory, proxy_factory, "WATCH", "a")
