/*
 * proxy/server.c — the event loop around clients and pools: start, the
 * once-a-second cron, deferred frees, and the graceful stop.
 *
 * Graceful stop (SIGTERM, SIGINT): listeners close at once; every client
 * stops reading and is closed once the replies to what it already sent are
 * written (blocked and subscribed clients at once: their wait is unbounded);
 * the process exits 0 when no client is left, or after a deadline.
 */
#include "proxy/server.h"

#include <errno.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "proxy/aclwatch.h"
#include "proxy/slotwatch.h"
#include "proxy/caching.h"
#include "proxy/client.h"
#include "proxy/fdlimit.h"
#include "proxy/follow.h"
#include "proxy/io.h"
#include "proxy/listener.h"
#include "proxy/log.h"
#include "proxy/metrics.h"
#include "proxy/sentinel.h"
#include "proxy/tls.h"
#include "proxy/upstream.h"

#define PX_STOP_DEADLINE_MS 10000
/* Larger than any value Redis holds (its proto-max-bulk-len bounds its
 * strings; 512 MB unless raised): only a malformed reply declares more. */
#define PX_REPLY_MAX_BULK_LEN (1LL << 40)

/* CLOCK_BOOTTIME: monotonic, and it runs on while the machine sleeps, as
 * Redis's clock does for the TTLs the cache's entries end with. */
#ifdef CLOCK_BOOTTIME
#define PX_CLOCK CLOCK_BOOTTIME
#else
#define PX_CLOCK CLOCK_MONOTONIC
#endif

