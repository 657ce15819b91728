#!/usr/bin/env bash
# The whole test suite: a packager's plain Release build, the default build,
# the same tests under ASan+UBSan, and the parser fuzz targets for a bounded
# time. Needs root (cgroups, PID namespaces, runc). Prints one closing line
# "N passed, N failed" (the plain build counts as one).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

jobs=${GPUREAP_JOBS:-$(nproc)}
passed=0
failed=0
status=0

run_preset() {
  local preset=$1
  echo "=== preset $preset ===" >&2
  if ! cmake --preset "$preset" >/dev/null; then echo "configure $preset failed" >&2; status=1; return; fi
  if ! cmake --build --preset "$preset" -j "$jobs"; then echo "build $preset failed" >&2; status=1; return; fi
  local log
  log=$(mktemp)
  ctest --preset "$preset" -j "$jobs" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  # ctest's summary: "NN% tests passed, F tests failed out of T"
  local line total fail
  line=$(grep -E 'tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1)
  if [[ -n $line ]]; then
    fail=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
    total=$(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<<"$line")
    passed=$((passed + total - fail))
    failed=$((failed + fail))
  fi
  rm -f "$log"
  ((rc == 0)) || status=1
}

# What a packager runs: no preset, so warnings are not errors (GPUREAP_WERROR
# is off) and the flags are CMake's Release ones (-O3, where GCC 12 has false
# positives). It must build; one check.
run_plain_release() {
  echo "=== plain cmake -DCMAKE_BUILD_TYPE=Release ===" >&2
  local dir=build/plain-release
  if cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$dir" -j "$jobs"; then
    passed=$((passed + 1))
  else
    echo "plain Release build failed" >&2
    failed=$((failed + 1))
    status=1
  fi
}

presets=("$@")
((${#presets[@]})) || presets=(plain default asan fuzz)
for p in "${presets[@]}"; do
  if [[ $p == plain ]]; then run_plain_release; else run_preset "$p"; fi
done

echo "${passed} passed, ${failed} failed"
exit $status
