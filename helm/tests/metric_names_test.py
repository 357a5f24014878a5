#!/usr/bin/env python3
"""Unit test: the chart's Grafana dashboards and alerting rules name only metrics C4 exports.

    metric_names_test.py <source root>

1. Every helm/c4/files/dashboards/*.json is valid JSON with panels, and each query (panel
   targets' `expr`, query variables) parses into series names.
2. The exported set is derived from the code: every metric registration
   (`.counter(` / `.gauge(` / `.histogram(` / `->...(` with the name as a string literal) under
   operator/, kube/, node-plugin/, nccl-net-plugin/ and common/src; a registration whose name is not a
   literal fails the test (the set would be incomplete). Histograms add _bucket, _sum, _count.
3. Every series name in the dashboards' queries and in helm/c4/files/alerts.yaml's expressions is
   exported, or one Prometheus makes itself (up, ALERTS); each dashboard uses at least one metric
   of each of the operator, C4D, C4P and the node plugin.
4. With promtool installed, every dashboard query (Grafana variables replaced) parses as PromQL
   (`promtool check rules` on a rule file recording each of them).
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
PROMETHEUS_OWN = {"up", "ALERTS", "ALERTS_FOR_STATE"}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
            "group_left", "group_right", "inf", "nan", "atan2"}
errors = []

# ---- the exported set ---------------------------------------------------------------------------
REG = re.compile(r'(?:\.|->)\s*(counter|gauge|histogram)\s*\(\s*("?)([A-Za-z_:][A-Za-z0-9_:]*)?',
                 re.S)
exported = {}
for sub in ("operator", "kube", "node-plugin", "nccl-net-plugin", "common/src"):
    for path in glob.glob(os.path.join(ROOT, sub, "**", "*.cc"), recursive=True):
        if path.endswith("common/src/metrics.cc"):
            continue  # the registry itself
        text = open(path, encoding="utf-8").read()
        for m in REG.finditer(text):
            kind, quote, name = m.groups()
            if not quote:
                errors.append(f"{path}: metric registered with a non-literal name: {m.group(0)!r}")
                continue
            exported[name] = kind
if len(exported) < 20:
    errors.append(f"only {len(exported)} metric registrations found under {ROOT}: wrong root?")
names = set()
for name, kind in exported.items():
    names.add(name)
    if kind == "histogram":
        names |= {name + "_bucket", name + "_sum", name + "_count"}


# ---- series names of a PromQL expression --------------------------------------------------------
def series_names(expr):
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)  # strings
    e = re.sub(r"\{[^{}]*\}", " ", e)                                  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)                                  # ranges, subqueries
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\$\{?\w+\}?", " ", e)                                 # Grafana variables
    out = set()
    for m in re.finditer(r"(?<![\w.])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?", e):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in KEYWORDS or re.fullmatch(r"\d+[smhdwy]", word):
            continue
        out.add(word)
    return out


def check(where, expr):
    found = series_names(expr)
    if not found:
        errors.append(f"{where}: no series in {expr!r}")
    for name in sorted(found - names - PROMETHEUS_OWN):
        errors.append(f"{where}: {name} is not exported by C4 ({expr!r})")
    return found


# ---- dashboards -------------------------------------------------------------------------------
dashboards = sorted(glob.glob(os.path.join(ROOT, "helm/c4/files/dashboards/*.json")))
if not dashboards:
    errors.append("no dashboards in helm/c4/files/dashboards")
for path in dashboards:
    rel = os.path.relpath(path, ROOT)
    try:
        dash = json.load(open(path, encoding="utf-8"))
    except json.JSONDecodeError as err:
        errors.append(f"{rel}: invalid JSON: {err}")
        continue
    used = set()
    promql = []
    panels = [p for p in dash.get("panels", []) if p.get("type") != "row"]
    if not dash.get("title") or not dash.get("uid") or not panels:
        errors.append(f"{rel}: needs a title, a uid and panels")
    for p in panels:
        targets = p.get("targets") or []
        if not targets:
            errors.append(f"{rel}: panel {p.get('title')!r} has no queries")
        for t in targets:
            used |= check(f"{rel}: panel {p.get('title')!r}", t.get("expr", ""))
            promql.append(t.get("expr", ""))
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v["query"]["query"] if isinstance(v.get("query"), dict) else v.get("query", "")
            inner = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", q)
            used |= check(f"{rel}: variable {v.get('name')}", inner.group(1) if inner else q)
    for prefix in ("c4_operator_", "c4_c4d_", "c4_trafficplan_", "c4_node_plugin_"):
        if not any(n.startswith(prefix) for n in used):
            errors.append(f"{rel}: no panel uses a {prefix}* metric")
    if shutil.which("promtool"):
        # Variables only appear in label matchers (=~"$namespace"): any regex stands in.
        rules = [{"record": f"c4:dashboard_query_{i}", "expr": re.sub(r"\$\{?\w+\}?", ".*", e)}
                 for i, e in enumerate(promql)]
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
            f.flush()
            r = subprocess.run(["promtool", "check", "rules", f.name], capture_output=True,
                               text=True)
            if r.returncode != 0:
                errors.append(f"{rel}: a query is not valid PromQL: {r.stdout}{r.stderr}")
    else:
        print(f"{rel}: PromQL syntax not checked (no promtool)")
    print(f"{rel}: valid JSON, {len(panels)} panels, {len(used)} series names")

# ---- alerting rules -----------------------------------------------------------------------------
alerts = yaml.safe_load(open(os.path.join(ROOT, "helm/c4/files/alerts.yaml"), encoding="utf-8"))
n = 0
for group in alerts["groups"]:
    for rule in group["rules"]:
        check(f"alerts.yaml: {rule.get('alert') or rule.get('record')}", rule["expr"])
        n += 1
print(f"alerts.yaml: {n} rules, {len(exported)} metrics registered in code")

if errors:
    for e in errors:
        print("FAIL:", e, file=sys.stderr)
    sys.exit(1)
