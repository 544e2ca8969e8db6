#!/usr/bin/env bash
# compare_rc.sh: ltier over rc and over ud side by side with perftest and ucx_perftest on
# the same Soft-RoCE device, in ONE guest run. Run it inside the guest the test harness boots:
#
#   cd build && ../tests/rdma/rxe-guest --timeout 900 -- bash ../bench/compare_rc.sh [ROUNDS] [ITERS] [MODE]
#
# MODE lat (the default) measures latency as below; bw measures bandwidth instead, each
# round in alternating order: ib_write_bw -s S, ucx_perftest -t put_bw -s S (UCT rc_verbs,
# zcopy) and ltier-perf --ops write --bw --window 16 (LT_write_async, 16 in flight), for
# S = 64 KiB and 1 MiB, all in decimal MB/s (perftest's MB/sec and UCX's MB/s are
# 2^20 bytes a second: converted).
#
# MODE connect measures reaching a new peer instead, ITERS tries a round: bench/rdma_cm_connect
# (a warm process's new rdma_cm connection to a server process started for it, and its first
# SEND and answer; device, PD, CQ and buffer already made on both sides) against ltier-perf
# --new-peer (a warm engine's first LT_RPC to a node that just joined, its rc connection
# included), microseconds, p50 of each round's tries.
#
# Every round runs, 8-byte messages, in an order that alternates between rounds:
#   perftest      ib_read_lat, ib_write_lat, ib_atomic_lat, ib_send_lat, and ib_send_lat
#                 -c UD (send_ud) (half round trip); with them bench/rc_imm_lat (raw
#                 verbs, half round trip): a WRITE_WITH_IMM ping-pong, the floor of
#                 ltier's ring RPC, and a SEND one to check it against ib_send_lat
#   ucx_perftest  UCT level over rc_verbs on rxe0:1 (-x rc_verbs -d rxe0:1): put_lat and
#                 am_lat (half round trip), get and fadd (round trip). UCP level
#                 (tag_lat) needs ud_verbs for its wire-up, whose endpoints time out under
#                 TCG emulation, so the UCT tests stand in for it.
#                 (UCT's ud_verbs aborts in the guest, so ud has no UCX peer here.)
#   ltier-perf    read, write, fetch_add, rpc, send (round trips), LTIER_TRANSPORTS=rc,tcp,
#                 and again with LTIER_TRANSPORTS=ud,tcp (points ud:read, ...)
# and prints one line per point, then the median of each point across rounds. Soft-RoCE
# under TCG emulation measures software cost, not wire speed: compare within a run only.
set -u -o pipefail

ROUNDS=${1:-3}
ITERS=${2:-1000}
MODE=${3:-lat}
BUILD=${BUILD:-$(pwd)}
PERF=$BUILD/tools/ltier-perf
IP=${RXE_IP:-192.0.2.1}
RAW=$(mktemp -d)
trap 'rm -rf "$RAW"' EXIT

# perftest: the "t_typical" column of the result line (microseconds, half round trip).
run_perftest() {
  local t=$1 mode=() name="ib_${1}_lat"
  [[ $t == send_ud ]] && t=send && mode=(-c UD) && name=ib_send_lat_ud
  "ib_${t}_lat" -d rxe0 -x 1 -s 8 -n "$ITERS" "${mode[@]}" >/dev/null 2>&1 &
  sleep 1
  local v
  v=$(timeout 120 "ib_${t}_lat" -d rxe0 -x 1 -s 8 -n "$ITERS" "${mode[@]}" "$IP" 2>&1 |
    awk '$1 == 8 && NF >= 5 { print $5 }' | tail -1)
  wait
  echo "perftest $name ${v:-NA}"
}

# rc_imm_lat (bench/): the raw-verbs ping-pong of LITE's RPC (write_imm) and of
# ib_send_lat (send), one RC QP a side: its median round trip, halved.
run_raw() {
  local op=$1
  timeout 120 "$BUILD/bench/rc_imm_lat" --op "$op" --iters "$ITERS" >/dev/null 2>&1 &
  local v
  v=$(timeout 120 "$BUILD/bench/rc_imm_lat" --op "$op" --iters "$ITERS" "$IP" 2>&1 |
    awk '/^lat / { split($5, p, "="); printf "%.2f\n", p[2] / 2 }')
  wait
  echo "raw ${op}_lat ${v:-NA}"
}

# ucx_perftest: the typical latency (usec) of its final line.
run_ucx() {
  local t=$1 extra=()
  [[ $t == get ]] && extra=(-D bcopy)  # rc_verbs has no short get
  timeout 120 ucx_perftest -p 13337 >/dev/null 2>&1 &
  sleep 1
  local v
  v=$(timeout 120 ucx_perftest "$IP" -p 13337 -x rc_verbs -d rxe0:1 -t "$t" "${extra[@]}" -s 8 -n "$ITERS" 2>&1 |
    awk '/^ *Final:/ { print $3 }' | tail -1)
  wait
  echo "ucx_perftest $t ${v:-NA}"
}

