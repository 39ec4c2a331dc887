/*
 * tests/unit/test_rules.c — cache/rules.c: which reads are cacheable and the
 * tracking prefixes Redis is given for them. A prefix set that misses a
 * cacheable key leaves its entries stale for ever (no invalidation comes),
 * so every derivation below is checked against the keys it must cover.
 */
#include "cache/rules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "unit.h"

/* The prefixes, sorted, joined by ','. */
static const char *prefix_list(const cache_rules *r) {
    static char out[4096];
    const char *sorted[CACHE_MAX_PREFIXES];
    int n = r->nprefixes;
    for (int i = 0; i < n; i++) sorted[i] = r->prefixes[i];
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(sorted[j - 1], sorted[j]) > 0; j--) {
            const char *t = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = t;
        }
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (i) strcat(out, ",");
        strcat(out, sorted[i]);
    }
    return out;
}

/* Does some prefix begin key? (What Redis's BCAST tracking reports.) */
static int tracked(const cache_rules *r, const char *key) {
    if (r->all_keys) return 1;
    for (int i = 0; i < r->nprefixes; i++)
        if (strncmp(r->prefixes[i], key, strlen(r->prefixes[i])) == 0) return 1;
    return 0;
}

/* The juicefs profile's rules, with key_prefix, tracked by the prefixes
 * the rules imply (TRACK_DERIVED), by "i" and those of the d rule
 * (TRACK_I), or by "i" and "d", as the profile is (TRACK_I_D). */
enum { TRACK_DERIVED, TRACK_I, TRACK_I_D };
static void juicefs_rules(cache_rules *r, const char *key_prefix, int track) {
    char err[256];
    cache_rules_init(r);
    CHECK_EQ_INT(cache_rules_add(r, "GET", "i[1-9]*", key_prefix, 0, err, sizeof err), 0);
    CHECK_EQ_INT(cache_rules_add(r, "HGET", "d[1-9]*", key_prefix, 0, err, sizeof err), 0);
    if (track != TRACK_DERIVED) CHECK_EQ_INT(cache_rules_track_by(r, "i", key_prefix, err, sizeof err), 0);
    if (track == TRACK_I_D) CHECK_EQ_INT(cache_rules_track_by(r, "d", key_prefix, err, sizeof err), 0);
    CHECK_EQ_INT(cache_rules_derive_prefixes(r, err, sizeof err), 0);
}

static void test_leading_class_is_expanded(void) {
    cache_rules r;
    juicefs_rules(&r, "", TRACK_DERIVED);
    CHECK(strcmp(prefix_list(&r), "d1,d2,d3,d4,d5,d6,d7,d8,d9,i1,i2,i3,i4,i5,i6,i7,i8,i9") == 0);
    CHECK(!tracked(&r, "dirUsedSpace") && !tracked(&r, "delfiles") && !tracked(&r, "i0"));
    cache_rules_deinit(&r);
}

/* Keys the JuiceFS rules cache are cached, and tracked. */
static void check_cached_keys_tracked(const cache_rules *r) {
    const char *cached[] = {"i1", "i9", "i123456", "d1", "d42", "d9x"};
    for (size_t k = 0; k < sizeof cached / sizeof *cached; k++) {
        int kind = cached[k][0] == 'i' ? CACHE_KIND_GET : CACHE_KIND_HGET;
        CHECK(cache_rules_match(r, kind, cached[k], strlen(cached[k])));
        CHECK(tracked(r, cached[k]));
    }
}

static void test_track_by_replaces_what_it_covers(void) {
    cache_rules r;
    juicefs_rules(&r, "", TRACK_I);
    CHECK(strcmp(prefix_list(&r), "d1,d2,d3,d4,d5,d6,d7,d8,d9,i") == 0);
    /* every key a rule caches is still tracked; other d keys still are not */
    check_cached_keys_tracked(&r);
    CHECK(!tracked(&r, "dirUsedSpace") && !tracked(&r, "delfiles") && !tracked(&r, "usedSpace"));
    /* what is cached does not change */
    CHECK(!cache_rules_match(&r, CACHE_KIND_GET, "i0", 2) && !cache_rules_match(&r, CACHE_KIND_GET, "ix", 2));
    cache_rules_deinit(&r);
}

/* The profile's two prefixes cover every key its rules cache, and keys of
 * JuiceFS's that begin with d and are never cached; no other. */
static void test_juicefs_profile_tracks_by_i_and_d(void) {
    cache_rules r;
    juicefs_rules(&r, "", TRACK_I_D);
    CHECK(strcmp(prefix_list(&r), "d,i") == 0);
    check_cached_keys_tracked(&r);
    CHECK(tracked(&r, "dirUsedSpace") && tracked(&r, "delfiles"));
    const char *others[] = {"usedSpace", "totalInodes", "nextinode", "c1_0", "sliceRef", "setting", "x1"};
    for (size_t k = 0; k < sizeof others / sizeof *others; k++) CHECK(!tracked(&r, others[k]));
    /* what is cached does not change */
    CHECK(!cache_rules_match(&r, CACHE_KIND_HGET, "delfiles", 8) && !cache_rules_match(&r, CACHE_KIND_GET, "i0", 2));
    cache_rules_deinit(&r);
}

