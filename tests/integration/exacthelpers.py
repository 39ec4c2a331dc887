"""
tests/integration/exacthelpers.py — byte-exact comparisons of whole pipelines
between the proxy and a reference Redis, used by test_transactions_exact.py,
test_batching.py and test_lookup_script.py. Nothing here is a fixture.

- pipeline_raw(ep, cmds, protocol): sends every command in ONE write on a
  fresh connection and returns the raw reply bytes, in order.
- assert_same_pipeline(target, ref, cmds, protocol): the same on both, and
  the transcripts must be byte-identical.
- assert_same_both_ways(target, ref, cmds, protocol): one at a time, then in
  one write, byte-identical on both.
- upstream_clients(server): CLIENT LIST of a Redis, minus the connection
  that asked.
- proxy_supports(directive, value): does the proxy binary know a directive?
- sidecache_info(ep): the # sidecache section, or {} (no proxy / no section).
- assert_noauth_after_others_learned(redis_factory, proxy_factory, *cmd): a
  command the proxy learns to answer still gets NOAUTH without AUTH.
"""
import os
import subprocess
import threading

from helpers import Err, encode


def _send_in_thread(c, data):
    """Sends data (one sendall: the whole pipeline is one write as far as the
    client is concerned) while the caller reads, so that neither side can
    fill its socket buffers and wait for the other."""
    err = []

    def run():
        try:
            c.send(data)
        except Exception as e:  # reported by the caller
            err.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, err


def pipeline_raw(ep, cmds, protocol=None, pre=(), timeout=30.0, conn=None):
    """Sends `pre` one at a time (their replies must not be errors), then all
    of `cmds` in one write; returns the raw reply of each command of cmds.
    With conn given, uses that connection (and leaves it open)."""
    c = conn or ep.raw(auth=True, protocol=protocol, timeout=timeout)
    try:
        for p in pre:
            f = c.cmd(*p)
            assert not isinstance(f.value, Err), (p, f)
        data = b"".join(encode(*x) for x in cmds)
        t, err = _send_in_thread(c, data)
        frames = c.read_many_fast(len(cmds), timeout)
        t.join(timeout)
        assert not err, err
        return [f.raw for f in frames]
    finally:
        if conn is None:
            c.close()


def _short(v, n=300):
    if isinstance(v, (bytes, bytearray)) and len(v) > n:
        return bytes(v[:n]) + b"...(%d bytes)" % len(v)
    return v


def diff_transcripts(cmds, want, got, what="target"):
    """None if identical, else a message naming the first difference."""
    for i, (w, g) in enumerate(zip(want, got)):
        if w != g:
            lo = max(0, i - 3)
            ctx = "\n".join("    [%d] %r -> redis %r / %s %r"
                            % (j, _short(repr(cmds[j]).encode(), 80), _short(want[j], 120), what,
                               _short(got[j], 120)) for j in range(lo, min(i + 1, len(want))))
            return ("reply %d of %d differs from Redis\n  command: %r\n  redis:   %r\n  %s: %r\n"
                    "  context:\n%s" % (i, len(want), _short(repr(cmds[i]).encode(), 200),
                                        _short(w), what, _short(g), ctx))
    if len(want) != len(got):
        return "transcript lengths differ: redis %d, %s %d" % (len(want), what, len(got))
    return None


def assert_same_pipeline(target, ref, cmds, protocol=None, pre=(), timeout=30.0):
    """The whole pipeline, one write, on the reference Redis and on the
    target: every reply byte-identical. Returns the target's replies."""
    want = pipeline_raw(ref, cmds, protocol, pre, timeout)
    got = pipeline_raw(target, cmds, protocol, pre, timeout)
    msg = diff_transcripts(cmds, want, got)
    if msg:
        raise AssertionError(msg)
    return got


def assert_same_both_ways(target, ref, cmds, protocol=None):
    """The commands one at a time, then all in one write (on the data the
    first pass left, the same on both): every reply byte-identical to the
    reference Redis's."""
    from helpers import run_steps
    want = [r for _, r in run_steps(ref, cmds, protocol=protocol)]
    got = [r for _, r in run_steps(target, cmds, protocol=protocol)]
    msg = diff_transcripts(cmds, want, got)
    if msg:
        raise AssertionError("one at a time: " + msg)
    msg = diff_transcripts(cmds, pipeline_raw(ref, cmds, protocol), pipeline_raw(target, cmds, protocol))
    if msg:
        raise AssertionError("in one write: " + msg)


def upstream_clients(server):
    """[dict] of every connection on a Redis except the one asking."""
    with server.raw(auth=True) as c:
        me = c.call("CLIENT", "ID")
        text = c.call("CLIENT", "LIST")
    out = []
    for line in bytes(text).decode().splitlines():
        d = dict(kv.split("=", 1) for kv in line.split(" ") if "=" in kv)
        if int(d["id"]) != me:
            out.append(d)
    return out


HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
SIDECACHE_BIN = os.environ.get("SIDECACHE_BIN") or os.path.join(REPO, "sidecache")


def proxy_supports(directive, value):
    """Whether the proxy binary accepts `--directive value` (--test-config)."""
    try:
        r = subprocess.run([SIDECACHE_BIN, "--test-config", "--" + directive, str(value)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=10)
    except OSError:
        return False
    return r.returncode == 0


def sidecache_info(ep):
    """The # sidecache INFO section of ep as a dict ({} if there is none)."""
    from cachehelpers import parse_sidecache_section
    with ep.raw(auth=True) as c:
        v = c.call("INFO")
    if isinstance(v, Err):
        return {}
    return parse_sidecache_section(v)


def assert_noauth_after_others_learned(redis_factory, proxy_factory, *cmd):
    """Behind requirepass, a client that logged in sends `cmd` twice (+OK,
    which lets the proxy learn to answer it); one that did not log in still
    gets Redis's NOAUTH, twice."""
    up = redis_factory(requirepass="s3cret")
    p = proxy_factory(up=up, upstream_url="redis://default:s3cret@127.0.0.1:%d" % up.port)
    with p.raw() as c:
        assert c.cmd("AUTH", "s3cret").raw == b"+OK\r\n"
        for _ in range(2):
            assert c.cmd(*cmd).raw == b"+OK\r\n"
    with p.raw() as anon:
        for _ in range(2):
            assert anon.cmd(*cmd).raw == b"-NOAUTH Authentication required.\r\n"
