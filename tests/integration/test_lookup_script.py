"""
JuiceFS's lookup script (EVALSHA <sha> 2 d<parent> <name>) through the proxy,
byte for byte as Redis answers it, in RESP2 and RESP3, for the 1.x script and
the 0.x one (JUICEFS-REDIS.md section 4).

The proxy may answer a lookup from its cache (the dentry, then the inode's
attr); whatever it does, each reply must be exactly the one Redis sends for
the same data: hits, misses, missing names (1.x: an error naming the script;
0.x: nil), NOSCRIPT before SCRIPT LOAD and after SCRIPT FLUSH, inodes past
2^52-1, missing attrs, malformed dentries; and every change of a dentry or an
attr (direct on Redis, through the proxy, inside MULTI/EXEC) must show in the
next lookup.

Dentries: d<parent> hash, field = name, value = 1 type byte + 8-byte
big-endian inode. Attrs: i<ino> = 72 bytes ending in \\x00.
"""
import hashlib
import random
import threading
import time

import pytest

from cachehelpers import MODES, RELAY_ARGS, caches_lookups, cmd_matcher, relay, relay_settle, start_cached, warm  # noqa: F401
from exacthelpers import diff_transcripts
from helpers import Err, encode

from juicefs_scripts import LOOKUP_V0, LOOKUP_V1, SHA_V0, SHA_V1
SCRIPTS = {"v1": (LOOKUP_V1, SHA_V1), "v0": (LOOKUP_V0, SHA_V0)}

NOSCRIPT = b"-NOSCRIPT No matching script. Please use EVAL.\r\n"


def test_script_bodies_have_juicefs_digests():
    assert hashlib.sha1(LOOKUP_V1.encode()).hexdigest() == SHA_V1
    assert hashlib.sha1(LOOKUP_V0.encode()).hexdigest() == SHA_V0


PARAMS = [pytest.param(s, p, id="%s-resp%d" % (s, p)) for s in ("v1", "v0") for p in (2, 3)]


def dentry(ino, typ=1):
    return bytes([typ]) + ino.to_bytes(8, "big")


def make_attr(rng):
    return bytes(rng.randrange(256) for _ in range(71)) + b"\x00"


def found(ino, attr):
    return b"*2\r\n:%d\r\n$%d\r\n%s\r\n" % (ino, len(attr), attr)


MAX_INO = 4503599627370495          # 2^52 - 1: the 1.x script's limit
E14 = 10 ** 14                       # from here the 0.x script's key is in exponent notation

# The world both Redis servers start with (written on each the same way).
_rng = random.Random(20240601)
ATTRS = {ino: make_attr(_rng) for ino in (2, 3, 5, 6, 7, 100, MAX_INO, E14 - 1, E14 + 7)}
DENTRIES = {
    "file": dentry(2),
    "dir": dentry(3, typ=2),
    "noattr": dentry(4),                 # i4 does not exist
    "big": dentry(MAX_INO + 1),          # 1.x: ENOTSUP
    "max": dentry(MAX_INO),
    "below_e14": dentry(E14 - 1),
    "e14": dentry(E14 + 7),              # 0.x reads "i1.0000000000001e+14"
    "zero": dentry(0),                   # i0: not a cacheable key
    "short": b"\x01\x00\x05",            # unpack: data string too short
    "empty": b"",
    "typeonly": b"\x01",
    "long": dentry(5) + b"extra",        # unpack reads the first 8 bytes
    "hashattr": dentry(9),               # i9 is a hash: GET is WRONGTYPE
    "n\x00 \r\n\xc3\xa4": dentry(6),     # binary name
    "100": dentry(100),
}
NAMES = sorted(DENTRIES) + ["missing", ""]


def world_cmds():
    cmds = [("HSET", "d1") + tuple(x for kv in sorted(DENTRIES.items()) for x in kv)]
    for ino, a in sorted(ATTRS.items()):
        cmds.append(("SET", "i%d" % ino, a))
    cmds += [("SET", "i0", "attr-of-zero"), ("HSET", "i9", "f", "v"), ("SET", "d2", "a string"),
             ("HSET", "d3", "file", dentry(7))]
    return cmds


def lookup(sha, parent, name):
    return ("EVALSHA", sha, "2", parent, name)


class Pair:
    """The same connection setup on the target and on the reference Redis:
    .both(*cmd) sends to each and asserts identical bytes."""

    def __init__(self, target, ref, protocol):
        self.t = target.raw(auth=True, protocol=protocol)
        self.r = ref.raw(auth=True, protocol=protocol)
        self.protocol = protocol

    def both(self, *cmd, what=""):
        want = self.r.cmd(*cmd).raw
        got = self.t.cmd(*cmd).raw
        if got != want:
            raise AssertionError("%s%r\n  redis: %r\n  proxy: %r"
                                 % (what and what + ": ", cmd, want, got))
        return got

    def ref_only(self, *cmd):
        return self.r.cmd(*cmd).raw

    def close(self):
        self.t.close()
        self.r.close()


