#!/usr/bin/env bash
# Here: builds the experiment into .devbin/args_copy/ (static libbpf, libelf, zlib).
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=.devbin/args_copy
mkdir -p $out
clang -g -O2 -target bpf -Wall -Isrc/proc/bpf -c tests/device/args_copy/args_copy.bpf.c -o $out/args_copy.bpf.o
gcc -O2 -Wall tests/device/args_copy/args_copy.c -o $out/args_copy \
  /usr/lib/x86_64-linux-gnu/libbpf.a /usr/lib/x86_64-linux-gnu/libelf.a /usr/lib/x86_64-linux-gnu/libz.a
