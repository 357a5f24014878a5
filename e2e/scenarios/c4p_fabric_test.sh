#!/usr/bin/env bash
# e2e: C4P on the emulated fabric (root only; exit 77 = skipped otherwise). A private test cluster
# of 4 KWOK nodes on 2 leaves and 2 spines of the netns fabric, every link shaped to RATE (host
# links too), path mode sport (a TCP flow from a host takes spine sport % 2). The operator runs
# with --traffic-planning and its report endpoint; the node plugin runs as a DaemonSet (both set up
# by lib/c4.sh, as in the other scenarios). A Fabric object describes the fabric (sourcePortModulo, base 0).
#
# Jobs: 4 ranks of c4-netbench allreduce through the plugin, one per node, placed so that the
# ring alternates leaves (every hop crosses the spine: 2 connections per leaf and direction on 2
# uplinks; a job placed otherwise is recreated). Each pod waits for a go-file the test writes once
# the job is placed; an Enforce job's ranks then start before their plan exists, and the plugin's
# connections wait for it (C4_PLAN_WAIT_MS, set by the operator) before they bind their ports.
#   1. Enforce: the plan ConfigMap (version >= 1, every cross-leaf pair on both paths) and the
#      busbw of RUNS runs;
#   2. Off: the same job RUNS times with ephemeral ports through the same sport rule;
#      reports both, asserts planned >= RATIO x unplanned (mean) and planned >= IDEAL_FRACTION of
#      the ideal the links allow (host link rate: every rank sends one ring connection). The
#      fabric runs jumbo frames (MTU 9000, as training fabrics do): TCP then carries 8948 payload
#      bytes per 9014-byte frame (99.3 %) and the planned ring reaches 93-94 % of the nominal
#      rate. At MTU=1500 (1448 of 1514, 95.6 %, the incoming connection's ACKs sharing the link)
#      it reaches 85-87 %, 89-92 % of the payload rate: run it with IDEAL_FRACTION=0.8;
#   3. Enforce, C4D acting (not dry run), a gray failure mid-run: a spine link stays up but drops
#      every packet (fabric.sh link set --loss 100); C4P finds it from telemetry and a new plan
#      version (weights off the dead path) must be in the ConfigMap within 5 s; the link heals
#      after HOLD_DOWN s (data already queued on the dead subflow waits for it: TCP cannot move
#      it). C4D's hang verdicts on the stalled connections are left to C4P (Event "deferred"),
#      the job completes without a restart, and the busbw of every size is printed.
#   4. Enforce, C4D acting, a spine link goes down for good mid-run (fabric.sh link down: the
#      fabric's routing moves the flows pinned to it to the other spine) and the test, as the
#      fabric's monitoring would, marks it failed in the Fabric's spec.links: a new plan version
#      within 5 s, the job completes with the link still down and no restart, and the last size
#      (run entirely after the cut) reaches >= DOWN_FRACTION of what the remaining link allows
#      (one uplink of the cut leaf carries that leaf's two ring connections: half the ideal).
# Numbers: docs/benchmarks.md, "C4P on the emulated fabric".
#
#   c4p_fabric_test.sh <build dir> <work dir>   (C4_E2E_KEEP=1: leave it all running)
#   env: RATE (100mbit) RUNS (3) RATIO (1.3) IDEAL_FRACTION (0.9) HOLD_DOWN (4) MTU (9000)
#        DOWN_FRACTION (0.75)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RATE=${RATE:-100mbit}
RUNS=${RUNS:-3}
RATIO=${RATIO:-1.3}
IDEAL_FRACTION=${IDEAL_FRACTION:-0.9}
HOLD_DOWN=${HOLD_DOWN:-4}
MTU=${MTU:-9000}
DOWN_FRACTION=${DOWN_FRACTION:-0.75}
FABRIC=$ROOT/e2e/testenv/fabric.sh
# shellcheck source=lib/c4.sh
source "$ROOT/e2e/scenarios/lib/c4.sh"
c4_scenario_init "${1:-}" "${2:-}"

