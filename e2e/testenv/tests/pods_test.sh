#!/usr/bin/env bash
# Pod runner test (root only; exits 77 = skipped otherwise): a private cluster with the netns
# fabric and the pod runner; pods annotated c4.dev/runner=process run as local processes.
#  1. env (literal, fieldRef, configMapKeyRef), configMap volume and the projected service-account
#     token: the pod sees its files, reaches the API server with its token (in-cluster config),
#     sees a configMap update, runs in its node's netns with podIP = the node's address and in a
#     kubelet-style pod cgroup (kubepods/besteffort/pod<uid>/<container>) where one can be made,
#     and reaches a service on the host's loopback through a forwarded host port;
#  2. a failing container's exit code reaches the pod status (Failed, exitCode 3); a container's
#     securityContext is applied (uid, fsGroup, capability sets, no_new_privs, token ownership)
#     and the pod's safe sysctls in its network namespace (an unsafe one fails the pod);
#  3. deletion: SIGTERM reaches the process, the pod object goes away, nothing is left running;
#     a process that ignores SIGTERM is killed after the grace period;
#  4. /etc/hosts has the pod hostnames of a headless Service, and a force-deleted pod leaves it at
#     once (while its process stops); a ClusterIP Service's names resolve to one pod it selects
#     (following relabels), and not at all when it translates ports;
#  5. stop/continue/kill of a pod process (testenv.sh pod-signal);
#  6. KWOK still runs pods without the annotation (and leaves runner pods alone).
#   pods_test.sh <work dir>
set -euo pipefail
TESTENV=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/testenv.sh
DIR=${1:?usage: pods_test.sh <work dir>}
if [[ $(id -u) != 0 ]]; then echo "SKIP: pods as processes need root (netns, mounts)"; exit 77; fi
mkdir -p "$DIR"; DIR=$(cd "$DIR" && pwd)
cleanup() { "$TESTENV" down --dir "$DIR" || true; }
trap cleanup EXIT
fail() {
  echo "PODS FAIL: $*" >&2
  tail -n 30 "$DIR/logs/podrunner.log" >&2 || true
  exit 1
}

"$TESTENV" up --dir "$DIR" --nodes 2 --leaves 2 --fabric --pods --host-ports 1
# shellcheck disable=SC1091
source "$DIR/env"
# A service on the host's loopback, reached from the pods through the forwarded host port.
HOST_PORT=$C4_TESTENV_HOST_PORTS
mkdir -p "$DIR/hostsvc" && echo "host-service" >"$DIR/hostsvc/hello"
python3 -m http.server --bind 127.0.0.1 --directory "$DIR/hostsvc" "$HOST_PORT" \
  >"$DIR/hostsvc.log" 2>&1 &
HOSTSVC=$!
cleanup() { kill "$HOSTSVC" 2>/dev/null || true; "$TESTENV" down --dir "$DIR" || true; }
K="kubectl -n pt"
kubectl create namespace pt >/dev/null
for _ in $(seq 100); do $K get serviceaccount default >/dev/null 2>&1 && break; sleep 0.2; done
$K create configmap cfg --from-literal=greeting=hello >/dev/null
$K create role podreader --verb=get --resource=pods >/dev/null
$K create rolebinding podreader --role=podreader --serviceaccount=pt:default >/dev/null

wait_phase() {  # wait_phase <pod> <phase> [seconds]
  local i
  for ((i = 0; i < ${3:-30} * 5; i++)); do
    [[ $($K get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null) == "$2" ]] && return 0
    sleep 0.2
  done
  fail "pod $1 not $2 (is $($K get pod "$1" -o jsonpath='{.status.phase}' 2>&1))"
}
wait_gone() {  # wait_gone <pod> [seconds]
  local i
  for ((i = 0; i < ${2:-30} * 5; i++)); do
    $K get pod "$1" >/dev/null 2>&1 || return 0
    sleep 0.2
  done
  fail "pod $1 still exists"
}
pid_of() { cat "$DIR/pods/pt/$1/${2:-main}.pid"; }
running() { [[ -e /proc/$1 ]] && [[ $(awk '{print $3}' "/proc/$1/stat") != Z ]]; }

