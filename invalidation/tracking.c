/*
 * invalidation/tracking.c — see tracking.h.
 *
 * One connection, not on any hot path: it uses a plain bufferevent and the
 * protocol/ reply framer. Replies arrive in the order of the requests of
 * SETUP; after that only messages and keep-alive answers arrive, which are
 * told apart by their first element.
 */
#include "invalidation/tracking.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "protocol/info.h"
#include "protocol/resp.h"
#include "proxy/log.h"
#include "proxy/sockopt.h"

#define INV_BACKOFF_MIN_MS 100
#define INV_BACKOFF_MAX_MS 2000
#define INV_REFUSED_BACKOFF_MS 30000
#define INV_SETUP_DEADLINE_MS 10000
#define INV_CHANNEL "__redis__:invalidate"
/* in CLIENT LIST, so operators can tell it from the data connections */
#define INV_CLIENT_NAME "sidecache-invalidation"

/* What the next reply answers, during SETUP. */
enum inv_expect {
    EXP_AUTH,
    EXP_SETNAME,
    EXP_NOEVICT,
    EXP_SERVER_ID,
    EXP_COMMAND,
    EXP_CLIENT_ID,
    EXP_TRACKING,
    EXP_SUBSCRIBE
};

#define PING_SLOTS 64

struct inv_conn {
    struct event_base *base;
    inv_config cfg;
    /* a back-off, a refusal by Redis, logged again once a minute and once
     * in five (tracking_last_error always has the last) */
    px_log_repeat retry_log, refused_log;
    char *user, *pass;
    char **prefixes;
    inv_callbacks cb;
    void *arg;

    enum inv_state state;
    struct bufferevent *bev;
    struct event *timer;      /* keep-alive, setup deadline, back-off */
    resp_reply_parser rp;     /* frames replies */
    resp_reply_parser ep;     /* frames elements inside a reply */
    enum inv_expect expect[8];
    int nexpect;
    int backoff_ms;
    int64_t setup_deadline_ms;
    /* Every PING in ACTIVE, keep-alive or barrier (inv_barrier), counted:
     * Redis answers them in order, so the n-th answer is the n-th PING's */
    uint64_t pings_sent, pings_answered;
    uint64_t keepalive_seq;   /* the outstanding keep-alive's number, 0 if none */
    int64_t ping_progress_ms; /* the last answer, or the send of the oldest
                                 PING when none was outstanding */
    int progress_is_send;     /* ... the send: its answer times a round trip */
    int64_t min_rtt_ms;       /* the shortest round trip seen, -1 none yet */
    int rtt_samples;          /* ... of how many (counted up to 2) */
    int rtt_warned;           /* a round trip above hold_ms was logged */
    /* when the last PINGs were sent, by number (a PING's slot is taken
     * again PING_SLOTS PINGs later: then its time is not known) */
    int64_t ping_send_ms[PING_SLOTS];
    uint64_t ping_send_seq[PING_SLOTS];
    uint64_t stall_seq;       /* the PING sent after a stall (ping_answered):
                                 hits wait for its answer; 0 if none */
    int ping_refused_logged;  /* an error answered a PING (logged once) */
    int64_t last_ping_ms;
    long long my_id;          /* from CLIENT ID */
    char server_id[INFO_RUN_ID_LEN + 1]; /* the run_id INFO gave, "" if none */
    int server_cluster;                  /* INFO said redis_mode:cluster */
    inv_stats stats;
};

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *inv_state_name(enum inv_state s) {
    static const char *names[] = {"idle", "connecting", "setup", "active", "backoff"};
    return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}

static void arm_timer(inv_conn *t, int ms) {
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_add(t->timer, &tv);
}

/* The one transition function. Leaving ACTIVE flushes before anything else
 * can happen; entering it is announced last, when all is in place. */
static void inv_set_state(inv_conn *t, enum inv_state to, const char *why) {
    enum inv_state from = t->state;
    /* legal moves */
    assert((from == INV_IDLE && to == INV_CONNECTING) || (from == INV_BACKOFF && to == INV_CONNECTING) ||
           (from == INV_CONNECTING && (to == INV_SETUP || to == INV_BACKOFF)) ||
           (from == INV_SETUP && (to == INV_ACTIVE || to == INV_BACKOFF)) ||
           (from == INV_ACTIVE && to == INV_BACKOFF) || to == INV_IDLE);
    t->state = to;
    if (from == INV_ACTIVE) {
        t->stats.losses++;
        t->cb.on_flush(t->arg, 0, why ? why : "tracking lost");
        t->cb.on_active(t->arg, 0);
    }
    if (to == INV_ACTIVE) {
        px_log_repeat_end(&t->retry_log);
        px_log_repeat_end(&t->refused_log);
    }
    if (to == INV_BACKOFF && from != INV_ACTIVE)
        /* another attempt failed: the first of a run is logged, then one a
         * minute */
        px_warning_repeat(&t->retry_log, PX_LOG_REPEAT_MS, "tracking state=%s from=%s reason=\"%s\"",
                          inv_state_name(to), inv_state_name(from), why ? why : "");
    else if (to == INV_ACTIVE || from == INV_ACTIVE || to == INV_BACKOFF)
        /* a stop asked for (idle) is no trouble: not a warning, which an
         * operator may alert on */
        px_log(to == INV_ACTIVE || to == INV_IDLE ? PX_LOG_NOTICE : PX_LOG_WARNING,
               "tracking state=%s from=%s reason=\"%s\"",
               inv_state_name(to), inv_state_name(from), why ? why : "");
    else
        px_verbose("tracking state=%s from=%s", inv_state_name(to), inv_state_name(from));
    if (to == INV_ACTIVE) {
        t->stats.last_error[0] = '\0';
        t->cb.on_active(t->arg, 1);
    }
}

