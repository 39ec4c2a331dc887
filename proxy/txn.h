/*
 * proxy/txn.h — transactions in the router (client.c calls these; they
 * call back into it through client.h's router section):
 *
 *   - MULTI without WATCH answered here and kept on the shared connection
 *     (a local transaction: each queued command checked by Redis, the
 *     whole sent as one block at EXEC);
 *   - WATCH, and UNWATCH of watched keys, answered +OK once written to
 *     Redis (watch-ahead), UNWATCH with nothing watched answered here,
 *     DISCARD sent as a barrier;
 *   - what Redis's refusal of MULTI, EXEC, DISCARD, UNWATCH or WATCH means
 *     for the session and for the keys its commands wrote.
 *
 * Why each is safe is in txn.c, next to it.
 */
#ifndef SIDECACHE_PROXY_TXN_H
#define SIDECACHE_PROXY_TXN_H

#include <stddef.h>

#include "proxy/client.h"

/* UNWATCH (the current request): answered +OK here if the session is on
 * the shared connection and Redis let this identity UNWATCH before.
 * Returns 1 if it was answered. */
int px_txn_unwatch_local(px_client *c);

/* An UNWATCH forwarded as r: its +OK will teach px_txn_unwatch_local. */
void px_txn_unwatch_probe(px_client *c, px_req *r);

/* A WATCH (not inside MULTI) just forwarded as r on u: answered +OK here
 * at once when it may be (watch-ahead). */
void px_txn_watch_send(px_client *c, px_upstream *u, px_req *r);

/* An UNWATCH (not inside MULTI) just forwarded as r on the session's own
 * connection u: answered +OK here at once when it may be, as a WATCH. */
void px_txn_unwatch_send(px_client *c, px_upstream *u, px_req *r);

/* Redis's reply to a forwarded WATCH or UNWATCH (r probes what the identity
 * may send): 0 to relay it; 1 if the client already has its +OK; 2 if
 * Redis refused one answered ahead (the client is closing: it reads no
 * more). */
int px_txn_ahead_reply(px_client *c, px_req *r, const char *data, size_t len);

/* A DISCARD that ends a transaction on the client's own connection, sent
 * as r: nothing after it is sent until it is answered (c->barrier). */
void px_txn_discard_send(px_client *c, px_req *r);

/* Redis's reply to that DISCARD: the barrier lifts; refused, the session
 * is in MULTI again. */
void px_txn_discard_reply(px_client *c, const px_req *r, const char *data, size_t len);

/* Redis refused a MULTI, EXEC, DISCARD or UNWATCH (r, PX_AUX_TXN_STATE)
 * that the proxy took for done when it sent it. */
void px_txn_state_refused(px_client *c, const px_req *r);

/* Redis's answer to the check of the local transaction's next command
 * (r, PX_AUX_TXN_CHECK): refused, the transaction will abort at EXEC. */
void px_txn_local_checked(px_client *c, const px_req *r, int refused);

/* The EXEC r of a transaction that queued an ACL command is marked so
 * (PX_AUX_ACL); the mark is spent. */
void px_txn_acl_exec(px_client *c, px_req *r);

/* Records what a command forwarded on the client's own connection (id, a
 * CMD_ of protocol/commands.h) does to c->watching and c->in_multi. */
void px_txn_track(px_client *c, int id);

/* Whether a MULTI without WATCH may open a local transaction. */
int px_txn_local_allowed(px_client *c);

/* Ends the local transaction, if one is open. exec: it was sent with its
 * EXEC, whose reply purges its keys; otherwise they are purged now. */
void px_txn_local_end(px_client *c, int exec);

/* Routes the current request (command id; plain: a command the router
 * would forward as it is, ACT_FORWARD) of a session in a local
 * transaction. Returns PX_DISPATCH_DONE or PX_DISPATCH_WAIT. */
int px_txn_local_dispatch(px_client *c, int id, int plain, const char *frame);

#endif
