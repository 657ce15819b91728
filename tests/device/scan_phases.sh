#!/usr/bin/env bash
# On the GPU machine: the BPF descriptor pass's share of one scan, on the
# bench/scan fleet. bench_scan --phases on 1 and N threads, alternating:
# load_walk_ms (programs loaded, tables walked), walk_ms (walked again by the
# kept programs) and scan_ms (the whole library scan after them).
#   tests/device/scan_phases.sh [THREADS...]   (default: 1 8 16)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BIN=$PWD/.devbin
export LD_LIBRARY_PATH=$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export THREADS="${*:-1 8 16}"
# shellcheck disable=SC2016  # expanded by the harness's sh -c, where DEVS and BENCH_SCAN are set
PATH=$BIN/peers:$PATH "$BIN/bench_scan_run" --bench-scan "$BIN/bench_scan" --gpureap "$BIN/gpureap" \
  --repeat 1 --extra '
  for round in 1 2 3 4 5; do for t in $THREADS; do
    $BENCH_SCAN --phases --fd-source bpf --threads $t $DEVS
  done; done' 2>&1 | grep load_walk |
  sed -E 's/.*threads=([0-9]+).*scan_ms=([0-9.]+).*load_walk_ms=([0-9.]+) walk_ms=([0-9.]+)/\1 \2 \3 \4/' |
  awk '{print; n[$1]++; s[$1]=s[$1]" "$2; l[$1]=l[$1]" "$3; w[$1]=w[$1]" "$4}
    END {print "threads  scan_ms(each)  load_walk_ms(each)  walk_ms(each)";
         for (t in n) print t " |" s[t] " |" l[t] " |" w[t]}'
