/*
 * bench/rng.h — the benchmark drivers' random numbers (splitmix64), one
 * generator per program; header-only, for loadgen.c and batchunlink.c.
 */
#ifndef SIDECACHE_BENCH_RNG_H
#define SIDECACHE_BENCH_RNG_H

#include <stdint.h>

static uint64_t rng_state = 0x853c49e6748fea9bULL;

/* The generator's state for a --seed. splitmix64 adds a constant to its state
 * per draw, so seeds that differ by multiples of it would give the same
 * sequence shifted by a few draws (overlapping runs): the seed goes through
 * its bijective finalizer first, which scatters neighbouring seeds. */
static inline uint64_t seed_state(uint64_t seed) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

#endif
