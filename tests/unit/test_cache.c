/*
 * tests/unit/test_cache.c — cache/cache.c: hits and misses, identities
 * (partition, db, kind, key, field), key groups, fill tokens (C3), LRU
 * eviction, byte accounting and the memory bound (C9), max_value, ttl,
 * out-of-memory.
 *
 * Two builds of the cache run here:
 * - the real one (cache/cache.c, linked as it ships), through the public API;
 * - a checked copy: cache/cache.c included into this file with its public
 *   names prefixed ck_, CACHE_TESTING on (its internal cache_check(), which
 *   verifies every invariant in its header comment, becomes callable) and
 *   every allocation going through t_malloc(), which fails on demand.
 * The randomized driver runs on both; the copy is also driven with hashes
 * narrowed to 3 bits and to none (every lookup then depends on the identity
 * comparison), and through failing allocations (each one in turn, at
 * random, and exactly where a table must grow).
 *
 * The randomized driver keeps a model of what a hit may return: the value
 * of the last fill that was stored since the key was last invalidated or
 * flushed. Eviction makes the model unable to predict misses, but a hit must
 * always match it (never a stale or foreign value), and a fill begun before
 * an invalidation of its key must always be refused.
 *
 * Prints (stderr, for reports; only its sign is asserted) the bytes held per
 * entry above key + value for 100,000 GET entries with 8-byte keys and
 * 72-byte values.
 */
#include "cache/cache.h"
#include "tests/unit/unit.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* The checked copy                                                         */

static long t_fail_countdown = -1; /* allocations that succeed before one fails; -1: none fails */
static unsigned t_fail_one_in;     /* > 0: each allocation also fails with chance 1/t_fail_one_in */
static uint64_t t_fail_rng = 1;
static unsigned long t_failures;   /* allocations refused so far */

static void *t_malloc(size_t n) {
    if (t_fail_countdown == 0) {
        t_failures++;
        return NULL;
    }
    if (t_fail_countdown > 0) t_fail_countdown--;
    if (t_fail_one_in > 0) {
        t_fail_rng ^= t_fail_rng << 13;
        t_fail_rng ^= t_fail_rng >> 7;
        t_fail_rng ^= t_fail_rng << 17;
        if (t_fail_rng % t_fail_one_in == 0) {
            t_failures++;
            return NULL;
        }
    }
    return malloc(n);
}

static void t_fail_reset(void) {
    t_fail_countdown = -1;
    t_fail_one_in = 0;
}

#define CACHE_TESTING 1
#define CACHE_MALLOC(n) t_malloc(n)
#define CACHE_FREE(p) free(p)
#define cache_new ck_cache_new
#define cache_free ck_cache_free
#define cache_set_config ck_cache_set_config
#define cache_get_stats ck_cache_get_stats
#define cache_get ck_cache_get
#define cache_peek ck_cache_peek
#define cache_count_reads ck_cache_count_reads
#define cache_peek_filled_before ck_cache_peek_filled_before
#define cache_fill_begin ck_cache_fill_begin
#define cache_fill_complete ck_cache_fill_complete
#define cache_fill_complete_until ck_cache_fill_complete_until
#define cache_fill_abort ck_cache_fill_abort
#define cache_invalidate_key ck_cache_invalidate_key
#define cache_invalidate_keys ck_cache_invalidate_keys
#define cache_flush ck_cache_flush
#define cache_reclaim ck_cache_reclaim
#include "cache/cache.c"
#undef cache_new
#undef cache_free
#undef cache_set_config
#undef cache_get_stats
#undef cache_get
#undef cache_peek
#undef cache_count_reads
#undef cache_peek_filled_before
#undef cache_fill_begin
#undef cache_fill_complete
#undef cache_fill_complete_until
#undef cache_fill_abort
#undef cache_invalidate_key
#undef cache_invalidate_keys
#undef cache_flush
#undef cache_reclaim

/* Both builds behind one table, so a driver can run on either. */
typedef struct cache_api {
    const char *name;
    cache *(*new_)(const cache_config *);
    void (*free_)(cache *);
    void (*set_config)(cache *, const cache_config *);
    const cache_stats *(*stats)(const cache *);
    int (*get)(cache *, uint32_t, int, int, const char *, size_t, const char *, size_t, int64_t,
               const char **, size_t *, int *);
    uint64_t (*begin)(cache *, uint32_t, int, int, const char *, size_t, const char *, size_t, int64_t);
    int (*complete)(cache *, uint64_t, uint32_t, int, int, const char *, size_t, const char *, size_t,
                    const char *, size_t, int, int64_t);
    void (*abort_)(cache *, uint64_t, uint32_t, int, int, const char *, size_t, const char *, size_t);
    size_t (*invalidate)(cache *, const char *, size_t);
    size_t (*invalidate_many)(cache *, const cache_keyref *, size_t);
    void (*flush)(cache *);
    size_t (*reclaim)(cache *, size_t);
    int (*check)(const cache *); /* NULL for the real build */
} cache_api;

static const cache_api real_api = {
    "real", cache_new, cache_free, cache_set_config, cache_get_stats, cache_get, cache_fill_begin,
    cache_fill_complete, cache_fill_abort, cache_invalidate_key, cache_invalidate_keys, cache_flush, cache_reclaim,
    NULL,
};
static const cache_api ck_api = {
    "checked", ck_cache_new, ck_cache_free, ck_cache_set_config, ck_cache_get_stats, ck_cache_get,
    ck_cache_fill_begin, ck_cache_fill_complete, ck_cache_fill_abort, ck_cache_invalidate_key,
    ck_cache_invalidate_keys, ck_cache_flush, ck_cache_reclaim, cache_check,
};

/* ------------------------------------------------------------------------ */
/* Helpers (real build)                                                     */

#define G CACHE_KIND_GET
#define H CACHE_KIND_HGET
#define MB ((size_t)1 << 20)

static cache *mk(size_t max_bytes, size_t max_value, int64_t ttl_ms) {
    cache_config cfg = {max_bytes, max_value, ttl_ms};
    cache *c = cache_new(&cfg);
    if (c == NULL) {
        fprintf(stderr, "cache_new: out of memory\n");
        exit(2);
    }
    return c;
}

static void set_cfg(cache *c, size_t max_bytes, size_t max_value, int64_t ttl_ms) {
    cache_config cfg = {max_bytes, max_value, ttl_ms};
    cache_set_config(c, &cfg);
}

static const cache_stats *st(const cache *c) {
    return cache_get_stats(c);
}

static uint64_t begin(cache *c, uint32_t part, int db, int kind, const char *key, const char *field,
                      int64_t now) {
    return cache_fill_begin(c, part, db, kind, key, strlen(key), field, strlen(field), now);
}

/* Offers a reply: val NULL means nil. */
static int complete(cache *c, uint64_t t, uint32_t part, int db, int kind, const char *key,
                    const char *field, const char *val, int64_t now) {
    return cache_fill_complete(c, t, part, db, kind, key, strlen(key), field, strlen(field), val,
                               val ? strlen(val) : 0, val == NULL, now);
}

/* begin + complete; returns 1 if stored. */
static int put(cache *c, uint32_t part, int db, int kind, const char *key, const char *field,
               const char *val, int64_t now) {
    uint64_t t = begin(c, part, db, kind, key, field, now);
    return t != 0 && complete(c, t, part, db, kind, key, field, val, now);
}

/* Returns 0 on a miss, 1 on a hit with a value (copied, NUL-terminated, into
 * out when given), 2 on a nil hit. */
static char got[256];
static int get_at(cache *c, uint32_t part, int db, int kind, const char *key, const char *field,
                  int64_t now) {
    const char *v = (const char *)1;
    size_t vl = 12345;
    int nil = -1;
    got[0] = 0;
    if (!cache_get(c, part, db, kind, key, strlen(key), field, strlen(field), now, &v, &vl, &nil))
        return 0;
    if (nil == 1) return v == NULL && vl == 0 ? 2 : -1;
    if (nil != 0 || v == NULL) return -1;
    size_t n = vl < sizeof got - 1 ? vl : sizeof got - 1;
    memcpy(got, v, n);
    got[n] = 0;
    return 1;
}

static int get(cache *c, uint32_t part, int db, int kind, const char *key, const char *field) {
    return get_at(c, part, db, kind, key, field, 0);
}

/* ------------------------------------------------------------------------ */
/* Hits, misses, identities                                                 */

static void test_get_hit_miss(void) {
    cache *c = mk(MB, 64 * 1024, 0);
    CHECK_EQ_INT(get(c, 1, 0, G, "i1", ""), 0);
    CHECK_EQ_INT(st(c)->misses, 1);
    uint64_t t = begin(c, 1, 0, G, "i1", "", 0);
    CHECK(t > 0);
    CHECK_EQ_INT(st(c)->pending, 1);
    CHECK_EQ_INT(st(c)->entries, 0);
    CHECK_EQ_INT(get(c, 1, 0, G, "i1", ""), 0); /* a placeholder is a miss */
    CHECK_EQ_INT(st(c)->misses, 2);
    CHECK_EQ_INT(complete(c, t, 1, 0, G, "i1", "", "attr-1", 0), 1);
    CHECK_EQ_INT(st(c)->pending, 0);
    CHECK_EQ_INT(st(c)->entries, 1);
    CHECK_EQ_INT(st(c)->fills, 1);
    CHECK_EQ_INT(get(c, 1, 0, G, "i1", ""), 1);
    CHECK_MEM(got, strlen(got), "attr-1");
    CHECK_EQ_INT(get(c, 1, 0, G, "i2", ""), 0);
    CHECK_EQ_INT(st(c)->hits, 1);
    CHECK_EQ_INT(st(c)->misses, 3);
    cache_free(c);
}

static void test_hget_hit_miss(void) {
    cache *c = mk(MB, 64 * 1024, 0);
    CHECK_EQ_INT(put(c, 1, 0, H, "d1", "name", "\x01\x02ino42", 0), 1);
    CHECK_EQ_INT(get(c, 1, 0, H, "d1", "name"), 1);
    CHECK_MEM(got, strlen(got), "\x01\x02ino42");
    CHECK_EQ_INT(get(c, 1, 0, H, "d1", "other"), 0);
    CHECK_EQ_INT(get(c, 1, 0, H, "d1", "nam"), 0);
    CHECK_EQ_INT(get(c, 1, 0, G, "d1", ""), 0);
    CHECK_EQ_INT(st(c)->hits, 1);
    cache_free(c);
}

/* cache_peek sees what cache_get would (values, nils; placeholders,
 * other partitions and purged keys miss) and counts nothing. */
static void test_peek(void) {
    cache *c = mk(MB, 64 * 1024, 0);
    const char *v;
    size_t vl;
    int nil;
    CHECK_EQ_INT(put(c, 1, 0, G, "i1", "", "attr-1", 0), 1);
    CHECK_EQ_INT(put(c, 1, 0, G, "i2", "", NULL, 0), 1);
    uint64_t t = begin(c, 1, 0, G, "i3", "", 0);
    CHECK(t > 0);
    CHECK_EQ_INT(cache_peek(c, 1, 0, G, "i1", 2, "", 0, 0, &v, &vl, &nil), 1);
    CHECK_EQ_INT(nil, 0);
    CHECK_MEM(v, vl, "attr-1");
    CHECK_EQ_INT(cache_peek(c, 1, 0, G, "i2", 2, "", 0, 0, &v, &vl, &nil), 1);
    CHECK_EQ_INT(nil, 1);
    CHECK_EQ_INT(cache_peek(c, 1, 0, G, "i3", 2, "", 0, 0, &v, &vl, &nil), 0); /* a placeholder */
    CHECK_EQ_INT(cache_peek(c, 2, 0, G, "i1", 2, "", 0, 0, &v, &vl, &nil), 0); /* another partition */
    CHECK_EQ_INT(st(c)->hits, 0);
    CHECK_EQ_INT(st(c)->misses, 0);
    cache_invalidate_key(c, "i1", 2);
    CHECK_EQ_INT(cache_peek(c, 1, 0, G, "i1", 2, "", 0, 0, &v, &vl, &nil), 0);
    cache_free(c);
}

