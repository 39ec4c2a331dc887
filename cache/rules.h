/*
 * cache/rules.h — which reads are cacheable: a table of (command, key
 * pattern) rules from the configuration, and the tracking prefixes they
 * imply.
 *
 *   cache-rule GET i[1-9]*      GET of inode keys
 *   cache-rule HGET d[1-9]*     HGET of dentry hashes
 *
 * Patterns are globs as Redis's KEYS/SCAN MATCH read them (*, ?, [a-z],
 * [^x], \ escapes). A key prefix (JuiceFS on Redis Cluster: "{1}") is put in
 * front of every pattern.
 *
 * Tracking prefixes: Redis tracks in BCAST mode by key prefix, so each
 * pattern gives the literal text before its first wildcard, with a leading
 * character class expanded ("i[1-9]*" gives i1 ... i9: a bare "i" would
 * also cover keys that change all the time and are never cached). Prefixes
 * that another prefix covers are dropped (Redis refuses overlapping ones);
 * an empty prefix means every key.
 *
 * Fewer prefixes cost Redis less: for every key any command writes, Redis
 * walks the whole prefix table (trackingRememberKeyToBroadcast), whatever
 * the key. So a rule set may name a coarser prefix to track by
 * (cache_rules_track_by, cache-track-prefix), trading that walk for
 * invalidations of keys that are never cached. The JuiceFS profile tracks
 * by "i" and "d", as JuiceFS's own client-side cache does: "d" also covers
 * delfiles and the dir* statistics, which then cost Redis an invalidation
 * message each when written alone (a ZREM delfiles per file deleted in the
 * background, a dir-stat flush a second per mount), while i1 ... i9 and
 * d1 ... d9 would cost every write of every key: 1.35x Redis's
 * instructions per batch-unlink transaction against 1.15x with the two
 * (bench/tracking_cost.sh).
 *
 * Pure: no I/O, no globals.
 */
#ifndef SIDECACHE_CACHE_RULES_H
#define SIDECACHE_CACHE_RULES_H

#include <stddef.h>
#include <stdint.h>

#define CACHE_MAX_RULES 64
#define CACHE_MAX_PREFIXES 256

/* A rule's flags (cache_rules_add). */
enum cache_rule_flag {
    /* The rule's keys never have a TTL in Redis, so a fill need not ask
     * (PTTL). Without it a fill learns the key's TTL, and the entry ends
     * when the key expires: Redis sends the invalidation of an expired key
     * only when it deletes the key, which may be long after. */
    CACHE_RULE_NO_TTL = 1u << 0,
};

/* What cache_rules_match answers for a cacheable read (0: not cacheable). */
enum cache_match {
    CACHE_MATCH = 1,         /* the key may have a TTL: a fill asks for it */
    CACHE_MATCH_NO_TTL = 2,  /* every rule that matches says CACHE_RULE_NO_TTL */
};

typedef struct cache_rule {
    int kind;         /* enum cache_kind */
    unsigned flags;   /* enum cache_rule_flag */
    char pattern[256];
    size_t plen;      /* strlen(pattern): matched on every request */
    /* The usual shape, matched without the glob: literal text (no wildcard,
     * class or escape), then at most one class, then '*' or nothing
     * ("i[1-9]*", "{1}d[1-9]*"). lit_len bytes of literal text; the class
     * as the bytes it takes (bit b of cls[b / 64]). */
    int simple;
    int has_class, tail_star;
    size_t lit_len;
    uint64_t cls[4];
} cache_rule;

typedef struct cache_rules {
    cache_rule rules[CACHE_MAX_RULES];
    int nrules;
    char *prefixes[CACHE_MAX_PREFIXES]; /* derived, owned */
    int nprefixes;
    char *track_by[CACHE_MAX_RULES];    /* cache_rules_track_by, owned */
    int ntrack_by;
    int all_keys;                       /* a rule covers every key: track without prefixes */
    /* the bytes a key matched by some rule may begin with (bit b of
     * first[b / 64]): a write's keys are checked on every command, and most
     * are turned down by their first byte (cache_rules_match_any) */
    uint64_t first[4];
} cache_rules;

void cache_rules_init(cache_rules *r);
void cache_rules_deinit(cache_rules *r);

/* Adds "COMMAND PATTERN" (command GET or HGET, any case) with key_prefix put
 * in front of the pattern, and flags (enum cache_rule_flag). Returns 0, or
 * -1 with a reason in err. */
int cache_rules_add(cache_rules *r, const char *command, const char *pattern, const char *key_prefix,
                    unsigned flags, char *err, size_t errlen);

/* Tracks by key_prefix + prefix (not empty) instead of every derived prefix
 * that begins with it (one that covers none is left out). Returns 0, or -1
 * with a reason in err. */
int cache_rules_track_by(cache_rules *r, const char *prefix, const char *key_prefix, char *err, size_t errlen);

/* Derives the tracking prefixes (see above). Returns 0, or -1 on OOM or too
 * many prefixes (err says which). */
int cache_rules_derive_prefixes(cache_rules *r, char *err, size_t errlen);

/* Is a read of this kind of this key cacheable? 0, or enum cache_match. */
int cache_rules_match(const cache_rules *r, int kind, const char *key, size_t klen);
/* Is a read of some kind of this key cacheable (may the cache hold it)? */
int cache_rules_match_any(const cache_rules *r, const char *key, size_t klen);

/* Glob match as Redis's stringmatchlen (case-sensitive). */
int cache_glob_match(const char *pat, size_t plen, const char *s, size_t slen);

#endif
