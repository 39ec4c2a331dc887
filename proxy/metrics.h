/*
 * proxy/metrics.h — the Prometheus endpoint: GET /metrics on
 * metrics-bind:metrics-port (libevent's evhttp, in the proxy's own event
 * loop) answers with px_stats_prometheus (proxy/stats.h): the same numbers
 * as INFO's "# sidecache" section, plus the latency histograms. Any other
 * path is 404, any other method 405. metrics-port 0 (the default): off.
 */
#ifndef SIDECACHE_PROXY_METRICS_H
#define SIDECACHE_PROXY_METRICS_H

#include "proxy/server.h"

/* Starts listening when configured. Returns 0, or -1 after logging why
 * (the address cannot be bound). */
int px_metrics_start(px_server *srv);
void px_metrics_stop(px_server *srv);

#endif