/* With counting off, cache_get counts neither its hits nor its misses,
 * and does the rest as before: a hit still moves the entry up the LRU, an
 * expired entry is still dropped. Counting on again counts again. */
static void test_count_reads_off(void) {
    cache *c = mk(MB, 64 * 1024, 1000);
    CHECK_EQ_INT(put(c, 1, 0, G, "i1", "", "attr-1", 0), 1);
    CHECK_EQ_INT(put(c, 1, 0, G, "i2", "", "attr-2", 0), 1);
    CHECK_EQ_INT(put(c, 1, 0, G, "i3", "", "attr-3", 900), 1);
    cache_count_reads(c, 0);
    CHECK_EQ_INT(get(c, 1, 0, G, "i1", ""), 1);
    CHECK_EQ_INT(get(c, 1, 0, G, "i9", ""), 0);
    CHECK_EQ_INT(get_at(c, 1, 0, G, "i2", "", 1500), 0); /* past cache-ttl: dropped */
    CHECK_EQ_INT(st(c)->hits, 0);
    CHECK_EQ_INT(st(c)->misses, 0);
    CHECK_EQ_INT(st(c)->expired, 1);
    CHECK_EQ_INT(st(c)->entries, 2);
    /* i1's hit made it the most recent: a byte less evicts i3 */
    set_cfg(c, st(c)->used_bytes - 1, 64 * 1024, 0);
    CHECK_EQ_INT(st(c)->entries, 1);
    CHECK_EQ_INT(get(c, 1, 0, G, "i3", ""), 0);
    cache_count_reads(c, 1);
    CHECK_EQ_INT(get(c, 1, 0, G, "i1", ""), 1);
    CHECK_EQ_INT(get(c, 1, 0, G, "i3", ""), 0);
    CHECK_EQ_INT(st(c)->hits, 1);
    CHECK_EQ_INT(st(c)->misses, 1);
    cache_free(c);
}

/* cache_peek_filled_before misses an entry filled at or after the time
 * given: the same bytes filled again are another entry (an MGET merge must
 * not take them, caching.c). */
static void test_peek_filled_before(void) {
    cache *c = mk(MB, 64 * 1024, 0);
    const char *v;
    size_t vl;
    int nil;
    CHECK_EQ_INT(put(c, 1, 0, G, "i1", "", "attr-1", 100), 1);
    CHECK_EQ_INT(cache_peek_filled_before(c, 1, 0, G, "i1", 2, "", 0, 101, 150, &v, &vl, &nil), 1);
    CHECK_MEM(v, vl, "attr-1");
    CHECK_EQ_INT(cache_peek_filled_before(c, 1, 0, G, "i1", 2, "", 0, 100, 150, &v, &vl, &nil), 0);
    cache_invalidate_key(c, "i1", 2);
    CHECK_EQ_INT(put(c, 1, 0, G, "i1", "", "attr-1", 200), 1); /* the same bytes again */
    CHECK_EQ_INT(cache_peek_filled_before(c, 1, 0, G, "i1", 2, "", 0, 150, 250, &v, &vl, &nil), 0);
    CHECK_EQ_INT(cache_peek(c, 1, 0, G, "i1", 2, "", 0, 250, &v, &vl, &nil), 1);
    CHECK_EQ_INT(put(c, 1, 0, G, "i2", "", NULL, 300), 1); /* a nil too */
    CHECK_EQ_INT(cache_peek_filled_before(c, 1, 0, G, "i2", 2, "", 0, 300, 300, &v, &vl, &nil), 0);
    CHECK_EQ_INT(cache_peek_filled_before(c, 1, 0, G, "i2", 2, "", 0, 301, 300, &v, &vl, &nil), 1);
    CHECK_EQ_INT(nil, 1);
    cache_free(c);
}

/* Binary values (NULs inside) come back byte for byte. */
static void test_binary_value(void) {
    cache *c = mk(MB, 64 * 1024, 0);
    const char val[] = "a\0b\r\n\0";
    uint64_t t = begin(c, 1, 0, G, "i7", "", 0);
    CHECK_EQ_INT(cache_fill_complete(c, t, 1, 0, G, "i7", 2, "", 0, val, sizeof val - 1, 0, 0), 1);
    const char *v = NULL;
    size_t vl = 0;
    int nil = -1;
    CHECK_EQ_INT(cache_get(c, 1, 0, G, "i7", 2, "", 0, 0, &v, &vl, &nil), 1);
    CHECK_EQ_INT(nil, 0);
    CHECK_EQ_INT(vl, sizeof val - 1);
    CHECK(v != NULL && memcmp(v, val, sizeof val - 1) == 0);
    cache_free(c);
}

static void test_nil_entries(void) {
    cache *c = mk(MB, 64 * 1024, 0);
    CHECK_EQ_INT(put(c, 1, 0, G, "i9", "", NULL, 0), 1);
    CHECK_EQ_INT(put(c, 1, 0, H, "d1", "missing", NULL, 0), 1);
    CHECK_EQ_INT(put(c, 1, 0, G, "empty", "", "", 0), 1);
    CHECK_EQ_INT(get(c, 1, 0, G, "i9", ""), 2);
    CHECK_EQ_INT(get(c, 1, 0, H, "d1", "missing"), 2);
    CHECK_EQ_INT(get(c, 1, 0, G, "empty", ""), 1); /* an empty string is not nil */
    CHECK_EQ_INT(strlen(got), 0);
    CHECK_EQ_INT(st(c)->entries, 3);
    CHECK_EQ_INT(st(c)->hits, 3);
    cache_free(c);
}

static void test_partitions_and_dbs_are_separate(void) {
    cache *c = mk(MB, 64 * 1024, 0);
    CHECK_EQ_INT(put(c, 1, 0, G, "k", "", "p1db0", 0), 1);
    CHECK_EQ_INT(get(c, 2, 0, G, "k", ""), 0);
    CHECK_EQ_INT(get(c, 1, 1, G, "k", ""), 0);
    CHECK_EQ_INT(put(c, 2, 0, G, "k", "", "p2db0", 0), 1);
    CHECK_EQ_INT(put(c, 1, 1, G, "k", "", "p1db1", 0), 1);
    CHECK_EQ_INT(put(c, 0xffffffffu, -1, G, "k", "", "odd", 0), 1);
    CHECK_EQ_INT(get(c, 1, 0, G, "k", ""), 1);
    CHECK_MEM(got, strlen(got), "p1db0");
    CHECK_EQ_INT(get(c, 2, 0, G, "k", ""), 1);
    CHECK_MEM(got, strlen(got), "p2db0");
    CHECK_EQ_INT(get(c, 1, 1, G, "k", ""), 1);
    CHECK_MEM(got, strlen(got), "p1db1");
    CHECK_EQ_INT(get(c, 0xffffffffu, -1, G, "k", ""), 1);
    CHECK_MEM(got, strlen(got), "odd");
    CHECK_EQ_INT(get(c, 2, 1, G, "k", ""), 0);
    CHECK_EQ_INT(st(c)->entries, 4);
    cache_free(c);
}

/* GET k and HGET k "" never share an entry; key and field boundaries are
 * part of the identity (JuiceFS's own cache confuses d1/"47x" and d147/"x"). */
static void test_kinds_and_boundaries_are_separate(void) {
    cache *c = mk(MB, 64 * 1024, 0);
    CHECK_EQ_INT(put(c, 1, 0, G, "k", "", "get", 0), 1);
    CHECK_EQ_INT(get(c, 1, 0, H, "k", ""), 0);
    CHECK_EQ_INT(put(c, 1, 0, H, "k", "", "hget", 0), 1);
    CHECK_EQ_INT(get(c, 1, 0, G, "k", ""), 1);
    CHECK_MEM(got, strlen(got), "get");
    CHECK_EQ_INT(get(c, 1, 0, H, "k", ""), 1);
    CHECK_MEM(got, strlen(got), "hget");

    CHECK_EQ_INT(put(c, 1, 0, H, "d1", "47x", "one", 0), 1);
    CHECK_EQ_INT(get(c, 1, 0, H, "d147", "x"), 0);
    CHECK_EQ_INT(get(c, 1, 0, H, "d14", "7x"), 0);
    CHECK_EQ_INT(put(c, 1, 0, H, "d147", "x", "two", 0), 1);
    CHECK_EQ_INT(get(c, 1, 0, H, "d1", "47x"), 1);
    CHECK_MEM(got, strlen(got), "one");
    CHECK_EQ_INT(get(c, 1, 0, H, "d147", "x"), 1);
    CHECK_MEM(got, strlen(got), "two");
    /* and they are in different groups */
    CHECK_EQ_INT(cache_invalidate_key(c, "d147", 4), 1);
    CHECK_EQ_INT(get(c, 1, 0, H, "d1", "47x"), 1);

    /* kinds outside 1..255 are nothing */
    CHECK_EQ_INT(cache_fill_begin(c, 1, 0, 0, "k", 1, "", 0, 0), 0);
    CHECK_EQ_INT(cache_fill_begin(c, 1, 0, 256 + G, "k", 1, "", 0, 0), 0);
    cache_free(c);
}

/* An empty key, and NULL pointers with length 0. */
static void test_empty_key(void) {
    cache *c = mk(MB, 64 * 1024, 0);
    uint64_t t = cache_fill_begin(c, 1, 0, G, NULL, 0, NULL, 0, 0);
    CHECK(t > 0);
    CHECK_EQ_INT(cache_fill_complete(c, t, 1, 0, G, "", 0, "", 0, "v", 1, 0, 0), 1);
    CHECK_EQ_INT(get(c, 1, 0, G, "", ""), 1);
    CHECK_EQ_INT(cache_invalidate_key(c, NULL, 0), 1);
    CHECK_EQ_INT(get(c, 1, 0, G, "", ""), 0);
    CHECK_EQ_INT(st(c)->used_bytes, 0);
    cache_free(c);
}

/* Keys and fields up to 64 KiB are cached, longer ones never. */
static void test_long_keys(void) {
    cache *c = mk(16 * MB, 64 * 1024, 0);
    size_t n = 64 * 1024 + 1;
    char *k = malloc(n);
    REQUIRE(k != NULL);
    memset(k, 'd', n);
    uint64_t t = cache_fill_begin(c, 1, 0, H, k, n - 1, k, n - 1, 0);
    CHECK(t > 0);
    CHECK_EQ_INT(cache_fill_complete(c, t, 1, 0, H, k, n - 1, k, n - 1, "v", 1, 0, 0), 1);
    const char *v;
    size_t vl;
    int nil;
    CHECK_EQ_INT(cache_get(c, 1, 0, H, k, n - 1, k, n - 1, 0, &v, &vl, &nil), 1);
    CHECK_EQ_INT(cache_get(c, 1, 0, H, k, n - 1, k, n - 2, 0, &v, &vl, &nil), 0);
    CHECK_EQ_INT(cache_fill_begin(c, 1, 0, G, k, n, "", 0, 0), 0);
    CHECK_EQ_INT(cache_fill_begin(c, 1, 0, H, "d", 1, k, n, 0), 0);
    CHECK_EQ_INT(cache_get(c, 1, 0, G, k, n, "", 0, 0, &v, &vl, &nil), 0);
    CHECK_EQ_INT(cache_invalidate_key(c, k, n), 0);
    CHECK_EQ_INT(st(c)->pending, 0);
    CHECK_EQ_INT(cache_invalidate_key(c, k, n - 1), 1);
    CHECK_EQ_INT(st(c)->used_bytes, 0);
    free(k);
    cache_free(c);
}

