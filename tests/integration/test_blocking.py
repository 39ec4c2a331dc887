"""Blocking commands through the proxy: unblocked by another client (through
the proxy or directly), timeouts look like Redis's, and one blocked client
never stalls the others."""
import signal
import socket
import time

import pytest

from exacthelpers import sidecache_info
from helpers import HOST, assert_same_runs, encode, wait_until

# name -> (setup commands, blocking command, unblocking command, expected reply
#          bytes in RESP2, expected reply bytes in RESP3, check after)
CASES = {
    "BLPOP": ([], ("BLPOP", "bl", "other", 5), ("LPUSH", "bl", "a"),
              b"*2\r\n$2\r\nbl\r\n$1\r\na\r\n", None, None),
    "BRPOP": ([], ("BRPOP", "br", 5), ("RPUSH", "br", "x", "y"),
              b"*2\r\n$2\r\nbr\r\n$1\r\ny\r\n", None, (("LRANGE", "br", 0, -1), [b"x"])),
    "BLMOVE": ([], ("BLMOVE", "src", "dst", "LEFT", "RIGHT", 5), ("RPUSH", "src", "a", "b"),
               b"$1\r\na\r\n", None, (("LRANGE", "dst", 0, -1), [b"a"])),
    "BZPOPMIN": ([], ("BZPOPMIN", "bz", 5), ("ZADD", "bz", "1.5", "m", "3", "n"),
                 b"*3\r\n$2\r\nbz\r\n$1\r\nm\r\n$3\r\n1.5\r\n",
                 b"*3\r\n$2\r\nbz\r\n$1\r\nm\r\n,1.5\r\n", (("ZCARD", "bz"), 1)),
    "XREAD_BLOCK": ([("XADD", "xs", "1-1", "old", "1")], ("XREAD", "BLOCK", 5000, "STREAMS", "xs", "$"),
                    ("XADD", "xs", "2-1", "f", "v"),
                    b"*1\r\n*2\r\n$2\r\nxs\r\n*1\r\n*2\r\n$3\r\n2-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n",
                    b"%1\r\n$2\r\nxs\r\n*1\r\n*2\r\n$3\r\n2-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n", None),
}


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("via", ["proxy", "direct"])
@pytest.mark.parametrize("name", list(CASES))
def test_blocking_command_unblocked_by_another_client(proxy, upstream, name, via, protocol):
    setup, blocking, unblock, want2, want3, after = CASES[name]
    want = want3 if (protocol == 3 and want3) else want2
    with proxy.raw() as s:
        for c in setup:
            s.cmd(*c)
    with proxy.raw(protocol=protocol if protocol == 3 else None) as blocked:
        t0 = time.monotonic()
        blocked.send_cmd(*blocking)
        blocked.expect_silence(0.2)          # really blocked
        # ... on Redis: an XADD before XREAD's `$` would go unseen
        wait_until(lambda: upstream.client().info("clients")["blocked_clients"] >= 1, timeout=5,
                   what="the blocking command on Redis")
        other = (proxy if via == "proxy" else upstream).client()
        other.execute_command(*unblock)
        f = blocked.read_frame(timeout=3)
        elapsed = time.monotonic() - t0
        assert f.raw == want, (name, f)
        assert elapsed < 3, "unblocked after %.2fs" % elapsed
        # The connection is usable afterwards.
        assert blocked.cmd("PING").raw == b"+PONG\r\n"
    if after:
        cmd, expected = after
        assert proxy.client().execute_command(*cmd) == expected


@pytest.mark.parametrize("protocol", [2, 3])
def test_blocking_timeouts_reply_like_redis(proxy, ref, protocol):
    steps = [("BLPOP", "nol", "0.2"), ("BRPOP", "nol", "0.2"), ("BLMOVE", "nol", "d", "LEFT", "LEFT", "0.2"),
             ("BZPOPMIN", "noz", "0.2"), ("XREAD", "BLOCK", 200, "STREAMS", "nos", "$"),
             ("BLPOP", "nol", "-1"), ("BLPOP", "nol", "abc"), ("XREAD", "BLOCK", -5, "STREAMS", "s", "$")]

    def scenario(ep):
        out = []
        with ep.raw(protocol=3 if protocol == 3 else None) as c:
            for s in steps:
                t0 = time.monotonic()
                f = c.cmd(*s, timeout=5)
                dt = time.monotonic() - t0
                ok_time = dt >= 0.15 if f.raw[:1] != b"-" else True
                out.append((s, (f.raw, ok_time)))
        return out

    got = assert_same_runs(scenario, proxy, ref)
    assert got[0][1] == ((b"_\r\n" if protocol == 3 else b"*-1\r\n"), True)


