/*
 * bench/cachepurge.c — CPU cost of the cache's purges, without the network.
 *
 * Fills a cache (cache/cache.h, linked from the tree being measured) the way
 * a prewarmed JuiceFS directory looks to sidecache: FILES inode attributes
 * (GET i<ino>, each its own group) and FILES names of one directory (HGET d1
 * f<n>, one group). Then, as a batch unlink does:
 *   keys   purges the inode keys BATCH at a time with cache_invalidate_keys
 *          (what a transaction's queued DELs cost; one entry per group)
 *   group  purges d1 with cache_invalidate_key (every name at once)
 * and prints two lines "metric,value": keys_ns_per_key, group_ns_per_entry.
 * Run by bench/micro.sh, which compares two trees side by side.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/cache.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void die(const char *what) {
    fprintf(stderr, "cachepurge: %s\n", what);
    exit(1);
}

/* Fills one entry; a cache that refuses it would make the figures lie. */
static void fill(cache *c, int kind, const char *key, const char *field, const char *val) {
    size_t klen = strlen(key), flen = strlen(field);
    uint64_t t = cache_fill_begin(c, 0, 0, kind, key, klen, field, flen, 0);
    if (t == 0 || !cache_fill_complete(c, t, 0, 0, kind, key, klen, field, flen, val, strlen(val), 0, 0))
        die("a fill was refused (cache too small?)");
}

int main(int argc, char **argv) {
    long files = argc > 1 ? strtol(argv[1], NULL, 10) : 100000;
    long batch = argc > 2 ? strtol(argv[2], NULL, 10) : 250;
    if (files < 1 || batch < 1 || batch > files) die("usage: cachepurge [FILES [BATCH]]");

    cache_config cfg = {(size_t)4 << 30, 65536, 0};
    cache *c = cache_new(&cfg);
    if (c == NULL) die("out of memory");
    /* a JuiceFS attribute is 72 bytes, a directory entry 9 */
    const char *attr = "attrattrattrattrattrattrattrattrattrattrattrattrattrattrattrattrattrattr";
    char key[32], field[32];
    for (long i = 0; i < files; i++) {
        snprintf(key, sizeof key, "i%ld", 1000 + i);
        fill(c, CACHE_KIND_GET, key, "", attr);
        snprintf(field, sizeof field, "f%ld", i);
        fill(c, CACHE_KIND_HGET, "d1", field, "entryentr");
    }

    /* the keys are formatted before the clock starts */
    char (*names)[32] = malloc((size_t)batch * sizeof *names);
    cache_keyref *refs = malloc((size_t)batch * sizeof *refs);
    if (names == NULL || refs == NULL) die("out of memory");
    double keys_s = 0;
    size_t purged = 0;
    for (long b = 0; b + batch <= files; b += batch) {
        for (long j = 0; j < batch; j++) {
            snprintf(names[j], sizeof names[j], "i%ld", 1000 + b + j);
            refs[j] = (cache_keyref){names[j], strlen(names[j])};
        }
        double t0 = now_s();
        purged += cache_invalidate_keys(c, refs, (size_t)batch);
        keys_s += now_s() - t0;
    }
    if (purged != (size_t)(files / batch * batch)) die("the keys purge missed entries");

    double t0 = now_s();
    size_t names_purged = cache_invalidate_key(c, "d1", 2);
    double group_s = now_s() - t0;
    if (names_purged != (size_t)files) die("the group purge missed entries");

    printf("keys_ns_per_key,%.1f\n", keys_s * 1e9 / (double)purged);
    printf("group_ns_per_entry,%.1f\n", group_s * 1e9 / (double)names_purged);
    cache_free(c);
    free(names);
    free(refs);
    return 0;
}
