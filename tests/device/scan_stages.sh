#!/usr/bin/env bash
# On the GPU machine: the library scan by stage on the bench fleet, one thread,
# each run pinned to one CPU. .devbin/scant/bench_scan is a throwaway build with
# tests/device/scan_stages.patch applied (a SCANT line on stderr: programs
# loaded and read, /proc listed, processes read, the css_set re-check);
# .devbin/bench_scan --phases splits the first into load and walk.
# Prints the medians last.   RUNS=N (default 21)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BIN=$PWD/.devbin
export LD_LIBRARY_PATH=$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
out=${OUT:-/tmp}
[[ -x $BIN/scant/bench_scan ]] || { echo "scan_stages.sh: no .devbin/scant/bench_scan" >&2; exit 2; }
# shellcheck disable=SC2016  # $DEVS is expanded by the harness's sh -c
PATH=$BIN/peers:$PATH "$BIN/bench_scan_run" --bench-scan "$BIN/bench_scan" --gpureap "$BIN/gpureap" \
  --repeat 1 --extra "for i in \$(seq ${RUNS:-21}); do
    SCANT=1 taskset -c 1 $BIN/scant/bench_scan --fd-source bpf --threads 1 \$DEVS 2>&1 >/dev/null | grep SCANT
    taskset -c 1 $BIN/bench_scan --phases --fd-source bpf --threads 1 \$DEVS | grep -o 'scan_ms=.*'
  done" >"$out/scan-stages.txt" 2>&1
python3 - "$out/scan-stages.txt" <<'PY'
import re
import statistics
import sys

rows = {}
for line in open(sys.argv[1]):
    if line.startswith("SCANT"):
        f = line.split()[1:]
        for k, v in zip(f[::2], f[1::2]):
            rows.setdefault(k, []).append(float(v))
    m = re.search(r"scan_ms=([0-9.]+).*load_walk_ms=([0-9.]+) walk_ms=([0-9.]+)", line)
    if m:
        s, lw, w = map(float, m.groups())
        rows.setdefault("phases: scan", []).append(s)
        rows.setdefault("phases: load", []).append(lw - w)
        rows.setdefault("phases: walk", []).append(w)
print(f"stage             median ms  ({len(rows.get('kernel', []))} pinned runs, one thread)")
for k, v in rows.items():
    print(f"{k:16s} {statistics.median(v):9.2f}")
PY