# ---- 1. env, configMap, token, in-cluster API access, configMap update, netns --------------
sed "s/@HOST_PORT@/$HOST_PORT/" <<'YAML' | $K apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: app, annotations: {c4.dev/runner: process}}
spec:
  nodeName: node-1
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    command: [sh, -c]
    args:
    - |
      SA=/var/run/secrets/kubernetes.io/serviceaccount
      echo "name=$MY_NAME ip=$MY_IP node=$MY_NODE greet=$GREETING lit=$LIT"
      echo "file=$(cat /etc/c4cfg/greeting)"
      echo "api=$(curl -s -o /dev/null -w '%{http_code}' --cacert $SA/ca.crt \
        -H "Authorization: Bearer $(cat $SA/token)" \
        https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/api/v1/namespaces/$(cat $SA/namespace)/pods/$MY_NAME)"
      echo "forbidden=$(curl -s -o /dev/null -w '%{http_code}' --cacert $SA/ca.crt \
        -H "Authorization: Bearer $(cat $SA/token)" \
        https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/api/v1/nodes)"
      echo "host=$(curl -s http://127.0.0.1:$HOST_PORT/hello)"
      echo started
      for i in $(seq 150); do
        [ "$(cat /etc/c4cfg/greeting)" = updated ] && { echo "saw update"; exit 0; }
        sleep 0.2
      done
      echo "no update"; exit 1
    env:
    - name: MY_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    - name: MY_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}
    - name: MY_NODE
      valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
    - name: GREETING
      valueFrom: {configMapKeyRef: {name: cfg, key: greeting}}
    - {name: LIT, value: "x-$(MY_NAME)"}
    - {name: HOST_PORT, value: "@HOST_PORT@"}
    volumeMounts:
    - {name: cfg, mountPath: /etc/c4cfg}
  volumes:
  - name: cfg
    configMap: {name: cfg}
YAML
wait_phase app Running
node_ip=$(kubectl get node node-1 -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}')
[[ $($K get pod app -o jsonpath='{.status.podIP}') == "$node_ip" ]] || fail "podIP is not $node_ip"
pid=$(pid_of app)
if running "$pid"; then
  [[ $(readlink "/proc/$pid/ns/net") != $(readlink /proc/self/ns/net) ]] \
    || fail "pod process is not in its node's netns"
  # Kubelet-style cgroup (cgroupfs layout): the node plugin attributes datagrams by it.
  if ! grep -q 'cgroups=-' "$DIR/logs/podrunner.log"; then
    uid=$($K get pod app -o jsonpath='{.metadata.uid}')
    grep -q "/kubepods/besteffort/pod$uid/main\$" "/proc/$pid/cgroup" \
      || fail "pod process is not in cgroup kubepods/besteffort/pod$uid: $(cat "/proc/$pid/cgroup")"
    echo "cgroup: $(grep -m1 "pod$uid" "/proc/$pid/cgroup")"
  else
    echo "cgroup: no writable cgroup hierarchy here; pods run without pod cgroups"
  fi
fi
for _ in $(seq 100); do grep -q '^started' "$DIR/pods/pt/app/main.log" && break; sleep 0.2; done
$K create configmap cfg --from-literal=greeting=updated --dry-run=client -o yaml | $K replace -f - >/dev/null
wait_phase app Succeeded
log=$("$TESTENV" logs --dir "$DIR" pt/app)
echo "$log"
for want in "name=app ip=$node_ip node=node-1 greet=hello lit=x-app" "file=hello" "api=200" \
            "forbidden=403" "saw update" "host=host-service"; do
  grep -qxF "$want" <<<"$log" || fail "pod log lacks '$want'"
done
[[ $($K get pod app -o jsonpath='{.status.containerStatuses[0].state.terminated.exitCode}') == 0 ]] \
  || fail "exit code 0 not reported"

# ---- 2. failure exit code ----------------------------------------------------------------------
$K apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: bad, annotations: {c4.dev/runner: process}}
spec:
  restartPolicy: Never
  containers:
  - {name: main, image: busybox, args: [sh, -c, "echo failing; exit 3"]}
YAML
wait_phase bad Failed
[[ $($K get pod bad -o jsonpath='{.status.containerStatuses[0].state.terminated.exitCode}') == 3 ]] \
  || fail "exit code 3 not reported"
echo "failure: phase Failed, exitCode 3"