/* ------------------------------------------------------------------------ */
/* Groups and invalidation                                                  */

static void test_group_purge(void) {
    cache *c = mk(16 * MB, 64 * 1024, 0);
    char f[32];
    size_t n = 0;
    for (uint32_t part = 1; part <= 2; part++)
        for (int db = 0; db <= 1; db++)
            for (int i = 0; i < 50; i++) {
                snprintf(f, sizeof f, "file%d", i);
                n += put(c, part, db, H, "d1", f, i % 7 ? "ino" : NULL, 0);
            }
    CHECK_EQ_INT(n, 200);
    CHECK_EQ_INT(put(c, 1, 0, G, "d1", "", "a GET of the hash key", 0), 1);
    uint64_t pend = begin(c, 1, 0, H, "d1", "pending", 0);
    CHECK(pend > 0);
    CHECK_EQ_INT(put(c, 1, 0, H, "d10", "file1", "other", 0), 1);
    CHECK_EQ_INT(put(c, 1, 0, G, "d", "", "prefix", 0), 1);
    CHECK_EQ_INT(put(c, 2, 1, G, "i1", "", "inode", 0), 1);
    CHECK_EQ_INT(st(c)->entries, 204);
    CHECK_EQ_INT(st(c)->pending, 1);

    CHECK_EQ_INT(cache_invalidate_key(c, "d1", 2), 202);
    CHECK_EQ_INT(st(c)->invalidations, 1);
    CHECK_EQ_INT(st(c)->keys_purged, 202);
    CHECK_EQ_INT(st(c)->entries, 3);
    CHECK_EQ_INT(st(c)->pending, 0);
    for (uint32_t part = 1; part <= 2; part++)
        for (int db = 0; db <= 1; db++)
            for (int i = 0; i < 50; i++) {
                snprintf(f, sizeof f, "file%d", i);
                CHECK_EQ_INT(get(c, part, db, H, "d1", f), 0);
            }
    CHECK_EQ_INT(get(c, 1, 0, G, "d1", ""), 0);
    CHECK_EQ_INT(complete(c, pend, 1, 0, H, "d1", "pending", "late", 0), 0);
    CHECK_EQ_INT(get(c, 1, 0, H, "d10", "file1"), 1);
    CHECK_EQ_INT(get(c, 1, 0, G, "d", ""), 1);
    CHECK_EQ_INT(get(c, 2, 1, G, "i1", ""), 1);

    CHECK_EQ_INT(cache_invalidate_key(c, "d1", 2), 0);
    CHECK_EQ_INT(cache_invalidate_key(c, "nothing", 7), 0);
    CHECK_EQ_INT(st(c)->invalidations, 3);
    CHECK_EQ_INT(st(c)->keys_purged, 202);
    cache_free(c);
}

/* One big group (a directory of 20,000 names) goes at once; the rest stays. */
static void test_group_purge_large(void) {
    cache *c = mk(64 * MB, 64 * 1024, 0);
    char f[32], k[32];
    for (int i = 0; i < 20000; i++) {
        snprintf(f, sizeof f, "name-%d", i);
        put(c, 1, 0, H, "d77", f, "entry", 0);
    }
    for (int i = 0; i < 100; i++) {
        snprintf(k, sizeof k, "d%d", 1000 + i);
        put(c, 1, 0, H, k, "x", "entry", 0);
    }
    CHECK_EQ_INT(st(c)->entries, 20100);
    CHECK_EQ_INT(cache_invalidate_key(c, "d77", 3), 20000);
    CHECK_EQ_INT(st(c)->entries, 100);
    CHECK_EQ_INT(get(c, 1, 0, H, "d1050", "x"), 1);
    CHECK_EQ_INT(get(c, 1, 0, H, "d77", "name-5"), 0);
    cache_free(c);
}

/* A fill of (key, field) with val in the checked build, partition 1, db 0:
 * 1 if stored. */
static int ck_put(cache *c, int kind, const char *key, const char *field, const char *val) {
    uint64_t t = ck_cache_fill_begin(c, 1, 0, kind, key, strlen(key), field, strlen(field), 0);
    return t != 0 &&
           ck_cache_fill_complete(c, t, 1, 0, kind, key, strlen(key), field, strlen(field), val, strlen(val), 0, 0);
}

/* A group over the lazy limit: purged for every call at once, its memory
 * freed by cache_reclaim, by eviction (before any live entry), by the
 * lookups that meet its entries, or by a flush. */
static void test_group_purge_lazy(void) {
    cache_config cfg = {64 * MB, 64 * 1024, 0};
    cache *c = ck_cache_new(&cfg);
    REQUIRE(c != NULL);
    char f[32];
    const char *v;
    size_t vl;
    int nil;
#define CK_PUT(key, field, val) CHECK_EQ_INT(ck_put(c, H, key, field, val), 1)
#define CK_HIT(key, field) ck_cache_get(c, 1, 0, H, key, strlen(key), field, strlen(field), 0, &v, &vl, &nil)
    for (int i = 0; i < 1000; i++) {
        snprintf(f, sizeof f, "name-%d", i);
        CK_PUT("d5", f, "old");
    }
    CK_PUT("d6", "x", "other");
    uint64_t pend = ck_cache_fill_begin(c, 1, 0, H, "d5", 2, "late", 4, 0);
    CHECK(pend != 0);
    size_t alone = ck_cache_get_stats(c)->used_bytes;
    CHECK_EQ_INT(ck_cache_get_stats(c)->entries, 1001);
    CHECK_EQ_INT(ck_cache_get_stats(c)->pending, 1);

    CHECK_EQ_INT(ck_cache_invalidate_key(c, "d5", 2), 1001);
    const cache_stats *s = ck_cache_get_stats(c);
    CHECK_EQ_INT(s->entries, 1);
    CHECK_EQ_INT(s->pending, 0);
    CHECK_EQ_INT(s->reclaiming, 1001);
    CHECK_EQ_INT(s->keys_purged, 1001);
    CHECK_EQ_INT(s->used_bytes, alone); /* held until freed */
    CHECK_EQ_INT(cache_check(c), 0);
    /* gone for every call: a hit, the fill begun before, a new begin */
    CHECK_EQ_INT(CK_HIT("d5", "name-7"), 0);
    CHECK_EQ_INT(s->reclaiming, 1000); /* that lookup freed what it met */
    CHECK_EQ_INT(ck_cache_fill_complete(c, pend, 1, 0, H, "d5", 2, "late", 4, "stale", 5, 0, 0), 0);
    CK_PUT("d5", "name-8", "new");
    CHECK_EQ_INT(CK_HIT("d5", "name-8"), 1);
    CHECK(vl == 3 && memcmp(v, "new", 3) == 0);
    CHECK_EQ_INT(CK_HIT("d6", "x"), 1);
    CHECK_EQ_INT(cache_check(c), 0);
    /* a purge of the new group does not touch the dying one */
    CHECK_EQ_INT(ck_cache_invalidate_key(c, "d5", 2), 1);
    CHECK_EQ_INT(s->reclaiming, 999);
    CHECK_EQ_INT(cache_check(c), 0);
    /* freed in slices */
    CHECK_EQ_INT(ck_cache_reclaim(c, 500), 499);
    CHECK_EQ_INT(cache_check(c), 0);
    CHECK_EQ_INT(ck_cache_reclaim(c, 10000), 0);
    CHECK_EQ_INT(cache_check(c), 0);
    CHECK_EQ_INT(ck_cache_get_stats(c)->entries, 1);
    CHECK_EQ_INT(CK_HIT("d6", "x"), 1);

    /* eviction frees dying entries before it evicts a live one */
    for (int i = 0; i < 1000; i++) {
        snprintf(f, sizeof f, "name-%d", i);
        CK_PUT("d5", f, "old");
    }
    CHECK_EQ_INT(ck_cache_invalidate_key(c, "d5", 2), 1000);
    size_t held = ck_cache_get_stats(c)->used_bytes;
    cfg.max_bytes = held - 1000; /* a few dying entries must go */
    ck_cache_set_config(c, &cfg);
    CHECK_EQ_INT(cache_check(c), 0);
    CHECK(ck_cache_get_stats(c)->reclaiming < 1000 && ck_cache_get_stats(c)->reclaiming > 0);
    CHECK_EQ_INT(ck_cache_get_stats(c)->evictions, 0);
    CHECK_EQ_INT(CK_HIT("d6", "x"), 1);
    /* a flush leaves them with the rest to reclaim, which frees them all */
    size_t dying = ck_cache_get_stats(c)->reclaiming;
    ck_cache_flush(c);
    CHECK_EQ_INT(cache_check(c), 0);
    CHECK_EQ_INT(ck_cache_get_stats(c)->reclaiming, dying + 1);
    CHECK_EQ_INT(ck_cache_reclaim(c, SIZE_MAX), 0);
    CHECK_EQ_INT(ck_cache_get_stats(c)->used_bytes, 0);
    CHECK_EQ_INT(cache_check(c), 0);
#undef CK_PUT
#undef CK_HIT
    ck_cache_free(c);
}

/* Many keys at once: the same purges as one by one, whatever the chunk
 * boundaries, repeats and missing keys. */
static void test_invalidate_many(void) {
    cache *c = mk(64 * MB, 64 * 1024, 0);
    char k[70][16], f[32];
    cache_keyref refs[140];
    for (int i = 0; i < 5000; i++) {
        snprintf(f, sizeof f, "name-%d", i);
        put(c, 1, 0, H, "d9", f, "entry", 0);
    }
    for (int i = 0; i < 70; i++) {
        snprintf(k[i], sizeof k[i], "i%d", 100 + i);
        put(c, 1, 0, G, k[i], "", "attr", 0);
        put(c, 2, 3, G, k[i], "", "attr", 0);
    }
    size_t n = 0;
    for (int i = 0; i < 70; i += 2) refs[n++] = (cache_keyref){k[i], strlen(k[i])}; /* 35 present */
    refs[n++] = (cache_keyref){"d9", 2};
    refs[n++] = (cache_keyref){"d9", 2};                                             /* a repeat */
    for (int i = 0; i < 40; i++) refs[n++] = (cache_keyref){"nope", 4};              /* absent */
    refs[n++] = (cache_keyref){k[0], strlen(k[0])};                                  /* purged already */
    CHECK_EQ_INT(cache_invalidate_keys(c, refs, n), 35 * 2 + 5000);
    CHECK_EQ_INT(st(c)->entries, 35 * 2);
    CHECK_EQ_INT(st(c)->invalidations, n);
    for (int i = 0; i < 70; i++) CHECK_EQ_INT(get(c, 2, 3, G, k[i], ""), i % 2 == 1);
    CHECK_EQ_INT(get(c, 1, 0, H, "d9", "name-7"), 0);
    CHECK_EQ_INT(cache_invalidate_keys(c, refs, 0), 0);
    cache_free(c);
}

/* ------------------------------------------------------------------------ */
/* Fill tokens (C3)                                                         */

static void test_fill_after_invalidation_is_refused(void) {
    cache *c = mk(MB, 64 * 1024, 0);
    uint64_t t = begin(c, 1, 0, G, "i5", "", 0);
    CHECK(t > 0);
    CHECK_EQ_INT(cache_invalidate_key(c, "i5", 2), 1);
    CHECK_EQ_INT(complete(c, t, 1, 0, G, "i5", "", "stale", 0), 0);
    CHECK_EQ_INT(st(c)->fills_rejected, 1);
    CHECK_EQ_INT(st(c)->fills, 0);
    CHECK_EQ_INT(get(c, 1, 0, G, "i5", ""), 0);
    CHECK_EQ_INT(st(c)->used_bytes, 0);
    cache_free(c);
}

