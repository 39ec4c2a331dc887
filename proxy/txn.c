/*
 * proxy/txn.c — transactions, for the router (client.c): what sidecache
 * answers itself of MULTI, WATCH, UNWATCH and DISCARD, and what Redis's
 * answers to them mean for the session. See txn.h. What must hold:
 *
 * - The client sees what Redis would show it: a command answered here is
 *   answered so only once Redis has shown, for this identity, that it
 *   would answer the same (an ACL change through the proxy makes it ask
 *   again); where Redis refuses after all what was answered ahead, the
 *   client is disconnected before anything of it ran, as on a lost
 *   connection.
 * - A transaction reaches Redis as one block (MULTI ... EXEC in one write),
 *   and nothing of it runs unless its EXEC was sent.
 * - The keys its commands write are purged when they are sent, and again
 *   at the reply that ends it (C1), whatever Redis made of it.
 */
#include "proxy/txn.h"

#include <stdint.h>
#include <string.h>

#include "protocol/cluster.h"
#include "protocol/commands.h"
#include "proxy/batch.h"
#include "proxy/caching.h"
#include "proxy/log.h"

/* ------------------------------------------------------------------------ */
/* UNWATCH with nothing watched */

/*
 * go-redis ends every transaction with UNWATCH (Tx.Close), after EXEC has
 * already dropped the watches: a round trip that cannot change anything.
 * On a shared connection nothing is ever watched (WATCH pins), so once
 * Redis has answered +OK to an UNWATCH of this identity (its ACL allows
 * it) the answer is given here. An ACL change sent through the proxy
 * (acl_epoch) makes it ask Redis again.
 */
int px_txn_unwatch_local(px_client *c) {
    if (c->rq.argc != 1 || c->mode != PX_MODE_SHARED || !px_client_permission_known(c, c->pool->unwatch_epoch))
        return 0;
    px_client_reply_simple(c, "OK");
    c->srv->unwatch_local++;
    return 1;
}

/* An UNWATCH sent to Redis: its +OK teaches px_txn_unwatch_local. */
void px_txn_unwatch_probe(px_client *c, px_req *r) {
    if (c->rq.argc != 1 || c->mode != PX_MODE_SHARED) return;
    px_client_permission_probe(c, r, PX_AUX_UNWATCH);
}

/* ------------------------------------------------------------------------ */
/* WATCH answered ahead */

/*
 * A client that watches keys waits for +OK before it reads them (go-redis's
 * Watch, so every JuiceFS transaction, twice in a batch unlink): a round
 * trip that only says Redis took the WATCH. Once Redis has accepted a WATCH
 * of this identity, a WATCH on the client's own connection is written to
 * the socket first and then answered +OK here, when the client sent nothing
 * after it (so it waits for that answer). Nothing the client sends next
 * on its connection can overtake it: its reads reach Redis after the
 * WATCH, so they see what the watch guards; and EXEC, the one command a
 * watch changes, waits until Redis's own +OK has arrived.
 *
 * What differs from Redis: the +OK means the WATCH left for Redis, not
 * that Redis ran it. A write the client causes on another connection
 * right after the +OK normally arrives later (on one host the WATCH is
 * already in Redis's socket), but a network may reorder the two; then
 * that write does not abort the EXEC, though the client's reads after the
 * WATCH do see it, so a read-then-commit transaction stays consistent.
 *
 * Should Redis refuse it after all (a key its ACL denies, an ACL changed
 * behind the proxy), the client was told otherwise: it is disconnected
 * before any EXEC of it ran, as on a lost connection, and the identity's
 * next WATCH asks Redis again. Off with `watch-ahead no`.
 */
/* Whether the WATCH or UNWATCH just forwarded as r on u may be answered
 * here, the pool's identity having been let send it since learned. */
