/*
 * protocol/cmdtable.h — which keys a command writes, learned from Redis.
 *
 * The cache must invalidate, before a write's reply is relayed, every key
 * the write may change (C1). Redis describes its commands in the reply to
 * COMMAND: name, arity, flags (write, readonly, movablekeys, ...) and the
 * first key, last key and step. This table is filled from that reply (the
 * invalidation connection asks at start), and answers for one request:
 *   - it writes nothing (a read, or a command Redis does not know: Redis
 *     refuses those, so they change nothing);
 *   - it writes exactly these keys;
 *   - it writes keys that cannot be known (FLUSHALL, SWAPDB, a script whose
 *     keys are not all declared, a movable-keys write without a rule here):
 *     the caller empties the cache.
 *
 * Scripts and functions: EVAL, EVALSHA, FCALL and their _RO forms declare
 * their keys (numkeys). The _RO forms and scripts listed as read-only (by
 * SHA1, see cmdtable_add_readonly_script) write nothing; any other script
 * may write keys it did not declare, so it is CMDT_WRITES_UNKNOWN, with
 * its declared keys also reported.
 *
 * Pure: no I/O, no globals. Names are matched case-insensitively.
 *
 * Which keys are reported
 * -----------------------
 * - A write whose keys COMMAND describes (first/last/step, no movablekeys):
 *   every key of that range, read-only sources included (SINTERSTORE,
 *   COPY, BITOP report their sources too). Reporting more keys than Redis
 *   changes costs a purge; reporting fewer would break C1.
 * - Movable-keys writes handled by rule: ZUNIONSTORE/ZINTERSTORE/ZDIFFSTORE
 *   (dest only), SORT ... STORE dest, GEORADIUS[BYMEMBER] ... STORE|STOREDIST
 *   dest (every argument after a STORE word is reported), LMPOP/ZMPOP/BLMPOP/
 *   BZMPOP (all their keys), MIGRATE (its key or KEYS list, COPY or not),
 *   XREADGROUP (its streams: their consumer groups change). Any other
 *   movable-keys write is CMDT_WRITES_UNKNOWN.
 * - PFCOUNT, flagged readonly, reports its keys (CMDT_WRITES_KEYS): it may
 *   rewrite the cached cardinality stored in the HLL's value.
 * - A write without keys (FLUSHALL, FLUSHDB, SWAPDB, FUNCTION LOAD/FLUSH/
 *   DELETE/RESTORE) is CMDT_WRITES_UNKNOWN.
 * - MULTI, EXEC, DISCARD, WATCH write nothing: the caller classifies the
 *   queued commands one by one.
 * - A request Redis refuses before it changes anything writes nothing:
 *   unknown command or subcommand, wrong arity, a numkeys Redis would not
 *   accept (integers are read as Redis's string2ll reads them: "+1", "01",
 *   " 1" are refused). An option word Redis 7.0 does not know, where it
 *   matters, gives CMDT_WRITES_UNKNOWN (a later Redis may accept it).
 * - Keys are names only: MOVE, COPY ... DB n and SWAPDB change other
 *   databases, so the caller purges a reported key in every database.
 * - Not writes here, though they change data: DEBUG (RELOAD, POPULATE, ...),
 *   REPLICAOF/SLAVEOF, FAILOVER. They reach the cache through invalidation
 *   messages and C5/C6, not through this table.
 *
 * An empty table classifies every request as CMDT_WRITES_NOTHING: load
 * COMMAND (and check the result) before serving any hit.
 */
#ifndef SIDECACHE_PROTOCOL_CMDTABLE_H
#define SIDECACHE_PROTOCOL_CMDTABLE_H

#include <stddef.h>

#include "protocol/resp.h"

