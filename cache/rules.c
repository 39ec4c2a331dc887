/*
 * cache/rules.c — see rules.h.
 */
#include "cache/rules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cache/cache.h"

void cache_rules_init(cache_rules *r) { memset(r, 0, sizeof *r); }

static void clear_prefixes(cache_rules *r) {
    for (int i = 0; i < r->nprefixes; i++) free(r->prefixes[i]);
    r->nprefixes = 0;
    r->all_keys = 0;
}

void cache_rules_deinit(cache_rules *r) {
    clear_prefixes(r);
    for (int i = 0; i < r->ntrack_by; i++) free(r->track_by[i]);
    r->ntrack_by = 0;
}

int cache_rules_track_by(cache_rules *r, const char *prefix, const char *key_prefix, char *err, size_t errlen) {
    if (prefix[0] == '\0') {
        snprintf(err, errlen, "a tracking prefix must not be empty");
        return -1;
    }
    if (r->ntrack_by >= CACHE_MAX_RULES) {
        snprintf(err, errlen, "at most %d tracking prefixes to track by", CACHE_MAX_RULES);
        return -1;
    }
    size_t n = strlen(key_prefix ? key_prefix : "") + strlen(prefix);
    char *s = malloc(n + 1);
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(s, n + 1, "%s%s", key_prefix ? key_prefix : "", prefix);
    r->track_by[r->ntrack_by++] = s;
    return 0;
}

/* The byte a key matching pattern begins with, into r->first: a literal
 * first byte (escaped or not) gives one; a wildcard or a class gives every
 * byte, as does the empty pattern (it matches only the empty key, which
 * has no first byte). */
static void first_bytes_add(cache_rules *r, const char *p, size_t n) {
    unsigned b;
    if (n >= 2 && p[0] == '\\')
        b = (unsigned char)p[1];
    else if (n >= 1 && p[0] != '*' && p[0] != '?' && p[0] != '[' && p[0] != '\\')
        b = (unsigned char)p[0];
    else {
        memset(r->first, 0xff, sizeof r->first);
        return;
    }
    r->first[b / 64] |= 1ULL << (b % 64);
}

/* Where the class that starts at p[0] == '[' ends (one past its ']'), read
 * as cache_glob_match reads it; 0 for a class it would not read as closed,
 * or one with '^' or an escape (left to the glob). */
static size_t class_end(const char *p, size_t n) {
    size_t i = 1;
    if (i < n && p[i] == '^') return 0;
    while (i < n && p[i] != ']') {
        if (p[i] == '\\') return 0;
        if (n - i >= 3 && p[i + 1] == '-' && p[i + 2] != ']') i += 2;
        i++;
    }
    return i < n ? i + 1 : 0;
}

/* Reads the rule's pattern as the usual shape (cache_rule.simple) if it is
 * one. The class's bytes are those the glob itself takes, one at a time. */
static void compile_simple(cache_rule *rule) {
    const char *p = rule->pattern;
    size_t n = rule->plen, i = 0, ce = 0;
    while (i < n && p[i] != '*' && p[i] != '?' && p[i] != '[' && p[i] != '\\') i++;
    rule->lit_len = i;
    rule->has_class = 0;
    memset(rule->cls, 0, sizeof rule->cls);
    if (i < n && p[i] == '[') {
        if ((ce = class_end(p + i, n - i)) == 0) return;
        for (unsigned b = 0; b < 256; b++) {
            char c = (char)b;
            if (cache_glob_match(p + i, ce, &c, 1)) rule->cls[b / 64] |= 1ULL << (b % 64);
        }
        rule->has_class = 1;
        i += ce;
    }
    rule->tail_star = i < n;
    for (; i < n; i++)
        if (p[i] != '*') return;
    rule->simple = 1;
}

