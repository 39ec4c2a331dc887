"""
A Redis user whose ACL denies MULTI, EXEC or DISCARD.

sidecache puts MULTI … EXEC around pipelined writes (write batches), and
answers MULTI without WATCH itself, checking each queued command on Redis
inside MULTI … DISCARD. For a user who may not send those, a refused MULTI
would let the commands after it run alone (and a batch or a transaction
sent again would run them twice), and a refused DISCARD would leave a
shared connection inside MULTI for the next client (a refused EXEC is
EXECABORT: nothing ran, Redis left MULTI). The proxy must never
do either. A write batch's commands that ran alone get their own replies,
as a direct client would; a local transaction's connection goes (what
waited on it fails as on a lost connection, nothing is sent again). From
then on that user's transactions and writes go to Redis as the client
sent them, so Redis answers them exactly as it answers a direct client.
"""
import pytest

from cachehelpers import NO_ACL_CHECKS, RELAY_ARGS, relay, wait_tracking_active  # noqa: F401 (a fixture)
from exacthelpers import sidecache_info
from helpers import encode

pytestmark = pytest.mark.proxy_only


def deny(server, *cmds):
    server.client().execute_command("ACL", "SETUSER", "default", *["-" + c for c in cmds])


def transcript(conn, steps):
    return [conn.cmd(*s).raw for s in steps]


def test_multi_denied_while_a_local_transaction_is_open(proxy, upstream):
    """MULTI, then three INCRs, one at a time, MULTI denied. The first
    check finds out (its INCR ran, alone): the client is disconnected, as on
    a lost connection, so that no EXECABORT tells it nothing ran and the
    other INCRs are never sent. cnt: 1, the others: never set."""
    from helpers import ConnectionClosed
    deny(upstream, "multi")
    with proxy.raw() as c:
        assert c.cmd("MULTI").raw == b"+OK\r\n"
        assert c.cmd("INCR", "k1").raw.startswith(b"-ERR sidecache:")
        with pytest.raises(ConnectionClosed):
            for k in ("k2", "k3"):
                c.cmd("INCR", k)
            c.cmd("EXEC")
    assert upstream.client().mget("k1", "k2", "k3") == [b"1", None, None]


def test_exec_denied_stops_write_batches(proxy_factory, upstream):
    """EXEC denied: a batch's EXEC gets EXECABORT naming EXEC, and its
    commands go again one by one. The proxy learns: the next pipeline is
    not batched at all (one round trip, not a refused block and a replay).
    (No ACL checks: the next would see deny()'s change and forget what the
    proxy learned.)"""
    p = proxy_factory(args=NO_ACL_CHECKS)
    deny(upstream, "exec")
    with p.raw() as a:
        a.send(encode("INCR", "k") * 2)
        assert [f.raw for f in a.read_frames(2)] == [b":1\r\n", b":2\r\n"]
        before = sidecache_info(p)
        a.send(encode("INCR", "k") * 2)
        assert [f.raw for f in a.read_frames(2)] == [b":3\r\n", b":4\r\n"]
        after = sidecache_info(p)
    assert after["batch_blocks"] == before["batch_blocks"], (before, after)
    assert after["batch_replays"] == before["batch_replays"], (before, after)


def test_multi_denied_never_runs_a_command_twice(proxy, upstream, ref):
    """MULTI / INCR / EXEC, one command at a time, twice. The first time the
    proxy answers MULTI itself and learns from the check that Redis refuses
    it: INCR ran once (the check), fails, and the client is disconnected as
    on a lost connection. The second time Redis answers everything, as it
    answers a direct client."""
    from helpers import ConnectionClosed
    deny(upstream, "multi")
    deny(ref, "multi")
    steps = [("MULTI",), ("INCR", "cnt"), ("EXEC",)]
    with proxy.raw() as c:
        first = transcript(c, steps[:2])
        with pytest.raises(ConnectionClosed):
            c.cmd("EXEC")  # no EXECABORT: that would say nothing ran
    assert first[0] == b"+OK\r\n" and first[1].startswith(b"-ERR sidecache:"), first
    assert upstream.client().get("cnt") == b"1", ("the INCR must run once", first)
    with proxy.raw() as c:
        second = transcript(c, steps)
    upstream.client().set("cnt", "0")
    ref.client().set("cnt", "0")
    with proxy.raw() as c, ref.raw() as r:
        assert transcript(c, steps) == transcript(r, steps), second
    assert upstream.client().get("cnt") == b"1"


