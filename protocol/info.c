/*
 * protocol/info.c — see info.h.
 */
#include "protocol/info.h"

#include <string.h>

static int is_hex(char ch) {
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
}

int info_run_id(const char *frame, size_t len, char out[INFO_RUN_ID_LEN + 1]) {
    static const char key[] = "run_id:";
    const size_t klen = sizeof key - 1;
    out[0] = '\0';
    if (len < 4 || (frame[0] != '$' && frame[0] != '=')) return -1;
    const char *body = memchr(frame, '\n', len);
    if (body == NULL) return -1;
    body++;
    const char *end = frame + len;
    /* line by line: a field named run_id only at a line's start */
    for (const char *line = body; line < end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        const char *eol = nl != NULL ? nl : end;
        if ((size_t)(eol - line) >= klen + INFO_RUN_ID_LEN && memcmp(line, key, klen) == 0) {
            const char *id = line + klen;
            for (int i = 0; i < INFO_RUN_ID_LEN; i++)
                if (!is_hex(id[i])) return -1;
            /* the id ends the line (a CR before its LF) */
            const char *after = id + INFO_RUN_ID_LEN;
            if (after < eol && *after != '\r') return -1;
            memcpy(out, id, INFO_RUN_ID_LEN);
            out[INFO_RUN_ID_LEN] = '\0';
            return 0;
        }
        if (nl == NULL) break;
        line = nl + 1;
    }
    return -1;
}