static void drop_connection(inv_conn *t) {
    if (t->bev != NULL) {
        bufferevent_free(t->bev);
        t->bev = NULL;
    }
    resp_reply_reset(&t->rp);
    t->nexpect = 0;
    /* no answer will come: every barrier is passed (leaving ACTIVE empties
     * the cache first, inv_set_state) */
    t->stats.pings_lost += t->pings_sent - t->pings_answered;
    t->pings_answered = t->pings_sent;
    t->keepalive_seq = 0;
    /* another connection, maybe another path */
    t->progress_is_send = 0;
    t->min_rtt_ms = -1;
    t->rtt_samples = 0;
    t->rtt_warned = 0;
}

/* What an operator can do about a refusal (why: the command and Redis's
 * error), for the log line; "" when nothing is known to help. */
static const char *refusal_hint(const char *why) {
    if (strstr(why, "NOAUTH") != NULL || strstr(why, "WRONGPASS") != NULL)
        return " (Redis wants the upstream's credentials: put them in upstream, "
               "redis://USER:PASSWORD@HOST:PORT, and reload with SIGHUP)";
    if (strstr(why, "NOPERM") != NULL && strstr(why, "channel") != NULL)
        return " (grant the upstream user the channel: ACL SETUSER <user> &__redis__:invalidate)";
    if (strstr(why, "NOPERM") != NULL)
        return " (grant the upstream user what docs/DEPLOY.md lists for it)";
    if (strstr(why, "CLIENT TRACKING") != NULL && strstr(why, "unknown") != NULL)
        return " (client-side caching needs Redis 6 or newer)";
    return "";
}

/* Any failure: drop the connection and try again after a back-off. */
static void inv_fail(inv_conn *t, const char *why, int refused) {
    snprintf(t->stats.last_error, sizeof t->stats.last_error, "%s", why);
    drop_connection(t);
    if (refused) {
        t->backoff_ms = INV_REFUSED_BACKOFF_MS;
    } else {
        t->backoff_ms = t->backoff_ms ? t->backoff_ms * 2 : INV_BACKOFF_MIN_MS;
        if (t->backoff_ms > INV_BACKOFF_MAX_MS) t->backoff_ms = INV_BACKOFF_MAX_MS;
    }
    inv_set_state(t, INV_BACKOFF, why);
    if (refused)
        px_warning_repeat(&t->refused_log, PX_LOG_REPEAT_SLOW_MS,
                          "tracking refused by Redis, caching is off (pass-through goes on): %s%s", why,
                          refusal_hint(why));
    arm_timer(t, t->backoff_ms);
}

/* A command that could not be encoded or queued whole must not go in part
 * (replies would be matched to the wrong commands): the socket is shut
 * instead, and the loss handled as any other, when the loop sees it
 * (drop_connection; hits wait meanwhile: inv_unread). */
static void write_cmd(inv_conn *t, const resp_buf *b) {
    if (!b->failed && bufferevent_write(t->bev, b->data, b->len) == 0) return;
    evutil_socket_t fd = bufferevent_getfd(t->bev);
    if (fd >= 0) shutdown(fd, SHUT_RDWR);
}

static void send_cmd(inv_conn *t, const char *a0, ...) {
    /* at most a few words; built with the protocol/ encoder */
    resp_buf b;
    resp_buf_init(&b);
    const char *words[64];
    int n = 0;
    va_list ap;
    va_start(ap, a0);
    for (const char *w = a0; w != NULL && n < 64; w = va_arg(ap, const char *)) words[n++] = w;
    va_end(ap);
    resp_arg argv[64];
    for (int i = 0; i < n; i++) argv[i].ptr = words[i], argv[i].len = strlen(words[i]);
    resp_enc_command(&b, n, argv);
    write_cmd(t, &b);
    resp_buf_deinit(&b);
}

