"""
tests/integration/cachehelpers.py — helpers for the cache tests
(test_cache_*.py): reading the proxy's `# sidecache` INFO section, a
controllable TCP relay between the proxy and Redis, a deliberately stale
caching proxy, and the randomized linearizability checker.

Nothing here is a pytest fixture.

Stats
-----
    st = Stats(proxy)           # its own connection, on db 15 (own pool)
    st.get()                    # {'cache_hits': 3, 'tracking_state': 'active', ...}
    with st.delta() as d: ...   # d['cache_hits'] is the change over the block
    wait_tracking_active(proxy) # polls INFO until tracking_state:active

Relay (for the races and the losses that a real Redis will not produce on
demand)
-----
The proxy opens every connection to one upstream address, so the relay sits
in front of Redis for all of them, and tells the invalidation connection
(the one that subscribes to __redis__:invalidate) from the data connections. It parses
both directions, so it knows which command each reply answers, and can:
  - hold_reply(match): hold back the reply to the next command matching
    `match` (and, to keep order, every later reply on that connection) until
    released;
  - hold_request(match): keep the next matching command (and everything
    after it on that connection) from reaching Redis until released;
  - rewrite_reply(match, raw): replace the reply to the next matching command;
  - hold_tracking() / release_tracking(): hold back everything Redis sends
    on invalidation connections (existing and new ones): invalidation
    messages, PING answers, and the replies to a new connection's CLIENT
    TRACKING / SUBSCRIBE setup;
  - cut_tracking(): close the invalidation connections (both sides);
  - wait_invalidation(key): wait until an invalidation message naming key
    (or a null one, key=None) has been *forwarded* to the proxy.

FakeStaleProxy
--------------
A caching proxy in Python with no invalidation at all: it caches GET i* and
HGET d* replies forever and drops its own entry of a key only when a write
to that key passes through it. The randomized checker must find violations
against it (test_checker_detects_a_stale_cache).
"""
import collections
import os
import random
import socket
import threading
import time

import pytest

from helpers import HOST, Endpoint, Err, Incomplete, Push, RawClient, free_port, parse_frame, wait_until

# ---------------------------------------------------------------------------
# INFO # sidecache

SIDECACHE_FIELDS = (
    "cache_enabled", "tracking_state", "cache_hits", "cache_misses", "cache_fills",
    "cache_fills_rejected", "invalidation_messages", "invalidation_keys",
    "cache_invalidations", "cache_keys_purged", "cache_flushes",
    "cache_flushes_tracking_lost", "cache_flushes_null_invalidation",
    "cache_flushes_write_unknown_keys", "cache_flushes_failover", "cache_entries",
    "cache_pending_fills", "cache_reclaiming", "cache_used_bytes", "cache_max_bytes", "cache_evictions",
    "tracking_connects", "tracking_losses",
)