/* One rule against a key. */
static int rule_match(const cache_rule *rule, const char *key, size_t klen) {
    if (!rule->simple) return cache_glob_match(rule->pattern, rule->plen, key, klen);
    size_t need = rule->lit_len + (size_t)rule->has_class;
    if (klen < need || (!rule->tail_star && klen != need)) return 0;
    /* a few bytes ("i", "{1}d"): no call */
    for (size_t i = 0; i < rule->lit_len; i++)
        if (key[i] != rule->pattern[i]) return 0;
    if (rule->has_class) {
        unsigned b = (unsigned char)key[rule->lit_len];
        return (int)((rule->cls[b / 64] >> (b % 64)) & 1);
    }
    return 1;
}

int cache_rules_add(cache_rules *r, const char *command, const char *pattern, const char *key_prefix,
                    unsigned flags, char *err, size_t errlen) {
    int kind;
    if (strcasecmp(command, "GET") == 0)
        kind = CACHE_KIND_GET;
    else if (strcasecmp(command, "HGET") == 0)
        kind = CACHE_KIND_HGET;
    else {
        snprintf(err, errlen, "cache-rule: command '%.32s' cannot be cached (GET or HGET)", command);
        return -1;
    }
    if (r->nrules >= CACHE_MAX_RULES) {
        snprintf(err, errlen, "cache-rule: at most %d rules", CACHE_MAX_RULES);
        return -1;
    }
    cache_rule *rule = &r->rules[r->nrules];
    int n = snprintf(rule->pattern, sizeof rule->pattern, "%s%s", key_prefix ? key_prefix : "", pattern);
    if (n < 0 || (size_t)n >= sizeof rule->pattern) {
        snprintf(err, errlen, "cache-rule: pattern too long (at most %zu bytes)", sizeof rule->pattern - 1);
        return -1;
    }
    rule->kind = kind;
    rule->flags = flags;
    rule->plen = (size_t)n;
    rule->simple = 0;
    compile_simple(rule);
    r->nrules++;
    first_bytes_add(r, rule->pattern, rule->plen);
    return 0;
}

int cache_glob_match(const char *p, size_t plen, const char *s, size_t slen) {
    while (plen > 0) {
        switch (*p) {
        case '*':
            while (plen > 1 && p[1] == '*') p++, plen--;
            if (plen == 1) return 1;
            for (size_t i = 0; i <= slen; i++)
                if (cache_glob_match(p + 1, plen - 1, s + i, slen - i)) return 1;
            return 0;
        case '?':
            if (slen == 0) return 0;
            s++, slen--;
            break;
        case '[': {
            if (slen == 0) return 0;
            p++, plen--;
            int negate = plen > 0 && *p == '^';
            if (negate) p++, plen--;
            int match = 0;
            while (plen > 0 && *p != ']') {
                if (*p == '\\' && plen >= 2) {
                    p++, plen--;
                    if (*p == *s) match = 1;
                } else if (plen >= 3 && p[1] == '-' && p[2] != ']') {
                    unsigned char lo = (unsigned char)p[0], hi = (unsigned char)p[2];
                    if (lo > hi) { unsigned char t = lo; lo = hi; hi = t; }
                    if ((unsigned char)*s >= lo && (unsigned char)*s <= hi) match = 1;
                    p += 2, plen -= 2;
                } else if (*p == *s) {
                    match = 1;
                }
                p++, plen--;
            }
            if (negate) match = !match;
            if (!match) return 0;
            s++, slen--;
            break;
        }
        case '\\':
            if (plen >= 2) p++, plen--;
            /* fall through */
        default:
            if (slen == 0 || *p != *s) return 0;
            s++, slen--;
            break;
        }
        if (plen == 0) break;
        p++, plen--;
    }
    return slen == 0;
}

int cache_rules_match(const cache_rules *r, int kind, const char *key, size_t klen) {
    int m = 0;
    for (int i = 0; i < r->nrules; i++) {
        const cache_rule *rule = &r->rules[i];
        if (rule->kind != kind || !rule_match(rule, key, klen)) continue;
        /* one rule that does not vouch for the key having no TTL is enough */
        if (!(rule->flags & CACHE_RULE_NO_TTL)) return CACHE_MATCH;
        m = CACHE_MATCH_NO_TTL;
    }
    return m;
}