static void expect(inv_conn *t, enum inv_expect e) {
    assert(t->nexpect < (int)(sizeof t->expect / sizeof t->expect[0]));
    t->expect[t->nexpect++] = e;
}

static void send_tracking(inv_conn *t, long long id) {
    resp_buf b;
    resp_buf_init(&b);
    char idbuf[32];
    snprintf(idbuf, sizeof idbuf, "%lld", id);
    /* CLIENT TRACKING ON REDIRECT <id> BCAST, then PREFIX p for each prefix */
    const char *fixed[] = {"CLIENT", "TRACKING", "ON", "REDIRECT", idbuf, "BCAST"};
    int nfixed = (int)(sizeof fixed / sizeof fixed[0]);
    int n = nfixed + 2 * t->cfg.nprefixes;
    resp_arg *argv = calloc((size_t)n, sizeof *argv);
    if (argv == NULL) {
        resp_buf_deinit(&b);
        inv_fail(t, "out of memory", 0);
        return;
    }
    for (int i = 0; i < nfixed; i++) argv[i].ptr = fixed[i], argv[i].len = strlen(fixed[i]);
    for (int i = 0; i < t->cfg.nprefixes; i++) {
        argv[nfixed + 2 * i].ptr = "PREFIX", argv[nfixed + 2 * i].len = 6;
        argv[nfixed + 2 * i + 1].ptr = t->prefixes[i], argv[nfixed + 2 * i + 1].len = strlen(t->prefixes[i]);
    }
    resp_enc_command(&b, n, argv);
    write_cmd(t, &b);
    resp_buf_deinit(&b);
    free(argv);
    expect(t, EXP_TRACKING);
    send_cmd(t, "SUBSCRIBE", INV_CHANNEL, NULL);
    expect(t, EXP_SUBSCRIBE);
}

/* Frames the element of an aggregate that starts at buf[*off]. Returns 0
 * with its type, payload and the offset after it, or -1. */
static int next_elem(inv_conn *t, const char *buf, size_t len, size_t *off, char *type, const char **p,
                     size_t *plen, long long *count) {
    if (*off >= len) return -1;
    resp_reply_reset(&t->ep);
    if (resp_reply_parse(&t->ep, buf + *off, len - *off) != RESP_OK) return -1;
    *type = t->ep.type;
    *p = buf + *off + t->ep.payload_off;
    *plen = t->ep.payload_len;
    if (count) *count = t->ep.count;
    if (t->ep.type == '*' || t->ep.type == '>' || t->ep.type == '~') {
        /* payload of an aggregate: its elements, for the caller to walk */
        *p = buf + *off;
        *plen = t->ep.frame_len;
    }
    *off += t->ep.frame_len;
    return 0;
}

/* Offset of the first element of the aggregate frame at buf. */
static size_t first_elem_off(const char *buf, size_t len) {
    const char *nl = memchr(buf, '\n', len);
    return nl ? (size_t)(nl - buf) + 1 : len;
}

static int pings_outstanding(const inv_conn *t) { return t->pings_answered < t->pings_sent; }

static void send_ping(inv_conn *t, int64_t now) {
    if (!pings_outstanding(t)) {
        t->ping_progress_ms = now;
        t->progress_is_send = 1;
    }
    send_cmd(t, "PING", NULL);
    t->pings_sent++;
    t->stats.pings_sent++;
    size_t slot = t->pings_sent % PING_SLOTS;
    t->ping_send_ms[slot] = now;
    t->ping_send_seq[slot] = t->pings_sent;
}

/* A stall ended (ping_answered): hits wait for a fresh PING (stall_seq). */
static void stall_ended(inv_conn *t) {
    if (t->state != INV_ACTIVE) return;
    t->stats.stalls++;
    t->stall_seq = inv_barrier(t);
}

/* An answer more than hold_ms (at least STALL_MIN_MS) later than it could
 * have come ends a stall (a fork, a long script): the reads that came
 * meanwhile went to Redis (inv_hold_left_ms), but Redis may answer the
 * PING where it also answers a writer whose invalidation it writes later.
 * A script past busy-reply-threshold does: Redis answers clients while it
 * runs, the writer of a write run just before it (after this PING, in the
 * same pass) too, but writes that write's BCAST invalidation only when the
 * script ends. So hits wait for a fresh PING: Redis answers it after the
 * invalidations of every write it answered before, or BUSY while the
 * script still runs (on_busy). A fresh PING answered late is such a PING
 * too (Redis may have run it, a write and a script in one pass). The
 * silence is counted from when the answer could have come at the
 * soonest: the last answer, or the PING's send and the shortest round
 * trip, whichever is later; else every PING would send another when the
 * network is slower than hold_ms. That round trip counts from the second
 * one a connection measures: its first may be slow. */
