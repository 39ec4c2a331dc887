"""
tests/integration/faulthelpers.py — network faults between sidecache and
Redis (toxiproxy), the proxy's /metrics, its memory, and a workload that
checks every reply (test_faults.py, test_slow_clients.py).

Nothing here but `toxiproxy_bin` and `toxiproxy` is a pytest fixture (the
test modules import those two).

Toxiproxy
---------
bench/toxiproxy (Shopify's toxiproxy-server plus a microsecond latency
toxic) is built with Go once per session into a temporary directory
(TOXIPROXY_BIN=/path/to/toxiproxy-server uses a ready one). Without Go the
tests that need it are skipped, saying so.

    tp = Toxiproxy(binary, workdir).start()      # API on a free port
    data = tp.create("data", redis.port)         # a Link: .port to connect to
    name = data.toxic("latency", stream="downstream", latency=100)
    data.remove(name); data.clear()              # toxics
    data.disable(); data.enable()                # down: closes every connection, refuses new ones
    tp.reset()                                   # every link enabled, no toxics

Toxic types used (toxiproxy 2.5): latency {latency, jitter} (ms),
reset_peer {timeout} (RST once data flows), timeout {timeout} (data dropped,
the connection closed after timeout ms, never with 0; removing the toxic
closes the connection), slicer {average_size, size_variation, delay (µs)},
bandwidth {rate} (KB/s). `stream` is "upstream" (towards Redis) or
"downstream" (towards sidecache); Link.toxic_both() sets one on each.

Metrics
-------
The proxy's Prometheus endpoint (--metrics-port) answers without going to
Redis, so the counters stay readable while the data path is down (INFO
would travel through it):

    m = Metrics(port); m.get() -> {'cache_hits': 3, 'tracking_state': 'active', ...}

Workload
--------
Threads that each run a loop of writes and reads through the proxy on their
own connection, and record every outcome: acknowledged writes (checked on
Redis afterwards), errors, requests left without any answer (a hang), and
connections the proxy closed. See Workload.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from helpers import HOST, ConnectionClosed, Err, _die_with_parent, encode, free_port, tail

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
TOXIPROXY_SRC = os.path.join(REPO, "bench", "toxiproxy")


# ---------------------------------------------------------------------------
# Building toxiproxy


def _find_go():
    go = shutil.which("go")
    if go:
        return go
    for cand in ("/usr/local/go/bin/go", "/usr/lib/go/bin/go"):
        if os.access(cand, os.X_OK):
            return cand
    return None


def build_toxiproxy(dest_dir):
    """Builds bench/toxiproxy into dest_dir; returns the binary's path.
    Skips (pytest.skip) when Go is missing or the build fails."""
    ready = os.environ.get("TOXIPROXY_BIN")
    if ready:
        if not os.access(ready, os.X_OK):
            pytest.fail("TOXIPROXY_BIN=%s is not an executable" % ready, pytrace=False)
        return ready
    go = _find_go()
    if go is None:
        pytest.skip("toxiproxy tests need Go to build bench/toxiproxy (no `go` in PATH "
                    "or /usr/local/go/bin); set TOXIPROXY_BIN to a built toxiproxy-server")
    out = os.path.join(str(dest_dir), "toxiproxy-server")
    log = os.path.join(str(dest_dir), "build.log")
    with open(log, "wb") as f:
        rc = subprocess.call([go, "build", "-o", out, "."], cwd=TOXIPROXY_SRC,
                             stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if rc != 0 or not os.access(out, os.X_OK):
        pytest.skip("cannot build toxiproxy (cd bench/toxiproxy && go build) - exit %s:\n%s"
                    % (rc, tail(log, 2000)))
    return out


@pytest.fixture(scope="session")
def toxiproxy_bin(tmp_path_factory):
    return build_toxiproxy(tmp_path_factory.mktemp("toxiproxy-build"))


@pytest.fixture
def toxiproxy(toxiproxy_bin, tmp_path_factory):
    """A toxiproxy-server of the test's own, killed at the end."""
    tp = Toxiproxy(toxiproxy_bin, tmp_path_factory.mktemp("toxiproxy"))
    tp.start()
    yield tp
    tp.stop()


# ---------------------------------------------------------------------------
# Toxiproxy's HTTP API


class ToxiproxyError(Exception):
    pass


