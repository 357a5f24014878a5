#!/usr/bin/env bash
# What a user sees, through kubectl only, against the shared test cluster: the CRD rejects
# invalid TrainingJobs with a clear message; the example job (crds/examples/llm-pretrain.yaml)
# runs under the real c4-operator binary; `kubectl get tj` shows State, Ready, Replicas, Restarts, Last Fault and
# Age; a failed pod restarts the job, and `kubectl describe tj` shows the Events.
#
#   e2e/scenarios/kubectl_trainingjob_test.sh <c4-operator binary>   (needs $C4_TESTENV_DIR)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OPERATOR=${1:?usage: $0 <c4-operator binary>}
[[ -n ${C4_TESTENV_DIR:-} && -f $C4_TESTENV_DIR/env ]] || { echo "no test cluster (C4_TESTENV_DIR)"; exit 77; }
# shellcheck disable=SC1091
source "$C4_TESTENV_DIR/env"
NS=c4-kubectl-$RANDOM$RANDOM
WORK=$(mktemp -d /tmp/c4-kubectl-XXXXXX)
OP_PID=""
cleanup() {
  [[ -n $OP_PID ]] && kill "$OP_PID" 2>/dev/null && wait "$OP_PID" 2>/dev/null || true
  kubectl delete ns "$NS" --wait=false >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  echo "--- operator log (tail)" >&2
  tail -30 "$WORK/operator.log" >&2 || true
  exit 1
}
wait_until() {  # wait_until <seconds> <description> <command...>
  local secs=$1 what=$2 i
  shift 2
  for ((i = 0; i < secs * 5; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  fail "timed out after ${secs}s waiting for: $what"
}

# The CRD (other tests may install it concurrently; create only if absent).
kubectl get crd trainingjobs.c4.dev >/dev/null 2>&1 || kubectl create -f "$ROOT/crds/trainingjob.yaml" >/dev/null 2>&1 || true
kubectl wait --for condition=established crd/trainingjobs.c4.dev --timeout=60s >/dev/null
kubectl create ns "$NS" >/dev/null

# 1. Invalid objects are refused by the API server with a message naming the field.
invalid() {  # invalid <expected text> <spec fragment>
  local out
  if out=$(kubectl apply -n "$NS" -f - 2>&1 <<YAML
apiVersion: c4.dev/v1alpha1
kind: TrainingJob
metadata: {name: bad}
spec:
$2
YAML
  ); then
    fail "kubectl apply accepted an invalid TrainingJob ($1): $out"
  fi
  [[ $out == *"$1"* ]] || fail "rejection does not mention '$1': $out"
  echo "rejected as expected: $(grep -m1 -F -- "$1" <<<"$out" | sed 's/^ *//')"
}
invalid "spec.replicas" "  replicas: 0
  template: {spec: {containers: [{name: t, image: i}]}}"
invalid "maxRestarts" "  replicas: 1
  faultTolerance: {maxRestarts: -1}
  template: {spec: {containers: [{name: t, image: i}]}}"
invalid "Enforce" "  replicas: 1
  trafficPlanning: {mode: Sometimes}
  template: {spec: {containers: [{name: t, image: i}]}}"
invalid "subflowsPerConnection + spareSubflows must be at most 64" "  replicas: 1
  trafficPlanning: {subflowsPerConnection: 60, spareSubflows: 5}
  template: {spec: {containers: [{name: t, image: i}]}}"
invalid "template" "  replicas: 2"
invalid "the operator sets them" "  replicas: 1
  template: {spec: {containers: [{name: t, image: i, env: [{name: WORLD_SIZE, value: '8'}]}]}}"
# C4's NCCL plugin variables are reserved only where the job runs that plugin.
invalid "NCCL_PROFILER_PLUGIN with telemetry.source Profiler (without trafficPlanning.mode Enforce)" "  replicas: 1
  template: {spec: {containers: [{name: t, image: i, env: [{name: NCCL_PROFILER_PLUGIN, value: x}]}]}}"
invalid "NCCL_NET_PLUGIN with telemetry.source NetPlugin" "  replicas: 1
  telemetry: {source: NetPlugin}
  template: {spec: {containers: [{name: t, image: i, env: [{name: NCCL_NET_PLUGIN, value: x}]}]}}"
invalid "NCCL_NET_PLUGIN with telemetry.source NetPlugin or trafficPlanning.mode Enforce" "  replicas: 1
  trafficPlanning: {mode: Enforce}
  template: {spec: {containers: [{name: t, image: i, env: [{name: NCCL_NET_PLUGIN, value: x}]}]}}"
invalid "spec.managedBy" "  replicas: 1
  managedBy: kueue.x-k8s.io/multikeuee
  template: {spec: {containers: [{name: t, image: i}]}}"
invalid "numProcPerNode" "  replicas: 1
  numProcPerNode: all
  template: {spec: {containers: [{name: t, image: i}]}}"
kubectl get tj -n "$NS" bad >/dev/null 2>&1 && fail "an invalid TrainingJob was stored"

# 2. The operator binary, watching this namespace only.
"$OPERATOR" --kubeconfig "$KUBECONFIG" --namespace "$NS" --leader-elect=false \
  --metrics-address 127.0.0.1 --metrics-port 0 >"$WORK/operator.log" 2>&1 &
OP_PID=$!

# 3. The example job runs.
kubectl apply -n "$NS" -f "$ROOT/crds/examples/llm-pretrain.yaml"
wait_until 60 "llm-pretrain Running" bash -c "[[ \$(kubectl get tj -n $NS llm-pretrain -o jsonpath='{.status.phase}') == Running ]]"
[[ $(kubectl get pods -n "$NS" -l c4.dev/job-name=llm-pretrain -o name | wc -l) == 4 ]] \
  || fail "expected 4 pods"
table=$(kubectl get tj -n "$NS")
echo "$table"
header=$(echo "$table" | head -1)
for column in NAME STATE READY REPLICAS RESTARTS "LAST FAULT" AGE; do
  [[ $header == *"$column"* ]] || fail "kubectl get tj has no column $column"
done
echo "$table" | grep -E '^llm-pretrain +Running +4 +4 +0 ' >/dev/null \
  || fail "row does not say Running, 4 replicas, 0 restarts"
env_of() {  # env_of <pod> <name>
  kubectl get pod -n "$NS" "$1" -o jsonpath="{.spec.containers[0].env[?(@.name==\"$2\")].value}"
}
# 8 GPUs per pod, numProcPerNode: auto -> 8 ranks per pod, 32 in all.
[[ $(env_of llm-pretrain-2 PET_NODE_RANK) == 2 && $(env_of llm-pretrain-2 WORLD_SIZE) == 32 &&
   $(env_of llm-pretrain-2 PET_NPROC_PER_NODE) == 8 && $(env_of llm-pretrain-2 PET_NNODES) == 4 ]] \
  || fail "PET_NODE_RANK/WORLD_SIZE/PET_NPROC_PER_NODE/PET_NNODES of llm-pretrain-2"
[[ $(env_of llm-pretrain-2 MASTER_ADDR) == llm-pretrain-0.llm-pretrain ]] || fail "MASTER_ADDR"
# Telemetry source Profiler, Advisory planning: C4's profiler plugin, NCCL's own transports.
[[ $(env_of llm-pretrain-2 NCCL_PROFILER_PLUGIN) == /opt/c4/lib/libnccl-profiler-c4.so ]] \
  || fail "NCCL_PROFILER_PLUGIN is not C4's profiler plugin"
[[ -z $(env_of llm-pretrain-2 NCCL_NET_PLUGIN) ]] \
  || fail "NCCL_NET_PLUGIN set although the job keeps NCCL's transports"
# A template's own net plugin (e.g. aws-ofi-nccl) is accepted beside C4's profiler plugin.
kubectl apply --dry-run=server -n "$NS" -f - >/dev/null <<'YAML' || fail "a template's own NCCL_NET_PLUGIN was refused with telemetry.source Profiler"
apiVersion: c4.dev/v1alpha1
kind: TrainingJob
metadata: {name: own-net}
spec:
  replicas: 1
  template: {spec: {containers: [{name: t, image: i, env: [{name: NCCL_NET_PLUGIN, value: libnccl-net-ofi.so}]}]}}
YAML

# 4. A rank fails (as its kubelet would report it): the whole job restarts as attempt 1.
kubectl patch pod -n "$NS" llm-pretrain-3 --subresource=status --type=merge -p \
  '{"status":{"phase":"Failed","containerStatuses":[{"name":"trainer","image":"x","imageID":"","ready":false,"restartCount":0,"state":{"terminated":{"exitCode":137,"reason":"Error"}}}]}}' >/dev/null
wait_until 60 "restart to attempt 1" bash -c "[[ \$(kubectl get tj -n $NS llm-pretrain -o jsonpath='{.status.restarts}') == 1 ]]"
wait_until 60 "llm-pretrain Running again" bash -c "[[ \$(kubectl get tj -n $NS llm-pretrain -o jsonpath='{.status.phase}') == Running ]]"
[[ $(env_of llm-pretrain-0 C4_RESTART_ATTEMPT) == 1 ]] || fail "pods are not attempt 1"
row=$(kubectl get tj -n "$NS" llm-pretrain --no-headers)
echo "$row"
[[ $row =~ ^llm-pretrain\ +Running\ +4\ +4\ +1\ +.*llm-pretrain-3 ]] || fail "row does not show 1 restart and the last fault: $row"
describe=$(kubectl describe tj -n "$NS" llm-pretrain)
for reason in PodFailed RestartingFromCheckpoint Restarted; do
  [[ $describe == *"$reason"* ]] || { echo "$describe" >&2; fail "kubectl describe shows no $reason event"; }
done
echo "$describe" | sed -n '/^Events:/,$p'

# 5. SIGTERM: the operator exits cleanly.
kill -TERM "$OP_PID"
for _ in $(seq 100); do kill -0 "$OP_PID" 2>/dev/null || break; sleep 0.1; done
kill -0 "$OP_PID" 2>/dev/null && fail "operator still running 10 s after SIGTERM"
wait "$OP_PID" && rc=0 || rc=$?
OP_PID=""
((rc == 0)) || fail "operator exited with $rc after SIGTERM"
echo "PASS"
