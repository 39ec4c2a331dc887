"""
The cache's tracking, seen from the side: what it must not change for a
client, and how the invalidation connection copes with an upstream user that
may not run PING and with a connect that never completes.
"""
import socket
import time

import pytest

from cachehelpers import RELAY_ARGS, Relay, Stats, start_cached, warm
from helpers import HOST, LONG_SCRIPT, REDIS_VERSION, acl_without, busy_threshold_args, wait_until
from juicefs_scripts import LOOKUP_V1, SHA_V1

pytestmark = pytest.mark.proxy_only


@pytest.mark.parametrize("mode", ["default", "optin"])
def test_own_connection_has_no_tracking_of_the_proxy(mode, proxy_factory, upstream):
    """In the default and optin tracking modes sidecache turns tracking on
    for its shared connections, redirected to its invalidation connection.
    A client's own connection is not one of them: the client's CLIENT
    TRACKING (BCAST, OPTOUT) works as on Redis, and GETREDIR and
    TRACKINGINFO show Redis's view of a connection with no tracking."""
    p, st = start_cached(proxy_factory, mode=mode)
    sessions = ([("HELLO", "3"), ("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "x")],
                [("CLIENT", "GETREDIR")],
                [("CLIENT", "TRACKINGINFO")],
                [("CLIENT", "TRACKING", "ON", "OPTOUT")],
                [("GET", "i1"), ("CLIENT", "GETREDIR")])
    for cmds in sessions:
        with upstream.raw(auth=True) as d, p.raw(auth=True) as c:
            for cmd in cmds:
                want, got = d.cmd(*cmd).raw, c.cmd(*cmd).raw
                if cmd[0] not in ("HELLO", "GET"):
                    assert got == want, (cmd, want, got)


def test_tracking_stays_active_when_ping_is_denied(proxy_factory, upstream):
    """The upstream user may not run PING: the invalidation connection's
    keep-alive PING gets NOPERM, which shows the link alive as a PONG does.
    Tracking must not drop (and the cache empty) at every keep-alive."""
    upstream.client().execute_command("ACL", "SETUSER", "trk", "reset", "on", ">pw", "~*", "&*", "+@all",
                                      "-ping")
    p, st = start_cached(proxy_factory, upstream_url="redis://trk:pw@127.0.0.1:%d" % upstream.port,
                         args=("--tracking-keepalive-ms", "100"))
    before = st.get()
    time.sleep(1.0)
    after = st.get()
    assert after["tracking_losses"] == before["tracking_losses"], after
    assert after["cache_flushes"] == before["cache_flushes"], after
    assert after["tracking_state"] == "active", after


def invalidation_clients(upstream):
    """Redis's CLIENT LIST lines of the clients named as sidecache names its
    invalidation connection."""
    text = upstream.client().execute_command("CLIENT", "LIST")
    text = text.decode() if isinstance(text, bytes) else text
    return [l for l in text.splitlines() if " name=sidecache-invalidation " in l]


def test_invalidation_connection_is_named_in_client_list(proxy_factory, upstream):
    """An operator reading CLIENT LIST on Redis tells sidecache's
    invalidation connection (subscribed: flag P) from the data connections."""
    start_cached(proxy_factory)
    lines = invalidation_clients(upstream)
    assert len(lines) == 1, lines
    assert " flags=P" in lines[0], lines


@pytest.mark.skipif(REDIS_VERSION < (7, 0), reason="CLIENT NO-EVICT is Redis 7's")
def test_invalidation_connection_is_not_evicted_by_maxmemory_clients(proxy_factory, upstream):
    """Redis 7's maxmemory-clients evicts the client using the most memory,
    and losing the invalidation connection empties the cache: it asks for
    CLIENT NO-EVICT (flag e)."""
    start_cached(proxy_factory)
    lines = invalidation_clients(upstream)
    flags = lines[0].split(" flags=")[1].split(" ")[0]
    assert "e" in flags, lines


def test_tracking_stays_active_when_setname_is_denied(proxy_factory, upstream):
    """The upstream user may not name its connection: the name is left out,
    and the cache works all the same."""
    upstream.client().execute_command("ACL", "SETUSER", "trk2", "reset", "on", ">pw", "~*", "&*", "+@all",
                                      *acl_without("setname"))
    p, st = start_cached(proxy_factory, upstream_url="redis://trk2:pw@127.0.0.1:%d" % upstream.port)
    assert st.get()["tracking_state"] == "active"
    assert invalidation_clients(upstream) == []


def test_invalidation_connect_that_never_completes_times_out(proxy_factory, upstream):
    """The invalidation connection's upstream takes no connection (its
    accept queue is full: SYNs go unanswered). The connect gives up after
    tracking-timeout-ms, says why, and tries again, instead of waiting for
    the kernel's two minutes with caching off and nothing said."""
    lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lst.bind((HOST, 0))
    lst.listen(0)
    port = lst.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):   # fill the accept queue; later SYNs are dropped
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.connect_ex((HOST, port))
            fillers.append(s)
        time.sleep(0.1)
        p = proxy_factory(args=("--tracking-upstream", "redis://%s:%d" % (HOST, port),
                                "--tracking-timeout-ms", "300"))
        st = Stats(p)
        info = wait_until(lambda: (lambda s: s if "connect timed out" in str(s.get("tracking_last_error", ""))
                                   else None)(st.get()),
                          timeout=5.0, interval=0.05, what="the connect to time out")
        assert info["tracking_state"] in ("backoff", "connecting"), info
        assert info["tracking_active"] == 0, info
    finally:
        for s in fillers:
            s.close()
        lst.close()


def test_optin_reads_that_redis_refuses_to_track_fill_nothing(redis_factory, proxy_factory):
    """tracking-mode optin: each cacheable read goes behind CLIENT CACHING
    YES. A user Redis refuses it (here: every command but client|caching)
    reads untracked: no invalidation would ever come for what such a read
    returns, so neither a GET nor an MGET may fill the cache from it. A
    write made directly on Redis must be seen by the next read."""
    up = redis_factory()
    d = up.client()
    d.execute_command("ACL", "SETUSER", "u", "on", ">pw", "~*", "&*", "+@all", *acl_without("caching"))
    d.execute_command("ACL", "SETUSER", "default", "off")
    up.password, up.username = "pw", "u"
    d = up.client()
    p, st = start_cached(proxy_factory, up=up, mode="optin", upstream_url="redis://u:pw@127.0.0.1:%d" % up.port)
    d.mset({"i80": "old", "i81": "old1", "i82": "old2"})
    with p.raw(auth=True) as c:
        for _ in range(3):
            assert c.cmd("GET", "i80").value == b"old"
            assert c.cmd("MGET", "i81", "i82").value == [b"old1", b"old2"]
        d.mset({"i80": "new", "i81": "new1", "i82": "new2"})
        time.sleep(0.2)  # an invalidation, had Redis sent one, is in by now
        assert c.cmd("GET", "i80").value == b"new"
        assert c.cmd("MGET", "i81", "i82").value == [b"new1", b"new2"]
    after = st.get()
    assert after["cache_hits"] == 0, after
    assert after["cache_flushes_caching_refused"] >= 1, after
    assert after["tracking_state"] == "active", after


def test_a_reconnect_during_a_busy_script_retries_soon(redis_factory, proxy_factory):
    """The invalidation connection is lost just before a script runs for
    1.5 s: its reconnect is answered BUSY. That is Redis busy, not Redis
    refusing tracking: tracking must come back soon after the script, not
    after the 30 s a refusal waits."""
    up = redis_factory(args=("--busy-reply-threshold" if REDIS_VERSION >= (7, 0) else "--lua-time-limit", "50"))
    p, st = start_cached(proxy_factory, up=up)
    d = up.client()
    assert d.execute_command("CLIENT", "KILL", "TYPE", "pubsub") == 1
    script = ("local t = redis.call('TIME'); local s = t[1] + t[2] / 1e6; "
              "while true do local n = redis.call('TIME'); if n[1] + n[2] / 1e6 - s > 1.5 then break end end "
              "return 1")
    up.client().eval(script, 0)
    wait_until(lambda: st.get()["tracking_state"] == "active", timeout=5,
               what="tracking back after the script (last error %r)" % st.get().get("tracking_last_error"))


def test_a_reconnect_at_maxclients_with_a_password_retries_soon(redis_factory, proxy_factory):
    """With a password the first reply on a new invalidation connection is
    AUTH's; Redis at maxclients answers it 'ERR max number of clients
    reached'. That is no refusal of the credentials: once a slot is free,
    tracking must come back within the normal back-off, not after 30 s."""
    up = redis_factory(requirepass="pw")
    p, st = start_cached(proxy_factory, up=up, upstream_url="redis://:pw@127.0.0.1:%d" % up.port)
    d = up.client()
    d.config_set("maxclients", len(d.client_list()) - 1)  # no slot once it is gone
    try:
        assert d.execute_command("CLIENT", "KILL", "TYPE", "pubsub") == 1
        wait_until(lambda: "max number of clients" in st.get().get("tracking_last_error", ""), timeout=3,
                   what="a reconnect to meet the limit")
    finally:
        d.config_set("maxclients", 10000)
    wait_until(lambda: st.get()["tracking_state"] == "active", timeout=5,
               what="tracking back once a slot is free (last error %r)" % st.get().get("tracking_last_error"))


@pytest.mark.parametrize("keys", ["~*", "~i* ~d*"])
def test_an_upstream_user_that_may_not_read_every_key_is_warned_of(proxy_factory, upstream, keys):
    """Redis versions that filter BCAST invalidations by the subscriber's
    key permissions (redis/redis#15371) would not send the invalidation
    connection the keys its user may not read: sidecache reads the user's
    ACL line and warns when it lacks ~*."""
    upstream.client().execute_command("ACL", "SETUSER", "trk3", "reset", "on", ">pw", *keys.split(), "&*", "+@all")
    p, st = start_cached(proxy_factory, upstream_url="redis://trk3:pw@127.0.0.1:%d" % upstream.port)
    wait_until(lambda: st.get()["acl_checks"] >= 1, timeout=3, what="the first ACL LIST")
    warned = "the upstream user trk3 may not read every key" in open(p.logpath).read()
    assert warned == (keys != "~*"), open(p.logpath).read()[-2000:]


class BusyScript:
    """A script write_answered_while_a_script_runs set going: its
    connection, and a PING sent directly to Redis just after the writer had
    its reply (went_busy)."""

    def __init__(self, conn, probe):
        self.conn, self.probe = conn, probe

    def went_busy(self):
        """Whether Redis answered the probe BUSY: it ran the script past
        busy-reply-threshold when the writer had its reply. Otherwise the
        script ran without a pause (a stalled machine can keep Redis from
        its hooks until the script's end): Redis wrote the write's
        invalidation before its reply, and the run tested nothing."""
        assert self.probe.read_frame(timeout=10).raw == b"+OK\r\n"  # the DEBUG SLEEP
        got = self.probe.read_frame(timeout=10).raw
        assert got.startswith(b"-BUSY ") or got == b"+PONG\r\n", got
        return got != b"+PONG\r\n"


def write_answered_while_a_script_runs(up, key, value, script_s=2.0, sleep_s=0.3, write_at_s=0.05,
                                       script=LONG_SCRIPT):
    """One pass of Redis's loop runs a SET (another mount's write) and then
    a script longer than busy-reply-threshold: a DEBUG SLEEP of sleep_s
    holds Redis while both arrive, the SET write_at_s into it. Past the
    threshold Redis answers clients while the script runs, the writer's +OK
    too, but writes the SET's BCAST invalidation only when the script ends.
    Returns, once the writer has its +OK, a BusyScript (the script's reply
    comes at its end)."""
    z, w, s = up.raw(auth=True), up.raw(auth=True), up.raw(auth=True)
    z.send_cmd("DEBUG", "SLEEP", str(sleep_s))
    time.sleep(write_at_s)
    w.send_cmd("SET", key, value)
    time.sleep(0.02)
    s.send_cmd("EVAL", script, 0, int(script_s * 1e6))
    got = w.read_frame(timeout=5).raw
    assert got == b"+OK\r\n", "the SET ran after the script began (%r): no write to test" % got
    z.send_cmd("PING")
    return BusyScript(s, z)


def read_through_the_script(c, script, seconds):
    """Reads i1 for `seconds` after the writer's reply: each read gets BUSY,
    as from Redis, or the new value; then the script's end, and the new
    value again. Returns script.went_busy()."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        got = c.cmd("GET", "i1").raw
        assert got != b"$3\r\nold\r\n", "a stale hit after the writer had its reply"
        assert got.startswith(b"-BUSY ") or got == b"$3\r\nnew\r\n", got
    assert script.conn.read_frame(timeout=10).raw == b":1\r\n"
    assert c.call("GET", "i1") == b"new"
    return script.went_busy()


def until_redis_went_busy(run, attempts=3):
    """Calls run() until it returns True (Redis went busy in it: a run that
    tested what it means to), at most `attempts` times."""
    for _ in range(attempts):
        if run():
            return
    pytest.fail("Redis never answered BUSY while the writer had its reply, in %d runs (no hook of the "
                "script came past busy-reply-threshold: a stalled machine can keep Redis from them)" % attempts)


# How the proxy learns of the script, and when the SET comes in the DEBUG
# SLEEP (keep-alive every 100 ms: a PING is sent within 200 ms of its start).
BUSY_CASES = {
    # the keep-alive PING is sent before or after the SET: answered with
    # the writer (PONG, in the pass before the script) or BUSY
    "keep-alive": dict(keepalive="100", sleep_s=0.3, write_at_s=0.05),
    # a PING is surely sent before the SET, and Redis runs it first in the
    # pass: its PONG comes with the writer's +OK, after more than
    # tracking-ping-hold-ms of silence; the next PING meets BUSY
    "keep-alive run before the write": dict(keepalive="100", sleep_s=0.6, write_at_s=0.3),
    # no keep-alive meanwhile: a read answered BUSY
    "a client's read": dict(keepalive="30000", sleep_s=0.3, write_at_s=0.05),
    # the same, the read a JuiceFS lookup (a script call, whose own errors
    # say nothing of Redis: this one's BUSY does, review-fills F3)
    "a client's lookup": dict(keepalive="30000", sleep_s=0.3, write_at_s=0.05),
}


@pytest.mark.parametrize("seen_by", list(BUSY_CASES))
def test_a_write_answered_during_a_busy_script_is_not_read_stale(redis_factory, proxy_factory, seen_by):
    """A write answered while a script runs past busy-reply-threshold
    (Redis answers BUSY meanwhile) has no invalidation until the script
    ends: the cached value must not be served after the writer has its
    reply. Redis's BUSY to a keep-alive PING, or to a client's read,
    empties the cache; a PING answered after a silence longer than
    tracking-ping-hold-ms holds hits until a fresh PING is answered (and
    reads past the hold go to Redis). For 50 ms after the writer's reply,
    every read gets BUSY, as from Redis, or the new value."""
    case = BUSY_CASES[seen_by]

    def run():
        up = redis_factory(args=busy_threshold_args(300))
        p, st = start_cached(proxy_factory, up=up, args=("--tracking-keepalive-ms", case["keepalive"]))
        up.client().set("i1", "old")
        c = p.raw(auth=True)
        assert warm(c, st, ("GET", "i1")) == [b"old"]
        if seen_by == "a client's lookup":
            c.cmd("SCRIPT", "LOAD", LOOKUP_V1)
        script = write_answered_while_a_script_runs(up, "i1", "new", sleep_s=case["sleep_s"],
                                                    write_at_s=case["write_at_s"])
        if seen_by == "a client's read":
            got = c.cmd("GET", "i99").raw
        elif seen_by == "a client's lookup":
            got = c.cmd("EVALSHA", SHA_V1, "2", "d99", "nothing").raw
        if not read_through_the_script(c, script, 0.05):
            return False
        if seen_by in ("a client's read", "a client's lookup"):
            assert got.startswith(b"-BUSY "), got
        # bcast: one flush dropped i1; the BUSY replies after it found
        # nothing to drop. Tracking per read (default, optin), Redis sent
        # i1's invalidation with the SET, before the script: nothing was
        # left for a BUSY to drop
        assert st.get()["cache_flushes_redis_busy"] == (1 if p.tracking_mode == "bcast" else 0)
        return True

    until_redis_went_busy(run)


# A script whose hooks (every 100k Lua instructions, where Redis answers
# clients while it runs) come ~150 ms apart: a SUNIONSTORE of 300,000
# members between them, for ARGV[1] microseconds.
SLOW_HOOK_SCRIPT = ("local s = redis.call('TIME') "
                    "while true do for i = 1, 200000 do end "
                    "redis.call('SUNIONSTORE', 'ztmp', 'zbig') "
                    "local n = redis.call('TIME') "
                    "if (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > tonumber(ARGV[1]) then break end end "
                    "return 1")


def test_a_write_answered_while_a_script_with_slow_hooks_runs_is_not_read_stale(redis_factory, proxy_factory):
    """As 'keep-alive run before the write' above, with hooks further apart
    than tracking-ping-hold-ms: the PING sent after the stall is answered
    (BUSY) only at the next hook, after the hold. Reads that come meanwhile
    go to Redis (BUSY), not to the cache (before: stale hits from 100 ms
    after the writer's reply on, in 2 runs of 3)."""
    def run():
        up = redis_factory(args=busy_threshold_args(300))
        d = up.client()
        for i in range(0, 300000, 10000):
            d.sadd("zbig", *range(i, i + 10000))
        p, st = start_cached(proxy_factory, up=up, args=("--tracking-keepalive-ms", "100"))
        d.set("i1", "old")
        c = p.raw(auth=True)
        assert warm(c, st, ("GET", "i1")) == [b"old"]
        script = write_answered_while_a_script_runs(up, "i1", "new", script_s=2.0, sleep_s=0.6, write_at_s=0.3,
                                                    script=SLOW_HOOK_SCRIPT)
        return read_through_the_script(c, script, 0.4)

    until_redis_went_busy(run)


def test_a_stall_pings_own_late_answer_ends_a_stall_too(redis_factory, proxy_factory):
    """The PING sent after a stall may itself be answered late: Redis read
    it, then a write, then a script past busy-reply-threshold, in one pass,
    and answers it with the writer's +OK at the script's first hook. That
    ends a stall as well: hits wait for yet another PING, which meets BUSY.
    The relay holds a keep-alive's PONG past the hold, and lets it go while
    Redis sleeps: the PING it sets off reaches Redis in the same pass as
    the write and the script. (Review of 543ac76: every read stale for
    the 0.5 s, when that answer was not taken for a stall.)"""
    up = redis_factory(args=busy_threshold_args(300))
    relay = Relay(up)
    try:
        p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS + ("--tracking-keepalive-ms", "3000"))
        up.client().set("i1", "old")
        c = p.raw(auth=True)
        assert warm(c, st, ("GET", "i1")) == [b"old"]
        relay.hold_tracking()
        pings = relay.tracking_pings()
        wait_until(lambda: relay.tracking_pings() > pings, timeout=6.0, what="a keep-alive, its PONG held")
        time.sleep(0.2)  # past tracking-ping-hold-ms
        stalls = st.get()["tracking_stalls"]  # (INFO goes to Redis too)
        z, w, s = up.raw(auth=True), up.raw(auth=True), up.raw(auth=True)
        z.send_cmd("DEBUG", "SLEEP", "1.0")
        time.sleep(0.05)
        relay.release_tracking()  # the late PONG: the stall's PING follows
        wait_until(lambda: relay.tracking_pings() > pings + 1, timeout=1.0, what="the stall's PING")
        time.sleep(0.1)
        w.send_cmd("SET", "i1", "new")
        time.sleep(0.02)
        s.send_cmd("EVAL", LONG_SCRIPT, 0, 2000000)
        assert w.read_frame(timeout=5).raw == b"+OK\r\n"
        z.send_cmd("PING")
        read_through_the_script(c, BusyScript(s, z), 0.5)
        assert st.get()["tracking_stalls"] >= stalls + 2
    finally:
        relay.close()

