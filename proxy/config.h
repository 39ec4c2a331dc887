/*
 * proxy/config.h — sidecache's configuration: one table of directives.
 *
 * Every directive can be given in a file (redis.conf syntax: one directive a
 * line, arguments split on blanks, "double" and 'single' quotes as Redis
 * reads them, '#' starts a comment line) or on the command line as
 * `--directive value ...`, as redis-server does. Later settings win, and the
 * command line comes after the file.
 *
 * Each directive has a type, a default and bounds in one table (config.c);
 * conf/sidecache.conf documents every one with its default.
 */
#ifndef SIDECACHE_PROXY_CONFIG_H
#define SIDECACHE_PROXY_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#define PX_MAX_BIND 16
#define PX_MAX_RULES 64
#define PX_RULE_LEN 320
#define PX_MAX_SCRIPTS 32
/* cache-lookup-script lines: what the lookup table holds (proxy/lookup.h),
 * less the juicefs profile's two */
#define PX_MAX_LOOKUP_SCRIPTS 14
#define PX_SENTINELS_MAX 64 /* addresses in upstream-sentinel */
#define PX_SENTINEL_NAME_MAX 256 /* bytes of its master name, and of a host, with the NUL */

enum px_profile { PX_PROFILE_NONE, PX_PROFILE_JUICEFS };
enum px_tls_auth { PX_TLS_AUTH_NO, PX_TLS_AUTH_YES, PX_TLS_AUTH_OPTIONAL };
enum px_tracking_mode { PX_TRACKING_BCAST, PX_TRACKING_DEFAULT, PX_TRACKING_OPTIN };

/* px_config_from_args's results other than 0 (run) and -1 (error). */
enum { PX_ARGS_HELP = 1, PX_ARGS_VERSION = 2 };

/* Flag of px_config_dump and px_upstream_format: print the upstream password
 * instead of masking it as "****". */
#define PX_FMT_SECRETS 0x1

enum px_loglevel { PX_LOG_DEBUG, PX_LOG_VERBOSE, PX_LOG_NOTICE, PX_LOG_WARNING };

/* Where Redis is: redis://[user:pass@]host:port[/db] or unix:///path[?db=N]. */
typedef struct px_upstream_addr {
    int is_unix;      /* 1: path is a unix socket */
    int tls;          /* 1: rediss:// */
    char host[256];   /* tcp host (name or address), without brackets */
    int port;         /* tcp port, default 6379 */
    char path[108];   /* unix socket path */
    char user[128];   /* "" when none was given */
    char pass[256];   /* "" when none was given; has_pass tells an empty one */
    int has_user;
    int has_pass;
    int db;           /* default database of client sessions, 0 if none */
} px_upstream_addr;

