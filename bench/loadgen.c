/*
 * bench/loadgen.c — a Redis load driver for sidecache's benchmarks.
 *
 * One thread, one libevent loop, one hiredis async context per connection.
 * Each connection keeps up to -P operations in flight. An operation ("op") is
 * a small program of steps; a step is one or more commands written together
 * (pipelined), and the next step starts when every reply of the step is in.
 * Latency is measured per op, from the first command issued to the last reply
 * of the last step, into a log-linear histogram per op type.
 *
 * Data model (created by --populate, directly on Redis), JuiceFS-shaped:
 *   ndirs = ceil(keys / dir-size) directories, inode 2 + k   (k < ndirs)
 *   keys files, file j has inode 2 + ndirs + j and lives in directory j % ndirs
 *   i<ino>  string, a 72-byte attribute (--value-size)
 *   d<dir>  hash, name "f<j>" -> 9-byte entry (type 1, inode big-endian u64)
 *   usedSpace, totalInodes  counters
 * Ops pick a file j from the key distribution (hot: j = 0; uniform; zipf s;
 * seq: 0, 1, 2, ... in turn, to read every file once; an mget takes the next
 * --mget-keys files).
 *
 * Op types (weights in --mix name=weight,...):
 *   get      GET i<ino>                          hget   HGET d<dir> f<j>
 *   set      SET i<ino> <value>                  hset   HSET d<dir> f<j> <entry>
 *   mget     MGET of --mget-keys inode keys      multi  MULTI SET i SET i<dir> EXEC (no WATCH)
 *   evalsha  EVALSHA <JuiceFS lookup script> 2 d<dir> f<j>
 *   getattr  GET i<ino> (JuiceFS getattr)
 *   lookup   EVALSHA <JuiceFS lookup script> 2 d<dir> f<j>: what JuiceFS sends
 *            once SCRIPT LOAD succeeded (no key prefix); the reply must be
 *            [ino, attr] of the file
 *   lookupkv HGET d<dir> f<j>, then GET i<ino of the entry>: JuiceFS's
 *            fallback (key prefix, or the script disabled)
 *   readdir  GET i<dir>; HSCAN d<dir> 0 MATCH * COUNT 10000; MGET of the inodes listed
 *   create   WATCH i<p> d<p>; GET i<p>; HGET d<p> name;
 *            MULTI SET i<new> SET i<p> HSET d<p> INCRBY usedSpace INCR totalInodes EXEC; UNWATCH
 *   unlink   (of a file this run created) WATCH i<p> d<p>; HGET d<p> name; WATCH i<ino>;
 *            MGET i<p> i<ino>; MULTI HDEL SET i<p> ZADD delfiles DEL i<ino> INCRBY DECR EXEC; UNWATCH
 * create and unlink are transactions as JuiceFS runs them (go-redis Tx): each
 * step waits for the previous one, a nil EXEC (WATCH conflict) restarts the op
 * after JuiceFS's back-off (rand % n^2 ms after the n-th conflict; at most 50
 * attempts, counted as conflicts), and the op has its connection to itself. An unlink with no file of this run left to remove runs as a create.
 *
 * --check-commandstats: the driver checks itself against Redis. It counts
 * every command it sends, by name (commands queued in a MULTI only when EXEC
 * ran them, and the HGET/GET that the lookup script calls), and compares the
 * counts with the deltas of Redis's INFO commandstats calls over the run; the
 * target must be Redis itself, used by nothing else meanwhile.
 *
 * Output: CSV on stdout, one line per op type that ran plus "total":
 *   label,op,count,errors,conflicts,ops_per_s,mean_us,p50_us,p99_us,p999_us,max_us
 * Exit status: 0, 1 on a usage or connection error, 3 when any reply was an
 * error (unless --allow-errors), 4 when ops were still in flight 10 s after the
 * end, 5 when --check-commandstats found a difference.
 *
 * Build: cc -O2 -Wall -o bench/build/loadgen bench/loadgen.c -lhiredis -levent -lm
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "rng.h"

/* ------------------------------------------------------------------------ */
/* histogram: log-linear buckets over nanoseconds
 *
 * Values below 2^(SUB_BITS+1) get a bucket each; above, every power of two
 * [2^m, 2^(m+1)) is split into 2^SUB_BITS equal buckets, so a bucket is at
 * most 1/64 of its values wide and its midpoint is within 0.8 % of any value
 * in it. Index of v >= 128: 64 * shift + (v >> shift), shift = msb(v) - 6. */

#define HIST_SUB_BITS 6
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_NBUCKETS (HIST_SUB * 59) /* up to 2^64 - 1 */

typedef struct hist {
    uint64_t count, min, max;
    double sum;
    uint64_t b[HIST_NBUCKETS];
} hist;

static unsigned hist_index(uint64_t v) {
    if (v < 2 * HIST_SUB) return (unsigned)v;
    unsigned msb = 63u - (unsigned)__builtin_clzll(v);
    unsigned shift = msb - HIST_SUB_BITS;
    return HIST_SUB * shift + (unsigned)(v >> shift);
}

/* The smallest and largest value that land in bucket i. */
static void hist_bounds(unsigned i, uint64_t *lo, uint64_t *hi) {
    if (i < 2 * HIST_SUB) {
        *lo = *hi = i;
        return;
    }
    unsigned shift = i / HIST_SUB - 1;
    uint64_t m = i - HIST_SUB * shift;
    *lo = m << shift;
    *hi = ((m + 1) << shift) - 1;
}

static void hist_reset(hist *h) { memset(h, 0, sizeof *h); }

static void hist_add(hist *h, uint64_t v) {
    if (h->count == 0 || v < h->min) h->min = v;
    if (v > h->max) h->max = v;
    h->count++;
    h->sum += (double)v;
    h->b[hist_index(v)]++;
}

static void hist_merge(hist *dst, const hist *src) {
    if (src->count == 0) return;
    if (dst->count == 0 || src->min < dst->min) dst->min = src->min;
    if (src->max > dst->max) dst->max = src->max;
    dst->count += src->count;
    dst->sum += src->sum;
    for (unsigned i = 0; i < HIST_NBUCKETS; i++) dst->b[i] += src->b[i];
}

/* The value at quantile q (0 < q <= 1): the smallest recorded value v with at
 * least ceil(q * count) values <= v, as the midpoint of its bucket, clamped
 * to [min, max]. 0 for an empty histogram. */
static double hist_quantile(const hist *h, double q) {
    if (h->count == 0) return 0;
    uint64_t rank = (uint64_t)ceil(q * (double)h->count);
    if (rank < 1) rank = 1;
    if (rank > h->count) rank = h->count;
    uint64_t cum = 0;
    for (unsigned i = 0; i < HIST_NBUCKETS; i++) {
        cum += h->b[i];
        if (cum >= rank) {
            uint64_t lo, hi;
            hist_bounds(i, &lo, &hi);
            double v = ((double)lo + (double)hi) / 2;
            if (v < (double)h->min) v = (double)h->min;
            if (v > (double)h->max) v = (double)h->max;
            return v;
        }
    }
    return (double)h->max;
}

/* ------------------------------------------------------------------------ */
/* random numbers and key distributions */


static double rng_unit(void) { return (double)(rng_next() >> 11) * 0x1.0p-53; } /* [0, 1) */

enum { DIST_UNIFORM, DIST_HOT, DIST_ZIPF, DIST_SEQ };

typedef struct keydist {
    int kind;
    uint32_t n;
    double *cdf; /* zipf: cdf[r] = P(rank <= r) */
    uint64_t next; /* seq: the next file */
} keydist;

static int keydist_init(keydist *d, int kind, uint32_t n, double s) {
    d->kind = kind;
    d->n = n;
    d->cdf = NULL;
    d->next = 0;
    if (kind != DIST_ZIPF) return 0;
    d->cdf = malloc(sizeof(double) * n);
    if (d->cdf == NULL) return -1;
    double sum = 0;
    for (uint32_t r = 0; r < n; r++) {
        sum += 1.0 / pow((double)r + 1, s);
        d->cdf[r] = sum;
    }
    for (uint32_t r = 0; r < n; r++) d->cdf[r] /= sum;
    d->cdf[n - 1] = 1.0;
    return 0;
}

