/*
 * proxy/caching.c — see caching.h.
 *
 * A request carries what its reply needs in px_req.aux:
 *   fill: the entry's identity (partition, db, kind, key, field) and token;
 *   write: the keys to invalidate again, as (u32 length, bytes) records;
 * and flags: FLUSH (the write's keys cannot be known), INFO (append our
 * section), EXEC (the client's queued writes are invalidated).
 */
#include "proxy/caching.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "cache/cache.h"
#include "cache/rules.h"
#include "invalidation/tracking.h"
#include "protocol/cmdtable.h"
#include "protocol/commands.h"
#include "proxy/client.h"
#include "proxy/io.h"
#include "proxy/log.h"
#include "proxy/upstream.h"

/* JuiceFS's lookup scripts (1.0-1.4, and 0.x): they read only. */
static const char *const juicefs_readonly_scripts[] = {
    "8526c64984678fc27f67f44755c8ba7dcdf7ea60",
    "72af033cd6d0773efd6a53eaf9490b4a138f55af",
};

struct px_caching {
    cache *cache;
    cache_rules rules;
    cmdtable *cmdt;          /* NULL until COMMAND was read */
    inv_conn *inv;
    int active;              /* tracking confirmed */
    int mode;                /* enum px_tracking_mode */
    uint64_t epoch;          /* changes whenever tracking starts or stops: a
                                data connection is tracked only for the epoch
                                it turned tracking on in */
    char *users[64];         /* partition id - 1 -> user name (ACL partition) */
    int nusers;
    /* flushes by cause */
    uint64_t flush_tracking, flush_null, flush_write, flush_failover, flush_unknown_user;
    uint64_t hits_served, fills_begun;
    uint64_t bypassed;       /* cacheable reads sent to Redis because the client
                                had requests in flight (neither hit nor miss) */
};

/* ------------------------------------------------------------------------ */
/* tracking callbacks */

static void on_invalidate(void *arg, const char *key, size_t klen) {
    px_server *srv = arg;
    cache_invalidate_key(srv->caching->cache, key, klen);
}

static void on_flush(void *arg, const char *why) {
    px_server *srv = arg;
    struct px_caching *pc = srv->caching;
    cache_flush(pc->cache);
    if (strncmp(why, "null", 4) == 0)
        pc->flush_null++;
    else
        pc->flush_tracking++;
    px_notice("cache flushed reason=\"%s\"", why);
}

static void send_tracking_on(px_server *srv, px_upstream *u) {
    struct px_caching *pc = srv->caching;
    char id[32];
    long long rid = inv_redirect_id(pc->inv);
    if (rid <= 0 || u->tunnel) return;
    snprintf(id, sizeof id, "%lld", rid);
    resp_buf b;
    resp_buf_init(&b);
    if (pc->mode == PX_TRACKING_OPTIN)
        resp_enc_commandv(&b, "CLIENT", "TRACKING", "ON", "REDIRECT", id, "OPTIN", NULL);
    else
        resp_enc_commandv(&b, "CLIENT", "TRACKING", "ON", "REDIRECT", id, NULL);
    px_req *r = px_req_new(srv, NULL, PX_REQ_TRACKING);
    if (r != NULL) {
        r->fill_token = pc->epoch;
        px_upstream_send(u, r, b.data, b.len);
    }
    resp_buf_deinit(&b);
}

static void on_active(void *arg, int active) {
    px_server *srv = arg;
    struct px_caching *pc = srv->caching;
    pc->active = active;
    pc->epoch++;
    /* default/optin: every open data connection redirects to the new
     * invalidation connection from now on; until its +OK it fills nothing */
    if (active && pc->mode != PX_TRACKING_BCAST) px_pools_foreach_connection(srv, send_tracking_on);
}

void px_caching_on_connect(px_server *srv, px_upstream *u) {
    struct px_caching *pc = srv->caching;
    if (pc != NULL && pc->mode != PX_TRACKING_BCAST && pc->active) send_tracking_on(srv, u);
}

