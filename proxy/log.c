/*
 * proxy/log.c — see log.h. The only process-wide state of the logger is the
 * sink and the level: logging is a property of the process, not of a module.
 */
#include "proxy/log.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static FILE *log_sink;
static int log_level = PX_LOG_NOTICE;

int px_log_open(const char *path, int level) {
    log_level = level;
    if (path == NULL || path[0] == '\0') {
        log_sink = stderr;
        return 0;
    }
    FILE *f = fopen(path, "a");
    if (f == NULL) return -1;
    setvbuf(f, NULL, _IOLBF, 0);
    log_sink = f;
    return 0;
}

void px_log_set_level(int level) { log_level = level; }

void px_log_close(void) {
    if (log_sink != NULL && log_sink != stderr) fclose(log_sink);
    log_sink = NULL;
}

int px_log_enabled(int level) { return level >= log_level; }

const char *px_log_level_name(int level) {
    static const char *const names[] = {"debug", "verbose", "notice", "warning", "error"};
    return names[level < 0 ? 0 : level > PX_LOG_ERROR ? PX_LOG_ERROR : level];
}

void px_log(int level, const char *fmt, ...) {
    if (level < log_level) return;
    FILE *out = log_sink ? log_sink : stderr;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char ts[32];
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    fprintf(out, "%s.%03dZ pid=%d level=%s ", ts, (int)(tv.tv_usec / 1000), (int)getpid(),
            px_log_level_name(level));
    va_list ap;
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fputc('\n', out);
    fflush(out);
    /* what stops the start is told on stderr too, where a service manager
     * shows it, when the log goes to a file */
    if (level >= PX_LOG_ERROR && out != stderr) {
        fputs("sidecache: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
    }
}

static int64_t monotonic_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void px_warning_repeat(px_log_repeat *r, int interval_ms, const char *fmt, ...) {
    int64_t now = monotonic_ms();
    int held = r->next_ms != 0 && now < r->next_ms;
    r->count++;
    if (held) r->held++;
    if (held && !px_log_enabled(PX_LOG_VERBOSE)) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (held) {
        px_log(PX_LOG_VERBOSE, "%s", line);
        return;
    }
    if (r->held > 0)
        px_warning("%s repeated=%llu", line, (unsigned long long)r->held);
    else
        px_warning("%s", line);
    r->held = 0;
    r->next_ms = now + interval_ms;
}

uint64_t px_log_repeat_end(px_log_repeat *r) {
    uint64_t n = r->count;
    r->next_ms = 0;
    r->held = r->count = 0;
    return n;
}
