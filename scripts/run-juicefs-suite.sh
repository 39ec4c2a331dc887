#!/usr/bin/env bash
# Runs JuiceFS's own tests of its Redis metadata engine through sidecache:
# TestRedisClient (JuiceFS 1.2.0's testMeta: about thirty test functions over
# every metadata operation, with transactions, the lookup script, batched
# writes, locks, quotas, trash, clone, compaction and fsck) and the Redis case
# of TestLoadDump (load a sample volume, dump it back, diff). Then
# tests/juicefs's TestTwoMounts, in each tracking mode: three clients of one
# volume, each JuiceFS's metadata engine, one through each of two sidecaches
# of its own and one directly on Redis (what JuiceFS's own tests, with one
# client, cannot check: that a cache in front of each mount shows its own
# and the other mounts' changes; see mounts_test.go).
#
#   scripts/run-juicefs-suite.sh
#
# JuiceFS's tests are JuiceFS's, built from the module (tests/juicefs/go.mod
# pins v1.2.0), not copied. They dial Redis at 127.0.0.1:6379, a fixed
# address, so they run in a network namespace of their own (unshare -n, or
# unshare -rn where only a user namespace is allowed): there sidecache
# listens on 127.0.0.1:6379, and its upstream is a redis-server this script
# starts on 6390. Nothing outside the namespace can reach them, and a Redis
# the machine itself runs on 6379 is not touched. Where no namespace can be
# made (a container that refuses unshare), they run on the machine's own
# loopback if nothing listens on 127.0.0.1:6379 (the script says so), and the
# script stops with exit 2 otherwise.
#
# Passing needs three things: every test passes; sidecache's INFO after
# JuiceFS's tests shows that its cache took part (lookup scripts answered
# from the cache, MGET keys from the cache, WATCHes and UNWATCHes answered
# ahead, write batches), so they ran through the cache and not around it;
# and every sidecache exits 0 on SIGTERM.
#
# Environment:
#   SIDECACHE_BIN   proxy binary (default: ./sidecache at the repo root)
#   REDIS_SERVER    redis-server to start (default: redis-server on PATH)
#   JUICEFS_SUITE_KEEP=1  keep the work folder (logs) after a pass too
#   JUICEFS_MOUNTS_GRACE, JUICEFS_MOUNTS_INV_DELAY  TestTwoMounts's (see
#                   tests/juicefs/mounts_test.go)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# port_free PORT: nothing listens on 127.0.0.1:PORT
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# run_test BINARY PATTERN NAME...: the tests of a Go test binary that
# PATTERN selects; each NAME (a test or subtest) must be among those passed
run_test() {
  local bin=$1 pattern=$2 name
  shift 2
  echo "run-juicefs-suite: $(basename "$bin") $pattern"
  if ! "$bin" -test.run "$pattern" -test.count=1 -test.v -test.timeout 10m >"$work/test.log" 2>&1; then
    grep -v '<WARNING>\|<INFO>\|<DEBUG>' "$work/test.log" | tail -40 >&2
    cat "$work/test.log" >>"$work/tests.log"
    echo "run-juicefs-suite: $pattern FAILED (log: $work/tests.log)" >&2
    return 1
  fi
  cat "$work/test.log" >>"$work/tests.log"
  grep -- '--- PASS\|--- SKIP' "$work/test.log" | sed 's/^ *//; s/^/run-juicefs-suite:   /'
  # a pattern that matches nothing passes too: each test named must have run
  for name in "$@"; do
    grep -q -- "--- PASS: $name (" "$work/test.log" ||
      { echo "run-juicefs-suite: $name did not run and pass" >&2; return 1; }
  done
}