run_ltier() {
  local tp=$1 prefix=$2
  LTIER_TRANSPORTS=$tp timeout 300 "$PERF" --ops read,write,fetch_add,rpc,send --sizes 8 \
    --iters "$ITERS" --warmup $((ITERS / 5)) 2>&1 |
    awk -v pre="$prefix" '/^lat / { split($2, o, "="); split($5, p, "="); print "ltier-perf " pre o[2], p[2] }'
}

# Bandwidth of S-byte writes, decimal MB/s. ib_write_bw's "BW average" column is
# MiB/s; UCX's Final line has its average bandwidth (MiB/s) in the sixth field.
run_perftest_bw() {
  local size=$1
  ib_write_bw -d rxe0 -x 1 -s "$size" -n "$ITERS" >/dev/null 2>&1 &
  sleep 1
  local v
  v=$(timeout 300 ib_write_bw -d rxe0 -x 1 -s "$size" -n "$ITERS" "$IP" 2>&1 |
    awk -v s="$size" '$1 == s && NF >= 4 && $4 + 0 > 0 { printf "%.1f\n", $4 * 1.048576 }' | tail -1)
  wait
  echo "perftest write_bw:$size ${v:-NA}"
}

run_ucx_bw() {
  local size=$1
  timeout 300 ucx_perftest -p 13337 >/dev/null 2>&1 &
  sleep 1
  local v
  v=$(timeout 300 ucx_perftest "$IP" -p 13337 -x rc_verbs -d rxe0:1 -t put_bw -D zcopy -s "$size" \
    -n "$ITERS" 2>&1 | awk '/^ *Final:/ && $6 + 0 > 0 { printf "%.1f\n", $6 * 1.048576 }' | tail -1)
  wait
  echo "ucx_perftest put_bw:$size ${v:-NA}"
}

run_ltier_bw() {
  LTIER_TRANSPORTS=rc,tcp timeout 300 "$PERF" --ops write --bw --window 16 --sizes 65536,1048576 \
    --iters "$ITERS" 2>&1 |
    awk '/^bw / { split($2, o, "="); split($3, z, "="); split($5, m, "=");
                  print "ltier-perf " o[2] "_bw:" z[2], m[2] }'
}

# connect mode: ITERS connections of a warm process, p50 in microseconds.
run_cm_connect() {
  local v
  v=$(timeout 600 "$BUILD/bench/rdma_cm_connect" --tries "$ITERS" "$IP" 2>&1 |
    awk '/^connect / { split($5, p, "="); print p[2] }')
  echo "raw cm_connect ${v:-NA}"
}

run_ltier_new_peer() {
  local v
  v=$(LTIER_TRANSPORTS=rc,tcp timeout 600 "$PERF" --ops rpc --sizes 8 --iters 100 --new-peer \
    --join-tries "$ITERS" 2>&1 | awk '/^newpeer / { split($4, p, "="); print p[2] }')
  echo "ltier-perf newpeer_rpc ${v:-NA}"
}

have_ucx=1
command -v ucx_perftest >/dev/null || have_ucx=0
for ((r = 1; r <= ROUNDS; r++)); do
  order=(perftest ucx ltier)
  ((r % 2 == 0)) && order=(ltier ucx perftest)
  for tool in "${order[@]}"; do
    case $MODE:$tool in
      lat:perftest)
        for t in read write atomic send send_ud; do run_perftest $t; done
        [[ -x $BUILD/bench/rc_imm_lat ]] && for t in write_imm send; do run_raw $t; done
        ;;
      lat:ucx) ((have_ucx)) && for t in put_lat am_lat get fadd; do run_ucx $t; done ;;
      lat:ltier) run_ltier rc,tcp "" && run_ltier ud,tcp ud: ;;
      bw:perftest) for s in 65536 1048576; do run_perftest_bw $s; done ;;
      bw:ucx) ((have_ucx)) && for s in 65536 1048576; do run_ucx_bw $s; done ;;
      bw:ltier) run_ltier_bw ;;
      connect:perftest) [[ -x $BUILD/bench/rdma_cm_connect ]] && run_cm_connect ;;
      connect:ltier) run_ltier_new_peer ;;
    esac
  done | tee -a "$RAW/all" | sed "s/^/round $r: /"
done

if [[ $MODE == bw ]]; then
  echo "== medians over $ROUNDS rounds, decimal MB/s (point: op_bw:size)"
elif [[ $MODE == connect ]]; then
  echo "== medians over $ROUNDS rounds of the p50 of $ITERS new peers each, microseconds"
else
  echo "== medians over $ROUNDS rounds, $ITERS iterations, 8 B, microseconds"
  echo "   (perftest, raw, put_lat, am_lat: half round trip; get, fadd, ltier-perf: round trip)"
fi
awk '{ k = $1 " " $2; v[k] = v[k] " " $3 } END { for (k in v) print k, v[k] }' "$RAW/all" |
  sort | while read -r tool point vals; do
    med=$(tr ' ' '\n' <<<"$vals" | grep -v '^$' | grep -v NA | sort -g |
      awk '{ a[NR] = $1 } END { if (NR == 0) print "NA"; else if (NR % 2) print a[(NR + 1) / 2];
                               else printf "%.2f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
    printf '%-13s %-14s %s\n' "$tool" "$point" "$med"
  done
