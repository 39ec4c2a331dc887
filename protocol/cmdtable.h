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
 * Returns 0 or -1 on OOM. */
int cmdtable_add(cmdtable *t, const char *name, size_t nlen, int arity, int flags, int first_key,
                 int last_key, int step);

/* Parses a whole COMMAND reply (RESP2 or RESP3 framing, as Redis 6/7 send
 * it: an array of per-command arrays [name, arity, flags(set/array of
 * status strings), first, last, step, ...]) and adds every command.
 * Returns the number added, or -1 if the reply is not of that shape. */
int cmdtable_load_command_reply(cmdtable *t, const char *reply, size_t len);

/* Number of commands known. */
size_t cmdtable_count(const cmdtable *t);

/* Marks a script (40 hex digits, any case) as read-only: EVALSHA of it
 * writes nothing. Returns 0 or -1. */
int cmdtable_add_readonly_script(cmdtable *t, const char *sha1_hex);

/*
 * Classifies one request (argv[0] is the command name). Calls
 * on_key(arg, key, klen) for every key the request may write (possibly
 * none, also with CMDT_WRITES_UNKNOWN for declared script keys).
 * Subcommand containers (e.g. OBJECT, XINFO, CLIENT, CONFIG) are looked up
 * as "name|sub" first when Redis reported subcommands; otherwise by name.
 * An arity error (as Redis would reject it) writes nothing.
 */
int cmdtable_writes(const cmdtable *t, int argc, const resp_arg *argv,
                    void (*on_key)(void *arg, const char *key, size_t klen), void *arg);

#endif
