/*
 * proxy/batch.c — see batch.h.
 *
 * An open batch lives in the client (batch_frames, batch_reqs, batch_up):
 * each batched request already holds its reply slot, marked pending so
 * that a client closing meanwhile keeps it. When sent, the batch's
 * bookkeeping moves to the aux of the EXEC's record (PX_REQ_BATCH):
 *
 *   batch_aux | n request pointers | n + 1 reply offsets | n × (u32 length, command bytes)
 *
 * The offsets are room for splitting EXEC's array (split_array), made
 * before the block is sent: the reply of writes that ran must not fail to
 * reach their clients for want of memory.
 */
#include "proxy/batch.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/cmdtable.h"
#include "proxy/caching.h"
#include "proxy/log.h"

typedef struct batch_aux {
    uint32_t n;
    px_upstream *up;   /* where the block went: a resend goes there too */
} batch_aux;

/* The parts of a PX_REQ_BATCH's aux (above). */
static px_req **aux_reqs(const px_req *ex) {
    return (px_req **)(void *)(ex->aux + sizeof(batch_aux));
}

static size_t *aux_offs(const px_req *ex, uint32_t n) {
    return (size_t *)(void *)(ex->aux + sizeof(batch_aux) + n * sizeof(px_req *));
}

static const char *aux_frames(const px_req *ex, uint32_t n) {
    return ex->aux + sizeof(batch_aux) + n * sizeof(px_req *) + (n + 1) * sizeof(size_t);
}

static const char multi_cmd[] = "*1\r\n$5\r\nMULTI\r\n";
static const char exec_cmd[] = "*1\r\n$4\r\nEXEC\r\n";

int px_frames_append(resp_buf *frames, const char *data, size_t len) {
    uint32_t n = (uint32_t)len;
    size_t start = frames->len;
    if (resp_buf_append(frames, &n, sizeof n) != 0 || resp_buf_append(frames, data, len) != 0) {
        frames->len = start;
        return -1;
    }
    return 0;
}

/* The next (length, bytes) of a frame list at *at. */
static const char *frame_at(const char *frames, size_t *at, size_t *len) {
    uint32_t n;
    memcpy(&n, frames + *at, sizeof n);
    const char *p = frames + *at + sizeof n;
    *at += sizeof n + n;
    *len = n;
    return p;
}

int px_block_send(px_upstream *u, const char *frames, size_t len, int n, int batch) {
    px_server *srv = u->srv;
    px_req *first = NULL, **tail = &first;
    /* every record first, so that a failure sends nothing */
    for (int i = 0; i <= n; i++) {
        px_req *r = px_req_new(srv, NULL, PX_REQ_DISCARD);
        if (r == NULL) {
            while (first != NULL) {
                px_req *next = first->next_up;
                px_req_release(srv, first);
                first = next;
            }
            return -1;
        }
        *tail = r;
        tail = &r->next_up;
    }
    px_req *r = first, *next = r->next_up;
    unsigned batch_flag = batch ? PX_AUX_BLOCK_BATCH : 0;
    r->kind = PX_REQ_TXN_CTL; /* refused: the commands after it ran alone */
    r->aux_flags |= batch_flag;
    px_upstream_send(u, r, multi_cmd, sizeof multi_cmd - 1);
    size_t at = 0;
    for (r = next; r != NULL && at < len; r = next) {
        size_t flen;
        const char *f = frame_at(frames, &at, &flen);
        next = r->next_up;
        r->aux_flags |= PX_AUX_BLOCK_QUEUED | batch_flag;
        px_upstream_send(u, r, f, flen);
    }
    /* n frames, each with its record: a record left over would never be
     * released, and the replies of the block would be miscounted */
    assert(r == NULL && at == len);
    return 0;
}

int px_batch_eligible(px_client *c) {
    px_server *srv = c->srv;
    const cmdtable *t;
    int flags;
    if (srv->cfg->batch_max_commands < 2 || c->mode != PX_MODE_SHARED || c->txn_local) return 0;
    /* its ACL denies MULTI or EXEC */
    if (c->pool->txn_denied == px_acl_mark(srv) || c->pool->exec_denied == px_acl_mark(srv)) return 0;
    /* where Redis wants a password, MULTI of a client without one is NOAUTH */
    if (c->pass == NULL && srv->open_access != 1) return 0;
    if (c->rq.frame_len > PX_BATCH_MAX_FRAME) return 0;
    if ((t = px_caching_cmdtable(srv)) == NULL || !cmdtable_check(t, c->rq.argc, c->rq.argv, &flags)) return 0;
    /* (CMDT_F_WAKES: Redis serves a client blocked on the key right after
     * such a command, before the next one runs; inside EXEC, only after
     * the whole block, which a pipeline's next command could then see) */
    return (flags & CMDT_F_WRITE) && !(flags & (CMDT_F_ADMIN | CMDT_F_BLOCKING | CMDT_F_NO_MULTI | CMDT_F_NOSCRIPT |
                                                CMDT_F_PUBSUB | CMDT_F_WAKES));
}

