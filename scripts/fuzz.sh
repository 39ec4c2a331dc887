#!/usr/bin/env bash
# Builds the libFuzzer targets in tests/fuzz/ into build-fuzz/ and runs each
# for FUZZ_SECONDS (default 60) on its seed corpus and regression inputs.
# fuzz_session (the whole proxy against a fake Redis) also needs the build
# dependencies (libevent, OpenSSL: make deps).
#   scripts/fuzz.sh                 every target
#   scripts/fuzz.sh fuzz_req ...    only these
#   FUZZ_SECONDS=300 FUZZ_JOBS=2 scripts/fuzz.sh
# Needs clang with libFuzzer (Debian 12: clang libclang-rt-14-dev).
# Prints executions and executions/s per target from libFuzzer's final stats;
# exits non-zero if any target fails to build or finds a crash, leak,
# timeout or invariant failure (the input is left in build-fuzz/artifacts/).
# New inputs libFuzzer finds go to build-fuzz/corpus/<target>/, never into
# the seed corpus kept in git.
set -u
cd "$(dirname "$0")/.."

CC=${FUZZ_CC:-clang}
SECONDS_EACH=${FUZZ_SECONDS:-60}
JOBS=${FUZZ_JOBS:-1}
OUT=build-fuzz
CFLAGS=(-g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
        -fno-sanitize-recover=undefined -std=c11 -D_GNU_SOURCE
        -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -I.)
LIB_SRC=(protocol/resp.c protocol/cmdtable.c protocol/cluster.c)
# fuzz_session runs the whole proxy in process: every library source (as
# the Makefile's libsidecache.a, without main.c) and its libraries. They
# are compiled into $OUT/obj/ first, with warnings not fatal there (the
# Makefile's build holds them to -Werror); the target itself keeps -Werror.
PROXY_SRC=($(ls protocol/*.c cache/*.c invalidation/*.c proxy/*.c | grep -v '^proxy/main\.c$'))
PROXY_LIBS=(-levent_openssl -levent -lssl -lcrypto -lm)

if ! command -v "$CC" >/dev/null 2>&1; then
  echo "fuzz: $CC not found (Debian: apt-get install clang libclang-rt-14-dev)" >&2
  exit 2
fi

if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for f in tests/fuzz/fuzz_*.c; do
    t=${f##*/}; targets+=("${t%.c}")
  done
fi

# A libFuzzer dictionary per target, generated into build-fuzz/: RESP
# tokens, and for the command table every command name Redis 7.0 reports
# plus the option words the classifier looks for.
make_dict() {
  local t=$1 d="$OUT/$1.dict"
  case $t in
    fuzz_req)
      printf '%s\n' '"\x0d\x0a"' '"*1\x0d\x0a"' '"*-1\x0d\x0a"' '"$0\x0d\x0a\x0d\x0a"' \
        '"$"' '"\x22"' "\"'\"" '"\\x4"' '"\x00"' '"16384"' '"1048576"' >"$d" ;;
    fuzz_reply)
      printf '%s\n' '"\x0d\x0a"' '"*1\x0d\x0a"' '"*-1\x0d\x0a"' '"$-1\x0d\x0a"' '"_\x0d\x0a"' \
        '"%1\x0d\x0a"' '"|1\x0d\x0a"' '">2\x0d\x0a"' '"~1\x0d\x0a"' '"#t\x0d\x0a"' \
        '",inf\x0d\x0a"' '",1.5e-3\x0d\x0a"' '"(12345678901234567890\x0d\x0a"' \
        '"=8\x0d\x0atxt:abcd\x0d\x0a"' '"!3\x0d\x0aERR\x0d\x0a"' '"$?"' '"*?"' >"$d" ;;
    fuzz_cluster)
      printf '%s\n' '"\x0d\x0a"' '"*1\x0d\x0a"' '"*3\x0d\x0a"' '"*4\x0d\x0a"' '":0\x0d\x0a"' \
        '":16383\x0d\x0a"' '"$8\x0d\x0a10.0.0.2\x0d\x0a"' '"$0\x0d\x0a\x0d\x0a"' '":7000\x0d\x0a"' \
        '"%1\x0d\x0a"' '"*0\x0d\x0a"' '"$-1\x0d\x0a"' '"{1}"' '"{"' '"}"' >"$d" ;;
    fuzz_cmdtable_load)
      printf '%s\n' '"*10\x0d\x0a"' '"*6\x0d\x0a"' '"+write\x0d\x0a"' '"+readonly\x0d\x0a"' \
        '"+movablekeys\x0d\x0a"' '":-1\x0d\x0a"' '":1\x0d\x0a"' '"*0\x0d\x0a"' '"~1\x0d\x0a"' \
        '"_\x0d\x0a"' '"*-1\x0d\x0a"' '"$3\x0d\x0aset\x0d\x0a"' '"$4\x0d\x0asort\x0d\x0a"' \
        '"$4\x0d\x0aeval\x0d\x0a"' '"$7\x0d\x0amigrate\x0d\x0a"' '"$10\x0d\x0aconfig|set\x0d\x0a"' >"$d" ;;
    fuzz_cmdtable_writes)
      { tr -d '\r' <tests/unit/data/command-7.0.resp |
          awk 'prev ~ /^\*(10|12)$/ && $0 ~ /^\$/ {getline name; print name} {prev=$0}' | sort -u
        printf '%s\n' store storedist keys copy replace auth auth2 streams group count block noack \
          left right min max '|' 0123456789abcdef0123456789abcdef01234567
      } | sed 's/.*/"&"/' >"$d" ;;
    fuzz_session)
      { printf '%s\n' '"\x0d\x0a"' '"*1\x0d\x0a"' '"*2\x0d\x0a"' '"*3\x0d\x0a"' '"$1\x0d\x0a"' '"$2\x0d\x0a"' \
        '"$3\x0d\x0a"' '"$4\x0d\x0a"' '"$5\x0d\x0a"' '"$-1\x0d\x0a"' '"*-1\x0d\x0a"'
      printf '"%s"\n' GET SET MGET MSET HGET HSET HDEL DEL INCR EXPIRE MULTI EXEC DISCARD WATCH UNWATCH \
        SUBSCRIBE UNSUBSCRIBE PSUBSCRIBE PUBLISH MONITOR HELLO AUTH SELECT PING ECHO QUIT RESET \
        CLIENT SETNAME GETNAME SETINFO TRACKING REPLY CACHING OPTIN ON OFF SKIP REDIRECT BCAST \
        BLPOP BRPOP XREAD BLOCK INFO SCRIPT LOAD FLUSH EVAL EVALSHA FLUSHALL FLUSHDB SWAPDB \
        READONLY WAIT COMMAND SORT STORE default pw alice secret i1 i2 d1 name \
        __redis__:invalidate 8526c64984678fc27f67f44755c8ba7dcdf7ea60
      } >"$d" ;;
    *) return 1 ;;
  esac
}

