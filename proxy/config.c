/*
 * proxy/config.c — the directive table, its setters, the redis.conf reader,
 * the command line, and the upstream URL parser.
 *
 * Data model
 * ----------
 * px_directives[] is the only list of directives. Each row names the
 * px_config field it writes (offset and size), its type, bounds, default,
 * argument name and one line of help. Everything else is driven by the
 * table: px_config_init applies each default through the same setter a file
 * line goes through, px_config_dump prints each row back in file syntax,
 * px_config_help lists them, and conf/sidecache.conf documents them (the unit
 * test loads that file, and checks the defaults).
 *
 * Types: int and long long numbers with bounds (byte sizes take redis.conf's
 * suffixes: 1k = 1000, 1kb = 1024, and m/mb, g/gb likewise), yes/no, enum,
 * string (bounded by its buffer), octal (a file mode), list (bind: every
 * address on one line, replacing earlier ones) and upstream (a URL parsed by
 * px_upstream_parse into px_config.up).
 *
 * Invariants
 * ----------
 * - A setter changes its field only when the whole directive is valid: a
 *   failed px_config_set leaves the config as it was.
 * - The bind strings are owned by the config; the default one is a static
 *   string (so that px_config_init cannot fail) and is never freed.
 * - Error reasons name the directive; file errors add "<path>:<line>: ",
 *   command-line errors "argument '--name': ". Nothing is printed here.
 */
#include "proxy/config.h"

#include <arpa/inet.h>
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* The table.                                                               */

enum px_ctype {
    PX_CT_INT,      /* int field */
    PX_CT_LL,       /* long long field */
    PX_CT_BOOL,     /* int field, yes|no */
    PX_CT_ENUM,     /* int field, index into names */
    PX_CT_STRING,   /* char[size] field */
    PX_CT_OCTAL,    /* int field, octal digits */
    PX_CT_LIST,     /* char *[max] field, count at off2 */
    PX_CT_UPSTREAM, /* char[size] URL, parsed px_upstream_addr at off2 */
    PX_CT_APPEND,   /* char[max][size] entries, count at off2: each line adds one;
                       min = number of arguments, joined by one space */
};

#define PX_CF_MEMORY 0x1 /* a byte size: accepts k/kb/m/mb/g/gb */

typedef struct px_directive {
    const char *name;
    enum px_ctype type;
    int flags;
    size_t off;  /* the field */
    size_t size; /* its size */
    size_t off2; /* list: the count; upstream: the parsed address */
    long long min, max; /* numbers: bounds; list: max entries */
    const char *const *names; /* enum: value names, NULL-terminated */
    const char *def;  /* default, as written in a file */
    const char *arg;  /* argument, for --help */
    const char *help; /* one line, for --help */
} px_directive;

#define PX_FIELD(f) .off = offsetof(px_config, f), .size = sizeof(((px_config *)0)->f)

#define PX_KB 1024LL
#define PX_MB (1024LL * 1024)
#define PX_GB (1024LL * 1024 * 1024)

static const char *const px_loglevel_names[] = {"debug", "verbose", "notice", "warning", NULL};
static const char *const px_profile_names[] = {"none", "juicefs", NULL};
static const char *const px_tls_auth_names[] = {"no", "yes", "optional", NULL};
static const char *const px_tracking_names[] = {"bcast", "default", "optin", NULL};

/* The default bind address; a static string, so init cannot run out of
 * memory. Never written to; never freed (see bind_free). */
static char px_default_bind[] = "127.0.0.1";