# ---- 2a. securityContext: uid, groups, capabilities, no_new_privs, token ownership --------------
$K apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: priv, annotations: {c4.dev/runner: process}}
spec:
  restartPolicy: Never
  securityContext:
    runAsUser: 1234
    fsGroup: 2000
    sysctls: [{name: net.ipv4.ip_local_reserved_ports, value: "45000-45099"}]
  containers:
  - name: root
    image: busybox
    command: [sh, -c, "grep -E '^(Uid|Cap|NoNewPrivs)' /proc/self/status"]
    securityContext:
      runAsUser: 0
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL], add: [NET_BIND_SERVICE, CAP_CHOWN]}
  - name: user
    image: busybox
    command: [sh, -c, "grep -E '^(Uid|Groups|Cap|NoNewPrivs)' /proc/self/status &&
                       head -c 3 /var/run/secrets/kubernetes.io/serviceaccount/token >/dev/null &&
                       echo token-readable &&
                       echo reserved=$(cat /proc/sys/net/ipv4/ip_local_reserved_ports)"]
    securityContext: {capabilities: {drop: [ALL]}}
YAML
wait_phase priv Succeeded
st() { grep "^$2:" "$DIR/pods/pt/priv/$1.log" | tr -s ' \t' ' '; }
[[ $(st root Uid) == "Uid: 0 0 0 0" ]] || fail "root container: $(st root Uid)"
for cap in CapPrm CapEff CapBnd; do  # CHOWN (bit 0) and NET_BIND_SERVICE (bit 10) only
  [[ $(st root $cap) == "$cap: 0000000000000401" ]] || fail "root container: $(st root $cap)"
done
[[ $(st root CapInh) == "CapInh: 0000000000000000" ]] || fail "root container: $(st root CapInh)"
[[ $(st root NoNewPrivs) == "NoNewPrivs: 1" ]] || fail "root container: no_new_privs unset"
[[ $(st user Uid) == "Uid: 1234 1234 1234 1234" ]] || fail "user container: $(st user Uid)"
[[ $(st user Groups) == "Groups: 2000 " || $(st user Groups) == "Groups: 2000" ]] ||
  fail "user container: $(st user Groups)"
for cap in CapPrm CapEff CapBnd; do
  [[ $(st user $cap) == "$cap: 0000000000000000" ]] || fail "user container: $(st user $cap)"
done
[[ $(st user NoNewPrivs) == "NoNewPrivs: 0" ]] || fail "user container: no_new_privs set"
grep -qx token-readable "$DIR/pods/pt/priv/user.log" || fail "user container cannot read its token"
grep -qx reserved=45000-45099 "$DIR/pods/pt/priv/user.log" ||
  fail "the pod's sysctl is not in its network namespace: $(grep reserved= "$DIR/pods/pt/priv/user.log")"
[[ $(cat /proc/sys/net/ipv4/ip_local_reserved_ports) != 45000-45099 ]] ||
  fail "the pod's sysctl reached the host's network namespace"
echo "securityContext: root with CHOWN+NET_BIND_SERVICE only and no_new_privs; uid 1234 in group" \
  "2000 with no capability, its token readable through fsGroup; its safe sysctl in its netns only"
# A sysctl outside the kubelet's safe set fails the pod, as on a kubelet without
# --allowed-unsafe-sysctls.
$K apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: unsafe, annotations: {c4.dev/runner: process}}
spec:
  restartPolicy: Never
  securityContext: {sysctls: [{name: net.core.somaxconn, value: "1024"}]}
  containers:
  - {name: main, image: busybox, command: [sh, -c, "echo ran"]}
YAML
wait_phase unsafe Failed
[[ ! -s "$DIR/pods/pt/unsafe/main.log" ]] || fail "the pod with an unsafe sysctl ran"
echo "sysctls: an unsafe one fails the pod"

# ---- 3. graceful deletion ----------------------------------------------------------------------
$K apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: polite, annotations: {c4.dev/runner: process}}
spec:
  terminationGracePeriodSeconds: 20
  containers:
  - name: main
    image: busybox
    command: [sh, -c, 'trap "echo got TERM; exit 0" TERM; echo up; while true; do sleep 0.1; done']
---
apiVersion: v1
kind: Pod
metadata: {name: stubborn, annotations: {c4.dev/runner: process}}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: busybox
    command: [sh, -c, 'trap "echo ignoring TERM" TERM; echo up; while true; do sleep 0.1; done']
