"""tcp-keepalive covers every TCP socket sidecache keeps open: its clients'
and its own towards Redis (the shared data connections, a connection pinned
to a blocked client, a pub/sub tunnel, the invalidation connection).

Blocked (BLPOP 0) and subscribed clients are exempt from upstream-timeout,
and their own connection to the proxy stays healthy: if the Redis host
vanished without a reset (power loss, partition), only keepalive on the
proxy's socket to Redis would notice.

What a socket has is read with `ss -tnop`: one with SO_KEEPALIVE and
nothing unacknowledged shows `timer:(keepalive,<time left>,0)`.
"""
import re
import shutil
import subprocess
import time

import pytest

from cachehelpers import wait_tracking_active

pytestmark = [
    pytest.mark.proxy_only,
    pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)"),
]

KEEPALIVE = 77  # seconds; a value no default has


def keepalive_left(timer):
    """Seconds left of a `timer:(keepalive,1min16sec,0)`; None for any
    other timer or none."""
    m = re.search(r"timer:\(keepalive,([^,]*),", timer or "")
    if m is None:
        return None
    t = m.group(1)
    mins = re.search(r"(\d+)min", t)
    secs = re.search(r"(\d+)sec", t)
    ms = re.search(r"(\d+)ms", t)
    return ((int(mins.group(1)) * 60 if mins else 0) + (int(secs.group(1)) if secs else 0)
            + (int(ms.group(1)) / 1000.0 if ms else 0))


def proxy_sockets(proxy, filt):
    """{local port: keepalive seconds left, or None} of the proxy's
    established TCP sockets that match the ss filter."""
    out = subprocess.run(["ss", "-tnopH", "state", "established", filt],
                         capture_output=True, text=True, check=True).stdout
    socks = {}
    for line in out.splitlines():
        if "pid=%d," % proxy.proc.pid not in line:
            continue
        local = line.split()[2]
        socks[int(local.rsplit(":", 1)[1])] = keepalive_left(line)
    return socks


def redis_clients(up):
    """Redis's CLIENT LIST, by the client's port: {port: {field: value}}."""
    with up.raw() as c:
        text = bytes(c.call("CLIENT", "LIST")).decode()
    out = {}
    for line in text.splitlines():
        f = dict(kv.split("=", 1) for kv in line.split())
        out[int(f["addr"].rsplit(":", 1)[1])] = f
    return out


def wait_blocked(up, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not any(f["cmd"] == "blpop" for f in redis_clients(up).values()):
        assert time.monotonic() < deadline, "BLPOP never reached Redis"
        time.sleep(0.02)


def wait_all_keepalive(proxy, filt, minimum, timeout=5.0):
    """The proxy's sockets matching filt (at least `minimum`) once every one
    shows a keepalive timer: one may briefly show another timer while a
    reply is unacknowledged."""
    deadline = time.monotonic() + timeout
    while True:
        socks = proxy_sockets(proxy, filt)
        if len(socks) >= minimum and all(v is not None for v in socks.values()):
            return socks
        if time.monotonic() > deadline:
            return socks
        time.sleep(0.1)


def test_keepalive_on_the_proxys_sockets_to_redis(proxy_factory, upstream):
    proxy = proxy_factory(args=("--tcp-keepalive", KEEPALIVE))
    wait_tracking_active(proxy)  # the invalidation connection is up
    plain = proxy.raw()
    assert plain.cmd("SET", "k", "v").raw == b"+OK\r\n"
    blocked = proxy.raw()
    blocked.send_cmd("BLPOP", "q", 0)
    sub = proxy.raw()
    assert sub.cmd("SUBSCRIBE", "ch").value[0] == b"subscribe"
    wait_blocked(upstream)

    to_redis = wait_all_keepalive(proxy, "( dport = :%d )" % upstream.port, 4)
    clients = redis_clients(upstream)
    # tracking redirects to the invalidation connection (to itself in BCAST mode)
    redirect_to = {f["redir"] for f in clients.values()} - {"-1", "0"}
    kinds = {}
    for port in to_redis:
        f = clients.get(port)
        assert f is not None, "socket from port %d unknown to Redis" % port
        kind = ("blocked" if f["cmd"] == "blpop" else
                "invalidation" if f["id"] in redirect_to else
                "tunnel" if f["sub"] == "1" else "data")
        kinds.setdefault(kind, []).append(port)
    assert set(kinds) == {"blocked", "invalidation", "tunnel", "data"}, (kinds, clients)
    bad = {kind: [to_redis[p] for p in ports] for kind, ports in kinds.items()
           if not all(to_redis[p] is not None and 0 < to_redis[p] <= KEEPALIVE for p in ports)}
    assert not bad, "sockets to Redis without a %ds keepalive (seconds left): %r" % (KEEPALIVE, bad)

    # the clients' own sockets, as before
    to_clients = wait_all_keepalive(proxy, "( sport = :%d )" % proxy.port, 3)
    assert to_clients and all(v is not None and 0 < v <= KEEPALIVE for v in to_clients.values()), to_clients

    assert plain.cmd("LPUSH", "q", "x").raw == b":1\r\n"
    assert blocked.read_frame().value == [b"q", b"x"]
    for c in (plain, blocked, sub):
        c.close()


def test_keepalive_0_leaves_it_off_towards_redis(proxy_factory, upstream):
    # (Client sockets inherit libevent's SO_KEEPALIVE on the listener: they
    # keep the system's default period, not checked here.)
    proxy = proxy_factory(args=("--tcp-keepalive", 0))
    wait_tracking_active(proxy)
    with proxy.raw() as c:
        assert c.cmd("SET", "k", "v").raw == b"+OK\r\n"
        time.sleep(0.2)
        to_redis = proxy_sockets(proxy, "( dport = :%d )" % upstream.port)
    assert len(to_redis) >= 2, to_redis
    assert all(v is None for v in to_redis.values()), to_redis
