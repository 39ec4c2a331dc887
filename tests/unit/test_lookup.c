/*
 * tests/unit/test_lookup.c — the lookup script answered from the cache
 * (proxy/lookup.c): matching, the reply built from cached entries, what is
 * left to Redis, and reading Redis's replies.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "proxy/lookup.h"
#include "unit.h"

#define SHA1X "8526c64984678fc27f67f44755c8ba7dcdf7ea60"
/* The JuiceFS 1.x lookup script, whose SHA1 is SHA1X. */
static const char body1x[] =
    "\nlocal buf = redis.call('HGET', KEYS[1], KEYS[2])\nif not buf then\n    error(\"ENOENT\")\nend\n"
    "local ino = struct.unpack(\">I8\", string.sub(buf, 2))\n-- double float has 52 significant bits\n"
    "if ino > 4503599627370495 then\n    error(\"ENOTSUP\")\nend\n"
    "return {ino, redis.call('GET', \"i\" .. string.format(\"%.f\", ino))}\n";

static const char enoent[] = "-ERR user_script:4: ENOENT script: " SHA1X ", on @user_script:4.\r\n";

static int argv_of(resp_arg *a, const char *const *words, int n) {
    for (int i = 0; i < n; i++) {
        a[i].ptr = words[i];
        a[i].len = strlen(words[i]);
    }
    return n;
}

static void fill(cache *c, int kind, const char *key, const char *field, const char *val, size_t vlen, int nil) {
    uint64_t t = cache_fill_begin(c, 1, 0, kind, key, strlen(key), field, strlen(field), 0);
    cache_fill_complete(c, t, 1, 0, kind, key, strlen(key), field, strlen(field), val, vlen, nil, 0);
}

static void dentry(char out[9], uint64_t ino) {
    out[0] = 1;
    for (int i = 0; i < 8; i++) out[1 + i] = (char)(ino >> (56 - 8 * i));
}

static cache *mk(void) {
    cache_config cfg = {1 << 20, 64 * 1024, 0};
    return cache_new(&cfg);
}

static void test_match(void) {
    px_lookup *l = px_lookup_new();
    resp_arg a[8];
    REQUIRE(l != NULL);
    CHECK_EQ_INT(px_lookup_add(l, SHA1X), 0);
    CHECK_EQ_INT(px_lookup_add(l, "8526C64984678FC27F67F44755C8BA7DCDF7EA60"), 0); /* same one */
    CHECK_EQ_INT(px_lookup_add(l, "xyz"), -1);
    const char *ok[] = {"evalsha", "8526C64984678fc27f67f44755c8ba7dcdf7ea60", "2", "d1", "name"};
    CHECK_EQ_INT(px_lookup_match(l, argv_of(a, ok, 5), a), 0);
    const char *three[] = {"EVALSHA", SHA1X, "3", "d1", "name", "x"};
    CHECK_EQ_INT(px_lookup_match(l, argv_of(a, three, 6), a), -1);
    const char *args[] = {"EVALSHA", SHA1X, "2", "d1", "name", "argv1"};
    CHECK_EQ_INT(px_lookup_match(l, argv_of(a, args, 6), a), -1);
    const char *other[] = {"EVALSHA", "72af033cd6d0773efd6a53eaf9490b4a138f55af", "2", "d1", "n"};
    CHECK_EQ_INT(px_lookup_match(l, argv_of(a, other, 5), a), -1);
    const char *eval[] = {"EVAL", SHA1X, "2", "d1", "name"};
    CHECK_EQ_INT(px_lookup_match(l, argv_of(a, eval, 5), a), -1);
    /* SCRIPT LOAD: the body's SHA1 */
    CHECK_EQ_INT(px_lookup_match_body(l, body1x, sizeof body1x - 1), 0);
    CHECK_EQ_INT(px_lookup_match_body(l, body1x, sizeof body1x - 2), -1);
    px_lookup_free(l);
}

/* What a forwarded lookup leaves: name -> 8-byte big-endian inode, or nil. */
static void fill_looked_up(cache *c, const char *name, uint64_t ino, int nil) {
    char d[9];
    dentry(d, ino);
    fill(c, CACHE_KIND_LOOKUP, "d1", name, d + 1, 8, nil);
}

