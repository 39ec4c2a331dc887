#!/usr/bin/env bash
# bench/batch_unlink.sh — JuiceFS's batch unlink of one flat directory, direct
# vs through sidecache, with Redis behind 0 and 500 µs of network latency.
#
# Goal: through sidecache the run takes no more than 1.05 × the time direct.
#
# Redis sits behind toxiproxy (lib.sh start_toxiproxy, the latency_us toxic,
# calibrated as in latency.sh). For each latency L, REPEAT times, for each
# variant, for direct (the toxiproxy port) and sidecache (upstream: the
# toxiproxy port), back to back:
#   unlink  FLUSHALL; bench/batchunlink --populate creates d1 with FILES files
#           on Redis; --prewarm reads every attribute and entry once through
#           the target (a cache then holds the directory, as after the readdir
#           and lookups of an rm -r; PREWARM=0 skips it); then --unlink is
#           timed: batches of 250 entries, each a JuiceFS doBatchUnlink
#           transaction (WATCH i1 d1; GET i1; HMGET d1 names; WATCH i<ino>...;
#           MGET i<ino>...; MULTI HDEL, per file ZADD delfiles, DEL i, INCRBY
#           usedSpace, DECR totalInodes, SET i1 EXEC in one write; UNWATCH).
#   writes  FLUSHALL; --writes is timed: the same directory created through
#           the target with pipelines of SET i<ino> + HSET d1 name (250 files,
#           500 commands, per round trip).
# After each run the result is verified on Redis and through the target
# (unlink: d1 empty, GET of every i<ino> and HGET of every name nil, counters
# and delfiles right; writes: every value and entry present); a failed
# verification fails the script.
#
# Prints a markdown table (median seconds of REPEAT runs, ratio
# sidecache/direct, goal <= 1.05; beside it the median and quartiles of the
# per-repetition ratios, which show how far the machine's noise reaches), the
# CPU steal each timed run saw (a shared host's other machines), and writes
# it with a CSV to $RESULTS_DIR (batch-unlink-<time>.md/.csv).
#
# Environment (all optional):
#   FILES         files in the directory                    (100000)
#   LATENCIES     added round trip, µs, or loopback         ("loopback 0 500")
#                 loopback: nothing injected and no toxiproxy: direct is
#                 redis-server itself, sidecache (a second instance, up
#                 for those rows only) has it as its upstream. 0 keeps toxiproxy in the path with no
#                 toxic: its own hop (50-300 µs here) and CPU on the same
#                 cores, on both paths. The extra targets below run behind
#                 toxiproxy only.
#   REPEAT        runs per measurement, the median is shown (3)
#   VARIANTS      unlink and/or writes                      ("unlink writes")
#   BATCH         entries per transaction / pipeline        (250)
#   PREWARM       1: read the directory through the target before unlinking (1)
#   GOAL          the ratio not to exceed                   (1.05)
#   BASELINE_BIN  another sidecache build, run as a third target in every
#                 repetition (after the same FLUSHALL and populate); a second
#                 table compares the two builds: sidecache/baseline
#   UNIX          1: sidecache also listens on a unix socket, and the client
#                 reaching it there is one more target (unix): the per-node
#                 daemon of docs/DEPLOY.md, where JuiceFS's meta URL is
#                 unix:///run/sidecache/sidecache.sock; a table compares
#                 unix/direct with sidecache/direct
#   RELAY         1: bench/relay.c (a relay that forwards bytes and does
#                 nothing else) in front of toxiproxy is one more target: what
#                 the extra hop alone costs, the floor for a proxy that
#                 forwards every round trip; a table compares relay/direct
#                 with sidecache/direct and sidecache/relay
#   FUSED         1: one more target (fused), the same relay reached by a
#                 client that sends each WATCH in one write with the read
#                 after it and no UNWATCH (batchunlink --fused-watch): the 4
#                 round trips sidecache forwards, with nothing done to them
#                 on the way and none of the 3 it answers itself; what
#                 sidecache costs over it is its own work and those 3 local
#                 round trips
#   BATCHUNLINK_STEPS  set: log each unlink run's mean time per step, and
#                 add a table of them (median over the repetitions, per
#                 target): where a target adds time or saves it
#   TOXIC_STREAM, CALIBRATE, RTT_SAMPLES (see latency.sh)
#   RESULTS_DIR, SIDECACHE_BIN, SIDECACHE_ARGS, REDIS_SERVER, TOXIPROXY_BIN,
#   LOADGEN_BIN, BATCHUNLINK_BIN, BENCH_TIMEOUT
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_init batch-unlink