def test_wait_returns_replica_count_like_redis(proxy, ref):
    def scenario(ep):
        with ep.raw() as c:
            c.cmd("SET", "k", "v")
            t0 = time.monotonic()
            f1 = c.cmd("WAIT", 0, 0)
            f2 = c.cmd("WAIT", 1, 300)
            waited = time.monotonic() - t0
            f3 = c.cmd("WAIT", "x", 0)
            return [("WAIT 0 0", f1.raw), ("WAIT 1 300", f2.raw), ("waited", waited >= 0.25),
                    ("WAIT x", f3.raw)]

    got = dict(assert_same_runs(scenario, proxy, ref))
    assert got["WAIT 0 0"] == b":0\r\n"
    assert got["WAIT 1 300"] == b":0\r\n"


@pytest.mark.timeout(30)
def test_blocked_client_does_not_block_other_clients(proxy):
    """While clients sit in BLPOP 5 and WAIT 1 1500, another client's GETs
    and SETs each return promptly; then each blocked client gets its item."""
    n_blocked = 10
    blocked = [proxy.raw() for _ in range(n_blocked)]
    waiter = proxy.raw()
    try:
        for b in blocked:
            b.send_cmd("BLPOP", "q", 5)
        waiter.send_cmd("WAIT", 1, 1500)
        time.sleep(0.2)
        r = proxy.client()
        worst = 0.0
        t_all = time.monotonic()
        for i in range(50):
            t0 = time.monotonic()
            r.set("i%d" % i, i)
            assert r.get("i%d" % i) == b"%d" % i
            assert r.get("other") is None
            worst = max(worst, time.monotonic() - t0)
        assert worst < 0.5, "a GET/SET took %.2fs while others were blocked" % worst
        assert time.monotonic() - t_all < 2.5
        # Fresh connections are accepted and served too.
        with proxy.raw() as fresh:
            t0 = time.monotonic()
            assert fresh.cmd("PING", timeout=2).raw == b"+PONG\r\n"
            assert time.monotonic() - t0 < 0.5
        # Unblock all: each blocked client gets exactly one distinct item.
        r.rpush("q", *["item%d" % i for i in range(n_blocked)])
        got = sorted(b.read_frame(timeout=3).value[1] for b in blocked)
        assert got == sorted(b"item%d" % i for i in range(n_blocked))
        assert r.llen("q") == 0
        assert waiter.read_frame(timeout=5).raw == b":0\r\n"
    finally:
        for b in blocked:
            b.close()
        waiter.close()


def test_blocked_client_disconnect_does_not_consume_items(proxy, upstream):
    """A client that gives up while blocked (closes its connection) must not
    later swallow an element pushed for someone else."""
    d = upstream.client()
    own_before = proxy_clients(proxy)
    c = proxy.raw()
    c.send_cmd("BLPOP", "gone", 5)
    wait_until(lambda: d.info("clients")["blocked_clients"] == 1, timeout=5, what="the BLPOP on Redis")
    c.close()
    wait_until(lambda: blpops_gone(proxy, d, own_before), timeout=5, what="the blocked client gone")
    r = proxy.client()
    r.rpush("gone", "keep")
    time.sleep(0.2)
    assert upstream.client().lrange("gone", 0, -1) == [b"keep"]


@pytest.mark.parametrize("close", ["close", "shutdown"])
def test_a_client_gone_before_its_blocking_command_went_consumes_nothing(proxy, upstream, close):
    """A pipeline of a GET and BLPOP 0, then the client goes (close, or a
    half-close) before the GET's reply came: Redis runs the BLPOP, blocks,
    and frees the client at the end of its input. Nothing stays blocked on
    Redis, and an element pushed afterwards stays in the list."""
    n = 10
    d = upstream.client()
    own_before = proxy_clients(proxy)
    for i in range(n):
        c = proxy.raw()
        c.send(encode("GET", "str") + encode("BLPOP", "ghost%d" % i, 0))
        if close == "shutdown":
            c.sock.shutdown(socket.SHUT_WR)
        else:
            c.close()
    # a push before every BLPOP has run or been dropped is one a BLPOP still
    # on its way may take, on Redis as well
    wait_until(lambda: blpops_gone(proxy, d, own_before), timeout=10,
               what="the clients and the connections of their BLPOPs gone")
    for i in range(n):
        d.rpush("ghost%d" % i, "keep")
    time.sleep(0.2)
    assert [d.llen("ghost%d" % i) for i in range(n)] == [1] * n


@pytest.mark.proxy_only
@pytest.mark.parametrize("session", ["shared", "sticky"])
def test_blocking_command_outlives_upstream_timeout(proxy_factory, upstream, session):
    """BLPOP 0 waits as long as it takes, as on Redis: upstream-timeout
    (here 1 s) is for connections that stopped answering, not for a blocked
    command, also on a session pinned for good (after CLIENT ID), where it
    used to be cut off with an upstream-timeout error."""
    p = proxy_factory(args=("--upstream-timeout", "1"))
    c = p.raw()
    if session == "sticky":
        assert c.cmd("CLIENT", "ID").type == ":"
    c.send_cmd("BLPOP", "blq", 0)
    c.expect_silence(timeout=4.5)  # the check runs once a second: 3 s would do
    upstream.raw(auth=True).cmd("RPUSH", "blq", "v")
    assert c.read_frame(timeout=5).raw == b"*2\r\n$3\r\nblq\r\n$1\r\nv\r\n"


