/*
 * proxy/upstream.c — pools of connections to Redis. See upstream.h for the
 * data model; the invariants kept here:
 *
 * - A request record is on exactly one connection's FIFO while pending, and
 *   its reply goes to exactly one place: the client (px_client_on_reply) or
 *   the floor (PX_REQ_DISCARD). When a connection dies every pending record
 *   gets an error reply: no client ever waits forever.
 * - px_upstream_close never frees: the socket may be the one whose
 *   callback is running. Memory goes at reap time.
 * - A closed connection is unlinked from its pool at once, so nobody picks
 *   it again; u->pool is NULL from then on.
 */
#include "proxy/upstream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <openssl/rand.h>

#include "proxy/aclwatch.h"
#include "proxy/batch.h"
#include "proxy/slotwatch.h"
#include "proxy/caching.h"
#include "proxy/client.h"
#include "proxy/follow.h"
#include "proxy/io.h"
#include "proxy/log.h"
#include "proxy/resolve.h"
#include "proxy/sentinel.h"
#include "proxy/sockopt.h"
#include "proxy/tls.h"

#define PX_BACKOFF_MIN_MS 100
#define PX_BACKOFF_MAX_MS 2000
#define PX_MAX_IDLE_PINNED 32
/* A connection given back by a client (WATCH, a blocking command) waits on
 * the pool's idle list for the next one that needs its own, this long at
 * most: a burst of them would otherwise hold Redis connections for good,
 * the pool being in use (the ACL check uses the default one). */
#define PX_IDLE_PINNED_MS 60000
#define PX_POOL_IDLE_FREE_MS 60000
/* Pools no session uses are kept (with their connections) for
 * PX_POOL_IDLE_FREE_MS, but no more than this many: Redis's nopass default
 * user accepts AUTH with any password, and each password is a pool of its
 * own, so one client could otherwise open a connection to Redis per AUTH. */
#define PX_MAX_IDLE_POOLS 16
#define PX_MAX_FREE_REQS 4096

static uint64_t next_upstream_id;

/* ------------------------------------------------------------------------ */
/* request records */

px_req *px_req_new(px_server *srv, px_client *c, int kind) {
    px_req *r = srv->free_reqs;
    if (r != NULL) {
        srv->free_reqs = r->next_up;
        srv->nfree_reqs--;
    } else {
        r = malloc(sizeof *r);
        if (r == NULL) return NULL;
    }
    memset(r, 0, sizeof *r);
    r->client = c;
    r->kind = kind;
    r->learn_mark = px_acl_mark(srv);
    return r;
}

void px_req_release(px_server *srv, px_req *r) {
    if (r->flush_hold) px_caching_flush_released(srv);
    if (r->early != NULL) evbuffer_free(r->early);
    free(r->aux);
    r->aux = NULL;
    if (srv->nfree_reqs < PX_MAX_FREE_REQS) {
        r->early = NULL;
        r->next_up = srv->free_reqs;
        srv->free_reqs = r;
        srv->nfree_reqs++;
    } else {
        free(r);
    }
}

/* ------------------------------------------------------------------------ */
/* pools */

static int str_eq(const char *a, const char *b) {
    if (a == NULL || b == NULL) return a == b;
    return strcmp(a, b) == 0;
}

/* The later of two px_acl_mark()s: the one that may still hold. */
static void take_mark(uint64_t *to, uint64_t from) {
    if (from > *to) *to = from;
}

/* The ACL user a pool's connections run as: without a user name (no
 * AUTH, or AUTH with only a password) Redis's "default". */
static const char *acl_user(const px_pool *p) {
    return p->user != NULL ? p->user : "default";
}

/* What Redis refused a user that sidecache added (a MULTI, a DISCARD, a
 * batch's EXEC) is the user's ACL, whatever the database or protocol:
 * p's denials go to the user's other pools (push), or p takes theirs. */
static void share_denials(px_pool *p, int push) {
    for (px_pool *o = p->srv->pools; o != NULL; o = o->next) {
        if (o == p || strcmp(acl_user(o), acl_user(p)) != 0) continue;
        px_pool *to = push ? o : p, *from = push ? p : o;
        take_mark(&to->txn_denied, from->txn_denied);
        take_mark(&to->discard_denied, from->discard_denied);
        take_mark(&to->exec_denied, from->exec_denied);
    }
}

void px_pool_denied(px_pool *p) {
    share_denials(p, 1);
}

px_pool *px_pool_ref(px_server *srv, const char *user, const char *pass, int db, int proto) {
    for (px_pool *p = srv->pools; p != NULL; p = p->next) {
        if (p->db == db && p->proto == proto && str_eq(p->user, user) && str_eq(p->pass, pass)) {
            p->refs++;
            p->last_used_ms = px_now_ms();
            return p;
        }
    }
    px_pool *p = calloc(1, sizeof *p);
    if (p == NULL) return NULL;
    p->srv = srv;
    p->db = db;
    p->proto = proto;
    p->nshared = srv->cfg->upstream_connections;
    p->shared = calloc((size_t)p->nshared, sizeof *p->shared);
    p->user = user ? strdup(user) : NULL;
    p->pass = pass ? strdup(pass) : NULL;
    if (p->shared == NULL || (user && !p->user) || (pass && !p->pass)) {
        free(p->shared);
        free(p->user);
        free(p->pass);
        free(p);
        return NULL;
    }
    p->refs = 1;
    p->last_used_ms = px_now_ms();
    share_denials(p, 0);
    p->next = srv->pools;
    srv->pools = p;
    px_debug("pool created user=%s db=%d proto=%d", user ? user : (pass ? "(legacy)" : "-"), db, proto);
    return p;
}

void px_pool_unref(px_pool *p) {
    if (p == NULL) return;
    p->refs--;
    p->last_used_ms = px_now_ms();
}

static void pool_backoff(px_pool *p, const char *why) {
    if (p->backoff_ms == 0)
        p->backoff_ms = PX_BACKOFF_MIN_MS;
    else if (p->backoff_ms < PX_BACKOFF_MAX_MS)
        p->backoff_ms *= 2;
    if (p->backoff_ms > PX_BACKOFF_MAX_MS) p->backoff_ms = PX_BACKOFF_MAX_MS;
    p->backoff_until_ms = px_now_ms() + p->backoff_ms;
    snprintf(p->last_error, sizeof p->last_error, "%s", why);
}

static int pool_in_backoff(px_pool *p) {
    return p->backoff_until_ms != 0 && px_now_ms() < p->backoff_until_ms;
}

static void pool_unlink_upstream(px_upstream *u) {
    px_pool *p = u->pool;
    if (p == NULL) return;
    if (u->shared_index >= 0 && u->shared_index < p->nshared && p->shared[u->shared_index] == u)
        p->shared[u->shared_index] = NULL;
    for (px_upstream **pp = &p->idle; *pp != NULL; pp = &(*pp)->next_idle) {
        if (*pp == u) {
            *pp = u->next_idle;
            p->nidle--;
            break;
        }
    }
    u->next_idle = NULL;
    u->pool = NULL;
}

static void pool_close_connections(px_pool *p) {
    for (int i = 0; i < p->nshared; i++)
        if (p->shared[i] != NULL) px_upstream_close(p->shared[i], "pool closed");
    while (p->idle != NULL) px_upstream_close(p->idle, "pool closed");
}

void px_pools_foreach_shared(px_server *srv, void (*fn)(px_server *, px_upstream *)) {
    for (px_pool *p = srv->pools; p != NULL; p = p->next)
        for (int i = 0; i < p->nshared; i++)
            if (p->shared[i] != NULL && p->shared[i]->state != PX_UP_CLOSED) fn(srv, p->shared[i]);
}

void px_pools_close_connections(px_server *srv) {
    for (px_pool *p = srv->pools; p != NULL; p = p->next) pool_close_connections(p);
    while (srv->orphans != NULL) px_upstream_close(srv->orphans, "closed before its output was written");
    while (srv->retired != NULL) px_upstream_close(srv->retired, "closed before its replies came");
}

/* See px_upstream.retired. A shared connection awaiting nothing closes now
 * (why, for the log). */
static void up_retire(px_upstream *u, const char *why) {
    if (u == NULL || u->state == PX_UP_CLOSED || u->retired) return;
    u->retired = 1;
    if (u->owner != NULL) return; /* px_upstream_unpin closes it */
    pool_unlink_upstream(u);
    if (u->npending == 0) {
        px_upstream_close(u, why);
        return;
    }
    u->next_retired = u->srv->retired;
    u->srv->retired = u;
}

/* Every shared connection of p retires and its idle pinned ones close. */
static void pool_retire_connections(px_pool *p, const char *why) {
    for (int i = 0; i < p->nshared; i++) up_retire(p->shared[i], why);
    while (p->idle != NULL) px_upstream_close(p->idle, why);
}

/* Every shared connection retires (px_upstream.retired): the next requests
 * go on new ones. */
static void pools_retire_connections(px_server *srv, const char *why) {
    for (px_pool *p = srv->pools; p != NULL; p = p->next) pool_retire_connections(p, why);
}

/* Whether u reached the server whose run_id is id: 1 yes, 0 another one,
 * -1 not known (either id unknown). */
static int up_on_server(const px_upstream *u, const char *id) {
    if (id == NULL || u->server_id[0] == '\0') return -1;
    return strcmp(u->server_id, id) == 0;
}

/* Whether u must go when tracking comes on at id's server: it is on
 * another, or (retire_unknown) on one not known. */
static int up_off_server(const px_upstream *u, const char *id, int retire_unknown) {
    int on = up_on_server(u, id);
    return on == 0 || (on < 0 && retire_unknown);
}

void px_upstreams_tracking_on(px_server *srv, const char *id, int retire_unknown, const char *why) {
    for (px_pool *p = srv->pools; p != NULL; p = p->next) {
        for (int i = 0; i < p->nshared; i++) {
            px_upstream *u = p->shared[i];
            if (u == NULL || u->state == PX_UP_CLOSED || !up_off_server(u, id, retire_unknown)) continue;
            u->other_server = 1; /* (its reads fill nothing from now on) */
            up_retire(u, why);
        }
        for (px_upstream *u = p->idle, *next; u != NULL; u = next) {
            next = u->next_idle;
            if (up_off_server(u, id, retire_unknown)) px_upstream_close(u, why);
        }
    }
    /* (A client's own connection is left to it: the reads that fill go on
     * shared ones. The retired are going: they take no new request.) */
}

