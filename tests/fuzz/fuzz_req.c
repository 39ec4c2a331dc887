/*
 * tests/fuzz/fuzz_req.c — libFuzzer target for the request framer
 * (resp_req_parse), driven the way proxy/client.c drives it.
 *
 * Input
 * -----
 *   byte 0      flags: bit 0 unauthenticated (Redis's pre-AUTH limits),
 *               bit 1 call the framer even when len < need (the header says
 *               such a call is harmless), bits 2-3 a limits profile (see
 *               limits_for), bits 4-7 how many chunk-size bytes follow;
 *   chunk bytes each one read size, used in turn and cyclically: b < 0x80
 *               is b + 1 bytes, else (b - 0x7f) * 256 bytes; none means
 *               one byte per read;
 *   the rest    the client's byte stream.
 *
 * Each input is framed three ways, and all three must agree:
 *   whole   everything arrives in one read;
 *   split   it arrives in the reads chosen above;
 *   ref     a plain, non-resumable reference framer below, written from
 *           Redis's processMultibulkBuffer/processInlineBuffer/sdssplitargs
 *           and the deliberate differences listed in protocol/resp.h.
 * "Agree" means the same frames (length, inline or not, arguments byte for
 * byte) and the same end: clean, incomplete (the same `need`) or an error
 * (the same message, but for a header line past the line limit, which is
 * "too big ..." in the split run when the limit was passed before its '\r'
 * came: see split_dependent_err).
 *
 * The two framed runs follow client_process(): bytes from the first
 * unconsumed one are passed in; RESP_AGAIN ends the loop until more bytes
 * arrive, and a further call waits until `need` bytes are there; RESP_OK
 * consumes frame_len bytes; RESP_ERR ends the stream. Every call gets a
 * fresh heap copy of exactly the pending bytes (evbuffer_pullup may move
 * them), so ASan catches a read past len and a pointer kept from an earlier
 * call.
 *
 * Invariants checked on every call: the return value is one of the three;
 * 0 < frame_len <= len; argc/argv are 0/NULL unless RESP_OK; every argument
 * lies inside the frame (multibulk, and then followed by CRLF) or inside the
 * parser's scratch (inline); `need` > len when set and never beyond the end
 * of the frame that completes; limits are respected; an error message has
 * no CR or LF; after RESP_ERR every later call is RESP_ERR again.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzzcommon.h"
#include "protocol/resp.h"


/* ------------------------------------------------------------------------ */
/* Input header                                                             */

enum { F_UNAUTH = 1, F_IGNORE_NEED = 2 };

/* ------------------------------------------------------------------------ */
/* What a run produced                                                      */

typedef struct frame_rec {
    size_t frame_len;
    int argc;
    int is_inline;
    uint64_t hash; /* FNV-1a over each argument's length and bytes */
} frame_rec;

enum { END_CLEAN, END_AGAIN, END_ERR };

typedef struct run_rec {
    frame_rec *frames;
    size_t nframes, cap;
    int end;
    size_t need;   /* END_AGAIN: need after a call with every byte */
    char err[128]; /* END_ERR */
} run_rec;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static uint64_t hash_args(int argc, const resp_arg *argv) {
    uint64_t h = 14695981039346656037ULL;
    for (int i = 0; i < argc; i++) {
        h = fnv(h, &argv[i].len, sizeof argv[i].len);
        h = fnv(h, argv[i].ptr, argv[i].len);
    }
    return h;
}

static void add_frame(run_rec *r, size_t flen, int argc, int is_inline, uint64_t h) {
    if (r->nframes == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 16;
        r->frames = realloc(r->frames, r->cap * sizeof *r->frames);
        CHECK(r->frames != NULL);
    }
    r->frames[r->nframes++] = (frame_rec){flen, argc, is_inline, h};
}

static void set_err(run_rec *r, const char *msg) {
    r->end = END_ERR;
    snprintf(r->err, sizeof r->err, "%s", msg);
}

/* ------------------------------------------------------------------------ */
/* The framed runs                                                          */

