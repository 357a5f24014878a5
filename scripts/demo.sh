#!/usr/bin/env bash
# The local demo: C4 on a real control plane with emulated nodes and fabric.
#
#   scripts/demo.sh [--fault freeze|crash] [--keep] [--dir DIR] [--install chart|host]
#
# Installs what is missing (apt), builds C4 (Release) and the test control plane (cached), then:
# brings up 5 KWOK nodes on a netns leaf-spine fabric (2 leaves, 2 spines) with pods as local
# processes, `helm install`s C4 from helm/c4 (the operator with its TLS report endpoint and C4P
# traffic planning, and the node plugin DaemonSet, running as the chart's pods; --install host
# runs the operator as a host process instead), describes the emulated network in a Fabric,
# submits a TrainingJob of 4 c4-netbench ranks (training mode, checkpoints every 20 steps), injects
# a fault into rank 2 and narrates what C4 does:
#   freeze (default)  the ranks move their bytes over c4-netbench's own TCP transport (the stand-in
#                     for NCCL's native transports) and C4's telemetry comes from the NCCL profiler
#                     plugin the operator puts into every pod (the default telemetry source); C4P
#                     plans the job's paths in Advisory mode (computed and shown, not enforced). The
#                     rank's process is stopped (SIGSTOP): C4D sees its peers wait on a rank that
#                     stopped reporting, names its node, cordons and taints it, and restarts the
#                     job from the last checkpoint on the healthy nodes;
#   crash             the ranks move their bytes through C4's NCCL net plugin, which reports them
#                     (telemetry source NetPlugin) and enforces C4P's paths (Enforce). The rank's
#                     process is killed while its pod stays up (each pod is an MPI-operator-style
#                     worker whose main process outlives its rank): its peers' connections fail,
#                     C4D names the rank that died first (not the peers that failed after it) from
#                     what the transport saw, and restarts the job from the checkpoint; no node is
#                     cordoned without node-level evidence.
# It shows `kubectl get nodes`, the C4P plan, the verdict, `kubectl describe trainingjob` with its
# Events, the goodput, what a real Prometheus scraped from the operator and node plugins (goodput,
# verdicts, node actions, firing alerts), and writes DIR/timeline.svg: the training step of every rank over time with
# the fault, the verdict, the cordon and the restart marked. Then it tears everything down.
# --keep leaves the cluster and the operator running to explore
# (`source DIR/cluster/env; kubectl get nodes,tj -A`); DIR defaults to /tmp/c4-demo.
# Needs root (network namespaces, cgroups, bind mounts).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

FAULT=freeze
KEEP=""
INSTALL=chart
DIR=${C4_DEMO_DIR:-/tmp/c4-demo}
while (($#)); do
  case "$1" in
    --fault) FAULT=${2:?--fault needs freeze or crash}; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --dir) DIR=${2:?--dir needs a directory}; shift 2 ;;
    --install) INSTALL=${2:?--install needs chart or host}; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "demo.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $FAULT == freeze || $FAULT == crash ]] || { echo "demo.sh: --fault freeze|crash" >&2; exit 2; }
[[ $INSTALL == chart || $INSTALL == host ]] || { echo "demo.sh: --install chart|host" >&2; exit 2; }
if [[ $(id -u) -ne 0 ]]; then
  echo "demo.sh: needs root (network namespaces, cgroups, bind mounts)" >&2
  exit 1
fi

