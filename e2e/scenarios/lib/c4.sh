# Shared steps of the e2e scenarios and the demo (sourced, not run; the caller sets ROOT).
#
#   c4_scenario_init <build dir> <work dir>      paths, root check (exit 77), a fresh work dir,
#                                                cleanup on exit (C4_E2E_KEEP=1 keeps it all)
#   c4_cluster_up <nodes> [testenv up args...]   private cluster: fabric, pods, one host port
#   c4_apply_train_job <ranks> <steps> <state> the C4D scenarios' TrainingJob "train"
#   c4_install_c4 [operator args...]             CRD, PKI, RBAC, operator on the host (TLS report
#                                                endpoint forwarded into every node netns; off with
#                                                C4_E2E_NO_DETECTION=1), node plugin DaemonSet;
#                                                sets OP_PID, OP_METRICS
#                                                C4_E2E_NODE_PLUGIN_ARGS: more node plugin flags
#   c4_restart_operator                          the host operator again, with the same
#                                                arguments, after it ended (a SIGTERM first when
#                                                it runs); the environment's C4_FAILPOINTS arms
#                                                the new process's failpoints
#                                                C4_E2E_INSTALL=chart: `helm install` of helm/c4
#                                                instead (operator and node plugins as the chart's
#                                                pods; see c4_install_c4_chart)
# A real Prometheus scraping all of it: lib/prometheus.sh (c4_prometheus_up after c4_install_c4;
# c4_cleanup stops it).
# shellcheck shell=bash

TESTENV=$ROOT/e2e/testenv/testenv.sh
NS=${NS:-c4-e2e}
SYS=${SYS:-c4-system}
OP_PID=""
FWD_PID=""

c4_scenario_init() {
  BUILD=$(cd "${1:?usage: $0 <build dir> <work dir>}" && pwd)
  WORK=${2:?usage: $0 <build dir> <work dir>}
  if [[ $(id -u) -ne 0 ]]; then
    echo "SKIP: the netns fabric and pods as processes need root"
    exit 77
  fi
  # The pod runner's image table maps c4/* images to this build's binaries.
  export C4_BUILD_DIR=$BUILD
  OPERATOR=$BUILD/operator/c4-operator
  NODE_PLUGIN=$BUILD/node-plugin/c4-node-plugin
  NETBENCH=$BUILD/nccl-net-plugin/netbench/c4-netbench
  PLUGIN_SO=$BUILD/nccl-net-plugin/libnccl-net-c4.so
  PROFILER_SO=$BUILD/nccl-profiler-plugin/libnccl-profiler-c4.so
  local f
  for f in "$OPERATOR" "$NODE_PLUGIN" "$NETBENCH" "$PLUGIN_SO" "$PROFILER_SO"; do
    [[ -e $f ]] || { echo "FAIL: $f not built" >&2; exit 1; }
  done
  rm -rf "$WORK" && mkdir -p "$WORK"
  WORK=$(cd "$WORK" && pwd)
  CLUSTER=$WORK/cluster
  trap c4_cleanup EXIT
}

# The container `command:` line (8 spaces of YAML indent) of an MPI-operator-style worker: its
# main process runs the rank (the image's program, c4-netbench) and, should the rank exit with an
# error, stays up the way an sshd worker pod does after mpirun's rank on it died. Killing the rank
# (`testenv.sh pod-signal ... KILL --process c4-netbench`) then fails no pod: only C4D can tell.
c4_mpi_worker_command() {
  # shellcheck disable=SC2016
  printf '        command: [sh, -c, %s, %s]' \
    "'\"\$0\" \"\$@\" && exit 0; echo \"rank exited with \$?; the worker stays up\"; exec sleep 100000'" \
    "$NETBENCH"
}

