"""
tests/integration/helpers.py — processes, ports, and a tiny RESP client.

Nothing here is a pytest fixture; conftest.py builds the fixtures from it.

- RedisServer: a real redis-server on a free loopback port in its own dir,
  which can be killed (SIGKILL) and started again on the same port.
- ProxyProcess: the real sidecache binary in front of an upstream.
- DirectTarget: stands in for a proxy when SIDECACHE_TARGET=direct, so the
  proxy-targeted tests can be validated against Redis itself.
- RawClient + RESP reader: send exact bytes, read exact frames (RESP2 and
  RESP3), tell apart "closed", "no data", and "frame".
"""
import ctypes
import os
import random
import resource
import signal
import socket
import subprocess
import threading
import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

HOST = "127.0.0.1"
REDIS_SERVER = os.environ.get("REDIS_SERVER_BIN", "/usr/bin/redis-server")


def _server_version():
    """(major, minor) of REDIS_SERVER ("Redis server v=6.2.14 ..."), or
    (0, 0) when it cannot tell (then no option newer than 6.0 is passed)."""
    try:
        out = subprocess.run([REDIS_SERVER, "--version"], capture_output=True,
                             text=True, timeout=10).stdout
        v = out.split("v=", 1)[1].split()[0].split(".")
        return int(v[0]), int(v[1])
    except (OSError, IndexError, ValueError, subprocess.SubprocessError):
        return 0, 0


# The suite runs on Redis 6.2 too (REDIS_SERVER_BIN): what a test needs of a
# newer server asks for it (tests/integration/conftest.py needs_redis).
REDIS_VERSION = _server_version()


# A read-only script that runs for ARGV[1] microseconds (past
# busy-reply-threshold Redis answers other clients BUSY meanwhile).
LONG_SCRIPT = ("local s = redis.call('TIME') "
               "while true do local n = redis.call('TIME') "
               "if (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > tonumber(ARGV[1]) then break end end "
               "return 1")


def busy_threshold_args(ms):
    """redis-server arguments that set busy-reply-threshold to ms."""
    return ("--busy-reply-threshold" if REDIS_VERSION >= (7, 0) else "--lua-time-limit", str(ms))

# CLIENT's subcommands on Redis 6.2, whose ACL cannot take one of them away
# ("-client|setname" is 7.0's): there a user gets "-client" and the others.
_CLIENT_SUBS_62 = ("caching", "getname", "getredir", "help", "id", "info", "kill", "list", "pause",
                   "reply", "setname", "tracking", "trackinginfo", "unblock", "unpause")


def acl_without(*subs):
    """ACL SETUSER rules that deny these CLIENT subcommands ("setname", ...)
    and allow the rest of CLIENT, on this server's version."""
    if REDIS_VERSION >= (7, 0):
        return ["-client|%s" % s for s in subs]
    return ["-client"] + ["+client|%s" % s for s in _CLIENT_SUBS_62 if s not in subs]


# ---------------------------------------------------------------------------
# Ports

_handed_out = set()


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _bindable(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((HOST, port))
        return s.getsockname()[1]
    except OSError:
        return None
    finally:
        s.close()


# A cluster node also listens on its port + 10000 (the cluster bus).
CLUSTER_BUS_OFFSET = 10000


def free_port(also_free=None):
    """A loopback port nobody listens on now and that we have not handed out
    in this session (so a redis and a proxy started together never collide).
    Drawn from below the kernel's ephemeral range where there is room: a
    port from that range can be taken by any outgoing connection (a proxy's
    own upstream connect, made before it binds its metrics port) between
    this check and the bind. With also_free (an offset), port + also_free
    must be free too (a cluster node's bus port)."""
    low = _ephemeral_low()
    for _ in range(500):
        port = _bindable(random.randrange(20000, low) if low > 21000 else 0)
        if port is None or port in _handed_out:
            continue
        if also_free is not None:
            other = port + also_free
            if other > 65535 or other in _handed_out or _bindable(other) is None:
                continue
            _handed_out.add(other)
        _handed_out.add(port)
        return port
    raise RuntimeError("no free port")


def port_accepts(port, host=HOST, timeout=0.2):
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def tail(path, nbytes=6000):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - nbytes))
            return f.read().decode("utf-8", "replace")
    except OSError as e:
        return "<no log: %s>" % e


