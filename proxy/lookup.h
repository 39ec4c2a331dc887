/*
 * proxy/lookup.h — JuiceFS's lookup script, answered from the cache.
 *
 * JuiceFS resolves a name with one EVALSHA <sha> 2 d<parent> <name>: the
 * script reads HGET d<parent> name (1 type byte, then the inode as 8
 * big-endian bytes), then GET i<inode>, and returns {inode, attr}. A missing
 * name is an error containing "ENOENT" (1.x) or nil (0.x). When the dentry
 * and the inode are both in the cache, the reply is built here:
 *
 *   *2\r\n:<inode>\r\n$<n>\r\n<attr>\r\n
 *
 * which is what Redis sends for that result in RESP2 and RESP3 alike. The
 * missing-name reply is not built: it is the bytes Redis itself sent the
 * last time a forwarded lookup found the name missing (the error text names
 * the script and its line), kept per script and protocol.
 *
 * Only what is certain is answered here; everything else goes to Redis:
 *   - a script not known to be loaded on Redis (Redis would say NOSCRIPT):
 *     a script is known loaded after SCRIPT LOAD of a body with its SHA1
 *     (computed here with OpenSSL) or a lookup that Redis answered, and
 *     forgotten on NOSCRIPT, SCRIPT FLUSH and every cache flush;
 *   - a dentry value that is not 9 bytes, an inode >= 10^14 (above 2^52 the
 *     1.x script answers ENOTSUP; from 10^14 the 0.x script formats the
 *     key in exponent notation), an inode whose attr is nil or not cached.
 *
 * The dentry of a forwarded lookup is cached as a CACHE_KIND_LOOKUP entry
 * (name -> inode, or nil) in the group of d<parent>, so a write to the
 * directory purges it with the HGET entries (proxy/caching.c fills it).
 * Only such an entry answers a lookup: Redis checks a lookup's ACL on the
 * name too (a declared key) and on the script's GET of the inode. The
 * attr it returned fills the GET entry of i<inode> only in bcast tracking
 * (prefix i1..i9), when nothing was invalidated while it was in flight:
 * Redis does not track a script's reads of undeclared keys for its caller.
 */
#ifndef SIDECACHE_PROXY_LOOKUP_H
#define SIDECACHE_PROXY_LOOKUP_H

#include <stddef.h>
#include <stdint.h>

#include "cache/cache.h"
#include "protocol/resp.h"

#define PX_LOOKUP_MAX_SCRIPTS 16
/* Inodes from here on are never answered from the cache (see above). */
#define PX_LOOKUP_MAX_INODE 100000000000000ULL

/* The cache kind of a dentry learned from a lookup: value = 8-byte inode. */
#define CACHE_KIND_LOOKUP 3

typedef struct px_lookup px_lookup;

/* An empty set of lookup scripts. NULL on OOM. */
px_lookup *px_lookup_new(void);
void px_lookup_free(px_lookup *l);

/* Adds a script by SHA1 (40 hex digits, any case). 0, or -1 (not a SHA1,
 * or the table is full). Adding one twice is fine. */
int px_lookup_add(px_lookup *l, const char *sha1_hex);

/* The script of a request of the lookup shape, EVALSHA <sha> 2 <key>
 * <name> (nothing more), or -1. */
int px_lookup_match(const px_lookup *l, int argc, const resp_arg *argv);

/* The script whose SHA1 a SCRIPT LOAD body has, or -1. */
int px_lookup_match_body(const px_lookup *l, const char *body, size_t len);

/* Whether Redis is known to hold script idx (see above). */
int px_lookup_loaded(const px_lookup *l, int idx);
void px_lookup_set_loaded(px_lookup *l, int idx, int loaded);
/* Forgets which scripts are loaded and every learned reply. */
void px_lookup_forget(px_lookup *l);
/* Moves on at every px_lookup_forget. A reply that says a script is loaded
 * (a lookup answered, a SCRIPT LOAD) teaches it only if no forget came
 * between its request's send and its reply: Redis may have run a SCRIPT
 * FLUSH after it (another connection, an EXEC). */
uint64_t px_lookup_generation(const px_lookup *l);

/*
 * Answers a lookup from the cache: the dentry from its LOOKUP entry (never
 * an HGET entry: see lookup.c), the attr from the GET entry of i<inode>.
 * Returns 1 with the reply in out (appended), 0 when it must go to Redis.
 */
int px_lookup_answer(px_lookup *l, int idx, cache *c, uint32_t part, int db, int proto,
                     const char *dkey, size_t dklen, const char *name, size_t nlen, int64_t now_ms,
                     resp_buf *out);

/* What a lookup's reply says. */
enum px_lookup_result {
    PX_LOOKUP_OTHER = 0,  /* anything else: nothing learned */
    PX_LOOKUP_FOUND,      /* [inode, attr] */
    PX_LOOKUP_MISSING,    /* the name is not there */
    PX_LOOKUP_NOSCRIPT,   /* Redis does not hold the script */
};

/* Reads a lookup's reply frame; for FOUND sets *ino and the attr. */
int px_lookup_parse_reply(const char *data, size_t len, uint64_t *ino, const char **attr, size_t *alen);

/* Keeps a MISSING reply's bytes for script idx and protocol proto. */
void px_lookup_learn_missing(px_lookup *l, int idx, int proto, const char *data, size_t len);

/* The inode key "i<ino>" in buf (at least 24 bytes); returns its length. */
size_t px_lookup_inode_key(uint64_t ino, char *buf);

#endif
