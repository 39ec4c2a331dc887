/*
 * tests/fuzz/fuzz_session.c — libFuzzer target: one whole client session
 * through the real proxy, in process, against a scripted fake Redis.
 *
 * Per input, a px_server is built as px_server_run() builds it (event base,
 * config from px_config_init and px_config_set, limits, flush and reap
 * events, TLS and caching setup, the default identity's first connection),
 * without listeners or signals. One client is made with
 * px_client_new(srv, fd, "fuzz", 0) on one end of a socketpair; the target
 * writes the client's bytes into the other end and reads what comes back.
 * The upstream is unix:///tmp/sidecache-fuzz-<pid>.sock, served by a fake
 * Redis in this process (an evconnlistener on the same event base) that
 * frames what the proxy sends with resp_req_parse and answers every
 * request the way Redis 7 would (HELLO, AUTH, SELECT, PING, MULTI/QUEUED/
 * EXEC, WATCH, pub/sub, CLIENT TRACKING with invalidation messages, COMMAND
 * from tests/unit/data/command-7.0.resp, a small key/value store for
 * GET/SET/HGET/HSET/MGET/DEL, JuiceFS's lookup script, ...), bent by the
 * script bytes of the input: errors, other reply types, garbage, replies
 * held back or split across reads, unsolicited pushes, and connections
 * closed before or after a reply.
 *
 * Input
 * -----
 *   bytes 0-1   flags, little endian (F_* below: cache and tracking mode,
 *               requirepass, pool size, batching, limits, upstream db and
 *               credentials, rules, ...)
 *   byte 2      bits 0-3: n, the number of chunk-size bytes that follow
 *   byte 3      L, the length of the script
 *   n bytes     sizes of the writes into the client socket, used in turn
 *               and cyclically: b < 0x80 is b + 1 bytes, else
 *               (b - 0x7f) * 256 bytes; n = 0: everything in one write
 *   L bytes     the script: one byte per reply of the fake Redis and one
 *               per idle point of the driver (see fc_command and
 *               idle_point); 0 (also once it is used up) means "answer as
 *               Redis would, at once"
 *   the rest    the client's byte stream
 *
 * After each write the event loop runs (event_base_loop EVLOOP_NONBLOCK)
 * until nothing moved for a few rounds (an idle point), bounded in rounds
 * and in time; at each idle point held replies move on and the driver may
 * act (idle_point: invalidations, an upstream connection closed, the cron
 * a minute later, another client that sends one request and hangs up,
 * SIGTERM's graceful stop, Redis away and back, the client hanging up).
 * At the end the client's socket is closed, the loop runs until idle
 * again, and everything is torn down as px_server_run tears down.
 *
 * Checked: no crash, no UB, no leak (LeakSanitizer); every byte the proxy
 * sends to the fake Redis is a sequence of whole request frames (the proxy
 * only forwards what it framed itself); every byte the client receives is
 * a sequence of whole, valid RESP reply frames (resp_reply_parse), except
 * for a trailing partial frame when the loop was cut short, the client
 * was dropped for its output buffer limit, or it hung up first.
 *
 * Debugging a reproducer: SIDECACHE_FUZZ_LOG=debug (or verbose, notice,
 * warning) logs the proxy to stderr; SIDECACHE_FUZZ_TRACE=1 prints what
 * the client and the fake Redis exchange.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <openssl/sha.h>

#include "fuzzcommon.h"
#include "protocol/resp.h"
#include "proxy/caching.h"
#include "proxy/client.h"
#include "proxy/config.h"
#include "proxy/io.h"
#include "proxy/log.h"
#include "proxy/server.h"
#include "proxy/tls.h"
#include "proxy/upstream.h"



/* Bounds of one input: rounds of the event loop and wall-clock time. */
#define MAX_ROUNDS 6000
#define MAX_SESSION_MS 1500
#define QUIET_ROUNDS 3
/* What the client may receive before the rest is only counted. */
#define MAX_CLIENT_BYTES (16u << 20)

enum {
    F_CACHE_MASK = 3,        /* 0 no cache, 1 bcast, 2 default, 3 optin tracking */
    F_REQUIREPASS = 1 << 2,  /* the fake Redis wants AUTH (default/pw) */
    F_ONE_CONN = 1 << 3,     /* upstream-connections 1 (else 2) */
    F_BATCH2 = 1 << 4,       /* batch-max-commands 2 (else the default 250) */
    F_SMALL_LIMITS = 1 << 5, /* max-multibulk-len 8, inline 64, nesting 3 */
    F_DB1 = 1 << 6,          /* sessions start in db 1 (upstream ?db=1) */
    F_UP_CREDS = 1 << 7,     /* the upstream URL carries default:pw */
    F_ALL_KEYS = 1 << 8,     /* profile none, cache-rule GET * and HGET h* */
    F_KEY_PREFIX = 1 << 9,   /* key-prefix {1} */
    F_SETTLE = 1 << 10,      /* let the first connection's handshake finish first */
    F_SMALL_CACHE = 1 << 11, /* cache-max-memory 4kb, cache-max-value 16 */
    F_SMALL_OUTPUT = 1 << 12, /* client-output-buffer-limit 2kb */
    F_FULL_TABLE = 1 << 13,  /* COMMAND answers Redis 7.0's whole table */
    F_TIMEOUT = 1 << 14,     /* timeout 1 (the cron action may close the client) */
    F_SLOW_READER = 1 << 15, /* the client reads nothing until the end */
};

/* ------------------------------------------------------------------------ */
/* process-wide state, made once                                            */

static char sock_path[108];
static int listen_fd = -1;
static char *full_table, *small_table; /* COMMAND replies */
static size_t full_table_len, small_table_len;
static int small_table_count;
static int trace;
static int log_level = 99; /* above every level: nothing is logged */

/* ------------------------------------------------------------------------ */
/* one session                                                              */

typedef struct fake_conn fake_conn;

#define KV_N 64
#define KV_K 40
#define KV_V 48

typedef struct kv_ent {
    int used, db, is_hash;
    unsigned klen, flen, vlen;
    char key[KV_K], field[KV_K], val[KV_V];
    uint64_t stamp;
} kv_ent;

typedef struct session {
    px_server srv;
    px_config cfg;
    unsigned flags;
    struct evconnlistener *lst;
    fake_conn *conns;
    int nconns;
    long long next_id;
    const uint8_t *script;
    size_t script_len, script_at;
    uint64_t activity;
    int64_t deadline_ms;
    int rounds;
    int cut;               /* a bound stopped the loop before it was idle */
    /* the fake Redis's data */
    kv_ent kv[KV_N];
    uint64_t kv_clock;
    char last_key[KV_K];
    unsigned last_key_len;
    char scripts[8][41];   /* SHA1s loaded with SCRIPT LOAD */
    int nscripts;
    int scripts_flushed;   /* SCRIPT FLUSH: the lookup scripts are gone too */
    /* the client's side */
    int cfd;               /* our end of the socketpair, -1 once closed */
    int client_eof;
    int slow_reader;       /* not reading yet (F_SLOW_READER) */
    int hung_up;           /* it shut its side: output may be cut */
    char *rx;              /* bytes received, not yet framed */
    size_t rx_len, rx_cap;
    uint64_t rx_total;
    resp_reply_parser rp;
    uint64_t frames;
} session;

static session *S;

struct fake_conn {
    fake_conn *next;
    struct bufferevent *bev;
    resp_req_parser rq;
    long long id;
    int proto, authed, db;
    int in_multi, multi_dirty, nqueued;
    resp_buf queued;       /* the queued commands, as request frames */
    int watching;
    int nsubs, inv;        /* subscriptions; subscribed to __redis__:invalidate */
    int redirect_target;   /* some connection's tracking redirects here */
    int self_tracking;     /* CLIENT TRACKING ON without REDIRECT */
    int monitor;
    int reply_off, reply_skip;
    struct evbuffer *held; /* replies held back, in order */
    int hold;              /* idle points until they go */
    int closing;           /* close once the output is written */
    int dead;              /* to be freed by its read callback */
    int in_read;           /* inside its read callback */
};

static void tracef(const char *what, const char *p, size_t n) {
    if (!trace) return;
    fprintf(stderr, "%s %zu: ", what, n);
    for (size_t i = 0; i < n && i < 400; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '\r')
            fputs("\\r", stderr);
        else if (ch == '\n')
            fputs("\\n", stderr);
        else if (ch < 32 || ch > 126)
            fprintf(stderr, "\\x%02x", ch);
        else
            fputc(ch, stderr);
    }
    fputs(n > 400 ? "...\n" : "\n", stderr);
}

static uint8_t sc_next(void) {
    return S->script_at < S->script_len ? S->script[S->script_at++] : 0;
}

/* ------------------------------------------------------------------------ */
/* fake Redis: helpers                                                      */

static int is(const resp_arg *a, const char *w) {
    size_t n = strlen(w);
    return a->len == n && strncasecmp(a->ptr, w, n) == 0;
}

static int arg_ll(const resp_arg *a, long long *v) { return resp_string2ll(a->ptr, a->len, v); }

/* A name for an error line: printable, at most 64 bytes. */
static void printable(const resp_arg *a, char *buf, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < a->len && k + 1 < n && k < 64; i++) {
        char ch = a->ptr[i];
        buf[k++] = ch >= ' ' && ch <= '~' ? ch : '?';
    }
    buf[k] = '\0';
}