/* A file index in [0, n): rank 0 (file 0) is the hottest under zipf; seq
 * takes 0, 1, ... n-1, 0, ... (each file once per n ops). */
static uint32_t keydist_next(keydist *d) {
    switch (d->kind) {
    case DIST_HOT: return 0;
    case DIST_SEQ: return (uint32_t)(d->next++ % d->n);
    case DIST_UNIFORM: return (uint32_t)(rng_next() % d->n);
    default: {
        double u = rng_unit();
        uint32_t lo = 0, hi = d->n - 1;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (d->cdf[mid] < u)
                lo = mid + 1;
            else
                hi = mid;
        }
        return lo;
    }
    }
}

/* ------------------------------------------------------------------------ */
/* op types, mixes */

enum {
    OP_GET, OP_HGET, OP_SET, OP_HSET, OP_MGET, OP_EVALSHA, OP_MULTI,
    OP_GETATTR, OP_LOOKUP, OP_LOOKUPKV, OP_READDIR, OP_CREATE, OP_UNLINK, OP_NTYPES
};
static const char *const op_names[OP_NTYPES] = {"get",     "hget",   "set",      "hset",    "mget",
                                                "evalsha", "multi",  "getattr",  "lookup",  "lookupkv",
                                                "readdir", "create", "unlink"};

#define INO_BLOCK 100000000ull /* inode numbers reserved per run for create */

static int op_is_txn(int t) { return t == OP_CREATE || t == OP_UNLINK; }

static const struct {
    const char *name, *spec;
} mix_presets[] = {
    /* 90 % reads: lookup (the EVALSHA script), getattr, readdir(plus); 10 % writes: create, unlink */
    {"juicefs90", "lookup=400,getattr=450,readdir=50,create=50,unlink=50"},
    {"juicefs99", "lookup=440,getattr=500,readdir=50,create=5,unlink=5"},
    {"get", "get=1"},
    {"hget", "hget=1"},
};

/* The JuiceFS lookup script (pkg/meta/lua_scripts.go, scriptLookup), byte for
 * byte: its SHA1 is 8526c64984678fc27f67f44755c8ba7dcdf7ea60, which sidecache
 * knows as read-only. */
static const char lookup_script[] =
    "\nlocal buf = redis.call('HGET', KEYS[1], KEYS[2])\n"
    "if not buf then\n"
    "    error(\"ENOENT\")\n"
    "end\n"
    "local ino = struct.unpack(\">I8\", string.sub(buf, 2))\n"
    "-- double float has 52 significant bits\n"
    "if ino > 4503599627370495 then\n"
    "    error(\"ENOTSUP\")\n"
    "end\n"
    "return {ino, redis.call('GET', \"i\" .. string.format(\"%.f\", ino))}\n";
static const char lookup_sha[] = "8526c64984678fc27f67f44755c8ba7dcdf7ea60";

/* ------------------------------------------------------------------------ */
/* configuration and global state */

static struct {
    const char *host;
    int port;
    int conns, pipeline;
    double duration, warmup;
    uint64_t requests;
    uint32_t keys, dir_size, ndirs;
    int dist;
    double zipf_s;
    int mget_keys;
    int value_size;
    const char *label;
    int header, allow_errors, quiet;
    int populate, prewarm, check_stats;
    unsigned weights[OP_NTYPES];
    unsigned wsum;
} cfg = {
    .host = "127.0.0.1", .port = 6379, .conns = 1, .pipeline = 1, .duration = 10, .warmup = -1,
    .keys = 10000, .dir_size = 100, .dist = DIST_UNIFORM, .zipf_s = 0.99, .mget_keys = 16,
    .value_size = 72, .label = "-", .header = 1,
};

typedef struct conn conn;
typedef struct op op;

struct conn {
    redisAsyncContext *ac;
    int idx;
    int active;    /* ops in flight */
    int exclusive; /* a transaction holds the connection */
    int next_type; /* a transaction waiting for the connection to drain, or -1 */
    int connected, dead;
};

/* a file created by this run, for unlink to remove */
typedef struct created {
    uint32_t dir;
    uint64_t ino;
    char name[24];
} created;

struct op {
    conn *c;
    int type;
    int step;
    int pending;      /* replies outstanding in this step */
    int got;          /* replies received in this step */
    int exec_idx;     /* index of EXEC's reply in this step, or -1 */
    int failed;       /* an error reply or a lost connection */
    int conflict;     /* EXEC returned nil */
    int restart;      /* start over once UNWATCH is answered */
    int retries;
    uint32_t j, dir;  /* the file and its directory */
    uint64_t ino;     /* inode found or created */
    created item;     /* create/unlink: the entry */
    uint64_t *inos;   /* readdir: inodes listed by HSCAN */
    size_t ninos;
    uint64_t t0;
    int in_multi;     /* commands sent now are queued in a MULTI */
    int nqueued;      /* their command-name ids, counted when EXEC runs them */
    int queued[16];
};

enum { PH_CONNECT, PH_WARMUP, PH_MEASURE, PH_DRAIN };

static struct {
    struct event_base *base;
    conn *conns;
    int nconnected;
    int phase;
    uint64_t t_measure, t_end;   /* ns */
    uint64_t started, completed; /* ops, -n mode */
    uint64_t inflight;
    hist h[OP_NTYPES];
    uint64_t errors[OP_NTYPES], conflicts[OP_NTYPES];
    uint64_t errors_any;         /* whole run, warm-up included */
    char first_error[256];
    keydist kd;
    created *fifo;               /* ring of created files */
    size_t fifo_cap, fifo_head, fifo_len;
    uint64_t create_seq;
    uint64_t ino_base;           /* inodes of created files: ino_base + 1 ... */
    uint64_t value_seq;
    int fatal;
    struct event *stop_ev, *drain_ev;
} g;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint32_t dir_ino(uint32_t k) { return 2 + k; }
static uint64_t file_ino(uint32_t j) { return 2 + (uint64_t)cfg.ndirs + j; }
static uint32_t file_dir(uint32_t j) { return j % cfg.ndirs; }

/* A value of --value-size bytes, ending in a zero byte like JuiceFS's Attr;
 * seq makes it differ from the previous one. */
static void make_value(char *buf, uint64_t ino, uint64_t seq) {
    int n = cfg.value_size;
    memset(buf, 'a', (size_t)n);
    char tmp[48];
    int k = snprintf(tmp, sizeof tmp, "%" PRIu64 ":%" PRIu64, ino, seq);
    memcpy(buf, tmp, (size_t)(k < n ? k : n));
    if (n > 0) buf[n - 1] = '\0';
}

static void make_entry(char buf[9], uint64_t ino) {
    buf[0] = 1;
    for (int i = 0; i < 8; i++) buf[1 + i] = (char)(ino >> (56 - 8 * i));
}

static uint64_t parse_entry(const char *p, size_t len) {
    if (len != 9) return 0;
    uint64_t v = 0;
    for (int i = 1; i < 9; i++) v = v << 8 | (unsigned char)p[i];
    return v;
}

/* ------------------------------------------------------------------------ */
/* command building: one scratch area, used before the command is handed to
 * hiredis (which formats and copies it at once) */

#define MAX_ARGS 4200
static const char *argv_[MAX_ARGS];
static size_t argl_[MAX_ARGS];
static char argbuf_[MAX_ARGS * 24 + 65536];
static int argc_;
static size_t argoff_;

static void cmd_begin(void) {
    argc_ = 0;
    argoff_ = 0;
}

static void cmd_arg(const char *p, size_t n) {
    argv_[argc_] = p;
    argl_[argc_++] = n;
}

static void cmd_str(const char *s) { cmd_arg(s, strlen(s)); }

static void cmd_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void cmd_fmt(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *p = argbuf_ + argoff_;
    int n = vsnprintf(p, sizeof argbuf_ - argoff_, fmt, ap);
    va_end(ap);
    argoff_ += (size_t)n + 1;
    cmd_arg(p, (size_t)n);
}

static void on_reply(redisAsyncContext *ac, void *r, void *priv);

/* Commands sent, by lower-case name, as Redis's INFO commandstats counts
 * them (for --check-commandstats). */
