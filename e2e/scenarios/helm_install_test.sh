#!/usr/bin/env bash
# e2e: C4 installed with `helm install` of helm/c4 (root only; exit 77 = skipped otherwise).
# 4 KWOK nodes on 2 leaves of the netns fabric, pods as processes. Unlike the other scenarios,
# nothing of C4 is started by hand: the operator Deployment (2 replicas, leader election) and the
# node plugin DaemonSet are the chart's pods, run by the pod runner from the chart's images
# (e2e/testenv/podrunner/images.tsv), with the chart's ServiceAccounts, RBAC (checked by the API
# server's Node,RBAC authorizer), generated serving certificate, report Service (resolved by the
# pod runner to the pod the leader labels c4.dev/leader=true) and host directories. Checks:
#   1. the authorizer is RBAC and enforces the chart's rules (allowed and refused verbs);
#   2. install: 2 operator pods (one leader, labelled), 4 node plugin pods, the NCCL plugin the
#      node plugin image carries installed on every node, the report Service -> the leader;
#   3. a TrainingJob (4 c4-netbench ranks in training mode, `kubectl apply`) runs to Succeeded and
#      the leader's /debug/reports shows every rank's reports (plugin -> node plugin -> Service ->
#      operator: the wiring);
#   4. `helm upgrade` that rolls the operator while a second job runs: the generated certificate
#      is kept, the job keeps its pods and attempt (no restart), the new leader gets the reports,
#      the job Succeeds;
#   5. `helm uninstall` removes every object the chart rendered (namespaced and cluster-scoped, the
#      generated Secret included); the CRDs stay, and in the release namespace at most the
#      operator's own run-time state (its Lease, the circuit breaker ConfigMap c4-node-actions).
#
#   helm_install_test.sh <build dir> <work dir>     (C4_E2E_KEEP=1: leave it all running)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=lib/c4.sh
source "$ROOT/e2e/scenarios/lib/c4.sh"
c4_scenario_init "$@"
CHART=$ROOT/helm/c4
REL=c4
FABRIC=$ROOT/e2e/testenv/fabric.sh
# The pod runner maps the chart's images to this build's binaries (and the node plugin image's
# /usr/lib/c4/libnccl-net-c4.so and libnccl-profiler-c4.so to the build's plugins).
export C4_BUILD_DIR=$BUILD

fail() {
  local f
  for f in "$CLUSTER"/pods/"$SYS"/"$REL"-operator-*/operator.log; do
    [[ -f $f ]] && { echo "--- $f (tail)" >&2; tail -n 25 "$f" >&2; }
  done
  echo "FAIL: $*" >&2
  for f in "$CLUSTER"/pods/"$SYS"/*/node-plugin.log; do
    [[ -f $f ]] && { echo "--- $f (tail)" >&2; tail -n 10 "$f" >&2; }
  done
  for f in "$CLUSTER"/pods/"$NS"/*/*.log; do
    [[ -f $f ]] && grep -qiE 'error|fail|cannot|traceback' "$f" &&
      { echo "--- $f (tail)" >&2; tail -n 8 "$f" >&2; }
  done
  exit 1
}

c4_cluster_up 4
kubectl create namespace "$NS" >/dev/null

# ---- 1. the authorizer ------------------------------------------------------------------------
tr '\0' '\n' <"/proc/$(cat "$CLUSTER/pids/kube-apiserver.pid")/cmdline" \
  | grep -qx -- '--authorization-mode=Node,RBAC' \
  || fail "kube-apiserver does not run --authorization-mode=Node,RBAC"

# ---- 2. helm install ----------------------------------------------------------------------------
# The values for the test cluster (reported in e2e/README.md):
#  - image.registry "": images c4/operator:<appVersion> etc., the names of the pod runner's table;
#  - the annotation c4.dev/runner=process on both pod templates: the pod runner runs them;
#  - required operator anti-affinity per node: pods of a node share its one address, so two
#    operator replicas on one node would collide on their ports;
#  - the operator watches $NS only: its rules on the jobs' objects are a Role there;
#  - the node plugin watches eth0: the emulated nodes' NIC is a veth, which is not watched unless
#    named.
cat >"$WORK/values.yaml" <<YAML
image:
  registry: ""