def _tracked_writes(cmds):
    return sum(1 for c in cmds if c[0] in ("HSET", "SET", "HDEL", "DEL") and c[1][:1] in ("i", "d")
               and c[1][1:2] in "123456789")


def settle_direct(st, upstream, cmds, ref=None, timeout=3.0):
    """Runs cmds directly on the proxy's Redis (and on ref), then waits until
    the proxy has counted at least one invalidation per write of a tracked
    key (every write in bcast mode; in the per-connection modes only keys a
    connection read are invalidated, so at least one is waited for)."""
    n = _tracked_writes(cmds)
    before = st["invalidation_keys"] if st is not None else 0
    with upstream.raw(auth=True) as d:
        for c in cmds:
            f = d.cmd(*c)
            assert not isinstance(f.value, Err), (c, f)
    if ref is not None:
        with ref.raw(auth=True) as d:
            for c in cmds:
                d.cmd(*c)
    if st is None or n == 0:
        return
    bcast = getattr(st.ep, "tracking_mode", "bcast") == "bcast"
    want = before + (n if bcast else 1)
    # (in the per-connection modes none comes for a key no connection read)
    deadline = time.monotonic() + (timeout if bcast else 1.0)
    while st["invalidation_keys"] < want and time.monotonic() < deadline:
        time.sleep(0.01)
    if not bcast:
        time.sleep(0.05)


@pytest.fixture
def cached(proxy_factory, is_direct):
    """(target, Stats or None): a caching proxy with tracking active."""
    if is_direct:
        return proxy_factory(), None
    return start_cached(proxy_factory)


def script_hits(st):
    """cache_script_hits, or None when the proxy does not report it."""
    if st is None:
        return None
    return st.get().get("cache_script_hits")


def load_world(target, ref, upstream, st):
    settle_direct(st, upstream, world_cmds(), ref=ref)


# ---------------------------------------------------------------------------


@pytest.mark.parametrize("script,protocol", PARAMS)
def test_noscript_before_script_load_then_load(cached, upstream, ref, script, protocol):
    """EVALSHA before SCRIPT LOAD: NOSCRIPT exactly as Redis, every time (also
    with the digest in upper case), then SCRIPT LOAD through the proxy
    returns the digest and the lookup works."""
    p, st = cached
    body, sha = SCRIPTS[script]
    load_world(p, ref, upstream, st)
    c = Pair(p, ref, protocol)
    for _ in range(3):
        for name in ("file", "missing"):
            assert c.both(*lookup(sha, "d1", name)) == NOSCRIPT
            assert c.both(*lookup(sha.upper(), "d1", name)) == NOSCRIPT
    assert c.both("SCRIPT", "EXISTS", sha) == b"*1\r\n:0\r\n"
    assert c.both("SCRIPT", "LOAD", body) == b"$40\r\n%s\r\n" % sha.encode()
    for _ in range(3):
        assert c.both(*lookup(sha, "d1", "file")) == found(2, ATTRS[2])
        assert c.both(*lookup(sha.upper(), "d1", "file")) == found(2, ATTRS[2])
    c.close()


@pytest.mark.parametrize("script,protocol", PARAMS)
def test_every_kind_of_lookup_matches_redis_repeatedly(cached, upstream, ref, script, protocol):
    """After SCRIPT LOAD through the proxy: each name of the world looked up
    five times in a row, then the whole list again in another order (hits,
    misses, missing names, ENOTSUP, nil attrs, malformed dentries, WRONGTYPE
    dentry hash or attr, binary names, other parents): every reply equals
    Redis's. Lookups of a found name with its attr are answered from the
    cache after the first (cache_script_hits; checked when reported)."""
    p, st = cached
    body, sha = SCRIPTS[script]
    load_world(p, ref, upstream, st)
    c = Pair(p, ref, protocol)
    c.both("SCRIPT", "LOAD", body)
    for name in NAMES:
        for _ in range(5):
            c.both(*lookup(sha, "d1", name), what="name %r" % name)
    rng = random.Random(3)
    order = NAMES * 3
    rng.shuffle(order)
    for name in order:
        c.both(*lookup(sha, "d1", name), what="name %r" % name)
    for parent, name in (("d2", "file"), ("d3", "file"), ("d4", "file"), ("d0", "file"),
                         ("x1", "file")):
        for _ in range(3):
            c.both(*lookup(sha, parent, name))
    # not the lookup shape: other numkeys, extra arguments
    c.both("EVALSHA", sha, "2", "d1", "file", "argv1")
    c.both("EVALSHA", sha, "3", "d1", "file", "d2")
    c.both("EVALSHA", sha, "02", "d1", "file")
    c.both("EVALSHA", sha, "1", "d1")
    c.both("EVAL", body, "2", "d1", "file")
    # hits of a plain found name
    h0 = script_hits(st)
    for _ in range(5):
        c.both(*lookup(sha, "d1", "file"))
    h1 = script_hits(st)
    if h0 is not None and caches_lookups(st):
        assert h1 - h0 >= 4, "5 lookups of a cached name, %d script hits" % (h1 - h0)
    c.close()


