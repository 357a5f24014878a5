#!/usr/bin/env bash
# Style and convention checks, run by scripts/test.sh (and CI through it):
#  1. every tracked C/C++ file is clang-formatted (.clang-format);
#  2. nothing but the real clock reads the real clocks or sleeps (docs/design.md §8: time is injected).
set -euo pipefail
cd "$(dirname "$0")/.."

CLANG_FORMAT=${CLANG_FORMAT:-clang-format-16}
mapfile -t files < <(git ls-files -co --exclude-standard -- '*.h' '*.hh' '*.cc' '*.cpp' '*.c' \
  | grep -v '^build' || true)
status=0
if ((${#files[@]})); then
  if ! "$CLANG_FORMAT" --dry-run --Werror "${files[@]}"; then
    echo "check-style: run '$CLANG_FORMAT -i' on the files above" >&2
    status=1
  fi
fi

# Real time may be read only in the real clock and in tests that synchronise real threads.
pattern='(steady_clock|system_clock|high_resolution_clock)::now\(|this_thread::sleep_(for|until)|\busleep\(|\bnanosleep\(|[^_]sleep\(|\brand\(\)'
allowed='^(common/src/real_clock\.cc|unit-tests/|bench/|e2e/)'
offenders=$(grep -nE "$pattern" "${files[@]}" 2>/dev/null | grep -vE "$allowed" | grep -vE '^[^:]+:[0-9]+:[[:space:]]*//' | grep -v 'c4-allow-real-time' || true)
if [[ -n "$offenders" ]]; then
  echo "check-style: real clock or sleep outside common/src/real_clock.cc (inject c4::Clock):" >&2
  echo "$offenders" >&2
  status=1
fi
if ((status == 0)); then echo "check-style: ${#files[@]} files formatted; time is injected"; fi
exit $status