void px_caching_on_upstream_lost(px_server *srv, px_upstream *u) {
    struct px_caching *pc = srv->caching;
    if (pc == NULL || pc->mode == PX_TRACKING_BCAST || u->tracked_epoch != pc->epoch) return;
    /* Redis forgets what a closed connection read: invalidations for the
     * entries it filled would never come */
    cache_flush(pc->cache);
    pc->flush_tracking++;
    px_notice("cache flushed reason=\"tracked upstream connection lost\" id=%llu", (unsigned long long)u->id);
}

void px_caching_before_read(px_client *c, px_upstream *u, int cacheable) {
    struct px_caching *pc = c->srv->caching;
    if (!cacheable || pc == NULL || pc->mode != PX_TRACKING_OPTIN || u->tracked_epoch != pc->epoch) return;
    static const char caching_yes[] = "*3\r\n$6\r\nCLIENT\r\n$7\r\nCACHING\r\n$3\r\nYES\r\n";
    px_req *r = px_req_new(c->srv, NULL, PX_REQ_DISCARD);
    if (r != NULL) px_upstream_send(u, r, caching_yes, sizeof caching_yes - 1);
}

/* May a read sent on u fill the cache? */
static int conn_tracked(struct px_caching *pc, px_upstream *u) {
    return pc->mode == PX_TRACKING_BCAST || (u != NULL && u->tracked_epoch == pc->epoch && pc->epoch != 0);
}

static void on_command_table(void *arg, const char *reply, size_t len) {
    px_server *srv = arg;
    struct px_caching *pc = srv->caching;
    cmdtable *t = cmdtable_new();
    if (t == NULL) return;
    int n = cmdtable_load_command_reply(t, reply, len);
    if (n <= 0) {
        px_warning("COMMAND reply unreadable: writes cannot be classified, caching stays off");
        cmdtable_free(t);
        return;
    }
    for (int i = 0; i < srv->cfg->nreadonly_scripts; i++) cmdtable_add_readonly_script(t, srv->cfg->readonly_scripts[i]);
    if (srv->cfg->profile == PX_PROFILE_JUICEFS)
        for (size_t i = 0; i < sizeof juicefs_readonly_scripts / sizeof *juicefs_readonly_scripts; i++)
            cmdtable_add_readonly_script(t, juicefs_readonly_scripts[i]);
    if (pc->cmdt) cmdtable_free(pc->cmdt);
    pc->cmdt = t;
    px_verbose("command table loaded commands=%d", n);
}

/* ------------------------------------------------------------------------ */
/* setup */

static int add_rule_line(px_server *srv, const char *line, char *err, size_t errlen) {
    char cmd[16];
    const char *sp = strchr(line, ' ');
    if (sp == NULL || (size_t)(sp - line) >= sizeof cmd) {
        snprintf(err, errlen, "cache-rule '%s': expected COMMAND PATTERN", line);
        return -1;
    }
    memcpy(cmd, line, (size_t)(sp - line));
    cmd[sp - line] = '\0';
    return cache_rules_add(&srv->caching->rules, cmd, sp + 1, srv->cfg->key_prefix, err, errlen);
}

