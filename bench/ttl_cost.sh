#!/usr/bin/env bash
# bench/ttl_cost.sh — what asking for the TTL of every fill costs (cache-ask-ttl).
#
# A fill of a key matched by a user cache-rule sends PTTL key right behind
# the read, in the same write, so that the cached value ends when the key
# expires; --cache-ask-ttl no leaves it out (the juicefs profile's own rules
# never ask). Hits are unchanged, so this measures the miss path: every read
# a fill. Targets, on one redis-server:
#   direct  Redis itself (a reference: the reads alone)
#   nottl   sidecache --profile none --cache-rule GET 'i*' --cache-ask-ttl no
#   ttl     the same with --cache-ask-ttl yes (the default): GET + PTTL per key
# Workloads, on KEYS keys i<ino> of 72-byte values (loadgen --populate, as
# JuiceFS inode attributes), each key read once per pass (loadgen --dist seq):
#   get     KEYS GETs, CLIENTS connections with one GET in flight each
#   mget    KEYS/MGET_KEYS MGETs of MGET_KEYS keys none of which is cached
#           (a readdir's attributes: one PTTL per key behind each MGET)
# A measurement is ROUNDS passes over the keys (GET_ROUNDS 1; MGET_ROUNDS 5,
# as a pass of MGETs takes a few tenths of a second), the targets back to
# back in each pass, their order reversed every other pass. Every pass
# through the proxy is on a fresh sidecache (started, its upstream
# connection opened, stopped after the pass), so that every read is a miss
# that fills; the data is populated once (reads change nothing on Redis,
# and BCAST tracking keeps no per-key state there). Each pass is checked: on
# the proxy (INFO sidecache) cache_hits +0, cache_misses and cache_fills
# +keys, cache_fills_rejected and cache_bypassed_in_flight +0,
# cache_entries = keys, cache_ttl_asked +keys for ttl and +0 for nottl; on
# Redis, keyspace_misses +0 (every read found its key) and PTTL calls (INFO
# commandstats) equal to cache_ttl_asked.
#
# Per measurement: wall time (loadgen's), and per key read the CPU time of
# Redis and of the proxy (/proc/<pid>/task/*/schedstat, all threads) and
# the time Redis gives GET, MGET and PTTL in INFO commandstats (their
# execution only, not the reading, parsing and writing around it). Prints
# the medians over REPEAT repetitions per target and, for ttl/nottl (and
# Redis CPU over direct), the median of the ratios of each repetition's
# measurements with their quartiles (lib.sh paired: with fewer than 5
# repetitions, the smallest and largest), and writes them with a CSV to
# $RESULTS_DIR (ttl-cost-<time>.md/.csv). About 80 s with the defaults.
#
# Environment (all optional): KEYS (100000), REPEAT (5), CLIENTS (8),
# MGET_KEYS (100), MGET_CLIENTS (4), GET_ROUNDS (1), MGET_ROUNDS (5),
# WORKLOADS ("get mget"), TARGETS ("direct nottl ttl"), QUICK=1 (KEYS
# 20000, REPEAT 1: what run.sh runs), RESULTS_DIR, SIDECACHE_BIN,
# REDIS_SERVER, LOADGEN_BIN, BENCH_TIMEOUT.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_init ttl-cost

if [ "${QUICK:-0}" = 1 ]; then KEYS=${KEYS:-20000} REPEAT=${REPEAT:-1}; fi
KEYS=${KEYS:-100000}
REPEAT=${REPEAT:-5}
CLIENTS=${CLIENTS:-8}
MGET_KEYS=${MGET_KEYS:-100}
MGET_CLIENTS=${MGET_CLIENTS:-4}
GET_ROUNDS=${GET_ROUNDS:-1}
MGET_ROUNDS=${MGET_ROUNDS:-5}
WORKLOADS=${WORKLOADS:-"get mget"}
TARGETS=${TARGETS:-"direct nottl ttl"}
positive_ints KEYS REPEAT CLIENTS MGET_KEYS MGET_CLIENTS GET_ROUNDS MGET_ROUNDS
[ "$MGET_KEYS" -le 4096 ] || die "MGET_KEYS: at most 4096 (loadgen)"
[ $((KEYS % MGET_KEYS)) = 0 ] || die "KEYS ($KEYS) must be a multiple of MGET_KEYS ($MGET_KEYS): each key read once"
for w in $WORKLOADS; do case "$w" in get|mget) ;; *) die "WORKLOADS: get or mget, not '$w'" ;; esac; done
for t in $TARGETS; do case "$t" in direct|nottl|ttl) ;; *) die "TARGETS: direct, nottl or ttl, not '$t'" ;; esac; done