#define STALL_MIN_MS 10
static void ping_answered(inv_conn *t) {
    int64_t now = now_ms(), silence = now - t->ping_progress_ms;
    uint64_t seq = t->pings_answered + 1;
    size_t slot = seq % PING_SLOTS;
    int64_t soonest = t->ping_progress_ms;
    if (t->ping_send_seq[slot] == seq) {
        int64_t rtt = t->rtt_samples >= 2 ? t->min_rtt_ms : 0;
        if (t->ping_send_ms[slot] + rtt > soonest) soonest = t->ping_send_ms[slot] + rtt;
    }
    int stalled = now - soonest > (t->cfg.hold_ms > STALL_MIN_MS ? t->cfg.hold_ms : STALL_MIN_MS);
    if (t->progress_is_send) {
        if (t->min_rtt_ms < 0 || silence < t->min_rtt_ms) t->min_rtt_ms = silence;
        if (t->rtt_samples < 2) t->rtt_samples++;
        /* every read that comes while a PING is out then goes to Redis */
        if (t->cfg.hold_ms > 0 && silence > t->cfg.hold_ms && !stalled && !t->rtt_warned) {
            t->rtt_warned = 1;
            px_log(PX_LOG_WARNING,
                   "tracking PING round trip %lld ms exceeds tracking-ping-hold-ms %d: reads the cache would "
                   "answer go to Redis while a PING is out; set the hold above the round trip",
                   (long long)silence, t->cfg.hold_ms);
        }
    }
    t->pings_answered++;
    t->stats.pings_answered++;
    t->ping_progress_ms = now;
    t->progress_is_send = 0;
    if (t->keepalive_seq != 0 && t->pings_answered >= t->keepalive_seq) {
        t->keepalive_seq = 0;
    }
    if (stalled) stall_ended(t);
    if (t->cb.on_ping_answered) t->cb.on_ping_answered(t->arg);
}

static int is_word(const char *p, size_t n, const char *w) { return strlen(w) == n && strncasecmp(p, w, n) == 0; }

/* "message __redis__:invalidate <keys or null>" and "pong" in ACTIVE. */
static void on_push(inv_conn *t, const char *buf, size_t len) {
    size_t off = first_elem_off(buf, len);
    char type;
    const char *p;
    size_t n;
    long long count;
    if (next_elem(t, buf, len, &off, &type, &p, &n, NULL) != 0) goto bad;
    if (is_word(p, n, "pong")) {
        ping_answered(t);
        return;
    }
    if (!is_word(p, n, "message")) return; /* subscribe confirmations again, etc. */
    if (next_elem(t, buf, len, &off, &type, &p, &n, NULL) != 0 || !is_word(p, n, INV_CHANNEL)) return;
    if (next_elem(t, buf, len, &off, &type, &p, &n, &count) != 0) goto bad;
    t->stats.messages++;
    if (type == '_' || count < 0) {
        t->cb.on_flush(t->arg, 1, "null invalidation (FLUSHALL, FLUSHDB or resync)");
        return;
    }
    if (type == '$') { /* one key as a bulk string (not sent by Redis 6+, but cheap) */
        t->stats.keys++;
        t->cb.on_invalidate(t->arg, &(inv_key){p, n}, 1);
        return;
    }
    if (type != '*') goto bad;
    const char *arr = p;
    size_t alen = n, aoff = first_elem_off(arr, alen);
    /* handed over in chunks: the cache purges several keys faster than one
     * by one (cache_invalidate_keys) */
    inv_key keys[64];
    size_t nk = 0;
    for (long long i = 0; i < count; i++) {
        /* a key is a bulk string: read at once (the frame is whole and was
         * checked when framed); anything else goes the general way */
        size_t next;
        if (resp_read_bulk(arr, alen, aoff, &p, &n, &next) == 1) {
            aoff = next;
        } else if (next_elem(t, arr, alen, &aoff, &type, &p, &n, NULL) != 0 || type != '$') {
            /* what was read is invalidated; the rest counts as a loss */
            if (nk > 0) t->cb.on_invalidate(t->arg, keys, nk);
            goto bad;
        }
        t->stats.keys++;
        keys[nk++] = (inv_key){p, n};
        if (nk == sizeof keys / sizeof keys[0]) {
            t->cb.on_invalidate(t->arg, keys, nk);
            nk = 0;
        }
    }
    if (nk > 0) t->cb.on_invalidate(t->arg, keys, nk);
    return;
bad:
    /* A message we cannot read may have named keys: treat as loss. */
    inv_fail(t, "unreadable invalidation message", 0);
}