static void err_fmt(resp_buf *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void err_fmt(resp_buf *out, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    resp_enc_error(out, msg);
}

static void remember_key(const resp_arg *a) {
    unsigned n = a->len < KV_K ? (unsigned)a->len : KV_K;
    memcpy(S->last_key, a->ptr, n);
    S->last_key_len = n;
}

/* the key/value store */

static kv_ent *kv_find(int db, const resp_arg *key, const resp_arg *field) {
    unsigned kl = key->len < KV_K ? (unsigned)key->len : KV_K;
    unsigned fl = field ? (field->len < KV_K ? (unsigned)field->len : KV_K) : 0;
    for (int i = 0; i < KV_N; i++) {
        kv_ent *e = &S->kv[i];
        if (!e->used || e->db != db || e->klen != kl || memcmp(e->key, key->ptr, kl) != 0) continue;
        if (field == NULL ? e->is_hash : (!e->is_hash || e->flen != fl || memcmp(e->field, field->ptr, fl) != 0))
            continue;
        return e;
    }
    return NULL;
}

static int kv_exists(int db, const resp_arg *key) {
    unsigned kl = key->len < KV_K ? (unsigned)key->len : KV_K;
    for (int i = 0; i < KV_N; i++) {
        kv_ent *e = &S->kv[i];
        if (e->used && e->db == db && e->klen == kl && memcmp(e->key, key->ptr, kl) == 0) return 1;
    }
    return 0;
}

static void kv_set(int db, const resp_arg *key, const resp_arg *field, const char *val, size_t vlen) {
    kv_ent *e = kv_find(db, key, field);
    if (e == NULL) {
        kv_ent *old = &S->kv[0];
        for (int i = 0; i < KV_N; i++) {
            if (!S->kv[i].used) {
                old = &S->kv[i];
                break;
            }
            if (S->kv[i].stamp < old->stamp) old = &S->kv[i];
        }
        e = old;
        memset(e, 0, sizeof *e);
        e->used = 1;
        e->db = db;
        e->klen = key->len < KV_K ? (unsigned)key->len : KV_K;
        memcpy(e->key, key->ptr, e->klen);
        if (field != NULL) {
            e->is_hash = 1;
            e->flen = field->len < KV_K ? (unsigned)field->len : KV_K;
            memcpy(e->field, field->ptr, e->flen);
        }
    }
    e->vlen = vlen < KV_V ? (unsigned)vlen : KV_V;
    memcpy(e->val, val, e->vlen);
    e->stamp = ++S->kv_clock;
}

/* Removes a key (every field of a hash); returns 1 if it was there. */
static int kv_del(int db, const resp_arg *key) {
    unsigned kl = key->len < KV_K ? (unsigned)key->len : KV_K;
    int found = 0;
    for (int i = 0; i < KV_N; i++) {
        kv_ent *e = &S->kv[i];
        if (e->used && e->db == db && e->klen == kl && memcmp(e->key, key->ptr, kl) == 0) {
            e->used = 0;
            found = 1;
        }
    }
    return found;
}

static int kv_del_field(int db, const resp_arg *key, const resp_arg *field) {
    kv_ent *e = kv_find(db, key, field);
    if (e == NULL) return 0;
    e->used = 0;
    return 1;
}

static void kv_flush(int db) {
    for (int i = 0; i < KV_N; i++)
        if (db < 0 || S->kv[i].db == db) S->kv[i].used = 0;
}

static void bulk_or_null(resp_buf *out, const kv_ent *e, int proto) {
    if (e == NULL)
        resp_enc_null(out, proto);
    else
        resp_enc_bulk(out, e->val, e->vlen);
}

/* ------------------------------------------------------------------------ */
/* fake Redis: output                                                       */

static void fc_free(fake_conn *fc);

/* Sends bytes to the proxy: now, split (half now, the rest at the next idle
 * point), or held for 1-2 idle points. Held bytes keep their order. */
static void fc_send(fake_conn *fc, const char *p, size_t n, int delivery) {
    if (fc->dead || n == 0) return;
    S->activity++;
    tracef(" redis>", p, n);
    size_t now = n;
    int hold = 1;
    if (evbuffer_get_length(fc->held) > 0)
        now = 0;
    else if (delivery == 1)
        now = n / 2;
    else if (delivery >= 2)
        now = 0, hold = delivery - 1;
    if (now > 0) bufferevent_write(fc->bev, p, now);
    if (now < n) {
        evbuffer_add(fc->held, p + now, n - now);
        if (fc->hold < hold) fc->hold = hold;
    }
}

static void fc_maybe_close(fake_conn *fc) {
    if (!fc->closing || fc->dead) return;
    if (evbuffer_get_length(fc->held) == 0 && evbuffer_get_length(bufferevent_get_output(fc->bev)) == 0) {
        if (fc->in_read)
            fc->dead = 1;
        else
            fc_free(fc);
    }
}

static void fc_close_after_output(fake_conn *fc) {
    fc->closing = 1;
    bufferevent_disable(fc->bev, EV_READ);
    fc_maybe_close(fc);
}

/* "message __redis__:invalidate <keys|null>" to every connection tracking
 * redirects to, and "invalidate <keys>" pushes to RESP3 connections that
 * track themselves. keys == NULL: a null list (flush). */
static void broadcast_invalidation(int nkeys, const resp_arg *keys) {
    resp_buf b;
    resp_buf_init(&b);
    for (fake_conn *fc = S->conns; fc != NULL; fc = fc->next) {
        if (fc->dead || fc->closing) continue;
        resp_buf_reset(&b);
        if (fc->inv && fc->redirect_target) {
            resp_enc_push(&b, 3, fc->proto);
            resp_enc_bulk_str(&b, "message");
            resp_enc_bulk_str(&b, "__redis__:invalidate");
        } else if (fc->self_tracking && fc->proto == 3) {
            resp_enc_push(&b, 2, 3);
            resp_enc_bulk_str(&b, "invalidate");
        } else {
            continue;
        }
        if (keys == NULL) {
            resp_enc_null_array(&b, fc->proto);
        } else {
            resp_enc_array(&b, nkeys);
            for (int i = 0; i < nkeys; i++) resp_enc_bulk(&b, keys[i].ptr, keys[i].len);
        }
        fc_send(fc, b.data, b.len, 0);
    }
    resp_buf_deinit(&b);
}

static void invalidate_keys(int nkeys, const resp_arg *keys) {
    if (nkeys > 0) broadcast_invalidation(nkeys, keys);
}

/* Something Redis may send at any time on this connection. */
static void fc_unsolicited(fake_conn *fc, int delivery) {
    resp_buf b;
    resp_buf_init(&b);
    if (fc->monitor) {
        resp_enc_simple(&b, "1700000000.000001 [0 unix:/tmp/x.sock] \"get\" \"k\"");
    } else if (fc->nsubs > 0 || fc->inv) {
        resp_enc_push(&b, 3, fc->proto);
        resp_enc_bulk_str(&b, "message");
        resp_enc_bulk_str(&b, fc->inv ? "__redis__:invalidate" : "ch");
        if (fc->inv) {
            resp_enc_array(&b, 1);
            resp_enc_bulk(&b, S->last_key, S->last_key_len);
        } else {
            resp_enc_bulk_str(&b, "hello");
        }
    } else if (fc->proto == 3) {
        resp_enc_push(&b, 2, 3);
        resp_enc_bulk_str(&b, "invalidate");
        resp_enc_array(&b, 1);
        resp_enc_bulk(&b, S->last_key, S->last_key_len);
    }
    fc_send(fc, b.data, b.len, delivery);
    resp_buf_deinit(&b);
}

/* ------------------------------------------------------------------------ */
/* fake Redis: commands                                                     */

enum { V_OK, V_ALT, V_ERR };
enum { X_CLOSE = 1, X_NOREPLY = 2, X_FORCE = 4 /* CLIENT REPLY ON: answered */ };

static int creds_ok(const resp_arg *user, const resp_arg *pass) {
    if (user != NULL && is(user, "alice")) return is(pass, "secret");
    if (user != NULL && !is(user, "default")) return 0;
    if (!(S->flags & F_REQUIREPASS)) return user != NULL; /* AUTH pass: no password set */
    return is(pass, "pw");
}

static void hello_reply(fake_conn *fc, resp_buf *out) {
    resp_enc_map(out, 7, fc->proto);
    resp_enc_bulk_str(out, "server");
    resp_enc_bulk_str(out, "redis");
    resp_enc_bulk_str(out, "version");
    resp_enc_bulk_str(out, "7.0.15");
    resp_enc_bulk_str(out, "proto");
    resp_enc_int(out, fc->proto);
    resp_enc_bulk_str(out, "id");
    resp_enc_int(out, fc->id);
    resp_enc_bulk_str(out, "mode");
    resp_enc_bulk_str(out, "standalone");
    resp_enc_bulk_str(out, "role");
    resp_enc_bulk_str(out, "master");
    resp_enc_bulk_str(out, "modules");
    resp_enc_array(out, 0);
}

/* A value of another type than expected, as a misbehaving or surprising
 * Redis could send it (RESP3 types only on RESP3 connections). */
static void alt_reply(fake_conn *fc, resp_buf *out, uint8_t sel) {
    if (fc->proto == 3) {
        switch (sel % 8) {
        case 0: resp_enc_double(out, 1.5, 3); return;
        case 1: resp_enc_bool(out, 1, 3); return;
        case 2: resp_buf_append(out, "(12345678901234567890\r\n", 23); return;
        case 3: resp_enc_verbatim(out, "txt", "some text", 9, 3); return;
        case 4: resp_enc_set(out, 2, 3), resp_enc_int(out, 1), resp_enc_bulk_str(out, "x"); return;
        case 5: /* an attribute before the value */
            resp_buf_append(out, "|1\r\n+key-popularity\r\n%1\r\n$1\r\na\r\n,0.19\r\n", 41);
            resp_enc_int(out, 7);
            return;
        case 6: resp_buf_append(out, "!21\r\nSYNTAX invalid syntax\r\n", 28); return;
        default: resp_enc_null(out, 3); return;
        }
    }
    switch (sel % 4) {
    case 0: resp_enc_null(out, 2); return;
    case 1: resp_enc_int(out, 0); return;
    case 2: resp_enc_array(out, 0); return;
    default:
        resp_enc_array(out, 2);
        resp_enc_array(out, 1);
        resp_enc_int(out, 1);
        resp_enc_bulk(out, "", 0);
        return;
    }
}

static const char *const juicefs_scripts[] = {
    "8526c64984678fc27f67f44755c8ba7dcdf7ea60",
    "72af033cd6d0773efd6a53eaf9490b4a138f55af",
};

static int script_known(const resp_arg *sha) {
    if (!S->scripts_flushed)
        for (size_t i = 0; i < sizeof juicefs_scripts / sizeof *juicefs_scripts; i++)
            if (is(sha, juicefs_scripts[i])) return 2;
    for (int i = 0; i < S->nscripts; i++)
        if (is(sha, S->scripts[i])) return 1;
    return 0;
}

static int fake_exec(fake_conn *fc, int argc, const resp_arg *a, int variant, uint8_t sel, resp_buf *out);

/* Keys a write names: argv positions from..to step. */
static void write_keys(const resp_arg *a, int from, int to, int step) {
    resp_arg keys[16];
    int n = 0;
    for (int i = from; i < to && n < 16; i += step) keys[n++] = a[i];
    invalidate_keys(n, keys);
}

/* EXEC: the queued commands, each answered as alone. */
static void exec_queued(fake_conn *fc, resp_buf *out) {
    resp_req_parser p;
    resp_limits lim;
    resp_limits_default(&lim);
    resp_req_init(&p, &lim);
    resp_enc_array(out, fc->nqueued);
    /* the queue may grow no more: copy it out */
    resp_buf q = fc->queued;
    resp_buf_init(&fc->queued);
    int n = fc->nqueued;
    fc->nqueued = 0;
    size_t at = 0;
    for (int i = 0; i < n && at < q.len; i++) {
        int rc = resp_req_parse(&p, q.data + at, q.len - at);
        CHECK(rc == RESP_OK);
        uint8_t b = sc_next();
        fake_exec(fc, p.argc, p.argv, (b & 7) == 5 ? V_ERR : (b & 7) == 4 ? V_ALT : V_OK, b, out);
        at += p.frame_len;
    }
    resp_req_deinit(&p);
    resp_buf_deinit(&q);
}

static void subscribe_reply(fake_conn *fc, resp_buf *out, const char *kind, const resp_arg *ch, int count) {
    resp_enc_push(out, 3, fc->proto);
    resp_enc_bulk_str(out, kind);
    if (ch != NULL)
        resp_enc_bulk(out, ch->ptr, ch->len);
    else
        resp_enc_null(out, fc->proto);
    resp_enc_int(out, count);
}

static int client_cmd(fake_conn *fc, int argc, const resp_arg *a, resp_buf *out) {
    char name[80];
    if (argc < 2) return err_fmt(out, "ERR wrong number of arguments for 'client' command"), 0;
    if (is(&a[1], "ID")) return resp_enc_int(out, fc->id), 0;
    if (is(&a[1], "SETNAME") || is(&a[1], "SETINFO") || is(&a[1], "NO-EVICT") || is(&a[1], "NO-TOUCH") ||
        is(&a[1], "CACHING") || is(&a[1], "UNPAUSE") || is(&a[1], "PAUSE"))
        return resp_enc_simple(out, "OK"), 0;
    if (is(&a[1], "GETNAME")) return resp_enc_null(out, fc->proto), 0;
    if (is(&a[1], "GETREDIR")) return resp_enc_int(out, -1), 0;
    if (is(&a[1], "KILL")) return resp_enc_int(out, 0), 0;
    if (is(&a[1], "LIST") || is(&a[1], "INFO")) {
        char line[128];
        snprintf(line, sizeof line, "id=%lld addr=/tmp/x.sock:0 db=%d resp=%d\n", fc->id, fc->db, fc->proto);
        return resp_enc_bulk_str(out, line), 0;
    }
    if (is(&a[1], "REPLY")) {
        if (argc != 3) return err_fmt(out, "ERR syntax error"), 0;
        if (is(&a[2], "ON")) {
            fc->reply_off = fc->reply_skip = 0;
            return resp_enc_simple(out, "OK"), X_FORCE;
        }
        if (is(&a[2], "OFF")) return fc->reply_off = 1, X_NOREPLY;
        if (is(&a[2], "SKIP")) return fc->reply_skip = 1, X_NOREPLY;
        return err_fmt(out, "ERR syntax error"), 0;
    }
    if (is(&a[1], "TRACKING")) {
        if (argc < 3) return err_fmt(out, "ERR syntax error"), 0;
        int on = is(&a[2], "ON");
        long long redirect = 0;
        for (int i = 3; i + 1 < argc; i++)
            if (is(&a[i], "REDIRECT") && !arg_ll(&a[i + 1], &redirect))
                return err_fmt(out, "ERR value is not an integer or out of range"), 0;
        if (on && redirect > 0) {
            fake_conn *t = S->conns;
            while (t != NULL && t->id != redirect) t = t->next;
            if (t == NULL) return err_fmt(out, "ERR The client ID you want redirect to does not exist"), 0;
            t->redirect_target = 1;
        } else {
            fc->self_tracking = on;
        }
        return resp_enc_simple(out, "OK"), 0;
    }
    printable(&a[1], name, sizeof name);
    err_fmt(out, "ERR unknown subcommand '%s'. Try CLIENT HELP.", name);
    return 0;
}

/* Lookup script: HGET d<parent> name (type byte + 8-byte inode), GET i<ino>. */
static void lookup_script(fake_conn *fc, const resp_arg *a, resp_buf *out) {
    kv_ent *d = kv_find(fc->db, &a[3], &a[4]);
    if (d == NULL) {
        resp_enc_error(out, "ERR Error running script (call to f_x): @user_script:6: ENOENT");
        return;
    }
    if (d->vlen != 9) {
        resp_enc_error(out, "ERR Error running script (call to f_x): @user_script:8: EINVAL");
        return;
    }
    uint64_t ino = 0;
    for (int i = 1; i < 9; i++) ino = ino << 8 | (unsigned char)d->val[i];
    char ikey[32];
    snprintf(ikey, sizeof ikey, "i%llu", (unsigned long long)ino);
    resp_arg k = {ikey, strlen(ikey)};
    kv_ent *attr = kv_find(fc->db, &k, NULL);
    resp_enc_array(out, 2);
    resp_enc_int(out, (long long)(ino & 0x7fffffffffffffffULL));
    if (attr != NULL)
        resp_enc_bulk(out, attr->val, attr->vlen);
    else
        resp_enc_null(out, 2);
}

/* Answers one command as Redis 7 would; variant bends the answer. Returns
 * X_* flags. */
static int fake_exec(fake_conn *fc, int argc, const resp_arg *a, int variant, uint8_t sel, resp_buf *out) {
    char name[80];
    long long n;
    const resp_arg *cmd = &a[0];
    if (argc >= 2) remember_key(&a[1]);

    /* the connection's state decides first */
    if ((S->flags & F_REQUIREPASS) && !fc->authed && !is(cmd, "AUTH") && !is(cmd, "HELLO") && !is(cmd, "QUIT") &&
        !is(cmd, "RESET"))
        return resp_enc_error(out, "NOAUTH Authentication required."), 0;
    if (fc->nsubs > 0 && fc->proto == 2 && !is(cmd, "SUBSCRIBE") && !is(cmd, "UNSUBSCRIBE") &&
        !is(cmd, "PSUBSCRIBE") && !is(cmd, "PUNSUBSCRIBE") && !is(cmd, "SSUBSCRIBE") && !is(cmd, "SUNSUBSCRIBE") &&
        !is(cmd, "PING") && !is(cmd, "QUIT") && !is(cmd, "RESET")) {
        printable(cmd, name, sizeof name);
        err_fmt(out,
                "ERR Can't execute '%s': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed "
                "in this context",
                name);
        return 0;
    }
    if (is(cmd, "MULTI")) {
        if (fc->in_multi) return resp_enc_error(out, "ERR MULTI calls can not be nested"), 0;
        fc->in_multi = 1;
        fc->multi_dirty = 0;
        fc->nqueued = 0;
        resp_buf_reset(&fc->queued);
        return resp_enc_simple(out, "OK"), 0;
    }
    if (is(cmd, "EXEC")) {
        if (!fc->in_multi) return resp_enc_error(out, "ERR EXEC without MULTI"), 0;
        fc->in_multi = 0;
        if (fc->multi_dirty || variant == V_ERR) {
            fc->nqueued = 0;
            resp_buf_reset(&fc->queued);
            fc->watching = 0;
            return resp_enc_error(out, "EXECABORT Transaction discarded because of previous errors."), 0;
        }
        if (variant == V_ALT && fc->watching) { /* a watched key changed */
            fc->nqueued = 0;
            resp_buf_reset(&fc->queued);
            fc->watching = 0;
            return resp_enc_null_array(out, fc->proto), 0;
        }
        fc->watching = 0;
        exec_queued(fc, out);
        return 0;
    }
    if (is(cmd, "DISCARD")) {
        if (!fc->in_multi) return resp_enc_error(out, "ERR DISCARD without MULTI"), 0;
        fc->in_multi = fc->watching = fc->nqueued = 0;
        resp_buf_reset(&fc->queued);
        return resp_enc_simple(out, "OK"), 0;
    }
    if (is(cmd, "WATCH")) {
        if (fc->in_multi) return resp_enc_error(out, "ERR WATCH inside MULTI is not allowed"), 0;
        if (argc < 2) return resp_enc_error(out, "ERR wrong number of arguments for 'watch' command"), 0;
        fc->watching = 1;
        return resp_enc_simple(out, "OK"), 0;
    }
    if (fc->in_multi && !is(cmd, "QUIT") && !is(cmd, "RESET")) {
        if (variant == V_ERR || is(cmd, "SUBSCRIBE") || is(cmd, "PSUBSCRIBE") || is(cmd, "MONITOR")) {
            fc->multi_dirty = 1;
            printable(cmd, name, sizeof name);
            err_fmt(out, "ERR Command not allowed inside a transaction: '%s'", name);
            return 0;
        }
        resp_enc_command(&fc->queued, argc, a);
        fc->nqueued++;
        return resp_enc_simple(out, "QUEUED"), 0;
    }
    if (variant == V_ERR) {
        if (sel & 0x40)
            resp_enc_error(out, "WRONGTYPE Operation against a key holding the wrong kind of value");
        else
            resp_enc_error(out, "ERR fuzz: refused");
        return 0;
    }

    /* connection */
    if (is(cmd, "PING")) {
        if (fc->nsubs > 0 && fc->proto == 2) {
            resp_enc_array(out, 2);
            resp_enc_bulk_str(out, "pong");
            resp_enc_bulk(out, argc > 1 ? a[1].ptr : "", argc > 1 ? a[1].len : 0);
        } else if (argc > 1) {
            resp_enc_bulk(out, a[1].ptr, a[1].len);
        } else {
            resp_enc_simple(out, "PONG");
        }
        return 0;
    }
    if (is(cmd, "ECHO")) {
        if (argc != 2) return resp_enc_error(out, "ERR wrong number of arguments for 'echo' command"), 0;
        return resp_enc_bulk(out, a[1].ptr, a[1].len), 0;
    }
    if (is(cmd, "QUIT")) return resp_enc_simple(out, "OK"), X_CLOSE;
    if (is(cmd, "RESET")) {
        fc->proto = 2;
        fc->db = 0;
        fc->authed = !(S->flags & F_REQUIREPASS);
        fc->in_multi = fc->watching = fc->nqueued = fc->nsubs = fc->inv = fc->monitor = 0;
        fc->self_tracking = fc->reply_off = fc->reply_skip = 0;
        resp_buf_reset(&fc->queued);
        return resp_enc_simple(out, "RESET"), 0;
    }
    if (is(cmd, "AUTH")) {
        if (argc < 2) return resp_enc_error(out, "ERR wrong number of arguments for 'auth' command"), 0;
        if (argc > 3) return resp_enc_error(out, "ERR syntax error"), 0;
        if (argc == 2 && !(S->flags & F_REQUIREPASS))
            return resp_enc_error(out, "ERR AUTH <password> called without any password configured for the "
                                       "default user. Are you sure your configuration is correct?"),
                   0;
        if (!creds_ok(argc == 3 ? &a[1] : NULL, &a[argc - 1]))
            return resp_enc_error(out, "WRONGPASS invalid username-password pair or user is disabled."), 0;
        fc->authed = 1;
        return resp_enc_simple(out, "OK"), 0;
    }
    if (is(cmd, "HELLO")) {
        int proto = fc->proto;
        if (argc >= 2) {
            if (!arg_ll(&a[1], &n)) return resp_enc_error(out, "ERR Protocol version is not an integer or out of range"), 0;
            if (n != 2 && n != 3) return resp_enc_error(out, "NOPROTO unsupported protocol version"), 0;
            proto = (int)n;
        }
        for (int i = 2; i < argc; i++) {
            if (is(&a[i], "AUTH") && i + 2 < argc) {
                if (!creds_ok(&a[i + 1], &a[i + 2]))
                    return resp_enc_error(out, "WRONGPASS invalid username-password pair or user is disabled."), 0;
                fc->authed = 1;
                i += 2;
            } else if (is(&a[i], "SETNAME") && i + 1 < argc) {
                i++;
            } else {
                printable(&a[i], name, sizeof name);
                return err_fmt(out, "ERR Syntax error in HELLO option '%s'", name), 0;
            }
        }
        if ((S->flags & F_REQUIREPASS) && !fc->authed)
            return resp_enc_error(out, "NOAUTH HELLO must be called with the client already authenticated, otherwise "
                                       "the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the "
                                       "client and select the RESP protocol version at the same time"),
                   0;
        fc->proto = proto;
        if (variant == V_ALT) return resp_enc_map(out, 0, fc->proto), 0;
        hello_reply(fc, out);
        return 0;
    }
    if (is(cmd, "SELECT")) {
        if (argc != 2) return resp_enc_error(out, "ERR wrong number of arguments for 'select' command"), 0;
        if (!arg_ll(&a[1], &n)) return resp_enc_error(out, "ERR value is not an integer or out of range"), 0;
        if (n < 0 || n > 15) return resp_enc_error(out, "ERR DB index is out of range"), 0;
        fc->db = (int)n;
        return resp_enc_simple(out, "OK"), 0;
    }
    if (is(cmd, "CLIENT")) return client_cmd(fc, argc, a, out);
    if (is(cmd, "COMMAND")) {
        const char *t = S->flags & F_FULL_TABLE ? full_table : small_table;
        size_t tl = S->flags & F_FULL_TABLE ? full_table_len : small_table_len;
        if (argc == 1) return resp_buf_append(out, t, tl), 0;
        if (is(&a[1], "COUNT")) return resp_enc_int(out, small_table_count), 0;
        return resp_enc_array(out, 0), 0;
    }
    if (is(cmd, "SUBSCRIBE") || is(cmd, "PSUBSCRIBE") || is(cmd, "SSUBSCRIBE")) {
        if (argc < 2) return resp_enc_error(out, "ERR wrong number of arguments"), 0;
        const char *kind = is(cmd, "SUBSCRIBE") ? "subscribe" : is(cmd, "PSUBSCRIBE") ? "psubscribe" : "ssubscribe";
        for (int i = 1; i < argc; i++) {
            fc->nsubs++;
            if (is(&a[i], "__redis__:invalidate")) fc->inv = 1;
            subscribe_reply(fc, out, kind, &a[i], fc->nsubs);
        }
        return 0;
    }
    if (is(cmd, "UNSUBSCRIBE") || is(cmd, "PUNSUBSCRIBE") || is(cmd, "SUNSUBSCRIBE")) {
        const char *kind = is(cmd, "UNSUBSCRIBE") ? "unsubscribe" : is(cmd, "PUNSUBSCRIBE") ? "punsubscribe"
                                                                                          : "sunsubscribe";
        if (argc == 1) {
            if (fc->nsubs == 0) return subscribe_reply(fc, out, kind, NULL, 0), 0;
            resp_arg ch = {"ch", 2};
            while (fc->nsubs > 0) {
                fc->nsubs--;
                subscribe_reply(fc, out, kind, &ch, fc->nsubs);
            }
            fc->inv = 0;
            return 0;
        }
        for (int i = 1; i < argc; i++) {
            if (fc->nsubs > 0) fc->nsubs--;
            if (is(&a[i], "__redis__:invalidate")) fc->inv = 0;
            subscribe_reply(fc, out, kind, &a[i], fc->nsubs);
        }
        return 0;
    }
    if (is(cmd, "PUBLISH") || is(cmd, "SPUBLISH")) {
        if (argc != 3) return resp_enc_error(out, "ERR wrong number of arguments for 'publish' command"), 0;
        int receivers = 0;
        resp_buf m;
        resp_buf_init(&m);
        for (fake_conn *t = S->conns; t != NULL; t = t->next) {
            if (t->dead || t->closing || t->nsubs == 0 || t->inv) continue;
            resp_buf_reset(&m);
            resp_enc_push(&m, 3, t->proto);
            resp_enc_bulk_str(&m, "message");
            resp_enc_bulk(&m, a[1].ptr, a[1].len);
            resp_enc_bulk(&m, a[2].ptr, a[2].len);
            fc_send(t, m.data, m.len, 0);
            receivers++;
        }
        resp_buf_deinit(&m);
        return resp_enc_int(out, receivers), 0;
    }
    if (is(cmd, "MONITOR")) {
        fc->monitor = 1;
        return resp_enc_simple(out, "OK"), 0;
    }
    if (is(cmd, "INFO")) {
        static const char info[] = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n";
        if (sel & 0x80) { /* a long one: several reads */
            resp_buf big;
            resp_buf_init(&big);
            resp_buf_append(&big, info, sizeof info - 1);
            for (int i = 0; i < 1200; i++) resp_buf_printf(&big, "key_%04d:%060d\r\n", i, i);
            resp_enc_verbatim(out, "txt", big.data, big.len, fc->proto);
            resp_buf_deinit(&big);
            return 0;
        }
        return resp_enc_verbatim(out, "txt", info, sizeof info - 1, fc->proto), 0;
    }
    if (is(cmd, "SCRIPT")) {
        if (argc >= 3 && is(&a[1], "LOAD")) {
            unsigned char md[SHA_DIGEST_LENGTH];
            char hex[41];
            SHA1((const unsigned char *)a[2].ptr, a[2].len, md);
            for (int i = 0; i < SHA_DIGEST_LENGTH; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
            if (S->nscripts < 8) memcpy(S->scripts[S->nscripts++], hex, 41);
            return resp_enc_bulk(out, hex, 40), 0;
        }
        if (argc >= 2 && is(&a[1], "FLUSH")) {
            S->nscripts = 0;
            S->scripts_flushed = 1;
            return resp_enc_simple(out, "OK"), 0;
        }
        if (argc >= 2 && is(&a[1], "EXISTS")) {
            resp_enc_array(out, argc - 2);
            for (int i = 2; i < argc; i++) resp_enc_int(out, script_known(&a[i]) != 0);
            return 0;
        }
        return resp_enc_error(out, "ERR unknown subcommand"), 0;
    }
    if (is(cmd, "EVALSHA") || is(cmd, "EVALSHA_RO") || is(cmd, "EVAL") || is(cmd, "EVAL_RO") || is(cmd, "FCALL")) {
        if (argc < 3 || !arg_ll(&a[2], &n) || n < 0 || n > argc - 3)
            return resp_enc_error(out, "ERR Number of keys can't be greater than number of args"), 0;
        int known = is(cmd, "EVAL") || is(cmd, "EVAL_RO") ? 1 : is(cmd, "FCALL") ? 1 : script_known(&a[1]);
        if (!known) return resp_enc_error(out, "NOSCRIPT No matching script. Please use EVAL."), 0;
        if (known == 2 && n == 2 && argc == 5) {
            lookup_script(fc, a, out);
            return 0;
        }
        write_keys(a, 3, 3 + (int)n, 1);
        if (variant == V_ALT) return alt_reply(fc, out, sel), 0;
        return resp_enc_int(out, 1), 0;
    }

    /* data */
    if (is(cmd, "GET") || is(cmd, "GETEX") || is(cmd, "GETDEL") || is(cmd, "GETSET")) {
        if (argc < 2) return resp_enc_error(out, "ERR wrong number of arguments for 'get' command"), 0;
        kv_ent *e = kv_find(fc->db, &a[1], NULL);
        if (variant == V_ALT) {
            alt_reply(fc, out, sel);
        } else if ((sel & 0x80) && e != NULL) { /* a value longer than one read */
            resp_buf big;
            resp_buf_init(&big);
            while (big.len < 70000) resp_buf_append(&big, e->vlen ? e->val : "x", e->vlen ? e->vlen : 1);
            resp_enc_bulk(out, big.data, big.len);
            resp_buf_deinit(&big);
        } else {
            bulk_or_null(out, e, fc->proto);
        }
        if (is(cmd, "GETDEL")) {
            kv_del(fc->db, &a[1]);
            write_keys(a, 1, 2, 1);
        } else if (is(cmd, "GETSET") && argc >= 3) {
            kv_set(fc->db, &a[1], NULL, a[2].ptr, a[2].len);
            write_keys(a, 1, 2, 1);
        }
        return 0;
    }
    if (is(cmd, "MGET")) {
        if (argc < 2) return resp_enc_error(out, "ERR wrong number of arguments for 'mget' command"), 0;
        if (variant == V_ALT) return alt_reply(fc, out, sel), 0;
        resp_enc_array(out, argc - 1);
        for (int i = 1; i < argc; i++) bulk_or_null(out, kv_find(fc->db, &a[i], NULL), fc->proto);
        return 0;
    }
    if (is(cmd, "HGET")) {
        if (argc != 3) return resp_enc_error(out, "ERR wrong number of arguments for 'hget' command"), 0;
        if (variant == V_ALT) return alt_reply(fc, out, sel), 0;
        bulk_or_null(out, kv_find(fc->db, &a[1], &a[2]), fc->proto);
        return 0;
    }
    if (is(cmd, "HMGET")) {
        if (argc < 3) return resp_enc_error(out, "ERR wrong number of arguments for 'hmget' command"), 0;
        resp_enc_array(out, argc - 2);
        for (int i = 2; i < argc; i++) bulk_or_null(out, kv_find(fc->db, &a[1], &a[i]), fc->proto);
        return 0;
    }
    if (is(cmd, "HGETALL")) {
        if (argc != 2) return resp_enc_error(out, "ERR wrong number of arguments for 'hgetall' command"), 0;
        int cnt = 0;
        for (int i = 0; i < KV_N; i++) {
            kv_ent *e = &S->kv[i];
            if (e->used && e->is_hash && e->db == fc->db && e->klen == (a[1].len < KV_K ? a[1].len : KV_K) &&
                memcmp(e->key, a[1].ptr, e->klen) == 0)
                cnt++;
        }
        resp_enc_map(out, cnt, fc->proto);
        for (int i = 0; i < KV_N; i++) {
            kv_ent *e = &S->kv[i];
            if (e->used && e->is_hash && e->db == fc->db && e->klen == (a[1].len < KV_K ? a[1].len : KV_K) &&
                memcmp(e->key, a[1].ptr, e->klen) == 0) {
                resp_enc_bulk(out, e->field, e->flen);
                resp_enc_bulk(out, e->val, e->vlen);
            }
        }
        return 0;
    }
    if (is(cmd, "SET") || is(cmd, "SETNX") || is(cmd, "SETEX") || is(cmd, "PSETEX") || is(cmd, "APPEND")) {
        int ex = is(cmd, "SETEX") || is(cmd, "PSETEX");
        if (argc < (ex ? 4 : 3)) return resp_enc_error(out, "ERR wrong number of arguments for 'set' command"), 0;
        const resp_arg *v = &a[ex ? 3 : 2];
        int nx = is(cmd, "SETNX"), xx = 0, get = 0;
        for (int i = 3; !ex && i < argc; i++) {
            if (is(&a[i], "NX")) nx = 1;
            if (is(&a[i], "XX")) xx = 1;
            if (is(&a[i], "GET")) get = 1;
        }
        kv_ent *old = kv_find(fc->db, &a[1], NULL);
        if (get) bulk_or_null(out, old, fc->proto);
        if ((nx && old != NULL) || (xx && old == NULL)) {
            if (is(cmd, "SETNX"))
                resp_enc_int(out, 0);
            else if (!get)
                resp_enc_null(out, fc->proto);
            return 0;
        }
        if (is(cmd, "APPEND") && old != NULL) {
            char buf[2 * KV_V];
            size_t l = old->vlen;
            memcpy(buf, old->val, l);
            size_t m = v->len < KV_V ? v->len : KV_V;
            memcpy(buf + l, v->ptr, m);
            kv_set(fc->db, &a[1], NULL, buf, l + m);
            resp_enc_int(out, (long long)(l + v->len));
        } else {
            kv_set(fc->db, &a[1], NULL, v->ptr, v->len);
            if (is(cmd, "SETNX"))
                resp_enc_int(out, 1);
            else if (is(cmd, "APPEND"))
                resp_enc_int(out, (long long)v->len);
            else if (!get)
                resp_enc_simple(out, "OK");
        }
        write_keys(a, 1, 2, 1);
        return 0;
    }
    if (is(cmd, "MSET") || is(cmd, "MSETNX")) {
        if (argc < 3 || argc % 2 == 0)
            return resp_enc_error(out, "ERR wrong number of arguments for 'mset' command"), 0;
        for (int i = 1; i + 1 < argc; i += 2) kv_set(fc->db, &a[i], NULL, a[i + 1].ptr, a[i + 1].len);
        write_keys(a, 1, argc, 2);
        if (is(cmd, "MSETNX")) return resp_enc_int(out, 1), 0;
        return resp_enc_simple(out, "OK"), 0;
    }
    if (is(cmd, "HSET") || is(cmd, "HMSET") || is(cmd, "HSETNX")) {
        if (argc < 4 || argc % 2 == 1)
            return resp_enc_error(out, "ERR wrong number of arguments for 'hset' command"), 0;
        int added = 0;
        for (int i = 2; i + 1 < argc; i += 2) {
            if (kv_find(fc->db, &a[1], &a[i]) == NULL) added++;
            else if (is(cmd, "HSETNX")) continue;
            kv_set(fc->db, &a[1], &a[i], a[i + 1].ptr, a[i + 1].len);
        }
        write_keys(a, 1, 2, 1);
        if (is(cmd, "HMSET")) return resp_enc_simple(out, "OK"), 0;
        return resp_enc_int(out, added), 0;
    }
    if (is(cmd, "HDEL")) {
        if (argc < 3) return resp_enc_error(out, "ERR wrong number of arguments for 'hdel' command"), 0;
        int removed = 0;
        for (int i = 2; i < argc; i++) removed += kv_del_field(fc->db, &a[1], &a[i]);
        write_keys(a, 1, 2, 1);
        return resp_enc_int(out, removed), 0;
    }
    if (is(cmd, "DEL") || is(cmd, "UNLINK")) {
        if (argc < 2) return resp_enc_error(out, "ERR wrong number of arguments for 'del' command"), 0;
        int removed = 0;
        for (int i = 1; i < argc; i++) removed += kv_del(fc->db, &a[i]);
        write_keys(a, 1, argc, 1);
        return resp_enc_int(out, removed), 0;
    }
    if (is(cmd, "EXISTS")) {
        int cnt = 0;
        for (int i = 1; i < argc; i++) cnt += kv_exists(fc->db, &a[i]);
        return resp_enc_int(out, cnt), 0;
    }
    if (is(cmd, "INCR") || is(cmd, "DECR") || is(cmd, "INCRBY") || is(cmd, "DECRBY") || is(cmd, "HINCRBY")) {
        int h = is(cmd, "HINCRBY");
        int by = is(cmd, "INCRBY") || is(cmd, "DECRBY") || h;
        if (argc != 2 + by + h) return resp_enc_error(out, "ERR wrong number of arguments"), 0;
        long long d = 1, cur = 0;
        if (by && !arg_ll(&a[argc - 1], &d)) return resp_enc_error(out, "ERR value is not an integer or out of range"), 0;
        if (is(cmd, "DECR") || is(cmd, "DECRBY")) d = d == INT64_MIN ? 0 : -d;
        kv_ent *e = kv_find(fc->db, &a[1], h ? &a[2] : NULL);
        if (e != NULL && !resp_string2ll(e->val, e->vlen, &cur))
            return resp_enc_error(out, "ERR value is not an integer or out of range"), 0;
        if ((d > 0 && cur > INT64_MAX - d) || (d < 0 && cur < INT64_MIN - d))
            return resp_enc_error(out, "ERR increment or decrement would overflow"), 0;
        cur += d;
        char num[32];
        int len = snprintf(num, sizeof num, "%lld", cur);
        kv_set(fc->db, &a[1], h ? &a[2] : NULL, num, (size_t)len);
        write_keys(a, 1, 2, 1);
        return resp_enc_int(out, cur), 0;
    }
    if (is(cmd, "RENAME") || is(cmd, "COPY")) {
        if (argc < 3) return resp_enc_error(out, "ERR wrong number of arguments"), 0;
        kv_ent *e = kv_find(fc->db, &a[1], NULL);
        if (e == NULL) return is(cmd, "COPY") ? (resp_enc_int(out, 0), 0) : (resp_enc_error(out, "ERR no such key"), 0);
        char v[KV_V];
        unsigned vl = e->vlen;
        memcpy(v, e->val, vl);
        if (is(cmd, "RENAME")) kv_del(fc->db, &a[1]);
        kv_set(fc->db, &a[2], NULL, v, vl);
        write_keys(a, 1, 3, 1);
        return is(cmd, "COPY") ? (resp_enc_int(out, 1), 0) : (resp_enc_simple(out, "OK"), 0);
    }
    if (is(cmd, "FLUSHALL") || is(cmd, "FLUSHDB")) {
        kv_flush(is(cmd, "FLUSHALL") ? -1 : fc->db);
        broadcast_invalidation(0, NULL);
        return resp_enc_simple(out, "OK"), 0;
    }
    if (is(cmd, "SWAPDB")) {
        long long x, y;
        if (argc != 3 || !arg_ll(&a[1], &x) || !arg_ll(&a[2], &y) || x < 0 || y < 0 || x > 15 || y > 15)
            return resp_enc_error(out, "ERR invalid first DB index"), 0;
        for (int i = 0; i < KV_N; i++) {
            if (S->kv[i].db == x)
                S->kv[i].db = (int)y;
            else if (S->kv[i].db == y)
                S->kv[i].db = (int)x;
        }
        broadcast_invalidation(0, NULL);
        return resp_enc_simple(out, "OK"), 0;
    }
    if (is(cmd, "EXPIRE") || is(cmd, "PEXPIRE") || is(cmd, "EXPIREAT") || is(cmd, "PERSIST") ||
        is(cmd, "LPUSH") || is(cmd, "RPUSH") || is(cmd, "SADD") || is(cmd, "SREM") || is(cmd, "ZADD") ||
        is(cmd, "ZREM") || is(cmd, "LREM") || is(cmd, "SETRANGE") || is(cmd, "INCRBYFLOAT")) {
        if (argc < 2) return resp_enc_error(out, "ERR wrong number of arguments"), 0;
        write_keys(a, 1, 2, 1);
        if (variant == V_ALT) return alt_reply(fc, out, sel), 0;
        return resp_enc_int(out, 1), 0;
    }
    if (is(cmd, "TTL") || is(cmd, "PTTL")) {
        /* no key: -2; keys beginning with 'x' expire soon (a fill's entry
         * gets a deadline, met by the cron a minute later); others none */
        if (argc < 2) return resp_enc_error(out, "ERR wrong number of arguments"), 0;
        if (!kv_exists(fc->db, &a[1])) return resp_enc_int(out, -2), 0;
        return resp_enc_int(out, a[1].len > 0 && a[1].ptr[0] == 'x' ? 3 : -1), 0;
    }
    if (is(cmd, "TYPE")) return resp_enc_simple(out, argc > 1 && kv_exists(fc->db, &a[1]) ? "string" : "none"), 0;
    if (is(cmd, "DBSIZE")) {
        int cnt = 0;
        for (int i = 0; i < KV_N; i++) cnt += S->kv[i].used && S->kv[i].db == fc->db;
        return resp_enc_int(out, cnt), 0;
    }
    if (is(cmd, "KEYS") || is(cmd, "SMEMBERS") || is(cmd, "LRANGE") || is(cmd, "ZRANGE")) {
        if (variant == V_ALT) return resp_enc_set(out, 0, fc->proto), 0;
        resp_enc_array(out, 2);
        resp_enc_bulk_str(out, "a");
        resp_enc_bulk_str(out, "b");
        return 0;
    }
    if (is(cmd, "SCAN")) {
        resp_enc_array(out, 2);
        resp_enc_bulk_str(out, "0");
        resp_enc_array(out, 0);
        return 0;
    }
    if (is(cmd, "BLPOP") || is(cmd, "BRPOP") || is(cmd, "BZPOPMIN") || is(cmd, "BZPOPMAX") || is(cmd, "BLMPOP") ||
        is(cmd, "BRPOPLPUSH") || is(cmd, "BLMOVE") || is(cmd, "XREAD") || is(cmd, "XREADGROUP") || is(cmd, "WAIT")) {
        if (is(cmd, "WAIT")) return resp_enc_int(out, 0), 0;
        if (variant == V_ALT || argc < 3) return resp_enc_null_array(out, fc->proto), 0; /* timed out */
        resp_enc_array(out, 2);
        resp_enc_bulk(out, a[1].ptr, a[1].len);
        resp_enc_bulk_str(out, "v");
        return 0;
    }
    if (is(cmd, "TIME")) {
        resp_enc_array(out, 2);
        resp_enc_bulk_str(out, "1700000000");
        resp_enc_bulk_str(out, "1");
        return 0;
    }
    if (is(cmd, "CONFIG")) {
        if (argc >= 2 && is(&a[1], "GET")) return resp_enc_map(out, 0, fc->proto), 0;
        return resp_enc_simple(out, "OK"), 0;
    }
    if (is(cmd, "ACL")) {
        if (argc >= 2 && is(&a[1], "WHOAMI")) return resp_enc_bulk_str(out, "default"), 0;
        broadcast_invalidation(0, NULL);
        return resp_enc_simple(out, "OK"), 0;
    }
    if (is(cmd, "READONLY") || is(cmd, "READWRITE"))
        return resp_enc_error(out, "ERR This instance has cluster support disabled"), 0;
    if (is(cmd, "ROLE")) {
        resp_enc_array(out, 3);
        resp_enc_bulk_str(out, "master");
        resp_enc_int(out, 0);
        resp_enc_array(out, 0);
        return 0;
    }
    if (is(cmd, "SHUTDOWN")) return X_CLOSE | X_NOREPLY;
    if (is(cmd, "DEBUG") || is(cmd, "OBJECT") || is(cmd, "SYNC") || is(cmd, "PSYNC"))
        return resp_enc_error(out, "ERR fuzz: not here"), 0;
    printable(cmd, name, sizeof name);
    err_fmt(out, "ERR unknown command '%s', with args beginning with: ", name);
    return 0;
}

/* One request from the proxy; one script byte says how it is answered:
 *   bits 0-2  0-3 as Redis would, 4 another type/value, 5 an error,
 *             6 close the connection instead, 7 garbage (not RESP)
 *   bits 3-4  delivery: 0 at once, 1 split (half now), 2 held one idle
 *             point, 3 held two
 *   bit 5     something unsolicited first (push, message, monitor line)
 *   bit 6     close the connection after the reply (also selects
 *             WRONGTYPE for errors)
 *   bit 7     a long value (GET, INFO; several reads) */
static void fc_command(fake_conn *fc, int argc, const resp_arg *argv) {
    uint8_t b = sc_next();
    int v = b & 7, delivery = (b >> 3) & 3;
    if (v == 6) {
        fc->dead = 1;
        return;
    }
    if (b & 0x20) fc_unsolicited(fc, 0);
    if (v == 7) {
        static const char *const garbage[] = {"?\r\n", "$-2\r\n", ":12a\r\n", "*1\r\n$3\r\nabcd\r\n", "%1\r\n:1\r\n+\n\r\n"};
        const char *g = garbage[(b >> 5) % 5];
        fc_send(fc, g, strlen(g), delivery);
        return;
    }
    resp_buf out;
    resp_buf_init(&out);
    int variant = v == 4 ? V_ALT : v == 5 ? V_ERR : V_OK;
    /* CLIENT REPLY OFF: nothing until CLIENT REPLY ON; SKIP: not the next */
    int quiet = fc->reply_off || fc->reply_skip;
    fc->reply_skip = 0;
    int x = fake_exec(fc, argc, argv, variant, b, &out);
    if (!(x & X_NOREPLY) && (!quiet || (x & X_FORCE))) fc_send(fc, out.data, out.len, delivery);
    resp_buf_deinit(&out);
    if ((x & X_CLOSE) || (b & 0x40)) fc_close_after_output(fc);
}

/* ------------------------------------------------------------------------ */
/* fake Redis: connections                                                  */

static void fc_free(fake_conn *fc) {
    for (fake_conn **pp = &S->conns; *pp != NULL; pp = &(*pp)->next)
        if (*pp == fc) {
            *pp = fc->next;
            break;
        }
    S->nconns--;
    S->activity++;
    bufferevent_free(fc->bev);
    evbuffer_free(fc->held);
    resp_req_deinit(&fc->rq);
    resp_buf_deinit(&fc->queued);
    free(fc);
}

static void fc_read_cb(struct bufferevent *bev, void *arg) {
    fake_conn *fc = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    S->activity++;
    fc->in_read = 1;
    while (!fc->dead && !fc->closing) {
        size_t len = evbuffer_get_length(in);
        if (len == 0 || (fc->rq.need != 0 && len < fc->rq.need)) break;
        const char *data = (const char *)evbuffer_pullup(in, -1);
        int rc = resp_req_parse(&fc->rq, data, len);
        if (rc == RESP_AGAIN) break;
        /* the proxy forwards only what it framed itself */
        if (rc != RESP_OK) fprintf(stderr, "fake redis: the proxy sent a bad frame: %s\n", fc->rq.err);
        CHECK(rc == RESP_OK);
        size_t flen = fc->rq.frame_len;
        tracef("redis<", data, flen);
        if (fc->rq.argc > 0) fc_command(fc, fc->rq.argc, fc->rq.argv);
        evbuffer_drain(in, flen);
    }
    fc->in_read = 0;
    if (fc->dead) fc_free(fc);
}

static void fc_write_cb(struct bufferevent *bev, void *arg) { fc_maybe_close(arg); }

static void fc_event_cb(struct bufferevent *bev, short what, void *arg) {
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) fc_free(arg);
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg) {
    fake_conn *fc = calloc(1, sizeof *fc);
    CHECK(fc != NULL);
    resp_limits lim;
    resp_limits_default(&lim);
    resp_req_init(&fc->rq, &lim);
    resp_buf_init(&fc->queued);
    fc->held = evbuffer_new();
    fc->bev = bufferevent_socket_new(S->srv.base, fd, BEV_OPT_CLOSE_ON_FREE);
    CHECK(fc->held != NULL && fc->bev != NULL);
    fc->id = ++S->next_id;
    fc->proto = 2;
    fc->authed = !(S->flags & F_REQUIREPASS);
    bufferevent_setcb(fc->bev, fc_read_cb, fc_write_cb, fc_event_cb, fc);
    bufferevent_enable(fc->bev, EV_READ | EV_WRITE);
    fc->next = S->conns;
    S->conns = fc;
    S->nconns++;
    S->activity++;
}

/* ------------------------------------------------------------------------ */
/* the client's side                                                        */

/* Frames what the client received; every frame must be valid RESP. */
static void client_frame(void) {
    size_t at = 0;
    while (at < S->rx_len) {
        int rc = resp_reply_parse(&S->rp, S->rx + at, S->rx_len - at);
        if (rc == RESP_AGAIN) break;
        if (rc != RESP_OK) {
            fprintf(stderr, "client received a bad frame (%s) after %llu good ones:\n", S->rp.err,
                    (unsigned long long)S->frames);
            trace = 1;
            tracef("  bytes", S->rx + at, S->rx_len - at);
        }
        CHECK(rc == RESP_OK);
        at += S->rp.frame_len;
        S->frames++;
    }
    if (at > 0) {
        memmove(S->rx, S->rx + at, S->rx_len - at);
        S->rx_len -= at;
    }
}

static void client_drain(void) {
    char buf[65536];
    while (S->cfd >= 0 && !S->client_eof && !S->slow_reader) {
        ssize_t n = read(S->cfd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK) S->client_eof = 1; /* ECONNRESET */
            return;
        }
        if (n == 0) {
            S->client_eof = 1;
            return;
        }
        S->activity++;
        tracef("client<", buf, (size_t)n);
        S->rx_total += (uint64_t)n;
        if (S->rx_total > MAX_CLIENT_BYTES) continue; /* counted, no longer framed */
        if (S->rx_len + (size_t)n > S->rx_cap) {
            size_t cap = S->rx_cap ? S->rx_cap : 65536;
            while (cap < S->rx_len + (size_t)n) cap *= 2;
            char *p = realloc(S->rx, cap);
            CHECK(p != NULL);
            S->rx = p;
            S->rx_cap = cap;
        }
        memcpy(S->rx + S->rx_len, buf, (size_t)n);
        S->rx_len += (size_t)n;
        client_frame();
    }
}