#define MAX_CMDNAMES 64
static struct {
    char name[24];
    uint64_t sent;
} cmdcount[MAX_CMDNAMES];
static int ncmdnames;

static int cmdname_id(const char *p, size_t n) {
    char name[24];
    if (n >= sizeof name) n = sizeof name - 1;
    for (size_t i = 0; i < n; i++) name[i] = (char)(p[i] >= 'A' && p[i] <= 'Z' ? p[i] + 32 : p[i]);
    name[n] = '\0';
    for (int i = 0; i < ncmdnames; i++)
        if (strcmp(cmdcount[i].name, name) == 0) return i;
    if (ncmdnames == MAX_CMDNAMES) return MAX_CMDNAMES - 1;
    memcpy(cmdcount[ncmdnames].name, name, n + 1);
    return ncmdnames++;
}

static void cmdname_count(const char *name) { cmdcount[cmdname_id(name, strlen(name))].sent++; }

/* Sends the command built in the scratch area as part of op's current step. */
static void cmd_send(op *o) {
    if (o->c->dead) {
        o->failed = 1;
        return;
    }
    if (redisAsyncCommandArgv(o->c->ac, on_reply, o, argc_, argv_, argl_) != REDIS_OK) {
        o->failed = 1;
        return;
    }
    o->pending++;
    int id = cmdname_id(argv_[0], argl_[0]);
    if (strcmp(cmdcount[id].name, "multi") == 0) {
        cmdcount[id].sent++;
        o->in_multi = 1;
        o->nqueued = 0;
    } else if (strcmp(cmdcount[id].name, "exec") == 0) {
        cmdcount[id].sent++;
        o->in_multi = 0;
    } else if (o->in_multi && o->nqueued < (int)(sizeof o->queued / sizeof *o->queued)) {
        o->queued[o->nqueued++] = id;
    } else {
        cmdcount[id].sent++;
    }
}

static void record_error(op *o, const char *what) {
    if (g.first_error[0] == '\0')
        snprintf(g.first_error, sizeof g.first_error, "%s: %s", op_names[o->type], what);
    o->failed = 1;
}

/* ------------------------------------------------------------------------ */
/* op programs */

/* Issues the commands of o's current step. Returns 0 when the op has no step
 * left (it is complete), 1 when replies are awaited. */
static int op_issue(op *o) {
    char val[4096], ent[9];
    o->pending = 0;
    o->got = 0;
    o->exec_idx = -1;
    switch (o->type) {
    case OP_GET:
    case OP_GETATTR:
        if (o->step > 0) return 0;
        cmd_begin(); cmd_str("GET"); cmd_fmt("i%" PRIu64, file_ino(o->j)); cmd_send(o);
        break;
    case OP_HGET:
        if (o->step > 0) return 0;
        cmd_begin(); cmd_str("HGET"); cmd_fmt("d%u", dir_ino(o->dir)); cmd_fmt("f%u", o->j); cmd_send(o);
        break;
    case OP_SET:
        if (o->step > 0) return 0;
        make_value(val, file_ino(o->j), ++g.value_seq);
        cmd_begin(); cmd_str("SET"); cmd_fmt("i%" PRIu64, file_ino(o->j)); cmd_arg(val, (size_t)cfg.value_size);
        cmd_send(o);
        break;
    case OP_HSET:
        if (o->step > 0) return 0;
        make_entry(ent, file_ino(o->j));
        cmd_begin(); cmd_str("HSET"); cmd_fmt("d%u", dir_ino(o->dir)); cmd_fmt("f%u", o->j); cmd_arg(ent, 9);
        cmd_send(o);
        break;
    case OP_MGET:
        if (o->step > 0) return 0;
        cmd_begin(); cmd_str("MGET");
        for (int k = 0; k < cfg.mget_keys; k++) cmd_fmt("i%" PRIu64, file_ino((o->j + (uint32_t)k) % cfg.keys));
        cmd_send(o);
        break;
    case OP_EVALSHA:
        if (o->step > 0) return 0;
        cmd_begin(); cmd_str("EVALSHA"); cmd_str(lookup_sha); cmd_str("2"); cmd_fmt("d%u", dir_ino(o->dir));
        cmd_fmt("f%u", o->j); cmd_send(o);
        break;
    case OP_MULTI:
        if (o->step > 0) return 0;
        make_value(val, file_ino(o->j), ++g.value_seq);
        cmd_begin(); cmd_str("MULTI"); cmd_send(o);
        cmd_begin(); cmd_str("SET"); cmd_fmt("i%" PRIu64, file_ino(o->j)); cmd_arg(val, (size_t)cfg.value_size);
        cmd_send(o);
        cmd_begin(); cmd_str("SET"); cmd_fmt("i%u", dir_ino(o->dir)); cmd_arg(val, (size_t)cfg.value_size);
        cmd_send(o);
        o->exec_idx = o->pending;
        cmd_begin(); cmd_str("EXEC"); cmd_send(o);
        break;
    case OP_LOOKUP:
        if (o->step > 0) return 0;
        cmd_begin(); cmd_str("EVALSHA"); cmd_str(lookup_sha); cmd_str("2"); cmd_fmt("d%u", dir_ino(o->dir));
        cmd_fmt("f%u", o->j); cmd_send(o);
        break;
    case OP_LOOKUPKV:
        if (o->step == 0) {
            cmd_begin(); cmd_str("HGET"); cmd_fmt("d%u", dir_ino(o->dir)); cmd_fmt("f%u", o->j); cmd_send(o);
        } else if (o->step == 1 && o->ino != 0) {
            cmd_begin(); cmd_str("GET"); cmd_fmt("i%" PRIu64, o->ino); cmd_send(o);
        } else {
            return 0; /* ENOENT: JuiceFS stops after the HGET */
        }
        break;
    case OP_READDIR:
        if (o->step == 0) {
            cmd_begin(); cmd_str("GET"); cmd_fmt("i%u", dir_ino(o->dir)); cmd_send(o);
        } else if (o->step == 1) {
            cmd_begin(); cmd_str("HSCAN"); cmd_fmt("d%u", dir_ino(o->dir)); cmd_str("0"); cmd_str("MATCH");
            cmd_str("*"); cmd_str("COUNT"); cmd_str("10000"); cmd_send(o);
        } else if (o->step == 2 && o->ninos > 0) {
            for (size_t off = 0; off < o->ninos; off += 4096) {
                cmd_begin(); cmd_str("MGET");
                for (size_t k = off; k < o->ninos && k < off + 4096; k++) cmd_fmt("i%" PRIu64, o->inos[k]);
                cmd_send(o);
            }
        } else {
            return 0;
        }
        break;
    case OP_CREATE: {
        uint32_t p = dir_ino(o->item.dir);
        switch (o->step) {
        case 0: cmd_begin(); cmd_str("WATCH"); cmd_fmt("i%u", p); cmd_fmt("d%u", p); cmd_send(o); break;
        case 1: cmd_begin(); cmd_str("GET"); cmd_fmt("i%u", p); cmd_send(o); break;
        case 2: cmd_begin(); cmd_str("HGET"); cmd_fmt("d%u", p); cmd_str(o->item.name); cmd_send(o); break;
        case 3:
            make_value(val, o->item.ino, ++g.value_seq);
            make_entry(ent, o->item.ino);
            cmd_begin(); cmd_str("MULTI"); cmd_send(o);
            cmd_begin(); cmd_str("SET"); cmd_fmt("i%" PRIu64, o->item.ino); cmd_arg(val, (size_t)cfg.value_size);
            cmd_send(o);
            cmd_begin(); cmd_str("SET"); cmd_fmt("i%u", p); cmd_arg(val, (size_t)cfg.value_size); cmd_send(o);
            cmd_begin(); cmd_str("HSET"); cmd_fmt("d%u", p); cmd_str(o->item.name); cmd_arg(ent, 9); cmd_send(o);
            cmd_begin(); cmd_str("INCRBY"); cmd_str("usedSpace"); cmd_str("4096"); cmd_send(o);
            cmd_begin(); cmd_str("INCR"); cmd_str("totalInodes"); cmd_send(o);
            o->exec_idx = o->pending;
            cmd_begin(); cmd_str("EXEC"); cmd_send(o);
            break;
        case 4: cmd_begin(); cmd_str("UNWATCH"); cmd_send(o); break;
        default: return 0;
        }
        break;
    }
    case OP_UNLINK: {
        uint32_t p = dir_ino(o->item.dir);
        switch (o->step) {
        case 0: cmd_begin(); cmd_str("WATCH"); cmd_fmt("i%u", p); cmd_fmt("d%u", p); cmd_send(o); break;
        case 1: cmd_begin(); cmd_str("HGET"); cmd_fmt("d%u", p); cmd_str(o->item.name); cmd_send(o); break;
        case 2:
            if (o->ino == 0) { /* ENOENT: nothing to remove; release the WATCH */
                record_error(o, "the entry this run created is missing");
                o->step = 5;
                return op_issue(o);
            }
            cmd_begin(); cmd_str("WATCH"); cmd_fmt("i%" PRIu64, o->ino); cmd_send(o);
            break;
        case 3: cmd_begin(); cmd_str("MGET"); cmd_fmt("i%u", p); cmd_fmt("i%" PRIu64, o->ino); cmd_send(o); break;
        case 4:
            make_value(val, p, ++g.value_seq);
            cmd_begin(); cmd_str("MULTI"); cmd_send(o);
            cmd_begin(); cmd_str("HDEL"); cmd_fmt("d%u", p); cmd_str(o->item.name); cmd_send(o);
            cmd_begin(); cmd_str("SET"); cmd_fmt("i%u", p); cmd_arg(val, (size_t)cfg.value_size); cmd_send(o);
            cmd_begin(); cmd_str("ZADD"); cmd_str("delfiles"); cmd_fmt("%lld", (long long)time(NULL));
            cmd_fmt("%" PRIu64 ":4096", o->ino); cmd_send(o);
            cmd_begin(); cmd_str("DEL"); cmd_fmt("i%" PRIu64, o->ino); cmd_send(o);
            cmd_begin(); cmd_str("INCRBY"); cmd_str("usedSpace"); cmd_str("-4096"); cmd_send(o);
            cmd_begin(); cmd_str("DECR"); cmd_str("totalInodes"); cmd_send(o);
            o->exec_idx = o->pending;
            cmd_begin(); cmd_str("EXEC"); cmd_send(o);
            break;
        case 5: cmd_begin(); cmd_str("UNWATCH"); cmd_send(o); break;
        default: return 0;
        }
        break;
    }
    default: return 0;
    }
    if (o->pending == 0) { /* nothing could be sent: the connection is gone */
        o->failed = 1;
        return 0;
    }
    return 1;
}

