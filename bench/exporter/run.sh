#!/usr/bin/env bash
# Builds and runs the exporter benchmark: 2,000 GPU processes on 8 simulated
# H200s, the real `gpureap exporter` scanning them; prints its RSS, scrape
# latency (p50, p99) and one scan's CPU against the goals and dcgm-exporter.
#   bench/exporter/run.sh [BUILD_DIR] [bench_exporter_run options...]
# Run as root to see every process.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build/default}
shift || true
if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake --preset default -B "$build"
fi
cmake --build "$build" --target bench_exporter_run gpureap gpureap-exporter -j2
exec "$build/bench/exporter/bench_exporter_run" --gpureap "$build/src/cli/gpureap" "$@"
