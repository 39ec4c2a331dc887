/*
 * proxy/aclwatch.h — ACL changes made directly on Redis.
 *
 *   acl-check-ms <ms>     (default 1000; 0 = off)
 *
 * The cache answers a user only what that user's own reads filled (C8), but
 * a user's permissions can be taken away later. An ACL command sent through
 * sidecache empties the cache itself; one sent to Redis directly (the
 * usual way an operator manages users) sends no invalidation. So every
 * acl-check-ms, while the cache is on, sidecache asks ACL LIST on a shared
 * connection of its configured identity and keeps the reply's SHA-1: when
 * it differs from the last one, the cache is emptied (counted in
 * cache_flushes_acl_changed) and what was learned of every user's
 * permissions is asked of Redis again (srv->acl_epoch), before another hit.
 * A revocation made on Redis is honoured within acl-check-ms and a round
 * trip. When the default user's line changed (a password given to it with
 * requirepass or ACL SETUSER, the user turned off), the connections that
 * clients without credentials share, logged in as that user before, are
 * replaced too (px_pools_default_user_changed): Redis keeps them logged in.
 *
 * When Redis refuses the configured identity ACL LIST (an ACL without
 * @admin, NOAUTH, a Redis without ACL), the checks stop and a notice says
 * so: changes made directly on Redis are then not seen (README).
 */
#ifndef SIDECACHE_PROXY_ACLWATCH_H
#define SIDECACHE_PROXY_ACLWATCH_H

#include <stddef.h>

#include "proxy/server.h"
#include "proxy/stats.h"

struct px_req;

/* Starts the checks (no-op when acl-check-ms is 0 or the cache is off).
 * Returns 0, or -1 when out of memory. */
int px_aclwatch_init(px_server *srv);
void px_aclwatch_free(px_server *srv);

/* acl_checks: the checks answered so far (lists compared, and the refusal
 * that stopped them). A test waits for the first before it counts hits or
 * permission asks: the first list empties the cache and asks every
 * permission again (what was learned before it may already be refused by
 * it). */
void px_aclwatch_collect(const px_server *srv, px_stats *s);

/* The reply to a check (a PX_REQ_ACL_LIST request), or the error frame its
 * lost connection gave it. */
void px_aclwatch_on_reply(px_server *srv, struct px_req *r, const char *data, size_t len, int lost);

#endif
