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
 * A master that dies sends no MOVED: while the upstream cannot be reached,
 * the nodes that the last CLUSTER SLOTS through sidecache named (a cluster
 * client reads it at its start, and go-redis every 10 s) are asked where
 * the slot is, a few each second, and once the cluster has promoted a
 * replica, sidecache moves there (hard: the old node is gone).
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

/* The nodes of a CLUSTER SLOTS reply from Redis (data, len): remembered,
 * to be asked where the slot is when the upstream cannot be reached. */
void px_follow_learn_nodes(px_server *srv, const char *data, size_t len);

/* From cron: while the upstream cannot be reached (srv->up_unreachable),
 * asks the remembered nodes, a few each second, for the slot's master
 * (CLUSTER SLOTS, with the upstream's credentials, plain TCP), and moves
 * there when it is another node: a master that died and whose replica the
 * cluster promoted. */
void px_follow_cron(px_server *srv);

#define PX_FOLLOW_ASKS_PER_TICK 2
#define PX_CLUSTER_SLOTS_MAX_REPLY (4u << 20)

/* The event that makes the move; 0, or -1 when it cannot be made. */
int px_follow_init(px_server *srv);
void px_follow_free(px_server *srv);

#endif
