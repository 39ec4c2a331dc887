/*
 * tests/fuzz/fuzzcommon.h — what the fuzz targets share: CHECK, the limit
 * profiles an input selects, how an input byte sizes a chunk when the
 * input is fed in pieces, and reading Redis 7.0's COMMAND reply fixture.
 */
#ifndef SIDECACHE_FUZZ_COMMON_H
#define SIDECACHE_FUZZ_COMMON_H

#include <libgen.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "protocol/resp.h"

/* An invariant the target checks: a failure is a finding. */
#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #c);             \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Profiles 1-3 are small enough that inputs of a few hundred bytes reach
 * every limit; 0 (and any other) is the default. */
static inline void limits_for(int profile, resp_limits *lim) {
    resp_limits_default(lim);
    switch (profile) {
    case 1:
        lim->max_bulk_len = 64;
        lim->max_multibulk_len = 8;
        lim->max_inline_len = 32;
        break;
    case 2:
        lim->max_bulk_len = 4096;
        lim->max_multibulk_len = 100;
        lim->max_inline_len = 512;
        break;
    case 3:
        lim->max_bulk_len = 1;
        lim->max_multibulk_len = 2;
        lim->max_inline_len = 4;
        break;
    default:
        break;
    }
}

/* Bytes of the next piece: 1-128, or 256-32512 in steps of 256. */
static inline size_t chunk_size(uint8_t b) { return b < 0x80 ? (size_t)b + 1 : (size_t)(b - 0x7f) * 256; }

/* A whole file, malloc'ed; NULL if it cannot be read or is empty. */
static inline char *fuzz_slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;
    if (f == NULL) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n)) != NULL && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        *len = (size_t)n;
    } else {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

#define FUZZ_COMMAND_FIXTURE "tests/unit/data/command-7.0.resp"

/* Redis 7.0's COMMAND reply: from $SIDECACHE_COMMAND_RESP, else the fixture
 * from the repository root, else beside the binary's directory (build-fuzz/).
 * Exits with a message naming target if none can be read. */
static inline char *fuzz_command_fixture(const char *target, int argc, char **argv, size_t *len) {
    const char *env = getenv("SIDECACHE_COMMAND_RESP");
    char *reply = env != NULL ? fuzz_slurp(env, len) : NULL;
    if (reply == NULL) reply = fuzz_slurp(FUZZ_COMMAND_FIXTURE, len);
    if (reply == NULL && argc > 0) {
        char exe[4096], path[4200];
        snprintf(exe, sizeof exe, "%s", argv[0]);
        snprintf(path, sizeof path, "%s/../" FUZZ_COMMAND_FIXTURE, dirname(exe));
        reply = fuzz_slurp(path, len);
    }
    if (reply == NULL) {
        fprintf(stderr, "%s: cannot read " FUZZ_COMMAND_FIXTURE
                        " (run from the repository root or set SIDECACHE_COMMAND_RESP)\n", target);
        exit(2);
    }
    return reply;
}

#endif
