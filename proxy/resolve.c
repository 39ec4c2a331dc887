/*
 * proxy/resolve.c — see resolve.h.
 *
 * One record per name (host and port), on a list that the event loop and
 * the lookup threads share under one mutex. A lookup thread only ever
 * writes its own record's answer, under the mutex, and touches nothing
 * after it cleared `running`: the event loop frees a record, and only one
 * with no lookup running.
 */
#include "proxy/resolve.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct addrs {
    int n;
    struct sockaddr_storage sa[PX_RESOLVE_MAX_ADDRS];
    unsigned len[PX_RESOLVE_MAX_ADDRS];
};

struct lookup {
    struct lookup *next;
    char host[256];
    char port[16];
    int64_t asked_ms;   /* the last call for it */
    int running;        /* a thread looks it up; cleared by that thread */
    int64_t started_ms; /* ... since */
    /* the newest answer, written by the thread */
    int done;           /* a lookup ended */
    int64_t done_ms;
    int rc;             /* its getaddrinfo's */
    int have;           /* addresses are held: a failed lookup keeps them */
    struct addrs a;
    int cursor;         /* the address given (px_resolve_failed moves it) */
    int expired;        /* asked again at the next call */
};

static pthread_mutex_t lookups_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t lookup_done; /* on CLOCK_MONOTONIC, made once */
static pthread_once_t lookup_done_once = PTHREAD_ONCE_INIT;
static struct lookup *lookups;
static int running;
static int wait_ms = PX_RESOLVE_WAIT_MS, fresh_ms = PX_RESOLVE_FRESH_MS, forget_ms = PX_RESOLVE_FORGET_MS;
/* the loop's waits in the current second */
static int64_t budget_from_ms, budget_used_ms;

/* Not px_now_ms: that may read CLOCK_BOOTTIME, and the wait's deadline
 * must be on the clock of lookup_done. */
static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void make_cond(void) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&lookup_done, &attr);
    pthread_condattr_destroy(&attr);
}

static int lookup_addrinfo(const char *host, const char *port, int flags, struct addrs *out) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = flags;
    int rc = getaddrinfo(host, port, &hints, &res);
    out->n = 0;
    for (struct addrinfo *ai = rc == 0 ? res : NULL; ai != NULL && out->n < PX_RESOLVE_MAX_ADDRS; ai = ai->ai_next) {
        if (ai->ai_addrlen > sizeof out->sa[0]) continue;
        memcpy(&out->sa[out->n], ai->ai_addr, ai->ai_addrlen);
        out->len[out->n++] = (unsigned)ai->ai_addrlen;
    }
    if (rc == 0 && out->n == 0) rc = EAI_FAIL;
    if (res != NULL) freeaddrinfo(res);
    return rc;
}

static int same_addr(const struct sockaddr_storage *a, unsigned alen, const struct sockaddr_storage *b, unsigned blen) {
    return alen == blen && memcmp(a, b, alen) == 0;
}

static int same_addrs(const struct addrs *x, const struct addrs *y) {
    if (x->n != y->n) return 0;
    for (int i = 0; i < x->n; i++)
        if (!same_addr(&x->sa[i], x->len[i], &y->sa[i], y->len[i])) return 0;
    return 1;
}

static void *lookup_run(void *arg) {
    struct lookup *l = arg;
    struct addrs a;
    int rc = lookup_addrinfo(l->host, l->port, 0, &a);
    pthread_mutex_lock(&lookups_mu);
    l->rc = rc;
    l->done = 1;
    l->done_ms = mono_ms();
    l->expired = 0;
    if (rc == 0) {
        /* the same answer again keeps its place among the addresses */
        if (!l->have || !same_addrs(&l->a, &a)) l->cursor = 0;
        l->a = a;
        l->have = 1;
    }
    l->running = 0;
    running--;
    pthread_cond_broadcast(&lookup_done);
    pthread_mutex_unlock(&lookups_mu);
    return NULL;
}