def parse_sidecache_section(text):
    """The key:value lines of the `# sidecache` section of an INFO reply
    (other sections ignored: Redis has its own connected_clients). Integer
    values become ints."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    out = {}
    inside = False
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#"):
            inside = line[1:].strip().lower() == "sidecache"
            continue
        if not inside or ":" not in line:
            continue
        k, v = line.split(":", 1)
        try:
            out[k] = int(v)
        except ValueError:
            out[k] = v
    return out


class Stats:
    """Reads the proxy's # sidecache section over a connection of its own.
    It SELECTs db 15 (default) so that its INFO travels in a pool (user, db,
    protocol) of its own, never queued behind a reply the relay holds."""

    def __init__(self, ep, db=15, timeout=10.0):
        self.ep = ep
        self.db = db
        self.timeout = timeout
        self.c = None

    def _conn(self):
        if self.c is None:
            c = self.ep.raw(auth=True, timeout=self.timeout)
            if self.db:
                f = c.cmd("SELECT", self.db)
                assert f.raw == b"+OK\r\n", f
            self.c = c
        return self.c

    def get(self, required=True):
        c = self._conn()
        v = c.call("INFO", "sidecache")
        assert not isinstance(v, Err), v
        d = parse_sidecache_section(v)
        if not d:  # a proxy that answers INFO <section> without ours
            d = parse_sidecache_section(c.call("INFO"))
        assert d or not required, "INFO has no # sidecache section"
        return d

    def __getitem__(self, field):
        return self.get().get(field, 0)

    def delta(self, *fields):
        return _Delta(self, fields)

    def close(self):
        if self.c is not None:
            self.c.close()
            self.c = None


class _Delta(dict):
    def __init__(self, st, fields):
        super().__init__()
        self.st = st
        self.fields = fields

    def __enter__(self):
        self.before = self.st.get()
        return self

    def __exit__(self, *exc):
        self.after = self.st.get()
        for k, v in self.after.items():
            if isinstance(v, int) and isinstance(self.before.get(k, 0), int):
                self[k] = v - self.before.get(k, 0)
        return False

    def __missing__(self, k):
        return 0


# The arguments that turn ACL LIST checks off: for tests of ACL changes made
# through sidecache, where a list read amid them (the first, or one their own
# change altered) would ask every permission again at a moment of its own.
NO_ACL_CHECKS = ("--acl-check-ms", "0")


def acl_checks_on(ep):
    """Whether ep is a sidecache that checks ACL LIST (acl-check-ms, on by
    default; the tests turn it off with NO_ACL_CHECKS only)."""
    if not getattr(ep, "is_proxy", False):
        return False
    a = ep.extra
    return not any(tuple(a[i:i + 2]) == NO_ACL_CHECKS for i in range(len(a) - 1))


def wait_first_acl_check(ep, timeout=10.0, stats=None):
    """Waits until the proxy has its first ACL LIST answer (acl_checks):
    that first list empties the cache and makes it ask every permission it
    learned again (what it learned before may already be refused by it), so
    a test that counts hits or the asks Redis sees starts after it. Nothing
    to wait for on a target that is not sidecache, or with the cache off
    (no checks then)."""
    if not acl_checks_on(ep):
        return
    st = stats or Stats(ep)
    try:
        if st.get(required=False).get("cache_enabled") == 1:
            wait_stat(st, "acl_checks", 1, timeout, what="the first ACL LIST answer")
    finally:
        if stats is None:
            st.close()


def wait_tracking_active(ep, timeout=10.0, stats=None):
    """Polls INFO until tracking_state is active (caching starts only then),
    and the first ACL LIST is answered (wait_first_acl_check). Returns the
    section."""
    st = stats or Stats(ep)
    deadline = time.monotonic() + timeout
    last = None
    try:
        while True:
            # (the section may be missing until the proxy has read COMMAND)
            last = st.get(required=False)
            if last.get("tracking_state") == "active":
                wait_first_acl_check(ep, max(0.1, deadline - time.monotonic()), stats=st)
                return last
            if time.monotonic() > deadline:
                raise AssertionError("tracking not active after %.1fs: %r" % (timeout, last))
            time.sleep(0.02)
    finally:
        if stats is None:
            st.close()


def wait_stat(st, field, minimum, timeout=3.0, what=None):
    """Polls until st[field] >= minimum; returns the section."""
    deadline = time.monotonic() + timeout
    while True:
        d = st.get()
        if d.get(field, 0) >= minimum:
            return d
        if time.monotonic() > deadline:
            raise AssertionError("%s: %s stayed at %s (< %s) for %.1fs; section %r"
                                 % (what or "wait_stat", field, d.get(field), minimum, timeout, d))
        time.sleep(0.01)


def wait_reclaimed(st, timeout, what):
    """Polls until cache_reclaiming is 0 (what large purges and flushes
    left is all freed); returns the section."""
    return wait_until(lambda: (lambda s: s if s["cache_reclaiming"] == 0 else None)(st.get()),
                      timeout=timeout, interval=0.01, what=what)


def value_of(frame):
    """A Frame's value for comparisons: errors compare by their text."""
    v = frame.value
    if isinstance(v, Err):
        return ("ERR", bytes(v))
    return v


# ---------------------------------------------------------------------------
# Incremental RESP splitting


class RespSplitter:
    """Feeds bytes, returns whole frames as (raw bytes, parsed value)."""

    def __init__(self):
        self.buf = bytearray()

    def feed(self, data):
        self.buf += data
        out = []
        pos = 0
        while pos < len(self.buf):
            try:
                v, end = parse_frame(self.buf, pos)
            except Incomplete:
                break
            out.append((bytes(self.buf[pos:end]), v))
            pos = end
        if pos:
            del self.buf[:pos]
        return out


def _upper(b):
    return bytes(b).upper() if isinstance(b, (bytes, bytearray)) else b


def cmd_matcher(*words):
    """A match function for hold_reply/rewrite_reply: the command's words
    equal `words` (the command name compared case-insensitively)."""
    want = [w.encode() if isinstance(w, str) else bytes(w) for w in words]

    def match(cmd):
        if not cmd or len(cmd) != len(want):
            return False
        if _upper(cmd[0]) != want[0].upper():
            return False
        return all(bytes(a) == b for a, b in zip(cmd[1:], want[1:]))

    match.words = want
    return match


