#!/usr/bin/env bash
# bench/rank_report.py (the standard-library decoder bench/real-nccl.sh uses on a GPU machine)
# decodes the RankReports the plugin really sends: 2 c4-netbench ranks report to it over
# C4_AGENT_SOCKET; both ranks' newest reports name their peer and count the bytes moved.
# A connection a rank closed before its newest report still shows in the summary, with the
# counters it was last reported with (the plugin reports open connections only, and which of a
# rank's connections closes before its last tick is a race).
#   rank_report_decoder_test.sh <python3> <bench/rank_report.py> <c4-netbench>
set -euo pipefail
py=$1 decoder=$2 netbench=$3
dir=$(mktemp -d)
trap 'kill "${listener:-}" 2>/dev/null || true; rm -rf "$dir"' EXIT
sock=$dir/agent.sock

# The summary of a rank whose send connection closed before its newest report (a fixture: the
# order the plugin's reports came in on a CI run).
conn() {  # id direction bytes
  printf '{"id":%d,"direction":"%s","peerRank":1,"peerNode":"n","bytes":%d,"ops":1,"inflight":0,' "$1" "$2" "$3"
  printf '"wait":{"p50Us":0,"p99Us":0},"transfer":{"p50Us":0,"p99Us":0},"subflows":[{"bytes":%d}]}' "$3"
}
report() {  # seq connections...
  local seq=$1
  shift
  local IFS=,
  printf '{"kind":"RankReport","id":{"rank":0,"node":"n","pod":"","pid":7},"seq":%d,"part":0,' "$seq"
  printf '"intervalMs":20,"planVersion":-1,"droppedMessages":0,"connections":[%s]}\n' "$*"
}
{
  report 1 "$(conn 1 send 100)" "$(conn 2 recv 100)"
  report 2 "$(conn 1 send 300)" "$(conn 2 recv 200)"
  report 3 "$(conn 2 recv 400)"
} >"$dir/fixture.jsonl"
fixture=$("$py" "$decoder" summary "$dir/fixture.jsonl")
grep -qF "conn 1 send peer rank 1 node n: 300 bytes" <<<"$fixture" &&
  grep -qF "(closed; last reported in seq 2)" <<<"$fixture" &&
  grep -qF "conn 2 recv peer rank 1 node n: 400 bytes" <<<"$fixture" || {
  echo "FAIL: the summary lost the connection closed before the newest report:" >&2
  echo "$fixture" >&2
  exit 1
}

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
