/*
 * proxy/main.c — `sidecache [config-file] [--directive value ...]`.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "proxy/config.h"
#include "proxy/log.h"
#include "proxy/server.h"

int main(int argc, char **argv) {
    px_config cfg;
    char err[1024];
    int test_only = 0;
    px_config_init(&cfg);
    if (px_config_from_args(&cfg, argc, argv, &test_only, err, sizeof err) != 0) {
        fprintf(stderr, "sidecache: %s\n", err);
        px_config_deinit(&cfg);
        return 1;
    }
    if (test_only) {
        printf("sidecache: configuration OK\n");
        px_config_deinit(&cfg);
        return 0;
    }
    if (px_log_open(cfg.logfile, cfg.loglevel) != 0) {
        fprintf(stderr, "sidecache: cannot open logfile %s: %s\n", cfg.logfile, strerror(errno));
        px_config_deinit(&cfg);
        return 1;
    }
    int rc = px_server_run(&cfg);
    px_log_close();
    px_config_deinit(&cfg);
    return rc;
}