find_redis
find_sidecache
build_loadgen
start_redis redis
redis_pid=$(pid_of redis)
log "$(versions_line); redis :$rport; populating $KEYS keys"
fg "$LOADGEN_BIN" -p "$rport" --populate --keys "$KEYS" --quiet || die "populate failed"
# the files' i<ino> are the keys read; the directories' own i<ino> and d<ino> are not
dbsize=$(rcli "$rport" DBSIZE)
log "DBSIZE $dbsize"

# redis_snap: from one INFO of Redis, sets $km (keyspace_misses), $ptc (PTTL
# calls) and $cus (µs Redis spent running GET, MGET and PTTL: commandstats)
redis_snap() {
  read -r km ptc cus < <(rcli "$rport" INFO all | tr -d '\r' | awk -F'[:,=]' '
    $1 == "keyspace_misses" { km = $2 }
    $1 == "cmdstat_pttl" { pt = $3 }
    $1 == "cmdstat_get" || $1 == "cmdstat_mget" || $1 == "cmdstat_pttl" { us += $5 }
    END { printf "%d %d %d\n", km, pt, us }')
  [ -n "${cus:-}" ] || die "no INFO from Redis"
}

# the counters a run is checked by (proxy INFO sidecache)
counters="cache_hits cache_misses cache_fills cache_fills_rejected cache_ttl_asked cache_bypassed_in_flight"
declare -A before after
d() { echo $((after[$1] - before[$1])); } # COUNTER: its growth over the run

# pass W T: one pass of workload W through target T (a fresh sidecache for
# nottl and ttl), checked; adds its seconds, keys and CPU to acc_*[T] and its
# latencies to p50_l/p99_l
pass() {
  local w=$1 t=$2 name port=$rport ppid="" out cnt errs ops l50 l99 keys want_ttl entries k
  local km0 km1 pt0 pt1 cu0 cu1 r0 r1 p0=0 p1=0
  name="sc-$t-$w-$rep-$round"
  case $t in
    nottl) start_sidecache "$name" "$rport" --profile none --cache-rule GET 'i*' --cache-ask-ttl no ;;
    ttl) start_sidecache "$name" "$rport" --profile none --cache-rule GET 'i*' --cache-ask-ttl yes ;;
  esac
  if [ "$t" != direct ]; then
    port=$sport ppid=$(pid_of "$name")
    # the upstream connection opened (a key no rule matches), so the pass times reads only
    rcli "$port" GET nocache:warm >/dev/null || die "$name: GET through it failed"
    for k in $counters; do before[$k]=$(info_field "$port" "$k"); done
  fi
  redis_snap; km0=$km pt0=$ptc cu0=$cus
  out=$work/run-$t-$w-$rep-$round.csv
  r0=$(cpu_ns "$redis_pid")
  [ -z "$ppid" ] || p0=$(cpu_ns "$ppid")
  fg "$LOADGEN_BIN" -p "$port" -c "$c" -P 1 -n "$n" --dist seq --keys "$KEYS" "${lg[@]}" \
    --label "$t" --quiet --no-header >"$out" 2>"$out.err" || { cat "$out.err" >&2; die "loadgen ($w, $t) failed"; }
  r1=$(cpu_ns "$redis_pid")
  [ -z "$ppid" ] || p1=$(cpu_ns "$ppid")
  # label,op,count,errors,conflicts,ops_per_s,mean_us,p50_us,p99_us,p999_us,max_us
  IFS=, read -r _ _ cnt errs _ ops _ l50 l99 _ < <(awk -F, '$2 == "total"' "$out")
  [ "${cnt:-}" = "$n" ] && [ "$errs" = 0 ] || die "$w $t: loadgen ran ${cnt:-?} ops (${errs:-?} errors), not $n"
  keys=$((n * per))
  redis_snap; km1=$km pt1=$ptc cu1=$cus
  [ "$km1" = "$km0" ] || die "$w $t: $((km1 - km0)) reads found no key on Redis"
  if [ "$t" != direct ]; then
    # the last fills of ttl wait for their PTTL's reply
    for _ in $(seq 100); do
      [ "$(info_field "$port" cache_fills)" -ge $((before[cache_fills] + keys)) ] && break
      sleep 0.05
    done
    for k in $counters; do after[$k]=$(info_field "$port" "$k"); done
    want_ttl=0
    [ "$t" = ttl ] && want_ttl=$keys
    [ "$(d cache_hits)" = 0 ] && [ "$(d cache_misses)" = "$keys" ] && [ "$(d cache_fills)" = "$keys" ] &&
      [ "$(d cache_fills_rejected)" = 0 ] && [ "$(d cache_bypassed_in_flight)" = 0 ] &&
      [ "$(d cache_ttl_asked)" = "$want_ttl" ] && [ "$((pt1 - pt0))" = "$want_ttl" ] ||
      die "$w $t: not every read a fill: hits +$(d cache_hits) misses +$(d cache_misses) fills +$(d cache_fills) rejected +$(d cache_fills_rejected) bypassed +$(d cache_bypassed_in_flight) ttl_asked +$(d cache_ttl_asked), Redis PTTL calls +$((pt1 - pt0)), for $keys keys (ttl_asked wanted: $want_ttl)"
    entries=$(info_field "$port" cache_entries)
    [ "$entries" = "$keys" ] || die "$w $t: cache_entries $entries after $keys fills"
    stop "$name"
  fi
  acc_s[$t]=$(awk -v a="${acc_s[$t]}" -v n="$n" -v o="$ops" 'BEGIN { printf "%.6f", a + n / o }')
  acc_k[$t]=$((acc_k[$t] + keys))
  acc_r[$t]=$((acc_r[$t] + r1 - r0))
  acc_c[$t]=$((acc_c[$t] + cu1 - cu0))
  acc_p[$t]=$((acc_p[$t] + p1 - p0))
  p50_l[$w,$t]+=" $l50" p99_l[$w,$t]+=" $l99"
  check_alive
}

