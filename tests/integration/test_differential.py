"""
tests/integration/test_differential.py — a few seeds of the randomized
differential test (tests/stress/differential.py): the same stream of
several thousand commands (every data type, scripts and the lookup script,
transactions with errors, batched write runs, bursts of cache hits, RESP2
and RESP3, one or two connections) goes to sidecache in front of one
redis-server and directly to another, and every reply must be the same
bytes (but for what differs between any two servers: HELLO's id, TTLs
within a tolerance, the order of unordered collections).

Run more seeds by hand: python3 tests/stress/differential.py --bin
build/sidecache --seed 1 --seeds 20 --count 3000 --conns 2 --config rules
"""
import differential
import pytest

import conftest
from helpers import REDIS_SERVER

pytestmark = [pytest.mark.proxy_only, pytest.mark.timeout(240),
              pytest.mark.redis(7, 0, "FUNCTION, EXPIRE NX and GETEX in the stream")]

# configurations: the JuiceFS profile; every GET and HGET cacheable (fills
# that ask the TTL); a key-prefix (Redis Cluster volumes); write batches off
CASES = [("juicefs", 1), ("juicefs", 2), ("rules", 2), ("prefix", 1), ("nobatch", 2)]


@pytest.mark.parametrize("config,conns", CASES, ids=["%s-%dconn" % c for c in CASES])
def test_random_command_stream_gets_the_same_replies_as_redis(config, conns, monkeypatch):
    monkeypatch.setattr(differential, "REDIS_SERVER", REDIS_SERVER)
    found = differential.check(conftest.SIDECACHE_BIN, config, seed0=1, seeds=3, count=3000, conns=conns)
    assert not found, "replies that differ from Redis's:\n" + "\n".join(found)
