/*
 * proxy/client.c — client sessions and the router. See client.h for the
 * routing modes; what the router answers itself of transactions is in
 * txn.c. What must hold at all times:
 *
 * - Replies leave in request order. Every request, forwarded or answered
 *   here, owns one slot (px_req) in c->slots; a reply is written when its
 *   slot reaches the head, earlier ones are buffered in their slot.
 * - A client's requests in flight are all on one connection (inflight_on).
 *   A request for another connection waits, unparsed, until they are
 *   answered; so a write is never overtaken by a later read on another
 *   connection (read-your-writes across SELECT, WATCH, pinning).
 * - Session state (db, protocol, user) changes only when Redis accepted it.
 *   While such a change is in flight (barrier), nothing else is sent.
 * - Transaction and connection state never leaks to another client: a
 *   client holding it has its own connection, which is reused only when
 *   that state ended clean, and closed otherwise.
 */
#include "proxy/client.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "protocol/cluster.h"
#include "protocol/commands.h"
#include "proxy/batch.h"
#include "proxy/caching.h"
#include "proxy/follow.h"
#include "proxy/log.h"
#include "proxy/stats.h"
#include "proxy/tls.h"
#include "proxy/txn.h"

/* What a command asks of the router, whatever the session's mode. */
enum action {
    ACT_FORWARD,  /* plain: shared connection, or the client's own */
    ACT_LOCAL,    /* answered here */
    ACT_STATE,    /* SELECT / AUTH / HELLO: checked by Redis, then applied */
    ACT_TXN,      /* WATCH MULTI EXEC DISCARD UNWATCH */
    ACT_BLOCK,    /* may block: needs its own connection while it runs */
    ACT_STICKY,   /* per-connection state: own connection for good */
    ACT_ALONE,    /* ends a stall of Redis: a connection with nothing ahead */
    ACT_TUNNEL,   /* stream: relay bytes for good */
};

static void client_process(px_client *c);

/* A closed client is freed once nothing refers to it; queued exactly once. */
static void queue_reap(px_client *c) {
    if (c->reap_queued) return;
    c->reap_queued = 1;
    c->next_reap = c->srv->reap_clients;
    c->srv->reap_clients = c;
    px_server_schedule_reap(c->srv);
}

/* ------------------------------------------------------------------------ */
/* output and slots */

static void check_output_limit(px_client *c, size_t unread);
static void slot_pop(px_client *c, px_req *r);

static void client_write(px_client *c, const void *data, size_t len) {
    if (c->io.closed) return;
    size_t unread = px_io_pending(&c->io);
    px_io_write(&c->io, data, len);
    check_output_limit(c, unread);
}

/* client-output-buffer-limit is judged on the output a client left unread
 * when more comes (unread: pending before it was added), not on a reply
 * itself: a client that reads gets any one reply, however large, as from
 * Redis (whose normal clients have no limit), and one that reads nothing
 * is dropped at its next reply past the limit. */
static void check_output_limit(px_client *c, size_t unread) {
    long long limit = c->srv->cfg->client_output_buffer_limit;
    if (limit > 0 && (long long)unread > limit) {
        px_warning("client output buffer limit reached id=%llu addr=%s unread=%zu limit=%lld",
                   (unsigned long long)c->id, c->addr, unread, limit);
        px_client_close(c, "output buffer limit");
    }
}

/* Moves an early reply (or run) to the client's output. */
static void client_write_early(px_client *c, px_req *r) {
    size_t unread = px_io_pending(&c->io);
    px_io_write_buffer(&c->io, r->early);
    check_output_limit(c, unread);
}

/* Writes out every slot at the head whose reply is present. */
static void client_flush_slots(px_client *c) {
    px_req *r;
    while ((r = c->slots_head) != NULL && r->done) {
        slot_pop(c, r);
        if (r->early != NULL && !c->io.closed) client_write_early(c, r);
        px_req_release(c->srv, r);
    }
    /* a run now at the head: the replies it already has go out, the rest
     * will be written as they come (px_client_on_reply_part) */
    if (r != NULL && r->early != NULL && !c->io.closed && evbuffer_get_length(r->early) > 0)
        client_write_early(c, r);
}

static void slot_append(px_client *c, px_req *r) {
    c->nslots++;
    r->next_slot = NULL;
    if (c->slots_tail != NULL)
        c->slots_tail->next_slot = r;
    else
        c->slots_head = r;
    c->slots_tail = r;
}

/* Takes r, the head, off the slot list. */
static void slot_pop(px_client *c, px_req *r) {
    c->slots_head = r->next_slot;
    if (c->slots_head == NULL) c->slots_tail = NULL;
    c->nslots--;
    c->inflight_bytes -= r->req_bytes;
}

/*
 * What a reply slot holds besides its bytes, counted in the bytes that
 * pause a client's input: its record, and for replies made here the
 * buffer that holds them (libevent's smallest chain is 1 KB). Without it,
 * a client could hold some 220 times what it sent: a BLPOP that blocks,
 * then PINGs, each a slot of 1.3 KB for 7 bytes.
 */
#define SLOT_COST PX_REQ_COST

/* In place of a reply that could not be made for want of memory. */
static const char oom_reply[] = "-ERR sidecache: out of memory\r\n";
#define LOCAL_SLOT_COST (SLOT_COST + 1024 + 128)

/* A blocking command unanswered this long is taken for blocked: one that
 * Redis answers at once (its list is not empty) is answered well before. */
#define BLOCKED_AFTER_US 100000

/* Redis is blocked on the client now: its oldest request not answered is
 * a blocking command, sent BLOCKED_AFTER_US ago. (c->blocking stays set
 * while anything is in flight after one: a BLPOP that returned at once is
 * followed by what the client pipelined behind it, which Redis runs to
 * the end.) A client gone meanwhile is looked at again (gone_check_later). */
static int blocked_now(const px_client *c) {
    for (const px_req *r = c->slots_head; r != NULL; r = r->next_slot)
        if (!r->done) return r->blocks && r->pending && px_loop_now_us(c->srv) - r->sent_us >= BLOCKED_AFTER_US;
    return 0;
}

/* The client's close was seen behind a blocking command not taken for
 * blocked yet, or a blocking command of a client gone was just sent: it is
 * looked at again once it may be (px_clients_gone_check, which looks again
 * while the client has anything in flight behind one). */
static void gone_check_later(px_client *c) {
    static const struct timeval later = {0, BLOCKED_AFTER_US + 10000};
    if (c->blocking && c->srv->gone_check_ev != NULL && !evtimer_pending(c->srv->gone_check_ev, NULL))
        evtimer_add(c->srv->gone_check_ev, &later);
}

void px_clients_gone_check(px_server *srv) {
    for (px_client *c = srv->clients, *next; c != NULL; c = next) {
        next = c->next;
        if ((c->peer_closed || c->peer_gone) && c->state != PX_CLIENT_CLOSED) {
            if (blocked_now(c))
                px_client_close(c, "client closed connection");
            else
                gone_check_later(c);
        }
    }
}

/* A reply made here: written now if nothing is ahead of it, else queued,
 * with the replies made here just before it if they wait too. */
static void reply_bytes(px_client *c, const char *data, size_t len) {
    if (c->slots_head == NULL) {
        client_write(c, data, len);
        return;
    }
    px_req *t = c->slots_tail;
    if (t->local) {
        if (evbuffer_add(t->early, data, len) != 0) {
            px_client_close(c, "out of memory");
            return;
        }
        t->req_bytes += len;
        c->inflight_bytes += len;
        return;
    }
    px_req *r = px_req_new(c->srv, c, PX_REQ_CLIENT);
    if (r == NULL || (r->early = evbuffer_new()) == NULL) {
        if (r) px_req_release(c->srv, r);
        px_client_close(c, "out of memory");
        return;
    }
    if (evbuffer_add(r->early, data, len) != 0) {
        px_req_release(c->srv, r);
        px_client_close(c, "out of memory");
        return;
    }
    r->done = 1;
    r->local = 1;
    /* held here until the replies ahead of it are in: it counts in the
     * bytes that pause the client's input, as a forwarded request does */
    r->req_bytes = len + LOCAL_SLOT_COST;
    c->inflight_bytes += r->req_bytes;
    slot_append(c, r);
}

/* (a reply that could not be encoded whole is never sent: the client
 * would take the next reply for it) */
static void reply_buf(px_client *c, resp_buf *b) {
    if (b->failed)
        px_client_close(c, "out of memory");
    else
        reply_bytes(c, b->data, b->len);
    resp_buf_reset(b);
}

void px_client_reply_simple(px_client *c, const char *s) {
    resp_buf_reset(&c->scratch);
    resp_enc_simple(&c->scratch, s);
    reply_buf(c, &c->scratch);
}

static void enc_verror(resp_buf *out, const char *fmt, va_list ap) {
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    /* an error line must not contain CR or LF */
    for (char *p = msg; *p; p++)
        if (*p == '\r' || *p == '\n') *p = ' ';
    resp_enc_error(out, msg);
}