int px_caching_init(px_server *srv) {
    px_config *cfg = srv->cfg;
    char err[512];
    if (cfg->cache_max_memory == 0) {
        px_notice("cache off (cache-max-memory 0): plain proxy");
        return 0;
    }
    struct px_caching *pc = calloc(1, sizeof *pc);
    if (pc == NULL) return -1;
    srv->caching = pc;
    cache_rules_init(&pc->rules);
    if (cfg->profile == PX_PROFILE_JUICEFS) {
        if (add_rule_line(srv, "GET i[1-9]*", err, sizeof err) != 0 ||
            add_rule_line(srv, "HGET d[1-9]*", err, sizeof err) != 0)
            goto bad;
    }
    for (int i = 0; i < cfg->ncache_rules; i++)
        if (add_rule_line(srv, cfg->cache_rules[i], err, sizeof err) != 0) goto bad;
    if (pc->rules.nrules == 0) {
        px_notice("cache off: no cache rules (profile none and no cache-rule)");
        px_caching_deinit(srv);
        return 0;
    }
    if (cache_rules_derive_prefixes(&pc->rules, err, sizeof err) != 0) goto bad;

    cache_config cc = {(size_t)cfg->cache_max_memory, (size_t)cfg->cache_max_value,
                       (int64_t)cfg->cache_ttl * 1000};
    pc->cache = cache_new(&cc);
    if (pc->cache == NULL) {
        snprintf(err, sizeof err, "out of memory");
        goto bad;
    }

    if (px_upstream_resolve(srv, err, sizeof err) != 0) {
        /* not fatal: Redis may come later; the pools resolve again */
        px_warning("cannot resolve the upstream for the invalidation connection yet: %s", err);
    }
    pc->mode = cfg->tracking_mode;
    inv_config ic;
    memset(&ic, 0, sizeof ic);
    ic.bcast = pc->mode == PX_TRACKING_BCAST;
    memcpy(&ic.addr, &srv->up_sa, sizeof ic.addr);
    ic.addrlen = srv->up_salen;
    ic.user = cfg->up.has_user ? cfg->up.user : NULL;
    ic.pass = cfg->up.has_pass ? cfg->up.pass : NULL;
    ic.prefixes = (const char *const *)pc->rules.prefixes;
    ic.nprefixes = pc->rules.all_keys ? 0 : pc->rules.nprefixes;
    ic.ping_ms = cfg->tracking_keepalive_ms;
    ic.timeout_ms = cfg->tracking_timeout_ms;
    inv_callbacks cb = {on_invalidate, on_flush, on_active, on_command_table};
    pc->inv = inv_new(srv->base, &ic, &cb, srv);
    if (pc->inv == NULL) {
        snprintf(err, sizeof err, "out of memory");
        goto bad;
    }
    inv_start(pc->inv);
    {
        char list[512] = "";
        size_t n = 0;
        for (int i = 0; i < ic.nprefixes && n < sizeof list - 1; i++)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? "," : "", pc->rules.prefixes[i]);
        static const char *modes[] = {"bcast", "default", "optin"};
        px_notice("cache on max_memory=%lld max_value=%lld rules=%d tracking=%s prefixes=%s",
                  cfg->cache_max_memory, cfg->cache_max_value, pc->rules.nrules, modes[pc->mode],
                  !ic.bcast ? "(tracked per read)" : ic.nprefixes ? list : "(all keys)");
    }
    return 0;

bad:
    px_warning("cache setup failed: %s", err);
    px_caching_deinit(srv);
    return -1;
}

void px_caching_deinit(px_server *srv) {
    struct px_caching *pc = srv->caching;
    if (pc == NULL) return;
    if (pc->inv) inv_free(pc->inv);
    if (pc->cache) cache_free(pc->cache);
    if (pc->cmdt) cmdtable_free(pc->cmdt);
    cache_rules_deinit(&pc->rules);
    for (int i = 0; i < pc->nusers; i++) free(pc->users[i]);
    free(pc);
    srv->caching = NULL;
}

void px_caching_reconfigure(px_server *srv) {
    struct px_caching *pc = srv->caching;
    if (pc == NULL) return;
    cache_config cc = {(size_t)srv->cfg->cache_max_memory, (size_t)srv->cfg->cache_max_value,
                       (int64_t)srv->cfg->cache_ttl * 1000};
    cache_set_config(pc->cache, &cc);
}

int px_caching_active(const px_server *srv) {
    return srv->caching != NULL && srv->caching->active && srv->caching->cmdt != NULL;
}

/* ------------------------------------------------------------------------ */
/* helpers */