void px_upstreams_move(px_server *srv, const struct sockaddr_storage *sa, unsigned salen, int gently) {
    memcpy(&srv->up_sa, sa, salen);
    srv->up_salen = salen;
    memcpy(&srv->up_conn_sa, sa, salen);
    srv->up_conn_salen = salen;
    srv->up_reached_salen = 0;
    /* the cache first: nothing read from the old node is served again */
    px_caching_upstream_moved(srv);
    /* then the shared connections: a tunnel closed below may relay what it
     * held (its barrier passed), a RESET among it, and its client go on
     * with its next commands, which must not go to the old node */
    if (!gently) px_pools_close_connections(srv);
    /* closing a client's connection may close the client, which unlinks it */
    for (px_client *c = srv->clients, *next; c != NULL; c = next) {
        next = c->next;
        if (c->pinned == NULL) continue;
        if (gently)
            up_retire(c->pinned, "upstream moved");
        else
            px_upstream_close(c->pinned, "upstream master moved (failover)");
    }
    if (gently) pools_retire_connections(srv, "upstream moved");
}

void px_pools_default_user_changed(px_server *srv) {
    /* Redis leaves a connection logged in as the default user when that
     * user gets a password (requirepass, ACL SETUSER default >pw) or is
     * turned off: the shared connections of the pools without credentials
     * would go on answering what Redis now refuses a new client. They
     * finish what they await; new ones log in afresh, and their access
     * probe learns again whether Redis lets a client without credentials
     * in (unknown meanwhile: no hits, no local answers for such clients). */
    srv->open_access = -1;
    for (px_pool *p = srv->pools; p != NULL; p = p->next)
        if (p->pass == NULL) pool_retire_connections(p, "the default user changed on Redis");
}

static void pool_free(px_pool *p) {
    pool_close_connections(p);
    free(p->shared);
    free(p->user);
    free(p->pass);
    free(p);
}

/* Counted in cron ticks (one a second), so that no request pays for a clock. */
static void up_check_timeout(px_upstream *u, int64_t now_ms, int timeout_s) {
    if (u == NULL || u->state == PX_UP_CLOSED) return;
    if (u->npending == 0 || u->tunnel || u->reads != u->reads_seen ||
        (u->owner != NULL && u->owner->blocking)) { /* BLPOP 0 may wait for ever */
        u->reads_seen = u->reads;
        u->idle_ticks = 0;
        return;
    }
    if (++u->idle_ticks <= timeout_s) return;
    char why[128];
    snprintf(why, sizeof why, "upstream timeout: no reply for %d s (upstream-timeout)", timeout_s);
    px_warning("upstream id=%llu pending=%d: %s", (unsigned long long)u->id, u->npending, why);
    if (!u->retired) px_upstream_unanswered(u->srv, "a request got no reply for upstream-timeout");
    px_upstream_close(u, why);
}

void px_upstream_unanswered(px_server *srv, const char *what) {
    if (srv->follow_ev == NULL || srv->up_silent || srv->stopping) return;
    srv->up_unreachable = srv->up_silent = 1;
    px_notice("upstream not answering (%s): the cluster's nodes are asked where the slot is", what);
}

/*
 * While it is unknown whether Redis lets clients without credentials in
 * (every probe so far met LOADING or the like), hits, write batches and
 * local MULTI stay off for them. Shared connections live long, so the next
 * handshake may be far off: ask again on one that is ready, once a second.
 * A PING between two writes cannot fall inside a MULTI there: the blocks
 * sidecache sends (MULTI ... EXEC) are written whole.
 */
static void up_probe_again(px_server *srv) {
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    for (px_pool *p = srv->pools; p != NULL; p = p->next) {
        if (p->pass != NULL) continue; /* its handshake authenticates: no probe */
        for (int i = 0; i < p->nshared; i++) {
            px_upstream *u = p->shared[i];
            if (u == NULL || u->state != PX_UP_READY) continue;
            if (u->probe_access) return; /* one is on its way */
            px_req *r = px_req_new(srv, NULL, PX_REQ_PROBE);
            if (r == NULL) return;
            u->probe_access = 1;
            px_upstream_send(u, r, ping, sizeof ping - 1);
            return;
        }
    }
}

/* The upstream given by name (no Sentinel, no cluster MOVED followed):
 * whose answer is checked again, as a managed Redis fails over by pointing
 * its name at the new primary and demoting the old one, which still takes
 * connections (and answers writes with READONLY). */
static int up_by_name(const px_server *srv) {
    return !srv->cfg->up.is_unix && !px_sentinel_enabled(srv) && !srv->up_followed;
}

/* Once a second: when the name no longer gives the address connected to,
 * the connections move to the new one, after the cache is emptied (C6).
 * px_resolve_moved starts a lookup when its answer is PX_RESOLVE_FRESH_MS
 * old and waits for none: a hanging resolver delays only the move. The
 * address compared is where the connections went (up_conn_sa): a connect
 * that failed meanwhile made the next one look the name up again, and
 * what that gave is not where the older connections, the invalidation
 * connection and the cache's entries came from. */
static void up_check_name(px_server *srv) {
    struct sockaddr_storage to;
    unsigned tolen = 0;
    const char *why = "upstream reached at another address";
    if (!up_by_name(srv) || srv->up_conn_salen == 0) return;
    if (srv->up_reached_salen != 0) {
        memcpy(&to, &srv->up_reached_sa, srv->up_reached_salen);
        tolen = srv->up_reached_salen;
    } else if (px_resolve_moved(srv->cfg->up.host, srv->cfg->up.port, &srv->up_conn_sa, srv->up_conn_salen, &to,
                                &tolen)) {
        why = "upstream name now points elsewhere";
    } else {
        return;
    }
    char from[300], dest[300];
    px_format_address(&srv->up_conn_sa, srv->up_conn_salen, from, sizeof from);
    px_format_address(&to, tolen, dest, sizeof dest);
    px_notice("%s host=%s from=%s to=%s: cache emptied, connections moved", why, srv->cfg->up.host, from, dest);
    px_upstreams_move(srv, &to, tolen, 1);
}

void px_upstream_reached(px_server *srv, const struct sockaddr_storage *sa, unsigned salen) {
    if (!up_by_name(srv) || salen == 0) return;
    if (srv->up_conn_salen == 0) {
        memcpy(&srv->up_conn_sa, sa, salen);
        srv->up_conn_salen = salen;
    } else if (!px_same_address(&srv->up_conn_sa, srv->up_conn_salen, sa, salen)) {
        /* the other connections, the invalidation one and the cache came
         * from elsewhere: a move, made by the next check (not here, inside
         * a connect's callback) */
        memcpy(&srv->up_reached_sa, sa, salen);
        srv->up_reached_salen = salen;
    }
}

/* A READONLY came from the upstream given by name: its answer is asked
 * again at the next check (px_upstreams_cron), which moves the
 * connections if the name points elsewhere now. */
static void upstream_recheck_name(px_server *srv) {
    if (up_by_name(srv)) px_resolve_expire(srv->cfg->up.host, srv->cfg->up.port);
}

/* The least time between two moves to the address again, doubled after
 * each up to the max, back to the least after a minute without one
 * (px_upstreams_move_again). */
#define PX_MOVE_AGAIN_MS 1000
#define PX_MOVE_AGAIN_MAX_MS 30000

/* (A direct go-redis client closes a connection that answers READONLY and
 * reaches the new master with its next.) */
void px_upstreams_move_again(px_server *srv, enum px_move_again why) {
    if (srv->move_again_ev == NULL || evtimer_pending(srv->move_again_ev, NULL)) return;
    /* a connect reached another address than the connections so far (the
     * name now gives another): the name's check moves them all there */
    if (why == PX_MOVE_OTHER_SERVER && srv->up_reached_salen != 0) return;
    srv->move_again_why = (int)why;
    int64_t now = px_now_ms();
    if (srv->move_again_wait_ms == 0 || now - srv->move_again_ms > 60000) srv->move_again_wait_ms = PX_MOVE_AGAIN_MS;
    int64_t wait = srv->move_again_ms == 0 ? 0 : srv->move_again_ms + srv->move_again_wait_ms - now;
    struct timeval tv = px_ms_timeval(wait < 0 ? 0 : wait);
    evtimer_add(srv->move_again_ev, &tv);
}

int px_upstreams_moving_again(const px_server *srv, enum px_move_again why) {
    return srv->move_again_ev != NULL && evtimer_pending(srv->move_again_ev, NULL) && srv->move_again_why == (int)why;
}

void px_upstreams_move_again_now(px_server *srv) {
    struct sockaddr_storage to;
    unsigned tolen = srv->up_conn_salen != 0 ? srv->up_conn_salen : srv->up_salen;
    if (tolen == 0 || srv->stopping) return;
    memcpy(&to, srv->up_conn_salen != 0 ? &srv->up_conn_sa : &srv->up_sa, tolen);
    if (srv->move_again_ms != 0) {
        int doubled = srv->move_again_wait_ms * 2;
        srv->move_again_wait_ms = doubled > PX_MOVE_AGAIN_MAX_MS ? PX_MOVE_AGAIN_MAX_MS : doubled;
    }
    srv->move_again_ms = px_now_ms();
    char dest[300];
    px_format_address(&to, tolen, dest, sizeof dest);
    px_notice("%s: cache emptied, connections made again to %s, which may lead to the new master (next such move "
              "in %d ms at the earliest)",
              srv->move_again_why == PX_MOVE_READONLY
                  ? "upstream answered READONLY (no longer the master)"
                  : "upstream address leads to another Redis than the invalidation connection reached",
              dest, srv->move_again_wait_ms);
    if (srv->move_again_why == PX_MOVE_READONLY && srv->move_again_wait_ms >= PX_MOVE_AGAIN_MAX_MS)
        /* a failover is over in seconds: READONLY on and on is a replica */
        px_warning_repeat(&srv->readonly_again, PX_LOG_REPEAT_SLOW_MS,
                          "upstream %s keeps answering READONLY: it looks like a replica, where writes fail; point "
                          "upstream at the master, or use upstream-sentinel",
                          dest);
    px_upstreams_move(srv, &to, tolen, 1);
}

static void up_ask_server_ids(px_server *srv);

/* u's reads filled the cache under this epoch's tracking (default, optin):
 * Redis remembers them on u, and forgets them if it ends u. */
static int up_filled_tracked(const px_upstream *u, uint64_t epoch) {
    return u != NULL && u->tracked_epoch == epoch && u->filled;
}

/*
 * Tracking per read (default, optin), Redis forgets what a shared
 * connection read when it closes it, and sidecache learns of that only
 * from the connection's end (px_caching_on_upstream_lost empties the
 * cache). An end that never arrives (a NAT or firewall entry expired on a
 * connection the hits left idle, then Redis closed it) would leave the
 * cache serving until TCP's keep-alive ends the connection, minutes later.
 * So a tracked connection that filled the cache and read nothing since the
 * last cron is sent a PING: a connection Redis no longer has answers it with a reset, and one
 * whose packets go nowhere meets upstream-timeout.
 */
