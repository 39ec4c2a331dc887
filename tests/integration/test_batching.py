"""
Pipelined writes through the proxy, byte for byte as Redis answers them.

The proxy is to forward runs of independent pipelined writes to Redis as
MULTI/EXEC blocks of at most `batch-max-commands` commands (DESIGN.md,
"Transactions and batched writes"), each command still getting its own reply.
Whatever it does, a pipeline sent through it must get exactly the replies
the same pipeline gets from Redis directly, and leave exactly the same data:
errors in the middle (WRONGTYPE, INCR of a non-integer, wrong arity, unknown
commands), reads of keys written earlier in the same pipeline (also keys the
cache held before), and the commands that must never be put in a block
(SELECT, CLIENT SETNAME, MULTI/EXEC, WATCH, BLPOP, SUBSCRIBE, SAVE, ...).

Each pipeline is sent in one write to the proxy and to a fresh reference
Redis (`ref`), and compared reply by reply; the data is then compared key by
key with DUMP. The proxy runs with its default batching, with
`--batch-max-commands 0` (off) and with `--batch-max-commands 3` (small
blocks); the last two are skipped while the binary does not know the
directive. test_batch_counters_in_info is skipped while INFO has no
batch_blocks / batch_commands.
"""
import random
import time

import pytest

from cachehelpers import wait_tracking_active
from exacthelpers import (assert_same_pipeline, diff_transcripts, pipeline_raw, proxy_supports,
                          sidecache_info)
from helpers import LONG_SCRIPT, busy_threshold_args, encode, wait_until

PROTOCOLS = [pytest.param(2, id="resp2"), pytest.param(3, id="resp3")]

BATCH_ARGS = [pytest.param((), id="default"),
              pytest.param(("--batch-max-commands", "0"), id="batch-off"),
              pytest.param(("--batch-max-commands", "3"), id="batch-3")]


@pytest.fixture
def target(request, proxy_factory):
    """The proxy with the test's `args` (parametrized)."""
    args = request.param
    if args and not proxy_supports(args[0].lstrip("-"), args[1]):
        pytest.skip("batching not built: the proxy does not know %s" % args[0])
    p = proxy_factory(args=args)
    p.batching = not (args and args[1] == "0")
    return p


def batch_stats(ep):
    """(batch_blocks, batch_commands), or None without the fields."""
    d = sidecache_info(ep)
    if "batch_blocks" not in d:
        return None
    return d["batch_blocks"], d["batch_commands"]


# ---------------------------------------------------------------------------
# Pipeline generators. Hashes stay small with short values and sets hold
# integers only, so that every encoding (listpack, intset) iterates in the
# same order on two servers and DUMP compares byte for byte.

STRING_KEYS = ["s:%d" % i for i in range(300)] + ["i1%d" % i for i in range(100)]
COUNTER_KEYS = ["c:%d" % i for i in range(100)]
HASH_KEYS = ["h:%d" % i for i in range(200)] + ["d1%d" % i for i in range(50)]
LIST_KEYS = ["l:%d" % i for i in range(100)]
SET_KEYS = ["t:%d" % i for i in range(50)]
ALL_KEYS = STRING_KEYS + COUNTER_KEYS + HASH_KEYS + LIST_KEYS + SET_KEYS

INCR_SCRIPT = "return redis.call('INCR', KEYS[1])"


def _value(rng):
    r = rng.random()
    if r < 0.4:
        return str(rng.randrange(-1000, 100000))
    if r < 0.8:
        return "v%d" % rng.randrange(100000)
    if r < 0.9:
        return "%.3f" % rng.uniform(-100, 100)
    return bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))   # binary, CRLF too


