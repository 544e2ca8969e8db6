#!/usr/bin/env bash
# compare_shm.sh: ltier between two processes on this host (shm transport) side by side, in ONE
# run, with UCX's shared-memory transport and the raw floor; writes a block in docs/PERF.md.
#
# Peers:
#   floor  $BUILD/bench/shm_floor     cache-line ping-pong between two processes, single-core
#                                     memcpy (what shared memory can do with nothing on top)
#   ltier  $BUILD/tools/ltier-perf    LTIER_TRANSPORTS=shm,tcp: the server node is on this
#                                     host, so shm is picked
#   ucx    ucx_perftest, UCX_TLS=posix
# Rounds alternate the order (floor ltier ucx, then ucx ltier floor, ...); cells are medians.
# A hog phase repeats the 8-byte points with a busy loop pinned to core 0.
#
# Usage (from the repo root):
#   bench/compare_shm.sh [--build DIR] [--rounds N] [--iters N] [--out FILE] [--no-hog]
#                        [--raw DIR]
# Only the block between the compare_shm.sh markers in the output file is replaced.

set -u -o pipefail

BUILD=build-rel
ROUNDS=3
ITERS=20000
OUT=docs/PERF.md
HOG=1
RAW_KEEP=
CMDLINE=$(printf '%q ' "$0" "$@")
CMDLINE=${CMDLINE% }

usage() {
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=${2:?--build needs a directory}; shift 2 ;;
    --rounds) ROUNDS=${2:?--rounds needs a number}; shift 2 ;;
    --iters) ITERS=${2:?--iters needs a number}; shift 2 ;;
    --out) OUT=${2:?--out needs a file}; shift 2 ;;
    --no-hog) HOG=0; shift ;;
    --raw) RAW_KEEP=${2:?--raw needs a directory}; shift 2 ;;
    -h|--help) usage ;;
    *) echo "compare_shm.sh: unknown argument: $1" >&2; usage ;;
  esac
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "compare_shm.sh: bad --rounds" >&2; exit 2; }
[[ $ITERS =~ ^[1-9][0-9]*$ ]] || { echo "compare_shm.sh: bad --iters" >&2; exit 2; }

abspath() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s/%s\n' "$PWD" "$1" ;; esac; }
BUILD=$(abspath "$BUILD")
OUT=$(abspath "$OUT")
FLOOR_BIN=$BUILD/bench/shm_floor
LTIER_BIN=$BUILD/tools/ltier-perf
UCX_BIN=$(command -v ucx_perftest || true)
if [[ -n $RAW_KEEP ]]; then
  RAW=$(abspath "$RAW_KEEP")
  mkdir -p "$RAW"
else
  RAW=$(mktemp -d /tmp/ltier-compare-shm.XXXXXX)
fi
: >"$RAW/notes.txt"

BG_PIDS=()
cleanup() {
  local p
  for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${BG_PIDS[@]}"; do wait "$p" 2>/dev/null; done
  [[ -z $RAW_KEEP ]] && rm -rf "$RAW"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "compare_shm.sh: $*" >&2; }
