#!/usr/bin/env python3
"""C4 pod runner: plays the kubelet (container runtime) for pods bound to the harness's KWOK
nodes that carry the annotation `c4.dev/runner: process`.

For each such pod it materialises the volumes, starts every container's command as a local
process (inside the node's network namespace when the fabric is up), reports pod status
(Running with podIP, then Succeeded/Failed with exit codes), keeps configMap/secret/token files
up to date, writes /etc/hosts entries, and stops the processes on deletion (SIGTERM, grace
period, SIGKILL). See e2e/README.md ("Pods as processes") for the details and the image table.

  podrunner.py --dir DIR        (started by `testenv.sh up --pods`)
"""
import argparse
import base64
import datetime
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import ctypes

import hostpaths
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

ANNOTATION = "c4.dev/runner"
ANNOTATION_VALUE = "process"
HERE = os.path.dirname(os.path.abspath(__file__))
PODEXEC = os.path.join(HERE, "podexec.py")
IMAGE_TABLE = os.path.join(HERE, "images.tsv")
REFRESH_SECONDS = 1.0
# The kubelet's safe sysctls (pkg/kubelet/sysctl/safe_sysctls.go) that the runner can apply: the
# network-namespaced ones.
SAFE_SYSCTLS = {
    "net.ipv4.ip_local_port_range", "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start",
}
KUBELET_MIN_GRACE = 2  # seconds: the kubelet never gives a container less (kuberuntime)
CLONE_NEWNET = 0x40000000


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def log(msg, **kv):
    extra = " ".join(f"{k}={v}" for k, v in kv.items())
    print(f"{now_iso()} podrunner: {msg} {extra}".rstrip(), flush=True)


def read_env_file(path):
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                k, v = line.split("=", 1)
                out[k] = v.strip('"')
    return out


def load_image_table():
    """images.tsv: image -> (ENTRYPOINT argv, CMD argv, [(image path, host path)]); see the
    file's header."""
    repo = os.environ.get("C4_REPO", os.path.abspath(os.path.join(HERE, "../../..")))
    build = os.environ.get("C4_BUILD_DIR", os.path.join(repo, "build"))
    table = {}
    with open(IMAGE_TABLE) as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.rstrip("\n").split("\t")

            def argv(col):
                col = col.replace("${C4_REPO}", repo).replace("${C4_BUILD_DIR}", build)
                return [] if col == "-" else col.split()
            files = []
            col = parts[3] if len(parts) > 3 else "-"
            if col != "-":
                for item in col.split(","):
                    dst, sep, src = item.partition("=")
                    if not sep or not dst.startswith("/"):
                        raise ValueError(f"{IMAGE_TABLE}: {parts[0]}: bad file {item!r} "
                                         "(want /image/path=host path)")
                    files.append((dst, argv(src)[0]))
            table[parts[0]] = (argv(parts[1]), argv(parts[2]), files)
    return table


def image_repo(image):
    """'docker.io/library/busybox:1.36@sha256:..' -> 'busybox'; 'c4/worker:v1' -> 'c4/worker'."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    for prefix in ("docker.io/library/", "docker.io/", "library/"):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name


def same_ports(svc, pod):
    """Whether every port of the Service reaches the same port number on the pod (targetPort
    unset, equal, or a named containerPort with that number): without kube-proxy nothing
    translates ports."""
    named = {p.name: p.container_port for c in pod.spec.containers for p in (c.ports or [])
             if p.name}
    for p in svc.spec.ports or []:
        t = p.target_port
        if t is None:
            continue
        if isinstance(t, str) and not t.isdigit():
            t = named.get(t)
        if t is None or int(t) != p.port:
            return False
    return True


def expand(value, env):
    """Kubernetes $(VAR) expansion: $$ escapes, unknown references stay as written."""
    def repl(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", repl, value)


def write_if_changed(path, data, mode=0o644, owner=(-1, -1)):
    """Atomic replace (files inside a directory volume see it at once); `owner`: (uid, gid), -1
    keeps the runner's."""
    try:
        with open(path, "rb") as f:
            if f.read() == data:
                return False
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"  # no two writers share one
    with open(tmp, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)
    if owner != (-1, -1):
        os.chown(tmp, *owner)
    os.replace(tmp, path)
    return True


# The capabilities a container runtime (containerd, CRI-O) gives a container that does not change
# them: securityContext.capabilities drops from and adds to this set.
DEFAULT_CAPS = ["CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
                "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE"]


def cap_name(c):
    """'SYS_PTRACE' or 'CAP_SYS_PTRACE' -> 'sys_ptrace' (setpriv's spelling)."""
    c = c.strip().upper()
    if not re.fullmatch(r"(CAP_)?[A-Z_]+", c):
        raise ValueError(f"securityContext.capabilities: bad capability {c!r}")
    return c[4:].lower() if c.startswith("CAP_") else c.lower()


