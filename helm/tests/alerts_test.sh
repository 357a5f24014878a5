#!/usr/bin/env bash
# Unit test of the chart's alerting rules (helm/c4/files/alerts.yaml): `promtool check rules`
# (syntax, templates) and `promtool test rules helm/tests/alerts_test.yaml` (every alert fires in
# one case and stays silent in another). Needs no cluster; exit 77 (skipped) without promtool
# (scripts/setup.sh installs Debian's prometheus, which brings it).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
if ! command -v promtool >/dev/null; then
  echo "SKIP: promtool not installed (scripts/setup.sh installs the prometheus package)"
  exit 77
fi
promtool check rules "$HERE/../c4/files/alerts.yaml"
cd "$HERE"
promtool test rules alerts_test.yaml