/* The ACL partition of a client: one per upstream user name ("default" and
 * no user at all are the same user). 0 when the table is full: then the
 * client is not served from the cache at all. */
static uint32_t partition_of(struct px_caching *pc, const char *user) {
    if (user == NULL || strcmp(user, "default") == 0) return 1;
    for (int i = 0; i < pc->nusers; i++)
        if (strcmp(pc->users[i], user) == 0) return (uint32_t)i + 2;
    if (pc->nusers >= (int)(sizeof pc->users / sizeof pc->users[0])) return 0;
    pc->users[pc->nusers] = strdup(user);
    if (pc->users[pc->nusers] == NULL) return 0;
    return (uint32_t)(pc->nusers++) + 2;
}

/* The kind of a cacheable read, or 0. */
static int cacheable_kind(struct px_caching *pc, const resp_arg *a, int argc) {
    int kind;
    if (argc == 2 && resp_arg_is(a[0].ptr, a[0].len, "GET"))
        kind = CACHE_KIND_GET;
    else if (argc == 3 && resp_arg_is(a[0].ptr, a[0].len, "HGET"))
        kind = CACHE_KIND_HGET;
    else
        return 0;
    return cache_rules_match(&pc->rules, kind, a[1].ptr, a[1].len) ? kind : 0;
}

/* Could any rule ever cache something under this key? */
static int key_is_cacheable(struct px_caching *pc, const char *key, size_t klen) {
    return cache_rules_match(&pc->rules, CACHE_KIND_GET, key, klen) ||
           cache_rules_match(&pc->rules, CACHE_KIND_HGET, key, klen);
}

/* ------------------------------------------------------------------------ */
/* hits */

int px_caching_try_hit(px_client *c, int *cacheable) {
    struct px_caching *pc = c->srv->caching;
    *cacheable = 0;
    if (pc == NULL || !px_caching_active(c->srv)) return 0;
    /* A client that has not authenticated, where Redis wants a password,
     * must get Redis's NOAUTH: never a cached value, never a fill. */
    if (c->pass == NULL && c->srv->open_access != 1) return 0;
    const resp_arg *a = c->rq.argv;
    int kind = cacheable_kind(pc, a, c->rq.argc);
    if (kind == 0) return 0;
    uint32_t part = partition_of(pc, c->user);
    if (part == 0) return 0;
    *cacheable = 1;
    /* A client with requests in flight may have a write among them that
     * the cache does not reflect yet: its reads go to Redis, in order. */
    if (c->inflight > 0 || c->slots_head != NULL) {
        pc->bypassed++;
        return 0;
    }
    const char *val;
    size_t vlen;
    int is_nil;
    const char *field = kind == CACHE_KIND_HGET ? a[2].ptr : "";
    size_t flen = kind == CACHE_KIND_HGET ? a[2].len : 0;
    if (!cache_get(pc->cache, part, c->db, kind, a[1].ptr, a[1].len, field, flen, px_now_ms(), &val, &vlen,
                   &is_nil))
        return 0;
    pc->hits_served++;
    resp_buf_reset(&c->scratch);
    if (is_nil)
        resp_enc_null(&c->scratch, c->proto);
    else
        resp_enc_bulk(&c->scratch, val, vlen);
    px_io_write(&c->io, c->scratch.data, c->scratch.len);
    return 1;
}

/* ------------------------------------------------------------------------ */
/* sends */

typedef struct key_sink {
    struct px_caching *pc;
    resp_buf *keys;   /* where the keys are recorded for the reply */
} key_sink;

static void invalidate_now(void *arg, const char *key, size_t klen) {
    key_sink *ks = arg;
    if (!key_is_cacheable(ks->pc, key, klen)) return;
    cache_invalidate_key(ks->pc->cache, key, klen);
    if (ks->keys != NULL) {
        uint32_t n = (uint32_t)klen;
        resp_buf_append(ks->keys, &n, sizeof n);
        resp_buf_append(ks->keys, key, klen);
    }
}

