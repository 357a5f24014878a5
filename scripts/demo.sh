#!/usr/bin/env bash
# The local demo: C4 on a real control plane with emulated nodes and fabric.
#
#   scripts/demo.sh [--fault freeze|crash] [--keep]
#
# Installs what is missing (apt), builds C4 (Release) and the test control plane (cached), then:
# brings up 5 KWOK nodes on a netns leaf-spine fabric (2 leaves, 2 spines) with pods as local
# processes, starts the operator with its TLS report endpoint and the node plugin DaemonSet,
# submits a TrainingJob of 4 c4-netbench ranks (training mode, checkpoints every 20 steps),
# injects a fault into rank 2 and narrates what C4 does:
#   freeze (default)  the rank's process is stopped (SIGSTOP): C4D sees its peers wait on a rank
#                     that stopped reporting, names its node, cordons and taints it, and restarts
#                     the job from the last checkpoint on the healthy nodes;
#   crash             the rank's process is killed: the pod fails, the job restarts from the
#                     checkpoint; no node is cordoned without node-level evidence.
# It shows the verdict, the node, the Events of `kubectl describe trainingjob`, the restart from
# the checkpoint and the timeline, then tears everything down. --keep leaves the cluster and the
# operator running to explore (`source <dir>/cluster/env; kubectl get nodes,tj`).
# Needs root (network namespaces, cgroups, bind mounts).
set -euo pipefail
cd "$(dirname "$0")/.."

FAULT=freeze
KEEP=""
while (($#)); do
  case "$1" in
    --fault) FAULT=${2:?--fault needs freeze or crash}; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "demo.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $FAULT == freeze || $FAULT == crash ]] || { echo "demo.sh: --fault freeze|crash" >&2; exit 2; }
if [[ $(id -u) -ne 0 ]]; then
  echo "demo.sh: needs root (network namespaces, cgroups, bind mounts)" >&2
  exit 1
fi

JOBS=${C4_JOBS:-$(nproc)}
echo "== 1/3 dependencies"
scripts/setup.sh
echo "== 2/3 build (Release) and the test control plane (cached after the first run)"
if [[ ! -f build/CMakeCache.txt ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build build -j "$JOBS" --target c4-operator c4-node-plugin c4-netbench nccl-net-c4
e2e/testenv/testenv.sh build >/dev/null
echo "== 3/3 the demo: fault '$FAULT' in a running TrainingJob"
C4_E2E_KEEP=$KEEP exec e2e/scenarios/c4d_fault_test.sh build "${C4_DEMO_DIR:-/tmp/c4-demo}" "$FAULT"
