"""RESP2 and RESP3 clients side by side; HELLO; PING and ECHO per protocol."""
import re

import pytest

from helpers import REDIS_VERSION, Double, RMap, RSet, assert_same_runs, assert_same_steps, encode

ID_RE = re.compile(rb"(\$2\r\nid\r\n):\d+\r\n")


def norm_hello(raw):
    """HELLO's reply with the connection id blanked (ids differ per server)."""
    return ID_RE.sub(rb"\1:<id>\r\n", raw)


SETUP = [("HSET", "h", "f1", "v1", "f2", "v2"), ("SADD", "s", "x"), ("ZADD", "z", "1.5", "m"),
         ("SET", "i1", "inode"), ("HSET", "d1", "name", "entry"),
         ("RPUSH", "l", "a", "b"), ("SET", "str", "v")]

READS = [("HGETALL", "h"), ("SMEMBERS", "s"), ("ZSCORE", "z", "m"), ("ZSCORE", "z", "nope"),
         ("GET", "missing"), ("GET", "i1"), ("GET", "i404"), ("HGET", "d1", "name"),
         ("HGET", "d1", "nope"), ("HGET", "d404", "x"), ("MGET", "i1", "i404"),
         ("ZRANGE", "z", 0, -1, "WITHSCORES"), ("LRANGE", "l", 0, -1), ("LPOP", "nolist", 1),
         ("HRANDFIELD", "nohash", 1), ("EXISTS", "str"), ("CONFIG", "GET", "maxmemory"),
         ("SCRIPT", "EXISTS", "0000000000000000000000000000000000000000"),
         ("OBJECT", "ENCODING", "str"), ("XINFO", "HELP")]

# (command, RESP2 type byte, RESP3 type byte)
TYPE_EXPECTATIONS = [(("HGETALL", "h"), "*", "%"), (("SMEMBERS", "s"), "*", "~"),
                     (("ZSCORE", "z", "m"), "$", ","), (("GET", "missing"), "$", "_"),
                     (("GET", "i404"), "$", "_"), (("HGET", "d1", "nope"), "$", "_"),
                     (("HGET", "d404", "x"), "$", "_"),
                     (("CONFIG", "GET", "maxmemory"), "*", "%")]


def test_resp2_and_resp3_clients_side_by_side_get_their_own_types(proxy, ref):
    """A RESP2 and a RESP3 client of the same proxy, their commands
    interleaved (and each read repeated, so the second may come from the
    proxy's cache, filled by the other protocol's read): every reply is
    byte-identical to what Redis sends a client of that protocol."""

    def scenario(ep):
        out = []
        with ep.raw() as setup:
            for s in SETUP:
                setup.cmd(*s)
        c2 = ep.raw(protocol=2)
        c3 = ep.raw(protocol=3)
        try:
            for order in ((c2, c3), (c3, c2)):
                for r in READS:
                    for c in order:
                        out.append(((r, "resp%d" % (2 if c is c2 else 3)), c.cmd(*r).raw))
        finally:
            c2.close()
            c3.close()
        return out

    assert_same_runs(scenario, proxy, ref)


@pytest.mark.parametrize("cmd,t2,t3", TYPE_EXPECTATIONS)
def test_resp3_types_look_right_per_protocol(proxy, cmd, t2, t3):
    """HGETALL is a map, SMEMBERS a set, ZSCORE a double and a miss a null
    in RESP3; flat arrays, bulk strings and $-1 in RESP2."""
    with proxy.raw() as setup:
        for s in SETUP:
            setup.cmd(*s)
    with proxy.raw(protocol=3) as c3, proxy.raw(protocol=2) as c2:
        for _ in range(2):
            f3 = c3.cmd(*cmd)
            f2 = c2.cmd(*cmd)
            assert f3.type == t3, (cmd, f3)
            assert f2.type == t2, (cmd, f2)
    if cmd[0] == "HGETALL":
        assert isinstance(f3.value, RMap) and f3.value.todict() == {b"f1": b"v1", b"f2": b"v2"}
        assert f2.value == [b"f1", b"v1", b"f2", b"v2"]
    if cmd[0] == "SMEMBERS":
        assert isinstance(f3.value, RSet) and list(f3.value) == [b"x"]
    if cmd == ("ZSCORE", "z", "m"):
        assert isinstance(f3.value, Double) and f3.value == 1.5
        assert f2.value == b"1.5"
    if cmd[0] in ("GET", "HGET"):
        assert f3.raw == b"_\r\n" and f2.raw == b"$-1\r\n"


def test_redis_py_resp3_client_gets_python_types(proxy):
    r3 = proxy.client(protocol=3)
    r2 = proxy.client(protocol=2)
    r2.hset("h", mapping={"a": "1"})
    r2.sadd("s", "m")
    r2.zadd("z", {"m": 2.5})
    assert r3.execute_command("HGETALL", "h") == {b"a": b"1"}
    assert r3.execute_command("SMEMBERS", "s") == {b"m"}
    assert r3.execute_command("ZSCORE", "z", "m") == 2.5
    assert r3.execute_command("GET", "nope") is None
    assert r2.hgetall("h") == r3.hgetall("h") == {b"a": b"1"}
    assert r2.zscore("z", "m") == r3.zscore("z", "m") == 2.5
    assert r3.smembers("s") == {b"m"}
    # The RESP3 handshake really happened on that connection.
    assert r3.execute_command("HELLO")[b"proto"] == 3


