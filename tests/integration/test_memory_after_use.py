"""
tests/integration/test_memory_after_use.py — memory that one large request
needed is given back once it is answered (RSS from /proc/<pid>/status),
as Redis gives back its own.

- An MGET answered from the cache whose reply is 120 MB: its copies go
  with the reply; sidecache kept a buffer of the reply's size for good.
- A MULTI of 200,000 commands, then DISCARD: the keys recorded for the
  EXEC's purge go with the transaction, while the client stays connected
  (Redis frees its queue at DISCARD).
"""
import os
import time

import pytest

from cachehelpers import start_cached, warm
from faulthelpers import mb, proc_status
from helpers import wait_until

pytestmark = [pytest.mark.proxy_only, pytest.mark.timeout(120)]


@pytest.fixture(autouse=True)
def asan_gives_memory_back(monkeypatch):
    """Under ASan (CI), freed memory waits in a quarantine and its allocator
    keeps what it freed: RSS would measure the sanitizer. No quarantine, and
    what is freed goes back to the system as glibc's large chunks do."""
    asan = os.environ.get("ASAN_OPTIONS", "")
    monkeypatch.setenv("ASAN_OPTIONS", (asan + ":" if asan else "") +
                       "quarantine_size_mb=0:allocator_release_to_os_interval_ms=100")


def rss(p):
    return proc_status(p.proc.pid)["VmRSS"]


def settled_rss(p, below, what):
    """RSS once it fell below `below` bytes (the per-second cron trims
    buffers), or the last sample when it did not within 5 s."""
    try:
        wait_until(lambda: rss(p) < below, timeout=5, interval=0.1, what=what)
    except AssertionError:
        pass
    return rss(p)


def test_an_mget_answered_from_the_cache_keeps_nothing_after_its_reply(proxy_factory, upstream):
    value = b"v" * 60000
    n = 2000
    upstream.client().set("i1", value)
    p, st = start_cached(proxy_factory)
    c = p.raw()
    warm(c, st, ("GET", "i1"))
    warm(c, st, ("MGET", "i1"))   # the MGET learned: Redis answered it for this user
    base = rss(p)
    with st.delta() as dd:
        c.send_cmd("MGET", *(["i1"] * n))
        reply = c.read_frame(timeout=60).value
    assert reply == [value] * n
    assert dd["cache_mget_hits"] == 1, dict(dd)
    c.close()
    after = settled_rss(p, base + 40 * 1024 * 1024, "the MGET's memory to be given back")
    print("\nproxy RSS before %.1f MB, after a %.0f MB MGET hit %.1f MB" % (mb(base), mb(n * len(value)), mb(after)))
    assert after < base + 40 * 1024 * 1024, (
        "RSS %.1f MB before, %.1f MB after the MGET's reply was read and its client gone" % (mb(base), mb(after)))


def test_a_discarded_transaction_keeps_nothing_of_its_keys(proxy_factory, upstream):
    n = 200000
    p, st = start_cached(proxy_factory)
    c = p.raw()
    base = rss(p)
    key = "i1" + "k" * 200
    assert c.cmd("MULTI").raw == b"+OK\r\n"
    batch = n
    for i in range(0, n, batch):
        for j in range(i, i + batch):
            c.send_cmd("DEL", "%s%d" % (key, j))
        for _ in range(batch):
            assert c.read_frame(timeout=30).raw == b"+QUEUED\r\n"
    assert c.cmd("DISCARD").raw == b"+OK\r\n"
    after = settled_rss(p, base + 15 * 1024 * 1024, "the transaction's memory to be given back")
    assert c.cmd("PING").raw == b"+PONG\r\n"   # still connected
    print("\nproxy RSS before %.1f MB, after a discarded MULTI of %d DELs %.1f MB" % (mb(base), n, mb(after)))
    assert after < base + 15 * 1024 * 1024, (
        "RSS %.1f MB before, %.1f MB after DISCARD, the client still connected" % (mb(base), mb(after)))
