#!/usr/bin/env bash
# The deployment pipeline, end to end on this machine (docs/deploy-images.md):
#   1. build every image of deploy/images/list.sh with buildah (own storage)
#   2. start Debian's docker-registry on 127.0.0.1 (a free port, own storage)
#   3. push every image there, and read each back with skopeo
#   4. start containerd (own root, state and socket) and pull every image
#      from the registry into its k8s.io namespace
#   5. run every image with runc through containerd and prove it:
#      - PID 1 is the scenario's pid1_argv (gpureap lab --print-scenarios),
#        seen both as the image config and as /proc/1/cmdline inside;
#      - the worker starts, is orphaned to PID 1, and `gpureap observe` inside
#        the container names it; the cuda-worker image's dynamic worker finds
#        its loader and reports libcuda missing (exit 2), as on a GPU-less node;
#      - SIGTERM to the task does what the scenario says (nofix: PID 1 ignores
#        it; tini: the task ends; gpureap-init: the TERM-ignoring GPU holder
#        is KILLed after --gpu-grace);
#      - the node image serves /healthz and /metrics.
# Everything it starts is stopped on success and on failure (trap), by PID.
#
#   tests/deploy/pipeline/pipeline.sh [--build-dir DIR] [--keep]
# Needs root, the binaries of a build tree (GPUREAP_BUILD_DIR, default
# build/default) and scripts/install-deps.sh's packages.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/deploy/lib/registry.sh
source "$here/../lib/registry.sh"
repo=$(cd "$here/../../.." && pwd)
build_dir=${GPUREAP_BUILD_DIR:-$repo/build/default}
keep=false
while (($#)); do
  case $1 in
    --build-dir) build_dir=$2; shift 2 ;;
    --keep) keep=true; shift ;;
    *) echo "usage: $0 [--build-dir DIR] [--keep]" >&2; exit 64 ;;
  esac
done
build_dir=$(cd "$build_dir" && pwd)
export GPUREAP_BUILD_DIR=$build_dir

t0=$(date +%s.%N)
say() { printf '[pipeline %6.1fs] %s\n' "$(echo "$(date +%s.%N) - $t0" | bc)" "$*" >&2; }
fail() { say "FAIL: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || fail "needs root (containerd, runc, mounts)"
for tool in buildah skopeo containerd ctr containerd-shim-runc-v2 runc docker-registry jq curl nsenter bc python3; do
  command -v "$tool" >/dev/null || fail "$tool not found (scripts/install-deps.sh installs it)"
done
gpureap=$build_dir/src/cli/gpureap
[[ -x $gpureap ]] || fail "$gpureap not built (cmake --build --preset default --target gpureap gpureap-exporter gpureap-init gpureap-worker gpureap-worker-dynamic)"

work=$(mktemp -d "${TMPDIR:-/tmp}/gpureap-pipeline-XXXXXX")
chmod 0711 "$work"
registry_pid=""
containerd_pid=""
sock=$work/containerd/containerd.sock
containers=()

ctr_() { ctr --address "$sock" --namespace k8s.io "$@"; }

cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  if [[ -n $containerd_pid ]]; then
    for c in "${containers[@]}"; do
      ctr_ task kill -s SIGKILL "$c" >/dev/null 2>&1
      for _ in $(seq 50); do
        ctr_ task ls 2>/dev/null | awk -v c="$c" '$1 == c && $3 == "RUNNING" {f=1} END {exit !f}' || break
        sleep 0.1
      done
      ctr_ task delete "$c" >/dev/null 2>&1
      ctr_ container delete "$c" >/dev/null 2>&1
    done
    kill -TERM "$containerd_pid" 2>/dev/null
    timeout 10 tail --pid="$containerd_pid" -s 0.1 -f /dev/null || kill -KILL "$containerd_pid" 2>/dev/null
    wait "$containerd_pid" 2>/dev/null
  fi
  # Shims our containerd started (their command line names our socket).
  local p
  for p in $(pgrep -f -- "-address $sock" 2>/dev/null); do
    [[ $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) == *"-address $sock "* ]] && kill -KILL "$p" 2>/dev/null
  done
  if [[ -n $registry_pid ]]; then
    kill -TERM "$registry_pid" 2>/dev/null
    wait "$registry_pid" 2>/dev/null
  fi
  # Mounts left under the work dir (a task killed mid-way), deepest first.
  findmnt -rn -o TARGET | grep -F "$work/" | sort -r | while read -r m; do umount -l "$m"; done
  if $keep; then
    say "kept $work"
  else
    rm -rf "$work"
  fi
  if ((rc == 0)); then say "PASS"; else say "FAILED (exit $rc); logs were in $work"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

scenarios=$("$gpureap" lab --print-scenarios) || fail "$gpureap lab --print-scenarios failed"

