/*
 * proxy/listener.c — see listener.h.
 */
#include "proxy/listener.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "proxy/client.h"
#include "proxy/log.h"
#include "proxy/sockopt.h"

static void describe(const struct sockaddr *sa, char *buf, size_t n) {
    char host[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        snprintf(buf, n, "%s:%d", host, ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
        snprintf(buf, n, "[%s]:%d", host, ntohs(in6->sin6_port));
    } else {
        snprintf(buf, n, "unix");
    }
}

static void accept_client(px_server *srv, evutil_socket_t fd, struct sockaddr *sa, int tls) {
    char addr[64];
    describe(sa, addr, sizeof addr);
    if (srv->stopping) {
        evutil_closesocket(fd);
        return;
    }
    if (srv->nclients >= srv->cfg->maxclients) {
        static const char msg[] = "-ERR max number of clients reached\r\n";
        ssize_t w = write(fd, msg, sizeof msg - 1);
        (void)w;
        evutil_closesocket(fd);
        px_warning("client refused addr=%s reason=maxclients", addr);
        return;
    }
    evutil_make_socket_nonblocking(fd);
    if (sa->sa_family != AF_UNIX) {
        int one = 1;
        if (srv->cfg->tcp_nodelay) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        px_socket_keepalive(fd, srv->cfg->tcp_keepalive);
    }
    px_client_new(srv, fd, addr, tls);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg) {
    accept_client(arg, fd, sa, 0);
}

static void on_accept_tls(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg) {
    accept_client(arg, fd, sa, 1);
}

/*
 * Accept errors. Out of descriptors (EMFILE, ENFILE) or of kernel memory
 * (ENOBUFS, ENOMEM), accept() fails again at once for as long as a client
 * waits in the backlog, and libevent, which calls back for each failure,
 * would spin on it. So every listener stops (the shortage is the whole
 * process's) and starts again after PX_ACCEPT_PAUSE_MS, time for clients to
 * close and free some; the waiting clients are accepted then. Other errors
 * (EPERM from a firewall rule, EPROTO...) concern one connection: accepting
 * goes on. Either way the log gets one line a second at most, with the
 * count of the errors it did not show.
 */
#define PX_ACCEPT_PAUSE_MS 100
#define PX_ACCEPT_LOG_EVERY_MS 1000

static int out_of_resources(int err) {
    return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

static void pause_accepting(px_server *srv) {
    if (evtimer_pending(srv->accept_resume_ev, NULL)) return;
    for (int i = 0; i < srv->nlisteners; i++) evconnlistener_disable(srv->listeners[i]);
    struct timeval pause = {0, PX_ACCEPT_PAUSE_MS * 1000};
    evtimer_add(srv->accept_resume_ev, &pause);
}

static void resume_accepting(evutil_socket_t fd, short what, void *arg) {
    px_server *srv = arg;
    for (int i = 0; i < srv->nlisteners; i++) evconnlistener_enable(srv->listeners[i]);
}

static void log_accept_error(px_server *srv, int err, int paused) {
    int64_t now = px_now_ms();
    if (now < srv->accept_log_next_ms) {
        srv->accept_errors_unlogged++;
        return;
    }
    px_warning("accept failed err=\"%s\" paused_ms=%d suppressed=%llu", strerror(err),
               paused ? PX_ACCEPT_PAUSE_MS : 0, (unsigned long long)srv->accept_errors_unlogged);
    srv->accept_errors_unlogged = 0;
    srv->accept_log_next_ms = now + PX_ACCEPT_LOG_EVERY_MS;
}

static void on_accept_error(struct evconnlistener *l, void *arg) {
    px_server *srv = arg;
    int err = EVUTIL_SOCKET_ERROR(); /* accept()'s: libevent calls here right after it */
    int pause = out_of_resources(err);
    if (pause) pause_accepting(srv);
    log_accept_error(srv, err, pause);
}

static int add_listener(px_server *srv, struct evconnlistener *l, const char *what) {
    if (l == NULL) {
        px_error("cannot listen addr=%s err=\"%s\"", what, strerror(errno));
        return -1;
    }
    evconnlistener_set_error_cb(l, on_accept_error);
    srv->listeners[srv->nlisteners++] = l;
    px_notice("listening addr=%s", what);
    return 0;
}

/* Makes room at path for the unix socket: only a stale socket of an earlier
 * run, which nobody accepts on, is removed. Returns 0, or -1 after logging
 * why the path is not ours to take: a socket another process accepts on (a
 * second sidecache with the same config would cut every client of the first
 * off) or a file that is not a socket (a typo must not delete it). */
static int clear_stale_unixsocket(const char *path) {
    struct stat st;
    struct sockaddr_un sun;
    int fd, rc, err;

    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return 0;
        px_error("cannot listen addr=%s err=\"%s\"", path, strerror(errno));
        return -1;
    }
    if (!S_ISSOCK(st.st_mode)) {
        px_error("cannot listen addr=%s err=\"exists and is not a socket (left as it is)\"", path);
        return -1;
    }
    memset(&sun, 0, sizeof sun);
    sun.sun_family = AF_UNIX;
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
    /* non-blocking: a live listener with a full backlog answers EAGAIN at
     * once instead of keeping the start waiting */
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        px_error("cannot listen addr=%s err=\"%s\"", path, strerror(errno));
        return -1;
    }
    rc = connect(fd, (struct sockaddr *)&sun, sizeof sun);
    err = errno;
    close(fd);
    if (rc != 0 && err == ECONNREFUSED) {
        unlink(path);
        return 0;
    }
    if (rc != 0 && err == ENOENT) return 0; /* removed meanwhile */
    if (rc == 0 || err == EAGAIN || err == EINPROGRESS)
        px_error("cannot listen addr=%s err=\"unix socket in use: another process accepts on it\"",
                   path);
    else
        px_error("cannot listen addr=%s err=\"cannot tell whether the socket is in use: %s\"", path,
                   strerror(err));
    return -1;
}