static void test_track_by_takes_the_key_prefix(void) {
    cache_rules r;
    juicefs_rules(&r, "{vol}", TRACK_I);
    CHECK(strcmp(prefix_list(&r), "{vol}d1,{vol}d2,{vol}d3,{vol}d4,{vol}d5,{vol}d6,{vol}d7,{vol}d8,{vol}d9,{vol}i") == 0);
    CHECK(tracked(&r, "{vol}i77") && !tracked(&r, "i77") && !tracked(&r, "{vol}dirUsedSpace"));
    cache_rules_deinit(&r);
    juicefs_rules(&r, "{vol}", TRACK_I_D);
    CHECK(strcmp(prefix_list(&r), "{vol}d,{vol}i") == 0);
    CHECK(tracked(&r, "{vol}d77") && tracked(&r, "{vol}dirUsedSpace") && !tracked(&r, "d77"));
    cache_rules_deinit(&r);
}

static void test_track_by_that_covers_nothing_is_left_out(void) {
    char err[256];
    cache_rules r;
    cache_rules_init(&r);
    CHECK_EQ_INT(cache_rules_add(&r, "GET", "user:[ab]*", "", 0, err, sizeof err), 0);
    CHECK_EQ_INT(cache_rules_track_by(&r, "x", "", err, sizeof err), 0);       /* covers nothing */
    CHECK_EQ_INT(cache_rules_track_by(&r, "user:a1", "", err, sizeof err), 0); /* narrower than user:a */
    CHECK_EQ_INT(cache_rules_derive_prefixes(&r, err, sizeof err), 0);
    CHECK(strcmp(prefix_list(&r), "user:a,user:b") == 0);
    CHECK_EQ_INT(cache_rules_track_by(&r, "user:", "", err, sizeof err), 0);
    CHECK_EQ_INT(cache_rules_derive_prefixes(&r, err, sizeof err), 0);
    CHECK(strcmp(prefix_list(&r), "user:") == 0);
    /* an empty one would be every key: refused */
    CHECK_EQ_INT(cache_rules_track_by(&r, "", "", err, sizeof err), -1);
    CHECK(strstr(err, "empty") != NULL);
    cache_rules_deinit(&r);
}

/* A key needs no PTTL only when every rule that matches it vouches that
 * its keys have no TTL: one rule that does not is enough to ask. */
static void test_no_ttl_only_when_every_matching_rule_says_so(void) {
    char err[256];
    cache_rules r;
    cache_rules_init(&r);
    CHECK_EQ_INT(cache_rules_add(&r, "GET", "i[1-9]*", "", CACHE_RULE_NO_TTL, err, sizeof err), 0);
    CHECK_EQ_INT(cache_rules_add(&r, "HGET", "d[1-9]*", "", CACHE_RULE_NO_TTL, err, sizeof err), 0);
    CHECK_EQ_INT(cache_rules_add(&r, "GET", "i9*", "", 0, err, sizeof err), 0);
    CHECK_EQ_INT(cache_rules_add(&r, "GET", "s*", "", 0, err, sizeof err), 0);
    CHECK_EQ_INT(cache_rules_match(&r, CACHE_KIND_GET, "i12", 3), CACHE_MATCH_NO_TTL);
    CHECK_EQ_INT(cache_rules_match(&r, CACHE_KIND_HGET, "d12", 3), CACHE_MATCH_NO_TTL);
    CHECK_EQ_INT(cache_rules_match(&r, CACHE_KIND_GET, "i92", 3), CACHE_MATCH); /* also i9* */
    CHECK_EQ_INT(cache_rules_match(&r, CACHE_KIND_GET, "s1", 2), CACHE_MATCH);
    CHECK_EQ_INT(cache_rules_match(&r, CACHE_KIND_GET, "d12", 3), 0);
    CHECK_EQ_INT(cache_rules_match(&r, CACHE_KIND_GET, "x", 1), 0);
    cache_rules_deinit(&r);
}

static void test_a_rule_for_every_key_tracks_all(void) {
    char err[256];
    cache_rules r;
    cache_rules_init(&r);
    CHECK_EQ_INT(cache_rules_add(&r, "GET", "*", "", 0, err, sizeof err), 0);
    CHECK_EQ_INT(cache_rules_track_by(&r, "i", "", err, sizeof err), 0);
    CHECK_EQ_INT(cache_rules_derive_prefixes(&r, err, sizeof err), 0);
    CHECK(r.all_keys && r.nprefixes == 0);
    cache_rules_deinit(&r);
}

/* cache_rules_match_any turns a key down by its first byte only when no
 * rule of any kind matches it: the same answer as asking each kind, for
 * literal, escaped, class, wildcard, prefixed and empty patterns. */
