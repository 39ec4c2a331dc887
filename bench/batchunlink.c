/*
 * bench/batchunlink.c — JuiceFS's batch unlink of one flat directory, timed.
 *
 * Data model (--populate, directly on Redis): one directory, inode P (--parent,
 * default 1), with N files (--files, default 100000):
 *   i<P>        the directory's 72-byte attribute (--value-size)
 *   d<P>        hash, name "f<j>" -> 9-byte entry: type 1, inode big-endian u64
 *   i<ino>      each file's attribute, ino = P + 1 + j (j = 0 .. N-1)
 *   usedSpace   N * 4096        totalInodes  N + 1        delfiles deleted
 *
 * --unlink times what JuiceFS 1.4's doBatchUnlink sends (../shared/JUICEFS-REDIS.md
 * §2) for every file, in batches of 250 entries (--batch), each batch one
 * go-redis transaction on one connection, each line below one round trip:
 *   WATCH i<P> d<P>
 *   GET i<P>
 *   HMGET d<P> names...
 *   WATCH i<ino>...             (every inode the HMGET returned)
 *   MGET i<ino>...
 *   MULTI; HDEL d<P> names...; per file ZADD delfiles <now> <ino>:4096,
 *     DEL i<ino>, INCRBY usedSpace -4096, DECR totalInodes; SET i<P>; EXEC
 *                               (the whole block in one write)
 *   UNWATCH
 * --fused-watch: each WATCH is sent with the read after it (one write, one
 * round trip) and UNWATCH is left out: the 4 round trips a batch that
 * sidecache's watch-ahead leaves to Redis, without the 3 it answers itself
 * (through bench/relay.c: what those 4 cost through a hop that does nothing
 * else).
 * A nil EXEC (a WATCH conflict) restarts the batch after JuiceFS's back-off
 * (a random 0 .. n^2-1 ms after the n-th conflict; at most 50 attempts).
 * --pair-port / --pair-socket: a second target (its own Redis, populated
 * alike) runs every batch too, in turn with the first, which one first
 * alternating: on a shared host both then meet the same moments of load
 * (bench/batch_unlink_paired.sh). Each gets its CSV line, its seconds the
 * sum of its own batches, and stderr "batchunlink: paired PAIR/LABEL RATIO".
 * --pair-block N: the targets take turns every N batches instead of every
 * batch (the same batches run on both, in turn). A turn of one batch (a few
 * ms) wakes the processes of a target from a sleep as long as the other's
 * batch, their caches filled with the other's data: a cost that a client
 * running on one target never pays, and that a target holding much memory
 * (sidecache's cache) pays more of. Longer turns keep the processes warm,
 * and still share the host's load of each moment out alike.
 *
 * --writes times the write-only counterpart: the same directory created
 * through the target, each batch one pipelined write of SET i<ino> and
 * HSET d<P> name entry per file (500 commands for 250 files), replies awaited
 * before the next batch.
 *
 * --prewarm reads every key once through the target (pipelined): a cache in
 * front of Redis then holds the directory, as after a readdir and lookups.
 * --verify-empty checks, on the target, that d<P> has no field left, that
 * GET of every file's i<ino> and HGET of every name is nil (through a cache,
 * that no stale entry survived), and that the counters and delfiles account
 * for every file. --verify-full checks that every file and entry has the
 * value --writes (or --populate) gave it.
 *
 * Every reply is checked (an HDEL that removes fewer names than the batch, a
 * DEL that finds no key, a missing entry ... is an error). Output, CSV on
 * stdout for --unlink and --writes:
 *   label,mode,files,batches,round_trips,commands,conflicts,seconds,batch_p50_us,batch_p99_us,batch_max_us
 * With BATCHUNLINK_STEPS set in the environment, --unlink also prints the
 * mean time of each of the seven steps to stderr (where a target adds time;
 * with two targets, "step LABEL NAME ...");
 * with BATCHUNLINK_CPU set, the CPU time batchunlink itself spent in the
 * timed unlink ("batchunlink: cpu user_us U sys_us S", getrusage).
 * Exit status 0, 1 on a usage or connection error, 3 on a wrong reply or a
 * failed verification.
 *
 * Build: cc -O2 -Wall -Wextra -o bench/build/batchunlink bench/batchunlink.c -lhiredis
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "rng.h"

static struct {
    const char *host;
    int port;
    const char *socket; /* -s: a unix socket instead of host:port */
    uint32_t files, batch;
    uint64_t parent;
    int value_size;
    const char *label;
    int header, quiet;
    int fused_watch; /* --fused-watch: each WATCH goes with the read after it, no UNWATCH */
    int pair_port;            /* --pair-port: --unlink runs on a second target too */
    const char *pair_socket;  /* --pair-socket: the same, on a unix socket */
    const char *pair_label;   /* --pair-label: its CSV label */
    uint32_t pair_block;      /* --pair-block: batches a target runs in one turn */
} cfg = {.host = "127.0.0.1", .port = 6379, .files = 100000, .batch = 250, .parent = 1, .value_size = 72,
         .label = "-", .header = 1, .pair_label = "pair", .pair_block = 1};

