#!/usr/bin/env bash
# On the GPU machine: bench/scan/ab_pinned.py inside one bench fleet, the
# earlier build (.devbin/prev/) against .devbin/, alternating run by run,
# each pinned to one CPU: medians, quartiles, best run, CPU time and minor
# page faults per build. Then bench_ab.sh (fuser ratios, max RSS).
#   RUNS=N ROUNDS=N tests/device/scan_ab_pinned.sh   (defaults 31, 3)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BIN=$PWD/.devbin
export LD_LIBRARY_PATH=$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
out=${OUT:-/tmp}
[[ -x $BIN/prev/bench_scan && -x $BIN/prev/gpureap ]] || { echo "scan_ab_pinned.sh: no .devbin/prev" >&2; exit 2; }
PATH=$BIN/peers:$PATH "$BIN/bench_scan_run" --bench-scan "$BIN/bench_scan" --gpureap "$BIN/gpureap" \
  --repeat 1 --extra "python3 bench/scan/ab_pinned.py ${RUNS:-31} prev=$BIN/prev new=$BIN" 2>&1 |
  tee "$out/pinned.txt" | grep -E '^(scan|trace) +(prev|new) '
ROUNDS=${ROUNDS:-3} REPEAT=${REPEAT:-5} tests/device/bench_ab.sh
