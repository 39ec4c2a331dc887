/*
 * proxy/stats.c — see stats.h.
 */
#include "proxy/stats.h"

#include <string.h>

#include "proxy/aclwatch.h"
#include "proxy/caching.h"
#include "proxy/client.h"
#include "proxy/server.h"

#define SIDECACHE_VERSION "0.1.0"

/* Upper bounds of the latency buckets, microseconds. */
static const uint64_t latency_bounds_us[PX_LATENCY_BUCKETS] = {
    10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 1000000, 5000000,
};

void px_latency_add(px_latency *h, int64_t us) {
    int i = 0;
    if (us < 0) us = 0; /* the wall clock stepped back */
    while (i < PX_LATENCY_BUCKETS && (uint64_t)us > latency_bounds_us[i]) i++;
    h->counts[i]++;
    h->sum_us += (uint64_t)us;
    h->n++;
}

void px_stats_collect(px_server *srv, px_stats *s) {
    memset(s, 0, sizeof *s);
    s->connected_clients = (uint64_t)srv->nclients;
    s->upstream_connections = srv->nupstreams;
    for (px_client *c = srv->clients; c != NULL; c = c->next)
        if (c->pinned != NULL) s->pinned_connections++;
    for (const px_pool *p = srv->pools; p != NULL; p = p->next) s->upstream_pools++;
    s->upstream_up = srv->upstream_reached && srv->connect_failures.count == 0;
    s->upstream_connects_failed = srv->connects_failed;
    s->upstream_output_bytes = srv->upstream_output;
    s->upstream_requests_pending = srv->upstream_requests;
    s->clients_paused_upstream_output = srv->output_waiters.n;
    s->upstream_output_limit_pauses = srv->output_limit_pauses;
    s->batch_blocks = srv->batch_blocks;
    s->batch_commands = srv->batch_commands;
    s->batch_replays = srv->batch_replays;
    s->batch_relayed = srv->batch_relayed;
    s->txn_shared = srv->txn_shared;
    s->txn_pinned = srv->txn_pinned;
    s->unwatch_local = srv->unwatch_local;
    s->watch_ahead = srv->watch_ahead;
    s->unwatch_ahead = srv->unwatch_ahead;
    s->watch_ahead_refused = srv->watch_ahead_refused;
    s->cluster_untagged = (uint64_t)srv->cluster_untagged;
    s->tracking_state = "off";
    s->tracking_mode = "";
    s->tracking_last_error = "";
    px_caching_collect(srv, s);
    px_aclwatch_collect(srv, s);
}

void px_stats_info(px_server *srv, resp_buf *b) {
    px_stats s;
    px_stats_collect(srv, &s);
    uint64_t lookups = s.cache_hits + s.cache_misses;
    resp_buf_printf(b, "# sidecache\r\n");
    resp_buf_printf(b, "sidecache_version:%s\r\n", SIDECACHE_VERSION);
    resp_buf_printf(b, "tracking_state:%s\r\n", s.tracking_state);
    resp_buf_printf(b, "tracking_mode:%s\r\n", s.tracking_mode);
    resp_buf_printf(b, "tracking_last_error:%s\r\n", s.tracking_last_error);
    resp_buf_printf(b, "cache_hit_ratio:%.4f\r\n", lookups ? (double)s.cache_hits / (double)lookups : 0.0);
#define PX_STAT_INFO(name, type, help) resp_buf_printf(b, #name ":%llu\r\n", (unsigned long long)s.name);
    PX_STATS(PX_STAT_INFO)
#undef PX_STAT_INFO
}

static void latency_prometheus(resp_buf *b, const char *name, const char *help, const px_latency *h) {
    uint64_t cum = 0;
    resp_buf_printf(b, "# HELP sidecache_%s %s\n# TYPE sidecache_%s histogram\n", name, help, name);
    for (int i = 0; i < PX_LATENCY_BUCKETS; i++) {
        cum += h->counts[i];
        resp_buf_printf(b, "sidecache_%s_bucket{le=\"%g\"} %llu\n", name, (double)latency_bounds_us[i] / 1e6,
                        (unsigned long long)cum);
    }
    resp_buf_printf(b, "sidecache_%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)h->n);
    resp_buf_printf(b, "sidecache_%s_sum %.6f\n", name, (double)h->sum_us / 1e6);
    resp_buf_printf(b, "sidecache_%s_count %llu\n", name, (unsigned long long)h->n);
}

void px_stats_prometheus(px_server *srv, resp_buf *b) {
    px_stats s;
    px_stats_collect(srv, &s);
    resp_buf_printf(b, "# HELP sidecache_info Version and tracking of this sidecache\n# TYPE sidecache_info gauge\n");
    resp_buf_printf(b, "sidecache_info{version=\"%s\",tracking_mode=\"%s\",tracking_state=\"%s\"} 1\n",
                    SIDECACHE_VERSION, s.tracking_mode, s.tracking_state);
#define PX_STAT_PROM(name, type, help)                                                                   \
    resp_buf_printf(b, "# HELP sidecache_%s %s\n# TYPE sidecache_%s %s\nsidecache_%s %llu\n", #name, help, \
                    #name, #type, #name, (unsigned long long)s.name);
    PX_STATS(PX_STAT_PROM)
#undef PX_STAT_PROM
    latency_prometheus(b, "hit_seconds", "Cache hits: request read to reply written", &srv->lat_hit);
    latency_prometheus(b, "upstream_seconds", "Upstream round trips: request written to reply read",
                       &srv->lat_upstream);
}