static void up_ping_idle_tracked(px_server *srv) {
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    uint64_t epoch = px_caching_tracked_epoch(srv);
    if (epoch == 0) return;
    for (px_pool *p = srv->pools; p != NULL; p = p->next)
        for (int i = 0; i < p->nshared; i++) {
            px_upstream *u = p->shared[i];
            /* (one whose reads filled nothing leaves nothing to forget) */
            if (!up_filled_tracked(u, epoch) || u->state != PX_UP_READY || u->tunnel) continue;
            if (u->npending == 0 && u->reads == u->reads_pinged) {
                px_req *r = px_req_new(srv, NULL, PX_REQ_DISCARD);
                if (r == NULL) return;
                px_upstream_send(u, r, ping, sizeof ping - 1);
            }
            u->reads_pinged = u->reads;
        }
}

static void up_check_timeouts(px_server *srv, int64_t now_ms) {
    int timeout = srv->cfg->upstream_timeout;
    if (timeout <= 0) return;
    for (px_pool *p = srv->pools; p != NULL; p = p->next)
        for (int i = 0; i < p->nshared; i++) up_check_timeout(p->shared[i], now_ms, timeout);
    for (px_client *c = srv->clients, *next; c != NULL; c = next) {
        next = c->next;
        up_check_timeout(c->pinned, now_ms, timeout);
    }
    for (px_upstream *u = srv->retired, *next; u != NULL; u = next) {
        next = u->next_retired;
        up_check_timeout(u, now_ms, timeout);
    }
}

void px_upstreams_cron(px_server *srv, int64_t now_ms) {
    if (srv->open_access < 0) up_probe_again(srv);
    up_ask_server_ids(srv);
    up_check_name(srv);
    up_check_timeouts(srv, now_ms);
    /* (after the timeouts: a PING sent now counts its first second at the
     * next cron, as a client's request does) */
    up_ping_idle_tracked(srv);
}

/* The tracked connections' ends are asked in one poll of up to this many;
 * more (many pools) take more polls. */
#define PX_ENDING_POLL 32

/* Polls fds[0..n) for a peer's end: 1 if one has ended. (POLLRDHUP sees
 * the end behind replies not read yet, where a one-byte MSG_PEEK would see
 * only the first of them.) */
static int any_ended(struct pollfd *fds, int n) {
    if (n == 0 || poll(fds, (nfds_t)n, 0) <= 0) return 0;
    for (int i = 0; i < n; i++)
        if (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) return 1;
    return 0;
}

/* Adds u to fds when its reads filled the cache under this epoch's
 * tracking (a connection that filled nothing leaves nothing to forget);
 * returns 1 when fds is full and was found to hold an end. */
static int add_tracked(struct pollfd *fds, int *n, const px_upstream *u, uint64_t epoch) {
    if (!up_filled_tracked(u, epoch) || u->state == PX_UP_CLOSED || u->io.fd < 0) return 0;
    fds[(*n)++] = (struct pollfd){.fd = u->io.fd, .events = POLLRDHUP};
    if (*n < PX_ENDING_POLL) return 0;
    int ended = any_ended(fds, *n);
    *n = 0;
    return ended;
}

int px_upstreams_tracked_ending(const px_server *srv, uint64_t epoch) {
    struct pollfd fds[PX_ENDING_POLL];
    int n = 0;
    for (const px_pool *p = srv->pools; p != NULL; p = p->next)
        for (int i = 0; i < p->nshared; i++)
            if (add_tracked(fds, &n, p->shared[i], epoch)) return 1;
    for (const px_upstream *u = srv->retired; u != NULL; u = u->next_retired)
        if (add_tracked(fds, &n, u, epoch)) return 1;
    return any_ended(fds, n);
}

/* Closes the idle connections of p given back more than
 * PX_IDLE_PINNED_MS ago (the list is newest first). */
static void pool_close_idle(px_pool *p, int64_t now_ms) {
    px_upstream **pp = &p->idle;
    while (*pp != NULL && now_ms - (*pp)->idle_since_ms <= PX_IDLE_PINNED_MS) pp = &(*pp)->next_idle;
    while (*pp != NULL) px_upstream_close(*pp, "idle");
}

void px_pools_sweep(px_server *srv, int64_t now_ms) {
    px_pool **pp = &srv->pools;
    int idle = 0; /* unused pools kept so far, newest first (the list's order) */
    while (*pp != NULL) {
        px_pool *p = *pp;
        int busy = 0;
        pool_close_idle(p, now_ms);
        if (p->used) p->last_used_ms = now_ms, p->used = 0;
        for (int i = 0; i < p->nshared && !busy; i++)
            if (p->shared[i] != NULL && p->shared[i]->npending > 0) busy = 1;
        /* a refused identity is not kept: each failed AUTH of a new user
         * would add one for a minute, and every AUTH scans the list */
        if (p->refs == 0 && !busy &&
            (p->refused || now_ms - p->last_used_ms > PX_POOL_IDLE_FREE_MS || ++idle > PX_MAX_IDLE_POOLS)) {
            *pp = p->next;
            pool_free(p);
        } else {
            pp = &p->next;
        }
    }
}

void px_pools_free_all(px_server *srv) {
    while (srv->pools != NULL) {
        px_pool *p = srv->pools;
        srv->pools = p->next;
        pool_free(p);
    }
}

/* ------------------------------------------------------------------------ */
/* one connection */


int px_ip_text(const struct sockaddr_storage *sa, char *host, size_t hlen, int *port) {
    if (sa->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const void *)sa;
        *port = ntohs(in->sin_port);
        return inet_ntop(AF_INET, &in->sin_addr, host, (socklen_t)hlen) ? 0 : -1;
    }
    if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const void *)sa;
        *port = ntohs(in6->sin6_port);
        return inet_ntop(AF_INET6, &in6->sin6_addr, host, (socklen_t)hlen) ? 0 : -1;
    }
    return -1;
}

const char *px_format_address(const struct sockaddr_storage *sa, unsigned salen, char *buf, size_t n) {
    char host[INET6_ADDRSTRLEN] = "?";
    int port;
    if (px_ip_text(sa, host, sizeof host, &port) == 0) {
        snprintf(buf, n, sa->ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", host, port);
    } else if (sa->ss_family == AF_UNIX && salen > 0) {
        snprintf(buf, n, "%s", ((const struct sockaddr_un *)sa)->sun_path);
    } else {
        snprintf(buf, n, "?");
    }
    return buf;
}

static const char *up_addr(px_server *srv, char *buf, size_t n) {
    const px_upstream_addr *a = &srv->cfg->up;
    /* with Sentinel, where the master is now */
    if (px_sentinel_enabled(srv) && srv->up_salen != 0) return px_format_address(&srv->up_sa, srv->up_salen, buf, n);
    if (a->is_unix)
        snprintf(buf, n, "%s", a->path);
    else
        snprintf(buf, n, "%s:%d", a->host, a->port);
    return buf;
}

/* Writes the handshake that puts a fresh connection in the pool's identity;
 * returns how many replies it will produce. */
static int up_write_handshake(px_upstream *u, resp_buf *b) {
    px_pool *p = u->pool;
    int n = 0;
    char dbbuf[16];
    if (p->proto == 3) {
        if (p->pass != NULL)
            resp_enc_commandv(b, "HELLO", "3", "AUTH", p->user ? p->user : "default", p->pass, NULL);
        else
            resp_enc_commandv(b, "HELLO", "3", NULL);
        n++;
    } else if (p->pass != NULL) {
        if (p->user != NULL)
            resp_enc_commandv(b, "AUTH", p->user, p->pass, NULL);
        else
            resp_enc_commandv(b, "AUTH", p->pass, NULL);
        n++;
    }
    int select_at = -1;
    if (p->db != 0) {
        snprintf(dbbuf, sizeof dbbuf, "%d", p->db);
        resp_enc_commandv(b, "SELECT", dbbuf, NULL);
        select_at = n++;
    }
    int id_at = -1; /* INFO's place among the replies */
    if (px_caching_wants_server_id(u->srv)) {
        /* Which server is this? One behind the address the invalidation
         * connection did not reach must fill nothing (caching.h) */
        resp_enc_commandv(b, "INFO", "server", NULL);
        id_at = n++;
    }
    if (p->pass == NULL) {
        /* Does Redis let a client without credentials in? The answer tells
         * whether the proxy may answer PING and friends itself for such a
         * client, or must give it Redis's NOAUTH (see srv->open_access). */
        resp_enc_commandv(b, "PING", NULL);
        u->probe_access = 1;
        n++;
    }
    /* its answer is the (id_at + 1)-th: handshake_left is then n - id_at */
    u->server_id_left = id_at >= 0 ? n - id_at : 0;
    u->select_left = select_at >= 0 ? n - select_at : 0;
    return n;
}

int px_same_address(const struct sockaddr_storage *a, unsigned alen, const struct sockaddr_storage *b, unsigned blen) {
    if (alen != blen || a->ss_family != b->ss_family) return 0;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
        return x->sin6_port == y->sin6_port && memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) == 0;
    }
    return memcmp(a, b, alen) == 0;
}

/* Any configured address (the upstream, tracking-upstream, a sentinel, a
 * cluster node): a unix path as it is, a name through resolve.h. */
int px_resolve_address(const px_upstream_addr *a, struct sockaddr_storage *sa, unsigned *salen, char *why,
                       size_t whylen) {
    if (a->is_unix) {
        struct sockaddr_un *sun = (struct sockaddr_un *)sa;
        memset(sun, 0, sizeof *sun);
        sun->sun_family = AF_UNIX;
        snprintf(sun->sun_path, sizeof sun->sun_path, "%s", a->path);
        *salen = sizeof *sun;
        return 0;
    }
    return px_resolve(a->host, a->port, sa, salen, why, whylen);
}

/* The upstream's socket address, resolved once and again after a failed
 * connect reset up_salen (with Sentinel: where the master is now). */
int px_upstream_resolve(px_server *srv, char *why, size_t whylen) {
    if (srv->up_salen != 0) return 0;
    if (px_sentinel_enabled(srv)) return px_sentinel_master(srv, &srv->up_sa, &srv->up_salen, why, whylen);
    return px_resolve_address(&srv->cfg->up, &srv->up_sa, &srv->up_salen, why, whylen);
}

static const px_io_ops up_io_ops;
static void up_close_as(px_upstream *u, const char *code, const char *why);

/* A connect to sa failed: where is Redis now? With Sentinel, the address
 * stays until px_sentinel_check sees a new master and moves every
 * connection (other connections to this one may still be up); asked at
 * once. So it does after following a cluster's MOVED (follow.h). Else the
 * configured address is resolved again (its name may point elsewhere now),
 * unless the next connect's address is another already: a connect that
 * ends late (its timeout) says nothing of that one. */
