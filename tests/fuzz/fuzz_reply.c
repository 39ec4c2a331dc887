/*
 * tests/fuzz/fuzz_reply.c — libFuzzer target for the reply framer
 * (resp_reply_parse), driven the way proxy/upstream.c drives it.
 *
 * Input: the same layout as fuzz_req.c —
 *   byte 0      flags: bit 1 call the framer even when len < need, bits 2-3
 *               a limits profile, bits 4-7 how many chunk-size bytes follow
 *               (bit 0 is unused);
 *   chunk bytes read sizes, used in turn and cyclically: b < 0x80 is b + 1
 *               bytes, else (b - 0x7f) * 256; none means one byte per read;
 *   the rest    the server's byte stream.
 *
 * Each input is framed three ways that must agree frame for frame (length,
 * top-level type, null, count, payload offset and length) and on the end
 * (clean, incomplete with the same need, or the same error):
 *   whole   everything in one read;
 *   split   in the reads chosen above (the differential the proxy relies
 *           on: reads never change where replies end);
 *   ref     a recursive, non-resumable reference framer below, written from
 *           the RESP3 spec and the rules in protocol/resp.h.
 * The framed runs follow up_on_read(): fresh heap copy of exactly the
 * pending bytes per call (ASan catches reads past len or stale pointers),
 * no call while len < need, frame_len consumed on RESP_OK, stop on
 * RESP_ERR. Every call's result is checked against the header's contract.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzzcommon.h"
#include "protocol/resp.h"


enum { F_IGNORE_NEED = 2 };

/* ------------------------------------------------------------------------ */

typedef struct frame_rec {
    size_t frame_len;
    char type;
    int is_null;
    long long count;
    size_t payload_off, payload_len;
} frame_rec;

enum { END_CLEAN, END_AGAIN, END_ERR };

typedef struct run_rec {
    frame_rec *frames;
    size_t nframes, cap;
    int end;
    size_t need;
    char err[128];
} run_rec;

static void add_frame(run_rec *r, const frame_rec *f) {
    if (r->nframes == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 16;
        r->frames = realloc(r->frames, r->cap * sizeof *r->frames);
        CHECK(r->frames != NULL);
    }
    r->frames[r->nframes++] = *f;
}

static char *copy_of(const uint8_t *data, size_t n) {
    char *b = malloc(n ? n : 1);
    CHECK(b != NULL);
    if (n)
        memcpy(b, data, n);
    return b;
}

static int is_aggregate(char t) {
    return t == '*' || t == '%' || t == '~' || t == '>';
}

static void check_result(const resp_reply_parser *p, int rc, const char *buf, size_t len) {
    CHECK(rc == RESP_OK || rc == RESP_AGAIN || rc == RESP_ERR);
    if (rc == RESP_ERR) {
        CHECK(p->err != NULL);
        CHECK(strlen(p->err) < 100);
        CHECK(strchr(p->err, '\r') == NULL && strchr(p->err, '\n') == NULL);
        return;
    }
    if (rc == RESP_AGAIN) {
        CHECK(p->need == 0 || p->need > len);
        return;
    }
    CHECK(p->frame_len > 0 && p->frame_len <= len);
    CHECK(p->type != 0 && strchr("+-:$*%~>_,#(=!", p->type) != NULL);
    CHECK(p->payload_off <= p->frame_len);
    CHECK(p->payload_len <= p->frame_len - p->payload_off);
    if (p->is_null) {
        CHECK(p->type == '$' || p->type == '*' || p->type == '_');
        CHECK(p->count == -1 && p->payload_len == 0);
    }
    if (is_aggregate(p->type)) {
        if (!p->is_null) {
            CHECK(p->payload_off + p->payload_len == p->frame_len);
            CHECK(p->count >= 0 && p->count <= p->lim.max_multibulk_len);
        }
        CHECK(buf[p->payload_off - 2] == '\r' && buf[p->payload_off - 1] == '\n');
    } else if (!(p->is_null && p->type == '$')) {
        /* scalars: payload, CRLF, end of frame */
        CHECK(p->payload_off + p->payload_len + 2 == p->frame_len);
        CHECK(buf[p->frame_len - 2] == '\r' && buf[p->frame_len - 1] == '\n');
        CHECK(buf[p->payload_off - 1] == p->type || p->type == '$' || p->type == '!' ||
              p->type == '=');
        if (p->type == '$' || p->type == '!' || p->type == '=') {
            CHECK(p->count == (long long)p->payload_len);
            CHECK(p->count <= p->lim.max_bulk_len);
        }
        if (p->type == '=') {
            CHECK(p->payload_len >= 4 && buf[p->payload_off + 3] == ':');
        }
    } else {
        CHECK(p->payload_off == p->frame_len);
    }
    /* touch the payload: ASan checks it is inside the buffer */
    volatile unsigned sum = 0;
    for (size_t i = 0; i < p->payload_len; i++)
        sum += (unsigned char)buf[p->payload_off + i];
    (void)sum;
}

