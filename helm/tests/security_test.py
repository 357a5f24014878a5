#!/usr/bin/env python3
"""Unit test: least privilege in the chart's rendered manifests (`helm template`, no cluster).

    security_test.py <source root>     (exit 77 = skipped: no helm on PATH, in $C4_HELM or in the
                                        test control plane's cache, e2e/testenv/build.sh)

1. The node plugin DaemonSet: pod seccompProfile RuntimeDefault; the node plugin container runs as
   a non-root uid (runAsNonRoot), drops ALL capabilities and adds none (no SYS_PTRACE, no
   DAC_READ_SEARCH), allowPrivilegeEscalation false, a read-only root filesystem with an emptyDir
   at /tmp; the node's /sys mounted read-only and passed as --sysfs-root (its own network
   namespace's would show only the pod's interface); the one init container that owns the host
   directories runs as root with CHOWN alone and mounts nothing but those two directories;
   nodePlugin.runAsUser is used for both.
2. Operator RBAC with operator.watchNamespace "" (every namespace): pods, Services, ConfigMaps,
   TrainingJobs and Events in its ClusterRole; nothing namespaced in another Role but its own
   namespace's.
3. With operator.watchNamespace set: the ClusterRole holds only cluster-scoped resources (nodes,
   fabrics, tokenreviews); pods, Services, ConfigMaps and TrainingJobs are in a Role of the watched
   namespace (bound to the operator's ServiceAccount); Events also in "default" (Nodes' Events).
4. The node plugin: list and watch on pods, nothing else; cluster-wide when the operator watches
   every namespace, else a Role in the watched namespace and `--namespace` in its arguments.
"""
import glob
import os
import shutil
import subprocess
import sys

import yaml

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
CHART = os.path.join(ROOT, "helm", "c4")
NAMESPACED = {"pods", "services", "configmaps", "events", "trainingjobs", "trainingjobs/status",
              "trainingjobs/finalizers", "leases"}
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)


def find_helm():
    for cand in [os.environ.get("C4_HELM"), shutil.which("helm")] + sorted(glob.glob(
            os.path.join(os.environ.get("C4_CACHE_DIR", os.path.expanduser("~/.cache/c4")),
                         "testenv", "*", "bin", "helm"))):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def render(helm, *sets):
    args = [helm, "template", "c4", CHART, "-n", "c4-system"]
    for s in sets:
        args += ["--set", s]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"helm template {' '.join(sets)} failed: {done.stderr.strip()}")
    out = done.stdout
    return [d for d in yaml.safe_load_all(out) if d]


def resources(rules):
    return {r for rule in rules for r in rule["resources"]}


def operator_roles(docs):
    """(ClusterRole rules, {namespace: Role rules}) bound to the operator's ServiceAccount."""
    sa = "c4-operator"
    bound = set()
    for d in docs:
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding") and any(
                s["name"] == sa for s in d["subjects"]):
            bound.add((d["roleRef"]["kind"], d["roleRef"]["name"],
                       d["metadata"].get("namespace")))
    cluster, roles = [], {}
    for d in docs:
        ns = d["metadata"].get("namespace")
        if d["kind"] == "ClusterRole" and ("ClusterRole", d["metadata"]["name"], None) in bound:
            cluster += d["rules"]
        if d["kind"] == "Role" and ("Role", d["metadata"]["name"], ns) in bound:
            roles.setdefault(ns, []).extend(d["rules"])
    return cluster, roles


def node_plugin(docs):
    ds = [d for d in docs if d["kind"] == "DaemonSet"]
    check(len(ds) == 1, f"one DaemonSet expected, got {len(ds)}")
    spec = ds[0]["spec"]["template"]["spec"]
    psc = spec.get("securityContext") or {}
    check((psc.get("seccompProfile") or {}).get("type") == "RuntimeDefault",
          f"node plugin pod: seccompProfile is not RuntimeDefault: {psc}")
    (c,) = [c for c in spec["containers"] if c["name"] == "node-plugin"]
    sc = c.get("securityContext") or {}
    caps = sc.get("capabilities") or {}
    check(caps.get("drop") == ["ALL"], f"node plugin: capabilities.drop {caps.get('drop')}")
    check(not caps.get("add"), f"node plugin adds capabilities: {caps.get('add')}")
    check(sc.get("allowPrivilegeEscalation") is False, "node plugin: privilege escalation allowed")
    check(sc.get("readOnlyRootFilesystem") is True, "node plugin: root filesystem writable")
    uid = sc.get("runAsUser", psc.get("runAsUser"))
    check(isinstance(uid, int) and uid > 0, f"node plugin runs as uid {uid}")
    check(sc.get("runAsNonRoot") is True, "node plugin: runAsNonRoot not set")
    vols = {v["name"]: v for v in spec["volumes"]}
    tmp = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
    check(len(tmp) == 1 and "emptyDir" in vols.get(tmp[0]["name"], {}),
          "node plugin: no emptyDir at /tmp under its read-only root")
    # The node's NICs: its own network namespace's sysfs would list only the pod's interface, so
    # the node's /sys is mounted (read-only: nothing else of the host's sysfs is written) and is
    # the node plugin's --sysfs-root.
    host_sys = [m for m in c["volumeMounts"]
                if (vols.get(m["name"], {}).get("hostPath") or {}).get("path") == "/sys"]
    check(len(host_sys) == 1 and host_sys[0].get("readOnly") is True,
          f"node plugin: the node's /sys is not mounted read-only once: {host_sys}")
    check(bool(host_sys) and f"--sysfs-root={host_sys[0]['mountPath']}" in c["args"],
          f"node plugin: --sysfs-root is not the node's /sys: {c['args']}")
    inits = spec.get("initContainers") or []
    check(len(inits) == 1, f"one init container expected, got {len(inits)}")
    for i in inits:
        isc = i.get("securityContext") or {}
        icaps = isc.get("capabilities") or {}
        check(icaps.get("drop") == ["ALL"] and icaps.get("add") == ["CHOWN"],
              f"init container {i['name']}: capabilities {icaps}")
        check(isc.get("allowPrivilegeEscalation") is False,
              f"init container {i['name']}: privilege escalation allowed")
        check({m["name"] for m in i.get("volumeMounts", [])} == {"agent", "plugin"},
              f"init container {i['name']} mounts {i.get('volumeMounts')}")
        check(i["command"][0] == "chown" and i["command"][1] == f"{uid}:{uid}",
              f"init container {i['name']}: {i['command']} does not give uid {uid} the dirs")
    return uid


