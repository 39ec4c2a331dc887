/*
 * proxy/upstream.h — connections to Redis, grouped in pools.
 *
 * A pool serves one identity: (user, password, db, protocol). Its shared
 * connections are pipelined and multiplexed: any number of clients write
 * requests into one connection, and replies, which Redis sends in order, are
 * matched to the FIFO of px_req records:
 *
 *      client A ──GET a──┐                       ┌──► reply a ──► A's slot
 *      client B ──GET b──┼──► upstream conn ──► Redis ──► reply b ──► B's slot
 *      client A ──SET c──┘     pending: a, b, c  └──► reply c ──► A's slot
 *
 * A connection's first requests are its handshake (HELLO 3 or AUTH,
 * SELECT; then INFO server when caching, and a PING that probes access
 * when it has no credentials), written before anything else; their replies
 * are swallowed. An error to HELLO, AUTH or SELECT fails every request
 * queued behind with that same error, which is exactly what the client
 * would have seen from Redis; one to INFO or the probe only teaches, unless
 * it says Redis is full.
 *
 * A connection can be taken out of the pool for one client (pinned): for a
 * transaction, a blocking command, or state that must not leak to others.
 * A pinned connection that ends clean goes back to the pool's idle list;
 * one whose state cannot be known is closed. A tunnel is a pinned
 * connection whose bytes are relayed without matching (pub/sub, MONITOR,
 * CLIENT REPLY OFF, the client's own tracking).
 *
 * Connections are made on demand. A connect is over when TCP, and TLS for
 * rediss://, are: one not over within upstream-connect-timeout (a Redis
 * host that drops SYNs) fails as a refused one does, rather than wait for
 * the kernel's two minutes. After a failed connect the pool backs off
 * (100 ms doubling to 2 s); meanwhile requests fail at once with a clear
 * error instead of waiting, and the first request after the back-off tries
 * again, so the proxy recovers by itself when Redis returns. With Sentinel,
 * a failed connect asks the sentinels where the master is, at once.
 */
#ifndef SIDECACHE_PROXY_UPSTREAM_H
#define SIDECACHE_PROXY_UPSTREAM_H

#include <stddef.h>
#include <stdint.h>

#include "protocol/info.h"
#include "protocol/resp.h"
#include "proxy/io.h"
#include "proxy/server.h"

struct event;
struct evbuffer;
struct px_client;

enum px_req_kind {
    PX_REQ_CLIENT = 0,  /* reply goes to the client's slot */
    PX_REQ_SELECT,      /* reply decides a session-state change (see client.c) */
    PX_REQ_AUTH,
    PX_REQ_HELLO,
    PX_REQ_CLIENT_LOCAL, /* CLIENT SETNAME, GETNAME or SETINFO, answered by the
                            proxy if Redis allows it (client.c; aux: the
                            answer) */
    PX_REQ_DISCARD,     /* internal request: reply dropped */
    PX_REQ_TRACKING,    /* internal: CLIENT TRACKING ON REDIRECT; +OK marks the
                           connection tracked for epoch tag.tracking_epoch */
    PX_REQ_CACHING,     /* internal: CLIENT CACHING YES before an optin read;
                           an error means Redis does not track the read
                           behind it (px_caching_caching_refused) */
    PX_REQ_BATCH,       /* the EXEC of a write batch: its reply is split among
                           the batched requests (proxy/batch.h) */
    PX_REQ_TXN_CTL,     /* internal: a MULTI or DISCARD sidecache put around
                           a block or a check: anything but +OK and the
                           connection goes (px_pool.txn_denied,
                           discard_denied) */
    PX_REQ_PROBE,       /* internal: PING, the access probe asked again while
                           srv->open_access is unknown; its reply teaches it */
    PX_REQ_TTL,         /* internal: PTTL of a key a read right before it
                           fills; the fill waits in its aux (caching.c) */
    PX_REQ_ACL_LIST,    /* internal: ACL LIST, the periodic check of
                           proxy/aclwatch.h */
    PX_REQ_SLOT_PROBE,  /* internal: EXISTS, the probe of proxy/slotwatch.h */
    PX_REQ_SERVER_ID,   /* internal: INFO server asked again, after the
                           handshake's met a transient error (BUSY) */
};

/* What a reply must do besides reaching its client: the cache's flags
 * are handled in caching.c, the others in client.c, txn.c and upstream.c. */