static void record(const resp_reply_parser *p, run_rec *out) {
    frame_rec f = {p->frame_len, p->type, p->is_null, p->count, p->payload_off, p->payload_len};
    add_frame(out, &f);
}

static void run_framer(const uint8_t *data, size_t size, const resp_limits *lim, int flags,
                       int whole, const uint8_t *chunks, size_t nchunks, run_rec *out) {
    resp_reply_parser p;
    size_t delivered = 0, start = 0, need = 0, frame_need = 0, k = 0;
    int erred = 0, rc = RESP_AGAIN;

    resp_reply_init(&p, lim);
    memset(out, 0, sizeof *out);
    for (;;) {
        while (!erred) {
            size_t len = delivered - start;
            if (len == 0)
                break;
            if (need != 0 && len < need && !(flags & F_IGNORE_NEED))
                break;
            char *buf = copy_of(data + start, len);
            size_t old_need = need;
            rc = resp_reply_parse(&p, buf, len);
            check_result(&p, rc, buf, len);
            if (rc == RESP_AGAIN) {
                if (old_need != 0 && len < old_need) {
                    CHECK(p.need == old_need);
                }
                need = p.need;
                if (need > frame_need)
                    frame_need = need;
            } else if (rc == RESP_ERR) {
                out->end = END_ERR;
                snprintf(out->err, sizeof out->err, "%s", p.err);
                erred = 1;
            } else {
                CHECK(frame_need <= p.frame_len);
                record(&p, out);
                start += p.frame_len;
                need = 0;
                frame_need = 0;
            }
            free(buf);
            if (rc != RESP_OK)
                break;
        }
        if (delivered == size)
            break;
        size_t n = whole ? size : nchunks == 0 ? 1 : chunk_size(chunks[k++ % nchunks]);
        delivered = n > size - delivered ? size : delivered + n;
    }

    char *buf = copy_of(data + start, size - start);
    if (erred) {
        CHECK(resp_reply_parse(&p, buf, size - start) == RESP_ERR);
        CHECK(strcmp(p.err, out->err) == 0);
        CHECK(resp_reply_parse(&p, buf, 0) == RESP_ERR);
    } else if (start < size) {
        rc = resp_reply_parse(&p, buf, size - start);
        check_result(&p, rc, buf, size - start);
        CHECK(rc == RESP_AGAIN);
        out->end = END_AGAIN;
        out->need = p.need;
    } else {
        out->end = END_CLEAN;
    }
    free(buf);

    resp_reply_reset(&p);
    rc = resp_reply_parse(&p, "*1\r\n:1\r\n", 8); /* within every profile */
    CHECK(rc == RESP_OK && p.frame_len == 8 && p.type == '*' && p.count == 1);
    resp_reply_deinit(&p);
}

