/*
 * proxy/caching.c — see caching.h.
 *
 * A request carries what its reply needs in px_req.aux, as its aux_flags
 * say (upstream.h):
 *   FILL: the entry's identity (partition, db, kind, key, field; the token
 *     is in tag.fill_token);
 *   INVAL: the keys to invalidate again, as (u32 length, bytes) records; with
 *     PREPURGED they were purged when sent (mark.purge_mark). A
 *     transaction's queued keys move to its EXEC or DISCARD so
 *     (px_caching_txn_close);
 *   MGET: the merge plan (mget_hdr, then a record per key, read by plan_next);
 *   LOOKUP: the dentry identity of a lookup script (lookup_id, the key, the
 *     name);
 * and a PX_REQ_TTL parks the value whose fill waits for its PTTL
 * (ttl_fill). Flags without aux: FLUSH (the write's keys cannot be known),
 * INFO (append our section), SCRIPT_LOAD and SCRIPT_FLUSH (what Redis holds
 * of the lookup scripts).
 */
#include "proxy/caching.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "cache/cache.h"
#include "cache/rules.h"
#include "invalidation/tracking.h"
#include "protocol/cluster.h"
#include "protocol/cmdtable.h"
#include "protocol/commands.h"
#include "proxy/client.h"
#include "proxy/io.h"
#include "proxy/log.h"
#include "proxy/lookup.h"
#include "proxy/stats.h"
#include "proxy/tls.h"
#include "proxy/upstream.h"

/* JuiceFS's lookup scripts (1.0-1.4, and 0.x): they read only, and the
 * cache answers them (proxy/lookup.h). */
static const char *const juicefs_lookup_scripts[] = {
    "8526c64984678fc27f67f44755c8ba7dcdf7ea60",
    "72af033cd6d0773efd6a53eaf9490b4a138f55af",
};
#define N_JUICEFS_LOOKUP_SCRIPTS (sizeof juicefs_lookup_scripts / sizeof *juicefs_lookup_scripts)
_Static_assert(PX_MAX_LOOKUP_SCRIPTS + N_JUICEFS_LOOKUP_SCRIPTS <= PX_LOOKUP_MAX_SCRIPTS,
               "every cache-lookup-script fits beside the profile's");

/* JuiceFS's resolve scripts (1.x, 0.x): the gateway and the SDKs send one
 * for every path they open. They read only (HGET d..., GET i...), so they
 * must not empty the cache as an unknown script does; Redis answers them. */
static const char *const juicefs_readonly_scripts[] = {
    "300202e21baa6d1b65acb3a4d96ff95fcfb2b23a",
    "f081486b7addbf26f62d55b98784a285dd12f7fb",
};

struct px_caching {
    cache *cache;
    cache_rules rules;
    cmdtable *cmdt;          /* NULL until COMMAND was read */
    inv_conn *inv;
    struct sockaddr_storage inv_sa; /* where it went (the upstream's) */
    unsigned inv_salen;
    int active;              /* tracking confirmed */
    int was_active;          /* ... once before */
    int mode;                /* enum px_tracking_mode */
    uint64_t epoch;          /* changes whenever tracking starts or stops: a
                                data connection is tracked only for the epoch
                                it turned tracking on in */
    char *users[64];         /* partition id - 2 -> user name (ACL partition) */
    int nusers;
    /* per partition and read (enum px_read - 1): px_acl_mark() when Redis
     * last answered that read of that user with a reply, not an error. A
     * hit needs it: the cache must not answer a command the user's ACL
     * refuses (C8), though its entries came from the same user's reads of
     * another kind (a GET of what an MGET filled, a lookup of what HGET and
     * GET filled) */
    uint64_t read_ok[66][4];
    /* flushes by cause */
    uint64_t flush_tracking, flush_null, flush_write, flush_failover, flush_acl, flush_caching;
    uint64_t tracking_refused; /* CLIENT TRACKING refusals (default/optin) */
    /* the volume's cluster slot migrating (slotwatch.h): no hit, no fill */
    int slot_unstable;
    int moving;               /* px_caching_upstream_moved restarts tracking */
    uint64_t slot_events;     /* ASKs of it seen */
    int64_t slot_event_ms;    /* ... the last one's time */
    uint64_t flush_slot;
    uint64_t flush_busy;      /* a BUSY emptied the cache (redis_busy) */
    int64_t busy_ms;          /* ... the last time */
    /* px_caching_try_hit of a request that it counted once already (it
     * waited to go to Redis, and comes again): nothing is counted */
    int counted_already;
    uint64_t purges_skipped; /* write replies whose purge was skipped (purge_again) */
    uint64_t bypassed;       /* cacheable reads sent to Redis because the client
                                had requests in flight (neither hit nor miss) */
    uint64_t held_ping;      /* cacheable reads held until the keep-alive PING
                                was answered (px_clients_ping_wake) */
    uint64_t past_hold;      /* ... sent to Redis, the PING unanswered past
                                tracking-ping-hold-ms */
    uint64_t held_unread;    /* cacheable reads held until the invalidation
                                connection's unread bytes were handled */
    uint64_t sent_unread;    /* ... sent to Redis, still unread after a turn */
    /* Writes of keys unknown (FLUSHDB, FLUSHALL ...) sent and not yet
     * released, and the barrier sent when the last one was: until it has
     * passed, cacheable reads go to Redis (flush_unsettled) */
    int flushes_unreleased;
    uint64_t flush_barrier;
    uint64_t bypassed_flush;
    uint64_t unread_none_at; /* srv->io_reads when inv_unread last found
                                nothing: what was read before is covered */
    struct event *ping_wake_ev; /* wakes them, once the invalidation
                                   connection's input is handled */
    struct event *unread_wake_ev; /* wakes the reads held a turn for its
                                     unread bytes (a timer of 0: after the
                                     next poll, which runs that connection) */
    px_lookup *lookup;       /* lookup scripts answered here */
    uint64_t script_hits, script_misses;
    uint64_t mget_hits, mget_partial, mget_keys_cached, mget_resent;
    resp_buf plan;           /* an MGET's plan, from px_caching_try_hit to
                                px_caching_on_send of the same request */
    resp_buf plan_req;       /* ... and the MGET of its keys not cached */
    resp_buf ttl_cmd;        /* a PTTL being written (ttl_ask) */
    uint64_t ttl_asked;
    struct event *reclaim_ev; /* frees what large purges left (reclaim_later) */
    int reclaim_slices;       /* ... slices since its last pause */
};

/* A counter of the reads px_caching_try_hit decides (not moved when it
 * decides a read again: counted_already) */
#define COUNT(pc, counter, n) ((pc)->counted_already ? (void)0 : (void)((pc)->counter += (n)))

/* A large group's purge, or a large cache's flush, leaves its memory to
 * free (cache.h): slices of RECLAIM_SLICE entries (~50-100 us each),
 * RECLAIM_SLICES_PER_MS of them, then a millisecond's pause, and so on.
 * Each slice is an event of the loop's idle priority (server.h) that the
 * loop takes up only after it has polled for I/O and found no client,
 * reply or invalidation ready: what arrives during a slice waits that
 * slice at most. That frees as fast as slices of 2,048 a millisecond did
 * at the clients' priority, which held every client up for ~0.3-0.6 ms at
 * a time (a write that purges a directory of 100,000 cached names: 49
 * times). Under a load that never leaves the loop idle, eviction frees
 * the purged entries first (cache.h): the memory bound holds either way. */
#define RECLAIM_SLICE 512
#define RECLAIM_SLICES_PER_MS 4

static void reclaim_later(struct px_caching *pc) {
    if (cache_get_stats(pc->cache)->reclaiming > 0 && !evtimer_pending(pc->reclaim_ev, NULL)) {
        /* a timer of 0 expires in the loop's next pass, after its poll */
        struct timeval wait = {0, pc->reclaim_slices < RECLAIM_SLICES_PER_MS ? 0 : 1000};
        if (wait.tv_usec != 0) pc->reclaim_slices = 0;
        evtimer_add(pc->reclaim_ev, &wait);
    }
}

static void reclaim_cb(evutil_socket_t fd, short what, void *arg) {
    struct px_caching *pc = arg;
    cache_reclaim(pc->cache, RECLAIM_SLICE);
    pc->reclaim_slices++;
    reclaim_later(pc);
}

/* Every flush: the cache, and what is known of Redis's scripts (a flush
 * may mean a restarted or another Redis, which holds none of them). A
 * large cache's memory is freed in slices (200,000 entries took ~20 ms
 * at once). */
static void flush_cache(struct px_caching *pc) {
    cache_flush(pc->cache);
    reclaim_later(pc);
    px_lookup_forget(pc->lookup);
}

/* ------------------------------------------------------------------------ */
/* tracking callbacks */

static void on_invalidate(void *arg, const inv_key *keys, size_t n) {
    px_server *srv = arg;
    cache_keyref refs[64];
    while (n > 0) {
        size_t m = n < 64 ? n : 64;
        for (size_t i = 0; i < m; i++) refs[i] = (cache_keyref){keys[i].key, keys[i].klen};
        cache_invalidate_keys(srv->caching->cache, refs, m);
        keys += m;
        n -= m;
    }
    reclaim_later(srv->caching);
}

static void on_flush(void *arg, int null_message, const char *why) {
    px_server *srv = arg;
    struct px_caching *pc = srv->caching;
    flush_cache(pc);
    if (pc->moving) return;
    if (null_message)
        pc->flush_null++;
    else
        pc->flush_tracking++;
    px_notice("cache flushed reason=\"%s\"", why);
}

static void send_tracking_on(px_server *srv, px_upstream *u) {
    struct px_caching *pc = srv->caching;
    char id[32];
    long long rid = inv_redirect_id(pc->inv);
    /* Not before the handshake said which server u is on: the REDIRECT
     * names the invalidation connection by its id on its server, and on
     * another that id may be an unrelated client's, which would get the
     * invalidations (px_caching_upstream_identified sends it then). */
    if (rid <= 0 || u->tunnel || u->server_id_left != 0 || u->server_id_again || u->other_server) return;
    snprintf(id, sizeof id, "%lld", rid);
    resp_buf b;
    resp_buf_init(&b);
    if (pc->mode == PX_TRACKING_OPTIN)
        resp_enc_commandv(&b, "CLIENT", "TRACKING", "ON", "REDIRECT", id, "OPTIN", NULL);
    else
        resp_enc_commandv(&b, "CLIENT", "TRACKING", "ON", "REDIRECT", id, NULL);
    /* (not sent: the connection's reads fill nothing, tracked_epoch) */
    px_req *r = b.failed ? NULL : px_req_new(srv, NULL, PX_REQ_TRACKING);
    if (r != NULL) {
        r->tag.tracking_epoch = pc->epoch;
        px_upstream_send(u, r, b.data, b.len);
    }
    resp_buf_deinit(&b);
}

/* The reads held for the keep-alive's answer go on (px_clients_ping_wake)
 * from an event of the clients' priority: after every byte the
 * invalidation connection has to read now, whose priority is higher, so
 * the invalidations Redis wrote behind the answer are handled first. The
 * same event is their timer for tracking-ping-hold-ms. */
static void wake_ping_waiters(px_server *srv) {
    if (srv->ping_waiters.head != NULL || srv->barrier_waiters != NULL)
        event_active(srv->caching->ping_wake_ev, EV_TIMEOUT, 0);
}

static void ping_wake_cb(evutil_socket_t fd, short what, void *arg) {
    px_clients_ping_wake(arg);
    px_upstream_barrier_wake(arg);
}

uint64_t px_caching_barrier(px_server *srv) {
    struct px_caching *pc = srv->caching;
    /* (none while tracking is not on: inv_barrier) */
    return pc == NULL ? 0 : inv_barrier(pc->inv);
}

int px_caching_barrier_passed(const px_server *srv, uint64_t seq) {
    const struct px_caching *pc = srv->caching;
    return pc == NULL || inv_barrier_passed(pc->inv, seq);
}

/*
 * A flush runs in Redis's pass of the loop with output for the invalidation
 * connection (its null invalidation) made at once, not at the pass's end
 * as BCAST invalidations are: that puts the connection early in Redis's
 * list of clients to write, which it writes newest first. A direct write
 * run later in the same pass is then answered before its own invalidation
 * is sent, whatever its key or database, and a read that its reply set off
 * could meet the old value here. Between a flush's send (the cache
 * emptied) and a PING sent after it was released, an entry may have been
 * filled again: reads go to Redis meanwhile (a flush from elsewhere cannot
 * be seen in time: CONSISTENCY.md, known gaps).
 */
static int flush_unsettled(struct px_caching *pc) {
    return pc->flushes_unreleased > 0 || !inv_barrier_passed(pc->inv, pc->flush_barrier);
}

static void flush_hold(struct px_caching *pc, const px_client *c, px_req *r) {
    /* (not behind a blocking command, which may hold it for ever: then it
     * is as a flush from elsewhere) */
    if (c->blocking) return;
    r->flush_hold = 1;
    pc->flushes_unreleased++;
}

void px_caching_flush_released(px_server *srv) {
    struct px_caching *pc = srv->caching;
    if (pc == NULL || pc->flushes_unreleased == 0) return;
    if (--pc->flushes_unreleased == 0) pc->flush_barrier = inv_barrier(pc->inv);
}

static void on_ping_answered(void *arg) {
    wake_ping_waiters(arg);
}

/* For a log line: how much of an error frame's text ("-" ... "\r\n"),
 * which starts at its second byte, to print, at most max bytes. */
static int err_text_len(size_t len, size_t max) {
    size_t n = len >= 3 ? len - 3 : 0;
    return (int)(n > max ? max : n);
}

