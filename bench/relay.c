/*
 * bench/relay.c — the cheapest hop: a TCP relay that forwards bytes and
 * does nothing else (no parsing, no cache, no answers of its own).
 *
 * It measures what one more process between a client and Redis costs on
 * a machine, apart from anything a proxy does: put it where sidecache
 * would be, and the time through it over the time direct is the floor no
 * proxy that forwards every round trip can go below (bench/batch_unlink.sh,
 * RELAY=1). sidecache can go below it only where it saves round trips.
 *
 *   relay --port P --upstream-port U     (both on 127.0.0.1)
 *
 * One thread, epoll, non-blocking sockets with TCP_NODELAY (as sidecache
 * sets them): each read is written on at once; what the other side does
 * not take yet waits in a 256 KB buffer per direction, and reading that
 * direction pauses until it is written.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF_SIZE (256 * 1024)

/* One direction: bytes read from `from`, not yet written to `to`. */
struct pipe_dir {
    int from, to;
    size_t off, len;
    char buf[BUF_SIZE];
};

/* A client connection and its upstream connection. Each epoll entry points
 * at the end it is for (end 0: the client's socket, 1: upstream's). */
struct pair {
    struct pipe_dir dir[2]; /* 0: client -> upstream, 1: upstream -> client */
    struct end {
        struct pair *pair;
        int side;
    } ends[2];
    int fd[2];
    unsigned events[2]; /* what epoll watches on each socket now */
};

static int ep;

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void tune(int fd) {
    int one = 1;
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) die("fcntl");
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* What side's socket waits for: input while its outgoing direction's buffer
 * is empty, and writability while the incoming one has bytes left. Changed
 * only when it changes: a system call per event would be work a relay
 * need not do. */
static void watch_end(struct pair *p, int side, int op) {
    struct epoll_event ev = {0};
    if (p->dir[side].len == 0) ev.events |= EPOLLIN;
    if (p->dir[!side].len > 0) ev.events |= EPOLLOUT;
    if (op == EPOLL_CTL_MOD && ev.events == p->events[side]) return;
    p->events[side] = ev.events;
    ev.data.ptr = &p->ends[side];
    if (epoll_ctl(ep, op, p->fd[side], &ev) != 0) die("epoll_ctl");
}

static void close_pair(struct pair *p) {
    close(p->fd[0]);
    close(p->fd[1]);
    free(p);
}

/* Writes what d holds. Returns 0, or -1 when the connection is gone. */
static int flush_dir(struct pipe_dir *d) {
    while (d->len > 0) {
        ssize_t n = write(d->to, d->buf + d->off, d->len);
        if (n < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
        d->off += (size_t)n;
        d->len -= (size_t)n;
    }
    d->off = 0;
    return 0;
}

/* Reads what the socket of `side` has (one read: epoll reports the rest)
 * and writes it on. Returns -1 when the connection is gone. */
static int pump(struct pair *p, int side) {
    struct pipe_dir *d = &p->dir[side];
    if (d->len > 0) return 0;
    ssize_t n = read(d->from, d->buf, sizeof d->buf);
    if (n == 0) return -1;
    if (n < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
    d->len = (size_t)n;
    return flush_dir(d);
}

static void accept_one(int lfd, const struct sockaddr_in *up) {
    int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (cfd < 0) return;
    int ufd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (ufd < 0 || connect(ufd, (const struct sockaddr *)up, sizeof *up) != 0) {
        perror("relay: connect upstream");
        close(cfd);
        if (ufd >= 0) close(ufd);
        return;
    }
    tune(cfd);
    tune(ufd);
    struct pair *p = calloc(1, sizeof *p);
    if (p == NULL) die("calloc");
    p->fd[0] = cfd;
    p->fd[1] = ufd;
    for (int s = 0; s < 2; s++) {
        p->ends[s] = (struct end){p, s};
        p->dir[s].from = p->fd[s];
        p->dir[s].to = p->fd[!s];
    }
    watch_end(p, 0, EPOLL_CTL_ADD);
    watch_end(p, 1, EPOLL_CTL_ADD);
}

int main(int argc, char **argv) {
    int port = 0, up_port = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--port") == 0) port = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--upstream-port") == 0) up_port = atoi(argv[i + 1]);
    }
    if (port <= 0 || up_port <= 0) {
        fprintf(stderr, "usage: relay --port P --upstream-port U\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct sockaddr_in up = {.sin_family = AF_INET, .sin_port = htons((uint16_t)up_port)};
    addr.sin_addr.s_addr = up.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0) die("socket");
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(lfd, 128) != 0) die("bind/listen");
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1");
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev) != 0) die("epoll_ctl");

    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(ep, evs, 64, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) die("epoll_wait");
        for (int i = 0; i < n; i++) {
            struct end *e = evs[i].data.ptr;
            if (e == NULL) {
                accept_one(lfd, &up);
                continue;
            }
            struct pair *p = e->pair;
            int side = e->side, gone = 0;
            /* bytes waiting for this socket first, then its input */
            if (evs[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) gone = flush_dir(&p->dir[!side]) != 0;
            if (!gone && (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))) gone = pump(p, side) != 0;
            if (gone) {
                close_pair(p);
                /* a later event of this batch may point at the freed pair:
                 * leave the batch (epoll is level-triggered: the other
                 * sockets' events come again) */
                break;
            }
            watch_end(p, 0, EPOLL_CTL_MOD);
            watch_end(p, 1, EPOLL_CTL_MOD);
        }
    }
}