# ---------------------------------------------------------------------------
# RESP values. Parsed replies keep their RESP type so tests can tell a RESP3
# map from a RESP2 flat array, a double from a bulk string, and so on. Every
# null ($-1, *-1, _) parses to None: Frame.raw tells which one it was.


class Simple(bytes):
    """+OK"""


class Err(bytes):
    """-ERR ... ; .code is the first word (ERR, NOAUTH, WRONGPASS ...)."""

    @property
    def code(self):
        return bytes(self).split(b" ", 1)[0].decode()

    @property
    def text(self):
        return bytes(self).decode("utf-8", "replace")


class Double(float):
    """RESP3 ,1.5"""


class BigNum(int):
    """RESP3 (123"""


class BigNumText(bytes):
    """RESP3 ( whose text is no number: Redis passes a script's big_number
    string through (EVAL "return {big_number='abc'}" 0 -> (abc)"""


class Verbatim(bytes):
    """RESP3 =txt:..."""


class RMap(list):
    """RESP3 %: list of (key, value) pairs, in wire order."""

    def todict(self):
        return {k: v for k, v in self}


class RSet(list):
    """RESP3 ~"""


class Push(list):
    """RESP3 >"""


class Attr(RMap):
    """RESP3 | (attribute map that preceded a value)"""


class Incomplete(Exception):
    pass


class ProtocolViolation(Exception):
    pass


def _line(buf, pos):
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise Incomplete()
    return bytes(buf[pos:end]), end + 2


def parse_frame(buf, pos=0):
    """Parses one RESP2/RESP3 value at buf[pos:]. Returns (value, next_pos).
    Raises Incomplete if the bytes are not all there yet."""
    if pos >= len(buf):
        raise Incomplete()
    t = chr(buf[pos])
    line, nxt = _line(buf, pos + 1)
    if t == "+":
        return Simple(line), nxt
    if t == "-":
        return Err(line), nxt
    if t == ":":
        return int(line), nxt
    if t == "(":
        try:
            return BigNum(int(line)), nxt
        except ValueError:
            return BigNumText(line), nxt
    if t == ",":
        s = line.decode()
        return Double(float(s)), nxt
    if t == "#":
        if line not in (b"t", b"f"):
            raise ProtocolViolation("bad boolean %r" % line)
        return line == b"t", nxt
    if t == "_":
        return None, nxt
    if t in "$=!":
        n = int(line)
        if n < 0:
            if t != "$":
                raise ProtocolViolation("negative length for %s" % t)
            return None, nxt
        if len(buf) < nxt + n + 2:
            raise Incomplete()
        data = bytes(buf[nxt:nxt + n])
        if buf[nxt + n:nxt + n + 2] != b"\r\n":
            raise ProtocolViolation("bulk not terminated by CRLF")
        if t == "=":
            return Verbatim(data), nxt + n + 2
        if t == "!":
            return Err(data), nxt + n + 2
        return data, nxt + n + 2
    if t in "*~>":
        n = int(line)
        if n < 0:
            return None, nxt
        items = []
        p = nxt
        for _ in range(n):
            v, p = parse_frame(buf, p)
            items.append(v)
        cls = {"*": list, "~": RSet, ">": Push}[t]
        return cls(items), p
    if t in "%|":
        n = int(line)
        pairs = []
        p = nxt
        for _ in range(n):
            k, p = parse_frame(buf, p)
            v, p = parse_frame(buf, p)
            pairs.append((k, v))
        if t == "|":
            # An attribute precedes the real value; return the value.
            v, p = parse_frame(buf, p)
            return v, p
        return RMap(pairs), p
    raise ProtocolViolation("unknown RESP type byte %r at %d" % (t, pos))


class Frame:
    """One whole reply: its exact bytes, its first type byte, its value."""

    __slots__ = ("raw", "value")

    def __init__(self, raw, value):
        self.raw = raw
        self.value = value

    @property
    def type(self):
        return chr(self.raw[0])

    def __repr__(self):
        r = self.raw if len(self.raw) < 200 else self.raw[:200] + b"..."
        return "Frame(%r)" % (r,)


