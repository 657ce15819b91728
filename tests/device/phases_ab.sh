#!/usr/bin/env bash
# On the GPU machine: the BPF pass of two builds, alternating on one fleet:
# .devbin/prev/bench_scan against .devbin/bench_scan, `--phases` on 1 and 8
# threads. load = load_walk_ms - walk_ms (the programs loaded), walk = walk_ms
# (tables walked by the kept programs). Prints medians per build last.
#   ROUNDS=N tests/device/phases_ab.sh   (default 7)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BIN=$PWD/.devbin
export LD_LIBRARY_PATH=$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[[ -x $BIN/prev/bench_scan ]] || { echo "phases_ab.sh: no .devbin/prev/bench_scan" >&2; exit 2; }
export ROUNDS=${ROUNDS:-7} PREV=$BIN/prev/bench_scan
# shellcheck disable=SC2016  # expanded by the harness's sh -c, where DEVS and BENCH_SCAN are set
PATH=$BIN/peers:$PATH "$BIN/bench_scan_run" --bench-scan "$BIN/bench_scan" --gpureap "$BIN/gpureap" \
  --repeat 1 --extra '
  for round in $(seq $ROUNDS); do for t in 1 8; do
    echo "prev $($PREV --phases --fd-source bpf --threads $t $DEVS)"
    echo "new $($BENCH_SCAN --phases --fd-source bpf --threads $t $DEVS)"
  done; done' 2>&1 | grep load_walk |
  sed -E 's/^([a-z]+) .*threads=([0-9]+).*scan_ms=([0-9.]+).*load_walk_ms=([0-9.]+) walk_ms=([0-9.]+).*/\1 \2 \3 \4 \5/' |
  tee /dev/stderr |
  python3 -c '
import sys, statistics
rows = {}
for line in sys.stdin:
    build, threads, scan, load_walk, walk = line.split()
    rows.setdefault((build, int(threads)), []).append((float(scan), float(load_walk) - float(walk), float(walk)))
print("build threads  scan_ms  load_ms  walk_ms   (medians)")
for (build, threads), r in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0] != "prev")):
    med = [statistics.median(x[i] for x in r) for i in range(3)]
    print(f"{build:5} {threads:7d} {med[0]:8.2f} {med[1]:8.2f} {med[2]:8.2f}")
'
