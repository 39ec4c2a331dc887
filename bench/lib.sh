# shellcheck shell=bash
# bench/lib.sh — shared helpers of the bench scripts (sourced, not run).
#
# bench_init NAME sets up: $root (the repo), $here (bench/), $work (a temporary
# directory), $RESULTS_DIR, log/die, and a cleanup trap that stops, in reverse
# order, every process started with `start` (SIGTERM, then SIGKILL after 5 s),
# and removes $work (kept, and named, when the script failed). Everything runs
# on 127.0.0.1 on free ports.
#
# Binaries (environment overrides): REDIS_SERVER, REDIS_CLI, REDIS_BENCHMARK,
# NUTCRACKER_BIN, SIDECACHE_BIN (default: build/sidecache when ./sidecache is an
# ASan build or missing, else ./sidecache), LOADGEN_BIN (bench/build/loadgen,
# compiled when missing or older than bench/loadgen.c), BATCHUNLINK_BIN
# (bench/build/batchunlink, from bench/batchunlink.c), TOXIPROXY_BIN
# (bench/build/toxiproxy-server, built with Go from bench/toxiproxy/).
#
# Toxiproxy (start_toxiproxy, toxi_set_latency, toxi_calibrate): Redis behind
# a TCP proxy that adds microseconds of latency, for latency.sh and
# batch_unlink.sh. plot_csv draws a scenario's CSV with gnuplot when installed.
#
# PIN=1 (pin_hosts, called by bench_init) splits the cores in two hosts:
# redis-server and toxiproxy on the upper half, the script with everything
# else it runs (clients, the proxy under test) on the rest.

bench_init() {
  bench_name=$1
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  here=$root/bench
  RESULTS_DIR=${RESULTS_DIR:-/tmp}
  BENCH_TIMEOUT=${BENCH_TIMEOUT:-300}
  work=$(mktemp -d "${TMPDIR:-/tmp}/sidecache-$bench_name.XXXXXX")
  pids=()
  names=()
  fg_pid=""
  used_ports=" "
  exec 8>&1 9>&2 # the script's own stdout and stderr, for the cleanup (a signal may
                 # come while a command's output is redirected to a file)
  trap bench_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  host_cores=$(nproc)
  pin_hosts
}

log() { echo "$bench_name: $*" >&2; }
die() { log "error: $*"; exit 1; }