@pytest.mark.parametrize("n", [3, 300])
def test_write_batch_with_multi_denied_never_runs_a_command_twice(proxy_factory, upstream, ref, n):
    """n pipelined INCRs (a write batch: 300 are a full block of 250 and
    more), and a GET after them. The first time MULTI is refused: the INCRs
    ran alone, once each, and each gets its own reply, as from Redis
    directly (no replay, and the EXEC's error is no one's). The second
    pipeline is not batched: Redis's own replies."""
    proxy = proxy_factory(args=NO_ACL_CHECKS)
    deny(upstream, "multi")
    deny(ref, "multi")
    pipeline = encode("INCR", "cnt") * n + encode("GET", "cnt")
    for round in (1, 2):
        with proxy.raw() as c, ref.raw() as r:
            c.send(pipeline)
            r.send(pipeline)
            got, want = [f.raw for f in c.read_frames(n + 1)], [f.raw for f in r.read_frames(n + 1)]
            assert c.cmd("PING").raw == b"+PONG\r\n", "nothing more than the replies"
        assert got == want, (round, [(i, g, w) for i, (g, w) in enumerate(zip(got, want)) if g != w][:3])
        assert got[-1] == b"$%d\r\n%d\r\n" % (len(str(round * n)), round * n), got[-1]
        assert upstream.client().get("cnt") == str(round * n).encode(), "each INCR must run once"
        assert sidecache_info(proxy)["batch_blocks"] == 1, "a batch was tried again"
        assert sidecache_info(proxy)["batch_relayed"] == 1


def test_write_batch_with_multi_denied_relays_each_commands_own_error(proxy, upstream, ref):
    """A batch of a user denied MULTI whose commands Redis refuses or fails
    alone (SET denied too, a WRONGTYPE): each gets Redis's own error, in
    order, between the replies of the commands that ran."""
    for server in (upstream, ref):
        deny(server, "multi", "set")
        server.client().execute_command("RPUSH", "lst", "a")
    pipeline = encode("INCR", "a") + encode("SET", "b", "1") + encode("INCR", "lst") + encode("INCR", "a")
    with proxy.raw() as c, ref.raw() as r:
        c.send(pipeline)
        r.send(pipeline)
        got, want = [f.raw for f in c.read_frames(4)], [f.raw for f in r.read_frames(4)]
    assert got == want, (got, want)
    assert got[0] == b":1\r\n" and got[1].startswith(b"-NOPERM") and got[2].startswith(b"-WRONGTYPE"), got
    assert upstream.client().get("a") == b"2"


