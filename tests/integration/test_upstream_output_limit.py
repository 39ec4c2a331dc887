"""
tests/integration/test_upstream_output_limit.py — what upstream-output-limit
must not do while it holds clients back from a stalled Redis: stop cache hits
and local answers (a read cache keeps serving while Redis stalls), or let
`timeout` and `partial-command-timeout` close a client for the proxy's own
pause. Each test runs with the limit off too (the control: the behaviour
without the limit). The bound itself: test_slow_clients.py.
"""
import time

import pytest

from cachehelpers import wait_first_acl_check
from faulthelpers import Metrics
from helpers import ConnectionClosed, encode, free_port
from test_slow_clients import BackgroundSend, stopped

pytestmark = [pytest.mark.proxy_only, pytest.mark.timeout(60)]



def limited_proxy(proxy_factory, limit, *args, loglevel="notice"):
    """A proxy with upstream-output-limit `limit` (and args), its /metrics,
    and a client connected to it: (proxy, metrics, client)."""
    mport = free_port()
    p = proxy_factory(args=("--upstream-output-limit", limit, "--metrics-port", str(mport),
                            "--upstream-timeout", "0") + args, loglevel=loglevel)
    # the first ACL LIST makes the proxy ask Redis again what it learned
    # before (PING's permission too): the PING below must come after it, or
    # the one sent while Redis stalls would wait for Redis
    wait_first_acl_check(p)
    c = p.raw(auth=True)
    assert c.call("PING") == b"PONG"
    return p, Metrics(mport), c


def saturate(p, n=200, value=b"v" * 100000):
    """One client pipelines n SETs of 100 KB to a (stopped) Redis until the
    proxy pauses it at upstream-output-limit. Returns (client, sender)."""
    c = p.raw(auth=True)
    assert c.cmd("SET", "warm", "1").raw == b"+OK\r\n"
    return c, BackgroundSend(c, b"".join(encode("SET", "fill:%d" % j, value) for j in range(n)))


def answer_after_pause(p, victim):
    """The victim's reply once Redis reads again; a close fails the test,
    with the proxy's log lines about timeouts."""
    try:
        return victim.read_frame(timeout=15).raw
    except ConnectionClosed:
        pytest.fail("the proxy closed a client whose command waited at upstream-output-limit; log:\n"
                    + "\n".join(l for l in open(p.logpath).read().splitlines() if "timeout" in l))


def filler_read(m, limit):
    """The filler's SETs read as far as the proxy will: with a limit, until
    it pauses the filler; without, a moment."""
    if limit != "0":
        m.wait(lambda d: d["clients_paused_upstream_output"] >= 1, 10, "the filler paused")
    else:
        time.sleep(0.3)


def cache_warm(p, m, key=b"i2", value=b"attr"):
    with p.raw(auth=True) as c:
        m.wait_active()
        assert c.call("SET", key, value) == b"OK"
        before = m.get()["cache_hits"]
        for _ in range(3):
            assert c.call("GET", key) == value
        m.wait(lambda d: d["cache_hits"] > before, 5, "a hit")


# ---------------------------------------------------------------------------
# cache hits and local answers go on


@pytest.mark.parametrize("limit", ["0", "4mb"], ids=["limit-off(control)", "limit-4mb"])
def test_cache_hit_is_answered_while_redis_stalls(proxy_factory, upstream, limit):
    """A cached GET needs nothing from Redis: it is answered while Redis is
    stopped and another client has filled upstream-output-limit; so is
    PING. Only what needs Redis waits. (No keep-alive PING is sent here:
    one out past tracking-ping-hold-ms sends reads to Redis, C10.)"""
    p, m, reader = limited_proxy(proxy_factory, limit, "--tracking-keepalive-ms", "600000")
    cache_warm(p, m)
    filler, send = saturate(p)
    with stopped(upstream):
        send.t.start()
        time.sleep(1.0)  # the proxy reads what it will
        if limit != "0":
            assert m.get()["clients_paused_upstream_output"] >= 1
        reader.send(encode("GET", "i2"))
        assert reader.read_frame(timeout=3).raw == b"$4\r\nattr\r\n"
        assert reader.call("PING") == b"PONG"
    send.join()


