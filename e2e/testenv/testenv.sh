#!/usr/bin/env bash
# C4 test cluster: a real Kubernetes control plane (etcd, kube-apiserver, controller-manager,
# scheduler) plus KWOK nodes, all as local processes bound to 127.0.0.1; optionally an emulated
# leaf-spine fabric of network namespaces and a runner that plays the kubelet for annotated pods.
#
#   testenv.sh build                              build or find the cached binaries; last line = bin dir
#   testenv.sh up --dir DIR [--nodes N] [--leaves L] [--spines S] [--fabric] [--pods]
#                 [--link-rate RATE] [--path-mode sport|hash] [--tcp-cc reno|bbr] [--mtu BYTES]
#                 [--host-ports N]
#                 [--kcm-api-qps Q --kcm-api-burst B]  (controller-manager client limits;
#                                                       default its own, 20/30)
#   testenv.sh down --dir DIR                     stop exactly what `up` started; remove its netns
#   testenv.sh restart-apiserver --dir DIR        stop and restart kube-apiserver (same flags, port)
#   testenv.sh status --dir DIR                   print the state of every tracked process
#   testenv.sh logs --dir DIR NS/POD [CONTAINER]  print a runner pod's log
#   testenv.sh pod-signal --dir DIR NS/POD [CONTAINER] STOP|CONT|KILL|TERM [--process NAME]
#                                                 signal a runner pod's process (group); with
#                                                 --process only the container's descendant
#                                                 processes named NAME (a rank under a launcher)
#
# --fabric (root only) builds the netns fabric (see fabric.sh); --pods starts the pod runner
# (podrunner/, pods annotated c4.dev/runner=process run as local processes). --host-ports N
# reserves N free loopback ports for services a test runs on the host (C4_TESTENV_HOST_PORTS in
# DIR/env); with the fabric and the runner, each is forwarded into every node's netns as
# 127.0.0.1:<port>, like the API server's. See e2e/README.md.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$HERE/versions.env"

die() { echo "testenv: $*" >&2; exit 1; }
log() { echo "testenv [$(date +%H:%M:%S)]: $*" >&2; }

CMD=${1:-}
[[ -n $CMD ]] || { sed -n '2,23p' "$0"; exit 2; }
shift
POS=()
DIR="" NODES=4 LEAVES=2 SPINES=2 FABRIC=0 PODS=0 LINK_RATE=1gbit PATH_MODE=sport HOST_PORTS=0
TCP_CC=reno MTU=1500
KCM_QPS="" KCM_BURST="" PROCESS=""
while (($#)); do
  case "$1" in
    --dir) DIR=${2:?--dir needs a value}; shift 2 ;;
    --nodes) NODES=${2:?}; shift 2 ;;
    --leaves) LEAVES=${2:?}; shift 2 ;;
    --spines) SPINES=${2:?}; shift 2 ;;
    --fabric) FABRIC=1; shift ;;
    --pods) PODS=1; shift ;;
    --link-rate) LINK_RATE=${2:?}; shift 2 ;;
    --path-mode) PATH_MODE=${2:?}; shift 2 ;;
    --tcp-cc) TCP_CC=${2:?}; shift 2 ;;
    --mtu) MTU=${2:?}; shift 2 ;;
    --host-ports) HOST_PORTS=${2:?}; shift 2 ;;
    --kcm-api-qps) KCM_QPS=${2:?}; shift 2 ;;
    --kcm-api-burst) KCM_BURST=${2:?}; shift 2 ;;
    --process) PROCESS=${2:?--process needs a name}; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    -*) die "unknown argument '$1' (see --help)" ;;
    *) POS+=("$1"); shift ;;
  esac
done
[[ $NODES =~ ^[1-9][0-9]*$ && $NODES -le 250 ]] || die "--nodes must be 1..250"
[[ $LEAVES =~ ^[1-9][0-9]*$ && $LEAVES -le 64 ]] || die "--leaves must be 1..64"
[[ $SPINES =~ ^[1-9][0-9]*$ && $SPINES -le 16 ]] || die "--spines must be 1..16"
[[ $HOST_PORTS =~ ^[0-9]$ ]] || die "--host-ports must be 0..9"