operator:
  watchNamespace: $NS
  podAnnotations: {c4.dev/runner: process}
  debugReports: true
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels: {app.kubernetes.io/name: c4, app.kubernetes.io/component: operator}
nodePlugin:
  podAnnotations: {c4.dev/runner: process}
  interfaces: eth0  # the emulated node's NIC is a veth (no device): named
YAML
helm install "$REL" "$CHART" -n "$SYS" --create-namespace -f "$WORK/values.yaml" \
  2> >(grep -v 'found symbolic link' >&2) >"$WORK/helm-install.txt" || fail "helm install"
helm get manifest "$REL" -n "$SYS" >"$WORK/manifest.yaml"
echo "helm install: $(grep -c '^kind:' "$WORK/manifest.yaml") objects rendered"

# RBAC as the API server decides it, for the chart's ServiceAccounts.
OP_SA=system:serviceaccount:$SYS:$REL-operator
NP_SA=system:serviceaccount:$SYS:$REL-node-plugin
can() { [[ $(kubectl auth can-i "$@" 2>/dev/null) == yes ]]; }
can create tokenreviews.authentication.k8s.io --as "$OP_SA" || fail "operator: no tokenreviews"
can update trainingjobs.c4.dev --subresource=status -n "$NS" --as "$OP_SA" || fail "operator: no tj status"
can patch nodes --as "$OP_SA" || fail "operator: cannot cordon"
can update leases.coordination.k8s.io -n "$SYS" --as "$OP_SA" || fail "operator: no lease"
! can update leases.coordination.k8s.io -n "$NS" --as "$OP_SA" || fail "operator: lease outside $SYS"
can create pods -n "$NS" --as "$OP_SA" || fail "operator: cannot create pods in $NS"
can update configmaps -n "$NS" --as "$OP_SA" || fail "operator: cannot write plans in $NS"
can watch configmaps -n "$NS" --as "$OP_SA" || fail "operator: cannot watch its plans in $NS"
can update services -n "$NS" --as "$OP_SA" || fail "operator: cannot put back its Services in $NS"
can create events -n default --as "$OP_SA" || fail "operator: no Events on Nodes (default)"
! can create pods -n default --as "$OP_SA" || fail "operator may create pods outside $NS"
! can update configmaps -n default --as "$OP_SA" || fail "operator may write ConfigMaps outside $NS"
! can list services --all-namespaces --as "$OP_SA" || fail "operator may list Services cluster-wide"
! can delete nodes --as "$OP_SA" || fail "operator may delete nodes"
! can get secrets -n "$SYS" --as "$OP_SA" || fail "operator may read secrets"
can watch pods -n "$NS" --as "$NP_SA" || fail "node plugin: cannot watch pods in $NS"
! can list pods -n default --as "$NP_SA" || fail "node plugin may list pods outside $NS"
! can create pods --as "$NP_SA" || fail "node plugin may create pods"
! can create tokenreviews.authentication.k8s.io --as "$NP_SA" || fail "node plugin: tokenreviews"
! can get pods -n "$NS" --as "$NP_SA" || fail "node plugin may get pods by name"
echo "authorizer: Node,RBAC; the chart's rules allow what C4 needs (jobs' objects in $NS only)" \
  "and refuse 11 others"

op_pods() {
  kubectl get pods -n "$SYS" -l app.kubernetes.io/component=operator \
    -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase} {.metadata.deletionTimestamp}{"\n"}{end}'
}
running_count() {  # running_count <component>
  kubectl get pods -n "$SYS" -l "app.kubernetes.io/component=$1" \
    -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c '^Running$'
}
leader() {
  kubectl get pods -n "$SYS" -l app.kubernetes.io/component=operator,c4.dev/leader=true \
    -o jsonpath='{.items[*].metadata.name}'
}
export SYS NS
wait_until 120 "2 operator pods Running" bash -c "[[ \$($(declare -f running_count); running_count operator) == 2 ]]"
wait_until 120 "4 node plugin pods Running" bash -c "[[ \$($(declare -f running_count); running_count node-plugin) == 4 ]]"
wait_until 60 "one operator pod labelled c4.dev/leader=true" bash -c \
  "[[ \$($(declare -f leader); leader | wc -w) == 1 ]]"