/* begin t1, invalidate, begin t2, the old reply (t1) arrives, then t2's. */
static void test_fill_aba(void) {
    cache *c = mk(MB, 64 * 1024, 0);
    uint64_t t1 = begin(c, 1, 0, G, "i5", "", 0);
    CHECK_EQ_INT(cache_invalidate_key(c, "i5", 2), 1);
    uint64_t t2 = begin(c, 1, 0, G, "i5", "", 0);
    CHECK(t1 > 0 && t2 > 0 && t1 != t2);
    CHECK_EQ_INT(complete(c, t1, 1, 0, G, "i5", "", "before the write", 0), 0);
    CHECK_EQ_INT(get(c, 1, 0, G, "i5", ""), 0);
    CHECK_EQ_INT(st(c)->pending, 1); /* t2's placeholder survives the refused fill */
    CHECK_EQ_INT(complete(c, t2, 1, 0, G, "i5", "", "after the write", 0), 1);
    CHECK_EQ_INT(get(c, 1, 0, G, "i5", ""), 1);
    CHECK_MEM(got, strlen(got), "after the write");
    CHECK_EQ_INT(complete(c, t1, 1, 0, G, "i5", "", "before the write", 0), 0);
    CHECK_EQ_INT(get(c, 1, 0, G, "i5", ""), 1);
    CHECK_MEM(got, strlen(got), "after the write");
    CHECK_EQ_INT(st(c)->fills_rejected, 2);
    cache_free(c);
}

/* The token of one identity is refused for another. */
static void test_fill_token_belongs_to_its_identity(void) {
    cache *c = mk(MB, 64 * 1024, 0);
    uint64_t ta = begin(c, 1, 0, G, "a", "", 0);
    uint64_t tb = begin(c, 1, 0, G, "b", "", 0);
    CHECK(ta != tb);
    CHECK_EQ_INT(complete(c, ta, 1, 0, G, "b", "", "x", 0), 0);
    CHECK_EQ_INT(complete(c, ta, 2, 0, G, "a", "", "x", 0), 0);
    CHECK_EQ_INT(complete(c, ta, 1, 0, H, "a", "", "x", 0), 0);
    CHECK_EQ_INT(st(c)->pending, 2);
    CHECK_EQ_INT(complete(c, tb, 1, 0, G, "b", "", "b", 0), 1);
    CHECK_EQ_INT(complete(c, ta, 1, 0, G, "a", "", "a", 0), 1);
    /* token 0 (no fill begun) is ignored, not counted */
    uint64_t rej = st(c)->fills_rejected;
    CHECK_EQ_INT(complete(c, 0, 1, 0, G, "c", "", "c", 0), 0);
    CHECK_EQ_INT(st(c)->fills_rejected, rej);
    cache_free(c);
}

static void test_shared_placeholder(void) {
    cache *c = mk(MB, 64 * 1024, 0);
    uint64_t t1 = begin(c, 1, 0, H, "d1", "x", 0);
    uint64_t t2 = begin(c, 1, 0, H, "d1", "x", 0);
    CHECK(t1 > 0);
    CHECK_EQ_INT(t2, t1);
    CHECK_EQ_INT(st(c)->pending, 1);
    CHECK_EQ_INT(st(c)->placeholders_made, 1); /* one placeholder, shared */
    uint64_t t3 = begin(c, 1, 0, H, "d1", "y", 0);
    CHECK(t3 != t1);
    CHECK_EQ_INT(st(c)->placeholders_made, 2);
    CHECK_EQ_INT(complete(c, t1, 1, 0, H, "d1", "x", "v", 0), 1);
    CHECK_EQ_INT(complete(c, t2, 1, 0, H, "d1", "x", "v", 0), 0); /* the second reply finds it valid */
    CHECK_EQ_INT(get(c, 1, 0, H, "d1", "x"), 1);
    /* a valid entry needs no fill */
    CHECK_EQ_INT(begin(c, 1, 0, H, "d1", "x", 0), 0);
    CHECK_EQ_INT(get(c, 1, 0, H, "d1", "x"), 1);
    CHECK_EQ_INT(st(c)->placeholders_made, 2);
    /* purged, then begun again: a new placeholder */
    cache_invalidate_key(c, "d1", 2);
    CHECK(begin(c, 1, 0, H, "d1", "x", 0) > 0);
    CHECK_EQ_INT(st(c)->placeholders_made, 3);
    cache_free(c);
}

/* A flush of a large cache takes O(1): what it held is freed later, in
 * slices or by eviction (before any live entry), never seen again; a small
 * one is freed at once. */
static void test_flush_lazy(void) {
    cache_config cfg = {64 * MB, 64 * 1024, 0};
    cache *c = ck_cache_new(&cfg);
    REQUIRE(c != NULL);
    char k[32];
    const char *v;
    size_t vl;
    int nil;
    for (int i = 0; i < 600; i++) {
        snprintf(k, sizeof k, "i%d", i);
        CHECK_EQ_INT(ck_put(c, G, k, "", "attr"), 1);
        snprintf(k, sizeof k, "name-%d", i);
        CHECK_EQ_INT(ck_put(c, H, "d9", k, "e"), 1);
    }
    CHECK_EQ_INT(ck_cache_invalidate_key(c, "d9", 2), 600); /* a dying group */
    for (int i = 0; i < 400; i++) {
        snprintf(k, sizeof k, "name-%d", i);
        CHECK_EQ_INT(ck_put(c, H, "d8", k, "e"), 1);
    }
    uint64_t pend2 = ck_cache_fill_begin(c, 1, 0, G, "i-new", 5, "", 0, 0);
    CHECK(pend2 != 0);
    const cache_stats *s = ck_cache_get_stats(c);
    CHECK_EQ_INT(s->entries, 1000);
    CHECK_EQ_INT(s->pending, 1);
    CHECK_EQ_INT(s->reclaiming, 600);
    size_t held = s->used_bytes;

    ck_cache_flush(c);
    CHECK_EQ_INT(cache_check(c), 0);
    CHECK_EQ_INT(s->entries, 0);
    CHECK_EQ_INT(s->pending, 0);
    CHECK_EQ_INT(s->reclaiming, 1601);
    CHECK(s->used_bytes > 0 && s->used_bytes < held); /* held until freed, less the tables */
    /* gone for every call */
    CHECK_EQ_INT(ck_cache_get(c, 1, 0, G, "i5", 2, "", 0, 0, &v, &vl, &nil), 0);
    CHECK_EQ_INT(ck_cache_get(c, 1, 0, H, "d8", 2, "name-5", 6, 0, &v, &vl, &nil), 0);
    CHECK_EQ_INT(ck_cache_fill_complete(c, pend2, 1, 0, G, "i-new", 5, "", 0, "stale", 5, 0, 0), 0);
    /* the new tables fill while the old entries wait */
    CHECK_EQ_INT(ck_put(c, G, "i5", "", "fresh"), 1);
    CHECK_EQ_INT(ck_cache_get(c, 1, 0, G, "i5", 2, "", 0, 0, &v, &vl, &nil), 1);
    CHECK(vl == 5 && memcmp(v, "fresh", 5) == 0);
    CHECK_EQ_INT(s->reclaiming, 1601);
    CHECK_EQ_INT(cache_check(c), 0);
    /* an invalidation purges the new entry and leaves the old ones be */
    CHECK_EQ_INT(ck_cache_invalidate_key(c, "i5", 2), 1);
    CHECK_EQ_INT(s->reclaiming, 1601);
    CHECK_EQ_INT(cache_check(c), 0);
    /* freed in slices */
    CHECK_EQ_INT(ck_cache_reclaim(c, 700), 901);
    CHECK_EQ_INT(cache_check(c), 0);
    /* eviction frees them before a live entry */
    CHECK_EQ_INT(ck_put(c, G, "i6", "", "live"), 1);
    cfg.max_bytes = s->used_bytes - 1000;
    ck_cache_set_config(c, &cfg);
    CHECK_EQ_INT(cache_check(c), 0);
    CHECK(s->reclaiming > 0 && s->reclaiming < 901);
    CHECK_EQ_INT(s->evictions, 0);
    CHECK_EQ_INT(ck_cache_get(c, 1, 0, G, "i6", 2, "", 0, 0, &v, &vl, &nil), 1);
    /* a second flush adds to what the first left */
    size_t left = s->reclaiming;
    ck_cache_flush(c);
    CHECK_EQ_INT(s->reclaiming, left + 1);
    CHECK_EQ_INT(cache_check(c), 0);
    CHECK_EQ_INT(ck_cache_reclaim(c, SIZE_MAX), 0);
    CHECK_EQ_INT(s->used_bytes, 0);
    CHECK_EQ_INT(cache_check(c), 0);
    /* a small cache is freed at once */
    for (int i = 0; i < 200; i++) {
        snprintf(k, sizeof k, "i%d", i);
        CHECK_EQ_INT(ck_put(c, G, k, "", "attr"), 1);
    }
    ck_cache_flush(c);
    CHECK_EQ_INT(s->reclaiming, 0);
    CHECK_EQ_INT(s->used_bytes, 0);
    CHECK_EQ_INT(cache_check(c), 0);
    CHECK_EQ_INT(s->flushes, 3);
    /* freed with the cache: what a flush left (ASan's leak check) */
    CHECK(ck_cache_fill_begin(c, 1, 0, G, "i1", 2, "", 0, 0) != 0); /* a placeholder */
    for (int i = 0; i < 300; i++) {
        snprintf(k, sizeof k, "name-%d", i);
        CHECK_EQ_INT(ck_put(c, H, "d7", k, "e"), 1);
    }
    ck_cache_flush(c);
    CHECK(s->reclaiming == 301);
    ck_cache_free(c);
}

static void test_flush_makes_pending_fills_fail(void) {
    cache *c = mk(MB, 64 * 1024, 0);
    uint64_t t = begin(c, 1, 0, G, "i1", "", 0);
    CHECK_EQ_INT(put(c, 1, 0, H, "d1", "f", "v", 0), 1);
    cache_flush(c);
    CHECK_EQ_INT(st(c)->flushes, 1);
    CHECK_EQ_INT(st(c)->entries, 0);
    CHECK_EQ_INT(st(c)->pending, 0);
    CHECK_EQ_INT(st(c)->used_bytes, 0);
    CHECK_EQ_INT(complete(c, t, 1, 0, G, "i1", "", "v", 0), 0);
    CHECK_EQ_INT(get(c, 1, 0, H, "d1", "f"), 0);
    uint64_t t2 = begin(c, 1, 0, G, "i1", "", 0);
    CHECK(t2 > t);
    CHECK_EQ_INT(complete(c, t2, 1, 0, G, "i1", "", "v", 0), 1);
    cache_free(c);
}

static void test_fill_abort(void) {
    cache *c = mk(MB, 64 * 1024, 0);
    uint64_t t = begin(c, 1, 0, G, "i1", "", 0);
    cache_fill_abort(c, t + 1, 1, 0, G, "i1", 2, "", 0); /* not its token */
    cache_fill_abort(c, t, 1, 0, G, "i2", 2, "", 0);     /* not its identity */
    CHECK_EQ_INT(st(c)->pending, 1);
    cache_fill_abort(c, t, 1, 0, G, "i1", 2, "", 0);
    CHECK_EQ_INT(st(c)->pending, 0);
    CHECK_EQ_INT(st(c)->used_bytes, 0);
    CHECK_EQ_INT(complete(c, t, 1, 0, G, "i1", "", "v", 0), 0);
    uint64_t t2 = begin(c, 1, 0, G, "i1", "", 0);
    CHECK(t2 > t);
    CHECK_EQ_INT(complete(c, t2, 1, 0, G, "i1", "", "v", 0), 1);
    cache_fill_abort(c, t2, 1, 0, G, "i1", 2, "", 0); /* a valid entry stays */
    CHECK_EQ_INT(get(c, 1, 0, G, "i1", ""), 1);
    cache_fill_abort(c, 0, 1, 0, G, "i1", 2, "", 0);
    CHECK_EQ_INT(st(c)->entries, 1);
    cache_free(c);
}