/* ------------------------------------------------------------------------ */
/* the loop                                                                 */

static int out_of_time(void) {
    if (S->rounds >= MAX_ROUNDS || px_now_ms() > S->deadline_ms) {
        S->cut = 1;
        return 1;
    }
    return 0;
}

static void one_round(void) {
    S->rounds++;
    event_base_loop(S->srv.base, EVLOOP_NONBLOCK);
    client_drain();
}

/* Runs the loop until nothing moved for QUIET_ROUNDS rounds. */
static void run_until_idle(void) {
    int quiet = 0;
    while (quiet < QUIET_ROUNDS && !out_of_time()) {
        uint64_t before = S->activity;
        one_round();
        quiet = S->activity == before ? quiet + 1 : 0;
    }
}

static int anything_held(void) {
    for (fake_conn *fc = S->conns; fc != NULL; fc = fc->next)
        if (evbuffer_get_length(fc->held) > 0) return 1;
    return 0;
}

static void release_held(int all) {
    for (fake_conn *fc = S->conns, *next; fc != NULL; fc = next) {
        next = fc->next;
        if (evbuffer_get_length(fc->held) == 0) continue;
        if (!all && --fc->hold > 0) continue;
        fc->hold = 0;
        /* on the wire now, not at the next round: what an idle point
         * does (a close, say) and these bytes reach the proxy together */
        if (evbuffer_get_length(bufferevent_get_output(fc->bev)) == 0)
            evbuffer_write(fc->held, bufferevent_getfd(fc->bev));
        bufferevent_write_buffer(fc->bev, fc->held);
        S->activity++;
    }
}