FILES=${FILES:-100000}
LATENCIES=${LATENCIES:-"loopback 0 500"}
REPEAT=${REPEAT:-3}
VARIANTS=${VARIANTS:-"unlink writes"}
BATCH=${BATCH:-250}
PREWARM=${PREWARM:-1}
GOAL=${GOAL:-1.05}
positive_ints FILES REPEAT BATCH
for L in $LATENCIES; do [[ "$L" == loopback || "$L" =~ ^[0-9]+$ ]] || die "LATENCIES: µs or loopback, not '$L'"; done
for v in $VARIANTS; do case "$v" in unlink|writes) ;; *) die "VARIANTS: unlink or writes, not '$v'" ;; esac; done

find_redis
find_sidecache
build_loadgen
build_batchunlink

start_redis redis
start_toxiproxy "$rport"
ssock=""
if [ "${UNIX:-0}" = 1 ]; then
  ssock=$work/sidecache.sock
  start_sidecache sidecache "$toxport" --unixsocket "$ssock"
else
  start_sidecache sidecache "$toxport"
fi
loport=""
rlport=""
if [ "${RELAY:-0}" = 1 ] || [ "${FUSED:-0}" = 1 ]; then
  start_relay relay "$toxport"
fi
bport=""
if [ -n "${BASELINE_BIN:-}" ]; then
  [ -x "$BASELINE_BIN" ] || die "BASELINE_BIN $BASELINE_BIN is not an executable"
  main_bin=$SIDECACHE_BIN main_port=$sport
  SIDECACHE_BIN=$BASELINE_BIN start_sidecache baseline "$toxport"
  bport=$sport SIDECACHE_BIN=$main_bin sport=$main_port
fi
log "$(versions_line); toxiproxy on :$toxport → redis :$rport; sidecache :$sport → :$toxport"

# the targets after direct and sidecache, in the order they run
extra="${ssock:+ unix}${bport:+ baseline}"
[ "${RELAY:-0}" = 1 ] && extra+=" relay"
[ "${FUSED:-0}" = 1 ] && extra+=" fused"

bu() { "$BATCHUNLINK_BIN" --files "$FILES" --batch "$BATCH" "$@"; }