/* Redis runs a script (or a module command) past busy-reply-threshold: it
 * answers clients meanwhile, the writer of a write it ran just before the
 * script in the same pass too, but writes that write's BCAST invalidation
 * only when the script ends. So a writer may hold a reply that a cached
 * value is older than: the cache empties. Until the script ends Redis
 * answers reads BUSY, and nothing fills. A keep-alive PING is outstanding
 * when Redis begins to answer, and is answered in that pass, if
 * busy-reply-threshold exceeds tracking-keepalive-ms (docs/DEPLOY.md). */
static void redis_busy(px_server *srv, const char *err, size_t len) {
    struct px_caching *pc = srv->caching;
    if (pc == NULL) return;
    /* (counted when it drops entries: while a script runs Redis answers
     * every keep-alive and read BUSY, and a read's BUSY ends its fill) */
    if (cache_get_stats(pc->cache)->entries > 0) pc->flush_busy++;
    flush_cache(pc);
    int64_t now = px_now_ms();
    /* (once a script: it is answered BUSY at every keep-alive and read) */
    if (pc->busy_ms == 0 || now - pc->busy_ms > 10000) {
        px_notice("cache flushed reason=\"Redis busy: it answers clients while a script runs, and invalidates "
                  "after it\" reply=\"%.*s\"",
                  err_text_len(len, 120), err + 1);
    }
    pc->busy_ms = now;
}

static void on_busy(void *arg, const char *err, size_t len) {
    redis_busy(arg, err, len);
}

static void on_unanswered(void *arg) {
    px_upstream_unanswered(arg, "the invalidation connection got no answer in time");
}

static void on_active(void *arg, int active) {
    px_server *srv = arg;
    struct px_caching *pc = srv->caching;
    pc->active = active;
    pc->epoch++;
    if (active) px_upstream_reached(srv, &pc->inv_sa, pc->inv_salen);
    /* Tracking on: the data connections were made before the invalidation
     * connection, maybe to another server behind the same address (a
     * virtual IP, a Service, that now leads to a new master). What they
     * read there would fill the cache with values this connection hears no
     * change of: those whose handshake named another server fill nothing
     * and retire, and so do, back after a loss, those whose server is not
     * known; the next requests go on connections made after it. (Nothing
     * they had in flight fills: the loss emptied the cache.) */
    if (active)
        px_upstreams_tracking_on(srv, inv_server_id(pc->inv), pc->was_active,
                                 "tracking on: a data connection not known to be on its server made again");
    if (active) pc->was_active = 1;
    if (active && inv_server_cluster(pc->inv)) px_caching_untagged_cluster(srv, "INFO server says redis_mode:cluster");
    /* (held reads then go to Redis) */
    if (!active) wake_ping_waiters(srv);
    /* default/optin: every open data connection redirects to the new
     * invalidation connection from now on; until its +OK it fills nothing */
    if (active && pc->mode != PX_TRACKING_BCAST) px_pools_foreach_shared(srv, send_tracking_on);
}

void px_caching_upstream_moved(px_server *srv) {
    struct px_caching *pc = srv->caching;
    if (pc == NULL) return;
    flush_cache(pc);
    pc->flush_failover++;
    /* (its restart leaves ACTIVE, which flushes again: counted here) */
    pc->moving = 1;
    inv_restart(pc->inv, "upstream master moved (failover)");
    pc->moving = 0;
}

int px_caching_wants_server_id(const px_server *srv) {
    /* (with a tracking-upstream too: it is another path to the same Redis,
     * which then gives the same run_id; when a failover or a restart
     * behind one path's address makes them lead to two servers, the
     * invalidations heard are not of the server read) */
    return srv->caching != NULL;
}

void px_caching_upstream_identified(px_server *srv, px_upstream *u) {
    struct px_caching *pc = srv->caching;
    if (pc == NULL) return;
    const char *inv_id = inv_server_id(pc->inv);
    if (inv_id == NULL || u->server_id[0] == '\0' || strcmp(inv_id, u->server_id) == 0) {
        /* default/optin: a shared connection's tracking waited for this
         * (send_tracking_on); tracking not on yet, on_active sends it */
        if (pc->mode != PX_TRACKING_BCAST && u->owner == NULL && u->shared_index >= 0 && !u->retired)
            send_tracking_on(srv, u);
        return;
    }
    /* The address now leads to another server than the one the
     * invalidation connection reached (a virtual IP or a Service that
     * follows the master, a restart elsewhere): what this connection reads
     * there, nothing here would hear change. It fills nothing, what its
     * requests sent meanwhile began to fill is dropped, and every
     * connection moves to the address again, the invalidation one too. */
    u->other_server = 1;
    /* (a retired one goes, with the move that retired it: the cache was
     * emptied then, and it takes no new request) */
    if (u->retired) return;
    /* What began to fill on u completes nothing (answered_off_server),
     * and what the others fill the invalidation connection's server tells
     * of: the cache is emptied at the first such connection, not again at
     * each one made while the move waits for its time (behind a front that
     * spreads connections over two servers, every other one would empty
     * it). */
    if (px_upstreams_moving_again(srv, PX_MOVE_OTHER_SERVER)) {
        px_notice("upstream connection %llu reached another Redis (run_id %.12s...) than the invalidation "
                  "connection (%.12s...) too: reads on it fill nothing, the move waits for its time",
                  (unsigned long long)u->id, u->server_id, inv_id);
        return;
    }
    flush_cache(pc);
    pc->flush_failover++;
    px_notice("upstream connection %llu reached another Redis (run_id %.12s...) than the invalidation connection "
              "(%.12s...): cache emptied, reads on it fill nothing%s",
              (unsigned long long)u->id, u->server_id, inv_id,
              srv->cfg->tracking_upstream[0] != '\0'
                  ? " (tracking-upstream must lead to the same Redis as upstream: while they lead to two, "
                    "nothing is cached)"
                  : "");
    px_upstreams_move_again(srv, PX_MOVE_OTHER_SERVER);
}

void px_caching_acl_changed(px_server *srv, int first) {
    struct px_caching *pc = srv->caching;
    if (pc == NULL) return;
    /* what the cache holds of a user, and what was learned of the reads
     * Redis lets it make, may be more than its ACL now allows (C8) */
    flush_cache(pc);
    srv->acl_epoch++;
    if (first) return; /* the first list read: the cache is a handshake old */
    pc->flush_acl++;
    px_notice("cache flushed reason=\"ACL changed on Redis\"");
}

void px_caching_on_connect(px_server *srv, px_upstream *u) {
    struct px_caching *pc = srv->caching;
    if (pc != NULL && pc->mode != PX_TRACKING_BCAST && pc->active) send_tracking_on(srv, u);
}

int px_caching_is_lookup_call(const px_server *srv, int argc, const resp_arg *argv) {
    return srv->caching != NULL && px_lookup_match(srv->caching->lookup, argc, argv) >= 0;
}

uint64_t px_caching_tracked_epoch(const px_server *srv) {
    const struct px_caching *pc = srv->caching;
    return pc == NULL || pc->mode == PX_TRACKING_BCAST || !pc->active ? 0 : pc->epoch;
}

void px_caching_on_upstream_lost(px_server *srv, px_upstream *u) {
    struct px_caching *pc = srv->caching;
    if (pc == NULL || pc->mode == PX_TRACKING_BCAST || u->tracked_epoch != pc->epoch) return;
    /* Redis forgets what a closed connection read: invalidations for the
     * entries it filled would never come */
    flush_cache(pc);
    pc->flush_tracking++;
    px_notice("cache flushed reason=\"tracked upstream connection lost\" id=%llu", (unsigned long long)u->id);
}

void px_caching_before_read(px_client *c, px_upstream *u, int cacheable) {
    struct px_caching *pc = c->srv->caching;
    if (!cacheable || pc == NULL || pc->mode != PX_TRACKING_OPTIN || u->tracked_epoch != pc->epoch ||
        u->caching_refused == px_acl_mark(c->srv))
        return;
    static const char caching_yes[] = "*3\r\n$6\r\nCLIENT\r\n$7\r\nCACHING\r\n$3\r\nYES\r\n";
    px_req *r = px_req_new(c->srv, NULL, PX_REQ_CACHING);
    if (r != NULL)
        px_upstream_send(u, r, caching_yes, sizeof caching_yes - 1);
    else
        u->caching_refused = px_acl_mark(c->srv); /* the read goes untracked: no fill */
}

void px_caching_tracking_refused(px_server *srv, px_upstream *u, uint64_t epoch, const char *err, size_t len) {
    struct px_caching *pc = srv->caching;
    /* (sent before tracking restarted, naming an invalidation connection
     * that may be gone: the restart sent it again) */
    if (pc == NULL || epoch != pc->epoch || !pc->active) return;
    pc->tracking_refused++;
    /* (nothing to flush: the connection fills nothing under this epoch) */
    if (resp_frame_is_transient_error(err, len)) {
        u->tracking_again = 1;
        return;
    }
    if (u->tracking_refused == px_acl_mark(srv)) return;
    u->tracking_refused = px_acl_mark(srv);
    px_warning("CLIENT TRACKING refused by Redis (%.*s): reads on upstream connection %llu are not cached "
               "(tracking-mode %s: its user must be allowed CLIENT TRACKING; asked again when the ACL changes)",
               err_text_len(len, 200), err + 1, (unsigned long long)u->id,
               pc->mode == PX_TRACKING_OPTIN ? "optin" : "default");
}

/* At a cron: a connection refused tracking for a while (BUSY, LOADING), or
 * before the ACL last changed, asks again. */
static void track_again(px_server *srv, px_upstream *u) {
    int acl_moved = u->tracking_refused != 0 && u->tracking_refused != px_acl_mark(srv);
    if (!u->tracking_again && !acl_moved) return;
    u->tracking_again = 0;
    if (acl_moved) u->tracking_refused = 0;
    if (u->owner == NULL && !u->retired && u->tracked_epoch != srv->caching->epoch) send_tracking_on(srv, u);
}

void px_caching_caching_refused(px_server *srv, px_upstream *u, const char *err, size_t len) {
    struct px_caching *pc = srv->caching;
    if (pc == NULL) return;
    /* The read behind it began a fill (of a GET, an MGET's keys, a lookup)
     * that no invalidation would ever end: the flush refuses it, whatever
     * its kind. */
    flush_cache(pc);
    pc->flush_caching++;
    /* Redis busy with a script, or loading, says nothing of what it allows:
     * the next read asks again. A refusal (an ACL) holds until the ACL
     * changes: the connection fills nothing, and is warned of once. */
    if (resp_frame_is_transient_error(err, len)) return;
    int first = u->caching_refused != px_acl_mark(srv);
    u->caching_refused = px_acl_mark(srv);
    if (first) {
        px_warning("CLIENT CACHING YES refused by Redis (%.*s): reads on upstream connection %llu are not cached",
                   err_text_len(len, 200), err + 1, (unsigned long long)u->id);
    }
}

/* Is u found to be on another server than the invalidation connection's,
 * or is its server not to be told (INFO met a script's BUSY)? */
static int conn_off_server(const px_upstream *u) {
    return u != NULL && (u->other_server || u->server_id_again);
}

/* Was r answered on such a connection? A read sent before that
 * connection's INFO was answered began a fill (its server not known yet);
 * its reply, which comes after INFO's, completes none. */
static int answered_off_server(const px_req *r) {
    return conn_off_server(r->up);
}

/* May a read sent on u fill the cache? */
static int conn_tracked(struct px_caching *pc, px_upstream *u) {
    if (conn_off_server(u)) return 0;
    return pc->mode == PX_TRACKING_BCAST || (u != NULL && u->tracked_epoch == pc->epoch && pc->epoch != 0 &&
                                             u->caching_refused != px_acl_mark(u->srv));
}

/* Scripts by SHA1 that write nothing: their EVALSHA empties no cache. */
static void add_readonly_scripts(cmdtable *t, const char *const *sha1s, size_t n) {
    for (size_t i = 0; i < n; i++) cmdtable_add_readonly_script(t, sha1s[i]);
}

static void on_command_table(void *arg, const char *reply, size_t len) {
    px_server *srv = arg;
    struct px_caching *pc = srv->caching;
    cmdtable *t = cmdtable_new();
    if (t == NULL) return;
    int n = cmdtable_load_command_reply(t, reply, len);
    if (n <= 0) {
        px_warning("COMMAND reply unreadable: writes cannot be classified, caching stays off");
        cmdtable_free(t);
        return;
    }
    for (int i = 0; i < srv->cfg->nreadonly_scripts; i++) cmdtable_add_readonly_script(t, srv->cfg->readonly_scripts[i]);
    for (int i = 0; i < srv->cfg->nlookup_scripts; i++) cmdtable_add_readonly_script(t, srv->cfg->lookup_scripts[i]);
    if (srv->cfg->profile == PX_PROFILE_JUICEFS) {
        add_readonly_scripts(t, juicefs_lookup_scripts, N_JUICEFS_LOOKUP_SCRIPTS);
        add_readonly_scripts(t, juicefs_readonly_scripts,
                             sizeof juicefs_readonly_scripts / sizeof *juicefs_readonly_scripts);
    }
    if (pc->cmdt) cmdtable_free(pc->cmdt);
    pc->cmdt = t;
    px_server_upstream_redis6(srv, cmdtable_from_redis6(t));
    px_verbose("command table loaded commands=%d", n);
}

/* The invalidation connection goes where the data connections go (after a
 * failover too), unless tracking-upstream names another path. */