def encode(*args):
    """A multibulk request."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, (int, float)):
            a = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class ConnectionClosed(Exception):
    pass


class RawClient:
    """A socket that speaks exact bytes. read_frame() returns a Frame,
    raises ConnectionClosed on EOF, socket.timeout if nothing complete
    arrives in time."""

    def __init__(self, port, host=HOST, timeout=10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.buf = bytearray()
        self.closed = False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        self.sock.sendall(data)

    def send_cmd(self, *args):
        self.send(encode(*args))

    def _fill(self, timeout):
        self.sock.settimeout(timeout)
        try:
            chunk = self.sock.recv(1 << 20)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.closed = True
            raise ConnectionClosed()
        self.buf += chunk

    def read_frame(self, timeout=None):
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            if self.buf:
                try:
                    value, end = parse_frame(self.buf, 0)
                    raw = bytes(self.buf[:end])
                    del self.buf[:end]
                    return Frame(raw, value)
                except Incomplete:
                    pass
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("no complete frame within %.1fs (have %r)"
                                     % (timeout, bytes(self.buf[:200])))
            self._fill(left)

    def read_frames(self, n, timeout=None):
        """n frames; timeout is for all of them together."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        out = []
        for _ in range(n):
            out.append(self.read_frame(max(0.001, deadline - time.monotonic())))
        return out

    def read_many_fast(self, n, timeout=None):
        """Like read_frames for very long pipelines: parses incrementally
        without rescanning what was already parsed."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        out = []
        pos = 0
        while len(out) < n:
            try:
                value, end = parse_frame(self.buf, pos)
                out.append(Frame(bytes(self.buf[pos:end]), value))
                pos = end
                continue
            except Incomplete:
                pass
            del self.buf[:pos]
            pos = 0
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("got %d of %d frames" % (len(out), n))
            self._fill(left)
        del self.buf[:pos]
        return out

    def cmd(self, *args, timeout=None):
        """Sends one command, returns its Frame."""
        self.send_cmd(*args)
        return self.read_frame(timeout)

    def call(self, *args, timeout=None):
        """Sends one command, returns the parsed value."""
        return self.cmd(*args, timeout=timeout).value

    def pipeline(self, cmds, timeout=None):
        """Pipelines commands (one write); returns their reply frames in order."""
        self.send(b"".join(encode(*c) for c in cmds))
        return self.read_frames(len(cmds), timeout)

    def raw_cmds(self, cmds, timeout=None):
        """Pipelines commands; returns their raw reply bytes in order."""
        return [f.raw for f in self.pipeline(cmds, timeout)]

    def expect_closed(self, timeout=3.0):
        """Asserts that the peer closes the connection (EOF or reset) within
        timeout, with no further frames before that. Returns leftover bytes."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("connection still open after %.1fs (pending %r)"
                                     % (timeout, bytes(self.buf)))
            try:
                self._fill(left)
            except ConnectionClosed:
                return bytes(self.buf)
            except socket.timeout:
                continue
            except OSError:
                return bytes(self.buf)

    def expect_silence(self, timeout=0.3):
        """Asserts that nothing arrives (and the connection stays open)."""
        if self.buf:
            raise AssertionError("unexpected pending bytes %r" % bytes(self.buf))
        try:
            self._fill(timeout)
        except socket.timeout:
            return
        except ConnectionClosed:
            raise AssertionError("connection closed while expecting silence")
        raise AssertionError("unexpected bytes %r" % bytes(self.buf))


# ---------------------------------------------------------------------------
# Processes


