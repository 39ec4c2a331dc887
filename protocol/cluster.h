/*
 * protocol/cluster.h — what sidecache needs of Redis Cluster: hash slots,
 * and its own address in the topology a client reads.
 *
 * JuiceFS on Redis Cluster puts every key of a volume under the hash tag
 * {N}, so the whole volume lives in one slot on one master. A client that
 * finds a cluster (CLUSTER INFO) reads the topology (CLUSTER SLOTS) and
 * then talks to the nodes itself: relayed unchanged, that topology sends
 * it around sidecache. So sidecache, in front of the master that holds the
 * volume's slot, names itself as the master of every range, and no other
 * node. Naming only the volume's range would not do: a cluster client
 * reloads the topology from time to time (go-redis: every 10 s) from any
 * node it knows, and every other node names the volume's real master. A
 * command for another range comes to sidecache too, and Redis answers it
 * with the MOVED that sends the client to that range's node.
 *
 * Pure code: no I/O.
 */
#ifndef SIDECACHE_PROTOCOL_CLUSTER_H
#define SIDECACHE_PROTOCOL_CLUSTER_H

#include <stddef.h>

#include "protocol/resp.h"

#define CLUSTER_SLOTS 16384

/* The hash slot of a key, as Redis computes it (CRC16 of the key, or of
 * its hash tag: what lies between the first '{' and the next '}', when
 * that is not empty). */
unsigned cluster_key_slot(const char *key, size_t len);

/* A MOVED error frame ("-MOVED <slot> <host>:<port>\r\n", whole): its
 * slot, and where its target ("host:port" as Redis wrote it) lies in data.
 * Returns 0, or -1 for another shape. */
int cluster_moved(const char *data, size_t len, long long *slot, const char **to, size_t *tolen);
/* An ASK error frame ("-ASK <slot> <host>:<port>\r\n", whole): its slot.
 * Returns 0, or -1 for another shape. */
int cluster_ask(const char *data, size_t len, long long *slot);

/* The slot of every key that begins with prefix, or -1 when keys with
 * this prefix may fall in any slot (no complete, non-empty hash tag). */
int cluster_prefix_slot(const char *prefix, size_t len);

/* The node sidecache stands in for: the names its address goes by (host
 * as configured, the address it resolved to) and its port. */
typedef struct cluster_self {
    const char *hosts[2];
    int port;
} cluster_self;

/* A CLUSTER SLOTS reply (RESP2 or RESP3: data, len, one whole frame)
 * rewritten to name host:port as the master of each of its ranges, with no
 * replica, when the master of the range that holds slot is the node `up`:
 * its port, and its address, or the "ip" or "hostname" of its metadata
 * (Redis 7 gives there the name it does not prefer), is one of up's names;
 * an empty address, a node that has not learned its own, matches by port.
 * Every range keeps its bounds and names up's id; no networking metadata
 * (a hostname a client could prefer). Returns 0 with the new reply
 * appended to out; otherwise out is unchanged and: -2, the slot's master
 * is another node (at *other, other_len bytes, "host:port"); -1, an error
 * reply, no range holds slot, or a shape Redis does not send. */
int cluster_slots_rewrite(const char *data, size_t len, unsigned slot, const cluster_self *up, const char *host,
                          int port, resp_buf *out, char *other, size_t other_len);

/* Calls fn for every node a CLUSTER SLOTS reply names, masters and
 * replicas, in order (a node that serves several ranges comes more than
 * once): its host as Redis wrote it (an IPv6 address without brackets; empty
 * for a node that has not learned its own) and its port. Returns 0, or -1
 * for a reply of another shape (fn may have been called for some nodes). */
typedef void (*cluster_node_fn)(void *arg, const char *host, size_t hostlen, long long port);
int cluster_slots_nodes(const char *data, size_t len, cluster_node_fn fn, void *arg);

/* The master of slot in a CLUSTER SLOTS reply, as "host:port" into out.
 * Returns 0, or -1: no range holds slot, another shape, or out too short. */
int cluster_slots_master(const char *data, size_t len, unsigned slot, char *out, size_t outlen);

#endif
