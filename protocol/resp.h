/*
 * protocol/resp.h — streaming RESP2/RESP3 framers and encoders.
 *
 * Pure code: no I/O, no clocks, no globals. The proxy owns the bytes; the
 * framers only find where one frame ends and where its parts are.
 *
 * Data model
 * ----------
 * A framer is fed the bytes that start at the first unconsumed byte of the
 * stream: (buf, len). It answers:
 *   RESP_OK    one whole frame of frame_len bytes starts at buf[0];
 *   RESP_AGAIN the frame is not complete yet; `need` says how many bytes in
 *              total (from buf[0]) must be present before a new call can make
 *              progress (0 when unknown, e.g. inside a header line). When
 *              need > 0, a call with len < need is harmless but useless: it
 *              returns RESP_AGAIN again at O(1) cost. need never exceeds
 *              the end of the current frame, so reading exactly up to it
 *              never splits the next frame;
 *   RESP_ERR   the bytes are not valid RESP; `err` holds a message in Redis's
 *              words ("Protocol error: invalid bulk length"). Errors are
 *              sticky: every later call returns RESP_ERR until reset. `err`
 *              is static, or (for "expected '$', got 'X'") points into the
 *              parser; either way it lives until the next reset/deinit and
 *              holds no CR or LF, so it can be written after "-ERR " as is.
 *              Out of memory is reported as RESP_ERR with err "out of
 *              memory" (the only message without the "Protocol error: "
 *              prefix).
 *
 * Invariants
 * ----------
 * - Resumable: after RESP_AGAIN the caller calls again with the same stream
 *   start and more bytes (buf may have moved: the framer keeps offsets, never
 *   pointers into buf, across calls). Bytes already scanned are not scanned
 *   again, so a large bulk arriving in many reads costs O(total).
 * - Zero-copy: results are offsets/pointers into the caller's buffer, valid
 *   until the caller modifies or drains it. The only exception is inline
 *   requests, whose unquoted arguments live in the framer's own scratch.
 * - Bounded: nothing is allocated from a declared length or count; memory
 *   grows only with bytes actually received, and every length, count and
 *   line is checked against resp_limits before it is trusted. Reply nesting
 *   has no limit (see resp_reply_parse).
 * - After RESP_OK the next call starts a new frame at the buf the caller
 *   passes (normally advanced by frame_len).
 */
#ifndef SIDECACHE_PROTOCOL_RESP_H
#define SIDECACHE_PROTOCOL_RESP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum { RESP_OK = 0, RESP_AGAIN = 1, RESP_ERR = -1 };

/* Redis's own defaults (7.0: a request may have up to INT_MAX arguments;
 * 6.2 and older allowed 1024 * 1024); the proxy overrides them from its
 * config. */
#define RESP_DEFAULT_MAX_BULK_LEN (512LL * 1024 * 1024)
#define RESP_DEFAULT_MAX_MULTIBULK_LEN 2147483647LL
#define RESP_DEFAULT_MAX_INLINE_LEN (64 * 1024)
/* Redis's limits for a client that has not authenticated yet. */
#define RESP_UNAUTH_MAX_MULTIBULK_LEN 10
#define RESP_UNAUTH_MAX_BULK_LEN 16384

typedef struct resp_limits {
    long long max_bulk_len;      /* largest bulk/verbatim/blob payload */
    long long max_multibulk_len; /* most elements in one request or aggregate */
    size_t max_inline_len;       /* longest inline request or header line */
} resp_limits;

/*
 * Parses a decimal integer exactly as Redis's string2ll() does (optional
 * '-', no '+', no spaces, no leading zeros, at most 20 characters, no
 * overflow): the framers, the command table and the router all read numbers
 * as the server behind them does. Returns 1 and sets *out, or 0.
 */
int resp_string2ll(const char *s, size_t n, long long *out);

/*
 * Small readers for one reply that is already whole in memory (the framers
 * below are for streams): for picking apart replies the proxy itself looks
 * into (EXEC arrays, MGET, lookup scripts, Sentinel).
 *
 * resp_read_int_line: "<type><integer>\r\n" at buf[at] (type '*', ':', '$',
 * ...). Returns the offset just past the CRLF with the integer in *v, or 0.
 *
 * resp_read_bulk: a bulk string ("$n\r\n<n bytes>\r\n": returns 1 with *val,
 * *vlen) or a null ("$-1\r\n" or "_\r\n": returns 2) at buf[at], with *next
 * just past it; 0 for anything else or a value cut short.
 */