# The C4D scenarios' TrainingJob "train": c4-netbench ranks in training mode (60 ms of compute a
# step, a checkpoint every 20 steps into $WORK/ckpt), 2 restarts, 1 s backoff, 4 GPUs a pod.
#   c4_apply_train_job <ranks> <steps> <state bytes> [more args] [command line]
# more args: appended to the args list (", --flag, value ..."); command line: a `command:` line
# for the container (c4_mpi_worker_command).
# C4_E2E_TELEMETRY picks the job's telemetry source: NetPlugin (default: c4-netbench moves its
# bytes and reports them through C4's net plugin) or Profiler (it moves them over plain TCP, the
# stand-in for NCCL's native transports, and tells C4's profiler plugin of them as NCCL does; with
# C4_E2E_ACKED=1 a send completes once the peer acknowledged it, as an RDMA write over NCCL's IB
# transport does, so its time follows the wire).
c4_apply_train_job() {
  local ranks=$1 steps=$2 state=$3 more=${4:-} command=${5:-}
  local telemetry=${C4_E2E_TELEMETRY:-NetPlugin} transport=""
  case $telemetry in
    NetPlugin) ;;
    Profiler) transport="--baseline, ${C4_E2E_ACKED:+--baseline-acked, }" ;;
    *) echo "C4_E2E_TELEMETRY must be NetPlugin or Profiler, not '$telemetry'" >&2; exit 2 ;;
  esac
  kubectl apply -n "$NS" -f - >/dev/null <<YAML
apiVersion: c4.dev/v1alpha1
kind: TrainingJob
metadata: {name: train}
spec:
  replicas: $ranks
  telemetry: {source: $telemetry}
  checkpoint: {dir: $WORK/ckpt}
  faultTolerance: {maxRestarts: 2, restartBackoffSeconds: 1}
  template:
    metadata:
      annotations: {c4.dev/runner: process}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: trainer
        image: c4/netbench
        resources:
          limits: {nvidia.com/gpu: "4"}
        args: [$transport--steps, "$steps", --step-compute-ms, "60", --state-bytes, "$state", --json,
               --checkpoint-dir, \$(C4_CHECKPOINT_DIR), --checkpoint-every, "20"$more]
$command
YAML
}

# The value of variable $1 in the trainer container of the job's pod train-0 ("" when unset).
c4_train_env() {
  kubectl get pod -n "$NS" train-0 -o jsonpath="{.spec.containers[0].env[?(@.name==\"$1\")].value}"
}

# The profiler path: the operator loads C4's profiler plugin into the job's pods and leaves NCCL's
# transport alone (no net plugin), so the reports C4D reads come from the profiler plugin.
c4_expect_profiler_only() {
  [[ -n $(c4_train_env NCCL_PROFILER_PLUGIN) && -z $(c4_train_env NCCL_NET_PLUGIN) ]] \
    || fail "the pods do not load the profiler plugin alone"
}

c4_cleanup() {
  if [[ -n ${C4_E2E_KEEP:-} ]]; then
    echo "kept: $CLUSTER (operator pid $OP_PID; source $CLUSTER/env)"
    [[ -z ${PROM_URL:-} ]] || echo "kept: Prometheus $PROM_URL (pid $PROM_PID)"
    return
  fi
  if declare -F c4_prometheus_down >/dev/null; then c4_prometheus_down; fi
  [[ -n $OP_PID ]] && kill "$OP_PID" 2>/dev/null && wait "$OP_PID" 2>/dev/null || true
  [[ -n $FWD_PID ]] && kill "$FWD_PID" 2>/dev/null && wait "$FWD_PID" 2>/dev/null || true
  "$TESTENV" down --dir "$CLUSTER" >/dev/null 2>&1 || true
}

