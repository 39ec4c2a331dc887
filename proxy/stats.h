/*
 * proxy/stats.h — every number sidecache reports, from one list.
 *
 * PX_STATS is an X-macro: X(name, type, help) for each number, type being
 * the Prometheus type (counter or gauge). It generates the px_stats
 * snapshot, INFO's "# sidecache" section ("name:value" lines, in this
 * order) and /metrics ("sidecache_<name>" with its HELP and TYPE). A number
 * added here appears in both; px_stats_collect is where it is read.
 *
 * Besides the list: INFO also has the text fields sidecache_version,
 * tracking_state, tracking_mode, tracking_last_error and cache_hit_ratio;
 * /metrics has sidecache_info{version,tracking_mode,tracking_state} 1 and
 * two latency histograms (px_latency): cache hits, and upstream round trips
 * (request written to reply read).
 */
#ifndef SIDECACHE_PROXY_STATS_H
#define SIDECACHE_PROXY_STATS_H

#include <stdint.h>

#include "protocol/resp.h"

struct px_server;

#define PX_STATS(X)                                                                                        \
    X(connected_clients, gauge, "Clients connected")                                                       \
    X(upstream_connections, gauge, "Connections to Redis (shared and pinned, not the invalidation one)")  \
    X(pinned_connections, gauge, "Upstream connections pinned to one client")                               \
    X(upstream_pools, gauge, "Identities (user, db, protocol) with connections or clients")                \
    X(upstream_up, gauge, "1 once Redis answered and while no connect to it has failed since; 0 from a failed connect until Redis answers one") \
    X(upstream_connects_failed, counter, "Connects to Redis that failed (refused, unreachable, timed out, TLS handshake failed)") \
    X(upstream_output_bytes, gauge, "Bytes waiting to be written to Redis, all connections")                \
    X(upstream_requests_pending, gauge, "Requests on shared connections whose replies Redis owes")          \
    X(clients_paused_upstream_output, gauge, "Clients not read: upstream-output-limit reached")           \
    X(upstream_output_limit_pauses, counter, "Times a client stopped being read for upstream-output-limit")\
    X(batch_blocks, counter, "Write batches sent as MULTI/EXEC blocks")                                    \
    X(batch_commands, counter, "Commands sent in write batches")                                           \
    X(batch_replays, counter, "Write batches refused (EXECABORT) and sent again one by one")               \
    X(batch_relayed, counter, "Write batches whose MULTI Redis refused: each command's own reply relayed")  \
    X(txn_shared, counter, "Transactions without WATCH sent on a shared connection")                       \
    X(txn_pinned, counter, "Transactions without WATCH moved to a pinned connection")                      \
    X(unwatch_local, counter, "UNWATCH with nothing watched, answered by sidecache")                       \
    X(watch_ahead, counter, "WATCH answered +OK by sidecache once sent, before Redis confirmed it")          \
    X(unwatch_ahead, counter, "UNWATCH of watched keys answered +OK by sidecache once sent, before Redis confirmed it") \
    X(watch_ahead_refused, counter, "WATCH or UNWATCH answered ahead that Redis then refused (client disconnected)") \
    X(cache_enabled, gauge, "1 when the cache is configured")                                               \
    X(tracking_active, gauge, "1 while tracking is confirmed and hits are served")                          \
    X(cache_hits, counter, "Cache entries found (GET, HGET, MGET keys, lookup parts)")                     \
    X(cache_misses, counter, "Cache entries looked up and not found")                                      \
    X(cache_bypassed_in_flight, counter, "Cacheable reads sent to Redis: the client had requests in flight") \
    X(cache_bypassed_flush, counter,                                                                        \
      "Cacheable reads sent to Redis: a FLUSHDB/FLUSHALL (or a write of keys unknown) sent here was unsettled") \
    X(cache_held_keepalive, counter, "Cacheable reads held until the tracking keep-alive PING was answered") \
    X(cache_sent_past_hold, counter,                                                                         \
      "Cacheable reads sent to Redis: a tracking PING unanswered past tracking-ping-hold-ms")              \
    X(cache_held_unread, counter,                                                                            \
      "Cacheable reads held a turn: the invalidation connection had bytes not handled yet")               \
    X(cache_sent_unread, counter,                                                                            \
      "Cacheable reads sent to Redis: the invalidation connection's bytes still not handled after a turn") \
    X(cache_script_hits, counter, "Lookup scripts answered from the cache")                               \
    X(cache_script_misses, counter, "Lookup scripts sent to Redis")                                        \
    X(cache_mget_hits, counter, "MGETs answered from the cache entirely")                                  \
    X(cache_mget_partial, counter, "MGETs with some keys from the cache, the rest from Redis")             \
    X(cache_mget_keys_cached, counter, "MGET keys answered from the cache")                                \
    X(cache_mget_resent, counter, "MGETs sent again whole: a value taken from the cache changed meanwhile")\
    X(cache_fills, counter, "Replies stored in the cache")                                                 \
    X(cache_fills_rejected, counter, "Replies not stored: invalidated while in flight, or no memory")      \
    X(cache_fills_too_big, counter, "Replies not stored: above cache-max-value")                           \
    X(cache_ttl_asked, counter, "PTTLs sent behind fills: keys whose rules allow a TTL")                   \
    X(invalidation_messages, counter, "Invalidation messages received from Redis")                         \
    X(invalidation_keys, counter, "Keys named in invalidation messages")                                   \
    X(cache_invalidations, counter, "Keys invalidated (from Redis and from writes through sidecache)")     \
    X(cache_keys_purged, counter, "Cache entries purged by invalidations")                                 \
    X(cache_flushes, counter, "Times the whole cache was emptied")                                         \
    X(cache_flushes_tracking_lost, counter, "Flushes: tracking lost or its keep-alive late")               \
    X(cache_flushes_null_invalidation, counter, "Flushes: Redis sent a null invalidation (FLUSHALL)")     \
    X(cache_flushes_write_unknown_keys, counter, "Flushes: a write whose keys cannot be known")            \
    X(cache_flushes_failover, counter, "Flushes: Redis answered LOADING, READONLY, MASTERDOWN, CLUSTERDOWN or MOVED") \
    X(cache_flushes_acl_changed, counter, "Flushes: ACL LIST on Redis changed (acl-check-ms)")                \
    X(cache_flushes_caching_refused, counter, "Flushes: Redis refused CLIENT CACHING YES (tracking-mode optin)") \
    X(cache_tracking_refused, counter, "Data connections refused CLIENT TRACKING by Redis (tracking-mode default, optin): their reads are not cached") \
    X(cache_flushes_slot_migrating, counter, "Flushes: the volume's cluster slot began to migrate (ASK)")        \
    X(cache_flushes_redis_busy, counter, "Flushes: a BUSY from Redis dropped cached entries (a script past busy-reply-threshold; not counted when the cache was empty)")   \
    X(cluster_slot_migrating, gauge, "1 while the volume's cluster slot migrates: the cache is off")       \
    X(cluster_untagged, gauge, "1 when the upstream is a cluster node and key-prefix has no hash tag: the cache is off") \
    X(acl_checks, counter, "ACL LIST checks answered: lists compared, or the refusal that stopped them")    \
    X(cache_entries, gauge, "Entries in the cache")                                                         \
    X(cache_pending_fills, gauge, "Reads in flight that may fill the cache")                               \
    X(cache_reclaiming, gauge, "Purged entries (of a large group) whose memory is not freed yet")          \
    X(cache_used_bytes, gauge, "Bytes the cache holds, all overhead counted")                              \
    X(cache_max_bytes, gauge, "cache-max-memory")                                                           \
    X(cache_evictions, counter, "Entries evicted for memory")                                              \
    X(cache_expired, counter, "Entries dropped by cache-ttl or by their key's own expiry")                 \
    X(tracking_connects, counter, "Invalidation connection setups started")                                \
    X(tracking_losses, counter, "Times tracking stopped being active")                                     \
    X(tracking_pings_sent, counter, "Tracking PINGs sent (keep-alives and barriers)")                      \
    X(tracking_pings_answered, counter, "Tracking PINGs answered")                                         \
    X(tracking_pings_lost, counter, "Tracking PINGs unanswered when their connection was lost")            \
    X(tracking_stalls, counter,                                                                            \
      "Tracking PINGs answered more than tracking-ping-hold-ms later than they could have: hits waited for a fresh PING")

typedef struct px_stats {
#define PX_STAT_FIELD(name, type, help) uint64_t name;
    PX_STATS(PX_STAT_FIELD)
#undef PX_STAT_FIELD
    /* text fields (INFO) */
    const char *tracking_state;   /* "off" without a cache */
    const char *tracking_mode;
    const char *tracking_last_error;
} px_stats;

/* Latency histogram: fixed bounds in microseconds, cumulative in /metrics. */
#define PX_LATENCY_BUCKETS 16
typedef struct px_latency {
    uint64_t counts[PX_LATENCY_BUCKETS + 1]; /* the last one: above every bound */
    uint64_t sum_us;
    uint64_t n;
} px_latency;

/* Records one observation of us microseconds. */
void px_latency_add(px_latency *h, int64_t us);

/* Reads every number now. */
void px_stats_collect(struct px_server *srv, px_stats *s);

/* Appends the "# sidecache" INFO section (CRLF lines). */
void px_stats_info(struct px_server *srv, resp_buf *b);

/* Appends the Prometheus text exposition (LF lines). */
void px_stats_prometheus(struct px_server *srv, resp_buf *b);

#endif
