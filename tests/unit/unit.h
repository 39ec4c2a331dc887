/*
 * tests/unit/unit.h — the smallest test harness that can fail.
 *
 * A test file defines test functions, lists them in main() with RUN(fn), and
 * ends with `return unit_report();`, which prints "N passed, N failed" (the
 * line CI reads) and returns non-zero if anything failed. CHECK records a
 * failure with file:line and goes on; REQUIRE also leaves the test.
 */
#ifndef SIDECACHE_TESTS_UNIT_H
#define SIDECACHE_TESTS_UNIT_H

#include <stdio.h>
#include <string.h>

static int unit_passed, unit_failed, unit_cur_failed;
static const char *unit_cur_name;

#define CHECK(cond) do { \
    if (!(cond)) { \
        fprintf(stderr, "FAIL %s: %s:%d: %s\n", unit_cur_name, __FILE__, __LINE__, #cond); \
        unit_cur_failed = 1; \
    } } while (0)

#define REQUIRE(cond) do { \
    if (!(cond)) { \
        fprintf(stderr, "FAIL %s: %s:%d: %s\n", unit_cur_name, __FILE__, __LINE__, #cond); \
        unit_cur_failed = 1; return; \
    } } while (0)

#define CHECK_EQ_INT(a, b) do { long long a_ = (long long)(a), b_ = (long long)(b); \
    if (a_ != b_) { \
        fprintf(stderr, "FAIL %s: %s:%d: %s == %s (%lld != %lld)\n", unit_cur_name, \
                __FILE__, __LINE__, #a, #b, a_, b_); \
        unit_cur_failed = 1; \
    } } while (0)

#define CHECK_EQ_STR(a, b) do { const char *a_ = (a), *b_ = (b); \
    if (strcmp(a_, b_) != 0) { \
        fprintf(stderr, "FAIL %s: %s:%d: %s == \"%s\" (got \"%s\")\n", unit_cur_name, \
                __FILE__, __LINE__, #a, b_, a_); \
        unit_cur_failed = 1; \
    } } while (0)

#define CHECK_MEM(p, n, s) do { \
    if ((size_t)(n) != strlen(s) || memcmp((p), (s), (n)) != 0) { \
        fprintf(stderr, "FAIL %s: %s:%d: %s == \"%s\" (got \"%.*s\")\n", unit_cur_name, \
                __FILE__, __LINE__, #p, (s), (int)(n), (const char *)(p)); \
        unit_cur_failed = 1; \
    } } while (0)

#define RUN(fn) do { \
    unit_cur_name = #fn; unit_cur_failed = 0; fn(); \
    if (unit_cur_failed) unit_failed++; else unit_passed++; } while (0)

static inline int unit_report(void) {
    printf("%d passed, %d failed\n", unit_passed, unit_failed);
    return unit_failed ? 1 : 0;
}

#endif