/* What a step's reply tells the op (o->got is the reply's index in the step). */
static void op_on_reply(op *o, int idx, redisReply *r) {
    if (r == NULL) {
        record_error(o, "connection lost");
        return;
    }
    if (o->type == OP_LOOKUP || o->type == OP_EVALSHA) {
        /* the commands the script calls count in commandstats too */
        if (r->type == REDIS_REPLY_ARRAY) {
            cmdname_count("hget");
            cmdname_count("get");
        } else if (r->type == REDIS_REPLY_ERROR && (strstr(r->str, "ENOENT") || strstr(r->str, "ENOTSUP"))) {
            cmdname_count("hget");
        }
    }
    if (idx == o->exec_idx) {
        /* EXEC ran the queued commands unless it returned nil (or an error) */
        if (r->type == REDIS_REPLY_ARRAY)
            for (int i = 0; i < o->nqueued; i++) cmdcount[o->queued[i]].sent++;
        o->nqueued = 0;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        record_error(o, r->str);
        return;
    }
    if (idx == o->exec_idx && r->type == REDIS_REPLY_NIL) {
        o->conflict = 1;
        return;
    }
    switch (o->type) {
    case OP_LOOKUP:
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_INTEGER ||
            (uint64_t)r->element[0]->integer != file_ino(o->j) || r->element[1]->type != REDIS_REPLY_STRING)
            record_error(o, "the lookup script did not return [ino, attr] of the file");
        break;
    case OP_LOOKUPKV:
        if (o->step == 0) {
            o->ino = r->type == REDIS_REPLY_STRING ? parse_entry(r->str, (size_t)r->len) : 0;
            if (o->ino == 0) record_error(o, "no entry for a file of the data set");
        }
        break;
    case OP_CREATE:
        if (o->step == 2 && r->type != REDIS_REPLY_NIL) record_error(o, "the new name exists");
        break;
    case OP_UNLINK:
        if (o->step == 1) o->ino = r->type == REDIS_REPLY_STRING ? parse_entry(r->str, (size_t)r->len) : 0;
        break;
    case OP_READDIR:
        if (o->step == 1 && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[1]->type == REDIS_REPLY_ARRAY) {
            redisReply *a = r->element[1];
            free(o->inos);
            o->inos = malloc(sizeof(uint64_t) * (a->elements / 2 + 1));
            o->ninos = 0;
            if (o->inos == NULL) break;
            for (size_t k = 1; k < a->elements; k += 2) {
                uint64_t ino = a->element[k]->type == REDIS_REPLY_STRING
                                   ? parse_entry(a->element[k]->str, (size_t)a->element[k]->len)
                                   : 0;
                if (ino) o->inos[o->ninos++] = ino;
            }
        }
        break;
    }
}

static void fifo_push(const created *it) {
    if (g.fifo_len == g.fifo_cap) {
        size_t ncap = g.fifo_cap ? g.fifo_cap * 2 : 1024;
        created *n = malloc(sizeof *n * ncap);
        if (n == NULL) return; /* the file stays; harmless */
        for (size_t i = 0; i < g.fifo_len; i++) n[i] = g.fifo[(g.fifo_head + i) % g.fifo_cap];
        free(g.fifo);
        g.fifo = n;
        g.fifo_cap = ncap;
        g.fifo_head = 0;
    }
    g.fifo[(g.fifo_head + g.fifo_len) % g.fifo_cap] = *it;
    g.fifo_len++;
}

static int fifo_pop(created *it) {
    if (g.fifo_len == 0) return 0;
    *it = g.fifo[g.fifo_head];
    g.fifo_head = (g.fifo_head + 1) % g.fifo_cap;
    g.fifo_len--;
    return 1;
}

static int pick_type(void) {
    unsigned x = (unsigned)(rng_next() % cfg.wsum);
    for (int t = 0; t < OP_NTYPES; t++) {
        if (x < cfg.weights[t]) return t;
        x -= cfg.weights[t];
    }
    return OP_NTYPES - 1;
}

static void conn_fill(conn *c);
static void maybe_finish(void);

static void op_start(conn *c, int type) {
    op *o = calloc(1, sizeof *o);
    if (o == NULL) {
        fprintf(stderr, "loadgen: out of memory\n");
        g.fatal = 1;
        event_base_loopbreak(g.base);
        return;
    }
    o->c = c;
    o->type = type;
    o->j = keydist_next(&g.kd);
    /* seq: an MGET reads the next --mget-keys files, so that a run of
     * -n keys/mget-keys MGETs reads every file once */
    if (type == OP_MGET && g.kd.kind == DIST_SEQ) g.kd.next += (uint64_t)cfg.mget_keys - 1;
    o->dir = file_dir(o->j);
    if (type == OP_UNLINK && !fifo_pop(&o->item)) o->type = type = OP_CREATE;
    if (type == OP_CREATE) {
        uint64_t seq = ++g.create_seq;
        if (seq >= INO_BLOCK) {
            fprintf(stderr, "loadgen: more than %llu creates in one run\n", (unsigned long long)INO_BLOCK);
            exit(1);
        }
        o->item.dir = o->dir;
        o->item.ino = g.ino_base + seq;
        snprintf(o->item.name, sizeof o->item.name, "n%" PRIu64, o->item.ino);
    }
    if (op_is_txn(type)) c->exclusive = 1;
    c->active++;
    g.inflight++;
    g.started++;
    o->t0 = now_ns();
    if (!op_issue(o)) { /* could not send anything: the connection is unusable */
        c->dead = 1;
        c->active--;
        g.inflight--;
        if (op_is_txn(type)) c->exclusive = 0;
        g.errors_any++;
        free(o->inos);
        free(o);
    }
}