int px_listeners_open(px_server *srv) {
    px_config *cfg = srv->cfg;
    srv->accept_resume_ev = evtimer_new(srv->base, resume_accepting, srv);
    if (srv->accept_resume_ev == NULL) {
        px_error("cannot create the accept timer");
        return -1;
    }
    unsigned flags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC;
    for (int tls = 0; tls <= 1; tls++) {
        int port = tls ? cfg->tls_port : cfg->port;
        if (port <= 0) continue;
        for (int i = 0; i < cfg->nbind; i++) {
            char portstr[16], what[300];
            struct addrinfo hints, *res = NULL;
            memset(&hints, 0, sizeof hints);
            hints.ai_family = AF_UNSPEC;
            hints.ai_socktype = SOCK_STREAM;
            hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST;
            snprintf(portstr, sizeof portstr, "%d", port);
            const char *host = cfg->bind[i];
            if (host[0] == '*') host = NULL;
            int rc = getaddrinfo(host, portstr, &hints, &res);
            if (rc != 0) {
                px_error("cannot listen addr=%s:%d err=\"%s\"", cfg->bind[i], port, gai_strerror(rc));
                return -1;
            }
            snprintf(what, sizeof what, "%s:%d%s", cfg->bind[i], port, tls ? " (tls)" : "");
            struct evconnlistener *l = evconnlistener_new_bind(srv->base, tls ? on_accept_tls : on_accept, srv, flags,
                                                               511, res->ai_addr, (int)res->ai_addrlen);
            freeaddrinfo(res);
            if (add_listener(srv, l, what) != 0) return -1;
        }
    }
    if (cfg->unixsocket[0] != '\0') {
        struct sockaddr_un sun;
        memset(&sun, 0, sizeof sun);
        sun.sun_family = AF_UNIX;
        snprintf(sun.sun_path, sizeof sun.sun_path, "%s", cfg->unixsocket);
        if (clear_stale_unixsocket(cfg->unixsocket) != 0) return -1;
        struct evconnlistener *l = evconnlistener_new_bind(srv->base, on_accept, srv,
                                                           LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 511,
                                                           (struct sockaddr *)&sun, sizeof sun);
        if (add_listener(srv, l, cfg->unixsocket) != 0) return -1;
        srv->unixsocket_bound = 1;
        if (cfg->unixsocketperm != 0 && chmod(cfg->unixsocket, (mode_t)cfg->unixsocketperm) != 0) {
            px_error("cannot chmod unixsocket path=%s err=\"%s\"", cfg->unixsocket, strerror(errno));
            return -1;
        }
    }
    if (srv->nlisteners == 0) {
        px_error("nothing to listen on: set port or unixsocket");
        return -1;
    }
    return 0;
}

void px_listeners_close(px_server *srv) {
    for (int i = 0; i < srv->nlisteners; i++) evconnlistener_free(srv->listeners[i]);
    srv->nlisteners = 0;
    if (srv->accept_resume_ev != NULL) event_free(srv->accept_resume_ev);
    srv->accept_resume_ev = NULL;
    /* only our own socket: a start that failed (its TCP port, or the path,
     * taken by another instance) must not remove that instance's */
    if (srv->unixsocket_bound) unlink(srv->cfg->unixsocket);
    srv->unixsocket_bound = 0;
}
