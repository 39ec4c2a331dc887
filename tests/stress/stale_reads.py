#!/usr/bin/env python3
"""
tests/stress/stale_reads.py - randomized concurrent stale-read hunt for sidecache
(not part of `make test`: run it for minutes, with several seeds and options).

    python3 tests/stress/stale_reads.py [--bin build/sidecache] \
        [--seed 1] [--duration 60] [--proxies 2] [--mode bcast|default|optin] \
        [--redis-server PATH] [--batch 250] [--cache-mem 256mb] [--ttl] [--acl [--acl-lookup]] [--swapdb] [--multidb] \
        [--writers 4] [--readers 6] [--nkeys 6] [--nfields 4] [--slack 0.05] [--port-base 47100] [--extra "--x y"] [--chaos 1|2] [--inv-delay-ms 30 --slack 0.3] [--data-delay-ms 20]

Starts one redis-server (port-base) and N proxies (port-base+1..) on loopback,
writer threads (each write through a random proxy or directly on Redis) and
reader threads (through the proxies, some directly). Every key has a total
order of writes (a per-key lock in this process; multi-key ops take every lock
they need) and a model of Redis's state after each write (the writer's reply is
checked against the model, so the model cannot silently drift). Each read is
judged against that history:

  * a read through proxy P of key k returning state j is a violation unless
    state j was possibly current at some moment of [read_start - slack, read_end],
    where slack is 0 when the write that replaced state j went through P (C1: a
    write through P is invalidated in P before its reply) or was Redis's own
    expiry of a key whose rule asks its TTL, and --slack seconds otherwise
    (another proxy's or a direct write: C10);
  * reads pipelined after the connection's own write must see it (C1), and no
    read may see a write sent after it on its connection;
  * MGET and the JuiceFS lookup script must be consistent at one moment (same
    slack rules);
  * under WATCH, the read must equal the latest state exactly (C2);
  * --acl: user "ub" may read only some keys: a value of any other is a C8
    violation;
  * at the end, with writers stopped and --slack passed, every read through every
    proxy equals a direct read.

Exit status 0 when nothing was found, 1 on violations, 2 on setup/model errors.
Prints the first violations with the key's history around them.
"""
import argparse
import bisect
import collections
import contextlib
import itertools
import re
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types

from juicefs_scripts import LOOKUP_V1, SHA_V1

HOST = "127.0.0.1"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

EVAL_DECLARED = "redis.call('SET', KEYS[1], ARGV[1]) return 1"
EVAL_UNDECLARED_HSET = "redis.call('HSET', ARGV[1], ARGV[2], ARGV[3]) return 1"

# ---------------------------------------------------------------------------
# RESP client


class Err(str):
    pass