enum px_aux_flag {
    PX_AUX_FILL = 1 << 0,  /* aux: the entry's identity; tag.fill_token */
    PX_AUX_INVAL = 1 << 1, /* aux: keys to invalidate again */
    PX_AUX_FLUSH = 1 << 2, /* a write whose keys cannot be known */
    PX_AUX_INFO = 1 << 3,  /* INFO: append the sidecache section */
    PX_AUX_PREPURGED = 1 << 4, /* with INVAL: the keys were purged when sent;
                                  again only if the cache began an entry
                                  since (mark.purge_mark) */
    PX_AUX_MGET = 1 << 5,  /* aux: an MGET's merge plan (cached values, fills) */
    PX_AUX_LOOKUP = 1 << 6, /* aux: a lookup script's dentry identity; tag.fill_token */
    PX_AUX_SCRIPT_LOAD = 1 << 7, /* SCRIPT LOAD of lookup script tag.script - 1 */
    PX_AUX_SCRIPT_FLUSH = 1 << 8, /* SCRIPT FLUSH: no script is loaded any more */
    PX_AUX_TXN_CHECK = 1 << 9, /* a command queued in a local MULTI, checked by Redis */
    PX_AUX_UNWATCH = 1 << 10,  /* UNWATCH: +OK means the pool's user may send it
                                  (tag.acl_epoch: the ACL epoch when sent) */
    PX_AUX_WATCH = 1 << 11,    /* WATCH: the same, for WATCH */
    PX_AUX_WATCH_AHEAD = 1 << 12, /* WATCH or UNWATCH already answered +OK: Redis's reply
                                     confirms it, or closes the client */
    PX_AUX_ACL = 1 << 13,      /* runs an ACL command (or a transaction with
                                  one): srv->acl_epoch moves on at its reply */
    PX_AUX_BLOCK_EXEC = 1 << 14, /* the EXEC of a block sidecache made of a
                                    local transaction (see PX_REQ_TXN_CTL) */
    PX_AUX_TXN_STATE = 1 << 15, /* MULTI, EXEC, DISCARD or UNWATCH on a client's
                                   own connection, whose state the proxy took
                                   as changed when sent: an error leaves it
                                   unknown, and the connection is not reused */
    PX_AUX_MULTI_OPEN = 1 << 16, /* that MULTI opened transaction tag.txn_seq
                                    (px_client.txn_seq): refused, it did not */
    PX_AUX_CTL_DISCARD = 1 << 17, /* a PX_REQ_TXN_CTL that is a DISCARD */
    PX_AUX_TTL_NEXT = 1 << 18, /* with FILL: a PX_REQ_TTL follows it on its
                                  connection, and a value waits there */
    PX_AUX_PING = 1 << 19,     /* PING: a reply (not an error) means the pool's
                                  user may send it (tag.acl_epoch) */
    PX_AUX_ECHO = 1 << 20,     /* the same for ECHO */
    PX_AUX_DISCARD = 1 << 21,  /* DISCARD of a transaction on the client's own
                                  connection: nothing else is sent until its
                                  reply, for Redis keeps the transaction
                                  open if it refuses it (an ACL without
                                  DISCARD) */
    PX_AUX_HELLO_REFUSED = 1 << 22, /* a HELLO with an option Redis refuses
                                       (client.c cmd_state): that error means
                                       the options before it held */
    PX_AUX_CLUSTER_SLOTS = 1 << 23, /* CLUSTER SLOTS: the master of the
                                       key-prefix's slot is named as sidecache
                                       (protocol/cluster.h) */
    PX_AUX_SCRIPT = 1 << 24, /* EVAL, FCALL and kin: an error it returns is
                                the script's text, not Redis's state (no
                                failover flush, C6) */
    PX_AUX_READ = 1 << 25,   /* changes nothing (a cacheable read, a command
                                Redis flags readonly, a read-only script), on
                                a shared connection: lost with it, it gets
                                an error go-redis sends it again for
                                (up_fail_pending) */
    PX_AUX_BLOCK_QUEUED = 1 << 26, /* a command of a block sidecache made
                                      (px_block_send): its reply is dropped,
                                      but an error of Redis's state is kept
                                      (px_upstream.block_err) */
    PX_AUX_BLOCK_CLEAN = 1 << 27,  /* with BLOCK_EXEC: the client saw every
                                      command of the block queued */
    PX_AUX_BLOCK_DENYOOM = 1 << 28, /* with BLOCK_EXEC: one of them may use
                                       memory (client.h txn_denyoom) */
    PX_AUX_CHECK_DENYOOM = 1 << 29, /* with TXN_CHECK: the command checked
                                       may use memory */
    PX_AUX_BLOCK_BATCH = 1 << 30, /* the MULTI (PX_REQ_TXN_CTL) and the
                                     commands (BLOCK_QUEUED) of a write batch */
};

