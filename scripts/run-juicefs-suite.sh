#!/usr/bin/env bash
# Runs JuiceFS's own tests of its Redis metadata engine through sidecache:
# TestRedisClient (JuiceFS 1.2.0's testMeta: about thirty test functions over
# every metadata operation, with transactions, the lookup script, batched
# writes, locks, quotas, trash, clone, compaction and fsck) and the Redis case
# of TestLoadDump (load a sample volume, dump it back, diff). Then
# tests/juicefs's TestTwoMounts: three clients of one volume, each JuiceFS's
# metadata engine, one through each of two sidecaches and one directly on
# Redis (what JuiceFS's own tests, with one client, cannot check: that a
# cache in front of each mount shows the other mounts' changes).
#
#   scripts/run-juicefs-suite.sh
#
# The tests are JuiceFS's, built from the module (tests/juicefs/go.mod pins
# v1.2.0), not copied. They dial Redis at 127.0.0.1:6379, a fixed address, so
# they run in a network namespace of their own (unshare -n, or -rn without
# root): there sidecache listens on 127.0.0.1:6379 and its upstream is a
# redis-server this script starts on another port (a second sidecache, for
# TestTwoMounts, on 127.0.0.1:6380; and a pair in each other tracking mode,
# on 6381-6384). Nothing outside the
# namespace can reach them, and a Redis the machine itself runs on 6379 is
# not touched.
#
# Passing needs three things: every test passes; sidecache's INFO after
# JuiceFS's tests shows that its cache took part (lookup scripts answered
# from the cache, MGET keys from the cache, WATCHes answered ahead, write
# batches), so they ran through the cache and not around it; and both
# sidecaches exit 0 on SIGTERM.
#
# Environment:
#   SIDECACHE_BIN   proxy binary (default: ./sidecache at the repo root)
#   REDIS_SERVER    redis-server to start (default: redis-server on PATH)
#   JUICEFS_SUITE_KEEP=1  keep the work folder (logs) after a pass too
#   JUICEFS_MOUNTS_GRACE  how long TestTwoMounts lets a mount lag a change
#                         made through another (default 2s)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# start_proxy PORT [ARGS...]: a sidecache on 127.0.0.1:PORT in front of the
# Redis on $rport; its pid appended to proxies
start_proxy() {
  local port=$1
  shift
  "$SIDECACHE_BIN" --bind 127.0.0.1 --port "$port" \
    --upstream "redis://127.0.0.1:$rport" --loglevel notice "$@" 2>"$work/sidecache-$port.log" &
  proxies+=($!)
  local i
  for i in $(seq 100); do
    redis-cli -p "$port" INFO sidecache 2>/dev/null | grep -q '^tracking_state:active' && return 0
    sleep 0.1
  done
  echo "run-juicefs-suite: the tracking of the sidecache on :$port did not become active" >&2
  return 1
}

# run_test BINARY PATTERN: one test of a Go test binary, its log kept
run_test() {
  echo "run-juicefs-suite: $(basename "$1") $2"
  if ! "$1" -test.run "$2" -test.count=1 -test.v -test.timeout 10m >"$work/test.log" 2>&1; then
    grep -v '<WARNING>\|<INFO>\|<DEBUG>' "$work/test.log" | tail -40 >&2
    echo "run-juicefs-suite: $2 FAILED (log: $work/tests.log)" >&2
    cat "$work/test.log" >>"$work/tests.log"
    return 1
  fi
  cat "$work/test.log" >>"$work/tests.log"
  # a pattern that matched nothing passes too: the test must have run
  grep -q -- '^--- PASS' "$work/test.log" || { echo "run-juicefs-suite: $2 ran no test" >&2; return 1; }
  grep -- '--- PASS\|--- SKIP' "$work/test.log" | sed 's/^/run-juicefs-suite:   /'
}