@pytest.mark.parametrize("script,protocol", PARAMS)
def test_missing_name_repeated_and_mixed_protocols(cached, upstream, ref, script, protocol):
    """A missing name, looked up again and again (the answers may come from
    the cache), from this protocol, then the other, then back (HELLO on the
    same connection): byte-identical to Redis every time."""
    p, st = cached
    body, sha = SCRIPTS[script]
    load_world(p, ref, upstream, st)
    c = Pair(p, ref, protocol)
    c.both("SCRIPT", "LOAD", body)
    other = 5 - protocol
    h0 = script_hits(st)
    for proto in (protocol, other, protocol):
        hello_t = c.t.cmd("HELLO", proto)
        hello_r = c.r.cmd("HELLO", proto)
        assert not isinstance(hello_t.value, Err) and not isinstance(hello_r.value, Err)
        for name in ("missing", "missing2", "missing"):
            for _ in range(4):
                c.both(*lookup(sha, "d1", name), what="proto %d" % proto)
    h1 = script_hits(st)
    if h0 is not None and caches_lookups(st):
        assert h1 - h0 >= 24, "36 lookups of missing names, only %d script hits" % (h1 - h0)
    c.close()


# every script and protocol in bcast mode (the default); in the per-connection
# tracking modes (where Redis tracks what each connection read) RESP2 only
DIRECT_PARAMS = ([pytest.param(s, p, "bcast", id="%s-resp%d-bcast" % (s, p))
                  for s in ("v1", "v0") for p in (2, 3)]
                 + [pytest.param(s, 2, m, id="%s-resp2-%s" % (s, m))
                    for s in ("v1", "v0") for m in MODES[1:]])


@pytest.mark.parametrize("script,protocol,mode", DIRECT_PARAMS)
def test_direct_changes_show_in_the_next_lookup(proxy_factory, is_direct, upstream, ref, script,
                                                protocol, mode):
    """A name re-pointed to another inode, deleted, re-created, its inode's
    attr changed or deleted, its directory deleted — each directly on Redis
    (another node, as far as the proxy knows) between two runs of lookups
    that may be cached: once the proxy has received the invalidation, the
    lookup returns exactly what Redis does."""
    if is_direct:
        p, st = proxy_factory(), None
    else:
        p, st = start_cached(proxy_factory, mode=mode)
    body, sha = SCRIPTS[script]
    load_world(p, ref, upstream, st)
    c = Pair(p, ref, protocol)
    c.both("SCRIPT", "LOAD", body)
    rng = random.Random(9)
    new_attr = make_attr(rng)
    changes = [
        [("HSET", "d1", "file", dentry(3))],            # re-pointed
        [("HDEL", "d1", "file")],                       # deleted
        [("HSET", "d1", "file", dentry(2))],            # re-created
        [("SET", "i2", new_attr)],                      # attr changed
        [("DEL", "i2")],                                # attr gone
        [("SET", "i2", ATTRS[2])],                      # and back
        [("HSET", "d1", "missing", dentry(5))],         # a missing name appears
        [("HSET", "d1", "file", dentry(MAX_INO + 1))],  # to an inode past the limit
        [("HSET", "d1", "file", dentry(2))],
        [("HSET", "d1", "file", b"\x01\x00")],           # malformed
        [("HSET", "d1", "file", dentry(2))],
        [("DEL", "d1")],                                # the whole directory
        [("HSET", "d1", "file", dentry(3), "missing", dentry(2))],
    ]
    names = ("file", "missing", "dir")
    for step, ch in enumerate(changes):
        for name in names:
            for _ in range(3):
                c.both(*lookup(sha, "d1", name), what="before change %d" % step)
        settle_direct(st, upstream, ch, ref=ref)
        for name in names:
            for _ in range(2):
                c.both(*lookup(sha, "d1", name), what="after change %d %r" % (step, ch))
    c.close()


