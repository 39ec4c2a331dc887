/*
 * proxy/follow.c — the upstream follows the volume's slot (follow.h).
 */
#include "proxy/follow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "protocol/cluster.h"
#include "protocol/resp.h"
#include "proxy/ask.h"
#include "proxy/log.h"
#include "proxy/resolve.h"
#include "proxy/sentinel.h"
#include "proxy/upstream.h"

int px_follow_enabled(const px_server *srv) {
    const px_config *cfg = srv->cfg;
    return cluster_prefix_slot(cfg->key_prefix, strlen(cfg->key_prefix)) >= 0 && !px_sentinel_enabled(srv) &&
           cfg->tracking_upstream[0] == '\0' && !cfg->up.is_unix;
}

static int slot_of_prefix(const px_server *srv) {
    return cluster_prefix_slot(srv->cfg->key_prefix, strlen(srv->cfg->key_prefix));
}

/* The target of a MOVED frame for the key-prefix's slot, into to
 * (NUL-terminated); 0, or -1: another slot, no following, or another shape. */
static int moved_here(const px_server *srv, const char *data, size_t len, char *to, size_t tolen) {
    long long slot;
    const char *at;
    size_t n;
    if (srv->follow_ev == NULL || cluster_moved(data, len, &slot, &at, &n) != 0 || n < 2 || n >= tolen ||
        slot != slot_of_prefix(srv))
        return -1;
    memcpy(to, at, n);
    to[n] = '\0';
    return 0;
}

void px_follow_to(px_server *srv, const char *node) {
    if (srv->follow_ev == NULL || strlen(node) >= sizeof srv->follow_to) return;
    snprintf(srv->follow_to, sizeof srv->follow_to, "%s", node);
    int64_t wait = srv->follow_moved_ms + PX_FOLLOW_MIN_GAP_MS - px_now_ms();
    if (srv->follow_moved_ms == 0 || wait <= 0) {
        event_active(srv->follow_ev, EV_TIMEOUT, 0);
    } else if (!evtimer_pending(srv->follow_ev, NULL)) {
        /* (to the node named last, when its time comes) */
        struct timeval tv = {(time_t)(wait / 1000), (suseconds_t)(wait % 1000) * 1000};
        evtimer_add(srv->follow_ev, &tv);
    }
}

int px_follow_tryagain(const px_server *srv, const char *data, size_t len, resp_buf *out) {
    char to[300];
    if (moved_here(srv, data, len, to, sizeof to) != 0) return 0;
    return resp_buf_printf(out, "-TRYAGAIN sidecache: slot %d moved to %s, which sidecache follows\r\n",
                           slot_of_prefix(srv), to) == 0;
}

void px_follow_moved(px_server *srv, const char *data, size_t len) {
    char to[300];
    if (moved_here(srv, data, len, to, sizeof to) == 0) px_follow_to(srv, to);
}

/* host:port (host as Redis wrote it: an IPv6 address without brackets, or
 * empty for a node that has not learned its own) as an upstream address. */
static int parse_target(px_server *srv, const char *to, px_upstream_addr *a) {
    const char *colon = strrchr(to, ':');
    long long port;
    if (colon == NULL || !resp_string2ll(colon + 1, strlen(colon + 1), &port) || port <= 0 || port > 65535)
        return -1;
    memset(a, 0, sizeof *a);
    a->port = (int)port;
    size_t hlen = (size_t)(colon - to);
    if (hlen >= sizeof a->host) return -1;
    memcpy(a->host, to, hlen);
    a->host[hlen] = '\0';
    /* no address: the node the MOVED came from knows none of its own,
     * as alone on a host: the same host as now */
    if (hlen == 0 && px_ip_text(&srv->up_sa, a->host, sizeof a->host, &(int){0}) != 0) return -1;
    return 0;
}

/* Moves the upstream to node ("host:port", as Redis wrote it); 0, or -1
 * when that cannot be resolved. Nothing when it is there already. */