static void op_done(op *o) {
    conn *c = o->c;
    uint64_t t = now_ns();
    if (o->failed) g.errors_any++;
    if (g.phase == PH_MEASURE || (g.phase == PH_DRAIN && cfg.requests > 0)) {
        if (o->failed)
            g.errors[o->type]++;
        else
            hist_add(&g.h[o->type], t - o->t0);
    }
    if (!o->failed && o->type == OP_CREATE) fifo_push(&o->item);
    c->active--;
    g.inflight--;
    g.completed++;
    if (op_is_txn(o->type)) c->exclusive = 0;
    free(o->inos);
    free(o);
    if (cfg.requests > 0 && g.completed >= cfg.requests) g.t_end = t;
    conn_fill(c);
    maybe_finish();
}

static void on_retry_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    op *o = arg;
    if (o->c->dead || !op_issue(o)) op_done(o);
}

static void on_reply(redisAsyncContext *ac, void *reply, void *priv) {
    (void)ac;
    op *o = priv;
    int idx = o->got++;
    op_on_reply(o, idx, reply);
    if (--o->pending > 0) return;
    if (o->c->dead || reply == NULL) {
        op_done(o);
        return;
    }
    if (o->restart) {
        /* the UNWATCH after a nil EXEC is in: start the transaction over */
        o->restart = 0;
        o->conflict = 0;
        o->retries++;
        if (g.phase == PH_MEASURE) g.conflicts[o->type]++;
        if (o->retries >= 50) {
            record_error(o, "50 WATCH conflicts in a row");
            op_done(o);
            return;
        }
        o->ino = 0;
        o->step = 0;
        /* JuiceFS sleeps rand % (i+1)^2 ms after the i-th failed attempt */
        long ms = (long)(rng_next() % (uint64_t)((o->retries) * (o->retries)));
        if (ms == 0) {
            if (!op_issue(o)) op_done(o);
            return;
        }
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        if (event_base_once(g.base, -1, EV_TIMEOUT, on_retry_timer, o, &tv) != 0 && !op_issue(o)) op_done(o);
        return;
    }
    if (o->conflict) o->restart = 1; /* the next step is UNWATCH */
    o->step++;
    if (!op_issue(o)) op_done(o);
}

/* ------------------------------------------------------------------------ */
/* connections and run control */

static int budget_left(void) {
    if (g.phase == PH_DRAIN || g.phase == PH_CONNECT) return 0;
    if (cfg.requests > 0) return g.started < cfg.requests;
    return 1;
}

static void conn_fill(conn *c) {
    while (!c->dead && c->connected && !c->exclusive && c->active < cfg.pipeline && budget_left() && !g.fatal) {
        int t = c->next_type >= 0 ? c->next_type : pick_type();
        if (op_is_txn(t) && c->active > 0) {
            c->next_type = t; /* wait for the connection to drain */
            return;
        }
        c->next_type = -1;
        op_start(c, t);
    }
}

static void maybe_finish(void) {
    if (cfg.requests > 0 && g.phase == PH_MEASURE && g.started >= cfg.requests) g.phase = PH_DRAIN;
    if (g.phase == PH_DRAIN && g.inflight == 0) event_base_loopbreak(g.base);
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
    conn *c = ac->data;
    c->dead = 1;
    c->ac = NULL;
    if (status != REDIS_OK && g.phase != PH_DRAIN) {
        fprintf(stderr, "loadgen: connection %d lost: %s\n", c->idx, ac->errstr);
        g.fatal = 1;
        event_base_loopbreak(g.base);
    }
}

static void start_phase_measure(void) {
    g.phase = PH_MEASURE;
    g.t_measure = now_ns();
    for (int t = 0; t < OP_NTYPES; t++) {
        hist_reset(&g.h[t]);
        g.errors[t] = g.conflicts[t] = 0;
    }
}

static void on_stop_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what; (void)arg;
    if (g.phase == PH_WARMUP) {
        start_phase_measure();
        struct timeval tv = {(time_t)cfg.duration, (suseconds_t)((cfg.duration - (time_t)cfg.duration) * 1e6)};
        evtimer_add(g.stop_ev, &tv);
        return;
    }
    g.t_end = now_ns();
    g.phase = PH_DRAIN;
    struct timeval tv = {10, 0};
    evtimer_add(g.drain_ev, &tv);
    maybe_finish();
}

static void on_drain_timeout(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what; (void)arg;
    fprintf(stderr, "loadgen: %" PRIu64 " ops still in flight 10 s after the end\n", g.inflight);
    g.fatal = 4;
    event_base_loopbreak(g.base);
}

static void begin_run(void) {
    if (cfg.requests > 0) {
        start_phase_measure();
    } else if (cfg.warmup > 0) {
        g.phase = PH_WARMUP;
        struct timeval tv = {(time_t)cfg.warmup, (suseconds_t)((cfg.warmup - (time_t)cfg.warmup) * 1e6)};
        evtimer_add(g.stop_ev, &tv);
    } else {
        start_phase_measure();
        struct timeval tv = {(time_t)cfg.duration, (suseconds_t)((cfg.duration - (time_t)cfg.duration) * 1e6)};
        evtimer_add(g.stop_ev, &tv);
    }
    for (int i = 0; i < cfg.conns; i++) conn_fill(&g.conns[i]);
}

static void on_connect(const redisAsyncContext *ac, int status) {
    conn *c = ac->data;
    if (status != REDIS_OK) {
        fprintf(stderr, "loadgen: connection %d to %s:%d failed: %s\n", c->idx, cfg.host, cfg.port, ac->errstr);
        c->dead = 1;
        c->ac = NULL;
        g.fatal = 1;
        event_base_loopbreak(g.base);
        return;
    }
    c->connected = 1;
    if (++g.nconnected == cfg.conns) begin_run();
}

/* ------------------------------------------------------------------------ */
/* synchronous helpers: populate, prewarm, script load */

static redisContext *sync_connect(void) {
    struct timeval tv = {10, 0};
    redisContext *rc = redisConnectWithTimeout(cfg.host, cfg.port, tv);
    if (rc == NULL || rc->err) {
        fprintf(stderr, "loadgen: cannot connect to %s:%d: %s\n", cfg.host, cfg.port, rc ? rc->errstr : "oom");
        if (rc) redisFree(rc);
        return NULL;
    }
    return rc;
}

/* Reads n replies; returns the number of error replies, or -1 on I/O error. */
static long drain_replies(redisContext *rc, long n) {
    long errs = 0;
    for (long i = 0; i < n; i++) {
        redisReply *r;
        if (redisGetReply(rc, (void **)&r) != REDIS_OK) {
            fprintf(stderr, "loadgen: %s\n", rc->errstr);
            return -1;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            if (errs == 0) fprintf(stderr, "loadgen: error reply: %s\n", r->str);
            errs++;
        }
        freeReplyObject(r);
    }
    return errs;
}

static int do_populate(void) {
    redisContext *rc = sync_connect();
    if (rc == NULL) return 1;
    char val[4096], ent[9], key[32], name[24];
    long queued = 0, errs = 0;
    for (uint32_t k = 0; k < cfg.ndirs; k++) {
        make_value(val, dir_ino(k), 0);
        snprintf(key, sizeof key, "i%u", dir_ino(k));
        redisAppendCommand(rc, "SET %s %b", key, val, (size_t)cfg.value_size);
        queued++;
    }
    for (uint32_t j = 0; j < cfg.keys; j++) {
        make_value(val, file_ino(j), 0);
        make_entry(ent, file_ino(j));
        snprintf(key, sizeof key, "i%" PRIu64, file_ino(j));
        redisAppendCommand(rc, "SET %s %b", key, val, (size_t)cfg.value_size);
        snprintf(key, sizeof key, "d%u", dir_ino(file_dir(j)));
        snprintf(name, sizeof name, "f%u", j);
        redisAppendCommand(rc, "HSET %s %s %b", key, name, ent, (size_t)9);
        queued += 2;
        if (queued >= 2000) {
            long e = drain_replies(rc, queued);
            if (e < 0) goto fail;
            errs += e;
            queued = 0;
        }
    }
    redisAppendCommand(rc, "SET usedSpace %llu", (unsigned long long)cfg.keys * 4096);
    redisAppendCommand(rc, "SET totalInodes %u", cfg.keys + cfg.ndirs);
    redisAppendCommand(rc, "SCRIPT LOAD %s", lookup_script);
    queued += 3;
    long e = drain_replies(rc, queued);
    if (e < 0) goto fail;
    errs += e;
    redisFree(rc);
    if (!cfg.quiet)
        fprintf(stderr, "loadgen: populated %u files in %u directories (%u entries each) on %s:%d\n", cfg.keys,
                cfg.ndirs, cfg.dir_size, cfg.host, cfg.port);
    return errs ? 3 : 0;
fail:
    redisFree(rc);
    return 1;
}

