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

#include "proxy/config.h"

/* Opens the log file (path "" = stderr). Returns 0, or -1 with errno set. */
int px_log_open(const char *path, int level);
void px_log_set_level(int level);
void px_log_close(void);
int px_log_enabled(int level);
void px_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define px_debug(...)   do { if (px_log_enabled(PX_LOG_DEBUG)) px_log(PX_LOG_DEBUG, __VA_ARGS__); } while (0)
#define px_verbose(...) do { if (px_log_enabled(PX_LOG_VERBOSE)) px_log(PX_LOG_VERBOSE, __VA_ARGS__); } while (0)
#define px_notice(...)  px_log(PX_LOG_NOTICE, __VA_ARGS__)
#define px_warning(...) px_log(PX_LOG_WARNING, __VA_ARGS__)
/* A failure that stops the start (exit 1): above every loglevel, so never
 * filtered out, and told apart from warnings, which a clean start and stop
 * may log too (an alert on level=error fires on these only). */
#define PX_LOG_ERROR (PX_LOG_WARNING + 1)
#define px_error(...) px_log(PX_LOG_ERROR, __VA_ARGS__)

#endif
