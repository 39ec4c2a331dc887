"""Connection-level commands: CLIENT SETNAME/GETNAME/SETINFO/ID, ECHO, PING,
QUIT, RESET, CLIENT REPLY, MONITOR and the client's own CLIENT TRACKING."""
import re
import socket
import time

import pytest

from cachehelpers import wait_first_acl_check
from helpers import REDIS_VERSION, ConnectionClosed, busy_threshold_args, Push, Simple, acl_without, assert_same_runs, assert_same_steps, encode, wait_until

ID_RE = re.compile(rb"(\$2\r\nid\r\n):\d+\r\n")


def norm(raw):
    return ID_RE.sub(rb"\1:<id>\r\n", raw)


def test_client_setname_getname_like_redis(proxy, ref):
    steps = [("CLIENT", "GETNAME"), ("CLIENT", "SETNAME", "app-1"), ("CLIENT", "GETNAME"),
             ("CLIENT", "SETNAME", "bad name"), ("CLIENT", "SETNAME", "bad\nname"),
             ("CLIENT", "GETNAME"), ("CLIENT", "SETNAME", ""), ("CLIENT", "GETNAME"),
             ("CLIENT", "SETNAME"), ("CLIENT", "SETNAME", "a", "b"), ("client", "setname", "lower"),
             ("CLIENT", "GETNAME")]
    got = assert_same_steps(proxy, ref, steps)
    assert got[2][1] == b"$5\r\napp-1\r\n"
    assert got[3][1] == b"-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
    assert got[5][1] == b"$5\r\napp-1\r\n"
    assert got[7][1] == b"$-1\r\n", "an empty name clears the name"
    got3 = assert_same_steps(proxy, ref, [("CLIENT", "SETNAME", "x"), ("CLIENT", "GETNAME"),
                                          ("CLIENT", "SETNAME", ""), ("CLIENT", "GETNAME")], protocol=3)
    assert got3[3][1] == b"_\r\n"


def test_client_names_are_per_client(proxy):
    """Many clients (sharing upstream connections) each keep their own name."""
    clients = [proxy.raw() for _ in range(10)]
    try:
        for i, c in enumerate(clients):
            assert c.cmd("CLIENT", "SETNAME", "c%d" % i).raw == b"+OK\r\n"
        for _ in range(3):
            for i, c in enumerate(clients):
                assert c.call("CLIENT", "GETNAME") == b"c%d" % i
    finally:
        for c in clients:
            c.close()


@pytest.mark.proxy_only
def test_client_setinfo_answered_like_redis_7_2(proxy):
    """go-redis sends CLIENT SETINFO on every connection. Redis 7.0 does not
    know it (7.2 does); the proxy answers as 7.2 does and keeps the values
    per session, so they never land on a shared connection."""
    with proxy.raw() as c:
        assert c.cmd("CLIENT", "SETINFO", "LIB-NAME", "redis-py").raw == b"+OK\r\n"
        assert c.cmd("CLIENT", "SETINFO", "lib-ver", "8.1.0").raw == b"+OK\r\n"
        f = c.cmd("CLIENT", "SETINFO", "BOGUS", "x")
        assert f.raw.startswith(b"-ERR Unrecognized option 'BOGUS'"), f
        f = c.cmd("CLIENT", "SETINFO", "LIB-NAME", "has space")
        assert f.raw.startswith(b"-ERR"), f
        assert c.cmd("PING").raw == b"+PONG\r\n"


def test_client_id_returns_integer_stable_and_distinct(proxy):
    ids = []
    with proxy.raw() as a, proxy.raw() as b, proxy.raw(protocol=3) as c:
        for cl in (a, b, c):
            f = cl.cmd("CLIENT", "ID")
            assert f.type == ":", f
            assert f.value > 0
            ids.append(f.value)
        for _ in range(5):
            a.cmd("SET", "x", "y")
            assert a.cmd("CLIENT", "ID").value == ids[0], "CLIENT ID changed for one connection"
            assert b.cmd("CLIENT", "ID").value == ids[1]
    assert len(set(ids)) == 3, "different clients must have different ids: %r" % ids


