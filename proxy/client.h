/*
 * proxy/client.h — one client session: its RESP input, its session state,
 * the routing of each command, and its reply slots.
 *
 * Routing modes (the session state machine):
 *
 *   SHARED  ── WATCH, blocking ──► PINNED (own connection) ── ends clean ──► SHARED
 *     │  │                                ▲
 *     │  ├─ MULTI ──► local transaction ──┘ SELECT, WATCH, too large… (txn.c)
 *     │  │            (still SHARED; its EXEC or DISCARD ends it)
 *     │  └─── state that must not leak (READONLY, CLIENT ID, NO-EVICT…) ──► STICKY
 *     └────── SUBSCRIBE, MONITOR, CLIENT REPLY/TRACKING ──► TUNNEL
 *
 *   SHARED: commands go to the shared connection of the session's pool;
 *           PING, ECHO, CLIENT SETNAME… are answered locally; SELECT, AUTH
 *           and HELLO are checked by Redis on the pool of the new identity and
 *           take effect when Redis accepts them.
 *   local transaction: answered +QUEUED as Redis checks each command on
 *           the shared connection; at EXEC the whole goes as one block.
 *   PINNED: every forwarded command goes to the client's own connection.
 *   STICKY: PINNED for the rest of the session; only QUIT and RESET are local.
 *   TUNNEL: bytes relayed both ways, for the rest of the session.
 *
 * Ordering: a command is not sent on another connection than the one the
 * client's earlier requests are still in flight on; it waits until they are
 * answered. Replies leave in request order through the reply slots.
 *
 * Lifetime: a closed client whose requests are still in flight stays as a
 * zombie (no socket) until the last reply arrives and is dropped.
 */
#ifndef SIDECACHE_PROXY_CLIENT_H
#define SIDECACHE_PROXY_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "protocol/resp.h"
#include "proxy/io.h"
#include "proxy/server.h"
#include "proxy/upstream.h"

/* A client's input pauses while it holds this many reply slots, or slots
 * of requests of this many bytes, and resumes once half are answered: what
 * it pipelines behind a blocked command (BLPOP 0, then PINGs) or towards a
 * Redis that stopped reading waits in the kernel's socket buffers, not in
 * the proxy's memory (a transaction's queued commands, one slot, and a
 * single request of any size still go). */
#define PX_CLIENT_MAX_SLOTS 16384
#define PX_CLIENT_MAX_INFLIGHT_BYTES (64u << 20)
/* c->scratch above this is freed by the cron once empty */
#define PX_CLIENT_SCRATCH_KEEP (64u << 10)

enum px_client_state {
    PX_CLIENT_ACTIVE,   /* reading and answering */
    PX_CLIENT_CLOSING,  /* no more input; close once replies are written */
    PX_CLIENT_CLOSED,   /* socket gone; waiting for in-flight replies */
};

enum px_client_mode { PX_MODE_SHARED, PX_MODE_PINNED, PX_MODE_STICKY, PX_MODE_TUNNEL };

