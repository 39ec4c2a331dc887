/*
 * protocol/info.h — what sidecache reads in Redis's INFO replies.
 *
 * Pure code, like resp.h: no I/O, no allocation.
 */
#ifndef SIDECACHE_PROTOCOL_INFO_H
#define SIDECACHE_PROTOCOL_INFO_H

#include <stddef.h>

/* Redis's run_id: 40 hex digits, new at every start of redis-server, the
 * same for every connection to one running server. */
#define INFO_RUN_ID_LEN 40

/* The run_id line of one whole INFO reply frame (a RESP2 bulk string, or a
 * RESP3 verbatim one: "=<len>\r\ntxt:..."), copied into out with a NUL.
 * Returns 0, or -1 (out emptied) when the frame is not such a reply or has
 * no well-formed run_id line. */
int info_run_id(const char *frame, size_t len, char out[INFO_RUN_ID_LEN + 1]);

/* 1 if one whole INFO reply frame (as above) says redis_mode:cluster (a
 * Redis Cluster node), else 0. */
int info_is_cluster(const char *frame, size_t len);

#endif
