/*
 * protocol/cluster.c — hash slots and the CLUSTER SLOTS rewrite (cluster.h).
 */
#include "protocol/cluster.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, as Redis's
 * crc16.c. Bit by bit: a topology reply holds one key, not many. */
static uint16_t crc16(const char *p, size_t n) {
    uint16_t crc = 0;
    for (size_t i = 0; i < n; i++) {
        crc ^= (uint16_t)((unsigned char)p[i] << 8);
        for (int b = 0; b < 8; b++) crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

/* The hash tag of key: [*at, *at + *n), or 0 when it has none. */
static int hash_tag(const char *key, size_t len, size_t *at, size_t *n) {
    const char *open = memchr(key, '{', len);
    if (open == NULL) return 0;
    size_t s = (size_t)(open - key) + 1;
    const char *close = memchr(key + s, '}', len - s);
    if (close == NULL || close == key + s) return 0;
    *at = s;
    *n = (size_t)(close - (key + s));
    return 1;
}

/* A redirection error frame "-<word> <slot> <host>:<port>\r\n" (word with
 * its '-' and trailing space, wlen bytes). */
static int redirect(const char *data, size_t len, const char *word, size_t wlen, long long *slot, const char **to,
                    size_t *tolen) {
    if (len < wlen + 2 || memcmp(data, word, wlen) != 0 || data[len - 2] != '\r') return -1;
    const char *p = data + wlen, *end = data + len - 2;
    const char *sp = memchr(p, ' ', (size_t)(end - p));
    if (sp == NULL || !resp_string2ll(p, (size_t)(sp - p), slot)) return -1;
    *to = sp + 1;
    *tolen = (size_t)(end - sp - 1);
    return 0;
}

int cluster_moved(const char *data, size_t len, long long *slot, const char **to, size_t *tolen) {
    return redirect(data, len, "-MOVED ", 7, slot, to, tolen);
}

int cluster_ask(const char *data, size_t len, long long *slot) {
    const char *to;
    size_t tolen;
    return redirect(data, len, "-ASK ", 5, slot, &to, &tolen);
}

unsigned cluster_key_slot(const char *key, size_t len) {
    size_t at, n;
    if (hash_tag(key, len, &at, &n)) return crc16(key + at, n) & (CLUSTER_SLOTS - 1);
    return crc16(key, len) & (CLUSTER_SLOTS - 1);
}

int cluster_prefix_slot(const char *prefix, size_t len) {
    size_t at, n;
    /* the first '{' of every key is the prefix's, and so is the '}' after
     * it: what follows the prefix cannot change the tag */
    if (!hash_tag(prefix, len, &at, &n)) return -1;
    return (int)cluster_key_slot(prefix, len);
}

/* Bytes of the one value at data[at], or 0 when it is not one whole value. */
static size_t value_len(const char *data, size_t len, size_t at) {
    resp_limits lim;
    resp_reply_parser p;
    resp_limits_default(&lim);
    resp_reply_init(&p, &lim);
    size_t n = resp_reply_parse(&p, data + at, len - at) == RESP_OK ? p.frame_len : 0;
    resp_reply_deinit(&p);
    return n;
}

static int names_self(const cluster_self *up, const char *name, size_t len) {
    for (int i = 0; i < 2; i++)
        if (up->hosts[i] != NULL && strlen(up->hosts[i]) == len && memcmp(up->hosts[i], name, len) == 0) return 1;
    return 0;
}

/* Whether the node's networking metadata (Redis 7: a map, in RESP2 a flat
 * array, of "ip" or "hostname" to a value; the other name of a node whose
 * first element is the one it prefers) names up. */
static int metadata_names_self(const cluster_self *up, const char *m, size_t n) {
    long long count;
    size_t at = resp_read_int_line(m, n, 0, m[0] == '%' ? '%' : '*', &count);
    if (at == 0 || count < 0) return 0;
    if (m[0] == '*') count /= 2;
    for (long long i = 0; i < count; i++) {
        const char *k, *v;
        size_t kl, vl, next;
        if (resp_read_bulk(m, n, at, &k, &kl, &next) != 1 || resp_read_bulk(m, n, next, &v, &vl, &at) != 1) return 0;
        int is_ip = kl == 2 && memcmp(k, "ip", 2) == 0;
        /* (an empty ip: the node has not learned its own, as above) */
        if ((is_ip || (kl == 8 && memcmp(k, "hostname", 8) == 0)) && ((is_ip && vl == 0) || names_self(up, v, vl)))
            return 1;
    }
    return 0;
}

/* A range of a CLUSTER SLOTS reply: n bytes at data[at]; its bounds, and
 * its master at data[at + master]. Returns 0, or -1 when it is not the
 * shape Redis sends. */
typedef struct slot_range {
    size_t n, master;
    long long start, end;
} slot_range;

static int read_range(const char *data, size_t len, size_t at, slot_range *r) {
    long long elems;
    size_t i;
    r->n = value_len(data, len, at);
    if (r->n == 0 || (i = resp_read_int_line(data + at, r->n, 0, '*', &elems)) == 0 || elems < 3 ||
        (i = resp_read_int_line(data + at, r->n, i, ':', &r->start)) == 0 ||
        (i = resp_read_int_line(data + at, r->n, i, ':', &r->end)) == 0)
        return -1;
    r->master = i;
    return 0;
}

/* Whether the master of range r (at data + at) is the node up; its id
 * (empty before Redis 4) into *id. Returns 1, 0 (another node: its
 * address in other), or -1 (a shape Redis does not send). */
static int master_is_up(const char *data, size_t at, const slot_range *r, const cluster_self *up, const char **id,
                        size_t *id_len, char *other, size_t other_len) {
    const char *m = data + at;
    long long parts, mport;
    const char *ip;
    size_t iplen, k;
    if (value_len(m, r->n, r->master) == 0 || (k = resp_read_int_line(m, r->n, r->master, '*', &parts)) == 0 ||
        parts < 2 || resp_read_bulk(m, r->n, k, &ip, &iplen, &k) != 1 ||
        (k = resp_read_int_line(m, r->n, k, ':', &mport)) == 0)
        return -1;
    /* the id, the third part; the networking metadata after it */
    *id = m + k;
    *id_len = parts >= 3 ? value_len(m, r->n, k) : 0;
    if (parts >= 3 && *id_len == 0) return -1;
    size_t meta = k + *id_len, meta_len = parts >= 4 ? value_len(m, r->n, meta) : 0;
    /* an empty address: a node that has not learned its own (alone) */
    if (mport == up->port && (iplen == 0 || names_self(up, ip, iplen) ||
                              (meta_len > 0 && metadata_names_self(up, m + meta, meta_len))))
        return 1;
    snprintf(other, other_len, "%.*s:%lld", (int)(iplen > 255 ? 255 : iplen), ip, mport);
    return 0;
}

int cluster_slots_rewrite(const char *data, size_t len, unsigned slot, const cluster_self *up, const char *host,
                          int port, resp_buf *out, char *other, size_t other_len) {
    long long nranges;
    size_t first = resp_read_int_line(data, len, 0, '*', &nranges), at = first;
    const char *id = NULL;
    size_t id_len = 0;
    int found = 0;
    slot_range r;
    if (first == 0 || nranges <= 0) return -1;
    /* the whole reply is read before anything is written: the slot's
     * master decides, and a reply Redis would not send is relayed as is */
    for (long long k = 0; k < nranges; k++, at += r.n) {
        if (read_range(data, len, at, &r) != 0) return -1;
        if (found || r.start > (long long)slot || (long long)slot > r.end) continue;
        int self = master_is_up(data, at, &r, up, &id, &id_len, other, other_len);
        if (self != 1) return self == 0 ? -2 : -1;
        found = 1;
    }
    if (!found || at != len) return -1;
    size_t keep = out->len;
    int e = resp_enc_array(out, (size_t)nranges);
    at = first;
    for (long long k = 0; k < nranges && e == 0; k++, at += r.n) {
        read_range(data, len, at, &r);
        e |= resp_enc_array(out, 3);
        e |= resp_enc_int(out, r.start);
        e |= resp_enc_int(out, r.end);
        e |= resp_enc_array(out, id_len ? 3 : 2);
        e |= resp_enc_bulk_str(out, host);
        e |= resp_enc_int(out, port);
        if (id_len) e |= resp_buf_append(out, id, id_len);
    }
    if (e == 0) return 0;
    out->len = keep;
    return -1;
}

/* The host and port of the node at m[at] (*N $host :port ...). 0, or -1. */
static int node_address(const char *m, size_t n, size_t at, const char **host, size_t *hostlen, long long *port) {
    long long parts;
    size_t k = resp_read_int_line(m, n, at, '*', &parts);
    if (k == 0 || parts < 2 || resp_read_bulk(m, n, k, host, hostlen, &k) != 1 ||
        resp_read_int_line(m, n, k, ':', port) == 0)
        return -1;
    return 0;
}

/* Calls fn for each range of a CLUSTER SLOTS reply (the range at m) until
 * it returns other than 0. Returns what it returned; 0 when it saw every
 * range and the reply ends there; -1 for another shape. */
typedef int (*range_fn)(void *arg, const char *m, const slot_range *r);

static int each_range(const char *data, size_t len, range_fn fn, void *arg) {
    long long nranges;
    size_t at = resp_read_int_line(data, len, 0, '*', &nranges);
    slot_range r;
    if (at == 0 || nranges < 0) return -1;
    for (long long k = 0; k < nranges; k++, at += r.n) {
        if (read_range(data, len, at, &r) != 0) return -1;
        int rc = fn(arg, data + at, &r);
        if (rc != 0) return rc;
    }
    return at == len ? 0 : -1;
}

struct node_visit {
    cluster_node_fn fn;
    void *arg;
};

static int visit_nodes(void *arg, const char *m, const slot_range *r) {
    struct node_visit *v = arg;
    for (size_t node = r->master; node < r->n;) {
        const char *host;
        size_t hostlen, nlen = value_len(m, r->n, node);
        long long port;
        if (nlen == 0 || node_address(m, r->n, node, &host, &hostlen, &port) != 0) return -1;
        v->fn(v->arg, host, hostlen, port);
        node += nlen;
    }
    return 0;
}

int cluster_slots_nodes(const char *data, size_t len, cluster_node_fn fn, void *arg) {
    struct node_visit v = {fn, arg};
    return each_range(data, len, visit_nodes, &v);
}

struct master_find {
    unsigned slot;
    char *out;
    size_t outlen;
};

static int find_master(void *arg, const char *m, const slot_range *r) {
    struct master_find *f = arg;
    const char *host;
    size_t hostlen;
    long long port;
    if (r->start > (long long)f->slot || (long long)f->slot > r->end) return 0;
    if (node_address(m, r->n, r->master, &host, &hostlen, &port) != 0) return -1;
    int w = snprintf(f->out, f->outlen, "%.*s:%lld", (int)(hostlen > 255 ? 255 : hostlen), host, port);
    return w > 0 && (size_t)w < f->outlen ? 1 : -1;
}

int cluster_slots_master(const char *data, size_t len, unsigned slot, char *out, size_t outlen) {
    struct master_find f = {slot, out, outlen};
    return each_range(data, len, find_master, &f) == 1 ? 0 : -1;
}
