#!/usr/bin/env python3
"""Consistency of docker/*.Dockerfile with the repository (no Docker engine needed).

For each image (docker/<name>.Dockerfile <-> image c4/<name>):
  - every FROM is Debian 12 (debian:12, debian:12-slim); multi-stage (a build stage + runtime);
  - every COPY from the build context names a path that exists and that .dockerignore keeps;
  - every COPY --from=<build stage> /src/build/<rel> copies a CMake build output (a `build <rel>:`
    edge of the configured build.ninja) made by a target the stage's `cmake --build --target`
    names (its phony edge), to the destination the target's install() rule gives (under
    /usr/local) where it has one;
  - the ENTRYPOINT is one of those copies; the pod runner's table (e2e/testenv/podrunner/
    images.tsv) maps c4/<name> to the same build output, and its files column lists exactly the
    image's other copied build outputs at the same paths;
  - the `docker build ... -t` line of the header names <chart registry>/c4/<name>:<appVersion>,
    the chart's default image repositories (values.yaml) name these images, the node plugin's
    --plugin-source is where the image puts the NCCL plugin, the operator image's USER is the
    chart's runAsUser, and docs/architecture.md shows each `docker build` command.

  check_dockerfiles.py <repo root> <build dir>     (exit 0: consistent; 1: each problem printed)
  check_dockerfiles.py --self-test <repo root> <build dir>
      also checks that broken copies of the inputs are refused with the right complaint.
"""
import os
import re
import shlex
import shutil
import sys
import tempfile

import yaml

IMAGES = ("operator", "node-plugin", "netbench")
BUILD_IN_IMAGE = "/src/build/"
INSTALL_PREFIX = "/usr/local"