/* The invariants of one call's result; buf/len is what it was given. */
static void check_result(const resp_req_parser *p, int rc, const char *buf, size_t len,
                         int unauth) {
    CHECK(rc == RESP_OK || rc == RESP_AGAIN || rc == RESP_ERR);
    if (rc != RESP_OK) {
        CHECK(p->argc == 0 && p->argv == NULL);
    }
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
    CHECK(p->argc >= 0);
    CHECK((p->argc == 0) == (p->argv == NULL));
    if (!p->is_inline) {
        CHECK(buf[0] == '*');
        CHECK(p->argc <= p->lim.max_multibulk_len);
        if (unauth) {
            CHECK(p->argc <= RESP_UNAUTH_MAX_MULTIBULK_LEN);
        }
        for (int i = 0; i < p->argc; i++) {
            const resp_arg *a = &p->argv[i];
            CHECK(a->ptr > buf && a->ptr <= buf + p->frame_len);
            CHECK(a->len <= (size_t)(buf + p->frame_len - a->ptr));
            CHECK(p->frame_len - (size_t)(a->ptr - buf) - a->len >= 2);
            CHECK(a->ptr[a->len] == '\r' && a->ptr[a->len + 1] == '\n');
            CHECK(a->ptr[-1] == '\n');
            CHECK((long long)a->len <= p->lim.max_bulk_len);
            if (unauth) {
                CHECK(a->len <= RESP_UNAUTH_MAX_BULK_LEN);
            }
        }
    } else {
        CHECK(buf[0] != '*');
        CHECK(buf[p->frame_len - 1] == '\n');
        CHECK(memchr(buf, '\n', p->frame_len - 1) == NULL);
        /* a line of max_inline_len bytes, then "\r\n" or "\n" (resp.h, since e9ce5a9) */
        CHECK(p->frame_len - 1 - (p->frame_len >= 2 && buf[p->frame_len - 2] == '\r') <= p->lim.max_inline_len);
        for (int i = 0; i < p->argc; i++) {
            const resp_arg *a = &p->argv[i];
            CHECK(p->scratch != NULL);
            CHECK(a->ptr >= p->scratch && a->ptr <= p->scratch + p->scratch_cap);
            CHECK(a->len <= (size_t)(p->scratch + p->scratch_cap - a->ptr));
        }
    }
}

static char *copy_of(const uint8_t *data, size_t n) {
    char *b = malloc(n ? n : 1);
    CHECK(b != NULL);
    if (n)
        memcpy(b, data, n);
    return b;
}

/*
 * Runs the stream through client_process()'s loop. chunks == NULL
 * delivers everything at once; nchunks == 0 one byte per read.
 */
static void run_framer(const uint8_t *data, size_t size, const resp_limits *lim, int flags,
                       int whole, const uint8_t *chunks, size_t nchunks, run_rec *out) {
    resp_req_parser p;
    size_t delivered = 0, start = 0, need = 0, frame_need = 0, k = 0;
    int erred = 0, rc = RESP_AGAIN;
    int unauth = (flags & F_UNAUTH) != 0;

    resp_req_init(&p, lim);
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
            p.unauthenticated = unauth;
            rc = resp_req_parse(&p, buf, len);
            check_result(&p, rc, buf, len, unauth);
            if (rc == RESP_AGAIN) {
                if (old_need != 0 && len < old_need) {
                    CHECK(p.need == old_need); /* "harmless but useless" */
                }
                need = p.need;
                if (need > frame_need)
                    frame_need = need;
            } else if (rc == RESP_ERR) {
                set_err(out, p.err);
                erred = 1;
            } else {
                /* need never exceeds the end of the current frame */
                CHECK(frame_need <= p.frame_len);
                add_frame(out, p.frame_len, p.argc, p.is_inline, hash_args(p.argc, p.argv));
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

    /* One more call with every pending byte: an error stays an error (with
     * the same message), and an incomplete frame says what it needs. */
    char *buf = copy_of(data + start, size - start);
    if (erred) {
        CHECK(resp_req_parse(&p, buf, size - start) == RESP_ERR);
        CHECK(p.argc == 0 && p.argv == NULL);
        CHECK(strcmp(p.err, out->err) == 0);
        CHECK(resp_req_parse(&p, buf, 0) == RESP_ERR);
    } else if (start < size) {
        rc = resp_req_parse(&p, buf, size - start);
        check_result(&p, rc, buf, size - start, unauth);
        CHECK(rc == RESP_AGAIN);
        out->end = END_AGAIN;
        out->need = p.need;
    } else {
        out->end = END_CLEAN;
    }
    free(buf);

    /* After a reset the parser frames a fresh, valid request. */
    resp_req_reset(&p);
    rc = resp_req_parse(&p, "*1\r\n$1\r\nP\r\n", 11); /* within every profile */
    CHECK(rc == RESP_OK && p.frame_len == 11 && p.argc == 1 && p.argv[0].len == 1);
    resp_req_deinit(&p);
}

/* ------------------------------------------------------------------------ */
/* Reference framer                                                         */

typedef struct ref_args {
    resp_arg *v;
    int n, cap;
    char *store; /* inline arguments, unquoted */
} ref_args;

static void ref_add(ref_args *a, const char *p, size_t n) {
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 8;
        a->v = realloc(a->v, (size_t)a->cap * sizeof *a->v);
        CHECK(a->v != NULL);
    }
    a->v[a->n++] = (resp_arg){p, n};
}

