"""
tests/integration/test_name_lookup.py — an upstream named by a host name
whose lookup hangs (a DNS server that does not answer: a partition, a node's
resolver down, a pod's DNS) does not stop the proxy. getaddrinfo() has no
timeout of its own; the proxy waits for a lookup at most 100 ms
(proxy/resolve.h), answers its clients meanwhile (an error naming the lookup,
as for a refused connect), and takes the lookup's answer when it comes.

The slow resolver is slow_getaddrinfo.c, preloaded into the proxy: names
ending in .slow.test take SLOW_LOOKUP_MS, then resolve to 127.0.0.1.
"""
import os
import subprocess
import time

import pytest

from helpers import wait_until
from test_connect_timeout import timed

pytestmark = [pytest.mark.proxy_only, pytest.mark.timeout(60)]

LOOKUP_MS = 2500   # how long each lookup of a .slow.test name takes
PROMPT = 0.5       # a reply later than this waited for the lookup
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def slow_resolver(tmp_path_factory):
    lib = str(tmp_path_factory.mktemp("slowdns") / "slow_getaddrinfo.so")
    subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", "-O1", "-o", lib,
                    os.path.join(HERE, "slow_getaddrinfo.c"), "-ldl"], check=True)
    return lib


def slow_env(lib, log):
    asan = os.environ.get("ASAN_OPTIONS", "")
    return {"LD_PRELOAD": lib, "SLOW_LOOKUP_MS": str(LOOKUP_MS), "SLOW_LOOKUP_LOG": str(log),
            # an ASan build checks that its runtime is the first library loaded
            "ASAN_OPTIONS": (asan + ":" if asan else "") + "verify_asan_link_order=0"}


def lookups(log):
    return open(log).read().split() if os.path.exists(log) else []


def test_a_hanging_lookup_holds_no_client_up(proxy_factory, upstream, slow_resolver, tmp_path):
    """Started on a name whose lookup takes 2.5 s: each request meanwhile gets
    an error at once that says the name is being looked up; once the answer
    is in, requests reach Redis."""
    log = tmp_path / "lookups"
    name = "redis-upstream.slow.test"
    p = proxy_factory(upstream_url="redis://%s:%d" % (name, upstream.port), env=slow_env(slow_resolver, log))
    c = p.raw(auth=True)
    raw, took = timed(c, "SET", "k", "v")
    assert took < PROMPT, "the reply waited %.2fs for the lookup" % took
    # (a proxy that waits for lookups has Redis's +OK here: it held its start)
    assert raw.startswith(b"-") and b"looking up " + name.encode() in raw, raw
    upstream.client().set("k", "before")
    wait_until(lambda: c.cmd("GET", "k", timeout=10).raw == b"$6\r\nbefore\r\n", timeout=10, interval=0.05,
               what="the lookup's answer to be taken")
    assert c.cmd("SET", "k", "through").raw == b"+OK\r\n"
    assert upstream.client().get("k") == b"through"
    assert name in lookups(log)


def test_the_lookup_again_after_redis_went_away_holds_no_client_up(proxy_factory, upstream, slow_resolver,
                                                                   tmp_path):
    """Redis goes away: the connects that fail look the name up again (it may
    point elsewhere now), and that lookup hangs. The proxy goes on answering
    at once, and is back once Redis is."""
    log = tmp_path / "lookups"
    name = "redis-upstream.slow.test"
    p = proxy_factory(upstream_url="redis://%s:%d" % (name, upstream.port), env=slow_env(slow_resolver, log))
    c = p.raw(auth=True)
    wait_until(lambda: c.cmd("SET", "k", "v1", timeout=10).raw == b"+OK\r\n", timeout=10, interval=0.05,
               what="the first lookup's answer to be taken")
    before = len(lookups(log))
    upstream.kill()
    slowest = 0.0
    deadline = time.monotonic() + 2 * LOOKUP_MS / 1000.0
    while time.monotonic() < deadline:
        raw, took = timed(c, "GET", "k")
        assert raw.startswith(b"-"), raw
        slowest = max(slowest, took)
        time.sleep(0.05)
    assert len(lookups(log)) > before, "the name was not looked up again"
    assert slowest < PROMPT, "a reply waited %.2fs for the lookup" % slowest
    upstream.restart()
    wait_until(lambda: c.cmd("SET", "k", "v2", timeout=10).raw == b"+OK\r\n", timeout=15, interval=0.05,
               what="requests to reach Redis again")
    assert upstream.client().get("k") == b"v2"
