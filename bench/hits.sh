#!/usr/bin/env bash
# bench/hits.sh — the cache hit path, side by side in one run.
#
# redis-benchmark `GET i1__rand_int__ -r KEYSPACE` (keys i1000000000000 ...,
# 14 bytes, 72-byte values, all present) at every clients × pipeline pair,
# against
#   direct     redis-server itself
#   sidecache  the proxy, every key already in its cache (warmed through it and
#              checked with INFO: cache_entries >= KEYSPACE; each timed run
#              must raise cache_hits by about its request count)
#   twemproxy  nutcracker, a pass-through proxy, for reference
# back to back for each pair. Then memory: bytes per cached entry above the
# key and value sizes, from cache_used_bytes / cache_entries, and the growth
# of the proxy's VmRSS while MEM_ENTRIES entries are cached.
#
# Prints a markdown table; writes it and a CSV to $RESULTS_DIR (hits-<time>.md/.csv).
#
# Environment (all optional):
#   N            requests per run at -P 1                    (100000)
#   N_PIPE       requests per run at -P > 1                  (5 × N)
#   CLIENTS      -c values                                   ("1 8 32")
#   PIPELINES    -P values                                   ("1 16")
#   KEYSPACE     -r, keys cached                             (10000)
#   DATASIZE     value bytes                                 (72)
#   REPEAT       runs per measurement, the median is shown   (1)
#   MEM_ENTRIES  entries cached for the memory measurement   (100000; 0 skips it)
#   TWEMPROXY    0 leaves the twemproxy column out           (1 when nutcracker exists)
#   RESULTS_DIR, SIDECACHE_BIN, SIDECACHE_ARGS, REDIS_SERVER, NUTCRACKER_BIN, BENCH_TIMEOUT
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_init hits

N=${N:-100000}
N_PIPE=${N_PIPE:-$((N * 5))}
CLIENTS=${CLIENTS:-"1 8 32"}
PIPELINES=${PIPELINES:-"1 16"}
KEYSPACE=${KEYSPACE:-10000}
DATASIZE=${DATASIZE:-72}
REPEAT=${REPEAT:-1}
MEM_ENTRIES=${MEM_ENTRIES:-100000}
positive_ints N N_PIPE KEYSPACE DATASIZE REPEAT
[[ "$MEM_ENTRIES" =~ ^[0-9]+$ ]] || die "MEM_ENTRIES must be a number"
[ "$KEYSPACE" -le 1000000000000 ] || die "KEYSPACE too large"

find_redis
find_redis_benchmark
find_sidecache
find_nutcracker
targets=(direct sidecache)
if [ "${TWEMPROXY:-1}" = 1 ]; then
  if [ -n "$NUTCRACKER_BIN" ]; then targets+=(twemproxy); else log "notice: nutcracker not found: no twemproxy column"; fi
fi

KEYLEN=14 # "i1" + 12 digits, as redis-benchmark expands __rand_int__
value=$(head -c "$DATASIZE" /dev/zero | tr '\0' v)

# populate PORT PREFIX COUNT: SET PREFIX<12 digits> <value> for 0 .. COUNT-1, pipelined
populate() {
  local port=$1 prefix=$2 count=$3 out
  awk -v n="$count" -v p="$prefix" -v v="$value" 'BEGIN {
      for (i = 0; i < n; i++) { k = sprintf("%s%012d", p, i)
        printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length(k), k, length(v), v } }' >"$work/populate.resp"
  out=$(timeout 120 "$REDIS_CLI" -h 127.0.0.1 -p "$port" --pipe <"$work/populate.resp" 2>&1) || die "populate failed: $out"
  grep -q 'errors: 0' <<<"$out" || die "populate had errors: $out"
}

# read_all PORT PREFIX COUNT: GET of every key, pipelined (through the proxy: fills its cache)
read_all() {
  local port=$1 prefix=$2 count=$3 out
  awk -v n="$count" -v p="$prefix" 'BEGIN {
      for (i = 0; i < n; i++) { k = sprintf("%s%012d", p, i)
        printf "*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", length(k), k } }' >"$work/read.resp"
  out=$(timeout 120 "$REDIS_CLI" -h 127.0.0.1 -p "$port" --pipe <"$work/read.resp" 2>&1) || die "reading through :$port failed: $out"
  grep -q 'errors: 0' <<<"$out" || die "reading through :$port had errors: $out"
}

declare -A port
start_redis redis
port[direct]=$rport
start_sidecache sidecache "$rport"
port[sidecache]=$sport
if [[ " ${targets[*]} " == *" twemproxy "* ]]; then
  start_twemproxy twemproxy "$rport"
  port[twemproxy]=$tport
fi
log "$(versions_line)"