@pytest.mark.proxy_only
@pytest.mark.parametrize("script,protocol", PARAMS)
def test_writes_through_the_proxy_show_at_once(relay, proxy_factory, upstream, ref, script,
                                               protocol):
    """HSET/HDEL/SET/DEL through the proxy (from this client, or from another
    one), one at a time, pipelined with the lookup, inside MULTI/EXEC, a
    RENAME over the directory, and a script writing an undeclared key: the
    next lookup is Redis's answer, while Redis's own invalidations are held
    back by the relay (only the proxy's own invalidation can make it right)."""
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS)
    body, sha = SCRIPTS[script]
    base_relay, base_keys = relay.invalidation_count(), st["invalidation_keys"]
    with upstream.raw(auth=True) as d, ref.raw(auth=True) as r:
        for cmd in world_cmds():
            d.cmd(*cmd)
            r.cmd(*cmd)
    relay_settle(relay, st, base_relay, base_keys, ["d1", "d2", "d3", "i9"]
                 + ["i%d" % i for i in ATTRS])
    c = Pair(p, ref, protocol)
    o = Pair(p, ref, 2)
    c.both("SCRIPT", "LOAD", body)
    rng = random.Random(11)
    a_new = make_attr(rng)

    def warm_all():
        for name in ("file", "dir", "missing"):
            for _ in range(3):
                c.both(*lookup(sha, "d1", name))
                o.both(*lookup(sha, "d1", name))

    steps = [
        ("seq", [("HSET", "d1", "file", dentry(3))]),
        ("seq", [("HDEL", "d1", "file")]),
        ("seq", [("HSET", "d1", "file", dentry(2))]),
        ("seq", [("SET", "i2", a_new)]),
        ("seq", [("DEL", "i2")]),
        ("seq", [("SET", "i2", ATTRS[2])]),
        ("seq", [("HSET", "d1", "missing", dentry(3))]),
        ("other", [("HSET", "d1", "file", dentry(5))]),
        ("other", [("HDEL", "d1", "missing")]),
        ("pipeline", [("HSET", "d1", "file", dentry(2))]),
        ("pipeline", [("SET", "i2", a_new), ("HSET", "d1", "dir", dentry(2))]),
        ("multi", [("HDEL", "d1", "file"), ("HSET", "d1", "missing", dentry(3)),
                   ("SET", "i3", a_new)]),
        ("multi", [("HSET", "d1", "file", dentry(3)), ("HDEL", "d1", "missing")]),
        ("seq", [("HSET", "d8", "file", dentry(5), "dir", dentry(2)), ("RENAME", "d8", "d1")]),
        ("seq", [("EVAL", "return redis.call('HSET', 'd1', 'file', ARGV[1])", "0", dentry(3))]),
        ("seq", [("EVAL", "return redis.call('SET', 'i3', ARGV[1])", "0", ATTRS[3])]),
        ("seq", [("HSET", "d1", "missing", dentry(2)), ("FLUSHDB",)]),
    ]
    relay.hold_tracking()
    try:
        for i, (how, writes) in enumerate(steps):
            warm_all()
            what = "step %d (%s %r)" % (i, how, writes)
            if how == "seq":
                for w in writes:
                    c.both(*w, what=what)
            elif how == "other":
                for w in writes:
                    o.both(*w, what=what)
            elif how == "multi":
                cmds = [("MULTI",)] + writes + [("EXEC",)]
                for w in cmds:
                    c.both(*w, what=what)
            else:
                cmds = writes + [lookup(sha, "d1", n) for n in ("file", "dir", "missing")]
                data = b"".join(encode(*x) for x in cmds)
                c.r.send(data)
                c.t.send(data)
                want = [f.raw for f in c.r.read_frames(len(cmds))]
                got = [f.raw for f in c.t.read_frames(len(cmds))]
                msg = diff_transcripts(cmds, want, got)
                if msg:
                    raise AssertionError(what + ": " + msg)
            for name in ("file", "dir", "missing"):
                c.both(*lookup(sha, "d1", name), what=what)
                o.both(*lookup(sha, "d1", name), what=what + " (other client)")
    finally:
        relay.release_tracking()
    c.close()
    o.close()


@pytest.mark.parametrize("script,protocol", PARAMS)
def test_script_flush_through_the_proxy_then_noscript(cached, upstream, ref, script, protocol):
    """SCRIPT FLUSH (plain, ASYNC, SYNC, inside MULTI) through the proxy, then
    the lookup: NOSCRIPT exactly as Redis, repeatedly, although the lookup
    was cached just before; SCRIPT LOAD again and it answers again."""
    p, st = cached
    body, sha = SCRIPTS[script]
    load_world(p, ref, upstream, st)
    c = Pair(p, ref, protocol)
    for flush in ([("SCRIPT", "FLUSH")], [("SCRIPT", "FLUSH", "ASYNC")],
                  [("SCRIPT", "FLUSH", "SYNC")],
                  [("MULTI",), ("SCRIPT", "FLUSH"), ("EXEC",)]):
        c.both("SCRIPT", "LOAD", body)
        for _ in range(4):
            for name in ("file", "missing"):
                c.both(*lookup(sha, "d1", name))
        for f in flush:
            c.both(*f)
        for _ in range(3):
            for name in ("file", "missing"):
                assert c.both(*lookup(sha, "d1", name), what="after %r" % flush) == NOSCRIPT
    c.close()


@pytest.mark.parametrize("script,protocol", PARAMS)
def test_script_flush_directly_on_redis_then_noscript(request, cached, upstream, ref, script, protocol):
    """SCRIPT FLUSH sent directly to Redis (not through the proxy, which
    cannot see it): Redis answers the next lookup with NOSCRIPT, and so must
    the proxy, although the lookup was cached. In the per-read tracking modes
    lookups always go to Redis, so there it holds."""
    p, st = cached
    if st is not None and caches_lookups(st):
        request.node.add_marker(pytest.mark.xfail(
            reason="known limitation (README): a SCRIPT FLUSH sent to Redis directly, not through "
                   "sidecache, is not seen; lookups answered from the cache go on until the next cache "
                   "flush, where Redis would answer NOSCRIPT (JuiceFS would just load the script again)",
            strict=True))
    body, sha = SCRIPTS[script]
    load_world(p, ref, upstream, st)
    c = Pair(p, ref, protocol)
    c.both("SCRIPT", "LOAD", body)
    for _ in range(4):
        for name in ("file", "missing"):
            c.both(*lookup(sha, "d1", name))
    upstream.client().script_flush()
    ref.client().script_flush()
    for name in ("file", "missing"):
        c.both(*lookup(sha, "d1", name), what="after a direct SCRIPT FLUSH")
    c.close()


