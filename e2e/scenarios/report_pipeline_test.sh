#!/usr/bin/env bash
# e2e: the report pipeline on a private test cluster (root only; exit 77 = skipped otherwise).
# 4 KWOK nodes on 2 leaves of the netns fabric, pods as processes. The node plugin runs as a
# DaemonSet (one pod per node, in the node's netns, with its projected ServiceAccount token for
# the operator's audience); it installs the NCCL plugin into the nodes' host directory. The
# operator runs on the host with its HTTPS report endpoint (a CA and serving certificate made
# here), forwarded into every node's netns. A TrainingJob of 4 c4-netbench ranks (training mode,
# one per node) trains through the plugin; every datagram goes plugin -> node plugin on that
# node (attributed by the pod's cgroup) -> operator. Checks:
#   1. the operator's store shows every rank of the job reporting (GET /debug/reports);
#   2. the checkpoints the ranks write reach status.lastCheckpoint;
#   3. killing the node plugin pod of a node mid-run blocks no rank: training goes on, the
#      DaemonSet's new pod takes over and that node's ranks report again;
#   4. the job completes, and C4D, watching the whole run, finds no fault (a node plugin outage
#      is missing telemetry, not a fault) and cordons nothing;
#   5. a Python trainer announces its checkpoint with the c4 package (python/, docs/python.md):
#      the notice reaches status.lastCheckpoint, and its `finished` notice ends it without a verdict.
#
#   report_pipeline_test.sh <build dir> <work dir>     (C4_E2E_KEEP=1: leave it all running)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=lib/c4.sh
source "$ROOT/e2e/scenarios/lib/c4.sh"
c4_scenario_init "$@"

c4_cluster_up 4
c4_install_c4

# ---- A TrainingJob: 4 ranks of c4-netbench in training mode, one per node ---------------------
mkdir -p "$WORK/ckpt"
kubectl apply -n "$NS" -f - >/dev/null <<YAML
apiVersion: c4.dev/v1alpha1
kind: TrainingJob
metadata: {name: bench}
spec:
  replicas: 4
  # c4-netbench (the training stand-in) moves its bytes and reports them through C4's net plugin.
  telemetry: {source: NetPlugin}
  checkpoint: {dir: $WORK/ckpt}
  template:
    metadata:
      annotations: {c4.dev/runner: process}
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {matchLabels: {c4.dev/job-name: bench}}
            topologyKey: kubernetes.io/hostname
      containers:
      - name: trainer
        image: c4/netbench
        args: [--steps, "900", --step-compute-ms, "100", --state-bytes, 256K,
               --checkpoint-dir, \$(C4_CHECKPOINT_DIR), --checkpoint-every, "25"]
YAML
wait_until 90 "bench Running" bash -c \
  "[[ \$(kubectl get tj -n $NS bench -o jsonpath='{.status.phase}') == Running ]]"

reports() { curl -sf "http://127.0.0.1:$OP_METRICS/debug/reports?namespace=$NS&job=bench"; }
ranks_reporting() {  # ranks_reporting <max age seconds>: ranks whose newest report is that fresh
  reports | python3 -c '
import datetime, json, sys
d = json.load(sys.stdin)
now = datetime.datetime.now(datetime.timezone.utc)
n = 0
for job in d.get("jobs", []):
    for r in job.get("ranks", []):
        t = datetime.datetime.fromisoformat(r["lastReport"].replace("Z", "+00:00"))
        n += (now - t).total_seconds() <= float(sys.argv[1])
print(n)' "$1"
}
wait_until 60 "all 4 ranks reporting" bash -c "[[ \$($(declare -f reports ranks_reporting); ranks_reporting 5) == 4 ]]"
echo "operator store: 4/4 ranks reporting"
reports >"$WORK/reports.json"
python3 - "$WORK/reports.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["jobs"][0]["ranks"]:
    print("  rank {rank} pod {pod} on {node}: {reports} reports, {connections} connections, "
          "step {step}".format(step=r.get("progressStep"), **r))
PY

# ---- 2. checkpoints -> status.lastCheckpoint --------------------------------------------------
wait_until 90 "status.lastCheckpoint" bash -c \
  "[[ \$(kubectl get tj -n $NS bench -o jsonpath='{.status.lastCheckpoint.step}') -ge 25 ]]"
echo "status.lastCheckpoint: $(kubectl get tj -n "$NS" bench -o jsonpath='{.status.lastCheckpoint}')"

# ---- 3. kill a node plugin mid-run --------------------------------------------------------------
victim_node=$(kubectl get pod -n "$NS" bench-1 -o jsonpath='{.spec.nodeName}')
victim=$(kubectl get pods -n "$SYS" -l app=c4-node-plugin \
  --field-selector "spec.nodeName=$victim_node" -o jsonpath='{.items[0].metadata.name}')
