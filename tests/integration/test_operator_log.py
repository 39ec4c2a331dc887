"""
tests/integration/test_operator_log.py — what the log tells an operator
when Redis is down, full or misconfigured: a warning that says what is
wrong and what to do, once, not one line a second for as long as it lasts.
"""
import time

import pytest
import redis

from cachehelpers import start_cached
from helpers import HOST, REDIS_VERSION, wait_until

pytestmark = pytest.mark.proxy_only


def warnings(p, needle):
    with open(p.logpath) as f:
        return [line for line in f if "level=warning" in line and needle in line]


def log_text(p):
    with open(p.logpath) as f:
        return f.read()


def test_redis_down_is_a_warning_a_minute_and_its_return_is_told(proxy_factory, upstream):
    """Redis down for 3 s: every pool's connect fails at each back-off
    (2 s at most) and the invalidation connection's too, which used to be
    a warning each, about one a second for the whole outage. Now the first
    of each is a warning and the rest wait a minute (verbose meanwhile);
    Redis back is a notice with the failed connects counted."""
    p = proxy_factory(args=("--upstream-connections", "4"))
    c = redis.Redis(host=HOST, port=p.port, socket_timeout=5)
    assert c.ping()
    wait_until(lambda: c.info("sidecache").get("tracking_state") == "active", what="tracking on")
    upstream.kill()
    end = time.time() + 3
    refused = 0
    while time.time() < end:
        for i in range(8):  # clients spread over the pool's connections
            try:
                redis.Redis(host=HOST, port=p.port, socket_timeout=5).get("k%d" % i)
            except redis.exceptions.MasterDownError:
                refused += 1
        time.sleep(0.1)
    assert refused > 20
    upstream.restart()
    wait_until(lambda: "upstream reached again" in log_text(p), timeout=10, what="Redis reached again")
    assert len(warnings(p, "upstream connect failed")) == 1, warnings(p, "upstream connect failed")
    assert len(warnings(p, "tracking state=backoff from=connecting")) <= 1, log_text(p)
    again = [line for line in log_text(p).splitlines() if "upstream reached again" in line][0]
    assert "level=notice" in again and "failed_connects=" in again, again
    assert int(again.split("failed_connects=")[1].split()[0]) > 1, again


@pytest.mark.parametrize("case", ["no-password", "no-channel"])
def test_tracking_refused_says_what_to_grant(redis_factory, proxy_factory, case):
    """Redis refuses the invalidation connection: the warning says what the
    operator must change, not only which command was refused."""
    if case == "no-password":
        up = redis_factory(requirepass="sekret")
        p = proxy_factory(up=up, upstream_url="redis://%s:%d" % (HOST, up.port))
        hint = "Redis wants the upstream's credentials: put them in upstream"
    else:
        up = redis_factory()
        # Redis 7 gives a new user no channel (acl-pubsub-default resetchannels)
        up.client().execute_command("ACL", "SETUSER", "nochan", "on", ">pw", "~*", "resetchannels", "+@all")
        p = proxy_factory(up=up, upstream_url="redis://nochan:pw@%s:%d" % (HOST, up.port))
        hint = "grant the upstream user the channel: ACL SETUSER <user> &__redis__:invalidate"
    wait_until(lambda: warnings(p, "tracking refused by Redis"), timeout=10, what="the refusal")
    line = warnings(p, "tracking refused by Redis")[0]
    assert hint in line, line


def test_redis_at_its_maxclients_is_a_warning(redis_factory, proxy_factory):
    """A client whose command needs a new connection gets Redis's
    "max number of clients reached", the same words as sidecache's own
    maxclients: the log says it was Redis's."""
    up = redis_factory(args=["--maxclients", "3"])
    p = proxy_factory(up=up, args=("--upstream-connections", "1"))
    c = redis.Redis(host=HOST, port=p.port, socket_timeout=5)
    c.ping()
    wait_until(lambda: c.info("sidecache").get("tracking_state") == "active", what="tracking on")
    holders = []
    while True:  # fill Redis up beside the proxy's connections
        h = up.client()
        try:
            h.ping()
        except redis.exceptions.ConnectionError:
            break
        holders.append(h)
        assert len(holders) < 3
    with pytest.raises(redis.exceptions.ConnectionError, match="max number of clients reached"):
        c.blpop("q", 1)  # needs a connection of its own
    wait_until(lambda: warnings(p, "Redis is at its maxclients"), what="the warning")
    assert "addr=%s:%d" % (HOST, up.port) in warnings(p, "Redis is at its maxclients")[0]