@pytest.mark.timeout(30)
def test_wait_counts_the_writes_the_client_sent_before_it(redis_factory, proxy, upstream):
    """WAIT runs on a connection of the client's own, while the client's
    writes went on the shared one; Redis counts acks up to that connection's
    last command. With the replica stopped, WAIT after a write must say no
    replica has it, also on a connection taken from the idle pool."""
    r = upstream.client()
    r.config_set("repl-diskless-sync-delay", "0")
    replica = redis_factory(name="replica", args=("--replicaof", HOST, str(upstream.port)))
    wait_until(lambda: r.info("replication").get("slave0", {}).get("state") == "online",
               timeout=10, what="the replica online")
    with proxy.raw() as x:              # leaves a clean own connection in the pool
        assert x.cmd("WATCH", "k").raw == b"+OK\r\n"
        assert x.cmd("UNWATCH").raw == b"+OK\r\n"
    time.sleep(1.5)                      # the replica acks (once a second)
    replica.proc.send_signal(signal.SIGSTOP)
    try:
        with proxy.raw() as a:
            assert a.cmd("SET", "durable", "1").raw == b"+OK\r\n"
            assert a.cmd("WAIT", "1", "300").raw == b":0\r\n"
    finally:
        replica.proc.send_signal(signal.SIGCONT)


def test_blocking_commands_beyond_redis_maxclients_get_redis_error(redis_factory, proxy_factory):
    """Each blocking command takes a connection of its own; once Redis is
    full it answers a new connection with its maxclients error and closes
    it. A client past that gets Redis's error, as direct, not a lost
    connection."""
    up = redis_factory(args=["--maxclients", "12"])
    proxy = proxy_factory(up=up)
    conns = [proxy.raw() for _ in range(16)]
    try:
        with proxy.raw() as c:
            assert c.cmd("PING").raw == b"+PONG\r\n"  # the shared connections are up
        for c in conns:
            c.send_cmd("BLPOP", "q", "3")
        got = [c.read_frame(timeout=10).raw for c in conns]
    finally:
        for c in conns:
            c.close()
    refused = [g for g in got if g != b"*-1\r\n"]
    assert refused and len(refused) < len(got), got
    assert set(refused) == {b"-ERR max number of clients reached\r\n"}, got


def proxy_clients(proxy):
    """The proxy's own clients (its INFO's connected_clients is Redis's), or
    None against Redis itself."""
    return sidecache_info(proxy).get("connected_clients")


def blpops_gone(proxy, d, own_before):
    """The clients a test closed are gone from the proxy (it sends nothing
    more of theirs), and no connection that ran a BLPOP is left on Redis (d:
    a client of Redis itself): a BLPOP written before a connection closed is
    read and run before its close, and before the CLIENT LIST sent after."""
    if own_before is not None and proxy_clients(proxy) > own_before:
        return False
    return (all(cl.get("cmd") != "blpop" for cl in d.client_list())
            and d.info("clients")["blocked_clients"] == 0)


def redis_clients(server):
    with server.raw(auth=True) as a:
        info = a.cmd("INFO", "clients").raw.decode()
    return int(info.split("connected_clients:")[1].split("\r\n")[0])


@pytest.mark.parametrize("after", [
    [("GET", "x")],
    [("RESET",)],
    [("RESET",), ("PING",)],
    [("SUBSCRIBE", "ch")] + [("PING",)] * 5000,
], ids=["command-waiting", "tunnel-reset", "tunnel-reset-then-more", "more-than-the-proxy-reads"])
def test_client_gone_behind_a_blocked_command_frees_its_connection(proxy, ref, upstream, after):
    """A client that sends BLPOP never 0 and something the proxy holds back
    behind it (a GET waiting for the BLPOP's connection; a RESET in a
    tunnel, and what follows it; 70 KB, more than the proxy reads of a
    client that waits, so that some are still unread in the socket when
    the close comes), then disconnects: Redis frees it at once, and so must
    the proxy, closing the connection the BLPOP blocks, rather than hold
    both until the BLPOP returns (here: never). The last two used to."""
    def scenario(ep):
        server = upstream if ep is proxy else ref
        with ep.raw() as c0:
            c0.cmd("PING")
        before = redis_clients(server)
        for _ in range(3):
            c = ep.raw()
            if after[0] == ("RESET",):
                c.cmd("CLIENT", "REPLY", "ON")  # a tunnel
            c.send(encode("BLPOP", "never", "0") + b"".join(encode(*a) for a in after))
            time.sleep(0.1)
            c.close()
        deadline = time.monotonic() + 5
        while redis_clients(server) > before and time.monotonic() < deadline:
            time.sleep(0.1)
        return [("Redis connections left behind", redis_clients(server) - before)]

    assert_same_runs(scenario, proxy, ref)