def enc(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, int):
            a = str(a).encode()
        elif isinstance(a, str):
            a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, port, db=0, user=None, pw=None, proto=2, timeout=20.0):
        self.s = socket.create_connection((HOST, port), timeout=timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.s.makefile("rb", buffering=65536)
        self.proto = proto
        if proto == 3:
            args = ["HELLO", "3"] + (["AUTH", user, pw] if user else [])
            r = self.call(*args)
            if isinstance(r, Err):
                raise RuntimeError("HELLO: %s" % r)
        elif user:
            r = self.call("AUTH", user, pw)
            if r != "OK":
                raise RuntimeError("AUTH: %s" % r)
        if db:
            r = self.call("SELECT", db)
            if r != "OK":
                raise RuntimeError("SELECT: %s" % r)

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass

    def send(self, cmds):
        self.s.sendall(b"".join(enc(c) for c in cmds))

    def read(self):
        line = self.f.readline()
        if not line:
            raise ConnectionError("closed")
        t, rest = line[:1], line[1:-2]
        if t == b"+":
            return rest.decode()
        if t == b"-" or t == b"!":
            if t == b"!":
                rest = self.f.read(int(rest) + 2)[:-2]
            return Err(rest.decode(errors="replace"))
        if t == b":":
            return int(rest)
        if t == b"$" or t == b"=":
            n = int(rest)
            if n < 0:
                return None
            return self.f.read(n + 2)[:-2]
        if t in (b"*", b"~", b">"):
            n = int(rest)
            if n < 0:
                return None
            v = [self.read() for _ in range(n)]
            if t == b">":
                return self.read()  # a push (not expected): skip it
            return v
        if t == b"%":
            n = int(rest)
            return [self.read() for _ in range(2 * n)]
        if t == b"_":
            return None
        if t == b"#":
            return rest == b"t"
        if t == b",":
            return float(rest)
        if t == b"(":
            return int(rest)
        raise RuntimeError("unknown reply type %r" % line)

    def call(self, *args):
        self.send([args])
        return self.read()

    def pipe(self, cmds):
        self.send(cmds)
        return [self.read() for _ in cmds]


def die_with_parent():
    """preexec_fn: SIGKILL when this script dies (prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except Exception:
        pass


def port_free(port):
    s = socket.socket()
    try:
        s.bind((HOST, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


class DelayRelay:
    """A TCP relay on a loopback port that delivers everything, in order,
    delay seconds late (both directions). The proxies' invalidation
    connections go through it (--inv-delay-ms): Redis's invalidations then
    arrive late, so a proxy's own purges (C1, C3) are all that keeps its
    clients from reading their own writes stale."""

    def __init__(self, port, target, delay):
        self.port, self.target, self.delay = port, target, delay
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind((HOST, port))
        self.ls.listen(16)
        self.closed = False
        self.socks = []
        self.log = collections.deque(maxlen=300000)
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while not self.closed:
            try:
                cs, _ = self.ls.accept()
            except OSError:
                return
            ss = socket.create_connection((HOST, self.target))
            for x in (cs, ss):
                x.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.socks += [cs, ss]
            for a, b in ((cs, ss), (ss, cs)):
                q = collections.deque()
                cv = threading.Condition()
                threading.Thread(target=self.pump_in, args=(a, b, q, cv), daemon=True).start()
                threading.Thread(target=self.pump_out, args=(b, q, cv, a is ss), daemon=True).start()

    def pump_in(self, a, b, q, cv):
        while True:
            try:
                d = a.recv(65536)
            except OSError:
                d = b""
            now = time.monotonic()
            with cv:
                q.append((now + self.delay, d, now))
                cv.notify()
            if not d:
                return

    def pump_out(self, b, q, cv, from_redis):
        while True:
            with cv:
                while not q:
                    cv.wait()
                t, d, t_in = q.popleft()
            w = t - time.monotonic()
            if w > 0:
                time.sleep(w)
            if from_redis and d:
                # what Redis sent and when it left the relay (violation reports)
                self.log.append((t_in, time.monotonic(), d))
            if not d:
                try:
                    b.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            try:
                b.sendall(d)
            except OSError:
                return

    def close(self):
        self.closed = True
        for x in [self.ls] + self.socks:
            try:
                x.close()
            except OSError:
                pass


class ToxiRelays:
    """The same delays through toxiproxy (a Go process: not slowed down by
    this script's own threads, as DelayRelay is under load). One server,
    one proxy per relay, a latency toxic on what Redis sends (downstream)."""

    BIN = os.environ.get("TOXIPROXY_BIN", os.path.join(REPO, "bench", "build", "toxiproxy-server"))

    def __init__(self, api_port):
        import urllib.request
        self.urllib = urllib.request
        self.api = "http://%s:%d" % (HOST, api_port)
        self.proc = subprocess.Popen([self.BIN, "-host", HOST, "-port", str(api_port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=die_with_parent)
        for _ in range(100):
            try:
                self.call("GET", "/version")
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("toxiproxy did not start")

    def call(self, method, path, body=None):
        import json
        data = json.dumps(body).encode() if body is not None else None
        req = self.urllib.Request(self.api + path, data=data, method=method,
                                  headers={"Content-Type": "application/json"})
        with self.urllib.urlopen(req, timeout=5) as r:
            return r.read()

    def add(self, name, port, target, delay_ms, both=False):
        self.call("POST", "/proxies", {"name": name, "listen": "%s:%d" % (HOST, port),
                                       "upstream": "%s:%d" % (HOST, target), "enabled": True})
        for stream in (("downstream", "upstream") if both else ("downstream",)):
            self.call("POST", "/proxies/%s/toxics" % name,
                      {"name": "lat_" + stream, "type": "latency", "stream": stream,
                       "attributes": {"latency": int(delay_ms), "jitter": 0}})

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# ---------------------------------------------------------------------------
# Model


def err_kind(e):
    s = str(e)
    if "NOPERM" in s or "can't access" in s or "no permissions" in s:
        return "NOPERM"
    if "WRONGTYPE" in s:
        return "WRONGTYPE"
    if "ENOENT" in s:
        return "ENOENT"
    if "no such key" in s:
        return "NOKEY"
    return "ERR:" + s[:60]


WT = Err("WRONGTYPE")


def is_wt(r):
    return isinstance(r, Err) and err_kind(r) == "WRONGTYPE"


def typ(st):
    return None if st is None else st[0]


class KeyHist:
    """Writes of one (db, key), in order: (ws, we, state, via, deadline)."""

    __slots__ = ("entries", "wes", "state", "deadline")

    def __init__(self):
        self.entries = []
        self.wes = []
        self.state = None
        self.deadline = None

    def add(self, e):
        self.entries.append(e)
        self.wes.append(e[1])


def mget_proj(st):
    if st is None or st[0] != "s":
        return ("nil",)
    return ("v", st[1])


def get_proj(st):
    if st is None:
        return ("nil",)
    if st[0] != "s":
        return ("e", "WRONGTYPE")
    return ("v", st[1])


def hget_proj(st, field):
    if st is None:
        return ("nil",)
    if st[0] != "h":
        return ("e", "WRONGTYPE")
    v = st[1].get(field)
    return ("nil",) if v is None else ("v", v)


def obs_of(r):
    if r is None:
        return ("nil",)
    if isinstance(r, Err):
        return ("e", err_kind(r))
    if isinstance(r, (bytes, bytearray)):
        return ("v", bytes(r))
    return ("?", repr(r))


class Stress:
    def __init__(self, a):
        self.a = a
        self.rng = random.Random(a.seed)
        self.dbs = [0, 1] if a.multidb or a.swapdb else [0]
        self.ikeys = ["i%d" % n for n in range(1, a.nkeys + 1)]
        self.dkeys = ["d%d" % n for n in range(1, 4)]
        self.tkeys = ["t%d" % n for n in range(1, 4)] if a.ttl else []
        self.hkeys = ["h%d" % n for n in range(1, 3)] if a.ttl else []
        self.fields = [b"n%d" % n for n in range(1, a.nfields + 1)]
        self.all_keys = self.ikeys + self.dkeys + self.tkeys + self.hkeys
        self.hist = {(db, k): KeyHist() for db in self.dbs for k in self.all_keys}
        self.locks = {dk: threading.Lock() for dk in self.hist}
        self.lock_order = sorted(self.hist)
        self.ver = itertools.count(1)
        self.reads = collections.deque()
        self.violations = []
        self.model_errors = []
        self.errors = []
        self.counts = collections.Counter()
        self.stale_within_slack = []
        self.no_slack = False
        self.stop = threading.Event()
        self.procs = []
        self.relays = []
        self.inv_relays = {}
        self.toxi = None
        self.tmp = tempfile.mkdtemp(prefix="stress-stale-")
        base = a.port_base
        while not all(port_free(base + i) for i in range(a.proxies + 1)):
            base += a.proxies + 1
            if base + a.proxies > 47999:
                raise RuntimeError("no free ports")
        self.rport = base
        self.pports = [base + 1 + i for i in range(a.proxies)]
        self.eps = ["P%d" % i for i in range(a.proxies)]
        self.users = [(None, None)]
        if a.acl:
            self.users = [(None, None), ("ua", "pa"), ("ub", "pb")]
        # "n1" is a key pattern too: the lookup script declares the name as
        # its second key, so ub's lookups of name n1 are allowed, others not
        self.ub_allowed = {"i1", "i2", "i3", "d1", "t1", "h1"}
        if a.acl_lookup:
            self.ub_allowed.add("n1")   # finding 1 of review-stale2.md

    # -------------------------------------------------------------- setup
    def start(self):
        a = self.a
        rargs = [a.redis_server, "--port", str(self.rport), "--bind", HOST, "--save", "",
                 "--appendonly", "no", "--dir", self.tmp, "--protected-mode", "no",
                 "--logfile", os.path.join(self.tmp, "redis.log"), "--hz", str(a.hz)]
        self.procs.append(subprocess.Popen(rargs, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                           preexec_fn=die_with_parent))
        self.wait_port(self.rport)
        c = Conn(self.rport)
        if a.acl:
            c.call("ACL", "SETUSER", "ua", "on", ">pa", "~*", "&*", "+@all")
            pats = ["~%s" % k for k in sorted(self.ub_allowed)]
            c.call("ACL", "SETUSER", "ub", "on", ">pb", *pats, "&*", "+@all")
        c.call("FLUSHALL")
        c.call("SCRIPT", "LOAD", LOOKUP_V1)
        c.close()
        for i, port in enumerate(self.pports):
            up = self.rport
            if (a.data_delay_ms or a.inv_delay_ms) and a.relay == "toxi" and self.toxi is None:
                api = port + 90
                while not port_free(api):
                    api += 1
                self.toxi = ToxiRelays(api)
            if a.data_delay_ms:
                up = port + 70
                while not port_free(up):
                    up += 1
                if a.relay == "toxi":
                    self.toxi.add("data%d" % i, up, self.rport, a.data_delay_ms, both=True)
                else:
                    self.relays.append(DelayRelay(up, self.rport, a.data_delay_ms / 1000.0))
            args = [a.bin, "--bind", HOST, "--port", str(port), "--upstream",
                    "redis://%s:%d" % (HOST, up), "--tracking-mode", a.mode,
                    "--batch-max-commands", str(a.batch), "--cache-max-memory", a.cache_mem,
                    "--logfile", os.path.join(self.tmp, "proxy%d.log" % i), "--loglevel", "notice"]
            if a.ttl:
                args += ["--cache-rule", "GET", "t[1-9]*", "--cache-rule", "HGET", "h[1-9]*"]
            if a.inv_delay_ms:
                rp = port + 50
                while not port_free(rp):
                    rp += 1
                if a.relay == "toxi":
                    self.toxi.add("inv%d" % i, rp, self.rport, a.inv_delay_ms)
                else:
                    self.relays.append(DelayRelay(rp, self.rport, a.inv_delay_ms / 1000.0))
                    self.inv_relays[i] = self.relays[-1]
                args += ["--tracking-upstream", "redis://%s:%d" % (HOST, rp),
                         "--tracking-timeout-ms", str(max(3000, 20 * a.inv_delay_ms))]
            elif a.data_delay_ms:
                args += ["--tracking-upstream", "redis://%s:%d" % (HOST, self.rport)]
            if a.extra:
                args += a.extra.split()
            self.procs.append(subprocess.Popen(args, stdout=open(os.path.join(self.tmp, "proxy%d.out" % i), "wb"),
                                               stderr=subprocess.STDOUT, preexec_fn=die_with_parent))
            self.wait_port(port)
            # tracking active
            for _ in range(200):
                info = Conn(port).call("INFO", "sidecache")
                if b"tracking_state:active" in info:
                    break
                time.sleep(0.05)
            else:
                raise RuntimeError("proxy %d: tracking not active" % i)
            for (u, pw) in self.users:
                cc = Conn(port, user=u, pw=pw)
                cc.call("SCRIPT", "LOAD", LOOKUP_V1)
                cc.close()
        # initial state: every key written directly
        c = Conn(self.rport)
        for db in self.dbs:
            c.call("SELECT", db)
            for k in self.all_keys:
                h = self.hist[(db, k)]
                ws = time.monotonic()
                if k[0] in "it":
                    v = self.sval(k)
                    c.call("SET", k, v)
                    st = ("s", v)
                else:
                    d = {f: self.dval(k) for f in self.fields[:2]}
                    c.call("HSET", k, *itertools.chain.from_iterable(d.items()))
                    st = ("h", d)
                h.add((ws, time.monotonic(), st, "I", None))
                h.state = st
        c.close()

    def wait_port(self, port):
        for _ in range(200):
            try:
                socket.create_connection((HOST, port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("port %d not listening" % port)

    def shutdown(self):
        for rl in self.relays:
            rl.close()
        if self.toxi is not None:
            self.toxi.close()
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)

    def port_of(self, ep):
        return self.rport if ep == "D" else self.pports[int(ep[1:])]

    # -------------------------------------------------------------- values
    def sval(self, k, big=False):
        v = next(self.ver)
        pad = b"x" * (70000 if big else random.randrange(0, 40))
        return b"I|%s|v%d|" % (k.encode(), v) + pad

    def dval(self, k):
        v = next(self.ver)
        ino = random.choice(list(range(1, self.a.nkeys + 1)) + [77])
        return bytes([1]) + ino.to_bytes(8, "big") + b"#%s#v%d" % (k.encode(), v)

    def family(self, k):
        return "id" if k[0] in "id" else "th"

    def ttl_family(self, k):
        return k[0] in "th"

    # -------------------------------------------------------------- model of writes
    def model(self, cur, db, cmd, now_ws):
        """Applies cmd to cur ({(db,key): [state, deadline]}), returns the
        expected reply ('ANY' when not predicted)."""
        name = cmd[0].upper()

        def g(k, d=None):
            return cur[(db if d is None else d, k)]

        if name == "SET":
            k, v = cmd[1], cmd[2]
            opts = [o.upper() if isinstance(o, str) else o for o in cmd[3:]]
            e = g(k)
            old = e[0]
            if "GET" in opts and old is not None and old[0] != "s":
                return WT
            exists = old is not None
            reply = "OK"
            if "GET" in opts:
                reply = None if old is None else old[1]
            if ("NX" in opts and exists) or ("XX" in opts and not exists):
                return reply if "GET" in opts else None
            e[0] = ("s", v)
            if "PX" in opts:
                ms = int(opts[opts.index("PX") + 1])
                e[1] = ("PX", ms)
            elif "KEEPTTL" not in opts:
                e[1] = None
            return reply
        if name == "GETSET":
            e = g(cmd[1])
            if e[0] is not None and e[0][0] != "s":
                return WT
            old = e[0]
            e[0] = ("s", cmd[2])
            e[1] = None
            return None if old is None else old[1]
        if name == "GETDEL":
            e = g(cmd[1])
            if e[0] is not None and e[0][0] != "s":
                return WT
            old = e[0]
            e[0], e[1] = None, None
            return None if old is None else old[1]
        if name == "GETEX":
            e = g(cmd[1])
            if e[0] is not None and e[0][0] != "s":
                return WT
            if e[0] is None:
                return None
            if len(cmd) > 2:
                if cmd[2].upper() == "PERSIST":
                    e[1] = None
                else:
                    e[1] = ("PX", int(cmd[3]))
            return e[0][1]
        if name == "APPEND":
            e = g(cmd[1])
            if e[0] is not None and e[0][0] != "s":
                return WT
            nv = (b"" if e[0] is None else e[0][1]) + cmd[2]
            e[0] = ("s", nv)
            return len(nv)
        if name in ("DEL", "UNLINK"):
            n = 0
            for k in set(cmd[1:]):
                e = g(k)
                if e[0] is not None:
                    n += 1
                e[0], e[1] = None, None
            return n
        if name in ("HSET", "HSETNX"):
            e = g(cmd[1])
            if e[0] is not None and e[0][0] != "h":
                return WT
            d = dict(e[0][1]) if e[0] is not None else {}
            n = 0
            pairs = list(zip(cmd[2::2], cmd[3::2]))
            if name == "HSETNX":
                f, v = pairs[0]
                if f in d:
                    return 0
                d[f] = v
                e[0] = ("h", d)
                return 1
            for f, v in pairs:
                if f not in d:
                    n += 1
                d[f] = v
            e[0] = ("h", d)
            return n
        if name == "HDEL":
            e = g(cmd[1])
            if e[0] is None:
                return 0
            if e[0][0] != "h":
                return WT
            d = dict(e[0][1])
            n = 0
            for f in set(cmd[2:]):
                if f in d:
                    n += 1
                    del d[f]
            if d:
                e[0] = ("h", d)
            else:
                e[0], e[1] = None, None
            return n
        if name in ("RENAME", "RENAMENX"):
            a_, b_ = cmd[1], cmd[2]
            ea, eb = g(a_), g(b_)
            if ea[0] is None:
                return Err("ERR no such key")
            if a_ == b_:
                return "OK" if name == "RENAME" else 0
            if name == "RENAMENX" and eb[0] is not None:
                return 0
            eb[0], eb[1] = ea[0], ea[1]
            ea[0], ea[1] = None, None
            return "OK" if name == "RENAME" else 1
        if name == "COPY":
            a_, b_ = cmd[1], cmd[2]
            opts = [o.upper() for o in cmd[3:]]
            tdb = int(opts[opts.index("DB") + 1]) if "DB" in opts else db
            ea, eb = g(a_), g(b_, tdb)
            if a_ == b_ and tdb == db:
                return Err("ERR source and destination objects are the same")
            if ea[0] is None:
                return 0
            if eb[0] is not None and "REPLACE" not in opts:
                return 0
            eb[0] = (ea[0][0], dict(ea[0][1])) if ea[0][0] == "h" else ea[0]
            eb[1] = ea[1]
            return 1
        if name == "MOVE":
            a_, tdb = cmd[1], int(cmd[2])
            ea, eb = g(a_), g(a_, tdb)
            if ea[0] is None or eb[0] is not None:
                return 0
            eb[0], eb[1] = ea[0], ea[1]
            ea[0], ea[1] = None, None
            return 1
        if name in ("PEXPIRE", "EXPIRE"):
            e = g(cmd[1])
            if e[0] is None:
                return 0
            ms = int(cmd[2]) * (1 if name == "PEXPIRE" else 1000)
            e[1] = ("PX", ms)
            return 1
        if name == "PERSIST":
            e = g(cmd[1])
            if e[0] is None or e[1] is None:
                return 0
            e[1] = None
            return 1
        if name == "EVAL":
            if cmd[1] == EVAL_DECLARED:
                e = g(cmd[3])
                e[0], e[1] = ("s", cmd[4]), None
                return 1
            if cmd[1] == EVAL_UNDECLARED_HSET:
                r = self.model(cur, db, ["HSET", cmd[3], cmd[4], cmd[5]], now_ws)
                if isinstance(r, Err):
                    return "ANYERR"
                return 1
        if name == "FLUSHDB":
            for (d, k), e in cur.items():
                if d == db:
                    e[0], e[1] = None, None
            return "OK"
        if name == "FLUSHALL":
            for e in cur.values():
                e[0], e[1] = None, None
            return "OK"
        if name == "SWAPDB":
            for k in self.all_keys:
                e0, e1 = cur[(0, k)], cur[(1, k)]
                e0[:], e1[:] = list(e1), list(e0)
            return "OK"
        raise RuntimeError("no model for %r" % (cmd,))

    # -------------------------------------------------------------- writers
    def keys_of_all(self, db, cmds):
        return [k for cmd in cmds for k in self.keys_of(db, cmd)]

    def keys_of(self, db, cmd):
        name = cmd[0].upper()
        if name in ("FLUSHDB", "FLUSHALL", "SWAPDB"):
            return list(self.hist)
        if name in ("DEL", "UNLINK"):
            return [(db, k) for k in cmd[1:]]
        if name in ("RENAME", "RENAMENX"):
            return [(db, cmd[1]), (db, cmd[2])]
        if name == "COPY":
            opts = [o.upper() for o in cmd[3:]]
            tdb = int(opts[opts.index("DB") + 1]) if "DB" in opts else db
            return [(db, cmd[1]), (tdb, cmd[2])]
        if name == "MOVE":
            return [(db, cmd[1]), (int(cmd[2]), cmd[1])]
        if name == "EVAL":
            if cmd[1] == EVAL_DECLARED:
                return [(db, cmd[3])]
            return [(db, cmd[3])]
        return [(db, cmd[1])]

    def gen_write(self, r, db):
        """One random write command (on db)."""
        a = self.a
        x = r.random()
        fam = r.random()
        if a.ttl and fam < 0.3:
            skeys, hkeys = self.tkeys, self.hkeys
        else:
            skeys, hkeys = self.ikeys, self.dkeys
        ttl_ok = skeys is self.tkeys
        sk = r.choice(skeys)
        hk = r.choice(hkeys)
        f = r.choice(self.fields)
        if x < 0.22:
            opts = []
            if ttl_ok and r.random() < 0.5:
                opts += ["PX", r.choice([1, 2, 5, 10, 30, 200, 800])]
            elif ttl_ok and r.random() < 0.3:
                opts += ["KEEPTTL"]
            if r.random() < 0.15:
                opts += [r.choice(["NX", "XX"])]
            # (SET NX GET is 7.0's: --redis-server 6.2 refuses it)
            if r.random() < 0.15 and not ("NX" in opts and self.a.redis_server_major < 7):
                opts += ["GET"]
            return ["SET", sk, self.sval(sk, big=r.random() < 0.01)] + opts
        if x < 0.40:
            fs = [f] if r.random() < 0.8 else r.sample(self.fields, 2)
            cmd = ["HSET", hk]
            for ff in fs:
                cmd += [ff, self.dval(hk)]
            if r.random() < 0.1:
                return ["HSETNX", hk, f, self.dval(hk)]
            return cmd
        if x < 0.48:
            return ["HDEL", hk] + ([f] if r.random() < 0.7 else r.sample(self.fields, 2))
        if x < 0.53:
            return [r.choice(["DEL", "UNLINK"]), r.choice(skeys + hkeys)] + (
                [r.choice(skeys + hkeys)] if r.random() < 0.3 else [])
        if x < 0.57:
            return ["GETDEL", sk]
        if x < 0.60:
            return ["GETSET", sk, self.sval(sk)]
        if x < 0.63:
            if ttl_ok:
                return ["GETEX", sk] + r.choice([["PX", r.choice([1, 5, 50, 500])], ["PERSIST"]])
            return ["GETEX", sk]
        if x < 0.66:
            return ["APPEND", sk, b"+a%d" % next(self.ver)]
        if x < 0.72:
            pool = skeys + hkeys if r.random() < 0.2 else (skeys if r.random() < 0.5 else hkeys)
            src, dst = r.choice(pool), r.choice(pool)
            return [r.choice(["RENAME", "RENAME", "RENAMENX"]), src, dst]
        if x < 0.77:
            pool = skeys if r.random() < 0.5 else hkeys
            src, dst = r.choice(pool), r.choice(pool)
            if src == dst:
                dst = r.choice([k for k in pool if k != src])
            cmd = ["COPY", src, dst]
            if len(self.dbs) > 1 and r.random() < 0.3:
                cmd += ["DB", str(1 - db)]
                cmd[2] = r.choice(pool)
            if r.random() < 0.7:
                cmd += ["REPLACE"]
            return cmd
        if x < 0.79 and len(self.dbs) > 1:
            return ["MOVE", r.choice(skeys + hkeys), str(1 - db)]
        if x < 0.84 and ttl_ok:
            k = r.choice(skeys + hkeys)
            return r.choice([["PEXPIRE", k, r.choice([1, 3, 10, 40, 300])], ["PERSIST", k],
                             ["EXPIRE", k, 1]])
        if x < 0.86:
            if r.random() < 0.5:
                return ["EVAL", EVAL_DECLARED, "1", sk, self.sval(sk)]
            return ["EVAL", EVAL_UNDECLARED_HSET, "0", hk, f, self.dval(hk)]
        if x < 0.862:
            return ["FLUSHDB"] if r.random() < 0.7 else ["FLUSHALL"]
        return ["SET", sk, self.sval(sk)]

    def lock_keys(self, keys):
        ks = sorted(set(keys))
        for k in ks:
            self.locks[k].acquire()
        return ks

    def unlock_keys(self, ks):
        for k in reversed(ks):
            self.locks[k].release()

    def settle_ttls(self, ks):
        """Called with ks locked: no write may race a key's expiry (the model
        could not know which came first); an expired key gets its nil entry."""
        for dk in ks:
            h = self.hist[dk]
            if h.deadline is None:
                continue
            lo, hi = h.deadline
            now = time.monotonic()
            if now < lo - 0.1:
                continue
            if now < hi + 0.005:
                time.sleep(hi + 0.005 - now)
            h.add((lo - 0.005, hi + 0.005, None, "X", None))
            h.state, h.deadline = None, None

    def cur_of(self, ks):
        return {dk: [self.hist[dk].state, self.hist[dk].deadline] for dk in ks}

    def commit(self, ks, cur, ws, we, via):
        """Appends a history entry for every locked key whose state or TTL changed."""
        for dk in ks:
            h = self.hist[dk]
            st, dl = cur[dk]
            if dl is not None and dl[0] == "PX":
                dl = (ws + dl[1] / 1000.0, we + dl[1] / 1000.0)
            if st is h.state and dl == h.deadline:
                continue
            if st is None:
                dl = None
            h.add((ws, we, st, via, dl))
            h.state, h.deadline = st, dl

    def check_reply(self, cmd, expect, got, via):
        if self.a.chaos and isinstance(got, Err) and ("sidecache" in got or "onnection" in got):
            self.counts["chaos_write_err"] += 1
            return False
        if expect == "ANY":
            return True
        if expect == "ANYERR":
            return isinstance(got, Err)
        if isinstance(expect, Err):
            ok = isinstance(got, Err) and (err_kind(expect) == err_kind(got) or str(expect) in str(got))
        else:
            ok = expect == got
        if not ok:
            self.model_errors.append("%s %r: model expected %r, got %r" % (via, [c if not isinstance(c, bytes) else c[:40] for c in cmd], expect, got))
        return ok

    def resync(self, ks, via, ws):
        """After a model mismatch: the state Redis holds now becomes the next entry."""
        c = Conn(self.rport)
        for (db, k) in ks:
            c.call("SELECT", db)
            t = c.call("TYPE", k)
            if t == "string":
                st = ("s", c.call("GET", k))
            elif t == "hash":
                hv = c.call("HGETALL", k)
                st = ("h", dict(zip(hv[0::2], hv[1::2])))
            else:
                st = None
            pt = c.call("PTTL", k)
            now = time.monotonic()
            dl = (now - 0.5 + pt / 1000.0, now + pt / 1000.0) if pt >= 0 else None
            h = self.hist[(db, k)]
            h.add((ws, time.monotonic(), st, "?", dl))
            h.state, h.deadline = st, dl
        c.close()

    def writer(self, wid):
        r = random.Random(self.a.seed * 1000 + wid)
        conns = {}
        eps = self.eps + ["D"]

        def conn(ep, db, user=None):
            key = (ep, db, user)
            if key not in conns:
                pw = {"ua": "pa", "ub": "pb"}.get(user)
                conns[key] = Conn(self.port_of(ep), db=db, user=user, pw=pw, proto=r.choice([2, 3]))
            return conns[key]

        try:
            while not self.stop.is_set():
                ep = r.choice(eps)
                db = r.choice(self.dbs) if r.random() < 0.3 else 0
                kind = r.random()
                try:
                    if kind < 0.55:
                        self.do_single(r, conn(ep, db), ep, db)
                    elif kind < 0.70:
                        self.do_pipeline(r, conn(ep, db), ep, db)
                    elif kind < 0.82:
                        self.do_multi(r, conn(ep, db), ep, db)
                    elif kind < 0.92:
                        self.do_watch(r, conn(ep, db), ep, db)
                    elif self.a.swapdb and kind < 0.925 and ep != "D":
                        self.do_single(r, conn(ep, db), ep, db, cmd=["SWAPDB", "0", "1"])
                    else:
                        self.do_single(r, conn(ep, db), ep, db)
                except (ConnectionError, OSError) as e:
                    if not self.a.chaos:
                        raise
                    # (the op resynced its keys' model before releasing them)
                    self.counts["writer_conn_lost"] += 1
                    old = conns.pop((ep, db, None), None)
                    if old is not None:
                        old.close()
                if self.a.write_sleep:
                    time.sleep(r.uniform(0, self.a.write_sleep))
        except Exception as e:
            import traceback
            self.errors.append("writer %d: %r\n%s" % (wid, e, traceback.format_exc()))
            self.stop.set()

    @contextlib.contextmanager
    def writing(self, keys, ep):
        """Holds the keys' locks for one write; a connection lost midway
        leaves its outcome unknown, so its keys resync from Redis (from the
        write's start, win.ws, or now if it was not sent yet)."""
        ks = self.lock_keys(keys)
        win = types.SimpleNamespace(ws=None)
        try:
            yield ks, win
        except (ConnectionError, OSError):
            self.resync(ks, ep, win.ws if win.ws is not None else time.monotonic())
            raise
        finally:
            self.unlock_keys(ks)

    def timed_read(self, c, ep, db, rc, tag):
        """A read on a writer's connection, recorded with its time span."""
        rs = time.monotonic()
        got = c.call(*rc)
        self.record_read(ep, None, db, rc, got, rs, time.monotonic(), tag=tag)

    def do_single(self, r, c, ep, db, cmd=None):
        cmd = cmd or self.gen_write(r, db)
        if cmd[0] == "SWAPDB" and len(self.dbs) < 2:
            return
        with self.writing(self.keys_of(db, cmd), ep) as (ks, win):
            self.settle_ttls(ks)
            cur = self.cur_of(ks)
            ws = win.ws = time.monotonic()
            exp = self.model(cur, db, cmd, ws)
            got = c.call(*cmd)
            we = time.monotonic()
            if self.check_reply(cmd, exp, got, ep):
                self.commit(ks, cur, ws, we, ep)
            else:
                self.resync(ks, ep, ws)
            self.counts["w_" + cmd[0].upper()] += 1
            if ep != "D" and r.random() < 0.3:
                # read back on the writer's own connection (C1)
                dk = r.choice(ks)
                if dk[0] == db:
                    rc = self.read_cmd_for(r, dk[1])
                    self.timed_read(c, ep, db, rc, "own-write")

    def do_pipeline(self, r, c, ep, db):
        """Writes pipelined (the proxy batches them), reads of the same keys among them."""
        n = r.randint(2, 8)
        cmds = []
        for _ in range(n):
            cmd = self.gen_write(r, db)
            if cmd[0] in ("FLUSHDB", "FLUSHALL", "PEXPIRE", "EXPIRE", "GETEX") or "PX" in cmd[3:]:
                continue
            cmds.append(cmd)
        with self.writing(self.keys_of_all(db, cmds), ep) as (ks, win):
            self.settle_ttls(ks)
            cur = self.cur_of(ks)
            seq = []   # ("w", cmd, expected) | ("r", readcmd, key)
            for cmd in cmds:
                if r.random() < 0.3 and ep != "D":
                    rk = r.choice([k for (d, k) in self.keys_of(db, cmd) if d == db] or [cmd[1]])
                    seq.append(("r", self.read_cmd_for(r, rk), rk))
                seq.append(("w", cmd, None))
                if r.random() < 0.4 and ep != "D":
                    rk = r.choice([k for (d, k) in self.keys_of(db, cmd) if d == db] or [cmd[1]])
                    seq.append(("r", self.read_cmd_for(r, rk), rk))
            ws = win.ws = time.monotonic()
            c.send([s[1] for s in seq])
            pending_reads = []
            own_idx = {}
            okall = True
            for item in seq:
                got = c.read()
                t = time.monotonic()
                if item[0] == "w":
                    cmd = item[1]
                    sub = self.keys_of(db, cmd)
                    exp = self.model(cur, db, cmd, ws)
                    if not self.check_reply(cmd, exp, got, ep + "-pipe"):
                        okall = False
                        break
                    self.commit(ks, cur, ws, t, ep)
                    # (a write through a proxy purges every key it declares,
                    # changed or not: later reads there see at least this)
                    for dk in self.keys_of(db, cmd):
                        own_idx[dk] = len(self.hist[dk].entries) - 1
                else:
                    # the read must see every write before it in the pipeline
                    # (C1), none after it
                    rk = item[2]
                    h = self.hist[(db, rk)]
                    own = own_idx.get((db, rk))
                    pending_reads.append((item[1], got, ws, t, own, len(h.entries) - 1, (db, rk)))
            if not okall:
                for _ in range(len(seq) - seq.index(item) - 1):
                    c.read()
                self.resync(ks, ep, ws)
            else:
                for (rc, got, rs, re_, minidx, maxidx, dk) in pending_reads:
                    # index range: >= the entry of the pipeline's own last write
                    # before it (if any); <= the entry current when it was
                    # answered (later ones are this pipeline's later writes)
                    self.record_read(ep, None, db, rc, got, rs, re_, minidx=minidx, maxidx=maxidx, tag="pipe")
            self.counts["pipeline"] += 1

    def read_cmd_for(self, r, k):
        if k[0] in "it":
            return ["GET", k]
        return ["HGET", k, r.choice(self.fields)]

    def do_multi(self, r, c, ep, db):
        n = r.randint(1, 4)
        cmds = [self.gen_write(r, db) for _ in range(n)]
        cmds = [cm for cm in cmds if cm[0] not in ("FLUSHALL",)]
        if not cmds:
            return
        with self.writing(self.keys_of_all(db, cmds), ep) as (ks, win):
            self.settle_ttls(ks)
            cur = self.cur_of(ks)
            # a read queued inside MULTI goes to Redis with it (C2)
            rk = None
            if r.random() < 0.5:
                rk = r.choice([k for (d, k) in self.keys_of(db, cmds[-1]) if d == db] or [cmds[-1][1]])
            ws = win.ws = time.monotonic()
            allc = [["MULTI"]] + cmds + ([self.read_cmd_for(r, rk)] if rk else []) + [["EXEC"]]
            res = c.pipe(allc)
            we = time.monotonic()
            exec_r = res[-1]
            if not isinstance(exec_r, list):
                if self.a.chaos and isinstance(exec_r, Err):
                    self.counts["chaos_exec_err"] += 1
                    self.resync(ks, ep, ws)
                    return
                self.model_errors.append("%s MULTI: EXEC gave %r (queued %r)" % (ep, exec_r, res[1:-1]))
                self.resync(ks, ep, ws)
                return
            ok = True
            for cmd, got in zip(cmds, exec_r):
                exp = self.model(cur, db, cmd, ws)
                if not self.check_reply(cmd, exp, got, ep + "-multi"):
                    ok = False
                    break
            if ok and rk:
                st = cur[(db, rk)][0]
                rc = allc[-2]
                want = get_proj(st) if rc[0] == "GET" else hget_proj(st, rc[2])
                if obs_of(exec_r[-1]) != want:
                    self.violations.append("C2 %s: read queued in MULTI after writes: %r got %r, want %r"
                                           % (ep, rc, obs_of(exec_r[-1]), want))
            if ok:
                self.commit(ks, cur, ws, we, ep)
            else:
                self.resync(ks, ep, ws)
            self.counts["multi"] += 1

    def do_watch(self, r, c, ep, db):
        """WATCH k; read k (must be the latest state: C2); MULTI write EXEC."""
        cmd = self.gen_write(r, db)
        if cmd[0] in ("FLUSHDB", "FLUSHALL"):
            return
        k = cmd[1] if cmd[0] != "EVAL" else cmd[3]
        with self.writing(self.keys_of(db, cmd), ep) as (ks, win):
            self.settle_ttls(ks)
            cur = self.cur_of(ks)
            rc = self.read_cmd_for(r, k)
            if r.random() < 0.5:
                w, got = c.pipe([["WATCH", k], rc])      # read right behind the WATCH
            else:
                w = c.call("WATCH", k)                   # answered ahead by the proxy
                got = c.call(*rc)
            st = cur[(db, k)][0]
            want = get_proj(st) if rc[0] == "GET" else hget_proj(st, rc[2])
            if self.a.chaos and isinstance(got, Err) and ("sidecache" in got or "onnection" in got):
                pass
            elif obs_of(got) != want:
                self.violations.append("C2 %s db%d: read under WATCH %r got %r, latest state %r"
                                       % (ep, db, rc, obs_of(got), want))
            ws = win.ws = time.monotonic()
            res = c.pipe([["MULTI"], cmd, ["EXEC"]])
            we = time.monotonic()
            if w != "OK" or not isinstance(res[2], list):
                if self.a.chaos and (isinstance(w, Err) or isinstance(res[2], Err)):
                    self.counts["chaos_exec_err"] += 1
                    self.resync(ks, ep, ws)
                    return
                self.model_errors.append("%s WATCH txn: %r %r" % (ep, w, res))
                self.resync(ks, ep, ws)
                return
            exp = self.model(cur, db, cmd, ws)
            if self.check_reply(cmd, exp, res[2][0], ep + "-watch"):
                self.commit(ks, cur, ws, we, ep)
            else:
                self.resync(ks, ep, ws)
            self.counts["watch"] += 1
            if r.random() < 0.7:
                c.call("UNWATCH")   # as go-redis does after EXEC (answered locally)
            if ep != "D" and r.random() < 0.5:
                self.timed_read(c, ep, db, rc, "after-exec")

    # -------------------------------------------------------------- readers
    def record_read(self, ep, user, db, cmd, got, rs, re_, minidx=None, maxidx=None, tag=""):
        self.reads.append((ep, user, db, cmd, got, rs, re_, (minidx, maxidx), tag))

    def reader(self, rid):
        r = random.Random(self.a.seed * 7919 + rid)
        conns = {}

        def conn(ep, db, user):
            key = (ep, db, user)
            if key not in conns:
                pw = {"ua": "pa", "ub": "pb"}.get(user)
                conns[key] = Conn(self.port_of(ep), db=db, user=user, pw=pw, proto=r.choice([2, 3]))
            return conns[key]

        eps = self.eps * 4 + ["D"]
        try:
          while not self.stop.is_set():
            try:
                  ep = r.choice(eps)
                  db = r.choice(self.dbs) if r.random() < 0.2 else 0
                  user = r.choice(self.users)[0]
                  c = conn(ep, db, user)
                  cmd = self.gen_read(r)
                  reps = r.randint(1, 5)
                  if r.random() < 0.15:
                      # pipelined reads (only the first may be a hit)
                      cmds = [cmd] + [self.gen_read(r) for _ in range(r.randint(1, 4))]
                      rs = time.monotonic()
                      c.send(cmds)
                      for cm in cmds:
                          got = c.read()
                          self.record_read(ep, user, db, cm, got, rs, time.monotonic(), tag="rpipe")
                      continue
                  for _ in range(reps):
                      rs = time.monotonic()
                      got = c.call(*cmd)
                      re_ = time.monotonic()
                      self.record_read(ep, user, db, cmd, got, rs, re_)
                      self.counts["reads"] += 1
            except (ConnectionError, OSError):
                if not self.a.chaos:
                    raise
                self.counts["reader_conn_lost"] += 1
                for k in list(conns):
                    conns.pop(k).close()
        except Exception as e:
            import traceback
            self.errors.append("reader %d: %r\n%s" % (rid, e, traceback.format_exc()))
            self.stop.set()

    def gen_read(self, r):
        x = r.random()
        skeys = self.ikeys + (self.tkeys if r.random() < 0.3 else [])
        hkeys = self.dkeys + (self.hkeys if r.random() < 0.3 else [])
        if x < 0.35:
            return ["GET", r.choice(skeys)]
        if x < 0.60:
            return ["HGET", r.choice(hkeys), r.choice(self.fields)]
        if x < 0.78:
            return ["MGET"] + [r.choice(skeys) for _ in range(r.randint(1, 5))]
        return ["EVALSHA", SHA_V1, "2", r.choice(self.dkeys), r.choice(self.fields)]

    # -------------------------------------------------------------- checking
    def entries_view(self, dk, copy=True):
        h = self.hist[dk]
        ents = list(h.entries) if copy else h.entries[:]
        if ents and ents[-1][4] is not None and ents[-1][2] is not None:
            lo, hi = ents[-1][4]
            ents.append((lo - 0.005, hi + 0.005, None, "X", None))
        return ents

    def entries_from(self, dk, t):
        """The entries of dk from a little before the one current at t (an
        index offset and a list; the key's implicit expiry at the end)."""
        h = self.hist[dk]
        n = len(h.entries)
        start = max(0, bisect.bisect_left(h.wes, t - 1.0, 0, n) - 2)
        ents = h.entries[start:n]
        if ents and ents[-1][4] is not None and ents[-1][2] is not None:
            lo, hi = ents[-1][4]
            ents.append((lo - 0.005, hi + 0.005, None, "X", None))
        return start, ents

    def slack(self, ep, via, dk):
        if self.no_slack or ep == "D" or via == ep:
            return 0.0
        if via == "X":
            return 0.0 if self.ttl_family(dk[1]) else self.a.slack
        return self.a.slack

    def candidates(self, ep, dk, rs, re_, match, minidx=None, maxidx=None):
        """(index, lo, hi) of the entries of dk whose state satisfies match()
        and that were possibly current at some moment of [lo, hi] within
        [rs, re_] (slack applied)."""
        start, ents = self.entries_from(dk, rs - self.a.slack)
        if minidx is not None and minidx < start:
            start, ents = 0, self.entries_view(dk)
        out = []
        for jj, (ws, we, st, via, dl) in enumerate(ents):
            j = start + jj
            if ws > re_:
                break
            if minidx is not None and j < minidx:
                continue
            if maxidx is not None and j > maxidx and via != "X":
                continue
            if not match(st):
                continue
            hi = float("inf")
            if jj + 1 < len(ents):
                n = ents[jj + 1]
                hi = n[1] + self.slack(ep, n[3], dk)
            lo = ws
            if hi < rs:
                continue
            out.append((j, max(lo, rs), min(hi, re_)))
        return out

    def describe(self, dk, around_t, n=6):
        ents = self.entries_view(dk)
        out = []
        for j, (ws, we, st, via, dl) in enumerate(ents):
            if j + 1 < len(ents) and ents[j + 1][1] < around_t - 0.3:
                continue
            if ws > around_t + 0.05:
                break
            s = "None" if st is None else (st[0], st[1][:24] if st[0] == "s" else {k: v[9:] for k, v in st[1].items()})
            out.append("    #%d [%.4f, %.4f] via %s %s ttl=%s" % (j, ws - self.t0, we - self.t0, via, s,
                                                                  None if dl is None else "(%.4f,%.4f)" % (dl[0] - self.t0, dl[1] - self.t0)))
        return "\n".join(out[-14:])

    def acl_denied(self, user, key):
        return user == "ub" and key not in self.ub_allowed

    def check_read(self, rd):
        ep, user, db, cmd, got, rs, re_, (minidx, maxidx), tag = rd
        name = cmd[0]
        o = obs_of(got) if name in ("GET", "HGET") else None
        keys = []
        if name in ("GET", "HGET"):
            keys = [cmd[1]]
        elif name == "MGET":
            keys = cmd[1:]
        else:
            keys = [cmd[3], cmd[4].decode()]
        if isinstance(got, Err) and ("sidecache" in str(got) or "onnection" in str(got)):
            if self.a.chaos:
                self.counts["chaos_read_err"] += 1
            else:
                self.errors.append("%s %r: %s" % (ep, cmd, got))
            return
        if any(self.acl_denied(user, k) for k in keys):
            if not (isinstance(got, Err) and err_kind(got) == "NOPERM"):
                self.violations.append("C8 %s user %s %r got %r (Redis refuses it)" % (ep, user, cmd, got))
            return
        if name == "EVALSHA" and user == "ub":
            if isinstance(got, list) and got and isinstance(got[0], int) and self.acl_denied(user, "i%d" % got[0]):
                self.violations.append("C8 %s user ub lookup %r returned attr of denied i%d" % (ep, cmd, got[0]))
                return
            if isinstance(got, Err) and err_kind(got) == "NOPERM":
                return
        if isinstance(got, Err) and err_kind(got) == "NOPERM":
            self.violations.append("unexpected NOPERM %s user %s %r" % (ep, user, cmd))
            return
        if name in ("GET", "HGET"):
            dk = (db, cmd[1])
            if name == "GET":
                m = lambda st: get_proj(st) == o
            else:
                f = cmd[2]
                m = lambda st: hget_proj(st, f) == o
            c = self.candidates(ep, dk, rs, re_, m, minidx, maxidx)
            if not c:
                self.report(rd, dk, "%s returned %r" % (" ".join(map(str, cmd)), o))
            elif ep != "D":
                self.no_slack = True
                try:
                    c0 = self.candidates(ep, dk, rs, re_, m, minidx, maxidx)
                finally:
                    self.no_slack = False
                if not c0:
                    # served a state another node's write had replaced before
                    # the read began: how long before (C10)
                    start, ents = self.entries_from(dk, rs - self.a.slack)
                    late = min((rs - ents[jj + 1][1]) for jj in range(len(ents) - 1)
                               if ents[jj + 1][1] < rs and m(ents[jj][2])) if len(ents) > 1 else 0
                    self.stale_within_slack.append(late)
            return
        if name == "MGET":
            if not isinstance(got, list) or len(got) != len(keys):
                self.violations.append("%s MGET %r bad reply %r" % (ep, keys, got))
                return
            cands = []
            for k, v in zip(keys, got):
                ov = obs_of(v)
                dk = (db, k)
                c = self.candidates(ep, dk, rs, re_, lambda st, ov=ov: mget_proj(st) == ov)
                if not c:
                    self.report(rd, dk, "MGET element %s returned %r" % (k, ov))
                    return
                cands.append(c)
            if not self.joint(cands, rs, re_):
                self.report(rd, (db, keys[0]), "MGET %r not consistent at any one moment: %r" %
                            (keys, [obs_of(v)[1][:16] if obs_of(v)[0] == "v" else obs_of(v) for v in got]),
                            extra=[(db, k) for k in keys[1:]])
            return
        # lookup script
        dk = (db, cmd[3])
        f = cmd[4]
        if isinstance(got, Err):
            k = err_kind(got)
            if k == "ENOENT":
                c = self.candidates(ep, dk, rs, re_, lambda st: hget_proj(st, f) == ("nil",))
            elif k == "WRONGTYPE":
                # dentry key a string, or the inode key a hash
                c = self.candidates(ep, dk, rs, re_, lambda st: typ(st) == "s")
                if not c:
                    c = [1]  # inode a hash: not checked further
            else:
                self.errors.append("%s lookup %r: %s" % (ep, cmd, got))
                return
            if not c:
                self.report(rd, dk, "lookup %s %s returned %s" % (cmd[3], f, got))
            return
        if not isinstance(got, list) or not got or not isinstance(got[0], int):
            self.violations.append("%s lookup %r bad reply %r" % (ep, cmd, got))
            return
        ino = got[0]
        attr = ("v", bytes(got[1])) if len(got) > 1 and isinstance(got[1], (bytes, bytearray)) else ("nil",)

        def dmatch(st):
            p = hget_proj(st, f)
            return p[0] == "v" and len(p[1]) >= 9 and int.from_bytes(p[1][1:9], "big") == ino

        c1 = self.candidates(ep, dk, rs, re_, dmatch)
        if not c1:
            self.report(rd, dk, "lookup %s %s returned ino %d" % (cmd[3], f, ino))
            return
        ik = (db, "i%d" % ino)
        if ik not in self.hist:
            if attr != ("nil",):
                self.violations.append("%s lookup %r: attr for unwritten i%d" % (ep, cmd, ino))
            return
        c2 = self.candidates(ep, ik, rs, re_, lambda st: mget_proj(st) == attr and typ(st) != "h")
        if not c2:
            self.report(rd, ik, "lookup %s %s -> ino %d returned attr %r" % (cmd[3], f, ino, attr[:1] + tuple(x[:24] for x in attr[1:])),
                        extra=[dk])
            return
        if not self.joint([c1, c2], rs, re_):
            self.report(rd, dk, "lookup %s %s: dentry and attr never current together" % (cmd[3], f), extra=[ik])

    def joint(self, cands, rs, re_):
        lo, hi = rs, re_
        # union of intervals per key, intersected across keys
        sets = [[(a, b) for (_, a, b) in c] for c in cands]
        cur = [(rs, re_)]
        for s in sets:
            nxt = []
            for (a, b) in cur:
                for (c, d) in s:
                    x, y = max(a, c), min(b, d)
                    if x <= y:
                        nxt.append((x, y))
            if not nxt:
                return False
            cur = nxt
        return True

    def report(self, rd, dk, what, extra=()):
        ep, user, db, cmd, got, rs, re_, (minidx, maxidx), tag = rd
        # classify: stale by how much (for reads via a proxy)
        msg = "%s%s user=%s db%d read [%.4f, %.4f] %s%s\n  history of %s:\n%s" % (
            ep, ("(" + tag + ")") if tag else "", user, db, rs - self.t0, re_ - self.t0, what,
            "" if minidx is None else " (must see entry >= #%d)" % minidx, dk[1], self.describe(dk, rs))
        for e in extra:
            msg += "\n  history of %s:\n%s" % (e[1], self.describe(e, rs))
        rl = self.inv_relays.get(int(ep[1:])) if ep.startswith("P") else None
        if rl is not None:
            pat = b"\r\n" + dk[1].encode() + b"\r\n"
            seen = [(ti - self.t0, to - self.t0) for (ti, to, d) in list(rl.log)
                    if pat in d and rs - 1.0 <= to <= re_ + 0.5]
            msg += "\n  invalidations naming %s through %s's delaying relay (from Redis, to the proxy): %s" % (
                dk[1], ep, ", ".join("(%.4f, %.4f)" % x for x in seen[-8:]) or "none")
        self.violations.append(msg)
        with open(os.path.join(self.tmp, "violation-%d.txt" % len(self.violations)), "w") as f:
            f.write("read %r\n" % (rd,))
            h = self.hist[dk]
            f.write("nentries %d nwes %d sorted %s\n" % (len(h.entries), len(h.wes), h.wes == sorted(h.wes)))
            for j, e in enumerate(h.entries):
                if e[1] >= rs - 2 and e[0] <= re_ + 1:
                    f.write("#%d %r\n" % (j, e))
            f.write("entries_from start %d\n" % self.entries_from(dk, rs - self.a.slack)[0])

    def check_pending(self, final=False):
        horizon = time.monotonic() - max(3.0, 3 * self.a.slack)
        n = 0
        while self.reads:
            rd = self.reads[0]
            if not final and rd[6] > horizon:
                break
            self.reads.popleft()
            self.check_read(rd)
            n += 1
        self.counts["checked"] += n

    # -------------------------------------------------------------- final
    def final_check(self):
        time.sleep(max(1.5 if self.a.ttl else 0.5, self.a.slack * 2))
        d = {}
        for db in self.dbs:
            dc = Conn(self.rport, db=db)
            for k in self.all_keys:
                for rc in [["GET", k]] + [["HGET", k, f] for f in self.fields] + \
                        ([["EVALSHA", SHA_V1, "2", k, f] for f in self.fields] if k[0] == "d" else []) + \
                        [["MGET"] + self.ikeys]:
                    want = dc.call(*rc)
                    for ep in self.eps:
                        for (u, pw) in self.users:
                            if any(self.acl_denied(u, x) for x in rc[1:] if isinstance(x, str) and x[:1] in "idth" and x in self.all_keys):
                                continue
                            if u == "ub" and rc[0] == "EVALSHA":
                                continue
                            pc = d.get((ep, db, u))
                            if pc is None:
                                pc = d[(ep, db, u)] = Conn(self.port_of(ep), db=db, user=u, pw=pw)
                            for _ in range(2):
                                got = pc.call(*rc)
                                if repr(got) != repr(want):
                                    self.violations.append("FINAL %s user=%s db%d %r: proxy %r, Redis %r" %
                                                           (ep, u, db, rc, got, want))
            dc.close()
        for c in d.values():
            c.close()

    def stats(self):
        out = {}
        for i, port in enumerate(self.pports):
            info = Conn(port).call("INFO", "sidecache").decode()
            kv = dict(l.split(":", 1) for l in info.splitlines() if ":" in l)
            out["P%d" % i] = {k: kv.get(k) for k in ("cache_hits", "cache_misses", "cache_fills", "cache_fills_rejected",
                                                  "cache_flushes", "cache_evictions", "cache_mget_resent",
                                                  "cache_script_hits", "invalidation_keys", "cache_entries",
                                                  "batch_blocks", "cache_expired", "cache_ttl_asked")}
        return out

    def proxy_data_conns(self):
        """Local ports of the proxies' connections to Redis (ss -tnp)."""
        pids = {p.pid for p in self.procs[1:]}
        out = subprocess.run(["ss", "-tnpH", "state", "established"], capture_output=True, text=True).stdout
        ports = []
        for line in out.splitlines():
            f = line.split()
            if len(f) < 4 or f[-2] != "%s:%d" % (HOST, self.rport) and f[3] != "%s:%d" % (HOST, self.rport):
                continue
            pm = re.findall(r"pid=(\d+)", line)
            if pm and int(pm[0]) in pids:
                ports.append(f[2].rsplit(":", 1)[1])
        return ports

    def chaos(self):
        """Kills the proxies' invalidation connections (CLIENT KILL TYPE
        pubsub) and, with --chaos 2, their data connections too (C4)."""
        r = random.Random(self.a.seed + 99)
        c = Conn(self.rport)
        try:
            while not self.stop.is_set():
                time.sleep(r.uniform(0.2, 1.2))
                if r.random() < 0.5 or self.a.chaos < 2:
                    n = c.call("CLIENT", "KILL", "TYPE", "pubsub")
                    self.counts["chaos_kill_pubsub"] += n if isinstance(n, int) else 0
                else:
                    ports = self.proxy_data_conns()
                    if ports:
                        port = r.choice(ports)
                        n = c.call("CLIENT", "KILL", "ADDR", "%s:%s" % (HOST, port))
                        self.counts["chaos_kill_data"] += n if isinstance(n, int) else 0
        except Exception as e:
            import traceback
            self.errors.append("chaos: %r\n%s" % (e, traceback.format_exc()))

    def run(self):
        a = self.a
        self.start()
        self.t0 = time.monotonic()
        threads = [threading.Thread(target=self.writer, args=(i,), daemon=True) for i in range(a.writers)]
        threads += [threading.Thread(target=self.reader, args=(i,), daemon=True) for i in range(a.readers)]
        if a.chaos:
            threads.append(threading.Thread(target=self.chaos, daemon=True))
        for t in threads:
            t.start()
        end = time.monotonic() + a.duration
        while time.monotonic() < end and not self.stop.is_set():
            time.sleep(1.0)
            self.check_pending()
            for i, p in enumerate(self.procs):
                if p.poll() is not None:
                    self.errors.append("process %d exited with %s" % (i, p.returncode))
                    self.stop.set()
            if len(self.violations) > 50:
                self.stop.set()
        self.stop.set()
        for t in threads:
            t.join(30)
        self.check_pending(final=True)
        self.final_check()
        st = self.stats()
        return st


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "sidecache"))
    ap.add_argument("--redis-server", default="redis-server",
                    help="the redis-server binary (build-deps/redis-6.2/redis-server: Redis 6.2)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--duration", type=float, default=30)
    ap.add_argument("--proxies", type=int, default=2)
    ap.add_argument("--mode", default="bcast")
    ap.add_argument("--batch", type=int, default=250)
    ap.add_argument("--cache-mem", default="256mb")
    ap.add_argument("--ttl", action="store_true")
    ap.add_argument("--acl", action="store_true")
    ap.add_argument("--acl-lookup", action="store_true",
                    help="with --acl: ub may use name n1 as a key (so some of its lookups are allowed)")
    ap.add_argument("--swapdb", action="store_true", help="SWAPDB through the proxy (needs --proxies 1)")
    ap.add_argument("--multidb", action="store_true")
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--readers", type=int, default=6)
    ap.add_argument("--nkeys", type=int, default=6)
    ap.add_argument("--nfields", type=int, default=4,
                    help="names per directory (above 256 cached ones a purge takes the large-group path)")
    ap.add_argument("--slack", type=float, default=0.05)
    ap.add_argument("--hz", type=int, default=10)
    ap.add_argument("--write-sleep", type=float, default=0.0)
    ap.add_argument("--port-base", type=int, default=47100)
    ap.add_argument("--extra", default="")
    ap.add_argument("--relay", choices=("toxi", "py"), default="toxi" if os.path.exists(ToxiRelays.BIN) else "py",
                    help="what delays (--inv-delay-ms, --data-delay-ms): toxiproxy (default when built) or "
                         "a relay thread in this script (its log shows when each invalidation passed)")
    ap.add_argument("--data-delay-ms", type=float, default=0,
                    help="the proxies' data connections through a relay that delays them this long "
                         "(fills in flight for long while writes and invalidations overtake them: C3)")
    ap.add_argument("--inv-delay-ms", type=float, default=0,
                    help="invalidation connections through a relay that delays them this long "
                         "(set --slack above it: other nodes' writes then show that late)")
    ap.add_argument("--chaos", type=int, default=0,
                    help="1: kill the proxies' invalidation connections now and then; 2: their data connections too")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs)")
    a = ap.parse_args()
    try:  # "Redis server v=6.2.14 ...": what the commands sent may use
        out = subprocess.run([a.redis_server, "--version"], capture_output=True, text=True).stdout
        a.redis_server_major = int(out.split("v=", 1)[1].split(".")[0])
    except (OSError, IndexError, ValueError):
        a.redis_server_major = 7
    if a.swapdb and a.proxies != 1:
        ap.error("--swapdb needs --proxies 1 (Redis sends no invalidation for SWAPDB: documented)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))   # cleanup (finally) on timeout
    s = Stress(a)
    rc = 0
    try:
        st = s.run()
    finally:
        s.shutdown()
    print("seed=%d mode=%s proxies=%d duration=%.0f counts=%s" % (a.seed, a.mode, a.proxies, a.duration,
                                                                  dict(s.counts)))
    for k, v in st.items():
        print("  %s %s" % (k, v))
    sw = sorted(s.stale_within_slack)
    if sw:
        print("  GET/HGET reads through a proxy that returned a state another node had replaced before the "
              "read began: %d (p50 %.2f ms, p99 %.2f ms, max %.2f ms)" % (
                  len(sw), 1000 * sw[len(sw) // 2], 1000 * sw[int(len(sw) * 0.99)], 1000 * sw[-1]))
    if s.errors:
        print("ERRORS (%d):" % len(s.errors))
        for e in s.errors[:10]:
            print("  " + e)
        rc = 2
    if s.model_errors:
        print("MODEL MISMATCHES (%d):" % len(s.model_errors))
        for e in s.model_errors[:10]:
            print("  " + e)
        rc = max(rc, 2)
    if s.violations:
        print("VIOLATIONS (%d):" % len(s.violations))
        for v in s.violations[:8]:
            print("- " + v)
        rc = 1
    else:
        print("no violations")
    if a.keep or rc:
        print("logs in", s.tmp)
    else:
        shutil.rmtree(s.tmp, ignore_errors=True)
    sys.exit(rc)


if __name__ == "__main__":
    main()
