#!/usr/bin/env bash
# bench/run.sh — every benchmark scenario, one after another (see README.md).
# Environment is passed through to each scenario; RESULTS_DIR collects their
# reports (default /tmp). Exits non-zero if any scenario failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
scenarios=(compare.sh)   # later scenarios are added here
rc=0
for s in "${scenarios[@]}"; do
  echo "== bench: $s"
  "$here/$s" || { echo "== bench: $s failed" >&2; rc=1; }
done
exit "$rc"