declare -A secs_l rcpu_l rcmd_l pcpu_l ops_l p50_l p99_l acc_s acc_k acc_r acc_c acc_p
flip=0
for rep in $(seq "$REPEAT"); do
  for w in $WORKLOADS; do
    if [ "$w" = get ]; then
      n=$KEYS per=1 c=$CLIENTS lg=(--mix get) rounds=$GET_ROUNDS
    else
      n=$((KEYS / MGET_KEYS)) per=$MGET_KEYS c=$MGET_CLIENTS lg=(--mix mget --mget-keys "$MGET_KEYS") rounds=$MGET_ROUNDS
    fi
    log "$w (repetition $rep/$REPEAT: $rounds pass(es) per target of $n ops of $per key(s), $c connections)"
    for t in $TARGETS; do acc_s[$t]=0 acc_k[$t]=0 acc_r[$t]=0 acc_c[$t]=0 acc_p[$t]=0; done
    for round in $(seq "$rounds"); do
      # the targets back to back, their order reversed every other pass
      order=$TARGETS
      [ "$flip" = 1 ] && order=$(echo "$TARGETS" | tr ' ' '\n' | tac | tr '\n' ' ')
      flip=$((1 - flip))
      for t in $order; do pass "$w" "$t"; done
    done
    for t in $TARGETS; do
      k="$w,$t"
      secs_l[$k]+=" ${acc_s[$t]}"
      ops_l[$k]+=" $(awk -v k="${acc_k[$t]}" -v s="${acc_s[$t]}" 'BEGIN { printf "%.0f", k / s }')"
      rcpu_l[$k]+=" $((acc_r[$t] / acc_k[$t]))"
      rcmd_l[$k]+=" $((acc_c[$t] * 1000 / acc_k[$t]))"
      pcpu_l[$k]+=" $((acc_p[$t] / acc_k[$t]))"
    done
  done
done

