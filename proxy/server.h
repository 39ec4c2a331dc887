/*
 * proxy/server.h — the process-wide state of one sidecache instance, passed
 * explicitly to every module (no globals): the event loop, the config, the
 * lists of clients and upstream pools, and the deferred-free queue.
 *
 * Lifetime rule: nothing is freed inside its own libevent callback. A client
 * or upstream connection that must go is unlinked and marked, queued on the
 * reap list, and freed by px_server_reap(), which runs as its own event at
 * the end of the loop iteration.
 */
#ifndef SIDECACHE_PROXY_SERVER_H
#define SIDECACHE_PROXY_SERVER_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "protocol/resp.h"
#include "proxy/config.h"
#include "proxy/log.h"
#include "proxy/stats.h"

struct event_base;
struct event;
struct px_io;
struct evconnlistener;
struct px_client;
struct px_pool;
struct px_upstream;
struct px_req;
struct px_caching;

/* The event loop's priorities: of the events ready at once, those of the
 * lowest number run first, and an event of a higher number waits until no
 * lower one is ready. The invalidation connection (and a move to a new
 * master) goes first, so that a client's read that arrives with the
 * invalidation of its key is answered after the purge
 * (invalidation/tracking.c); clients and Redis's replies have the default;
 * work that can wait for a moment with no traffic (freeing what a large
 * purge left) runs last. */
enum { PX_PRIO_FIRST = 0, PX_PRIO_DEFAULT = 1, PX_PRIO_IDLE = 2, PX_PRIO_LEVELS = 3 };

/* the most one read(2) takes */
#define PX_IO_READ_CHUNK 65536

#define PX_MAX_LISTENERS (2 * PX_MAX_BIND + 1) /* port, tls-port, unixsocket */

/* Cluster nodes remembered to ask where the volume's slot went (follow.h). */
#define PX_CLUSTER_NODES_MAX 16

/* Clients not read while they wait for something, first paused first
 * (proxy/client.c). A client waits in one queue at most (its waiting_in). */
typedef struct px_waitq {
    struct px_client *head, *tail;
    size_t n;
} px_waitq;