static void enc_error(resp_buf *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void enc_error(resp_buf *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    enc_verror(out, fmt, ap);
    va_end(ap);
}

void px_client_reply_error(px_client *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    resp_buf_reset(&c->scratch);
    enc_verror(&c->scratch, fmt, ap);
    va_end(ap);
    reply_buf(c, &c->scratch);
}

static void reply_arity(px_client *c, const char *cmd) {
    px_client_reply_error(c, "ERR wrong number of arguments for '%s' command", cmd);
}

/* ------------------------------------------------------------------------ */
/* input flow control */

/* Bytes waiting to be written to the client's own connection. */
static size_t pinned_output(const px_client *c) {
    return c->pinned != NULL ? px_io_pending(&c->pinned->io) : 0;
}

static void pause_input(px_client *c) {
    if (!c->input_paused) px_io_pause_read(&c->io);
    c->input_paused = 1;
}

static void resume_input(px_client *c) {
    if (c->state != PX_CLIENT_ACTIVE || c->waiting_in != NULL) return;
    if (c->backlogged) {
        if (c->nslots >= PX_CLIENT_MAX_SLOTS / 2 || c->inflight_bytes >= PX_CLIENT_MAX_INFLIGHT_BYTES / 2 ||
            pinned_output(c) >= PX_CLIENT_MAX_INFLIGHT_BYTES / 2)
            return;
        c->backlogged = 0;
    }
    if (c->input_paused) {
        c->input_paused = 0;
        /* (after the client's end, reading would see that end again) */
        if (!c->peer_closed) px_io_resume_read(&c->io);
        /* bytes already buffered produce no new read event */
        client_process(c);
        if (c->state == PX_CLIENT_ACTIVE) px_io_input_done(&c->io);
    }
}

/*
 * upstream-output-limit. The bounds above are per client: toward a Redis
 * that stopped reading (SIGSTOP, a long script, a fork stall) every client
 * could add 64 MB. So what waits to be written to Redis is bounded for all
 * clients together too, with the records of the requests on shared
 * connections whose replies it owes (px_server_upstream_load): past the
 * limit no client is read (its bytes wait in the socket buffers), and once
 * half of it is written and answered the clients read again, in the order
 * they paused. Nothing is refused or lost, and no deadlock: what waits
 * there leaves whenever Redis reads and answers, which does not depend on
 * any client being read (a command that may block for ever is on a
 * connection of its client's own, not counted; what ends a stall is not
 * held, ACT_ALONE).
 */
static int upstream_output_full(const px_server *srv) {
    long long limit = srv->cfg->upstream_output_limit;
    return limit > 0 && px_server_upstream_load(srv) >= (size_t)limit;
}

/* Appends c to q (nothing if it is there already). */
static void wait_in(px_waitq *q, px_client *c) {
    if (c->waiting_in == q) return;
    c->waiting_in = q;
    c->wait_next = NULL;
    c->wait_prev = q->tail;
    if (q->tail != NULL)
        q->tail->wait_next = c;
    else
        q->head = c;
    q->tail = c;
    q->n++;
}

/* Takes c out of the queue it waits in, if any. */
static void wait_end(px_client *c) {
    px_waitq *q = c->waiting_in;
    if (q == NULL) return;
    if (c->wait_prev != NULL)
        c->wait_prev->wait_next = c->wait_next;
    else
        q->head = c->wait_next;
    if (c->wait_next != NULL)
        c->wait_next->wait_prev = c->wait_prev;
    else
        q->tail = c->wait_prev;
    c->wait_prev = c->wait_next = NULL;
    c->waiting_in = NULL;
    q->n--;
}

/* Wakes q's clients, first paused first, each at most once (one that has
 * to wait again goes to the end), while go(srv) holds. */
static void wake_all(px_server *srv, px_waitq *q, int (*go)(const px_server *srv)) {
    for (size_t n = q->n; n > 0 && q->head != NULL && go(srv); n--) {
        px_client *c = q->head;
        wait_end(c);
        if (!c->barrier) resume_input(c);
    }
}

static void output_wait(px_client *c) {
    px_server *srv = c->srv;
    pause_input(c);
    if (c->waiting_in == &srv->output_waiters) return;
    if (srv->output_waiters.head == NULL && px_now_ms() >= srv->output_limit_log_ms) {
        px_notice("upstream-output-limit reached: %zu bytes wait to be written to Redis and %zu requests on shared "
                  "connections for its replies; clients are not read until they fall to half the limit",
                  srv->upstream_output, srv->upstream_requests);
        srv->output_limit_log_ms = px_now_ms() + 60000;
    }
    wait_in(&srv->output_waiters, c);
    srv->output_limit_pauses++;
}

/* Past upstream-output-limit what needs Redis waits, unread, and what is
 * answered here (cache hits, PING, ...) goes on: a read cache keeps serving
 * while Redis stalls. Returns 1 when the command must wait. */
static int hold_for_upstream(px_client *c) {
    if (!upstream_output_full(c->srv)) return 0;
    output_wait(c);
    return 1;
}

static int output_room(const px_server *srv) {
    return !upstream_output_full(srv);
}

void px_clients_output_wake(px_server *srv) {
    wake_all(srv, &srv->output_waiters, output_room);
}

static int always(const px_server *srv) {
    (void)srv;
    return 1;
}

void px_clients_ping_wake(px_server *srv) {
    wake_all(srv, &srv->ping_waiters, always);
}

/* ------------------------------------------------------------------------ */
/* session identity */

/* *dst becomes a copy of src (NULL: none). Returns 0, or -1 when the copy
 * could not be made (out of memory; *dst is then NULL, which the caller
 * must not take for "none": a credential or name dropped). */
static int set_str(char **dst, const char *src, size_t len) {
    free(*dst);
    *dst = NULL;
    if (src == NULL) return 0;
    *dst = malloc(len + 1);
    if (*dst == NULL) return -1;
    memcpy(*dst, src, len);
    (*dst)[len] = '\0';
    return 0;
}

static void switch_pool(px_client *c, px_pool *p) {
    if (p == c->pool) {
        px_pool_unref(p);
        return;
    }
    px_pool_unref(c->pool);
    c->pool = p;
}

static void clear_pending_state(px_client *c) {
    free(c->pend_user), c->pend_user = NULL;
    free(c->pend_pass), c->pend_pass = NULL;
    free(c->pend_name), c->pend_name = NULL;
    free(c->pend_name_early), c->pend_name_early = NULL;
    free(c->pend_value), c->pend_value = NULL;
    c->pend_field = NULL;
}

/* ------------------------------------------------------------------------ */
/* pinning */

static void unpin(px_client *c, int clean) {
    px_upstream *u = c->pinned;
    c->pinned = NULL;
    c->mode = PX_MODE_SHARED;
    c->watching = c->in_multi = c->blocking = 0;
    /* a connection whose MULTI or WATCH state Redis may still hold goes,
     * rather than to the next client */
    if (u != NULL) px_upstream_unpin(u, clean && !c->pin_unsure);
    c->pin_unsure = 0;
}

int px_client_answered_ahead_before(const px_client *c, const px_req *stop) {
    for (const px_req *q = c->slots_head; q != NULL && q != stop; q = q->next_slot)
        if (!(q->aux_flags & PX_AUX_WATCH_AHEAD)) return 0;
    return 1;
}

int px_client_awaits_only_ahead(const px_client *c) {
    return c->inflight == c->watch_ahead && px_client_answered_ahead_before(c, NULL);
}

/* A pinned session returns to the shared connection once its transaction
 * ended and nothing is in flight on its own connection. */
static void maybe_unpin(px_client *c) {
    if (c->mode != PX_MODE_PINNED || c->inflight != 0 || c->watching || c->in_multi) return;
    unpin(c, 1);
}

/* ------------------------------------------------------------------------ */
/* what Redis lets an identity do (UNWATCH, WATCH, DISCARD, CLIENT ...) */

/*
 * A command sent at ACL epoch e (its record's tag.acl_epoch) and answered +OK
 * teaches the pool that its identity may send it: *learned becomes e + 1.
 * That holds while the epoch stays e (an ACL command through the proxy
 * moves it on) and for clients that logged in where Redis wants it (one
 * that did not still gets NOAUTH from Redis).
 */
int px_client_permission_known(const px_client *c, uint64_t learned) {
    return (c->pass != NULL || c->srv->open_access == 1) && learned == px_acl_mark(c->srv) &&
           c->srv->acl_unsettled == 0;
}

void px_client_permission_probe(px_client *c, px_req *r, unsigned flag) {
    r->aux_flags |= flag;
    r->tag.acl_epoch = c->srv->acl_epoch;
}

void px_client_permission_learn(px_client *c, const px_req *r, int ok, uint64_t *learned) {
    if (ok && r->tag.acl_epoch == c->srv->acl_epoch) *learned = px_acl_mark(c->srv);
}

/* ------------------------------------------------------------------------ */
/* replies from upstream */

static void client_local_reply(px_client *c, px_req *r, const char **data, size_t *len, resp_buf *out);
static void on_reply_deliver(px_client *c, px_req *r, const char *data, size_t len);

/* Keeps a reply that arrived before its turn. Returns 0, or -1 after
 * closing the client (out of memory). */
static int early_add(px_client *c, px_req *r, const char *data, size_t len) {
    if (r->early == NULL) r->early = evbuffer_new();
    if (r->early == NULL || evbuffer_add(r->early, data, len) != 0) {
        px_client_close(c, "out of memory");
        return -1;
    }
    return 0;
}

static void client_local_apply(px_client *c);

/* Whether Redis accepted a session change: its reply is no error, or for
 * a HELLO with an option it refuses, that refusal (the options before it
 * held). */
static int state_accepted(const px_req *r, const char *data, size_t len) {
    if (r->aux_flags & PX_AUX_HELLO_REFUSED)
        return resp_frame_starts_with(data, len, "-ERR Client names ") ||
               resp_frame_starts_with(data, len, "-ERR Syntax error in HELLO option ");
    return !resp_frame_is_error(data, len);
}

/* A HELLO Redis refused: Redis 7.0 names the connection as it goes, so
 * the SETNAMEs before an AUTH it refused (WRONGPASS), or all of them before
 * it wants the client logged in (NOAUTH), hold all the same. */
static void hello_refused(px_client *c, const char *data, size_t len) {
    char **name = NULL;
    if (resp_frame_starts_with(data, len, "-WRONGPASS"))
        name = &c->pend_name_early;
    else if (resp_frame_starts_with(data, len, "-NOAUTH HELLO"))
        name = &c->pend_name;
    if (name == NULL || *name == NULL) return;
    free(c->name);
    c->name = (*name)[0] ? *name : NULL;
    if (c->name == NULL) free(*name);
    *name = NULL;
}

static void apply_state_change(px_client *c, px_req *r, const char *data, size_t len) {
    px_pool *target = NULL;
    int ok = state_accepted(r, data, len);
    if (!ok && r->kind == PX_REQ_HELLO) hello_refused(c, data, len);
    if (ok && r->kind == PX_REQ_CLIENT_LOCAL) {
        client_local_apply(c); /* the session's identity is unchanged */
    } else if (ok) {
        switch (r->kind) {
        case PX_REQ_SELECT:
            c->db = c->pend_db;
            break;
        case PX_REQ_AUTH:
            free(c->user), c->user = c->pend_user, c->pend_user = NULL;
            free(c->pass), c->pass = c->pend_pass, c->pend_pass = NULL;
            break;
        case PX_REQ_HELLO:
            c->proto = c->pend_proto;
            if (c->pend_pass != NULL) {
                free(c->user), c->user = c->pend_user, c->pend_user = NULL;
                free(c->pass), c->pass = c->pend_pass, c->pend_pass = NULL;
            }
            if (c->pend_name != NULL) {
                free(c->name);
                c->name = c->pend_name[0] ? c->pend_name : NULL;
                if (c->name == NULL) free(c->pend_name);
                c->pend_name = NULL;
            }
            break;
        }
        target = px_pool_ref(c->srv, c->user, c->pass, c->db, c->proto);
        if (target != NULL) switch_pool(c, target);
    }
    clear_pending_state(c);
    c->barrier = 0;
}

/* EVAL, EVALSHA, FCALL and their _RO forms: a script may return any error
 * text it likes (redis.error_reply). */
static int is_script_call(const px_client *c) {
    static const char *const names[] = {"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO"};
    const resp_arg *a = c->rq.argv;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (resp_arg_is(a[0].ptr, a[0].len, names[i])) return 1;
    return 0;
}

/* CLUSTER SLOTS, where key-prefix puts every cached key in one slot. */
static int wants_cluster_rewrite(px_client *c) {
    const resp_arg *a = c->rq.argv;
    const char *prefix = c->srv->cfg->key_prefix;
    return c->rq.argc == 2 && resp_arg_is(a[0].ptr, a[0].len, "CLUSTER") && resp_arg_is(a[1].ptr, a[1].len, "SLOTS") &&
           cluster_prefix_slot(prefix, strlen(prefix)) >= 0;
}

/* CLUSTER SLOTS's reply naming this proxy, at the address the client
 * reached it by, as the master of every range (protocol/cluster.h), so
 * that a cluster client (JuiceFS's) sends the volume's commands here. When
 * the master of the key-prefix's slot is another node than the upstream (a
 * failover, a resharding), the upstream follows it there (follow.h), and
 * the cache is emptied; without following (Sentinel, a tracking-upstream)
 * the reply is Redis's. Returns 0, or -1 to relay the reply unchanged
 * (also to a client on a unix socket: no address to name). */
static int cluster_slots_here(px_client *c, const px_req *r, const char *data, size_t len, resp_buf *out) {
    px_server *srv = c->srv;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char host[INET6_ADDRSTRLEN], up_ip[INET6_ADDRSTRLEN], other[300];
    int port;
    const char *prefix = srv->cfg->key_prefix;
    int slot = cluster_prefix_slot(prefix, strlen(prefix));
    px_follow_learn_nodes(srv, data, len);
    if (slot < 0 || c->io.fd < 0 || getsockname(c->io.fd, (struct sockaddr *)&ss, &sl) != 0 ||
        px_ip_text(&ss, host, sizeof host, &port) != 0)
        return -1;
    /* after a MOVED was followed, the configured name is another node's */
    cluster_self up = {.hosts = {srv->up_followed ? NULL : srv->cfg->up.host, NULL}, .port = srv->cfg->up.port};
    if (srv->up_salen > 0 && px_ip_text(&srv->up_sa, up_ip, sizeof up_ip, &up.port) == 0) up.hosts[1] = up_ip;
    int rc = cluster_slots_rewrite(data, len, (unsigned)slot, &up, host, port, out, other, sizeof other);
    if (rc == -2 && px_follow_enabled(srv)) {
        /* The slot is elsewhere (a failover no MOVED told of yet): the
         * upstream follows it now, and the reply names this proxy all the
         * same, where Redis's would teach the client the other nodes, from
         * which it would read the topology from then on (cluster.h). */
        char there[300];
        snprintf(there, sizeof there, "%s", other);
        const char *colon = strrchr(there, ':');
        long long oport;
        if (colon != NULL && resp_string2ll(colon + 1, strlen(colon + 1), &oport)) {
            there[colon - there] = '\0';
            cluster_self moved = {.hosts = {there, NULL}, .port = (int)oport};
            /* (not from a retired connection: its node is where Redis was,
             * and tells where the slot was then, maybe before a later
             * move the upstream followed since) */
            if (r->up == NULL || !r->up->retired) px_follow_to(srv, other);
            rc = cluster_slots_rewrite(data, len, (unsigned)slot, &moved, host, port, out, other, sizeof other);
        }
    }
    if (rc == -2 && !srv->cluster_other_logged) {
        px_notice("CLUSTER SLOTS: the master of slot %d (key-prefix %s) is %s, not the upstream: relayed unchanged, "
                  "cluster clients go there directly; point upstream at it to cache the volume",
                  slot, prefix, other);
        srv->cluster_other_logged = 1;
    }
    return rc == 0 ? 0 : -1;
}

/* Whether a MOVED of the volume's slot in reply to r reaches its client as
 * TRYAGAIN (follow.h): when r went on a shared connection, whose next try
 * goes to the new master. On a client's own connection (WATCH, MULTI) the
 * try would come back to the old node, which holds the client's WATCH, and
 * get the same answer until the client gave up (go-redis: MaxRetries with
 * back-off, some 20 s for JuiceFS): it gets the MOVED, which go-redis's
 * cluster Watch follows at once. (A MOVED teaches the client the node; it
 * keeps it among the nodes it reads the topology from only in its first
 * minute, before it first collects them.) Not a request lost with its
 * connection: that error is sidecache's own. */
static int moved_becomes_tryagain(const px_req *r) {
    return !r->lost && r->up != NULL && r->up->owner == NULL;
}

/* INFO's reply with the "# sidecache" section appended; the same type
 * (bulk, or RESP3 verbatim text). Returns 0, or -1 to relay it unchanged. */
static int info_with_section(px_client *c, const char *data, size_t len, resp_buf *out) {
    long long n;
    size_t at;
    if (len < 4 || (data[0] != '$' && data[0] != '=')) return -1;
    if ((at = resp_read_int_line(data, len, 0, data[0], &n)) == 0 || n < 0 || (size_t)n + 2 != len - at) return -1;
    const char *text = data + at;
    size_t tlen = (size_t)n;
    if (data[0] == '=') {
        if (tlen < 4) return -1;
        text += 4, tlen -= 4; /* "txt:" */
    }
    resp_buf sec;
    resp_buf_init(&sec);
    resp_buf_append(&sec, text, tlen);
    if (tlen > 0) resp_buf_append(&sec, "\r\n", 2);
    px_stats_info(c->srv, &sec);
    if (data[0] == '=')
        resp_enc_verbatim(out, "txt", sec.data, sec.len, 3);
    else
        resp_enc_bulk(out, sec.data, sec.len);
    int failed = sec.failed || out->failed;
    resp_buf_deinit(&sec);
    return failed ? -1 : 0;
}

void px_client_take_slot(px_client *c, px_req *r, px_upstream *u, size_t len) {
    slot_append(c, r);
    r->req_bytes = len + SLOT_COST;
    c->inflight_bytes += r->req_bytes;
    c->inflight++;
    c->inflight_on = u;
}

void px_client_on_reply(px_client *c, px_req *r, const char *data, size_t len) {
    if (r->kind == PX_REQ_BATCH) {
        px_batch_on_reply(c, r, data, len);
        return;
    }
    if (r->aux_flags & PX_AUX_ACL) c->srv->acl_epoch++;
    if ((r->aux_flags & PX_AUX_TXN_STATE) && resp_frame_is_error(data, len) && !resp_frame_is_execabort(data, len))
        px_txn_state_refused(c, r);
    if (r == c->unwatch_req) c->unwatch_req = NULL;
    if (r->aux_flags & (PX_AUX_PING | PX_AUX_ECHO))
        px_client_permission_learn(c, r, !r->lost && !resp_frame_is_error(data, len),
                         (r->aux_flags & PX_AUX_PING) ? &c->pool->ping_epoch : &c->pool->echo_epoch);
    if (r->aux_flags & PX_AUX_DISCARD) px_txn_discard_reply(c, r, data, len);
    /* the client already has its +OK: Redis's is not relayed */
    int answered = (r->aux_flags & (PX_AUX_WATCH | PX_AUX_UNWATCH)) ? px_txn_ahead_reply(c, r, data, len) : 0;
    if (r->aux_flags & PX_AUX_TXN_CHECK) {
        /* Redis's answer to queuing a command of a transaction queued here */
        c->txn_checks--;
        px_txn_local_checked(c, r, resp_frame_is_error(data, len));
        /* its connection was closed because Redis refused the check's
         * MULTI (the identity is denied now): the command ran alone, and
         * EXECABORT would say that nothing ran. The client is disconnected,
         * as on a lost connection, and nothing more of the transaction is
         * sent. (A check lost with its connection ran nothing: EXECABORT.) */
        if (r->lost && c->pool->txn_denied == px_acl_mark(c->srv)) px_client_close_after_replies(c);
    }
    resp_buf rewritten;
    resp_buf_init(&rewritten);
    if (r->kind == PX_REQ_CLIENT_LOCAL) client_local_reply(c, r, &data, &len, &rewritten);
    /* The cache learns from every reply, also one its client no longer
     * waits for: a write that happened must invalidate all the same. */
    if (c->srv->caching != NULL) {
        int k = px_caching_on_reply(c, r, data, len, &rewritten);
        if (k == PX_CACHING_RESEND && c->state != PX_CLIENT_CLOSED && !rewritten.failed) {
            /* r keeps its slot; its connection answered this reply, so it
             * is alive, and nothing of the client's went there since */
            px_upstream_send(r->up, r, rewritten.data, rewritten.len);
            resp_buf_deinit(&rewritten);
            return;
        }
        if (k != 0 && rewritten.failed) {
            /* (Redis's reply is not the client's: a part of its MGET) */
            data = oom_reply;
            len = sizeof oom_reply - 1;
        } else if (k == 1) {
            data = rewritten.data;
            len = rewritten.len;
        }
    }
    if (c->mget_merge == r) c->mget_merge = NULL;
    if ((r->aux_flags & PX_AUX_INFO) && c->state != PX_CLIENT_CLOSED && info_with_section(c, data, len, &rewritten) == 0) {
        data = rewritten.data;
        len = rewritten.len;
    }
    resp_buf topology;
    resp_buf_init(&topology);
    if ((r->aux_flags & PX_AUX_CLUSTER_SLOTS) && c->state != PX_CLIENT_CLOSED &&
        cluster_slots_here(c, r, data, len, &topology) == 0 && !topology.failed) {
        data = topology.data;
        len = topology.len;
    } else if (len > 0 && data[0] == '-' && !(r->aux_flags & PX_AUX_SCRIPT) && moved_becomes_tryagain(r) &&
               px_follow_tryagain(c->srv, data, len, &topology) && !topology.failed) {
        data = topology.data;
        len = topology.len;
    }
    on_reply_deliver(c, r, data, answered ? 0 : len);
    resp_buf_deinit(&topology);
    resp_buf_deinit(&rewritten);
    if (answered == 2) px_client_close(c, "WATCH or UNWATCH answered ahead was refused");
}

static void on_reply_deliver(px_client *c, px_req *r, const char *data, size_t len) {
    c->inflight--;
    if (c->inflight == 0) c->inflight_on = NULL;
    if (c->state == PX_CLIENT_CLOSED) {
        /* a zombie: the slot list was dropped at close */
        px_req_release(c->srv, r);
        if (c->inflight == 0) queue_reap(c);
        return;
    }
    if (r->kind != PX_REQ_CLIENT) apply_state_change(c, r, data, len);

    if (r == c->slots_head) {
        slot_pop(c, r);
        px_req_release(c->srv, r);
        client_write(c, data, len);
        client_flush_slots(c);
    } else {
        if (early_add(c, r, data, len) != 0) return;
        r->done = 1;
    }
    if (c->state == PX_CLIENT_CLOSED) return;
    if (c->inflight == 0) c->blocking = 0;
    /* gone, and now Redis blocks on what it sent (all before is answered):
     * Redis frees such a client, and its connection goes (the commands
     * behind, which Redis would not run, with it) */
    if (c->peer_closed && blocked_now(c)) {
        px_client_close(c, "client closed connection");
        return;
    }
    maybe_unpin(c);

    if (c->state == PX_CLIENT_CLOSING) {
        if (c->inflight == 0 && c->slots_head == NULL && px_io_pending(&c->io) == 0 && !c->mute_linger)
            px_client_close(c, "closed after reply");
        return;
    }
    resume_input(c);
}

void px_client_on_reply_part(px_client *c, px_req *r, const char *data, size_t len) {
    /* (an error sidecache made for a lost request says nothing of Redis) */
    if (!r->lost) px_caching_note_reply(c->srv, data, len);
    px_caching_on_reply_part(c, r);
    if (c->state == PX_CLIENT_CLOSED) return;
    resp_buf tryagain;
    resp_buf_init(&tryagain);
    if (len > 0 && data[0] == '-' && moved_becomes_tryagain(r) && px_follow_tryagain(c->srv, data, len, &tryagain)) {
        data = tryagain.data;
        len = tryagain.len;
    }
    /* the head slot's early replies were written when it became the head */
    if (r == c->slots_head)
        client_write(c, data, len);
    else
        early_add(c, r, data, len);
    resp_buf_deinit(&tryagain);
}

void px_clients_access_learned(px_server *srv) {
    if (srv->open_access != 0) return;
    for (px_client *c = srv->clients, *next; c != NULL; c = next) {
        next = c->next;
        if (c->pass != NULL || c->state != PX_CLIENT_ACTIVE || c->mode == PX_MODE_TUNNEL || c->input_paused ||
            c->partial_since_ms == 0)
            continue;
        /* framed so far without Redis's pre-AUTH limits: again, with them */
        resp_req_reset(&c->rq);
        client_process(c);
    }
}

void px_client_upstream_drained(px_client *c) {
    /* only a client paused for its backlog: one in the middle of its own
     * processing (writing early to its connection) is left alone */
    if (c->backlogged && c->input_paused) resume_input(c);
}

void px_client_on_tunnel_data(px_client *c, const char *data, size_t len) {
    if (c->state == PX_CLIENT_CLOSED) return;
    client_write(c, data, len);
}

void px_client_write_reply(px_client *c, const char *data, size_t len) {
    client_write(c, data, len);
}

/* Drops what the client sent that is not read yet: nothing of it runs. */
static void drop_input(px_client *c) {
    size_t unread;
    px_io_input(&c->io, &unread);
    px_io_consume(&c->io, unread);
}

/* A protocol error, or a request over the query buffer limit, ends the
 * session as in Redis: the error follows the replies to every command
 * before it, and the connection closes. In a tunnel those replies are not
 * matched: a RESET of sidecache's own, with the marker behind it, tells
 * when Redis has sent them all (px_client_on_tunnel_reset; the session
 * ends, so what RESET undoes does not matter), and nothing more is read. */
static void fail_after_replies(px_client *c, const char *err) {
    if (c->mode == PX_MODE_TUNNEL && c->pinned != NULL && c->tunnel_fail == NULL) {
        if ((c->tunnel_fail = strdup(err)) != NULL) {
            px_upstream_send_reset_own(c->pinned);
            c->barrier = 1;
            pause_input(c);
            /* nothing more of it is read: what is here (up to a query
             * buffer's worth) need not wait for Redis */
            drop_input(c);
            return;
        }
    }
    px_client_reply_error(c, "%s", err);
    px_client_close_after_replies(c);
}

/* Starts closing once what is queued is written. */
void px_client_close_after_replies(px_client *c) {
    if (c->state != PX_CLIENT_ACTIVE) return;
    c->state = PX_CLIENT_CLOSING;
    px_io_pause_read(&c->io);
    if (c->inflight == 0 && c->slots_head == NULL &&
        px_io_pending(&c->io) == 0)
        px_client_close(c, "closed after reply");
}

void px_client_on_pinned_lost(px_client *c, px_upstream *u) {
    if (c->pinned == u) c->pinned = NULL;
    if (c->state == PX_CLIENT_CLOSED) return;
    /* Redis dropped the client's own connection, and with it WATCH, MULTI,
     * subscriptions or whatever state it held: the client must see a lost
     * connection too, never a silent reset of that state. */
    px_verbose("client loses its upstream connection id=%llu addr=%s", (unsigned long long)c->id, c->addr);
    px_client_close_after_replies(c);
}

/* ------------------------------------------------------------------------ */
/* forwarding */

px_upstream *px_client_shared_conn(px_client *c) {
    return px_pool_shared(c->pool, c->id);
}

void px_client_reply_unavailable(px_client *c, px_pool *p) {
    px_client_reply_error(c, "%s sidecache: %s", px_unavailable_code(c->srv),
                p->last_error[0] ? p->last_error : "upstream unavailable");
}

/* Bytes of the current request as Redis must receive them: the frame as it
 * came, or an inline command re-encoded as multibulk. */
void px_client_request_bytes(px_client *c, const char *frame, const char **out, size_t *outlen) {
    if (!c->rq.is_inline) {
        *out = frame;
        *outlen = c->rq.frame_len;
        return;
    }
    resp_buf_reset(&c->scratch);
    if (resp_enc_command(&c->scratch, c->rq.argc, c->rq.argv) != 0) {
        /* no memory: the inline line as it came, which Redis reads too */
        *out = frame;
        *outlen = c->rq.frame_len;
        return;
    }
    *out = c->scratch.data;
    *outlen = c->scratch.len;
}

/* Sends a request and takes its reply slot; by_ref: data is the frame in
 * the client's input (px_upstream_send_ref). Returns the record, or NULL
 * (the client is closed: out of memory). */
px_req *px_client_forward_to(px_client *c, px_upstream *u, int kind, const char *data, size_t len, int by_ref) {
    px_req *r = px_req_new(c->srv, c, kind);
    if (r == NULL) {
        px_client_close(c, "out of memory");
        return NULL;
    }
    px_client_take_slot(c, r, u, len);
    if (by_ref)
        px_upstream_send_ref(u, r, data, len);
    else
        px_upstream_send(u, r, data, len);
    return r;
}

/* INFO with no section, or one that includes ours, gets our section. */
static int wants_info_section(px_client *c) {
    const resp_arg *a = c->rq.argv;
    if (!resp_arg_is(a[0].ptr, a[0].len, "INFO")) return 0;
    if (c->rq.argc == 1) return 1;
    for (int i = 1; i < c->rq.argc; i++)
        if (resp_arg_is(a[i].ptr, a[i].len, "sidecache") || resp_arg_is(a[i].ptr, a[i].len, "all") ||
            resp_arg_is(a[i].ptr, a[i].len, "everything") || resp_arg_is(a[i].ptr, a[i].len, "default"))
            return 1;
    return 0;
}

static px_req *forward_current(px_client *c, px_upstream *u, const char *frame) {
    const char *data;
    size_t len;
    px_client_request_bytes(c, frame, &data, &len);
    /* on the client's own connection, a frame of the input goes by
     * reference (a shared one gathers the requests of many clients, each
     * copied as before) */
    px_req *r = px_client_forward_to(c, u, PX_REQ_CLIENT, data, len, u == c->pinned && !c->rq.is_inline);
    if (r != NULL && !c->in_multi) {
        if (wants_info_section(c)) r->aux_flags |= PX_AUX_INFO;
        if (wants_cluster_rewrite(c)) r->aux_flags |= PX_AUX_CLUSTER_SLOTS;
        /* (a JuiceFS lookup's errors but ENOENT are Redis's: review-fills F3) */
        if (is_script_call(c) && !px_caching_is_lookup_call(c->srv, c->rq.argc, c->rq.argv))
            r->aux_flags |= PX_AUX_SCRIPT;
        if (resp_acl_changes(c->rq.argc, c->rq.argv)) r->aux_flags |= PX_AUX_ACL;
    }
    return r;
}

/* Commands queued in MULTI on the client's own connection travel as a run:
 * one record for all their replies (px_req.replies_left), which saves a
 * record, a reply slot and a delivery per command of a large transaction
 * (JuiceFS's batch unlink queues about a thousand). Joins the current
 * request to the run the client's last slot holds, if it is still the
 * last request on that connection. Returns 1 if it did. */
static int run_extend(px_client *c, const char *frame) {
    px_req *r = c->slots_tail;
    px_upstream *u = c->pinned;
    if (r == NULL || !r->run || !r->pending || u == NULL || u->tail != r || r->replies_left >= UINT32_MAX / 2)
        return 0;
    const char *data;
    size_t len;
    px_client_request_bytes(c, frame, &data, &len);
    /* a frame of the input (not an inline command encoded in scratch,
     * which the next one overwrites) goes by reference: client_process
     * settles it */
    px_upstream_extend(u, r, data, len, !c->rq.is_inline);
    return 1;
}

/* Queued commands of a transaction on the client's own connection wait to
 * be written until this many bytes of them are parsed (forward_pinned). */
#define TXN_EAGER_BYTES 16384

/* Forwards to the client's own connection, keeping the transaction state
 * and what the cache must learn from it: the keys of writes queued in
 * MULTI are invalidated when EXEC's reply comes (C1). */
static void forward_pinned(px_client *c, int id, const char *frame) {
    int queued = c->in_multi && id != CMD_EXEC && id != CMD_DISCARD && id != CMD_MULTI;
    int ends_txn = c->in_multi && (id == CMD_EXEC || id == CMD_DISCARD);
    int opens_txn = !c->in_multi && id == CMD_MULTI;
    int state = ends_txn || opens_txn || (!c->in_multi && id == CMD_UNWATCH);
    if (c->in_multi && id == CMD_DISCARD) c->txn_acl = 0;
    px_txn_track(c, id);
    if (queued && run_extend(c, frame)) {
        px_caching_on_send(c, c->pinned, NULL, 0, 1);
        /* a long transaction starts reaching Redis while the proxy parses
         * the rest of it: Redis queues what it has meanwhile (it reads
         * 16 KB at a time itself), and its +QUEUED replies go on to the
         * client as they come, so that the client reads them while Redis
         * runs the transaction, not after it */
        px_io_write_early(&c->pinned->io, TXN_EAGER_BYTES);
        return;
    }
    int watch = id == CMD_WATCH && !c->in_multi;
    /* a name Redis keeps on the connection after the client leaves it */
    if (id == CMD_CLIENT || id == CMD_HELLO) c->pinned->named = 1;
    /* WAIT counts replicas' acks up to the connection's last command: the
     * client's writes went on the shared connection, so a command here
     * first brings it up to them (a connection from the idle list carries
     * its last client's) */
    if ((id == CMD_WAIT || id == CMD_WAITAOF) && !c->in_multi) {
        static const char ping_cmd[] = "*1\r\n$4\r\nPING\r\n";
        px_req *p = px_req_new(c->srv, NULL, PX_REQ_DISCARD);
        if (p != NULL) px_upstream_send(c->pinned, p, ping_cmd, sizeof ping_cmd - 1);
    }
    px_req *r = forward_current(c, c->pinned, frame);
    if (r == NULL) return;
    if (state) r->aux_flags |= PX_AUX_TXN_STATE;
    if (state && id == CMD_UNWATCH) {
        c->unwatch_req = r;
        c->unwatch_txn_seq = c->txn_seq;
    }
    if (opens_txn) {
        r->aux_flags |= PX_AUX_MULTI_OPEN;
        r->tag.txn_seq = ++c->txn_seq;
    }
    px_caching_on_send(c, c->pinned, r, 0, queued);
    if (ends_txn) {
        /* the transaction leaves first: Redis runs it during the purge.
         * A DISCARD's reply purges the keys too: the commands ran after
         * all if Redis had refused the MULTI (an ACL without it), which the
         * proxy, sending on without waiting for that reply, took as queued */
        px_io_write_early(&c->pinned->io, 1);
        px_caching_txn_close(c, r);
        if (id == CMD_EXEC) px_txn_acl_exec(c, r);
    }
    if (watch) px_txn_watch_send(c, c->pinned, r);
    if (state && id == CMD_UNWATCH) px_txn_unwatch_send(c, c->pinned, r);
    if (ends_txn && id == CMD_DISCARD) px_txn_discard_send(c, r);
    /* a queued command's reply is +QUEUED or an error, with nothing to
     * learn: the next ones may join its record */
    if (queued && r->aux_flags == 0) r->run = 1;
}

/* forward_pinned, and a blocking command (not queued in MULTI, where it
 * does not block) says so in its record (blocked_now). */
static void forward_blocking_aware(px_client *c, int id, int act, const char *frame) {
    int blocks = act == ACT_BLOCK && !c->in_multi;
    forward_pinned(c, id, frame);
    px_req *r = c->slots_tail;
    if (!blocks || c->state == PX_CLIENT_CLOSED || r == NULL || !r->pending) return;
    r->blocks = 1;
    /* (sent after the client's close was seen: a command it sent before) */
    if (c->peer_closed || c->peer_gone) gone_check_later(c);
}

/* The name the client gave us on its own connection, so that CLIENT LIST
 * and CLIENT INFO on Redis show it on the connection that is really the
 * client's; none, where the connection's last client left a name on it. */
static void pinned_name(px_client *c, px_upstream *u) {
    resp_buf b;
    resp_buf_init(&b);
    resp_enc_commandv(&b, "CLIENT", "SETNAME", c->name != NULL ? c->name : "", NULL);
    u->named = c->name != NULL;
    px_req *r = b.failed ? NULL : px_req_new(c->srv, NULL, PX_REQ_DISCARD);
    /* in a tunnel too: its reply is matched before the tunnel's bytes */
    if (r != NULL)
        px_upstream_send(u, r, b.data, b.len);
    else
        u->named = 1; /* (not known: set again at the next pin) */
    resp_buf_deinit(&b);
}

/* Takes a connection of the client's own. Returns 0, or -1 after replying
 * with the reason it could not be had. */
int px_client_pin_new(px_client *c, int mode) {
    px_upstream *u = px_pool_pin(c->pool, c, mode == PX_MODE_TUNNEL);
    if (u == NULL) {
        px_client_reply_unavailable(c, c->pool);
        return -1;
    }
    c->pinned = u;
    c->mode = mode;
    if (c->name != NULL || u->named) pinned_name(c, u);
    return 0;
}

/*
 * Redis's CLIENT REPLY state of a tunnel's connection (networking.c): OFF
 * until ON; SKIP for the one command after a CLIENT REPLY SKIP, and for a
 * protocol error met in its place. Followed as commands are sent, so that a
 * protocol error ends the session as Redis ends it, without a word under
 * OFF or SKIP (px_client_on_tunnel_reset). Where a CLIENT REPLY may not do
 * what it says (queued in a MULTI, refused in RESP2's subscribed context,
 * after a HELLO) the state is no longer known, and the error is sent.
 */
enum {
    TUNNEL_REPLY_OFF = 1,
    TUNNEL_REPLY_SKIP = 2,
    TUNNEL_REPLY_CONTEXT = 4, /* a MULTI, subscription or HELLO went */
    TUNNEL_REPLY_UNKNOWN = 8,
};

static void tunnel_follow_reply(px_client *c) {
    const resp_arg *a = c->rq.argv;
    int argc = c->rq.argc, f = c->tunnel_reply;
    if (argc == 0 || (f & TUNNEL_REPLY_UNKNOWN)) return;
    f &= ~TUNNEL_REPLY_SKIP; /* spent on this command */
    if (argc >= 2 && resp_arg_is(a[0].ptr, a[0].len, "CLIENT") && resp_arg_is(a[1].ptr, a[1].len, "REPLY")) {
        if (f & TUNNEL_REPLY_CONTEXT)
            f |= TUNNEL_REPLY_UNKNOWN;
        else if (argc == 3 && resp_arg_is(a[2].ptr, a[2].len, "ON"))
            f &= ~TUNNEL_REPLY_OFF;
        else if (argc == 3 && resp_arg_is(a[2].ptr, a[2].len, "OFF"))
            f |= TUNNEL_REPLY_OFF;
        else if (argc == 3 && resp_arg_is(a[2].ptr, a[2].len, "SKIP") && !(f & TUNNEL_REPLY_OFF))
            f |= TUNNEL_REPLY_SKIP;
    } else if (resp_arg_is(a[0].ptr, a[0].len, "MULTI") || resp_arg_is(a[0].ptr, a[0].len, "HELLO") ||
               resp_arg_is(a[0].ptr, a[0].len, "SUBSCRIBE") || resp_arg_is(a[0].ptr, a[0].len, "PSUBSCRIBE") ||
               resp_arg_is(a[0].ptr, a[0].len, "SSUBSCRIBE")) {
        f |= TUNNEL_REPLY_CONTEXT;
    }
    c->tunnel_reply = f;
}

static int tunnel_reply_muted(const px_client *c) {
    return !(c->tunnel_reply & TUNNEL_REPLY_UNKNOWN) && (c->tunnel_reply & (TUNNEL_REPLY_OFF | TUNNEL_REPLY_SKIP));
}

static void enter_tunnel(px_client *c, const char *frame) {
    const char *data;
    size_t len;
    const resp_arg *a = c->rq.argv;
    c->mode = PX_MODE_TUNNEL;
    c->pinned->tunnel = 1;
    c->tunnel_reply = c->in_multi ? TUNNEL_REPLY_CONTEXT : 0;
    tunnel_follow_reply(c);
    /* writes queued before it may run at an EXEC in the tunnel, whose
     * reply is not matched (tunnel_waits) */
    if (c->in_multi && (c->txn_keys.len > 0 || c->txn_flush)) c->pinned->tunnel_wrote = 1;
    px_client_request_bytes(c, frame, &data, &len);
    /* a new connection's handshake may still await its replies, which
     * Redis would count as the client's pipeline */
    if (c->rq.argc >= 2 && resp_arg_is(a[0].ptr, a[0].len, "SCRIPT") && resp_arg_is(a[1].ptr, a[1].len, "DEBUG"))
        px_upstream_send_alone(c->pinned, data, len);
    else
        px_upstream_send_raw(c->pinned, data, len);
}

/* ------------------------------------------------------------------------ */
/* commands answered here */

static int valid_name(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] < '!' || p[i] > '~') return 0;
    return 1;
}