inside() {
  work=$1 rport=6390 proxies=()
  local rc=0
  ip link set lo up
  "$REDIS_SERVER" --bind 127.0.0.1 --port "$rport" --save '' --appendonly no \
    --dir "$work" --logfile "$work/redis.log" &
  local redis_pid=$!
  trap 'kill "${proxies[@]}" "$redis_pid" 2>/dev/null || true' EXIT
  local i
  for i in $(seq 100); do
    [ "$(redis-cli -p "$rport" PING 2>/dev/null)" = PONG ] && break
    sleep 0.1
  done
  start_proxy 6379 && start_proxy 6380 || return 1

  cd "$work"
  run_test "$work/meta.test" '^TestRedisClient$' || rc=1
  run_test "$work/meta.test" '^TestLoadDump$/^Metadata_Engine:_redis$' || rc=1
  redis-cli -p 6379 INFO sidecache >"$work/info.txt"
  local k v
  for k in cache_script_hits cache_mget_keys_cached watch_ahead batch_blocks; do
    v=$(awk -F: -v k="$k" '$1 == k {print $2 + 0}' "$work/info.txt")
    echo "run-juicefs-suite: sidecache $k=$v"
    [ "${v:-0}" -gt 0 ] || { echo "run-juicefs-suite: sidecache's $k is 0: JuiceFS's tests did not go through its cache" >&2; rc=1; }
  done
  grep -E '^cache_(hits|misses|fills|invalidations|flushes):' "$work/info.txt" | tr -d '\r' | paste -sd' ' |
    sed 's/^/run-juicefs-suite: sidecache /'

  # TestTwoMounts in each tracking mode: the first pair of proxies is the
  # default's (bcast); then a pair per other mode
  local mode a b port=6381
  for mode in bcast default optin; do
    echo "run-juicefs-suite: tracking-mode $mode"
    if [ "$mode" = bcast ]; then
      a=6379 b=6380
    else
      a=$port b=$((port + 1)) port=$((port + 2))
      start_proxy "$a" --tracking-mode "$mode" && start_proxy "$b" --tracking-mode "$mode" || { rc=1; continue; }
    fi
    JUICEFS_MOUNT_A=redis://127.0.0.1:$a/2 JUICEFS_MOUNT_B=redis://127.0.0.1:$b/2 \
      JUICEFS_MOUNT_DIRECT=redis://127.0.0.1:$rport/2 run_test "$work/mounts.test" '^TestTwoMounts$' || rc=1
  done

  local pid prc
  for pid in "${proxies[@]}"; do
    kill -TERM "$pid"
    prc=0
    wait "$pid" || prc=$?
    [ "$prc" = 0 ] || { echo "run-juicefs-suite: a sidecache exited $prc on SIGTERM" >&2; rc=1; }
  done
  kill "$redis_pid" 2>/dev/null || true
  wait "$redis_pid" 2>/dev/null || true
  trap - EXIT
  return "$rc"
}

if [ "${1:-}" = --inside ]; then
  inside "$2"
  exit
fi

SIDECACHE_BIN=${SIDECACHE_BIN:-$root/sidecache}
case "$SIDECACHE_BIN" in /*) ;; *) SIDECACHE_BIN="$PWD/$SIDECACHE_BIN" ;; esac
REDIS_SERVER=${REDIS_SERVER:-$(command -v redis-server || true)}
export SIDECACHE_BIN REDIS_SERVER
[ -x "$SIDECACHE_BIN" ] || { echo "run-juicefs-suite: no proxy binary at $SIDECACHE_BIN" >&2; exit 2; }
[ -x "$REDIS_SERVER" ] || { echo "run-juicefs-suite: no redis-server (REDIS_SERVER)" >&2; exit 2; }
for c in go ip unshare redis-cli; do
  command -v "$c" >/dev/null || { echo "run-juicefs-suite: $c is not on PATH (scripts/install-deps.sh test)" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/juicefs-suite.XXXXXX")
# The test binaries: JuiceFS's metadata package's, built from the module
# cache, and tests/juicefs's own (the Go build cache makes a second build
# quick).
(cd "$root/tests/juicefs" && go test -c -o "$work/meta.test" github.com/juicedata/juicefs/pkg/meta &&
  go test -c -o "$work/mounts.test" .)
# TestLoadDump reads its sample volumes from, and writes its dumps to, the
# folder it runs in: a writable copy, not the read-only module cache.
src=$(cd "$root/tests/juicefs" && go list -f '{{.Dir}}' github.com/juicedata/juicefs/pkg/meta)
cp "$src"/metadata.sample "$src"/metadata-sub.sample "$work/"
chmod u+w "$work"/*.sample
echo "run-juicefs-suite: JuiceFS $(cd "$root/tests/juicefs" && go list -m -f '{{.Version}}' github.com/juicedata/juicefs)" \
  "metadata tests; $("$REDIS_SERVER" --version | grep -o 'v=[0-9.]*'); proxy $SIDECACHE_BIN"

# A network namespace of our own: as root unshare -n; otherwise a user
# namespace too (-rn), where the kernel allows one.
ns=(unshare -n)
[ "$(id -u)" = 0 ] || ns=(unshare -rn)
if ! "${ns[@]}" true 2>/dev/null; then
  echo "run-juicefs-suite: '${ns[*]}' is refused here: JuiceFS's tests dial 127.0.0.1:6379 and need a" \
    "network namespace of their own (run as root, or allow unprivileged user namespaces)" >&2
  exit 2
fi
rc=0
"${ns[@]}" "$0" --inside "$work" || rc=$?
if [ "$rc" = 0 ]; then
  echo "run-juicefs-suite: JuiceFS's metadata tests passed through sidecache"
  [ "${JUICEFS_SUITE_KEEP:-0}" = 1 ] || rm -rf "$work"
else
  echo "run-juicefs-suite: FAILED (exit $rc); logs in $work" >&2
fi
exit "$rc"
