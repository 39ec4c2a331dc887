#!/usr/bin/env bash
# bench/uniform.sh — scenario B: uniform reads over a working set that fits
# the cache, and one that does not.
#
# For each key count K (KEYSETS: 10,000 and 1,000,000 files), the JuiceFS data
# set is created on Redis (loadgen --populate: pipelined, 2,000 commands per
# round trip), and loadgen runs GET i<ino> of uniformly random files
# (--mix get --dist uniform) at each client count against, back to back:
#   direct           redis-server itself
#   sidecache-large  the proxy with cache-max-memory above the working set
#                    (LARGE_FACTOR × the bytes the whole set takes in its cache)
#   sidecache-small  the proxy with cache-max-memory = SMALL_FRACTION of them:
#                    most reads miss, fill and evict (LRU)
#   twemproxy        nutcracker, a pass-through proxy, for reference
# Both proxies are warmed first (every file read once); the working set's
# size is taken from the large proxy's cache_used_bytes once every key is in.
# Each row shows ops/s, p50/p99 µs, ratios to direct and each proxy's hit
# ratio during the run (from INFO). There is no added latency: this measures
# the CPU cost of hits, and of misses with fills and evictions, on loopback.
#
# Prints a markdown table; writes it and a CSV to $RESULTS_DIR
# (uniform-<time>.md/.csv), and PNGs of ops/s and p99 against clients when
# gnuplot is installed.
#
# Environment (all optional):
#   KEYSETS         key counts                                   ("10000 1000000")
#   CLIENTS         loadgen connections                          ("1 4 8 16 32")
#   PIPELINE        ops in flight per connection                 (1)
#   DURATION        measured seconds per run                     (3)
#   WARMUP          unmeasured seconds before each run           (1)
#   SMALL_FRACTION  small cache / working set                    (0.25)
#   LARGE_FACTOR    large cache / working set                    (2)
#   TWEMPROXY       0 leaves twemproxy out                       (1 when nutcracker exists)
#   RESULTS_DIR, SIDECACHE_BIN, SIDECACHE_ARGS, REDIS_SERVER, NUTCRACKER_BIN, LOADGEN_BIN
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_init uniform

KEYSETS=${KEYSETS:-"10000 1000000"}
CLIENTS=${CLIENTS:-"1 4 8 16 32"}
PIPELINE=${PIPELINE:-1}
DURATION=${DURATION:-3}
WARMUP=${WARMUP:-1}
SMALL_FRACTION=${SMALL_FRACTION:-0.25}
LARGE_FACTOR=${LARGE_FACTOR:-2}
for k in $KEYSETS; do [[ "$k" =~ ^[1-9][0-9]*$ ]] || die "KEYSETS: '$k' is not a positive integer"; done

find_redis
find_sidecache
find_nutcracker
build_loadgen
targets=(direct sidecache-large sidecache-small)
if [ "${TWEMPROXY:-1}" = 1 ]; then
  if [ -n "$NUTCRACKER_BIN" ]; then targets+=(twemproxy); else log "notice: nutcracker not found: no twemproxy column"; fi
fi

start_redis redis
declare -A port
port[direct]=$rport
if [[ " ${targets[*]} " == *" twemproxy "* ]]; then
  start_twemproxy twemproxy "$rport"
  port[twemproxy]=$tport
fi
log "$(versions_line)"

# warm PORT: GET of every file once (K of them), 4 connections × 64 in flight
# (loadgen --dist seq; not --prewarm, whose 2,000-command pipelined writes
# stalled the proxy after a few 100,000 GETs in November 2026)
warm() {
  fg "$LOADGEN_BIN" -p "$1" -c 4 -P 64 -n "$K" --dist seq --mix get --keys "$K" --quiet --no-header >/dev/null
}