static int on_resolve(void *arg, struct sockaddr_storage *addr, socklen_t *addrlen, char *why, size_t whylen) {
    px_server *srv = arg;
    unsigned len;
    if (srv->cfg->tracking_upstream[0] != '\0') {
        if (px_resolve_address(&srv->cfg->tracking_up, addr, &len, why, whylen) != 0) return -1;
        *addrlen = (socklen_t)len;
        return 0;
    }
    if (px_upstream_resolve(srv, why, whylen) != 0) return -1;
    memcpy(addr, &srv->up_sa, srv->up_salen);
    *addrlen = (socklen_t)srv->up_salen;
    memcpy(&srv->caching->inv_sa, &srv->up_sa, srv->up_salen);
    srv->caching->inv_salen = srv->up_salen;
    return 0;
}

/* rediss://: the invalidation connection speaks TLS as the data ones do. */
static struct ssl_st *on_new_ssl(void *arg, int *failed) {
    px_server *srv = arg;
    const px_config *cfg = srv->cfg;
    const px_upstream_addr *to = cfg->tracking_upstream[0] != '\0' ? &cfg->tracking_up : &cfg->up;
    if (!to->tls || srv->tls_client_ctx == NULL) return NULL;
    SSL *ssl = px_tls_new_client(srv, to->host);
    *failed = ssl == NULL;
    return ssl;
}

/* ------------------------------------------------------------------------ */
/* setup */

static int add_rule_line(cache_rules *r, const char *line, const char *key_prefix, unsigned flags, char *err,
                         size_t errlen) {
    char cmd[16];
    const char *sp = strchr(line, ' ');
    if (sp == NULL || (size_t)(sp - line) >= sizeof cmd) {
        snprintf(err, errlen, "cache-rule '%s': expected COMMAND PATTERN", line);
        return -1;
    }
    memcpy(cmd, line, (size_t)(sp - line));
    cmd[sp - line] = '\0';
    return cache_rules_add(r, cmd, sp + 1, key_prefix, flags, err, errlen);
}

/* The rule set cfg gives, into r (initialised): the profile's rules and
 * tracking prefixes, then cache-rule and cache-track-prefix lines, each with
 * key-prefix put in front, then the prefixes Redis tracks by. With no rule,
 * r->nrules is 0 and nothing is derived. Returns 0, or -1 with the reason in
 * err. One function for the start and for --test-config, so that the check
 * and the dump show what a start uses. */
static int build_rules(const px_config *cfg, cache_rules *r, char *err, size_t errlen) {
    const char *kp = cfg->key_prefix;
    if (cfg->profile == PX_PROFILE_JUICEFS) {
        /* tracked by i and d, not i1 ... i9 and d1 ... d9: Redis walks
         * every prefix for every key written (cache/rules.h). JuiceFS
         * never gives these keys a TTL: no PTTL at each fill. */
        if (add_rule_line(r, "GET i[1-9]*", kp, CACHE_RULE_NO_TTL, err, errlen) != 0 ||
            add_rule_line(r, "HGET d[1-9]*", kp, CACHE_RULE_NO_TTL, err, errlen) != 0 ||
            cache_rules_track_by(r, "i", kp, err, errlen) != 0 || cache_rules_track_by(r, "d", kp, err, errlen) != 0)
            return -1;
    }
    for (int i = 0; i < cfg->ncache_rules; i++)
        if (add_rule_line(r, cfg->cache_rules[i], kp, cfg->cache_ask_ttl ? 0 : CACHE_RULE_NO_TTL, err, errlen) != 0)
            return -1;
    for (int i = 0; i < cfg->ntrack_prefixes; i++)
        if (cache_rules_track_by(r, cfg->track_prefixes[i], kp, err, errlen) != 0) return -1;
    if (r->nrules == 0) return 0;
    return cache_rules_derive_prefixes(r, err, errlen);
}

static const char *const tracking_mode_names[] = {"bcast", "default", "optin"};

/* The tracking prefixes Redis is asked for, ","-separated, or what stands
 * in their place: per read (default, optin) or every key. */
static void format_prefixes(const cache_rules *r, int mode, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = '\0';
    if (mode != PX_TRACKING_BCAST) {
        snprintf(buf, len, "(tracked per read)");
        return;
    }
    if (r->all_keys || r->nprefixes == 0) {
        snprintf(buf, len, "(all keys)");
        return;
    }
    for (int i = 0; i < r->nprefixes && n < len - 1; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? "," : "", r->prefixes[i]);
}

/* Text inside a comment line of the dump: a byte that is not printable
 * (a pattern may hold a newline) as \xHH, so the comment stays one line and
 * the dump loads back. */
static void put_comment_text(FILE *f, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (isprint(*p))
            fputc(*p, f);
        else
            fprintf(f, "\\x%02x", *p);
    }
}

/* Writes the rule set as comment lines: the dump stays a file that loads
 * back to the same configuration. */
static void describe_rules(const px_config *cfg, const cache_rules *r, FILE *f) {
    char list[512];
    fprintf(f, "# effective cache rules (profile %s, then cache-rule lines",
            cfg->profile == PX_PROFILE_JUICEFS ? "juicefs" : "none");
    if (cfg->key_prefix[0] != '\0') {
        fputs("; key-prefix ", f);
        put_comment_text(f, cfg->key_prefix);
        fputs(" put before each", f);
    }
    fputs("):\n", f);
    for (int i = 0; i < r->nrules; i++) {
        const cache_rule *rule = &r->rules[i];
        fprintf(f, "#   %s ", rule->kind == CACHE_KIND_HGET ? "HGET" : "GET");
        put_comment_text(f, rule->pattern);
        fputs(rule->flags & CACHE_RULE_NO_TTL ? "\n" : "  (each fill asks the key's TTL)\n", f);
    }
    format_prefixes(r, cfg->tracking_mode, list, sizeof list);
    fprintf(f, "# tracking %s prefixes=", tracking_mode_names[cfg->tracking_mode]);
    put_comment_text(f, list);
    fputc('\n', f);
    if (cfg->key_prefix[0] != '\0') {
        fprintf(f, "# lookup scripts: none (not used with a key-prefix)\n");
        return;
    }
    int n = cfg->profile == PX_PROFILE_JUICEFS ? (int)N_JUICEFS_LOOKUP_SCRIPTS : 0;
    n += cfg->nlookup_scripts;
    if (n > PX_LOOKUP_MAX_SCRIPTS) n = PX_LOOKUP_MAX_SCRIPTS;
    fprintf(f, "# lookup scripts answered from the cache: %d\n", n);
}

