/*
 * bench/invaldelay.c — how long after a write on Redis the proxy stops
 * serving the old value (design contract C10), measured per key.
 *
 * Two plain (blocking) hiredis connections: the writer talks to Redis
 * directly, the reader to the proxy. For each of -n keys (i3<12 digits>,
 * created and cached by the caller's setup or by --setup):
 *
 *   t_write  SET key <new value> sent on Redis ... t_ack  its +OK is read
 *   then GET key through the proxy, again and again with no pause, until the
 *   reply is the new value; t_fresh is when that reply was read. Polls that
 *   still return the old value after t_ack are "stale reads".
 *
 * Reported (µs): delay_after_ack = t_fresh - t_ack and delay_after_write =
 * t_fresh - t_write. Both include the round trip of the last poll, and that
 * poll is a cache miss (the entry was purged): so the same tool measures, on
 * the same connections, the round trip of a cache hit through the proxy, of a
 * pass-through GET (a key no rule caches) through the proxy, and of a GET
 * sent to Redis directly.
 *
 * --purge-names N adds a scenario after these, in five rounds: a directory
 * of N names (hash d3, HGET of every name cached through the proxy) is
 * purged whole by an HSET on Redis, and the reader polls a cached key
 * (i3<0>) back to back for 100 ms before (hit_rtt_polled) and at once after
 * it (hit_rtt_polled_while_freeing), while the proxy frees the purged
 * names: what that freeing costs the proxy's clients. (Polled back to back,
 * a round trip is not hit_rtt's, taken between other requests: the two
 * polled figures are the ones to compare.)
 *
 * Output: CSV on stdout, metric,count,mean_us,p50_us,p90_us,p99_us,max_us
 * (exact order statistics, nearest rank), plus stale_reads lines (counts, not
 * µs). Exit 0, 1 on a connection or usage error, 2 when a GET returned neither
 * the old nor the new value or a key was never seen fresh within --timeout-ms.
 *
 * Build: cc -O2 -Wall -o bench/build/invaldelay bench/invaldelay.c -lhiredis
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* nearest rank: the smallest value with at least ceil(q n) values <= it */
static double pct(const uint64_t *sorted, size_t n, double q) {
    size_t r = (size_t)((double)n * q + 0.999999999);
    if (r < 1) r = 1;
    if (r > n) r = n;
    return (double)sorted[r - 1];
}

/* Prints one CSV line; scale 1e-3 turns ns into µs, 1 keeps counts. */
static void report(const char *metric, uint64_t *v, size_t n, double scale) {
    if (n == 0) {
        printf("%s,0,,,,,\n", metric);
        return;
    }
    qsort(v, n, sizeof *v, cmp_u64);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += (double)v[i];
    printf("%s,%zu,%.1f,%.1f,%.1f,%.1f,%.1f\n", metric, n, sum / (double)n * scale, pct(v, n, 0.5) * scale,
           pct(v, n, 0.9) * scale, pct(v, n, 0.99) * scale, (double)v[n - 1] * scale);
}

