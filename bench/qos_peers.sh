#!/bin/bash
# qos_peers.sh: bench/qos_isolation --mode peers with its two server nodes
# in network namespaces behind veth pairs on a bridge, and the link to the
# first (the node the latency tenant calls) limited by a token bucket
# filter: congestion there is congestion at that peer, not at this host, so
# the scheduler should throttle bulk towards it alone and leave the bulk
# stream to the other node alone. Needs root (ip netns, tc).
#
#   bench/qos_peers.sh [--build DIR] [--rate RATE] [--rounds N] [--seconds S]
#                      [--target-rtt auto|DURATION]
#
# RATE is tc's (default 2gbit). Prints qos_isolation's lines, prefixed by
# the round. Transport: tcp, so every byte to a server crosses its link
# (the namespaces share this host's memory, and shm would go around it).
set -u -o pipefail
BUILD=build RATE=2gbit ROUNDS=1 SECONDS_=2 TARGET=auto
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) BUILD=$2 ;;
    --rate) RATE=$2 ;;
    --rounds) ROUNDS=$2 ;;
    --seconds) SECONDS_=$2 ;;
    --target-rtt) TARGET=$2 ;;
    *) echo "qos_peers.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
BENCH=$BUILD/bench/qos_isolation
[[ -x $BENCH ]] || { echo "qos_peers.sh: no $BENCH (build first)" >&2; exit 2; }
TAG=$$
BR=ltqbr$TAG NET=10.214.$((TAG % 200)).
NS=("ltq$TAG-a" "ltq$TAG-b")
cleanup() {
  for ns in "${NS[@]}"; do ip netns del "$ns" 2>/dev/null; done
  ip link del "$BR" 2>/dev/null
}
trap cleanup EXIT
set -e
ip link add "$BR" type bridge
ip addr add "${NET}254/24" dev "$BR"
ip link set "$BR" up
for i in 0 1; do
  a=lq${TAG}a$i b=lq${TAG}b$i
  ip netns add "${NS[$i]}"
  ip link add "$a" type veth peer name "$b"
  ip link set "$b" netns "${NS[$i]}"
  ip link set "$a" master "$BR" up
  ip netns exec "${NS[$i]}" ip addr add "${NET}$((i + 1))/24" dev "$b"
  ip netns exec "${NS[$i]}" ip link set "$b" up
  ip netns exec "${NS[$i]}" ip link set lo up
done
# Towards the first server only: the bridge's port into its namespace.
tc qdisc add dev "lq${TAG}a0" root tbf rate "$RATE" burst 256kb latency 4ms
set +e
for r in $(seq 1 "$ROUNDS"); do
  LTIER_TRANSPORTS=tcp "$BENCH" --mode peers --seconds "$SECONDS_" --target-rtt "$TARGET" \
    --host-ip "${NET}254" \
    --netns "${NS[0]}@${NET}1,${NS[1]}@${NET}2" | sed "s/^/round=$r /"
done
