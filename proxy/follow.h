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
 * the requests in flight get the old node's answer (its MOVED as a
 * TRYAGAIN on shared connections: px_follow_tryagain); new connections go
 * to the new master, and the topology through sidecache names sidecache
 * for it. A CLUSTER
 * SLOTS that names another master for the slot (a failover no MOVED told of
 * yet) moves it the same way (client.c), with the cache off too.
 *
 * A master that dies sends no MOVED: while the upstream cannot be reached
 * (a connect fails, or a master that hangs, its host up, leaves the
 * invalidation connection's PING or a request unanswered past its timeout:
 * px_upstream_unanswered),
 * the nodes that the last CLUSTER SLOTS through sidecache named (a cluster
 * client reads it at its start, and go-redis every 10 s) are asked where
 * the slot is, a few each second, and once the cluster has promoted a
 * replica, sidecache moves there (hard: the old node is gone). While a
 * followed node is the upstream, the configured address, resolved again,
 * is asked too, after them: when the whole cluster came back elsewhere
 * (Kubernetes pods with new addresses, behind the configured name), none
 * of the nodes remembered answers, and only it leads to the cluster.
 *
 * Not with upstream-sentinel (Sentinel says where the master is), nor with
 * a tracking-upstream of its own (the invalidations would come from a node
 * that no longer holds the slot). The upstream keeps its configured
 * credentials, database and TLS settings (the certificate is checked
 * against the configured host name, as after a Sentinel failover). A
 * followed node that cannot be reached stays the upstream until the
 * cluster's nodes or the configured address name another (above); with
 * no node to ask (or with TLS, where none is asked), the configured one is
 * tried again.
 */
#ifndef SIDECACHE_PROXY_FOLLOW_H
#define SIDECACHE_PROXY_FOLLOW_H

#include <stddef.h>

#include "protocol/resp.h"
#include "proxy/server.h"

/* Whether the upstream follows the slot: key-prefix has a hash tag, and
 * neither upstream-sentinel nor tracking-upstream is set. */
int px_follow_enabled(const px_server *srv);

/* Redis answered MOVED (data, len: the error frame; not a script's): if it
 * is for the key-prefix's slot, the upstream moves where it says, after the
 * reply's callback, whose connection the move retires. */
void px_follow_moved(px_server *srv, const char *data, size_t len);

/* The same, to node ("host:port" as Redis writes it): the topology a client
 * asked for names it as the slot's master. */
void px_follow_to(px_server *srv, const char *node);

/* What the client gets for that MOVED (data, len; not a script's): a
 * TRYAGAIN, appended to out (returns 1; else 0, nothing appended). Nothing
 * ran, as with MOVED, and a cluster client retries it after a pause, here,
 * where sidecache now forwards to the new master; a MOVED would send it
 * there itself, and go-redis keeps a node it was sent to among those it
 * reads the topology from: from then on it could learn the real nodes and
 * go around the cache (cluster.h). */
int px_follow_tryagain(const px_server *srv, const char *data, size_t len, resp_buf *out);

/* The nodes of a CLUSTER SLOTS reply from Redis (data, len): remembered,
 * to be asked where the slot is when the upstream cannot be reached. */
void px_follow_learn_nodes(px_server *srv, const char *data, size_t len);

/* From cron: while the upstream cannot be reached (srv->up_unreachable),
 * asks the remembered nodes, a few each second, for the slot's master
 * (CLUSTER SLOTS, with the upstream's credentials, plain TCP), and moves
 * there when it is another node: a master that died and whose replica the
 * cluster promoted. While the upstream is a followed node, each round of
 * asks ends with the configured address (resolved again: its name may
 * lead to new nodes), unless it is one of the remembered nodes as written.
 * Once a node answered, it asks again only after the next failed connect
 * (the flag stays set until a connect succeeds, which may not come for
 * long when one failed once and the connections the proxy has work). */
void px_follow_cron(px_server *srv);

#define PX_FOLLOW_ASKS_PER_TICK 2
/* Two nodes that each name the other for the slot (a resharding applied
 * in the wrong order, for a moment) would have every request move the
 * upstream, emptying the cache and making every connection again: a move
 * a MOVED asks for comes at least this long after the last one (the
 * clients meanwhile get TRYAGAIN, and retry). */
#define PX_FOLLOW_MIN_GAP_MS 1000
#define PX_CLUSTER_SLOTS_MAX_REPLY (4u << 20)

/* The event that makes the move; 0, or -1 when it cannot be made. */
int px_follow_init(px_server *srv);
void px_follow_free(px_server *srv);

#endif