static struct lookup *find(const char *host, const char *port) {
    for (struct lookup *l = lookups; l != NULL; l = l->next)
        if (strcmp(l->host, host) == 0 && strcmp(l->port, port) == 0) return l;
    return NULL;
}

/* Forgets the names nobody asked for in forget_ms (none being looked up). */
static void sweep(int64_t now) {
    for (struct lookup **pp = &lookups; *pp != NULL;) {
        struct lookup *l = *pp;
        if (!l->running && now - l->asked_ms > forget_ms) {
            *pp = l->next;
            free(l);
        } else {
            pp = &l->next;
        }
    }
}

/* host:port's record, made if new (NULL: out of memory, or the name too long). */
static struct lookup *record(const char *host, const char *port, int64_t now) {
    sweep(now);
    struct lookup *l = find(host, port);
    if (l == NULL && strlen(host) < sizeof l->host && (l = calloc(1, sizeof *l)) != NULL) {
        snprintf(l->host, sizeof l->host, "%s", host);
        snprintf(l->port, sizeof l->port, "%s", port);
        l->next = lookups;
        lookups = l;
    }
    if (l != NULL) l->asked_ms = now;
    return l;
}

/* An answer came fresh_ms ago at most. */
static int young(const struct lookup *l, int64_t now) { return l->done && now - l->done_ms <= fresh_ms; }

/* ... and nothing asked for it to be looked up again. */
static int fresh(const struct lookup *l, int64_t now) { return young(l, now) && !l->expired; }

/* Starts a lookup of l; -1 (why set) when it cannot. */
static int start(struct lookup *l, char *why, size_t whylen) {
    if (running >= PX_RESOLVE_MAX_RUNNING) {
        snprintf(why, whylen, "%d name lookups already running, none answered yet", running);
        return -1;
    }
    pthread_attr_t attr;
    pthread_t t;
    int rc = pthread_attr_init(&attr);
    if (rc == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        l->running = 1; /* before the thread can clear it */
        rc = pthread_create(&t, &attr, lookup_run, l);
        pthread_attr_destroy(&attr);
    }
    if (rc != 0) {
        l->running = 0;
        snprintf(why, whylen, "cannot start a name lookup: %s", strerror(rc));
        return -1;
    }
    l->started_ms = mono_ms();
    running++;
    return 0;
}

/* A lookup from /etc/hosts or a local cache takes well under this: even
 * with the second's budget spent, it is waited for. */
#define GRACE_MS 2

/* Waits for l's lookup, within what is left of this second's budget. */
static void wait_for(struct lookup *l) {
    int64_t now = mono_ms();
    if (now - budget_from_ms >= 1000) budget_from_ms = now, budget_used_ms = 0;
    int64_t left = wait_ms - budget_used_ms;
    int64_t deadline = now + (left > GRACE_MS ? left : GRACE_MS);
    struct timespec until = {(time_t)(deadline / 1000), (long)(deadline % 1000) * 1000000L};
    while (l->running && pthread_cond_timedwait(&lookup_done, &lookups_mu, &until) != ETIMEDOUT) {
    }
    budget_used_ms += mono_ms() - now;
}

static void give(const struct lookup *l, struct sockaddr_storage *sa, unsigned *salen) {
    int i = l->cursor < l->a.n ? l->cursor : 0;
    memcpy(sa, &l->a.sa[i], l->a.len[i]);
    *salen = l->a.len[i];
}

