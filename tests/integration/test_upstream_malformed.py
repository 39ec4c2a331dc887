"""A malformed reply from the upstream closes that upstream connection and
fails every request pending on it with an error; the client stays
connected, and the next request is served on a fresh connection. A pinned
transaction whose connection breaks in the middle of its +QUEUED replies
gets one reply per command it sent, then loses its connection.

A real redis-server cannot be made to send a broken reply, so this is the
one place a fake upstream is used: a tiny RESP server in Python that answers
PING, GET good, and answers GET bad with bytes that are not RESP; inside
MULTI it answers +QUEUED, and SET cut with bytes that are not RESP.
"""
import socket
import threading
import time

import pytest

from helpers import ConnectionClosed, encode, free_port

BROKEN = b"$abc\r\nnot resp\r\n"


class FakeUpstream(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.port = free_port()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", self.port))
        self.sock.listen(16)
        self.connections = 0
        self.stop = False

    def run(self):
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    @staticmethod
    def read_command(f):
        line = f.readline()
        if not line:
            return None
        n = int(line[1:])
        args = []
        for _ in range(n):
            ln = int(f.readline()[1:])
            args.append(f.read(ln + 2)[:-2])
        return args

    def serve(self, conn):
        f = conn.makefile("rb")
        in_multi = False
        try:
            while True:
                cmd = self.read_command(f)
                if cmd is None:
                    return
                name = cmd[0].upper()
                if in_multi and name == b"SET" and cmd[1] == b"cut":
                    conn.sendall(BROKEN)
                elif in_multi and name not in (b"EXEC", b"DISCARD"):
                    conn.sendall(b"+QUEUED\r\n")
                elif name == b"MULTI":
                    in_multi = True
                    conn.sendall(b"+OK\r\n")
                elif name == b"PING":
                    conn.sendall(b"+PONG\r\n")
                elif name == b"GET" and cmd[1] == b"bad":
                    conn.sendall(BROKEN)
                elif name == b"GET":
                    conn.sendall(b"$2\r\nok\r\n")
                else:
                    conn.sendall(b"+OK\r\n")
        except (OSError, ValueError):
            pass
        finally:
            conn.close()

    def close(self):
        self.stop = True
        self.sock.close()


@pytest.fixture
def fake_upstream():
    fu = FakeUpstream()
    fu.start()
    yield fu
    fu.close()


@pytest.mark.proxy_only
def test_malformed_upstream_reply_fails_pending_and_reconnects(proxy_factory, fake_upstream):
    p = proxy_factory(upstream_url="redis://127.0.0.1:%d" % fake_upstream.port,
                      args=("--cache-max-memory", "0", "--upstream-connections", "1"))
    with p.raw() as c:
        assert c.cmd("GET", "good").raw == b"$2\r\nok\r\n"
        before = fake_upstream.connections
        # three requests in one write: the first reply is broken, so the
        # two behind it can never be matched and must fail too
        c.send(b"*2\r\n$3\r\nGET\r\n$3\r\nbad\r\n*2\r\n$3\r\nGET\r\n$4\r\ngood\r\n"
               b"*2\r\n$3\r\nGET\r\n$4\r\ngood\r\n")
        replies = [c.read_frame(timeout=5).raw for _ in range(3)]
        for r in replies[:1]:
            assert r.startswith(b"-ERR sidecache: malformed reply from upstream"), replies
        for r in replies[1:]:
            # pending behind the broken reply: an error, never silence and
            # never a reply that belongs to another request
            assert r.startswith(b"-ERR sidecache:"), replies
        # the client is still connected and served on a new connection
        deadline = time.monotonic() + 5
        while True:
            r = c.cmd("GET", "good").raw
            if r == b"$2\r\nok\r\n":
                break
            assert r.startswith(b"-ERR"), r
            assert time.monotonic() < deadline, r
            time.sleep(0.05)
        assert fake_upstream.connections > before, "no new upstream connection was made"
    assert p.alive()


@pytest.mark.proxy_only
def test_broken_reply_in_the_middle_of_a_queued_run(proxy_factory, fake_upstream):
    """WATCH pins; MULTI and 200 commands go as one run of replies. The 4th
    queued reply is broken: the client gets the three +QUEUED, then one
    error for each command still unanswered (EXEC included), in order and
    no more, then the proxy closes it (its transaction is gone)."""
    p = proxy_factory(upstream_url="redis://127.0.0.1:%d" % fake_upstream.port,
                      args=("--cache-max-memory", "0"))
    with p.raw() as c:
        assert c.cmd("WATCH", "w").raw == b"+OK\r\n"
        cmds = [("MULTI",)] + [("SET", "k%d" % i, "v") for i in range(3)] + [("SET", "cut", "x")]
        cmds += [("SET", "k%d" % i, "v") for i in range(3, 199)] + [("EXEC",)]
        c.send(b"".join(encode(*x) for x in cmds))
        replies = [c.read_frame(timeout=5).raw for _ in range(len(cmds))]
        assert replies[0] == b"+OK\r\n"
        assert replies[1:4] == [b"+QUEUED\r\n"] * 3, replies[:6]
        for r in replies[4:]:
            assert r.startswith(b"-ERR sidecache: malformed reply from upstream"), r
        with pytest.raises((ConnectionClosed, OSError)):
            extra = c.read_frame(timeout=5)
            raise AssertionError("a reply more than the commands sent: %r" % (extra.raw,))
    assert p.alive()


@pytest.mark.proxy_only
def test_broken_run_closing_the_client_on_its_output_limit(proxy_factory, fake_upstream):
    """The same break, with an output limit the run's error replies exceed:
    the proxy closes that client while it hands out the errors, and must
    neither free the run's record twice nor stop serving others (found by
    fuzz_session; under ASan a double release is reported)."""
    p = proxy_factory(upstream_url="redis://127.0.0.1:%d" % fake_upstream.port,
                      args=("--cache-max-memory", "0", "--client-output-buffer-limit", "2048"))
    for _ in range(3):
        with p.raw() as c:
            assert c.cmd("WATCH", "w").raw == b"+OK\r\n"
            cmds = [("MULTI",), ("SET", "k0", "v"), ("SET", "cut", "x")]
            cmds += [("SET", "k%d" % i, "v") for i in range(1, 300)] + [("EXEC",)]
            c.send(b"".join(encode(*x) for x in cmds))
            got = 0
            try:
                while True:
                    c.read_frame(timeout=5)
                    got += 1
            except (ConnectionClosed, OSError):
                pass
            assert got < len(cmds), "the output limit should have closed the client"
        assert p.alive()
        with p.raw() as other:
            assert other.cmd("PING").raw == b"+PONG\r\n"
            assert other.cmd("GET", "good").raw == b"$2\r\nok\r\n"