/* Flags learned from COMMAND's second field. */
enum cmdt_flag {
    CMDT_F_WRITE = 1 << 0,
    CMDT_F_READONLY = 1 << 1,
    CMDT_F_MOVABLEKEYS = 1 << 2,
    CMDT_F_ADMIN = 1 << 3,
    CMDT_F_BLOCKING = 1 << 4,
    CMDT_F_NO_MULTI = 1 << 5,   /* refused inside MULTI */
    CMDT_F_NOSCRIPT = 1 << 6,
    CMDT_F_PUBSUB = 1 << 7,
    /* may give a key a value that a client blocked on it takes at once
     * (BLPOP, BZPOPMIN, XREAD BLOCK: @list, @sortedset, @geo, @stream, and
     * the commands that move or copy a whole key) */
    CMDT_F_WAKES = 1 << 8,
    /* refused while Redis is over maxmemory; inside MULTI every command
     * is, but EXEC only when one of these is queued */
    CMDT_F_DENYOOM = 1 << 9,
};

/* What a request writes. */
enum cmdt_writes {
    CMDT_WRITES_NOTHING = 0,
    CMDT_WRITES_KEYS = 1,    /* the keys reported */
    CMDT_WRITES_UNKNOWN = 2, /* may write anything: empty the cache */
};

typedef struct cmdtable cmdtable;

/* A new empty table (every command unknown). NULL on OOM. */
cmdtable *cmdtable_new(void);
void cmdtable_free(cmdtable *t);

/* Adds or replaces one command as COMMAND describes it. flags: CMDT_F_*.
 * The name is copied (lower-cased); "container|sub" names a subcommand, and
 * adding one makes an already present container require a subcommand, so
 * add the container first (the loader does). Returns 0, or -1 on OOM or a
 * name that is empty or longer than 255 bytes. */
int cmdtable_add(cmdtable *t, const char *name, size_t nlen, int arity, int flags, int first_key,
                 int last_key, int step);

/* Parses a whole COMMAND reply (RESP2 or RESP3 framing, as Redis 6/7 send
 * it: an array of per-command arrays [name, arity, flags(set/array of
 * status strings), first, last, step, ...]) and adds every command.
 * Returns the number added, or -1 if the reply is not of that shape. */
/* Details: subcommands (Redis 7, element 10) are added as "name|sub" and
 * counted in the result, which is the number of distinct names in the
 * reply. Null entries (COMMAND INFO of an unknown name) are skipped. The
 * bytes must be exactly one reply: anything after it is refused. Nothing is
 * kept from `reply` after the call. On -1 the table is unchanged, except
 * after OOM while merging into a table that was not empty, when it may hold
 * part of the reply: don't trust a table whose load failed. */
int cmdtable_load_command_reply(cmdtable *t, const char *reply, size_t len);

/*
 * Would Redis take this request as it stands: a known command (or
 * subcommand), the right number of arguments? Returns 1 and the command's
 * CMDT_F_* flags in *flags (may be NULL), or 0 when Redis would refuse it
 * before running it ("unknown command", "wrong number of arguments"):
 * inside MULTI such a refusal aborts the whole transaction.
 */
int cmdtable_check(const cmdtable *t, int argc, const resp_arg *argv, int *flags);

/* Number of commands known. */
size_t cmdtable_count(const cmdtable *t);

/* Whether the last COMMAND reply loaded came from Redis 6: entries of 7
 * elements (Redis 7 gives 10: tips, key specs, subcommands). */
int cmdtable_from_redis6(const cmdtable *t);

/* Marks a script (40 hex digits, any case) as read-only: EVALSHA of it
 * writes nothing. Returns 0 or -1. */
/* (-1: not 40 hex digits, or OOM. Adding a digest twice is fine.) */
int cmdtable_add_readonly_script(cmdtable *t, const char *sha1_hex);

/*
 * Classifies one request (argv[0] is the command name). Calls
 * on_key(arg, key, klen) for every key the request may write (possibly
 * none, also with CMDT_WRITES_UNKNOWN for declared script keys).
 * Subcommand containers (e.g. OBJECT, XINFO, CLIENT, CONFIG) are looked up
 * as "name|sub" first when Redis reported subcommands; otherwise by name.
 * An arity error (as Redis would reject it) writes nothing.
 */
/* Returns an enum cmdt_writes value. on_key may be NULL; it is called
 * before cmdtable_writes returns, with pointers into argv, possibly more
 * than once for one key (DEL a a). See "Which keys are reported" above. */
int cmdtable_writes(const cmdtable *t, int argc, const resp_arg *argv,
                    void (*on_key)(void *arg, const char *key, size_t klen), void *arg);

#endif