static int ahead_allowed(px_client *c, px_upstream *u, px_req *r, uint64_t learned) {
    if (!c->srv->cfg->watch_ahead || !px_client_permission_known(c, learned)) return 0;
    /* while the slot migrates a key not on the source gets ASK; on a
     * cluster node without a hash tag any key may get MOVED or CROSSSLOT */
    if (px_caching_slot_migrating(c->srv) || c->srv->cluster_untagged) return 0;
    /* only a client that waits for the +OK gains from it: one that sent
     * more (say MULTI … EXEC in the same write) gets Redis's own answer */
    if (px_io_input_len(&c->io) != c->rq.frame_len) return 0;
    /* on a cluster (key-prefix with a hash tag), a key of another slot
     * gets MOVED or CROSSSLOT, which the client must see, not +OK */
    const char *prefix = c->srv->cfg->key_prefix;
    int slot = cluster_prefix_slot(prefix, strlen(prefix));
    for (int i = 1; slot >= 0 && i < c->rq.argc; i++)
        if (cluster_key_slot(c->rq.argv[i].ptr, c->rq.argv[i].len) != (unsigned)slot) return 0;
    /* the +OK goes out at once only if no earlier reply is awaited (those
     * answered ahead are not: an answer now keeps the replies in order);
     * not on a connection retired for a move to another server (its reads
     * come from the server left) */
    return px_client_answered_ahead_before(c, r) && u->state == PX_UP_READY && !u->retired;
}

/* r, forwarded on u, answered +OK here once it is in the socket. Returns
 * 1 if it was (if it cannot all be written now, Redis answers as usual). */
static int answer_ahead(px_client *c, px_upstream *u, px_req *r) {
    px_io_write_early(&u->io, 1);
    if (px_io_pending(&u->io) != 0) return 0;
    r->aux_flags |= PX_AUX_WATCH_AHEAD;
    c->watch_ahead++;
    px_client_write_reply(c, "+OK\r\n", 5);
    return 1;
}

/* A WATCH (not inside MULTI) just forwarded as r: answered here when it
 * may be. Only a PINNED session's connection is known to carry its pool's
 * identity (a STICKY one may have sent AUTH or HELLO of another user). */
void px_txn_watch_send(px_client *c, px_upstream *u, px_req *r) {
    if (c->mode != PX_MODE_PINNED) return;
    px_client_permission_probe(c, r, PX_AUX_WATCH);
    if (c->rq.argc < 2 || !ahead_allowed(c, u, r, c->pool->watch_epoch)) return;
    if (answer_ahead(c, u, r)) c->srv->watch_ahead++;
}

/*
 * UNWATCH of keys watched, outside MULTI (go-redis's Watch with no EXEC:
 * JuiceFS 1.2's getattr is WATCH, GET, UNWATCH): answered +OK here once
 * written, as a WATCH is (the same conditions). After the UNWATCH nothing
 * the client sends can depend on a watch: the client's next commands
 * follow it on the connection, and its next WATCH, answered ahead too
 * (the reply it waits for is no earlier one), is read by Redis after it.
 * Redis's refusal (an ACL changed behind the proxy) disconnects the
 * client, as for WATCH.
 */
void px_txn_unwatch_send(px_client *c, px_upstream *u, px_req *r) {
    if (c->mode != PX_MODE_PINNED || c->rq.argc != 1) return;
    px_client_permission_probe(c, r, PX_AUX_UNWATCH);
    if (!ahead_allowed(c, u, r, c->pool->unwatch_epoch)) return;
    if (answer_ahead(c, u, r)) c->srv->unwatch_ahead++;
}

/* Redis's reply to a forwarded WATCH or UNWATCH: 0 to relay it; 1 if the
 * client already has its +OK; 2 if Redis refused one answered ahead (the
 * client reads no more and must be closed once this reply is dealt with). */
int px_txn_ahead_reply(px_client *c, px_req *r, const char *data, size_t len) {
    int ok = resp_frame_is_ok(data, len);
    int watch = (r->aux_flags & PX_AUX_WATCH) != 0;
    uint64_t *learned = watch ? &c->pool->watch_epoch : &c->pool->unwatch_epoch;
    px_client_permission_learn(c, r, ok, learned);
    if (!(r->aux_flags & PX_AUX_WATCH_AHEAD)) return 0;
    c->watch_ahead--;
    if (ok) return 1;
    if (!r->lost) {
        *learned = 0;
        c->srv->watch_ahead_refused++;
        px_warning("%s answered ahead was refused by Redis; client disconnected id=%llu addr=%s reply=\"%.*s\"",
                   watch ? "WATCH" : "UNWATCH", (unsigned long long)c->id, c->addr,
                   (int)(len > 200 ? 200 : len >= 2 ? len - 2 : len), data);
    }
    /* the client must not send EXEC believing it watches (or does not): no
     * more input (the held EXEC stays unread), and no waiting for what it
     * sent after (a blocked BLPOP would hold it for ever) */
    px_client_close_after_replies(c);
    return 2;
}

/* ------------------------------------------------------------------------ */
/* DISCARD on the client's own connection */