# The hosts run BBR, not the fabric's default reno: the planned ring measured 80 % of the
# nominal rate with reno (3 runs, 2026-12-04) against 86 % with BBR. Likely cause: a
# connection's two subflows share the host link, reno's sawtooth lets one fall behind the other,
# and the one ahead idles at the end of every slice. No link here is cut to a fraction of its
# rate, where BBR lost thousands of segments (the C4D slow-link scenario).
c4_cluster_up 4 --link-rate "$RATE" --path-mode sport --tcp-cc bbr --mtu "$MTU"
RATE_GBPS=$(python3 -c '
import re, sys
m = re.fullmatch(r"([0-9.]+)(kbit|mbit|gbit)", sys.argv[1])
print(float(m.group(1)) * {"kbit": 1e-6, "mbit": 1e-3, "gbit": 1}[m.group(2)])' "$RATE")

kubectl apply -f "$ROOT/crds/fabric.yaml" >/dev/null
kubectl wait --for condition=established crd/fabrics.c4.dev --timeout=60s >/dev/null

# ---- The Fabric: what fabric.sh built ----------------------------------------------------------
kubectl apply -f - >/dev/null <<YAML
apiVersion: c4.dev/v1alpha1
kind: Fabric
metadata: {name: e2e}
spec:
  spines: 2
  uplinksPerLeaf: 2
  uplinkSpeedGbps: $RATE_GBPS
  hostLinkSpeedGbps: $RATE_GBPS
  pathSelection: {rule: sourcePortModulo, sourcePortModulo: {base: 0}}
YAML

# ---- PKI, RBAC, the operator with traffic planning, the node plugin DaemonSet (lib/c4.sh) ------
# --link-hold 20: a link state found from telemetry (the gray failure, healed after HOLD_DOWN s)
# is lifted before the link-down run, whose re-plan must come from the Fabric's spec.
c4_install_c4 --traffic-planning --link-hold 20 --log-level "${LOG_LEVEL:-info}"
wait_until 30 "Fabric accepted" bash -c \
  "kubectl get fabric e2e -o jsonpath='{.status.conditions[0].status}' | grep -qx True"
echo "operator (traffic planning) and node plugins running; Fabric e2e accepted"

# ---- Jobs --------------------------------------------------------------------------------------
plan_version() {
  kubectl get configmap -n "$NS" "$1-c4-plan" -o jsonpath='{.metadata.annotations.c4\.dev/plan-version}' \
    2>/dev/null || true
}
placement_alternates() {  # 0 when pods 0..3 of job $1 sit on alternating leaves
  local leaves="" i node
  for i in 0 1 2 3; do
    node=$(kubectl get pod -n "$NS" "$1-$i" -o jsonpath='{.spec.nodeName}' 2>/dev/null)
    [[ -n $node ]] || return 2
    leaves+=$(kubectl get node "$node" -o jsonpath='{.metadata.labels.c4\.dev/leaf}')" "
  done
  python3 -c 'import sys; l = sys.argv[1].split(); sys.exit(0 if all(l[i] != l[(i+1)%4] for i in range(4)) else 1)' "$leaves"
}
scheduled() {
  for i in 0 1 2 3; do
    [[ -n $(kubectl get pod -n "$NS" "$1-$i" -o jsonpath='{.spec.nodeName}' 2>/dev/null) ]] || return 1
  done
}
# start_job <name> <mode> <netbench args...>: created, placed alternating, released.
# DRY_RUN=false: C4D acts on what it finds (one restart allowed, so a restart shows in status).
start_job() {
  local name=$1 mode=$2 try dry_run=${DRY_RUN:-true} max_restarts=0
  [[ $dry_run == true ]] || max_restarts=1
  shift 2
  for ((try = 0; try < 30; try++)); do  # 1 in 3 placements alternate
    kubectl apply -n "$NS" -f - >/dev/null <<YAML
apiVersion: c4.dev/v1alpha1
kind: TrainingJob
metadata: {name: $name}
spec:
  replicas: 4
  # c4-netbench (the training stand-in) moves its bytes and reports them through C4's net plugin.
  telemetry: {source: NetPlugin}
  trafficPlanning: {mode: "$mode", subflowsPerConnection: 2}
  # C4D reports only (dryRun) in the comparison runs: they measure C4P, and unplanned runs
  # collide on a spine by design, which C4D may read as a late rank. The cut runs let C4D act.
  faultTolerance: {maxRestarts: $max_restarts, dryRun: $dry_run}
  template:
    metadata:
      annotations: {c4.dev/runner: process}
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {matchLabels: {c4.dev/job-name: $name}}
            topologyKey: kubernetes.io/hostname
      containers:
      - name: trainer
        image: c4/netbench
        command: [/bin/bash, -c]
        args: ["until [ -e $WORK/go-$name ]; do sleep 0.2; done; exec $NETBENCH --json $*"]
YAML
    wait_until 60 "$name scheduled" scheduled "$name"
    if placement_alternates "$name"; then break; fi
    kubectl delete tj -n "$NS" "$name" --wait=true >/dev/null
    wait_until 60 "$name pods gone" bash -c "[[ -z \$(kubectl get pods -n $NS -l c4.dev/job-name=$name -o name) ]]"
  done
  placement_alternates "$name" || fail "$name: no alternating placement in 30 tries"
  # Released at once, plan or not: the ranks' connections wait for the plan (C4_PLAN_WAIT_MS).
  if [[ $mode == Enforce ]]; then
    [[ $(kubectl get pod -n "$NS" "$name-0" -o jsonpath='{.spec.containers[0].env[?(@.name=="C4_PLAN_WAIT_MS")].value}') == 60000 ]] \
      || fail "$name: the Enforce job's pods lack C4_PLAN_WAIT_MS"
  fi
  touch "$WORK/go-$name"
}
finish_job() {  # finish_job <name>: waits for Succeeded, prints rank 0's JSON lines
  wait_until "${2:-180}" "$1 Succeeded" bash -c \
    "[[ \$(kubectl get tj -n $NS $1 -o jsonpath='{.status.phase}') == Succeeded ]]"
  "$TESTENV" logs --dir "$CLUSTER" "$NS/$1-0" | grep '^{' >"$WORK/$1.json"
  [[ $(kubectl get tj -n "$NS" "$1" -o jsonpath='{.status.restarts}') == 0 ]] \
    || fail "$1 restarted; C4D: $(c4d_events "$1" | tr '\n' ' ')"
}
c4d_events() {  # c4d_events <job>: C4D's Events on the job, one line each
  kubectl get events -n "$NS" --field-selector "involvedObject.name=$1" \
    -o jsonpath='{range .items[*]}{.reason}{": "}{.message}{"\n"}{end}' |
    grep -E '^(FaultDetected|FaultCleared)' || true
}
busbw() { python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readlines()[-1])["busbwGBs"])' "$1"; }

