"""What the upstream URL sets: the database sessions start in."""
import pytest


@pytest.mark.proxy_only
def test_upstream_url_db_is_where_sessions_start(proxy_factory, upstream):
    proxy = proxy_factory(upstream_url="redis://127.0.0.1:%d/2" % upstream.port)
    r = proxy.client()
    r.set("k", "in-db2")
    assert r.get("k") == b"in-db2"
    assert upstream.client(db=2).get("k") == b"in-db2"
    assert upstream.client(db=0).get("k") is None
    with proxy.raw() as c:
        assert c.cmd("GET", "k").raw == b"$6\r\nin-db2\r\n"
        assert c.cmd("SELECT", 0).raw == b"+OK\r\n"
        assert c.cmd("GET", "k").raw == b"$-1\r\n"
        assert c.cmd("SELECT", 2).raw == b"+OK\r\n"
        assert c.cmd("GET", "k").raw == b"$6\r\nin-db2\r\n"


@pytest.mark.proxy_only
def test_upstream_url_with_acl_user_clients_still_log_in_as_themselves(proxy_factory, redis_factory):
    up = redis_factory(args=["--user", "proxyuser", "on", ">ppw", "~*", "&*", "+@all"])
    up.client().execute_command("ACL", "SETUSER", "alice", "on", ">pw", "~a:*", "+@all")
    proxy = proxy_factory(up=up, upstream_url="redis://proxyuser:ppw@127.0.0.1:%d" % up.port)
    with proxy.raw() as anon, proxy.raw() as alice:
        # No requirepass: an unauthenticated client is Redis's default user.
        assert anon.call("ACL", "WHOAMI") == b"default"
        assert alice.cmd("AUTH", "alice", "pw").raw == b"+OK\r\n"
        assert alice.call("ACL", "WHOAMI") == b"alice"
        assert alice.cmd("GET", "b:1").raw.startswith(b"-NOPERM")


@pytest.mark.proxy_only
def test_an_upstream_db_redis_refuses_is_logged_once(proxy_factory, upstream):
    """A db past Redis's `databases` in the upstream URL: each client gets
    Redis's error (a direct client's SELECT would), and the log says why,
    once, where it said nothing (the handshake's refusal was logged at
    verbose only)."""
    proxy = proxy_factory(upstream_url="redis://127.0.0.1:%d/99" % upstream.port)
    for _ in range(3):
        with proxy.raw() as c:
            assert c.cmd("PING").raw == b"-ERR DB index is out of range\r\n"
    with proxy.raw() as c:  # a client's own SELECT of a good db works
        assert c.cmd("SELECT", 0).raw == b"+OK\r\n"
        assert c.cmd("PING").raw == b"+PONG\r\n"
    warned = [line for line in open(proxy.logpath).read().splitlines() if "upstream db 99 refused" in line]
    assert len(warned) == 1, warned
    assert "level=warning" in warned[0] and "ERR DB index is out of range" in warned[0]


@pytest.mark.proxy_only
def test_a_select_refused_for_want_of_a_password_is_no_db_refusal(proxy_factory, redis_factory):
    """Redis wants a password the upstream URL does not give: the
    handshake's SELECT is refused NOAUTH, which clients are told (they log
    in themselves); the log says nothing of the db, and a db refusal later
    would still be logged."""
    up = redis_factory(args=["--requirepass", "pw"])
    proxy = proxy_factory(up=up, upstream_url="redis://127.0.0.1:%d/2" % up.port)
    with proxy.raw() as c:
        assert c.cmd("GET", "k").raw.startswith(b"-NOAUTH ")
        assert c.cmd("AUTH", "pw").raw == b"+OK\r\n"
        assert c.cmd("SET", "k", "v").raw == b"+OK\r\n"
    assert "upstream db" not in open(proxy.logpath).read()
