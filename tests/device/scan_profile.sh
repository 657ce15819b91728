#!/usr/bin/env bash
# On the GPU machine: where a scan's time goes, by symbol, kernel and user.
# perf (Debian's, with its libraries, carried as .devbin/perf.tar.xz: the
# GPU machine has none) samples cpu-clock over RUNS runs (default 30, each a
# fresh exec pinned to one CPU) of COMMAND on the bench fleet, where $DEVS
# names the device files and the simulated GPU is set. COMMAND defaults to
# the library scan, `.devbin/bench_scan --fd-source bpf --threads 1 $DEVS`;
# `.devbin/gpureap trace --gpu sim --json --threads 1` profiles trace.
# Writes the top symbols, with their children and by themselves, to
# $OUT/profile-NAME-*.txt (NAME default "scan"); prints their first lines.
#   NAME=trace tests/device/scan_profile.sh '.devbin/gpureap trace --gpu sim --json --threads 1'
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BIN=$PWD/.devbin
export LD_LIBRARY_PATH=$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
out=${OUT:-/tmp}
name=${NAME:-scan}
# shellcheck disable=SC2016  # $DEVS: expanded by the harness's sh -c
command=${1:-'.devbin/bench_scan --fd-source bpf --threads 1 $DEVS'}
[[ -f $BIN/perf.tar.xz ]] || { echo "scan_profile.sh: no .devbin/perf.tar.xz (PERF=1 tests/device/stage.sh)" >&2; exit 2; }
tmp=/tmp/gpureap-perf
rm -rf "$tmp" && mkdir -p "$tmp" && tar -xJf "$BIN/perf.tar.xz" -C "$tmp" || exit 2
# A command, not a function: the harness runs --extra with sh -c.
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/lib exec %s/perf "$@"\n' "$tmp" "$tmp" >"$tmp/run"
chmod +x "$tmp/run"
# shellcheck disable=SC2016  # expanded by the harness's sh -c
PERF=$tmp/run PERF_DATA=$tmp/perf.data COMMAND=$command RUNS=${RUNS:-30} PATH=$BIN/peers:$PATH \
  "$BIN/bench_scan_run" --bench-scan "$BIN/bench_scan" --gpureap "$BIN/gpureap" --repeat 1 --extra '
  for i in 1 2 3 4 5; do sh -c "$COMMAND" >/dev/null; done
  $PERF record -e cpu-clock -F 20000 -g -o "$PERF_DATA" -- sh -c "for i in \$(seq $RUNS); do
    taskset -c 1 $COMMAND >/dev/null; done"' >"$out/profile-$name-harness.txt" 2>&1
# One program's symbol per load: its tag differs, its name does not.
report() {
  "$tmp/run" report -i "$tmp/perf.data" "$1" --sort sym --stdio -g none 2>/dev/null | grep '%' |
    sed -E 's/bpf_prog_[0-9a-f]+_/bpf_prog_/'
}
report --children | awk '{k = $4; for (i = 5; i <= NF; i++) k = k " " $i; c[k] += $1; s[k] += $2}
  END {for (k in c) printf "%7.2f %7.2f  %s\n", c[k], s[k], k}' | sort -rn | head -150 >"$out/profile-$name-children.txt"
report --no-children | awk '{k = $3; for (i = 4; i <= NF; i++) k = k " " $i; s[k] += $1}
  END {for (k in s) printf "%7.2f  %s\n", s[k], k}' | sort -rn | head -150 >"$out/profile-$name-self.txt"
"$tmp/run" report -i "$tmp/perf.data" --stdio 2>/dev/null | grep -m1 '^# Samples' || true
echo "== $name, with children (children%, self%) =="
head -50 "$out/profile-$name-children.txt"
echo "== $name, self =="
head -30 "$out/profile-$name-self.txt"
