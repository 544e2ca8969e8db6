#!/usr/bin/env bash
# compare.sh: measure ltier side by side with its peers in ONE run and write docs/PERF.md.
#
# Peers, all over loopback TCP on this machine:
#   tcp    $BUILD/bench/tcp_pingpong            plain blocking sockets (the floor), plus its
#                                               --busy-poll variant (floor without wake-ups)
#          $BUILD/bench/tcp_connect             connections made as ltier's are: to a fresh
#                                               server after an idle gap, from a fresh process
#   ltier  $BUILD/tools/ltier-perf              ltier's own measuring tool, LTIER_TRANSPORTS=tcp
#   ucx    ucx_perftest, UCX_TLS=tcp UCX_NET_DEVICES=lo
# Rounds alternate the order (tcp ltier ucx, then ucx ltier tcp, ...) so slow drift of the
# machine hits every tool alike; the report gives medians across rounds and ltier/peer ratios.
# Then a hog phase repeats the 8-byte latency points with a busy loop pinned to one core.
#
# Usage (from the repo root):
#   bench/compare.sh [--build DIR] [--rounds N] [--out FILE] [--sizes a,b,c] [--iters N]
#                    [--no-hog] [--hog-iters N] [--raw DIR] [--report RAWDIR]
# --raw keeps the raw output in DIR; --report RAWDIR only re-renders a kept run.
# Only the block between the compare.sh markers in the output file is replaced; hand-written
# text around it is kept.

set -u -o pipefail

BUILD=build
ROUNDS=3
OUT=docs/PERF.md
SIZES=8,4096,65536,1048576
ITERS=10000
HOG=1
HOG_ITERS=2000
RAW_KEEP=
REPORT_ONLY=
# Exact command line, for the report.
CMDLINE=$(printf '%q ' "$0" "$@")
CMDLINE=${CMDLINE% }