static void up_connect_failed(px_server *srv, const struct sockaddr_storage *sa, unsigned salen) {
    if (px_sentinel_enabled(srv) && srv->sentinel_ev != NULL) {
        px_sentinel_ask_soon(srv);
        return;
    }
    if (srv->up_followed) {
        /* the node a cluster's MOVED named: it stays the upstream until the
         * cluster's nodes, or the configured address, say where the slot
         * went (px_follow_cron), whose move empties the cache and moves the
         * invalidation connection */
        srv->up_unreachable = 1;
        return;
    }
    /* the name's next address, or a new answer once each failed (the
     * name's record judges whether sa is still the one to skip) */
    if (!srv->cfg->up.is_unix) px_resolve_failed(srv->cfg->up.host, srv->cfg->up.port, sa, salen);
    if (srv->up_salen != 0 && !px_same_address(&srv->up_sa, srv->up_salen, sa, salen)) return;
    px_format_address(sa, salen, srv->up_failed, sizeof srv->up_failed);
    srv->up_salen = 0;
    srv->up_followed = 0;
    srv->up_unreachable = 1;
}

/* TCP connecting, or TLS's handshake not done: the connect is not over. */
static int up_connecting(px_upstream *u) {
    return u->state == PX_UP_CONNECTING || px_io_tls_handshaking(&u->io);
}

/* Counts a failed connect and warns of it (one a minute while Redis stays
 * unreachable; px_server_upstream_reached ends the run). */
static void up_count_connect_failed(px_server *srv, const char *addr, const char *cause) {
    srv->connects_failed++;
    px_warning_repeat(&srv->connect_failures, PX_LOG_REPEAT_MS, "upstream connect failed addr=%s err=\"%s\"",
                      addr, cause);
}

/* A connect failed (cause: why, for the client and the log): the pool
 * backs off, where Redis is is asked again, and the requests waiting on u
 * get the error a refused connect gives (px_unavailable_code). */
static void up_connect_fail(px_upstream *u, const char *cause) {
    px_server *srv = u->srv;
    char addr[300], why[600];
    snprintf(why, sizeof why, "upstream %s unavailable: %s", up_addr(srv, addr, sizeof addr), cause);
    /* (a retired connection went to where Redis was: that says nothing of
     * where it is now) */
    if (u->pool && !u->retired) pool_backoff(u->pool, why);
    if (!u->retired) up_connect_failed(srv, &u->sa, u->salen); /* resolve again: Redis may have moved */
    up_count_connect_failed(srv, addr, cause);
    up_close_as(u, px_unavailable_code(srv), why); /* nothing was sent: nothing ran */
}

/*
 * upstream-connect-timeout. A Redis host that drops SYNs (dead node,
 * firewall, partition) leaves a connect waiting for the kernel's ~2
 * minutes, and the requests queued on it for upstream-timeout; with
 * Sentinel, a failed connect also asks where the master is ahead of the
 * periodic ask. So each connect gets a deadline of its own: a libevent
 * timer, armed when the connect starts and freed when it is over
 * (up_connect_done). Not a check in cron: cron ticks once a second, too
 * coarse for deadlines of a few hundred milliseconds to 2 s, and a timer
 * costs nothing while no connect is in flight, which is most of the time
 * (a pool's few shared connections, the pinned ones).
 */
static void up_on_connect_timeout(evutil_socket_t fd, short what, void *arg) {
    px_upstream *u = arg;
    char cause[128];
    if (u->state == PX_UP_CLOSED || !up_connecting(u)) return; /* over: Redis's silence is upstream-timeout's */
    snprintf(cause, sizeof cause, "connect timed out after %d ms (upstream-connect-timeout)", u->connect_timeout_ms);
    up_connect_fail(u, cause);
}

/* Arms the deadline of u's connect, if there is one. 0, or -1 (OOM). */
static int up_arm_connect_deadline(px_upstream *u) {
    int ms = u->srv->cfg->upstream_connect_timeout;
    if (ms <= 0) return 0;
    u->connect_ev = evtimer_new(u->srv->base, up_on_connect_timeout, u);
    if (u->connect_ev == NULL) return -1;
    u->connect_timeout_ms = ms;
    struct timeval tv = px_ms_timeval(ms);
    return evtimer_add(u->connect_ev, &tv);
}

/* The connect is over: its deadline goes. Never from the deadline's own
 * callback (which closes u: up_close_with_frame deletes it, reap frees it). */
static void up_connect_done(px_upstream *u) {
    if (u->connect_ev == NULL) return;
    event_free(u->connect_ev);
    u->connect_ev = NULL;
}

static px_upstream *up_connect(px_pool *p) {
    px_server *srv = p->srv;
    char addr[300], cause[256], why[600];
    px_upstream *u = calloc(1, sizeof *u);
    if (u == NULL) {
        snprintf(p->last_error, sizeof p->last_error, "out of memory");
        return NULL;
    }
    u->srv = srv;
    u->pool = p;
    u->shared_index = -1;
    u->id = ++next_upstream_id;
    u->state = PX_UP_CONNECTING;
    resp_reply_init(&u->rp, &srv->reply_limits);
    if (px_io_setup(&u->io, srv, &up_io_ops, u) != 0) {
        snprintf(cause, sizeof cause, "out of memory");
        goto fail;
    }
    px_io_count_output(&u->io);
    if (px_upstream_resolve(srv, cause, sizeof cause) != 0) goto fail;
    memcpy(&u->sa, &srv->up_sa, srv->up_salen);
    u->salen = srv->up_salen;
    if (px_io_connect(&u->io, (struct sockaddr *)&u->sa, u->salen) != 0) {
        snprintf(cause, sizeof cause, "%s", strerror(errno));
        up_connect_failed(srv, &u->sa, u->salen);
        goto fail;
    }
    if (srv->cfg->up.tls && px_io_start_tls(&u->io, px_tls_new_client(srv, srv->cfg->up.host)) != 0) {
        px_tls_error(cause, sizeof cause);
        goto fail;
    }
    if (up_arm_connect_deadline(u) != 0) {
        snprintf(cause, sizeof cause, "out of memory");
        goto fail;
    }

    resp_buf hs;
    resp_buf_init(&hs);
    u->handshake_left = up_write_handshake(u, &hs);
    if (hs.failed) {
        /* (in part, it would leave replies awaited that never come) */
        resp_buf_deinit(&hs);
        snprintf(cause, sizeof cause, "out of memory");
        goto fail;
    }
    if (hs.len > 0) px_io_write(&u->io, hs.data, hs.len);
    resp_buf_deinit(&hs);
    srv->nupstreams++;
    px_verbose("upstream connecting id=%llu addr=%s db=%d proto=%d",
               (unsigned long long)u->id, up_addr(srv, addr, sizeof addr), p->db, p->proto);
    return u;

fail:
    snprintf(why, sizeof why, "upstream %s unavailable: %s", up_addr(srv, addr, sizeof addr), cause);
    pool_backoff(p, why);
    up_count_connect_failed(srv, addr, cause);
    if (u->connect_ev != NULL) event_free(u->connect_ev);
    px_io_close(&u->io);
    px_io_deinit(&u->io);
    resp_reply_deinit(&u->rp);
    free(u);
    return NULL;
}

int px_upstream_send_own(px_server *srv, int kind, uint64_t probe, const char *data, size_t len) {
    const px_upstream_addr *up = &srv->cfg->up;
    px_pool *p = px_pool_ref(srv, up->has_user ? up->user : NULL, up->has_pass ? up->pass : NULL, up->db, 2);
    if (p == NULL) return -1;
    px_upstream *u = px_pool_shared(p, 0);
    px_req *r = u != NULL ? px_req_new(srv, NULL, kind) : NULL;
    if (r != NULL) {
        r->tag.probe = probe;
        px_upstream_send(u, r, data, len);
    }
    px_pool_unref(p);
    return r != NULL ? 0 : -1;
}

px_upstream *px_pool_shared(px_pool *p, uint64_t client_id) {
    int i = (int)(client_id % (uint64_t)p->nshared);
    px_upstream *u = p->shared[i];
    p->used = 1;
    if (u != NULL && u->state != PX_UP_CLOSED) return u;
    if (pool_in_backoff(p)) return NULL;
    u = up_connect(p);
    if (u == NULL) return NULL;
    u->shared_index = i;
    p->shared[i] = u;
    /* only shared connections fill, so only they track for the cache: a
     * client's own connection is left as Redis makes it (its CLIENT
     * TRACKING, GETREDIR, TRACKINGINFO are the client's) */
    if (p->srv->caching != NULL) px_caching_on_connect(p->srv, u);
    return u;
}

static px_upstream *idle_shared_of(px_pool *p) {
    for (int i = 0; i < p->nshared; i++) {
        px_upstream *u = p->shared[i];
        if (u != NULL && u->state == PX_UP_READY && u->npending == 0 && px_io_pending(&u->io) == 0) {
            p->used = 1;
            return u;
        }
    }
    return NULL;
}

px_upstream *px_pool_idle_shared(px_pool *p) {
    px_upstream *u = idle_shared_of(p);
    /* then one of the same user in another database or protocol */
    for (px_pool *o = p->srv->pools; u == NULL && o != NULL; o = o->next)
        if (o != p && !o->refused && str_eq(o->user, p->user) && str_eq(o->pass, p->pass)) u = idle_shared_of(o);
    return u;
}

px_upstream *px_pool_pin(px_pool *p, px_client *owner, int tunnel) {
    px_upstream *u = p->idle;
    p->used = 1;
    if (u != NULL) {
        p->idle = u->next_idle;
        u->next_idle = NULL;
        p->nidle--;
    } else {
        if (pool_in_backoff(p)) return NULL;
        u = up_connect(p);
        if (u == NULL) return NULL;
    }
    u->owner = owner;
    u->tunnel = tunnel;
    return u;
}

void px_upstream_unpin(px_upstream *u, int clean) {
    u->owner = NULL;
    if (u->state == PX_UP_CLOSED) return;
    px_pool *p = u->pool;
    if (clean && !u->tunnel && !u->retired && u->npending == 0 && p != NULL && p->nidle < PX_MAX_IDLE_PINNED) {
        u->next_idle = p->idle;
        u->idle_since_ms = px_now_ms();
        p->idle = u;
        p->nidle++;
        return;
    }
    px_upstream_close(u, "connection released");
}

static void up_link(px_upstream *u, px_req *r) {
    r->up = u;
    r->pending = 1;
    r->replies_left = 1;
    r->sent_us = px_loop_now_us(u->srv);
    r->next_up = NULL;
    if (u->tail != NULL)
        u->tail->next_up = r;
    else
        u->head = r;
    u->tail = r;
    u->npending++;
    /* (not on a client's own connection: there a BLPOP may wait for ever,
     * and its slots and output are bounded per client) */
    r->shared_load = u->owner == NULL;
    u->srv->upstream_requests += r->shared_load;
}

