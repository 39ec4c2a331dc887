/*
 * proxy/sockopt.h — the sockets sidecache opens towards Redis, and options
 * of the TCP sockets it keeps open: towards its clients, and towards Redis
 * (the data connections and the invalidation connection alike). Kept apart
 * from proxy/io.h so that invalidation/ can use it without the server's
 * types.
 */
#ifndef SIDECACHE_PROXY_SOCKOPT_H
#define SIDECACHE_PROXY_SOCKOPT_H

#include <sys/socket.h>

/*
 * A non-blocking socket whose connect to addr has begun (or is done, as a
 * unix socket's may be): its fd, or -1 with errno when socket() failed or
 * the connect failed at once (a unix socket nobody accepts on).
 */
int px_socket_connect(const struct sockaddr *addr, socklen_t len);

/*
 * TCP keepalive on fd (the `tcp-keepalive` directive): the first probe after
 * `seconds` of silence, then one every seconds/3 (at least 1), three in all,
 * so that a peer gone without a reset (power loss, partition) is noticed in
 * about twice `seconds` even by a connection that waits for ever (BLPOP 0,
 * SUBSCRIBE). 0 leaves it off. Failures are ignored: the socket works
 * without it.
 */
void px_socket_keepalive(int fd, int seconds);

#endif