static void on_setup_reply(inv_conn *t, const char *buf, size_t len) {
    char why[400];
    enum inv_expect e = t->expect[0];
    memmove(t->expect, t->expect + 1, (size_t)(--t->nexpect) * sizeof t->expect[0]);
    char type = t->rp.type;
    /* the name only tells operators whose connection this is (CLIENT
     * LIST), and NO-EVICT only spares it maxmemory-clients' evictions (each
     * a flush; Redis 7): an ACL or a Redis that refuses either is no reason
     * to go without a cache */
    if (e == EXP_SETNAME || e == EXP_NOEVICT) return;
    /* nor is an INFO refused: the server then has no known identity */
    if (e == EXP_SERVER_ID) {
        info_run_id(buf, len, t->server_id);
        t->server_cluster = info_is_cluster(buf, len);
        return;
    }
    if (type == '-' || type == '!') {
        const char *msg = buf + t->rp.payload_off;
        /* a transient error (resp_frame_is_transient_error) gets the
         * normal back-off; any other (NOPERM, WRONGPASS, an unknown
         * command) only an operator can change: the long one */
        int refused = !resp_frame_is_transient_error(buf, len);
        snprintf(why, sizeof why, "%s %s: %.*s",
                 e == EXP_AUTH          ? "AUTH"
                 : e == EXP_COMMAND     ? "COMMAND"
                 : e == EXP_CLIENT_ID   ? "CLIENT ID"
                 : e == EXP_TRACKING    ? "CLIENT TRACKING"
                                        : "SUBSCRIBE",
                 refused ? "refused" : "failed", (int)(t->rp.payload_len > 300 ? 300 : t->rp.payload_len), msg);
        inv_fail(t, why, refused);
        return;
    }
    switch (e) {
    case EXP_AUTH:
    case EXP_TRACKING:
        break;
    case EXP_SETNAME:
    case EXP_NOEVICT:
    case EXP_SERVER_ID:
        break; /* (answered above, refused or not) */
    case EXP_COMMAND:
        if (t->cb.on_command_table) t->cb.on_command_table(t->arg, buf, len);
        break;
    case EXP_CLIENT_ID:
        if (type != ':') {
            inv_fail(t, "CLIENT ID: unexpected reply", 1);
            return;
        }
        t->my_id = t->rp.count;
        if (t->cfg.bcast) {
            send_tracking(t, t->rp.count);
        } else {
            send_cmd(t, "SUBSCRIBE", INV_CHANNEL, NULL);
            expect(t, EXP_SUBSCRIBE);
        }
        break;
    case EXP_SUBSCRIBE:
        if (type != '*') {
            inv_fail(t, "SUBSCRIBE: unexpected reply", 1);
            return;
        }
        t->backoff_ms = 0;
        t->last_ping_ms = now_ms();
        inv_set_state(t, INV_ACTIVE, "tracking on");
        arm_timer(t, t->cfg.ping_ms);
        break;
    }
}

/* In ACTIVE only PINGs are sent: an error is a PING's answer
 * (the upstream user may not run PING), and it shows the link alive as
 * well as a PONG; a BUSY tells the owner more (on_busy). */
static void ping_refused(inv_conn *t, const char *buf, size_t len) {
    /* (before the hits held for the answer go on) */
    if (resp_frame_starts_with(buf, len, "-BUSY ") && t->cb.on_busy) t->cb.on_busy(t->arg, buf, len);
    ping_answered(t);
    /* (a BUSY during a long script says nothing of the ACL: the one
     * warning is kept for a refusal) */
    if (resp_frame_is_transient_error(buf, len)) return;
    if (!t->ping_refused_logged)
        px_warning("tracking keep-alive PING refused by Redis (the link counts as alive): %.*s",
                   (int)(len > 200 ? 200 : len - 2), buf + 1);
    t->ping_refused_logged = 1;
}

static void read_cb(struct bufferevent *bev, void *arg) {
    inv_conn *t = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    while (t->bev != NULL) {
        size_t len = evbuffer_get_length(in);
        if (len == 0 || (t->rp.need && len < t->rp.need)) return;
        const char *buf = (const char *)evbuffer_pullup(in, -1);
        if (buf == NULL) {
            /* (no memory to make the input one piece: an invalidation that
             * cannot be read is a lost connection, C4) */
            inv_fail(t, "out of memory", 0);
            return;
        }
        int rc = resp_reply_parse(&t->rp, buf, len);
        if (rc == RESP_AGAIN) return;
        if (rc == RESP_ERR) {
            char why[300];
            snprintf(why, sizeof why, "malformed reply on the invalidation connection (%s)", t->rp.err);
            inv_fail(t, why, 0);
            return;
        }
        size_t flen = t->rp.frame_len;
        if (t->nexpect > 0)
            on_setup_reply(t, buf, flen);
        else if (t->state == INV_ACTIVE && (t->rp.type == '*' || t->rp.type == '>'))
            on_push(t, buf, flen);
        else if (t->state == INV_ACTIVE && t->rp.type != '-')
            ; /* nothing else is expected; harmless */
        else if (t->state == INV_ACTIVE && pings_outstanding(t))
            ping_refused(t, buf, flen);
        else {
            inv_fail(t, "unexpected reply on the invalidation connection", 0);
            return;
        }
        if (t->bev == NULL) return; /* failed while handling: buffer is gone */
        evbuffer_drain(in, flen);
    }
}

