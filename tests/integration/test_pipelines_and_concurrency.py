"""Deep pipelines keep their order; many concurrent clients keep exact counts
and read their own writes."""
import os
import threading
import time

import pytest

from helpers import Err, assert_same_runs, encode, wait_until

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


@pytest.mark.parametrize("protocol", [2, 3])
def test_pipeline_across_blocking_watch_and_multi_keeps_order(proxy, ref, protocol):
    """One write mixing plain commands with ones that need a connection of
    the client's own (a blocking pop that times out, WATCH/MULTI/EXEC, WAIT):
    every reply comes back in request order, as from Redis."""
    cmds = [("SET", "a", "1"), ("GET", "a"), ("BLPOP", "nolist", "0.1"), ("GET", "a"),
            ("INCR", "a"), ("WATCH", "a"), ("GET", "a"), ("MULTI",), ("INCR", "a"), ("GET", "i1"),
            ("EXEC",), ("GET", "a"), ("RPUSH", "l", "x"), ("BLPOP", "l", "1"), ("WAIT", 0, 0),
            ("MULTI",), ("SET", "i1", "t"), ("EXEC",), ("GET", "i1"), ("BRPOP", "nolist", "0.1"),
            ("SELECT", 1), ("GET", "a"), ("SELECT", 0), ("GET", "a"), ("PING",)]

    def scenario(ep):
        with ep.raw(protocol=3 if protocol == 3 else None) as c:
            c.send(b"".join(encode(*x) for x in cmds))
            return list(zip(cmds, (f.raw for f in c.read_frames(len(cmds), timeout=10))))

    got = assert_same_runs(scenario, proxy, ref)
    assert got[10][1] == b"*2\r\n:3\r\n" + (b"_\r\n" if protocol == 3 else b"$-1\r\n")
    assert got[-1][1] == b"+PONG\r\n"


def test_slow_reader_gets_all_large_replies(proxy):
    """A client pipelines 40 GETs of a 1 MB value and reads them only after a
    pause: all arrive complete and in order."""
    big = os.urandom(1 << 20)
    r = proxy.client()
    for i in range(4):
        r.set("big%d" % i, big[i:] + big[:i])
    with proxy.raw(timeout=30) as c:
        c.send(b"".join(encode("GET", "big%d" % (i % 4)) for i in range(40)))
        time.sleep(1.0)
        frames = c.read_many_fast(40, timeout=30)
    for i, f in enumerate(frames):
        j = i % 4
        assert f.value == big[j:] + big[:j], i


@pytest.mark.parametrize("args", [(), ("--upstream-connections", "1")], ids=["default-pool", "one-conn"])
def test_client_gone_with_replies_in_flight_does_not_misroute_replies(proxy_factory, args):
    """Clients that send reads and vanish before their replies arrive must
    not shift the reply stream: every other client still gets its own
    replies, in order."""
    proxy = proxy_factory(args=args)
    r = proxy.client()
    r.set("big", os.urandom(200_000))
    with proxy.raw() as b:
        for i in range(40):
            s = proxy.raw()
            s.send(encode("GET", "big") * 20 + encode("DEBUG", "SLEEP", "0.01") + encode("GET", "big"))
            s.close()
            b.send(encode("SET", "b%d" % i, "mine%d" % i) + encode("GET", "b%d" % i) + encode("ECHO", "e%d" % i))
            got = [f.raw for f in b.read_frames(3, timeout=5)]
            assert got == [b"+OK\r\n", b"$%d\r\nmine%d\r\n" % (len("mine%d" % i), i),
                           b"$%d\r\ne%d\r\n" % (len("e%d" % i), i)], (i, got)


