#!/usr/bin/env bash
# Installs what sidecache needs, from Debian's packages and PyPI. A no-op when
# everything is present, so `make` and `make test` may call it every time.
#   install-deps.sh build   compiler-side: libevent, OpenSSL, uthash, hiredis
#   install-deps.sh test    test-side: redis-server, twemproxy, pytest, redis-py, Go modules
#   install-deps.sh fuzz    clang with libFuzzer (make fuzz)
#   install-deps.sh bench   gnuplot for the benchmark plots, valgrind for bench/instructions.sh (make bench)
set -euo pipefail
want=${1:-build}
build_pkgs=(libevent-dev libssl-dev uthash-dev libhiredis-dev pkg-config make gcc)
test_pkgs=(redis-server redis-tools nutcracker)

missing=()
fuzz_pkgs=(clang libclang-rt-14-dev uthash-dev)
bench_pkgs=(gnuplot-nox valgrind)
pkgs=("${build_pkgs[@]}")
[ "$want" = test ] && pkgs=("${test_pkgs[@]}")
[ "$want" = fuzz ] && pkgs=("${fuzz_pkgs[@]}")
[ "$want" = bench ] && pkgs=("${bench_pkgs[@]}")
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# A redis-server started by the package's service is not ours: tests start their own.
if [ "$want" = test ]; then
  python3 -c 'import redis, pytest' 2>/dev/null || \
    python3 -m pip install -q --disable-pip-version-check -r "$(dirname "$0")/../tests/requirements.txt"
fi
