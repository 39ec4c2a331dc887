"""
tests/integration/test_faults.py — network faults between sidecache and
Redis, on the data connections and, separately, on the invalidation
(tracking) connection.

Every test puts two toxiproxy proxies in front of the same redis-server:
`data` (the proxy's --upstream: every data connection) and `track`
(--tracking-upstream: the invalidation connection only), so a fault can be
put on one path while the other stays healthy. Faults (faulthelpers.
apply_fault): latency, down (toxiproxy proxy disabled), reset_peer, timeout
(half-open: data dropped, connection kept), slicer (1-byte fragments),
bandwidth (a low rate).

What is asserted:
  - data path: every request gets an answer (a reply, or the proxy's own
    `-ERR sidecache: ...` or `-MASTERDOWN sidecache: ...`) — none hangs; every acknowledged write is in
    Redis afterwards (checked directly on Redis); read-your-writes holds; a
    write made directly on Redis during the fault is never hidden by a
    cached old value; the proxy recovers by itself once the fault is gone;
  - invalidation path: client requests never fail; when tracking may have
    missed something (connection lost, keep-alive late) the cache is
    emptied (cache_flushes_tracking_lost, cache_entries), no hit is served
    while tracking_state is not active (reads return what Redis holds now,
    even after a write made directly on Redis whose invalidation was lost),
    and hits resume only once tracking is active again; faults that lose
    nothing (small latency, fragments, a low but sufficient rate) do not
    cost the cache at all;
  - both: a read in flight while tracking is lost and regained must not
    fill the cache; in the default/optin tracking modes the loss of a data
    connection (which Redis tracked) empties the cache;
  - a request sent into a half-open data connection (toxiproxy timeout
    toxic, left on) gets an error in bounded time (upstream-timeout).

The workload (faulthelpers.Workload) also runs pipelined write runs (which
the proxy sends as MULTI/EXEC batches) and MULTI/EXEC transactions, and
checks that each transaction is in Redis entirely or not at all.

The proxy pings the invalidation connection every 100 ms with a 600 ms
deadline (--tracking-keepalive-ms / --tracking-timeout-ms) to keep this fast.
Needs Go to build bench/toxiproxy (skipped without it).
"""
import threading
import time

import pytest

from faulthelpers import (Metrics, Workload, apply_fault, brief, direct_set,
                          is_proxy_error, stop_workloads, toxiproxy, toxiproxy_bin,  # noqa: F401
                          until_ok)
from helpers import Err, free_port

pytestmark = [pytest.mark.proxy_only, pytest.mark.timeout(30)]

KEEPALIVE_MS = 100
TIMEOUT_MS = 600  # (a slow CI machine's stalls stay well inside it)
# The faults below slow the invalidation connection's round trip to 100 ms
# and more: a read that comes while a PING is out waits for its answer up to
# tracking-ping-hold-ms, then goes to Redis. As docs/DEPLOY.md advises, the
# hold is above the round trip (and below the timeout), so hits go on.
HOLD_MS = 400
TRACK_ARGS = ("--tracking-mode", "bcast",
              "--tracking-keepalive-ms", str(KEEPALIVE_MS),
              "--tracking-timeout-ms", str(TIMEOUT_MS),
              "--tracking-ping-hold-ms", str(HOLD_MS))


class Env:
    def __init__(self, upstream, tp, data, track, proxy, metrics):
        self.upstream = upstream
        self.tp = tp
        self.data = data
        self.track = track
        self.proxy = proxy
        self.m = metrics

    def client(self, timeout=5.0):
        return self.proxy.raw(auth=True, timeout=timeout)


def start_env(toxiproxy, upstream, proxy_factory, before_start=None, args=(), wait_active=True):
    data = toxiproxy.create("data", upstream.port)
    track = toxiproxy.create("track", upstream.port)
    if before_start:
        before_start(data, track)
    mport = free_port()
    p = proxy_factory(upstream_url=data.url,
                      args=TRACK_ARGS + ("--tracking-upstream", track.url,
                                         "--metrics-port", str(mport)) + tuple(args))
    m = Metrics(mport)
    if wait_active:
        m.wait_active(timeout=15)
    return Env(upstream, toxiproxy, data, track, p, m)


