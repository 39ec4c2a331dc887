/*
 * proxy/main.c — `sidecache [config-file] [--directive value ...]`.
 */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "proxy/caching.h"
#include "proxy/config.h"
#include "proxy/log.h"
#include "proxy/server.h"
#include "proxy/tls.h"

#define SIDECACHE_VERSION "0.1.0"

/* Whether a start could open path for appending, without creating it (a
 * check run by hand as root must not leave a file the service's user cannot
 * write): the file, or the folder it would be made in. errno says why not. */
static int can_append(const char *path) {
    if (access(path, F_OK) == 0) return access(path, W_OK) == 0;
    if (errno != ENOENT) return 0;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    return access(dirname(dir), W_OK | X_OK) == 0;
}

/*
 * --test-config: besides loading, what a start would find wrong before it
 * listens: the cache rules (built as a start builds them), the TLS
 * certificates and keys (loaded as a start loads them),
 * the log file (that a start can open it for appending), and a TLS port
 * that is also the plain one. So a service manager's ExecStartPre refuses
 * what would not start. Returns 0, or -1 with the reason in err.
 */
static int check_startable(px_config *cfg, char *err, size_t errlen) {
    static px_server probe; /* only its cfg and TLS contexts are used */
    int rc = 0;
    if (cfg->tls_port > 0 && cfg->tls_port == cfg->port) {
        snprintf(err, errlen, "tls-port %d is also port", cfg->tls_port);
        return -1;
    }
    if (cfg->logfile[0] != '\0' && !can_append(cfg->logfile)) {
        snprintf(err, errlen, "cannot open logfile %.900s: %s", cfg->logfile, strerror(errno));
        return -1;
    }
    if (px_caching_check_config(cfg, NULL, err, errlen) != 0) return -1;
    probe.cfg = cfg;
    char why[512];
    if (px_tls_init(&probe, why, sizeof why) != 0) {
        snprintf(err, errlen, "TLS: %s", why);
        rc = -1;
    }
    px_tls_deinit(&probe);
    return rc;
}

int main(int argc, char **argv) {
    px_config cfg;
    char err[1600];
    int test_only = 0, rc;
    px_config_init(&cfg);
    rc = px_config_from_args(&cfg, argc, argv, &test_only, err, sizeof err);
    if (rc == PX_ARGS_HELP) {
        px_config_help(stdout, argv[0]);
        rc = 0; /* asked for: scripts and image builds check the exit status */
        goto done;
    }
    if (rc == PX_ARGS_VERSION) {
        printf("sidecache %s\n", SIDECACHE_VERSION);
        rc = 0;
        goto done;
    }
    if (rc != 0) {
        fprintf(stderr, "sidecache: %s\n", err);
        rc = 1;
        goto done;
    }
    if (test_only) {
        if (check_startable(&cfg, err, sizeof err) != 0) {
            fprintf(stderr, "sidecache: %s\n", err);
            rc = 1;
            goto done;
        }
        if (test_only == 2) {
            px_config_dump(&cfg, stdout, 0);
            /* what the profile brings is in no directive: shown as comments */
            px_caching_check_config(&cfg, stdout, err, sizeof err);
        }
        printf("sidecache: configuration OK\n");
        goto done;
    }
    if (px_log_open(cfg.logfile, cfg.loglevel) != 0) {
        fprintf(stderr, "sidecache: cannot open logfile %s: %s\n", cfg.logfile, strerror(errno));
        rc = 1;
        goto done;
    }
    rc = px_server_run(&cfg, argc, argv);
    px_log_close();
done:
    px_config_deinit(&cfg);
    return rc;
}