int64_t px_now_ms(void) {
    struct timespec ts;
    clock_gettime(PX_CLOCK, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t px_now_us(void) {
    struct timespec ts;
    clock_gettime(PX_CLOCK, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t px_loop_now_us(px_server *srv) {
    struct timeval tv;
    if (event_base_gettimeofday_cached(srv->base, &tv) != 0) return px_now_us();
    return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

void px_server_schedule_reap(px_server *srv) {
    if (srv->reap_ev != NULL) event_active(srv->reap_ev, EV_TIMEOUT, 0);
}

static void output_wake_cb(evutil_socket_t fd, short what, void *arg) {
    px_clients_output_wake(arg);
}

/* A record is some 200 bytes; the smallest request it stands for, some
 * 20: toward a stalled Redis, bytes alone would let the records of many
 * clients' small requests grow ten times past the limit. */
size_t px_server_upstream_load(const px_server *srv) {
    return srv->upstream_output + srv->upstream_requests * PX_REQ_COST;
}

void px_server_upstream_output_fell(px_server *srv) {
    if (srv->output_waiters.head == NULL || srv->output_wake_ev == NULL) return;
    long long limit = srv->cfg->upstream_output_limit;
    /* half the limit: a client woken has room for a good part of its
     * pipeline, not one command before it pauses again */
    if (limit == 0 || px_server_upstream_load(srv) <= (size_t)limit / 2)
        event_active(srv->output_wake_ev, EV_TIMEOUT, 0);
}

/* Runs after the read callbacks of a loop iteration: every socket they
 * wrote to is written once (see io.h). */
static void flush_cb(evutil_socket_t fd, short what, void *arg) {
    px_io_flush_all(arg);
}

void px_server_reap(px_server *srv) {
    while (srv->reap_clients != NULL) {
        px_client *c = srv->reap_clients;
        srv->reap_clients = c->next_reap;
        px_client_free(c);
    }
    while (srv->reap_upstreams != NULL) {
        px_upstream *u = srv->reap_upstreams;
        srv->reap_upstreams = u->next_reap;
        px_upstream_free(u);
    }
}

/* Redis 6's hard limit on the arguments of a request (7.0 takes INT_MAX) */
#define REDIS6_MAX_ARGS (1024 * 1024)

void px_server_apply_request_limits(px_server *srv) {
    long long n = srv->cfg->max_multibulk_len;
    if (srv->upstream_max_args > 0 && srv->upstream_max_args < n) n = srv->upstream_max_args;
    srv->req_limits.max_bulk_len = srv->cfg->proto_max_bulk_len;
    srv->req_limits.max_multibulk_len = n;
    for (px_client *c = srv->clients; c != NULL; c = c->next) c->rq.lim = srv->req_limits;
}

void px_server_upstream_redis6(px_server *srv, int redis6) {
    long long was = srv->upstream_max_args;
    srv->upstream_max_args = redis6 ? REDIS6_MAX_ARGS : 0;
    if (redis6 && was == 0 && srv->cfg->max_multibulk_len > REDIS6_MAX_ARGS)
        px_notice("upstream is Redis 6: requests of more than %d arguments are refused here, as it would "
                  "(max-multibulk-len %lld)", REDIS6_MAX_ARGS, srv->cfg->max_multibulk_len);
    px_server_apply_request_limits(srv);
}

void px_server_upstream_reached(px_server *srv, const char *addr) {
    uint64_t failed = px_log_repeat_end(&srv->connect_failures);
    if (!srv->upstream_reached)
        px_notice("upstream reached addr=%s", addr);
    else if (failed > 0)
        px_notice("upstream reached again addr=%s failed_connects=%llu", addr, (unsigned long long)failed);
    srv->upstream_reached = 1;
}

static void reap_cb(evutil_socket_t fd, short what, void *arg) {
    px_server *srv = arg;
    px_server_reap(srv);
    if (srv->stopping && srv->nclients == 0) event_base_loopexit(srv->base, NULL);
}

static void cron_cb(evutil_socket_t fd, short what, void *arg) {
    px_server *srv = arg;
    int64_t now = px_now_ms();
    for (px_client *c = srv->clients, *next; c != NULL; c = next) {
        next = c->next;
        px_client_cron(c, now);
    }
    px_pools_sweep(srv, now);
    px_caching_cron(srv);
    px_upstreams_cron(srv, now);
    px_follow_cron(srv);
    if (srv->stopping && srv->nclients == 0) event_base_loopexit(srv->base, NULL);
}

/* The stop deadline: a timer of its own, not the cron's once-a-second
 * check, so that "at most 10 s" holds to the millisecond (the cron's tick
 * added up to a second: a stop took 11 s with a request on a hung Redis). */
static void stop_deadline_cb(evutil_socket_t fd, short what, void *arg) {
    px_server *srv = arg;
    px_warning("stop deadline passed, exiting clients=%d", srv->nclients);
    event_base_loopexit(srv->base, NULL);
}

static void on_stop_signal(evutil_socket_t sig, short what, void *arg) {
    px_server *srv = arg;
    if (srv->stopping) {
        px_notice("second stop signal, exiting now");
        event_base_loopexit(srv->base, NULL);
        return;
    }
    px_notice("stopping signal=%d clients=%d", (int)sig, srv->nclients);
    srv->stopping = 1;
    struct timeval deadline = px_ms_timeval(PX_STOP_DEADLINE_MS);
    if (srv->stop_ev == NULL || evtimer_add(srv->stop_ev, &deadline) != 0)
        px_warning("cannot start the stop deadline timer: waiting for the clients without one");
    px_listeners_close(srv);
    for (px_client *c = srv->clients, *next; c != NULL; c = next) {
        next = c->next;
        px_client_begin_stop(c);
    }
    if (srv->nclients == 0) event_base_loopexit(srv->base, NULL);
}

/* What SIGHUP applies (below); a change to any other directive needs a
 * restart. proto-max-nesting is obsolete and ignored, so a change to it is no
 * news either. */
static const char *const px_reloadable[] = {
    "loglevel", "maxclients", "timeout", "client-query-buffer-limit", "client-output-buffer-limit",
    "upstream-output-limit", "upstream-connect-timeout", "proto-max-bulk-len", "max-multibulk-len",
    "proto-max-nesting", "cache-max-memory", "cache-max-value", "cache-ttl", NULL,
};

/* Warns, by name, of every change in fresh that needs a restart: one line an
 * operator can act on, where a silent reload reads as "applied". */
static void warn_unapplied(const px_config *cfg, const px_config *fresh) {
    char names[2048];
    int n = px_config_diff(cfg, fresh, px_reloadable, names, sizeof names);
    /* cache-max-memory resizes the cache, but cannot create or remove it */
    int on_off = (fresh->cache_max_memory == 0) != (cfg->cache_max_memory == 0);
    if (n < 0) {
        px_warning("reload: cannot compare the configurations (out of memory); changes other than "
                   "those applied need a restart");
        return;
    }
    if (n == 0 && !on_off) return;
    px_warning("reload: %s%s%s changed and need a restart; those changes are ignored", names,
               n && on_off ? ", " : "", on_off ? "cache-max-memory (turning the cache on or off)" : "");
}

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

/* (server.h) The TLS files are loaded into contexts of a probe's own,
 * freed at once: the running ones stay as they are. */
int px_server_check_startable(px_config *cfg, char *err, size_t errlen) {
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

/*
 * SIGHUP: the configuration is read again from the same command line (and
 * the file it names). What can change at run time is applied: log level,
 * cache size, value limit and ttl, client limits and timeout (maxclients
 * fitted to the open files limit again, as at start), the connect deadline
 * (for connects begun from then on): px_reloadable. Every
 * other directive (addresses, upstream, rules and tracking prefixes, modes,
 * logfile, ...) needs a restart, and a change to it is logged by name and
 * ignored. A configuration that does not load, or that a start would
 * refuse (px_server_check_startable), changes nothing.
 */
static void on_reload_signal(evutil_socket_t sig, short what, void *arg) {
    px_server *srv = arg;
    px_config *fresh = malloc(sizeof *fresh);
    char err[1024];
    int test_only = 0;
    if (fresh == NULL) return;
    px_config_init(fresh);
    /* standard input, a pipe, were read to their end at start: read again,
     * they would give nothing, and every directive would fall back to its
     * default; a FIFO would block the loop */
    fresh->file_regular_only = 1;
    if (px_config_from_args(fresh, srv->argc, srv->argv, &test_only, err, sizeof err) != 0 ||
        px_server_check_startable(fresh, err, sizeof err) != 0) {
        /* a file that --test-config refuses, and a restart would not
         * start from, is not half applied: the operator who is told to
         * restart for the rest would be left with a proxy that does not */
        px_warning("reload refused: %s", err);
        goto out;
    }
    px_config *cfg = srv->cfg;
    if (px_upstream_credentials_differ(&cfg->up, &fresh->up)) {
        /* Redis's password rotated: what sidecache connects for itself (the
         * invalidation connection, ACL LIST, cluster asks) logs in with the
         * new one from now on; connections open stay logged in, as Redis
         * keeps them. Clients log in with their own credentials. */
        memcpy(cfg->upstream, fresh->upstream, sizeof cfg->upstream);
        cfg->up = fresh->up;
        px_caching_credentials_changed(srv);
        px_notice("reload: new upstream credentials, for sidecache's own connections from now on");
    }
    warn_unapplied(cfg, fresh);
    cfg->loglevel = fresh->loglevel;
    px_log_set_level(cfg->loglevel);
    cfg->maxclients = px_fdlimit_fit_clients(fresh->maxclients);
    cfg->timeout = fresh->timeout;
    cfg->client_query_buffer_limit = fresh->client_query_buffer_limit;
    cfg->client_output_buffer_limit = fresh->client_output_buffer_limit;
    cfg->upstream_output_limit = fresh->upstream_output_limit;
    px_server_upstream_output_fell(srv);
    cfg->upstream_connect_timeout = fresh->upstream_connect_timeout;
    cfg->proto_max_bulk_len = fresh->proto_max_bulk_len;
    cfg->max_multibulk_len = fresh->max_multibulk_len;
    px_server_apply_request_limits(srv);
    if (cfg->cache_max_memory != 0 && fresh->cache_max_memory != 0) {
        cfg->cache_max_memory = fresh->cache_max_memory;
        cfg->cache_max_value = fresh->cache_max_value;
        cfg->cache_ttl = fresh->cache_ttl;
        px_caching_reconfigure(srv);
    }
    px_notice("reloaded loglevel=%s maxclients=%d timeout=%d upstream_connect_timeout=%d cache_max_memory=%lld "
              "cache_max_value=%lld cache_ttl=%d",
              px_log_level_name(cfg->loglevel), cfg->maxclients, cfg->timeout, cfg->upstream_connect_timeout,
              cfg->cache_max_memory, cfg->cache_max_value, cfg->cache_ttl);
out:
    px_config_deinit(fresh);
    free(fresh);
}

static void sentinel_cb(evutil_socket_t fd, short what, void *arg) {
    px_sentinel_check(arg);
}

static void gone_check_cb(evutil_socket_t fd, short what, void *arg) {
    px_clients_gone_check(arg);
}

static void move_again_cb(evutil_socket_t fd, short what, void *arg) {
    px_upstreams_move_again_now(arg);
}

int px_server_run(px_config *cfg, int argc, char **argv) {
    px_server srv;
    memset(&srv, 0, sizeof srv);
    srv.cfg = cfg;
    srv.argc = argc;
    srv.argv = argv;
    srv.open_access = -1;
    resp_limits_default(&srv.req_limits);
    srv.req_limits.max_bulk_len = cfg->proto_max_bulk_len;
    srv.req_limits.max_multibulk_len = cfg->max_multibulk_len;
    srv.req_limits.max_inline_len = (size_t)cfg->proto_max_inline_len;
    resp_limits_default(&srv.reply_limits);
    /* proto-max-bulk-len bounds what clients send, as in Redis, which does
     * not apply it to its replies: a value written under a larger limit
     * (Redis's own may be higher), or grown by APPEND, is read back whole.
     * Redis may also answer with more elements than a client may send in
     * one request (a big LRANGE): the reply side bounds no count. Nor
     * nesting (resp.h), whatever the obsolete proto-max-nesting says. The
     * framer allocates nothing from a declared length (resp.h). */
    srv.reply_limits.max_bulk_len = PX_REPLY_MAX_BULK_LEN;
    srv.reply_limits.max_multibulk_len = 1LL << 32;
    srv.reply_limits.max_inline_len = RESP_DEFAULT_MAX_BULK_LEN; /* long error lines from scripts */

    /* Before anything opens: past this many clients, one more is refused
     * with an error rather than left unanswered in the backlog when the
     * process is out of descriptors (fdlimit.h). */
    cfg->maxclients = px_fdlimit_fit_clients(cfg->maxclients);
    signal(SIGPIPE, SIG_IGN);
    srv.base = event_base_new();
    /* three priorities (server.h); libevent's default is the middle one */
    if (srv.base == NULL || event_base_priority_init(srv.base, PX_PRIO_LEVELS) != 0) {
        px_error("cannot create the event loop");
        return 1;
    }
    srv.flush_ev = event_new(srv.base, -1, 0, flush_cb, &srv);
    srv.reap_ev = event_new(srv.base, -1, 0, reap_cb, &srv);
    srv.output_wake_ev = event_new(srv.base, -1, 0, output_wake_cb, &srv);
    srv.cron_ev = event_new(srv.base, -1, EV_PERSIST, cron_cb, &srv);
    srv.sig_term = evsignal_new(srv.base, SIGTERM, on_stop_signal, &srv);
    srv.sig_int = evsignal_new(srv.base, SIGINT, on_stop_signal, &srv);
    srv.sig_hup = evsignal_new(srv.base, SIGHUP, on_reload_signal, &srv);
    srv.stop_ev = evtimer_new(srv.base, stop_deadline_cb, &srv);
    srv.move_again_ev = evtimer_new(srv.base, move_again_cb, &srv);
    srv.gone_check_ev = evtimer_new(srv.base, gone_check_cb, &srv);
    /* The highest priority, as the invalidation connection's: a client that
     * had the READONLY and sent its next command at once may be read in
     * the same pass as this move is due; the move goes first, and that
     * command to the new master */
    if (srv.move_again_ev != NULL) event_priority_set(srv.move_again_ev, PX_PRIO_FIRST);
    struct timeval second = {1, 0};
    if (srv.flush_ev == NULL || srv.reap_ev == NULL || srv.output_wake_ev == NULL || srv.cron_ev == NULL ||
        srv.sig_term == NULL || srv.sig_int == NULL || srv.sig_hup == NULL || srv.stop_ev == NULL ||
        srv.move_again_ev == NULL || srv.gone_check_ev == NULL || event_add(srv.cron_ev, &second) != 0 || event_add(srv.sig_term, NULL) != 0 ||
        event_add(srv.sig_int, NULL) != 0 || event_add(srv.sig_hup, NULL) != 0) {
        px_error("cannot set up the event loop: out of memory");
        srv.exit_code = 1;
        goto out;
    }

    char tls_err[512];
    if (px_tls_init(&srv, tls_err, sizeof tls_err) != 0) {
        px_error("TLS setup failed: %s", tls_err);
        srv.exit_code = 1;
        goto out;
    }
    if (px_caching_init(&srv) != 0) {
        srv.exit_code = 1;
        goto out;
    }
    if (px_aclwatch_init(&srv) != 0) {
        px_error("cannot start the ACL checks: out of memory");
        srv.exit_code = 1;
        goto out;
    }
    if (px_slotwatch_init(&srv) != 0) {
        px_error("cannot start the probes of the cluster slot: out of memory");
        srv.exit_code = 1;
        goto out;
    }
    if (px_follow_init(&srv) != 0) {
        px_warning("cannot start following the cluster slot");
        srv.exit_code = 1;
        goto out;
    }
    if (px_sentinel_enabled(&srv)) {
        struct timeval every = px_ms_timeval(cfg->sentinel_check_ms);
        srv.sentinel_ev = event_new(srv.base, -1, EV_PERSIST, sentinel_cb, &srv);
        srv.sentinel_soon_ev = evtimer_new(srv.base, sentinel_cb, &srv);
        if (srv.sentinel_ev == NULL || srv.sentinel_soon_ev == NULL || event_add(srv.sentinel_ev, &every) != 0) {
            px_error("cannot start the sentinel timer");
            srv.exit_code = 1;
            goto out;
        }
    }
    /* /metrics first: once clients can connect, it can be scraped too */
    if (px_metrics_start(&srv) != 0 || px_listeners_open(&srv) != 0) {
        srv.exit_code = 1;
        goto out;
    }
    char upstream[1200];
    if (px_upstream_format(&cfg->up, 0, upstream, sizeof upstream) < 0) snprintf(upstream, sizeof upstream, "?");
    /* Connect the default identity now: its handshake tells whether Redis
     * wants a password before the first client asks. */
    px_pool *first = px_pool_ref(&srv, NULL, NULL, cfg->up.db, 2);
    if (first != NULL) {
        px_pool_shared(first, 0);
        px_pool_unref(first);
    }
    if (cfg->proto_max_nesting != 128) /* set, to other than its old default */
        px_notice("proto-max-nesting is obsolete and ignored: replies from Redis are relayed at any depth");
    /* "ready": listening. Whether Redis answers is told apart, as the
     * first connection is still on its way (px_server_upstream_reached). */
    const char *reached = srv.upstream_reached ? "yes" : "no";
    if (px_sentinel_enabled(&srv)) /* the URL gives credentials and db; its address is not used */
        px_notice("ready upstream-sentinel=\"%s\" upstream_connections=%d upstream_reached=%s", cfg->sentinel[0],
                  cfg->upstream_connections, reached);
    else
        px_notice("ready upstream=%s upstream_connections=%d upstream_reached=%s", upstream,
                  cfg->upstream_connections, reached);
    event_base_dispatch(srv.base);
    px_notice("stopped");

out:
    px_listeners_close(&srv);
    px_metrics_stop(&srv);
    /* Free what is left, in an order that keeps every pointer valid:
     * clients close (their requests in flight keep them as zombies), the
     * connections close (failing those requests, which reaps the zombies),
     * and the pools go last, when no client refers to them. */
    while (srv.clients != NULL) px_client_close(srv.clients, "shutdown");
    px_pools_close_connections(&srv);
    px_server_reap(&srv);
    px_pools_free_all(&srv);
    px_server_reap(&srv);
    px_caching_deinit(&srv);
    px_tls_deinit(&srv);
    while (srv.free_reqs != NULL) {
        px_req *r = srv.free_reqs;
        srv.free_reqs = r->next_up;
        free(r);
    }
    if (srv.sentinel_ev != NULL) event_free(srv.sentinel_ev);
    if (srv.sentinel_soon_ev != NULL) event_free(srv.sentinel_soon_ev);
    px_follow_free(&srv);
    px_aclwatch_free(&srv);
    px_slotwatch_free(&srv);
    struct event *evs[] = {srv.reap_ev, srv.output_wake_ev, srv.cron_ev, srv.sig_term, srv.sig_int,
                           srv.sig_hup,  srv.stop_ev,        srv.move_again_ev, srv.flush_ev,
                           srv.gone_check_ev};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        if (evs[i] != NULL) event_free(evs[i]);
    event_base_free(srv.base);
    return srv.exit_code;
}