@pytest.mark.parametrize("protocol", [2, 3])
def test_echo_and_ping_with_and_without_arg(proxy, ref, protocol):
    steps = [("PING",), ("PING", "msg"), ("ECHO", "msg"), ("ECHO", b"\x00\r\n"), ("PING", "")]
    got = assert_same_steps(proxy, ref, steps, protocol=protocol)
    assert [g for _, g in got] == [b"+PONG\r\n", b"$3\r\nmsg\r\n", b"$3\r\nmsg\r\n",
                                   b"$3\r\n\x00\r\n\r\n", b"$0\r\n\r\n"]


@pytest.mark.parametrize("protocol", [2, 3])
def test_quit_replies_ok_then_closes(proxy, upstream, protocol):
    with proxy.raw(protocol=3 if protocol == 3 else None) as c:
        c.send(encode("SET", "before", "1") + encode("QUIT") + encode("SET", "after", "1"))
        assert c.read_frame().raw == b"+OK\r\n"
        assert c.read_frame().raw == b"+OK\r\n"
        leftover = c.expect_closed(3)
        assert leftover == b"", "nothing may follow QUIT's +OK: %r" % leftover
    time.sleep(0.1)
    d = upstream.client()
    assert d.get("before") == b"1"
    assert d.get("after") is None, "a command pipelined after QUIT must not run"
    # The proxy still serves others.
    assert proxy.client().ping() is True


def test_reset_returns_to_db0_resp2_no_name_no_multi(proxy, ref):
    steps = [("SET", "k", "db0"), ("SELECT", 2), ("SET", "k", "db2"), ("HELLO", "3"),
             ("CLIENT", "SETNAME", "n"), ("WATCH", "k"), ("MULTI",), ("SET", "k", "queued"),
             ("RESET",), ("GET", "k"), ("GET", "nokey"), ("CLIENT", "GETNAME"), ("EXEC",),
             ("SUBSCRIBE", "c"), ("RESET",), ("PING",), ("SELECT", 3), ("CLIENT", "TRACKING", "ON"),
             ("RESET",), ("GET", "k"), ("RESET", "extra")]

    def scenario(ep):
        with ep.raw() as c:
            return [(s, norm(c.cmd(*s).raw)) for s in steps]

    got = assert_same_runs(scenario, proxy, ref)
    assert got[8][1] == b"+RESET\r\n"
    assert got[9][1] == b"$3\r\ndb0\r\n", "RESET goes back to db 0"
    assert got[10][1] == b"$-1\r\n", "RESET goes back to RESP2"
    assert got[11][1] == b"$-1\r\n"
    assert got[12][1] == b"-ERR EXEC without MULTI\r\n"
    assert got[15][1] == b"+PONG\r\n", "RESET leaves subscribe mode"
    assert got[19][1] == b"$3\r\ndb0\r\n"


def test_client_reply_off_skip_on_like_redis(proxy, ref):
    cmds = [("SET", "r", "1"), ("CLIENT", "REPLY", "OFF"), ("SET", "r", "2"), ("GET", "r"), ("PING",),
            ("GET", "i1"), ("CLIENT", "REPLY", "ON"), ("GET", "r"), ("CLIENT", "REPLY", "SKIP"),
            ("SET", "r", "3"), ("GET", "r"), ("CLIENT", "REPLY", "BOGUS"), ("GET", "r")]
    n_replies = 6  # SET, ON, GET(2), GET(3) after SKIP's skipped SET, BOGUS error, GET

    def scenario(ep):
        with ep.raw() as c:
            c.send(b"".join(encode(*x) for x in cmds))
            frames = c.read_frames(n_replies, timeout=5)
            c.expect_silence(0.3)
            return [(i, f.raw) for i, f in enumerate(frames)]

    got = assert_same_runs(scenario, proxy, ref)
    replies = [g for _, g in got]
    assert replies[:4] == [b"+OK\r\n", b"+OK\r\n", b"$1\r\n2\r\n", b"$1\r\n3\r\n"], \
        "CLIENT REPLY OFF/SKIP must suppress exactly the replies Redis suppresses"
    assert replies[4].startswith(b"-ERR")
    assert replies[5] == b"$1\r\n3\r\n"


