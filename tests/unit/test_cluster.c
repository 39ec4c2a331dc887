/*
 * tests/unit/test_cluster.c — protocol/cluster.c: hash slots (the values
 * are what redis-server 7.0's CLUSTER KEYSLOT answers) and the CLUSTER
 * SLOTS rewrite that names sidecache as the master of one slot.
 */
#include "protocol/cluster.h"

#include <stdio.h>
#include <string.h>

#include "unit.h"

static unsigned slot_of(const char *key) {
    return cluster_key_slot(key, strlen(key));
}

static void test_key_slots_are_redis_slots(void) {
    CHECK_EQ_INT(slot_of("foo"), 12182);
    CHECK_EQ_INT(slot_of("bar"), 5061);
    CHECK_EQ_INT(slot_of("1"), 9842);
    CHECK_EQ_INT(slot_of("{1}i2"), 9842);
    CHECK_EQ_INT(slot_of("{1}d1"), 9842);
    /* an empty tag, or none, hashes the whole key */
    CHECK_EQ_INT(slot_of("a{}b"), 13694);
    CHECK_EQ_INT(slot_of("{}"), 15257);
    CHECK_EQ_INT(slot_of("{a"), 10276);
    CHECK_EQ_INT(slot_of("1}{2"), 694);
    /* the first tag counts */
    CHECK_EQ_INT(slot_of("x{y}z{w}"), 12222);
}

static void test_prefix_slot_needs_a_whole_tag(void) {
    CHECK_EQ_INT(cluster_prefix_slot("{1}", 3), 9842);
    CHECK_EQ_INT(cluster_prefix_slot("jfs{1}", 6), 9842);
    CHECK_EQ_INT(cluster_prefix_slot("", 0), -1);
    CHECK_EQ_INT(cluster_prefix_slot("jfs:", 4), -1);
    CHECK_EQ_INT(cluster_prefix_slot("{}", 2), -1);
    /* "{1" + "}..." would make a tag of what follows the prefix */
    CHECK_EQ_INT(cluster_prefix_slot("{1", 2), -1);
}

#define ID_A "$40\r\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n"
#define ID_B "$40\r\nbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\r\n"
#define ID_R "$40\r\nrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr\r\n"

/* the node sidecache is in front of: 10.0.0.2:7001 */
static const cluster_self up_b = {.hosts = {"redis-b.internal", "10.0.0.2"}, .port = 7001};
static const cluster_self up_a = {.hosts = {"10.0.0.1", NULL}, .port = 7000};

static void check_rewrite(const char *in, unsigned slot, const cluster_self *up, const char *want) {
    resp_buf out;
    char other[64];
    resp_buf_init(&out);
    REQUIRE(cluster_slots_rewrite(in, strlen(in), slot, up, "127.0.0.1", 6400, &out, other, sizeof other) == 0);
    CHECK_MEM(out.data, out.len, want);
    resp_buf_deinit(&out);
}

/* sidecache becomes the master of every range, each with the bounds Redis
 * gave and the upstream's id; no replica, no other node, no metadata */
