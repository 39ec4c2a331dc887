/*
 * protocol/resp.c — streaming RESP2/RESP3 framers and encoders.
 *
 * Data model
 * ----------
 * Both framers look at one frame at a time. The caller passes the bytes that
 * start at the frame's first byte; every position the framer remembers
 * between calls is an offset from that first byte, so the caller may move,
 * grow or copy its buffer between calls.
 *
 * The request framer is a small state machine:
 *
 *   REQ_START --'*'--> REQ_COUNT --n>0--> REQ_BULK_HDR <--> REQ_BULK_DATA
 *       |                  |  n<=0               |  all n args      |
 *       |                  +--> RESP_OK (argc 0) +----> RESP_OK <---+
 *       +--other--> REQ_INLINE --'\n'--> RESP_OK
 *   any state --bad bytes--> REQ_ERROR (sticky until reset)
 *
 * The reply framer walks one value at a time (REP_LINE reads a type byte and
 * its line, REP_BULK waits for a length-prefixed payload) and keeps a stack
 * of open aggregates: remaining[i] elements still expected at level i,
 * uncounted[i] set when level i is not an element of its parent (an
 * attribute map).
 *
 * Invariants
 * ----------
 * - pos is the offset of the first byte of the element being read (a header
 *   line, or a bulk payload in the *_BULK_DATA/REP_BULK states); everything
 *   before it has been validated and is never looked at again.
 * - scan (pos <= scan) is how far the current line has been searched for its
 *   terminator, so a line arriving a byte at a time is searched once: the
 *   total work is O(bytes), whatever the split.
 * - Nothing is sized from a declared count or length. Argument arrays double
 *   as arguments are completed; the inline scratch grows to the line actually
 *   received; the reply stack grows one level per aggregate actually opened
 *   (at least 4 bytes each), with no limit on depth: Redis nests a reply as
 *   deep as a script's table, and a frame refused would fail every request
 *   queued behind it on a shared connection.
 * - A frame fed whole, byte by byte or in any split gives the same result,
 *   with one exception kept for Redis's sake: a '*'/'$' header line longer
 *   than max_inline_len is refused as "too big ..." when that many bytes are
 *   here without its '\r', and for its content ("invalid bulk length") when
 *   its '\r' is already here, as Redis decides (see resp.h). It is refused
 *   either way; only the text depends on the split. An inline line is
 *   judged on its length alone.
 *
 * Fast paths: what arrives whole and usual (a request frame of short
 * lengths, runs of small integers and bulks inside an aggregate) is read in
 * one pass with no resumable state (req_whole_frame, rep_simple_elements).
 * They take nothing the general path would refuse or read differently: on
 * anything else they stop, having changed no state that path reads, and it
 * frames the same bytes. The unit tests run every case both ways.
 */
#include "protocol/resp.h"

#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Redis's own request error texts (networking.c). */
#define ERR_TOO_BIG_INLINE "Protocol error: too big inline request"
#define ERR_UNBALANCED     "Protocol error: unbalanced quotes in request"
#define ERR_MBULK_LEN      "Protocol error: invalid multibulk length"
#define ERR_BULK_LEN       "Protocol error: invalid bulk length"
#define ERR_TOO_BIG_MBULK  "Protocol error: too big mbulk count string"
#define ERR_TOO_BIG_BULK   "Protocol error: too big bulk count string"
/* Ours, for replies (Redis never parses replies). */
#define ERR_REPLY_TYPE     "Protocol error: invalid reply type byte"
#define ERR_STREAMED       "Protocol error: streamed RESP3 types are not supported"
#define ERR_REPLY_LINE     "Protocol error: too big reply line"
#define ERR_DEPTH          "Protocol error: reply nested too deep" /* INT_MAX levels */
#define ERR_BULK_CRLF      "Protocol error: expected CRLF after bulk payload"
#define ERR_INT            "Protocol error: invalid integer"
#define ERR_DOUBLE         "Protocol error: invalid double"
#define ERR_BOOL           "Protocol error: invalid boolean"
#define ERR_NULL           "Protocol error: invalid null"
#define ERR_VERBATIM       "Protocol error: invalid verbatim string"
#define ERR_OOM            "out of memory"

void resp_limits_default(resp_limits *lim) {
    lim->max_bulk_len = RESP_DEFAULT_MAX_BULK_LEN;
    lim->max_multibulk_len = RESP_DEFAULT_MAX_MULTIBULK_LEN;
    lim->max_inline_len = RESP_DEFAULT_MAX_INLINE_LEN;
}

/* ------------------------------------------------------------------------ */
/* Shared helpers                                                           */

/*
 * Parses a whole decimal integer the way Redis's string2ll does: an optional
 * '-', no '+', no leading zeros ("0" alone excepted), no "-0", no blanks, at
 * most 20 characters, no overflow. Returns 1 and sets *out, or 0.
 * Strictness matters: a proxy that read "+3" or "03" differently from Redis
 * would frame the stream differently from the server behind it.
 */