def _die_with_parent():
    """preexec_fn: the child gets SIGKILL if the test runner dies, so no
    redis-server or proxy outlives a killed pytest."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _wait_port(proc, port, timeout, what, logpath):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %s before listening on %d; log:\n%s"
                               % (what, proc.returncode, port, tail(logpath)))
        if port_accepts(port):
            return
        time.sleep(0.02)
    raise RuntimeError("%s did not listen on %d within %.0fs; log:\n%s"
                       % (what, port, timeout, tail(logpath)))


def no_retry():
    return Retry(NoBackoff(), 0)


class Endpoint:
    """Something clients connect to: host, port, and client constructors."""

    host = HOST
    port = None
    password = None
    username = None

    def client(self, protocol=2, decode=False, auth=True, **kw):
        """A redis-py client with no silent retries (a dropped connection must
        show as an error, not be hidden by a reconnect)."""
        if auth:
            kw.setdefault("password", self.password)
            kw.setdefault("username", self.username)
        kw.setdefault("socket_timeout", 10)
        kw.setdefault("socket_connect_timeout", 5)
        kw.setdefault("retry", no_retry())
        return redis.Redis(host=self.host, port=self.port, protocol=protocol,
                           decode_responses=decode, **kw)

    def raw(self, timeout=10.0, auth=False, protocol=None):
        """A RawClient. With auth=True it AUTHs first (and HELLO protocol if
        given); otherwise it sends nothing."""
        c = RawClient(self.port, self.host, timeout)
        if protocol is not None:
            args = ["HELLO", protocol]
            if auth and self.password is not None:
                args += ["AUTH", self.username or "default", self.password]
            f = c.cmd(*args)
            assert not isinstance(f.value, Err), f
        elif auth and self.password is not None:
            if self.username:
                f = c.cmd("AUTH", self.username, self.password)
            else:
                f = c.cmd("AUTH", self.password)
            assert f.raw == b"+OK\r\n", f
        return c


class RedisServer(Endpoint):
    """A redis-server on a loopback port, in its own directory."""

    def __init__(self, workdir, requirepass=None, args=(), name="redis"):
        self.workdir = str(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        self.requirepass = requirepass
        self.password = requirepass
        self.extra = [str(a) for a in args]
        self.name = name
        self.port = None
        self.proc = None
        self.starts = 0

    @property
    def logpath(self):
        return os.path.join(self.workdir, "%s-%s.log" % (self.name, self.port))

    def argv(self):
        a = [REDIS_SERVER, "--port", str(self.port), "--bind", HOST,
             "--save", "", "--appendonly", "no", "--dir", self.workdir,
             "--daemonize", "no", "--protected-mode", "no",
             "--logfile", self.logpath]
        if REDIS_VERSION >= (7, 0):
            # 7.0 refuses DEBUG unless asked; 6.2 has no such option
            a += ["--enable-debug-command", "yes"]
        if self.requirepass is not None:
            a += ["--requirepass", self.requirepass]
        return a + self.extra

    def start(self, timeout=10.0):
        """Starts on a fresh free port, or on the same port after a kill."""
        fixed = self.port is not None
        for attempt in range(5):
            if not fixed:
                self.port = free_port(CLUSTER_BUS_OFFSET if self.is_cluster_node else None)
            self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL,
                                         preexec_fn=_die_with_parent)
            self.starts += 1
            try:
                _wait_port(self.proc, self.port, timeout, "redis-server", self.logpath)
                self._wait_answers(timeout)
                return self
            except RuntimeError:
                self._reap()
                if fixed and attempt < 4:
                    time.sleep(0.2)  # same port: give the old one time to go
                    continue
                if fixed or attempt == 4:
                    raise
        return self

    @property
    def is_cluster_node(self):
        return "--cluster-enabled" in self.extra

    def _wait_answers(self, timeout):
        """Redis listens on its port before the rest of its start-up (a
        cluster node binds its bus port after), and exits if that fails:
        started means a PING gets an answer (-NOAUTH counts)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection((HOST, self.port), timeout=1.0) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(1)[:1] in (b"+", b"-"):
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server on %d did not answer PING; log:\n%s"
                                   % (self.port, tail(self.logpath)))
            time.sleep(0.02)

    def restart(self):
        """Starts again on the same port (after kill())."""
        assert self.proc is None or self.proc.poll() is not None, "still running"
        return self.start()

    def kill(self):
        """SIGKILL: the abrupt death of the upstream."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def _reap(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
        if self.proc:
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def admin(self, **kw):
        """A direct redis-py client, authenticated as default if needed."""
        return self.client(**kw)

    def describe(self):
        return "%s port %s: %s\n%s" % (self.name, self.port, " ".join(self.argv()),
                                       tail(self.logpath, 3000))


class TracedRedisServer(RedisServer):
    """A redis-server run under strace, which stops it at every system call
    (and logs its writes to /dev/null): the replies Redis writes in one pass
    of its loop then go out tens of microseconds apart instead of a few, so
    a client can act on the first before the next is written (races too
    narrow to meet otherwise). strace detaches when it is killed, and Redis
    would live on: stop and kill end Redis itself."""

    def argv(self):
        return ["strace", "-f", "-qq", "-e", "trace=write", "-o", "/dev/null"] + super().argv()

    def start(self, timeout=10.0):
        super().start(timeout)
        info = self.client().info("server")
        self.redis_pid = int(info["process_id"])
        return self

    def _end_redis(self):
        try:
            os.kill(self.redis_pid, signal.SIGKILL)
        except (AttributeError, OSError):
            pass

    def kill(self):
        self._end_redis()
        super().kill()

    def stop(self):
        self._end_redis()
        super().stop()


class ProxyProcess(Endpoint):
    is_proxy = True

    def __init__(self, binary, workdir, upstream, upstream_url=None, args=(),
                 loglevel="notice", nofile=None, env=None):
        self.binary = binary
        self.env = None if env is None else dict(os.environ, **env)  # added to the test's own
        self.nofile = nofile  # RLIMIT_NOFILE (soft, hard) to start with, or None
        self.workdir = str(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        self.upstream = upstream
        self.upstream_url = upstream_url or "redis://%s:%d" % (HOST, upstream.port)
        self.extra = [str(a) for a in args]
        self.loglevel = loglevel
        self.port = free_port()
        self.logpath = os.path.join(self.workdir, "sidecache-%d.log" % self.port)
        self.outpath = os.path.join(self.workdir, "sidecache-%d.stderr" % self.port)
        self.proc = None
        self.stopped_on_purpose = False
        # Clients of the proxy authenticate like clients of Redis.
        self.password = upstream.password
        self.username = upstream.username

    def argv(self):
        return [self.binary, "--bind", HOST, "--port", str(self.port),
                "--upstream", self.upstream_url, "--loglevel", self.loglevel,
                "--logfile", self.logpath] + self.extra

    def start(self, timeout=10.0):
        out = open(self.outpath, "wb")
        try:
            self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                         cwd=self.workdir, preexec_fn=self._preexec)
        finally:
            out.close()
        try:
            _wait_port(self.proc, self.port, timeout, "sidecache", self.logpath)
        except RuntimeError as e:
            self.kill()
            raise RuntimeError("%s\nstdout/stderr:\n%s" % (e, tail(self.outpath)))
        return self

    def _preexec(self):
        _die_with_parent()
        if self.nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, self.nofile)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def terminate(self, timeout=10.0):
        """SIGTERM; returns the exit status (negative: killed by signal)."""
        self.stopped_on_purpose = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError("sidecache did not exit within %.0fs of SIGTERM"
                                 % timeout)

    def signal(self, sig):
        """Sends a signal without waiting (the test then calls wait_exit)."""
        self.stopped_on_purpose = True
        self.proc.send_signal(sig)

    def wait_exit(self, timeout=10.0):
        """Waits for the process to exit on its own (after signal());
        returns the exit status (negative: killed by that signal)."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("sidecache still running %.0fs after the signal" % timeout)

    def kill(self):
        self.stopped_on_purpose = True
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def describe(self):
        rc = self.proc.poll() if self.proc else None
        return ("sidecache port %s (exit status %s): %s\n--- log ---\n%s\n--- stdout/stderr ---\n%s"
                % (self.port, rc, " ".join(self.argv()), tail(self.logpath),
                   tail(self.outpath, 3000)))