static void test_sidecache_becomes_the_master_of_every_range(void) {
    /* two ranges, the second with a replica and RESP3 metadata */
    const char *in = "*2\r\n"
                     "*3\r\n:0\r\n:8191\r\n*4\r\n$8\r\n10.0.0.1\r\n:7000\r\n" ID_A "*0\r\n"
                     "*4\r\n:8192\r\n:16383\r\n*4\r\n$8\r\n10.0.0.2\r\n:7001\r\n" ID_B
                     "%1\r\n$8\r\nhostname\r\n$2\r\nn2\r\n"
                     "*4\r\n$8\r\n10.0.0.3\r\n:7002\r\n" ID_R "%0\r\n";
    check_rewrite(in, 9842, &up_b,
                  "*2\r\n"
                  "*3\r\n:0\r\n:8191\r\n*3\r\n$9\r\n127.0.0.1\r\n:6400\r\n" ID_B
                  "*3\r\n:8192\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:6400\r\n" ID_B);
    check_rewrite(in, 0, &up_a,
                  "*2\r\n"
                  "*3\r\n:0\r\n:8191\r\n*3\r\n$9\r\n127.0.0.1\r\n:6400\r\n" ID_A
                  "*3\r\n:8192\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:6400\r\n" ID_A);
    /* ranges in any order, split ranges, the slot's range last */
    check_rewrite("*3\r\n"
                  "*3\r\n:9000\r\n:16383\r\n*3\r\n$8\r\n10.0.0.1\r\n:7000\r\n" ID_A
                  "*3\r\n:0\r\n:99\r\n*3\r\n$8\r\n10.0.0.1\r\n:7000\r\n" ID_A
                  "*3\r\n:100\r\n:8999\r\n*3\r\n$8\r\n10.0.0.2\r\n:7001\r\n" ID_B,
                  5000, &up_b,
                  "*3\r\n"
                  "*3\r\n:9000\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:6400\r\n" ID_B
                  "*3\r\n:0\r\n:99\r\n*3\r\n$9\r\n127.0.0.1\r\n:6400\r\n" ID_B
                  "*3\r\n:100\r\n:8999\r\n*3\r\n$9\r\n127.0.0.1\r\n:6400\r\n" ID_B);
    /* Redis before 7 (no metadata), and before 4 (no id); a node that has
     * not learned its own address (alone) names none */
    check_rewrite("*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$0\r\n\r\n:7000\r\n" ID_A, 16383, &up_a,
                  "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:6400\r\n" ID_A);
    check_rewrite("*2\r\n*3\r\n:0\r\n:9\r\n*2\r\n$8\r\n10.0.0.1\r\n:7000\r\n"
                  "*3\r\n:10\r\n:16383\r\n*2\r\n$8\r\n10.0.0.2\r\n:7001\r\n",
                  5, &up_a,
                  "*2\r\n*3\r\n:0\r\n:9\r\n*2\r\n$9\r\n127.0.0.1\r\n:6400\r\n"
                  "*3\r\n:10\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:6400\r\n");
}

/* cluster-preferred-endpoint-type hostname: the first element is the
 * announced hostname, the address is in the metadata (and the other way
 * round with the default, ip, and a hostname announced) */
static void test_the_master_is_known_by_its_metadata_too(void) {
    const char *want = "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:6400\r\n" ID_B;
    check_rewrite("*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n$14\r\nnode-b.example\r\n:7001\r\n" ID_B
                  "%1\r\n$2\r\nip\r\n$8\r\n10.0.0.2\r\n",
                  9842, &up_b, want);
    check_rewrite("*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n$14\r\nnode-b.example\r\n:7001\r\n" ID_B
                  "*2\r\n$2\r\nip\r\n$8\r\n10.0.0.2\r\n",
                  9842, &up_b, want);
    check_rewrite("*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n$14\r\nnode-b.example\r\n:7001\r\n" ID_B
                  "*2\r\n$2\r\nip\r\n$0\r\n\r\n",
                  9842, &up_b, want);
    check_rewrite("*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n$8\r\n10.9.9.9\r\n:7001\r\n" ID_B
                  "%1\r\n$8\r\nhostname\r\n$16\r\nredis-b.internal\r\n",
                  9842, &up_b, want);
    /* a name in the metadata under another key, or with another port, is not it */
    const char *not_it[] = {
        "*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n$14\r\nnode-b.example\r\n:7001\r\n" ID_B
        "%1\r\n$3\r\nfoo\r\n$8\r\n10.0.0.2\r\n",
        "*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n$14\r\nnode-b.example\r\n:7002\r\n" ID_B
        "%1\r\n$2\r\nip\r\n$8\r\n10.0.0.2\r\n",
    };
    for (size_t i = 0; i < sizeof not_it / sizeof not_it[0]; i++) {
        resp_buf out;
        char other[64];
        resp_buf_init(&out);
        CHECK_EQ_INT(cluster_slots_rewrite(not_it[i], strlen(not_it[i]), 9842, &up_b, "h", 1, &out, other,
                                           sizeof other),
                     -2);
        resp_buf_deinit(&out);
    }
}

