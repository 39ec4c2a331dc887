/*
 * tests/unit/test_resolve.c — proxy/resolve.c: addresses need no resolver;
 * a name is looked up once and its answer given to every caller while
 * fresh; a slow resolver holds the caller at most the wait budget of the
 * second (several names together too), and a stale answer is given while
 * a new one is looked up; each address of an answer is tried in turn; a
 * name's move is seen; names nobody asks for are forgotten.
 *
 * The resolver is this file's getaddrinfo(), which the proxy's code links
 * to instead of the C library's: names ending in ".fake" answer from the
 * table below, after its delay, and count their lookups; everything else
 * (addresses, "localhost") goes to the C library's.
 */
#include "proxy/resolve.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "unit.h"

struct fake_name {
    const char *name;
    int delay_ms;
    const char *addrs[3]; /* IPv4 addresses, in the order of the answer */
    int lookups;
};

static pthread_mutex_t fake_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fake_name fakes[] = {
    {"fast.fake", 0, {"10.0.0.1"}, 0},
    {"slow.fake", 300, {"10.0.0.2"}, 0},
    {"stale.fake", 0, {"10.0.0.3"}, 0},
    {"budget1.fake", 400, {"10.0.1.1"}, 0},
    {"budget2.fake", 400, {"10.0.1.2"}, 0},
    {"budget3.fake", 400, {"10.0.1.3"}, 0},
    {"two.fake", 0, {"10.0.2.1", "10.0.2.2"}, 0},
    {"moves.fake", 0, {"10.0.3.1"}, 0},
    {"once.fake", 0, {"10.0.4.1"}, 0},
};

static struct fake_name *fake(const char *name) {
    for (size_t i = 0; i < sizeof fakes / sizeof fakes[0]; i++)
        if (strcmp(fakes[i].name, name) == 0) return &fakes[i];
    return NULL;
}

static void fake_set(const char *name, int delay_ms, const char *a0, const char *a1) {
    pthread_mutex_lock(&fake_mu);
    struct fake_name *f = fake(name);
    f->delay_ms = delay_ms;
    f->addrs[0] = a0;
    f->addrs[1] = a1;
    f->addrs[2] = NULL;
    pthread_mutex_unlock(&fake_mu);
}

static int fake_lookups(const char *name) {
    pthread_mutex_lock(&fake_mu);
    int n = fake(name)->lookups;
    pthread_mutex_unlock(&fake_mu);
    return n;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

typedef int (*getaddrinfo_fn)(const char *, const char *, const struct addrinfo *, struct addrinfo **);

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res) {
    getaddrinfo_fn real = (getaddrinfo_fn)dlsym(RTLD_NEXT, "getaddrinfo");
    int numeric = hints != NULL && (hints->ai_flags & AI_NUMERICHOST) != 0;
    size_t n = node != NULL ? strlen(node) : 0;
    if (numeric || n < 5 || strcmp(node + n - 5, ".fake") != 0) return real(node, service, hints, res);
    pthread_mutex_lock(&fake_mu);
    struct fake_name *f = fake(node);
    if (f == NULL) {
        pthread_mutex_unlock(&fake_mu);
        return EAI_NONAME;
    }
    f->lookups++;
    int delay = f->delay_ms;
    const char *addrs[3] = {f->addrs[0], f->addrs[1], f->addrs[2]};
    pthread_mutex_unlock(&fake_mu);
    sleep_ms(delay);
    /* the answer: the addresses, chained in order */
    struct addrinfo h = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST};
    struct addrinfo *head = NULL, **tail = &head;
    for (int i = 0; i < 3 && addrs[i] != NULL; i++) {
        struct addrinfo *one = NULL;
        if (real(addrs[i], service, &h, &one) != 0) continue;
        *tail = one;
        while (*tail != NULL) tail = &(*tail)->ai_next;
    }
    *res = head;
    return head != NULL ? 0 : EAI_FAIL;
}

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* sa's IPv4 address as text ("" if not IPv4). */
static const char *ip_of(const struct sockaddr_storage *sa, char *buf, size_t n) {
    buf[0] = '\0';
    if (sa->ss_family == AF_INET) inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buf, (socklen_t)n);
    return buf;
}

/* px_resolve of name:6379: its IPv4 address as text, or "" with why. */
static const char *resolve_ip(const char *name, char *buf, size_t n, char *why, size_t whylen) {
    struct sockaddr_storage sa;
    unsigned salen = 0;
    memset(&sa, 0, sizeof sa);
    if (px_resolve(name, 6379, &sa, &salen, why, whylen) != 0) {
        buf[0] = '\0';
        return buf;
    }
    return ip_of(&sa, buf, n);
}

