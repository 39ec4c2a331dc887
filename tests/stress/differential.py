#!/usr/bin/env python3
"""
tests/stress/differential.py - randomized differential test: sidecache (in
front of redis-server A) against redis-server B directly (not part of `make
test`, which runs a few seeds of it: tests/integration/test_differential.py).

The same seeded command stream goes to both, over raw sockets speaking RESP;
every reply is compared byte for byte, with a few normalizations for what
differs between any two servers (HELLO's id, TTL/PTTL within a tolerance,
the element order of unordered collections and DUMP of hash tables: see
same()). The stream covers strings, hashes, lists, sets, sorted sets,
streams, scripts (JuiceFS's lookup scripts among them) and functions,
transactions with queued and run-time errors, WATCH broken from the other
connection, pipelines (write runs that sidecache batches), bursts of
cacheable reads (hits, MGET merges), RESP2 and RESP3 sessions, inline
commands, wrong arity and unknown commands. With --conns 2 two connections
take turns, strictly serialized on both sides, so the cache must stay
coherent across connections of one proxy. Needs Redis 7.0 or newer
(FUNCTION, EXPIRE NX, ...).

usage:
  differential.py --bin build/sidecache --seed N --count K [--seeds S] [--conns 2]
                  [--config juicefs|rules|prefix|optin|default|nobatch|nowatchahead]
                  [--minimize] [--keep-going]
  differential.py --bin ... --replay FILE.json      (replay a saved step list)

REDIS_SERVER_BIN picks the redis-server (default: the one on PATH). On the
first difference it prints the seed, the step, the command and both replies,
and saves the steps up to it in /tmp/differential-out/seedN-CONFIG-cC.json;
--minimize then shrinks the step list (ddmin; each try on fresh servers and
a fresh proxy) and prints a short reproducer.
"""
import argparse
import hashlib
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from juicefs_scripts import LOOKUP_V0, LOOKUP_V1

HOST = "127.0.0.1"
OUT = "/tmp/differential-out"
REDIS_SERVER = os.environ.get("REDIS_SERVER_BIN", "redis-server")

# ---------------------------------------------------------------- processes


