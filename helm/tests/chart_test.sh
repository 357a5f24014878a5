#!/usr/bin/env bash
# Checks of the Helm chart helm/c4 with the helm and kubectl of the test cluster:
#   1. `helm lint --strict` with the default values and with each TLS mode;
#   2. values.schema.json refuses bad values with the field's name (and nothing renders);
#   3. the rendered manifests (CRDs included) pass a server-side dry run against the real API
#      server of the test cluster (schemas of every object, RBAC rules well-formed);
#   4. the generated serving certificate names the report Service and verifies against its CA;
#   5. every rule of the ClusterRoles/Roles names a resource and verbs (no wildcards);
#   6. the rendered manifests repeat no key in a mapping (scripts/check-yaml.py);
#   7. subchart use (`global`), the operator's PodDisruptionBudget and anti-affinity, the chart's
#      PriorityClass (outside kube-system; the system classes inside), the log format flag, and
#      the variants' server-side dry runs;
#   8. the aggregated ClusterRoles, applied for real: the controller-manager folds them into the
#      built-in edit/view roles, and SubjectAccessReviews say a user bound to `edit` in a
#      namespace may create TrainingJobs, one bound to `view` may only read them;
#   9. Pod Security: the chart's ValidatingAdmissionPolicy, applied for real with the CRD, refuses
#      a TrainingJob (create, spec update) in namespaces labelled enforce=baseline or restricted
#      with its message, accepts it in unlabelled, privileged and exempt namespaces and lets
#      metadata updates and deletion through; the control: PodSecurity admission itself refuses a
#      pod with the trainer pods' hostPath volumes in the baseline and restricted namespaces (so
#      the policy refuses what could never run); admission.podSecurityCheck.enabled=false renders
#      nothing.
#
#   chart_test.sh   (needs $C4_TESTENV_DIR: a cluster from `testenv.sh up`)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CHART=$ROOT/helm/c4
[[ -n ${C4_TESTENV_DIR:-} && -f $C4_TESTENV_DIR/env ]] || { echo "no test cluster (C4_TESTENV_DIR)"; exit 77; }
# shellcheck disable=SC1091
source "$C4_TESTENV_DIR/env"
command -v helm >/dev/null || { echo "FAIL: no helm in $C4_TESTENV_BIN" >&2; exit 1; }
WORK=$(mktemp -d /tmp/c4-chart-XXXXXX)
NS=c4-chart-$RANDOM$RANDOM
cleanup() { kubectl delete ns "$NS" --wait=false >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
H() { helm "$@" 2> >(grep -v 'found symbolic link' >&2); }

# 1. lint
H lint --strict "$CHART" >/dev/null || fail "helm lint --strict"
H lint --strict "$CHART" --set reports.tls.mode=certManager \
  --set reports.tls.certManager.issuerRef.name=ca >/dev/null || fail "lint: certManager mode"
H lint --strict "$CHART" --set reports.tls.mode=secret --set reports.tls.secretName=mine \
  >/dev/null || fail "lint: secret mode"
H lint --strict "$CHART" --set metrics.serviceMonitor.enabled=true \
  --set metrics.prometheusRule.enabled=true --set metrics.grafanaDashboards.enabled=true \
  >/dev/null || fail "lint: monitoring enabled"
H lint --strict "$CHART" --set global.foo=bar --set global.image.registry=r.example \
  >/dev/null || fail "lint: global values (subchart use)"
H template t "$CHART" --set global.foo=bar >/dev/null || fail "render: global values"
echo "lint: ok (default, certManager, secret, monitoring, global)"

# 2. bad values are refused, naming the field
refused() {  # refused <text expected in the error> <helm --set args...>
  local want=$1 out
  shift
  if out=$(H template t "$CHART" "$@" 2>&1); then fail "accepted: $*"; fi
  [[ $out == *"$want"* ]] || fail "refusal of '$*' does not name '$want': $out"
}
refused "operator/replicas" --set operator.replicas=0
refused "reports/tls/mode" --set reports.tls.mode=selfsigned
refused "nodePlugin/socketDir" --set nodePlugin.socketDir=relative/dir
refused "bogus" --set operator.bogus=1
refused "tokenExpirationSeconds" --set nodePlugin.tokenExpirationSeconds=60
refused "reports.tls.secretName is required" --set reports.tls.mode=secret
refused "issuerRef.name is required" --set reports.tls.mode=certManager
refused "logging/format" --set logging.format=text
refused "priorityClass/value" --set priorityClass.value=2000000000
refused "priorityClass/name" --set priorityClass.name=system-c4
refused "priorityClass/preemptionPolicy" --set priorityClass.preemptionPolicy=Sometimes
refused "podDisruptionBudget/maxUnavailable" --set operator.podDisruptionBudget.maxUnavailable=one
refused "podAntiAffinity" --set operator.podAntiAffinity=strict
refused "aggregateToDefaultRoles" --set rbac.aggregateToDefaultRoles=yes
refused "podSecurityCheck/enabled" --set admission.podSecurityCheck.enabled=yes
refused "exemptNamespaces" --set 'admission.podSecurityCheck.exemptNamespaces[0]=Not_A_Namespace'
echo "schema: 16 bad values refused with their field"

# 3. server-side dry run of everything the chart installs
kubectl create namespace "$NS" >/dev/null
H template c4 "$CHART" -n "$NS" --include-crds >"$WORK/all.yaml"
kubectl apply --dry-run=server -n "$NS" -f "$WORK/all.yaml" >"$WORK/dry.txt" \
  || fail "server-side dry run refused the manifests"
echo "dry run: $(wc -l <"$WORK/dry.txt") objects accepted by the API server"
python3 "$ROOT/scripts/check-yaml.py" "$ROOT" - <"$WORK/all.yaml" >/dev/null ||
  fail "the rendered chart repeats a key (YAML keeps the last one silently)"
echo "rendered: no duplicate keys"

# 7. the chart's variants: objects rendered, and each accepted by the API server
variant() {  # variant <name> <namespace> <helm args...>: renders to $WORK/<name>.yaml, dry-runs it
  local name=$1 ns=$2
  shift 2
  H template c4 "$CHART" -n "$ns" "$@" >"$WORK/$name.yaml" || fail "render: $name"
  kubectl apply --dry-run=server -n "$ns" -f "$WORK/$name.yaml" >/dev/null \
    || fail "server-side dry run refused variant $name"
}
variant pdb1 "$NS" --set operator.replicas=1
variant pdbmin "$NS" --set operator.podDisruptionBudget.minAvailable=1 \
  --set operator.podAntiAffinity=hard --set logging.format=json
variant own "$NS" --set operator.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool \
  --set operator.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists \
  --set operator.podDisruptionBudget.enabled=true --set operator.replicas=1 \
  --set priorityClass.create=false --set rbac.aggregateToDefaultRoles=false
variant named "$NS" --set nodePlugin.priorityClassName=mine --set operator.priorityClassName=ours \
  --set priorityClass.preemptionPolicy=Never --set priorityClass.value=1000
# kube-system: only rendered (installing there is not this test's business).
H template c4 "$CHART" -n kube-system >"$WORK/kube-system.yaml" || fail "render: kube-system"
python3 - "$WORK" "$NS" <<'PY'
import sys, yaml
work, ns = sys.argv[1], sys.argv[2]
def load(name):
    return [d for d in yaml.safe_load_all(open(f"{work}/{name}.yaml")) if d]
def one(docs, kind, name=None):
    got = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(got) <= 1, (kind, name, len(got))
    return got[0] if got else None
def pod(docs, kind):
    return one(docs, kind)["spec"]["template"]["spec"]
def args(docs, kind):
    return pod(docs, kind)["containers"][0]["args"]
sel = {"app.kubernetes.io/name": "c4", "app.kubernetes.io/instance": "c4",
       "app.kubernetes.io/component": "operator"}
d = load("all")
# Default: 2 replicas -> PDB maxUnavailable 1; soft anti-affinity by hostname on the replicas.
pdb = one(d, "PodDisruptionBudget")
assert pdb and pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": sel}}, pdb
aff = pod(d, "Deployment")["affinity"]["podAntiAffinity"]
term = aff["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
assert term == {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": sel}}, aff
assert "requiredDuringSchedulingIgnoredDuringExecution" not in aff, aff
# The chart's PriorityClass outside kube-system, used by both workloads.
pc = one(d, "PriorityClass")
assert pc and pc["metadata"]["name"] == "c4-node-critical" and pc["value"] == 999999000 \
    and pc["preemptionPolicy"] == "PreemptLowerPriority" and pc["globalDefault"] is False, pc
for kind in ("DaemonSet", "Deployment"):
    assert pod(d, kind)["priorityClassName"] == "c4-node-critical", kind
    assert "--log-format=logfmt" in args(d, kind), kind
# Aggregated roles: labels and rules.
view, edit = one(d, "ClusterRole", "c4-trainingjob-view"), one(d, "ClusterRole", "c4-trainingjob-edit")
agg = "rbac.authorization.k8s.io/aggregate-to-"
assert all(view["metadata"]["labels"].get(agg + r) == "true" for r in ("view", "edit", "admin")), view
assert all(edit["metadata"]["labels"].get(agg + r) == "true" for r in ("edit", "admin")), edit
assert agg + "view" not in edit["metadata"]["labels"], "view must not gain write rights"
assert view["rules"] == [{"apiGroups": ["c4.dev"], "resources": ["trainingjobs", "trainingjobs/status"],
                          "verbs": ["get", "list", "watch"]}], view["rules"]
assert edit["rules"] == [{"apiGroups": ["c4.dev"], "resources": ["trainingjobs"],
                          "verbs": ["create", "update", "patch", "delete", "deletecollection"]}], edit["rules"]
# One replica: no PDB unless enabled.
assert one(load("pdb1"), "PodDisruptionBudget") is None
d = load("pdbmin")
assert one(d, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
assert "maxUnavailable" not in one(d, "PodDisruptionBudget")["spec"]
hard = pod(d, "Deployment")["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
assert hard == [{"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": sel}}], hard
for kind in ("DaemonSet", "Deployment"):
    assert "--log-format=json" in args(d, kind), kind
# Own affinity replaces the anti-affinity; PDB forced for one replica; no class, no roles.
d = load("own")
assert list(pod(d, "Deployment")["affinity"]) == ["nodeAffinity"], pod(d, "Deployment")["affinity"]
assert one(d, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
assert one(d, "PriorityClass") is None
for kind in ("DaemonSet", "Deployment"):
    assert "priorityClassName" not in pod(d, kind), kind
assert one(d, "ClusterRole", "c4-trainingjob-view") is None and one(d, "ClusterRole", "c4-trainingjob-edit") is None
# Names given are used as is.
d = load("named")
assert pod(d, "DaemonSet")["priorityClassName"] == "mine" and pod(d, "Deployment")["priorityClassName"] == "ours"
assert one(d, "PriorityClass")["preemptionPolicy"] == "Never" and one(d, "PriorityClass")["value"] == 1000
# kube-system: the system classes, no class of the chart's.
d = load("kube-system")
assert one(d, "PriorityClass") is None
assert pod(d, "DaemonSet")["priorityClassName"] == "system-node-critical"
assert pod(d, "Deployment")["priorityClassName"] == "system-cluster-critical"
print("variants: PDB (default, 1 replica, minAvailable, forced), anti-affinity (soft, hard, own),"
      " PriorityClass (chart's, named, kube-system), log format, aggregated roles: as rendered;"
      " every variant accepted by the API server")
PY

# 8. the aggregated roles on the real API server (RBAC authorizer + the controller-manager's
# clusterrole-aggregation controller). A release name of its own, so the ClusterRoles do not
# collide with anything else on the shared cluster; removed on exit.
REL=c4agg$RANDOM
AGG_ROLES="clusterrole/$REL-trainingjob-view clusterrole/$REL-trainingjob-edit"
cleanup() {
  # shellcheck disable=SC2086
  kubectl delete $AGG_ROLES --ignore-not-found >/dev/null 2>&1 || true
  kubectl delete ns "$NS" --wait=false >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
H template "$REL" "$CHART" -n "$NS" --show-only templates/rbac.yaml >"$WORK/rbac.yaml"
python3 - "$WORK/rbac.yaml" "$REL" >"$WORK/agg.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
agg = [d for d in docs if d["kind"] == "ClusterRole" and "-trainingjob-" in d["metadata"]["name"]]
assert len(agg) == 2, [d["metadata"]["name"] for d in docs]
yaml.safe_dump_all(agg, sys.stdout)
PY
kubectl apply -f "$WORK/agg.yaml" >/dev/null || fail "cannot apply the aggregated ClusterRoles"
kubectl create rolebinding alice-edit -n "$NS" --clusterrole=edit --user=c4-test-alice >/dev/null
kubectl create rolebinding bob-view -n "$NS" --clusterrole=view --user=c4-test-bob >/dev/null
# can <user> <verb> <resource>[/<subresource>] [namespace] -> yes/no: a SubjectAccessReview, i.e.
# the API server's authorizer itself (`kubectl auth can-i` would first look the resource up in
# discovery, which fails while the CRDs are not installed).
can() {
  local user=$1 verb=$2 res=${3%%/*} sub="" ns=${4:-$NS} out
  [[ $3 == */* ]] && sub=${3#*/}
  out=$(kubectl create -o jsonpath='{.status.allowed}' -f - <<EOF
apiVersion: authorization.k8s.io/v1
kind: SubjectAccessReview
spec:
  user: $user
  resourceAttributes: {namespace: $ns, verb: $verb, group: c4.dev, resource: $res, subresource: "$sub"}
EOF
  ) || fail "SubjectAccessReview failed"
  if [[ $out == true ]]; then echo yes; else echo no; fi
}
ok=""
for _ in $(seq 1 60); do  # the aggregation controller is asynchronous
  if [[ $(can c4-test-alice create trainingjobs) == yes &&
        $(can c4-test-bob list trainingjobs) == yes ]]; then ok=1; break; fi
  sleep 0.5
done
[[ -n $ok ]] || fail "edit/view did not gain the TrainingJob rules (aggregation): alice create=$(can c4-test-alice create trainingjobs) bob list=$(can c4-test-bob list trainingjobs)"
[[ $(can c4-test-alice delete trainingjobs) == yes ]] || fail "edit cannot delete TrainingJobs"
[[ $(can c4-test-alice get trainingjobs/status) == yes ]] || fail "edit cannot read the status"
[[ $(can c4-test-alice update trainingjobs/status) == no ]] || fail "edit may write the status"
[[ $(can c4-test-bob create trainingjobs) == no ]] || fail "view may create TrainingJobs"
[[ $(can c4-test-bob get trainingjobs/status) == yes ]] || fail "view cannot read the status"
[[ $(can c4-test-alice list fabrics) == no && $(can c4-test-bob get fabrics) == no ]] ||
  fail "edit or view may read Fabrics"
[[ $(can c4-test-alice create trainingjobs default) == no ]] \
  || fail "alice may create TrainingJobs outside her namespace"
echo "aggregation: edit in $NS may create/delete TrainingJobs and read their status, not write it;" \
  "view may only read; neither sees Fabrics; nothing outside $NS"

# 9. Pod Security: the admission policy on the real API server. A release name of its own (the
# policy and binding are cluster-scoped), namespaces labelled with this run's id; the binding is
# narrowed to those namespaces so TrainingJobs of other tests on the shared cluster are never
# judged by it. The CRD stays installed, as other tests leave it.
PSA_REL=c4psa$RANDOM
PSA_ID=$PSA_REL$RANDOM
PSA_OBJS="validatingadmissionpolicy/$PSA_REL-pod-security validatingadmissionpolicybinding/$PSA_REL-pod-security"
declare -A PSA_NS=([baseline]=$NS-base [restricted]=$NS-restr [privileged]=$NS-priv
                   [none]=$NS-none [exempt]=$NS-exempt)
cleanup() {
  # shellcheck disable=SC2086
  kubectl delete $AGG_ROLES $PSA_OBJS --ignore-not-found >/dev/null 2>&1 || true
  kubectl delete ns "$NS" "${PSA_NS[@]}" --wait=false >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
for level in "${!PSA_NS[@]}"; do
  ns=${PSA_NS[$level]}
  kubectl create namespace "$ns" >/dev/null
  kubectl label namespace "$ns" "c4.dev/chart-test=$PSA_ID" >/dev/null
  case $level in
    none) ;;
    exempt) kubectl label namespace "$ns" pod-security.kubernetes.io/enforce=baseline >/dev/null ;;
    *) kubectl label namespace "$ns" "pod-security.kubernetes.io/enforce=$level" >/dev/null ;;
  esac
done
H template "$PSA_REL" "$CHART" -n "$NS" --show-only templates/admission-policy.yaml \
  --set "admission.podSecurityCheck.exemptNamespaces[0]=${PSA_NS[exempt]}" >"$WORK/psa-rendered.yaml" \
  || fail "render: admission policy"
H template c4 "$CHART" -n "$NS" --set operator.watchNamespace=team >"$WORK/psa-watch.yaml" \
  || fail "render: admission policy with watchNamespace"
H template c4 "$CHART" -n "$NS" --set admission.podSecurityCheck.enabled=false >"$WORK/psa-off.yaml" \
  || fail "render: admission policy off"
python3 - "$WORK" "$PSA_REL" "$PSA_ID" "${PSA_NS[exempt]}" >"$WORK/psa.yaml" <<'PY'
import sys, yaml
work, rel, run_id, exempt = sys.argv[1:]
def load(name):
    return [d for d in yaml.safe_load_all(open(f"{work}/{name}.yaml")) if d]
def of(docs, kind):
    return [d for d in docs if d["kind"] == kind]
VAP, BINDING = "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"
# Default: one policy, bound cluster-wide, denying.
d = load("all")
assert len(of(d, VAP)) == 1 and len(of(d, BINDING)) == 1, [x["kind"] for x in d]
b = of(d, BINDING)[0]
assert b["spec"] == {"policyName": "c4-pod-security", "validationActions": ["Deny"]}, b["spec"]
p = of(d, VAP)[0]["spec"]
assert p["matchConstraints"]["resourceRules"] == [{"apiGroups": ["c4.dev"], "apiVersions": ["*"],
    "operations": ["CREATE", "UPDATE"], "resources": ["trainingjobs"]}], p["matchConstraints"]
# watchNamespace: only that namespace's jobs are this release's.
b = of(load("psa-watch"), BINDING)[0]
assert b["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"] == [
    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team"]}], b["spec"]
# Off: nothing of it.
assert not of(load("psa-off"), VAP) and not of(load("psa-off"), BINDING)
# The objects applied for real: the exempt namespace rendered into the binding, which this test
# narrows further to its own namespaces.
d = load("psa-rendered")
assert [x["kind"] for x in d] == [VAP, BINDING], [x["kind"] for x in d]
sel = d[1]["spec"]["matchResources"]["namespaceSelector"]
assert sel["matchExpressions"] == [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                    "values": [exempt]}], sel
sel["matchLabels"] = {"c4.dev/chart-test": run_id}
yaml.safe_dump_all(d, sys.stdout)
PY
kubectl get crd trainingjobs.c4.dev >/dev/null 2>&1 ||
  kubectl create -f "$ROOT/crds/trainingjob.yaml" >/dev/null 2>&1 || true
kubectl wait --for=condition=Established crd/trainingjobs.c4.dev --timeout=60s >/dev/null ||
  fail "TrainingJob CRD not established"
kubectl apply -f "$WORK/psa.yaml" >/dev/null || fail "cannot apply the admission policy"
tj() {  # tj <namespace> [name]: a minimal TrainingJob
  cat <<EOF
apiVersion: c4.dev/v1alpha1
kind: TrainingJob
metadata: {name: ${2:-psa}, namespace: $1}
spec:
  replicas: 2
  template:
    spec:
      containers: [{name: trainer, image: busybox}]
EOF
}
POLICY_SAYS="ValidatingAdmissionPolicy '$PSA_REL-pod-security' with binding '$PSA_REL-pod-security' denied request"
refused_by_policy() {  # refused_by_policy <level> <output>
  local level=$1 out=$2
  [[ $out == *"$POLICY_SAYS"* ]] || fail "$level: not refused by the policy: $out"
  for want in "namespace ${PSA_NS[$level]}" "Pod Security level is $level" "hostPath volumes" \
    "agent socket directory /var/run/c4" "NCCL plugin directory /opt/c4/lib" \
    "pod-security.kubernetes.io/enforce=privileged" "docs/operations.md#pod-security"; do
    [[ $out == *"$want"* ]] || fail "$level: the refusal does not say '$want': $out"
  done
}
# The API server loads policies asynchronously: wait until the baseline namespace is refused.
out=""
for _ in $(seq 1 60); do
  if out=$(tj "${PSA_NS[baseline]}" | kubectl create --dry-run=server -f - 2>&1); then
    sleep 0.5; continue
  fi
  break
done
refused_by_policy baseline "$out"
out=$(tj "${PSA_NS[restricted]}" | kubectl create --dry-run=server -f - 2>&1) &&
  fail "restricted: TrainingJob accepted"
refused_by_policy restricted "$out"
for level in none privileged exempt; do
  out=$(tj "${PSA_NS[$level]}" | kubectl create --dry-run=server -f - 2>&1) ||
    fail "$level: TrainingJob refused: $out"
done
# Updates: a job created while its namespace was privileged, then the namespace labelled
# baseline: metadata updates and deletion pass, a spec change is refused.
ns=${PSA_NS[privileged]}
tj "$ns" early | kubectl create -f - >/dev/null || fail "cannot create a TrainingJob in $ns"
kubectl label namespace "$ns" pod-security.kubernetes.io/enforce=baseline --overwrite >/dev/null
kubectl annotate -n "$ns" trainingjob early c4.dev/chart-test=1 >/dev/null 2>"$WORK/err" ||
  fail "metadata update refused: $(cat "$WORK/err")"
out=$(kubectl patch -n "$ns" trainingjob early --type=merge -p '{"spec":{"suspend":true}}' 2>&1) &&
  fail "spec update accepted in a baseline namespace"
[[ $out == *"$POLICY_SAYS"* && $out == *"Pod Security level is baseline"* ]] ||
  fail "spec update not refused by the policy: $out"
kubectl delete -n "$ns" trainingjob early --wait=true --timeout=30s >/dev/null ||
  fail "cannot delete a TrainingJob in a baseline namespace"
# The control: what the policy foresees is real. A pod with the trainer pods' hostPath volumes
# (operator/trainingjob/children.cc: the agent socket and NCCL plugin directories, mounted
# read-only) is refused by PodSecurity admission in the baseline and restricted namespaces and
# accepted in an unlabelled one; were PSA to stop refusing it, the policy would refuse jobs that
# could run.
trainer_pod() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: psa-control, namespace: $1}
spec:
  containers:
    - name: trainer
      image: busybox
      volumeMounts:
        - {name: c4-agent, mountPath: /var/run/c4, readOnly: true}
        - {name: c4-plugin, mountPath: /opt/c4/lib, readOnly: true}
  volumes:
    - {name: c4-agent, hostPath: {path: /var/run/c4, type: DirectoryOrCreate}}
    - {name: c4-plugin, hostPath: {path: /opt/c4/lib, type: DirectoryOrCreate}}
EOF
}
for level in baseline restricted; do
  out=$(trainer_pod "${PSA_NS[$level]}" | kubectl create --dry-run=server -f - 2>&1) &&
    fail "$level: PodSecurity admitted a pod with hostPath volumes"
  [[ $out == *"violates PodSecurity \"$level:latest\""* && $out == *'"c4-agent", "c4-plugin"'* ]] ||
    fail "$level: the pod was not refused by PodSecurity for its hostPath volumes: $out"
done
out=$(trainer_pod "${PSA_NS[none]}" | kubectl create --dry-run=server -f - 2>&1) ||
  fail "unlabelled namespace: the trainer pod was refused: $out"
# shellcheck disable=SC2086
kubectl delete $PSA_OBJS >/dev/null || fail "cannot delete the admission policy"
echo "pod security: TrainingJobs refused by the policy in baseline and restricted namespaces" \
  "(and a spec update after relabelling), accepted unlabelled, privileged and exempt; metadata" \
  "updates and deletion pass; PodSecurity refuses the trainer pods' hostPath volumes there;" \
  "nothing rendered when off"

# 4. the generated certificate
python3 - "$WORK/all.yaml" "$WORK" <<'PY'
import base64, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
sec = [d for d in docs if d["kind"] == "Secret" and d["type"] == "kubernetes.io/tls"]
assert len(sec) == 1, f"expected one TLS Secret, got {len(sec)}"
for k in ("tls.crt", "tls.key", "ca.crt"):
    open(f"{sys.argv[2]}/{k}", "wb").write(base64.b64decode(sec[0]["data"][k]))
PY
openssl verify -CAfile "$WORK/ca.crt" "$WORK/tls.crt" >/dev/null || fail "certificate does not verify"
sans=$(openssl x509 -in "$WORK/tls.crt" -noout -ext subjectAltName)
[[ $sans == *"DNS:c4-reports.$NS.svc"* ]] || fail "certificate SANs lack c4-reports.$NS.svc: $sans"
echo "certificate: verifies against its CA, SANs: $(tr -d '\n' <<<"$sans" | sed 's/.*Name: *//')"

# 5. RBAC: explicit resources and verbs only
python3 - "$WORK/all.yaml" <<'PY'
import sys, yaml
n = 0
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] in ("ClusterRole", "Role"):
        for r in d["rules"]:
            n += 1
            assert "*" not in r["verbs"] and "*" not in r["resources"], (d["metadata"]["name"], r)
print(f"rbac: {n} rules, no wildcards")
PY
echo "PASS: chart"