static const px_directive px_directives[] = {
    {.name = "upstream", .type = PX_CT_UPSTREAM, PX_FIELD(upstream),
     .off2 = offsetof(px_config, up), .def = "redis://127.0.0.1:6379", .arg = "<url>",
     .help = "Redis to proxy: redis://[user:pass@]host[:port][/db], rediss://... (TLS) or unix:///path[?db=N]"},
    {.name = "upstream-sentinel", .type = PX_CT_APPEND, PX_FIELD(sentinel), .off2 = offsetof(px_config, nsentinel),
     .min = 2, .max = 1, .def = "", .arg = "<master-name> <host:port>[,<host:port>...]",
     .help = "Take the upstream's address from Redis Sentinel and follow its failovers"},
    {.name = "sentinel-check-ms", .type = PX_CT_INT, PX_FIELD(sentinel_check_ms), .min = 10, .max = 3600000,
     .def = "1000", .arg = "<ms>", .help = "How often the sentinels are asked where the master is"},
    {.name = "acl-check-ms", .type = PX_CT_INT, PX_FIELD(acl_check_ms), .min = 0, .max = 3600000,
     .def = "1000", .arg = "<ms>",
     .help = "How often ACL LIST is asked, to empty the cache when ACLs change on Redis directly; 0 = never"},
    {.name = "tracking-upstream", .type = PX_CT_UPSTREAM, PX_FIELD(tracking_upstream),
     .off2 = offsetof(px_config, tracking_up), .def = "", .arg = "<url>",
     .help = "Where the invalidation connection goes, if not to the upstream (same Redis, another path); \"\" = the upstream"},
    {.name = "bind", .type = PX_CT_LIST, PX_FIELD(bind), .off2 = offsetof(px_config, nbind),
     .min = 1, .max = PX_MAX_BIND, .def = "127.0.0.1", .arg = "<addr> ...",
     .help = "IPv4/IPv6 addresses (or * for any) the TCP listener binds, at most 16"},
    {.name = "port", .type = PX_CT_INT, PX_FIELD(port), .min = 0, .max = 65535,
     .def = "6380", .arg = "<port>", .help = "TCP port to listen on; 0 = no TCP listener"},
    {.name = "unixsocket", .type = PX_CT_STRING, PX_FIELD(unixsocket), .def = "",
     .arg = "<path>", .help = "Unix socket to listen on; \"\" = none"},
    {.name = "unixsocketperm", .type = PX_CT_OCTAL, PX_FIELD(unixsocketperm), .min = 0,
     .max = 0777, .def = "0", .arg = "<mode>",
     .help = "Octal permissions of the unix socket; 0 = leave as created"},
    {.name = "maxclients", .type = PX_CT_INT, PX_FIELD(maxclients), .min = 1, .max = 1000000,
     .def = "10000", .arg = "<n>", .help = "Most clients connected at once"},
    {.name = "timeout", .type = PX_CT_INT, PX_FIELD(timeout), .min = 0, .max = INT_MAX,
     .def = "0", .arg = "<seconds>", .help = "Close a client idle this long; 0 = never"},
    /* (at most what Linux takes for TCP_KEEPIDLE) */
    {.name = "tcp-keepalive", .type = PX_CT_INT, PX_FIELD(tcp_keepalive), .min = 0,
     .max = 32767, .def = "300", .arg = "<seconds>",
     .help = "TCP keepalive period of client and upstream sockets; 0 = off"},
    {.name = "tcp-nodelay", .type = PX_CT_BOOL, PX_FIELD(tcp_nodelay), .def = "yes",
     .arg = "<yes|no>", .help = "Set TCP_NODELAY on client and upstream sockets"},
    {.name = "tls-port", .type = PX_CT_INT, PX_FIELD(tls_port), .min = 0, .max = 65535, .def = "0",
     .arg = "<port>", .help = "TCP port for TLS clients (on the bind addresses); 0 = none"},
    {.name = "tls-cert-file", .type = PX_CT_STRING, PX_FIELD(tls_cert_file), .def = "", .arg = "<path>",
     .help = "Certificate (chain, PEM) shown to TLS clients"},
    {.name = "tls-key-file", .type = PX_CT_STRING, PX_FIELD(tls_key_file), .def = "", .arg = "<path>",
     .help = "Its private key (PEM)"},
    {.name = "tls-ca-cert-file", .type = PX_CT_STRING, PX_FIELD(tls_ca_cert_file), .def = "", .arg = "<path>",
     .help = "CA certificates that client certificates must be signed by"},
    {.name = "tls-auth-clients", .type = PX_CT_ENUM, PX_FIELD(tls_auth_clients), .names = px_tls_auth_names,
     .def = "yes", .arg = "<yes|no|optional>", .help = "Require a client certificate from TLS clients, as Redis"},
    {.name = "tls-upstream-ca-cert-file", .type = PX_CT_STRING, PX_FIELD(tls_upstream_ca_cert_file), .def = "",
     .arg = "<path>", .help = "rediss://: CA certificates to verify Redis with; \"\" = the system's"},
    {.name = "tls-upstream-cert-file", .type = PX_CT_STRING, PX_FIELD(tls_upstream_cert_file), .def = "",
     .arg = "<path>", .help = "rediss://: client certificate shown to Redis, if it asks"},
    {.name = "tls-upstream-key-file", .type = PX_CT_STRING, PX_FIELD(tls_upstream_key_file), .def = "",
     .arg = "<path>", .help = "rediss://: its private key"},
    {.name = "metrics-port", .type = PX_CT_INT, PX_FIELD(metrics_port), .min = 0, .max = 65535, .def = "0",
     .arg = "<port>", .help = "Serve Prometheus metrics on http://metrics-bind:port/metrics; 0 = off"},
    {.name = "metrics-bind", .type = PX_CT_STRING, PX_FIELD(metrics_bind), .def = "127.0.0.1", .arg = "<addr>",
     .help = "Address of the metrics endpoint"},
    {.name = "upstream-timeout", .type = PX_CT_INT, PX_FIELD(upstream_timeout), .min = 0, .max = INT_MAX,
     .def = "30", .arg = "<seconds>",
     .help = "Drop an upstream connection whose requests get no reply byte for this long (half-open, hung); 0 = never"},
    /* Default 2 s. A Redis beside its clients (the same zone) connects in
     * about a millisecond, TLS included in a few; 2 s still lets a lost SYN
     * or SYN-ACK be sent again (Linux does after 1 s). Clients' dial
     * timeouts (go-redis's 5 s, which JuiceFS keeps) bound their connect to
     * sidecache, which is local: what they wait for here is a reply, under
     * their read timeout (go-redis: 3 s by default, JuiceFS: 30 s), and 2 s
     * gives them sidecache's error, which says why, before their own
     * timeout. A deadline too short for a slow link costs little: a failed
     * connect is tried again after the pool's back-off (2 s at most). */
    {.name = "upstream-connect-timeout", .type = PX_CT_INT, PX_FIELD(upstream_connect_timeout), .min = 0,
     .max = 3600000, .def = "2000", .arg = "<ms>",
     .help = "Fail a connect to Redis (TCP, and TLS for rediss://) not done in this time, as a refused one; "
             "0 = no deadline"},
    {.name = "upstream-connections", .type = PX_CT_INT, PX_FIELD(upstream_connections),
     .min = 1, .max = 256, .def = "2", .arg = "<n>",
     .help = "Shared connections to Redis per pool (user, db, protocol)"},
    {.name = "loglevel", .type = PX_CT_ENUM, PX_FIELD(loglevel), .names = px_loglevel_names,
     .def = "notice", .arg = "<debug|verbose|notice|warning>", .help = "Least severe level logged"},
    {.name = "logfile", .type = PX_CT_STRING, PX_FIELD(logfile), .def = "", .arg = "<path>",
     .help = "Log file; \"\" = standard error"},
    {.name = "proto-max-bulk-len", .type = PX_CT_LL, .flags = PX_CF_MEMORY,
     PX_FIELD(proto_max_bulk_len), .min = PX_MB, .max = LLONG_MAX, .def = "512mb",
     .arg = "<bytes>", .help = "Longest bulk string accepted in a request"},
    {.name = "max-multibulk-len", .type = PX_CT_LL, PX_FIELD(max_multibulk_len), .min = 1,
     .max = INT_MAX, .def = "2147483647", .arg = "<n>",
     .help = "Most arguments accepted in one request"},
    {.name = "proto-max-inline-len", .type = PX_CT_LL, .flags = PX_CF_MEMORY, PX_FIELD(proto_max_inline_len),
     .min = 64, .max = 1024 * 1024 * 1024LL, .def = "64kb", .arg = "<bytes>",
     .help = "Longest inline command or header line (*N, $N) a client may send"},
    {.name = "proto-max-nesting", .type = PX_CT_INT, PX_FIELD(proto_max_nesting), .min = 1, .max = 1024,
     .def = "128", .arg = "<n>",
     .help = "Obsolete, ignored (replies from Redis are framed at any depth); accepted for old configs"},
    {.name = "partial-command-timeout", .type = PX_CT_INT, PX_FIELD(partial_command_timeout), .min = 0,
     .max = INT_MAX, .def = "60", .arg = "<seconds>",
     .help = "Close a client whose started command is not complete after this long; 0 = never"},
    {.name = "client-query-buffer-limit", .type = PX_CT_LL, .flags = PX_CF_MEMORY,
     PX_FIELD(client_query_buffer_limit), .min = PX_MB, .max = LLONG_MAX, .def = "1gb",
     .arg = "<bytes>", .help = "Largest argument (or inline line) of a request, as Redis's query buffer counts it"},
    {.name = "client-output-buffer-limit", .type = PX_CT_LL, .flags = PX_CF_MEMORY,
     PX_FIELD(client_output_buffer_limit), .min = 0, .max = LLONG_MAX, .def = "256mb",
     .arg = "<bytes>",
     .help = "Most reply bytes pending for one client before it is closed; 0 = no limit"},
    {.name = "upstream-output-limit", .type = PX_CT_LL, .flags = PX_CF_MEMORY,
     PX_FIELD(upstream_output_limit), .min = 0, .max = LLONG_MAX, .def = "256mb", .arg = "<bytes>",
     .help = "Most bytes waiting to be written to Redis, all connections together, before clients whose next "
             "command needs Redis stop being read; 0 = no limit"},
    {.name = "profile", .type = PX_CT_ENUM, PX_FIELD(profile), .names = px_profile_names,
     .def = "juicefs", .arg = "<none|juicefs>",
     .help = "Built-in cache rules: juicefs caches GET i<ino> and HGET d<ino> (see conf/juicefs.conf)"},
    {.name = "key-prefix", .type = PX_CT_STRING, PX_FIELD(key_prefix), .def = "", .arg = "<prefix>",
     .help = "Put before every rule pattern, e.g. {1} for JuiceFS on Redis Cluster"},
    {.name = "cache-rule", .type = PX_CT_APPEND, PX_FIELD(cache_rules),
     .off2 = offsetof(px_config, ncache_rules), .min = 2, .max = PX_MAX_RULES, .def = "",
     .arg = "<GET|HGET> <pattern>", .help = "Cache this read of keys matching the glob pattern (repeatable)"},
    {.name = "cache-ask-ttl", .type = PX_CT_BOOL, PX_FIELD(cache_ask_ttl), .def = "yes", .arg = "<yes|no>",
     .help = "cache-rule keys may have a TTL: each fill asks Redis for it (PTTL), the entry ends when the key "
             "expires; no: they never have one"},
    {.name = "cache-track-prefix", .type = PX_CT_APPEND, PX_FIELD(track_prefixes),
     .off2 = offsetof(px_config, ntrack_prefixes), .min = 1, .max = PX_MAX_RULES, .def = "",
     .arg = "<prefix>",
     .help = "Have Redis track by this prefix instead of the narrower ones the rules imply (repeatable)"},
    {.name = "cache-readonly-script", .type = PX_CT_APPEND, PX_FIELD(readonly_scripts),
     .off2 = offsetof(px_config, nreadonly_scripts), .min = 1, .max = PX_MAX_SCRIPTS, .def = "",
     .arg = "<sha1>", .help = "EVALSHA of this script writes nothing: no cache flush (repeatable)"},
    {.name = "cache-lookup-script", .type = PX_CT_APPEND, PX_FIELD(lookup_scripts),
     .off2 = offsetof(px_config, nlookup_scripts), .min = 1, .max = PX_MAX_LOOKUP_SCRIPTS, .def = "",
     .arg = "<sha1>",
     .help = "EVALSHA sha 2 d<parent> name of this JuiceFS-style lookup script is answered from the cache (repeatable)"},
    {.name = "cache-max-memory", .type = PX_CT_LL, .flags = PX_CF_MEMORY, PX_FIELD(cache_max_memory),
     .min = 0, .max = LLONG_MAX, .def = "256mb", .arg = "<bytes>",
     .help = "Most bytes the cache holds, all overhead counted; 0 = no caching"},
    {.name = "cache-max-value", .type = PX_CT_LL, .flags = PX_CF_MEMORY, PX_FIELD(cache_max_value),
     .min = 0, .max = LLONG_MAX, .def = "64kb", .arg = "<bytes>",
     .help = "Values larger than this pass through uncached"},
    {.name = "cache-ttl", .type = PX_CT_INT, PX_FIELD(cache_ttl), .min = 0, .max = INT_MAX, .def = "0",
     .arg = "<seconds>", .help = "Entries older than this are read again; 0 = no expiry"},
    {.name = "batch-max-commands", .type = PX_CT_INT, PX_FIELD(batch_max_commands), .min = 0,
     .max = 100000, .def = "250", .arg = "<n>",
     .help = "Pipelined writes of one client go to Redis as MULTI/EXEC blocks of at most n; 0 = off"},
    {.name = "watch-ahead", .type = PX_CT_BOOL, PX_FIELD(watch_ahead), .def = "yes", .arg = "<yes|no>",
     .help = "Answer a WATCH once it is written to Redis; EXEC waits for Redis's own +OK"},
    {.name = "tracking-mode", .type = PX_CT_ENUM, PX_FIELD(tracking_mode), .names = px_tracking_names,
     .def = "bcast", .arg = "<bcast|default|optin>", .help = "How Redis tracks what the cache holds"},
    {.name = "tracking-keepalive-ms", .type = PX_CT_INT, PX_FIELD(tracking_keepalive_ms), .min = 10,
     .max = 600000, .def = "1000", .arg = "<ms>", .help = "PING period on the invalidation connection"},
    {.name = "tracking-timeout-ms", .type = PX_CT_INT, PX_FIELD(tracking_timeout_ms), .min = 10,
     .max = 600000, .def = "3000", .arg = "<ms>",
     .help = "A PING not answered in this time empties the cache and reconnects"},
    {.name = "tracking-ping-hold-ms", .type = PX_CT_INT, PX_FIELD(tracking_ping_hold_ms), .min = 0,
     .max = 600000, .def = "100", .arg = "<ms>",
     .help = "A cache hit waits at most this long for a PING's answer, then Redis answers (docs/CONSISTENCY.md, C10); "
             "0 = Redis at once"},
};