static int move_to(px_server *srv, const char *node, int gently, const char *because) {
    px_upstream_addr a;
    struct sockaddr_storage sa;
    unsigned salen = 0;
    char why[300], from[64] = "?", to[64] = "?";
    /* the node followed last (the MOVED of each request that was in
     * flight to the old one): no name to resolve again */
    if (srv->up_followed && srv->up_salen != 0 && strcmp(node, srv->follow_last) == 0) return 0;
    if (parse_target(srv, node, &a) != 0) {
        px_warning("cluster: cannot follow the slot to \"%s\": not host:port", node);
        return -1;
    }
    if (px_resolve_address(&a, &sa, &salen, why, sizeof why) != 0) {
        px_warning("cluster: cannot follow the slot to %s: %s", node, why);
        return -1;
    }
    if (srv->up_salen != 0 && px_same_address(&srv->up_sa, srv->up_salen, &sa, salen)) return 0;
    px_format_address(&sa, salen, to, sizeof to);
    /* the node whose connect failed last, its address only forgotten to
     * be resolved again at the next connect (up_connect_failed): the slot
     * has not moved, and nothing is to be emptied or closed */
    if (srv->up_salen == 0 && srv->up_failed[0] != '\0' && strcmp(srv->up_failed, to) == 0) return 0;
    if (srv->up_salen != 0)
        px_format_address(&srv->up_sa, srv->up_salen, from, sizeof from);
    else if (srv->up_failed[0] != '\0')
        snprintf(from, sizeof from, "%s", srv->up_failed);
    px_notice("cluster: slot %d of key-prefix %s moved from=%s to=%s (%s): cache emptied, connections moved",
              slot_of_prefix(srv), srv->cfg->key_prefix, from, to, because);
    px_upstreams_move(srv, &sa, salen, gently);
    snprintf(srv->follow_last, sizeof srv->follow_last, "%s", node);
    srv->follow_moved_ms = px_now_ms();
    /* a MOVED's move waiting for its time (PX_FOLLOW_MIN_GAP_MS) to
     * another node is older than this one: the next MOVED asks again */
    if (strcmp(node, srv->follow_to) != 0) event_del(srv->follow_ev);
    srv->up_followed = 1;
    srv->up_unreachable = srv->up_silent = 0;
    srv->cluster_other_logged = 0;
    return 0;
}

static void follow_cb(evutil_socket_t fd, short what, void *arg) {
    px_server *srv = arg;
    if (!srv->stopping) move_to(srv, srv->follow_to, 1, "MOVED");
}

static void remember_node(void *arg, const char *host, size_t hostlen, long long port) {
    px_server *srv = arg;
    char node[128];
    int n = snprintf(node, sizeof node, "%.*s:%lld", (int)(hostlen > 100 ? 100 : hostlen), host, port);
    if (hostlen == 0 || hostlen > 100 || n <= 0 || srv->ncluster_nodes >= PX_CLUSTER_NODES_MAX) return;
    for (int i = 0; i < srv->ncluster_nodes; i++)
        if (strcmp(srv->cluster_nodes[i], node) == 0) return;
    memcpy(srv->cluster_nodes[srv->ncluster_nodes++], node, (size_t)n + 1);
}

void px_follow_learn_nodes(px_server *srv, const char *data, size_t len) {
    if (srv->follow_ev == NULL || len == 0 || data[0] != '*') return;
    int keep = srv->ncluster_nodes;
    srv->ncluster_nodes = 0;
    if (cluster_slots_nodes(data, len, remember_node, srv) != 0 || srv->ncluster_nodes == 0)
        srv->ncluster_nodes = keep; /* an odd reply: the nodes known before stay */
    srv->cluster_ask_from = 0;
}

/* Asks node where the slot is: "host:port" of its master into master. */
static int ask_node(px_server *srv, const char *node, char *master, size_t mlen, char *why, size_t whylen) {
    px_upstream_addr a;
    struct sockaddr_storage sa;
    unsigned salen;
    const px_upstream_addr *up = &srv->cfg->up;
    if (parse_target(srv, node, &a) != 0 || px_resolve_address(&a, &sa, &salen, why, whylen) != 0) return -1;
    if (srv->up_salen != 0 && px_same_address(&srv->up_sa, srv->up_salen, &sa, salen)) {
        snprintf(why, whylen, "the upstream itself");
        return -1;
    }
    resp_buf req;
    resp_buf_init(&req);
    int replies = 1;
    if (up->has_pass) {
        if (up->has_user)
            resp_enc_commandv(&req, "AUTH", up->user, up->pass, NULL);
        else
            resp_enc_commandv(&req, "AUTH", up->pass, NULL);
        replies++;
    }
    resp_enc_commandv(&req, "CLUSTER", "SLOTS", NULL);
    char *reply = NULL;
    size_t rlen = 0;
    int rc = px_ask(&sa, salen, req.data, req.len, replies, PX_CLUSTER_SLOTS_MAX_REPLY, PX_SENTINEL_TIMEOUT_MS,
                    &reply, &rlen, why, whylen);
    resp_buf_deinit(&req);
    if (rc != 0 && !a.is_unix) px_resolve_failed(a.host, a.port, &sa, salen); /* its next address next time */
    if (rc == 0 && (rc = cluster_slots_master(reply, rlen, (unsigned)slot_of_prefix(srv), master, mlen)) != 0)
        snprintf(why, whylen, "no master for the slot in its CLUSTER SLOTS");
    free(reply);
    return rc;
}

