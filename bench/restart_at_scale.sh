#!/usr/bin/env bash
# Restart at scale: a whole-group restart of N (default 1,024) pods by c4-operator (a TrainingJob)
# and by JobSet (one replicated Indexed Job, failurePolicy.maxRestarts) in the same test cluster
# run, one after the other, with the same pod template and the same injected failure.
#
#   bench/restart_at_scale.sh [--replicas 1024] [--nodes 20] [--operator BIN] [--qps 50]
#       [--burst 100] [--kcm-qps Q --kcm-burst B] [--jobset-version v0.12.0]
#
# The failure: one running pod's status is patched to phase Failed (container terminated,
# exit code 1) through the status subresource, the way a kubelet reports a crashed trainer.
# c4-operator treats it as a trainer failure (restart counted against maxRestarts;
# restartBackoffSeconds is set to 0 so no deliberate wait is measured); for JobSet the child Job
# (backoffLimit 0) fails and JobSet recreates its Jobs (it deletes them with propagation
# Foreground). Timed from a watch on the pods (the failure as the watch shows it = t0): the
# restart starting (TrainingJob status.attempt 1 / JobSet status.restarts 1), the first pod of
# the new group, the last old pod gone, all N new pods Running and Ready at once.
#
# The cluster is the bench's own: KWOK's pod-complete stage (pods owned by a Job become
# Succeeded as soon as they run) is left out, so Job pods stay Running like the operator's; the
# testenv binaries are reused through a bench cache that differs only in that stage file.
# JobSet is built from the Go module proxy into ~/.cache/c4/jobset-<version>-<go>-<arch>/ and
# runs as a host process with the admin kubeconfig, its CRD applied, its internal cert
# management off and no webhook configuration registered (its webhook server listens on a
# self-signed certificate nobody calls): the JobSet manifest sets explicitly every field the
# defaulting webhook would set. Prints both side by side, their ratio, and API requests.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
REPLICAS=1024 NODES=20 QPS=50 BURST=100 KCM_QPS=20 KCM_BURST=30 JOBSET_VERSION=v0.12.0
OPERATOR=$ROOT/build/operator/c4-operator
TIMEOUT=900  # seconds for any one wait
while (($#)); do
  case "$1" in
    --replicas) REPLICAS=$2; shift 2 ;;
    --nodes) NODES=$2; shift 2 ;;
    --operator) OPERATOR=$2; shift 2 ;;
    --qps) QPS=$2; shift 2 ;;
    --burst) BURST=$2; shift 2 ;;
    --kcm-qps) KCM_QPS=$2; shift 2 ;;
    --kcm-burst) KCM_BURST=$2; shift 2 ;;
    --jobset-version) JOBSET_VERSION=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x $OPERATOR ]] || { echo "build c4-operator first ($OPERATOR)" >&2; exit 2; }
[[ $REPLICAS =~ ^[1-9][0-9]*$ ]] || { echo "--replicas must be a positive integer" >&2; exit 2; }
((NODES * 110 >= 2 * REPLICAS)) || {
  echo "--nodes $NODES: KWOK nodes hold 110 pods; need room for 2 x $REPLICAS" >&2
  exit 2
}
now() { date +%s.%N; }
log() { echo "restart-bench [$(date +%H:%M:%S)]: $*" >&2; }
CACHE_ROOT=${C4_CACHE_DIR:-$HOME/.cache/c4}