static void cmd_ping(px_client *c) {
    if (c->rq.argc > 2) return reply_arity(c, "ping");
    if (c->rq.argc == 1) return px_client_reply_simple(c, "PONG");
    resp_buf_reset(&c->scratch);
    resp_enc_bulk(&c->scratch, c->rq.argv[1].ptr, c->rq.argv[1].len);
    reply_buf(c, &c->scratch);
}

/* (arity checked by answer_local) */
static void cmd_echo(px_client *c) {
    resp_buf_reset(&c->scratch);
    resp_enc_bulk(&c->scratch, c->rq.argv[1].ptr, c->rq.argv[1].len);
    reply_buf(c, &c->scratch);
}

/*
 * CLIENT SETNAME, GETNAME and SETINFO: the name and library of the session
 * (its shared connection is other clients' too), answered here. Redis's ACL
 * may deny each of them (client|setname ...), and where Redis wants a
 * password a client without one gets NOAUTH; so they are answered here only
 * once Redis has let this identity send that subcommand (pool
 * client_epoch). Until then Redis is asked with a form of it that changes
 * nothing (an invalid name; GETNAME as it is): its refusal (NOPERM, NOAUTH,
 * BUSY, ...) is relayed; if it ran, the client gets the answer made here
 * (client_local_reply). Nothing else is sent meanwhile.
 */