@pytest.fixture
def env(toxiproxy, upstream, proxy_factory):
    e = start_env(toxiproxy, upstream, proxy_factory)
    yield e
    toxiproxy.reset()   # before the proxy is stopped: it must not wait on a black hole
    stop_workloads()    # (a test that failed half-way)


# ---------------------------------------------------------------------------
# helpers


def read_hit(e, c, cmd, attempts=40):
    """Reads cmd on proxy connection c until one read is a cache hit; returns
    its value. (A read that comes while a tracking PING is out past
    tracking-ping-hold-ms goes to Redis: a fault may delay PONGs for a
    while, so the reads are spread over a few keep-alive periods.)"""
    for _ in range(attempts):
        before = e.m["cache_hits"]
        v = c.call(*cmd)
        if e.m["cache_hits"] == before + 1:
            return v
        time.sleep(KEEPALIVE_MS / 1000 / 2)
    raise AssertionError("%r: no cache hit in %d reads (%s)" % (cmd, attempts, brief(e.m.get())))


def read_no_hit(e, c, cmd):
    """Reads cmd while tracking is not active: asserts it was not a cache
    hit and that tracking stayed inactive around it. Returns the value."""
    d0 = e.m.get()
    assert d0["tracking_state"] != "active", brief(d0)
    v = c.call(*cmd)
    d1 = e.m.get()
    assert d1["tracking_state"] != "active", "tracking came back during the read: " + brief(d1)
    assert d1["cache_hits"] == d0["cache_hits"], (
        "%r was served from the cache while tracking was %s (%s)"
        % (cmd, d0["tracking_state"], brief(d1)))
    assert d1["cache_entries"] == 0, (
        "the cache holds entries while tracking is %s: %s" % (d1["tracking_state"], brief(d1)))
    return v


def wait_invalidated(e, base_keys, n=1, timeout=3.0):
    e.m.wait(lambda d: d["invalidation_keys"] >= base_keys + n, timeout,
             "%d invalidation(s) counted" % n)


def wait_tracking_caught_up(e, timeout=3.0):
    """Waits until the proxy has handled every invalidation of the writes
    Redis ran before this call: a tracking PING sent after it is answered
    (one connection, in order), or lost with its connection (which empties
    the cache). Counting invalidations is not enough while a workload
    writes cacheable keys too: one of theirs may be counted while the one
    awaited is still on the invalidation path (toxiproxy relays it)."""
    seq = e.m["tracking_pings_sent"] + 1
    e.m.wait(lambda d: d["tracking_pings_answered"] + d["tracking_pings_lost"] >= seq, timeout,
             "a tracking PING sent after the write answered")


# ---------------------------------------------------------------------------
# Faults on the data connections

FAULT_SECONDS = 1.0

DATA_KW = {
    "latency": {"latency": 60},
    "down": {},
    "reset_peer": {"timeout": 0},
    "timeout": {"timeout": 0},
    "slicer": {"delay": 0},
    "bandwidth": {"rate": 16},
}
# Must requests fail while the fault lasts? (None: may or may not)
DATA_ERRORS = {"latency": False, "down": True, "reset_peer": True, "timeout": True,
               "slicer": False, "bandwidth": False}