# --- 1. build ----------------------------------------------------------------
mkdir -p "$work/storage" "$work/registry" "$work/containerd" "$work/logs"
cat >"$work/storage.conf" <<EOF
[storage]
driver = "vfs"
graphroot = "$work/storage/graph"
runroot = "$work/storage/run"
EOF
export CONTAINERS_STORAGE_CONF=$work/storage.conf

registry_start "$work/registry" || fail "$registry_error"
port=$registry_port
say "registry up on 127.0.0.1:$port (pid $registry_pid)"

export GPUREAP_IMAGE_REPO=127.0.0.1:$port/gpu-zombie-test
export GPUREAP_NODE_IMAGE_REPO=127.0.0.1:$port/gpureap
tag=pipeline-$$
declare -A ref_of
mapfile -t names < <("$repo/deploy/images/list.sh")
((${#names[@]} > 0)) || fail "deploy/images/list.sh printed no image"
for n in "${names[@]}"; do
  out=$("$repo/deploy/images/build.sh" "$n" "$tag" 2>"$work/logs/build-$n.log") ||
    fail "build.sh $n failed: $(tail -3 "$work/logs/build-$n.log")"
  mapfile -t refs <<<"$out"
  ((${#refs[@]} >= 1)) || fail "build.sh $n printed no reference"
  for r in "${refs[@]}"; do
    buildah push --quiet --tls-verify=false "$r" "docker://$r" >/dev/null 2>"$work/logs/push-$n.log" ||
      fail "push $r: $(tail -3 "$work/logs/push-$n.log")"
  done
  ref_of[$n]=${refs[-1]}
  say "built and pushed $n: ${refs[*]}"
done

# --- 2. the registry holds them ------------------------------------------------
for n in "${names[@]}"; do
  r=${ref_of[$n]}
  got=$(skopeo inspect --tls-verify=false --config "docker://$r") || fail "skopeo cannot read $r back"
  want=$(buildah inspect --type image "$r" | jq -c '.OCIv1.config | {Entrypoint, Cmd, Env}')
  [[ $(jq -c '.config | {Entrypoint, Cmd, Env}' <<<"$got") == "$want" ]] ||
    fail "$r: the registry's config differs from the built one"
done
say "registry serves every image with the built config"

# --- 3. containerd -------------------------------------------------------------
cat >"$work/containerd.toml" <<EOF
version = 2
root = "$work/containerd/root"
state = "$work/containerd/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$work/containerd/opt"
EOF
containerd --config "$work/containerd.toml" >"$work/logs/containerd.log" 2>&1 &
containerd_pid=$!
for _ in $(seq 200); do
  kill -0 "$containerd_pid" 2>/dev/null || fail "containerd exited: $(tail -5 "$work/logs/containerd.log")"
  ctr --address "$sock" version >/dev/null 2>&1 && break
  sleep 0.05
done
ctr --address "$sock" version >/dev/null 2>&1 || fail "containerd did not answer on $sock"
say "containerd up (pid $containerd_pid, $sock)"

for n in "${names[@]}"; do
  ctr_ images pull --plain-http "${ref_of[$n]}" >"$work/logs/pull-$n.log" 2>&1 ||
    fail "ctr pull ${ref_of[$n]}: $(tail -3 "$work/logs/pull-$n.log")"
done
have=$(ctr_ images ls -q)
for n in "${names[@]}"; do
  grep -qxF "${ref_of[$n]}" <<<"$have" || fail "${ref_of[$n]} not in containerd's k8s.io namespace"
done
say "containerd's k8s.io namespace holds all ${#names[@]} images"

# --- 4. run them ---------------------------------------------------------------
# task_pid ID: the host PID of the task's PID 1 (empty when not running).
task_pid() { ctr_ task ls | awk -v c="$1" '$1 == c && $3 == "RUNNING" {print $2}'; }
in_ctr() {
  local c=$1; shift
  ctr_ task exec --exec-id "x$RANDOM$RANDOM" "$c" "$@"
}
run_image() { # NAME ID [ctr run options...]
  local n=$1 c=$2; shift 2
  ctr_ run -d --runtime io.containerd.runc.v2 "$@" "${ref_of[$n]}" "$c" >"$work/logs/run-$c.log" 2>&1 ||
    fail "ctr run $n: $(tail -3 "$work/logs/run-$c.log")"
  containers+=("$c")
  local pid=""
  for _ in $(seq 100); do
    pid=$(task_pid "$c")
    [[ -n $pid ]] && break
    sleep 0.05
  done
  [[ -n $pid ]] || fail "$n: task $c is not running"
}
# image_argv NAME: the image's ENTRYPOINT + CMD as JSON.
image_argv() { buildah inspect --type image "${ref_of[$1]}" | jq -c '(.OCIv1.config.Entrypoint // []) + (.OCIv1.config.Cmd // [])'; }
# pid1_cmdline ID: /proc/1/cmdline inside the container, as a JSON array.
# The node image has no busybox: there it is read from the host's /proc.
pid1_cmdline() {
  if [[ $1 == pl-node-* ]]; then
    cat "/proc/$(task_pid "$1")/cmdline"
  else
    in_ctr "$1" busybox cat /proc/1/cmdline
  fi | jq -Rsc 'split("\u0000") | map(select(. != ""))'
}
wait_pid1() { # ID WANT_JSON: PID 1 becomes WANT (bash -c execs its command)
  local got=""
  for _ in $(seq 50); do
    got=$(pid1_cmdline "$1")
    [[ $got == "$2" ]] && return 0
    sleep 0.1
  done
  fail "$1: PID 1 is $got, want $2"
}
task_gone_within() { # ID SECONDS: 0 when the task's PID 1 exits in time
  local pid
  pid=$(task_pid "$1")
  [[ -z $pid ]] && return 0
  timeout "$2" tail --pid="$pid" -s 0.05 -f /dev/null
}
rootfs_of() { echo "$work/containerd/state/io.containerd.runtime.v2.task/k8s.io/$1/rootfs"; }

sim_env=(--env GPUREAP_SIM_DIR=/tmp/sim --env GPUREAP_INIT_GPU_DEVICE_PREFIX=/tmp/sim/dev/)
# start_workers ID: the plan's operator step (`kubectl exec … parent`): prints
# the worker's PID in the container once it holds its memory and PID 1 has
# adopted it (the parent exits 0.2 s after the spawn, without waiting).
start_workers() {
  local c=$1 log ready="" wpid ppid=""
  log=$(rootfs_of "$c")/tmp/workers.log
  in_ctr "$c" bash -c 'GPUREAP_PARENT_EXIT_AFTER=0.2 GPUREAP_WORKER_BYTES=64M exec start-workers >/tmp/workers.log 2>&1' ||
    fail "$c: start-workers failed: $(cat "$log" 2>/dev/null)"
  for _ in $(seq 100); do
    ready=$(grep -m1 -E '^\{"mode":"(hold|fork-after-init)"' "$log" 2>/dev/null || true)
    [[ -n $ready ]] && break
    grep -q '"event":"error"' "$log" 2>/dev/null && break
    sleep 0.05
  done
  [[ -n $ready ]] || fail "$c: no worker became ready: $(cat "$log" 2>/dev/null)"
  wpid=$(jq -r .pid <<<"$ready")
  for _ in $(seq 100); do
    # shellcheck disable=SC2016 # awk's $2, not the shell's
    ppid=$(in_ctr "$c" busybox awk '/^PPid:/ {print $2}' "/proc/$wpid/status")
    [[ $ppid == 1 ]] && break
    sleep 0.05
  done
  [[ $ppid == 1 ]] || fail "$c: worker $wpid has parent $ppid, not PID 1, after its parent exited"
  echo "$wpid"
}
for n in "${names[@]}"; do
  c=pl-$n-$$
  case $n in
    node)
      run_image "$n" "$c" --mount "type=bind,src=/,dst=/host,options=rbind:ro"
      # `gpureap exporter ARGS` execs the program beside it: PID 1 becomes
      # /usr/bin/gpureap-exporter ARGS.
      want=$(image_argv "$n" | jq -c 'if .[0:2] == ["/usr/bin/gpureap", "exporter"]
        then ["/usr/bin/gpureap-exporter"] + .[2:] else . end')
      wait_pid1 "$c" "$want"
      pid=$(task_pid "$c")
      ok=false
      for _ in $(seq 100); do
        if nsenter -t "$pid" -n curl -fsS "http://127.0.0.1:9464/healthz" >"$work/logs/healthz" 2>/dev/null; then
          ok=true
          break
        fi
        sleep 0.1
      done
      $ok || fail "node: /healthz did not answer 200 on :9464 in the task's network namespace"
      nsenter -t "$pid" -n curl -fsS "http://127.0.0.1:9464/metrics" >"$work/logs/metrics" ||
        fail "node: /metrics failed"
      grep -q '^gpureap_build_info{' "$work/logs/metrics" || fail "node: /metrics lacks gpureap_build_info"
      say "node: PID 1 $want, /healthz '$(head -c 40 "$work/logs/healthz")', /metrics $(grep -c '^gpureap_' "$work/logs/metrics") gpureap series"
      ;;
    cuda-worker)
      run_image "$n" "$c" "${sim_env[@]}"
      want=$(image_argv "$n")
      wait_pid1 "$c" "$want"
      rc=0
      in_ctr "$c" gpureap-worker-dynamic hold --gpu cuda >"$work/logs/cuda.out" 2>"$work/logs/cuda.err" || rc=$?
      ((rc == 2)) || fail "cuda-worker: gpureap-worker-dynamic --gpu cuda exited $rc, want 2 (libcuda.so.1 missing): $(cat "$work/logs/cuda.err")"
      say "cuda-worker: PID 1 $want; the dynamic worker loads and reports libcuda.so.1 missing (exit 2) without a GPU"
      ;;
    *)
      scen=$(jq -c --arg t "$n" '[.scenarios[] | select(.image_tag == $t)][0]' <<<"$scenarios")
      [[ $scen != null ]] || fail "$n: no scenario of gpureap lab --print-scenarios has image_tag $n"
      argv=$(jq -c .pid1_argv <<<"$scen")
      pid1=$(jq -r .pid1 <<<"$scen")
      [[ $(image_argv "$n") == "$argv" ]] || fail "$n: ENTRYPOINT+CMD $(image_argv "$n") is not pid1_argv $argv"
      run_image "$n" "$c" "${sim_env[@]}" --log-uri "file://$work/logs/$c.pid1.log"
      want=$argv
      # bash -c 'sleep infinity' execs its one command: PID 1 becomes sleep.
      [[ $pid1 == bash ]] && want=$(jq -c '.[2] | split(" ")' <<<"$argv")
      wait_pid1 "$c" "$want"
      exe=$(in_ctr "$c" busybox readlink /proc/1/exe)
      # The CUDA worker the chart execs on a real GPU (worker_argv) loads here too.
      rc=0
      in_ctr "$c" gpureap-worker-dynamic hold --gpu cuda >"$work/logs/$c.cuda.out" 2>"$work/logs/$c.cuda.err" || rc=$?
      ((rc == 2)) || fail "$n: gpureap-worker-dynamic --gpu cuda exited $rc, want 2 (libcuda.so.1 missing): $(cat "$work/logs/$c.cuda.err")"
      wpid=$(start_workers "$c")
      obs=$(in_ctr "$c" gpureap observe --gpu sim --json 2>"$work/logs/observe-$c.err") || true
      [[ $(jq -c .pid1.cmdline <<<"$obs") == "$want" ]] ||
        fail "$n: gpureap observe inside sees PID 1 $(jq -c .pid1.cmdline <<<"$obs" 2>&1), want $want"
      jq -e --argjson p "$wpid" '[.orphans[] | select(.pid == $p)] | length == 1' <<<"$obs" >/dev/null ||
        fail "$n: gpureap observe inside does not list worker $wpid as an orphan: $(jq -c .orphans <<<"$obs" 2>&1)"
      t_term=$(date +%s.%N)
      ctr_ task kill -s SIGTERM "$c"
      case $pid1 in
        bash)
          ! task_gone_within "$c" 1 || fail "$n: PID 1 ($want) ended on SIGTERM; the scenario's PID 1 ignores it"
          ctr_ task kill -s SIGKILL "$c"
          task_gone_within "$c" 5 || fail "$n: the task survived SIGKILL"
          stop="PID 1 ignored SIGTERM for 1 s (the kubelet waits out the grace), SIGKILL ended it"
          ;;
        tini)
          task_gone_within "$c" 5 || fail "$n: tini did not end the task within 5 s of SIGTERM"
          stop="SIGTERM ended the task in $(printf '%.2f' "$(echo "$(date +%s.%N) - $t_term" | bc)") s (tini exits with its child)"
          ;;
        gpureap-init)
          gg=$(jq -r .gpureap_init.gpu_grace_seconds <<<"$scen")
          task_gone_within "$c" "$(echo "$gg + 8" | bc)" || fail "$n: gpureap-init did not end the task within --gpu-grace + 8 s"
          took=$(echo "$(date +%s.%N) - $t_term" | bc)
          (($(echo "$took >= $gg * 0.8" | bc))) ||
            fail "$n: the task ended $took s after SIGTERM, before the TERM-ignoring GPU holder's --gpu-grace $gg s"
          grep -q "escalated: SIGKILL pid=$wpid .*gpu=yes limit=--gpu-grace" "$work/logs/$c.pid1.log" ||
            fail "$n: gpureap-init's log does not say it KILLed worker $wpid as a GPU holder: $(cat "$work/logs/$c.pid1.log")"
          stop="gpureap-init KILLed the TERM-ignoring GPU holder; the task ended $(printf '%.2f' "$took") s after SIGTERM (--gpu-grace $gg)"
          ;;
        *) fail "$n: PID 1 kind '$pid1' unknown to the pipeline" ;;
      esac
      say "$n ($(jq -r '[.scenarios[] | select(.image_tag == "'"$n"'") | .id] | join(",")' <<<"$scenarios")): PID 1 $want (exe $exe), worker $wpid orphaned to PID 1 and named by gpureap observe; $stop"
      ;;
  esac
done

say "all ${#names[@]} images built, pushed, pulled and run"