typedef struct px_client {
    px_server *srv;
    struct px_client *prev, *next;   /* srv->clients */
    struct px_client *next_reap;
    int reap_queued;
    uint64_t id;
    px_io io;
    char addr[64];
    int state;
    int mode;

    resp_req_parser rq;
    resp_buf scratch;          /* local replies and rewritten requests */

    /* session state */
    int proto;                 /* 2 or 3 */
    int db;
    char *user, *pass;         /* NULL: not authenticated */
    char *name;                /* CLIENT SETNAME, NULL if none */
    px_pool *pool;             /* the identity's pool (ref held) */

    px_upstream *pinned;       /* own connection in PINNED/STICKY/TUNNEL */
    int watching, in_multi;    /* transaction state, as sent to Redis */
    uint64_t txn_seq;          /* transactions opened on the own connection */
    /* the last UNWATCH sent on the own connection (watching cleared), and
     * txn_seq then: Redis's refusal of it (an ACL without UNWATCH) keeps
     * the watches, and a transaction opened since has dropped them */
    const struct px_req *unwatch_req;
    uint64_t unwatch_txn_seq;
    int pin_unsure;            /* Redis refused a MULTI, EXEC, DISCARD or
                                  UNWATCH there: close it, not reuse it */
    int watch_ahead;           /* WATCHes answered here that Redis has not
                                  confirmed yet: EXEC waits */
    int blocking;              /* a blocking command is in flight on pinned */
    resp_buf txn_keys;         /* keys written by commands queued in MULTI */
    size_t txn_purged;         /* ... of which purged early (px_caching_txn_prepurge) */
    uint64_t txn_purge_mark;   /* the cache's placeholders_made then */
    int txn_flush;             /* ... or a write whose keys cannot be known */
    int txn_script_flush;      /* ... or a SCRIPT FLUSH: scripts are forgotten
                                  again at EXEC's reply */
    int txn_local;             /* in a MULTI answered here (no WATCH): the
                                  commands wait in txn_frames until EXEC */
    resp_buf txn_frames;       /* (u32 length, bytes) per queued command */
    int txn_count;
    int txn_acl;               /* an ACL command is queued: EXEC's reply is
                                  when it takes effect (PX_AUX_ACL) */
    int tunnel_acl;            /* an ACL command that changes permissions went
                                  through this client's tunnel: counted in
                                  srv->acl_unsettled until it closes */
    int txn_checks;            /* queued commands whose check by Redis is in flight */
    int txn_dirty;             /* Redis refused one: EXEC answers EXECABORT */
    size_t txn_checked_at;     /* txn_frames' offset of the first command
                                  whose check is awaited: those before it
                                  Redis queued (txn_queued of them); at a
                                  refusal the rest is dropped, as Redis
                                  queues nothing from there on */
    int txn_queued;
    int txn_denyoom;           /* one Redis queued may use memory
                                  (CMDT_F_DENYOOM): over maxmemory Redis
                                  refuses EXEC itself */

    /* write batching (proxy/batch.h) */
    resp_buf batch_frames;     /* the open batch: (u32 length, bytes) ... */
    resp_buf batch_reqs;       /* ... and its requests' records */
    int batch_count;
    px_upstream *batch_up;
    int batch_wait;            /* a batch's EXEC is in flight: nothing else goes */
    px_req *mget_merge;        /* an MGET partly answered from the cache is in
                                  flight: nothing else goes (it may be sent
                                  again whole, proxy/caching.h) */

    /* in flight */
    px_req *slots_head, *slots_tail;
    size_t nslots;             /* reply slots held */
    size_t inflight_bytes;     /* bytes of the requests holding them */
    int backlogged;            /* input paused: too many slots or bytes held,
                                  until half of them are answered */
    /* input paused while in a queue of the server: upstream-output-limit
     * reached, until what waits to be written to Redis falls to half of it
     * (srv->output_waiters); a cache hit held for the keep-alive's answer
     * (srv->ping_waiters) */
    px_waitq *waiting_in;
    struct px_client *wait_prev, *wait_next;
    int ping_held;             /* its last read waited for a PING's answer
                                  (counted once, however often it waits) */
    uint64_t ping_mark;        /* ... for those up to this one (inv_hold_mark) */
    int unread_held;           /* its last read waited for the invalidation
                                  connection's unread bytes (inv_unread) */
    int read_counted;          /* its request, a read, was counted by the cache
                                  and waits to go to Redis (px_caching_try_hit
                                  counts it once) */
    int inflight;              /* requests awaiting an upstream reply */
    px_upstream *inflight_on;  /* the connection they were sent on */
    int barrier;               /* a state change awaits its reply: read nothing */
    char *tunnel_fail;         /* tunnel: the error that ends the session once
                                  Redis has answered what came before it */
    int tunnel_reply;          /* tunnel: Redis's CLIENT REPLY state of the
                                  connection, as far as followed (TUNNEL_REPLY_*) */
    int tunnel_fail_qbuf;      /* ... and it is the query buffer limit's */
    int mute_linger;           /* closing without a word, as Redis after a
                                  protocol error under CLIENT REPLY OFF/SKIP:
                                  held open, running nothing more, until the client
                                  closes (or `timeout`) */
    int input_paused;          /* reading stopped (barrier, switch, or back-pressure) */
    int peer_closed;           /* the client closed its side with commands read
                                  but not yet run: they run (as in Redis),
                                  then it closes; nothing more is read */
    int peer_gone;             /* its close was seen with bytes of it unread,
                                  behind a blocking command: read on, unless
                                  Redis blocks there (px_clients_gone_check) */

    /* pending session change, applied when Redis accepts it */
    int pend_db, pend_proto;
    char *pend_user, *pend_pass, *pend_name;
    char *pend_name_early;     /* HELLO: the name given before its AUTH */
    /* a CLIENT SETNAME / GETNAME / SETINFO that waits for Redis's
     * permission (client.c): which, and the field it sets with its value */
    int pend_client;
    char **pend_field, *pend_value;

    int64_t last_active_ms;     /* input read, or output written (cron) */
    size_t cron_pending;        /* output pending at the last cron */
    int64_t read_us;           /* when the input being processed was read */
    int64_t partial_since_ms;  /* a request started arriving then and is not whole (0: none) */
} px_client;

/* Whether each reply slot of c before stop (NULL: all) is of a request
 * answered ahead (a WATCH or UNWATCH whose +OK c already has, proxy/txn.c):
 * c awaits none of their replies. */
int px_client_answered_ahead_before(const px_client *c, const px_req *stop);

/* Whether each request of c in flight was answered ahead: c awaits no
 * reply, and none of them writes. */
int px_client_awaits_only_ahead(const px_client *c);

/* Takes ownership of an accepted socket. Returns NULL (socket closed) on error. */
px_client *px_client_new(px_server *srv, int fd, const char *addr, int tls);

/* Called by upstream.c when the reply to r arrives (r->pending already 0).
 * data/len is the whole reply frame. */
void px_client_on_reply(px_client *c, px_req *r, const char *data, size_t len);

/* One reply of a run (px_req.replies_left) that is not its last: relayed
 * in order; px_client_on_reply brings the last. */
