#!/usr/bin/env bash
# bench/run.sh — every benchmark scenario, one after another (see README.md).
#
#   bench/run.sh          quick mode: every scenario on a reduced matrix, under
#                         2 minutes on a 2-core machine (a first run also builds
#                         bench/build/: loadgen, invaldelay, toxiproxy-server)
#   FULL=1 bench/run.sh   the full matrix of each scenario (about 15 minutes)
#
# In quick mode run.sh sets each scenario's size itself; to choose parameters,
# run the scenario alone (bench/hits.sh, …) with its own variables.
# RESULTS_DIR collects the reports (default /tmp). SIDECACHE_BIN defaults to a
# non-ASan build (see lib.sh). Exits non-zero if any scenario failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
bench_name=run
root=$(cd "$here/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/sidecache-run.XXXXXX")
trap 'rm -rf "$work"' EXIT
find_sidecache
export SIDECACHE_BIN
build_loadgen
export LOADGEN_BIN

rc=0
scenario() { # NAME ENV... : runs bench/NAME with the given environment
  local s=$1
  shift
  echo "== bench: $s $*"
  local t0=$SECONDS
  env "$@" "$here/$s" || { echo "== bench: $s failed" >&2; rc=1; }
  echo "== bench: $s took $((SECONDS - t0)) s"
}

echo "== bench: loadgen --selftest"
"$LOADGEN_BIN" --selftest | tail -n 1 || { echo "== bench: loadgen --selftest failed" >&2; rc=1; }

if [ "${FULL:-0}" = 1 ]; then
  scenario compare.sh REPEAT=3
  scenario hits.sh REPEAT=3
  scenario invalidation_delay.sh
  scenario latency.sh
else
  scenario compare.sh N=20000
  scenario hits.sh N=20000 MEM_ENTRIES=20000
  scenario invalidation_delay.sh N=500
  scenario latency.sh LATENCIES="0 500" CLIENTS="1 8" DURATION=2 WARMUP=0.5
fi
exit "$rc"