static void event_cb(struct bufferevent *bev, short what, void *arg) {
    inv_conn *t = arg;
    if (what & BEV_EVENT_CONNECTED) {
        if (t->cfg.addr.ss_family != AF_UNIX) px_socket_keepalive(bufferevent_getfd(bev), t->cfg.tcp_keepalive);
        inv_set_state(t, INV_SETUP, NULL);
        t->stats.connects++;
        t->setup_deadline_ms = now_ms() + INV_SETUP_DEADLINE_MS;
        if (t->pass != NULL) {
            if (t->user != NULL)
                send_cmd(t, "AUTH", t->user, t->pass, NULL);
            else
                send_cmd(t, "AUTH", t->pass, NULL);
            expect(t, EXP_AUTH);
        }
        send_cmd(t, "CLIENT", "SETNAME", INV_CLIENT_NAME, NULL);
        expect(t, EXP_SETNAME);
        send_cmd(t, "CLIENT", "NO-EVICT", "on", NULL);
        expect(t, EXP_NOEVICT);
        t->server_id[0] = '\0';
        t->server_cluster = 0;
        send_cmd(t, "INFO", "server", NULL);
        expect(t, EXP_SERVER_ID);
        send_cmd(t, "COMMAND", NULL);
        expect(t, EXP_COMMAND);
        send_cmd(t, "CLIENT", "ID", NULL);
        expect(t, EXP_CLIENT_ID);
        arm_timer(t, 200);
        return;
    }
    char why[300], tls[200];
    int err = EVUTIL_SOCKET_ERROR();
    /* TLS: the error is OpenSSL's, and errno may say nothing ("Success")
     * when Redis went away under it */
    unsigned long tls_err = bufferevent_get_openssl_error(bev);
    /* an error of no OpenSSL library is libevent's record of SSL_get_error's
     * code (SSL_ERROR_SYSCALL: the socket failed): errno has the cause */
    if (tls_err != 0 && ERR_GET_LIB(tls_err) == 0) tls_err = 0;
    if (tls_err != 0) ERR_error_string_n(tls_err, tls, sizeof tls);
    /* A TLS connect that fails (refused, unreachable) comes as an EOF too:
     * with dirty shutdowns allowed, libevent reports the handshake's failed
     * write as one. Before the connection is up the socket's error, if any,
     * is the cause, not Redis closing it. */
    int connecting = t->state == INV_CONNECTING;
    snprintf(why, sizeof why, "invalidation connection %s: %s", connecting ? "failed" : "lost",
             tls_err != 0 && (connecting || !(what & BEV_EVENT_EOF)) ? tls
             : err != 0 && (connecting || !(what & BEV_EVENT_EOF))   ? evutil_socket_error_to_string(err)
                                                                     : "closed by Redis");
    inv_fail(t, why, 0);
}

