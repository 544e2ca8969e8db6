#!/usr/bin/env bash
# examples/mapreduce's word count on a generated corpus (1 GB by default), in
# one run, rounds alternating: the single-process reference (wordcount_ref),
# ltier on N local ranks (wordcount under ltier-run; the first round also
# checks its counts against a single-process count), and Dask on a local
# cluster of N worker processes (bench/mapreduce_dask.py, Debian's
# python3-dask and python3-distributed). Medians and ratios at the end.
#
#   bench/mapreduce.sh [--build DIR] [--bytes N] [--ranks N] [--rounds N]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build bytes=1000000000 ranks=3 rounds=3
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --bytes) bytes=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) sed -n '2,10p' "$0" >&2; exit 2 ;;
  esac
done
bin=$build/examples/mapreduce
corpus=$build/bench-data/corpus-$bytes.txt
mkdir -p "$build/bench-data"
[[ -s $corpus ]] || "$bin/gen_corpus" "$corpus" "$bytes"
lscpu | grep -E '^Model name|^CPU\(s\)|^CPU family|^Model:' | tr -s ' '
cat "$corpus" >/dev/null  # page cache warm for everyone
have_dask=1
/usr/bin/python3 -c 'import dask.bag, distributed' 2>/dev/null || {
  have_dask=0
  echo "no Dask here (Debian: apt-get install python3-dask python3-distributed): its rows are left out"
}
ref=() lt=() dk=()
for ((r = 1; r <= rounds; r++)); do
  ref+=("$("$bin/wordcount_ref" "$corpus" | sed -n 's/.*: \([0-9.]*\) s,.*/\1/p')")
  check=()
  ((r == 1)) && check=(--check)
  out=$("$build/tools/ltier-run" -n "$ranks" --timeout 600 -- "$bin/wordcount" "$corpus" "${check[@]}")
  echo "$out" | grep -q "DIFFERS" && { echo "$out"; echo "wordcount: wrong counts" >&2; exit 1; }
  lt+=("$(echo "$out" | sed -n 's/.*distinct: \([0-9.]*\) s (map.*/\1/p')")
  if ((have_dask)); then
    dk+=("$(/usr/bin/python3 "$root/bench/mapreduce_dask.py" "$corpus" --workers "$ranks" 2>/dev/null |
            sed -n 's/.*distinct: \([0-9.]*\) s/\1/p')")
  fi
  echo "round $r: reference ${ref[-1]} s, ltier ${lt[-1]} s${dk:+, dask ${dk[-1]} s}"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
m_ref=$(median "${ref[@]}") m_lt=$(median "${lt[@]}")
echo "median over $rounds rounds, $bytes bytes, $ranks ranks:"
echo "  reference (1 process) $m_ref s; ltier $m_lt s: $(awk "BEGIN {printf \"%.2f\", $m_ref / $m_lt}")x the reference"
if ((have_dask)); then
  m_dk=$(median "${dk[@]}")
  echo "  dask $m_dk s: ltier is $(awk "BEGIN {printf \"%.1f\", $m_dk / $m_lt}")x faster"
fi
