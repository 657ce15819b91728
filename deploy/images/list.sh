#!/usr/bin/env bash
# The images deploy/images/build.sh builds, one name a line: the CI matrix
# (.gitea/workflows/ci.yaml) and the local pipeline (tests/deploy/pipeline)
# iterate over this list. A name is a folder here holding a Containerfile;
# folders with a NOT-BUILT-HERE marker (torch: needs a networked builder and
# PyPI) are listed only with --all.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
all=false
case ${1:-} in
  --all) all=true ;;
  "") ;;
  *) echo "usage: $0 [--all]" >&2; exit 64 ;;
esac
for f in "$here"/*/Containerfile; do
  dir=$(dirname "$f")
  if [[ -e $dir/NOT-BUILT-HERE ]] && ! $all; then continue; fi
  basename "$dir"
done
