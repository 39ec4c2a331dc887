#!/usr/bin/env bash
# `make run`: runs sidecache in the foreground. Without UPSTREAM (and without
# an upstream in ARGS), a local redis-server is started on a free port for it
# and stopped when the proxy exits.
#   make run                                   # local redis, proxy on 6380
#   make run UPSTREAM=redis://10.0.0.5:6379/1  # a real Redis
#   make run ARGS="conf/sidecache.conf --port 7000"
set -euo pipefail
bin=$1
args=(${ARGS:-})
redis_pid=""
cleanup() { [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null || true; }
trap cleanup EXIT INT TERM
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

upstream=${UPSTREAM:-}
if [ -z "$upstream" ] && ! printf '%s\n' "${args[@]}" | grep -q -- '--upstream'; then
  command -v redis-server >/dev/null || scripts/install-deps.sh test
  port=$(free_port)
  dir=$(mktemp -d)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
    --logfile "$dir/redis.log" --daemonize no &
  redis_pid=$!
  upstream="redis://127.0.0.1:$port"
  echo "run: started redis-server on 127.0.0.1:$port (log $dir/redis.log)" >&2
fi
[ -n "$upstream" ] && args+=(--upstream "$upstream")
"$bin" "${args[@]}"
