/*
 * proxy/lookup.c — see lookup.h.
 */
#include "proxy/lookup.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>


#include "protocol/commands.h"
#include "proxy/sha1.h"

/* The longest missing-name reply kept (Redis's is under 200 bytes). */
#define MISSING_MAX 1024

typedef struct lookup_script {
    char sha[41];               /* lower case */
    int loaded;                 /* Redis is known to hold it */
    char *missing[2];           /* learned missing-name reply, RESP2 and RESP3 */
    size_t missing_len[2];
} lookup_script;

struct px_lookup {
    lookup_script scripts[PX_LOOKUP_MAX_SCRIPTS];
    int n;
    uint64_t generation;  /* px_lookup_forget calls */
};

px_lookup *px_lookup_new(void) { return calloc(1, sizeof(px_lookup)); }

void px_lookup_free(px_lookup *l) {
    if (l == NULL) return;
    px_lookup_forget(l);
    free(l);
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

int px_lookup_add(px_lookup *l, const char *sha1_hex) {
    char low[41];
    if (strlen(sha1_hex) != 40) return -1;
    for (int i = 0; i < 40; i++) {
        if (hexval(sha1_hex[i]) < 0) return -1;
        low[i] = (char)(sha1_hex[i] >= 'A' && sha1_hex[i] <= 'F' ? sha1_hex[i] - 'A' + 'a' : sha1_hex[i]);
    }
    low[40] = '\0';
    for (int i = 0; i < l->n; i++)
        if (memcmp(l->scripts[i].sha, low, 40) == 0) return 0;
    if (l->n >= PX_LOOKUP_MAX_SCRIPTS) return -1;
    memcpy(l->scripts[l->n++].sha, low, 41);
    return 0;
}

/* Redis reads an EVALSHA digest in any case. */
static int find_sha(const px_lookup *l, const char *p, size_t n) {
    if (n != 40) return -1;
    for (int i = 0; i < l->n; i++)
        if (strncasecmp(l->scripts[i].sha, p, 40) == 0) return i;
    return -1;
}

int px_lookup_match(const px_lookup *l, int argc, const resp_arg *argv) {
    if (l == NULL || l->n == 0 || argc != 5 || !resp_arg_is(argv[0].ptr, argv[0].len, "EVALSHA")) return -1;
    if (argv[2].len != 1 || argv[2].ptr[0] != '2') return -1;
    return find_sha(l, argv[1].ptr, argv[1].len);
}

int px_lookup_match_body(const px_lookup *l, const char *body, size_t len) {
    unsigned char md[PX_SHA1_LEN];
    char hex[41];
    static const char digits[] = "0123456789abcdef";
    /* (no digest, no match: the script goes to Redis as any other) */
    if (l == NULL || l->n == 0 || px_sha1(body, len, md) != 0) return -1;
    for (int i = 0; i < PX_SHA1_LEN; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    return find_sha(l, hex, 40);
}

int px_lookup_loaded(const px_lookup *l, int idx) { return idx >= 0 && idx < l->n && l->scripts[idx].loaded; }

void px_lookup_set_loaded(px_lookup *l, int idx, int loaded) {
    if (idx >= 0 && idx < l->n) l->scripts[idx].loaded = loaded;
}

uint64_t px_lookup_generation(const px_lookup *l) { return l->generation; }

void px_lookup_forget(px_lookup *l) {
    l->generation++;
    for (int i = 0; i < l->n; i++) {
        lookup_script *s = &l->scripts[i];
        s->loaded = 0;
        for (int p = 0; p < 2; p++) {
            free(s->missing[p]);
            s->missing[p] = NULL;
            s->missing_len[p] = 0;
        }
    }
}

size_t px_lookup_inode_key(uint64_t ino, char *buf) {
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + ino % 10);
        ino /= 10;
    } while (ino > 0);
    buf[0] = 'i';
    for (size_t i = 0; i < n; i++) buf[1 + i] = tmp[n - 1 - i];
    return n + 1;
}

static uint64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return v;
}

