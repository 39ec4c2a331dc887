"""MULTI/EXEC/DISCARD and WATCH through the proxy, as Redis does them."""
import time

import pytest

from cachehelpers import Stats, wait_tracking_active
from helpers import assert_same_steps, encode, wait_until


@pytest.mark.parametrize("via", ["proxy", "direct"])
@pytest.mark.parametrize("key", ["plain:k", "i7", "d7"])
def test_watch_conflict_exec_returns_nil(proxy, upstream, via, key):
    """A WATCHes key, reads it, queues a write; B modifies the key (through
    the proxy, or directly on Redis); A's EXEC returns nil and A's write is
    not applied. Keys of cacheable shape are read first so the proxy may hold
    them in its cache."""
    hash_key = key.startswith("d")
    r = proxy.client()
    if hash_key:
        r.hset(key, "f", "orig")
    else:
        r.set(key, "orig")
    for _ in range(2):
        r.hget(key, "f") if hash_key else r.get(key)
    other = proxy.client() if via == "proxy" else upstream.client()
    with proxy.raw() as a:
        assert a.cmd("WATCH", key).raw == b"+OK\r\n"
        read = a.cmd("HGET", key, "f") if hash_key else a.cmd("GET", key)
        assert read.raw == b"$4\r\norig\r\n"
        assert a.cmd("MULTI").raw == b"+OK\r\n"
        q = a.cmd("HSET", key, "f", "fromA") if hash_key else a.cmd("SET", key, "fromA")
        assert q.raw == b"+QUEUED\r\n"
        if hash_key:
            other.hset(key, "f", "fromB")
        else:
            other.set(key, "fromB")
        f = a.cmd("EXEC")
        assert f.raw == b"*-1\r\n", "EXEC after a conflicting write must be nil, got %r" % f
        # WATCH state is gone after EXEC: a new transaction runs.
        assert a.cmd("MULTI").raw == b"+OK\r\n"
        a.cmd("GET", "x")
        assert a.cmd("EXEC").raw == b"*1\r\n$-1\r\n"
    val = r.hget(key, "f") if hash_key else r.get(key)
    assert val == b"fromB"


def test_watch_conflict_exec_returns_nil_resp3(proxy):
    r = proxy.client()
    with proxy.raw(protocol=3) as a:
        a.cmd("WATCH", "w3")
        a.cmd("MULTI")
        a.cmd("INCR", "w3")
        r.set("w3", "10")
        f = a.cmd("EXEC")
        assert f.raw == b"_\r\n"
    assert r.get("w3") == b"10"


def test_watch_without_conflict_exec_runs(proxy):
    r = proxy.client()
    r.set("i8", "1")
    with proxy.raw() as a:
        a.cmd("WATCH", "i8", "other")
        assert a.cmd("GET", "i8").raw == b"$1\r\n1\r\n"
        r.set("unrelated", "x")                   # not watched
        a.cmd("MULTI")
        a.cmd("INCR", "i8")
        a.cmd("GET", "i8")
        assert a.cmd("EXEC").raw == b"*2\r\n:2\r\n$1\r\n2\r\n"
    assert r.get("i8") == b"2"


def test_unwatch_and_discard_clear_the_watch(proxy):
    r = proxy.client()
    with proxy.raw() as a:
        a.cmd("WATCH", "u")
        assert a.cmd("UNWATCH").raw == b"+OK\r\n"
        r.set("u", "changed")
        a.cmd("MULTI")
        a.cmd("SET", "u", "mine")
        assert a.cmd("EXEC").raw == b"*1\r\n+OK\r\n"
        a.cmd("WATCH", "u")
        a.cmd("MULTI")
        assert a.cmd("DISCARD").raw == b"+OK\r\n"
        r.set("u", "again")
        a.cmd("MULTI")
        a.cmd("SET", "u", "mine2")
        assert a.cmd("EXEC").raw == b"*1\r\n+OK\r\n"
    assert r.get("u") == b"mine2"