typedef struct px_config {
    char upstream[1024];           /* upstream URL as given */
    px_upstream_addr up;           /* ... and parsed */
    char tracking_upstream[1024];  /* where the invalidation connection goes
                                      ("" = the upstream) ... */
    px_upstream_addr tracking_up;  /* ... and parsed (host, port or path only) */
    char sentinel[1][1200];        /* upstream-sentinel "<master-name> <host:port>,...": */
    int nsentinel;                 /* 1 when given (proxy/sentinel.h) */
    int sentinel_check_ms;         /* how often the sentinels are asked */
    int acl_check_ms;              /* how often ACL LIST is asked (aclwatch.h); 0 = never */
    char *bind[PX_MAX_BIND];       /* listen addresses: numeric IPv4 or IPv6,
                                      or "*" for any (owned by the config,
                                      read-only) */
    int nbind;
    int port;                      /* tcp port; 0 = no tcp listener */
    char unixsocket[108];          /* "" = no unix listener */
    int unixsocketperm;            /* octal mode, 0 = leave as created */
    int maxclients;                /* once running, lowered to fit the open
                                      files limit (proxy/fdlimit.h) */
    int timeout;                   /* client idle seconds, 0 = never */
    int tcp_keepalive;             /* seconds, 0 = off */
    int tcp_nodelay;               /* 1: TCP_NODELAY on client and upstream sockets */
    int metrics_port;              /* Prometheus /metrics; 0 = off */
    int tls_port;                  /* TLS clients; 0 = none (proxy/tls.h) */
    char tls_cert_file[1024], tls_key_file[1024], tls_ca_cert_file[1024];
    int tls_auth_clients;          /* enum px_tls_auth */
    char tls_upstream_ca_cert_file[1024], tls_upstream_cert_file[1024], tls_upstream_key_file[1024];
    char metrics_bind[64];         /* metrics-port's address */
    int upstream_connections;      /* shared connections per pool */
    int upstream_timeout;          /* seconds without a reply byte before a connection is dropped; 0 = never */
    int upstream_connect_timeout;  /* ms a connect to Redis (TCP, TLS) may take; 0 = no deadline */
    int loglevel;                  /* enum px_loglevel */
    char logfile[1024];            /* "" = stderr */
    long long proto_max_bulk_len;  /* bytes */
    long long max_multibulk_len;   /* elements in one request */
    long long client_query_buffer_limit;  /* bytes buffered per client input */
    long long proto_max_inline_len; /* longest inline request or header line */
    int proto_max_nesting;         /* obsolete: read and checked, not used */
    int partial_command_timeout;   /* seconds a started request may take to arrive; 0 = no limit */
    long long client_output_buffer_limit; /* bytes pending per client output */
    long long upstream_output_limit; /* bytes waiting to be written to Redis, all connections; 0 = no limit */

    /* the cache */
    int profile;                   /* enum px_profile: rules that come built in */
    char key_prefix[64];           /* put before every rule pattern ("{1}") */
    char cache_rules[PX_MAX_RULES][PX_RULE_LEN]; /* "COMMAND PATTERN", one per cache-rule line */
    int ncache_rules;
    char track_prefixes[PX_MAX_RULES][PX_RULE_LEN]; /* cache-track-prefix lines: coarser tracking prefixes */
    int ntrack_prefixes;
    int cache_ask_ttl;             /* cache-rule keys may have a TTL: each fill asks (PTTL) */
    char readonly_scripts[PX_MAX_SCRIPTS][41];   /* SHA1s of scripts that write nothing */
    int nreadonly_scripts;
    char lookup_scripts[PX_MAX_LOOKUP_SCRIPTS][41];     /* SHA1s of lookup scripts answered from the cache */
    int nlookup_scripts;
    int watch_ahead;               /* answer WATCH once sent, EXEC waits for Redis's +OK */
    int batch_max_commands;        /* writes per MULTI/EXEC block; 0 = no batching */
    long long cache_max_memory;    /* bytes; 0 = no caching */
    long long cache_max_value;     /* bytes; larger values pass uncached */
    int cache_ttl;                 /* seconds; 0 = no expiry */
    int tracking_mode;             /* enum px_tracking_mode */
    int tracking_keepalive_ms;     /* PING period on the invalidation connection */
    int tracking_timeout_ms;       /* ... and how long its answer may take */
    int tracking_ping_hold_ms;     /* ... and how long a hit waits for it */
    int file_regular_only;         /* set by the caller before loading (a
                                      reload): a config file that is not a
                                      regular file (standard input, a pipe, a
                                      FIFO: read once, at start) is refused
                                      unread */
} px_config;

/* Sets every directive to its default. */
void px_config_init(px_config *c);
/* Frees what px_config_init and the setters allocated. */
void px_config_deinit(px_config *c);

/*
 * Applies one directive. name is case-insensitive; argv holds its arguments.
 * Returns 0, or -1 with a reason in err ("unknown directive 'x'",
 * "port must be between 0 and 65535", ...).
 */
int px_config_set(px_config *c, const char *name, int argc, char **argv,
                  char *err, size_t errlen);

/*
 * Reads a file of directives. Returns 0, or -1 with err as
 * "<path>:<line>: <reason>" for the first bad line (or the reason the file
 * could not be read). A line may hold PX_CONFIG_MAX_LINE bytes; a UTF-8
 * byte order mark before the first is skipped. With c->file_regular_only,
 * anything but a regular file is refused before a byte is read (a FIFO
 * would block, a pipe read again would give nothing).
 */
