#!/usr/bin/env bash
# busbw of the C4 net plugin vs the plain-TCP baseline (same ring allreduce, same number of TCP
# streams, same processes), for 2 and 4 local ranks, 1 KiB ... 256 MiB (DESIGN.md §7, issue #3).
# Plugin and baseline alternate size by size so both see the same machine load.
#
#   bench/netbench_ratio.sh [build-dir]
#   env: RANKS="2 4" MIN=1K MAX=256M ITERS=5 WARMUP=1 OP=allreduce C4_SUBFLOWS=4
#
# Prints a Markdown table: ranks, size, plugin busbw, baseline busbw, ratio.
set -euo pipefail
BUILD=${1:-build}
NB=${NB:-$BUILD/nccl-net-plugin/netbench/c4-netbench}
RANKS=${RANKS:-"2 4"}
MIN=${MIN:-1K}
MAX=${MAX:-256M}
ITERS=${ITERS:-5}
WARMUP=${WARMUP:-1}
OP=${OP:-allreduce}
export C4_SOCKET_IFNAME=${C4_SOCKET_IFNAME:-lo}
export C4_SUBFLOWS=${C4_SUBFLOWS:-4}

to_bytes() {
  local v=$1
  case $v in
    *K) echo $((${v%K} * 1024)) ;;
    *M) echo $((${v%M} * 1024 * 1024)) ;;
    *G) echo $((${v%G} * 1024 * 1024 * 1024)) ;;
    *) echo "$v" ;;
  esac
}
busbw() { sed -n 's/.*"busbwGBs":\([0-9.]*\).*/\1/p' | tail -1; }

min=$(to_bytes "$MIN")
max=$(to_bytes "$MAX")
echo "| ranks | size (B) | plugin busbw (GB/s) | baseline busbw (GB/s) | plugin/baseline |"
echo "|---:|---:|---:|---:|---:|"
for n in $RANKS; do
  size=$min
  while ((size <= max)); do
    p=$("$NB" --launch "$n" --op "$OP" -b "$size" -e "$size" -n "$ITERS" -w "$WARMUP" --json | busbw)
    b=$("$NB" --launch "$n" --op "$OP" -b "$size" -e "$size" -n "$ITERS" -w "$WARMUP" --json \
      --baseline | busbw)
    ratio=$(awk -v p="$p" -v b="$b" 'BEGIN { if (b > 0) printf "%.2f", p / b; else print "n/a" }')
    echo "| $n | $size | $p | $b | $ratio |"
    size=$((size * 2))
  done
done
