/*
 * tests/integration/slow_getaddrinfo.c — an LD_PRELOAD library for
 * test_name_lookup.py: a resolver that hangs, which a test cannot get from
 * the machine's own (its DNS servers are in /etc/resolv.conf, for every
 * process). getaddrinfo() of a name ending in ".slow.test" sleeps
 * SLOW_LOOKUP_MS milliseconds (a DNS server that does not answer), then
 * answers for 127.0.0.1 (unless AI_NUMERICHOST says not to resolve);
 * every other call goes to the C library's.
 * Each slow call is counted in the file SLOW_LOOKUP_LOG (one line each), so
 * that the test sees that the proxy looked the name up.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int (*getaddrinfo_fn)(const char *, const char *, const struct addrinfo *, struct addrinfo **);

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res) {
    static const char suffix[] = ".slow.test";
    getaddrinfo_fn real = (getaddrinfo_fn)dlsym(RTLD_NEXT, "getaddrinfo");
    size_t n = node != NULL ? strlen(node) : 0;
    /* AI_NUMERICHOST asks no resolver: it fails at once for a name */
    int numeric = hints != NULL && (hints->ai_flags & AI_NUMERICHOST) != 0;
    if (!numeric && n > sizeof suffix - 1 && strcmp(node + n - (sizeof suffix - 1), suffix) == 0) {
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
        node = "127.0.0.1";
    }
    return real(node, service, hints, res);
}
