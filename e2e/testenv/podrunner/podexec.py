#!/usr/bin/env python3
"""Last step before a pod's container process: runs inside the pod's network namespace (via
`ip netns exec`, which also gives it a private mount namespace) or under `unshare --mount`.
Bind-mounts the pod's volumes at their mountPaths and its hosts file over /etc/hosts (root only),
then execs the container command with the container environment, under `setpriv` (util-linux) when
the container's securityContext asks for less privilege: its uid, gid and groups, its capability
bounding set (inheritable and ambient sets empty, so a root process has exactly that set and a
non-root one none) and no_new_privs. Standard library only.

  podexec.py <spec.json>
spec: {"argv": [...], "env": {...}, "workdir": str|null, "mounts": [{"src","dst","readOnly"}],
       "hosts": path|null,
       "privileges": null|{"uid", "gid", "groups": [gid...], "bounding": [cap...], "noNewPrivs"}}
"""
import ctypes
import json
import os
import shutil
import sys

import hostpaths

MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_void_p]


def mount_bind(src, dst, read_only):
    if libc.mount(src.encode(), dst.encode(), None, MS_BIND | MS_REC, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bind mount {src} -> {dst}: {os.strerror(err)}")
    if read_only:
        libc.mount(None, dst.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)


def ensure_target(path, is_file, record):
    """Creates a missing mount point, passing what it created to `record` (hostpaths: the last
    runner on the machine to stop removes them)."""
    missing = []
    p = os.path.dirname(path) if is_file else path
    while p and p != "/" and not os.path.exists(p):
        missing.append(p)
        p = os.path.dirname(p)
    # Pods on several emulated nodes start at once and share the host's file system, so another
    # pod may create the same mount point between the check and the mkdir: that one records it.
    for d in reversed(missing):
        try:
            os.mkdir(d)
        except FileExistsError:
            continue
        record(d)
    if is_file:
        try:
            with open(path, "x"):
                pass
        except FileExistsError:
            return
        record(path)


def setpriv_argv(priv):
    """The setpriv command line that drops to `priv` (podrunner.privileges) and execs."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise OSError("setpriv (util-linux) not found: cannot apply the securityContext")
    caps = ",".join(["-all"] + ["+" + c for c in priv["bounding"]])
    argv = [setpriv, f"--bounding-set={caps}", "--inh-caps=-all", "--ambient-caps=-all",
            f"--regid={priv['gid']}", f"--reuid={priv['uid']}"]
    if priv["groups"]:
        argv.append("--groups=" + ",".join(str(g) for g in priv["groups"]))
    else:
        argv.append("--clear-groups")
    if priv["noNewPrivs"]:
        argv.append("--no-new-privs")
    return argv + ["--"]


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    if os.geteuid() == 0:
        for m in spec["mounts"]:
            is_file = os.path.isfile(m["src"])
            ensure_target(m["dst"], is_file, hostpaths.record)
            mount_bind(m["src"], m["dst"], m.get("readOnly", False))
        if spec.get("hosts"):
            mount_bind(spec["hosts"], "/etc/hosts", False)
    if spec.get("workdir"):
        os.makedirs(spec["workdir"], exist_ok=True)
        os.chdir(spec["workdir"])
    argv = spec["argv"]
    if spec.get("privileges"):
        argv = setpriv_argv(spec["privileges"]) + argv
    try:
        os.execvpe(argv[0], argv, spec["env"])
    except OSError as e:
        print(f"podexec: cannot run {argv[0]!r}: {e}", file=sys.stderr)
        sys.exit(127)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 - any failure becomes a container start error
        print(f"podexec: {e}", file=sys.stderr)
        sys.exit(128)
