#!/usr/bin/env bash
# Builds the libFuzzer targets in tests/fuzz/ into build-fuzz/ and runs each
# for FUZZ_SECONDS (default 60) on its seed corpus and regression inputs.
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
LIB_SRC=(protocol/resp.c protocol/cmdtable.c)

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

status=0
declare -A result
mkdir -p "$OUT"
for t in "${targets[@]}"; do
  if [ ! -f "tests/fuzz/$t.c" ]; then
    echo "fuzz: no such target tests/fuzz/$t.c" >&2; status=1; result[$t]="missing"; continue
  fi
  echo "fuzz: building $OUT/$t"
  if ! "$CC" "${CFLAGS[@]}" -o "$OUT/$t" "tests/fuzz/$t.c" "${LIB_SRC[@]}"; then
    echo "fuzz: $t does not build" >&2; status=1; result[$t]="build failed"; continue
  fi
done

for t in "${targets[@]}"; do
  [ -x "$OUT/$t" ] && [ -z "${result[$t]:-}" ] || continue
  work="$OUT/corpus/$t" art="$OUT/artifacts/$t/" log="$OUT/$t.log"
  mkdir -p "$work" "$art"
  dirs=("$work")
  for d in "tests/fuzz/corpus/$t" "tests/fuzz/regressions/$t"; do
    [ -d "$d" ] && dirs+=("$d")
  done
  echo "fuzz: running $t for ${SECONDS_EACH}s (log: $log)"
  # The first directory receives new inputs; the seeds are only read.
  ./"$OUT/$t" -max_len=65536 -max_total_time="$SECONDS_EACH" -timeout=25 \
      -print_final_stats=1 -artifact_prefix="$art" \
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
