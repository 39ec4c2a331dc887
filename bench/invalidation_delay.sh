#!/usr/bin/env bash
# bench/invalidation_delay.sh — how long after a write made directly on Redis
# the proxy stops serving the old value (design contract C10).
#
# For N keys cached in the proxy, bench/build/invaldelay (invaldelay.c) writes
# each one on Redis and polls GET through the proxy, back to back, until the
# new value comes back:
#   A  poll after the write's +OK: how long, and how many stale reads, a
#      client that learned of the write sees. delay_after_ack includes the
#      round trip of the one poll that is a miss (the purged entry).
#   B  poll while the write is on its way (SET written, polling at once):
#      the purge lies between "lower" (the last stale poll was sent) and
#      "upper" (the fresh reply was read); "fresh poll sent" is in between.
# For scale, the same run measures the round trip of a cache hit, of a
# pass-through GET through the proxy, and of a GET on Redis directly.
# And (PURGE_NAMES > 0) a cached GET polled back to back for 100 ms before
# and at once after a write on Redis purged a cached directory of
# PURGE_NAMES names whole, while the proxy frees them: what that freeing
# costs the clients (five rounds).
# Each scenario is run idle and with LOAD_CLIENTS connections of loadgen
# (cached GETs, 90 %, and SETs, 10 %, on other keys) on the proxy meanwhile.
#
# Prints a markdown table; writes it and a CSV to $RESULTS_DIR
# (invalidation-delay-<time>.md/.csv).
#
# Environment (all optional):
#   N             keys written and polled, per scenario          (2000)
#   LOADS         loadgen connections per scenario, 0 = idle     ("0 8")
#   PURGE_NAMES   names of the purged directory, 0 = no such run  (100000)
#   RESULTS_DIR, SIDECACHE_BIN, SIDECACHE_ARGS, REDIS_SERVER, BENCH_TIMEOUT
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_init invalidation-delay

N=${N:-2000}
LOADS=${LOADS:-"0 8"}
PURGE_NAMES=${PURGE_NAMES:-100000}
positive_ints N
[[ "$PURGE_NAMES" =~ ^[0-9]+$ ]] || die "PURGE_NAMES: a count, not '$PURGE_NAMES'"

find_redis
find_sidecache
build_loadgen
INVALDELAY_BIN=$here/build/invaldelay
if [ ! -x "$INVALDELAY_BIN" ] || [ "$here/invaldelay.c" -nt "$INVALDELAY_BIN" ]; then
  log "compiling $INVALDELAY_BIN"
  ${CC:-cc} -O2 -Wall -Wextra -o "$INVALDELAY_BIN" "$here/invaldelay.c" -lhiredis \
    || die "cannot compile bench/invaldelay.c (needs Debian libhiredis-dev)"
fi

start_redis redis
start_sidecache sidecache "$rport"
log "$(versions_line)"
"$LOADGEN_BIN" -p "$rport" --populate --keys 10000 --quiet || die "loadgen --populate failed"

report_files invalidation-delay
echo "load_clients,metric,count,mean,p50,p90,p99,max" >"$csv"
rows=()
failed=0
for load in $LOADS; do
  lpid=""
  if [ "$load" -gt 0 ]; then
    start "loadgen-$load" "$LOADGEN_BIN" -p "$sport" -c "$load" --mix get=90,set=10 --keys 10000 --prewarm \
      -d 3600 --warmup 0 --quiet --allow-errors
    lpid=$last_pid
    sleep 1
    kill -0 "$lpid" 2>/dev/null || die "loadgen did not start (log: $work/loadgen-$load.log)"
  fi
  k0=$(info_field "$sport" invalidation_keys)
  log "N=$N keys, $load loadgen connection(s) meanwhile"
  out=$work/invaldelay-$load.csv
  if ! fg "$INVALDELAY_BIN" --redis-port "$rport" --proxy-port "$sport" --keys "$N" --setup \
    --purge-names "$PURGE_NAMES" >"$out" 2>"$out.err"; then
    log "invaldelay failed (load $load):"; cat "$out.err" >&2; failed=1
  fi
  k1=$(info_field "$sport" invalidation_keys)
  [ -n "$lpid" ] && stop "loadgen-$load"
  check_alive
  log "invalidation_keys rose by $((k1 - k0)) (setup, A and B wrote $((3 * N)) tracked keys$([ "$load" -gt 0 ] && echo ', plus the load'))"
  [ $((k1 - k0)) -ge $((2 * N)) ] || { log "fewer invalidations than writes"; failed=1; }
  while IFS=, read -r metric cnt mean p50 p90 p99 max; do
    echo "$load,$metric,$cnt,$mean,$p50,$p90,$p99,$max" >>"$csv"
    case "$metric" in
      hit_rtt) what="round trip: cache hit through the proxy" ;;
      passthrough_rtt) what="round trip: pass-through GET through the proxy" ;;
      direct_rtt) what="round trip: GET on Redis directly" ;;
      set_rtt_direct) what="round trip: the SET on Redis" ;;
      A_delay_after_ack) what="**A: write acked → proxy returns the new value** (incl. one miss round trip)" ;;
      A_stale_reads_after_ack) what="A: stale reads after the ack (count)" ;;
      B_delay_after_send_upper) what="**B: write sent → new value read** (upper bound)" ;;
      B_fresh_poll_sent_after) what="B: write sent → the poll that got the new value was sent" ;;
      B_delay_after_send_lower) what="B: write sent → last stale poll sent (lower bound)" ;;
      B_stale_reads_after_send) what="B: stale reads after the write was sent (count)" ;;
      hit_rtt_polled) what="round trip: cache hit, polled back to back" ;;
      hit_rtt_polled_while_freeing) what="round trip: cache hit, polled while a purge of $PURGE_NAMES names is freed" ;;
      *) what=$metric ;;
    esac
    unit="µs"
    case "$metric" in *stale*) unit="reads" ;; esac
    rows+=("| $load | $what | $unit | $cnt | $mean | $p50 | $p90 | $p99 | $max |")
  done <"$out"
done
{
  echo "# sidecache invalidation delay ($stamp)"
  echo
  echo "$(versions_line); N=$N keys per scenario, 72-byte values, tracking-mode as configured (default bcast)."
  echo "Writer: a hiredis connection to Redis; reader: a hiredis connection to the proxy, polling GET back to back."
  echo
  echo "| load conns | metric | unit | n | mean | p50 | p90 | p99 | max |"
  echo "|--:|---|---|--:|--:|--:|--:|--:|--:|"
  printf '%s\n' "${rows[@]}"
} >"$md"
cat "$md"
echo
echo "written: $md $csv"
[ "$failed" = 0 ] || die "some measurements failed (see above)"
