#!/usr/bin/env bash
# e2e: C4D end to end on a private test cluster (root only; exit 77 = skipped otherwise).
# 6 KWOK nodes on 2 leaves of the netns fabric, pods as processes, the operator on the host with
# its report endpoint, node plugins as a DaemonSet. A TrainingJob of 8 c4-netbench ranks (training
# mode, 4 GPUs per rank so at most 2 ranks per node, checkpoints every 20 steps) trains through
# the NCCL plugin; then a fault is injected into one rank:
#   freeze (default)  SIGSTOP the rank's process: it stops posting and reporting while its pod
#                     runs; its peers wait on it -> non-communication hang of its node
#   crash             SIGKILL the rank's process while its pod stays up: each pod is an
#                     MPI-operator-style worker whose main process (here a shell, there sshd)
#                     outlives the rank it started and ends only with a rank that succeeded. No
#                     pod fails, so only C4D can see the crash: the rank's reports stop and its
#                     peers report the connection closed -> crash of that rank (the peers that
#                     then fail are its victims) -> whole-job restart, no cordon (no node
#                     evidence)
# Checks (freeze): C4D names the frozen rank's node (Event FaultDetected on the TrainingJob,
# FaultSuspected and NodeCordoned on the Node), the node is cordoned and tainted
# c4.dev/faulty:NoSchedule, the job restarts as attempt 1 from status.lastCheckpoint away from
# that node without spending the user's restart budget, and runs to completion (the ranks resume
# from the checkpoint step, every rank with the checksum of an uninterrupted run: the same training
# on plain TCP on the host). Prints the timeline: fault -> verdict -> cordon -> restart -> done.
# A real Prometheus (lib/prometheus.sh) scrapes the operator and the node plugins throughout; at
# the end it must show the job's goodput, its restart, the verdict, its detection latency, the
# cordon and the chart's alert C4NodeCordoned firing (crash: no cordon); every query of the
# chart's Grafana dashboard must evaluate (its job, fault and cordon panels with data); and
# `promtool check metrics` must pass on every component's /metrics. Then (freeze) the node is
# released as after a repair: `kubectl annotate node <node> c4.dev/release=true` must uncordon
# and untaint it, remove C4's bookkeeping and the annotation, and keep its fault history.
#
#   c4d_fault_test.sh <build dir> <work dir> [freeze|crash]   (C4_E2E_KEEP=1 keeps it running;
#                                                              C4_E2E_RANKS, default 8)
#   C4_E2E_TELEMETRY=Profiler c4d_fault_test.sh ... freeze|crash   the job's telemetry from C4's
#                                                              NCCL profiler plugin (the ranks on
#                                                              plain TCP, no net plugin); a crash
#                                                              then shows as the node plugin's
#                                                              processExited notices, no peer
#                                                              reports a closed connection
#   C4_E2E_NO_DETECTION=1 c4d_fault_test.sh ... freeze|crash   the control: the same fault with the
#                                                              report endpoint and C4D off must
#                                                              leave the job hung
#   C4_E2E_OPERATOR_FAILOVER=1 c4d_fault_test.sh ... crash     the operator is killed (failpoint
#                                                              after-finding-pending) once C4D has
#                                                              found the crash and before it
#                                                              confirmed it, after every exit was
#                                                              delivered to it, and started again:
#                                                              the node plugins resend the exited
#                                                              ranks' last words to the new process
#                                                              (no Prometheus checks: the metrics
#                                                              port changes). With
#                                                              C4_E2E_NODE_PLUGIN_ARGS=
#                                                              --last-words-seconds=0 (the control:
#                                                              nothing resent) the new process must
#                                                              not name the crash
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=lib/c4.sh
source "$ROOT/e2e/scenarios/lib/c4.sh"
# shellcheck source=lib/prometheus.sh
source "$ROOT/e2e/scenarios/lib/prometheus.sh"
FAULT=${3:-freeze}
[[ $FAULT == freeze || $FAULT == crash ]] || { echo "fault must be freeze or crash" >&2; exit 2; }
c4_scenario_init "$1" "$2"
RANKS=${C4_E2E_RANKS:-8}
STEPS=700

# The checksum of an uninterrupted run (the training state is a function of the steps only).
expected=$(C4_SOCKET_IFNAME=lo "$NETBENCH" --launch "$RANKS" --baseline --steps "$STEPS" \
  --state-bytes 256K 2>&1 | grep -o 'checksum=[0-9a-f]*' | cut -d= -f2 | sort -u)
