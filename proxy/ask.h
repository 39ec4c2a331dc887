/*
 * proxy/ask.h — one short blocking exchange with a server that speaks RESP:
 * a sentinel (where is the master?) or a cluster node (where is the slot?).
 *
 * Made from the event loop, so it blocks it: the whole exchange (connect,
 * write, read) is bounded by a deadline, and the callers ask only servers
 * expected close by, rarely, backing off when they do not answer. Plain
 * TCP only (no TLS).
 */
#ifndef SIDECACHE_PROXY_ASK_H
#define SIDECACHE_PROXY_ASK_H

#include <stddef.h>
#include <sys/socket.h>

/* Connects to sa, writes req (reqlen bytes: whole commands) and reads
 * nreplies replies, all before timeout_ms; the last reply, at most
 * max_reply bytes, into *out (malloc'd; the caller frees), *outlen bytes.
 * An error reply before the last fails the exchange. Returns 0, or -1 with
 * a reason (without the address) in why. */
int px_ask(const struct sockaddr_storage *sa, unsigned salen, const char *req, size_t reqlen, int nreplies,
           size_t max_reply, int timeout_ms, char **out, size_t *outlen, char *why, size_t whylen);

#endif