report_files ttl-cost
pr() { # A B: paired B/A, or n/a
  if [ -n "${1:-}" ] && [ -n "${2:-}" ]; then paired "$1" "$2"; else echo n/a; fi
}
prc() { if [ -n "${1:-}" ] && [ -n "${2:-}" ]; then paired "$1" "$2" csv; else echo ,,; fi; }
{
  echo "# What asking for the TTL of every fill costs ($stamp)"
  echo
  echo "$(versions_line); $KEYS keys of 72-byte values, each read once per pass (every read through the proxy a miss that fills a fresh cache); get: $CLIENTS connections, one GET in flight each; mget: $MGET_CLIENTS connections, one MGET of $MGET_KEYS keys in flight each; rules --profile none --cache-rule GET 'i*'; a measurement: $GET_ROUNDS pass(es) of get, $MGET_ROUNDS of mget over the keys, each through a fresh proxy; median of $REPEAT repetition(s). Per key read: CPU from schedstat (all threads); Redis in commands: the µs Redis's INFO commandstats gives GET, MGET and PTTL (their execution, not the reading and writing around it)."
  echo
  echo "| workload | target | keys/s | op p50 µs | op p99 µs | Redis CPU ns/key | Redis in commands ns/key | proxy CPU ns/key | Redis CPU / direct |"
  echo "|---|---|--:|--:|--:|--:|--:|--:|--:|"
} >"$md"
echo "workload,target,keys_per_s,seconds,op_p50_us,op_p99_us,redis_ns_per_key,redis_cmd_ns_per_key,proxy_ns_per_key,redis_vs_direct_median,redis_vs_direct_p25,redis_vs_direct_p75,runs_seconds,runs_redis_ns,runs_redis_cmd_ns,runs_proxy_ns" >"$csv"
for w in $WORKLOADS; do
  for t in $TARGETS; do
    k="$w,$t"
    # shellcheck disable=SC2086 # word lists on purpose
    o=$(median ${ops_l[$k]}) s=$(median ${secs_l[$k]}) l50=$(median ${p50_l[$k]}) l99=$(median ${p99_l[$k]})
    # shellcheck disable=SC2086
    rc=$(median ${rcpu_l[$k]}) rm=$(median ${rcmd_l[$k]}) pc=$(median ${pcpu_l[$k]})
    vd=n/a vdc=,,
    if [ "$t" != direct ] && [ -n "${rcpu_l[$w,direct]:-}" ]; then
      vd=$(pr "${rcpu_l[$w,direct]}" "${rcpu_l[$k]}") vdc=$(prc "${rcpu_l[$w,direct]}" "${rcpu_l[$k]}")
    fi
    pcs=$(fmt0 "$pc")
    [ "$t" = direct ] && pcs=—
    echo "| $w | $t | $(fmt0 "$o") | $(fmt0 "$l50") | $(fmt0 "$l99") | $(fmt0 "$rc") | $(fmt0 "$rm") | $pcs | $vd |" >>"$md"
    echo "$w,$t,$o,$s,$l50,$l99,$rc,$rm,$pc,$vdc,$(runs "${secs_l[$k]}"),$(runs "${rcpu_l[$k]}"),$(runs "${rcmd_l[$k]}"),$(runs "${pcpu_l[$k]}")" >>"$csv"
  done
done
if [[ " $TARGETS " == *" nottl "* && " $TARGETS " == *" ttl "* ]]; then
  {
    echo
    echo "ttl / nottl, per repetition: the median of the ratios of each repetition (its passes back to back) and their quartiles"
    echo
    echo "| workload | wall time | Redis CPU | Redis in commands | proxy CPU | Redis + proxy CPU |"
    echo "|---|--:|--:|--:|--:|--:|"
  } >>"$md"
  echo >>"$csv"
  echo "workload,ratio,wall_median,wall_p25,wall_p75,redis_median,redis_p25,redis_p75,redis_cmd_median,redis_cmd_p25,redis_cmd_p75,proxy_median,proxy_p25,proxy_p75,both_median,both_p25,both_p75" >>"$csv"
  both() { # KEY: Redis + proxy CPU of each repetition
    local -a r p
    local i
    read -ra r <<<"${rcpu_l[$1]}"; read -ra p <<<"${pcpu_l[$1]}"
    for i in "${!r[@]}"; do printf '%s ' $((r[i] + p[i])); done
  }
  for w in $WORKLOADS; do
    a="$w,nottl" b="$w,ttl"
    ba=$(both "$a") bb=$(both "$b")
    echo "| $w | $(pr "${secs_l[$a]}" "${secs_l[$b]}") | $(pr "${rcpu_l[$a]}" "${rcpu_l[$b]}") | $(pr "${rcmd_l[$a]}" "${rcmd_l[$b]}") | $(pr "${pcpu_l[$a]}" "${pcpu_l[$b]}") | $(pr "$ba" "$bb") |" >>"$md"
    echo "$w,ttl/nottl,$(prc "${secs_l[$a]}" "${secs_l[$b]}"),$(prc "${rcpu_l[$a]}" "${rcpu_l[$b]}"),$(prc "${rcmd_l[$a]}" "${rcmd_l[$b]}"),$(prc "${pcpu_l[$a]}" "${pcpu_l[$b]}"),$(prc "$ba" "$bb")" >>"$csv"
  done
fi
cat "$md"
echo
echo "written: $md $csv"
