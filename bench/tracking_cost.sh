#!/usr/bin/env bash
# bench/tracking_cost.sh — what sidecache's tracking prefixes cost Redis.
#
# Redis compares every key a command writes with every BCAST tracking
# prefix (trackingRememberKeyToBroadcast walks the whole prefix table), so
# a mount's proxy subscribed to Redis makes every write on Redis dearer, on
# the single thread that all mounts share, and the more prefixes the
# dearer. This measures it with JuiceFS's batch unlink, the most
# write-dense operation (about 1,000 written keys per transaction), sent
# directly to Redis by bench/batchunlink while a sidecache beside it only
# holds its invalidation connection (as another mount's would):
#   none      no sidecache: Redis does no tracking
#   derived   --profile none --cache-rule GET 'i[1-9]*' --cache-rule HGET
#             'd[1-9]*': the prefixes derived from the JuiceFS rules,
#             i1 ... i9 and d1 ... d9 (18)
#   fine      the same rules, --cache-track-prefix i: i and d1 ... d9 (10),
#             what the juicefs profile tracked by before
#   juicefs   --profile juicefs: the same rules tracked by i and d (2)
# For each, REPEAT times, alternating: FLUSHALL, --populate FILES files,
# then --unlink timed, with Redis's CPU time (/proc/<pid>/task/*/schedstat)
# over it; then SETS pipelined SETs of keys no prefix covers (redis-benchmark
# -t set -P 200: what every other write pays), with Redis's CPU time over
# them. Prints the medians: Redis µs of CPU per transaction, the unlink's
# seconds, Redis ns of CPU per SET, and each over `none`.
#
# INSTRUCTIONS=1 counts Redis's instructions instead (Redis under valgrind
# --tool=callgrind, zeroed before and dumped after each measurement): the
# same on a quiet machine and a busy one, user space only (the kernel's
# share, the sending of invalidation messages included, is not counted).
# FILES then defaults to 10000 and SETS to 20000.
#
# Environment (all optional): FILES (100000), REPEAT (5), BATCH (250),
# SETS (1000000), VARIANTS ("none derived fine juicefs"), RESULTS_DIR,
# SIDECACHE_BIN, REDIS_SERVER, BATCHUNLINK_BIN, BENCH_TIMEOUT.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_init tracking-cost

INSTRUCTIONS=${INSTRUCTIONS:-0}
if [ "$INSTRUCTIONS" = 1 ]; then
  FILES=${FILES:-10000} SETS=${SETS:-20000}
  command -v valgrind >/dev/null && command -v callgrind_control >/dev/null || die "INSTRUCTIONS=1 needs valgrind"
fi
FILES=${FILES:-100000}
REPEAT=${REPEAT:-5}
BATCH=${BATCH:-250}
SETS=${SETS:-1000000}
VARIANTS=${VARIANTS:-"none derived fine juicefs"}
positive_ints FILES REPEAT BATCH SETS
for v in $VARIANTS; do case "$v" in none|derived|fine|juicefs) ;; *) die "VARIANTS: none, derived, fine or juicefs, not '$v'" ;; esac; done

find_redis
find_redis_benchmark
find_sidecache
build_batchunlink
if [ "$INSTRUCTIONS" = 1 ]; then
  # start_redis runs $REDIS_SERVER: this wrapper, Redis under callgrind
  printf '#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file=%s/redis.cg.%%p %s "$@"\n' \
    "$work" "$REDIS_SERVER" >"$work/redis-under-callgrind"
  chmod +x "$work/redis-under-callgrind"
  REDIS_SERVER=$work/redis-under-callgrind
fi
start_redis redis
redis_pid=$(pid_of redis)

# Redis's work so far: CPU ns, or instructions since the last zeroing
work_begin() {
  if [ "$INSTRUCTIONS" = 1 ]; then callgrind_control -z "$redis_pid" >/dev/null; echo 0; else cpu_ns "$redis_pid"; fi
}
work_end() {
  if [ "$INSTRUCTIONS" = 1 ]; then
    callgrind_control -d "$redis_pid" >/dev/null
    # shellcheck disable=SC2012 # names we made: redis.cg.<pid>.<n>
    awk '/^summary:/ { print $2; exit }' "$(ls -t "$work"/redis.cg."$redis_pid".* | head -n1)"
  else
    cpu_ns "$redis_pid"
  fi
}