@pytest.mark.parametrize("fault", list(DATA_KW))
def test_data_path_fault(env, fault):
    """A fault on the data connections for FAULT_SECONDS while three clients
    write and read through the proxy (faulthelpers.Workload). The
    invalidation path stays healthy."""
    e = env
    probe, other = "i7301", "i7302"
    direct_set(e.upstream, probe, "old")
    direct_set(e.upstream, other, "other")
    big = b"B" * 24000
    direct_set(e.upstream, "bigval", big)
    with e.client() as c:
        assert read_hit(e, c, ("GET", probe)) == b"old"
        assert read_hit(e, c, ("GET", other)) == b"other"

    wl = Workload(e.proxy, "data-" + fault, reply_timeout=FAULT_SECONDS + 4).start()
    time.sleep(0.3)
    t_fault = time.monotonic()
    undo = apply_fault(e.data, fault, **DATA_KW[fault])
    try:
        # A write made elsewhere during the fault: its invalidation comes on
        # the healthy path, and the cached "old" must never be served again.
        base = e.m["invalidation_keys"]
        direct_set(e.upstream, probe, "new")
        wait_invalidated(e, base)
        wait_tracking_caught_up(e)
        results = {}

        def probe_reads():
            try:
                with e.client(timeout=FAULT_SECONDS + 4) as c:
                    results["probe"] = c.call("GET", probe)
                    results["other"] = c.call("GET", other)
                    if fault == "bandwidth":
                        results["big"] = c.call("GET", "bigval")
            except Exception as ex:  # recorded, asserted below
                results["exc"] = ex

        th = threading.Thread(target=probe_reads, daemon=True)
        th.start()
        time.sleep(max(0.0, FAULT_SECONDS - (time.monotonic() - t_fault)))
    finally:
        undo()
    t_undo = time.monotonic()
    th.join(6)
    assert not th.is_alive(), "a read through the proxy got no answer (fault %s)" % fault
    assert "exc" not in results, results
    assert results["probe"] == b"new" or is_proxy_error(results["probe"]), (
        "GET %s during the %s fault returned %r after Redis had changed it to 'new'"
        % (probe, fault, results["probe"]))
    assert results["other"] == b"other" or is_proxy_error(results["other"]), results
    if fault == "bandwidth":
        assert results["big"] == big, "GET bigval: %r" % (results["big"][:100],)

    # the proxy recovers by itself
    _, took = until_ok(e.proxy, ("SET", "recovered", "1"), timeout=5)
    t_rec = time.monotonic()
    time.sleep(0.5)
    wl.stop()
    summary = wl.check(e.upstream, expect_errors=DATA_ERRORS[fault])
    late = [txt for t, txt in wl.errors if t > t_rec + 0.1]
    assert not late, "errors after the proxy had recovered: %s" % late[:5]
    assert len([t for t in wl.oks if t > t_rec]) >= 10, "little progress after the recovery"
    with e.client() as c:
        assert c.call("GET", probe) == b"new"
        assert read_hit(e, c, ("GET", probe)) == b"new"
    d = e.m.get()
    print("\n[data %s] %s; recovered %.2fs after the fault was removed; write batches %d, "
          "shared/pinned transactions %d/%d; errors e.g. %s"
          % (fault, summary, t_rec - t_undo, d["batch_blocks"], d["txn_shared"], d["txn_pinned"],
             [x for _, x in wl.errors[:2]]))


def test_data_path_half_open_answers_pending_requests(toxiproxy, upstream, proxy_factory):
    """Half-open data connection (toxiproxy timeout toxic with timeout 0:
    bytes vanish, nothing closes): a pending request must still get an
    answer (an error) in bounded time (upstream-timeout), as a half-open
    invalidation connection is detected by its keep-alive. The fault stays
    on."""
    e = start_env(toxiproxy, upstream, proxy_factory, args=("--upstream-timeout", "1"))
    with e.client(timeout=5) as c:
        assert c.call("SET", "ho", "1") == b"OK"
        undo = apply_fault(e.data, "timeout", timeout=0)
        try:
            t0 = time.monotonic()
            c.send_cmd("GET", "ho")
            try:
                f = c.read_frame(timeout=4.0)
            except OSError:
                raise AssertionError("GET through a half-open upstream connection: no answer "
                                     "within 4s (fault still on)")
            assert is_proxy_error(f.value), f
            print("\n[data half-open] answered in %.2fs: %r" % (time.monotonic() - t0, f.raw))
        finally:
            undo()
            toxiproxy.reset()


# ---------------------------------------------------------------------------
# Faults on the invalidation connection


