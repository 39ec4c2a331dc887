"""The command line as scripts, image builds and README use it: --help and
--version exit 0, and `--test-config` takes the config file after it, with
-v (anywhere beside it) printing the effective configuration."""
import os
import socket
import subprocess

import pytest

from helpers import HOST, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
SIDECACHE_BIN = os.environ.get("SIDECACHE_BIN") or os.path.join(HERE, "..", "..", "sidecache")

pytestmark = pytest.mark.proxy_only


def run(*args):
    return subprocess.run([SIDECACHE_BIN] + [str(a) for a in args], capture_output=True,
                          text=True, timeout=10)


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_exits_0(flag):
    r = run(flag)
    assert r.returncode == 0, r
    assert "Usage:" in r.stdout
    assert "--test-config" in r.stdout


@pytest.mark.parametrize("argv", [["--version"], ["-v"], ["conf/sidecache.conf", "-v"]])
def test_version_exits_0(argv):
    r = run(*[os.path.join(HERE, "..", "..", a) if a.endswith(".conf") else a for a in argv])
    assert r.returncode == 0, r
    assert r.stdout.startswith("sidecache "), r


def test_test_config_takes_the_file_after_it(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text("port 7123\n")
    r = run("--test-config", conf)
    assert r.returncode == 0, r
    assert r.stdout == "sidecache: configuration OK\n"


@pytest.mark.parametrize("order", [
    ["FILE", "--test-config", "-v"],
    ["--test-config", "-v", "FILE"],
    ["--test-config", "FILE", "-v"],
    ["-v", "--test-config", "FILE"],
    ["FILE", "-v", "--test-config"],
])
def test_test_config_v_prints_the_config_in_any_order(tmp_path, order):
    conf = tmp_path / "c.conf"
    conf.write_text("port 7123\n")
    r = run(*[conf if a == "FILE" else a for a in order])
    assert r.returncode == 0, r
    assert "\nport 7123\n" in r.stdout, r
    assert r.stdout.endswith("\n# sidecache: configuration OK\n")


def test_test_config_rejects_a_second_file(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text("port 7123\n")
    r = run(conf, "--test-config", conf)
    assert r.returncode == 1, r
    assert "a config file was already given" in r.stderr


@pytest.mark.parametrize("lines,says", [
    ("tls-port 7124\n", "tls-port needs tls-cert-file and tls-key-file"),
    ("tls-port 7124\ntls-cert-file /nonexistent/c.pem\ntls-key-file /nonexistent/k.pem\n", "tls-cert-file"),
    ("upstream rediss://127.0.0.1:6379\ntls-upstream-ca-cert-file /nonexistent/ca.pem\n",
     "tls-upstream-ca-cert-file"),
    ("logfile /nonexistent/dir/sidecache.log\n", "cannot open logfile"),
    ("port 7123\ntls-port 7123\n", "tls-port 7123 is also port"),
], ids=["tls-no-cert", "tls-missing-files", "upstream-ca-missing", "logfile-unwritable", "tls-port-is-port"])
def test_test_config_refuses_what_would_not_start(tmp_path, lines, says):
    """--test-config (a service manager's ExecStartPre) refuses what a start
    would refuse before listening, not only what does not parse."""
    conf = tmp_path / "c.conf"
    conf.write_text(lines)
    r = run("--test-config", conf)
    assert r.returncode == 1, r
    assert says in r.stderr, r
    assert "configuration OK" not in r.stdout


def test_test_config_checks_the_logfile_without_making_it(tmp_path):
    """A log file a start could create passes, and is not created (a check
    run by hand as root must not leave a file the service cannot write)."""
    log = tmp_path / "sidecache.log"
    conf = tmp_path / "c.conf"
    conf.write_text("logfile %s\n" % log)
    r = run("--test-config", conf)
    assert r.returncode == 0, r
    assert not log.exists()


def test_test_config_v_shows_the_effective_cache_rules(tmp_path):
    """-v shows what will be cached, which no directive line holds: the
    rules `profile juicefs` brings, then the cache-rule lines, with
    key-prefix put before each pattern, and the prefixes Redis tracks by.
    As comments, so the dump still loads back."""
    conf = tmp_path / "c.conf"
    conf.write_text("profile juicefs\nkey-prefix {1}\ncache-rule GET user:*\n")
    r = run(conf, "--test-config", "-v")
    assert r.returncode == 0, r
    comments = [line for line in r.stdout.splitlines() if line.startswith("#")]
    assert comments == [
        "# effective cache rules (profile juicefs, then cache-rule lines; key-prefix {1} put before each):",
        "#   GET {1}i[1-9]*",
        "#   HGET {1}d[1-9]*",
        "#   GET {1}user:*  (each fill asks the key's TTL)",
        "# tracking bcast prefixes={1}d,{1}i,{1}user:",
        "# lookup scripts: none (not used with a key-prefix)",
        "# sidecache: configuration OK",
    ], r.stdout
    # the output loads back as it is: the OK line is a comment too
    again = tmp_path / "again.conf"
    again.write_text(r.stdout)
    assert run(again, "--test-config").returncode == 0


def test_test_config_v_output_loads_back_with_a_newline_in_a_pattern(tmp_path):
    """A pattern, and so the tracking prefix it implies, may hold any byte:
    in the comments it is written as \\xHH, or a newline would end the
    comment and the dump would not load back."""
    r = run("--test-config", "-v", "--profile", "none", "--cache-rule", "GET", "a\nb:*")
    assert r.returncode == 0, r
    assert "#   GET a\\x0ab:*  (each fill asks the key's TTL)\n" in r.stdout, r.stdout
    assert "# tracking bcast prefixes=a\\x0ab:\n" in r.stdout, r.stdout
    again = tmp_path / "again.conf"
    again.write_text(r.stdout)
    back = run(again, "--test-config", "-v")
    assert back.returncode == 0, back
    assert back.stdout == r.stdout


@pytest.mark.parametrize("args,says", [
    (["--tracking-mode", "optin"], "# tracking optin prefixes=(tracked per read)"),
    (["--profile", "none"], "# cache off: no cache rules (profile none and no cache-rule)"),
    (["--cache-max-memory", "0"], "# cache off (cache-max-memory 0): plain proxy"),
], ids=["optin", "no-rules", "cache-off"])
def test_test_config_v_says_how_the_cache_runs(args, says):
    r = run("--test-config", "-v", *args)
    assert r.returncode == 0, r
    assert says in r.stdout.splitlines(), r.stdout


def test_test_config_refuses_rules_a_start_refuses(tmp_path):
    """A rule a start cannot build (its pattern too long once key-prefix is
    put before it) passed --test-config, then the start failed."""
    conf = tmp_path / "c.conf"
    conf.write_text("key-prefix {1}\ncache-rule GET %s*\n" % ("k" * 254))
    r = run("--test-config", conf)
    assert r.returncode == 1, r
    assert "pattern too long" in r.stderr, r


def test_command_line_upstream_sentinel_overrides_the_files(tmp_path):
    """upstream-sentinel is one directive like upstream: the command line's
    wins over the file's (it was refused: "at most 1 lines"). The
    repeatable cache-rule adds to the file's, as --help says."""
    conf = tmp_path / "c.conf"
    conf.write_text("upstream-sentinel mymaster 10.0.0.1:26379\ncache-rule GET a*\n")
    r = run(conf, "--upstream-sentinel", "other", "127.0.0.1:26379", "--cache-rule", "GET", "b*",
            "--test-config", "-v")
    assert r.returncode == 0, r
    lines = r.stdout.splitlines()
    assert [x for x in lines if x.startswith("upstream-sentinel ")] == [
        "upstream-sentinel other 127.0.0.1:26379"], r.stdout
    assert [x for x in lines if x.startswith("cache-rule ")] == ["cache-rule GET a*", "cache-rule GET b*"]
    assert "the repeatable" in run("--help").stdout


@pytest.mark.parametrize("what", ["port", "metrics-port"])
def test_a_start_that_cannot_listen_logs_an_error_with_the_reason(what):
    """A failure that stops the start is level=error, not warning (a clean
    start and stop may log warnings; an alert on errors fires on these
    only), and names the reason: the metrics one said no errno."""
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen(1)
        busy = taken.getsockname()[1]
        args = ["--port", busy] if what == "port" else ["--port", free_port(), "--metrics-port", busy]
        r = subprocess.run([SIDECACHE_BIN, "--bind", HOST, "--upstream", "redis://%s:1" % HOST]
                           + [str(a) for a in args], capture_output=True, text=True, timeout=10)
    assert r.returncode == 1, r
    says = "cannot listen addr=%s:%d err=\"Address already in use\"" % (HOST, busy)
    if what == "metrics-port":
        says = "metrics: " + says
    assert "level=error " + says in r.stderr, r.stderr


def test_a_start_that_fails_with_a_logfile_says_why_on_stderr_too(tmp_path):
    """With `logfile`, what stops the start goes to the file and to stderr,
    where a service manager (systemd's journal, a Pod's log) shows it
    (before: stderr was empty, exit 1 with no word)."""
    log = tmp_path / "sidecache.log"
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen(1)
        busy = taken.getsockname()[1]
        r = subprocess.run([SIDECACHE_BIN, "--bind", HOST, "--port", str(busy), "--logfile", str(log),
                            "--upstream", "redis://%s:1" % HOST], capture_output=True, text=True, timeout=10)
    assert r.returncode == 1, r
    says = "cannot listen addr=%s:%d err=\"Address already in use\"" % (HOST, busy)
    assert "level=error " + says in log.read_text()
    assert "sidecache: " + says + "\n" in r.stderr, r.stderr
