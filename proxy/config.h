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

#define PX_MAX_BIND 16

enum px_loglevel { PX_LOG_DEBUG, PX_LOG_VERBOSE, PX_LOG_NOTICE, PX_LOG_WARNING };

/* Where Redis is: redis://[user:pass@]host:port[/db] or unix:///path[?db=N]. */
typedef struct px_upstream_addr {
    int is_unix;      /* 1: path is a unix socket */
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
    char *bind[PX_MAX_BIND];       /* listen addresses (owned strings) */
    int nbind;
    int port;                      /* tcp port; 0 = no tcp listener */
    char unixsocket[108];          /* "" = no unix listener */
    int unixsocketperm;            /* octal mode, 0 = leave as created */
    int maxclients;
    int timeout;                   /* client idle seconds, 0 = never */
    int tcp_keepalive;             /* seconds, 0 = off */
    int upstream_connections;      /* shared connections per pool */
    int loglevel;                  /* enum px_loglevel */
    char logfile[1024];            /* "" = stderr */
    long long proto_max_bulk_len;  /* bytes */
    long long max_multibulk_len;   /* elements in one request */
    long long client_query_buffer_limit;  /* bytes buffered per client input */
    long long client_output_buffer_limit; /* bytes pending per client output */
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
 * could not be read).
 */
int px_config_load_file(px_config *c, const char *path, char *err, size_t errlen);

/*
 * Parses a command line: `sidecache [config-file] [--directive args...]
 * [--test-config]`. A directive's arguments are the words up to the next
 * word that starts with "--". Sets *test_only when --test-config is given.
 * Returns 0, or -1 with a reason in err (for a file, as px_config_load_file).
 */
int px_config_from_args(px_config *c, int argc, char **argv, int *test_only,
                        char *err, size_t errlen);

/* Parses an upstream URL into *a. Returns 0, or -1 with a reason in err. */
int px_upstream_parse(const char *url, px_upstream_addr *a, char *err, size_t errlen);

#endif