@pytest.mark.parametrize("other", ["db 1", "RESP3"])
def test_a_user_denied_multi_is_known_in_every_database_and_protocol(proxy_factory, upstream, ref, other):
    """What Redis refused a user is its ACL's, whatever the database or the
    protocol: once a batch's MULTI was refused in db 0, the same user's
    pipelined writes in another database, or in RESP3, go to Redis as sent
    and get Redis's own replies, never the refusal's error again. (No ACL
    checks: the ACL changed on Redis would make the proxy forget what it
    learnt between the two pipelines.)"""
    proxy = proxy_factory(args=("--acl-check-ms", "0"))
    wait_tracking_active(proxy)  # (writes are batched once Redis's command table is in)
    deny(upstream, "multi")
    deny(ref, "multi")
    with proxy.raw() as c:
        c.send(encode("INCR", "cnt") * 3)
        first = [f.raw for f in c.read_frames(3)]
    assert first == [b":1\r\n", b":2\r\n", b":3\r\n"], first
    assert sidecache_info(proxy)["batch_blocks"] == 1, "setup: the first INCRs were a batch"
    setup = [("SELECT", "1")] if other == "db 1" else [("HELLO", "3")]
    pipeline = encode("INCR", "n") * 300
    with proxy.raw() as c, ref.raw() as r:
        for step in setup:
            c.cmd(*step)
            r.cmd(*step)
        c.send(pipeline)
        r.send(pipeline)
        got, want = [f.raw for f in c.read_frames(300)], [f.raw for f in r.read_frames(300)]
    assert got == want, [g for g in got if g.startswith(b"-")][:3]
    assert sidecache_info(proxy)["batch_blocks"] == 1, "a batch was tried again"


def test_a_connection_lost_in_a_batch_whose_multi_was_refused_keeps_the_replies_it_had(relay, proxy_factory,
                                                                                         upstream):
    """A batch whose MULTI Redis refused: its commands ran alone, one by
    one. When the connection is lost after Redis answered two of them, those
    two get their replies, as a direct client would have read them before
    the connection closed, and the others the lost connection's error (they
    may have run). Nothing is sent again."""
    deny(upstream, "multi")
    p = proxy_factory(up=relay, args=RELAY_ARGS + ("--upstream-connections", "1"))
    wait_tracking_active(p)  # (writes are batched once Redis's command table is in)
    hold = relay.hold_reply(("INCR", "c"))
    with p.raw() as cl:
        cl.send(b"".join(encode("INCR", k) for k in "abcd"))
        hold.wait()
        hold.conn.close()
        got = [f.raw for f in cl.read_frames(4)]
    assert got[:2] == [b":1\r\n", b":1\r\n"], got
    assert all(g.startswith(b"-ERR sidecache:") for g in got[2:]), got
    assert sidecache_info(p)["batch_relayed"] == 1, "setup: the INCRs were not a refused batch"
    assert upstream.client().mget("a", "b", "c", "d") == [b"1"] * 4, "each INCR runs once"


def test_a_denied_multi_is_known_to_clients_that_name_the_default_user(proxy_factory, upstream):
    """A client that never sent AUTH runs as Redis's "default" user, as one
    that sent AUTH default <password> does: once a batch's MULTI of the
    first was refused, the second's pipelined writes are not tried as a
    batch either (the denial is the user's, whoever names it how)."""
    proxy = proxy_factory(args=NO_ACL_CHECKS)
    deny(upstream, "multi")
    with proxy.raw() as a, proxy.raw() as b:
        a.send(encode("INCR", "cnt") * 3)
        assert [f.raw for f in a.read_frames(3)] == [b":1\r\n", b":2\r\n", b":3\r\n"]
        assert sidecache_info(proxy)["batch_blocks"] == 1, "setup: the first INCRs were a batch"
        assert b.cmd("AUTH", "default", "any").raw == b"+OK\r\n"  # (default is nopass)
        b.send(encode("INCR", "cnt") * 3)
        assert [f.raw for f in b.read_frames(3)] == [b":4\r\n", b":5\r\n", b":6\r\n"]
    assert sidecache_info(proxy)["batch_blocks"] == 1, "the same user's MULTI was tried again"