/* What the cron does, a minute later than now. */
static void cron_later(void) {
    int64_t now = px_now_ms() + 61000;
    for (px_client *c = S->srv.clients, *next; c != NULL; c = next) {
        next = c->next;
        px_client_cron(c, now);
    }
    px_pools_sweep(&S->srv, now);
}

/* Redis goes away: every connection drops and connects are refused (the
 * socket is gone) until redis_up. */
static void listen_up(void);
static void redis_down(void) {
    if (listen_fd < 0) return;
    evconnlistener_free(S->lst);
    S->lst = NULL;
    close(listen_fd);
    listen_fd = -1;
    unlink(sock_path);
    while (S->conns != NULL) fc_free(S->conns);
}

static void redis_up(void) {
    if (listen_fd >= 0) return;
    listen_up();
    S->lst = evconnlistener_new(S->srv.base, accept_cb, NULL, 0, 0, listen_fd);
    CHECK(S->lst != NULL);
    S->activity++;
}

/* Another client sends one request (GET or SET of the last key the fake
 * Redis saw) and hangs up at once: its reply goes to a zombie. */
static void second_client(int set) {
    int sv[2];
    if (S->srv.stopping || socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) return;
    if (px_client_new(&S->srv, sv[1], "fuzz2", 0) != NULL) {
        resp_arg a[3] = {{set ? "SET" : "GET", 3}, {S->last_key, S->last_key_len}, {"v2", 2}};
        resp_buf b;
        resp_buf_init(&b);
        resp_enc_command(&b, set ? 3 : 2, a);
        if (write(sv[0], b.data, b.len) < 0) {
            /* nothing: the proxy sees a client that hung up */
        }
        resp_buf_deinit(&b);
        S->activity++;
    }
    close(sv[0]);
}