# ---------------------------------------------------------------------------
# Relay


def _is_invalidation_setup(cmd):
    """The proxy's invalidation connection: it subscribes to the
    invalidation channel (every mode) and, in bcast mode, turns BCAST
    tracking on. (Data connections of the default and optin modes send
    CLIENT TRACKING ON REDIRECT too, but never BCAST nor this SUBSCRIBE.)"""
    name = _upper(cmd[0])
    if name == b"SUBSCRIBE":
        return any(bytes(a) == b"__redis__:invalidate" for a in cmd[1:])
    if name == b"CLIENT" and len(cmd) >= 2 and _upper(cmd[1]) == b"TRACKING":
        return any(_upper(a) == b"BCAST" for a in cmd[2:])
    return False


class _ArmedHold:
    """What hold_request() and hold_reply() share: .held is set once the
    matching command (or its reply) reached the relay and was held back;
    release() lets it and what queued behind it go, or disarms the hold if
    nothing matched yet."""

    what = ""           # for the timeout message
    relay_list = ""     # the relay's list of armed holds
    conn_release = ""   # the connection's method that lets a held one go

    def __init__(self, relay, match):
        self.relay = relay
        self.match = match
        self.conn = None
        self.released = False
        self.held = threading.Event()

    def wait(self, timeout=5.0):
        if not self.held.wait(timeout):
            raise AssertionError("the relay saw no %s %r within %.1fs"
                                 % (self.what, getattr(self.match, "words", self.match), timeout))
        return self

    def release(self):
        if self.released:
            return
        self.released = True
        if self.conn is not None:
            getattr(self.conn, self.conn_release)(self)
        else:
            with self.relay.lock:
                armed = getattr(self.relay, self.relay_list)
                if self in armed:
                    armed.remove(self)


class RequestHold(_ArmedHold):
    """One armed hold_request(): the matching command (and every later one on
    its connection) is kept from Redis until release(). .held is set once the
    command reached the relay."""

    what = "request"
    relay_list = "req_holds"
    conn_release = "release_req_hold"


class Hold(_ArmedHold):
    """One armed hold_reply(). .held is set when the matching reply reached
    the relay and was held back; .value is that reply."""

    what = "reply to"
    relay_list = "holds"
    conn_release = "release_hold"

    def __init__(self, relay, match):
        super().__init__(relay, match)
        self.triggered = False
        self.value = None
        self.raw = None


class Rewrite:
    def __init__(self, match, raw):
        self.match = match
        self.raw = raw
        self.done = threading.Event()
        self.original = None