fail() {
  echo "FAIL: $*" >&2
  echo "--- operator log (tail)" >&2
  tail -n 40 "$WORK/operator.log" >&2 || true
  local f
  for f in "$CLUSTER"/pods/"$SYS"/*/node-plugin.log; do
    [[ -f $f ]] && { echo "--- $f (tail)" >&2; tail -n 15 "$f" >&2; }
  done
  # The job's containers that exited with an error, earlier attempts included.
  for f in "$CLUSTER"/pods/"${NS:-c4-e2e}"/*/*.log; do
    [[ -f $f ]] && grep -qiE 'error|fail|cannot|traceback' "$f" &&
      { echo "--- $f (tail)" >&2; tail -n 8 "$f" >&2; }
  done
  # Again after the logs: a reader of a long, clipped output sees the cause at either end.
  echo "FAIL: $*" >&2
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

c4_cluster_up() {
  local nodes=$1
  shift
  "$TESTENV" up --dir "$CLUSTER" --nodes "$nodes" --leaves 2 --spines 2 --fabric --pods \
    --host-ports 1 "$@"
  # shellcheck disable=SC1091
  source "$CLUSTER/env"
  REPORT_PORT=$C4_TESTENV_HOST_PORTS
  C4_NODES=$nodes
}

c4_install_c4() {
  case ${C4_E2E_INSTALL:-host} in
    host) c4_install_c4_host "$@" ;;
    chart) c4_install_c4_chart "$@" ;;
    *) fail "C4_E2E_INSTALL=$C4_E2E_INSTALL: want host or chart" ;;
  esac
}

# C4 from the chart: `helm install c4 helm/c4 -n $SYS`, the operator (1 replica, leader election
# on, watching $NS, extra args = the arguments) and the node plugins run as the chart's pods by
# the pod runner (e2e/README.md, "The chart in the test cluster"). OP_METRICS is a host loopback
# port forwarded to the operator pod's metrics port inside its node's netns; $WORK/operator.log
# links to the operator container's log. OP_PID stays empty (the pod runner owns the process).
c4_install_c4_chart() {
  local values=$WORK/c4-values.yaml
  kubectl create namespace "$NS" >/dev/null
  python3 - "$values" "$NS" "${C4_E2E_NO_DETECTION:-}" "$@" <<'PY' || fail "chart values"
import sys, yaml
path, ns, no_detection, *args = sys.argv[1:]
args.insert(0, "--debug-reports")  # the scenarios read the leader's report store
if no_detection:  # the report endpoint (and with it C4D) off; the last flag wins
    args.append("--report-bind-address=0")
yaml.safe_dump({
    "image": {"registry": ""},
    "operator": {"replicas": 1, "watchNamespace": ns, "extraArgs": args,
                 "podAnnotations": {"c4.dev/runner": "process"}},
    # app=c4-node-plugin: the label the scenarios select node plugin pods by (as in host mode)
    "nodePlugin": {"podAnnotations": {"c4.dev/runner": "process"},
                   "podLabels": {"app": "c4-node-plugin"},
                   # the emulated node's NIC is a veth (no device): named
                   "interfaces": "eth0"},
}, open(path, "w"), default_flow_style=False)
PY
  helm install c4 "$ROOT/helm/c4" -n "$SYS" --create-namespace -f "$values" \
    2> >(grep -v 'found symbolic link' >&2) >/dev/null || fail "helm install of helm/c4"
  local op_running np_running
  op_running() {
    kubectl get pods -n "$SYS" -l app.kubernetes.io/component=operator,c4.dev/leader=true \
      -o jsonpath='{.items[*].status.phase}' | grep -qx Running
  }
  wait_until 120 "the operator pod Running and leading" op_running
  np_running() {
    [[ $(kubectl get pods -n "$SYS" -l app.kubernetes.io/component=node-plugin \
          -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c '^Running$') == "$C4_NODES" ]]
  }
  wait_until 120 "$C4_NODES node plugin pods Running" np_running
  c4_expect_node_plugin_unprivileged
  local pod node ip
  pod=$(kubectl get pods -n "$SYS" -l app.kubernetes.io/component=operator,c4.dev/leader=true \
    -o jsonpath='{.items[0].metadata.name}')
  node=$(kubectl get pod -n "$SYS" "$pod" -o jsonpath='{.spec.nodeName}')
  ip=$(kubectl get pod -n "$SYS" "$pod" -o jsonpath='{.status.podIP}')
  ln -sf "$CLUSTER/pods/$SYS/$pod/operator.log" "$WORK/operator.log"
  rm -f "$WORK/op-metrics.port"
  python3 "$ROOT/e2e/scenarios/lib/netns_forward.py" \
    "$("$ROOT/e2e/testenv/fabric.sh" ns --dir "$CLUSTER" "$node")" "$ip:8080" \
    "$WORK/op-metrics.port" >"$WORK/netns-forward.log" 2>&1 &
  FWD_PID=$!
  wait_until 10 "the metrics forwarder" test -s "$WORK/op-metrics.port"
  OP_METRICS=$(cat "$WORK/op-metrics.port")
  export OP_METRICS NS
  wait_until 30 "operator /readyz through the forwarder" \
    curl -sf "http://127.0.0.1:$OP_METRICS/readyz"
  c4_expect_plugins_installed
  echo "helm install: operator pod $pod on $node (metrics 127.0.0.1:$OP_METRICS), $C4_NODES node" \
    "plugin pods, the NCCL net and profiler plugins installed on every node"
}

