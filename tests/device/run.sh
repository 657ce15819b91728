#!/usr/bin/env bash
# On the GPU machine: run gpureap's real-GPU checks (issues 3, 4, 5, 12) with the
# binaries staged by tests/device/stage.sh into .devbin/ (carried by the
# device tool). Writes the log and a results file under $OUT when set.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export BIN=$PWD/.devbin
export LD_LIBRARY_PATH=$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Shared-host safety: never NVLink multicast.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv | tee "$out/nvidia-smi.txt"
uname -r | tee "$out/kernel.txt"
"$BIN/gpureap" --version || { echo "gpureap does not run here:"; ldd "$BIN/gpureap"; exit 2; }
# The kernel-dependent unit tests (BPF iterators, CO-RE against this kernel's BTF,
# each loader's fallback by failure injection).
"$BIN/proc_unit_tests" --gtest_filter='KernelFds.*:KernelLoaders.*:SharedDescriptions.*' --gtest_brief=1 2>&1 | tee "$out/kernel-tests.txt"
kernel_rc=${PIPESTATUS[0]}
PYTHONUNBUFFERED=1 python3 tests/device/gpu_checks.py 2>&1 | tee "$out/gpu-run.log"
rc=${PIPESTATUS[0]}
# Issue 6's scenario S7 needs two or more GPUs; on one it says so and exits 2.
bash tests/device/nccl/run_s7.sh 2>&1 | tee "$out/s7.txt"
echo "run_s7.sh exit ${PIPESTATUS[0]}" | tee -a "$out/s7.txt"
"$BIN/gpureap" snapshot --gpu nvml -o "$out/snapshot-idle.json" || true
# The scan benchmark on this machine's kernel (not a paravirtualised dev VM):
# 2,000 processes x 25 descriptors, trace vs fuser and lsof in the same run.
if PATH=$BIN/peers:$PATH command -v fuser >/dev/null; then
  PATH=$BIN/peers:$PATH "$BIN/bench_scan_run" --bench-scan "$BIN/bench_scan" --gpureap "$BIN/gpureap" --repeat 5 \
    --threads 8 2>&1 | tee "$out/bench-scan.txt"
else
  echo "bench/scan not run: no fuser" | tee "$out/bench-scan.txt"
fi
(( kernel_rc != 0 )) && rc=1
exit "$rc"
