/*
 * tests/unit/test_ask.c — proxy/ask.c: the short blocking exchange the
 * event loop makes with a cluster node (where is the slot?) or a sentinel.
 * It blocks the loop, so its deadline must hold and a large reply must cost
 * one pass over its bytes.
 */
#include "proxy/ask.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "protocol/resp.h"
#include "unit.h"

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct node {
    int ls;
    resp_buf reply;
};

/* One connection: reads the request, writes the whole reply as fast as
 * the socket takes it, closes. */
static void *serve_once(void *arg) {
    struct node *n = arg;
    int fd = accept(n->ls, NULL, NULL);
    if (fd < 0) return NULL;
    char buf[256];
    if (read(fd, buf, sizeof buf) < 0) {
        close(fd);
        return NULL;
    }
    for (size_t off = 0; off < n->reply.len;) {
        ssize_t w = write(fd, n->reply.data + off, n->reply.len - off);
        if (w <= 0) break;
        off += (size_t)w;
    }
    close(fd);
    return NULL;
}

/* A CLUSTER SLOTS reply of a cluster whose slots lie in 16384 ranges of
 * one slot each (a master and a replica each): about 2.8 MB. */
static void fragmented_slots(resp_buf *b) {
    static const char id_a[] = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", id_b[] = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    resp_enc_array(b, 16384);
    for (int s = 0; s < 16384; s++) {
        resp_enc_array(b, 4);
        resp_enc_int(b, s);
        resp_enc_int(b, s);
        for (int k = 0; k < 2; k++) {
            resp_enc_array(b, 4);
            resp_enc_bulk_str(b, "127.0.0.1");
            resp_enc_int(b, 7000 + k);
            resp_enc_bulk_str(b, k ? id_b : id_a);
            resp_enc_array(b, 0);
        }
    }
}

/* Before: the parser started again from the reply's first byte after each
 * read of 4 KB, and the deadline was looked at only when no byte was
 * waiting: a reply of 2.8 MB held the event loop for seconds. */
static void test_a_large_reply_is_read_in_one_pass(void) {
    struct node n;
    struct sockaddr_in sin;
    socklen_t sl = sizeof sin;
    memset(&sin, 0, sizeof sin);
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    n.ls = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(n.ls >= 0);
    REQUIRE(bind(n.ls, (struct sockaddr *)&sin, sizeof sin) == 0 && listen(n.ls, 4) == 0);
    REQUIRE(getsockname(n.ls, (struct sockaddr *)&sin, &sl) == 0);
    resp_buf_init(&n.reply);
    fragmented_slots(&n.reply);
    REQUIRE(n.reply.len > 2000000 && n.reply.len < (4u << 20));
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, serve_once, &n) == 0);

    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    memcpy(&ss, &sin, sizeof sin);
    static const char req[] = "*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n";
    char *out = NULL, why[200] = "";
    size_t outlen = 0;
    int64_t t0 = mono_ms();
    /* the deadline follow.c gives each ask: the loop is held no longer */
    int rc = px_ask(&ss, sizeof sin, req, sizeof req - 1, 1, 4u << 20, 250, &out, &outlen, why, sizeof why);
    int64_t took = mono_ms() - t0;
    pthread_join(th, NULL);
    close(n.ls);
    if (rc != 0) fprintf(stderr, "px_ask: %s\n", why);
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(outlen, n.reply.len);
    /* one pass over 2.8 MB takes a few milliseconds (it took 856) */
    if (took >= 400) fprintf(stderr, "px_ask took %lld ms\n", (long long)took);
    CHECK(took < 400);
    free(out);
    resp_buf_deinit(&n.reply);
}

int main(void) {
    RUN(test_a_large_reply_is_read_in_one_pass);
    return unit_report();
}