@pytest.mark.parametrize("script,protocol", PARAMS)
def test_lookup_inside_multi_and_under_watch(relay, proxy_factory, upstream, ref, is_direct,
                                             script, protocol):
    """Lookups queued in MULTI answer +QUEUED and run in EXEC with Redis's
    current data; under WATCH they read Redis (a dentry changed directly on
    Redis while the relay holds back its invalidation)."""
    if is_direct:
        p, st = proxy_factory(), None
    else:
        p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS)
    body, sha = SCRIPTS[script]
    if st is not None:
        base_relay, base_keys = relay.invalidation_count(), st["invalidation_keys"]
    with upstream.raw(auth=True) as d, ref.raw(auth=True) as r:
        for cmd in world_cmds():
            d.cmd(*cmd)
            r.cmd(*cmd)
    if st is not None:
        relay_settle(relay, st, base_relay, base_keys, ["d1", "d2", "d3", "i9"]
                     + ["i%d" % i for i in ATTRS])
    c = Pair(p, ref, protocol)
    c.both("SCRIPT", "LOAD", body)
    for _ in range(3):
        c.both(*lookup(sha, "d1", "file"))
        c.both(*lookup(sha, "d1", "missing"))
    if st is not None:
        relay.hold_tracking()
    try:
        for srv in (upstream, ref):
            srv.client().hset("d1", mapping={"file": dentry(3), "missing": dentry(2)})
        for cmds in ([("MULTI",), lookup(sha, "d1", "file"), lookup(sha, "d1", "missing"),
                      ("EXEC",)],
                     [("WATCH", "d1"), lookup(sha, "d1", "file"), lookup(sha, "d1", "missing"),
                      ("MULTI",), lookup(sha, "d1", "file"), ("EXEC",)]):
            for cmd in cmds:
                c.both(*cmd)
    finally:
        if st is not None:
            relay.release_tracking()
    c.close()


@pytest.mark.parametrize("script", ["v1", "v0"])
def test_lookups_per_database(cached, upstream, ref, script):
    """The same d1/i2 keys with other values in db 2: lookups on a connection
    that SELECTs back and forth answer for its current database."""
    p, st = cached
    body, sha = SCRIPTS[script]
    load_world(p, ref, upstream, st)
    for srv in (upstream, ref):
        cl = srv.client(db=2)
        cl.hset("d1", mapping={"file": dentry(3), "other": dentry(2)})
        cl.set("i2", b"db2-attr-2")
        cl.set("i3", b"db2-attr-3")
    c = Pair(p, ref, 2)
    c.both("SCRIPT", "LOAD", body)
    for _ in range(3):
        for db in ("0", "2", "0", "2"):
            c.both("SELECT", db)
            for name in ("file", "other", "missing"):
                for _ in range(2):
                    c.both(*lookup(sha, "d1", name), what="db " + db)
    c.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("script", ["v1", "v0"])
