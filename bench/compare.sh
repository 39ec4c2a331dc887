#!/usr/bin/env bash
# bench/compare.sh — side by side: redis-benchmark GET and SET against
#   direct     redis-server itself
#   sidecache  ./sidecache in front of the same redis-server
#   twemproxy  nutcracker (one server, one server connection) in front of it
# for every clients × pipeline combination, all in one run on one
# redis-server, each combination measured on the three targets back to back.
#
# Prints a markdown table and writes it, with a CSV of the same numbers plus
# latencies, to $RESULTS_DIR (default /tmp). Starts and stops everything itself.
#
# Environment (all optional):
#   N                    requests per run without pipelining      (100000)
#   N_PIPE               requests per run with pipelining         (5 × N)
#   CLIENTS              client counts, -c                        ("1 8 32")
#   PIPELINES            pipeline depths, -P                      ("1 16")
#   KEYSPACE             -r: random keys in [0, KEYSPACE)         (100000)
#   DATASIZE             -d: value size in bytes                  (3)
#   RESULTS_DIR          where the .md and .csv go                (/tmp)
#   SIDECACHE_BIN        proxy binary                             (<repo>/sidecache)
#   SIDECACHE_ARGS       extra proxy arguments, e.g. a config file
#   NUTCRACKER_BIN       twemproxy binary                         (/usr/sbin/nutcracker, else PATH)
#   REDIS_SERVER         redis-server binary                      (/usr/bin/redis-server, else PATH)
#   BENCH_ALLOW_MISSING  1: a missing sidecache or nutcracker binary leaves
#                        its column empty with a notice instead of failing
#   REPEAT               runs of each measurement; the median is reported (1)
#   BENCH_TIMEOUT        seconds one redis-benchmark run may take (180)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
N=${N:-100000}
N_PIPE=${N_PIPE:-$((N * 5))}
CLIENTS=${CLIENTS:-"1 8 32"}
PIPELINES=${PIPELINES:-"1 16"}
KEYSPACE=${KEYSPACE:-100000}
DATASIZE=${DATASIZE:-3}
RESULTS_DIR=${RESULTS_DIR:-/tmp}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-180}
REPEAT=${REPEAT:-1}
for v in N N_PIPE KEYSPACE DATASIZE REPEAT BENCH_TIMEOUT; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "compare: $v must be a positive integer, not '${!v}'" >&2; exit 2; }
done
SIDECACHE_BIN=${SIDECACHE_BIN:-$root/sidecache}
case "$SIDECACHE_BIN" in /*) ;; *) SIDECACHE_BIN="$PWD/$SIDECACHE_BIN" ;; esac

log() { echo "compare: $*" >&2; }
die() { log "error: $*"; exit 1; }

pick_bin() { # first executable among the arguments (paths or names on PATH)
  local b
  for b in "$@"; do
    [ -n "$b" ] || continue
    if [ -x "$b" ] && [ ! -d "$b" ]; then echo "$b"; return 0; fi
    if command -v "$b" >/dev/null 2>&1; then command -v "$b"; return 0; fi
  done
  return 1
}

REDIS_SERVER=$(pick_bin "${REDIS_SERVER:-}" /usr/bin/redis-server redis-server) \
  || die "redis-server not found (Debian package redis-server)"
REDIS_BENCHMARK=$(pick_bin redis-benchmark) || die "redis-benchmark not found (Debian package redis-tools)"
REDIS_CLI=$(pick_bin redis-cli) || die "redis-cli not found (Debian package redis-tools)"

targets=(direct)
missing_note=()
if [ -x "$SIDECACHE_BIN" ] && [ ! -d "$SIDECACHE_BIN" ]; then
  targets+=(sidecache)
elif [ "${BENCH_ALLOW_MISSING:-0}" = 1 ]; then
  missing_note+=("sidecache binary $SIDECACHE_BIN is missing: its column is empty (BENCH_ALLOW_MISSING=1)")
else
  die "sidecache binary $SIDECACHE_BIN is missing (build it with make, set SIDECACHE_BIN, or BENCH_ALLOW_MISSING=1 to skip it)"
fi
if NUTCRACKER_BIN=$(pick_bin "${NUTCRACKER_BIN:-}" /usr/sbin/nutcracker nutcracker); then
  targets+=(twemproxy)
elif [ "${BENCH_ALLOW_MISSING:-0}" = 1 ]; then
  missing_note+=("nutcracker is missing: the twemproxy column is empty (BENCH_ALLOW_MISSING=1)")
else
  die "nutcracker not found (Debian package nutcracker), or BENCH_ALLOW_MISSING=1 to skip it"
fi
for m in "${missing_note[@]}"; do log "notice: $m"; done

work=$(mktemp -d "${TMPDIR:-/tmp}/sidecache-compare.XXXXXX")
pids=()
names=()
bench_pid=""
cleanup() {
  local rc=$? i pid
  trap - EXIT INT TERM
  if [ -n "$bench_pid" ]; then
    kill -TERM "$bench_pid" 2>/dev/null || true
    wait "$bench_pid" 2>/dev/null || true
  fi
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    pid=${pids[i]}
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      log "${names[i]} (pid $pid) ignored SIGTERM; killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
  done
  if [ "$rc" != 0 ]; then
    log "failed (exit $rc); logs kept in $work"
  else
    rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# free_port sets $fport to a free loopback port: nothing accepts on it now,
# and this run has not handed it out before. Ports are drawn at random from a
# range below the kernel's ephemeral ports.
used_ports=" "
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

# start NAME LOGFILE CMD... : runs CMD in the background and remembers its pid.
start() {
  local name=$1 logf=$2
  shift 2
  "$@" >"$logf" 2>&1 &
  pids+=($!)
  names+=("$name")
}

# wait_ready NAME PORT: until PORT answers PING (through whatever is on it).
wait_ready() {
  local name=$1 port=$2 pid=${pids[${#pids[@]} - 1]}
  for _ in $(seq 100); do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "$name exited during start-up; its log:"; tail -n 20 "$work/$name.log" >&2 || true
      exit 1
    fi
    if [ "$(timeout 2 "$REDIS_CLI" -h 127.0.0.1 -p "$port" PING 2>/dev/null)" = PONG ]; then
      return 0
    fi
    sleep 0.1
  done
  log "$name not ready on port $port after 10 s; its log:"; tail -n 20 "$work/$name.log" >&2 || true
  exit 1
}

# probe NAME PORT: a SET and a GET through the target must really reach Redis
# (redis-benchmark counts error replies as requests, so a target that answered
# everything with an error would look fast).
probe() {
  local name=$1 port=$2 v
  v="probe-$name-$$"
  [ "$(timeout 5 "$REDIS_CLI" -h 127.0.0.1 -p "$port" SET "bench:probe:$name" "$v")" = OK ] \
    || die "$name: SET through it failed"
  [ "$(timeout 5 "$REDIS_CLI" -h 127.0.0.1 -p "$port" GET "bench:probe:$name")" = "$v" ] \
    || die "$name: GET through it failed"
  [ "$(timeout 5 "$REDIS_CLI" -h 127.0.0.1 -p "$rport" GET "bench:probe:$name")" = "$v" ] \
    || die "$name: a SET through it did not reach redis-server"
}

declare -A port
free_port; rport=$fport
start redis "$work/redis.log" "$REDIS_SERVER" --port "$rport" --bind 127.0.0.1 --save "" \
  --appendonly no --dir "$work" --daemonize no --protected-mode no
wait_ready redis "$rport"
port[direct]=$rport

for t in "${targets[@]}"; do
  case "$t" in
    sidecache)
      free_port; p=$fport
      # shellcheck disable=SC2086 # SIDECACHE_ARGS is a word list on purpose
      start sidecache "$work/sidecache.log" "$SIDECACHE_BIN" --bind 127.0.0.1 --port "$p" \
        --upstream "redis://127.0.0.1:$rport" --loglevel notice ${SIDECACHE_ARGS:-}
      wait_ready sidecache "$p"
      port[sidecache]=$p
      ;;
    twemproxy)
      free_port; p=$fport
      free_port; sp=$fport
      cat >"$work/nutcracker.yml" <<EOF
sidecache_bench:
  listen: 127.0.0.1:$p
  redis: true
  hash: fnv1a_64
  distribution: ketama
  auto_eject_hosts: false
  preconnect: true
  timeout: 10000
  server_connections: 1
  servers:
   - 127.0.0.1:$rport:1
EOF
      "$NUTCRACKER_BIN" -t -c "$work/nutcracker.yml" >"$work/nutcracker-test.log" 2>&1 \
        || { cat "$work/nutcracker-test.log" >&2; die "nutcracker rejected its configuration"; }
      start twemproxy "$work/twemproxy.log" "$NUTCRACKER_BIN" -c "$work/nutcracker.yml" \
        -s "$sp" -a 127.0.0.1 -p "$work/nutcracker.pid"
      wait_ready twemproxy "$p"
      port[twemproxy]=$p
      ;;
  esac
done
for t in "${targets[@]}"; do probe "$t" "${port[$t]}"; done

# Versions, for the record.
redis_ver=$("$REDIS_SERVER" --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')
nc_ver=$([ -n "${NUTCRACKER_BIN:-}" ] && "$NUTCRACKER_BIN" -V 2>&1 | sed -n 's/^This is nutcracker-//p' | head -n1 || true)
sc_rev=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$root" diff --quiet HEAD 2>/dev/null || sc_rev+="+dirty"
log "redis-server $redis_ver on :$rport; targets: ${targets[*]}; N=$N N_PIPE=$N_PIPE"

# Per run, the values of rps, p50 and p99 are collected in lists keyed by
# target,TEST,c,P; the report shows the median over the REPEAT runs.
declare -A rps_l p50_l p99_l rps p50 p99
failed=0
median() { # median of the numbers in $1 (blank-separated), or empty
  [ -n "${1// /}" ] || return 0
  tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
for P in $PIPELINES; do
  n=$N
  [ "$P" -gt 1 ] && n=$N_PIPE
  for c in $CLIENTS; do
    for rep in $(seq "$REPEAT"); do
      for t in "${targets[@]}"; do
        out="$work/bench-$t-c$c-P$P-$rep.csv"
        log "$t: -c $c -P $P -n $n (run $rep/$REPEAT)"
        # In the background and waited for, so that a signal stops the run at once.
        timeout "$BENCH_TIMEOUT" "$REDIS_BENCHMARK" -h 127.0.0.1 -p "${port[$t]}" \
          -t set,get -n "$n" -c "$c" -P "$P" -r "$KEYSPACE" -d "$DATASIZE" -q --csv \
          >"$out" 2>"$out.err" &
        bench_pid=$!
        brc=0
        wait "$bench_pid" || brc=$?
        bench_pid=""
        if [ "$brc" != 0 ]; then
          log "$t -c $c -P $P: redis-benchmark failed or timed out after ${BENCH_TIMEOUT}s:"
          tail -n 5 "$out.err" >&2 || true
          failed=1
          continue
        fi
        if grep -qi 'error' "$out.err"; then
          log "$t -c $c -P $P: redis-benchmark reported errors:"; grep -i error "$out.err" | head -n 5 >&2
          failed=1
        fi
        # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
        got=""
        while IFS=, read -r test r _avg _min l50 _p95 l99 _max; do
          test=${test//\"/}
          [ "$test" = test ] && continue
          k="$t,$test,$c,$P"
          rps_l[$k]+=" ${r//\"/}"
          p50_l[$k]+=" ${l50//\"/}"
          p99_l[$k]+=" ${l99//\"/}"
          got+=" $test"
        done <"$out"
        for test in GET SET; do
          case "$got " in *" $test "*) ;; *) log "$t -c $c -P $P: no $test result"; failed=1 ;; esac
        done
      done
      # The targets must still be alive after each round.
      for i in "${!pids[@]}"; do
        kill -0 "${pids[i]}" 2>/dev/null || die "${names[i]} died during the benchmark (log: $work/${names[i]}.log)"
      done
    done
  done
done
for k in "${!rps_l[@]}"; do
  rps[$k]=$(median "${rps_l[$k]}")
  p50[$k]=$(median "${p50_l[$k]}")
  p99[$k]=$(median "${p99_l[$k]}")
done

ratio() { # a / b with two decimals, or empty
  if [ -n "$1" ] && [ -n "$2" ]; then
    awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b }'
  fi
}
fmt() { # ops/s without decimals, or n/a
  if [ -n "$1" ]; then awk -v a="$1" 'BEGIN { printf "%.0f", a }'; else echo "n/a"; fi
}

mkdir -p "$RESULTS_DIR"
stamp=$(date +%Y%m%d-%H%M%S)
md="$RESULTS_DIR/compare-$stamp.md"
csv="$RESULTS_DIR/compare-$stamp.csv"
{
  echo "# sidecache compare ($stamp)"
  echo
  echo "redis-server $redis_ver; twemproxy ${nc_ver:-n/a}; sidecache $sc_rev; $(nproc) cores;" \
    "redis-benchmark -r $KEYSPACE -d $DATASIZE, -n $N (P=1) / $N_PIPE (P>1)," \
    "median of $REPEAT run(s); ops/s"
  for m in "${missing_note[@]}"; do echo; echo "Note: $m."; done
  echo
  echo "| test | c | P | direct ops/s | sidecache ops/s | twemproxy ops/s | sidecache/direct | twemproxy/direct | sidecache/twemproxy |"
  echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|"
} >"$md"
echo "test,c,P,direct_rps,sidecache_rps,twemproxy_rps,sidecache_over_direct,twemproxy_over_direct,sidecache_over_twemproxy,direct_p50_ms,sidecache_p50_ms,twemproxy_p50_ms,direct_p99_ms,sidecache_p99_ms,twemproxy_p99_ms" >"$csv"
for test in GET SET; do
  for P in $PIPELINES; do
    for c in $CLIENTS; do
      d=${rps[direct,$test,$c,$P]:-}
      s=${rps[sidecache,$test,$c,$P]:-}
      w=${rps[twemproxy,$test,$c,$P]:-}
      sd=$(ratio "$s" "$d"); wd=$(ratio "$w" "$d"); sw=$(ratio "$s" "$w")
      echo "| $test | $c | $P | $(fmt "$d") | $(fmt "$s") | $(fmt "$w") | ${sd:-n/a} | ${wd:-n/a} | ${sw:-n/a} |" >>"$md"
      echo "$test,$c,$P,$d,$s,$w,$sd,$wd,$sw,${p50[direct,$test,$c,$P]:-},${p50[sidecache,$test,$c,$P]:-},${p50[twemproxy,$test,$c,$P]:-},${p99[direct,$test,$c,$P]:-},${p99[sidecache,$test,$c,$P]:-},${p99[twemproxy,$test,$c,$P]:-}" >>"$csv"
    done
  done
done
cat "$md"
echo
echo "written: $md $csv"
if command -v "${GNUPLOT:-gnuplot}" >/dev/null 2>&1; then # PNGs against clients (bench/plot.sh)
  "$root/bench/plot.sh" "$csv" || log "warning: plotting $csv failed"
else
  log "notice: gnuplot not installed (Debian gnuplot-nox): no plots"
fi
[ "$failed" = 0 ] || die "some runs failed (see above)"
