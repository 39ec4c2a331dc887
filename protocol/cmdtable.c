/*
 * protocol/cmdtable.c — which keys a command writes, learned from COMMAND.
 *
 * Data model
 * ----------
 * A cmdtable holds two uthash tables:
 *   cmds     one cmdt_entry per command or subcommand, keyed by its lower-case
 *            name ("set", "config|set"), with what COMMAND said about it
 *            (arity, flags, first/last/step) and a `kind` chosen from the name
 *            when the entry is made: the commands whose keys COMMAND cannot
 *            describe (movable keys, scripts) get a rule of their own below;
 *   scripts  the SHA1 digests (lower-case hex) of scripts known read-only.
 *
 * Classifying a request follows Redis's own order (processCommand): find the
 * command ("name|sub" first, then "name"), check its arity, then find its
 * keys. Whatever Redis refuses before running it changes nothing, so it is
 * CMDT_WRITES_NOTHING; whatever we cannot be sure about is
 * CMDT_WRITES_UNKNOWN, which costs a cache flush but never a stale read.
 *
 * Invariants
 * ----------
 * - Reported keys are a superset of the keys Redis may change: for the
 *   range rule every key of the range (sources of SINTERSTORE or COPY
 *   included), for STORE options every argument that follows a STORE
 *   token. Over-reporting costs a purge; under-reporting breaks C1.
 * - A NOTHING decision taken from an argument (a bad numkeys, a syntax
 *   error) mirrors the check Redis makes before it changes anything: its
 *   string2ll() for integers, strcasecmp() (which stops at a NUL byte) for
 *   option words. An option we do not know yields UNKNOWN, since a later
 *   Redis may accept it.
 * - cmdtable_load_command_reply() changes the table only when the whole
 *   reply was understood: it builds a staging table and merges it after.
 * - Every integer from the reply is checked to fit an int before use, and
 *   all key arithmetic is done in long long, so no COMMAND reply or request
 *   can overflow it.
 */
#include "protocol/cmdtable.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* OOM in uthash marks the element instead of exiting; every element type
 * below has an `oom` field, cleared before each add. */
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) ((obj)->oom = 1)
#include <uthash.h>
#include "util/uthash_dense.h"

/* Longest command name kept ("name|sub" included). Redis's longest is under
 * 40 bytes; the bound lets lookups lower-case into a stack buffer. */
#define CMDT_NAME_MAX 255
/* Subcommands of subcommands are tolerated to this depth. */
#define CMDT_MAX_NESTING 4
#define SHA1_HEX_LEN 40

/* How the keys of a command are found. */
enum cmdt_kind {
    K_RANGE = 0,   /* COMMAND's first/last/step, with the write flag */
    K_NONE,        /* writes nothing whatever its flags say */
    K_SCRIPT,      /* EVAL, FCALL: declared keys, UNKNOWN */
    K_EVALSHA,     /* EVALSHA: as K_SCRIPT unless the SHA is read-only */
    K_DEST_NUMKEYS,/* Z*STORE dest numkeys key...: only dest is written */
    K_SORT,        /* SORT key ... [STORE dest] */
    K_MPOP1,       /* LMPOP/ZMPOP numkeys key...: every key may be popped */
    K_MPOP2,       /* BLMPOP/BZMPOP timeout numkeys key... */
    K_GEORADIUS,   /* GEORADIUS[BYMEMBER] ... [STORE|STOREDIST dest] */
    K_MIGRATE,     /* MIGRATE host port key|"" db timeout ... [KEYS k...] */
    K_XREADGROUP,  /* XREADGROUP ... STREAMS k... id...: group state changes */
    K_PFCOUNT,     /* PFCOUNT key...: may rewrite the HLL's cached cardinality */
};

