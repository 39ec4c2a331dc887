/*
 * tests/integration/fake_resolver.c — an LD_PRELOAD library for
 * test_name_lookup.py: the resolvers a test cannot get from the machine's
 * own (its DNS servers are in /etc/resolv.conf, for every process).
 *
 * - A name ending in ".slow.test" hangs: getaddrinfo() sleeps
 *   SLOW_LOOKUP_MS milliseconds (a DNS server that does not answer), then
 *   answers for 127.0.0.1. Each such call is counted in the file
 *   SLOW_LOOKUP_LOG (one line each), so that the test sees that the proxy
 *   looked the name up.
 * - A name ending in ".file.test" answers what the file FAKE_HOSTS says at
 *   the time of the call: a line "NAME ADDRESS PORT [ADDRESS PORT ...]"
 *   (ports too, so that one name can move between two redis-servers of one
 *   host). A DNS record that changes.
 *
 * AI_NUMERICHOST calls, and every other name, go to the C library's.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int (*getaddrinfo_fn)(const char *, const char *, const struct addrinfo *, struct addrinfo **);

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n > m && strcmp(s + n - m, suffix) == 0;
}

static int slow_lookup(getaddrinfo_fn real, const char *node, const char *service, const struct addrinfo *hints,
                       struct addrinfo **res) {
    const char *ms = getenv("SLOW_LOOKUP_MS"), *log = getenv("SLOW_LOOKUP_LOG");
    long wait = ms != NULL ? atol(ms) : 0;
    if (log != NULL) {
        FILE *f = fopen(log, "a");
        if (f != NULL) {
            fprintf(f, "%s\n", node);
            fclose(f);
        }
    }
    struct timespec ts = {wait / 1000, (wait % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
    return real("127.0.0.1", service, hints, res);
}

/* NAME's line of FAKE_HOSTS, its addresses chained in order. */
static int file_lookup(getaddrinfo_fn real, const char *node, struct addrinfo **res) {
    const char *path = getenv("FAKE_HOSTS");
    FILE *f = path != NULL ? fopen(path, "r") : NULL;
    if (f == NULL) return EAI_NONAME;
    char line[1024];
    struct addrinfo *head = NULL, **tail = &head;
    while (head == NULL && fgets(line, sizeof line, f) != NULL) {
        char *save = NULL, *name = strtok_r(line, " \t\n", &save);
        if (name == NULL || strcmp(name, node) != 0) continue;
        char *addr, *port;
        while ((addr = strtok_r(NULL, " \t\n", &save)) != NULL && (port = strtok_r(NULL, " \t\n", &save)) != NULL) {
            struct addrinfo h = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
            struct addrinfo *one = NULL;
            if (real(addr, port, &h, &one) != 0) continue;
            *tail = one;
            while (*tail != NULL) tail = &(*tail)->ai_next;
        }
    }
    fclose(f);
    *res = head;
    return head != NULL ? 0 : EAI_NONAME;
}

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res) {
    getaddrinfo_fn real = (getaddrinfo_fn)dlsym(RTLD_NEXT, "getaddrinfo");
    /* AI_NUMERICHOST asks no resolver: it fails at once for a name */
    int numeric = hints != NULL && (hints->ai_flags & AI_NUMERICHOST) != 0;
    if (numeric || node == NULL) return real(node, service, hints, res);
    if (ends_with(node, ".slow.test")) return slow_lookup(real, node, service, hints, res);
    if (ends_with(node, ".file.test")) return file_lookup(real, node, res);
    return real(node, service, hints, res);
}