enum client_local_sub { CLIENT_SETNAME, CLIENT_GETNAME, CLIENT_SETINFO };

static int client_local_sub(const px_client *c) {
    const resp_arg *a = c->rq.argv;
    if (resp_arg_is(a[1].ptr, a[1].len, "SETNAME")) return CLIENT_SETNAME;
    return resp_arg_is(a[1].ptr, a[1].len, "GETNAME") ? CLIENT_GETNAME : CLIENT_SETINFO;
}

/* Redis's answer to the command, in out; a change it makes goes to
 * c->pend_field (the field, NULL if none) and c->pend_value. */
static void client_local_answer(px_client *c, resp_buf *out) {
    const resp_arg *a = c->rq.argv;
    resp_buf_reset(out);
    switch (client_local_sub(c)) {
    case CLIENT_SETNAME:
        if (!valid_name(a[2].ptr, a[2].len))
            return enc_error(out, "ERR Client names cannot contain spaces, newlines or special characters.");
        if (set_str(&c->pend_value, a[2].len ? a[2].ptr : NULL, a[2].len) != 0) {
            resp_buf_append(out, oom_reply, sizeof oom_reply - 1);
            return;
        }
        c->pend_field = &c->name;
        resp_enc_simple(out, "OK");
        return;
    case CLIENT_GETNAME:
        if (c->name)
            resp_enc_bulk_str(out, c->name);
        else
            resp_enc_null(out, c->proto);
        return;
    default: {
        int lib_name = resp_arg_is(a[2].ptr, a[2].len, "LIB-NAME");
        if (!lib_name && !resp_arg_is(a[2].ptr, a[2].len, "LIB-VER"))
            return enc_error(out, "ERR Unrecognized option '%.*s'", (int)(a[2].len > 64 ? 64 : a[2].len), a[2].ptr);
        if (!valid_name(a[3].ptr, a[3].len))
            return enc_error(out, "ERR %s cannot contain spaces, newlines or special characters.",
                             lib_name ? "lib-name" : "lib-ver");
        /* nothing reports it: CLIENT INFO and LIST go to Redis, which
         * shows the proxy's connection */
        resp_enc_simple(out, "OK");
    }
    }
}