/* Reads every key of the data set once, pipelined, so that a cache in front
 * of Redis holds them all. */
static int do_prewarm(void) {
    redisContext *rc = sync_connect();
    if (rc == NULL) return 1;
    char key[32], name[24];
    long queued = 0, errs = 0;
    for (uint32_t k = 0; k < cfg.ndirs && cfg.prewarm == 1; k++) {
        snprintf(key, sizeof key, "i%u", dir_ino(k));
        redisAppendCommand(rc, "GET %s", key);
        queued++;
    }
    for (uint32_t j = 0; j < cfg.keys; j++) {
        snprintf(key, sizeof key, "i%" PRIu64, file_ino(j));
        redisAppendCommand(rc, "GET %s", key);
        queued++;
        if (cfg.prewarm != 2) { /* --prewarm-get: the files' attributes only */
            snprintf(key, sizeof key, "d%u", dir_ino(file_dir(j)));
            snprintf(name, sizeof name, "f%u", j);
            redisAppendCommand(rc, "HGET %s %s", key, name);
            queued++;
            /* a lookup is answered only from what a lookup of that name
             * filled (C8: Redis checks the script's ACL per name), so a
             * mix with lookups warms them with lookups, as JuiceFS would */
            if (cfg.weights[OP_LOOKUP]) {
                redisAppendCommand(rc, "EVALSHA %s 2 %s %s", lookup_sha, key, name);
                queued++;
            }
        }
        if (queued >= 2000) {
            long e = drain_replies(rc, queued);
            if (e < 0) goto fail;
            errs += e;
            queued = 0;
        }
    }
    long e = drain_replies(rc, queued);
    if (e < 0) goto fail;
    errs += e;
    redisFree(rc);
    return errs ? 3 : 0;
fail:
    redisFree(rc);
    return 1;
}

/* Takes a block of inode numbers for the files this run creates, as JuiceFS
 * does (INCRBY nextinode), so that runs against one Redis never collide. */
static int reserve_inodes(void) {
    redisContext *rc = sync_connect();
    if (rc == NULL) return 1;
    redisReply *r = redisCommand(rc, "INCRBY nextinode %llu", (unsigned long long)INO_BLOCK);
    int bad = r == NULL || r->type != REDIS_REPLY_INTEGER;
    if (bad)
        fprintf(stderr, "loadgen: INCRBY nextinode failed%s%s\n", r ? ": " : "", r && r->str ? r->str : "");
    else
        g.ino_base = 1000000000000ull + (uint64_t)r->integer - INO_BLOCK;
    if (r) freeReplyObject(r);
    redisFree(rc);
    return bad;
}

static int ensure_script(void) {
    redisContext *rc = sync_connect();
    if (rc == NULL) return 1;
    redisReply *r = redisCommand(rc, "SCRIPT LOAD %s", lookup_script);
    int bad = r == NULL || r->type != REDIS_REPLY_STRING || strcmp(r->str, lookup_sha) != 0;
    if (bad) fprintf(stderr, "loadgen: SCRIPT LOAD of the lookup script failed%s%s\n", r ? ": " : "",
                     r && r->str ? r->str : "");
    if (r) freeReplyObject(r);
    redisFree(rc);
    return bad;
}

/* INFO commandstats: name -> calls, into names/calls (at most max); returns
 * how many, or -1. */
static int commandstats(char names[][24], uint64_t *calls, int max) {
    redisContext *rc = sync_connect();
    if (rc == NULL) return -1;
    redisReply *r = redisCommand(rc, "INFO commandstats");
    int n = -1;
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        n = 0;
        for (const char *p = r->str; p && *p && n < max; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
            const char *colon, *c;
            if (strncmp(p, "cmdstat_", 8) != 0 || (colon = strchr(p, ':')) == NULL) continue;
            if ((c = strstr(colon, "calls=")) == NULL) continue;
            size_t len = (size_t)(colon - (p + 8));
            if (len >= 24) continue;
            memcpy(names[n], p + 8, len);
            names[n][len] = '\0';
            calls[n++] = strtoull(c + 6, NULL, 10);
        }
    } else {
        fprintf(stderr, "loadgen: INFO commandstats failed%s%s\n", r && r->str ? ": " : "", r && r->str ? r->str : "");
    }
    if (r) freeReplyObject(r);
    redisFree(rc);
    return n;
}

static uint64_t stat_of(char names[][24], const uint64_t *calls, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return calls[i];
    return 0;
}

/* Compares the commands this run sent with the growth of Redis's
 * commandstats calls between the two snapshots; the first snapshot's own
 * INFO is the one call of "info" expected. Returns 0 when every count agrees. */
static int check_commandstats(char n0[][24], const uint64_t *c0, int k0) {
    static char n1[256][24];
    static uint64_t c1[256];
    int k1 = commandstats(n1, c1, 256);
    if (k1 < 0) return 1;
    cmdname_count("info");
    int bad = 0;
    printf("check-commandstats: %-12s %12s %12s\n", "command", "loadgen", "redis");
    for (int i = 0; i < k1; i++) { /* every command Redis ran */
        uint64_t d = c1[i] - stat_of(n0, c0, k0, n1[i]);
        if (d == 0) continue;
        int id = cmdname_id(n1[i], strlen(n1[i]));
        int ok = cmdcount[id].sent == d;
        bad += !ok;
        printf("check-commandstats: %-12s %12" PRIu64 " %12" PRIu64 "  %s\n", n1[i], cmdcount[id].sent, d,
               ok ? "ok" : "MISMATCH");
    }
    for (int i = 0; i < ncmdnames; i++) { /* and every command sent */
        if (cmdcount[i].sent == 0 || stat_of(n1, c1, k1, cmdcount[i].name) != 0) continue;
        bad++;
        printf("check-commandstats: %-12s %12" PRIu64 " %12d  MISMATCH\n", cmdcount[i].name, cmdcount[i].sent, 0);
    }
    printf("check-commandstats: %s\n", bad ? "FAILED" : "passed");
    return bad ? 5 : 0;
}

/* ------------------------------------------------------------------------ */
/* report */

static void print_line(const char *name, const hist *h, uint64_t errors, uint64_t conflicts, double secs) {
    printf("%s,%s,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%.1f,%.1f,%.1f,%.1f,%.1f,%.1f\n", cfg.label, name, h->count,
           errors, conflicts, secs > 0 ? (double)h->count / secs : 0, h->count ? h->sum / (double)h->count / 1e3 : 0,
           hist_quantile(h, 0.50) / 1e3, hist_quantile(h, 0.99) / 1e3, hist_quantile(h, 0.999) / 1e3,
           (double)h->max / 1e3);
}

static void report(void) {
    double secs = (double)(g.t_end - g.t_measure) / 1e9;
    static hist total;
    uint64_t terr = 0, tconf = 0;
    hist_reset(&total);
    if (cfg.header) printf("label,op,count,errors,conflicts,ops_per_s,mean_us,p50_us,p99_us,p999_us,max_us\n");
    for (int t = 0; t < OP_NTYPES; t++) {
        if (g.h[t].count == 0 && g.errors[t] == 0) continue;
        print_line(op_names[t], &g.h[t], g.errors[t], g.conflicts[t], secs);
        hist_merge(&total, &g.h[t]);
        terr += g.errors[t];
        tconf += g.conflicts[t];
    }
    print_line("total", &total, terr, tconf, secs);
    fflush(stdout);
    if (!cfg.quiet)
        fprintf(stderr, "loadgen: %s:%d c=%d P=%d %.2f s measured, %" PRIu64 " ops, %" PRIu64 " errors%s%s\n",
                cfg.host, cfg.port, cfg.conns, cfg.pipeline, secs, total.count, terr,
                g.first_error[0] ? "; first: " : "", g.first_error);
}

