#!/usr/bin/env bash
# Where the time of a small allreduce goes: 2 local ranks, ring allreduce of SIZE (1 KiB), over the
# raw TCP ring (which blocks in poll() when idle), the same ring spinning with sched_yield() when
# idle (as NCCL's proxy thread does, and as c4-netbench does over a plugin), the plugin, and
# optionally another build of the plugin (OLD_PLUGIN, e.g. one built from an earlier commit) -- all
# driven by the same c4-netbench. For each: time per allreduce,
# context switches and CPU time per allreduce (getrusage over all threads of both ranks), and, when
# strace is installed, the system calls per allreduce by name (strace -f -c; tracing slows every
# call, so only the counts are meaningful there, not the times).
#
#   bench/latency_anatomy.sh [build-dir]
#   env: SIZE=1K ITERS=5000 REPS=3 STRACE_ITERS=2000 OLD_PLUGIN=/path/to/older/libnccl-net-c4.so
set -euo pipefail
BUILD=${1:-build}
NB=${NB:-$BUILD/nccl-net-plugin/netbench/c4-netbench}
PLUGIN=${PLUGIN:-$BUILD/nccl-net-plugin/libnccl-net-c4.so}
SIZE=${SIZE:-1K}
ITERS=${ITERS:-5000}
REPS=${REPS:-3}
STRACE_ITERS=${STRACE_ITERS:-2000}
export C4_SOCKET_IFNAME=${C4_SOCKET_IFNAME:-lo}
export C4_SUBFLOWS=${C4_SUBFLOWS:-4}
unset C4_AGENT_SOCKET

variants=(ring ring-spin plugin)
[[ -n ${OLD_PLUGIN:-} ]] && variants+=(old)
args_of() {
  case $1 in
    ring) echo "--baseline" ;;
    ring-spin) echo "--baseline --spin" ;;
    plugin) echo "--plugin $PLUGIN" ;;
    old) echo "--plugin $OLD_PLUGIN" ;;
  esac
}
field() { sed -n "s/.*\"$1\":\\([0-9.]*\\).*/\\1/p" | tail -1; }

echo "# $(date -u +%FT%TZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg);" \
  "2 ranks, $SIZE allreduce, C4_SUBFLOWS=$C4_SUBFLOWS"
echo
echo "| variant | time / allreduce (us) | context switches / allreduce | CPU us / allreduce |"
echo "|---|---|---:|---:|"
declare -A T C U
for _ in $(seq "$REPS"); do
  for v in "${variants[@]}"; do
    # shellcheck disable=SC2046
    out=$("$NB" --launch 2 -b "$SIZE" -e "$SIZE" -n "$ITERS" -w 200 --json $(args_of "$v"))
    T[$v]+=" $(field timeUs <<<"$out")"
    C[$v]+=" $(field cswPerOp <<<"$out")"
    U[$v]+=" $(field cpuUsPerOp <<<"$out")"
  done
done
stats() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END {
  m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
  printf "%.1f (%.1f-%.1f)", m, a[1], a[NR] }'; }
for v in "${variants[@]}"; do
  echo "| $v | $(stats <<<"${T[$v]}") | $(stats <<<"${C[$v]}") | $(stats <<<"${U[$v]}") |"
done

if command -v strace >/dev/null; then
  echo
  echo "System calls per allreduce, both ranks, all threads (strace -f -c, $STRACE_ITERS allreduces):"
  echo
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  for v in "${variants[@]}"; do
    # shellcheck disable=SC2046
    strace -f -c -o "$tmp/$v" "$NB" --launch 2 -b "$SIZE" -e "$SIZE" -n "$STRACE_ITERS" -w 0 \
      $(args_of "$v") >/dev/null 2>&1 || true
    per=$(awk -v n="$STRACE_ITERS" '$1 ~ /^[0-9.]+$/ && $NF != "total" && $4 ~ /^[0-9]+$/ {
      printf "%s %.2f\n", $NF, $4 / n }' "$tmp/$v" | sort -k2 -g -r)
    total=$(awk '{ t += $2 } END { printf "%.1f", t }' <<<"$per")
    top=$(awk '$2 >= 0.05 && NR <= 8 { printf " %s %.1f,", $1, $2 }' <<<"$per")
    echo "- $v: $total calls per allreduce:${top%,}"
  done
fi
echo
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
