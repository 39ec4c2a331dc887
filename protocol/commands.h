/*
 * protocol/commands.h — what the proxy must know about a command before it
 * can route it: whether it is answered locally, changes session state, pins
 * the client to its own upstream connection, blocks, or turns the connection
 * into a stream (pub/sub, MONITOR).
 *
 * Everything not in the table passes through unchanged: the proxy never
 * needs to know a command to forward it. Pure data, no globals that change.
 */
#ifndef SIDECACHE_PROTOCOL_COMMANDS_H
#define SIDECACHE_PROTOCOL_COMMANDS_H

#include <stddef.h>
#include <string.h>
#include <strings.h>

#include "protocol/resp.h"

enum resp_cmd_id {
    CMD_OTHER = 0, /* not in the table: pass through */
    CMD_AUTH, CMD_BLMOVE, CMD_BLMPOP, CMD_BLPOP, CMD_BRPOP, CMD_BRPOPLPUSH,
    CMD_BZMPOP, CMD_BZPOPMAX, CMD_BZPOPMIN, CMD_CLIENT, CMD_DISCARD, CMD_ECHO,
    CMD_EXEC, CMD_HELLO, CMD_MONITOR, CMD_MULTI, CMD_PING, CMD_PSUBSCRIBE,
    CMD_PSYNC, CMD_QUIT, CMD_READONLY, CMD_READWRITE, CMD_RESET, CMD_SELECT,
    CMD_SSUBSCRIBE, CMD_SUBSCRIBE, CMD_SYNC, CMD_UNWATCH, CMD_WAIT, CMD_WAITAOF,
    CMD_WATCH, CMD_XREAD, CMD_XREADGROUP, CMD_UNSUBSCRIBE, CMD_PUNSUBSCRIBE, CMD_SUNSUBSCRIBE,
    CMD_REPLCONF, CMD_DEBUG, CMD_SCRIPT, CMD_ASKING,
};

/* How a command is routed. */
enum resp_cmd_flag {
    CMDF_LOCAL    = 1 << 0, /* answered (at least in part) by the proxy */
    CMDF_BLOCKING = 1 << 1, /* may block: needs a connection of its own while it runs */
    CMDF_STREAM   = 1 << 2, /* makes the connection a stream: tunnel it for good */
    CMDF_STICKY   = 1 << 3, /* sets per-connection state: pin for the session */
    CMDF_TXN      = 1 << 4, /* WATCH/MULTI family: pin while the transaction lives */
};

typedef struct resp_cmd_info {
    const char *name; /* upper case */
    enum resp_cmd_id id;
    int flags;
} resp_cmd_info;

/* Finds a command by name (any case). Returns its entry, or NULL. */
const resp_cmd_info *resp_cmd_lookup(const char *name, size_t len);

/* Case-insensitive comparison of a counted string with a C string. Inline:
 * with a literal word the length test is a constant, so a word of another
 * length costs one comparison, and one of the same length whose first
 * letter differs one more (this runs several times per request: DEL is
 * not ACL). Setting bit 5 folds ASCII case; it may also make two
 * non-letters alike, which strncasecmp then tells apart, but never two
 * bytes unlike that strncasecmp would take as equal. */
static inline int resp_arg_is(const char *p, size_t n, const char *word) {
    return strlen(word) == n &&
           (n == 0 || (((unsigned char)p[0] | 0x20) == ((unsigned char)word[0] | 0x20) && strncasecmp(p, word, n) == 0));
}

/* ACL SETUSER, DELUSER or LOAD: a command that changes what users may do
 * (the other ACL subcommands only read). */
static inline int resp_acl_changes(int argc, const resp_arg *a) {
    return argc >= 2 && resp_arg_is(a[0].ptr, a[0].len, "ACL") &&
           (resp_arg_is(a[1].ptr, a[1].len, "SETUSER") || resp_arg_is(a[1].ptr, a[1].len, "DELUSER") ||
            resp_arg_is(a[1].ptr, a[1].len, "LOAD"));
}

#endif
