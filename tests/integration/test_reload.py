"""SIGHUP reloads what can change at run time: the log level, the cache's
size limits, client limits. A file that no longer loads changes nothing,
and the proxy keeps serving."""
import os
import signal
import subprocess
import time

import pytest
import redis

from helpers import free_port, port_accepts


def sidecache_bin():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.environ.get("SIDECACHE_BIN") or os.path.join(here, "..", "..", "sidecache")


def info_section(port):
    """The # sidecache fields (redis-py parses INFO text into a dict)."""
    return redis.Redis(port=port).info("sidecache")


def wait_for(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not met in %.1fs" % timeout
        time.sleep(0.05)


@pytest.mark.proxy_only
def test_sighup_reloads_cache_size_and_loglevel(tmp_path, upstream):
    port = free_port()
    conf = tmp_path / "sidecache.conf"
    log = tmp_path / "sidecache.log"
    conf.write_text("upstream redis://127.0.0.1:%d\nport %d\nlogfile %s\nloglevel notice\n"
                    "cache-max-memory 8mb\n" % (upstream.port, port, log))
    proc = subprocess.Popen([sidecache_bin(), str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: port_accepts(port))
        wait_for(lambda: info_section(port).get("cache_max_bytes") == 8 * 1024 * 1024)

        conf.write_text("upstream redis://127.0.0.1:%d\nport %d\nlogfile %s\nloglevel verbose\n"
                        "cache-max-memory 2mb\n" % (upstream.port, port, log))
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: info_section(port).get("cache_max_bytes") == 2 * 1024 * 1024)
        # verbose now: a client connecting is logged
        redis.Redis(port=port).ping()
        wait_for(lambda: "client connected" in log.read_text())

        # a broken file is refused as a whole: nothing changes
        conf.write_text("port %d\ncache-max-memory lots\n" % port)
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reload refused" in log.read_text())
        assert info_section(port)["cache_max_bytes"] == 2 * 1024 * 1024
        assert redis.Redis(port=port).ping() is True
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0, proc.stderr.read().decode(errors="replace")