int px_batch_add(px_client *c, px_upstream *u, const char *data, size_t len) {
    /* Never another connection while a batch is open: its requests hold
     * the client's slots, so dispatch makes a request for another wait.
     * Two blocks in flight on two connections would break the order an
     * EXECABORT's replay relies on (review-txn 2): should a change of the
     * dispatch ever allow it, the client goes, not the order. */
    if (c->batch_count > 0 && c->batch_up != u) {
        px_warning("client id=%llu: a write batch was to span two upstream connections (a bug): client closed",
                   (unsigned long long)c->id);
        px_client_close(c, "internal error: write batch on two connections");
        return -1;
    }
    px_req *r = px_req_new(c->srv, c, PX_REQ_CLIENT);
    if (r == NULL || px_frames_append(&c->batch_frames, data, len) != 0) {
        if (r != NULL) px_req_release(c->srv, r);
        px_client_close(c, "out of memory");
        return -1;
    }
    if (resp_buf_append(&c->batch_reqs, &r, sizeof r) != 0) {
        c->batch_frames.len -= sizeof(uint32_t) + len;
        px_req_release(c->srv, r);
        px_client_close(c, "out of memory");
        return -1;
    }
    r->pending = 1; /* awaited: kept if the client closes before the reply */
    px_client_take_slot(c, r, u, len);
    c->batch_up = u;
    c->batch_count++;
    /* invalidated now, and again when its own reply is handed out (C1) */
    px_caching_on_send(c, u, r, 0, 0);
    if (c->batch_count >= c->srv->cfg->batch_max_commands) px_batch_flush(c);
    return 0;
}

void px_batch_cron(px_client *c) {
    if (c->batch_count > 0) return;
    resp_buf_trim(&c->batch_frames, 0);
    resp_buf_trim(&c->batch_reqs, 0);
}

static void batch_reset(px_client *c) {
    resp_buf_reset(&c->batch_frames);
    resp_buf_reset(&c->batch_reqs);
    /* a block of large writes: not kept until the next cron */
    resp_buf_trim(&c->batch_frames, PX_CLIENT_SCRATCH_KEEP);
    resp_buf_trim(&c->batch_reqs, PX_CLIENT_SCRATCH_KEEP);
    c->batch_count = 0;
    c->batch_up = NULL;
}

/* Each request of a list sent alone, in order. */
static void send_each(px_upstream *u, px_req *const *reqs, const char *frames, int n) {
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        size_t flen;
        const char *f = frame_at(frames, &at, &flen);
        px_upstream_send(u, reqs[i], f, flen);
    }
}

void px_batch_flush(px_client *c) {
    int n = c->batch_count;
    if (n == 0) return;
    px_server *srv = c->srv;
    px_upstream *u = c->batch_up;
    px_req *const *reqs = (px_req *const *)c->batch_reqs.data;
    if (n == 1) {
        send_each(u, reqs, c->batch_frames.data, 1);
        batch_reset(c);
        return;
    }
    batch_aux h = {(uint32_t)n, u};
    size_t offs_len = ((size_t)n + 1) * sizeof(size_t);
    size_t auxlen = sizeof h + c->batch_reqs.len + offs_len + c->batch_frames.len;
    char *aux = malloc(auxlen);
    px_req *ex = aux != NULL ? px_req_new(srv, c, PX_REQ_BATCH) : NULL;
    if (ex == NULL || px_block_send(u, c->batch_frames.data, c->batch_frames.len, n, 1) != 0) {
        /* no memory for a block: the commands go as they came */
        if (ex != NULL) px_req_release(srv, ex);
        free(aux);
        send_each(u, reqs, c->batch_frames.data, n);
        batch_reset(c);
        return;
    }
    memcpy(aux, &h, sizeof h);
    memcpy(aux + sizeof h, c->batch_reqs.data, c->batch_reqs.len);
    memcpy(aux + sizeof h + c->batch_reqs.len + offs_len, c->batch_frames.data, c->batch_frames.len);
    ex->aux = aux;
    ex->aux_len = auxlen;
    px_upstream_send(u, ex, exec_cmd, sizeof exec_cmd - 1);
    c->batch_wait = 1;
    srv->batch_blocks++;
    srv->batch_commands += (uint64_t)n;
    batch_reset(c);
}

