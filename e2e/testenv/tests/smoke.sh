#!/usr/bin/env bash
# Smoke test of the harness: up -> apply a CRD -> create, watch, patch status -> down, twice, and
# check that every process `up` started is gone after each `down`.
#   smoke.sh <work dir>
set -euo pipefail
TESTENV=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/testenv.sh
DIR=${1:?usage: smoke.sh <work dir>}
mkdir -p "$DIR"; DIR=$(cd "$DIR" && pwd)
fail() { echo "SMOKE FAIL: $*" >&2; "$TESTENV" down --dir "$DIR" || true; exit 1; }
trap 'fail "interrupted"' INT TERM

round() {
  local r=$1 t0=$SECONDS
  "$TESTENV" up --dir "$DIR" --nodes 3 --leaves 2 || fail "round $r: up"
  echo "round $r: up in $((SECONDS - t0))s"
  local pids; pids=$(cat "$DIR"/pids/*.pid)
  # shellcheck disable=SC1091
  source "$DIR/env"
  [[ $(kubectl get nodes -l c4.dev/leaf=leaf-1 -o name | wc -l) == 1 ]] || fail "leaf labels"
  [[ $(kubectl get node node-2 -o jsonpath='{.status.capacity.nvidia\.com/gpu}') == 8 ]] \
    || fail "gpu capacity"
  local want; want=$(. "$(dirname "$TESTENV")/versions.env"; echo "$K8S_VERSION")
  [[ $(kubectl get --raw /version | jq -r .gitVersion) == "$want" ]] || fail "server version not stamped"

  kubectl apply -f - <<'YAML' >/dev/null
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.smoke.c4.dev}
spec:
  group: smoke.c4.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
          status: {type: object, properties: {phase: {type: string}}}
YAML
  kubectl wait --for=condition=Established crd/widgets.smoke.c4.dev --timeout=60s >/dev/null \
    || fail "CRD not established"
  kubectl create namespace smoke >/dev/null
  kubectl -n smoke apply -f - <<'YAML' >/dev/null || fail "create widget"
apiVersion: smoke.c4.dev/v1
kind: Widget
metadata: {name: w1}
spec: {size: 3}
YAML
  local watch_out=$DIR/watch.out
  kubectl -n smoke get widget w1 --watch --output-watch-events \
    -o 'jsonpath={.type} {.object.status.phase}{"\n"}' >"$watch_out" 2>&1 &
  local watcher=$!
  for _ in $(seq 50); do [[ -s $watch_out ]] && break; sleep 0.2; done
  kubectl -n smoke patch widget w1 --subresource=status --type=merge \
    -p '{"status":{"phase":"Ready"}}' >/dev/null || fail "patch status"
  local seen=0
  for _ in $(seq 100); do grep -q '^MODIFIED Ready' "$watch_out" && { seen=1; break; }; sleep 0.1; done
  kill "$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null || true
  ((seen)) || fail "watch did not see the status patch: $(cat "$watch_out")"
  [[ $(kubectl -n smoke get widget w1 -o jsonpath='{.status.phase}') == Ready ]] || fail "status"
  [[ $(kubectl -n smoke get widget w1 -o jsonpath='{.spec.size}') == 3 ]] || fail "spec kept"

  "$TESTENV" down --dir "$DIR" || fail "round $r: down"
  local p
  for p in $pids; do
    [[ ! -e /proc/$p ]] || [[ $(cat /proc/$p/stat | awk '{print $3}') == Z ]] \
      || fail "round $r: process $p still running after down"
  done
  [[ -z $(ls "$DIR"/pids/*.pid 2>/dev/null) ]] || fail "pid files left behind"
  echo "round $r: ok"
}

round 1
round 2
echo "SMOKE PASS"