/* ------------------------------------------------------------------------ */
/* Memory: LRU, the bound, accounting                                       */

/* Keys k0..k9 of one length and 72-byte values: every entry costs the same. */
static const char v72[] = "........................................................................";

static void test_lru_eviction_order(void) {
    cache *c = mk(MB, 64 * 1024, 0);
    CHECK_EQ_INT(put(c, 1, 0, G, "kA", "", v72, 0), 1);
    CHECK_EQ_INT(put(c, 1, 0, G, "kB", "", v72, 0), 1);
    size_t u2 = st(c)->used_bytes;
    CHECK_EQ_INT(put(c, 1, 0, G, "kC", "", v72, 0), 1);
    size_t u3 = st(c)->used_bytes;
    CHECK(u3 > u2);
    set_cfg(c, u3, 64 * 1024, 0); /* exactly three fit */
    CHECK_EQ_INT(st(c)->evictions, 0);
    CHECK_EQ_INT(get(c, 1, 0, G, "kA", ""), 1); /* order now B C A */
    CHECK_EQ_INT(put(c, 1, 0, G, "kD", "", v72, 0), 1);
    CHECK_EQ_INT(st(c)->evictions, 1);
    CHECK_EQ_INT(get(c, 1, 0, G, "kB", ""), 0);
    CHECK_EQ_INT(put(c, 1, 0, G, "kE", "", v72, 0), 1); /* C A D -> A D E */
    CHECK_EQ_INT(get(c, 1, 0, G, "kC", ""), 0);
    CHECK_EQ_INT(get(c, 1, 0, G, "kA", ""), 1);
    CHECK_EQ_INT(get(c, 1, 0, G, "kD", ""), 1);
    CHECK_EQ_INT(get(c, 1, 0, G, "kE", ""), 1);
    CHECK_EQ_INT(st(c)->evictions, 2);
    CHECK_EQ_INT(st(c)->entries, 3);
    CHECK(st(c)->used_bytes <= u3);
    cache_free(c);
}

/* Placeholders are in the LRU too: an old one is evicted, and its fill then fails. */
static void test_placeholder_is_evictable(void) {
    cache *c = mk(MB, 64 * 1024, 0);
    CHECK_EQ_INT(put(c, 1, 0, G, "kA", "", v72, 0), 1);
    CHECK_EQ_INT(put(c, 1, 0, G, "kB", "", v72, 0), 1);
    CHECK_EQ_INT(put(c, 1, 0, G, "kC", "", v72, 0), 1);
    set_cfg(c, st(c)->used_bytes, 64 * 1024, 0);
    cache_invalidate_key(c, "kA", 2);
    uint64_t t = begin(c, 1, 0, G, "kP", "", 0); /* order B C P */
    CHECK(t > 0);
    CHECK_EQ_INT(put(c, 1, 0, G, "kD", "", v72, 0), 1); /* B goes */
    CHECK_EQ_INT(get(c, 1, 0, G, "kB", ""), 0);
    CHECK_EQ_INT(put(c, 1, 0, G, "kE", "", v72, 0), 1); /* C goes */
    CHECK_EQ_INT(put(c, 1, 0, G, "kF", "", v72, 0), 1); /* P goes */
    CHECK_EQ_INT(st(c)->pending, 0);
    CHECK_EQ_INT(complete(c, t, 1, 0, G, "kP", "", v72, 0), 0);
    CHECK_EQ_INT(get(c, 1, 0, G, "kF", ""), 1);
    cache_free(c);
}

/* Inserts a mix: GET keys of several lengths, HGET fields (many per key),
 * nil values, and placeholders left pending. Returns key+field+value bytes. */
static size_t insert_mix(cache *c, int n, int64_t now) {
    char k[64], f[64], v[200];
    size_t payload = 0;
    for (int i = 0; i < n; i++) {
        int kl = snprintf(k, sizeof k, i % 3 ? "i%d" : "a-longer-key-name-%d", i);
        int fl = 0;
        int kind = i % 2 ? H : G;
        if (kind == H) {
            kl = snprintf(k, sizeof k, "d%d", i % 37);
            fl = snprintf(f, sizeof f, "file-%d", i);
        } else {
            f[0] = 0;
        }
        int vl = i % 150;
        memset(v, 'x', (size_t)vl);
        v[vl] = 0;
        uint64_t t = cache_fill_begin(c, (uint32_t)(i % 3), i % 2, kind, k, (size_t)kl, f, (size_t)fl, now);
        if (t == 0) continue;
        if (i % 11 == 0) continue; /* left pending */
        if (cache_fill_complete(c, t, (uint32_t)(i % 3), i % 2, kind, k, (size_t)kl, f, (size_t)fl, v,
                                (size_t)vl, i % 13 == 0, now))
            payload += (size_t)kl + (size_t)fl + (i % 13 == 0 ? 0 : (size_t)vl);
    }
    return payload;
}

static size_t invalidate_mix(cache *c, int n) {
    char k[64];
    size_t purged = 0;
    for (int i = 0; i < n; i++) {
        int kl = snprintf(k, sizeof k, i % 3 ? "i%d" : "a-longer-key-name-%d", i);
        if (i % 2) kl = snprintf(k, sizeof k, "d%d", i % 37);
        purged += cache_invalidate_key(c, k, (size_t)kl);
    }
    return purged;
}

/* Every byte counted comes back: after deleting everything, by any path,
 * used_bytes is the empty cache's again. */
static void test_accounting_is_exact(void) {
    cache *c = mk(256 * MB, 64 * 1024, 0);
    size_t base = st(c)->used_bytes;
    CHECK_EQ_INT(base, 0);

    /* invalidation */
    insert_mix(c, 5000, 0);
    size_t held = st(c)->entries + st(c)->pending;
    CHECK(st(c)->used_bytes > base);
    CHECK(st(c)->pending > 0);
    CHECK_EQ_INT(invalidate_mix(c, 5000), held);
    CHECK_EQ_INT(st(c)->entries, 0);
    CHECK_EQ_INT(st(c)->pending, 0);
    CHECK_EQ_INT(st(c)->used_bytes, base);

    /* flush: counted until reclaimed */
    insert_mix(c, 5000, 0);
    size_t filled = st(c)->used_bytes;
    cache_flush(c);
    CHECK(st(c)->used_bytes < filled && st(c)->used_bytes > base);
    CHECK_EQ_INT(cache_reclaim(c, SIZE_MAX), 0);
    CHECK_EQ_INT(st(c)->used_bytes, base);

    /* eviction */
    insert_mix(c, 5000, 0);
    set_cfg(c, 1, 64 * 1024, 0);
    CHECK_EQ_INT(st(c)->used_bytes, base);
    CHECK_EQ_INT(st(c)->entries + st(c)->pending, 0);
    set_cfg(c, 256 * MB, 64 * 1024, 0);

    /* key, field and value bytes are all counted */
    {
        size_t before = st(c)->used_bytes;
        char *big = malloc(5000);
        REQUIRE(big != NULL);
        memset(big, 'v', 5000);
        uint64_t tb = begin(c, 1, 0, H, "key-of-20-bytes-....", "field-of-20-bytes...", 0);
        CHECK_EQ_INT(cache_fill_complete(c, tb, 1, 0, H, "key-of-20-bytes-....", 20, "field-of-20-bytes...", 20,
                                         big, 5000, 0, 0), 1);
        CHECK(st(c)->used_bytes >= before + 5000 + 20 + 20 + 20 /* the group's copy of the key */);
        free(big);
        cache_flush(c);
    }

    /* expiry and abort */
    insert_mix(c, 2000, 0);
    set_cfg(c, 256 * MB, 64 * 1024, 10);
    char k[64], f[64];
    for (int i = 0; i < 2000; i++) {
        int kl = snprintf(k, sizeof k, i % 3 ? "i%d" : "a-longer-key-name-%d", i);
        int fl = 0;
        int kind = i % 2 ? H : G;
        if (kind == H) {
            kl = snprintf(k, sizeof k, "d%d", i % 37);
            fl = snprintf(f, sizeof f, "file-%d", i);
        } else {
            f[0] = 0;
        }
        const char *v;
        size_t vl;
        int nil;
        CHECK_EQ_INT(cache_get(c, (uint32_t)(i % 3), i % 2, kind, k, (size_t)kl, f, (size_t)fl, 1000, &v, &vl,
                               &nil), 0);
        /* placeholders: a begin shares their token, which then aborts them */
        uint64_t t = cache_fill_begin(c, (uint32_t)(i % 3), i % 2, kind, k, (size_t)kl, f, (size_t)fl, 1000);
        cache_fill_abort(c, t, (uint32_t)(i % 3), i % 2, kind, k, (size_t)kl, f, (size_t)fl);
    }
    CHECK(st(c)->expired > 0);
    CHECK_EQ_INT(st(c)->entries + st(c)->pending, 0);
    CHECK_EQ_INT(st(c)->used_bytes, base);
    cache_free(c);
}

static void test_max_value(void) {
    cache *c = mk(MB, 10, 0);
    CHECK_EQ_INT(put(c, 1, 0, G, "a", "", "0123456789", 0), 1);
    uint64_t t = begin(c, 1, 0, G, "b", "", 0);
    CHECK_EQ_INT(complete(c, t, 1, 0, G, "b", "", "0123456789A", 0), 0);
    CHECK_EQ_INT(st(c)->fills_too_big, 1);
    CHECK_EQ_INT(st(c)->fills_rejected, 0);
    CHECK_EQ_INT(st(c)->pending, 0); /* the placeholder went with it */
    CHECK_EQ_INT(get(c, 1, 0, G, "b", ""), 0);
    CHECK_EQ_INT(put(c, 1, 0, G, "b", "", NULL, 0), 1); /* nil has no bytes */
    set_cfg(c, MB, 0, 0);
    CHECK_EQ_INT(put(c, 1, 0, G, "e", "", "", 0), 1);
    CHECK_EQ_INT(put(c, 1, 0, G, "f", "", "x", 0), 0);
    CHECK_EQ_INT(st(c)->fills_too_big, 2);
    CHECK_EQ_INT(get(c, 1, 0, G, "a", ""), 1); /* cached before the change: stays */
    cache_free(c);
}

/* A value that cannot fit max_bytes even alone is refused without evicting
 * the rest; so is a placeholder. */
static void test_entry_larger_than_max_bytes(void) {
    cache *c = mk(4096, MB, 0);
    CHECK_EQ_INT(put(c, 1, 0, G, "small", "", "v", 0), 1);
    char *big = malloc(8000);
    REQUIRE(big != NULL);
    memset(big, 'b', 7999);
    big[7999] = 0;
    uint64_t t = begin(c, 1, 0, G, "big", "", 0);
    CHECK(t > 0);
    CHECK_EQ_INT(complete(c, t, 1, 0, G, "big", "", big, 0), 0);
    CHECK_EQ_INT(st(c)->fills_too_big, 1);
    CHECK_EQ_INT(st(c)->evictions, 0);
    CHECK_EQ_INT(st(c)->pending, 0);
    CHECK_EQ_INT(get(c, 1, 0, G, "small", ""), 1);
    CHECK_EQ_INT(cache_fill_begin(c, 1, 0, G, big, 7999, "", 0, 0), 0);
    CHECK_EQ_INT(st(c)->evictions, 0);
    CHECK_EQ_INT(get(c, 1, 0, G, "small", ""), 1);
    CHECK(st(c)->used_bytes <= 4096);
    free(big);
    cache_free(c);
}

