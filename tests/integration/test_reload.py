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
        # only what a reload applies changed: no restart is asked for
        assert "need a restart" not in log.read_text()

        # a broken file is refused as a whole: nothing changes
        conf.write_text("port %d\ncache-max-memory lots\n" % port)
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reload refused" in log.read_text())
        assert info_section(port)["cache_max_bytes"] == 2 * 1024 * 1024
        assert redis.Redis(port=port).ping() is True
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0, proc.stderr.read().decode(errors="replace")


@pytest.mark.proxy_only
@pytest.mark.parametrize("change", ["cache-rule GET other:*\n", "cache-track-prefix i\n"],
                         ids=["rule-pattern", "track-prefix"])
def test_sighup_reports_a_rule_change_it_ignores(tmp_path, upstream, change):
    """A reload that changes a rule's pattern (the same number of rules) or
    adds a tracking prefix says that it needs a restart, and keeps the
    rules it started with."""
    port = free_port()
    conf = tmp_path / "sidecache.conf"
    log = tmp_path / "sidecache.log"
    base = "upstream redis://127.0.0.1:%d\nport %d\nlogfile %s\nprofile none\n" % (upstream.port, port, log)
    conf.write_text(base + "cache-rule GET user:*\n")
    proc = subprocess.Popen([sidecache_bin(), str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: port_accepts(port))
        wait_for(lambda: info_section(port).get("tracking_state") == "active")
        conf.write_text(base + ("cache-rule GET user:*\n" if "track" in change else "") + change)
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reloaded" in log.read_text())
        assert "need a restart" in log.read_text()
        r = redis.Redis(port=port)
        upstream.client().set("user:1", "u")
        for _ in range(3):
            assert r.get("user:1") == b"u"
        assert info_section(port)["cache_hits"] >= 1  # user:* still cached
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0, proc.stderr.read().decode(errors="replace")


@pytest.mark.proxy_only
def test_sighup_names_every_changed_directive_that_needs_a_restart(tmp_path, upstream):
    """A reload used to be silent about most of what it cannot apply (only the
    upstream, listeners, rules and modes were reported): each changed
    directive it ignores is now named, and none it applies or left alone."""
    port = free_port()
    conf = tmp_path / "sidecache.conf"
    log = tmp_path / "sidecache.log"
    base = "upstream redis://127.0.0.1:%d\nport %d\nlogfile %s\n" % (upstream.port, port, log)
    conf.write_text(base + "cache-max-memory 8mb\n")
    proc = subprocess.Popen([sidecache_bin(), str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: port_accepts(port))
        # logfile is not reopened on SIGHUP: the warning is in the old one
        conf.write_text(base.replace(str(log), str(tmp_path / "other.log")) +
                        "cache-max-memory 4mb\nkey-prefix {1}\nbind 127.0.0.1 ::1\n"
                        "batch-max-commands 10\nupstream-timeout 7\nmetrics-port %d\n"
                        "tracking-keepalive-ms 500\nupstream-connections 3\n" % free_port())
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reloaded" in log.read_text())
        warning = [l for l in log.read_text().splitlines() if "need a restart" in l]
        assert len(warning) == 1, log.read_text()
        names = warning[0].split("reload: ", 1)[1].split(" changed and need a restart")[0]
        assert names.split(", ") == ["bind", "metrics-port", "upstream-timeout", "upstream-connections",
                                     "logfile", "key-prefix", "batch-max-commands",
                                     "tracking-keepalive-ms"], warning
        assert info_section(port)["cache_max_bytes"] == 4 * 1024 * 1024  # applied all the same
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0, proc.stderr.read().decode(errors="replace")


@pytest.mark.proxy_only
@pytest.mark.parametrize("change,says", [
    ("logfile /nonexistent/dir/sidecache.log\n", "cannot open logfile /nonexistent/dir/sidecache.log"),
    ("tls-port %(tls)d\ntls-cert-file /nonexistent.crt\ntls-key-file /nonexistent.key\n", "TLS: "),
], ids=["logfile", "tls-files"])
def test_sighup_refuses_a_file_that_would_not_start(tmp_path, upstream, change, says):
    """A file that loads but that a start (and --test-config) refuses: a
    log file that cannot be opened, TLS files that cannot be read. SIGHUP
    applied what it could and asked for a restart for the rest, a restart
    that would not start; now it is refused as a whole and changes
    nothing."""
    port = free_port()
    conf = tmp_path / "sidecache.conf"
    log = tmp_path / "sidecache.log"
    conf.write_bytes(read_once_config(upstream, port, log))
    proc = subprocess.Popen([sidecache_bin(), str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    broken = tmp_path / "broken.conf"
    broken.write_text(read_once_config(upstream, port, log).decode().replace("8mb", "4mb") +
                      change % {"tls": free_port()})
    r = subprocess.run([sidecache_bin(), str(broken), "--test-config"], capture_output=True, text=True)
    assert r.returncode == 1 and says in r.stderr, r
    wait_for(lambda: port_accepts(port))
    os.replace(broken, conf)
    assert_sighup_refused(proc, port, log, says)


@pytest.mark.proxy_only
def test_sighup_takes_a_new_upstream_password(tmp_path, redis_factory):
    """Redis's password rotated (the old one no longer works), the new one
    written into the upstream URL, SIGHUP: the invalidation connection logs
    in with it, and the cache works again without a restart. (Before, the
    reload asked for a restart and the cache stayed off: each reconnect was
    refused with the old password.)"""
    r = redis_factory(requirepass="old-pw")
    port = free_port()
    conf = tmp_path / "sidecache.conf"
    log = tmp_path / "sidecache.log"

    def write(pw):
        conf.write_text("upstream redis://:%s@127.0.0.1:%d\nport %d\nlogfile %s\n" % (pw, r.port, port, log))

    def tracking(pw):
        return redis.Redis(port=port, password=pw).info("sidecache").get("tracking_state")

    write("old-pw")
    proc = subprocess.Popen([sidecache_bin(), str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: port_accepts(port))
        wait_for(lambda: tracking("old-pw") == "active")
        direct = r.client()
        direct.config_set("requirepass", "new-pw")  # open connections stay logged in
        r.password = "new-pw"
        for c in direct.client_list():
            if c["name"] == "sidecache-invalidation":
                direct.client_kill_filter(_id=c["id"])
        wait_for(lambda: tracking("new-pw") != "active")  # refused with the old password
        write("new-pw")
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reloaded" in log.read_text())
        wait_for(lambda: tracking("new-pw") == "active")
        assert "need a restart" not in log.read_text()
        assert "new upstream credentials" in log.read_text()
        c = redis.Redis(port=port, password="new-pw")
        direct.set("i1", "v1")
        for _ in range(3):
            assert c.get("i1") == b"v1"
        assert c.info("sidecache")["cache_hits"] >= 1
        direct.set("i1", "v2")  # the invalidation comes on the new connection
        wait_for(lambda: c.get("i1") == b"v2")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0, proc.stderr.read().decode(errors="replace")


def read_once_config(upstream, port, log):
    """A configuration of 8mb of cache, for a proxy that reads it once."""
    return ("upstream redis://127.0.0.1:%d\nport %d\nlogfile %s\ncache-max-memory 8mb\n"
            % (upstream.port, port, log)).encode()


def assert_sighup_refused(proc, port, log, says):
    """The proxy proc, started on read_once_config: a SIGHUP is refused with
    a warning that says `says`, it goes on serving, and its cache keeps its
    8mb (a read that gave nothing would put it back to 256mb). Stops proc."""
    try:
        wait_for(lambda: port_accepts(port))
        wait_for(lambda: info_section(port).get("cache_max_bytes") == 8 * 1024 * 1024)
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reload refused" in log.read_text())
        assert says in log.read_text()
        assert redis.Redis(port=port, socket_timeout=2).ping() is True
        assert info_section(port)["cache_max_bytes"] == 8 * 1024 * 1024
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0, proc.stderr.read().decode(errors="replace")


@pytest.mark.proxy_only
def test_sighup_with_configuration_from_stdin_changes_nothing(tmp_path, upstream):
    """A configuration read from standard input ("-") cannot be read again:
    SIGHUP is refused with a warning, where it used to reset every
    directive to its default (cache-max-memory back to 256mb)."""
    port = free_port()
    log = tmp_path / "sidecache.log"
    proc = subprocess.Popen([sidecache_bin(), "-"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    proc.stdin.write(read_once_config(upstream, port, log))
    proc.stdin.close()
    assert_sighup_refused(proc, port, log, "standard input")


@pytest.mark.proxy_only
def test_sighup_with_configuration_from_a_fifo_changes_nothing_and_blocks_nothing(tmp_path, upstream):
    """A configuration read from a FIFO (or a pipe, `<(...)`) at start: read
    again, a FIFO would block the proxy until something wrote to it, and a
    pipe would give nothing (every directive back to its default). SIGHUP
    is refused with a warning, and the proxy goes on serving (before: no
    client was answered after the SIGHUP)."""
    port = free_port()
    log = tmp_path / "sidecache.log"
    fifo = tmp_path / "sidecache.conf"
    os.mkfifo(fifo)
    proc = subprocess.Popen([sidecache_bin(), str(fifo)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with open(fifo, "wb") as f:  # (blocks until the proxy opens it)
        f.write(read_once_config(upstream, port, log))
    assert_sighup_refused(proc, port, log, "is not a regular file")
