/*
 * proxy/metrics.c — see metrics.h.
 */
#include "proxy/metrics.h"

#include <errno.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "protocol/resp.h"
#include "proxy/log.h"
#include "proxy/stats.h"

static void on_request(struct evhttp_request *req, void *arg) {
    px_server *srv = arg;
    const char *uri = evhttp_request_get_uri(req);
    enum evhttp_cmd_type method = evhttp_request_get_command(req);
    if (uri == NULL || (strcmp(uri, "/metrics") != 0 && strncmp(uri, "/metrics?", 9) != 0)) {
        evhttp_send_error(req, HTTP_NOTFOUND, "only /metrics is here");
        return;
    }
    if (method != EVHTTP_REQ_GET && method != EVHTTP_REQ_HEAD) {
        evhttp_send_error(req, 405, "GET only");
        return;
    }
    resp_buf b;
    resp_buf_init(&b);
    px_stats_prometheus(srv, &b);
    /* (a page with series missing would pass for a whole one) */
    struct evbuffer *out = b.failed ? NULL : evbuffer_new();
    if (out == NULL || (b.len > 0 && evbuffer_add(out, b.data, b.len) != 0)) {
        if (out != NULL) evbuffer_free(out);
        resp_buf_deinit(&b);
        evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; version=0.0.4; charset=utf-8");
    evhttp_send_reply(req, HTTP_OK, "OK", out);
    evbuffer_free(out);
    resp_buf_deinit(&b);
}

int px_metrics_start(px_server *srv) {
    px_config *cfg = srv->cfg;
    if (cfg->metrics_port == 0) return 0;
    srv->metrics = evhttp_new(srv->base);
    if (srv->metrics == NULL) {
        px_error("metrics: out of memory");
        return -1;
    }
    /* a scrape is small and quick: a slow or idle peer is dropped, and so
     * is one that sends more than a scrape (libevent would keep any body
     * or header line whole in memory, fed faster than the timeout) */
    evhttp_set_timeout(srv->metrics, 10);
    evhttp_set_max_headers_size(srv->metrics, 16384);
    evhttp_set_max_body_size(srv->metrics, 4096);
    /* (POST reaches on_request, for its 405) */
    evhttp_set_allowed_methods(srv->metrics, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST);
    evhttp_set_gencb(srv->metrics, on_request, srv);
    if (evhttp_bind_socket(srv->metrics, cfg->metrics_bind, (unsigned short)cfg->metrics_port) != 0) {
        px_error("metrics: cannot listen addr=%s:%d err=\"%s\"", cfg->metrics_bind, cfg->metrics_port, strerror(errno));
        px_metrics_stop(srv);
        return -1;
    }
    px_notice("metrics on http://%s:%d/metrics", cfg->metrics_bind, cfg->metrics_port);
    return 0;
}

void px_metrics_stop(px_server *srv) {
    if (srv->metrics != NULL) evhttp_free(srv->metrics);
    srv->metrics = NULL;
}
