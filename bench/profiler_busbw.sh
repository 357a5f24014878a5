#!/usr/bin/env bash
# What the NCCL profiler plugin costs a job: allreduce bus bandwidth with libnccl-profiler-c4.so
# loaded against the same run without it (issue target: >= 0.99), measured in one script on
# loopback with N local c4-netbench ranks over plain TCP (--baseline, the stand-in for NCCL's
# native transports). With the plugin, c4-netbench tells it of every collective and message as
# NCCL does (a Coll per allreduce, a ProxyOp and a ProxyStep per message), and the plugin's
# reporter sends a RankReport every interval to a datagram sink like the node plugin's.
#
# The two variants alternate size by size and repetition by repetition, so both see the same
# machine load. Each cell is the median busbw over REPS; the ratio is profiler / none.
#
#   bench/profiler_busbw.sh [build-dir]
#   env: RANKS=4 SIZES="64K 1M 16M" REPS=5 ITERS_SMALL=400 ITERS_LARGE=20 C4_SUBFLOWS=4
#        C4_REPORT_INTERVAL_MS=1000
set -euo pipefail
BUILD=${1:-build}
NB=${NB:-$BUILD/nccl-net-plugin/netbench/c4-netbench}
PROFILER=${PROFILER:-$BUILD/nccl-profiler-plugin/libnccl-profiler-c4.so}
RANKS=${RANKS:-4}
SIZES=${SIZES:-"64K 1M 16M"}
REPS=${REPS:-5}
ITERS_SMALL=${ITERS_SMALL:-400}
ITERS_LARGE=${ITERS_LARGE:-20}
export C4_SUBFLOWS=${C4_SUBFLOWS:-4}
export C4_REPORT_INTERVAL_MS=${C4_REPORT_INTERVAL_MS:-1000}
for f in "$NB" "$PROFILER"; do
  [[ -e $f ]] || { echo "profiler_busbw: $f not built" >&2; exit 1; }
done

# The node plugin's stand-in: an abstract datagram socket that drains what the reporters send.
SINK="c4-profiler-bench-$$"
python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("\0" + sys.argv[1])
print("ready", flush=True)
while True:
    s.recv(1 << 18)
' "$SINK" >/dev/null &
SINK_PID=$!
trap 'kill $SINK_PID 2>/dev/null || true' EXIT
sleep 0.3
export C4_AGENT_SOCKET="@$SINK" C4_JOB=bench C4_NAMESPACE=default

busbw() {  # busbw <size> <iters> <profiler path or ''>
  "$NB" --launch "$RANKS" --baseline --op allreduce -b "$1" -e "$1" -n "$2" -w 2 --json \
    --profiler "$3" 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    line = line.strip()
    if line.startswith("{"):
        d = json.loads(line)
        if "busbwGBs" in d:
            print(d["busbwGBs"])
            break'
}

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

printf '%-8s %6s %14s %14s %8s\n' size ranks "none GB/s" "profiler GB/s" ratio
for size in $SIZES; do
  iters=$ITERS_SMALL
  [[ $size == *M ]] && iters=$ITERS_LARGE
  none=() prof=()
  for ((r = 0; r < REPS; r++)); do
    none+=("$(busbw "$size" "$iters" '')")
    prof+=("$(busbw "$size" "$iters" "$PROFILER")")
  done
  n=$(printf '%s\n' "${none[@]}" | median)
  p=$(printf '%s\n' "${prof[@]}" | median)
  printf '%-8s %6s %14.3f %14.3f %8.3f\n' "$size" "$RANKS" "$n" "$p" \
    "$(python3 -c "print($p / $n if $n > 0 else 0)")"
done