int px_caching_check_config(const px_config *cfg, FILE *f, char *err, size_t errlen) {
    if (cfg->cache_max_memory == 0) {
        if (f != NULL) fprintf(f, "# cache off (cache-max-memory 0): plain proxy\n");
        return 0;
    }
    cache_rules *r = calloc(1, sizeof *r);
    if (r == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    cache_rules_init(r);
    int rc = build_rules(cfg, r, err, errlen);
    if (rc == 0 && f != NULL) {
        if (r->nrules == 0)
            fprintf(f, "# cache off: no cache rules (profile none and no cache-rule)\n");
        else
            describe_rules(cfg, r, f);
    }
    cache_rules_deinit(r);
    free(r);
    return rc;
}

int px_caching_init(px_server *srv) {
    px_config *cfg = srv->cfg;
    char err[512];
    if (cfg->cache_max_memory == 0) {
        px_notice("cache off (cache-max-memory 0): plain proxy");
        return 0;
    }
    struct px_caching *pc = calloc(1, sizeof *pc);
    if (pc == NULL) {
        px_error("cache setup failed: out of memory");
        return -1;
    }
    srv->caching = pc;
    cache_rules_init(&pc->rules);
    if (build_rules(cfg, &pc->rules, err, sizeof err) != 0) goto bad;
    if (pc->rules.nrules == 0) {
        px_notice("cache off: no cache rules (profile none and no cache-rule)");
        px_caching_deinit(srv);
        return 0;
    }
    resp_buf_init(&pc->plan);
    resp_buf_init(&pc->ttl_cmd);
    resp_buf_init(&pc->plan_req);
    if ((pc->lookup = px_lookup_new()) == NULL) {
        snprintf(err, sizeof err, "out of memory");
        goto bad;
    }
    /* The scripts read i<ino> and d<ino> without a prefix: with one (Redis
     * Cluster) JuiceFS does not use them, and their keys are not ours. */
    if (cfg->key_prefix[0] == '\0') {
        if (cfg->profile == PX_PROFILE_JUICEFS)
            for (size_t i = 0; i < N_JUICEFS_LOOKUP_SCRIPTS; i++)
                px_lookup_add(pc->lookup, juicefs_lookup_scripts[i]);
        for (int i = 0; i < cfg->nlookup_scripts; i++)
            if (px_lookup_add(pc->lookup, cfg->lookup_scripts[i]) != 0)
                px_warning("cache-lookup-script %s: too many lookup scripts, ignored", cfg->lookup_scripts[i]);
    }

    cache_config cc = {(size_t)cfg->cache_max_memory, (size_t)cfg->cache_max_value,
                       (int64_t)cfg->cache_ttl * 1000};
    pc->cache = cache_new(&cc);
    pc->reclaim_ev = evtimer_new(srv->base, reclaim_cb, pc);
    if (pc->reclaim_ev != NULL) event_priority_set(pc->reclaim_ev, PX_PRIO_IDLE);
    pc->ping_wake_ev = event_new(srv->base, -1, 0, ping_wake_cb, srv);
    pc->unread_wake_ev = event_new(srv->base, -1, 0, ping_wake_cb, srv);
    if (pc->cache == NULL || pc->reclaim_ev == NULL || pc->ping_wake_ev == NULL || pc->unread_wake_ev == NULL) {
        snprintf(err, sizeof err, "out of memory");
        goto bad;
    }

    if (px_upstream_resolve(srv, err, sizeof err) != 0) {
        /* not fatal: Redis may come later; the pools resolve again */
        px_warning("cannot resolve the upstream for the invalidation connection yet: %s", err);
    }
    pc->mode = cfg->tracking_mode;
    inv_config ic;
    memset(&ic, 0, sizeof ic);
    ic.bcast = pc->mode == PX_TRACKING_BCAST;
    memcpy(&ic.addr, &srv->up_sa, sizeof ic.addr);
    ic.addrlen = srv->up_salen;
    ic.user = cfg->up.has_user ? cfg->up.user : NULL;
    ic.pass = cfg->up.has_pass ? cfg->up.pass : NULL;
    ic.prefixes = (const char *const *)pc->rules.prefixes;
    ic.nprefixes = pc->rules.all_keys ? 0 : pc->rules.nprefixes;
    ic.ping_ms = cfg->tracking_keepalive_ms;
    ic.timeout_ms = cfg->tracking_timeout_ms;
    ic.hold_ms = cfg->tracking_ping_hold_ms;
    ic.tcp_keepalive = cfg->tcp_keepalive;
    inv_callbacks cb = {on_invalidate, on_flush,   on_active,        on_command_table,
                        on_resolve,    on_new_ssl, on_ping_answered, on_busy,
                        on_unanswered};
    pc->inv = inv_new(srv->base, &ic, &cb, srv);
    if (pc->inv == NULL) {
        snprintf(err, sizeof err, "out of memory");
        goto bad;
    }
    inv_start(pc->inv);
    {
        char list[512];
        format_prefixes(&pc->rules, pc->mode, list, sizeof list);
        px_notice("cache on max_memory=%lld max_value=%lld rules=%d tracking=%s prefixes=%s",
                  cfg->cache_max_memory, cfg->cache_max_value, pc->rules.nrules, tracking_mode_names[pc->mode],
                  list);
    }
    return 0;

bad:
    px_error("cache setup failed: %s", err);
    px_caching_deinit(srv);
    return -1;
}

void px_caching_deinit(px_server *srv) {
    struct px_caching *pc = srv->caching;
    if (pc == NULL) return;
    if (pc->inv) inv_free(pc->inv);
    if (pc->reclaim_ev) event_free(pc->reclaim_ev);
    if (pc->ping_wake_ev) event_free(pc->ping_wake_ev);
    if (pc->unread_wake_ev) event_free(pc->unread_wake_ev);
    if (pc->cache) cache_free(pc->cache);
    if (pc->cmdt) cmdtable_free(pc->cmdt);
    px_lookup_free(pc->lookup);
    resp_buf_deinit(&pc->plan);
    resp_buf_deinit(&pc->ttl_cmd);
    resp_buf_deinit(&pc->plan_req);
    cache_rules_deinit(&pc->rules);
    for (int i = 0; i < pc->nusers; i++) free(pc->users[i]);
    free(pc);
    srv->caching = NULL;
}

void px_caching_credentials_changed(px_server *srv) {
    struct px_caching *pc = srv->caching;
    const px_upstream_addr *up = &srv->cfg->up;
    if (pc == NULL || pc->inv == NULL) return;
    if (inv_set_auth(pc->inv, up->has_user ? up->user : NULL, up->has_pass ? up->pass : NULL) != 0)
        px_warning("reload: out of memory: the invalidation connection keeps its credentials");
}

void px_caching_reconfigure(px_server *srv) {
    struct px_caching *pc = srv->caching;
    if (pc == NULL) return;
    cache_config cc = {(size_t)srv->cfg->cache_max_memory, (size_t)srv->cfg->cache_max_value,
                       (int64_t)srv->cfg->cache_ttl * 1000};
    cache_set_config(pc->cache, &cc);
}

const cmdtable *px_caching_cmdtable(const px_server *srv) {
    return srv->caching != NULL ? srv->caching->cmdt : NULL;
}

int px_caching_active(const px_server *srv) {
    return srv->caching != NULL && srv->caching->active && srv->caching->cmdt != NULL;
}

/* May the cache answer or take a read now? */
static int serving(const px_server *srv) {
    return px_caching_active(srv) && !srv->caching->slot_unstable && !srv->cluster_untagged;
}

int px_caching_slot_migrating(const px_server *srv) {
    return srv->caching != NULL && srv->caching->slot_unstable;
}

uint64_t px_caching_slot_events(const px_server *srv) {
    return srv->caching != NULL ? srv->caching->slot_events : 0;
}

/* Empties the cache and keeps it off until a probe finds the slot served
 * here again, not migrating (1 if it was on). */
static int slot_off(struct px_caching *pc, const char *why, const char *data, size_t len) {
    pc->slot_events++;
    pc->slot_event_ms = px_now_ms();
    if (pc->slot_unstable) return 0;
    pc->slot_unstable = 1;
    flush_cache(pc);
    size_t n = len >= 2 ? len - 2 : len;
    px_notice("cache flushed and off reason=\"%s\" reply=\"%.*s\"", why, (int)(n > 120 ? 120 : n), data);
    return 1;
}

void px_caching_slot_unstable(px_server *srv, const char *data, size_t len) {
    struct px_caching *pc = srv->caching;
    /* a nil cached before may be a key written on the target since */
    if (pc != NULL && slot_off(pc, "the volume's cluster slot is migrating", data, len)) pc->flush_slot++;
}

/* A cluster node cut off from the majority of its masters refuses keyed
 * commands CLUSTERDOWN, so as to serve nothing stale, while the majority
 * may promote a replica of it and take writes there; it answers PING still,
 * and the invalidation connection stays on. With a probe of the slot
 * (slotwatch.h) the cache stays off until the node serves the slot again;
 * without one it is emptied (the node refuses the reads that would fill
 * it, and a MOVED empties it again once the node is a replica). */
static void cluster_down(px_server *srv, const char *data, size_t len) {
    struct px_caching *pc = srv->caching;
    if (srv->slotwatch != NULL) {
        if (slot_off(pc, "the cluster is down for this node: the slot may be served elsewhere", data, len))
            pc->flush_failover++;
        return;
    }
    flush_cache(pc);
    pc->flush_failover++;
}

static void slot_stable(struct px_caching *pc) {
    pc->slot_unstable = 0;
    px_notice("cache on again: the volume's cluster slot is not migrating");
}

void px_caching_slot_stable(px_server *srv, uint64_t events_before) {
    struct px_caching *pc = srv->caching;
    if (pc != NULL && pc->slot_unstable && pc->slot_events == events_before) slot_stable(pc);
}

void px_caching_slot_stable_after(px_server *srv, int64_t ms) {
    struct px_caching *pc = srv->caching;
    if (pc != NULL && pc->slot_unstable && px_now_ms() - pc->slot_event_ms >= ms) slot_stable(pc);
}

/* ------------------------------------------------------------------------ */
/* helpers */

/* The ACL partition of a client: one per upstream user name ("default" and
 * no user at all are the same user). 0 when the table is full: then the
 * client is not served from the cache at all. */
static uint32_t partition_of(struct px_caching *pc, const char *user) {
    if (user == NULL || strcmp(user, "default") == 0) return 1;
    for (int i = 0; i < pc->nusers; i++)
        if (strcmp(pc->users[i], user) == 0) return (uint32_t)i + 2;
    if (pc->nusers >= (int)(sizeof pc->users / sizeof pc->users[0])) return 0;
    pc->users[pc->nusers] = strdup(user);
    if (pc->users[pc->nusers] == NULL) return 0;
    return (uint32_t)(pc->nusers++) + 2;
}

/* The kind of a cacheable read, or 0. */
static int cacheable_kind(struct px_caching *pc, const resp_arg *a, int argc) {
    int kind;
    if (argc == 2 && resp_arg_is(a[0].ptr, a[0].len, "GET"))
        kind = CACHE_KIND_GET;
    else if (argc == 3 && resp_arg_is(a[0].ptr, a[0].len, "HGET"))
        kind = CACHE_KIND_HGET;
    else
        return 0;
    return cache_rules_match(&pc->rules, kind, a[1].ptr, a[1].len) ? kind : 0;
}

/* Could any rule ever cache something under this key? */
static int key_is_cacheable(struct px_caching *pc, const char *key, size_t klen) {
    return cache_rules_match_any(&pc->rules, key, klen);
}

/* ------------------------------------------------------------------------ */
/* hits */

/* Which cacheable read other than GET/HGET a request is (*script: the
 * lookup script's index), or PX_READ_NONE. */
static int read_kind(struct px_caching *pc, const resp_arg *a, int argc, int *script) {
    if (argc >= 2 && resp_arg_is(a[0].ptr, a[0].len, "MGET")) {
        for (int i = 1; i < argc; i++)
            if (!cache_rules_match(&pc->rules, CACHE_KIND_GET, a[i].ptr, a[i].len)) return PX_READ_NONE;
        return PX_READ_MGET;
    }
    /* A lookup answered here joins two entries, the dentry and the attr,
     * each as fresh as its last invalidation. Only bcast gets those in
     * Redis's order: tracking per read, an invalidation may come after
     * replies Redis wrote later (docs/CONSISTENCY.md), and the pair then
     * mixes two moments (a name's old inode with that inode's attr after
     * its unlink: review-fills F1). There lookups go to Redis. */
    if (pc->mode != PX_TRACKING_BCAST) return PX_READ_NONE;
    *script = px_lookup_match(pc->lookup, argc, a);
    if (*script >= 0 && cache_rules_match(&pc->rules, CACHE_KIND_HGET, a[3].ptr, a[3].len)) return PX_READ_LOOKUP;
    return PX_READ_NONE;
}

/* The plan of an MGET (pc->plan, then the request's aux): a header, then
 * per key either its cached value (tag 0: u8 nil, u32 length, bytes, then
 * u32 length, key) or where its reply comes from (tag 1: u32 length, key,
 * u64 fill token). */
typedef struct mget_hdr {
    uint32_t n, nmiss, part, db, proto;
    uint32_t may_expire; /* a cached value's key may have a TTL in Redis */
    uint64_t seq;      /* change_seq when the cached values were taken */
    int64_t taken_ms;  /* ... and the time (px_now_ms) */
} mget_hdr;

/* One key's place in a plan. */
typedef struct plan_item {
    int cached;        /* 1: value (or nil) below; 0: from the reply */
    int nil;
    const char *val;   /* the cached value */
    uint32_t vlen;
    const char *key;
    uint32_t klen;
    char *token_at;    /* from the reply: where its fill token is (8 bytes) */
} plan_item;

/* The item at *at of a plan (starting after the header); advances *at.
 * Returns 0 at the end. */
static int plan_next(char *plan, size_t len, size_t *at, plan_item *it) {
    if (*at >= len) return 0;
    char *q = plan + *at;
    it->cached = q[0] == 0;
    if (it->cached) {
        it->nil = q[1];
        memcpy(&it->vlen, q + 2, 4);
        it->val = q + 6;
        q += 6 + it->vlen;
        memcpy(&it->klen, q, 4);
        it->key = q + 4;
        it->token_at = NULL;
        *at += 6 + it->vlen + 4 + it->klen;
    } else {
        it->nil = 0;
        it->val = NULL;
        it->vlen = 0;
        memcpy(&it->klen, q + 1, 4);
        it->key = q + 5;
        it->token_at = q + 5 + it->klen;
        *at += 5 + it->klen + 8;
    }
    return 1;
}

/* A cached value (or nil) as MGET's element, in the client's protocol. */
static int enc_cached(resp_buf *b, int nil, const char *val, size_t vlen, int proto) {
    return nil ? resp_enc_null(b, proto) : resp_enc_bulk(b, val, vlen);
}

/* A cached value of a plan, in the client's protocol. */
static void plan_enc_cached(resp_buf *b, const plan_item *it, int proto) {
    enc_cached(b, it->nil, it->val, it->vlen, proto);
}

static uint64_t change_seq(struct px_caching *pc);

/* A hit counts in the client's output limit like any reply: a client that
 * pipelines small reads of large cached values and reads nothing must not
 * make the proxy hold them without bound. One that could not be encoded
 * whole is never sent: the client would take the next reply for it. */
static int hit_write(px_client *c, resp_buf *b) {
    if (b->failed)
        px_client_close(c, "out of memory");
    else
        px_client_write_reply(c, b->data, b->len);
    return 1;
}

/* Is every key of the client's MGET cached? (Counts nothing.) */
static int mget_all_cached(struct px_caching *pc, px_client *c, uint32_t part) {
    const resp_arg *a = c->rq.argv;
    int64_t now = px_now_ms();
    for (int i = 1; i < c->rq.argc; i++) {
        const char *v;
        size_t vlen;
        int nil;
        if (!cache_peek(pc->cache, part, c->db, CACHE_KIND_GET, a[i].ptr, a[i].len, "", 0, now, &v, &vlen, &nil))
            return 0;
    }
    return 1;
}

/* The plan buffers keep at most this much between MGETs (px_caching_cron):
 * one MGET of many large values must not hold its size for good. */
#define PX_PLAN_KEEP (64 * 1024)

/* An MGET whose every key is cached (nothing in flight): its reply, built
 * straight from the cache into the client's scratch buffer. Returns the
 * index of the first key not cached (the scratch is then garbage), argc
 * when all are, or -1 when out of memory. */
static int mget_reply_cached(struct px_caching *pc, px_client *c, uint32_t part, int64_t now) {
    const resp_arg *a = c->rq.argv;
    resp_buf *out = &c->scratch;
    int fail = 0;
    resp_buf_reset(out);
    fail |= resp_enc_array(out, c->rq.argc - 1);
    for (int i = 1; i < c->rq.argc; i++) {
        const char *v;
        size_t vlen;
        int nil;
        if (!cache_get(pc->cache, part, c->db, CACHE_KIND_GET, a[i].ptr, a[i].len, "", 0, now, &v, &vlen, &nil))
            return i;
        fail |= enc_cached(out, nil, v, vlen, c->proto);
    }
    return fail ? -1 : c->rq.argc;
}

/* An MGET: answered when every key is cached; otherwise plans the MGET of
 * the rest (busy: the client has requests in flight, so nothing is taken
 * from the cache). Returns 1 if answered. */
static int mget_try(struct px_caching *pc, px_client *c, uint32_t part, int busy, int *cacheable) {
    const resp_arg *a = c->rq.argv;
    int argc = c->rq.argc, fail = 0;
    resp_buf *plan = &pc->plan, *req = &pc->plan_req;
    int64_t now = px_now_ms();
    mget_hdr h = {(uint32_t)(argc - 1), 0, part, (uint32_t)c->db, (uint32_t)c->proto, 0, change_seq(pc), now};
    /* the usual case first, without copying the values into a plan: the
     * reply would cost its size three times over (plan, scratch, output) */
    int first_miss = busy ? 1 : mget_reply_cached(pc, c, part, now);
    if (first_miss == argc) {
        COUNT(pc, mget_hits, 1);
        COUNT(pc, mget_keys_cached, h.n);
        return hit_write(c, &c->scratch);
    }
    if (first_miss < 0) {
        *cacheable = PX_READ_NONE; /* out of memory: the plain MGET goes */
        return 0;
    }
    resp_buf_reset(plan);
    fail |= resp_buf_append(plan, &h, sizeof h);
    for (int i = 1; i < argc; i++) {
        const char *v;
        size_t vlen;
        int nil;
        /* (the keys up to the first miss were counted already) */
        int hit = !busy && (i <= first_miss ? cache_peek(pc->cache, part, c->db, CACHE_KIND_GET, a[i].ptr, a[i].len,
                                                          "", 0, now, &v, &vlen, &nil)
                                            : cache_get(pc->cache, part, c->db, CACHE_KIND_GET, a[i].ptr, a[i].len,
                                                        "", 0, now, &v, &vlen, &nil));
        if (hit && vlen <= UINT32_MAX && a[i].len <= UINT32_MAX) {
            uint8_t tag[2] = {0, (uint8_t)nil};
            uint32_t n = nil ? 0 : (uint32_t)vlen, klen = (uint32_t)a[i].len;
            fail |= resp_buf_append(plan, tag, 2);
            fail |= resp_buf_append(plan, &n, 4);
            if (n) fail |= resp_buf_append(plan, v, n);
            fail |= resp_buf_append(plan, &klen, 4);
            fail |= resp_buf_append(plan, a[i].ptr, klen);
            if (cache_rules_match(&pc->rules, CACHE_KIND_GET, a[i].ptr, a[i].len) != CACHE_MATCH_NO_TTL)
                h.may_expire = 1;
        } else if (a[i].len <= UINT32_MAX) {
            uint8_t tag = 1;
            uint32_t klen = (uint32_t)a[i].len;
            uint64_t token = 0;
            fail |= resp_buf_append(plan, &tag, 1);
            fail |= resp_buf_append(plan, &klen, 4);
            fail |= resp_buf_append(plan, a[i].ptr, klen);
            fail |= resp_buf_append(plan, &token, 8);
            h.nmiss++;
        } else {
            fail = 1; /* a key of 4 GiB or more: the plain MGET goes */
        }
    }
    resp_buf_reset(req);
    if (!fail) {
        memcpy(plan->data, &h, sizeof h);
        resp_enc_array(req, (long long)h.nmiss + 1);
        resp_enc_bulk(req, "MGET", 4);
        plan_item it;
        for (size_t at = sizeof h; plan_next(plan->data, plan->len, &at, &it);)
            if (!it.cached) resp_enc_bulk(req, it.key, it.klen);
        fail = req->failed;
    }
    if (fail) {
        resp_buf_reset(plan);
        resp_buf_reset(req);
        *cacheable = PX_READ_NONE; /* out of memory: the plain MGET goes */
        return 0;
    }
    if (h.nmiss < h.n) {
        COUNT(pc, mget_partial, 1);
        COUNT(pc, mget_keys_cached, h.n - h.nmiss);
    }
    return 0;
}

void px_caching_cron(px_server *srv) {
    struct px_caching *pc = srv->caching;
    if (pc == NULL) return;
    if (pc->mode != PX_TRACKING_BCAST && pc->active) px_pools_foreach_shared(srv, track_again);
    /* (neither is needed between two events: a plan moves to its request,
     * or is answered, in the dispatch that made it; the request of the
     * missing keys is copied out there too) */
    resp_buf_reset(&pc->plan);
    resp_buf_reset(&pc->plan_req);
    resp_buf_trim(&pc->plan, PX_PLAN_KEEP);
    resp_buf_trim(&pc->plan_req, PX_PLAN_KEEP);
}

void px_caching_mget_request(px_client *c, const char **data, size_t *len) {
    struct px_caching *pc = c->srv->caching;
    *data = pc->plan_req.data;
    *len = pc->plan_req.len;
}

/* Has the loop news of a change not handled yet: bytes unread on the
 * invalidation connection, or, tracking per read, a tracked shared
 * connection's end (Redis forgot its reads, and may have answered a write
 * of one of them since, with no invalidation: review-loss 2)? */
static int news_unread(struct px_caching *pc, px_server *srv) {
    return inv_unread(pc->inv) || (pc->mode != PX_TRACKING_BCAST && px_upstreams_tracked_ending(srv, pc->epoch));
}

/*
 * C10: a cacheable read that may be answered here waits while an
 * invalidation may be on its way. Returns PX_CACHING_WAIT when it waits
 * (a wake calls it back), else 0, with *busy set when it must go to Redis
 * instead. was_held, was_unread: it waited before, for a PING or a turn.
 */
static int hold_for_invalidations(struct px_caching *pc, px_client *c, int was_held, int was_unread, int *busy) {
    /* An invalidation may be behind a reply the client has seen from
     * Redis (inv_hold_mark): the read waits for the PINGs unanswered when
     * it came, one round trip once per keep-alive period or barrier, or at
     * most tracking-ping-hold-ms; then Redis answers it (the PING is late:
     * Redis stalled, a fork or a long script, or the network slow). */
    uint64_t mark = was_held || was_unread ? c->ping_mark : inv_hold_mark(pc->inv);
    int hold = *busy ? 0 : inv_hold_left_ms(pc->inv, mark);
    if (hold == INV_HOLD_PAST) {
        COUNT(pc, past_hold, 1);
        *busy = 1;
    } else if (hold > 0) {
        c->ping_mark = mark;
        /* (a timer may wake it a little early: then it waits again) */
        if (!was_held) pc->held_ping++;
        c->ping_held = 1;
        if (!evtimer_pending(pc->ping_wake_ev, NULL)) {
            struct timeval tv = {hold / 1000, (hold % 1000) * 1000};
            evtimer_add(pc->ping_wake_ev, &tv);
        }
        return PX_CACHING_WAIT;
    }
    /* An invalidation that reached sidecache before this request's bytes
     * were read is handled before the request is answered here. Libevent
     * runs the invalidation connection first only among the events of one
     * poll (priority 0): the client's read may have taken bytes that came
     * after it (inv_unread). So may a read from Redis whose reply filled
     * an entry newer than the invalidation, beside one it would purge (an
     * MGET of both would mix versions). Once nothing was unread, what was
     * read before is covered: the check is made again after the next read
     * of a client or of Redis. The read waits a turn of the loop, whose
     * poll runs the invalidation connection before the wake (a timer, of
     * the clients' priority); should the bytes still be there after it (a
     * message in part), it goes to Redis. */
    if (*busy || pc->unread_none_at == c->srv->io_reads) return 0;
    if (!news_unread(pc, c->srv)) {
        pc->unread_none_at = c->srv->io_reads;
    } else if (was_unread) {
        COUNT(pc, sent_unread, 1);
        *busy = 1;
    } else {
        c->ping_mark = mark;
        c->ping_held = was_held;
        c->unread_held = 1;
        COUNT(pc, held_unread, 1);
        /* (added again while due, a timer would go to the back of the
         * next turn: those held before would wait on) */
        if (!evtimer_pending(pc->unread_wake_ev, NULL)) {
            static const struct timeval now = {0, 0};
            evtimer_add(pc->unread_wake_ev, &now);
        }
        return PX_CACHING_WAIT;
    }
    return 0;
}

/* A GET or HGET (kind) answered from the cache: 1, the reply written; 0,
 * a miss. allowed: Redis has let the user make this read (else an entry
 * is left alone, and Redis answers). */
static int answer_key(struct px_caching *pc, px_client *c, int kind, uint32_t part, int allowed) {
    const resp_arg *a = c->rq.argv;
    const char *val;
    size_t vlen;
    int is_nil;
    const char *field = kind == CACHE_KIND_HGET ? a[2].ptr : "";
    size_t flen = kind == CACHE_KIND_HGET ? a[2].len : 0;
    int64_t now = px_now_ms();
    /* not allowed yet: a miss counts as one; an entry (an MGET or a
     * lookup may have filled it) is left alone */
    if (!allowed && cache_peek(pc->cache, part, c->db, kind, a[1].ptr, a[1].len, field, flen, now, &val, &vlen,
                               &is_nil))
        return 0;
    if (!cache_get(pc->cache, part, c->db, kind, a[1].ptr, a[1].len, field, flen, now, &val, &vlen, &is_nil))
        return 0;
    if (is_nil)
        resp_enc_null(&c->scratch, c->proto);
    else
        resp_enc_bulk(&c->scratch, val, vlen);
    return hit_write(c, &c->scratch);
}

static int try_hit(struct px_caching *pc, px_client *c, int *cacheable) {
    int was_held = c->ping_held, was_unread = c->unread_held;
    c->ping_held = 0;
    c->unread_held = 0;
    *cacheable = PX_READ_NONE;
    if (!serving(c->srv)) return 0;
    /* A client that has not authenticated, where Redis wants a password,
     * must get Redis's NOAUTH: never a cached value, never a fill. */
    if (c->pass == NULL && c->srv->open_access != 1) return 0;
    const resp_arg *a = c->rq.argv;
    int script = -1;
    int kind = cacheable_kind(pc, a, c->rq.argc);
    int read = kind == CACHE_KIND_GET    ? PX_READ_GET
               : kind == CACHE_KIND_HGET ? PX_READ_HGET
                                         : read_kind(pc, a, c->rq.argc, &script);
    if (read == PX_READ_NONE) return 0;
    uint32_t part = partition_of(pc, c->user);
    if (part == 0) return 0;
    *cacheable = read;
    /* A client with requests in flight may have a write among them that
     * the cache does not reflect yet: its reads go to Redis, in order
     * (unless all of them were answered ahead: WATCH, UNWATCH). */
    int busy = (c->inflight > 0 || c->slots_head != NULL) && !px_client_awaits_only_ahead(c);
    if (busy) COUNT(pc, bypassed, 1);
    /* until Redis has answered a read of this kind for this user (its
     * ACL allows it: learn_read), what the cache holds is not its answer */
    int allowed = pc->read_ok[part][read - 1] == px_acl_mark(c->srv);
    if (!allowed && read != PX_READ_GET && read != PX_READ_HGET) busy = 1;
    if (!busy && flush_unsettled(pc)) {
        COUNT(pc, bypassed_flush, 1);
        busy = 1;
    }
    if (hold_for_invalidations(pc, c, was_held, was_unread, &busy) == PX_CACHING_WAIT) return PX_CACHING_WAIT;
    if (read == PX_READ_MGET) {
        /* A merge holds the client's next request back until Redis's part
         * is in (it may have to go again whole): taken only when nothing
         * follows in the input yet. In a pipeline, a partly cached MGET
         * goes whole; one whose keys are all cached is answered still. */
        if (!busy && px_io_input_len(&c->io) != c->rq.frame_len && !mget_all_cached(pc, c, part)) busy = 1;
        return mget_try(pc, c, part, busy, cacheable);
    }
    if (busy) return 0;
    resp_buf_reset(&c->scratch);
    if (read == PX_READ_LOOKUP) {
        if (!px_lookup_answer(pc->lookup, script, pc->cache, part, c->db, c->proto, a[3].ptr, a[3].len, a[4].ptr,
                              a[4].len, px_now_ms(), &c->scratch)) {
            COUNT(pc, script_misses, 1);
            return 0;
        }
        COUNT(pc, script_hits, 1);
        return hit_write(c, &c->scratch);
    }
    return answer_key(pc, c, kind, part, allowed);
}

int px_caching_try_hit(px_client *c, int *cacheable) {
    struct px_caching *pc = c->srv->caching;
    if (pc == NULL) {
        *cacheable = PX_READ_NONE;
        return 0;
    }
    /* A read that went on to Redis may wait there (upstream-output-limit,
     * or for its connection) and come here again: its hit or miss, its
     * partial MGET, were counted the first time. */
    pc->counted_already = c->read_counted;
    cache_count_reads(pc->cache, !pc->counted_already);
    int hit = try_hit(pc, c, cacheable);
    cache_count_reads(pc->cache, 1);
    pc->counted_already = 0;
    if (hit == 0 && *cacheable != PX_READ_NONE) c->read_counted = 1;
    return hit;
}

/* ------------------------------------------------------------------------ */
/* keys with a TTL
 *
 * Redis sends the invalidation of an expired key only when it deletes the
 * key: when a client reads it there (a hit never does), or when its
 * background expiry, which samples a few keys at a time, comes to it. A
 * value cached from a key with a TTL could outlive the key by seconds. So a
 * fill of a key whose rules do not vouch that it has none (CACHE_MATCH, not
 * CACHE_MATCH_NO_TTL) sends PTTL of the key right behind the read, on the
 * same connection, as an internal request (PX_REQ_TTL, ttl_ask). When the
 * read's reply is a value, the fill waits in that request (ttl_wait) for
 * the PTTL's reply, and the entry ends at the time the PTTL was sent plus
 * its answer: no later than Redis's own expiry. A nil fills at once: a
 * missing key has no TTL. The fill's token guards it all the while (C3): a
 * write or an invalidation meanwhile refuses it. A PTTL that Redis refuses
 * (an ACL without it), or that is lost with its connection, fills nothing.
 */

typedef struct ttl_fill {
    uint64_t token;
    uint32_t part, db, kind, klen, flen, vlen;
} ttl_fill; /* a PX_REQ_TTL's aux: this, then the key, field and value */

/* Does a fill of this read need the key's TTL? */
static int ttl_wanted(struct px_caching *pc, int kind, const char *key, size_t klen) {
    return cache_rules_match(&pc->rules, kind, key, klen) == CACHE_MATCH;
}

/* Has Redis refused u's identity PTTL (since the last ACL change)? Then a
 * read that needs one does not fill. */
static int ttl_denied(px_server *srv, const px_upstream *u) {
    return u->pool != NULL && u->pool->ttl_denied == px_acl_mark(srv);
}

/* FNV-1a: a PTTL request remembers which key it asks about, so that a fill
 * is never handed to another key's PTTL (ttl_wait). */
static uint64_t key_digest(const char *key, size_t klen) {
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < klen; i++) h = (h ^ (unsigned char)key[i]) * 1099511628211ULL;
    return h;
}

