"""AUTH and HELLO AUTH against a password-protected Redis, and ACL users:
what a client may do through the proxy is exactly what Redis allows its
user, with Redis's own error texts."""
import re
import time

import pytest
import redis

from faulthelpers import toxiproxy, toxiproxy_bin  # noqa: F401 (fixtures)
from helpers import assert_same_runs, assert_same_steps, encode

PASS = "s3cret"
ID_RE = re.compile(rb"(\$2\r\nid\r\n):\d+\r\n")


def norm(raw):
    return ID_RE.sub(rb"\1:<id>\r\n", raw)


PROXY_USER = ["--user", "proxyuser", "on", ">ppw", "~*", "&*", "+@all"]


@pytest.fixture
def make_secured(redis_factory, ref_factory, proxy_factory):
    """(proxy, ref) in front of redis-servers with requirepass. The proxy is
    given the default password in its upstream URL, or nothing, or another
    ACL user of its own (credentials in the URL are for the proxy's own
    connections); in every case a client that has not sent AUTH must be
    refused, as Redis refuses it, and clients log in as themselves."""

    def make(kind):
        up = redis_factory(requirepass=PASS, args=PROXY_USER)
        ref = ref_factory(like=up)
        url = None
        if kind == "url-with-password":
            url = "redis://default:%s@127.0.0.1:%d" % (PASS, up.port)
        elif kind == "url-with-acl-user":
            url = "redis://proxyuser:ppw@127.0.0.1:%d" % up.port
        return proxy_factory(up=up, upstream_url=url), ref

    return make


@pytest.fixture(params=["url-with-password", "url-without-password", "url-with-acl-user"])
def secured(request, make_secured):
    return make_secured(request.param)


def test_auth_requirepass_noauth_then_wrongpass_then_ok(secured):
    proxy, ref = secured
    steps = [("GET", "k"), ("SET", "i1", "x"), ("PING",), ("SELECT", 1), ("AUTH", "wrong"),
             ("GET", "k"), ("AUTH", "default", "wrong"), ("AUTH", "nosuchuser", PASS), ("AUTH",),
             ("AUTH", PASS), ("SET", "k", "v"), ("GET", "k"), ("GET", "i1"), ("AUTH", "wrong-again"),
             ("GET", "k"), ("AUTH", "default", PASS), ("ACL", "WHOAMI")]
    got = assert_same_steps(proxy, ref, steps, auth=False)
    assert got[0][1] == b"-NOAUTH Authentication required.\r\n"
    assert got[1][1] == b"-NOAUTH Authentication required.\r\n"
    assert got[4][1] == b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    assert got[5][1] == b"-NOAUTH Authentication required.\r\n"
    assert got[9][1] == b"+OK\r\n"
    assert got[11][1] == b"$1\r\nv\r\n"
    assert got[12][1] == b"$-1\r\n", "the unauthenticated SET i1 must not have happened"


def test_unauthenticated_client_never_gets_cached_data(secured):
    """After an authenticated client has read a key (possibly filling the
    cache), a client that has not authenticated still gets NOAUTH for it."""
    proxy, _ = secured
    authed = proxy.client()
    authed.set("i2", "secret")
    assert authed.get("i2") == b"secret"
    assert authed.get("i2") == b"secret"
    with proxy.raw() as anon:
        assert anon.cmd("GET", "i2").raw == b"-NOAUTH Authentication required.\r\n"
        assert anon.cmd("MGET", "i2").raw == b"-NOAUTH Authentication required.\r\n"
        assert anon.cmd("AUTH", "bad").raw.startswith(b"-WRONGPASS")
        assert anon.cmd("GET", "i2").raw == b"-NOAUTH Authentication required.\r\n"