# per transaction: µs of CPU, or instructions; per SET: ns, or instructions
unit=1000 what_txn="Redis CPU µs per transaction" what_set="Redis CPU ns per SET" what="CPU"
[ "$INSTRUCTIONS" = 1 ] && unit=1 what_txn="Redis instructions per transaction" \
  what_set="Redis instructions per SET" what="instructions"
declare -A us_l secs_l set_l
for rep in $(seq "$REPEAT"); do
  for v in $VARIANTS; do
    sport=""
    case $v in
      derived) start_sidecache "sc-$v-$rep" "$rport" --profile none \
                 --cache-rule GET 'i[1-9]*' --cache-rule HGET 'd[1-9]*' ;;
      fine) start_sidecache "sc-$v-$rep" "$rport" --profile none \
              --cache-rule GET 'i[1-9]*' --cache-rule HGET 'd[1-9]*' --cache-track-prefix i ;;
      juicefs) start_sidecache "sc-$v-$rep" "$rport" --profile juicefs ;;
    esac
    [ -z "$sport" ] || log "$v: tracking prefixes $(grep -o 'prefixes=[^ ]*' "$work/sc-$v-$rep.log" | head -n1)"
    rcli "$rport" FLUSHALL >/dev/null
    "$BATCHUNLINK_BIN" -p "$rport" --populate --files "$FILES" --quiet || die "populate failed"
    log "$v (run $rep/$REPEAT, $FILES files)"
    out=$work/run-$v-$rep.csv
    c0=$(work_begin)
    fg "$BATCHUNLINK_BIN" -p "$rport" --unlink --files "$FILES" --batch "$BATCH" --label "$v" --no-header \
      >"$out" 2>"$out.err" || { cat "$out.err" >&2; die "unlink ($v) failed"; }
    c1=$(work_end)
    "$BATCHUNLINK_BIN" -p "$rport" --verify-empty --files "$FILES" --quiet || die "unlink ($v): verification failed"
    # label,mode,files,batches,round_trips,commands,conflicts,seconds,...
    IFS=, read -r _ _ _ nb _ _ _ s _ <"$out"
    us_l[$v]+=" $(( (c1 - c0) / unit / nb ))"
    secs_l[$v]+=" $s"
    c0=$(work_begin)
    fg "$REDIS_BENCHMARK" -h 127.0.0.1 -p "$rport" -t set -n "$SETS" -P 200 -r 100000 -q >/dev/null \
      || die "redis-benchmark ($v) failed"
    c1=$(work_end)
    set_l[$v]+=" $(( (c1 - c0) / SETS ))"
    [ -z "$sport" ] || stop "sc-$v-$rep"
    check_alive
  done
done

report_files tracking-cost
# shellcheck disable=SC2086 # word lists on purpose
base_us=$(median ${us_l[none]:-}) base_s=$(median ${secs_l[none]:-}) base_set=$(median ${set_l[none]:-})
{
  echo "# What tracking prefixes cost Redis ($stamp)"
  echo
  echo "$(versions_line); batch unlink of $FILES files, batches of $BATCH, and $SETS SETs of untracked keys (pipelines of 200), sent directly to Redis; median of $REPEAT run(s)$([ "$INSTRUCTIONS" = 1 ] && echo "; Redis under callgrind, user-space instructions (its seconds are valgrind's)")."
  echo
  echo "| variant | $what_txn | unlink s | $what_set | $what per transaction / none | unlink s / none | $what per SET / none |"
  echo "|---|--:|--:|--:|--:|--:|--:|"
} >"$md"
echo "variant,redis_us_per_txn,seconds,redis_ns_per_set,cpu_ratio,seconds_ratio,set_ratio,runs_us,runs_s,runs_ns_set" >"$csv"
for v in $VARIANTS; do
  # shellcheck disable=SC2086
  u=$(median ${us_l[$v]}) s=$(median ${secs_l[$v]}) ns=$(median ${set_l[$v]})
  ru=$(ratio "$u" "$base_us" 3) rs=$(ratio "$s" "$base_s" 3) rn=$(ratio "$ns" "$base_set" 3)
  ru=${ru:-n/a} rs=${rs:-n/a} rn=${rn:-n/a}
  echo "| $v | $u | $(printf '%.3f' "$s") | $ns | $ru | $rs | $rn |" >>"$md"
  # shellcheck disable=SC2086
  echo "$v,$u,$s,$ns,$ru,$rs,$rn,$(echo ${us_l[$v]} | tr ' ' ';'),$(echo ${secs_l[$v]} | tr ' ' ';'),$(echo ${set_l[$v]} | tr ' ' ';')" >>"$csv"
done
cat "$md"
echo
echo "written: $md $csv"
