/*
 * proxy/tls.h — TLS with OpenSSL, both ways.
 *
 * Towards clients: tls-port listens for TLS clients beside port, with
 * tls-cert-file / tls-key-file; tls-auth-clients (yes by default, as in
 * Redis) requires a client certificate signed by tls-ca-cert-file
 * ("optional": checked when one is sent).
 *
 * Towards Redis: a rediss:// upstream. The server certificate is verified
 * against tls-upstream-ca-cert-file (else the system's CA store) and must
 * name the upstream host (or IP address); the host is sent as SNI when it
 * is a name. tls-upstream-cert-file / -key-file give a client certificate
 * (Redis's tls-auth-clients). Data connections and the invalidation
 * connection both use it.
 *
 * Contexts are made once at start (px_tls_init); a bad file stops the start
 * with OpenSSL's reason. The sockets themselves: proxy/io.c (px_io_start_tls)
 * and invalidation/tracking.c (a bufferevent_openssl).
 */
#ifndef SIDECACHE_PROXY_TLS_H
#define SIDECACHE_PROXY_TLS_H

#include <stddef.h>

#include <openssl/ssl.h>

#include "proxy/server.h"

/* Makes the contexts the configuration asks for. Returns 0, or -1 with a
 * reason in err. */
int px_tls_init(px_server *srv, char *err, size_t errlen);
void px_tls_deinit(px_server *srv);

/* A new TLS session for an accepted client (NULL on error). */
SSL *px_tls_new_server(px_server *srv);
/* A new TLS session towards a Redis named host in its URL (upstream,
 * tracking-upstream): its certificate must name that host (NULL on error). */
SSL *px_tls_new_client(px_server *srv, const char *host);

/* The latest OpenSSL error as text (for logs), or what errno says. */
const char *px_tls_error(char *buf, size_t n);

#endif