# Data, then the cache: two passes through the proxy (the second must be all hits).
populate "$rport" i1 "$KEYSPACE"
read_all "${port[sidecache]}" i1 "$KEYSPACE"
h0=$(info_field "${port[sidecache]}" cache_hits)
read_all "${port[sidecache]}" i1 "$KEYSPACE"
h1=$(info_field "${port[sidecache]}" cache_hits)
entries=$(info_field "${port[sidecache]}" cache_entries)
used=$(info_field "${port[sidecache]}" cache_used_bytes)
[ "${entries:-0}" -ge "$KEYSPACE" ] || die "only ${entries:-?} entries cached after warming $KEYSPACE keys"
log "warmed: cache_entries=$entries cache_used_bytes=$used; second pass: $((h1 - h0)) hits of $KEYSPACE"
for t in "${targets[@]}"; do
  [ "$(rcli "${port[$t]}" GET i1000000000000)" = "$value" ] || die "$t: GET i1000000000000 returned a wrong value"
done

declare -A rps_l p50_l p99_l hitd_l
failed=0
for P in $PIPELINES; do
  n=$N
  [ "$P" -gt 1 ] && n=$N_PIPE
  for c in $CLIENTS; do
    for rep in $(seq "$REPEAT"); do
      for t in "${targets[@]}"; do
        out="$work/bench-$t-c$c-P$P-$rep.csv"
        if [ "$t" = sidecache ]; then
          hb=$(info_field "${port[sidecache]}" cache_hits); mb=$(info_field "${port[sidecache]}" cache_misses)
        fi
        log "$t: -c $c -P $P -n $n (run $rep/$REPEAT)"
        if ! fg "$REDIS_BENCHMARK" -h 127.0.0.1 -p "${port[$t]}" -n "$n" -c "$c" -P "$P" -r "$KEYSPACE" \
          --csv GET i1__rand_int__ >"$out" 2>"$out.err"; then
          log "$t -c $c -P $P: redis-benchmark failed:"; tail -n 5 "$out.err" >&2 || true
          failed=1
          continue
        fi
        if grep -qi error "$out.err"; then
          log "$t -c $c -P $P: redis-benchmark reported errors:"; grep -i error "$out.err" | head -n 3 >&2
          failed=1
        fi
        # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
        line=$(grep -v '^"test"' "$out" | tail -n1 | tr -d '"')
        IFS=, read -r _ r _ _ l50 _ l99 _ <<<"$line"
        [ -n "${r:-}" ] || { log "$t -c $c -P $P: no result"; failed=1; continue; }
        k="$t,$c,$P"
        rps_l[$k]+=" $r"; p50_l[$k]+=" $l50"; p99_l[$k]+=" $l99"
        if [ "$t" = sidecache ]; then
          ha=$(info_field "${port[sidecache]}" cache_hits); ma=$(info_field "${port[sidecache]}" cache_misses)
          dh=$((ha - hb)); dm=$((ma - mb))
          hitd_l[$k]+=" $dh"
          # redis-benchmark may send up to c × P requests more than -n
          if [ "$dh" -lt $((n * 99 / 100)) ] || [ "$dh" -gt $((n + c * P)) ]; then
            log "sidecache -c $c -P $P: cache_hits rose by $dh (misses by $dm) for $n requests: not the hit path"
            failed=1
          fi
        fi
      done
      check_alive
    done
  done
done

# Memory: bytes per entry from the proxy's own accounting, and the RSS growth
# of a fresh proxy while MEM_ENTRIES entries are cached. The fresh proxy first
# passes MEM_ENTRIES GETs of keys that match no cache rule (x…), so that its
# buffers have grown to what such a pass needs before the first RSS sample.
kv=$((KEYLEN + DATASIZE))
per_entry=$(awk -v u="$used" -v e="$entries" 'BEGIN { printf "%.1f", u / e }')
mem_rows=()
mem_rows+=("| sidecache accounting, $entries entries | cache_used_bytes / cache_entries | $per_entry | $(awk -v a="$per_entry" -v b="$kv" 'BEGIN { printf "%.1f", a - b }') |")
mem_csv=("accounting,$entries,$used,$per_entry,$kv")
if [ "$MEM_ENTRIES" -gt 0 ]; then
  log "memory: caching $MEM_ENTRIES entries in a fresh proxy"
  rum0=$(rcli "$rport" INFO memory | tr -d '\r' | sed -n 's/^used_memory://p')
  populate "$rport" i2 "$MEM_ENTRIES"
  rum1=$(rcli "$rport" INFO memory | tr -d '\r' | sed -n 's/^used_memory://p')
  populate "$rport" x1 "$MEM_ENTRIES"
  start_sidecache sidecache-mem "$rport"
  mport=$sport
  mpid=$(pid_of sidecache-mem)
  read_all "$mport" x1 "$MEM_ENTRIES"
  read_all "$mport" x1 "$MEM_ENTRIES"
  [ "$(info_field "$mport" cache_entries)" = 0 ] || die "keys x1… were cached: the memory baseline is off"
  rss0=$(vmrss_kb "$mpid")
  read_all "$mport" i2 "$MEM_ENTRIES"
  rss1=$(vmrss_kb "$mpid")
  me=$(info_field "$mport" cache_entries)
  mu=$(info_field "$mport" cache_used_bytes)
  [ "${me:-0}" -ge "$MEM_ENTRIES" ] || log "warning: only $me of $MEM_ENTRIES entries cached (evictions: $(info_field "$mport" cache_evictions))"
  mper=$(awk -v u="$mu" -v e="$me" 'BEGIN { printf "%.1f", u / e }')
  rper=$(awk -v a="$rss0" -v b="$rss1" -v e="$me" 'BEGIN { printf "%.1f", (b - a) * 1024 / e }')
  rdper=$(awk -v a="$rum0" -v b="$rum1" -v e="$MEM_ENTRIES" 'BEGIN { printf "%.1f", (b - a) / e }')
  ex() { awk -v a="$1" -v b="$kv" 'BEGIN { printf "%.1f", a - b }'; }
  mem_rows+=("| sidecache accounting, $me entries | cache_used_bytes / cache_entries | $mper | $(ex "$mper") |")
  mem_rows+=("| sidecache process, $me entries | VmRSS growth $((rss0 / 1024)) → $((rss1 / 1024)) MiB, / entries | $rper | $(ex "$rper") |")
  mem_rows+=("| redis-server (reference), $MEM_ENTRIES keys | used_memory growth / keys | $rdper | $(ex "$rdper") |")
  mem_csv+=("accounting,$me,$mu,$mper,$kv" "rss_kb:$rss0:$rss1,$me,$(( (rss1 - rss0) * 1024 )),$rper,$kv"
            "redis_used_memory,$MEM_ENTRIES,$((rum1 - rum0)),$rdper,$kv")
  stop sidecache-mem
