#!/usr/bin/env bash
# Runs the interop tests (tests/interop, a Go module using go-redis v9) against
# the sidecache binary. Needs only the Go toolchain, the Go module proxy and
# redis-server; each test starts its own redis-server and proxy.
#
#   scripts/run-interop.sh [go test args...]     e.g. -run TestPubSub
#
# Environment (see tests/interop/harness_test.go):
#   SIDECACHE_BIN            proxy binary (default: ./sidecache at the repo root)
#   SIDECACHE_ALLOW_MISSING  1: skip the tests when the binary is missing
#   SIDECACHE_TARGET=direct  run the tests against redis-server itself
#   JFS_REPLAY_GRACE         how long TestJuiceFSReplay lets a read through one
#                            proxy lag a write made elsewhere (default 2s; 0: none)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# A relative SIDECACHE_BIN is relative to where we were called from, not to
# the module folder the tests run in.
if [ -n "${SIDECACHE_BIN:-}" ]; then
  case "$SIDECACHE_BIN" in
    /*) ;;
    *) SIDECACHE_BIN="$PWD/$SIDECACHE_BIN" ;;
  esac
else
  SIDECACHE_BIN="$root/sidecache"
fi
export SIDECACHE_BIN

command -v go >/dev/null || { echo "run-interop: the Go toolchain (go) is not on PATH" >&2; exit 2; }

cd "$root/tests/interop"
# Modules come from the module proxy, checked against go.sum.
go mod download
echo "run-interop: $(go version); proxy binary $SIDECACHE_BIN${SIDECACHE_TARGET:+ (target: $SIDECACHE_TARGET)}"
set +e
go test -count=1 -v -timeout 10m "$@" ./...
rc=$?
set -e
[ "$rc" = 0 ] && echo "run-interop: all interop tests passed" || echo "run-interop: FAILED (exit $rc)" >&2
exit "$rc"