/* r, the head of u's FIFO, is answered (or failed): off the FIFO. */
static void up_unlink_head(px_upstream *u, px_req *r) {
    u->head = r->next_up;
    if (u->head == NULL) u->tail = NULL;
    u->npending--;
    r->next_up = NULL;
    if (r->shared_load) {
        r->shared_load = 0;
        u->srv->upstream_requests--;
        px_server_upstream_output_fell(u->srv);
    }
}

void px_upstream_send(px_upstream *u, px_req *r, const char *data, size_t len) {
    up_link(u, r);
    px_io_write(&u->io, data, len);
}

void px_upstream_send_ref(px_upstream *u, px_req *r, const char *frame, size_t len) {
    up_link(u, r);
    px_io_write_ref(&u->io, frame, len);
}

void px_upstream_extend(px_upstream *u, px_req *r, const char *data, size_t len, int by_ref) {
    r->replies_left++;
    if (by_ref)
        px_io_write_ref(&u->io, data, len);
    else
        px_io_write(&u->io, data, len);
}

/* Writes data now, or holds it behind what is held (up_release_held). */
static void up_write_or_hold(px_upstream *u, const char *data, size_t len, int hold) {
    if (!hold && u->held.len == 0)
        px_io_write(&u->io, data, len);
    else if (resp_buf_append(&u->held, data, len) != 0)
        px_upstream_close(u, "out of memory");
}

void px_upstream_send_raw(px_upstream *u, const char *data, size_t len) {
    up_write_or_hold(u, data, len, 0);
}

void px_upstream_send_alone(px_upstream *u, const char *data, size_t len) {
    up_write_or_hold(u, data, len, u->handshake_left > 0 || u->head != NULL);
}

/* The held bytes go once Redis owes this connection no reply. */
static void up_release_held(px_upstream *u) {
    if (u->held.len == 0 || u->handshake_left > 0 || u->head != NULL) return;
    px_io_write(&u->io, u->held.data, u->held.len);
    resp_buf_deinit(&u->held);
}

static void batch_relayed_end(px_upstream *u, px_req *r, const char *err, size_t errlen);

/* Hands every pending request the error frame err (whole RESP frame); a
 * read (PX_AUX_READ) gets read_err instead when there is one (up_close_as). */
static void up_fail_pending(px_upstream *u, const char *err, size_t errlen, const char *read_err, size_t read_len) {
    px_req *r;
    while ((r = u->head) != NULL) {
        up_unlink_head(u, r);
        r->lost = 1;
        if (r->kind == PX_REQ_BATCH && u->block_relay) {
            /* the replies its commands had already are theirs */
            batch_relayed_end(u, r, err, errlen);
            continue;
        }
        if (r->kind == PX_REQ_DISCARD || r->kind == PX_REQ_TRACKING || r->kind == PX_REQ_CACHING ||
            r->kind == PX_REQ_TXN_CTL || r->kind == PX_REQ_PROBE || r->kind == PX_REQ_TTL ||
            r->kind == PX_REQ_ACL_LIST || r->kind == PX_REQ_SLOT_PROBE || r->kind == PX_REQ_SERVER_ID) {
            if (r->kind == PX_REQ_TTL) px_caching_on_ttl_reply(u->srv, r, err, errlen);
            if (r->kind == PX_REQ_ACL_LIST) px_aclwatch_on_reply(u->srv, r, err, errlen, 1);
            if (r->kind == PX_REQ_SLOT_PROBE) px_slotwatch_on_reply(u->srv, (int)r->tag.probe, err, errlen, 1);
            px_req_release(u->srv, r);
            continue;
        }
        /* a run's other replies first, while the record is still awaited:
         * one of them may close the client (output limit), which frees
         * the slots that are not */
        for (; r->replies_left > 1; r->replies_left--) px_client_on_reply_part(r->client, r, err, errlen);
        r->pending = 0;
        if (read_err != NULL && (r->aux_flags & PX_AUX_READ))
            px_client_on_reply(r->client, r, read_err, read_len);
        else
            px_client_on_reply(r->client, r, err, errlen);
    }
}

/* Off srv->barrier_waiters, if on it. */
static void barrier_unlink(px_upstream *u) {
    if (u->barrier_seq == 0) return;
    px_server *srv = u->srv;
    if (u->prev_barrier != NULL) u->prev_barrier->next_barrier = u->next_barrier;
    else srv->barrier_waiters = u->next_barrier;
    if (u->next_barrier != NULL) u->next_barrier->prev_barrier = u->prev_barrier;
    else srv->barrier_waiters_tail = u->prev_barrier;
    u->barrier_seq = 0;
    u->next_barrier = u->prev_barrier = NULL;
}

static void up_parse_input(px_upstream *u);

/* Closes u; its pending requests get frame, reads read_frame if not NULL. */
static void up_close_with_frame(px_upstream *u, const char *frame, size_t len, const char *read_frame,
                                size_t read_len, const char *why) {
    if (u->state == PX_UP_CLOSED) return;
    if (u->barrier_seq != 0 && px_caching_barrier_passed(u->srv, u->barrier_seq)) {
        /* A held tunnel whose barrier has passed, not yet woken: a move
         * passes every barrier (tracking restarts, the cache is emptied)
         * and then closes the tunnels in the same call. What Redis sent
         * before is safe to relay now, and the client would have had it
         * without a barrier. Relaying may close u itself. */
        barrier_unlink(u);
        up_parse_input(u);
        if (u->state == PX_UP_CLOSED) return;
    }
    px_verbose("upstream closed id=%llu pending=%d reason=\"%s\"", (unsigned long long)u->id,
               u->npending, why);
    u->state = PX_UP_CLOSED;
    if (u->connect_ev != NULL) event_del(u->connect_ev); /* freed at reap */
    barrier_unlink(u);
    px_io_close(&u->io);
    pool_unlink_upstream(u);
    if (u->close_written) {
        for (px_upstream **pp = &u->srv->orphans; *pp != NULL; pp = &(*pp)->next_orphan) {
            if (*pp == u) {
                *pp = u->next_orphan;
                break;
            }
        }
        u->close_written = 0;
    }
    if (u->retired) {
        for (px_upstream **pp = &u->srv->retired; *pp != NULL; pp = &(*pp)->next_retired) {
            if (*pp == u) {
                *pp = u->next_retired;
                break;
            }
        }
    }
    u->srv->nupstreams--;
    /* reads filled from a tracked connection are no longer tracked (C4) */
    if (u->filled && u->srv->caching != NULL) px_caching_on_upstream_lost(u->srv, u);
    /* The owner learns first, so that it does not try to reuse this
     * connection while the errors below are delivered to it. */
    px_client *owner = u->owner;
    u->owner = NULL;
    if (owner != NULL) px_client_on_pinned_lost(owner, u);
    up_fail_pending(u, frame, len, read_frame, read_len);
    u->next_reap = u->srv->reap_upstreams;
    u->srv->reap_upstreams = u;
    px_server_schedule_reap(u->srv);
}

const char *px_unavailable_code(const px_server *srv) {
    return px_follow_enabled(srv) ? "CLUSTERDOWN" : "MASTERDOWN";
}

/* "-<code> sidecache: <why>\r\n" into frame (cut to fit); its length. */
static size_t sidecache_error(char *frame, size_t size, const char *code, const char *why) {
    int n = snprintf(frame, size, "-%s sidecache: %s\r\n", code, why);
    if (n < 0 || (size_t)n >= size) n = (int)size - 1, frame[n - 2] = '\r', frame[n - 1] = '\n';
    return (size_t)n;
}

/* Closes u; its pending requests get "-<code> sidecache: <why>". A read
 * (PX_AUX_READ) gets "-MASTERDOWN sidecache: <why>" (CLUSTERDOWN in front
 * of a cluster), code ERR or not: a client connected to Redis itself sees
 * EOF, and go-redis sends the command again (JuiceFS: a restart or a
 * failover is a stall); it does for these errors, not for an ERR, which
 * JuiceFS takes for EIO (and, for its lookup script, for a reason to stop
 * using the script). A read changes nothing, whether it ran or not; a
 * write keeps the ERR (it may have run). */
static void up_close_as(px_upstream *u, const char *code, const char *why) {
    char frame[512], read_frame[512];
    size_t n = sidecache_error(frame, sizeof frame, code, why);
    size_t rn = sidecache_error(read_frame, sizeof read_frame, px_unavailable_code(u->srv), why);
    up_close_with_frame(u, frame, n, read_frame, rn, why);
}

void px_upstream_close(px_upstream *u, const char *why) {
    up_close_as(u, "ERR", why);
}

void px_upstream_free(px_upstream *u) {
    if (u->connect_ev != NULL) event_free(u->connect_ev);
    px_io_deinit(&u->io);
    resp_reply_deinit(&u->rp);
    resp_buf_deinit(&u->held);
    resp_buf_deinit(&u->block_err);
    resp_buf_deinit(&u->block_replies);
    free(u);
}

/* An error that says where Redis is now (not one a script returned): no
 * longer the master, with Sentinel, ask where it went; a cluster's MOVED for
 * the volume's slot, follow it (follow.h). Both after this callback: a
 * switch closes or retires this very connection. */
static void note_role(px_upstream *u, const px_req *r, const char *data, size_t len) {
    if (r->aux_flags & PX_AUX_SCRIPT) return;
    if (resp_frame_starts_with(data, len, "-READONLY")) {
        /* demoted: where is the master now? (a retired connection's node
         * is where Redis was: the connections left it already) */
        if (px_sentinel_enabled(u->srv)) {
            px_sentinel_ask_soon(u->srv);
        } else if (!u->retired) {
            upstream_recheck_name(u->srv);
            px_upstreams_move_again(u->srv, PX_MOVE_READONLY);
        }
    } else if (resp_frame_starts_with(data, len, "-MOVED ") && !u->retired)
        /* (a retired connection's node is where Redis was: its MOVED
         * says where the slot went from there, maybe before a later move
         * the upstream followed since) */
        px_follow_moved(u->srv, data, len);
}

/* A refusal (an ACL without MULTI, EXEC or DISCARD) of one that sidecache
 * added: the identity gets no more such blocks (txn_denied or
 * discard_denied, until an ACL SETUSER, DELUSER or LOAD through the proxy).
 * mark: px_acl_mark() when the refused command was sent (an ACL change
 * since then may allow it). */
static void record_denial(px_upstream *u, const char *data, size_t len, int discard, uint64_t mark) {
    *(discard ? &u->pool->discard_denied : &u->pool->txn_denied) = mark;
    px_pool_denied(u->pool);
    px_warning("Redis refused a MULTI, EXEC or DISCARD of sidecache id=%llu reply=\"%.*s\"; "
               "sidecache adds no more of them for this user",
               (unsigned long long)u->id, (int)(len > 200 ? 200 : len >= 2 ? len - 2 : len), data);
}

