"""
tests/integration/test_query_buffer_limit.py — client-query-buffer-limit
counted as Redis counts it: what its query buffer holds is the argument (or
line) still being read, since each argument leaves it once read. Redis and
sidecache both run with a limit of 1 MB here, and the same bytes go to both.

- Arguments that pass the limit together, each within it: run.
- A request of many small arguments held, unfinished, past the limit: kept
  waiting for the rest, then run.
- One argument past the limit, arriving whole in one read: Redis would close
  the connection it came on, a shared one through sidecache (every other
  request in flight there would get an error): refused before it leaves.
"""
import socket
import time

import pytest

from helpers import encode

pytestmark = pytest.mark.proxy_only

LIMIT = ("--client-query-buffer-limit", "1mb")


@pytest.fixture
def limited(redis_factory, proxy_factory):
    r = redis_factory(args=LIMIT)
    return r, proxy_factory(up=r, args=LIMIT)


def test_arguments_past_the_limit_together_run_as_on_redis(limited):
    r, p = limited
    values = [bytes([ord("a") + i]) * 900000 for i in range(3)]
    req = encode("MSET", "k1", values[0], "k2", values[1], "k3", values[2])
    for target in (r, p):
        with target.raw(auth=True) as c:
            c.send(req)
            assert c.read_frame(timeout=10).raw == b"+OK\r\n", target
    assert r.client().mget("k1", "k2", "k3") == values


def test_an_unfinished_request_of_small_arguments_past_the_limit_waits_for_the_rest(limited):
    r, p = limited
    n = 200000
    req = encode("DEL", *("key%d" % i for i in range(n)))   # 2.6 MB
    cut = len(req) - 100
    for target in (r, p):
        with target.raw(auth=True) as c:
            c.send(req[:cut])
            time.sleep(0.5)
            c.sock.settimeout(0.2)
            with pytest.raises(socket.timeout):   # neither answered nor closed
                c.sock.recv(1)
            c.send(req[cut:])
            assert c.read_frame(timeout=10).raw == b":0\r\n", target


def test_an_argument_past_the_limit_is_refused_before_it_reaches_redis(limited):
    r, p = limited
    big = encode("SET", "k", b"x" * 1500000)
    with r.raw(auth=True) as c:       # Redis closes the connection it came on
        c.send(big)
        assert c.expect_closed(timeout=5) == b""
    rc = r.client()
    with p.raw(auth=True) as c:
        assert c.cmd("GET", "k").raw == b"$-1\r\n"   # the shared connection is up
        before = {x["id"] for x in rc.client_list()}
        c.send(big)
        assert c.expect_closed(timeout=5) == b"-ERR Protocol error: query buffer limit reached\r\n"
    with p.raw(auth=True) as c:
        assert c.cmd("GET", "k").raw == b"$-1\r\n"
    # had it gone, Redis would have closed the shared connection it came on
    gone = before - {x["id"] for x in rc.client_list()}
    assert not gone, "Redis closed connections %s" % gone
