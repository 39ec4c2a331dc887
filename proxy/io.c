/*
 * proxy/io.c — see io.h.
 */
#include "proxy/io.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "proxy/sockopt.h"

static void io_arm_write(px_io *io) {
    if (!io->want_write && !io->closed) {
        event_add(io->wev, NULL);
        io->want_write = 1;
    }
}

static void io_disarm_write(px_io *io) {
    if (io->want_write) {
        event_del(io->wev);
        io->want_write = 0;
    }
}

static int io_tls_write_now(px_io *io);
static void io_queue_flush(px_io *io);
static void io_drop_ref(px_io *io);

/* Output that could not be stored (no memory) is a hole in the stream:
 * whatever follows would answer the wrong request. The connection goes,
 * from its next write (not from inside the caller's call). */
static void io_lost_output(px_io *io) {
    io->lost_output = 1;
    io_queue_flush(io);
}

/* Output by reference (px_io_write_ref): into out before anything else
 * goes there, or to the socket, and before the input it points into moves. */
static void io_settle(px_io *io) {
    if (io->ref_len == 0) return;
    if (evbuffer_add(io->out, io->ref, io->ref_len) != 0) io_lost_output(io);
    io->ref = NULL;
    io->ref_len = 0;
    io->srv->ref_io = NULL;
}

void px_io_settle(px_server *srv) {
    if (srv->ref_io != NULL) io_settle(srv->ref_io);
}

/* Before a write: a reference with nothing queued before it is written
 * from where it lies (a transaction's block, from the client's input: no
 * copy); what the socket does not take is copied, and an error is left to
 * the write that follows, which meets it again. */
static void io_settle_writing(px_io *io) {
    if (io->ref_len > 0 && io->ssl == NULL && evbuffer_get_length(io->out) == 0 && !io->lost_output) {
        ssize_t n = write(io->fd, io->ref, io->ref_len);
        if (n > 0) {
            io->ref += n;
            io->ref_len -= (size_t)n;
            if (io->ref_len == 0) io->srv->ref_io = NULL;
        }
    }
    io_settle(io);
}

/* A shutdown of writing asked for (px_io_shutdown_write) goes once the
 * output is written and the connection is up. */
static void io_shutdown_if_written(px_io *io) {
    if (io->shutdown_write != 1 || io->closed || io->fd < 0 || io->connecting || px_io_tls_handshaking(io) ||
        px_io_pending(io) > 0)
        return;
    io->shutdown_write = 2;
    if (io->ssl != NULL) {
        SSL_shutdown(io->ssl); /* close_notify, best effort; reading goes on */
        ERR_clear_error();
    } else {
        shutdown(io->fd, SHUT_WR);
    }
}

/* The output is all written: the owner hears of it. */
static void io_drained(px_io *io) {
    if (io->closed) return;
    io_shutdown_if_written(io);
    if (io->ops->on_drain) io->ops->on_drain(io->arg);
}

void px_io_shutdown_write(px_io *io) {
    if (io->shutdown_write == 0) io->shutdown_write = 1;
    io_shutdown_if_written(io);
}

/* Writes what the socket takes. Returns 0, or -1 after reporting an error. */
static int io_write_now(px_io *io) {
    io_settle_writing(io);
    if (io->discard_output) {
        evbuffer_drain(io->out, evbuffer_get_length(io->out));
        io_disarm_write(io);
        io_drained(io);
        return 0;
    }
    if (io->lost_output) {
        io_disarm_write(io);
        io->ops->on_event(io->arg, PX_IO_ERROR, ENOMEM);
        return -1;
    }
    if (io->ssl != NULL) return io_tls_write_now(io);
    while (evbuffer_get_length(io->out) > 0) {
        int n = evbuffer_write(io->out, io->fd);
        if (n > 0) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (errno == EINTR) continue;
            io_arm_write(io);
            return 0;
        }
        int err = n < 0 ? errno : EPIPE;
        io_disarm_write(io);
        io->ops->on_event(io->arg, PX_IO_ERROR, err);
        return -1;
    }
    io_disarm_write(io);
    io_drained(io);
    return 0;
}