@pytest.mark.parametrize("args", [(), ("--upstream-connections", "1")], ids=["default-pool", "one-conn"])
def test_multi_of_one_client_does_not_capture_other_clients_commands(proxy_factory, args):
    """While client A is inside MULTI (commands queued), client B's commands
    run at once and are not queued in A's transaction — even when the two
    share one upstream connection."""
    proxy = proxy_factory(args=args)
    with proxy.raw() as a, proxy.raw() as b, proxy.raw() as c:
        assert a.cmd("MULTI").raw == b"+OK\r\n"
        assert a.cmd("SET", "t", "from-a").raw == b"+QUEUED\r\n"
        assert b.cmd("SET", "other", "from-b").raw == b"+OK\r\n", "B's SET was captured by A's MULTI"
        assert c.cmd("GET", "other").raw == b"$6\r\nfrom-b\r\n"
        assert c.cmd("GET", "t").raw == b"$-1\r\n", "A's queued SET ran before EXEC"
        assert b.cmd("INCR", "n").raw == b":1\r\n"
        assert a.cmd("INCR", "n").raw == b"+QUEUED\r\n"
        assert b.cmd("INCR", "n").raw == b":2\r\n"
        assert a.cmd("EXEC").raw == b"*2\r\n+OK\r\n:3\r\n"
        assert c.cmd("GET", "t").raw == b"$6\r\nfrom-a\r\n"
        # DISCARD leaves nothing behind either.
        a.cmd("MULTI")
        a.cmd("SET", "t", "discarded")
        assert b.cmd("GET", "t").raw == b"$6\r\nfrom-a\r\n"
        assert a.cmd("DISCARD").raw == b"+OK\r\n"
        assert c.cmd("GET", "t").raw == b"$6\r\nfrom-a\r\n"


def test_whole_pipeline_written_before_reading(proxy, ref):
    """A client that writes its whole pipeline (30 MB of GETs, 107 MB of
    replies: more than the kernel's socket buffers hold) before it reads a
    single reply: Redis reads on and buffers the
    replies, so must the proxy (it once stopped reading at 4 MB of pending
    output, and the client, blocked in its write, never read: a deadlock)."""
    import socket
    import threading
    value = b"v" * 100
    n = 1000000
    for ep in (proxy, ref):
        ep.client().set("big100", value)
    payload = encode("GET", "big100") * n
    want = b"$100\r\n" + value + b"\r\n"
    s = socket.create_connection(("127.0.0.1", proxy.port), timeout=60)
    sender = threading.Thread(target=s.sendall, args=(payload,), daemon=True)
    sender.start()
    sender.join(60)
    assert not sender.is_alive(), "the proxy stopped reading a client's pipeline"
    got = 0
    buf = b""
    while got < n * len(want):
        chunk = s.recv(1 << 20)
        assert chunk, "connection closed after %d bytes" % got
        got += len(chunk)
        buf = (buf + chunk)[-len(want) * 2:]
    assert got == n * len(want) and buf.endswith(want)
    s.close()


def read_to_eof(sock, timeout=5.0):
    sock.settimeout(timeout)
    out = b""
    while True:
        d = sock.recv(65536)
        if not d:
            return out
        out += d


@pytest.mark.parametrize("case", ["pipeline", "blocked", "tunnel-reset", "tunnel-blocked-reset"])
def test_client_that_shuts_down_its_writing_gets_redis_answers(proxy, ref, case):
    """A client that sends its commands and then shuts down its writing (nc
    -N, a health check) gets the replies to all of them, then the close, as
    from Redis; a client blocked (BLPOP 0) when it does that is freed at
    once, with no reply, as by Redis. In a tunnel (CLIENT REPLY OFF) what
    follows RESET waits for RESET's reply, which a BLPOP 0 ahead of it would
    hold for ever: Redis is told of the end, and answers RESET, or frees the
    blocked connection (the client and its connection used to stay)."""
    import socket
    commands = {
        "pipeline": [("PING",), ("SET", "hc", "1"), ("GET", "hc"), ("INCR", "hc"), ("MULTI",), ("INCR", "hc"),
                     ("EXEC",), ("GET", "nokey")],
        "blocked": [("BLPOP", "never", "0"), ("PING",)],
        "tunnel-reset": [("CLIENT", "REPLY", "OFF"), ("SET", "hc", "2"), ("RESET",), ("PING",), ("GET", "hc")],
        "tunnel-blocked-reset": [("CLIENT", "REPLY", "OFF"), ("BLPOP", "never", "0"), ("RESET",), ("PING",)],
    }[case]

    def scenario(ep):
        with socket.create_connection((ep.host, ep.port)) as s:
            s.sendall(b"".join(encode(*c) for c in commands))
            s.shutdown(socket.SHUT_WR)
            return [read_to_eof(s)]

    assert_same_runs(scenario, proxy, ref)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("head,n", [
    ([("RPUSH", "l", "x"), ("BLPOP", "l", "0")], 20000),
    ([("CLIENT", "REPLY", "ON"), ("DEBUG", "SLEEP", "0.3"), ("RESET",)], 5000),
], ids=["blpop-answered-at-once", "tunnel-reset-behind-a-slow-command"])
def test_a_long_pipeline_then_shutdown_all_runs(proxy, upstream, ref, head, n):
    """A client writes a command the proxy must wait on (a BLPOP that its
    list answers at once; a RESET in a tunnel behind a slow command), then
    thousands of INCRs, and shuts down its writing while many are still
    unread in its socket: Redis runs every INCR, and so must the proxy.
    Seen closed with bytes unread, the first client was taken for one
    still blocked, and the second's input was not read on after RESET's
    reply: thousands of INCRs were dropped (review-diff-today3)."""
    import socket

    def scenario(ep):
        server = upstream if ep is proxy else ref
        with server.raw(auth=True) as d:
            d.cmd("DEL", "l", "c")
        s = socket.create_connection((ep.host, ep.port))
        if ep.password:
            s.sendall(encode("AUTH", ep.password))
            assert s.recv(5) == b"+OK\r\n"
        # (read on meanwhile: the replies must not hold the requests back)
        reader = threading.Thread(target=read_to_eof, args=(s, 30.0), daemon=True)
        reader.start()
        s.sendall(b"".join(encode(*c) for c in head) + encode("INCR", "c") * n)
        s.shutdown(socket.SHUT_WR)
        reader.join(30)
        s.close()
        with server.raw(auth=True) as d:
            wait_until(lambda: d.cmd("GET", "c").value == b"%d" % n, timeout=10, interval=0.1,
                       what="every INCR run (%s)" % ("sidecache" if ep is proxy else "Redis"))
        return [n]

    assert_same_runs(scenario, proxy, ref)