/* ------------------------------------------------------------------------ */
/* Reference framer                                                         */

static int ref_string2ll(const uint8_t *s, size_t n, long long *v) {
    return resp_string2ll((const char *)s, n, v);
}

/* RESP3 double: inf, -inf, +inf, nan, -nan (any case), or
 * [+-]digits[.digits][(e|E)[+-]digits] with at least one mantissa digit. */
static int ref_double(const uint8_t *s, size_t n) {
    static const char *const words[] = {"inf", "-inf", "+inf", "nan", "-nan"};
    for (size_t w = 0; w < 5; w++) {
        if (strlen(words[w]) == n) {
            size_t k = 0;
            while (k < n && (s[k] | 0x20) == (uint8_t)words[w][k])
                k++;
            if (k == n)
                return 1;
        }
    }
    size_t i = 0, m = 0;
    if (i < n && (s[i] == '+' || s[i] == '-'))
        i++;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
        m++;
    if (i < n && s[i] == '.')
        for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++)
            m++;
    if (m == 0)
        return 0;
    if (i < n && (s[i] | 0x20) == 'e') {
        size_t e = 0;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
            e++;
        if (e == 0)
            return 0;
    }
    return i == n;
}

/* The CRLF ending the line whose type byte is at `start`: its CR at most
 * max_line bytes after the type byte. 1 (*cr), 0 or -1. */
static int ref_line(const uint8_t *b, size_t len, size_t start, size_t max_line, size_t *cr) {
    size_t lim = start + max_line + 1;
    for (size_t i = start + 1; i + 1 < len && i < lim; i++) {
        if (b[i] == '\r' && b[i + 1] == '\n') {
            *cr = i;
            return 1;
        }
    }
    if (len < lim)
        return 0;
    if (len == lim && b[lim - 1] == '\r')
        return 0; /* the LF may still come */
    return -1;
}

/* One value (with any attributes before it) at b[pos..len), `depth`
 * aggregates open around it. 1 (*end, and *top when not NULL), 0 or -1. */
static int ref_value(const uint8_t *b, size_t len, size_t pos, int depth, const resp_limits *lim,
                     size_t *end, frame_rec *top) {
    for (;;) {
        size_t cr, n, next, p;
        long long ll;
        int r;

        if (pos >= len)
            return 0;
        uint8_t t = b[pos];
        if (t == 0 || strchr("+-:$*%~>_,#(=!|", t) == NULL)
            return -1;
        if ((r = ref_line(b, len, pos, lim->max_inline_len, &cr)) != 1)
            return r;
        const uint8_t *line = b + pos + 1;
        n = cr - pos - 1;
        next = cr + 2;
        frame_rec *tp = t != '|' ? top : NULL;
        if (tp) {
            tp->type = (char)t;
            tp->is_null = 0;
            tp->count = 0;
            tp->payload_off = pos + 1;
            tp->payload_len = n;
        }
        switch (t) {
        case '+':
        case '-':
            *end = next;
            return 1;
        case ':':
            if (!ref_string2ll(line, n, &ll))
                return -1;
            if (tp)
                tp->count = ll;
            *end = next;
            return 1;
        case ',':
            if (!ref_double(line, n))
                return -1;
            *end = next;
            return 1;
        case '(': /* any text (Redis passes a script's string through) */
            *end = next;
            return 1;
        case '#':
            if (n != 1 || (line[0] != 't' && line[0] != 'f'))
                return -1;
            if (tp)
                tp->count = line[0] == 't';
            *end = next;
            return 1;
        case '_':
            if (n != 0)
                return -1;
            if (tp) {
                tp->is_null = 1;
                tp->count = -1;
            }
            *end = next;
            return 1;
        case '$':
        case '!':
        case '=':
            if (!ref_string2ll(line, n, &ll))
                return -1;
            if (ll == -1 && t == '$') {
                if (tp) {
                    tp->is_null = 1;
                    tp->count = -1;
                    tp->payload_off = next;
                    tp->payload_len = 0;
                }
                *end = next;
                return 1;
            }
            if (ll < 0 || ll > lim->max_bulk_len)
                return -1;
            if (len < next + (size_t)ll + 2)
                return 0;
            if (b[next + ll] != '\r' || b[next + ll + 1] != '\n')
                return -1;
            if (t == '=' && (ll < 4 || b[next + 3] != ':'))
                return -1;
            if (tp) {
                tp->count = ll;
                tp->payload_off = next;
                tp->payload_len = (size_t)ll;
            }
            *end = next + (size_t)ll + 2;
            return 1;
        default: /* * % ~ > | */
            if (!ref_string2ll(line, n, &ll))
                return -1;
            if (ll == -1 && t == '*') {
                if (tp) {
                    tp->is_null = 1;
                    tp->count = -1;
                    tp->payload_off = next;
                    tp->payload_len = 0;
                }
                *end = next;
                return 1;
            }
            if (ll < 0 || ll > lim->max_multibulk_len)
                return -1;
            /* no depth limit: 64 KB nest 16384 levels, well within the
             * stack this recursion has */
            p = next;
            for (long long i = 0; i < ((t == '%' || t == '|') ? 2 * ll : ll); i++)
                if ((r = ref_value(b, len, p, depth + 1, lim, &p, NULL)) != 1)
                    return r;
            if (t == '|') {
                pos = p; /* an attribute decorates the value after it */
                continue;
            }
            if (tp) {
                tp->count = ll;
                tp->payload_off = next;
                tp->payload_len = p - next;
            }
            *end = p;
            return 1;
        }
    }
}

