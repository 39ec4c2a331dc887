/*
 * tests/unit/test_info.c — protocol/info.c: the run_id of an INFO reply,
 * and whether it is a cluster node's.
 */
#include "protocol/info.h"
#include "tests/unit/unit.h"

#include <stdio.h>
#include <string.h>

/* a string literal and its length */
#define S_(lit) (lit), (sizeof(lit) - 1)

#define ID "1c0b3a5e9d8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b"

static void frame(char *out, size_t n, char type, const char *body) {
    snprintf(out, n, "%c%zu\r\n%s\r\n", type, strlen(body), body);
}

static void test_bulk_reply(void) {
    char f[512], id[INFO_RUN_ID_LEN + 1];
    frame(f, sizeof f, '$', "# Server\r\nredis_version:7.0.15\r\nrun_id:" ID "\r\ntcp_port:6379\r\n");
    CHECK_EQ_INT(info_run_id(f, strlen(f), id), 0);
    CHECK_EQ_STR(id, ID);
}

static void test_verbatim_reply(void) {
    char f[512], id[INFO_RUN_ID_LEN + 1];
    frame(f, sizeof f, '=', "txt:# Server\r\nrun_id:" ID "\r\n");
    CHECK_EQ_INT(info_run_id(f, strlen(f), id), 0);
    CHECK_EQ_STR(id, ID);
}

static void test_not_an_id(void) {
    char f[512], id[INFO_RUN_ID_LEN + 1] = "x";
    /* an error, no run_id, a short or non-hex one, or one not at a line's
     * start: none is an id */
    CHECK_EQ_INT(info_run_id(S_("-NOPERM this user has no permissions to run the 'info' command\r\n"), id), -1);
    CHECK_EQ_STR(id, "");
    frame(f, sizeof f, '$', "# Server\r\nredis_version:7.0.15\r\n");
    CHECK_EQ_INT(info_run_id(f, strlen(f), id), -1);
    frame(f, sizeof f, '$', "run_id:1c0b3a5e\r\n");
    CHECK_EQ_INT(info_run_id(f, strlen(f), id), -1);
    frame(f, sizeof f, '$', "run_id:" ID "ff\r\n");
    CHECK_EQ_INT(info_run_id(f, strlen(f), id), -1);
    frame(f, sizeof f, '$', "run_id:zc0b3a5e9d8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b\r\n");
    CHECK_EQ_INT(info_run_id(f, strlen(f), id), -1);
    frame(f, sizeof f, '$', "x_run_id:" ID "\r\n");
    CHECK_EQ_INT(info_run_id(f, strlen(f), id), -1);
    CHECK_EQ_INT(info_run_id(S_("$-1\r\n"), id), -1);
    CHECK_EQ_INT(info_run_id(S_(""), id), -1);
}

static void test_last_line_without_crlf(void) {
    char id[INFO_RUN_ID_LEN + 1];
    /* the id ends the bulk: the frame's own CRLF follows */
    CHECK_EQ_INT(info_run_id(S_("$47\r\nrun_id:" ID "\r\n"), id), 0);
    CHECK_EQ_STR(id, ID);
}

static void test_cluster_mode(void) {
    char f[512];
    frame(f, sizeof f, '$', "# Server\r\nredis_version:7.0.15\r\nredis_mode:cluster\r\nos:Linux\r\n");
    CHECK_EQ_INT(info_is_cluster(f, strlen(f)), 1);
    frame(f, sizeof f, '=', "txt:# Server\r\nredis_mode:cluster\r\n");
    CHECK_EQ_INT(info_is_cluster(f, strlen(f)), 1);
    /* standalone, another word that starts so, no such line, an error */
    frame(f, sizeof f, '$', "# Server\r\nredis_mode:standalone\r\n");
    CHECK_EQ_INT(info_is_cluster(f, strlen(f)), 0);
    frame(f, sizeof f, '$', "# Server\r\nredis_mode:clusters\r\n");
    CHECK_EQ_INT(info_is_cluster(f, strlen(f)), 0);
    frame(f, sizeof f, '$', "# Server\r\nx_redis_mode:cluster\r\n");
    CHECK_EQ_INT(info_is_cluster(f, strlen(f)), 0);
    CHECK_EQ_INT(info_is_cluster(S_("-NOPERM this user has no permissions to run the 'info' command\r\n")), 0);
}

int main(void) {
    RUN(test_bulk_reply);
    RUN(test_verbatim_reply);
    RUN(test_not_an_id);
    RUN(test_last_line_without_crlf);
    RUN(test_cluster_mode);
    return unit_report();
}