static void io_queue_flush(px_io *io) {
    if (io->flush_queued || io->closed || io->connecting) return;
    io->flush_queued = 1;
    io->next_flush = io->srv->flush_list;
    io->srv->flush_list = io;
    event_active(io->srv->flush_ev, EV_TIMEOUT, 0);
}

void px_io_flush_all(px_server *srv) {
    px_io *io;
    while ((io = srv->flush_list) != NULL) {
        srv->flush_list = io->next_flush;
        io->next_flush = NULL;
        io->flush_queued = 0;
        if (!io->closed && !io->want_write) io_write_now(io);
    }
}

/* ------------------------------------------------------------------------ */
/* Input. A read goes into the server's buffer (one for all sockets: the
 * loop runs one callback at a time), and on_read consumes it there, with no
 * allocation and no copy. Only what on_read leaves (the start of a frame
 * whose end has not come, or frames a paused client has not taken) is
 * copied into the io's own buffer, which the next reads extend and which
 * is freed once consumed. So an idle connection holds no input memory, and
 * a 64 KB buffer is not allocated and freed for every read (glibc's free
 * of a chunk that size also consolidates the whole heap's fast bins). */

static void io_drop_own(px_io *io) {
    px_io_settle(io->srv); /* before the input another io may refer to goes */
    if (io->in_buf == io->own) io->in_buf = NULL;
    free(io->own);
    io->own = NULL;
    io->own_cap = 0;
}

/* Makes room for a read of at least PX_IO_READ_CHUNK bytes behind the kept
 * input, moving it into own (grown to twice its size when short, so that a
 * large frame is copied O(1) times per byte); returns where the read goes,
 * or NULL (OOM). The kept input is bounded by its owner (the client's
 * query buffer limit, the reply limits). */
static char *io_own_room(px_io *io) {
    size_t kept = io->in_end - io->in_off;
    px_io_settle(io->srv);
    if (io->in_buf == io->own && io->own_cap - io->in_end >= PX_IO_READ_CHUNK) return io->own + io->in_end;
    if (io->own_cap < kept + PX_IO_READ_CHUNK) {
        size_t cap = io->own_cap * 2 > kept + PX_IO_READ_CHUNK ? io->own_cap * 2 : kept + PX_IO_READ_CHUNK;
        char *b = malloc(cap);
        if (b == NULL) return NULL;
        if (kept > 0) memcpy(b, io->in_buf + io->in_off, kept);
        free(io->own);
        io->own = b;
        io->own_cap = cap;
    } else if (kept > 0 && (io->in_buf != io->own || io->in_off > 0)) {
        memmove(io->own, io->in_buf + io->in_off, kept);
    }
    io->in_buf = io->own;
    io->in_off = 0;
    io->in_end = kept;
    return io->own + kept;
}

/* After on_read: what is left of the input moves out of the shared buffer
 * (a closed io reads no more: its input is dropped). */
static void io_keep_input(px_io *io) {
    px_io_settle(io->srv);
    if (io->closed) io->in_off = io->in_end;
    if (io->in_off == io->in_end) {
        io->in_off = io->in_end = 0;
        io->in_buf = NULL;
        io_drop_own(io);
        return;
    }
    if (io->in_buf == io->srv->io_read_buf && io_own_room(io) == NULL) {
        io->in_off = io->in_end = 0;
        io->in_buf = NULL;
        io->ops->on_event(io->arg, PX_IO_ERROR, ENOMEM);
    }
}

const char *px_io_input(const px_io *io, size_t *len) {
    *len = io->in_end - io->in_off;
    return *len > 0 ? io->in_buf + io->in_off : NULL;
}

size_t px_io_input_len(const px_io *io) { return io->in_end - io->in_off; }

void px_io_consume(px_io *io, size_t n) {
    io->in_off += n <= io->in_end - io->in_off ? n : io->in_end - io->in_off;
}