/* ------------------------------------------------------------------------ */
/* self-test */

static int check_close(const char *what, double got, double want, double tol) {
    double err = want != 0 ? fabs(got - want) / want : fabs(got);
    int ok = err <= tol;
    printf("selftest: %-44s got %14.4f want %14.4f  %s\n", what, got, want, ok ? "ok" : "FAIL");
    return ok;
}

static int selftest(void) {
    int ok = 1;
    static hist h, h2, h3;
    /* bucket bounds contain the value; indexes are monotonic */
    uint64_t prev = 0;
    int bad = 0;
    for (int i = 0; i < 2000000; i++) {
        uint64_t v = rng_next() >> (rng_next() % 64);
        unsigned ix = hist_index(v);
        uint64_t lo, hi;
        hist_bounds(ix, &lo, &hi);
        if (ix >= HIST_NBUCKETS || v < lo || v > hi || (hi - lo) > (lo >> HIST_SUB_BITS)) bad++;
        (void)prev;
    }
    for (uint64_t v = 1; v < 1000000; v++)
        if (hist_index(v) < hist_index(v - 1)) bad++;
    printf("selftest: %-44s %d bad  %s\n", "bucket bounds and monotonic index", bad, bad ? "FAIL" : "ok");
    ok &= bad == 0;

    /* uniform 1..1e6 ns, each once */
    hist_reset(&h);
    for (uint64_t v = 1; v <= 1000000; v++) hist_add(&h, v);
    ok &= check_close("uniform 1..1e6: p50", hist_quantile(&h, 0.5), 500000, 0.01);
    ok &= check_close("uniform 1..1e6: p99", hist_quantile(&h, 0.99), 990000, 0.01);
    ok &= check_close("uniform 1..1e6: p99.9", hist_quantile(&h, 0.999), 999000, 0.01);
    ok &= check_close("uniform 1..1e6: max", (double)h.max, 1000000, 0);
    ok &= check_close("uniform 1..1e6: mean", h.sum / (double)h.count, 500000.5, 1e-9);

    /* exponential, mean 100 us, by its inverse CDF at evenly spaced points */
    hist_reset(&h);
    const int M = 1000000;
    for (int i = 0; i < M; i++) hist_add(&h, (uint64_t)llround(-100000.0 * log(1.0 - (i + 0.5) / M)));
    ok &= check_close("exponential mean 100us: p50", hist_quantile(&h, 0.5), -100000.0 * log(0.5), 0.01);
    ok &= check_close("exponential mean 100us: p99", hist_quantile(&h, 0.99), -100000.0 * log(0.01), 0.01);
    ok &= check_close("exponential mean 100us: p99.9", hist_quantile(&h, 0.999), -100000.0 * log(0.001), 0.01);

    /* bimodal: 98.9 % at 10 us, 1.1 % at 10 ms; merged from two halves */
    hist_reset(&h2);
    hist_reset(&h3);
    for (int i = 0; i < 100000; i++) hist_add(i % 2 ? &h2 : &h3, i < 98900 ? 10000 : 10000000);
    hist_reset(&h);
    hist_merge(&h, &h2);
    hist_merge(&h, &h3);
    ok &= check_close("bimodal: p50", hist_quantile(&h, 0.5), 10000, 0.01);
    ok &= check_close("bimodal: p98.9 (last of the low mode)", hist_quantile(&h, 0.989), 10000, 0.01);
    ok &= check_close("bimodal: p99", hist_quantile(&h, 0.99), 10000000, 0.01);
    ok &= check_close("bimodal: count after merge", (double)h.count, 100000, 0);

    /* small values are exact */
    hist_reset(&h);
    for (uint64_t v = 0; v < 100; v++) hist_add(&h, v);
    ok &= check_close("0..99 exact: p50", hist_quantile(&h, 0.5), 49, 0);
    ok &= check_close("0..99 exact: p99", hist_quantile(&h, 0.99), 98, 0);

    /* zipf s=0.99 over 1000: P(rank 0) = 1/H */
    keydist kd;
    keydist_init(&kd, DIST_ZIPF, 1000, 0.99);
    double hsum = 0;
    for (int r = 1; r <= 1000; r++) hsum += 1.0 / pow(r, 0.99);
    long hits0 = 0, hits9 = 0;
    const long S = 2000000;
    for (long i = 0; i < S; i++) {
        uint32_t r = keydist_next(&kd);
        if (r == 0) hits0++;
        if (r == 9) hits9++;
    }
    ok &= check_close("zipf 0.99/1000: P(rank 1) x 1e6", 1e6 * (double)hits0 / S, 1e6 / hsum, 0.02);
    ok &= check_close("zipf 0.99/1000: P(rank 10) x 1e6", 1e6 * (double)hits9 / S, 1e6 / hsum / pow(10, 0.99), 0.03);
    free(kd.cdf);

    /* mix weights */
    memset(cfg.weights, 0, sizeof cfg.weights);
    cfg.weights[OP_GETATTR] = 450;
    cfg.weights[OP_LOOKUP] = 400;
    cfg.weights[OP_CREATE] = 150;
    cfg.wsum = 1000;
    long cnt[OP_NTYPES] = {0};
    for (long i = 0; i < S; i++) cnt[pick_type()]++;
    ok &= check_close("mix: share of getattr", (double)cnt[OP_GETATTR] / S, 0.45, 0.01);
    ok &= check_close("mix: share of create", (double)cnt[OP_CREATE] / S, 0.15, 0.02);

    printf("selftest: %s\n", ok ? "passed" : "FAILED");
    return ok ? 0 : 1;
}

/* ------------------------------------------------------------------------ */
/* main */

static int parse_mix(const char *spec) {
    for (size_t i = 0; i < sizeof mix_presets / sizeof *mix_presets; i++)
        if (strcmp(spec, mix_presets[i].name) == 0) spec = mix_presets[i].spec;
    memset(cfg.weights, 0, sizeof cfg.weights);
    cfg.wsum = 0;
    char *dup = strdup(spec), *save = NULL;
    if (dup == NULL) return -1;
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        unsigned w = 1;
        if (eq) {
            *eq = '\0';
            char *end;
            unsigned long v = strtoul(eq + 1, &end, 10);
            if (*end || v > 1000000) goto bad;
            w = (unsigned)v;
        }
        int t;
        for (t = 0; t < OP_NTYPES; t++)
            if (strcasecmp(tok, op_names[t]) == 0) break;
        if (t == OP_NTYPES) goto bad;
        cfg.weights[t] += w;
        cfg.wsum += w;
    }
    free(dup);
    return cfg.wsum > 0 ? 0 : -1;
bad:
    free(dup);
    return -1;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: loadgen [options]\n"
            "  -h HOST, -p PORT     target (127.0.0.1:6379)\n"
            "  -c N                 connections (1)\n"
            "  -P N                 ops in flight per connection (1)\n"
            "  -d SECONDS           measured duration (10), after --warmup\n"
            "  -n OPS               run this many ops instead of a duration (no warm-up)\n"
            "  --warmup SECONDS     unmeasured load before the measurement (1; 0 with -n)\n"
            "  --mix SPEC           name=weight,... of get hget set hset mget evalsha multi getattr\n"
            "                       lookup lookupkv readdir create unlink, or a preset: juicefs90 juicefs99\n"
            "                       get hget\n"
            "  --keys N             files in the data set (10000)\n"
            "  --dir-size N         entries per directory (100)\n"
            "  --dist hot|uniform|zipf|seq  which file an op touches (uniform; seq: 0, 1, 2, ...)\n"
            "                       (seq: an mget reads the next --mget-keys files)\n"
            "  --zipf-s S           zipf exponent (0.99)\n"
            "  --mget-keys N        keys of the mget op (16)\n"
            "  --value-size N       bytes of an attribute value (72)\n"
            "  --populate           create the data set on the target (Redis itself) and exit\n"
            "  --prewarm            read every key once, pipelined, before the run\n"
            "  --prewarm-get        the same, only GET i<ino> of every file\n"
            "  --label TEXT         first CSV column (-)\n"
            "  --no-header          no CSV header line\n"
            "  --allow-errors       exit 0 even when replies were errors\n"
            "  --seed N             random seed\n"
            "  --quiet              nothing on stderr but errors\n"
            "  --selftest           check the histogram, the distributions and the mix; exit 0/1\n"
            "  --check-commandstats after the run, compare the commands sent with the growth of\n"
            "                       INFO commandstats calls (target: Redis itself, idle); exit 5 if they differ\n");
}

