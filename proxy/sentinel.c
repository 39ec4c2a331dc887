/*
 * proxy/sentinel.c — see sentinel.h.
 */
#include "proxy/sentinel.h"

#include <event2/event.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/resp.h"
#include "proxy/ask.h"
#include "proxy/caching.h"
#include "proxy/client.h"
#include "proxy/log.h"
#include "proxy/resolve.h"
#include "proxy/upstream.h"

int px_sentinel_enabled(const px_server *srv) { return srv->cfg->nsentinel > 0; }

/* A non-empty bulk string at buf[*at] into out (NUL-terminated, shorter
 * than outlen); advances *at. 0, or -1. */
static int copy_bulk(const char *buf, size_t len, size_t *at, char *out, size_t outlen) {
    const char *val;
    size_t vlen;
    if (resp_read_bulk(buf, len, *at, &val, &vlen, at) != 1 || vlen == 0 || vlen >= outlen) return -1;
    memcpy(out, val, vlen);
    out[vlen] = '\0';
    return 0;
}

/* A TCP port in decimal (1 to 65535), or -1. */
static int port_number(const char *s) {
    long long v;
    if (!resp_string2ll(s, strlen(s), &v) || v < 1 || v > 65535) return -1;
    return (int)v;
}

/* One sentinel: "host:port" (len bytes). The master's host and port in
 * host/port, or -1 with why. */
static int ask_one(const char *addr, size_t alen, const char *name, char *host, size_t hostlen, char *port,
                   size_t portlen, char *why, size_t whylen) {
    char h[PX_SENTINEL_NAME_MAX], p[8];
    const char *colon = memrchr(addr, ':', alen);
    if (colon == NULL || (size_t)(colon - addr) >= sizeof h || alen - (size_t)(colon - addr) - 1 >= sizeof p) {
        snprintf(why, whylen, "bad sentinel address");
        return -1;
    }
    memcpy(h, addr, (size_t)(colon - addr));
    h[colon - addr] = '\0';
    memcpy(p, colon + 1, alen - (size_t)(colon - addr) - 1);
    p[alen - (size_t)(colon - addr) - 1] = '\0';

    px_upstream_addr sentinel;
    struct sockaddr_storage sa;
    unsigned salen;
    char cause[200];
    memset(&sentinel, 0, sizeof sentinel);
    /* [::1]:26379, as in a URL: the address is what is inside */
    size_t hl = strlen(h);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']')
        snprintf(sentinel.host, sizeof sentinel.host, "%.*s", (int)(hl - 2), h + 1);
    else
        snprintf(sentinel.host, sizeof sentinel.host, "%s", h);
    sentinel.port = port_number(p);
    if (sentinel.port < 0) {
        snprintf(why, whylen, "sentinel %s:%s: not a port", h, p);
        return -1;
    }
    if (px_resolve_address(&sentinel, &sa, &salen, cause, sizeof cause) != 0) {
        snprintf(why, whylen, "sentinel %s:%s: %s", h, p, cause);
        return -1;
    }
    resp_buf req;
    char *buf = NULL;
    size_t got = 0;
    resp_buf_init(&req);
    resp_enc_commandv(&req, "SENTINEL", "get-master-addr-by-name", name, NULL);
    int rc = px_ask(&sa, salen, req.data, req.len, 1, 1024, PX_SENTINEL_TIMEOUT_MS, &buf, &got, cause, sizeof cause);
    resp_buf_deinit(&req);
    if (rc != 0) {
        /* the name's next address is asked next time */
        px_resolve_failed(sentinel.host, sentinel.port, &sa, salen);
        snprintf(why, whylen, "sentinel %s:%s: %s", h, p, cause);
        return -1;
    }
    /* "*2\r\n$N\r\nhost\r\n$M\r\nport\r\n" */
    long long n;
    size_t at = resp_read_int_line(buf, got, 0, '*', &n);
    rc = -1;
    if (at == 0 || n != 2)
        snprintf(why, whylen, "sentinel %s:%s does not know master '%s'", h, p, name);
    else if (copy_bulk(buf, got, &at, host, hostlen) != 0 || copy_bulk(buf, got, &at, port, portlen) != 0)
        snprintf(why, whylen, "sentinel %s:%s: unexpected reply", h, p);
    else
        rc = 0;
    free(buf);
    return rc;
}