def _write(rng):
    """One write; about one in ten picks a key of any type (WRONGTYPE)."""
    anykey = rng.random() < 0.1

    def k(space):
        return rng.choice(ALL_KEYS if anykey else space)

    op = rng.random()
    if op < 0.22:
        return ("SET", k(STRING_KEYS), _value(rng))
    if op < 0.30:
        return ("MSET", k(STRING_KEYS), _value(rng), k(STRING_KEYS), _value(rng))
    if op < 0.42:
        # counters, and strings that hold text (ERR not an integer)
        return ("INCR", k(COUNTER_KEYS if rng.random() < 0.7 else STRING_KEYS))
    if op < 0.46:
        return ("INCRBY", k(COUNTER_KEYS), str(rng.randrange(-50, 50)))
    if op < 0.60:
        args = ["HSET", k(HASH_KEYS)]
        for _ in range(rng.randrange(1, 3)):
            args += ["f%d" % rng.randrange(10), "v%d" % rng.randrange(1000)]
        return tuple(args)
    if op < 0.64:
        return ("HDEL", k(HASH_KEYS), "f%d" % rng.randrange(10))
    if op < 0.66:
        return ("HINCRBY", k(HASH_KEYS), "f%d" % rng.randrange(10), "1")
    if op < 0.76:
        return ("RPUSH", k(LIST_KEYS)) + tuple(_value(rng) for _ in range(rng.randrange(1, 4)))
    if op < 0.78:
        return ("LPOP", k(LIST_KEYS))
    if op < 0.82:
        return ("SADD", k(SET_KEYS), str(rng.randrange(100)))
    if op < 0.90:
        return ("DEL",) + tuple(rng.choice(ALL_KEYS) for _ in range(rng.randrange(1, 3)))
    if op < 0.95:
        return ("APPEND", k(STRING_KEYS), "+%d" % rng.randrange(10))
    if op < 0.97:
        return ("SETNX", k(STRING_KEYS), "nx")
    return ("EVAL", INCR_SCRIPT, "1", k(COUNTER_KEYS))


def _read(rng, written):
    """A read of a key written a little earlier in the pipeline."""
    key = rng.choice(written[-40:])
    if key.startswith(("h:", "d")):
        return rng.choice([("HGET", key, "f%d" % rng.randrange(10)), ("HGETALL", key),
                           ("HLEN", key)])
    if key.startswith("l:"):
        return rng.choice([("LRANGE", key, "0", "-1"), ("LLEN", key)])
    if key.startswith("t:"):
        return rng.choice([("SCARD", key), ("SISMEMBER", key, str(rng.randrange(100)))])
    return rng.choice([("GET", key), ("GET", key), ("STRLEN", key), ("TYPE", key)])


def write_pipeline(n, seed, read_ratio=0.0):
    rng = random.Random(seed)
    cmds, written = [], []
    while len(cmds) < n:
        if written and rng.random() < read_ratio:
            cmds.append(_read(rng, written))
            continue
        w = _write(rng)
        cmds.append(w)
        if w[0] == "MSET":
            written += [w[1], w[3]]
        elif w[0] == "EVAL":
            written.append(w[3])
        else:
            written.append(w[1])
    return cmds


def _errors(replies):
    return sum(1 for r in replies if r[:1] in (b"-", b"!"))


def data_of(server, dbs=(0, 1)):
    """{db: [(key, DUMP bytes)]}, keys sorted."""
    out = {}
    with server.raw(auth=True) as c:
        for db in dbs:
            assert c.cmd("SELECT", db).raw == b"+OK\r\n"
            keys = sorted(c.call("KEYS", "*"))
            dumps = pipeline_raw(None, [("DUMP", k) for k in keys], conn=c)
            out[db] = list(zip(keys, dumps))
    return out


def assert_same_data(upstream, ref, dbs=(0, 1)):
    got, want = data_of(upstream, dbs), data_of(ref, dbs)
    for db in want:
        gk = [k for k, _ in got[db]]
        wk = [k for k, _ in want[db]]
        assert gk == wk, "db %d: keys differ: only on proxy's Redis %r, only on ref %r" % (
            db, sorted(set(gk) - set(wk))[:10], sorted(set(wk) - set(gk))[:10])
        for (k, g), (_, w) in zip(got[db], want[db]):
            assert g == w, "db %d: key %r differs: %r vs ref %r" % (db, k, g[:80], w[:80])


