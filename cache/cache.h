/*
 * cache/cache.h — the local cache of read replies: entries, the index, key
 * groups, LRU, byte accounting and fill tokens. Pure: no I/O, no clocks
 * (callers pass now_ms), no globals.
 *
 * Data model
 * ----------
 * An entry caches the reply of one cacheable read, identified by
 *     (partition, db, kind, key, field)
 * - partition: the upstream user the reply was read as (ACL partition, C8);
 * - db: the database;
 * - kind: which read (CACHE_KIND_GET, CACHE_KIND_HGET, ...), so that GET k
 *   and HGET k f never share an entry;
 * - key: the Redis key; field: the hash field for HGET ("" otherwise).
 * The value is the reply's payload (a bulk string) or nil: entries store no
 * RESP framing, so one entry serves RESP2 and RESP3 clients alike.
 *
 * Every entry belongs to the group of its key (by key bytes alone): all
 * entries of one key, whatever the partition, db, kind or field. Redis's
 * invalidation messages name keys only, without db or user, so an
 * invalidation purges the whole group, at a cost proportional to the
 * entries purged, never a scan of the cache. A large group (a directory
 * with many cached names) is purged in O(1): from then on no call sees
 * its entries, and their memory is freed later, by cache_reclaim() in
 * slices or by eviction, which takes such entries first. So is a flush of
 * a large cache.
 *
 * Fills and tokens (the consistency contract, C3)
 * -----------------------------------------------
 * A miss that goes to Redis first calls cache_fill_begin(), which places a
 * pending entry (a placeholder, no value) and returns a token. Any
 * invalidation or flush of the key deletes the placeholder. The reply is
 * offered with cache_fill_complete(token): it is stored only if the
 * placeholder with that very token is still there. A later read of the
 * same key that begins its own fill while the first is pending shares the
 * placeholder and its token. So a reply that was read before a write
 * (however the reply and the invalidation race home) never fills, and an
 * ABA sequence (invalidate, re-begin, old reply arrives) fails the token
 * check. Tokens are never reused (64-bit counter).
 *
 * Memory (C9)
 * -----------
 * used_bytes counts every byte the cache holds: entry structs, key, field
 * and value copies, and the hash tables' handles and buckets. After each
 * fill, least recently used entries are evicted until used_bytes <=
 * max_bytes. Values larger than max_value are not cached. Placeholders are
 * counted and evictable too (evicting one only makes its fill fail).
 * Details (cache.c):
 * - sizes are the sizes requested from malloc (its own headers and rounding
 *   are not counted); struct cache itself is not counted, so an empty cache
 *   has used_bytes 0;
 * - every call returns with used_bytes <= max_bytes;
 * - the two hash tables cost about 1.2 KB even for one entry, so a
 *   max_bytes below about 1.5 KB caches nothing; their bucket arrays grow
 *   with the cache and shrink only when it empties;
 * - about 236 bytes per entry beyond key, field and value, hash buckets
 *   included (measured for 8-byte GET keys; tests/unit/test_cache.c prints
 *   it).
 *
 * Keys and fields longer than 64 KiB are never cached: gets miss, begins
 * return 0, invalidations purge nothing.
 *
 * Lifetime: values returned by cache_get() are valid until the next call
 * on the cache (any but cache_get_stats); the caller copies them into its
 * output at once. Nothing here allocates or frees on a hit.
 */
#ifndef SIDECACHE_CACHE_CACHE_H
#define SIDECACHE_CACHE_CACHE_H

#include <stddef.h>
#include <stdint.h>

enum cache_kind {
    CACHE_KIND_GET = 1,  /* GET key -> bulk or nil */
    CACHE_KIND_HGET = 2, /* HGET key field -> bulk or nil */
};

typedef struct cache_config {
    size_t max_bytes;  /* cache-max-memory: bound on used_bytes; 0 = cache nothing */
    size_t max_value;  /* cache-max-value: larger values pass uncached */
    int64_t ttl_ms;    /* cache-ttl: entries older than this miss; 0 = off */
} cache_config;

typedef struct cache_stats {
    uint64_t hits, misses;
    uint64_t fills;              /* replies stored */
    uint64_t fills_rejected;     /* replies refused: token no longer valid (race),
                                    or no memory for the value */
    uint64_t fills_too_big;      /* replies above max_value, or too big for
                                    max_bytes even alone */
    uint64_t invalidations;      /* keys invalidated (by cache_invalidate_key
                                    or _keys, each key once) */
    uint64_t keys_purged;        /* entries purged by invalidations (placeholders too) */
    uint64_t flushes;            /* cache_flush calls */
    uint64_t evictions;          /* entries evicted for memory (placeholders too) */
    uint64_t expired;            /* entries dropped by ttl or their key's own
                                    expiry (by cache_get, cache_fill_begin, or a
                                    fill that came too late) */
    size_t entries;              /* valid entries (placeholders excluded) */
    size_t pending;              /* placeholders */
    size_t reclaiming;           /* entries (and placeholders) purged, no
                                    longer seen by any call, whose memory is
                                    not freed yet (counted in neither above) */
    uint64_t placeholders_made;  /* placeholders ever made: while it stays the
                                    same, no key absent before can have an
                                    entry (every entry starts as one) */
    size_t used_bytes;           /* every byte held, see above */
} cache_stats;

typedef struct cache cache;