def _warm_pair(e, c, v):
    """Sets i7401 and d7401 f to v directly, waits for both invalidations
    (they may come late under a fault), and reads both until cached."""
    base = e.m["invalidation_keys"]
    direct_set(e.upstream, "i7401", v)
    with e.upstream.raw(auth=True) as d:
        d.call("HSET", "d7401", "f", v)
    wait_invalidated(e, base, 2)
    assert read_hit(e, c, ("GET", "i7401")) == v.encode()
    assert read_hit(e, c, ("HGET", "d7401", "f")) == v.encode()


def _direct_pair(e, v):
    with e.upstream.raw(auth=True) as d:
        assert d.call("SET", "i7401", v) == b"OK"
        assert not isinstance(d.call("HSET", "d7401", "f", v), Err)


def check_lossy_tracking_fault(e, fault, kw, wait_lost=3.0):
    """The scenario of every fault that makes the proxy lose tracking:
      1. i7401 and HGET d7401 f are cached (hits) with v1;
      2. the fault goes on the invalidation path, and at once both are
         changed directly on Redis (v2): their invalidation may be lost;
      3. the proxy notices (connection lost or keep-alive late): the cache
         is emptied (cache_flushes_tracking_lost), tracking_state leaves
         active;
      4. while it is not active every read returns what Redis holds now
         (v2, then v3 after another direct write), none is a hit, nothing
         is cached;
      5. one more direct write (v4), not read before the recovery;
      6. the fault goes; tracking comes back; reads return v4, and hits
         resume only then.
    A workload runs through the proxy meanwhile: not one request may fail
    (the data path is healthy)."""
    wl = Workload(e.proxy, "track-" + fault).start()
    with e.client() as c:
        _warm_pair(e, c, "v1")
        before = e.m.get()
        undo = apply_fault(e.track, fault, **kw)
        t_fault = time.monotonic()
        try:
            _direct_pair(e, "v2")
            d = e.m.wait(lambda d: d["cache_flushes_tracking_lost"] > before["cache_flushes_tracking_lost"]
                         and d["tracking_state"] != "active", wait_lost, "the tracking loss and its flush")
            t_lost = time.monotonic() - t_fault
            assert d["tracking_losses"] > before["tracking_losses"], brief(d)
            assert d["cache_flushes"] > before["cache_flushes"], brief(d)
            if fault == "timeout":  # the keep-alive went unanswered
                assert d["tracking_pings_lost"] > before["tracking_pings_lost"], brief(d)
            assert d["tracking_pings_sent"] >= d["tracking_pings_answered"] + d["tracking_pings_lost"], brief(d)
            for _ in range(3):
                assert read_no_hit(e, c, ("GET", "i7401")) == b"v2"
                assert read_no_hit(e, c, ("HGET", "d7401", "f")) == b"v2"
            _direct_pair(e, "v3")
            assert read_no_hit(e, c, ("GET", "i7401")) == b"v3"
            assert read_no_hit(e, c, ("HGET", "d7401", "f")) == b"v3"
            _direct_pair(e, "v4")
            time.sleep(0.3)
            d = e.m.get()
            assert d["tracking_state"] != "active" and d["cache_entries"] == 0, brief(d)
        finally:
            undo()
        t_undo = time.monotonic()
        d = e.m.wait_active(timeout=6)
        t_back = time.monotonic() - t_undo
        assert c.call("GET", "i7401") == b"v4", "stale value after tracking came back"
        assert c.call("HGET", "d7401", "f") == b"v4", "stale value after tracking came back"
        assert read_hit(e, c, ("GET", "i7401")) == b"v4"
        assert read_hit(e, c, ("HGET", "d7401", "f")) == b"v4"
    wl.stop()
    summary = wl.check(e.upstream, expect_errors=False)
    print("\n[tracking %s] lost after %.2fs, active again %.2fs after the fault went; "
          "workload %s; %s" % (fault, t_lost, t_back, summary, brief(e.m.get())))


@pytest.mark.parametrize("fault", ["down", "reset_peer", "timeout"])
def test_tracking_path_loss(env, fault):
    """Down, reset, or half-open (the keep-alive PING goes unanswered):
    tracking is lost, the cache emptied, no hit until it is back."""
    check_lossy_tracking_fault(env, fault, {"timeout": 0} if fault != "down" else {})


