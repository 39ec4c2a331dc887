/*
 * proxy/io.h — one non-blocking socket with an input and an output buffer,
 * and the write-behind that makes a proxy hop cheap.
 *
 * Why not bufferevents: a bufferevent writes only when the loop reports the
 * socket writable, which costs an epoll_ctl to arm, a loop iteration, a
 * writev and another epoll_ctl to disarm, for every reply. Redis writes
 * replies from beforeSleep() straight to the socket; so does this: writes
 * are appended to the output buffer, the socket is queued once, and a flush
 * event that runs after every read callback of the same loop iteration
 * writes each queued socket with one writev. Only a socket that cannot take
 * everything gets a write event, until its buffer is empty.
 *
 * Reads are one read(2) of up to PX_IO_READ_CHUNK bytes (no FIONREAD ioctl)
 * into the server's read buffer, where on_read consumes them; only what it
 * leaves is copied into the io's own buffer (io.c, "Input").
 *
 * Lifetime: px_io_close() stops the events and closes the socket at once;
 * the buffers stay readable until px_io_deinit(), which the owner calls at
 * reap time. No callback runs after px_io_close().
 */
#ifndef SIDECACHE_PROXY_IO_H
#define SIDECACHE_PROXY_IO_H

#include <stddef.h>
#include <sys/socket.h>

#include "proxy/server.h"

struct evbuffer;
struct evbuffer_cb_entry;
struct event;
struct ssl_st;

enum px_io_event {
    PX_IO_EOF = 1,       /* the peer closed */
    PX_IO_ERROR = 2,     /* a socket error; err holds errno */
    PX_IO_CONNECTED = 3, /* a connect finished */
    PX_IO_PEER_CLOSED = 4, /* reading paused, the peer closed (or shut down
                              its writing); err holds the bytes it sent
                              that are still unread in the socket. Only
                              with px_io_watch_close, once per pause */
};

typedef struct px_io_ops {
    void (*on_read)(void *arg);                    /* new input: px_io_input */
    void (*on_drain)(void *arg);                   /* io->out was fully written */
    void (*on_event)(void *arg, int what, int err); /* enum px_io_event */
} px_io_ops;

typedef struct px_io {
    px_server *srv;
    int fd;
    struct evbuffer *out;
    /* input read and not consumed: in_buf[in_off, in_end); in_buf is the
     * server's read buffer during on_read, else own (or NULL) */
    char *in_buf;
    size_t in_off, in_end;
    char *own;            /* kept input, owned */
    size_t own_cap;
    struct event *rev, *wev;
    struct event *cev;    /* px_io_watch_close: the peer's close while paused */
    struct event *cev_again; /* ... watched again a while after bytes came */
    int watch_close;
    const px_io_ops *ops;
    void *arg;
    int connecting;       /* waiting for connect() to finish */
    int reading;          /* read event armed */
    int want_write;       /* write event armed */
    int flush_queued;     /* on srv's flush list */
    int lost_output;      /* bytes for out were dropped (no memory): the
                             stream is broken, reported as an error at the
                             next write (io_write_now) */
    int closed;
    int discard_output;   /* the peer is gone: output is dropped, not an
                             error (px_io_discard_output) */
    const char *ref;      /* px_io_write_ref: ref_len bytes not yet in out */
    size_t ref_len;
    struct px_io *next_flush;
    struct ssl_st *ssl;        /* TLS session, or NULL (owned) */
    int tls_read_wants_write;  /* SSL_read needs the socket writable first */
    int tls_write_wants_read;  /* SSL_write needs the socket readable first */
    struct evbuffer_cb_entry *count_cb; /* px_io_count_output */
    int shutdown_write;        /* px_io_shutdown_write: 1 asked, 2 done */
} px_io;

/* From now on until it closes, io's output counts in srv->upstream_output,
 * and what leaves it calls px_server_upstream_output_fell. For connections
 * to Redis: what all clients together make wait there is bounded
 * (upstream-output-limit). Call with the output empty (after px_io_setup). */
void px_io_count_output(px_io *io);

/* While its reading is paused, the io reports the peer's close
 * (PX_IO_PEER_CLOSED) rather than leave it unseen until reading resumes;
 * where the event backend can tell (EV_CLOSED), on plain sockets. */
