"""Replies Redis really sends that the proxy must relay as Redis wrote them,
byte for byte, without touching the other clients of the same upstream
connection. With --upstream-connections 1 every client of one protocol
shares one connection to Redis, so a reply framed wrong there (cut short,
or refused as malformed) hands bytes to, or fails, the requests queued
behind it: other clients' reads and writes.

- A RESP3 push inside EXEC's array (DEBUG PROTOCOL push queued in MULTI):
  Redis writes it and then the command's reply, two values for one command
  in an array that counts one ("*2 :1 >2 ... $40 ..."), as redis-py reads it.
  No framing can pair that with requests: DEBUG PROTOCOL goes through a
  tunnel, and its client gets Redis's bytes as they come.
- A script's table nested deeper than the 128 levels proto-max-nesting
  used to allow, while another client's writes wait behind it.
- A RESP3 big number whose text is not digits: Redis passes a script's
  big_number string through.
- SCRIPT DEBUG: the debugger's session speaks on the connection that asked
  for it, which must be its client's alone (a tunnel).

Each reply is compared with what a reference redis-server sends for the
same commands (run with SIDECACHE_TARGET=direct, the tests hold for Redis
itself).
"""
import socket
import time

import pytest

from helpers import encode

# Holds the connection for 0.3 s, so requests sent meanwhile queue behind it.
BUSY = ("local t0 = redis.call('TIME') "
        "repeat local t = redis.call('TIME') "
        "until (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) >= 300000 ")


def nested_script(depth, busy=False):
    """A script returning a table `depth` levels deep: "*1\\r\\n" x depth,
    then "*0\\r\\n"."""
    return ((BUSY if busy else "") +
            "local t = {} local c = t for i = 1, %d do local n = {} c[1] = n c = n end return t"
            % depth)


def read_like(c, want, timeout=10.0):
    """From a RawClient, as many bytes as want has, or fewer as soon as they
    differ from it (no RESP parsing: a reply thousands of levels deep needs
    no recursion here)."""
    n = len(want)
    deadline = time.monotonic() + timeout
    while len(c.buf) < n and want.startswith(bytes(c.buf)):
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("got %d of %d bytes: %r" % (len(c.buf), n, bytes(c.buf[-200:])))
        c._fill(left)
    out = bytes(c.buf[:n])
    del c.buf[:n]
    return out


def ref_bytes(ref, cmds, protocol=None):
    """What Redis itself sends for cmds, sent in one write: the raw bytes of
    every reply, in order."""
    c = ref.raw(protocol=protocol)
    try:
        return c.raw_cmds(cmds)
    finally:
        c.close()


@pytest.fixture
def shared_proxy(proxy_factory):
    """A proxy whose clients of one protocol all share one connection."""
    return proxy_factory(args=("--upstream-connections", "1"))


def test_push_inside_exec_array_is_relayed_whole_to_its_client(shared_proxy, ref):
    txn = [("MULTI",), ("EVAL", BUSY + "return 1", "0"), ("DEBUG", "PROTOCOL", "push"), ("EXEC",)]
    # Redis 7.0's own bytes: the push is inside the array and not counted
    want = (b"+OK\r\n+QUEUED\r\n+QUEUED\r\n"
            b"*2\r\n:1\r\n>2\r\n$16\r\nserver-cpu-usage\r\n:42\r\n"
            b"$40\r\nSome real reply following the push reply\r\n")
    with ref.raw(protocol=3) as r:
        r.send(b"".join(encode(*x) for x in txn))
        assert read_like(r, want) == want

    with shared_proxy.raw(protocol=3) as setup:
        for i in range(6):
            assert setup.cmd("SET", "k%d" % i, "V%d" % i).raw == b"+OK\r\n"
    a = shared_proxy.raw(protocol=3)
    others = [shared_proxy.raw(protocol=3) for _ in range(6)]
    try:
        a.send(b"".join(encode(*x) for x in txn))
        time.sleep(0.1)                      # EXEC is on its way to Redis
        for i, b in enumerate(others):
            b.send_cmd("GET", "k%d" % i)     # queued behind it
        got_others = [b.read_frame(timeout=5).raw for b in others]
        # nobody gets anybody else's reply, nor a piece of the EXEC
        assert got_others == [b"$2\r\nV%d\r\n" % i for i in range(6)]
        assert read_like(a, want) == want
        for c in others:
            assert c.cmd("PING").raw == b"+PONG\r\n"
    finally:
        for c in [a] + others:
            c.close()


