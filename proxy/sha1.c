/*
 * proxy/sha1.c — see sha1.h. The low-level SHA1_Init/Update/Final work in
 * a context on the stack. OpenSSL 3 deprecates them in favour of EVP, which
 * allocates at every digest: they are used here on purpose, in this file
 * alone.
 */
#include "proxy/sha1.h"

#include <openssl/sha.h>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

int px_sha1(const void *data, size_t len, unsigned char md[PX_SHA1_LEN]) {
    SHA_CTX ctx;
    if (SHA1_Init(&ctx) != 1 || SHA1_Update(&ctx, data, len) != 1 || SHA1_Final(md, &ctx) != 1) return -1;
    return 0;
}