void px_io_watch_close(px_io *io);

/* The peer can read nothing more (its socket reset our write): what is
 * queued is dropped, and so is all output from now on, without an error;
 * input already read stays, for the owner to finish with. */
void px_io_discard_output(px_io *io);

/* Once what is queued is written, the peer is told that nothing more comes
 * (shutdown(SHUT_WR), or TLS close_notify); reading goes on. Nothing may
 * be written after this. */
void px_io_shutdown_write(px_io *io);

/* Sets up the buffers of an io that has no socket yet: writes are kept
 * until px_io_attach or px_io_connect gives it one. Returns 0 or -1 (OOM). */
int px_io_setup(px_io *io, px_server *srv, const px_io_ops *ops, void *arg);

/* Gives io its socket fd (non-blocking) and starts reading. connecting: a
 * connect() is in progress on fd; ops->on_event gets PX_IO_CONNECTED or an
 * error when it ends. Returns 0, or -1 (OOM; fd closed). */
int px_io_attach(px_io *io, int fd, int connecting);

/* px_io_setup + px_io_attach for an accepted socket. */
int px_io_init(px_io *io, px_server *srv, int fd, const px_io_ops *ops, void *arg);

/* Starts a non-blocking connect to addr on an io made by px_io_setup.
 * Returns 0, or -1 with errno set. */
int px_io_connect(px_io *io, const struct sockaddr *addr, socklen_t len);

/* From now on the socket speaks TLS through ssl (accept or connect state
 * already set; io takes ownership, also on failure). Call once io has its
 * socket. Returns 0, or -1 (ssl freed). */
int px_io_start_tls(px_io *io, struct ssl_st *ssl);

/* 1 while io speaks TLS and its handshake has not finished: for a
 * rediss:// connection, the connect is not over yet. 0 for a plain socket. */
int px_io_tls_handshaking(const px_io *io);

/* The input read and not yet consumed: *len bytes at the pointer returned
 * (NULL when none). Valid until px_io_consume, or on_read's return. */
const char *px_io_input(const px_io *io, size_t *len);
size_t px_io_input_len(const px_io *io);
/* Marks the first n bytes of the input consumed. */
void px_io_consume(px_io *io, size_t n);
/* Gives back the buffer that kept input which is now all consumed (a read
 * does so itself: for input consumed outside a read, by a paused client
 * once resumed, which may read nothing more for a long while). */
void px_io_input_done(px_io *io);

/* Appends bytes to the output; they leave at the end of this loop iteration. */
void px_io_write(px_io *io, const void *data, size_t len);

/* Appends len bytes at data by reference: they are copied to the output
 * only when something else is written to io, when it is written to the
 * socket, or at px_io_settle, and a write that continues the reference (the
 * next frame of the same input) only lengthens it: a transaction's queued
 * commands, each a frame after the last in the client's input, are copied
 * in one piece. The bytes must stay put until then: data is input of
 * another io (px_io_input), and the caller calls px_io_settle before it
 * returns to the loop. One io of a server holds a reference at a time, and
 * io.c settles it before any input moves (a read, a connection's input
 * kept or freed), in case a caller did not. */
void px_io_write_ref(px_io *io, const char *data, size_t len);
/* Copies the reference an io of srv holds, if any, into its output. */
void px_io_settle(px_server *srv);

/* Writes what the socket takes now, without waiting for the end of the
 * iteration, if at least min_pending bytes wait (plain sockets only). A
 * failure is not reported here but by the iteration's flush, so no
 * callback runs from inside the caller. */
void px_io_write_early(px_io *io, size_t min_pending);
/* Moves all of buf to the output (buf is left empty). */
void px_io_write_buffer(px_io *io, struct evbuffer *buf);
/* Bytes not yet written to the socket. */
size_t px_io_pending(const px_io *io);

void px_io_pause_read(px_io *io);
void px_io_resume_read(px_io *io);

/* Stops everything and closes the socket; buffers survive until deinit. */
void px_io_close(px_io *io);
/* Frees the buffers and events. Call once, after px_io_close. */
void px_io_deinit(px_io *io);

/* Writes every queued socket: the flush event of the server. */
void px_io_flush_all(px_server *srv);

#endif
