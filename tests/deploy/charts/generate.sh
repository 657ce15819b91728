#!/usr/bin/env bash
# The deploy files that are copies or renderings of a single source, written
# from it (or, with --check, compared with it; a difference names both files):
#   charts/gpu-zombie-test/files/scenarios.json  <- gpureap lab --print-scenarios
#   charts/gpureap/files/gpureap-rules.yml       <- deploy/monitoring/prometheus/gpureap-rules.yml
#   charts/gpureap/files/gpureap-dashboard.json  <- deploy/monitoring/grafana/gpureap-dashboard.json
#   charts/gpureap/files/gpureap-check-monitor.json <- deploy/npd/gpureap-check-monitor.json
#   deploy/exporter/daemonset.yaml               <- helm template of charts/gpureap's DaemonSet
#
#   generate.sh [--check] GPUREAP HELM
set -euo pipefail

check=false
if [[ ${1:-} == --check ]]; then
  check=true
  shift
fi
(($# == 2)) || {
  echo "usage: $0 [--check] GPUREAP HELM" >&2
  exit 64
}
gpureap=$1 helm=$2
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpureap-generate-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

failed=0
# emit SOURCE-DESCRIPTION TARGET (the new content is in $tmp/new)
emit() {
  local from=$1 target=$repo/$2
  if $check; then
    if ! cmp -s "$tmp/new" "$target"; then
      echo "generate: $2 differs from $from; run tests/deploy/charts/generate.sh GPUREAP HELM and commit:" >&2
      diff -u "$target" "$tmp/new" | head -40 >&2 || true
      failed=1
    fi
  else
    cp "$tmp/new" "$target"
    echo "generate: wrote $2 from $from" >&2
  fi
}

"$gpureap" lab --print-scenarios >"$tmp/new"
emit "gpureap lab --print-scenarios" charts/gpu-zombie-test/files/scenarios.json

cp "$repo/deploy/monitoring/prometheus/gpureap-rules.yml" "$tmp/new"
emit deploy/monitoring/prometheus/gpureap-rules.yml charts/gpureap/files/gpureap-rules.yml
cp "$repo/deploy/monitoring/grafana/gpureap-dashboard.json" "$tmp/new"
emit deploy/monitoring/grafana/gpureap-dashboard.json charts/gpureap/files/gpureap-dashboard.json
cp "$repo/deploy/npd/gpureap-check-monitor.json" "$tmp/new"
emit deploy/npd/gpureap-check-monitor.json charts/gpureap/files/gpureap-check-monitor.json

# The static DaemonSet for clusters without Helm: the chart's, with the
# defaults, in namespace monitoring, the image as deploy/images/build.sh node
# latest names it. (After the copies above: the chart reads files/.)
{
  cat <<'EOF'
# Generated from charts/gpureap by tests/deploy/charts/generate.sh (helm
# template, the chart's defaults, namespace monitoring, image localhost/gpureap:latest
# as `deploy/images/build.sh node latest` names it): do not edit; edit the chart
# and run the script. The deploy tests fail when this file and the chart differ.
# Apply with: kubectl apply -f deploy/exporter/daemonset.yaml
EOF
  "$helm" template gpureap "$repo/charts/gpureap" --namespace monitoring \
    --set image.repository=localhost/gpureap --set image.tag=latest \
    --show-only templates/daemonset.yaml | sed '/^# Source: /d'
} >"$tmp/new"
emit "helm template charts/gpureap" deploy/exporter/daemonset.yaml

exit "$failed"
