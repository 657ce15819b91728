#!/usr/bin/env bash
# The Debian package on a clean Debian 12 (docs/deploy-images.md, "Packaging"):
#   1. cpack -G DEB from a build tree; its Depends (dpkg-shlibdeps) and files
#   2. a clean bookworm root from debootstrap: minbase, systemd, and exactly the
#      package's Depends (so the programs can only run if Depends is complete);
#      cached under BUILD_DIR/deploy-cache/, keyed by that list, and used
#      through an overlay so every run starts from the pristine root
#   3. dpkg -i there; postinst enables gpureap-exporter.service
#   4. gpureap --version and gpureap-init --version inside the root
#   5. the root booted with systemd-nspawn --boot (private network): systemd
#      starts gpureap-exporter at boot, `systemctl is-active` says active, its
#      /healthz and /metrics answer on :9464, and the service's process holds
#      exactly CAP_SYS_PTRACE CAP_DAC_READ_SEARCH CAP_BPF CAP_PERFMON.
# Everything it starts is stopped on success and on failure (trap), by PID.
#
#   tests/deploy/pipeline/package.sh [--build-dir DIR] [--keep]
# Needs root, network to a Debian mirror the first time (GPUREAP_DEBIAN_MIRROR,
# default http://deb.debian.org/debian), scripts/install-deps.sh's packages.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
build_dir=${GPUREAP_BUILD_DIR:-$repo/build/default}
mirror=${GPUREAP_DEBIAN_MIRROR:-http://deb.debian.org/debian}
keep=false
while (($#)); do
  case $1 in
    --build-dir) build_dir=$2; shift 2 ;;
    --keep) keep=true; shift ;;
    *) echo "usage: $0 [--build-dir DIR] [--keep]" >&2; exit 64 ;;
  esac
done
build_dir=$(cd "$build_dir" && pwd)