static void test_match_any_is_match_of_some_kind(void) {
    static const char *const sets[][3] = {
        {"GET i[1-9]*", "HGET d[1-9]*", NULL},
        {"GET \\*x", "HGET [a-c]y*", NULL},
        {"HGET ?z", "GET user:*", NULL},
        {"GET *", NULL, NULL},
        {"GET ", "HGET d", NULL},
    };
    static const char *const keys[] = {"", "i", "i1", "i12", "d1", "dirUsedSpace", "delfiles", "usedSpace",
                                        "*x", "\\*x", "ay", "by1", "cy", "dy", "zz", "az", "user:1", "user",
                                        "{1}i1", "d", "x"};
    const char *const prefixes[] = {"", "{1}"};
    for (size_t k = 0; k < sizeof prefixes / sizeof *prefixes; k++)
        for (size_t i = 0; i < sizeof sets / sizeof *sets; i++) {
            cache_rules r;
            char err[256];
            cache_rules_init(&r);
            for (int j = 0; j < 3 && sets[i][j] != NULL; j++) {
                char cmd[16];
                const char *sp = strchr(sets[i][j], ' ');
                memcpy(cmd, sets[i][j], (size_t)(sp - sets[i][j]));
                cmd[sp - sets[i][j]] = '\0';
                REQUIRE(cache_rules_add(&r, cmd, sp + 1, prefixes[k], 0, err, sizeof err) == 0);
            }
            for (size_t j = 0; j < sizeof keys / sizeof *keys; j++) {
                char key[64];
                snprintf(key, sizeof key, "%s%s", j % 2 ? prefixes[k] : "", keys[j]);
                size_t n = strlen(key);
                int some = cache_rules_match(&r, CACHE_KIND_GET, key, n) || cache_rules_match(&r, CACHE_KIND_HGET, key, n);
                CHECK_EQ_INT(cache_rules_match_any(&r, key, n), some);
            }
            cache_rules_deinit(&r);
        }
}

/* Patterns of the shape matched without the glob (literal text, a class,
 * '*') and patterns near it, against every short key over the bytes they
 * name: a rule matches exactly what the glob does. */
static void test_simple_shapes_match_as_the_glob(void) {
    static const char *const patterns[] = {
        "i[1-9]*", "{1}d[1-9]*", "abc", "abc*", "a**", "[a-c]", "[a-c]*", "*", "", "x[ac-]*", "x[a-]",
        "x[]a]*", "x[a", "x[^a]*", "x[\\a]*", "a\\*", "a?*", "i[1-9]*x", "[z-a]*", "d[1-9]", "i1*",
    };
    static const char alphabet[] = {'a', 'b', 'c', 'd', 'i', 'x', 'z', '1', '9', '0', '-', ']', '*', '{', '}',
                                    '\\', '^', '\0', (char)0xff};
    const size_t na = sizeof alphabet;
    int simple = 0;
    for (size_t i = 0; i < sizeof patterns / sizeof *patterns; i++) {
        cache_rules r;
        char err[256];
        cache_rules_init(&r);
        REQUIRE(cache_rules_add(&r, "GET", patterns[i], NULL, 0, err, sizeof err) == 0);
        simple += r.rules[0].simple;
        /* every key of 0 to 4 bytes over the alphabet, and every byte after
         * the pattern's literal text */
        char key[8];
        size_t total = 1, pow = 1;
        for (int len = 1; len <= 4; len++) total += (pow *= na);
        for (size_t code = 0; code < total; code++) {
            size_t c = code, len = 0, span = 1;
            while (len < 4 && c >= span) c -= span, span *= na, len++;
            for (size_t k = 0; k < len; k++, c /= na) key[k] = alphabet[c % na];
            int want = cache_glob_match(patterns[i], strlen(patterns[i]), key, len);
            if (cache_rules_match(&r, CACHE_KIND_GET, key, len) != want) {
                fprintf(stderr, "pattern %s, key of %zu bytes: glob %d\n", patterns[i], len, want);
                CHECK(0);
                break;
            }
        }
        for (unsigned b = 0; b < 256; b++) {
            size_t lit = r.rules[0].lit_len;
            if (lit + 2 > sizeof key) break;
            memcpy(key, patterns[i], lit);
            key[lit] = (char)b;
            key[lit + 1] = 'q';
            for (size_t len = lit + 1; len <= lit + 2; len++)
                CHECK_EQ_INT(cache_rules_match(&r, CACHE_KIND_GET, key, len),
                             cache_glob_match(patterns[i], strlen(patterns[i]), key, len));
        }
        cache_rules_deinit(&r);
    }
    /* the usual shapes are read as such (the rest goes to the glob) */
    CHECK(simple >= 12);
}

int main(void) {
    RUN(test_leading_class_is_expanded);
    RUN(test_track_by_replaces_what_it_covers);
    RUN(test_juicefs_profile_tracks_by_i_and_d);
    RUN(test_track_by_takes_the_key_prefix);
    RUN(test_track_by_that_covers_nothing_is_left_out);
    RUN(test_a_rule_for_every_key_tracks_all);
    RUN(test_no_ttl_only_when_every_matching_rule_says_so);
    RUN(test_match_any_is_match_of_some_kind);
    RUN(test_simple_shapes_match_as_the_glob);
    return unit_report();
}