typedef struct px_server {
    struct event_base *base;
    px_config *cfg;
    resp_limits req_limits;   /* what clients may send */
    resp_limits reply_limits; /* what Redis may answer */
    long long upstream_max_args; /* most arguments Redis takes in a request;
                                    0: none known below max-multibulk-len */

    struct evconnlistener *listeners[PX_MAX_LISTENERS];
    int nlisteners;
    int unixsocket_bound; /* the unixsocket path is ours to remove at exit */
    /* accept() errors (proxy/listener.c): the timer that turns the
     * listeners back on after a pause, and the log's pace */
    struct event *accept_resume_ev;
    int64_t accept_log_next_ms;     /* no accept error logged before this */
    uint64_t accept_errors_unlogged; /* errors since the last one logged */

    struct px_client *clients; /* doubly linked, live clients */
    int nclients;
    uint64_t next_client_id;

    struct px_pool *pools;     /* singly linked */
    struct px_caching *caching; /* the cache, NULL when off (proxy/caching.c) */
    struct px_aclwatch *aclwatch; /* acl-check-ms, NULL when off (proxy/aclwatch.c) */
    struct px_slotwatch *slotwatch; /* the volume's cluster slot, NULL when off (proxy/slotwatch.c) */

    struct px_req *free_reqs;  /* recycled request records */
    int nfree_reqs;

    struct px_io *flush_list;  /* sockets with output to write this iteration */
    struct px_io *ref_io;      /* the io holding a px_io_write_ref, or NULL */
    /* every plain read goes here first (proxy/io.c, "Input") */
    char io_read_buf[PX_IO_READ_CHUNK];
    struct event *flush_ev;
    /* bytes waiting to be written to Redis on every upstream connection but
     * the invalidation one (px_io_count_output), the requests whose replies
     * are awaited on them (their records: PX_REQ_COST each), and the
     * clients not read while the two are over upstream-output-limit, first
     * paused first (proxy/client.c) */
    size_t upstream_output;
    size_t upstream_requests;
    px_waitq output_waiters;
    uint64_t output_limit_pauses;
    int64_t output_limit_log_ms; /* its notice is not logged again before this */
    struct event *output_wake_ev;
    /* cache hits held while the invalidation connection's keep-alive PING
     * is unanswered (proxy/caching.c), woken once it is */
    px_waitq ping_waiters;
    /* tunnels whose input waits for a barrier's answer (upstream.c) */
    struct px_upstream *barrier_waiters, *barrier_waiters_tail; /* in the
                               order they began to wait: their barriers'
                               numbers never go down along it */

    /* the upstream's address, resolved when first needed and again after a
     * failed connect (Redis may have moved) */
    struct sockaddr_storage up_sa;
    unsigned up_salen;
    /* where the connections (the invalidation one too) went: what the
     * name's check compares with its answers. Set by the first connect
     * that succeeds and by each move, not reset by a failed connect: one
     * that reaches another address after it (the name's new answer) makes
     * a move due, to up_reached_sa (px_upstream_reached, up_check_name) */
    struct sockaddr_storage up_conn_sa, up_reached_sa;
    unsigned up_conn_salen, up_reached_salen;
    int up_followed;           /* up_sa is where a cluster's MOVED sent it,
                                  not the configured address (follow.h) */
    struct event *follow_ev;   /* moves to follow_to, after the reply */
    char follow_to[300];       /* "host:port" of that MOVED */
    char follow_last[300];     /* ... of the node moved to last */
    int64_t follow_moved_ms;   /* ... when (a MOVED moves again only
                                  PX_FOLLOW_MIN_GAP_MS later) */
    /* the cluster's nodes, as the last CLUSTER SLOTS through the proxy
     * named them: asked where the slot is when the upstream is gone */
    char cluster_nodes[PX_CLUSTER_NODES_MAX][128];
    int ncluster_nodes;
    int cluster_ask_from;      /* the node asked first next time */
    int up_unreachable;        /* the last connect to the upstream failed, or
                                  Redis left a request unanswered too long:
                                  until it answers again, the cluster is
                                  asked (follow.h) */
    int up_silent;             /* ... the latter (px_upstream_unanswered): the
                                  asks go on while it says the same master */
    char up_failed[64];        /* ... to this address (up_sa is reset) */

    struct px_client *reap_clients;
    struct px_upstream *reap_upstreams;
    struct px_upstream *orphans;    /* own connections of clients that left,
                                       closed once written (upstream.h) */
    struct px_upstream *retired;    /* shared connections to where Redis was,
                                       closed once answered (upstream.h) */
    struct event *reap_ev;
    struct event *cron_ev;
    struct event *sig_term, *sig_int, *sig_hup;
    int argc;                  /* the command line, for SIGHUP */
    char **argv;

    /* Whether Redis serves clients without credentials: -1 unknown, 0 no
     * (NOAUTH), 1 yes. Learned by every credential-less connection, from
     * the answer to its PING; an error other than NOAUTH (LOADING...) teaches
     * nothing, and an unknown is asked again (proxy/upstream.c). */
    int open_access;

    struct evhttp *metrics;    /* /metrics, NULL when off (proxy/metrics.c) */
    struct ssl_ctx_st *tls_server_ctx, *tls_client_ctx; /* proxy/tls.h */
    struct event *sentinel_ev; /* upstream-sentinel: asks every sentinel-check-ms */
    struct event *sentinel_soon_ev; /* ... and soon after a sign of a move (px_sentinel_ask_soon) */
    int64_t sentinel_next_ms;  /* ... but not before this after failures */
    int64_t sentinel_asked_ms; /* when the sentinels were last asked */
    struct event *gone_check_ev; /* px_clients_gone_check, once a client
                                    gone behind a blocking command may be
                                    blocked on by now (proxy/client.c) */
    struct event *move_again_ev; /* moves the connections to the address
                                    again (px_upstreams_move_again) */
    int move_again_why;        /* ... why (enum px_move_again) */
    int64_t move_again_ms;     /* ... when it last did */
    int move_again_wait_ms;    /* ... the least time between two such moves */
    int sentinel_backoff_ms;
    int sentinel_first;        /* the sentinel asked first: the last that answered */
    char sentinel_master_logged[64]; /* the master's address last logged */
    uint64_t nupstreams;       /* open upstream connections (not the invalidation one) */
    /* latency histograms (proxy/stats.h) */
    px_latency lat_hit, lat_upstream;
    /* blocks sent as MULTI ... EXEC on shared connections (proxy/batch.h) */
    uint64_t batch_blocks, batch_commands, batch_replays, batch_relayed, txn_shared, txn_pinned;
    uint64_t unwatch_local;    /* UNWATCH answered here (proxy/txn.c) */
    uint64_t watch_ahead;      /* WATCH answered +OK before Redis did (proxy/txn.c) */
    uint64_t unwatch_ahead;    /* UNWATCH of watched keys answered +OK before Redis did */
    uint64_t watch_ahead_refused; /* WATCH or UNWATCH answered ahead that Redis refused after
                                     all: client closed */
    /* An ACL command that changes permissions sent through the proxy: what
     * was learned of a user's permissions before (px_pool.unwatch_epoch,
     * watch_epoch, txn_denied) no longer holds */
    uint64_t acl_epoch;
    /* Open tunnels that sent such a command: its reply is not matched there,
     * so nothing is learned of permissions until they close (client.c) */
    int acl_unsettled;

    uint64_t io_reads;         /* reads of clients' and Redis's bytes: what came
                                  after an invalidation still unread
                                  (px_caching_try_hit) */
    int cluster_other_logged;  /* CLUSTER SLOTS named another master (client.c) */
    int upstream_reached;      /* Redis answered once (px_server_upstream_reached) */
    px_log_repeat connect_failures; /* "upstream connect failed" since Redis
                                       last answered (one a minute logged) */
    uint64_t connects_failed;       /* every failed connect since start (INFO) */
    px_log_repeat full_refusals;    /* connections Redis refused at its
                                       maxclients (one a minute logged) */
    px_log_repeat readonly_again;   /* READONLY after moves at the longest
                                       spacing: a replica (one in 5 min) */
    int upstream_db_refused;   /* the upstream URL's db was refused, and logged */
    /* The upstream is a Redis Cluster node and key-prefix names no hash
     * tag (px_caching_untagged_cluster): the cache stays off, and WATCH is
     * not answered ahead */
    int cluster_untagged;
    int stopping;              /* SIGTERM seen: finish in-flight work, then exit */
    struct event *stop_ev;     /* ... or exit when this timer fires (the deadline) */
    int exit_code;
} px_server;

