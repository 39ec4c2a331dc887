#!/usr/bin/env bash
# bench/cpu_batch.sh — where the CPU of a batch unlink goes: per batch, the
# CPU time of Redis, of the hop in front of it and of the client.
#
# At 0 µs of latency the batch unlink of batch_unlink.sh is bound by CPU:
# the processes of a round trip take turns on the machine's cores, so what
# any of them spends shows in the time. This splits that CPU by process,
# with no toxiproxy (whose share is the same for every target), for
#   direct     batchunlink on Redis itself
#   relay      bench/relay.c in between (forwards bytes, nothing else)
#   nocache    sidecache with --cache-max-memory 0: no cache, no tracking
#   sidecache  sidecache as batch_unlink.sh runs it (cache and tracking on)
# For each, REPEAT times, alternating: FLUSHALL, --populate FILES files on
# Redis, --prewarm through the target, then --unlink through it, with the
# CPU time of Redis and of the hop (/proc/<pid>/task/*/schedstat, user and
# system together; the hop's user/system split from /proc/<pid>/stat, in
# clock ticks) and the client's own (batchunlink BATCHUNLINK_CPU=1) over the
# unlink. Every unlink is verified on Redis and through the target.
#
# Prints a markdown table of medians per batch (wall ms; CPU µs of Redis,
# hop, client and all three; hop user/system split), total CPU / direct, and
# the median and quartiles of that ratio within each repetition (the
# machine's speed drifts between repetitions: the same work took from 1× to
# 1.7× the CPU time in one run), and writes it with a CSV to $RESULTS_DIR
# (cpu-batch-<time>.md/.csv).
#
# Environment (all optional): FILES (100000), BATCH (250), REPEAT (5),
# TARGETS ("direct relay nocache sidecache"), RESULTS_DIR, SIDECACHE_BIN,
# REDIS_SERVER, BATCHUNLINK_BIN, BENCH_TIMEOUT.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_init cpu-batch

FILES=${FILES:-100000}
BATCH=${BATCH:-250}
REPEAT=${REPEAT:-5}
TARGETS=${TARGETS:-"direct relay nocache sidecache"}
positive_ints FILES BATCH REPEAT
for t in $TARGETS; do
  case "$t" in direct|relay|nocache|sidecache) ;; *) die "TARGETS: direct, relay, nocache or sidecache, not '$t'" ;; esac
done

find_redis
find_sidecache
build_batchunlink
start_redis redis
declare -A port_of pid_of_t
port_of[direct]=$rport
for t in $TARGETS; do
  case $t in
    relay) start_relay relay "$rport"; port_of[relay]=$rlport ;;
    nocache) start_sidecache nocache "$rport" --cache-max-memory 0; port_of[nocache]=$sport ;;
    sidecache) start_sidecache sidecache "$rport"; port_of[sidecache]=$sport ;;
  esac
  [ "$t" = direct ] || pid_of_t[$t]=$(pid_of "$t")
done
redis_pid=$(pid_of redis)
log "$(versions_line); redis :$rport; targets: $TARGETS"

# ticks PID: "user system" clock ticks of the process so far
ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12, $13 }'; }
hz=$(getconf CLK_TCK)

