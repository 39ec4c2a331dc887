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
 * looked up on a thread of its own, and the event loop waits for lookups at
 * most PX_RESOLVE_WAIT_MS in any second, however many names it asks for
 * (the sentinels, a cluster's nodes).
 *
 * Every answer is kept: it is given to every caller while it is
 * PX_RESOLVE_FRESH_MS young. Older, the name is looked up again, and until
 * the new answer comes (or when the lookup fails) the old one is given: a
 * resolver that is slow or down stops no connect to an address it gave
 * before. A name asked for by nobody for PX_RESOLVE_FORGET_MS is forgotten.
 *
 * An answer may hold several addresses (IPv6 and IPv4 of "localhost", the A
 * records of a name): the first is given until the caller says it could not
 * connect there (px_resolve_failed), then the next; once each has failed,
 * the name is looked up again. Numeric addresses (what tests and most
 * configurations give) never start a thread.
 */
#ifndef SIDECACHE_PROXY_RESOLVE_H
#define SIDECACHE_PROXY_RESOLVE_H

#include <stddef.h>
#include <sys/socket.h>

/* The longest the event loop waits for lookups in any one second (and
 * 2 ms a lookup once that is spent, at most PX_RESOLVE_MAX_RUNNING times).
 * Resolvers answer in well under a millisecond from /etc/hosts or a local
 * cache, in a few milliseconds from a cluster's DNS. */
#define PX_RESOLVE_WAIT_MS 100

/* An answer younger than this is given without asking again; older, it is
 * asked again (and given until the new answer comes). The upstream's name
 * is checked this often too (px_resolve_moved). */
#define PX_RESOLVE_FRESH_MS 5000

/* A name nobody asked for in this long is forgotten. */
#define PX_RESOLVE_FORGET_MS 60000

/* Lookups running at once, at most (one per name); addresses kept per name. */
#define PX_RESOLVE_MAX_RUNNING 16
#define PX_RESOLVE_MAX_ADDRS 8

/* host ("name", "1.2.3.4" or "::1", no brackets) and port as a socket
 * address (TCP, any family). Returns 0, or -1 with a reason in why. */
int px_resolve(const char *host, int port, struct sockaddr_storage *sa, unsigned *salen, char *why, size_t whylen);

/* A connect to sa, which px_resolve gave for host:port, failed: the next
 * px_resolve gives the name's next address, or, when each has failed,
 * looks the name up again. */
void px_resolve_failed(const char *host, int port, const struct sockaddr_storage *sa, unsigned salen);

/* For a name's periodic check: 1 when its answer, PX_RESOLVE_FRESH_MS
 * young at most, no longer holds sa (the name moved), with the address to
 * use instead in *to; 0 when it still does, or when no fresh answer is in
 * (a lookup is started then, and not waited for: the next call sees it). */
int px_resolve_moved(const char *host, int port, const struct sockaddr_storage *sa, unsigned salen,
                     struct sockaddr_storage *to, unsigned *tolen);

/* The answer for host:port is asked again at the next call (a READONLY
 * from what the name pointed at: it may point elsewhere now). */
void px_resolve_expire(const char *host, int port);

/* For tests: the limits above, in ms (0 leaves one as it is); and how many
 * names are held. */
void px_resolve_set_limits(int wait_ms, int fresh_ms, int forget_ms);
int px_resolve_names_held(void);

#endif
