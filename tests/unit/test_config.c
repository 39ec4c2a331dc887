/*
 * tests/unit/test_config.c — proxy/config.c: the directive table, each type
 * and its bounds, redis.conf word splitting, file and command-line errors,
 * precedence, the upstream URL parser, and conf/sidecache.conf itself.
 *
 * Run from the repository root (it loads conf/sidecache.conf). Temporary
 * files go to $TMPDIR (or /tmp) and are removed at the end.
 */
#include "proxy/config.h"
#include "tests/unit/unit.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHECK_STR(a, b) do { const char *a_ = (a), *b_ = (b); \
    if (a_ == NULL || strcmp(a_, b_) != 0) { \
        fprintf(stderr, "FAIL %s: %s:%d: %s == \"%s\" (got \"%s\")\n", unit_cur_name, \
                __FILE__, __LINE__, #a, b_, a_ ? a_ : "(null)"); \
        unit_cur_failed = 1; \
    } } while (0)

#define CHECK_HAS(hay, needle) do { const char *h_ = (hay), *n_ = (needle); \
    if (strstr(h_, n_) == NULL) { \
        fprintf(stderr, "FAIL %s: %s:%d: \"%s\" contains \"%s\"\n", unit_cur_name, \
                __FILE__, __LINE__, h_, n_); \
        unit_cur_failed = 1; \
    } } while (0)

/* ------------------------------------------------------------------------ */
/* Helpers.                                                                 */

static char tmp_paths[128][256];
static int ntmp;

/* Writes content to a new temporary file; returns its path. */
static const char *write_tmp(const char *content) {
    const char *dir = getenv("TMPDIR");
    if (ntmp == (int)(sizeof tmp_paths / sizeof tmp_paths[0])) {
        fprintf(stderr, "write_tmp: more temporary files than tmp_paths holds\n");
        exit(2);
    }
    char *path = tmp_paths[ntmp++];
    int fd;
    snprintf(path, sizeof(tmp_paths[0]), "%s/sidecache-test-config-XXXXXX",
             dir && *dir ? dir : "/tmp");
    fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        exit(2);
    }
    size_t n = strlen(content);
    if (write(fd, content, n) != (ssize_t)n) {
        perror("write");
        exit(2);
    }
    close(fd);
    return path;
}

static void remove_tmp(void) {
    for (int i = 0; i < ntmp; i++) unlink(tmp_paths[i]);
}

/* px_config_set with words given as varargs-free arrays. */
static int set1(px_config *c, const char *name, const char *v, char *err, size_t errlen) {
    char *argv[1] = {(char *)v};
    return px_config_set(c, name, 1, argv, err, errlen);
}

/* Loads a file written from content into a fresh config c (init'ed here). */
static int load_str(px_config *c, const char *content, char *err, size_t errlen,
                    const char **pathp) {
    const char *path = write_tmp(content);
    if (pathp) *pathp = path;
    px_config_init(c);
    return px_config_load_file(c, path, err, errlen);
}

/* The dump of c as a malloc'd string. */
static char *dump_str(const px_config *c, int flags) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL) return NULL;
    px_config_dump(c, f, flags);
    fclose(f);
    return buf;
}

static int args(px_config *c, int *test_only, char *err, size_t errlen, int argc, ...) {
    /* argv[0] is the program; argc counts the words after it */
    char *argv[32];
    va_list ap;
    argv[0] = "sidecache";
    va_start(ap, argc);
    for (int i = 1; i <= argc; i++) argv[i] = va_arg(ap, char *);
    va_end(ap);
    argv[argc + 1] = NULL;
    return px_config_from_args(c, argc + 1, argv, test_only, err, errlen);
}

/* ------------------------------------------------------------------------ */
/* Defaults and the shipped file.                                           */

static void test_defaults(void) {
    px_config c;
    char err[256] = "";
    px_config_init(&c);
    CHECK_STR(c.upstream, "redis://127.0.0.1:6379");
    CHECK_EQ_INT(c.up.is_unix, 0);
    CHECK_STR(c.up.host, "127.0.0.1");
    CHECK_EQ_INT(c.up.port, 6379);
    CHECK_EQ_INT(c.up.db, 0);
    CHECK_EQ_INT(c.up.has_user, 0);
    CHECK_EQ_INT(c.up.has_pass, 0);
    CHECK_EQ_INT(c.nbind, 1);
    CHECK_STR(c.bind[0], "127.0.0.1");
    CHECK(c.bind[1] == NULL);
    CHECK_EQ_INT(c.port, 6380);
    CHECK_STR(c.unixsocket, "");
    CHECK_EQ_INT(c.unixsocketperm, 0);
    CHECK_EQ_INT(c.maxclients, 10000);
    CHECK_EQ_INT(c.timeout, 0);
    CHECK_EQ_INT(c.tcp_keepalive, 300);
    CHECK_EQ_INT(c.tcp_nodelay, 1);
    CHECK_EQ_INT(c.upstream_connections, 2);
    CHECK_EQ_INT(c.upstream_connect_timeout, 2000);
    CHECK_EQ_INT(c.loglevel, PX_LOG_NOTICE);
    CHECK_STR(c.logfile, "");
    CHECK_EQ_INT(c.proto_max_bulk_len, 512LL * 1024 * 1024);
    CHECK_EQ_INT(c.max_multibulk_len, 2147483647);
    CHECK_EQ_INT(c.client_query_buffer_limit, 1024LL * 1024 * 1024);
    CHECK_EQ_INT(c.client_output_buffer_limit, 256LL * 1024 * 1024);
    CHECK_EQ_INT(px_config_check(&c, err, sizeof(err)), 0);
    px_config_deinit(&c);
    px_config_deinit(&c); /* twice is harmless */
}