need_dir() {
  [[ -n $DIR ]] || die "$CMD needs --dir DIR"
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd)
}

# ---- process tracking ------------------------------------------------------------------------
# Every process runs in its own session (setsid), so its pid is also its process group id; the
# pid file is the only handle `down` uses. A pid is only signalled if /proc/<pid>/cmdline still
# mentions DIR (every command line we start does), so a recycled pid is never hit.
owned() {  # owned <pid>
  local pid=$1
  local c i state
  for ((i = 0; i < 25; i++)); do
    # Read into a variable: `tr | grep -q` under pipefail fails at random when grep exits early.
    c=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
    [[ -n $c ]] && break
    # An empty cmdline is a zombie (dead) or a process in the middle of execve (alive: its new
    # cmdline appears a moment later). Reading it then used to report a live process as dead.
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
    [[ $state == Z || $state == X ]] && return 1
    sleep 0.02
  done
  [[ $c == *"$DIR"* ]]
}

start_proc() {  # start_proc <name> <argv...>
  local name=$1; shift
  printf '%q ' "$@" >"$DIR/pids/$name.cmd"
  setsid "$@" >>"$DIR/logs/$name.log" 2>&1 </dev/null 8>&- &
  echo $! >"$DIR/pids/$name.pid"
}

stop_proc() {  # stop_proc <name> [grace seconds]
  local name=$1 grace=${2:-10} f="$DIR/pids/$1.pid" pid i
  [[ -f $f ]] || return 0
  pid=$(<"$f")
  if [[ $pid =~ ^[0-9]+$ ]] && owned "$pid"; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < grace * 10; i++)); do
      owned "$pid" || break
      sleep 0.1
    done
    if owned "$pid"; then
      log "$name (pid $pid) still running ${grace}s after SIGTERM; sending SIGKILL"
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do owned "$pid" || break; sleep 0.1; done
    fi
  fi
  rm -f "$f"
}

alive() {  # alive <name>
  local f="$DIR/pids/$1.pid"
  [[ -f $f ]] && owned "$(<"$f")"
}

# ---- helpers ------------------------------------------------------------------------------------
free_ports() {  # free_ports <n>: n distinct free loopback ports (held open together while picked)
  python3 -c '
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))' "$1"
}

api_get() {  # api_get <path>  (admin client cert)
  curl -sf --max-time 5 --cacert "$DIR/pki/ca.crt" --cert "$DIR/pki/admin.crt" \
    --key "$DIR/pki/admin.key" "https://127.0.0.1:$API_PORT$1"
}

