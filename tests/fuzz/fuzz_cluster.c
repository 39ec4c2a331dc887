/*
 * tests/fuzz/fuzz_cluster.c — libFuzzer target for protocol/cluster.c: the
 * CLUSTER SLOTS rewrite that names sidecache as a slot's master, fed
 * whatever an upstream might send, and the hash slot functions.
 *
 * Input: byte 0 and 1, the slot (big-endian, modulo 16384); byte 2, which
 * node the proxy stands in for (bit 0: its address is "10.0.0.2", else
 * "" never matches a non-empty ip; bits 1-7 add to port 7000); the rest,
 * the reply.
 *
 * Checked: the result is 0, -1 or -2; on -1 and -2 the output buffer is as
 * it was, and -2 names the other master in a terminated string; on 0 the
 * output is one whole RESP frame, an array of as many ranges as the input,
 * that names host:port; every slot is below 16384.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzzcommon.h"
#include "protocol/cluster.h"
#include "protocol/resp.h"

static void count_node(void *arg, const char *host, size_t hostlen, long long port) {
    (void)host, (void)hostlen, (void)port;
    ++*(size_t *)arg;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    unsigned slot = (((unsigned)data[0] << 8) | data[1]) % CLUSTER_SLOTS;
    cluster_self up = {.hosts = {(data[2] & 1) ? "10.0.0.2" : "x", NULL}, .port = 7000 + (data[2] >> 1)};
    /* a heap copy of exactly the reply: ASan sees any read past it */
    size_t len = size - 3;
    char *reply = malloc(len ? len : 1);
    if (reply == NULL) return 0;
    memcpy(reply, data + 3, len);

    CHECK(cluster_key_slot(reply, len) < CLUSTER_SLOTS);
    int ps = cluster_prefix_slot(reply, len);
    CHECK(ps >= -1 && ps < CLUSTER_SLOTS);

    resp_buf out;
    resp_buf_init(&out);
    resp_buf_append(&out, "kept", 4);
    char other[64];
    memset(other, 'z', sizeof other);
    int rc = cluster_slots_rewrite(reply, len, slot, &up, "127.0.0.1", 6400, &out, other, sizeof other);
    CHECK(rc == 0 || rc == -1 || rc == -2);
    CHECK(out.len >= 4 && memcmp(out.data, "kept", 4) == 0);
    if (rc != 0) CHECK(out.len == 4);
    if (rc == -2) CHECK(memchr(other, '\0', sizeof other) != NULL);
    if (rc == 0) {
        resp_limits lim;
        resp_reply_parser p, q;
        resp_limits_default(&lim);
        resp_reply_init(&p, &lim);
        resp_reply_init(&q, &lim);
        CHECK(resp_reply_parse(&p, out.data + 4, out.len - 4) == RESP_OK);
        CHECK(p.frame_len == out.len - 4);
        CHECK(resp_reply_parse(&q, reply, len) == RESP_OK);
        CHECK(p.type == '*' && q.type == '*' && p.count == q.count);
        CHECK(memmem(out.data, out.len, "$9\r\n127.0.0.1\r\n:6400\r\n", 22) != NULL);
        resp_reply_deinit(&p);
        resp_reply_deinit(&q);
    }
    resp_buf_deinit(&out);

    /* the nodes, and the slot's master: whole NUL-terminated strings */
    char master[32];
    size_t nodes = 0;
    if (cluster_slots_master(reply, len, slot, master, sizeof master) == 0) CHECK(memchr(master, '\0', sizeof master));
    (void)cluster_slots_nodes(reply, len, count_node, &nodes);

    /* a MOVED frame: its target lies inside the frame, before its CRLF */
    long long moved_slot;
    const char *to;
    size_t tolen;
    if (cluster_moved(reply, len, &moved_slot, &to, &tolen) == 0)
        CHECK(to > reply && to + tolen + 2 == reply + len && memchr(reply, ' ', (size_t)(to - reply)) != NULL);
    free(reply);
    return 0;
}
