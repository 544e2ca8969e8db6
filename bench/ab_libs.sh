#!/usr/bin/env bash
# ab_libs.sh: two builds of libltier under one ltier-perf, alternating (A B A B ...), for a
# hot-path change's before/after ratio. Each run dumps its samples (ltier-perf --dump); the
# statistic is the mean of the fastest 99% of a run's samples, in ns. A p50 hides changes
# below the time-stamp counter's step, which is 10 ns on some VMs (an AMD EPYC Zen 1 here);
# the trimmed mean keeps them, and drops the rare stalls that swing a plain mean.
#
# Usage (from the repo root):
#   bench/ab_libs.sh --a DIR --b DIR [--pairs N] [--ops read,send,...] [--sizes 8,...]
#                    [--iters N] [--perf PATH]
#   --a, --b   directories holding libltier.so (e.g. an old worktree's build/api and build-rel/api)
#   --perf     the ltier-perf to run (default build-rel/tools/ltier-perf); LTIER_TRANSPORTS
#              defaults to shm,tcp (set it to measure another transport)
# Prints each pair, then per op and size: A's and B's medians over the pairs (ranges), B/A,
# and in how many pairs B was faster. Latency ops only (not --bw).

set -u -o pipefail

A=
B=
PAIRS=8
OPS=read,send,rpc
SIZES=8
ITERS=200000
PERF=build-rel/tools/ltier-perf

usage() {
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --a) A=${2:?--a needs a directory}; shift 2 ;;
    --b) B=${2:?--b needs a directory}; shift 2 ;;
    --pairs) PAIRS=${2:?--pairs needs a number}; shift 2 ;;
    --ops) OPS=${2:?--ops needs a list}; shift 2 ;;
    --sizes) SIZES=${2:?--sizes needs a list}; shift 2 ;;
    --iters) ITERS=${2:?--iters needs a number}; shift 2 ;;
    --perf) PERF=${2:?--perf needs a path}; shift 2 ;;
    -h | --help) usage ;;
    *) echo "ab_libs.sh: unknown argument $1" >&2; usage ;;
  esac
done

[[ -n "$A" && -n "$B" ]] || usage
for d in "$A" "$B"; do
  [[ -e "$d/libltier.so" ]] || { echo "ab_libs.sh: no libltier.so in $d" >&2; exit 1; }
done
[[ -x "$PERF" ]] || { echo "ab_libs.sh: $PERF is not built" >&2; exit 1; }
[[ "$PAIRS" =~ ^[1-9][0-9]*$ ]] || { echo "ab_libs.sh: --pairs must be a positive number" >&2; exit 2; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
RESULTS="$WORK/results"  # lines: pair side op size value

# The mean of the fastest 99% of the samples in file $1, in ns.
trimmed_mean() {
  sort -g "$1" | awk '{a[NR] = $1} END {
    k = int(NR * 0.99); if (k < 1) k = NR
    for (i = 1; i <= k; i++) s += a[i]
    if (k > 0) printf "%.1f", s / k * 1000
  }'
}

export LTIER_TRANSPORTS=${LTIER_TRANSPORTS:-shm,tcp}
for ((p = 1; p <= PAIRS; p++)); do
  line="pair $p:"
  for side in A B; do
    lib=$A
    [[ $side == B ]] && lib=$B
    rm -f "$WORK"/run.*
    if ! LD_LIBRARY_PATH="$lib" "$PERF" --ops "$OPS" --sizes "$SIZES" --iters "$ITERS" \
      --dump "$WORK/run" > "$WORK/out" 2>&1; then
      echo "ab_libs.sh: ltier-perf failed with $lib:" >&2
      tail -5 "$WORK/out" >&2
      exit 1
    fi
    for f in "$WORK"/run.*; do
      name=${f##*/run.}  # OP.SIZE
      v=$(trimmed_mean "$f")
      echo "$p $side ${name%.*} ${name##*.} $v" >> "$RESULTS"
      line+=" $side ${name}=$v"
    done
  done
  echo "$line"
done

echo
echo "op size | A median (range) | B median (range) | B/A | B faster"
awk '
  { key = $3 " " $4; v[key, $2, $1] = $5; keys[key] = 1; if ($1 > n) n = $1 }
  function median(arr, m,   i, j, t) {
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (arr[j] < arr[i]) { t = arr[i]; arr[i] = arr[j]; arr[j] = t }
    return m % 2 ? arr[(m + 1) / 2] : (arr[m / 2] + arr[m / 2 + 1]) / 2
  }
  END {
    for (k in keys) {
      wins = 0; m = 0
      for (p = 1; p <= n; p++) {
        if (!((k, "A", p) in v) || !((k, "B", p) in v)) continue
        m++; a[m] = v[k, "A", p]; b[m] = v[k, "B", p]
        if (b[m] < a[m]) wins++
      }
      if (m == 0) continue
      amin = a[1]; amax = a[1]; bmin = b[1]; bmax = b[1]
      for (i = 1; i <= m; i++) {
        if (a[i] < amin) amin = a[i]; if (a[i] > amax) amax = a[i]
        if (b[i] < bmin) bmin = b[i]; if (b[i] > bmax) bmax = b[i]
      }
      am = median(a, m); bm = median(b, m)
      printf "%s | %.1f (%.1f-%.1f) | %.1f (%.1f-%.1f) | %.3f | %d of %d\n", k, am, amin, amax, bm, bmin, bmax, bm / am, wins, m
    }
  }' "$RESULTS" | sort