/* Sends PTTL key on u, right behind the read that fills it. Returns 0, or
 * -1 (no memory: that read must not fill). */
static int ttl_ask(struct px_caching *pc, px_server *srv, px_upstream *u, const char *key, size_t klen) {
    resp_buf *b = &pc->ttl_cmd;
    resp_buf_reset(b);
    if (resp_enc_array(b, 2) != 0 || resp_enc_bulk(b, "PTTL", 4) != 0 || resp_enc_bulk(b, key, klen) != 0) return -1;
    px_req *t = px_req_new(srv, NULL, PX_REQ_TTL);
    if (t == NULL) return -1;
    /* the entry's life counts from here: Redis runs it later */
    t->tag.sent_ms = px_now_ms();
    t->mark.key_digest = key_digest(key, klen);
    px_upstream_send(u, t, b->data, b->len);
    pc->ttl_asked++;
    return 0;
}

/* A read that fills was answered with a value: the fill (token, identity,
 * value) waits in t, the PTTL sent behind it, for the key's TTL. Returns 0,
 * or -1 when t is not that PTTL's request or there is no memory (the
 * caller aborts the fill). */
static int ttl_wait(px_req *t, uint64_t token, uint32_t part, uint32_t db, int kind, const char *key, size_t klen,
                    const char *field, size_t flen, const char *val, size_t vlen) {
    if (t == NULL || t->kind != PX_REQ_TTL || t->aux != NULL || t->mark.key_digest != key_digest(key, klen)) return -1;
    ttl_fill f = {token, part, db, (uint32_t)kind, (uint32_t)klen, (uint32_t)flen, (uint32_t)vlen};
    char *aux = malloc(sizeof f + klen + flen + vlen);
    if (aux == NULL) return -1;
    memcpy(aux, &f, sizeof f);
    memcpy(aux + sizeof f, key, klen);
    if (flen > 0) memcpy(aux + sizeof f + klen, field, flen);
    if (vlen > 0) memcpy(aux + sizeof f + klen + flen, val, vlen);
    t->aux = aux;
    t->aux_len = sizeof f + klen + flen + vlen;
    return 0;
}