@pytest.mark.parametrize("case", ["off", "skip"])
def test_client_reply_inside_multi_like_redis(proxy, ref, case):
    """CLIENT REPLY OFF or SKIP queued in MULTI: at EXEC Redis writes the
    array's header and not the replies it counts (they are suppressed). The
    client gets that header when Redis sends it, as from Redis (the proxy
    held it, waiting for elements that never come)."""
    cmds, want = {
        "off": ([("MULTI",), ("CLIENT", "REPLY", "OFF"), ("EXEC",)], b"+OK\r\n+QUEUED\r\n*1\r\n"),
        "skip": ([("MULTI",), ("CLIENT", "REPLY", "SKIP"), ("SET", "a", "1"), ("EXEC",)],
                 b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n+OK\r\n")}[case]

    def scenario(ep):
        with ep.raw() as c:
            c.send(b"".join(encode(*x) for x in cmds))
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline and bytes(c.buf) != want:
                try:
                    c._fill(0.1)
                except socket.timeout:
                    pass
            return [bytes(c.buf)]

    got = assert_same_runs(scenario, proxy, ref)
    assert got == [want], got


def test_monitor_shows_commands_of_other_clients(proxy):
    with proxy.raw() as mon:
        assert mon.cmd("MONITOR").raw == b"+OK\r\n"
        r = proxy.client()
        r.set("mon:key", "mon-value")
        r.hset("mon:hash", "f", "v")
        seen = []
        deadline = time.monotonic() + 5
        want = [b'"set" "mon:key" "mon-value"', b'"hset" "mon:hash" "f" "v"']
        while time.monotonic() < deadline and not all(any(w in s for s in seen) for w in want):
            f = mon.read_frame(timeout=max(0.01, deadline - time.monotonic()))
            assert isinstance(f.value, Simple), f
            seen.append(bytes(f.value).lower())
        for w in want:
            assert any(w in s for s in seen), "MONITOR never showed %r; saw %r" % (w, seen)
        line = next(s for s in seen if want[0] in s)
        assert re.match(rb"^\d+\.\d+ \[\d+ ", line), line


@pytest.mark.parametrize("via", ["proxy", "direct"])
@pytest.mark.parametrize("key,kind", [("trk:k", "string"), ("i77", "string"), ("d77", "hash")])
def test_client_tracking_resp3_receives_invalidate_push(proxy, upstream, key, kind, via):
    """A RESP3 client's own CLIENT TRACKING: it reads a key, another client
    changes it, and the tracking client gets `>2 invalidate [key]`. Keys of
    cacheable shape are read by someone else first, so a proxy that answered
    the tracking client's read from its cache (and so never told Redis the
    client read it) would miss the push."""
    r = proxy.client()
    writer = proxy.client() if via == "proxy" else upstream.client()

    def read(c):
        return c.cmd("HGET", key, "f") if kind == "hash" else c.cmd("GET", key)

    def write(v):
        writer.hset(key, "f", v) if kind == "hash" else writer.set(key, v)

    write("v0")
    for _ in range(2):
        r.hget(key, "f") if kind == "hash" else r.get(key)
    push = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$%d\r\n%s\r\n" % (len(key), key.encode())
    with proxy.raw(protocol=3) as t:
        assert t.cmd("CLIENT", "TRACKING", "ON").raw == b"+OK\r\n"
        assert read(t).raw == b"$2\r\nv0\r\n"
        write("v1")
        f = t.read_frame(timeout=3)
        assert isinstance(f.value, Push) and f.raw == push, f
        # Tracking is one-shot per read: read again to be notified again.
        assert read(t).raw == b"$2\r\nv1\r\n"
        write("v2")
        assert t.read_frame(timeout=3).raw == push
        write("v3")                                  # not read since: no push
        t.expect_silence(0.3)
        assert t.cmd("CLIENT", "TRACKING", "OFF").raw == b"+OK\r\n"
        read(t)
        write("v4")
        t.expect_silence(0.3)
        assert t.cmd("PING").raw == b"+PONG\r\n"


def test_client_tracking_flushall_sends_null_invalidation(proxy, upstream):
    with proxy.raw(protocol=3) as t:
        t.cmd("CLIENT", "TRACKING", "ON")
        t.cmd("GET", "ft")
        upstream.client().flushall()
        f = t.read_frame(timeout=3)
        assert f.raw == b">2\r\n$10\r\ninvalidate\r\n_\r\n", f


def test_client_tracking_bcast_prefix(proxy):
    w = proxy.client()
    with proxy.raw(protocol=3) as t:
        assert t.cmd("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "user:").raw == b"+OK\r\n"
        w.set("user:1", "x")
        w.set("other:1", "x")
        f = t.read_frame(timeout=3)
        assert f.raw == b">2\r\n$10\r\ninvalidate\r\n*1\r\n$6\r\nuser:1\r\n"
        t.expect_silence(0.3)


def test_client_tracking_resp2_redirect_to_subscribed_client(proxy, upstream):
    """The RESP2 way: one client takes its CLIENT ID and subscribes to
    __redis__:invalidate, another turns tracking on with REDIRECT to that id;
    a change of a key the second one read reaches the first as a message."""
    w = proxy.client()
    w.set("i88", "v0")
    w.get("i88")
    with proxy.raw() as sub, proxy.raw() as t:
        sub_id = sub.call("CLIENT", "ID")
        assert isinstance(sub_id, int)
        sub.send_cmd("SUBSCRIBE", "__redis__:invalidate")
        assert sub.read_frame().value == [b"subscribe", b"__redis__:invalidate", 1]
        assert t.cmd("CLIENT", "TRACKING", "ON", "REDIRECT", sub_id).raw == b"+OK\r\n"
        assert t.call("GET", "i88") == b"v0"
        w.set("i88", "v1")
        f = sub.read_frame(timeout=3)
        assert f.raw == b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$3\r\ni88\r\n", f
        assert t.call("GET", "i88") == b"v1"
        upstream.client().set("i88", "v2")
        assert sub.read_frame(timeout=3).value[2] == [b"i88"]
        assert t.cmd("CLIENT", "TRACKING", "ON", "REDIRECT", 999999).raw == \
            b"-ERR The client ID you want redirect to does not exist\r\n"


def test_client_tracking_on_pipelined_with_reads(proxy):
    """CLIENT TRACKING ON and the reads after it arrive in one write: those
    reads are tracked."""
    w = proxy.client()
    w.set("pt1", "a")
    w.set("i91", "b")
    w.get("i91")
    with proxy.raw(protocol=3) as t:
        t.send(encode("CLIENT", "TRACKING", "ON") + encode("GET", "pt1") + encode("GET", "i91"))
        assert [f.raw for f in t.read_frames(3)] == [b"+OK\r\n", b"$1\r\na\r\n", b"$1\r\nb\r\n"]
        w.set("i91", "c")
        assert t.read_frame(timeout=3).raw == b">2\r\n$10\r\ninvalidate\r\n*1\r\n$3\r\ni91\r\n"
        w.set("pt1", "c")
        assert t.read_frame(timeout=3).raw == b">2\r\n$10\r\ninvalidate\r\n*1\r\n$3\r\npt1\r\n"


def test_ping_and_echo_of_a_user_denied_them(proxy, upstream):
    """PING and ECHO are answered by sidecache only once Redis has answered
    them for the user: a user whose ACL denies them gets Redis's NOPERM,
    every time; one allowed gets the answer."""
    d = upstream.client()
    d.execute_command("ACL", "SETUSER", "noping", "on", ">pw", "~*", "&*", "+@all", "-ping", "-echo")
    with upstream.raw() as r:
        r.cmd("AUTH", "noping", "pw")
        want = [r.cmd("PING").raw, r.cmd("ECHO", "x").raw]
    assert all(w.startswith(b"-NOPERM") for w in want), want
    with proxy.raw() as c:
        assert c.cmd("AUTH", "noping", "pw").raw == b"+OK\r\n"
        for _ in range(3):
            assert [c.cmd("PING").raw, c.cmd("ECHO", "x").raw] == want
    with proxy.raw(auth=True) as c:
        for _ in range(3):
            assert [c.cmd("PING").raw, c.cmd("ECHO", "x").raw] == [b"+PONG\r\n", b"$1\r\nx\r\n"]


NOCLIENT = ["--user", "noclient", "on", ">pw", "~*", "&*", "+@all", *acl_without("setname", "getname")]


@pytest.mark.parametrize("pipelined", [False, True], ids=["one-by-one", "pipelined"])
def test_client_name_commands_of_a_user_denied_them(redis_factory, ref_factory, proxy_factory, pipelined):
    """CLIENT SETNAME, GETNAME and SETINFO are the session's own, kept by
    the proxy, but Redis's ACL may deny them: such a user gets NOPERM, every
    time (redis-py's client_name= then fails to connect, as it does on
    Redis), and the name is not set; a user allowed them gets them, and
    the proxy then answers them itself."""
    up = redis_factory(args=NOCLIENT)
    ref = ref_factory(like=up)
    proxy = proxy_factory(up=up)
    steps = [("AUTH", "noclient", "pw"), ("CLIENT", "SETNAME", "x"), ("CLIENT", "GETNAME"),
             ("CLIENT", "SETNAME", "a b"), ("HELLO", "3", "SETNAME", "y"), ("CLIENT", "GETNAME"),
             ("AUTH", "default", "x"), ("CLIENT", "SETNAME", "z"), ("CLIENT", "GETNAME"),
             ("AUTH", "noclient", "pw"), ("CLIENT", "GETNAME"), ("CLIENT", "SETNAME", "w")]

    def run(ep):
        with ep.raw() as c:
            if not pipelined:
                return [c.cmd(*s).raw for s in steps]
            c.send(b"".join(encode(*s) for s in steps))
            return [f.raw for f in c.read_frames(len(steps))]

    want = [norm(w) for w in run(ref)]
    # (6.2: "... to run the 'client' command or its subcommand")
    assert want[1].startswith(b"-NOPERM this user has no permissions to run the 'client"), want
    for _ in range(2):
        assert [norm(g) for g in run(proxy)] == want
    # SETINFO (Redis 7.2) is answered as 7.2 answers it: Redis 7.0 does not
    # know it, so its ACL cannot deny it (6.2's, which takes CLIENT away
    # and gives back the subcommands it knows, does)
    with proxy.raw() as c:
        assert c.cmd("AUTH", "noclient", "pw").raw == b"+OK\r\n"
        got = c.cmd("CLIENT", "SETINFO", "LIB-NAME", "l").raw
        assert got == b"+OK\r\n" if REDIS_VERSION >= (7, 0) else got.startswith(b"-NOPERM"), got


def test_client_name_commands_before_the_proxy_knows_redis_wants_a_password(redis_factory, ref_factory,
                                                                           proxy_factory):
    """Until the proxy has learnt that Redis wants a password (its probe is
    answered; Redis is kept busy meanwhile), a client that sent no AUTH
    gets NOAUTH for CLIENT SETNAME and GETNAME, as from Redis."""
    up = redis_factory(requirepass="pw")
    ref = ref_factory(like=up)
    busy = up.raw(auth=True)
    busy.send_cmd("DEBUG", "SLEEP", "1.5")
    try:
        proxy = proxy_factory(up=up, upstream_url="redis://default:pw@127.0.0.1:%d" % up.port)
        steps = [("CLIENT", "SETNAME", "x"), ("CLIENT", "GETNAME"), ("ECHO",), ("PING", "a", "b"),
                 ("AUTH", "pw"), ("CLIENT", "GETNAME"), ("CLIENT", "SETNAME", "x"), ("CLIENT", "GETNAME")]
        got = assert_same_steps(proxy, ref, steps, auth=False)
        assert got[0][1] == b"-NOAUTH Authentication required.\r\n", got
    finally:
        busy.close()


def test_client_name_commands_are_answered_locally_once_allowed(proxy, upstream):
    """The probe is paid once per user: after the first SETNAME and GETNAME,
    Redis sees no more CLIENT commands from the proxy."""
    def client_calls():
        stats = upstream.client().info("commandstats")
        return sum(v["calls"] for k, v in stats.items() if k.startswith("cmdstat_client|"))

    wait_first_acl_check(proxy)
    with proxy.raw() as c:
        assert [c.cmd("CLIENT", "SETNAME", "n1").raw, c.cmd("CLIENT", "GETNAME").raw] == [b"+OK\r\n", b"$2\r\nn1\r\n"]
        before = client_calls()
        for i in range(5):
            assert c.cmd("CLIENT", "SETNAME", "m%d" % i).raw == b"+OK\r\n"
            assert c.cmd("CLIENT", "GETNAME").raw == b"$2\r\nm%d\r\n" % i
        assert client_calls() == before


def test_select_errors_come_in_redis_order(redis_factory, ref_factory, proxy_factory):
    """Redis checks SELECT's arity, then the password, then the ACL, and
    only then the index, with its own text for each way it is wrong."""
    up = redis_factory(requirepass="pw", args=["--user", "noselect", "on", ">pw", "~*", "&*", "+@all", "-select"])
    ref = ref_factory(like=up)
    proxy = proxy_factory(up=up, upstream_url="redis://default:pw@127.0.0.1:%d" % up.port)
    with proxy.raw() as c:  # the proxy has learnt that Redis wants a password
        wait_until(lambda: c.cmd("PING").raw.startswith(b"-NOAUTH"), what="the proxy to learn about the password")
    bad = [("SELECT", "x"), ("SELECT", "-1"), ("SELECT", "2147483648"), ("SELECT", "-2147483649"),
           ("SELECT", "99999999999"), ("SELECT", "1.5"), ("SELECT", "16")]
    steps = [("SELECT",), *bad, ("AUTH", "pw"), *bad, ("SELECT", "3"), ("SET", "k", "3"), ("SELECT", "0"),
             ("AUTH", "noselect", "pw"), *bad, ("SELECT", "3"), ("GET", "k")]
    assert_same_steps(proxy, ref, steps, auth=False)


def test_client_info_describes_the_clients_own_connection(proxy, upstream):
    """CLIENT INFO shows the client's name and the id CLIENT ID gives, and
    another client finds it by that name in CLIENT LIST and can kill it
    with CLIENT KILL ID, as on Redis (it gets a connection of its own, as
    with CLIENT ID; a shared connection is other clients' too)."""
    with proxy.raw() as c, proxy.raw() as admin:
        assert c.cmd("CLIENT", "SETNAME", "app-7").raw == b"+OK\r\n"
        info = bytes(c.cmd("CLIENT", "INFO").value)
        assert re.search(rb" name=app-7 ", info), info
        cid = int(re.search(rb"^id=(\d+) ", info).group(1))
        assert c.cmd("CLIENT", "ID").value == cid
        listed = bytes(admin.cmd("CLIENT", "LIST").value)
        assert re.search(rb"^id=%d .* name=app-7 " % cid, listed, re.M), listed
        assert admin.cmd("CLIENT", "KILL", "ID", str(cid)).value == 1
        with pytest.raises(ConnectionClosed):
            c.cmd("PING", timeout=3)


def test_hello_with_an_option_redis_refuses(redis_factory, ref_factory, proxy_factory):
    """Redis 7.0 applies HELLO's options one by one (AUTH logs in, SETNAME
    names) and stops at the first it refuses (an invalid name, not an
    option), keeping what it did, and not switching protocol: the session
    through the proxy ends up with the same login and name."""
    up = redis_factory(requirepass="pw", args=["--user", "alice", "on", ">apw", "~*", "&*", "+@all"])
    ref = ref_factory(like=up)
    proxy = proxy_factory(up=up, upstream_url="redis://default:pw@127.0.0.1:%d" % up.port)
    with proxy.raw() as c:
        wait_until(lambda: c.cmd("PING").raw.startswith(b"-NOAUTH"), what="the proxy to learn about the password")
    for server in (up, ref):
        server.client().hset("h", "a", "1")
    # not logged in: Redis names the connection, then wants a login
    unauthenticated = [("HELLO", "3", "SETNAME", "early"), ("AUTH", "pw"), ("CLIENT", "GETNAME")]
    assert_same_steps(proxy, ref, unauthenticated, auth=False)
    who = [("ACL", "WHOAMI"), ("CLIENT", "GETNAME"), ("HGETALL", "h")]
    steps = [("HELLO", "3", "SETNAME", "a b"), ("HELLO", "3", "SETNAME", "n0", "FOO"), ("CLIENT", "GETNAME"),
             ("HELLO", "3", "AUTH", "alice", "bad", "SETNAME", "a b"),
             ("HELLO", "3", "AUTH", "alice", "apw", "SETNAME", "a b"), *who,
             ("HELLO", "2", "SETNAME", "a b", "SETNAME", "ok"), *who,
             ("HELLO", "3", "SETNAME", "n1", "AUTH", "default", "pw", "SETNAME", "c d"), *who,
             ("HELLO", "3", "AUTH", "alice", "apw", "FOO", "bar"), *who,
             ("HELLO", "3", "SETNAME", "n2", "AUTH", "default"), *who,
             ("HELLO", "3", "SETNAME", "n3", "SETNAME"), *who,
             ("HELLO", "3", "SETNAME", "n4", "AUTH", "alice", "bad", "SETNAME", "n5"), *who,
             ("HELLO", "3", "SETNAME", "", "AUTH", "alice", "bad"), *who]

    def run(ep):
        with ep.raw() as c:
            return [norm(c.cmd(*s).raw) for s in steps]

    want = run(ref)
    assert want[5] == b"$5\r\nalice\r\n" and want[13] == b"$7\r\ndefault\r\n", want
    assert run(proxy) == want


def test_client_info_after_setname_on_a_session_with_its_own_connection(proxy, ref):
    """After WATCH the session has a connection of its own; a CLIENT SETNAME
    then renames that connection too, so CLIENT INFO shows the name."""
    steps = [("WATCH", "k"), ("CLIENT", "SETNAME", "late"), ("CLIENT", "INFO")]

    def run(ep):
        with ep.raw() as c:
            out = [c.cmd(*s).raw for s in steps]
        return re.search(rb" name=(\S*) ", out[-1]).group(1)

    assert run(ref) == b"late"
    assert run(proxy) == b"late"


def test_hello_with_two_different_logins_is_refused(redis_factory, proxy_factory):
    """Redis logs in as each AUTH of a HELLO in turn and stops at the first
    it refuses; sidecache checks one identity per HELLO, so it refuses a
    HELLO with two different AUTH options with a clear error rather than
    let one through that Redis would refuse."""
    up = redis_factory(requirepass="pw", args=["--user", "alice", "on", ">apw", "~*", "&*", "+@all"])
    proxy = proxy_factory(up=up, upstream_url="redis://default:pw@127.0.0.1:%d" % up.port)
    with proxy.raw() as c:
        assert c.cmd("HELLO", "3", "AUTH", "alice", "bad", "AUTH", "default", "pw").raw == (
            b"-ERR sidecache: HELLO with two different AUTH options is not supported\r\n")
        assert c.cmd("GET", "k").raw.startswith(b"-NOAUTH")
        assert c.cmd("HELLO", "2", "AUTH", "alice", "apw", "AUTH", "alice", "apw").raw.startswith(b"*14\r\n")
        assert c.cmd("ACL", "WHOAMI").raw == b"$5\r\nalice\r\n"


def test_client_name_commands_while_redis_runs_a_long_script(redis_factory, ref_factory, proxy_factory):
    """A script past lua-time-limit makes Redis answer BUSY to CLIENT
    SETNAME and GETNAME: the proxy, not knowing yet whether it may answer
    them, relays that BUSY (and sets no name), as Redis does."""
    args = ["--lua-time-limit", "100"]
    up = redis_factory(args=args)
    ref = ref_factory(like=up)
    proxy = proxy_factory(up=up)
    steps = [("CLIENT", "SETNAME", "x"), ("CLIENT", "GETNAME")]

    def during_busy_script(server, ep):
        with server.raw() as s, ep.raw() as c:
            s.send_cmd("EVAL", "local t = redis.call('TIME') while true do end", "0")
            time.sleep(0.5)
            got = [c.cmd(*st, timeout=5).raw for st in steps]
            with server.raw() as k:
                assert k.cmd("SCRIPT", "KILL").raw == b"+OK\r\n"
            s.read_frame(timeout=5)
            got.append(c.cmd("CLIENT", "GETNAME", timeout=5).raw)
            return got

    want = during_busy_script(ref, ref)
    assert want[0].startswith(b"-BUSY") and want[2] == b"$-1\r\n", want
    assert during_busy_script(up, proxy) == want


@pytest.mark.parametrize("connections,db", [(1, 0), (2, 0)])
def test_what_ends_a_stall_is_not_sent_behind_it(redis_factory, ref_factory, proxy_factory, connections, db):
    """SCRIPT KILL while a script runs past its time limit, CLIENT UNPAUSE
    while a write waits for CLIENT PAUSE WRITE to end: Redis reads them from
    any connection but the stalled one, and answers at once. sidecache
    sends them on a connection with nothing ahead of them (before: on the
    shared connection its client id chose, which could be the one the
    script or the paused write held, and they waited there until
    upstream-timeout while the script ran on). With a shared connection
    idle it goes there, else on a new connection. (Where that new one
    must SELECT a database, Redis answers that BUSY: README.)"""
    up = redis_factory(args=busy_threshold_args(200))
    ref = ref_factory(like=up)
    proxy = proxy_factory(up=up, args=("--upstream-connections", str(connections)),
                          upstream_url="redis://127.0.0.1:%d/%d" % (up.port, db))

    def scenario(server, ep):
        got = []
        with ep.raw() as s, ep.raw() as k:
            if ep is not proxy:
                s.cmd("SELECT", str(db))
            s.send_cmd("EVAL", "while true do end", "0")
            time.sleep(0.5)
            got.append(k.cmd("SCRIPT", "KILL", timeout=3).raw)
            got.append(s.read_frame(timeout=5).raw[:25])
        with ep.raw() as p, ep.raw() as w, ep.raw() as k:
            assert p.cmd("CLIENT", "PAUSE", "5000", "WRITE").raw == b"+OK\r\n"
            w.send_cmd("SET", "k", "1")
            time.sleep(0.3)
            got.append(k.cmd("CLIENT", "UNPAUSE", timeout=3).raw)
            got.append(w.read_frame(timeout=3).raw)
        return got

    want = scenario(ref, ref)
    assert want[0] == want[2] == want[3] == b"+OK\r\n" and want[1].startswith(b"-"), want
    for _ in range(3):  # whichever shared connection the clients' ids choose
        assert scenario(up, proxy) == want


@pytest.mark.parametrize("sticky", [("CLIENT", "INFO"), ("CLIENT", "ID"), ("SELECT", "1"), ("READONLY",)],
                         ids=lambda s: " ".join(s))
def test_name_set_while_watching_survives_a_command_with_connection_state(proxy, ref, sticky):
    """WATCH gives the session a connection of its own; a name set then
    must stay the session's when a command with connection state keeps
    that connection for good (its GETNAME then goes to Redis)."""
    steps = [("WATCH", "k"), ("CLIENT", "SETNAME", "w"), sticky, ("CLIENT", "GETNAME"), ("UNWATCH",),
             ("CLIENT", "GETNAME")]

    def scenario(ep):
        with ep.raw() as c:
            out = [c.cmd(*s).raw for s in steps]
        return [o for s, o in zip(steps, out) if s[0] != "CLIENT" or s[1] != "INFO" and s[1] != "ID"]

    assert_same_runs(scenario, proxy, ref)


def test_hello_refused_at_the_first_of_two_equal_logins_keeps_the_name_before_it(redis_factory, ref_factory,
                                                                                  proxy_factory):
    """Redis 7.0 stops at the first AUTH it refuses: the name given before
    that one holds, not one given between the two."""
    up = redis_factory(args=["--user", "u", "on", ">good", "~*", "&*", "+@all"])
    ref = ref_factory(like=up)
    proxy = proxy_factory(up=up)
    steps = [("CLIENT", "SETNAME", "orig"),
             ("HELLO", "2", "SETNAME", "a", "AUTH", "u", "bad", "SETNAME", "b", "AUTH", "u", "bad"),
             ("CLIENT", "GETNAME")]
    assert_same_steps(proxy, ref, steps)