/*
 * Redis refuses DISCARD to a user whose ACL denies it, and then stays inside
 * MULTI with the transaction flagged: what the client sends next is queued
 * and its EXEC is EXECABORT. So nothing after a DISCARD is sent until Redis
 * answered it (a barrier: DISCARD is rare, JuiceFS never sends one), and a
 * refusal puts the session back in MULTI. Redis's +OK teaches that the
 * identity may DISCARD: a local transaction's DISCARD is then answered here
 * (px_txn_local_dispatch). Only a PINNED connection is known to carry its
 * pool's identity.
 */

void px_txn_discard_send(px_client *c, px_req *r) {
    r->aux_flags |= PX_AUX_DISCARD;
    if (c->mode == PX_MODE_PINNED) px_client_permission_probe(c, r, 0);
    c->barrier = 1;
}

void px_txn_discard_reply(px_client *c, const px_req *r, const char *data, size_t len) {
    int ok = !r->lost && resp_frame_is_ok(data, len);
    c->barrier = 0;
    if (c->mode == PX_MODE_PINNED) px_client_permission_learn(c, r, ok, &c->pool->discard_epoch);
    /* refused, unless there was no transaction (its MULTI was refused) */
    if (!ok && !r->lost && !resp_frame_starts_with(data, len, "-ERR DISCARD without MULTI"))
        c->in_multi = 1;
}

/* ------------------------------------------------------------------------ */
/* the transaction state on the client's own connection */

/* Redis refused the MULTI r of a transaction whose EXEC or DISCARD was
 * sent already, with the keys of the commands queued between: they run
 * alone, and their replies purge those keys first, as the end's would. */
static void txn_ran_alone(px_client *c, const px_req *r) {
    px_req *q = r->next_slot;
    while (q != NULL && !(q->aux_flags & PX_AUX_TXN_STATE)) q = q->next_slot;
    if (q == NULL) return;
    for (px_req *p = r->next_slot; p != q; p = p->next_slot)
        if (p->pending && p->kind == PX_REQ_CLIENT) px_caching_txn_ran_alone(c, p, q);
}

/* Redis refused a MULTI, EXEC, DISCARD or UNWATCH on the client's own
 * connection (an ACL without it; EXECABORT), whose effect the proxy took
 * for granted when it sent it. The connection is closed when the client
 * leaves it. A refused MULTI opened nothing: if its transaction is still
 * the open one, the client is not in MULTI, and the writes sent since,
 * taken as queued, run as they come. Their keys (each purged when sent)
 * go with the last request sent, to be purged again at its reply, when
 * they have all run (C1); at once if none is awaited. A refused UNWATCH
 * left the watches in place (unless a transaction since dropped them). */
void px_txn_state_refused(px_client *c, const px_req *r) {
    c->pin_unsure = 1;
    if (r == c->unwatch_req && !r->lost && !c->in_multi && c->txn_seq == c->unwatch_txn_seq) c->watching = 1;
    if ((r->aux_flags & PX_AUX_MULTI_OPEN) && !r->lost && !(c->in_multi && c->txn_seq == r->tag.txn_seq))
        txn_ran_alone(c, r);
    if ((r->aux_flags & PX_AUX_MULTI_OPEN) && c->in_multi && c->txn_seq == r->tag.txn_seq) {
        px_req *last = c->slots_tail;
        c->in_multi = 0;
        c->txn_acl = 0;
        if (last != NULL && last != r && last->pending && last->aux == NULL)
            px_caching_txn_close(c, last);
        else
            px_caching_txn_abandon(c);
    }
}

/* Redis's answer to the check of the next command of the local
 * transaction (checks are answered in the order they were sent: one
 * connection). Redis's own transaction holds the commands queued before
 * the first it refuses, and none from there on (queueMultiCommand: an
 * aborted transaction queues nothing more, though it answers +QUEUED): so
 * does the block, and neither the flags nor the errors the block meets at
 * EXEC come from any other (its keys' slots, OOM, ...). */
void px_txn_local_checked(px_client *c, const px_req *r, int refused) {
    resp_buf *f = &c->txn_frames;
    uint32_t n;
    if (!c->txn_local || c->txn_dirty || c->txn_checked_at + sizeof n > f->len) return;
    if (refused) {
        c->txn_dirty = 1;
        f->len = c->txn_checked_at;
        c->txn_count = c->txn_queued;
        return;
    }
    memcpy(&n, f->data + c->txn_checked_at, sizeof n);
    c->txn_checked_at += sizeof n + n;
    c->txn_queued++;
    if (r->aux_flags & PX_AUX_CHECK_DENYOOM) c->txn_denyoom = 1;
}