static void address_of(const char *ip, struct sockaddr_storage *sa, unsigned *salen) {
    struct sockaddr_in *v4 = (struct sockaddr_in *)sa;
    memset(sa, 0, sizeof *sa);
    v4->sin_family = AF_INET;
    v4->sin_port = htons(6379);
    inet_pton(AF_INET, ip, &v4->sin_addr);
    *salen = sizeof *v4;
}

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
    CHECK_EQ_INT(px_resolve_names_held(), 0); /* no record for an address */
}

static void test_a_name_is_looked_up(void) {
    struct sockaddr_storage sa;
    unsigned salen = 0;
    char why[256] = "";
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

static void test_a_fresh_answer_is_given_to_every_caller(void) {
    px_resolve_set_limits(0, 0, 0); /* this second's wait budget afresh */
    char ip[64], why[256] = "";
    for (int i = 0; i < 3; i++) CHECK_EQ_STR(resolve_ip("fast.fake", ip, sizeof ip, why, sizeof why), "10.0.0.1");
    CHECK_EQ_INT(fake_lookups("fast.fake"), 1);
}

static void test_a_slow_lookup_fails_the_wait_and_answers_the_next_call(void) {
    px_resolve_set_limits(0, 0, 0); /* this second's wait budget afresh */
    char ip[64], why[256] = "";
    int64_t t0 = mono_ms();
    CHECK_EQ_STR(resolve_ip("slow.fake", ip, sizeof ip, why, sizeof why), "");
    int64_t waited = mono_ms() - t0;
    CHECK(waited >= 90 && waited < 250);
    CHECK(strstr(why, "looking up slow.fake: no answer yet") != NULL);
    /* while it runs, a call fails at once: the second's budget is spent */
    t0 = mono_ms();
    CHECK_EQ_STR(resolve_ip("slow.fake", ip, sizeof ip, why, sizeof why), "");
    CHECK(mono_ms() - t0 < 50);
    sleep_ms(350);
    t0 = mono_ms();
    CHECK_EQ_STR(resolve_ip("slow.fake", ip, sizeof ip, why, sizeof why), "10.0.0.2");
    CHECK(mono_ms() - t0 < 50);
    CHECK_EQ_INT(fake_lookups("slow.fake"), 1);
}

static void test_a_stale_answer_is_given_while_the_new_one_comes(void) {
    char ip[64], why[256] = "";
    px_resolve_set_limits(100, 200, 0);
    CHECK_EQ_STR(resolve_ip("stale.fake", ip, sizeof ip, why, sizeof why), "10.0.0.3");
    sleep_ms(250); /* stale now; the name moved, and its resolver is slow */
    fake_set("stale.fake", 400, "10.0.0.33", NULL);
    int64_t t0 = mono_ms();
    CHECK_EQ_STR(resolve_ip("stale.fake", ip, sizeof ip, why, sizeof why), "10.0.0.3");
    CHECK(mono_ms() - t0 < 50); /* given at once, not after the loop's wait */
    t0 = mono_ms();
    CHECK_EQ_STR(resolve_ip("stale.fake", ip, sizeof ip, why, sizeof why), "10.0.0.3");
    CHECK(mono_ms() - t0 < 50);
    sleep_ms(500);
    CHECK_EQ_STR(resolve_ip("stale.fake", ip, sizeof ip, why, sizeof why), "10.0.0.33");
    CHECK_EQ_INT(fake_lookups("stale.fake"), 2);
    px_resolve_set_limits(PX_RESOLVE_WAIT_MS, PX_RESOLVE_FRESH_MS, 0);
}

static void test_the_loop_waits_for_several_names_once(void) {
    char ip[64], why[256] = "";
    sleep_ms(1000); /* a second of its own */
    int64_t t0 = mono_ms();
    CHECK_EQ_STR(resolve_ip("budget1.fake", ip, sizeof ip, why, sizeof why), "");
    CHECK_EQ_STR(resolve_ip("budget2.fake", ip, sizeof ip, why, sizeof why), "");
    CHECK_EQ_STR(resolve_ip("budget3.fake", ip, sizeof ip, why, sizeof why), "");
    int64_t waited = mono_ms() - t0;
    CHECK(waited >= 90 && waited < 200);
    sleep_ms(450);
    CHECK_EQ_STR(resolve_ip("budget3.fake", ip, sizeof ip, why, sizeof why), "10.0.1.3");
}

static void test_each_address_is_tried_then_the_name_again(void) {
    px_resolve_set_limits(0, 0, 0); /* this second's wait budget afresh */
    char ip[64], why[256] = "";
    struct sockaddr_storage sa;
    unsigned salen;
    CHECK_EQ_STR(resolve_ip("two.fake", ip, sizeof ip, why, sizeof why), "10.0.2.1");
    CHECK_EQ_STR(resolve_ip("two.fake", ip, sizeof ip, why, sizeof why), "10.0.2.1");
    address_of("10.0.2.1", &sa, &salen);
    px_resolve_failed("two.fake", 6379, &sa, salen);
    px_resolve_failed("two.fake", 6379, &sa, salen); /* said twice: still the next */
    CHECK_EQ_STR(resolve_ip("two.fake", ip, sizeof ip, why, sizeof why), "10.0.2.2");
    CHECK_EQ_INT(fake_lookups("two.fake"), 1);
    address_of("10.0.2.2", &sa, &salen);
    px_resolve_failed("two.fake", 6379, &sa, salen);
    CHECK_EQ_STR(resolve_ip("two.fake", ip, sizeof ip, why, sizeof why), "10.0.2.1");
    CHECK_EQ_INT(fake_lookups("two.fake"), 2);
}

static void test_a_name_that_moved_is_seen(void) {
    px_resolve_set_limits(0, 0, 0); /* this second's wait budget afresh */
    char ip[64], why[256] = "";
    struct sockaddr_storage sa, to;
    unsigned salen, tolen = 0;
    CHECK_EQ_STR(resolve_ip("moves.fake", ip, sizeof ip, why, sizeof why), "10.0.3.1");
    address_of("10.0.3.1", &sa, &salen);
    CHECK_EQ_INT(px_resolve_moved("moves.fake", 6379, &sa, salen, &to, &tolen), 0);
    /* round robin: the address connected to is still one of the answer's */
    fake_set("moves.fake", 0, "10.0.3.2", "10.0.3.1");
    px_resolve_expire("moves.fake", 6379);
    CHECK_EQ_INT(px_resolve_moved("moves.fake", 6379, &sa, salen, &to, &tolen), 0); /* asks, waits not */
    sleep_ms(50);
    CHECK_EQ_INT(px_resolve_moved("moves.fake", 6379, &sa, salen, &to, &tolen), 0);
    CHECK_EQ_INT(fake_lookups("moves.fake"), 2);
    fake_set("moves.fake", 0, "10.0.3.2", NULL);
    px_resolve_expire("moves.fake", 6379);
    CHECK_EQ_INT(px_resolve_moved("moves.fake", 6379, &sa, salen, &to, &tolen), 0);
    sleep_ms(50);
    /* expired again before the check (READONLYs come many a second): the
     * answer that came is judged all the same */
    px_resolve_expire("moves.fake", 6379);
    CHECK_EQ_INT(px_resolve_moved("moves.fake", 6379, &sa, salen, &to, &tolen), 1);
    CHECK_EQ_STR(ip_of(&to, ip, sizeof ip), "10.0.3.2");
    CHECK_EQ_INT(tolen, sizeof(struct sockaddr_in));
    /* an address never moves */
    address_of("127.0.0.1", &sa, &salen);
    CHECK_EQ_INT(px_resolve_moved("127.0.0.1", 6379, &sa, salen, &to, &tolen), 0);
}

static void test_names_nobody_asks_for_are_forgotten(void) {
    px_resolve_set_limits(0, 0, 0); /* this second's wait budget afresh */
    char ip[64], why[256] = "";
    CHECK_EQ_STR(resolve_ip("once.fake", ip, sizeof ip, why, sizeof why), "10.0.4.1");
    int held = px_resolve_names_held();
    CHECK(held >= 2);
    px_resolve_set_limits(0, 0, 200);
    sleep_ms(300);
    CHECK_EQ_STR(resolve_ip("fast.fake", ip, sizeof ip, why, sizeof why), "10.0.0.1");
    CHECK_EQ_INT(px_resolve_names_held(), 1); /* only the name just asked for */
    px_resolve_set_limits(0, 0, PX_RESOLVE_FORGET_MS);
}

int main(void) {
    RUN(test_ipv4_and_ipv6_addresses);
    RUN(test_a_name_is_looked_up);
    RUN(test_a_fresh_answer_is_given_to_every_caller);
    RUN(test_a_slow_lookup_fails_the_wait_and_answers_the_next_call);
    RUN(test_a_stale_answer_is_given_while_the_new_one_comes);
    RUN(test_the_loop_waits_for_several_names_once);
    RUN(test_each_address_is_tried_then_the_name_again);
    RUN(test_a_name_that_moved_is_seen);
    RUN(test_names_nobody_asks_for_are_forgotten);
    return unit_report();
}
