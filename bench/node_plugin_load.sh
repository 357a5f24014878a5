#!/usr/bin/env bash
# The node plugin's CPU and memory with 8 local ranks (issue #10): c4-netbench --launch 8 in
# training mode, its plugin reporting once a second through c4-node-plugin, which ships node
# batches to c4-ingest-bench's endpoint (--serve-only). The node plugin's CPU time and RSS come
# from /proc over the measurement window; its message counters (received, accepted, dropped by
# reason) from its /metrics at the end, so a run that attributed nothing shows as such.
#
#   bench/node_plugin_load.sh [build-dir]
#   env: SECONDS_TOTAL=40 WINDOW=25 KUBECONFIG (the node plugin watches this node's pods; without
#        a reachable API server it still runs, but attributes no rank message and drops them)
set -euo pipefail
BUILD=${1:-build}
TOTAL=${SECONDS_TOTAL:-40}
WINDOW=${WINDOW:-25}
DIR=$(mktemp -d /tmp/c4-np-bench.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$DIR"' EXIT
echo -n token-0 >"$DIR/token"
METRICS_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

"$BUILD/bench/c4-ingest-bench" --serve-only "$((TOTAL + 10))" --nodes 1 >"$DIR/server.out" &
for _ in $(seq 100); do grep -q url= "$DIR/server.out" 2>/dev/null && break; sleep 0.1; done
URL=$(sed -n 's/.*url=\([^ ]*\).*/\1/p' "$DIR/server.out")
CA=$(sed -n 's/.* ca=\([^ ]*\).*/\1/p' "$DIR/server.out")

"$BUILD/node-plugin/c4-node-plugin" --node-name node-00000 --kubeconfig "${KUBECONFIG:-/dev/null}" \
  --socket "$DIR/agent.sock" --operator-url "$URL" --ca-file "$CA" --token-file "$DIR/token" \
  --plugin-source "" --metrics-bind-address "127.0.0.1:$METRICS_PORT" --nvml-library "" \
  --log-level warn \
  2>"$DIR/node-plugin.log" &
NP=$!
sleep 1
env C4_NAMESPACE=bench C4_JOB=llm C4_POD_NAME=llm-0 C4_NODE_NAME=node-00000 \
  C4_AGENT_SOCKET="$DIR/agent.sock" C4_REPORT_INTERVAL_MS=1000 \
  "$BUILD/nccl-net-plugin/netbench/c4-netbench" --launch 8 --steps $((TOTAL * 10)) \
  --step-compute-ms 100 --state-bytes 1M >"$DIR/netbench.out" 2>&1 &
cpu() { awk '{print $14 + $15}' "/proc/$NP/stat"; }
sleep $((TOTAL - WINDOW - 1))
c0=$(cpu)
sleep "$WINDOW"
c1=$(cpu)
rss=$(awk '/^VmRSS/ {print $2}' "/proc/$NP/status")
hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$NP/status")
tck=$(getconf CLK_TCK)
echo "node_plugin_cpu_cores=$(echo "scale=4; ($c1 - $c0) / $tck / $WINDOW" | bc)" \
  "rss_mib=$(echo "scale=1; $rss / 1024" | bc) hwm_mib=$(echo "scale=1; $hwm / 1024" | bc)" \
  "loadavg=$(cut -d' ' -f1-3 /proc/loadavg)"
# What the node plugin did with the ranks' messages: received, accepted (attributed to the pod)
# and dropped by reason. Without the Pod on this node every rank message is dropped.
echo "node plugin messages:"
curl -s "http://127.0.0.1:$METRICS_PORT/metrics" \
  | grep -E '^c4_node_plugin_(messages_(received|accepted|dropped)_total|batches_total)' || true
kill "$NP"
wait "$NP" 2>/dev/null || true
echo "node plugin log (warnings and errors, last lines):"
tail -5 "$DIR/node-plugin.log"
echo "netbench (last lines):"
tail -3 "$DIR/netbench.out"
wait
cat "$DIR/server.out"