int cache_rules_match_any(const cache_rules *r, const char *key, size_t klen) {
    if (klen > 0) {
        unsigned b = (unsigned char)key[0];
        if (!(r->first[b / 64] & (1ULL << (b % 64)))) return 0;
    }
    for (int i = 0; i < r->nrules; i++)
        if (rule_match(&r->rules[i], key, klen)) return 1;
    return 0;
}

static int add_prefix(cache_rules *r, const char *p, size_t n, char *err, size_t errlen) {
    if (n == 0) {
        r->all_keys = 1;
        return 0;
    }
    for (int i = 0; i < r->nprefixes; i++)
        if (strlen(r->prefixes[i]) == n && memcmp(r->prefixes[i], p, n) == 0) return 0;
    if (r->nprefixes >= CACHE_MAX_PREFIXES) {
        snprintf(err, errlen, "cache rules imply more than %d tracking prefixes", CACHE_MAX_PREFIXES);
        return -1;
    }
    char *s = malloc(n + 1);
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(s, p, n);
    s[n] = '\0';
    r->prefixes[r->nprefixes++] = s;
    return 0;
}

/* The prefixes of one pattern: its literal head, times a leading class. */
static int pattern_prefixes(cache_rules *r, const char *pat, char *err, size_t errlen) {
    char lit[256];
    size_t n = 0;
    const char *p = pat;
    while (*p && *p != '*' && *p != '?' && *p != '[') {
        if (*p == '\\' && p[1]) p++;
        lit[n++] = *p++;
    }
    if (*p != '[') return add_prefix(r, lit, n, err, errlen);
    /* expand a small class: [1-9], [abc]; a negated or large one stops here */
    const char *q = p + 1;
    if (*q == '^') return add_prefix(r, lit, n, err, errlen);
    unsigned char set[256] = {0};
    int count = 0;
    while (*q && *q != ']') {
        unsigned char lo = (unsigned char)*q, hi = lo;
        if (*q == '\\' && q[1]) q++, lo = hi = (unsigned char)*q;
        else if (q[1] == '-' && q[2] && q[2] != ']') hi = (unsigned char)q[2], q += 2;
        if (lo > hi) { unsigned char t = lo; lo = hi; hi = t; }
        for (int c = lo; c <= hi; c++) if (!set[c]) set[c] = 1, count++;
        q++;
    }
    if (*q != ']' || count > 64 || n + 1 >= sizeof lit) return add_prefix(r, lit, n, err, errlen);
    for (int c = 0; c < 256; c++) {
        if (!set[c]) continue;
        lit[n] = (char)c;
        if (add_prefix(r, lit, n + 1, err, errlen) != 0) return -1;
    }
    return 0;
}

static int is_prefix_of(const char *a, const char *b) {
    size_t n = strlen(a);
    return strlen(b) >= n && memcmp(a, b, n) == 0;
}

int cache_rules_derive_prefixes(cache_rules *r, char *err, size_t errlen) {
    clear_prefixes(r);
    for (int i = 0; i < r->nrules; i++)
        if (pattern_prefixes(r, r->rules[i].pattern, err, errlen) != 0) return -1;
    if (r->all_keys) {
        clear_prefixes(r);
        r->all_keys = 1;
        return 0;
    }
    /* a prefix to track by joins when it covers a derived one, which the
     * next step then drops (one that covers none would only bring
     * invalidations of keys that are never cached) */
    for (int t = 0; t < r->ntrack_by; t++) {
        int covers = 0;
        for (int i = 0; i < r->nprefixes && !covers; i++) covers = is_prefix_of(r->track_by[t], r->prefixes[i]);
        if (covers && add_prefix(r, r->track_by[t], strlen(r->track_by[t]), err, errlen) != 0) return -1;
    }
    /* drop every prefix that a shorter one covers */
    for (int i = 0; i < r->nprefixes; i++) {
        for (int j = 0; j < r->nprefixes; j++) {
            if (i != j && is_prefix_of(r->prefixes[j], r->prefixes[i])) {
                free(r->prefixes[i]);
                r->prefixes[i] = r->prefixes[--r->nprefixes];
                i--;
                break;
            }
        }
    }
    return 0;
}