static int hexval(int c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Redis's sdssplitargs() on a NUL-terminated line, in the C locale. The
 * arguments are written to a->store (sized by the caller). -1 on
 * unbalanced quotes. */
static int ref_splitargs(const char *line, ref_args *a) {
    const char *p = line;
    char *out = a->store;

    for (;;) {
        while (*p && isspace((unsigned char)*p))
            p++;
        if (!*p)
            return 0;
        int inq = 0, insq = 0, done = 0;
        char *cur = out;
        while (!done) {
            if (inq) {
                if (p[0] == '\\' && p[1] == 'x' && hexval((unsigned char)p[2]) >= 0 &&
                    hexval((unsigned char)p[3]) >= 0) {
                    *out++ = (char)(hexval((unsigned char)p[2]) * 16 + hexval((unsigned char)p[3]));
                    p += 3;
                } else if (p[0] == '\\' && p[1]) {
                    char c;
                    p++;
                    switch (*p) {
                    case 'n': c = '\n'; break;
                    case 'r': c = '\r'; break;
                    case 't': c = '\t'; break;
                    case 'b': c = '\b'; break;
                    case 'a': c = '\a'; break;
                    default: c = *p; break;
                    }
                    *out++ = c;
                } else if (*p == '"') {
                    if (p[1] && !isspace((unsigned char)p[1]))
                        return -1;
                    done = 1;
                } else if (!*p) {
                    return -1;
                } else {
                    *out++ = *p;
                }
            } else if (insq) {
                if (p[0] == '\\' && p[1] == '\'') {
                    p++;
                    *out++ = '\'';
                } else if (*p == '\'') {
                    if (p[1] && !isspace((unsigned char)p[1]))
                        return -1;
                    done = 1;
                } else if (!*p) {
                    return -1;
                } else {
                    *out++ = *p;
                }
            } else {
                switch (*p) {
                case ' ': case '\n': case '\r': case '\t': case '\0':
                    done = 1;
                    break;
                case '"':
                    inq = 1;
                    break;
                case '\'':
                    insq = 1;
                    break;
                default:
                    *out++ = *p;
                    break;
                }
            }
            if (*p)
                p++;
        }
        ref_add(a, cur, (size_t)(out - cur));
    }
}

/* Where the line starting at `start` ends: the first `term` at or after
 * `from`, within max_inline_len bytes of `start`; a NUL before it is an
 * error (resp.h). Returns 1 (*at set), 0 (incomplete) or -1. */
static int ref_line(const uint8_t *b, size_t len, size_t start, size_t from, uint8_t term,
                    size_t max_line, size_t *at) {
    size_t lim = start + max_line + 1;
    size_t w = len < lim ? len : lim;
    for (size_t i = from; i < w; i++) {
        if (b[i] == term) {
            *at = i;
            return 1;
        }
        if (b[i] == 0)
            return -1;
    }
    return len >= lim ? -1 : 0;
}

/* One frame at b[0..len): 1 (*flen, args, *is_inline), 0 or -1. */
static int ref_frame(const uint8_t *b, size_t len, const resp_limits *lim, int unauth,
                     size_t *flen, ref_args *a, int *is_inline) {
    size_t cr, pos;
    long long ll, bl;
    int r;

    a->n = 0;
    if (len == 0)
        return 0;
    if (b[0] != '*') {
        size_t nl, line;
        *is_inline = 1;
        if ((r = ref_line(b, len, 0, 0, '\n', lim->max_inline_len + 1, &nl)) != 1) {
            /* max_inline_len + 1 bytes here, no '\n', and the last is no '\r': too big already */
            if (r == 0 && len == lim->max_inline_len + 1 && b[len - 1] != '\r')
                return -1;
            return r;
        }
        line = nl > 0 && b[nl - 1] == '\r' ? nl - 1 : nl;
        if (line > lim->max_inline_len)
            return -1;
        char *s = copy_of(b, line + 1);
        s[line] = '\0';
        free(a->store);
        a->store = malloc(line + 1);
        CHECK(a->store != NULL);
        r = ref_splitargs(s, a);
        free(s);
        if (r < 0)
            return -1;
        *flen = nl + 1;
        return 1;
    }
    *is_inline = 0;
    if ((r = ref_line(b, len, 0, 1, '\r', lim->max_inline_len, &cr)) != 1)
        return r;
    if (cr + 1 >= len)
        return 0;
    /* the byte after the count's '\r' is skipped unread, as by Redis */
    if (!resp_string2ll((const char *)b + 1, cr - 1, &ll) || ll > lim->max_multibulk_len || ll > INT32_MAX)
        return -1;
    if (unauth && ll > RESP_UNAUTH_MAX_MULTIBULK_LEN)
        return -1;
    pos = cr + 2;
    for (long long i = 0; i < ll; i++) {
        size_t start = pos, end;
        if ((r = ref_line(b, len, start, start, '\r', lim->max_inline_len, &cr)) != 1)
            return r;
        if (cr + 1 >= len)
            return 0;
        if (b[start] != '$')
            return -1;
        if (!resp_string2ll((const char *)b + start + 1, cr - start - 1, &bl) || bl < 0 ||
            bl > lim->max_bulk_len || b[cr + 1] != '\n')
            return -1;
        if (unauth && bl > RESP_UNAUTH_MAX_BULK_LEN)
            return -1;
        pos = cr + 2;
        if (len < pos + (size_t)bl + 2) /* bl <= max_bulk_len: no overflow */
            return 0;
        end = pos + (size_t)bl + 2;
        if (b[end - 2] != '\r' || b[end - 1] != '\n')
            return -1;
        ref_add(a, (const char *)b + pos, (size_t)bl);
        pos = end;
    }
    *flen = pos;
    return 1;
}

static void run_ref(const uint8_t *data, size_t size, const resp_limits *lim, int unauth,
                    run_rec *out) {
    ref_args a = {0};
    size_t start = 0;

    memset(out, 0, sizeof *out);
    for (;;) {
        size_t flen = 0;
        int is_inline = 0;
        int r = ref_frame(data + start, size - start, lim, unauth, &flen, &a, &is_inline);
        if (r == 1) {
            add_frame(out, flen, a.n, is_inline, hash_args(a.n, a.v));
            start += flen;
            continue;
        }
        out->end = r < 0 ? END_ERR : start == size ? END_CLEAN : END_AGAIN;
        break;
    }
    free(a.v);
    free(a.store);
}

/* ------------------------------------------------------------------------ */

/* The one error whose text depends on the split (resp.h): a '*'/'$' header
 * line past max_inline_len is "too big ..." when the limit was passed before
 * its '\r' came, and judged on what it holds when the '\r' was there. */
static int split_dependent_err(const char *whole, const char *split) {
    if (strcmp(split, "Protocol error: too big mbulk count string") == 0)
        return strcmp(whole, "Protocol error: invalid multibulk length") == 0;
    if (strcmp(split, "Protocol error: too big bulk count string") == 0)
        return strcmp(whole, "Protocol error: invalid bulk length") == 0 ||
               strncmp(whole, "Protocol error: expected '$', got '", 35) == 0;
    return 0;
}

static void compare(const run_rec *x, const run_rec *y, int same_err, int same_need) {
    CHECK(x->nframes == y->nframes);
    for (size_t i = 0; i < x->nframes; i++) {
        CHECK(x->frames[i].frame_len == y->frames[i].frame_len);
        CHECK(x->frames[i].argc == y->frames[i].argc);
        CHECK(x->frames[i].is_inline == y->frames[i].is_inline);
        CHECK(x->frames[i].hash == y->frames[i].hash);
    }
    CHECK(x->end == y->end);
    if (same_err && x->end == END_ERR) {
        CHECK(strcmp(x->err, y->err) == 0 || split_dependent_err(x->err, y->err));
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
    run_ref(stream, n, &lim, flags & F_UNAUTH, &ref);

    compare(&whole, &split, 1, 1); /* whole vs split: identical, but for split_dependent_err */
    compare(&whole, &ref, 0, 0);   /* the reference has no messages or need */

    free(whole.frames);
    free(split.frames);
    free(ref.frames);
    return 0;
}
