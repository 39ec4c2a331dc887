/* proxy/slotwatch.c — see slotwatch.h. */
#include "proxy/slotwatch.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "protocol/cluster.h"
#include "protocol/resp.h"
#include "proxy/caching.h"
#include "proxy/follow.h"
#include "proxy/log.h"
#include "proxy/upstream.h"

/* Without probes, how long after the last ASK the slot counts
 * as stable again. */
#define PROBE_REFUSED_HOLD_MS 10000
/* CLUSTER SLOTS with every this many probes (every NODES_UNKNOWN_EVERY
 * while no reply named nodes): the nodes to ask when the master dies
 * (follow.h), also when no client of sidecache's reads the topology. And a
 * refused probe is tried again with every NODES_EVERY ticks. */
#define NODES_EVERY 30
#define NODES_UNKNOWN_EVERY 5

static const char cluster_slots[] = "*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n";

struct px_slotwatch {
    px_server *srv;
    struct event *tick;
    int asking;           /* a probe is on its way */
    int refused;          /* Redis refused the probe: tried again now and then */
    unsigned ticks;
    int no_nodes;         /* ... or CLUSTER SLOTS (no cluster, an ACL) */
    unsigned probes;      /* probes sent */
    uint64_t sent_events; /* px_caching_slot_events() when it was sent */
    char *cmd;            /* the probe's bytes */
    size_t cmd_len;
};

static void ask(evutil_socket_t fd, short what, void *arg) {
    struct px_slotwatch *w = arg;
    px_server *srv = w->srv;
    if (w->refused && ++w->ticks % NODES_EVERY != 0) {
        px_caching_slot_stable_after(srv, PROBE_REFUSED_HOLD_MS);
        return;
    }
    if (w->asking || srv->stopping || !px_caching_active(srv)) return;
    uint64_t events = px_caching_slot_events(srv);
    if (px_upstream_send_own(srv, PX_REQ_SLOT_PROBE, PX_SLOTWATCH_PROBE, w->cmd, w->cmd_len) != 0) return;
    w->asking = 1;
    w->sent_events = events;
    if (!w->no_nodes && w->probes % (srv->ncluster_nodes == 0 ? NODES_UNKNOWN_EVERY : NODES_EVERY) == 0)
        px_upstream_send_own(srv, PX_REQ_SLOT_PROBE, PX_SLOTWATCH_NODES, cluster_slots, sizeof cluster_slots - 1);
    w->probes++;
}

void px_slotwatch_on_reply(px_server *srv, int what, const char *data, size_t len, int lost) {
    struct px_slotwatch *w = srv->slotwatch;
    if (w == NULL) return;
    if (what == PX_SLOTWATCH_NODES) {
        if (!lost && len > 0 && data[0] == '*')
            px_follow_learn_nodes(srv, data, len);
        else if (!lost && len > 0 && (data[0] == '-' || data[0] == '!'))
            w->no_nodes = 1; /* not a cluster, or not allowed: the clients' replies teach them */
        return;
    }
    w->asking = 0;
    if (lost || len == 0) return;
    /* (an ASK made the slot unstable on its way: px_caching_note_reply) */
    if (len == 4 && memcmp(data, ":0\r\n", 4) == 0) {
        /* the master holds the slot, not migrating, as it ran the probe:
         * unless an ASK came meanwhile, from a command run after it */
        w->refused = 0;
        px_caching_slot_stable(srv, w->sent_events);
    } else if (data[0] == ':' || resp_frame_is_refusal(data, len)) {
        /* refused, or the key exists (a source holding it answers, and
         * would while migrating): the probe tells nothing */
        size_t n = len >= 2 ? len - 2 : len;
        if (!w->refused)
            px_notice("the probe of the volume's cluster slot tells nothing (%.*s): a migration of it is seen "
                      "only by the ASK replies of clients; let the upstream user run EXISTS on the key-prefix's "
                      "keys, and write no key named <key-prefix>sidecache:slot-probe",
                      (int)(n > 120 ? 120 : n), data);
        w->refused = 1;
    }
    /* MOVED: flushed and followed as every MOVED (upstream.c); CLUSTERDOWN:
     * the cache is off until a probe answers :0 (px_caching_note_reply);
     * LOADING...: asked again at the next tick */
}

int px_slotwatch_init(px_server *srv) {
    const char *prefix = srv->cfg->key_prefix;
    if (srv->caching == NULL || cluster_prefix_slot(prefix, strlen(prefix)) < 0) return 0;
    struct px_slotwatch *w = calloc(1, sizeof *w);
    if (w == NULL) return -1;
    w->srv = srv;
    static const char probe[] = "sidecache:slot-probe";
    size_t plen = strlen(prefix), klen = plen + sizeof probe - 1;
    w->cmd = malloc(64 + klen);
    w->tick = event_new(srv->base, -1, EV_PERSIST, ask, w);
    struct timeval tv = px_ms_timeval(srv->cfg->tracking_keepalive_ms > 0 ? srv->cfg->tracking_keepalive_ms : 1000);
    if (w->cmd == NULL || w->tick == NULL || event_add(w->tick, &tv) != 0) {
        if (w->tick != NULL) event_free(w->tick);
        free(w->cmd);
        free(w);
        return -1;
    }
    int n = snprintf(w->cmd, 64, "*2\r\n$6\r\nEXISTS\r\n$%zu\r\n", klen);
    memcpy(w->cmd + n, prefix, plen);
    memcpy(w->cmd + n + plen, probe, sizeof probe - 1);
    memcpy(w->cmd + n + klen, "\r\n", 2);
    w->cmd_len = (size_t)n + klen + 2;
    srv->slotwatch = w;
    return 0;
}

void px_slotwatch_free(px_server *srv) {
    struct px_slotwatch *w = srv->slotwatch;
    if (w == NULL) return;
    event_free(w->tick);
    free(w->cmd);
    free(w);
    srv->slotwatch = NULL;
}