report_files batch-unlink
declare -A secs_l bp50_l bp99_l rts toxic_of rtt_of step_l steal_l
for L in $LATENCIES; do
  if [ "$L" = loopback ]; then
    # a second sidecache, up only for these rows: it tracks the keys too,
    # and Redis's invalidations to it would cost CPU in the other rows
    main_port=$sport
    start_sidecache sidecache-loopback "$rport"
    loport=$sport sport=$main_port
    toxic_of[$L]=-; rtt_of[$L]=$(toxi_rtt "$rport")
    log "L=loopback: no toxiproxy, GET round trip p50 ${rtt_of[$L]} µs"
  else
    toxi_calibrate "$L"
    toxic_of[$L]=$toxic_us; rtt_of[$L]=$rtt_us
  fi
  for rep in $(seq "$REPEAT"); do
    for v in $VARIANTS; do
      # alternate which target goes first, so that drift favours neither
      order="direct sidecache$extra"
      [ "$L" = loopback ] && order="direct sidecache"
      [ $((rep % 2)) = 0 ] && order="$(echo "$order" | tr ' ' '\n' | tac | tr '\n' ' ')"
      for t in $order; do
        # at: how batchunlink reaches the target
        case $L/$t in
          loopback/direct) at="-p $rport" ;; loopback/sidecache) at="-p $loport" ;;
          */direct) at="-p $toxport" ;; */sidecache) at="-p $sport" ;; */unix) at="-s $ssock" ;;
          */baseline) at="-p $bport" ;; */relay | */fused) at="-p $rlport" ;;
        esac
        how=""
        [ "$t" = fused ] && [ "$v" = unlink ] && how="--fused-watch"
        # shellcheck disable=SC2086 # empty or one port each
        flush_redis "$rport" $sport $loport $bport
        if [ "$v" = unlink ]; then
          bu -p "$rport" --populate --quiet || die "populate failed"
          # shellcheck disable=SC2086 # $at is two words on purpose
          if [ "$PREWARM" = 1 ]; then bu $at --prewarm --quiet || die "prewarm through $t failed"; fi
        fi
        out=$work/run-$L-$v-$t-$rep.csv
        log "L=$L $v $t (run $rep/$REPEAT, $FILES files)"
        rc=0
        read -r steal0 ticks0 < <(cpu_ticks)
        # shellcheck disable=SC2086
        fg "$BATCHUNLINK_BIN" $at $how --"$v" --files "$FILES" --batch "$BATCH" --label "$t" --no-header \
          >"$out" 2>"$out.err" || rc=$?
        read -r steal1 ticks1 < <(cpu_ticks)
        steal_l[$L,$v,$t]+=" $(awk -v s=$((steal1 - steal0)) -v t=$((ticks1 - ticks0)) 'BEGIN { printf "%.1f", (t > 0 ? 100 * s / t : 0) }')"
        [ "$rc" = 0 ] || { cat "$out.err" >&2; die "$v through $t failed (exit $rc)"; }
        # BATCHUNLINK_STEPS=1: batchunlink's per-step means, in the log
        if [ -n "${BATCHUNLINK_STEPS:-}" ] && [ "$v" = unlink ]; then
          grep 'step' "$out.err" | sed "s/^batchunlink: /  $t /" >&2
          i=0
          while read -r mean; do
            step_l[$L,$t,$i]+=" $mean"; i=$((i + 1))
          done < <(awk '/ step / { print $(NF - 1) }' "$out.err")
        fi
        check="--verify-empty"
        [ "$v" = writes ] && check="--verify-full"
        for vp in "-p $rport" "$at"; do
          # shellcheck disable=SC2086
          bu $vp "$check" --quiet || die "$v through $t: verification on $vp failed"
        done
        # label,mode,files,batches,round_trips,commands,conflicts,seconds,batch_p50_us,batch_p99_us,batch_max_us
        IFS=, read -r _ _ _ _ nrt _ conf s b50 b99 _ <"$out"
        [ "$conf" = 0 ] || log "note: $conf WATCH conflicts"
        k="$L,$v,$t"
        secs_l[$k]+=" $s"; bp50_l[$k]+=" $b50"; bp99_l[$k]+=" $b99"
        [ "$t" = direct ] && rts[$v]=$nrt # the round trips of the table are direct's
        check_alive
      done
    done
  done
  if [ "$L" = loopback ]; then stop sidecache-loopback; loport=""; fi
done
toxi_set_latency 0