/* The EXEC of a transaction that queued an ACL command. */
void px_txn_acl_exec(px_client *c, px_req *r) {
    if (c->txn_acl) r->aux_flags |= PX_AUX_ACL;
    c->txn_acl = 0;
}

/* Records what a forwarded command does to the transaction state. */
void px_txn_track(px_client *c, int id) {
    switch (id) {
    case CMD_WATCH:
        if (!c->in_multi) c->watching = 1;
        break;
    case CMD_MULTI:
        c->in_multi = 1;
        break;
    case CMD_EXEC:
    case CMD_DISCARD:
        if (c->in_multi) c->in_multi = c->watching = 0;
        break;
    case CMD_UNWATCH:
        if (!c->in_multi) c->watching = 0;
        break;
    }
}

/* ------------------------------------------------------------------------ */
/* transactions without WATCH, on the shared connection */

/* Most commands and bytes a transaction queues here; beyond, it moves to a
 * connection of the client's own, as one that Redis must answer does. */
#define TXN_LOCAL_MAX_COMMANDS 10000
#define TXN_LOCAL_MAX_BYTES (4 * 1024 * 1024)

/*
 * MULTI without WATCH is answered here (+OK), and the transaction stays on
 * the shared connection: nothing pins a connection while the client takes
 * its time between MULTI and EXEC. Each queued command is checked by Redis
 * itself, as Redis checks it when queuing (unknown command, arity, ACL,
 * OOM, MISCONF, ...), with MULTI <command> DISCARD — a contiguous triple on
 * the shared connection that runs nothing — and the client gets Redis's
 * own answer (+QUEUED or the error). At EXEC, once every check is answered,
 * MULTI, the commands and EXEC go as one block (txn_local_exec; behind a
 * refused command, aborted as Redis aborts it).
 * Commands with connection state (SELECT, nested MULTI, WATCH, commands
 * answered here outside MULTI, ...) and oversized transactions move it to a
 * connection of the client's own (txn_local_to_pinned).
 */
/* Redis refused this identity a MULTI or a DISCARD that sidecache added:
 * a local MULTI's check (MULTI, the command, DISCARD) cannot be made. */
static int local_txn_denied(const px_client *c) {
    uint64_t now = px_acl_mark(c->srv);
    return c->pool->txn_denied == now || c->pool->discard_denied == now;
}

int px_txn_local_allowed(px_client *c) {
    /* where Redis wants a password, MULTI of a client without one is NOAUTH;
     * an identity Redis refused MULTI or DISCARD sends its own */
    return (c->pass != NULL || c->srv->open_access == 1) && !local_txn_denied(c);
}

/* The local transaction's commands and what Redis's checks said of them
 * are forgotten (sent, or dropped). */
static void txn_local_clear(px_client *c) {
    c->txn_local = 0;
    c->txn_dirty = 0;
    c->txn_denyoom = 0;
    c->txn_count = 0;
    c->txn_queued = 0;
    c->txn_checked_at = 0;
    resp_buf_reset(&c->txn_frames);
}

/* Ends the local transaction (exec: its written keys stay recorded for
 * EXEC's reply). Otherwise they are purged, every check being answered:
 * a check whose MULTI Redis refused ran its command. */
void px_txn_local_end(px_client *c, int exec) {
    if (!c->txn_local) return;
    if (!exec) px_caching_txn_abandon(c);
    c->txn_acl = 0;
    txn_local_clear(c);
}


/* A command Redis refuses at queue time whatever the user or memory
 * (arity is checked first): sent inside MULTI, it flags Redis's
 * transaction, whose EXEC then aborts; its reply is dropped. Returns 0, or
 * -1 with the client closed (out of memory). */
static int send_refused_cmd(px_client *c, px_upstream *u) {
    static const char refused_cmd[] = "*1\r\n$3\r\nGET\r\n";
    px_req *r = px_req_new(c->srv, NULL, PX_REQ_DISCARD);
    if (r == NULL) {
        px_client_close(c, "out of memory");
        return -1;
    }
    px_upstream_send(u, r, refused_cmd, sizeof refused_cmd - 1);
    return 0;
}

/* The transaction so far goes to a connection of the client's own, and the
 * current command follows it there, for Redis to answer. */