# Every node's plugin directory holds both NCCL plugins, byte for byte the build's. The node plugin
# installs them one after the other (each by an atomic rename), so this waits for both files before
# comparing: a node whose net plugin is there may not have its profiler plugin yet.
c4_expect_plugins_installed() {
  local i dir
  for ((i = 0; i < C4_NODES; i++)); do
    dir="$CLUSTER/nodes/node-$i/root/opt/c4/lib"
    wait_until 30 "both NCCL plugins installed on node-$i" \
      test -s "$dir/libnccl-net-c4.so" -a -s "$dir/libnccl-profiler-c4.so"
    cmp -s "$PLUGIN_SO" "$dir/libnccl-net-c4.so" \
      || fail "node-$i: installed plugin differs from the build"
    cmp -s "$PROFILER_SO" "$dir/libnccl-profiler-c4.so" \
      || fail "node-$i: installed profiler plugin differs from the build"
  done
}

# Every node plugin process runs as the pod runner applies its securityContext (as a container
# runtime does): not root, no capability in any set (bounding included: no SYS_PTRACE, no
# DAC_READ_SEARCH), no_new_privs. Read from /proc/<pid>/status of each node plugin pod's process.
c4_expect_node_plugin_unprivileged() {
  local f pid st n=0
  for f in "$CLUSTER"/pods/"$SYS"/*/node-plugin.pid; do
    [[ -f $f ]] || continue
    pid=$(cat "$f")
    st=$(cat "/proc/$pid/status" 2>/dev/null) || continue  # a pod replaced since
    [[ $(awk '/^Name:/ {print $2}' <<<"$st") == c4-node-plugi* ]] ||
      fail "pid $pid of $f is not the node plugin: $(head -1 <<<"$st")"
    awk '/^Uid:/ {exit !($2 != 0 && $3 != 0 && $4 != 0 && $5 != 0)}' <<<"$st" ||
      fail "node plugin pid $pid runs as root: $(grep ^Uid: <<<"$st")"
    for cap in CapInh CapPrm CapEff CapBnd CapAmb; do
      grep -qx "$cap:[[:space:]]*0000000000000000" <<<"$st" ||
        fail "node plugin pid $pid holds capabilities: $(grep "^$cap:" <<<"$st")"
    done
    grep -qx "NoNewPrivs:[[:space:]]*1" <<<"$st" || fail "node plugin pid $pid: no_new_privs unset"
    n=$((n + 1))
  done
  ((n == C4_NODES)) || fail "found $n node plugin processes, want $C4_NODES"
}

# Starts "${OP_ARGV[@]}" on the host, its output appended to $WORK/operator.log; sets OP_PID and
# OP_METRICS (this process's metrics port) and checks /healthz.
c4_start_operator() {
  local lines
  lines=$(wc -l <"$WORK/operator.log")
  "${OP_ARGV[@]}" >>"$WORK/operator.log" 2>&1 &
  OP_PID=$!
  started() { tail -n +"$((lines + 1))" "$WORK/operator.log" | grep -qE 'metricsPort=[1-9]'; }
  wait_until 30 "operator metrics port" started
  OP_METRICS=$(tail -n +"$((lines + 1))" "$WORK/operator.log" | grep -m1 -oE 'metricsPort=[0-9]+' |
    cut -d= -f2)
  export OP_METRICS NS  # read by the checks, which run in `bash -c`
  curl -sf "http://127.0.0.1:$OP_METRICS/healthz" >/dev/null || fail "operator /healthz"
}

c4_restart_operator() {
  if kill -0 "$OP_PID" 2>/dev/null; then
    kill -TERM "$OP_PID"
  fi
  wait "$OP_PID" 2>/dev/null || true
  echo "--- operator restarted at $(date +%T.%N) (C4_FAILPOINTS='${C4_FAILPOINTS:-}')" \
    >>"$WORK/operator.log"
  c4_start_operator
}

c4_install_c4_host() {
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
# C4_E2E_NO_DETECTION=1: the report endpoint (and with it C4D) off — the control runs that show
# a scenario fails without C4D.
report_args=(--report-bind-address "127.0.0.1:$REPORT_PORT" --tls-cert-file "$WORK/tls.crt"
             --tls-key-file "$WORK/tls.key" --report-audience c4-operator
             --report-serviceaccount "$SYS/c4-node-plugin")
[[ -z ${C4_E2E_NO_DETECTION:-} ]] || report_args=(--report-bind-address 0)
OP_ARGV=("$OPERATOR" --kubeconfig "$KUBECONFIG" --namespace "$NS" --leader-elect=false
         --metrics-address 127.0.0.1 --metrics-port 0 --debug-reports "$@" "${report_args[@]}")
: >"$WORK/operator.log"
c4_start_operator
# The node plugins' extra flags (a scenario's knob), one YAML list item each.
node_plugin_args=""
for arg in ${C4_E2E_NODE_PLUGIN_ARGS:-}; do
  node_plugin_args+=$'\n'"        - $arg"
done

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
      # As the chart runs it (helm/c4/templates/node-plugin.yaml): not root, no capability.
      securityContext: {fsGroup: 65532}
      initContainers:
      - name: own-host-dirs
        image: c4/node-plugin
        command: [chown, "65532:65532", /var/run/c4, /opt/c4/lib]
        securityContext:
          runAsUser: 0
          allowPrivilegeEscalation: false
          capabilities: {drop: [ALL], add: [CHOWN]}
        volumeMounts:
        - {name: agent, mountPath: /var/run/c4}
        - {name: plugin, mountPath: /opt/c4/lib}
      containers:
      - name: node-plugin
        image: c4/node-plugin
        command: [$NODE_PLUGIN]
        securityContext:
          runAsUser: 65532
          runAsGroup: 65532
          runAsNonRoot: true
          allowPrivilegeEscalation: false
          capabilities: {drop: [ALL]}
        args:
        - --node-name=\$(NODE_NAME)
        - --socket=/var/run/c4/agent.sock
        - --operator-url=https://127.0.0.1:$REPORT_PORT/v1/reports
        - --ca-file=/etc/c4/ca/ca.crt
        - --token-file=/var/run/secrets/c4/token
        - --plugin-source=$PLUGIN_SO
        - --profiler-plugin-source=$PROFILER_SO
        - --plugin-install-dir=/opt/c4/lib
        - --metrics-bind-address=127.0.0.1:9400
        # The emulated node's NIC is a veth (no device): named, as on a node with virtual NICs.
        - --interfaces=eth0$node_plugin_args
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
        -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c '^Running$') == "$C4_NODES" ]]
}
wait_until 90 "$C4_NODES node plugin pods Running" all_running
c4_expect_plugins_installed
c4_expect_node_plugin_unprivileged
echo "node plugins: $C4_NODES Running (uid 65532, no capability), the NCCL net and profiler plugins installed on every node"
}
