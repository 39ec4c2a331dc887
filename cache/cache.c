/*
 * cache/cache.c — the local cache of read replies. See cache.h for the data
 * model, the fill contract (tokens) and the memory bound.
 *
 * Layout
 * ------
 *
 *   c->index ──► uthash table of struct entry, keyed by the identity bytes
 *                  | part, db: u64 | kind: u8 | klen: u32 | key | field |
 *                (the u64 is part | db << 32, the integers native-endian;
 *                klen makes key "d1" + field "47x" differ from "d147" + "x").
 *                The table's application-order list (hh.prev / hh.next,
 *                which uthash keeps anyway) doubles as the LRU list: the
 *                head c->index is the least recently used entry, tbl->tail
 *                the most recent. HASH_ADD appends, so a new entry starts
 *                most recent; a hit moves it to the tail (lru_touch).
 *
 *   c->groups ─► uthash table of struct group, keyed by key bytes alone.
 *                A group's node is the sentinel of a circular list of its
 *                entries, so an entry leaves its group without a pointer to
 *                it, and the group is known empty when its sentinel is left
 *                alone (then it is freed at once: no group is ever empty).
 *
 *        group "d12" ──► [sentinel] ⇄ (1,0,HGET,"d12","a") ⇄ (2,0,HGET,"d12","a") ⇄ …
 *
 *                Each entry also points at its group (owner), which says
 *                whether the group is dying (below).
 *
 *   c->dying ──► groups purged lazily: an invalidation of a group of more
 *                than PURGE_NOW_MAX entries (a large directory's cached
 *                dentries: 100,000 take ~15 ms to free one by one) only takes
 *                the group out of c->groups and marks it dying, O(1). Its
 *                entries stay in the index and the LRU, where every lookup
 *                that meets one treats it as absent (and frees it), until
 *                cache_reclaim() frees them in slices, or eviction reaches
 *                them (dying entries go first). A new group of the same key
 *                may exist meanwhile; the two never share an entry.
 *
 *   c->cleared ──► what a flush of more than PURGE_NOW_MAX entries let go:
 *                the flush frees the two tables (a few frees) and keeps the
 *                app-order list of the entries they held, for
 *                cache_reclaim() or eviction to free; each leaves its
 *                group's list then, and the group goes with its last
 *                entry. Nothing else reads them: their handles point at
 *                the freed tables. (200,000 entries took ~20 ms to free at
 *                once.)
 *
 * An entry is one allocation: header, identity, then the value bytes. A
 * placeholder has no value bytes. A fill of a non-empty value allocates
 * the full entry, puts it in the placeholder's place (the index, its group)
 * and frees the placeholder; a nil or empty fill just marks the placeholder
 * valid. A pending entry keeps its token where a valid one keeps its fill
 * time (one union).
 *
 * Lookups build no identity: a struct probe holds the caller's pieces, is
 * hashed in place (MurmurHash64A under a per-cache seed taken from the
 * cache's address, so it differs between runs under ASLR), and is compared
 * piece by piece against stored identities (HASH_KEYCMP). Only the
 * *_BYHASHVALUE forms of uthash are used, so each hash is computed once.
 *
 * Memory accounting
 * -----------------
 * alloc_bytes is the sum of the sizes requested for entries and groups
 * (malloc's own headers and rounding are not counted). used_bytes is
 * alloc_bytes plus, for each table that exists, sizeof(UT_hash_table) and
 * its bucket array; uthash handles live inside entries and groups, so they
 * are in alloc_bytes. The bucket arrays grow and never shrink while a table
 * has entries; uthash frees a table with its last element, so an empty
 * cache counts 0 bytes (struct cache itself is not counted).
 *
 * Out of memory: HASH_NONFATAL_OOM is on. A failed HASH_ADD leaves the
 * element out of the table with hh.tbl == NULL, which every add checks; the
 * step that failed is undone (a new group or placeholder freed, a fill
 * dropped with its placeholder) and the cache stays consistent.
 *
 * Invariants (cache_check() verifies them in the unit tests)
 *   - every entry is in c->index, once, under the hash of its identity, and
 *     in exactly one group, its owner: the group of its key in c->groups,
 *     or a dying group of the same key on c->dying; no group is empty, and
 *     each counts its members (n) and its placeholders (npending);
 *   - stats.reclaiming is the number of entries in dying groups and on
 *     c->cleared;
 *   - the app-order (LRU) links are consistent, head to tail;
 *   - a pending entry has a token in 1..last_token and no value bytes;
 *   - stats.entries + stats.pending + stats.reclaiming == number of entries
 *     in c->index and on c->cleared;
 *   - alloc_bytes and used_bytes are exact as described above;
 *   - when a public call returns, used_bytes <= max_bytes. (Within a call
 *     the peak can be a little higher: a table's old and new buckets while
 *     it doubles, a placeholder and its filled replacement.)
 *
 * Test hooks, compiled in only with CACHE_TESTING (tests/unit/test_cache.c):
 * CACHE_MALLOC/CACHE_FREE, cache_hash_mask (narrows hashes to force
 * collisions) and cache_check().
 */
#include "cache/cache.h"

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Every allocation goes through these, so the unit tests can build a copy
 * of this file that fails allocations on demand. */
#ifndef CACHE_MALLOC
#define CACHE_MALLOC(n) malloc(n)
#define CACHE_FREE(p) free(p)
#endif