def test_watch_reads_see_latest_value_not_a_cached_one(proxy, upstream):
    """Under WATCH a read goes to Redis: a change made directly on Redis is
    seen by the WATCHing client's GET (C2)."""
    r = proxy.client()
    r.set("i9", "cached")
    assert r.get("i9") == b"cached"
    assert r.get("i9") == b"cached"
    upstream.client().set("i9", "fresh")
    with proxy.raw() as a:
        a.cmd("WATCH", "i9")
        # The invalidation may still be in flight for ordinary reads, but a
        # read under WATCH must come from Redis itself.
        assert a.cmd("GET", "i9").raw == b"$5\r\nfresh\r\n"
        a.cmd("MULTI")
        a.cmd("GET", "i9")
        assert a.cmd("EXEC").raw == b"*1\r\n$5\r\nfresh\r\n"


@pytest.mark.parametrize("protocol", [2, 3])
def test_multi_exec_discard_basics_match_redis(proxy, ref, protocol):
    steps = [
        ("MULTI",), ("SET", "t", "1"), ("INCR", "t"), ("GET", "t"), ("HSET", "d3", "n", "v"),
        ("HGET", "d3", "n"), ("GET", "i3"), ("EXEC",),
        ("MULTI",), ("SET", "t", "discarded"), ("DISCARD",), ("GET", "t"),
        ("EXEC",), ("DISCARD",), ("MULTI",), ("MULTI",), ("DISCARD",),
        # A queued command with bad arity aborts the transaction.
        ("MULTI",), ("SET", "t", "x"), ("GET",), ("EXEC",), ("GET", "t"),
        # A runtime error inside EXEC does not stop the others.
        ("SET", "s", "str"), ("MULTI",), ("INCR", "s"), ("SET", "t", "after"), ("EXEC",), ("GET", "t"),
        # WATCH inside MULTI is refused; an empty transaction is an empty array.
        ("MULTI",), ("WATCH", "t"), ("EXEC",), ("MULTI",), ("EXEC",),
        ("MULTI",), ("ZADD", "z", "1.5", "a"), ("ZSCORE", "z", "a"), ("HGETALL", "d3"), ("EXEC",),
        ("MULTI",), ("NOSUCHCMD",), ("EXEC",),
    ]
    got = assert_same_steps(proxy, ref, steps, protocol=protocol)
    assert got[7][1].startswith(b"*6\r\n+OK\r\n:2\r\n$1\r\n2\r\n")
    assert got[11][1] == b"$1\r\n2\r\n", "DISCARD must not apply queued writes"
    assert got[20][1].startswith(b"-EXECABORT")


def test_multi_exec_pipelined_in_one_write(proxy, upstream):
    """A whole transaction sent in one write, interleaved with another
    client's writes: the transaction's results are its own and atomic."""
    with proxy.raw() as a:
        a.send(b"".join(encode(*c) for c in
                        [("MULTI",), ("SET", "m", "1"), ("INCR", "m"), ("INCR", "m"), ("EXEC",),
                         ("GET", "m")]))
        fr = a.read_frames(6)
    assert [f.raw for f in fr] == [b"+OK\r\n", b"+QUEUED\r\n", b"+QUEUED\r\n", b"+QUEUED\r\n",
                                   b"*3\r\n+OK\r\n:2\r\n:3\r\n", b"$1\r\n3\r\n"]
    assert upstream.client().get("m") == b"3"


