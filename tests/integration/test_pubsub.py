"""Pub/sub in RESP2 and RESP3: SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE (7.0),
messages delivered, unsubscribe, and the command restrictions of RESP2's
subscribed mode — byte-identical to Redis."""
import time

import pytest

from cachehelpers import NO_ACL_CHECKS
from helpers import HOST, REDIS_VERSION, Push, assert_same_runs, encode

MSG = b"hello\r\nworld\x00!"
# sharded pub/sub (SSUBSCRIBE, SPUBLISH, SUNSUBSCRIBE) is Redis 7.0's
SHARDED = REDIS_VERSION >= (7, 0)


def _sub_client(ep, protocol):
    # A RESP2 subscriber that never sent HELLO is the common case.
    return ep.raw(protocol=3) if protocol == 3 else ep.raw()


def pubsub_scenario(ep, protocol):
    out = []
    sub = _sub_client(ep, protocol)
    sub2 = _sub_client(ep, protocol)
    pub = ep.raw()

    def rec(label, frames):
        for f in frames:
            out.append((label, f.raw))

    try:
        sub.send_cmd("SUBSCRIBE", "ch1", "ch2")
        rec("subscribe", sub.read_frames(2))
        rec("psubscribe", [sub.cmd("PSUBSCRIBE", "news.*")])
        if SHARDED:
            rec("ssubscribe", [sub.cmd("SSUBSCRIBE", "sch")])
        rec("publish ch1", [pub.cmd("PUBLISH", "ch1", MSG)])
        rec("message", [sub.read_frame(3)])
        rec("publish news", [pub.cmd("PUBLISH", "news.tech", "hi")])
        rec("pmessage", [sub.read_frame(3)])
        if SHARDED:
            rec("spublish", [pub.cmd("SPUBLISH", "sch", "yo")])
            rec("smessage", [sub.read_frame(3)])
        # RESP2: only (P|S)(UN)SUBSCRIBE/PING/QUIT/RESET allowed; PING is an
        # array. RESP3: any command, PING is +PONG.
        rec("get while subscribed", [sub.cmd("GET", "k")])
        rec("ping while subscribed", [sub.cmd("PING")])
        rec("ping arg while subscribed", [sub.cmd("PING", "x")])
        # A second subscriber of the same proxy counts as a second receiver.
        rec("sub2 subscribe", [sub2.cmd("SUBSCRIBE", "ch1")])
        rec("publish to two", [pub.cmd("PUBLISH", "ch1", "two")])
        rec("sub got it", [sub.read_frame(3)])
        rec("sub2 got it", [sub2.read_frame(3)])
        rec("unsubscribe ch1", [sub.cmd("UNSUBSCRIBE", "ch1")])
        rec("publish after unsubscribe", [pub.cmd("PUBLISH", "ch1", "three")])
        rec("sub2 still gets it", [sub2.read_frame(3)])
        rec("punsubscribe", [sub.cmd("PUNSUBSCRIBE")])
        if SHARDED:
            rec("sunsubscribe", [sub.cmd("SUNSUBSCRIBE")])
        rec("unsubscribe all", [sub.cmd("UNSUBSCRIBE")])
        rec("ping after", [sub.cmd("PING")])
        rec("set after", [sub.cmd("SET", "k", "v")])
        rec("get after", [sub.cmd("GET", "k")])
        rec("publish to nobody", [pub.cmd("PUBLISH", "ch2", "x")])
        rec("publish news to nobody", [pub.cmd("PUBLISH", "news.x", "x")])
        sub.expect_silence(0.2)
        rec("sub2 unsubscribe", [sub2.cmd("UNSUBSCRIBE")])
        rec("numsub", [pub.cmd("PUBSUB", "NUMSUB", "ch1", "ch2")])
    finally:
        sub.close()
        sub2.close()
        pub.close()
    return out


@pytest.mark.parametrize("protocol", [2, 3])
def test_pubsub_subscribe_psubscribe_ssubscribe_deliver_and_unsubscribe(proxy, ref, protocol):
    got = dict(assert_same_runs(lambda ep: pubsub_scenario(ep, protocol), proxy, ref))
    if protocol == 3:
        assert got["message"].startswith(b">3\r\n$7\r\nmessage\r\n")
        assert got["ping while subscribed"] == b"+PONG\r\n"
    else:
        assert got["message"].startswith(b"*3\r\n$7\r\nmessage\r\n")
        assert got["get while subscribed"].startswith(b"-ERR Can't execute 'get'")
    assert MSG in got["message"]
    assert got["publish to two"] == b":2\r\n"
    assert got["publish after unsubscribe"] == b":1\r\n"
    assert got["publish to nobody"] == b":0\r\n"


