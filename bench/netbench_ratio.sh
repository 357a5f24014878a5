#!/usr/bin/env bash
# The C4 net plugin against the limit, all measured in one run on loopback with N local ranks
# (DESIGN targets: >= 0.9 of the raw ring at >= 16 MiB, <= 1.2x its time at 1-64 KiB).
#
#   limit        ring data movement over plain TCP, same processes and streams, nothing computed
#                (c4-netbench --op pump --baseline): what a ring allreduce cannot beat here
#   iperf3       for 2 ranks: iperf3 --bidir -P <streams> between the same two endpoints
#                (per-direction GB/s; the physical limit measured by a third-party tool)
#   ring         the same ring allreduce over plain TCP sockets (c4-netbench --baseline)
#   plugin       the ring allreduce over libnccl-net-c4.so
#   notel        the same plugin compiled with telemetry out (libnccl-net-c4-notelemetry.so)
#
# Variants alternate size by size and repetition by repetition, so all see the same machine load.
# Each cell is the median over REPS (min-max in the detail table). busbw is what each rank sends
# per second; for the pump that is all it moves.
#
#   bench/netbench_ratio.sh [build-dir]
#   env: RANKS="2 4" SIZES="1K 4K 16K 64K 16M 64M" REPS=5 ITERS_SMALL=2000 ITERS_LARGE=10
#        C4_SUBFLOWS=4 IPERF_SECONDS=3 (IPERF=0 skips iperf3)
set -euo pipefail
BUILD=${1:-build}
NB=${NB:-$BUILD/nccl-net-plugin/netbench/c4-netbench}
PLUGIN=${PLUGIN:-$BUILD/nccl-net-plugin/libnccl-net-c4.so}
NOTEL=${NOTEL:-$BUILD/nccl-net-plugin/libnccl-net-c4-notelemetry.so}
RANKS=${RANKS:-"2 4"}
SIZES=${SIZES:-"1K 4K 16K 64K 16M 64M"}
REPS=${REPS:-5}
ITERS_SMALL=${ITERS_SMALL:-2000}
ITERS_LARGE=${ITERS_LARGE:-10}
IPERF=${IPERF:-1}
IPERF_SECONDS=${IPERF_SECONDS:-3}
export C4_SOCKET_IFNAME=${C4_SOCKET_IFNAME:-lo}
export C4_SUBFLOWS=${C4_SUBFLOWS:-4}
unset C4_AGENT_SOCKET

to_bytes() {
  local v=$1
  case $v in
    *K) echo $((${v%K} * 1024)) ;;
    *M) echo $((${v%M} * 1024 * 1024)) ;;
    *G) echo $((${v%G} * 1024 * 1024 * 1024)) ;;
    *) echo "$v" ;;
  esac
}
field() { sed -n "s/.*\"$1\":\\([0-9.]*\\).*/\\1/p" | tail -1; }

# run <variant> <ranks> <bytes>: prints "busbw timeUs cswPerOp cpuUsPerOp"
run() {
  local variant=$1 n=$2 size=$3 iters=$ITERS_LARGE warmup=2 args=()
  if ((size < 1048576)); then iters=$ITERS_SMALL; warmup=200; fi
  case $variant in
    limit) args=(--op pump --baseline) ;;
    ring) args=(--baseline) ;;
    plugin) args=(--plugin "$PLUGIN") ;;
    notel) args=(--plugin "$NOTEL") ;;
  esac
  local out
  out=$("$NB" --launch "$n" -b "$size" -e "$size" -n "$iters" -w "$warmup" --json "${args[@]}")
  echo "$(field busbwGBs <<<"$out") $(field timeUs <<<"$out") $(field cswPerOp <<<"$out")" \
    "$(field cpuUsPerOp <<<"$out")"
}