@pytest.mark.parametrize("target", ["proxy", "ref"])
def test_queued_replies_arrive_while_exec_runs(request, target):
    """A WATCH transaction longer than Redis reads at once (16 KB), sent in
    one write: Redis sends the +OK and +QUEUED replies of what it read first
    before it runs EXEC (here held up by a DEBUG SLEEP queued at its end),
    and the proxy passes them on as they come, not with EXEC's reply."""
    ep = request.getfixturevalue(target)
    n = 2000
    cmds = ([("WATCH", "q"), ("MULTI",)] + [("SET", "q", "v" * 30)] * n
            + [("DEBUG", "SLEEP", "2"), ("EXEC",)])
    with ep.raw(auth=True) as c:
        c.send(b"".join(encode(*x) for x in cmds))
        first = c.read_frames(2 + n // 2, timeout=1.2)
        assert [f.raw for f in first] == [b"+OK\r\n"] * 2 + [b"+QUEUED\r\n"] * (n // 2)
        rest = c.read_frames(n // 2 + 2, timeout=10.0)
        assert [f.raw for f in rest[:-1]] == [b"+QUEUED\r\n"] * (n // 2 + 1)
        assert rest[-1].raw.startswith(b"*%d\r\n+OK\r\n" % (n + 1))


def test_queue_time_refusal_still_aborts_after_moving_to_own_connection(proxy, upstream):
    """A queued command Redis refused (OOM) makes EXEC abort, as in Redis,
    also when the refusal has gone away by the time a later command (PING)
    moves the transaction to a connection of the client's own, where what
    was queued is sent again."""
    r = upstream.client()
    r.config_set("maxmemory-policy", "noeviction")
    r.set("filler", "x" * 200000)
    r.config_set("maxmemory", "1")
    try:
        with proxy.raw() as a:
            assert a.cmd("MULTI").raw == b"+OK\r\n"
            assert a.cmd("SET", "k", "1").raw.startswith(b"-OOM ")
            r.config_set("maxmemory", "0")
            assert a.cmd("PING").raw == b"+QUEUED\r\n"
            assert a.cmd("SET", "k2", "2").raw == b"+QUEUED\r\n"
            assert a.cmd("EXEC").raw == b"-EXECABORT Transaction discarded because of previous errors.\r\n"
    finally:
        r.config_set("maxmemory", "0")
    assert r.get("k") is None and r.get("k2") is None


def test_transaction_sent_whole_runs_when_the_client_leaves_at_once(proxy, upstream):
    """A client writes WATCH ... EXEC and closes without reading: Redis runs
    what it read, so must the proxy, though the client's own connection was
    still connecting when the client left."""
    n = 10
    for i in range(n):
        a = proxy.raw()
        a.send(encode("WATCH", "w") + encode("MULTI") + encode("SET", "left%da" % i, "x")
               + encode("SET", "left%db" % i, "y") + encode("EXEC"))
        a.close()
    r = upstream.client()
    keys = ["left%d%s" % (i, s) for i in range(n) for s in "ab"]
    wait_until(lambda: r.exists(*keys) == 2 * n, timeout=3.0, interval=0.05,
               what="every transaction to run")


def test_reused_own_connection_does_not_carry_the_previous_clients_name(proxy):
    """A connection of a client's own that goes back to the pool keeps, on
    Redis, the name its client gave; the next client, which has none, must
    not show that name (CLIENT GETNAME inside MULTI runs on Redis)."""
    with proxy.raw() as a:
        assert a.cmd("CLIENT", "SETNAME", "alpha").raw == b"+OK\r\n"
        assert a.cmd("WATCH", "k").raw == b"+OK\r\n"
        assert a.cmd("UNWATCH").raw == b"+OK\r\n"
    time.sleep(0.2)
    with proxy.raw() as b:
        assert b.cmd("WATCH", "k").raw == b"+OK\r\n"
        assert b.cmd("MULTI").raw == b"+OK\r\n"
        assert b.cmd("CLIENT", "GETNAME").raw == b"+QUEUED\r\n"
        assert b.cmd("EXEC").raw == b"*1\r\n$-1\r\n"


@pytest.mark.proxy_only
@pytest.mark.parametrize("queued", [("PING",), ("ECHO", "x"), ("SELECT", "0")])
def test_a_transaction_that_queued_a_ping_gives_its_own_connection_back(proxy, queued):
    """A PING or ECHO queued in MULTI moves the transaction to a connection
    of the client's own and changes nothing of it: after EXEC the client is
    back on the shared connections (its pipelined writes batched, its reads
    answered from the cache). A SELECT, whose state Redis gives that
    connection at EXEC, keeps it the client's (no batches)."""
    st = Stats(proxy)
    wait_tracking_active(proxy, stats=st)
    with proxy.raw() as c:
        assert c.cmd("SET", "i5", "v").raw == b"+OK\r\n"
        steps = [("MULTI",), queued, ("SET", "a", "1"), ("EXEC",)]
        replies = [f.raw for f in c.pipeline(steps)]
        assert replies[-1].startswith(b"*2\r\n"), replies
        before = st.get()
        c.send(b"".join(encode("SET", "k%d" % i, "v") for i in range(50)))
        assert [f.raw for f in c.read_frames(50)] == [b"+OK\r\n"] * 50
        for _ in range(5):
            assert c.cmd("GET", "i5").raw == b"$1\r\nv\r\n"
        after = st.get()
    shared = queued[0] != "SELECT"
    assert (after["batch_blocks"] > before["batch_blocks"]) == shared, (before, after)
    assert (after["cache_hits"] > before["cache_hits"]) == shared, (before, after)
