/*
 * proxy/main.c — `sidecache [config-file] [--directive value ...]`.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "proxy/caching.h"
#include "proxy/config.h"
#include "proxy/log.h"
#include "proxy/server.h"

#define SIDECACHE_VERSION "0.1.0"

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
        if (px_server_check_startable(&cfg, err, sizeof err) != 0) {
            fprintf(stderr, "sidecache: %s\n", err);
            rc = 1;
            goto done;
        }
        if (test_only == 2) {
            px_config_dump(&cfg, stdout, 0);
            /* what the profile brings is in no directive: shown as comments */
            px_caching_check_config(&cfg, stdout, err, sizeof err);
        }
        /* after a dump, as a comment: the output loads back as it is */
        printf("%ssidecache: configuration OK\n", test_only == 2 ? "# " : "");
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