static void test_nothing_to_rewrite_leaves_the_reply(void) {
    const char *cases[] = {
        "-ERR This instance has cluster support disabled\r\n",
        "*0\r\n",
        /* no range holds the slot */
        "*1\r\n*3\r\n:0\r\n:100\r\n*3\r\n$8\r\n10.0.0.1\r\n:7000\r\n" ID_A,
        /* cut short, or more after the reply */
        "*2\r\n*3\r\n:0\r\n:100\r\n*3\r\n$8\r\n10.0.0.1\r\n:7000\r\n" ID_A,
        "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$8\r\n10.0.0.1\r\n:7000\r\n" ID_A "+extra\r\n",
        /* shapes Redis does not send */
        "*1\r\n*2\r\n:0\r\n:16383\r\n",
        "*1\r\n*3\r\n:0\r\n:16383\r\n$1\r\nx\r\n",
        "*1\r\n*3\r\n:0\r\n:16383\r\n*1\r\n$1\r\nx\r\n",
        "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$-1\r\n:7000\r\n" ID_A,
        /* a bad range after the slot's */
        "*2\r\n*3\r\n:0\r\n:8191\r\n*3\r\n$8\r\n10.0.0.1\r\n:7000\r\n" ID_A "*2\r\n:8192\r\n:16383\r\n",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        resp_buf out;
        char other[64];
        resp_buf_init(&out);
        resp_buf_append(&out, "kept", 4);
        CHECK_EQ_INT(cluster_slots_rewrite(cases[i], strlen(cases[i]), 1000, &up_a, "h", 1, &out, other, sizeof other),
                     -1);
        CHECK_MEM(out.data, out.len, "kept");
        resp_buf_deinit(&out);
    }
}

/* After a failover or a resharding the slot's master is another node: the
 * reply stays as it is, and names that node for the log. */
static void test_another_master_is_left_alone(void) {
    const char *cases[] = {
        "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$8\r\n10.0.0.9\r\n:7001\r\n" ID_B,
        "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$8\r\n10.0.0.2\r\n:7002\r\n" ID_B,
        "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$0\r\n\r\n:7000\r\n" ID_B,
    };
    const char *named[] = {"10.0.0.9:7001", "10.0.0.2:7002", ":7000"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        resp_buf out;
        char other[64] = "";
        resp_buf_init(&out);
        CHECK_EQ_INT(cluster_slots_rewrite(cases[i], strlen(cases[i]), 9842, &up_b, "h", 1, &out, other, sizeof other),
                     -2);
        CHECK_EQ_INT(out.len, 0);
        CHECK(strcmp(other, named[i]) == 0);
        resp_buf_deinit(&out);
    }
}

static void collect(void *arg, const char *host, size_t hostlen, long long port) {
    char *out = arg;
    size_t n = strlen(out);
    snprintf(out + n, 256 - n, "%.*s:%lld;", (int)hostlen, host, port);
}

/* the nodes a reply names (to ask where the slot went when the upstream
 * is gone), and the master of one slot */