/*
 * One request in flight, and at the same time the client's reply slot for
 * it: the client keeps its slots in request order and writes a reply out
 * only when every earlier slot is written, so replies from different
 * upstream connections and local answers keep the order of the requests.
 */
typedef struct px_req {
    struct px_req *next_up;     /* FIFO of the upstream connection */
    struct px_req *next_slot;   /* FIFO of the client's reply slots */
    struct px_client *client;   /* NULL for PX_REQ_DISCARD */
    struct px_upstream *up;     /* the connection it was last sent on */
    struct evbuffer *early;     /* reply that arrived before its turn */
    int kind;
    int done;                   /* reply present (in early) */
    int pending;                /* still awaited from an upstream connection */
    int lost;                   /* the reply is sidecache's error: the connection
                                   was lost before Redis answered */
    unsigned aux_flags;         /* enum px_aux_flag */
    char *aux;                  /* owned; see px_aux_flag */
    size_t aux_len;
    /* What the reply needs to know of when or why the request was sent:
     * one member, chosen by kind and aux_flags. */
    union {
        uint64_t fill_token;    /* FILL, LOOKUP: the cache's fill token */
        uint64_t acl_epoch;     /* UNWATCH, WATCH, PING, ECHO, and a
                                   PX_REQ_TXN_CTL: srv->acl_epoch when sent */
        uint64_t txn_seq;       /* MULTI_OPEN: px_client.txn_seq it opened */
        uint64_t tracking_epoch; /* PX_REQ_TRACKING: the caching epoch */
        int64_t sent_ms;        /* PX_REQ_TTL: px_now_ms() when sent */
        uint64_t script;        /* SCRIPT_LOAD: the lookup script's index + 1 */
        uint64_t probe;         /* PX_REQ_SLOT_PROBE: PX_SLOTWATCH_PROBE or _NODES */
    } tag;
    union {
        uint64_t purge_mark;    /* PX_AUX_PREPURGED: the cache's placeholders_made
                                   when the first of those keys was purged */
        uint64_t key_digest;    /* PX_REQ_TTL: the digest of the key asked */
        uint64_t lookup_gen;    /* SCRIPT_LOAD: px_lookup_generation() when sent */
    } mark;
    uint32_t learn;             /* a cacheable read: partition << 3 | enum
                                   px_read, whose reply may show the user is
                                   allowed that read (caching.c); 0: none */
    uint64_t learn_mark;        /* px_acl_mark() when it was sent (made, for
                                   a record that is not a cacheable read) */
    int64_t sent_us;            /* when it was written (px_now_us) */
    /* Replies still awaited from Redis: 1, or more for a run (commands
     * queued in MULTI on a pinned connection, forwarded into one record by
     * px_upstream_extend: their +QUEUED replies only need relaying). All
     * but the last reach px_client_on_reply_part. */
    uint32_t replies_left;
    size_t req_bytes;           /* counted in its client's inflight_bytes */
    int run;                    /* a run that may still grow (client.c) */
    int local;                  /* a slot of replies made here, queued behind
                                   others: those made after it join it */
    int flush_hold;             /* a write of keys unknown: reads go to Redis
                                   until it is released (px_caching_flush_released) */
    int shared_load;            /* awaited on a shared connection: counted in
                                   srv->upstream_requests */
    int blocks;                 /* a blocking command (BLPOP ...) not queued in
                                   MULTI: Redis may hold its reply for ever */
} px_req;

/* What a request record costs in memory where it is counted against a
 * limit (a client's slots, upstream-output-limit): the record and the
 * allocator's and libevent's share around it. */
#define PX_REQ_COST (sizeof(px_req) + 64)

enum px_up_state { PX_UP_CONNECTING, PX_UP_HANDSHAKE, PX_UP_READY, PX_UP_CLOSED };