def test_hello3_auth_with_requirepass(secured):
    proxy, ref = secured
    steps = [("HELLO", "3"), ("HELLO", "3", "AUTH", "default", "bad"), ("GET", "k"),
             ("HELLO", "3", "AUTH", "default", PASS), ("SET", "k", "v"), ("GET", "k"), ("GET", "nokey"),
             ("HELLO", "2", "AUTH", "default", PASS, "SETNAME", "app"), ("CLIENT", "GETNAME"),
             ("GET", "nokey"), ("HELLO", "3", "AUTH", "default"), ("HELLO", "3", "AUTH", "default", "bad"),
             ("GET", "k")]

    def scenario(ep):
        with ep.raw() as c:
            return [(s, norm(c.cmd(*s).raw)) for s in steps]

    got = assert_same_runs(scenario, proxy, ref)
    assert got[0][1].startswith(b"-NOAUTH HELLO must be called with the client already authenticated")
    assert got[1][1].startswith(b"-WRONGPASS")
    assert got[2][1].startswith(b"-NOAUTH")
    assert got[3][1].startswith(b"%7\r\n")
    assert got[6][1] == b"_\r\n"
    assert got[8][1] == b"$3\r\napp\r\n"
    assert got[9][1] == b"$-1\r\n"
    assert got[12][1] == b"$1\r\nv\r\n", "a failed HELLO AUTH keeps the earlier login"


@pytest.mark.parametrize("protocol", [2, 3])
def test_redis_py_password_login_works_and_missing_password_fails(secured, protocol):
    proxy, _ = secured
    r = proxy.client(protocol=protocol)
    assert r.set("pyk", "v") is True
    assert r.get("pyk") == b"v"
    bad = proxy.client(protocol=protocol, password="wrong")
    with pytest.raises(redis.AuthenticationError):
        bad.ping()
    anon = proxy.client(protocol=2, auth=False)
    with pytest.raises(redis.AuthenticationError):
        anon.get("pyk")


ALICE = ("ACL", "SETUSER", "alice", "on", ">pw", "~a:*", "+@all")


@pytest.fixture
def acl_pair(upstream, ref):
    for s in (upstream, ref):
        assert s.client().execute_command(*ALICE) in (b"OK", True)
    return upstream, ref


def acl_scenario(ep, protocol=2):
    out = []
    with ep.raw() as admin:
        # The default user writes and reads keys alice may not see; a proxy
        # may cache these reads.
        for c in [("SET", "b:1", "secret"), ("SET", "i1", "inode"), ("HSET", "d1", "n", "dent"),
                  ("GET", "b:1"), ("GET", "i1"), ("GET", "i1"), ("HGET", "d1", "n"), ("HGET", "d1", "n")]:
            out.append((("admin",) + c, admin.cmd(*c).raw))
    with ep.raw() as alice:
        login = ("HELLO", "3", "AUTH", "alice", "pw") if protocol == 3 else ("AUTH", "alice", "pw")
        steps = [("AUTH", "alice", "wrong"), login, ("ACL", "WHOAMI"),
                 ("SET", "a:1", "x"), ("GET", "a:1"), ("GET", "a:1"), ("GET", "b:1"), ("SET", "b:1", "y"),
                 ("GET", "i1"), ("GET", "i1"), ("HGET", "d1", "n"), ("MGET", "a:1", "b:1"),
                 ("MGET", "i1"), ("EXISTS", "b:1"), ("HGETALL", "d1"), ("GET", "a:nokey")]
        for s in steps:
            out.append((s, norm(alice.cmd(*s).raw)))
    return out


@pytest.mark.parametrize("protocol", [2, 3])
def test_acl_user_gets_noperm_outside_its_keys(proxy, acl_pair, protocol):
    upstream, ref = acl_pair
    got = dict(assert_same_runs(lambda ep: acl_scenario(ep, protocol), proxy, ref))
    noperm = b"-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"
    assert got[("GET", "a:1")] == b"$1\r\nx\r\n"
    assert got[("GET", "b:1")] == noperm
    assert got[("SET", "b:1", "y")] == noperm
    assert got[("GET", "i1")] == noperm, "alice must not get the default user's cached i1"
    assert got[("HGET", "d1", "n")] == noperm
    assert upstream.client().get("b:1") == b"secret"