static void test_shipped_conf_loads_and_documents_defaults(void) {
    px_config c, d;
    char err[512] = "";
    char *text, *defaults, *line, *save = NULL;
    FILE *f;
    long n;

    px_config_init(&c);
    REQUIRE(px_config_load_file(&c, "conf/sidecache.conf", err, sizeof(err)) == 0);
    CHECK_STR(err, "");
    px_config_init(&d);
    text = dump_str(&c, PX_FMT_SECRETS);
    defaults = dump_str(&d, PX_FMT_SECRETS);
    REQUIRE(text && defaults);
    CHECK_STR(text, defaults); /* the file sets exactly the defaults */
    free(text);

    /* Every directive appears in the file, uncommented, with its default. */
    f = fopen("conf/sidecache.conf", "r");
    REQUIRE(f != NULL);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    text = calloc(1, (size_t)n + 2);
    text[0] = '\n';
    REQUIRE(fread(text + 1, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    for (line = strtok_r(defaults, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char want[1200];
        snprintf(want, sizeof(want), "\n%s\n", line);
        if (strstr(text, want) == NULL) {
            fprintf(stderr, "FAIL %s: conf/sidecache.conf lacks the line \"%s\"\n",
                    unit_cur_name, line);
            unit_cur_failed = 1;
        }
    }
    free(text);
    free(defaults);
    px_config_deinit(&c);
    px_config_deinit(&d);
}

/* ------------------------------------------------------------------------ */
/* Types.                                                                   */

static void test_int_bounds(void) {
    px_config c;
    char err[256];
    px_config_init(&c);
    CHECK_EQ_INT(set1(&c, "port", "0", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.port, 0);
    CHECK_EQ_INT(set1(&c, "port", "65535", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.port, 65535);
    CHECK_EQ_INT(set1(&c, "port", "65536", err, sizeof(err)), -1);
    CHECK_STR(err, "port must be between 0 and 65535 (got '65536')");
    CHECK_EQ_INT(c.port, 65535); /* unchanged */
    CHECK_EQ_INT(set1(&c, "port", "-1", err, sizeof(err)), -1);
    CHECK_STR(err, "port must be between 0 and 65535 (got '-1')");
    CHECK_EQ_INT(set1(&c, "port", "abc", err, sizeof(err)), -1);
    CHECK_STR(err, "port must be an integer between 0 and 65535 (got 'abc')");
    CHECK_EQ_INT(set1(&c, "port", "", err, sizeof(err)), -1);
    CHECK_EQ_INT(set1(&c, "port", "80x", err, sizeof(err)), -1);
    CHECK_EQ_INT(set1(&c, "port", " 80", err, sizeof(err)), -1);
    CHECK_EQ_INT(set1(&c, "port", "1k", err, sizeof(err)), -1); /* no units on a port */
    CHECK_EQ_INT(set1(&c, "port", "99999999999999999999999", err, sizeof(err)), -1);
    CHECK_STR(err, "port must be between 0 and 65535 (got '99999999999999999999999')");
    CHECK_EQ_INT(c.port, 65535);

    CHECK_EQ_INT(set1(&c, "maxclients", "0", err, sizeof(err)), -1);
    CHECK_HAS(err, "maxclients must be between 1 and 1000000");
    CHECK_EQ_INT(set1(&c, "maxclients", "1000000", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.maxclients, 1000000);
    CHECK_EQ_INT(set1(&c, "maxclients", "1000001", err, sizeof(err)), -1);
    CHECK_EQ_INT(set1(&c, "upstream-connections", "256", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.upstream_connections, 256);
    CHECK_EQ_INT(set1(&c, "upstream-connections", "257", err, sizeof(err)), -1);
    CHECK_HAS(err, "upstream-connections must be between 1 and 256");
    CHECK_EQ_INT(set1(&c, "upstream-connections", "0", err, sizeof(err)), -1);
    CHECK_EQ_INT(set1(&c, "upstream-connect-timeout", "0", err, sizeof(err)), 0); /* no deadline */
    CHECK_EQ_INT(c.upstream_connect_timeout, 0);
    CHECK_EQ_INT(set1(&c, "upstream-connect-timeout", "3600000", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.upstream_connect_timeout, 3600000);
    CHECK_EQ_INT(set1(&c, "upstream-connect-timeout", "-1", err, sizeof(err)), -1);
    CHECK_HAS(err, "upstream-connect-timeout must be between 0 and 3600000");
    CHECK_EQ_INT(set1(&c, "timeout", "2147483647", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.timeout, INT_MAX);
    CHECK_EQ_INT(set1(&c, "timeout", "2147483648", err, sizeof(err)), -1);
    CHECK_EQ_INT(c.timeout, INT_MAX);
    CHECK_EQ_INT(set1(&c, "tcp-keepalive", "0", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.tcp_keepalive, 0);
    CHECK_EQ_INT(set1(&c, "max-multibulk-len", "1", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.max_multibulk_len, 1);
    CHECK_EQ_INT(set1(&c, "max-multibulk-len", "0", err, sizeof(err)), -1);
    CHECK_EQ_INT(set1(&c, "max-multibulk-len", "2147483648", err, sizeof(err)), -1);
    CHECK_EQ_INT(set1(&c, "max-multibulk-len", "1k", err, sizeof(err)), -1); /* a count */
    CHECK_EQ_INT(c.max_multibulk_len, 1);
    /* names are case-insensitive */
    CHECK_EQ_INT(set1(&c, "PORT", "7000", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.port, 7000);
    CHECK_EQ_INT(set1(&c, "Tcp-KeepAlive", "60", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.tcp_keepalive, 60);
    px_config_deinit(&c);
}

static void test_memory_suffixes(void) {
    static const struct { const char *in; long long want; } ok[] = {
        {"0", 0}, {"100", 100}, {"5b", 5}, {"5B", 5},
        {"1k", 1000}, {"1kb", 1024}, {"1K", 1000}, {"1KB", 1024}, {"3kB", 3072},
        {"1m", 1000000}, {"1mb", 1048576}, {"2MB", 2097152},
        {"1g", 1000000000}, {"1gb", 1073741824}, {"4GB", 4294967296LL},
        {"9223372036854775807", 9223372036854775807LL},
    };
    static const char *const bad[] = {
        "", "kb", "1.5gb", "-1", "-1mb", "1kbb", "1 kb", "1t", "1tb", "0x10", "+1",
        "9223372036854775808", "9999999999gb", "99999999999999999999999999999",
    };
    px_config c;
    char err[512];
    px_config_init(&c);
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        c.client_output_buffer_limit = -7;
        if (set1(&c, "client-output-buffer-limit", ok[i].in, err, sizeof(err)) != 0) {
            fprintf(stderr, "FAIL %s: '%s' refused: %s\n", unit_cur_name, ok[i].in, err);
            unit_cur_failed = 1;
        }
        CHECK_EQ_INT(c.client_output_buffer_limit, ok[i].want);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        c.client_output_buffer_limit = 77;
        err[0] = '\0';
        if (set1(&c, "client-output-buffer-limit", bad[i], err, sizeof(err)) != -1) {
            fprintf(stderr, "FAIL %s: '%s' accepted\n", unit_cur_name, bad[i]);
            unit_cur_failed = 1;
        }
        CHECK_HAS(err, "client-output-buffer-limit must be");
        CHECK_EQ_INT(c.client_output_buffer_limit, 77);
    }
    CHECK_EQ_INT(set1(&c, "client-output-buffer-limit", "1.5gb", err, sizeof(err)), -1);
    CHECK_STR(err, "client-output-buffer-limit must be a size in bytes between 0 and "
                   "9223372036854775807, with an optional k, kb, m, mb, g or gb suffix "
                   "(got '1.5gb')");

    /* the minimum of 1mb */
    CHECK_EQ_INT(set1(&c, "proto-max-bulk-len", "1mb", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.proto_max_bulk_len, 1048576);
    CHECK_EQ_INT(set1(&c, "proto-max-bulk-len", "1048575", err, sizeof(err)), -1);
    CHECK_STR(err, "proto-max-bulk-len must be between 1mb and 9223372036854775807 "
                   "(got '1048575')");
    CHECK_EQ_INT(set1(&c, "proto-max-bulk-len", "1000k", err, sizeof(err)), -1);
    CHECK_EQ_INT(set1(&c, "proto-max-bulk-len", "1m", err, sizeof(err)), -1); /* 10^6 < 1mb */
    CHECK_EQ_INT(set1(&c, "proto-max-bulk-len", "2gb", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.proto_max_bulk_len, 2LL << 30);
    CHECK_EQ_INT(set1(&c, "client-query-buffer-limit", "1023kb", err, sizeof(err)), -1);
    CHECK_EQ_INT(set1(&c, "client-query-buffer-limit", "1024kb", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.client_query_buffer_limit, 1048576);
    px_config_deinit(&c);
}

static void test_bool(void) {
    px_config c;
    char err[256];
    px_config_init(&c);
    CHECK_EQ_INT(set1(&c, "tcp-nodelay", "no", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.tcp_nodelay, 0);
    CHECK_EQ_INT(set1(&c, "tcp-nodelay", "YES", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.tcp_nodelay, 1);
    CHECK_EQ_INT(set1(&c, "tcp-nodelay", "No", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.tcp_nodelay, 0);
    CHECK_EQ_INT(set1(&c, "tcp-nodelay", "true", err, sizeof(err)), -1);
    CHECK_STR(err, "tcp-nodelay must be yes or no (got 'true')");
    CHECK_EQ_INT(set1(&c, "tcp-nodelay", "1", err, sizeof(err)), -1);
    CHECK_EQ_INT(set1(&c, "tcp-nodelay", "", err, sizeof(err)), -1);
    CHECK_EQ_INT(c.tcp_nodelay, 0);
    px_config_deinit(&c);
}

static void test_enum(void) {
    static const struct { const char *in; int want; } ok[] = {
        {"debug", PX_LOG_DEBUG}, {"verbose", PX_LOG_VERBOSE}, {"notice", PX_LOG_NOTICE},
        {"warning", PX_LOG_WARNING}, {"WARNING", PX_LOG_WARNING}, {"Debug", PX_LOG_DEBUG},
    };
    px_config c;
    char err[256];
    px_config_init(&c);
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        CHECK_EQ_INT(set1(&c, "loglevel", ok[i].in, err, sizeof(err)), 0);
        CHECK_EQ_INT(c.loglevel, ok[i].want);
    }
    CHECK_EQ_INT(set1(&c, "loglevel", "info", err, sizeof(err)), -1);
    CHECK_STR(err, "loglevel must be one of debug, verbose, notice, warning (got 'info')");
    CHECK_EQ_INT(set1(&c, "loglevel", "warn", err, sizeof(err)), -1);
    CHECK_EQ_INT(c.loglevel, PX_LOG_DEBUG);
    px_config_deinit(&c);
}

static void test_string(void) {
    px_config c;
    char err[256], path[200];
    px_config_init(&c);
    CHECK_EQ_INT(set1(&c, "unixsocket", "/run/sidecache.sock", err, sizeof(err)), 0);
    CHECK_STR(c.unixsocket, "/run/sidecache.sock");
    memset(path, 'a', sizeof(path));
    path[0] = '/';
    path[107] = '\0'; /* 107 bytes: the longest sun_path */
    CHECK_EQ_INT(set1(&c, "unixsocket", path, err, sizeof(err)), 0);
    CHECK_STR(c.unixsocket, path);
    path[107] = 'a';
    path[108] = '\0';
    CHECK_EQ_INT(set1(&c, "unixsocket", path, err, sizeof(err)), -1);
    CHECK_STR(err, "unixsocket is too long (108 bytes, at most 107)");
    path[107] = '\0';
    CHECK_STR(c.unixsocket, path); /* unchanged */
    CHECK_EQ_INT(set1(&c, "unixsocket", "", err, sizeof(err)), 0);
    CHECK_STR(c.unixsocket, "");
    CHECK_EQ_INT(set1(&c, "logfile", "/var/log/sidecache.log", err, sizeof(err)), 0);
    CHECK_STR(c.logfile, "/var/log/sidecache.log");
    CHECK_EQ_INT(set1(&c, "logfile", "", err, sizeof(err)), 0);
    CHECK_STR(c.logfile, "");
    px_config_deinit(&c);
}

/* cache-track-prefix: repeatable, one word, not empty (empty would be every
 * key, which the rules alone decide) */
static void test_cache_track_prefix(void) {
    px_config c;
    char err[256];
    px_config_init(&c);
    CHECK_EQ_INT(c.ntrack_prefixes, 0);
    CHECK_EQ_INT(set1(&c, "cache-track-prefix", "user:", err, sizeof(err)), 0);
    CHECK_EQ_INT(set1(&c, "cache-track-prefix", "d", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.ntrack_prefixes, 2);
    CHECK_STR(c.track_prefixes[0], "user:");
    CHECK_STR(c.track_prefixes[1], "d");
    CHECK_EQ_INT(set1(&c, "cache-track-prefix", "", err, sizeof(err)), -1);
    CHECK_STR(err, "cache-track-prefix: the prefix must be one word, not empty");
    CHECK_EQ_INT(set1(&c, "cache-track-prefix", "a b", err, sizeof(err)), -1);
    CHECK_EQ_INT(c.ntrack_prefixes, 2);
    px_config_deinit(&c);
}

static void test_octal(void) {
    static const struct { const char *in; int want; } ok[] = {
        {"0", 0}, {"700", 0700}, {"0700", 0700}, {"0777", 0777}, {"777", 0777},
        {"660", 0660}, {"00000755", 0755},
    };
    static const char *const bad[] = {"", "800", "1000", "7a", "-1", "0o700", "07777"};
    px_config c;
    char err[256];
    px_config_init(&c);
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        CHECK_EQ_INT(set1(&c, "unixsocketperm", ok[i].in, err, sizeof(err)), 0);
        CHECK_EQ_INT(c.unixsocketperm, ok[i].want);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        c.unixsocketperm = 0640;
        CHECK_EQ_INT(set1(&c, "unixsocketperm", bad[i], err, sizeof(err)), -1);
        CHECK_EQ_INT(c.unixsocketperm, 0640);
    }
    CHECK_EQ_INT(set1(&c, "unixsocketperm", "800", err, sizeof(err)), -1);
    CHECK_STR(err, "unixsocketperm must be an octal mode between 0 and 777 (got '800')");
    px_config_deinit(&c);
}

static void test_argument_counts_and_unknown(void) {
    px_config c;
    char err[256];
    char *two[] = {"1", "2"};
    char *many[17];
    char addrs[17][24];
    px_config_init(&c);
    CHECK_EQ_INT(px_config_set(&c, "port", 0, NULL, err, sizeof(err)), -1);
    CHECK_STR(err, "port takes 1 argument (got 0)");
    CHECK_EQ_INT(px_config_set(&c, "port", 2, two, err, sizeof(err)), -1);
    CHECK_STR(err, "port takes 1 argument (got 2)");
    CHECK_EQ_INT(px_config_set(&c, "bind", 0, NULL, err, sizeof(err)), -1);
    CHECK_STR(err, "bind takes 1 to 16 arguments (got 0)");
    for (int i = 0; i < 17; i++) {
        snprintf(addrs[i], sizeof(addrs[i]), "127.0.0.%d", i + 1);
        many[i] = addrs[i];
    }
    CHECK_EQ_INT(px_config_set(&c, "bind", 17, many, err, sizeof(err)), -1);
    CHECK_STR(err, "bind takes 1 to 16 arguments (got 17)");
    CHECK_EQ_INT(px_config_set(&c, "bind", 16, many, err, sizeof(err)), 0);
    CHECK_EQ_INT(c.nbind, 16);
    CHECK_STR(c.bind[15], "127.0.0.16");
    CHECK_EQ_INT(set1(&c, "prot", "1", err, sizeof(err)), -1);
    CHECK_STR(err, "unknown directive 'prot'");
    CHECK_EQ_INT(set1(&c, "test-config", "1", err, sizeof(err)), -1); /* not a directive */
    CHECK_EQ_INT(set1(&c, "", "1", err, sizeof(err)), -1);
    /* a NULL or empty err buffer is allowed */
    CHECK_EQ_INT(set1(&c, "port", "x", NULL, 0), -1);
    CHECK_EQ_INT(set1(&c, "port", "x", err, 0), -1);
    px_config_deinit(&c);
}

static void test_bind_list(void) {
    px_config c;
    char err[256];
    char *v4v6[] = {"127.0.0.1", "::1", "10.1.2.3"};
    char *one[] = {"0.0.0.0"};
    char *badlist[] = {"127.0.0.1", "localhost"};
    char *bad6[] = {"[::1]"};
    px_config_init(&c);
    CHECK_EQ_INT(px_config_set(&c, "bind", 3, v4v6, err, sizeof(err)), 0);
    CHECK_EQ_INT(c.nbind, 3);
    CHECK_STR(c.bind[0], "127.0.0.1");
    CHECK_STR(c.bind[1], "::1");
    CHECK_STR(c.bind[2], "10.1.2.3");
    CHECK(c.bind[3] == NULL);
    /* a later bind replaces the whole list */
    CHECK_EQ_INT(px_config_set(&c, "bind", 1, one, err, sizeof(err)), 0);
    CHECK_EQ_INT(c.nbind, 1);
    CHECK_STR(c.bind[0], "0.0.0.0");
    CHECK(c.bind[1] == NULL && c.bind[2] == NULL);
    /* a bad address refuses the line and keeps the old list */
    CHECK_EQ_INT(px_config_set(&c, "bind", 2, badlist, err, sizeof(err)), -1);
    CHECK_STR(err, "bind: 'localhost' is not an IPv4 or IPv6 address (or *)");
    CHECK_EQ_INT(px_config_set(&c, "bind", 1, bad6, err, sizeof(err)), -1);
    CHECK_EQ_INT(c.nbind, 1);
    CHECK_STR(c.bind[0], "0.0.0.0");
    /* "*" is any address, as in redis.conf */
    CHECK_EQ_INT(set1(&c, "bind", "*", err, sizeof(err)), 0);
    CHECK_STR(c.bind[0], "*");
    CHECK_EQ_INT(set1(&c, "bind", "**", err, sizeof(err)), -1);
    CHECK_EQ_INT(set1(&c, "bind", "", err, sizeof(err)), -1);
    CHECK_STR(c.bind[0], "*");
    px_config_deinit(&c); /* ASan checks nothing leaks */

    /* from a file: several addresses on one line, the last line wins */
    CHECK_EQ_INT(load_str(&c, "bind 10.0.0.1 10.0.0.2\nbind 127.0.0.1 ::1\n", err,
                          sizeof(err), NULL), 0);
    CHECK_EQ_INT(c.nbind, 2);
    CHECK_STR(c.bind[0], "127.0.0.1");
    CHECK_STR(c.bind[1], "::1");
    px_config_deinit(&c);
}

/* ------------------------------------------------------------------------ */
/* Files.                                                                   */

static void test_file_syntax(void) {
    px_config c;
    char err[512] = "";
    const char *text =
        "# a comment\n"
        "\n"
        "   # an indented comment\n"
        "\t\n"
        "PORT 7001\n"                          /* case-insensitive name */
        "  loglevel\t  debug   \n"             /* blanks around words */
        "tcp-keepalive 10\r\n"                 /* CRLF */
        "logfile \"/tmp/my log.txt\"\n"        /* double quotes */
        "unixsocket '/tmp/it\\'s.sock'\n"      /* single quotes, \' */
        "maxclients 5 # not a comment\n";      /* '#' mid-line is a word */
    CHECK_EQ_INT(load_str(&c, text, err, sizeof(err), NULL), -1);
    CHECK_HAS(err, ":10: maxclients takes 1 argument (got 5)");
    CHECK_EQ_INT(c.port, 7001);
    CHECK_EQ_INT(c.loglevel, PX_LOG_DEBUG);
    CHECK_EQ_INT(c.tcp_keepalive, 10);
    CHECK_STR(c.logfile, "/tmp/my log.txt");
    CHECK_STR(c.unixsocket, "/tmp/it's.sock");
    px_config_deinit(&c);

    /* last line without a newline; later lines win */
    CHECK_EQ_INT(load_str(&c, "port 7001\nport 7002", err, sizeof(err), NULL), 0);
    CHECK_EQ_INT(c.port, 7002);
    px_config_deinit(&c);

    /* an empty file and a file of comments are fine */
    CHECK_EQ_INT(load_str(&c, "", err, sizeof(err), NULL), 0);
    CHECK_EQ_INT(c.port, 6380);
    px_config_deinit(&c);
    CHECK_EQ_INT(load_str(&c, "#port 1\n#\n", err, sizeof(err), NULL), 0);
    CHECK_EQ_INT(c.port, 6380);
    px_config_deinit(&c);
}

static void test_quoted_arguments(void) {
    static const struct { const char *line; const char *want; } ok[] = {
        {"logfile \"a b\"", "a b"},
        {"logfile \"\"", ""},
        {"logfile ''", ""},
        {"logfile \"tab\\there\"", "tab\there"},
        {"logfile \"nl\\nret\\r\"", "nl\nret\r"},
        {"logfile \"\\x41\\x62c\"", "Abc"},
        {"logfile \"\\xzz\"", "xzz"},               /* not hex: \x is an 'x' */
        {"logfile \"q\\\"uote\"", "q\"uote"},
        {"logfile \"back\\\\slash\"", "back\\slash"},
        {"logfile 'no \\n escapes'", "no \\n escapes"},
        {"logfile 'it\\'s'", "it's"},
        {"logfile \"a 'b' c\"", "a 'b' c"},
        {"logfile 'a \"b\" c'", "a \"b\" c"},
        {"logfile pre\"fix mid\"", "prefix mid"},   /* a quote inside a word opens */
        {"logfile \"x\"\t", "x"},
        {"\"logfile\" y", "y"},                     /* the name may be quoted too */
    };
    static const struct { const char *line; const char *err; } bad[] = {
        {"logfile \"abc", ":1: logfile: unbalanced quotes"},
        {"logfile 'abc", ":1: logfile: unbalanced quotes"},
        {"logfile \"abc\"def", ":1: logfile: closing quote must be followed by a space"},
        {"logfile 'abc'def", ":1: logfile: closing quote must be followed by a space"},
        {"logfile \"a\\x00b\"", ":1: logfile: arguments cannot contain NUL bytes"},
        {"\"port", ":1: unbalanced quotes"},
    };
    px_config c;
    char err[512], text[256];
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        snprintf(text, sizeof(text), "%s\n", ok[i].line);
        err[0] = '\0';
        if (load_str(&c, text, err, sizeof(err), NULL) != 0) {
            fprintf(stderr, "FAIL %s: [%s]: %s\n", unit_cur_name, ok[i].line, err);
            unit_cur_failed = 1;
        }
        CHECK_STR(c.logfile, ok[i].want);
        px_config_deinit(&c);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *path;
        char want[512];
        snprintf(text, sizeof(text), "%s\n", bad[i].line);
        CHECK_EQ_INT(load_str(&c, text, err, sizeof(err), &path), -1);
        snprintf(want, sizeof(want), "%s%s", path, bad[i].err);
        CHECK_STR(err, want);
        CHECK_STR(c.logfile, "");
        px_config_deinit(&c);
    }
}

static void test_file_errors(void) {
    px_config c;
    char err[512], want[512];
    const char *path;

    CHECK_EQ_INT(load_str(&c, "# sidecache\n\nport 99999\n", err, sizeof(err), &path), -1);
    snprintf(want, sizeof(want), "%s:3: port must be between 0 and 65535 (got '99999')", path);
    CHECK_STR(err, want);
    px_config_deinit(&c);

    CHECK_EQ_INT(load_str(&c, "port 7000\nmaxmemory 1gb\n", err, sizeof(err), &path), -1);
    snprintf(want, sizeof(want), "%s:2: unknown directive 'maxmemory'", path);
    CHECK_STR(err, want);
    CHECK_EQ_INT(c.port, 7000); /* lines before the bad one applied */
    px_config_deinit(&c);

    CHECK_EQ_INT(load_str(&c, "loglevel loud\n", err, sizeof(err), &path), -1);
    snprintf(want, sizeof(want),
             "%s:1: loglevel must be one of debug, verbose, notice, warning (got 'loud')", path);
    CHECK_STR(err, want);
    px_config_deinit(&c);

    CHECK_EQ_INT(load_str(&c, "upstream http://x\n", err, sizeof(err), &path), -1);
    snprintf(want, sizeof(want), "%s:1: upstream: unknown scheme 'http' (use redis://, "
             "rediss:// or unix://)", path);
    CHECK_STR(err, want);
    px_config_deinit(&c);

    /* a NUL byte inside a line */
    {
        const char *p = write_tmp("port 1");
        FILE *f = fopen(p, "w");
        REQUIRE(f != NULL);
        fwrite("port 1\nport\0 2\n", 1, 15, f);
        fclose(f);
        px_config_init(&c);
        CHECK_EQ_INT(px_config_load_file(&c, p, err, sizeof(err)), -1);
        snprintf(want, sizeof(want), "%s:2: line contains a NUL byte", p);
        CHECK_STR(err, want);
        px_config_deinit(&c);
    }

    px_config_init(&c);
    CHECK_EQ_INT(px_config_load_file(&c, "/nonexistent/sidecache.conf", err, sizeof(err)), -1);
    CHECK_STR(err, "/nonexistent/sidecache.conf: No such file or directory");
    CHECK_EQ_INT(px_config_load_file(&c, "conf", err, sizeof(err)), -1);
    CHECK_STR(err, "conf: Is a directory");
    /* the error is truncated to errlen, never overrun */
    {
        char small[8];
        memset(small, 'x', sizeof(small));
        CHECK_EQ_INT(px_config_load_file(&c, "/nonexistent/x", small, sizeof(small)), -1);
        CHECK_STR(small, "/nonexi");
    }
    px_config_deinit(&c);
}

/* A line may not grow without bound (/dev/zero), a byte order mark is no
 * part of the first directive, and a reload (file_regular_only) reads no
 * pipe or FIFO: read again, a pipe gives nothing (every directive back to
 * its default), and a FIFO blocks. */
static void test_file_limits(void) {
    px_config c;
    char err[512], want[600];
    const char *path;

    static char longline[PX_CONFIG_MAX_LINE + 64];
    memset(longline, 'x', sizeof longline - 1);
    memcpy(longline, "port 1\n# ", 9);
    longline[sizeof longline - 2] = '\n';
    longline[sizeof longline - 1] = '\0';
    CHECK_EQ_INT(load_str(&c, longline, err, sizeof(err), &path), -1);
    snprintf(want, sizeof want, "%s:2: line longer than %d bytes", path, PX_CONFIG_MAX_LINE);
    CHECK_STR(err, want);
    px_config_deinit(&c);

    CHECK_EQ_INT(load_str(&c, "\xEF\xBB\xBFport 7001\n", err, sizeof(err), NULL), 0);
    CHECK_EQ_INT(c.port, 7001);
    px_config_deinit(&c);

    px_config_init(&c);
    c.file_regular_only = 1;
    CHECK_EQ_INT(px_config_load_file(&c, "-", err, sizeof(err)), -1);
    CHECK_STR(err, "the configuration was read from standard input (restart to change it)");
    char fifo[256];
    snprintf(fifo, sizeof fifo, "%s/sidecache-test-fifo-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    unlink(fifo);
    REQUIRE(mkfifo(fifo, 0600) == 0);
    CHECK_EQ_INT(px_config_load_file(&c, fifo, err, sizeof(err)), -1); /* (it would block) */
    snprintf(want, sizeof want, "%s is not a regular file (a pipe or FIFO is read once, at start: restart to "
             "change it)", fifo);
    CHECK_STR(err, want);
    unlink(fifo);
    px_config_deinit(&c);
}

/* upstream-sentinel's lines are as long as their entry (1200 bytes), its
 * master name and hosts as the sentinel client takes them. */
static void test_sentinel_bounds(void) {
    px_config c;
    char err[512], list[1300] = "", name[300];
    size_t at = 0;
    for (int i = 0; at < 1100; i++)
        at += (size_t)snprintf(list + at, sizeof list - at, "%ssentinel-%d.sentinel.svc.cluster.local:26379",
                               i ? "," : "", i);
    px_config_init(&c);
    char *argv[2] = {"mymaster", list};
    CHECK_EQ_INT(px_config_set(&c, "upstream-sentinel", 2, argv, err, sizeof err), 0);
    CHECK_EQ_INT((int)strlen(c.sentinel[0]), (int)(strlen("mymaster ") + strlen(list)));
    CHECK_STR(c.sentinel[0] + strlen("mymaster "), list);
    strcat(list, ",sentinel-99.sentinel.svc.cluster.local:26379,sentinel-100.sentinel.svc.cluster.local:26379");
    CHECK_EQ_INT(px_config_set(&c, "upstream-sentinel", 2, argv, err, sizeof err), -1);
    CHECK_STR(err, "upstream-sentinel: too long (at most 1199 bytes)");
    memset(name, 'm', 256);
    name[256] = '\0';
    argv[0] = name;
    argv[1] = "127.0.0.1:26379";
    CHECK_EQ_INT(px_config_set(&c, "upstream-sentinel", 2, argv, err, sizeof err), -1);
    CHECK_STR(err, "upstream-sentinel: the master name is longer than 255 bytes");
    name[255] = '\0';
    CHECK_EQ_INT(px_config_set(&c, "upstream-sentinel", 2, argv, err, sizeof err), 0);
    snprintf(list, sizeof list, "%s:26379", name);
    argv[0] = "mymaster";
    argv[1] = list;
    CHECK_EQ_INT(px_config_set(&c, "upstream-sentinel", 2, argv, err, sizeof err), 0);
    name[255] = 'h';
    snprintf(list, sizeof list, "%s:26379", name);
    CHECK_EQ_INT(px_config_set(&c, "upstream-sentinel", 2, argv, err, sizeof err), -1);
    CHECK_STR(err, "upstream-sentinel: a host is longer than 255 bytes");
    px_config_deinit(&c);
}

/* ------------------------------------------------------------------------ */
/* The command line.                                                        */

static void test_args_precedence(void) {
    px_config c;
    char err[512] = "";
    int t = -1;
    const char *path = write_tmp("port 7000\nloglevel debug\nbind 10.0.0.1\n");

    px_config_init(&c);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 5, path, "--port", "7001", "--bind",
                      "127.0.0.1"), 0);
    CHECK_STR(err, "");
    CHECK_EQ_INT(t, 0);
    CHECK_EQ_INT(c.port, 7001);               /* the command line wins */
    CHECK_EQ_INT(c.loglevel, PX_LOG_DEBUG);   /* the file still applies */
    CHECK_EQ_INT(c.nbind, 1);
    CHECK_STR(c.bind[0], "127.0.0.1");
    px_config_deinit(&c);

    /* several arguments for one directive, several directives, last wins */
    px_config_init(&c);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 9, "--bind", "127.0.0.1", "::1", "--port",
                      "1", "--port", "2", "--LOGLEVEL", "warning"), 0);
    CHECK_EQ_INT(c.nbind, 2);
    CHECK_STR(c.bind[1], "::1");
    CHECK_EQ_INT(c.port, 2);
    CHECK_EQ_INT(c.loglevel, PX_LOG_WARNING);
    px_config_deinit(&c);

    /* no arguments at all: the defaults */
    px_config_init(&c);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 0), 0);
    CHECK_EQ_INT(c.port, 6380);
    px_config_deinit(&c);

    /* an empty string is an argument, and a negative number is not a directive */
    px_config_init(&c);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 4, "--logfile", "", "--unixsocket", "/s"), 0);
    CHECK_STR(c.logfile, "");
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 2, "--timeout", "-5"), -1);
    CHECK_STR(err, "argument '--timeout': timeout must be between 0 and 2147483647 (got '-5')");
    px_config_deinit(&c);

    /* upstream-sentinel is a plain directive: the command line's "" unsets
     * the file's (it took two words, and "" was refused) */
    path = write_tmp("upstream-sentinel mymaster 127.0.0.1:26379\n");
    px_config_init(&c);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 3, path, "--upstream-sentinel", ""), 0);
    CHECK_EQ_INT(c.nsentinel, 0);
    CHECK_STR(c.sentinel[0], "");
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 3, path, "--upstream-sentinel", "mymaster"), -1);
    CHECK_STR(err, "argument '--upstream-sentinel': upstream-sentinel takes 2 arguments (got 1)");
    px_config_deinit(&c);
}

static void test_args_errors(void) {
    px_config c;
    char err[512];
    int t;
    const char *bad = write_tmp("port 1\nport x\n");

    px_config_init(&c);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 2, "--port", "70000"), -1);
    CHECK_STR(err, "argument '--port': port must be between 0 and 65535 (got '70000')");
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 1, "--port"), -1);
    CHECK_STR(err, "argument '--port': port takes 1 argument (got 0)");
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 3, "--port", "1", "2"), -1);
    CHECK_STR(err, "argument '--port': port takes 1 argument (got 2)");
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 2, "--nope", "1"), -1);
    CHECK_STR(err, "argument '--nope': unknown directive 'nope'");
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 2, "conf/sidecache.conf", "b.conf"), -1);
    CHECK_STR(err, "unexpected argument 'b.conf' (the config file comes first; directives "
                   "start with --)");
    px_config_deinit(&c);

    px_config_init(&c);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 1, "/nonexistent.conf"), -1);
    CHECK_STR(err, "/nonexistent.conf: No such file or directory");
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 3, "conf/sidecache.conf", "extra", "--port"),
                 -1);
    CHECK_STR(err, "unexpected argument 'extra' (the config file comes first; directives "
                   "start with --)");
    /* a word that does not start with "--" is an argument of the directive before it */
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 3, "--port", "1", "-x"), -1);
    CHECK_STR(err, "argument '--port': port takes 1 argument (got 2)");
    px_config_deinit(&c);

    px_config_init(&c);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 1, "-x"), -1);
    CHECK_STR(err, "unknown option '-x'");
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 1, "--"), -1);
    CHECK_STR(err, "unknown option '--'");
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 3, "--port", "1", "--"), -1);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 2, "--test-config", "-x"), -1);
    CHECK_STR(err, "argument '--test-config': unknown option '-x' (only a config file and -v)");
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 3, "--test-config", "a", "b"), -1);
    CHECK_STR(err, "argument '--test-config': unexpected argument 'b' (a config file was "
              "already given)");
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 3, "a", "--test-config", "b"), -1);
    CHECK_STR(err, "argument '--test-config': unexpected argument 'b' (a config file was "
              "already given)");
    {
        char want[512];
        CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 3, bad, "--port", "5"), -1);
        snprintf(want, sizeof(want), "%s:2: port must be an integer between 0 and 65535 "
                 "(got 'x')", bad);
        CHECK_STR(err, want); /* the file's own error, with file:line */
    }
    /* the whole-config check runs last */
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 2, "--port", "0"), -1);
    CHECK_STR(err, "no listener: port is 0 and unixsocket is not set");
    px_config_deinit(&c);
}