void px_client_on_reply_part(px_client *c, px_req *r, const char *data, size_t len);

/* A request record of len bytes takes the client's next reply slot,
 * awaited from u (for proxy/batch.c and proxy/txn.c). */
void px_client_take_slot(px_client *c, px_req *r, px_upstream *u, size_t len);

/* Redis was just found to want a password (srv->open_access 0): a client
 * without credentials in the middle of a request, framed so far without
 * Redis's pre-AUTH limits (more than 10 arguments, bulks above 16 KB), is
 * framed again with them, and refused as Redis would. */
void px_clients_access_learned(px_server *srv);

/* The client's own connection wrote all it had: a client whose input
 * paused for its backlog (PX_CLIENT_MAX_INFLIGHT_BYTES) may read again. */
void px_client_upstream_drained(px_client *c);

/* What waits to be written to Redis fell to half of upstream-output-limit
 * (or the limit was raised): the clients paused for it read again, first
 * paused first, as long as it stays under the limit (srv->output_wake_ev). */
void px_clients_output_wake(px_server *srv);

/* The invalidation connection's keep-alive PING is answered, and what Redis
 * wrote behind the answer read (or tracking stopped): the clients whose
 * read waited for it (px_caching_try_hit, PX_CACHING_WAIT) go on. */
void px_clients_ping_wake(px_server *srv);

/* Clients whose close was seen behind a blocking command not yet taken for
 * blocked (srv->gone_check_ev): those Redis now blocks on go. */
void px_clients_gone_check(px_server *srv);

/* Tunnel bytes from the client's own connection. */
void px_client_on_tunnel_data(px_client *c, const char *data, size_t len);

/* Redis answered +RESET to the RESET the client sent in its tunnel: the
 * session leaves the tunnel. */
void px_client_on_tunnel_reset(px_client *c);

/* Writes a reply made here (a cache hit) to the client, which is closed
 * instead when its output passes client-output-buffer-limit. */
void px_client_write_reply(px_client *c, const char *data, size_t len);

/* The client's own connection is gone: replies written so far are flushed,
 * then the client is closed, as it would be if Redis had dropped it. */
void px_client_on_pinned_lost(px_client *c, px_upstream *u);

/* Graceful stop: no more input; close when in-flight replies are written.
 * Clients that wait on Redis for an unbounded time (blocked, subscribed)
 * are closed at once. */
void px_client_begin_stop(px_client *c);

/* Idle-timeout check, from cron. */
void px_client_cron(px_client *c, int64_t now_ms);

/* Closes the socket now; the client stays as a zombie while replies it
 * awaits are in flight. */
void px_client_close(px_client *c, const char *why);

/* Frees a client queued for reaping. */
void px_client_free(px_client *c);

/* ------------------------------------------------------------------------ */
/* The router's own parts (client.c, txn.c), not for other modules. Each
 * acts on the current request (c->rq) and its reply slot. */

/* What routing a request did: PX_DISPATCH_WAIT leaves it unconsumed, to be
 * routed again when the requests in flight it must follow are answered. */
enum px_dispatch_result { PX_DISPATCH_DONE, PX_DISPATCH_WAIT };

/* Routes the current request; frame: its bytes in the client's input. */
int px_client_dispatch(px_client *c, const char *frame);

/* A reply made here takes the request's slot: +s, or an error line (CR and
 * LF become spaces). */
void px_client_reply_simple(px_client *c, const char *s);
void px_client_reply_error(px_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The error a command gets when no connection to Redis can be had. */
void px_client_reply_unavailable(px_client *c, px_pool *p);

/* No more input; the client closes once every reply queued is written. */
void px_client_close_after_replies(px_client *c);

/* The pool's shared connection for this client, or NULL when none can be
 * had (the pool's last_error says why). */
px_upstream *px_client_shared_conn(px_client *c);

/* Takes a connection of the client's own (mode PX_MODE_PINNED, STICKY or
 * TUNNEL). Returns 0, or -1 after replying why it could not be had. */
int px_client_pin_new(px_client *c, int mode);

/* The current request's bytes as Redis must receive them: the frame as it
 * came, or an inline command encoded as multibulk (in c->scratch, valid
 * until the next request). */
void px_client_request_bytes(px_client *c, const char *frame, const char **out, size_t *outlen);

/* Sends a request on u and takes its reply slot; by_ref: data is the
 * frame in the client's input (px_upstream_send_ref). Returns the record,
 * or NULL (the client is closed: out of memory). */
px_req *px_client_forward_to(px_client *c, px_upstream *u, int kind, const char *data, size_t len, int by_ref);

/* What Redis showed it lets this client's identity do (UNWATCH, WATCH,
 * DISCARD, CLIENT ...): a command sent as r with px_client_permission_probe
 * and answered ok teaches *learned (px_client_permission_learn), which
 * px_client_permission_known trusts while no ACL change went through the
 * proxy since. */
int px_client_permission_known(const px_client *c, uint64_t learned);
void px_client_permission_probe(px_client *c, px_req *r, unsigned flag);
void px_client_permission_learn(px_client *c, const px_req *r, int ok, uint64_t *learned);

#endif