# inside WORK IN_NAMESPACE: starts Redis and the sidecache on :6379, runs
# the tests, stops them
inside() {
  work=$1
  local in_ns=$2 rc=0 i k v prc
  redis_pid="" proxy_pid=""
  trap 'kill $proxy_pid $redis_pid 2>/dev/null || true' EXIT
  rport=6390
  if [ "$in_ns" = 1 ]; then
    ip link set lo up
  else
    port_free 6379 || { echo "run-juicefs-suite: 127.0.0.1:6379 is in use, and no network namespace" >&2; return 2; }
    while ! port_free "$rport"; do rport=$((rport + 1)); done
  fi
  "$REDIS_SERVER" --bind 127.0.0.1 --port "$rport" --save '' --appendonly no \
    --dir "$work" --logfile "$work/redis.log" &
  redis_pid=$!
  for i in $(seq 100); do
    [ "$(redis-cli -p "$rport" PING 2>/dev/null)" = PONG ] && break
    sleep 0.1
  done
  "$SIDECACHE_BIN" --bind 127.0.0.1 --port 6379 --upstream "redis://127.0.0.1:$rport" \
    --loglevel notice 2>"$work/sidecache.log" &
  proxy_pid=$!
  for i in $(seq 100); do
    kill -0 "$proxy_pid" 2>/dev/null || break
    redis-cli -p 6379 INFO sidecache 2>/dev/null | grep -q '^tracking_state:active' && break
    sleep 0.1
  done
  if ! redis-cli -p 6379 INFO sidecache 2>/dev/null | grep -q '^tracking_state:active'; then
    echo "run-juicefs-suite: the sidecache on :6379 did not become active:" >&2
    tail -20 "$work/sidecache.log" >&2
    return 1
  fi

  cd "$work"
  run_test "$work/meta.test" '^TestRedisClient$' TestRedisClient || rc=1
  run_test "$work/meta.test" '^TestLoadDump$/^Metadata_Engine:_redis$' TestLoadDump/Metadata_Engine:_redis || rc=1
  redis-cli -p 6379 INFO sidecache >"$work/info.txt" || rc=1
  for k in cache_script_hits cache_mget_keys_cached watch_ahead unwatch_ahead batch_blocks; do
    v=$(awk -F: -v k="$k" '$1 == k {print $2 + 0}' "$work/info.txt")
    echo "run-juicefs-suite: sidecache $k=$v"
    [ "${v:-0}" -gt 0 ] || { echo "run-juicefs-suite: sidecache's $k is 0: JuiceFS's tests did not go through its cache" >&2; rc=1; }
  done
  grep -E '^cache_(hits|misses|fills|invalidations|flushes):' "$work/info.txt" | tr -d '\r' | paste -sd' ' |
    sed 's/^/run-juicefs-suite: sidecache /' || true
  kill -TERM "$proxy_pid" 2>/dev/null || true
  prc=0
  wait "$proxy_pid" || prc=$?
  proxy_pid=""
  [ "$prc" = 0 ] || { echo "run-juicefs-suite: the sidecache exited $prc on SIGTERM:" >&2; tail -20 "$work/sidecache.log" >&2; rc=1; }

  # TestTwoMounts starts its own sidecaches (free ports) in each mode
  JUICEFS_REDIS=127.0.0.1:$rport run_test "$work/mounts.test" '^TestTwoMounts$' \
    TestTwoMounts/bcast TestTwoMounts/default TestTwoMounts/optin || rc=1

  kill "$redis_pid" 2>/dev/null || true
  wait "$redis_pid" 2>/dev/null || true
  trap - EXIT
  return "$rc"
}

if [ "${1:-}" = --inside ]; then
  inside "$2" "$3"
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

# A network namespace of our own: unshare -n (root), or with a user
# namespace (-rn); else the machine's loopback (inside checks 6379 is free).
rc=0
if unshare -n true 2>/dev/null; then
  unshare -n "$0" --inside "$work" 1 || rc=$?
elif unshare -rn true 2>/dev/null; then
  unshare -rn "$0" --inside "$work" 1 || rc=$?
else
  echo "run-juicefs-suite: no network namespace can be made here (unshare refused): on this machine's loopback"
  "$0" --inside "$work" 0 || rc=$?
fi
if [ "$rc" = 0 ]; then
  echo "run-juicefs-suite: JuiceFS's metadata tests passed through sidecache"
  [ "${JUICEFS_SUITE_KEEP:-0}" = 1 ] || rm -rf "$work"
else
  echo "run-juicefs-suite: FAILED (exit $rc); logs in $work" >&2
fi
exit "$rc"
