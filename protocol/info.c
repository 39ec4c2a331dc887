/*
 * protocol/info.c — see info.h.
 */
#include "protocol/info.h"

#include <string.h>

static int is_hex(char ch) {
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
}

/* The value of the field key ("name:") of one whole INFO reply frame: at a
 * line's start, up to the line's CR (or LF). NULL when the frame is not
 * such a reply or has no such line. */
static const char *info_field(const char *frame, size_t len, const char *key, size_t *vlen) {
    const size_t klen = strlen(key);
    if (len < 4 || (frame[0] != '$' && frame[0] != '=')) return NULL;
    const char *body = memchr(frame, '\n', len);
    if (body == NULL) return NULL;
    body++;
    const char *end = frame + len;
    for (const char *line = body; line < end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        const char *eol = nl != NULL ? nl : end;
        if ((size_t)(eol - line) >= klen && memcmp(line, key, klen) == 0) {
            const char *v = line + klen, *cr = memchr(v, '\r', (size_t)(eol - v));
            *vlen = (size_t)((cr != NULL ? cr : eol) - v);
            return v;
        }
        if (nl == NULL) break;
        line = nl + 1;
    }
    return NULL;
}

int info_run_id(const char *frame, size_t len, char out[INFO_RUN_ID_LEN + 1]) {
    size_t n;
    const char *id = info_field(frame, len, "run_id:", &n);
    out[0] = '\0';
    /* the id is the whole value: 40 hex digits */
    if (id == NULL || n != INFO_RUN_ID_LEN) return -1;
    for (int i = 0; i < INFO_RUN_ID_LEN; i++)
        if (!is_hex(id[i])) return -1;
    memcpy(out, id, INFO_RUN_ID_LEN);
    out[INFO_RUN_ID_LEN] = '\0';
    return 0;
}

int info_is_cluster(const char *frame, size_t len) {
    size_t n;
    const char *mode = info_field(frame, len, "redis_mode:", &n);
    return mode != NULL && n == 7 && memcmp(mode, "cluster", 7) == 0;
}