static void client_local_apply(px_client *c) {
    if (c->pend_field == NULL) return;
    free(*c->pend_field);
    *c->pend_field = c->pend_value;
    c->pend_value = NULL;
    /* a session on a connection of its own (WATCH) renames that too */
    if (c->pend_field == &c->name && c->mode == PX_MODE_PINNED && c->pinned != NULL) pinned_name(c, c->pinned);
    c->pend_field = NULL;
}

/* Asks Redis, on the connection of the session's identity, whether it
 * allows the subcommand; the answer waits in the request (aux). */
static int client_local_ask(px_client *c, int sub) {
    static const char *const probes[] = {
        [CLIENT_SETNAME] = "*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$15\r\nsidecache probe\r\n",
        [CLIENT_GETNAME] = "*2\r\n$6\r\nCLIENT\r\n$7\r\nGETNAME\r\n",
        [CLIENT_SETINFO] = "*4\r\n$6\r\nCLIENT\r\n$7\r\nSETINFO\r\n$8\r\nLIB-NAME\r\n$15\r\nsidecache probe\r\n",
    };
    px_upstream *u = c->mode == PX_MODE_PINNED ? c->pinned : px_client_shared_conn(c);
    if (u == NULL) {
        px_client_reply_unavailable(c, c->pool);
        return PX_DISPATCH_DONE;
    }
    if (c->inflight > 0 && c->inflight_on != u) return PX_DISPATCH_WAIT;
    client_local_answer(c, &c->scratch);
    char *answer = c->scratch.failed ? NULL : malloc(c->scratch.len);
    px_req *r =
        answer != NULL ? px_client_forward_to(c, u, PX_REQ_CLIENT_LOCAL, probes[sub], strlen(probes[sub]), 0) : NULL;
    if (r == NULL) {
        free(answer);
        if (c->state != PX_CLIENT_CLOSED) px_client_close(c, "out of memory");
        return PX_DISPATCH_DONE;
    }
    memcpy(answer, c->scratch.data, c->scratch.len);
    r->aux = answer;
    r->aux_len = c->scratch.len;
    px_client_permission_probe(c, r, 0);
    c->pend_client = sub;
    c->barrier = 1;
    return PX_DISPATCH_DONE;
}

/* Whether Redis's reply to a probe says it ran the subcommand: a value,
 * or the error for the invalid value it was given (or, before 7.2, for
 * SETINFO, which it does not know: 7.0's words, then 6.2's). Anything else
 * (NOPERM, NOAUTH, BUSY, LOADING, ...) is Redis's answer to the client. */
static int client_probe_ran(const char *data, size_t len) {
    static const char *const ran[] = {"-ERR Client names ", "-ERR lib-name ", "-ERR unknown subcommand ",
                                      "-ERR Unknown subcommand or wrong number of arguments for 'SETINFO'"};
    if (!resp_frame_is_error(data, len)) return 1;
    for (size_t i = 0; i < sizeof ran / sizeof ran[0]; i++)
        if (resp_frame_starts_with(data, len, ran[i])) return 1;
    return 0;
}

/* Redis's reply to client_local_ask: relayed unless it ran the probe, else
 * replaced by the answer made here (copied to out: r goes before it is
 * written). */
static void client_local_reply(px_client *c, px_req *r, const char **data, size_t *len, resp_buf *out) {
    if (r->lost || !client_probe_ran(*data, *len)) return;
    px_client_permission_learn(c, r, 1, &c->pool->client_epoch[c->pend_client]);
    if (resp_buf_append(out, r->aux, r->aux_len) != 0) return px_client_close(c, "out of memory");
    *data = out->data;
    *len = out->len;
}

static int cmd_client_local(px_client *c) {
    int sub = client_local_sub(c);
    if (!px_client_permission_known(c, c->pool->client_epoch[sub])) return client_local_ask(c, sub);
    client_local_answer(c, &c->scratch);
    client_local_apply(c);
    reply_buf(c, &c->scratch);
    return PX_DISPATCH_DONE;
}

/* The session as a new connection's, in the upstream's db, on the shared
 * connections of the upstream's identity; then +RESET. */
static void session_reset(px_client *c, int reply) {
    c->txn_acl = 0;
    unpin(c, 0);
    c->proto = 2;
    c->db = c->srv->cfg->up.db;
    free(c->user), c->user = NULL;
    free(c->pass), c->pass = NULL;
    free(c->name), c->name = NULL;
    px_pool *p = px_pool_ref(c->srv, NULL, NULL, c->db, 2);
    if (p != NULL) switch_pool(c, p);
    if (reply) px_client_reply_simple(c, "RESET");
}

static int cmd_reset(px_client *c) {
    if (c->inflight > 0) return PX_DISPATCH_WAIT;
    px_txn_local_end(c, 0);
    /* a transaction queued on the client's own connection is dropped with
     * it; its keys are purged all the same (every reply is in: what ran, if
     * Redis had refused the MULTI, has run) */
    px_caching_txn_abandon(c);
    session_reset(c, 1);
    return PX_DISPATCH_DONE;
}

/* The tunnel an ACL command went through has ended: that command has run
 * by now, or never will, so what is known of permissions is learnt anew. */
static void tunnel_acl_settle(px_client *c) {
    if (!c->tunnel_acl) return;
    c->tunnel_acl = 0;
    c->srv->acl_unsettled--;
    c->srv->acl_epoch++;
}

void px_client_on_tunnel_reset(px_client *c) {
    if (c->state == PX_CLIENT_CLOSED || c->mode != PX_MODE_TUNNEL) return;
    tunnel_acl_settle(c);
    if (c->tunnel_fail != NULL) {
        /* every reply to what came before the error was relayed */
        if (tunnel_reply_muted(c)) {
            unpin(c, 0);
            /* over the query buffer limit Redis closes it at once, and
             * says nothing there either */
            if (c->tunnel_fail_qbuf) {
                px_client_close(c, "query buffer limit reached");
                return;
            }
            /* Redis, which may not answer, runs nothing more and holds the
             * connection open until the client closes it (or `timeout`
             * does), reading and dropping what comes: so does sidecache,
             * without the own connection (client_on_read; what came before
             * was dropped with the error, fail_after_replies) */
            c->mute_linger = 1;
            c->state = PX_CLIENT_CLOSING;
            c->barrier = 0;
            c->input_paused = 0;
            px_io_resume_read(&c->io);
            return;
        }
        px_client_reply_error(c, "%s", c->tunnel_fail);
        px_client_close_after_replies(c);
        return;
    }
    /* every reply up to the RESET's was relayed (Redis's +RESET among them,
     * if it sent one); the connection is closed (a tunnel's is never
     * reused), the session starts afresh */
    session_reset(c, 0);
    c->barrier = 0;
    resume_input(c);
}

static int args_equal(const resp_arg *x, const resp_arg *y) {
    return x->len == y->len && memcmp(x->ptr, y->ptr, x->len) == 0;
}

/* A SELECT that Redis can only refuse goes as it is to the session's
 * shared connection, for Redis to answer after its own checks
 * (NOAUTH, ACL), which come first. */
static int forward_refused(px_client *c, const char *frame) {
    px_upstream *u = px_client_shared_conn(c);
    if (u == NULL) return px_client_reply_unavailable(c, c->pool), PX_DISPATCH_DONE;
    if (c->inflight > 0 && c->inflight_on != u) return PX_DISPATCH_WAIT;
    forward_current(c, u, frame);
    return PX_DISPATCH_DONE;
}

/*
 * SELECT, AUTH and HELLO: the command goes to a shared connection of the
 * pool of the identity it asks for, where it is a no-op if Redis accepts it
 * (the pool's handshake already did the same) and fails with Redis's own
 * error if not; the session switches only on success.
 */
static int cmd_state(px_client *c, int id, const char *frame) {
    const resp_arg *a = c->rq.argv;
    int argc = c->rq.argc;
    int kind, db = c->db, proto = c->proto, bad_at = 0, auth_at = 0, oom = 0;
    const char *user = c->user, *pass = c->pass;
    resp_buf *b = &c->scratch;

    clear_pending_state(c);
    if (id == CMD_SELECT) {
        if (argc != 2) return reply_arity(c, "select"), PX_DISPATCH_DONE;
        char num[32];
        long long v;
        /* an index no db has: Redis answers it, after its NOAUTH and ACL
         * checks, with the error for what is wrong; it changes nothing */
        if (!resp_string2ll(a[1].ptr, a[1].len, &v) || v > INT_MAX || v < 0) return forward_refused(c, frame);
        db = (int)v;
        snprintf(num, sizeof num, "%d", db);
        c->pend_db = db;
        kind = PX_REQ_SELECT;
        resp_buf_reset(b);
        resp_enc_commandv(b, "SELECT", num, NULL);
    } else if (id == CMD_AUTH) {
        if (argc < 2) return reply_arity(c, "auth"), PX_DISPATCH_DONE;
        if (argc > 3) return px_client_reply_error(c, "ERR syntax error"), PX_DISPATCH_DONE;
        if (argc == 3) oom |= set_str(&c->pend_user, a[1].ptr, a[1].len);
        oom |= set_str(&c->pend_pass, a[argc - 1].ptr, a[argc - 1].len);
        user = c->pend_user;
        pass = c->pend_pass;
        kind = PX_REQ_AUTH;
        resp_buf_reset(b);
        resp_enc_command(b, argc, a);
    } else { /* HELLO [protover [AUTH user pass] [SETNAME name]] */
        if (argc >= 2) {
            long long v;
            if (!resp_string2ll(a[1].ptr, a[1].len, &v)) {
                px_client_reply_error(c, "ERR Protocol version is not an integer or out of range");
                return PX_DISPATCH_DONE;
            }
            if (v != 2 && v != 3) {
                px_client_reply_error(c, "NOPROTO unsupported protocol version");
                return PX_DISPATCH_DONE;
            }
            proto = (int)v;
        }
        /* Redis 7.0 applies the options one by one (AUTH logs in, SETNAME
         * names) and stops at the first it refuses, keeping what it did;
         * then it wants the client logged in */
        for (int i = 2; i < argc && !bad_at; i++) {
            int more = argc - i - 1;
            if (resp_arg_is(a[i].ptr, a[i].len, "AUTH") && more >= 2) {
                if (auth_at && !(args_equal(&a[auth_at + 1], &a[i + 1]) && args_equal(&a[auth_at + 2], &a[i + 2]))) {
                    /* Redis logs in as each in turn and stops at the first
                     * it refuses: sidecache can check one identity only */
                    clear_pending_state(c);
                    px_client_reply_error(c, "ERR sidecache: HELLO with two different AUTH options is not supported");
                    return PX_DISPATCH_DONE;
                }
                /* the name so far holds even if this AUTH is refused (only
                 * the same credentials may follow: refused at the first) */
                if (!auth_at)
                    oom |= set_str(&c->pend_name_early, c->pend_name, c->pend_name ? strlen(c->pend_name) : 0);
                auth_at = i;
                oom |= set_str(&c->pend_user, a[i + 1].ptr, a[i + 1].len);
                oom |= set_str(&c->pend_pass, a[i + 2].ptr, a[i + 2].len);
                i += 2;
            } else if (resp_arg_is(a[i].ptr, a[i].len, "SETNAME") && more >= 1 && valid_name(a[i + 1].ptr, a[i + 1].len)) {
                oom |= set_str(&c->pend_name, a[i + 1].ptr, a[i + 1].len);
                i += 1;
            } else {
                bad_at = i; /* an invalid name, or not an option */
            }
        }
        if (c->pend_pass != NULL) {
            /* HELLO AUTH names a user: "default" is Redis's legacy user */
            user = c->pend_user;
            pass = c->pend_pass;
        }
        if (bad_at) proto = c->proto; /* Redis did not get that far */
        c->pend_proto = proto;
        kind = PX_REQ_HELLO;
        char pv[4];
        snprintf(pv, sizeof pv, "%d", proto);
        resp_buf_reset(b);
        if (bad_at) {
            /* Redis refuses what the client sent from bad_at on, after the
             * login the options before it ask for (done again: a no-op on
             * a connection of that identity): that refusal is success */
            resp_arg hello[7] = {{"HELLO", 5}, {pv, strlen(pv)}};
            int n = 2;
            if (c->pend_pass != NULL) {
                hello[n++] = (resp_arg){"AUTH", 4};
                hello[n++] = a[auth_at + 1];
                hello[n++] = a[auth_at + 2];
            }
            hello[n++] = a[bad_at];
            /* a name: the option and the name Redis refuses */
            if (bad_at + 1 < argc && resp_arg_is(a[bad_at].ptr, a[bad_at].len, "SETNAME")) hello[n++] = a[bad_at + 1];
            resp_enc_command(b, n, hello);
        } else if (c->pend_pass != NULL)
            resp_enc_commandv(b, "HELLO", pv, "AUTH", c->pend_user, c->pend_pass, NULL);
        else
            resp_enc_commandv(b, "HELLO", pv, NULL);
    }

    /* (a credential lost would log in as another user) */
    px_pool *target = oom ? NULL : px_pool_ref(c->srv, user, pass, db, proto);
    if (target == NULL) {
        clear_pending_state(c);
        px_client_close(c, "out of memory");
        return PX_DISPATCH_DONE;
    }
    px_upstream *u = px_pool_shared(target, c->id);
    if (u == NULL) {
        clear_pending_state(c);
        px_client_reply_unavailable(c, target);
        px_pool_unref(target);
        return PX_DISPATCH_DONE;
    }
    px_pool_unref(target); /* the session takes its reference on success */
    if (c->inflight > 0 && c->inflight_on != u) {
        clear_pending_state(c);
        return PX_DISPATCH_WAIT;
    }
    if (b->failed) {
        clear_pending_state(c);
        px_client_close(c, "out of memory");
        return PX_DISPATCH_DONE;
    }
    px_req *r = px_client_forward_to(c, u, kind, b->data, b->len, 0);
    if (r != NULL && bad_at) r->aux_flags |= PX_AUX_HELLO_REFUSED;
    c->barrier = 1;
    return PX_DISPATCH_DONE;
}

