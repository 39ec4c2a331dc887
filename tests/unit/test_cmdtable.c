/*
 * tests/unit/test_cmdtable.c — the command table against the COMMAND reply
 * of a real redis-server 7.0 (tests/unit/data/command-7.0.resp, captured
 * with `*1\r\n$7\r\nCOMMAND\r\n` on a RESP2 connection), plus synthetic and
 * malformed replies; the classification tests run again on the table of a
 * redis-server 6.2 (command-6.2.resp: 7 fields a command, no key specs, no
 * subcommands). Run from the repository root.
 */
#include "protocol/cmdtable.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/unit.h"

#define FIXTURE "tests/unit/data/command-7.0.resp"
#define FIXTURE_62 "tests/unit/data/command-6.2.resp"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */

#define MAX_KEYS 32
#define MAX_ARGS 64

typedef struct keys {
    int n;
    char k[MAX_KEYS][64];
    size_t len[MAX_KEYS];
} keys;

static void collect(void *arg, const char *key, size_t klen) {
    keys *ks = arg;
    if (ks->n < MAX_KEYS) {
        size_t n = klen < sizeof(ks->k[0]) - 1 ? klen : sizeof(ks->k[0]) - 1;
        memcpy(ks->k[ks->n], key, n);
        ks->k[ks->n][n] = '\0';
        ks->len[ks->n] = klen;
    }
    ks->n++;
}

/* Classifies the NULL-terminated argument list; keys land in *ks. */
/* argv from a NULL-terminated list of words; returns argc. */
static int argv_from(resp_arg *argv, const char *a0, va_list ap) {
    int argc = 0;
    for (const char *a = a0; a != NULL && argc < MAX_ARGS; a = va_arg(ap, const char *)) {
        argv[argc].ptr = a;
        argv[argc].len = strlen(a);
        argc++;
    }
    return argc;
}

static int wr(const cmdtable *t, keys *ks, const char *a0, ...) {
    resp_arg argv[MAX_ARGS];
    va_list ap;
    va_start(ap, a0);
    int argc = argv_from(argv, a0, ap);
    va_end(ap);
    memset(ks, 0, sizeof(*ks));
    return cmdtable_writes(t, argc, argv, collect, ks);
}

/* cmdtable_check of a NULL-terminated request; *flags gets the flags. */
static int chk(const cmdtable *t, int *flags, const char *a0, ...) {
    resp_arg argv[MAX_ARGS];
    va_list ap;
    va_start(ap, a0);
    int argc = argv_from(argv, a0, ap);
    va_end(ap);
    *flags = 0;
    return cmdtable_check(t, argc, argv, flags);
}

/* "k1,k2,..." == the keys reported, in order. */
static int keys_are(const keys *ks, const char *want) {
    char got[MAX_KEYS * 65] = "";
    for (int i = 0; i < ks->n && i < MAX_KEYS; i++) {
        if (i)
            strcat(got, ",");
        strcat(got, ks->k[i]);
    }
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "  keys: got \"%s\", want \"%s\"\n", got, want);
        return 0;
    }
    return 1;
}

static char *fixture;
static size_t fixture_len;

static int read_fixture(const char *path) {
    FILE *f = fopen(path, "rb");
    long n;
    if (f == NULL)
        return -1;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) <= 0 || fseek(f, 0, SEEK_SET) != 0 ||
        (fixture = malloc((size_t)n)) == NULL || fread(fixture, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        return -1;
    }
    fclose(f);
    fixture_len = (size_t)n;
    return 0;
}

static cmdtable *loaded(void) {
    cmdtable *t = cmdtable_new();
    if (t != NULL && cmdtable_load_command_reply(t, fixture, fixture_len) < 0) {
        cmdtable_free(t);
        return NULL;
    }
    return t;
}

/* ------------------------------------------------------------------------ */
/* Loading                                                                  */

static void test_load_fixture(void) {
    cmdtable *t = cmdtable_new();
    int n;
    REQUIRE(t != NULL);
    n = cmdtable_load_command_reply(t, fixture, fixture_len);
    CHECK(n > 200);
    CHECK_EQ_INT(cmdtable_count(t), n);
    /* 240 commands and 126 subcommands in redis-server 7.0.15 */
    CHECK_EQ_INT(n, 366);
    CHECK(!cmdtable_from_redis6(t));
    cmdtable_free(t);
}

static void test_load_fixture_62(void) {
    cmdtable *t = loaded();
    REQUIRE(t != NULL);
    /* 224 commands in redis-server 6.2.14, none with subcommands */
    CHECK_EQ_INT(cmdtable_count(t), 224);
    CHECK(cmdtable_from_redis6(t));
    cmdtable_free(t);
    CHECK(!cmdtable_from_redis6(NULL));
}

static void test_load_twice_replaces(void) {
    cmdtable *t = loaded();
    keys ks;
    REQUIRE(t != NULL);
    /* merge into a non-empty table: same names, nothing new */
    CHECK_EQ_INT(cmdtable_load_command_reply(t, fixture, fixture_len), 366);
    CHECK_EQ_INT(cmdtable_count(t), 366);
    CHECK_EQ_INT(wr(t, &ks, "SET", "k", "v", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "k"));
    CHECK_EQ_INT(wr(t, &ks, "CONFIG", "SET", "a", "b", NULL), CMDT_WRITES_NOTHING);
    cmdtable_free(t);
}

static void test_load_merges_into_added(void) {
    cmdtable *t = cmdtable_new();
    keys ks;
    REQUIRE(t != NULL);
    /* a wrong SET, replaced by the reply, and a command of our own, kept */
    CHECK_EQ_INT(cmdtable_add(t, "SET", 3, 2, CMDT_F_READONLY, 0, 0, 0), 0);
    CHECK_EQ_INT(cmdtable_add(t, "mywrite", 7, 2, CMDT_F_WRITE, 1, 1, 1), 0);
    CHECK_EQ_INT(cmdtable_load_command_reply(t, fixture, fixture_len), 366);
    CHECK_EQ_INT(cmdtable_count(t), 367);
    CHECK_EQ_INT(wr(t, &ks, "set", "k", "v", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "k"));
    CHECK_EQ_INT(wr(t, &ks, "MYWRITE", "x", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "x"));
    cmdtable_free(t);
}

