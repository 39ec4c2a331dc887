/*
 * proxy/tls.c — see tls.h.
 */
#include "proxy/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "proxy/log.h"

const char *px_tls_error(char *buf, size_t n) {
    unsigned long e = ERR_get_error();
    if (e == 0)
        snprintf(buf, n, "%s", errno ? strerror(errno) : "unknown TLS error");
    else
        ERR_error_string_n(e, buf, n);
    ERR_clear_error();
    return buf;
}

static int fail(char *err, size_t errlen, const char *what, const char *file) {
    char e[256];
    px_tls_error(e, sizeof e);
    snprintf(err, errlen, "%s%s%s: %s", what, file ? " " : "", file ? file : "", e);
    return -1;
}

static SSL_CTX *new_ctx(const SSL_METHOD *m) {
    SSL_CTX *ctx = SSL_CTX_new(m);
    if (ctx == NULL) return NULL;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    /* a write may take part of the buffer, and the next one may come from
     * another address (evbuffer chains) */
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    return ctx;
}

int px_tls_init(px_server *srv, char *err, size_t errlen) {
    px_config *cfg = srv->cfg;
    if (cfg->tls_port > 0) {
        if (cfg->tls_cert_file[0] == '\0' || cfg->tls_key_file[0] == '\0') {
            snprintf(err, errlen, "tls-port needs tls-cert-file and tls-key-file");
            return -1;
        }
        SSL_CTX *ctx = srv->tls_server_ctx = new_ctx(TLS_server_method());
        if (ctx == NULL) return fail(err, errlen, "TLS", NULL);
        if (SSL_CTX_use_certificate_chain_file(ctx, cfg->tls_cert_file) != 1)
            return fail(err, errlen, "tls-cert-file", cfg->tls_cert_file);
        if (SSL_CTX_use_PrivateKey_file(ctx, cfg->tls_key_file, SSL_FILETYPE_PEM) != 1)
            return fail(err, errlen, "tls-key-file", cfg->tls_key_file);
        if (SSL_CTX_check_private_key(ctx) != 1) return fail(err, errlen, "tls-key-file", cfg->tls_key_file);
        if (cfg->tls_auth_clients != PX_TLS_AUTH_NO) {
            if (cfg->tls_ca_cert_file[0] == '\0') {
                snprintf(err, errlen, "tls-auth-clients needs tls-ca-cert-file (or tls-auth-clients no)");
                return -1;
            }
            if (SSL_CTX_load_verify_locations(ctx, cfg->tls_ca_cert_file, NULL) != 1)
                return fail(err, errlen, "tls-ca-cert-file", cfg->tls_ca_cert_file);
            int mode = SSL_VERIFY_PEER;
            if (cfg->tls_auth_clients == PX_TLS_AUTH_YES) mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
            SSL_CTX_set_verify(ctx, mode, NULL);
        }
    }
    if (cfg->up.tls || cfg->tracking_up.tls) {
        SSL_CTX *ctx = srv->tls_client_ctx = new_ctx(TLS_client_method());
        if (ctx == NULL) return fail(err, errlen, "TLS", NULL);
        if (cfg->tls_upstream_ca_cert_file[0] != '\0') {
            if (SSL_CTX_load_verify_locations(ctx, cfg->tls_upstream_ca_cert_file, NULL) != 1)
                return fail(err, errlen, "tls-upstream-ca-cert-file", cfg->tls_upstream_ca_cert_file);
        } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
            return fail(err, errlen, "the system's CA store", NULL);
        }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        if (cfg->tls_upstream_cert_file[0] != '\0') {
            if (SSL_CTX_use_certificate_chain_file(ctx, cfg->tls_upstream_cert_file) != 1)
                return fail(err, errlen, "tls-upstream-cert-file", cfg->tls_upstream_cert_file);
            if (SSL_CTX_use_PrivateKey_file(ctx, cfg->tls_upstream_key_file, SSL_FILETYPE_PEM) != 1 ||
                SSL_CTX_check_private_key(ctx) != 1)
                return fail(err, errlen, "tls-upstream-key-file", cfg->tls_upstream_key_file);
        }
    }
    return 0;
}

void px_tls_deinit(px_server *srv) {
    if (srv->tls_server_ctx != NULL) SSL_CTX_free(srv->tls_server_ctx);
    if (srv->tls_client_ctx != NULL) SSL_CTX_free(srv->tls_client_ctx);
    srv->tls_server_ctx = srv->tls_client_ctx = NULL;
}

SSL *px_tls_new_server(px_server *srv) {
    SSL *ssl = SSL_new(srv->tls_server_ctx);
    if (ssl != NULL) SSL_set_accept_state(ssl);
    return ssl;
}

SSL *px_tls_new_client(px_server *srv, const char *host) {
    SSL *ssl = SSL_new(srv->tls_client_ctx);
    if (ssl == NULL) return NULL;
    SSL_set_connect_state(ssl);
    unsigned char ip[16];
    int is_ip = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
    X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
    /* the certificate must name what the URL names */
    if (is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, host) != 1 : SSL_set1_host(ssl, host) != 1 ||
                                                                    SSL_set_tlsext_host_name(ssl, host) != 1) {
        SSL_free(ssl);
        return NULL;
    }
    return ssl;
}