/* The configured upstream as "host:port" (its host without brackets, as
 * parse_target takes it): a name is resolved again each time it is used. */
static void configured_node(const px_server *srv, char *node, size_t n) {
    snprintf(node, n, "%s:%d", srv->cfg->up.host, srv->cfg->up.port);
}

/* Whether the configured address is asked in turn with the remembered
 * nodes: only while the upstream is a node the slot was followed to (else
 * the upstream is the configured address, resolved again at each connect),
 * and only when it is not one of them already, as written. Its name may
 * lead to nodes none of the remembered ones is (Kubernetes pods that came
 * back with new addresses): without it, a cluster whose every known node
 * is gone was never found again. */
static int asks_configured(const px_server *srv) {
    char node[300];
    if (!srv->up_followed) return 0;
    configured_node(srv, node, sizeof node);
    for (int i = 0; i < srv->ncluster_nodes; i++)
        if (strcmp(srv->cluster_nodes[i], node) == 0) return 0;
    return 1;
}

/* The i-th node of a round of asks (i below the remembered nodes, plus one
 * when asks_configured): the remembered nodes first, the configured
 * address last, when none of them answered. */
static void node_to_ask(const px_server *srv, int i, char *node, size_t n) {
    if (i < srv->ncluster_nodes)
        snprintf(node, n, "%s", srv->cluster_nodes[i]);
    else
        configured_node(srv, node, n);
}

void px_follow_cron(px_server *srv) {
    if (srv->follow_ev == NULL || !srv->up_unreachable || srv->stopping) return;
    /* (plain TCP: not with rediss://) */
    if (srv->ncluster_nodes == 0 || srv->cfg->up.tls) {
        /* no node to ask: a followed node that is gone gives way to the
         * configured one, whose MOVED leads on */
        if (srv->up_followed) {
            char node[300];
            configured_node(srv, node, sizeof node);
            move_to(srv, node, 0, "followed node unreachable, back to the configured one");
        }
        return;
    }
    int nodes = srv->ncluster_nodes + asks_configured(srv);
    /* a few nodes a second: each that does not answer holds the loop up to
     * PX_SENTINEL_TIMEOUT_MS, while no request can be served anyway */
    for (int tries = 0; tries < PX_FOLLOW_ASKS_PER_TICK && tries < nodes; tries++) {
        char node[300], master[300], why[300], because[400];
        node_to_ask(srv, srv->cluster_ask_from % nodes, node, sizeof node);
        srv->cluster_ask_from = (srv->cluster_ask_from + 1) % nodes;
        if (ask_node(srv, node, master, sizeof master, why, sizeof why) != 0) {
            px_verbose("cluster: asked %s where the slot is: %s", node, why);
            continue;
        }
        snprintf(because, sizeof because, "upstream unreachable, %s names it", node);
        move_to(srv, master, 0, because);
        /* a node answered: asked again after the next failed connect, not
         * every second while the connections the proxy has work (a connect
         * that failed once leaves up_unreachable set until Redis answers on
         * a connection, and most clients need no new one); but each second
         * while the upstream answers nothing (a master that hangs: the
         * cluster promotes its replica after cluster-node-timeout) */
        if (!srv->up_silent) srv->up_unreachable = 0;
        return;
    }
}

int px_follow_init(px_server *srv) {
    if (!px_follow_enabled(srv)) return 0;
    srv->follow_ev = event_new(srv->base, -1, 0, follow_cb, srv);
    return srv->follow_ev != NULL ? 0 : -1;
}

void px_follow_free(px_server *srv) {
    if (srv->follow_ev != NULL) event_free(srv->follow_ev);
    srv->follow_ev = NULL;
}