static void flush_for_write(struct px_caching *pc, const resp_arg *cmd) {
    cache_flush(pc->cache);
    pc->flush_write++;
    px_debug("cache flushed reason=\"write with unknown keys\" cmd=%.*s", (int)(cmd->len > 32 ? 32 : cmd->len),
             cmd->ptr);
}

void px_caching_on_send(px_client *c, px_upstream *u, px_req *r, int cacheable, int in_multi) {
    struct px_caching *pc = c->srv->caching;
    if (pc == NULL) return;
    const resp_arg *a = c->rq.argv;
    int argc = c->rq.argc;

    if (cacheable && r != NULL && !in_multi) {
        if (!px_caching_active(c->srv) || !conn_tracked(pc, u)) return;
        int kind = cacheable_kind(pc, a, argc);
        uint32_t part = partition_of(pc, c->user);
        const char *field = kind == CACHE_KIND_HGET ? a[2].ptr : "";
        size_t flen = kind == CACHE_KIND_HGET ? a[2].len : 0;
        uint64_t token =
            cache_fill_begin(pc->cache, part, c->db, kind, a[1].ptr, a[1].len, field, flen, px_now_ms());
        if (token == 0) return;
        /* identity for the reply: part, db, kind, klen, key, field */
        size_t n = 4 + 4 + 4 + 4 + a[1].len + flen;
        char *id = malloc(n);
        if (id == NULL) {
            cache_fill_abort(pc->cache, token, part, c->db, kind, a[1].ptr, a[1].len, field, flen);
            return;
        }
        uint32_t hdr[4] = {part, (uint32_t)c->db, (uint32_t)kind, (uint32_t)a[1].len};
        memcpy(id, hdr, sizeof hdr);
        memcpy(id + 16, a[1].ptr, a[1].len);
        memcpy(id + 16 + a[1].len, field, flen);
        r->aux = id;
        r->aux_len = n;
        r->aux_flags |= PX_AUX_FILL;
        r->fill_token = token;
        u->filled = 1;
        pc->fills_begun++;
        return;
    }

    if (pc->cmdt == NULL) {
        /* Writes cannot be classified: nothing is cached either (hits and
         * fills need the table), except what filled before a reconnect,
         * which the tracking loss flushed. */
        return;
    }

    resp_buf keys;
    resp_buf_init(&keys);
    key_sink ks = {pc, r != NULL || in_multi ? &keys : NULL};
    int w = cmdtable_writes(pc->cmdt, argc, a, invalidate_now, &ks);
    /* Change data without being writes by Redis's flags: a role change
     * (C6) or a DEBUG RELOAD/POPULATE. */
    if (argc >= 1 && (resp_arg_is(a[0].ptr, a[0].len, "REPLICAOF") || resp_arg_is(a[0].ptr, a[0].len, "SLAVEOF") ||
                      resp_arg_is(a[0].ptr, a[0].len, "FAILOVER") || resp_arg_is(a[0].ptr, a[0].len, "DEBUG")))
        w = CMDT_WRITES_UNKNOWN;
    /* A permission change: what a user may read from the cache (C8) is
     * what Redis now lets it read, so start over. */
    if (argc >= 2 && resp_arg_is(a[0].ptr, a[0].len, "ACL") &&
        (resp_arg_is(a[1].ptr, a[1].len, "SETUSER") || resp_arg_is(a[1].ptr, a[1].len, "DELUSER") ||
         resp_arg_is(a[1].ptr, a[1].len, "LOAD")))
        w = CMDT_WRITES_UNKNOWN;
    if (w == CMDT_WRITES_UNKNOWN) flush_for_write(pc, &a[0]);
    if (in_multi) {
        /* queued: invalidated again when EXEC's reply comes */
        if (keys.len) resp_buf_append(&c->txn_keys, keys.data, keys.len);
        if (w == CMDT_WRITES_UNKNOWN) c->txn_flush = 1;
        resp_buf_deinit(&keys);
        return;
    }
    if (r != NULL) {
        if (w == CMDT_WRITES_UNKNOWN) r->aux_flags |= PX_AUX_FLUSH;
        if (keys.len) {
            r->aux = keys.data; /* ownership moves to r */
            r->aux_len = keys.len;
            r->aux_flags |= PX_AUX_INVAL;
            return;
        }
    }
    resp_buf_deinit(&keys);
}

