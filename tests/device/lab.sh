#!/usr/bin/env bash
# On the GPU machine: `gpureap lab` (issue 11) with the plan's real graces on a
# real GPU: the C++ workers on CUDA's driver API, then the plan's PyTorch
# programs (--workload torch). Each run includes the ten-worker and uid-1000
# variants of S1. Binaries come from tests/device/stage.sh (.devbin/).
# Writes each run's directory as a tarball and the logs under $OUT; prints
# the GiB·s tables last.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
export BIN=$PWD/.devbin
export LD_LIBRARY_PATH=$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Shared-host safety: never NVLink multicast (the lab sets them in every pod too).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${OUT:-/tmp/lab-device}
mkdir -p "$out"
work=$(mktemp -d /tmp/gpureap-lab-device-XXXXXX)
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv | tee "$out/nvidia-smi-before.txt"
uname -r | tee -a "$out/nvidia-smi-before.txt"
"$BIN/gpureap" --version || { echo "gpureap does not run here:"; ldd "$BIN/gpureap"; exit 2; }

rc=0
for workload in ${LAB_WORKLOADS:-cpp torch}; do
  echo "=== gpureap lab --workload $workload ===" | tee -a "$out/lab.log"
  # shellcheck disable=SC2086  # LAB_ARGS is a list of flags
  "$BIN/gpureap" lab --gpu nvml --workload "$workload" --out "$work/lab-$workload" ${LAB_ARGS:-} \
    >"$out/lab-$workload.stdout" 2> >(tee -a "$out/lab.log" >&2)
  r=$?
  echo "gpureap lab --workload $workload: exit $r" | tee -a "$out/lab.log"
  (( r != 0 )) && rc=1
  tar czf "$out/lab-$workload.tgz" -C "$work" "lab-$workload"
done
nvidia-smi --query-gpu=memory.used --format=csv | tee "$out/nvidia-smi-after.txt"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv | tee -a "$out/nvidia-smi-after.txt"
for workload in ${LAB_WORKLOADS:-cpp torch}; do
  echo
  echo "--workload $workload"
  sed -n '/^| scenario | title/,/^$/p' "$work/lab-$workload/comparison.md" | cut -d'|' -f2,4,6,7,8,9
done
rm -rf "$work"
exit $rc
