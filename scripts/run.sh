#!/usr/bin/env bash
# `make run`: runs sidecache in the foreground. When no upstream is set
# anywhere (UPSTREAM, or `upstream`/`upstream-sentinel` in ARGS' config file
# or directives), a local redis-server is started on a free port for it and
# stopped, its directory removed, when the proxy exits. The proxy replaces
# the script's process: a signal to it (SIGTERM, SIGINT) stops the proxy.
#   make run                                   # local redis, proxy on 6380
#   make run UPSTREAM=redis://10.0.0.5:6379/1  # a real Redis
#   make run ARGS="conf/sidecache.conf --port 7000"
#   make run ARGS="/etc/sidecache/my.conf"      # the file's upstream
set -euo pipefail
bin=$1
args=(${ARGS:-})
redis_pid=""
dir=""
cleanup() {
  if [ -n "$redis_pid" ]; then
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
    redis_pid=""
  fi
  if [ -n "$dir" ]; then rm -rf "$dir"; dir=""; fi
}
trap cleanup EXIT INT TERM
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Whether ARGS name a Redis. The binary says, not a grep (which cannot tell
# --upstream from --upstream-timeout, nor see inside the file): its effective
# config is asked for with a probe upstream put before the file's lines and
# the directives, so the probe is still there only when none of them set one.
# A configuration that does not load counts as naming one: the proxy then
# says what is wrong with it.
args_name_upstream() {
  local probe=redis://run-sh-probe.invalid:1 file=/dev/null rest=("${args[@]}") dump
  if [ ${#rest[@]} -gt 0 ] && [[ ${rest[0]} != -* ]]; then
    file=${rest[0]}
    rest=("${rest[@]:1}")
  fi
  dump=$({ echo "upstream $probe"; cat -- "$file"; } |
         "$bin" - "${rest[@]}" --test-config -v 2>/dev/null) || return 0
  ! grep -qx "upstream $probe" <<<"$dump" || grep -q '^upstream-sentinel ' <<<"$dump"
}

upstream=${UPSTREAM:-}
if [ -z "$upstream" ] && ! args_name_upstream; then
  command -v redis-server >/dev/null || scripts/install-deps.sh test
  port=$(free_port)
  dir=$(mktemp -d)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
    --logfile "$dir/redis.log" --daemonize no &
  redis_pid=$!
  upstream="redis://127.0.0.1:$port"
  # The proxy connects at once: a Redis not listening yet would only cost
  # two warnings (connect refused, tracking backoff), but they look like a fault.
  for _ in $(seq 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    kill -0 "$redis_pid" 2>/dev/null || { cat "$dir/redis.log" >&2; exit 1; }
    sleep 0.05
  done
  echo "run: started redis-server on 127.0.0.1:$port (log $dir/redis.log, removed on exit)" >&2
fi
[ -n "$upstream" ] && args+=(--upstream "$upstream")
if [ -n "$redis_pid" ]; then
  # The proxy takes this shell's place (exec), so that a signal sent to the
  # shell (by make, a supervisor, kill) reaches the proxy, which stops
  # gently; a shell in between would hold it until the proxy exited. A
  # watcher, deaf to the terminal's signals, stops the local redis-server
  # and removes its directory once the proxy is gone.
  trap - EXIT INT TERM
  (
    trap '' INT TERM HUP
    while kill -0 "$$" 2>/dev/null; do sleep 0.2; done
    kill "$redis_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$redis_pid" 2>/dev/null || break; sleep 0.1; done
    rm -rf "$dir"
  ) </dev/null &
fi
exec "$bin" "${args[@]}"