def test_lookups_while_renaming(cached, upstream, ref, script):
    """Six clients look names up in a loop while one client renames entries
    through the proxy (re-point, delete, rename in MULTI/EXEC, new attr).
    After each write's ack, a lookup of every name it touched through a
    different proxy client returns exactly the new target (or the missing
    reply); and no lookup, ever, returns an inode with an attr that inode
    never had, nor anything but a found or missing reply."""
    p, st = cached
    body, sha = SCRIPTS[script]
    rng = random.Random(77)
    names = ["n%d" % i for i in range(8)]
    inos = list(range(10, 26))
    attrs = {ino: [make_attr(rng)] for ino in inos}
    state = {n: inos[i] for i, n in enumerate(names)}
    world = [("HSET", "d1") + tuple(x for n in names for x in (n, dentry(state[n])))]
    world += [("SET", "i%d" % ino, attrs[ino][0]) for ino in inos]
    settle_direct(st, upstream, world)
    with ref.raw(auth=True) as r:
        for cmd in world[:1]:
            r.cmd(*cmd)
        r.cmd("SCRIPT", "LOAD", body)
        missing = {2: r.cmd(*lookup(sha, "d1", "nope")).raw}
        r.cmd("HELLO", "3")
        missing[3] = r.cmd(*lookup(sha, "d1", "nope")).raw
    w = p.raw(auth=True)
    chk = p.raw(auth=True)
    assert w.cmd("SCRIPT", "LOAD", body).raw == b"$40\r\n%s\r\n" % sha.encode()
    lock = threading.Lock()
    stop = threading.Event()
    bad = []
    counts = [0]

    def expect(name, proto=2):
        ino = state[name]
        return missing[proto] if ino is None else found(ino, attrs[ino][-1])

    def reader(i):
        proto = 3 if i % 2 else 2
        r = random.Random(i)
        try:
            with p.raw(auth=True, protocol=proto if proto == 3 else None) as c:
                while not stop.is_set():
                    name = r.choice(names)
                    for _ in range(r.randint(1, 4)):
                        raw = c.cmd(*lookup(sha, "d1", name)).raw
                        counts[0] += 1
                        if raw == missing[proto]:
                            continue
                        ok = False
                        if raw.startswith(b"*2\r\n:"):
                            head, _, rest = raw[5:].partition(b"\r\n")
                            ino = int(head)
                            with lock:
                                ok = ino in attrs and any(raw == found(ino, a) for a in attrs[ino])
                        if not ok:
                            bad.append("reader %d, name %s: %r" % (i, name, raw[:120]))
                            return
        except Exception as e:
            bad.append("reader %d: %r" % (i, e))

    ts = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(6)]
    for t in ts:
        t.start()
    try:
        for step in range(600):
            op = rng.random()
            if op < 0.35:
                name, ino = rng.choice(names), rng.choice(inos)
                with lock:
                    state[name] = ino
                assert w.cmd("HSET", "d1", name, dentry(ino)).raw in (b":0\r\n", b":1\r\n")
                touched = [name]
            elif op < 0.5:
                name = rng.choice(names)
                with lock:
                    state[name] = None
                assert w.cmd("HDEL", "d1", name).raw in (b":0\r\n", b":1\r\n")
                touched = [name]
            elif op < 0.8:
                a, b = rng.sample(names, 2)
                with lock:
                    ino = state[a]
                if ino is None:
                    continue
                w.send(encode("MULTI") + encode("HDEL", "d1", a) + encode("HSET", "d1", b, dentry(ino))
                       + encode("EXEC"))
                fs = w.read_frames(4)
                assert fs[3].raw in (b"*2\r\n:1\r\n:0\r\n", b"*2\r\n:1\r\n:1\r\n"), fs
                with lock:
                    state[a], state[b] = None, ino
                touched = [a, b]
            else:
                ino = rng.choice(inos)
                na = make_attr(rng)
                with lock:
                    attrs[ino].append(na)
                assert w.cmd("SET", "i%d" % ino, na).raw == b"+OK\r\n"
                touched = [n for n in names if state[n] == ino]
            for name in touched:
                got = chk.cmd(*lookup(sha, "d1", name)).raw
                assert got == expect(name), (
                    "step %d: lookup of %s right after the write's ack returned %r, want %r"
                    % (step, name, got[:100], expect(name)[:100]))
            assert not bad, bad[:3]
    finally:
        stop.set()
        for t in ts:
            t.join(5)
    assert not bad, bad[:3]
    print("reader lookups: %d, script hits: %s" % (counts[0], script_hits(st)))
    w.close()
    chk.close()


# A lookup names its inode only in its reply, so no placeholder guards that
# fill: a write answered while the lookup was in flight must reject it, also
# when the write's purge at its reply is skipped (a transaction whose keys
# were purged when it was sent). Redis's own invalidation is held back, so
# only the proxy's bookkeeping can keep the old attribute out.
ATTR_OLD = b"OLD" + b"\x01" * 68 + b"\x00"
ATTR_NEW = b"NEW" + b"\x02" * 68 + b"\x00"


@pytest.mark.parametrize("how", ["local_multi", "pinned_watch", "plain_set"])
def test_lookup_fill_after_a_write_answered_meanwhile(relay, proxy_factory, upstream, how):
    p, st = start_cached(proxy_factory, up=relay, args=RELAY_ARGS)
    lookup = ("EVALSHA", SHA_V1, "2", "d1", "file")
    base_relay, base_keys = relay.invalidation_count(), st["invalidation_keys"]
    with upstream.raw(auth=True) as d:
        d.cmd("HSET", "d1", "file", dentry(5))
        d.cmd("SET", "i5", ATTR_OLD)
        d.cmd("SCRIPT", "LOAD", LOOKUP_V1)
    relay_settle(relay, st, base_relay, base_keys, ["d1", "i5"])
    r = p.raw(auth=True)               # RESP2: one pool
    w = p.raw(auth=True, protocol=3)   # RESP3: another pool, another connection to Redis
    x = p.raw(auth=True)
    for _ in range(3):
        r.cmd(*lookup)
    with st.delta() as dd:
        r.cmd(*lookup)
    assert dd["cache_script_hits"] == (1 if caches_lookups(st) else 0), dict(dd)
    # i5 leaves the cache (a write on Redis, its invalidation processed); the dentry stays
    b2, k2 = relay.invalidation_count(), st["invalidation_keys"]
    with upstream.raw(auth=True) as d:
        d.cmd("SET", "i5", ATTR_OLD)
    relay_settle(relay, st, b2, k2, ["i5"])
    relay.hold_tracking()
    try:
        if how == "local_multi":
            assert w.cmd("MULTI").raw == b"+OK\r\n"
            assert w.cmd("SET", "i5", ATTR_NEW).raw == b"+QUEUED\r\n"   # i5 purged here
        elif how == "pinned_watch":
            assert w.cmd("WATCH", "zz").raw == b"+OK\r\n"
            assert w.cmd("MULTI").raw == b"+OK\r\n"
            assert w.cmd("SET", "i5", ATTR_NEW).raw == b"+QUEUED\r\n"
        else:  # a plain write, sent (and purged) before the lookup, run after it
            hs = relay.hold_request(cmd_matcher("SET", "i5", ATTR_NEW))
            w.send_cmd("SET", "i5", ATTR_NEW)
            hs.wait()
        h = relay.hold_reply(cmd_matcher(*lookup))
        r.send_cmd(*lookup)                # dentry hit, i5 miss (or per-read modes): forwarded
        h.wait()                           # ran on Redis (read the old i5), reply held
        if how == "plain_set":
            hs.release()
            assert w.read_frame().raw == b"+OK\r\n"
        else:
            assert b"OK" in w.cmd("EXEC").raw   # ran after the lookup; reply delivered
        h.release()
        assert ATTR_OLD in r.read_frame().raw   # what Redis answered the lookup
        assert x.cmd("GET", "i5").value == ATTR_NEW, "stale after the write's reply"
    finally:
        relay.release_tracking()


