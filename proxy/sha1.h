/*
 * proxy/sha1.h — the SHA-1 of a buffer (the lookup script's body, the ACL
 * list), computed with no allocation: OpenSSL 3's one-shot SHA1() fetches
 * the digest and makes a context at every call (three allocations), and
 * one that fails there may crash in libcrypto; even EVP_DigestInit on a
 * context kept for reuse allocates each time.
 */
#ifndef SIDECACHE_PROXY_SHA1_H
#define SIDECACHE_PROXY_SHA1_H

#include <stddef.h>

#define PX_SHA1_LEN 20

/* md = SHA-1(data). Returns 0, or -1 (OpenSSL failed: md is not set). */
int px_sha1(const void *data, size_t len, unsigned char md[PX_SHA1_LEN]);

#endif