#define HASH_NONFATAL_OOM 1
/* Failed adds are detected by hh.tbl == NULL after HASH_ADD (see above). */
#define uthash_nonfatal_oom(elt) ((void)0)
#define uthash_malloc(sz) CACHE_MALLOC(sz)
#define uthash_free(ptr, sz) CACHE_FREE(ptr)
/* Lookups pass a struct probe as the key (see probe_cmp); hashes are
 * computed here with a seed and passed to the *_BYHASHVALUE forms, so a
 * macro that would hash on its own does not compile. */
#define HASH_KEYCMP(a, b, n) probe_cmp((const unsigned char *)(a), (const struct probe *)(const void *)(b))
#define HASH_FUNCTION(keyptr, keylen, hashv) \
    _Static_assert(0, "cache.c: use the _BYHASHVALUE forms with probe_hash()")
#include <uthash.h>
#include "util/uthash_dense.h"

#define ID_HDR 13             /* part 4 + db 4 + kind 1 + klen 4 */

/* Groups up to this size are purged at once; larger ones lazily (c->dying).
 * At ~150 ns an entry, a purge stalls the proxy for at most ~40 us. */
#ifdef CACHE_TESTING
static size_t cache_purge_now_max = 256; /* the unit tests make most purges lazy */
#define PURGE_NOW_MAX cache_purge_now_max
#else
#define PURGE_NOW_MAX 256
#endif
#define KEY_MAX (64 * 1024)   /* longer keys or fields are never cached */

enum { ST_PENDING = 0, ST_VALUE = 1, ST_NIL = 2 };

struct link {
    struct link *prev, *next;
};

struct entry {
    UT_hash_handle hh;   /* first: c->index; app order = LRU */
    struct link grp;     /* in the circular list of its group */
    struct group *owner; /* that group */
    union {
        uint64_t token;      /* ST_PENDING */
        int64_t filled_ms;   /* ST_VALUE, ST_NIL */
    } u;
    uint32_t vlen;       /* value bytes after the identity (0 unless ST_VALUE) */
    uint32_t life_ms;    /* ST_VALUE: ms after filled_ms at which the key
                            itself expires in Redis; LIFE_FOREVER: never */
    uint8_t state;
    unsigned char id[];  /* identity (hh.keylen bytes), then the value */
};
#define ENTRY_BASE offsetof(struct entry, id)

struct group {
    /* c->groups, keyed by key. Once dying, the group is out of that table,
     * and its handle says so and links the dying list (group_dying): no
     * bytes for that in every group, most of which hold one entry. */
    UT_hash_handle hh;
    struct link members;   /* sentinel */
    uint32_t n, npending;  /* members, of which placeholders */
    unsigned char key[];
};

/* Out of c->groups, on c->dying (linked by hh.next). A group in c->groups
 * always has hh.tbl set (a failed add frees it at once). */
static int group_dying(const struct group *g) {
    return g->hh.tbl == NULL;
}

static struct group *next_dying(const struct group *g) {
    return g->hh.next;
}
#define GROUP_BASE offsetof(struct group, key)

struct cache {
    struct entry *index;    /* uthash head = least recently used entry */
    struct group *groups;
    struct group *dying;    /* purged lazily, not yet freed */
    struct entry *cleared;  /* flushed lazily, not yet freed (by hh.next) */
    cache_config cfg;
    cache_stats stats;
    int uncounted;          /* cache_get does not count (cache_count_reads) */
    size_t alloc_bytes;     /* requested sizes of entries and groups */
    uint64_t last_token;
    uint64_t seed;
};

/* ------------------------------------------------------------------------ */
/* probes: hashing and comparing identities without building them */

/*
 * A lookup never copies the caller's key into an identity buffer: the
 * probe keeps the pieces, hashes them in place, and HASH_KEYCMP compares a
 * stored identity against them piece by piece. (Building the identity and
 * then reading it back costs a store-forwarding stall per 8-byte load, and
 * a buffer of unbounded size.) Entries store the header as written here:
 * w0 = part | db << 32 as a native u64, kind, klen as a native u32.
 */
struct probe {
    uint64_t w0;                     /* entries: part | db << 32 */
    const unsigned char *key, *field;
    size_t klen, flen;
    size_t len;                      /* hh.keylen of the match */
    unsigned hv;
    uint8_t kind;
    uint8_t entry;                   /* 1: entry identity; 0: group key (key alone) */
};

#define MM_M 0xc6a4a7935bd1e995ULL

#ifdef CACHE_TESTING
/* The unit tests narrow hashes to force collisions (see test_cache.c). */
static unsigned cache_hash_mask = ~0u;
#define HASH_MASK cache_hash_mask
#else
#define HASH_MASK (~0u)
#endif

/* MurmurHash64A (Austin Appleby, public domain), fed piece by piece. */
static inline uint64_t mm_word(uint64_t h, uint64_t k) {
    k *= MM_M;
    k ^= k >> 47;
    k *= MM_M;
    h ^= k;
    return h * MM_M;
}

static inline uint64_t mm_bytes(uint64_t h, const unsigned char *p, size_t n) {
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t k;
        memcpy(&k, p, 8);
        h = mm_word(h, k);
    }
    if (n > 0) {
        /* in registers: a memcpy into a stack word, read back at once,
         * stalls store forwarding (measured: a third of a hit's time) */
        uint64_t t = 0;
        for (size_t i = 0; i < n; i++) t |= (uint64_t)p[i] << (8 * i);
        h = (h ^ t) * MM_M;
    }
    return h;
}