/*
 * The dentry: 1 and *ino (or *is_nil), or 0 when not answerable here.
 * Only a LOOKUP entry answers, one that a lookup of this very name that
 * Redis answered filled (for this user: partitions are per user). An HGET
 * entry of the same name does not: Redis checks the lookup's ACL on more
 * than HGET's, and per key. The script declares the name as a key, so a
 * user whose key patterns do not match the name gets NOPERM from Redis for
 * that name alone; and the script's own GET of the inode needs GET, which
 * a user allowed HGET and MGET may be denied. A lookup Redis answered for
 * the name has passed both checks (for a found name, on its inode too).
 */
static int cached_dentry(cache *c, uint32_t part, int db, const char *dkey, size_t dklen, const char *name,
                         size_t nlen, int64_t now_ms, uint64_t *ino, int *is_nil) {
    const char *v;
    size_t vlen;
    if (!cache_get(c, part, db, CACHE_KIND_LOOKUP, dkey, dklen, name, nlen, now_ms, &v, &vlen, is_nil)) return 0;
    if (*is_nil) return 1;
    if (vlen != 8) return 0;
    *ino = be64((const unsigned char *)v);
    return 1;
}

int px_lookup_answer(px_lookup *l, int idx, cache *c, uint32_t part, int db, int proto, const char *dkey,
                     size_t dklen, const char *name, size_t nlen, int64_t now_ms, resp_buf *out) {
    if (idx < 0 || idx >= l->n || !l->scripts[idx].loaded) return 0;
    lookup_script *s = &l->scripts[idx];
    uint64_t ino = 0;
    int is_nil = 0;
    if (!cached_dentry(c, part, db, dkey, dklen, name, nlen, now_ms, &ino, &is_nil)) return 0;
    if (is_nil) {
        int p = proto == 3;
        if (s->missing[p] == NULL) return 0;
        return resp_buf_append(out, s->missing[p], s->missing_len[p]) == 0;
    }
    if (ino >= PX_LOOKUP_MAX_INODE) return 0;
    char ikey[24];
    size_t iklen = px_lookup_inode_key(ino, ikey);
    const char *attr;
    size_t alen;
    if (!cache_get(c, part, db, CACHE_KIND_GET, ikey, iklen, "", 0, now_ms, &attr, &alen, &is_nil) || is_nil)
        return 0;
    size_t start = out->len;
    if (resp_buf_printf(out, "*2\r\n:%llu\r\n$%zu\r\n", (unsigned long long)ino, alen) != 0 ||
        resp_buf_append(out, attr, alen) != 0 || resp_buf_append(out, "\r\n", 2) != 0) {
        out->len = start;
        return 0;
    }
    return 1;
}

int px_lookup_parse_reply(const char *data, size_t len, uint64_t *ino, const char **attr, size_t *alen) {
    long long n, v;
    size_t at, next;
    if (len == 0) return PX_LOOKUP_OTHER;
    if (data[0] == '-') {
        if (len >= 9 && memcmp(data, "-NOSCRIPT", 9) == 0) return PX_LOOKUP_NOSCRIPT;
        return memmem(data, len, "ENOENT", 6) != NULL ? PX_LOOKUP_MISSING : PX_LOOKUP_OTHER;
    }
    const char *val;
    size_t vlen;
    if (resp_read_bulk(data, len, 0, &val, &vlen, &next) == 2 && next == len) return PX_LOOKUP_MISSING;
    if ((at = resp_read_int_line(data, len, 0, '*', &n)) == 0 || n != 2) return PX_LOOKUP_OTHER;
    if ((at = resp_read_int_line(data, len, at, ':', &v)) == 0 || v < 0) return PX_LOOKUP_OTHER;
    if (resp_read_bulk(data, len, at, &val, &vlen, &next) != 1 || next != len) return PX_LOOKUP_OTHER;
    *ino = (uint64_t)v;
    *attr = val;
    *alen = vlen;
    return PX_LOOKUP_FOUND;
}

void px_lookup_learn_missing(px_lookup *l, int idx, int proto, const char *data, size_t len) {
    if (idx < 0 || idx >= l->n || len > MISSING_MAX) return;
    lookup_script *s = &l->scripts[idx];
    int p = proto == 3;
    if (s->missing[p] != NULL && s->missing_len[p] == len && memcmp(s->missing[p], data, len) == 0) return;
    char *copy = malloc(len);
    if (copy == NULL) return;
    memcpy(copy, data, len);
    free(s->missing[p]);
    s->missing[p] = copy;
    s->missing_len[p] = len;
}