/* ------------------------------------------------------------------------ */
/* the router */

/*
 * What ends a stall of Redis: a script or function past its time limit
 * (SCRIPT KILL, FUNCTION KILL, SHUTDOWN NOSAVE), a CLIENT PAUSE (CLIENT
 * UNPAUSE). Redis reads it from any connection but the one stalled, whose
 * input waits behind the script or the paused write: so never a shared
 * one, which may be that connection, and nothing of what waits to be
 * written to Redis holds it up.
 */
static int ends_a_stall(const resp_arg *a, int argc) {
    if (resp_arg_is(a[0].ptr, a[0].len, "SHUTDOWN")) return 1;
    if (argc != 2) return 0;
    return ((resp_arg_is(a[0].ptr, a[0].len, "SCRIPT") || resp_arg_is(a[0].ptr, a[0].len, "FUNCTION")) &&
            resp_arg_is(a[1].ptr, a[1].len, "KILL")) ||
           (resp_arg_is(a[0].ptr, a[0].len, "CLIENT") && resp_arg_is(a[1].ptr, a[1].len, "UNPAUSE"));
}

static int classify(px_client *c, const resp_cmd_info *info) {
    const resp_arg *a = c->rq.argv;
    int argc = c->rq.argc;
    if (info == NULL) return ACT_FORWARD;
    if (ends_a_stall(a, argc)) return ACT_ALONE;
    switch (info->id) {
    case CMD_PING:
    case CMD_ECHO:
        return ACT_LOCAL;
    case CMD_SELECT:
    case CMD_AUTH:
    case CMD_HELLO:
        return ACT_STATE;
    case CMD_CLIENT:
        if (argc < 2) return ACT_FORWARD;
        if ((resp_arg_is(a[1].ptr, a[1].len, "SETNAME") && argc == 3) ||
            (resp_arg_is(a[1].ptr, a[1].len, "GETNAME") && argc == 2) ||
            (resp_arg_is(a[1].ptr, a[1].len, "SETINFO") && argc == 4))
            return ACT_LOCAL;
        if (resp_arg_is(a[1].ptr, a[1].len, "REPLY") || resp_arg_is(a[1].ptr, a[1].len, "TRACKING") ||
            resp_arg_is(a[1].ptr, a[1].len, "CACHING"))
            return ACT_TUNNEL;
        /* GETREDIR and TRACKINGINFO describe the connection's tracking: a
         * shared one's is sidecache's own (tracking-mode default, optin);
         * INFO a shared one's name, id and age: a client that looks for
         * its own connection (to kill it, say) must find one */
        if (resp_arg_is(a[1].ptr, a[1].len, "ID") || resp_arg_is(a[1].ptr, a[1].len, "INFO") ||
            resp_arg_is(a[1].ptr, a[1].len, "NO-EVICT") ||
            resp_arg_is(a[1].ptr, a[1].len, "NO-TOUCH") || resp_arg_is(a[1].ptr, a[1].len, "GETREDIR") ||
            resp_arg_is(a[1].ptr, a[1].len, "TRACKINGINFO"))
            return ACT_STICKY;
        return ACT_FORWARD;
    case CMD_XREAD:
    case CMD_XREADGROUP:
        for (int i = 1; i < argc; i++)
            if (resp_arg_is(a[i].ptr, a[i].len, "BLOCK")) return ACT_BLOCK;
        return ACT_FORWARD;
    case CMD_DEBUG:
        /* DEBUG PROTOCOL push writes a push and then its reply: two values
         * for one command, which no reply matching can pair (and DEBUG is
         * no production command): relayed as it comes */
        return argc >= 2 && resp_arg_is(a[1].ptr, a[1].len, "PROTOCOL") ? ACT_TUNNEL : ACT_FORWARD;
    case CMD_SCRIPT:
        /* SCRIPT DEBUG YES or SYNC puts the connection's next scripts
         * under Lua's debugger, whose session then speaks on it: never on
         * a connection other clients' EVALs share */
        return argc >= 2 && resp_arg_is(a[1].ptr, a[1].len, "DEBUG") ? ACT_TUNNEL : ACT_FORWARD;
    default:
        break;
    }
    if (info->flags & CMDF_TXN) return ACT_TXN;
    if (info->flags & CMDF_BLOCKING) return ACT_BLOCK;
    if (info->flags & CMDF_STREAM) return ACT_TUNNEL;
    if (info->flags & CMDF_STICKY) return ACT_STICKY;
    return ACT_FORWARD;
}

/* Answers a command the proxy keeps locally: PX_DISPATCH_DONE or
 * PX_DISPATCH_WAIT, or ANSWER_FORWARD if it must go to Redis after all (PING
 * and ECHO while it is not known that Redis lets this identity send them,
 * or lets a client without credentials in). */
#define ANSWER_FORWARD (-1)
static int answer_local(px_client *c, const resp_cmd_info *info) {
    /* Redis checks the arity its command table gives (ECHO's 2, PING's at
     * least 1) before it asks for a password; PING's limit of 2 is PING's */
    if (info->id == CMD_ECHO && c->rq.argc != 2) return reply_arity(c, "echo"), PX_DISPATCH_DONE;
    if (c->pass == NULL && c->srv->open_access == 0) {
        px_client_reply_error(c, "NOAUTH Authentication required.");
        return PX_DISPATCH_DONE;
    }
    if (info->id == CMD_CLIENT) return cmd_client_local(c);
    /* PING and ECHO once Redis has answered them for this identity: its
     * ACL may deny them (px_client_on_reply learns it) */
    if (!px_client_permission_known(c, info->id == CMD_PING ? c->pool->ping_epoch : c->pool->echo_epoch))
        return ANSWER_FORWARD;
    if (info->id == CMD_PING)
        cmd_ping(c);
    else
        cmd_echo(c);
    return PX_DISPATCH_DONE;
}

/* A user's permissions may change: forget what was learned of them, now
 * and again when Redis has run the command (PX_AUX_ACL). In a tunnel,
 * where its reply is not matched, nothing is learned until the tunnel
 * closes (acl_unsettled). */
static void note_acl_change(px_client *c) {
    if (!resp_acl_changes(c->rq.argc, c->rq.argv)) return;
    c->srv->acl_epoch++;
    if (c->in_multi || c->txn_local) c->txn_acl = 1;
    if (c->mode == PX_MODE_TUNNEL && !c->tunnel_acl) {
        c->tunnel_acl = 1;
        c->srv->acl_unsettled++;
    }
}

/* TUNNEL: the bytes go as they came. */
static int dispatch_tunnel(px_client *c, const char *frame) {
    const resp_arg *a = c->rq.argv;
    const char *data;
    size_t len;
    if (c->pinned != NULL && c->pinned->held.len > 0) {
        /* SCRIPT DEBUG is held until Redis has answered the handshake:
         * what follows it waits unread, not in memory here, and is
         * read once the held bytes are written (px_client_upstream_drained) */
        c->backlogged = 1;
        return PX_DISPATCH_WAIT;
    }
    /* no reply is matched in a tunnel: a write invalidates when sent,
     * and what Redis sends back waits for its invalidations from then
     * on (upstream.c, tunnel_waits) */
    if (px_caching_on_send(c, NULL, NULL, 0, 0) && c->pinned != NULL) c->pinned->tunnel_wrote = 1;
    px_client_request_bytes(c, frame, &data, &len);
    if (c->pinned != NULL) px_upstream_send_raw(c->pinned, data, len);
    tunnel_follow_reply(c);
    if (c->pinned != NULL && c->rq.argc == 1 && resp_arg_is(a[0].ptr, a[0].len, "RESET")) {
        /* Redis's RESET ends what made the tunnel (subscriptions,
         * MONITOR, CLIENT REPLY, tracking) and also logs the connection
         * out and selects db 0: once its reply is relayed the session
         * leaves the tunnel as cmd_reset does
         * (px_client_on_tunnel_reset), and nothing after it is read
         * until then */
        px_upstream_send_reset_marker(c->pinned);
        c->barrier = 1;
    }
    return PX_DISPATCH_DONE;
}

/* STICKY, or PINNED in MULTI: Redis queues everything, so nothing is
 * answered here. */
static int dispatch_own_forward_all(px_client *c, int id, int act, const char *frame) {
    if (act != ACT_ALONE && hold_for_upstream(c)) return PX_DISPATCH_WAIT;
    if (act == ACT_TUNNEL) {
        if (c->inflight > 0) return PX_DISPATCH_WAIT;
        enter_tunnel(c, frame);
        return PX_DISPATCH_DONE;
    }
    /* a state Redis gives the connection (at EXEC, when queued): it
     * stays the client's; PING and ECHO give none */
    if (act == ACT_STATE || act == ACT_STICKY || (act == ACT_LOCAL && id != CMD_PING && id != CMD_ECHO))
        c->mode = PX_MODE_STICKY;
    /* a blocking command (not queued in MULTI, where it does not
     * block) may wait for ever: upstream-timeout must not cut it */
    if (act == ACT_BLOCK && !c->in_multi) c->blocking = 1;
    forward_blocking_aware(c, id, act, frame);
    return PX_DISPATCH_DONE;
}

/* The current request answered from the cache: PX_DISPATCH_DONE; or
 * PX_DISPATCH_WAIT, to be read again once the keep-alive is answered
 * (px_clients_ping_wake; the input pauses); else ANSWER_FORWARD, and
 * cacheable says whether it was a cacheable read (its px_read kind) */
static int answer_from_cache(px_client *c, int *cacheable) {
    *cacheable = 0;
    int hit = c->srv->caching != NULL ? px_caching_try_hit(c, cacheable) : 0;
    if (hit == PX_CACHING_WAIT) {
        wait_in(&c->srv->ping_waiters, c);
        return PX_DISPATCH_WAIT;
    }
    if (hit) {
        px_latency_add(&c->srv->lat_hit, px_now_us() - c->read_us);
        return PX_DISPATCH_DONE;
    }
    return ANSWER_FORWARD;
}