wait_for() {  # wait_for <seconds> <what> <command...>
  local secs=$1 what=$2 i; shift 2
  for ((i = 0; i < secs * 5; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  return 1
}

load_ports() { [[ -f $DIR/ports.env ]] && source "$DIR/ports.env"; }

# ---- PKI ------------------------------------------------------------------------------------
make_pki() {
  local p=$DIR/pki
  rm -rf "$p"; mkdir -p "$p"
  (
    cd "$p"
    exec 2>>"$DIR/logs/pki.log"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
      -subj /CN=c4-testenv-ca -keyout ca.key -out ca.crt >/dev/null
    issue() {  # issue <name> <subject> [extfile-content]
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "$2" \
        -keyout "$1.key" -out "$1.csr" >/dev/null
      printf '%s\n' "$3" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
        -extfile "$1.ext" -out "$1.crt" >/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    issue apiserver /CN=kube-apiserver \
      "subjectAltName=DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1
extendedKeyUsage=serverAuth"
    issue admin "/O=system:masters/CN=c4-admin" "extendedKeyUsage=clientAuth"
    issue kcm /CN=system:kube-controller-manager "extendedKeyUsage=clientAuth"
    issue scheduler /CN=system:kube-scheduler "extendedKeyUsage=clientAuth"
    issue kwok "/O=system:masters/CN=c4-kwok" "extendedKeyUsage=clientAuth"
    issue podrunner "/O=system:masters/CN=c4-podrunner" "extendedKeyUsage=clientAuth"
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    chmod 600 ./*.key
  )
}

write_kubeconfig() {  # write_kubeconfig <file> <cert name>
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: c4-testenv
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $DIR/pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $DIR/pki/$2.crt
    client-key: $DIR/pki/$2.key
contexts:
- name: c4-testenv
  context: {cluster: c4-testenv, user: $2}
current-context: c4-testenv
EOF
}

# ---- components ---------------------------------------------------------------------------------
start_etcd() {
  start_proc etcd "$BIN/etcd" --name=c4-testenv --data-dir="$DIR/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="c4-testenv=http://127.0.0.1:$ETCD_PEER_PORT" \
    --listen-metrics-urls="http://127.0.0.1:$ETCD_METRICS_PORT" \
    --unsafe-no-fsync=true --quota-backend-bytes=2147483648 --auto-compaction-retention=1 \
    --log-level=warn
  wait_for 60 etcd curl -sf --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" \
    || fail "etcd did not become healthy (see $DIR/logs/etcd.log)"
}

start_apiserver() {
  start_proc kube-apiserver "$BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --secure-port="$API_PORT" \
    --advertise-address=127.0.0.1 --endpoint-reconciler-type=none \
    --tls-cert-file="$DIR/pki/apiserver.crt" --tls-private-key-file="$DIR/pki/apiserver.key" \
    --client-ca-file="$DIR/pki/ca.crt" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$DIR/pki/sa.pub" \
    --service-account-signing-key-file="$DIR/pki/sa.key" \
    --api-audiences=https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range=10.96.0.0/16 \
    --authorization-mode=Node,RBAC --allow-privileged=true \
    --cert-dir="$DIR/pki" --profiling=false --watch-cache-sizes=podtemplates#0
  wait_apiserver --soft && return 0
  log "kube-apiserver exited while starting (see $DIR/logs/kube-apiserver.log); starting it again"
  start_apiserver_from_cmd
}

wait_apiserver() {  # [--soft]: return 1 instead of failing when the process exits
  local i soft=0
  [[ ${1:-} == --soft ]] && soft=1
  for ((i = 0; i < 600; i++)); do
    if ! alive kube-apiserver; then
      ((soft)) && return 1
      fail "kube-apiserver exited (see $DIR/logs/kube-apiserver.log)"
    fi
    if [[ $(api_get /readyz 2>/dev/null) == ok ]] && api_get /api/v1/namespaces/default >/dev/null
    then return 0; fi
    sleep 0.2
  done
  fail "kube-apiserver not ready after 120s (see $DIR/logs/kube-apiserver.log)"
}

# Starts kube-apiserver again from its recorded command line until it is ready. On a loaded
# machine a post-start hook can time out waiting for its caches and exit the process (seen:
# "APF bootstrap ensurer timed out"); a supervisor would restart it, and so do we, 3 times.
start_apiserver_from_cmd() {
  local argv attempt old i
  eval "argv=($(<"$DIR/pids/kube-apiserver.cmd"))"
  for attempt in 1 2 3; do
    # Never leave the previous attempt behind (a live one would hold the port and make this one
    # fail); only a pid whose command line still names DIR is ours to kill.
    old=$(cat "$DIR/pids/kube-apiserver.pid" 2>/dev/null || true)
    if [[ $old =~ ^[0-9]+$ ]] && owned "$old"; then
      kill -KILL -- "-$old" 2>/dev/null || kill -KILL "$old" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do owned "$old" || break; sleep 0.1; done
    fi
    start_proc kube-apiserver "${argv[@]}"
    wait_apiserver --soft && return 0
    log "kube-apiserver exited while starting (attempt $attempt, see $DIR/logs/kube-apiserver.log)"
  done
  fail "kube-apiserver exited 3 times while starting (see $DIR/logs/kube-apiserver.log)"
}

start_kcm() {
  local limits=()
  [[ -n $KCM_QPS ]] && limits+=("--kube-api-qps=$KCM_QPS")
  [[ -n $KCM_BURST ]] && limits+=("--kube-api-burst=$KCM_BURST")
  start_proc kube-controller-manager "$BIN/kube-controller-manager" "${limits[@]}" \
    --kubeconfig="$DIR/kcm.kubeconfig" \
    --authentication-kubeconfig="$DIR/kcm.kubeconfig" \
    --authorization-kubeconfig="$DIR/kcm.kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$DIR/pki/sa.key" --root-ca-file="$DIR/pki/ca.crt" \
    --service-cluster-ip-range=10.96.0.0/16 --node-monitor-grace-period=20s \
    --profiling=false
}

start_scheduler() {
  start_proc kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig="$DIR/scheduler.kubeconfig" \
    --authentication-kubeconfig="$DIR/scheduler.kubeconfig" \
    --authorization-kubeconfig="$DIR/scheduler.kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" \
    --profiling=false
}

# KWOK v0.8.0 ships no default stages: build DIR/kwok.yaml from the upstream stage files saved by
# build.sh. Node stages apply to every managed node; the pod stages skip pods that carry the
# annotation c4.dev/runner=process, which the pod runner plays instead. KWOK's pod-delete stage is
# left out: it deletes by name, so a stale queued delete can remove a newer pod of the same name;
# the pod finalizer (podrunner/podfinalizer.py) ends deletions with a UID precondition instead.
write_kwok_config() {
  local s=$BIN/../share/kwok-stages f
  [[ -d $s ]] || die "KWOK stage files missing in $s; run 'testenv.sh build'"
  {
    cat <<EOF
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  cidr: 10.244.0.0/16
  nodeIP: 198.18.255.254
  podPlayStageParallelism: 4
  nodePlayStageParallelism: 4
  nodeLeaseParallelism: 4
  podsOnNodeSyncParallelism: 1
EOF
    for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
             node/chaos/node-not-ready.yaml; do
      echo ---; cat "$s/$f"
    done
    for f in pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml; do
      echo ---
      # Insert the "not a runner pod" condition as the first match expression.
      awk '{print} /^    matchExpressions:$/ && !done {
             print "    - key: '"'"'.metadata.annotations[\"c4.dev/runner\"]'"'"'"
             print "      operator: '"'"'DoesNotExist'"'"'"; done=1 }' "$s/$f"
    done
  } >"$DIR/kwok.yaml"
  grep -c 'c4.dev/runner' "$DIR/kwok.yaml" | grep -qx 2 || die "could not patch KWOK pod stages"
}

start_kwok() {
  write_kwok_config
  start_proc kwok "$BIN/kwok" --kubeconfig="$DIR/kwok.kubeconfig" --config="$DIR/kwok.yaml" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --node-lease-duration-seconds=40 --server-address=127.0.0.1:"$KWOK_PORT"
}

start_podfinalizer() {
  "$HERE/podrunner/ensure-venv.sh" >&2 || fail "pod runner venv setup failed"
  start_proc podfinalizer "$("$HERE/podrunner/ensure-venv.sh" --print-python)" \
    "$HERE/podrunner/podfinalizer.py" --dir "$DIR"
  wait_for 30 podfinalizer test -f "$DIR/podfinalizer.ready" \
    || fail "pod finalizer did not start (see $DIR/logs/podfinalizer.log)"
}

# Node i sits on leaf (i % L); its InternalIP is its fabric address (fabric.sh uses the same plan).
node_ip() { echo "198.18.$(($1 % LEAVES)).$((10 + $1 / LEAVES))"; }

create_nodes() {
  local i f=$DIR/nodes.yaml
  : >"$f"
  for ((i = 0; i < NODES; i++)); do
    cat >>"$f" <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: node-$i
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
  labels:
    kubernetes.io/hostname: node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
    c4.dev/leaf: leaf-$((i % LEAVES))
    c4.dev/host-ip: "$(node_ip "$i")"
spec:
  providerID: kwok://node-$i
status:
  addresses:
  - {type: InternalIP, address: "$(node_ip "$i")"}
  - {type: Hostname, address: node-$i}
  capacity: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "8"}
  allocatable: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "8"}
EOF
  done
  "$BIN/kubectl" --kubeconfig="$DIR/kubeconfig" create -f "$f" >/dev/null \
    || fail "could not create the nodes"
  local ready j
  for ((j = 0; j < 300; j++)); do
    alive kwok || fail "kwok exited (see $DIR/logs/kwok.log)"
    ready=$("$BIN/kubectl" --kubeconfig="$DIR/kubeconfig" get nodes --no-headers 2>/dev/null \
      | awk '$2 == "Ready"' | wc -l)
    ((ready == NODES)) && return 0
    sleep 0.2
  done
  fail "KWOK nodes did not become Ready in 60s (see $DIR/logs/kwok.log)"
}

wait_component() {  # wait_component <name> <secure port>: its /healthz answers ok
  local i
  for ((i = 0; i < 300; i++)); do
    alive "$1" || fail "$1 exited (see $DIR/logs/$1.log)"
    [[ $(curl -sk --max-time 2 "https://127.0.0.1:$2/healthz" 2>/dev/null) == ok ]] && return 0
    sleep 0.2
  done
  fail "$1 not healthy after 60s (see $DIR/logs/$1.log)"
}

# ---- commands -------------------------------------------------------------------------------
FAILING=0
fail() {
  echo "testenv: up failed: $*" >&2
  if ((FAILING == 0)); then FAILING=1; do_down; fi
  exit 1
}

healthy() {
  load_ports || return 1
  [[ -f $DIR/kubeconfig ]] || return 1
  local c
  for c in etcd kube-apiserver kube-controller-manager kube-scheduler kwok podfinalizer; do
    alive "$c" || return 1
  done
  if [[ -f $DIR/pids/podrunner.cmd ]] || ((PODS)); then alive podrunner || return 1; fi
  if ((FABRIC)); then [[ -f $DIR/fabric/plan.env ]] || return 1; fi
  [[ $(api_get /readyz 2>/dev/null) == ok ]]
}

do_up() {
  local t0=$SECONDS
  if healthy; then
    log "cluster in $DIR is already up"
    return 0
  fi
  do_down quiet
  BIN=$("$HERE/build.sh" | tail -n 1)
  [[ -x $BIN/kube-apiserver ]] || die "build did not produce binaries in '$BIN'"
  rm -rf "$DIR/etcd" "$DIR/pids" "$DIR/logs" "$DIR/env" "$DIR/kubeconfig"
  mkdir -p "$DIR/pids" "$DIR/logs"
  local ports
  read -r -a ports <<<"$(free_ports $((7 + HOST_PORTS)))"
  {
    echo "ETCD_PORT=${ports[0]}"; echo "ETCD_PEER_PORT=${ports[1]}"
    echo "ETCD_METRICS_PORT=${ports[2]}"; echo "API_PORT=${ports[3]}"
    echo "KCM_PORT=${ports[4]}"; echo "SCHED_PORT=${ports[5]}"; echo "KWOK_PORT=${ports[6]}"
    echo "NODES=$NODES"; echo "LEAVES=$LEAVES"; echo "SPINES=$SPINES"; echo "BIN=$BIN"
    echo "HOST_PORT_LIST=\"${ports[*]:7}\""
  } >"$DIR/ports.env"
  load_ports
  make_pki
  write_kubeconfig "$DIR/kubeconfig" admin
  write_kubeconfig "$DIR/kcm.kubeconfig" kcm
  write_kubeconfig "$DIR/scheduler.kubeconfig" scheduler
  write_kubeconfig "$DIR/kwok.kubeconfig" kwok
  write_kubeconfig "$DIR/podrunner.kubeconfig" podrunner

  log "starting etcd, kube-apiserver ($K8S_VERSION) on 127.0.0.1:$API_PORT"
  start_etcd
  start_apiserver
  log "apiserver ready after $((SECONDS - t0))s; starting controller-manager, scheduler, kwok"
  start_kcm
  start_scheduler
  start_kwok
  start_podfinalizer
  if ((FABRIC)); then
    log "building the netns fabric ($LEAVES leaves x $SPINES spines, $NODES hosts)"
    "$HERE/fabric.sh" up --dir "$DIR" --nodes "$NODES" --leaves "$LEAVES" --spines "$SPINES" \
      --link-rate "$LINK_RATE" --path-mode "$PATH_MODE" --tcp-cc "$TCP_CC" --mtu "$MTU" \
      || fail "fabric setup failed"
  fi
  create_nodes
  if ((PODS)); then
    "$HERE/podrunner/ensure-venv.sh" >&2 || fail "pod runner venv setup failed"
    start_proc podrunner "$("$HERE/podrunner/ensure-venv.sh" --print-python)" \
      "$HERE/podrunner/podrunner.py" --dir "$DIR"
    wait_for 30 podrunner test -f "$DIR/podrunner.ready" \
      || fail "pod runner did not start (see $DIR/logs/podrunner.log)"
  fi
  wait_component kube-controller-manager "$KCM_PORT"
  wait_component kube-scheduler "$SCHED_PORT"
  # The default ServiceAccount shows the controller-manager's controllers are running (and
  # ServiceAccount admission will accept pods in namespace default).
  wait_for 60 "default ServiceAccount" api_get /api/v1/namespaces/default/serviceaccounts/default \
    || fail "no default ServiceAccount after 60s (see $DIR/logs/kube-controller-manager.log)"
  for c in kube-controller-manager kube-scheduler kwok podfinalizer; do
    alive "$c" || fail "$c exited (see $DIR/logs/$c.log)"
  done
  cat >"$DIR/env" <<EOF
export KUBECONFIG=$DIR/kubeconfig
export C4_TESTENV_DIR=$DIR
export C4_TESTENV_BIN=$BIN
export C4_TESTENV_APISERVER=https://127.0.0.1:$API_PORT
export C4_TESTENV_HOST_PORTS="$HOST_PORT_LIST"
export PATH=$BIN:\$PATH
EOF
  log "up in $((SECONDS - t0))s: $NODES nodes; source $DIR/env"
}

do_down() {
  local quiet=${1:-}
  local c
  for c in podrunner podfinalizer kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
    stop_proc "$c" 15
  done
  kill_pod_orphans
  if [[ -f $DIR/fabric/netns.list ]]; then
    "$HERE/fabric.sh" down --dir "$DIR" || true
  fi
  rm -rf "$DIR/etcd" "$DIR/podrunner.ready" "$DIR/podfinalizer.ready"
  [[ -n $quiet ]] || log "down: $DIR"
}

# Pod processes whose runner died: recognised by the C4_TESTENV_DIR=DIR their runner put in
# their environment (their command lines do not name DIR).
pod_proc_owned() {  # pod_proc_owned <pid>
  local e
  e=$({ tr '\0' '\n' <"/proc/$1/environ"; } 2>/dev/null) || return 1
  [[ $'\n'$e$'\n' == *$'\n'"C4_TESTENV_DIR=$DIR"$'\n'* ]]
}

kill_pod_orphans() {
  local f pid
  for f in "$DIR"/pods/*/*/*.pid; do
    [[ -f $f ]] || continue
    pid=$(<"$f")
    if [[ $pid =~ ^[0-9]+$ ]] && pod_proc_owned "$pid"; then
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
  done
}

pod_file() {  # pod_file <ns/pod> [container] <ext>
  local pod=${POS[0]:-} c=${POS[1]:-} d
  [[ $pod == */* ]] || die "expected NS/POD"
  d=$DIR/pods/$pod
  [[ -d $d ]] || die "no runner pod $pod in $DIR"
  if [[ -z $c ]]; then
    c=$(cd "$d" && ls -- *."$1" 2>/dev/null | head -n 1); c=${c%."$1"}
  fi
  [[ -f $d/$c.$1 ]] || die "no container '$c' in $pod"
  echo "$d/$c.$1"
}

do_logs() { cat "$(pod_file log)"; }

do_pod_signal() {
  local sig=${POS[-1]:-} f pid
  [[ $sig =~ ^(STOP|CONT|KILL|TERM|INT|HUP|USR1|USR2)$ ]] || die "signal must be STOP|CONT|KILL|TERM|INT|HUP|USR1|USR2"
  unset 'POS[-1]'
  f=$(pod_file pid); pid=$(<"$f")
  pod_proc_owned "$pid" || die "process $pid of ${POS[0]} is not running"
  if [[ -z $PROCESS ]]; then
    kill -"$sig" -- "-$pid"
    return
  fi
  local p found=0
  for p in $(descendants "$pid"); do
    [[ $(cat "/proc/$p/comm" 2>/dev/null) == "${PROCESS:0:15}" ]] || continue
    kill -"$sig" "$p" 2>/dev/null && found=1
  done
  ((found)) || die "no process '$PROCESS' under the container of ${POS[0]}"
}

descendants() {  # descendants <pid>: every process below it
  local c
  for c in $(pgrep -P "$1"); do echo "$c"; descendants "$c"; done
}

do_restart_apiserver() {
  load_ports || die "no cluster in $DIR"
  [[ -f $DIR/pids/kube-apiserver.cmd ]] || die "no kube-apiserver was started in $DIR"
  local t0=$SECONDS
  # With clients connected, kube-apiserver waits up to its request timeout (60 s) for them after
  # it has stopped listening; 5 s then SIGKILL keeps the restart quick (data is in etcd).
  stop_proc kube-apiserver 5
  FAILING=1  # a failed restart must not tear the cluster down behind the caller's back
  start_apiserver_from_cmd
  log "kube-apiserver restarted in $((SECONDS - t0))s"
}

do_status() {
  local c f
  load_ports || { echo "no cluster in $DIR"; return 1; }
  for f in "$DIR"/pids/*.pid; do
    [[ -e $f ]] || continue
    c=$(basename "$f" .pid)
    if alive "$c"; then echo "$c: running (pid $(<"$f"))"; else echo "$c: DEAD"; fi
  done
  echo "apiserver: https://127.0.0.1:$API_PORT readyz=$(api_get /readyz 2>/dev/null || echo no)"
}

# One command at a time per cluster directory (up/down/restart may be called concurrently by
# tests and by hand).
lock_dir() { exec 8>"$DIR/.lock"; flock 8; }

if ((FABRIC)) && [[ $(id -u) != 0 ]]; then die "--fabric needs root (network namespaces)"; fi
[[ -z $KCM_QPS || $KCM_QPS =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--kcm-api-qps needs a number, got '$KCM_QPS'"
[[ -z $KCM_BURST || $KCM_BURST =~ ^[0-9]+$ ]] || die "--kcm-api-burst needs an integer, got '$KCM_BURST'"

case "$CMD" in
  build) exec "$HERE/build.sh" ;;
  up) need_dir; lock_dir; do_up ;;
  down) need_dir; lock_dir; do_down ;;
  restart-apiserver) need_dir; lock_dir; do_restart_apiserver ;;
  status) need_dir; do_status ;;
  logs) need_dir; do_logs ;;
  pod-signal) need_dir; do_pod_signal ;;
  *) die "unknown command '$CMD' (build|up|down|restart-apiserver|status|logs|pod-signal)" ;;
esac
