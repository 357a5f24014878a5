#!/usr/bin/env python3
"""Integration (shared cluster): the harness ends pod deletions as a kubelet does.

1. A pod KWOK plays, deleted with a 30 s grace period, is gone within 10 s: the pod finalizer
   completes the deletion (KWOK's own pod-delete stage is not loaded).
2. A pod of the same name created right after has a new UID; handing the finalizer the stale
   event of the old pod (what KWOK's by-name delete acted on) leaves the new pod alone: the final
   delete carries the old UID as a precondition and the API server answers 409.
3. A pod the pod runner plays (annotation c4.dev/runner=process) is not the finalizer's to end.
"""
import os
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "podrunner"))
import podfinalizer  # noqa: E402
from checks import check, summary, wait_for  # noqa: E402
from kubernetes import client, config  # noqa: E402



def main():
    d = os.environ["C4_TESTENV_DIR"]
    config.load_kube_config(config_file=os.path.join(d, "kubeconfig"))
    v1 = client.CoreV1Api()
    ns = "podfin-" + uuid.uuid4().hex[:6]
    v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))

    def manifest(annotations=None):
        return client.V1Pod(
            metadata=client.V1ObjectMeta(name="p", annotations=annotations),
            spec=client.V1PodSpec(node_name="node-0", termination_grace_period_seconds=30,
                                  containers=[client.V1Container(name="c", image="busybox")]))

    def get():
        try:
            return v1.read_namespaced_pod("p", ns)
        except client.ApiException as e:
            if e.status == 404:
                return None
            raise

    try:
        old = v1.create_namespaced_pod(ns, manifest())
        check(wait_for(lambda: (get() or old).status.phase == "Running", 30),
              "KWOK runs the pod (phase Running)")
        t0 = time.monotonic()
        stale = v1.delete_namespaced_pod("p", ns)
        check(isinstance(stale, client.V1Pod) and stale.metadata.deletion_timestamp is not None,
              "a graceful delete leaves the pod terminating (deletionTimestamp set)")
        check(wait_for(lambda: get() is None, 10),
              f"the finalizer ends the deletion ({time.monotonic() - t0:.1f} s of a 30 s grace)")

        new = v1.create_namespaced_pod(ns, manifest())
        check(new.metadata.uid != old.metadata.uid, "the new pod of the same name has a new UID")
        what = podfinalizer.finish(v1, stale)
        check(what == "replaced", f"the stale event's final delete is refused ({what})")
        time.sleep(1)
        now = get()
        check(now is not None and now.metadata.uid == new.metadata.uid
              and now.metadata.deletion_timestamp is None,
              "the new pod is still there, not terminating")

        v1.delete_namespaced_pod("p", ns, grace_period_seconds=0)
        check(wait_for(lambda: get() is None, 10), "the new pod deleted")
        runner_pod = v1.create_namespaced_pod(ns, manifest({"c4.dev/runner": "process"}))
        v1.delete_namespaced_pod("p", ns)
        time.sleep(2)
        left = get()
        check(left is not None and left.metadata.uid == runner_pod.metadata.uid,
              "a pod runner pod is left to the pod runner (still terminating after 2 s)")
        check(not podfinalizer.needs_final_delete(left), "needs_final_delete says no for it")
    finally:
        v1.delete_namespace(ns, grace_period_seconds=0)
        try:
            v1.delete_namespaced_pod("p", ns, grace_period_seconds=0)
        except client.ApiException:
            pass
    return summary("PASS")


if __name__ == "__main__":
    sys.exit(main())
