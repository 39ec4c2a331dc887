/*
 * proxy/log.h — leveled logging, one line per event, key=value.
 *
 *   px_log(PX_LOG_NOTICE, "upstream connected addr=%s pool=%s", ...)
 *
 * Lines carry a timestamp and the level; below the configured level they cost
 * one comparison. The sink is stderr or the configured logfile.
 */
#ifndef SIDECACHE_PROXY_LOG_H
#define SIDECACHE_PROXY_LOG_H

#include <stdint.h>

#include "proxy/config.h"

/* Opens the log file (path "" = stderr). Returns 0, or -1 with errno set. */
int px_log_open(const char *path, int level);
void px_log_set_level(int level);
void px_log_close(void);
int px_log_enabled(int level);
void px_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "debug", "verbose", "notice", "warning" or "error". */
const char *px_log_level_name(int level);

#define px_debug(...)   do { if (px_log_enabled(PX_LOG_DEBUG)) px_log(PX_LOG_DEBUG, __VA_ARGS__); } while (0)
#define px_verbose(...) do { if (px_log_enabled(PX_LOG_VERBOSE)) px_log(PX_LOG_VERBOSE, __VA_ARGS__); } while (0)
#define px_notice(...)  px_log(PX_LOG_NOTICE, __VA_ARGS__)
#define px_warning(...) px_log(PX_LOG_WARNING, __VA_ARGS__)
/* A failure that stops the start (exit 1): above every loglevel, so never
 * filtered out, and told apart from warnings, which a clean start and stop
 * may log too (an alert on level=error fires on these only). */
#define PX_LOG_ERROR (PX_LOG_WARNING + 1)
#define px_error(...) px_log(PX_LOG_ERROR, __VA_ARGS__)

/*
 * A warning that comes again and again while one condition lasts (Redis
 * down: a failed connect at every back-off; a refusal at every retry) is
 * logged at its first, then at most once every interval_ms with how many
 * came since (repeated=N); those between go to the verbose level. The
 * run ends with px_log_repeat_end (the condition is over), and the next
 * warning is logged at once. An hour of Redis down is a line a minute,
 * not one a second.
 */
#define PX_LOG_REPEAT_MS 60000       /* what lasts: Redis down, Redis full */
#define PX_LOG_REPEAT_SLOW_MS 300000 /* a misconfiguration: a refusal, a replica */
typedef struct px_log_repeat {
    int64_t next_ms;   /* when the next may be logged; 0: no run */
    uint64_t held;     /* not logged since the last that was */
    uint64_t count;    /* in this run */
} px_log_repeat;
void px_warning_repeat(px_log_repeat *r, int interval_ms, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Ends the run; returns how many warnings it had (0: none). */
uint64_t px_log_repeat_end(px_log_repeat *r);

#endif
