#!/usr/bin/env bash
# shm_scale.sh: N ltier nodes on this host, every pair of them talking over
# shm, and the shared memory their connections map in total (each
# connection's segment is mapped by its two ends: the host's total is half
# the sum over ranks).
#
#   bench/shm_scale.sh [--build DIR] [-n N] [-- extra env, e.g. LTIER_SHM_RING_BYTES=...]
set -euo pipefail
BUILD=build
N=32
while (($#)); do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    -n) N=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: shm_scale.sh [--build DIR] [-n N] [-- VAR=VALUE...]" >&2; exit 2 ;;
  esac
done
out=$(env "$@" LTIER_TRANSPORTS=shm,tcp "$BUILD/tools/ltier-run" -n "$N" --timeout 300 -- \
  "$BUILD/bench/shm_scale" 2>&1) || { echo "$out" | tail -20 >&2; exit 1; }
echo "$out" | awk -v n="$N" '
  /shm_scale rank=/ {
    for (i = 1; i <= NF; ++i) { split($i, kv, "="); v[kv[1]] = kv[2] }
    mapped += v["conn_mapped_kb"]; resident += v["conn_resident_kb"]; ranks++
    busy += v["traffic_resident_kb"]; settled += v["settled_resident_kb"]
    if (v["conn_mapped_kb"] > max) max = v["conn_mapped_kb"]
  }
  END {
    if (ranks != n) { printf("shm_scale: %d of %d ranks reported\n", ranks, n); exit 1 }
    printf("nodes=%d pairs=%d shm_conn_mapped_MiB=%.1f shm_conn_resident_MiB=%.1f per_node_max_MiB=%.1f after_traffic_resident_MiB=%.1f settled_resident_MiB=%.1f\n",
           n, n * (n - 1) / 2, mapped / 2 / 1024, resident / 2 / 1024, max / 1024, busy / 2 / 1024, settled / 2 / 1024)
  }'