static inline unsigned mm_final(uint64_t h) {
    h ^= h >> 47;
    h *= MM_M;
    h ^= h >> 47;
    return (unsigned)(h ^ (h >> 32)) & HASH_MASK;
}

static inline unsigned probe_hash(uint64_t seed, const struct probe *p) {
    uint64_t h = seed ^ ((uint64_t)p->len * MM_M);
    if (p->entry) {
        h = mm_word(h, p->w0);
        h = mm_word(h, (uint64_t)p->kind | (uint64_t)p->klen << 8);
    }
    h = mm_bytes(h, p->key, p->klen);
    if (p->flen > 0) h = mm_bytes(h, p->field, p->flen);
    return mm_final(h);
}

/* 0 if the stored key a (an entry's identity or a group's key) matches p. */
static inline int probe_cmp(const unsigned char *a, const struct probe *p) {
    if (p->entry) {
        uint64_t w0;
        uint32_t kl;
        memcpy(&w0, a, 8);
        memcpy(&kl, a + 9, 4);
        if (w0 != p->w0 || a[8] != p->kind || kl != p->klen) return 1;
        a += ID_HDR;
    }
    if (p->klen > 0 && memcmp(a, p->key, p->klen) != 0) return 1;
    return p->flen > 0 && memcmp(a + p->klen, p->field, p->flen) != 0;
}

/* Returns 0, or -1 when no entry can have this identity (bad kind, key or
 * field too long). */
static int probe_entry(const cache *c, struct probe *p, uint32_t part, int db, int kind,
                       const char *key, size_t klen, const char *field, size_t flen) {
    if (kind < 1 || kind > 255 || klen > KEY_MAX || flen > KEY_MAX) return -1;
    p->w0 = (uint64_t)part | (uint64_t)(uint32_t)db << 32;
    p->kind = (uint8_t)kind;
    p->key = (const unsigned char *)key;
    p->klen = klen;
    p->field = (const unsigned char *)field;
    p->flen = flen;
    p->len = ID_HDR + klen + flen;
    p->entry = 1;
    p->hv = probe_hash(c->seed, p);
    return 0;
}

static void probe_group(const cache *c, struct probe *p, const unsigned char *key, size_t klen) {
    memset(p, 0, sizeof *p);
    p->key = key;
    p->klen = klen;
    p->len = klen;
    p->hv = probe_hash(c->seed, p);
}

/* Writes p's identity (p->len bytes) at id. */
static void probe_store(const struct probe *p, unsigned char *id) {
    uint32_t kl = (uint32_t)p->klen;
    memcpy(id, &p->w0, 8);
    id[8] = p->kind;
    memcpy(id + 9, &kl, 4);
    if (p->klen > 0) memcpy(id + ID_HDR, p->key, p->klen);
    if (p->flen > 0) memcpy(id + ID_HDR + p->klen, p->field, p->flen);
}

/* ------------------------------------------------------------------------ */
/* entries, groups, LRU, accounting */

static size_t entry_bytes(const struct entry *e) {
    return ENTRY_BASE + e->hh.keylen + e->vlen;
}

static size_t table_bytes(const UT_hash_handle *hh) {
    return sizeof(UT_hash_table) + (size_t)hh->tbl->num_buckets * sizeof(UT_hash_bucket);
}

/* Brings stats.used_bytes up to date and returns it. */
static size_t account(cache *c) {
    size_t n = c->alloc_bytes;
    if (c->index != NULL) n += table_bytes(&c->index->hh);
    if (c->groups != NULL) n += table_bytes(&c->groups->hh);
    c->stats.used_bytes = n;
    return n;
}

static struct entry *entry_find(const cache *c, const struct probe *p) {
    struct entry *e;
    HASH_FIND_BYHASHVALUE(hh, c->index, p, p->len, p->hv, e);
    return e;
}

#define LIFE_FOREVER UINT32_MAX

static int entry_expired(const cache *c, const struct entry *e, int64_t now_ms) {
    int64_t age = now_ms - e->u.filled_ms;
    return (c->cfg.ttl_ms > 0 && age > c->cfg.ttl_ms) || (e->life_ms != LIFE_FOREVER && age >= e->life_ms);
}

/* Makes e the most recently used: moves it to the tail of the app order. */
static void lru_touch(cache *c, struct entry *e) {
    UT_hash_table *t = e->hh.tbl;
    if (t->tail == &e->hh) return;
    struct entry *prev = e->hh.prev, *next = e->hh.next; /* next != NULL: e is not the tail */
    struct entry *last = ELMT_FROM_HH(t, t->tail);
    if (prev != NULL)
        prev->hh.next = next;
    else
        c->index = next;
    next->hh.prev = prev;
    last->hh.next = e;
    e->hh.prev = last;
    e->hh.next = NULL;
    t->tail = &e->hh;
}

/* Appends e to g's list. */
static void group_link(struct group *g, struct entry *e) {
    e->grp.prev = g->members.prev;
    e->grp.next = &g->members;
    g->members.prev->next = &e->grp;
    g->members.prev = &e->grp;
    e->owner = g;
    g->n++;
    if (e->state == ST_PENDING) g->npending++;
}