# ---------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("target", BATCH_ARGS, indirect=True)
def test_10k_write_pipeline_matches_redis(target, upstream, ref, protocol):
    """10,000 writes (SET/MSET/HSET/INCR/RPUSH/DEL/... with WRONGTYPE and
    not-an-integer errors scattered through) in one write: every reply and
    the final data identical to Redis's."""
    cmds = write_pipeline(10_000, seed=1000 + protocol)
    before = batch_stats(target)
    got = assert_same_pipeline(target, ref, cmds, protocol=protocol)
    after = batch_stats(target)
    if before is not None:      # the batching path was taken (or not, when off)
        blocks, ncmds = after[0] - before[0], after[1] - before[1]
        print("batch_blocks +%d batch_commands +%d" % (blocks, ncmds))
        if target.batching:
            assert blocks >= 10 and ncmds >= 5000, (before, after)
        else:
            assert blocks == 0 and ncmds == 0, (before, after)
    errs = _errors(got)
    assert 100 < errs < 2000, "test bug: %d errors in the pipeline" % errs
    assert any(b"WRONGTYPE" in r for r in got) and any(b"not an integer" in r for r in got)
    assert_same_data(upstream, ref)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("target", BATCH_ARGS, indirect=True)
def test_pipeline_with_reads_of_its_own_writes(target, upstream, ref, protocol):
    """Reads mixed into a write pipeline (a quarter of it) see the writes
    before them in the same pipeline, including i/d keys that were cached
    before the pipeline (warmed with two reads through the proxy)."""
    pre = []
    for k in STRING_KEYS[300:]:
        pre.append(("SET", k, "old-" + k))
    for k in HASH_KEYS[200:]:
        pre.append(("HSET", k, "f1", "old", "f2", "old"))
    warmups = [("GET", k) for k in STRING_KEYS[300:]] + [
        ("HGET", k, f) for k in HASH_KEYS[200:] for f in ("f1", "f2", "f3")]
    pre += warmups + warmups
    cmds = write_pipeline(4_000, seed=7 + protocol, read_ratio=0.25)
    # and a tail that rewrites every cached key and reads it back at once
    for k in STRING_KEYS[300:]:
        cmds += [("SET", k, "tail-" + k), ("GET", k)]
    for k in HASH_KEYS[200:]:
        cmds += [("HSET", k, "f1", "tail"), ("HGET", k, "f1"), ("HDEL", k, "f2"),
                 ("HGET", k, "f2")]
    want = pipeline_raw(ref, cmds, protocol, pre=pre)
    got = pipeline_raw(target, cmds, protocol, pre=pre)
    msg = diff_transcripts(cmds, want, got)
    if msg:
        raise AssertionError(msg)
    assert_same_data(upstream, ref)
    # and the cache agrees afterwards
    after = [("GET", k) for k in STRING_KEYS[300:]] + [("HGET", k, "f1") for k in HASH_KEYS[200:]]
    assert pipeline_raw(target, after, protocol) == pipeline_raw(ref, after, protocol)


def _padding(tag, n=5):
    return [("SET", "pad:%s:%d" % (tag, i), str(i)) for i in range(n)] + [("INCR", "pad:n")]


