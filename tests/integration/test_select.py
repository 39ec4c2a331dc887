"""SELECT is per client, even when clients share upstream connections."""
import threading

import pytest

from helpers import assert_same_steps, encode

CONNS = [pytest.param((), id="default-pool"),
         pytest.param(("--upstream-connections", "1"), id="one-upstream-connection")]


@pytest.mark.parametrize("args", CONNS)
def test_select_isolation_between_clients(proxy_factory, upstream, args):
    """A: SELECT 1, SET k a. B (db 0): SET k b. Interleaved reads and writes
    each see their own database, also for keys the proxy may cache."""
    proxy = proxy_factory(args=args)
    with proxy.raw() as a, proxy.raw() as b:
        assert a.cmd("SELECT", 1).raw == b"+OK\r\n"
        assert a.cmd("SET", "k", "a").raw == b"+OK\r\n"
        assert b.cmd("SET", "k", "b").raw == b"+OK\r\n"
        a.cmd("SET", "i1", "inode-db1")
        b.cmd("SET", "i1", "inode-db0")
        a.cmd("HSET", "d1", "n", "dent-db1")
        b.cmd("HSET", "d1", "n", "dent-db0")
        for i in range(100):
            # Pipelined from both sides at once.
            a.send(encode("GET", "k") + encode("GET", "i1") + encode("HGET", "d1", "n"))
            b.send(encode("GET", "k") + encode("GET", "i1") + encode("HGET", "d1", "n"))
            assert [f.value for f in a.read_frames(3)] == [b"a", b"inode-db1", b"dent-db1"], i
            assert [f.value for f in b.read_frames(3)] == [b"b", b"inode-db0", b"dent-db0"], i
        # A write in one db is seen by its db's readers only.
        b.cmd("SET", "i1", "changed-db0")
        assert a.call("GET", "i1") == b"inode-db1"
        assert b.call("GET", "i1") == b"changed-db0"
        # Switching back and forth on one connection.
        assert a.cmd("SELECT", 0).raw == b"+OK\r\n"
        assert a.call("GET", "k") == b"b"
        a.cmd("SELECT", 1)
        assert a.call("GET", "k") == b"a"
    d0 = upstream.client()
    d1 = upstream.client(db=1)
    assert d0.get("k") == b"b" and d1.get("k") == b"a"
    assert d0.get("i1") == b"changed-db0" and d1.get("i1") == b"inode-db1"


@pytest.mark.parametrize("args", CONNS)
def test_select_isolation_under_concurrency(proxy_factory, upstream, args):
    """16 threads, each in its own database, write and read the same key
    names concurrently; nobody ever sees another database's value."""
    proxy = proxy_factory(args=args)
    errors = []

    def worker(db):
        try:
            with proxy.raw() as c:
                assert c.cmd("SELECT", db).raw == b"+OK\r\n"
                for j in range(100):
                    c.send(encode("SET", "i5", "db%d-%d" % (db, j)) + encode("GET", "i5") +
                           encode("GET", "shared"))
                    f = c.read_frames(3)
                    if f[1].value != b"db%d-%d" % (db, j):
                        errors.append((db, j, f[1].value))
                    if f[2].value is not None and f[2].value != b"db%d" % db:
                        errors.append((db, j, "shared", f[2].value))
                    if j == 0:
                        c.cmd("SET", "shared", "db%d" % db)
        except Exception as e:  # noqa: BLE001
            errors.append((db, repr(e)))

    threads = [threading.Thread(target=worker, args=(db,), daemon=True) for db in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors[:10]
    for db in range(16):
        assert upstream.client(db=db).get("i5") == b"db%d-99" % db


def test_select_errors_match_redis(proxy, ref):
    steps = [("SET", "k", "db0"), ("SELECT", 16), ("SELECT", "abc"), ("SELECT", -1), ("SELECT", "1.5"),
             ("SELECT",), ("SELECT", 1, 2), ("SELECT", ""), ("SELECT", "99999999999999999999"),
             ("GET", "k"), ("SELECT", 15), ("GET", "k"), ("SELECT", "0"), ("GET", "k")]
    got = assert_same_steps(proxy, ref, steps)
    assert got[1][1] == b"-ERR DB index is out of range\r\n"
    assert got[2][1] == b"-ERR value is not an integer or out of range\r\n"
    assert got[9][1] == b"$3\r\ndb0\r\n", "a failed SELECT must not change the database"
    assert got[11][1] == b"$-1\r\n"


def test_select_inside_multi_changes_the_clients_db(proxy, ref):
    steps = [("MULTI",), ("SELECT", 2), ("SET", "k", "in2"), ("EXEC",), ("GET", "k"),
             ("SELECT", 0), ("GET", "k"), ("SELECT", 2), ("GET", "k")]
    got = assert_same_steps(proxy, ref, steps)
    assert got[4][1] == b"$3\r\nin2\r\n", "SELECT inside EXEC changes the client's db"
    assert got[6][1] == b"$-1\r\n"