class _RelayConn:
    def __init__(self, relay, csock, ssock):
        self.relay = relay
        self.csock = csock
        self.ssock = ssock
        self.lock = threading.Lock()
        self.tracking = False
        self.pending = collections.deque()
        self.holding = None
        self.held = []
        self.req_holding = None     # a RequestHold holding client->Redis bytes
        self.req_held = []
        self.slock = threading.Lock()   # serializes writes to Redis
        self.closed = False

    def start(self):
        for fn in (self._c2s, self._s2c):
            threading.Thread(target=fn, daemon=True).start()

    def close(self):
        with self.lock:
            if self.closed:
                return
            self.closed = True
        for s in (self.csock, self.ssock):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass
        with self.relay.lock:
            if self in self.relay.conns:
                self.relay.conns.remove(self)

    def _c2s(self):
        sp = RespSplitter()
        opaque = False          # could not parse: forward bytes as they come
        try:
            while True:
                data = self.csock.recv(1 << 16)
                if not data:
                    break
                if opaque:
                    with self.slock:
                        self.ssock.sendall(data)
                    continue
                try:
                    frames = sp.feed(data)
                except Exception:
                    opaque = True
                    with self.slock:
                        self.ssock.sendall(bytes(sp.buf))
                    continue
                out = bytearray()
                triggered = []
                with self.slock:
                    with self.lock:
                        for raw, v in frames:
                            cmd = v if isinstance(v, list) and v else None
                            if cmd is not None and _is_invalidation_setup(cmd):
                                self.tracking = True
                            self.pending.append(cmd)
                            if self.req_holding is None and cmd is not None:
                                h = self.relay._take_req_hold(cmd)
                                if h is not None:
                                    h.conn = self
                                    self.req_holding = h
                                    triggered.append(h)
                            if self.req_holding is not None:
                                self.req_held.append(raw)
                            else:
                                out += raw
                    if out:
                        self.ssock.sendall(out)
                for h in triggered:
                    h.held.set()
        except OSError:
            pass
        self.close()

    def release_req_hold(self, h):
        with self.slock:
            with self.lock:
                if self.req_holding is not h:
                    return
                data = b"".join(self.req_held)
                self.req_held = []
                self.req_holding = None
            if data and not self.closed:
                try:
                    self.ssock.sendall(data)
                except OSError:
                    pass

    def _s2c(self):
        sp = RespSplitter()
        try:
            while True:
                data = self.ssock.recv(1 << 16)
                if not data:
                    break
                frames = sp.feed(data)
                out = bytearray()
                forwarded_inval = []
                triggered = []
                with self.lock:
                    for raw, v in frames:
                        if self.tracking:
                            if self.relay.tracking_held:
                                self.held.append((raw, v))
                            else:
                                out += raw
                                forwarded_inval.append(v)
                            continue
                        cmd = None
                        if not isinstance(v, Push) and self.pending:
                            cmd = self.pending.popleft()
                        raw = self.relay._maybe_rewrite(cmd, raw, v)
                        if self.holding is None:
                            h = self.relay._take_hold(cmd)
                            if h is not None:
                                h.conn = self
                                h.value = v
                                h.raw = raw
                                self.holding = h
                                triggered.append(h)
                        if self.holding is not None:
                            self.held.append((raw, v))
                        else:
                            out += raw
                    if out:
                        self.csock.sendall(out)
                for v in forwarded_inval:
                    self.relay._note_push(v)
                for h in triggered:
                    h.held.set()
        except OSError:
            pass
        self.close()

    def release_hold(self, h):
        with self.lock:
            if self.holding is not h:
                return
            data = b"".join(raw for raw, _ in self.held)
            self.held = []
            self.holding = None
            if data and not self.closed:
                try:
                    self.csock.sendall(data)
                except OSError:
                    pass

    def release_tracking(self):
        vals = []
        with self.lock:
            data = b"".join(raw for raw, _ in self.held)
            vals = [v for _, v in self.held]
            self.held = []
            if data and not self.closed:
                try:
                    self.csock.sendall(data)
                except OSError:
                    pass
        for v in vals:
            self.relay._note_push(v)