@pytest.mark.parametrize("depth", [200, 5000])
@pytest.mark.parametrize("protocol", [2, 3])
def test_deeply_nested_script_reply_leaves_other_clients_writes_alone(shared_proxy, ref, depth, protocol):
    script = nested_script(depth, busy=True)
    want = b"*1\r\n" * depth + b"*0\r\n"
    with ref.raw(protocol=protocol) as r:    # what Redis sends: exactly that
        r.send_cmd("EVAL", script, "0")
        assert read_like(r, want) == want
        r.expect_silence(0.2)

    a = shared_proxy.raw(protocol=protocol)
    b = shared_proxy.raw(protocol=protocol)
    try:
        a.send_cmd("EVAL", script, "0")
        time.sleep(0.1)                      # the script holds the connection
        writes = [("SET", "victim", "hello")] + [("INCR", "counter")] * 20 + [("RPUSH", "list", "x")]
        b.send(b"".join(encode(*x) for x in writes))
        got_b = [f.raw for f in b.read_frames(len(writes), timeout=10)]
        # the writes ran, and their client is told so
        assert got_b == [b"+OK\r\n"] + [b":%d\r\n" % i for i in range(1, 21)] + [b":1\r\n"]
        assert read_like(a, want) == want
        a.expect_silence(0.2)
        assert b.cmd("GET", "counter").raw == b"$2\r\n20\r\n"
        assert a.cmd("PING").raw == b"+PONG\r\n"
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("pipelined", [False, True], ids=["one-by-one", "pipelined"])
def test_script_debug_stays_on_the_connection_of_its_client(shared_proxy, ref, pipelined):
    """SCRIPT DEBUG YES puts the next EVAL of its connection under Lua's
    debugger (Redis forks for the session, which then speaks on that
    connection): through the proxy, the connection of the client that asked
    for it, never the one other clients' EVALs share (they would stop in
    the debugger, or get its output)."""
    cmds = [("SCRIPT", "DEBUG", "YES"), ("EVAL", "return 1", "0")]
    with ref.raw() as r:
        one_by_one = [r.cmd(*x).raw for x in cmds]
    with ref.raw() as r:
        # both in one read: the session Redis forks for takes the
        # connection before SCRIPT DEBUG's +OK is written, and the client
        # gets only the debugger's output
        r.send(b"".join(encode(*x) for x in cmds))
        together = [r.read_frame(timeout=10).raw]
        r.expect_silence(0.3)
    assert b"Stopped at 1" in one_by_one[-1] and together == one_by_one[1:], (one_by_one, together)
    want = one_by_one

    a = shared_proxy.raw()
    others = [shared_proxy.raw() for _ in range(4)]
    try:
        if pipelined:
            # the EVAL waits behind the SCRIPT DEBUG, which waits for the
            # new connection's handshake: Redis reads the two together or
            # apart, and answers as it does a direct client either way
            a.send(b"".join(encode(*x) for x in cmds))
            got = [a.read_frame(timeout=10).raw]
            if got[0] == want[0]:
                got.append(a.read_frame(timeout=10).raw)
            a.expect_silence(0.3)
            assert got in (want, want[1:]), got
        else:
            assert a.cmd(*cmds[0]).raw == want[0]
        for o in others:
            assert o.cmd("EVAL", "return 1", "0").raw == b":1\r\n"
        if not pipelined:
            assert a.cmd(*cmds[1]).raw == want[1]
        for o in others:
            assert o.cmd("EVAL", "return 2", "0").raw == b":2\r\n"
    finally:
        for c in [a] + others:
            c.close()


@pytest.mark.redis(7, 0, "a script's big_number reply")
def test_big_number_text_from_script_is_relayed(shared_proxy, ref):
    cmds = [("EVAL", BUSY + "return {big_number='abc'}", "0"),
            ("EVAL", "return {big_number=''}", "0"),
            ("EVAL", "return {big_number='a\\r\\nb'}", "0"),
            ("EVAL", "return {1, {big_number='x1'}, 2}", "0"),
            ("EVAL", "return {big_number='-12'}", "0"),
            ("PING",)]
    want = ref_bytes(ref, cmds, protocol=3)
    assert want[:3] == [b"(abc\r\n", b"(\r\n", b"(a  b\r\n"], want

    a = shared_proxy.raw(protocol=3)
    b = shared_proxy.raw(protocol=3)
    try:
        a.send(b"".join(encode(*x) for x in cmds))
        time.sleep(0.1)                      # the first script holds the connection
        b.send(encode("SET", "bn-victim", "1") + encode("INCR", "bn-victim"))
        assert [f.raw for f in b.read_frames(2, timeout=5)] == [b"+OK\r\n", b":2\r\n"]
        assert [f.raw for f in a.read_frames(len(cmds), timeout=5)] == want
    finally:
        a.close()
        b.close()


def test_redis_py_resp3_transaction_with_a_push_inside(shared_proxy, ref):
    """redis-py reads the push inside EXEC's array out of band, as Redis
    means it: the transaction's results are the commands' replies."""
    def run(ep):
        r = ep.client(protocol=3, socket_timeout=5)
        try:
            p = r.pipeline(transaction=True)
            p.execute_command("DEBUG", "PROTOCOL", "push")
            p.set("a", "1")
            p.get("a")
            return p.execute(), r.ping()
        finally:
            r.close()

    want = run(ref)
    assert want == ([b"Some real reply following the push reply", True, b"1"], True)
    assert run(shared_proxy) == want


def test_proto_max_bulk_len_bounds_requests_not_replies(proxy_factory, upstream, ref_factory):
    """proto-max-bulk-len bounds what a client may send, as in Redis, which
    never applies it to its replies: with it at 1mb, a 2 MB value stored on
    Redis is still read through the proxy, byte for byte, on a connection
    other clients share; a 2 MB argument is refused in Redis's words."""
    big = b"x" * (2 << 20)
    upstream.client().set("big", big)
    p = proxy_factory(args=("--proto-max-bulk-len", "1mb", "--upstream-connections", "1"))
    a = p.raw(auth=True)
    b = p.raw(auth=True)
    try:
        a.send(encode("GET", "big"))
        b.send(encode("SET", "after-big", "1"))
        assert a.read_frames(1, timeout=10)[0].value == big
        assert b.read_frames(1, timeout=5)[0].raw == b"+OK\r\n"
    finally:
        a.close()
        b.close()
    # the header alone is refused (the value is never read)
    header = b"*3\r\n$3\r\nSET\r\n$4\r\nbig2\r\n$%d\r\n" % len(big)
    replies = []
    for target in (ref_factory(args=("--proto-max-bulk-len", "1mb")), p):
        c = target.raw(auth=target is p)
        try:
            c.send(header)
            replies.append(c.read_frames(1, timeout=5)[0].raw)
        finally:
            c.close()
    assert replies[1] == replies[0] == b"-ERR Protocol error: invalid bulk length\r\n", replies
