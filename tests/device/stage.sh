#!/usr/bin/env bash
# Here (no GPU): stage what run.sh needs into .devbin/ (git-ignored; the
# device tool carries it): the built binaries, tini-static, and libfmt.
set -euo pipefail
cd "$(dirname "$0")/../.."
b=build/default
rm -rf .devbin && mkdir -p .devbin/lib
cp $b/src/cli/gpureap $b/src/workers/gpureap-worker-dynamic $b/src/init/gpureap-init .devbin/
cp /usr/bin/tini-static .devbin/
cp -L /lib/x86_64-linux-gnu/libfmt.so.9 .devbin/lib/
# Debug info would not fit the device tool's 64 MiB.
strip .devbin/gpureap .devbin/gpureap-worker-dynamic
ls -la .devbin .devbin/lib