typedef struct px_pool {
    px_server *srv;
    struct px_pool *next;
    char *user;          /* NULL: no AUTH, or the one-argument AUTH form */
    char *pass;          /* NULL: no AUTH */
    int db;
    int proto;           /* 2 or 3 */
    struct px_upstream **shared;
    int nshared;
    struct px_upstream *idle;  /* clean connections ready to be pinned */
    int nidle;
    int refs;            /* clients whose session uses this pool */
    int refused;         /* Redis refused its identity (a failed AUTH): freed
                            as soon as no client uses it, not kept idle */
    int used;            /* a client asked for a connection since the last cron */
    int64_t last_used_ms;
    int backoff_ms;
    int64_t backoff_until_ms;
    char last_error[256];
    /* px_acl_mark() when Redis last let this identity UNWATCH (0: not
     * known); then an UNWATCH with nothing watched is answered here */
    uint64_t unwatch_epoch;
    /* the same for WATCH: then a WATCH may be answered ahead (txn.c) */
    uint64_t watch_epoch;
    /* px_acl_mark() when Redis refused this identity a MULTI that
     * sidecache added (its ACL denies it; what followed ran alone): then its
     * transactions and pipelined writes go to Redis as the client sent
     * them, without a local MULTI or a write batch */
    uint64_t txn_denied;
    /* the same for a DISCARD (a local MULTI's check needs it: no local
     * MULTI) and for an EXEC of a write batch (EXECABORT naming EXEC: no
     * batches) */
    uint64_t discard_denied, exec_denied;
    /* the same for PTTL: then reads of keys whose TTL a fill must know
     * (caching.c) do not fill, rather than ask again at every miss */
    uint64_t ttl_denied;
    /* px_acl_mark() when Redis last answered this identity's PING, ECHO (not
     * NOPERM), or DISCARD inside MULTI (+OK): then sidecache answers them */
    uint64_t ping_epoch, echo_epoch, discard_epoch;
    /* the same for CLIENT SETNAME, GETNAME, SETINFO (not NOPERM, NOAUTH) */
    uint64_t client_epoch[3];
} px_pool;