t0=$(date +%s.%N)
say() { printf '[package %6.1fs] %s\n' "$(echo "$(date +%s.%N) - $t0" | bc)" "$*" >&2; }
fail() { say "FAIL: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || fail "needs root (debootstrap, mounts, systemd-nspawn)"
for tool in cpack dpkg-deb dpkg-shlibdeps debootstrap systemd-nspawn nsenter curl bc sha256sum; do
  command -v "$tool" >/dev/null || fail "$tool not found (scripts/install-deps.sh installs it)"
done
[[ -f $build_dir/CPackConfig.cmake ]] || fail "$build_dir/CPackConfig.cmake missing: configure the build (cmake --preset default)"

work=$(mktemp -d "${TMPDIR:-/tmp}/gpureap-package-XXXXXX")
root=$work/root
nspawn_pid=""
leader=""
mounted=false

cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  if [[ -n $nspawn_pid ]] && kill -0 "$nspawn_pid" 2>/dev/null; then
    # nspawn turns SIGTERM into the container's orderly shutdown.
    kill -TERM "$nspawn_pid"
    timeout 30 tail --pid="$nspawn_pid" -s 0.1 -f /dev/null || {
      [[ -n $leader ]] && kill -KILL "$leader" 2>/dev/null
      kill -KILL "$nspawn_pid" 2>/dev/null
    }
    wait "$nspawn_pid" 2>/dev/null
  fi
  if $mounted; then
    findmnt -rn -o TARGET | grep -F "$root" | sort -r | while read -r m; do umount -l "$m"; done
  fi
  if $keep; then say "kept $work"; else rm -rf "$work"; fi
  if ((rc == 0)); then say "PASS"; else say "FAILED (exit $rc)"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- 1. the package ------------------------------------------------------------
mkdir -p "$work/pkg"
cpack --config "$build_dir/CPackConfig.cmake" -B "$work/pkg" >"$work/cpack.log" 2>&1 ||
  fail "cpack failed: $(tail -5 "$work/cpack.log")"
debs=("$work"/pkg/gpureap_*.deb)
[[ -f ${debs[0]} ]] || fail "cpack made no gpureap_*.deb in $work/pkg"
deb=${debs[0]}
depends=$(dpkg-deb -f "$deb" Depends)
contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
for f in ./usr/bin/gpureap ./usr/bin/gpureap-exporter ./usr/bin/gpureap-init ./usr/lib/systemd/system/gpureap-exporter.service \
  ./etc/default/gpureap-exporter ./usr/share/doc/gpureap/exporter.md ./usr/share/gpureap/npd/gpureap-check-monitor.json; do
  grep -qxF "$f" <<<"$contents" || fail "$(basename "$deb") lacks $f"
done
for d in libc6 libstdc++6 libprometheus-cpp-core1.0 libcivetweb1 libyaml-cpp0.7 libssl3; do
  [[ ", $depends," == *", $d"[\ ,]* ]] || fail "Depends lacks $d: $depends"
done
[[ $(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles) == /etc/default/gpureap-exporter ]] ||
  fail "conffiles is not /etc/default/gpureap-exporter"
say "$(basename "$deb"): $(du -k "$deb" | cut -f1) KiB; Depends: $depends"

# --- 2. a clean bookworm root (cached) --------------------------------------------
# minbase + systemd to boot + the package's Depends, nothing else.
names=$(tr ',' '\n' <<<"$depends" | sed 's/(.*)//; s/|.*//; s/[[:space:]]//g' | grep -v '^$' | sort -u | paste -sd, -)
include="systemd,systemd-sysv,dbus,$names"
key=$(printf '%s\n' bookworm minbase "$mirror" "$include" | sha256sum | cut -c1-16)
cache=$build_dir/deploy-cache/bookworm-$key
if [[ ! -d $cache ]]; then
  say "debootstrap bookworm (minbase + $include) from $mirror into $cache (once)"
  mkdir -p "$build_dir/deploy-cache"
  tmp=$cache.tmp-$$
  rm -rf "$tmp"
  debootstrap --variant=minbase --include="$include" bookworm "$tmp" "$mirror" >"$work/debootstrap.log" 2>&1 || {
    rm -rf "$tmp"
    fail "debootstrap failed: $(tail -5 "$work/debootstrap.log")"
  }
  rm -rf "$tmp/var/cache/apt/archives/"*.deb
  mv "$tmp" "$cache"
fi
mkdir -p "$work/upper" "$work/ovl" "$root"
mount -t overlay overlay -o "lowerdir=$cache,upperdir=$work/upper,workdir=$work/ovl" "$root" ||
  fail "cannot mount an overlay of $cache on $root"
mounted=true
say "clean root: overlay of $cache"
grep -q '^VERSION_CODENAME=bookworm' "$root/etc/os-release" || fail "$cache is not bookworm"
chroot "$root" dpkg-query -W gpureap >/dev/null 2>&1 && fail "the clean root already has gpureap"

# --- 3. install ---------------------------------------------------------------------
cp "$deb" "$root/tmp/"
chroot "$root" dpkg -i "/tmp/$(basename "$deb")" >"$work/dpkg.log" 2>&1 ||
  fail "dpkg -i in the clean root failed: $(tail -5 "$work/dpkg.log")"
# shellcheck disable=SC2016 # dpkg-query's ${Status}, not the shell's
[[ $(chroot "$root" dpkg-query -W -f='${Status}' gpureap) == "install ok installed" ]] ||
  fail "dpkg says gpureap is not installed"
[[ -L $root/etc/systemd/system/multi-user.target.wants/gpureap-exporter.service ]] ||
  fail "postinst did not enable gpureap-exporter.service"
say "dpkg -i: installed, gpureap-exporter.service enabled"

# --- 4. the programs run there ------------------------------------------------------------
v=$(chroot "$root" gpureap --version 2>&1) || fail "gpureap --version failed in the root: $v"
[[ $v == "gpureap 0.1.0"* ]] || fail "gpureap --version printed '$v'"
vi=$(chroot "$root" gpureap-init --version 2>&1) || fail "gpureap-init --version failed in the root: $vi"
[[ $vi == *0.1.0* ]] || fail "gpureap-init --version printed '$vi'"
say "in the root: '$v', '$vi'"

# --- 5. boot it ------------------------------------------------------------------------
# nspawn's default bounding set lacks CAP_BPF and CAP_PERFMON: grant them, so
# what the service holds is what its unit asks for.
systemd-nspawn --quiet --boot --register=no --private-network --keep-unit --capability=CAP_BPF,CAP_PERFMON \
  --machine="gpureap-pkg-$$" --directory="$root" >"$work/boot.log" 2>&1 </dev/null &
nspawn_pid=$!
# The container's PID 1 (systemd) is nspawn's child.
for _ in $(seq 200); do
  kill -0 "$nspawn_pid" 2>/dev/null || fail "systemd-nspawn exited: $(tail -5 "$work/boot.log")"
  mapfile -t kids < <(cat "/proc/$nspawn_pid/task/"*/children 2>/dev/null | tr ' ' '\n')
  for c in "${kids[@]}"; do
    [[ -n $c ]] || continue
    [[ $(cat "/proc/$c/comm" 2>/dev/null) == systemd ]] && leader=$c
  done
  [[ -n $leader ]] && break
  sleep 0.05
done
[[ -n $leader ]] || fail "no systemd started in the container: $(tail -5 "$work/boot.log")"
inside() { nsenter --target "$leader" --mount --uts --ipc --net --pid -- "$@"; }
# systemd's bus comes up during the boot: until then systemctl cannot ask.
for _ in $(seq 600); do
  inside test -S /run/systemd/private && break
  kill -0 "$nspawn_pid" 2>/dev/null || fail "the container stopped while booting: $(tail -5 "$work/boot.log")"
  sleep 0.1
done
state=$(timeout 90 nsenter --target "$leader" --mount --uts --ipc --net --pid -- systemctl is-system-running --wait 2>&1) || true
say "booted (systemd pid $leader on the host): system $state"
active=$(inside systemctl is-active gpureap-exporter.service 2>&1) || true
[[ $active == active ]] ||
  fail "gpureap-exporter.service is '$active': $(inside journalctl -u gpureap-exporter --no-pager -n 20 2>&1)"
ok=false
for _ in $(seq 100); do
  if nsenter --target "$leader" --net -- curl -fsS http://127.0.0.1:9464/healthz >"$work/healthz" 2>/dev/null; then
    ok=true
    break
  fi
  sleep 0.1
done
$ok || fail "/healthz did not answer 200 on :9464: $(inside journalctl -u gpureap-exporter --no-pager -n 20 2>&1)"
nsenter --target "$leader" --net -- curl -fsS http://127.0.0.1:9464/metrics >"$work/metrics" || fail "/metrics failed"
grep -q '^gpureap_build_info{version="0.1.0"' "$work/metrics" || fail "/metrics lacks gpureap_build_info 0.1.0"
# The sandbox must not cost the scan anything: no failed scan, no /proc entry denied.
grep -qx 'gpureap_scan_errors_total 0' "$work/metrics" || fail "the exporter's scans fail under its unit: $(grep scan_errors "$work/metrics")"
grep -qx 'gpureap_scan_skipped_entries{reason="denied"} 0' "$work/metrics" ||
  fail "the exporter is denied /proc entries under its unit: $(grep 'reason="denied"' "$work/metrics")"
main=$(inside systemctl show -P MainPID gpureap-exporter.service)
[[ $main =~ ^[1-9][0-9]*$ ]] || fail "gpureap-exporter.service has no main PID ($main)"
# CAP_DAC_READ_SEARCH 2, CAP_SYS_PTRACE 19, CAP_PERFMON 38, CAP_BPF 39.
want_caps=$(printf '%016x' $(((1 << 2) | (1 << 19) | (1 << 38) | (1 << 39))))
status=$(inside cat "/proc/$main/status")
for field in CapEff CapBnd; do
  got=$(awk -v f="$field:" '$1 == f {print $2}' <<<"$status")
  [[ $got == "$want_caps" ]] || fail "the exporter's $field is $got, want $want_caps (SYS_PTRACE DAC_READ_SEARCH BPF PERFMON)"
done
nnp=$(awk '$1 == "NoNewPrivs:" {print $2}' <<<"$status")
[[ $nnp == 1 ]] || fail "the exporter runs without NoNewPrivs"
verify=$(inside systemd-analyze verify gpureap-exporter.service 2>&1) || fail "systemd-analyze verify: $verify"
say "gpureap-exporter.service active at boot; /healthz '$(head -c 40 "$work/healthz")'; /metrics $(grep -c '^gpureap_' "$work/metrics") series, no scan error, nothing denied; CapEff=CapBnd=$want_caps, NoNewPrivs; systemd-analyze verify clean"