/* ------------------------------------------------------------------------ */
/* replies */

static void invalidate_records(struct px_caching *pc, const char *p, size_t n) {
    size_t off = 0;
    while (off + 4 <= n) {
        uint32_t klen;
        memcpy(&klen, p + off, 4);
        off += 4;
        if (off + klen > n) break;
        cache_invalidate_key(pc->cache, p + off, klen);
        off += klen;
    }
}

/* Parses a bulk or nil reply frame. Returns 1 (bulk, in *val and *vlen), 2 (nil),
 * 0 (anything else: not cacheable, C7). */
static int bulk_or_nil(const char *d, size_t len, const char **val, size_t *vlen) {
    if (len >= 3 && d[0] == '_') return 2;
    if (len < 4 || d[0] != '$') return 0;
    if (d[1] == '-') return 2;
    size_t n = 0, i = 1;
    while (i < len && d[i] >= '0' && d[i] <= '9') n = n * 10 + (size_t)(d[i++] - '0');
    if (i + 2 + n + 2 != len) return 0;
    *val = d + i + 2;
    *vlen = n;
    return 1;
}

static int starts_with(const char *d, size_t len, const char *p) {
    size_t n = strlen(p);
    return len >= n && memcmp(d, p, n) == 0;
}

void px_caching_on_reply(px_client *c, px_req *r, const char *data, size_t len) {
    struct px_caching *pc = c->srv->caching;
    if (pc == NULL) return;
    if (len > 0 && data[0] == '-' &&
        (starts_with(data, len, "-LOADING") || starts_with(data, len, "-READONLY") ||
         starts_with(data, len, "-MASTERDOWN"))) {
        /* Redis is not (or no longer) the master we cached from (C6) */
        cache_flush(pc->cache);
        pc->flush_failover++;
    }
    if (r->aux_flags & PX_AUX_FILL) {
        uint32_t hdr[4];
        memcpy(hdr, r->aux, sizeof hdr);
        const char *key = r->aux + 16, *field = key + hdr[3];
        size_t flen = r->aux_len - 16 - hdr[3];
        const char *val = NULL;
        size_t vlen = 0;
        int k = bulk_or_nil(data, len, &val, &vlen);
        if (k == 0)
            cache_fill_abort(pc->cache, r->fill_token, hdr[0], (int)hdr[1], (int)hdr[2], key, hdr[3], field, flen);
        else
            cache_fill_complete(pc->cache, r->fill_token, hdr[0], (int)hdr[1], (int)hdr[2], key, hdr[3], field, flen,
                                val, vlen, k == 2, px_now_ms());
    }
    if (r->aux_flags & PX_AUX_INVAL) invalidate_records(pc, r->aux, r->aux_len);
    if (r->aux_flags & PX_AUX_FLUSH) flush_for_write(pc, &(resp_arg){"(reply)", 7});
}

void px_caching_release_req(px_req *r) {
    free(r->aux);
    r->aux = NULL;
    r->aux_len = 0;
    r->aux_flags = 0;
}

void px_caching_txn_end(px_client *c, int exec) {
    struct px_caching *pc = c->srv->caching;
    if (pc != NULL && exec) {
        invalidate_records(pc, c->txn_keys.data, c->txn_keys.len);
        if (c->txn_flush) flush_for_write(pc, &(resp_arg){"EXEC", 4});
    }
    resp_buf_reset(&c->txn_keys);
    c->txn_flush = 0;
}