def privileges(pod_spec, c):
    """What the container's process runs with, from the pod's and the container's
    securityContext, as a runtime applies it: None (the runner's own privileges) when neither sets
    runAsUser, runAsGroup, capabilities or allowPrivilegeEscalation, or the container is
    privileged. Else {"uid", "gid", "groups", "bounding": [cap...], "noNewPrivs", "runAsNonRoot"}:
    the capability bounding set is the runtime's default set minus `drop` (ALL: everything) plus
    `add`; a root process gets exactly that set (effective and permitted), a non-root one none."""
    psc = pod_spec.security_context
    csc = c.security_context
    if csc is not None and csc.privileged:
        return None

    def pick(field):
        v = getattr(csc, field, None) if csc is not None else None
        if v is None and psc is not None:
            v = getattr(psc, field, None)
        return v

    caps = csc.capabilities if csc is not None else None
    ape = csc.allow_privilege_escalation if csc is not None else None
    uid, gid = pick("run_as_user"), pick("run_as_group")
    if caps is None and ape is None and uid is None and gid is None:
        return None
    drop = [cap_name(x) for x in (caps.drop or [])] if caps else []
    add = [cap_name(x) for x in (caps.add or [])] if caps else []
    bounding = [] if "all" in drop else [x.lower() for x in DEFAULT_CAPS if x.lower() not in drop]
    bounding += [x for x in add if x != "all" and x not in bounding]
    groups = []
    if psc is not None:
        groups = [g for g in ([psc.fs_group] + list(psc.supplemental_groups or []))
                  if g is not None]
    return {"uid": uid if uid is not None else 0, "gid": gid if gid is not None else 0,
            "groups": groups, "bounding": bounding,
            # A process with no_new_privs set: what allowPrivilegeEscalation=false does.
            "noNewPrivs": ape is False,
            "runAsNonRoot": bool(pick("run_as_non_root"))}