class Toxiproxy:
    def __init__(self, binary, workdir):
        self.binary = binary
        self.workdir = str(workdir)
        self.api_port = None
        self.proc = None
        self.logpath = os.path.join(self.workdir, "toxiproxy.log")
        self.links = {}

    def start(self, timeout=10.0):
        self.api_port = free_port()
        log = open(self.logpath, "wb")
        try:
            self.proc = subprocess.Popen([self.binary, "-host", HOST, "-port", str(self.api_port)],
                                         stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, cwd=self.workdir,
                                         preexec_fn=_die_with_parent)
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("toxiproxy-server exited with %s:\n%s"
                                   % (self.proc.returncode, tail(self.logpath)))
            try:
                self.api("GET", "/version")
                return self
            except (OSError, ToxiproxyError):
                if time.monotonic() > deadline:
                    raise RuntimeError("toxiproxy API not up on %d:\n%s"
                                       % (self.api_port, tail(self.logpath)))
                time.sleep(0.02)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def api(self, method, path, body=None, timeout=10.0):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request("http://%s:%d%s" % (HOST, self.api_port, path),
                                     data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            raise ToxiproxyError("%s %s -> %s %s" % (method, path, e.code,
                                                     e.read().decode("utf-8", "replace")))
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")

    def create(self, name, upstream_port, upstream_host=HOST):
        """A proxy `name` on a free loopback port in front of upstream_port."""
        port = free_port()
        self.api("POST", "/proxies", {"name": name, "listen": "%s:%d" % (HOST, port),
                                      "upstream": "%s:%d" % (upstream_host, upstream_port),
                                      "enabled": True})
        link = Link(self, name, port, upstream_host, upstream_port)
        self.links[name] = link
        return link

    def reset(self):
        """Every proxy enabled again, every toxic removed."""
        if self.proc and self.proc.poll() is None:
            self.api("POST", "/reset")

    def describe(self):
        return "toxiproxy api %s:\n%s" % (self.api_port, tail(self.logpath, 2000))


class Link:
    """One toxiproxy proxy: sidecache connects to .port, toxiproxy to Redis."""

    def __init__(self, tp, name, port, upstream_host, upstream_port):
        self.tp = tp
        self.name = name
        self.port = port
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self._n = 0

    @property
    def url(self):
        return "redis://%s:%d" % (HOST, self.port)

    def toxic(self, type_, stream="downstream", name=None, toxicity=1.0, **attributes):
        self._n += 1
        name = name or "%s_%s_%d" % (type_, stream, self._n)
        self.tp.api("POST", "/proxies/%s/toxics" % self.name,
                    {"name": name, "type": type_, "stream": stream, "toxicity": toxicity,
                     "attributes": attributes})
        return name

    def toxic_both(self, type_, **attributes):
        """The same toxic on both directions; returns both names."""
        return [self.toxic(type_, stream="upstream", **attributes),
                self.toxic(type_, stream="downstream", **attributes)]

    def remove(self, names):
        if isinstance(names, str):
            names = [names]
        for n in names:
            self.tp.api("DELETE", "/proxies/%s/toxics/%s" % (self.name, n))

    def toxics(self):
        return self.tp.api("GET", "/proxies/%s/toxics" % self.name) or []

    def clear(self):
        for t in self.toxics():
            self.remove(t["name"])

    def recreate(self):
        """Deletes this proxy and creates it again on the same port with no
        toxic: every connection through it dropped at once. (Removing a
        bandwidth toxic that holds data for a connection sidecache already
        closed blocks toxiproxy's API for 5 s; deleting the proxy does not.)"""
        self.tp.api("DELETE", "/proxies/%s" % self.name)
        self.tp.api("POST", "/proxies", {"name": self.name, "listen": "%s:%d" % (HOST, self.port),
                                         "upstream": "%s:%d" % (self.upstream_host, self.upstream_port),
                                         "enabled": True})

    def set_enabled(self, on):
        self.tp.api("POST", "/proxies/%s" % self.name, {"enabled": bool(on)})

    def disable(self):
        self.set_enabled(False)

    def enable(self):
        self.set_enabled(True)


# ---------------------------------------------------------------------------
# Faults: each returns an undo function


FAULTS = ("latency", "down", "reset_peer", "timeout", "slicer", "bandwidth")


def apply_fault(link, fault, **kw):
    """Puts `fault` on link; returns a function that takes it away.

    latency:    kw latency (ms, default 100) on each direction
    down:       the proxy disabled (connections closed, new ones refused)
    reset_peer: RST as soon as data flows (kw timeout ms, default 0), both directions
    timeout:    half-open: all data dropped, connections kept open (kw timeout=0);
                removing it closes the connections
    slicer:     1-byte fragments both ways (kw delay µs between them, default 0)
    bandwidth:  kw rate KB/s (default 16) towards sidecache, and towards Redis
    """
    if fault == "latency":
        names = link.toxic_both("latency", latency=kw.get("latency", 100),
                                jitter=kw.get("jitter", 0))
    elif fault == "down":
        link.disable()
        return link.enable
    elif fault == "reset_peer":
        names = link.toxic_both("reset_peer", timeout=kw.get("timeout", 0))
    elif fault == "timeout":
        names = link.toxic_both("timeout", timeout=kw.get("timeout", 0))
    elif fault == "slicer":
        names = link.toxic_both("slicer", average_size=1, size_variation=0,
                                delay=kw.get("delay", 0))
    elif fault == "bandwidth":
        names = link.toxic_both("bandwidth", rate=kw.get("rate", 16))
    else:
        raise ValueError(fault)
    return lambda: link.remove(names)


# ---------------------------------------------------------------------------
# /metrics

_METRIC = re.compile(r"^sidecache_([a-z_0-9]+)(\{[^}]*\})?\s+(\S+)$")


class Metrics:
    """The proxy's counters from its /metrics endpoint (local: no Redis)."""

    def __init__(self, port):
        self.port = port

    def get(self):
        with urllib.request.urlopen("http://%s:%d/metrics" % (HOST, self.port), timeout=5) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            m = _METRIC.match(line.strip())
            if not m:
                continue
            name, labels, value = m.groups()
            if name == "info" and labels:
                for k, v in re.findall(r'(\w+)="([^"]*)"', labels):
                    out[k] = v
                continue
            if labels:
                continue
            try:
                out[name] = int(value)
            except ValueError:
                out[name] = float(value)
        return out

    def __getitem__(self, k):
        return self.get().get(k, 0)

    def wait(self, pred, timeout=5.0, what="metrics condition", interval=0.01):
        """Polls until pred(section) is true; returns that section."""
        deadline = time.monotonic() + timeout
        while True:
            d = self.get()
            if pred(d):
                return d
            if time.monotonic() > deadline:
                raise AssertionError("timed out after %.1fs waiting for %s; metrics %s"
                                     % (timeout, what, brief(d)))
            time.sleep(interval)

    def wait_active(self, timeout=8.0):
        return self.wait(lambda d: d.get("tracking_state") == "active", timeout,
                         "tracking_state active")

    def wait_not_active(self, timeout=5.0):
        return self.wait(lambda d: d.get("tracking_state") != "active", timeout,
                         "tracking_state to leave active")


BRIEF_FIELDS = ("tracking_state", "cache_hits", "cache_misses", "cache_fills", "cache_entries",
                "cache_flushes", "cache_flushes_tracking_lost", "invalidation_keys",
                "tracking_connects", "tracking_losses", "tracking_pings_sent",
                "tracking_pings_answered", "tracking_pings_lost", "connected_clients",
                "upstream_connections")


def brief(d):
    return ", ".join("%s=%s" % (k, d.get(k)) for k in BRIEF_FIELDS if k in d)


# ---------------------------------------------------------------------------
# Memory of a process


def proc_status(pid):
    """VmRSS and VmHWM of pid in bytes ({} if it is gone)."""
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM"):
                    out[k] = int(v.split()[0]) * 1024
    except OSError:
        pass
    return out


class RssSampler:
    """Samples VmRSS of pid every `interval` s in a thread; .peak is the
    highest sample, .hwm the kernel's VmHWM at stop()."""

    def __init__(self, pid, interval=0.005):
        self.pid = pid
        self.interval = interval
        self.peak = 0
        self.hwm = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            s = proc_status(self.pid)
            self.peak = max(self.peak, s.get("VmRSS", 0))
            time.sleep(self.interval)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(5)
        s = proc_status(self.pid)
        self.peak = max(self.peak, s.get("VmRSS", 0))
        self.hwm = s.get("VmHWM", 0)
        return False


def mb(n):
    return n / (1024.0 * 1024.0)


# ---------------------------------------------------------------------------
# Small client helpers


PROXY_ERRORS = ("ERR sidecache", "MASTERDOWN sidecache", "CLUSTERDOWN sidecache")


def is_proxy_error(v):
    """An error the proxy makes itself for a lost upstream connection (ERR:
    the request may have run) or an unreachable one (MASTERDOWN, or
    CLUSTERDOWN in front of a cluster: nothing ran)."""
    return isinstance(v, Err) and bytes(v).startswith(tuple(e.encode() for e in PROXY_ERRORS))


def direct_get(server, key):
    with server.raw(auth=True) as c:
        return c.call("GET", key)


def direct_set(server, key, value):
    with server.raw(auth=True) as c:
        f = c.cmd("SET", key, value)
        assert f.raw == b"+OK\r\n", f


def until_ok(ep, cmd, timeout=5.0, interval=0.05):
    """Sends cmd on fresh connections until it gets a non-error reply (the
    proxy recovered); returns (value, seconds it took)."""
    t0 = time.monotonic()
    last = None
    while True:
        try:
            with ep.raw(auth=True, timeout=2.0) as c:
                v = c.call(*cmd)
            if not isinstance(v, Err):
                return v, time.monotonic() - t0
            last = v
        except (OSError, ConnectionClosed) as e:
            last = e
        if time.monotonic() - t0 > timeout:
            raise AssertionError("%r still failing %.1fs later: %r" % (cmd, timeout, last))
        time.sleep(interval)


# ---------------------------------------------------------------------------
# Workload


_running = []


def stop_workloads():
    """Stops every Workload still running (a test that failed half-way)."""
    for wl in list(_running):
        wl.stop()


class Workload:
    """`nthreads` threads, each on its own proxy connection, run until
    stop():

      SET w:<tag>:<t>:<n> <n>           a fresh key per write: acknowledged
                                         (+OK) ones must be in Redis afterwards
      INCR c:<tag>:<t>                   Redis's final count must lie between
                                         the acknowledged INCRs and the sent ones
      SET <own cacheable key> <n>, then GET it (read-your-writes through the
                                         cache: never an older acknowledged value)
      a pipeline of 3 (SET, GET, INCR)   every request of a pipeline answered
      8 pipelined SETs                   batched into MULTI/EXEC by the proxy;
                                         each reply must be its own write's
      MULTI, SET a, SET b, EXEC          afterwards Redis has both or neither

    Each request must get an answer (a reply or an error) within
    reply_timeout: a request without one is recorded in .hangs and that
    thread stops. A connection the proxy closes is recorded in .closed and
    replaced. Errors are recorded with their text (.errors)."""

    def __init__(self, ep, tag, nthreads=3, reply_timeout=5.0, own_key_base=7100, pause=0.003):
        self.ep = ep
        self.tag = tag
        self.nthreads = nthreads
        self.reply_timeout = reply_timeout
        self.own_key_base = own_key_base
        self.pause = pause
        self.lock = threading.Lock()
        self.stop_ev = threading.Event()
        self.acked = {}          # key -> value
        self.incr_acked = [0] * nthreads
        self.incr_sent = [0] * nthreads
        self.errors = []         # (time, text)
        self.hangs = []
        self.closed = []
        self.ryw = []            # read-your-writes violations
        self.txns = []           # (key a, key b, value): both set or neither
        self.txn_failures = []   # the four replies of a failed transaction
        self.ops = 0
        self.oks = []            # (time) of every successful reply
        self.threads = []

    def own_key(self, t):
        return "i%d" % (self.own_key_base + t)

    def start(self):
        _running.append(self)
        for t in range(self.nthreads):
            th = threading.Thread(target=self._run, args=(t,), daemon=True)
            self.threads.append(th)
            th.start()
        return self

    def stop(self):
        self.stop_ev.set()
        for th in self.threads:
            th.join(self.reply_timeout + 5)
        if self in _running:
            _running.remove(self)

    def _record(self, f, what):
        now = time.monotonic()
        with self.lock:
            self.ops += 1
            if isinstance(f.value, Err):
                self.errors.append((now, "%s: %s" % (what, f.value.text)))
                return False
            self.oks.append(now)
        return True

    def _run(self, t):
        c = None
        n = 0
        last_own = None    # last acknowledged value of the own key
        while not self.stop_ev.is_set():
            try:
                if c is None:
                    c = self.ep.raw(auth=True, timeout=self.reply_timeout)
                n += 1
                key = "w:%s:%d:%d" % (self.tag, t, n)
                f = c.cmd("SET", key, str(n))
                if self._record(f, "SET"):
                    assert f.raw == b"+OK\r\n", f
                    with self.lock:
                        self.acked[key] = str(n).encode()
                with self.lock:
                    self.incr_sent[t] += 1
                f = c.cmd("INCR", "c:%s:%d" % (self.tag, t))
                if self._record(f, "INCR"):
                    with self.lock:
                        self.incr_acked[t] += 1
                own = self.own_key(t)
                f = c.cmd("SET", own, str(n))
                set_ok = self._record(f, "SET own")
                if set_ok:
                    last_own = n
                f = c.cmd("GET", own)
                if self._record(f, "GET own"):
                    v = int(f.value) if f.value is not None else None
                    # acknowledged: exactly n; not acknowledged: n (it was
                    # applied after all) or the last acknowledged value
                    okv = {n} if set_ok else {n, last_own}
                    if v not in okv:
                        with self.lock:
                            self.ryw.append("thread %d: GET %s returned %r after SET %d (%s), "
                                            "last acknowledged %r" % (t, own, v, n,
                                                                      "acked" if set_ok else "failed",
                                                                      last_own))
                    last_own = v if v is not None else last_own
                # a pipeline of three
                n += 1
                pkey = "w:%s:%d:%d" % (self.tag, t, n)
                with self.lock:
                    self.incr_sent[t] += 1
                c.send(b"".join([encode("SET", pkey, str(n)), encode("GET", pkey),
                                 encode("INCR", "c:%s:%d" % (self.tag, t))]))
                fs = c.read_frames(3, timeout=self.reply_timeout)
                if self._record(fs[0], "pipelined SET"):
                    with self.lock:
                        self.acked[pkey] = str(n).encode()
                    if not isinstance(fs[1].value, Err) and fs[1].value != str(n).encode():
                        with self.lock:
                            self.ryw.append("thread %d: pipelined GET %s returned %r after its "
                                            "acknowledged SET %d" % (t, pkey, fs[1].value, n))
                self._record(fs[1], "pipelined GET")
                if self._record(fs[2], "pipelined INCR"):
                    with self.lock:
                        self.incr_acked[t] += 1
                # a run of pipelined writes (the proxy batches them into
                # MULTI/EXEC blocks): each reply is its own write's
                n += 1
                bkeys = ["w:%s:%d:%d:b%d" % (self.tag, t, n, j) for j in range(8)]
                c.send(b"".join(encode("SET", k, "%d.%d" % (n, j)) for j, k in enumerate(bkeys)))
                fs = c.read_frames(len(bkeys), timeout=self.reply_timeout)
                for j, (k, f) in enumerate(zip(bkeys, fs)):
                    if self._record(f, "batched SET"):
                        if f.raw != b"+OK\r\n":
                            with self.lock:
                                self.errors.append((time.monotonic(), "batched SET: odd reply %r"
                                                    % f.raw))
                            continue
                        with self.lock:
                            self.acked[k] = b"%d.%d" % (n, j)
                # a transaction: all or nothing, whatever the reply says
                n += 1
                ta, tb = "t:%s:%d:%d:a" % (self.tag, t, n), "t:%s:%d:%d:b" % (self.tag, t, n)
                c.send(b"".join([encode("MULTI"), encode("SET", ta, str(n)),
                                 encode("SET", tb, str(n)), encode("EXEC")]))
                fs = c.read_frames(4, timeout=self.reply_timeout)
                with self.lock:
                    self.txns.append((ta, tb, str(n).encode()))
                for f in fs[:3]:
                    self._record(f, "MULTI/SET")
                if isinstance(fs[3].value, Err):
                    with self.lock:
                        self.txn_failures.append(b" | ".join(f.raw.strip() for f in fs))
                    # EXECABORT: as Redis, only after a command failed to queue
                    if (fs[3].value.code == "EXECABORT"
                            and not any(isinstance(f.value, Err) for f in fs[1:3])):
                        with self.lock:
                            self.errors.append((time.monotonic(), "EXEC: EXECABORT with every "
                                                "command queued: %r" % [f.raw for f in fs]))
                if self._record(fs[3], "EXEC"):
                    if fs[3].value == [b"OK", b"OK"]:
                        with self.lock:
                            self.acked[ta] = self.acked[tb] = str(n).encode()
                    elif fs[3].value is not None:
                        with self.lock:
                            self.errors.append((time.monotonic(), "EXEC: odd reply %r" % fs[3].raw))
                if self.pause:
                    time.sleep(self.pause)
            except socket.timeout as e:
                with self.lock:
                    self.hangs.append("thread %d at op %d: no answer within %.1fs (%s)"
                                      % (t, n, self.reply_timeout, e))
                if c is not None:
                    c.close()
                return
            except (ConnectionClosed, ConnectionResetError, BrokenPipeError) as e:
                with self.lock:
                    self.closed.append((time.monotonic(), "thread %d at op %d: %r" % (t, n, e)))
                if c is not None:
                    c.close()
                c = None
                time.sleep(0.02)
            except OSError as e:  # could not connect
                with self.lock:
                    self.closed.append((time.monotonic(), "thread %d connect: %r" % (t, e)))
                c = None
                time.sleep(0.05)
        if c is not None:
            c.close()

    def check(self, upstream, expect_errors=None):
        """Asserts the workload's invariants; returns a summary string.
        expect_errors: False = not a single error allowed; True = at least
        one (the fault did bite); None = either."""
        problems = []
        if self.hangs:
            problems.append("requests left without an answer: %s" % self.hangs[:5])
        if self.closed:
            problems.append("connections closed by the proxy: %s"
                            % [c for _, c in self.closed[:5]])
        if self.ryw:
            problems.append("read-your-writes violations: %s" % self.ryw[:5])
        odd = [e for _, e in self.errors
               if not any(p in e for p in PROXY_ERRORS) and not e.startswith("EXEC: EXECABORT Transaction")]
        if odd:
            problems.append("errors that are not the proxy's upstream errors: %s" % odd[:5])
        if expect_errors is False and self.errors:
            problems.append("%d errors where none were expected: %s"
                            % (len(self.errors), [e for _, e in self.errors[:5]]))
        if expect_errors is True and not self.errors:
            problems.append("no request failed: the fault did not bite")
        # acknowledged writes are in Redis
        keys = sorted(self.acked)
        missing = []
        with upstream.raw(auth=True) as c:
            for i in range(0, len(keys), 500):
                chunk = keys[i:i + 500]
                vals = c.call("MGET", *chunk)
                for k, v in zip(chunk, vals):
                    if v != self.acked[k]:
                        missing.append((k, self.acked[k], v))
            for t in range(self.nthreads):
                v = c.call("GET", "c:%s:%d" % (self.tag, t))
                cnt = int(v) if v is not None else 0
                if not (self.incr_acked[t] <= cnt <= self.incr_sent[t]):
                    problems.append("INCR c:%s:%d: Redis has %d, acknowledged %d, sent %d"
                                    % (self.tag, t, cnt, self.incr_acked[t], self.incr_sent[t]))
            torn = []
            for i in range(0, len(self.txns), 200):
                chunk = self.txns[i:i + 200]
                vals = c.call("MGET", *[k for a, b, _ in chunk for k in (a, b)])
                for j, (a, b, v) in enumerate(chunk):
                    va, vb = vals[2 * j], vals[2 * j + 1]
                    if not ((va == v and vb == v) or (va is None and vb is None)):
                        torn.append((a, va, b, vb))
            if torn:
                problems.append("%d transactions applied in part: %s" % (len(torn), torn[:5]))
        if missing:
            problems.append("%d acknowledged writes not in Redis (key, acked, redis): %s"
                            % (len(missing), missing[:5]))
        summary = ("ops=%d ok=%d errors=%d acked_writes=%d hangs=%d closed=%d"
                   % (self.ops, len(self.oks), len(self.errors), len(self.acked),
                      len(self.hangs), len(self.closed)))
        assert not problems, summary + "\n" + "\n".join(problems)
        return summary