def test_acl_user_login_through_redis_py(proxy, acl_pair):
    r = proxy.client(username="alice", password="pw")
    assert r.execute_command("ACL", "WHOAMI") == b"alice"
    r.set("a:2", "v")
    assert r.get("a:2") == b"v"
    with pytest.raises(redis.exceptions.NoPermissionError):
        r.get("b:2")
    r3 = proxy.client(protocol=3, username="alice", password="pw")
    assert r3.get("a:2") == b"v"
    with pytest.raises(redis.exceptions.NoPermissionError):
        r3.get("b:2")


def test_acl_users_on_the_same_proxy_stay_separate(proxy, acl_pair):
    """alice and the default user interleave on the same proxy (and possibly
    the same upstream connections): each keeps its own rights."""
    with proxy.raw() as alice, proxy.raw() as admin:
        assert alice.cmd("AUTH", "alice", "pw").raw == b"+OK\r\n"
        for i in range(50):
            admin.cmd("SET", "i%d" % i, "v")
            assert admin.call("GET", "i%d" % i) == b"v"
            assert alice.cmd("GET", "i%d" % i).raw.startswith(b"-NOPERM"), i
            assert alice.cmd("SET", "a:%d" % i, "v").raw == b"+OK\r\n"
            assert admin.call("ACL", "WHOAMI") == b"default"


def test_reset_logs_the_client_out_like_redis(secured):
    """RESET re-authenticates as the default user: with requirepass, that
    means unauthenticated again."""
    proxy, ref = secured
    steps = [("AUTH", PASS), ("SET", "k", "v"), ("SET", "i3", "v3"), ("GET", "i3"), ("GET", "i3"),
             ("RESET",), ("GET", "k"), ("GET", "i3"), ("AUTH", PASS), ("GET", "k"), ("GET", "i3")]
    got = assert_same_steps(proxy, ref, steps, auth=False)
    assert got[5][1] == b"+RESET\r\n"
    assert got[6][1] == b"-NOAUTH Authentication required.\r\n"
    assert got[7][1] == b"-NOAUTH Authentication required.\r\n", "served from cache after RESET"
    assert got[9][1] == b"$1\r\nv\r\n"


def test_acl_reset_returns_to_default_user(proxy, acl_pair):
    upstream, ref = acl_pair
    steps = [("AUTH", "alice", "pw"), ("ACL", "WHOAMI"), ("RESET",), ("ACL", "WHOAMI"), ("SET", "b:9", "x")]
    got = assert_same_steps(proxy, ref, steps, auth=False)
    assert got[1][1] == b"$5\r\nalice\r\n"
    assert got[3][1] == b"$7\r\ndefault\r\n"
    assert got[4][1] == b"+OK\r\n"


@pytest.mark.parametrize("data", [b"*11\r\n", b"*1\r\n$16385\r\n"], ids=["count", "bulk"])
def test_unauthenticated_big_request_refused_like_redis(make_secured, data):
    """Before AUTH, Redis refuses a request of more than 10 arguments or a
    bulk above 16 KB ("unauthenticated multibulk/bulk length") and closes:
    an unauthenticated client cannot make anyone buffer much."""
    proxy, ref = make_secured("url-with-password")

    def scenario(ep):
        with ep.raw() as c:
            c.send(data)
            try:
                reply = c.read_frame(timeout=2).raw
            except OSError:
                reply = b"<no reply within 2s: the request was accepted and is being buffered>"
            try:
                c.expect_closed(1)
                closed = True
            except AssertionError:
                closed = False
            return [("reply", reply), ("closed", closed)]

    got = assert_same_runs(scenario, proxy, ref)
    assert got[0][1].startswith(b"-ERR Protocol error: unauthenticated")