/*
 * Redis refused a MULTI, EXEC or DISCARD that sidecache added around a
 * local transaction, or a write batch's EXEC: what followed a refused
 * MULTI ran alone, and a refused DISCARD leaves the connection inside
 * MULTI. (Redis 7 answers a refused EXEC with EXECABORT, having run
 * nothing and left MULTI; another error to such an EXEC counts as a
 * refusal.) Neither may go on: the connection goes, failing what waits on
 * it as a lost connection would. Nothing is sent again: a write that ran
 * never runs twice. (A write batch's refused MULTI: batch_multi_refused.)
 */
static void up_txn_refused(px_upstream *u, const char *data, size_t len, int discard, uint64_t mark) {
    if (u->state == PX_UP_CLOSED) return;
    /* (Redis's state, as BUSY, is no denial: the next block may pass) */
    if (u->pool != NULL && resp_frame_is_refusal(data, len)) record_denial(u, data, len, discard, mark);
    if (u->pool != NULL && discard) u->pool->discard_epoch = 0; /* ask Redis again */
    px_upstream_close(u, "Redis refused a MULTI, EXEC or DISCARD that sidecache added for this user "
                         "(what was sent with it may have run, as over a lost connection)");
}

/* Redis refused the MULTI of a write batch (an ACL without MULTI): its
 * commands ran alone, or were refused alone, and the connection is out of
 * MULTI. Their replies are kept (batch_reply_kept); at EXEC's error,
 * up_on_frame hands them to the batch as its EXEC's array
 * (batch_relayed_end, px_batch_on_relayed): each request gets its
 * command's own reply, as if it had been sent alone.
 * The user gets no more blocks. */
static void batch_multi_refused(px_upstream *u, const char *data, size_t len, uint64_t mark) {
    if (u->pool != NULL && resp_frame_is_refusal(data, len)) record_denial(u, data, len, 0, mark);
    px_verbose("write batch: MULTI refused, each command answered alone id=%llu reply=\"%.*s\"",
               (unsigned long long)u->id, (int)(len > 80 ? 80 : len >= 2 ? len - 2 : len), data);
    u->block_relay = 1;
    u->block_relay_oom = 0;
    u->block_nreplies = 0;
    resp_buf_reset(&u->block_replies);
    u->srv->batch_relayed++;
}

static void batch_reply_kept(px_upstream *u, const char *data, size_t len) {
    /* (out of memory: the replies kept so far still go to their requests,
     * in order, and the rest get an error: none is kept after a gap) */
    if (u->block_relay_oom || resp_buf_append(&u->block_replies, data, len) != 0) {
        u->block_relay_oom = 1;
        return;
    }
    u->block_nreplies++;
}

/* The batch r whose MULTI was refused ends: at its EXEC's reply, or with
 * the connection (lost: err is the lost connection's error). Its requests
 * get the replies kept, in order; any beyond them (the connection went
 * first, or memory ran out) an error that says the command may have run,
 * never a resend. */
static void batch_relayed_end(px_upstream *u, px_req *r, const char *err, size_t errlen) {
    static const char unknown[] = "-ERR sidecache: the reply to this command of a write batch was lost "
                                  "(it ran alone, or may have)\r\n";
    if (err == NULL) {
        err = unknown;
        errlen = sizeof unknown - 1;
    }
    u->block_relay = 0;
    r->pending = 0;
    px_batch_on_relayed(r->client, r, u->block_replies.data, u->block_replies.len, u->block_nreplies, err, errlen);
    resp_buf_reset(&u->block_replies);
    resp_buf_trim(&u->block_replies, 0);
}

/* The reply to the EXEC of a block sidecache made: an error other than
 * EXECABORT (a queued command refused: nothing ran) or a cluster's refusal
 * of the block's keys (CROSSSLOT, MOVED, ...: nothing ran either, and the
 * connection left MULTI) is a refusal. */
static int block_exec_refused(const char *data, size_t len) {
    return resp_frame_is_error(data, len) && !resp_frame_is_execabort(data, len) &&
           !resp_frame_is_cluster_refusal(data, len);
}

/* The errors of Redis's state that it gives a queued command and refuses
 * EXEC for as well (processCommand: rejectCommand), in the order it checks
 * them: EXEC is refused for the first that holds. A cluster's refusal of a
 * key (the slot moved, or migrates) comes first: Redis checks the keys of
 * every queued command at EXEC, and answers EXEC with it. */
static const char *const exec_state_errors[] = {"-OOM ",       "-MISCONF ",    "-NOREPLICAS ",
                                                "-READONLY ",  "-MASTERDOWN ", "-LOADING ", NULL};

#define EXEC_STATE_CLUSTER 0 /* a cluster's refusal */
#define EXEC_STATE_OOM 1     /* exec_state_errors[0] */

/* Its rank, or -1 for another error. */
static int exec_state_rank(const char *data, size_t len) {
    if (resp_frame_is_cluster_refusal(data, len)) return EXEC_STATE_CLUSTER;
    for (int i = 0; exec_state_errors[i] != NULL; i++)
        if (resp_frame_starts_with(data, len, exec_state_errors[i])) return i + 1;
    return -1;
}

/*
 * The EXEC of a local transaction's block, which Redis aborted for
 * "previous errors": commands the client saw queued met a change of
 * Redis's state between their checks and the block (out of memory, a
 * failed save, a demotion, too few replicas, a stale replica, a restart's
 * loading). Redis, which would have queued them before it, refuses EXEC
 * itself for those, dirty or not, and names the error: "because of:" the
 * one it checks first (block_err). Out of memory refuses EXEC only when a
 * queued command may use memory (denyoom); a dirty transaction without
 * one is aborted for the previous errors, as the block was. (A clean one
 * would run on Redis, which the block cannot: the error is named.) A
 * cluster's refusal is EXEC's answer as it is (MOVED: sidecache's TRYAGAIN,
 * px_follow_tryagain).
 * Returns 1 when that reply went to the client, 0 to relay Redis's own.
 */
static int block_exec_reworded(const px_upstream *u, px_req *r, const char *data, size_t len) {
    static const char previous[] = "-EXECABORT Transaction discarded because of previous errors.\r\n",
                      because[] = "-EXECABORT Transaction discarded because of: ";
    const resp_buf *e = &u->block_err;
    if (len != sizeof previous - 1 || memcmp(data, previous, len) != 0 || e->len < 3) return 0;
    int rank = exec_state_rank(e->data, e->len);
    if (!(r->aux_flags & (PX_AUX_BLOCK_CLEAN | PX_AUX_BLOCK_DENYOOM)) && rank == EXEC_STATE_OOM) return 0;
    if (rank == EXEC_STATE_CLUSTER) {
        px_client_on_reply(r->client, r, e->data, e->len);
        return 1;
    }
    resp_buf out;
    resp_buf_init(&out);
    /* the error's text, without its '-' and CRLF */
    int ok = resp_buf_append(&out, because, sizeof because - 1) == 0 &&
             resp_buf_append(&out, e->data + 1, e->len - 3) == 0 && resp_buf_append(&out, "\r\n", 2) == 0;
    if (ok) px_client_on_reply(r->client, r, out.data, out.len);
    resp_buf_deinit(&out);
    return ok;
}

static int is_noauth(const char *data, size_t len) {
    return resp_frame_starts_with(data, len, "-NOAUTH ");
}

static int is_max_clients(const char *data, size_t len) {
    return resp_frame_starts_with(data, len, "-ERR max number of clients reached");
}

/* Redis wants a password: clients without credentials get its limits. */
static void learn_noauth(px_server *srv) {
    if (srv->open_access == 0) return;
    srv->open_access = 0;
    px_clients_access_learned(srv);
}

/*
 * The answer to an access probe (a PING without credentials). Only NOAUTH
 * says that Redis wants a password. Another error (LOADING while Redis reads
 * its dataset after a restart, BUSY, MASTERDOWN, max clients) says nothing
 * about it: what was known stays, and an unknown is asked again
 * (up_probe_again). Taken for NOAUTH, it would give clients without
 * credentials NOAUTH for PING and Redis's pre-AUTH limits, and turn hits
 * off, until some other connection is made. NOPERM says what a reply does:
 * the connection is the default user's, which needs no password but may
 * not run PING.
 */
static void up_learn_access(px_server *srv, const char *data, size_t len, int is_err) {
    if (!is_err || resp_frame_is_noperm(data, len))
        srv->open_access = 1;
    else if (is_noauth(data, len))
        learn_noauth(srv);
}

/*
 * The end of a tunnel at a client's RESET. Redis's reply to the RESET is no
 * mark: a RESET after CLIENT REPLY SKIP gets none, and a script may return
 * the status RESET. So a command follows it whose reply nothing else
 * gives: HELLO with an option named by a random nonce, fresh for each
 * RESET (MONITOR shows it), which Redis refuses (syntax error) before it
 * does anything, logged in or not. Its reply is the error that names the
 * nonce (also where HELLO is renamed: unknown command).
 */
void px_upstream_send_reset_marker(px_upstream *u) {
    unsigned char r[8];
    uint64_t x = 0;
    if (RAND_bytes(r, sizeof r) == 1)
        memcpy(&x, r, sizeof x);
    else
        x = (uint64_t)px_now_us() * 0x9e3779b97f4a7c15ULL ^ u->id;
    snprintf(u->reset_nonce, sizeof u->reset_nonce, "sidecache-reset-%016llx", (unsigned long long)x);
    resp_buf b;
    resp_buf_init(&b);
    resp_enc_commandv(&b, "HELLO", "2", u->reset_nonce, NULL);
    if (b.failed) {
        /* (no marker: the end of the RESET's replies would never be seen) */
        resp_buf_deinit(&b);
        px_upstream_close(u, "out of memory");
        return;
    }
    px_upstream_send_raw(u, b.data, b.len);
    resp_buf_deinit(&b);
    u->reset_awaited = 1;
}

void px_upstream_send_reset_own(px_upstream *u) {
    static const char reset[] = "*1\r\n$5\r\nRESET\r\n";
    px_upstream_send_raw(u, reset, sizeof reset - 1);
    px_upstream_send_reset_marker(u);
    u->reset_own = 1;
}

/* A +RESET held (up_on_frame) followed by something else than the marker
 * was the client's: it goes on, before that. */
static void tunnel_release_held_reset(px_upstream *u) {
    if (u->reset_held && u->owner != NULL) px_client_on_tunnel_data(u->owner, "+RESET\r\n", 8);
    u->reset_held = 0;
}

static int reset_marker_reply(const px_upstream *u, const char *data, size_t len) {
    size_t n = strlen(u->reset_nonce);
    if (len < n + 3 || data[0] != '-') return 0;
    for (size_t i = 1; i + n <= len; i++)
        if (memcmp(data + i, u->reset_nonce, n) == 0) return 1;
    return 0;
}