/* Tables never shrink while they hold anything. A value that would fit
 * beside small tables, but not beside the grown ones, evicts everything
 * and then itself (the tables go with the last entry): refused as too big,
 * and the cache is left empty and within bounds. */
static void test_fill_too_big_for_grown_tables(void) {
    char k[16];
    cache *c = mk(64 * MB, 64 * MB, 0);
    for (int i = 0; i < 3000; i++) {
        snprintf(k, sizeof k, "i%d", i);
        CHECK_EQ_INT(put(c, 1, 0, G, k, "", "", 0), 1);
    }
    size_t u = st(c)->used_bytes;
    set_cfg(c, u, 64 * MB, 0);
    size_t vlen = u - 2000; /* fits beside 32-bucket tables; the grown ones hold far more than 2000 */
    char *v = malloc(vlen);
    REQUIRE(v != NULL);
    memset(v, 'v', vlen);
    uint64_t t = begin(c, 1, 0, G, "big", "", 0);
    CHECK(t > 0);
    CHECK_EQ_INT(cache_fill_complete(c, t, 1, 0, G, "big", 3, "", 0, v, vlen, 0, 0), 0);
    CHECK_EQ_INT(st(c)->fills_too_big, 1);
    CHECK_EQ_INT(st(c)->entries + st(c)->pending, 0);
    CHECK_EQ_INT(st(c)->used_bytes, 0);
    /* with the tables gone, it fits */
    t = begin(c, 1, 0, G, "big", "", 0);
    CHECK_EQ_INT(cache_fill_complete(c, t, 1, 0, G, "big", 3, "", 0, v, vlen, 0, 0), 1);
    CHECK(st(c)->used_bytes <= u);
    free(v);
    cache_free(c);
}

static void test_ttl_expiry(void) {
    cache *c = mk(MB, 64 * 1024, 1000);
    CHECK_EQ_INT(put(c, 1, 0, G, "i1", "", "v", 100), 1);
    CHECK_EQ_INT(put(c, 1, 0, H, "d1", "f", NULL, 100), 1);
    CHECK_EQ_INT(get_at(c, 1, 0, G, "i1", "", 1100), 1); /* 1000 ms old: not older than ttl */
    CHECK_EQ_INT(get_at(c, 1, 0, G, "i1", "", 1101), 0);
    CHECK_EQ_INT(st(c)->expired, 1);
    CHECK_EQ_INT(st(c)->entries, 1);
    CHECK_EQ_INT(get_at(c, 1, 0, H, "d1", "f", 5000), 0);
    CHECK_EQ_INT(st(c)->expired, 2);
    CHECK_EQ_INT(st(c)->used_bytes, 0);

    /* a begin on an expired entry drops it and places a placeholder */
    CHECK_EQ_INT(put(c, 1, 0, G, "i2", "", "old", 0), 1);
    uint64_t t = begin(c, 1, 0, G, "i2", "", 2000);
    CHECK(t > 0);
    CHECK_EQ_INT(st(c)->expired, 3);
    CHECK_EQ_INT(complete(c, t, 1, 0, G, "i2", "", "new", 2000), 1);
    CHECK_EQ_INT(get_at(c, 1, 0, G, "i2", "", 2500), 1); /* age runs from the fill */
    CHECK_MEM(got, strlen(got), "new");

    /* ttl changes apply to what is cached; 0 is no expiry */
    set_cfg(c, MB, 64 * 1024, 0);
    CHECK_EQ_INT(get_at(c, 1, 0, G, "i2", "", INT64_MAX / 2), 1);
    set_cfg(c, MB, 64 * 1024, 100);
    CHECK_EQ_INT(get_at(c, 1, 0, G, "i2", "", 2101), 0);
    cache_free(c);
}

/* A key with its own TTL in Redis: the entry is a miss from the moment
 * the caller says the key expires, whatever cache-ttl says. */
static void test_key_expiry(void) {
    cache *c = mk(MB, 64 * 1024, 0);
    uint64_t t = begin(c, 1, 0, G, "i1", "", 100);
    CHECK_EQ_INT(cache_fill_complete_until(c, t, 1, 0, G, "i1", 2, "", 0, "v", 1, 0, 110, 600), 1);
    CHECK_EQ_INT(get_at(c, 1, 0, G, "i1", "", 599), 1);
    CHECK_EQ_INT(get_at(c, 1, 0, G, "i1", "", 600), 0); /* Redis may have dropped it by now */
    CHECK_EQ_INT(st(c)->expired, 1);
    CHECK_EQ_INT(st(c)->entries, 0);

    /* a reply that comes when the key has expired is not stored */
    t = begin(c, 1, 0, G, "i2", "", 100);
    CHECK_EQ_INT(cache_fill_complete_until(c, t, 1, 0, G, "i2", 2, "", 0, "v", 1, 0, 300, 300), 0);
    CHECK_EQ_INT(st(c)->expired, 2);
    CHECK_EQ_INT(st(c)->pending, 0);
    CHECK_EQ_INT(get_at(c, 1, 0, G, "i2", "", 300), 0);

    /* nil: a missing key has no TTL to honour; an empty value has */
    t = begin(c, 1, 0, H, "d1", "f", 100);
    CHECK_EQ_INT(cache_fill_complete_until(c, t, 1, 0, H, "d1", 2, "f", 1, NULL, 0, 1, 100, 200), 1);
    CHECK_EQ_INT(get_at(c, 1, 0, H, "d1", "f", 100000), 2);
    t = begin(c, 1, 0, G, "i3", "", 100);
    CHECK_EQ_INT(cache_fill_complete_until(c, t, 1, 0, G, "i3", 2, "", 0, "", 0, 0, 100, 200), 1);
    CHECK_EQ_INT(get_at(c, 1, 0, G, "i3", "", 199), 1);
    CHECK_EQ_INT(get_at(c, 1, 0, G, "i3", "", 200), 0);

    /* a TTL past 49 days is kept as about 49 days, never as none */
    t = begin(c, 1, 0, G, "i4", "", 0);
    CHECK_EQ_INT(cache_fill_complete_until(c, t, 1, 0, G, "i4", 2, "", 0, "v", 1, 0, 0, INT64_MAX / 2), 1);
    CHECK_EQ_INT(get_at(c, 1, 0, G, "i4", "", (int64_t)UINT32_MAX - 2), 1);
    CHECK_EQ_INT(get_at(c, 1, 0, G, "i4", "", (int64_t)UINT32_MAX - 1), 0);

    /* with cache-ttl too, whichever ends first */
    set_cfg(c, MB, 64 * 1024, 50);
    t = begin(c, 1, 0, G, "i5", "", 0);
    CHECK_EQ_INT(cache_fill_complete_until(c, t, 1, 0, G, "i5", 2, "", 0, "v", 1, 0, 0, 1000), 1);
    CHECK_EQ_INT(get_at(c, 1, 0, G, "i5", "", 51), 0);
    t = begin(c, 1, 0, G, "i6", "", 0);
    CHECK_EQ_INT(cache_fill_complete_until(c, t, 1, 0, G, "i6", 2, "", 0, "v", 1, 0, 0, 20), 1);
    CHECK_EQ_INT(get_at(c, 1, 0, G, "i6", "", 19), 1);
    CHECK_EQ_INT(get_at(c, 1, 0, G, "i6", "", 20), 0);
    cache_free(c);
}

static void test_max_bytes_zero(void) {
    cache *c = mk(0, 64 * 1024, 0);
    CHECK_EQ_INT(begin(c, 1, 0, G, "i1", "", 0), 0);
    CHECK_EQ_INT(get(c, 1, 0, G, "i1", ""), 0);
    CHECK_EQ_INT(st(c)->used_bytes, 0);
    CHECK_EQ_INT(st(c)->pending, 0);
    set_cfg(c, MB, 64 * 1024, 0);
    CHECK_EQ_INT(put(c, 1, 0, G, "i1", "", "v", 0), 1);
    uint64_t t = begin(c, 1, 0, G, "i2", "", 0);
    CHECK(t > 0);
    set_cfg(c, 0, 64 * 1024, 0);
    CHECK_EQ_INT(st(c)->used_bytes, 0);
    CHECK_EQ_INT(st(c)->entries + st(c)->pending, 0);
    CHECK_EQ_INT(get(c, 1, 0, G, "i1", ""), 0);
    CHECK_EQ_INT(complete(c, t, 1, 0, G, "i2", "", "v", 0), 0);
    CHECK_EQ_INT(begin(c, 1, 0, G, "i1", "", 0), 0);
    cache_free(c);
}

static void test_set_config_shrink_evicts(void) {
    cache *c = mk(MB, 64 * 1024, 0);
    char k[16];
    for (int i = 0; i < 200; i++) {
        snprintf(k, sizeof k, "k%03d", i);
        CHECK_EQ_INT(put(c, 1, 0, G, k, "", v72, 0), 1);
    }
    size_t full = st(c)->used_bytes;
    set_cfg(c, full / 2, 64 * 1024, 0);
    CHECK(st(c)->used_bytes <= full / 2);
    CHECK(st(c)->evictions > 0);
    CHECK_EQ_INT(st(c)->entries + st(c)->evictions, 200);
    CHECK_EQ_INT(get(c, 1, 0, G, "k000", ""), 0);
    CHECK_EQ_INT(get(c, 1, 0, G, "k199", ""), 1);
    CHECK_EQ_INT(get(c, 1, 0, G, "k150", ""), 1);
    cache_free(c);
}

/* ------------------------------------------------------------------------ */
/* Randomized: the memory bound, and hits against a model                   */

#define M_PARTS 2
#define M_DBS 2
#define M_KEYS 48
#define M_FIELDS 6
#define M_SLOTS (M_PARTS * M_DBS * 2 * M_KEYS * M_FIELDS)
#define M_PENDING 64

typedef struct model_slot {
    int valid, nil;
    size_t vlen;
    int64_t filled;
    char val[300];
} model_slot;

typedef struct model_fill {
    int slot;
    uint64_t token;
    int stale; /* its key was invalidated or flushed since the begin */
} model_fill;

typedef struct rnd {
    uint64_t s;
} rnd;

static uint64_t rnd_next(rnd *r) {
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}

static unsigned rnd_below(rnd *r, unsigned n) {
    return (unsigned)(rnd_next(r) % n);
}

/* Slot -> identity, computed once. GET uses field 0 ("") only. */
typedef struct slot_id {
    uint32_t part;
    int db, kind;
    char key[16], field[16];
    size_t klen, flen;
} slot_id;

static slot_id slots[M_SLOTS];

static void slots_init(void) {
    for (int slot = 0; slot < M_SLOTS; slot++) {
        slot_id *i = &slots[slot];
        int f = slot % M_FIELDS, k = slot / M_FIELDS % M_KEYS, kd = slot / (M_FIELDS * M_KEYS) % 2;
        int d = slot / (M_FIELDS * M_KEYS * 2) % M_DBS, p = slot / (M_FIELDS * M_KEYS * 2 * M_DBS);
        i->part = (uint32_t)p + 1;
        i->db = d;
        i->kind = kd ? H : G;
        /* Both kinds use the same keys; some keys are prefixes of others
         * and key + field is ambiguous without the boundary ("d1" "1x",
         * "d11" "x"); key 0 is the empty key, field 0 the empty field. */
        static const char *const fields[M_FIELDS] = {"", "x", "1x", "2x", "n4", "name5"};
        i->klen = k == 0 ? 0 : (size_t)snprintf(i->key, sizeof i->key, "%c%d", k % 3 ? 'd' : 'i', k);
        i->flen = kd ? strlen(fields[f]) : 0;
        memcpy(i->field, kd ? fields[f] : "", i->flen + 1);
    }
}

static int same_key(const slot_id *i, const char *key, size_t klen) {
    return i->klen == klen && memcmp(i->key, key, klen) == 0;
}

