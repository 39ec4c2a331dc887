/*
 * proxy/slotwatch.h — a migration of the volume's cluster slot.
 *
 * In front of a Redis Cluster sidecache tracks one master: the one that
 * holds the slot of the key-prefix's hash tag ({N}, a JuiceFS volume). While
 * that slot migrates, a key the source does not hold is written on the
 * target (the writer follows Redis's ASK), and no invalidation connection of
 * sidecache's hears that write: a cached nil of that key (a name not found,
 * an inode not there) would stay, after the migration too. So while the slot
 * is unstable the cache serves and fills nothing, and WATCH is not answered
 * ahead: from the first ASK of it (a client's reply, or this probe's),
 * which empties the cache, until a probe finds the slot stable again
 * (px_caching_slot_unstable, px_caching_slot_stable).
 *
 * The probe: every tracking-keepalive-ms, while the cache is on and the
 * key-prefix has a hash tag, EXISTS of a key of the slot that nobody writes
 * (<key-prefix>sidecache:slot-probe), on a shared connection of sidecache's
 * own identity (the upstream URL's, as for the ACL checks). Redis answers it
 * ASK while the slot migrates (the key is not on the source), MOVED once
 * the slot is elsewhere (followed as any MOVED: follow.h), a number when the
 * master holds the slot and it is not migrating (or Redis is no cluster):
 * :0, the key being one nobody writes.
 * A migration that begins between two probes is seen at the next one, or at
 * a client's first ASK: the window that remains is in docs/CONSISTENCY.md.
 * With a probe now and then, and until the nodes are known, CLUSTER SLOTS:
 * the nodes sidecache asks where the slot went when its master dies
 * (follow.h), also when no client reads the topology through sidecache.
 * When Redis refuses the probe (an ACL without EXISTS on the slot's keys),
 * or the probe's key exists, a notice says so and the probes are sent only
 * now and then; a client's ASK still stops the cache, which comes back
 * PROBE_REFUSED_HOLD_MS (10 s) after the last ASK.
 */
#ifndef SIDECACHE_PROXY_SLOTWATCH_H
#define SIDECACHE_PROXY_SLOTWATCH_H

#include <stddef.h>

#include "proxy/server.h"

/* Starts the probes (no-op without a hash-tag key-prefix or a cache).
 * Returns 0, or -1 when out of memory. */
int px_slotwatch_init(px_server *srv);
void px_slotwatch_free(px_server *srv);

/* What a PX_REQ_SLOT_PROBE request asked (its tag.probe): the probe, or
 * CLUSTER SLOTS for the nodes to ask when the master dies (follow.h). */
enum { PX_SLOTWATCH_PROBE = 0, PX_SLOTWATCH_NODES = 1 };

/* The reply to a request of what, or the error frame its lost connection
 * gave it (lost). */
void px_slotwatch_on_reply(px_server *srv, int what, const char *data, size_t len, int lost);

#endif
