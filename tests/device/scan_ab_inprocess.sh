#!/usr/bin/env bash
# On the GPU machine: the library scan alone, in-process (bench_scan --repeat:
# the best of 5 scans, no exec or load of the binary counted), for the earlier
# build (.devbin/prev/) and this one (.devbin/), alternately 10 times on one
# fleet of bench/scan; then, where perf exists, where the new scan's time goes.
# Prints the medians table last.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BIN=$PWD/.devbin
export LD_LIBRARY_PATH=$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
out=${OUT:-/tmp}
[[ -x $BIN/prev/bench_scan ]] || { echo "scan_ab_inprocess.sh: no .devbin/prev/bench_scan" >&2; exit 2; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; uname -r; date -u; } | tee "$out/machine.txt"
export PREV=$BIN/prev/bench_scan
# shellcheck disable=SC2016  # expanded by the harness's sh -c, where DEVS and BENCH_SCAN are set
extra='for i in 1 2 3 4 5 6 7 8 9 10; do
  echo "prev $($PREV --fd-source bpf --threads 1 --repeat 5 $DEVS)";
  echo "new $($BENCH_SCAN --fd-source bpf --threads 1 --repeat 5 $DEVS)";
done > "$OUT_DIR/inprocess.txt";
if command -v perf >/dev/null; then
  perf record -o "$OUT_DIR/perf.data" -F 5000 -g $BENCH_SCAN --fd-source bpf --threads 1 --repeat 20 $DEVS >/dev/null 2>&1 &&
  perf report -i "$OUT_DIR/perf.data" --no-children --sort sym 2>/dev/null | grep -E "^ +[0-9]" | head -30 > "$OUT_DIR/perf-self.txt";
  rm -f "$OUT_DIR/perf.data";
else echo "no perf on this machine" > "$OUT_DIR/perf-self.txt"; fi'
OUT_DIR=$out PATH=$BIN/peers:$PATH "$BIN/bench_scan_run" --bench-scan "$BIN/bench_scan" --gpureap "$BIN/gpureap" --repeat 3 \
  --threads 8 --extra "$extra" 2>&1 | tee "$out/harness.txt"
echo
cat "$out/perf-self.txt"
echo
echo "build  scans  median best-of-5 ms  min ms"
for b in prev new; do
  grep "^$b " "$out/inprocess.txt" | sed -E 's/.*scan_ms=([0-9.]+).*/\1/' | sort -n |
    awk -v b="$b" '{v[NR]=$1} END {printf "%-5s  %5d  %20.2f  %6.2f\n", b, NR, (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2), v[1]}'
done