static void test_args_flags(void) {
    px_config c;
    char err[512];
    int t = -1;
    const char *path = write_tmp("port 7100\n");

    px_config_init(&c);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 1, "--test-config"), 0);
    CHECK_EQ_INT(t, 1);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 4, path, "--test-config", "--port", "7101"), 0);
    CHECK_EQ_INT(t, 1);
    CHECK_EQ_INT(c.port, 7101);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 3, path, "--test-config", "-v"), 0);
    CHECK_EQ_INT(t, 2);
    CHECK_EQ_INT(args(&c, NULL, err, sizeof(err), 1, "--test-config"), 0); /* NULL is fine */
    px_config_deinit(&c);

    /* README's form: the file after --test-config, loaded before the directives
     * wherever they stand; -v anywhere beside --test-config means the dump */
    px_config_init(&c);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 2, "--test-config", path), 0);
    CHECK_EQ_INT(t, 1);
    CHECK_EQ_INT(c.port, 7100);
    px_config_deinit(&c);
    px_config_init(&c);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 5, "--port", "7102", "--test-config", "-v", path),
                 0);
    CHECK_EQ_INT(t, 2);
    CHECK_EQ_INT(c.port, 7102);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 2, "-v", "--test-config"), 0);
    CHECK_EQ_INT(t, 2);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 3, path, "-v", "--test-config"), 0);
    CHECK_EQ_INT(t, 2);
    /* -v anywhere: not the argument of the directive before it */
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 4, "--test-config", "--port", "7103", "-v"), 0);
    CHECK_EQ_INT(t, 2);
    CHECK_EQ_INT(c.port, 7103);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 2, "--test-config", "/nonexistent"), -1);
    CHECK_HAS(err, "/nonexistent");
    px_config_deinit(&c);

    /* help and version: before anything else, even a bad file or directive */
    px_config_init(&c);
    strcpy(err, "junk");
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 1, "--help"), PX_ARGS_HELP);
    CHECK_STR(err, "");
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 1, "-h"), PX_ARGS_HELP);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 3, "/nonexistent", "--port", "-h"),
                 PX_ARGS_HELP);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 1, "--version"), PX_ARGS_VERSION);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 1, "-v"), PX_ARGS_VERSION);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 3, "--port", "99999", "--version"),
                 PX_ARGS_VERSION);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 2, path, "-v"), PX_ARGS_VERSION);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 2, "--version", "--test-config"),
                 PX_ARGS_VERSION);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 2, "--version", "--help"), PX_ARGS_HELP);
    CHECK_EQ_INT(c.port, 6380); /* nothing applied */
    px_config_deinit(&c);
}