def test_tracking_path_down_from_the_start(toxiproxy, upstream, proxy_factory):
    """The invalidation path is down when the proxy starts: it serves as a
    plain proxy (no fill, no hit, every read current), then caches once
    tracking comes up."""
    e = start_env(toxiproxy, upstream, proxy_factory,
                  before_start=lambda data, track: track.disable(), wait_active=False)
    try:
        time.sleep(0.3)
        with e.client() as c:
            for v in ("a", "b", "c"):
                direct_set(e.upstream, "i7701", v)
                for _ in range(3):
                    assert read_no_hit(e, c, ("GET", "i7701")) == v.encode()
            assert c.call("SET", "i7702", "x") == b"OK"
            assert read_no_hit(e, c, ("GET", "i7702")) == b"x"
            e.track.enable()
            e.m.wait_active(timeout=5)
            assert c.call("GET", "i7701") == b"c"
            assert read_hit(e, c, ("GET", "i7701")) == b"c"
        print("\n[tracking down from the start] %s" % brief(e.m.get()))
    finally:
        toxiproxy.reset()


def test_tracking_path_latency_beyond_deadline(env):
    """Latency of 400 ms each way: a keep-alive round trip (800 ms) misses
    the 600 ms deadline; the proxy must drop tracking and empty the cache.
    It may get tracking back for a moment between misses (the setup has no
    such deadline), so no-hit is not asserted here; what it serves must
    still converge to Redis's value and never go back."""
    e = env
    with e.client() as c:
        _warm_pair(e, c, "v1")
        before = e.m.get()
        undo = apply_fault(e.track, "latency", latency=400)
        try:
            d = e.m.wait(lambda d: d["cache_flushes_tracking_lost"] > before["cache_flushes_tracking_lost"],
                         3.0, "a flush for the late keep-alive")
            assert d["tracking_losses"] > before["tracking_losses"], brief(d)
            for v in ("v2", "v3"):
                _direct_pair(e, v)
                t0 = time.monotonic()
                seen_new = False
                while time.monotonic() - t0 < 1.0:
                    got = c.call("GET", "i7401")
                    if got == v.encode():
                        seen_new = True
                    else:
                        assert not seen_new, "GET i7401 went back to %r after %r" % (got, v)
                    time.sleep(0.02)
                assert seen_new, "GET i7401 never returned %s (1.0s)" % v
        finally:
            undo()
        e.m.wait_active(timeout=6)
        assert c.call("GET", "i7401") == b"v3"
        assert read_hit(e, c, ("GET", "i7401")) == b"v3"
        # stable again: no more losses
        losses = e.m["tracking_losses"]
        time.sleep(0.6)
        assert e.m["tracking_losses"] == losses, brief(e.m.get())
    print("\n[tracking latency 400ms] %s" % brief(e.m.get()))


def check_benign_tracking(e, what, rounds=5, bound=1.0):
    """Tracking must stay active (no loss, no flush) while direct writes
    keep being seen through the proxy within `bound` seconds; hits go on.
    Returns the worst staleness measured."""
    before = e.m.get()
    worst = 0.0
    with e.client() as c:
        for i in range(rounds):
            v = "%s-%d" % (what, i)
            _warm_pair(e, c, "w%d" % i)
            base = e.m["invalidation_keys"]
            t0 = time.monotonic()
            _direct_pair(e, v)
            while True:
                a = c.call("GET", "i7401")
                b = c.call("HGET", "d7401", "f")
                if a == v.encode() and b == v.encode():
                    break
                assert time.monotonic() - t0 < bound, (
                    "%s: direct write not visible through the proxy after %.1fs (%r, %r; %s)"
                    % (what, bound, a, b, brief(e.m.get())))
                time.sleep(0.005)
            worst = max(worst, time.monotonic() - t0)
            wait_invalidated(e, base, 2)
    d = e.m.get()
    assert d["tracking_state"] == "active", brief(d)
    assert d["tracking_losses"] == before["tracking_losses"], "tracking lost: " + brief(d)
    assert d["cache_flushes_tracking_lost"] == before["cache_flushes_tracking_lost"], brief(d)
    assert d["cache_hits"] >= before["cache_hits"] + 2 * rounds, brief(d)
    return worst