class Relay(Endpoint):
    """A TCP relay in front of Redis; see the module docstring. Use it as the
    `up` of proxy_factory (it has .port, .password, .username)."""

    host = HOST
    username = None

    def __init__(self, upstream):
        self.upstream = upstream
        self.password = upstream.password
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.conns = []
        self.holds = []
        self.req_holds = []
        self.rewrites = []
        self.tracking_held = False
        self.invalidations = []  # (monotonic time, [keys] or None)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        for _ in range(20):
            self.port = free_port()
            try:
                self.sock.bind((HOST, self.port))
                break
            except OSError:
                continue
        self.sock.listen(64)
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped:
            try:
                cs, _ = self.sock.accept()
            except OSError:
                return
            try:
                ss = socket.create_connection((self.upstream.host, self.upstream.port), timeout=5)
            except OSError:
                cs.close()
                continue
            ss.settimeout(None)
            cs.settimeout(None)
            for s in (cs, ss):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c = _RelayConn(self, cs, ss)
            with self.lock:
                self.conns.append(c)
            c.start()

    def close(self):
        self.stopped = True
        try:
            self.sock.close()
        except OSError:
            pass
        for c in list(self.conns):
            c.close()

    # --- data connections

    def hold_reply(self, match):
        """Arms a hold for the reply to the next command (on any data
        connection) that match(cmd_words) accepts. Returns a Hold."""
        if isinstance(match, (tuple, list)):
            match = cmd_matcher(*match)
        h = Hold(self, match)
        with self.lock:
            self.holds.append(h)
        return h

    def hold_request(self, match):
        """Arms a hold of the next command (on any data connection) that
        match(cmd_words) accepts: it does not reach Redis, nor does anything
        after it on that connection, until release(). Returns a RequestHold."""
        if isinstance(match, (tuple, list)):
            match = cmd_matcher(*match)
        h = RequestHold(self, match)
        with self.lock:
            self.req_holds.append(h)
        return h

    def _take_req_hold(self, cmd):
        with self.lock:
            for h in self.req_holds:
                if not h.released and h.match(cmd):
                    self.req_holds.remove(h)
                    return h
        return None

    def rewrite_reply(self, match, raw):
        if isinstance(match, (tuple, list)):
            match = cmd_matcher(*match)
        rw = Rewrite(match, raw)
        with self.lock:
            self.rewrites.append(rw)
        return rw

    def _take_hold(self, cmd):
        if cmd is None:
            return None
        with self.lock:
            for h in self.holds:
                if not h.triggered and not h.released and h.match(cmd):
                    h.triggered = True
                    self.holds.remove(h)
                    return h
        return None

    def _maybe_rewrite(self, cmd, raw, v):
        if cmd is None:
            return raw
        with self.lock:
            for rw in self.rewrites:
                if rw.match(cmd):
                    self.rewrites.remove(rw)
                    rw.original = v
                    rw.done.set()
                    return rw.raw
        return raw

    def data_conns(self):
        with self.lock:
            return [c for c in self.conns if not c.tracking]

    # --- invalidation connections

    def tracking_conns(self):
        with self.lock:
            return [c for c in self.conns if c.tracking]

    def hold_tracking(self):
        with self.lock:
            self.tracking_held = True

    def release_tracking(self):
        with self.lock:
            self.tracking_held = False
        for c in self.tracking_conns():
            c.release_tracking()

    def tracking_pings(self):
        """PINGs the proxy has sent on its invalidation connections (its
        keep-alives), held or not."""
        with self.lock:
            conns = [c for c in self.conns if c.tracking]
        n = 0
        for c in conns:
            with c.lock:
                n += sum(1 for cmd in c.pending if cmd and _upper(cmd[0]) == b"PING")
        return n

    def cut_tracking(self):
        """Closes every invalidation connection, both sides. Returns how many."""
        cs = self.tracking_conns()
        for c in cs:
            c.close()
        return len(cs)

    def _note_push(self, v):
        if not isinstance(v, list) or len(v) < 3:
            return
        if _upper(v[0]) != b"MESSAGE" or bytes(v[1]) != b"__redis__:invalidate":
            return
        keys = v[2]
        with self.cond:
            self.invalidations.append((time.monotonic(),
                                       None if keys is None else [bytes(k) for k in keys]))
            self.cond.notify_all()

    def invalidation_count(self):
        with self.lock:
            return len(self.invalidations)

    def wait_invalidation(self, key, since=0, timeout=3.0):
        """Waits until an invalidation naming key (bytes/str; None = a null
        invalidation) was forwarded to the proxy, among those recorded after
        index `since`."""
        if isinstance(key, str):
            key = key.encode()
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for _t, keys in self.invalidations[since:]:
                    if key is None and keys is None:
                        return
                    if key is not None and keys is not None and key in keys:
                        return
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("no invalidation of %r forwarded within %.1fs (seen %r)"
                                         % (key, timeout, self.invalidations[since:][-5:]))
                self.cond.wait(left)


# ---------------------------------------------------------------------------
# A deliberately stale caching proxy


class FakeStaleProxy(Endpoint):
    """A caching proxy without invalidation (see the module docstring).
    Serves each client connection in its own thread, one command at a time."""

    host = HOST
    username = None

    def __init__(self, upstream):
        self.upstream = upstream
        self.password = upstream.password
        self.cache = {}
        self.lock = threading.Lock()
        self.hits = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.port = free_port()
        self.sock.bind((HOST, self.port))
        self.sock.listen(64)
        self.socks = []
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped:
            try:
                cs, _ = self.sock.accept()
            except OSError:
                return
            self.socks.append(cs)
            threading.Thread(target=self._serve, args=(cs,), daemon=True).start()

    def _serve(self, cs):
        try:
            up = RawClient(self.upstream.port, self.upstream.host, 10)
        except OSError:
            cs.close()
            return
        sp = RespSplitter()
        try:
            while True:
                data = cs.recv(1 << 16)
                if not data:
                    break
                for raw, v in sp.feed(data):
                    cs.sendall(self._handle(up, raw, v))
        except OSError:
            pass
        finally:
            up.close()
            cs.close()

    def _handle(self, up, raw, v):
        key = None
        if isinstance(v, list) and len(v) >= 2:
            name = _upper(v[0])
            if name == b"GET" and len(v) == 2 and bytes(v[1])[:1] == b"i":
                key = (b"GET", bytes(v[1]), b"")
            elif name == b"HGET" and len(v) == 3 and bytes(v[1])[:1] == b"d":
                key = (b"HGET", bytes(v[1]), bytes(v[2]))
        if key is not None:
            with self.lock:
                hit = self.cache.get(key)
                if hit is not None:
                    self.hits += 1
                    return hit
        up.send(raw)
        f = up.read_frame()
        if key is not None:
            if not isinstance(f.value, Err):
                with self.lock:
                    self.cache[key] = f.raw
        elif isinstance(v, list) and len(v) >= 2:
            # a write through this proxy drops its own entries of that key
            k = bytes(v[1])
            with self.lock:
                for ck in [ck for ck in self.cache if ck[1] == k]:
                    del self.cache[ck]
        return f.raw

    def close(self):
        self.stopped = True
        try:
            self.sock.close()
        except OSError:
            pass
        for s in self.socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass


# ---------------------------------------------------------------------------
# The randomized linearizability checker


class CheckResult:
    def __init__(self):
        self.reads = 0
        self.writes = 0
        self.violations = []
        self.errors = []
        self.per_object_writes = {}

    def summary(self, limit=10):
        lines = ["reads=%d writes=%d violations=%d errors=%d"
                 % (self.reads, self.writes, len(self.violations), len(self.errors))]
        lines += ["  " + v for v in self.violations[:limit]]
        lines += ["  error: " + e for e in self.errors[:limit]]
        return "\n".join(lines)


def run_linearizability_check(target, upstream, duration=10.0, delay_bound=1.0,
                              direct_writers=2, proxy_writers=2, readers=4, seed=None,
                              key_base=9900):
    """Randomized check of what the proxy serves against a history of writes.

    Objects: four inode keys (GET i<n>) and four dentry fields (HGET d<n> f),
    each holding a decimal version number. Every object starts at version 0,
    written directly on Redis before the run.

    Writers: `direct_writers` threads write directly on Redis (another node,
    as far as the proxy knows), `proxy_writers` threads write through the
    target. A per-object lock serializes the writes of one object, so its
    versions 0, 1, 2, ... are applied in that order; each write records
    (version, t_start, t_ack): sent at t_start, acknowledged at t_ack, so it
    took effect at some unknown moment in [t_start, t_ack]. Objects of the
    second half are written only directly, never through the target: a cache
    that does not act on Redis's invalidations keeps them stale forever.

    Readers: `readers` threads read through the target, a few times in a row
    per object (so that reads hit the cache), recording (object, version,
    t_start, t_end). A proxy writer, right after each of its writes, reads the
    object back on the same connection.

    Every read is then judged (strictly, but never stricter than the clock
    allows: every timestamp is taken on the permissive side of what it
    brackets):
      - it returned a version that was written (an integer 0..last);
      - the version was not from the future: its write had started before
        the read ended (t_start(v) <= read_end);
      - it was current at some moment in [read_start - delay_bound,
        read_end]: the next version v+1, if any, was not yet acknowledged
        delay_bound seconds before the read began (t_ack(v+1) >=
        read_start - delay_bound). A value older than that is a stale read
        beyond the staleness bound (C10), which is what a lost or ignored
        invalidation, a racy fill (C3) or a missed flush produces;
      - read-your-writes (C1): a read by a proxy writer right after its own
        write of version w returns a version >= w.
    Returns a CheckResult; the caller asserts on .violations.
    """
    rng = random.Random(seed)
    objects = []
    for i in range(4):
        objects.append(("GET", "i%d" % (key_base + i), None))
    for i in range(2):
        for f in ("fa", "fb"):
            objects.append(("HGET", "d%d" % (key_base + i), f))
    # reorder so that each half mixes GET and HGET objects
    objects = [objects[0], objects[4], objects[1], objects[5],
               objects[2], objects[6], objects[3], objects[7]]
    shared = objects[:4]        # written directly and through the target
    nobj = len(objects)
    locks = [threading.Lock() for _ in objects]
    history = [[] for _ in objects]   # per object: [(version, t_start, t_ack)]
    reads = []                        # (obj index, version or raw, rs, re, min_version, who)
    reads_lock = threading.Lock()
    res = CheckResult()

    def write_cmd(oi, version):
        kind, key, field = objects[oi]
        if kind == "GET":
            return ("SET", key, str(version))
        return ("HSET", key, field, str(version))

    def read_cmd(oi):
        kind, key, field = objects[oi]
        if kind == "GET":
            return ("GET", key)
        return ("HGET", key, field)

    init = upstream.raw(auth=True)
    for oi in range(nobj):
        init.cmd("DEL", objects[oi][1])
    for oi in range(nobj):
        t = time.monotonic()
        f = init.cmd(*write_cmd(oi, 0))
        assert not isinstance(f.value, Err), f
        history[oi].append((0, t, time.monotonic()))
    init.close()

    stop_at = time.monotonic() + duration
    errors = []

    def decode(v):
        if isinstance(v, (bytes, bytearray)):
            try:
                return int(v)
            except ValueError:
                return bytes(v)
        return v

    def writer(conn, via_target, wseed):
        r = random.Random(wseed)
        choices = list(range(len(shared))) if via_target else list(range(nobj))
        try:
            while time.monotonic() < stop_at:
                oi = r.choice(choices)
                with locks[oi]:
                    v = history[oi][-1][0] + 1
                    t0 = time.monotonic()
                    f = conn.cmd(*write_cmd(oi, v))
                    t1 = time.monotonic()
                    if isinstance(f.value, Err):
                        errors.append("write %r: %r" % (write_cmd(oi, v), f.value))
                        return
                    history[oi].append((v, t0, t1))
                if via_target:
                    rs = time.monotonic()
                    f = conn.cmd(*read_cmd(oi))
                    re_ = time.monotonic()
                    with reads_lock:
                        reads.append((oi, decode(f.value), rs, re_, v, "own-write"))
                time.sleep(r.uniform(0.002, 0.03))
        except Exception as e:  # recorded, fails the check
            errors.append("writer: %r" % e)

    def reader(conn, rseed):
        r = random.Random(rseed)
        try:
            while time.monotonic() < stop_at:
                oi = r.randrange(nobj)
                for _ in range(r.randint(1, 8)):
                    rs = time.monotonic()
                    f = conn.cmd(*read_cmd(oi))
                    re_ = time.monotonic()
                    with reads_lock:
                        reads.append((oi, decode(f.value), rs, re_, None, "reader"))
        except Exception as e:
            errors.append("reader: %r" % e)

    threads = []
    conns = []
    for i in range(direct_writers):
        c = upstream.raw(auth=True)
        conns.append(c)
        threads.append(threading.Thread(target=writer, args=(c, False, rng.random())))
    for i in range(proxy_writers):
        c = target.raw(auth=True)
        conns.append(c)
        threads.append(threading.Thread(target=writer, args=(c, True, rng.random())))
    for i in range(readers):
        c = target.raw(auth=True)
        conns.append(c)
        threads.append(threading.Thread(target=reader, args=(c, rng.random())))
    for t in threads:
        t.daemon = True
        t.start()
    for t in threads:
        t.join(duration + 30)
    for c in conns:
        c.close()

    res.errors = errors
    res.reads = len(reads)
    res.writes = sum(len(h) - 1 for h in history)
    res.per_object_writes = {"%s %s%s" % (o[0], o[1], " " + o[2] if o[2] else ""): len(h) - 1
                             for o, h in zip(objects, history)}
    for oi, v, rs, re_, minv, who in reads:
        h = history[oi]
        name = " ".join(x for x in read_cmd(oi))
        if not isinstance(v, int) or v < 0 or v >= len(h):
            res.violations.append("%s (%s) read at [%.3f, %.3f] returned %r: never written"
                                  % (name, who, rs, re_, v))
            continue
        _, ts_v, _ = h[v]
        if ts_v > re_:
            res.violations.append("%s (%s) returned version %d before its write began "
                                  "(read ended %.3f, write began %.3f)"
                                  % (name, who, v, re_, ts_v))
        if v + 1 < len(h):
            _, _, ta_next = h[v + 1]
            if ta_next < rs - delay_bound:
                res.violations.append(
                    "%s (%s) returned version %d at [%.3f, %.3f], but version %d was "
                    "acknowledged at %.3f, %.3fs before the read began (bound %.3fs)"
                    % (name, who, v, rs, re_, v + 1, ta_next, rs - ta_next, delay_bound))
        if minv is not None and v < minv:
            res.violations.append("%s (%s) returned version %d after this connection's own "
                                  "write of version %d (read-your-writes)"
                                  % (name, who, v, minv))
    return res