@pytest.mark.parametrize("protocol", [2, 3])
def test_pubsub_with_redis_py_both_protocols(proxy, protocol):
    r = proxy.client(protocol=protocol)
    pub = proxy.client()
    p = r.pubsub()
    p.subscribe("chan")
    p.psubscribe("pat.*")
    deadline = time.monotonic() + 5
    confirms = []
    while len(confirms) < 2 and time.monotonic() < deadline:
        m = p.get_message(timeout=0.5)
        if m:
            confirms.append(m["type"])
    assert sorted(confirms) == ["psubscribe", "subscribe"]
    assert pub.publish("chan", b"m1") == 1
    assert pub.publish("pat.a", b"m2") == 1
    got = []
    while len(got) < 2 and time.monotonic() < deadline:
        m = p.get_message(timeout=0.5)
        if m:
            got.append((m["type"], m["channel"], m["data"]))
    assert got == [("message", b"chan", b"m1"), ("pmessage", b"pat.a", b"m2")]
    p.unsubscribe()
    p.punsubscribe()
    # Wait for both confirmations: after them Redis has processed the
    # unsubscribes, so a publish must reach nobody.
    gone = []
    while len(gone) < 2 and time.monotonic() < deadline:
        m = p.get_message(timeout=0.5)
        if m:
            gone.append(m["type"])
    assert sorted(gone) == ["punsubscribe", "unsubscribe"]
    assert pub.publish("chan", b"m3") == 0
    p.close()
    assert r.ping() is True


def test_subscribers_in_both_protocols_receive_the_same_message(proxy):
    with proxy.raw() as s2, proxy.raw(protocol=3) as s3, proxy.raw() as pub:
        s2.send_cmd("SUBSCRIBE", "both")
        s2.read_frame()
        s3.send_cmd("SUBSCRIBE", "both")
        assert isinstance(s3.read_frame().value, Push)
        assert pub.call("PUBLISH", "both", "payload") == 2
        f2, f3 = s2.read_frame(3), s3.read_frame(3)
        assert f2.raw == b"*3\r\n$7\r\nmessage\r\n$4\r\nboth\r\n$7\r\npayload\r\n"
        assert f3.raw == b">3\r\n$7\r\nmessage\r\n$4\r\nboth\r\n$7\r\npayload\r\n"


@pytest.mark.parametrize("protocol", [2, 3])
def test_subscribe_inside_a_pipeline(proxy, ref, protocol):
    """Commands before SUBSCRIBE, SUBSCRIBE itself and commands after it, all
    in one write: replies in order, as Redis sends them."""
    cmds = [("SET", "a", "1"), ("GET", "a"), ("SUBSCRIBE", "c1"), ("PING",), ("PSUBSCRIBE", "p*"),
            ("UNSUBSCRIBE", "c1"), ("PUNSUBSCRIBE", "p*"), ("GET", "a"), ("PING",)]

    def scenario(ep):
        with ep.raw(protocol=3 if protocol == 3 else None) as c:
            c.send(b"".join(encode(*x) for x in cmds))
            got = [f.raw for f in c.read_frames(len(cmds), timeout=5)]
            c.expect_silence(0.2)
            return list(zip(cmds, got))

    got = assert_same_runs(scenario, proxy, ref)
    assert got[-2][1] == b"$1\r\n1\r\n" and got[-1][1] == b"+PONG\r\n"


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("cmd", [("UNSUBSCRIBE", "x", "y"), ("PUNSUBSCRIBE", "x*", "y*"),
                                 pytest.param(("SUNSUBSCRIBE", "x", "y"), marks=pytest.mark.redis(7, 0, "SUNSUBSCRIBE")),
                                 ("UNSUBSCRIBE",), ("REPLCONF", "ACK", "0")])
def test_unsubscribe_unsubscribed_keeps_other_clients_replies(proxy_factory, upstream, ref, cmd, protocol):
    """A client that is not subscribed sends an UNSUBSCRIBE family command
    (Redis answers once per channel named, as a push in RESP3) or REPLCONF
    ACK (never answered), while another client's GET follows it on the
    proxy's one shared connection: the first gets what Redis sends it,
    byte for byte, and the GET its own value (before, one reply too many or
    too few on the shared connection shifted every later reply: the GET got
    the UNSUBSCRIBE's second reply, or hung)."""
    p = proxy_factory(args=("--upstream-connections", "1"))
    for ep in (upstream, ref):
        ep.raw(auth=True).cmd("SET", "secret", "s3cr3t")
    want = []
    for target in (ref, p):
        a = target.raw(protocol=protocol) if protocol == 3 else target.raw()
        b = target.raw()
        a.send_cmd(*cmd)
        b.send_cmd("GET", "secret")
        assert b.read_frame(timeout=5).value == b"s3cr3t"
        n = max(len(cmd) - 1, 1) if cmd[0] != "REPLCONF" else 0
        got = [f.raw for f in a.read_frames(n, timeout=5)]
        a.expect_silence()
        got.append(a.cmd("PING").raw)
        if target is ref:
            want = got
        else:
            assert got == want