/* PINNED (WATCH, a blocking command), outside MULTI. */
static int dispatch_pinned(px_client *c, int id, int act, const resp_cmd_info *info, const char *frame) {
    /* Pinned only until Redis confirms an UNWATCH answered ahead (go-redis's
     * Watch with no EXEC: JuiceFS 1.2's getattr, then its lookup or its
     * readdir's MGET): nothing is watched (the UNWATCH left, C2) and no
     * reply of the client's is awaited (C1), so a read the cache holds is
     * answered as on the shared connection. A miss waits for that reply
     * and goes, unpinned, on the shared connection, whose reply may fill
     * the cache: one on the client's own may not (such a connection is not
     * tracked in every mode, nor moved to a new server at a failover). */
    if (!c->watching && !c->in_multi && c->srv->caching != NULL && px_client_awaits_only_ahead(c)) {
        int cacheable;
        int rc = answer_from_cache(c, &cacheable);
        if (rc != ANSWER_FORWARD) return rc;
        if (cacheable != PX_READ_NONE) return PX_DISPATCH_WAIT;
    }
    if (act != ACT_LOCAL && act != ACT_ALONE && hold_for_upstream(c)) return PX_DISPATCH_WAIT;
    switch (act) {
    case ACT_LOCAL: {
        int rc = answer_local(c, info);
        if (rc != ANSWER_FORWARD) return rc;
        if (hold_for_upstream(c)) return PX_DISPATCH_WAIT;
        break;
    }
    case ACT_TUNNEL:
        if (c->inflight > 0) return PX_DISPATCH_WAIT;
        enter_tunnel(c, frame);
        return PX_DISPATCH_DONE;
    case ACT_STATE:
    case ACT_STICKY:
        c->mode = PX_MODE_STICKY;
        break;
    case ACT_BLOCK:
        c->blocking = 1;
        break;
    default:
        break;
    }
    forward_blocking_aware(c, id, act, frame);
    return PX_DISPATCH_DONE;
}

/* SHARED: what is not plainly forwarded (answered here, a change of
 * identity, a transaction, a connection of the client's own). Returns
 * PX_DISPATCH_DONE or _WAIT, or ANSWER_FORWARD: forward it. */
static int dispatch_shared_special(px_client *c, int id, int act, const resp_cmd_info *info, const char *frame) {
    switch (act) {
    case ACT_LOCAL:
        return answer_local(c, info);
    case ACT_STATE:
        return hold_for_upstream(c) ? PX_DISPATCH_WAIT : cmd_state(c, id, frame);
    case ACT_TXN:
        if (id == CMD_UNWATCH && px_txn_unwatch_local(c)) return PX_DISPATCH_DONE;
        if (id == CMD_MULTI && px_txn_local_allowed(c)) {
            c->txn_local = 1;
            px_client_reply_simple(c, "OK");
            return PX_DISPATCH_DONE;
        }
        if (id != CMD_WATCH && id != CMD_MULTI) return ANSWER_FORWARD; /* Redis answers the error */
        /* fall through */
    case ACT_BLOCK:
    case ACT_STICKY:
    case ACT_TUNNEL:
    case ACT_ALONE:
        if (c->inflight > 0) return PX_DISPATCH_WAIT;
        if (act != ACT_ALONE && hold_for_upstream(c)) return PX_DISPATCH_WAIT;
        if (act == ACT_ALONE) {
            /* a shared connection with nothing ahead is ready (a new one's
             * handshake would meet Redis's BUSY, a SELECT among it) */
            px_upstream *idle = px_pool_idle_shared(c->pool);
            if (idle != NULL) {
                forward_current(c, idle, frame);
                return PX_DISPATCH_DONE;
            }
        }
        if (px_client_pin_new(c, act == ACT_STICKY ? PX_MODE_STICKY
                       : act == ACT_TUNNEL ? PX_MODE_TUNNEL
                                           : PX_MODE_PINNED) != 0)
            return PX_DISPATCH_DONE;
        if (act == ACT_TUNNEL) {
            enter_tunnel(c, frame);
            return PX_DISPATCH_DONE;
        }
        if (act == ACT_BLOCK) c->blocking = 1;
        forward_blocking_aware(c, id, act, frame);
        return PX_DISPATCH_DONE;
    default:
        return ANSWER_FORWARD;
    }
}

/* SHARED, a command for Redis: a cache hit, else to the shared connection,
 * alone or in a write batch. batchable: -1 not asked yet. */
static int dispatch_shared_forward(px_client *c, int id, int act, int batchable, const char *frame) {
    int cacheable;
    int rc = answer_from_cache(c, &cacheable);
    if (rc != ANSWER_FORWARD) return rc;
    if (hold_for_upstream(c)) return PX_DISPATCH_WAIT;
    px_upstream *u = px_client_shared_conn(c);
    if (u == NULL) {
        px_client_reply_unavailable(c, c->pool);
        return PX_DISPATCH_DONE;
    }
    if (c->inflight > 0 && c->inflight_on != u) return PX_DISPATCH_WAIT;
    if (batchable < 0) batchable = act == ACT_FORWARD && !cacheable && px_batch_eligible(c);
    if (batchable) {
        const char *data;
        size_t len;
        px_client_request_bytes(c, frame, &data, &len);
        px_batch_add(c, u, data, len);
        return PX_DISPATCH_DONE;
    }
    px_caching_before_read(c, u, cacheable);
    px_req *r;
    if (cacheable == PX_READ_MGET) {
        /* only the keys that are not cached go; the reply is merged */
        const char *data;
        size_t len;
        px_caching_mget_request(c, &data, &len);
        r = px_client_forward_to(c, u, PX_REQ_CLIENT, data, len, 0);
    } else {
        r = forward_current(c, u, frame);
    }
    if (r != NULL) {
        px_caching_on_send(c, u, r, cacheable, 0);
        if (id == CMD_UNWATCH) px_txn_unwatch_probe(c, r);
        if (id == CMD_PING || id == CMD_ECHO)
            px_client_permission_probe(c, r, id == CMD_PING ? PX_AUX_PING : PX_AUX_ECHO);
    }
    return PX_DISPATCH_DONE;
}

int px_client_dispatch(px_client *c, const char *frame) {
    const resp_arg *a = c->rq.argv;
    if (c->rq.argc == 0) return PX_DISPATCH_DONE;
    if (c->mode == PX_MODE_TUNNEL && hold_for_upstream(c)) return PX_DISPATCH_WAIT;
    note_acl_change(c);
    if (c->mode == PX_MODE_TUNNEL) return dispatch_tunnel(c, frame);

    /* a write batch's outcome decides what is sent next (proxy/batch.h),
     * and a merged MGET's whether it goes again */
    if (c->batch_wait || c->mget_merge != NULL) return PX_DISPATCH_WAIT;
    const resp_cmd_info *info = resp_cmd_lookup(a[0].ptr, a[0].len);
    /* Redis refuses these with an argument (arity 1) as any command: its
     * error, and in MULTI EXECABORT at EXEC (EXEC itself: below) */
    if (info != NULL && c->rq.argc != 1 &&
        (info->id == CMD_MULTI || info->id == CMD_DISCARD || info->id == CMD_UNWATCH || info->id == CMD_RESET))
        info = NULL;
    int id = info ? info->id : CMD_OTHER;
    int act = classify(c, info);
    /* an open batch goes before anything that cannot join it (whether a
     * request may join is asked only then, or below after a cache miss: a
     * hit never pays for it) */
    int batchable = -1;
    if (c->batch_count > 0) {
        batchable = act == ACT_FORWARD && px_batch_eligible(c);
        if (!batchable) {
            px_batch_flush(c);
            if (c->batch_wait) return PX_DISPATCH_WAIT;
        }
    }
    if (id == CMD_QUIT) {
        px_client_reply_simple(c, "OK");
        px_client_close_after_replies(c);
        return PX_DISPATCH_DONE;
    }
    if (id == CMD_RESET) return cmd_reset(c);
    if (c->txn_local)
        return hold_for_upstream(c) ? PX_DISPATCH_WAIT : px_txn_local_dispatch(c, id, act == ACT_FORWARD, frame);
    /* a WATCH answered ahead must hold before EXEC may run */
    if (id == CMD_EXEC && c->watch_ahead > 0) return PX_DISPATCH_WAIT;

    if (c->mode == PX_MODE_STICKY || (c->mode == PX_MODE_PINNED && c->in_multi))
        return dispatch_own_forward_all(c, id, act, frame);
    if (c->mode == PX_MODE_PINNED) return dispatch_pinned(c, id, act, info, frame);
    int rc = dispatch_shared_special(c, id, act, info, frame);
    if (rc != ANSWER_FORWARD) return rc;
    return dispatch_shared_forward(c, id, act, batchable, frame);
}

/* Parses and routes what the client sent; an open write batch goes when
 * the input runs out or stops, and the keys of writes queued in a
 * transaction are purged once they are on their way. */
static int client_process_input(px_client *c);
static void client_process(px_client *c) {
    int waits = client_process_input(c);
    /* the client is gone and a blocking command it sent before it went is
     * on its way: Redis runs it, and frees a client blocked there when it
     * reads the end behind it (which the close of its connection is), as
     * it would have freed the client itself. Waiting for its reply would
     * let it take an element nobody gets, or block for ever. */
    if (c->peer_closed && blocked_now(c) && c->state == PX_CLIENT_ACTIVE)
        px_client_close(c, "client closed connection");
    /* the client is gone and what it sent has all been dispatched (a
     * partial command left is dropped, as Redis drops it) */
    else if (c->peer_closed && !waits && c->state == PX_CLIENT_ACTIVE)
        px_client_close_after_replies(c);
    /* what run_extend appended by reference leaves the input now */
    px_io_settle(c->srv);
    px_batch_flush(c);
    if (c->txn_keys.len > c->txn_purged && c->state != PX_CLIENT_CLOSED) {
        /* what was queued leaves first: Redis runs it during the purge */
        if (c->pinned != NULL) px_io_write_early(&c->pinned->io, 1);
        px_caching_txn_prepurge(c);
    }
}

/* A request in all is held here until it is whole (Redis holds its
 * arguments as it reads them): at most the larger of
 * client-query-buffer-limit and this, Redis's default limit, so that a
 * client cannot make the proxy hold max-multibulk-len arguments of
 * proto-max-bulk-len each. */
#define PX_REQUEST_MAX_BYTES (1024LL * 1024 * 1024)

static long long request_max_bytes(const px_client *c) {
    long long limit = c->srv->cfg->client_query_buffer_limit;
    return limit > PX_REQUEST_MAX_BYTES ? limit : PX_REQUEST_MAX_BYTES;
}

/* Is the part of a request still being read (len bytes held) past
 * client-query-buffer-limit? As Redis counts it: an argument leaves its
 * query buffer once read, so the limit bounds the argument (or line) being
 * read, not a request's arguments in all (request_max_bytes does). */
static int query_buffer_over(const px_client *c, size_t len) {
    return (long long)resp_req_unparsed(&c->rq, len) > c->srv->cfg->client_query_buffer_limit ||
           (long long)len > request_max_bytes(c);
}

/* Has a whole request an argument that Redis's query buffer could not hold
 * (the request came in one read, so nothing was counted on the way)? Redis
 * would close the connection, a shared one: refused here. Or is it past
 * request_max_bytes in all? */
static int argument_over_limit(const px_client *c) {
    long long limit = c->srv->cfg->client_query_buffer_limit;
    if ((long long)c->rq.frame_len <= limit) return 0;
    if ((long long)c->rq.frame_len > request_max_bytes(c)) return 1;
    for (int i = 0; i < c->rq.argc; i++)
        if ((long long)c->rq.argv[i].len + 2 > limit) return 1;
    return 0;
}

/* Returns 1 when it stopped to wait (input paused), else 0: the input is
 * used up, or a command is partial, or the client is closing. */
