#!/usr/bin/env bash
# The test command: installs what is missing, checks style, builds, and runs every test tier.
#
#   scripts/test.sh            style + ASan/UBSan unit tests + Release build with all tiers
#   scripts/test.sh --tsan     also a ThreadSanitizer build of the unit tests
#   scripts/test.sh --quick    Release build and unit tests only (no sanitizers)
#
# Build trees: build/ (Release), build-asan/, build-tsan/. The last line is CTest's summary of
# the Release run, which covers every registered test (unit, integration, e2e).
set -euo pipefail
cd "$(dirname "$0")/.."

TSAN=0
QUICK=0
for arg in "$@"; do
  case "$arg" in
    --tsan) TSAN=1 ;;
    --quick) QUICK=1 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown option '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

JOBS=${C4_JOBS:-$(nproc)}
scripts/setup.sh
scripts/check-style.sh

configure() {  # configure <dir> <cmake args...>
  local dir=$1; shift
  cmake -S . -B "$dir" -G Ninja "$@" >"$dir.configure.log" 2>&1 || {
    cat "$dir.configure.log" >&2; return 1; }
  grep -E '^-- (C4|  )' "$dir.configure.log" || true
}

if ((QUICK == 0)); then
  echo "== ASan/UBSan build: unit tests"
  configure build-asan -DCMAKE_BUILD_TYPE=Debug -DC4_SANITIZE_ADDRESS=ON -DC4_BUILD_BENCH=OFF \
    -DC4_BUILD_E2E=OFF
  cmake --build build-asan -j "$JOBS"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan -L unit --output-on-failure -j "$JOBS"
fi

if ((TSAN == 1)); then
  echo "== TSan build: unit tests"
  configure build-tsan -DCMAKE_BUILD_TYPE=Debug -DC4_SANITIZE_THREAD=ON -DC4_BUILD_BENCH=OFF \
    -DC4_BUILD_E2E=OFF
  cmake --build build-tsan -j "$JOBS"
  TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan -L unit --output-on-failure -j "$JOBS"
fi

echo "== Release build: all tiers"
configure build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$JOBS"
if ((QUICK == 1)); then
  ctest --test-dir build -L unit --output-on-failure -j "$JOBS"
else
  echo "== Test control plane: build from Go modules or reuse the cache (e2e/testenv)"
  e2e/testenv/testenv.sh build
  ctest --test-dir build --output-on-failure -j "$JOBS"
fi
