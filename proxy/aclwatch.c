/*
 * proxy/aclwatch.c — see aclwatch.h.
 */
#include "proxy/aclwatch.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "protocol/resp.h"
#include "proxy/caching.h"
#include "proxy/log.h"
#include "proxy/sha1.h"
#include "proxy/stats.h"
#include "proxy/upstream.h"

struct px_aclwatch {
    px_server *srv;
    struct event *tick;
    int asking;                       /* a check is on its way */
    int known;                        /* digest holds a reply */
    uint64_t answers;                 /* INFO acl_checks */
    unsigned char digest[PX_SHA1_LEN];
    unsigned char default_user[PX_SHA1_LEN]; /* ... and its "user default" line */
};

static const char acl_list[] = "*2\r\n$3\r\nACL\r\n$4\r\nLIST\r\n";

static void ask(evutil_socket_t fd, short what, void *arg) {
    struct px_aclwatch *w = arg;
    px_server *srv = w->srv;
    if (w->asking || srv->stopping) return;
    /* sidecache's own identity; a client that logs in with its
     * credentials, or without any when there are none, shares its
     * connections */
    if (px_upstream_send_own(srv, PX_REQ_ACL_LIST, 0, acl_list, sizeof acl_list - 1) == 0) w->asking = 1;
}

/* Redis will not tell: a notice, and no more checks. */
static void stop_checking(struct px_aclwatch *w, const char *data, size_t len) {
    size_t n = len;
    while (n > 0 && (data[n - 1] == '\r' || data[n - 1] == '\n')) n--;
    int noauth = len > 7 && (memcmp(data, "-NOAUTH", 7) == 0 || (len > 10 && memcmp(data, "-WRONGPASS", 10) == 0));
    px_notice("acl-check-ms: Redis refused ACL LIST (%.*s): ACL changes made directly on Redis are not seen; %s",
              (int)(n > 120 ? 120 : n), data,
              noauth ? "Redis wants the upstream's credentials (upstream redis://USER:PASSWORD@HOST:PORT)"
                     : "change ACLs through sidecache, or let the upstream user run ACL LIST");
    event_del(w->tick);
}

/* The line of user name in an ACL LIST reply ("user <name> ..."), or an
 * empty one. */
static void user_line(const char *data, size_t len, const char *name, const char **line, size_t *llen) {
    size_t nlen = strlen(name);
    long long n;
    size_t at = resp_read_int_line(data, len, 0, '*', &n);
    *line = "";
    *llen = 0;
    for (long long i = 0; at != 0 && i < n; i++) {
        const char *v;
        size_t vlen;
        if (resp_read_bulk(data, len, at, &v, &vlen, &at) != 1) break;
        if (vlen > 5 + nlen && memcmp(v, "user ", 5) == 0 && memcmp(v + 5, name, nlen) == 0 && v[5 + nlen] == ' ') {
            *line = v;
            *llen = vlen;
            return;
        }
    }
}

/* The SHA-1 of the list's "user default ..." line (of nothing when there
 * is none: an ACL file may delete the user). Returns 0, or -1. */
static int default_user_digest(const char *data, size_t len, unsigned char *md) {
    const char *line;
    size_t llen;
    user_line(data, len, "default", &line, &llen);
    return px_sha1(line, llen, md);
}

/* May the line's user read every key ("~*", "%R~*", "%RW~*")? */
static int reads_every_key(const char *line, size_t llen) {
    static const char *const all[] = {" ~*", " %R~*", " %RW~*"};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        size_t k = strlen(all[i]);
        for (size_t at = 0; at + k <= llen; at++)
            if (memcmp(line + at, all[i], k) == 0 && (at + k == llen || line[at + k] == ' ')) return 1;
    }
    return 0;
}

/* The invalidation connection's user should read every key: Redis versions
 * that filter BCAST invalidations by key permission (redis/redis#15371)
 * send it only those it may read (docs/DEPLOY.md). Said once per list. */
static void check_upstream_user(px_server *srv, const char *data, size_t len) {
    const px_upstream_addr *up = &srv->cfg->up;
    const char *name = up->has_user ? up->user : "default", *line;
    size_t llen;
    if (srv->cfg->tracking_upstream[0] != '\0') return; /* its users are another Redis's */
    user_line(data, len, name, &line, &llen);
    if (llen > 0 && !reads_every_key(line, llen))
        px_warning("the upstream user %s may not read every key (ACL LIST: no ~*): Redis versions that filter "
                   "invalidations by key permission would not invalidate cached keys it may not read "
                   "(docs/DEPLOY.md)",
                   name);
}

void px_aclwatch_on_reply(px_server *srv, px_req *r, const char *data, size_t len, int lost) {
    struct px_aclwatch *w = srv->aclwatch;
    if (w == NULL) return;
    w->asking = 0;
    if (lost || len == 0) return;
    if (data[0] == '-' || data[0] == '!') {
        if (resp_frame_is_refusal(data, len)) {
            stop_checking(w, data, len);
            w->answers++;
        }
        return; /* LOADING, MASTERDOWN...: asked again at the next tick */
    }
    unsigned char md[PX_SHA1_LEN], dmd[PX_SHA1_LEN];
    /* (no digest: this list is not compared; the next tick asks again) */
    if (px_sha1(data, len, md) != 0 || default_user_digest(data, len, dmd) != 0) return;
    /* A password for the default user (or the user turned off) does not
     * log out the connections it is logged in on: those of clients without
     * credentials are replaced, before the cache is emptied. */
    if (w->known && memcmp(dmd, w->default_user, sizeof dmd) != 0) px_pools_default_user_changed(srv);
    /* The first answer too: what the cache took before it, the list it
     * shows may already refuse. Later ones, when the list is another. */
    if (!w->known || memcmp(md, w->digest, sizeof md) != 0) {
        px_caching_acl_changed(srv, !w->known);
        check_upstream_user(srv, data, len);
    }
    memcpy(w->digest, md, sizeof md);
    memcpy(w->default_user, dmd, sizeof dmd);
    w->known = 1;
    w->answers++;
}

void px_aclwatch_collect(const px_server *srv, px_stats *s) {
    if (srv->aclwatch != NULL) s->acl_checks = srv->aclwatch->answers;
}

int px_aclwatch_init(px_server *srv) {
    int every = srv->cfg->acl_check_ms;
    if (every <= 0 || srv->caching == NULL) return 0;
    struct px_aclwatch *w = calloc(1, sizeof *w);
    if (w == NULL) return -1;
    w->srv = srv;
    w->tick = event_new(srv->base, -1, EV_PERSIST, ask, w);
    struct timeval tv = px_ms_timeval(every);
    if (w->tick == NULL || event_add(w->tick, &tv) != 0) {
        if (w->tick != NULL) event_free(w->tick);
        free(w);
        return -1;
    }
    srv->aclwatch = w;
    /* the first list at once: the cache takes nothing of a user before
     * tracking is up, a handshake from now */
    ask(-1, EV_TIMEOUT, w);
    return 0;
}

void px_aclwatch_free(px_server *srv) {
    struct px_aclwatch *w = srv->aclwatch;
    if (w == NULL) return;
    event_free(w->tick);
    free(w);
    srv->aclwatch = NULL;
}
