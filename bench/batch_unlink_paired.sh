#!/usr/bin/env bash
# bench/batch_unlink_paired.sh — the batch unlink of batch_unlink.sh, direct
# and through sidecache in one process, in turns of TURN transactions.
#
# batch_unlink.sh times direct, then sidecache, each a whole run of seconds:
# on a shared host the CPU steal of one run (0-25 % of the time here) lands
# on one target and not on the other, and moves their ratio by more than the
# 5 % being judged. Here one batchunlink (--pair-port) runs TURN 250-entry
# transactions on one target, then the same ones on the other, which one
# first alternating: both meet the machine in the same moments, and each
# target's time is the sum of its own transactions.
#
# TURN is 100 (about 0.3 s at 0 µs), not 1: turns of one transaction (3 ms)
# wake each target's processes, after the other's transaction, with their
# CPU caches filled with the other's data. A client that stays on one
# target never pays that, and sidecache, whose cache is far larger than
# what Redis touches in a transaction, pays it most: at 0 µs, 5 runs each,
# 1.145x direct in turns of 1, 1.05-1.07x in turns of 100 (its local
# answer to the first WATCH: 96 then 38 µs); the relay 1.08x and 1.09x.
# TURN=1 gives the ratio of earlier sessions' notes.
#
# Two Redis servers hold the same directory (FILES files, populated alike):
# one behind direct, one behind sidecache, so that neither sees the other's
# writes (sidecache's invalidations of direct's writes would cost CPU in
# direct's turns). For each latency both go through one toxiproxy, a proxy
# each with the same latency_us toxic (calibrated as in latency.sh); for
# loopback, no toxiproxy: direct is its redis-server itself, and a sidecache
# up for those rows only has the other redis-server as its upstream.
#
# Each repetition: FLUSHALL both, populate both, read the directory once
# through each target (PREWARM), the paired unlink, then the result verified
# on both Redis servers and through both targets (as batch_unlink.sh).
#
# Prints a markdown table (median seconds of REPEAT runs, the ratio of the
# medians against GOAL, and the median and quartiles of the per-run ratios)
# and the CPU steal each run saw; writes it with a CSV to $RESULTS_DIR
# (batch-unlink-paired-<time>.md/.csv). With BATCHUNLINK_STEPS set, a table
# of the mean time of each step too.
#
# TRACK_DIRECT=1 starts a second sidecache on direct's Redis for each row,
# which nothing reaches: it only holds its invalidation connection (as
# another mount's proxy would), so Redis tracks direct's writes too and
# writes their invalidations to it. Both targets then pay Redis's tracking
# work alike, and the ratio is what sidecache's own work costs.
#
# PIN (1; see lib.sh pin_hosts) gives Redis and toxiproxy a core of their
# own, and the client and the proxy the other, as on two hosts: where
# sidecache runs, beside a mount, Redis is on another machine. Left to the
# scheduler (PIN=0), the four processes of the sidecache target share two
# cores with Redis, and sidecache's work, put on Redis's core at times,
# delays Redis's: at 0 µs, 11 runs each, the runs' own ratios had a median
# of 1.052 (quartiles 1.018-1.077) unpinned, 1.008 (0.973-1.051) pinned.
#
# HOP=relay puts bench/relay.c (a relay that forwards bytes, nothing else)
# where sidecache is: the same pairing gives what one more hop costs on its
# own, the floor of any proxy that forwards every round trip.
#
# Environment (all optional): FILES (100000), LATENCIES ("loopback 0 500"),
# REPEAT (3), BATCH (250), TURN (100), PREWARM (1), GOAL (1.05), PIN (1),
# HOP (sidecache or relay), TRACK_DIRECT, BATCHUNLINK_STEPS,
# TOXIC_STREAM, CALIBRATE, RTT_SAMPLES (see latency.sh), RESULTS_DIR,
# SIDECACHE_BIN, SIDECACHE_ARGS, REDIS_SERVER, TOXIPROXY_BIN, LOADGEN_BIN,
# BATCHUNLINK_BIN, BENCH_TIMEOUT.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
PIN=${PIN:-1}
bench_init batch-unlink-paired

FILES=${FILES:-100000}
LATENCIES=${LATENCIES:-"loopback 0 500"}
REPEAT=${REPEAT:-3}
BATCH=${BATCH:-250}
TURN=${TURN:-100}
PREWARM=${PREWARM:-1}
GOAL=${GOAL:-1.05}
HOP=${HOP:-sidecache}
case "$HOP" in sidecache|relay) ;; *) die "HOP: sidecache or relay, not '$HOP'" ;; esac
positive_ints FILES REPEAT BATCH TURN
for L in $LATENCIES; do [[ "$L" == loopback || "$L" =~ ^[0-9]+$ ]] || die "LATENCIES: µs or loopback, not '$L'"; done

