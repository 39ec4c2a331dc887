#!/usr/bin/env bash
# bench/compare.sh — side by side: redis-benchmark GET and SET against
#   direct     redis-server itself
#   sidecache  ./sidecache in front of the same redis-server
#   twemproxy  nutcracker (one server, one server connection) in front of it
# for every clients × pipeline combination, all in one run on one
# redis-server, each combination measured on the three targets back to back.
#
# Prints a markdown table and writes it, with a CSV of the same numbers plus
# latencies, to $RESULTS_DIR (default /tmp). Starts and stops everything itself.
#
# Environment (all optional):
#   N                    requests per run without pipelining      (100000)
#   N_PIPE               requests per run with pipelining         (5 × N)
#   CLIENTS              client counts, -c                        ("1 8 32")
#   PIPELINES            pipeline depths, -P                      ("1 16")
#   KEYSPACE             -r: random keys in [0, KEYSPACE)         (100000)
#   DATASIZE             -d: value size in bytes                  (3)
#   RESULTS_DIR          where the .md and .csv go                (/tmp)
#   SIDECACHE_BIN        proxy binary                             (see lib.sh)
#   SIDECACHE_ARGS       extra proxy arguments, e.g. a config file
#   NUTCRACKER_BIN       twemproxy binary                         (/usr/sbin/nutcracker, else PATH)
#   REDIS_SERVER         redis-server binary                      (/usr/bin/redis-server, else PATH)
#   BENCH_ALLOW_MISSING  1: a missing sidecache or nutcracker binary leaves
#                        its column empty with a notice instead of failing
#   REPEAT               runs of each measurement; the median is reported (1)
#   BENCH_TIMEOUT        seconds one redis-benchmark run may take (180)
set -euo pipefail
# shellcheck disable=SC2034 # used by lib.sh (fg)
BENCH_TIMEOUT=${BENCH_TIMEOUT:-180}
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_init compare

N=${N:-100000}
N_PIPE=${N_PIPE:-$((N * 5))}
CLIENTS=${CLIENTS:-"1 8 32"}
PIPELINES=${PIPELINES:-"1 16"}
KEYSPACE=${KEYSPACE:-100000}
DATASIZE=${DATASIZE:-3}
REPEAT=${REPEAT:-1}
positive_ints N N_PIPE KEYSPACE DATASIZE REPEAT BENCH_TIMEOUT

find_redis
find_redis_benchmark
targets=(direct)
missing_note=()
if (find_sidecache) >/dev/null 2>&1; then
  find_sidecache
  targets+=(sidecache)
elif [ "${BENCH_ALLOW_MISSING:-0}" = 1 ]; then
  missing_note+=("the sidecache binary is missing: its column is empty (BENCH_ALLOW_MISSING=1)")
else
  find_sidecache # dies, saying why
fi
find_nutcracker
if [ -n "$NUTCRACKER_BIN" ]; then
  targets+=(twemproxy)
elif [ "${BENCH_ALLOW_MISSING:-0}" = 1 ]; then
  missing_note+=("nutcracker is missing: the twemproxy column is empty (BENCH_ALLOW_MISSING=1)")
else
  die "nutcracker not found (Debian package nutcracker), or BENCH_ALLOW_MISSING=1 to skip it"
fi
for m in "${missing_note[@]}"; do log "notice: $m"; done

# probe NAME PORT: a SET and a GET through the target must really reach Redis
# (redis-benchmark counts error replies as requests, so a target that answered
# everything with an error would look fast).
probe() {
  local name=$1 port=$2 v
  v="probe-$name-$$"
  [ "$(rcli "$port" SET "bench:probe:$name" "$v")" = OK ] || die "$name: SET through it failed"
  [ "$(rcli "$port" GET "bench:probe:$name")" = "$v" ] || die "$name: GET through it failed"
  [ "$(rcli "$rport" GET "bench:probe:$name")" = "$v" ] || die "$name: a SET through it did not reach redis-server"
}

declare -A port
start_redis redis
port[direct]=$rport
for t in "${targets[@]}"; do
  case "$t" in
    sidecache) start_sidecache sidecache "$rport"; port[sidecache]=$sport ;;
    twemproxy) start_twemproxy twemproxy "$rport"; port[twemproxy]=$tport ;;
  esac
done
for t in "${targets[@]}"; do probe "$t" "${port[$t]}"; done

nc_ver=""
if [ -n "$NUTCRACKER_BIN" ]; then
  nc_ver=$("$NUTCRACKER_BIN" -V 2>&1 | sed -n 's/^This is nutcracker-//p' | head -n1) || true