/* A Redis endpoint the modes run against. --unlink with --pair-port or
 * --pair-socket has two, on two Redis servers holding the same directory,
 * and runs their batches alternately (do_unlink). */
typedef struct target {
    redisContext *rc;
    char name[128];            /* host:port or the socket path, for messages */
    const char *label;         /* first CSV column */
    uint64_t commands_sent, round_trips;
    uint64_t step_ns[7], step_n[7];
    uint64_t conflicts, seq;   /* WATCH conflicts; the directory's attribute versions */
    uint64_t busy_ns;          /* time in its own batches */
    uint64_t *bt;              /* each batch's time */
} target;
static target targets[2];
static int ntargets = 1;
static target *cur = &targets[0]; /* the one the commands go to */
static char first_error[512];
static long errors;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}


static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
    errors++;
    if (first_error[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(first_error, sizeof first_error, fmt, ap);
    va_end(ap);
}

static uint64_t file_ino(uint32_t j) { return cfg.parent + 1 + j; }

/* A --value-size attribute, ending in a zero byte like JuiceFS's Attr; seq
 * makes successive values of one inode differ. */
static void make_value(char *buf, uint64_t ino, uint64_t seq) {
    int n = cfg.value_size;
    memset(buf, 'a', (size_t)n);
    char tmp[48];
    int k = snprintf(tmp, sizeof tmp, "%" PRIu64 ":%" PRIu64, ino, seq);
    memcpy(buf, tmp, (size_t)(k < n ? k : n));
    buf[n - 1] = '\0';
}

static void make_entry(char buf[9], uint64_t ino) {
    buf[0] = 1;
    for (int i = 0; i < 8; i++) buf[1 + i] = (char)(ino >> (56 - 8 * i));
}

static uint64_t parse_entry(const redisReply *r) {
    if (r->type != REDIS_REPLY_STRING || r->len != 9 || r->str[0] != 1) return 0;
    uint64_t v = 0;
    for (int i = 1; i < 9; i++) v = v << 8 | (unsigned char)r->str[i];
    return v;
}

/* ------------------------------------------------------------------------ */
/* command building: an argument vector and an arena for formatted arguments */

typedef struct cmd {
    int argc, cap;
    const char **argv;
    size_t *argl;
    char *arena;
    size_t used, size;
} cmd;

static void cmd_init(cmd *c, int cap) {
    c->cap = cap;
    c->argv = malloc(sizeof *c->argv * (size_t)cap);
    c->argl = malloc(sizeof *c->argl * (size_t)cap);
    c->size = (size_t)cap * 32 + 8192;
    c->arena = malloc(c->size);
    if (!c->argv || !c->argl || !c->arena) {
        fprintf(stderr, "batchunlink: out of memory\n");
        exit(1);
    }
}

static void cmd_begin(cmd *c) { c->argc = 0; c->used = 0; }

static void cmd_arg(cmd *c, const char *p, size_t n) {
    if (c->argc == c->cap) {
        fprintf(stderr, "batchunlink: too many arguments\n");
        exit(1);
    }
    c->argv[c->argc] = p;
    c->argl[c->argc++] = n;
}

static void cmd_str(cmd *c, const char *s) { cmd_arg(c, s, strlen(s)); }

static void cmd_fmt(cmd *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cmd_fmt(cmd *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *p = c->arena + c->used;
    int n = vsnprintf(p, c->size - c->used, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= c->size - c->used) {
        fprintf(stderr, "batchunlink: argument arena full\n");
        exit(1);
    }
    c->used += (size_t)n + 1;
    cmd_arg(c, p, (size_t)n);
}

/* Queues the command (hiredis writes the queue on the next read). */
static void cmd_append(cmd *c) {
    if (redisAppendCommandArgv(cur->rc, c->argc, c->argv, c->argl) != REDIS_OK) {
        fprintf(stderr, "batchunlink: %s\n", cur->rc->errstr);
        exit(1);
    }
    cur->commands_sent++;
}

static redisReply *get_reply(void) {
    redisReply *r;
    if (redisGetReply(cur->rc, (void **)&r) != REDIS_OK) {
        fprintf(stderr, "batchunlink: %s: %s\n", cur->name, cur->rc->errstr);
        exit(1);
    }
    return r;
}

/* Sends what is queued and returns the n replies (a round trip). */
static redisReply **exchange(int n) {
    static redisReply **rs;
    static int cap;
    if (n > cap) {
        free(rs);
        rs = malloc(sizeof *rs * (size_t)n);
        if (rs == NULL) exit(1);
        cap = n;
    }
    for (int i = 0; i < n; i++) rs[i] = get_reply();
    cur->round_trips++;
    return rs;
}

static void free_replies(redisReply **rs, int n) {
    for (int i = 0; i < n; i++) freeReplyObject(rs[i]);
}

static int is_status(const redisReply *r, const char *s) {
    return (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING) && strcmp(r->str, s) == 0;
}

static void expect_status(const char *what, const redisReply *r, const char *s) {
    if (!is_status(r, s)) fail("%s: expected +%s, got %s", what, s, r->type == REDIS_REPLY_ERROR ? r->str : "another reply");
}

static void expect_int(const char *what, const redisReply *r, long long v) {
    if (r->type != REDIS_REPLY_INTEGER || r->integer != v)
        fail("%s: expected :%lld, got %s%lld", what, v, r->type == REDIS_REPLY_ERROR ? r->str : "",
             r->type == REDIS_REPLY_INTEGER ? r->integer : -1LL);
}

/* ------------------------------------------------------------------------ */
/* the modes */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t quantile(uint64_t *v, size_t n, double q) { /* v sorted */
    if (n == 0) return 0;
    size_t rank = (size_t)(q * (double)n + 0.999999);
    if (rank < 1) rank = 1;
    if (rank > n) rank = n;
    return v[rank - 1];
}

/* One CSV line for t (and the header before the first, unless --no-header). */
static void report(const target *tg, const char *mode, uint32_t batches, uint64_t conflicts, uint64_t t, uint64_t *bt) {
    static int headed;
    qsort(bt, batches, sizeof *bt, cmp_u64);
    if (cfg.header && !headed++)
        printf("label,mode,files,batches,round_trips,commands,conflicts,seconds,batch_p50_us,batch_p99_us,batch_max_us\n");
    printf("%s,%s,%u,%u,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%.4f,%.1f,%.1f,%.1f\n", tg->label, mode, cfg.files, batches,
           tg->round_trips, tg->commands_sent, conflicts, (double)t / 1e9, (double)quantile(bt, batches, 0.5) / 1e3,
           (double)quantile(bt, batches, 0.99) / 1e3, batches ? (double)bt[batches - 1] / 1e3 : 0.0);
    fflush(stdout);
}

static int do_populate(void) {
    cmd c;
    cmd_init(&c, 2 * 1000 + 8);
    char val[4096];
    make_value(val, cfg.parent, 0);
    cmd_begin(&c); cmd_str(&c, "DEL"); cmd_fmt(&c, "d%" PRIu64, cfg.parent); cmd_str(&c, "delfiles"); cmd_append(&c);
    cmd_begin(&c); cmd_str(&c, "SET"); cmd_fmt(&c, "i%" PRIu64, cfg.parent); cmd_arg(&c, val, (size_t)cfg.value_size);
    cmd_append(&c);
    cmd_begin(&c); cmd_str(&c, "SET"); cmd_str(&c, "usedSpace"); cmd_fmt(&c, "%llu", (unsigned long long)cfg.files * 4096);
    cmd_append(&c);
    cmd_begin(&c); cmd_str(&c, "SET"); cmd_str(&c, "totalInodes"); cmd_fmt(&c, "%u", cfg.files + 1); cmd_append(&c);
    free_replies(exchange(4), 4);
    static char ents[1000][9];
    for (uint32_t j0 = 0; j0 < cfg.files; j0 += 1000) {
        uint32_t n = cfg.files - j0 < 1000 ? cfg.files - j0 : 1000;
        cmd_begin(&c);
        cmd_str(&c, "HSET");
        cmd_fmt(&c, "d%" PRIu64, cfg.parent);
        for (uint32_t k = 0; k < n; k++) {
            cmd_fmt(&c, "f%u", j0 + k);
            make_entry(ents[k], file_ino(j0 + k));
            cmd_arg(&c, ents[k], 9);
        }
        cmd_append(&c);
        int q = 1;
        for (uint32_t k = 0; k < n; k++) {
            make_value(val, file_ino(j0 + k), 0);
            redisAppendCommand(cur->rc, "SET i%" PRIu64 " %b", file_ino(j0 + k), val, (size_t)cfg.value_size);
            cur->commands_sent++;
            q++;
        }
        redisReply **rs = exchange(q);
        expect_int("populate HSET", rs[0], n);
        for (int i = 1; i < q; i++) expect_status("populate SET", rs[i], "OK");
        free_replies(rs, q);
    }
    if (!cfg.quiet)
        fprintf(stderr, "batchunlink: populated d%" PRIu64 " with %u files on %s\n", cfg.parent, cfg.files, cur->name);
    return errors ? 3 : 0;
}

/* Per-step time of the unlink transaction, printed to stderr at the end
 * when BATCHUNLINK_STEPS is set: where a target spends its time. */
static const char *step_names[7] = {"WATCH i d", "GET i", "HMGET", "WATCH inodes", "MGET", "MULTI..EXEC", "UNWATCH"};

static redisReply **timed_exchange(int q, int step) {
    uint64_t t = now_ns();
    redisReply **rs = exchange(q);
    cur->step_ns[step] += now_ns() - t;
    cur->step_n[step]++;
    return rs;
}

/* With two targets, each line names its target's label after "step". */
static void print_steps(const target *t) {
    if (getenv("BATCHUNLINK_STEPS") == NULL) return;
    for (int i = 0; i < 7; i++)
        fprintf(stderr, "batchunlink: step%s%s %-13s mean %8.1f us\n", ntargets > 1 ? " " : "",
                ntargets > 1 ? t->label : "", step_names[i],
                t->step_n[i] ? (double)t->step_ns[i] / (double)t->step_n[i] / 1000.0 : 0.0);
}

/* The WATCH just queued: its round trip, timed as step `step`, returning 0;
 * with --fused-watch it stays queued and goes with the read after it in one
 * write, returning 1: that read's exchange gets the WATCH's reply first. */
static int watch_step(int step) {
    if (cfg.fused_watch) return 1;
    redisReply **rs = timed_exchange(1, step);
    expect_status(step_names[step], rs[0], "OK");
    free_replies(rs, 1);
    return 0;
}

/* This process's CPU time so far, user and system, in µs. */
static void cpu_us(uint64_t *user, uint64_t *sys) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *user = (uint64_t)ru.ru_utime.tv_sec * 1000000u + (uint64_t)ru.ru_utime.tv_usec;
    *sys = (uint64_t)ru.ru_stime.tv_sec * 1000000u + (uint64_t)ru.ru_stime.tv_usec;
}

/* Batch b of the unlink on the current target: one JuiceFS transaction,
 * run again after a WATCH conflict. j0, n: its files; c, inos: scratch. */
static void unlink_batch(uint32_t b, uint32_t j0, uint32_t n, cmd *c, uint64_t *inos) {
    char val[4096];
    for (int attempt = 1;; attempt++) {
        redisReply **rs;
        /* WATCH i<P> d<P> */
        cmd_begin(c); cmd_str(c, "WATCH"); cmd_fmt(c, "i%" PRIu64, cfg.parent); cmd_fmt(c, "d%" PRIu64, cfg.parent);
        cmd_append(c);
        int w = watch_step(0); /* the WATCH's reply when it comes with the GET's */
        /* GET i<P> */
        cmd_begin(c); cmd_str(c, "GET"); cmd_fmt(c, "i%" PRIu64, cfg.parent); cmd_append(c);
        rs = timed_exchange(1 + w, 1);
        if (w) expect_status("WATCH i d", rs[0], "OK");
        if (rs[w]->type != REDIS_REPLY_STRING) fail("GET i%" PRIu64 ": the directory's attribute is missing", cfg.parent);
        free_replies(rs, 1 + w);
        /* HMGET d<P> names... */
        cmd_begin(c); cmd_str(c, "HMGET"); cmd_fmt(c, "d%" PRIu64, cfg.parent);
        for (uint32_t k = 0; k < n; k++) cmd_fmt(c, "f%u", j0 + k);
        cmd_append(c);
        rs = timed_exchange(1, 2);
        uint32_t ni = 0;
        if (rs[0]->type != REDIS_REPLY_ARRAY || rs[0]->elements != n) {
            fail("HMGET: not an array of %u", n);
        } else {
            for (uint32_t k = 0; k < n; k++) {
                uint64_t ino = parse_entry(rs[0]->element[k]);
                if (ino != file_ino(j0 + k)) fail("HMGET d%" PRIu64 " f%u: missing or wrong entry", cfg.parent, j0 + k);
                else inos[ni++] = ino;
            }
        }
        free_replies(rs, 1);
        if (errors) break;
        /* WATCH i<ino>... ; MGET i<ino>... */
        cmd_begin(c); cmd_str(c, "WATCH");
        for (uint32_t k = 0; k < ni; k++) cmd_fmt(c, "i%" PRIu64, inos[k]);
        cmd_append(c);
        w = watch_step(3);
        cmd_begin(c); cmd_str(c, "MGET");
        for (uint32_t k = 0; k < ni; k++) cmd_fmt(c, "i%" PRIu64, inos[k]);
        cmd_append(c);
        rs = timed_exchange(1 + w, 4);
        if (w) expect_status("WATCH inodes", rs[0], "OK");
        if (rs[w]->type != REDIS_REPLY_ARRAY || rs[w]->elements != ni) {
            fail("MGET: not an array of %u", ni);
        } else {
            for (uint32_t k = 0; k < ni; k++)
                if (rs[w]->element[k]->type != REDIS_REPLY_STRING) fail("MGET i%" PRIu64 ": missing", inos[k]);
        }
        free_replies(rs, 1 + w);
        if (errors) break;
        /* MULTI ... EXEC, one write */
        char now[32];
        snprintf(now, sizeof now, "%lld", (long long)time(NULL));
        int q = 0;
        cmd_begin(c); cmd_str(c, "MULTI"); cmd_append(c); q++;
        cmd_begin(c); cmd_str(c, "HDEL"); cmd_fmt(c, "d%" PRIu64, cfg.parent);
        for (uint32_t k = 0; k < n; k++) cmd_fmt(c, "f%u", j0 + k);
        cmd_append(c); q++;
        for (uint32_t k = 0; k < ni; k++) {
            cmd_begin(c); cmd_str(c, "ZADD"); cmd_str(c, "delfiles"); cmd_str(c, now);
            cmd_fmt(c, "%" PRIu64 ":4096", inos[k]); cmd_append(c);
            cmd_begin(c); cmd_str(c, "DEL"); cmd_fmt(c, "i%" PRIu64, inos[k]); cmd_append(c);
            cmd_begin(c); cmd_str(c, "INCRBY"); cmd_str(c, "usedSpace"); cmd_str(c, "-4096"); cmd_append(c);
            cmd_begin(c); cmd_str(c, "DECR"); cmd_str(c, "totalInodes"); cmd_append(c);
            q += 4;
        }
        make_value(val, cfg.parent, ++cur->seq);
        cmd_begin(c); cmd_str(c, "SET"); cmd_fmt(c, "i%" PRIu64, cfg.parent); cmd_arg(c, val, (size_t)cfg.value_size);
        cmd_append(c); q++;
        cmd_begin(c); cmd_str(c, "EXEC"); cmd_append(c); q++;
        rs = timed_exchange(q, 5);
        expect_status("MULTI", rs[0], "OK");
        for (int i = 1; i < q - 1; i++) expect_status("queued command", rs[i], "QUEUED");
        redisReply *ex = rs[q - 1];
        int conflict = 0;
        if (ex->type == REDIS_REPLY_NIL) {
            conflict = 1;
        } else if (ex->type != REDIS_REPLY_ARRAY || ex->elements != (size_t)(q - 2)) {
            fail("EXEC: %s", ex->type == REDIS_REPLY_ERROR ? ex->str : "not an array of the queued commands' replies");
        } else {
            expect_int("HDEL", ex->element[0], n);
            for (uint32_t k = 0; k < ni; k++) {
                expect_int("ZADD delfiles", ex->element[1 + 4 * k], 1);
                expect_int("DEL i", ex->element[2 + 4 * k], 1);
                if (ex->element[3 + 4 * k]->type != REDIS_REPLY_INTEGER) fail("INCRBY usedSpace: not an integer");
                if (ex->element[4 + 4 * k]->type != REDIS_REPLY_INTEGER) fail("DECR totalInodes: not an integer");
            }
            expect_status("SET i<parent>", ex->element[1 + 4 * ni], "OK");
        }
        free_replies(rs, q);
        /* UNWATCH (go-redis Tx.Close); after EXEC Redis watches
         * nothing anyway, so --fused-watch leaves it out */
        if (!cfg.fused_watch) {
            cmd_begin(c); cmd_str(c, "UNWATCH"); cmd_append(c);
            rs = timed_exchange(1, 6);
            expect_status("UNWATCH", rs[0], "OK");
            free_replies(rs, 1);
        }
        if (!conflict || errors) break;
        cur->conflicts++;
        if (attempt >= 50) {
            fail("batch %u: 50 WATCH conflicts in a row", b);
            break;
        }
        long ms = (long)(rng_next() % (uint64_t)(attempt * attempt));
        if (ms > 0) usleep((useconds_t)ms * 1000);
    }
}

static int do_unlink(void) {
    uint32_t nb = (cfg.files + cfg.batch - 1) / cfg.batch;
    uint64_t *inos = malloc(sizeof *inos * cfg.batch);
    cmd c;
    cmd_init(&c, (int)cfg.batch + 8);
    if (inos == NULL) return 1;
    for (int i = 0; i < ntargets; i++)
        if ((targets[i].bt = calloc(nb + 1, sizeof *targets[i].bt)) == NULL) return 1;
    uint64_t u0, s0;
    cpu_us(&u0, &s0);
    uint64_t t0 = now_ns();
    uint32_t turn = ntargets > 1 ? cfg.pair_block : nb;
    for (uint32_t b0 = 0, t = 0; b0 < nb && errors == 0; b0 += turn, t++) {
        uint32_t b1 = nb - b0 < turn ? nb : b0 + turn;
        /* two targets: each runs batches b0 .. b1-1 in turn, which goes
         * first alternating, so that the machine's load from one moment to
         * the next (a shared host's) falls on both alike */
        for (int k = 0; k < ntargets && errors == 0; k++) {
            cur = &targets[(k + (int)t) % ntargets];
            for (uint32_t b = b0; b < b1 && errors == 0; b++) {
                uint32_t j0 = b * cfg.batch, n = cfg.files - j0 < cfg.batch ? cfg.files - j0 : cfg.batch;
                uint64_t tb = now_ns();
                unlink_batch(b, j0, n, &c, inos);
                cur->bt[b] = now_ns() - tb;
                cur->busy_ns += cur->bt[b];
            }
        }
    }
    uint64_t t = now_ns() - t0;
    for (int i = 0; i < ntargets; i++) {
        target *x = &targets[i];
        /* one target: the whole run; two: the time in its own batches */
        if (errors == 0) report(x, "unlink", nb, x->conflicts, ntargets > 1 ? x->busy_ns : t, x->bt);
        print_steps(x);
        free(x->bt);
        x->bt = NULL;
    }
    if (ntargets > 1 && errors == 0)
        fprintf(stderr, "batchunlink: paired %s/%s %.4f\n", targets[1].label, targets[0].label,
                (double)targets[1].busy_ns / (double)targets[0].busy_ns);
    if (getenv("BATCHUNLINK_CPU") != NULL) {
        uint64_t u1, s1;
        cpu_us(&u1, &s1);
        fprintf(stderr, "batchunlink: cpu user_us %" PRIu64 " sys_us %" PRIu64 "\n", u1 - u0, s1 - s0);
    }
    free(inos);
    return errors ? 3 : 0;
}

static int do_writes(void) {
    uint32_t nb = (cfg.files + cfg.batch - 1) / cfg.batch;
    uint64_t *bt = calloc(nb + 1, sizeof *bt);
    if (bt == NULL) return 1;
    char val[4096], ent[9];
    uint64_t t0 = now_ns();
    for (uint32_t b = 0; b < nb && errors == 0; b++) {
        uint32_t j0 = b * cfg.batch, n = cfg.files - j0 < cfg.batch ? cfg.files - j0 : cfg.batch;
        uint64_t tb = now_ns();
        for (uint32_t k = 0; k < n; k++) {
            uint64_t ino = file_ino(j0 + k);
            make_value(val, ino, 1);
            make_entry(ent, ino);
            redisAppendCommand(cur->rc, "SET i%" PRIu64 " %b", ino, val, (size_t)cfg.value_size);
            redisAppendCommand(cur->rc, "HSET d%" PRIu64 " f%u %b", cfg.parent, j0 + k, ent, (size_t)9);
            cur->commands_sent += 2;
        }
        redisReply **rs = exchange((int)(2 * n));
        for (uint32_t k = 0; k < n; k++) {
            expect_status("SET i", rs[2 * k], "OK");
            expect_int("HSET d", rs[2 * k + 1], 1);
        }
        free_replies(rs, (int)(2 * n));
        bt[b] = now_ns() - tb;
    }
    uint64_t t = now_ns() - t0;
    if (errors == 0) report(cur, "writes", nb, 0, t, bt);
    free(bt);
    return errors ? 3 : 0;
}

/* Reads (full) or checks the absence of (!full) every file's i<ino> and entry,
 * pipelined by 1000 files. prewarm: read only, any value accepted. */
static void read_all(int full, int prewarm) {
    char val[4096], ent[9];
    for (uint32_t j0 = 0; j0 < cfg.files; j0 += 500) {
        uint32_t n = cfg.files - j0 < 500 ? cfg.files - j0 : 500;
        for (uint32_t k = 0; k < n; k++) {
            redisAppendCommand(cur->rc, "GET i%" PRIu64, file_ino(j0 + k));
            redisAppendCommand(cur->rc, "HGET d%" PRIu64 " f%u", cfg.parent, j0 + k);
            cur->commands_sent += 2;
        }
        redisReply **rs = exchange((int)(2 * n));
        for (uint32_t k = 0; k < n && errors < 10; k++) {
            uint64_t ino = file_ino(j0 + k);
            const redisReply *a = rs[2 * k], *e = rs[2 * k + 1];
            if (prewarm) {
                if (a->type == REDIS_REPLY_ERROR || e->type == REDIS_REPLY_ERROR) fail("prewarm: error reply");
            } else if (!full) {
                if (a->type != REDIS_REPLY_NIL) fail("GET i%" PRIu64 ": the unlinked file's attribute is still there", ino);
                if (e->type != REDIS_REPLY_NIL) fail("HGET d%" PRIu64 " f%u: the unlinked entry is still there", cfg.parent, j0 + k);
            } else {
                make_value(val, ino, 1);
                make_entry(ent, ino);
                if (a->type != REDIS_REPLY_STRING || a->len != (size_t)cfg.value_size ||
                    memcmp(a->str, val, (size_t)cfg.value_size) != 0)
                    fail("GET i%" PRIu64 ": missing or not the value written", ino);
                if (e->type != REDIS_REPLY_STRING || e->len != 9 || memcmp(e->str, ent, 9) != 0)
                    fail("HGET d%" PRIu64 " f%u: missing or not the entry written", cfg.parent, j0 + k);
            }
        }
        free_replies(rs, (int)(2 * n));
    }
}

static long long int_reply(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(cur->rc, fmt, ap);
    va_end(ap);
    if (r == NULL) {
        fprintf(stderr, "batchunlink: %s\n", cur->rc->errstr);
        exit(1);
    }
    long long v = -1;
    if (r->type == REDIS_REPLY_INTEGER) v = r->integer;
    else if (r->type == REDIS_REPLY_STRING) v = strtoll(r->str, NULL, 10);
    else if (r->type == REDIS_REPLY_NIL) v = 0;
    freeReplyObject(r);
    return v;
}

static int do_verify(int full) {
    long long hlen = int_reply("HLEN d%" PRIu64, cfg.parent);
    if (hlen != (full ? (long long)cfg.files : 0))
        fail("HLEN d%" PRIu64 " is %lld, not %u", cfg.parent, hlen, full ? cfg.files : 0);
    read_all(full, 0);
    if (!full) {
        long long used = int_reply("GET usedSpace"), total = int_reply("GET totalInodes");
        long long zc = int_reply("ZCARD delfiles");
        if (used != 0) fail("usedSpace is %lld, not 0", used);
        if (total != 1) fail("totalInodes is %lld, not 1", total);
        if (zc != (long long)cfg.files) fail("delfiles has %lld members, not %u", zc, cfg.files);
        if (int_reply("EXISTS i%" PRIu64, cfg.parent) != 1) fail("the directory's attribute i%" PRIu64 " is gone", cfg.parent);
    }
    if (!cfg.quiet || errors)
        fprintf(stderr, "batchunlink: %s: d%" PRIu64 " %s: %s\n", cur->name, cfg.parent,
                full ? "full" : "empty", errors ? first_error : "verified");
    return errors ? 3 : 0;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: batchunlink [-h HOST] [-p PORT | -s SOCKET] MODE [options]\n"
            "modes (one):\n"
            "  --populate       create the directory and its files (on Redis itself)\n"
            "  --unlink         time JuiceFS's batch unlink of every file (through the target)\n"
            "  --writes         time creating every file with SET/HSET pipelines (through the target)\n"
            "  --prewarm        read every file's attribute and entry once\n"
            "  --verify-empty   check that no file, entry or cached copy is left; counters\n"
            "  --verify-full    check every file and entry --writes wrote\n"
            "options:\n"
            "  --files N        files in the directory (100000)\n"
            "  --batch N        entries per transaction / pipeline (250)\n"
            "  --parent INO     the directory's inode (1)\n"
            "  --value-size N   attribute bytes (72)\n"
            "  --label TEXT     first CSV column (-)\n"
            "  --no-header      no CSV header\n"
            "  --seed N         random seed (back-off)\n"
            "  --quiet          nothing on stderr but errors\n"
            "  --fused-watch    --unlink sends each WATCH with the read after it, and no UNWATCH\n"
            "                   (4 round trips a batch, as sidecache's watch-ahead makes them)\n"
            "  --pair-port N | --pair-socket PATH\n"
            "                   --unlink on this second target too (same host; its own Redis,\n"
            "                   populated alike): batch by batch, each target in turn, which\n"
            "                   one first alternating; a CSV line each, seconds = the time in\n"
            "                   its own batches; stderr: batchunlink: paired PAIR/LABEL RATIO\n"
            "  --pair-label TEXT  the second target's CSV label (pair)\n"
            "  --pair-block N   with a second target: take turns every N batches (1)\n");
}

