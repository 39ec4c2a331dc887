#!/usr/bin/env bash
# bench/juicefs_engine.sh — JuiceFS's own metadata engine, direct and through
# sidecache: what a mount gains.
#
# The driver is tests/juicefs/jfsbench (built with Go from the module that
# pins JuiceFS 1.2.0): real JuiceFS code, as a mount holds it, does the work
# of a checkout (create: mkdir, create, write, close), of a build or `git
# status` once the kernel's 1 s entry cache has expired (stat: the lookups
# of a stat() of dir/file, with the permission checks a mount makes for a
# user), of fstat()s once its attribute cache has (getattr), of `ls -l`
# (readdir with attributes) and of `rm -r`, each phase on one target and then
# on the other (which one first alternating, from phase to phase and from
# run to run), THREADS directories at a time.
#
# Two redis-servers, one per target, both behind one toxiproxy with the same
# latency_us toxic (calibrated as in latency.sh); sidecache's upstream is its
# toxiproxy port, direct is the other toxiproxy port. A fresh volume is
# formatted on both for each run.
#
# JuiceFS 1.2 reads getattr under WATCH (README: "Pointing JuiceFS at it"),
# a lookup's permission check too (the parent's attributes): no cache
# answers those; sidecache answers the WATCH and the UNWATCH ahead.
# The lookup script and readdir's MGET are answered from the cache.
#
# Prints a markdown table per latency (median seconds of REPEAT runs per
# phase, sidecache/direct, speedup direct/sidecache, ops/s) and writes it
# with a CSV to $RESULTS_DIR (juicefs-engine-<time>.md/.csv).
#
# Environment (all optional): LATENCIES (µs, "500"), REPEAT (3), DIRS (8),
# FILES (200 per directory), THREADS (4), ROUNDS (3: times stat and ls go over
# the tree), TOXIC_STREAM, CALIBRATE, RTT_SAMPLES (see latency.sh),
# RESULTS_DIR, SIDECACHE_BIN, SIDECACHE_ARGS, REDIS_SERVER, TOXIPROXY_BIN,
# JFSBENCH_BIN.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_init juicefs-engine

LATENCIES=${LATENCIES:-500}
REPEAT=${REPEAT:-3}
DIRS=${DIRS:-8}
FILES=${FILES:-200}
THREADS=${THREADS:-4}
ROUNDS=${ROUNDS:-3}
positive_ints REPEAT DIRS FILES THREADS ROUNDS
for L in $LATENCIES; do [[ "$L" =~ ^[0-9]+$ ]] || die "LATENCIES: µs, not '$L'"; done

find_redis
find_sidecache
build_loadgen
if [ -z "${JFSBENCH_BIN:-}" ]; then
  command -v go >/dev/null || die "Go is needed to build tests/juicefs/jfsbench (scripts/install-deps.sh test)"
  JFSBENCH_BIN=$here/build/jfsbench
  mkdir -p "$here/build"
  log "building $JFSBENCH_BIN (tests/juicefs/jfsbench)"
  (cd "$root/tests/juicefs" && go build -o "$JFSBENCH_BIN" ./jfsbench) || die "building jfsbench failed"
fi

start_paired_redis
start_sidecache sidecache "$toxside"
log "$(versions_line); direct: toxiproxy :$toxdirect → redis :$rdirect; sidecache :$sport → toxiproxy :$toxside → redis :$rside"

phases="create stat getattr ls rm"
report_files juicefs-engine
declare -A secs ops toxic_of rtt_of hits_of
for L in $LATENCIES; do
  toxi_calibrate "$L"
  toxic_of[$L]=$toxic_us; rtt_of[$L]=$rtt_us
  for rep in $(seq "$REPEAT"); do
    out=$work/run-$L-$rep.csv
    h0=$(info_field "$sport" cache_hits)
    log "L=$L run $rep/$REPEAT: $DIRS dirs × $FILES files, $THREADS at a time"
    rc=0
    fg "$JFSBENCH_BIN" -dirs "$DIRS" -files "$FILES" -threads "$THREADS" -rounds "$ROUNDS" -first $((rep % 2)) \
      "redis://127.0.0.1:$toxdirect/1" "redis://127.0.0.1:$sport/1" >"$out" 2>"$out.err" || rc=$?
    [ "$rc" = 0 ] || { cat "$out.err" >&2; die "jfsbench failed (exit $rc)"; }
    hits_of[$L]+=" $(($(info_field "$sport" cache_hits) - h0))"
    # label,phase,ops,seconds
    while IFS=, read -r t p n s; do
      [ "$t" = label ] && continue
      secs[$L,$t,$p]+=" $s"; ops[$p]=$n
    done <"$out"
    check_alive
  done
done
toxi_set_latency 0

{
  echo "# JuiceFS 1.2.0's metadata engine, direct and through sidecache ($stamp)"
  echo
  echo "$(versions_line); jfsbench: $DIRS directories × $FILES files, $THREADS threads (a directory each), stat and ls $ROUNDS rounds; each phase on one target, then on the other (which first alternating); a redis-server per target, both behind toxiproxy (latency_us toxic on $TOXIC_STREAM; GET round trip with no toxic: p50 ${toxi_base_rtt:-n/a} µs); median of $REPEAT run(s)."
  echo
  echo "| latency µs | GET RTT p50 µs | phase | ops | direct s | sidecache s | sidecache/direct | speedup | direct ops/s | sidecache ops/s |"
  echo "|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|"
} >"$md"
echo "latency_us,toxic_us,rtt_p50_us,phase,ops,direct_s,sidecache_s,ratio,speedup,direct_runs_s,sidecache_runs_s" >"$csv"
for L in $LATENCIES; do
  for p in $phases; do
    # shellcheck disable=SC2086 # word lists on purpose
    md_=$(median ${secs[$L,direct,$p]}); ms_=$(median ${secs[$L,sidecache,$p]})
    r=$(ratio "$ms_" "$md_" 3); sp=$(ratio "$md_" "$ms_" 2)
    od=$(awk -v n="${ops[$p]}" -v s="$md_" 'BEGIN { printf "%.0f", n / s }')
    os=$(awk -v n="${ops[$p]}" -v s="$ms_" 'BEGIN { printf "%.0f", n / s }')
    echo "| $L | ${rtt_of[$L]} | $p | ${ops[$p]} | $(printf '%.3f' "$md_") | $(printf '%.3f' "$ms_") | $r | $sp | $od | $os |" >>"$md"
    echo "$L,${toxic_of[$L]},${rtt_of[$L]},$p,${ops[$p]},$md_,$ms_,$r,$sp,$(runs "${secs[$L,direct,$p]}"),$(runs "${secs[$L,sidecache,$p]}")" >>"$csv"
  done
done
{
  echo
  echo "Per-run paired ratios (sidecache/direct, median and range) and cache hits per run:"
  for L in $LATENCIES; do
    for p in $phases; do
      echo "- $L µs, $p: $(paired "${secs[$L,direct,$p]}" "${secs[$L,sidecache,$p]}")"
    done
    echo "- $L µs: cache hits per run:${hits_of[$L]}"
  done
  echo
  echo "Every result checked by jfsbench (each lookup's inode, each getattr's length, each listing's size, each rm -r's count)."
} >>"$md"
cat "$md"
echo
echo "written: $md $csv"
