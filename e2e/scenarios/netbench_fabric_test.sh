#!/usr/bin/env bash
# e2e: c4-netbench across emulated hosts. Two ranks run in the network namespaces of node-0 and
# node-1, which sit on different leaves of the netns fabric, so every byte crosses a spine. Ring
# allreduce and all-to-all run over the plugin and over the plain-TCP baseline; c4-netbench
# verifies every word and exits non-zero on a mismatch or a transport error. Root only (exit 77 =
# skipped otherwise).
#
#   netbench_fabric_test.sh <c4-netbench> <work dir>
set -euo pipefail
NETBENCH=${1:?usage: $0 <c4-netbench> <work dir>}
DIR=${2:?usage: $0 <c4-netbench> <work dir>}
FABRIC="$(cd "$(dirname "$0")/../testenv" && pwd)/fabric.sh"
if [[ $(id -u) -ne 0 ]]; then echo "SKIP: the netns fabric needs root"; exit 77; fi

cleanup() { "$FABRIC" down --dir "$DIR" >/dev/null 2>&1 || true; }
trap cleanup EXIT
rm -rf "$DIR" && mkdir -p "$DIR"
"$FABRIC" up --dir "$DIR" --nodes 2 --leaves 2 --spines 2 --link-rate 1gbit
ADDR0=$("$FABRIC" ip --dir "$DIR" node-0)
echo "node-0 at $ADDR0 (leaf-0), node-1 on leaf-1"

port=29500
run_pair() {  # run_pair <label> <netbench args...>
  local label=$1; shift
  port=$((port + 1))
  local common=(--world-size 2 --master-addr "$ADDR0" --master-port "$port" "$@")
  "$FABRIC" exec --dir "$DIR" node-0 env C4_SOCKET_IFNAME=eth0 C4_NODE_NAME=node-0 \
    timeout 120 "$NETBENCH" --rank 0 "${common[@]}" >"$DIR/$label.rank0.log" 2>&1 &
  local pid0=$!
  "$FABRIC" exec --dir "$DIR" node-1 env C4_SOCKET_IFNAME=eth0 C4_NODE_NAME=node-1 \
    timeout 120 "$NETBENCH" --rank 1 "${common[@]}" >"$DIR/$label.rank1.log" 2>&1 &
  local pid1=$!
  local rc0=0 rc1=0
  wait $pid0 || rc0=$?
  wait $pid1 || rc1=$?
  if ((rc0 != 0 || rc1 != 0)); then
    echo "FAIL: $label: rank exit codes $rc0/$rc1" >&2
    tail -n 20 "$DIR/$label.rank0.log" "$DIR/$label.rank1.log" >&2
    exit 1
  fi
  # Rank 0 prints the result table: the 4 MiB row must be there with 0 wrong words.
  if ! awk '$1 == 4194304 && $NF == 0 { found = 1 } END { exit !found }' "$DIR/$label.rank0.log"; then
    echo "FAIL: $label: no clean result row for 4 MiB" >&2
    cat "$DIR/$label.rank0.log" >&2
    exit 1
  fi
  echo "ok: $label"
  grep -E '^\s*(#|4194304)' "$DIR/$label.rank0.log" | tail -n 2
}

for op in allreduce alltoall; do
  run_pair "plugin-$op" --op "$op" -b 1K -e 4M -n 3 -w 1
  run_pair "baseline-$op" --op "$op" -b 1K -e 4M -n 3 -w 1 --baseline
done
echo "PASS: c4-netbench across the fabric (plugin and baseline, allreduce and all-to-all)"