JOBS=${C4_JOBS:-$(nproc)}
echo "== 1/3 dependencies"
scripts/setup.sh
echo "== 2/3 build (Release) and the test control plane (cached after the first run)"
if [[ ! -f build/CMakeCache.txt ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build build -j "$JOBS" --target c4-operator c4-node-plugin c4-netbench nccl-net-c4 nccl-profiler-c4
e2e/testenv/testenv.sh build >/dev/null
echo "== 3/3 the demo: fault '$FAULT' in a running TrainingJob"

export C4_E2E_KEEP=$KEEP C4_E2E_INSTALL=$INSTALL
# shellcheck source=../e2e/scenarios/lib/c4.sh
source "$ROOT/e2e/scenarios/lib/c4.sh"
# shellcheck source=../e2e/scenarios/lib/prometheus.sh
source "$ROOT/e2e/scenarios/lib/prometheus.sh"
c4_scenario_init build "$DIR"

say() { printf '\n\033[1m-- %s\033[0m\n' "$*"; }
now_s() { date +%s.%N; }
tj() { kubectl get tj -n "$NS" train -o jsonpath="$1"; }

say "a test cluster: 5 nodes on 2 leaves and 2 spines (network namespaces), pods as processes"
c4_cluster_up 5 >/dev/null
kubectl apply -f "$ROOT/crds/fabric.yaml" >/dev/null
kubectl wait --for condition=established crd/fabrics.c4.dev --timeout=60s >/dev/null
kubectl apply -f - >/dev/null <<YAML
apiVersion: c4.dev/v1alpha1
kind: Fabric
metadata: {name: demo}
spec:
  spines: 2
  uplinksPerLeaf: 2
  uplinkSpeedGbps: 10
  hostLinkSpeedGbps: 10
  pathSelection: {rule: sourcePortModulo, sourcePortModulo: {base: 0}}
YAML
kubectl get nodes -L c4.dev/leaf

say "C4 ($INSTALL): the operator (report endpoint, C4D, C4P) and the node plugin on every node"
c4_install_c4 --traffic-planning --fabric-name demo
[[ $INSTALL == chart ]] && helm list -n "$SYS" 2> >(grep -v 'found symbolic link' >&2)
kubectl get pods -n "$SYS" -o wide -L c4.dev/leader | cut -c1-120
c4_prometheus_up
echo "Prometheus (Debian's prometheus) scrapes the operator and every node plugin: $PROM_URL"

if [[ $FAULT == freeze ]]; then
  say "a TrainingJob: 4 ranks of c4-netbench training over their own TCP transport, timed by C4's NCCL profiler plugin"
  # The default telemetry source (Profiler): NCCL keeps its transports, here c4-netbench's plain
  # TCP (--baseline) with c4-netbench calling the profiler plugin as NCCL does. C4P plans in
  # Advisory mode: Enforce would move the bytes onto C4's net plugin.
  TELEMETRY="{source: Profiler}" PLANNING="{mode: Advisory}" TRANSPORT_ARGS="--baseline,"
else
  say "a TrainingJob: 4 ranks of c4-netbench training through C4's NCCL net plugin"
  TELEMETRY="{source: NetPlugin}" PLANNING="{mode: Enforce}" TRANSPORT_ARGS=""
fi
mkdir -p "$WORK/ckpt" "$WORK/steps"
launcher=""
[[ $FAULT != crash ]] || launcher=$(c4_mpi_worker_command)
T_START=$(now_s)
kubectl apply -n "$NS" -f - <<YAML
apiVersion: c4.dev/v1alpha1
kind: TrainingJob
metadata: {name: train}
spec:
  replicas: 4
  telemetry: $TELEMETRY
  checkpoint: {dir: $WORK/ckpt}
  faultTolerance: {maxRestarts: 2, restartBackoffSeconds: 1}
  trafficPlanning: $PLANNING
  template:
    metadata:
      annotations: {c4.dev/runner: process}
    spec:
      terminationGracePeriodSeconds: 2
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {matchLabels: {c4.dev/job-name: train}}
            topologyKey: kubernetes.io/hostname
      containers:
      - name: trainer
        image: c4/netbench
        args: [$TRANSPORT_ARGS --steps, "700", --step-compute-ms, "60", --state-bytes, 256K, --json,
               --checkpoint-dir, \$(C4_CHECKPOINT_DIR), --checkpoint-every, "20",
               --step-log, $WORK/steps]
$launcher
YAML
wait_until 90 "train Running" bash -c "[[ \$(kubectl get tj -n $NS train -o jsonpath='{.status.phase}') == Running ]]"
kubectl get tj -n "$NS"
kubectl get pods -n "$NS" -o wide | cut -c1-100
if [[ $FAULT == freeze ]]; then
  c4_expect_profiler_only
  echo "the operator set NCCL_PROFILER_PLUGIN=$(c4_train_env NCCL_PROFILER_PLUGIN) (no NCCL_NET_PLUGIN: NCCL keeps its transports)"
else
  echo "the operator set NCCL_NET_PLUGIN=$(c4_train_env NCCL_NET_PLUGIN)"
fi
wait_until 30 "a C4P plan" bash -c "[[ -n \$(kubectl get tj -n $NS train -o jsonpath='{.status.plan.version}') ]]"
echo "C4P plan version $(tj '{.status.plan.version}') in ConfigMap train-c4-plan:"
kubectl get configmap -n "$NS" train-c4-plan -o jsonpath='{.data.plan\.json}' | python3 -c '
import json, sys
plan = json.load(sys.stdin)
pairs = plan.get("pairs", [])
version, subflows = plan.get("version"), plan.get("default", {}).get("subflows")
print(f"  version {version}, {subflows} subflows per connection; {len(pairs)} node pairs "
      "across the spine with planned paths:")
for p in pairs[:4]:
    subs = ", ".join("port %s -> path %s (weight %s)" % (s.get("localPort"), s.get("pathId"),
                                                          s.get("weight"))
                     for s in p.get("subflows", []))
    print("   %s -> %s: %s" % (p["localNode"], p["peerNode"], subs))
if len(pairs) > 4:
    print(f"   ... {len(pairs) - 4} more")
'
wait_until 90 "a first checkpoint" bash -c \
  "[[ \$(kubectl get tj -n $NS train -o jsonpath='{.status.lastCheckpoint.step}') -ge 40 ]]"
step_before=$(tj '{.status.lastCheckpoint.step}')
victim_pod=train-2
victim_node=$(kubectl get pod -n "$NS" "$victim_pod" -o jsonpath='{.spec.nodeName}')
echo "training: checkpoint at step $step_before (status.lastCheckpoint, from the ranks' notices)"

say "the fault: $FAULT rank 2 ($victim_pod on $victim_node)"
T_FAULT=$(now_s)
case $FAULT in
  freeze) "$TESTENV" pod-signal --dir "$CLUSTER" "$NS/$victim_pod" STOP ;;
  crash) "$TESTENV" pod-signal --dir "$CLUSTER" "$NS/$victim_pod" KILL --process c4-netbench ;;