/* Frees an empty group. */
static void group_free(cache *c, struct group *g) {
    if (group_dying(g)) {
        /* the list is short: large groups purged in the last milliseconds */
        if (c->dying == g) {
            c->dying = next_dying(g);
        } else {
            struct group *p = c->dying;
            while (next_dying(p) != g) p = next_dying(p);
            p->hh.next = g->hh.next;
        }
    } else {
        HASH_DELETE(hh, c->groups, g);
    }
    c->alloc_bytes -= GROUP_BASE + g->hh.keylen;
    CACHE_FREE(g);
}

/* Takes e out of its group's list; frees the group if that empties it. */
static void group_unlink(cache *c, struct entry *e) {
    struct group *g = e->owner;
    e->grp.prev->next = e->grp.next;
    e->grp.next->prev = e->grp.prev;
    if (e->state == ST_PENDING) g->npending--;
    if (--g->n == 0) group_free(c, g);
}

/* Counts e out and frees it; e is already out of the index and its group.
 * dying: its group was dying (counted out of entries and pending then). */
static void entry_release(cache *c, struct entry *e, int dying) {
    if (dying)
        c->stats.reclaiming--;
    else if (e->state == ST_PENDING)
        c->stats.pending--;
    else
        c->stats.entries--;
    c->alloc_bytes -= entry_bytes(e);
    CACHE_FREE(e);
}

static struct entry *entry_of_link(struct link *l) {
    return (struct entry *)(void *)((char *)l - offsetof(struct entry, grp));
}

static void entry_del(cache *c, struct entry *e) {
    int dying = group_dying(e->owner);
    HASH_DELETE(hh, c->index, e);
    group_unlink(c, e);
    entry_release(c, e, dying);
}

/* The fewest bytes an entry can cost: itself, its group, and both tables
 * at their smallest. An entry above this can never fit in max_bytes. */
static size_t min_alone(const struct probe *p, size_t vlen) {
    return ENTRY_BASE + p->len + vlen + GROUP_BASE + p->klen +
           2 * (sizeof(UT_hash_table) + HASH_INITIAL_NUM_BUCKETS * sizeof(UT_hash_bucket));
}

/* Frees an entry a lazy flush or purge left: a flushed one first (with its
 * group, when it was the last), else one of a dying group. 0: none left. */
static int reclaim_one(cache *c) {
    if (c->cleared != NULL) {
        struct entry *e = c->cleared;
        struct group *g = e->owner;
        c->cleared = e->hh.next;
        /* (not group_unlink: the group is in no table or list now) */
        e->grp.prev->next = e->grp.next;
        e->grp.next->prev = e->grp.prev;
        if (--g->n == 0) {
            c->alloc_bytes -= GROUP_BASE + g->hh.keylen;
            CACHE_FREE(g);
        }
        entry_release(c, e, 1);
    } else if (c->dying != NULL) {
        entry_del(c, entry_of_link(c->dying->members.next));
    } else {
        return 0;
    }
    return 1;
}

/* Evicts least recently used entries until used_bytes <= max_bytes. keep
 * (the entry just placed or filled, the most recent) goes only if it alone
 * does not fit; returns 0 then, else 1. */
static int evict_to_fit(cache *c, const struct entry *keep) {
    int kept = 1;
    while (account(c) > c->cfg.max_bytes) {
        /* what purges and flushes let go is garbage: it goes before any entry */
        if (reclaim_one(c)) continue;
        struct entry *v = c->index;
        assert(v != NULL); /* an empty cache counts 0 bytes */
        if (v == keep)
            kept = 0;
        else
            c->stats.evictions++;
        entry_del(c, v);
    }
    return kept;
}

/* Empties the cache in O(1): both tables go, and the entries they held
 * (the dying groups' too) are left on c->cleared (see the top of this
 * file), each still in its group's list. */
static void clear_lazily(cache *c) {
    if (c->index != NULL) {
        struct entry *last = ELMT_FROM_HH(c->index->hh.tbl, c->index->hh.tbl->tail);
        struct entry *list = c->index;
        /* HASH_CLEAR frees the table and its buckets only: the app-order
         * links stay readable */
        HASH_CLEAR(hh, c->index);
        last->hh.next = c->cleared;
        c->cleared = list;
    }
    HASH_CLEAR(hh, c->groups);
    c->dying = NULL;
    /* (the dying groups' entries were counted as reclaiming already) */
    c->stats.reclaiming += c->stats.entries + c->stats.pending;
    c->stats.entries = 0;
    c->stats.pending = 0;
    account(c);
}

/* ------------------------------------------------------------------------ */
/* public API */

cache *cache_new(const cache_config *cfg) {
    cache *c = CACHE_MALLOC(sizeof *c);
    if (c == NULL) return NULL;
    memset(c, 0, sizeof *c);
    c->cfg = *cfg;
    /* HGET fields are file names that users choose: a seed that ASLR
     * varies (mixed with fmix64) keeps bucket choice from being computed
     * offline. It is no keyed PRF: MurmurHash2-family functions have known
     * seed-independent multicollisions; SipHash would close that, at about
     * 15 ns more per lookup. */
    uint64_t s = (uint64_t)(uintptr_t)c ^ 0x9e3779b97f4a7c15ULL;
    s ^= s >> 33;
    s *= 0xff51afd7ed558ccdULL;
    s ^= s >> 33;
    s *= 0xc4ceb9fe1a85ec53ULL;
    s ^= s >> 33;
    c->seed = s;
    return c;
}