static int client_process_input(px_client *c) {
    if (c->io.closed) return 0;
    /* what waits to be written to the client's own connection (a
     * transaction's queued commands, a tunnel) is bounded too; checked
     * once per input read (64 KB), not per command of a long run */
    if (pinned_output(c) >= PX_CLIENT_MAX_INFLIGHT_BYTES) {
        c->backlogged = 1;
        pause_input(c);
        return 1;
    }
    while (c->state == PX_CLIENT_ACTIVE) {
        /* No pause for output waiting on a client that does not read: as
         * Redis, input is read on (a client may write a whole pipeline
         * before it reads a reply, and would wait for ever), and a client
         * whose output passes client-output-buffer-limit is dropped. */
        if (c->barrier) {
            pause_input(c);
            return 1;
        }
        /* but what it holds in flight is bounded (PX_CLIENT_MAX_SLOTS) */
        if (c->nslots >= PX_CLIENT_MAX_SLOTS || c->inflight_bytes >= PX_CLIENT_MAX_INFLIGHT_BYTES) {
            c->backlogged = 1;
            pause_input(c);
            return 1;
        }
        size_t len;
        const char *data = px_io_input(&c->io, &len);
        if (len == 0) break;
        if (c->rq.need != 0 && len < c->rq.need) {
            if (query_buffer_over(c, len)) goto too_big;
            break;
        }
        /* Redis's tighter limits before AUTH, where Redis wants one */
        c->rq.unauthenticated = c->pass == NULL && c->srv->open_access == 0 && c->mode != PX_MODE_TUNNEL;
        int rc = resp_req_parse(&c->rq, data, len);
        if (rc == RESP_AGAIN) {
            if (query_buffer_over(c, len)) goto too_big;
            if (c->partial_since_ms == 0) c->partial_since_ms = px_now_ms();
            break;
        }
        c->partial_since_ms = 0;
        if (rc == RESP_OK && argument_over_limit(c)) goto too_big;
        if (rc == RESP_ERR) {
            px_verbose("client protocol error id=%llu addr=%s err=\"%s\"", (unsigned long long)c->id, c->addr,
                       c->rq.err);
            char err[300];
            snprintf(err, sizeof err, "ERR %s", c->rq.err);
            fail_after_replies(c, err);
            return 0;
        }
        size_t flen = c->rq.frame_len;
        if (px_client_dispatch(c, data) == PX_DISPATCH_WAIT) {
            pause_input(c);
            return 1;
        }
        if (c->io.closed) return 0; /* closed while dispatching */
        px_io_consume(&c->io, flen);
        c->read_counted = 0;
    }
    return 0;

too_big:
    px_warning("client query buffer limit reached id=%llu addr=%s", (unsigned long long)c->id, c->addr);
    c->tunnel_fail_qbuf = 1;
    fail_after_replies(c, "ERR Protocol error: query buffer limit reached");
    return 0;
}

/* ------------------------------------------------------------------------ */
/* libevent callbacks and lifetime */

static void client_on_read(void *arg) {
    px_client *c = arg;
    if (c->mute_linger) {
        drop_input(c);
        return;
    }
    c->read_us = px_now_us();
    c->last_active_ms = c->read_us / 1000;
    client_process(c);
}

/* A closing client goes once nothing of it is awaited from Redis or left
 * unwritten. */
static void close_if_answered(px_client *c, const char *why) {
    if (c->inflight == 0 && c->slots_head == NULL) px_client_close(c, why);
}

/* Output fully written: a closing client may go, a paused one may read. */

static void client_on_drain(void *arg) {
    px_client *c = arg;
    if (c->state == PX_CLIENT_CLOSING) {
        if (!c->mute_linger) close_if_answered(c, "closed after reply");
        return;
    }
    if (c->input_paused && !c->barrier) resume_input(c);
}

/*
 * The client closed its side. Redis runs every command it had read before
 * and writes their replies, so a client that shuts down its writing after
 * a pipeline (nc -N, a health check) still reads them; it frees a blocked
 * client at once, with the commands it has not run. So here: a client
 * blocked goes now; another gets the replies to what it sent, then goes.
 */
static void client_on_peer_close(px_client *c) {
    /* (a tunnel ending in a protocol error: nobody is left to read what
     * Redis still owes before the error, nor the error) */
    if (blocked_now(c) || c->tunnel_fail != NULL) {
        px_client_close(c, "client closed connection");
    } else if (c->state == PX_CLIENT_ACTIVE && c->input_paused && px_io_input_len(&c->io) > 0) {
        /* commands read, waiting for a reply before they may go (a state
         * change, a transaction's end): they go when it comes, and the
         * client closes after them (client_process) */
        c->peer_closed = 1;
        px_io_pause_read(&c->io);
        /* In a tunnel that reply is RESET's, which a command ahead of it
         * may hold for ever (a BLPOP 0: the tunnel does not follow what
         * blocks). Redis is told of the end as it would have seen it,
         * after what was sent: if the connection is blocked it is freed
         * (px_client_on_pinned_lost), else RESET is answered first. */
        if (c->mode == PX_MODE_TUNNEL && c->pinned != NULL) px_io_shutdown_write(&c->pinned->io);
    } else {
        /* (should Redis block on what it sent before the replies are all
         * in, the client goes then: on_reply_deliver, gone_check_later) */
        c->peer_closed = 1;
        px_client_close_after_replies(c);
    }
    if (c->state != PX_CLIENT_CLOSED) gone_check_later(c);
}

static void client_on_event(void *arg, int what, int err) {
    px_client *c = arg;
    if (what == PX_IO_PEER_CLOSED) {
        /* closed while its input is paused (a barrier, a wait for another
         * connection, backpressure): seen at once, or a client gone behind
         * a BLPOP 0 would hold its connections until that returns. Input
         * still to go (err: unread in the socket) is read on first, and
         * its end seen then. */
        /* (a tunnel ending in a protocol error, held silent or not, reads
         * nothing more of it; nor does a client Redis blocks on, which
         * Redis frees at once with what it did not run: client_on_peer_close) */
        if (err == 0 || c->tunnel_fail != NULL || blocked_now(c))
            client_on_peer_close(c);
        /* A tunnel waiting for its RESET's reply, which a command ahead of
         * it may hold for ever (the tunnel does not follow what blocks):
         * Redis is told of the end, after what was sent, and frees the
         * connection if it blocks there (px_client_on_pinned_lost); else
         * RESET is answered, reading resumes, and the rest and the end are
         * read then. */
        else if (c->mode == PX_MODE_TUNNEL && c->barrier && c->pinned != NULL)
            px_io_shutdown_write(&c->pinned->io);
        /* (behind a blocking command not yet taken for blocked: looked at
         * again then) */
        else if (c->blocking) {
            c->peer_gone = 1;
            gone_check_later(c);
        }
        return;
    }
    if (what == PX_IO_EOF) {
        client_on_peer_close(c);
    } else if (err == EPIPE || err == ECONNRESET) {
        /* gone while commands of its were still to run or to be answered:
         * as Redis, what was read runs; the replies go nowhere */
        px_io_discard_output(&c->io);
        /* Nothing can reach it any more: its socket and its place among
         * maxclients go now (a client that redials during a stall of
         * Redis would fill them), while what it sent runs and the replies
         * are dropped as they come (px_client_close). Only commands read
         * and not yet sent keep it: they run first. */
        if (c->state == PX_CLIENT_CLOSING || !(c->input_paused && px_io_input_len(&c->io) > 0)) {
            px_client_close(c, strerror(err));
            return;
        }
        client_on_peer_close(c);
    } else {
        px_client_close(c, strerror(err));
    }
}

static const px_io_ops client_io_ops = {client_on_read, client_on_drain, client_on_event};

/* The parser and buffers px_client_new sets up, freed. */
static void client_buffers_deinit(px_client *c) {
    resp_req_deinit(&c->rq);
    resp_buf_deinit(&c->scratch);
    resp_buf_deinit(&c->txn_keys);
    resp_buf_deinit(&c->txn_frames);
    resp_buf_deinit(&c->batch_frames);
    resp_buf_deinit(&c->batch_reqs);
}

px_client *px_client_new(px_server *srv, int fd, const char *addr, int tls) {
    px_client *c = calloc(1, sizeof *c);
    if (c == NULL) {
        evutil_closesocket(fd);
        return NULL;
    }
    c->srv = srv;
    c->id = ++srv->next_client_id;
    snprintf(c->addr, sizeof c->addr, "%s", addr);
    c->proto = 2;
    c->db = srv->cfg->up.db;
    c->last_active_ms = px_now_ms();
    resp_req_init(&c->rq, &srv->req_limits);
    resp_buf_init(&c->scratch);
    resp_buf_init(&c->txn_keys);
    resp_buf_init(&c->txn_frames);
    resp_buf_init(&c->batch_frames);
    resp_buf_init(&c->batch_reqs);
    c->pool = px_pool_ref(srv, NULL, NULL, c->db, 2);
    if (c->pool == NULL || px_io_init(&c->io, srv, fd, &client_io_ops, c) != 0) {
        if (c->pool == NULL) evutil_closesocket(fd);
        px_pool_unref(c->pool);
        client_buffers_deinit(c);
        free(c);
        return NULL;
    }
    px_io_watch_close(&c->io);
    c->next = srv->clients;
    if (srv->clients) srv->clients->prev = c;
    srv->clients = c;
    srv->nclients++;
    px_verbose("client connected id=%llu addr=%s%s", (unsigned long long)c->id, c->addr, tls ? " tls=1" : "");
    if (tls && px_io_start_tls(&c->io, px_tls_new_server(srv)) != 0) {
        px_client_close(c, "TLS setup failed");
        return NULL;
    }
    return c;
}

void px_client_close(px_client *c, const char *why) {
    if (c->state == PX_CLIENT_CLOSED) return;
    /* writes already read are sent, as Redis runs what it read */
    px_batch_flush(c);
    px_verbose("client closed id=%llu addr=%s reason=\"%s\"", (unsigned long long)c->id, c->addr, why);
    c->state = PX_CLIENT_CLOSED;
    if (c->prev)
        c->prev->next = c->next;
    else
        c->srv->clients = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = c->next = NULL;
    c->srv->nclients--;
    wait_end(c);
    tunnel_acl_settle(c);
    px_io_close(&c->io);
    /* Written-but-unsent slots go now; slots still awaited stay on their
     * upstream FIFO and are dropped when their reply comes. */
    px_req *r = c->slots_head;
    while (r != NULL) {
        px_req *next = r->next_slot;
        if (!r->pending) px_req_release(c->srv, r);
        r = next;
    }
    c->slots_head = c->slots_tail = NULL;
    c->nslots = 0;
    c->inflight_bytes = 0;
    /* The client's own connection closes with it: an unfinished WATCH or
     * MULTI dies on Redis with nothing executed, a blocked command stops. */
    if (c->pinned != NULL) {
        px_upstream *u = c->pinned;
        c->pinned = NULL;
        u->owner = NULL;
        /* what it sent goes first (it may still be connecting): Redis runs
         * what it read, and drops an unfinished MULTI when the connection
         * closes */
        px_upstream_close_written(u, "client closed");
    }
    if (c->inflight == 0) queue_reap(c);
}

void px_client_free(px_client *c) {
    wait_end(c); /* (px_client_close did) */
    px_io_deinit(&c->io);
    px_pool_unref(c->pool);
    client_buffers_deinit(c);
    free(c->user);
    free(c->pass);
    free(c->name);
    free(c->tunnel_fail);
    clear_pending_state(c);
    free(c);
}

void px_client_begin_stop(px_client *c) {
    /* (held open without a word: nothing of it is awaited) */
    if (c->mute_linger) {
        px_client_close(c, "shutdown");
        return;
    }
    if (c->state != PX_CLIENT_ACTIVE) return;
    if (c->mode == PX_MODE_TUNNEL || c->blocking) {
        px_client_close(c, "shutdown");
        return;
    }
    px_client_close_after_replies(c);
}

void px_client_cron(px_client *c, int64_t now_ms) {
    int timeout = c->srv->cfg->timeout, partial = c->srv->cfg->partial_command_timeout;
    /* as Redis's last interaction: a client that reads its replies is
     * active too, even if it sends nothing (less output than a second ago) */
    size_t pending = px_io_pending(&c->io);
    if (pending < c->cron_pending) c->last_active_ms = now_ms;
    c->cron_pending = pending;
    /* each use starts it afresh: a large reply made once (an ECHO, an MGET
     * hit) leaves no large buffer with the client, as Redis's clientsCron */
    resp_buf_trim(&c->scratch, PX_CLIENT_SCRATCH_KEEP);
    px_batch_cron(c);
    if (c->state == PX_CLIENT_CLOSING) {
        /* waiting only for a client to read what is left (after QUIT, an
         * error, its own connection lost): it has `timeout` to do so */
        if (timeout > 0 && c->inflight == 0 && now_ms - c->last_active_ms > (int64_t)timeout * 1000)
            px_client_close(c, "idle timeout");
        return;
    }
    if (c->state != PX_CLIENT_ACTIVE) return;
    /* a request trickling in (slowloris) holds a client slot and a buffer:
     * it has partial-command-timeout to arrive whole; not while the proxy
     * does not read it (what came meanwhile is not parsed yet) */
    if (partial > 0 && c->partial_since_ms != 0 && !c->input_paused &&
        now_ms - c->partial_since_ms > (int64_t)partial * 1000) {
        px_verbose("client partial command timeout id=%llu addr=%s", (unsigned long long)c->id, c->addr);
        px_client_close(c, "partial command timeout");
        return;
    }
    if (timeout <= 0) return;
    /* as Redis: subscribers and blocked clients do not time out, nor does a
     * client whose commands the proxy holds unread (upstream-output-limit) */
    if (c->mode == PX_MODE_TUNNEL || c->blocking || c->inflight > 0 || c->input_paused) return;
    if (now_ms - c->last_active_ms > (int64_t)timeout * 1000) px_client_close(c, "idle timeout");
}