#define PX_NDIRECTIVES (sizeof(px_directives) / sizeof(px_directives[0]))

/* ------------------------------------------------------------------------ */
/* Helpers.                                                                 */

static void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void seterr(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    if (err == NULL || errlen == 0) return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static void *field(px_config *c, size_t off) { return (char *)c + off; }
static const void *cfield(const px_config *c, size_t off) { return (const char *)c + off; }

static const px_directive *find_directive(const char *name) {
    for (size_t i = 0; i < PX_NDIRECTIVES; i++)
        if (strcasecmp(px_directives[i].name, name) == 0) return &px_directives[i];
    return NULL;
}

/* Parses an optionally negative decimal integer, the whole string. */
static int parse_ll(const char *s, long long *out) {
    int neg = 0;
    unsigned long long v = 0, lim;
    if (*s == '-') { neg = 1; s++; }
    if (!isdigit((unsigned char)*s)) return -1;
    lim = neg ? (unsigned long long)LLONG_MAX + 1 : (unsigned long long)LLONG_MAX;
    for (; *s; s++) {
        if (!isdigit((unsigned char)*s)) return -1;
        unsigned d = (unsigned)(*s - '0');
        if (v > (lim - d) / 10) return -2; /* overflow */
        v = v * 10 + d;
    }
    /* -(LLONG_MAX + 1) without signed overflow */
    *out = neg ? (v == 0 ? 0 : -(long long)(v - 1) - 1) : (long long)v;
    return 0;
}

/* Parses a byte size as redis.conf does: digits and an optional unit, b, k
 * (1000), kb (1024), m, mb, g, gb, in any case. -1 on syntax, -2 on overflow. */
static int parse_memory(const char *s, long long *out) {
    static const struct { const char *unit; long long mul; } units[] = {
        {"", 1}, {"b", 1}, {"k", 1000}, {"kb", PX_KB}, {"m", 1000 * 1000},
        {"mb", PX_MB}, {"g", 1000LL * 1000 * 1000}, {"gb", PX_GB},
    };
    const char *u = s;
    char digits[32];
    long long v;
    int rc;
    while (isdigit((unsigned char)*u)) u++;
    if (u == s || (size_t)(u - s) >= sizeof(digits)) return u == s ? -1 : -2;
    memcpy(digits, s, (size_t)(u - s));
    digits[u - s] = '\0';
    if ((rc = parse_ll(digits, &v)) < 0) return rc;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcasecmp(u, units[i].unit) != 0) continue;
        if (v > LLONG_MAX / units[i].mul) return -2;
        *out = v * units[i].mul;
        return 0;
    }
    return -1;
}

/* Formats a byte size with the largest unit that divides it exactly. */
static void format_memory(long long v, char *buf, size_t len) {
    if (v != 0 && v % PX_GB == 0) snprintf(buf, len, "%lldgb", v / PX_GB);
    else if (v != 0 && v % PX_MB == 0) snprintf(buf, len, "%lldmb", v / PX_MB);
    else if (v != 0 && v % PX_KB == 0) snprintf(buf, len, "%lldkb", v / PX_KB);
    else snprintf(buf, len, "%lld", v);
}

static void format_number(const px_directive *d, long long v, char *buf, size_t len) {
    if (d->flags & PX_CF_MEMORY) format_memory(v, buf, len);
    else snprintf(buf, len, "%lld", v);
}

/* ------------------------------------------------------------------------ */
/* Setters, one per type. argc was checked by px_config_set.                */

static int set_number(const px_directive *d, px_config *c, int argc, char **argv,
                      char *err, size_t errlen) {
    long long v;
    int rc = (d->flags & PX_CF_MEMORY) ? parse_memory(argv[0], &v) : parse_ll(argv[0], &v);
    char lo[32], hi[32];

    format_number(d, d->min, lo, sizeof(lo));
    format_number(d, d->max, hi, sizeof(hi));
    if (rc == -1) {
        if (d->flags & PX_CF_MEMORY)
            seterr(err, errlen, "%s must be a size in bytes between %s and %s, with an "
                   "optional k, kb, m, mb, g or gb suffix (got '%.64s')",
                   d->name, lo, hi, argv[0]);
        else
            seterr(err, errlen, "%s must be an integer between %s and %s (got '%.64s')",
                   d->name, lo, hi, argv[0]);
        return -1;
    }
    if (rc < 0 || v < d->min || v > d->max) {
        seterr(err, errlen, "%s must be between %s and %s (got '%.64s')", d->name, lo, hi,
               argv[0]);
        return -1;
    }
    if (d->type == PX_CT_INT) *(int *)field(c, d->off) = (int)v;
    else *(long long *)field(c, d->off) = v;
    return 0;
}

static int set_bool(const px_directive *d, px_config *c, int argc, char **argv,
                    char *err, size_t errlen) {
    int v;
    if (strcasecmp(argv[0], "yes") == 0) v = 1;
    else if (strcasecmp(argv[0], "no") == 0) v = 0;
    else {
        seterr(err, errlen, "%s must be yes or no (got '%.64s')", d->name, argv[0]);
        return -1;
    }
    *(int *)field(c, d->off) = v;
    return 0;
}

static int set_enum(const px_directive *d, px_config *c, int argc, char **argv,
                    char *err, size_t errlen) {
    char names[256] = "";
    size_t n = 0;
    for (int i = 0; d->names[i] != NULL; i++) {
        if (strcasecmp(argv[0], d->names[i]) == 0) {
            *(int *)field(c, d->off) = i;
            return 0;
        }
        n += (size_t)snprintf(names + n, sizeof(names) - n, "%s%s", i ? ", " : "",
                              d->names[i]);
        if (n >= sizeof(names)) n = sizeof(names) - 1;
    }
    seterr(err, errlen, "%s must be one of %s (got '%.64s')", d->name, names, argv[0]);
    return -1;
}

static int set_string(const px_directive *d, px_config *c, int argc, char **argv,
                      char *err, size_t errlen) {
    size_t n = strlen(argv[0]);
    if (n >= d->size) {
        seterr(err, errlen, "%s is too long (%zu bytes, at most %zu)", d->name, n, d->size - 1);
        return -1;
    }
    memcpy(field(c, d->off), argv[0], n + 1);
    return 0;
}

static int set_octal(const px_directive *d, px_config *c, int argc, char **argv,
                     char *err, size_t errlen) {
    const char *s = argv[0];
    long long v = 0;
    if (*s == '\0') goto bad;
    for (; *s; s++) {
        if (*s < '0' || *s > '7') goto bad;
        v = v * 8 + (*s - '0');
        if (v > d->max) goto bad;
    }
    *(int *)field(c, d->off) = (int)v;
    return 0;
bad:
    seterr(err, errlen, "%s must be an octal mode between 0 and %llo (got '%.64s')", d->name,
           (unsigned long long)d->max, argv[0]);
    return -1;
}

static void bind_free(char *s) {
    if (s != px_default_bind) free(s);
}

static int set_list(const px_directive *d, px_config *c, int argc, char **argv,
                    char *err, size_t errlen) {
    char **list = field(c, d->off);
    int *count = field(c, d->off2);
    char *fresh[PX_MAX_BIND];
    unsigned char addr[sizeof(struct in6_addr)];
    int i;

    assert(argc <= PX_MAX_BIND && d->max <= PX_MAX_BIND);
    for (i = 0; i < argc; i++) {
        if (strcmp(argv[i], "*") != 0 && inet_pton(AF_INET, argv[i], addr) != 1 &&
            inet_pton(AF_INET6, argv[i], addr) != 1) {
            seterr(err, errlen, "%s: '%.64s' is not an IPv4 or IPv6 address (or *)", d->name,
                   argv[i]);
            return -1;
        }
    }
    for (i = 0; i < argc; i++) {
        if ((fresh[i] = strdup(argv[i])) == NULL) {
            while (i-- > 0) free(fresh[i]);
            seterr(err, errlen, "%s: out of memory", d->name);
            return -1;
        }
    }
    for (i = 0; i < *count; i++) bind_free(list[i]);
    for (i = 0; i < argc; i++) list[i] = fresh[i];
    for (; i < PX_MAX_BIND; i++) list[i] = NULL;
    *count = argc;
    return 0;
}

static int set_upstream(const px_directive *d, px_config *c, int argc, char **argv,
                        char *err, size_t errlen) {
    px_upstream_addr a;
    size_t n = strlen(argv[0]);
    if (n == 0 && d->def[0] == '\0') { /* optional: "" = not set */
        *(char *)field(c, d->off) = '\0';
        memset(field(c, d->off2), 0, sizeof a);
        return 0;
    }
    if (n >= d->size) {
        seterr(err, errlen, "%s: URL is too long (%zu bytes, at most %zu)", d->name, n,
               d->size - 1);
        return -1;
    }
    if (px_upstream_parse(argv[0], &a, err, errlen) < 0) return -1;
    memcpy(field(c, d->off), argv[0], n + 1);
    *(px_upstream_addr *)field(c, d->off2) = a;
    return 0;
}