@pytest.mark.parametrize("state_cmd", [("SELECT", "1"), ("HELLO", "3")])
def test_commands_read_before_the_client_closes_all_run(proxy, upstream, ref, state_cmd):
    """A client writes commands and closes at once, reading nothing: Redis
    runs every command it read. So does the proxy, where some of them wait
    for a reply before they may go (after a WATCH transaction's DISCARD, a
    state change waits for the commands before it): they go when it comes,
    and only then is the client closed."""
    import socket
    db = 1 if state_cmd[0] == "SELECT" else 0
    rest = [("DISCARD",), ("GET", "z"), state_cmd, ("SET", "a", "x"), ("SELECT", "0"), ("SET", "b", "y")]
    for ep, server in ((proxy, upstream), (ref, ref)):
        with socket.create_connection((ep.host, ep.port)) as s:
            if ep.password:
                s.sendall(encode("AUTH", ep.password))
                assert s.recv(5) == b"+OK\r\n"
            s.sendall(encode("WATCH", "k") + encode("MULTI"))
            got = b""
            while len(got) < 10:
                got += s.recv(10 - len(got))
            assert got == b"+OK\r\n+OK\r\n"
            s.sendall(b"".join(encode(*c) for c in rest))
        wait_until(lambda: server.client(db=db).get("a") == b"x" and server.client().get("b") == b"y",
                   timeout=5, interval=0.05, what="every command sent before the close to run (%s)" % ep)


def test_client_gone_with_its_reply_unread_is_closed(proxy_factory, upstream):
    """A client shuts down its writing after a GET of a large value, then
    resets its connection without reading the reply: the proxy, closing
    that client once its reply is written, gets the reset while writing and
    closes it then (the reply can never be written)."""
    import socket
    from cachehelpers import Stats
    upstream.client().set("big", b"x" * (8 << 20))
    p = proxy_factory()
    st = Stats(p)
    base = st.get()["connected_clients"]
    s = socket.create_connection((p.host, p.port))
    if p.password:
        s.sendall(encode("AUTH", p.password))
        assert s.recv(5) == b"+OK\r\n"
    s.sendall(encode("GET", "big"))
    s.shutdown(socket.SHUT_WR)
    wait_until(lambda: st.get()["connected_clients"] == base + 1, timeout=5, interval=0.05, what="the client")
    time.sleep(0.3)   # the reply is on its way, most of it unwritten
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()         # a reset
    wait_until(lambda: st.get()["connected_clients"] == base, timeout=5, interval=0.05,
               what="the proxy to close the client whose reply cannot be written")