over=0
{
  echo "# Batch unlink of one flat directory ($stamp)"
  echo
  echo "$(versions_line); $FILES files in d1, batches of $BATCH; toxiproxy latency_us toxic on $TOXIC_STREAM" \
    "(GET round trip with no toxic: p50 ${toxi_base_rtt:-n/a} µs); latency loopback: no toxiproxy, direct is redis-server itself and sidecache's upstream is redis-server (nothing injected); median of $REPEAT run(s); prewarm $PREWARM." \
    "unlink: JuiceFS doBatchUnlink transactions (7 round trips per batch direct, 4 through sidecache, which answers the two WATCHes ahead and the final UNWATCH); writes: SET + HSET pipelines (1 round trip per batch)."
  echo "Goal: sidecache/direct <= $GOAL (the ratio of the medians). Per repetition: the median of sidecache/direct in each repetition, where the two ran back to back, and in brackets the quartiles of those ratios (with fewer than 5 repetitions, their range)."
  echo
  echo "| latency µs | toxic µs | GET RTT p50 µs | variant | round trips | direct s | sidecache s | sidecache/direct | per repetition | goal | batch p50 ms direct | batch p50 ms sidecache | batch p99 ms direct | batch p99 ms sidecache |"
  echo "|--:|--:|--:|---|--:|--:|--:|--:|--:|---|--:|--:|--:|--:|"
} >"$md"
echo "latency_us,toxic_us,rtt_p50_us,variant,files,batch,round_trips,direct_s,sidecache_s,ratio,goal,direct_batch_p50_us,sidecache_batch_p50_us,direct_batch_p99_us,sidecache_batch_p99_us,direct_runs_s,sidecache_runs_s,paired_median,paired_p25,paired_p75" >"$csv"
# side_table TARGET: the medians of direct, TARGET and sidecache, and their ratios
side_table() {
  local t=$1 L v d b s
  echo "| latency µs | variant | direct s | $t s | sidecache s | $t/direct | sidecache/direct | sidecache/$t | sidecache/$t per repetition |"
  echo "|--:|---|--:|--:|--:|--:|--:|--:|--:|"
  for L in $LATENCIES; do
    [ "$L" = loopback ] && continue # (the extra targets run behind toxiproxy only)
    for v in $VARIANTS; do
      # shellcheck disable=SC2086 # word lists on purpose
      d=$(median ${secs_l[$L,$v,direct]}) b=$(median ${secs_l[$L,$v,$t]}) s=$(median ${secs_l[$L,$v,sidecache]})
      awk -v L="$L" -v v="$v" -v d="$d" -v b="$b" -v s="$s" -v p="$(paired "${secs_l[$L,$v,$t]}" "${secs_l[$L,$v,sidecache]}")" \
        'BEGIN { printf "| %s | %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %s |\n", L, v, d, b, s, b / d, s / d, s / b, p }'
    done
  done
}

for L in $LATENCIES; do
  for v in $VARIANTS; do
    declare -A m=() m50=() m99=()
    for t in direct sidecache; do
      # shellcheck disable=SC2086 # word lists on purpose
      m[$t]=$(median ${secs_l[$L,$v,$t]})
      # shellcheck disable=SC2086
      m50[$t]=$(median ${bp50_l[$L,$v,$t]})
      # shellcheck disable=SC2086
      m99[$t]=$(median ${bp99_l[$L,$v,$t]})
    done
    r=$(awk -v a="${m[sidecache]}" -v b="${m[direct]}" 'BEGIN { if (b > 0) printf "%.3f", a / b }')
    verdict="≤ $GOAL ok"
    if awk -v r="$r" -v g="$GOAL" 'BEGIN { exit !(r > g) }'; then verdict="**over $GOAL**"; over=$((over + 1)); fi
    echo "| $L | ${toxic_of[$L]} | ${rtt_of[$L]} | $v | ${rts[$v]} | $(printf '%.3f' "${m[direct]}") | $(printf '%.3f' "${m[sidecache]}") | $r | $(paired "${secs_l[$L,$v,direct]}" "${secs_l[$L,$v,sidecache]}") | $verdict | $(ms "${m50[direct]}") | $(ms "${m50[sidecache]}") | $(ms "${m99[direct]}") | $(ms "${m99[sidecache]}") |" >>"$md"
    echo "$L,${toxic_of[$L]},${rtt_of[$L]},$v,$FILES,$BATCH,${rts[$v]},${m[direct]},${m[sidecache]},$r,$GOAL,${m50[direct]},${m50[sidecache]},${m99[direct]},${m99[sidecache]},$(runs "${secs_l[$L,$v,direct]}"),$(runs "${secs_l[$L,$v,sidecache]}"),$(paired "${secs_l[$L,$v,direct]}" "${secs_l[$L,$v,sidecache]}" csv)" >>"$csv"
  done