static int is_hex40(const char *s) {
    size_t n = 0;
    for (; s[n]; n++)
        if (!isxdigit((unsigned char)s[n])) return 0;
    return n == 40;
}

/* One more entry: its arguments joined by a space, checked by directive. */
static int set_append(const px_directive *d, px_config *c, int argc, char **argv,
                      char *err, size_t errlen) {
    int *count = field(c, d->off2);
    char *entries = field(c, d->off);
    size_t width = d->size / (size_t)d->max;
    /* A list of one (upstream-sentinel) is a plain directive: the last one
     * wins, so the command line overrides the file as for any other. */
    int at = d->max == 1 ? 0 : *count;
    if (at >= d->max) {
        seterr(err, errlen, "%s: at most %lld lines", d->name, d->max);
        return -1;
    }
    if (strcmp(d->name, "upstream-sentinel") == 0) {
        if (argv[0][0] == '\0' || strchr(argv[0], ' ') != NULL) {
            seterr(err, errlen, "%s: the master name must be one word, not empty", d->name);
            return -1;
        }
        if (strlen(argv[0]) >= PX_SENTINEL_NAME_MAX) {
            seterr(err, errlen, "%s: the master name is longer than %d bytes", d->name, PX_SENTINEL_NAME_MAX - 1);
            return -1;
        }
        /* host:port[,host:port...] */
        int naddr = 0;
        for (const char *p = argv[1];;) {
            if (++naddr > PX_SENTINELS_MAX) {
                seterr(err, errlen, "%s: at most %d sentinels", d->name, PX_SENTINELS_MAX);
                return -1;
            }
            const char *comma = strchr(p, ','), *end = comma ? comma : p + strlen(p);
            const char *colon = NULL;
            for (const char *q = p; q < end; q++)
                if (*q == ':') colon = q;
            long long port = 0;
            int ok = colon != NULL && colon > p && colon + 1 < end && end - colon <= 6;
            for (const char *q = colon ? colon + 1 : end; ok && q < end; q++) ok = isdigit((unsigned char)*q);
            if (ok) port = strtoll(colon + 1, NULL, 10);
            if (!ok || port < 1 || port > 65535) {
                seterr(err, errlen, "%s: '%.*s' is not host:port", d->name, (int)(end - p), p);
                return -1;
            }
            if (colon - p >= PX_SENTINEL_NAME_MAX) {
                seterr(err, errlen, "%s: a host is longer than %d bytes", d->name, PX_SENTINEL_NAME_MAX - 1);
                return -1;
            }
            if (comma == NULL) break;
            p = comma + 1;
        }
    } else if (strcmp(d->name, "cache-rule") == 0) {
        if (strcasecmp(argv[0], "GET") != 0 && strcasecmp(argv[0], "HGET") != 0) {
            seterr(err, errlen, "%s: command '%.32s' cannot be cached (GET or HGET)", d->name, argv[0]);
            return -1;
        }
        if (argv[1][0] == '\0' || strchr(argv[1], ' ') != NULL) {
            seterr(err, errlen, "%s: the pattern must be one word, not empty", d->name);
            return -1;
        }
    } else if (strcmp(d->name, "cache-track-prefix") == 0) {
        if (argv[0][0] == '\0' || strchr(argv[0], ' ') != NULL) {
            seterr(err, errlen, "%s: the prefix must be one word, not empty", d->name);
            return -1;
        }
    } else if (!is_hex40(argv[0])) {
        seterr(err, errlen, "%s: '%.64s' is not a SHA1 (40 hex digits)", d->name, argv[0]);
        return -1;
    }
    size_t n = strlen(argv[0]) + (argc == 2 ? 1 + strlen(argv[1]) : 0);
    if (n >= width) {
        seterr(err, errlen, "%s: too long (at most %zu bytes)", d->name, width - 1);
        return -1;
    }
    char *entry = entries + (size_t)at * width;
    if (argc == 2)
        snprintf(entry, width, "%s %s", argv[0], argv[1]);
    else
        snprintf(entry, width, "%s", argv[0]);
    *count = at + 1;
    return 0;
}

typedef int (*px_setter)(const px_directive *d, px_config *c, int argc, char **argv,
                         char *err, size_t errlen);

static const px_setter px_setters[] = {
    [PX_CT_INT] = set_number,     [PX_CT_LL] = set_number,   [PX_CT_BOOL] = set_bool,
    [PX_CT_ENUM] = set_enum,      [PX_CT_STRING] = set_string, [PX_CT_OCTAL] = set_octal,
    [PX_CT_LIST] = set_list,      [PX_CT_UPSTREAM] = set_upstream, [PX_CT_APPEND] = set_append,
};

/* ------------------------------------------------------------------------ */
/* The config.                                                              */

void px_config_init(px_config *c) {
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < PX_NDIRECTIVES; i++) {
        const px_directive *d = &px_directives[i];
        char err[256];
        char *argv[1] = {(char *)d->def};

        assert((d->type != PX_CT_INT && d->type != PX_CT_BOOL && d->type != PX_CT_ENUM &&
                d->type != PX_CT_OCTAL) || d->size == sizeof(int));
        assert(d->type != PX_CT_LL || d->size == sizeof(long long));
        if (d->type == PX_CT_APPEND) continue; /* starts empty */
        if (d->type == PX_CT_LIST) {
            char **list = field(c, d->off);
            assert(strcmp(d->def, px_default_bind) == 0);
            list[0] = px_default_bind;
            *(int *)field(c, d->off2) = 1;
            continue;
        }
        /* A default that its own setter refuses is a bug in the table. */
        int rc = px_setters[d->type](d, c, 1, argv, err, sizeof(err));
        assert(rc == 0);
        (void)rc;
    }
}

void px_config_deinit(px_config *c) {
    for (int i = 0; i < c->nbind; i++) bind_free(c->bind[i]);
    c->nbind = 0;
    memset(c->bind, 0, sizeof(c->bind));
}

int px_config_set(px_config *c, const char *name, int argc, char **argv,
                  char *err, size_t errlen) {
    const px_directive *d = find_directive(name);
    if (d == NULL) {
        seterr(err, errlen, "unknown directive '%.64s'", name);
        return -1;
    }
    if (d->type == PX_CT_APPEND) {
        if (d->max == 1 && argc == 1 && argv[0][0] == '\0') {
            /* a list of one is a plain directive: "" unsets it, as it does
             * tracking-upstream (the command line over a file's) */
            *(int *)field(c, d->off2) = 0;
            memset(field(c, d->off), 0, d->size);
            return 0;
        }
        if (argc != d->min) {
            seterr(err, errlen, "%s takes %lld argument%s (got %d)", d->name, d->min, d->min == 1 ? "" : "s",
                   argc);
            return -1;
        }
    } else if (d->type == PX_CT_LIST) {
        if (argc < d->min || argc > d->max) {
            seterr(err, errlen, "%s takes %lld to %lld arguments (got %d)", d->name, d->min,
                   d->max, argc);
            return -1;
        }
    } else if (argc != 1) {
        seterr(err, errlen, "%s takes 1 argument (got %d)", d->name, argc);
        return -1;
    }
    return px_setters[d->type](d, c, argc, argv, err, errlen);
}

/* ------------------------------------------------------------------------ */
/* Splitting a line into words, as Redis's sdssplitargs does.               */

typedef struct px_words {
    char **v;
    int n, cap;
} px_words;

static void words_free(px_words *w) {
    for (int i = 0; i < w->n; i++) free(w->v[i]);
    free(w->v);
    w->v = NULL;
    w->n = w->cap = 0;
}

static int words_push(px_words *w, char *s) {
    if (w->n == w->cap) {
        int cap = w->cap ? w->cap * 2 : 8;
        char **v = realloc(w->v, (size_t)cap * sizeof(*v));
        if (v == NULL) return -1;
        w->v = v;
        w->cap = cap;
    }
    w->v[w->n++] = s;
    return 0;
}

