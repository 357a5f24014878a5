#!/usr/bin/env python3
"""Every alert of helm/c4/files/alerts.yaml links its runbook (ctest unit.helm_runbooks).

Each rule has an annotation runbook_url = <docs/operations.md URL>#<alert name, lower case>, and
docs/operations.md has a heading with that anchor (GitHub's rule: lower case, punctuation dropped,
spaces to '-'), under "## Runbooks". A renamed alert or heading fails here instead of leaving a
dead link in a page at 3 a.m.

    runbooks_test.py <source root>
"""
import re
import sys
from pathlib import Path

import yaml

BASE = "https://github.com/c4-dev/c4/blob/main/docs/operations.md"


def slug(heading: str) -> str:
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)  # GitHub keeps letters, digits, '_', '-' and spaces
    return s.replace(" ", "-")


def anchors(markdown: str):
    """Anchors of the headings, and those of the headings inside the Runbooks section."""
    seen, out, runbooks = {}, set(), set()
    section, fence = None, False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        a = slug(m.group(2))
        n = seen.get(a, 0)
        seen[a] = n + 1
        if n:
            a = f"{a}-{n}"
        out.add(a)
        if len(m.group(1)) == 2:
            section = m.group(2)
        elif section == "Runbooks":
            runbooks.add(a)
    return out, runbooks


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
    rules = yaml.safe_load((root / "helm/c4/files/alerts.yaml").read_text())
    all_anchors, runbook_anchors = anchors((root / "docs/operations.md").read_text())
    errors, n = [], 0
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            n += 1
            name = rule["alert"]
            url = rule.get("annotations", {}).get("runbook_url")
            want = f"{BASE}#{name.lower()}"
            if url != want:
                errors.append(f"{name}: runbook_url is {url!r}, want {want!r}")
                continue
            anchor = url.split("#", 1)[1]
            if anchor not in all_anchors:
                errors.append(f"{name}: docs/operations.md has no heading with anchor #{anchor}")
            elif anchor not in runbook_anchors:
                errors.append(f"{name}: #{anchor} is not under '## Runbooks' in docs/operations.md")
    for e in errors:
        print("FAIL:", e)
    if errors:
        return 1
    print(f"runbooks: {n} alerts, each runbook_url names a Runbooks heading of docs/operations.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