LEADER=$(leader)
echo "operator: $(op_pods | tr '\n' ';') leader $LEADER"
for ((i = 0; i < 4; i++)); do
  wait_until 30 "plugin installed on node-$i" \
    test -s "$CLUSTER/nodes/node-$i/root/opt/c4/lib/libnccl-net-c4.so"
  cmp -s "$PLUGIN_SO" "$CLUSTER/nodes/node-$i/root/opt/c4/lib/libnccl-net-c4.so" \
    || fail "node-$i: installed plugin differs from the image's (the build's)"
  cmp -s "$PROFILER_SO" "$CLUSTER/nodes/node-$i/root/opt/c4/lib/libnccl-profiler-c4.so" \
    || fail "node-$i: installed profiler plugin differs from the image's (the build's)"
  wait_until 30 "agent socket on node-$i" test -S "$CLUSTER/nodes/node-$i/root/var/run/c4/agent.sock"
done
echo "node plugins: 4 Running; on every node's host directories: the NCCL net and profiler" \
  "plugins of the node plugin image (/opt/c4/lib) and the agent socket (/var/run/c4)"
c4_expect_node_plugin_unprivileged
echo "node plugins: every process runs as uid 65532 with no capability (CapBnd 0), no_new_privs"
# The node's NICs, read from the node's /sys the chart mounts at /host/sys (--sysfs-root): every
# node plugin sees its node's fabric interface, eth0, up with carrier.
for ((i = 0; i < 4; i++)); do
  np_ip=$(kubectl get pods -n "$SYS" -l app.kubernetes.io/component=node-plugin \
    --field-selector "spec.nodeName=node-$i" -o jsonpath='{.items[0].status.podIP}')
  wait_until 30 "node-$i's node plugin: eth0 up (c4_node_plugin_nic_up)" bash -c \
    "'$FABRIC' exec --dir '$CLUSTER' node-$i curl -sf http://$np_ip:9400/metrics | \
       grep -qx 'c4_node_plugin_nic_up{interface=\"eth0\"} 1'"
done
echo "node plugins: each reads its node's NICs from the node's /sys (eth0 up on all 4)"

# The operator's own endpoints, reached inside the leader's node (its pod address).
op_curl() {  # op_curl <path>: GET on the leader's metrics port
  local pod node ip
  pod=$(leader)
  [[ -n $pod ]] || return 1
  node=$(kubectl get pod -n "$SYS" "$pod" -o jsonpath='{.spec.nodeName}')
  ip=$(kubectl get pod -n "$SYS" "$pod" -o jsonpath='{.status.podIP}')
  "$FABRIC" exec --dir "$CLUSTER" "$node" curl -sf "http://$ip:8080$1"
}
op_curl /readyz >/dev/null || fail "leader /readyz"
# The report Service resolves, in every node plugin pod, to the leader's address.
leader_ip=$(kubectl get pod -n "$SYS" "$LEADER" -o jsonpath='{.status.podIP}')
for h in "$CLUSTER"/pods/"$SYS"/"$REL"-node-plugin-*/etc-hosts; do
  wait_until 10 "$h: $REL-reports -> $leader_ip" \
    grep -qE "^$leader_ip\s.*\b$REL-reports\.$SYS\.svc(\s|$)" "$h"
done
echo "report Service: $REL-reports.$SYS.svc -> $leader_ip (leader) in every node plugin pod"

