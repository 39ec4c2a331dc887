#!/usr/bin/env bash
# bench/micro.sh — the proxy's hot loops alone (no network, no Redis), this
# tree against another one, side by side.
#
#   cachepurge  (bench/cachepurge.c, cache/cache.c compiled in) a prewarmed
#               directory of FILES files purged as a batch unlink purges it:
#               the inode keys BATCH at a time (cache_invalidate_keys), then
#               the directory's names whole (cache_invalidate_key). A large
#               cache is out of the CPU caches: these are memory waits.
#   reqparse    (bench/reqparse.c, protocol/resp.c compiled in) framing the
#               transaction JuiceFS's batch unlink writes for BATCH entries
#               (1,004 commands for 250), as the proxy frames requests.
#
# Each program is compiled against both trees; the binaries run alternately,
# REPEAT times, and the table gives each metric's medians and their ratio.
#
# Environment (all optional):
#   FILES          files of the directory (cachepurge)       (100000)
#   BATCH          entries per batch                          (250)
#   REPEAT         runs of each build                         (7)
#   BASELINE_TREE  a checkout to compare with (e.g. made by `git worktree add
#                  /tmp/base <commit>`); without it, this tree alone
#   RESULTS_DIR    where micro-<time>.md goes                 (/tmp)
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_init micro

FILES=${FILES:-100000}
BATCH=${BATCH:-250}
REPEAT=${REPEAT:-7}
positive_ints FILES BATCH REPEAT

# program: the tree's source it measures, and its arguments
declare -A src=([cachepurge]=cache/cache.c [reqparse]=protocol/resp.c)
declare -A args=([cachepurge]="$FILES $BATCH" [reqparse]="$BATCH 2000")
programs=(cachepurge reqparse)

compile() { # PROGRAM TREE OUT
  ${CC:-cc} -std=c11 -O2 -D_GNU_SOURCE -I"$2" -o "$3" "$here/$1.c" "$2/${src[$1]}" ||
    die "cannot compile bench/$1.c against $2/${src[$1]}"
}

targets=(this)
[ -z "${BASELINE_TREE:-}" ] || targets+=(baseline)
for p in "${programs[@]}"; do
  compile "$p" "$root" "$work/$p-this"
  if [ -n "${BASELINE_TREE:-}" ]; then
    [ -f "$BASELINE_TREE/${src[$p]}" ] || die "BASELINE_TREE has no ${src[$p]}: $BASELINE_TREE"
    compile "$p" "$BASELINE_TREE" "$work/$p-baseline"
  fi
done

log "FILES=$FILES BATCH=$BATCH REPEAT=$REPEAT targets: ${targets[*]}"
for ((i = 1; i <= REPEAT; i++)); do
  for p in "${programs[@]}"; do
    for t in "${targets[@]}"; do
      # shellcheck disable=SC2086
      "$work/$p-$t" ${args[$p]} | sed "s/^/$t,$p,/" >>"$work/runs.csv"
    done
  done
done

median() { # TARGET METRIC
  awk -F, -v t="$1" -v m="$2" '$1 == t && $3 == m { print $4 }' "$work/runs.csv" | sort -g |
    awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

out=$RESULTS_DIR/micro-$(date +%Y%m%d-%H%M%S).md
{
  echo "Hot loops alone: $FILES files, batches of $BATCH; median of $REPEAT runs"
  echo
  if [ ${#targets[@]} -eq 2 ]; then
    echo "| program | metric | baseline | this | this/baseline |"
    echo "|---|---|--:|--:|--:|"
  else
    echo "| program | metric | this |"
    echo "|---|---|--:|"
  fi
  awk -F, '$1 == "this" { print $2 "," $3 }' "$work/runs.csv" | awk '!seen[$0]++' |
    while IFS=, read -r p m; do
      n=$(median this "$m")
      if [ ${#targets[@]} -eq 2 ]; then
        b=$(median baseline "$m")
        echo "| $p | $m | $b | $n | $(awk -v n="$n" -v b="$b" 'BEGIN { printf "%.2f", n / b }') |"
      else
        echo "| $p | $m | $n |"
      fi
    done
} | tee "$out"
log "table in $out"