def test_tracking_path_latency_within_deadline(env):
    """50 ms each way (keep-alive round trip 100 ms < 600 ms): tracking
    holds, invalidations arrive about 50 ms late, and nothing is lost."""
    e = env
    undo = apply_fault(e.track, "latency", latency=50)
    try:
        time.sleep(0.5)  # several keep-alives under the latency
        worst = check_benign_tracking(e, "lat")
    finally:
        undo()
    print("\n[tracking latency 50ms] worst staleness of a direct write %.0f ms; %s"
          % (worst * 1000, brief(e.m.get())))


def test_tracking_path_slicer(toxiproxy, upstream, proxy_factory):
    """Everything on the invalidation connection in 1-byte fragments, from
    its very setup (COMMAND's long reply, CLIENT ID, SUBSCRIBE) on:
    tracking must come up, invalidations be parsed, nothing lost; and a
    reconnect through the fragments works too."""
    t0 = time.monotonic()
    e = start_env(toxiproxy, upstream, proxy_factory,
                  before_start=lambda data, track: apply_fault(track, "slicer", delay=0))
    try:
        setup = time.monotonic() - t0
        worst = check_benign_tracking(e, "slice")
        # many invalidations at once, fragmented
        with e.upstream.raw(auth=True) as d:
            keys = ["i75%02d" % i for i in range(50)]
            base = e.m["invalidation_keys"]
            d.raw_cmds([("SET", k, "x") for k in keys])
        wait_invalidated(e, base, len(keys))
        # reconnect through the fragments
        e.track.disable()
        e.m.wait_not_active()
        e.track.enable()
        e.m.wait_active(timeout=10)
        with e.client() as c:
            direct_set(e.upstream, "i7401", "after")
            until = time.monotonic() + 1.0
            while c.call("GET", "i7401") != b"after":
                assert time.monotonic() < until, "direct write not seen after reconnect"
            read_hit(e, c, ("GET", "i7401"))
        print("\n[tracking slicer] up in %.2fs from start, worst staleness %.0f ms; %s"
              % (setup, worst * 1000, brief(e.m.get())))
    finally:
        toxiproxy.reset()


def test_tracking_path_bandwidth(env):
    """A low rate (1 KB/s) on the invalidation connection. Light traffic
    passes: tracking holds and invalidations arrive. Then a burst of
    invalidations (direct writes of 400 keys, ~24 KB) queues the keep-alive
    PONG behind them: the deadline is missed, and the loss must be handled
    like any other (flush, no hits until tracking is back)."""
    e = env
    undo = apply_fault(e.track, "bandwidth", rate=1)
    try:
        time.sleep(0.3)
        worst = check_benign_tracking(e, "bw", rounds=3)
    finally:
        undo()
    print("\n[tracking bandwidth 1KB/s, light] worst staleness %.0f ms" % (worst * 1000))

    with e.client() as c:
        _warm_pair(e, c, "v1")
        before = e.m.get()
        apply_fault(e.track, "bandwidth", rate=1)
        try:
            with e.upstream.raw(auth=True) as d:
                d.raw_cmds([("SET", "i76%03d" % i, "x") for i in range(400)])
            _direct_pair(e, "v2")
            d = e.m.wait(lambda d: d["cache_flushes_tracking_lost"] > before["cache_flushes_tracking_lost"]
                         and d["tracking_state"] != "active", 3.0, "flush for the starved keep-alive")
            assert read_no_hit(e, c, ("GET", "i7401")) == b"v2"
            assert read_no_hit(e, c, ("HGET", "d7401", "f")) == b"v2"
            _direct_pair(e, "v3")
        finally:
            e.track.recreate()  # (see Link.recreate)
        t_undo = time.monotonic()
        e.m.wait_active(timeout=6)
        t_back = time.monotonic() - t_undo
        assert c.call("GET", "i7401") == b"v3"
        assert c.call("HGET", "d7401", "f") == b"v3"
        assert read_hit(e, c, ("GET", "i7401")) == b"v3"
    print("[tracking bandwidth 1KB/s, burst] active again %.2fs after the fault went; %s"
          % (t_back, brief(e.m.get())))