size_t resp_read_int_line(const char *buf, size_t len, size_t at, char type, long long *v);
int resp_read_bulk(const char *buf, size_t len, size_t at, const char **val, size_t *vlen, size_t *next);

/* Fills *lim with the defaults above. */
void resp_limits_default(resp_limits *lim);

/* ------------------------------------------------------------------------ */
/* Growable byte buffer used by the encoders.                               */

typedef struct resp_buf {
    char *data;
    size_t len;
    size_t cap;
    /* An append found no memory since the last reset: what the buffer holds
     * is not what was encoded (an encoder is several appends), and must not
     * be sent. The encoders return nothing; whoever sends checks this. */
    int failed;
} resp_buf;

void resp_buf_init(resp_buf *b);
/* Frees an empty buffer's memory when it holds more than keep bytes (a
 * large reply made once must not stay with an idle client). */
void resp_buf_trim(resp_buf *b, size_t keep);
void resp_buf_deinit(resp_buf *b);
void resp_buf_reset(resp_buf *b); /* len = 0 and failed = 0, keeps the allocation */
/* Each returns 0, or -1 when memory could not be had (b is left unchanged). */
int resp_buf_append(resp_buf *b, const void *p, size_t n);
int resp_buf_printf(resp_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------------ */
/* Requests: multibulk (*N $len arg ...) and inline ("PING\r\n").          */

typedef struct resp_arg {
    const char *ptr; /* into the caller's buf, or the framer's inline scratch */
    size_t len;
} resp_arg;

typedef struct resp_req_parser {
    resp_limits lim;
    /* result of the last RESP_OK */
    size_t frame_len;  /* bytes to consume */
    int argc;          /* 0 for an empty frame ("*0", "*-1", blank line) */
    resp_arg *argv;    /* argc entries */
    int is_inline;     /* 1 if the frame was an inline command */
    int unauthenticated; /* set by the caller: Redis's tighter limits before
                            AUTH (10 arguments, 16 KiB bulks) apply */
    size_t need;       /* with RESP_AGAIN: bytes needed in total, or 0 */
    const char *err;   /* with RESP_ERR: static message, no "-ERR " prefix */
    /* private: resumable state */
    int state;
    size_t pos;              /* scan position, relative to frame start */
    size_t scan;             /* header/inline line: first byte not yet searched */
    long long expect_args;   /* declared multibulk count */
    long long bulk_len;      /* declared length of the current bulk */
    size_t *arg_offs;        /* offsets of args seen so far (grown on demand) */
    size_t *arg_lens;
    resp_arg *arg_vec;       /* storage behind argv (same capacity) */
    int args_cap;
    int args_seen;
    char *scratch;           /* inline argument storage */
    size_t scratch_cap;
    char err_buf[48];        /* "expected '$', got 'X'" */
} resp_req_parser;

void resp_req_init(resp_req_parser *p, const resp_limits *lim);
void resp_req_deinit(resp_req_parser *p);
/* Forgets a partial frame and a sticky error. */
void resp_req_reset(resp_req_parser *p);
/* Of the len bytes of a frame that is not whole yet (RESP_AGAIN), those
 * that are not a complete argument: what Redis's query buffer holds of it
 * (each argument leaves it once read), which client-query-buffer-limit
 * bounds. */
size_t resp_req_unparsed(const resp_req_parser *p, size_t len);
/*
 * Frames one request from buf[0..len). See the header comment for the return
 * values. With RESP_OK, argc/argv/frame_len/is_inline describe the request;
 * argv is valid until the next call or until buf changes (inline arguments
 * live in the parser's scratch: until the next call, reset or deinit).
 * An empty frame (argc == 0) must still be consumed; Redis ignores it.
 * With RESP_AGAIN or RESP_ERR, argc is 0 and argv NULL.
 *
 * Redis 7's processMultibulkBuffer/processInlineBuffer are followed (error
 * texts included). A '*'/'$' header line longer than max_inline_len is
 * refused as Redis refuses it: "too big mbulk/bulk count string" when more
 * than max_inline_len bytes of it are in buf and none is its '\r' (the line
 * has not ended), and otherwise for what it holds, like any other line
 * ("invalid multibulk length", "invalid bulk length", "expected '$', got
 * 'x'"). So that text, and only it, depends on how much of the line one
 * call sees, as Redis's depends on its reads. The byte after a '*' line's
 * '\r' is skipped unread, as Redis does. Deliberate differences, all
 * stricter:
 * - A header line past the limit whose '\r' is here is refused at once;
 *   Redis waits for the byte after the '\r' first, then refuses it with the
 *   same text.
 * - An inline line that holds more than max_inline_len bytes before its
 *   "\r\n" (or '\n') is refused ("too big inline request") whether or not
 *   its end arrived. (Redis refuses a line only while more bytes than that
 *   are here and its end has not arrived, so it takes any line of
 *   max_inline_len bytes, and runs a longer one that arrived whole.)
 * - A NUL byte in a header or inline line: Redis's strchr() stops there, so
 *   the line never ends and Redis refuses it once the limit is reached. We
 *   refuse it at once with the same "too big ..." message.
 * - Redis skips the byte after a '$' line's '\r' and the two bytes after a
 *   bulk payload without looking at them. We require "\n" and "\r\n":
 *   "invalid bulk length" otherwise.
 */
int resp_req_parse(resp_req_parser *p, const char *buf, size_t len);

/* ------------------------------------------------------------------------ */
/* Replies: every RESP2 and RESP3 type, attributes and pushes included.    */

typedef struct resp_reply_parser {
    resp_limits lim;
    /* result of the last RESP_OK */
    size_t frame_len; /* bytes of the whole frame, leading attributes included */
    char type;        /* first byte of the top-level value after attributes:
                         '+','-',':','$','*','%','~','>','_',',','#','(','=','!' */
    int is_null;      /* "$-1", "*-1" or "_" at top level */
    long long count;  /* top-level aggregate element count (map: pairs), or
                         bulk length, or integer value for ':'; -1 for null;
                         1/0 for '#' t/f; 0 for + - , ( */
    size_t payload_off;  /* top-level scalar payload: offset into buf ... */
    size_t payload_len;  /* ... and length (simple string/error/bulk text).
                            + - : , # ( _ : the line after the type byte;
                            $ ! = : the payload ('=' keeps its "txt:");
                            aggregates: the bytes of all the elements;
                            nulls: length 0 */
    size_t need;      /* with RESP_AGAIN, as for requests */
    const char *err;  /* with RESP_ERR: static message */
    /* private: resumable state */
    int state;
    size_t pos;
    size_t scan;           /* current line: first byte not yet searched */
    int depth;
    int top_seen;          /* top-level value (non-attribute) started */
    long long *remaining;  /* per nesting level: elements still expected */
    unsigned char *uncounted; /* per level: 1 if no element of its parent
                                 (an attribute map) */
    int stack_cap;
    long long bulk_len;
    char cur_type;
} resp_reply_parser;

void resp_reply_init(resp_reply_parser *p, const resp_limits *lim);
void resp_reply_deinit(resp_reply_parser *p);
void resp_reply_reset(resp_reply_parser *p);
/* Frames one whole reply (one top-level value, with any attributes before
 * it) from buf[0..len). Return values as for requests.
 * Limits: a count above max_multibulk_len ("invalid multibulk length"), a
 * length above max_bulk_len ("invalid bulk length"), and a line (type byte
 * to CR) longer than max_inline_len, e.g. a huge "-ERR ..." from a script,
 * are RESP_ERR. Nesting is not limited: Redis nests a script's table as deep
 * as Lua lets it (about 8000 levels, then "-ERR reached lua stack limit"),
 * a module deeper; the stack grows with the levels received (9 bytes for
 * each 4-byte "*1\r\n") and one grown past 256 levels is freed after its
 * frame.
 * A push ('>') inside an aggregate is one of its elements (SUBSCRIBE
 * queued in MULTI, in RESP3); an attribute is none.
 * A big number ('(') may hold any text: Redis passes a script's string.
 * Null is "$-1", "*-1" or "_" only; streamed "$?"/"*?" types are refused. */
int resp_reply_parse(resp_reply_parser *p, const char *buf, size_t len);

/* A whole reply frame (data, len) at a glance: begins with prefix (an
 * error's code and text, say); exactly +OK; an error (simple, or a RESP3
 * blob error); Redis's EXECABORT (it ran nothing of the transaction and
 * left MULTI); Redis's NOPERM (the user's ACL refused). */
static inline int resp_frame_starts_with(const char *data, size_t len, const char *prefix) {
    size_t n = strlen(prefix);
    return len >= n && memcmp(data, prefix, n) == 0;
}
static inline int resp_frame_is_ok(const char *data, size_t len) {
    return len == 5 && memcmp(data, "+OK\r\n", 5) == 0;
}
static inline int resp_frame_is_error(const char *data, size_t len) {
    return len > 0 && (data[0] == '-' || data[0] == '!');
}
static inline int resp_frame_is_execabort(const char *data, size_t len) {
    return resp_frame_starts_with(data, len, "-EXECABORT");
}
static inline int resp_frame_is_noperm(const char *data, size_t len) {
    return resp_frame_starts_with(data, len, "-NOPERM ");
}
/* Redis Cluster's refusal of a command for where its keys are: CROSSSLOT,
 * MOVED, ASK, TRYAGAIN, CLUSTERDOWN. To an EXEC it says that Redis
 * discarded the transaction and ran nothing of it (processCommand checks
 * the keys of all the queued commands together before EXEC runs, and
 * discards the transaction when it refuses them), as EXECABORT does. */
static inline int resp_frame_is_cluster_refusal(const char *data, size_t len) {
    return resp_frame_starts_with(data, len, "-CROSSSLOT ") || resp_frame_starts_with(data, len, "-MOVED ") ||
           resp_frame_starts_with(data, len, "-ASK ") || resp_frame_starts_with(data, len, "-TRYAGAIN ") ||
           resp_frame_starts_with(data, len, "-CLUSTERDOWN ");
}

/* An error a try moments later may not meet: Redis busy with a script,
 * loading its data set, at its client limit, a cluster or a replica not
 * ready. (BUSYKEY and BUSYGROUP are other errors: hence the spaces.) */
static inline int resp_frame_is_transient_error(const char *data, size_t len) {
    static const char *const transient[] = {"-BUSY ",       "-LOADING ",     "-TRYAGAIN ",
                                            "-MASTERDOWN ", "-CLUSTERDOWN ", "-ERR max number of clients reached"};
    for (size_t i = 0; i < sizeof transient / sizeof *transient; i++)
        if (resp_frame_starts_with(data, len, transient[i])) return 1;
    return 0;
}
/* A refusal only an operator can change: the user's ACL or password, or a
 * command this Redis does not have (too old, or renamed away). */
static inline int resp_frame_is_refusal(const char *data, size_t len) {
    static const char *const refusal[] = {"-NOPERM ", "-NOAUTH ", "-WRONGPASS ", "-ERR unknown command",
                                          "-ERR unknown subcommand"};
    for (size_t i = 0; i < sizeof refusal / sizeof *refusal; i++)
        if (resp_frame_starts_with(data, len, refusal[i])) return 1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Encoders. proto is 2 or 3; where RESP2 has no such type, the RESP2 form
 * Redis itself uses is written. Each returns 0 or -1 on out-of-memory.     */

int resp_enc_command(resp_buf *b, int argc, const resp_arg *argv);
/* Like resp_enc_command for C strings, terminated by NULL. */
int resp_enc_commandv(resp_buf *b, const char *arg0, ...);

int resp_enc_simple(resp_buf *b, const char *s);            /* +s */
int resp_enc_error(resp_buf *b, const char *s);             /* -s (s has its code: "ERR ...") */
int resp_enc_int(resp_buf *b, long long v);                 /* :v */
int resp_enc_bulk(resp_buf *b, const char *p, size_t n);    /* $n p */
int resp_enc_bulk_str(resp_buf *b, const char *s);
int resp_enc_null(resp_buf *b, int proto);                  /* $-1 | _ */
int resp_enc_null_array(resp_buf *b, int proto);            /* *-1 | _ */
int resp_enc_array(resp_buf *b, long long n);               /* *n */
int resp_enc_map(resp_buf *b, long long pairs, int proto);  /* %n | *2n */
int resp_enc_set(resp_buf *b, long long n, int proto);      /* ~n | *n */
int resp_enc_push(resp_buf *b, long long n, int proto);     /* >n | *n */
int resp_enc_double(resp_buf *b, double d, int proto);      /* ,d | $ bulk */
int resp_enc_bool(resp_buf *b, int v, int proto);           /* #t/#f | :1/:0 */
/* fmt3 is the 3-byte format ("txt", "mkd"); NULL means "txt". */
int resp_enc_verbatim(resp_buf *b, const char *fmt3, const char *p, size_t n,
                      int proto);                           /* =n+4 fmt:p | $ bulk */
/* Encoders write nothing when they fail. The RESP3 double is ",%.17g"
 * (",inf", ",-inf", ",nan"); RESP2 sends the same text as a bulk string.
 * resp_enc_simple/resp_enc_error do not check s for CR/LF: the caller must. */

#endif