# ---- JobSet from the Go module proxy, cached by version --------------------------------------
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
[[ -x $GO ]] || { echo "Go not found (JobSet is built from Go modules)" >&2; exit 2; }
export GOTOOLCHAIN=local
JOBSET_KEY="jobset-$JOBSET_VERSION-$("$GO" env GOVERSION)-$("$GO" env GOARCH)"
JOBSET_CACHE=$CACHE_ROOT/$JOBSET_KEY
JOBSET_SRC=$(GOFLAGS=-mod=mod "$GO" mod download -json "sigs.k8s.io/jobset@$JOBSET_VERSION" |
  sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[[ -d $JOBSET_SRC ]] || { echo "could not fetch sigs.k8s.io/jobset@$JOBSET_VERSION" >&2; exit 1; }
if [[ ! -x $JOBSET_CACHE/bin/jobset ]]; then
  log "building JobSet $JOBSET_VERSION (once; cached in $JOBSET_CACHE)"
  mkdir -p "$JOBSET_CACHE/bin"
  # `go install module@version` needs the proxy's version list, which may be refused; building
  # inside the downloaded module uses only its pinned go.sum.
  (cd "$JOBSET_SRC" && CGO_ENABLED=0 GOFLAGS=-mod=readonly "$GO" build -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION" \
    -o "$JOBSET_CACHE/bin/jobset.tmp" .)
  mv "$JOBSET_CACHE/bin/jobset.tmp" "$JOBSET_CACHE/bin/jobset"
fi
JOBSET_BIN=$JOBSET_CACHE/bin/jobset
JOBSET_CRD=$JOBSET_SRC/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml
[[ -f $JOBSET_CRD ]] || { echo "no JobSet CRD in $JOBSET_SRC" >&2; exit 1; }

# ---- the test control plane without KWOK's pod-complete stage ---------------------------------
REAL_BIN=$("$ROOT/e2e/testenv/build.sh" | tail -n 1)
REAL_CACHE=$(dirname "$REAL_BIN")
SHADOW_ROOT=$CACHE_ROOT/restart-bench
SHADOW=$SHADOW_ROOT/testenv/$(basename "$REAL_CACHE")
if [[ ! -f $SHADOW/.complete ]]; then
  rm -rf "$SHADOW"
  mkdir -p "$SHADOW/bin" "$SHADOW/share"
  for b in "$REAL_BIN"/*; do ln -s "$b" "$SHADOW/bin/$(basename "$b")"; done
  cp -r "$REAL_CACHE/share/kwok-stages" "$SHADOW/share/kwok-stages"
  chmod -R u+w "$SHADOW/share/kwok-stages"
  f=$SHADOW/share/kwok-stages/pod/fast/pod-complete.yaml
  # The stage matches pods owned by a Job; make the owner kind one that does not exist.
  sed -i "s/^      - 'Job'\$/      - 'C4RestartBenchNoSuchKind'/" "$f"
  grep -q C4RestartBenchNoSuchKind "$f" || { echo "could not disable KWOK pod-complete in $f" >&2; exit 1; }
  touch "$SHADOW/.complete"
fi

DIR=$(mktemp -d /tmp/c4-restart-bench-XXXXXX)
WORK=$(mktemp -d /tmp/c4-restart-bench-work-XXXXXX)
OP_PID="" JS_PID="" WATCH_PID=""
stop() { [[ -n $1 ]] && kill "$1" 2>/dev/null && wait "$1" 2>/dev/null || true; }
cleanup() {
  stop "$WATCH_PID"; stop "$OP_PID"; stop "$JS_PID"
  "$ROOT/e2e/testenv/testenv.sh" down --dir "$DIR" >&2 || true
  rm -rf "$DIR"
  [[ -n ${KEEP_WORK:-} ]] && echo "work dir: $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
C4_CACHE_DIR=$SHADOW_ROOT "$ROOT/e2e/testenv/testenv.sh" up --dir "$DIR" --nodes "$NODES" \
  --kcm-api-qps "$KCM_QPS" --kcm-api-burst "$KCM_BURST" >&2
# shellcheck disable=SC1091
source "$DIR/env"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# kube-controller-manager's API requests so far (all its controllers).
kcm_requests() {
  # shellcheck disable=SC1091
  source "$DIR/ports.env"
  curl -sk --max-time 5 --cert "$DIR/pki/admin.crt" --key "$DIR/pki/admin.key" \
    "https://127.0.0.1:$KCM_PORT/metrics" 2>/dev/null |
    awk '/^rest_client_requests_total/ {t += $NF} END {print t + 0}'
}

# The watcher: lists the namespace's pods (the old group), then watches pods and the owner
# object from that point and prints "<mark> <epoch seconds>" lines to $3 as they happen.
cat >"$WORK/watch.py" <<'PY'
import json, subprocess, sys, threading, time

ns, want, out_path, owner_path, owner_field = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
out = open(out_path, "a", buffering=1)
marks, lock = {}, threading.Lock()

def mark(name, t=None):
    with lock:
        if name not in marks:
            marks[name] = t if t is not None else time.time()
            out.write(f"{name} {marks[name]:.3f}\n")

def stream(path):
    p = subprocess.Popen(["kubectl", "get", "--raw", path], stdout=subprocess.PIPE)
    for line in iter(p.stdout.readline, b""):
        if line.strip():
            yield time.time(), json.loads(line)
    p.wait()

def owner():  # status.<field> >= 1: the restart has started
    while "restart_started" not in marks:
        for t, ev in stream(owner_path + "&watch=1"):
            if int((ev.get("object", {}).get("status") or {}).get(owner_field, 0) or 0) >= 1:
                mark("restart_started", t)
                return

def ready(pod):
    st = pod.get("status", {})
    return (not pod["metadata"].get("deletionTimestamp") and st.get("phase") == "Running" and
            any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions", [])))

listing = json.loads(subprocess.check_output(["kubectl", "get", "--raw", f"/api/v1/namespaces/{ns}/pods"]))
old = {p["metadata"]["uid"] for p in listing["items"]}
old_left, new_ready = set(old), set()
rv = listing["metadata"]["resourceVersion"]
threading.Thread(target=owner, daemon=True).start()
mark("listed")
while True:
    for t, ev in stream(f"/api/v1/namespaces/{ns}/pods?watch=1&resourceVersion={rv}"):
        if ev["type"] == "ERROR":
            sys.exit(f"watch error: {ev['object']}")
        pod = ev["object"]
        rv = pod["metadata"]["resourceVersion"]
        uid = pod["metadata"]["uid"]
        if uid in old:
            if pod.get("status", {}).get("phase") == "Failed":
                mark("failed", t)
            if ev["type"] == "DELETED":
                old_left.discard(uid)
                if not old_left:
                    mark("old_gone", t)
            continue
        mark("first_new", t)
        if ev["type"] != "DELETED" and ready(pod):
            new_ready.add(uid)
        else:
            new_ready.discard(uid)
        if len(new_ready) >= want:
            mark("all_new_ready", t)
            time.sleep(1)  # let the owner thread record a late status
            sys.exit(0)
PY

# Waits until file $1 has a line starting with $2.
wait_mark() {
  local deadline=$((SECONDS + TIMEOUT))
  until grep -q "^$2 " "$1" 2>/dev/null; do
    ((SECONDS < deadline)) || { echo "timed out waiting for '$2' in $1" >&2; return 1; }
    sleep 0.2
  done
}
mark_of() { awk -v m="$2" '$1 == m {print $2}' "$1"; }

# Number of Running+Ready pods (not being deleted) in namespace $1 matching label selector $2.
count_ready() {
  kubectl get pods -n "$1" -l "$2" -o json | python3 -c '
import json, sys
n = 0
for p in json.load(sys.stdin)["items"]:
    st = p.get("status", {})
    if not p["metadata"].get("deletionTimestamp") and st.get("phase") == "Running" and any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions", [])):
        n += 1
print(n)'
}

# Waits until all $REPLICAS pods of namespace $1 (selector $2) are Running and Ready.
wait_all_ready() {
  local deadline=$((SECONDS + TIMEOUT)) n=0
  while :; do
    n=$(count_ready "$1" "$2" || echo 0)
    ((n >= REPLICAS)) && return 0
    ((SECONDS < deadline)) || { echo "timed out: $n of $REPLICAS pods ready in $1" >&2; return 1; }
    sleep 2
  done
}

# Patches pod $2 of namespace $1 to Failed (exit code 1), as a kubelet reports a crashed trainer.
fail_pod() {
  local ts
  ts=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  kubectl patch pod -n "$1" "$2" --subresource=status --type=merge -p "$(cat <<JSON
{"status": {"phase": "Failed",
  "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": "$ts"},
                 {"type": "ContainersReady", "status": "False", "lastTransitionTime": "$ts"}],
  "containerStatuses": [{"name": "trainer", "image": "trainer:bench", "imageID": "",
    "ready": false, "restartCount": 0, "started": false,
    "state": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": "$ts",
                             "finishedAt": "$ts"}}}]}}
JSON
)" >/dev/null
}

# Runs one restart: watcher on namespace $1 (owner watch path $2, field $3), fails pod $4,
# waits for all new pods; results in $WORK/$1.marks.
measure_restart() {
  local ns=$1 owner_path=$2 field=$3 victim=$4
  python3 "$WORK/watch.py" "$ns" "$REPLICAS" "$WORK/$ns.marks" "$owner_path" "$field" \
    2>"$WORK/$ns.watch.err" &
  WATCH_PID=$!
  wait_mark "$WORK/$ns.marks" listed
  log "$ns: failing pod $victim"
  fail_pod "$ns" "$victim"
  wait_mark "$WORK/$ns.marks" all_new_ready || { cat "$WORK/$ns.watch.err" >&2; return 1; }
  wait "$WATCH_PID" 2>/dev/null || true
  WATCH_PID=""
  wait_mark "$WORK/$ns.marks" failed
}

# Seconds from the failure to mark $2 in marks file $1 ("-" if it never came).
since_failure() {
  local t0 t
  t0=$(mark_of "$1" failed)
  t=$(mark_of "$1" "$2")
  [[ -n $t ]] && printf '%.2f' "$(echo "$t - $t0" | bc -l)" || echo "-"
}

kubectl apply -f "$ROOT/crds/trainingjob.yaml" >/dev/null
kubectl apply --server-side -f "$JOBSET_CRD" >/dev/null
for crd in trainingjobs.c4.dev jobsets.jobset.x-k8s.io; do  # `kubectl wait` fails on no conditions
  for _ in $(seq 300); do
    [[ $(kubectl get crd "$crd" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null) == True ]] && break
    sleep 0.2
  done
done
TJ_NS=c4-bench-restart-tj JS_NS=c4-bench-restart-js
kubectl create ns "$TJ_NS" >/dev/null
kubectl create ns "$JS_NS" >/dev/null
POD_SPEC='{restartPolicy: Never, containers: [{name: trainer, image: trainer:bench}]}'

# ---- c4-operator: a TrainingJob -----------------------------------------------------------------
"$OPERATOR" --kubeconfig "$KUBECONFIG" --leader-elect=false --namespace "$TJ_NS" \
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
# The operator's API requests so far: "total=N VERB=n ...".
op_requests() {
  curl -sf "http://127.0.0.1:$PORT/metrics" | awk -F'[{}" ]+' '
    /^c4_operator_api_requests_total/ {
      for (i = 1; i < NF; i++) if ($i == "verb=") v = $(i + 1)
      n[v] += $NF; total += $NF
    }
    END { printf "total=%d", total; for (v in n) printf " %s=%d", v, n[v]; print "" }'
}
# "total=N VERB=n ..." after minus before, per verb.
op_delta() {
  awk -v a="$2" -v b="$1" 'BEGIN {
    n = split(b, x, " "); for (i = 1; i <= n; i++) { split(x[i], kv, "="); before[kv[1]] = kv[2] }
    n = split(a, x, " ")
    for (i = 1; i <= n; i++) { split(x[i], kv, "="); printf "%s%s=%d", (i > 1 ? " " : ""), kv[1], kv[2] - before[kv[1]] }
    print "" }'
}
kubectl apply -f - >/dev/null <<YAML
apiVersion: c4.dev/v1alpha1
kind: TrainingJob
metadata: {name: tj, namespace: $TJ_NS}
spec:
  replicas: $REPLICAS
  faultTolerance: {maxRestarts: 3, restartBackoffSeconds: 0}
  template: {spec: $POD_SPEC}
YAML
log "TrainingJob: waiting for $REPLICAS pods Running"
start=$(now)
wait_all_ready "$TJ_NS" "c4.dev/job-name=tj,c4.dev/restart-attempt=0"
t_tj_create=$(echo "$(now) - $start" | bc -l)
sleep 5  # the operator's trailing status writes
op_before=$(op_requests) kcm_before=$(kcm_requests)
victim=$(kubectl get pods -n "$TJ_NS" -l c4.dev/replica-index=0 -o jsonpath='{.items[0].metadata.name}')
measure_restart "$TJ_NS" "/apis/c4.dev/v1alpha1/namespaces/$TJ_NS/trainingjobs?fieldSelector=metadata.name%3Dtj" attempt "$victim"
sleep 3
op_after=$(op_requests) kcm_after=$(kcm_requests)
tj_ready=$(count_ready "$TJ_NS" "c4.dev/job-name=tj,c4.dev/restart-attempt=1")
tj_attempt=$(kubectl get trainingjob -n "$TJ_NS" tj -o jsonpath='{.status.attempt}')
stop "$OP_PID"; OP_PID=""
log "TrainingJob done (attempt $tj_attempt, $tj_ready pods of attempt 1 ready); deleting it"
kubectl delete ns "$TJ_NS" --wait=true --timeout=600s >/dev/null

# ---- JobSet ------------------------------------------------------------------------------------
mkdir -p "$WORK/jobset-certs"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 \
  -keyout "$WORK/jobset-certs/tls.key" -out "$WORK/jobset-certs/tls.crt" 2>/dev/null
JS_HEALTH=$(free_port) JS_WEBHOOK=$(free_port)
cat >"$WORK/jobset-config.yaml" <<YAML
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
internalCertManagement: {enable: false}
leaderElection: {leaderElect: false}
metrics: {bindAddress: "0"}
health: {healthProbeBindAddress: "127.0.0.1:$JS_HEALTH"}
webhook: {host: 127.0.0.1, port: $JS_WEBHOOK, certDir: $WORK/jobset-certs}
YAML
"$JOBSET_BIN" --config "$WORK/jobset-config.yaml" --kubeconfig "$KUBECONFIG" \
  --zap-log-level=info >"$WORK/jobset.log" 2>&1 &
JS_PID=$!
for _ in $(seq 300); do
  curl -sf "http://127.0.0.1:$JS_HEALTH/readyz" >/dev/null && break
  kill -0 "$JS_PID" 2>/dev/null || { echo "JobSet exited:" >&2; tail -20 "$WORK/jobset.log" >&2; exit 1; }
  sleep 0.2
done
curl -sf "http://127.0.0.1:$JS_HEALTH/readyz" >/dev/null ||
  { echo "JobSet not ready:" >&2; tail -20 "$WORK/jobset.log" >&2; exit 1; }
# Every field JobSet's defaulting webhook sets is set here (no webhook is registered).
kubectl apply -f - >/dev/null <<YAML
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: js, namespace: $JS_NS}
spec:
  failurePolicy: {maxRestarts: 3, restartStrategy: Recreate}
  successPolicy: {operator: All}
  startupPolicy: {startupPolicyOrder: AnyOrder}
  network: {enableDNSHostnames: true, publishNotReadyAddresses: true}
  replicatedJobs:
  - name: trainer
    replicas: 1
    template:
      spec:
        parallelism: $REPLICAS
        completions: $REPLICAS
        completionMode: Indexed
        backoffLimit: 0
        template: {spec: $POD_SPEC}
YAML
log "JobSet: waiting for $REPLICAS pods Running"
start=$(now)
wait_all_ready "$JS_NS" "jobset.sigs.k8s.io/jobset-name=js,jobset.sigs.k8s.io/restart-attempt=0"
t_js_create=$(echo "$(now) - $start" | bc -l)
sleep 5
kcm_js_before=$(kcm_requests)
victim=$(kubectl get pods -n "$JS_NS" -l batch.kubernetes.io/job-completion-index=0 \
  -o jsonpath='{.items[0].metadata.name}')
measure_restart "$JS_NS" "/apis/jobset.x-k8s.io/v1alpha2/namespaces/$JS_NS/jobsets?fieldSelector=metadata.name%3Djs" restarts "$victim"
sleep 3
kcm_js_after=$(kcm_requests)
js_ready=$(count_ready "$JS_NS" "jobset.sigs.k8s.io/jobset-name=js,jobset.sigs.k8s.io/restart-attempt=1")
js_restarts=$(kubectl get jobset -n "$JS_NS" js -o jsonpath='{.status.restarts}')
stop "$JS_PID"; JS_PID=""

# ---- report ------------------------------------------------------------------------------------
TJM=$WORK/$TJ_NS.marks JSM=$WORK/$JS_NS.marks
printf 'pods=%d on %d KWOK nodes; operator qps/burst=%s/%s; kube-controller-manager %s/%s; JobSet %s (its default client limits 500/500)\n' \
  "$REPLICAS" "$NODES" "$QPS" "$BURST" "$KCM_QPS" "$KCM_BURST" "$JOBSET_VERSION"
printf 'load average (1/5/15 min) at the start: %s, at the end: %s\n' "$LOAD_START" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-44s %14s %14s\n' "seconds after the failure" "c4-operator" "JobSet"
for m in restart_started first_new old_gone all_new_ready; do
  case $m in
    restart_started) label="restart started (attempt/restarts = 1)" ;;
    first_new) label="first pod of the new group" ;;
    old_gone) label="last old pod gone" ;;
    all_new_ready) label="all $REPLICAS new pods Running+Ready" ;;
  esac
  printf '%-44s %14s %14s\n' "$label" "$(since_failure "$TJM" "$m")" "$(since_failure "$JSM" "$m")"
done
t_tj=$(since_failure "$TJM" all_new_ready) t_js=$(since_failure "$JSM" all_new_ready)
printf '%-44s %14.2f %14.2f\n' "first start, all pods Running+Ready" "$t_tj_create" "$t_js_create"
printf 'ratio (JobSet / c4-operator), failure -> all Running+Ready: %.2f\n' "$(echo "$t_js / $t_tj" | bc -l)"
printf 'after: c4 attempt=%s, %s pods of attempt 1 ready; JobSet restarts=%s, %s pods of restart-attempt 1 ready\n' \
  "$tj_attempt" "$tj_ready" "$js_restarts" "$js_ready"
printf 'API requests for the restart (failure .. 3 s after all ready): c4-operator %s; kube-controller-manager %d\n' \
  "$(op_delta "$op_before" "$op_after")" "$((kcm_after - kcm_before))"
printf '                                                  JobSet run: kube-controller-manager %d (JobSet'"'"'s own not counted: its metrics are off)\n' \
  "$((kcm_js_after - kcm_js_before))"
[[ $tj_ready -eq $REPLICAS && $js_ready -eq $REPLICAS ]] || { echo "not every pod of the new groups is ready" >&2; exit 1; }