void cache_set_config(cache *c, const cache_config *cfg) {
    c->cfg = *cfg;
    evict_to_fit(c, NULL);
}

const cache_stats *cache_get_stats(const cache *c) {
    return &c->stats;
}

/* The entry of that identity if it has a value (nil included): not a
 * placeholder. Whether it is still valid (dying group, ttl) is the
 * caller's to judge. */
static struct entry *valued_entry(const cache *c, uint32_t part, int db, int kind, const char *key, size_t klen,
                                  const char *field, size_t flen) {
    struct probe p;
    if (c->index == NULL || probe_entry(c, &p, part, db, kind, key, klen, field, flen) != 0) return NULL;
    struct entry *e = entry_find(c, &p);
    return e != NULL && e->state != ST_PENDING ? e : NULL;
}

static void entry_value(const struct entry *e, const char **val, size_t *vlen, int *is_nil) {
    *is_nil = e->state == ST_NIL;
    *val = *is_nil ? NULL : (const char *)e->id + e->hh.keylen;
    *vlen = *is_nil ? 0 : e->vlen;
}

int cache_get(cache *c, uint32_t part, int db, int kind, const char *key, size_t klen,
              const char *field, size_t flen, int64_t now_ms, const char **val, size_t *vlen,
              int *is_nil) {
    struct entry *e = valued_entry(c, part, db, kind, key, klen, field, flen);
    if (e == NULL) goto miss;
    if (group_dying(e->owner)) {
        entry_del(c, e);
        account(c);
        goto miss;
    }
    if (entry_expired(c, e, now_ms)) {
        entry_del(c, e);
        c->stats.expired++;
        account(c);
        goto miss;
    }
    lru_touch(c, e);
    if (!c->uncounted) c->stats.hits++;
    entry_value(e, val, vlen, is_nil);
    return 1;
miss:
    if (!c->uncounted) c->stats.misses++;
    return 0;
}

void cache_count_reads(cache *c, int on) {
    c->uncounted = !on;
}

int cache_peek_filled_before(const cache *c, uint32_t part, int db, int kind, const char *key, size_t klen,
                             const char *field, size_t flen, int64_t before_ms, int64_t now_ms, const char **val,
                             size_t *vlen, int *is_nil) {
    const struct entry *e = valued_entry(c, part, db, kind, key, klen, field, flen);
    if (e == NULL || group_dying(e->owner) || entry_expired(c, e, now_ms) || e->u.filled_ms >= before_ms) return 0;
    entry_value(e, val, vlen, is_nil);
    return 1;
}

int cache_peek(const cache *c, uint32_t part, int db, int kind, const char *key, size_t klen,
               const char *field, size_t flen, int64_t now_ms, const char **val, size_t *vlen,
               int *is_nil) {
    return cache_peek_filled_before(c, part, db, kind, key, klen, field, flen, INT64_MAX, now_ms, val, vlen,
                                    is_nil);
}

/*
 * Places a placeholder, or shares the one in place. An entry that is valid
 * (not expired) means no fill is needed: returns 0 and leaves it. An
 * expired one is dropped (stats.expired) and replaced by a placeholder.
 */
uint64_t cache_fill_begin(cache *c, uint32_t part, int db, int kind, const char *key, size_t klen,
                          const char *field, size_t flen, int64_t now_ms) {
    struct probe p, gp;
    struct entry *e;
    struct group *g;
    int new_group = 0;

    if (probe_entry(c, &p, part, db, kind, key, klen, field, flen) != 0) return 0;
    if (min_alone(&p, 0) > c->cfg.max_bytes) return 0; /* also max_bytes == 0 */

    e = entry_find(c, &p);
    if (e != NULL && group_dying(e->owner)) {
        /* purged: gone for every lookup, so freed now */
        entry_del(c, e);
        account(c);
        e = NULL;
    }
    if (e != NULL) {
        if (e->state == ST_PENDING) {
            lru_touch(c, e);
            return e->u.token;
        }
        if (!entry_expired(c, e, now_ms)) return 0;
        entry_del(c, e);
        c->stats.expired++;
        account(c);
    }

    probe_group(c, &gp, p.key, klen);
    HASH_FIND_BYHASHVALUE(hh, c->groups, &gp, gp.len, gp.hv, g);
    if (g == NULL) {
        g = CACHE_MALLOC(GROUP_BASE + klen);
        if (g == NULL) return 0;
        g->members.prev = g->members.next = &g->members;
        g->n = g->npending = 0;
        if (klen > 0) memcpy(g->key, key, klen);
        HASH_ADD_KEYPTR_BYHASHVALUE(hh, c->groups, g->key, klen, gp.hv, g);
        if (g->hh.tbl == NULL) {
            CACHE_FREE(g);
            return 0;
        }
        c->alloc_bytes += GROUP_BASE + klen;
        new_group = 1;
    }

    e = CACHE_MALLOC(ENTRY_BASE + p.len);
    if (e == NULL) goto drop_group;
    probe_store(&p, e->id);
    e->vlen = 0;
    e->life_ms = LIFE_FOREVER;
    e->state = ST_PENDING;
    e->u.token = c->last_token + 1;
    HASH_ADD_KEYPTR_BYHASHVALUE(hh, c->index, e->id, p.len, p.hv, e);
    if (e->hh.tbl == NULL) {
        CACHE_FREE(e);
        goto drop_group;
    }
    c->last_token++;
    group_link(g, e);
    c->stats.pending++;
    c->stats.placeholders_made++;
    c->alloc_bytes += entry_bytes(e);
    return evict_to_fit(c, e) ? c->last_token : 0;

drop_group:
    if (new_group) {
        HASH_DELETE(hh, c->groups, g);
        c->alloc_bytes -= GROUP_BASE + klen;
        CACHE_FREE(g);
        evict_to_fit(c, NULL); /* adding g may have grown the groups' buckets */
    }
    return 0;
}

