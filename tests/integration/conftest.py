"""
tests/integration/conftest.py — a real redis-server and the real sidecache.

How to run
----------
    make                                   # builds ./sidecache
    python3 -m pytest -q tests/integration # against the proxy

    SIDECACHE_BIN=/path/to/sidecache python3 -m pytest -q tests/integration
    python3 -m pytest -q tests/integration -m "not slow"   # skip the long ones

    SIDECACHE_TARGET=direct python3 -m pytest -q tests/integration

SIDECACHE_TARGET=direct runs every proxy-targeted test against Redis itself:
the `proxy` fixture (and `proxy_factory`) then hand back the upstream
redis-server instead of starting the binary. That is how the tests themselves
are validated: a test that fails against Redis is a wrong test. Tests marked
`proxy_only` (they stop the proxy, or expect a proxy's own error when Redis
dies) are skipped in that mode.

Fixtures
--------
- redis_factory(requirepass=None, args=(), name="redis") -> RedisServer,
  started on a free loopback port in its own tmp dir (--save "" --appendonly
  no); killed at the end of the test whatever happens. .kill() is SIGKILL,
  .restart() starts it again on the same port.
- upstream: the default RedisServer behind the proxy.
- ref_factory / ref: a second, independent redis-server configured like the
  upstream, used as the reference that proxy replies are compared with
  (comparing against a separate server keeps the two runs from seeing each
  other's keys, clients and MONITOR lines).
- proxy_factory(upstream=None, args=(), upstream_url=None, nofile=None, env=None) ->
  the proxy (a ProxyProcess; nofile=(soft, hard) starts it with that
  RLIMIT_NOFILE, env adds to its environment), or a DirectTarget in direct
  mode. Each proxy gets its own port and log file; at teardown it gets
  SIGTERM and must exit 0 within 5 s (a sanitizer report makes that fail
  too), and a proxy that died during the test (crash) fails the test with
  its log.
- proxy: proxy_factory() in front of `upstream`.

Markers: slow (long-running; deselect with -m "not slow"), proxy_only,
timeout(seconds) (per-test wall clock limit, default 60 s, SIGALRM-based),
redis(major, minor, why): needs that Redis version or newer (what it uses
that older servers lack); skipped on an older REDIS_SERVER_BIN (the suite
runs on Redis 6.2 too: `make test-redis62`).
On a failure, the logs of every process the test started are attached to
the report.
"""
import os
import signal
import sys

import pytest

from helpers import REDIS_SERVER, REDIS_VERSION, DirectTarget, ProxyProcess, RedisServer

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
# the stress tools' modules (JuiceFS's scripts, the differential test)
sys.path.insert(0, os.path.join(REPO, "tests", "stress"))

TARGET = os.environ.get("SIDECACHE_TARGET", "proxy").strip().lower()
if TARGET not in ("proxy", "direct"):
    raise RuntimeError("SIDECACHE_TARGET must be 'proxy' or 'direct', not %r" % TARGET)
SIDECACHE_BIN = os.environ.get("SIDECACHE_BIN") or os.path.join(REPO, "sidecache")
DEFAULT_TIMEOUT = float(os.environ.get("SIDECACHE_TEST_TIMEOUT", "60"))
# Extra proxy arguments for every proxy a test starts, put before the test's
# own (which win): `SIDECACHE_ARGS="--tracking-mode optin"` runs a suite in
# another tracking mode (make test runs bcast, the default; tests of a
# mode's own behaviour take it as a parameter).
EXTRA_ARGS = tuple(os.environ.get("SIDECACHE_ARGS", "").split())

# Processes started by the running test, for the failure report.
_current_procs = []


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running test (deselect with -m 'not slow')")
    config.addinivalue_line("markers", "proxy_only: meaningless against Redis directly; "
                                       "skipped with SIDECACHE_TARGET=direct")
    config.addinivalue_line("markers", "timeout(seconds): wall-clock limit for the test")
    config.addinivalue_line("markers", "redis(major, minor, why): needs that Redis version or newer")


def pytest_report_header(config):
    server = "redis-server %s (%d.%d)" % ((REDIS_SERVER,) + REDIS_VERSION)
    if TARGET == "direct":
        return "sidecache: SIDECACHE_TARGET=direct (tests run against redis-server itself); " + server
    return "sidecache: target proxy %s%s; %s" % (
        SIDECACHE_BIN, "" if os.path.exists(SIDECACHE_BIN) else " (NOT FOUND)", server)