/* SIGTERM, as on_stop_signal handles it (there are no listeners). */
static void graceful_stop(void) {
    px_server *srv = &S->srv;
    if (srv->stopping) return;
    srv->stopping = 1;
    for (px_client *c = srv->clients, *next; c != NULL; c = next) {
        next = c->next;
        px_client_begin_stop(c);
    }
    S->activity++;
}

/* An idle point: one script byte for what the world does meanwhile.
 *   bits 0-3  0-2 nothing, 3 invalidate the last key named, 4 a null
 *             invalidation (flush), 5 the fake Redis closes connection
 *             number (bits 4-7) of its list, 6 the cron runs a minute
 *             later, 7 something unsolicited on connection (bits 4-7),
 *             8 another client GETs the last key and hangs up, 9 the same
 *             with SET, 10 graceful stop (SIGTERM), 11 Redis goes away,
 *             12 Redis comes back, 13 the client hangs up (its
 *             socket shut for writing), 14-15 nothing
 * after held replies moved one idle point on. */
static void idle_point(void) {
    uint8_t b = sc_next();
    release_held(0);
    fake_conn *fc = S->conns;
    for (int i = 0; fc != NULL && S->nconns > 0 && i < (b >> 4) % S->nconns; i++) fc = fc->next;
    switch (b & 15) {
    case 3: {
        resp_arg k = {S->last_key, S->last_key_len};
        invalidate_keys(1, &k);
        break;
    }
    case 4: broadcast_invalidation(0, NULL); break;
    case 5:
        if (fc != NULL) fc_free(fc);
        break;
    case 6: cron_later(); break;
    case 7:
        if (fc != NULL && !fc->closing) fc_unsolicited(fc, 0);
        break;
    case 8: second_client(0); break;
    case 9: second_client(1); break;
    case 10: graceful_stop(); break;
    case 11: redis_down(); break;
    case 12: redis_up(); break;
    case 13: /* the client hangs up, with whatever is in flight */
        if (S->cfd >= 0) shutdown(S->cfd, SHUT_WR);
        S->hung_up = 1;
        S->activity++;
        break;
    default: break;
    }
}

