/*
 * tests/integration/oom_shim.c — loaded with LD_PRELOAD into a (plain,
 * not sanitized) sidecache by test_out_of_memory.py: makes one allocation
 * fail on demand, as a process out of memory sees it (malloc, calloc or
 * realloc returns NULL with ENOMEM).
 *
 * Control, through two files named by the environment:
 *   OOM_CTL    "<generation> <n>": each time the generation changes, the
 *              n-th allocation from then on fails (0: none);
 *   OOM_FIRED  rewritten with the number of allocations failed so far;
 *   OOM_TRACE  (optional) where each failure's backtrace is appended, for
 *              a test that fails to print (addr2line -e sidecache).
 * A thread of the shim's own polls them every millisecond; its own
 * allocations never fail. The real allocator is glibc's __libc_* entry
 * points: no dlsym, so no allocation while the shim starts.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

static atomic_long countdown; /* > 0: the countdown-th allocation fails */
static atomic_long fired;
static _Thread_local int shim_thread;
static int trace_fd = -1;

static void trace(void) {
    void *frames[32];
    if (trace_fd < 0) return;
    int n = backtrace(frames, 32);
    (void)!write(trace_fd, "--\n", 3);
    backtrace_symbols_fd(frames, n, trace_fd);
}

static int should_fail(void) {
    if (shim_thread) return 0;
    long c = atomic_load(&countdown);
    while (c > 0)
        if (atomic_compare_exchange_weak(&countdown, &c, c - 1)) {
            if (c != 1) return 0;
            atomic_fetch_add(&fired, 1);
            trace();
            errno = ENOMEM;
            return 1;
        }
    return 0;
}

void *malloc(size_t n) { return should_fail() ? NULL : __libc_malloc(n); }
void *calloc(size_t n, size_t m) { return should_fail() ? NULL : __libc_calloc(n, m); }
void *realloc(void *p, size_t n) { return n > 0 && should_fail() ? NULL : __libc_realloc(p, n); }

static void *control(void *arg) {
    const char *ctl = getenv("OOM_CTL"), *out = getenv("OOM_FIRED");
    long gen = -1, told = -1;
    struct timespec ms = {0, 1000000};
    shim_thread = 1;
    (void)arg;
    for (;;) {
        FILE *f = fopen(ctl, "r");
        long g, n;
        if (f != NULL) {
            if (fscanf(f, "%ld %ld", &g, &n) == 2 && g != gen) {
                gen = g;
                atomic_store(&countdown, n);
            }
            fclose(f);
        }
        long now = atomic_load(&fired);
        if (out != NULL && now != told) {
            char tmp[4096];
            snprintf(tmp, sizeof tmp, "%s.tmp", out);
            if ((f = fopen(tmp, "w")) != NULL) {
                fprintf(f, "%ld\n", now);
                fclose(f);
                if (rename(tmp, out) == 0) told = now;
            }
        }
        nanosleep(&ms, NULL);
    }
    return NULL;
}

__attribute__((constructor)) static void start(void) {
    pthread_t t;
    const char *tr = getenv("OOM_TRACE");
    if (tr != NULL) {
        void *warm[1];
        backtrace(warm, 1); /* (loads what it needs now, not when failing) */
        trace_fd = open(tr, O_WRONLY | O_CREAT | O_APPEND, 0644);
    }
    if (getenv("OOM_CTL") != NULL && pthread_create(&t, NULL, control, NULL) == 0) pthread_detach(t);
}