SIZE_ARGS="--op allreduce -b 8M -e 8M -n 5 -w 1"
PLANNED=() UNPLANNED=()
for ((r = 0; r < RUNS; r++)); do  # RUNS=0: only the link cut
  start_job "plan$r" Enforce "$SIZE_ARGS"
  finish_job "plan$r"
  PLANNED+=("$(busbw "$WORK/plan$r.json")")
  if ((r == 0)); then
    kubectl get configmap -n "$NS" plan0-c4-plan -o jsonpath='{.data.plan\.json}' >"$WORK/plan0.plan.json"
    python3 - "$WORK/plan0.plan.json" <<'PY' || fail "plan0: the plan does not spread every pair over both paths"
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["version"] >= 1, doc
assert len(doc["pairs"]) == 4, doc        # alternating placement: every hop is cross-leaf
for p in doc["pairs"]:
    assert sorted(s["pathId"] for s in p["subflows"]) == [0, 1], p
    for s in p["subflows"]:
        assert s["localPort"] % 2 == s["pathId"], s
PY
  fi
  start_job "off$r" Off "$SIZE_ARGS"
  finish_job "off$r"
  UNPLANNED+=("$(busbw "$WORK/off$r.json")")
  kubectl delete tj -n "$NS" "plan$r" "off$r" --wait=false >/dev/null
done
COMPARE_OK=ok
if ((RUNS > 0)); then
echo "busbw GB/s planned: ${PLANNED[*]}; unplanned: ${UNPLANNED[*]}; link rate $RATE_GBPS Gbit/s"
python3 - "$RATE_GBPS" "$RATIO" "$IDEAL_FRACTION" "${PLANNED[*]}" "${UNPLANNED[*]}" "$MTU" \
  >"$WORK/compare.txt" <<'PY'