status=0
declare -A result
mkdir -p "$OUT"
for t in "${targets[@]}"; do
  if [ ! -f "tests/fuzz/$t.c" ]; then
    echo "fuzz: no such target tests/fuzz/$t.c" >&2; status=1; result[$t]="missing"; continue
  fi
  echo "fuzz: building $OUT/$t"
  if [ "$t" = fuzz_session ]; then
    objs=() ok=1
    for src in "${PROXY_SRC[@]}"; do
      o="$OUT/obj/${src%.c}.o"
      mkdir -p "$(dirname "$o")"
      "$CC" "${CFLAGS[@]}" -Wno-error -c -o "$o" "$src" || { ok=0; break; }
      objs+=("$o")
    done
    if [ $ok = 1 ] && "$CC" "${CFLAGS[@]}" -o "$OUT/$t" "tests/fuzz/$t.c" "${objs[@]}" "${PROXY_LIBS[@]}"; then
      continue
    fi
    echo "fuzz: $t does not build" >&2; status=1; result[$t]="build failed"; continue
  fi
  if ! "$CC" "${CFLAGS[@]}" -o "$OUT/$t" "tests/fuzz/$t.c" "${LIB_SRC[@]}"; then
    echo "fuzz: $t does not build" >&2; status=1; result[$t]="build failed"; continue
  fi
done

for t in "${targets[@]}"; do
  [ -x "$OUT/$t" ] && [ -z "${result[$t]:-}" ] || continue
  work="$OUT/corpus/$t" art="$OUT/artifacts/$t/" log="$OUT/$t.log"
  mkdir -p "$work" "$art"
  dict=()
  make_dict "$t" && dict=(-dict="$OUT/$t.dict")
  dirs=("$work")
  for d in "tests/fuzz/corpus/$t" "tests/fuzz/regressions/$t"; do
    [ -d "$d" ] && dirs+=("$d")
  done
  echo "fuzz: running $t for ${SECONDS_EACH}s (log: $log)"
  # The first directory receives new inputs; the seeds are only read.
  # -malloc_limit_mb: no single allocation may come near 32 MB from a
  # 64 KB input (resp.h: nothing is sized from a declared length or count).
  ./"$OUT/$t" -max_len=65536 -max_total_time="$SECONDS_EACH" -timeout=25 \
      -malloc_limit_mb=32 -print_final_stats=1 -artifact_prefix="$art" "${dict[@]}" \
      $( [ "$JOBS" -gt 1 ] && echo "-fork=$JOBS -ignore_crashes=0" ) \
      "${dirs[@]}" >"$log" 2>&1
  rc=$?
  runs=$(awk '/stat::number_of_executed_units:/ {print $2}' "$log" | tail -1)
  rate=$(awk '/stat::average_exec_per_sec:/ {print $2}' "$log" | tail -1)
  if [ -z "$runs" ]; then # -fork mode prints no final stats: use the last status line
    runs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
    rate=$(grep -oE 'exec/s: [0-9]+' "$log" | tail -1 | awk '{print $2}')
  fi
  if [ $rc -ne 0 ]; then
    status=1
    result[$t]="FAILED (exit $rc) after ${runs:-?} runs; see $log and $art"
    grep -E 'ERROR: |invariant failed|SUMMARY:|Test unit written' "$log" | head -5 | sed 's/^/  /'
  else
    result[$t]="ok: ${runs:-?} runs, ${rate:-?} exec/s"
  fi
done

echo "fuzz: summary (${SECONDS_EACH}s each)"
for t in "${targets[@]}"; do
  printf '  %-24s %s\n' "$t" "${result[$t]:-not run}"
done
exit $status
