/*
 * invalidation/tracking.h — the invalidation connection: one connection to
 * Redis that turns on server-assisted client-side caching (CLIENT TRACKING,
 * BCAST mode) and receives the invalidation messages that keep the cache
 * coherent.
 *
 * State machine (one transition function, inv_set_state, asserts and logs):
 *
 *   IDLE ──start──► CONNECTING ──connected──► SETUP ──tracking on +
 *     ▲                 │                      │      subscribed──► ACTIVE
 *     │                 ▼                      ▼                      │
 *     └──back-off── BACKOFF ◄──────── error, refusal, ping deadline ───┘
 *                                                                     
 * SETUP sends, on one RESP2 connection: [AUTH], CLIENT SETNAME and CLIENT
 * NO-EVICT on (a refusal of either is ignored), INFO server (the server's
 * run_id, inv_server_id; a refusal leaves it unknown), COMMAND (the owner learns
 * which commands write which keys), CLIENT ID, then (bcast mode) CLIENT
 * TRACKING ON REDIRECT <own id> BCAST PREFIX p ... and SUBSCRIBE
 * __redis__:invalidate. In the default and optin modes the data connections
 * turn tracking on themselves, redirected to this connection's id.
 * Redis then delivers "message __redis__:invalidate [keys]" on this same
 * connection (verified on redis-server 7.0).
 *
 * Only in ACTIVE may the owner serve hits or begin fills. Leaving ACTIVE for
 * any reason calls on_flush first: whatever Redis changed while nobody was
 * listening is unknown (C4). A null key list (FLUSHALL, FLUSHDB, a replica
 * resync) calls on_flush too (C5). A keep-alive PING goes out every
 * ping_ms; no answer within timeout_ms counts as a lost connection (an
 * error is an answer: the upstream user may not run PING). A connect gets
 * timeout_ms too, and SETUP 10 s; then BACKOFF.
 *
 * If Redis refuses tracking (Redis 5, an ACL without the permission), the
 * connection backs off for a long while and logs why; the proxy goes on as
 * a plain pass-through proxy meanwhile.
 */
#ifndef SIDECACHE_INVALIDATION_TRACKING_H
#define SIDECACHE_INVALIDATION_TRACKING_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct event_base;

enum inv_state { INV_IDLE, INV_CONNECTING, INV_SETUP, INV_ACTIVE, INV_BACKOFF };

/* A key named by an invalidation message (points into the message). */
typedef struct inv_key {
    const char *key;
    size_t klen;
} inv_key;

typedef struct inv_callbacks {
    /* Redis says these keys may have changed (n >= 1; a long message comes
     * in several calls). */
    void (*on_invalidate)(void *arg, const inv_key *keys, size_t n);
    /* Everything may have changed: empty the cache. null_message: Redis
     * said so (a null key list: FLUSHALL, FLUSHDB, a resync); else the
     * connection left ACTIVE. why is for logs. */
    void (*on_flush)(void *arg, int null_message, const char *why);
    /* ACTIVE entered (1) or left (0). */
    void (*on_active)(void *arg, int active);
    /* The reply to COMMAND, one whole RESP2 frame, each time it is read. */
    void (*on_command_table)(void *arg, const char *reply, size_t len);
    /* Where to connect now (called before every connect; may be NULL: then
     * inv_config's addr). Returns 0, or -1 with a reason in why. */
    int (*resolve)(void *arg, struct sockaddr_storage *addr, socklen_t *addrlen, char *why, size_t whylen);
    /* A TLS session for the next connection, or NULL for plain TCP (may be
     * NULL itself: always plain). */
    struct ssl_st *(*new_ssl)(void *arg, int *failed);
    /* A PING was answered (inv_ping_hold_ms may be 0 again).
     * What Redis wrote behind the answer may be read in the same callback,
     * after this call, or in the next reads: act once they are handled
     * (the connection's events have the highest priority, 0). May be NULL. */
    void (*on_ping_answered)(void *arg);
    /* A PING was answered BUSY (err: the whole error frame): Redis runs a
     * script past busy-reply-threshold, answering clients meanwhile, while
     * it keeps the BCAST invalidations of the writes it ran before the
     * script in the same pass until the script ends. Called before
     * on_ping_answered. May be NULL. */
    void (*on_busy)(void *arg, const char *err, size_t len);
    /* Redis took the connection (or not even that) but answered nothing in
     * time: the tracking setup, or a PING, timed out (a host up, its Redis
     * hung or stopped). Called before the connection is given up. May be
     * NULL. */
    void (*on_unanswered)(void *arg);
} inv_callbacks;

typedef struct inv_config {
    struct sockaddr_storage addr; /* where Redis is */
    socklen_t addrlen;
    const char *user, *pass;      /* AUTH, when pass != NULL */
    const char *const *prefixes;  /* BCAST prefixes, non-overlapping */
    int nprefixes;
    int bcast;                    /* 1: track here in BCAST mode with the prefixes;
                                     0: only receive what the data connections'
                                     CLIENT TRACKING ... REDIRECT <our id> send */
    int ping_ms;                  /* keep-alive period */
    int timeout_ms;               /* deadline of a PING's answer, and of a connect */
    int hold_ms;                  /* how long an unanswered ping holds hits;
                                     then Redis answers (inv_ping_hold_ms) */
    int tcp_keepalive;            /* TCP keepalive of the socket, seconds (0: off;
                                     proxy/sockopt.h) */
} inv_config;