def test_hello_2_and_3_reply_like_redis(proxy, ref):
    steps = [("HELLO",), ("HELLO", "3"), ("HELLO",), ("PING",), ("HGETALL", "nohash"),
             ("HELLO", "2"), ("HELLO",), ("PING",), ("HELLO", "3"), ("GET", "nokey")]

    def scenario(ep):
        with ep.raw() as c:
            return [(s, norm_hello(c.cmd(*s).raw)) for s in steps]

    got = assert_same_runs(scenario, proxy, ref)
    assert got[0][1].startswith(b"*14\r\n")          # RESP2 flat array
    assert got[1][1].startswith(b"%7\r\n")           # RESP3 map
    assert b"$5\r\nproto\r\n:3\r\n" in got[1][1]
    assert got[-1][1] == b"_\r\n"


def test_hello_ids_are_integers(proxy):
    ids = []
    for _ in range(3):
        with proxy.raw() as c:
            m = c.cmd("HELLO", "3").value
            assert isinstance(m, RMap)
            d = m.todict()
            assert isinstance(d[b"id"], int)
            assert d[b"proto"] == 3
            assert d[b"server"] == b"redis"
            assert tuple(int(x) for x in d[b"version"].split(b".")[:2]) == REDIS_VERSION, d
            ids.append(d[b"id"])
    # Through the proxy HELLO's id is that of the shared upstream connection
    # the client starts on (README, "Session state"); CLIENT ID is the one
    # that names the client's own connection (test_client_id_... below).
    assert all(i > 0 for i in ids)


def test_hello_with_setname_without_auth(proxy, ref):
    steps = [("HELLO", "3", "SETNAME", "app1"), ("CLIENT", "GETNAME"), ("HELLO", "2", "SETNAME", "b c"),
             ("CLIENT", "GETNAME"), ("HELLO", "2", "SETNAME", "app2"), ("CLIENT", "GETNAME")]

    def scenario(ep):
        with ep.raw() as c:
            return [(s, norm_hello(c.cmd(*s).raw)) for s in steps]

    got = assert_same_runs(scenario, proxy, ref)
    assert got[1][1] == b"$4\r\napp1\r\n"
    assert got[2][1].startswith(b"-ERR")
    assert got[5][1] == b"$4\r\napp2\r\n"


def test_hello_bad_version_is_noproto_and_connection_stays_resp2(proxy, ref):
    steps = [("HELLO", "4"), ("PING",), ("HELLO", "1"), ("HELLO", "0"), ("HELLO", "abc"),
             ("HELLO", "-1"), ("HELLO", "3", "AUTH"), ("HELLO", "3", "BOGUS"), ("GET", "nokey"),
             ("HGETALL", "nohash")]
    got = assert_same_steps(proxy, ref, steps)
    assert got[0][1] == b"-NOPROTO unsupported protocol version\r\n"
    assert got[1][1] == b"+PONG\r\n"
    assert got[2][1] == b"-NOPROTO unsupported protocol version\r\n"
    assert got[8][1] == b"$-1\r\n", "a failed HELLO must leave the client in RESP2"


def test_hello_bad_version_after_resp3_stays_resp3(proxy, ref):
    got = assert_same_steps(proxy, ref, [("HELLO", "9"), ("GET", "nokey")], protocol=3)
    assert got[0][1].startswith(b"-NOPROTO")
    assert got[1][1] == b"_\r\n"


@pytest.mark.parametrize("protocol", [2, 3])
def test_ping_and_echo_like_redis(proxy, ref, protocol):
    steps = [("PING",), ("PING", "hello"), ("PING", ""), ("PING", b"a\r\n\x00b"), ("PING", "a", "b"),
             ("ECHO", "x"), ("ECHO", ""), ("ECHO", b"\r\n\x00"), ("ECHO",), ("ECHO", "a", "b"),
             ("ping",), ("Ping", "mixed case")]
    got = assert_same_steps(proxy, ref, steps, protocol=protocol)
    assert got[0][1] == b"+PONG\r\n"
    assert got[1][1] == b"$5\r\nhello\r\n"
    assert got[7][1] == b"$3\r\n\r\n\x00\r\n"


def test_inline_commands_work_like_redis(proxy, ref):
    """Inline (telnet-style) commands, CRLF and bare LF."""

    def scenario(ep):
        with ep.raw() as c:
            c.send(b"PING\r\nSET inl \"a b\"\r\nGET inl\nECHO 'x y'\r\nPING\n\r\n  \r\nEXISTS inl\r\n")
            return [(i, f.raw) for i, f in enumerate(c.read_frames(6))]

    got = assert_same_runs(scenario, proxy, ref)
    assert got[2][1] == b"$3\r\na b\r\n"


def test_protocol_switch_inside_a_pipeline(proxy, ref):
    """HELLO 3 / HELLO 2 sent pipelined with other commands: each reply is in
    the protocol in force when its command ran."""
    cmds = [("GET", "nokey"), ("HELLO", "3"), ("GET", "nokey"), ("HGETALL", "h"), ("HSET", "h", "a", "1"),
            ("HGETALL", "h"), ("HELLO", "2"), ("GET", "nokey"), ("HGETALL", "h"), ("HELLO", "4"),
            ("GET", "nokey")]

    def scenario(ep):
        with ep.raw() as c:
            c.send(b"".join(encode(*x) for x in cmds))
            return list(zip(cmds, (norm_hello(f.raw) for f in c.read_frames(len(cmds)))))

    got = assert_same_runs(scenario, proxy, ref)
    assert got[2][1] == b"_\r\n" and got[7][1] == b"$-1\r\n"
    assert got[5][1] == b"%1\r\n$1\r\na\r\n$1\r\n1\r\n"