/* Completes a fill now, or, when its TTL was asked for (in t) and its
 * reply is a value the cache may take, has it wait for the PTTL's reply. */
static void fill_or_wait(struct px_caching *pc, px_server *srv, int asked, px_req *t, uint64_t token, uint32_t part,
                         uint32_t db, int kind, const char *key, size_t klen, const char *field, size_t flen,
                         const char *val, size_t vlen, int is_nil) {
    /* a value too big to cache is refused now, not copied into t */
    if (asked && !is_nil && vlen <= (unsigned long long)srv->cfg->cache_max_value && vlen <= UINT32_MAX) {
        if (ttl_wait(t, token, part, db, kind, key, klen, field, flen, val, vlen) != 0)
            cache_fill_abort(pc->cache, token, part, (int)db, kind, key, klen, field, flen);
        return;
    }
    cache_fill_complete(pc->cache, token, part, (int)db, kind, key, klen, field, flen, val, vlen, is_nil, px_now_ms());
}

void px_caching_on_ttl_reply(px_server *srv, px_req *t, const char *data, size_t len) {
    struct px_caching *pc = srv->caching;
    if (pc == NULL) return;
    px_caching_note_reply(srv, data, len); /* C6: MASTERDOWN, READONLY, ... */
    if (resp_frame_is_noperm(data, len) && t->up != NULL && t->up->pool != NULL)
        t->up->pool->ttl_denied = px_acl_mark(srv);
    if (t->aux == NULL) return;
    ttl_fill f;
    memcpy(&f, t->aux, sizeof f);
    const char *key = t->aux + sizeof f, *field = key + f.klen, *val = field + f.flen;
    long long pttl = 0;
    /* -1: no TTL; n >= 0: what was left of it when Redis ran the PTTL;
     * -2 (the key is gone: it expired since the read) or an error: no fill */
    if (resp_read_int_line(data, len, 0, ':', &pttl) != len || pttl < -1) {
        cache_fill_abort(pc->cache, f.token, f.part, (int)f.db, (int)f.kind, key, f.klen, field, f.flen);
        return;
    }
    int64_t until = pttl == -1 ? 0 : t->tag.sent_ms + pttl;
    cache_fill_complete_until(pc->cache, f.token, f.part, (int)f.db, (int)f.kind, key, f.klen, field, f.flen, val,
                              f.vlen, 0, px_now_ms(), until);
}

/* ------------------------------------------------------------------------ */
/* sends */

typedef struct key_sink {
    struct px_caching *pc;
    resp_buf *keys;   /* where the keys are recorded for the reply */
    int queued;       /* queued in MULTI: nothing runs before EXEC, so the
                         keys are only recorded (for EXEC's reply) */
    int touched;      /* a key the cache may hold was seen */
} key_sink;

static void invalidate_now(void *arg, const char *key, size_t klen) {
    key_sink *ks = arg;
    if (!key_is_cacheable(ks->pc, key, klen)) return;
    ks->touched = 1;
    if (!ks->queued) {
        cache_invalidate_key(ks->pc->cache, key, klen);
        reclaim_later(ks->pc);
    }
    if (ks->keys != NULL) {
        uint32_t n = (uint32_t)klen;
        size_t before = ks->keys->len;
        /* (whole records only; keys->failed then says one is missing) */
        if (resp_buf_append(ks->keys, &n, sizeof n) != 0 || resp_buf_append(ks->keys, key, klen) != 0)
            ks->keys->len = before;
    }
}

static void flush_for_write(struct px_caching *pc, const resp_arg *cmd) {
    flush_cache(pc);
    pc->flush_write++;
    px_debug("cache flushed reason=\"write with unknown keys\" cmd=%.*s", (int)(cmd->len > 32 ? 32 : cmd->len),
             cmd->ptr);
}

/* Anything invalidated or flushed since, or a write answered? (An
 * invalidation can overtake the reply of a read sent before it: then what
 * the read returned for a key it could not name at send time may be stale.
 * A write whose purge at its reply was skipped counts too: the read may have
 * run before it, and its key had no placeholder for the purge to catch.) */
static uint64_t change_seq(struct px_caching *pc) {
    const cache_stats *st = cache_get_stats(pc->cache);
    return st->invalidations + st->flushes + pc->purges_skipped;
}

/* A command that writes nothing (cmdtable_writes said so): one Redis flags
 * readonly (HSCAN, LRANGE, HGETALL, ...), a script call (a read-only
 * script's EVALSHA: JuiceFS's resolve), or SCRIPT LOAD (JuiceFS loads its
 * scripts again after a NOSCRIPT, as after a Redis restart, and one that
 * fails leaves the script off). Sent again, it does what it did. */
static int reads_only(struct px_caching *pc, int argc, const resp_arg *a) {
    int flags = 0;
    if (!cmdtable_check(pc->cmdt, argc, a, &flags)) return 0;
    if ((flags & CMDT_F_READONLY) && !(flags & CMDT_F_WRITE)) return 1;
    if (argc == 3 && resp_arg_is(a[0].ptr, a[0].len, "SCRIPT") && resp_arg_is(a[1].ptr, a[1].len, "LOAD")) return 1;
    return resp_arg_is(a[0].ptr, a[0].len, "EVALSHA") || resp_arg_is(a[0].ptr, a[0].len, "EVALSHA_RO") ||
           resp_arg_is(a[0].ptr, a[0].len, "EVAL_RO") || resp_arg_is(a[0].ptr, a[0].len, "FCALL_RO");
}

/* The MGET's plan goes with the request; its missing keys begin fills. */
static void mget_send(struct px_caching *pc, px_client *c, px_upstream *u, px_req *r, int may_fill) {
    mget_hdr h;
    resp_buf *plan = &pc->plan;
    memcpy(&h, plan->data, sizeof h);
    int64_t now = px_now_ms();
    int denied = may_fill && ttl_denied(c->srv, u);
    plan_item it;
    for (size_t at = sizeof h; may_fill && plan_next(plan->data, plan->len, &at, &it);) {
        if (it.cached) continue;
        int wanted = ttl_wanted(pc, CACHE_KIND_GET, it.key, it.klen);
        uint64_t token = 0;
        if (!(wanted && denied))
            token = cache_fill_begin(pc->cache, h.part, (int)h.db, CACHE_KIND_GET, it.key, it.klen, "", 0, now);
        /* the PTTLs follow the MGET in the order of its keys (mget_reply) */
        if (token && wanted && ttl_ask(pc, c->srv, u, it.key, it.klen) != 0) {
            cache_fill_abort(pc->cache, token, h.part, (int)h.db, CACHE_KIND_GET, it.key, it.klen, "", 0);
            token = 0;
        }
        memcpy(it.token_at, &token, 8);
        if (token) u->filled = 1;
    }
    /* the plan's buffer moves to the request */
    r->aux = plan->data;
    r->aux_len = plan->len;
    r->aux_flags |= PX_AUX_MGET;
    resp_buf_init(plan);
    /* a merge may have to be sent again whole: nothing of the client's
     * may reach Redis after it meanwhile (client.c) */
    if (h.nmiss < h.n) c->mget_merge = r;
}

/* A lookup script's dentry identity, then dkey and name (request aux). */
typedef struct lookup_id {
    uint32_t part, db, idx, proto, dklen, nlen;
    uint64_t seq;
    uint64_t gen;      /* px_lookup_generation when sent */
} lookup_id;

static void lookup_send(struct px_caching *pc, px_client *c, px_upstream *u, px_req *r) {
    const resp_arg *a = c->rq.argv;
    /* (lengths are kept in 32 bits; such a name is never cached anyway) */
    if (a[3].len > UINT32_MAX || a[4].len > UINT32_MAX) return;
    lookup_id id = {partition_of(pc, c->user), (uint32_t)c->db, (uint32_t)px_lookup_match(pc->lookup, c->rq.argc, a),
                    (uint32_t)c->proto, (uint32_t)a[3].len, (uint32_t)a[4].len, change_seq(pc),
                    px_lookup_generation(pc->lookup)};
    char *aux = malloc(sizeof id + a[3].len + a[4].len);
    if (aux == NULL) return;
    memcpy(aux, &id, sizeof id);
    memcpy(aux + sizeof id, a[3].ptr, a[3].len);
    memcpy(aux + sizeof id + a[3].len, a[4].ptr, a[4].len);
    /* a lookup fills only what its rules vouch has no TTL (the profile's
     * keys): the GET and HGET of the others ask for it */
    if (!ttl_wanted(pc, CACHE_KIND_HGET, a[3].ptr, a[3].len))
        r->tag.fill_token = cache_fill_begin(pc->cache, id.part, c->db, CACHE_KIND_LOOKUP, a[3].ptr, a[3].len, a[4].ptr,
                                         a[4].len, px_now_ms());
    r->aux = aux;
    r->aux_len = sizeof id + a[3].len + a[4].len;
    r->aux_flags |= PX_AUX_LOOKUP;
    u->filled = 1;
}

int px_caching_on_send(px_client *c, px_upstream *u, px_req *r, int cacheable, int in_multi) {
    struct px_caching *pc = c->srv->caching;
    if (pc == NULL) return 0;
    const resp_arg *a = c->rq.argv;
    int argc = c->rq.argc;

    if (cacheable && r != NULL && !in_multi) {
        int may_fill = serving(c->srv) && conn_tracked(pc, u);
        if (u != NULL && u->owner == NULL) r->aux_flags |= PX_AUX_READ;
        r->learn = partition_of(pc, c->user) << 3 | (uint32_t)cacheable;
        r->learn_mark = px_acl_mark(c->srv);
        if (cacheable == PX_READ_MGET) {
            mget_send(pc, c, u, r, may_fill);
            return 0;
        }
        if (!may_fill) return 0;
        if (cacheable != PX_READ_LOOKUP && ttl_denied(c->srv, u) &&
            ttl_wanted(pc, cacheable == PX_READ_HGET ? CACHE_KIND_HGET : CACHE_KIND_GET, a[1].ptr, a[1].len))
            return 0;
        if (cacheable == PX_READ_LOOKUP) {
            lookup_send(pc, c, u, r);
            return 0;
        }
        /* px_caching_try_hit matched the rules: the kind is in cacheable */
        int kind = cacheable == PX_READ_HGET ? CACHE_KIND_HGET : CACHE_KIND_GET;
        uint32_t part = partition_of(pc, c->user);
        const char *field = kind == CACHE_KIND_HGET ? a[2].ptr : "";
        size_t flen = kind == CACHE_KIND_HGET ? a[2].len : 0;
        uint64_t token =
            cache_fill_begin(pc->cache, part, c->db, kind, a[1].ptr, a[1].len, field, flen, px_now_ms());
        if (token == 0) return 0;
        /* identity for the reply: part, db, kind, klen, key, field */
        size_t n = 4 + 4 + 4 + 4 + a[1].len + flen;
        char *id = malloc(n);
        if (id == NULL) {
            cache_fill_abort(pc->cache, token, part, c->db, kind, a[1].ptr, a[1].len, field, flen);
            return 0;
        }
        uint32_t hdr[4] = {part, (uint32_t)c->db, (uint32_t)kind, (uint32_t)a[1].len};
        memcpy(id, hdr, sizeof hdr);
        memcpy(id + 16, a[1].ptr, a[1].len);
        memcpy(id + 16 + a[1].len, field, flen);
        if (ttl_wanted(pc, kind, a[1].ptr, a[1].len)) {
            if (ttl_ask(pc, c->srv, u, a[1].ptr, a[1].len) != 0) {
                cache_fill_abort(pc->cache, token, part, c->db, kind, a[1].ptr, a[1].len, field, flen);
                free(id);
                return 0;
            }
            r->aux_flags |= PX_AUX_TTL_NEXT;
        }
        r->aux = id;
        r->aux_len = n;
        r->aux_flags |= PX_AUX_FILL;
        r->tag.fill_token = token;
        u->filled = 1;
        return 0;
    }

    if (argc >= 2 && resp_arg_is(a[0].ptr, a[0].len, "SCRIPT")) {
        /* what Redis will hold of the lookup scripts */
        if (argc == 3 && resp_arg_is(a[1].ptr, a[1].len, "LOAD") && r != NULL && !in_multi) {
            int idx = px_lookup_match_body(pc->lookup, a[2].ptr, a[2].len);
            if (idx >= 0) {
                r->aux_flags |= PX_AUX_SCRIPT_LOAD;
                r->tag.script = (uint64_t)idx + 1;
                r->mark.lookup_gen = px_lookup_generation(pc->lookup);
            }
        } else if (resp_arg_is(a[1].ptr, a[1].len, "FLUSH")) {
            px_lookup_forget(pc->lookup);
            if (r != NULL) r->aux_flags |= PX_AUX_SCRIPT_FLUSH;
            /* queued: Redis runs it at EXEC */
            if (in_multi) c->txn_script_flush = 1;
        }
    }

    if (pc->cmdt == NULL) {
        /* Writes cannot be classified: nothing is cached either (hits and
         * fills need the table), except what filled before a reconnect,
         * which the tracking loss flushed. */
        return 0;
    }

    resp_buf keys;
    resp_buf_init(&keys);
    key_sink ks = {pc, in_multi ? &c->txn_keys : r != NULL ? &keys : NULL, in_multi, 0};
    int w = cmdtable_writes(pc->cmdt, argc, a, invalidate_now, &ks);
    /* a key not recorded for the reply (no memory): as a write of keys
     * unknown, the reply flushes all */
    if (ks.keys != NULL && ks.keys->failed) w = CMDT_WRITES_UNKNOWN;
    /* Change data without being writes by Redis's flags: a role change
     * (C6) or a DEBUG RELOAD/POPULATE. */
    if (argc >= 1 && (resp_arg_is(a[0].ptr, a[0].len, "REPLICAOF") || resp_arg_is(a[0].ptr, a[0].len, "SLAVEOF") ||
                      resp_arg_is(a[0].ptr, a[0].len, "FAILOVER") || resp_arg_is(a[0].ptr, a[0].len, "DEBUG")))
        w = CMDT_WRITES_UNKNOWN;
    /* A permission change: what a user may read from the cache (C8) is
     * what Redis now lets it read, so start over. */
    if (resp_acl_changes(argc, a)) w = CMDT_WRITES_UNKNOWN;
    if (w == CMDT_WRITES_UNKNOWN) flush_for_write(pc, &a[0]);
    if (in_multi) {
        /* queued: its keys went to txn_keys, invalidated when EXEC's reply
         * comes, before the client sees it (C1) */
        if (w == CMDT_WRITES_UNKNOWN) c->txn_flush = 1;
        return ks.touched || w == CMDT_WRITES_UNKNOWN;
    }
    if (r != NULL && u != NULL && u->owner == NULL && w == CMDT_WRITES_NOTHING && reads_only(pc, argc, a))
        r->aux_flags |= PX_AUX_READ;
    if (r != NULL) {
        if (w == CMDT_WRITES_UNKNOWN) {
            r->aux_flags |= PX_AUX_FLUSH;
            flush_hold(pc, c, r);
        }
        if (keys.len) {
            r->aux = keys.data; /* ownership moves to r */
            r->aux_len = keys.len;
            r->aux_flags |= PX_AUX_INVAL;
            return 1;
        }
    }
    resp_buf_deinit(&keys);
    return ks.touched || w == CMDT_WRITES_UNKNOWN;
}

