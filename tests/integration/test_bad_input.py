"""Malformed input gets Redis's protocol error and closes only the offending
connection; the proxy and its other clients carry on."""
import os
import re
import socket
import time

import pytest

from cachehelpers import wait_tracking_active
from helpers import REDIS_VERSION, assert_same_runs, wait_until

# name -> (bytes sent, the error Redis sends before closing, or None for "accepted")
CASES = {
    "bad-bulk-length": (b"*1\r\n$abc\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    "garbage-instead-of-bulk": (b"*2\r\n$3\r\nGET\r\nxyz\r\n", b"-ERR Protocol error: expected '$', got 'x'\r\n"),
    "unbalanced-quotes-inline": (b'SET "foo bar\r\n', b"-ERR Protocol error: unbalanced quotes in request\r\n"),
    "huge-multibulk-count": (b"*99999999999\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"),
    "huge-bulk-length": (b"*1\r\n$99999999999\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    "negative-bulk-length": (b"*1\r\n$-5\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    "non-numeric-count": (b"*x\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"),
    "nested-multibulk": (b"*1\r\n*1\r\n", b"-ERR Protocol error: expected '$', got '*'\r\n"),
    "inline-line-too-long": (b"A" * 70000, b"-ERR Protocol error: too big inline request\r\n"),
    "bulk-header-too-long": (b"*1\r\n$" + b"1" * 70000, b"-ERR Protocol error: too big bulk count string\r\n"),
    # A header line past the 64 KB limit whose '\r' has arrived is judged on
    # what it holds, as any line; "too big ..." is for a line not yet ended.
    "bulk-header-past-limit-ended": (b"*1\r\n$" + b"1" * 70000 + b"\r\n",
                                     b"-ERR Protocol error: invalid bulk length\r\n"),
    "multibulk-count-past-limit-ended": (b"*" + b"1" * 70000 + b"\r\n",
                                         b"-ERR Protocol error: invalid multibulk length\r\n"),
    "non-bulk-line-past-limit-ended": (b"*1\r\n" + b"x" * 70000 + b"\r\n",
                                       b"-ERR Protocol error: expected '$', got 'x'\r\n"),
    # Redis skips the byte after the count's '\r'; the '\n' then stands
    # where a '$' should ("\n" is written as a blank).
    "count-line-cr-cr": (b"*1\r\r\n$4\r\nPING\r\n", b"-ERR Protocol error: expected '$', got ' '\r\n"),
}

# A header line sent in two writes, the second after the first has been
# read: (prefix, the error for a line that ended just after exactly 64 KB of
# it had arrived, the error for a line of which more than 64 KB arrived
# without its end).
SPLIT_HEADERS = {
    "bulk-header": (b"*1\r\n$", b"-ERR Protocol error: invalid bulk length\r\n",
                    b"-ERR Protocol error: too big bulk count string\r\n"),
    "multibulk-count": (b"*", b"-ERR Protocol error: invalid multibulk length\r\n",
                        b"-ERR Protocol error: too big mbulk count string\r\n"),
}


def bad_input_scenario(ep, data):
    """Returns what the offending client got, whether it was closed, and that
    a bystander connection opened before still works. data is the bytes, or
    a tuple of writes made 0.3 s apart."""
    with ep.raw() as bystander, ep.raw() as bad:
        assert bystander.cmd("SET", "by", "1").raw == b"+OK\r\n"
        for i, part in enumerate((data,) if isinstance(data, bytes) else data):
            if i:
                time.sleep(0.3)
            try:
                bad.send(part)
            except OSError:  # closed already: the reply below tells why
                break
        try:
            reply = bad.read_frame(timeout=3).raw
        except Exception as e:  # noqa: BLE001
            reply = repr(e).encode()
        try:
            leftover = bad.expect_closed(3)
            closed = True
        except AssertionError:
            leftover, closed = b"", False
        by = bystander.cmd("INCR", "by").raw
        return [("reply", reply), ("closed", closed), ("leftover", leftover), ("bystander", by)]


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_closes_only_offending_client(proxy, ref, name):
    data, want = CASES[name]
    got = dict(assert_same_runs(lambda ep: bad_input_scenario(ep, data), proxy, ref))
    assert got["reply"] == want
    assert got["closed"] is True, "the offending connection must be closed after the error"
    assert got["leftover"] == b""
    assert got["bystander"] == b":2\r\n"
    # And new clients are still served.
    assert proxy.client().ping() is True


@pytest.mark.parametrize("name", list(SPLIT_HEADERS))
def test_header_line_split_at_and_past_limit(proxy, ref, name):
    """As Redis: "too big ..." for a header line once more than 64 KB of it
    has arrived without its '\r'; a line whose first write brought exactly
    64 KB of it ('$' or '*' and 65,535 digits), its '\r' coming next, is
    judged on what it holds."""
    prefix, invalid, too_big = SPLIT_HEADERS[name]
    at_limit = (prefix + b"1" * 65535, b"1" * 10 + b"\r\n")
    past_limit = (prefix + b"1" * 65600, b"1" * 4400 + b"\r\n")
    for data, want in ((at_limit, invalid), (past_limit, too_big)):
        got = dict(assert_same_runs(lambda ep, data=data: bad_input_scenario(ep, data), proxy, ref))
        assert got["reply"] == want
        assert got["closed"] is True
        assert got["bystander"] == b":2\r\n"


@pytest.mark.skipif(REDIS_VERSION >= (7, 0), reason="Redis 6's limit (7.0 takes up to INT_MAX arguments)")
def test_request_past_redis6s_argument_limit_is_refused_here(proxy, ref):
    """Redis 6 refuses a request of more than 1,048,576 arguments as soon as
    it reads the count, and closes the connection. Sidecache learns from
    COMMAND that its upstream is Redis 6 and refuses it the same way, before
    any of it is forwarded: on a shared connection, Redis's close would fail
    every other client's request in flight there."""
    wait_tracking_active(proxy)  # (COMMAND is read first)
    data = b"*1048579\r\n$4\r\nSADD\r\n$3\r\nbig\r\n"
    got = dict(assert_same_runs(lambda ep: bad_input_scenario(ep, data), proxy, ref))
    assert got["reply"] == b"-ERR Protocol error: invalid multibulk length\r\n"
    assert got["closed"] is True
    assert got["bystander"] == b":2\r\n"
    # one argument fewer is a request like any other
    n = 1048576 - 2
    with proxy.raw(timeout=60) as c:
        c.send(b"*%d\r\n$4\r\nSADD\r\n$3\r\nbig\r\n" % (n + 2) + b"".join(b"$7\r\n%07d\r\n" % i for i in range(n)))
        assert c.read_frame(timeout=60).raw == b":%d\r\n" % n


def test_bad_input_after_good_commands_in_same_write(proxy, ref):
    """Good commands before the bad bytes in the same write are answered
    first, then the error, then the close."""
    data = b"*1\r\n$4\r\nPING\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*1\r\n$abc\r\n"

    def scenario(ep):
        with ep.raw() as c:
            c.send(data)
            frames = [f.raw for f in c.read_frames(3, timeout=3)]
            c.expect_closed(3)
        with ep.raw() as d:
            return [("frames", frames), ("k", d.cmd("GET", "k").raw)]

    got = dict(assert_same_runs(scenario, proxy, ref))
    assert got["frames"] == [b"+PONG\r\n", b"+OK\r\n", b"-ERR Protocol error: invalid bulk length\r\n"]
    assert got["k"] == b"$1\r\nv\r\n"


# A session in a tunnel (the client's own connection, replies relayed
# unmatched), good commands, then bad bytes, all in one write.
TUNNEL_CASES = {
    "subscribed": b"SUBSCRIBE ch\r\nPING\r\n*01\r\n",
    "client-reply-skip": b"CLIENT REPLY SKIP\r\nPING\r\nPING x\r\n*01\r\n",
    "client-reply-off-then-on": b"CLIENT REPLY OFF\r\nSET w 1\r\nCLIENT REPLY ON\r\nINCR w\r\n*01\r\n",
    "resp3-tracking": b"HELLO 3\r\nCLIENT TRACKING on\r\nGET a\r\n*01\r\n",
    # replies that are +RESET, as sidecache's own RESET's is: top-level, and
    # an element of an aggregate (a tunnel relays elements one by one)
    "resp3-tracking-scripts-answer-reset": b"HELLO 3\r\nCLIENT TRACKING on\r\n"
                                           b"EVAL \"return {'a',{ok='RESET'}}\" 0\r\n"
                                           b"EVAL \"return {ok='RESET'}\" 0\r\n"
                                           b"EVAL \"return {1,{ok='RESET'}}\" 0\r\n"
                                           b"EVAL \"return {ok='RESET'}\" 0\r\nEVAL \"return {2}\" 0\r\n*01\r\n",
    "subscribed-query-buffer-limit": b"SUBSCRIBE ch\r\nPING\r\n*1\r\n$" + b"1" * 70000,
}


@pytest.mark.parametrize("name", list(TUNNEL_CASES))
def test_bad_input_after_good_commands_in_a_tunnel(proxy, ref, name):
    """In a tunnel too, the error comes after the replies to every command
    before it, which ran (before: sidecache wrote its error at once and
    closed, dropping replies Redis still owed, SET's and INCR's among
    them), and nothing of the RESET that tells sidecache when they are all
    in reaches the client. (Where CLIENT REPLY OFF or SKIP suppress the
    error: test_bad_input_in_a_tunnel_under_client_reply_off_or_skip.)"""
    data = TUNNEL_CASES[name]

    def scenario(ep):
        with ep.raw() as c:
            c.send(data)
            out = re.sub(rb"\$2\r\nid\r\n:\d+\r\n", b"$2\r\nid\r\n:<id>\r\n", c.expect_closed(5))
        with ep.raw() as d:
            return [("replies", out), ("w", d.cmd("GET", "w").raw)]

    got = dict(assert_same_runs(scenario, proxy, ref))
    assert got["replies"].endswith(b"-ERR Protocol error: invalid multibulk length\r\n") or \
        got["replies"].endswith(b"-ERR Protocol error: too big bulk count string\r\n")


# A tunnel entered by CLIENT REPLY, then bad bytes in the same write. Redis
# writes no error where OFF, or a SKIP not yet spent, keeps it from
# replying: it reads no more and holds the connection open until the
# client closes it. Where the SKIP was spent, or the CLIENT REPLY refused
# or only queued, the error comes, and the connection closes.
REPLY_MODE_CASES = {
    "off": b"CLIENT REPLY OFF\r\nSET w 1\r\n*01\r\n",
    "skip": b"CLIENT REPLY SKIP\r\n*01\r\n",
    "skip-skip": b"CLIENT REPLY SKIP\r\nCLIENT REPLY SKIP\r\n*01\r\n",
    "off-then-skip": b"CLIENT REPLY OFF\r\nCLIENT REPLY SKIP\r\nINCR w\r\n*01\r\n",
    "off-then-on": b"CLIENT REPLY OFF\r\nCLIENT REPLY ON\r\n*01\r\n",
    "skip-spent": b"CLIENT REPLY SKIP\r\nINCR w\r\n*01\r\n",
    "skip-spent-on-a-refusal": b"CLIENT REPLY SKIP\r\nCLIENT REPLY bad\r\n*01\r\n",
    "off-queued-in-multi": b"MULTI\r\nCLIENT REPLY OFF\r\n*01\r\n",
    "off-refused-when-subscribed": b"SUBSCRIBE ch\r\nCLIENT REPLY OFF\r\n*01\r\n",
}


@pytest.mark.parametrize("name", list(REPLY_MODE_CASES))
def test_bad_input_in_a_tunnel_under_client_reply_off_or_skip(proxy, upstream, ref, name):
    """The client sees what Redis shows it: replies, the error or none, the
    connection closed or held open running nothing more (before: sidecache
    always wrote the error and closed). While it is held, sidecache keeps
    no connection to Redis for it."""
    admin = upstream.client()
    with proxy.raw() as warm:  # the shared connections up
        warm.cmd("GET", "w")
    baseline = admin.info("clients")["connected_clients"]

    def outcome(c, wait):
        try:
            return "closed", c.expect_closed(wait)
        except AssertionError:
            return "open", bytes(c.buf)

    def scenario(ep):
        with ep.raw() as c:
            c.send(REPLY_MODE_CASES[name])
            first = outcome(c, 1.0)
            later = None
            if first[0] == "open":
                if ep is proxy:
                    wait_until(lambda: admin.info("clients")["connected_clients"] <= baseline, timeout=3,
                               what="the tunnel's connection to Redis to be closed")
                c.buf.clear()
                c.send(b"PING\r\n" + b"x" * 100000)  # read by nobody, run by nobody
                later = outcome(c, 0.5)
        with ep.raw() as d:
            return [("first", first), ("then", later), ("w", d.cmd("GET", "w").raw)]

    assert_same_runs(scenario, proxy, ref)
    wait_until(lambda: admin.info("clients")["connected_clients"] <= baseline, timeout=3,
               what="the proxy's connections back to what they were")
    # and the client held open is gone with its close (the one asking)
    with proxy.raw() as q:
        wait_until(lambda: b"connected_clients:1\r\n" in q.call("INFO", "sidecache"), timeout=3,
                   what="the proxy to close the client held open once it closed")


def cpu_seconds(pid):
    """User and system CPU time the process has used (Linux /proc)."""
    fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.proxy_only
@pytest.mark.parametrize("reads", [False, True], ids=["resets", "closes"])
def test_a_tunnel_client_gone_after_bad_input_frees_its_blocked_command_at_once(proxy, upstream, reads):
    """A tunnel client (RESP3 tracking) blocked in BLPOP sends bad bytes and
    goes, its input paused meanwhile: closing with replies unread (the
    kernel sends a reset) or after reading them (a FIN). sidecache closes
    its connection to Redis at once, as Redis frees a client that closes,
    so the BLPOP takes no element (before: it waited for Redis to answer
    what came before the bad bytes, the BLPOP, and took the next element
    pushed, which nobody received), and its loop does not spin on the
    reset socket (before: epoll reported the reset at every turn to a
    watch that took only EV_CLOSED, 60 % of a core)."""
    c = proxy.raw()
    c.send(b"HELLO 3\r\nCLIENT TRACKING on\r\nBLPOP q9 0\r\n*01\r\n")
    admin = upstream.client()
    wait_until(lambda: admin.info("clients")["blocked_clients"] == 1, timeout=3, what="the BLPOP to block")
    if reads:
        c.read_frames(2, timeout=3)  # HELLO's and CLIENT TRACKING's
    c.close()
    wait_until(lambda: admin.info("clients")["blocked_clients"] == 0, timeout=3,
               what="the blocked connection to be closed")
    admin.lpush("q9", "x")
    assert admin.llen("q9") == 1
    before = cpu_seconds(proxy.proc.pid)
    time.sleep(1.0)
    used = cpu_seconds(proxy.proc.pid) - before
    assert used < 0.3, "the proxy used %.2f s of CPU in 1 s with no client" % used


@pytest.mark.parametrize("protocol", [2, 3])
def test_bare_lf_inline_command_accepted(proxy, ref, protocol):
    """Redis accepts an inline command ended by a bare LF."""

    def scenario(ep):
        with ep.raw(protocol=3 if protocol == 3 else None) as c:
            c.send(b"PING\n")
            a = c.read_frame(3).raw
            c.send(b"SET lf  value\nGET lf\nEXISTS lf nope\n")
            b = [f.raw for f in c.read_frames(3, timeout=3)]
            c.send(b"\n\r\nPING\r\n")                    # empty lines are ignored
            d = c.read_frame(3).raw
            return [("ping", a), ("cmds", b), ("after-empty", d)]

    got = dict(assert_same_runs(scenario, proxy, ref))
    assert got["ping"] == b"+PONG\r\n"
    assert got["cmds"] == [b"+OK\r\n", b"$5\r\nvalue\r\n", b":1\r\n"]


def test_inline_line_of_the_full_limit_is_accepted(proxy, ref):
    """An inline line of exactly 64 KB before its CRLF: Redis refuses a line
    only when more than that is here with no newline, so it runs this one;
    so does the proxy (it refused the line by one byte)."""

    def scenario(ep):
        with ep.raw() as c:
            c.send(b"ECHO " + b"x" * 65531 + b"\r\n")
            return [c.read_frame(5).raw]

    got = assert_same_runs(scenario, proxy, ref)
    assert got[0] == b"$65531\r\n" + b"x" * 65531 + b"\r\n"


def test_request_split_in_tiny_pieces_is_reassembled(proxy):
    """A command that arrives one byte at a time is still one command."""
    data = b"*3\r\n$3\r\nSET\r\n$5\r\nsplit\r\n$11\r\nhello\r\nworl\r\n*2\r\n$3\r\nGET\r\n$5\r\nsplit\r\n"
    with proxy.raw() as c:
        for i in range(len(data)):
            c.send(data[i:i + 1])
            time.sleep(0.001)
        assert [f.raw for f in c.read_frames(2)] == [b"+OK\r\n", b"$11\r\nhello\r\nworl\r\n"]


def test_abrupt_disconnect_mid_command_does_not_hurt_others(proxy):
    """Clients that vanish in the middle of a request (or with a half-read
    reply) leave the proxy serving everyone else."""
    with proxy.raw() as keep:
        for i in range(20):
            s = socket.create_connection((proxy.host, proxy.port), timeout=3)
            s.sendall(b"*3\r\n$3\r\nSET\r\n$2\r\nab\r\n$100000\r\npartial")
            s.close()
            s = socket.create_connection((proxy.host, proxy.port), timeout=3)
            s.sendall(b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n" * 50)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()                                    # RST
            assert keep.cmd("PING").raw == b"+PONG\r\n"
        assert keep.cmd("EXISTS", "ab").raw == b":0\r\n"


@pytest.mark.proxy_only
def test_partial_command_timeout(proxy_factory):
    """A command that starts and never completes (slowloris) closes its
    client after partial-command-timeout; an idle client and a slow but whole
    one stay."""
    p = proxy_factory(args=("--partial-command-timeout", "1"))
    with p.raw() as idle, p.raw() as trickle:
        trickle.send(b"*2\r\n$3\r\nGET\r\n$5\r\nab")
        t0 = time.monotonic()
        trickle.expect_closed(timeout=5)
        took = time.monotonic() - t0
        assert 0.9 < took < 4, took
        assert idle.cmd("PING").raw == b"+PONG\r\n"
        # bytes that keep coming complete the command in time: no close
        with p.raw() as slow:
            for b in b"*1\r\n$4\r\nPING\r\n":
                slow.send(bytes([b]))
                time.sleep(0.03)
            assert slow.read_frame(timeout=3).raw == b"+PONG\r\n"


@pytest.mark.proxy_only
def test_inline_length_limit_directive(proxy_factory, upstream):
    """proto-max-inline-len makes Redis's own inline/header limit smaller:
    the same error text as Redis gives above its 64 KB."""
    p = proxy_factory(args=("--proto-max-inline-len", "1kb"))
    with p.raw() as c:
        c.send(b"A" * 2000)
        assert c.read_frame(timeout=3).raw == b"-ERR Protocol error: too big inline request\r\n"
        c.expect_closed(3)
    with p.raw() as c:
        c.send(b"*1\r\n$" + b"1" * 2000)
        assert c.read_frame(timeout=3).raw == b"-ERR Protocol error: too big bulk count string\r\n"
        c.expect_closed(3)
    with p.raw() as c:
        assert c.cmd("SET", "k", "x" * 5000).raw == b"+OK\r\n"   # values are not lines


@pytest.mark.proxy_only
def test_reply_nesting_limit_directive_is_obsolete(proxy_factory, upstream):
    """proto-max-nesting is still accepted (old configs load) but limits
    nothing: a reply from Redis nested deeper is relayed as Redis sent it
    (refusing it closed a connection other clients were waiting on), and
    the log says the directive is ignored."""
    p = proxy_factory(args=("--proto-max-nesting", "4"))
    deep = "return {{{{{{1}}}}}}"
    shallow = "return {{1}}"
    with p.raw() as c:
        assert c.cmd("EVAL", shallow, "0").raw == b"*1\r\n*1\r\n:1\r\n"
        assert c.cmd("EVAL", deep, "0").raw == b"*1\r\n" * 6 + b":1\r\n"
        assert c.cmd("PING").raw == b"+PONG\r\n"
        assert c.cmd("EVAL", shallow, "0").raw == b"*1\r\n*1\r\n:1\r\n"
    with open(p.logpath, "rb") as f:
        assert b"proto-max-nesting is obsolete and ignored" in f.read()


@pytest.mark.redis(7, 0, "requests of more than 1,048,576 arguments")
def test_request_with_more_than_a_million_arguments(proxy, ref):
    """Redis 7 takes a request of up to INT_MAX arguments (6.2 stopped at
    1,048,576): an SADD of 1,048,578 members is answered as by Redis."""
    n = 1048578
    req = b"*%d\r\n$4\r\nSADD\r\n$3\r\nbig\r\n" % (n + 2) + b"".join(b"$7\r\n%07d\r\n" % i for i in range(n))
    replies = []
    for target in (ref, proxy):
        c = target.raw(auth=True, timeout=60)
        c.send(req)
        replies.append(c.read_frame(timeout=60).raw)
        assert c.cmd("SCARD", "big").raw == b":%d\r\n" % n
    assert replies[0] == replies[1] == b":%d\r\n" % n
