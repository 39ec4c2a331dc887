/*
 * proxy/resolve.h — host names to socket addresses, without holding the
 * event loop for as long as the resolver takes.
 *
 * getaddrinfo() has no timeout of its own: with a DNS server that does not
 * answer (a partition, a node whose resolver is down) it returns after the
 * resolver's timeouts and retries, and every search domain of resolv.conf
 * again (in a Kubernetes pod, ndots:5 and three search domains: several
 * times 5 s). Called on the proxy's one thread, that would stop everything
 * for that long: the clients' replies, INFO, /metrics, the keep-alive of the
 * invalidation connection, and the accept of a liveness probe. So a name is
 * looked up on a thread of its own, and the caller waits for it at most
 * PX_RESOLVE_WAIT_MS. A lookup that takes longer fails that attempt (the
 * caller backs off and tries again, as after a refused connect) and runs
 * on; the next attempt for the same name takes its answer if it came in the
 * meantime, or fails at once while it is still running. Numeric addresses
 * (what tests and most configurations give) never start a thread.
 */
#ifndef SIDECACHE_PROXY_RESOLVE_H
#define SIDECACHE_PROXY_RESOLVE_H

#include <stddef.h>
#include <sys/socket.h>

/* The longest the event loop waits for a lookup it has just started.
 * Resolvers answer in well under a millisecond from /etc/hosts or a local
 * cache, in a few milliseconds from a cluster's DNS. */
#define PX_RESOLVE_WAIT_MS 100

/* An answer that came after its caller gave up is taken by the next attempt
 * for the same name only while it is this young: the name may point
 * elsewhere by now. */
#define PX_RESOLVE_KEEP_MS 5000

/* Lookups running at once, at most (one per name). */
#define PX_RESOLVE_MAX_RUNNING 16

/* host ("name", "1.2.3.4" or "::1", no brackets) and port as a socket
 * address (the first getaddrinfo gives, any family, TCP). Returns 0, or -1
 * with a reason in why. Waits at most PX_RESOLVE_WAIT_MS. */
int px_resolve(const char *host, int port, struct sockaddr_storage *sa, unsigned *salen, char *why, size_t whylen);

#endif