esac
# Poll for the verdict, the cordon and the restart, so the timeline marks them to ~0.3 s (Events
# and status carry whole seconds).
T_VERDICT="" T_CORDON="" T_RESTART=""
for ((i = 0; i < 200; i++)); do
  [[ -z $T_VERDICT && -n $(kubectl get events -n "$NS" --field-selector \
      involvedObject.name=train,reason=FaultDetected -o name) ]] && T_VERDICT=$(now_s)
  [[ -z $T_CORDON && $(kubectl get node "$victim_node" -o jsonpath='{.spec.unschedulable}') == true ]] \
    && T_CORDON=$(now_s)
  if [[ $(tj '{.status.attempt}') == 1 ]]; then T_RESTART=$(now_s); break; fi
  sleep 0.2
done
[[ -n $T_RESTART ]] || fail "no restart within 60 s of the fault"
# The verdict and the restart come from one reconcile; an Event the poll saw only after the
# restart is marked with it.
if [[ -z $T_VERDICT && -n $(kubectl get events -n "$NS" --field-selector \
      involvedObject.name=train,reason=FaultDetected -o name) ]]; then
  T_VERDICT=$T_RESTART
fi
python3 -c "import sys; print(f'restart {float(sys.argv[2]) - float(sys.argv[1]):.1f} s after the fault')" "$T_FAULT" "$T_RESTART"
echo "status.faults: $(tj '{.status.faults[-1:].class}'): $(tj '{.status.faults[-1:].summary}')"
if [[ $FAULT == freeze ]]; then
  wait_until 20 "$victim_node cordoned" bash -c \
    "[[ \$(kubectl get node $victim_node -o jsonpath='{.spec.unschedulable}') == true ]]"
  [[ -n $T_CORDON ]] || T_CORDON=$(now_s)
  say "kubectl get nodes: $victim_node is cordoned and tainted c4.dev/faulty:NoSchedule"
  kubectl get nodes
  kubectl describe node "$victim_node" | sed -n '/^Taints:/p;/^Events:/,$p'