/*
 * Token 0 (no fill was begun) is ignored: returns 0, counts nothing. A fill
 * that fails for memory (no room for the value, or a table that cannot grow)
 * drops the placeholder and counts in fills_rejected. A value that does not
 * fit max_bytes even alone is dropped and counts in fills_too_big.
 */
int cache_fill_complete_until(cache *c, uint64_t token, uint32_t part, int db, int kind, const char *key,
                              size_t klen, const char *field, size_t flen, const char *val, size_t vlen,
                              int is_nil, int64_t now_ms, int64_t until_ms) {
    struct probe p;
    struct entry *e, *n;

    if (token == 0) return 0;
    e = NULL;
    if (probe_entry(c, &p, part, db, kind, key, klen, field, flen) == 0) e = entry_find(c, &p);
    if (e == NULL || e->state != ST_PENDING || e->u.token != token || group_dying(e->owner)) {
        c->stats.fills_rejected++;
        return 0;
    }
    if (is_nil) vlen = 0;
    /* a missing key has no TTL: its nil holds until a write creates it */
    uint32_t life = LIFE_FOREVER;
    if (until_ms != 0 && !is_nil) {
        if (until_ms <= now_ms) {
            /* the key has expired (or will before anyone could be served) */
            entry_del(c, e);
            c->stats.expired++;
            account(c);
            return 0;
        }
        /* a longer life than 49 days is cut short: it only means one more
         * read from Redis */
        life = until_ms - now_ms >= LIFE_FOREVER ? LIFE_FOREVER - 1 : (uint32_t)(until_ms - now_ms);
    }
    if (vlen > c->cfg.max_value || vlen > UINT32_MAX || min_alone(&p, vlen) > c->cfg.max_bytes) {
        entry_del(c, e);
        c->stats.fills_too_big++;
        account(c);
        return 0;
    }

    if (vlen == 0) {
        /* nil or empty: the placeholder becomes the entry */
        e->owner->npending--;
        e->state = is_nil ? ST_NIL : ST_VALUE;
        e->u.filled_ms = now_ms;
        e->life_ms = life;
        c->stats.pending--;
        c->stats.entries++;
        lru_touch(c, e);
        n = e;
    } else {
        n = CACHE_MALLOC(ENTRY_BASE + p.len + vlen);
        if (n == NULL) {
            entry_del(c, e);
            c->stats.fills_rejected++;
            account(c);
            return 0;
        }
        memcpy(n->id, e->id, p.len);
        memcpy(n->id + p.len, val, vlen);
        n->vlen = (uint32_t)vlen;
        n->state = ST_VALUE;
        n->u.filled_ms = now_ms;
        n->life_ms = life;
        /* n takes e's place, most recently used: added first (the add
         * fails only if the table must grow and cannot; no lookup sees the
         * two alike meanwhile), then e goes */
        HASH_ADD_KEYPTR_BYHASHVALUE(hh, c->index, n->id, p.len, p.hv, n);
        if (n->hh.tbl == NULL) {
            CACHE_FREE(n);
            entry_del(c, e);
            c->stats.fills_rejected++;
            account(c);
            return 0;
        }
        HASH_DELETE(hh, c->index, e);
        n->grp = e->grp;
        n->grp.prev->next = &n->grp;
        n->grp.next->prev = &n->grp;
        n->owner = e->owner;
        n->owner->npending--;
        c->stats.entries++;
        c->alloc_bytes += entry_bytes(n);
        entry_release(c, e, 0); /* pending-- */
    }

    if (!evict_to_fit(c, n)) {
        c->stats.fills_too_big++;
        return 0;
    }
    c->stats.fills++;
    return 1;
}

int cache_fill_complete(cache *c, uint64_t token, uint32_t part, int db, int kind, const char *key,
                        size_t klen, const char *field, size_t flen, const char *val, size_t vlen,
                        int is_nil, int64_t now_ms) {
    return cache_fill_complete_until(c, token, part, db, kind, key, klen, field, flen, val, vlen, is_nil, now_ms,
                                     0);
}

void cache_fill_abort(cache *c, uint64_t token, uint32_t part, int db, int kind, const char *key,
                      size_t klen, const char *field, size_t flen) {
    struct probe p;
    struct entry *e;
    if (token == 0 || probe_entry(c, &p, part, db, kind, key, klen, field, flen) != 0) return;
    e = entry_find(c, &p);
    if (e != NULL && e->state == ST_PENDING && e->u.token == token) {
        entry_del(c, e);
        account(c);
    }
}