class DirectTarget(Endpoint):
    """SIDECACHE_TARGET=direct: the 'proxy' is the upstream Redis itself."""

    is_proxy = False

    def __init__(self, upstream):
        self.upstream = upstream
        self.port = upstream.port
        self.password = upstream.password
        self.username = upstream.username
        self.proc = None

    def alive(self):
        return True

    def terminate(self, timeout=10.0):
        raise AssertionError("terminate() needs a proxy")

    def describe(self):
        return "direct target = redis port %s" % self.port


# ---------------------------------------------------------------------------
# Small utilities


def wait_until(pred, timeout=5.0, interval=0.02, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def run_steps(ep, steps, protocol=None, auth=True, timeout=10.0):
    """Runs steps (tuples of command args) one at a time on a fresh raw
    connection to ep; returns [(step, raw reply bytes)]."""
    out = []
    with ep.raw(auth=auth, protocol=protocol, timeout=timeout) as c:
        for st in steps:
            out.append((st, c.cmd(*st).raw))
    return out


def assert_same_runs(scenario, target, ref):
    """Runs scenario(endpoint) -> [(label, value)] on the reference Redis and
    on the target, and asserts the two transcripts are identical. Returns the
    target's transcript."""
    want = scenario(ref)
    got = scenario(target)
    for i, (w, g) in enumerate(zip(want, got)):
        if w != g:
            raise AssertionError(
                "reply %d differs from Redis\n  step:   %r\n  redis:  %r\n  target: %r"
                % (i, w[0], _short(w[1]), _short(g[1])))
    assert len(want) == len(got), "transcript lengths differ: redis %d, target %d" % (
        len(want), len(got))
    return got


def assert_same_steps(target, ref, steps, protocol=None, auth=True):
    return assert_same_runs(lambda ep: run_steps(ep, steps, protocol, auth), target, ref)


def _short(v):
    if isinstance(v, (bytes, bytearray)) and len(v) > 300:
        return bytes(v[:300]) + b"...(%d bytes)" % len(v)
    return v


class Listener:
    """A listener on host (a free port, or port) whose accepted connections
    go to self._accepted (in a thread of their own), until it is closed."""

    def __init__(self, host=HOST, port=0):
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind((host, port))
        self.ls.listen(64)
        self.port = self.ls.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                s, _ = self.ls.accept()
            except OSError:
                return
            threading.Thread(target=self._accepted, args=(s,), daemon=True).start()

    def stop_accepting(self):
        """Refuses new connects from then on; the connections taken go on."""
        try:
            self.ls.shutdown(socket.SHUT_RDWR)  # (close alone leaves a blocked accept listening)
        except OSError:
            pass
        self.ls.close()


class Forwarder(Listener):
    """A TCP forwarder to the local port target, an address of its own for
    a server. target is read at each accept: changing it sends new
    connections elsewhere while those made stay (an address that follows a
    master). stop_accepting(): a node that refuses new connects, keeping
    those it has."""

    def __init__(self, target, port=0):
        self.target = target
        super().__init__(port=port)

    def _accepted(self, c):
        t = socket.create_connection((HOST, self.target))
        for a, b in ((c, t), (t, c)):
            threading.Thread(target=pump, args=(a, b), daemon=True).start()


class SeveringForwarder(Listener):
    """A TCP forwarder to the local port target whose connections sever()
    cuts off silently, as a NAT or firewall entry that expired would: the
    server's side is closed (the server frees that client), the client's
    side stays open and hears nothing, and what the client sends after it
    goes nowhere."""

    def __init__(self, target):
        self.target = target
        self.pairs = []
        self.lock = threading.Lock()
        super().__init__()

    def _accepted(self, c):
        t = socket.create_connection((HOST, self.target))
        pair = {"client": c, "server": t, "severed": False}
        with self.lock:
            self.pairs.append(pair)
        threading.Thread(target=self._pump, args=(pair, t, c), daemon=True).start()
        self._pump(pair, c, t)

    def _pump(self, pair, a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                if not pair["severed"]:
                    b.sendall(data)
        except OSError:
            pass
        if not pair["severed"]:
            for x in (a, b):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def sever(self):
        with self.lock:
            for pair in self.pairs:
                pair["severed"] = True
                try:
                    pair["server"].shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def pump(a, b):
    """One direction of a TCP forwarder: what socket a receives goes to b
    until a closes or fails; then both are shut down."""
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
