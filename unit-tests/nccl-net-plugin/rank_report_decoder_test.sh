#!/usr/bin/env bash
# bench/rank_report.py (the standard-library decoder bench/real-nccl.sh uses on a GPU machine)
# decodes the RankReports the plugin really sends: 2 c4-netbench ranks report to it over
# C4_AGENT_SOCKET; both ranks' newest reports name their peer and count the bytes moved.
#   rank_report_decoder_test.sh <python3> <bench/rank_report.py> <c4-netbench>
set -euo pipefail
py=$1 decoder=$2 netbench=$3
dir=$(mktemp -d)
trap 'kill "$listener" 2>/dev/null || true; rm -rf "$dir"' EXIT
sock=$dir/agent.sock
"$py" "$decoder" listen "$sock" --timeout 30 >"$dir/messages.jsonl" &
listener=$!
for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
[[ -S $sock ]] || { echo "FAIL: decoder did not bind $sock" >&2; exit 1; }
C4_SOCKET_IFNAME=lo C4_AGENT_SOCKET=$sock C4_REPORT_INTERVAL_MS=20 C4_NODE_NAME=decoder-node \
  "$netbench" --launch 2 -b 64K -e 4M -f 4 -n 20 -w 1 >/dev/null
sleep 0.2
kill -TERM "$listener"
wait "$listener" || true
summary=$("$py" "$decoder" summary "$dir/messages.jsonl")
echo "$summary"
status=0
for want in "RankReport rank=0 node=decoder-node" "RankReport rank=1 node=decoder-node" \
  "send peer rank 1 node decoder-node" "recv peer rank 0 node decoder-node"; do
  grep -qF "$want" <<<"$summary" || { echo "FAIL: no '$want' in the decoded reports" >&2; status=1; }
done
if grep -q '"undecodable"' "$dir/messages.jsonl"; then
  echo "FAIL: undecodable datagrams:" >&2
  grep '"undecodable"' "$dir/messages.jsonl" >&2
  status=1
fi
# Every connection moved bytes (cumulative counters are non-zero).
if grep -E "conn [0-9]+ (send|recv).*: 0 bytes" <<<"$summary"; then
  echo "FAIL: a connection reports 0 bytes" >&2
  status=1
fi
exit $status