class NetnsApiProxy:
    """Listens on 127.0.0.1:<port> inside a node's network namespace and forwards every
    connection to the same port on the host's loopback: the API server's, so in-cluster
    configuration works, and each of the test's host ports (testenv.sh up --host-ports)."""

    def __init__(self, netns, port):
        self.netns, self.port = netns, port
        libc = ctypes.CDLL(None, use_errno=True)
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
        try:
            if libc.setns(target, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns {netns}")
            try:
                self.sock = socket.socket()
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                self.sock.bind(("127.0.0.1", port))
                self.sock.listen(128)
            finally:
                if libc.setns(own, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns back")
        finally:
            os.close(own)
            os.close(target)
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def accept_loop(self):
        while True:
            conn, _ = self.sock.accept()
            try:
                up = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                up.settimeout(None)
            except OSError:
                conn.close()
                continue
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self.pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def pipe(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class Container:
    def __init__(self, spec, init=False):
        self.spec = spec
        self.name = spec.name
        self.init = init
        self.proc = None
        self.restart_count = 0
        self.started_at = None
        self.finished_at = None
        self.exit_code = None
        self.reason = None
        self.message = None

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def status(self, image):
        st = {"name": self.name, "image": image, "imageID": "", "restartCount": self.restart_count,
              "ready": False, "started": False}
        if self.running():
            st["containerID"] = f"c4process://{self.proc.pid}"
            st["state"] = {"running": {"startedAt": self.started_at}}
            st["ready"] = not self.init
            st["started"] = True
        elif self.exit_code is not None:
            st["state"] = {"terminated": {
                "exitCode": self.exit_code, "reason": self.reason or (
                    "Completed" if self.exit_code == 0 else "Error"),
                "startedAt": self.started_at, "finishedAt": self.finished_at,
                **({"message": self.message} if self.message else {})}}
        else:
            st["state"] = {"waiting": {"reason": self.reason or "ContainerCreating",
                                       **({"message": self.message} if self.message else {})}}
        return st


def pick_cgroup_root(prefix):
    """The folder under which pods get kubelet-style cgroups (cgroupfs driver layout:
    <root>/kubepods/besteffort/pod<uid>/<container>), so a process's /proc/<pid>/cgroup names its
    pod the way it does on a real node. Tried in order: a cgroup v2 mount at /sys/fs/cgroup, the
    v1 `pids` hierarchy, the hybrid v2 mount at /sys/fs/cgroup/unified. None writable (not root,
    read-only cgroupfs): None, and pods run without a cgroup of their own."""
    if os.geteuid() != 0:
        return None
    candidates = []
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        candidates.append("/sys/fs/cgroup")
    candidates += ["/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified"]
    for base in candidates:
        if not os.path.exists(os.path.join(base, "cgroup.procs")):
            continue
        root = os.path.join(base, f"{prefix}-testenv")
        try:
            os.makedirs(os.path.join(root, "kubepods", "besteffort"), exist_ok=True)
            return root
        except OSError:
            continue
    return None


def remove_cgroup_tree(path):
    """Removes an (emptied) cgroup folder tree bottom-up; cgroupfs folders only rmdir."""
    if not path or not os.path.isdir(path):
        return
    for d, _, _ in sorted(os.walk(path), key=lambda t: len(t[0]), reverse=True):
        try:
            os.rmdir(d)
        except OSError:
            pass


class PodWorker:
    """One pod's lifecycle, in its own thread."""

    def __init__(self, runner, pod):
        self.r = runner
        self.pod = pod
        self.ns = pod.metadata.namespace
        self.name = pod.metadata.name
        self.uid = pod.metadata.uid
        self.node = pod.spec.node_name
        self.ip = runner.node_ip(self.node)
        self.dir = os.path.join(runner.dir, "pods", self.ns, self.name)
        self.lock = threading.Lock()
        self.deleting = threading.Event()
        self.force_deleted = False
        self.done = threading.Event()
        self.init_containers = [Container(c, True) for c in (pod.spec.init_containers or [])]
        self.containers = [Container(c) for c in pod.spec.containers]
        self.phase = "Pending"
        self.start_time = now_iso()
        self.volumes = {}          # name -> host path
        # The lifecycle thread materialises the volumes while the runner's refresher may be
        # refreshing them: one at a time, and no refresh before they first exist.
        self.volume_lock = threading.Lock()
        self.volumes_ready = False
        self.token_times = {}      # file path -> (issued monotonic, expiration seconds)
        self.hosts_path = os.path.join(self.dir, "etc-hosts")
        self.thread = threading.Thread(target=self.run, name=f"pod-{self.ns}-{self.name}",
                                       daemon=True)

    # ---- volumes --------------------------------------------------------------------------
    def prepare_dir(self):
        if os.path.isdir(self.dir):
            try:
                with open(os.path.join(self.dir, "uid")) as f:
                    old = f.read().strip()
            except OSError:
                old = "unknown"
            if old != self.uid:
                shutil.move(self.dir, f"{self.dir}.{old[:8]}.{int(time.time())}")
        os.makedirs(os.path.join(self.dir, "volumes"), exist_ok=True)
        with open(os.path.join(self.dir, "uid"), "w") as f:
            f.write(self.uid)

    def apply_sysctls(self):
        """securityContext.sysctls, as the kubelet applies them: only the safe set (others fail
        the pod, as without --allowed-unsafe-sysctls), written in the pod's network namespace
        (here its node's). Without the fabric the pod shares the host's namespace, which a pod's
        sysctl must never change: the runner then logs it and applies nothing."""
        psc = self.pod.spec.security_context
        sysctls = list((psc.sysctls if psc is not None else None) or [])
        for sc in sysctls:
            if sc.name not in SAFE_SYSCTLS:
                raise ValueError(f"sysctl {sc.name} is not one of the kubelet's network-namespaced "
                                 f"safe sysctls, the only ones the runner applies (SysctlForbidden)")
        if not sysctls:
            return
        netns = self.r.netns_of(self.node)
        if netns is None or os.geteuid() != 0:
            log("sysctls not applied: the pod shares the host's network namespace",
                pod=f"{self.ns}/{self.name}")
            return
        for sc in sysctls:
            path = "/proc/sys/" + sc.name.replace(".", "/")
            subprocess.run(["ip", "netns", "exec", netns, "sh", "-c", 'printf %s "$1" > "$0"',
                            path, sc.value or ""], check=True, capture_output=True)
            log("sysctl", pod=f"{self.ns}/{self.name}", name=sc.name, value=sc.value)

    def fs_user(self):
        """The kubelet's FsUser of the pod: the runAsUser every container shares, else None."""
        psc = self.pod.spec.security_context
        uids = set()
        for c in (self.pod.spec.init_containers or []) + list(self.pod.spec.containers):
            uid = c.security_context.run_as_user if c.security_context is not None else None
            if uid is None and psc is not None:
                uid = psc.run_as_user
            if uid is None:
                return None
            uids.add(uid)
        return uids.pop() if len(uids) == 1 else None

    def field_ref(self, path):
        md = self.pod.metadata
        m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if m:
            return ((md.labels if m.group(1) == "labels" else md.annotations) or {}).get(
                m.group(2), "")
        values = {
            "metadata.name": md.name, "metadata.namespace": md.namespace, "metadata.uid": md.uid,
            "spec.nodeName": self.node, "spec.serviceAccountName":
                self.pod.spec.service_account_name or "default",
            "status.podIP": self.ip, "status.podIPs": self.ip, "status.hostIP": self.ip,
            "status.hostIPs": self.ip,
        }
        if path == "metadata.labels":
            return "\n".join(f'{k}="{v}"' for k, v in sorted((md.labels or {}).items()))
        if path == "metadata.annotations":
            return "\n".join(f'{k}="{v}"' for k, v in sorted((md.annotations or {}).items()))
        if path not in values:
            raise ValueError(f"unsupported fieldRef {path}")
        return values[path] or ""

    def resource_ref(self, ref, container_name=None):
        cname = ref.container_name or container_name
        c = next((c for c in self.pod.spec.containers if c.name == cname), None)
        res = (c.resources if c else None)
        kind, _, rname = ref.resource.partition(".")
        amounts = ((res.limits if kind == "limits" else res.requests) if res else None) or {}
        val = amounts.get(rname)
        if val is None:
            return "64" if rname == "cpu" else str(512 * 1024 ** 3)
        if rname == "cpu":
            q = float(val[:-1]) / 1000 if val.endswith("m") else float(val)
            return str(max(1, int(-(-q // 1))))
        return str(val)

    def key_items(self, data, items):
        """data: {key: bytes}; items: k8s KeyToPath list or None -> {relative path: bytes}."""
        if not items:
            return dict(data)
        out = {}
        for it in items:
            if it.key in data:
                out[it.path] = data[it.key]
        return out

    def fetch_data(self, kind, name, optional):
        try:
            if kind == "configMap":
                obj = self.r.v1.read_namespaced_config_map(name, self.ns)
                data = {k: v.encode() for k, v in (obj.data or {}).items()}
                data.update({k: base64.b64decode(v) for k, v in (obj.binary_data or {}).items()})
            else:
                obj = self.r.v1.read_namespaced_secret(name, self.ns)
                data = {k: base64.b64decode(v) for k, v in (obj.data or {}).items()}
            return data
        except ApiException as e:
            if e.status == 404 and optional:
                return {}
            raise

    def token(self, src, path):
        issued = self.token_times.get(path)
        exp = src.expiration_seconds or 3607
        if issued and time.monotonic() - issued[0] < 0.8 * issued[1] and os.path.exists(path):
            return None
        spec = {"expirationSeconds": exp,
                "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": self.name,
                                   "uid": self.uid}}
        if src.audience:
            spec["audiences"] = [src.audience]
        sa = self.pod.spec.service_account_name or "default"
        tr = self.r.v1.create_namespaced_service_account_token(sa, self.ns, {"spec": spec})
        self.token_times[path] = (time.monotonic(), exp)
        return tr.status.token.encode()

    def render_volume(self, vol, first):
        """(Re)writes the files of a configMap/secret/projected/downwardAPI volume."""
        root = self.volumes[vol.name]
        files = {}  # relative path -> (bytes, mode)
        mode = 0o644
        # Service account tokens as the kubelet writes them: owned by the pods' one runAsUser
        # (FsUser: every container, init containers included, runs as the same uid), else
        # readable by the pod's fsGroup, else (the runner's own pods) 0600.
        psc = self.pod.spec.security_context
        fs_group = psc.fs_group if psc is not None else None
        fs_user = self.fs_user()
        if os.geteuid() != 0:
            fs_user = fs_group = None
        token_owner = (fs_user, -1) if fs_user is not None else \
            (-1, fs_group) if fs_group is not None else (-1, -1)

        def add(items, m):
            for p, d in items.items():
                files[p] = (d, m)

        if vol.config_map:
            mode = vol.config_map.default_mode or mode
            add(self.key_items(self.fetch_data("configMap", vol.config_map.name,
                                               vol.config_map.optional), vol.config_map.items),
                mode)
        elif vol.secret:
            mode = vol.secret.default_mode or mode
            add(self.key_items(self.fetch_data("secret", vol.secret.secret_name,
                                               vol.secret.optional), vol.secret.items), mode)
        elif vol.downward_api:
            mode = vol.downward_api.default_mode or mode
            for it in vol.downward_api.items or []:
                v = self.field_ref(it.field_ref.field_path) if it.field_ref else \
                    self.resource_ref(it.resource_field_ref)
                files[it.path] = (v.encode(), mode)
        elif vol.projected:
            mode = vol.projected.default_mode or mode
            for src in vol.projected.sources or []:
                if src.service_account_token:
                    path = os.path.join(root, src.service_account_token.path)
                    tok = self.token(src.service_account_token, path)
                    if tok is not None:
                        m = mode
                        if mode == 0o644:
                            m = 0o640 if fs_user is None and fs_group is not None else 0o600
                        files[src.service_account_token.path] = (tok, m, token_owner)
                elif src.config_map:
                    add(self.key_items(self.fetch_data("configMap", src.config_map.name,
                                                       src.config_map.optional),
                                       src.config_map.items), mode)
                elif src.secret:
                    add(self.key_items(self.fetch_data("secret", src.secret.name,
                                                       src.secret.optional),
                                       src.secret.items), mode)
                elif src.downward_api:
                    for it in src.downward_api.items or []:
                        v = self.field_ref(it.field_ref.field_path) if it.field_ref else \
                            self.resource_ref(it.resource_field_ref)
                        files[it.path] = (v.encode(), mode)
        changed = False
        for rel, (data, m, *owner) in files.items():
            changed |= write_if_changed(os.path.join(root, rel), data, m, *owner)
        if changed and not first:
            log("volume updated", pod=f"{self.ns}/{self.name}", volume=vol.name)

    def materialise_volumes(self):
        with self.volume_lock:
            self._materialise_volumes()
            self.volumes_ready = True

    def _materialise_volumes(self):
        for vol in self.pod.spec.volumes or []:
            if vol.host_path and os.path.normpath(vol.host_path.path) == "/sys":
                # The node's sysfs is the one its containers see: `ip netns exec` mounts the
                # node's network namespace's sysfs over /sys (its NICs), and podexec binds it where
                # the container asks (the node plugin reads the node's NICs there, as on a real
                # node). Without a fabric the pods run in the host's namespaces: the host's /sys.
                path = "/sys"
            elif vol.host_path:
                path = os.path.join(self.r.dir, "nodes", self.node, "root",
                                    vol.host_path.path.lstrip("/"))
                if vol.host_path.type in ("File", "FileOrCreate"):
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    open(path, "a").close()
                else:
                    os.makedirs(path, exist_ok=True)
            else:
                path = os.path.join(self.dir, "volumes", vol.name)
                os.makedirs(path, exist_ok=True)
            self.volumes[vol.name] = path
        for vol in self.pod.spec.volumes or []:
            if vol.config_map or vol.secret or vol.projected or vol.downward_api:
                self.render_volume(vol, True)

    def refresh(self):
        """Called by the runner's refresher: keeps configMap/secret/token files current."""
        if self.done.is_set() or self.deleting.is_set():
            return
        with self.volume_lock:
            if not self.volumes_ready:
                return
            for vol in self.pod.spec.volumes or []:
                if vol.config_map or vol.secret or vol.projected:
                    try:
                        self.render_volume(vol, False)
                    except Exception as e:  # noqa: BLE001 - keep the old files
                        log("volume refresh failed", pod=f"{self.ns}/{self.name}",
                            volume=vol.name, error=e)

    # ---- processes ------------------------------------------------------------------------
    def container_env(self, c):
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "HOSTNAME": self.pod.spec.hostname or self.name,
               "HOME": "/root" if os.geteuid() == 0 else os.environ.get("HOME", "/tmp"),
               "KUBERNETES_SERVICE_HOST": "127.0.0.1",
               "KUBERNETES_SERVICE_PORT": str(self.r.api_port),
               "KUBERNETES_SERVICE_PORT_HTTPS": str(self.r.api_port),
               "KUBERNETES_PORT": f"tcp://127.0.0.1:{self.r.api_port}",
               "C4_TESTENV_DIR": self.r.dir,
               "C4_POD_DIR": self.dir}
        for name, path in self.volumes.items():
            env["C4_VOLUME_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()] = path
        for ef in c.env_from or []:
            if ef.config_map_ref:
                data = self.fetch_data("configMap", ef.config_map_ref.name,
                                       ef.config_map_ref.optional)
            elif ef.secret_ref:
                data = self.fetch_data("secret", ef.secret_ref.name, ef.secret_ref.optional)
            else:
                continue
            for k, v in data.items():
                env[(ef.prefix or "") + k] = v.decode(errors="replace")
        for e in c.env or []:
            if e.value_from is None:
                env[e.name] = expand(e.value or "", env)
                continue
            vf = e.value_from
            if vf.field_ref:
                env[e.name] = self.field_ref(vf.field_ref.field_path)
            elif vf.resource_field_ref:
                env[e.name] = self.resource_ref(vf.resource_field_ref, c.name)
            elif vf.config_map_key_ref:
                ref = vf.config_map_key_ref
                data = self.fetch_data("configMap", ref.name, ref.optional)
                if ref.key in data:
                    env[e.name] = data[ref.key].decode(errors="replace")
                elif not ref.optional:
                    raise ValueError(f"configMap {ref.name} has no key {ref.key}")
            elif vf.secret_key_ref:
                ref = vf.secret_key_ref
                data = self.fetch_data("secret", ref.name, ref.optional)
                if ref.key in data:
                    env[e.name] = data[ref.key].decode(errors="replace")
                elif not ref.optional:
                    raise ValueError(f"secret {ref.name} has no key {ref.key}")
        return env

    def start(self, c):
        image = c.spec.image or ""
        env = self.container_env(c.spec)
        command = list(c.spec.command or [])
        args = list(c.spec.args or [])
        known = self.r.images.get(image_repo(image))
        if not command:
            if known is None:
                raise ValueError(f"image {image!r} has no command and is not in the runner's "
                                 f"image table ({IMAGE_TABLE})")
            command = known[0]
            args = args or known[1]
        argv = [expand(a, env) for a in command + args]
        if not argv:
            raise ValueError(f"container {c.name} has nothing to run")
        mounts = []
        # Files of the image (images.tsv): the host's build outputs, read-only at the paths the
        # image's Dockerfile puts them (e.g. the NCCL plugin the node plugin installs).
        for dst, src in (known[2] if known else []):
            if not os.path.isfile(src):
                raise ValueError(f"image {image!r}: {src} (for {dst}) does not exist; build it")
            mounts.append({"src": src, "dst": dst, "readOnly": True})
        for vm in c.spec.volume_mounts or []:
            src = self.volumes.get(vm.name)
            if src is None:
                raise ValueError(f"volumeMount {vm.name} has no volume")
            if vm.sub_path:
                src = os.path.join(src, vm.sub_path)
                if not os.path.exists(src):
                    os.makedirs(src, exist_ok=True)
            mounts.append({"src": src, "dst": vm.mount_path, "readOnly": bool(vm.read_only)})
        priv = privileges(self.pod.spec, c.spec)
        if priv is not None and os.geteuid() != 0:
            priv = None  # the runner itself has no privilege to give up
        if priv is not None and priv["runAsNonRoot"] and priv["uid"] == 0:
            raise ValueError(f"container {c.name}: runAsNonRoot and the user is root")
        cgroup = None
        if self.r.cgroup_root:
            cgroup = os.path.join(self.r.cgroup_root, "kubepods", "besteffort",
                                  f"pod{self.uid}", c.name)
            try:
                os.makedirs(cgroup, exist_ok=True)
            except OSError as e:
                log("no cgroup for container", pod=f"{self.ns}/{self.name}", error=e)
                cgroup = None
        spec_path = os.path.join(self.dir, f"{c.name}.exec.json")
        with open(spec_path, "w") as f:
            json.dump({"argv": argv, "env": env, "workdir": c.spec.working_dir, "mounts": mounts,
                       "privileges": priv,
                       "hosts": self.hosts_path if os.geteuid() == 0 else None}, f)
        prefix = []
        netns = self.r.netns_of(self.node)
        if netns:
            prefix = ["ip", "netns", "exec", netns]
        elif os.geteuid() == 0:
            prefix = ["unshare", "--mount", "--propagation", "private"]
        if cgroup:
            # A shell moves itself into the pod's cgroup and execs the rest, so the container
            # process is in it from its first instruction (`ip netns exec` remounts /sys, so this
            # cannot happen inside the namespace).
            prefix = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', cgroup] + prefix
        logf = open(os.path.join(self.dir, f"{c.name}.log"), "ab")
        c.proc = subprocess.Popen(prefix + [sys.executable, PODEXEC, spec_path], stdout=logf,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True, close_fds=True)
        logf.close()
        with open(os.path.join(self.dir, f"{c.name}.pid"), "w") as f:
            f.write(str(c.proc.pid))
        c.started_at, c.exit_code, c.reason, c.message = now_iso(), None, None, None
        log("started", pod=f"{self.ns}/{self.name}", container=c.name, pid=c.proc.pid,
            netns=netns or "-", argv=json.dumps(argv))

    def reap(self, c):
        code = c.proc.returncode
        c.exit_code = code if code >= 0 else 128 - code  # killed by signal N -> 128 + N
        c.finished_at = now_iso()
        if code < 0 and -code == signal.SIGKILL:
            c.reason = "Killed" if not self.deleting.is_set() else "Error"
        log("exited", pod=f"{self.ns}/{self.name}", container=c.name, exit_code=c.exit_code)

    def stop_all(self, grace):
        live = [c for c in self.init_containers + self.containers if c.running()]
        for c in live:
            try:
                os.killpg(c.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(c.running() for c in live):
            time.sleep(0.05)
        for c in live:
            if c.running():
                log("grace period over, SIGKILL", pod=f"{self.ns}/{self.name}", container=c.name)
                try:
                    os.killpg(c.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for c in live:
            c.proc.wait()
            self.reap(c)

    # ---- status ---------------------------------------------------------------------------
    def patch_status(self, message=None, reason=None):
        ready = self.phase == "Running" and all(c.running() for c in self.containers)
        init_done = all(c.exit_code == 0 for c in self.init_containers)
        t = now_iso()

        def cond(kind, ok):
            return {"type": kind, "status": "True" if ok else "False", "lastTransitionTime": t}
        status = {
            "phase": self.phase, "hostIP": self.ip, "hostIPs": [{"ip": self.ip}],
            "podIP": self.ip, "podIPs": [{"ip": self.ip}], "startTime": self.start_time,
            "conditions": [cond("PodScheduled", True), cond("Initialized", init_done),
                           cond("ContainersReady", ready), cond("Ready", ready)],
            "containerStatuses": [c.status(c.spec.image) for c in self.containers],
        }
        if self.init_containers:
            status["initContainerStatuses"] = [c.status(c.spec.image)
                                               for c in self.init_containers]
        if message:
            status["message"] = message
        if reason:
            status["reason"] = reason
        try:
            self.r.v1.patch_namespaced_pod_status(self.name, self.ns, {"status": status})
        except ApiException as e:
            if e.status != 404:
                log("status patch failed", pod=f"{self.ns}/{self.name}", status=e.status)

    def finish_deletion(self):
        if self.force_deleted:
            return
        try:
            self.r.v1.delete_namespaced_pod(
                self.name, self.ns, grace_period_seconds=0,
                body=client.V1DeleteOptions(grace_period_seconds=0,
                                            preconditions=client.V1Preconditions(uid=self.uid)))
        except ApiException as e:
            if e.status not in (404, 409):
                log("final delete failed", pod=f"{self.ns}/{self.name}", status=e.status)

    def grace_seconds(self):
        g = self.pod.metadata.deletion_grace_period_seconds
        if g is None:
            g = self.pod.spec.termination_grace_period_seconds
        return 30 if g is None else g

    # ---- lifecycle --------------------------------------------------------------------------
    def run(self):
        try:
            self.lifecycle()
        except Exception as e:  # noqa: BLE001 - becomes the pod's status
            log("pod failed to start", pod=f"{self.ns}/{self.name}", error=e)
            traceback.print_exc()
            self.stop_all(0)
            self.phase = "Failed"
            for c in self.init_containers + self.containers:
                if c.exit_code is None and not c.running():
                    c.reason, c.message = "CreateContainerError", str(e)
            self.patch_status(message=str(e), reason="CreateContainerError")
            if self.deleting.is_set():
                self.finish_deletion()
        finally:
            if self.r.cgroup_root:
                remove_cgroup_tree(os.path.join(self.r.cgroup_root, "kubepods", "besteffort",
                                                f"pod{self.uid}"))
            self.done.set()

    def lifecycle(self):
        self.prepare_dir()
        self.apply_sysctls()
        self.materialise_volumes()
        self.r.update_hosts(self)
        policy = self.pod.spec.restart_policy or "Always"
        for c in self.init_containers:
            while True:
                if self.deleting.is_set():
                    return self.on_delete()
                self.start(c)
                self.patch_status()
                while c.proc.poll() is None and not self.deleting.is_set():
                    time.sleep(0.05)
                if self.deleting.is_set():
                    return self.on_delete()
                self.reap(c)
                if c.exit_code == 0:
                    break
                if policy == "Never":
                    self.phase = "Failed"
                    self.patch_status()
                    return self.wait_for_delete()
                c.restart_count += 1
                time.sleep(1)
        for c in self.containers:
            self.start(c)
        self.phase = "Running"
        self.patch_status()
        self.r.update_hosts_all()
        while True:
            if self.deleting.is_set():
                return self.on_delete()
            changed = False
            for c in self.containers:
                if c.proc is not None and c.exit_code is None and c.proc.poll() is not None:
                    self.reap(c)
                    changed = True
                    if policy == "Always" or (policy == "OnFailure" and c.exit_code != 0):
                        time.sleep(min(10, 2 ** c.restart_count) * 0.5)
                        c.restart_count += 1
                        self.start(c)
            if all(c.exit_code is not None and not c.running() for c in self.containers):
                failed = any(c.exit_code != 0 for c in self.containers)
                self.phase = "Failed" if failed else "Succeeded"
                self.patch_status()
                log("pod finished", pod=f"{self.ns}/{self.name}", phase=self.phase)
                return self.wait_for_delete()
            if changed:
                self.patch_status()
            time.sleep(0.05)

    def wait_for_delete(self):
        self.deleting.wait()
        self.finish_deletion()

    def on_delete(self):
        # A force delete reaches us as MODIFIED with deletionGracePeriodSeconds=0 (v1.36 bumps the
        # pod's generation first) and then DELETED; whichever we see, the process gets at least
        # the kubelet's minimum grace (minimumGracePeriodInSeconds = 2 in kuberuntime), as on a
        # real node: the old process may outlive its pod object.
        grace = KUBELET_MIN_GRACE if self.force_deleted else max(KUBELET_MIN_GRACE,
                                                                 self.grace_seconds())
        log("deleting", pod=f"{self.ns}/{self.name}", grace=grace)
        self.stop_all(grace)
        if not self.force_deleted:
            if self.phase in ("Running", "Pending"):
                failed = any(c.exit_code not in (0, None) for c in self.containers)
                self.phase = "Failed" if failed else "Succeeded"
            self.patch_status()
        self.finish_deletion()


class Runner:
    def __init__(self, d):
        self.dir = os.path.abspath(d)
        ports = read_env_file(os.path.join(self.dir, "ports.env"))
        self.api_port = int(ports["API_PORT"])
        # Loopback ports of services a test runs on the host (testenv.sh up --host-ports).
        self.host_ports = [int(p) for p in ports.get("HOST_PORT_LIST", "").split()]
        self.nodes = int(ports["NODES"])
        self.leaves = int(ports["LEAVES"])
        self.fabric = os.path.exists(os.path.join(self.dir, "fabric", "plan.env"))
        self.netns_prefix = "c4" + hashlib.sha1(self.dir.encode()).hexdigest()[:6]
        self.cgroup_root = pick_cgroup_root(self.netns_prefix)
        config.load_kube_config(config_file=os.path.join(self.dir, "podrunner.kubeconfig"))
        self.v1 = client.CoreV1Api()
        self.images = load_image_table()
        self.workers = {}   # uid -> PodWorker
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.proxies = []
        self.host_users = None  # hostpaths.Users while running as root

    def node_ip(self, node):
        i = int(node.rsplit("-", 1)[1])
        return f"198.18.{i % self.leaves}.{10 + i // self.leaves}"

    def netns_of(self, node):
        return f"{self.netns_prefix}-{node}" if self.fabric else None

    def ours(self, pod):
        ann = pod.metadata.annotations or {}
        node = pod.spec.node_name or ""
        m = re.fullmatch(r"node-(\d+)", node)
        return ann.get(ANNOTATION) == ANNOTATION_VALUE and m and int(m.group(1)) < self.nodes

    # ---- /etc/hosts ---------------------------------------------------------------------
    def live_workers(self):
        """Workers whose pod the API server still has. A pod gone from it (force-deleted, or
        deleted while this runner looked away) leaves the Service records at once, as its
        endpoint does, even while its processes stop: a new pod of the same name (a restarted
        job's rank) may already run, and its name must not resolve to the old address. Its
        directory path may already be the new pod's too, so it writes no files there."""
        with self.lock:
            return [w for w in self.workers.values()
                    if not w.done.is_set() and not w.force_deleted]

    def hosts_content(self, worker, services):
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        workers = self.live_workers()
        spec = worker.pod.spec
        hostname = spec.hostname or worker.name
        if spec.subdomain:
            lines.append(f"{worker.ip}\t{hostname}.{spec.subdomain}.{worker.ns}.svc.cluster.local"
                         f"\t{hostname}")
        else:
            lines.append(f"{worker.ip}\t{hostname}")
        for svc in services:
            sel = svc.spec.selector or {}
            ns, sname = svc.metadata.namespace, svc.metadata.name
            headless = svc.spec.cluster_ip == "None"
            if not headless:
                # A ClusterIP Service without kube-proxy: its names resolve to ONE ready pod it
                # selects (the oldest, then by name), whose node address serves the Service's
                # ports only where each port equals its target port (else the Service is left
                # out). Rewritten every second, so a change of endpoint (a new leader) follows.
                ready = sorted(
                    (w for w in workers if w.ns == ns and sel and w.phase == "Running"
                     and all((w.pod.metadata.labels or {}).get(k) == v for k, v in sel.items())
                     and same_ports(svc, w.pod)),
                    key=lambda w: (w.pod.metadata.creation_timestamp, w.name))
                if ready:
                    names = [f"{sname}.{ns}.svc.cluster.local", f"{sname}.{ns}.svc",
                             f"{sname}.{ns}"] + ([sname] if ns == worker.ns else [])
                    lines.append(f"{ready[0].ip}\t" + " ".join(names))
                continue
            for w in workers:
                labels = w.pod.metadata.labels or {}
                if w.ns != ns or not sel or any(labels.get(k) != v for k, v in sel.items()):
                    continue
                names = [f"{sname}.{ns}.svc.cluster.local", f"{sname}.{ns}.svc", f"{sname}.{ns}"]
                if ns == worker.ns:
                    names.append(sname)
                wh = w.pod.spec.hostname or w.name
                if w.pod.spec.subdomain == sname:
                    names = [f"{wh}.{sname}.{ns}.svc.cluster.local", f"{wh}.{sname}.{ns}"] + (
                        [f"{wh}.{sname}"] if ns == worker.ns else []) + names
                lines.append(f"{w.ip}\t" + " ".join(names))
        return ("\n".join(lines) + "\n").encode()

    def selector_services(self):
        """Services with a selector: headless ones and ClusterIP ones (see hosts_content)."""
        try:
            items = self.v1.list_service_for_all_namespaces().items
        except ApiException:
            return []
        return [s for s in items if s.spec.selector and s.spec.type in (None, "ClusterIP")]

    def write_hosts(self, worker, services):
        data = self.hosts_content(worker, services)
        try:
            with open(worker.hosts_path, "rb") as f:
                if f.read() == data:
                    return
        except OSError:
            pass
        # In place (same inode): the file is bind-mounted over the pod's /etc/hosts.
        with open(worker.hosts_path, "wb") as f:
            f.write(data)

    def update_hosts(self, worker):
        self.write_hosts(worker, self.selector_services())

    def update_hosts_all(self):
        services = self.selector_services()
        for w in self.live_workers():
            if os.path.isdir(w.dir):
                self.write_hosts(w, services)

    def refresher(self):
        while not self.stopping.wait(REFRESH_SECONDS):
            try:
                with self.lock:
                    workers = list(self.workers.values())
                for w in workers:
                    w.refresh()
                self.update_hosts_all()
            except Exception as e:  # noqa: BLE001 - the refresher must survive API hiccups
                log("refresh failed", error=e)

    # ---- watch ------------------------------------------------------------------------------
    def handle(self, kind, pod):
        if not self.ours(pod):
            return
        uid = pod.metadata.uid
        with self.lock:
            w = self.workers.get(uid)
            if w is None:
                if kind == "DELETED" or pod.status.phase in ("Succeeded", "Failed"):
                    if pod.metadata.deletion_timestamp is not None and kind != "DELETED":
                        # Finished before we (re)started: just complete the deletion.
                        # With its UID as a precondition: never a newer pod of that name.
                        try:
                            self.v1.delete_namespaced_pod(
                                pod.metadata.name, pod.metadata.namespace,
                                body=client.V1DeleteOptions(
                                    grace_period_seconds=0,
                                    preconditions=client.V1Preconditions(uid=uid)))
                        except ApiException:
                            pass
                    return
                w = PodWorker(self, pod)
                self.workers[uid] = w
                if pod.metadata.deletion_timestamp is not None:
                    w.deleting.set()
                w.thread.start()
                return
        w.pod = pod if kind != "DELETED" else w.pod
        if kind == "DELETED":
            w.force_deleted = True
            w.deleting.set()
        elif pod.metadata.deletion_timestamp is not None:
            w.pod = pod
            w.deleting.set()

    def watch_loop(self):
        first = True
        while not self.stopping.is_set():
            try:
                lst = self.v1.list_pod_for_all_namespaces()
                for p in lst.items:
                    self.handle("ADDED", p)
                live = {p.metadata.uid for p in lst.items}
                with self.lock:
                    gone = [w for uid, w in self.workers.items() if uid not in live]
                for w in gone:
                    w.force_deleted = True
                    w.deleting.set()
                if first:
                    with open(os.path.join(self.dir, "podrunner.ready"), "w") as f:
                        f.write(str(os.getpid()))
                    first = False
                    log("ready", pods=len(self.workers))
                w = watch.Watch()
                for ev in w.stream(self.v1.list_pod_for_all_namespaces,
                                   resource_version=lst.metadata.resource_version,
                                   timeout_seconds=60):
                    if self.stopping.is_set():
                        break
                    self.handle(ev["type"], ev["object"])
            except Exception as e:  # noqa: BLE001 - relist after any watch failure
                if self.stopping.is_set():
                    break
                log("watch failed; relisting", error=e)
                time.sleep(0.5)

    def shutdown(self, *_):
        if self.stopping.is_set():
            return
        self.stopping.set()
        log("stopping all pods")
        with self.lock:
            workers = list(self.workers.values())
        for w in workers:
            w.stop_all(3)
        self.remove_created_paths()
        remove_cgroup_tree(self.cgroup_root)
        log("stopped")
        os._exit(0)

    def remove_created_paths(self):
        """The mount points the pods created on the host, if this is the machine's last runner
        (hostpaths: another cluster's pods may have mounts on them)."""
        if self.host_users is not None and self.host_users.leave():
            log("removed the pods' mount points on the host (the last runner here)")

    def run(self):
        signal.signal(signal.SIGTERM, self.shutdown)
        signal.signal(signal.SIGINT, self.shutdown)
        os.makedirs(os.path.join(self.dir, "pods"), exist_ok=True)
        # Only root creates mount points on the host (podexec.py).
        self.host_users = hostpaths.Users() if os.geteuid() == 0 else None
        if self.fabric:
            for i in range(self.nodes):
                for port in [self.api_port] + self.host_ports:
                    self.proxies.append(NetnsApiProxy(self.netns_of(f"node-{i}"), port))
        threading.Thread(target=self.refresher, daemon=True).start()
        log("watching pods", annotation=f"{ANNOTATION}={ANNOTATION_VALUE}",
            fabric=self.fabric, api_port=self.api_port, cgroups=self.cgroup_root or "-")
        self.watch_loop()


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", required=True)
    a = p.parse_args()
    Runner(a.dir).run()


if __name__ == "__main__":
    main()