/* Half the draws go to a few hot keys, so that hits are frequent. */
static int rnd_slot(rnd *r) {
    int p = (int)rnd_below(r, M_PARTS), d = (int)rnd_below(r, M_DBS), kd = (int)rnd_below(r, 2);
    int k = (int)rnd_below(r, rnd_below(r, 2) ? 6 : M_KEYS);
    int f = kd ? (int)rnd_below(r, M_FIELDS) : 0; /* GET: field 0 */
    return f + M_FIELDS * (k + M_KEYS * (kd + 2 * (d + M_DBS * p)));
}

/*
 * Runs nops random operations on a fresh cache built by api. oom > 0 (the
 * checked copy only): each allocation fails with chance 1/oom, so begin may
 * also return 0 for lack of memory. Checks after
 * every operation: used_bytes <= max_bytes, the model (see the file header),
 * and api->check when there is one. Ends with a flush and checks that
 * used_bytes is 0 again.
 */
static void random_ops(const cache_api *api, uint64_t seed, int nops, unsigned oom) {
    static model_slot model[M_SLOTS];
    model_fill fills[M_PENDING];
    int nfills = 0;
    rnd r = {seed};
    int64_t now = 0;
    cache_config cfg = {48 * 1024, 256, 0};
    char val[300];
    unsigned long bad_model = 0, bad_bound = 0, bad_check = 0, hits = 0, stored = 0, refused_stale = 0;
    int first_check = 0;

    memset(model, 0, sizeof model);
    slots_init();
    cache *c = api->new_(&cfg);
    REQUIRE(c != NULL);
    t_fail_one_in = oom;
    for (int op = 0; op < nops; op++) {
        int slot = rnd_slot(&r);
        const slot_id *id = &slots[slot];
        unsigned what = rnd_below(&r, 1000);
        now += rnd_below(&r, 3);

        if (what < 400) { /* get */
            const char *v;
            size_t vl;
            int nil;
            if (api->get(c, id->part, id->db, id->kind, id->key, id->klen, id->field, id->flen, now, &v, &vl,
                         &nil)) {
                model_slot *m = &model[slot];
                hits++;
                if (!m->valid || m->nil != nil || (cfg.ttl_ms > 0 && now - m->filled > cfg.ttl_ms) ||
                    (!nil && (vl != m->vlen || memcmp(v, m->val, vl) != 0)))
                    bad_model++;
            } else {
                model[slot].valid = 0; /* evicted or expired: gone from the cache */
            }
        } else if (what < 650) { /* begin */
            uint64_t t = api->begin(c, id->part, id->db, id->kind, id->key, id->klen, id->field, id->flen, now);
            if (t == 0) {
                /* no fill needed: a valid entry is there (unless memory ran out) */
                if (!oom && !model[slot].valid) bad_model++;
            } else if (nfills < M_PENDING) {
                fills[nfills++] = (model_fill){slot, t, 0};
            } else {
                api->abort_(c, t, id->part, id->db, id->kind, id->key, id->klen, id->field, id->flen);
            }
        } else if (what < 660) { /* free a few purged entries (cache_reclaim) */
            api->reclaim(c, rnd_below(&r, 8));
        } else if (what < 920) { /* a reply arrives */
            if (nfills == 0) continue; /* nothing in flight: nothing changed */
            int i = (int)rnd_below(&r, (unsigned)nfills);
            model_fill f = fills[i];
            fills[i] = fills[--nfills];
            id = &slots[f.slot];
            int nil = rnd_below(&r, 6) == 0;
            size_t vl = rnd_below(&r, 290);
            int n = snprintf(val, sizeof val, "%d:%" PRIu64 ":", f.slot, f.token);
            for (size_t j = (size_t)n; j < vl; j++) val[j] = (char)('a' + (j + f.token) % 26);
            if (vl < (size_t)n) vl = (size_t)n;
            if (rnd_below(&r, 10) == 0) {
                api->abort_(c, f.token, id->part, id->db, id->kind, id->key, id->klen, id->field, id->flen);
            } else if (api->complete(c, f.token, id->part, id->db, id->kind, id->key, id->klen, id->field,
                                     id->flen, val, vl, nil, now)) {
                model_slot *m = &model[f.slot];
                stored++;
                if (f.stale) bad_model++; /* C3: read before a write, must not fill */
                m->valid = 1;
                m->nil = nil;
                m->vlen = nil ? 0 : vl;
                m->filled = now;
                memcpy(m->val, val, m->vlen);
            } else if (f.stale) {
                refused_stale++;
            }
        } else if (what < 990) { /* invalidate a key */
            api->invalidate(c, id->key, id->klen);
            for (int i = 0; i < M_SLOTS; i++)
                if (same_key(&slots[i], id->key, id->klen)) model[i].valid = 0;
            for (int i = 0; i < nfills; i++)
                if (same_key(&slots[fills[i].slot], id->key, id->klen)) fills[i].stale = 1;
        } else if (what < 995) { /* invalidate up to 80 keys at once (several chunks, repeats) */
            cache_keyref refs[80];
            size_t nk = 1 + rnd_below(&r, 80);
            for (size_t k = 0; k < nk; k++) {
                const slot_id *o = &slots[rnd_below(&r, M_SLOTS)];
                refs[k] = (cache_keyref){o->key, o->klen};
            }
            api->invalidate_many(c, refs, nk);
            for (size_t k = 0; k < nk; k++) {
                for (int i = 0; i < M_SLOTS; i++)
                    if (same_key(&slots[i], refs[k].key, refs[k].klen)) model[i].valid = 0;
                for (int i = 0; i < nfills; i++)
                    if (same_key(&slots[fills[i].slot], refs[k].key, refs[k].klen)) fills[i].stale = 1;
            }
        } else if (what < 997) { /* flush */
            api->flush(c);
            for (int s = 0; s < M_SLOTS; s++) model[s].valid = 0;
            for (int i = 0; i < nfills; i++) fills[i].stale = 1;
        } else { /* new limits */
            cfg.max_bytes = 4096 + rnd_below(&r, 96 * 1024);
            cfg.max_value = rnd_below(&r, 4) == 0 ? 16 : 256;
            cfg.ttl_ms = rnd_below(&r, 3) == 0 ? 200 : 0;
            api->set_config(c, &cfg);
        }

        if (api->stats(c)->used_bytes > cfg.max_bytes) bad_bound++;
        if (api->check != NULL) {
            int e = api->check(c);
            if (e != 0) {
                if (bad_check++ == 0) first_check = e;
            }
        }
    }
    t_fail_reset();
    const cache_stats *s = api->stats(c);
    CHECK_EQ_INT(bad_model, 0);
    CHECK_EQ_INT(bad_bound, 0);
    CHECK_EQ_INT(bad_check, 0);
    if (bad_check) fprintf(stderr, "  %s seed %" PRIu64 ": first cache_check error %d\n", api->name, seed, first_check);
    if (getenv("TEST_CACHE_VERBOSE"))
        fprintf(stderr, "  %s: hits %lu stored %lu refused_stale %lu evictions %" PRIu64 " too_big %" PRIu64
                        " expired %" PRIu64 " rejected %" PRIu64 "\n", api->name, hits, stored, refused_stale,
                s->evictions, s->fills_too_big, s->expired, s->fills_rejected);
    /* the run did exercise what it checks */
    CHECK(hits > (unsigned long)nops / 100);
    CHECK(stored > (unsigned long)nops / 50);
    CHECK(refused_stale > 0);
    /* (with lazy purges, what dying groups hold may have taken all the
     * pressure of the memory bound) */
    CHECK(s->evictions > 0 || cache_purge_now_max < 256);
    CHECK(s->fills_too_big > 0);
    api->flush(c);
    if (api->check != NULL) CHECK_EQ_INT(api->check(c), 0);
    CHECK_EQ_INT(api->reclaim(c, SIZE_MAX), 0);
    CHECK_EQ_INT(api->stats(c)->used_bytes, 0);
    if (api->check != NULL) CHECK_EQ_INT(api->check(c), 0);
    api->free_(c);
}

static void test_random_ops_real(void) {
    for (uint64_t seed = 1; seed <= 4; seed++) random_ops(&real_api, seed * 0x9e3779b97f4a7c15ULL, 150000, 0);
}

/* With every hash narrowed to 3 bits, then to none, lookups walk long
 * chains and compare identities: kind, key/field boundary, part and db must
 * all count. */
static void test_random_ops_colliding(void) {
    cache_hash_mask = 7;
    random_ops(&ck_api, 0x5851f42d4c957f2dULL, 20000, 0);
    cache_hash_mask = 0;
    random_ops(&ck_api, 0x14057b7ef767814fULL, 20000, 0);
    cache_hash_mask = ~0u;
}

/* The identity comparison alone (what decides when hashes collide). */
static void test_identity_compare(void) {
    struct probe a, b;
    unsigned char id[64];
    cache_config cfg = {MB, 1024, 0};
    cache *c = ck_cache_new(&cfg);
    REQUIRE(c != NULL);
    REQUIRE(probe_entry(c, &a, 7, 3, H, "d1", 2, "2x", 2) == 0);
    probe_store(&a, id);
    CHECK_EQ_INT(probe_cmp(id, &a), 0);
    REQUIRE(probe_entry(c, &b, 7, 3, H, "d12", 3, "x", 1) == 0);
    CHECK(probe_cmp(id, &b) != 0);
    REQUIRE(probe_entry(c, &b, 7, 3, G, "d1", 2, "2x", 2) == 0);
    CHECK(probe_cmp(id, &b) != 0);
    REQUIRE(probe_entry(c, &b, 8, 3, H, "d1", 2, "2x", 2) == 0);
    CHECK(probe_cmp(id, &b) != 0);
    REQUIRE(probe_entry(c, &b, 7, 4, H, "d1", 2, "2x", 2) == 0);
    CHECK(probe_cmp(id, &b) != 0);
    REQUIRE(probe_entry(c, &b, 7, 3, H, "d2", 2, "2x", 2) == 0);
    CHECK(probe_cmp(id, &b) != 0);
    REQUIRE(probe_entry(c, &b, 7, 3, H, "d1", 2, "2y", 2) == 0);
    CHECK(probe_cmp(id, &b) != 0);
    REQUIRE(probe_entry(c, &b, 7, 3, H, "d1", 2, "2x", 2) == 0);
    CHECK_EQ_INT(probe_cmp(id, &b), 0);
    CHECK_EQ_INT(b.hv, a.hv);
    ck_cache_free(c);
}

/* Seeds 2 and 3 make most purges lazy (groups of more than 0 or 3
 * entries), so that dying groups meet every other operation. */
static void test_random_ops_checked(void) {
    static const size_t lazy_over[] = {256, 0, 3};
    for (uint64_t seed = 1; seed <= 3; seed++) {
        cache_purge_now_max = lazy_over[seed - 1];
        random_ops(&ck_api, seed * 0x2545f4914f6cdd1dULL, 40000, 0);
    }
    cache_purge_now_max = 256;
}

/* ------------------------------------------------------------------------ */
/* Out of memory (checked copy)                                             */

/* Allocations fail at random (1 in 7): the cache stays consistent, never
 * serves a wrong value, and never exceeds its bound. */
static void test_oom_random(void) {
    unsigned long before = t_failures;
    t_fail_rng = 0x1234567;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        cache_purge_now_max = seed == 1 ? 2 : 256; /* one run with lazy purges */
        random_ops(&ck_api, seed * 0x9e3779b97f4a7c15ULL, 40000, 7);
    }
    cache_purge_now_max = 256;
    CHECK(t_failures - before > 1000);
}

/* Each allocation of a begin + complete fails in turn: whatever failed is
 * undone (nothing pending, no bytes held), a failed complete counts as
 * refused, and the cache is consistent after every step. */