fi
wait_until 90 "attempt 1 Running" bash -c "[[ \$(kubectl get tj -n $NS train -o jsonpath='{.status.phase}') == Running ]]"
T_RUNNING=$(now_s)
resume_step=$(kubectl get pod -n "$NS" train-0 \
  -o jsonpath='{.spec.containers[0].env[?(@.name=="C4_RESUME_STEP")].value}')
echo "attempt 1 running from checkpoint step $resume_step on:"
kubectl get pods -n "$NS" -o wide | cut -c1-100

say "training to completion"
wait_until 300 "train Succeeded" bash -c "[[ \$(kubectl get tj -n $NS train -o jsonpath='{.status.phase}') == Succeeded ]]"
T_DONE=$(now_s)
grep -h '"checksum"' "$CLUSTER"/pods/"$NS"/train-0/trainer.log | tail -1

say "kubectl describe trainingjob train"
kubectl describe tj -n "$NS" train | sed -n '/^Status:/,$p'

say "goodput"
tj '{.status.goodput}' | python3 -c '
import json, sys
g = json.load(sys.stdin)
p, l = g.get("productiveSeconds", 0), g.get("lostSeconds", 0)
print(f"productive {p} s, lost {l} s: goodput {100 * p / max(p + l, 1):.1f} %")'

say "Prometheus: what the operator and the node plugins exported"
J='namespace="'$NS'",trainingjob="train"'
sleep 2  # one more scrape after the job finished
echo "goodput ratio $(c4_prom_value "c4_operator_job_goodput_ratio{$J}")," \
  "restarts $(c4_prom_value "c4_operator_job_restarts{$J}")," \
  "plan version $(c4_prom_value "c4_operator_job_plan_version{$J}")"
echo "C4D verdicts by class and action:"
c4_prom_query 'sum by (class, action) (c4_c4d_verdicts_total) > 0' | sed 's/^/  /'
echo "node actions:"
c4_prom_query 'sum by (action, outcome) (c4_operator_node_actions_total) > 0' | sed 's/^/  /'
echo "alerts firing: $(c4_prom_query 'ALERTS{alertstate="firing"}' | grep -o '"alertname":"[A-Za-z0-9]*"' |
  cut -d'"' -f4 | sort -u | tr '\n' ' ')"

say "timeline"
marks=(--mark "$T_FAULT=fault injected ($FAULT rank 2)")
[[ -n $T_VERDICT ]] && marks+=(--mark "$T_VERDICT=C4D verdict (Event FaultDetected)")
[[ -n $T_CORDON ]] && marks+=(--mark "$T_CORDON=cordon of $victim_node")
marks+=(--mark "$T_RESTART=restart from step $resume_step" --mark "$T_RUNNING=running again")
python3 "$ROOT/tools/c4-timeline.py" --steps "$WORK/steps" -o "$WORK/timeline.svg" \
  --title "C4 demo: $FAULT of rank 2, detection, cordon, restart from checkpoint" "${marks[@]}"
python3 - "$T_START" "$T_FAULT" "$T_RESTART" "$T_RUNNING" "$T_DONE" <<'PY'
import sys
start, fault, restart, running, done = map(float, sys.argv[1:6])
print(f"fault at +{fault - start:.1f} s; restart {restart - fault:.1f} s after it; running "
      f"again {running - fault:.1f} s after it; done at +{done - start:.1f} s")
PY
echo "picture: $WORK/timeline.svg (open it in a browser)"
if [[ -n $KEEP ]]; then
  echo "kept running: source $CLUSTER/env; kubectl get nodes,tj -A; operator metrics:" \
    "curl 127.0.0.1:$OP_METRICS/metrics"
fi