def test_write_batch_with_exec_denied_gets_redis_replies(proxy_factory, upstream):
    """With EXEC denied Redis answers a batch's EXEC with EXECABORT (and
    leaves MULTI): nothing ran, so each command goes again alone and gets
    Redis's own reply, and the next client on the one shared connection
    gets its own reply, not +QUEUED."""
    p = proxy_factory(args=("--upstream-connections", "1"))
    deny(upstream, "exec")
    upstream.client().set("x", "val")
    with p.raw() as a, p.raw() as b:
        before = sidecache_info(p).get("batch_blocks", 0)
        a.send(encode("INCR", "k1") + encode("INCR", "k1"))
        assert [f.raw for f in a.read_frames(2)] == [b":1\r\n", b":2\r\n"]
        assert sidecache_info(p).get("batch_blocks", 0) == before + 1, "setup: the INCRs were not batched"
        assert b.cmd("GET", "x").raw == b"$3\r\nval\r\n"
    assert upstream.client().get("k1") == b"2"


def test_discard_denied_leaves_no_connection_in_multi(proxy_factory, upstream):
    """A local transaction's check is MULTI, the command, DISCARD. With
    DISCARD denied the shared connection would stay inside MULTI: it goes,
    and another client's GET on the one shared connection gets its value."""
    p = proxy_factory(args=("--upstream-connections", "1"))
    deny(upstream, "discard")
    upstream.client().set("x", "val")
    with p.raw() as a, p.raw() as b:
        assert a.cmd("MULTI").raw == b"+OK\r\n"
        assert a.cmd("SET", "y", "1").raw == b"+QUEUED\r\n"
        assert b.cmd("GET", "x").raw == b"$3\r\nval\r\n"
        assert upstream.client().get("y") is None, "the checked SET must not have run"
        assert a.cmd("EXEC").raw == b"*1\r\n+OK\r\n"
        assert upstream.client().get("y") == b"1"


def test_reading_acl_commands_through_a_tunnel_keep_the_denial(proxy, upstream):
    """Once a MULTI of a batch was refused, the user's pipelines go as sent.
    ACL commands that change nothing (WHOAMI), even through a tunnel whose
    replies are not matched (here a RESP3 subscriber's), must not make the
    proxy try a batch again: every later round gets Redis's replies."""
    deny(upstream, "multi")
    pipeline = encode("INCR", "cnt") * 3
    with proxy.raw() as w, proxy.raw(protocol=3) as t:
        w.send(pipeline)
        assert [f.raw for f in w.read_frames(3)] == [b":1\r\n", b":2\r\n", b":3\r\n"]
        t.cmd("SUBSCRIBE", "ch")
        t.send(encode("ACL", "WHOAMI"))
        t.read_frames(1)
        for n in (4, 7, 10):
            upstream.client().publish("ch", "m")
            w.send(pipeline)
            got = [f.raw for f in w.read_frames(3)]
            assert got == [b":%d\r\n" % (n + i) for i in range(3)], got
    assert upstream.client().get("cnt") == b"12"


def test_a_refused_discard_does_not_hand_on_a_connection_in_multi(proxy, upstream):
    """DISCARD denied on a client's own connection: Redis keeps that
    connection inside MULTI. It must not go back to the pool for the next
    client, whose BLPOP and EXEC get what Redis gives a fresh connection."""
    deny(upstream, "discard")
    with proxy.raw() as a:
        assert [a.cmd(*s).raw for s in (("WATCH", "w"), ("MULTI",), ("SET", "a", "1"))] == [
            b"+OK\r\n", b"+OK\r\n", b"+QUEUED\r\n"]
        assert a.cmd("DISCARD").raw.startswith(b"-NOPERM")
    with proxy.raw() as b:
        b.send(encode("BLPOP", "q", "1") + encode("EXEC"))
        assert [f.raw for f in b.read_frames(2, timeout=5)] == [b"*-1\r\n", b"-ERR EXEC without MULTI\r\n"]
    assert upstream.client().get("a") is None


