/*
 * tests/fuzz/fuzzcommon.h — what the fuzz targets share: the limit
 * profiles an input selects, and how an input byte sizes a chunk when the
 * input is fed in pieces.
 */
#ifndef SIDECACHE_FUZZ_COMMON_H
#define SIDECACHE_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "protocol/resp.h"

/* Profiles 1-3 are small enough that inputs of a few hundred bytes reach
 * every limit; 0 (and any other) is the default. */
static inline void limits_for(int profile, resp_limits *lim) {
    resp_limits_default(lim);
    switch (profile) {
    case 1:
        lim->max_bulk_len = 64;
        lim->max_multibulk_len = 8;
        lim->max_depth = 3;
        lim->max_inline_len = 32;
        break;
    case 2:
        lim->max_bulk_len = 4096;
        lim->max_multibulk_len = 100;
        lim->max_depth = 16;
        lim->max_inline_len = 512;
        break;
    case 3:
        lim->max_bulk_len = 1;
        lim->max_multibulk_len = 2;
        lim->max_depth = 1;
        lim->max_inline_len = 4;
        break;
    default:
        break;
    }
}

/* Bytes of the next piece: 1-128, or 256-32512 in steps of 256. */
static inline size_t chunk_size(uint8_t b) { return b < 0x80 ? (size_t)b + 1 : (size_t)(b - 0x7f) * 256; }

#endif