fi

report_files hits
{
  echo "# sidecache cache hits ($stamp)"
  echo
  echo "$(versions_line); redis-benchmark GET i1__rand_int__ -r $KEYSPACE, $DATASIZE-byte values, every key cached;" \
    "-n $N (P=1) / $N_PIPE (P>1); median of $REPEAT run(s). Goal: sidecache/direct >= 1.00 on every row."
  echo
  echo "| c | P | direct ops/s | sidecache ops/s | twemproxy ops/s | sidecache/direct | twemproxy/direct | p50 ms direct | p50 ms sidecache | p50 ms twemproxy | hits / requests |"
  echo "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
} >"$md"
echo "c,P,requests,direct_rps,sidecache_rps,twemproxy_rps,sidecache_over_direct,twemproxy_over_direct,direct_p50_ms,sidecache_p50_ms,twemproxy_p50_ms,direct_p99_ms,sidecache_p99_ms,twemproxy_p99_ms,sidecache_hits_delta" >"$csv"
below=0
for P in $PIPELINES; do
  n=$N
  [ "$P" -gt 1 ] && n=$N_PIPE
  for c in $CLIENTS; do
    declare -A m50=() m99=() mr=()
    for t in direct sidecache twemproxy; do
      k="$t,$c,$P"
      # shellcheck disable=SC2086 # word lists on purpose
      mr[$t]=$(median ${rps_l[$k]:-})
      # shellcheck disable=SC2086
      m50[$t]=$(median ${p50_l[$k]:-})
      # shellcheck disable=SC2086
      m99[$t]=$(median ${p99_l[$k]:-})
    done
    # shellcheck disable=SC2086
    hd=$(median ${hitd_l[sidecache,$c,$P]:-})
    sd=$(ratio "${mr[sidecache]}" "${mr[direct]}"); wd=$(ratio "${mr[twemproxy]}" "${mr[direct]}")
    [ -n "$sd" ] && awk -v r="$sd" 'BEGIN { exit !(r < 1.0) }' && below=$((below + 1))
    hr=$(awk -v h="$hd" -v n="$n" 'BEGIN { if (h != "") printf "%.3f", h / n }')
    echo "| $c | $P | $(fmt0 "${mr[direct]}") | $(fmt0 "${mr[sidecache]}") | $(fmt0 "${mr[twemproxy]}") | ${sd:-n/a} | ${wd:-n/a} | ${m50[direct]:-n/a} | ${m50[sidecache]:-n/a} | ${m50[twemproxy]:-n/a} | ${hr:-n/a} |" >>"$md"
    echo "$c,$P,$n,${mr[direct]},${mr[sidecache]},${mr[twemproxy]},$sd,$wd,${m50[direct]},${m50[sidecache]},${m50[twemproxy]},${m99[direct]},${m99[sidecache]},${m99[twemproxy]},$hd" >>"$csv"
  done
done
{
  echo
  echo "Rows with sidecache/direct below 1.00: $below."
  echo
  echo "Memory per cached entry (key $KEYLEN bytes + value $DATASIZE bytes = $kv bytes of payload):"
  echo
  echo "| what | how | bytes per entry | above key+value |"
  echo "|---|---|--:|--:|"
  printf '%s\n' "${mem_rows[@]}"
} >>"$md"
{
  echo
  echo "what,entries,bytes,bytes_per_entry,key_plus_value"
  printf '%s\n' "${mem_csv[@]}"
} >>"$csv"
cat "$md"
echo
echo "written: $md $csv"
plot_csv "$csv"
[ "$failed" = 0 ] || die "some runs failed or did not hit the cache (see above)"
