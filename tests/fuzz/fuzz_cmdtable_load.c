/*
 * tests/fuzz/fuzz_cmdtable_load.c — libFuzzer target for
 * cmdtable_load_command_reply() on arbitrary bytes.
 *
 * The input is the whole reply, in an exact-size heap block (so ASan
 * catches a read past it). It is loaded twice: into an empty table and into
 * one that already holds a few commands (the merge path). Checked against
 * protocol/cmdtable.h:
 *   - both loads give the same result, -1 or the number of names added;
 *   - an empty table that loaded n names holds n;
 *   - on -1 the non-empty table is unchanged (no OOM here): same size,
 *     same answers to the requests below;
 *   - the reply must be exactly one value: if the reply framer finds a
 *     whole value shorter than the input, the load fails;
 *   - loading the same reply twice gives the same count and answers;
 * and then every table is used: a fixed set of requests, built to reach
 * each classification rule whatever arity/first/last/step/flags the input
 * gave those names, is classified, and every reported key must be one of
 * the request's arguments.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzzcommon.h"
#include "protocol/cmdtable.h"


/* Requests classified against every table a load produced. */
static const char *const requests[][10] = {
    {"set", "k", "v"},
    {"get", "k"},
    {"del", "a", "b", "c"},
    {"x"},
    {"x", "y"},
    {"eval", "s", "1", "k", "a"},
    {"eval", "s", "9"},
    {"evalsha", "0123456789abcdef0123456789abcdef01234567", "1", "k"},
    {"fcall", "f", "2", "a", "b"},
    {"zunionstore", "d", "2", "a", "b"},
    {"zunionstore", "d"},
    {"sort", "k", "by", "w", "store", "d"},
    {"sort"},
    {"lmpop", "2", "a", "b", "left"},
    {"blmpop", "0", "1", "a", "right"},
    {"bzmpop"},
    {"georadius", "k", "0", "0", "1", "m", "store", "d", "storedist", "e"},
    {"migrate", "h", "1", "", "0", "0", "copy", "keys", "a", "b"},
    {"migrate", "h", "1", "k", "0", "0", "auth", "p", "auth2"},
    {"migrate", "h"},
    {"xreadgroup", "group", "g", "c", "count", "1", "streams", "s", "0"},
    {"xreadgroup"},
    {"pfcount", "a", "b"},
    {"pfcount"},
    {"config", "set", "a", "b"},
    {"config"},
    {"object", "encoding", "k"},
    {"multi"},
    {"exec"},
};

typedef struct keys {
    int argc;
    const resp_arg *argv;
    uint64_t sig; /* FNV-1a over the positions reported */
} keys;

static uint64_t fnv(uint64_t h, uint64_t v) {
    for (int i = 0; i < 8; i++, v >>= 8) {
        h ^= v & 0xff;
        h *= 1099511628211ULL;
    }
    return h;
}

static void on_key(void *arg, const char *key, size_t klen) {
    keys *k = arg;
    for (int i = 1; i < k->argc; i++)
        if (k->argv[i].ptr == key && k->argv[i].len == klen) {
            k->sig = fnv(k->sig, (uint64_t)i);
            return;
        }
    CHECK(!"a reported key is not one of argv[1..argc-1]");
}

/* Classifies every request; returns a digest of the answers. */
static uint64_t classify_all(const cmdtable *t) {
    uint64_t sig = 14695981039346656037ULL;
    for (size_t r = 0; r < sizeof requests / sizeof requests[0]; r++) {
        resp_arg argv[10];
        int argc = 0;
        for (; argc < 10 && requests[r][argc] != NULL; argc++) {
            size_t n = strlen(requests[r][argc]);
            char *p = malloc(n ? n : 1);
            CHECK(p != NULL);
            memcpy(p, requests[r][argc], n);
            argv[argc] = (resp_arg){p, n};
        }
        keys k = {argc, argv, 14695981039346656037ULL};
        int rc = cmdtable_writes(t, argc, argv, on_key, &k);
        CHECK(rc == CMDT_WRITES_NOTHING || rc == CMDT_WRITES_KEYS || rc == CMDT_WRITES_UNKNOWN);
        if (rc == CMDT_WRITES_NOTHING) {
            CHECK(k.sig == 14695981039346656037ULL); /* no key */
        }
        sig = fnv(fnv(sig, (uint64_t)rc), k.sig);
        for (int i = 0; i < argc; i++)
            free((void *)argv[i].ptr);
    }
    return sig;
}

/* A table as the proxy might hold one before a reload. */
static cmdtable *preloaded(void) {
    cmdtable *t = cmdtable_new();
    CHECK(t != NULL);
    CHECK(cmdtable_add(t, "set", 3, -3, CMDT_F_WRITE, 1, 1, 1) == 0);
    CHECK(cmdtable_add(t, "get", 3, 2, CMDT_F_READONLY, 1, 1, 1) == 0);
    CHECK(cmdtable_add(t, "config", 6, -2, 0, 0, 0, 0) == 0);
    CHECK(cmdtable_add(t, "config|set", 10, -4, 0, 0, 0, 0) == 0);
    CHECK(cmdtable_add(t, "sort", 4, -2, CMDT_F_WRITE | CMDT_F_MOVABLEKEYS, 1, 1, 1) == 0);
    return t;
}

/* Length of the first whole reply value in buf, or 0. */
static size_t first_value_len(const char *buf, size_t len) {
    resp_reply_parser p;
    size_t n = 0;
    resp_reply_init(&p, NULL);
    if (resp_reply_parse(&p, buf, len) == RESP_OK)
        n = p.frame_len;
    resp_reply_deinit(&p);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size ? size : 1);
    CHECK(buf != NULL);
    if (size)
        memcpy(buf, data, size);

    cmdtable *t1 = cmdtable_new();
    CHECK(t1 != NULL);
    int rc1 = cmdtable_load_command_reply(t1, buf, size);
    CHECK(rc1 >= -1);
    if (rc1 >= 0) {
        CHECK(cmdtable_count(t1) == (size_t)rc1);
    } else {
        CHECK(cmdtable_count(t1) == 0);
    }

    cmdtable *t2 = preloaded();
    size_t before = cmdtable_count(t2);
    uint64_t sig_before = classify_all(t2);
    int rc2 = cmdtable_load_command_reply(t2, buf, size);
    CHECK(rc1 == rc2);
    if (rc2 < 0) {
        CHECK(cmdtable_count(t2) == before);
        CHECK(classify_all(t2) == sig_before);
    } else {
        CHECK(cmdtable_count(t2) >= before);
        CHECK(cmdtable_count(t2) <= before + (size_t)rc2);
    }

    size_t first = first_value_len(buf, size);
    if (first > 0 && first < size) {
        CHECK(rc1 == -1);
    }

    /* Loading the same reply again changes nothing. */
    uint64_t sig1 = classify_all(t1);
    if (rc1 >= 0) {
        CHECK(cmdtable_load_command_reply(t1, buf, size) == rc1);
        CHECK(cmdtable_count(t1) == (size_t)rc1);
        CHECK(classify_all(t1) == sig1);
    }
    classify_all(t2);
    cmdtable_free(t1);
    cmdtable_free(t2);
    free(buf);
    return 0;
}