def test_lookup_not_answered_for_a_user_denied_evalsha(proxy_factory, upstream):
    """C8: the cache answers no command the user's ACL refuses. A user
    denied EVALSHA fills HGET and GET entries, and knows the script loaded:
    its lookup still gets Redis's NOPERM, not the answer built from them."""
    d = upstream.client()
    d.execute_command("ACL", "SETUSER", "noeval", "reset", "on", ">pw", "~*", "&*", "+@all", "-evalsha")
    d.hset("d1", "f", dentry(2))
    d.set("i2", b"attr")
    p, st = start_cached(proxy_factory)
    with upstream.raw() as r:
        r.cmd("AUTH", "noeval", "pw")
        want = r.cmd(*lookup(SHA_V1, "d1", "f")).raw
    assert want.startswith(b"-NOPERM"), want
    c = p.raw()
    assert c.cmd("AUTH", "noeval", "pw").raw == b"+OK\r\n"
    c.cmd("SCRIPT", "LOAD", LOOKUP_V1)
    warm(c, st, ("HGET", "d1", "f"), ("GET", "i2"))
    for _ in range(2):
        assert c.cmd(*lookup(SHA_V1, "d1", "f")).raw == want


def acl_user_and_dir(proxy_factory, upstream, user, rules, names):
    """A user with the ACL rules, d1 with the names (inode 2, attr i2), the
    lookup script loaded; a cached proxy. Returns a client of the proxy logged in as the user, the stats, and
    a function giving Redis's own replies to that user's lookups of names."""
    d = upstream.client()
    d.execute_command("ACL", "SETUSER", user, "reset", "on", ">pw", *rules)
    for n in names:
        d.hset("d1", n, dentry(2))
    d.set("i2", b"attr")
    d.execute_command("SCRIPT", "LOAD", LOOKUP_V1)
    p, st = start_cached(proxy_factory)

    def redis_answers(*probes):
        with upstream.raw() as r:
            assert r.cmd("AUTH", user, "pw").raw == b"+OK\r\n"
            return [r.cmd(*lookup(SHA_V1, "d1", n)).raw for n in probes]
    c = p.raw()
    assert c.cmd("AUTH", user, "pw").raw == b"+OK\r\n"
    c.cmd("SCRIPT", "LOAD", LOOKUP_V1)
    return c, st, redis_answers


def test_c8_lookup_not_answered_where_redis_denies_the_name_key(proxy_factory, upstream):
    """C8: the script declares the name as a key, so Redis checks the user's
    key patterns on it. A user allowed some names (ok*) and not others gets
    NOPERM from Redis for any other name, found or missing; its own HGET and
    GET entries of that name must not answer the lookup, even after a
    lookup of an allowed name showed the user may send lookups."""
    c, st, redis_answers = acl_user_and_dir(proxy_factory, upstream, "names",
                                            ("~i*", "~d*", "~ok*", "&*", "+@all"), ("okname", "secret"))
    want_found, want_missing = redis_answers("secret", "nosuch")
    assert want_found.startswith(b"-NOPERM"), want_found
    assert want_missing.startswith(b"-NOPERM"), want_missing
    assert c.cmd(*lookup(SHA_V1, "d1", "okname")).raw == found(2, b"attr")
    assert b"ENOENT" in c.cmd(*lookup(SHA_V1, "d1", "oknone")).raw
    warm(c, st, ("HGET", "d1", "secret"), ("GET", "i2"), ("HGET", "d1", "nosuch"))
    for _ in range(2):
        assert c.cmd(*lookup(SHA_V1, "d1", "secret")).raw == want_found
        assert c.cmd(*lookup(SHA_V1, "d1", "nosuch")).raw == want_missing
    # the allowed names are answered from the entries their lookups filled
    with st.delta() as dl:
        assert c.cmd(*lookup(SHA_V1, "d1", "okname")).raw == found(2, b"attr")
    assert dl["cache_script_hits"] == (1 if caches_lookups(st) else 0)


