/*
 * proxy/caching.h — the cache as the router sees it: which requests are
 * hits, which replies fill, which writes invalidate what, and the
 * invalidation connection that keeps it coherent.
 *
 * The rules of the consistency contract (docs/CONSISTENCY.md) and where
 * each is kept:
 *   C1 read-your-writes: px_caching_on_send invalidates the keys a write
 *      declares when it is sent, and px_caching_on_reply again before its
 *      reply is relayed; a write whose keys cannot be known empties the
 *      cache both times. A transaction's queued writes are recorded when
 *      queued (nothing runs before EXEC) and invalidated when EXEC's reply
 *      comes. A client with requests in flight gets no hits, so a
 *      pipelined read after its own write never overtakes the write. A
 *      tunnel, whose replies are not matched, relays them behind a
 *      barrier once it wrote (px_caching_barrier).
 *   C2 no hits under WATCH or in MULTI: hits and fills only for clients in
 *      the shared mode outside a local transaction (WATCH pins the client;
 *      px_client_dispatch hands a MULTI kept on the shared connection to
 *      txn.c before it asks the cache).
 *   C3 race-free fills: fill tokens (cache/cache.h).
 *   C4/C5 loss or null invalidation flush: the tracking callbacks.
 *   C6 failover replies (LOADING, READONLY, MASTERDOWN) flush.
 *   C7 only bulk or nil replies fill.
 *   Keys with a TTL: a fill whose rules allow one asks Redis (PTTL) and
 *      the entry ends when the key expires (see "keys with a TTL").
 *   C8 the cache is partitioned by the upstream user of the client.
 *   C9 bounded memory: cache/cache.h.
 *   C10 bounded staleness: a hit waits for the PINGs unanswered when its
 *      read came (inv_hold_mark), and a turn of the loop while the
 *      invalidation connection has bytes not handled (inv_unread).
 */
#ifndef SIDECACHE_PROXY_CACHING_H
#define SIDECACHE_PROXY_CACHING_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "protocol/cmdtable.h"
#include "protocol/resp.h"
#include "proxy/server.h"

struct px_client;
struct px_req;

/* Sets up the cache, its rules and the invalidation connection from
 * srv->cfg. Returns 0, or -1 after logging why (bad rules). With
 * cache-max-memory 0 there is no cache, and nothing here costs anything. */
int px_caching_init(px_server *srv);
void px_caching_deinit(px_server *srv);
/*
 * --test-config: builds the cache rules from cfg as a start does, so that a
 * rule set a start would refuse (too many rules, a pattern too long with
 * key-prefix put before it) is refused here too. With f not NULL, writes the
 * effective cache as "# " comment lines (the rules the profile and the
 * cache-rule lines give, key-prefix applied; the tracking mode and
 * prefixes; the lookup scripts), or why it is off. Returns 0, or -1 with
 * the reason in err.
 */
int px_caching_check_config(const px_config *cfg, FILE *f, char *err, size_t errlen);
/* Applies srv->cfg's cache-max-memory, cache-max-value and cache-ttl now
 * (SIGHUP); a smaller size evicts at once. */
void px_caching_reconfigure(px_server *srv);
/* The upstream URL's user or password changed (SIGHUP): the invalidation
 * connection logs in with srv->cfg's from its next connect. */
void px_caching_credentials_changed(px_server *srv);

/* The command table learned from Redis, or NULL (not yet, or no cache). */
const cmdtable *px_caching_cmdtable(const px_server *srv);

/* Whether hits and fills are allowed now (tracking active, table known). */
int px_caching_active(const px_server *srv);

/* What a cacheable read is (px_caching_try_hit's *cacheable). */
enum px_read {
    PX_READ_NONE = 0,
    PX_READ_GET,     /* GET: one entry */
    PX_READ_HGET,    /* HGET: one entry */
    PX_READ_MGET,    /* MGET: one entry per key; only the keys not cached go */
    PX_READ_LOOKUP,  /* a lookup script (proxy/lookup.h) */
};

/*
 * A request of a client in the shared mode. Returns 1 if it was answered
 * from the cache (the reply is written), 0 if it must go to Redis; then
 * *cacheable (enum px_read) says whether it is a cacheable read
 * (px_caching_on_send makes its fills). For PX_READ_MGET, what is sent is
 * px_caching_mget_request's MGET, not the client's. Or PX_CACHING_WAIT: a
 * read the cache would answer, which must wait until the PINGs unanswered
 * on the invalidation connection when it came (keep-alive, barrier) are
 * answered (tracking.h, inv_hold_mark), or one turn of the loop while that
 * connection has bytes not handled (inv_unread); then px_clients_ping_wake
 * calls back.
 */
