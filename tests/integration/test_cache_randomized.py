"""
The randomized linearizability checker (cachehelpers.run_linearizability_check)
against the proxy, and a check of the checker's own power against a
deliberately stale cache.
"""
import pytest

from cachehelpers import MODES, FakeStaleProxy, run_linearizability_check, start_cached

pytestmark = pytest.mark.proxy_only

DELAY_BOUND = 1.0


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", MODES)
def test_randomized_linearizable_reads(mode, proxy_factory, upstream):
    """~10 s of concurrent writers (two directly on Redis, two through the
    proxy) and four readers through the proxy over four inode keys and four
    dentry fields. Every read must return a version current at some moment in
    [read_start - 1 s, read_end], and a proxy writer must read back at least
    its own write (see run_linearizability_check). The cache must have been
    used (hits), or the run proves nothing. 10 s in bcast mode (the
    default), 5 s in each per-connection mode."""
    p, st = start_cached(proxy_factory, mode=mode)
    before = st.get()
    res = run_linearizability_check(p, upstream, duration=10.0 if mode == "bcast" else 5.0,
                                    delay_bound=DELAY_BOUND, seed=1)
    after = st.get()
    hits = after["cache_hits"] - before["cache_hits"]
    inval = after["invalidation_keys"] - before["invalidation_keys"]
    print("randomized check: %s; per object writes %r; proxy hits %d, invalidated keys %d, "
          "fills rejected %d"
          % (res.summary(), res.per_object_writes, hits, inval,
             after["cache_fills_rejected"] - before["cache_fills_rejected"]))
    assert not res.errors, res.summary()
    assert not res.violations, res.summary()
    assert res.reads > 1000 and res.writes > 100, res.summary()
    assert hits > 500, "the cache was hardly used (%d hits): the run proves little" % hits
    assert inval > 0


@pytest.mark.timeout(60)
def test_checker_detects_a_stale_cache(upstream):
    """The same checker, pointed at FakeStaleProxy (a caching relay that
    ignores other nodes' writes), must report violations: it has the power to
    catch a cache whose invalidation handling is broken."""
    fake = FakeStaleProxy(upstream)
    try:
        res = run_linearizability_check(fake, upstream, duration=3.5, delay_bound=DELAY_BOUND,
                                        seed=2)
    finally:
        fake.close()
    print("checker vs stale fake: %s (fake hits %d)" % (res.summary(3), fake.hits))
    assert not res.errors, res.summary()
    assert fake.hits > 100
    assert res.violations, "the checker found nothing wrong with a cache that never invalidates"
    assert any("acknowledged" in v for v in res.violations)