[[ $expected =~ ^[0-9a-f]{16}$ ]] || fail "no single reference checksum: '$expected'"

FAILOVER=${C4_E2E_OPERATOR_FAILOVER:-}
[[ -z $FAILOVER || $FAULT == crash ]] || { echo "C4_E2E_OPERATOR_FAILOVER is for the crash" >&2; exit 2; }
RESEND=1
[[ ${C4_E2E_NODE_PLUGIN_ARGS:-} != *--last-words-seconds=0* ]] || RESEND=0
PROM=1
[[ -z ${C4_E2E_NO_DETECTION:-} && -z $FAILOVER ]] || PROM=0

c4_cluster_up 6
c4_install_c4
((PROM == 0)) || c4_prometheus_up

tj() { kubectl get tj -n "$NS" train -o jsonpath="$1"; }
now_s() { date +%s.%N; }
T_START=$(now_s)
mkdir -p "$WORK/ckpt"
launcher=""
[[ $FAULT != crash ]] || launcher=$(c4_mpi_worker_command)
c4_apply_train_job "$RANKS" "$STEPS" 256K "" "$launcher"
wait_until 90 "train Running" bash -c "[[ \$(kubectl get tj -n $NS train -o jsonpath='{.status.phase}') == Running ]]"
if [[ ${C4_E2E_TELEMETRY:-NetPlugin} == Profiler ]]; then
  c4_expect_profiler_only
  echo "telemetry: C4's NCCL profiler plugin ($(c4_train_env NCCL_PROFILER_PLUGIN)), no net plugin"
fi
if [[ -n ${C4_E2E_NO_DETECTION:-} ]]; then
  # No report pipeline, no status.lastCheckpoint: the ranks' checkpoint files say it.
  wait_until 90 "a first checkpoint" bash -c \
    "[[ \$(ls $WORK/ckpt/ckpt-00000040.rank-*.bin 2>/dev/null | wc -l) == $RANKS ]]"
  step_before=40
else
  wait_until 90 "a first checkpoint" bash -c \
    "[[ \$(kubectl get tj -n $NS train -o jsonpath='{.status.lastCheckpoint.step}') -ge 40 ]]"
  step_before=$(tj '{.status.lastCheckpoint.step}')
fi
victim_pod=train-2
victim_node=$(kubectl get pod -n "$NS" "$victim_pod" -o jsonpath='{.spec.nodeName}')
echo "training: attempt 0 running, checkpoint at step $step_before; fault: $FAULT rank 2 ($victim_pod on $victim_node)"
if [[ -n $FAILOVER ]]; then
  # The operator again, its failpoint armed: it dies in the first window in which C4D has found a
  # fault it has not confirmed. Armed only now, so no finding of the job's start can fire it.
  C4_FAILPOINTS=after-finding-pending=kill c4_restart_operator
  accepted() {
    curl -sf "http://127.0.0.1:$OP_METRICS/metrics" |
      grep -qE '^c4_ingest_requests_total\{code="200",reason="accepted"\} [1-9]'
  }
  wait_until 30 "the armed operator accepting reports" accepted
  echo "operator: restarted with failpoint after-finding-pending=kill (pid $OP_PID)"
fi

T_FAULT=$(now_s)
case $FAULT in
  freeze) "$TESTENV" pod-signal --dir "$CLUSTER" "$NS/$victim_pod" STOP ;;
  crash) "$TESTENV" pod-signal --dir "$CLUSTER" "$NS/$victim_pod" KILL --process c4-netbench ;;
esac