enum { PX_CACHING_WAIT = 3 };
int px_caching_try_hit(struct px_client *c, int *cacheable);

/* The MGET to send for the request px_caching_try_hit just classified as
 * PX_READ_MGET: its keys that are not cached, in order. Valid until the
 * next call into this module. */
void px_caching_mget_request(struct px_client *c, const char **data, size_t *len);

/*
 * A request is about to be sent to Redis as r (or, with r == NULL, through
 * a tunnel, where no reply will be matched). Begins r's fill when it is a
 * cacheable read, or invalidates what it writes (and records it in r, or in
 * the client's transaction when in_multi, for the reply). Returns 1 when
 * it writes a key the cache may hold, or keys it cannot name (a tunnel
 * then holds Redis's replies behind a barrier: px_caching_barrier).
 */
int px_caching_on_send(struct px_client *c, struct px_upstream *u, struct px_req *r, int cacheable, int in_multi);

/*
 * C1 where no reply is matched (a tunnel): a write there is purged when
 * sent, but a read that Redis ran before it may still fill the old value
 * when its reply comes after the write's. What Redis sends such a tunnel
 * is relayed only once a barrier (a PING on the invalidation connection,
 * inv_barrier) sent after it arrived is answered: by then the
 * invalidations of every write it answers are in, and a fill that raced
 * them was refused (C3). Returns the barrier's number, or 0 when none is
 * needed (no cache, tracking not on: nothing is served from the cache).
 * Waiters are woken with the hits held for the keep-alive
 * (px_upstream_barrier_wake).
 */
uint64_t px_caching_barrier(px_server *srv);
int px_caching_barrier_passed(const px_server *srv, uint64_t seq);

/* A request sent with PX_AUX_FLUSH (px_req.flush_hold) is released:
 * answered, or lost. Hits resume once a barrier sent then has passed. */
void px_caching_flush_released(px_server *srv);

/* The reply to r arrived: fill or invalidate before it is relayed. Also
 * looks for replies that mean Redis changed role (C6). Returns 1 when the
 * client must get *out instead of data (an MGET merged with the values
 * that were cached), 0 to relay data as it is, or PX_CACHING_RESEND when
 * *out is a request to send again as r, whose reply the client gets (an
 * MGET whose cached values were invalidated while the rest was read). */
enum { PX_CACHING_RESEND = 2 };
int px_caching_on_reply(struct px_client *c, struct px_req *r, const char *data, size_t len, resp_buf *out);

/* The reply to a PX_REQ_TTL (or the error it failed with): completes the
 * fill that waited for it, if any, ending when the key expires. */
void px_caching_on_ttl_reply(px_server *srv, struct px_req *t, const char *data, size_t len);

/* The upstream is a Redis Cluster node (evidence: how that is known, for
 * the log). Without a hash tag in key-prefix, cached keys may be in any
 * slot, and a migration of one would go unseen (slotwatch.h watches the
 * tag's slot): a key written on the target sends no invalidation, and a nil
 * cached here would stay. The cache is then emptied and stays off, and
 * WATCH is not answered ahead (a key of another slot gets MOVED or
 * CROSSSLOT). Once only; nothing with a hash-tag key-prefix. */
void px_caching_untagged_cluster(px_server *srv, const char *evidence);

/* Any reply with nothing else to learn (a command queued in MULTI): only
 * the role-change errors matter (C6). */
void px_caching_note_reply(px_server *srv, const char *data, size_t len);

/* A transaction was dropped without an EXEC or DISCARD sent for it (a
 * local one's DISCARD or EXECABORT, RESET, a refused MULTI), with every
 * reply of it in: its queued writes' keys are purged (whatever of it ran,
 * if Redis refused a MULTI, has run) and forgotten. */
void px_caching_txn_abandon(struct px_client *c);

/* The EXEC (or DISCARD) ending a client's transaction was sent as r: what
 * is left of the queued writes' keys is purged now, and the keys go with
 * r, for its reply to purge them again before it is relayed (C1). They go
 * with r, not with the client: a pipelined next transaction may queue
 * (and discard) before this one's reply comes. Call it once the
 * transaction is on its way, so that Redis runs it during the purge. */
void px_caching_txn_close(struct px_client *c, struct px_req *r);
/* Redis refused the MULTI of a transaction whose EXEC or DISCARD, end,
 * was sent already (px_caching_txn_close gave it the keys): the commands
 * taken as queued, q, run alone, and each reply of q must purge those keys
 * as end's would, before it is relayed (C1). Returns 0, or -1 when out of
 * memory (then the cache is emptied now: no reply of q is relayed first). */
int px_caching_txn_ran_alone(struct px_client *c, struct px_req *q, const struct px_req *end);

