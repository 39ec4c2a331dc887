/*
 * tests/fuzz/fuzz_cmdtable_writes.c — libFuzzer target for
 * cmdtable_writes() over Redis 7.0's real command table.
 *
 * The table is loaded once from tests/unit/data/command-7.0.resp (the
 * COMMAND reply of a real redis-server 7.0): $SIDECACHE_COMMAND_RESP if
 * set, else that path from the current directory, else from the directory
 * above the fuzzer binary's build-fuzz/. A few read-only scripts are
 * registered so EVALSHA's read-only branch is reachable.
 *
 * Input: byte 0 is the separator; the rest, split on it, is argv (so
 * "\nSET\nk\nv", or " ZUNIONSTORE d 2 a b"). Arguments may hold any other
 * byte, NUL included (option words are compared as Redis's strcasecmp()
 * does: up to a NUL). Each argument is its own heap block of exactly its
 * length, so ASan catches any read past an argument.
 *
 * Checked: the result is an enum cmdt_writes value; every reported key is
 * exactly one of argv[1..argc-1] (pointer and length); CMDT_WRITES_NOTHING
 * reports no key; a command name with a '|' (unknown to Redis) writes
 * nothing; the answer is deterministic; and it does not depend on
 * letter case (command names, subcommands and option words are
 * case-insensitive, keys are reported by position), so the request with
 * every ASCII letter's case flipped gets the same answer and the same key
 * positions.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzzcommon.h"
#include "protocol/cmdtable.h"

static cmdtable *table;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    size_t len = 0;
    char *reply = fuzz_command_fixture("fuzz_cmdtable_writes", *argc, *argv, &len);
    table = cmdtable_new();
    CHECK(table != NULL);
    int n = cmdtable_load_command_reply(table, reply, len);
    CHECK(n > 200);
    free(reply);
    CHECK(cmdtable_add_readonly_script(table, "0123456789abcdef0123456789abcdef01234567") == 0);
    CHECK(cmdtable_add_readonly_script(table, "e0e1f9fabfc9d4800c877a703b823ac0578ff831") == 0);
    return 0;
}

typedef struct keys {
    int *idx; /* argv position of each reported key */
    int n, cap;
    int argc;
    const resp_arg *argv;
} keys;

static void on_key(void *arg, const char *key, size_t klen) {
    keys *k = arg;
    int at = -1;

    /* A key is one whole argument, never the command name. Identical
     * arguments are separate blocks, so the pointer names the position. */
    for (int i = 1; i < k->argc; i++)
        if (k->argv[i].ptr == key) {
            at = i;
            break;
        }
    CHECK(at >= 1);
    CHECK(klen == k->argv[at].len);
    if (k->n == k->cap) {
        k->cap = k->cap ? 2 * k->cap : 16;
        k->idx = realloc(k->idx, (size_t)k->cap * sizeof *k->idx);
        CHECK(k->idx != NULL);
    }
    k->idx[k->n++] = at;
}

static int classify(int argc, const resp_arg *argv, keys *k) {
    memset(k, 0, sizeof *k);
    k->argc = argc;
    k->argv = argv;
    int rc = cmdtable_writes(table, argc, argv, on_key, k);
    CHECK(rc == CMDT_WRITES_NOTHING || rc == CMDT_WRITES_KEYS || rc == CMDT_WRITES_UNKNOWN);
    if (rc == CMDT_WRITES_NOTHING) {
        CHECK(k->n == 0);
    }
    return rc;
}

static void same(int rc1, const keys *a, int rc2, const keys *b) {
    CHECK(rc1 == rc2);
    CHECK(a->n == b->n);
    for (int i = 0; i < a->n; i++)
        CHECK(a->idx[i] == b->idx[i]);
}

static char flip(char c) {
    if (c >= 'a' && c <= 'z')
        return (char)(c - 'a' + 'A');
    if (c >= 'A' && c <= 'Z')
        return (char)(c - 'A' + 'a');
    return c;
}

static resp_arg *make_argv(const uint8_t *s, size_t n, uint8_t sep, int *argc, int flip_case) {
    int cap = 1;
    for (size_t i = 0; i < n; i++)
        cap += s[i] == sep;
    resp_arg *v = calloc((size_t)cap, sizeof *v);
    CHECK(v != NULL);
    size_t from = 0;
    int c = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != sep)
            continue;
        size_t len = i - from;
        char *p = malloc(len); /* exactly len: a read past it is caught */
        if (len == 0 && p == NULL)
            p = malloc(1);
        CHECK(p != NULL);
        for (size_t j = 0; j < len; j++)
            p[j] = flip_case ? flip((char)s[from + j]) : (char)s[from + j];
        v[c].ptr = p;
        v[c].len = len;
        c++;
        from = i + 1;
    }
    CHECK(c == cap);
    *argc = c;
    return v;
}

static void free_argv(resp_arg *v, int argc) {
    for (int i = 0; i < argc; i++)
        free((void *)v[i].ptr);
    free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int argc, argc2;
    keys k1, k2, k3;

    if (size < 2)
        return 0;
    resp_arg *argv = make_argv(data + 1, size - 1, data[0], &argc, 0);
    resp_arg *flipped = make_argv(data + 1, size - 1, data[0], &argc2, 1);
    CHECK(argc == argc2);

    int rc1 = classify(argc, argv, &k1);
    int rc2 = classify(argc, argv, &k2);
    same(rc1, &k1, rc2, &k2);
    int rc3 = classify(argc, flipped, &k3);
    same(rc1, &k1, rc3, &k3);

    /* processCommand() looks argv[0] up as a whole name, and no command
     * name has a '|' ("config|set" names a subcommand only inside Redis):
     * Redis answers "unknown command", so the request writes nothing. */
    if (memchr(argv[0].ptr, '|', argv[0].len) != NULL) {
        CHECK(rc1 == CMDT_WRITES_NOTHING);
    }

    /* Also with on_key NULL (the header allows it) */
    CHECK(cmdtable_writes(table, argc, argv, NULL, NULL) == rc1);

    free(k1.idx);
    free(k2.idx);
    free(k3.idx);
    free_argv(argv, argc);
    free_argv(flipped, argc2);
    return 0;
}