/* ------------------------------------------------------------------------ */
/* replies */

static void invalidate_records(struct px_caching *pc, const char *p, size_t n) {
    cache_keyref refs[64];
    size_t off = 0, m = 0;
    while (off + 4 <= n) {
        uint32_t klen;
        memcpy(&klen, p + off, 4);
        off += 4;
        if (off + klen > n) break;
        refs[m++] = (cache_keyref){p + off, klen};
        off += klen;
        if (m == 64) {
            cache_invalidate_keys(pc->cache, refs, m);
            m = 0;
        }
    }
    if (m > 0) cache_invalidate_keys(pc->cache, refs, m);
    reclaim_later(pc);
}

/* Parses a bulk or nil reply frame. Returns 1 (bulk, in *val and *vlen), 2 (nil),
 * 0 (anything else: not cacheable, C7). */
static int bulk_or_nil(const char *d, size_t len, const char **val, size_t *vlen) {
    size_t next = 0; /* not set when the frame is no bulk */
    int k = resp_read_bulk(d, len, 0, val, vlen, &next);
    return next == len ? k : 0;
}

static int starts_with(const char *d, size_t len, const char *p) {
    size_t n = strlen(p);
    return len >= n && memcmp(d, p, n) == 0;
}

/* One element of an MGET reply at *at: bulk (1, with *val, *vlen) or nil
 * (2); 0 when it is neither or runs past len. */
static int next_element(const char *d, size_t len, size_t *at, const char **val, size_t *vlen) {
    size_t next;
    int k = resp_read_bulk(d, len, *at, val, vlen, &next);
    if (k != 0) *at = next;
    return k;
}

/* Are the plan's cached values still the entries they were taken from?
 * (Checked only when something was invalidated or flushed since.) Equal
 * bytes are not enough: a value changed and changed back, and filled
 * again, while Redis read the rest, was not valid all that time (an ABA:
 * the merge could show what Redis never held). An entry filled since the
 * plan (or in its millisecond) counts as another. */
static int plan_still_cached(struct px_caching *pc, const mget_hdr *h, char *plan, size_t plen, int64_t now) {
    plan_item it;
    for (size_t at = sizeof *h; plan_next(plan, plen, &at, &it);) {
        const char *v;
        size_t vl;
        int nil;
        if (!it.cached) continue;
        if (!cache_peek_filled_before(pc->cache, h->part, (int)h->db, CACHE_KIND_GET, it.key, it.klen, "", 0,
                                      h->taken_ms, now, &v, &vl, &nil) ||
            nil != it.nil || vl != it.vlen || (vl > 0 && memcmp(v, it.val, vl) != 0))
            return 0;
    }
    return 1;
}

/* An MGET's reply: fills its keys, and merges it with the plan's cached
 * values into *out (returns 1), unless nothing was cached (returns 0: the
 * reply is the client's as it is). When a cached value was invalidated, or
 * the cache flushed, while the rest was read, the merge could show what
 * Redis never held (C4, C5, C10): *out is then the MGET of every key, to be
 * sent again in its place (returns PX_CACHING_RESEND). */
static int mget_reply(struct px_caching *pc, px_server *srv, px_req *r, const char *data, size_t len, resp_buf *out) {
    mget_hdr h;
    char *plan = r->aux;
    size_t plen = r->aux_len, at = 0;
    long long m = -1;
    memcpy(&h, plan, sizeof h);
    at = resp_read_int_line(data, len, 0, '*', &m); /* "*m\r\n" */
    int ok = m == (long long)h.nmiss;
    if (ok) {
        /* check the whole reply first: a fill must not take a value from a
         * reply that turns out malformed further on */
        size_t p = at;
        const char *v;
        size_t vl;
        for (long long i = 0; i < m && ok; i++) ok = next_element(data, len, &p, &v, &vl) != 0;
        ok = ok && p == len;
    }
    int merge = ok && h.nmiss < h.n;
    int64_t now = px_now_ms();
    /* An unanswered PING (keep-alive, barrier), however long: Redis's part
     * may have been read after a write whose invalidation is still on its
     * way (inv_ping_hold_ms), so the cached part may be older than it. A
     * cached value whose key has a TTL may have expired while Redis read
     * the rest, with no invalidation (Redis sends one only when it deletes
     * the key). */
    /* ... Or Redis's part came from another server than the one the cached
     * part is kept coherent with (answered_off_server): a mix neither
     * held. Or the invalidation connection has bytes not handled yet
     * (inv_unread: libevent reads it 16 KB at a time, and a burst of
     * invalidations takes more than one pass): Redis wrote them before
     * this reply, and one may purge a cached value of the plan. Tracking
     * per read, so may a tracked connection's end not handled yet
     * (news_unread; review-modes M2). */
    int off_server = answered_off_server(r);
    int resend = merge && (off_server || inv_ping_hold_ms(pc->inv) != 0 ||
                           ((h.seq != change_seq(pc) || h.may_expire) && !plan_still_cached(pc, &h, plan, plen, now)) ||
                           news_unread(pc, srv));
    if (resend) merge = 0;
    if (merge) resp_enc_array(out, h.n);
    plan_item it;
    /* the PTTLs asked for its fills, in the order of its keys */
    px_req *next_ttl = r->up != NULL ? r->up->head : NULL;
    for (size_t pp = sizeof h; plan_next(plan, plen, &pp, &it);) {
        if (it.cached) {
            if (merge) plan_enc_cached(out, &it, (int)h.proto);
            continue;
        }
        uint64_t token;
        memcpy(&token, it.token_at, 8);
        px_req *t = NULL;
        int asked = token && ttl_wanted(pc, CACHE_KIND_GET, it.key, it.klen);
        if (asked) {
            t = next_ttl;
            next_ttl = t != NULL ? t->next_up : NULL;
        }
        if (!ok || off_server) {
            if (token) cache_fill_abort(pc->cache, token, h.part, (int)h.db, CACHE_KIND_GET, it.key, it.klen, "", 0);
            if (!ok) continue;
            token = 0;
        }
        const char *v = NULL;
        size_t vl = 0, start = at;
        int k = next_element(data, len, &at, &v, &vl);
        if (merge) resp_buf_append(out, data + start, at - start);
        if (token == 0) continue;
        /* MGET reads a key of another type as nil, where GET answers
         * WRONGTYPE: only a value is a GET's answer (C7) */
        if (k == 2)
            cache_fill_abort(pc->cache, token, h.part, (int)h.db, CACHE_KIND_GET, it.key, it.klen, "", 0);
        else
            fill_or_wait(pc, srv, asked, t, token, h.part, h.db, CACHE_KIND_GET, it.key, it.klen, "", 0, v, vl, 0);
    }
    if (resend) {
        /* the fills above stand (their tokens guard them); the client gets
         * what Redis answers for all its keys, read now */
        resp_buf_reset(out);
        resp_enc_array(out, (long long)h.n + 1);
        resp_enc_bulk(out, "MGET", 4);
        for (size_t pp = sizeof h; plan_next(plan, plen, &pp, &it);) resp_enc_bulk(out, it.key, it.klen);
        free(r->aux);
        r->aux = NULL;
        r->aux_len = 0;
        r->aux_flags &= ~(unsigned)PX_AUX_MGET;
        pc->mget_resent++;
        return PX_CACHING_RESEND;
    }
    if (h.nmiss < h.n && !ok && len > 0 && data[0] != '-' && data[0] != '!') {
        /* not what Redis sends for an MGET: the client must not get an
         * array of the wrong length as if it were its reply */
        resp_buf_reset(out);
        resp_enc_error(out, "ERR sidecache: unexpected reply to MGET from upstream");
        return 1;
    }
    return merge;
}

/* A forwarded lookup script's reply: the dentry it read, the inode's attr
 * when nothing was invalidated meanwhile (its key was not known when the
 * request was sent, so no fill token guards it), what Redis holds. */
static void lookup_reply(struct px_caching *pc, px_req *r, const char *data, size_t len) {
    lookup_id id;
    memcpy(&id, r->aux, sizeof id);
    const char *dkey = r->aux + sizeof id, *name = dkey + id.dklen;
    uint64_t ino = 0;
    const char *attr = NULL;
    size_t alen = 0;
    int64_t now = px_now_ms();
    int res = px_lookup_parse_reply(data, len, &ino, &attr, &alen);
    uint64_t token = r->tag.fill_token;
    r->tag.fill_token = 0;
    int same_scripts = id.gen == px_lookup_generation(pc->lookup);
    /* nothing learned, nothing filled: from another server, or sidecache's
     * own error for a lost request (whose text, an address, could read as
     * a missing name's) */
    if (r->lost || answered_off_server(r)) res = PX_LOOKUP_OTHER;
    if (res == PX_LOOKUP_FOUND) {
        unsigned char be[8];
        for (int i = 0; i < 8; i++) be[i] = (unsigned char)(ino >> (56 - 8 * i));
        if (same_scripts) px_lookup_set_loaded(pc->lookup, (int)id.idx, 1);
        if (token)
            cache_fill_complete(pc->cache, token, id.part, (int)id.db, CACHE_KIND_LOOKUP, dkey, id.dklen, name,
                                id.nlen, (const char *)be, 8, 0, now);
        char ikey[24];
        size_t iklen = px_lookup_inode_key(ino, ikey);
        /* Only where Redis tracks i<ino> by prefix: a script's own reads of
         * keys it does not declare are not tracked for its caller (default,
         * optin), so nothing would tell us when this attr changes. */
        if (pc->mode == PX_TRACKING_BCAST && id.seq == change_seq(pc) && ino < PX_LOOKUP_MAX_INODE &&
            cache_rules_match(&pc->rules, CACHE_KIND_GET, ikey, iklen) == CACHE_MATCH_NO_TTL) {
            uint64_t t = cache_fill_begin(pc->cache, id.part, (int)id.db, CACHE_KIND_GET, ikey, iklen, "", 0, now);
            if (t) cache_fill_complete(pc->cache, t, id.part, (int)id.db, CACHE_KIND_GET, ikey, iklen, "", 0, attr,
                                       alen, 0, now);
        }
        return;
    }
    if (res == PX_LOOKUP_MISSING) {
        if (same_scripts) {
            px_lookup_set_loaded(pc->lookup, (int)id.idx, 1);
            px_lookup_learn_missing(pc->lookup, (int)id.idx, (int)id.proto, data, len);
        }
        if (token)
            cache_fill_complete(pc->cache, token, id.part, (int)id.db, CACHE_KIND_LOOKUP, dkey, id.dklen, name,
                                id.nlen, NULL, 0, 1, now);
        return;
    }
    if (res == PX_LOOKUP_NOSCRIPT) px_lookup_set_loaded(pc->lookup, (int)id.idx, 0);
    if (token) cache_fill_abort(pc->cache, token, id.part, (int)id.db, CACHE_KIND_LOOKUP, dkey, id.dklen, name, id.nlen);
}

/* The slot of every cached key (the key-prefix's hash tag), or -1 when
 * any slot may hold one. */
static int volume_slot(const px_server *srv) {
    return cluster_prefix_slot(srv->cfg->key_prefix, strlen(srv->cfg->key_prefix));
}

/* A cluster node's MOVED for a slot the cache cannot hold a key of: with a
 * key-prefix hash tag every cached key is in that tag's slot, and a MOVED
 * for another (a client reading another master's key) tells nothing of
 * them. Without one, any slot may hold cached keys. */
static int moved_elsewhere(const px_server *srv, const char *data, size_t len) {
    int ours = volume_slot(srv);
    const char *to;
    long long slot;
    size_t tolen;
    return ours >= 0 && cluster_moved(data, len, &slot, &to, &tolen) == 0 && slot != ours;
}

/* An ASK of the volume's slot: the slot migrates (slotwatch.h). (A
 * TRYAGAIN names no slot: it may be another's, and the probe sees this
 * one's migration within tracking-keepalive-ms.) */