/* The answer to INFO server, the handshake's or one asked again. A
 * refusal (an ACL without INFO, a NOAUTH before the access probe's) leaves
 * the server unknown, as Redis will not say; a transient error (BUSY while
 * a script runs past busy-reply-threshold, LOADING) is asked again
 * (up_ask_server_ids), and the connection's reads fill nothing until the
 * server is known. */
static void up_server_id_reply(px_upstream *u, const char *data, size_t len, int is_err) {
    u->server_id_again = is_err && resp_frame_is_transient_error(data, len);
    if (u->server_id_again) return;
    if (!is_err) info_run_id(data, len, u->server_id);
    px_caching_upstream_identified(u->srv, u);
}

/* Each second: INFO server again on the shared connections whose server a
 * transient error left unknown. (Not on a client's own connection, where it
 * could fall inside the client's MULTI: its reads fill nothing until it
 * goes.) */
static void up_ask_server_ids(px_server *srv) {
    static const char info[] = "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n";
    for (px_pool *p = srv->pools; p != NULL; p = p->next)
        for (int i = 0; i < p->nshared; i++) {
            px_upstream *u = p->shared[i];
            if (u == NULL || u->server_id_again != 1 || u->state != PX_UP_READY || u->tunnel) continue;
            px_req *r = px_req_new(srv, NULL, PX_REQ_SERVER_ID);
            if (r == NULL) return;
            u->server_id_again = 2;
            px_upstream_send(u, r, info, sizeof info - 1);
        }
}

/* Redis refused the handshake's SELECT. Every command of the clients in
 * that db gets Redis's error (as a direct client's SELECT would); when it is
 * the db of the upstream URL, where every client starts, that is a
 * misconfiguration (a db past Redis's `databases`, a cluster's db other than
 * 0): said once, since a client's own SELECT is checked before it is taken. */
static void up_select_refused(px_upstream *u, const char *data, size_t len) {
    px_server *srv = u->srv;
    if (u->pool == NULL || u->pool->db != srv->cfg->up.db || srv->upstream_db_refused) return;
    /* (a NOAUTH, a NOPERM: another matter, which clients are told) */
    if (!resp_frame_starts_with(data, len, "-ERR DB index") && !resp_frame_starts_with(data, len, "-ERR invalid DB index") &&
        !resp_frame_starts_with(data, len, "-ERR SELECT is not allowed"))
        return;
    srv->upstream_db_refused = 1;
    px_warning("upstream db %d refused by Redis: \"%.*s\"; every client gets this error until the upstream URL "
               "names a db Redis has", u->pool->db, (int)(len > 200 ? 200 : len - 3), data + 1);
}

/* A reply to the handshake (up_write_handshake). */
static void up_on_handshake_reply(px_upstream *u, char type, const char *data, size_t len) {
    int is_err = type == '-' || type == '!';
    char addr[300];
    /* any answer, an error too: Redis is there (every connection's
     * handshake has at least one reply: AUTH, HELLO or PING) */
    if (!u->srv->upstream_reached || u->srv->connect_failures.count > 0)
        px_server_upstream_reached(u->srv, up_addr(u->srv, addr, sizeof addr));
    if (is_err && is_noauth(data, len)) learn_noauth(u->srv);
    if (u->server_id_left != 0 && u->handshake_left == u->server_id_left) {
        /* INFO server: only a full Redis's error (it closes the
         * connection) is the handshake's failure */
        u->server_id_left = 0;
        if (!is_max_clients(data, len)) {
            up_server_id_reply(u, data, len, is_err);
            is_err = 0;
        }
    }
    if (u->select_left != 0 && u->handshake_left == u->select_left) {
        u->select_left = 0;
        if (is_err) up_select_refused(u, data, len);
    }
    if (u->probe_access && u->handshake_left == 1) {
        /* the last handshake reply: the access probe, a failure only
         * when Redis is full (it closes the connection after that
         * error, which the requests waiting get, as a direct client) */
        up_learn_access(u->srv, data, len, is_err);
        u->probe_access = 0;
        if (!is_max_clients(data, len)) is_err = 0;
    }
    if (is_err) {
        /* Redis refused the identity: every request queued behind gets
         * that same answer, as a direct client would. Not a reason to
         * back off: Redis is there. */
        char why[300];
        snprintf(why, sizeof why, "handshake refused: %.*s", (int)(len > 200 ? 200 : len - 2), data + 1);
        /* the client gets Redis's words, which sidecache's own maxclients
         * also says: the log tells which one was reached */
        if (is_max_clients(data, len))
            px_warning_repeat(&u->srv->full_refusals, PX_LOG_REPEAT_MS,
                              "upstream refused a connection: Redis is at its maxclients addr=%s "
                              "(see Sizing in docs/DEPLOY.md)", up_addr(u->srv, addr, sizeof addr));
        if (u->pool != NULL) u->pool->refused = 1;
        up_close_with_frame(u, data, len, NULL, 0, why);
        return;
    }
    if (--u->handshake_left == 0) {
        u->state = PX_UP_READY;
        if (u->pool) u->pool->backoff_ms = 0, u->pool->backoff_until_ms = 0;
        up_release_held(u);
    }
}

/* What Redis sends a tunnel, once the internal requests sent before it
 * opened are answered: relayed, but for the reply to sidecache's own RESET
 * and the marker after it (tunnel_reset). */
static void up_on_tunnel_frame(px_upstream *u, const char *data, size_t len) {
    int marker = u->reset_awaited && reset_marker_reply(u, data, len);
    if (u->reset_own) {
        /* sidecache's own RESET answers +RESET just before the marker
         * (nothing after CLIENT REPLY SKIP). A +RESET is held until the
         * next frame shows whose it was: one followed by anything but
         * the marker is the client's (a script's status reply, an
         * element of an aggregate: a tunnel relays them one by one),
         * and goes on in its place. */
        if (marker)
            u->reset_held = 0;
        else
            tunnel_release_held_reset(u);
        if (!marker && len == 8 && memcmp(data, "+RESET\r\n", 8) == 0) {
            u->reset_held = 1;
            return;
        }
    }
    if (marker) {
        /* everything up to the client's RESET, its reply included (if
         * Redis sent one: not after CLIENT REPLY SKIP), was relayed */
        u->reset_awaited = 0;
        u->reset_own = 0;
        if (u->owner != NULL) px_client_on_tunnel_reset(u->owner);
        return;
    }
    if (u->owner != NULL) px_client_on_tunnel_data(u->owner, data, len);
}

/* The reply to a command of a block sidecache made (PX_REQ_DISCARD). */
static void up_on_block_command_reply(px_upstream *u, const px_req *r, char type, const char *data, size_t len) {
    if (u->block_relay && (r->aux_flags & PX_AUX_BLOCK_BATCH)) {
        /* a command of a write batch whose MULTI was refused: it ran
         * (or was refused) alone, and this is its own reply */
        if (type == '-') note_role(u, r, data, len);
        batch_reply_kept(u, data, len);
    } else if (type == '-' && (r->aux_flags & PX_AUX_BLOCK_QUEUED)) {
        note_role(u, r, data, len);
        /* the state error Redis checks first, for the block's EXEC */
        int rank = exec_state_rank(data, len);
        if (rank >= 0 && (u->block_err.len == 0 || rank < exec_state_rank(u->block_err.data, u->block_err.len))) {
            resp_buf_reset(&u->block_err);
            if (resp_buf_append(&u->block_err, data, len) != 0) resp_buf_reset(&u->block_err);
        }
    }
}

/* The reply to a MULTI or DISCARD sidecache added (PX_REQ_TXN_CTL); r is
 * released here. */
static void up_on_txn_ctl_reply(px_upstream *u, px_req *r, const char *data, size_t len) {
    int discard = (r->aux_flags & PX_AUX_CTL_DISCARD) != 0;
    int batch = (r->aux_flags & PX_AUX_BLOCK_BATCH) != 0;
    uint64_t epoch = r->tag.acl_epoch, mark = r->learn_mark;
    px_req_release(u->srv, r);
    if (!discard) resp_buf_reset(&u->block_err); /* a block (or a check) begins */
    if (!resp_frame_is_ok(data, len) && batch)
        batch_multi_refused(u, data, len, mark);
    else if (!resp_frame_is_ok(data, len))
        up_txn_refused(u, data, len, discard, mark);
    else if (discard && u->pool != NULL && epoch == u->srv->acl_epoch)
        u->pool->discard_epoch = px_acl_mark(u->srv); /* a client's DISCARD is answered here */
}

/* The reply to a client's request (or a write batch's EXEC). */
static void up_on_client_reply(px_upstream *u, px_req *r, char type, const char *data, size_t len) {
    px_latency_add(&u->srv->lat_upstream, px_loop_now_us(u->srv) - r->sent_us);
    if (type == '-') note_role(u, r, data, len);
    if (r->kind == PX_REQ_BATCH && u->block_relay && type == '-') {
        /* (out of MULTI, as Redis left it: the connection stays) */
        batch_relayed_end(u, r, NULL, 0);
        return;
    }
    /* (an array: the connection was in MULTI before, and that MULTI
     * was refused as nested: the commands were queued, and this is
     * their replies; never seen) */
    u->block_relay = 0;
    int refused = (r->kind == PX_REQ_BATCH || (r->aux_flags & PX_AUX_BLOCK_EXEC)) && block_exec_refused(data, len);
    uint64_t mark = r->learn_mark;
    if (!(r->aux_flags & PX_AUX_BLOCK_EXEC) || !block_exec_reworded(u, r, data, len))
        px_client_on_reply(r->client, r, data, len);
    if (refused) up_txn_refused(u, data, len, 0, mark);
}

