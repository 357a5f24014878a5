#!/usr/bin/env python3
"""C4 pod finalizer: completes the deletion of pods that KWOK plays, as a kubelet does.

A pod deleted with a grace period keeps existing (deletionTimestamp set) until the kubelet on its
node has stopped it and deletes it for good. The kubelet sends that last delete with the pod's
UID as a precondition, so it can never remove a newer pod that took the same name in between.
KWOK v0.8.0's `pod-delete` stage deletes by name only: when a delete of an old pod is still
queued in KWOK (a second watch event, a retry) after a controller has created a pod of the same
name — exactly what an operator restarting a job with stable pod names does — KWOK deletes the
new pod. The harness therefore leaves out that stage, and this process does the job instead:
for every pod bound to a node that has a deletionTimestamp and is not played by the pod runner
(annotation c4.dev/runner=process, which finishes its own pods' deletions), it deletes the pod
with grace period 0 and the precondition uid=<that pod's uid>. A 409 (another pod now has the
name) or 404 (already gone) is the expected answer to a stale event and is not an error.

  podfinalizer.py --dir DIR        (started by `testenv.sh up`)
"""
import argparse
import datetime
import os
import signal
import sys
import time

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

RUNNER_ANNOTATION = "c4.dev/runner"


def log(msg, **kv):
    ts = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    extra = " ".join(f"{k}={v}" for k, v in kv.items())
    print(f"{ts} podfinalizer: {msg} {extra}".rstrip(), flush=True)


def needs_final_delete(pod):
    """A pod the harness's 'kubelet' must finish deleting."""
    ann = pod.metadata.annotations or {}
    return (pod.metadata.deletion_timestamp is not None and bool(pod.spec.node_name)
            and RUNNER_ANNOTATION not in ann)


def finish(v1, pod):
    """Deletes `pod` for good unless its name now belongs to another pod. Returns what happened:
    'deleted', 'gone' (404) or 'replaced' (409: the UID precondition failed)."""
    try:
        v1.delete_namespaced_pod(
            pod.metadata.name, pod.metadata.namespace,
            body=client.V1DeleteOptions(grace_period_seconds=0,
                                        preconditions=client.V1Preconditions(uid=pod.metadata.uid)))
        return "deleted"
    except ApiException as e:
        if e.status == 404:
            return "gone"
        if e.status == 409:
            return "replaced"
        raise


class Finalizer:
    def __init__(self, d):
        self.dir = os.path.abspath(d)
        config.load_kube_config(config_file=os.path.join(self.dir, "kwok.kubeconfig"))
        self.v1 = client.CoreV1Api()
        self.stopping = False

    def handle(self, kind, pod):
        if kind == "DELETED" or not needs_final_delete(pod):
            return
        try:
            what = finish(self.v1, pod)
        except ApiException as e:
            log("final delete failed", pod=f"{pod.metadata.namespace}/{pod.metadata.name}",
                uid=pod.metadata.uid, status=e.status)
            return
        if what == "deleted":
            log("deleted", pod=f"{pod.metadata.namespace}/{pod.metadata.name}",
                uid=pod.metadata.uid)

    def run(self):
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
        signal.signal(signal.SIGINT, lambda *_: os._exit(0))
        first = True
        while True:
            try:
                lst = self.v1.list_pod_for_all_namespaces()
                for p in lst.items:
                    self.handle("ADDED", p)
                if first:
                    with open(os.path.join(self.dir, "podfinalizer.ready"), "w") as f:
                        f.write(str(os.getpid()))
                    log("ready", pods=len(lst.items))
                    first = False
                w = watch.Watch()
                for ev in w.stream(self.v1.list_pod_for_all_namespaces,
                                   resource_version=lst.metadata.resource_version,
                                   timeout_seconds=60):
                    self.handle(ev["type"], ev["object"])
            except Exception as e:  # noqa: BLE001 - relist after any watch failure
                log("watch failed; relisting", error=e)
                time.sleep(0.5)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", required=True)
    a = p.parse_args()
    Finalizer(a.dir).run()


if __name__ == "__main__":
    sys.exit(main())