int main(int argc, char **argv) {
    enum { O_WARMUP = 256, O_MIX, O_KEYS, O_DIRSIZE, O_DIST, O_ZIPFS, O_MGETK, O_VALSZ, O_POPULATE, O_PREWARM,
           O_PREWARMGET, O_LABEL, O_NOHEADER, O_ALLOWERR, O_SEED, O_QUIET, O_SELFTEST, O_CHECKSTATS, O_HELP };
    static const struct option lopts[] = {
        {"warmup", 1, 0, O_WARMUP},     {"mix", 1, 0, O_MIX},           {"keys", 1, 0, O_KEYS},
        {"dir-size", 1, 0, O_DIRSIZE},  {"dist", 1, 0, O_DIST},         {"zipf-s", 1, 0, O_ZIPFS},
        {"mget-keys", 1, 0, O_MGETK},   {"value-size", 1, 0, O_VALSZ},  {"populate", 0, 0, O_POPULATE},
        {"prewarm", 0, 0, O_PREWARM},   {"prewarm-get", 0, 0, O_PREWARMGET}, {"label", 1, 0, O_LABEL},
        {"no-header", 0, 0, O_NOHEADER}, {"allow-errors", 0, 0, O_ALLOWERR}, {"seed", 1, 0, O_SEED},
        {"quiet", 0, 0, O_QUIET},       {"selftest", 0, 0, O_SELFTEST},  {"help", 0, 0, O_HELP},
        {"check-commandstats", 0, 0, O_CHECKSTATS}, {0, 0, 0, 0}};
    const char *mix = "get=1";
    int opt, want_selftest = 0;
    while ((opt = getopt_long(argc, argv, "h:p:c:P:d:n:", lopts, NULL)) != -1) {
        switch (opt) {
        case 'h': cfg.host = optarg; break;
        case 'p': cfg.port = atoi(optarg); break;
        case 'c': cfg.conns = atoi(optarg); break;
        case 'P': cfg.pipeline = atoi(optarg); break;
        case 'd': cfg.duration = atof(optarg); break;
        case 'n': cfg.requests = strtoull(optarg, NULL, 10); break;
        case O_WARMUP: cfg.warmup = atof(optarg); break;
        case O_MIX: mix = optarg; break;
        case O_KEYS: cfg.keys = (uint32_t)strtoul(optarg, NULL, 10); break;
        case O_DIRSIZE: cfg.dir_size = (uint32_t)strtoul(optarg, NULL, 10); break;
        case O_DIST:
            if (strcmp(optarg, "hot") == 0) cfg.dist = DIST_HOT;
            else if (strcmp(optarg, "uniform") == 0) cfg.dist = DIST_UNIFORM;
            else if (strcmp(optarg, "zipf") == 0 || strcmp(optarg, "zipfian") == 0) cfg.dist = DIST_ZIPF;
            else if (strcmp(optarg, "seq") == 0) cfg.dist = DIST_SEQ;
            else { fprintf(stderr, "loadgen: --dist hot|uniform|zipf|seq\n"); return 1; }
            break;
        case O_ZIPFS: cfg.zipf_s = atof(optarg); break;
        case O_MGETK: cfg.mget_keys = atoi(optarg); break;
        case O_VALSZ: cfg.value_size = atoi(optarg); break;
        case O_POPULATE: cfg.populate = 1; break;
        case O_PREWARM: cfg.prewarm = 1; break;
        case O_PREWARMGET: cfg.prewarm = 2; break;
        case O_LABEL: cfg.label = optarg; break;
        case O_NOHEADER: cfg.header = 0; break;
        case O_ALLOWERR: cfg.allow_errors = 1; break;
        case O_SEED: rng_state = seed_state(strtoull(optarg, NULL, 10)); break;
        case O_QUIET: cfg.quiet = 1; break;
        case O_SELFTEST: want_selftest = 1; break;
        case O_CHECKSTATS: cfg.check_stats = 1; break;
        case O_HELP: usage(stdout); return 0;
        default: usage(stderr); return 1;
        }
    }
    if (want_selftest) return selftest();
    if (cfg.port <= 0 || cfg.port > 65535 || cfg.conns < 1 || cfg.conns > 100000 || cfg.pipeline < 1 ||
        cfg.pipeline > 100000 || cfg.keys < 1 || cfg.dir_size < 1 || cfg.mget_keys < 1 || cfg.mget_keys > 4096 ||
        cfg.value_size < 1 || cfg.value_size > 4096 || (cfg.requests == 0 && cfg.duration <= 0) ||
        cfg.zipf_s <= 0) {
        fprintf(stderr, "loadgen: bad arguments\n");
        usage(stderr);
        return 1;
    }
    if (parse_mix(mix) != 0) {
        fprintf(stderr, "loadgen: bad --mix '%s'\n", mix);
        return 1;
    }
    if (cfg.warmup < 0) cfg.warmup = cfg.requests > 0 ? 0 : 1;
    cfg.ndirs = (cfg.keys + cfg.dir_size - 1) / cfg.dir_size;

    if (cfg.populate) return do_populate();
    if ((cfg.weights[OP_EVALSHA] || cfg.weights[OP_LOOKUP]) && ensure_script() != 0) return 1;
    if ((cfg.weights[OP_CREATE] || cfg.weights[OP_UNLINK]) && reserve_inodes() != 0) return 1;
    if (cfg.prewarm) {
        int rc = do_prewarm();
        if (rc) return rc;
    }
    if (keydist_init(&g.kd, cfg.dist, cfg.keys, cfg.zipf_s) != 0) return 1;
    static char stat_names[256][24];
    static uint64_t stat_calls[256];
    int nstats = 0;
    if (cfg.check_stats && (nstats = commandstats(stat_names, stat_calls, 256)) < 0) return 1;

    g.base = event_base_new();
    g.conns = calloc((size_t)cfg.conns, sizeof *g.conns);
    if (g.base == NULL || g.conns == NULL) return 1;
    g.stop_ev = evtimer_new(g.base, on_stop_timer, NULL);
    g.drain_ev = evtimer_new(g.base, on_drain_timeout, NULL);
    g.phase = PH_CONNECT;
    for (int i = 0; i < cfg.conns; i++) {
        conn *c = &g.conns[i];
        c->idx = i;
        c->next_type = -1;
        c->ac = redisAsyncConnect(cfg.host, cfg.port);
        if (c->ac == NULL || c->ac->err) {
            fprintf(stderr, "loadgen: connect: %s\n", c->ac ? c->ac->errstr : "out of memory");
            return 1;
        }
        c->ac->data = c;
        redisLibeventAttach(c->ac, g.base);
        redisAsyncSetConnectCallback(c->ac, on_connect);
        redisAsyncSetDisconnectCallback(c->ac, on_disconnect);
    }
    event_base_dispatch(g.base);
    if (g.fatal) return g.fatal;
    if (cfg.requests > 0 && g.t_end == 0) g.t_end = now_ns();
    g.phase = PH_DRAIN;
    report();
    for (int i = 0; i < cfg.conns; i++)
        if (g.conns[i].ac) redisAsyncDisconnect(g.conns[i].ac);
    event_base_loop(g.base, EVLOOP_NONBLOCK);
    uint64_t terr = 0;
    for (int t = 0; t < OP_NTYPES; t++) terr += g.errors[t];
    if (cfg.check_stats) {
        int rc = check_commandstats(stat_names, stat_calls, nstats);
        if (rc) return rc;
    }
    return terr && !cfg.allow_errors ? 3 : 0;
}
