/*
 * proxy/follow.c — the upstream follows the volume's slot (follow.h).
 */
#include "proxy/follow.h"

#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#include "protocol/cluster.h"
#include "protocol/resp.h"
#include "proxy/log.h"
#include "proxy/sentinel.h"
#include "proxy/upstream.h"

int px_follow_enabled(const px_server *srv) {
    const px_config *cfg = srv->cfg;
    return cluster_prefix_slot(cfg->key_prefix, strlen(cfg->key_prefix)) >= 0 && !px_sentinel_enabled(srv) &&
           cfg->tracking_upstream[0] == '\0' && !cfg->up.is_unix;
}

/* The "host:port" of a MOVED frame ("-MOVED <slot> <host>:<port>\r\n"),
 * into to; 0, or -1 for another shape. */
static int moved_target(const char *data, size_t len, char *to, size_t tolen) {
    if (len < 9 || memcmp(data, "-MOVED ", 7) != 0 || data[len - 2] != '\r') return -1;
    const char *p = data + 7, *end = data + len - 2;
    const char *sp = memchr(p, ' ', (size_t)(end - p));
    if (sp == NULL || (size_t)(end - sp - 1) >= tolen || end - sp - 1 < 2) return -1;
    memcpy(to, sp + 1, (size_t)(end - sp - 1));
    to[end - sp - 1] = '\0';
    return 0;
}

void px_follow_moved(px_server *srv, const char *data, size_t len) {
    if (srv->follow_ev == NULL || moved_target(data, len, srv->follow_to, sizeof srv->follow_to) != 0) return;
    event_active(srv->follow_ev, EV_TIMEOUT, 0);
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

static void follow_cb(evutil_socket_t fd, short what, void *arg) {
    px_server *srv = arg;
    px_upstream_addr a;
    struct sockaddr_storage sa;
    unsigned salen = 0;
    char why[300], from[64] = "?", to[64] = "?";
    if (srv->stopping) return;
    if (parse_target(srv, srv->follow_to, &a) != 0) {
        px_warning("cluster: cannot follow MOVED to \"%s\": not host:port", srv->follow_to);
        return;
    }
    if (px_resolve_address(&a, &sa, &salen, why, sizeof why) != 0) {
        px_warning("cluster: cannot follow MOVED to %s: %s", srv->follow_to, why);
        return;
    }
    if (srv->up_salen != 0 && px_same_address(&srv->up_sa, srv->up_salen, &sa, salen)) return;
    if (srv->up_salen != 0) px_format_address(&srv->up_sa, srv->up_salen, from, sizeof from);
    px_format_address(&sa, salen, to, sizeof to);
    px_notice("cluster: slot %d of key-prefix %s moved from=%s to=%s: cache emptied, connections moved",
              cluster_prefix_slot(srv->cfg->key_prefix, strlen(srv->cfg->key_prefix)), srv->cfg->key_prefix, from,
              to);
    px_upstreams_move(srv, &sa, salen, 1);
    srv->up_followed = 1;
    srv->cluster_other_logged = 0;
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