find_redis
find_sidecache
build_loadgen
build_batchunlink

start_paired_redis
log "$(versions_line); direct: toxiproxy :$toxdirect → redis :$rdirect; sidecache → toxiproxy :$toxside → redis :$rside (loopback: → redis :$rside)"

bu() { "$BATCHUNLINK_BIN" --files "$FILES" --batch "$BATCH" "$@"; }
# start_hop NAME UPSTREAM_PORT: sidecache or the relay (HOP); sets $sport
start_hop() {
  if [ "$HOP" = relay ]; then start_relay "$1" "$2"; sport=$rlport; else start_sidecache "$1" "$2"; fi
}
step_names=("WATCH i d" "GET i" "HMGET" "WATCH inodes" "MGET" "MULTI..EXEC" "UNWATCH")

report_files batch-unlink-paired
declare -A secs_l bp50_l bp99_l toxic_of rtt_of steal_l step_l
for L in $LATENCIES; do
  [ -z "${TRACK_DIRECT:-}" ] || start_sidecache "tracker-$L" "$rdirect"
  # a sidecache for this row only: one up in another row would track the
  # same keys, and Redis's invalidations to it cost CPU in sidecache's turns
  if [ "$L" = loopback ]; then
    start_hop "$HOP-$L" "$rside"
    dport=$rdirect sport_l=$sport
    toxic_of[$L]=-; rtt_of[$L]=$(toxi_rtt "$rdirect")
    log "L=loopback: no toxiproxy, GET round trip p50 ${rtt_of[$L]} µs"
  else
    start_hop "$HOP-$L" "$toxside"
    dport=$toxdirect sport_l=$sport
    toxi_calibrate "$L"
    toxic_of[$L]=$toxic_us; rtt_of[$L]=$rtt_us
  fi
  for rep in $(seq "$REPEAT"); do
    flush_redis "$rdirect"
    # a sidecache with its cache on must show it empty again (a relay, or
    # SIDECACHE_ARGS=--cache-max-memory 0, has none)
    if [ "$HOP" = sidecache ] && [ "$(info_field "$sport_l" cache_enabled)" = 1 ]; then
      flush_redis "$rside" "$sport_l"
    else
      flush_redis "$rside"
    fi
    bu -p "$rdirect" --populate --quiet || die "populate (direct) failed"
    bu -p "$rside" --populate --quiet || die "populate (sidecache) failed"
    if [ "$PREWARM" = 1 ]; then
      bu -p "$dport" --prewarm --quiet || die "prewarm direct failed"
      bu -p "$sport_l" --prewarm --quiet || die "prewarm through $HOP failed"
    fi
    out=$work/run-$L-$rep.csv
    log "L=$L paired unlink (run $rep/$REPEAT, $FILES files each)"
    read -r steal0 ticks0 < <(cpu_ticks)
    rc=0
    fg "$BATCHUNLINK_BIN" -p "$dport" --pair-port "$sport_l" --label direct --pair-label "$HOP" --unlink \
      --pair-block "$TURN" --files "$FILES" --batch "$BATCH" --no-header >"$out" 2>"$out.err" || rc=$?
    read -r steal1 ticks1 < <(cpu_ticks)
    [ "$rc" = 0 ] || { cat "$out.err" >&2; die "the paired unlink failed (exit $rc)"; }
    steal_l[$L]+=" $(awk -v s=$((steal1 - steal0)) -v t=$((ticks1 - ticks0)) 'BEGIN { printf "%.1f", (t > 0 ? 100 * s / t : 0) }')"
    grep 'paired' "$out.err" >&2 || true
    if [ -n "${BATCHUNLINK_STEPS:-}" ]; then
      for t in direct "$HOP"; do
        i=0
        while read -r mean; do
          step_l[$L,$t,$i]+=" $mean"; i=$((i + 1))
        done < <(awk -v t="$t" '$2 == "step" && $3 == t { print $(NF - 1) }' "$out.err")
      done
    fi
    for vp in "$rdirect" "$dport" "$rside" "$sport_l"; do
      bu -p "$vp" --verify-empty --quiet || die "verification on :$vp failed"
    done
    # label,mode,files,batches,round_trips,commands,conflicts,seconds,batch_p50_us,batch_p99_us,batch_max_us
    while IFS=, read -r t _ _ _ _ _ conf s b50 b99 _; do
      [ "$conf" = 0 ] || log "note: $t: $conf WATCH conflicts"
      secs_l[$L,$t]+=" $s"; bp50_l[$L,$t]+=" $b50"; bp99_l[$L,$t]+=" $b99"
    done <"$out"
    check_alive
  done
  stop "$HOP-$L"
  [ -z "${TRACK_DIRECT:-}" ] || stop "tracker-$L"
