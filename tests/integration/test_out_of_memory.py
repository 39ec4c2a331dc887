"""
tests/integration/test_out_of_memory.py — an allocation that fails (the
process is out of memory) costs at most the client it was for: it gets an
error, or its connection closes. It never gets a wrong reply, never waits
for ever, and the proxy goes on serving. One allocation is failed on demand
by oom_shim.c (LD_PRELOAD), swept over the first allocations a request
makes, so that each of them fails in turn whatever their order.

The shim needs the plain build (a sanitizer's runtime must be the first
library loaded): the test takes build/sidecache beside the build-san/ one
that CI tests, and is skipped where there is none.
"""
import os
import socket
import subprocess
import time

import pytest

from cachehelpers import Stats, warm, wait_tracking_active
from helpers import HOST, Err, Incomplete, encode, parse_frame

pytestmark = [pytest.mark.proxy_only, pytest.mark.timeout(180)]

HERE = os.path.dirname(os.path.abspath(__file__))


def plain_binary():
    """The sidecache binary without a sanitizer: SIDECACHE_BIN, or the
    plain build beside it."""
    b = os.environ.get("SIDECACHE_BIN", "")
    root = os.path.dirname(os.path.dirname(b))
    for c in (b, os.path.join(root, "build", "sidecache")):
        if c and os.path.exists(c):
            libs = subprocess.run(["ldd", c], capture_output=True, text=True).stdout
            if "libasan" not in libs and "libubsan" not in libs:
                return c
    pytest.skip("no sidecache build without a sanitizer (make SANITIZE=0)")


@pytest.fixture
def oom_proxy(tmp_path, proxy_factory, monkeypatch):
    """A caching proxy with the shim loaded; .fail(n) makes its n-th
    allocation from now fail, .fired() counts the failures so far."""
    shim = str(tmp_path / "oom_shim.so")
    subprocess.run(["cc", "-O2", "-fPIC", "-shared", "-o", shim, os.path.join(HERE, "oom_shim.c"), "-pthread"],
                   check=True)
    ctl, fired, trace = str(tmp_path / "ctl"), str(tmp_path / "fired"), str(tmp_path / "trace")
    with open(ctl, "w") as f:
        f.write("0 0\n")
    import conftest
    monkeypatch.setattr(conftest, "SIDECACHE_BIN", plain_binary())
    p = proxy_factory(env={"LD_PRELOAD": shim, "OOM_CTL": ctl, "OOM_FIRED": fired, "OOM_TRACE": trace})
    p.trace = trace
    gen = [0]

    def fail(n):
        gen[0] += 1
        with open(ctl + ".tmp", "w") as f:
            f.write("%d %d\n" % (gen[0], n))
        os.rename(ctl + ".tmp", ctl)
        time.sleep(0.02)  # the shim's thread reads it every millisecond

    def count():
        try:
            with open(fired) as f:
                return int(f.read() or 0)
        except (OSError, ValueError):
            return 0

    p.fail, p.fired = fail, count
    return p


def replies_or_close(s, n, timeout=3.0, what=""):
    """Up to n replies from socket s, then "closed" if it closed first;
    fails on silence (a reply lost: the client would wait for ever)."""
    s.settimeout(timeout)
    buf, out = b"", []
    while len(out) < n:
        try:
            value, end = parse_frame(buf, 0)
            out.append(value)
            buf = buf[end:]
            continue
        except Incomplete:
            pass
        try:
            d = s.recv(65536)
        except ConnectionResetError:
            d = b""
        except socket.timeout:
            pytest.fail("%sno reply within %.0f s after %r: a reply was lost" % (what, timeout, out), pytrace=False)
        if not d:
            return out + ["closed"]
        buf += d
    return out