static redisContext *connect_to(const char *host, int port) {
    struct timeval tv = {10, 0};
    redisContext *c = redisConnectWithTimeout(host, port, tv);
    if (c == NULL || c->err) {
        fprintf(stderr, "invaldelay: cannot connect to %s:%d: %s\n", host, port, c ? c->errstr : "oom");
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

static void make_value(char *buf, int n, const char *tag, unsigned k) {
    memset(buf, '.', (size_t)n);
    char tmp[64];
    int l = snprintf(tmp, sizeof tmp, "%s-%u-", tag, k);
    memcpy(buf, tmp, (size_t)(l < n ? l : n));
}

/* Every reply of n commands appended on c, read; 0, or -1 with a message. */
static int drain(redisContext *c, int n, const char *who) {
    redisReply *rep;
    for (int i = 0; i < n; i++) {
        if (redisGetReply(c, (void **)&rep) != REDIS_OK) {
            fprintf(stderr, "invaldelay: %s connection: %s\n", who, c->errstr);
            return -1;
        }
        int err = rep->type == REDIS_REPLY_ERROR;
        freeReplyObject(rep);
        if (err) {
            fprintf(stderr, "invaldelay: %s: an error reply\n", who);
            return -1;
        }
    }
    return 0;
}

/* FMT (with one %d, the name's number) for names 0 .. names-1, pipelined
 * on c CHUNK at a time, every reply read; 0, or -1 with a message. */
static int for_each_name(redisContext *c, const char *fmt, int names, const char *who) {
    enum { CHUNK = 5000 };
    for (int j = 0; j < names; j += CHUNK) {
        int m = names - j < CHUNK ? names - j : CHUNK;
        for (int k = 0; k < m; k++) redisAppendCommand(c, fmt, j + k);
        if (drain(c, m, who) != 0) return -1;
    }
    return 0;
}

/* Polls GET i3<0> (cached) through the proxy back to back for WINDOW_NS,
 * appending the round trips (ns) to *v; 0, or -1 with a message. */
enum { WINDOW_NS = 100000000 };
static int poll_window(redisContext *r, uint64_t **v, size_t *n, size_t *cap) {
    for (uint64_t t_end = now_ns() + WINDOW_NS; now_ns() < t_end;) {
        uint64_t t0 = now_ns();
        redisAppendCommand(r, "GET i3%012d", 0);
        if (drain(r, 1, "proxy") != 0) return -1;
        if (*n == *cap) {
            uint64_t *more = realloc(*v, 2 * *cap * sizeof **v);
            if (more == NULL) {
                fprintf(stderr, "invaldelay: out of memory\n");
                return -1;
            }
            *v = more;
            *cap *= 2;
        }
        (*v)[(*n)++] = now_ns() - t0;
    }
    return 0;
}

/* The --purge-names scenario (see the top): each round polls for a window
 * with nothing to free (into *idle), then for one after the purge (into
 * *freeing). Returns 0, or -1 after a message. */
static int time_reads_while_freeing(redisContext *w, redisContext *r, int names, uint64_t **idle, size_t *nidle,
                                    uint64_t **freeing, size_t *nfreeing) {
    enum { ROUNDS = 5 };
    size_t cap_idle = 1 << 16, cap_freeing = 1 << 16;
    *nidle = *nfreeing = 0;
    *idle = malloc(cap_idle * sizeof **idle);
    *freeing = malloc(cap_freeing * sizeof **freeing);
    if (*idle == NULL || *freeing == NULL) {
        fprintf(stderr, "invaldelay: out of memory\n");
        return -1;
    }
    if (for_each_name(w, "HSET d3 f%d entry", names, "Redis") != 0) return -1;
    for (int round = 0; round < ROUNDS; round++) {
        /* twice: the first reads fill, the second find them cached */
        for (int pass = 0; pass < 2; pass++)
            if (for_each_name(r, "HGET d3 f%d", names, "proxy") != 0) return -1;
        if (poll_window(r, idle, nidle, &cap_idle) != 0) return -1;
        redisAppendCommand(w, "HSET d3 f0 changed%d", round);
        if (drain(w, 1, "Redis") != 0) return -1;
        if (poll_window(r, freeing, nfreeing, &cap_freeing) != 0) return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *host = "127.0.0.1";
    int rport = 0, pport = 0, n = 2000, vsize = 72, setup = 0, purge_names = 0;
    long timeout_ms = 2000;
    static const struct option lopts[] = {{"redis-port", 1, 0, 'r'}, {"proxy-port", 1, 0, 'p'},
                                          {"keys", 1, 0, 'n'},       {"value-size", 1, 0, 'v'},
                                          {"setup", 0, 0, 's'},      {"timeout-ms", 1, 0, 't'},
                                          {"purge-names", 1, 0, 'g'}, {"help", 0, 0, 'h'},
                                          {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "r:p:n:v:st:g:", lopts, NULL)) != -1) {
        switch (o) {
        case 'r': rport = atoi(optarg); break;
        case 'p': pport = atoi(optarg); break;
        case 'n': n = atoi(optarg); break;
        case 'v': vsize = atoi(optarg); break;
        case 's': setup = 1; break;
        case 't': timeout_ms = atol(optarg); break;
        case 'g': purge_names = atoi(optarg); break;
        default:
            fprintf(o == 'h' ? stdout : stderr,
                    "usage: invaldelay --redis-port P --proxy-port P [--keys 2000] [--value-size 72]\n"
                    "                  [--setup] [--timeout-ms 2000] [--purge-names N]\n"
                    "  --setup        create the keys on Redis and read each twice through the proxy first\n"
                    "  --purge-names  also time cached reads while a purge of N names is freed\n");
            return o == 'h' ? 0 : 1;
        }
    }
    if (rport <= 0 || pport <= 0 || n < 1 || vsize < 16 || vsize > 4096 || purge_names < 0) {
        fprintf(stderr, "invaldelay: --redis-port and --proxy-port are required (see --help)\n");
        return 1;
    }
    redisContext *w = connect_to(host, rport), *r = connect_to(host, pport);
    if (w == NULL || r == NULL) return 1;

    char key[32], oldv[4096], newv[4096], xkey[32];
    uint64_t *hit = calloc((size_t)n, 8), *pass = calloc((size_t)n, 8), *direct = calloc((size_t)n, 8);
    uint64_t *d_ack = calloc((size_t)n, 8), *d_write = calloc((size_t)n, 8), *stale = calloc((size_t)n, 8);
    uint64_t *polls = calloc((size_t)n, 8), *set_rtt = calloc((size_t)n, 8), *d_low = calloc((size_t)n, 8);
    uint64_t *d_mid = calloc((size_t)n, 8);
    if (!d_mid || !hit || !pass || !direct || !d_ack || !d_write || !stale || !polls || !set_rtt || !d_low) return 1;
    int bad = 0;
    redisReply *rep;

    if (setup) {
        for (int k = 0; k < n; k++) {
            snprintf(key, sizeof key, "i3%012d", k);
            snprintf(xkey, sizeof xkey, "x3%012d", k);
            make_value(oldv, vsize, "old", (unsigned)k);
            redisAppendCommand(w, "SET %s %b", key, oldv, (size_t)vsize);
            redisAppendCommand(w, "SET %s %b", xkey, oldv, (size_t)vsize);
        }
        for (int k = 0; k < 2 * n; k++) {
            if (redisGetReply(w, (void **)&rep) != REDIS_OK) goto ioerr_w;
            freeReplyObject(rep);
        }
        for (int pass_ = 0; pass_ < 2; pass_++)
            for (int k = 0; k < n; k++) {
                snprintf(key, sizeof key, "i3%012d", k);
                if ((rep = redisCommand(r, "GET %s", key)) == NULL) goto ioerr_r;
                freeReplyObject(rep);
            }
    }

    /* round trips for reference: a hit, a pass-through GET, Redis directly */
    for (int k = 0; k < n; k++) {
        snprintf(key, sizeof key, "i3%012d", k);
        snprintf(xkey, sizeof xkey, "x3%012d", k);
        make_value(oldv, vsize, "old", (unsigned)k);
        uint64_t t0 = now_ns();
        if ((rep = redisCommand(r, "GET %s", key)) == NULL) goto ioerr_r;
        hit[k] = now_ns() - t0;
        if (rep->type != REDIS_REPLY_STRING || rep->len != (size_t)vsize || memcmp(rep->str, oldv, (size_t)vsize) != 0) {
            fprintf(stderr, "invaldelay: %s through the proxy is not the value set (run with --setup?)\n", key);
            return 2;
        }
        freeReplyObject(rep);
        t0 = now_ns();
        if ((rep = redisCommand(r, "GET %s", xkey)) == NULL) goto ioerr_r;
        pass[k] = now_ns() - t0;
        freeReplyObject(rep);
        t0 = now_ns();
        if ((rep = redisCommand(w, "GET %s", key)) == NULL) goto ioerr_w;
        direct[k] = now_ns() - t0;
        freeReplyObject(rep);
    }

    /* The measurement, twice per key.
     * A (after ack): SET on Redis, wait for +OK, then poll through the proxy.
     * B (concurrent): SET written to Redis's socket, and polling through the
     *   proxy starts at once, without waiting for +OK (read afterwards). The
     *   purge happened after the last stale poll was sent (lower bound) and
     *   before the fresh reply was read (upper bound). */
    int lost = 0;
    for (int mode = 0; mode < 2; mode++) {
        for (int k = 0; k < n; k++) {
            snprintf(key, sizeof key, "i3%012d", k);
            make_value(oldv, vsize, mode == 0 ? "old" : "newA", (unsigned)k);
            make_value(newv, vsize, mode == 0 ? "newA" : "newB", (unsigned)k);
            uint64_t tw = now_ns(), ta = 0;
            if (mode == 0) {
                if ((rep = redisCommand(w, "SET %s %b", key, newv, (size_t)vsize)) == NULL) goto ioerr_w;
                ta = now_ns();
                freeReplyObject(rep);
                set_rtt[k] = ta - tw;
            } else {
                int done = 0;
                redisAppendCommand(w, "SET %s %b", key, newv, (size_t)vsize);
                while (!done)
                    if (redisBufferWrite(w, &done) != REDIS_OK) goto ioerr_w;
            }
            uint64_t ns = 0, tf = 0, t_last_stale_sent = tw, t_fresh_sent = 0;
            for (;;) {
                uint64_t ts = now_ns();
                if ((rep = redisCommand(r, "GET %s", key)) == NULL) goto ioerr_r;
                uint64_t t = now_ns();
                int is_new = rep->type == REDIS_REPLY_STRING && rep->len == (size_t)vsize &&
                             memcmp(rep->str, newv, (size_t)vsize) == 0;
                int is_old = rep->type == REDIS_REPLY_STRING && rep->len == (size_t)vsize &&
                             memcmp(rep->str, oldv, (size_t)vsize) == 0;
                freeReplyObject(rep);
                if (is_new) {
                    tf = t;
                    t_fresh_sent = ts;
                    break;
                }
                if (!is_old) {
                    fprintf(stderr, "invaldelay: %s: GET through the proxy returned neither value\n", key);
                    bad = 1;
                    break;
                }
                ns++;
                t_last_stale_sent = ts;
                if (t - tw > (uint64_t)timeout_ms * 1000000ull) {
                    fprintf(stderr, "invaldelay: %s: still the old value %ld ms after the write\n", key, timeout_ms);
                    lost++;
                    break;
                }
            }
            if (mode == 1) {
                if (redisGetReply(w, (void **)&rep) != REDIS_OK) goto ioerr_w;
                freeReplyObject(rep);
            }
            if (tf == 0) continue;
            if (mode == 0) {
                d_ack[k] = tf - ta;
                stale[k] = ns;
            } else {
                d_write[k] = tf - tw;
                d_low[k] = t_last_stale_sent - tw;
                d_mid[k] = t_fresh_sent - tw;
                polls[k] = ns;
            }
        }
    }
    size_t m = (size_t)n, nidle = 0, nfreeing = 0;
    uint64_t *idle = NULL, *freeing = NULL;
    if (purge_names > 0 && !bad && !lost &&
        time_reads_while_freeing(w, r, purge_names, &idle, &nidle, &freeing, &nfreeing) != 0)
        return 1;
    report("hit_rtt", hit, m, 1e-3);
    report("passthrough_rtt", pass, m, 1e-3);
    report("direct_rtt", direct, m, 1e-3);
    report("set_rtt_direct", set_rtt, m, 1e-3);
    report("A_delay_after_ack", d_ack, m, 1e-3);
    report("A_stale_reads_after_ack", stale, m, 1);
    report("B_delay_after_send_upper", d_write, m, 1e-3);
    report("B_fresh_poll_sent_after", d_mid, m, 1e-3);
    report("B_delay_after_send_lower", d_low, m, 1e-3);
    report("B_stale_reads_after_send", polls, m, 1);
    if (nidle > 0) report("hit_rtt_polled", idle, nidle, 1e-3);
    if (nfreeing > 0) report("hit_rtt_polled_while_freeing", freeing, nfreeing, 1e-3);
    free(idle);
    free(freeing);
    redisFree(w);
    redisFree(r);
    uint64_t *arrays[] = {hit, pass, direct, d_ack, d_write, stale, polls, set_rtt, d_low, d_mid};
    for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++) free(arrays[i]);
    return bad || lost ? 2 : 0;
ioerr_w:
    fprintf(stderr, "invaldelay: Redis connection: %s\n", w->errstr);
    return 1;
ioerr_r:
    fprintf(stderr, "invaldelay: proxy connection: %s\n", r->errstr);
    return 1;
}
