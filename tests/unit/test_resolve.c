/*
 * tests/unit/test_resolve.c — proxy/resolve.c: addresses need no resolver;
 * a name is looked up and its answer given (here "localhost", from
 * /etc/hosts). A lookup that hangs is test_name_lookup.py's (it needs a
 * resolver that hangs, preloaded into the proxy).
 */
#include "proxy/resolve.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "unit.h"

static void test_ipv4_and_ipv6_addresses(void) {
    struct sockaddr_storage sa;
    unsigned salen = 0;
    char why[256] = "";
    CHECK_EQ_INT(px_resolve("127.0.0.1", 6379, &sa, &salen, why, sizeof why), 0);
    REQUIRE(sa.ss_family == AF_INET);
    const struct sockaddr_in *v4 = (const void *)&sa;
    CHECK_EQ_INT(ntohs(v4->sin_port), 6379);
    CHECK_EQ_INT(ntohl(v4->sin_addr.s_addr), 0x7f000001);
    CHECK_EQ_INT(salen, sizeof *v4);

    CHECK_EQ_INT(px_resolve("::1", 7000, &sa, &salen, why, sizeof why), 0);
    REQUIRE(sa.ss_family == AF_INET6);
    const struct sockaddr_in6 *v6 = (const void *)&sa;
    CHECK_EQ_INT(ntohs(v6->sin6_port), 7000);
    CHECK(memcmp(&v6->sin6_addr, &in6addr_loopback, sizeof in6addr_loopback) == 0);
}

static void test_a_name_is_looked_up(void) {
    struct sockaddr_storage sa;
    unsigned salen = 0;
    char why[256] = "";
    /* twice: the first answer is taken, not kept for the second */
    for (int i = 0; i < 2; i++) {
        memset(&sa, 0, sizeof sa);
        int rc = px_resolve("localhost", 6380, &sa, &salen, why, sizeof why);
        CHECK_EQ_INT(rc, 0);
        if (rc != 0) {
            fprintf(stderr, "  localhost: %s\n", why);
            continue;
        }
        CHECK(sa.ss_family == AF_INET || sa.ss_family == AF_INET6);
        const struct sockaddr_in *v4 = (const void *)&sa;
        CHECK_EQ_INT(ntohs(v4->sin_port), 6380); /* same place in sockaddr_in6 */
    }
}

int main(void) {
    RUN(test_ipv4_and_ipv6_addresses);
    RUN(test_a_name_is_looked_up);
    return unit_report();
}