void px_io_input_done(px_io *io) {
    if (io->in_off != io->in_end || io->own == NULL) return;
    io->in_off = io->in_end = 0;
    io_drop_own(io);
}

/* ------------------------------------------------------------------------ */
/* TLS: the same buffers, through SSL_read/SSL_write. A handshake (or a
 * renegotiation) may make a read wait for writability or a write for
 * readability: the flags remember which, and the other event resumes it. */

static void io_tls_failed(px_io *io, int e) {
    int err = e == SSL_ERROR_SYSCALL && errno != 0 ? errno : EPROTO;
    ERR_clear_error();
    io->ops->on_event(io->arg, PX_IO_ERROR, err);
}

static int io_tls_write_now(px_io *io) {
    while (evbuffer_get_length(io->out) > 0) {
        struct evbuffer_iovec v;
        if (evbuffer_peek(io->out, -1, NULL, &v, 1) < 1) break;
        int len = v.iov_len > (1 << 20) ? 1 << 20 : (int)v.iov_len;
        ERR_clear_error();
        int n = SSL_write(io->ssl, v.iov_base, len);
        if (n > 0) {
            evbuffer_drain(io->out, (size_t)n);
            continue;
        }
        int e = SSL_get_error(io->ssl, n);
        if (e == SSL_ERROR_WANT_WRITE) {
            io_arm_write(io);
            return 0;
        }
        if (e == SSL_ERROR_WANT_READ) {
            /* resumed by the next read event, also while reading is paused */
            io->tls_write_wants_read = 1;
            io_disarm_write(io);
            if (!io->reading && !io->closed) event_add(io->rev, NULL);
            return 0;
        }
        io_disarm_write(io);
        io_tls_failed(io, e);
        return -1;
    }
    io_disarm_write(io);
    io_drained(io);
    return 0;
}

static void io_tls_read(px_io *io) {
    if (io->tls_write_wants_read) {
        io->tls_write_wants_read = 0;
        if (!io->reading) event_del(io->rev);
        if (io_write_now(io) != 0 || io->closed) return;
    }
    if (!io->reading) return;
    int got = 0, eof = 0, e = SSL_ERROR_NONE;
    for (;;) {
        /* TLS reads go to the io's own buffer: a record may leave decrypted
         * bytes inside OpenSSL, read on in this loop */
        char *room = io_own_room(io);
        if (room == NULL) {
            io->ops->on_event(io->arg, PX_IO_ERROR, ENOMEM);
            return;
        }
        size_t want = io->own_cap - io->in_end;
        ERR_clear_error();
        int n = SSL_read(io->ssl, room, want > INT_MAX ? INT_MAX : (int)want);
        if (n > 0) {
            io->in_end += (size_t)n;
            got = 1;
            /* decrypted bytes left inside OpenSSL raise no socket event */
            if (SSL_pending(io->ssl) > 0) continue;
            break;
        }
        e = SSL_get_error(io->ssl, n);
        if (e == SSL_ERROR_WANT_READ) {
            e = SSL_ERROR_NONE;
        } else if (e == SSL_ERROR_WANT_WRITE) {
            io->tls_read_wants_write = 1;
            io_arm_write(io);
            e = SSL_ERROR_NONE;
        } else if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && errno == 0)) {
            eof = 1;
        }
        break;
    }
    if (got) {
        io->srv->io_reads++;
        io->ops->on_read(io->arg);
        io_keep_input(io);
        if (io->closed) return;
    }
    if (eof)
        io->ops->on_event(io->arg, PX_IO_EOF, 0);
    else if (e != SSL_ERROR_NONE)
        io_tls_failed(io, e);
}

int px_io_start_tls(px_io *io, SSL *ssl) {
    if (ssl == NULL) return -1;
    if (io->fd < 0 || SSL_set_fd(ssl, io->fd) != 1) {
        SSL_free(ssl);
        return -1;
    }
    io->ssl = ssl;
    return 0;
}

