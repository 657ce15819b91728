#!/usr/bin/env bash
# On the GPU machine, after bench_ab.sh: one fleet, the table walk's two
# builds alternating (bench_scan --reads direct|probe --phases: loaded and
# walked, then walked again by the kept programs), on 1 and 8 threads.
# Writes $OUT/reads.txt; prints the medians last.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BIN=$PWD/.devbin
export LD_LIBRARY_PATH=$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
out=${OUT:-/tmp}
# shellcheck disable=SC2016 # expanded by the harness's sh, with $DEVS set
PATH=$BIN/peers:$PATH "$BIN/bench_scan_run" --bench-scan "$BIN/bench_scan" --gpureap "$BIN/gpureap" --repeat 1 \
  --threads 8 --extra 'for r in 1 2 3 4 5 6 7; do for t in 1 8; do for v in direct probe; do
    printf "%s %s " $v $t; $BENCH_SCAN --reads $v --phases --threads $t $DEVS 2>&1 | tail -1 |
    grep -o "loader=[a-z_]*\|scan_ms=[0-9.]*\|load_walk_ms=[0-9.]*\|walk_ms=[0-9.]*\|note=.*" | tr "\n" " "; echo; done; done; done' \
  >"$out/reads.txt" 2>&1
rc=$?
python3 - "$out/reads.txt" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 3 or f[0] not in ("direct", "probe"):
        continue
    kv = dict(x.split("=", 1) for x in f[2:] if "=" in x)
    rows.setdefault((f[0], int(f[1])), []).append(kv)
print("reads   threads  n  scan_ms  load_walk_ms  walk_ms  (medians; loader)")
for (reads, threads), runs in sorted(rows.items(), key=lambda r: (r[0][1], r[0][0])):
    med = lambda k: statistics.median(float(r[k]) for r in runs if k in r)
    print(f"{reads:7} {threads:7} {len(runs):2} {med('scan_ms'):8.2f} {med('load_walk_ms'):13.2f} "
          f"{med('walk_ms'):8.2f}  {runs[0].get('loader', '?')}")
PY
exit "$rc"