iperf_bidir() {  # per-direction GB/s of iperf3 --bidir -P $C4_SUBFLOWS on loopback
  local port=$((20000 + RANDOM % 20000))
  iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
  local srv=$!
  local out=""
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    if out=$(iperf3 -c 127.0.0.1 -p "$port" --bidir -P "$C4_SUBFLOWS" -t "$IPERF_SECONDS" -f m \
      2>/dev/null); then break; fi
    out=""
    sleep 0.2
  done
  wait "$srv" 2>/dev/null || true
  awk '/^\[SUM\]\[(TX|RX)-C\].*receiver/ { for (i = 1; i <= NF; i++) if ($i == "Mbits/sec") {
         s += $(i - 1); k++ } } END { if (k) printf "%.3f", s / k / 8000; else print "n/a" }' \
    <<<"$out"
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END {
  if (NR == 0) { print "n/a"; exit } m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
  printf "%.4g", m }'; }
range() { tr ' ' '\n' | grep -v '^$' | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END {
  printf "%.3g-%.3g", lo, hi }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b;
  else print "n/a" }'; }

echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) CPUs; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# streams per connection: C4_SUBFLOWS=$C4_SUBFLOWS; repetitions: $REPS"
declare -A B T C U
IPERF_RUNS=""
for rep in $(seq 1 "$REPS"); do
  for n in $RANKS; do
    if ((IPERF == 1)) && ((n == 2)) && command -v iperf3 >/dev/null; then
      IPERF_RUNS+=" $(iperf_bidir)"
    fi
    for s in $SIZES; do
      size=$(to_bytes "$s")
      for v in limit ring plugin notel; do
        read -r b t c u <<<"$(run "$v" "$n" "$size")"
        key="$n,$s,$v"
        B[$key]+=" $b"
        T[$key]+=" $t"
        C[$key]+=" $c"
        U[$key]+=" $u"
      done
    done
  done
done

echo
echo "## busbw (GB/s, median of $REPS) and ratios"
echo
echo "| ranks | size | limit (pump) | raw ring | plugin | plugin, telemetry out | plugin / ring | plugin / limit | ring / limit | telemetry cost |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for n in $RANKS; do
  for s in $SIZES; do
    l=$(median <<<"${B[$n,$s,limit]}"); r=$(median <<<"${B[$n,$s,ring]}")
    p=$(median <<<"${B[$n,$s,plugin]}"); q=$(median <<<"${B[$n,$s,notel]}")
    cost=$(awk -v p="$p" -v q="$q" 'BEGIN { if (q > 0) printf "%+.1f%%", (q - p) / q * 100;
      else print "n/a" }')
    echo "| $n | $s | $l | $r | $p | $q | $(ratio "$p" "$r") | $(ratio "$p" "$l") | $(ratio "$r" "$l") | $cost |"
  done
done
if [[ -n $IPERF_RUNS ]]; then
  echo
  echo "iperf3 --bidir -P $C4_SUBFLOWS, 2 endpoints, per direction: $(median <<<"$IPERF_RUNS") GB/s" \
    "(range $(range <<<"$IPERF_RUNS"))"
fi
echo
echo "## time per operation (us, median of $REPS; plugin / ring is the latency ratio)"
echo
echo "| ranks | size | limit (pump) | raw ring | plugin | plugin, telemetry out | plugin / ring |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
for n in $RANKS; do
  for s in $SIZES; do
    l=$(median <<<"${T[$n,$s,limit]}"); r=$(median <<<"${T[$n,$s,ring]}")
    p=$(median <<<"${T[$n,$s,plugin]}"); q=$(median <<<"${T[$n,$s,notel]}")
    echo "| $n | $s | $l | $r | $p | $q | $(ratio "$p" "$r") |"
  done
done
echo
echo "## detail: range over repetitions; context switches and CPU time per operation (all ranks)"
echo
echo "| ranks | size | variant | busbw range | time range (us) | context switches / op | CPU us / op |"
echo "|---:|---:|---|---|---|---:|---:|"
for n in $RANKS; do
  for s in $SIZES; do
    for v in limit ring plugin notel; do
      k="$n,$s,$v"
      echo "| $n | $s | $v | $(range <<<"${B[$k]}") | $(range <<<"${T[$k]}") |" \
        "$(median <<<"${C[$k]}") | $(median <<<"${U[$k]}") |"
    done
  done
done
echo
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