int px_io_tls_handshaking(const px_io *io) { return io->ssl != NULL && !SSL_is_init_finished(io->ssl); }

/* ------------------------------------------------------------------------ */

static void io_read_cb(evutil_socket_t fd, short what, void *arg) {
    px_io *io = arg;
    /* a read reuses the server's buffer and may move what io kept */
    px_io_settle(io->srv);
    if (io->ssl != NULL) {
        io_tls_read(io);
        return;
    }
    char *room;
    size_t want;
    if (io->in_off == io->in_end) {
        /* nothing kept: one read into the server's buffer */
        io_drop_own(io);
        io->in_buf = room = io->srv->io_read_buf;
        io->in_off = io->in_end = 0;
        want = sizeof io->srv->io_read_buf;
    } else {
        /* the rest of a frame: read on behind what is kept */
        if ((room = io_own_room(io)) == NULL) {
            io->ops->on_event(io->arg, PX_IO_ERROR, ENOMEM);
            return;
        }
        want = io->own_cap - io->in_end;
    }
    ssize_t n = read(fd, room, want);
    if (n > 0) {
        io->in_end += (size_t)n;
        io->srv->io_reads++;
        io->ops->on_read(io->arg);
        io_keep_input(io);
        return;
    }
    if (io->in_off == io->in_end) io->in_buf = NULL;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    io->ops->on_event(io->arg, n == 0 ? PX_IO_EOF : PX_IO_ERROR, n == 0 ? 0 : errno);
}

static void io_write_cb(evutil_socket_t fd, short what, void *arg) {
    px_io *io = arg;
    if (io->connecting) {
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
        io->connecting = 0;
        io_disarm_write(io);
        if (err != 0) {
            io->ops->on_event(io->arg, PX_IO_ERROR, err);
            return;
        }
        io->ops->on_event(io->arg, PX_IO_CONNECTED, 0);
        /* (output lost while connecting is reported now: io_lost_output
         * could not queue the flush then) */
        if (!io->closed && (evbuffer_get_length(io->out) > 0 || io->lost_output)) io_queue_flush(io);
        return;
    }
    io->want_write = 0; /* a non-persistent event: it is disarmed now */
    if (io->ssl != NULL && io->tls_read_wants_write) {
        io->tls_read_wants_write = 0;
        io_tls_read(io);
        if (io->closed) return;
    }
    io_write_now(io);
}

int px_io_setup(px_io *io, px_server *srv, const px_io_ops *ops, void *arg) {
    memset(io, 0, sizeof *io);
    io->srv = srv;
    io->fd = -1;
    io->ops = ops;
    io->arg = arg;
    io->connecting = 1; /* no socket yet: nothing to flush */
    io->out = evbuffer_new();
    if (!io->out) {
        px_io_deinit(io);
        return -1;
    }
    return 0;
}

int px_io_attach(px_io *io, int fd, int connecting) {
    io->fd = fd;
    io->rev = event_new(io->srv->base, fd, EV_READ | EV_PERSIST, io_read_cb, io);
    io->wev = event_new(io->srv->base, fd, EV_WRITE, io_write_cb, io);
    /* (libevent allocates when it meets a new fd: a socket never read
     * would be held for ever) */
    if (!io->rev || !io->wev || event_add(io->rev, NULL) != 0) {
        close(fd);
        io->fd = -1;
        io->closed = 1;
        return -1;
    }
    io->reading = 1;
    io->connecting = connecting;
    if (connecting)
        io_arm_write(io);
    else if (evbuffer_get_length(io->out) > 0)
        io_queue_flush(io);
    return 0;
}

int px_io_init(px_io *io, px_server *srv, int fd, const px_io_ops *ops, void *arg) {
    if (px_io_setup(io, srv, ops, arg) != 0) {
        close(fd);
        return -1;
    }
    if (px_io_attach(io, fd, 0) != 0) {
        px_io_deinit(io);
        return -1;
    }
    return 0;
}

