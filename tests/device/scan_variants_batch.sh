#!/usr/bin/env bash
# On the GPU machine, in one call: the builds under .devbin/var/ by phase
# (PHASES=1) and whole (scan_variants.sh, each pinned to one CPU), then a
# perf profile of PROFILE (a build's name under .devbin/var/, default the
# first; scan_profile.sh). Everything it wrote goes back as $OUT/batch.tgz
# (the device tool returns at most 8 files); the tables are printed last.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
out=${OUT:-/tmp}
work=$(mktemp -d)
mkdir -p "$work/phases" "$work/whole" "$work/profile"
first=$(find .devbin/var -mindepth 1 -maxdepth 1 -printf '%f\n' | sort | head -1)
OUT=$work/phases PHASES=1 ROUNDS=${PHASE_ROUNDS:-11} PIN="taskset -c 1" \
  bash tests/device/scan_variants.sh >"$work/phases.log" 2>&1
OUT=$work/whole ROUNDS=${ROUNDS:-15} PIN="taskset -c 1" \
  bash tests/device/scan_variants.sh >"$work/whole.log" 2>&1
OUT=$work/profile RUNS=${RUNS:-30} \
  bash tests/device/scan_profile.sh ".devbin/var/${PROFILE:-$first}/bench_scan" >"$work/profile.log" 2>&1
tar -czf "$out/batch.tgz" -C "$work" .
cat "$work/phases/machine.txt"
grep -A3 '^tool' "$work/whole/harness.txt" | head -4
echo "== by phase (PHASES=1: scan_ms is a third, whole scan after the two passes) =="
sed -n '/^build /,$p' "$work/phases.log"
echo "== whole =="
sed -n '/^build /,$p' "$work/whole.log"
echo "== profile of ${PROFILE:-$first} =="
head -40 "$work/profile/profile-children.txt"