static int txn_local_to_pinned(px_client *c, const char *frame) {
    if (c->inflight > 0) return PX_DISPATCH_WAIT;
    if (px_client_pin_new(c, PX_MODE_PINNED) != 0) {
        c->txn_dirty = 1; /* replied: unavailable; the transaction cannot run */
        return PX_DISPATCH_DONE;
    }
    if (px_block_send(c->pinned, c->txn_frames.data, c->txn_frames.len, c->txn_count, 0) != 0) {
        px_client_close(c, "out of memory");
        return PX_DISPATCH_DONE;
    }
    if (c->txn_dirty) {
        /* Redis refused a queued command (OOM, MISCONF, ...): sent again, it
         * may pass now, but the client was told it failed, and EXEC must
         * abort. A command Redis refuses at queue time whatever the user or
         * memory (arity is checked first) flags Redis's transaction too. */
        if (send_refused_cmd(c, c->pinned) != 0) return PX_DISPATCH_DONE;
    }
    c->in_multi = 1;
    /* the queued keys stay in txn_keys for EXEC; Redis flags its own
     * transaction from now on */
    txn_local_clear(c);
    c->srv->txn_pinned++;
    return px_client_dispatch(c, frame);
}

/* EXEC: MULTI, the queued commands and EXEC, one block on the shared
 * connection; the EXEC's record carries the keys to invalidate again.
 * dirty: Redis refused a queued command, so the block ends with one it
 * refuses whatever happened since, and the EXEC aborts; but Redis checks
 * EXEC itself first (its ACL, a busy script, a cluster's slots for the
 * queued keys, ...), and the client gets that answer as Redis gives it. */
static int txn_local_exec(px_client *c, int dirty) {
    px_upstream *u = px_client_shared_conn(c);
    if (u == NULL) {
        px_txn_local_end(c, 0);
        px_client_reply_unavailable(c, c->pool);
        return PX_DISPATCH_DONE;
    }
    if (c->inflight > 0 && c->inflight_on != u) return PX_DISPATCH_WAIT;
    static const char exec_cmd[] = "*1\r\n$4\r\nEXEC\r\n";
    if (px_block_send(u, c->txn_frames.data, c->txn_frames.len, c->txn_count, 0) != 0) {
        px_client_close(c, "out of memory");
        return PX_DISPATCH_DONE;
    }
    if (dirty && send_refused_cmd(c, u) != 0) return PX_DISPATCH_DONE;
    px_req *r = px_client_forward_to(c, u, PX_REQ_CLIENT, exec_cmd, sizeof exec_cmd - 1, 0);
    if (r == NULL) {
        /* MULTI and the commands went without EXEC: the connection is
         * inside MULTI */
        px_upstream_close(u, "out of memory");
        return PX_DISPATCH_DONE;
    }
    r->aux_flags |= PX_AUX_BLOCK_EXEC | (dirty ? 0 : PX_AUX_BLOCK_CLEAN) | (c->txn_denyoom ? PX_AUX_BLOCK_DENYOOM : 0);
    px_io_write_early(&u->io, 1);
    px_caching_txn_close(c, r);
    px_txn_acl_exec(c, r);
    px_txn_local_end(c, 1);
    c->srv->txn_shared++;
    return PX_DISPATCH_DONE;
}

/* Sends MULTI <command> DISCARD on u: the command's reply is Redis's answer
 * to queuing it; nothing runs. */
static int txn_local_check(px_client *c, px_upstream *u, const char *data, size_t len, int denyoom) {
    static const char multi_cmd[] = "*1\r\n$5\r\nMULTI\r\n", discard_cmd[] = "*1\r\n$7\r\nDISCARD\r\n";
    px_req *m = px_req_new(c->srv, NULL, PX_REQ_TXN_CTL), *d = px_req_new(c->srv, NULL, PX_REQ_TXN_CTL);
    px_req *r = px_req_new(c->srv, c, PX_REQ_CLIENT);
    if (m == NULL || d == NULL || r == NULL) {
        if (m) px_req_release(c->srv, m);
        if (d) px_req_release(c->srv, d);
        if (r) px_req_release(c->srv, r);
        px_client_close(c, "out of memory");
        return -1;
    }
    r->aux_flags |= PX_AUX_TXN_CHECK | (denyoom ? PX_AUX_CHECK_DENYOOM : 0);
    d->aux_flags |= PX_AUX_CTL_DISCARD;
    d->tag.acl_epoch = c->srv->acl_epoch; /* its +OK teaches discard_epoch */
    px_upstream_send(u, m, multi_cmd, sizeof multi_cmd - 1);
    px_client_take_slot(c, r, u, len);
    px_upstream_send(u, r, data, len);
    px_upstream_send(u, d, discard_cmd, sizeof discard_cmd - 1);
    c->txn_checks++;
    return 0;
}