event_time() {  # event_time <object name> <reason>: creation time of the first such Event, or ""
  kubectl get events -A --field-selector "involvedObject.name=$1,reason=$2" \
    -o jsonpath='{.items[0].metadata.creationTimestamp}' 2>/dev/null
}
if [[ -n $FAILOVER ]]; then
  # Every exit reached the operator (the node plugin sends an exit at once), which died at the
  # failpoint with the crash found but unconfirmed; its successor starts with an empty store.
  dead() { ! kill -0 "$OP_PID" 2>/dev/null; }
  wait_until 30 "the operator killed at its failpoint" dead
  grep -q 'failpoint=after-finding-pending' "$WORK/operator.log" || fail "the failpoint did not fire"
  [[ -z $(kubectl get events -n "$NS" --field-selector reason=FaultDetected -o name) ]] \
    || fail "a verdict before the failpoint: the failover tests nothing"
  T_KILLED=$(now_s)
  c4_restart_operator
  echo "operator: killed at the failpoint $(python3 -c "print(f'{$T_KILLED - $T_FAULT:.1f}')") s" \
    "after the fault, started again (pid $OP_PID)"
  if ((RESEND == 0)); then
    # The control: nothing resent, the new operator knows nothing of the crash.
    sleep 30
    named=$(kubectl get events -n "$NS" --field-selector involvedObject.name=train,reason=FaultDetected \
      -o jsonpath='{.items[*].message}')
    [[ $named != *"rank 2 (pod $victim_pod"* ]] \
      || fail "the crash was named without the last words resent: the scenario does not test the resend"
    echo "control: without the resend the new operator did not name the crash in 30 s" \
      "(verdicts: ${named:-none}; attempt $(tj '{.status.attempt}'))"
    echo "PASS: the failover scenario depends on the node plugins' resend"
    exit 0
  fi
  replayed() {
    local f
    for f in "$CLUSTER"/pods/"$SYS"/*/node-plugin.log; do
      grep -q 'resending the last words' "$f" && return 0
    done
    return 1
  }
  wait_until 30 "a node plugin resending its exited ranks' last words" replayed
fi
if [[ -n ${C4_E2E_NO_DETECTION:-} ]]; then
  # The control run: without C4D a frozen rank, or a dead one whose pod stays up, hangs the job.
  sleep 30
  [[ $(tj '{.status.attempt}') == 0 ]] || fail "the job restarted without C4D: the scenario does not test C4D"
  [[ -z $(kubectl get events -n "$NS" --field-selector reason=FaultDetected -o name) ]] \
    || fail "a verdict without C4D"
  if [[ $FAULT == crash ]]; then
    grep -q 'rank exited with' "$CLUSTER/pods/$NS/$victim_pod/trainer.log" \
      || fail "the killed rank's worker did not see it exit"
    [[ $(kubectl get pod -n "$NS" "$victim_pod" -o jsonpath='{.status.phase}') == Running ]] \
      || fail "$victim_pod is not Running: the pod, not C4D, would show the crash"
  fi
  echo "control: without C4D the job is still hung at attempt 0 after 30 s ($FAULT of rank 2," \
    "its pod $(kubectl get pod -n "$NS" "$victim_pod" -o jsonpath='{.status.phase}'))"
  echo "PASS: the $FAULT scenario depends on C4D"
  exit 0
fi
wait_until 60 "restart to attempt 1" bash -c "[[ \$(kubectl get tj -n $NS train -o jsonpath='{.status.attempt}') == 1 ]]"
T_RESTART=$(now_s)
if [[ $FAULT == freeze ]]; then
  wait_until 10 "Event FaultDetected" bash -c "[[ -n \$(kubectl get events -n $NS --field-selector involvedObject.name=train,reason=FaultDetected -o name) ]]"
  detected=$(kubectl get events -n "$NS" --field-selector involvedObject.name=train,reason=FaultDetected \
    -o jsonpath='{.items[0].message}')
  echo "verdict: $detected"
  [[ $detected == *"nonCommHang of node $victim_node"* ]] || fail "the verdict does not name $victim_node"
  wait_until 20 "$victim_node cordoned" bash -c \
    "[[ \$(kubectl get node $victim_node -o jsonpath='{.spec.unschedulable}') == true ]]"
  taints=$(kubectl get node "$victim_node" -o jsonpath='{.spec.taints[*].key}')
  [[ $taints == *c4.dev/faulty* ]] || fail "$victim_node lacks the c4.dev/faulty taint ($taints)"
  [[ -n $(event_time "$victim_node" NodeCordoned) ]] || fail "no NodeCordoned Event on $victim_node"
  [[ -n $(event_time "$victim_node" FaultSuspected) ]] || fail "no FaultSuspected Event on $victim_node"
  history=$(kubectl get node "$victim_node" -o jsonpath='{.metadata.annotations.c4\.dev/fault-history}')
  [[ $history == *nonCommHang* ]] || fail "no fault history on $victim_node: $history"
  [[ $(tj '{.status.faults[-1:].class}') == nonCommHang ]] || fail "status.faults lacks the verdict"
  [[ $(tj '{.status.restartsCountTowardsMax}') == 0 ]] || fail "a C4 diagnosis spent the user's budget"
  [[ $(tj '{.status.avoidNodes}') == *"$victim_node"* ]] || fail "status.avoidNodes lacks $victim_node"
  echo "node $victim_node: cordoned, tainted c4.dev/faulty:NoSchedule, fault history: $history"
else
  wait_until 10 "Event FaultDetected" bash -c "[[ -n \$(kubectl get events -n $NS --field-selector involvedObject.name=train,reason=FaultDetected -o name) ]]"
  detected=$(kubectl get events -n "$NS" --field-selector involvedObject.name=train,reason=FaultDetected \
    -o jsonpath='{.items[0].message}')
  echo "verdict: $detected"
  [[ $detected == "crash of "*"rank 2 (pod $victim_pod on node $victim_node)"* ]] \
    || fail "the verdict does not name rank 2 on $victim_node"
  # With profiler telemetry no peer reports the closed connection: the victims, which exit
  # through exit(), sent their last reports and the killed rank did not.
  [[ ${C4_E2E_TELEMETRY:-NetPlugin} != Profiler || $detected == *"sent no last report"* ]] \
    || fail "the verdict does not say the killed rank sent no last report while its peers did"
  [[ $(kubectl get pod -n "$NS" "$victim_pod" -o jsonpath='{.status.phase}') != Failed ]] \
    || fail "$victim_pod failed: the pod, not C4D, showed the crash"
  [[ $(kubectl get node "$victim_node" -o jsonpath='{.spec.unschedulable}') != true ]] \
    || fail "a crash without node evidence cordoned $victim_node"
  [[ $(tj '{.status.faults[-1:].class}') == crash ]] || fail "status.faults lacks the crash"
  [[ $(tj '{.status.restartsCountTowardsMax}') == 0 ]] || fail "a C4 diagnosis spent the user's budget"
fi

wait_until 90 "attempt 1 Running" bash -c "[[ \$(kubectl get tj -n $NS train -o jsonpath='{.status.phase}') == Running ]]"
T_RUNNING=$(now_s)
resume=$(kubectl get pod -n "$NS" train-0 \
  -o jsonpath='{.spec.containers[0].env[?(@.name=="C4_RESUME_STEP")].value}')
[[ $resume -ge $step_before ]] || fail "attempt 1 resumes from step '$resume', not from the checkpoint (>= $step_before)"
if [[ $FAULT == freeze ]]; then
  for ((r = 0; r < RANKS; r++)); do
    [[ $(kubectl get pod -n "$NS" "train-$r" -o jsonpath='{.spec.nodeName}') != "$victim_node" ]] \
      || fail "train-$r of attempt 1 runs on the faulty node $victim_node"
  done
fi
echo "attempt 1: running from checkpoint step $resume"

wait_until 240 "train Succeeded" bash -c "[[ \$(kubectl get tj -n $NS train -o jsonpath='{.status.phase}') == Succeeded ]]"
T_DONE=$(now_s)
resumed=$(grep -ho '"resumedFrom":[0-9]*' "$CLUSTER"/pods/"$NS"/train-0/trainer.log | tail -1 | cut -d: -f2)
[[ ${resumed:-0} -ge $step_before ]] || fail "the ranks did not resume from the checkpoint (resumedFrom=$resumed)"
for ((r = 0; r < RANKS; r++)); do
  sum=$(grep -ho '"checksum":"[0-9a-f]*"' "$CLUSTER/pods/$NS/train-$r/trainer.log" | tail -1 | cut -d'"' -f4)
  [[ $sum == "$expected" ]] || fail "rank $r checksum '$sum' != uninterrupted $expected"
done
echo "done: the ranks resumed from step $resumed and completed, all $RANKS with the uninterrupted checksum $expected"
kubectl describe tj -n "$NS" train | sed -n '/^Events:/,$p'

# What Prometheus saw: the job's goodput and the fault counters, from the operator and the node
# plugins it scraped, the chart's alert firing; and every component's /metrics lint-clean.
if ((PROM == 1)); then
  T_PROM=$SECONDS
  positive() { local v; v=$(c4_prom_value "$1") && awk -v v="$v" 'BEGIN { exit !(v + 0 > 0) }'; }
  equals() { [[ $(c4_prom_value "$1") == "$2" ]]; }
  J="namespace=\"$NS\",trainingjob=\"train\""
  wait_until 10 "prometheus: job productive seconds > 0" positive "c4_operator_job_productive_seconds{$J}"
  wait_until 10 "prometheus: job goodput ratio > 0" positive "c4_operator_job_goodput_ratio{$J}"
  wait_until 10 "prometheus: 1 job restart" equals "c4_operator_job_restarts{$J}" 1
  at_least() { local v; v=$(c4_prom_value "$1") && awk -v v="$v" -v m="$2" 'BEGIN { exit !(v + 0 >= m) }'; }
  rank_nodes=$(kubectl get pods -n "$NS" -l c4.dev/job-name=train -o jsonpath='{.items[*].spec.nodeName}' |
    tr ' ' '\n' | sort -u | wc -l)
  wait_until 10 "prometheus: the node plugins of the ranks' $rank_nodes nodes accepted reports" at_least \
    'count(c4_node_plugin_messages_accepted_total{job="c4-node-plugin"} > 0)' "$rank_nodes"
  if [[ $FAULT == freeze ]]; then
    wait_until 10 "prometheus: a nonCommHang verdict" positive 'sum(c4_c4d_verdicts_total{class="nonCommHang"})'
    wait_until 10 "prometheus: its detection latency" equals 'c4_c4d_detection_seconds_count{class="nonCommHang"}' 1
    wait_until 10 "prometheus: one cordon" equals \
      'c4_operator_node_actions_total{action="cordon",outcome="cordoned"}' 1
    wait_until 10 "prometheus: alert C4NodeCordoned firing" equals \
      'count(ALERTS{alertname="C4NodeCordoned",alertstate="firing"})' 1
  else
    wait_until 10 "prometheus: no cordon" equals \
      'c4_operator_node_actions_total{action="cordon",outcome="cordoned"}' 0
  fi
  echo "prometheus: goodput $(c4_prom_value "c4_operator_job_goodput_ratio{$J}")" \
    "($(c4_prom_value "c4_operator_job_productive_seconds{$J}") s productive," \
    "$(c4_prom_value "c4_operator_job_lost_seconds{$J}") s lost), restarts 1," \
    "verdicts $(c4_prom_query 'c4_c4d_verdicts_total > 0' | tr '\n' ' ')"
  c4_promtool_check_metrics
  panels=("Job goodput" "Productive and lost seconds" "Restarts and budget" "Reports")
  [[ $FAULT == freeze ]] && panels+=("Faults by class" "Detection latency" "Cordons")
  c4_prom_dashboard_check "$ROOT/helm/c4/files/dashboards/c4-overview.json" "${panels[@]}"
  echo "prometheus checks: $((SECONDS - T_PROM)) s"
fi
if [[ $FAULT == freeze ]]; then
  # The node repaired: one annotation returns it to service. C4 removes its cordon, taint,
  # bookkeeping and the annotation, and keeps the fault history.
  kubectl annotate node "$victim_node" c4.dev/release=true >/dev/null
  wait_until 20 "$victim_node released" bash -c \
    "[[ \$(kubectl get node $victim_node -o jsonpath='{.spec.unschedulable}') != true && -z \$(kubectl get node $victim_node -o jsonpath='{.metadata.annotations.c4\.dev/release}') ]]"
  taints=$(kubectl get node "$victim_node" -o jsonpath='{.spec.taints[*].key}')
  [[ $taints != *c4.dev/faulty* ]] || fail "$victim_node released but still tainted ($taints)"
  [[ -z $(kubectl get node "$victim_node" -o jsonpath='{.metadata.annotations.c4\.dev/cordoned-by}') ]] \
    || fail "$victim_node released but still carries c4.dev/cordoned-by"
  history=$(kubectl get node "$victim_node" -o jsonpath='{.metadata.annotations.c4\.dev/fault-history}')
  [[ $history == *nonCommHang* ]] || fail "the release lost $victim_node's fault history: $history"
  wait_until 10 "Event NodeUncordoned on $victim_node" bash -c \
    "kubectl get events -A --field-selector involvedObject.name=$victim_node,reason=NodeUncordoned -o name | grep -q ."
  wait_until 10 "prometheus: one release" equals \
    'c4_operator_node_actions_total{action="uncordon",outcome="uncordoned"}' 1
  echo "node $victim_node: released by c4.dev/release=true (uncordoned, taint and bookkeeping removed, fault history kept)"
fi
python3 - "$T_START" "$T_FAULT" "$T_RESTART" "$T_RUNNING" "$T_DONE" "$FAULT" <<'PY'
import sys
start, fault, restart, running, done = map(float, sys.argv[1:6])
print(f"timeline ({sys.argv[6]}): fault at +{fault - start:.1f}s; restart started "
      f"{restart - fault:.1f}s after the fault; attempt 1 running after {running - fault:.1f}s; "
      f"job done at +{done - start:.1f}s")
PY
echo "PASS: C4D $FAULT -> detection -> restart from checkpoint -> completion"