int resp_string2ll(const char *s, size_t n, long long *out) {
    size_t i = 0;
    int neg = 0;
    unsigned long long v;

    if (n == 0 || n >= 21)
        return 0;
    if (n == 1 && s[0] == '0') {
        *out = 0;
        return 1;
    }
    if (s[0] == '-') {
        neg = 1;
        if (++i == n)
            return 0;
    }
    if (s[i] < '1' || s[i] > '9')
        return 0;
    v = (unsigned long long)(s[i++] - '0');
    for (; i < n; i++) {
        unsigned d;
        if (s[i] < '0' || s[i] > '9')
            return 0;
        d = (unsigned)(s[i] - '0');
        if (v > (ULLONG_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    if (neg) {
        if (v > (unsigned long long)LLONG_MAX + 1)
            return 0;
        /* -(LLONG_MIN) overflows: build it from -(v-1)-1 instead. */
        *out = v == 0 ? 0 : -(long long)(v - 1) - 1;
    } else {
        if (v > (unsigned long long)LLONG_MAX)
            return 0;
        *out = (long long)v;
    }
    return 1;
}

size_t resp_read_int_line(const char *buf, size_t len, size_t at, char type, long long *v) {
    if (at >= len || buf[at] != type) return 0;
    const char *cr = memchr(buf + at + 1, '\r', len - at - 1);
    if (cr == NULL || (size_t)(cr - buf) + 1 >= len || cr[1] != '\n' ||
        !resp_string2ll(buf + at + 1, (size_t)(cr - buf) - at - 1, v))
        return 0;
    return (size_t)(cr - buf) + 2;
}

int resp_read_bulk(const char *buf, size_t len, size_t at, const char **val, size_t *vlen, size_t *next) {
    long long n;
    size_t p;
    if (at < len && len - at >= 3 && memcmp(buf + at, "_\r\n", 3) == 0) {
        *next = at + 3;
        return 2;
    }
    if (at < len && len - at >= 4 && buf[at] == '$' && buf[at + 1] - '0' >= 0 && buf[at + 1] - '0' < 10 &&
        buf[at + 2] == '\r' && buf[at + 3] == '\n') {
        /* a length of one digit, as most keys have: no line search */
        n = buf[at + 1] - '0';
        p = at + 4;
    } else if ((p = resp_read_int_line(buf, len, at, '$', &n)) == 0) {
        return 0;
    }
    if (n == -1) {
        *next = p;
        return 2;
    }
    if (n < 0 || (size_t)n > len - p || len - p - (size_t)n < 2 || buf[p + n] != '\r' || buf[p + n + 1] != '\n')
        return 0;
    *val = buf + p;
    *vlen = (size_t)n;
    *next = p + (size_t)n + 2;
    return 1;
}

/* Offset one past the furthest place a line starting at `start` may put its
 * terminator, saturating instead of wrapping. */
static size_t line_limit_end(size_t start, size_t max_line) {
    if (max_line >= SIZE_MAX - start - 1)
        return SIZE_MAX;
    return start + max_line + 1;
}

/* Reallocates arr (elements of `size` bytes, *cap of them) to hold at least
 * `want` elements, doubling from *cap (or 8). Returns the new block and sets
 * *cap, or returns NULL leaving arr valid and *cap untouched. Returning the
 * pointer (rather than taking a void **) keeps callers' typed pointers free
 * of aliasing tricks. */
static void *grow_array(void *arr, size_t *cap, size_t want, size_t size) {
    size_t ncap = *cap ? *cap : 8;
    void *n;

    while (ncap < want) {
        if (ncap > SIZE_MAX / 2 / size)
            return NULL;
        ncap *= 2;
    }
    if (ncap > SIZE_MAX / size)
        return NULL;
    n = realloc(arr, ncap * size);
    if (n != NULL)
        *cap = ncap;
    return n;
}

/* ------------------------------------------------------------------------ */
/* resp_buf                                                                 */

void resp_buf_init(resp_buf *b) {
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->failed = 0;
}

void resp_buf_deinit(resp_buf *b) {
    free(b->data);
    resp_buf_init(b);
}

void resp_buf_trim(resp_buf *b, size_t keep) {
    if (b->len == 0 && b->cap > keep) resp_buf_deinit(b);
}

void resp_buf_reset(resp_buf *b) {
    b->len = 0;
    b->failed = 0;
}

/* Makes room for `extra` more bytes; geometric so appends are amortised O(1). */
static int buf_reserve(resp_buf *b, size_t extra) {
    size_t want, ncap;
    char *d;

    if (extra <= b->cap - b->len)
        return 0;
    if (extra > SIZE_MAX - b->len) {
        b->failed = 1;
        return -1;
    }
    want = b->len + extra;
    ncap = b->cap ? b->cap : 64;
    while (ncap < want)
        ncap = ncap > SIZE_MAX / 2 ? want : ncap * 2;
    d = realloc(b->data, ncap);
    if (d == NULL) {
        b->failed = 1;
        return -1;
    }
    b->data = d;
    b->cap = ncap;
    return 0;
}

int resp_buf_append(resp_buf *b, const void *p, size_t n) {
    if (n == 0)
        return 0;
    if (buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

int resp_buf_printf(resp_buf *b, const char *fmt, ...) {
    va_list ap, ap2;
    size_t room = b->cap - b->len;
    int n;

    /* First try the spare room: most encoder lines fit without a realloc.
     * Writing there never touches b->data[0..len). */
    va_start(ap, fmt);
    va_copy(ap2, ap);
    n = vsnprintf(room ? b->data + b->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n < 0) {
        va_end(ap2);
        return -1;
    }
    if ((size_t)n >= room) {
        if (buf_reserve(b, (size_t)n + 1) < 0) {
            va_end(ap2);
            return -1;
        }
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
    }
    va_end(ap2);
    b->len += (size_t)n;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Request framer                                                           */

enum {
    REQ_START,     /* nothing of the frame looked at yet */
    REQ_INLINE,    /* looking for the '\n' of an inline line */
    REQ_COUNT,     /* looking for the '\r' of "*<count>" */
    REQ_BULK_HDR,  /* looking for the '\r' of "$<len>" at pos */
    REQ_BULK_DATA, /* waiting for bulk_len bytes + CRLF at pos */
    REQ_ERROR      /* sticky */
};

/* Above these, the arrays of a finished frame are released at the start of
 * the next one, so one huge command does not pin memory for the
 * connection's lifetime (Redis frees argv after each command too). */
#define REQ_KEEP_ARGS 1024
#define REQ_KEEP_SCRATCH (16 * 1024)

void resp_req_init(resp_req_parser *p, const resp_limits *lim) {
    memset(p, 0, sizeof(*p));
    if (lim)
        p->lim = *lim;
    else
        resp_limits_default(&p->lim);
    p->state = REQ_START;
}

static void req_free_args(resp_req_parser *p) {
    free(p->arg_offs);
    free(p->arg_lens);
    free(p->arg_vec);
    p->arg_offs = NULL;
    p->arg_lens = NULL;
    p->arg_vec = NULL;
    p->args_cap = 0;
}

void resp_req_deinit(resp_req_parser *p) {
    req_free_args(p);
    free(p->scratch);
    p->scratch = NULL;
    p->scratch_cap = 0;
    p->argv = NULL;
    p->argc = 0;
}

size_t resp_req_unparsed(const resp_req_parser *p, size_t len) {
    int in_args = p->state == REQ_BULK_HDR || p->state == REQ_BULK_DATA;
    return in_args && p->pos <= len ? len - p->pos : len;
}

void resp_req_reset(resp_req_parser *p) {
    p->state = REQ_START;
    p->pos = 0;
    p->scan = 0;
    p->args_seen = 0;
    p->expect_args = 0;
    p->bulk_len = 0;
    p->err = NULL;
    p->argc = 0;
    p->argv = NULL;
    p->need = 0;
    p->frame_len = 0;
    p->is_inline = 0;
}

static int req_fail(resp_req_parser *p, const char *msg) {
    p->state = REQ_ERROR;
    p->err = msg;
    return RESP_ERR;
}

/* Makes room for argument number args_seen: the three arrays grow
 * together, one doubling at a time, as arguments are completed. */
static int req_grow_args(resp_req_parser *p) {
    size_t c1 = (size_t)p->args_cap, c2 = c1, c3 = c1;
    size_t want = (size_t)p->args_seen + 1;
    size_t *offs, *lens;
    resp_arg *vec;
    /* Each array is stored as soon as it has grown: realloc keeps the old
     * block on failure, so a partial success only leaves some arrays
     * larger than args_cap, which is harmless. */
    if (want > INT_MAX)
        return -1;
    if ((offs = grow_array(p->arg_offs, &c1, want, sizeof(*offs))) == NULL)
        return -1;
    p->arg_offs = offs;
    if ((lens = grow_array(p->arg_lens, &c2, want, sizeof(*lens))) == NULL)
        return -1;
    p->arg_lens = lens;
    if ((vec = grow_array(p->arg_vec, &c3, want, sizeof(*vec))) == NULL)
        return -1;
    p->arg_vec = vec;
    p->args_cap = c1 > INT_MAX ? INT_MAX : (int)c1;
    return 0;
}

/* Records argument number args_seen at (off, len). Inline: it runs for
 * every argument, and grows the arrays only now and then. */
static inline int req_add_arg(resp_req_parser *p, size_t off, size_t len) {
    if (p->args_seen == p->args_cap && req_grow_args(p) < 0)
        return -1;
    p->arg_offs[p->args_seen] = off;
    p->arg_lens[p->args_seen] = len;
    p->args_seen++;
    return 0;
}

/* Fills argv from the recorded offsets, against `base` (the caller's buffer
 * or the inline scratch): pointers are made only now, never kept. */
static int req_done(resp_req_parser *p, const char *base, size_t frame_len,
                    int is_inline) {
    int i;

    for (i = 0; i < p->args_seen; i++) {
        p->arg_vec[i].ptr = base + p->arg_offs[i];
        p->arg_vec[i].len = p->arg_lens[i];
    }
    p->argc = p->args_seen;
    p->argv = p->argc ? p->arg_vec : NULL;
    p->frame_len = frame_len;
    p->is_inline = is_inline;
    p->state = REQ_START;
    p->pos = 0;
    p->scan = 0;
    return RESP_OK;
}

/*
 * Finds the byte `term` ending a line that starts at `start`, searching from
 * p->scan. Mirrors Redis's strchr(): a NUL byte hides everything after it, so
 * a NUL before the terminator means the line can never end (see resp.h).
 * As Redis, "too big" is for a line that has not ended: more than
 * max_inline_len bytes from `start` are here and none is `term`. A line whose
 * terminator is already here beyond the limit is returned when `long_ok`
 * (a '*' or '$' header: the caller refuses it for what it holds, "invalid
 * bulk length", as Redis does, so that a line past the limit is never
 * taken, however it was split) and refused with `too_big` otherwise (an
 * inline line: see resp.h).
 * Returns RESP_OK with *at set, RESP_AGAIN, or RESP_ERR with `too_big`.
 */
static int req_find(resp_req_parser *p, const char *buf, size_t len, size_t start, char term, int long_ok,
                    const char *too_big, size_t *at) {
    /* an inline line holds max_inline_len bytes before its "\r\n" (req_inline
     * judges what the line holds): its '\n' may be one byte further */
    size_t max = p->lim.max_inline_len;
    size_t lim = line_limit_end(start, long_ok || max == SIZE_MAX ? max : max + 1);
    size_t end = long_ok || len < lim ? len : lim;
    size_t from = p->scan;
    const char *hit = NULL;

    /* Most lines are short ("$3", "*4"): one pass over their first bytes
     * looks for both bytes at once, cheaper than two memchr calls. */
    size_t quick = from < end && end - from > 32 ? from + 32 : end;
    for (; from < quick; from++) {
        if (buf[from] == term) {
            p->scan = from;
            *at = from;
            return RESP_OK;
        }
        if (buf[from] == '\0')
            return req_fail(p, too_big);
    }
    if (from < end)
        hit = memchr(buf + from, term, end - from);
    if (hit) {
        size_t i = (size_t)(hit - buf);
        if (memchr(buf + from, '\0', i - from))
            return req_fail(p, too_big);
        p->scan = i; /* a later call finds it again at once */
        *at = i;
        return RESP_OK;
    }
    if (from < end && memchr(buf + from, '\0', end - from))
        return req_fail(p, too_big);
    if (end > p->scan)
        p->scan = end;
    if (len >= lim)
        return req_fail(p, too_big);
    /* an inline line past the limit already, unless its last byte is the
     * '\r' of a "\r\n" still to come */
    if (!long_ok && len == lim - 1 && len > start && buf[len - 1] != '\r')
        return req_fail(p, too_big);
    return RESP_AGAIN;
}

static int is_hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
           (c >= 'A' && c <= 'F');
}

static int hex_val(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return c - 'A' + 10;
}

/* isspace() in the C locale, without depending on the process locale. */
static int is_blank(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' ||
           c == '\r';
}

/*
 * Splits s[0..n) into arguments as Redis's sdssplitargs does, writing them
 * into p->scratch (which the caller sized to n: unquoting only shrinks) and
 * recording them with req_add_arg. s contains no NUL (req_find saw to that),
 * so "past the end" plays the part of sdssplitargs's terminating NUL.
 * Returns 0, -1 for unbalanced quotes, -2 when out of memory.
 */
static int req_split_inline(resp_req_parser *p, const char *s, size_t n) {
    size_t i = 0, out = 0;
#define AT(k) ((k) < n ? s[(k)] : '\0')

    for (;;) {
        size_t arg_start;
        int inq = 0, insq = 0, done = 0;

        /* Leading blanks use isspace(); inside a token only these four end
         * it (so "a\vb" is one argument), exactly as in sdssplitargs. */
        while (i < n && is_blank(s[i]))
            i++;
        if (i >= n)
            return 0;
        arg_start = out;
        while (!done) {
            char c = AT(i);
            if (inq) {
                if (c == '\\' && AT(i + 1) == 'x' && is_hex(AT(i + 2)) &&
                    is_hex(AT(i + 3))) {
                    p->scratch[out++] =
                        (char)(hex_val(AT(i + 2)) * 16 + hex_val(AT(i + 3)));
                    i += 3;
                } else if (c == '\\' && AT(i + 1)) {
                    char e;
                    i++;
                    switch (s[i]) {
                    case 'n': e = '\n'; break;
                    case 'r': e = '\r'; break;
                    case 't': e = '\t'; break;
                    case 'b': e = '\b'; break;
                    case 'a': e = '\a'; break;
                    default: e = s[i]; break;
                    }
                    p->scratch[out++] = e;
                } else if (c == '"') {
                    /* The closing quote must end the argument. */
                    if (AT(i + 1) && !is_blank(AT(i + 1)))
                        return -1;
                    done = 1;
                } else if (!c) {
                    return -1;
                } else {
                    p->scratch[out++] = c;
                }
            } else if (insq) {
                if (c == '\\' && AT(i + 1) == '\'') {
                    i++;
                    p->scratch[out++] = '\'';
                } else if (c == '\'') {
                    if (AT(i + 1) && !is_blank(AT(i + 1)))
                        return -1;
                    done = 1;
                } else if (!c) {
                    return -1;
                } else {
                    p->scratch[out++] = c;
                }
            } else {
                switch (c) {
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
                    p->scratch[out++] = c;
                    break;
                }
            }
            if (i < n)
                i++;
        }
        if (req_add_arg(p, arg_start, out - arg_start) < 0)
            return -2;
    }
#undef AT
}

static int req_inline(resp_req_parser *p, const char *buf, size_t len) {
    size_t nl, line;
    int rc = req_find(p, buf, len, 0, '\n', 0, ERR_TOO_BIG_INLINE, &nl);

    if (rc != RESP_OK)
        return rc;
    line = nl;
    if (line > 0 && buf[line - 1] == '\r')
        line--;
    if (line > p->lim.max_inline_len)
        return req_fail(p, ERR_TOO_BIG_INLINE);
    if (line > p->scratch_cap) {
        char *s = grow_array(p->scratch, &p->scratch_cap, line, 1);
        if (s == NULL)
            return req_fail(p, ERR_OOM);
        p->scratch = s;
    }
    p->args_seen = 0;
    rc = req_split_inline(p, buf, line);
    if (rc == -1)
        return req_fail(p, ERR_UNBALANCED);
    if (rc == -2)
        return req_fail(p, ERR_OOM);
    return req_done(p, p->scratch, nl + 1, 1);
}

/*
 * The usual bulk header, whole in buf: '$', a length of 1 to 9 digits
 * without a leading zero (or "0"), CRLF, within the limits. Reads it as the
 * general path below would (same state, position and scan point) and
 * returns 1; returns 0, having changed nothing, for anything else, which
 * the general path then reads or refuses with its own error text. Most
 * arguments of a request are short: this spares them the line search and
 * the general number parser (a transaction of 1,000 commands has ~3,500).
 */
static int req_bulk_hdr_fast(resp_req_parser *p, const char *buf, size_t len) {
    size_t start = p->pos, i = start + 1;
    unsigned long long v = 0;
    if (start >= len || buf[start] != '$')
        return 0;
    while (i < len && i - start <= 9 && (unsigned char)(buf[i] - '0') < 10)
        v = v * 10 + (unsigned)(buf[i++] - '0');
    if (i == start + 1 || i + 1 >= len || buf[i] != '\r' || buf[i + 1] != '\n')
        return 0;
    if ((buf[start + 1] == '0' && i != start + 2) || i - start > p->lim.max_inline_len)
        return 0;
    if ((long long)v > p->lim.max_bulk_len || (p->unauthenticated && (long long)v > RESP_UNAUTH_MAX_BULK_LEN) ||
        v > SIZE_MAX - (i + 2) - 2)
        return 0;
    p->bulk_len = (long long)v;
    p->scan = i;
    p->pos = i + 2;
    p->state = REQ_BULK_DATA;
    return 1;
}

/*
 * Reads the decimal number of 1 to 9 digits (no leading zero but "0" alone)
 * that ends with CRLF at buf[at..len), as the general path would accept it
 * with a line of at most max_line bytes from `start`. Returns the offset
 * past the CRLF and sets *v, or 0 for anything else (which the general path
 * then reads or refuses).
 */
static inline size_t req_small_number(const char *buf, size_t len, size_t at, size_t start, size_t max_line,
                                      unsigned long long *v) {
    size_t i = at;
    unsigned long long n = 0;
    /* one or two digits, the lengths of nearly all arguments */
    if (len - at >= 4 && max_line >= at + 2 - start) {
        unsigned d0 = (unsigned char)buf[at] - (unsigned)'0', d1 = (unsigned char)buf[at + 1] - (unsigned)'0';
        if (d0 < 10 && buf[at + 1] == '\r' && buf[at + 2] == '\n') {
            *v = d0;
            return at + 3;
        }
        if (d0 - 1 < 9 && d1 < 10 && buf[at + 2] == '\r' && buf[at + 3] == '\n') {
            *v = d0 * 10 + d1;
            return at + 4;
        }
    }
    while (i < len && i - at < 9 && (unsigned char)(buf[i] - '0') < 10)
        n = n * 10 + (unsigned)(buf[i++] - '0');
    if (i == at || i + 1 >= len || buf[i] != '\r' || buf[i + 1] != '\n' || (buf[at] == '0' && i != at + 1) ||
        i - start > max_line)
        return 0;
    *v = n;
    return i + 2;
}

/*
 * A whole multibulk frame, as most arrive: all of it in buf, a count and
 * bulk lengths of at most 9 digits, within the limits, and no more
 * arguments than the argument array already holds (nothing is sized from
 * a declared count). Fills argv straight from buf, in one pass with no
 * resumable state, and returns 1; returns 0 having changed nothing the
 * general path reads, which then frames the same bytes (or refuses them
 * with its error text). A transaction of 1,000 commands is ~3,500
 * arguments: this is the proxy's most frequent loop.
 */
static int req_whole_frame(resp_req_parser *p, const char *buf, size_t len) {
    unsigned long long count, blen;
    size_t max_line = p->lim.max_inline_len;
    unsigned long long max_bulk = (unsigned long long)p->lim.max_bulk_len;
    size_t at = req_small_number(buf, len, 1, 0, max_line, &count);

    if (p->lim.max_bulk_len < 0)
        return 0;
    if (p->unauthenticated && max_bulk > RESP_UNAUTH_MAX_BULK_LEN)
        max_bulk = RESP_UNAUTH_MAX_BULK_LEN;
    if (at == 0 || count == 0 || count > (unsigned long long)p->args_cap ||
        (long long)count > p->lim.max_multibulk_len ||
        (p->unauthenticated && count > RESP_UNAUTH_MAX_MULTIBULK_LEN))
        return 0;
    for (unsigned long long k = 0; k < count; k++) {
        size_t data;
        if (at >= len || buf[at] != '$' || (data = req_small_number(buf, len, at + 1, at, max_line, &blen)) == 0 ||
            blen > max_bulk || blen > len - data || len - data - blen < 2 || buf[data + blen] != '\r' ||
            buf[data + blen + 1] != '\n')
            return 0;
        p->arg_vec[k].ptr = buf + data;
        p->arg_vec[k].len = (size_t)blen;
        at = data + (size_t)blen + 2;
    }
    p->args_seen = p->argc = (int)count;
    p->argv = p->arg_vec;
    p->frame_len = at;
    return 1;
}

static int req_multibulk(resp_req_parser *p, const char *buf, size_t len) {
    size_t cr;
    long long ll;
    int rc;

    if (p->state == REQ_COUNT) {
        rc = req_find(p, buf, len, 0, '\r', 1, ERR_TOO_BIG_MBULK, &cr);
        if (rc != RESP_OK)
            return rc;
        /* A line past the limit holds no valid count, whatever byte comes
         * after its '\r': refused now, with the text Redis gives it once
         * that byte is in. */
        if (cr > p->lim.max_inline_len)
            return req_fail(p, ERR_MBULK_LEN);
        if (cr + 1 >= len) {
            p->need = cr + 2;
            return RESP_AGAIN;
        }
        /* The byte after the '\r' is skipped unread, as Redis does: what
         * follows is framed as Redis frames it ("*1\r\r\n$..." then fails on
         * the '\n' where a '$' should be, with Redis's text). */
        if (!resp_string2ll(buf + 1, cr - 1, &ll) || ll > p->lim.max_multibulk_len || ll > INT_MAX)
            return req_fail(p, ERR_MBULK_LEN);
        if (p->unauthenticated && ll > RESP_UNAUTH_MAX_MULTIBULK_LEN)
            return req_fail(p, "Protocol error: unauthenticated multibulk length");
        p->pos = cr + 2;
        p->args_seen = 0;
        if (ll <= 0) /* "*0", "*-1", "*-5": Redis skips them silently */
            return req_done(p, buf, p->pos, 0);
        p->expect_args = ll;
        p->scan = p->pos;
        p->state = REQ_BULK_HDR;
    }
    while (p->args_seen < p->expect_args) {
        if (p->state == REQ_BULK_HDR && req_bulk_hdr_fast(p, buf, len)) {
            /* read: p->state is REQ_BULK_DATA */
        } else if (p->state == REQ_BULK_HDR) {
            size_t start = p->pos;
            int past_limit;
            rc = req_find(p, buf, len, start, '\r', 1, ERR_TOO_BIG_BULK, &cr);
            if (rc != RESP_OK)
                return rc;
            /* as for the count line: refused now, whatever byte comes next */
            past_limit = cr - start > p->lim.max_inline_len;
            if (cr + 1 >= len && !past_limit) {
                p->need = cr + 2;
                return RESP_AGAIN;
            }
            if (buf[start] != '$') {
                static const char pre[] = "Protocol error: expected '$', got '";
                char c = buf[start];
                /* Redis maps CR/LF in error texts to spaces; other bytes go
                 * out raw. */
                if (c == '\r' || c == '\n')
                    c = ' ';
                memcpy(p->err_buf, pre, sizeof(pre) - 1);
                p->err_buf[sizeof(pre) - 1] = c;
                p->err_buf[sizeof(pre)] = '\'';
                p->err_buf[sizeof(pre) + 1] = '\0';
                return req_fail(p, p->err_buf);
            }
            if (past_limit || !resp_string2ll(buf + start + 1, cr - start - 1, &ll) || ll < 0 ||
                ll > p->lim.max_bulk_len || buf[cr + 1] != '\n' ||
                (unsigned long long)ll > SIZE_MAX - (cr + 2) - 2)
                return req_fail(p, ERR_BULK_LEN);
            if (p->unauthenticated && ll > RESP_UNAUTH_MAX_BULK_LEN)
                return req_fail(p, "Protocol error: unauthenticated bulk length");
            p->bulk_len = ll;
            p->pos = cr + 2;
            p->state = REQ_BULK_DATA;
        }
        {
            size_t end = p->pos + (size_t)p->bulk_len + 2;
            if (len < end) {
                p->need = end;
                return RESP_AGAIN;
            }
            /* Redis does not look at these two bytes; we do (see resp.h). */
            if (buf[end - 2] != '\r' || buf[end - 1] != '\n')
                return req_fail(p, ERR_BULK_LEN);
            if (req_add_arg(p, p->pos, (size_t)p->bulk_len) < 0)
                return req_fail(p, ERR_OOM);
            p->pos = end;
            p->scan = end;
            p->state = REQ_BULK_HDR;
        }
    }
    return req_done(p, buf, p->pos, 0);
}

int resp_req_parse(resp_req_parser *p, const char *buf, size_t len) {
    p->argc = 0;
    p->argv = NULL;
    p->need = 0;
    p->frame_len = 0;
    p->is_inline = 0;
    if (p->state == REQ_ERROR)
        return RESP_ERR;
    if (p->state == REQ_START) {
        if (len == 0)
            return RESP_AGAIN;
        if (p->args_cap > REQ_KEEP_ARGS)
            req_free_args(p);
        if (p->scratch_cap > REQ_KEEP_SCRATCH) {
            free(p->scratch);
            p->scratch = NULL;
            p->scratch_cap = 0;
        }
        p->pos = 0;
        p->args_seen = 0;
        p->expect_args = 0;
        /* Like Redis: a frame is multibulk iff its first byte is '*'. */
        if (buf[0] == '*' && req_whole_frame(p, buf, len))
            return RESP_OK;
        if (buf[0] == '*') {
            p->state = REQ_COUNT;
            p->scan = 1;
        } else {
            p->state = REQ_INLINE;
            p->scan = 0;
        }
    }
    if (p->state == REQ_INLINE)
        return req_inline(p, buf, len);
    return req_multibulk(p, buf, len);
}

/* ------------------------------------------------------------------------ */
/* Reply framer                                                             */

enum {
    REP_LINE,  /* reading the type byte and line of the element at pos */
    REP_BULK,  /* waiting for bulk_len bytes + CRLF at pos */
    REP_ERROR  /* sticky */
};

void resp_reply_init(resp_reply_parser *p, const resp_limits *lim) {
    memset(p, 0, sizeof(*p));
    if (lim)
        p->lim = *lim;
    else
        resp_limits_default(&p->lim);
    p->state = REP_LINE;
}

void resp_reply_deinit(resp_reply_parser *p) {
    free(p->remaining);
    free(p->uncounted);
    p->remaining = NULL;
    p->uncounted = NULL;
    p->stack_cap = 0;
}

/* Levels of stack a framer keeps between frames: usual replies nest a few
 * levels; one that went far deeper gives its stack back when it ends. */
#define REP_STACK_KEEP 256

/* Forgets the frame in progress (not the result of the last RESP_OK). */
static void rep_restart(resp_reply_parser *p) {
    if (p->stack_cap > REP_STACK_KEEP)
        resp_reply_deinit(p);
    p->state = REP_LINE;
    p->pos = 0;
    p->scan = 0;
    p->depth = 0;
    p->top_seen = 0;
    p->bulk_len = 0;
    p->cur_type = 0;
}

void resp_reply_reset(resp_reply_parser *p) {
    rep_restart(p);
    p->err = NULL;
    p->need = 0;
    p->frame_len = 0;
    p->type = 0;
    p->is_null = 0;
    p->count = 0;
    p->payload_off = 0;
    p->payload_len = 0;
}

static int rep_fail(resp_reply_parser *p, const char *msg) {
    p->state = REP_ERROR;
    p->err = msg;
    return RESP_ERR;
}

/*
 * Finds the CRLF ending the line that starts at `start` (its type byte).
 * A lone '\r' is part of the line, as in hiredis. Returns RESP_OK with *cr at
 * the '\r', RESP_AGAIN, or RESP_ERR when the line is longer than
 * max_inline_len.
 */
static int rep_find_crlf(resp_reply_parser *p, const char *buf, size_t len,
                         size_t start, size_t *cr) {
    size_t lim = line_limit_end(start, p->lim.max_inline_len);
    size_t end = len < lim ? len : lim;
    size_t i = p->scan > start ? p->scan : start + 1;

    while (i < end) {
        const char *hit = memchr(buf + i, '\r', end - i);
        if (hit == NULL) {
            i = end;
            break;
        }
        i = (size_t)(hit - buf);
        if (i + 1 >= len) {
            p->scan = i;
            p->need = i + 2;
            return RESP_AGAIN;
        }
        if (buf[i + 1] == '\n') {
            p->scan = i;
            *cr = i;
            return RESP_OK;
        }
        i++;
    }
    p->scan = i;
    if (i >= lim)
        return rep_fail(p, ERR_REPLY_LINE);
    return RESP_AGAIN;
}

/*
 * Opens an aggregate level expecting `elems` elements; `uncounted` when the
 * level, once closed, is no element of its parent. The stack grows with
 * the levels actually opened, so depth is bounded only by the bytes
 * received (and by int: 2^31 levels are 8 GB of "*1\r\n").
 */
static int rep_push(resp_reply_parser *p, long long elems, int uncounted) {
    if (p->depth == INT_MAX)
        return rep_fail(p, ERR_DEPTH);
    if (p->depth == p->stack_cap) {
        size_t c1 = (size_t)p->stack_cap, c2 = c1;
        size_t want = (size_t)p->depth + 1;
        long long *rem;
        unsigned char *flags;
        if ((rem = grow_array(p->remaining, &c1, want, sizeof(*rem))) == NULL)
            return rep_fail(p, ERR_OOM);
        p->remaining = rem;
        if ((flags = grow_array(p->uncounted, &c2, want, 1)) == NULL)
            return rep_fail(p, ERR_OOM);
        p->uncounted = flags;
        p->stack_cap = c1 > INT_MAX ? INT_MAX : (int)c1;
    }
    p->remaining[p->depth] = elems;
    p->uncounted[p->depth] = (unsigned char)uncounted;
    p->depth++;
    return RESP_OK;
}

/*
 * A value (not an attribute map) has just ended. Counts it against the open
 * levels, closing each level it completes; a closed aggregate is itself a
 * completed element of its parent, but a closed uncounted level is not: an
 * attribute map only decorates the value that follows it. Returns 1 when
 * the top-level value is complete.
 */
static int rep_value_done(resp_reply_parser *p) {
    while (p->depth > 0) {
        int lvl = p->depth - 1;
        if (--p->remaining[lvl] > 0)
            return 0;
        p->depth--;
        if (p->uncounted[lvl])
            return 0;
    }
    return 1;
}

static int valid_double(const char *s, size_t n) {
    static const char *const words[] = {"inf", "-inf", "+inf", "nan", "-nan"};
    size_t i = 0, w, digits = 0;

    for (w = 0; w < sizeof(words) / sizeof(words[0]); w++) {
        size_t k, wl = strlen(words[w]);
        if (wl != n)
            continue;
        for (k = 0; k < n; k++)
            if ((s[k] | 0x20) != words[w][k])
                break;
        if (k == n)
            return 1;
    }
    if (i < n && (s[i] == '-' || s[i] == '+'))
        i++;
    while (i < n && s[i] >= '0' && s[i] <= '9')
        i++, digits++;
    if (i < n && s[i] == '.') {
        i++;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++, digits++;
    }
    if (digits == 0)
        return 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        size_t ed = 0;
        i++;
        if (i < n && (s[i] == '-' || s[i] == '+'))
            i++;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++, ed++;
        if (ed == 0)
            return 0;
    }
    return i == n;
}

static int rep_known_type(char t) {
    switch (t) {
    case '+': case '-': case ':': case '$': case '*': case '%': case '~': case '>':
    case '_': case ',': case '#': case '(': case '=': case '!': case '|':
        return 1;
    default:
        return 0;
    }
}

/*
 * The usual elements of a large aggregate, EXEC's integers and MGET's short
 * bulks: an integer of at most 18 digits, or a bulk of at most 99 bytes,
 * whole in buf, that does not complete its level (remaining > 1, so no
 * level closes). Reads as many as come in a row as the general path would
 * (same checks, same position), with no call and no line search per
 * element, and stops at anything else, which the general path then reads
 * or refuses with its own error text.
 */
static void rep_simple_elements(resp_reply_parser *p, const char *buf, size_t len) {
    long long *rem = &p->remaining[p->depth - 1];
    size_t at = p->pos, max_line = p->lim.max_inline_len;

    while (*rem > 1 && len - at >= 4) {
        size_t i = at + 1, cr;
        if (buf[at] == ':') {
            size_t d = i + (buf[i] == '-');
            cr = d;
            if (buf[d] == '0') {
                cr = d + 1;
                if (d != i) /* "-0" */
                    break;
            } else {
                while (cr < len && cr - d < 18 && (unsigned char)(buf[cr] - '0') < 10)
                    cr++;
                if (cr == d)
                    break;
            }
            if (cr + 1 >= len || buf[cr] != '\r' || buf[cr + 1] != '\n' || cr - at > max_line)
                break;
            at = cr + 2;
        } else if (buf[at] == '$') {
            unsigned d0 = (unsigned char)buf[i] - (unsigned)'0', d1 = (unsigned char)buf[i + 1] - (unsigned)'0';
            size_t blen;
            if (d0 < 10 && buf[i + 1] == '\r') {
                blen = d0;
                cr = i + 1;
            } else if (d0 - 1 < 9 && d1 < 10 && buf[i + 2] == '\r') {
                blen = d0 * 10 + d1;
                cr = i + 2;
            } else {
                break;
            }
            if ((long long)blen > p->lim.max_bulk_len || cr - at > max_line || len - cr < blen + 4 ||
                buf[cr + 1] != '\n' || buf[cr + 2 + blen] != '\r' || buf[cr + 3 + blen] != '\n')
                break;
            at = cr + 4 + blen;
        } else {
            break;
        }
        --*rem;
    }
    /* Nothing read leaves the line search where it stopped: a long line
     * arriving in many reads is searched once, not once per read. */
    if (at != p->pos) {
        p->pos = at;
        p->scan = at;
    }
}

/* Completes the frame: the result fields are set, the state is fresh. */
static int rep_finish(resp_reply_parser *p) {
    p->frame_len = p->pos;
    if (p->type == '*' || p->type == '%' || p->type == '~' || p->type == '>')
        p->payload_len = p->is_null ? 0 : p->frame_len - p->payload_off;
    rep_restart(p);
    return RESP_OK;
}

int resp_reply_parse(resp_reply_parser *p, const char *buf, size_t len) {
    p->need = 0;
    if (p->state == REP_ERROR)
        return RESP_ERR;
    if (p->pos == 0 && p->depth == 0 && p->state == REP_LINE && !p->top_seen) {
        p->frame_len = 0;
        p->type = 0;
        p->is_null = 0;
        p->count = 0;
        p->payload_off = 0;
        p->payload_len = 0;
    }
    for (;;) {
        size_t start = p->pos, cr, n, next;
        const char *line;
        long long ll;
        char t;
        int top, rc, uncounted;

        if (p->state == REP_BULK) {
            size_t end = p->pos + (size_t)p->bulk_len + 2;
            if (len < end) {
                p->need = end;
                return RESP_AGAIN;
            }
            if (buf[end - 2] != '\r' || buf[end - 1] != '\n')
                return rep_fail(p, ERR_BULK_CRLF);
            if (p->cur_type == '=' && (p->bulk_len < 4 || buf[p->pos + 3] != ':'))
                return rep_fail(p, ERR_VERBATIM);
            p->pos = end;
            p->state = REP_LINE;
            if (rep_value_done(p))
                return rep_finish(p);
            continue;
        }

        if (p->depth > 0 && p->remaining[p->depth - 1] > 1) {
            rep_simple_elements(p, buf, len);
            start = p->pos;
        }
        if (len <= start)
            return RESP_AGAIN;
        t = buf[start];
        /* Judge the type byte as soon as it arrives, so garbage fails at
         * once rather than after a line's worth of bytes. */
        if (t == ';' || t == '.')
            return rep_fail(p, ERR_STREAMED);
        if (!rep_known_type(t))
            return rep_fail(p, ERR_REPLY_TYPE);
        rc = rep_find_crlf(p, buf, len, start, &cr);
        if (rc != RESP_OK)
            return rc;
        line = buf + start + 1;
        n = cr - start - 1;
        next = cr + 2;
        top = p->depth == 0 && t != '|';
        if (top) {
            p->top_seen = 1;
            p->type = t;
            p->is_null = 0;
            p->count = 0;
            p->payload_off = start + 1;
            p->payload_len = n;
        }
        p->pos = next;
        p->scan = next;

        switch (t) {
        case '+':
        case '-':
        case '(': /* any text: Redis passes a script's big_number string
                     through (CR and LF made spaces): "(abc", "(" */
            break;
        case ':':
            if (!resp_string2ll(line, n, &ll))
                return rep_fail(p, ERR_INT);
            if (top)
                p->count = ll;
            break;
        case ',':
            if (!valid_double(line, n))
                return rep_fail(p, ERR_DOUBLE);
            break;
        case '#':
            if (n != 1 || (line[0] != 't' && line[0] != 'f'))
                return rep_fail(p, ERR_BOOL);
            if (top)
                p->count = line[0] == 't';
            break;
        case '_':
            if (n != 0)
                return rep_fail(p, ERR_NULL);
            if (top) {
                p->is_null = 1;
                p->count = -1;
            }
            break;
        case '$':
        case '!':
        case '=':
            if (n == 1 && line[0] == '?')
                return rep_fail(p, ERR_STREAMED);
            if (!resp_string2ll(line, n, &ll))
                return rep_fail(p, ERR_BULK_LEN);
            if (ll == -1 && t == '$') {
                if (top) {
                    p->is_null = 1;
                    p->count = -1;
                    p->payload_off = next;
                    p->payload_len = 0;
                }
                break;
            }
            if (ll < 0 || ll > p->lim.max_bulk_len ||
                (unsigned long long)ll > SIZE_MAX - next - 2)
                return rep_fail(p, ERR_BULK_LEN);
            if (top) {
                p->count = ll;
                p->payload_off = next;
                p->payload_len = (size_t)ll;
            }
            p->bulk_len = ll;
            p->cur_type = t;
            p->state = REP_BULK;
            continue;
        default: /* '*' '%' '~' '>' '|': aggregates */
            /* An attribute is no element of its parent: it decorates the
             * value after it. A push inside an aggregate is one: SUBSCRIBE
             * queued in MULTI answers with it, in EXEC's array, in RESP3.
             * (DEBUG PROTOCOL push writes a push and then its reply, two
             * values for one command: DEBUG PROTOCOL goes through a
             * tunnel, where nothing is framed; proxy/client.c.) */
            uncounted = t == '|';
            if (n == 1 && line[0] == '?')
                return rep_fail(p, ERR_STREAMED);
            if (!resp_string2ll(line, n, &ll))
                return rep_fail(p, ERR_MBULK_LEN);
            if (ll == -1 && t == '*') {
                if (top) {
                    p->is_null = 1;
                    p->count = -1;
                    p->payload_off = next;
                }
                break;
            }
            if (ll < 0 || ll > p->lim.max_multibulk_len || ll > LLONG_MAX / 2)
                return rep_fail(p, ERR_MBULK_LEN);
            if (top) {
                p->count = ll;
                p->payload_off = next;
            }
            if (ll == 0) {
                if (uncounted)
                    continue; /* an empty attribute decorates nothing */
                break;        /* an empty aggregate is a complete value */
            }
            if (rep_push(p, (t == '%' || t == '|') ? 2 * ll : ll, uncounted) < 0)
                return RESP_ERR;
            continue;
        }
        if (rep_value_done(p))
            return rep_finish(p);
    }
}

/* ------------------------------------------------------------------------ */
/* Encoders                                                                 */

/* "<prefix><v>\r\n", the header of most RESP types. */
static int enc_line_ll(resp_buf *b, char prefix, long long v) {
    char tmp[32];
    int n = snprintf(tmp, sizeof(tmp), "%c%lld\r\n", prefix, v);
    return resp_buf_append(b, tmp, (size_t)n);
}

/* "<prefix><s>\r\n" for a string of n bytes; b unchanged on failure. */
static int enc_line(resp_buf *b, char prefix, const char *s, size_t n) {
    if (n > SIZE_MAX - 3 || buf_reserve(b, n + 3) < 0)
        return -1;
    b->data[b->len++] = prefix;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len++] = '\r';
    b->data[b->len++] = '\n';
    return 0;
}

int resp_enc_bulk(resp_buf *b, const char *p, size_t n) {
    size_t mark = b->len;
    /* Reserve the whole thing first so a big payload grows b once. */
    if (n > SIZE_MAX - 32) {
        b->failed = 1;
        return -1;
    }
    if (buf_reserve(b, n + 32) < 0)
        return -1;
    if (enc_line_ll(b, '$', (long long)n) < 0 || resp_buf_append(b, p, n) < 0 ||
        resp_buf_append(b, "\r\n", 2) < 0) {
        b->len = mark;
        return -1;
    }
    return 0;
}

int resp_enc_bulk_str(resp_buf *b, const char *s) {
    return resp_enc_bulk(b, s, strlen(s));
}

int resp_enc_command(resp_buf *b, int argc, const resp_arg *argv) {
    size_t mark = b->len;
    int i;

    if (enc_line_ll(b, '*', argc) < 0)
        return -1;
    for (i = 0; i < argc; i++) {
        if (resp_enc_bulk(b, argv[i].ptr, argv[i].len) < 0) {
            b->len = mark; /* all or nothing */
            return -1;
        }
    }
    return 0;
}

int resp_enc_commandv(resp_buf *b, const char *arg0, ...) {
    va_list ap;
    const char *s;
    size_t mark = b->len;
    int argc = 0;

    va_start(ap, arg0);
    for (s = arg0; s; s = va_arg(ap, const char *))
        argc++;
    va_end(ap);
    if (enc_line_ll(b, '*', argc) < 0)
        return -1;
    va_start(ap, arg0);
    for (s = arg0; s; s = va_arg(ap, const char *)) {
        if (resp_enc_bulk(b, s, strlen(s)) < 0) {
            va_end(ap);
            b->len = mark;
            return -1;
        }
    }
    va_end(ap);
    return 0;
}

int resp_enc_simple(resp_buf *b, const char *s) {
    return enc_line(b, '+', s, strlen(s));
}

int resp_enc_error(resp_buf *b, const char *s) {
    return enc_line(b, '-', s, strlen(s));
}

int resp_enc_int(resp_buf *b, long long v) {
    return enc_line_ll(b, ':', v);
}

int resp_enc_null(resp_buf *b, int proto) {
    return proto >= 3 ? resp_buf_append(b, "_\r\n", 3)
                      : resp_buf_append(b, "$-1\r\n", 5);
}

int resp_enc_null_array(resp_buf *b, int proto) {
    return proto >= 3 ? resp_buf_append(b, "_\r\n", 3)
                      : resp_buf_append(b, "*-1\r\n", 5);
}

int resp_enc_array(resp_buf *b, long long n) {
    return enc_line_ll(b, '*', n);
}

int resp_enc_map(resp_buf *b, long long pairs, int proto) {
    assert(pairs >= 0 && pairs <= LLONG_MAX / 2);
    /* RESP2 has no map: Redis sends the keys and values flattened. */
    return proto >= 3 ? enc_line_ll(b, '%', pairs) : enc_line_ll(b, '*', 2 * pairs);
}

int resp_enc_set(resp_buf *b, long long n, int proto) {
    return enc_line_ll(b, proto >= 3 ? '~' : '*', n);
}

int resp_enc_push(resp_buf *b, long long n, int proto) {
    return enc_line_ll(b, proto >= 3 ? '>' : '*', n);
}

int resp_enc_double(resp_buf *b, double d, int proto) {
    char tmp[64];
    int n;

    /* Spelled out rather than left to printf, whose inf/nan spelling varies
     * by libc ("-nan" on glibc); Redis does the same for inf. */
    if (isnan(d))
        n = snprintf(tmp, sizeof(tmp), "nan");
    else if (isinf(d))
        n = snprintf(tmp, sizeof(tmp), "%s", d > 0 ? "inf" : "-inf");
    else
        n = snprintf(tmp, sizeof(tmp), "%.17g", d);
    if (proto >= 3)
        return enc_line(b, ',', tmp, (size_t)n);
    return resp_enc_bulk(b, tmp, (size_t)n);
}

int resp_enc_bool(resp_buf *b, int v, int proto) {
    if (proto >= 3)
        return resp_buf_append(b, v ? "#t\r\n" : "#f\r\n", 4);
    return resp_buf_append(b, v ? ":1\r\n" : ":0\r\n", 4);
}

int resp_enc_verbatim(resp_buf *b, const char *fmt3, const char *p, size_t n,
                      int proto) {
    size_t mark = b->len;

    if (proto < 3)
        return resp_enc_bulk(b, p, n); /* RESP2: the text alone, as Redis */
    if (fmt3 == NULL)
        fmt3 = "txt";
    assert(strlen(fmt3) == 3);
    if (n > SIZE_MAX - 40) {
        b->failed = 1;
        return -1;
    }
    if (buf_reserve(b, n + 40) < 0)
        return -1;
    if (enc_line_ll(b, '=', (long long)n + 4) < 0 ||
        resp_buf_append(b, fmt3, 3) < 0 || resp_buf_append(b, ":", 1) < 0 ||
        resp_buf_append(b, p, n) < 0 || resp_buf_append(b, "\r\n", 2) < 0) {
        b->len = mark;
        return -1;
    }
    return 0;
}
