/*
 * proxy/follow.h — the upstream follows the volume's slot in a Redis
 * Cluster.
 *
 * With a key-prefix hash tag ({N}: JuiceFS on Redis Cluster) every cached
 * key is in one slot, and sidecache stands in for the master that holds it
 * (protocol/cluster.h). When the slot moves (a failover, a resharding), the
 * old node answers commands for it with MOVED <slot> <host>:<port>; the
 * cache is emptied at once (C6, caching.c), and sidecache moves its
 * upstream there, gently (px_upstreams_move): the invalidation connection
 * moves, and until tracking is active on the new master no hit is served;
 * the requests in flight get the old node's own MOVED, which the client
 * follows before it reads the topology again, through sidecache, which now
 * names itself for the new master; new connections go there.
 *
 * Not with upstream-sentinel (Sentinel says where the master is), nor with
 * a tracking-upstream of its own (the invalidations would come from a node
 * that no longer holds the slot). The upstream keeps its configured
 * credentials, database and TLS settings (the certificate is checked
 * against the configured host name, as after a Sentinel failover). A
 * connect to the followed node that fails goes back to the configured one.
 */
#ifndef SIDECACHE_PROXY_FOLLOW_H
#define SIDECACHE_PROXY_FOLLOW_H

#include <stddef.h>

#include "proxy/server.h"

/* Whether the upstream follows the slot: key-prefix has a hash tag, and
 * neither upstream-sentinel nor tracking-upstream is set. */
int px_follow_enabled(const px_server *srv);

/* Redis answered MOVED for the key-prefix's slot (data, len: the error
 * frame): the move happens after the reply's callback, whose connection it
 * retires. */
void px_follow_moved(px_server *srv, const char *data, size_t len);

/* The event that makes the move; 0, or -1 when it cannot be made. */
int px_follow_init(px_server *srv);
void px_follow_free(px_server *srv);

#endif