typedef struct px_upstream {
    px_server *srv;
    px_pool *pool;
    struct px_upstream *next_idle;
    int64_t idle_since_ms;     /* on the pool's idle list since (px_now_ms) */
    struct px_upstream *next_reap;
    px_io io;
    int state;
    int handshake_left;        /* handshake replies still to swallow */
    int probe_access;          /* an access probe is on its way: the handshake's
                                  last request, or a PX_REQ_PROBE */
    int server_id_left;        /* the handshake's INFO server answers when
                                  handshake_left is this (0: none asked) */
    int select_left;           /* the handshake's SELECT answers when
                                  handshake_left is this (0: none sent) */
    char server_id[INFO_RUN_ID_LEN + 1]; /* the run_id it gave ("": unknown) */
    int server_id_again;       /* INFO met a transient error (a script's
                                  BUSY): asked again each second, a
                                  PX_REQ_SERVER_ID (2: on its way), and its
                                  reads fill nothing meanwhile */
    int other_server;          /* not (known to be) on the invalidation
                                  connection's server: its reads fill
                                  nothing (px_caching_upstream_identified,
                                  px_upstreams_tracking_on) */
    px_req *head, *tail;       /* requests in flight, in order */
    int npending;
    resp_reply_parser rp;
    struct px_client *owner;   /* pinned to this client, or NULL (shared) */
    int tunnel;                /* relay bytes to owner without matching */
    int reset_awaited;         /* tunnel: the client sent RESET (reading nothing
                                  more), and the marker behind it is to be
                                  answered (px_upstream_send_reset_marker) */
    char reset_nonce[40];      /* that marker's */
    int reset_own;             /* ... behind sidecache's own RESET, whose
                                  +RESET is not relayed (px_upstream_send_reset_own) */
    int reset_held;            /* ... a +RESET held until the next frame
                                  shows whether it was that one */
    resp_buf held;             /* tunnel: bytes for Redis held back until no
                                  reply is awaited on it (px_upstream_send_alone) */
    int tunnel_wrote;          /* tunnel: a write of a key the cache may hold
                                  went on it; what Redis sends it is relayed
                                  behind a barrier from then on */
    uint64_t barrier_seq;      /* the barrier its unread input waits for (its
                                  reading paused), 0 if none */
    struct px_upstream *next_barrier, *prev_barrier; /* on srv->barrier_waiters meanwhile */
    int barrier_end, barrier_err; /* the connection ended (PX_IO_EOF or
                                     PX_IO_ERROR, errno) while its input
                                     waited: ended once that is relayed */
    struct sockaddr_storage sa; /* where it connected (a failed connect
                                   names it, not where the next one goes) */
    unsigned salen;
    int block_relay;           /* Redis refused the MULTI of the write batch
                                  being read: its commands ran alone, and
                                  their replies (block_replies, block_nreplies)
                                  are the EXEC's array (batch.h) */
    resp_buf block_replies;
    uint32_t block_nreplies;
    int block_relay_oom;       /* ... and a reply could not be kept */
    resp_buf block_err;        /* of the errors of Redis's state it gave
                                  commands of the block it is reading
                                  (PX_AUX_BLOCK_QUEUED), the one it checks
                                  first, for the block's EXEC: emptied at
                                  each MULTI sidecache sent */
    int shared_index;          /* index in pool->shared, or -1 */
    uint64_t id;               /* for logs */
    uint64_t tracked_epoch;    /* tracking on, for this caching epoch (0: off) */
    uint64_t caching_refused;  /* px_acl_mark() when Redis refused it CLIENT
                                  CACHING YES (optin): its reads fill nothing
                                  while that mark holds */
    uint64_t tracking_refused; /* px_acl_mark() when Redis refused it CLIENT
                                  TRACKING (default/optin: its reads fill
                                  nothing); asked again once the mark moves */
    int tracking_again;        /* ... refused for a while only (BUSY,
                                  LOADING): asked again at the next cron */
    int filled;                /* a fill was read on this connection */
    uint64_t reads;            /* read events: progress, for upstream-timeout */
    uint64_t reads_seen;       /* ... as the last cron saw it */
    int idle_ticks;            /* crons with requests pending and no read since */
    uint64_t reads_pinged;     /* reads as the last cron's keep-alive saw
                                  them (up_ping_idle_tracked) */
    int named;                 /* a CLIENT SETNAME may have named it on Redis */
    int close_written;         /* close once its output is written; on
                                  srv->orphans meanwhile */
    struct px_upstream *next_orphan;
    int retired;               /* Redis moved (px_upstreams_move): takes no new
                                  request, closes once the replies it awaits
                                  are in; shared: on srv->retired meanwhile;
                                  pinned: when its client gives it back */
    struct px_upstream *next_retired;
    struct event *connect_ev;  /* upstream-connect-timeout's deadline while the
                                  connect is not over, or NULL */
    int connect_timeout_ms;    /* ... as it was when the connect began */
} px_upstream;

/* Finds or creates the pool of an identity; takes a reference. NULL on OOM. */
px_pool *px_pool_ref(px_server *srv, const char *user, const char *pass, int db, int proto);
/* p's user was just denied something (txn_denied, discard_denied,
 * exec_denied set): the user's other pools learn it too, as pools made
 * later do (an ACL is the user's, whatever the database or protocol). */
void px_pool_denied(px_pool *p);
void px_pool_unref(px_pool *p);

/*
 * The shared connection that a client with this id uses (so that one
 * client's requests stay in order on one connection). Connects if needed.
 * Returns NULL while the pool backs off or a connect failed at once; then
 * p->last_error says why.
 */
px_upstream *px_pool_shared(px_pool *p, uint64_t client_id);
/* A shared connection ready, with nothing awaited or waiting to be
 * written, of the pool or else of another of its user (another database
 * or protocol), for a command that depends on neither; NULL: none. */
px_upstream *px_pool_idle_shared(px_pool *p);

/* Sends sidecache's own request of kind (data, len: the command, copied;
 * probe: its tag.probe, for its reply) on a shared connection of its
 * configured identity (the upstream URL's credentials, as the invalidation
 * connection's): the ACL checks, the slot's probes. Returns 0, or -1 when
 * it could not be sent. */
int px_upstream_send_own(px_server *srv, int kind, uint64_t probe, const char *data, size_t len);

/* A connection for one client alone: an idle clean one, or a new one.
 * Returns NULL as px_pool_shared does. */