/* Every truncation of the fixture is refused and leaves the table empty.
 * All short prefixes, then a sample, then the last bytes one by one. */
static void test_load_truncated(void) {
    cmdtable *t = cmdtable_new();
    int bad = 0;
    REQUIRE(t != NULL);
    for (size_t n = 0; n < fixture_len; n += n < 1024 ? 1 : (n > fixture_len - 128 ? 1 : 997)) {
        if (cmdtable_load_command_reply(t, fixture, n) != -1)
            bad++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(cmdtable_count(t), 0);
    cmdtable_free(t);
}

static void test_load_trailing_bytes(void) {
    cmdtable *t = cmdtable_new();
    char *buf = malloc(fixture_len + 6);
    REQUIRE(t != NULL && buf != NULL);
    memcpy(buf, fixture, fixture_len);
    memcpy(buf + fixture_len, "+OK\r\n", 5);
    CHECK_EQ_INT(cmdtable_load_command_reply(t, buf, fixture_len + 5), -1);
    CHECK_EQ_INT(cmdtable_count(t), 0);
    free(buf);
    cmdtable_free(t);
}

/* One byte of the fixture flipped at many places: never a crash, and either
 * refused with the table unchanged, or loaded. */
static void test_load_corrupted(void) {
    char *buf = malloc(fixture_len);
    static const char junk[] = {'\0', '\r', '\n', '*', '$', ':', '-', '9', 'x', '%', '_', '|'};
    int refused = 0;
    REQUIRE(buf != NULL);
    srand(12345);
    for (int round = 0; round < 400; round++) {
        cmdtable *t = cmdtable_new();
        size_t at = (size_t)rand() % fixture_len;
        int n;
        REQUIRE(t != NULL);
        memcpy(buf, fixture, fixture_len);
        buf[at] = junk[(size_t)rand() % sizeof(junk)];
        n = cmdtable_load_command_reply(t, buf, fixture_len);
        if (n < 0) {
            refused++;
            CHECK_EQ_INT(cmdtable_count(t), 0);
        } else {
            CHECK_EQ_INT(cmdtable_count(t), n);
        }
        cmdtable_free(t);
    }
    CHECK(refused > 100);
    free(buf);
}

/* A reply of one entry, spliced from pieces. */
static int load_str(cmdtable *t, const char *reply) {
    return cmdtable_load_command_reply(t, reply, strlen(reply));
}

#define GET_ENTRY "*6\r\n$3\r\nget\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n"

static void test_load_small_and_malformed(void) {
    static const char *const bad[] = {
        "",
        "-ERR unknown command 'COMMAND'\r\n",
        "+OK\r\n",
        ":1\r\n",
        "*-1\r\n",
        "$3\r\nget\r\n",
        "*1\r\n:1\r\n",                                  /* entry not an array */
        "*1\r\n*5\r\n$3\r\nget\r\n:2\r\n*0\r\n:1\r\n:1\r\n", /* too short */
        "*1\r\n*6\r\n:3\r\n:2\r\n*0\r\n:1\r\n:1\r\n:1\r\n",  /* name an int */
        "*1\r\n*6\r\n$0\r\n\r\n:2\r\n*0\r\n:1\r\n:1\r\n:1\r\n", /* empty name */
        "*1\r\n*6\r\n$-1\r\n:2\r\n*0\r\n:1\r\n:1\r\n:1\r\n",  /* null name */
        "*1\r\n*6\r\n$3\r\nget\r\n$1\r\n2\r\n*0\r\n:1\r\n:1\r\n:1\r\n", /* arity bulk */
        "*1\r\n*6\r\n$3\r\nget\r\n:2\r\n:0\r\n:1\r\n:1\r\n:1\r\n",      /* flags int */
        "*1\r\n*6\r\n$3\r\nget\r\n:2\r\n*-1\r\n:1\r\n:1\r\n:1\r\n",     /* flags null */
        "*1\r\n*6\r\n$3\r\nget\r\n:2\r\n*1\r\n:5\r\n:1\r\n:1\r\n:1\r\n", /* flag int */
        "*1\r\n*6\r\n$3\r\nget\r\n:2\r\n*0\r\n+1\r\n:1\r\n:1\r\n",      /* first str */
        "*1\r\n*6\r\n$3\r\nget\r\n:2\r\n*0\r\n:1\r\n:1\r\n,1.5\r\n",    /* step double */
        "*1\r\n*6\r\n$3\r\nget\r\n:99999999999\r\n*0\r\n:1\r\n:1\r\n:1\r\n", /* > int */
        "*1\r\n*6\r\n$3\r\nget\r\n:2\r\n*0\r\n:-2147483649\r\n:1\r\n:1\r\n",  /* < int */
        "*1\r\n*6\r\n$3\r\nget\r\n:2\r\n*0\r\n:1\r\n:1\r\n:1x\r\n",     /* bad int */
        "*2\r\n" GET_ENTRY,                              /* one entry missing */
        "*1\r\n" GET_ENTRY "*0\r\n",                     /* trailing value */
        /* subcommands not an array */
        "*1\r\n*10\r\n$6\r\nobject\r\n:-2\r\n*0\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n*0\r\n:1\r\n",
        /* a malformed subcommand */
        "*1\r\n*10\r\n$6\r\nobject\r\n:-2\r\n*0\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n*0\r\n"
        "*1\r\n*2\r\n$15\r\nobject|encoding\r\n:3\r\n",
        /* garbage type byte */
        "*1\r\n*6\r\n@3\r\nget\r\n:2\r\n*0\r\n:1\r\n:1\r\n:1\r\n",
    };
    cmdtable *t = cmdtable_new();
    char longname[300];
    char buf[512];
    REQUIRE(t != NULL);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (load_str(t, bad[i]) != -1)
            fprintf(stderr, "  accepted bad reply #%zu\n", i);
        CHECK_EQ_INT(load_str(t, bad[i]), -1);
    }
    CHECK_EQ_INT(cmdtable_load_command_reply(t, NULL, 0), -1);
    CHECK_EQ_INT(cmdtable_count(t), 0);

    /* a name longer than the table keeps */
    memset(longname, 'a', 256);
    longname[256] = '\0';
    snprintf(buf, sizeof(buf), "*1\r\n*6\r\n$256\r\n%s\r\n:2\r\n*0\r\n:1\r\n:1\r\n:1\r\n",
             longname);
    CHECK_EQ_INT(load_str(t, buf), -1);
    CHECK_EQ_INT(cmdtable_count(t), 0);

    /* an empty reply and a good one */
    CHECK_EQ_INT(load_str(t, "*0\r\n"), 0);
    CHECK_EQ_INT(load_str(t, "*1\r\n" GET_ENTRY), 1);
    CHECK_EQ_INT(cmdtable_count(t), 1);
    /* a bad reply after a good one leaves the good one alone */
    CHECK_EQ_INT(load_str(t, "*2\r\n" GET_ENTRY "*1\r\n:1\r\n"), -1);
    CHECK_EQ_INT(cmdtable_count(t), 1);
    /* COMMAND INFO of an unknown name gives a null entry: skipped */
    CHECK_EQ_INT(load_str(t, "*2\r\n*-1\r\n" GET_ENTRY), 1);
    cmdtable_free(t);
}