def main():
    helm = find_helm()
    if helm is None:
        print("SKIP: no helm (PATH, $C4_HELM or the test control plane's cache)")
        return 77

    # 1. the node plugin, default values and another uid
    docs = render(helm)
    check(node_plugin(docs) == 65532, "node plugin: default uid is not 65532")
    check(node_plugin(render(helm, "nodePlugin.runAsUser=4242")) == 4242,
          "nodePlugin.runAsUser is not applied")

    # 2. watching every namespace
    cluster, roles = operator_roles(docs)
    have = resources(cluster)
    for r in ("pods", "services", "configmaps", "trainingjobs", "events", "nodes"):
        check(r in have, f"watchNamespace '': ClusterRole lacks {r}")
    check(set(roles) == {"c4-system"}, f"watchNamespace '': Roles in {sorted(roles)}")

    # 3. watching one namespace
    docs = render(helm, "operator.watchNamespace=jobs")
    cluster, roles = operator_roles(docs)
    have = resources(cluster)
    check(not (have & NAMESPACED),
          f"watchNamespace jobs: ClusterRole grants namespaced {sorted(have & NAMESPACED)}")
    check(have == {"nodes", "fabrics", "fabrics/status", "tokenreviews"},
          f"watchNamespace jobs: ClusterRole resources {sorted(have)}")
    check(set(roles) == {"c4-system", "jobs", "default"}, f"Roles in {sorted(roles)}")
    jobs = resources(roles.get("jobs", []))
    for r in ("pods", "services", "configmaps", "trainingjobs", "trainingjobs/status", "events"):
        check(r in jobs, f"watchNamespace jobs: Role in jobs lacks {r}")
    check(resources(roles.get("default", [])) == {"events"},
          f"Role in default: {sorted(resources(roles.get('default', [])))}")
    own = resources(roles.get("c4-system", []))
    check(own == {"leases", "configmaps", "pods"}, f"Role in c4-system: {sorted(own)}")
    # watching "default" itself: one Role there, with Events
    _, roles = operator_roles(render(helm, "operator.watchNamespace=default"))
    check(set(roles) == {"c4-system", "default"} and "events" in resources(roles["default"]),
          f"watchNamespace default: Roles {roles}")

    # 4. the node plugin's ServiceAccount: list and watch pods, in the watched namespace only
    pods = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]
    for watch, d in (("", render(helm)), ("jobs", docs)):
        roles = [(x["kind"], x["metadata"].get("namespace")) for x in d
                 if x["kind"] in ("Role", "ClusterRole")
                 and x["metadata"]["name"] == "c4-node-plugin" and x["rules"] == pods]
        bindings = [(x["kind"], x["metadata"].get("namespace"), x["roleRef"]["kind"]) for x in d
                    if x["kind"] in ("RoleBinding", "ClusterRoleBinding")
                    and x["subjects"][0]["name"] == "c4-node-plugin"]
        want = [("Role", watch)] if watch else [("ClusterRole", None)]
        check(roles == want, f"watchNamespace '{watch}': node plugin roles {roles}, want {want}")
        want_b = [("RoleBinding", watch, "Role")] if watch else \
            [("ClusterRoleBinding", None, "ClusterRole")]
        check(bindings == want_b, f"watchNamespace '{watch}': node plugin bindings {bindings}")
        (ds,) = [x for x in d if x["kind"] == "DaemonSet"]
        args = [a for c in ds["spec"]["template"]["spec"]["containers"] for a in c["args"]]
        ns_args = [a for a in args if a.startswith("--namespace")]
        check(ns_args == ([f"--namespace={watch}"] if watch else []),
              f"watchNamespace '{watch}': node plugin args {ns_args}")

    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print("PASS: node plugin unprivileged (uid, no capability, seccomp, read-only root); operator "
          "RBAC cluster-wide only for cluster-scoped objects when it watches one namespace")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as e:
        for f in failures + [str(e)]:
            print("FAIL:", f)
        sys.exit(1)