def deploy_acl_line():
    """The ACL SETUSER line docs/DEPLOY.md gives for the upstream user."""
    import conftest
    with open(conftest.REPO + "/docs/DEPLOY.md") as f:
        lines = [line.strip() for line in f if line.strip().startswith("ACL SETUSER sidecache ")]
    assert len(lines) == 1, lines
    return lines[0].split()


def test_the_upstream_user_of_deploy_md_is_enough(redis_factory, proxy_factory):
    """The user DEPLOY.md tells operators to make for the upstream URL: the
    invalidation connection comes up with no warning, ACL LIST is read,
    and a client (Redis's default user) gets cache hits."""
    up = redis_factory()
    argv = [a.replace(">PASSWORD", ">s3cret") for a in deploy_acl_line()]
    assert up.client().execute_command(*argv) == b"OK"
    p = proxy_factory(up=up, upstream_url="redis://sidecache:s3cret@%s:%d" % (HOST, up.port))
    c = redis.Redis(host=HOST, port=p.port, socket_timeout=5)
    wait_until(lambda: c.info("sidecache").get("tracking_state") == "active", timeout=10, what="tracking on")
    wait_until(lambda: c.info("sidecache").get("acl_checks", 0) > 0, what="an ACL LIST read")
    up.client().set("i1", "v1")
    for _ in range(3):
        assert c.get("i1") == b"v1"
    assert c.info("sidecache")["cache_hits"] >= 1
    assert [line for line in log_text(p).splitlines()
            if "level=warning" in line and "maxclients lowered" not in line] == [], log_text(p)
    assert "refused ACL LIST" not in log_text(p)


@pytest.mark.skipif(REDIS_VERSION < (7, 0), reason="an ACL that takes one subcommand away needs Redis 7")
@pytest.mark.parametrize("mode", ["default", "optin"])
def test_a_user_refused_client_tracking_is_warned_of_and_asked_again_once_allowed(mode, proxy_factory, upstream):
    """Tracking per read, each shared connection sends CLIENT TRACKING ON
    REDIRECT as the user of its pool. A user whose ACL refuses it gets no
    cache (its reads are not tracked, so they must fill nothing): the
    operator is told so, once, and INFO counts it. Once the ACL allows it
    (seen by acl-check-ms), the connection asks again and its reads are
    cached. Before, the refusal was dropped without a word, and never asked
    again (review-modes M1)."""
    d = upstream.client()
    d.execute_command("ACL", "SETUSER", "bob", "on", ">pw", "~*", "&*", "+@all", "-client|tracking")
    d.set("i5", "v")
    p, st = start_cached(proxy_factory, mode=mode)
    bob = p.raw()
    assert bob.cmd("AUTH", "bob", "pw").raw == b"+OK\r\n"
    assert bob.cmd("GET", "i5").value == b"v"
    needle = "CLIENT TRACKING refused by Redis"
    wait_until(lambda: warnings(p, needle), timeout=10, what="the warning")
    assert "NOPERM" in warnings(p, needle)[0], warnings(p, needle)
    assert st.get()["cache_tracking_refused"] >= 1
    with st.delta() as dd:
        for _ in range(5):
            assert bob.cmd("GET", "i5").value == b"v"
    assert dd["cache_hits"] == 0, dict(dd)
    assert len(warnings(p, needle)) == 1, warnings(p, needle)
    d.execute_command("ACL", "SETUSER", "bob", "+client|tracking")
    hits = st.get()["cache_hits"]

    def cached():
        assert bob.cmd("GET", "i5").value == b"v"
        return st.get()["cache_hits"] > hits
    wait_until(cached, timeout=10, interval=0.1, what="bob's reads cached once the ACL allows tracking")