# ---------------------------------------------------------------------------
# Shared by the test_cache_*.py modules (they import these names)

# A proxy behind the relay must not give up on its invalidation connection
# while a test holds that connection's replies back on purpose, nor send a
# keep-alive PING then: reads would wait for its answer and then go to
# Redis (tracking-ping-hold-ms), and a hit the test expects would not come.
# Tests that need keep-alives give their own --tracking-keepalive-ms.
RELAY_ARGS = ("--tracking-timeout-ms", "20000", "--tracking-keepalive-ms", "600000")


@pytest.fixture
def relay(upstream, proxy_factory):
    """A Relay in front of `upstream` (pass it as proxy_factory's `up`). It is
    torn down before the proxies are stopped, so a reply a failed test left
    held cannot keep a proxy from stopping."""
    r = Relay(upstream)
    yield r
    r.close()


MODES = ("bcast", "default", "optin")


def suite_tracking_mode():
    """The tracking mode SIDECACHE_ARGS gives every proxy of the run
    (conftest.py), for tests that take the default: "bcast" unless it says
    otherwise."""
    args = os.environ.get("SIDECACHE_ARGS", "").split()
    modes = [args[i + 1] for i in range(len(args) - 1) if args[i] == "--tracking-mode"]
    return modes[-1] if modes else "bcast"


