#!/usr/bin/env bash
# bench/instructions.sh — the proxy's instructions per batch-unlink
# transaction, counted by callgrind: a number that does not move with the
# load of a shared machine, where time does by more than the changes being
# judged (bench/batch_unlink.sh: 5-10 % from run to run).
#
# For this build and, if given, BASELINE_BIN: a proxy started under
# valgrind --tool=callgrind in front of its own redis-server (no toxiproxy:
# latency changes no instruction), FILES files populated on Redis and read
# once through the proxy (so its cache holds them, as in batch_unlink.sh),
# counters zeroed, the batch unlink through the proxy, counters dumped. Only
# what the proxy's own process runs is counted (user space: its code, libc,
# libevent, OpenSSL), none of the kernel's work for its syscalls.
#
# Prints instructions per transaction for each build and their ratio, then
# the functions of this build that run the most instructions (self, per
# transaction). Keeps the callgrind files in RESULTS_DIR
# (instructions-<time>-<build>.cg, for callgrind_annotate).
#
# Environment (all optional): FILES (10000), BATCH (250), TOP (25),
# BASELINE_BIN, RESULTS_DIR, SIDECACHE_BIN, REDIS_SERVER, BATCHUNLINK_BIN.
# Needs valgrind (Debian valgrind; scripts/install-deps.sh bench).
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_init instructions

FILES=${FILES:-10000}
BATCH=${BATCH:-250}
TOP=${TOP:-25}
positive_ints FILES BATCH TOP
command -v valgrind >/dev/null && command -v callgrind_control >/dev/null && command -v callgrind_annotate >/dev/null ||
  die "valgrind, callgrind_control and callgrind_annotate are needed (scripts/install-deps.sh bench)"
[ -z "${BASELINE_BIN:-}" ] || [ -x "$BASELINE_BIN" ] || die "BASELINE_BIN $BASELINE_BIN is not an executable"

find_redis
find_sidecache
build_batchunlink
start_redis redis

mkdir -p "$RESULTS_DIR"
stamp=$(date +%Y%m%d-%H%M%S)
bu() { "$BATCHUNLINK_BIN" --files "$FILES" --batch "$BATCH" "$@"; }

# count NAME BIN: prints the instructions of the unlink through BIN, and
# leaves its callgrind file in RESULTS_DIR
count() {
  local name=$1 bin=$2 pid port cg="$RESULTS_DIR/instructions-$stamp-$1.cg"
  free_port; port=$fport
  start "$name" valgrind --tool=callgrind --callgrind-out-file="$work/$name.cg.%p" \
    "$bin" --bind 127.0.0.1 --port "$port" --upstream "redis://127.0.0.1:$rport" --loglevel notice
  pid=$(pid_of "$name")
  # valgrind starts slowly: up to 60 s for PING, then tracking
  for _ in $(seq 600); do
    kill -0 "$pid" 2>/dev/null || { tail -n 20 "$work/$name.log" >&2; die "$name exited during start-up"; }
    [ "$(info_field "$port" tracking_state)" = active ] && break
    sleep 0.1
  done
  [ "$(info_field "$port" tracking_state)" = active ] || die "$name: tracking not active after 60 s"
  rcli "$rport" FLUSHALL >/dev/null
  bu -p "$rport" --populate --quiet || die "populate failed"
  bu -p "$port" --prewarm --quiet || die "prewarm through $name failed"
  callgrind_control -z "$pid" >/dev/null 2>&1
  log "$name: unlink of $FILES files under callgrind"
  fg "$BATCHUNLINK_BIN" -p "$port" --unlink --files "$FILES" --batch "$BATCH" --label "$name" --no-header \
    >"$work/$name.csv" 2>"$work/$name.err" || { cat "$work/$name.err" >&2; die "unlink through $name failed"; }
  callgrind_control -d "$pid" >/dev/null 2>&1
  bu -p "$rport" --verify-empty --quiet || die "unlink through $name: verification failed"
  stop "$name"
  # the dump callgrind_control asked for, not the one made at exit (which
  # covers the verification and the stop, and may be the larger file)
  local dump
  dump=$(grep -l '^desc: Trigger: dump' "$work/$name.cg".* | head -n1)
  [ -n "$dump" ] || die "$name: no callgrind dump of the unlink"
  mv "$dump" "$cg"
  # (awk reads to the end: an early exit would kill the pipe's writer)
  callgrind_annotate "$cg" 2>/dev/null | awk '/PROGRAM TOTALS/ && !n { gsub(",", "", $1); n = $1 } END { print n }'
}

nb=$(( (FILES + BATCH - 1) / BATCH ))
ir=$(count sidecache "$SIDECACHE_BIN")
[ -n "$ir" ] || die "no instruction count for sidecache"
per=$(( ir / nb ))
base_per=""
if [ -n "${BASELINE_BIN:-}" ]; then
  bir=$(count baseline "$BASELINE_BIN")
  [ -n "$bir" ] || die "no instruction count for the baseline"
  base_per=$(( bir / nb ))
fi

md="$RESULTS_DIR/instructions-$stamp.md"
{
  echo "# The proxy's instructions per batch-unlink transaction ($stamp)"
  echo
  echo "$(versions_line); $FILES files in batches of $BATCH ($nb transactions), prewarmed; callgrind, user space only."
  echo
  echo "| build | instructions per transaction | / baseline |"
  echo "|---|--:|--:|"
  echo "| sidecache ($SIDECACHE_BIN) | $per | $( [ -n "$base_per" ] && ratio "$per" "$base_per" 3 || echo n/a) |"
  [ -z "$base_per" ] || echo "| baseline ($BASELINE_BIN) | $base_per | 1.000 |"
  echo
  echo "Where this build's instructions go (self, per transaction, the top $TOP):"
  echo
  echo "| instructions | share | function |"
  echo "|--:|--:|---|"
  callgrind_annotate --threshold=100 "$RESULTS_DIR/instructions-$stamp-sidecache.cg" 2>/dev/null |
    awk -v nb="$nb" -v top="$TOP" -v total="$ir" '
      /file:function/ { on = 1; next }
      on && $1 ~ /^[0-9,]+$/ {
        n = $1; gsub(",", "", n)
        fn = $NF == "]" ? $(NF - 2) : $0; sub(/^.*\) +/, "", fn); sub(/ \[.*$/, "", fn)
        if (n + 0 >= total * 0.999) next   # the callers of everything (main, the loop)
        if (k++ < top) printf "| %.0f | %.1f%% | %s |\n", n / nb, 100 * n / total, fn
      }'
} >"$md"
cat "$md"
echo
echo "written: $md"
