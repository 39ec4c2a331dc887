#!/usr/bin/env bash
# bench/plot.sh CSV... — PNGs of throughput and p99 latency against clients,
# one line per target, from the CSVs the bench scripts write.
#
# For X.csv it writes X-ops.png (ops/s) and X-p99.png (p99 µs, log scale),
# each with one panel per group of rows (compare: test and pipeline depth;
# hits: pipeline depth; latency: mix and added latency; uniform: key count).
# A CSV of another kind is skipped with a notice. Needs gnuplot (Debian
# gnuplot-nox); GNUPLOT names another binary.
set -euo pipefail
GNUPLOT=${GNUPLOT:-gnuplot}
command -v "$GNUPLOT" >/dev/null 2>&1 || { echo "plot: $GNUPLOT not found (Debian gnuplot-nox)" >&2; exit 1; }
[ $# -gt 0 ] || { echo "usage: bench/plot.sh CSV..." >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sidecache-plot.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# long CSV: one line "panel<TAB>series<TAB>clients<TAB>ops<TAB>p99_us" per
# target and row, from the scenario's own columns
to_long() {
  local header
  header=$(head -n 1 "$1")
  case "$header" in
    test,c,P,direct_rps,*) # compare.sh (latencies in ms)
      awk -F, 'NR > 1 && NF > 1 { split("direct sidecache twemproxy", t, " ")
        for (i = 1; i <= 3; i++) printf "%s P=%s\t%s\t%s\t%s\t%s\n", $1, $3, t[i], $2, $(3 + i), ($(12 + i) == "" ? "" : $(12 + i) * 1000) }' "$1" ;;
    c,P,requests,direct_rps,*) # hits.sh: the memory section follows a blank line
      awk -F, 'NR > 1 && NF == 0 { exit } NR > 1 { split("direct sidecache twemproxy", t, " ")
        for (i = 1; i <= 3; i++) printf "GET hits P=%s\t%s\t%s\t%s\t%s\n", $2, t[i], $1, $(3 + i), ($(11 + i) == "" ? "" : $(11 + i) * 1000) }' "$1" ;;
    mix,latency_us,toxic_us,rtt_p50_us,clients,*) # latency.sh
      awk -F, 'NR > 1 { printf "%s %s µs\tdirect\t%s\t%s\t%s\n", $1, $2, $5, $6, $13
        printf "%s %s µs\tsidecache\t%s\t%s\t%s\n", $1, $2, $5, $7, $14 }' "$1" ;;
    keys,clients,target,*) # uniform.sh
      awk -F, 'NR > 1 { printf "uniform GET, %s keys\t%s\t%s\t%s\t%s\n", $1, $3, $2, $5, $7 }' "$1" ;;
    *) return 1 ;;
  esac
}

plot_one() {
  local csv=$1 base=${1%.csv} long=$tmp/long.tsv panels n cols rows metric ylabel col logy i p s f
  if ! to_long "$csv" >"$long"; then
    echo "plot: $csv: not a CSV of compare, hits, latency or uniform; skipped" >&2
    return 0
  fi
  mapfile -t panels < <(cut -f1 "$long" | awk '!seen[$0]++')
  n=${#panels[@]}
  [ "$n" -gt 0 ] || { echo "plot: $csv: no rows" >&2; return 0; }
  cols=$(( n < 3 ? n : 3 ))
  rows=$(( (n + cols - 1) / cols ))
  for metric in ops p99; do
    if [ "$metric" = ops ]; then col=4; ylabel="ops/s"; logy=""; else col=5; ylabel="p99 µs"; logy="set logscale y"; fi
    {
      echo "set terminal pngcairo size $((420 * cols)),$((330 * rows)) font 'sans,9'"
      echo "set output '$base-$metric.png'"
      echo "set multiplot layout $rows,$cols title '$(basename "$base") — $ylabel against clients'"
      echo "set logscale x 2; set xlabel 'clients'; set ylabel '$ylabel'; set grid; set key top left"
      echo "set yrange [0:*]"
      [ -n "$logy" ] && echo "$logy; set yrange [*:*]"
      for i in "${!panels[@]}"; do
        p=${panels[i]}
        echo "set title '${p//\'/}'"
        local plots=()
        while IFS= read -r s; do
          f=$tmp/d-$i-$metric-${s//[^a-zA-Z0-9]/_}.dat
          awk -F'\t' -v p="$p" -v s="$s" -v c="$col" '$1 == p && $2 == s && $c != "" && $c != "n/a" { print $3, $c }' \
            "$long" | sort -n >"$f"
          [ -s "$f" ] && plots+=("'$f' using 1:2 with linespoints title '$s'")
        done < <(awk -F'\t' -v p="$p" '$1 == p { print $2 }' "$long" | awk '!seen[$0]++')
        if [ ${#plots[@]} -gt 0 ]; then
          (IFS=,; echo "plot ${plots[*]}")
        else
          echo "set label 1 'no data' at graph 0.5,0.5 center; plot NaN notitle; unset label 1"
        fi
      done
      echo "unset multiplot"
    } >"$tmp/plot.gp"
    "$GNUPLOT" "$tmp/plot.gp" 2>"$tmp/gnuplot.err" || { cat "$tmp/gnuplot.err" >&2; return 1; }
    echo "plot: wrote $base-$metric.png"
  done
}

rc=0
for csv in "$@"; do plot_one "$csv" || rc=1; done
exit "$rc"
