"""scripts/run.sh (`make run`): the upstream a config file in ARGS names is the
one used; a throwaway redis-server is started only when no upstream is set
anywhere, answers before the proxy starts, and leaves no directory behind."""
import os
import re
import signal
import subprocess

import pytest
import redis

from helpers import HOST, free_port, port_accepts, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
SIDECACHE_BIN = os.environ.get("SIDECACHE_BIN") or os.path.join(REPO, "sidecache")

pytestmark = pytest.mark.proxy_only


def start_run_sh(args, tmp_path):
    """scripts/run.sh with ARGS=args, in a session of its own so that one
    SIGTERM to the group stops it as Ctrl-C stops `make run`."""
    env = dict(os.environ, ARGS=" ".join(str(a) for a in args))
    env.pop("UPSTREAM", None)
    err = open(tmp_path / "run.stderr", "wb")
    try:
        return subprocess.Popen([os.path.join(REPO, "scripts", "run.sh"), SIDECACHE_BIN],
                                cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                stdout=err, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        err.close()


def stop_run_sh(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    return proc.wait(10)


def test_run_sh_uses_the_upstream_of_the_config_file(tmp_path, upstream):
    port = free_port()
    conf = tmp_path / "up.conf"
    conf.write_text("port %d\nupstream redis://%s:%d\n" % (port, HOST, upstream.port))
    proc = start_run_sh([conf], tmp_path)
    try:
        wait_until(lambda: port_accepts(port) or proc.poll() is not None, timeout=10,
                   what="the proxy of run.sh")
        c = redis.Redis(host=HOST, port=port)
        assert c.ping()
        c.set("run-sh-key", "through the proxy")
        assert upstream.client().get("run-sh-key") == b"through the proxy"
    finally:
        assert stop_run_sh(proc) == 0
    out = (tmp_path / "run.stderr").read_text()
    assert "started redis-server" not in out, out


def test_run_sh_starts_a_redis_when_only_other_upstream_options_are_given(tmp_path):
    """--upstream-connections is not --upstream: no Redis is named, so one is
    started (and answers PING before the proxy starts), then removed."""
    port = free_port()
    proc = start_run_sh(["--port", port, "--upstream-connections", "1"], tmp_path)
    try:
        wait_until(lambda: port_accepts(port) or proc.poll() is not None, timeout=10,
                   what="the proxy of run.sh")
        assert redis.Redis(host=HOST, port=port).ping()
    finally:
        assert stop_run_sh(proc) == 0
    out = (tmp_path / "run.stderr").read_text()
    m = re.search(r"run: started redis-server on [0-9.]+:\d+ \(log (\S+)/redis\.log", out)
    assert m, out
    # (its watcher removes it once the proxy is gone)
    wait_until(lambda: not os.path.exists(m.group(1)), timeout=5, what="run.sh to remove %s" % m.group(1))
    assert "upstream connect failed" not in out, out


def test_a_sigterm_to_run_sh_alone_stops_the_proxy_and_its_redis(tmp_path):
    """make (or a supervisor, or kill) signals the script's process only, not
    its group: the proxy, which took the script's place, stops gently, and
    the redis-server started for it stops and its directory goes (before:
    the shell held the signal until the proxy exited, which it never did)."""
    port = free_port()
    proc = start_run_sh(["--port", port], tmp_path)
    try:
        wait_until(lambda: port_accepts(port) or proc.poll() is not None, timeout=10,
                   what="the proxy of run.sh")
        out = (tmp_path / "run.stderr").read_text()
        m = re.search(r"run: started redis-server on [0-9.]+:(\d+) \(log (\S+)/redis\.log", out)
        assert m, out
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        stop_run_sh(proc)
    wait_until(lambda: not os.path.exists(m.group(2)), timeout=10, what="run.sh to remove %s" % m.group(2))
    wait_until(lambda: not port_accepts(int(m.group(1))), timeout=5, what="its redis-server to stop")
    assert "stopping signal=15" in (tmp_path / "run.stderr").read_text()