YAML
wait_phase polite Running
wait_phase stubborn Running
p1=$(pid_of polite); p2=$(pid_of stubborn)
for _ in $(seq 50); do grep -q up "$DIR/pods/pt/polite/main.log" && grep -q up "$DIR/pods/pt/stubborn/main.log" && break; sleep 0.2; done
t0=$SECONDS
$K delete pod polite stubborn --wait=false >/dev/null
wait_gone polite 15
wait_gone stubborn 15
echo "deletion: both pods gone after $((SECONDS - t0))s"
! running "$p1" || fail "polite process $p1 still running"
! running "$p2" || fail "stubborn process $p2 still running"
grep -q "got TERM" "$DIR/pods/pt/polite/main.log" || fail "SIGTERM did not reach the process"
grep -q "ignoring TERM" "$DIR/pods/pt/stubborn/main.log" || fail "stubborn did not get SIGTERM"
grep -q "grace period over, SIGKILL.*pt/stubborn" "$DIR/logs/podrunner.log" \
  || fail "stubborn was not killed after its grace period"

# ---- 4. /etc/hosts for a headless Service --------------------------------------------------
$K apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Service
metadata: {name: workers}
spec:
  clusterIP: None
  selector: {app: worker}
  ports: [{port: 5000}]
---
apiVersion: v1
kind: Pod
metadata: {name: worker-0, labels: {app: worker}, annotations: {c4.dev/runner: process}}
spec:
  hostname: worker-0
  subdomain: workers
  nodeName: node-0
  containers:
  - {name: main, image: busybox, command: [sh, -c, 'while true; do sleep 0.2; done']}
---
apiVersion: v1
kind: Pod
metadata: {name: reader, annotations: {c4.dev/runner: process}}
spec:
  nodeName: node-1
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    command: [sh, -c]
    args:
    - |
      for i in $(seq 100); do
        grep -q worker-0.workers.pt.svc.cluster.local /etc/hosts && { cat /etc/hosts; exit 0; }
        sleep 0.2
      done
      cat /etc/hosts; exit 1
YAML
wait_phase reader Succeeded
w0=$(kubectl get node node-0 -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}')
grep -qE "^$w0\s.*worker-0\.workers\.pt\.svc\.cluster\.local" "$DIR/pods/pt/reader/main.log" \
  || fail "/etc/hosts lacks worker-0 -> $w0: $(cat "$DIR/pods/pt/reader/main.log")"
grep -qE "^$w0\s.*\bworkers\.pt\b" "$DIR/pods/pt/reader/main.log" || fail "/etc/hosts lacks workers.pt"
echo "hosts: worker-0.workers.pt.svc.cluster.local -> $w0"

# ---- 4a. a force-deleted pod leaves /etc/hosts at once, while its process still stops ---------
# A restarted job deletes its pods with force and creates new ones of the same names at once: the
# name must not resolve to the old address while the old process takes its grace period (a rank
# that resolved its master then knocked on the old address for a minute). Control: the old pod's
# process is checked to be still alive when the new pod runs.
w1=$(kubectl get node node-1 -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}')
ghost_pod() {  # ghost_pod <node>: worker-1 of Service workers, ignoring SIGTERM
  $K apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: worker-1, labels: {app: worker}, annotations: {c4.dev/runner: process}}
spec:
  hostname: worker-1
  subdomain: workers
  nodeName: $1
  terminationGracePeriodSeconds: 30
  containers:
  - {name: main, image: busybox, command: [sh, -c, "trap '' TERM; while true; do sleep 0.2; done"]}
YAML
}
ghost_pod node-0
wait_phase worker-1 Running
$K apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: watcher, annotations: {c4.dev/runner: process}}
spec:
  nodeName: node-1
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    command: [sh, -c]
    args:
    - |
      # One line per look at /etc/hosts: the addresses worker-1's name has there.
      for i in $(seq 120); do
        echo "look $(grep -E '\sworker-1\.workers\.pt\.svc\.cluster\.local(\s|$)' /etc/hosts |
          awk '{print $1}' | sort -u | tr '\n' ' ')"
        sleep 0.1
      done
YAML
wait_phase watcher Running
old_pid=$(pid_of worker-1)
$K delete pod worker-1 --grace-period=0 --force >/dev/null 2>&1
ghost_pod node-1
wait_phase worker-1 Running
running "$old_pid" || fail "the force-deleted worker-1's process stopped before the new one ran"
wait_phase watcher Succeeded 40
looks="$DIR/pods/pt/watcher/main.log"
if grep -E '^look .*[0-9] .*[0-9]' "$looks" >/dev/null; then
  fail "worker-1 resolved to two addresses at once: $(grep -E '^look .*[0-9] .*[0-9]' "$looks" | head -3)"