import statistics, sys
rate, ratio, frac = map(float, sys.argv[1:4])
planned = [float(x) for x in sys.argv[4].split()]
unplanned = [float(x) for x in sys.argv[5].split()]
mtu = int(sys.argv[6])
ideal = rate / 8  # GB/s: every rank sends its ring share through one host link
p, u = statistics.mean(planned), statistics.mean(unplanned)
# What TCP can carry of it: MTU - 52 payload bytes (IP, TCP with timestamps) per frame of
# MTU + 14 bytes (the Ethernet header; the shaper counts it): 1448 of 1514 at MTU 1500.
payload = ideal * (mtu - 52) / (mtu + 14)
print(f"planned mean {p:.4f} GB/s ({p / ideal:.0%} of ideal {ideal:.4f}, {p / payload:.0%} of its "
      f"TCP payload {payload:.4f}), unplanned mean {u:.4f} GB/s, ratio {p / u:.2f}")
ok = p >= ratio * u and p >= frac * ideal
print("ok" if ok else f"below target (ratio >= {ratio}, >= {frac:.0%} of ideal)")
PY
cat "$WORK/compare.txt"
COMPARE_OK=$(tail -1 "$WORK/compare.txt")
fi

# ---- 3. a gray failure during a run: C4P from telemetry, C4D defers to it -----------------------
wait_replan() {  # wait_replan <job> <version before> <t0>: sets REPLAN_S, fails after 10 s
  local v i
  for ((i = 0; i < 100; i++)); do
    v=$(plan_version "$1")
    [[ -n $v && $v -gt $2 ]] && break
    sleep 0.1
  done
  local t_plan
  t_plan=$(date +%s.%N)
  [[ -n $v && $v -gt $2 ]] || fail "$1: no new plan version within 10 s of the failure"
  REPLAN_S=$(python3 -c "print(f'{$t_plan - $3:.1f}')")
  kubectl get configmap -n "$NS" "$1-c4-plan" -o jsonpath='{.metadata.annotations.c4\.dev/plan-reason}'
  echo
  echo "$1: new plan version $v ${REPLAN_S}s after the failure"
  python3 -c "import sys; sys.exit(0 if $t_plan - $3 <= 5 else 1)" \
    || fail "$1: re-plan took ${REPLAN_S}s (> 5 s)"
}
# wait_applied <job> <version> <t0>: sets APPLIED_S once status.plan.appliedVersion (the oldest
# version in the ranks' latest reports: what their plugins applied) reaches <version>; fails after
# 15 s (the kubelet-free pod runner refreshes the mounted ConfigMap within 1 s, the plugin reads it
# at its next message, the node plugin ships the next report within 1 s).
wait_applied() {
  local v i
  for ((i = 0; i < 150; i++)); do
    v=$(kubectl get tj -n "$NS" "$1" -o jsonpath='{.status.plan.appliedVersion}' 2>/dev/null || true)
    [[ -n $v && $v -ge $2 ]] && break
    sleep 0.1
  done
  local t_applied
  t_applied=$(date +%s.%N)
  [[ -n $v && $v -ge $2 ]] || fail "$1: the ranks did not report plan version $2 within 15 s (status.plan: $(kubectl get tj -n "$NS" "$1" -o jsonpath='{.status.plan}'))"
  APPLIED_S=$(python3 -c "print(f'{$t_applied - $3:.1f}')")
  echo "$1: every reporting rank applied version $2 ${APPLIED_S}s after the failure" \
    "($(kubectl get tj -n "$NS" "$1" -o jsonpath='{.status.plan.ranksApplied}/{.status.plan.ranksReporting}') ranks)"
}
print_sizes() {
  python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    print(f"  {d['size']:>10} {d['busbwGBs']:.4f}")
PY
}
cut_leaf() {  # the leaf of the job's pod 1
  local node
  node=$(kubectl get pod -n "$NS" "$1-1" -o jsonpath='{.spec.nodeName}')
  kubectl get node "$node" -o jsonpath='{.metadata.labels.c4\.dev/leaf}'
}

