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
#   4. the job completes.
#
#   report_pipeline_test.sh <build dir> <work dir>     (C4_E2E_KEEP=1: leave it all running)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:?usage: $0 <build dir> <work dir>}" && pwd)
WORK=${2:?usage: $0 <build dir> <work dir>}
TESTENV=$ROOT/e2e/testenv/testenv.sh
if [[ $(id -u) -ne 0 ]]; then echo "SKIP: the netns fabric and pods as processes need root"; exit 77; fi
OPERATOR=$BUILD/operator/c4-operator
NODE_PLUGIN=$BUILD/node-plugin/c4-node-plugin
NETBENCH=$BUILD/nccl-net-plugin/netbench/c4-netbench
PLUGIN_SO=$BUILD/nccl-net-plugin/libnccl-net-c4.so
for f in "$OPERATOR" "$NODE_PLUGIN" "$NETBENCH" "$PLUGIN_SO"; do
  [[ -e $f ]] || { echo "FAIL: $f not built" >&2; exit 1; }
done

rm -rf "$WORK" && mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
CLUSTER=$WORK/cluster
NS=c4-e2e
SYS=c4-system
OP_PID=""
cleanup() {
  if [[ -n ${C4_E2E_KEEP:-} ]]; then echo "kept: $CLUSTER (operator pid $OP_PID)"; return; fi
  [[ -n $OP_PID ]] && kill "$OP_PID" 2>/dev/null && wait "$OP_PID" 2>/dev/null || true
  "$TESTENV" down --dir "$CLUSTER" >/dev/null 2>&1 || true
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  echo "--- operator log (tail)" >&2
  tail -n 40 "$WORK/operator.log" >&2 || true
  for f in "$CLUSTER"/pods/"$SYS"/*/node-plugin.log; do
    [[ -f $f ]] && { echo "--- $f (tail)" >&2; tail -n 15 "$f" >&2; }
  done
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

"$TESTENV" up --dir "$CLUSTER" --nodes 4 --leaves 2 --spines 2 --fabric --pods --host-ports 1
# shellcheck disable=SC1091
source "$CLUSTER/env"
REPORT_PORT=$C4_TESTENV_HOST_PORTS

# ---- PKI: a CA and the operator's serving certificate for 127.0.0.1 ---------------------------
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=c4-e2e-ca \
  -keyout "$WORK/ca.key" -out "$WORK/ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj /CN=c4-operator -keyout "$WORK/tls.key" \
  -out "$WORK/tls.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$WORK/ext.cnf"
openssl x509 -req -in "$WORK/tls.csr" -CA "$WORK/ca.crt" -CAkey "$WORK/ca.key" -CAcreateserial \
  -days 1 -extfile "$WORK/ext.cnf" -out "$WORK/tls.crt" 2>/dev/null

# ---- CRD, namespaces, the node plugin's ServiceAccount and RBAC ---------------------------------
kubectl apply -f "$ROOT/crds/trainingjob.yaml" >/dev/null
kubectl wait --for condition=established crd/trainingjobs.c4.dev --timeout=60s >/dev/null
kubectl create namespace "$SYS" >/dev/null
kubectl create namespace "$NS" >/dev/null
kubectl create serviceaccount -n "$SYS" c4-node-plugin >/dev/null
kubectl create clusterrole c4-node-plugin --verb=get,list,watch --resource=pods >/dev/null
kubectl create clusterrolebinding c4-node-plugin --clusterrole=c4-node-plugin \
  --serviceaccount="$SYS:c4-node-plugin" >/dev/null
kubectl create configmap -n "$SYS" c4-operator-ca --from-file=ca.crt="$WORK/ca.crt" >/dev/null

# ---- The operator (host process; the report port is forwarded into every node netns) ----------
"$OPERATOR" --kubeconfig "$KUBECONFIG" --namespace "$NS" --leader-elect=false \
  --metrics-address 127.0.0.1 --metrics-port 0 \
  --report-bind-address "127.0.0.1:$REPORT_PORT" --tls-cert-file "$WORK/tls.crt" \
  --tls-key-file "$WORK/tls.key" --report-audience c4-operator \
  --report-serviceaccount "$SYS/c4-node-plugin" >"$WORK/operator.log" 2>&1 &
OP_PID=$!
wait_until 30 "operator metrics port" grep -qE 'metricsPort=[1-9]' "$WORK/operator.log"
OP_METRICS=$(grep -m1 -oE 'metricsPort=[0-9]+' "$WORK/operator.log" | cut -d= -f2)
export OP_METRICS NS  # read by the checks below, which run in `bash -c`
curl -sf "http://127.0.0.1:$OP_METRICS/healthz" >/dev/null || fail "operator /healthz"

# ---- The node plugin DaemonSet ---------------------------------------------------------------
kubectl apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: c4-node-plugin, namespace: $SYS}
spec:
  selector: {matchLabels: {app: c4-node-plugin}}
  template:
    metadata:
      labels: {app: c4-node-plugin}
      annotations: {c4.dev/runner: process}
    spec:
      serviceAccountName: c4-node-plugin
      tolerations: [{operator: Exists}]
      terminationGracePeriodSeconds: 5
      containers:
      - name: node-plugin
        image: c4/node-plugin
        command: [$NODE_PLUGIN]
        args:
        - --node-name=\$(NODE_NAME)
        - --socket=/var/run/c4/agent.sock
        - --operator-url=https://127.0.0.1:$REPORT_PORT/v1/reports
        - --ca-file=/etc/c4/ca/ca.crt
        - --token-file=/var/run/secrets/c4/token
        - --plugin-source=$PLUGIN_SO
        - --plugin-install-dir=/opt/c4/lib
        - --metrics-bind-address=127.0.0.1:9400
        env:
        - name: NODE_NAME
          valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
        volumeMounts:
        - {name: agent, mountPath: /var/run/c4}
        - {name: plugin, mountPath: /opt/c4/lib}
        - {name: ca, mountPath: /etc/c4/ca, readOnly: true}
        - {name: token, mountPath: /var/run/secrets/c4, readOnly: true}
      volumes:
      - name: agent
        hostPath: {path: /var/run/c4, type: DirectoryOrCreate}
      - name: plugin
        hostPath: {path: /opt/c4/lib, type: DirectoryOrCreate}
      - name: ca
        configMap: {name: c4-operator-ca}
      - name: token
        projected:
          sources:
          - serviceAccountToken: {audience: c4-operator, expirationSeconds: 3600, path: token}
YAML
all_running() {
  [[ $(kubectl get pods -n "$SYS" -l app=c4-node-plugin \
        -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c '^Running$') == 4 ]]
}
wait_until 90 "4 node plugin pods Running" all_running
for i in 0 1 2 3; do
  wait_until 30 "plugin installed on node-$i" \
    test -s "$CLUSTER/nodes/node-$i/root/opt/c4/lib/libnccl-net-c4.so"
  cmp -s "$PLUGIN_SO" "$CLUSTER/nodes/node-$i/root/opt/c4/lib/libnccl-net-c4.so" \
    || fail "node-$i: installed plugin differs from the build"
done
echo "node plugins: 4 Running, the NCCL plugin installed on every node"

# ---- A TrainingJob: 4 ranks of c4-netbench in training mode, one per node ---------------------
mkdir -p "$WORK/ckpt"
kubectl apply -n "$NS" -f - >/dev/null <<YAML
apiVersion: c4.dev/v1alpha1
kind: TrainingJob
metadata: {name: bench}
spec:
  replicas: 4
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
echo "PASS: report pipeline (plugin -> node plugin -> operator, lastCheckpoint, node plugin restart)"