report_files uniform
echo "keys,clients,target,cache_max_memory,ops_per_s,p50_us,p99_us,hit_ratio,errors" >"$csv"
declare -A ops p99 hitr cachemem wsbytes
failed=0
seed=0
for K in $KEYSETS; do
  log "K=$K: populating Redis"
  rcli "$rport" FLUSHALL >/dev/null
  fg "$LOADGEN_BIN" -p "$rport" --populate --keys "$K" --quiet || die "populate of $K files failed"
  # the working set's size in the cache: a proxy with room for everything, warmed
  start_sidecache sidecache-large "$rport" --cache-max-memory 64gb
  port[sidecache-large]=$sport
  warm "$sport" || die "prewarm of the large cache failed"
  entries=$(info_field "$sport" cache_entries); ws=$(info_field "$sport" cache_used_bytes)
  [ "${entries:-0}" -ge "$K" ] || die "only ${entries:-?} of $K entries cached in the large cache"
  wsbytes[$K]=$ws
  stop sidecache-large
  large=$(awk -v w="$ws" -v f="$LARGE_FACTOR" 'BEGIN { printf "%.0f", w * f }')
  small=$(awk -v w="$ws" -v f="$SMALL_FRACTION" 'BEGIN { printf "%.0f", w * f }')
  cachemem[$K,sidecache-large]=$large; cachemem[$K,sidecache-small]=$small
  for t in sidecache-large sidecache-small; do
    start_sidecache "$t" "$rport" --cache-max-memory "${cachemem[$K,$t]}"
    port[$t]=$sport
    warm "$sport" || die "prewarm of $t failed"
  done
  log "K=$K: working set $ws bytes in the cache ($entries entries); large cache $large, small $small;" \
    "small holds $(info_field "${port[sidecache-small]}" cache_entries) entries"
  for c in $CLIENTS; do
    # one seed per row, the same for every target: each row reads another
    # sequence of files (a proxy's cache outlives the rows; with one seed,
    # every run would start with the files the previous runs read first)
    seed=$((seed + 1))
    for t in "${targets[@]}"; do
      p=${port[$t]}
      if [[ $t == sidecache-* ]]; then hb=$(info_field "$p" cache_hits); mb=$(info_field "$p" cache_misses); fi
      out=$work/run-$K-$c-$t.csv
      log "K=$K c=$c $t"
      rc=0
      fg "$LOADGEN_BIN" -p "$p" -c "$c" -P "$PIPELINE" -d "$DURATION" --warmup "$WARMUP" --mix get --dist uniform \
        --seed "$seed" --keys "$K" --label "$t/K$K/c$c" --no-header --quiet >"$out" 2>"$out.err" || rc=$?
      if [ "$rc" != 0 ]; then
        log "loadgen against $t failed (exit $rc):"; tail -n 5 "$out.err" >&2; failed=1; continue
      fi
      k="$K,$c,$t"
      IFS=, read -r _ _ _ e _ o _ l50 l99 _ _ < <(awk -F, '$2 == "total"' "$out")
      ops[$k]=$o; p99[$k]=$l99
      if [[ $t == sidecache-* ]]; then
        ha=$(info_field "$p" cache_hits); ma=$(info_field "$p" cache_misses)
        hitr[$k]=$(awk -v h=$((ha - hb)) -v m=$((ma - mb)) 'BEGIN { if (h + m > 0) printf "%.3f", h / (h + m) }')
      fi
      echo "$K,$c,$t,${cachemem[$K,$t]:-},$o,$l50,$l99,${hitr[$k]:-},$e" >>"$csv"
      check_alive
    done
  done
  stop sidecache-large
  stop sidecache-small
done

{
  echo "# Scenario B: uniform reads, cache larger and smaller than the working set ($stamp)"
  echo
  echo "$(versions_line); loadgen --mix get --dist uniform (GET i<ino> of random files), -P $PIPELINE," \
    "$DURATION s (+${WARMUP} s warm-up) per run; no added latency. large = cache-max-memory $LARGE_FACTOR ×" \
    "the working set's bytes in the cache, small = $SMALL_FRACTION ×; both warmed."
  for K in $KEYSETS; do
    echo
    echo "## $K keys (working set in the cache: $(awk -v b="${wsbytes[$K]:-0}" 'BEGIN { printf "%.1f MiB", b / 1048576 }'); large $(awk -v b="${cachemem[$K,sidecache-large]:-0}" 'BEGIN { printf "%.1f MiB", b / 1048576 }'), small $(awk -v b="${cachemem[$K,sidecache-small]:-0}" 'BEGIN { printf "%.1f MiB", b / 1048576 }'))"
    echo
    echo "| clients | direct ops/s | large ops/s | small ops/s | twemproxy ops/s | large/direct | small/direct | twemproxy/direct | p99 µs direct | p99 µs large | p99 µs small | p99 µs twemproxy | hit ratio large | hit ratio small |"
    echo "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
    for c in $CLIENTS; do
      d=${ops[$K,$c,direct]:-}; l=${ops[$K,$c,sidecache-large]:-}; s=${ops[$K,$c,sidecache-small]:-}; w=${ops[$K,$c,twemproxy]:-}
      lr=$(ratio "$l" "$d"); sr=$(ratio "$s" "$d"); wr=$(ratio "$w" "$d")
      echo "| $c | $(fmt0 "$d") | $(fmt0 "$l") | $(fmt0 "$s") | $(fmt0 "$w") | ${lr:-n/a} | ${sr:-n/a} | ${wr:-n/a} | $(fmt0 "${p99[$K,$c,direct]:-}") | $(fmt0 "${p99[$K,$c,sidecache-large]:-}") | $(fmt0 "${p99[$K,$c,sidecache-small]:-}") | $(fmt0 "${p99[$K,$c,twemproxy]:-}") | ${hitr[$K,$c,sidecache-large]:-n/a} | ${hitr[$K,$c,sidecache-small]:-n/a} |"
    done
  done
} >"$md"
cat "$md"
echo
echo "written: $md $csv"
plot_csv "$csv"
[ "$failed" = 0 ] || die "some runs failed (see above)"