int px_resolve(const char *host, int port, struct sockaddr_storage *sa, unsigned *salen, char *why, size_t whylen) {
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    /* an address needs no resolver */
    struct addrs a;
    int rc = lookup_addrinfo(host, portstr, AI_NUMERICHOST | AI_NUMERICSERV, &a);
    if (rc == 0) {
        memcpy(sa, &a.sa[0], a.len[0]);
        *salen = a.len[0];
        return 0;
    }
    if (rc != EAI_NONAME) {
        snprintf(why, whylen, "%s: %s", host, gai_strerror(rc));
        return -1;
    }

    pthread_once(&lookup_done_once, make_cond);
    pthread_mutex_lock(&lookups_mu);
    int64_t now = mono_ms();
    struct lookup *l = record(host, portstr, now);
    if (l == NULL) {
        snprintf(why, whylen, "looking up %.200s: out of memory or name too long", host);
        pthread_mutex_unlock(&lookups_mu);
        return -1;
    }
    if (!fresh(l, now)) {
        char cause[200] = "";
        if (!l->running && start(l, cause, sizeof cause) != 0 && !l->have) {
            snprintf(why, whylen, "looking up %s: %s", host, cause);
            pthread_mutex_unlock(&lookups_mu);
            return -1;
        }
        /* a stale answer is given at once while its successor is looked
         * up (a hanging resolver would cost each call the wait); one that
         * was expired (its addresses failed, a READONLY) is not */
        if (l->running && (!l->have || l->expired)) wait_for(l);
    }
    rc = 0;
    if (l->have) {
        /* the newest addresses, even when the lookup of a newer answer
         * failed or is still running */
        give(l, sa, salen);
    } else if (l->running) {
        snprintf(why, whylen, "looking up %s: no answer yet after %lld ms", host,
                 (long long)(mono_ms() - l->started_ms));
        rc = -1;
    } else {
        snprintf(why, whylen, "looking up %s: %s", host, gai_strerror(l->rc));
        rc = -1;
    }
    pthread_mutex_unlock(&lookups_mu);
    return rc;
}

void px_resolve_failed(const char *host, int port, const struct sockaddr_storage *sa, unsigned salen) {
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    pthread_mutex_lock(&lookups_mu);
    struct lookup *l = find(host, portstr);
    if (l != NULL && l->have && l->cursor < l->a.n && same_addr(&l->a.sa[l->cursor], l->a.len[l->cursor], sa, salen)) {
        if (++l->cursor >= l->a.n) {
            /* each address failed: the name may point elsewhere now */
            l->cursor = 0;
            l->expired = 1;
        }
    }
    pthread_mutex_unlock(&lookups_mu);
}

int px_resolve_moved(const char *host, int port, const struct sockaddr_storage *sa, unsigned salen,
                     struct sockaddr_storage *to, unsigned *tolen) {
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    struct addrs a;
    if (lookup_addrinfo(host, portstr, AI_NUMERICHOST | AI_NUMERICSERV, &a) == 0) return 0; /* an address */
    pthread_once(&lookup_done_once, make_cond);
    pthread_mutex_lock(&lookups_mu);
    int64_t now = mono_ms();
    int moved = 0;
    char why[200];
    struct lookup *l = record(host, portstr, now);
    if (l != NULL && !fresh(l, now) && !l->running) start(l, why, sizeof why);
    /* an expired answer is still judged (READONLYs expire it many times a
     * second: the check would never see one), a stale one is not */
    if (l != NULL && young(l, now) && l->rc == 0) {
        moved = 1;
        for (int i = 0; i < l->a.n && moved; i++)
            if (same_addr(&l->a.sa[i], l->a.len[i], sa, salen)) moved = 0;
        if (moved) {
            l->cursor = 0;
            give(l, to, tolen);
        }
    }
    pthread_mutex_unlock(&lookups_mu);
    return moved;
}

void px_resolve_expire(const char *host, int port) {
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    pthread_mutex_lock(&lookups_mu);
    struct lookup *l = find(host, portstr);
    if (l != NULL) l->expired = 1;
    pthread_mutex_unlock(&lookups_mu);
}

void px_resolve_set_limits(int wait, int fresh_for, int forget_after) {
    pthread_mutex_lock(&lookups_mu);
    if (wait > 0) wait_ms = wait;
    if (fresh_for > 0) fresh_ms = fresh_for;
    if (forget_after > 0) forget_ms = forget_after;
    budget_from_ms = budget_used_ms = 0;
    pthread_mutex_unlock(&lookups_mu);
}

int px_resolve_names_held(void) {
    pthread_mutex_lock(&lookups_mu);
    int n = 0;
    for (const struct lookup *l = lookups; l != NULL; l = l->next) n++;
    pthread_mutex_unlock(&lookups_mu);
    return n;
}