static const struct {
    const char *name;
    unsigned char kind;
} special_names[] = {
    /* Transactions: the proxy classifies the queued commands itself. */
    {"multi", K_NONE},
    {"exec", K_NONE},
    {"discard", K_NONE},
    {"watch", K_NONE},
    /* Scripts are "may_replicate", not "write": named here, flags aside. */
    {"eval", K_SCRIPT},
    {"fcall", K_SCRIPT},
    {"evalsha", K_EVALSHA},
    {"eval_ro", K_NONE},
    {"evalsha_ro", K_NONE},
    {"fcall_ro", K_NONE},
    {"sort_ro", K_NONE},
    /* The movable-keys writes of Redis 7. */
    {"zunionstore", K_DEST_NUMKEYS},
    {"zinterstore", K_DEST_NUMKEYS},
    {"zdiffstore", K_DEST_NUMKEYS},
    {"sort", K_SORT},
    {"lmpop", K_MPOP1},
    {"zmpop", K_MPOP1},
    {"blmpop", K_MPOP2},
    {"bzmpop", K_MPOP2},
    {"georadius", K_GEORADIUS},
    {"georadiusbymember", K_GEORADIUS},
    {"migrate", K_MIGRATE},
    {"xreadgroup", K_XREADGROUP},
    /* Flagged readonly, yet PFCOUNT of one key stores the cardinality it
     * computed in the key's header (and Redis signals the key modified). */
    {"pfcount", K_PFCOUNT},
};

typedef struct cmdt_entry {
    UT_hash_handle hh;
    int arity;
    int flags;
    int first_key;
    int last_key;
    int step;
    unsigned char kind;
    unsigned char has_subs; /* Redis reported subcommands: "name|sub" needed */
    unsigned char oom;
    size_t nlen;
    char name[]; /* lower case, NUL-terminated */
} cmdt_entry;

typedef struct cmdt_script {
    UT_hash_handle hh;
    unsigned char oom;
    char sha[SHA1_HEX_LEN]; /* lower case */
} cmdt_script;

/* The entries last found, by a hash of the name's length, first and last
 * letters (lookup): a proxy sees the same few commands over and over (a
 * JuiceFS batch unlink's transaction is ZADD, DEL, INCRBY, DECR, 250 times),
 * and a hit here costs a short compare instead of lower-casing, hashing and
 * a table probe. Only entries go in (never "not found": the table may yet
 * get the name), and entries live as long as the table. */
#define CMDT_MEMO 64

struct cmdtable {
    cmdt_entry *cmds;
    cmdt_script *scripts;
    const cmdt_entry *memo[CMDT_MEMO];
    size_t entry_fields; /* elements of the last loaded reply's entries (the most) */
};

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */

static unsigned char lower(unsigned char c) {
    return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + ('a' - 'A')) : c;
}

static void lower_copy(char *dst, const char *src, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = (char)lower((unsigned char)src[i]);
}

/* Redis compares option words with strcasecmp() on the argument's bytes,
 * which stops at the first NUL: "store\0x" is STORE to Redis, and so here.
 * `word` is lower case. */
static int arg_is(const resp_arg *a, const char *word) {
    size_t i = 0;
    for (; i < a->len && a->ptr[i] != '\0'; i++) {
        if (word[i] == '\0' || lower((unsigned char)a->ptr[i]) != (unsigned char)word[i])
            return 0;
    }
    return word[i] == '\0';
}

/* Case-insensitive comparison of a counted string with a lower-case word,
 * full length (for flag names in the COMMAND reply). */
static int mem_is(const char *p, size_t n, const char *word) {
    size_t wl = strlen(word);
    if (n != wl)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (lower((unsigned char)p[i]) != (unsigned char)word[i])
            return 0;
    return 1;
}

static unsigned char kind_of(const char *lname, size_t n) {
    for (size_t i = 0; i < sizeof(special_names) / sizeof(special_names[0]); i++)
        if (strlen(special_names[i].name) == n && memcmp(special_names[i].name, lname, n) == 0)
            return special_names[i].kind;
    return K_RANGE;
}

static cmdt_entry *find_lower(const cmdtable *t, const char *lname, size_t n) {
    cmdt_entry *e = NULL;
    HASH_FIND(hh, t->cmds, lname, (unsigned)n, e);
    return e;
}

/* ------------------------------------------------------------------------ */
/* Table                                                                    */

cmdtable *cmdtable_new(void) {
    return calloc(1, sizeof(cmdtable));
}