/* RESP3 framing: flags as a set, key specs as maps, attributes, a Redis 6
 * style entry of 7 elements, and subcommands. */
static void test_load_resp3(void) {
    static const char reply[] =
        "*3\r\n"
        /* set, as Redis 7 sends it over RESP3 (key spec abridged) */
        "*10\r\n$3\r\nset\r\n:-3\r\n~2\r\n+write\r\n+denyoom\r\n:1\r\n:1\r\n:1\r\n"
        "~2\r\n+@write\r\n+@string\r\n*0\r\n"
        "*1\r\n%3\r\n$5\r\nflags\r\n~2\r\n+RW\r\n+access\r\n"
        "$12\r\nbegin_search\r\n%2\r\n$4\r\ntype\r\n$5\r\nindex\r\n$4\r\nspec\r\n"
        "%1\r\n$5\r\nindex\r\n:1\r\n"
        "$9\r\nfind_keys\r\n_\r\n"
        "*0\r\n"
        /* Redis 6: 7 elements, flags as simple strings in upper case, an
         * attribute before the arity */
        "*7\r\n+RENAME\r\n|1\r\n+hint\r\n+x\r\n:3\r\n~1\r\n+WRITE\r\n:1\r\n:2\r\n:1\r\n"
        "~1\r\n+@keyspace\r\n"
        /* a container with subcommands */
        "*10\r\n$6\r\nxgroup\r\n:-2\r\n~0\r\n:0\r\n:0\r\n:0\r\n~0\r\n*0\r\n*0\r\n"
        "*1\r\n*10\r\n$14\r\nxgroup|destroy\r\n:4\r\n~1\r\n+write\r\n:2\r\n:2\r\n:1\r\n"
        "~0\r\n*0\r\n*0\r\n*0\r\n";
    cmdtable *t = cmdtable_new();
    keys ks;
    REQUIRE(t != NULL);
    CHECK_EQ_INT(cmdtable_load_command_reply(t, reply, sizeof(reply) - 1), 4);
    CHECK_EQ_INT(wr(t, &ks, "SET", "k", "v", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "k"));
    CHECK_EQ_INT(wr(t, &ks, "rename", "a", "b", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "a,b"));
    CHECK_EQ_INT(wr(t, &ks, "XGROUP", "DESTROY", "s", "g", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "s"));
    /* unknown subcommand of a container: Redis refuses it */
    CHECK_EQ_INT(wr(t, &ks, "XGROUP", "NOPE", "s", "g", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(ks.n, 0);
    cmdtable_free(t);
}

/* ------------------------------------------------------------------------ */
/* Classification with the real table                                      */

static cmdtable *T;
/* the major version of the Redis whose table T holds: 7, or 6 (6.2) */
static int redis_major;

static void test_plain_writes(void) {
    keys ks;
    CHECK_EQ_INT(wr(T, &ks, "SET", "k", "v", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "k"));
    CHECK_EQ_INT(wr(T, &ks, "set", "k", "v", "EX", "10", "GET", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "k"));
    CHECK_EQ_INT(wr(T, &ks, "MSET", "a", "1", "b", "2", "c", "3", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "a,b,c"));
    CHECK_EQ_INT(wr(T, &ks, "DEL", "a", "b", "c", "d", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "a,b,c,d"));
    CHECK_EQ_INT(wr(T, &ks, "HSET", "h", "f", "v", "f2", "v2", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "h"));
    CHECK_EQ_INT(wr(T, &ks, "RENAME", "a", "b", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "a,b"));
    CHECK_EQ_INT(wr(T, &ks, "XADD", "s", "*", "f", "v", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "s"));
    CHECK_EQ_INT(wr(T, &ks, "XGROUP", "CREATE", "s", "g", "$", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "s"));
    CHECK_EQ_INT(wr(T, &ks, "BITOP", "AND", "dst", "a", "b", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "dst,a,b"));
    CHECK_EQ_INT(wr(T, &ks, "COPY", "a", "b", "DB", "2", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "a,b"));
    CHECK_EQ_INT(wr(T, &ks, "HDEL", "d1", "name", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "d1"));
    /* the empty key is a key */
    CHECK_EQ_INT(wr(T, &ks, "SET", "", "v", NULL), CMDT_WRITES_KEYS);
    CHECK_EQ_INT(ks.n, 1);
    CHECK_EQ_INT(ks.len[0], 0);
}

static void test_reads_write_nothing(void) {
    keys ks;
    CHECK_EQ_INT(wr(T, &ks, "GET", "k", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(ks.n, 0);
    CHECK_EQ_INT(wr(T, &ks, "HGET", "d1", "name", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "MGET", "a", "b", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "OBJECT", "ENCODING", "k", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "object", "encoding", "k", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "CONFIG", "SET", "maxmemory", "0", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "PING", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "SORT_RO", "l", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "XREAD", "STREAMS", "s", "0", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "ZUNION", "2", "a", "b", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "PUBLISH", "ch", "msg", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(ks.n, 0);
}

static void test_unknown_commands(void) {
    keys ks;
    CHECK_EQ_INT(wr(T, &ks, "NOSUCHCOMMAND", "k", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "OBJECT", "NOSUCH", "k", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "CONFIG", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "", NULL), CMDT_WRITES_NOTHING);
    /* "set|k" is not a subcommand: SET is not a container */
    CHECK_EQ_INT(wr(T, &ks, "SET", "k", "v", NULL), CMDT_WRITES_KEYS);
    CHECK_EQ_INT(ks.n, 1);
    CHECK_EQ_INT(cmdtable_writes(T, 0, NULL, collect, &ks), CMDT_WRITES_NOTHING);
    /* a subcommand's table name is no command name (fuzz regression):
     * Redis answers "unknown command" to "xgroup|destroy a k g" */
    CHECK_EQ_INT(wr(T, &ks, "xgroup|destroy", "a", "k", "g", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(ks.n, 0);
    CHECK_EQ_INT(wr(T, &ks, "config|set", "x", "y", NULL), CMDT_WRITES_NOTHING);
}

static void test_arity_errors(void) {
    keys ks;
    CHECK_EQ_INT(wr(T, &ks, "SET", "k", NULL), CMDT_WRITES_NOTHING);  /* arity -3 */
    CHECK_EQ_INT(ks.n, 0);
    CHECK_EQ_INT(wr(T, &ks, "RENAME", "a", "b", "c", NULL), CMDT_WRITES_NOTHING); /* 3 */
    CHECK_EQ_INT(ks.n, 0);
    CHECK_EQ_INT(wr(T, &ks, "DEL", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "FLUSHALL", "ASYNC", "x", NULL), CMDT_WRITES_UNKNOWN); /* -1 */
    CHECK_EQ_INT(wr(T, &ks, "SWAPDB", "0", NULL), CMDT_WRITES_NOTHING);           /* 3 */
    CHECK_EQ_INT(wr(T, &ks, "CONFIG", "SET", "a", NULL), CMDT_WRITES_NOTHING);    /* -4 */
    /* 6.2 knows no subcommand's arity: XGROUP's own (-2) lets it through,
     * and its key is purged for nothing */
    CHECK_EQ_INT(wr(T, &ks, "XGROUP", "CREATE", "s", "g", NULL),
                 redis_major >= 7 ? CMDT_WRITES_NOTHING : CMDT_WRITES_KEYS);
    CHECK_EQ_INT(wr(T, &ks, "EVAL", "return 1", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "ZUNIONSTORE", "d", "1", NULL), CMDT_WRITES_NOTHING);
    /* MSET with a key and no value: arity passes, Redis refuses it later;
     * reporting the key costs a purge, nothing more */
    CHECK_EQ_INT(wr(T, &ks, "MSET", "a", "1", "b", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "a,b"));
}

/* What Redis would refuse at queue time, and the flags batching reads. */
static void test_check(void) {
    int f;
    CHECK_EQ_INT(chk(T, &f, "SET", "k", "v", NULL), 1);
    CHECK((f & CMDT_F_WRITE) && !(f & (CMDT_F_ADMIN | CMDT_F_BLOCKING | CMDT_F_NO_MULTI)));
    CHECK(f & CMDT_F_DENYOOM); /* over maxmemory, EXEC with a SET queued is refused */
    CHECK_EQ_INT(chk(T, &f, "set", "k", NULL), 0);              /* arity */
    CHECK_EQ_INT(chk(T, &f, "NOSUCH", NULL), 0);
    /* an unknown subcommand (6.2's table has none to know) */
    CHECK_EQ_INT(chk(T, &f, "CONFIG", "NOSUCH", NULL), redis_major >= 7 ? 0 : 1);
    CHECK_EQ_INT(chk(T, &f, "xgroup|destroy", "a", "k", "g", NULL), 0);
    CHECK_EQ_INT(chk(T, &f, "GET", "k", NULL), 1);
    CHECK(!(f & CMDT_F_WRITE) && (f & CMDT_F_READONLY) && !(f & CMDT_F_DENYOOM));
    CHECK_EQ_INT(chk(T, &f, "DEL", "k", NULL), 1);
    CHECK((f & CMDT_F_WRITE) && !(f & CMDT_F_DENYOOM)); /* frees memory */
    CHECK_EQ_INT(chk(T, &f, "BLPOP", "k", "0", NULL), 1);
    /* 6.2 has no blocking flag, but no script may block: noscript (the
     * router knows the blocking commands itself: commands.c) */
    CHECK(f & (redis_major >= 7 ? CMDT_F_BLOCKING : CMDT_F_NOSCRIPT));
    CHECK_EQ_INT(chk(T, &f, "FLUSHALL", NULL), 1);
    CHECK(f & CMDT_F_WRITE);
    CHECK_EQ_INT(chk(T, &f, "CONFIG", "SET", "a", "b", NULL), 1);
    CHECK(f & CMDT_F_ADMIN);
    CHECK_EQ_INT(chk(T, &f, "SUBSCRIBE", "ch", NULL), 1);
    CHECK(f & CMDT_F_PUBSUB);
    CHECK_EQ_INT(chk(T, &f, "MSET", "a", "1", "b", NULL), 1);  /* refused later, at run time */
    /* what a client blocked on a key may take at once (by ACL category,
     * and the commands that move or copy whole keys) */
    CHECK(!(f & CMDT_F_WAKES));
    const char *wakes[][5] = {{"LPUSH", "k", "v"}, {"ZADD", "k", "1", "m"}, {"XADD", "k", "*", "f", "v"},
                              {"GEOADD", "k", "1", "2", "m"}, {"RENAME", "a", "b"}, {"COPY", "a", "b"},
                              {"LMOVE", "a", "b", "LEFT", "RIGHT"}, {"RESTORE", "k", "0", "x"},
                              {"RESTORE-ASKING", "k", "0", "x"}};
    for (size_t i = 0; i < sizeof wakes / sizeof wakes[0]; i++) {
        CHECK_EQ_INT(chk(T, &f, wakes[i][0], wakes[i][1], wakes[i][2], wakes[i][3], wakes[i][4], NULL), 1);
        CHECK(f & CMDT_F_WAKES);
    }
    const char *quiet[][4] = {{"SET", "k", "v"}, {"HSET", "k", "f", "v"}, {"INCR", "k"}, {"DEL", "k"}, {"SADD", "k", "m"}};
    for (size_t i = 0; i < sizeof quiet / sizeof quiet[0]; i++) {
        CHECK_EQ_INT(chk(T, &f, quiet[i][0], quiet[i][1], quiet[i][2], quiet[i][3], NULL), 1);
        CHECK(!(f & CMDT_F_WAKES));
    }
}

static void test_keyless_writes_unknown(void) {
    keys ks;
    CHECK_EQ_INT(wr(T, &ks, "FLUSHALL", NULL), CMDT_WRITES_UNKNOWN);
    CHECK_EQ_INT(wr(T, &ks, "flushdb", "async", NULL), CMDT_WRITES_UNKNOWN);
    CHECK_EQ_INT(wr(T, &ks, "SWAPDB", "0", "1", NULL), CMDT_WRITES_UNKNOWN);
    /* (7.0's: to 6.2 an unknown command, which writes nothing) */
    CHECK_EQ_INT(wr(T, &ks, "FUNCTION", "FLUSH", NULL), redis_major >= 7 ? CMDT_WRITES_UNKNOWN : CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(ks.n, 0);
}

static void test_transactions(void) {
    keys ks;
    CHECK_EQ_INT(wr(T, &ks, "MULTI", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "EXEC", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "DISCARD", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "WATCH", "a", "b", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(ks.n, 0);
}

static void test_scripts(void) {
    keys ks;
    const char *sha = "E0E1F9FABFC9D4800C877A703B823AC0578FF8DB";
    CHECK_EQ_INT(wr(T, &ks, "EVAL", "redis.call('set',KEYS[1],1)", "2", "a", "b", "x", NULL),
                 CMDT_WRITES_UNKNOWN);
    CHECK(keys_are(&ks, "a,b"));
    CHECK_EQ_INT(wr(T, &ks, "EVAL", "return 1", "0", NULL), CMDT_WRITES_UNKNOWN);
    CHECK_EQ_INT(ks.n, 0);
    CHECK_EQ_INT(wr(T, &ks, "FCALL", "f", "1", "a", "x", NULL), redis_major >= 7 ? CMDT_WRITES_UNKNOWN : CMDT_WRITES_NOTHING);
    CHECK(keys_are(&ks, redis_major >= 7 ? "a" : ""));
    CHECK_EQ_INT(wr(T, &ks, "EVALSHA", sha, "1", "d1", "name", NULL), CMDT_WRITES_UNKNOWN);
    CHECK(keys_are(&ks, "d1"));

    /* bad numkeys: Redis refuses before running anything */
    static const char *const badnum[] = {"3", "-1", "x", "", "+1", "01", " 1", "1 ",
                                         "99999999999999999999999"};
    for (size_t i = 0; i < sizeof(badnum) / sizeof(badnum[0]); i++) {
        CHECK_EQ_INT(wr(T, &ks, "EVAL", "s", badnum[i], "a", "b", NULL), CMDT_WRITES_NOTHING);
        CHECK_EQ_INT(ks.n, 0);
    }
    CHECK_EQ_INT(wr(T, &ks, "EVAL", "s", "2", "a", "b", NULL), CMDT_WRITES_UNKNOWN);
    CHECK(keys_are(&ks, "a,b"));

    /* read-only forms */
    CHECK_EQ_INT(wr(T, &ks, "EVAL_RO", "return 1", "1", "a", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "EVALSHA_RO", sha, "1", "a", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "FCALL_RO", "f", "1", "a", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(ks.n, 0);

    /* a registered read-only script, in any case */
    CHECK_EQ_INT(cmdtable_add_readonly_script(T, sha), 0);
    CHECK_EQ_INT(cmdtable_add_readonly_script(T, sha), 0);
    CHECK_EQ_INT(wr(T, &ks, "EVALSHA", sha, "1", "d1", "name", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(ks.n, 0);
    CHECK_EQ_INT(wr(T, &ks, "evalsha", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "1", "d1",
                    "n", NULL),
                 CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(ks.n, 0);
    /* another script still may write anything */
    CHECK_EQ_INT(wr(T, &ks, "EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8dc", "1", "d1",
                    "n", NULL),
                 CMDT_WRITES_UNKNOWN);
    CHECK(keys_are(&ks, "d1"));
    /* EVAL of a body is never looked up by digest */
    CHECK_EQ_INT(wr(T, &ks, "EVAL", sha, "1", "d1", NULL), CMDT_WRITES_UNKNOWN);

    /* bad digests are refused */
    CHECK_EQ_INT(cmdtable_add_readonly_script(T, "abc"), -1);
    CHECK_EQ_INT(cmdtable_add_readonly_script(T, "g0e1f9fabfc9d4800c877a703b823ac0578ff8db"), -1);
    CHECK_EQ_INT(cmdtable_add_readonly_script(T, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db0"), -1);
    CHECK_EQ_INT(cmdtable_add_readonly_script(T, NULL), -1);
}

static void test_zstore(void) {
    keys ks;
    CHECK_EQ_INT(wr(T, &ks, "ZUNIONSTORE", "dst", "2", "a", "b", "WEIGHTS", "1", "2", NULL),
                 CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "dst"));
    CHECK_EQ_INT(wr(T, &ks, "ZINTERSTORE", "dst", "1", "a", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "dst"));
    CHECK_EQ_INT(wr(T, &ks, "ZDIFFSTORE", "dst", "2", "a", "b", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "dst"));
    CHECK_EQ_INT(wr(T, &ks, "ZUNIONSTORE", "dst", "0", "a", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "ZUNIONSTORE", "dst", "3", "a", "b", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "ZUNIONSTORE", "dst", "two", "a", "b", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(ks.n, 0);
}

static void test_sort(void) {
    keys ks;
    CHECK_EQ_INT(wr(T, &ks, "SORT", "l", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "SORT", "l", "BY", "w_*", "GET", "#", "LIMIT", "0", "10", NULL),
                 CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(ks.n, 0);
    CHECK_EQ_INT(wr(T, &ks, "SORT", "l", "ALPHA", "STORE", "dst", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "dst"));
    CHECK_EQ_INT(wr(T, &ks, "sort", "l", "LIMIT", "0", "5", "store", "dst", "DESC", NULL),
                 CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "dst"));
    /* several STORE: Redis keeps the last; both reported */
    CHECK_EQ_INT(wr(T, &ks, "SORT", "l", "STORE", "d1", "STORE", "d2", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "d1,d2"));
    /* STORE with nothing after it is no destination */
    CHECK_EQ_INT(wr(T, &ks, "SORT", "l", "STORE", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "SORT_RO", "l", "STORE", "dst", NULL), CMDT_WRITES_NOTHING);
}

static void test_mpop(void) {
    keys ks;
    if (redis_major < 7) {
        /* 7.0's commands: unknown to 6.2, which runs none of them */
        CHECK_EQ_INT(wr(T, &ks, "LMPOP", "2", "a", "b", "LEFT", NULL), CMDT_WRITES_NOTHING);
        CHECK_EQ_INT(wr(T, &ks, "BZMPOP", "1.5", "1", "z", "MAX", NULL), CMDT_WRITES_NOTHING);
        return;
    }
    CHECK_EQ_INT(wr(T, &ks, "LMPOP", "2", "a", "b", "LEFT", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "a,b"));
    CHECK_EQ_INT(wr(T, &ks, "ZMPOP", "1", "z", "MIN", "COUNT", "3", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "z"));
    CHECK_EQ_INT(wr(T, &ks, "BLMPOP", "0", "3", "a", "b", "c", "RIGHT", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "a,b,c"));
    CHECK_EQ_INT(wr(T, &ks, "BZMPOP", "1.5", "1", "z", "MAX", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "z"));
    /* numkeys < 1, not a number, or no LEFT/RIGHT after the keys */
    CHECK_EQ_INT(wr(T, &ks, "LMPOP", "0", "a", "LEFT", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "LMPOP", "x", "a", "LEFT", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "LMPOP", "2", "a", "b", "c", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "a,b"));
    CHECK_EQ_INT(wr(T, &ks, "LMPOP", "3", "a", "b", "LEFT", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "BLMPOP", "0", "2", "a", "b", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(ks.n, 0);
}

static void test_georadius(void) {
    keys ks;
    CHECK_EQ_INT(wr(T, &ks, "GEORADIUS", "g", "15", "37", "200", "km", NULL),
                 CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "GEORADIUS", "g", "15", "37", "200", "km", "WITHDIST", NULL),
                 CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "GEORADIUS", "g", "15", "37", "200", "km", "STORE", "dst", NULL),
                 CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "dst"));
    CHECK_EQ_INT(wr(T, &ks, "GEORADIUSBYMEMBER", "g", "m", "10", "km", "COUNT", "5",
                    "STOREDIST", "dd", NULL),
                 CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "dd"));
    /* a member named "store" is not an option */
    CHECK_EQ_INT(wr(T, &ks, "GEORADIUSBYMEMBER", "g", "store", "10", "km", NULL),
                 CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(ks.n, 0);
}

static void test_migrate(void) {
    keys ks;
    CHECK_EQ_INT(wr(T, &ks, "MIGRATE", "h", "6379", "k", "0", "1000", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "k"));
    CHECK_EQ_INT(wr(T, &ks, "MIGRATE", "h", "6379", "k", "0", "1000", "COPY", "REPLACE", NULL),
                 CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "k"));
    CHECK_EQ_INT(wr(T, &ks, "MIGRATE", "h", "6379", "", "0", "1000", "AUTH", "keys", "KEYS",
                    "a", "b", NULL),
                 CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "a,b"));
    CHECK_EQ_INT(wr(T, &ks, "MIGRATE", "h", "6379", "", "0", "1000", "AUTH2", "u", "p", "KEYS",
                    "a", NULL),
                 CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "a"));
    /* KEYS with a key given, AUTH without password: refused by Redis */
    CHECK_EQ_INT(wr(T, &ks, "MIGRATE", "h", "6379", "k", "0", "1000", "KEYS", "a", NULL),
                 CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "MIGRATE", "h", "6379", "k", "0", "1000", "AUTH", NULL),
                 CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(ks.n, 0);
    /* an option 7.0 does not know */
    CHECK_EQ_INT(wr(T, &ks, "MIGRATE", "h", "6379", "k", "0", "1000", "FUTURE", NULL),
                 CMDT_WRITES_UNKNOWN);
}

static void test_xreadgroup(void) {
    keys ks;
    CHECK_EQ_INT(wr(T, &ks, "XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "BLOCK", "0",
                    "NOACK", "STREAMS", "s1", "s2", ">", ">", NULL),
                 CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "s1,s2"));
    /* "STREAMS" as group and consumer name */
    CHECK_EQ_INT(wr(T, &ks, "XREADGROUP", "GROUP", "streams", "streams", "STREAMS", "s", ">",
                    NULL),
                 CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "s"));
    CHECK_EQ_INT(wr(T, &ks, "XREADGROUP", "GROUP", "g", "c", "STREAMS", "s1", "s2", ">", NULL),
                 CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(wr(T, &ks, "XREADGROUP", "GROUP", "g", "c", "WHAT", "STREAMS", "s", ">", NULL),
                 CMDT_WRITES_UNKNOWN);
}

static void test_pfcount(void) {
    keys ks;
    CHECK_EQ_INT(wr(T, &ks, "PFCOUNT", "h", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "h"));
    /* merged in a temporary, but declared RW by Redis: reported */
    CHECK_EQ_INT(wr(T, &ks, "PFCOUNT", "h1", "h2", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "h1,h2"));
    CHECK_EQ_INT(wr(T, &ks, "PFADD", "h", "x", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "h"));
}

/* strcasecmp() in Redis stops at a NUL: "store\0x" is STORE. Names are
 * matched on their full length. */
static void test_nul_bytes(void) {
    keys ks;
    resp_arg argv[4] = {{"SORT", 4}, {"l", 1}, {"STORE\0x", 7}, {"d\0e", 3}};
    resp_arg getx[2] = {{"GET\0x", 5}, {"k", 1}};
    memset(&ks, 0, sizeof(ks));
    CHECK_EQ_INT(cmdtable_writes(T, 4, argv, collect, &ks), CMDT_WRITES_KEYS);
    CHECK_EQ_INT(ks.n, 1);
    CHECK_EQ_INT(ks.len[0], 3);
    memset(&ks, 0, sizeof(ks));
    CHECK_EQ_INT(cmdtable_writes(T, 2, getx, collect, &ks), CMDT_WRITES_NOTHING);
    /* no callback: classification only */
    CHECK_EQ_INT(cmdtable_writes(T, 4, argv, NULL, NULL), CMDT_WRITES_KEYS);
}

/* Long names and arguments never overflow the lookup buffer. */
static void test_long_arguments(void) {
    keys ks;
    static char big[100000];
    resp_arg argv[3];
    memset(big, 'a', sizeof(big));
    argv[0] = (resp_arg){"OBJECT", 6};
    argv[1] = (resp_arg){big, sizeof(big)};
    argv[2] = (resp_arg){"k", 1};
    memset(&ks, 0, sizeof(ks));
    CHECK_EQ_INT(cmdtable_writes(T, 3, argv, collect, &ks), CMDT_WRITES_NOTHING);
    argv[0] = (resp_arg){big, 255};
    CHECK_EQ_INT(cmdtable_writes(T, 3, argv, collect, &ks), CMDT_WRITES_NOTHING);
    argv[0] = (resp_arg){big, 256};
    CHECK_EQ_INT(cmdtable_writes(T, 3, argv, collect, &ks), CMDT_WRITES_NOTHING);
    argv[0] = (resp_arg){"SET", 3};
    argv[1] = (resp_arg){big, sizeof(big)};
    CHECK_EQ_INT(cmdtable_writes(T, 3, argv, collect, &ks), CMDT_WRITES_KEYS);
    CHECK_EQ_INT(ks.n, 1);
    CHECK_EQ_INT(ks.len[0], sizeof(big));
}

/* ------------------------------------------------------------------------ */
/* The table filled by hand                                                 */

static void test_add_by_hand(void) {
    cmdtable *t = cmdtable_new();
    keys ks;
    char name[300];
    REQUIRE(t != NULL);
    CHECK_EQ_INT(cmdtable_count(t), 0);
    CHECK_EQ_INT(wr(t, &ks, "SET", "k", "v", NULL), CMDT_WRITES_NOTHING);

    CHECK_EQ_INT(cmdtable_add(t, "Set", 3, -3, CMDT_F_WRITE, 1, 1, 1), 0);
    CHECK_EQ_INT(cmdtable_add(t, "sEt", 3, -3, CMDT_F_WRITE, 1, 1, 1), 0);
    CHECK_EQ_INT(cmdtable_count(t), 1);
    CHECK_EQ_INT(wr(t, &ks, "SET", "k", "v", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "k"));
    /* replaced by a read */
    CHECK_EQ_INT(cmdtable_add(t, "SET", 3, -3, CMDT_F_READONLY, 1, 1, 1), 0);
    CHECK_EQ_INT(wr(t, &ks, "SET", "k", "v", NULL), CMDT_WRITES_NOTHING);

    /* odd specs stay in bounds: step 0, last past argc, last before first */
    CHECK_EQ_INT(cmdtable_add(t, "w0", 2, -2, CMDT_F_WRITE, 1, 1000, 0), 0);
    CHECK_EQ_INT(wr(t, &ks, "w0", "a", "b", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "a,b"));
    CHECK_EQ_INT(cmdtable_add(t, "w1", 2, -1, CMDT_F_WRITE, 2, -3, 1), 0);
    CHECK_EQ_INT(wr(t, &ks, "w1", "a", NULL), CMDT_WRITES_KEYS);
    CHECK_EQ_INT(ks.n, 0);
    CHECK_EQ_INT(cmdtable_add(t, "w2", 2, -2147483647 - 1, CMDT_F_WRITE, 2147483647,
                              -2147483647 - 1, 2147483647), 0);
    CHECK_EQ_INT(wr(t, &ks, "w2", "a", NULL), CMDT_WRITES_NOTHING);
    CHECK_EQ_INT(cmdtable_add(t, "w3", 2, -1, CMDT_F_WRITE, -1, 0, 0), 0);
    CHECK_EQ_INT(wr(t, &ks, "w3", "a", NULL), CMDT_WRITES_UNKNOWN);
    CHECK_EQ_INT(cmdtable_add(t, "w4", 2, -1, CMDT_F_WRITE | CMDT_F_MOVABLEKEYS, 1, 1, 1), 0);
    CHECK_EQ_INT(wr(t, &ks, "w4", "a", NULL), CMDT_WRITES_UNKNOWN);

    /* a container, then its subcommand: the container now needs one */
    CHECK_EQ_INT(cmdtable_add(t, "box", 3, -2, 0, 0, 0, 0), 0);
    CHECK_EQ_INT(cmdtable_add(t, "BOX|PUT", 7, 3, CMDT_F_WRITE, 2, 2, 1), 0);
    CHECK_EQ_INT(wr(t, &ks, "box", "put", "k", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "k"));
    CHECK_EQ_INT(wr(t, &ks, "box", "get", "k", NULL), CMDT_WRITES_NOTHING);
    /* a subcommand without its container is still found */
    CHECK_EQ_INT(cmdtable_add(t, "bag|put", 7, 3, CMDT_F_WRITE, 2, 2, 1), 0);
    CHECK_EQ_INT(wr(t, &ks, "BAG", "PUT", "k", NULL), CMDT_WRITES_KEYS);
    CHECK(keys_are(&ks, "k"));

    /* names: empty, too long */
    memset(name, 'x', sizeof(name));
    CHECK_EQ_INT(cmdtable_add(t, "", 0, 1, 0, 0, 0, 0), -1);
    CHECK_EQ_INT(cmdtable_add(t, NULL, 0, 1, 0, 0, 0, 0), -1);
    CHECK_EQ_INT(cmdtable_add(t, name, 256, 1, 0, 0, 0, 0), -1);
    CHECK_EQ_INT(cmdtable_add(t, name, 255, 1, 0, 0, 0, 0), 0);
    cmdtable_free(t);
    cmdtable_free(NULL);
}

/* Names the lookup memo files under one slot (same length, first and last
 * letters: HSET and HGET, TYPE and TIME) never answer for each other, in
 * any order and case; nor do a container's subcommands. */
static void test_memo_never_mixes_names(void) {
    keys ks;
    int f;
    for (int round = 0; round < 3; round++) {
        CHECK_EQ_INT(wr(T, &ks, round ? "hset" : "HSET", "h", "f", "v", NULL), CMDT_WRITES_KEYS);
        CHECK(keys_are(&ks, "h"));
        CHECK_EQ_INT(wr(T, &ks, round == 1 ? "HgEt" : "HGET", "h", "f", NULL), CMDT_WRITES_NOTHING);
        CHECK_EQ_INT(wr(T, &ks, "HSet", "h2", "f", "v", NULL), CMDT_WRITES_KEYS);
        CHECK(keys_are(&ks, "h2"));
        CHECK_EQ_INT(chk(T, &f, "TYPE", "k", NULL), 1);
        CHECK(f & CMDT_F_READONLY);
        CHECK_EQ_INT(chk(T, &f, "time", "k", NULL), 0);      /* TIME takes no argument */
        CHECK_EQ_INT(chk(T, &f, "TIME", NULL), 1);
        CHECK(!(f & CMDT_F_READONLY) && !(f & CMDT_F_WRITE));
        CHECK_EQ_INT(chk(T, &f, "CONFIG", "SET", "a", "b", NULL), 1);
        CHECK(f & CMDT_F_ADMIN);
        CHECK_EQ_INT(chk(T, &f, "config", "nosuch", NULL), redis_major >= 7 ? 0 : 1);
        CHECK_EQ_INT(chk(T, &f, "tyPE", NULL), 0);            /* arity */
    }
}

/* The tests that classify commands, on table T (7.0's, then 6.2's). */
static void classify_tests(void) {
    RUN(test_plain_writes);
    RUN(test_reads_write_nothing);
    RUN(test_unknown_commands);
    RUN(test_arity_errors);
    RUN(test_check);
    RUN(test_memo_never_mixes_names);
    RUN(test_keyless_writes_unknown);
    RUN(test_transactions);
    RUN(test_scripts);
    RUN(test_zstore);
    RUN(test_sort);
    RUN(test_mpop);
    RUN(test_georadius);
    RUN(test_migrate);
    RUN(test_xreadgroup);
    RUN(test_pfcount);
    RUN(test_nul_bytes);
    RUN(test_long_arguments);
}

int main(void) {
    if (read_fixture(FIXTURE) < 0) {
        fprintf(stderr, "cannot read %s (run from the repository root)\n", FIXTURE);
        return 1;
    }
    RUN(test_load_fixture);
    RUN(test_load_twice_replaces);
    RUN(test_load_merges_into_added);
    RUN(test_load_truncated);
    RUN(test_load_trailing_bytes);
    RUN(test_load_corrupted);
    RUN(test_load_small_and_malformed);
    RUN(test_load_resp3);
    T = loaded();
    if (T == NULL) {
        fprintf(stderr, "cannot load %s\n", FIXTURE);
        return 1;
    }
    redis_major = 7;
    classify_tests();
    RUN(test_add_by_hand);
    cmdtable_free(T);
    free(fixture);

    if (read_fixture(FIXTURE_62) < 0 || (T = loaded()) == NULL) {
        fprintf(stderr, "cannot load %s\n", FIXTURE_62);
        return 1;
    }
    RUN(test_load_fixture_62);
    redis_major = 6;
    classify_tests();
    cmdtable_free(T);
    free(fixture);
    return unit_report();
}
