"""
/metrics (metrics-port): the Prometheus text format, the same numbers as
INFO's `# sidecache` section, and latency histograms of hits and of upstream
round trips.
"""
import re
import urllib.error
import urllib.request

import pytest

from cachehelpers import start_cached, warm
from helpers import free_port, wait_until

pytestmark = pytest.mark.proxy_only


def scrape(port, path="/metrics"):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def samples(text):
    """{'sidecache_x': value, 'sidecache_h_bucket{le="0.001"}': value, ...}"""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, value = line.rsplit(" ", 1)
        out[name] = float(value)
    return out


def test_metrics_match_info(proxy_factory, upstream):
    port = free_port()
    p, st = start_cached(proxy_factory, args=("--metrics-port", str(port)))
    upstream.client().set("i77001", "v")
    c = p.raw(auth=True)
    warm(c, st, ("GET", "i77001"))
    for _ in range(20):
        c.cmd("GET", "i77001")
    c.cmd("SET", "k", "v")
    status, ctype, text = scrape(port)
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4"), ctype
    m = samples(text)
    info = st.get()
    # every number of the INFO section is a metric, with HELP and TYPE, and
    # (nothing ran in between but the INFO itself) the same value
    numbers = {k: v for k, v in info.items() if isinstance(v, int)}
    assert len(numbers) >= 30, info
    # (but for what runs by itself: keep-alives, the PONG of the SET's
    # barrier, ACL checks, which may move between the scrape and the INFO)
    by_itself = ("acl_checks", "tracking_pings_sent", "tracking_pings_answered")
    for k, v in numbers.items():
        assert "# TYPE sidecache_%s " % k in text, k
        assert "# HELP sidecache_%s " % k in text, k
        if k in by_itself:
            assert m["sidecache_" + k] <= v, (k, m["sidecache_" + k], v)
        elif k not in ("connected_clients",):
            assert m["sidecache_" + k] == v, (k, m["sidecache_" + k], v)
    assert m["sidecache_cache_hits"] >= 20
    assert m["sidecache_tracking_active"] == 1
    assert re.search(r'^sidecache_info\{version="[^"]+",tracking_mode="%s",tracking_state="active"\} 1$'
                     % re.escape(p.tracking_mode), text, re.M), text[:400]
    # histograms: cumulative buckets, +Inf == count, hits counted
    for h in ("hit_seconds", "upstream_seconds"):
        assert "# TYPE sidecache_%s histogram" % h in text
        buckets = [(k, v) for k, v in m.items() if k.startswith("sidecache_%s_bucket" % h)]
        values = [v for _, v in buckets]
        assert values == sorted(values), buckets
        assert m['sidecache_%s_bucket{le="+Inf"}' % h] == m["sidecache_%s_count" % h]
    assert m["sidecache_hit_seconds_count"] >= 20
    assert m["sidecache_upstream_seconds_count"] >= 2


def test_upstream_up_follows_connects_while_info_cannot(proxy_factory, upstream):
    """While Redis is down, INFO through sidecache is refused like any
    command (it is Redis's INFO, with a section added); /metrics answers
    without Redis and says the upstream is down, and counts the failed
    connects. Redis back and a connect made: up again."""
    port = free_port()
    p = proxy_factory(args=("--metrics-port", str(port), "--upstream-connections", "1"))
    c = p.raw(auth=True)
    assert c.cmd("SET", "k", "v").raw == b"+OK\r\n"
    m = samples(scrape(port)[2])
    assert m["sidecache_upstream_up"] == 1 and m["sidecache_upstream_connects_failed"] == 0, m
    upstream.kill()
    wait_until(lambda: c.cmd("GET", "k").raw.startswith(b"-MASTERDOWN sidecache: upstream"),
               what="a connect refused")
    assert c.cmd("INFO", "sidecache").raw.startswith(b"-MASTERDOWN"), "INFO needs Redis"
    m = samples(scrape(port)[2])
    assert m["sidecache_upstream_up"] == 0 and m["sidecache_upstream_connects_failed"] >= 1, m
    upstream.restart()
    wait_until(lambda: c.cmd("GET", "k").raw in (b"$1\r\nv\r\n", b"$-1\r\n"), timeout=10,
               what="Redis reached again")
    m = samples(scrape(port)[2])
    assert m["sidecache_upstream_up"] == 1 and m["sidecache_upstream_connects_failed"] >= 1, m


def test_upstream_up_is_0_until_redis_first_answers(proxy_factory):
    port = free_port()
    p = proxy_factory(upstream_url="redis://127.0.0.1:%d" % free_port(), args=("--metrics-port", str(port)))
    assert p.raw().cmd("GET", "k").raw.startswith(b"-MASTERDOWN sidecache: upstream")
    m = samples(scrape(port)[2])
    assert m["sidecache_upstream_up"] == 0 and m["sidecache_upstream_connects_failed"] >= 1, m


def test_metrics_other_paths_and_off(proxy_factory):
    port = free_port()
    proxy_factory(args=("--metrics-port", str(port)))
    with pytest.raises(urllib.error.HTTPError) as e:
        scrape(port, "/")
    assert e.value.code == 404
    req = urllib.request.Request("http://127.0.0.1:%d/metrics" % port, data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 405
    # without metrics-port nothing listens there
    port2 = free_port()
    proxy_factory()
    with pytest.raises(OSError):
        scrape(port2)


@pytest.mark.parametrize("part", ["body", "header"])
def test_metrics_request_larger_than_a_scrape_is_refused_not_buffered(proxy_factory, part):
    """A peer that streams a large POST body or one endless header line to
    metrics-port: libevent kept either whole in memory (the timeout only
    ends an idle peer), so 32 MB sent grew the proxy by 32 MB. A request
    larger than a scrape is refused and its connection closed, with the
    proxy's memory unchanged; a scrape still works after."""
    import socket
    from faulthelpers import proc_status
    port = free_port()
    p = proxy_factory(args=("--metrics-port", str(port)))
    assert scrape(port)[0] == 200
    base = proc_status(p.proc.pid)["VmRSS"]
    total, chunk = 32 << 20, b"x" * 65536
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    if part == "body":
        s.sendall(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % total)
    else:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Long: ")
    sent, closed = 0, False
    try:
        while sent < total:
            s.sendall(chunk)
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        closed = True
    grown = proc_status(p.proc.pid)["VmRSS"] - base
    s.close()
    assert closed, "the proxy took all %d MB" % (total >> 20)
    assert grown < 8 << 20, "the proxy grew %.1f MB" % (grown / (1 << 20))
    assert scrape(port)[0] == 200