int px_txn_local_dispatch(px_client *c, int id, int plain, const char *frame) {
    /* EXEC and DISCARD wait for every check: EXEC's outcome depends on them,
     * and a check must not count for the next transaction */
    if ((id == CMD_EXEC || id == CMD_DISCARD) && c->txn_checks > 0) return PX_DISPATCH_WAIT;
    if (id == CMD_EXEC && c->rq.argc != 1) {
        /* Redis discards the transaction, naming the arity error */
        px_txn_local_end(c, 0);
        px_client_reply_error(c, "EXECABORT Transaction discarded because of: wrong number of arguments for "
                                 "'exec' command");
        return PX_DISPATCH_DONE;
    }
    if (id == CMD_EXEC && c->pool->txn_denied != px_acl_mark(c->srv)) return txn_local_exec(c, c->txn_dirty);
    if (id == CMD_EXEC && !c->txn_dirty) {
        /* MULTI is refused to this identity now: the block's commands would
         * run one by one. Nothing ran; disconnected, as on a lost
         * connection. */
        px_client_close_after_replies(c);
        return PX_DISPATCH_DONE;
    }
    if (id == CMD_EXEC) {
        /* (no block without MULTI: what Redis says of a transaction with
         * a refused command, unless EXEC itself is refused) */
        px_txn_local_end(c, 0);
        px_client_reply_error(c, "EXECABORT Transaction discarded because of previous errors.");
        return PX_DISPATCH_DONE;
    }
    int multi_denied = c->pool->txn_denied == px_acl_mark(c->srv);
    int discard_known =
        px_client_permission_known(c, c->pool->discard_epoch) && c->pool->discard_denied != px_acl_mark(c->srv);
    if (id == CMD_DISCARD && (multi_denied || discard_known)) {
        /* (with MULTI refused now nothing of it can be on Redis) */
        px_txn_local_end(c, 0);
        px_client_reply_simple(c, "OK");
        return PX_DISPATCH_DONE;
    }
    if (multi_denied) {
        /* Redis refused this identity a MULTI since this transaction
         * began: a check, or the block that takes it to a connection of
         * its own, would run commands the client believes queued.
         * Disconnected, as on a lost connection. */
        px_client_close_after_replies(c);
        return PX_DISPATCH_DONE;
    }
    /* A DISCARD Redis may refuse goes there too: then the transaction stays
     * open on Redis, as the client must see it. So does every command once a
     * check's DISCARD was refused (it would leave a connection in MULTI). */
    if (!plain || id == CMD_DISCARD || c->pool->discard_denied == px_acl_mark(c->srv) ||
        c->txn_count >= TXN_LOCAL_MAX_COMMANDS || c->txn_frames.len + c->rq.frame_len > TXN_LOCAL_MAX_BYTES)
        return txn_local_to_pinned(c, frame);
    px_upstream *u = px_client_shared_conn(c);
    if (u == NULL) {
        /* as a command Redis refused: the transaction cannot run */
        c->txn_dirty = 1;
        px_client_reply_unavailable(c, c->pool);
        return PX_DISPATCH_DONE;
    }
    if (c->inflight > 0 && c->inflight_on != u) return PX_DISPATCH_WAIT;
    const char *data;
    size_t len;
    px_client_request_bytes(c, frame, &data, &len);
    /* after a refusal Redis queues nothing more (px_txn_local_checked); the
     * check still gives the client Redis's answer */
    if (!c->txn_dirty) {
        if (px_frames_append(&c->txn_frames, data, len) != 0) {
            px_client_close(c, "out of memory");
            return PX_DISPATCH_DONE;
        }
        c->txn_count++;
    }
    const cmdtable *t = px_caching_cmdtable(c->srv);
    int flags = 0;
    /* (no command table, with the cache off: no OOM is named) */
    int denyoom = t != NULL && cmdtable_check(t, c->rq.argc, c->rq.argv, &flags) && (flags & CMDT_F_DENYOOM);
    px_caching_on_send(c, NULL, NULL, 0, 1); /* its keys, for EXEC */
    txn_local_check(c, u, data, len, denyoom);
    return PX_DISPATCH_DONE;
}

