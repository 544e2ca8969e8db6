#!/usr/bin/env bash
# The verbs batch, run inside the rxe guest by tests/rdma/rxe-guest (one
# boot for all of it): BUILD is the build directory.
set -uo pipefail
BUILD=${1:?usage: in_guest.sh BUILD}
failed=0
# A step that fails names itself, how it ended (a signal, for a crash), the
# tests that failed and, when the binary died inside one, that test and its
# last lines: what a summary of the log keeps.
step() {
  echo "== $*"
  local log rc sig=
  log=$(mktemp)
  "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  if ((rc != 0)); then
    ((rc > 128)) && sig=", signal $(kill -l $((rc - 128)) 2> /dev/null)"
    echo "FAILED: $* (exit $rc$sig)"
    grep -E '^\[  FAILED  \] [^ ]+\.[^ ]+' "$log" | grep -v ' listed below' |
      awk '!seen[$0]++ {print "FAILED:", $0}'
    awk '/^\[ RUN      \]/ {run = $0} /^\[ +(OK|FAILED|SKIPPED) +\]/ {run = ""}
         END {if (run != "") print "FAILED: it ended inside " run}' "$log"
    # A crash's own words (a failed check, a hang guard) are its last lines.
    ((rc > 128)) && tail -n 6 "$log" | sed 's/^/FAILED: | /'
    failed=1
  fi
  rm -f "$log"
}

step "$BUILD/tests/rdma/rdma_verbs_test"
step "$BUILD/tests/rdma/rdma_conformance_test"
# The three-node integration suite with LTIER_TRANSPORTS=rc,tcp and again
# ud,tcp: real ltier-manager and ltier-node processes whose peers meet over
# rc, or over ud; rc's resources and budget; ud through 10% loss.
step env LTIER_ITEST_RC=1 "$BUILD/tests/integration/itest_cluster" --gtest_filter='*rc_tcp*:*ud_tcp*:MixedTransports.*:RcResources.*:RcBudget.*:RcRecovery.*:UdRecovery.*:UdLoss.*'
# ltier-info shows the device, and marks the port and GID ltier picks.
echo "== ltier-info --devices"
out=$("$BUILD/tools/ltier-info" --devices 2>&1)
echo "$out"
grep -q '^rxe0 port 1  <- ltier uses this port' <<< "$out" || { echo "FAILED: no chosen rxe0 port"; failed=1; }
grep -qE 'GID\[ *1\] ::ffff:192\.0\.2\.1 +RoCE v2  <- ltier uses this GID' <<< "$out" ||
  { echo "FAILED: GID 1 not chosen"; failed=1; }
# Soft-RoCE's atomics are atomic only among its own (ltier's rc then does a
# node's own atomics through the device too).
grep -q 'atomics yes, among the device.s own (HCA)' <<< "$out" ||
  { echo "FAILED: rxe0's atomic_cap not shown as HCA"; failed=1; }
# A device that is not there is refused with the key to change.
out=$(LTIER_VERBS_DEVICE=mlx5_9 "$BUILD/tools/ltier-info" --devices 2>&1)
grep -q "verbs.device (LTIER_VERBS_DEVICE) names 'mlx5_9'" <<< "$out" ||
  { echo "FAILED: LTIER_VERBS_DEVICE=mlx5_9 not explained: $out"; failed=1; }
exit $failed
