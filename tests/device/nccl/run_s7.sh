#!/usr/bin/env bash
# Scenario S7 (issue 6) on a multi-GPU machine: an NCCL job loses rank 0, with
# PyTorch's defaults (baseline) and with the fix (--fixed). Builds nothing: the
# caller built gpureap into build/ (or staged it in .devbin/, or sets GPUREAP).
# Writes s7-<variant>.json and the log under $OUT (else /tmp/s7); prints both
# tables last. Exit: 0 both measured with the finding reported, 1 otherwise,
# 2 could not run (no PyTorch, fewer than 2 GPUs, no gpureap).
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
# Shared-host safety: never NVLink multicast (s7_nccl.py sets them per rank too).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

gpureap=${GPUREAP:-}
if [[ -z $gpureap ]]; then
  for c in .devbin/gpureap build/gpureap build/src/cli/gpureap build/*/src/cli/gpureap; do
    if [[ -x $c ]]; then gpureap=$PWD/$c; break; fi
  done
fi
if [[ -z $gpureap ]]; then
  echo "run_s7.sh: no gpureap binary (build it into build/, or set GPUREAP)" >&2
  exit 2
fi
[[ -d .devbin/lib ]] && export LD_LIBRARY_PATH=$PWD/.devbin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
out=${OUT:-/tmp/s7}
mkdir -p "$out"
python=${PYTHON:-python3}

rc=0
tables=()
for variant in baseline fixed; do
  args=(--gpureap "$gpureap" --json-out "$out/s7-$variant.json")
  [[ $variant == fixed ]] && args+=(--fixed)
  PYTHONUNBUFFERED=1 "$python" tests/device/nccl/s7_nccl.py "${args[@]}" "$@" 2>&1 | tee "$out/s7-$variant.log"
  r=${PIPESTATUS[0]}
  (( r == 2 )) && exit 2
  (( r != 0 )) && rc=1
  tables+=("$(tail -n 1 "$out/s7-$variant.log")")
done
echo
printf '%-9s %5s  %-40s %12s  %s\n' variant ranks "hold after kill" "memory held" finding
printf '%s\n' "${tables[@]}"
exit $rc