done
toxi_set_latency 0

over=0
{
  echo "# Batch unlink, direct and through $HOP in turns of $TURN transactions ($stamp)"
  echo
  echo "$(versions_line); $FILES files in d1 on each of two redis-servers$([ -z "${TRACK_DIRECT:-}" ] || echo " (direct's tracked by an idle sidecache too: TRACK_DIRECT)"), batches of $BATCH; turns of $TURN transactions on one target, then the same on the other (which first alternating), one client; seconds = the sum of a target's own transactions; median of $REPEAT run(s); prewarm $PREWARM; toxiproxy latency_us toxic on $TOXIC_STREAM (GET round trip with no toxic: p50 ${toxi_base_rtt:-n/a} µs); loopback: no toxiproxy."
  echo "Goal: $HOP/direct <= $GOAL (the ratio of the medians). Per run: the median and quartiles of the runs' own ratios (with fewer than 5 runs, their range)."
  echo
  echo "| latency µs | toxic µs | GET RTT p50 µs | direct s | $HOP s | $HOP/direct | per run | goal | batch p50 ms direct | batch p50 ms $HOP | batch p99 ms direct | batch p99 ms $HOP |"
  echo "|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|--:|--:|"
} >"$md"
echo "latency_us,toxic_us,rtt_p50_us,files,batch,direct_s,${HOP}_s,ratio,goal,direct_batch_p50_us,${HOP}_batch_p50_us,direct_batch_p99_us,${HOP}_batch_p99_us,direct_runs_s,${HOP}_runs_s,paired_median,paired_p25,paired_p75" >"$csv"
for L in $LATENCIES; do
  declare -A m=() m50=() m99=()
  for t in direct "$HOP"; do
    # shellcheck disable=SC2086 # word lists on purpose
    m[$t]=$(median ${secs_l[$L,$t]}); m50[$t]=$(median ${bp50_l[$L,$t]}); m99[$t]=$(median ${bp99_l[$L,$t]})
  done
  r=$(ratio "${m[$HOP]}" "${m[direct]}" 3)
  verdict="≤ $GOAL ok"
  if awk -v r="$r" -v g="$GOAL" 'BEGIN { exit !(r > g) }'; then verdict="**over $GOAL**"; over=$((over + 1)); fi
  echo "| $L | ${toxic_of[$L]} | ${rtt_of[$L]} | $(printf '%.3f' "${m[direct]}") | $(printf '%.3f' "${m[$HOP]}") | $r | $(paired "${secs_l[$L,direct]}" "${secs_l[$L,$HOP]}") | $verdict | $(ms "${m50[direct]}") | $(ms "${m50[$HOP]}") | $(ms "${m99[direct]}") | $(ms "${m99[$HOP]}") |" >>"$md"
  echo "$L,${toxic_of[$L]},${rtt_of[$L]},$FILES,$BATCH,${m[direct]},${m[$HOP]},$r,$GOAL,${m50[direct]},${m50[$HOP]},${m99[direct]},${m99[$HOP]},$(runs "${secs_l[$L,direct]}"),$(runs "${secs_l[$L,$HOP]}"),$(paired "${secs_l[$L,direct]}" "${secs_l[$L,$HOP]}" csv)" >>"$csv"
done
{
  echo
  echo "Rows over the goal: $over. Every run verified: d1 empty, no file's attribute or entry left (on both Redis servers and through both targets)."
  echo
  echo "CPU steal during the paired runs (/proc/stat; it falls on both targets alike here):"
  for L in $LATENCIES; do
    # shellcheck disable=SC2086 # a word list on purpose
    echo "- $L$([ "$L" = loopback ] || echo " µs"): median $(median ${steal_l[$L]}) %, max $(printf '%s\n' ${steal_l[$L]} | sort -g | tail -1) % (each run:${steal_l[$L]})"
  done
  if [ -n "${BATCHUNLINK_STEPS:-}" ]; then
    echo
    echo "Mean µs per step (BATCHUNLINK_STEPS; median over the runs):"
    echo
    echo "| latency µs | step | direct | $HOP |"
    echo "|--:|---|--:|--:|"
    for L in $LATENCIES; do
      for i in "${!step_names[@]}"; do
        # shellcheck disable=SC2086 # word lists on purpose
        echo "| $L | ${step_names[$i]} | $(median ${step_l[$L,direct,$i]} | awk '{ printf "%.0f", $1 }') | $(median ${step_l[$L,$HOP,$i]} | awk '{ printf "%.0f", $1 }') |"
      done
    done
  fi
} >>"$md"
cat "$md"
echo
echo "written: $md $csv"