static int hexval(int ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/*
 * Splits line into words: blanks separate words; "double quotes" take the
 * escapes \n \r \t \b \a \xHH and \<char>; 'single quotes' take \' only; a
 * closing quote must be followed by a blank or the end. Returns 0 with the
 * words in *w (the caller frees them with words_free), or -1 with a reason.
 */
static int split_line(const char *line, px_words *w, char *err, size_t errlen) {
    const char *p = line;
    char *cur = NULL;
    size_t len = 0, cap = 0;

    memset(w, 0, sizeof(*w));
    for (;;) {
        int inq = 0, insq = 0, done = 0;
        while (*p && isspace((unsigned char)*p)) p++;
        if (*p == '\0') return 0;
        len = 0;
        cap = 16;
        if ((cur = malloc(cap)) == NULL) goto oom;
        while (!done) {
            int ch = -1; /* the byte to append, if any */
            if (inq) {
                if (p[0] == '\\' && p[1] == 'x' && hexval(p[2]) >= 0 && hexval(p[3]) >= 0) {
                    ch = hexval(p[2]) * 16 + hexval(p[3]);
                    p += 3;
                } else if (p[0] == '\\' && p[1]) {
                    p++;
                    switch (*p) {
                    case 'n': ch = '\n'; break;
                    case 'r': ch = '\r'; break;
                    case 't': ch = '\t'; break;
                    case 'b': ch = '\b'; break;
                    case 'a': ch = '\a'; break;
                    default: ch = (unsigned char)*p; break;
                    }
                } else if (*p == '"') {
                    if (p[1] && !isspace((unsigned char)p[1])) {
                        seterr(err, errlen, "closing quote must be followed by a space");
                        goto fail;
                    }
                    done = 1;
                } else if (*p == '\0') {
                    seterr(err, errlen, "unbalanced quotes");
                    goto fail;
                } else {
                    ch = (unsigned char)*p;
                }
            } else if (insq) {
                if (p[0] == '\\' && p[1] == '\'') {
                    p++;
                    ch = '\'';
                } else if (*p == '\'') {
                    if (p[1] && !isspace((unsigned char)p[1])) {
                        seterr(err, errlen, "closing quote must be followed by a space");
                        goto fail;
                    }
                    done = 1;
                } else if (*p == '\0') {
                    seterr(err, errlen, "unbalanced quotes");
                    goto fail;
                } else {
                    ch = (unsigned char)*p;
                }
            } else {
                switch (*p) {
                case ' ': case '\n': case '\r': case '\t': case '\0': done = 1; break;
                case '"': inq = 1; break;
                case '\'': insq = 1; break;
                default: ch = (unsigned char)*p; break;
                }
            }
            if (ch == 0) {
                seterr(err, errlen, "arguments cannot contain NUL bytes");
                goto fail;
            }
            if (ch > 0) {
                if (len + 1 >= cap) {
                    char *n = realloc(cur, cap * 2);
                    if (n == NULL) goto oom;
                    cur = n;
                    cap *= 2;
                }
                cur[len++] = (char)ch;
            }
            if (*p) p++;
        }
        cur[len] = '\0';
        if (words_push(w, cur) < 0) goto oom;
        cur = NULL;
    }
oom:
    seterr(err, errlen, "out of memory");
fail:
    free(cur);
    words_free(w);
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Files and the command line.                                              */

/* One line of f into *line (its '\n' kept, NUL-terminated): its length, 0
 * at the end of the file, -1 on a read error (errno), -2 past max bytes
 * (getline would hold the whole of /dev/zero). */
static ssize_t read_line(FILE *f, char **line, size_t *cap, size_t max) {
    size_t n = 0;
    int ch;
    errno = 0;
    while ((ch = getc(f)) != EOF) {
        if (n == max) return -2;
        if (n + 2 > *cap) {
            size_t want = *cap ? *cap * 2 : 256;
            char *p = realloc(*line, want);
            if (p == NULL) return errno = ENOMEM, -1;
            *line = p;
            *cap = want;
        }
        (*line)[n++] = (char)ch;
        if (ch == '\n') break;
    }
    if (ch == EOF && ferror(f)) return errno ? -1 : (errno = EIO, -1);
    if (n > 0) (*line)[n] = '\0';
    return (ssize_t)n;
}

/* path opened for reading (on a reload, without blocking on a FIFO, which
 * it refuses); NULL with err set. */
static FILE *open_config(const px_config *c, const char *path, char *err, size_t errlen) {
    if (strcmp(path, "-") == 0) {
        if (!c->file_regular_only) return stdin;
        seterr(err, errlen, "the configuration was read from standard input (restart to change it)");
        return NULL;
    }
    /* (at start a FIFO waits for its writer, as fopen would) */
    int fd = open(path, O_RDONLY | O_CLOEXEC | (c->file_regular_only ? O_NONBLOCK : 0));
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        seterr(err, errlen, "%s: %s", path[0] ? path : "(empty path)", strerror(errno));
        if (fd >= 0) close(fd);
        return NULL;
    }
    if (S_ISDIR(st.st_mode)) {
        seterr(err, errlen, "%s: %s", path, strerror(EISDIR));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode) && c->file_regular_only) {
        seterr(err, errlen, "%s is not a regular file (a pipe or FIFO is read once, at start: restart to "
               "change it)", path);
        close(fd);
        return NULL;
    }
    FILE *f = fcntl(fd, F_SETFL, 0) == 0 ? fdopen(fd, "r") : NULL;
    if (f == NULL) {
        seterr(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

int px_config_load_file(px_config *c, const char *path, char *err, size_t errlen) {
    int is_stdin = strcmp(path, "-") == 0;
    FILE *f = open_config(c, path, err, errlen);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int lineno = 0, rc = -1;
    char reason[512];

    if (f == NULL) return -1;
    for (;;) {
        px_words w;
        const char *p;

        if ((n = read_line(f, &line, &cap, PX_CONFIG_MAX_LINE)) <= 0) {
            if (n == -2) {
                seterr(err, errlen, "%s:%d: line longer than %d bytes", path, lineno + 1, PX_CONFIG_MAX_LINE);
                goto out;
            }
            if (n < 0) {
                seterr(err, errlen, "%s: %s", path, strerror(errno));
                goto out;
            }
            break;
        }
        lineno++;
        if (memchr(line, '\0', (size_t)n) != NULL) {
            seterr(err, errlen, "%s:%d: line contains a NUL byte", path, lineno);
            goto out;
        }
        p = line;
        if (lineno == 1 && n >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0) p += 3; /* a UTF-8 BOM */
        for (; isspace((unsigned char)*p); p++) {}
        if (*p == '#' || *p == '\0') continue;
        if (split_line(p, &w, reason, sizeof(reason)) < 0) {
            /* Name the directive: the first word, up to a blank or quote. */
            size_t k = strcspn(p, " \t\r\n\"'");
            if (k > 0)
                seterr(err, errlen, "%s:%d: %.*s: %s", path, lineno, (int)(k > 64 ? 64 : k), p,
                       reason);
            else
                seterr(err, errlen, "%s:%d: %s", path, lineno, reason);
            goto out;
        }
        if (w.n == 0) continue;
        if (px_config_set(c, w.v[0], w.n - 1, w.v + 1, reason, sizeof(reason)) < 0) {
            seterr(err, errlen, "%s:%d: %s", path, lineno, reason);
            words_free(&w);
            goto out;
        }
        words_free(&w);
    }
    rc = 0;
out:
    free(line);
    if (!is_stdin) fclose(f);
    return rc;
}

static int is_directive_word(const char *s) { return s[0] == '-' && s[1] == '-'; }

/* A config file's name: any word not an option; "-" is standard input. */
static int is_file_word(const char *s) { return s[0] != '-' || strcmp(s, "-") == 0; }

/* The index of the config file named after --test-config (`--test-config FILE`,
 * as README shows), 0 for none, or -1 with err set when it names two or a
 * stray option. Its other argument may only be -v. */
static int test_config_file_index(int argc, char **argv, char *err, size_t errlen) {
    int at = 0;
    for (int k = 1; k < argc; k++) {
        if (strcmp(argv[k], "--test-config") != 0) continue;
        for (int j = k + 1; j < argc && !is_directive_word(argv[j]); j++) {
            if (strcmp(argv[j], "-v") == 0) continue;
            if (!is_file_word(argv[j])) {
                seterr(err, errlen, "argument '--test-config': unknown option '%.64s' "
                       "(only a config file and -v)", argv[j]);
                return -1;
            }
            if (at != 0 || is_file_word(argv[1])) {
                seterr(err, errlen, "argument '--test-config': unexpected argument '%.64s' "
                       "(a config file was already given)", argv[j]);
                return -1;
            }
            at = j;
        }
    }
    return at;
}

int px_config_from_args(px_config *c, int argc, char **argv, int *test_only,
                        char *err, size_t errlen) {
    char reason[512];
    int i = 1, testing = 0, verbose = 0, file_at = 0;

    if (test_only) *test_only = 0;
    if (err && errlen) err[0] = '\0';
    /* Help and version win over everything, and read no file. */
    for (int k = 1; k < argc; k++) {
        if (strcmp(argv[k], "-h") == 0 || strcmp(argv[k], "--help") == 0) return PX_ARGS_HELP;
        if (strcmp(argv[k], "--test-config") == 0) testing = 1;
    }
    /* -v asks for the config dump wherever it stands beside --test-config
     * (`sidecache -v --test-config` must not print a version instead), and
     * is --version only without it. */
    for (int k = 1; k < argc; k++) {
        if (strcmp(argv[k], "--version") == 0) return PX_ARGS_VERSION;
        if (strcmp(argv[k], "-v") == 0 && !testing) return PX_ARGS_VERSION;
    }

    if ((file_at = test_config_file_index(argc, argv, err, errlen)) < 0) return -1;
    if (argc > 1 && is_file_word(argv[1])) file_at = 1;
    /* The file first, wherever it is named: the command line wins over it. */
    if (file_at != 0 && px_config_load_file(c, argv[file_at], err, errlen) < 0) return -1;
    if (file_at == 1) i = 2;
    while (i < argc) {
        const char *word = argv[i];
        int first = i + 1, end = first;

        if (testing && strcmp(word, "-v") == 0) {
            verbose = 1;
            i++;
            continue;
        }
        if (!is_directive_word(word) || word[2] == '\0') {
            if (word[0] == '-')
                seterr(err, errlen, "unknown option '%.64s'", word);
            else
                seterr(err, errlen, "unexpected argument '%.64s' (the config file comes "
                       "first; directives start with --)", word);
            return -1;
        }
        /* (with --test-config, a lone -v is its, wherever it stands) */
        int stop_at_v = testing && strcmp(word, "--test-config") != 0;
        while (end < argc && !is_directive_word(argv[end]) && !(stop_at_v && strcmp(argv[end], "-v") == 0)) end++;
        if (strcmp(word, "--test-config") == 0) {
            /* its arguments, -v or the file loaded above, were checked there */
            for (int k = first; k < end; k++)
                if (strcmp(argv[k], "-v") == 0) verbose = 1;
        } else if (px_config_set(c, word + 2, end - first, argv + first, reason,
                                 sizeof(reason)) < 0) {
            seterr(err, errlen, "argument '%.64s': %s", word, reason);
            return -1;
        }
        i = end;
    }
    if (test_only && testing) *test_only = verbose ? 2 : 1;
    return px_config_check(c, err, errlen);
}

/* ------------------------------------------------------------------------ */
/* Whole-config checks.                                                     */

static int is_wildcard(const char *a) {
    return strcmp(a, "*") == 0 || strcmp(a, "0.0.0.0") == 0 || strcmp(a, "::") == 0;
}

static int is_loopback(const char *a) {
    return strcasecmp(a, "localhost") == 0 || strncmp(a, "127.", 4) == 0 ||
           strcmp(a, "::1") == 0;
}

/* Whether a listener on w takes the port on address o too: * and :: (a
 * dual-stack socket) on every address, 0.0.0.0 on the IPv4 ones. */
static int wildcard_covers(const char *w, const char *o) {
    if (!is_wildcard(w)) return 0;
    return strcmp(w, "0.0.0.0") != 0 || strcmp(o, "*") == 0 || strchr(o, ':') == NULL;
}

/* 1 if a listener bound to bind_addr answers a connection to host. */
static int reaches(const char *bind_addr, const char *host) {
    if (strcasecmp(bind_addr, host) == 0) return 1;
    if (is_wildcard(bind_addr) && (is_loopback(host) || is_wildcard(host))) return 1;
    if (strcasecmp(host, "localhost") == 0 &&
        (strcmp(bind_addr, "127.0.0.1") == 0 || strcmp(bind_addr, "::1") == 0))
        return 1;
    return 0;
}

int px_config_check(const px_config *c, char *err, size_t errlen) {
    if (c->port == 0 && c->unixsocket[0] == '\0') {
        seterr(err, errlen, "no listener: port is 0 and unixsocket is not set");
        return -1;
    }
    /* The prefix is put before glob patterns: a * ? [ or \ in it would be
     * glob syntax there, and cache other keys than the prefix's (and, with
     * a hash tag, keys of other slots than the one the prefix names) */
    for (const char *p = c->key_prefix; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if (strchr("*?[]\\", ch) != NULL || ch < 0x20 || ch == 0x7f) {
            seterr(err, errlen, "key-prefix: a glob character or control byte (\\x%02x) is not allowed: the "
                   "prefix is put before the rules' glob patterns", ch);
            return -1;
        }
    }
    if (c->up.is_unix && c->unixsocket[0] != '\0' && strcmp(c->up.path, c->unixsocket) == 0) {
        seterr(err, errlen, "upstream is the proxy's own unixsocket '%s'", c->unixsocket);
        return -1;
    }
    /* a sentinel moves the data connections to the master it names; a
     * fixed tracking-upstream would keep the invalidations on the old one,
     * which sends none of the new master's writes */
    if (c->nsentinel > 0 && c->tracking_upstream[0] != '\0') {
        seterr(err, errlen, "tracking-upstream cannot be used with upstream-sentinel: after a failover the "
               "invalidations would come from the old master");
        return -1;
    }
    /* the invalidation connection logs in as the upstream's user, in its db:
     * an identity given here would be ignored */
    if (c->tracking_upstream[0] != '\0' &&
        (c->tracking_up.has_user || c->tracking_up.has_pass || c->tracking_up.db != 0)) {
        seterr(err, errlen, "tracking-upstream takes an address only (host:port or a unix path): the "
               "invalidation connection logs in with the upstream's user and password");
        return -1;
    }
    unsigned char addr[sizeof(struct in6_addr)];
    if (c->metrics_port != 0 && strcmp(c->metrics_bind, "*") != 0 && strcasecmp(c->metrics_bind, "localhost") != 0 &&
        inet_pton(AF_INET, c->metrics_bind, addr) != 1 && inet_pton(AF_INET6, c->metrics_bind, addr) != 1) {
        seterr(err, errlen, "metrics-bind: '%.64s' is not an IPv4 or IPv6 address (or *, or localhost)",
               c->metrics_bind);
        return -1;
    }
    if (c->metrics_port != 0 && (c->metrics_port == c->port || c->metrics_port == c->tls_port)) {
        /* the same port on another address is a listener of its own */
        int clash = is_wildcard(c->metrics_bind) || strcasecmp(c->metrics_bind, "localhost") == 0;
        for (int i = 0; i < c->nbind && !clash; i++)
            clash = is_wildcard(c->bind[i]) || strcmp(c->bind[i], c->metrics_bind) == 0;
        if (clash) {
            seterr(err, errlen, "metrics-port %d is also %s, on the same address", c->metrics_port,
                   c->metrics_port == c->port ? "port" : "tls-port");
            return -1;
        }
    }
    for (int i = 0; i < c->nbind; i++)
        for (int j = 0; j < i; j++) {
            if (strcmp(c->bind[i], c->bind[j]) == 0) {
                seterr(err, errlen, "bind: '%s' is given twice", c->bind[i]);
                return -1;
            }
            int ji = wildcard_covers(c->bind[j], c->bind[i]);
            if (ji || wildcard_covers(c->bind[i], c->bind[j])) {
                seterr(err, errlen, "bind: '%s' takes the port on '%s' too", c->bind[ji ? j : i], c->bind[ji ? i : j]);
                return -1;
            }
        }
    if (!c->up.is_unix && c->port != 0 && c->up.port == c->port) {
        for (int i = 0; i < c->nbind; i++) {
            if (reaches(c->bind[i], c->up.host)) {
                seterr(err, errlen, "upstream %s:%d is the proxy's own listener (bind %s, "
                       "port %d)", c->up.host, c->up.port, c->bind[i], c->port);
                return -1;
            }
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Writing the config back.                                                 */

/* Writes s as one word that split_line reads back as s. */
static void write_word(FILE *f, const char *s) {
    int plain = *s != '\0' && *s != '#';
    for (const char *p = s; *p && plain; p++) {
        unsigned char ch = (unsigned char)*p;
        if (isspace(ch) || ch == '"' || ch == '\'' || ch == '\\' || !isprint(ch)) plain = 0;
    }
    if (plain) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '\\': fputs("\\\\", f); break;
        case '"': fputs("\\\"", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        case '\a': fputs("\\a", f); break;
        case '\b': fputs("\\b", f); break;
        default:
            if (isprint(*p)) fputc(*p, f);
            else fprintf(f, "\\x%02x", *p);
        }
    }
    fputc('"', f);
}

/* Writes the value of d in c as file arguments. */
static void write_value(FILE *f, const px_directive *d, const px_config *c, int flags) {
    char buf[2048];
    switch (d->type) {
    case PX_CT_INT:
        format_number(d, *(const int *)cfield(c, d->off), buf, sizeof(buf));
        fputs(buf, f);
        break;
    case PX_CT_LL:
        format_number(d, *(const long long *)cfield(c, d->off), buf, sizeof(buf));
        fputs(buf, f);
        break;
    case PX_CT_BOOL:
        fputs(*(const int *)cfield(c, d->off) ? "yes" : "no", f);
        break;
    case PX_CT_ENUM:
        fputs(d->names[*(const int *)cfield(c, d->off)], f);
        break;
    case PX_CT_STRING:
        write_word(f, cfield(c, d->off));
        break;
    case PX_CT_OCTAL: {
        int v = *(const int *)cfield(c, d->off);
        fprintf(f, v ? "0%o" : "%o", (unsigned)v);
        break;
    }
    case PX_CT_LIST: {
        char *const *list = cfield(c, d->off);
        int n = *(const int *)cfield(c, d->off2);
        for (int i = 0; i < n; i++) {
            if (i) fputc(' ', f);
            write_word(f, list[i]);
        }
        break;
    }
    case PX_CT_UPSTREAM:
        if (*(const char *)cfield(c, d->off) == '\0')
            write_word(f, ""); /* optional and not set */
        else if (px_upstream_format(cfield(c, d->off2), flags, buf, sizeof(buf)) < 0)
            write_word(f, cfield(c, d->off)); /* cannot happen: buf fits any URL */
        else
            write_word(f, buf);
        break;
    case PX_CT_APPEND: /* written by px_config_dump, one line per entry */
        break;
    }
}

/* Writes the line(s) of d in c: none for a repeatable directive not given. */
static void dump_directive(const px_directive *d, const px_config *c, FILE *f, int flags) {
    if (d->type == PX_CT_APPEND) {
        /* one line per entry, its words as given */
        size_t width = d->size / (size_t)d->max;
        int n = *(const int *)cfield(c, d->off2);
        for (int k = 0; k < n; k++) {
            const char *e = (const char *)cfield(c, d->off) + (size_t)k * width;
            const char *sp = strchr(e, ' ');
            fprintf(f, "%s ", d->name);
            if (sp != NULL) {
                char first[64];
                snprintf(first, sizeof first, "%.*s", (int)(sp - e), e);
                write_word(f, first);
                fputc(' ', f);
                write_word(f, sp + 1);
            } else {
                write_word(f, e);
            }
            fputc('\n', f);
        }
        return;
    }
    fprintf(f, "%s ", d->name);
    write_value(f, d, c, flags);
    fputc('\n', f);
}

int px_config_dump(const px_config *c, FILE *f, int flags) {
    for (size_t i = 0; i < PX_NDIRECTIVES; i++) dump_directive(&px_directives[i], c, f, flags);
    return ferror(f) ? -1 : 0;
}

/* 1 if name is one of the NULL-terminated names. */
static int name_in(const char *name, const char *const *names) {
    for (; names != NULL && *names != NULL; names++)
        if (strcmp(name, *names) == 0) return 1;
    return 0;
}

int px_config_diff(const px_config *a, const px_config *b, const char *const *skip, char *out,
                   size_t outlen) {
    size_t used = 0;
    int n = 0, full = outlen == 0;
    if (outlen) out[0] = '\0';
    for (size_t i = 0; i < PX_NDIRECTIVES; i++) {
        const px_directive *d = &px_directives[i];
        char *da = NULL, *db = NULL;
        size_t la = 0, lb = 0;
        if (name_in(d->name, skip)) continue;
        /* compared as written back: one notion of "the same value" for
         * every type, lists and repeatable directives included */
        FILE *fa = open_memstream(&da, &la), *fb = open_memstream(&db, &lb);
        if (fa == NULL || fb == NULL) {
            if (fa != NULL) fclose(fa);
            if (fb != NULL) fclose(fb);
            free(da);
            free(db);
            return -1;
        }
        dump_directive(d, a, fa, PX_FMT_SECRETS); /* a new password is a change */
        dump_directive(d, b, fb, PX_FMT_SECRETS);
        fclose(fa);
        fclose(fb);
        if (la != lb || memcmp(da, db, la) != 0) {
            /* whole names only: past the first that does not fit, none */
            if (!full) {
                int w = snprintf(out + used, outlen - used, "%s%s", n ? ", " : "", d->name);
                if (w > 0 && (size_t)w < outlen - used) {
                    used += (size_t)w;
                } else {
                    full = 1;
                    out[used] = '\0';
                }
            }
            n++;
        }
        free(da);
        free(db);
    }
    return n;
}

void px_config_help(FILE *f, const char *prog) {
    if (prog == NULL) prog = "sidecache";
    fprintf(f,
            "Usage: %s [config-file] [--directive value ...] [--test-config [-v]]\n"
            "       %s --test-config [-v] config-file [--directive value ...]\n"
            "       %s -h | --help\n"
            "       %s -v | --version\n"
            "\n"
            "The config file uses redis.conf syntax (\"-\" reads it from standard input).\n"
            "Each --directive given on the command line overrides the file; the repeatable\n"
            "ones (cache-rule, cache-track-prefix, cache-readonly-script, cache-lookup-script)\n"
            "add to the file's.\n"
            "--test-config checks the configuration and exits 0 if it loads; with -v\n"
            "(anywhere beside --test-config) it also prints the effective configuration,\n"
            "and the cache rules and tracking prefixes it gives as # comments.\n"
            "Without --test-config, -v is --version.\n"
            "\n"
            "Directives:\n",
            prog, prog, prog, prog);
    for (size_t i = 0; i < PX_NDIRECTIVES; i++) {
        const px_directive *d = &px_directives[i];
        char opt[96];
        snprintf(opt, sizeof(opt), "--%s %s", d->name, d->arg);
        fprintf(f, "  %-38s default: %s\n      %s\n", opt, d->def[0] ? d->def : "\"\"", d->help);
    }
}

/* ------------------------------------------------------------------------ */
/* Upstream URLs.                                                           */

/* Percent-decodes s[0..n) into out (NUL-terminated). Returns 0, -1 for a bad
 * escape or a NUL byte, -2 when out is too small. */
static int pct_decode(const char *s, size_t n, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int ch = (unsigned char)s[i];
        if (ch == '%') {
            if (i + 2 >= n) return -1;
            int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
            if (hi < 0 || lo < 0) return -1;
            ch = hi * 16 + lo;
            if (ch == 0) return -1;
            i += 2;
        }
        if (o + 1 >= cap) return -2;
        out[o++] = (char)ch;
    }
    out[o] = '\0';
    return 0;
}

static int decode_part(const char *what, const char *s, size_t n, char *out, size_t cap,
                       char *err, size_t errlen) {
    int rc = pct_decode(s, n, out, cap);
    if (rc == -1) seterr(err, errlen, "upstream: bad percent-encoding in the %s", what);
    else if (rc == -2) seterr(err, errlen, "upstream: the %s is too long (at most %zu bytes)", what,
                              cap - 1);
    return rc < 0 ? -1 : 0;
}

/* Parses a database number s[0..n). */
static int parse_db(const char *s, size_t n, int *db, char *err, size_t errlen) {
    long long v = 0;
    size_t i;
    for (i = 0; i < n && isdigit((unsigned char)s[i]) && v <= INT_MAX; i++)
        v = v * 10 + (s[i] - '0');
    if (n == 0 || i != n || v > INT_MAX) {
        seterr(err, errlen, "upstream: database must be a non-negative integer (got '%.*s')",
               (int)(n > 64 ? 64 : n), s);
        return -1;
    }
    *db = (int)v;
    return 0;
}

/* Parses "user[:pass]" s[0..n) into a. */
static int parse_userinfo(const char *s, size_t n, px_upstream_addr *a, char *err,
                          size_t errlen) {
    const char *colon = memchr(s, ':', n);
    size_t ulen = colon ? (size_t)(colon - s) : n;
    if (decode_part("user name", s, ulen, a->user, sizeof(a->user), err, errlen) < 0) return -1;
    a->has_user = ulen > 0;
    if (colon) {
        if (decode_part("password", colon + 1, n - ulen - 1, a->pass, sizeof(a->pass), err,
                        errlen) < 0)
            return -1;
        a->has_pass = 1;
    }
    return 0;
}

static int valid_host_char(int ch) {
    return isalnum(ch) || ch == '-' || ch == '.' || ch == '_';
}

/* Parses what follows "redis://". */
static int parse_tcp(const char *s, px_upstream_addr *a, char *err, size_t errlen) {
    size_t alen = strcspn(s, "/?#");
    const char *aend = s + alen, *hp = s, *at = NULL, *host, *port = NULL;
    size_t hlen, plen = 0;

    for (const char *p = s; p < aend; p++)
        if (*p == '@') at = p; /* the last '@': a password may hold one */
    if (at) {
        if (parse_userinfo(s, (size_t)(at - s), a, err, errlen) < 0) return -1;
        hp = at + 1;
    }
    if (*hp == '[') {
        const char *close = memchr(hp, ']', (size_t)(aend - hp));
        char v6[sizeof(a->host)];
        unsigned char bin[sizeof(struct in6_addr)];
        if (close == NULL) {
            seterr(err, errlen, "upstream: missing ']' after the IPv6 address");
            return -1;
        }
        host = hp + 1;
        hlen = (size_t)(close - host);
        if (hlen >= sizeof(v6)) hlen = sizeof(v6) - 1;
        memcpy(v6, host, hlen);
        v6[hlen] = '\0';
        if (inet_pton(AF_INET6, v6, bin) != 1) {
            seterr(err, errlen, "upstream: '[%.64s]' is not an IPv6 address", v6);
            return -1;
        }
        if (close + 1 < aend) {
            if (close[1] != ':') {
                seterr(err, errlen, "upstream: unexpected '%c' after ']' (use [addr]:port)",
                       close[1]);
                return -1;
            }
            port = close + 2;
        }
    } else {
        const char *colon = memchr(hp, ':', (size_t)(aend - hp));
        host = hp;
        hlen = colon ? (size_t)(colon - hp) : (size_t)(aend - hp);
        if (colon && memchr(colon + 1, ':', (size_t)(aend - colon - 1)) != NULL) {
            seterr(err, errlen, "upstream: an IPv6 address must be in brackets "
                   "(redis://[::1]:6379)");
            return -1;
        }
        for (size_t i = 0; i < hlen; i++) {
            if (!valid_host_char((unsigned char)host[i])) {
                seterr(err, errlen, "upstream: invalid character '%c' in host", host[i]);
                return -1;
            }
        }
        if (colon) port = colon + 1;
    }
    if (hlen == 0) {
        seterr(err, errlen, "upstream: missing host (redis://host:port)");
        return -1;
    }
    if (hlen >= sizeof(a->host)) {
        seterr(err, errlen, "upstream: host is too long (at most %zu bytes)", sizeof(a->host) - 1);
        return -1;
    }
    memcpy(a->host, host, hlen);
    a->host[hlen] = '\0';
    if (port) {
        long long v = 0;
        size_t i;
        plen = (size_t)(aend - port);
        for (i = 0; i < plen && isdigit((unsigned char)port[i]) && v <= 65535; i++)
            v = v * 10 + (port[i] - '0');
        if (plen == 0 || i != plen || v < 1 || v > 65535) {
            seterr(err, errlen, "upstream: port must be between 1 and 65535 (got '%.*s')",
                   (int)(plen > 64 ? 64 : plen), port);
            return -1;
        }
        a->port = (int)v;
    }
    if (*aend == '/') {
        const char *db = aend + 1;
        size_t dlen = strcspn(db, "?#");
        if (dlen > 0 && parse_db(db, dlen, &a->db, err, errlen) < 0) return -1;
        aend = db + dlen;
    }
    if (*aend == '?') {
        seterr(err, errlen, "upstream: redis:// URLs take no parameters (the database goes in "
               "the path: redis://host:port/db)");
        return -1;
    }
    if (*aend == '#') {
        seterr(err, errlen, "upstream: unexpected '#' in the URL");
        return -1;
    }
    return 0;
}

/* Parses what follows "unix:". */
static int parse_unix(const char *s, px_upstream_addr *a, char *err, size_t errlen) {
    size_t plen;
    a->is_unix = 1;
    if (strncmp(s, "//", 2) == 0) {
        s += 2;
        if (*s != '/') {
            /* unix://user:pass@/path, as go-redis and redis-py write it */
            const char *slash = strchr(s, '/');
            const char *at = NULL;
            for (const char *p = s; slash && p < slash; p++)
                if (*p == '@') at = p;
            if (at == NULL || at + 1 != slash) {
                seterr(err, errlen, "upstream: the unix socket path must be absolute "
                       "(unix:///path/to/redis.sock)");
                return -1;
            }
            if (parse_userinfo(s, (size_t)(at - s), a, err, errlen) < 0) return -1;
            s = slash;
        }
    }
    if (*s != '/') {
        seterr(err, errlen, "upstream: the unix socket path must be absolute "
               "(unix:///path/to/redis.sock)");
        return -1;
    }
    plen = strcspn(s, "?#");
    if (s[plen] == '#') {
        seterr(err, errlen, "upstream: unexpected '#' in the URL");
        return -1;
    }
    if (decode_part("unix socket path", s, plen, a->path, sizeof(a->path), err, errlen) < 0)
        return -1;
    if (a->path[strlen(a->path) - 1] == '/') {
        seterr(err, errlen, "upstream: unix socket path '%.64s' is a directory", a->path);
        return -1;
    }
    if (s[plen] == '?') {
        const char *q = s + plen + 1;
        while (*q) {
            size_t n = strcspn(q, "&");
            if (n > 0) {
                if (n >= 3 && strncmp(q, "db=", 3) == 0) {
                    if (parse_db(q + 3, n - 3, &a->db, err, errlen) < 0) return -1;
                } else {
                    size_t k = strcspn(q, "=&");
                    seterr(err, errlen, "upstream: unknown parameter '%.*s' (unix:// URLs take "
                           "only db)", (int)(k > 64 ? 64 : k), q);
                    return -1;
                }
            }
            q += n;
            if (*q == '&') q++;
        }
    }
    return 0;
}

int px_upstream_credentials_differ(const px_upstream_addr *a, const px_upstream_addr *b) {
    int same_redis = a->is_unix == b->is_unix && a->tls == b->tls && strcmp(a->host, b->host) == 0 &&
                     a->port == b->port && strcmp(a->path, b->path) == 0 && a->db == b->db;
    int same_login = a->has_user == b->has_user && a->has_pass == b->has_pass && strcmp(a->user, b->user) == 0 &&
                     strcmp(a->pass, b->pass) == 0;
    return same_redis && !same_login;
}

int px_upstream_parse(const char *url, px_upstream_addr *out, char *err, size_t errlen) {
    px_upstream_addr a;
    const char *colon, *rest;
    size_t slen;
    int scheme_ok;

    memset(&a, 0, sizeof(a));
    a.port = 6379;
    if (url == NULL || *url == '\0') {
        seterr(err, errlen, "upstream: empty URL (use redis://host:port, rediss://host:port or unix:///path)");
        return -1;
    }
    for (const char *p = url; *p; p++) {
        if ((unsigned char)*p <= 0x20 || *p == 0x7f) {
            seterr(err, errlen, "upstream: the URL contains a blank or control character "
                   "(percent-encode it)");
            return -1;
        }
    }
    colon = strchr(url, ':');
    slen = colon ? (size_t)(colon - url) : 0;
    scheme_ok = slen > 0 && isalpha((unsigned char)url[0]);
    for (size_t i = 1; i < slen && scheme_ok; i++) {
        int ch = (unsigned char)url[i];
        scheme_ok = isalnum(ch) || ch == '+' || ch == '-' || ch == '.';
    }
    rest = colon ? colon + 1 : NULL;
    if (scheme_ok && slen == 5 && strncasecmp(url, "redis", 5) == 0) {
        if (strncmp(rest, "//", 2) != 0) {
            seterr(err, errlen, "upstream: expected '//' after 'redis:' (redis://host:port)");
            return -1;
        }
        if (parse_tcp(rest + 2, &a, err, errlen) < 0) return -1;
    } else if (scheme_ok && slen == 6 && strncasecmp(url, "rediss", 6) == 0) {
        if (strncmp(rest, "//", 2) != 0) {
            seterr(err, errlen, "upstream: expected '//' after 'rediss:' (rediss://host:port)");
            return -1;
        }
        if (parse_tcp(rest + 2, &a, err, errlen) < 0) return -1;
        a.tls = 1;
    } else if (scheme_ok && slen == 4 && strncasecmp(url, "unix", 4) == 0) {
        if (parse_unix(rest, &a, err, errlen) < 0) return -1;
    } else if (url[0] == '/') {
        seterr(err, errlen, "upstream: '%.100s' has no scheme (did you mean unix://%.100s?)",
               url, url);
        return -1;
    } else if (colon && strchr(url, '@') == NULL && rest[0] && rest[strspn(rest, "0123456789")] == '\0') {
        /* host:port; no '@', so no password is echoed */
        seterr(err, errlen, "upstream: '%.100s' has no scheme (did you mean redis://%.100s?)",
               url, url);
        return -1;
    } else if (scheme_ok) {
        seterr(err, errlen, "upstream: unknown scheme '%.*s' (use redis://, rediss:// or unix://)",
               (int)(slen > 32 ? 32 : slen), url);
        return -1;
    } else {
        seterr(err, errlen, "upstream: not a URL (use redis://host:port, rediss://host:port or unix:///path)");
        return -1;
    }
    *out = a;
    return 0;
}

/* Appends s percent-encoded (all but RFC 3986 unreserved characters). */
static size_t pct_encode(char *buf, size_t len, size_t o, const char *s) {
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (isalnum(*p) || *p == '-' || *p == '.' || *p == '_' || *p == '~') {
            if (o + 1 < len) buf[o] = (char)*p;
            o++;
        } else {
            if (o + 3 < len) {
                buf[o] = '%';
                buf[o + 1] = hex[*p >> 4];
                buf[o + 2] = hex[*p & 15];
            }
            o += 3;
        }
    }
    return o;
}

static size_t append(char *buf, size_t len, size_t o, const char *s) {
    size_t n = strlen(s);
    if (o < len) memcpy(buf + o, s, o + n < len ? n : len - o);
    return o + n;
}

int px_upstream_format(const px_upstream_addr *a, int flags, char *buf, size_t len) {
    char num[32];
    size_t o;

    if (len == 0) return -1;
    o = append(buf, len, 0, a->is_unix ? "unix://" : a->tls ? "rediss://" : "redis://");
    if (a->has_user || a->has_pass) {
        o = pct_encode(buf, len, o, a->user);
        if (a->has_pass) {
            o = append(buf, len, o, ":");
            o = (flags & PX_FMT_SECRETS) ? pct_encode(buf, len, o, a->pass)
                                         : append(buf, len, o, "****");
        }
        o = append(buf, len, o, "@");
    }
    if (a->is_unix) {
        /* keep '/', encode the rest that the parser would misread */
        for (const char *p = a->path; *p; p++) {
            char one[2] = {*p, '\0'};
            o = (*p == '/') ? append(buf, len, o, "/") : pct_encode(buf, len, o, one);
        }
        if (a->db != 0) {
            snprintf(num, sizeof(num), "?db=%d", a->db);
            o = append(buf, len, o, num);
        }
    } else {
        int v6 = strchr(a->host, ':') != NULL;
        o = append(buf, len, o, v6 ? "[" : "");
        o = append(buf, len, o, a->host);
        snprintf(num, sizeof(num), "%s:%d", v6 ? "]" : "", a->port);
        o = append(buf, len, o, num);
        if (a->db != 0) {
            snprintf(num, sizeof(num), "/%d", a->db);
            o = append(buf, len, o, num);
        }
    }
    if (o >= len) {
        buf[0] = '\0';
        return -1;
    }
    buf[o] = '\0';
    return (int)o;
}