static void test_answer(void) {
    px_lookup *l = px_lookup_new();
    cache *c = mk();
    resp_buf out;
    char d[9];
    char attr[72];
    REQUIRE(l != NULL && c != NULL);
    resp_buf_init(&out);
    for (int i = 0; i < 72; i++) attr[i] = (char)i;
    px_lookup_add(l, SHA1X);
    fill_looked_up(c, "a", 12345, 0);
    fill(c, CACHE_KIND_GET, "i12345", "", attr, 72, 0);
    /* not known to be loaded on Redis: Redis must answer (NOSCRIPT?) */
    CHECK_EQ_INT(px_lookup_answer(l, 0, c, 1, 0, 2, "d1", 2, "a", 1, 0, &out), 0);
    px_lookup_set_loaded(l, 0, 1);
    REQUIRE(px_lookup_answer(l, 0, c, 1, 0, 2, "d1", 2, "a", 1, 0, &out) == 1);
    {
        char want[128];
        int n = snprintf(want, sizeof want, "*2\r\n:12345\r\n$72\r\n");
        REQUIRE(out.len == (size_t)n + 72 + 2);
        CHECK(memcmp(out.data, want, (size_t)n) == 0 && memcmp(out.data + n, attr, 72) == 0);
    }
    /* other partition or db: nothing */
    resp_buf_reset(&out);
    CHECK_EQ_INT(px_lookup_answer(l, 0, c, 2, 0, 2, "d1", 2, "a", 1, 0, &out), 0);
    CHECK_EQ_INT(px_lookup_answer(l, 0, c, 1, 1, 2, "d1", 2, "a", 1, 0, &out), 0);
    /* an HGET entry of the name does not serve (C8: Redis checks a lookup's
     * ACL on the name and on the script's GET), found or missing */
    dentry(d, 12345);
    fill(c, CACHE_KIND_HGET, "d1", "b", d, 9, 0);
    CHECK_EQ_INT(px_lookup_answer(l, 0, c, 1, 0, 3, "d1", 2, "b", 1, 0, &out), 0);
    fill_looked_up(c, "b", 12345, 0);
    CHECK_EQ_INT(px_lookup_answer(l, 0, c, 1, 0, 3, "d1", 2, "b", 1, 0, &out), 1);
    fill(c, CACHE_KIND_HGET, "d1", "hgone", NULL, 0, 1);
    px_lookup_learn_missing(l, 0, 2, enoent, sizeof enoent - 1);
    CHECK_EQ_INT(px_lookup_answer(l, 0, c, 1, 0, 2, "d1", 2, "hgone", 5, 0, &out), 0);
    /* a missing name: only with Redis's own reply learned, per protocol */
    px_lookup_forget(l);
    px_lookup_set_loaded(l, 0, 1);
    fill_looked_up(c, "gone", 0, 1);
    resp_buf_reset(&out);
    CHECK_EQ_INT(px_lookup_answer(l, 0, c, 1, 0, 2, "d1", 2, "gone", 4, 0, &out), 0);
    px_lookup_learn_missing(l, 0, 2, enoent, sizeof enoent - 1);
    CHECK_EQ_INT(px_lookup_answer(l, 0, c, 1, 0, 2, "d1", 2, "gone", 4, 0, &out), 1);
    CHECK_MEM(out.data, out.len, enoent);
    CHECK_EQ_INT(px_lookup_answer(l, 0, c, 1, 0, 3, "d1", 2, "gone", 4, 0, &out), 0);
    /* the inode not cached, nil, or a dentry of another length: Redis's */
    fill_looked_up(c, "noattr", 777, 0);
    CHECK_EQ_INT(px_lookup_answer(l, 0, c, 1, 0, 2, "d1", 2, "noattr", 6, 0, &out), 0);
    fill(c, CACHE_KIND_GET, "i777", "", NULL, 0, 1);
    CHECK_EQ_INT(px_lookup_answer(l, 0, c, 1, 0, 2, "d1", 2, "noattr", 6, 0, &out), 0);
    dentry(d, 12345);
    fill(c, CACHE_KIND_LOOKUP, "d1", "short", d + 1, 7, 0);
    CHECK_EQ_INT(px_lookup_answer(l, 0, c, 1, 0, 2, "d1", 2, "short", 5, 0, &out), 0);
    /* an inode from 10^14 on (format differences, ENOTSUP above 2^52) */
    fill_looked_up(c, "big", PX_LOOKUP_MAX_INODE, 0);
    fill(c, CACHE_KIND_GET, "i100000000000000", "", attr, 72, 0);
    CHECK_EQ_INT(px_lookup_answer(l, 0, c, 1, 0, 2, "d1", 2, "big", 3, 0, &out), 0);
    /* forgetting (a flush): nothing is answered until Redis shows the
     * script again, and the learned error is gone */
    px_lookup_forget(l);
    CHECK_EQ_INT(px_lookup_answer(l, 0, c, 1, 0, 2, "d1", 2, "a", 1, 0, &out), 0);
    px_lookup_set_loaded(l, 0, 1);
    CHECK_EQ_INT(px_lookup_answer(l, 0, c, 1, 0, 2, "d1", 2, "gone", 4, 0, &out), 0);
    /* an invalidation of the directory purges every dentry of it */
    CHECK_EQ_INT(px_lookup_answer(l, 0, c, 1, 0, 2, "d1", 2, "b", 1, 0, &out), 1);
    cache_invalidate_key(c, "d1", 2);
    CHECK_EQ_INT(px_lookup_answer(l, 0, c, 1, 0, 2, "d1", 2, "a", 1, 0, &out), 0);
    CHECK_EQ_INT(px_lookup_answer(l, 0, c, 1, 0, 2, "d1", 2, "b", 1, 0, &out), 0);
    resp_buf_deinit(&out);
    cache_free(c);
    px_lookup_free(l);
}