/* Returns a new empty cache, or NULL on OOM. */
cache *cache_new(const cache_config *cfg);
void cache_free(cache *c);
/* Changes the limits at run time (evicts at once to the new max_bytes). A
 * new ttl applies to entries already cached (they keep their fill time); a
 * lower max_value does not drop values already cached. */
void cache_set_config(cache *c, const cache_config *cfg);
const cache_stats *cache_get_stats(const cache *c);

/*
 * Looks up a valid entry. Returns 1 on a hit, with *is_nil set and, when
 * not nil, *val and *vlen pointing at the value (valid until the cache changes);
 * 0 on a miss (no entry, a placeholder, or an expired entry, which is then
 * dropped). A hit makes the entry most recently used.
 */
int cache_get(cache *c, uint32_t part, int db, int kind, const char *key, size_t klen,
              const char *field, size_t flen, int64_t now_ms, const char **val, size_t *vlen,
              int *is_nil);

/* Whether cache_get counts its hits and misses (on at first). A caller
 * that looks up again what it counted once (a request dispatched a second
 * time) turns it off meanwhile, and keeps the rest of cache_get. */
void cache_count_reads(cache *c, int on);

/* cache_get without its effects: no statistics, no LRU move, nothing
 * dropped (an expired entry, or one of a purged group, is just a miss). */
int cache_peek(const cache *c, uint32_t part, int db, int kind, const char *key, size_t klen,
               const char *field, size_t flen, int64_t now_ms, const char **val, size_t *vlen,
               int *is_nil);
/* cache_peek of an entry filled before before_ms only: one filled at or
 * after it (perhaps after an invalidation of the one seen then, with the
 * same bytes) is a miss. */
int cache_peek_filled_before(const cache *c, uint32_t part, int db, int kind, const char *key, size_t klen,
                             const char *field, size_t flen, int64_t before_ms, int64_t now_ms, const char **val,
                             size_t *vlen, int *is_nil);

/*
 * Begins a fill for a miss that is about to be sent to Redis. Returns its
 * token (> 0), or 0 when the reply must not fill (no memory for the
 * placeholder, max_bytes == 0, key too long). See the header comment.
 * - a placeholder already there (another read in flight): its token, shared;
 * - a valid entry already there: 0, no fill needed (the entry stays); one
 *   that has expired (now_ms) is dropped and a placeholder takes its place;
 * - 0 also for a kind outside 1..255, a key or field over 64 KiB, or an
 *   entry that could never fit max_bytes.
 * Placing the placeholder may evict least recently used entries.
 */
uint64_t cache_fill_begin(cache *c, uint32_t part, int db, int kind, const char *key, size_t klen,
                          const char *field, size_t flen, int64_t now_ms);

/*
 * Offers the reply to a fill. is_nil: the reply was nil (val ignored).
 * Returns 1 if stored, 0 if refused (token stale, value too big, OOM).
 * Evicts least recently used entries to stay within max_bytes.
 * The value is copied; the stored entry is the most recently used. Every
 * refusal but a stale token also drops the placeholder (it is the fill's
 * own). Token 0 (cache_fill_begin said no) returns 0 and counts nothing.
 */
int cache_fill_complete(cache *c, uint64_t token, uint32_t part, int db, int kind, const char *key,
                        size_t klen, const char *field, size_t flen, const char *val, size_t vlen,
                        int is_nil, int64_t now_ms);

/* cache_fill_complete for a key that expires in Redis at until_ms (the
 * caller's clock, as now_ms; 0: it has no TTL): the entry is a miss from
 * then on. A value whose until_ms is not after now_ms is not stored (counted
 * in expired). A nil ignores until_ms: a missing key has no TTL. The caller
 * takes until_ms no later than Redis's own expiry: the time it sent PTTL,
 * plus the PTTL. */
int cache_fill_complete_until(cache *c, uint64_t token, uint32_t part, int db, int kind, const char *key,
                              size_t klen, const char *field, size_t flen, const char *val, size_t vlen,
                              int is_nil, int64_t now_ms, int64_t until_ms);

/* Abandons a fill whose reply is not cacheable (an error): removes the
 * placeholder if it still carries this token. */
void cache_fill_abort(cache *c, uint64_t token, uint32_t part, int db, int kind, const char *key,
                      size_t klen, const char *field, size_t flen);

/* Purges every entry and placeholder of key (all partitions, dbs, kinds,
 * fields). Returns how many were purged. Costs O(entries purged), or O(1)
 * for a large group, whose memory is freed later (stats.reclaiming). */
size_t cache_invalidate_key(cache *c, const char *key, size_t klen);

typedef struct cache_keyref {
    const char *key;
    size_t klen;
} cache_keyref;

/* cache_invalidate_key for each of n keys, faster than one by one on a
 * large cache (the table's memory is fetched for several keys at once).
 * Returns how many entries were purged. */
size_t cache_invalidate_keys(cache *c, const cache_keyref *keys, size_t n);

/* Purges everything, placeholders included (so pending fills fail). A
 * flush of more than a few hundred entries takes O(1): their memory is freed
 * later, as a large group's is (stats.reclaiming, cache_reclaim). */
void cache_flush(cache *c);

/* Frees up to budget entries of purged large groups and large flushes. Returns
 * how many are left to free (stats.reclaiming). */
size_t cache_reclaim(cache *c, size_t budget);

#endif
