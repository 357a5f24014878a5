#!/usr/bin/env bash
# Pod creation throughput: c4-operator (TrainingJobs) vs kube-controller-manager's Job controller
# creating the same number of pods in the same test cluster, one after the other.
#
#   bench/operator_pod_creation.sh [--dir TESTENV_DIR] [--jobs 100] [--replicas 16]
#       [--operator BIN] [--qps 20] [--burst 30] [--kcm-qps Q --kcm-burst B]
#
# Without --dir a cluster is brought up in a temporary directory (and torn down). --qps/--burst
# set the operator's client-side limits; the default equals kube-controller-manager's (20/30),
# which its Job controller gets through its own service-account client. --kcm-qps/--kcm-burst
# start the bench's own cluster with other controller-manager limits (not with --dir). Prints
# pods/s for both, the operator's API requests, and its reconcile duration p50/p99
# (interpolated from its Prometheus histogram).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR="" JOBS=100 REPLICAS=16 QPS=20 BURST=30 KCM_QPS=20 KCM_BURST=30 KCM_SET=0
OPERATOR=$ROOT/build/operator/c4-operator
while (($#)); do
  case "$1" in
    --dir) DIR=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --replicas) REPLICAS=$2; shift 2 ;;
    --operator) OPERATOR=$2; shift 2 ;;
    --qps) QPS=$2; shift 2 ;;
    --burst) BURST=$2; shift 2 ;;
    --kcm-qps) KCM_QPS=$2; KCM_SET=1; shift 2 ;;
    --kcm-burst) KCM_BURST=$2; KCM_SET=1; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x $OPERATOR ]] || { echo "build c4-operator first ($OPERATOR)" >&2; exit 2; }
if ((KCM_SET)) && [[ -n $DIR ]]; then
  echo "--kcm-qps/--kcm-burst need the bench's own cluster (drop --dir)" >&2
  exit 2
fi
OWN_CLUSTER=0
if [[ -z $DIR ]]; then
  DIR=$(mktemp -d /tmp/c4-bench-XXXXXX)
  OWN_CLUSTER=1
  "$ROOT/e2e/testenv/testenv.sh" up --dir "$DIR" --nodes 4 \
    --kcm-api-qps "$KCM_QPS" --kcm-api-burst "$KCM_BURST" >&2