static void connect_now(inv_conn *t) {
    char why[300];
    inv_set_state(t, INV_CONNECTING, NULL);
    if (t->cb.resolve != NULL) {
        char what[256];
        if (t->cb.resolve(t->arg, &t->cfg.addr, &t->cfg.addrlen, what, sizeof what) != 0) {
            snprintf(why, sizeof why, "invalidation connection failed: %s", what);
            inv_fail(t, why, 0);
            return;
        }
    }
    int tls_failed = 0;
    SSL *ssl = t->cb.new_ssl != NULL ? t->cb.new_ssl(t->arg, &tls_failed) : NULL;
    if (tls_failed) {
        inv_fail(t, "invalidation connection failed: TLS setup", 0);
        return;
    }
    int fd = -1;
    if (ssl != NULL) {
        /* (libevent connects it; its events keep the default priority,
         * which bufferevent_priority_set does not change for TLS) */
        t->bev = bufferevent_openssl_socket_new(t->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
                                                BEV_OPT_CLOSE_ON_FREE);
        if (t->bev != NULL) bufferevent_openssl_set_allow_dirty_shutdown(t->bev, 1);
    } else {
        /* connected here, not by libevent: it reports a connect failed at
         * once (a unix socket nobody accepts on: Redis killed, its socket
         * file left behind) through an event it makes active before the
         * priority can be set, and changing the priority of that active
         * event (below) left the loop spinning, for good */
        fd = px_socket_connect((const struct sockaddr *)&t->cfg.addr, t->cfg.addrlen);
        if (fd < 0) {
            snprintf(why, sizeof why, "invalidation connection failed: %s", strerror(errno));
            inv_fail(t, why, 0);
            return;
        }
        t->bev = bufferevent_socket_new(t->base, fd, BEV_OPT_CLOSE_ON_FREE);
        if (t->bev == NULL) close(fd);
    }
    if (t->bev == NULL) {
        inv_fail(t, "out of memory", 0);
        return;
    }
    bufferevent_setcb(t->bev, read_cb, NULL, event_cb, t);
    bufferevent_enable(t->bev, EV_READ | EV_WRITE);
    /* a plain socket's connect is under way: libevent waits for its end */
    if (fd >= 0 ? bufferevent_socket_connect(t->bev, NULL, 0) != 0
                : bufferevent_socket_connect(t->bev, (struct sockaddr *)&t->cfg.addr, (int)t->cfg.addrlen) != 0) {
        snprintf(why, sizeof why, "invalidation connection failed: %s", strerror(errno));
        inv_fail(t, why, 0);
        return;
    }
    /* The highest priority (0), once the socket is set (setting it resets
     * the events' priority): when an invalidation and a client's read of
     * its key are both waiting, the purge comes first. Redis writes the
     * invalidation of a write before the write's reply; without this a
     * read that the writer's reply set off, read in the same pass, could
     * be answered from the cache with the old value. (Not for TLS, whose
     * bufferevent libevent gives no priority: there the hit waits a turn
     * while encrypted bytes are unread, inv_unread.) */
    bufferevent_priority_set(t->bev, 0);
    /* a connect whose SYNs go unanswered would otherwise wait for the
     * kernel (about two minutes), caching off all the while: it gets the
     * keep-alive's timeout, as an unanswered PING does */
    t->setup_deadline_ms = now_ms() + t->cfg.timeout_ms;
    arm_timer(t, 200);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg) {
    inv_conn *t = arg;
    int64_t now = now_ms();
    switch (t->state) {
    case INV_BACKOFF:
        connect_now(t);
        return;
    case INV_CONNECTING:
    case INV_SETUP:
        if (now > t->setup_deadline_ms) {
            if (t->cb.on_unanswered != NULL) t->cb.on_unanswered(t->arg);
            inv_fail(t, t->state == INV_CONNECTING ? "invalidation connection failed: connect timed out"
                                                   : "tracking setup timed out",
                     0);
            return;
        }
        arm_timer(t, 200);
        return;
    case INV_ACTIVE:
        /* the keep-alive's PING, or a barrier's, with no answer since */
        if (pings_outstanding(t) && now - t->ping_progress_ms > t->cfg.timeout_ms) {
            if (t->cb.on_unanswered != NULL) t->cb.on_unanswered(t->arg);
            inv_fail(t, "keep-alive PING not answered in time", 0);
            return;
        }
        if (t->keepalive_seq == 0 && now - t->last_ping_ms >= t->cfg.ping_ms) {
            send_ping(t, now);
            t->keepalive_seq = t->pings_sent;
            t->last_ping_ms = now;
        }
        arm_timer(t, t->cfg.ping_ms < 100 ? t->cfg.ping_ms : 100);
        return;
    default:
        return;
    }
}

inv_conn *inv_new(struct event_base *base, const inv_config *cfg, const inv_callbacks *cb, void *arg) {
    inv_conn *t = calloc(1, sizeof *t);
    if (t == NULL) return NULL;
    t->base = base;
    t->cfg = *cfg;
    t->cb = *cb;
    t->arg = arg;
    t->min_rtt_ms = -1;
    t->user = cfg->user ? strdup(cfg->user) : NULL;
    t->pass = cfg->pass ? strdup(cfg->pass) : NULL;
    t->prefixes = calloc((size_t)cfg->nprefixes + 1, sizeof *t->prefixes);
    t->timer = evtimer_new(base, timer_cb, t);
    resp_limits lim;
    resp_limits_default(&lim);
    lim.max_multibulk_len = 1LL << 32;
    resp_reply_init(&t->rp, &lim);
    resp_reply_init(&t->ep, &lim);
    int ok = t->prefixes && t->timer && (!cfg->user || t->user) && (!cfg->pass || t->pass);
    for (int i = 0; ok && i < cfg->nprefixes; i++) ok = (t->prefixes[i] = strdup(cfg->prefixes[i])) != NULL;
    t->cfg.user = t->user;
    t->cfg.pass = t->pass;
    t->cfg.prefixes = (const char *const *)t->prefixes;
    if (t->cfg.ping_ms <= 0) t->cfg.ping_ms = 1000;
    if (t->cfg.timeout_ms <= 0) t->cfg.timeout_ms = 3000;
    if (!ok) {
        inv_free(t);
        return NULL;
    }
    return t;
}

void inv_start(inv_conn *t) {
    if (t->state == INV_IDLE) connect_now(t);
}

void inv_free(inv_conn *t) {
    if (t == NULL) return;
    if (t->state != INV_IDLE) inv_set_state(t, INV_IDLE, "shutdown");
    drop_connection(t);
    if (t->timer) event_free(t->timer);
    resp_reply_deinit(&t->rp);
    resp_reply_deinit(&t->ep);
    for (int i = 0; t->prefixes && i < t->cfg.nprefixes; i++) free(t->prefixes[i]);
    free(t->prefixes);
    free(t->user);
    free(t->pass);
    free(t);
}

