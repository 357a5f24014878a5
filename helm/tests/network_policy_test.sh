#!/usr/bin/env bash
# Render test of the chart's NetworkPolicies (helm/c4/templates/network-policy.yaml), no cluster
# needed: `helm template` with the default and other values, checked with Python's yaml:
#   - on by default: the operator's report port admits only pods that carry the node plugin
#     DaemonSet's pod labels (and the DaemonSet is not on the host network, where a pod selector
#     would not match), the metrics ports admit any source; the policies select the pods of the
#     operator Deployment and the node plugin DaemonSet;
#   - reportsFrom / metricsFrom add peers, the ports follow the values, enabled=false renders none;
#   - the schema refuses unknown keys and non-object peers.
# helm: from PATH, else the test control plane's cached bin dir; exit 77 (skipped) without one.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CHART=$ROOT/helm/c4
HELM=$(command -v helm || true)
if [[ -z $HELM ]]; then
  HELM=$(ls -t "${C4_CACHE_DIR:-$HOME/.cache/c4}"/testenv/*/bin/helm 2>/dev/null | head -n 1 || true)
fi
[[ -n $HELM && -x $HELM ]] || { echo "SKIP: no helm (e2e/testenv/testenv.sh build brings one)"; exit 77; }
WORK=$(mktemp -d /tmp/c4-netpol-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
render() { "$HELM" template c4 "$CHART" -n c4-system "$@" 2> >(grep -v 'found symbolic link' >&2); }

render >"$WORK/default.yaml" || fail "default render"
render --set networkPolicy.enabled=false >"$WORK/off.yaml" || fail "render with enabled=false"
render --set reports.port=9443 --set operator.metricsPort=9090 --set nodePlugin.metricsPort=9500 \
  --set 'networkPolicy.reportsFrom[0].ipBlock.cidr=10.0.0.0/16' \
  --set 'networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.kubernetes\.io/metadata\.name=monitoring' \
  >"$WORK/custom.yaml" || fail "render with peers and ports"

python3 - "$WORK" <<'PY'
import sys, yaml

work = sys.argv[1]

def load(name):
    return [d for d in yaml.safe_load_all(open(f"{work}/{name}.yaml")) if d]

def policies(docs):
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "NetworkPolicy"}

def pod_labels(docs, kind):
    [w] = [d for d in docs if d["kind"] == kind]
    return w["spec"]["template"]["metadata"]["labels"], w["spec"]["template"]["spec"]

def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())

def rule_for(policy, port):
    rules = [r for r in policy["spec"]["ingress"] if [p["port"] for p in r["ports"]] == [port]]
    assert len(rules) == 1, (policy["metadata"]["name"], port, policy["spec"]["ingress"])
    return rules[0]

docs = load("default")
pols = policies(docs)
assert set(pols) == {"c4-operator", "c4-node-plugin"}, set(pols)
op_labels, _ = pod_labels(docs, "Deployment")
np_labels, np_spec = pod_labels(docs, "DaemonSet")
assert not np_spec.get("hostNetwork", False), "node plugin on the host network: pod selectors would not match it"
op, np = pols["c4-operator"], pols["c4-node-plugin"]
assert selects(op["spec"]["podSelector"], op_labels) and not selects(op["spec"]["podSelector"], np_labels)
assert selects(np["spec"]["podSelector"], np_labels) and not selects(np["spec"]["podSelector"], op_labels)
for p in (op, np):
    assert p["spec"]["policyTypes"] == ["Ingress"], p["spec"]
# The report port: the node plugin pods only.
reports = rule_for(op, 8443)
assert len(reports["from"]) == 1, reports
peer = reports["from"][0]
assert set(peer) == {"podSelector"}, peer  # this namespace only, no namespaceSelector
assert selects(peer["podSelector"], np_labels) and not selects(peer["podSelector"], op_labels)
# Metrics: any source.
assert "from" not in rule_for(op, 8080)
assert "from" not in rule_for(np, 9400)
assert len(op["spec"]["ingress"]) == 2 and len(np["spec"]["ingress"]) == 1
print("default: report port from node plugin pods only; metrics from anywhere")

assert policies(load("off")) == {}, "enabled=false still renders NetworkPolicies"
print("enabled=false: none")

pols = policies(load("custom"))
op, np = pols["c4-operator"], pols["c4-node-plugin"]
reports = rule_for(op, 9443)
assert reports["from"][1] == {"ipBlock": {"cidr": "10.0.0.0/16"}}, reports
assert len(reports["from"]) == 2
mon = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
assert rule_for(op, 9090)["from"] == mon, rule_for(op, 9090)
assert rule_for(np, 9500)["from"] == mon, rule_for(np, 9500)
print("custom: ports follow the values; reportsFrom and metricsFrom add their peers")
PY

refused() {  # refused <text expected in the error> <helm --set args...>
  local want=$1 out
  shift
  if out=$(render "$@" 2>&1); then fail "accepted: $*"; fi
  [[ $out == *"$want"* ]] || fail "refusal of '$*' does not name '$want': $out"
}
refused "networkPolicy" --set networkPolicy.bogus=1
refused "reportsFrom" --set 'networkPolicy.reportsFrom[0]=10.0.0.0/8'
refused "enabled" --set networkPolicy.enabled=maybe
echo "schema: bad networkPolicy values refused"
echo "PASS: network policy"
