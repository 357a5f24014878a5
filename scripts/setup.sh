#!/usr/bin/env bash
# Installs everything C4's build and tests need on Debian 12. Idempotent and fast when done:
# it only calls apt-get when a package is missing. Later pieces (the test control plane) add
# their own steps to scripts/ and are called from here.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates ccache
  nlohmann-json3-dev libyaml-cpp-dev libcurl4-openssl-dev libssl-dev libcpp-httplib-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-format-16
  # the fuzzers (fuzz/): clang and its libFuzzer/sanitizer runtimes
  clang-16 libclang-rt-16-dev
  iproute2 ethtool procps psmisc openssl
  iperf3 python3 python3-yaml
  # jq: the e2e's Prometheus queries; nftables: the black-holed link of the C4D scenarios
  jq nftables
  # promtool (alert rule tests, metrics lint) and the server the e2e runs on its own port; on a
  # host with systemd the package also enables its own service (:9090), unused by C4's tests.
  prometheus
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#PACKAGES[@]} Debian packages present"
fi

# Run-time packages of the test cluster harness (e2e/testenv).
"$(dirname "$0")/../e2e/testenv/setup.sh"

# Go builds the test control plane (e2e/testenv); it is not a C++ build dependency.
if ! command -v go >/dev/null 2>&1 && [[ ! -x /usr/local/go/bin/go ]]; then
  echo "setup: warning: Go not found; the integration and e2e tiers need Go >= 1.24 to build" \
       "the test control plane (install it from https://go.dev/dl or your distribution)" >&2
fi
