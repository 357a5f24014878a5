#!/usr/bin/env bash
# Real NCCL through the C4 net plugin, on a machine with a GPU, PyTorch and NCCL (no network access
# needed: nothing is downloaded). Two ranks share one GPU with a different NCCL_HOSTID each, so NCCL
# sees two hosts and sends everything through the network plugin. In the same run:
#   1. NCCL_NET=C4 with the plugin: all_reduce, all_gather, reduce_scatter, send/recv at
#      1 KiB ... 256 MiB, every result checked; the plugin's RankReports are received on
#      C4_AGENT_SOCKET and decoded (bench/rank_report.py, standard library only);
#   2. NCCL_NET=Socket: NCCL's own socket transport, same sizes;
# then both busbw columns and their ratio (target >= 1.0), the NCCL_DEBUG=INFO lines that show which
# plugin and ABI version NCCL chose, and the newest RankReport of each rank.
#
#   bench/real-nccl.sh [path/to/libnccl-net-c4.so]      (default: build/nccl-net-plugin/...)
#   env: PYTHON=python3 MIN=1K MAX=256M FACTOR=4 OUT=<dir for logs, default a temp dir>
#
# Without a GPU (or without PyTorch/CUDA/NCCL) it says so and exits 0. The plugin built on Debian 12
# needs only libc >= 2.34, libm and libgcc_s, so it can be copied to the GPU machine with this
# directory (bench/real-nccl.sh, bench/real_nccl.py, bench/rank_report.py).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
PLUGIN=${1:-${PLUGIN:-$here/../build/nccl-net-plugin/libnccl-net-c4.so}}
PYTHON=${PYTHON:-python3}
MIN=${MIN:-1K}
MAX=${MAX:-256M}
FACTOR=${FACTOR:-4}

skip() {
  echo "real-nccl: $* -- real NCCL was not run (nothing to compare); exiting 0"
  exit 0
}
command -v "$PYTHON" >/dev/null 2>&1 || skip "no $PYTHON"
probe=$("$PYTHON" - <<'PY' 2>&1 || true
try:
    import torch
    import torch.distributed as dist
except Exception as e:  # no torch at all
    print("no PyTorch (%s)" % e)
    raise SystemExit(0)
if not torch.cuda.is_available():
    print("no GPU: torch.cuda.is_available() is False (torch %s)" % torch.__version__)
elif not dist.is_available() or not dist.is_nccl_available():
    print("PyTorch %s has no NCCL backend" % torch.__version__)
else:
    v = torch.cuda.nccl.version()
    v = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    print("ok torch %s, NCCL %s, %s" % (torch.__version__, v, torch.cuda.get_device_name(0)))
PY
)
[[ $probe == ok* ]] || skip "$probe"
[[ -f $PLUGIN ]] || { echo "real-nccl: plugin not found: $PLUGIN" >&2; exit 1; }
PLUGIN=$(cd "$(dirname "$PLUGIN")" && pwd)/$(basename "$PLUGIN")
OUT=${OUT:-$(mktemp -d /tmp/c4-real-nccl.XXXXXX)}
mkdir -p "$OUT"
echo "real-nccl: ${probe#ok }; plugin $PLUGIN; logs in $OUT"
echo "real-nccl: load average $(cut -d' ' -f1-3 /proc/loadavg)"

export NCCL_NET_PLUGIN=$PLUGIN
export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} C4_SOCKET_IFNAME=${C4_SOCKET_IFNAME:-lo}
export C4_NODE_NAME=${C4_NODE_NAME:-real-nccl} C4_REPORT_INTERVAL_MS=${C4_REPORT_INTERVAL_MS:-500}

# 1. the C4 plugin, with a stand-in node agent decoding its reports
agent=$OUT/agent.sock
"$PYTHON" "$here/rank_report.py" listen "$agent" --timeout 3600 >"$OUT/reports.jsonl" &
listener=$!
trap 'kill "$listener" 2>/dev/null || true' EXIT
for _ in $(seq 100); do [[ -S $agent ]] && break; sleep 0.05; done
rc=0
C4_AGENT_SOCKET=$agent "$PYTHON" "$here/real_nccl.py" run --net C4 --out "$OUT/c4.jsonl" \
  --min "$MIN" --max "$MAX" --factor "$FACTOR" >"$OUT/c4.log" 2>&1 || rc=$?
sleep 1  # one more report interval
kill -TERM "$listener" 2>/dev/null || true
wait "$listener" 2>/dev/null || true
trap - EXIT
# 2. NCCL's own socket transport, same everything else
"$PYTHON" "$here/real_nccl.py" run --net Socket --out "$OUT/socket.jsonl" \
  --min "$MIN" --max "$MAX" --factor "$FACTOR" >"$OUT/socket.log" 2>&1 || rc=$((rc ? rc : $?))

echo
echo "== NCCL_NET=C4: what NCCL loaded and chose (NCCL_DEBUG=INFO)"
grep -E "NET/Plugin|Assigned NET plugin|Using network|Initialized NET plugin|NET/C4 .*(device|planeId)" \
  "$OUT/c4.log" | sed 's/^/  /' | sort -u | head -20 || true
echo "== NCCL_NET=Socket"
grep -E "Assigned NET plugin|Using network|NET/Socket : Using" "$OUT/socket.log" | sed 's/^/  /' |
  sort -u | head -8 || true
echo
echo "== busbw, 2 ranks on one GPU as two hosts (NCCL_HOSTID), load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$PYTHON" "$here/real_nccl.py" compare "$OUT/c4.jsonl" "$OUT/socket.jsonl" || rc=$((rc ? rc : $?))
echo
echo "== RankReports the plugin sent to C4_AGENT_SOCKET (newest per rank, decoded)"
"$PYTHON" "$here/rank_report.py" summary "$OUT/reports.jsonl" || rc=$((rc ? rc : $?))
if ((rc != 0)); then
  echo "real-nccl: FAILED (rc $rc); see $OUT/c4.log and $OUT/socket.log" >&2
fi
exit $rc