/* Splits "*n" + n frames: offs[i] is where element i starts, offs[n] the
 * end. Returns 0, or -1 when data is not an array of exactly n values. */
static int split_array(px_server *srv, const char *data, size_t len, uint32_t n, size_t *offs) {
    long long m;
    size_t at = resp_read_int_line(data, len, 0, '*', &m);
    if (at == 0 || m != (long long)n) return -1;
    resp_reply_parser p;
    resp_reply_init(&p, &srv->reply_limits);
    int rc = 0;
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        offs[i] = at;
        resp_reply_reset(&p);
        if (resp_reply_parse(&p, data + at, len - at) != RESP_OK)
            rc = -1;
        else
            at += p.frame_len;
    }
    resp_reply_deinit(&p);
    offs[n] = at;
    return rc == 0 && at == len ? 0 : -1;
}

void px_batch_on_reply(px_client *c, px_req *ex, const char *data, size_t len) {
    px_server *srv = c->srv;
    batch_aux h;
    memcpy(&h, ex->aux, sizeof h);
    px_req **reqs = aux_reqs(ex);
    const char *frames = aux_frames(ex, h.n);
    size_t *offs = aux_offs(ex, h.n);
    c->batch_wait = 0;
    if (!ex->lost && split_array(srv, data, len, h.n, offs) == 0) {
        for (uint32_t i = 0; i < h.n; i++) {
            reqs[i]->pending = 0;
            px_client_on_reply(c, reqs[i], data + offs[i], offs[i + 1] - offs[i]);
        }
    } else if (!ex->lost && (resp_frame_is_execabort(data, len) || resp_frame_is_cluster_refusal(data, len))) {
        /* EXECABORT, or a cluster's refusal of the block's keys together
         * (CROSSSLOT: writes to two slots of one node, each of which Redis
         * runs alone; MOVED, ASK, TRYAGAIN after a slot moved): nothing
         * ran. Each again, alone: each gets Redis's own reply (u answered
         * this very reply, so it is alive). Any other error (EXEC refused)
         * closes the connection (upstream.c) */
        px_verbose("write batch refused, sent again one by one n=%u reply=\"%.*s\"", h.n,
                   (int)(len > 80 ? 80 : len - 2), data);
        /* an ACL without EXEC refuses every block: batch no more */
        if (memmem(data, len, "'exec' command", 14) != NULL) {
            c->pool->exec_denied = ex->learn_mark; /* (as the ACL was when sent) */
            px_pool_denied(c->pool);
        }
        srv->batch_replays++;
        send_each(h.up, reqs, frames, (int)h.n);
    } else {
        /* the connection was lost (whether the block ran is unknown, as for
         * any request in flight), or a reply Redis does not send to EXEC,
         * or EXEC refused for Redis's state (BUSY, LOADING: ran nothing,
         * and each command alone would meet the same) */
        static const char odd[] = "-ERR sidecache: unexpected reply to a write batch\r\n";
        if (!ex->lost && !resp_frame_is_transient_error(data, len)) {
            px_warning("write batch: unexpected EXEC reply n=%u", h.n);
            data = odd;
            len = sizeof odd - 1;
        }
        for (uint32_t i = 0; i < h.n; i++) {
            reqs[i]->pending = 0;
            /* lost: the error is sidecache's, not Redis's (no failover) */
            reqs[i]->lost = ex->lost;
            px_client_on_reply(c, reqs[i], data, len);
        }
    }
    px_req_release(srv, ex);
}

void px_batch_on_relayed(px_client *c, px_req *ex, const char *replies, size_t len, uint32_t k, const char *err,
                         size_t errlen) {
    px_server *srv = c->srv;
    batch_aux h;
    memcpy(&h, ex->aux, sizeof h);
    px_req **reqs = aux_reqs(ex);
    c->batch_wait = 0;
    resp_reply_parser p;
    resp_reply_init(&p, &srv->reply_limits);
    size_t at = 0;
    for (uint32_t i = 0; i < h.n; i++) {
        const char *data = err;
        size_t dlen = errlen;
        resp_reply_reset(&p);
        if (i < k && resp_reply_parse(&p, replies + at, len - at) == RESP_OK) {
            data = replies + at;
            dlen = p.frame_len;
            at += dlen;
        } else {
            k = i; /* (kept frames are whole: not expected) */
        }
        reqs[i]->pending = 0;
        reqs[i]->lost = i >= k;
        px_client_on_reply(c, reqs[i], data, dlen);
    }
    resp_reply_deinit(&p);
    px_req_release(srv, ex);
}