def instructions(path):
    """Dockerfile -> [(INSTRUCTION, argument text)], continuation lines joined, comments out."""
    out, cur = [], ""
    with open(path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not cur and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if cur and line.lstrip().startswith("#"):
                continue
            if line.endswith("\\"):
                cur += line[:-1] + " "
                continue
            cur += line
            word, _, rest = cur.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            cur = ""
    return out


def dockerignore(root):
    try:
        with open(os.path.join(root, ".dockerignore")) as f:
            return {ln.strip().rstrip("/") for ln in f if ln.strip() and not ln.startswith("#")}
    except OSError:
        return set()


def ninja_edges(build):
    """build.ninja -> ({output path: rule}, {phony target: [outputs]})."""
    outputs, phony = {}, {}
    path = os.path.join(build, "build.ninja")
    with open(path) as f:
        for line in f:
            m = re.match(r"build ([^:|]+?)(?: \|[^:]*)?: (\S+)(.*)", line.rstrip("\n"))
            if not m:
                continue
            for o in m.group(1).split():
                outputs[o] = m.group(2)
            if m.group(2) == "phony":
                phony[m.group(1).strip()] = m.group(3).split("||")[0].split()
    return outputs, phony


def install_destinations(build):
    """cmake_install.cmake files -> {build output relative to build: /usr/local/<dest>/<file>}."""
    dest = {}
    for d, _, files in os.walk(build):
        if "cmake_install.cmake" not in files:
            continue
        with open(os.path.join(d, "cmake_install.cmake")) as f:
            for m in re.finditer(r'file\(INSTALL DESTINATION "\$\{CMAKE_INSTALL_PREFIX\}/([^"]+)"'
                                 r'[^)]*?FILES ((?:"[^"]+"\s*)+)', f.read()):
                for src in re.findall(r'"([^"]+)"', m.group(2)):
                    rel = os.path.relpath(src, build)
                    dest[rel] = f"{INSTALL_PREFIX}/{m.group(1)}/{os.path.basename(src)}"
    return dest


def image_table(path):
    table = {}
    with open(path) as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            p = line.rstrip("\n").split("\t")
            files = {}
            if len(p) > 3 and p[3] != "-":
                for item in p[3].split(","):
                    dst, _, src = item.partition("=")
                    files[dst] = src
            table[p[0]] = (p[1], files)
    return table


def configured_folders(root):
    """Folders the top-level CMakeLists.txt adds outside any if(): every image build needs them."""
    folders, depth = [], 0
    with open(os.path.join(root, "CMakeLists.txt")) as f:
        for line in f:
            code = line.split("#", 1)[0].strip()
            if re.match(r"if\s*\(", code):
                depth += 1
            elif re.match(r"endif\s*\(", code):
                depth -= 1
            m = re.fullmatch(r"add_subdirectory\((\S+)\)", code)
            if m and depth == 0:
                folders.append(m.group(1))
    return folders


def check(root, build, paths):
    """paths: where to read the checked inputs (a test passes broken copies). -> [problems]."""
    errs = []
    ignored = dockerignore(root)
    outputs, phony = ninja_edges(build)
    installs = install_destinations(build)
    table = image_table(paths["images"])
    with open(paths["chart"]) as f:
        chart = yaml.safe_load(f)
    with open(paths["values"]) as f:
        values = yaml.safe_load(f)
    with open(paths["node_plugin_tpl"]) as f:
        np_tpl = f.read()
    with open(paths["operator_tpl"]) as f:
        op_tpl = f.read()
    with open(paths["docs"]) as f:
        docs = f.read()
    registry = values["image"]["registry"]
    repos = {"operator": values["operator"]["image"]["repository"],
             "node-plugin": values["nodePlugin"]["image"]["repository"]}
    for name, repo in repos.items():
        if repo != f"c4/{name}":
            errs.append(f"values.yaml: {name} image repository {repo!r} is not c4/{name} "
                        f"(docker/{name}.Dockerfile)")

    for name in IMAGES:
        df = os.path.join(paths["docker"], f"{name}.Dockerfile")
        where = f"docker/{name}.Dockerfile"
        if not os.path.isfile(df):
            errs.append(f"{where}: missing")
            continue
        ins = instructions(df)
        stages, targets, copies = [], {}, []   # copies: (from stage, src, dst)
        stage = None
        for word, arg in ins:
            if word == "FROM":
                m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", arg, re.I)
                base, stage = m.group(1), (m.group(2) or f"#{len(stages)}")
                stages.append(stage)
                if base not in ("debian:12", "debian:12-slim"):
                    errs.append(f"{where}: FROM {base}: not a Debian 12 image")
            elif word == "RUN" and "cmake --build" in arg:
                m = re.search(r"--target((?:\s+[\w.+-]+)+)", arg)
                targets[stage] = m.group(1).split() if m else []
            elif word == "COPY":
                args = shlex.split(arg)
                src_stage = None
                while args and args[0].startswith("--"):
                    if args[0].startswith("--from="):
                        src_stage = args[0].split("=", 1)[1]
                    args.pop(0)
                if args and args[0].startswith("["):
                    errs.append(f"{where}: COPY in JSON form is not checked: {arg}")
                    continue
                for src in args[:-1]:
                    copies.append((src_stage, src, args[-1]))
        if len(stages) < 2:
            errs.append(f"{where}: not multi-stage ({len(stages)} stage)")
        copied = {os.path.normpath(src).rstrip("/") for st, src, _ in copies if st is None}
        for folder in configured_folders(root):
            if folder not in copied:
                errs.append(f"{where}: COPY {folder}/ missing: the top-level CMakeLists.txt adds "
                            f"it to every build")
        entry = [a for w, a in ins if w == "ENTRYPOINT"]
        entrypoint = None
        if len(entry) != 1:
            errs.append(f"{where}: {len(entry)} ENTRYPOINT instructions")
        else:
            try:
                entrypoint = yaml.safe_load(entry[0])[0]
            except Exception:  # noqa: BLE001
                errs.append(f"{where}: ENTRYPOINT is not in JSON (exec) form: {entry[0]}")

        built = {}  # image path -> build output relative to the build dir
        for src_stage, src, dst in copies:
            if src_stage is None:
                rel = os.path.normpath(src).rstrip("/")
                if not os.path.exists(os.path.join(root, rel)):
                    errs.append(f"{where}: COPY {src}: no such path in the repository")
                elif rel.split("/")[0] in ignored:
                    errs.append(f"{where}: COPY {src}: excluded by .dockerignore")
                continue
            if src_stage not in stages:
                errs.append(f"{where}: COPY --from={src_stage}: no such stage")
                continue
            if not src.startswith(BUILD_IN_IMAGE):
                errs.append(f"{where}: COPY --from={src_stage} {src}: not under {BUILD_IN_IMAGE}")
                continue
            rel = src[len(BUILD_IN_IMAGE):]
            if rel not in outputs:
                errs.append(f"{where}: {src}: {rel} is not an output of the CMake build")
                continue
            made_by = [t for t in targets.get(src_stage, []) if rel in phony.get(t, [])]
            if not made_by:
                errs.append(f"{where}: {src}: no target of the stage's `cmake --build --target "
                            f"{' '.join(targets.get(src_stage, []))}` builds {rel}")
            dst_file = dst + os.path.basename(rel) if dst.endswith("/") else dst
            if rel in installs and installs[rel] != dst_file:
                errs.append(f"{where}: {rel} is copied to {dst_file}, its CMake install() puts "
                            f"it at {installs[rel]}")
            built[dst_file] = rel

        if entrypoint is not None and entrypoint not in built:
            errs.append(f"{where}: ENTRYPOINT {entrypoint} is not a build output the image copies")
        known = table.get(f"c4/{name}")
        if known is None:
            errs.append(f"images.tsv: no row for c4/{name}")
        elif entrypoint in built:
            want = "${C4_BUILD_DIR}/" + built[entrypoint]
            if known[0] != want:
                errs.append(f"images.tsv: c4/{name} runs {known[0]}, the image's ENTRYPOINT "
                            f"{entrypoint} is {want}")
            others = {d: "${C4_BUILD_DIR}/" + r for d, r in built.items() if d != entrypoint}
            if known[1] != others:
                errs.append(f"images.tsv: c4/{name} files {known[1]} != the image's other build "
                            f"outputs {others}")

        tags = re.findall(r"docker build -f docker/" + re.escape(name) + r"\.Dockerfile -t (\S+) \.",
                          open(df).read())
        want_tag = f"{registry}/c4/{name}:{chart['appVersion']}"
        if tags != [want_tag]:
            errs.append(f"{where}: header `docker build` tags {tags}, want [{want_tag}] (chart "
                        "registry, repository, appVersion)")
        if f"docker build -f docker/{name}.Dockerfile -t {registry}/c4/{name}:" not in docs:
            errs.append(f"docs/architecture.md: no `docker build -f docker/{name}.Dockerfile` "
                        f"command for {registry}/c4/{name}")

        if name == "node-plugin":
            for flag in ("--plugin-source", "--profiler-plugin-source"):
                m = re.search(flag + r"=(\S+)", np_tpl)
                if not m or m.group(1) not in built:
                    errs.append(f"chart: node plugin {flag}={m.group(1) if m else '?'} is "
                                f"not a file of the image ({sorted(built)})")
        if name == "operator":
            users = [a for w, a in ins if w == "USER"]
            m = re.search(r"runAsUser:\s*(\d+)", op_tpl)
            uid = users[-1].split(":")[0] if users else "0"
            if not m or m.group(1) != uid:
                errs.append(f"{where}: USER {uid} but the chart runs the operator as "
                            f"{m.group(1) if m else '?'}")
            if uid == "0":
                errs.append(f"{where}: runs as root")
    return errs


def default_paths(root):
    return {"docker": os.path.join(root, "docker"),
            "images": os.path.join(root, "e2e/testenv/podrunner/images.tsv"),
            "chart": os.path.join(root, "helm/c4/Chart.yaml"),
            "values": os.path.join(root, "helm/c4/values.yaml"),
            "node_plugin_tpl": os.path.join(root, "helm/c4/templates/node-plugin.yaml"),
            "operator_tpl": os.path.join(root, "helm/c4/templates/operator.yaml"),
            "docs": os.path.join(root, "docs/architecture.md")}


def self_test(root, build):
    """Each broken copy must be refused with its complaint (the check can fail)."""
    cases = [
        ("docker/operator.Dockerfile", "/usr/local/bin/c4-operator\"]", "/usr/bin/c4-operator\"]",
         "is not a build output the image copies"),
        ("docker/operator.Dockerfile", "COPY operator/ operator/", "COPY operators/ operator/",
         "no such path in the repository"),
        ("docker/node-plugin.Dockerfile", "COPY kube/ kube/\n", "",
         "COPY kube/ missing"),
        ("docker/node-plugin.Dockerfile", "--target c4-node-plugin nccl-net-c4",
         "--target c4-node-plugin", "builds nccl-net-plugin/libnccl-net-c4.so"),
        ("docker/netbench.Dockerfile", "/src/build/nccl-net-plugin/netbench/c4-netbench",
         "/src/build/netbench/c4-netbench", "is not an output of the CMake build"),
        ("docker/netbench.Dockerfile", "FROM debian:12-slim", "FROM ubuntu:24.04",
         "not a Debian 12 image"),
        ("e2e/testenv/podrunner/images.tsv", "${C4_BUILD_DIR}/node-plugin/c4-node-plugin",
         "${C4_BUILD_DIR}/node-plugin/c4-node-pluginX", "c4/node-plugin runs"),
        ("e2e/testenv/podrunner/images.tsv", "/usr/lib/c4/libnccl-net-c4.so=",
         "/usr/lib/libnccl-net-c4.so=", "c4/node-plugin files"),
        ("helm/c4/values.yaml", "repository: c4/node-plugin", "repository: c4/nodeplugin",
         "node-plugin image repository"),
        ("helm/c4/templates/node-plugin.yaml", "--plugin-source=/usr/lib/c4/",
         "--plugin-source=/opt/", "--plugin-source=/opt/"),
        ("helm/c4/templates/node-plugin.yaml", "--profiler-plugin-source=/usr/lib/c4/",
         "--profiler-plugin-source=/opt/", "--profiler-plugin-source=/opt/"),
        ("docker/node-plugin.Dockerfile", "nccl-net-c4 nccl-profiler-c4", "nccl-net-c4",
         "builds nccl-profiler-plugin/libnccl-profiler-c4.so"),
        ("helm/c4/templates/operator.yaml", "runAsUser: 65532", "runAsUser: 1000",
         "but the chart runs the operator as 1000"),
        ("helm/c4/Chart.yaml", "appVersion:", "appVersion: \"9.9.9\"\nx-old-appVersion:",
         "want [ghcr.io"),
    ]
    keys = {"docker/operator.Dockerfile": "docker", "docker/node-plugin.Dockerfile": "docker",
            "docker/netbench.Dockerfile": "docker", "e2e/testenv/podrunner/images.tsv": "images",
            "helm/c4/values.yaml": "values", "helm/c4/templates/node-plugin.yaml":
            "node_plugin_tpl", "helm/c4/templates/operator.yaml": "operator_tpl",
            "helm/c4/Chart.yaml": "chart"}
    bad = 0
    for rel, old, new, want in cases:
        with tempfile.TemporaryDirectory() as tmp:
            paths = default_paths(root)
            shutil.copytree(paths["docker"], os.path.join(tmp, "docker"))
            paths["docker"] = os.path.join(tmp, "docker")
            target = os.path.join(tmp, rel) if rel.startswith("docker/") else \
                os.path.join(tmp, os.path.basename(rel))
            if not rel.startswith("docker/"):
                shutil.copy(os.path.join(root, rel), target)
                paths[keys[rel]] = target
            text = open(target).read()
            if old not in text:
                print(f"self-test: {rel} no longer contains {old!r}")
                bad += 1
                continue
            open(target, "w").write(text.replace(old, new, 1))
            errs = check(root, build, paths)
            if not any(want in e for e in errs):
                print(f"self-test: {rel}: {old!r} -> {new!r} not refused with {want!r}: {errs}")
                bad += 1
    print(f"self-test: {len(cases) - bad}/{len(cases)} broken inputs refused")
    return bad == 0


def main():
    args = sys.argv[1:]
    selftest = bool(args) and args[0] == "--self-test"
    if selftest:
        args = args[1:]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root, build = (os.path.abspath(a) for a in args)
    if not os.path.isfile(os.path.join(build, "build.ninja")):
        print(f"{build}: no build.ninja (configure with -G Ninja)", file=sys.stderr)
        return 2
    errs = check(root, build, default_paths(root))
    for e in errs:
        print("FAIL:", e)
    if not errs:
        print(f"docker: {len(IMAGES)} Dockerfiles consistent with CMake, images.tsv, the chart "
              "and docs/architecture.md")
    ok = not errs
    if selftest:
        ok = self_test(root, build) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