def free_port():
    s = socket.socket()
    s.bind((HOST, 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_ping(port, proc, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError("process exited rc=%s" % proc.returncode)
        try:
            s = socket.create_connection((HOST, port), 0.5)
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            d = s.recv(100)
            s.close()
            if d.startswith(b"+PONG"):
                return
        except OSError:
            pass
        time.sleep(0.03)
    raise RuntimeError("port %d never answered PING" % port)


class Redis:
    def __init__(self, tmp):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(dir=tmp)
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", HOST, "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--daemonize", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_ping(self.port, self.proc)

    def reset(self):
        s = Conn(self.port)
        for c in (["FLUSHALL"], ["SCRIPT", "FLUSH"], ["FUNCTION", "FLUSH"], ["CONFIG", "RESETSTAT"]):
            s.send(enc(c))
            s.read_reply()
        s.close()

    def stop(self):
        self.proc.kill()
        self.proc.wait()


CONFIGS = {
    "juicefs": [],
    "rules": ["--profile", "none", "--cache-rule", "GET", "*", "--cache-rule", "HGET", "*"],
    "prefix": ["--key-prefix", "{1}"],
    "optin": ["--tracking-mode", "optin", "--cache-rule", "GET", "k*", "--cache-rule", "HGET", "h*"],
    "default": ["--tracking-mode", "default", "--cache-rule", "GET", "k*", "--cache-rule", "HGET", "h*"],
    "nowatchahead": ["--watch-ahead", "no", "--cache-rule", "GET", "k*", "--cache-rule", "HGET", "h*"],
    "nobatch": ["--batch-max-commands", "0", "--cache-rule", "GET", "k*", "--cache-rule", "HGET", "h*"],
}


class Proxy:
    def __init__(self, binpath, upstream_port, config, tmp):
        self.port = free_port()
        self.log = os.path.join(tmp, "sidecache-%d.log" % self.port)
        args = [binpath, "--upstream", "redis://%s:%d" % (HOST, upstream_port), "--bind", HOST,
                "--port", str(self.port), "--logfile", self.log] + CONFIGS[config]
        self.args = args
        # (a sanitized build reports on stderr, at exit too: kept for stop)
        self.stderr_path = os.path.join(tmp, "sidecache-%d.stderr" % self.port)
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err)
        wait_ping(self.port, self.proc)
        # wait until tracking is active (the cache serves hits only then)
        end = time.time() + 10
        while time.time() < end:
            c = Conn(self.port)
            c.send(enc(["INFO", "sidecache"]))
            r = c.read_reply()
            c.close()
            if b"tracking_state:active" in r:
                break
            time.sleep(0.05)

    def info(self):
        c = Conn(self.port)
        c.send(enc(["INFO", "sidecache"]))
        r = c.read_reply()
        c.close()
        d = {}
        for line in r.decode("latin1").split("\r\n"):
            if ":" in line:
                k, v = line.split(":", 1)
                d[k] = v
        return d

    def stop(self):
        """Stops the proxy as an operator would (SIGTERM), so that a
        sanitized build's exit-time checks (leaks) run. Raises when it did
        not exit 0 (a crash, a sanitizer report, a stop that hung), with the
        end of its stderr and log."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc = self.proc.returncode
        if rc != 0:
            tails = []
            for path in (self.stderr_path, self.log):
                try:
                    with open(path, "rb") as f:
                        tails.append("%s:\n%s" % (path, f.read()[-4000:].decode("latin1")))
                except OSError:
                    pass
            raise RuntimeError("sidecache exited with status %s after SIGTERM (port %d)\n%s"
                               % (rc, self.port, "\n".join(tails)))


# ---------------------------------------------------------------- RESP


def b(x):
    if isinstance(x, bytes):
        return x
    if isinstance(x, int):
        return str(x).encode()
    return x.encode("latin1")


def enc(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = b(a)
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def frame_end(buf, i):
    """End index of the RESP value starting at i, or -1 if incomplete."""
    j = buf.find(b"\r\n", i)
    if j < 0:
        return -1
    t = buf[i:i + 1]
    k = j + 2
    if t in (b"+", b"-", b":", b"_", b",", b"#", b"("):
        return k
    n = int(buf[i + 1:j])
    if t in (b"$", b"=", b"!"):
        if n < 0:
            return k
        return k + n + 2 if len(buf) >= k + n + 2 else -1
    if t in (b"*", b"~", b">"):
        if n < 0:
            return k
        for _ in range(n):
            k = frame_end(buf, k)
            if k < 0:
                return -1
        return k
    if t in (b"%", b"|"):
        for _ in range(2 * n):
            k = frame_end(buf, k)
            if k < 0:
                return -1
        if t == b"|":  # an attribute precedes the real reply
            return frame_end(buf, k)
        return k
    raise ValueError("bad RESP type %r at %d: %r" % (t, i, bytes(buf[i:i + 40])))


def split_top(raw):
    """(header, [element bytes]) of an aggregate reply, or None."""
    t = raw[:1]
    if t not in (b"*", b"~", b"%"):
        return None
    j = raw.find(b"\r\n")
    n = int(raw[1:j])
    if n < 0:
        return None
    k = j + 2
    els = []
    for _ in range(n * (2 if t == b"%" else 1)):
        e = frame_end(raw, k)
        els.append(raw[k:e])
        k = e
    return raw[:j + 2], els


class Conn:
    def __init__(self, port, timeout=15.0):
        self.s = socket.create_connection((HOST, port), 5)
        self.s.settimeout(timeout)
        self.buf = bytearray()
        self.closed = False

    def send(self, data):
        self.s.sendall(data)

    def read_reply(self):
        while True:
            if self.buf:
                e = frame_end(self.buf, 0)
                if e >= 0:
                    r = bytes(self.buf[:e])
                    del self.buf[:e]
                    return r
            try:
                d = self.s.recv(1 << 20)
            except socket.timeout:
                return b"<TIMEOUT; partial %r>" % bytes(self.buf[:200])
            except OSError as ex:
                self.closed = True
                return b"<CONN ERROR %s>" % str(ex).encode()
            if not d:
                self.closed = True
                return b"<CLOSED; partial %r>" % bytes(self.buf[:200])
            self.buf += d

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


# ---------------------------------------------------------------- generator

SCRIPTS = [
    LOOKUP_V1, LOOKUP_V0,
    "return redis.call('get',KEYS[1])",
    "return redis.call('set',KEYS[1],ARGV[1])",
    "return redis.call('hget',KEYS[1],ARGV[1])",
    "return redis.call('incr','i1')",  # undeclared write of a cached key
    "return {1,2,{3,'x'},redis.call('get',KEYS[1])}",
    "redis.setresp(3); return redis.call('hgetall',KEYS[1])",
    "redis.setresp(3); return {double=3.5}",
    "return redis.error_reply('MY err')",
    "return redis.status_reply('FINE')",
    "return 3.99",
    "return true",
    "return redis.call('del',KEYS[1])",
    "return redis.pcall('incr',KEYS[1])",
    "error('boom')",
    "return redis.call('nosuchcmd')",
]
SHAS = [hashlib.sha1(s.encode()).hexdigest() for s in SCRIPTS]
FUNC_LIB = ("#!lua name=lib1\n"
            "redis.register_function('fget', function(keys, args) return redis.call('get', keys[1]) end)\n"
            "redis.register_function('fset', function(keys, args) return redis.call('set', keys[1], args[1]) end)\n"
            "redis.register_function{function_name='fro', callback=function(keys, args) "
            "return redis.call('get', keys[1]) end, flags={'no-writes'}}\n")
FUNC_LIB2 = ("#!lua name=lib1\n"
             "redis.register_function('fget', function(keys, args) return 'v2' end)\n")


SESSION_CMDS = {"SELECT", "HELLO", "CLIENT", "RESET", "MULTI", "WATCH", "SWAPDB", "FLUSHDB", "SCRIPT",
                "FUNCTION", "EVAL", "EVALSHA", "FCALL", "FCALL_RO"}


def dentry(ino, typ=1):
    return bytes([typ]) + ino.to_bytes(8, "big")


class Gen:
    def __init__(self, rng, config, ttl_mode=False):
        self.r = rng
        self.ttl_mode = ttl_mode
        pre = "{1}" if config == "prefix" else ""
        self.pre = pre
        self.skeys = [pre + k for k in ["i1", "i2", "i3", "i10", "k1", "k2"]] + \
            ["i0", "i4\r\n\x00x", "", "k\x00", "{1}i1", "i1"]
        self.hkeys = [pre + k for k in ["d1", "d2", "h1"]] + ["d\r\n1", "h2", "d1"]
        self.okeys = ["l1", "s1", "z1", "x1", pre + "i5", pre + "d5"]
        self.fields = ["f1", "f2", "n1", "n2", "\x00\r\n", ""]
        self.vals = ["", "v", "1", "12", "-3", "3.5", "abc\r\ndef", "\x00\xff\r\n", "x" * 300,
                     "9223372036854775807"]
        self.stream_id = 1
        # connections a stray MULTI may have left in a transaction: no DUMP
        # is queued there (its EXEC reply is compared as a whole)
        self.in_multi = set()

    def key(self):
        r = self.r.random()
        if r < 0.5:
            return self.r.choice(self.skeys)
        if r < 0.8:
            return self.r.choice(self.hkeys)
        return self.r.choice(self.okeys)

    def val(self):
        r = self.r.random()
        if r < 0.01:
            return "B" * (1 << 20)  # 1 MB
        if r < 0.03:
            return "m" * self.r.choice([65000, 70000])  # around cache-max-value
        if r < 0.1:
            return dentry(self.r.choice([1, 2, 3, 10, 4503599627370496]))
        if r < 0.13:
            return bytes(self.r.randrange(256) for _ in range(self.r.randrange(1, 20)))
        return self.r.choice(self.vals)

    def field(self):
        return self.r.choice(self.fields)

    def ex(self):
        return self.r.choice([str(self.r.randrange(1000, 100000))])

    def cmd(self, nodump=False):
        c = self.cmd1()
        while nodump and c[0] == "DUMP":  # DUMP of a hashtable set varies with the hash seed
            c = self.cmd1()
        return c

    def cmd1(self):
        r, k, v = self.r, self.key, self.val
        choices = [
            (8, lambda: ["GET", k()]),
            (2, lambda: ["get", k()]),
            (1, lambda: ["gEt", k()]),
            (5, lambda: ["SET", k(), v()]),
            (1, lambda: ["SET", k(), v(), r.choice(["NX", "XX", "GET", "KEEPTTL"])]),
            (1, lambda: ["SET", k(), v(), "EX", self.ex()]),
            (1, lambda: ["SETNX", k(), v()]),
            (3, lambda: ["MGET"] + [k() for _ in range(r.randrange(1, 6))]),
            (2, lambda: ["MGET"] + [self.pre + "i%d" % r.choice([1, 2, 3, 10]) for _ in range(r.randrange(1, 6))]),
            (2, lambda: ["MSET"] + sum([[k(), v()] for _ in range(r.randrange(1, 4))], [])),
            (1, lambda: ["MSETNX"] + sum([[k(), v()] for _ in range(r.randrange(1, 3))], [])),
            (8, lambda: ["HGET", k(), self.field()]),
            (1, lambda: ["hget", k(), self.field()]),
            (4, lambda: ["HSET", k(), self.field(), v()] + ([self.field(), v()] if r.random() < 0.3 else [])),
            (1, lambda: ["HSETNX", k(), self.field(), v()]),
            (2, lambda: ["HGETALL", k()]),
            (2, lambda: ["HMGET", k()] + [self.field() for _ in range(r.randrange(1, 4))]),
            (2, lambda: ["HDEL", k()] + [self.field() for _ in range(r.randrange(1, 3))]),
            (1, lambda: ["HINCRBY", k(), self.field(), str(r.randrange(-5, 5))]),
            (1, lambda: ["HEXISTS", k(), self.field()]),
            (1, lambda: ["HLEN", k()]),
            (1, lambda: ["HKEYS", k()]),
            (2, lambda: ["DEL"] + [k() for _ in range(r.randrange(1, 4))]),
            (1, lambda: ["UNLINK"] + [k() for _ in range(r.randrange(1, 3))]),
            (2, lambda: ["EXISTS"] + [k() for _ in range(r.randrange(1, 3))]),
            (2, lambda: ["TYPE", k()]),
            (2, lambda: ["TTL", k()]),
            (1, lambda: ["PTTL", k()]),
            (2, lambda: ["EXPIRE", k(), self.ex()] + ([r.choice(["NX", "XX", "GT", "LT"])] if r.random() < 0.3 else [])),
            (1, lambda: ["PERSIST", k()]),
            (3, lambda: ["INCR", k()]),
            (1, lambda: ["INCRBY", k(), str(r.randrange(-100, 100))]),
            (1, lambda: ["INCRBYFLOAT", k(), r.choice(["1.5", "-0.1", "1e3", "abc"])]),
            (1, lambda: ["DECR", k()]),
            (2, lambda: ["APPEND", k(), v()]),
            (1, lambda: ["STRLEN", k()]),
            (1, lambda: ["GETRANGE", k(), str(r.randrange(-5, 5)), str(r.randrange(-5, 10))]),
            (1, lambda: ["SETRANGE", k(), str(r.randrange(0, 12)), v()]),
            (2, lambda: ["GETDEL", k()]),
            (2, lambda: ["GETEX", k()] + r.choice([[], ["PERSIST"], ["EX", self.ex()], ["PX", "100000000"]])),
            (1, lambda: ["GETSET", k(), v()]),
            (2, lambda: ["LPUSH", k()] + [v() for _ in range(r.randrange(1, 3))]),
            (1, lambda: ["RPUSH", k(), v()]),
            (2, lambda: ["LRANGE", k(), "0", str(r.randrange(-1, 5))]),
            (1, lambda: ["LPOP", k()] + ([str(r.randrange(0, 3))] if r.random() < 0.3 else [])),
            (1, lambda: ["LLEN", k()]),
            (1, lambda: ["BLPOP", k(), "0.01"]),
            (2, lambda: ["SADD", k()] + [r.choice(["a", "b", "1", "2", "\x00"]) for _ in range(r.randrange(1, 3))]),
            (2, lambda: ["SMEMBERS", k()]),
            (1, lambda: ["SISMEMBER", k(), r.choice(["a", "1"])]),
            (1, lambda: ["SCARD", k()]),
            (2, lambda: ["ZADD", k(), r.choice(["1", "2.5", "-1", "inf", "x"]), r.choice(["a", "b", "c"])]),
            (2, lambda: ["ZRANGE", k(), "0", "-1"] + (["WITHSCORES"] if r.random() < 0.5 else [])),
            (1, lambda: ["ZSCORE", k(), r.choice(["a", "b"])]),
            (1, lambda: ["ZINCRBY", k(), "1.5", "a"]),
            (1, lambda: self.xadd()),
            (1, lambda: ["XRANGE", k(), "-", "+"]),
            (1, lambda: ["XLEN", k()]),
            (1, lambda: ["OBJECT", "ENCODING", k()]),
            (1, lambda: ["DUMP", k()]),
            (1, lambda: ["RENAME", k(), k()]),
            (1, lambda: ["RENAMENX", k(), k()]),
            (1, lambda: ["COPY", k(), k()] + r.choice([[], ["REPLACE"], ["DB", "1"], ["DB", "1", "REPLACE"]])),
            (1, lambda: ["MOVE", k(), r.choice(["0", "1", "2"])]),
            (0.5, lambda: ["SELECT", r.choice(["0", "0", "0", "1", "2", "x", "99"])]),
            (0.3, lambda: ["SWAPDB", r.choice(["0", "1"]), r.choice(["1", "2"])]),
            (0.2, lambda: ["FLUSHDB"]),
            (1, lambda: ["DBSIZE"]),
            (1, lambda: ["KEYS", r.choice(["*", "i*", "d?"])]),
            (0.7, lambda: self.eval()),
            (0.7, lambda: self.evalsha()),
            (1, lambda: ["SCRIPT", "LOAD", r.choice(SCRIPTS)]),
            (1, lambda: ["SCRIPT", "EXISTS"] + [r.choice(SHAS) for _ in range(r.randrange(1, 3))]),
            (0.1, lambda: ["SCRIPT", "FLUSH"]),
            (3, lambda: self.lookup()),
            (0.5, lambda: ["FUNCTION", "LOAD"] + (["REPLACE"] if r.random() < 0.5 else []) + [r.choice([FUNC_LIB, FUNC_LIB2])]),
            (0.2, lambda: ["FUNCTION", "DELETE", "lib1"]),
            (0.5, lambda: [r.choice(["FCALL", "FCALL_RO"]), r.choice(["fget", "fset", "fro", "nof"]), "1", k(), v()]),
            (0.15, lambda: ["MULTI"]),
            (1, lambda: ["EXEC"]),
            (1, lambda: ["DISCARD"]),
            (0.1, lambda: ["WATCH"] + [k() for _ in range(r.randrange(1, 3))]),
            (1.5, lambda: ["UNWATCH"]),
            (1, lambda: ["PING"] + ([v()] if r.random() < 0.5 else [])),
            (1, lambda: ["ECHO", v()]),
            (1, lambda: ["CLIENT", "SETNAME", r.choice(["n1", "", "a b", "x\x00"])]),
            (1, lambda: ["CLIENT", "GETNAME"]),
            (0.5, lambda: ["HELLO", r.choice(["2", "3"])]),
            (0.3, lambda: ["HELLO", r.choice(["2", "3", "4", "x"]), "SETNAME", r.choice(["hn", "a b"])]),
            (0.3, lambda: ["RESET"]),
            (1, lambda: self.bad()),
            (0.5, lambda: ["SORT", k(), "ALPHA"] + (["STORE", k()] if r.random() < 0.3 else [])),
            (0.5, lambda: ["RESTORE", k(), "0", self.r.choice(self.dumps)] + (["REPLACE"] if r.random() < 0.6 else [])),
        ]
        tot = sum(w for w, _ in choices)
        x = r.random() * tot
        for w, f in choices:
            x -= w
            if x <= 0:
                return f()
        return choices[0][1]()

    dumps = []

    def xadd(self):
        if self.r.random() < 0.8:
            self.stream_id += 1
            i = self.stream_id
        else:
            i = self.r.randrange(0, 5)
        return ["XADD", self.key(), "%d-%d" % (i, self.r.randrange(0, 3)), "f", self.val()]

    def eval(self):
        s = self.r.choice(SCRIPTS[2:])
        n = self.r.choice([0, 1, 1, 1, 2])
        return ["EVAL", s, str(n)] + [self.key() for _ in range(n)] + [self.val()]

    def evalsha(self):
        i = self.r.randrange(len(SCRIPTS))
        sha = SHAS[i]
        if self.r.random() < 0.1:
            sha = sha.upper()
        if i < 2:
            return ["EVALSHA", sha, "2", self.r.choice(self.hkeys), self.r.choice(self.fields)]
        n = self.r.choice([0, 1, 1])
        return ["EVALSHA", sha, str(n)] + [self.key() for _ in range(n)] + [self.val()]

    def lookup(self):
        r = self.r
        if r.random() < 0.5:
            return ["HSET", r.choice([self.pre + "d1", self.pre + "d2"]), r.choice(["n1", "n2", "n3"]),
                    r.choice([dentry(r.choice([1, 2, 3, 10, 4503599627370496])), "short"])]
        if r.random() < 0.3:
            return ["SET", self.pre + "i%d" % r.choice([1, 2, 3, 10]), self.val()]
        sha = SHAS[r.choice([0, 1])]
        return ["EVALSHA", sha, "2", r.choice([self.pre + "d1", self.pre + "d2", "d3"]),
                r.choice(["n1", "n2", "n3"])]

    def bad(self):
        r = self.r
        return r.choice([
            ["GET"], ["GET", "a", "b"], ["SET", "k1"], ["HGET", "d1"], ["HGET", "d1", "a", "b"],
            ["MGET"], ["NOSUCHCMD", "a"], ["nosuch"], ["EVALSHA", "abc", "0"], ["EVAL", "return 1", "x"],
            ["EVALSHA", SHAS[0], "2", "d1"], ["EXEC", "x"], ["MULTI", "x"], ["WATCH"], ["CLIENT", "NOSUCH"],
            ["SELECT"], ["PING", "a", "b"], ["ECHO"], ["HELLO", "3", "AUTH", "u"], ["OBJECT", "NOSUCH", "k"],
            ["EXPIRE", "k1", "abc"], ["INCR", "k1", "k2"], ["CLIENT", "SETNAME"], ["MSET", "a"],
        ])

    def step(self, conn=0):
        """One step on connection conn: (commands, pipelined?)."""
        cmds, pipe = self.step1(conn)
        for c in cmds:
            args = c[1].split() if c[0] == "inline" else c
            name = args[0].upper() if isinstance(args[0], str) else ""
            if c[0] == "reconnect" or (name in ("EXEC", "DISCARD", "RESET") and len(args) == 1):
                self.in_multi.discard(conn)
            elif name == "MULTI":  # (MULTI x, refused, too: no harm)
                self.in_multi.add(conn)
        return cmds, pipe

    def step1(self, conn):  # noqa: C901
        r = self.r
        x = r.random()
        if x < 0.08:  # transaction block
            cmds = []
            if r.random() < 0.4:
                cmds.append(["WATCH"] + [self.key() for _ in range(r.randrange(1, 3))])
                if r.random() < 0.5:
                    cmds.append(["GET", self.key()])
            cmds.append(["MULTI"])
            for _ in range(r.randrange(0, 7)):
                y = r.random()
                if y < 0.1:
                    cmds.append(self.bad())
                elif y < 0.2:
                    cmds.append(self.cmd(True))
                else:
                    c = self.cmd(True)
                    while c[0] in SESSION_CMDS:
                        c = self.cmd(True)
                    cmds.append(c)
            cmds.append(r.choice([["EXEC"], ["EXEC"], ["EXEC"], ["DISCARD"]]))
            return cmds, r.random() < 0.5
        if x < 0.30:  # read burst of cacheable keys (hits)
            ks = [self.pre + "i%d" % r.choice([1, 2, 3, 10]) for _ in range(3)]
            cmds = []
            for _ in range(r.randrange(3, 15)):
                y = r.random()
                if y < 0.4:
                    cmds.append([r.choice(["GET", "get"]), r.choice(ks)])
                elif y < 0.7:
                    cmds.append(["HGET", self.pre + r.choice(["d1", "d2"]), r.choice(["n1", "n2", "f1"])])
                elif y < 0.85:
                    cmds.append(["MGET"] + [r.choice(ks) for _ in range(r.randrange(1, 4))])
                else:
                    cmds.append(self.lookup())
            return cmds, r.random() < 0.3
        if x < 0.38:  # pipeline
            n = r.choice([2, 5, 10, 30, 100, 300])
            if r.random() < 0.5:  # a run of writes (batched by the proxy)
                cmds = [r.choice([["SET", self.key(), self.val()], ["HSET", self.key(), self.field(), self.val()],
                                  ["DEL", self.key()], ["INCR", self.key()], ["HDEL", self.key(), self.field()],
                                  ["GET", self.key()] if r.random() < 0.1 else ["APPEND", self.key(), "z"]])
                        for _ in range(n)]
            else:
                cmds = [self.cmd(True) for _ in range(n)]
            return cmds, True
        if x < 0.395:  # a new session on this connection
            return [("reconnect", r.choice(["2", "3"]))], False
        if x < 0.41:  # inline command
            return [("inline", r.choice(["PING", "GET i1", "get k1", "HGET d1 n1", "SET i2 inl", "EXISTS i1 i2",
                                          "MGET i1 i2", "ECHO \"a\\r\\nb\"", "GET 'i1'", "MULTI", "EXEC",
                                          "DISCARD", "WATCH i1", "WATCH i1 d1", "UNWATCH", "SET i1 x",
                                          "HSET d1 n1 y", "INCR i3"]))], False
        return [self.cmd(conn in self.in_multi)], False


# ---------------------------------------------------------------- compare

TTL_CMDS = {b"TTL": 2, b"PTTL": 2000}
UNORDERED = {b"SMEMBERS", b"HGETALL", b"HKEYS", b"HVALS", b"KEYS", b"SINTER", b"SUNION"}


def cmd_name(c):
    if isinstance(c, tuple) and c[0] == "reconnect":
        return b"RECONNECT"
    if isinstance(c, tuple):
        return c[1].split()[0].upper().encode()
    return b(c[0]).upper()


def normalize(c, raw):
    name = cmd_name(c)
    if name in (b"HELLO", b"EXEC"):
        raw = re.sub(rb"(\$2\r\nid\r\n|\+id\r\n):\d+\r\n", rb"\1:ID\r\n", raw)
    if name in UNORDERED:
        st = split_top(raw)
        if st:
            hdr, els = st
            if raw[:1] == b"%" or (name == b"HGETALL" and raw[:1] == b"*"):
                pairs = sorted(zip(els[0::2], els[1::2]))
                els = [x for p in pairs for x in p]
            else:
                els = sorted(els)
            raw = hdr + b"".join(els)
    return raw


def deep_sort(raw):
    """Canonical form with every aggregate's elements (map pairs) sorted."""
    st = split_top(raw)
    if not st:
        return raw
    hdr, els = st
    els = [deep_sort(e) for e in els]
    if raw[:1] == b"%":
        pairs = sorted(zip(els[0::2], els[1::2]))
        els = [x for p in pairs for x in p]
    else:
        els = sorted(els)
    return hdr + b"".join(els)


SORT_DEEP = {b"EXEC", b"EVAL", b"EVALSHA", b"FCALL", b"FCALL_RO"}


TOK = re.compile(rb"(:-?\d+\r\n)")


def close_ints(a, d):
    """Equal but for integers >= 1000 that differ by <= 2000 (TTL/PTTL in EXEC or scripts)."""
    ta, td = TOK.split(a), TOK.split(d)
    if len(ta) != len(td):
        return False
    for x, y in zip(ta, td):
        if x == y:
            continue
        if not (x.startswith(b":") and y.startswith(b":")):
            return False
        x, y = int(x[1:-2]), int(y[1:-2])
        if x < 1000 or y < 1000 or abs(x - y) > 2000:
            return False
    return True


def same(c, a, d):
    if a == d:
        return True
    name = cmd_name(c)
    if name == b"DUMP":  # a set/hash in a hashtable dumps in hash-seed order
        return len(a) == len(d)
    if name in SORT_DEEP:
        na, nd = normalize(c, a), normalize(c, d)
        # (in order first: sorted, a PTTL 1 ms apart may line up against a TTL)
        if close_ints(na, nd):
            return True
        # (close_ints holds for equal bytes too)
        if close_ints(deep_sort(na), deep_sort(nd)):
            return True
    if name in TTL_CMDS:
        ma, md = re.match(rb":(-?\d+)\r\n$", a), re.match(rb":(-?\d+)\r\n$", d)
        if ma and md:
            x, y = int(ma.group(1)), int(md.group(1))
            return (x < 0) == (y < 0) and (x == y or (x >= 0 and abs(x - y) <= TTL_CMDS[name]))
    return normalize(c, a) == normalize(c, d)


def show(x, n=300):
    r = repr(x)
    return r if len(r) <= n else r[:n] + "...(%d bytes)" % len(x)


def wire(c):
    if isinstance(c, tuple):
        return b(c[1]) + b"\r\n"
    return enc(c)


# ---------------------------------------------------------------- runner


class Env:
    def __init__(self, binpath, config):
        self.tmp = tempfile.mkdtemp(prefix="differential-")
        self.binpath, self.config = binpath, config
        self.ra = Redis(self.tmp)
        self.rb = Redis(self.tmp)
        self.px = None

    def fresh(self):
        if self.px:
            self.px.stop()
        self.ra.reset()
        self.rb.reset()
        self.px = Proxy(self.binpath, self.ra.port, self.config, self.tmp)

    def close(self):
        try:
            if self.px:
                self.px.stop()
        finally:
            self.ra.stop()
            self.rb.stop()
            shutil.rmtree(self.tmp, ignore_errors=True)


def gen_steps(seed, count, conns, config):
    rng = random.Random(seed)
    g = Gen(rng, config)
    g.dumps = DUMPS
    steps = []
    # session setup per connection
    for ci in range(conns):
        if rng.random() < 0.5:
            steps.append((ci, [["HELLO", "3"]], False))
    n = 0
    cur = 0
    while n < count:
        if conns > 1 and rng.random() < 0.5:
            cur = rng.randrange(conns)
        cmds, pipe = g.step(cur)
        steps.append((cur, cmds, pipe))
        n += len(cmds)
    return steps


def run_steps(env, steps, conns, verbose=False, keep_going=False):
    """Runs steps on a fresh env. Returns list of diffs (step index, cmd index, cmd, a, d)."""
    env.fresh()
    P = [Conn(env.px.port) for _ in range(conns)]
    D = [Conn(env.rb.port) for _ in range(conns)]
    diffs = []
    try:
        for si, (ci, cmds, pipe) in enumerate(steps):
            if isinstance(cmds[0], tuple) and cmds[0][0] == "reconnect":
                P[ci].close()
                D[ci].close()
                P[ci] = Conn(env.px.port)
                D[ci] = Conn(env.rb.port)
                if cmds[0][1] == "3":
                    for X in (P[ci], D[ci]):
                        X.send(enc(["HELLO", "3"]))
                        X.read_reply()
                continue
            if pipe:
                data = b"".join(wire(c) for c in cmds)
                P[ci].send(data)
                ra = [P[ci].read_reply() for _ in cmds]
                D[ci].send(data)
                rd = [D[ci].read_reply() for _ in cmds]
            else:
                ra, rd = [], []
                for c in cmds:
                    P[ci].send(wire(c))
                    ra.append(P[ci].read_reply())
                    D[ci].send(wire(c))
                    rd.append(D[ci].read_reply())
            for k, c in enumerate(cmds):
                if not same(c, ra[k], rd[k]):
                    diffs.append((si, k, c, ra[k], rd[k]))
                    if not keep_going:
                        return diffs
            if P[ci].closed or D[ci].closed:
                if P[ci].closed != D[ci].closed:
                    diffs.append((si, -1, ["<connection closed>"], b"closed=%d" % P[ci].closed, b"closed=%d" % D[ci].closed))
                    return diffs
                P[ci] = Conn(env.px.port)
                D[ci] = Conn(env.rb.port)
    finally:
        for c in P + D:
            c.close()
    return diffs


def fmt_cmd(c):
    if isinstance(c, tuple) and c[0] == "reconnect":
        return "<new connection, RESP%s>" % c[1]
    if isinstance(c, tuple):
        return "inline %r" % c[1]
    return " ".join(show(x, 80) for x in c)


def report(seed, steps, d):
    si, k, c, a, dd = d
    print("DIFF seed=%s step=%d cmd#%d conn=%d pipelined=%s" % (seed, si, k, steps[si][0], steps[si][2]))
    print("  command : %s" % fmt_cmd(c))
    print("  sidecache: %s" % show(a, 600))
    print("  redis    : %s" % show(dd, 600))
    if len(a) > 200 or len(dd) > 200:
        i = 0
        while i < min(len(a), len(dd)) and a[i] == dd[i]:
            i += 1
        print("  first differing byte at %d: sidecache %r / redis %r" % (i, a[max(0, i - 80):i + 120], dd[max(0, i - 80):i + 120]))


def to_json(steps):
    def ej(c):
        if isinstance(c, tuple) and c[0] == "reconnect":
            return {"reconnect": c[1]}
        if isinstance(c, tuple):
            return {"inline": c[1]}
        return [b(x).decode("latin1") for x in c]
    return [{"conn": ci, "pipe": p, "cmds": [ej(c) for c in cmds]} for ci, cmds, p in steps]


def from_json(js):
    def dj(c):
        if isinstance(c, dict) and "reconnect" in c:
            return ("reconnect", c["reconnect"])
        if isinstance(c, dict):
            return ("inline", c["inline"])
        return [x.encode("latin1") for x in c]
    return [(s["conn"], [dj(c) for c in s["cmds"]], s["pipe"]) for s in js]


def flatten(steps):
    """Smaller units for ddmin: a pipeline stays a pipeline, but may lose commands."""
    return steps


def minimize(env, steps, conns, target, tries_per=2):
    """ddmin over steps, then over commands within steps."""
    tname = cmd_name(target[2])

    def fails(st):
        for _ in range(tries_per):
            ds = run_steps(env, st, conns)
            if ds and cmd_name(ds[0][2]) == tname:
                return True
        return False

    steps = steps[:target[0] + 1]
    # shrink the failing step's own commands after the failing one
    last = steps[-1]
    if target[1] >= 0:
        steps[-1] = (last[0], last[1][:target[1] + 1], last[2])
    # ddmin on steps
    n = 2
    while len(steps) >= 2:
        chunk = max(1, len(steps) // n)
        reduced = False
        for i in range(0, len(steps), chunk):
            cand = steps[:i] + steps[i + chunk:]
            if cand and fails(cand):
                steps = cand
                n = max(n - 1, 2)
                reduced = True
                break
        if not reduced:
            if chunk == 1:
                break
            n = min(n * 2, len(steps))
    # commands within steps
    changed = True
    while changed:
        changed = False
        for si in range(len(steps)):
            ci, cmds, p = steps[si]
            j = 0
            while j < len(cmds) and len(cmds) > 1:
                cand = list(steps)
                cand[si] = (ci, cmds[:j] + cmds[j + 1:], p)
                if fails(cand):
                    steps = cand
                    cmds = cand[si][1]
                    changed = True
                else:
                    j += 1
    # pipelines -> single if still failing
    for si in range(len(steps)):
        if steps[si][2]:
            cand = list(steps)
            cand[si] = (steps[si][0], steps[si][1], False)
            if fails(cand):
                steps = cand
    return steps


DUMPS = []


def compute_dumps(env):
    global DUMPS
    c = Conn(env.rb.port)
    out = []
    for cmd in (["SET", "__t", "hello"], ["RPUSH", "__l", "a", "b"], ["HSET", "__h", "f1", "v"]):
        for x in (["SELECT", "15"], cmd):
            c.send(enc(x))
            c.read_reply()
        key = cmd[1]
        c.send(enc(["DUMP", key]))
        r = c.read_reply()
        j = r.find(b"\r\n")
        out.append(r[j + 2:-2])
        c.send(enc(["DEL", key]))
        c.read_reply()
    c.close()
    out.append(b"garbage")
    DUMPS = out


def check(binpath, config, seed0, seeds, count, conns):
    """Runs seeds seed0.. on fresh servers and proxy; returns a line for
    each difference found (the first of each seed), [] when none."""
    env = Env(os.path.abspath(binpath), config)
    found = []
    try:
        compute_dumps(env)
        for seed in range(seed0, seed0 + seeds):
            steps = gen_steps(seed, count, conns, config)
            for si, k, c, a, d in run_steps(env, steps, conns):
                found.append("seed %d step %d command %d %s: sidecache %s, redis %s"
                             % (seed, si, k, fmt_cmd(c), show(a), show(d)))
    finally:
        env.close()
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--seeds", type=int, default=1, help="run this many seeds starting at --seed")
    ap.add_argument("--conns", type=int, default=1)
    ap.add_argument("--config", default="juicefs", choices=sorted(CONFIGS))
    ap.add_argument("--minimize", action="store_true")
    ap.add_argument("--keep-going", action="store_true")
    ap.add_argument("--replay", default=None)
    a = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    seed0 = a.seed if a.seed is not None else random.randrange(1 << 30)
    env = Env(os.path.abspath(a.bin), a.config)
    rc = 0
    try:
        compute_dumps(env)
        if a.replay:
            js = json.load(open(a.replay))
            steps = from_json(js["steps"])
            conns = js.get("conns", a.conns)
            ds = run_steps(env, steps, conns, keep_going=True)
            for d in ds:
                report("replay", steps, d)
            print("replay: %d difference(s)" % len(ds))
            return 1 if ds else 0
        total = 0
        for seed in range(seed0, seed0 + a.seeds):
            steps = gen_steps(seed, a.count, a.conns, a.config)
            print("seed=%d config=%s conns=%d steps=%d commands=%d" % (
                seed, a.config, a.conns, len(steps), sum(len(s[1]) for s in steps)), flush=True)
            ds = run_steps(env, steps, a.conns, keep_going=a.keep_going)
            total += sum(len(s[1]) for s in steps)
            if not ds:
                continue
            rc = 1
            for d in ds[:20]:
                report(seed, steps, d)
            path = os.path.join(OUT, "seed%d-%s-c%d.json" % (seed, a.config, a.conns))
            json.dump({"seed": seed, "config": a.config, "conns": a.conns,
                       "steps": to_json(steps[:ds[0][0] + 1])}, open(path, "w"))
            print("  saved %s" % path, flush=True)
            if a.minimize:
                ms = minimize(env, steps, a.conns, ds[0])
                mpath = path.replace(".json", "-min.json")
                json.dump({"seed": seed, "config": a.config, "conns": a.conns, "steps": to_json(ms)},
                          open(mpath, "w"))
                print("  minimized to %d steps (%s):" % (len(ms), mpath))
                for ci, cmds, p in ms:
                    print("    conn%d%s: %s" % (ci, " pipelined" if p else "", " ; ".join(fmt_cmd(c) for c in cmds)))
                ds2 = run_steps(env, ms, a.conns)
                if ds2:
                    report(seed, ms, ds2[0])
        print("done: %d commands, rc=%d" % (total, rc))
        try:
            info = env.px.info()
            print("proxy: hits=%s misses=%s fills=%s" % (info.get("cache_hits"), info.get("cache_misses"),
                                                       info.get("cache_fills")))
        except Exception:
            pass
    finally:
        env.close()
    return rc


if __name__ == "__main__":
    sys.exit(main())
