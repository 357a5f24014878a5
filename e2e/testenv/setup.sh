#!/usr/bin/env bash
# Debian packages the test cluster harness needs at run time (called by scripts/setup.sh):
# openssl (PKI), curl + jq (readiness, tests), nftables + iproute2 (netns fabric), python3-venv
# (pod runner venv). Idempotent; only calls apt-get when something is missing.
set -euo pipefail
PACKAGES=(openssl curl jq nftables iproute2 python3 python3-venv)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "testenv setup: installing ${missing[*]}"
  SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