static void test_args_stdin(void) {
    px_config c;
    char err[512];
    int t;
    const char *path = write_tmp("port 7200\nlogfile \"from stdin\"\n");
    REQUIRE(freopen(path, "r", stdin) != NULL);
    px_config_init(&c);
    CHECK_EQ_INT(args(&c, &t, err, sizeof(err), 3, "-", "--loglevel", "verbose"), 0);
    CHECK_EQ_INT(c.port, 7200);
    CHECK_STR(c.logfile, "from stdin");
    CHECK_EQ_INT(c.loglevel, PX_LOG_VERBOSE);
    px_config_deinit(&c);
    REQUIRE(freopen("/dev/null", "r", stdin) != NULL);
}

/* ------------------------------------------------------------------------ */
/* Whole-config checks.                                                     */

static void test_check(void) {
    static const struct { const char *lines; const char *err; } cases[] = {
        {"", NULL},
        {"port 0\n", "no listener: port is 0 and unixsocket is not set"},
        {"port 0\nunixsocket /tmp/s.sock\n", NULL},
        {"unixsocket /tmp/s.sock\nupstream unix:///tmp/s.sock\n",
         "upstream is the proxy's own unixsocket '/tmp/s.sock'"},
        {"unixsocket /tmp/s.sock\nupstream unix:///tmp/r.sock\n", NULL},
        {"upstream redis://127.0.0.1:6380\n",
         "upstream 127.0.0.1:6380 is the proxy's own listener (bind 127.0.0.1, port 6380)"},
        {"upstream redis://localhost:6380\n",
         "upstream localhost:6380 is the proxy's own listener (bind 127.0.0.1, port 6380)"},
        {"bind 0.0.0.0\nupstream redis://127.0.0.5:6380\n",
         "upstream 127.0.0.5:6380 is the proxy's own listener (bind 0.0.0.0, port 6380)"},
        {"bind ::\nupstream redis://[::1]:6380\n",
         "upstream ::1:6380 is the proxy's own listener (bind ::, port 6380)"},
        {"bind *\nupstream redis://localhost:6380\n",
         "upstream localhost:6380 is the proxy's own listener (bind *, port 6380)"},
        {"bind 127.0.0.2\nupstream redis://127.0.0.1:6380\n", NULL},
        {"upstream redis://127.0.0.1:6380\nport 6381\n", NULL},
        {"upstream redis://127.0.0.1:6380\nport 0\nunixsocket /tmp/x\n", NULL},
        {"upstream redis://redis.internal:6380\n", NULL},
        {"upstream-sentinel mymaster 127.0.0.1:26379\ntracking-upstream redis://127.0.0.1:6379\n",
         "tracking-upstream cannot be used with upstream-sentinel: after a failover the invalidations would come "
         "from the old master"},
        {"upstream-sentinel mymaster 127.0.0.1:26379\n", NULL},
        {"key-prefix {1}\n", NULL},
        {"key-prefix jfs:{vol-1}:\n", NULL},
        {"key-prefix x[\n", "key-prefix: a glob character or control byte (\\x5b) is not allowed: the prefix is "
         "put before the rules' glob patterns"},
        {"key-prefix {*}\n", "key-prefix: a glob character or control byte (\\x2a) is not allowed: the prefix is "
         "put before the rules' glob patterns"},
        {"key-prefix \"x\\\\\"\n", "key-prefix: a glob character or control byte (\\x5c) is not allowed: the "
         "prefix is put before the rules' glob patterns"},
        {"key-prefix \"a\\nb\"\n", "key-prefix: a glob character or control byte (\\x0a) is not allowed: the "
         "prefix is put before the rules' glob patterns"},
        {"tracking-upstream redis://127.0.0.1:6379\n", NULL},
        {"tracking-upstream redis://bob:pw@127.0.0.1:6379\n",
         "tracking-upstream takes an address only (host:port or a unix path): the invalidation connection logs in "
         "with the upstream's user and password"},
        {"tracking-upstream redis://127.0.0.1:6379/3\n",
         "tracking-upstream takes an address only (host:port or a unix path): the invalidation connection logs in "
         "with the upstream's user and password"},
        {"metrics-port 9100\nmetrics-bind abc\n", "metrics-bind: 'abc' is not an IPv4 or IPv6 address (or *, or localhost)"},
        {"metrics-port 9100\nmetrics-bind localhost\n", NULL},
        {"metrics-port 6380\nmetrics-bind 127.0.0.2\n", NULL},
        {"metrics-port 6380\nmetrics-bind 127.0.0.2\nbind *\n", "metrics-port 6380 is also port, on the same address"},
        {"metrics-port 0\nmetrics-bind abc\n", NULL},
        {"metrics-port 9100\nmetrics-bind ::1\n", NULL},
        {"metrics-port 6380\n", "metrics-port 6380 is also port, on the same address"},
        {"metrics-port 6390\ntls-port 6390\n", "metrics-port 6390 is also tls-port, on the same address"},
        {"bind 127.0.0.1 ::1 127.0.0.1\n", "bind: '127.0.0.1' is given twice"},
        {"bind * ::\n", "bind: '*' takes the port on '::' too"},
        {"bind 127.0.0.1 0.0.0.0\n", "bind: '0.0.0.0' takes the port on '127.0.0.1' too"},
        {"bind :: ::1\n", "bind: '::' takes the port on '::1' too"},
        {"bind 0.0.0.0 ::1\n", NULL},
        {"bind 0.0.0.0 ::\n", "bind: '::' takes the port on '0.0.0.0' too"},
        {"bind :: 127.0.0.1\n", "bind: '::' takes the port on '127.0.0.1' too"},
        {"bind 127.0.0.1 ::1\n", NULL},
    };
    px_config c;
    char err[512];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        err[0] = '\0';
        REQUIRE(load_str(&c, cases[i].lines, err, sizeof(err), NULL) == 0);
        int rc = px_config_check(&c, err, sizeof(err));
        if (cases[i].err == NULL) {
            if (rc != 0) {
                fprintf(stderr, "FAIL %s: case %zu refused: %s\n", unit_cur_name, i, err);
                unit_cur_failed = 1;
            }
        } else {
            CHECK_EQ_INT(rc, -1);
            CHECK_STR(err, cases[i].err);
        }
        px_config_deinit(&c);
    }
}

