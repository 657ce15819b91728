#!/usr/bin/env bash
# Here: builds tests/device/css_cost.cpp against build/default into
# .devbin/css_cost. There (or here): runs it 3 times, pinned, inside a bench fleet.
#   tests/device/css_cost.sh --build | tests/device/css_cost.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ ${1:-} == --build ]]; then
  b=build/default
  g++ -std=c++20 -O2 -Isrc tests/device/css_cost.cpp $b/src/proc/libgpureap_proc.a \
    $b/src/proc/libgpureap_proc_bpf.a $b/src/sys/libgpureap_sys.a \
    /usr/lib/x86_64-linux-gnu/libbpf.a /usr/lib/x86_64-linux-gnu/libelf.a /usr/lib/x86_64-linux-gnu/libz.a \
    -static-libstdc++ -static-libgcc -o .devbin/css_cost
  exit 0
fi
BIN=$PWD/.devbin
export LD_LIBRARY_PATH=$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PATH=$BIN/peers:$PATH "$BIN/bench_scan_run" --bench-scan "$BIN/bench_scan" --gpureap "$BIN/gpureap" \
  --repeat 1 --extra "for i in 1 2 3; do taskset -c 1 $BIN/css_cost; done" 2>&1 | grep '^tasks'
