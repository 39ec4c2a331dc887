/*
 * proxy/fdlimit.c — see fdlimit.h.
 */
#include "proxy/fdlimit.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "proxy/log.h"

static rlim_t fds_needed(int clients) {
    return (rlim_t)clients * PX_FDS_PER_CLIENT + PX_RESERVED_FDS;
}

static int clients_fitting(rlim_t fds) {
    if (fds < PX_RESERVED_FDS + PX_FDS_PER_CLIENT) return 1; /* still serve one; accept errors are paced (listener.c) */
    return (int)((fds - PX_RESERVED_FDS) / PX_FDS_PER_CLIENT);
}

static int set_soft(rlim_t soft, rlim_t hard) {
    struct rlimit lim = {soft, hard};
    return setrlimit(RLIMIT_NOFILE, &lim);
}

/* Raises lim's soft limit toward `want`, never past the hard limit, and
 * returns the soft limit now in force. Some systems refuse a soft limit under
 * the hard one too (macOS past OPEN_MAX when the hard limit is unlimited):
 * then the highest value taken is searched between the current soft limit,
 * which holds, and `want` (bisection: a few calls). *err is the refusal's
 * errno, 0 when there was none. */
static rlim_t raise_soft(const struct rlimit *lim, rlim_t want, int *err) {
    *err = 0;
    if (lim->rlim_max != RLIM_INFINITY && want > lim->rlim_max) want = lim->rlim_max;
    if (lim->rlim_cur == RLIM_INFINITY || want <= lim->rlim_cur) return lim->rlim_cur;
    if (set_soft(want, lim->rlim_max) == 0) return want;
    *err = errno;
    rlim_t ok = lim->rlim_cur, refused = want;
    while (refused - ok > 1) {
        rlim_t mid = ok + (refused - ok) / 2;
        if (set_soft(mid, lim->rlim_max) == 0)
            ok = mid;
        else
            refused = mid;
    }
    return ok; /* the last value accepted: each accepted one is above the one before */
}

static void format_limit(rlim_t v, char *buf, size_t n) {
    if (v == RLIM_INFINITY)
        snprintf(buf, n, "unlimited");
    else
        snprintf(buf, n, "%llu", (unsigned long long)v);
}

int px_fdlimit_fit_clients(int requested) {
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) != 0) {
        px_warning("cannot read the open files limit err=\"%s\"; maxclients=%d unchecked", strerror(errno), requested);
        return requested;
    }
    rlim_t want = fds_needed(requested);
    int err;
    rlim_t have = raise_soft(&lim, want, &err);
    if (have >= want) {
        if (have > lim.rlim_cur)
            px_notice("open files limit raised from=%llu to=%llu for maxclients=%d",
                      (unsigned long long)lim.rlim_cur, (unsigned long long)have, requested);
        return requested;
    }
    int fit = clients_fitting(have);
    char hard[32], why[128] = "";
    format_limit(lim.rlim_max, hard, sizeof hard);
    if (err != 0) snprintf(why, sizeof why, " err=\"%s\"", strerror(err));
    /* a reload with the same maxclients and limit says it once more only
     * at the verbose level */
    static int warned_fit = -1, warned_requested;
    static rlim_t warned_have;
    int again = fit == warned_fit && requested == warned_requested && have == warned_have;
    warned_fit = fit, warned_requested = requested, warned_have = have;
    px_log(again ? PX_LOG_VERBOSE : PX_LOG_WARNING,
           "maxclients lowered to fit the open files limit: maxclients=%d requested=%d needs=%llu limit=%llu "
           "hard_limit=%s%s (raise it: ulimit -n, systemd LimitNOFILE=)",
           fit, requested, (unsigned long long)want, (unsigned long long)have, hard, why);
    return fit;
}
