#!/usr/bin/env bash
# On the GPU machine: bench/scan for two builds on the same machine, run
# alternately (A B A B) so load and cache state fall on both: .devbin/prev/
# (bench_scan and gpureap of the earlier build, staged by hand) against
# .devbin/ (tests/device/stage.sh). Runs the kernel-dependent unit tests of
# the new build first. Writes logs under $OUT; prints the medians table last.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BIN=$PWD/.devbin
export LD_LIBRARY_PATH=$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
out=${OUT:-/tmp}
[[ -x $BIN/prev/bench_scan && -x $BIN/prev/gpureap ]] || { echo "bench_ab.sh: no .devbin/prev/{bench_scan,gpureap}" >&2; exit 2; }
PATH=$BIN/peers:$PATH command -v fuser >/dev/null || { echo "bench_ab.sh: no fuser" >&2; exit 2; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; uname -r; date -u; } | tee "$out/machine.txt"
"$BIN/proc_unit_tests" --gtest_filter='KernelFds.*:KernelLoaders.*:SharedDescriptions.*:ScanReal*' --gtest_brief=1 2>&1 | tee "$out/kernel-tests.txt"
rc=${PIPESTATUS[0]}
for round in $(seq "${ROUNDS:-2}"); do
  for build in prev new; do
    d=$BIN; [[ $build == prev ]] && d=$BIN/prev
    echo "== round $round: $build ==" | tee -a "$out/ab.txt"
    PATH=$BIN/peers:$PATH "$BIN/bench_scan_run" --bench-scan "$d/bench_scan" --gpureap "$d/gpureap" --repeat "${REPEAT:-5}" \
      --threads 8 2>&1 | tee -a "$out/ab.txt"
  done
done
echo
echo "round build  tool                   wall ms   min ms   cpu ms   max RSS  fuser/wall"
awk '/^== round/ {r=$3; sub(/:/, "", r); b=$4} /^(fuser -v|scan bpf|trace [0-9]+ thr)/ {
  n=split($0, f, /  +/); printf "%-5s %-5s  %-20s %8s %8s %8s %9s %10s\n", r, b, f[1], f[2], f[3], f[4], f[5], f[n]}' "$out/ab.txt"
exit "$rc"