def test_a_refused_multi_on_the_own_connection_opens_nothing(proxy_factory, upstream):
    """MULTI denied after a WATCH: Redis opened no transaction, so the
    client's later commands are not queued, and once it has unwatched, its
    reads are cache hits again (the proxy no longer holds it in MULTI)."""
    from cachehelpers import start_cached, warm
    p, st = start_cached(proxy_factory, args=NO_ACL_CHECKS)
    upstream.client().set("i9070", "v")
    deny(upstream, "multi")
    with p.raw(auth=True) as a:
        # cached (tracking per read: not by the first read of a new connection)
        assert warm(a, st, ("GET", "i9070")) == [b"v"]
        assert a.cmd("WATCH", "w").raw == b"+OK\r\n"
        assert a.cmd("MULTI").raw.startswith(b"-NOPERM")
        assert a.cmd("SET", "x", "1").raw == b"+OK\r\n"
        assert a.cmd("UNWATCH").raw == b"+OK\r\n"
        with st.delta() as dd:
            assert a.cmd("GET", "i9070").raw == b"$1\r\nv\r\n"
        assert dd["cache_hits"] == 1, "the client is still held in MULTI"


def test_exec_denied_leaves_local_transactions_as_redis_has_them(proxy, upstream, ref):
    """EXEC denied. B has a local transaction open while A's write batch
    meets the refusal (EXECABORT naming EXEC; batching stops): B is not
    disconnected, its commands are queued, and its EXEC gets Redis's
    EXECABORT, byte for byte."""
    deny(upstream, "exec")
    deny(ref, "exec")
    steps = [("MULTI",), ("INCR", "k1"), ("INCR", "k2"), ("EXEC",)]
    with proxy.raw() as a, proxy.raw() as b, ref.raw() as r:
        want = transcript(r, steps)
        got = transcript(b, steps[:2])
        a.send(encode("INCR", "x") * 2)
        assert [f.raw for f in a.read_frames(2)] == [b":1\r\n", b":2\r\n"]
        got += transcript(b, steps[2:])
    assert got == want, (got, want)
    assert upstream.client().mget("k1", "k2") == [None, None]


@pytest.mark.parametrize("pipelined", [False, True], ids=["one-by-one", "pipelined"])
def test_exec_denied_after_a_refused_command_is_named_as_redis_names_it(proxy, upstream, ref, pipelined):
    """EXEC denied, and a command of the transaction refused when queued
    (unknown): Redis checks EXEC itself before it looks at that refusal,
    and its EXECABORT names EXEC's NOPERM, not "previous errors". Nothing
    ran."""
    deny(upstream, "exec")
    deny(ref, "exec")
    steps = [("MULTI",), ("SET", "a", "1"), ("NOSUCHCMD", "x"), ("EXEC",), ("GET", "a")]
    with proxy.raw() as c, ref.raw() as r:
        want = transcript(r, steps)
        if pipelined:
            c.send(b"".join(encode(*s) for s in steps))
            got = [f.raw for f in c.read_frames(len(steps))]
        else:
            got = transcript(c, steps)
    assert want[3].startswith(b"-EXECABORT Transaction discarded because of: NOPERM"), want
    assert got == want, (got, want)
    assert upstream.client().get("a") is None


def test_a_refused_command_still_aborts_exec_when_redis_would_take_it_now(proxy, upstream, ref):
    """A command refused when queued (OOM under maxmemory 1), then the
    limit lifted before EXEC: Redis aborts the transaction for that
    refusal, and so must the proxy, although the command, checked again,
    would pass now. Nothing ran."""
    steps = [("MULTI",), ("SET", "a", "1"), ("SET", "b", "2")]
    with proxy.raw() as c, ref.raw() as r:
        want, got = [], []
        for conn, server, out in ((r, ref, want), (c, upstream, got)):
            out.append(conn.cmd(*steps[0]).raw)
            out.append(conn.cmd(*steps[1]).raw)
            server.client().config_set("maxmemory", "1")
            out.append(conn.cmd(*steps[2]).raw)
            server.client().config_set("maxmemory", "0")
            out.append(conn.cmd("EXEC").raw)
    assert want[2].startswith(b"-OOM"), want
    assert want[3] == b"-EXECABORT Transaction discarded because of previous errors.\r\n", want
    assert got == want, (got, want)
    assert upstream.client().mget("a", "b") == [None, None]