def test_auth_pipelined_with_commands(secured):
    """AUTH followed at once (same write) by commands: those after a good
    AUTH run authenticated, those after a bad one get NOAUTH."""
    proxy, ref = secured
    cmds = [("AUTH", "bad"), ("SET", "k", "1"), ("AUTH", PASS), ("SET", "k", "2"), ("GET", "k"),
            ("HELLO", "3", "AUTH", "default", PASS), ("GET", "nokey"), ("AUTH", "default", "bad"),
            ("GET", "k")]

    def scenario(ep):
        with ep.raw() as c:
            c.send(b"".join(encode(*x) for x in cmds))
            return list(zip(cmds, (norm(f.raw) for f in c.read_frames(len(cmds)))))

    got = assert_same_runs(scenario, proxy, ref)
    assert got[1][1].startswith(b"-NOAUTH")
    assert got[4][1] == b"$1\r\n2\r\n"
    assert got[6][1] == b"_\r\n"
    assert got[8][1] == b"$1\r\n2\r\n"


@pytest.mark.proxy_only
def test_failed_auths_leave_no_identity_behind(proxy_factory, upstream):
    """Each AUTH of a user Redis refuses is tried on a connection of that
    identity (as Redis would check it), and the identity is dropped once no
    client uses it: 300 failed AUTHs of distinct users used to leave 300
    identities, each kept for a minute and scanned at every AUTH."""
    p = proxy_factory()
    c = p.raw()
    assert c.cmd("PING").raw == b"+PONG\r\n"

    def pools():
        return int(dict(line.split(":", 1) for line in
                        c.cmd("INFO", "sidecache").value.decode().splitlines()
                        if ":" in line)["upstream_pools"])

    before = pools()
    for i in range(300):
        r = c.cmd("AUTH", "nobody%d" % i, "wrong")
        assert r.raw.startswith(b"-WRONGPASS"), r.raw
    deadline = time.monotonic() + 5
    while pools() > before:
        assert time.monotonic() < deadline, "%d identities left, %d before" % (pools(), before)
        time.sleep(0.1)
    assert c.cmd("PING").raw == b"+PONG\r\n"


@pytest.mark.proxy_only
def test_request_begun_before_password_is_known_gets_redis_limits(redis_factory, toxiproxy, proxy_factory):
    """Whether Redis wants a password is learned from a PING without
    credentials, one round trip after the first such client arrives. A
    request that client began meanwhile (a bulk of 16,385 bytes announced)
    was framed without Redis's pre-AUTH limits and then waited for its
    bytes for ever; once the answer (NOAUTH) is in, it is framed again and
    refused as Redis refuses it. Toxiproxy makes that round trip 300 ms."""
    up = redis_factory(requirepass=PASS)
    data = toxiproxy.create("data", up.port)
    data.toxic("latency", stream="downstream", latency=300)
    p = proxy_factory(up=up, upstream_url="redis://default:%s@127.0.0.1:%d" % (PASS, data.port))
    with p.raw() as c:
        c.send(b"*1\r\n$16385\r\n")
        assert c.read_frame(timeout=5).raw == b"-ERR Protocol error: unauthenticated bulk length\r\n"
        c.expect_closed(3)


@pytest.mark.timeout(60)
def test_auth_with_many_passwords_does_not_hold_upstream_connections(proxy, upstream):
    """Redis's default user is nopass, so AUTH default <anything> succeeds.
    Each password is an identity of its own in sidecache, with its own
    connection to Redis; those no session uses are kept, but only a few:
    one client's 300 AUTHs must not hold 300 connections of Redis's
    maxclients."""
    with proxy.raw() as c:
        for i in range(300):
            assert c.call("AUTH", "default", "pw%d" % i) == b"OK"

        def redis_clients():
            with upstream.raw(auth=True) as d:
                info = d.call("INFO", "clients").decode()
            return int(info.split("connected_clients:")[1].split("\r\n")[0])
        deadline = time.monotonic() + 10
        while redis_clients() >= 40 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert redis_clients() < 40