int px_io_connect(px_io *io, const struct sockaddr *addr, socklen_t len) {
    int fd = px_socket_connect(addr, len);
    if (fd < 0) return -1;
    /* Even a connect that finished at once (unix sockets) reports through
     * the write event, so that the owner sees one path. */
    if (px_io_attach(io, fd, 1) != 0) {
        errno = ENOMEM;
        return -1;
    }
    return 0;
}

void px_io_write(px_io *io, const void *data, size_t len) {
    if (io->closed || io->discard_output) return;
    io_settle(io);
    if (io->lost_output || evbuffer_add(io->out, data, len) != 0) {
        io_lost_output(io);
        return;
    }
    if (!io->want_write) io_queue_flush(io);
}

void px_io_write_ref(px_io *io, const char *data, size_t len) {
    if (io->closed || len == 0 || io->lost_output || io->discard_output) return;
    if (io->ref_len > 0 && io->ref + io->ref_len == data) {
        io->ref_len += len;
        return;
    }
    px_io_settle(io->srv);
    io->ref = data;
    io->ref_len = len;
    io->srv->ref_io = io;
    if (!io->want_write) io_queue_flush(io);
}

void px_io_write_early(px_io *io, size_t min_pending) {
    if (io->closed || io->connecting || io->want_write || io->ssl != NULL || io->lost_output) return;
    if (evbuffer_get_length(io->out) + io->ref_len < min_pending) return;
    io_settle_writing(io);
    /* one attempt: what is left stays queued for the iteration's flush,
     * which also meets (and reports) any error again */
    if (evbuffer_get_length(io->out) > 0) evbuffer_write(io->out, io->fd);
}

void px_io_write_buffer(px_io *io, struct evbuffer *buf) {
    if (io->closed || io->discard_output) {
        evbuffer_drain(buf, evbuffer_get_length(buf));
        return;
    }
    io_settle(io);
    if (io->lost_output || evbuffer_add_buffer(io->out, buf) != 0) {
        evbuffer_drain(buf, evbuffer_get_length(buf));
        io_lost_output(io);
        return;
    }
    if (!io->want_write) io_queue_flush(io);
}

static void io_count_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg) {
    px_server *srv = arg;
    srv->upstream_output += info->n_added;
    srv->upstream_output -= info->n_deleted;
    if (info->n_deleted > 0) px_server_upstream_output_fell(srv);
}

void px_io_count_output(px_io *io) {
    if (io->count_cb == NULL && io->out != NULL) io->count_cb = evbuffer_add_cb(io->out, io_count_cb, io->srv);
}

/* What a closed io's output still holds will not be written: no longer
 * counted. */
static void io_uncount_output(px_io *io) {
    if (io->count_cb == NULL) return;
    evbuffer_remove_cb_entry(io->out, io->count_cb);
    io->count_cb = NULL;
    io->srv->upstream_output -= evbuffer_get_length(io->out);
    px_server_upstream_output_fell(io->srv);
}

size_t px_io_pending(const px_io *io) { return (io->out ? evbuffer_get_length(io->out) : 0) + io->ref_len; }

void px_io_watch_close(px_io *io) { io->watch_close = 1; }

void px_io_discard_output(px_io *io) {
    if (io->closed) return;
    io_drop_ref(io);
    io->discard_output = 1;
    evbuffer_drain(io->out, evbuffer_get_length(io->out));
    io_disarm_write(io);
}

/* How long a paused io's close watch rests after bytes came (they stay in
 * the socket: a watch of it would wake the loop at every turn). */
#define IO_CLOSE_WATCH_REST_MS 100

static void io_watch_close_again(evutil_socket_t fd, short what, void *arg) {
    px_io *io = arg;
    if (!io->closed && !io->reading && io->cev != NULL) event_add(io->cev, NULL);
}

/* The paused io's socket is readable: its peer closed it (a FIN), reset it
 * (libevent reports that as readable, not as EV_CLOSED, and a watch of
 * EV_CLOSED alone would have epoll return at every turn of the loop, never
 * calling it), or sent more. The watch stops here, and rests a while unless
 * the owner closed or resumed. */