# pin_hosts: with PIN=1, two hosts on one machine. Where sidecache runs,
# beside a mount, Redis has a host of its own; on a machine of two cores,
# with Redis, toxiproxy, the client and the proxy on them as the scheduler
# likes, the proxy runs on Redis's core at times, and its work then delays
# Redis's: the direct target never pays that. Here Redis and toxiproxy (the
# network) get the upper half of the cores this script may use, and the
# script, so every client and proxy it starts, the rest. Sets on_redis_host
# (a command prefix) and pin_note (for reports).
pin_hosts() {
  on_redis_host=()
  pin_note="not pinned"
  [ "${PIN:-0}" != 0 ] || return 0
  [ "${PIN}" = 1 ] || die "PIN: 0 or 1, not '$PIN'"
  command -v taskset >/dev/null 2>&1 || die "PIN=1: taskset (util-linux) not found"
  local list cpus=() part lo hi c n k
  list=$(awk '/^Cpus_allowed_list:/ { print $2 }' /proc/self/status)
  for part in ${list//,/ }; do
    lo=${part%-*} hi=${part#*-}
    for ((c = lo; c <= hi; c++)); do cpus+=("$c"); done
  done
  n=${#cpus[@]}
  [ "$n" -ge 2 ] || die "PIN=1 needs two cores or more (this process may use: ${list:-none})"
  k=$((n / 2))
  local client server
  client=$(IFS=,; echo "${cpus[*]:0:n-k}")
  server=$(IFS=,; echo "${cpus[*]:n-k}")
  taskset -pc "$client" "$BASHPID" >/dev/null || die "PIN=1: taskset -pc $client failed"
  on_redis_host=(taskset -c "$server")
  pin_note="Redis and toxiproxy on core(s) $server, the client(s) and proxy on $client (PIN=1)"
}

# positive_ints NAME...: each variable named holds a positive integer, or the
# script stops saying which and what it holds
positive_ints() {
  local v
  for v in "$@"; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, not '${!v}'"
  done
}

bench_cleanup() {
  local rc=$? i
  trap - EXIT INT TERM
  exec 1>&8 2>&9
  if [ -n "$fg_pid" ]; then
    kill -TERM "$fg_pid" 2>/dev/null || true
    wait "$fg_pid" 2>/dev/null || true
  fi
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    [ -n "${pids[i]}" ] && stop_pid "${pids[i]}" "${names[i]}"
  done
  if [ "$rc" != 0 ]; then
    log "failed (exit $rc); logs kept in $work"
  else
    rm -rf "$work"
  fi
  exit "$rc"
}

stop_pid() { # PID NAME: SIGTERM, wait up to 5 s, then SIGKILL
  local pid=$1 name=$2
  kill -TERM "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    log "$name (pid $pid) ignored SIGTERM; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

pick_bin() { # first executable among the arguments (paths or names on PATH)
  local b
  for b in "$@"; do
    [ -n "$b" ] || continue
    if [ -x "$b" ] && [ ! -d "$b" ]; then echo "$b"; return 0; fi
    if command -v "$b" >/dev/null 2>&1; then command -v "$b"; return 0; fi
  done
  return 1
}

find_redis() {
  REDIS_SERVER=$(pick_bin "${REDIS_SERVER:-}" /usr/bin/redis-server redis-server) \
    || die "redis-server not found (Debian package redis-server)"
  REDIS_CLI=$(pick_bin "${REDIS_CLI:-}" /usr/bin/redis-cli redis-cli) \
    || die "redis-cli not found (Debian package redis-tools)"
}

find_redis_benchmark() {
  REDIS_BENCHMARK=$(pick_bin "${REDIS_BENCHMARK:-}" /usr/bin/redis-benchmark redis-benchmark) \
    || die "redis-benchmark not found (Debian package redis-tools)"
}

is_asan() { ldd "$1" 2>/dev/null | grep -q libasan; }

# Sets SIDECACHE_BIN. An ASan build (what CI and `make SANITIZE=1` make, and
# what ./sidecache points to after them) is several times slower: the
# non-sanitized build/sidecache is taken instead when it exists.
find_sidecache() {
  local b=${SIDECACHE_BIN:-}
  if [ -z "$b" ]; then
    b=$root/sidecache
    if { [ ! -x "$b" ] || is_asan "$b"; } && [ -x "$root/build/sidecache" ]; then
      b=$root/build/sidecache
    fi
  fi
  case "$b" in /*) ;; *) b="$PWD/$b" ;; esac
  if [ ! -x "$b" ] || [ -d "$b" ]; then
    die "sidecache binary $b is missing (build it with make, or set SIDECACHE_BIN)"
  fi
  if is_asan "$b"; then
    log "warning: $b is an ASan build: its numbers are not comparable (make without SANITIZE builds build/sidecache)"
  fi
  SIDECACHE_BIN=$b
}

find_nutcracker() { # sets NUTCRACKER_BIN, or empty
  NUTCRACKER_BIN=$(pick_bin "${NUTCRACKER_BIN:-}" /usr/sbin/nutcracker nutcracker) || NUTCRACKER_BIN=""
}

# The load driver: compiled into bench/build/ when missing or older than its source.
LOADGEN_CFLAGS="-O2 -Wall -Wextra"
LOADGEN_LIBS="-lhiredis -levent -lm"
build_loadgen() {
  LOADGEN_BIN=${LOADGEN_BIN:-$here/build/loadgen}
  if [ ! -x "$LOADGEN_BIN" ] || [ "$here/loadgen.c" -nt "$LOADGEN_BIN" ]; then
    mkdir -p "$(dirname "$LOADGEN_BIN")"
    log "compiling $LOADGEN_BIN"
    # shellcheck disable=SC2086
    ${CC:-cc} $LOADGEN_CFLAGS -o "$LOADGEN_BIN" "$here/loadgen.c" $LOADGEN_LIBS \
      || die "cannot compile bench/loadgen.c (needs Debian libhiredis-dev and libevent-dev)"
  fi
}

# build_c NAME LIBS...: bench/NAME.c compiled into bench/build/NAME when
# missing or older than its source; prints the binary's path.
build_c() {
  local name=$1 bin=$here/build/$1
  shift
  if [ ! -x "$bin" ] || [ "$here/$name.c" -nt "$bin" ]; then
    mkdir -p "$here/build"
    log "compiling $bin"
    ${CC:-cc} -O2 -Wall -Wextra -o "$bin" "$here/$name.c" "$@" >&2 \
      || die "cannot compile bench/$name.c (needs Debian libhiredis-dev, libevent-dev)"
  fi
  echo "$bin"
}

build_batchunlink() {
  BATCHUNLINK_BIN=${BATCHUNLINK_BIN:-$(build_c batchunlink -lhiredis)} || exit 1
}

# toxiproxy with a microsecond latency toxic (bench/toxiproxy/), built with Go.
build_toxiproxy() {
  TOXIPROXY_BIN=${TOXIPROXY_BIN:-$here/build/toxiproxy-server}
  local f stale=0
  [ -x "$TOXIPROXY_BIN" ] || stale=1
  for f in "$here"/toxiproxy/*.go "$here"/toxiproxy/go.mod; do
    if [ "$f" -nt "$TOXIPROXY_BIN" ]; then stale=1; fi
  done
  if [ "$stale" = 1 ]; then
    command -v go >/dev/null 2>&1 || die "go not found: needed to build toxiproxy (bench/toxiproxy)"
    mkdir -p "$(dirname "$TOXIPROXY_BIN")"
    log "building $TOXIPROXY_BIN (go build in bench/toxiproxy)"
    (cd "$here/toxiproxy" && go build -o "$TOXIPROXY_BIN" .) >"$work/toxiproxy-build.log" 2>&1 \
      || { cat "$work/toxiproxy-build.log" >&2; die "cannot build toxiproxy"; }
  fi
}

# free_port sets $fport to a free loopback port that this run has not handed
# out before, drawn from below the kernel's ephemeral range.
free_port() {
  local p
  for _ in $(seq 200); do
    p=$((20000 + RANDOM % 12000))
    case "$used_ports" in *" $p "*) continue ;; esac
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      used_ports+="$p "
      fport=$p
      return 0
    fi
  done
  die "no free port found"
}

# start NAME CMD... : runs CMD in the background (log in $work/NAME.log) and
# remembers its pid; $last_pid is it.
start() {
  local name=$1
  shift
  "$@" >"$work/$name.log" 2>&1 &
  last_pid=$!
  pids+=("$last_pid")
  names+=("$name")
}

pid_of() { # NAME: the pid of the running process started under NAME
  local i
  for ((i = ${#names[@]} - 1; i >= 0; i--)); do
    if [ "${names[i]}" = "$1" ] && [ -n "${pids[i]}" ]; then echo "${pids[i]}"; return 0; fi
  done
  return 1
}

stop() { # NAME: stops the process started under NAME
  local i
  for ((i = ${#names[@]} - 1; i >= 0; i--)); do
    if [ "${names[i]}" = "$1" ] && [ -n "${pids[i]}" ]; then
      stop_pid "${pids[i]}" "$1"
      pids[i]=""
      return 0
    fi
  done
}

check_alive() { # every started process still runs
  local i
  for i in "${!pids[@]}"; do
    [ -n "${pids[i]}" ] || continue
    kill -0 "${pids[i]}" 2>/dev/null || die "${names[i]} died (log: $work/${names[i]}.log)"
  done
}

rcli() { # PORT ARGS...: redis-cli against 127.0.0.1:PORT
  local p=$1
  shift
  timeout 10 "$REDIS_CLI" -h 127.0.0.1 -p "$p" "$@"
}

# wait_ready NAME PORT: until PORT answers PING, while NAME's process lives.
wait_ready() {
  local name=$1 port=$2 pid
  pid=$(pid_of "$name")
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || { log "$name exited during start-up:"; tail -n 20 "$work/$name.log" >&2; exit 1; }
    [ "$(rcli "$port" PING 2>/dev/null)" = PONG ] && return 0
    sleep 0.1
  done
  log "$name not ready on port $port after 10 s:"; tail -n 20 "$work/$name.log" >&2
  exit 1
}

start_redis() { # NAME [ARGS...]: sets $rport
  local name=$1
  shift
  free_port; rport=$fport
  start "$name" "${on_redis_host[@]}" "$REDIS_SERVER" --port "$rport" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$work" --daemonize no --protected-mode no "$@"
  wait_ready "$name" "$rport"
}

# start_relay NAME UPSTREAM_PORT: bench/relay.c (built if needed) in front of
# 127.0.0.1:UPSTREAM_PORT; sets $rlport
start_relay() {
  RELAY_BIN=${RELAY_BIN:-$(build_c relay)} || exit 1
  free_port; rlport=$fport
  start "$1" "$RELAY_BIN" --port "$rlport" --upstream-port "$2"
  wait_ready "$1" "$rlport"
}

# start_sidecache NAME UPSTREAM_PORT [ARGS...]: sets $sport; waits until the
# cache is on (tracking_state:active) when caching is enabled.
start_sidecache() {
  local name=$1 up=$2
  shift 2
  free_port; sport=$fport
  # shellcheck disable=SC2086 # SIDECACHE_ARGS is a word list on purpose
  start "$name" "$SIDECACHE_BIN" --bind 127.0.0.1 --port "$sport" --upstream "redis://127.0.0.1:$up" \
    --loglevel notice ${SIDECACHE_ARGS:-} "$@"
  wait_ready "$name" "$sport"
  for _ in $(seq 100); do
    case "$(info_field "$sport" cache_enabled)/$(info_field "$sport" tracking_state)" in
      0/*|1/active) return 0 ;;
    esac
    sleep 0.1
  done
  die "$name: tracking did not become active in 10 s"
}

start_twemproxy() { # NAME UPSTREAM_PORT: sets $tport
  local name=$1 up=$2 sp
  free_port; tport=$fport
  free_port; sp=$fport
  cat >"$work/$name.yml" <<EOF
sidecache_bench:
  listen: 127.0.0.1:$tport
  redis: true
  hash: fnv1a_64
  distribution: ketama
  auto_eject_hosts: false
  preconnect: true
  timeout: 10000
  server_connections: 1
  servers:
   - 127.0.0.1:$up:1
EOF
  start "$name" "$NUTCRACKER_BIN" -c "$work/$name.yml" -s "$sp" -a 127.0.0.1 -p "$work/$name.pid"
  wait_ready "$name" "$tport"
}

info_field() { # PORT FIELD: one field of the proxy's INFO sidecache section, or empty
  rcli "$1" INFO sidecache 2>/dev/null | tr -d '\r' | sed -n "s/^$2://p" | head -n1
}

# flush_redis REDIS_PORT [PROXY_PORT...]: FLUSHALL, then waits until each
# caching proxy has seen it (its cache empty, its tracking active again)
flush_redis() {
  local r=$1 pp ok
  shift
  rcli "$r" FLUSHALL >/dev/null
  for _ in $(seq 100); do
    ok=1
    for pp in "$@"; do
      [ "$(info_field "$pp" cache_entries)" = 0 ] && [ "$(info_field "$pp" tracking_state)" = active ] || ok=0
    done
    [ "$ok" = 1 ] && return 0
    sleep 0.02
  done
  die "the proxy's cache is not empty 2 s after FLUSHALL"
}

cpu_ns() { # PID: the CPU time of all its threads so far, ns (schedstat)
  cat "/proc/$1"/task/*/schedstat | awk '{ s += $1 } END { printf "%.0f", s }'
}
vmrss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

# fg CMD...: runs CMD in the background with BENCH_TIMEOUT and waits for it,
# so that a signal stops the script at once; returns CMD's status.
fg() {
  local rc=0
  timeout "$BENCH_TIMEOUT" "$@" &
  fg_pid=$!
  wait "$fg_pid" || rc=$?
  fg_pid=""
  return "$rc"
}

# cpu_ticks: the machine's steal and total CPU ticks (/proc/stat). Steal is
# time the hypervisor gave the vCPUs to other machines: on a shared host it
# stretches whichever run it lands in, and the reports show how much did.
cpu_ticks() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print $9, t }' /proc/stat; }
ms() { awk -v a="$1" 'BEGIN { if (a != "") printf "%.2f", a / 1000; else printf "n/a" }'; } # µs -> ms, or n/a

ratio() { # A B [DIGITS]: A / B with DIGITS decimals (2), or empty
  if [ -n "$1" ] && [ -n "$2" ]; then awk -v a="$1" -v b="$2" -v d="${3:-2}" 'BEGIN { if (b > 0) printf "%.*f", d, a / b }'; fi
}

fmt0() { # a number without decimals, or n/a
  if [ -n "$1" ]; then awk -v a="$1" 'BEGIN { printf "%.0f", a }'; else echo "n/a"; fi
}

median() { # median of the numbers given as arguments, or empty
  [ $# -gt 0 ] || return 0
  printf '%s\n' "$@" | grep . | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit; if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

runs() { local a; read -ra a <<<"$1"; (IFS=';'; echo "${a[*]}"); } # "1 2 3" -> 1;2;3 (a CSV cell)

# paired "A1 A2 …" "B1 B2 …" [csv]: the ratios B1/A1, B2/A2, … of runs made
# in pairs (back to back, so that the machine's drift between pairs
# cancels): their median and quartiles, "median (p25–p75)", or with csv
# "median,p25,p75". The quartiles are order statistics (with fewer than 5
# pairs, the smallest and largest ratio).
paired() {
  local a b i
  read -ra a <<<"$1"; read -ra b <<<"$2"
  for i in "${!a[@]}"; do awk -v x="${a[$i]}" -v y="${b[$i]}" 'BEGIN { printf "%.6f\n", y / x }'; done | sort -g |
    awk -v csv="${3:-}" '
      { r[NR] = $1 }
      END {
        n = NR; k = int((n - 1) / 4)
        m = (n % 2) ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2
        if (csv) printf "%.3f,%.3f,%.3f", m, r[1 + k], r[n - k]
        else printf "%.3f (%.3f–%.3f)", m, r[1 + k], r[n - k]
      }'
}

# report_files NAME: where a new report goes: sets $stamp (now), $md and
# $csv ($RESULTS_DIR/NAME-<stamp>.md and .csv), and makes $RESULTS_DIR
report_files() {
  mkdir -p "$RESULTS_DIR"
  stamp=$(date +%Y%m%d-%H%M%S)
  md="$RESULTS_DIR/$1-$stamp.md"
  csv="$RESULTS_DIR/$1-$stamp.csv"
}

versions_line() {
  local redis_ver sc_rev
  redis_ver=$("$REDIS_SERVER" --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')
  sc_rev=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
  git -C "$root" diff --quiet HEAD -- proxy protocol cache invalidation 2>/dev/null || sc_rev+="+dirty"
  echo "redis-server $redis_ver; sidecache $sc_rev (${SIDECACHE_BIN#"$root"/}); $host_cores cores, $pin_note; $(date -u +%Y-%m-%dT%H:%M:%SZ)"
}

# ---------------------------------------------------------------------------
# Toxiproxy: Redis across a simulated network (bench/toxiproxy: the stock
# server plus a "latency_us" toxic that sleeps on a timerfd, in µs).

# start_toxiproxy UPSTREAM_PORT: toxiproxy-server on a free API port with one
# proxy "redis" → 127.0.0.1:UPSTREAM_PORT; sets $toxport (where to connect)
# and $toxapi. TOXIC_STREAM (downstream|both) says where latency goes.
start_toxiproxy() {
  TOXIC_STREAM=${TOXIC_STREAM:-downstream}
  case "$TOXIC_STREAM" in downstream|both) ;; *) die "TOXIC_STREAM must be downstream or both" ;; esac
  build_toxiproxy
  free_port; toxapi=$fport
  start toxiproxy "${on_redis_host[@]}" "$TOXIPROXY_BIN" -host 127.0.0.1 -port "$toxapi"
  for _ in $(seq 100); do
    toxi_http GET /version 2>/dev/null || true
    [ "$http_status" = 200 ] && break
    kill -0 "$(pid_of toxiproxy)" 2>/dev/null || die "toxiproxy exited (log: $work/toxiproxy.log)"
    sleep 0.1
  done
  [ "$http_status" = 200 ] || die "toxiproxy API not up on :$toxapi"
  free_port; toxport=$fport
  toxi_api POST /proxies "{\"name\":\"redis\",\"listen\":\"127.0.0.1:$toxport\",\"upstream\":\"127.0.0.1:$1\",\"enabled\":true}"
  toxi_proxies=redis
  toxics_on=0
}

# start_paired_redis: two redis-servers, one per target of a side-by-side
# run, each behind its own proxy of one toxiproxy (the same toxics from the
# next toxi_set_latency on); sets $rdirect and $rside (the servers' ports),
# $toxdirect and $toxside (their toxiproxy ports).
start_paired_redis() {
  start_redis redis-direct
  rdirect=$rport
  start_redis redis-sidecache
  rside=$rport
  start_toxiproxy "$rdirect"
  toxdirect=$toxport
  toxi_add_proxy redis-sidecache "$rside"
  toxside=$toxport_added
}

# toxi_add_proxy NAME UPSTREAM_PORT: one more proxy in the same toxiproxy,
# NAME → 127.0.0.1:UPSTREAM_PORT, given the same toxics as "redis" from the
# next toxi_set_latency on (add it before); sets $toxport_added.
toxi_add_proxy() {
  [ "$toxics_on" = 0 ] || die "toxi_add_proxy $1: add proxies before setting latency"
  free_port; toxport_added=$fport
  toxi_api POST /proxies "{\"name\":\"$1\",\"listen\":\"127.0.0.1:$toxport_added\",\"upstream\":\"127.0.0.1:$2\",\"enabled\":true}"
  toxi_proxies+=" $1"
}

# toxi_http METHOD PATH [JSON]: one request to toxiproxy's API (bash's
# /dev/tcp, HTTP/1.0); sets $http_status.
toxi_http() {
  local body=${3:-}
  http_status=000
  exec 3<>"/dev/tcp/127.0.0.1/$toxapi" || return 1
  printf '%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s' \
    "$1" "$2" "${#body}" "$body" >&3
  IFS=' ' read -r _ http_status _ <&3 || true
  cat <&3 >/dev/null
  exec 3<&-
}

toxi_api() { # METHOD PATH [JSON]: dies unless toxiproxy answers 2xx
  toxi_http "$@" 2>/dev/null || true
  case "$http_status" in 2??) ;; *) die "toxiproxy API $1 $2 answered ${http_status:-nothing}" ;; esac
}

# toxi_set_latency US: the toxic(s) adding US µs to every round trip (0:
# none), on every proxy (toxi_add_proxy).
toxi_set_latency() {
  local us=$1 p
  for p in $toxi_proxies; do
    if [ "$toxics_on" = 1 ]; then
      toxi_api DELETE "/proxies/$p/toxics/lat_down"
      [ "$TOXIC_STREAM" = both ] && toxi_api DELETE "/proxies/$p/toxics/lat_up"
    fi
    [ "$us" -gt 0 ] || continue
    if [ "$TOXIC_STREAM" = both ]; then
      toxi_api POST "/proxies/$p/toxics" "{\"name\":\"lat_down\",\"type\":\"latency_us\",\"stream\":\"downstream\",\"toxicity\":1.0,\"attributes\":{\"latency\":$((us / 2))}}"
      toxi_api POST "/proxies/$p/toxics" "{\"name\":\"lat_up\",\"type\":\"latency_us\",\"stream\":\"upstream\",\"toxicity\":1.0,\"attributes\":{\"latency\":$((us - us / 2))}}"
    else
      toxi_api POST "/proxies/$p/toxics" "{\"name\":\"lat_down\",\"type\":\"latency_us\",\"stream\":\"downstream\",\"toxicity\":1.0,\"attributes\":{\"latency\":$us}}"
    fi
  done
  toxics_on=0
  [ "$us" -gt 0 ] && toxics_on=1
  return 0
}

# toxi_rtt: p50 µs of GET through toxiproxy at c=1, the median of 3 runs of
# RTT_SAMPLES (1000) GETs (needs LOADGEN_BIN).
toxi_rtt() { # [PORT]: through toxiproxy, or to PORT
  local v=() port=${1:-$toxport}
  for _ in 1 2 3; do
    v+=("$("$LOADGEN_BIN" -p "$port" -c 1 -n "${RTT_SAMPLES:-1000}" --mix get --keys 1000 --quiet --no-header --allow-errors \
      | awk -F, '$2 == "total" { print $8 }')")
  done
  median "${v[@]}"
}

# toxi_calibrate L: sets the toxic for an added round trip of L µs and
# measures it; sets $toxic_us (the toxic set) and $rtt_us (GET round trip
# p50). Toxiproxy and timer wake-ups add their own delay: unless CALIBRATE=0
# the toxic is lowered once so that the measured round trip is the one with no
# toxic ($toxi_base_rtt, measured at the first call) plus L.
toxi_calibrate() {
  local L=$1
  if [ -z "${toxi_base_rtt:-}" ]; then
    toxi_set_latency 0
    toxi_base_rtt=$(median "$(toxi_rtt)" "$(toxi_rtt)" "$(toxi_rtt)")
    log "GET round trip through toxiproxy with no toxic: p50 $toxi_base_rtt µs"
  fi
  toxic_us=$L
  toxi_set_latency "$toxic_us"
  rtt_us=$(toxi_rtt)
  if [ "${CALIBRATE:-1}" = 1 ] && [ "$L" -gt 0 ]; then
    # one correction: take off what came on top of L
    toxic_us=$(awk -v L="$L" -v r="$rtt_us" -v b="$toxi_base_rtt" 'BEGIN { t = L - ((r - b) - L); if (t < L / 2) t = L / 2; printf "%d", t }')
    toxi_set_latency "$toxic_us"
    rtt_us=$(toxi_rtt)
  fi
  log "L=$L µs: toxic $toxic_us µs ($TOXIC_STREAM), GET round trip p50 $rtt_us µs (no toxic: $toxi_base_rtt µs)"
}

# ---------------------------------------------------------------------------
# plot_csv CSV: PNGs of ops/s and p99 against clients from a scenario's CSV
# (bench/plot.sh), when gnuplot is installed; a notice otherwise.
plot_csv() {
  if ! command -v "${GNUPLOT:-gnuplot}" >/dev/null 2>&1; then
    log "notice: gnuplot not installed (Debian gnuplot-nox): no plots"
    return 0
  fi
  "$here/plot.sh" "$@" || log "warning: plotting $* failed"
}
