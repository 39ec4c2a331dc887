#!/usr/bin/env bash
# bench/latency.sh — what the cache buys when Redis is across a network.
#
# Redis sits behind toxiproxy (bench/toxiproxy: the stock server plus a
# "latency_us" toxic with microsecond resolution). For each added latency,
# loadgen runs a JuiceFS-shaped mix (bench/loadgen.c --mix juicefs90 …) at
# each client count against
#   direct     the toxiproxy port: every command pays the network round trip
#   sidecache  the proxy, whose upstream is the toxiproxy port: hits do not
# back to back. Before each run the data set is created afresh on Redis
# (FLUSHALL + populate: creates and unlinks change directories) and read once
# through the target (loadgen --prewarm, with the lookup script too: a lookup
# is answered only from what a lookup of that name filled), so both targets
# start from the same data and the cache is warm.
#
# The latency is added to the downstream stream (Redis → client) by default:
# every round trip, and every invalidation push, then takes L longer.
# TOXIC_STREAM=both puts L/2 on each direction instead (same round trip).
# Toxiproxy and timer wake-ups add their own delay on top; the script measures
# the round trip of a GET through toxiproxy at c=1 for each L, and unless
# CALIBRATE=0 lowers the toxic once so that the measured added round trip
# (over L=0) is L. The table shows both the toxic set and the measured RTT.
#
# Efficiency, per target: the scaling speedup ops(c) / ops(1) divided by the
# clients c, i.e. per-client throughput relative to one client (1.00 =
# perfect scaling). PNGs of ops/s and p99 against clients (bench/plot.sh) when
# gnuplot is installed.
#
# Prints a markdown table; writes it and CSVs (summary, and loadgen's per-op
# lines) to $RESULTS_DIR (latency-<time>.md/.csv/-ops.csv).
#
# Environment (all optional):
#   LATENCIES     added round trip, µs                      ("0 200 500 1000")
#   CLIENTS       loadgen connections                       ("1 4 8 16 32")
#   MIXES         loadgen mixes                             ("juicefs90 juicefs99")
#   DURATION      measured seconds per run                  (4)
#   WARMUP        unmeasured seconds before each run        (1)
#   KEYS          files in the data set (100 per directory) (10000)
#   DIST          key distribution: zipf, uniform, hot      (zipf)
#   TOXIC_STREAM  downstream or both                        (downstream)
#   CALIBRATE     1: correct the toxic for measured overshoot (1)
#   RTT_SAMPLES   GETs per round-trip measurement           (1000)
#   RESULTS_DIR, SIDECACHE_BIN, SIDECACHE_ARGS, REDIS_SERVER, TOXIPROXY_BIN, LOADGEN_BIN
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_init latency

LATENCIES=${LATENCIES:-"0 200 500 1000"}
CLIENTS=${CLIENTS:-"1 4 8 16 32"}
MIXES=${MIXES:-"juicefs90 juicefs99"}
DURATION=${DURATION:-4}
WARMUP=${WARMUP:-1}
KEYS=${KEYS:-10000}
DIST=${DIST:-zipf}
TOXIC_STREAM=${TOXIC_STREAM:-downstream}
CALIBRATE=${CALIBRATE:-1}
case " $CLIENTS " in *" 1 "*) ;; *) log "notice: CLIENTS has no 1: efficiency is relative to the smallest count" ;; esac

find_redis
find_sidecache
build_loadgen

start_redis redis
start_toxiproxy "$rport"
start_sidecache sidecache "$toxport"
log "$(versions_line); toxiproxy on :$toxport → redis :$rport; sidecache :$sport → :$toxport"

# fresh_data TARGET_PORT: the data set anew on Redis, then read once through the target
fresh_data() {
  rcli "$rport" FLUSHALL >/dev/null
  "$LOADGEN_BIN" -p "$rport" --populate --keys "$KEYS" --quiet || die "populate failed"
  # the proxy must have seen the flush before it is warmed
  for _ in $(seq 100); do
    [ "$(info_field "$sport" tracking_state)" = active ] && break
    sleep 0.05
  done
  "$LOADGEN_BIN" -p "$1" --prewarm -n 1 --mix get=1,lookup=1 --keys "$KEYS" --quiet --no-header >/dev/null \
    || die "prewarm through :$1 failed"
}

report_files latency
opscsv="$RESULTS_DIR/latency-$stamp-ops.csv"
echo "label,op,count,errors,conflicts,ops_per_s,mean_us,p50_us,p99_us,p999_us,max_us" >"$opscsv"
echo "mix,latency_us,toxic_us,rtt_p50_us,clients,direct_ops,sidecache_ops,speedup,eff_direct,eff_sidecache,direct_p50_us,sidecache_p50_us,direct_p99_us,sidecache_p99_us,sidecache_hit_ratio,direct_errors,sidecache_errors" >"$csv"