px_upstream *px_pool_pin(px_pool *p, struct px_client *owner, int tunnel);

/* Closes u once what is queued for it is written to Redis (at once when
 * nothing is): its client left, and Redis must still read what it sent. */
void px_upstream_close_written(px_upstream *u, const char *why);

/* Gives a pinned connection back: to the idle list when clean, else closed. */
void px_upstream_unpin(px_upstream *u, int clean);

/* Appends one request's bytes and its record. The record must be linked in
 * the client's slots by the caller first. */
void px_upstream_send(px_upstream *u, px_req *r, const char *data, size_t len);
/* The same for a frame of the client's input, appended by reference
 * (px_io_write_ref: the caller calls px_io_settle before it returns to the
 * loop), so that a transaction's frames, one after the other there, leave
 * in one piece, written from where they lie when nothing is queued before
 * them. */
void px_upstream_send_ref(px_upstream *u, px_req *r, const char *frame, size_t len);

/* Appends one more request whose reply belongs to r, which must be the
 * last request sent on u (a run: see px_req.replies_left). by_ref: data is
 * a frame of the client's input, as for px_upstream_send_ref. It leaves with the
 * loop's flush, or when the caller writes early (px_io_write_early). */
void px_upstream_extend(px_upstream *u, px_req *r, const char *data, size_t len, int by_ref);

/* Appends raw bytes with no reply expected to be matched (tunnels only);
 * behind any held by px_upstream_send_alone. */
void px_upstream_send_raw(px_upstream *u, const char *data, size_t len);
/* The same, for a command Redis takes only on a connection that awaits no
 * reply (SCRIPT DEBUG: "must be called outside a pipeline"): held, and
 * what is sent after it, until the handshake and the internal requests
 * before it are answered. */
void px_upstream_send_alone(px_upstream *u, const char *data, size_t len);
/* The tunnels whose barrier is passed relay what they hold and read on
 * (px_caching_barrier). */
void px_upstream_barrier_wake(px_server *srv);
/* Behind a client's RESET in a tunnel: a command whose reply ends the
 * tunnel (px_client_on_tunnel_reset) once all before it was relayed. */
void px_upstream_send_reset_marker(px_upstream *u);
/* The same behind a RESET of sidecache's own (the client never sent it:
 * its reply is not relayed), for a session that ends once Redis has
 * answered everything sent before it (a protocol error in the tunnel). */
void px_upstream_send_reset_own(px_upstream *u);

/* The error code of a reply to a command that Redis could not be reached
 * for (so it did not run): "MASTERDOWN", as a replica answers while the
 * link with its master is down, or, in front of a cluster's master
 * (follow.h), "CLUSTERDOWN", as a cluster answers while a slot's master is
 * down. A client connected to Redis itself would see its connection
 * refused, and go-redis (JuiceFS) retries that after a pause: it retries
 * these two codes the same way, where it gives an ERR to the application
 * at once (a getattr's EIO during a Redis restart). */
const char *px_unavailable_code(const px_server *srv);

/* Fails every pending request with `why` and closes the connection. */
void px_upstream_close(px_upstream *u, const char *why);

/* Frees what px_upstream_close left, at reap time. */
void px_upstream_free(px_upstream *u);

/* Resolves the upstream address into srv->up_sa (once; again after a failed
 * connect reset it). Returns 0, or -1 with a reason in why. A name waits
 * at most PX_RESOLVE_WAIT_MS (proxy/resolve.h). */
int px_upstream_resolve(px_server *srv, char *why, size_t whylen);

/* An IPv4 or IPv6 address as text (no brackets) and its port: 0, or -1
 * for another family. */
int px_ip_text(const struct sockaddr_storage *sa, char *host, size_t hlen, int *port);
/* "host:port", "[v6]:port" or the unix path, in buf; returns buf. */
const char *px_format_address(const struct sockaddr_storage *sa, unsigned salen, char *buf, size_t n);

/* Whether two socket addresses are the same (address and port, or path). */
int px_same_address(const struct sockaddr_storage *a, unsigned alen, const struct sockaddr_storage *b, unsigned blen);

/* An address (host and port, or a unix path) as a socket address. Returns 0,
 * or -1 with a reason in why. A name waits at most PX_RESOLVE_WAIT_MS
 * (proxy/resolve.h). */