static void test_parse_reply(void) {
    uint64_t ino = 0;
    const char *attr = NULL;
    size_t alen = 0;
    static const char found[] = "*2\r\n:42\r\n$3\r\nabc\r\n";
    CHECK_EQ_INT(px_lookup_parse_reply(found, sizeof found - 1, &ino, &attr, &alen), PX_LOOKUP_FOUND);
    CHECK_EQ_INT(ino, 42);
    CHECK_MEM(attr, alen, "abc");
    CHECK_EQ_INT(px_lookup_parse_reply(enoent, sizeof enoent - 1, &ino, &attr, &alen), PX_LOOKUP_MISSING);
    CHECK_EQ_INT(px_lookup_parse_reply("$-1\r\n", 5, &ino, &attr, &alen), PX_LOOKUP_MISSING);
    CHECK_EQ_INT(px_lookup_parse_reply("_\r\n", 3, &ino, &attr, &alen), PX_LOOKUP_MISSING);
    static const char noscript[] = "-NOSCRIPT No matching script. Please use EVAL.\r\n";
    CHECK_EQ_INT(px_lookup_parse_reply(noscript, sizeof noscript - 1, &ino, &attr, &alen), PX_LOOKUP_NOSCRIPT);
    static const char enotsup[] = "-ERR user_script:8: ENOTSUP script: x\r\n";
    CHECK_EQ_INT(px_lookup_parse_reply(enotsup, sizeof enotsup - 1, &ino, &attr, &alen), PX_LOOKUP_OTHER);
    static const char nilattr[] = "*2\r\n:42\r\n$-1\r\n";
    CHECK_EQ_INT(px_lookup_parse_reply(nilattr, sizeof nilattr - 1, &ino, &attr, &alen), PX_LOOKUP_OTHER);
    static const char one[] = "*1\r\n:42\r\n";
    CHECK_EQ_INT(px_lookup_parse_reply(one, sizeof one - 1, &ino, &attr, &alen), PX_LOOKUP_OTHER);
    static const char trail[] = "*2\r\n:42\r\n$3\r\nabc\r\nX";
    CHECK_EQ_INT(px_lookup_parse_reply(trail, sizeof trail - 1, &ino, &attr, &alen), PX_LOOKUP_OTHER);
    static const char neg[] = "*2\r\n:-1\r\n$3\r\nabc\r\n";
    CHECK_EQ_INT(px_lookup_parse_reply(neg, sizeof neg - 1, &ino, &attr, &alen), PX_LOOKUP_OTHER);
}

static void test_inode_key(void) {
    char k[24];
    size_t n = px_lookup_inode_key(1, k);
    CHECK_MEM(k, n, "i1");
    n = px_lookup_inode_key(99999999999999ULL, k);
    CHECK_MEM(k, n, "i99999999999999");
    n = px_lookup_inode_key(UINT64_MAX, k);
    CHECK_MEM(k, n, "i18446744073709551615");
}

int main(void) {
    RUN(test_match);
    RUN(test_answer);
    RUN(test_parse_reply);
    RUN(test_inode_key);
    return unit_report();
}