step_before=$(kubectl get tj -n "$NS" bench -o jsonpath='{.status.lastCheckpoint.step}')
"$TESTENV" pod-signal --dir "$CLUSTER" "$SYS/$victim" KILL
kubectl delete pod -n "$SYS" "$victim" --wait=false >/dev/null
wait_until 60 "a new node plugin pod on $victim_node" bash -c \
  "kubectl get pods -n $SYS -l app=c4-node-plugin --field-selector spec.nodeName=$victim_node \
     -o jsonpath='{.items[*].status.phase}' | grep -qx Running && \
   [[ \$(kubectl get pods -n $SYS -l app=c4-node-plugin --field-selector spec.nodeName=$victim_node -o jsonpath='{.items[0].metadata.name}') != $victim ]]"
wait_until 60 "all 4 ranks reporting after the node plugin restart" \
  bash -c "[[ \$($(declare -f reports ranks_reporting); ranks_reporting 3) == 4 ]]"
wait_until 120 "training progress after the restart" bash -c \
  "[[ \$(kubectl get tj -n $NS bench -o jsonpath='{.status.lastCheckpoint.step}') -gt $step_before ]]"
[[ $(kubectl get tj -n "$NS" bench -o jsonpath='{.status.restarts}') == 0 ]] \
  || fail "the job restarted while a node plugin was down"
echo "node plugin on $victim_node killed and replaced; no rank blocked, no job restart"

# ---- 4. completion ---------------------------------------------------------------------------
wait_until 180 "bench Succeeded" bash -c \
  "[[ \$(kubectl get tj -n $NS bench -o jsonpath='{.status.phase}') == Succeeded ]]"
curl -sf "http://127.0.0.1:$OP_METRICS/metrics" | grep -E '^c4_ingest_requests_total' | head -5
# A healthy run with a node plugin outage: C4D may note missing telemetry, never a fault.
false_verdicts=$(kubectl get events -n "$NS" --field-selector reason=FaultDetected -o name | wc -l)
((false_verdicts == 0)) || fail "C4D found $false_verdicts fault(s) in a healthy run: $(kubectl get events -n "$NS" --field-selector reason=FaultDetected -o jsonpath='{.items[*].message}')"
[[ $(kubectl get nodes -o jsonpath='{.items[*].spec.unschedulable}') != *true* ]] \
  || fail "a node was cordoned in a healthy run"
echo "C4D: no verdict in the healthy run (telemetry notes: $(kubectl get events -n "$NS" --field-selector reason=TelemetryMissing -o name | wc -l))"

# ---- 5. a Python trainer's notices (the c4 package) ---------------------------------------------
kubectl apply -n "$NS" -f - >/dev/null <<YAML
apiVersion: c4.dev/v1alpha1
kind: TrainingJob
metadata: {name: pyhelper}
spec:
  replicas: 1
  checkpoint: {dir: $WORK/ckpt}
  template:
    metadata:
      annotations: {c4.dev/runner: process}
    spec:
      containers:
      - name: trainer
        image: python
        command:
        - python3
        - -c
        - |
          import c4
          start = c4.resume_step() or 0
          assert c4.progress(start + 1), "progress not delivered"
          with c4.phase("checkpointing", expect_seconds=30):
              pass  # a real trainer writes its checkpoint here
          assert c4.checkpoint_saved(start + 7, "$WORK/ckpt/py-7"), "checkpoint not delivered"
          assert c4.finished(start + 8), "finished not delivered"
        env:
        - {name: PYTHONPATH, value: $ROOT/python}
YAML
wait_until 60 "pyhelper's checkpoint in status.lastCheckpoint" bash -c \
  "[[ \$(kubectl get tj -n $NS pyhelper -o jsonpath='{.status.lastCheckpoint.step}') == 7 ]]"
[[ $(kubectl get tj -n "$NS" pyhelper -o jsonpath='{.status.lastCheckpoint.path}') == "$WORK/ckpt/py-7" ]] \
  || fail "pyhelper: status.lastCheckpoint is $(kubectl get tj -n "$NS" pyhelper -o jsonpath='{.status.lastCheckpoint}')"
wait_until 60 "pyhelper Succeeded" bash -c \
  "[[ \$(kubectl get tj -n $NS pyhelper -o jsonpath='{.status.phase}') == Succeeded ]]"
[[ $(kubectl get events -n "$NS" --field-selector reason=FaultDetected,involvedObject.name=pyhelper -o name | wc -l) == 0 ]] \
  || fail "C4D found a fault in the Python trainer's run"
echo "Python trainer: checkpoint step 7 announced by the c4 package reached status.lastCheckpoint"
echo "PASS: report pipeline (plugin -> node plugin -> operator, lastCheckpoint, node plugin restart, Python helper)"