typedef struct inv_conn inv_conn;

/* A new connection in IDLE; copies cfg. NULL on OOM. */
inv_conn *inv_new(struct event_base *base, const inv_config *cfg, const inv_callbacks *cb, void *arg);
/* IDLE -> CONNECTING. */
void inv_start(inv_conn *t);
/* Closes the connection (on_flush and on_active(0) if it was active). */
void inv_free(inv_conn *t);
/* Drops the connection as if it were lost (on_flush, on_active(0)) and
 * connects again at once: Redis moved (a failover). */
void inv_restart(inv_conn *t, const char *why);
/* The credentials of the next connects (user NULL: the one-argument AUTH;
 * pass NULL: no AUTH). An active connection stays logged in, as Redis
 * keeps it; one waiting to try again (BACKOFF) or still logging in
 * connects again at once. Returns 0, or -1 on OOM (the old ones stay). */
int inv_set_auth(inv_conn *t, const char *user, const char *pass);

enum inv_state inv_get_state(const inv_conn *t);
/* Hits and PINGs. Redis writes a write's invalidation before the write's
 * reply, unless this connection already had output waiting in the same
 * pass of Redis's loop: then the writer's reply goes first, and the PING's
 * answer (that output) and the invalidation follow it, in one write,
 * microseconds later. So a read that comes while a PING (a keep-alive or a
 * barrier) is unanswered may follow a reply seen elsewhere that outran an
 * invalidation: until that PING's answer, and what was read with it, is
 * handled (on_ping_answered), the owner serves it no hit: it waits, up to
 * hold_ms, and then Redis answers it (as it would without a cache: late
 * too if Redis is stalled, a fork or a long script, BUSY during a script).
 * An answer more than hold_ms later than it could have come (the round
 * trip counted) ends a stall and sends a fresh PING, which holds hits as
 * the PINGs before it did (stats.stalls): a script past
 * busy-reply-threshold answers clients, the writer of a write run just
 * before it too, and sends that write's invalidation only when it ends.
 * inv_hold_mark: the PINGs a read that comes now waits for (a number for
 * inv_hold_left_ms), 0 if none is unanswered (ACTIVE only). Later PINGs
 * are not its concern, so that tunnels that keep sending barriers do not
 * hold a read for ever. */
uint64_t inv_hold_mark(const inv_conn *t);
/* How many ms a read marked so must still wait; 0 once the PINGs up to
 * mark are answered; INV_HOLD_PAST when hold_ms passed without an answer:
 * no hit, Redis answers the read. */
#define INV_HOLD_PAST (-1)
int inv_hold_left_ms(const inv_conn *t, uint64_t mark);
/* The same for a read that comes now. */
int inv_ping_hold_ms(const inv_conn *t);
/* A barrier: a PING sent now, whose answer comes after every invalidation
 * of every write Redis ran before it (one connection, in order; in BCAST
 * mode too, as a write's invalidations leave in the pass of Redis's loop
 * that ran it, before any later command is read). Sent once a write's reply
 * is in hand elsewhere, its answer brings that write's invalidations.
 * Returns its number, or 0 when not ACTIVE (nothing to wait for: the
 * owner's cache is empty and serves nothing until tracking is on again). */
uint64_t inv_barrier(inv_conn *t);
/* The barrier seq answered, or the connection no longer ACTIVE (which
 * emptied the cache first). on_ping_answered tells when to ask again. */
int inv_barrier_passed(const inv_conn *t, uint64_t seq);
/* Redis's id of this connection while ACTIVE (the REDIRECT target of data
 * connections in the default and optin modes), else 0. */
long long inv_redirect_id(const inv_conn *t);
/* The run_id of the Redis this connection reached (INFO server, at each
 * connect) while ACTIVE, or NULL (not active, INFO refused): data
 * connections that reach another server are told apart by it (their reads
 * would fill the cache with values this connection hears no change of). */
const char *inv_server_id(const inv_conn *t);
/* 1 if bytes have reached this connection that it has not handled yet: in
 * its socket, in TLS's buffer, or a message in part; or its close (or a
 * reset), not handled yet either. Libevent runs the
 * connection's read first only among the events of one poll: a client's
 * read may take bytes that came after an invalidation still unread (a
 * pipeline, a command in pieces). One recv(MSG_PEEK). */
int inv_unread(const inv_conn *t);
/* 1 while ACTIVE if that Redis is a cluster node (INFO server's
 * redis_mode; 0 when INFO was refused): without a hash-tag key-prefix the
 * cache then stays off (px_caching_untagged_cluster). */
int inv_server_cluster(const inv_conn *t);
const char *inv_state_name(enum inv_state s);

typedef struct inv_stats {
    uint64_t messages;       /* invalidation messages received */
    uint64_t keys;           /* keys named in them */
    uint64_t connects;       /* setups started */
    uint64_t losses;         /* times ACTIVE was left */
    /* PINGs (keep-alives, barriers): sent = answered + lost + unanswered */
    uint64_t pings_sent, pings_answered;
    uint64_t pings_lost;     /* unanswered when their connection was lost */
    uint64_t stalls;         /* PING answers more than hold_ms later than they
                                could have come (hits then waited for a fresh PING) */
    char last_error[256];    /* why tracking is not active, if it is not */
} inv_stats;

const inv_stats *inv_get_stats(const inv_conn *t);

#endif