/* One whole reply frame from Redis. */
static void up_on_frame(px_upstream *u, const char *data, size_t len) {
    char type = u->rp.type;
    int is_err = type == '-' || type == '!';
    /* Redis answers (not the connect: a host whose Redis hangs takes
     * connections): nothing to ask the cluster (follow.h) */
    if (u->srv->up_unreachable && !u->retired) u->srv->up_unreachable = u->srv->up_silent = 0;
    if (u->handshake_left > 0) {
        up_on_handshake_reply(u, type, data, len);
        return;
    }
    if (u->tunnel && u->head == NULL) {
        /* (internal requests sent before the tunnel opened answer first) */
        up_on_tunnel_frame(u, data, len);
        return;
    }
    if (type == '>') {
        /* A push on a matched connection is not a reply: it belongs to the
         * owner if there is one (RESP3 pub/sub and tracking are tunnelled,
         * so this is rare), and is dropped on shared connections. (One
         * inside a reply's aggregate, as in an EXEC, is part of that
         * reply's frame, as Redis wrote it: resp.h.) */
        if (u->owner != NULL) px_client_on_tunnel_data(u->owner, data, len);
        return;
    }
    px_req *r = u->head;
    if (r == NULL) {
        px_upstream_close(u, "unexpected reply from upstream");
        return;
    }
    if (r->replies_left > 1) {
        /* a run's record stays at the head until its last reply */
        r->replies_left--;
        if (type == '-') note_role(u, r, data, len);
        px_client_on_reply_part(r->client, r, data, len);
        return;
    }
    up_unlink_head(u, r);
    r->pending = 0;
    if (u->tunnel) up_release_held(u);
    switch (r->kind) {
    case PX_REQ_TRACKING: {
        uint64_t epoch = r->tag.tracking_epoch;
        px_req_release(u->srv, r);
        if (!is_err)
            u->tracked_epoch = epoch;
        else
            px_caching_tracking_refused(u->srv, u, epoch, data, len);
        break;
    }
    case PX_REQ_CACHING:
        px_req_release(u->srv, r);
        if (is_err) px_caching_caching_refused(u->srv, u, data, len);
        break;
    case PX_REQ_DISCARD:
        up_on_block_command_reply(u, r, type, data, len);
        px_req_release(u->srv, r);
        break;
    case PX_REQ_TTL:
        px_caching_on_ttl_reply(u->srv, r, data, len);
        px_req_release(u->srv, r);
        break;
    case PX_REQ_ACL_LIST:
        px_aclwatch_on_reply(u->srv, r, data, len, 0);
        px_req_release(u->srv, r);
        break;
    case PX_REQ_SLOT_PROBE: {
        int what = (int)r->tag.probe;
        if (type == '-' && what == PX_SLOTWATCH_PROBE) {
            note_role(u, r, data, len); /* a MOVED is followed */
            px_caching_note_reply(u->srv, data, len);
        }
        px_req_release(u->srv, r);
        px_slotwatch_on_reply(u->srv, what, data, len, 0);
        break;
    }
    case PX_REQ_SERVER_ID:
        px_req_release(u->srv, r);
        up_server_id_reply(u, data, len, is_err);
        break;
    case PX_REQ_PROBE:
        px_req_release(u->srv, r);
        u->probe_access = 0;
        up_learn_access(u->srv, data, len, is_err);
        break;
    case PX_REQ_TXN_CTL:
        up_on_txn_ctl_reply(u, r, data, len);
        break;
    default:
        up_on_client_reply(u, r, type, data, len);
        break;
    }
}

/* A reply with nothing to look at on its way: not an error (C6, READONLY)
 * and not a push. */
static int plain_reply(char type) {
    return type != '-' && type != '!' && type != '>';
}

/* The first reply of run r is at data (flen bytes, parsed): takes as many
 * more plain replies of r as are whole in the buffer, leaving r's last
 * reply to up_on_frame. Returns the bytes taken. */
static size_t run_span(px_upstream *u, px_req *r, const char *data, size_t len, size_t flen) {
    size_t span = flen;
    uint32_t k = 1;
    while (k < r->replies_left - 1 && span < len) {
        /* the reply nearly every queued command gets, taken as it is (the
         * parser is between frames here) */
        if (len - span >= 9 && memcmp(data + span, "+QUEUED\r\n", 9) == 0) {
            span += 9;
            k++;
            continue;
        }
        /* a frame cut short stays in the parser's state, resumed from its
         * start once the span is drained; an error is met again there */
        if (resp_reply_parse(&u->rp, data + span, len - span) != RESP_OK) break;
        if (!plain_reply(u->rp.type)) {
            /* whole but not plain: the next pass parses it again */
            resp_reply_reset(&u->rp);
            break;
        }
        span += u->rp.frame_len;
        k++;
    }
    r->replies_left -= k;
    return span;
}

/*
 * C1 in a tunnel that wrote a key the cache may hold (px_caching_barrier):
 * what was just read may be the reply to that write, which the client
 * takes as the write done. A read that Redis ran before the write may be
 * on its way back to another client, and would fill the old value if the
 * write's invalidation is not in by then. So the input waits, unread from
 * here on, for a PING sent on the invalidation connection now: Redis runs
 * it after the write, and answers it after the write's invalidations.
 * Returns 1 when the input waits.
 */
static int tunnel_waits(px_upstream *u) {
    if (u->barrier_seq != 0) return 1;
    uint64_t seq = px_caching_barrier(u->srv);
    if (seq == 0) return 0;
    u->barrier_seq = seq;
    px_io_pause_read(&u->io);
    /* at the tail: the wake takes them from the head, where the oldest
     * barriers are, each passed one first */
    u->next_barrier = NULL;
    u->prev_barrier = u->srv->barrier_waiters_tail;
    if (u->prev_barrier != NULL)
        u->prev_barrier->next_barrier = u;
    else
        u->srv->barrier_waiters = u;
    u->srv->barrier_waiters_tail = u;
    return 1;
}

static void up_on_event(void *arg, int what, int err);

static void up_on_read(void *arg) {
    px_upstream *u = arg;
    u->reads++;
    up_connect_done(u); /* a reply came: TLS, if any, is through */
    if (u->tunnel_wrote && tunnel_waits(u)) return;
    up_parse_input(u);
}

void px_upstream_barrier_wake(px_server *srv) {
    /* from the head again after each: relaying may close other tunnels */
    for (;;) {
        px_upstream *u = srv->barrier_waiters;
        if (u == NULL || !px_caching_barrier_passed(srv, u->barrier_seq)) return;
        barrier_unlink(u);
        up_parse_input(u);
        if (u->state != PX_UP_CLOSED && u->barrier_end != 0)
            up_on_event(u, u->barrier_end, u->barrier_err);
        else if (u->state != PX_UP_CLOSED)
            px_io_resume_read(&u->io);
    }
}

/* A tunnel relays an aggregate's header line as soon as it is here, and
 * then its elements one by one: Redis may never send all the elements a
 * header counts (CLIENT REPLY OFF or SKIP inside MULTI: EXEC's header goes,
 * the replies it counts do not), and the client must get what Redis sent.
 * Returns the header's length, or 0 (not a tunnel's aggregate, or its
 * header line not all here). */
static size_t tunnel_header(const px_upstream *u, const char *data, size_t len) {
    if (!u->tunnel || u->head != NULL || u->handshake_left != 0 || len == 0 ||
        strchr("*>%~|", data[0]) == NULL)
        return 0;
    const char *nl = memchr(data, '\n', len);
    return nl != NULL && nl > data && nl[-1] == '\r' ? (size_t)(nl - data) + 1 : 0;
}

static void up_parse_input(px_upstream *u) {
    while (u->state != PX_UP_CLOSED) {
        size_t len;
        const char *data = px_io_input(&u->io, &len);
        size_t hlen = tunnel_header(u, data, len);
        if (hlen > 0) {
            resp_reply_reset(&u->rp); /* what it framed of the aggregate, forgotten */
            tunnel_release_held_reset(u);
            if (u->owner != NULL) px_client_on_tunnel_data(u->owner, data, hlen);
            px_io_consume(&u->io, hlen);
            continue;
        }
        if (len == 0 || (u->rp.need != 0 && len < u->rp.need)) break;
        int rc = resp_reply_parse(&u->rp, data, len);
        if (rc == RESP_AGAIN) break;
        if (rc == RESP_ERR) {
            char why[300];
            snprintf(why, sizeof why, "malformed reply from upstream (%s)", u->rp.err);
            px_warning("upstream protocol error id=%llu err=\"%s\"", (unsigned long long)u->id, u->rp.err);
            px_upstream_close(u, why);
            return;
        }
        size_t flen = u->rp.frame_len;
        px_req *r = u->head;
        if (r != NULL && r->replies_left > 2 && u->handshake_left == 0 && !u->tunnel && plain_reply(u->rp.type)) {
            /* a run's replies that are here go to its client in one piece */
            flen = run_span(u, r, data, len, flen);
            px_client_on_reply_part(r->client, r, data, flen);
        } else {
            up_on_frame(u, data, flen);
        }
        px_io_consume(&u->io, flen);
        if (u->retired && u->npending == 0 && u->owner == NULL && u->state != PX_UP_CLOSED)
            px_upstream_close(u, "retired: its replies are in");
    }
}

static void up_on_event(void *arg, int what, int err) {
    px_upstream *u = arg;
    px_server *srv = u->srv;
    char why[600];
    if (what == PX_IO_CONNECTED) {
        int one = 1;
        if (!srv->cfg->up.is_unix && srv->cfg->tcp_nodelay)
            setsockopt(u->io.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        /* Blocked and tunnelled connections are exempt from upstream-timeout:
         * only keepalive notices a Redis host that vanished under them. */
        if (!srv->cfg->up.is_unix) px_socket_keepalive(u->io.fd, srv->cfg->tcp_keepalive);
        if (u->state == PX_UP_CONNECTING) {
            u->state = u->handshake_left ? PX_UP_HANDSHAKE : PX_UP_READY;
            if (u->state == PX_UP_READY) {
                    if (u->pool) u->pool->backoff_ms = 0, u->pool->backoff_until_ms = 0;
            }
        }
        if (!u->retired) px_upstream_reached(srv, &u->sa, u->salen);
        /* with TLS, the deadline stays until its handshake is through */
        if (!up_connecting(u)) up_connect_done(u);
        px_verbose("upstream connected id=%llu", (unsigned long long)u->id);
        return;
    }
    const char *cause = what == PX_IO_EOF ? "connection closed by upstream" : strerror(err);
    if (u->barrier_seq != 0) {
        /* What Redis sent before it left (TLS: the last bytes and the end
         * in one read; a write the client sent on, after Redis closed)
         * still waits for its barrier, and the end with it: the barrier
         * passes at the latest when tracking is lost (which empties the
         * cache). What the client sends meanwhile goes nowhere. */
        if (u->barrier_end == 0) u->barrier_end = what, u->barrier_err = err;
        px_io_discard_output(&u->io);
        return;
    }
    if (up_connecting(u)) {
        up_connect_fail(u, cause);
        return;
    }
    snprintf(why, sizeof why, "upstream connection lost: %s", cause);
    px_notice("upstream lost id=%llu pending=%d err=\"%s\"", (unsigned long long)u->id, u->npending, cause);
    px_upstream_close(u, why);
}

void px_upstream_close_written(px_upstream *u, const char *why) {
    if (u->state != PX_UP_CLOSED && !u->close_written &&
        (u->state == PX_UP_CONNECTING || px_io_pending(&u->io) > 0)) {
        u->close_written = 1;
        u->next_orphan = u->srv->orphans;
        u->srv->orphans = u;
        return;
    }
    if (!u->close_written) px_upstream_close(u, why);
}

/* Everything written: a connection whose client left closes now, and the
 * client a connection is pinned to may have paused its input for it
 * (client.c). */
static void up_on_drain(void *arg) {
    px_upstream *u = arg;
    if (u->close_written) {
        px_upstream_close(u, "client closed (what it sent is written)");
        return;
    }
    if (u->owner != NULL) px_client_upstream_drained(u->owner);
}

static const px_io_ops up_io_ops = {up_on_read, up_on_drain, up_on_event};