static void test_oom_each_allocation(void) {
    int stored_at = -1;
    for (long k = 0; k < 32 && stored_at < 0; k++) {
        cache_config cfg = {MB, 1024, 0};
        cache *c = ck_cache_new(&cfg);
        REQUIRE(c != NULL);
        t_fail_countdown = k;
        uint64_t t = ck_cache_fill_begin(c, 1, 0, H, "d1", 2, "name", 4, 0);
        CHECK_EQ_INT(cache_check(c), 0);
        if (t == 0) {
            CHECK_EQ_INT(ck_cache_get_stats(c)->pending, 0);
            CHECK_EQ_INT(ck_cache_get_stats(c)->used_bytes, 0);
        } else {
            int ok = ck_cache_fill_complete(c, t, 1, 0, H, "d1", 2, "name", 4, "value", 5, 0, 0);
            CHECK_EQ_INT(cache_check(c), 0);
            CHECK_EQ_INT(ck_cache_get_stats(c)->pending, 0);
            if (ok) {
                stored_at = (int)k;
                CHECK_EQ_INT(ck_cache_get_stats(c)->entries, 1);
            } else {
                CHECK_EQ_INT(ck_cache_get_stats(c)->fills_rejected, 1);
                CHECK_EQ_INT(ck_cache_get_stats(c)->used_bytes, 0);
            }
        }
        t_fail_reset();
        /* and it works again once memory is back */
        uint64_t t2 = ck_cache_fill_begin(c, 1, 0, H, "d1", 2, "other", 5, 0);
        CHECK(t2 > 0);
        CHECK_EQ_INT(ck_cache_fill_complete(c, t2, 1, 0, H, "d1", 2, "other", 5, "v", 1, 0, 0), 1);
        CHECK_EQ_INT(cache_check(c), 0);
        ck_cache_free(c);
    }
    /* group, its table and buckets, placeholder, index table and buckets,
     * the filled entry: with 7 allocations it is stored */
    CHECK_EQ_INT(stored_at, 7);
}

/* A table that cannot grow: the add that needed it is undone. Fill many
 * entries with every allocation after the first N failing, for each N. */
static void test_oom_while_tables_grow(void) {
    char k[16];
    unsigned long refused = 0;
    for (long n = 0; n < 400; n += 3) {
        cache_config cfg = {64 * MB, 1024, 0};
        cache *c = ck_cache_new(&cfg);
        REQUIRE(c != NULL);
        t_fail_countdown = n;
        for (int i = 0; i < 2000; i++) {
            int kl = snprintf(k, sizeof k, "i%d", i);
            uint64_t t = ck_cache_fill_begin(c, 1, 0, G, k, (size_t)kl, "", 0, 0);
            if (t == 0) {
                refused++;
                continue;
            }
            ck_cache_fill_complete(c, t, 1, 0, G, k, (size_t)kl, "", 0, "v", 1, 0, 0);
        }
        CHECK_EQ_INT(cache_check(c), 0);
        /* every complete consumed its placeholder: stored, or dropped */
        CHECK_EQ_INT(ck_cache_get_stats(c)->pending, 0);
        t_fail_reset();
        ck_cache_flush(c);
        CHECK_EQ_INT(ck_cache_get_stats(c)->used_bytes, 0);
        ck_cache_free(c);
    }
    CHECK(refused > 0);
}

/* The fill's own add must grow the table, and cannot: with every hash 0,
 * nine placeholders fill the one bucket and the tenth element (the filled
 * entry, added before its placeholder goes) triggers the doubling, whose
 * allocation fails. The fill is refused and its placeholder dropped. */
static void test_oom_when_fill_grows_table(void) {
    char f[16];
    cache_config cfg = {MB, 1024, 0};
    cache *c = ck_cache_new(&cfg);
    REQUIRE(c != NULL);
    cache_hash_mask = 0;
    uint64_t t[9];
    for (int i = 0; i < 9; i++) {
        snprintf(f, sizeof f, "f%d", i);
        t[i] = ck_cache_fill_begin(c, 1, 0, H, "d1", 2, f, 2, 0);
        CHECK(t[i] > 0);
    }
    t_fail_countdown = 1; /* the entry succeeds, the new buckets fail */
    CHECK_EQ_INT(ck_cache_fill_complete(c, t[0], 1, 0, H, "d1", 2, "f0", 2, "value", 5, 0, 0), 0);
    t_fail_reset();
    CHECK_EQ_INT(t_fail_countdown, -1);
    CHECK_EQ_INT(ck_cache_get_stats(c)->fills_rejected, 1);
    CHECK_EQ_INT(ck_cache_get_stats(c)->pending, 8);
    CHECK_EQ_INT(ck_cache_get_stats(c)->entries, 0);
    CHECK_EQ_INT(cache_check(c), 0);
    CHECK_EQ_INT(ck_cache_fill_complete(c, t[1], 1, 0, H, "d1", 2, "f1", 2, "value", 5, 0, 0), 1);
    const char *v;
    size_t vl;
    int nil;
    CHECK_EQ_INT(ck_cache_get(c, 1, 0, H, "d1", 2, "f1", 2, 0, &v, &vl, &nil), 1);
    CHECK_EQ_INT(ck_cache_get(c, 1, 0, H, "d1", 2, "f0", 2, 0, &v, &vl, &nil), 0);
    CHECK_EQ_INT(cache_check(c), 0);
    cache_hash_mask = ~0u;
    ck_cache_free(c);
}

/* A begin that grew the groups' buckets, then found no memory for its
 * placeholder, still leaves the cache within max_bytes. With every hash 0,
 * the tenth group doubles the groups' buckets. */
static void test_oom_after_group_table_grew(void) {
    char k[16];
    cache_config cfg = {MB, 1024, 0};
    cache *c = ck_cache_new(&cfg);
    REQUIRE(c != NULL);
    cache_hash_mask = 0;
    for (int i = 0; i < 9; i++) {
        int kl = snprintf(k, sizeof k, "i%d", i);
        uint64_t t = ck_cache_fill_begin(c, 1, 0, G, k, (size_t)kl, "", 0, 0);
        CHECK_EQ_INT(ck_cache_fill_complete(c, t, 1, 0, G, k, (size_t)kl, "", 0, "v", 1, 0, 0), 1);
    }
    cfg.max_bytes = ck_cache_get_stats(c)->used_bytes;
    ck_cache_set_config(c, &cfg);
    t_fail_countdown = 2; /* the group and the doubled buckets; the placeholder fails */
    CHECK_EQ_INT(ck_cache_fill_begin(c, 1, 0, G, "i9", 2, "", 0, 0), 0);
    t_fail_reset();
    CHECK(ck_cache_get_stats(c)->used_bytes <= cfg.max_bytes);
    CHECK(ck_cache_get_stats(c)->evictions > 0);
    CHECK_EQ_INT(cache_check(c), 0);
    cache_hash_mask = ~0u;
    ck_cache_free(c);
}

/* ------------------------------------------------------------------------ */
/* Measurement                                                              */

/* Bytes held per entry above key + value: 100,000 GET entries, 8-byte keys,
 * 72-byte values (the size of a JuiceFS inode attribute). */
/* C9 at scale: a million distinct inode keys through a cache of 8 MiB.
 * used_bytes never passes max_bytes, entries are evicted, and the most
 * recent fills are the ones kept. */
static void test_million_keys_stay_bounded(void) {
    cache_config cfg = {8u << 20, 64 * 1024, 0};
    cache *c = cache_new(&cfg);
    REQUIRE(c != NULL);
    char key[32], val[72];
    memset(val, 'a', sizeof val);
    size_t peak = 0;
    for (int i = 0; i < 1000000; i++) {
        int n = snprintf(key, sizeof key, "i%d", i + 1);
        uint64_t t = cache_fill_begin(c, 1, 0, CACHE_KIND_GET, key, (size_t)n, "", 0, 0);
        REQUIRE(t != 0);
        cache_fill_complete(c, t, 1, 0, CACHE_KIND_GET, key, (size_t)n, "", 0, val, sizeof val, 0, 0);
        const cache_stats *st = cache_get_stats(c);
        if (st->used_bytes > peak) peak = st->used_bytes;
        if (st->used_bytes > cfg.max_bytes) {
            CHECK(st->used_bytes <= cfg.max_bytes);
            break;
        }
    }
    const cache_stats *st = cache_get_stats(c);
    CHECK(peak <= cfg.max_bytes);
    CHECK(st->evictions > 900000);
    CHECK(st->entries > 10000);
    const char *v;
    size_t vlen;
    int is_nil;
    CHECK(cache_get(c, 1, 0, CACHE_KIND_GET, "i1000000", 8, "", 0, 0, &v, &vlen, &is_nil) == 1);
    CHECK(cache_get(c, 1, 0, CACHE_KIND_GET, "i1", 2, "", 0, 0, &v, &vlen, &is_nil) == 0);
    cache_free(c);
}

static void test_overhead_per_entry(void) {
    const int n = 100000;
    cache *c = mk((size_t)1 << 30, 64 * 1024, 0);
    char k[16];
    for (int i = 0; i < n; i++) {
        snprintf(k, sizeof k, "i%07d", i);
        CHECK_EQ_INT(strlen(k), 8);
        if (!put(c, 1, 0, G, k, "", v72, 0)) CHECK(0);
    }
    CHECK_EQ_INT(st(c)->entries, n);
    CHECK_EQ_INT(get(c, 1, 0, G, "i0054321", ""), 1);
    size_t payload = (size_t)n * (8 + 72);
    CHECK(st(c)->used_bytes > payload);
    double over = (double)(st(c)->used_bytes - payload) / n;
    fprintf(stderr, "cache overhead: %.1f bytes per entry above key+value (%d GET entries, 8-byte keys, "
                    "72-byte values; used_bytes %zu)\n", over, n, st(c)->used_bytes);
    cache_flush(c);
    CHECK_EQ_INT(cache_reclaim(c, SIZE_MAX), 0);
    CHECK_EQ_INT(st(c)->used_bytes, 0);
    cache_free(c);
}

int main(void) {
    RUN(test_get_hit_miss);
    RUN(test_hget_hit_miss);
    RUN(test_peek);
    RUN(test_count_reads_off);
    RUN(test_peek_filled_before);
    RUN(test_binary_value);
    RUN(test_nil_entries);
    RUN(test_partitions_and_dbs_are_separate);
    RUN(test_kinds_and_boundaries_are_separate);
    RUN(test_empty_key);
    RUN(test_long_keys);
    RUN(test_group_purge);
    RUN(test_group_purge_large);
    RUN(test_group_purge_lazy);
    RUN(test_flush_lazy);
    RUN(test_invalidate_many);
    RUN(test_fill_after_invalidation_is_refused);
    RUN(test_fill_aba);
    RUN(test_fill_token_belongs_to_its_identity);
    RUN(test_shared_placeholder);
    RUN(test_flush_makes_pending_fills_fail);
    RUN(test_fill_abort);
    RUN(test_lru_eviction_order);
    RUN(test_placeholder_is_evictable);
    RUN(test_accounting_is_exact);
    RUN(test_max_value);
    RUN(test_entry_larger_than_max_bytes);
    RUN(test_fill_too_big_for_grown_tables);
    RUN(test_ttl_expiry);
    RUN(test_key_expiry);
    RUN(test_max_bytes_zero);
    RUN(test_set_config_shrink_evicts);
    RUN(test_random_ops_real);
    RUN(test_random_ops_checked);
    RUN(test_random_ops_colliding);
    RUN(test_identity_compare);
    RUN(test_oom_random);
    RUN(test_oom_each_allocation);
    RUN(test_oom_while_tables_grow);
    RUN(test_oom_when_fill_grows_table);
    RUN(test_oom_after_group_table_grew);
    RUN(test_million_keys_stay_bounded);
    RUN(test_overhead_per_entry);
    return unit_report();
}
