/*
 * util/uthash_dense.h — uthash with short chains. Include right after
 * <uthash.h>, before any HASH_ADD.
 *
 * uthash doubles a table's buckets only when one chain reaches 10 entries,
 * which leaves chains of 2 to 5 entries on average; a lookup walks its chain
 * comparing hashes, and every step is a load from another element, a cache
 * miss in a large table. This redefines uthash's bucket insert with a
 * load-factor rule added: a table also doubles once it holds more elements
 * than buckets, so chains stay under one element on average, for 16 to 32
 * bytes of buckets per element. The growth is bounded by the elements, so
 * the rule applies even where uthash stopped expanding (noexpand, which it
 * sets when doubling does not spread a bad hash).
 */
#ifndef SIDECACHE_UTIL_UTHASH_DENSE_H
#define SIDECACHE_UTIL_UTHASH_DENSE_H

#ifndef UTHASH_H
#error "include <uthash.h> first"
#endif

#undef HASH_ADD_TO_BKT
#define HASH_ADD_TO_BKT(head, hh, addhh, oomed)                                                 \
    do {                                                                                        \
        UT_hash_bucket *_ha_head = &(head);                                                     \
        _ha_head->count++;                                                                      \
        (addhh)->hh_next = _ha_head->hh_head;                                                   \
        (addhh)->hh_prev = NULL;                                                                \
        if (_ha_head->hh_head != NULL) _ha_head->hh_head->hh_prev = (addhh);                    \
        _ha_head->hh_head = (addhh);                                                            \
        if ((addhh)->tbl->num_items > (addhh)->tbl->num_buckets ||                              \
            (_ha_head->count >= ((_ha_head->expand_mult + 1U) * HASH_BKT_CAPACITY_THRESH) &&   \
             !(addhh)->tbl->noexpand)) {                                                        \
            HASH_EXPAND_BUCKETS(addhh, (addhh)->tbl, oomed);                                    \
            IF_HASH_NONFATAL_OOM(if (oomed) HASH_DEL_IN_BKT(head, addhh);)                      \
        }                                                                                       \
    } while (0)

#endif