int inv_set_auth(inv_conn *t, const char *user, const char *pass) {
    char *u = user ? strdup(user) : NULL, *p = pass ? strdup(pass) : NULL;
    if ((user && !u) || (pass && !p)) {
        free(u);
        free(p);
        return -1;
    }
    free(t->user);
    free(t->pass);
    t->cfg.user = t->user = u;
    t->cfg.pass = t->pass = p;
    /* a refused AUTH waits long before the next try: try now; one that
     * may be on its way with the old ones is tried again with these */
    if (t->state == INV_BACKOFF) {
        t->backoff_ms = 0;
        arm_timer(t, 0);
    } else if (t->state == INV_CONNECTING || t->state == INV_SETUP) {
        inv_restart(t, "new credentials");
    }
    return 0;
}

void inv_restart(inv_conn *t, const char *why) {
    if (t->state == INV_IDLE) return;
    snprintf(t->stats.last_error, sizeof t->stats.last_error, "%s", why);
    drop_connection(t);
    if (t->state != INV_BACKOFF) inv_set_state(t, INV_BACKOFF, why);
    t->backoff_ms = 0;
    arm_timer(t, 0);
}

enum inv_state inv_get_state(const inv_conn *t) { return t->state; }

/* The unanswered PINGs still in the output, not yet read by Redis (nothing
 * else is written while ACTIVE; a part of one is not one Redis can run). */
static uint64_t pings_unsent(const inv_conn *t) {
    static const size_t ping_len = sizeof "*1\r\n$4\r\nPING\r\n" - 1;
    uint64_t unsent = (evbuffer_get_length(bufferevent_get_output(t->bev)) + ping_len - 1) / ping_len;
    uint64_t outstanding = t->pings_sent - t->pings_answered;
    return unsent < outstanding ? unsent : outstanding;
}

uint64_t inv_barrier(inv_conn *t) {
    if (t == NULL || t->state != INV_ACTIVE) return 0;
    /* A PING still in the output reaches Redis after whatever has come
     * from it so far: it is this barrier too. Tunnels read in one pass of
     * the loop share one PING. */
    if (pings_unsent(t) > 0) return t->pings_sent;
    send_ping(t, now_ms());
    return t->pings_sent;
}

int inv_barrier_passed(const inv_conn *t, uint64_t seq) {
    return t == NULL || t->state != INV_ACTIVE || t->pings_answered >= seq;
}

uint64_t inv_hold_mark(const inv_conn *t) {
    if (t->state != INV_ACTIVE || !pings_outstanding(t)) return 0;
    /* PINGs still in the output are not in Redis's pass: they hold no read
     * (but the one sent after a stall does, wherever it is) */
    uint64_t mark = t->pings_sent - pings_unsent(t);
    if (t->stall_seq > mark) mark = t->stall_seq;
    return mark > t->pings_answered ? mark : 0;
}

int inv_hold_left_ms(const inv_conn *t, uint64_t mark) {
    /* a read held before a stall ended waits for the PING sent after it too */
    if (t->stall_seq > mark) mark = t->stall_seq;
    if (mark == 0 || t->state != INV_ACTIVE || t->pings_answered >= mark) return 0;
    int64_t left = t->ping_progress_ms + t->cfg.hold_ms - now_ms();
    return left > 0 ? (int)left : INV_HOLD_PAST;
}

int inv_ping_hold_ms(const inv_conn *t) { return inv_hold_left_ms(t, inv_hold_mark(t)); }
long long inv_redirect_id(const inv_conn *t) { return t->state == INV_ACTIVE ? t->my_id : 0; }
int inv_unread(const inv_conn *t) {
    if (t->bev == NULL) return 0;
    /* a frame in part: its keys are not known yet */
    if (evbuffer_get_length(bufferevent_get_input(t->bev)) > 0) return 1;
    SSL *ssl = bufferevent_openssl_get_ssl(t->bev);
    if (ssl != NULL && SSL_pending(ssl) > 0) return 1;
    evutil_socket_t fd = bufferevent_getfd(t->bev);
    if (fd < 0) return 0;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    /* The peer's close or a reset counts as unread too: Redis may have
     * closed the connection (CLIENT KILL) after a write whose invalidation
     * it will never send, and answered the writer; the loss, which empties
     * the cache, must be seen before a hit (C4). */
    return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

int inv_server_cluster(const inv_conn *t) {
    return t->state == INV_ACTIVE && t->server_cluster;
}

const char *inv_server_id(const inv_conn *t) {
    return t->state == INV_ACTIVE && t->server_id[0] != '\0' ? t->server_id : NULL;
}
const inv_stats *inv_get_stats(const inv_conn *t) { return &t->stats; }