/* A reply of a run of r other than its last is relayed: when r carries
 * keys purged when sent (PX_AUX_PREPURGED: a MULTI Redis refused made its
 * commands plain ones, px_txn_state_refused) and the cache began an entry
 * since, they are purged before this reply reaches the client (C1). */
void px_caching_on_reply_part(struct px_client *c, struct px_req *r);

/* Purges the keys queued since the last call (c->txn_purged): early, while
 * Redis still runs the transaction. EXEC's reply purges them all again
 * (C1: a read between now and then may fill the old value), unless the
 * cache began no entry since the first of them was purged: then none can
 * be cached. The tracking message that Redis sends just before that reply
 * finds them gone too: the purge work is off the path from EXEC to its
 * reply. */
void px_caching_txn_prepurge(struct px_client *c);

/* Once a second: gives back what one large MGET made its buffers hold. */
void px_caching_cron(px_server *srv);

/* ACL LIST on Redis is another (proxy/aclwatch.h), or was read the first
 * time (first): the cache is emptied and permissions are learned anew. */
void px_caching_acl_changed(px_server *srv, int first);

/* tracking-mode default/optin: a new upstream connection turns tracking
 * on, redirected to the invalidation connection (once its INFO server is
 * answered, when asked: px_caching_upstream_identified); one whose reads
 * filled the cache empties it when lost (C4). No-ops in bcast mode. */
void px_caching_on_connect(px_server *srv, struct px_upstream *u);
void px_caching_on_upstream_lost(px_server *srv, struct px_upstream *u);

/* tracking-mode default/optin: the epoch a shared connection's tracking
 * must have for its reads to fill (px_upstream.tracked_epoch); 0 in bcast
 * mode, without a cache, or while tracking is off. */
uint64_t px_caching_tracked_epoch(const px_server *srv);

/* Is this request an EVALSHA of a known JuiceFS lookup script? Its own
 * only error is a name's ENOENT: any other (BUSY, LOADING, MOVED ...) is
 * Redis's, as for a GET, in every tracking mode. */
int px_caching_is_lookup_call(const px_server *srv, int argc, const resp_arg *argv);
/* default/optin: Redis refused u's CLIENT TRACKING ON REDIRECT, sent for
 * tracking epoch `epoch` (err, its error frame): u's reads fill nothing.
 * Warned of once; asked again at a cron when the refusal was a passing
 * state (BUSY, LOADING), or once the ACL changed. */
void px_caching_tracking_refused(px_server *srv, struct px_upstream *u, uint64_t epoch, const char *err,
                                 size_t len);
/* optin: a cacheable read about to go to u is preceded by CLIENT CACHING YES. */
void px_caching_before_read(struct px_client *c, struct px_upstream *u, int cacheable);
/* ... which Redis refused (err, its error frame): Redis does not track the
 * read behind it, whose fill has begun, nor u's next reads. */
void px_caching_caching_refused(px_server *srv, struct px_upstream *u, const char *err, size_t len);

/* The volume's cluster slot (proxy/slotwatch.h): an ASK of it (data, the
 * error frame) makes it unstable, which empties the cache, and
 * keeps it off; a probe sent when px_caching_slot_events was events_before
 * and answered by a master that holds it, not migrating, makes it stable
 * unless another ASK came since; without probes, ms after the last ASK. */
int px_caching_slot_migrating(const px_server *srv);
uint64_t px_caching_slot_events(const px_server *srv);
void px_caching_slot_unstable(px_server *srv, const char *data, size_t len);
void px_caching_slot_stable(px_server *srv, uint64_t events_before);
void px_caching_slot_stable_after(px_server *srv, int64_t ms);

/* The upstream is another Redis now (a failover): empties the cache and
 * moves the invalidation connection there. */
void px_caching_upstream_moved(px_server *srv);

/* Whether a data connection's handshake asks which server it reached
 * (INFO server's run_id): while caching, unless tracking-upstream names
 * another path for the invalidation connection. */
int px_caching_wants_server_id(const px_server *srv);
/* u's INFO server was answered: its server's run_id in u->server_id, or
 * "" (refused; u->server_id_again after a transient error). One that is
 * not the invalidation connection's (inv_server_id, while tracking is on)
 * marks u other_server (its reads fill nothing), empties the cache and
 * moves every connection to the address again (px_upstreams_move_again);
 * otherwise, in tracking-mode default/optin, a shared u turns tracking on
 * (px_caching_on_connect left it to this). */
void px_caching_upstream_identified(px_server *srv, struct px_upstream *u);

/* Fills the cache's numbers of a stats snapshot (proxy/stats.h). */
struct px_stats;
void px_caching_collect(px_server *srv, struct px_stats *s);

#endif
