/*
 * proxy/resolve.c — see resolve.h.
 *
 * One record per name being looked up (host and port), on a list that the
 * event loop and the lookup threads share under one mutex. A lookup thread
 * only ever writes its own record's answer and `done`, under the mutex,
 * and touches nothing after: the event loop frees a record, and only once
 * it is done (or never started).
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

struct lookup {
    struct lookup *next;
    char host[256];
    char port[16];
    int64_t started_ms;
    /* written by the lookup thread, read once done is set */
    int done;
    int64_t done_ms;
    int rc; /* getaddrinfo's */
    struct sockaddr_storage sa;
    unsigned salen;
};

static pthread_mutex_t lookups_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t lookup_done; /* on CLOCK_MONOTONIC, made once */
static pthread_once_t lookup_done_once = PTHREAD_ONCE_INIT;
static struct lookup *lookups;
static int running;

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

static int lookup_addrinfo(const char *host, const char *port, int flags, struct sockaddr_storage *sa,
                           unsigned *salen) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = flags;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc == 0 && (res == NULL || res->ai_addrlen > sizeof *sa)) rc = EAI_FAIL;
    if (rc == 0) {
        memcpy(sa, res->ai_addr, res->ai_addrlen);
        *salen = (unsigned)res->ai_addrlen;
    }
    if (res != NULL) freeaddrinfo(res);
    return rc;
}

static void *lookup_run(void *arg) {
    struct lookup *l = arg;
    struct sockaddr_storage sa;
    unsigned salen = 0;
    int rc = lookup_addrinfo(l->host, l->port, 0, &sa, &salen);
    pthread_mutex_lock(&lookups_mu);
    l->rc = rc;
    l->sa = sa;
    l->salen = salen;
    l->done_ms = mono_ms();
    l->done = 1;
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

static void unlink_free(struct lookup *l) {
    for (struct lookup **pp = &lookups; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    }
    free(l);
}

/* A done lookup's answer, as px_resolve returns it; frees the record. */
static int take(struct lookup *l, struct sockaddr_storage *sa, unsigned *salen, char *why, size_t whylen) {
    int rc = l->rc;
    if (rc == 0) {
        memcpy(sa, &l->sa, l->salen);
        *salen = l->salen;
    } else {
        snprintf(why, whylen, "%s", gai_strerror(rc));
    }
    unlink_free(l);
    return rc == 0 ? 0 : -1;
}

/* Starts the lookup of host:port; NULL (why set) when it cannot. */
static struct lookup *start(const char *host, const char *port, char *why, size_t whylen) {
    if (running >= PX_RESOLVE_MAX_RUNNING) {
        snprintf(why, whylen, "%d name lookups already running, none answered yet", running);
        return NULL;
    }
    struct lookup *l = calloc(1, sizeof *l);
    if (l == NULL) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    snprintf(l->host, sizeof l->host, "%s", host);
    snprintf(l->port, sizeof l->port, "%s", port);
    l->started_ms = mono_ms();
    pthread_attr_t attr;
    pthread_t t;
    int rc = pthread_attr_init(&attr);
    if (rc == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&t, &attr, lookup_run, l);
        pthread_attr_destroy(&attr);
    }
    if (rc != 0) {
        snprintf(why, whylen, "cannot start a name lookup: %s", strerror(rc));
        free(l);
        return NULL;
    }
    l->next = lookups;
    lookups = l;
    running++;
    return l;
}

int px_resolve(const char *host, int port, struct sockaddr_storage *sa, unsigned *salen, char *why, size_t whylen) {
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    /* an address needs no resolver */
    int rc = lookup_addrinfo(host, portstr, AI_NUMERICHOST | AI_NUMERICSERV, sa, salen);
    if (rc == 0) return 0;
    if (rc != EAI_NONAME) {
        snprintf(why, whylen, "%s", gai_strerror(rc));
        return -1;
    }

    pthread_once(&lookup_done_once, make_cond);
    pthread_mutex_lock(&lookups_mu);
    int64_t now = mono_ms();
    struct lookup *l = find(host, portstr);
    if (l != NULL && l->done && now - l->done_ms > PX_RESOLVE_KEEP_MS) {
        unlink_free(l); /* too old to trust: asked again */
        l = NULL;
    }
    if (l != NULL && l->done) {
        rc = take(l, sa, salen, why, whylen);
        pthread_mutex_unlock(&lookups_mu);
        return rc;
    }
    if (l != NULL) {
        /* started by an earlier attempt: waiting again would hold the loop
         * once per attempt for as long as the resolver hangs */
        snprintf(why, whylen, "looking up %s: no answer yet after %lld ms", host, (long long)(now - l->started_ms));
        pthread_mutex_unlock(&lookups_mu);
        return -1;
    }
    if ((l = start(host, portstr, why, whylen)) == NULL) {
        pthread_mutex_unlock(&lookups_mu);
        return -1;
    }
    int64_t deadline = now + PX_RESOLVE_WAIT_MS;
    struct timespec until = {(time_t)(deadline / 1000), (long)(deadline % 1000) * 1000000L};
    while (!l->done && pthread_cond_timedwait(&lookup_done, &lookups_mu, &until) != ETIMEDOUT) {
    }
    if (l->done) {
        rc = take(l, sa, salen, why, whylen);
    } else {
        snprintf(why, whylen, "looking up %s: no answer within %d ms (taken by the next attempt when it comes)", host,
                 PX_RESOLVE_WAIT_MS);
        rc = -1;
    }
    pthread_mutex_unlock(&lookups_mu);
    return rc;
}