static void free_cmds(cmdt_entry **head) {
    cmdt_entry *e, *tmp;
    HASH_ITER(hh, *head, e, tmp) {
        HASH_DEL(*head, e);
        free(e);
    }
}

void cmdtable_free(cmdtable *t) {
    cmdt_script *s, *stmp;
    if (t == NULL)
        return;
    free_cmds(&t->cmds);
    HASH_ITER(hh, t->scripts, s, stmp) {
        HASH_DEL(t->scripts, s);
        free(s);
    }
    free(t);
}

size_t cmdtable_count(const cmdtable *t) {
    return HASH_COUNT(t->cmds);
}

int cmdtable_from_redis6(const cmdtable *t) {
    return t != NULL && t->entry_fields > 0 && t->entry_fields < 10;
}

static void entry_set(cmdt_entry *e, int arity, int flags, int first_key, int last_key,
                      int step) {
    e->arity = arity;
    e->flags = flags;
    e->first_key = first_key;
    e->last_key = last_key;
    e->step = step;
}

/* Adds or updates one entry; returns it, or NULL on OOM or a bad name.
 * Adding "a|b" marks an existing "a" as a container. */
static cmdt_entry *entry_put(cmdtable *t, const char *name, size_t nlen, int arity, int flags,
                             int first_key, int last_key, int step) {
    char lname[CMDT_NAME_MAX + 1];
    cmdt_entry *e;
    const char *bar;

    if (name == NULL || nlen == 0 || nlen > CMDT_NAME_MAX)
        return NULL;
    lower_copy(lname, name, nlen);
    lname[nlen] = '\0';
    e = find_lower(t, lname, nlen);
    if (e == NULL) {
        e = malloc(sizeof(*e) + nlen + 1);
        if (e == NULL)
            return NULL;
        memset(e, 0, sizeof(*e));
        memcpy(e->name, lname, nlen + 1);
        e->nlen = nlen;
        e->kind = kind_of(lname, nlen);
        HASH_ADD_KEYPTR(hh, t->cmds, e->name, (unsigned)nlen, e);
        if (e->oom) {
            free(e);
            return NULL;
        }
    }
    entry_set(e, arity, flags, first_key, last_key, step);
    bar = memchr(lname, '|', nlen);
    if (bar != NULL && bar > lname) {
        cmdt_entry *container = find_lower(t, lname, (size_t)(bar - lname));
        if (container != NULL)
            container->has_subs = 1;
    }
    return e;
}

int cmdtable_add(cmdtable *t, const char *name, size_t nlen, int arity, int flags, int first_key,
                 int last_key, int step) {
    return entry_put(t, name, nlen, arity, flags, first_key, last_key, step) ? 0 : -1;
}