def test_tunnel_keeps_the_clients_name(proxy):
    """CLIENT SETNAME, then a command that tunnels (CLIENT REPLY ON, own
    tracking, RESP3 SUBSCRIBE): GETNAME still gives the name, and a tunnel
    never shows the name another client left on a connection."""
    with proxy.raw() as c:
        assert c.cmd("CLIENT", "SETNAME", "bob").raw == b"+OK\r\n"
        assert c.cmd("CLIENT", "REPLY", "ON").raw == b"+OK\r\n"
        assert c.cmd("CLIENT", "GETNAME").raw == b"$3\r\nbob\r\n"
    with proxy.raw() as c:
        assert c.cmd("CLIENT", "SETNAME", "carol").raw == b"+OK\r\n"
        assert c.cmd("WATCH", "k").raw == b"+OK\r\n"
        assert c.cmd("UNWATCH").raw == b"+OK\r\n"  # its own connection goes back to the pool
        with proxy.raw() as d:
            assert d.cmd("CLIENT", "REPLY", "ON").raw == b"+OK\r\n"
            assert d.cmd("CLIENT", "GETNAME").raw == b"$-1\r\n"


def test_reset_in_a_tunnel_lands_where_reset_does_elsewhere(upstream, proxy_factory):
    """RESET returns a session to where sessions start, inside a tunnel too."""
    p = proxy_factory(upstream_url="redis://%s:%d/1" % (HOST, upstream.port))
    with p.raw() as a, p.raw() as b:
        assert a.cmd("RESET").raw == b"+RESET\r\n"
        assert a.cmd("SET", "k_plain", "1").raw == b"+OK\r\n"
        assert b.cmd("SUBSCRIBE", "ch").raw.startswith(b"*3\r\n")
        assert b.cmd("RESET").raw == b"+RESET\r\n"
        assert b.cmd("SET", "k_tunnel", "1").raw == b"+OK\r\n"
        assert b.cmd("EXISTS", "k_plain", "k_tunnel").raw == b":2\r\n"


def test_reset_in_a_tunnel_behind_requirepass_and_a_db(redis_factory, ref_factory, proxy_factory):
    """RESET in a tunnel, where the upstream URL names a db and Redis wants a
    password: the proxy's CLIENT REPLY SKIP + SELECT after it run logged out,
    and their two NOAUTH errors reach the client, shifting every later reply
    by two. (The session starting in the URL's db is documented; the ref
    selects it first.)"""
    up = redis_factory(requirepass="pw")
    ref = ref_factory(like=up)
    proxy = proxy_factory(up=up, upstream_url="redis://default:pw@127.0.0.1:%d/2" % up.port)

    def scenario(ep):
        with ep.raw() as c:
            assert c.cmd("AUTH", "pw").raw == b"+OK\r\n"
            if ep is ref:
                assert c.cmd("SELECT", "2").raw == b"+OK\r\n"
            out = [(s, c.cmd(*s).raw) for s in [("SUBSCRIBE", "c"), ("RESET",), ("AUTH", "pw"), ("PING",)]]
            c.send_cmd("PING", "last")
            out.append(("last", c.read_frame().raw))
        return out

    assert_same_runs(scenario, proxy, ref)


@pytest.mark.parametrize("pipelined", [False, True], ids=["one-by-one", "pipelined"])
def test_reset_in_a_tunnel_that_redis_does_not_answer(proxy, ref, pipelined):
    """CLIENT REPLY SKIP, then RESET: Redis sends no reply to that RESET
    (the skip was armed for it) and goes on. The session must go on too,
    not wait for ever for a +RESET that never comes."""
    steps = [("CLIENT", "REPLY", "SKIP"), ("RESET",), ("PING",), ("GET", "k"), ("RESET",), ("PING", "x")]

    def scenario(ep):
        with ep.raw() as c:
            if pipelined:
                c.send(b"".join(encode(*s) for s in steps))
            else:
                for s in steps:
                    c.send(encode(*s))
                    time.sleep(0.05)
            return [f.raw for f in c.read_frames(4, timeout=5)]

    assert_same_runs(scenario, proxy, ref)