# ---- 3. a TrainingJob with kubectl apply ---------------------------------------------------------
submit() {  # submit <name> <steps>
  mkdir -p "$WORK/ckpt-$1"
  kubectl apply -n "$NS" -f - >/dev/null <<YAML
apiVersion: c4.dev/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  replicas: 4
  # c4-netbench (the training stand-in) moves its bytes and reports them through C4's net plugin.
  telemetry: {source: NetPlugin}
  checkpoint: {dir: $WORK/ckpt-$1}
  template:
    metadata:
      annotations: {c4.dev/runner: process}
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {matchLabels: {c4.dev/job-name: $1}}
            topologyKey: kubernetes.io/hostname
      containers:
      - name: trainer
        image: c4/netbench
        args: [--steps, "$2", --step-compute-ms, "100", --state-bytes, 256K,
               --checkpoint-dir, \$(C4_CHECKPOINT_DIR), --checkpoint-every, "25"]
YAML
}
phase() { kubectl get tj -n "$NS" "$1" -o jsonpath='{.status.phase}'; }
ranks_reporting() {  # ranks_reporting <job> <max age seconds>
  op_curl "/debug/reports?namespace=$NS&job=$1" | python3 -c '
import datetime, json, sys
d = json.load(sys.stdin)
now = datetime.datetime.now(datetime.timezone.utc)
n = 0
for job in d.get("jobs", []):
    for r in job.get("ranks", []):
        t = datetime.datetime.fromisoformat(r["lastReport"].replace("Z", "+00:00"))
        n += (now - t).total_seconds() <= float(sys.argv[1])
print(n)' "$2"
}
export CLUSTER FABRIC REL
fns="$(declare -f leader op_curl ranks_reporting phase)"

submit one 300
wait_until 90 "job one Running" bash -c "$fns; [[ \$(phase one) == Running ]]"
wait_until 60 "4 ranks of job one reporting to the leader" bash -c \
  "$fns; [[ \$(ranks_reporting one 5) == 4 ]]"
op_curl "/debug/reports?namespace=$NS&job=one" >"$WORK/reports-one.json"
python3 - "$WORK/reports-one.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["jobs"][0]["ranks"]:
    print("  rank {rank} pod {pod} on {node}: {reports} reports".format(**r))
PY
wait_until 180 "job one Succeeded" bash -c "$fns; [[ \$(phase one) == Succeeded ]]"
echo "job one: Succeeded, its 4 ranks' reports reached the leader through the report Service"

# ---- 4. helm upgrade while job two runs -----------------------------------------------------------
submit two 1200  # long enough to outlast the operator roll on a loaded machine
wait_until 90 "job two Running" bash -c "$fns; [[ \$(phase two) == Running ]]"
wait_until 90 "job two checkpointed" bash -c \
  "[[ \$(kubectl get tj -n $NS two -o jsonpath='{.status.lastCheckpoint.step}') -ge 25 ]]"
pods_before=$(kubectl get pods -n "$NS" -l c4.dev/job-name=two \
  -o jsonpath='{range .items[*]}{.metadata.uid}{"\n"}{end}' | sort)
old_ops=$(kubectl get pods -n "$SYS" -l app.kubernetes.io/component=operator \
  -o jsonpath='{.items[*].metadata.name}')
cert() { kubectl get secret -n "$SYS" "$REL-reports-tls" -o jsonpath='{.data.tls\.crt}'; }
cert_before=$(cert)
helm upgrade "$REL" "$CHART" -n "$SYS" -f "$WORK/values.yaml" --set operator.logLevel=debug \
  2> >(grep -v 'found symbolic link' >&2) >/dev/null || fail "helm upgrade"
rolled() {  # both operator pods new and Running, none of the old ones left
  local names
  names=$(kubectl get pods -n "$SYS" -l app.kubernetes.io/component=operator \
    -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase}{"\n"}{end}')
  [[ $(grep -c ' Running$' <<<"$names") == 2 && $(wc -l <<<"$names") == 2 ]] || return 1
  local o
  for o in $old_ops; do grep -q "^$o " <<<"$names" && return 1; done
  return 0
}
export old_ops
wait_until 180 "the operator rolled to 2 new pods" bash -c "$(declare -f rolled); rolled"
wait_until 60 "a new leader labelled" bash -c \
  "$fns; l=\$(leader); [[ -n \$l && \" $old_ops \" != *\" \$l \"* ]]"
NEW_LEADER=$(leader)
[[ $(cert) == "$cert_before" ]] || fail "helm upgrade replaced the generated serving certificate"
kubectl get pod -n "$SYS" "$NEW_LEADER" -o jsonpath='{.spec.containers[0].args}' \
  | grep -q -- '--log-level=debug' || fail "the new leader does not run the upgraded values"