NEVER_BATCHED = (
    _padding("a") + [("SELECT", "1"), ("SET", "a", "one"), ("GET", "a"), ("SET", "i5", "db1"),
                     ("GET", "i5")] + _padding("b")
    + [("SELECT", "0"), ("GET", "a"), ("GET", "i5")] + _padding("c")
    + [("CLIENT", "SETNAME", "batchy")] + _padding("d") + [("CLIENT", "GETNAME")]
    + _padding("e")
    + [("MULTI",), ("SET", "a", "in-multi"), ("INCR", "pad:n"), ("GET", "a"), ("EXEC",)]
    + _padding("f")
    + [("MULTI",), ("SET", "a", "discarded"), ("DISCARD",), ("GET", "a")] + _padding("g")
    + [("WATCH", "w"), ("SET", "w", "mine"), ("MULTI",), ("INCR", "w2"), ("EXEC",)]
    + _padding("h")
    + [("WATCH", "w"), ("MULTI",), ("INCR", "w2"), ("EXEC",)] + _padding("i")
    + [("WATCH", "w"), ("SET", "x", "1"), ("UNWATCH",), ("SET", "w", "z")] + _padding("j")
    + [("RPUSH", "q", "x"), ("BLPOP", "q", "0.01"), ("BLPOP", "empty", "0.01"),
       ("BRPOPLPUSH", "empty", "q2", "0.01")] + _padding("k")
    + [("EXEC",), ("DISCARD",), ("SET", "after", "errors")] + _padding("l")
    + [("SAVE",)] + _padding("m")
    + [("EVAL", INCR_SCRIPT, "1", "pad:n"), ("EVAL", "return redis.call('INCR', KEYS[1])", "1",
                                               "a")] + _padding("n")
    + [("PING",), ("ECHO", "hi")] + _padding("o")
)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("target", BATCH_ARGS, indirect=True)
def test_pipeline_with_commands_never_batched(target, upstream, ref, protocol):
    """SELECT, CLIENT SETNAME/GETNAME, MULTI/EXEC/DISCARD, WATCH (a conflict
    by the client's own write, and none), BLPOP with a 10 ms timeout, SAVE,
    EXEC/DISCARD without MULTI, scripts, PING/ECHO, surrounded by writes, in
    one write: the same replies as direct, then SUBSCRIBE at the end of a
    second pipeline (and a message published to it), then the same data."""
    tail = _padding("z") + [("SET", "i6", "v"), ("GET", "i6"), ("SUBSCRIBE", "chan")]

    def run(ep):
        with ep.raw(auth=True, protocol=protocol) as c:
            r1 = pipeline_raw(None, NEVER_BATCHED, conn=c)
            r2 = pipeline_raw(None, tail, conn=c)
            with ep.raw(auth=True) as pub:
                r3 = [pub.cmd("PUBLISH", "chan", "m").raw]
            r3.append(c.read_frame().raw)
            r3.append(c.cmd("UNSUBSCRIBE", "chan").raw)
            r3.append(c.cmd("CLIENT", "GETNAME").raw)
            r3.append(c.cmd("GET", "a").raw)
        return r1 + r2 + r3

    cmds = NEVER_BATCHED + tail + [("PUBLISH",), ("message",), ("UNSUBSCRIBE",),
                                   ("CLIENT", "GETNAME"), ("GET", "a")]
    want = run(ref)
    got = run(target)
    msg = diff_transcripts(cmds, want, got)
    if msg:
        raise AssertionError(msg)
    assert_same_data(upstream, ref)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("target", BATCH_ARGS, indirect=True)
def test_pipeline_ending_in_an_open_transaction(target, upstream, ref, protocol):
    """Writes, then MULTI and queued writes as the end of the pipeline; EXEC
    comes in a later write, after another client wrote: identical replies."""
    cmds = _padding("a", 20) + [("MULTI",), ("SET", "k", "in"), ("INCR", "pad:n")]

    def run(ep):
        with ep.raw(auth=True, protocol=protocol) as c:
            r = pipeline_raw(None, cmds, conn=c)
            with ep.raw(auth=True) as o:
                r.append(o.cmd("SET", "k", "other").raw)
            r += pipeline_raw(None, [("GET", "k"), ("EXEC",), ("GET", "k")], conn=c)
        return r

    want, got = run(ref), run(target)
    assert got == want, diff_transcripts(cmds + [("o",), ("GET",), ("EXEC",), ("GET",)], want, got)
    assert_same_data(upstream, ref)


QUEUE_TIME_ERRORS = [("SET", "k"), ("NOSUCHCMD", "x"), ("HSET", "h:1", "f"), ("GET",),
                     ("OBJECT", "NOPE"), ("CLIENT", "NOPE"), ("INCR",), ("RPUSH", "l:1"),
                     ("XADD", "x", "*"), ("SET", "k", "v", "NOSUCHOPT"), ("ZADD", "z", "nan", "m")]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("target", BATCH_ARGS, indirect=True)
