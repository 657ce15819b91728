#!/usr/bin/env bash
# On the GPU machine: one-shot bench_scan on the bench/scan fleet, its wall
# time (bash's `time`, fork to exit) against the scan_ms it prints itself
# (scan_processes alone), on 1 and N threads: what exec, start-up and exit add.
#   tests/device/scan_wall.sh [THREADS...]   (default: 1 8)
set -uo pipefail
if [[ ${1:-} == --inner ]]; then  # run by bench_scan_run --extra, the fleet up
  shift
  TIMEFORMAT="real_ms=%3R"
  for _ in 1 2 3 4 5; do for t in "$@"; do
    # shellcheck disable=SC2086  # DEVS is a list of paths
    { time "$BENCH_SCAN" --fd-source bpf --threads "$t" $DEVS; } 2>&1 | tr "\n" " "; echo
  done; done
  exit 0
fi
cd "$(dirname "$0")/../.." || exit 2
BIN=${DEVBIN:-$PWD/.devbin}
export LD_LIBRARY_PATH=$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export SELF=$PWD/tests/device/scan_wall.sh THREADS="${*:-1 8}"
# shellcheck disable=SC2016  # expanded by the harness's sh -c, where SELF and THREADS are set
PATH=$BIN/peers:$PATH "$BIN/bench_scan_run" --bench-scan "$BIN/bench_scan" --gpureap "$BIN/gpureap" \
  --repeat 1 --extra 'bash "$SELF" --inner $THREADS' 2>&1 | grep real_ms |
  sed -E 's/.*threads=([0-9]+).*scan_ms=([0-9.]+).*real_ms=([0-9.]+).*/\1 \2 \3/' |
  awk '{printf "threads=%s scan_ms=%s wall_ms=%.1f\n", $1, $2, $3 * 1000}'