DISCARD_DENIED_STEPS = {
    # nothing queued: the proxy has not asked Redis anything yet
    "empty": [("MULTI",), ("DISCARD",), ("SET", "k", "v"), ("EXEC",), ("GET", "k")],
    # a queued command first: its check's DISCARD is what Redis refuses
    "checked": [("MULTI",), ("SET", "a", "1"), ("DISCARD",), ("SET", "k", "v"), ("EXEC",), ("GET", "k"),
                ("GET", "a")],
    # on the client's own connection
    "watched": [("WATCH", "w"), ("MULTI",), ("SET", "a", "1"), ("DISCARD",), ("SET", "k", "v"), ("EXEC",),
                ("GET", "k"), ("GET", "a")],
}


@pytest.mark.parametrize("pipelined", [False, True], ids=["one-by-one", "pipelined"])
@pytest.mark.parametrize("case", sorted(DISCARD_DENIED_STEPS))
def test_discard_denied_keeps_the_transaction_open_as_redis_does(proxy, upstream, ref, case, pipelined):
    """DISCARD denied: Redis answers NOPERM and stays inside MULTI, the
    transaction flagged, so what the client sends next is queued and its
    EXEC is EXECABORT: nothing runs. The proxy must not answer DISCARD
    itself (+OK) and then run those commands at once."""
    deny(upstream, "discard")
    deny(ref, "discard")
    steps = DISCARD_DENIED_STEPS[case]

    def run(ep):
        with ep.raw() as c:
            if not pipelined:
                return transcript(c, steps)
            c.send(b"".join(encode(*s) for s in steps))
            return [f.raw for f in c.read_frames(len(steps))]

    want = run(ref)
    assert want[steps.index(("DISCARD",))].startswith(b"-NOPERM"), want
    assert run(proxy) == want
    assert upstream.client().mget("k", "a") == [None, None]


def test_discard_allowed_is_answered_as_redis_answers_it(proxy, ref):
    """The same sequences for a user who may DISCARD, twice (the second
    time the proxy knows DISCARD is allowed): every reply as Redis's."""
    for steps in DISCARD_DENIED_STEPS.values():
        for _ in range(2):
            with proxy.raw() as c, ref.raw() as r:
                assert transcript(c, steps) == transcript(r, steps), steps


def test_discard_is_answered_locally_once_redis_allowed_one(proxy):
    """The price of asking Redis is paid once per user: a DISCARD of a
    local transaction goes to a connection of its own only while the proxy
    does not know that Redis allows it. A check's DISCARD (a queued
    command) teaches it as well as the client's own."""
    def pinned_by(steps):
        before = sidecache_info(proxy)["txn_pinned"]
        with proxy.raw() as c:
            assert transcript(c, steps)[-1] == b"+OK\r\n"
        return sidecache_info(proxy)["txn_pinned"] - before

    assert pinned_by([("MULTI",), ("DISCARD",)]) == 1
    assert pinned_by([("MULTI",), ("DISCARD",)]) == 0
    assert pinned_by([("MULTI",), ("SET", "a", "1"), ("DISCARD",)]) == 0


def test_a_check_teaches_that_discard_is_allowed(proxy_factory):
    p = proxy_factory()
    before = sidecache_info(p)["txn_pinned"]
    with p.raw() as c:
        assert transcript(c, [("MULTI",), ("SET", "a", "1"), ("DISCARD",), ("MULTI",), ("DISCARD",)]) == [
            b"+OK\r\n", b"+QUEUED\r\n", b"+OK\r\n", b"+OK\r\n", b"+OK\r\n"]
    assert sidecache_info(p)["txn_pinned"] == before


