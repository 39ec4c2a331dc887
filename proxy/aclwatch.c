/*
 * proxy/aclwatch.c — see aclwatch.h.
 */
#include "proxy/aclwatch.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <openssl/sha.h>

#include "protocol/resp.h"
#include "proxy/caching.h"
#include "proxy/log.h"
#include "proxy/stats.h"
#include "proxy/upstream.h"

struct px_aclwatch {
    px_server *srv;
    struct event *tick;
    int asking;                       /* a check is on its way */
    int known;                        /* digest holds a reply */
    uint64_t answers;                 /* INFO acl_checks */
    unsigned char digest[SHA_DIGEST_LENGTH];
    unsigned char default_user[SHA_DIGEST_LENGTH]; /* ... and its "user default" line */
};

static const char acl_list[] = "*2\r\n$3\r\nACL\r\n$4\r\nLIST\r\n";

static void ask(evutil_socket_t fd, short what, void *arg) {
    struct px_aclwatch *w = arg;
    px_server *srv = w->srv;
    if (w->asking || srv->stopping) return;
    /* sidecache's own identity (the upstream URL's credentials, as the
     * invalidation connection's); a client that logs in with them, or
     * without any when there are none, shares its connections */
    const px_upstream_addr *up = &srv->cfg->up;
    px_pool *p = px_pool_ref(srv, up->has_user ? up->user : NULL, up->has_pass ? up->pass : NULL, up->db, 2);
    if (p == NULL) return;
    px_upstream *u = px_pool_shared(p, 0);
    px_req *r = u != NULL ? px_req_new(srv, NULL, PX_REQ_ACL_LIST) : NULL;
    if (r != NULL) {
        w->asking = 1;
        px_upstream_send(u, r, acl_list, sizeof acl_list - 1);
    }
    px_pool_unref(p);
}

/* Redis will not tell: a notice, and no more checks. */
static void stop_checking(struct px_aclwatch *w, const char *data, size_t len) {
    size_t n = len;
    while (n > 0 && (data[n - 1] == '\r' || data[n - 1] == '\n')) n--;
    px_notice("acl-check-ms: Redis refused ACL LIST (%.*s): ACL changes made directly on Redis are not seen; "
              "change ACLs through sidecache, or let the upstream user run ACL LIST",
              (int)(n > 120 ? 120 : n), data);
    event_del(w->tick);
}

static int refusal_is_final(const char *data, size_t len) {
    static const char *const final[] = {"-NOPERM", "-NOAUTH", "-WRONGPASS", "-ERR unknown command",
                                        "-ERR unknown subcommand"};
    for (size_t i = 0; i < sizeof final / sizeof final[0]; i++)
        if (resp_frame_starts_with(data, len, final[i])) return 1;
    return 0;
}

/* The SHA-1 of the list's "user default ..." line (of nothing when there
 * is none: an ACL file may delete the user). */
static void default_user_digest(const char *data, size_t len, unsigned char *md) {
    static const char prefix[] = "user default ";
    long long n;
    size_t at = resp_read_int_line(data, len, 0, '*', &n);
    const char *line = "";
    size_t llen = 0;
    for (long long i = 0; at != 0 && i < n; i++) {
        const char *v;
        size_t vlen;
        if (resp_read_bulk(data, len, at, &v, &vlen, &at) != 1) break;
        if (vlen >= sizeof prefix - 1 && memcmp(v, prefix, sizeof prefix - 1) == 0) {
            line = v;
            llen = vlen;
            break;
        }
    }
    SHA1((const unsigned char *)line, llen, md);
}

void px_aclwatch_on_reply(px_server *srv, px_req *r, const char *data, size_t len, int lost) {
    struct px_aclwatch *w = srv->aclwatch;
    if (w == NULL) return;
    w->asking = 0;
    if (lost || len == 0) return;
    if (data[0] == '-' || data[0] == '!') {
        if (refusal_is_final(data, len)) {
            stop_checking(w, data, len);
            w->answers++;
        }
        return; /* LOADING, MASTERDOWN...: asked again at the next tick */
    }
    unsigned char md[SHA_DIGEST_LENGTH], dmd[SHA_DIGEST_LENGTH];
    SHA1((const unsigned char *)data, len, md);
    default_user_digest(data, len, dmd);
    /* A password for the default user (or the user turned off) does not
     * log out the connections it is logged in on: those of clients without
     * credentials are replaced, before the cache is emptied. */
    if (w->known && memcmp(dmd, w->default_user, sizeof dmd) != 0) px_pools_default_user_changed(srv);
    /* The first answer too: what the cache took before it, the list it
     * shows may already refuse. Later ones, when the list is another. */
    if (!w->known || memcmp(md, w->digest, sizeof md) != 0) px_caching_acl_changed(srv, !w->known);
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
