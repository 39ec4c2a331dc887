/*
 * proxy/sentinel.h — the upstream's address from Redis Sentinel.
 *
 *   upstream-sentinel <master-name> <host:port>[,<host:port>...]
 *
 * The sentinels are asked, in order, SENTINEL get-master-addr-by-name; the
 * first answer wins. They are asked when an upstream address is needed (at
 * start), every sentinel-check-ms, and soon after a sign that the master
 * moved (a connect failed, Redis answered READONLY): at once, but at most
 * once per PX_SENTINEL_SOON_MS, since every write to a demoted master that
 * the sentinels still name (a failover under way) answers READONLY.
 *
 * A failover, seen as a new master address: the cache is emptied before
 * anything else (C6), every upstream connection is closed (their requests
 * in flight get an error; clients with a connection of their own are
 * disconnected, as Redis would on a role change), the invalidation
 * connection moves to the new master, and new connections go there. Until
 * tracking is active on the new master no hit is served.
 *
 * Each ask is one short blocking exchange (connect and reply each bounded by
 * PX_SENTINEL_TIMEOUT_MS per sentinel), made from the event loop: sentinels
 * are expected close by (loopback, the same rack). When no sentinel answers,
 * the periodic asks back off (1 s doubling to 30 s) so that dead sentinels
 * do not stall the proxy.
 */
#ifndef SIDECACHE_PROXY_SENTINEL_H
#define SIDECACHE_PROXY_SENTINEL_H

#include <stddef.h>
#include <sys/socket.h>

#include "proxy/server.h"

#define PX_SENTINEL_TIMEOUT_MS 250
#define PX_SENTINEL_SOON_MS 100

/* Whether upstream-sentinel is configured. */
int px_sentinel_enabled(const px_server *srv);

/* Asks the sentinels where the master is. Returns 0 with its address, or -1
 * with a reason in why (no sentinel answered, or none knows the master). */
int px_sentinel_master(px_server *srv, struct sockaddr_storage *sa, unsigned *salen, char *why, size_t whylen);

/* Asks now, and switches to a new master if it moved (see above). From the
 * sentinel-check-ms timer. */
void px_sentinel_check(px_server *srv);

/* Something says the master may have moved: asks at once, or when
 * PX_SENTINEL_SOON_MS have passed since the last ask. */
void px_sentinel_ask_soon(px_server *srv);

#endif
