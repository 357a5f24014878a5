#!/usr/bin/env bash
# run_fuzzer.sh <fuzzer> <seed corpus> <work dir> <seconds> <rss limit MiB> <malloc limit MiB>
# Runs one libFuzzer target for a bounded time over a scratch copy of its checked-in seeds (the
# seeds stay as they are; what the run adds stays in <work dir>/corpus for the next run). A crash,
# leak, timeout or memory limit leaves its input in <work dir>/artifacts and fails the test.
set -euo pipefail
fuzzer=$1 seeds=$2 work=$3 seconds=$4 rss=$5 malloc=$6
mkdir -p "$work/corpus" "$work/artifacts"
cp -n "$seeds"/* "$work/corpus/" 2>/dev/null || true
# Symbolised stacks: clang-16's runtime takes any llvm-symbolizer (Debian's is a versioned link).
if [[ -z ${ASAN_SYMBOLIZER_PATH:-} ]] && command -v llvm-symbolizer >/dev/null 2>&1; then
  export ASAN_SYMBOLIZER_PATH=$(readlink -f "$(command -v llvm-symbolizer)")
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
"$fuzzer" "$work/corpus" -max_total_time="$seconds" -timeout=30 -rss_limit_mb="$rss" \
  -malloc_limit_mb="$malloc" -max_len=262144 -detect_leaks=1 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" 2>&1
