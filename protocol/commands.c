/*
 * protocol/commands.c — the routing table. Sorted by name so that a lookup is
 * a binary search; a test checks the order.
 */
#include "protocol/commands.h"

#include <stdint.h>
#include <strings.h>
#include <string.h>

static const resp_cmd_info cmd_table[] = {
    /* a cluster's: the next command on the connection may be served for a
     * slot being imported (one ASK redirection); never on a shared one */
    {"ASKING", CMD_ASKING, CMDF_STICKY},
    {"AUTH", CMD_AUTH, CMDF_LOCAL},
    {"BLMOVE", CMD_BLMOVE, CMDF_BLOCKING},
    {"BLMPOP", CMD_BLMPOP, CMDF_BLOCKING},
    {"BLPOP", CMD_BLPOP, CMDF_BLOCKING},
    {"BRPOP", CMD_BRPOP, CMDF_BLOCKING},
    {"BRPOPLPUSH", CMD_BRPOPLPUSH, CMDF_BLOCKING},
    {"BZMPOP", CMD_BZMPOP, CMDF_BLOCKING},
    {"BZPOPMAX", CMD_BZPOPMAX, CMDF_BLOCKING},
    {"BZPOPMIN", CMD_BZPOPMIN, CMDF_BLOCKING},
    {"CLIENT", CMD_CLIENT, CMDF_LOCAL},
    {"DEBUG", CMD_DEBUG, 0},      /* DEBUG PROTOCOL: the router tunnels it */
    {"DISCARD", CMD_DISCARD, CMDF_TXN},
    {"ECHO", CMD_ECHO, CMDF_LOCAL},
    {"EXEC", CMD_EXEC, CMDF_TXN},
    {"HELLO", CMD_HELLO, CMDF_LOCAL},
    {"MONITOR", CMD_MONITOR, CMDF_STREAM},
    {"MULTI", CMD_MULTI, CMDF_TXN},
    {"PING", CMD_PING, CMDF_LOCAL},
    {"PSUBSCRIBE", CMD_PSUBSCRIBE, CMDF_STREAM},
    {"PSYNC", CMD_PSYNC, CMDF_STREAM},
    /* an UNSUBSCRIBE family command answers once per channel named, even
     * where nothing was subscribed: never one reply on a shared FIFO */
    {"PUNSUBSCRIBE", CMD_PUNSUBSCRIBE, CMDF_STREAM},
    {"QUIT", CMD_QUIT, CMDF_LOCAL},
    {"READONLY", CMD_READONLY, CMDF_STICKY},
    {"READWRITE", CMD_READWRITE, CMDF_STICKY},
    /* a replica's: REPLCONF ACK is never answered */
    {"REPLCONF", CMD_REPLCONF, CMDF_STREAM},
    {"RESET", CMD_RESET, CMDF_LOCAL},
    {"SCRIPT", CMD_SCRIPT, 0},    /* SCRIPT DEBUG: the router tunnels it */
    {"SELECT", CMD_SELECT, CMDF_LOCAL},
    {"SSUBSCRIBE", CMD_SSUBSCRIBE, CMDF_STREAM},
    {"SUBSCRIBE", CMD_SUBSCRIBE, CMDF_STREAM},
    {"SUNSUBSCRIBE", CMD_SUNSUBSCRIBE, CMDF_STREAM},
    {"SYNC", CMD_SYNC, CMDF_STREAM},
    {"UNSUBSCRIBE", CMD_UNSUBSCRIBE, CMDF_STREAM},
    {"UNWATCH", CMD_UNWATCH, CMDF_TXN},
    {"WAIT", CMD_WAIT, CMDF_BLOCKING},
    {"WAITAOF", CMD_WAITAOF, CMDF_BLOCKING},
    {"WATCH", CMD_WATCH, CMDF_TXN},
    {"XREAD", CMD_XREAD, 0},      /* blocking only with BLOCK: the router checks */
    {"XREADGROUP", CMD_XREADGROUP, 0},
};

/* Compares counted name (any case) with an upper-case table name. */
static int cmd_cmp(const char *p, size_t n, const char *upper) {
    size_t i = 0;
    for (; i < n && upper[i]; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 'a' && c <= 'z') c = (unsigned char)(c - 32);
        if (c != (unsigned char)upper[i]) return (int)c - (int)(unsigned char)upper[i];
    }
    if (i < n) return 1;          /* name is longer */
    return upper[i] ? -1 : 0;     /* name is a prefix, or equal */
}

/* Bit (c - 'A') of first_letters[n]: a name of n bytes in the table starts
 * with c. Most commands a client sends (GET, SET, HSET, DEL, ZADD...) are
 * not in the table, and this tells so before the search. */
static uint32_t first_letters[17];

static void first_letters_init(void) {
    for (size_t i = 0; i < sizeof cmd_table / sizeof cmd_table[0]; i++) {
        size_t n = strlen(cmd_table[i].name);
        first_letters[n] |= 1u << (cmd_table[i].name[0] - 'A');
    }
    first_letters[0] = 1; /* done */
}

const resp_cmd_info *resp_cmd_lookup(const char *name, size_t len) {
    size_t lo = 0, hi = sizeof cmd_table / sizeof cmd_table[0];
    if (len == 0 || len > 16) return NULL;
    if (first_letters[0] == 0) first_letters_init();
    unsigned first = (unsigned char)name[0] & ~0x20u; /* upper case, for letters */
    if (first < 'A' || first > 'Z' || !(first_letters[len] & (1u << (first - 'A')))) return NULL;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = cmd_cmp(name, len, cmd_table[mid].name);
        if (c == 0) return &cmd_table[mid];
        if (c < 0) hi = mid; else lo = mid + 1;
    }
    return NULL;
}