def test_c8_lookup_not_answered_where_the_scripts_own_get_is_denied(proxy_factory, upstream):
    """C8: a user denied GET (+@all -get) may still send lookups; a missing
    name gets ENOENT, a found one the error of the script's own GET. Its
    HGET and MGET fill the entries a found lookup would be built from: the
    proxy must still relay Redis's error, never [inode, attr]."""
    c, st, redis_answers = acl_user_and_dir(proxy_factory, upstream, "noget", ("~*", "&*", "+@all", "-get"), ("f",))
    want, = redis_answers("f")
    # (6.2 wraps it: "-ERR Error running script (call to f_...): ... The user ...")
    assert want.startswith(b"-ERR ") and b"The user executing the script can't run this command" in want, want
    assert b"ENOENT" in c.cmd(*lookup(SHA_V1, "d1", "missing")).raw
    warm(c, st, ("MGET", "i2"), ("HGET", "d1", "f"))
    for _ in range(2):
        assert c.cmd(*lookup(SHA_V1, "d1", "f")).raw == want


def test_script_flush_in_multi_forgets_the_script_at_exec(proxy_factory, upstream):
    """SCRIPT FLUSH queued in MULTI runs at EXEC: a lookup answered by Redis
    between the queuing and the EXEC must not leave the script known as
    loaded; the next lookup is Redis's NOSCRIPT."""
    d = upstream.client()
    d.hset("d1", "f", dentry(2))
    d.set("i2", b"attr")
    p, st = start_cached(proxy_factory)
    a, b = p.raw(auth=True), p.raw(auth=True)
    b.cmd("SCRIPT", "LOAD", LOOKUP_V1)
    assert a.cmd("MULTI").raw == b"+OK\r\n"
    assert a.cmd("SCRIPT", "FLUSH").raw == b"+QUEUED\r\n"
    assert b.cmd(*lookup(SHA_V1, "d1", "f")).raw == found(2, b"attr")
    assert a.cmd("EXEC").raw == b"*1\r\n+OK\r\n"
    assert b.cmd(*lookup(SHA_V1, "d1", "f")).raw == NOSCRIPT


# Errors go-redis retries by itself (its shouldRetry), as it retries an EOF.
GO_REDIS_RETRIES = (b"-MASTERDOWN ", b"-CLUSTERDOWN ", b"-TRYAGAIN ", b"-LOADING ", b"-READONLY ")


def test_reads_lost_on_their_way_get_an_error_go_redis_retries(proxy_factory, upstream):
    """A lookup, a GET, an HGET, an MGET (and HSCAN, LRANGE: readdir, read)
    on their way to Redis when the proxy's connection to Redis is lost
    (here Redis hangs past upstream-timeout; a restart, a Sentinel switch or
    a killed connection do the same). Directly, go-redis would see EOF or a
    timeout and send each again (MaxRetries): a restart of a few seconds is
    a stall. A read changes nothing whether it ran or not, so the proxy's
    error for it must be one go-redis retries as well (MASTERDOWN, as for a
    command it could not send), not ERR: an ERR reaches JuiceFS as EIO, and
    for the lookup script as "unexpected error", after which JuiceFS stops
    using the script for the life of the process (redis.go
    handleLuaResult; so does a SCRIPT LOAD that fails, which JuiceFS sends
    after a NOSCRIPT). A write keeps its ERR: it may have run."""
    with upstream.raw(auth=True) as d:
        assert d.call("SCRIPT", "LOAD", LOOKUP_V1) == SHA_V1.encode()
        d.call("HSET", "d1", "f", dentry(2))
        d.call("SET", "i2", ATTRS[2])
    p = proxy_factory(args=("--upstream-timeout", "1"))
    reads = [lookup(SHA_V1, "d1", "f"), ("GET", "i2"), ("HGET", "d1", "f"), ("MGET", "i2", "i3"),
             ("HSCAN", "d1", "0", "MATCH", "*", "COUNT", "10000"), ("LRANGE", "c2_0", "0", "-1"),
             ("SCRIPT", "LOAD", LOOKUP_V1)]
    with p.raw(auth=True, timeout=15) as c:
        from cachehelpers import wait_tracking_active
        wait_tracking_active(p)
        with upstream.raw(auth=True, timeout=15) as sleeper:
            sleeper.send_cmd("DEBUG", "SLEEP", "4")
            time.sleep(0.3)
            c.send(b"".join(encode(*cmd) for cmd in reads) + encode("SET", "x", "1"))
            got = [f.raw for f in c.read_frames(len(reads) + 1, timeout=12)]
            assert sleeper.read_frame(timeout=10).raw == b"+OK\r\n"
    for cmd, raw in zip(reads, got):
        assert raw.startswith(GO_REDIS_RETRIES) and b"sidecache" in raw, (cmd, raw)
    assert got[-1].startswith(b"-ERR sidecache: "), got[-1]