declare -A wall_l redis_l hop_l client_l total_l hopu_l hops_l
for rep in $(seq "$REPEAT"); do
  order=$TARGETS
  [ $((rep % 2)) = 0 ] && order=$(echo "$TARGETS" | tr ' ' '\n' | tac | tr '\n' ' ')
  for t in $order; do
    p=${port_of[$t]} hp=${pid_of_t[$t]:-}
    # shellcheck disable=SC2086 # empty or one port
    flush_redis "$rport" ${port_of[sidecache]:-}
    "$BATCHUNLINK_BIN" -p "$rport" --populate --files "$FILES" --quiet || die "populate failed"
    "$BATCHUNLINK_BIN" -p "$p" --prewarm --files "$FILES" --quiet || die "prewarm through $t failed"
    log "$t (run $rep/$REPEAT, $FILES files)"
    out=$work/run-$t-$rep.csv
    r0=$(cpu_ns "$redis_pid") h0=0 hu0=0 hs0=0
    if [ -n "$hp" ]; then h0=$(cpu_ns "$hp"); read -r hu0 hs0 < <(ticks "$hp"); fi
    BATCHUNLINK_CPU=1 fg "$BATCHUNLINK_BIN" -p "$p" --unlink --files "$FILES" --batch "$BATCH" --label "$t" \
      --no-header >"$out" 2>"$out.err" || { cat "$out.err" >&2; die "unlink through $t failed"; }
    r1=$(cpu_ns "$redis_pid") h1=0 hu1=0 hs1=0
    if [ -n "$hp" ]; then h1=$(cpu_ns "$hp"); read -r hu1 hs1 < <(ticks "$hp"); fi
    for vp in "$rport" "$p"; do
      "$BATCHUNLINK_BIN" -p "$vp" --verify-empty --files "$FILES" --quiet || die "$t: verification on :$vp failed"
    done
    # label,mode,files,batches,round_trips,commands,conflicts,seconds,...
    IFS=, read -r _ _ _ nb _ _ _ s _ <"$out"
    read -r cu cs < <(awk '/cpu user_us/ { print $4, $6 }' "$out.err")
    [ -n "${cs:-}" ] || die "batchunlink printed no cpu line"
    wall_l[$t]+=" $(awk -v s="$s" -v nb="$nb" 'BEGIN { printf "%.3f", s * 1000 / nb }')"
    redis_l[$t]+=" $(( (r1 - r0) / 1000 / nb ))"
    hop_l[$t]+=" $(( (h1 - h0) / 1000 / nb ))"
    client_l[$t]+=" $(( (cu + cs) / nb ))"
    total_l[$t]+=" $(( (r1 - r0 + h1 - h0) / 1000 / nb + (cu + cs) / nb ))"
    hopu_l[$t]+=" $(( (hu1 - hu0) * 1000000 / hz / nb ))"
    hops_l[$t]+=" $(( (hs1 - hs0) * 1000000 / hz / nb ))"
    check_alive
  done
done

report_files cpu-batch
# shellcheck disable=SC2086 # word lists on purpose
base=$(median ${total_l[direct]:-})
{
  echo "# Where the CPU of a batch unlink goes ($stamp)"
  echo
  echo "$(versions_line); $FILES files, batches of $BATCH (a JuiceFS doBatchUnlink transaction each), no latency, no toxiproxy; median of $REPEAT run(s) per target. CPU per batch: Redis and the hop from schedstat (all threads), the hop's user/system split from clock ticks, the client's from getrusage."
  echo
  echo "| target | wall ms/batch | Redis CPU µs | hop CPU µs | hop user µs | hop system µs | client CPU µs | total CPU µs | total / direct | per repetition |"
  echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
} >"$md"
echo "target,wall_ms_per_batch,redis_us,hop_us,hop_user_us,hop_sys_us,client_us,total_us,total_ratio,paired_median,paired_p25,paired_p75,runs_total_us" >"$csv"
for t in $TARGETS; do
  # shellcheck disable=SC2086
  w=$(median ${wall_l[$t]}) r=$(median ${redis_l[$t]}) h=$(median ${hop_l[$t]}) hu=$(median ${hopu_l[$t]})
  # shellcheck disable=SC2086
  hs=$(median ${hops_l[$t]}) c=$(median ${client_l[$t]}) tot=$(median ${total_l[$t]})
  rt=$(ratio "$tot" "$base" 3) pr=n/a prc=,,
  if [ -n "${total_l[direct]:-}" ]; then
    pr=$(paired "${total_l[direct]}" "${total_l[$t]}") prc=$(paired "${total_l[direct]}" "${total_l[$t]}" csv)
  fi
  awk -v t="$t" -v w="$w" -v r="$r" -v h="$h" -v hu="$hu" -v hs="$hs" -v c="$c" -v tot="$tot" -v rt="${rt:-n/a}" -v pr="$pr" \
    'BEGIN { printf "| %s | %.2f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %s | %s |\n", t, w, r, h, hu, hs, c, tot, rt, pr }' >>"$md"
  echo "$t,$w,$r,$h,$hu,$hs,$c,$tot,${rt:-},$prc,$(runs "${total_l[$t]}")" >>"$csv"
done
cat "$md"
echo
echo "written: $md $csv"
