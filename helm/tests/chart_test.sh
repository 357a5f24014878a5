#!/usr/bin/env bash
# Checks of the Helm chart helm/c4 with the helm and kubectl of the test cluster:
#   1. `helm lint --strict` with the default values and with each TLS mode;
#   2. values.schema.json refuses bad values with the field's name (and nothing renders);
#   3. the rendered manifests (CRDs included) pass a server-side dry run against the real API
#      server of the test cluster (schemas of every object, RBAC rules well-formed);
#   4. the generated serving certificate names the report Service and verifies against its CA;
#   5. every rule of the ClusterRoles/Roles names a resource and verbs (no wildcards);
#   6. the rendered manifests repeat no key in a mapping (scripts/check-yaml.py).
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
echo "lint: ok (default, certManager, secret, monitoring)"

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
echo "schema: 7 bad values refused with their field"

# 3. server-side dry run of everything the chart installs
kubectl create namespace "$NS" >/dev/null
H template c4 "$CHART" -n "$NS" --include-crds >"$WORK/all.yaml"
kubectl apply --dry-run=server -n "$NS" -f "$WORK/all.yaml" >"$WORK/dry.txt" \
  || fail "server-side dry run refused the manifests"
echo "dry run: $(wc -l <"$WORK/dry.txt") objects accepted by the API server"
python3 "$ROOT/scripts/check-yaml.py" "$ROOT" - <"$WORK/all.yaml" >/dev/null ||
  fail "the rendered chart repeats a key (YAML keeps the last one silently)"
echo "rendered: no duplicate keys"

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
