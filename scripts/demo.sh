#!/usr/bin/env bash
# The main job: `gpureap trace` on this node. Where an NVIDIA driver answers,
# it traces the real GPUs. Where none does, it stages the plan's failures on
# the built-in simulated GPU — a healthy worker, a worker that ignores SIGTERM
# left as an orphan, a zombie, and a context inherited by a forked child whose
# creator was killed — traces them, and cleans up what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/default/src/cli/gpureap
worker=build/default/src/workers/gpureap-worker
[[ -x $bin && -x $worker ]] || { echo "demo: build first (make build)" >&2; exit 2; }

if [[ ${GPUREAP_DEMO_GPU:-auto} != sim ]] && ldconfig -p 2>/dev/null | grep -q libnvidia-ml.so.1; then
  echo "demo: NVIDIA driver found; tracing the real GPUs" >&2
  exec "$bin" trace --gpu nvml "$@"
fi

export GPUREAP_SIM_DIR
GPUREAP_SIM_DIR=$(mktemp -d /tmp/gpureap-demo-XXXXXX)
pids=()
cleanup() {
  # Only the processes this script started, by the pids it recorded.
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$GPUREAP_SIM_DIR"
}
trap cleanup EXIT

"$worker" init-sim --devices 2 >/dev/null
echo "demo: no NVIDIA driver; staging the plan's scenarios on the simulated GPU ($GPUREAP_SIM_DIR)" >&2

# Starts a worker in the background and reads its ready line (its first
# stdout line) through a FIFO into $ready; no command substitution, so the
# worker stays this shell's child and its pid is recorded.
start_worker() {
  local fifo="$GPUREAP_SIM_DIR/ready.fifo"
  mkfifo "$fifo"
  "$worker" "$@" >"$fifo" &
  pids+=($!)
  read -r ready <"$fifo"
  rm -f "$fifo"
}

start_worker hold --gpu sim --device 0 --bytes $((2 * 1024 ** 3))
start_worker hold --gpu sim --device 1 --bytes $((1024 ** 3)) --ignore-term
start_worker zombie-maker --count 2
start_worker fork-after-init --gpu sim --device 1 --bytes $((2560 * 1024 ** 2))
creator=${pids[-1]}
child=$(sed -E 's/.*"child": *([0-9]+).*/\1/' <<<"$ready")
pids+=("$child")
# The creator dies; its forked child keeps the context (FACTS.md, measured on an H200).
kill -KILL "$creator"
wait "$creator" 2>/dev/null || true

set +e
"$bin" trace --gpu sim "$@"
rc=$?
set -e
echo "demo: gpureap trace exited $rc (0 clean, 1 findings, 2 could not check)" >&2