note() { log "$*"; echo "$*" >>"$RAW/notes.txt"; }
[[ -x $FLOOR_BIN ]] || note "$FLOOR_BIN not found: floor columns n/a"
[[ -x $LTIER_BIN ]] || note "$LTIER_BIN not found: ltier columns n/a"
[[ -n $UCX_BIN ]] || note "ucx_perftest not found (apt-get install ucx-utils): UCX columns n/a"
command -v python3 >/dev/null || { echo "compare_shm.sh: python3 is required" >&2; exit 1; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

run_tool() {
  local name=$1 out=$2 rc
  shift 2
  timeout 300 "$@" >"$out" 2>"$out.err"
  rc=$?
  ((rc != 0)) && note "$name exited with rc=$rc ($(tail -n 2 "$out.err" | tr '\n' ' '))"
}

# ucx_run OUTFILE TEST SIZE ITERS [extra client args]: a fresh server per run.
ucx_run() {
  local out=$1 test=$2 size=$3 iters=$4 port spid i rc
  shift 4
  port=$(free_port)
  UCX_TLS=posix timeout 60 "$UCX_BIN" -p "$port" >"$out.server" 2>&1 &
  spid=$!
  BG_PIDS+=("$spid")
  for ((i = 0; i < 100; i++)); do
    ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.05
  done
  UCX_TLS=posix timeout 60 "$UCX_BIN" 127.0.0.1 -p "$port" -t "$test" -s "$size" -n "$iters" \
    -w $((iters / 10 + 1)) -f -v "$@" >"$out" 2>&1
  rc=$?
  ((rc != 0)) && note "ucx_perftest $test size=$size exited with rc=$rc"
  for ((i = 0; i < 50; i++)); do
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  kill "$spid" 2>/dev/null
  wait "$spid" 2>/dev/null
}

big_iters() { echo $((ITERS / 20 < 200 ? 200 : ITERS / 20)); }

phase_floor() {
  [[ -x $FLOOR_BIN ]] || return 0
  log "  shm_floor"
  run_tool shm_floor "$1/floor.out" "$FLOOR_BIN" --iters "$ITERS" --sizes 8,1048576
}

phase_ltier() {
  [[ -x $LTIER_BIN ]] || return 0
  log "  ltier-perf"
  LTIER_TRANSPORTS=shm,tcp run_tool ltier-perf "$1/ltier.out" "$LTIER_BIN" \
    --ops read,write,fetch_add,rpc,rpc_rate,send --sizes 8,65536,1048576 --iters "$ITERS" --bw
}

phase_ucx() {
  [[ -n $UCX_BIN ]] || return 0
  log "  ucx_perftest (UCX_TLS=posix)"
  local d=$1/ucx
  mkdir -p "$d"
  ucx_run "$d/tag_lat_8" tag_lat 8 "$ITERS"
  ucx_run "$d/ucp_am_lat_8" ucp_am_lat 8 "$ITERS"
  ucx_run "$d/ucp_put_lat_8" ucp_put_lat 8 "$ITERS"
  ucx_run "$d/ucp_fadd_8" ucp_fadd 8 "$ITERS"
  ucx_run "$d/tag_bw_8" tag_bw 8 $((ITERS * 5))
  # ltier is always thread-safe; ucx_perftest's default worker is not (-M single)
  ucx_run "$d/tag_bw_mt_8" tag_bw 8 $((ITERS * 5)) -M multi
  ucx_run "$d/tag_bw_65536" tag_bw 65536 "$ITERS"
  ucx_run "$d/tag_bw_1048576" tag_bw 1048576 2048  # 2 GiB, as ltier-perf's send streaming
  ucx_run "$d/ucp_put_bw_1048576" ucp_put_bw 1048576 "$(big_iters)"
}

log "raw output in $RAW"
for ((r = 1; r <= ROUNDS; r++)); do
  dir=$RAW/r$r
  mkdir -p "$dir"
  if ((r % 2 == 1)); then order="floor ltier ucx"; else order="ucx ltier floor"; fi
  log "round $r/$ROUNDS ($order)"
  uptime | sed 's/.*load average: *//' >"$dir/load"
  for phase in $order; do "phase_$phase" "$dir"; done
done

if ((HOG)); then
  dir=$RAW/hog
  mkdir -p "$dir/ucx"
  log "hog phase: busy loop pinned to core 0"
  taskset -c 0 timeout 600 sh -c 'while :; do :; done' &
  hog=$!
  BG_PIDS+=("$hog")
  sleep 0.5
  n=$((ITERS / 4 < 1000 ? 1000 : ITERS / 4))
  [[ -x $LTIER_BIN ]] && LTIER_TRANSPORTS=shm,tcp run_tool "ltier-perf (hog)" "$dir/ltier.out" \
    "$LTIER_BIN" --ops read,send,rpc --sizes 8 --iters "$n" --dump "$dir/samples"
  if [[ -n $UCX_BIN ]]; then
    ucx_run "$dir/ucx/tag_lat_8_p50" tag_lat 8 "$n"
    ucx_run "$dir/ucx/tag_lat_8_p99" tag_lat 8 "$n" -R 99
  fi
  kill "$hog" 2>/dev/null
  wait "$hog" 2>/dev/null
fi

{
  echo "command=$CMDLINE"
  echo "date=$(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "nproc=$(nproc)"
  # The model name alone does not tell VMs of one kind apart: family and model do.
  echo "cpu=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n 1)" \
    "(family $(sed -n 's/^cpu family[[:space:]]*: *//p' /proc/cpuinfo | head -n 1)" \
    "model $(sed -n 's/^model[[:space:]]*: *//p' /proc/cpuinfo | head -n 1))"
  echo "ucx=$([[ -n $UCX_BIN ]] && ucx_info -v 2>/dev/null | sed -n '1s/^# *//p')"
  echo "rounds=$ROUNDS"
  echo "iters=$ITERS"
} >"$RAW/meta"

python3 - "$RAW" "$OUT" <<'PY'
import os, re, statistics, sys

raw, out_path = sys.argv[1], sys.argv[2]
BEGIN, END = "<!-- BEGIN compare_shm.sh -->", "<!-- END compare_shm.sh -->"
MIB = 1048576 / 1e6
meta = dict(l.rstrip("\n").split("=", 1) for l in open(os.path.join(raw, "meta")) if "=" in l)
notes = [l.strip() for l in open(os.path.join(raw, "notes.txt")) if l.strip()]
rounds = int(meta["rounds"])
LINE = re.compile(r"^(lat|bw|rate) ((?:\S+=\S+ ?)+)$")
data = {}


def read(p):
    try:
        return open(p).read()
    except OSError:
        return ""


def put(key, rnd, v):
    data.setdefault(key, {})[rnd] = v


def ingest(d, rnd):
    for tool, f in (("floor", "floor.out"), ("ltier", "ltier.out")):
        for line in read(os.path.join(d, f)).splitlines():
            m = LINE.match(line.strip())
            if not m:
                continue
            kv = dict(x.split("=", 1) for x in m.group(2).split())
            op = kv["op"] + ("_w" + kv["window"] if m.group(1) == "rate" else "")
            for k, v in kv.items():
                if k in ("op", "size", "iters", "window"):
                    continue
                try:
                    put((tool, m.group(1), op, int(kv["size"]), k), rnd, float(v))
                except ValueError:
                    pass
    ud = os.path.join(d, "ucx")
    if not os.path.isdir(ud):
        return
    for f in os.listdir(ud):
        m = re.match(r"^([a-z_]+?)_(\d+)(_p50|_p99)?$", f)
        if not m:
            continue
        lines = [l.strip() for l in read(os.path.join(ud, f)).splitlines()]
        for i, l in enumerate(lines):
            if l.startswith("iterations,") and i + 1 < len(lines):
                keys, vals = l.split(","), lines[i + 1].split(",")
                if len(keys) != len(vals):
                    continue
                try:
                    rec = {k: float(v) for k, v in zip(keys, vals)}
                except ValueError:
                    continue
                test, size = m.group(1), int(m.group(2))
                pk = next((k for k in rec if k.endswith("_percentile_lat")), None)
                rank = "p50" if pk is None or pk.startswith("50") else "p99"
                put(("ucx", "lat", test, size, rank + "_us"), rnd, rec[pk] if pk else None)
                if "overall_lat" in rec:  # the whole run's mean, stalls included
                    put(("ucx", "lat", test, size, "avg_us"), rnd, rec["overall_lat"])
                put(("ucx", "bw", test, size, "MBps"), rnd, rec["overall_bw"] * MIB)
                put(("ucx", "bw", test, size, "msgs_per_s"), rnd, rec["overall_mr"])


for r in range(1, rounds + 1):
    ingest(os.path.join(raw, "r%d" % r), r)
if os.path.isdir(os.path.join(raw, "hog")):
    ingest(os.path.join(raw, "hog"), "hog")


def med(key, rnd=None):
    vals = [v for r, v in data.get(key, {}).items()
            if isinstance(v, float) and (r == rnd if rnd else r != "hog")]
    return statistics.median(vals) if vals else None


TAIL = 2048  # ucx_perftest's percentiles cover its last min(n, 2048) iterations


def pct(sorted_v, p):  # the rank ltier-perf's own percentiles use
    return sorted_v[min(int(p / 100.0 * (len(sorted_v) - 1) + 0.5), len(sorted_v) - 1)]


def fmt(x):
    if x is None:
        return "n/a"
    return "%.0f" % x if abs(x) >= 100 else "%.1f" % x if abs(x) >= 10 else "%.3f" % x


def ratio(a, b):
    return "n/a" if a is None or b is None or b == 0 else "%.2fx" % (a / b)


def half(x):
    return None if x is None else x / 2


def table(h, rows):
    return (["| " + " | ".join(h) + " |", "|" + "---|" * len(h)] +
            ["| " + " | ".join(r) + " |" for r in rows])


L = lambda tool, op, size, f="p50_us", rnd=None: med((tool, "lat", op, size, f), rnd)
B = lambda tool, op, size, f="MBps": med((tool, "bw", op, size, f))
md = [BEGIN, "## Same host: ltier over shm, UCX posix, raw shared memory "
      "(generated by bench/compare_shm.sh)", "",
      "- Command: `%s`; %s; %s cores, %s; UCX %s with `UCX_TLS=posix`; ltier with "
      "`LTIER_TRANSPORTS=shm,tcp` (shm picked: same host)." % (
          meta["command"], meta["date"], meta["nproc"], meta["cpu"], meta["ucx"] or "n/a"),
      "- %d round(s), alternating tool order; medians. Latencies are **one-way** (ltier's "
      "round trips halved; ucx_perftest prints one-way for tag_lat, am_lat, put_lat). "
      "`ucp_fadd` and ltier `fetch_add` are one-sided round trips, shown whole." % rounds, ""]
if notes:
    md += ["**Problems during this run:**", ""] + ["- " + n for n in notes] + [""]
cl = half(L("floor", "cacheline", 8))
rows = [
    ["LT_read 8 B (whole op)", fmt(L("ltier", "read", 8)), "cache-line ping-pong, one-way",
     fmt(cl), ratio(L("ltier", "read", 8), cl)],
    ["LT_write 8 B (whole op)", fmt(L("ltier", "write", 8)), "cache-line ping-pong, one-way",
     fmt(cl), ratio(L("ltier", "write", 8), cl)],
    ["LT_write 8 B (whole op)", fmt(L("ltier", "write", 8)), "UCX ucp_put_lat (one-way)",
     fmt(L("ucx", "ucp_put_lat", 8)), ratio(L("ltier", "write", 8), L("ucx", "ucp_put_lat", 8))],
    ["LT_send 8 B", fmt(half(L("ltier", "send", 8))), "UCX tag_lat", fmt(L("ucx", "tag_lat", 8)),
     ratio(half(L("ltier", "send", 8)), L("ucx", "tag_lat", 8))],
    ["LT_RPC 8 B", fmt(half(L("ltier", "rpc", 8))), "UCX tag_lat", fmt(L("ucx", "tag_lat", 8)),
     ratio(half(L("ltier", "rpc", 8)), L("ucx", "tag_lat", 8))],
    ["LT_RPC 8 B", fmt(half(L("ltier", "rpc", 8))), "UCX ucp_am_lat",
     fmt(L("ucx", "ucp_am_lat", 8)), ratio(half(L("ltier", "rpc", 8)), L("ucx", "ucp_am_lat", 8))],
    ["LT_fetch_add 8 B (whole op)", fmt(L("ltier", "fetch_add", 8)),
     "cache-line ping-pong, one-way", fmt(cl), ratio(L("ltier", "fetch_add", 8), cl)],
]
md += ["### Latency, p50 (µs, one-way unless noted)", "",
       "LT_read/LT_write/LT_fetch_add over shm complete in the caller (native access to the "
       "owner's memory): the whole op is shown against the one-way cache-line hand-off, the "
       "conservative reading. UCX `ucp_fadd` runs pipelined (ops overlap; it printed %s µs "
       "per op), so it has no like-for-like row." % fmt(L("ucx", "ucp_fadd", 8)), ""]
md += table(["ltier", "µs", "peer", "µs", "ltier / peer"], rows) + [""]
md += ["p99 (ltier): read %s and write %s µs whole op; send %s and rpc %s µs one-way." % (
    fmt(L("ltier", "read", 8, "p99_us")), fmt(L("ltier", "write", 8, "p99_us")),
    fmt(half(L("ltier", "send", 8, "p99_us"))), fmt(half(L("ltier", "rpc", 8, "p99_us")))), ""]
# On some VMs the floor moves between rounds (the host places the two vCPUs
# now on cores that share a cache, now on cores that do not), so the medians
# above may mix placements: each round's own ratios, side by side.
rows = []
for r in range(1, rounds + 1):
    fl = half(L("floor", "cacheline", 8, rnd=r))
    tag = L("ucx", "tag_lat", 8, rnd=r)
    send, rpc = half(L("ltier", "send", 8, rnd=r)), half(L("ltier", "rpc", 8, rnd=r))
    rows.append([str(r), fmt(fl), fmt(send), fmt(rpc), fmt(tag), ratio(send, tag), ratio(rpc, tag),
                 ratio(tag, fl)])
md += ["Each round on its own (one-way p50, µs; the floor moves between rounds on some VMs, "
       "so compare within a row):", ""]
md += table(["round", "floor", "LT_send", "LT_RPC", "UCX tag_lat", "send / tag", "rpc / tag",
             "tag / floor"], rows) + [""]
mc = B("floor", "memcpy", 1048576)
one = lambda op: None if L("ltier", op, 1048576) is None else 1048576 / L("ltier", op, 1048576)
rows = [
    ["LT_read 1 MiB, one at a time (same buffers, as memcpy)", fmt(one("read")),
     "memcpy, one core", fmt(mc), ratio(one("read"), mc)],
    ["LT_write 1 MiB, one at a time (same buffers)", fmt(one("write")), "memcpy, one core",
     fmt(mc), ratio(one("write"), mc)],
    ["LT_read 1 MiB (16 in flight)", fmt(B("ltier", "read", 1048576)), "memcpy, one core", fmt(mc),
     ratio(B("ltier", "read", 1048576), mc)],
    ["LT_write 1 MiB (16 in flight)", fmt(B("ltier", "write", 1048576)), "memcpy, one core",
     fmt(mc), ratio(B("ltier", "write", 1048576), mc)],
    ["LT_write 1 MiB, one at a time", fmt(one("write")), "UCX ucp_put_bw (one buffer)",
     fmt(B("ucx", "ucp_put_bw", 1048576)), ratio(one("write"), B("ucx", "ucp_put_bw", 1048576))],
    ["LT_send 64 KiB (16 in flight, one buffer each side)", fmt(B("ltier", "send", 65536)),
     "UCX tag_bw (one buffer each side)",
     fmt(B("ucx", "tag_bw", 65536)), ratio(B("ltier", "send", 65536), B("ucx", "tag_bw", 65536))],
    ["LT_send 1 MiB (16 in flight, one buffer each side)", fmt(B("ltier", "send", 1048576)),
     "UCX tag_bw (one buffer each side)",
     fmt(B("ucx", "tag_bw", 1048576)), ratio(B("ltier", "send", 1048576),
                                              B("ucx", "tag_bw", 1048576))],
]
md += ["### Bandwidth (MB/s)", "",
       "For LT_read/LT_write, \"16 in flight\" uses 16 different 1 MiB buffers on each side "
       "(16 MiB, beyond the L2), \"one at a time\" the same 1 MiB (L2-resident), like the "
       "memcpy floor and ucx_perftest, which reuse one buffer. LT_send streams from one buffer "
       "into one buffer (16 sends and 16 receives posted), as ucx_perftest tag_bw does: like "
       "for like.", ""] + table(["ltier", "MB/s", "peer", "MB/s", "ratio"], rows) + [""]
r32 = med(("ltier", "rate", "rpc_w32", 8, "calls_per_s"))
s8 = B("ltier", "send", 8, "msgs_per_s")
u8 = B("ucx", "tag_bw", 8, "msgs_per_s")
u8m = B("ucx", "tag_bw_mt", 8, "msgs_per_s")
md += ["### Message rate, 8 B (per second)", "",
       "ltier's engine is always thread-safe (any thread may call, one polls at a time); "
       "ucx_perftest's worker is single-threaded unless `-M multi`, which the last row uses "
       "(the thread-safe worker a multi-threaded UCX application gets).", ""]
md += table(["what", "per second", "vs UCX tag_bw", "vs UCX tag_bw -M multi"],
            [["ltier LT_send streaming", fmt(s8), ratio(s8, u8), ratio(s8, u8m)],
             ["ltier RPC, 32 outstanding", fmt(r32), ratio(r32, u8), ratio(r32, u8m)],
             ["UCX tag_bw", fmt(u8), "1.00x", ratio(u8, u8m)],
             ["UCX tag_bw -M multi", fmt(u8m), ratio(u8m, u8), "1.00x"]]) + [""]
if "hog" in {r for v in data.values() for r in v}:
    md += ["### With a CPU hog on core 0 (8 B, one-way µs; LT_read whole)", "",
           "The mean is over the whole run, stalls included; ucx_perftest's percentiles "
           "cover only its last 2048 iterations, its mean (overall latency) all of them.", ""]
    # LT_read completes in the caller: its whole op, as in the latency table;
    # the others are round trips, halved.
    HOG_OPS = (("LT_read (whole op)", "read", 1), ("LT_send", "send", 2), ("LT_RPC", "rpc", 2))
    rows = []
    for label, op, div in HOG_OPS:
        rows.append([label] + [fmt(None if L("ltier", op, 8, f, "hog") is None else
                                   L("ltier", op, 8, f, "hog") / div)
                               for f in ("p50_us", "p99_us", "avg_us")])
    rows.append(["UCX tag_lat"] + [fmt(L("ucx", "tag_lat", 8, f, "hog"))
                                   for f in ("p50_us", "p99_us", "avg_us")])
    md += table(["what", "p50", "p99", "mean"], rows) + [""]
    # Like for like: ltier's percentiles over the same window as ucx_perftest's.
    rows = []
    for label, op, div in HOG_OPS:
        try:
            v = [float(x) for x in open(os.path.join(raw, "hog", "samples.%s.8" % op))]
        except (OSError, ValueError):
            continue
        tail = sorted(v[-TAIL:])
        if tail:
            rows.append([label] + [fmt(pct(tail, p) / div) for p in (50, 99)])
    if rows:
        rows.append(["UCX tag_lat"] + [fmt(L("ucx", "tag_lat", 8, f, "hog"))
                                       for f in ("p50_us", "p99_us")])
        md += ["The same run's ltier samples, its last %d only (ucx_perftest's window):" % TAIL,
               ""] + table(["what", "p50", "p99"], rows) + [""]
md += [END]
block = "\n".join(md) + "\n"
try:
    old = open(out_path).read()
except FileNotFoundError:
    old = "# ltier performance\n"
if BEGIN in old and END in old:
    new = old[:old.index(BEGIN)] + block + old[old.index(END) + len(END):].lstrip("\n")
else:
    new = old.rstrip("\n") + "\n\n" + block
open(out_path + ".tmp", "w").write(new)
os.replace(out_path + ".tmp", out_path)
print("compare_shm.sh: wrote %s" % out_path, file=sys.stderr)
PY