# ---------------------------------------------------------------------------
# the proxy's own pause is not charged to the client


@pytest.mark.parametrize("limit", ["0", "4mb"], ids=["limit-off(control)", "limit-4mb"])
def test_idle_timeout_does_not_close_a_client_the_proxy_stopped_reading(proxy_factory, upstream, limit):
    """timeout 1: a client whose command waits at upstream-output-limit is
    not idle: it gets its reply once Redis reads again (Redis never closes a
    client as idle while it holds a command of it)."""
    p, m, victim = limited_proxy(proxy_factory, limit, "--timeout", "1", loglevel="verbose")
    filler, send = saturate(p)
    with stopped(upstream):
        send.t.start()
        filler_read(m, limit)
        # active just before (answered by the proxy itself): idle from here
        # on only for the proxy's own pause
        assert victim.call("PING") == b"PONG"
        victim.send(encode("INCR", "counter"))
        if limit != "0":
            m.wait(lambda d: d["clients_paused_upstream_output"] >= 2, 10, "the victim paused")
        time.sleep(3.5)  # > timeout + a cron tick
    assert answer_after_pause(p, victim) == b":1\r\n"
    send.join()


@pytest.mark.parametrize("limit", ["0", "4mb"], ids=["limit-off(control)", "limit-4mb"])
def test_partial_command_timeout_does_not_count_the_proxys_own_pause(proxy_factory, upstream, limit):
    """partial-command-timeout 2: a client sent the first part of a SET, then
    the rest (well within the 2 s) while upstream-output-limit held clients
    back: it is not closed as a slowloris for the proxy's pause, and gets
    +OK once Redis reads."""
    p, m, victim = limited_proxy(proxy_factory, limit, "--partial-command-timeout", "2", loglevel="verbose")
    frame = encode("SET", "slow", b"x" * 1000)
    filler, send = saturate(p)
    with stopped(upstream):
        victim.send(frame[:50])
        time.sleep(0.2)  # the proxy sees a partial frame
        send.t.start()
        filler_read(m, limit)
        victim.send(frame[50:])  # whole now; not parsed while paused
        time.sleep(4.0)  # > partial-command-timeout + a cron tick
    assert answer_after_pause(p, victim) == b"+OK\r\n"
    send.join()




# ---------------------------------------------------------------------------
# a read that waits is counted once


# what each read moves, counted once: i2 is cached (cache_warm), i7 is not
WAITING_READS = {
    "get-miss": (("GET", "i7"), b"$-1\r\n", {"cache_misses": 1, "cache_hits": 0}),
    "mget-partial": (("MGET", "i2", "i7"), b"*2\r\n$4\r\nattr\r\n$-1\r\n",
                     {"cache_mget_partial": 1, "cache_mget_keys_cached": 1, "cache_hits": 1, "cache_misses": 1}),
}


@pytest.mark.parametrize("read", list(WAITING_READS))
@pytest.mark.parametrize("limit", ["0", "4mb"], ids=["limit-off(control)", "limit-4mb"])
def test_a_read_that_waits_at_the_limit_is_counted_once(proxy_factory, upstream, limit, read):
    """A read the cache cannot answer whole goes to Redis: at
    upstream-output-limit it waits, and the proxy takes it up again once
    Redis reads. Its miss, or partial MGET, counts once, as without the
    limit (it used to count at each take)."""
    cmd, reply, moves = WAITING_READS[read]
    p, m, reader = limited_proxy(proxy_factory, limit, "--tracking-keepalive-ms", "600000")
    cache_warm(p, m)
    assert reader.call("MGET", "i2") == [b"attr"]  # Redis has answered an MGET: the cache may too
    filler, send = saturate(p)
    before = m.get()
    with stopped(upstream):
        send.t.start()
        filler_read(m, limit)
        reader.send(encode(*cmd))
        if limit != "0":
            m.wait(lambda d: d["clients_paused_upstream_output"] >= 2, 10, "the reader paused")
    assert answer_after_pause(p, reader) == reply
    send.join()
    after = m.get()
    assert {k: after[k] - before[k] for k in moves} == moves