/* Connects t to socket_path, or to cfg.host:port. Returns 0, or 1 (said). */
static int target_connect(target *t, const char *socket_path, int port) {
    struct timeval tv = {30, 0};
    if (socket_path != NULL) {
        snprintf(t->name, sizeof t->name, "%s", socket_path);
        t->rc = redisConnectUnixWithTimeout(socket_path, tv);
    } else {
        snprintf(t->name, sizeof t->name, "%s:%d", cfg.host, port);
        t->rc = redisConnectWithTimeout(cfg.host, port, tv);
    }
    if (t->rc == NULL || t->rc->err) {
        fprintf(stderr, "batchunlink: cannot connect to %s: %s\n", t->name, t->rc ? t->rc->errstr : "oom");
        return 1;
    }
    redisSetTimeout(t->rc, tv);
    return 0;
}

int main(int argc, char **argv) {
    enum { O_POPULATE = 256, O_UNLINK, O_WRITES, O_PREWARM, O_VEMPTY, O_VFULL, O_FILES, O_BATCH, O_PARENT, O_VALSZ,
           O_LABEL, O_NOHEADER, O_SEED, O_QUIET, O_FUSED, O_PAIR_PORT, O_PAIR_SOCKET, O_PAIR_LABEL, O_PAIR_BLOCK, O_HELP };
    static const struct option lopts[] = {
        {"populate", 0, 0, O_POPULATE}, {"unlink", 0, 0, O_UNLINK},   {"writes", 0, 0, O_WRITES},
        {"prewarm", 0, 0, O_PREWARM},   {"verify-empty", 0, 0, O_VEMPTY}, {"verify-full", 0, 0, O_VFULL},
        {"files", 1, 0, O_FILES},       {"batch", 1, 0, O_BATCH},     {"parent", 1, 0, O_PARENT},
        {"value-size", 1, 0, O_VALSZ},  {"label", 1, 0, O_LABEL},     {"no-header", 0, 0, O_NOHEADER},
        {"seed", 1, 0, O_SEED},         {"quiet", 0, 0, O_QUIET},     {"fused-watch", 0, 0, O_FUSED},
        {"pair-port", 1, 0, O_PAIR_PORT}, {"pair-socket", 1, 0, O_PAIR_SOCKET}, {"pair-label", 1, 0, O_PAIR_LABEL},
        {"pair-block", 1, 0, O_PAIR_BLOCK}, {"help", 0, 0, O_HELP},
        {0, 0, 0, 0}};
    int opt, mode = 0;
    while ((opt = getopt_long(argc, argv, "h:p:s:", lopts, NULL)) != -1) {
        switch (opt) {
        case 'h': cfg.host = optarg; break;
        case 'p': cfg.port = atoi(optarg); break;
        case 's': cfg.socket = optarg; break;
        case O_POPULATE: case O_UNLINK: case O_WRITES: case O_PREWARM: case O_VEMPTY: case O_VFULL:
            if (mode) {
                fprintf(stderr, "batchunlink: one mode at a time\n");
                return 1;
            }
            mode = opt;
            break;
        case O_FILES: cfg.files = (uint32_t)strtoul(optarg, NULL, 10); break;
        case O_BATCH: cfg.batch = (uint32_t)strtoul(optarg, NULL, 10); break;
        case O_PARENT: cfg.parent = strtoull(optarg, NULL, 10); break;
        case O_VALSZ: cfg.value_size = atoi(optarg); break;
        case O_LABEL: cfg.label = optarg; break;
        case O_NOHEADER: cfg.header = 0; break;
        case O_SEED: rng_state = seed_state(strtoull(optarg, NULL, 10)); break;
        case O_QUIET: cfg.quiet = 1; break;
        case O_FUSED: cfg.fused_watch = 1; break;
        case O_PAIR_PORT: cfg.pair_port = atoi(optarg); break;
        case O_PAIR_SOCKET: cfg.pair_socket = optarg; break;
        case O_PAIR_LABEL: cfg.pair_label = optarg; break;
        case O_PAIR_BLOCK: cfg.pair_block = (uint32_t)strtoul(optarg, NULL, 10); break;
        case O_HELP: usage(stdout); return 0;
        default: usage(stderr); return 1;
        }
    }
    if (optind < argc || mode == 0 || cfg.port <= 0 || cfg.port > 65535 || cfg.files < 1 || cfg.files > 100000000 ||
        cfg.batch < 1 || cfg.batch > 100000 || cfg.pair_block < 1 || cfg.parent < 1 || cfg.value_size < 1 || cfg.value_size > 4096) {
        usage(stderr);
        return 1;
    }
    int paired = cfg.pair_port != 0 || cfg.pair_socket != NULL;
    if (paired && (mode != O_UNLINK || cfg.pair_port < 0 || cfg.pair_port > 65535)) {
        fprintf(stderr, "batchunlink: --pair-port or --pair-socket go with --unlink only\n");
        return 1;
    }
    targets[0].label = cfg.label;
    if (target_connect(&targets[0], cfg.socket, cfg.port) != 0) return 1;
    if (paired) {
        ntargets = 2;
        targets[1].label = cfg.pair_label;
        if (target_connect(&targets[1], cfg.pair_socket, cfg.pair_port) != 0) return 1;
    }
    int ret;
    switch (mode) {
    case O_POPULATE: ret = do_populate(); break;
    case O_UNLINK: ret = do_unlink(); break;
    case O_WRITES: ret = do_writes(); break;
    case O_PREWARM: read_all(0, 1); ret = errors ? 3 : 0; break;
    case O_VEMPTY: ret = do_verify(0); break;
    default: ret = do_verify(1); break;
    }
    if (errors) fprintf(stderr, "batchunlink: %ld wrong replies; first: %s\n", errors, first_error);
    for (int i = 0; i < ntargets; i++) redisFree(targets[i].rc);
    return ret;
}
