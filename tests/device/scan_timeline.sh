#!/usr/bin/env bash
# On the GPU machine: where one scan's wall time goes, on the bench/scan
# fleet. strace -f -tt -T of bench_scan and of `gpureap trace --json`, on 1
# and N threads (strace is staged in .devbin/peers by hand, with its libs):
# the logs, gzipped, under $OUT.
#   tests/device/scan_timeline.sh [THREADS]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BIN=$PWD/.devbin
export LD_LIBRARY_PATH=$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
out=${OUT:-/tmp}
n=${1:-8}
export STRACE=$BIN/peers/strace GPUREAP=$BIN/gpureap N=$n OUTDIR=$out
# shellcheck disable=SC2016  # expanded by the harness's sh -c, where DEVS and BENCH_SCAN are set
PATH=$BIN/peers:$PATH "$BIN/bench_scan_run" --bench-scan "$BIN/bench_scan" --gpureap "$BIN/gpureap" \
  --repeat 1 --threads "$n" --extra '
  for t in 1 $N; do
    for i in 1 2 3; do $BENCH_SCAN --fd-source bpf --threads $t $DEVS >/dev/null 2>&1; done
    $STRACE -f -tt -T -o $OUTDIR/scan-$t.strace $BENCH_SCAN --fd-source bpf --threads $t $DEVS
    $STRACE -f -tt -T -o $OUTDIR/trace-$t.strace $GPUREAP trace --gpu sim --json --fd-source bpf --threads $t >/dev/null 2>&1
  done
  gzip -f $OUTDIR/*.strace' 2>&1 | tail -12
ls -la "$out"