def test_queue_time_errors_in_the_middle_of_writes(target, upstream, ref, protocol):
    """Wrong arity, unknown commands and subcommands (errors Redis would give
    when queuing inside MULTI, aborting a whole block) and syntax errors,
    each between runs of writes: every command gets its own reply, exactly
    as direct, and every write around them is applied."""
    rng = random.Random(55 + protocol)
    cmds = []
    for i, bad in enumerate(QUEUE_TIME_ERRORS * 3):
        cmds += write_pipeline(rng.randrange(1, 12), seed=i * 31 + protocol)
        cmds.append(bad)
    cmds += write_pipeline(20, seed=999)
    got = assert_same_pipeline(target, ref, cmds, protocol=protocol)
    assert _errors(got) >= len(QUEUE_TIME_ERRORS) * 3
    assert_same_data(upstream, ref)


@pytest.mark.parametrize("target", BATCH_ARGS, indirect=True)
def test_many_clients_pipelining_writes_at_once(target, upstream, ref):
    """Eight clients each send their own 1,500-command pipeline, each in a
    database of its own (SELECT n first), at the same time: each transcript
    equals the same pipeline run alone on Redis, and so does the data."""
    import threading
    pipes = [write_pipeline(1500, seed=400 + n, read_ratio=0.1) for n in range(8)]

    def proto(n):
        return 3 if n % 2 else None

    want = [pipeline_raw(ref, p, proto(n), pre=[("SELECT", n)]) for n, p in enumerate(pipes)]
    got = [None] * len(pipes)
    errors = []

    def run(n):
        try:
            got[n] = pipeline_raw(target, pipes[n], proto(n), pre=[("SELECT", n)])
        except Exception as e:
            errors.append(repr(e))

    ts = [threading.Thread(target=run, args=(n,)) for n in range(len(pipes))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(50)
    assert not errors, errors
    for n in range(len(pipes)):
        msg = diff_transcripts(pipes[n], want[n], got[n], what="client %d" % n)
        if msg:
            raise AssertionError(msg)
    assert_same_data(upstream, ref, dbs=range(8))


@pytest.mark.proxy_only
def test_batch_counters_in_info(proxy, upstream):
    """A pure pipeline of 1,000 SETs travels as blocks of at most 250
    commands: batch_blocks grows by at least 4 and batch_commands by about
    1,000 (skipped until the proxy reports the fields). Not exactly 1,000:
    where a read of the client's socket ends one command into a new block,
    that command goes alone (a block of one is no block), and how the
    kernel splits the client's write into reads varies with the load.
    Only once the proxy has Redis's command table (read at start-up, before
    tracking is set up) can it tell writes from the rest: until then
    nothing is batched, so the test waits for that."""
    wait_tracking_active(proxy)
    before = sidecache_info(proxy)
    if "batch_blocks" not in before or "batch_commands" not in before:
        pytest.skip("batching not built (no batch_blocks/batch_commands in INFO)")
    cmds = [("SET", "b:%d" % i, str(i)) for i in range(1000)]
    with proxy.raw(auth=True) as c:
        assert pipeline_raw(None, cmds, conn=c) == [b"+OK\r\n"] * 1000
    after = sidecache_info(proxy)
    assert after["batch_blocks"] - before["batch_blocks"] >= 4, (before, after)
    assert 990 <= after["batch_commands"] - before["batch_commands"] <= 1000, (before, after)
    assert upstream.client().dbsize() == 1000


@pytest.mark.parametrize("target", BATCH_ARGS, indirect=True)
def test_blocking_writes_in_a_pipeline_still_block(target, upstream, ref):
    """BLMOVE / BRPOPLPUSH / BZPOPMIN / BLMPOP between writes in one pipeline
    block as they do direct (inside a MULTI block they would answer nil at
    once): another client pushes 0.3 s later and each gets that element."""
    import threading
    cmds = (_padding("a") + [("BLMOVE", "src1", "dst", "LEFT", "RIGHT", "5")] + _padding("b")
            + [("BRPOPLPUSH", "src2", "dst", "5")] + _padding("c")
            + [("BZPOPMIN", "z1", "5")] + _padding("d")
            + [("BLMPOP", "5", "1", "src3", "LEFT")] + _padding("e"))
    pushes = [("RPUSH", "src1", "e1"), ("RPUSH", "src2", "e2"), ("ZADD", "z1", "1", "m"),
              ("RPUSH", "src3", "e3")]

    def run(ep):
        def pusher():
            with ep.raw(auth=True) as o:
                for p in pushes:
                    time.sleep(0.3)
                    o.cmd(*p)
        t = threading.Thread(target=pusher)
        t0 = time.monotonic()
        t.start()
        r = pipeline_raw(ep, cmds, None)
        t.join()
        return r, time.monotonic() - t0

    want, t_ref = run(ref)
    got, t_got = run(target)
    msg = diff_transcripts(cmds, want, got)
    if msg:
        raise AssertionError(msg)
    assert t_got >= 1.1, "the pipeline took %.2fs: the blocking writes did not block" % t_got
    assert_same_data(upstream, ref)


@pytest.mark.parametrize("target", BATCH_ARGS, indirect=True)
def test_client_reply_skip_and_off_in_a_pipeline(target, upstream, ref):
    """CLIENT REPLY SKIP / OFF / ON between writes: exactly the replies
    Redis sends (none for the skipped ones), and all the writes applied."""
    cmds = (_padding("a") + [("CLIENT", "REPLY", "SKIP"), ("SET", "skipped", "1")]
            + _padding("b") + [("CLIENT", "REPLY", "OFF")] + _padding("c")
            + [("INCR", "pad:n"), ("CLIENT", "REPLY", "ON")] + _padding("d") + [("GET", "skipped")])

    def run(ep):
        with ep.raw(auth=True) as c:
            c.send(b"".join(encode(*x) for x in cmds))
            c.send(encode("PING", "end"))
            out = []
            while True:
                f = c.read_frame(5)
                out.append(f.raw)
                if f.raw == b"$3\r\nend\r\n":
                    return out

    want, got = run(ref), run(target)
    assert got == want, "\n".join("%d: redis %r / proxy %r" % (i, w, g) for i, (w, g) in
                                  enumerate(zip(want, got)) if w != g) or (want, got)
    assert_same_data(upstream, ref)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("target", BATCH_ARGS, indirect=True)
def test_oom_refusals_in_a_write_pipeline(target, upstream, ref, protocol):
    """Redis over maxmemory: in a pipeline of writes, each deny-oom write
    gets -OOM and each DEL/GET its own reply, exactly as direct (a block
    Redis aborts must be replayed one by one)."""
    cmds = []
    for i in range(60):
        cmds += [("SET", "k%d" % i, "v"), ("DEL", "k%d" % (i - 1)), ("INCR", "n"),
                 ("HSET", "d1%d" % i, "f", "v"), ("DEL", "pre%d" % i), ("GET", "pre%d" % (i + 1))]
    pre = [("SET", "pre%d" % i, "x") for i in range(61)]
    for ep in (upstream, ref):
        with ep.raw(auth=True) as c:
            for p in pre:
                c.cmd(*p)
        ep.client().config_set("maxmemory", "1")
    try:
        assert_same_pipeline(target, ref, cmds, protocol=protocol)
    finally:
        for ep in (upstream, ref):
            ep.client().config_set("maxmemory", "0")
    assert_same_data(upstream, ref)


@pytest.mark.parametrize("user", ["lim", "default"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("target", BATCH_ARGS, indirect=True)
def test_noperm_refusals_in_a_write_pipeline(target, upstream, ref, protocol, user):
    """A user restricted by ACL to ok:* (and the i/d keys): in a pipeline of
    writes, each write to another key gets -NOPERM and every allowed write
    is applied, exactly as direct. Either a user the client AUTHs as, or
    the default user itself restricted."""
    rng = random.Random(5)
    cmds = []
    for i in range(300):
        k = "ok:%d" % rng.randrange(40) if rng.random() < 0.8 else "no:%d" % rng.randrange(10)
        cmds.append(rng.choice([("SET", k, str(i)), ("INCR", k), ("DEL", k), ("RPUSH", k, "x")]))
    for ep in (upstream, ref):
        if user == "lim":
            ep.client().execute_command("ACL", "SETUSER", "lim", "on", ">pw", "~ok:*", "~i*",
                                        "~d*", "+@all")
        else:
            ep.client().execute_command("ACL", "SETUSER", "default", "resetkeys", "~ok:*", "~i*",
                                        "~d*")
    pre = [("AUTH", "lim", "pw")] if user == "lim" else []
    try:
        want = pipeline_raw(ref, cmds, protocol, pre=pre)
        got = pipeline_raw(target, cmds, protocol, pre=pre)
    finally:
        if user == "default":
            for ep in (upstream, ref):
                ep.client().execute_command("ACL", "SETUSER", "default", "allkeys")
    msg = diff_transcripts(cmds, want, got)
    if msg:
        raise AssertionError(msg)
    assert any(r.startswith(b"-NOPERM") for r in got)
    assert_same_data(upstream, ref)


@pytest.mark.parametrize("target", BATCH_ARGS, indirect=True)
def test_a_client_blocked_on_a_key_is_served_between_pipelined_writes(target, upstream, ref):
    """B waits in BLPOP L 0; A pipelines LPUSH L a, LPUSH L b. Redis hands B
    "a" right after the first LPUSH, before the second runs: A gets :1 :1,
    B gets a, L keeps [b]. So through the proxy: writes of lists (sorted
    sets, streams) are not put in a MULTI/EXEC block, where B would be served
    only after the block (:1 :2, B gets b)."""
    results = []
    for ep, server in ((ref, ref), (target, upstream)):
        with ep.raw(auth=True) as b:
            b.send_cmd("BLPOP", "L", "0")
            wait_until(lambda: server.client().info("clients")["blocked_clients"] >= 1, timeout=5,
                       interval=0.01, what="B to block")
            a = pipeline_raw(ep, [("LPUSH", "L", "a"), ("LPUSH", "L", "b")], None)
            results.append((a, b.read_frame().raw, server.client().lrange("L", 0, -1)))
    want, got = results
    assert want == ([b":1\r\n", b":1\r\n"], b"*2\r\n$1\r\nL\r\n$1\r\na\r\n", [b"b"]), want
    assert got == want


@pytest.mark.proxy_only
def test_a_write_batch_during_a_busy_script_gets_redis_replies(redis_factory, proxy_factory):
    """While a script runs past busy-reply-threshold Redis runs a batch's
    MULTI and EXEC but answers its commands BUSY: EXEC is EXECABORT, nothing
    ran, and each command sent again alone gets BUSY, as it would sent
    directly. That is Redis's state, not the user's ACL: once the script is
    over, pipelined writes are batched again."""
    up = redis_factory(args=busy_threshold_args(100))
    p = proxy_factory(up=up)
    wait_tracking_active(p)
    pipeline = encode("INCR", "cnt") * 3
    with p.raw() as c:
        c.send(pipeline)
        assert [f.raw for f in c.read_frames(3)] == [b":1\r\n", b":2\r\n", b":3\r\n"]
        with up.raw() as s, up.raw() as d:
            s.send_cmd("EVAL", LONG_SCRIPT, 0, 1500000)
            wait_until(lambda: d.cmd("PING").raw.startswith(b"-BUSY "), timeout=3, interval=0.02,
                       what="Redis answering BUSY while the script runs")
            c.send(pipeline)
            got = [f.raw for f in c.read_frames(3)]
            d.send(pipeline)
            direct = [f.raw for f in d.read_frames(3)]
            assert s.read_frame(timeout=10).raw == b":1\r\n"
        assert all(g.startswith(b"-BUSY ") for g in got + direct), (got, direct)
        assert up.client().get("cnt") == b"3", "an INCR answered BUSY ran"
        blocks = batch_stats(p)[0]
        c.send(pipeline)
        assert [f.raw for f in c.read_frames(3)] == [b":4\r\n", b":5\r\n", b":6\r\n"]
        assert batch_stats(p)[0] == blocks + 1, "no batch after the script"