/* ------------------------------------------------------------------------ */
/* Upstream URLs.                                                           */

typedef struct url_case {
    const char *url;
    int is_unix;
    const char *host; /* or the unix path */
    int port;
    const char *user;
    const char *pass;
    int has_user, has_pass, db;
} url_case;

static void test_upstream_good(void) {
    static const url_case cases[] = {
        {"redis://127.0.0.1:6379", 0, "127.0.0.1", 6379, "", "", 0, 0, 0},
        {"redis://localhost", 0, "localhost", 6379, "", "", 0, 0, 0},
        {"REDIS://Redis.Example.com:7000/", 0, "Redis.Example.com", 7000, "", "", 0, 0, 0},
        {"redis://host:1/15", 0, "host", 1, "", "", 0, 0, 15},
        {"redis://host:65535/0", 0, "host", 65535, "", "", 0, 0, 0},
        {"redis://host/3", 0, "host", 6379, "", "", 0, 0, 3},
        {"redis://host/2147483647", 0, "host", 6379, "", "", 0, 0, 2147483647},
        {"redis://my_host-1.x", 0, "my_host-1.x", 6379, "", "", 0, 0, 0},
        {"redis://user:pass@host:6380/2", 0, "host", 6380, "user", "pass", 1, 1, 2},
        {"redis://:secret@host", 0, "host", 6379, "", "secret", 0, 1, 0},
        {"redis://alice@host", 0, "host", 6379, "alice", "", 1, 0, 0},
        {"redis://alice:@host", 0, "host", 6379, "alice", "", 1, 1, 0},
        {"redis://@host", 0, "host", 6379, "", "", 0, 0, 0},
        {"redis://u%40x:p%3Aa%2Fs%25s%20w@host", 0, "host", 6379, "u@x", "p:a/s%s w", 1, 1, 0},
        {"redis://us%C3%A9r:%e2%82%ac@h", 0, "h", 6379, "us\xc3\xa9r", "\xe2\x82\xac", 1, 1, 0},
        {"redis://u:p@ss@host", 0, "host", 6379, "u", "p@ss", 1, 1, 0}, /* last '@' */
        {"redis://u:a:b@host", 0, "host", 6379, "u", "a:b", 1, 1, 0},   /* first ':' */
        {"redis://[::1]:6379", 0, "::1", 6379, "", "", 0, 0, 0},
        {"redis://[::1]", 0, "::1", 6379, "", "", 0, 0, 0},
        {"redis://[2001:db8::7]:7000/4", 0, "2001:db8::7", 7000, "", "", 0, 0, 4},
        {"redis://u:p@[fe80::1]:1", 0, "fe80::1", 1, "u", "p", 1, 1, 0},
        {"unix:///run/redis/redis.sock", 1, "/run/redis/redis.sock", 6379, "", "", 0, 0, 0},
        {"unix:///tmp/r.sock?db=3", 1, "/tmp/r.sock", 6379, "", "", 0, 0, 3},
        {"UNIX:///tmp/r.sock?db=1&db=2", 1, "/tmp/r.sock", 6379, "", "", 0, 0, 2},
        {"unix:///tmp/r.sock?", 1, "/tmp/r.sock", 6379, "", "", 0, 0, 0},
        {"unix:/tmp/r.sock", 1, "/tmp/r.sock", 6379, "", "", 0, 0, 0},
        {"unix:/tmp/r.sock?db=9", 1, "/tmp/r.sock", 6379, "", "", 0, 0, 9},
        {"unix:///tmp/with%20space.sock", 1, "/tmp/with space.sock", 6379, "", "", 0, 0, 0},
        {"unix://u:p%40@/tmp/r.sock?db=1", 1, "/tmp/r.sock", 6379, "u", "p@", 1, 1, 1},
        {"unix://:pw@/tmp/r.sock", 1, "/tmp/r.sock", 6379, "", "pw", 0, 1, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const url_case *k = &cases[i];
        px_upstream_addr a;
        char err[256] = "";
        if (px_upstream_parse(k->url, &a, err, sizeof(err)) != 0) {
            fprintf(stderr, "FAIL %s: %s refused: %s\n", unit_cur_name, k->url, err);
            unit_cur_failed = 1;
            continue;
        }
        CHECK_EQ_INT(a.is_unix, k->is_unix);
        CHECK_STR(k->is_unix ? a.path : a.host, k->host);
        CHECK_STR(k->is_unix ? a.host : a.path, "");
        CHECK_EQ_INT(a.port, k->port);
        CHECK_STR(a.user, k->user);
        CHECK_STR(a.pass, k->pass);
        CHECK_EQ_INT(a.has_user, k->has_user);
        CHECK_EQ_INT(a.has_pass, k->has_pass);
        CHECK_EQ_INT(a.db, k->db);
        if (unit_cur_failed) {
            fprintf(stderr, "  ... in case %s\n", k->url);
            return;
        }
    }
}

static void test_upstream_bad(void) {
    static const struct { const char *url; const char *err; } cases[] = {
        {"", "upstream: empty URL (use redis://host:port, rediss://host:port or unix:///path)"},
        {"http://host", "upstream: unknown scheme 'http' (use redis://, rediss:// or unix://)"},
        {"rediss:host", "upstream: expected '//' after 'rediss:' (rediss://host:port)"},
        {"redis:host", "upstream: expected '//' after 'redis:' (redis://host:port)"},
        {"localhost:6379", "upstream: 'localhost:6379' has no scheme (did you mean "
                           "redis://localhost:6379?)"},
        {"127.0.0.1:6379", "upstream: '127.0.0.1:6379' has no scheme (did you mean "
                           "redis://127.0.0.1:6379?)"},
        {"/tmp/redis.sock", "upstream: '/tmp/redis.sock' has no scheme (did you mean "
                            "unix:///tmp/redis.sock?)"},
        {"localhost", "upstream: not a URL (use redis://host:port, rediss://host:port or unix:///path)"},
        {"user:secret@host:1", "upstream: unknown scheme 'user' (use redis://, rediss:// or unix://)"},
        {"redis://", "upstream: missing host (redis://host:port)"},
        {"redis://:6379", "upstream: missing host (redis://host:port)"},
        {"redis://u:p@", "upstream: missing host (redis://host:port)"},
        {"redis://host:", "upstream: port must be between 1 and 65535 (got '')"},
        {"redis://host:0", "upstream: port must be between 1 and 65535 (got '0')"},
        {"redis://host:65536", "upstream: port must be between 1 and 65535 (got '65536')"},
        {"redis://host:99999999999999999999",
         "upstream: port must be between 1 and 65535 (got '99999999999999999999')"},
        {"redis://host:-1", "upstream: port must be between 1 and 65535 (got '-1')"},
        {"redis://host:63a", "upstream: port must be between 1 and 65535 (got '63a')"},
        {"redis://host/x", "upstream: database must be a non-negative integer (got 'x')"},
        {"redis://host/-1", "upstream: database must be a non-negative integer (got '-1')"},
        {"redis://host/1/2", "upstream: database must be a non-negative integer (got '1/2')"},
        {"redis://host/2147483648",
         "upstream: database must be a non-negative integer (got '2147483648')"},
        {"redis://host?db=1", "upstream: redis:// URLs take no parameters (the database goes "
                              "in the path: redis://host:port/db)"},
        {"redis://host/1#x", "upstream: unexpected '#' in the URL"},
        {"redis://ho st", "upstream: the URL contains a blank or control character "
                          "(percent-encode it)"},
        {"redis://ho\tst", "upstream: the URL contains a blank or control character "
                           "(percent-encode it)"},
        {"redis://ho$t", "upstream: invalid character '$' in host"},
        {"redis://::1:6379", "upstream: an IPv6 address must be in brackets "
                             "(redis://[::1]:6379)"},
        {"redis://[::1", "upstream: missing ']' after the IPv6 address"},
        {"redis://[::1]6379", "upstream: unexpected '6' after ']' (use [addr]:port)"},
        {"redis://[nothost]:1", "upstream: '[nothost]' is not an IPv6 address"},
        {"redis://[]:1", "upstream: '[]' is not an IPv6 address"},
        {"redis://u%4:p@host", "upstream: bad percent-encoding in the user name"},
        {"redis://u:p%zz@host", "upstream: bad percent-encoding in the password"},
        {"redis://u:p%@host", "upstream: bad percent-encoding in the password"},
        {"redis://u:p%00@host", "upstream: bad percent-encoding in the password"},
        {"unix://relative.sock", "upstream: the unix socket path must be absolute "
                                 "(unix:///path/to/redis.sock)"},
        {"unix://host/tmp/r.sock", "upstream: the unix socket path must be absolute "
                                   "(unix:///path/to/redis.sock)"},
        {"unix:relative.sock", "upstream: the unix socket path must be absolute "
                               "(unix:///path/to/redis.sock)"},
        {"unix:", "upstream: the unix socket path must be absolute "
                  "(unix:///path/to/redis.sock)"},
        {"unix:///tmp/", "upstream: unix socket path '/tmp/' is a directory"},
        {"unix:///tmp/r.sock?db=x", "upstream: database must be a non-negative integer "
                                    "(got 'x')"},
        {"unix:///tmp/r.sock?db=", "upstream: database must be a non-negative integer "
                                   "(got '')"},
        {"unix:///tmp/r.sock?password=x", "upstream: unknown parameter 'password' (unix:// "
                                          "URLs take only db)"},
        {"unix:///tmp/r.sock#frag", "upstream: unexpected '#' in the URL"},
        {"unix:///tmp/%zz", "upstream: bad percent-encoding in the unix socket path"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        px_upstream_addr a;
        char err[256] = "";
        memset(&a, 0x5a, sizeof(a));
        if (px_upstream_parse(cases[i].url, &a, err, sizeof(err)) != -1) {
            fprintf(stderr, "FAIL %s: %s accepted\n", unit_cur_name, cases[i].url);
            unit_cur_failed = 1;
            continue;
        }
        CHECK_STR(err, cases[i].err);
        CHECK_EQ_INT(a.port, 0x5a5a5a5a); /* untouched */
    }

    /* lengths: host 255, unix path 107, password 255 */
    {
        char url[1200], err[256];
        px_upstream_addr a;
        memset(url, 0, sizeof(url));
        strcpy(url, "redis://");
        memset(url + 8, 'h', 255);
        CHECK_EQ_INT(px_upstream_parse(url, &a, err, sizeof(err)), 0);
        url[8 + 255] = 'h';
        CHECK_EQ_INT(px_upstream_parse(url, &a, err, sizeof(err)), -1);
        CHECK_STR(err, "upstream: host is too long (at most 255 bytes)");

        memset(url, 0, sizeof(url));
        strcpy(url, "unix:///");
        memset(url + 8, 'p', 106);
        CHECK_EQ_INT(px_upstream_parse(url, &a, err, sizeof(err)), 0);
        CHECK_EQ_INT(strlen(a.path), 107);
        url[8 + 106] = 'p';
        CHECK_EQ_INT(px_upstream_parse(url, &a, err, sizeof(err)), -1);
        CHECK_STR(err, "upstream: the unix socket path is too long (at most 107 bytes)");

        memset(url, 0, sizeof(url));
        strcpy(url, "redis://u:");
        memset(url + 10, 'x', 256);
        strcat(url, "@h");
        CHECK_EQ_INT(px_upstream_parse(url, &a, err, sizeof(err)), -1);
        CHECK_STR(err, "upstream: the password is too long (at most 255 bytes)");
        CHECK(strstr(err, "xxx") == NULL); /* the password is never echoed */
    }
}

static void test_upstream_directive(void) {
    px_config c;
    char err[256];
    px_config_init(&c);
    CHECK_EQ_INT(set1(&c, "upstream", "redis://u:p@10.0.0.5:6390/1", err, sizeof(err)), 0);
    CHECK_STR(c.upstream, "redis://u:p@10.0.0.5:6390/1"); /* as given */
    CHECK_STR(c.up.host, "10.0.0.5");
    CHECK_EQ_INT(c.up.port, 6390);
    CHECK_EQ_INT(c.up.db, 1);
    /* a bad URL leaves both the text and the parsed address as they were */
    CHECK_EQ_INT(set1(&c, "upstream", "http://10.0.0.6", err, sizeof(err)), -1);
    CHECK_STR(err, "upstream: unknown scheme 'http' (use redis://, rediss:// or unix://)");
    CHECK_STR(c.upstream, "redis://u:p@10.0.0.5:6390/1");
    CHECK_STR(c.up.host, "10.0.0.5");
    CHECK_STR(c.up.pass, "p");
    /* rediss:// is TLS, and formats back as such */
    {
        px_config t;
        char buf[256];
        px_config_init(&t);
        CHECK_EQ_INT(set1(&t, "upstream", "REDISS://10.0.0.7:6400/2", err, sizeof(err)), 0);
        CHECK_EQ_INT(t.up.tls, 1);
        CHECK(px_upstream_format(&t.up, 0, buf, sizeof buf) >= 0);
        CHECK_STR(buf, "rediss://10.0.0.7:6400/2");
        px_config_deinit(&t);
    }
    /* switching to unix clears the tcp fields */
    CHECK_EQ_INT(set1(&c, "upstream", "unix:///tmp/r.sock", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.up.is_unix, 1);
    CHECK_STR(c.up.host, "");
    CHECK_STR(c.up.pass, "");
    CHECK_EQ_INT(c.up.has_pass, 0);
    CHECK_EQ_INT(c.up.db, 0);
    px_config_deinit(&c);
}

static void test_upstream_format_roundtrip(void) {
    static const struct { const char *in, *secret, *masked; } cases[] = {
        {"redis://localhost", "redis://localhost:6379", "redis://localhost:6379"},
        {"redis://h:7000/0", "redis://h:7000", "redis://h:7000"},
        {"redis://h/5", "redis://h:6379/5", "redis://h:6379/5"},
        {"redis://u:p@h", "redis://u:p@h:6379", "redis://u:****@h:6379"},
        {"redis://:p@h", "redis://:p@h:6379", "redis://:****@h:6379"},
        {"redis://u@h", "redis://u@h:6379", "redis://u@h:6379"},
        {"redis://u:@h", "redis://u:@h:6379", "redis://u:****@h:6379"},
        {"redis://a%40b:p%3as%20%25@h", "redis://a%40b:p%3As%20%25@h:6379",
         "redis://a%40b:****@h:6379"},
        {"redis://[::1]", "redis://[::1]:6379", "redis://[::1]:6379"},
        {"unix:/tmp/r.sock", "unix:///tmp/r.sock", "unix:///tmp/r.sock"},
        {"unix:///tmp/a%20b%3F.sock?db=2", "unix:///tmp/a%20b%3F.sock?db=2",
         "unix:///tmp/a%20b%3F.sock?db=2"},
        {"unix://u:p@/tmp/r.sock", "unix://u:p@/tmp/r.sock", "unix://u:****@/tmp/r.sock"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        px_upstream_addr a, b;
        char err[256] = "", buf[1024];
        REQUIRE(px_upstream_parse(cases[i].in, &a, err, sizeof(err)) == 0);
        CHECK_EQ_INT(px_upstream_format(&a, PX_FMT_SECRETS, buf, sizeof(buf)),
                     (long long)strlen(cases[i].secret));
        CHECK_STR(buf, cases[i].secret);
        REQUIRE(px_upstream_parse(buf, &b, err, sizeof(err)) == 0);
        CHECK(memcmp(&a, &b, sizeof(a)) == 0 ||
              (a.is_unix == b.is_unix && strcmp(a.host, b.host) == 0 && a.port == b.port &&
               strcmp(a.path, b.path) == 0 && strcmp(a.user, b.user) == 0 &&
               strcmp(a.pass, b.pass) == 0 && a.has_user == b.has_user &&
               a.has_pass == b.has_pass && a.db == b.db));
        CHECK_EQ_INT(px_upstream_format(&a, 0, buf, sizeof(buf)),
                     (long long)strlen(cases[i].masked));
        CHECK_STR(buf, cases[i].masked);
    }
    /* too small a buffer: -1 and "" */
    {
        px_upstream_addr a;
        char err[256], buf[10];
        REQUIRE(px_upstream_parse("redis://localhost", &a, err, sizeof(err)) == 0);
        CHECK_EQ_INT(px_upstream_format(&a, 0, buf, sizeof(buf)), -1);
        CHECK_STR(buf, "");
        CHECK_EQ_INT(px_upstream_format(&a, 0, buf, 0), -1);
    }
}

/* ------------------------------------------------------------------------ */
/* Dump and help.                                                           */

static void test_dump_roundtrip(void) {
    px_config c, d;
    char err[512] = "";
    char *one, *two, *masked;
    const char *path;
    const char *text =
        "upstream \"redis://ad%40min:p%20w@[::1]:7000/3\"\n"
        "bind 127.0.0.1 ::1\n"
        "port 7777\n"
        "unixsocket \"/tmp/with space/\\\"q\\\" and \\\\ \\x01.sock\"\n"
        "unixsocketperm 0770\n"
        "maxclients 123\n"
        "timeout 60\n"
        "tcp-keepalive 0\n"
        "tcp-nodelay no\n"
        "upstream-connections 8\n"
        "loglevel warning\n"
        "logfile '#not a comment'\n"
        "proto-max-bulk-len 1048577\n"
        "max-multibulk-len 1000\n"
        "client-query-buffer-limit 3kb\n" /* below 1mb: refused */;

    CHECK_EQ_INT(load_str(&c, text, err, sizeof(err), NULL), -1);
    CHECK_HAS(err, ":15: client-query-buffer-limit must be between 1mb and");
    CHECK_EQ_INT(set1(&c, "client-query-buffer-limit", "2048kb", err, sizeof(err)), 0);
    CHECK_EQ_INT(set1(&c, "client-output-buffer-limit", "0", err, sizeof(err)), 0);

    one = dump_str(&c, PX_FMT_SECRETS);
    REQUIRE(one != NULL);
    CHECK_HAS(one, "upstream redis://ad%40min:p%20w@[::1]:7000/3\n");
    CHECK_HAS(one, "bind 127.0.0.1 ::1\n");
    CHECK_HAS(one, "unixsocketperm 0770\n");
    CHECK_HAS(one, "tcp-nodelay no\n");
    CHECK_HAS(one, "loglevel warning\n");
    CHECK_HAS(one, "logfile \"#not a comment\"\n");
    CHECK_HAS(one, "unixsocket \"/tmp/with space/\\\"q\\\" and \\\\ \\x01.sock\"\n");
    CHECK_HAS(one, "proto-max-bulk-len 1048577\n");
    CHECK_HAS(one, "client-query-buffer-limit 2mb\n");
    CHECK_HAS(one, "client-output-buffer-limit 0\n");
    CHECK_HAS(one, "max-multibulk-len 1000\n");

    /* the dump loads back to the same config */
    path = write_tmp(one);
    px_config_init(&d);
    CHECK_EQ_INT(px_config_load_file(&d, path, err, sizeof(err)), 0);
    two = dump_str(&d, PX_FMT_SECRETS);
    REQUIRE(two != NULL);
    CHECK_STR(two, one);
    CHECK_EQ_INT(d.unixsocket[16], '"');
    CHECK_EQ_INT(d.unixsocket[strlen(d.unixsocket) - 6], '\x01');
    CHECK_STR(d.up.user, "ad@min");
    CHECK_STR(d.up.pass, "p w");

    /* without PX_FMT_SECRETS the password is masked */
    masked = dump_str(&c, 0);
    REQUIRE(masked != NULL);
    CHECK_HAS(masked, "upstream redis://ad%40min:****@[::1]:7000/3\n");
    CHECK(strstr(masked, "p%20w") == NULL);

    /* one line per directive */
    {
        int lines = 0;
        for (const char *p = one; *p; p++) lines += *p == '\n';
        CHECK_EQ_INT(lines, 47); /* every directive once; cache-rule lines only when set */
    }
    free(one);
    free(two);
    free(masked);
    px_config_deinit(&c);
    px_config_deinit(&d);
}

/* What SIGHUP names as needing a restart: every directive whose written-back
 * value differs, a changed password and a repeatable one included. */
/* What SIGHUP may take from a new upstream URL: its credentials alone. */
static void test_upstream_credentials_differ(void) {
    static const struct {
        const char *a, *b;
        int differ;
    } cases[] = {
        {"redis://:old@h:6379/1", "redis://:new@h:6379/1", 1},
        {"redis://h:6379", "redis://:pw@h:6379", 1},
        {"redis://u:pw@h", "redis://v:pw@h", 1},
        {"redis://:pw@h", "redis://pw@h", 1},          /* user "pw", no password */
        {"redis://:pw@h:6379", "redis://:pw@h", 0},     /* the same */
        {"redis://:old@h", "redis://:new@g", 0},       /* another host too */
        {"redis://:old@h/1", "redis://:new@h/2", 0},   /* another db too */
        {"redis://:old@h", "rediss://:new@h", 0},      /* TLS too */
        {"unix://:old@/a.sock", "unix://:new@/a.sock", 1},
        {"unix://:old@/a.sock", "unix://:new@/b.sock", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        px_upstream_addr a, b;
        char err[256];
        CHECK_EQ_INT(px_upstream_parse(cases[i].a, &a, err, sizeof err), 0);
        CHECK_EQ_INT(px_upstream_parse(cases[i].b, &b, err, sizeof err), 0);
        CHECK_EQ_INT(px_upstream_credentials_differ(&a, &b), cases[i].differ);
    }
}

static void test_diff(void) {
    px_config a, b;
    char err[256], names[256];
    const char *const skip[] = {"loglevel", "port", NULL};
    px_config_init(&a);
    px_config_init(&b);
    CHECK_EQ_INT(px_config_diff(&a, &b, NULL, names, sizeof names), 0);
    CHECK_STR(names, "");
    CHECK_EQ_INT(set1(&a, "upstream", "redis://:old@h:1", err, sizeof err), 0);
    CHECK_EQ_INT(set1(&b, "upstream", "redis://:new@h:1", err, sizeof err), 0);
    CHECK_EQ_INT(set1(&b, "port", "7000", err, sizeof err), 0);
    CHECK_EQ_INT(set1(&b, "loglevel", "debug", err, sizeof err), 0);
    CHECK_EQ_INT(set1(&b, "key-prefix", "{1}", err, sizeof err), 0);
    CHECK_EQ_INT(set1(&b, "cache-track-prefix", "x", err, sizeof err), 0);
    CHECK_EQ_INT(px_config_diff(&a, &b, skip, names, sizeof names), 3);
    CHECK_STR(names, "upstream, key-prefix, cache-track-prefix");
    CHECK_EQ_INT(px_config_diff(&a, &b, NULL, names, sizeof names), 5);
    CHECK_STR(names, "upstream, port, loglevel, key-prefix, cache-track-prefix");
    CHECK_EQ_INT(px_config_diff(&a, &b, NULL, names, 12), 5); /* cut short, still counted */
    CHECK_STR(names, "upstream");
    px_config_deinit(&a);
    px_config_deinit(&b);
}

static void test_help(void) {
    static const char *const names[] = {
        "--upstream <url>", "--bind <addr> ...", "--port <port>", "--unixsocket <path>",
        "--unixsocketperm <mode>", "--maxclients <n>", "--timeout <seconds>",
        "--tcp-keepalive <seconds>", "--tcp-nodelay <yes|no>", "--upstream-connections <n>",
        "--loglevel <debug|verbose|notice|warning>", "--logfile <path>",
        "--proto-max-bulk-len <bytes>", "--max-multibulk-len <n>",
        "--client-query-buffer-limit <bytes>", "--client-output-buffer-limit <bytes>",
    };
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    REQUIRE(f != NULL);
    px_config_help(f, "sc");
    fclose(f);
    CHECK_HAS(buf, "Usage: sc [config-file] [--directive value ...] [--test-config [-v]]\n");
    CHECK_HAS(buf, "sc --test-config [-v] config-file [--directive value ...]\n");
    CHECK_HAS(buf, "sc -v | --version");
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) CHECK_HAS(buf, names[i]);
    CHECK_HAS(buf, "default: 512mb");
    CHECK_HAS(buf, "default: redis://127.0.0.1:6379");
    free(buf);
}

int main(void) {
    RUN(test_defaults);
    RUN(test_shipped_conf_loads_and_documents_defaults);
    RUN(test_int_bounds);
    RUN(test_memory_suffixes);
    RUN(test_bool);
    RUN(test_enum);
    RUN(test_string);
    RUN(test_cache_track_prefix);
    RUN(test_octal);
    RUN(test_argument_counts_and_unknown);
    RUN(test_bind_list);
    RUN(test_file_syntax);
    RUN(test_quoted_arguments);
    RUN(test_file_errors);
    RUN(test_file_limits);
    RUN(test_sentinel_bounds);
    RUN(test_args_precedence);
    RUN(test_args_errors);
    RUN(test_args_flags);
    RUN(test_args_stdin);
    RUN(test_check);
    RUN(test_upstream_good);
    RUN(test_upstream_bad);
    RUN(test_upstream_directive);
    RUN(test_upstream_format_roundtrip);
    RUN(test_dump_roundtrip);
    RUN(test_upstream_credentials_differ);
    RUN(test_diff);
    RUN(test_help);
    remove_tmp();
    return unit_report();
}
