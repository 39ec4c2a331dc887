/*
 * proxy/ask.c — see ask.h.
 */
#include "proxy/ask.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "protocol/resp.h"
#include "proxy/server.h"

/* Waits for fd to be ready for events until deadline. 1 ready, 0 not. */
static int wait_fd(int fd, short events, int64_t deadline_ms) {
    for (;;) {
        int64_t left = deadline_ms - px_now_ms();
        if (left <= 0) return 0;
        struct pollfd pfd = {fd, events, 0};
        int rc = poll(&pfd, 1, (int)left);
        if (rc > 0) return 1;
        if (rc < 0 && errno != EINTR) return 0;
    }
}

static int connect_by(const struct sockaddr_storage *sa, unsigned salen, int64_t deadline) {
    int fd = socket(sa->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, (const struct sockaddr *)sa, salen) != 0) {
        int err = 0;
        socklen_t el = sizeof err;
        if (errno != EINPROGRESS || !wait_fd(fd, POLLOUT, deadline) ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
            close(fd);
            return -1;
        }
    }
    return fd;
}

static int write_all(int fd, const char *p, size_t len, int64_t deadline) {
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(fd, p + off, len - off);
        if (n > 0)
            off += (size_t)n;
        else if (!(n < 0 && (errno == EAGAIN || errno == EINTR)) || !wait_fd(fd, POLLOUT, deadline))
            return -1;
    }
    return 0;
}

/* Reads into b until it holds one whole reply at b->data[at]; its length
 * into *flen. 0, or -1 (closed, late, too long, malformed). The parser
 * resumes where it stopped (resp.h), and the deadline holds while bytes
 * keep coming too: a reply of megabytes (CLUSTER SLOTS of a cluster whose
 * slots are spread over thousands of ranges) costs one pass, not one per
 * read of 4 KB, which held the event loop for seconds. */
static int read_reply(int fd, resp_buf *b, size_t at, size_t max, int64_t deadline, size_t *flen) {
    resp_limits lim;
    resp_reply_parser rp;
    resp_limits_default(&lim);
    resp_reply_init(&rp, &lim);
    int rc = -1;
    for (;;) {
        if (b->len > at) {
            int prc = resp_reply_parse(&rp, b->data + at, b->len - at);
            if (prc == RESP_OK) {
                *flen = rp.frame_len;
                rc = 0;
                break;
            }
            if (prc == RESP_ERR) break;
        }
        char chunk[4096];
        if (b->len - at >= max || px_now_ms() >= deadline) break;
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n > 0) {
            if (resp_buf_append(b, chunk, (size_t)n) != 0) break;
        } else if (!(n < 0 && (errno == EAGAIN || errno == EINTR)) || !wait_fd(fd, POLLIN, deadline))
            break;
    }
    resp_reply_deinit(&rp);
    return rc;
}

int px_ask(const struct sockaddr_storage *sa, unsigned salen, const char *req, size_t reqlen, int nreplies,
           size_t max_reply, int timeout_ms, char **out, size_t *outlen, char *why, size_t whylen) {
    int64_t deadline = px_now_ms() + timeout_ms;
    int fd = connect_by(sa, salen, deadline);
    if (fd < 0) {
        snprintf(why, whylen, "cannot connect");
        return -1;
    }
    if (write_all(fd, req, reqlen, deadline) != 0) {
        close(fd);
        snprintf(why, whylen, "cannot send");
        return -1;
    }
    resp_buf b;
    resp_buf_init(&b);
    size_t at = 0, flen = 0;
    int rc = 0;
    for (int i = 0; i < nreplies && rc == 0; i++) {
        if (read_reply(fd, &b, at, max_reply, deadline, &flen) != 0) {
            snprintf(why, whylen, "no reply");
            rc = -1;
        } else if (i < nreplies - 1 && b.data[at] == '-') {
            snprintf(why, whylen, "refused: %.*s", (int)(flen > 200 ? 200 : flen - 2), b.data + at + 1);
            rc = -1;
        } else if (i < nreplies - 1) {
            at += flen;
        }
    }
    close(fd);
    if (rc == 0 && (*out = malloc(flen ? flen : 1)) == NULL) {
        snprintf(why, whylen, "out of memory");
        rc = -1;
    }
    if (rc == 0) {
        memcpy(*out, b.data + at, flen);
        *outlen = flen;
    }
    resp_buf_deinit(&b);
    return rc;
}