declare -A ops p50 p99 errs hitr toxic_of rtt_of
failed=0
# The latency loop is outermost: the toxic is set (and calibrated) once per L.
fresh_data "$toxport"
for L in $LATENCIES; do
  toxi_calibrate "$L"
  toxic_of[$L]=$toxic_us; rtt_of[$L]=$rtt_us
  for mix in $MIXES; do
    for c in $CLIENTS; do
      for t in direct sidecache; do
        p=$toxport
        [ "$t" = sidecache ] && p=$sport
        fresh_data "$p"
        hb=$(info_field "$sport" cache_hits); mb=$(info_field "$sport" cache_misses)
        out=$work/run-$mix-$L-$c-$t.csv
        log "$mix L=$L c=$c $t"
        rc=0
        fg "$LOADGEN_BIN" -p "$p" -c "$c" -d "$DURATION" --warmup "$WARMUP" --mix "$mix" --keys "$KEYS" \
          --dist "$DIST" --label "$t/${mix//,/+}/L$L/c$c" --no-header --quiet --allow-errors >"$out" 2>"$out.err" || rc=$?
        ha=$(info_field "$sport" cache_hits); ma=$(info_field "$sport" cache_misses)
        if [ "$rc" != 0 ]; then
          log "loadgen failed (exit $rc):"; tail -n 5 "$out.err" >&2; failed=1; continue
        fi
        cat "$out" >>"$opscsv"
        k="$mix,$L,$c,$t"
        IFS=, read -r _ _ _ e _ o _ l50 l99 _ _ < <(awk -F, '$2 == "total"' "$out")
        ops[$k]=$o; p50[$k]=$l50; p99[$k]=$l99; errs[$k]=$e
        [ "$e" = 0 ] || { log "$t: $e ops failed: $(head -c 300 "$out.err")"; failed=1; }
        if [ "$t" = sidecache ]; then
          hitr[$k]=$(awk -v h=$((ha - hb)) -v m=$((ma - mb)) 'BEGIN { if (h + m > 0) printf "%.3f", h / (h + m) }')
        fi
        check_alive
      done
    done
  done
done
toxi_set_latency 0

eff() { # ops(c) c ops(1) c1
  awk -v o="$1" -v c="$2" -v o1="$3" -v c1="$4" 'BEGIN { if (o != "" && o1 > 0) printf "%.2f", (o / c) / (o1 / c1) }'
}
c1=$(tr ' ' '\n' <<<"$CLIENTS" | grep . | sort -n | head -n1)
{
  echo "# sidecache behind network latency ($stamp)"
  echo
  echo "$(versions_line); toxiproxy latency_us toxic on $TOXIC_STREAM; loadgen $DURATION s (+${WARMUP} s warm-up)," \
    "--keys $KEYS --dist $DIST, data set recreated and prewarmed before every run; GET round trip through toxiproxy" \
    "with no toxic: p50 $toxi_base_rtt µs. Speedup = sidecache ops/s ÷ direct ops/s; efficiency, per target, = scaling ÷ clients = (ops(c) ÷ ops($c1)) ÷ (c ÷ $c1) (1.00 = linear scaling)."
  echo "Goal: speedup >= 10 at 500 µs for the read-heavy mix."
  for mix in $MIXES; do
    echo
    echo "## $mix"
    echo
    echo "| latency µs | toxic µs | GET RTT p50 µs | clients | direct ops/s | sidecache ops/s | speedup | eff. direct | eff. sidecache | p50 µs direct | p50 µs sidecache | p99 µs direct | p99 µs sidecache | hit ratio |"
    echo "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
    for L in $LATENCIES; do
      for c in $CLIENTS; do
        kd="$mix,$L,$c,direct"; ks="$mix,$L,$c,sidecache"
        od=${ops[$kd]:-}; os_=${ops[$ks]:-}
        sp=$(ratio "$os_" "$od")
        ed=$(eff "$od" "$c" "${ops[$mix,$L,$c1,direct]:-}" "$c1")
        es=$(eff "$os_" "$c" "${ops[$mix,$L,$c1,sidecache]:-}" "$c1")
        echo "| $L | ${toxic_of[$L]} | ${rtt_of[$L]} | $c | $(fmt0 "$od") | $(fmt0 "$os_") | ${sp:-n/a} | ${ed:-n/a} | ${es:-n/a} | $(fmt0 "${p50[$kd]:-}") | $(fmt0 "${p50[$ks]:-}") | $(fmt0 "${p99[$kd]:-}") | $(fmt0 "${p99[$ks]:-}") | ${hitr[$ks]:-n/a} |"
        echo "${mix//,/+},$L,${toxic_of[$L]},${rtt_of[$L]},$c,$od,$os_,$sp,$ed,$es,${p50[$kd]:-},${p50[$ks]:-},${p99[$kd]:-},${p99[$ks]:-},${hitr[$ks]:-},${errs[$kd]:-},${errs[$ks]:-}" >>"$csv"
      done
    done
  done
} >"$md"
cat "$md"
echo
echo "written: $md $csv $opscsv"
plot_csv "$csv"
[ "$failed" = 0 ] || die "some runs failed or had errors (see above)"
