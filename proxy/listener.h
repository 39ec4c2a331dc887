/*
 * proxy/listener.h — the sockets clients connect to: TCP addresses from
 * `bind`/`port` and the `unixsocket`. Accepted sockets become px_clients;
 * past `maxclients` a client gets Redis's own error and is closed. Out of
 * file descriptors, all listeners pause for a moment instead of failing
 * accept() in a busy loop (listener.c, "Accept errors").
 */
#ifndef SIDECACHE_PROXY_LISTENER_H
#define SIDECACHE_PROXY_LISTENER_H

#include "proxy/server.h"

/* Opens every configured listener. Returns 0, or -1 after logging why; an
 * existing unixsocket path is replaced only when it is a stale socket (one a
 * running process accepts on, or a file that is not a socket, fails the start). */
int px_listeners_open(px_server *srv);
/* Stops accepting (graceful stop) and frees the listeners. */
void px_listeners_close(px_server *srv);

#endif