static int ask_master(px_server *srv, struct sockaddr_storage *sa, unsigned *salen, char *why, size_t whylen) {
    const char *line = srv->cfg->sentinel[0];
    const char *sp = strchr(line, ' ');
    char name[PX_SENTINEL_NAME_MAX], host[256], port[8];
    if (!px_sentinel_enabled(srv) || sp == NULL || (size_t)(sp - line) >= sizeof name) {
        snprintf(why, whylen, "no sentinel configured");
        return -1;
    }
    memcpy(name, line, (size_t)(sp - line));
    name[sp - line] = '\0';
    snprintf(why, whylen, "no sentinel");
    const char *addr[PX_SENTINELS_MAX];
    size_t alen[PX_SENTINELS_MAX];
    int n = 0;
    for (const char *a = sp + 1; *a && n < PX_SENTINELS_MAX;) {
        const char *comma = strchr(a, ',');
        addr[n] = a;
        alen[n++] = comma ? (size_t)(comma - a) : strlen(a);
        if (comma == NULL) break;
        a = comma + 1;
    }
    /* the one that answered last first: a sentinel that hangs before it in
     * the list must not stall every check (PX_SENTINEL_TIMEOUT_MS each) */
    for (int i = 0; i < n; i++) {
        int k = (srv->sentinel_first + i) % n;
        if (ask_one(addr[k], alen[k], name, host, sizeof host, port, sizeof port, why, whylen) == 0) {
            px_upstream_addr up;
            memset(&up, 0, sizeof up);
            snprintf(up.host, sizeof up.host, "%s", host);
            up.port = port_number(port);
            if (up.port < 0) {
                /* an answer no master can have: the next sentinel is asked */
                snprintf(why, whylen, "sentinel gave the master of %s as %s:%s: not a port", name, host, port);
                continue;
            }
            srv->sentinel_first = k;
            return px_resolve_address(&up, sa, salen, why, whylen);
        }
    }
    return -1;
}

int px_sentinel_master(px_server *srv, struct sockaddr_storage *sa, unsigned *salen, char *why, size_t whylen) {
    if (ask_master(srv, sa, salen, why, whylen) != 0) return -1;
    /* the operator sees where the master is, when that is news (the
     * upstream URL's address is not used with Sentinel) */
    char at[64];
    px_format_address(sa, *salen, at, sizeof at);
    if (strcmp(at, srv->sentinel_master_logged) != 0) {
        px_notice("sentinel: master at %s", at);
        snprintf(srv->sentinel_master_logged, sizeof srv->sentinel_master_logged, "%s", at);
    }
    return 0;
}

void px_sentinel_check(px_server *srv) {
    struct sockaddr_storage sa;
    unsigned salen = 0;
    char why[300], from[64] = "?", to[64] = "?";
    if (!px_sentinel_enabled(srv)) return;
    /* every ask blocks the loop for up to PX_SENTINEL_TIMEOUT_MS per
     * sentinel that does not answer: unanswered checks back off */
    int64_t now = px_now_ms();
    if (now < srv->sentinel_next_ms) return;
    srv->sentinel_asked_ms = now;
    if (px_sentinel_master(srv, &sa, &salen, why, sizeof why) != 0) {
        srv->sentinel_backoff_ms = srv->sentinel_backoff_ms ? srv->sentinel_backoff_ms * 2 : 1000;
        if (srv->sentinel_backoff_ms > 30000) srv->sentinel_backoff_ms = 30000;
        srv->sentinel_next_ms = px_now_ms() + srv->sentinel_backoff_ms;
        px_warning("sentinel: %s (next ask in %d ms)", why, srv->sentinel_backoff_ms);
        return;
    }
    srv->sentinel_backoff_ms = 0;
    srv->sentinel_next_ms = 0;
    if (srv->up_salen == 0) {
        /* nothing connected yet (or the last connect failed): just use it */
        memcpy(&srv->up_sa, &sa, salen);
        srv->up_salen = salen;
        return;
    }
    if (px_same_address(&srv->up_sa, srv->up_salen, &sa, salen)) return;
    px_format_address(&srv->up_sa, srv->up_salen, from, sizeof from);
    px_format_address(&sa, salen, to, sizeof to);
    px_notice("sentinel: master moved from=%s to=%s: cache emptied, connections moved", from, to);
    px_upstreams_move(srv, &sa, salen, 0);
}

void px_sentinel_ask_soon(px_server *srv) {
    if (srv->sentinel_soon_ev == NULL || evtimer_pending(srv->sentinel_soon_ev, NULL)) return;
    /* Each ask holds the loop up (a round trip to a sentinel, more when one
     * hangs): asked on every READONLY, a demoted master that the sentinels
     * still name would have every loop iteration ask. */
    int64_t wait = srv->sentinel_asked_ms + PX_SENTINEL_SOON_MS - px_now_ms();
    if (wait < 0) wait = 0;
    struct timeval tv = px_ms_timeval(wait);
    evtimer_add(srv->sentinel_soon_ev, &tv);
}
