#!/usr/bin/env bash
# The test command: installs what is missing, checks style, builds, and runs every test tier.
#
#   scripts/test.sh             style + ASan/UBSan unit tests + fuzzers (20 s each) + Release build
#                               with all tiers
#   scripts/test.sh --tsan      also a ThreadSanitizer build of the unit tests
#   scripts/test.sh --fuzz-long each fuzzer runs C4_FUZZ_SECONDS (default 600) instead of 20 s
#   scripts/test.sh --quick     Release build and unit tests only (no sanitizers, no fuzzers)
#   scripts/test.sh --long      also the long e2e runs (CTest label `long`), which the default
#                               leaves out
#
# C4_FUZZ_SECONDS=N sets the fuzzers' time (either mode). Build trees: build/ (Release), build-asan/,
# build-fuzz/ (clang-16, libFuzzer + ASan/UBSan), build-tsan/. The last line is CTest's summary of
# the Release run, which covers every registered test (unit, integration, e2e) but the long ones.
set -euo pipefail
cd "$(dirname "$0")/.."

TSAN=0
QUICK=0
LONG=0
FUZZ_SECONDS=${C4_FUZZ_SECONDS:-20}
for arg in "$@"; do
  case "$arg" in
    --tsan) TSAN=1 ;;
    --quick) QUICK=1 ;;
    --long) LONG=1 ;;
    --fuzz-long) FUZZ_SECONDS=${C4_FUZZ_SECONDS:-600} ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
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

  # Only the libraries the fuzzers link are built; each fuzzer runs FUZZ_SECONDS over a copy of
  # its seed corpus (fuzz/corpus/<target>), and a crash, leak, hang or memory blow-up fails it.
  echo "== Fuzzers (clang-16, libFuzzer + ASan/UBSan): ${FUZZ_SECONDS} s each"
  configure build-fuzz -DCMAKE_C_COMPILER=clang-16 -DCMAKE_CXX_COMPILER=clang++-16 \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DC4_SANITIZE_ADDRESS=ON -DC4_BUILD_FUZZERS=ON \
    -DC4_BUILD_TESTS=OFF -DC4_BUILD_BENCH=OFF -DC4_BUILD_E2E=OFF -DC4_FUZZ_SECONDS="$FUZZ_SECONDS"
  cmake --build build-fuzz -j "$JOBS" --target c4-fuzzers
  ctest --test-dir build-fuzz -L fuzz --output-on-failure -j "$JOBS"
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
  long=(-LE long)
  ((LONG == 1)) && long=()
  ctest --test-dir build --output-on-failure -j "$JOBS" "${long[@]}"
fi
