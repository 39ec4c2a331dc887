"""The unixsocket path belongs to one running proxy: a second one (an operator
"checking" the per-node daemon's config by starting it by hand) must fail and
leave the first reachable, a file that is not a socket is never deleted, and
a stale socket of an earlier run is taken over."""
import os
import socket
import subprocess
import time

import pytest
import redis

from helpers import HOST, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
SIDECACHE_BIN = os.environ.get("SIDECACHE_BIN") or os.path.join(HERE, "..", "..", "sidecache")

pytestmark = pytest.mark.proxy_only


def sock_path(tmp_path):
    path = str(tmp_path / "s.sock")
    assert len(path) < 100, path
    return path


def start_failing(args, upstream):
    """Runs a proxy that must refuse to start; returns (exit status, stderr)."""
    proc = subprocess.Popen([SIDECACHE_BIN, "--bind", HOST, "--upstream",
                             "redis://%s:%d" % (HOST, upstream.port)] + [str(a) for a in args],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail("the second proxy started on a path in use:\n" + err)
    return proc.returncode, err


def ping_unix(path):
    return redis.Redis(unix_socket_path=path, socket_timeout=5).ping()


def test_second_proxy_on_the_same_unixsocket_fails_and_the_first_still_answers(
        tmp_path, proxy_factory, upstream):
    path = sock_path(tmp_path)
    proxy_factory(args=["--unixsocket", path])
    assert ping_unix(path)
    rc, err = start_failing(["--port", free_port(), "--unixsocket", path], upstream)
    assert rc == 1, err
    assert "unix socket in use" in err and path in err, err
    assert ping_unix(path)


def test_failed_start_on_a_port_in_use_leaves_the_first_proxys_unixsocket(
        tmp_path, proxy_factory, upstream):
    """The same config started twice: the TCP port fails first, and the
    failed start must not remove the socket of the one that runs."""
    path = sock_path(tmp_path)
    first = proxy_factory(args=["--unixsocket", path])
    rc, err = start_failing(["--port", first.port, "--unixsocket", path], upstream)
    assert rc == 1, err
    assert os.path.exists(path)
    assert ping_unix(path)


def test_a_regular_file_at_the_unixsocket_path_is_not_deleted(tmp_path, upstream):
    path = sock_path(tmp_path)
    with open(path, "w") as f:
        f.write("precious\n")
    rc, err = start_failing(["--port", free_port(), "--unixsocket", path], upstream)
    assert rc == 1, err
    assert "not a socket" in err, err
    with open(path) as f:
        assert f.read() == "precious\n"


def test_a_stale_unixsocket_is_removed_and_reused(tmp_path, proxy_factory):
    path = sock_path(tmp_path)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)   # bound, then closed: nobody accepts on it
    s.close()
    assert os.path.exists(path)
    proxy_factory(args=["--unixsocket", path])
    assert ping_unix(path)


def test_an_upstream_unix_socket_nobody_accepts_on_fails_fast_and_recovers(tmp_path, proxy_factory, redis_factory):
    """unix:// upstream whose socket file is there but nobody accepts on it
    (what a Redis killed with -9 leaves): each command gets MASTERDOWN at
    once, and once Redis listens there again sidecache serves and caches.
    The invalidation connection's connect, refused at once, used to leave
    the event loop spinning: no reply to anyone, no recovery, SIGTERM
    ignored."""
    path = sock_path(tmp_path)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)
    stale.close()
    p = proxy_factory(upstream_url="unix://" + path)
    c = redis.Redis(host=HOST, port=p.port, socket_timeout=3)
    for _ in range(3):
        with pytest.raises(redis.exceptions.MasterDownError, match="Connection refused"):
            c.get("i1")
    os.unlink(path)
    r = redis_factory(args=["--unixsocket", path])
    r.client().set("i1", "v1")
    deadline = time.time() + 10
    while True:
        try:
            if c.get("i1") == b"v1" and c.info("sidecache").get("tracking_state") == "active":
                break
        except redis.exceptions.RedisError:
            pass
        assert time.time() < deadline, "sidecache did not reach Redis on its socket again"
        time.sleep(0.1)
    hits = c.info("sidecache")["cache_hits"]
    for _ in range(3):
        assert c.get("i1") == b"v1"
    assert c.info("sidecache")["cache_hits"] > hits, "no hit once tracking was on again"
    assert p.terminate(timeout=12) == 0
