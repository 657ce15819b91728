#!/usr/bin/env bash
# On the GPU machine: the library scan (bench_scan, one scan per exec) of
# several builds staged by hand under .devbin/var/NAME/bench_scan, run
# alternately on one bench/scan fleet (ROUNDS rounds, default 15), each
# timed by its own in-process clock (scan_ms) and by the wall clock around
# the exec. Before the fleet: the host's descriptor tables by size (FDSize
# of /proc/PID/status) and each build's fixed cost (best of 20 scans of the
# bare host). Prints the medians table last. PHASES=1 adds --phases (the BPF
# pass alone, loaded then walked by kept programs: load = load_walk_ms -
# walk_ms), PIN="taskset -c 1" prefixes every scan.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BIN=$PWD/.devbin
export LD_LIBRARY_PATH=$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
out=${OUT:-/tmp}
mapfile -t builds < <(cd "$BIN/var" 2>/dev/null && ls)
(( ${#builds[@]} > 0 )) || { echo "scan_variants.sh: nothing under .devbin/var/" >&2; exit 2; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; uname -r; date -u; nproc; } | tee "$out/machine.txt"
echo "== descriptor tables of the host (FDSize: count) ==" | tee "$out/fdsize.txt"
grep -h '^FDSize' /proc/[0-9]*/status 2>/dev/null | awk '{print $2}' | sort -n | uniq -c | tee -a "$out/fdsize.txt"
echo "== fixed cost: best of 20 scans of the bare host ==" | tee "$out/fixed.txt"
for b in "${builds[@]}"; do echo "$b $("$BIN/var/$b/bench_scan" --fd-source bpf --repeat 20)"; done | tee -a "$out/fixed.txt"
export ROUNDS=${ROUNDS:-15}
# shellcheck disable=SC2016  # expanded by the harness's sh -c, where DEVS is set
extra='for r in $(seq "$ROUNDS"); do for b in $BUILDS; do
  t0=$(date +%s%N); line=$($PIN "$VAR/$b/bench_scan" $PHASE_FLAG --fd-source bpf --threads 1 $DEVS); t1=$(date +%s%N);
  echo "$b wall_ms=$(( (t1 - t0) / 1000 )) $line";
done; done > "$OUT_DIR/variants.txt"'
PHASE_FLAG=$([[ ${PHASES:-0} == 1 ]] && echo --phases) PIN=${PIN:-} OUT_DIR=$out VAR=$BIN/var BUILDS="${builds[*]}" PATH=$BIN/peers:$PATH "$BIN/bench_scan_run" \
  --bench-scan "$BIN/bench_scan" --gpureap "$BIN/gpureap" --repeat 3 --threads 8 --extra "$extra" 2>&1 | tee "$out/harness.txt"
echo
echo "build        runs  median scan_ms  min scan_ms  median wall us  load_ms  walk_ms"
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
for b in "${builds[@]}"; do
  scans=$(grep "^$b " "$out/variants.txt" | grep -o 'scan_ms=[0-9.]*' | cut -d= -f2)
  walls=$(grep "^$b " "$out/variants.txt" | grep -o 'wall_ms=[0-9]*' | cut -d= -f2)
  loads=$(grep "^$b " "$out/variants.txt" | sed -nE 's/.*load_walk_ms=([0-9.]+) walk_ms=([0-9.]+).*/\1 \2/p' | awk '{print $1 - $2}')
  walks=$(grep "^$b " "$out/variants.txt" | grep -o ' walk_ms=[0-9.]*' | cut -d= -f2)
  printf "%-12s %4d %15s %12s %15s %8s %8s\n" "$b" "$(wc -l <<<"$scans")" "$(median <<<"$scans")" \
    "$(sort -n <<<"$scans" | head -1)" "$(median <<<"$walls")" "$(median <<<"$loads")" "$(median <<<"$walks")"
done