/* ------------------------------------------------------------------------ */
/* INFO */

void px_caching_info(px_server *srv, resp_buf *b) {
    struct px_caching *pc = srv->caching;
    resp_buf_printf(b, "# sidecache\r\n");
    resp_buf_printf(b, "sidecache_version:0.1.0\r\n");
    resp_buf_printf(b, "connected_clients:%d\r\n", srv->nclients);
    if (pc == NULL) {
        resp_buf_printf(b, "cache_enabled:0\r\n");
        return;
    }
    const cache_stats *st = cache_get_stats(pc->cache);
    const inv_stats *is = inv_get_stats(pc->inv);
    uint64_t lookups = st->hits + st->misses;
    resp_buf_printf(b, "cache_enabled:1\r\n");
    resp_buf_printf(b, "tracking_state:%s\r\n", inv_state_name(inv_get_state(pc->inv)));
    static const char *modes[] = {"bcast", "default", "optin"};
    resp_buf_printf(b, "tracking_mode:%s\r\n", modes[pc->mode]);
    resp_buf_printf(b, "tracking_last_error:%s\r\n", is->last_error);
    resp_buf_printf(b, "cache_hits:%llu\r\n", (unsigned long long)st->hits);
    resp_buf_printf(b, "cache_misses:%llu\r\n", (unsigned long long)st->misses);
    resp_buf_printf(b, "cache_hit_ratio:%.4f\r\n", lookups ? (double)st->hits / (double)lookups : 0.0);
    resp_buf_printf(b, "cache_bypassed_in_flight:%llu\r\n", (unsigned long long)pc->bypassed);
    resp_buf_printf(b, "cache_fills:%llu\r\n", (unsigned long long)st->fills);
    resp_buf_printf(b, "cache_fills_rejected:%llu\r\n", (unsigned long long)st->fills_rejected);
    resp_buf_printf(b, "cache_fills_too_big:%llu\r\n", (unsigned long long)st->fills_too_big);
    resp_buf_printf(b, "invalidation_messages:%llu\r\n", (unsigned long long)is->messages);
    resp_buf_printf(b, "invalidation_keys:%llu\r\n", (unsigned long long)is->keys);
    resp_buf_printf(b, "cache_invalidations:%llu\r\n", (unsigned long long)st->invalidations);
    resp_buf_printf(b, "cache_keys_purged:%llu\r\n", (unsigned long long)st->keys_purged);
    resp_buf_printf(b, "cache_flushes:%llu\r\n", (unsigned long long)st->flushes);
    resp_buf_printf(b, "cache_flushes_tracking_lost:%llu\r\n", (unsigned long long)pc->flush_tracking);
    resp_buf_printf(b, "cache_flushes_null_invalidation:%llu\r\n", (unsigned long long)pc->flush_null);
    resp_buf_printf(b, "cache_flushes_write_unknown_keys:%llu\r\n", (unsigned long long)pc->flush_write);
    resp_buf_printf(b, "cache_flushes_failover:%llu\r\n", (unsigned long long)pc->flush_failover);
    resp_buf_printf(b, "cache_entries:%zu\r\n", st->entries);
    resp_buf_printf(b, "cache_pending_fills:%zu\r\n", st->pending);
    resp_buf_printf(b, "cache_used_bytes:%zu\r\n", st->used_bytes);
    resp_buf_printf(b, "cache_max_bytes:%lld\r\n", srv->cfg->cache_max_memory);
    resp_buf_printf(b, "cache_evictions:%llu\r\n", (unsigned long long)st->evictions);
    resp_buf_printf(b, "cache_expired:%llu\r\n", (unsigned long long)st->expired);
    resp_buf_printf(b, "tracking_connects:%llu\r\n", (unsigned long long)is->connects);
    resp_buf_printf(b, "tracking_losses:%llu\r\n", (unsigned long long)is->losses);
}
