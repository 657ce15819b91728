#!/usr/bin/env bash
# On the GPU machine, in one call: the scan with its programs pinned
# (--bpf-pin-dir on a bpffs this script mounts and unmounts). bench_scan_run
# with the pinned rows (REPEAT runs, default 7) and, in the same fleet,
# ab_pinned.py default against pinned (RUNS alternating runs, default 15,
# with the time in the programs themselves);
# the kernel-dependent BPF unit tests; then perf profiles of the pinned scan
# and the pinned trace (scan_profile.sh). With an earlier build in
# .devbin/prev/ (its gpureap and bench_scan), ab_pinned.py runs it too, unpinned and pinned.
# With a gpureap built with tests/device/trace_stages.patch in .devbin/stages/,
# trace_stages.py times trace's stages in the same fleet, pinned and not.
# Everything goes back as $OUT/batch.tgz; the tables are printed last.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BIN=$PWD/.devbin
export LD_LIBRARY_PATH=$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
out=${OUT:-/tmp}
work=$(mktemp -d)
bpffs=$(mktemp -d /tmp/gpureap-bpffs.XXXXXX)
mount -t bpf bpf "$bpffs" || { echo "scan_pinned_batch.sh: cannot mount a bpffs on $bpffs" >&2; exit 2; }
# The pins live as long as the mount: unmount it whatever happens.
trap 'umount "$bpffs"; rmdir "$bpffs"' EXIT
pins=$bpffs/pins
{
  date -u +%FT%TZ
  uname -r
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  nproc
  grep -m1 'model name' /proc/cpuinfo
  # What the fleet's children inherit, and trace copies with each one's argv.
  echo "environment bytes $(env | wc -c)"
  # Kernel threads (PF_KTHREAD) and workqueue workers (PF_WQ_WORKER) among them:
  # the ones whose /proc names the scan may read.
  cat /proc/[0-9]*/stat 2>/dev/null | sed 's/.*) //' |
    awk '{kt = int($7 / 2097152) % 2; k += kt; w += kt && int($7 / 32) % 2}
      END {print "kernel threads", k, "workers", w}'
} >"$work/machine.txt" 2>&1
builds="default=$BIN pinned=$BIN@$pins-ab"
[[ -x $BIN/prev/gpureap && -x $BIN/prev/bench_scan ]] && builds="$builds prev=$BIN/prev prev-pinned=$BIN/prev@$pins-prev"
extra="PROG_STATS=1 python3 bench/scan/ab_pinned.py ${RUNS:-15} $builds"
[[ -x $BIN/stages/gpureap ]] &&
  extra="$extra; python3 tests/device/trace_stages.py ${RUNS:-15} 1 pinned=$BIN/stages/gpureap@$pins-stages unpinned=$BIN/stages/gpureap"
PATH=$BIN/peers:$PATH "$BIN/bench_scan_run" --bench-scan "$BIN/bench_scan" --gpureap "$BIN/gpureap" \
  --repeat "${REPEAT:-7}" --bpf-pin-dir "$pins" --extra "$extra" >"$work/harness.txt" 2>&1
"$BIN/proc_unit_tests" --gtest_filter='BpfPins*:KernelFds*:KernelLoaders*:ScanReal*' >"$work/unit.txt" 2>&1
echo "unit tests rc $?" >>"$work/unit.txt"
# shellcheck disable=SC2016  # $DEVS: expanded by the harness's sh -c
OUT=$work NAME=scan-pinned RUNS=${PROFILE_RUNS:-30} bash tests/device/scan_profile.sh \
  ".devbin/bench_scan --fd-source bpf --threads 1 --bpf-pin-dir $pins-prof \$DEVS" >"$work/profile-scan.log" 2>&1
OUT=$work NAME=trace-pinned RUNS=${PROFILE_RUNS:-30} bash tests/device/scan_profile.sh \
  ".devbin/gpureap trace --gpu sim --json --threads 1 --bpf-pin-dir $pins-prof" >"$work/profile-trace.log" 2>&1
tar -czf "$out/batch.tgz" -C "$work" .
cat "$work/machine.txt"
tail -3 "$work/unit.txt"
echo "== profile, pinned scan (children, self) =="
head -25 "$work/profile-scan-pinned-children.txt"
echo "== profile, pinned trace =="
head -25 "$work/profile-trace-pinned-children.txt"
echo "== harness =="
grep -vE '^\s*$' "$work/harness.txt" | tail -60