/* What a pool learns of its identity's permissions (px_pool.watch_epoch,
 * txn_denied, ...) is stored as this mark, and holds while it is still the
 * current one: an ACL change through the proxy moves it on. 0 is never a
 * mark: nothing learned. */
static inline uint64_t px_acl_mark(const px_server *srv) {
    return srv->acl_epoch + 1;
}

/* Milliseconds on a monotonic clock. */
int64_t px_now_ms(void);

/* ms milliseconds as a libevent timeout. */
static inline struct timeval px_ms_timeval(int64_t ms) {
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    return tv;
}
/* The same clock in microseconds. */
int64_t px_now_us(void);
/* Microseconds of the wall clock as the event loop cached it when this
 * iteration began: no system call, for the latency histograms (a reply is
 * read in a later iteration than its request was written). */
int64_t px_loop_now_us(struct px_server *srv);

/* What upstream-output-limit bounds: the bytes waiting to be written to
 * Redis and the records of the requests awaiting its replies. */
size_t px_server_upstream_load(const px_server *srv);

/* That load fell (or upstream-output-limit changed): clients paused for it
 * are woken once it is at half the limit. */
void px_server_upstream_output_fell(px_server *srv);

/* The most arguments of a request: max-multibulk-len, or less when the
 * upstream takes less (upstream_max_args). Sets it for every client. */
void px_server_apply_request_limits(px_server *srv);

/* The upstream's COMMAND table came from Redis 6 (or not): Redis 6 refuses a
 * request of more than 1,048,576 arguments with a protocol error and closes
 * the connection, which would fail every request in flight on it, other
 * clients' too; sidecache refuses it itself, with Redis's words. */
void px_server_upstream_redis6(px_server *srv, int redis6);

/* Asks for px_server_reap() at the end of this loop iteration. */
void px_server_schedule_reap(px_server *srv);
/* Frees the clients and upstream connections queued for reaping (the reap
 * event does this at the end of a loop iteration). */
void px_server_reap(px_server *srv);

/* Redis answered a data connection (addr: where it is). The first time,
 * logs "upstream reached": "ready" at start means listening, and says
 * upstream_reached=no until then (an unreachable Redis logs why in its
 * "upstream connect failed" warnings). Later, after connects failed, logs
 * "upstream reached again" with how many failed. */
void px_server_upstream_reached(px_server *srv, const char *addr);



/*
 * What a start would find wrong before it listens, besides loading: the
 * cache rules (built as a start builds them), the TLS certificates and keys
 * (loaded as a start loads them), the log file (that a start can open it
 * for appending), a TLS port that is also the plain one. --test-config runs
 * it, so that a service manager's ExecStartPre refuses what would not
 * start, and so does SIGHUP, which refuses such a file. Returns 0, or -1
 * with the reason in err.
 */
int px_server_check_startable(px_config *cfg, char *err, size_t errlen);

/* Runs one instance until it is stopped. Returns the process exit code.
 * argc/argv are the command line the config came from: SIGHUP reads it
 * (and the file it names) again and applies what can change at run time. */
int px_server_run(px_config *cfg, int argc, char **argv);
#endif
