"""Deep pipelines keep their order; many concurrent clients keep exact counts
and read their own writes."""
import threading
import time

import pytest

from helpers import Err, encode

N_PIPELINE = 10_000


def _pipeline_commands():
    """10,000 commands: writes and reads of the same keys interleaved, so a
    proxy that reorders, batches wrongly or serves a stale cached read shows
    up as a wrong reply at a known position."""
    cmds, want = [], []
    for i in range(N_PIPELINE // 4):
        k = "i%d" % (i % 64)          # JuiceFS inode shape: cacheable reads
        h = "d%d" % ((i // 2) % 16)    # directory shape; HSET at even i, HGET at i+1
        cmds.append(("SET", k, "v%d" % i)); want.append(b"+OK\r\n")
        cmds.append(("GET", k)); want.append(b"$%d\r\nv%d\r\n" % (len(b"v%d" % i), i))
        cmds.append(("INCR", "ctr")); want.append(b":%d\r\n" % (i + 1))
        if i % 2 == 0:
            cmds.append(("HSET", h, "n", i)); want.append(None)  # 1 or 0
        else:
            v = b"%d" % (i - 1)
            cmds.append(("HGET", h, "n")); want.append(b"$%d\r\n%s\r\n" % (len(v), v))
    assert len(cmds) == N_PIPELINE
    return cmds, want


@pytest.mark.timeout(60)
def test_deep_pipeline_10000_commands_replies_in_order_raw(proxy):
    """10,000 commands in one write; 10,000 replies, each the right one."""
    cmds, want = _pipeline_commands()
    with proxy.raw(timeout=30) as c:
        c.send(b"".join(encode(*x) for x in cmds))
        got = c.read_many_fast(len(cmds), timeout=30)
        c.expect_silence(0.2)
    for i, (w, g) in enumerate(zip(want, got)):
        if w is None:
            assert g.raw in (b":1\r\n", b":0\r\n"), (i, cmds[i], g)
        else:
            assert g.raw == w, "reply %d to %r: %r, expected %r" % (i, cmds[i], g.raw, w)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("protocol", [2, 3])
def test_deep_pipeline_10000_commands_redis_py(proxy, upstream, protocol):
    """The same through redis-py's non-transactional pipeline."""
    r = proxy.client(protocol=protocol)
    cmds, want = _pipeline_commands()
    p = r.pipeline(transaction=False)
    for c in cmds:
        p.execute_command(*c)
    res = p.execute()
    assert len(res) == N_PIPELINE
    for i, (c, g) in enumerate(zip(cmds, res)):
        if c[0] == "SET":
            assert g is True or g == b"OK", (i, c, g)
        elif c[0] == "GET":
            assert g == cmds[i - 1][2].encode(), (i, c, g)
        elif c[0] == "INCR":
            assert g == i // 4 + 1, (i, c, g)
        elif c[0] == "HGET":
            assert g == b"%d" % (i // 4 - 1), (i, c, g)
    assert int(upstream.client().get("ctr")) == N_PIPELINE // 4


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_50_concurrent_clients_disjoint_and_shared_keys(proxy, upstream):
    """50 threads, each with its own connection (RESP2 and RESP3 mixed):
    disjoint keys read back exactly what the thread wrote; INCR on one shared
    key from everyone counts exactly; at the end every thread sees every
    other thread's last write."""
    n_threads, n_iter = 50, 100
    errors = []
    barrier = threading.Barrier(n_threads)

    def worker(t):
        try:
            r = proxy.client(protocol=2 if t % 2 else 3)
            barrier.wait(timeout=20)
            for j in range(n_iter):
                own = "i%d" % (1000 + t)                 # cacheable shape, one per thread
                r.set(own, "t%d-%d" % (t, j))
                got = r.get(own)
                if got != b"t%d-%d" % (t, j):
                    errors.append("thread %d iter %d read %r" % (t, j, got))
                r.hset("d%d" % (1000 + t), "name", j)
                got = r.hget("d%d" % (1000 + t), "name")
                if got != b"%d" % j:
                    errors.append("thread %d iter %d hget %r" % (t, j, got))
                r.incr("shared:counter")
                r.sadd("shared:set", "%d:%d" % (t, j))
                r.get("i1")                              # everybody reads a shared key
            r.close()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append("thread %d: %r" % (t, e))

    threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not any(th.is_alive() for th in threads), "some clients hung"
    assert not errors, errors[:10]

    direct = upstream.client()
    assert int(direct.get("shared:counter")) == n_threads * n_iter
    assert direct.scard("shared:set") == n_threads * n_iter
    r = proxy.client()
    assert int(r.get("shared:counter")) == n_threads * n_iter
    for t in range(n_threads):
        assert r.get("i%d" % (1000 + t)) == b"t%d-%d" % (t, n_iter - 1)


@pytest.mark.timeout(60)
def test_concurrent_incr_on_one_key_counts_exactly_with_pipelines(proxy, upstream):
    """20 clients each pipeline 500 INCRs of the same key: the final value is
    exact and each client's replies strictly increase."""
    n, per = 20, 500
    results, errors = {}, []

    def worker(t):
        try:
            with proxy.raw(timeout=30) as c:
                c.send(encode("INCR", "hot") * per)
                vals = [f.value for f in c.read_many_fast(per, timeout=30)]
            results[t] = vals
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(40)
    assert not errors, errors
    assert int(upstream.client().get("hot")) == n * per
    seen = set()
    for vals in results.values():
        assert all(isinstance(v, int) and not isinstance(v, Err) for v in vals)
        assert vals == sorted(vals) and len(set(vals)) == per
        seen.update(vals)
    assert seen == set(range(1, n * per + 1)), "every INCR result handed out exactly once"


def test_read_after_another_clients_write_sees_it(proxy):
    """Client B reads a key (letting the proxy cache it), client A writes it,
    and B's next read, issued after A's SET returned, sees A's value."""
    a = proxy.client()
    b = proxy.client(protocol=3)
    for i in range(200):
        key = "i%d" % (i % 10)
        b.get(key)
        b.get(key)
        a.set(key, "gen%d" % i)
        assert b.get(key) == b"gen%d" % i, "B read a stale value after A's SET returned"
        hkey = "d%d" % (i % 10)
        b.hget(hkey, "name")
        a.hset(hkey, "name", i)
        assert b.hget(hkey, "name") == b"%d" % i