/* What deleting e from the index will touch: its bucket, its neighbours
 * in the bucket's chain and in the LRU order. The bucket is loaded, not
 * prefetched: on the (KVM) machines sidecache is measured on, a prefetch
 * of a line in the large bucket array did not spare the delete its miss,
 * and a load does, as the loads of a chunk's entries overlap one another
 * (bench/micro.sh: 245 -> 160 ns per key in 250-key purges; the
 * proxy's purge of a batch unlink's transaction took 130, now 85 us).
 * The neighbours are mostly near in memory; loading them too was slower. */
static void prefetch_entry_links(const cache *c, const struct entry *e) {
    const UT_hash_table *t = c->index->hh.tbl;
    (void)*(const volatile unsigned *)&t->buckets[e->hh.hashv & (t->num_buckets - 1u)].count;
    if (e->hh.prev != NULL) __builtin_prefetch(e->hh.prev);
    if (e->hh.next != NULL) __builtin_prefetch(e->hh.next);
    if (e->hh.hh_prev != NULL) __builtin_prefetch(e->hh.hh_prev);
    if (e->hh.hh_next != NULL) __builtin_prefetch(e->hh.hh_next);
}

/* cache_invalidate_key with the group's probe made. */
static size_t invalidate_probe(cache *c, const struct probe *gp) {
    struct group *g;
    size_t n = 0;
    c->stats.invalidations++;
    if (c->groups == NULL || gp->klen > KEY_MAX) return 0;
    HASH_FIND_BYHASHVALUE(hh, c->groups, gp, gp->len, gp->hv, g);
    if (g == NULL) return 0;
    c->stats.keys_purged += g->n;
    if (g->n > PURGE_NOW_MAX) {
        /* no lookup finds them from now on (c->dying) */
        HASH_DELETE(hh, c->groups, g);
        g->hh.tbl = NULL;
        g->hh.next = c->dying;
        c->dying = g;
        c->stats.reclaiming += g->n;
        c->stats.entries -= g->n - g->npending;
        c->stats.pending -= g->npending;
        account(c);
        return g->n;
    }
    /* the whole circle goes, so no group_unlink per entry */
    struct link *l = g->members.next;
    while (l != &g->members) {
        struct entry *e = entry_of_link(l);
        l = l->next;
        HASH_DELETE(hh, c->index, e);
        entry_release(c, e, 0);
        n++;
    }
    HASH_DELETE(hh, c->groups, g);
    c->alloc_bytes -= GROUP_BASE + g->hh.keylen;
    CACHE_FREE(g);
    account(c);
    return n;
}

size_t cache_invalidate_key(cache *c, const char *key, size_t klen) {
    struct probe gp;
    probe_group(c, &gp, (const unsigned char *)key, klen);
    return invalidate_probe(c, &gp);
}

/* The bucket of the groups table where hv would be. */
static UT_hash_bucket *group_bucket(const cache *c, unsigned hv) {
    UT_hash_table *t = c->groups->hh.tbl;
    return &t->buckets[hv & (t->num_buckets - 1u)];
}

size_t cache_invalidate_keys(cache *c, const cache_keyref *keys, size_t n) {
    /* A large table is out of the CPU caches: each lookup waits for its
     * bucket, then for the groups of the chain, and each purge for the
     * entry, its bucket and its neighbours. Asking for all of a chunk's
     * memory stage by stage lets the waits overlap. Only hints: the purges
     * themselves look everything up again. */
    enum { CHUNK = 32 };
    struct probe gp[CHUNK];
    const struct entry *first[CHUNK];
    size_t purged = 0;
    for (size_t base = 0; base < n; base += CHUNK) {
        size_t m = n - base < CHUNK ? n - base : CHUNK;
        for (size_t i = 0; i < m; i++) {
            probe_group(c, &gp[i], (const unsigned char *)keys[base + i].key, keys[base + i].klen);
            if (c->groups != NULL) __builtin_prefetch(group_bucket(c, gp[i].hv));
        }
        for (size_t i = 0; i < m && c->groups != NULL; i++) {
            UT_hash_handle *h = group_bucket(c, gp[i].hv)->hh_head;
            if (h != NULL) __builtin_prefetch(h);
        }
        for (size_t i = 0; i < m; i++) {
            struct group *g = NULL;
            first[i] = NULL;
            if (c->groups != NULL && gp[i].klen <= KEY_MAX)
                HASH_FIND_BYHASHVALUE(hh, c->groups, &gp[i], gp[i].len, gp[i].hv, g);
            if (g != NULL && g->members.next != &g->members) {
                first[i] = entry_of_link(g->members.next);
                __builtin_prefetch(first[i]);
            }
        }
        for (size_t i = 0; i < m; i++)
            if (first[i] != NULL) prefetch_entry_links(c, first[i]);
        for (size_t i = 0; i < m; i++) purged += invalidate_probe(c, &gp[i]);
    }
    return purged;
}

size_t cache_reclaim(cache *c, size_t budget) {
    for (; budget > 0 && reclaim_one(c); budget--) {
    }
    account(c);
    return c->stats.reclaiming;
}

void cache_flush(cache *c) {
    c->stats.flushes++;
    size_t n = c->stats.entries + c->stats.pending + c->stats.reclaiming;
    clear_lazily(c);
    /* a small cache is freed at once, as a small group's purge is */
    if (n <= PURGE_NOW_MAX) cache_reclaim(c, SIZE_MAX);
}

void cache_free(cache *c) {
    if (c == NULL) return;
    clear_lazily(c);
    cache_reclaim(c, SIZE_MAX);
    CACHE_FREE(c);
}

