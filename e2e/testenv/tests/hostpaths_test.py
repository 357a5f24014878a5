#!/usr/bin/env python3
"""The pod runners' mount points on the host outlive every runner but the last (hostpaths.py).

1. Two runners hold the machine's users lock; the first to leave removes nothing, the last removes
   the recorded empty paths (deepest first), never a non-empty folder or a mount point.
2. Root only (else skipped, said so): why. A pod of another cluster has its token folder
   bind-mounted on a recorded mount point inside its own mount namespace.
   - Control: removing the mount point from the host (what each runner used to do when it stopped)
     detaches that mount, and the pod no longer finds its token. This failed e2e.c4d_freeze on
     2026-12-08: e2e.report_pipeline's cluster stopped beside it.
   - With hostpaths: the first runner leaves, the pod still reads its token; the last one leaves
     after the pod ended, and the mount point is gone.
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "podrunner"))
import hostpaths  # noqa: E402
from checks import check, summary, wait_for  # noqa: E402



def registry_and_lock(work):
    os.environ[hostpaths.STATE_DIR_ENV] = os.path.join(work, "state")
    deep = os.path.join(work, "host", "var", "run", "secrets", "c4")
    os.makedirs(deep)
    kept = os.path.join(work, "host", "etc", "c4")  # a pod's file went in: not the runners'
    os.makedirs(kept)
    with open(os.path.join(kept, "written"), "w") as f:
        f.write("x")
    a = hostpaths.Users()
    b = hostpaths.Users()
    for p in (os.path.join(work, "host", "var", "run", "secrets"), deep, kept):
        hostpaths.record(p)
    check(a.leave() is False, "the first runner to leave is not the last")
    check(os.path.isdir(deep), "its mount points stay while another runner runs")
    check(b.leave() is True, "the last runner to leave knows it")
    check(not os.path.exists(os.path.join(work, "host", "var", "run", "secrets")),
          "the last runner removes the recorded empty folders, deepest first")
    check(os.path.isdir(kept), "a folder with something in it stays")
    check(not os.path.exists(hostpaths.registry_path()), "the registry is emptied")
    c = hostpaths.Users()
    check(c.leave() is True, "a runner alone is the last")


def pod_with_token(work, mount_point):
    """A process in a mount namespace of its own with a token folder bind-mounted at
    `mount_point`; it reads the token when told to and prints it (or the error)."""
    src = os.path.join(work, "volumes", "token")
    os.makedirs(src, exist_ok=True)
    with open(os.path.join(src, "token"), "w") as f:
        f.write("secret")
    ready, go = os.path.join(work, "ready"), os.path.join(work, "go")
    for p in (ready, go):
        if os.path.exists(p):
            os.remove(p)
    script = (f'mount --bind "{src}" "{mount_point}" && touch "{ready}" && '
              f'while [ ! -e "{go}" ]; do sleep 0.02; done; cat "{mount_point}/token" 2>&1')
    proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                            stdout=subprocess.PIPE, text=True)
    if not wait_for(lambda: os.path.exists(ready), 10, every=0.02):
        proc.kill()
        raise RuntimeError("the pod's mount did not come up")
    return proc, go


def reads_after(work, mount_point, between):
    proc, go = pod_with_token(work, mount_point)
    between()
    open(go, "w").close()
    out, _ = proc.communicate(timeout=10)
    return out.strip()


def mounts_survive(work):
    os.environ[hostpaths.STATE_DIR_ENV] = os.path.join(work, "state2")
    point = os.path.join(work, "host2", "var", "run", "secrets", "c4")

    os.makedirs(point)
    got = reads_after(work, point, lambda: os.rmdir(point))
    check(got != "secret",
          f"control: a mount point removed on the host loses the pod its mount (read: {got!r})")

    os.makedirs(point, exist_ok=True)
    first, last = hostpaths.Users(), hostpaths.Users()
    hostpaths.record(point)
    got = reads_after(work, point, first.leave)
    check(got == "secret", f"the pod reads its token after another runner left (read: {got!r})")
    check(last.leave() is True and not os.path.exists(point),
          "the last runner removes the mount point once the pod has ended")


def main():
    work = tempfile.mkdtemp(prefix="c4-hostpaths-")
    try:
        registry_and_lock(work)
        if os.geteuid() == 0 and shutil.which("unshare"):
            mounts_survive(work)
        else:
            print("skip the mount namespace part: needs root and unshare", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