int cmdtable_add_readonly_script(cmdtable *t, const char *sha1_hex) {
    char sha[SHA1_HEX_LEN];
    cmdt_script *s = NULL;

    if (sha1_hex == NULL || strnlen(sha1_hex, SHA1_HEX_LEN + 1) != SHA1_HEX_LEN)
        return -1;
    for (size_t i = 0; i < SHA1_HEX_LEN; i++) {
        unsigned char c = lower((unsigned char)sha1_hex[i]);
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return -1;
        sha[i] = (char)c;
    }
    HASH_FIND(hh, t->scripts, sha, SHA1_HEX_LEN, s);
    if (s != NULL)
        return 0;
    if ((s = calloc(1, sizeof(*s))) == NULL)
        return -1;
    memcpy(s->sha, sha, SHA1_HEX_LEN);
    HASH_ADD(hh, t->scripts, sha, SHA1_HEX_LEN, s);
    if (s->oom) {
        free(s);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Loading a COMMAND reply                                                  */

/* One framed value of the reply; offsets are into the whole reply. */
typedef struct rview {
    char type;
    int is_null;
    long long count; /* elements (maps/attributes: pairs), bulk length, integer */
    size_t off;      /* payload (aggregates: first element) */
    size_t len;
    size_t next;     /* first byte after the value */
} rview;

/* The elements of one aggregate, framed one at a time. */
typedef struct agg_iter {
    size_t cur, end;
    long long left;
} agg_iter;

typedef struct loader {
    resp_reply_parser p;
    const char *buf;
    cmdtable *staging;
    size_t entry_fields; /* the most elements of a top-level entry */
} loader;

/* Frames the one value that starts at `at` and must end by `end`. */
static int frame_at(loader *L, size_t at, size_t end, rview *v) {
    resp_reply_parser *p = &L->p;
    if (at >= end)
        return -1;
    resp_reply_reset(p);
    if (resp_reply_parse(p, L->buf + at, end - at) != RESP_OK)
        return -1;
    v->type = p->type;
    v->is_null = p->is_null;
    v->count = p->count;
    v->off = at + p->payload_off;
    v->len = p->payload_len;
    v->next = at + p->frame_len;
    return 0;
}

static void iter_init(agg_iter *it, const rview *agg) {
    it->cur = agg->off;
    it->end = agg->off + agg->len;
    /* The framer bounds count by max_multibulk_len: no overflow. */
    it->left = agg->is_null ? 0 : (agg->type == '%' ? 2 * agg->count : agg->count);
}

static int iter_next(loader *L, agg_iter *it, rview *v) {
    if (it->left <= 0 || frame_at(L, it->cur, it->end, v) < 0)
        return -1;
    it->cur = v->next;
    it->left--;
    return 0;
}

static int view_int(const rview *v, int *out) {
    if (v->type != ':' || v->count < INT_MIN || v->count > INT_MAX)
        return -1;
    *out = (int)v->count;
    return 0;
}

static int view_str(const rview *v) {
    return (v->type == '$' || v->type == '+') && !v->is_null;
}

/* The types a client can block on (BLPOP, BZPOPMIN, XREAD BLOCK), by ACL
 * category, and the commands that give a key a whole value of any type. */
static const char *const waking_categories[] = {"@list", "@sortedset", "@geo", "@stream"};
static const char *const waking_names[] = {"rename", "renamenx", "copy",  "restore", "restore-asking",
                                           "move",   "sort",     "swapdb"};

/* Does a command (its ACL categories in cats) make blocked clients ready? */
static int wakes_blocked(loader *L, const rview *cats, const char *name, size_t nlen) {
    for (size_t i = 0; i < sizeof waking_names / sizeof waking_names[0]; i++)
        if (mem_is(name, nlen, waking_names[i]))
            return 1;
    if ((cats->type != '*' && cats->type != '~') || cats->is_null)
        return 0;
    agg_iter ci;
    rview c;
    iter_init(&ci, cats);
    while (ci.left > 0) {
        if (iter_next(L, &ci, &c) < 0 || !view_str(&c))
            return 0;
        for (size_t i = 0; i < sizeof waking_categories / sizeof waking_categories[0]; i++)
            if (mem_is(L->buf + c.off, c.len, waking_categories[i]))
                return 1;
    }
    return 0;
}

static int load_entry(loader *L, const rview *ent, int depth);

/* Element 10 of a Redis 7 entry: the subcommands of `container`. */
static int load_subcommands(loader *L, const rview *subs, cmdt_entry *container, int depth) {
    agg_iter it;
    rview v;

    if (subs->is_null)
        return 0;
    if (subs->type != '*' && subs->type != '~')
        return -1;
    if (subs->count > 0) {
        if (depth + 1 >= CMDT_MAX_NESTING)
            return -1;
        container->has_subs = 1;
    }
    iter_init(&it, subs);
    while (it.left > 0) {
        if (iter_next(L, &it, &v) < 0 || load_entry(L, &v, depth + 1) < 0)
            return -1;
    }
    return 0;
}

/* One entry: [name, arity, flags, first, last, step, acl, tips, specs, subs].
 * A null entry (COMMAND INFO of an unknown name) is skipped. */
static int load_entry(loader *L, const rview *ent, int depth) {
    agg_iter it;
    rview v;
    size_t name_off, name_len;
    int arity, flags = 0, first, last, step, idx;
    cmdt_entry *e;

    if (ent->is_null)
        return 0;
    if (ent->type != '*' || ent->count < 6)
        return -1;
    if (depth == 0 && (size_t)ent->count > L->entry_fields)
        L->entry_fields = (size_t)ent->count;
    iter_init(&it, ent);

    if (iter_next(L, &it, &v) < 0 || !view_str(&v) || v.len == 0 || v.len > CMDT_NAME_MAX)
        return -1;
    name_off = v.off;
    name_len = v.len;

    if (iter_next(L, &it, &v) < 0 || view_int(&v, &arity) < 0)
        return -1;

    if (iter_next(L, &it, &v) < 0 || (v.type != '*' && v.type != '~') || v.is_null)
        return -1;
    {
        agg_iter fit;
        rview f;
        iter_init(&fit, &v);
        while (fit.left > 0) {
            const char *fp;
            if (iter_next(L, &fit, &f) < 0 || !view_str(&f))
                return -1;
            fp = L->buf + f.off;
            if (mem_is(fp, f.len, "write"))
                flags |= CMDT_F_WRITE;
            else if (mem_is(fp, f.len, "readonly"))
                flags |= CMDT_F_READONLY;
            else if (mem_is(fp, f.len, "movablekeys"))
                flags |= CMDT_F_MOVABLEKEYS;
            else if (mem_is(fp, f.len, "admin"))
                flags |= CMDT_F_ADMIN;
            else if (mem_is(fp, f.len, "blocking"))
                flags |= CMDT_F_BLOCKING;
            else if (mem_is(fp, f.len, "no_multi"))
                flags |= CMDT_F_NO_MULTI;
            else if (mem_is(fp, f.len, "noscript"))
                flags |= CMDT_F_NOSCRIPT;
            else if (mem_is(fp, f.len, "pubsub"))
                flags |= CMDT_F_PUBSUB;
            else if (mem_is(fp, f.len, "denyoom"))
                flags |= CMDT_F_DENYOOM;
        }
    }

    if (iter_next(L, &it, &v) < 0 || view_int(&v, &first) < 0 ||
        iter_next(L, &it, &v) < 0 || view_int(&v, &last) < 0 ||
        iter_next(L, &it, &v) < 0 || view_int(&v, &step) < 0)
        return -1;

    /* The container goes in before its subcommands. */
    e = entry_put(L->staging, L->buf + name_off, name_len, arity, flags, first, last, step);
    if (e == NULL)
        return -1;

    /* Element 7 holds the ACL categories; tips and key specs are framed
     * (so checked), not used; element 10 holds the subcommands; later
     * elements are skipped. */
    for (idx = 7; it.left > 0; idx++) {
        if (iter_next(L, &it, &v) < 0)
            return -1;
        if (idx == 7 && wakes_blocked(L, &v, L->buf + name_off, name_len))
            e->flags |= CMDT_F_WAKES;
        if (idx == 10 && load_subcommands(L, &v, e, depth) < 0)
            return -1;
    }
    return 0;
}

/* Moves the staging entries into t. Can fail (OOM) only when t was not
 * empty, and then t holds part of them. */
static int merge(cmdtable *t, cmdtable *staging) {
    cmdt_entry *e, *tmp, *x;

    if (t->cmds == NULL) {
        t->cmds = staging->cmds;
        staging->cmds = NULL;
        return 0;
    }
    HASH_ITER(hh, staging->cmds, e, tmp) {
        x = find_lower(t, e->name, e->nlen);
        if (x != NULL) {
            entry_set(x, e->arity, e->flags, e->first_key, e->last_key, e->step);
            x->has_subs |= e->has_subs;
            continue;
        }
        HASH_DEL(staging->cmds, e);
        e->oom = 0;
        HASH_ADD_KEYPTR(hh, t->cmds, e->name, (unsigned)e->nlen, e);
        if (e->oom) {
            free(e);
            return -1;
        }
    }
    return 0;
}

int cmdtable_load_command_reply(cmdtable *t, const char *reply, size_t len) {
    loader L;
    rview top, ent;
    agg_iter it;
    int rc = -1;
    size_t added;

    if (reply == NULL || len == 0)
        return -1;
    resp_reply_init(&L.p, NULL);
    L.buf = reply;
    L.entry_fields = 0;
    if ((L.staging = cmdtable_new()) == NULL)
        goto out;
    if (frame_at(&L, 0, len, &top) < 0 || top.next != len || top.type != '*' || top.is_null)
        goto out;
    iter_init(&it, &top);
    while (it.left > 0) {
        if (iter_next(&L, &it, &ent) < 0 || load_entry(&L, &ent, 0) < 0)
            goto out;
    }
    added = cmdtable_count(L.staging);
    if (added > INT_MAX || merge(t, L.staging) < 0)
        goto out;
    t->entry_fields = L.entry_fields;
    rc = (int)added;
out:
    cmdtable_free(L.staging);
    resp_reply_deinit(&L.p);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Classifying a request                                                    */

typedef void (*key_cb)(void *arg, const char *key, size_t klen);

static void emit(key_cb on_key, void *arg, const resp_arg *a) {
    if (on_key != NULL)
        on_key(arg, a->ptr, a->len);
}

/* first..last by step, last < 0 counting from the end, bounded by argc
 * (Redis gives no keys past argc and lets the command fail). */
static void emit_range(int argc, const resp_arg *argv, long long first, long long last,
                       long long step, key_cb on_key, void *arg) {
    if (last < 0)
        last += argc;
    if (last >= argc)
        last = argc - 1;
    if (step <= 0)
        step = 1;
    for (long long j = first; j >= 1 && j <= last; j += step)
        emit(on_key, arg, &argv[j]);
}

/* numkeys at argv[idx], as Redis's string2ll reads it. */
static int numkeys_at(int argc, const resp_arg *argv, int idx, long long *n) {
    return idx < argc && resp_string2ll(argv[idx].ptr, argv[idx].len, n);
}

/* EVAL/EVALSHA/FCALL script numkeys key... arg... */
static int classify_script(int argc, const resp_arg *argv, key_cb on_key, void *arg) {
    long long n;
    /* evalGenericCommand/fcallCommandGeneric: not a number, negative, or
     * more than the arguments given: refused before the script runs. */
    if (!numkeys_at(argc, argv, 2, &n) || n < 0 || n > argc - 3)
        return CMDT_WRITES_NOTHING;
    emit_range(argc, argv, 3, 2 + n, 1, on_key, arg);
    return CMDT_WRITES_UNKNOWN;
}

static int script_readonly(const cmdtable *t, const resp_arg *sha) {
    char lsha[SHA1_HEX_LEN];
    cmdt_script *s = NULL;
    if (sha->len != SHA1_HEX_LEN)
        return 0;
    lower_copy(lsha, sha->ptr, SHA1_HEX_LEN);
    HASH_FIND(hh, t->scripts, lsha, SHA1_HEX_LEN, s);
    return s != NULL;
}

/* ZUNIONSTORE/ZINTERSTORE/ZDIFFSTORE dest numkeys key... [options] */
static int classify_dest_numkeys(int argc, const resp_arg *argv, key_cb on_key, void *arg) {
    long long n;
    /* zunionInterDiffGenericCommand: numkeys < 1 or beyond argc refused. */
    if (!numkeys_at(argc, argv, 2, &n) || n < 1 || n > argc - 3)
        return CMDT_WRITES_NOTHING;
    emit(on_key, arg, &argv[1]);
    return CMDT_WRITES_KEYS;
}

/* [L|Z]MPOP numkeys key... where, or BL/BZ with a timeout first. */
static int classify_mpop(int argc, const resp_arg *argv, int idx, key_cb on_key, void *arg) {
    long long n;
    /* lmpopGenericCommand/zmpopGenericCommand: numkeys >= 1 and the
     * LEFT|RIGHT / MIN|MAX word after the keys must be there. */
    if (!numkeys_at(argc, argv, idx, &n) || n < 1 || n > argc - idx - 2)
        return CMDT_WRITES_NOTHING;
    emit_range(argc, argv, idx + 1, idx + n, 1, on_key, arg);
    return CMDT_WRITES_KEYS;
}

/* Every argument after a STORE (or STOREDIST) word from argv[from] on. A
 * superset of what Redis's parser takes as the destination, however the
 * other options are laid out. */
static int classify_store(int argc, const resp_arg *argv, int from, int storedist,
                          key_cb on_key, void *arg) {
    int found = 0;
    for (int i = from; i + 1 < argc; i++) {
        if (arg_is(&argv[i], "store") || (storedist && arg_is(&argv[i], "storedist"))) {
            emit(on_key, arg, &argv[i + 1]);
            found = 1;
        }
    }
    return found ? CMDT_WRITES_KEYS : CMDT_WRITES_NOTHING;
}

/* MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE]
 *   [AUTH pw | AUTH2 user pw] [KEYS key...]: migrateCommand's own parse.
 * The keys are deleted here unless COPY: treated as written either way. */
static int classify_migrate(int argc, const resp_arg *argv, key_cb on_key, void *arg) {
    for (int j = 6; j < argc; j++) {
        int more = argc - 1 - j;
        if (arg_is(&argv[j], "copy") || arg_is(&argv[j], "replace")) {
            continue;
        } else if (arg_is(&argv[j], "auth")) {
            if (more < 1)
                return CMDT_WRITES_NOTHING;
            j++;
        } else if (arg_is(&argv[j], "auth2")) {
            if (more < 2)
                return CMDT_WRITES_NOTHING;
            j += 2;
        } else if (arg_is(&argv[j], "keys")) {
            if (argv[3].len != 0)
                return CMDT_WRITES_NOTHING; /* KEYS needs key "" */
            emit_range(argc, argv, j + 1, argc - 1, 1, on_key, arg);
            return CMDT_WRITES_KEYS;
        } else {
            return CMDT_WRITES_UNKNOWN; /* not a 7.0 option */
        }
    }
    emit(on_key, arg, &argv[3]);
    return CMDT_WRITES_KEYS;
}

/* XREADGROUP GROUP g c [COUNT n] [BLOCK ms] [NOACK] STREAMS key... id...:
 * xreadCommand's own parse. Each stream's group state may change. */
static int classify_xreadgroup(int argc, const resp_arg *argv, key_cb on_key, void *arg) {
    for (int i = 1; i < argc; i++) {
        int more = argc - i - 1;
        if ((arg_is(&argv[i], "block") || arg_is(&argv[i], "count")) && more >= 1) {
            i++;
        } else if (arg_is(&argv[i], "streams") && more >= 1) {
            int n = argc - (i + 1);
            if (n % 2 != 0)
                return CMDT_WRITES_NOTHING; /* "Unbalanced ... list of streams" */
            emit_range(argc, argv, i + 1, i + n / 2, 1, on_key, arg);
            return CMDT_WRITES_KEYS;
        } else if (arg_is(&argv[i], "group") && more >= 2) {
            i += 2;
        } else if (arg_is(&argv[i], "noack")) {
            continue;
        } else {
            return CMDT_WRITES_UNKNOWN;
        }
    }
    return CMDT_WRITES_NOTHING; /* STREAMS is mandatory */
}

/* The memo slot of a name (see CMDT_MEMO). */
static unsigned memo_slot(const char *name, size_t n) {
    return ((unsigned)n * 31u + lower((unsigned char)name[0]) * 7u + lower((unsigned char)name[n - 1])) % CMDT_MEMO;
}

/* Is name (any case) the lower-case e->name? */
static int memo_is(const cmdt_entry *e, const char *name, size_t n) {
    if (e == NULL || e->nlen != n) return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)e->name[i] != lower((unsigned char)name[i])) return 0;
    return 1;
}

/* Finds the entry Redis would run (lookupCommand): for a container that has
 * subcommands, "name|sub"; otherwise "name". NULL when Redis would answer
 * "unknown command" or "unknown subcommand". A "name|sub" added without its
 * container is still found. "xgroup|destroy" as a command name is not a
 * command to Redis (it answers "unknown command"): the table's subcommand
 * names are not reachable from argv[0] (found by fuzz_cmdtable_writes).
 * The memo only ever holds what was found for a name without '|', so a
 * name it matches needs no search for one. */
static const cmdt_entry *lookup(const cmdtable *t, int argc, const resp_arg *argv) {
    char lname[CMDT_NAME_MAX + 1];
    size_t n0 = argv[0].len;
    const cmdt_entry *e;

    if (argv[0].ptr == NULL || n0 == 0 || n0 > CMDT_NAME_MAX)
        return NULL;
    unsigned slot = memo_slot(argv[0].ptr, n0);
    if (memo_is(t->memo[slot], argv[0].ptr, n0)) {
        e = t->memo[slot];
    } else {
        if (memchr(argv[0].ptr, '|', n0) != NULL) return NULL;
        lower_copy(lname, argv[0].ptr, n0);
        e = find_lower(t, lname, n0);
        /* the memo is a cache, not the table's state: t is const to callers
         * (and never a const object) */
        if (e != NULL) ((cmdtable *)t)->memo[slot] = e;
    }
    if (argc < 2 || (e != NULL && !e->has_subs))
        return e;
    /* n0 + 1 + len <= CMDT_NAME_MAX, written so that it cannot wrap */
    if (argv[1].ptr == NULL || argv[1].len >= CMDT_NAME_MAX - n0)
        return NULL;
    lower_copy(lname, argv[0].ptr, n0);
    lname[n0] = '|';
    lower_copy(lname + n0 + 1, argv[1].ptr, argv[1].len);
    return find_lower(t, lname, n0 + 1 + argv[1].len);
}

int cmdtable_check(const cmdtable *t, int argc, const resp_arg *argv, int *flags) {
    const cmdt_entry *e;
    if (t == NULL || argc < 1 || argv == NULL || (e = lookup(t, argc, argv)) == NULL)
        return 0;
    if (e->arity > 0 ? argc != e->arity : (long long)argc < -(long long)e->arity)
        return 0;
    if (flags != NULL) *flags = e->flags;
    return 1;
}

int cmdtable_writes(const cmdtable *t, int argc, const resp_arg *argv,
                    void (*on_key)(void *arg, const char *key, size_t klen), void *arg) {
    const cmdt_entry *e;

    if (t == NULL || argc < 1 || argv == NULL || (e = lookup(t, argc, argv)) == NULL)
        return CMDT_WRITES_NOTHING;
    if (e->arity > 0 ? argc != e->arity : (long long)argc < -(long long)e->arity)
        return CMDT_WRITES_NOTHING;

    switch (e->kind) {
    case K_NONE:
        return CMDT_WRITES_NOTHING;
    case K_SCRIPT:
        return classify_script(argc, argv, on_key, arg);
    case K_EVALSHA:
        if (argc >= 2 && script_readonly(t, &argv[1]))
            return CMDT_WRITES_NOTHING;
        return classify_script(argc, argv, on_key, arg);
    case K_DEST_NUMKEYS:
        return classify_dest_numkeys(argc, argv, on_key, arg);
    case K_SORT:
        return classify_store(argc, argv, 2, 0, on_key, arg);
    case K_MPOP1:
        return classify_mpop(argc, argv, 1, on_key, arg);
    case K_MPOP2:
        return classify_mpop(argc, argv, 2, on_key, arg);
    case K_GEORADIUS:
        /* Options start at 6 (GEORADIUS) or 5 (BYMEMBER); 5 covers both. */
        return classify_store(argc, argv, 5, 1, on_key, arg);
    case K_MIGRATE:
        if (argc < 6)
            return CMDT_WRITES_NOTHING;
        return classify_migrate(argc, argv, on_key, arg);
    case K_XREADGROUP:
        return classify_xreadgroup(argc, argv, on_key, arg);
    case K_PFCOUNT:
        /* Several keys are merged in a temporary and left alone, but Redis
         * declares them all RW: report them all, as its key specs do. */
        emit_range(argc, argv, 1, argc - 1, 1, on_key, arg);
        return CMDT_WRITES_KEYS;
    default:
        break;
    }

    /* K_RANGE */
    if (!(e->flags & CMDT_F_WRITE))
        return CMDT_WRITES_NOTHING;
    if ((e->flags & CMDT_F_MOVABLEKEYS) || e->first_key <= 0)
        return CMDT_WRITES_UNKNOWN;
    emit_range(argc, argv, e->first_key, e->last_key, e->step, on_key, arg);
    return CMDT_WRITES_KEYS;
}
