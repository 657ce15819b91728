#!/usr/bin/env bash
# Here (no GPU): stage what run.sh needs into .devbin/ (git-ignored; the
# device tool carries it): the built binaries, tini-static, and libfmt.
set -euo pipefail
cd "$(dirname "$0")/../.."
b=build/default
rm -rf .devbin && mkdir -p .devbin/lib
cp $b/src/cli/gpureap $b/src/cli/gpureap-exporter $b/src/workers/gpureap-worker $b/src/workers/gpureap-worker-dynamic $b/src/init/gpureap-init .devbin/
cp $b/bench/scan/bench_scan $b/bench/scan/bench_scan_run .devbin/
# The tests that depend on the running kernel (BPF iterators, BTF), for its kernel.
cp $b/tests/unit/proc/proc_unit_tests .devbin/
cp /usr/bin/tini-static .devbin/
# The public peers of bench/scan, Debian's builds, with their non-glibc libs.
mkdir -p .devbin/peers
cp /usr/bin/fuser /usr/bin/lsof .devbin/peers/
for lib in $(ldd /usr/bin/lsof | awk '/=> \// {print $3}'); do
  case $(basename "$lib") in libc.so*|libresolv.so*|libm.so*|ld-linux*) ;; *) cp -L "$lib" .devbin/lib/ ;; esac
done
# The exporter's shared libraries (prometheus-cpp, civetweb, yaml-cpp,
# OpenSSL; gpureap itself needs only glibc): the GPU machine has glibc and
# libstdc++ only.
for lib in $(ldd .devbin/gpureap .devbin/gpureap-exporter | awk '/=> \// {print $3}' | sort -u); do
  case $(basename "$lib") in libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*) ;; *) cp -L "$lib" .devbin/lib/ ;; esac
done
# Debug info would not fit the device tool's 64 MiB.
strip .devbin/gpureap .devbin/gpureap-exporter .devbin/gpureap-worker-dynamic .devbin/bench_scan .devbin/bench_scan_run \
  .devbin/proc_unit_tests
# PERF=1: Debian's perf with its libraries, for scan_profile.sh (the GPU
# machine has none).
if [[ ${PERF:-0} == 1 ]]; then
  perf_dir=$(mktemp -d) && mkdir -p "$perf_dir/lib" && cp -L /usr/bin/perf "$perf_dir/"
  for lib in $(ldd /usr/bin/perf | awk '/=> \// {print $3}'); do
    case $(basename "$lib") in libc.so*|libm.so*|ld-linux*) ;; *) cp -L "$lib" "$perf_dir/lib/" ;; esac
  done
  tar -cJf .devbin/perf.tar.xz -C "$perf_dir" perf lib && rm -rf "$perf_dir"
fi
ls -la .devbin .devbin/lib
