/*
 * proxy/fdlimit.h — maxclients against the open files limit (RLIMIT_NOFILE).
 *
 * A client can hold two descriptors: its socket and an upstream connection
 * pinned to it (MULTI, a blocking command, SUBSCRIBE). The process needs
 * some more for the rest: listeners, the shared upstream connections, the
 * invalidation connection, the log file, /metrics. When a process has no
 * descriptor left, accept() fails and clients wait unanswered in the
 * backlog; refusing them with maxclients's error is better. So, as Redis
 * does, the soft limit is raised toward what maxclients needs (never past
 * the hard limit), and when it cannot go that far maxclients is lowered to
 * what fits, with a warning.
 */
#ifndef SIDECACHE_PROXY_FDLIMIT_H
#define SIDECACHE_PROXY_FDLIMIT_H

#define PX_FDS_PER_CLIENT 2
#define PX_RESERVED_FDS 32 /* descriptors that are not clients' (Redis keeps 32 too) */

/* Raises the soft RLIMIT_NOFILE toward what `requested` clients need and
 * returns how many clients fit: `requested`, or fewer (at least 1) after
 * logging a warning. Called at start and on reload. */
int px_fdlimit_fit_clients(int requested);

#endif
