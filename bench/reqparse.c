/*
 * bench/reqparse.c — CPU cost of framing requests (protocol/resp.c, linked
 * from the tree being measured), without the network.
 *
 * Builds what JuiceFS's doBatchUnlink writes in one go for a batch of BATCH
 * entries (bench/batchunlink.c, ../shared/JUICEFS-REDIS.md): MULTI, HDEL of
 * the names, per entry ZADD, DEL, INCRBY and DECR, SET of the parent, EXEC;
 * then frames it with resp_req_parse, as the proxy does, ROUNDS times, and
 * prints two lines "metric,value": txn_us (per transaction) and
 * ns_per_arg. Run by bench/micro.sh, which compares two trees side by side.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "protocol/resp.h"

static char *buf;
static size_t blen, bcap;

static void die(const char *what) {
    fprintf(stderr, "reqparse: %s\n", what);
    exit(1);
}

static void put(const char *fmt, const char *s) {
    int n = snprintf(buf + blen, bcap - blen, fmt, strlen(s), s);
    if (n < 0 || (size_t)n >= bcap - blen) die("buffer too small");
    blen += (size_t)n;
}

/* One command, its arguments as C strings, NULL-terminated. */
static void cmd(const char *first, ...) {
    const char *args[8];
    int n = 0;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a != NULL && n < 8; a = va_arg(ap, const char *)) args[n++] = a;
    va_end(ap);
    blen += (size_t)snprintf(buf + blen, bcap - blen, "*%d\r\n", n);
    for (int i = 0; i < n; i++) put("$%zu\r\n%s\r\n", args[i]);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    long batch = argc > 1 ? strtol(argv[1], NULL, 10) : 250;
    long rounds = argc > 2 ? strtol(argv[2], NULL, 10) : 2000;
    if (batch < 1 || batch > 10000 || rounds < 1) die("usage: reqparse [BATCH [ROUNDS]]");
    bcap = (size_t)batch * 256 + 4096;
    buf = malloc(bcap);
    if (buf == NULL) die("out of memory");

    char name[32], ino[32], member[48];
    cmd("MULTI", NULL);
    /* HDEL d1 name…: built by hand, its argument count depends on batch */
    blen += (size_t)snprintf(buf + blen, bcap - blen, "*%ld\r\n", batch + 2);
    put("$%zu\r\n%s\r\n", "HDEL");
    put("$%zu\r\n%s\r\n", "d1");
    for (long i = 0; i < batch; i++) {
        snprintf(name, sizeof name, "f%ld", 10000 + i);
        put("$%zu\r\n%s\r\n", name);
    }
    for (long i = 0; i < batch; i++) {
        snprintf(ino, sizeof ino, "i%ld", 10000 + i);
        snprintf(member, sizeof member, "%ld:4096", 10000 + i);
        cmd("ZADD", "delfiles", "1796039683", member, NULL);
        cmd("DEL", ino, NULL);
        cmd("INCRBY", "usedSpace", "-4096", NULL);
        cmd("DECR", "totalInodes", NULL);
    }
    cmd("SET", "i1", "attrattrattrattrattrattrattrattrattrattrattrattrattrattrattrattrattrattr", NULL);
    cmd("EXEC", NULL);

    resp_limits lim;
    resp_limits_default(&lim);
    resp_req_parser p;
    resp_req_init(&p, &lim);
    size_t args = 0;
    double t0 = now_s();
    for (long r = 0; r < rounds; r++) {
        for (size_t off = 0; off < blen; off += p.frame_len) {
            if (resp_req_parse(&p, buf + off, blen - off) != RESP_OK) die("the transaction did not frame");
            args += (size_t)p.argc;
        }
    }
    double el = now_s() - t0;
    printf("txn_us,%.2f\n", el * 1e6 / (double)rounds);
    printf("ns_per_arg,%.2f\n", el * 1e9 / (double)args);
    resp_req_deinit(&p);
    free(buf);
    return 0;
}