static void client_write_all(const uint8_t *p, size_t n) {
    while (n > 0 && S->cfd >= 0 && !out_of_time()) {
        ssize_t w = write(S->cfd, p, n);
        if (w > 0) {
            tracef("client>", (const char *)p, (size_t)w);
            p += w, n -= (size_t)w;
            S->activity++;
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (S->srv.stopping) return; /* it reads no more */
            one_round(); /* the proxy reads, we read what it answered */
            continue;
        }
        return; /* EPIPE: the proxy closed the client */
    }
}

/* ------------------------------------------------------------------------ */
/* the server, as px_server_run makes and tears it                          */

static void flush_cb(evutil_socket_t fd, short what, void *arg) { px_io_flush_all(arg); }

static void reap_cb(evutil_socket_t fd, short what, void *arg) { px_server_reap(arg); }

static void set1(px_config *cfg, const char *name, const char *value) {
    char err[512];
    char *argv[1] = {(char *)value};
    if (px_config_set(cfg, name, 1, argv, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_session: %s %s: %s\n", name, value, err);
        CHECK(0);
    }
}

static void set2(px_config *cfg, const char *name, const char *v1, const char *v2) {
    char err[512];
    char *argv[2] = {(char *)v1, (char *)v2};
    if (px_config_set(cfg, name, 2, argv, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_session: %s %s %s: %s\n", name, v1, v2, err);
        CHECK(0);
    }
}

static void configure(px_config *cfg, unsigned flags) {
    static const char *const modes[] = {"bcast", "bcast", "default", "optin"};
    char url[300];
    px_config_init(cfg);
    snprintf(url, sizeof url, "unix://%s%s%s", flags & F_UP_CREDS ? "default:pw@" : "", sock_path,
             flags & F_DB1 ? "?db=1" : "");
    set1(cfg, "upstream", url);
    set1(cfg, "port", "0");
    set1(cfg, "upstream-connections", flags & F_ONE_CONN ? "1" : "2");
    if (flags & F_BATCH2) set1(cfg, "batch-max-commands", "2");
    if (flags & F_SMALL_LIMITS) {
        set1(cfg, "max-multibulk-len", "8");
        set1(cfg, "proto-max-inline-len", "64");
        set1(cfg, "proto-max-nesting", "3"); /* obsolete: accepted, no effect */
    }
    set1(cfg, "cache-max-memory", (flags & F_CACHE_MASK) == 0 ? "0" : flags & F_SMALL_CACHE ? "4kb" : "1mb");
    if (flags & F_SMALL_CACHE) set1(cfg, "cache-max-value", "16");
    set1(cfg, "tracking-mode", modes[flags & F_CACHE_MASK]);
    if (flags & F_ALL_KEYS) {
        set1(cfg, "profile", "none");
        set2(cfg, "cache-rule", "GET", "*");
        set2(cfg, "cache-rule", "HGET", "h*");
        set1(cfg, "cache-lookup-script", "0123456789abcdef0123456789abcdef01234567");
    }
    if (flags & F_KEY_PREFIX) set1(cfg, "key-prefix", "{1}");
    if (flags & F_SMALL_OUTPUT) set1(cfg, "client-output-buffer-limit", "2kb");
    if (flags & F_TIMEOUT) set1(cfg, "timeout", "1");
}

static void server_setup(px_server *srv, px_config *cfg) {
    memset(srv, 0, sizeof *srv);
    srv->cfg = cfg;
    srv->open_access = -1;
    resp_limits_default(&srv->req_limits);
    srv->req_limits.max_bulk_len = cfg->proto_max_bulk_len;
    srv->req_limits.max_multibulk_len = cfg->max_multibulk_len;
    srv->req_limits.max_inline_len = (size_t)cfg->proto_max_inline_len;
    resp_limits_default(&srv->reply_limits);
    srv->reply_limits.max_bulk_len = cfg->proto_max_bulk_len;
    srv->reply_limits.max_multibulk_len = 1LL << 32;
    srv->reply_limits.max_inline_len = (size_t)cfg->proto_max_bulk_len;
    srv->base = event_base_new();
    CHECK(srv->base != NULL);
    srv->flush_ev = event_new(srv->base, -1, 0, flush_cb, srv);
    srv->reap_ev = event_new(srv->base, -1, 0, reap_cb, srv);
    CHECK(srv->flush_ev != NULL && srv->reap_ev != NULL);
}

static void server_teardown(px_server *srv) {
    /* px_server_run's order: clients close (zombies stay while requests are
     * in flight), connections close (failing those), pools go last */
    while (srv->clients != NULL) px_client_close(srv->clients, "shutdown");
    px_pools_close_connections(srv);
    px_server_reap(srv);
    px_pools_free_all(srv);
    px_server_reap(srv);
    px_caching_deinit(srv);
    px_tls_deinit(srv);
    while (srv->free_reqs != NULL) {
        px_req *r = srv->free_reqs;
        srv->free_reqs = r->next_up;
        free(r);
    }
}

/* ------------------------------------------------------------------------ */
/* setup once                                                               */

/* The COMMAND reply cut down to the commands a session is likely to use. */
static void make_small_table(void) {
    static const char *const keep[] = {
        "get", "set", "del", "exists", "mget", "mset", "incr", "expire", "hget", "hset", "hdel", "hgetall",
        "lpush", "blpop", "multi", "exec", "discard", "watch", "unwatch", "eval", "evalsha", "select", "auth",
        "hello", "ping", "echo", "subscribe", "publish", "info", "flushall", "swapdb", "rename", "getdel", "sort",
        "quit", NULL};
    resp_limits lim;
    resp_limits_default(&lim);
    lim.max_multibulk_len = 1LL << 32;
    resp_reply_parser p;
    resp_reply_init(&p, &lim);
    resp_buf body;
    resp_buf_init(&body);
    const char *nl = memchr(full_table, '\n', full_table_len);
    CHECK(full_table[0] == '*' && nl != NULL);
    size_t at = (size_t)(nl - full_table) + 1;
    while (at < full_table_len) {
        resp_reply_reset(&p);
        CHECK(resp_reply_parse(&p, full_table + at, full_table_len - at) == RESP_OK);
        const char *e = full_table + at;
        /* "*N\r\n$len\r\nname\r\n..." */
        const char *l1 = memchr(e, '\n', p.frame_len);
        CHECK(l1 != NULL && l1[1] == '$');
        long long nlen = strtoll(l1 + 2, NULL, 10);
        const char *name = strchr(l1 + 2, '\n') + 1;
        for (int i = 0; keep[i] != NULL; i++)
            if ((long long)strlen(keep[i]) == nlen && strncasecmp(name, keep[i], (size_t)nlen) == 0) {
                resp_buf_append(&body, e, p.frame_len);
                small_table_count++;
                break;
            }
        at += p.frame_len;
    }
    resp_reply_deinit(&p);
    resp_buf t;
    resp_buf_init(&t);
    resp_enc_array(&t, small_table_count);
    resp_buf_append(&t, body.data, body.len);
    resp_buf_deinit(&body);
    small_table = t.data;
    small_table_len = t.len;
}

/* The fake Redis's listening socket (kept across inputs). */
static void listen_up(void) {
    unlink(sock_path);
    listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    CHECK(listen_fd >= 0);
    struct sockaddr_un sun;
    memset(&sun, 0, sizeof sun);
    sun.sun_family = AF_UNIX;
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s", sock_path);
    CHECK(bind(listen_fd, (struct sockaddr *)&sun, sizeof sun) == 0);
    CHECK(listen(listen_fd, 128) == 0);
}

static void remove_socket(void) {
    if (sock_path[0]) unlink(sock_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    full_table = fuzz_command_fixture("fuzz_session", *argc, *argv, &full_table_len);
    make_small_table();

    const char *lv = getenv("SIDECACHE_FUZZ_LOG");
    if (lv != NULL) {
        static const char *const names[] = {"debug", "verbose", "notice", "warning"};
        for (int i = 0; i < 4; i++)
            if (strcmp(lv, names[i]) == 0) log_level = i;
    }
    px_log_set_level(log_level);
    trace = getenv("SIDECACHE_FUZZ_TRACE") != NULL;
    signal(SIGPIPE, SIG_IGN);

    snprintf(sock_path, sizeof sock_path, "/tmp/sidecache-fuzz-%d.sock", (int)getpid());
    listen_up();
    atexit(remove_socket);
    return 0;
}

/* Connections the proxy made that nobody accepted go now. */
static void drain_backlog(void) {
    for (;;) {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        close(fd);
    }
}

/* ------------------------------------------------------------------------ */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4) return 0;
    unsigned flags = data[0] | (unsigned)data[1] << 8;
    size_t nchunks = data[2] & 15, slen = data[3];
    size_t at = 4;
    if (nchunks > size - at) nchunks = size - at;
    const uint8_t *chunks = data + at;
    at += nchunks;
    if (slen > size - at) slen = size - at;
    const uint8_t *script = data + at;
    at += slen;
    const uint8_t *stream = data + at;
    size_t n = size - at;

    session *s = calloc(1, sizeof *s);
    CHECK(s != NULL);
    S = s;
    s->flags = flags;
    s->script = script;
    s->script_len = slen;
    s->cfd = -1;
    s->slow_reader = (flags & F_SLOW_READER) != 0;
    s->deadline_ms = px_now_ms() + MAX_SESSION_MS;
    resp_limits lim;
    resp_limits_default(&lim);
    lim.max_multibulk_len = 1LL << 32;
    lim.max_inline_len = 1 << 24;
    resp_reply_init(&s->rp, &lim);

    configure(&s->cfg, flags);
    px_server *srv = &s->srv;
    server_setup(srv, &s->cfg);
    s->lst = evconnlistener_new(srv->base, accept_cb, NULL, 0, 0, listen_fd);
    CHECK(s->lst != NULL);

    char err[512];
    CHECK(px_tls_init(srv, err, sizeof err) == 0);
    CHECK(px_caching_init(srv) == 0);
    /* the default identity connects at start (px_server_run) */
    px_pool *first = px_pool_ref(srv, NULL, NULL, s->cfg.up.db, 2);
    if (first != NULL) {
        px_pool_shared(first, 0);
        px_pool_unref(first);
    }
    if (flags & F_SETTLE) run_until_idle();

    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
    s->cfd = sv[0];
    px_client *c = px_client_new(srv, sv[1], "fuzz", 0);
    if (c != NULL) {
        size_t off = 0, k = 0;
        do {
            size_t len = nchunks == 0 ? n - off : chunk_size(chunks[k++ % nchunks]);
            if (len > n - off) len = n - off;
            client_write_all(stream + off, len);
            off += len;
            run_until_idle();
            idle_point();
            run_until_idle();
        } while (off < n && !s->cut);
        /* what is held back arrives, idle point by idle point */
        for (int i = 0; i < 4 && anything_held() && !s->cut; i++) {
            idle_point();
            run_until_idle();
        }
        if (!s->cut) {
            release_held(1);
            run_until_idle();
        }
    }
    if (s->slow_reader) { /* it reads at last */
        s->slow_reader = 0;
        run_until_idle();
    }
    /* The proxy is idle: what the client received ends with a whole frame,
     * unless the loop was cut short or the proxy dropped the client for its
     * output buffer limit. (Once the client hangs up, the proxy may drop
     * output it could not write yet: no check after that.) */
    if (s->rx_len > 0 && !s->cut && !s->hung_up && !(flags & F_SMALL_OUTPUT) && s->rx_total <= MAX_CLIENT_BYTES) {
        fprintf(stderr, "client received a partial frame at the end (%zu bytes)\n", s->rx_len);
        trace = 1;
        tracef("  bytes", s->rx, s->rx_len);
        CHECK(s->rx_len == 0);
    }
    /* the client goes; its requests in flight are answered to a zombie */
    if (s->cfd >= 0) {
        shutdown(s->cfd, SHUT_WR);
        if (!s->cut) run_until_idle();
        client_drain();
        close(s->cfd);
        s->cfd = -1;
    }
    if (!s->cut) {
        release_held(1);
        run_until_idle();
    }

    server_teardown(srv);
    while (s->conns != NULL) fc_free(s->conns);
    if (s->lst != NULL) evconnlistener_free(s->lst);
    event_free(srv->reap_ev);
    event_free(srv->flush_ev);
    event_base_free(srv->base);
    px_config_deinit(&s->cfg);
    if (listen_fd < 0) listen_up(); /* Redis went away: back for the next input */
    drain_backlog();
    resp_reply_deinit(&s->rp);
    free(s->rx);
    free(s);
    S = NULL;
    return 0;
}