DRY_RUN=false start_job gray Enforce "--op allreduce -b 8M -e 64M -f 2 -n 3 -w 1"
v0=$(plan_version gray)
sleep 6  # a few reports on healthy links
link="$(cut_leaf gray):spine-0"
t_cut=$(date +%s.%N)
"$FABRIC" link --dir "$CLUSTER" "$link" set --loss 100
# The link heals after HOLD_DOWN s whatever happens. A blackholed subflow survives only if one of
# TCP's retransmissions, at r, 3r, 7r, 15r, ... (RTO r >= 0.2 s, doubling), falls between the
# heal h and the plugin's TCP user timeout (10 s); the first one after h comes before 2h + r, so
# h <= 4.5 s always works. At 5 s (an earlier default) one run in a few lost the connection.
(sleep "$HOLD_DOWN"; "$FABRIC" link --dir "$CLUSTER" "$link" set) &
UP_PID=$!
echo "gray failure of $link (every packet dropped) at plan version $v0"
wait_replan gray "$v0" "$t_cut"
GRAY_REPLAN_S=$REPLAN_S
wait_applied gray "$(plan_version gray)" "$t_cut"
GRAY_APPLIED_S=$APPLIED_S
wait "$UP_PID"
finish_job gray 300
echo "gray-failure run (size, busbw GB/s):"
print_sizes "$WORK/gray.json"
echo "C4D on the gray-failure run:"
c4d_events gray | tee "$WORK/gray.events"
# Whatever hang C4D confirmed on the stalled connections went to C4P first, not to a restart.
if grep '^FaultDetected: commHang' "$WORK/gray.events" | grep -qv 'deferred up to'; then
  fail "gray: a commHang verdict was not left to C4P"
fi
kubectl delete tj -n "$NS" gray --wait=false >/dev/null

# ---- 4. a spine link down for good: the fabric reroutes, its monitoring tells C4P --------------
DRY_RUN=false start_job down Enforce "--op allreduce -b 8M -e 64M -f 2 -n 3 -w 1"
v0=$(plan_version down)
sleep 6
leaf=$(cut_leaf down)
link="$leaf:spine-0"
t_cut=$(date +%s.%N)
"$FABRIC" link --dir "$CLUSTER" "$link" down
kubectl patch fabric e2e --type merge -p "{\"spec\":{\"links\":[{\"leaf\":\"$leaf\",\"uplink\":0,\"capacityFraction\":0,\"reason\":\"port down (e2e)\"}]}}" >/dev/null
echo "$link down for good at plan version $v0; the Fabric's spec.links says so"
wait_replan down "$v0" "$t_cut"
DOWN_REPLAN_S=$REPLAN_S
wait_applied down "$(plan_version down)" "$t_cut"
DOWN_APPLIED_S=$APPLIED_S
finish_job down 300
echo "link-down run (size, busbw GB/s), the link still down at the end:"
print_sizes "$WORK/down.json"
echo "C4D on the link-down run:"
c4d_events down
python3 - "$WORK/down.json" "$RATE_GBPS" "$DOWN_FRACTION" <<'PY' || fail "down: busbw below what the remaining link allows"
import json, sys
last = json.loads(open(sys.argv[1]).readlines()[-1])
rate, frac = float(sys.argv[2]), float(sys.argv[3])
allowed = rate / 8 / 2  # GB/s: the cut leaf's two ring connections share its one live uplink
got = last["busbwGBs"]
print(f"last size {last['size']}: {got:.4f} GB/s = {got / allowed:.0%} of the {allowed:.4f} GB/s "
      f"the remaining link allows (bar {frac:.0%})")
sys.exit(0 if got >= frac * allowed else 1)
PY
"$FABRIC" link --dir "$CLUSTER" "$link" up
kubectl get fabric e2e
[[ $COMPARE_OK == ok ]] || fail "planned vs unplanned below target: $(head -1 "$WORK/compare.txt")"
echo "PASS: C4P on the emulated fabric (plan ConfigMaps, planned vs unplanned, re-plan ${GRAY_REPLAN_S}s after a gray failure and ${DOWN_REPLAN_S}s after a link went down, applied by every rank after ${GRAY_APPLIED_S}s and ${DOWN_APPLIED_S}s, no restart with C4D acting)"