#define PX_CONFIG_MAX_LINE 65536
int px_config_load_file(px_config *c, const char *path, char *err, size_t errlen);

/*
 * Parses a command line: `sidecache [config-file] [--directive args...]
 * [--test-config]`. A directive's arguments are the words up to the next
 * word that starts with "--". Sets *test_only when --test-config is given.
 * Returns 0, or -1 with a reason in err (for a file, as px_config_load_file).
 *
 * Details:
 * - argv[1] is the config file unless it starts with "-"; "-" alone reads
 *   the file from standard input, as redis-server does. The file may also
 *   follow --test-config (`--test-config FILE`); naming two is an error.
 * - The file is loaded first, then the directives apply in order, then
 *   px_config_check runs. Command-line errors read
 *   "argument '--port': port must be between 0 and 65535 (got 70000)".
 * - *test_only (may be NULL) is 0 without --test-config, 1 with it and 2 when
 *   a "-v" word stands anywhere beside it (the caller then prints the config:
 *   px_config_dump).
 * - "-h"/"--help" anywhere returns PX_ARGS_HELP, "--version" anywhere, or
 *   "-v" without --test-config, PX_ARGS_VERSION, before any file is read;
 *   err is "" and the caller prints px_config_help or its version and
 *   exits 0.
 * On -1, c may hold part of the settings; the caller exits.
 */
int px_config_from_args(px_config *c, int argc, char **argv, int *test_only,
                        char *err, size_t errlen);

/*
 * Checks what no single directive can: that there is a listener (port or
 * unixsocket), and that the upstream is not the proxy's own listener (same
 * unix socket path, or same port on a bind address that reaches the upstream
 * host). px_config_from_args calls it last. Returns 0, or -1 with a reason.
 */
int px_config_check(const px_config *c, char *err, size_t errlen);

/*
 * Writes the effective config to f in config-file syntax, one directive a
 * line in table order, so that the output loads back to the same config.
 * Sizes are written with the largest exact unit ("512mb"). The upstream
 * password is masked unless flags has PX_FMT_SECRETS.
 * Returns 0, or -1 when writing failed.
 */
int px_config_dump(const px_config *c, FILE *f, int flags);

/*
 * Compares a and b directive by directive, as px_config_dump writes them
 * (passwords included), skipping the names in skip (NULL-terminated, may be
 * NULL). Writes the names that differ to out, ", "-separated in table order
 * (cut short if out is too small). Returns how many differ, or -1 out of
 * memory.
 */
int px_config_diff(const px_config *a, const px_config *b, const char *const *skip, char *out,
                   size_t outlen);

/*
 * Writes the usage (prog NULL: "sidecache") and every directive with its
 * argument, default and one-line help to f, for --help.
 */
void px_config_help(FILE *f, const char *prog);

/*
 * Parses an upstream URL into *a. Returns 0, or -1 with a reason in err
 * (starting "upstream: "); *a is untouched on error. Accepts
 *   redis://[user[:pass]@]host[:port][/db]   host a name, IPv4 or [IPv6];
 *                                            port 1..65535, default 6379
 *   rediss://...                             the same, over TLS (a->tls)
 *   unix://[user[:pass]@]/path[?db=N]  and  unix:/path[?db=N]
 * user, pass and the unix path are percent-decoded. Error messages never
 * echo the password.
 */
int px_upstream_parse(const char *url, px_upstream_addr *a, char *err, size_t errlen);

/* Do a and b name the same Redis, db and transport, with other credentials
 * (user or password)? */
int px_upstream_credentials_differ(const px_upstream_addr *a, const px_upstream_addr *b);

/*
 * Formats *a back as a URL (canonical: port always given, db only when not
 * 0, user and pass percent-encoded; the password as "****" unless flags has
 * PX_FMT_SECRETS) for logs and px_config_dump. Returns the length written,
 * or -1 when it does not fit in buf (buf then holds "").
 */
int px_upstream_format(const px_upstream_addr *a, int flags, char *buf, size_t len);

#endif