done
{
  echo
  echo "Rows over the goal: $over. Every run verified: d1 empty, no file's attribute or entry left (on Redis and through the target)."
  echo
  echo "CPU steal during the timed runs (/proc/stat: time the hypervisor gave this machine's CPUs to others; it stretches the run it lands in):"
  for L in $LATENCIES; do
    for v in $VARIANTS; do
      for t in direct sidecache; do
        # shellcheck disable=SC2086 # a word list on purpose
        echo "- $L$([ "$L" = loopback ] || echo " µs"), $v, $t: median $(median ${steal_l[$L,$v,$t]}) %, max $(printf '%s\n' ${steal_l[$L,$v,$t]} | sort -g | tail -1) % (each run:${steal_l[$L,$v,$t]})"
      done
    done
  done
  if [ -n "$bport" ]; then
    echo
    echo "Baseline build $BASELINE_BIN, run as a third target in the same repetitions:"
    echo
    side_table baseline
  fi
  if [ -n "${BATCHUNLINK_STEPS:-}" ] && [[ " $VARIANTS " == *" unlink "* ]]; then
    step_names=("WATCH i d" "GET i" "HMGET" "WATCH inodes" "MGET" "MULTI..EXEC" "UNWATCH")
    echo
    echo "Mean µs per step of the unlink (BATCHUNLINK_STEPS; median over the repetitions; a step a client of that target does not make is 0):"
    echo
    echo "| latency µs | step | $(echo direct sidecache $extra | sed 's/ \+/ | /g') |"
    echo "|--:|---|$(for _ in direct sidecache $extra; do printf -- '--:|'; done)"
    for L in $LATENCIES; do
      for i in "${!step_names[@]}" sum; do
        label="sum of the steps"
        [ "$i" = sum ] || label=${step_names[$i]}
        row="| $L | $label |"
        for t in direct sidecache $extra; do
          case $L/$t in loopback/direct | loopback/sidecache | [0-9]*) ;; *) row+=" - |"; continue ;; esac
          if [ "$i" = sum ]; then
            # the sum of each repetition's step means, then their median
            sums=$(for j in 0 1 2 3 4 5 6; do echo "${step_l[$L,$t,$j]}"; done |
              awk '{ for (k = 1; k <= NF; k++) s[k] += $k; if (NF > n) n = NF } END { for (k = 1; k <= n; k++) printf "%s ", s[k] }')
            # shellcheck disable=SC2086
            row+=" $(median $sums | awk '{ printf "%.0f", $1 }') |"
          else
            # shellcheck disable=SC2086
            row+=" $(median ${step_l[$L,$t,$i]} | awk '{ printf "%.0f", $1 }') |"
          fi
        done
        echo "$row"
      done
    done
  fi
  if [ -n "$ssock" ]; then
    echo
    echo "The same sidecache reached on its unix socket (the per-node daemon of docs/DEPLOY.md), run as another target in the same repetitions:"
    echo
    side_table unix
  fi
  if [ "${RELAY:-0}" = 1 ]; then
    echo
    echo "A relay that only forwards bytes (bench/relay.c), run as another target in the same repetitions:"
    echo
    side_table relay
  fi
  if [ "${FUSED:-0}" = 1 ]; then
    echo
    echo "The same relay, reached by a client that sends each WATCH with the read after it and no UNWATCH (batchunlink --fused-watch: 4 round trips a batch, as through sidecache, but none answered on the way; the writes variant is sent as to relay), run as another target in the same repetitions:"
    echo
    side_table fused
  fi
} >>"$md"
cat "$md"
echo
echo "written: $md $csv"