int px_resolve_address(const px_upstream_addr *a, struct sockaddr_storage *sa, unsigned *salen, char *why,
                       size_t whylen);

/* upstream-timeout: closes every connection (shared or pinned, but not
 * one with a blocking command or a tunnel) whose pending requests have had
 * no byte from Redis for that long: a half-open connection or a Redis that
 * hangs. Its requests get an error. From cron. */
void px_upstreams_cron(px_server *srv, int64_t now_ms);

/* 1 if Redis closed (or reset) a shared connection that tracks the cache's
 * reads for this caching epoch (tracking-mode default, optin) and sidecache
 * has not handled that end yet: Redis forgot what was read on it, and the
 * end, which empties the cache, must be seen before a hit (C4). */
int px_upstreams_tracked_ending(const px_server *srv, uint64_t epoch);

/* Frees idle pools unused for a while; called from cron. */
void px_pools_sweep(px_server *srv, int64_t now_ms);
/* Calls fn for every open shared connection of every pool. */
void px_pools_foreach_shared(px_server *srv, void (*fn)(px_server *, px_upstream *));
/* Closes every connection of every pool, and those waiting to be written
 * before they close (px_upstream_close_written): shutdown's first step, a
 * failover. */
void px_pools_close_connections(px_server *srv);

/* The default user's ACL changed on Redis (proxy/aclwatch.h): the shared
 * connections without credentials retire, and access is learned anew. */
void px_pools_default_user_changed(px_server *srv);
/* Redis is now at sa (salen bytes): a failover. The cache is emptied first
 * (C6), and the invalidation connection moves. Then, hard: every
 * connection is closed (requests in flight get an error; clients with a
 * connection of their own are disconnected, as Redis does on a role
 * change). Gently: every connection is retired (px_upstream.retired), so
 * that the requests in flight get the old node's own answer (a cluster
 * node's MOVED, which a cluster client follows). New connections go to sa. */
void px_upstreams_move(px_server *srv, const struct sockaddr_storage *sa, unsigned salen, int gently);
/* Tracking is on, its connection on the server whose run_id is id (NULL:
 * not known). Every data connection on another server fills nothing from
 * now on (px_upstream.other_server); the shared and idle ones among them
 * retire, and with retire_unknown those whose server is not known too
 * (why, for the log). A client's own is left to it (no read on it fills). */
void px_upstreams_tracking_on(px_server *srv, const char *id, int retire_unknown, const char *why);
/* Why every connection moves to the address it reached again
 * (px_upstreams_move_again). */
enum px_move_again {
    PX_MOVE_READONLY = 1, /* the upstream answered READONLY: demoted, and no
                             sentinel names the master */
    PX_MOVE_OTHER_SERVER  /* a data connection reached another Redis than
                             the invalidation connection (caching.h) */
};
/* The address may lead new connections to the new master (a virtual IP, a
 * Service) while established ones stay where they were: every connection,
 * the invalidation one too, moves to it again (px_upstreams_move, gently:
 * the cache is emptied first). After the reply being read (from
 * srv->move_again_ev), and at least srv->move_again_wait_ms after the last
 * such move: doubled at each, up to 30 s (an upstream that is a replica
 * answers every write READONLY), back to 1 s after a minute without one. */
void px_upstreams_move_again(px_server *srv, enum px_move_again why);
/* Whether a move for why waits for its time (px_upstreams_move_again). */
int px_upstreams_moving_again(const px_server *srv, enum px_move_again why);
/* srv->move_again_ev's move. */
void px_upstreams_move_again_now(px_server *srv);
/* A connection to the upstream (data or invalidation) reached sa. */
void px_upstream_reached(px_server *srv, const struct sockaddr_storage *sa, unsigned salen);

/* Redis left a request unanswered too long (what: which, for the log): the
 * invalidation connection's PING or setup, or a request past
 * upstream-timeout. Following a cluster's slot (follow.h), its nodes are
 * then asked where the slot is, as after a failed connect: a master that
 * hangs, its host up, takes connections and answers nothing, while the
 * cluster promotes its replica. */
void px_upstream_unanswered(px_server *srv, const char *what);
/* Closes every pool and connection (shutdown). */
void px_pools_free_all(px_server *srv);

/* Request records come from a per-server free list. */
px_req *px_req_new(px_server *srv, struct px_client *c, int kind);
void px_req_release(px_server *srv, px_req *r);

#endif
