#!/usr/bin/env bash
# examples/pagerank on a generated R-MAT graph (scale 20: 1 M vertices, 16.8 M
# edges by default), in one run, rounds alternating: the single-process
# reference (pagerank_ref), ltier on 2 and on 3 local ranks (pagerank under
# ltier-run; the first round checks the ranks against a single-process run),
# and igraph's PageRank (bench/pagerank_igraph.py, Debian's python3-igraph).
# Times are of the iterations only (after the graph is loaded). Medians and
# ratios at the end.
#
#   bench/pagerank.sh [--build DIR] [--scale N] [--iters K] [--rounds N]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build scale=20 iters=30 rounds=3
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --scale) scale=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) sed -n '2,10p' "$0" >&2; exit 2 ;;
  esac
done
bin=$build/examples/pagerank
graph=$build/bench-data/rmat-$scale.bin
ranks_file=$build/bench-data/rmat-$scale.ranks
mkdir -p "$build/bench-data"
[[ -s $graph ]] || "$bin/gen_graph" "$graph" "$scale"
lscpu | grep -E '^Model name|^CPU\(s\)|^CPU family|^Model:' | tr -s ' '
cat "$graph" >/dev/null
have_igraph=1
/usr/bin/python3 -c 'import igraph, numpy' 2>/dev/null || {
  have_igraph=0
  echo "no python3-igraph here: its rows are left out"
}
ref=() two=() three=() ig=()
for ((r = 1; r <= rounds; r++)); do
  ref+=("$("$bin/pagerank_ref" "$graph" --iters "$iters" --out "$ranks_file" |
          sed -n 's/.*iterations: \([0-9.]*\) s.*/\1/p')")
  check=()
  ((r == 1)) && check=(--check)
  for n in 2 3; do
    out=$("$build/tools/ltier-run" -n "$n" --timeout 900 -- "$bin/pagerank" "$graph" --iters "$iters" "${check[@]}")
    echo "$out" | grep -q "DIFFERS" && { echo "$out"; echo "pagerank: wrong ranks" >&2; exit 1; }
    t=$(echo "$out" | sed -n 's/.*iterations: \([0-9.]*\) s.*/\1/p')
    if ((n == 2)); then two+=("$t"); else three+=("$t"); fi
  done
  if ((have_igraph)); then
    line=$(/usr/bin/python3 "$root/bench/pagerank_igraph.py" "$graph" "$ranks_file")
    ((r == 1)) && echo "$line"
    ig+=("$(echo "$line" | sed -n 's/.*pagerank \([0-9.]*\) s.*/\1/p')")
  fi
  echo "round $r: reference ${ref[-1]} s, ltier 2 ranks ${two[-1]} s, 3 ranks ${three[-1]} s${ig:+, igraph ${ig[-1]} s}"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { awk "BEGIN {printf \"%.2f\", $1 / $2}"; }
m_ref=$(median "${ref[@]}") m2=$(median "${two[@]}") m3=$(median "${three[@]}")
echo "median over $rounds rounds, scale $scale, $iters iterations:"
echo "  reference $m_ref s; ltier 2 ranks $m2 s ($(ratio "$m_ref" "$m2")x faster), 3 ranks $m3 s ($(ratio "$m_ref" "$m3")x)"
if ((have_igraph)); then
  m_ig=$(median "${ig[@]}")
  echo "  igraph (PRPACK) $m_ig s: ltier 2 ranks is $(ratio "$m_ig" "$m2")x faster"
fi
