#!/usr/bin/env bash
# Creates (once) the pod runner's Python venv from requirements.txt, outside the checkout at
# ${C4_CACHE_DIR:-$HOME/.cache/c4}/testenv/venv-<hash>. With --print-python: prints its python.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=${C4_PYTHON:-python3}
KEY=$( (cat "$HERE/requirements.txt"; "$PY" -c 'import sys; print(sys.version)') | sha256sum | cut -c1-12)
VENV=${C4_CACHE_DIR:-$HOME/.cache/c4}/testenv/venv-$KEY
if [[ ${1:-} == --print-python ]]; then echo "$VENV/bin/python"; exit 0; fi
[[ -f $VENV/.complete ]] && exit 0
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9
[[ -f $VENV/.complete ]] && exit 0
rm -rf "$VENV"
echo "podrunner: creating venv $VENV" >&2
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$HERE/requirements.txt"
touch "$VENV/.complete"