# ---------------------------------------------------------------------------
# Both paths: a read in flight while tracking is lost and comes back


def test_fill_in_flight_across_tracking_loss(env):
    """A cacheable read is sent while tracking is active (so it may fill),
    and its reply is held up on the data path (1 s latency). Meanwhile the
    invalidation connection is lost, the key is changed directly on Redis
    (that invalidation is lost), and tracking comes back. When the old
    reply finally arrives, it must not fill the cache: the flush happened
    after the read was sent. Reads afterwards must return the new value."""
    e = env
    direct_set(e.upstream, "i7801", "old")
    with e.client(timeout=5) as c:
        assert c.call("GET", "i7802") is None  # the upstream connection exists
        before = e.m.get()
        lat = e.data.toxic("latency", stream="downstream", latency=1000)
        try:
            t0 = time.monotonic()
            c.send_cmd("GET", "i7801")          # executed now, answered in 1 s
            time.sleep(0.05)
            e.track.disable()
            e.m.wait_not_active(timeout=0.5)
            direct_set(e.upstream, "i7801", "new")
            e.track.enable()
            e.m.wait_active(timeout=3)
            t_active = time.monotonic() - t0
            if t_active > 0.9:
                pytest.skip("tracking came back only after %.2fs: the reply was no "
                            "longer in flight" % t_active)
            f = c.read_frame(timeout=3)
            assert f.value == b"old", f   # the read ran before the write
        finally:
            e.data.remove(lat)
        d = e.m.get()
        assert d["tracking_state"] == "active", brief(d)
        for _ in range(3):
            got = c.call("GET", "i7801")
            assert got == b"new", (
                "GET i7801 returned %r after tracking came back: the reply of a read sent "
                "before the tracking loss filled the cache (%s)" % (got, brief(e.m.get())))
        after = e.m.get()
    print("\n[in-flight fill] tracking back after %.2fs; fills rejected %d -> %d; %s"
          % (t_active, before["cache_fills_rejected"], after["cache_fills_rejected"], brief(after)))


@pytest.mark.parametrize("mode", ["default", "optin"])
def test_data_path_loss_flushes_in_tracked_modes(toxiproxy, upstream, proxy_factory, mode):
    """In the default and optin modes Redis tracks what each data connection
    read: when one is lost, Redis forgets it, and a later write of those
    keys sends no invalidation at all (C4: loss of a tracked connection
    means flush). The invalidation path stays healthy throughout: the
    cache must still not serve the old value, during the outage nor after."""
    e = start_env(toxiproxy, upstream, proxy_factory, args=("--tracking-mode", mode))
    try:
        direct_set(e.upstream, "i7901", "old")
        with e.client() as c:
            assert read_hit(e, c, ("GET", "i7901"), attempts=20) == b"old"
            before = e.m.get()
            undo = apply_fault(e.data, "down")
            try:
                d = e.m.wait(lambda d: d["cache_flushes"] > before["cache_flushes"], 3.0,
                             "a flush for the lost tracked connection")
                direct_set(e.upstream, "i7901", "new")
                time.sleep(0.2)
                got = c.call("GET", "i7901")
                assert got != b"old", ("GET i7901 served the old value from the cache after its "
                                       "tracked connection was lost (%s)" % brief(e.m.get()))
                assert is_proxy_error(got) or got == b"new", got
            finally:
                undo()
            v, _ = until_ok(e.proxy, ("GET", "i7901"), timeout=5)
            assert v == b"new"
            assert c.call("GET", "i7901") == b"new"
        print("\n[data loss, tracking-mode %s] %s" % (mode, brief(e.m.get())))
    finally:
        toxiproxy.reset()