static void test_nodes_and_the_master_of_a_slot(void) {
    const char *in = "*2\r\n"
                     "*3\r\n:0\r\n:8191\r\n*4\r\n$8\r\n10.0.0.1\r\n:7000\r\n" ID_A "*0\r\n"
                     "*4\r\n:8192\r\n:16383\r\n*4\r\n$8\r\n10.0.0.2\r\n:7001\r\n" ID_B
                     "%1\r\n$8\r\nhostname\r\n$2\r\nn2\r\n"
                     "*4\r\n$3\r\n::1\r\n:7002\r\n" ID_R "%0\r\n";
    char nodes[256] = "", master[64];
    CHECK_EQ_INT(cluster_slots_nodes(in, strlen(in), collect, nodes), 0);
    CHECK(strcmp(nodes, "10.0.0.1:7000;10.0.0.2:7001;::1:7002;") == 0);
    CHECK_EQ_INT(cluster_slots_master(in, strlen(in), 9842, master, sizeof master), 0);
    CHECK(strcmp(master, "10.0.0.2:7001") == 0);
    CHECK_EQ_INT(cluster_slots_master(in, strlen(in), 0, master, sizeof master), 0);
    CHECK(strcmp(master, "10.0.0.1:7000") == 0);
    /* Redis before 4: no id */
    const char *old = "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$8\r\n10.0.0.1\r\n:7000\r\n";
    CHECK_EQ_INT(cluster_slots_master(old, strlen(old), 5, master, sizeof master), 0);
    CHECK(strcmp(master, "10.0.0.1:7000") == 0);
    /* no range holds the slot, an error, a bad shape, a short buffer */
    const char *part = "*1\r\n*3\r\n:0\r\n:100\r\n*2\r\n$8\r\n10.0.0.1\r\n:7000\r\n";
    CHECK_EQ_INT(cluster_slots_master(part, strlen(part), 9842, master, sizeof master), -1);
    const char *err = "-ERR This instance has cluster support disabled\r\n";
    CHECK_EQ_INT(cluster_slots_master(err, strlen(err), 1, master, sizeof master), -1);
    nodes[0] = '\0';
    CHECK_EQ_INT(cluster_slots_nodes(err, strlen(err), collect, nodes), -1);
    const char *bad = "*1\r\n*3\r\n:0\r\n:16383\r\n$1\r\nx\r\n";
    CHECK_EQ_INT(cluster_slots_nodes(bad, strlen(bad), collect, nodes), -1);
    CHECK_EQ_INT(cluster_slots_master(in, strlen(in), 1, master, 8), -1);
}

/* a MOVED error frame: its slot and target; anything else is not one */
static void test_moved_frames(void) {
    long long slot;
    const char *to;
    size_t n;
    const char *f = "-MOVED 9842 127.0.0.1:7001\r\n";
    CHECK_EQ_INT(cluster_moved(f, strlen(f), &slot, &to, &n), 0);
    CHECK_EQ_INT(slot, 9842);
    CHECK_MEM(to, n, "127.0.0.1:7001");
    f = "-MOVED 3 ::1:7000\r\n";
    CHECK_EQ_INT(cluster_moved(f, strlen(f), &slot, &to, &n), 0);
    CHECK_MEM(to, n, "::1:7000");
    const char *not_moved[] = {"-ASK 9842 127.0.0.1:7001\r\n", "-MOVED 9842\r\n", "-MOVED x 1.2.3.4:5\r\n",
                               "-MOVED 9842 127.0.0.1:7001", "+OK\r\n"};
    for (size_t i = 0; i < sizeof not_moved / sizeof not_moved[0]; i++)
        CHECK_EQ_INT(cluster_moved(not_moved[i], strlen(not_moved[i]), &slot, &to, &n), -1);
}

/* an ASK error frame: its slot; a MOVED or a cut frame is not one */
static void test_ask_frames(void) {
    long long slot = 0;
    const char *f = "-ASK 9842 127.0.0.1:7001\r\n";
    CHECK_EQ_INT(cluster_ask(f, strlen(f), &slot), 0);
    CHECK_EQ_INT(slot, 9842);
    const char *not_ask[] = {"-MOVED 9842 127.0.0.1:7001\r\n", "-ASK 9842\r\n", "-ASK x 1.2.3.4:5\r\n",
                             "-ASK 9842 127.0.0.1:7001", "-ASKING\r\n", "-TRYAGAIN Multiple keys\r\n"};
    for (size_t i = 0; i < sizeof not_ask / sizeof not_ask[0]; i++)
        CHECK_EQ_INT(cluster_ask(not_ask[i], strlen(not_ask[i]), &slot), -1);
}

int main(void) {
    RUN(test_key_slots_are_redis_slots);
    RUN(test_prefix_slot_needs_a_whole_tag);
    RUN(test_sidecache_becomes_the_master_of_every_range);
    RUN(test_the_master_is_known_by_its_metadata_too);
    RUN(test_nothing_to_rewrite_leaves_the_reply);
    RUN(test_another_master_is_left_alone);
    RUN(test_nodes_and_the_master_of_a_slot);
    RUN(test_moved_frames);
    RUN(test_ask_frames);
    return unit_report();
}