fi
log "$(versions_line); targets: ${targets[*]}; N=$N N_PIPE=$N_PIPE"

# Per run, the values of rps, p50 and p99 are collected in lists keyed by
# target,TEST,c,P; the report shows the median over the REPEAT runs.
declare -A rps_l p50_l p99_l rps p50 p99
failed=0
for P in $PIPELINES; do
  n=$N
  [ "$P" -gt 1 ] && n=$N_PIPE
  for c in $CLIENTS; do
    for rep in $(seq "$REPEAT"); do
      for t in "${targets[@]}"; do
        out="$work/bench-$t-c$c-P$P-$rep.csv"
        log "$t: -c $c -P $P -n $n (run $rep/$REPEAT)"
        brc=0
        fg "$REDIS_BENCHMARK" -h 127.0.0.1 -p "${port[$t]}" -t set,get -n "$n" -c "$c" -P "$P" \
          -r "$KEYSPACE" -d "$DATASIZE" -q --csv >"$out" 2>"$out.err" || brc=$?
        if [ "$brc" != 0 ]; then
          log "$t -c $c -P $P: redis-benchmark failed or timed out after ${BENCH_TIMEOUT}s:"
          tail -n 5 "$out.err" >&2 || true
          failed=1
          continue
        fi
        if grep -qi 'error' "$out.err"; then
          log "$t -c $c -P $P: redis-benchmark reported errors:"; grep -i error "$out.err" | head -n 5 >&2
          failed=1
        fi
        # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
        got=""
        while IFS=, read -r test r _avg _min l50 _p95 l99 _max; do
          test=${test//\"/}
          [ "$test" = test ] && continue
          k="$t,$test,$c,$P"
          rps_l[$k]+=" ${r//\"/}"
          p50_l[$k]+=" ${l50//\"/}"
          p99_l[$k]+=" ${l99//\"/}"
          got+=" $test"
        done <"$out"
        for test in GET SET; do
          case "$got " in *" $test "*) ;; *) log "$t -c $c -P $P: no $test result"; failed=1 ;; esac
        done
      done
      check_alive # the targets must still be alive after each round
    done
  done
done
# shellcheck disable=SC2086 # the lists are split into median's arguments on purpose
for k in "${!rps_l[@]}"; do
  rps[$k]=$(median ${rps_l[$k]})
  p50[$k]=$(median ${p50_l[$k]})
  p99[$k]=$(median ${p99_l[$k]})
done

report_files compare
{
  echo "# sidecache compare ($stamp)"
  echo
  echo "$(versions_line); twemproxy ${nc_ver:-n/a};" \
    "redis-benchmark -r $KEYSPACE -d $DATASIZE, -n $N (P=1) / $N_PIPE (P>1)," \
    "median of $REPEAT run(s); ops/s"
  for m in "${missing_note[@]}"; do echo; echo "Note: $m."; done
  echo
  echo "| test | c | P | direct ops/s | sidecache ops/s | twemproxy ops/s | sidecache/direct | twemproxy/direct | sidecache/twemproxy |"
  echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|"
} >"$md"
echo "test,c,P,direct_rps,sidecache_rps,twemproxy_rps,sidecache_over_direct,twemproxy_over_direct,sidecache_over_twemproxy,direct_p50_ms,sidecache_p50_ms,twemproxy_p50_ms,direct_p99_ms,sidecache_p99_ms,twemproxy_p99_ms" >"$csv"
for test in GET SET; do
  for P in $PIPELINES; do
    for c in $CLIENTS; do
      d=${rps[direct,$test,$c,$P]:-}
      s=${rps[sidecache,$test,$c,$P]:-}
      w=${rps[twemproxy,$test,$c,$P]:-}
      sd=$(ratio "$s" "$d"); wd=$(ratio "$w" "$d"); sw=$(ratio "$s" "$w")
      echo "| $test | $c | $P | $(fmt0 "$d") | $(fmt0 "$s") | $(fmt0 "$w") | ${sd:-n/a} | ${wd:-n/a} | ${sw:-n/a} |" >>"$md"
      echo "$test,$c,$P,$d,$s,$w,$sd,$wd,$sw,${p50[direct,$test,$c,$P]:-},${p50[sidecache,$test,$c,$P]:-},${p50[twemproxy,$test,$c,$P]:-},${p99[direct,$test,$c,$P]:-},${p99[sidecache,$test,$c,$P]:-},${p99[twemproxy,$test,$c,$P]:-}" >>"$csv"
    done
  done
done
cat "$md"
echo
echo "written: $md $csv"
plot_csv "$csv"
[ "$failed" = 0 ] || die "some runs failed (see above)"