fi
# shellcheck disable=SC1091
source "$DIR/env"
WORK=$(mktemp -d /tmp/c4-bench-work-XXXXXX)
OP_PID=""
cleanup() {
  [[ -n $OP_PID ]] && kill "$OP_PID" 2>/dev/null && wait "$OP_PID" 2>/dev/null || true
  kubectl delete ns c4-bench-tj c4-bench-job --ignore-not-found --wait=false >/dev/null 2>&1 || true
  ((OWN_CLUSTER)) && "$ROOT/e2e/testenv/testenv.sh" down --dir "$DIR" >&2 || true
  [[ -n ${KEEP_WORK:-} ]] && echo "work dir: $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT
TOTAL=$((JOBS * REPLICAS))
now() { date +%s.%N; }

# Number of pods in namespace $1, from a limit=1 list (1 + remainingItemCount): polling must
# not load the API server it measures (a full list of 1,600 pods five times a second does).
count_pods() {
  kubectl get --raw "/api/v1/namespaces/$1/pods?limit=1" 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(len(d.get("items", [])) + int(d["metadata"].get("remainingItemCount", 0)))'
}

# Waits until namespace $1 holds $TOTAL pods; prints the seconds since $2.
wait_pods() {
  local ns=$1 start=$2 n=0
  while :; do
    n=$(count_pods "$ns" || echo 0)
    ((n >= TOTAL)) && break
    sleep 0.2
  done
  echo "$(now) - $start" | bc -l
}

# kube-controller-manager's API requests so far (all its controllers), "METHOD=count ...".
kcm_requests() {
  # shellcheck disable=SC1091
  source "$DIR/ports.env"
  curl -sk --max-time 5 --cert "$DIR/pki/admin.crt" --key "$DIR/pki/admin.key" \
    "https://127.0.0.1:$KCM_PORT/metrics" 2>/dev/null | awk -F'[{}" ]+' '
      /^rest_client_requests_total/ {
        for (i = 1; i < NF; i++) if ($i == "method=") m = $(i + 1)
        n[m] += $NF; total += $NF
      }
      END { printf "total=%d", total; for (m in n) printf " %s=%d", m, n[m]; print "" }'
}
total_of() { sed -E 's/^total=([0-9]+).*/\1/' <<<"$1"; }

kubectl apply -f "$ROOT/crds/trainingjob.yaml" >/dev/null
kubectl wait --for condition=established crd/trainingjobs.c4.dev --timeout=60s >/dev/null
for ns in c4-bench-tj c4-bench-job; do
  kubectl delete ns "$ns" --ignore-not-found --wait=true >/dev/null
  kubectl create ns "$ns" >/dev/null
done

# ---- c4-operator --------------------------------------------------------------------------------
"$OPERATOR" --kubeconfig "$KUBECONFIG" --leader-elect=false --namespace c4-bench-tj \
  --metrics-address 127.0.0.1 --metrics-port 0 --workers 4 --kube-api-qps "$QPS" \
  --kube-api-burst "$BURST" --log-level info >"$WORK/operator.log" 2>&1 &
OP_PID=$!
PORT=""
for _ in $(seq 100); do
  PORT=$(grep -o 'metricsPort=[0-9]*' "$WORK/operator.log" 2>/dev/null | head -1 | cut -d= -f2 || true)
  [[ -n $PORT ]] && break
  sleep 0.1
done
[[ -n $PORT ]] || { echo "operator did not start:" >&2; cat "$WORK/operator.log" >&2; exit 1; }
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null && break
  sleep 0.1
done
for i in $(seq 0 $((JOBS - 1))); do
  cat <<YAML
---
apiVersion: c4.dev/v1alpha1
kind: TrainingJob
metadata: {name: tj-$i, namespace: c4-bench-tj}
spec:
  replicas: $REPLICAS
  template: {spec: {containers: [{name: trainer, image: trainer:bench}]}}
YAML
done >"$WORK/tj.yaml"
start=$(now)
kubectl create -f "$WORK/tj.yaml" >/dev/null
t_op=$(wait_pods c4-bench-tj "$start")
sleep 3  # let the status/Running reconciles finish before reading latencies
curl -sf "http://127.0.0.1:$PORT/metrics" >"$WORK/metrics.txt" || true
kill "$OP_PID"; wait "$OP_PID" 2>/dev/null || true; OP_PID=""

# ---- kube-controller-manager Job controller ------------------------------------------------------
for i in $(seq 0 $((JOBS - 1))); do
  cat <<YAML
---
apiVersion: batch/v1
kind: Job
metadata: {name: job-$i, namespace: c4-bench-job}
spec:
  parallelism: $REPLICAS
  completions: $REPLICAS
  completionMode: Indexed
  template: {spec: {restartPolicy: Never, containers: [{name: trainer, image: trainer:bench}]}}
YAML
done >"$WORK/job.yaml"
kcm_before=$(kcm_requests)
start=$(now)
kubectl create -f "$WORK/job.yaml" >/dev/null
t_job=$(wait_pods c4-bench-job "$start")
sleep 3  # count the Job controller's trailing status writes too, as for the operator
kcm_after=$(kcm_requests)

printf 'pods=%d (%d jobs x %d replicas), operator qps/burst=%s/%s, kcm qps/burst=%s/%s\n' \
  "$TOTAL" "$JOBS" "$REPLICAS" "$QPS" "$BURST" "$KCM_QPS" "$KCM_BURST"
printf 'c4-operator:              %6.2f s  %7.1f pods/s\n' "$t_op" "$(echo "$TOTAL / $t_op" | bc -l)"
printf 'kcm Job controller:       %6.2f s  %7.1f pods/s\n' "$t_job" "$(echo "$TOTAL / $t_job" | bc -l)"
printf 'ratio (operator / Job):   %6.2f\n' "$(echo "$t_job / $t_op" | bc -l)"
# Reconcile duration quantiles, linearly interpolated inside the histogram buckets.
awk -F'[{}" ]+' '
  /^c4_operator_reconcile_duration_seconds_bucket/ {
    for (i = 1; i <= NF; i++) if ($i == "le=") le = $(i + 1)
    n++; les[n] = (le == "+Inf") ? 1e9 : le; cnt[n] = $NF
  }
  function q(p,   target, i, lo, prev, d) {
    target = p * cnt[n]; prev = 0; lo = 0
    for (i = 1; i <= n; i++) {
      if (cnt[i] + 0 >= target) {
        if (les[i] >= 1e9) return lo  # in the +Inf bucket: report the last finite bound
        d = cnt[i] - prev; if (d == 0) d = 1
        return lo + (les[i] - lo) * (target - prev) / d
      }
      prev = cnt[i]; lo = les[i]
    }
  }
  END { if (n) printf "reconciles: %d, duration p50 %.1f ms, p99 %.1f ms\n", cnt[n], q(0.5) * 1000, q(0.99) * 1000 }
' "$WORK/metrics.txt"
op_requests=$(awk '/^c4_operator_api_requests_total/ {t += $NF} END {print t + 0}' "$WORK/metrics.txt")
kcm_delta=$(($(total_of "$kcm_after") - $(total_of "$kcm_before")))
printf 'API requests per pod:     c4-operator %.2f (%d, until a few seconds after the last pod)\n' \
  "$(echo "$op_requests / $TOTAL" | bc -l)" "$op_requests"
printf '                          kube-controller-manager %.2f (%d, all its controllers, until the last pod)\n' \
  "$(echo "$kcm_delta / $TOTAL" | bc -l)" "$kcm_delta"
grep -E "^c4_operator_(pods_created_total|reconciles_total|api_requests_total)" "$WORK/metrics.txt" || true
