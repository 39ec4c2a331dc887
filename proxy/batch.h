/*
 * proxy/batch.h — blocks of commands that reach Redis as MULTI … EXEC on a
 * shared connection, contiguous, in one write:
 *
 *   write batching: a client's pipelined writes (SET, HSET, DEL, … one after
 *     another in its input, nothing else between them) are sent as blocks of
 *     at most batch-max-commands. Each still gets its own reply: EXEC's array
 *     is split among them. A block Redis refuses as a whole (EXECABORT: a
 *     command refused when queued, e.g. OOM, NOPERM, MISCONF) ran nothing,
 *     so its commands are sent again one by one, and each gets the reply
 *     Redis gives it alone. A block whose MULTI Redis refuses (an ACL
 *     without MULTI) had each command run, or refused, alone: each gets
 *     that reply, as if sent alone (upstream.c keeps them for
 *     px_batch_on_relayed), and EXEC's error is dropped. Until a block's EXEC is answered the client's
 *     next request waits (a resend must not come after a later request).
 *     Only commands Redis is known to queue are batched (a known command
 *     with the right arity, flagged write, and neither admin, blocking,
 *     no_multi, noscript nor pubsub), of at most PX_BATCH_MAX_FRAME bytes;
 *     a block of one is sent as it is. Nor are the writes of lists, sorted
 *     sets and streams, and the commands that move or copy whole keys
 *     (CMDT_F_WAKES): a client blocked on such a key (BLPOP, BZPOPMIN,
 *     XREAD BLOCK) takes what one of them gave before the next command
 *     runs, which inside a block it would only after the block.
 *
 *   transactions without WATCH: proxy/txn.c answers MULTI itself, has
 *     Redis check each queued command, and sends the whole transaction at
 *     EXEC with px_block_send.
 */
#ifndef SIDECACHE_PROXY_BATCH_H
#define SIDECACHE_PROXY_BATCH_H

#include <stddef.h>

#include "proxy/client.h"
#include "proxy/upstream.h"

/* Larger commands are not batched: a block keeps a copy of each command. */
#define PX_BATCH_MAX_FRAME (64 * 1024)

/* May the client's current request (c->rq) join a write batch? */
int px_batch_eligible(px_client *c);

/* Adds the current request, whose bytes are data/len, to the client's
 * batch for connection u (sent by px_batch_flush, or now when the batch is
 * full). The request takes its reply slot now. Returns 0, or -1 when the
 * client was closed (out of memory). */
int px_batch_add(px_client *c, px_upstream *u, const char *data, size_t len);

/* Sends the client's open batch, if any. */
void px_batch_flush(px_client *c);

/* Once a second: with no batch open, the client's batch buffers go (an idle
 * client keeps nothing a batch needed). */
void px_batch_cron(px_client *c);

/* The reply to a batch's EXEC (r->kind == PX_REQ_BATCH). */
void px_batch_on_reply(px_client *c, px_req *r, const char *data, size_t len);

/* The end of batch ex whose MULTI Redis refused (its commands ran, or
 * were refused, alone): its first k requests get the replies Redis gave
 * those commands (replies: k whole frames, in order), the others err,
 * marked lost (the connection went, or memory ran out: they may have run;
 * nothing is sent again). */
void px_batch_on_relayed(px_client *c, px_req *ex, const char *replies, size_t len, uint32_t k, const char *err,
                         size_t errlen);

/* Sends MULTI and then n commands on u, whose replies (+OK, +QUEUED) are
 * dropped. frames holds each command as (u32 length, bytes). batch: the
 * block of a write batch, whose commands' own replies become the EXEC's
 * array if Redis refuses the MULTI (0: of a transaction). All or nothing:
 * returns 0, or -1 (out of memory) with nothing sent. */
int px_block_send(px_upstream *u, const char *frames, size_t len, int n, int batch);

/* Appends a command's bytes to a (u32 length, bytes) list. 0 or -1. */
int px_frames_append(resp_buf *frames, const char *data, size_t len);

#endif