echo "helm upgrade: operator rolled ($old_ops -> $(kubectl get pods -n "$SYS" -l app.kubernetes.io/component=operator -o jsonpath='{.items[*].metadata.name}')), leader $NEW_LEADER"
wait_until 60 "4 ranks of job two reporting to the new leader" bash -c \
  "$fns; [[ \$(ranks_reporting two 5) == 4 ]]"
[[ $(phase two) == Running ]] || fail "job two is $(phase two) after the upgrade"
wait_until 240 "job two Succeeded" bash -c "$fns; [[ \$(phase two) == Succeeded ]]"
[[ $(kubectl get tj -n "$NS" two -o jsonpath='{.status.restarts}') == 0 ]] \
  || fail "job two restarted across the upgrade"
pods_after=$(kubectl get pods -n "$NS" -l c4.dev/job-name=two \
  -o jsonpath='{range .items[*]}{.metadata.uid}{"\n"}{end}' | sort)
[[ $pods_after == "$pods_before" ]] || fail "job two's pods changed across the upgrade"
echo "job two: Succeeded across the upgrade, same 4 pods, attempt 0 (no restart)"

# ---- 5. helm uninstall ---------------------------------------------------------------------------
helm uninstall "$REL" -n "$SYS" --wait --timeout 120s \
  2> >(grep -v 'found symbolic link' >&2) >/dev/null || fail "helm uninstall"
python3 - "$WORK/manifest.yaml" >"$WORK/objects.txt" <<'PY'
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d:
        print(d["apiVersion"], d["kind"], d["metadata"].get("namespace", "-"), d["metadata"]["name"])
PY
left=()
while read -r api kind ns name; do
  group=${api%/*}
  [[ $group == "$api" ]] && res=$kind || res=$kind.$group
  args=()
  [[ $ns != - ]] && args=(-n "$ns")
  if out=$(kubectl get "$res" "$name" "${args[@]}" -o name 2>&1); then
    left+=("$kind/$name")
  elif [[ $out != *NotFound* ]]; then
    fail "cannot check $kind/$name: $out"
  fi
done <"$WORK/objects.txt"
((${#left[@]} == 0)) || fail "left after helm uninstall: ${left[*]}"
echo "helm uninstall: all $(wc -l <"$WORK/objects.txt") rendered objects gone ($(cut -d' ' -f2 "$WORK/objects.txt" | sort | uniq -c | awk '{printf "%s %s, ", $1, $2}'))"
wait_until 60 "the chart's pods gone" bash -c \
  "[[ -z \$(kubectl get pods -n $SYS -l app.kubernetes.io/instance=$REL -o name) ]]"
any=$(kubectl get all,cm,secret,sa,role,rolebinding,lease -n "$SYS" \
  -l app.kubernetes.io/instance="$REL" -o name 2>/dev/null)
[[ -z $any ]] || fail "objects labelled with the release remain: $any"
any=$(kubectl get clusterrole,clusterrolebinding,validatingwebhookconfiguration,mutatingwebhookconfiguration \
  -o name | grep -E "/$REL-" || true)
[[ -z $any ]] || fail "cluster objects remain: $any"
kubectl get crd trainingjobs.c4.dev fabrics.c4.dev >/dev/null || fail "the CRDs were removed"
# What may be left in the release namespace is the operator's run-time state, which the chart
# does not own: its Lease and the circuit breaker's ConfigMap (both go with the namespace).
runtime=$(kubectl get cm,secret,lease,sa,svc,deploy,ds,rs,pods,role,rolebinding -n "$SYS" -o name \
  | grep -vE '^(configmap/kube-root-ca.crt|serviceaccount/default)$' || true)
other=$(grep -vxE "lease.coordination.k8s.io/$REL-operator|configmap/c4-node-actions" \
  <<<"$runtime" || true)
[[ -z $other ]] || fail "left in $SYS after helm uninstall: $other"
echo "left in $SYS: only the operator's run-time state: ${runtime:-nothing}" | tr '\n' ' '
echo
echo "PASS: helm install (chart pods, RBAC, certificate, report Service, DaemonSet), a job," \
  "helm upgrade under a running job, helm uninstall"