static void io_closed_cb(evutil_socket_t fd, short what, void *arg) {
    px_io *io = arg;
    if (io->closed || io->reading) return;
    event_del(io->cev);
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    short seen = poll(&p, 1, 0) == 1 ? p.revents : 0;
    if (seen & (POLLERR | POLLHUP)) {
        int err = 0;
        socklen_t elen = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err == 0) err = ECONNRESET;
        io->ops->on_event(io->arg, PX_IO_ERROR, err);
        return;
    }
    if (seen & POLLRDHUP) {
        int unread = 0;
        if (ioctl(fd, FIONREAD, &unread) != 0) unread = 1;
        io->ops->on_event(io->arg, PX_IO_PEER_CLOSED, unread);
        /* (the owner may have closed io, and freed it: nothing more here) */
        return;
    }
    if (io->cev_again == NULL) io->cev_again = evtimer_new(io->srv->base, io_watch_close_again, io);
    if (io->cev_again != NULL) {
        struct timeval rest = {0, IO_CLOSE_WATCH_REST_MS * 1000};
        evtimer_add(io->cev_again, &rest);
    }
}

void px_io_pause_read(px_io *io) {
    if (io->reading && !io->closed) {
        event_del(io->rev);
        io->reading = 0;
        /* TLS may hold read bytes of its own: not watched */
        if (io->watch_close && io->ssl == NULL && io->fd >= 0) {
            if (io->cev == NULL) io->cev = event_new(io->srv->base, io->fd, EV_READ | EV_CLOSED, io_closed_cb, io);
            if (io->cev != NULL) event_add(io->cev, NULL);
        }
    }
}

void px_io_resume_read(px_io *io) {
    if (!io->reading && !io->closed) {
        if (io->cev) event_del(io->cev);
        if (io->cev_again) evtimer_del(io->cev_again);
        event_add(io->rev, NULL);
        io->reading = 1;
    }
}

/* A closed io writes nothing more: its reference is dropped. */
static void io_drop_ref(px_io *io) {
    if (io->ref_len == 0) return;
    io->ref = NULL;
    io->ref_len = 0;
    io->srv->ref_io = NULL;
}

void px_io_close(px_io *io) {
    if (io->closed) return;
    io->closed = 1;
    io_drop_ref(io);
    io_uncount_output(io);
    if (io->rev) event_del(io->rev);
    if (io->wev) event_del(io->wev);
    if (io->cev) event_del(io->cev);
    if (io->cev_again) evtimer_del(io->cev_again);
    io->reading = io->want_write = 0;
    if (io->ssl != NULL) {
        SSL_shutdown(io->ssl); /* close_notify, best effort: no waiting */
        SSL_free(io->ssl);
        io->ssl = NULL;
        ERR_clear_error();
    }
    if (io->fd >= 0) close(io->fd);
    io->fd = -1;
    /* off the flush list now: the owner may be reaped (and io freed) before
     * the flush event runs in this loop iteration (found by fuzz_session) */
    if (io->flush_queued) {
        for (px_io **pp = &io->srv->flush_list; *pp != NULL; pp = &(*pp)->next_flush) {
            if (*pp == io) {
                *pp = io->next_flush;
                break;
            }
        }
        io->next_flush = NULL;
        io->flush_queued = 0;
    }
}

void px_io_deinit(px_io *io) {
    /* its input may be what another io refers to */
    if (io->srv != NULL) px_io_settle(io->srv);
    if (io->rev) event_free(io->rev);
    if (io->wev) event_free(io->wev);
    if (io->cev) event_free(io->cev);
    io->cev = NULL;
    if (io->cev_again) event_free(io->cev_again);
    io->cev_again = NULL;
    free(io->own);
    io->own = NULL;
    io->in_buf = NULL;
    io->in_off = io->in_end = io->own_cap = 0;
    io_uncount_output(io);
    if (io->out) evbuffer_free(io->out);
    io->rev = io->wev = NULL;
    io->out = NULL;
}