static void run_ref(const uint8_t *data, size_t size, const resp_limits *lim, run_rec *out) {
    size_t start = 0;

    memset(out, 0, sizeof *out);
    for (;;) {
        frame_rec f = {0};
        size_t end = 0;
        int r = ref_value(data + start, size - start, 0, 0, lim, &end, &f);
        if (r == 1) {
            f.frame_len = end;
            add_frame(out, &f);
            start += end;
            continue;
        }
        out->end = r < 0 ? END_ERR : start == size ? END_CLEAN : END_AGAIN;
        break;
    }
}

/* ------------------------------------------------------------------------ */

static void compare(const run_rec *x, const run_rec *y, int same_err, int same_need) {
    CHECK(x->nframes == y->nframes);
    for (size_t i = 0; i < x->nframes; i++) {
        const frame_rec *a = &x->frames[i], *b = &y->frames[i];
        CHECK(a->frame_len == b->frame_len);
        CHECK(a->type == b->type);
        CHECK(a->is_null == b->is_null);
        CHECK(a->count == b->count);
        CHECK(a->payload_off == b->payload_off);
        CHECK(a->payload_len == b->payload_len);
    }
    CHECK(x->end == y->end);
    if (same_err && x->end == END_ERR) {
        CHECK(strcmp(x->err, y->err) == 0);
    }
    if (same_need && x->end == END_AGAIN) {
        CHECK(x->need == y->need);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    resp_limits lim;
    run_rec whole, split, ref;

    if (size < 1)
        return 0;
    int flags = data[0];
    size_t nchunks = (size_t)(flags >> 4);
    if (size < 1 + nchunks)
        return 0;
    const uint8_t *chunks = data + 1;
    const uint8_t *stream = data + 1 + nchunks;
    size_t n = size - 1 - nchunks;

    limits_for((flags >> 2) & 3, &lim);
    run_framer(stream, n, &lim, flags, 1, NULL, 0, &whole);
    run_framer(stream, n, &lim, flags, 0, chunks, nchunks, &split);
    run_ref(stream, n, &lim, &ref);

    compare(&whole, &split, 1, 1);
    compare(&whole, &ref, 0, 0);

    free(whole.frames);
    free(split.frames);
    free(ref.frames);
    return 0;
}