fi
[[ $(tail -n 1 "$looks") == "look $w1 " ]] || fail "worker-1 does not end at $w1: $(tail -n 3 "$looks")"
echo "hosts: a force-deleted pod left /etc/hosts at once; its successor resolves to $w1"
$K delete pod worker-1 watcher --grace-period=0 --force >/dev/null 2>&1 || true

# ---- 4b. ClusterIP Services (no kube-proxy): names -> one selected pod, ports unchanged --------
$K apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Service
metadata: {name: front}
spec:
  selector: {app: worker}
  ports: [{port: 5000}]
---
apiVersion: v1
kind: Service
metadata: {name: remap}
spec:
  selector: {app: worker}
  ports: [{port: 80, targetPort: 5000}]
---
apiVersion: v1
kind: Service
metadata: {name: lead}
spec:
  selector: {role: lead}
  ports: [{port: 5000}]
---
apiVersion: v1
kind: Pod
metadata: {name: resolver, annotations: {c4.dev/runner: process}}
spec:
  nodeName: node-1
  containers:
  - {name: main, image: busybox, command: [sh, -c, 'while true; do sleep 0.2; done']}
YAML
wait_phase resolver Running
resolve() {  # resolve <name>: getent inside the resolver pod (its mount and network namespaces)
  nsenter -t "$(pid_of resolver)" -m -n getent hosts "$1"
}
resolves_to() {  # resolves_to <name> <address|-> [seconds]
  local i got
  for ((i = 0; i < ${3:-10} * 5; i++)); do
    got=$(resolve "$1" | awk '{print $1}' || true)
    [[ ${got:--} == "$2" ]] && return 0
    sleep 0.2
  done
  fail "$1 resolves to '${got:--}', want '$2'"
}
for n in front front.pt front.pt.svc front.pt.svc.cluster.local; do resolves_to "$n" "$w0"; done
resolves_to remap.pt.svc - 2   # port 80 -> 5000 needs a translation nothing here does
resolves_to lead.pt.svc - 2    # selects no pod yet
$K label pod worker-0 role=lead >/dev/null
resolves_to lead.pt.svc "$w0" 5
$K label pod worker-0 role- >/dev/null
resolves_to lead.pt.svc - 5
$K delete pod resolver --grace-period=1 --wait=false >/dev/null
echo "ClusterIP Services: front.pt.svc -> $w0; a port-translating Service is left out; a" \
  "selection change is followed"

# ---- 5. stop / continue / kill a pod process -----------------------------------------------
pid=$(pid_of worker-0)
"$TESTENV" pod-signal --dir "$DIR" pt/worker-0 STOP
sleep 0.3
[[ $(awk '{print $3}' "/proc/$pid/stat") == T ]] || fail "STOP did not stop $pid"
"$TESTENV" pod-signal --dir "$DIR" pt/worker-0 CONT
sleep 0.3
[[ $(awk '{print $3}' "/proc/$pid/stat") != T ]] || fail "CONT did not resume $pid"
"$TESTENV" pod-signal --dir "$DIR" pt/worker-0 KILL
for _ in $(seq 50); do
  [[ $($K get pod worker-0 -o jsonpath='{.status.containerStatuses[0].restartCount}') -ge 1 ]] && break
  sleep 0.2
done
[[ $($K get pod worker-0 -o jsonpath='{.status.containerStatuses[0].restartCount}') -ge 1 ]] \
  || fail "killed container was not restarted (restartPolicy Always)"
echo "signals: STOP/CONT/KILL ok, container restarted"

# ---- 6. KWOK keeps running pods without the annotation ---------------------------------------
$K run plain --image=nginx --restart=Never >/dev/null
wait_phase plain Running
[[ ! -d $DIR/pods/pt/plain ]] || fail "the runner took a pod without the annotation"

"$TESTENV" down --dir "$DIR"
trap - EXIT
! running "$(pid_of worker-0)" || fail "pod process left after down"
[[ -z $(ip netns list | grep "^c4$(printf '%s' "$DIR" | sha1sum | cut -c1-6)-") ]] \
  || fail "netns left after down"
echo "PODS PASS"
