#!/usr/bin/env bash
# bench/cache_purge.sh — CPU cost of the cache's purges (bench/cachepurge.c),
# this tree against another one, side by side.
#
# A prewarmed directory of FILES files (FILES inode attributes, FILES names in
# d1) is purged as a batch unlink purges it: the inode keys BATCH at a time
# (cache_invalidate_keys), then d1 whole (cache_invalidate_key). Both trees'
# cache/cache.c are compiled into their own cachepurge, and the two binaries
# run alternately REPEAT times; the table gives the medians and their ratio.
# No network and no Redis: only the cache's own memory traffic.
#
# Environment (all optional):
#   FILES          files of the directory                    (100000)
#   BATCH          keys per cache_invalidate_keys call       (250)
#   REPEAT         runs of each build                        (7)
#   BASELINE_TREE  a checkout to compare with (e.g. made by `git worktree add
#                  /tmp/base <commit>`); without it, this tree alone
#   RESULTS_DIR    where cache-purge-<time>.md goes          (/tmp)
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_init cache-purge

FILES=${FILES:-100000}
BATCH=${BATCH:-250}
REPEAT=${REPEAT:-7}
[[ "$FILES" =~ ^[1-9][0-9]*$ ]] || die "FILES must be a positive integer"
[[ "$BATCH" =~ ^[1-9][0-9]*$ ]] || die "BATCH must be a positive integer"
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || die "REPEAT must be a positive integer"

compile() { # TREE OUT: cachepurge against TREE's cache
  ${CC:-cc} -std=c11 -O2 -D_GNU_SOURCE -I"$1" -o "$2" "$here/cachepurge.c" "$1/cache/cache.c" ||
    die "cannot compile bench/cachepurge.c against $1/cache/cache.c"
}

targets=(this)
compile "$root" "$work/cachepurge-this"
if [ -n "${BASELINE_TREE:-}" ]; then
  [ -f "$BASELINE_TREE/cache/cache.c" ] || die "BASELINE_TREE has no cache/cache.c: $BASELINE_TREE"
  compile "$BASELINE_TREE" "$work/cachepurge-baseline"
  targets+=(baseline)
fi

log "FILES=$FILES BATCH=$BATCH REPEAT=$REPEAT targets: ${targets[*]}"
for ((i = 1; i <= REPEAT; i++)); do
  for t in "${targets[@]}"; do
    "$work/cachepurge-$t" "$FILES" "$BATCH" | sed "s/^/$t,/" >>"$work/runs.csv"
  done
done

median() { # TARGET COLUMN
  awk -F, -v t="$1" -v c="$2" '$1 == t { print $c }' "$work/runs.csv" | sort -g |
    awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

out=$RESULTS_DIR/cache-purge-$(date +%Y%m%d-%H%M%S).md
{
  echo "Cache purges, $FILES files, keys $BATCH per call; median of $REPEAT runs (ns)"
  echo
  if [ ${#targets[@]} -eq 2 ]; then
    echo "| purge | baseline | this | this/baseline |"
    echo "|---|--:|--:|--:|"
    for row in "keys (per key):4" "group (per entry):5"; do
      b=$(median baseline "${row##*:}")
      n=$(median this "${row##*:}")
      echo "| ${row%%:*} | $b | $n | $(awk -v n="$n" -v b="$b" 'BEGIN { printf "%.2f", n / b }') |"
    done
  else
    echo "| purge | this |"
    echo "|---|--:|"
    echo "| keys (per key) | $(median this 4) |"
    echo "| group (per entry) | $(median this 5) |"
  fi
} | tee "$out"
log "table in $out"