def start_cached(proxy_factory, up=None, args=(), mode=None, upstream_url=None):
    """A caching proxy with tracking confirmed, in tracking-mode `mode`
    (None: the default, bcast). Returns (proxy, stats)."""
    args = tuple(args)
    if mode is not None:
        args += ("--tracking-mode", mode)
    p = proxy_factory(up=up, args=args, upstream_url=upstream_url)
    st = Stats(p)
    info = wait_tracking_active(p, stats=st)
    # the mode in effect (SIDECACHE_ARGS may set one for tests that do not)
    p.tracking_mode = info.get("tracking_mode", mode or "bcast")
    if mode is not None:
        assert p.tracking_mode == mode, info
    return p, st


def _bcast(st):
    return getattr(st.ep, "tracking_mode", "bcast") == "bcast"


def caches_lookups(st):
    """Lookups are answered from the cache in bcast only (README, Tracking
    modes): False when SIDECACHE_ARGS runs the suite in another mode."""
    return _bcast(st)


def warm(c, st, *reads, attempts=5):
    """Reads each command on the proxy connection c until a read is served
    from the cache (cache_hits moved by exactly 1), and asserts that happens
    within `attempts` reads. (The first read may legitimately not fill: an
    invalidation of a write made just before can reach the proxy while that
    read is in flight, and then its reply must not fill - C3.) Returns the
    cached values, in order."""
    out = []
    for rd in reads:
        prev = c.cmd(*rd)
        for _ in range(attempts):
            with st.delta() as d:
                f = c.cmd(*rd)
            if d["cache_hits"] == 1:
                break
            prev = f
        else:
            raise AssertionError("warming %r: no read of %d was a cache hit (last deltas %r)"
                                 % (rd, attempts, dict(d)))
        assert value_of(prev) == value_of(f), (rd, prev, f)
        out.append(value_of(f))
    return out


def confirm_cached(c, st, *reads):
    """Asserts that each read is served from the cache right now (use it
    after hold_tracking(): nothing can purge the entries behind the test's
    back any more). Returns the values."""
    out = []
    for rd in reads:
        with st.delta() as d:
            f = c.cmd(*rd)
        assert d["cache_hits"] == 1, "%r is not cached any more: %r" % (rd, dict(d))
        out.append(value_of(f))
    return out


def direct_read(server, cmd, db=0):
    """The reply Redis itself gives now (value_of form)."""
    with server.raw(auth=True) as c:
        if db:
            c.cmd("SELECT", db)
        return value_of(c.cmd(*cmd))


def settle(st, write, n=1, timeout=3.0):
    """Runs write() (a direct write of n cacheable keys) and waits until the
    proxy has counted its invalidations, so that they cannot be mistaken
    for a later one."""
    if not _bcast(st):
        # default/optin: Redis invalidates only keys a tracked connection
        # read; the tests write their keys before any read, so none comes
        write()
        return
    before = st["invalidation_keys"]
    write()
    wait_stat(st, "invalidation_keys", before + n, timeout=timeout, what="settle")


def tracked_key(k):
    """Is k under the juicefs profile's tracking prefixes (i, d)?"""
    k = k.encode() if isinstance(k, str) else bytes(k)
    return k[:1] in (b"i", b"d")


def relay_settle(relay, st, base_relay, base_keys, keys, timeout=3.0):
    """After direct writes of `keys`: waits until the relay has forwarded an
    invalidation of each (recorded after index base_relay) and the proxy has
    counted every key forwarded since (its invalidation_keys was base_keys).
    Outside bcast mode nothing is waited for (see settle)."""
    if not _bcast(st):
        return
    for k in keys:
        relay.wait_invalidation(k, since=base_relay, timeout=timeout)
    with relay.lock:
        n = sum(len(ks) for _, ks in relay.invalidations[base_relay:] if ks is not None)
    wait_stat(st, "invalidation_keys", base_keys + n, timeout=timeout, what="relay_settle")


def make_tracked(c, st, key="i9399"):
    """Makes sure the upstream connection behind proxy connection c is one
    whose reads may fill (in the default and optin modes a connection fills
    only once its CLIENT TRACKING is confirmed): warms a key of its own on it."""
    warm(c, st, ("GET", key), attempts=20)