def test_discard_without_multi_leaves_no_transaction_open(redis_factory, proxy_factory):
    """MULTI denied, DISCARD allowed. Pipelined MULTI, DISCARD: Redis says
    NOPERM, then 'DISCARD without MULTI'; the session is in no transaction,
    so a BLPOP after it blocks as a blocking command (upstream-timeout does
    not cut it) and gets nil after its 3 s."""
    up = redis_factory()
    proxy = proxy_factory(up=up, args=("--upstream-timeout", "1"))
    deny(up, "multi")
    with proxy.raw() as c:  # the proxy learns that MULTI is denied
        c.cmd("MULTI")
        c.cmd("SET", "x", "1")
    with proxy.raw() as c:
        c.send(encode("MULTI") + encode("DISCARD"))
        got = [f.raw for f in c.read_frames(2)]
        assert got[0].startswith(b"-NOPERM") and got[1] == b"-ERR DISCARD without MULTI\r\n", got
        assert c.cmd("BLPOP", "q", "3", timeout=10).raw == b"*-1\r\n"


def test_discard_denied_after_the_proxy_learnt_it_was_allowed(proxy, upstream, ref):
    """DISCARD denied directly on Redis after the proxy had learnt that the
    user may DISCARD: once a check's DISCARD is refused, the client's own
    DISCARD goes to Redis again (NOPERM; the SET after it is queued and
    EXEC aborts), not +OK with the SET run at once."""
    learn = [("MULTI",), ("SET", "a", "1"), ("DISCARD",), ("MULTI",), ("DISCARD",)]
    with proxy.raw() as c:
        assert transcript(c, learn)[-1] == b"+OK\r\n"
    for server in (upstream, ref):
        deny(server, "discard")
    steps = [("MULTI",), ("SET", "a", "1"), ("DISCARD",), ("SET", "k", "v"), ("EXEC",), ("GET", "k")]
    with ref.raw() as r, proxy.raw() as c:
        want = transcript(r, steps)
        assert want[2].startswith(b"-NOPERM"), want
        assert transcript(c, steps) == want


@pytest.mark.parametrize("then", ["exec", "rewatch-exec", "multi-first"])
def test_a_refused_unwatch_keeps_the_watch_as_redis_does(proxy_factory, upstream, ref, then):
    """UNWATCH denied: Redis refuses it and keeps the watches, so another
    client's write makes the EXEC nil. The proxy had taken the watches for
    dropped when it sent UNWATCH; the refusal let the session leave the
    connection that held them, and its EXEC committed on a shared one (a
    lost update; review-watch-txn F1). A transaction after the refusal
    drops the watches, in Redis as here."""
    proxy = proxy_factory(args=NO_ACL_CHECKS)
    steps = {
        "exec": [("c", "WATCH", "w"), ("c", "UNWATCH"), ("o", "SET", "w", "theirs"),
                 ("c", "MULTI"), ("c", "SET", "w", "mine"), ("c", "EXEC")],
        "rewatch-exec": [("c", "WATCH", "w"), ("c", "UNWATCH"), ("c", "WATCH", "v"), ("o", "SET", "w", "theirs"),
                         ("c", "MULTI"), ("c", "SET", "w", "mine"), ("c", "EXEC")],
        "multi-first": [("c", "WATCH", "w"), ("c", "UNWATCH"), ("c", "MULTI"), ("c", "EXEC"),
                        ("o", "SET", "w", "theirs"), ("c", "MULTI"), ("c", "SET", "w", "mine"), ("c", "EXEC")],
    }[then]
    for server in (upstream, ref):
        deny(server, "unwatch")
    got, want = [], []
    for server, ep, out in ((upstream, proxy, got), (ref, ref, want)):
        with ep.raw() as c, server.raw() as o:
            for who, *cmd in steps:
                out.append((c if who == "c" else o).cmd(*cmd).raw)
        out.append(server.client().get("w"))
    assert got == want