usage() {
  sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=${2:?--build needs a directory}; shift 2 ;;
    --rounds) ROUNDS=${2:?--rounds needs a number}; shift 2 ;;
    --out) OUT=${2:?--out needs a file}; shift 2 ;;
    --sizes) SIZES=${2:?--sizes needs a list}; shift 2 ;;
    --iters) ITERS=${2:?--iters needs a number}; shift 2 ;;
    --hog-iters) HOG_ITERS=${2:?--hog-iters needs a number}; shift 2 ;;
    --no-hog) HOG=0; shift ;;
    --raw) RAW_KEEP=${2:?--raw needs a directory}; shift 2 ;;
    --report) REPORT_ONLY=${2:?--report needs a raw directory}; shift 2 ;;
    -h|--help) usage ;;
    *) echo "compare.sh: unknown argument: $1" >&2; usage ;;
  esac
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: bad --rounds: $ROUNDS" >&2; exit 2; }
[[ $ITERS =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: bad --iters: $ITERS" >&2; exit 2; }
[[ $HOG_ITERS =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: bad --hog-iters" >&2; exit 2; }
[[ $SIZES =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || { echo "compare.sh: bad --sizes" >&2; exit 2; }
IFS=, read -r -a SIZE_LIST <<<"$SIZES"

# Paths are taken relative to where the script is started (normally the repo root).
abspath() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s/%s\n' "$PWD" "$1" ;; esac; }
BUILD=$(abspath "$BUILD")
OUT=$(abspath "$OUT")
TCP_BIN=$BUILD/bench/tcp_pingpong
CONNECT_BIN=$BUILD/bench/tcp_connect
LTIER_BIN=$BUILD/tools/ltier-perf
UCX_BIN=$(command -v ucx_perftest || true)

if [[ -n $RAW_KEEP ]]; then
  RAW=$(abspath "$RAW_KEEP")
  mkdir -p "$RAW"
else
  RAW=$(mktemp -d /tmp/ltier-compare.XXXXXX)
fi
NOTES=$RAW/notes.txt
: >"$NOTES"

# Background processes this script started; only these are ever killed.
BG_PIDS=()
cleanup() {
  local p
  for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${BG_PIDS[@]}"; do wait "$p" 2>/dev/null; done
  [[ -z $RAW_KEEP ]] && rm -rf "$RAW"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# forget_pid PID: drop a reaped process from BG_PIDS (exact match, not a substring).
forget_pid() {
  local p keep=()
  for p in "${BG_PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
  BG_PIDS=("${keep[@]}")
}

log() { echo "compare.sh: $*" >&2; }
note() { log "$*"; echo "$*" >>"$NOTES"; }
loud() {
  echo "************************************************************************" >&2
  echo "compare.sh: WARNING: $*" >&2
  echo "************************************************************************" >&2
  echo "WARNING: $*" >>"$NOTES"
}

[[ -x $TCP_BIN ]] || loud "$TCP_BIN not found: the plain-TCP floor will be missing (build bench/)"
[[ -x $LTIER_BIN ]] || loud "$LTIER_BIN not found: every ltier column will be n/a"
[[ -n $UCX_BIN ]] || loud "ucx_perftest not found (apt-get install ucx-utils): UCX columns n/a"
command -v python3 >/dev/null || { echo "compare.sh: python3 is required" >&2; exit 1; }

# Same iteration scaling as tcp_pingpong, so every tool takes about as many samples.
lat_iters() {
  local size=$1 base=$2 n
  if ((size <= 4096)); then echo "$base"; return; fi
  n=$((base * 4096 / size))
  ((n < 200)) && n=200
  ((n > base)) && n=$base
  echo "$n"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

load_now() { uptime | sed 's/.*load average: *//'; }

# run_tool NAME OUTFILE CMD...: run one measurement with a hard timeout; record its exit code.
run_tool() {
  local name=$1 out=$2 rc
  shift 2
  timeout 300 "$@" >"$out" 2>"$out.err"
  rc=$?
  echo "$rc" >"$out.rc"
  if ((rc != 0)); then
    note "$name exited with rc=$rc ($(tail -n 2 "$out.err" | tr '\n' ' '))"
  fi
}

# ucx_run OUTFILE TEST SIZE ITERS WARMUP [extra client args]: fresh server per run.
ucx_run() {
  local out=$1 test=$2 size=$3 iters=$4 warm=$5
  shift 5
  local port spid i rc
  port=$(free_port)
  UCX_TLS=tcp UCX_NET_DEVICES=lo timeout 60 "$UCX_BIN" -p "$port" >"$out.server" 2>&1 &
  spid=$!
  BG_PIDS+=("$spid")
  # Wait until the server listens; probing by connecting would use up its single accept.
  for ((i = 0; i < 100; i++)); do
    ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.05
  done
  UCX_TLS=tcp UCX_NET_DEVICES=lo timeout 60 "$UCX_BIN" 127.0.0.1 -p "$port" -t "$test" \
    -s "$size" -n "$iters" -w "$warm" -f -v "$@" >"$out" 2>&1
  rc=$?
  echo "$rc" >"$out.rc"
  ((rc != 0)) && note "ucx_perftest $test size=$size exited with rc=$rc"
  for ((i = 0; i < 50; i++)); do
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  kill "$spid" 2>/dev/null
  wait "$spid" 2>/dev/null
  forget_pid "$spid"
}

phase_tcp() {
  local dir=$1
  [[ -x $TCP_BIN ]] || return 0
  log "  tcp_pingpong"
  run_tool tcp_pingpong "$dir/tcp.out" "$TCP_BIN" --sizes "$SIZES" --iters "$ITERS"
  run_tool "tcp_pingpong --busy-poll" "$dir/tcp_busy.out" "$TCP_BIN" --sizes "$SIZES" \
    --iters "$ITERS" --busy-poll --no-bw --no-connect
  # Both ends on one core: blocking TCP without a cross-core wake-up, which on some VMs costs
  # tens of µs per hop. Shows how much of the blocking figure is the scheduler, not TCP.
  if command -v taskset >/dev/null; then
    run_tool "taskset -c 0 tcp_pingpong" "$dir/tcp_1core.raw" taskset -c 0 "$TCP_BIN" \
      --sizes "$SIZES" --iters "$ITERS" --no-bw --no-connect
    sed 's/ op=tcp / op=tcp_1core /' "$dir/tcp_1core.raw" >"$dir/tcp_1core.out"
  fi
  # The raw peers of ltier-perf --new-peer and --join (same tries and idle gap).
  if [[ -x $CONNECT_BIN ]]; then
    run_tool tcp_connect "$dir/tcp_connect.out" "$CONNECT_BIN" --tries 30
  fi
}

phase_ltier() {
  local dir=$1
  [[ -x $LTIER_BIN ]] || return 0
  log "  ltier-perf"
  LTIER_TRANSPORTS=tcp run_tool ltier-perf "$dir/ltier.out" "$LTIER_BIN" --ops read,write --sizes "$SIZES" \
    --iters "$ITERS" --bw --join --new-peer
  # Messaging (ping-pong latency; streaming with 16 in flight, like tag_bw), RPC latency and
  # rate, fetch_add latency.
  LTIER_TRANSPORTS=tcp run_tool "ltier-perf (msg)" "$dir/ltier_msg.out" "$LTIER_BIN" --ops send,rpc \
    --sizes "$SIZES" --iters "$ITERS" --bw
  LTIER_TRANSPORTS=tcp run_tool "ltier-perf (rate)" "$dir/ltier_rate.out" "$LTIER_BIN" --ops rpc_rate,fetch_add \
    --sizes 8 --iters "$ITERS"
}

phase_ucx() {
  local dir=$1 size n
  [[ -n $UCX_BIN ]] || return 0
  log "  ucx_perftest"
  mkdir -p "$dir/ucx"
  for size in "${SIZE_LIST[@]}"; do
    n=$(lat_iters "$size" "$ITERS")
    ucx_run "$dir/ucx/ucp_put_lat_$size" ucp_put_lat "$size" "$n" $((n / 10 + 1))
    # Emulated get over tcp costs ~1 ms per op at any size: a few hundred samples suffice.
    n=$((ITERS < 200 ? ITERS : 200))
    ucx_run "$dir/ucx/ucp_get_$size" ucp_get "$size" "$n" $((n / 10 + 1))
    # About 256 MiB per bandwidth run, within [200, 20000] messages.
    n=$((268435456 / size))
    ((n < 200)) && n=200
    ((n > 20000)) && n=20000
    ucx_run "$dir/ucx/ucp_put_bw_$size" ucp_put_bw "$size" "$n" $((n / 10 + 1))
    # Tag matching (UCP's send/recv): latency, and streaming bandwidth / message rate with the
    # default window and with up to 16 sends in flight (-O 16, as ltier-perf's send streaming).
    n=$(lat_iters "$size" "$ITERS")
    ucx_run "$dir/ucx/tag_lat_$size" tag_lat "$size" "$n" $((n / 10 + 1))
    # About 2 GiB, as ltier-perf's send streaming (a 1 MiB run of 256 MiB lasted 0.05 s).
    n=$((2147483648 / size))
    ((n < 200)) && n=200
    ((n > 4 * ITERS)) && n=$((4 * ITERS))
    ucx_run "$dir/ucx/tag_bw_$size" tag_bw "$size" "$n" $((n / 10 + 1))
    ucx_run "$dir/ucx/tag_bwO16_$size" tag_bw "$size" "$n" $((n / 10 + 1)) -O 16
  done
  ucx_run "$dir/ucx/ucp_am_lat_8" ucp_am_lat 8 "$ITERS" $((ITERS / 10 + 1))
  ucx_run "$dir/ucx/ucp_fadd_8" ucp_fadd 8 "$ITERS" $((ITERS / 10 + 1))
  ucx_run "$dir/ucx/ucp_add_8" ucp_add 8 $((4 * ITERS)) $((ITERS / 10 + 1))
}

if [[ -z $REPORT_ONLY ]]; then
log "raw output in $RAW; tcp=$TCP_BIN ltier=$LTIER_BIN ucx=${UCX_BIN:-none}"
for ((r = 1; r <= ROUNDS; r++)); do
  dir=$RAW/r$r
  mkdir -p "$dir"
  if ((r % 2 == 1)); then order="tcp ltier ucx"; else order="ucx ltier tcp"; fi
  echo "$order" >"$dir/order"
  log "round $r/$ROUNDS ($order)"
  load_now >"$dir/load_before"
  for phase in $order; do "phase_$phase" "$dir"; done
  load_now >"$dir/load_after"
done

if ((HOG)); then
  dir=$RAW/hog
  mkdir -p "$dir"
  log "hog phase: busy loop on one core"
  load_now >"$dir/load_before"
  hog_cmd=(timeout 600 sh -c 'while :; do :; done')
  if command -v taskset >/dev/null; then
    taskset -c 0 "${hog_cmd[@]}" &
    echo "busy loop pinned to core 0 (taskset -c 0)" >"$dir/how"
  else
    "${hog_cmd[@]}" &
    echo "busy loop, unpinned (no taskset)" >"$dir/how"
  fi
  hog_pid=$!
  BG_PIDS+=("$hog_pid")
  sleep 0.5  # Let the hog reach its core before measuring.
  if [[ -x $TCP_BIN ]]; then
    run_tool "tcp_pingpong (hog)" "$dir/tcp.out" "$TCP_BIN" --sizes 8 --iters "$HOG_ITERS" \
      --no-bw --no-connect
    run_tool "tcp_pingpong --busy-poll (hog)" "$dir/tcp_busy.out" "$TCP_BIN" --sizes 8 \
      --iters "$HOG_ITERS" --no-bw --no-connect --busy-poll
  fi
  if [[ -x $LTIER_BIN ]]; then
    LTIER_TRANSPORTS=tcp run_tool "ltier-perf (hog)" "$dir/ltier.out" "$LTIER_BIN" --ops read --sizes 8 \
      --iters "$HOG_ITERS"
  fi
  if [[ -n $UCX_BIN ]]; then
    mkdir -p "$dir/ucx"
    # ucx_perftest reports one percentile rank per run (-R): one run for p50, one for p99.
    ucx_run "$dir/ucx/ucp_put_lat_8_p50" ucp_put_lat 8 "$HOG_ITERS" $((HOG_ITERS / 10 + 1))
    ucx_run "$dir/ucx/ucp_put_lat_8_p99" ucp_put_lat 8 "$HOG_ITERS" $((HOG_ITERS / 10 + 1)) \
      -R 99
  fi
  kill "$hog_pid" 2>/dev/null
  wait "$hog_pid" 2>/dev/null
  forget_pid "$hog_pid"
  load_now >"$dir/load_after"
fi

# Machine and run facts for the report.
{
  echo "command=$CMDLINE"
  echo "date=$(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "nproc=$(nproc)"
  # The model name alone does not tell VMs of one kind apart: family and model do.
  echo "cpu=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n 1)" \
    "(family $(sed -n 's/^cpu family[[:space:]]*: *//p' /proc/cpuinfo | head -n 1)" \
    "model $(sed -n 's/^model[[:space:]]*: *//p' /proc/cpuinfo | head -n 1))"
  echo "kernel=$(uname -sr)"
  echo "ucx=$([[ -n $UCX_BIN ]] && ucx_info -v 2>/dev/null | sed -n '1s/^# *//p')"
  echo "rounds=$ROUNDS"
  echo "sizes=$SIZES"
  echo "iters=$ITERS"
  echo "hog_iters=$HOG_ITERS"
  # The docs name the build directory as the reader's checkout has it.
  repo=$(cd "$(dirname "$0")/.." && pwd)
  echo "build=${BUILD#"$repo"/}"
} >"$RAW/meta"

else
  RAW=$(abspath "$REPORT_ONLY")
  RAW_KEEP=$RAW
fi

mkdir -p "$(dirname "$OUT")"
python3 - "$RAW" "$OUT" <<'PY'
import os
import re
import statistics
import sys

raw, out_path = sys.argv[1], sys.argv[2]
BEGIN, END = "<!-- BEGIN compare.sh -->", "<!-- END compare.sh -->"
MIB_TO_MB = 1048576 / 1e6

meta = {}
for line in open(os.path.join(raw, "meta")):
    k, _, v = line.rstrip("\n").partition("=")
    meta[k] = v
notes = [l.rstrip("\n") for l in open(os.path.join(raw, "notes.txt")) if l.strip()]
sizes = [int(s) for s in meta["sizes"].split(",")]
rounds = int(meta["rounds"])


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


LINE = re.compile(r"^(lat|bw|rate|join|newpeer|connect) ((?:\S+=\S+ ?)+)$")


def parse_kv(text):
    """Lines like 'lat op=tcp size=8 iters=N p50_us=X p99_us=Y' -> list of (kind, dict)."""
    recs = []
    for line in text.splitlines():
        m = LINE.match(line.strip())
        if m:
            recs.append((m.group(1), dict(kv.split("=", 1) for kv in m.group(2).split())))
    return recs


def parse_ucx(text):
    """ucx_perftest -f -v prints a CSV header and one line of final figures."""
    lines = [l.strip() for l in text.splitlines()]
    for i, l in enumerate(lines):
        if l.startswith("iterations,") and i + 1 < len(lines):
            vals = lines[i + 1].split(",")
            keys = l.split(",")
            if len(vals) == len(keys):
                try:
                    return {k: float(v) for k, v in zip(keys, vals)}
                except ValueError:
                    return None
    return None


def pct_key(d):
    for k in d:
        if k.endswith("_percentile_lat"):
            return k
    return None


# data[(tool, kind, op, size, field)][round] = value
data = {}


def put(key, rnd, val):
    data.setdefault(key, {})[rnd] = val


def ingest(dirpath, rnd):
    for tool, fname in (("tcp", "tcp.out"), ("tcp", "tcp_busy.out"), ("tcp", "tcp_1core.out"),
                        ("tcp", "tcp_connect.out"),
                        ("ltier", "ltier.out"), ("ltier", "ltier_msg.out"), ("ltier", "ltier_rate.out")):
        for kind, kv in parse_kv(read(os.path.join(dirpath, fname))):
            op = kv.get("op", "?")
            size = int(kv["size"]) if "size" in kv else 0
            for field, v in kv.items():
                if field in ("op", "size", "iters", "window", "tries", "settle_ms"):
                    continue
                try:
                    put((tool, kind, op, size, field), rnd, float(v))
                except ValueError:
                    pass
            if "window" in kv:
                put((tool, kind, op, size, "window"), rnd, kv["window"])
            if kind == "rate":  # one record per window size
                put((tool, kind, op + "_w" + kv.get("window", "1"), size, "calls_per_s"), rnd,
                    float(kv.get("calls_per_s", "nan")))
    udir = os.path.join(dirpath, "ucx")
    if os.path.isdir(udir):
        for fname in os.listdir(udir):
            m = re.match(r"^(ucp_put_lat|ucp_get|ucp_put_bw|tag_lat|tag_bw|tag_bwO16|ucp_am_lat|"
                         r"ucp_fadd|ucp_add)_(\d+)(_p50|_p99)?$", fname)
            if not m:
                continue
            d = parse_ucx(read(os.path.join(udir, fname)))
            if d is None:
                continue
            test, size = m.group(1), int(m.group(2))
            pk = pct_key(d)
            rank = "p50" if pk is None or pk.startswith("50") else "p" + pk.split(".")[0]
            if test in ("ucp_put_bw", "tag_bw", "tag_bwO16", "ucp_add"):
                put(("ucx", "bw", test, size, "MBps"), rnd, d["overall_bw"] * MIB_TO_MB)
                put(("ucx", "bw", test, size, "msgs_per_s"), rnd, d["overall_mr"])
            elif pk is not None:
                put(("ucx", "lat", test, size, rank + "_us"), rnd, d[pk])


for r in range(1, rounds + 1):
    ingest(os.path.join(raw, "r%d" % r), r)
HOG = "hog"
has_hog = os.path.isdir(os.path.join(raw, HOG))
if has_hog:
    ingest(os.path.join(raw, HOG), HOG)


def med(key, which=None):
    vals = [v for r, v in data.get(key, {}).items()
            if r != HOG and isinstance(v, float) and (which is None or r == which)]
    return statistics.median(vals) if vals else None


def nrounds(key):
    return len([r for r in data.get(key, {}) if r != HOG])


def hogv(key):
    v = data.get(key, {}).get(HOG)
    return v if isinstance(v, float) else None


def fmt(x):
    if x is None:
        return "n/a"
    if abs(x) >= 100:
        return "%.0f" % x
    if abs(x) >= 10:
        return "%.1f" % x
    return "%.2f" % x


def ratio(a, b):
    if a is None or b is None or b == 0:
        return "n/a"
    return "%.2fx" % (a / b)


def times2(x):
    return None if x is None else 2 * x


def size_label(s):
    if s >= 1 << 20 and s % (1 << 20) == 0:
        return "%d MiB" % (s >> 20)
    if s >= 1 << 10 and s % (1 << 10) == 0:
        return "%d KiB" % (s >> 10)
    return "%d B" % s


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


md = [BEGIN, "## Side by side: ltier, plain TCP, UCX (generated by bench/compare.sh)", "",
      "_Generated: everything between the compare.sh markers is rewritten on each run; "
      "put hand-written notes outside them._", ""]
md += ["- Command: `%s`" % meta["command"],
       "- Date: %s" % meta["date"],
       "- Machine: %s cores, %s, %s" % (meta["nproc"], meta["cpu"] or "unknown CPU",
                                        meta["kernel"]),
       "- Transport: loopback TCP (127.0.0.1) for every tool; UCX %s with "
       "`UCX_TLS=tcp UCX_NET_DEVICES=lo`." % (meta["ucx"] or "(not installed)"),
       "- %d round(s); each round runs the tools in alternating order (tcp, ltier, ucx, then "
       "ucx, ltier, tcp, ...). Cells are medians across rounds; a cell from fewer rounds "
       "says so as `[n]`." % rounds,
       "- Binaries: `%s/bench/tcp_pingpong`, `%s/tools/ltier-perf`; --iters %s for small "
       "messages, scaled down for large ones." % (meta["build"], meta["build"], meta["iters"]),
       ""]
if notes:
    md += ["**Problems during this run:**", ""] + ["- " + n for n in notes] + [""]

md += ["### Machine load (`uptime` load averages, 1/5/15 min)", ""]
rows = []
for r in range(1, rounds + 1):
    d = os.path.join(raw, "r%d" % r)
    rows.append([str(r), read(os.path.join(d, "order")).strip(),
                 read(os.path.join(d, "load_before")).strip(),
                 read(os.path.join(d, "load_after")).strip()])
if has_hog:
    d = os.path.join(raw, HOG)
    rows.append(["hog", "tcp, ltier, ucx", read(os.path.join(d, "load_before")).strip(),
                 read(os.path.join(d, "load_after")).strip()])
md += table(["round", "order", "load before", "load after"], rows) + [""]
md += ["The tools themselves add up to about 1 to the 1-minute load (more while both sides "
       "busy-poll). A load near or above 1 *before* a round means something else was "
       "running: rerun before trusting that round.", ""]

md += ["### How the figures are read", "",
       "- **tcp**: `tcp_pingpong`, blocking `recv`/`send` with TCP_NODELAY, client and a "
       "forked echo server. Latency is the full round trip (send size bytes, get size bytes "
       "back). **tcp busy-poll** is the same with both sides spinning on non-blocking `recv`: "
       "the floor without scheduler wake-ups (it needs both cores). **tcp 1 core** is the "
       "blocking test with both processes pinned to core 0: no cross-core wake-up. When "
       "\"tcp\" is far above both, cross-core wake-ups dominate on this machine (common "
       "on VMs), and any design that blocks pays them too.",
       "- **ltier**: `ltier-perf`; read/write latency is the completion time of one "
       "`LT_read`/`LT_write`, a round trip.",
       "- **UCX put_lat**: ucx_perftest prints **one-way** latency (it halves the ping-pong "
       "time); the tables show it **doubled (x2)** to compare round trips.",
       "- **UCX get**: ucx_perftest divides only ping-pong tests by two; `ucp_get` is a "
       "one-sided stream test run one op at a time, so its figure is already the full "
       "request-to-data round trip and is shown **as reported, not doubled**. Over tcp it is "
       "emulated and slow (about 1 ms).",
       "- UCX latency column: `50.0_percentile_lat` of `ucx_perftest -f -v` (the \"typical\" "
       "figure: median of the last min(n, 2048) iterations), the closest match to the p50 the "
       "other tools print; with `-R 99` the same column is the 99th percentile. Not the "
       "`avg_lat`/`overall_lat` means.",
       "- UCX bandwidth: `overall_bw` column (whole-run average) of `ucp_put_bw`, printed in "
       "MiB/s despite the \"MB/s\" header, converted here to MB/s (x 1.048576).",
       "- MB/s everywhere means 10^6 bytes per second. Ratios are ltier / peer: below 1 "
       "means ltier is faster for latency; above 1 means ltier moves more bytes for "
       "bandwidth.", ""]


def cell(key, transform=None):
    v = med(key)
    if transform and v is not None:
        v = transform(v)
    s = fmt(v)
    n = nrounds(key)
    if v is not None and n < rounds:
        s += " [%d]" % n
    return s


def lat_key(tool, op, size, field):
    return (tool, "lat", op, size, field)


for field, title in (("p50_us", "p50"), ("p99_us", "p99")):
    md += ["### Round-trip latency, %s (µs)" % title, ""]
    hdr = ["size", "tcp", "tcp busy-poll", "tcp 1 core", "ltier read", "ltier write"]
    if field == "p50_us":
        hdr += ["UCX put_lat x2", "UCX get (as reported)"]
    rows = []
    for s in sizes:
        row = [size_label(s), cell(lat_key("tcp", "tcp", s, field)),
               cell(lat_key("tcp", "tcp_busy", s, field)),
               cell(lat_key("tcp", "tcp_1core", s, field)),
               cell(lat_key("ltier", "read", s, field)),
               cell(lat_key("ltier", "write", s, field))]
        if field == "p50_us":
            row += [cell(lat_key("ucx", "ucp_put_lat", s, "p50_us"), times2),
                    cell(lat_key("ucx", "ucp_get", s, "p50_us"))]
        rows.append(row)
    md += table(hdr, rows) + [""]
    if field == "p99_us":
        md += ["UCX p99 is not taken in the rounds (ucx_perftest prints one percentile rank "
               "per run); see the hog section for a UCX p99 at 8 B.", ""]

md += ["### Latency ratios, p50 (ltier / peer; below 1 = ltier faster)", ""]
rows = []
for s in sizes:
    tcp = med(lat_key("tcp", "tcp", s, "p50_us"))
    busy = med(lat_key("tcp", "tcp_busy", s, "p50_us"))
    rd = med(lat_key("ltier", "read", s, "p50_us"))
    wr = med(lat_key("ltier", "write", s, "p50_us"))
    one = med(lat_key("tcp", "tcp_1core", s, "p50_us"))
    floors = [v for v in (tcp, busy, one) if v is not None]
    best = min(floors) if floors else None
    put2 = times2(med(lat_key("ucx", "ucp_put_lat", s, "p50_us")))
    get = med(lat_key("ucx", "ucp_get", s, "p50_us"))
    rows.append([size_label(s), ratio(rd, tcp), ratio(wr, tcp), ratio(rd, best), ratio(wr, best),
                 ratio(rd, put2), ratio(wr, put2), ratio(rd, get)])
md += table(["size", "read / tcp", "write / tcp", "read / best tcp", "write / best tcp",
             "read / UCX put_lat x2", "write / UCX put_lat x2", "read / UCX get"], rows) + [""]
md += ["\"best tcp\" is the lowest of the three tcp variants at that size (blocking, "
       "busy-poll, one core): the honest floor. A ratio against blocking tcp alone flatters "
       "any design that spins while the blocking floor pays cross-core wake-ups.", ""]

md += ["### Bandwidth (MB/s, median)", ""]
bw_ops = sorted({k[2] for k in data if k[0] == "ltier" and k[1] == "bw" and
                 k[2] in ("read", "write")}) or ["write"]
bw_sizes = sorted({k[3] for k in data if k[1] == "bw" and k[2] in ("tcp", "ucp_put_bw", "read",
                                                                     "write")} |
                  {s for s in sizes if s >= 65536})
rows = []
for s in bw_sizes:
    tcp = med(("tcp", "bw", "tcp", s, "MBps"))
    ucx = med(("ucx", "bw", "ucp_put_bw", s, "MBps"))
    row = [size_label(s), cell(("tcp", "bw", "tcp", s, "MBps")),
           cell(("ucx", "bw", "ucp_put_bw", s, "MBps"))]
    for op in bw_ops:
        key = ("ltier", "bw", op, s, "MBps")
        win = data.get(("ltier", "bw", op, s, "window"), {})
        wins = sorted({str(v) for v in win.values()})
        lt = med(key)
        row += [cell(key) + (" (window %s)" % "/".join(wins) if wins else ""),
                ratio(lt, tcp), ratio(lt, ucx)]
    rows.append(row)
hdr = ["size", "tcp stream", "UCX put_bw"]
for op in bw_ops:
    hdr += ["ltier %s" % op, "ltier %s / tcp" % op, "ltier %s / UCX" % op]
md += table(hdr, rows) + [""]
md += ["tcp stream: back-to-back `send` of size-byte messages for ~0.5 s, one ack at the end. "
       "Sizes below 64 KiB are not stream-tested by tcp_pingpong.", ""]

md += ["### Messaging, RPC and atomics (p50, µs; rates per second)", "",
       "ltier `send` is an `LT_send` + `LT_recv` ping-pong (round trip); `rpc` is one "
       "`LT_RPC` echo (round trip). UCX `tag_lat` and `ucp_am_lat` print one-way latency: "
       "shown doubled (x2). `ucp_fadd` is a one-sided round trip, shown as reported.", ""]
rows = []
for s in sizes:
    snd = med(lat_key("ltier", "send", s, "p50_us"))
    rpc = med(lat_key("ltier", "rpc", s, "p50_us"))
    tag = times2(med(lat_key("ucx", "tag_lat", s, "p50_us")))
    tcp = med(lat_key("tcp", "tcp", s, "p50_us"))
    floors = [v for v in (tcp, med(lat_key("tcp", "tcp_busy", s, "p50_us")),
                          med(lat_key("tcp", "tcp_1core", s, "p50_us"))) if v is not None]
    best = min(floors) if floors else None
    rows.append([size_label(s), fmt(snd), fmt(rpc), fmt(tag), fmt(best), ratio(snd, tag),
                 ratio(rpc, tag), ratio(rpc, best)])
md += table(["size", "ltier send", "ltier rpc", "UCX tag_lat x2", "best tcp", "send / tag",
             "rpc / tag", "rpc / best tcp"], rows) + [""]
am = times2(med(lat_key("ucx", "ucp_am_lat", 8, "p50_us")))
rpc8 = med(lat_key("ltier", "rpc", 8, "p50_us"))
fa = med(lat_key("ltier", "fetch_add", 8, "p50_us"))
ufa = med(lat_key("ucx", "ucp_fadd", 8, "p50_us"))
md += table(["8 B round trip", "ltier", "UCX", "ratio"],
            [["rpc vs ucp_am_lat x2", fmt(rpc8), fmt(am), ratio(rpc8, am)],
             ["fetch_add vs ucp_fadd", fmt(fa), fmt(ufa), ratio(fa, ufa)]]) + [""]
rows = []
for s in sizes:
    lt = med(("ltier", "bw", "send", s, "MBps"))
    ltm = med(("ltier", "bw", "send", s, "msgs_per_s"))
    ub = med(("ucx", "bw", "tag_bw", s, "MBps"))
    ub16 = med(("ucx", "bw", "tag_bwO16", s, "MBps"))
    um = med(("ucx", "bw", "tag_bw", s, "msgs_per_s"))
    um16 = med(("ucx", "bw", "tag_bwO16", s, "msgs_per_s"))
    tcp = med(("tcp", "bw", "tcp", s, "MBps"))
    rows.append([size_label(s), fmt(lt), fmt(ub), ratio(lt, ub), fmt(ub16), ratio(lt, ub16),
                 ratio(lt, tcp), fmt(ltm), fmt(um), ratio(ltm, um), fmt(um16), ratio(ltm, um16)])
md += ["Streaming messages (ltier-perf send --bw: 16 in flight; ucx_perftest tag_bw with its "
       "default window and with -O 16):", ""]
md += table(["size", "ltier MB/s", "UCX tag_bw", "ratio", "UCX -O 16", "ratio",
             "ltier / tcp stream", "ltier msgs/s", "UCX msgs/s", "ratio", "UCX -O 16 msgs/s",
             "ratio"], rows) + [""]
r1 = med(("ltier", "rate", "rpc_w1", 8, "calls_per_s"))
r32 = med(("ltier", "rate", "rpc_w32", 8, "calls_per_s"))
um8 = med(("ucx", "bw", "tag_bw", 8, "msgs_per_s"))
um8_16 = med(("ucx", "bw", "tag_bwO16", 8, "msgs_per_s"))
uadd = med(("ucx", "bw", "ucp_add", 8, "msgs_per_s"))
md += table(["rate (8 B)", "per second", "vs UCX tag_bw 8 B msgs/s"],
            [["ltier RPC, 1 outstanding", fmt(r1), ratio(r1, um8)],
             ["ltier RPC, 32 outstanding", fmt(r32), ratio(r32, um8)],
             ["UCX tag_bw 8 B (default window)", fmt(um8), "1.00x"],
             ["UCX tag_bw 8 B (-O 16)", fmt(um8_16), ratio(um8_16, um8)],
             ["UCX ucp_add (non-fetching atomic add)", fmt(uadd), ratio(uadd, um8)]]) + [""]

md += ["### Connection set-up (µs, median)", ""]
tp50 = med(("tcp", "connect", "tcp", 0, "p50_us"))
tp90 = med(("tcp", "connect", "tcp", 0, "p90_us"))
sp50 = med(("tcp", "connect", "new_server", 0, "p50_us"))
sp90 = med(("tcp", "connect", "new_server", 0, "p90_us"))
np50 = med(("ltier", "newpeer", "first_rpc", 0, "p50_us"))
np90 = med(("ltier", "newpeer", "first_rpc", 0, "p90_us"))
fp50 = med(("tcp", "connect", "fresh_client", 0, "p50_us"))
fp90 = med(("tcp", "connect", "fresh_client", 0, "p90_us"))
jp50 = med(("ltier", "join", "first_op", 0, "p50_us"))
jp90 = med(("ltier", "join", "first_op", 0, "p90_us"))


def p50_p90(label, tool, kind, op):
    return [label, cell((tool, kind, op, 0, "p50_us")), cell((tool, kind, op, 0, "p90_us"))]


md += table(["what", "p50", "p90"], [
    p50_p90("tcp: socket + connect + first 8-byte echo, back to back to a running server",
            "tcp", "connect", "tcp"),
    p50_p90("tcp: a fresh server process, 200 ms idle, then socket + connect + 8-byte echo",
            "tcp", "connect", "new_server"),
    p50_p90("ltier: a warm engine's first 8 B LT_RPC to a node that joined, 200 ms idle",
            "ltier", "newpeer", "first_rpc"),
    ["**ratio ltier / tcp, a new peer**", ratio(np50, sp50), ratio(np90, sp90)],
    p50_p90("tcp: a fresh process, main() to its first 8-byte echo (running server)",
            "tcp", "connect", "fresh_client"),
    p50_p90("ltier: a fresh process, LT_join start to its first completed remote op",
            "ltier", "join", "first_op"),
    ["**ratio ltier / tcp, a fresh process**", ratio(jp50, fp50), ratio(jp90, fp90)],
    ["ratio ltier fresh process / tcp back to back", ratio(jp50, tp50), ratio(jp90, tp90)]]) + [""]
md += ["The two ratios in bold compare like with like (`bench/tcp_connect`): a connection "
       "after an idle gap costs far more on a VM than one made right after the last (an idle "
       "vCPU is slow to wake), and a fresh process pays for its first system calls. ltier's "
       "fresh process also joins: a connection to the manager, its challenge and answer, "
       "before the connection to the peer.", ""]

if has_hog:
    how = read(os.path.join(raw, HOG, "how")).strip()
    md += ["### With a CPU hog (8 B round trip, µs)", "",
           "A `%s` (%s) ran during these points; each tool took %s samples. The no-hog "
           "column is the median of the rounds above." % ("while :; do :; done", how,
                                                         meta["hog_iters"]), ""]
    rows = []
    for label, tool, op, f2 in (("tcp (blocking)", "tcp", "tcp", None),
                                ("tcp busy-poll", "tcp", "tcp_busy", None),
                                ("ltier read", "ltier", "read", None),
                                ("UCX put_lat x2", "ucx", "ucp_put_lat", times2)):
        k50, k99 = lat_key(tool, op, 8, "p50_us"), lat_key(tool, op, 8, "p99_us")
        h50, h99 = hogv(k50), hogv(k99)
        if f2:
            h50, h99 = f2(h50), f2(h99)
        rows.append([label, cell(k50, f2), cell(k99, f2) if tool != "ucx" else "n/a",
                     fmt(h50), fmt(h99)])
    md += table(["tool", "p50 no hog", "p99 no hog", "p50 with hog", "p99 with hog"], rows)
    md += ["", "UCX percentiles come from separate `-R 50` and `-R 99` runs and cover at most "
           "the last 2048 iterations.", ""]

md += ["<details><summary>Per-round figures</summary>", ""]
rows = []
for key in sorted(data):
    vals = data[key]
    if not any(isinstance(v, float) for v in vals.values()):
        continue
    tool, kind, op, size, field = key
    per = [fmt(vals.get(r)) if isinstance(vals.get(r), float) else "-"
           for r in range(1, rounds + 1)]
    h = vals.get(HOG)
    rows.append([tool, kind, op, str(size), field] + per +
                ([fmt(h) if isinstance(h, float) else "-"] if has_hog else []))
md += table(["tool", "kind", "op", "size", "field"] +
            ["r%d" % r for r in range(1, rounds + 1)] + (["hog"] if has_hog else []), rows)
md += ["", "UCX values here are as printed (one-way for put_lat; MB/s already converted).", "",
       "</details>", END]
block = "\n".join(md) + "\n"

try:
    with open(out_path) as f:
        old = f.read()
except FileNotFoundError:
    old = None
if old is None:
    new = "# ltier performance\n\n" + block
elif BEGIN in old and END in old and old.index(BEGIN) < old.index(END):
    head = old[:old.index(BEGIN)]
    tail = old[old.index(END) + len(END):]
    if tail.startswith("\n"):
        tail = tail[1:]
    new = head + block + tail
else:
    new = old + ("" if old.endswith("\n") or not old else "\n") + "\n" + block
tmp = out_path + ".tmp"
with open(tmp, "w") as f:
    f.write(new)
os.replace(tmp, out_path)
print("compare.sh: wrote %s" % out_path, file=sys.stderr)
PY