SCENARIOS = {
    # cache hits and a reply made here
    "hits": ([("GET", "i1"), ("GET", "i2"), ("PING",)], [b"value-of-i1", b"value-of-i2", b"PONG"]),
    # a connection of the client's own, whose handshake is made then
    "own-connection": ([("SELECT", "3"), ("WATCH", "w"), ("GET", "w"), ("UNWATCH",)], [b"OK", b"OK", None, b"OK"]),
    # the session's name and login, kept by the proxy: a copy that failed
    # used to leave the name unset after +OK, or log a later connection of
    # the client's own in as the default user (WATCH makes one)
    "name-and-login": ([("CLIENT", "SETNAME", "n1"), ("CLIENT", "GETNAME"), ("AUTH", "u1", "pw1"), ("ACL", "WHOAMI"),
                        ("WATCH", "w"), ("ACL", "WHOAMI"), ("UNWATCH",)],
                       [b"OK", b"n1", b"OK", b"u1", b"OK", b"u1", b"OK"]),
    # writes that arrive together go to Redis as one MULTI/EXEC block: a
    # reply split that failed used to tell each write it failed, though
    # all ran (a client that retries would apply them twice)
    "batched-writes": ([("INCR", "b"), ("INCR", "b"), ("INCR", "b"), ("GET", "b")], [1, 2, 3, b"3"]),
}
# scenarios whose later replies depend on the earlier commands: after an
# error (that command did nothing) they are not compared
DEPENDENT = {"name-and-login", "batched-writes"}


def writes_that_ran_were_answered(got):
    """batched-writes: GET b (b deleted before) counts the INCRs that ran;
    each of them must have had its integer reply, not an error."""
    if len(got) < 4 or not isinstance(got[3], bytes) or isinstance(got[3], Err):
        return True
    return int(got[3]) == sum(1 for g in got[:3] if isinstance(g, int))


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_an_allocation_that_fails_never_gives_a_wrong_reply(oom_proxy, upstream, scenario):
    """Commands pipelined on a fresh connection, with the k-th allocation
    from then on failing, for k = 1 .. 30: each reply is the right one or
    an error, or the connection closes; then the proxy serves a new
    client. A hit or a local reply whose buffer could not grow used to be
    sent as nothing: GET i1 got i2's value, and the last command no reply
    at all; a new connection's handshake sent in part left its client
    waiting for ever."""
    commands, want = SCENARIOS[scenario]
    p = oom_proxy
    st = Stats(p)
    wait_tracking_active(p, stats=st)
    d = upstream.client()
    d.set("i1", "value-of-i1")
    d.set("i2", "value-of-i2")
    d.execute_command("ACL", "SETUSER", "u1", "on", ">pw1", "~*", "&*", "+@all")
    with p.raw(auth=True) as c:
        warm(c, st, ("GET", "i1"), ("GET", "i2"))
    fired_before, wrong = p.fired(), []
    for k in range(1, 31):
        s = socket.create_connection((HOST, p.port))
        if p.password:
            s.sendall(encode("AUTH", p.password))
            assert replies_or_close(s, 1) == [b"OK"]
        d.delete("b")
        p.fail(k)
        s.sendall(b"".join(encode(*cmd) for cmd in commands))
        got = replies_or_close(s, len(commands), what="k=%d: " % k)
        s.close()
        p.fail(0)
        if scenario == "batched-writes" and not writes_that_ran_were_answered(got):
            wrong.append((k, got))
        for i, g in enumerate(got):
            if g == "closed" or (isinstance(g, Err) and scenario in DEPENDENT):
                break
            if g != want[i] and not isinstance(g, Err):
                wrong.append((k, got))
                break
        with p.raw(auth=True) as c:
            assert c.cmd("PING", timeout=5).raw == b"+PONG\r\n", "the proxy stopped serving after k=%d" % k
            assert c.cmd("GET", "i1", timeout=5).value == b"value-of-i1"
    assert not wrong, "wrong replies (k, replies): %r" % wrong
    assert p.fired() - fired_before >= 4, "the shim failed only %d allocations" % (p.fired() - fired_before)
    assert p.proc.poll() is None