static int slot_migrating(const px_server *srv, const char *data, size_t len) {
    int ours = volume_slot(srv);
    long long slot;
    return ours >= 0 && cluster_ask(data, len, &slot) == 0 && slot == ours;
}

void px_caching_untagged_cluster(px_server *srv, const char *evidence) {
    if (srv->cluster_untagged || volume_slot(srv) >= 0) return;
    srv->cluster_untagged = 1;
    if (srv->caching != NULL) {
        flush_cache(srv->caching);
        px_warning("cache off: the upstream is a Redis Cluster node (%s) and key-prefix has no hash tag: a slot "
                   "of cached keys could migrate unseen, and a key written on its target would stay stale here; "
                   "set key-prefix {N} (README, Redis Cluster)", evidence);
    } else {
        px_notice("WATCH not answered ahead: the upstream is a Redis Cluster node (%s) and key-prefix has no "
                  "hash tag", evidence);
    }
}

void px_caching_note_reply(px_server *srv, const char *data, size_t len) {
    struct px_caching *pc = srv->caching;
    long long slot;
    const char *to;
    size_t tolen;
    /* Only a cluster node redirects (a script's error does not come here),
     * when its INFO could not say so (refused, or no cache to ask it) */
    if (len > 0 && data[0] == '-' && !srv->cluster_untagged && (pc == NULL || inv_server_id(pc->inv) == NULL) &&
        (cluster_ask(data, len, &slot) == 0 || cluster_moved(data, len, &slot, &to, &tolen) == 0))
        px_caching_untagged_cluster(srv, "it answered a redirection");
    if (pc != NULL && len > 0 && data[0] == '-' && slot_migrating(srv, data, len))
        px_caching_slot_unstable(srv, data, len);
    /* a client's command met a script past busy-reply-threshold: seen
     * sooner than at the next keep-alive */
    if (pc != NULL && starts_with(data, len, "-BUSY ")) redis_busy(srv, data, len);
    if (pc != NULL && starts_with(data, len, "-CLUSTERDOWN ")) cluster_down(srv, data, len);
    if (pc != NULL && len > 0 && data[0] == '-' &&
        (starts_with(data, len, "-LOADING") || starts_with(data, len, "-READONLY") ||
         starts_with(data, len, "-MASTERDOWN") ||
         (starts_with(data, len, "-MOVED ") && !moved_elsewhere(srv, data, len)))) {
        /* Redis is not (or no longer) the master we cached from (C6); a
         * cluster node answers MOVED for a slot it no longer holds (which
         * the upstream follows: upstream.c, follow.h) */
        flush_cache(pc);
        pc->flush_failover++;
    }
}

/* Purges r's keys (aux) again, unless they were purged when sent
 * (PX_AUX_PREPURGED) and the cache began no entry since: a fill of any of
 * them would have begun one (C3), so none can be cached; the one fill that
 * begins its entry at the reply (a lookup's inode) checks change_seq. */
static void purge_again(struct px_caching *pc, px_req *r) {
    uint64_t made = cache_get_stats(pc->cache)->placeholders_made;
    if ((r->aux_flags & PX_AUX_PREPURGED) && made == r->mark.purge_mark) {
        /* a lookup in flight names its inode only in its reply: it must
         * not fill what this write may have changed (change_seq) */
        pc->purges_skipped++;
        return;
    }
    invalidate_records(pc, r->aux, r->aux_len);
    r->mark.purge_mark = made;
}

/* A cacheable read's reply came from Redis: unless it is an error (NOPERM
 * above all), the user may send that read, and hits of its kind may answer
 * it. A lookup shows it when its script ran (found or missing). */
static void learn_read(struct px_caching *pc, px_server *srv, const px_req *r, const char *data, size_t len) {
    uint32_t part = r->learn >> 3, read = r->learn & 7;
    if (r->lost || part == 0 || part >= 66 || read < PX_READ_GET || read > PX_READ_LOOKUP ||
        r->learn_mark != px_acl_mark(srv) || len == 0 || answered_off_server(r))
        return;
    if (read == PX_READ_LOOKUP) {
        uint64_t ino;
        const char *attr;
        size_t alen;
        int res = px_lookup_parse_reply(data, len, &ino, &attr, &alen);
        if (res != PX_LOOKUP_FOUND && res != PX_LOOKUP_MISSING) return;
    } else if (resp_frame_is_error(data, len)) {
        return;
    }
    pc->read_ok[part][read - 1] = r->learn_mark;
}

int px_caching_on_reply(px_client *c, px_req *r, const char *data, size_t len, resp_buf *out) {
    struct px_caching *pc = c->srv->caching;
    if (pc == NULL) return 0;
    /* (a script's error, or one sidecache made for a lost request, says
     * nothing of Redis's role: but a lookup's, not PX_AUX_SCRIPT, does) */
    if (!(r->aux_flags & PX_AUX_SCRIPT) && !r->lost) {
        px_caching_note_reply(c->srv, data, len);
    } else if (!r->lost && len > 0 && data[0] == '-' && slot_migrating(c->srv, data, len)) {
        /* a script's ASK may be its own text: only the cache stops a while */
        px_caching_slot_unstable(c->srv, data, len);
    }
    if (r->learn) learn_read(pc, c->srv, r, data, len);
    if (r->aux_flags & PX_AUX_FILL) {
        uint32_t hdr[4];
        memcpy(hdr, r->aux, sizeof hdr);
        const char *key = r->aux + 16, *field = key + hdr[3];
        size_t flen = r->aux_len - 16 - hdr[3];
        const char *val = NULL;
        size_t vlen = 0;
        int k = bulk_or_nil(data, len, &val, &vlen);
        /* the PTTL sent behind it is next on its connection */
        int asked = (r->aux_flags & PX_AUX_TTL_NEXT) != 0;
        px_req *t = asked && r->up != NULL ? r->up->head : NULL;
        if (k == 0 || answered_off_server(r))
            cache_fill_abort(pc->cache, r->tag.fill_token, hdr[0], (int)hdr[1], (int)hdr[2], key, hdr[3], field, flen);
        else
            fill_or_wait(pc, c->srv, asked, t, r->tag.fill_token, hdr[0], hdr[1], (int)hdr[2], key, hdr[3], field, flen,
                         val, vlen, k == 2);
    }
    if (r->aux_flags & PX_AUX_INVAL) purge_again(pc, r);
    if (r->aux_flags & PX_AUX_FLUSH) flush_for_write(pc, &(resp_arg){"(reply)", 7});
    if (r->aux_flags & PX_AUX_LOOKUP) lookup_reply(pc, r, data, len);
    if ((r->aux_flags & PX_AUX_SCRIPT_LOAD) && len == 47 && data[0] == '$' &&
        r->mark.lookup_gen == px_lookup_generation(pc->lookup))
        px_lookup_set_loaded(pc->lookup, (int)r->tag.script - 1, 1);
    if (r->aux_flags & PX_AUX_SCRIPT_FLUSH) px_lookup_forget(pc->lookup);
    if (r->aux_flags & PX_AUX_MGET) return mget_reply(pc, c->srv, r, data, len, out);
    return 0;
}

void px_caching_on_reply_part(px_client *c, px_req *r) {
    struct px_caching *pc = c->srv->caching;
    if (pc != NULL && (r->aux_flags & PX_AUX_PREPURGED)) purge_again(pc, r);
}

void px_caching_txn_abandon(px_client *c) {
    struct px_caching *pc = c->srv->caching;
    if (pc != NULL && c->txn_keys.len > 0) invalidate_records(pc, c->txn_keys.data, c->txn_keys.len);
    if (pc != NULL && c->txn_flush) flush_for_write(pc, &(resp_arg){"(transaction dropped)", 21});
    /* freed, as Redis frees its queue at DISCARD: a client that discards a
     * long transaction would keep its size until its next EXEC */
    resp_buf_deinit(&c->txn_keys);
    c->txn_purged = 0;
    c->txn_flush = 0;
    c->txn_script_flush = 0;
}

void px_caching_txn_close(px_client *c, px_req *r) {
    px_caching_txn_prepurge(c);
    if (c->txn_keys.len > 0) {
        /* an EXEC names no key: its own record carries none (on_send) */
        free(r->aux);
        r->aux = c->txn_keys.data;
        r->aux_len = c->txn_keys.len;
        /* every key was purged by now, the first when the mark was taken:
         * a fill of any of them since begins an entry, which moves
         * placeholders_made past the mark (C3) */
        r->aux_flags |= PX_AUX_INVAL | PX_AUX_PREPURGED;
        r->mark.purge_mark = c->txn_purge_mark;
        resp_buf_init(&c->txn_keys);
    }
    /* (a key that could not be recorded made txn_flush: spent with it) */
    c->txn_keys.failed = 0;
    if (c->txn_flush) {
        r->aux_flags |= PX_AUX_FLUSH;
        flush_hold(c->srv->caching, c, r);
    }
    if (c->txn_script_flush) {
        px_lookup_forget(c->srv->caching->lookup);
        r->aux_flags |= PX_AUX_SCRIPT_FLUSH;
    }
    c->txn_purged = 0;
    c->txn_flush = 0;
    c->txn_script_flush = 0;
}

int px_caching_txn_ran_alone(px_client *c, px_req *q, const px_req *end) {
    struct px_caching *pc = c->srv->caching;
    if (pc == NULL || q->aux != NULL) return 0;
    if (end->aux_flags & PX_AUX_FLUSH) q->aux_flags |= PX_AUX_FLUSH;
    if (!(end->aux_flags & PX_AUX_INVAL) || end->aux_len == 0) return 0;
    q->aux = malloc(end->aux_len);
    if (q->aux == NULL) {
        flush_for_write(pc, &(resp_arg){"(transaction ran alone)", 23});
        return -1;
    }
    memcpy(q->aux, end->aux, end->aux_len);
    q->aux_len = end->aux_len;
    q->aux_flags |= PX_AUX_INVAL | PX_AUX_PREPURGED;
    q->mark.purge_mark = end->mark.purge_mark;
    return 0;
}

void px_caching_txn_prepurge(px_client *c) {
    struct px_caching *pc = c->srv->caching;
    if (pc == NULL || c->txn_keys.len <= c->txn_purged) return;
    /* the transaction's first purge: what the cache begins from now on may
     * hold one of its keys again (later purges must not move the mark: a
     * key purged before them may have been filled in between) */
    if (c->txn_purged == 0) c->txn_purge_mark = cache_get_stats(pc->cache)->placeholders_made;
    invalidate_records(pc, c->txn_keys.data + c->txn_purged, c->txn_keys.len - c->txn_purged);
    c->txn_purged = c->txn_keys.len;
}

/* ------------------------------------------------------------------------ */
/* numbers (proxy/stats.h) */

void px_caching_collect(px_server *srv, px_stats *s) {
    struct px_caching *pc = srv->caching;
    if (pc == NULL) return;
    const cache_stats *st = cache_get_stats(pc->cache);
    const inv_stats *is = inv_get_stats(pc->inv);
    s->cache_enabled = 1;
    s->tracking_active = (uint64_t)px_caching_active(srv);
    s->tracking_state = inv_state_name(inv_get_state(pc->inv));
    s->tracking_mode = tracking_mode_names[pc->mode];
    s->tracking_last_error = is->last_error;
    s->cache_hits = st->hits;
    s->cache_misses = st->misses;
    s->cache_bypassed_in_flight = pc->bypassed;
    s->cache_bypassed_flush = pc->bypassed_flush;
    s->cache_held_keepalive = pc->held_ping;
    s->cache_sent_past_hold = pc->past_hold;
    s->cache_held_unread = pc->held_unread;
    s->cache_sent_unread = pc->sent_unread;
    s->cache_script_hits = pc->script_hits;
    s->cache_script_misses = pc->script_misses;
    s->cache_mget_hits = pc->mget_hits;
    s->cache_mget_partial = pc->mget_partial;
    s->cache_mget_keys_cached = pc->mget_keys_cached;
    s->cache_mget_resent = pc->mget_resent;
    s->cache_fills = st->fills;
    s->cache_fills_rejected = st->fills_rejected;
    s->cache_fills_too_big = st->fills_too_big;
    s->cache_ttl_asked = pc->ttl_asked;
    s->invalidation_messages = is->messages;
    s->invalidation_keys = is->keys;
    s->cache_invalidations = st->invalidations;
    s->cache_keys_purged = st->keys_purged;
    s->cache_flushes = st->flushes;
    s->cache_flushes_tracking_lost = pc->flush_tracking;
    s->cache_flushes_null_invalidation = pc->flush_null;
    s->cache_flushes_write_unknown_keys = pc->flush_write;
    s->cache_flushes_failover = pc->flush_failover;
    s->cache_flushes_acl_changed = pc->flush_acl;
    s->cache_flushes_caching_refused = pc->flush_caching;
    s->cache_tracking_refused = pc->tracking_refused;
    s->cache_flushes_slot_migrating = pc->flush_slot;
    s->cache_flushes_redis_busy = pc->flush_busy;
    s->cluster_slot_migrating = (uint64_t)pc->slot_unstable;
    s->cache_entries = st->entries;
    s->cache_pending_fills = st->pending;
    s->cache_reclaiming = st->reclaiming;
    s->cache_used_bytes = st->used_bytes;
    s->cache_max_bytes = (uint64_t)srv->cfg->cache_max_memory;
    s->cache_evictions = st->evictions;
    s->cache_expired = st->expired;
    s->tracking_connects = is->connects;
    s->tracking_losses = is->losses;
    s->tracking_pings_sent = is->pings_sent;
    s->tracking_pings_answered = is->pings_answered;
    s->tracking_pings_lost = is->pings_lost;
    s->tracking_stalls = is->stalls;
}
