#!/usr/bin/env bash
# Builds and runs the scan benchmark: 2,000 processes x 25 descriptors, then
# fuser, lsof and gpureap's scan (1 and N threads), medians of --repeat runs.
#   bench/scan/run.sh [BUILD_DIR] [bench_scan_run options...]
# Needs fuser (psmisc) and lsof on PATH. Run as root to see every process.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build/default}
shift || true
if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake --preset default -B "$build"
fi
cmake --build "$build" --target bench_scan bench_scan_run gpureap -j2
exec "$build/bench/scan/bench_scan_run" --bench-scan "$build/bench/scan/bench_scan" "$@"