def test_a_status_reply_reset_does_not_end_the_tunnel(proxy, ref):
    """A script may return the status RESET: in a tunnel that is a reply
    like any other, relayed; only the client's RESET ends the tunnel, after
    every reply before it (its own +RESET included)."""
    script = ("EVAL", "return {ok='RESET'}", "0")

    def scenario(ep):
        with ep.raw() as c:
            assert c.cmd("CLIENT", "TRACKING", "ON").raw == b"+OK\r\n"
            c.send(encode(*script) + encode("SET", "rk", "1") + encode("RESET") + encode(*script) + encode("PING"))
            return [f.raw for f in c.read_frames(5, timeout=5)]

    assert_same_runs(scenario, proxy, ref)


def drain(c, quiet=1.0):
    """Every frame that arrives until the line is quiet for `quiet` s."""
    out = []
    while True:
        try:
            out.append(c.read_frame(timeout=quiet).raw)
        except Exception:
            return out


def test_reset_in_a_tunnel_where_hello_is_renamed(redis_factory, ref_factory, proxy_factory):
    """The proxy ends a tunnel at the reply to a HELLO it sends behind the
    client's RESET; where HELLO is renamed, that reply is 'unknown command',
    which must end the tunnel just the same (and not reach the client)."""
    up = redis_factory(args=["--rename-command", "HELLO", ""])
    ref = ref_factory(like=up)
    proxy = proxy_factory(up=up)

    def scenario(ep):
        with ep.raw() as c:
            c.cmd("SUBSCRIBE", "x")
            c.send(encode("RESET") + encode("PING"))
            return drain(c, 1.5)

    assert_same_runs(scenario, proxy, ref)


def test_a_marker_seen_in_monitor_does_not_end_another_tunnel(proxy, ref):
    """MONITOR shows the HELLO that ends a tunnel at RESET, nonce included;
    each RESET has a fresh one, so a client that sends a nonce it saw does
    not end its own tunnel early: it gets every reply, as from Redis."""
    with proxy.raw() as m, proxy.raw() as c:
        assert m.cmd("MONITOR").raw == b"+OK\r\n"
        c.cmd("SUBSCRIBE", "ch")
        c.cmd("RESET")
        seen = [f for f in drain(m, 0.5) if b"sidecache-reset-" in f]
        nonce = seen[0].split(b'"')[-2].decode() if seen else "sidecache-reset-x"  # direct: none

    def scenario(ep):
        with ep.raw() as c:
            c.cmd("CLIENT", "REPLY", "ON")
            c.send(encode("HELLO", "2", nonce) + encode("RESET") + encode("PING"))
            return drain(c)

    assert_same_runs(scenario, proxy, ref)


@pytest.mark.proxy_only
def test_an_acl_command_in_a_tunnel_is_settled_when_the_tunnel_resets(proxy_factory, upstream):
    """ACL SETUSER in a tunnel, then RESET: the tunnel is over, so what the
    proxy knows of permissions is settled again, and UNWATCH is answered
    locally again for every client (not sent to Redis each time until that
    client disconnects). (Without acl-check-ms, whose next list, changed by
    that SETUSER, asks every permission again at a moment of its own.)"""
    proxy = proxy_factory(args=NO_ACL_CHECKS)
    def unwatch_calls():
        stats = upstream.client().info("commandstats")
        return stats.get("cmdstat_unwatch", {}).get("calls", 0)

    with proxy.raw() as a, proxy.raw() as b:
        a.cmd("CLIENT", "REPLY", "ON")
        a.cmd("ACL", "SETUSER", "foo", "on")
        assert a.cmd("RESET").raw == b"+RESET\r\n"
        assert a.cmd("PING").raw == b"+PONG\r\n"
        for _ in range(3):
            assert b.cmd("UNWATCH").raw == b"+OK\r\n"
        before = unwatch_calls()
        for _ in range(5):
            assert b.cmd("UNWATCH").raw == b"+OK\r\n"
        assert unwatch_calls() == before


@pytest.mark.proxy_only
def test_reset_ends_the_tunnel(proxy_factory, upstream):
    """After RESET in a tunnel (its +RESET relayed once Redis sent it), the
    session is back on the shared connections: its reads are served from
    the cache again."""
    from cachehelpers import start_cached, warm
    upstream.client().set("i1", b"attr")
    p, st = start_cached(proxy_factory)
    c = p.raw(auth=True)
    assert c.cmd("SUBSCRIBE", "c").value == [b"subscribe", b"c", 1]
    assert c.cmd("RESET").raw == b"+RESET\r\n"
    c.cmd("GET", "i1")
    warm(c, st, ("GET", "i1"))
    assert c.cmd("PUBLISH", "c", "m").value == 0