/* ------------------------------------------------------------------------ */
/* consistency check, compiled into the unit tests only */

#ifdef CACHE_TESTING
/* The probe that finds a stored identity. */
static void probe_of_id(const cache *c, struct probe *p, const unsigned char *id, size_t len) {
    uint32_t kl;
    memcpy(&p->w0, id, 8);
    p->kind = id[8];
    memcpy(&kl, id + 9, 4);
    p->klen = kl;
    p->key = id + ID_HDR;
    p->field = id + ID_HDR + kl;
    p->flen = len - ID_HDR - kl;
    p->len = len;
    p->entry = 1;
    p->hv = probe_hash(c->seed, p);
}

/* Returns 0 if every invariant in the header comment holds, else a
 * negative number naming the first one broken. O(entries + group sizes). */
static int cache_check(const cache *c) {
    size_t alloc = 0, nvalid = 0, npending = 0, nitems = 0, ingroups = 0;
    const struct entry *e, *prev = NULL;
    const struct group *g;
    for (e = c->index; e != NULL; prev = e, e = e->hh.next) {
        struct probe p, gp;
        struct entry *f;
        nitems++;
        if (e->hh.prev != prev) return -1;
        if (e->hh.key != e->id || e->hh.keylen < ID_HDR) return -2;
        uint32_t kl;
        memcpy(&kl, e->id + 9, 4);
        if (ID_HDR + (size_t)kl > e->hh.keylen) return -3;
        probe_of_id(c, &p, e->id, e->hh.keylen);
        if (e->hh.hashv != p.hv) return -4;
        HASH_FIND_BYHASHVALUE(hh, c->index, &p, p.len, p.hv, f);
        if (f != e) return -5;
        int live = e->owner != NULL && !group_dying(e->owner);
        if (e->state == ST_PENDING) {
            npending += live;
            if (e->u.token == 0 || e->u.token > c->last_token || e->vlen != 0) return -6;
        } else if (e->state == ST_VALUE || e->state == ST_NIL) {
            nvalid += live;
            if (e->state == ST_NIL && e->vlen != 0) return -7;
        } else {
            return -8;
        }
        /* in its owner's list: the group of its key, live (in c->groups)
         * or dying (on c->dying) */
        g = e->owner;
        if (g == NULL || g->hh.keylen != p.klen || (p.klen > 0 && memcmp(g->key, p.key, p.klen) != 0)) return -9;
        if (!group_dying(g)) {
            const struct group *h;
            probe_group(c, &gp, p.key, p.klen);
            HASH_FIND_BYHASHVALUE(hh, c->groups, &gp, gp.len, gp.hv, h);
            if (h != g) return -9;
        }
        const struct link *l;
        int found = 0;
        for (l = g->members.next; l != &g->members; l = l->next) {
            if (l->next->prev != l) return -10;
            if (l == &e->grp) found = 1;
        }
        if (!found) return -11;
        alloc += entry_bytes(e);
    }
    if (c->index != NULL) {
        if (c->index->hh.tbl->num_items != nitems) return -12;
        if (ELMT_FROM_HH(c->index->hh.tbl, c->index->hh.tbl->tail) != prev) return -13;
    }
    size_t ndying = 0;
    for (int dying = 0; dying < 2; dying++) {
        for (g = dying ? c->dying : c->groups; g != NULL; g = g->hh.next) {
            const struct link *l;
            size_t members = 0, pend = 0;
            if (group_dying(g) != dying) return -21;
            if (g->members.next == &g->members) return -14; /* empty group */
            for (l = g->members.next; l != &g->members; l = l->next) {
                const struct entry *m = (const struct entry *)(const void *)((const char *)l - offsetof(struct entry, grp));
                uint32_t kl;
                memcpy(&kl, m->id + 9, 4);
                if (kl != g->hh.keylen || memcmp(m->id + ID_HDR, g->key, kl) != 0) return -15;
                if (m->owner != g) return -22;
                members++;
                pend += m->state == ST_PENDING;
            }
            if (members != g->n || pend != g->npending) return -23;
            ingroups += members;
            if (dying) ndying += members;
            alloc += GROUP_BASE + g->hh.keylen;
        }
    }
    /* flushed: counted, and each group counted at its first member, its
     * members and nothing else counting down its n */
    size_t ncleared = 0, ingroups_cleared = 0;
    for (e = c->cleared; e != NULL; e = e->hh.next) {
        ncleared++;
        alloc += entry_bytes(e);
        g = e->owner;
        if (g == NULL || e->grp.next->prev != &e->grp || e->grp.prev->next != &e->grp) return -25;
        if (g->members.next == &e->grp) {
            alloc += GROUP_BASE + g->hh.keylen;
            ingroups_cleared += g->n;
        }
    }
    if (ingroups_cleared != ncleared) return -26;
    if (ndying + ncleared != c->stats.reclaiming) return -24;
    if (ingroups != nitems) return -16;
    if (nvalid != c->stats.entries || npending != c->stats.pending) return -17;
    if (alloc != c->alloc_bytes) return -18;
    size_t used = alloc;
    if (c->index != NULL) used += table_bytes(&c->index->hh);
    if (c->groups != NULL) used += table_bytes(&c->groups->hh);
    if (used != c->stats.used_bytes) return -19;
    if (used > c->cfg.max_bytes) return -20;
    return 0;
}
#endif