def pytest_collection_modifyitems(config, items):
    for item in items:
        for m in item.iter_markers("redis"):
            major, minor, why = m.args
            if REDIS_VERSION < (major, minor):
                item.add_marker(pytest.mark.skip(reason="needs Redis %d.%d (%s); REDIS_SERVER_BIN is %d.%d"
                                                 % (major, minor, why, REDIS_VERSION[0], REDIS_VERSION[1])))
    if TARGET != "direct":
        return
    skip = pytest.mark.skip(reason="proxy-only behaviour (SIDECACHE_TARGET=direct)")
    for item in items:
        if item.get_closest_marker("proxy_only"):
            item.add_marker(skip)


class _TestTimeout(Exception):
    pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    m = item.get_closest_marker("timeout")
    seconds = float(m.args[0]) if m else DEFAULT_TIMEOUT

    def on_alarm(signum, frame):
        raise _TestTimeout("test exceeded its %.0fs limit" % seconds)

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and _current_procs:
        for p in list(_current_procs):
            try:
                rep.sections.append(("process %s" % type(p).__name__, p.describe()))
            except Exception as e:  # never let the report itself fail
                rep.sections.append(("process", "<describe failed: %s>" % e))


@pytest.fixture(autouse=True)
def _track_procs():
    del _current_procs[:]
    yield
    del _current_procs[:]


@pytest.fixture
def redis_factory(tmp_path_factory):
    servers = []

    def make(requirepass=None, args=(), name="redis"):
        d = tmp_path_factory.mktemp(name)
        s = RedisServer(d, requirepass=requirepass, args=args, name=name)
        servers.append(s)
        _current_procs.append(s)
        s.start()
        return s

    yield make
    for s in servers:
        s.stop()


@pytest.fixture
def upstream(redis_factory):
    return redis_factory()


@pytest.fixture
def ref_factory(redis_factory):
    """A reference redis-server (same config as the one given)."""

    def make(like=None, requirepass=None, args=()):
        if like is not None:
            return redis_factory(requirepass=like.requirepass, args=like.extra, name="ref")
        return redis_factory(requirepass=requirepass, args=args, name="ref")

    return make


@pytest.fixture
def ref(ref_factory, upstream):
    return ref_factory(like=upstream)


@pytest.fixture
def proxy_factory(tmp_path_factory, upstream, request):
    proxies = []

    def make(up=None, args=(), upstream_url=None, loglevel="notice", nofile=None, env=None):
        up = up or upstream
        if TARGET == "direct":
            t = DirectTarget(up)
            proxies.append(t)
            return t
        if not os.path.exists(SIDECACHE_BIN):
            pytest.fail("proxy binary not found at %s (build it with `make`, set "
                        "SIDECACHE_BIN, or run with SIDECACHE_TARGET=direct)" % SIDECACHE_BIN,
                        pytrace=False)
        p = ProxyProcess(SIDECACHE_BIN, tmp_path_factory.mktemp("sidecache"), up,
                         upstream_url=upstream_url, args=EXTRA_ARGS + tuple(args), loglevel=loglevel,
                         nofile=nofile, env=env)
        proxies.append(p)
        _current_procs.append(p)
        p.start()
        return p

    yield make

    problems = []
    for p in proxies:
        if isinstance(p, DirectTarget):
            continue
        if p.proc.poll() is not None and not p.stopped_on_purpose:
            problems.append("sidecache died during the test:\n" + p.describe())
            continue
        if p.stopped_on_purpose:          # the test stopped it and checked how
            p.kill()
            continue
        try:
            rc = p.terminate(timeout=5)
        except AssertionError as e:
            problems.append("%s\n%s" % (e, p.describe()))
            continue
        # SIGTERM must stop it cleanly; a sanitizer report also lands here.
        if rc != 0:
            problems.append("sidecache exited with status %s on SIGTERM at teardown:\n%s"
                            % (rc, p.describe()))
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


@pytest.fixture
def proxy(proxy_factory):
    return proxy_factory()


@pytest.fixture
def is_direct():
    return TARGET == "direct"
