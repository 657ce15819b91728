#!/usr/bin/env bash
# The deploy tests (ctest label `deploy`, tests/deploy/charts/CMakeLists.txt):
#
#   run.sh TEST GPUREAP TOOLS
#
# GPUREAP is the built gpureap (for --print-scenarios), TOOLS the folder
# scripts/install-deploy-tools.sh filled (bin/helm, node_modules/...). TEST:
#   generated   files copied or rendered from one source are up to date (generate.sh --check)
#   lint        helm lint --strict of both charts, with each scenario and toggle
#   render      helm template of both charts with each scenario and toggle;
#               every object validated; pods against the lab's scenarios; the
#               exporter's privileges; the schemas refuse bad values
#   manifests   deploy/**/*.yaml and argocd/*.yaml validated; Argo CD shapes
#   least_privilege  the rendered DaemonSet's mounts and capabilities applied
#               here (mount namespace, setpriv): the exporter scans, nothing denied
#   actionlint  .gitea/workflows/*.yaml
#   yamllint    every YAML file of the repository, and the charts' rendered output
#   shell-scripts (ctest deploy.shellcheck): every shell script of the repository and every workflow `run:` block
#   oci         a local registry: helm package, push, pull, template both charts
#   cd          .gitea/workflows/cd.yaml's job run here (runner.mjs) against a
#               TLS + basic-auth registry on loopback, for a release tag
#   ci          .gitea/workflows/ci.yaml's job run the same way for two images
#               (needs deploy/images/build.sh and buildah)
# A tool that is missing is a failure, never a skip.
set -euo pipefail

(($# == 3)) || {
  echo "usage: $0 TEST GPUREAP TOOLS" >&2
  exit 64
}
test=$1 gpureap=$(realpath -m "$2") tools=$(realpath -m "$3")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/deploy/lib/registry.sh
source "$here/../lib/registry.sh"
repo=$(cd "$here/../../.." && pwd)
helm=$tools/bin/helm
charts=(gpu-zombie-test gpureap)
# The scenario toggles of charts/gpu-zombie-test's values.
scenario_keys=(nofix tini tiniPrestop fullfix gpureapInit prefork)

die() {
  echo "FAIL $*" >&2
  exit 1
}
need() {
  local p
  for p in "$@"; do
    if [[ $p == */* ]]; then
      [[ -x $p ]] || die "$p is missing (scripts/install-deploy-tools.sh installs the deploy tools; the deploy.tools test runs it)"
    else
      command -v "$p" >/dev/null || die "'$p' not found (scripts/install-deps.sh installs it)"
    fi
  done
}
check() { node "$here/check.mjs" "$tools" "$@"; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpureap-deploy-$test-XXXXXX")
cleanup_steps=()
cleanup() {
  local rc=$? i
  # Last in, first out: the exporter is stopped before its mounts go.
  for ((i = ${#cleanup_steps[@]} - 1; i >= 0; i--)); do eval "${cleanup_steps[i]}" || true; done
  # Never across a mount (the least_privilege test mounts the host's paths here).
  rm -rf --one-file-system "$tmp"
  return "$rc"
}
trap cleanup EXIT
# helm keeps its registry logins, caches and repositories here, not in $HOME.
export HELM_CACHE_HOME=$tmp/helm/cache HELM_CONFIG_HOME=$tmp/helm/config HELM_DATA_HOME=$tmp/helm/data

# render CHART OUT [helm template flags...]: helm template into OUT, or fail with its message.
render() {
  local chart=$1 out=$2
  shift 2
  "$helm" template "$chart" "$repo/charts/$chart" --namespace "$(namespace_of "$chart")" "$@" >"$out" 2>"$out.err" ||
    die "helm template charts/$chart $*: $(cat "$out.err")"
}
namespace_of() { [[ $1 == gpu-zombie-test ]] && echo gpu-zombie-test || echo monitoring; }
# only KEY: --set flags turning every scenario off but KEY.
only() {
  local k
  for k in "${scenario_keys[@]}"; do
    if [[ $k == "$1" ]]; then echo "--set=scenarios.$k.enabled=true"; else echo "--set=scenarios.$k.enabled=false"; fi
  done
}
all_off() {
  local k
  for k in "${scenario_keys[@]}"; do echo "--set=scenarios.$k.enabled=false"; done
}
exporter_variants=(
  "defaults:"
  "all:--set=serviceMonitor.enabled=true --set=prometheusRule.enabled=true --set=dashboard.enabled=true --set=npd.enabled=true"
  "privileged:--set=privilegedBpfFallback=true"
  "no-service:--set=service.enabled=false"
)

t_generated() {
  need node "$helm" "$gpureap"
  "$here/generate.sh" --check "$gpureap" "$helm"
  echo "generated files are up to date"
}

t_lint() {
  need "$helm"
  local chart k v
  for chart in "${charts[@]}"; do
    "$helm" lint --strict "$repo/charts/$chart" >"$tmp/lint" 2>&1 || die "helm lint --strict charts/$chart: $(cat "$tmp/lint")"
  done
  for k in "${scenario_keys[@]}"; do
    mapfile -t flags < <(only "$k")
    "$helm" lint --strict "$repo/charts/gpu-zombie-test" "${flags[@]}" >"$tmp/lint" 2>&1 ||
      die "helm lint --strict charts/gpu-zombie-test with only $k: $(cat "$tmp/lint")"
  done
  for v in "${exporter_variants[@]}"; do
    read -ra flags <<<"${v#*:}"
    "$helm" lint --strict "$repo/charts/gpureap" "${flags[@]}" >"$tmp/lint" 2>&1 ||
      die "helm lint --strict charts/gpureap (${v%%:*}): $(cat "$tmp/lint")"
  done
  echo "helm lint --strict: both charts, ${#scenario_keys[@]} scenario toggles, ${#exporter_variants[@]} exporter variants"
}

# refuse CHART WHAT FLAGS...: helm template must fail and name WHAT.
refuse() {
  local chart=$1 what=$2
  shift 2
  if "$helm" template "$chart" "$repo/charts/$chart" "$@" >"$tmp/refused" 2>&1; then
    die "charts/$chart accepted $* (its values.schema.json should refuse it)"
  fi
  grep -q -- "$what" "$tmp/refused" || die "charts/$chart refused $* without naming '$what': $(cat "$tmp/refused")"
}

t_render() {
  need node "$helm" "$gpureap"
  local out=$tmp/rendered k v
  mkdir -p "$out"
  "$gpureap" lab --print-scenarios >"$tmp/scenarios.json"

  render gpu-zombie-test "$out/zombie-all.yaml"
  check scenarios "$tmp/scenarios.json" "$out/zombie-all.yaml"
  check count "$out/zombie-all.yaml" Pod=6
  render gpu-zombie-test "$out/zombie-pinned.yaml" --set node.name=gpu-4 --set image.pullSecret=
  check scenarios "$tmp/scenarios.json" "$out/zombie-pinned.yaml"
  for k in "${scenario_keys[@]}"; do
    mapfile -t flags < <(only "$k")
    render gpu-zombie-test "$out/zombie-only-$k.yaml" "${flags[@]}"
    check count "$out/zombie-only-$k.yaml" Pod=1
  done
  mapfile -t flags < <(all_off)
  render gpu-zombie-test "$out/zombie-none.yaml" "${flags[@]}"
  check count "$out/zombie-none.yaml" Pod=0

  for v in "${exporter_variants[@]}"; do
    read -ra flags <<<"${v#*:}"
    render gpureap "$out/gpureap-${v%%:*}.yaml" "${flags[@]}"
    check exporter "$repo" "$out/gpureap-${v%%:*}.yaml"
  done
  check count "$out/gpureap-defaults.yaml" DaemonSet=1 Service=1 ServiceMonitor=0 PrometheusRule=0 ConfigMap=0
  check count "$out/gpureap-all.yaml" DaemonSet=1 Service=1 ServiceMonitor=1 PrometheusRule=1 ConfigMap=2
  check count "$out/gpureap-no-service.yaml" Service=0

  local files=("$out"/*.yaml)
  check validate "${files[@]}"

  # The schemas and the templates refuse what they should, naming it.
  refuse gpu-zombie-test "scenarios" --set scenarios.s7.enabled=true
  refuse gpu-zombie-test "pullPolicy" --set image.pullPolicy=Sometimes
  refuse gpu-zombie-test "enabled" --set scenarios.nofix.enabled=yes
  refuse gpureap "hostRoot" --set hostRoot=host
  refuse gpureap "privilegedBpfFallback" --set privilegedBpfFallback=maybe
  refuse gpureap "service.enabled" --set serviceMonitor.enabled=true --set service.enabled=false
  echo "rendered ${#files[@]} variants; all objects valid; pods match the lab; the exporter is least-privileged"
}

t_manifests() {
  need node
  mapfile -t files < <(cd "$repo" && find deploy argocd -name '*.yaml' -not -path 'deploy/images/*' | sort)
  ((${#files[@]})) || die "no manifests under deploy/ or argocd/"
  (cd "$repo" && check validate "${files[@]}")
  (cd "$repo" && check argocd argocd/*.yaml)
}

t_actionlint() {
  need node
  local wf=("$repo"/.gitea/workflows/*.yaml)
  [[ -e ${wf[0]} ]] || die "no workflows in .gitea/workflows"
  node "$here/actionlint.mjs" "$tools" "${wf[@]}"
  # The image matrix is deploy/images's list and covers every scenario image the chart uses.
  local matrix
  matrix=$(sed -n 's/^ *image: \[\(.*\)\]$/\1/p' "$repo/.gitea/workflows/ci.yaml" | tr -d ' ' | tr ',' '\n' | sort)
  [[ -n $matrix ]] || die ".gitea/workflows/ci.yaml: no 'image: [...]' matrix"
  "$gpureap" lab --print-scenarios >"$tmp/scenarios.json"
  local tag
  for tag in $(node -e 'for (const s of JSON.parse(require("fs").readFileSync(process.argv[1])).scenarios) if (s.min_gpus === 1) console.log(s.image_tag)' "$tmp/scenarios.json" | sort -u) node; do
    grep -qx "$tag" <<<"$matrix" || die ".gitea/workflows/ci.yaml: the image matrix lacks '$tag' (a scenario image of the chart, or the exporter's)"
  done
  if [[ -x $repo/deploy/images/list.sh ]]; then
    diff <("$repo/deploy/images/list.sh" | sort) <(echo "$matrix") >"$tmp/matrix.diff" ||
      die ".gitea/workflows/ci.yaml: the image matrix differs from deploy/images/list.sh: $(cat "$tmp/matrix.diff")"
    echo "the image matrix is deploy/images/list.sh's"
  fi
}

# Every YAML file git knows of or would add, less the charts' templates (Go
# templates, not YAML until rendered: their rendered output is linted instead).
t_yamllint() {
  need yamllint "$helm"
  mapfile -t files < <(cd "$repo" && git ls-files --cached --others --exclude-standard -- '*.yaml' '*.yml' |
    grep -v '^charts/[^/]*/templates/' | sort -u)
  ((${#files[@]})) || die "no YAML files found"
  (cd "$repo" && yamllint --strict -c .yamllint "${files[@]}") || die "yamllint (config .yamllint) found problems above"
  local out=$tmp/rendered v
  mkdir -p "$out"
  render gpu-zombie-test "$out/gpu-zombie-test.yaml"
  for v in "${exporter_variants[@]}"; do
    read -ra flags <<<"${v#*:}"
    render gpureap "$out/gpureap-${v%%:*}.yaml" "${flags[@]}"
  done
  (cd "$repo" && yamllint --strict -c .yamllint "$out"/*.yaml) || die "yamllint of the charts' rendered output found problems above"
  local rendered=("$out"/*.yaml)
  echo "yamllint: ${#files[@]} files of the repository and ${#rendered[@]} rendered charts"
}

# Every shell script: *.sh and *.bash, and files whose first line names sh or bash.
t_shellcheck() {
  need shellcheck node
  local f scripts=()
  while IFS= read -r f; do
    [[ -f $repo/$f ]] || continue
    if [[ $f == *.sh || $f == *.bash ]] || head -n1 "$repo/$f" | grep -Eq '^#!.*([/ ]|env )(ba|da)?sh( |$)'; then
      scripts+=("$f")
    fi
  done < <(cd "$repo" && git ls-files --cached --others --exclude-standard | grep -v -e '^build' -e '^results/')
  ((${#scripts[@]})) || die "no shell scripts found"
  (cd "$repo" && shellcheck -x "${scripts[@]}") || die "shellcheck found problems above"
  mkdir -p "$tmp/runs"
  check workflow-scripts "$tmp/runs" "$repo"/.gitea/workflows/*.yaml
  shellcheck -s bash "$tmp"/runs/*.sh || die "shellcheck of the workflows' run: blocks found problems above"
  local runs=("$tmp"/runs/*.sh)
  echo "shellcheck: ${#scripts[@]} scripts and ${#runs[@]} workflow run blocks: ${scripts[*]}"
}

# The rendered DaemonSet's confinement on this machine: its host paths bind-
# mounted read-only under a fresh root in a private mount namespace, and
# gpureap exporter run with its arguments as root with exactly its added
# capabilities in the bounding set and no_new_privs (setpriv), as the
# container runtime would; /healthz must answer 200 and the scan must deny
# nothing and read descriptors as an unconfined scan does (bpf or procfs).
t_least_privilege() {
  need node "$helm" "$gpureap" unshare setpriv findmnt curl jq
  (($(id -u) == 0)) || die "needs root (a mount namespace and bind mounts), as the rest of the suite"
  render gpureap "$tmp/daemonset.yaml"
  check daemonset-lines "$tmp/daemonset.yaml" >"$tmp/daemonset.lines"
  local rc=0
  "$gpureap" trace --json --gpu none >"$tmp/unconfined.json" 2>"$tmp/unconfined.err" || rc=$?
  ((rc <= 1)) || die "gpureap trace (unconfined) exit $rc: $(cat "$tmp/unconfined.err")"
  DEPLOY_DS_LINES=$tmp/daemonset.lines DEPLOY_UNCONFINED=$tmp/unconfined.json \
    unshare --mount --propagation private -- "$0" _confined "$gpureap" "$tools"
}

t__confined() {
  local root=$tmp/host hostroot="" kind a b target caps=() nnp=false ruid="" args=() m submounts=()
  mkdir -p "$root"
  while read -r kind a b; do
    case $kind in
      root) hostroot=$a ;;
      mount)
        [[ $b == "$hostroot"/* ]] || die "DaemonSet mounts $a at $b, outside --host-root $hostroot"
        target=$root${b#"$hostroot"}
        mkdir -p "$target"
        if [[ -d $a ]]; then
          # Recursive and read-only all the way down, as the chart asks
          # (recursiveReadOnly): every submount is remounted read-only, and
          # unmounted before the temp folder is removed.
          mount --rbind "$a" "$target" || die "mount --rbind $a $target"
          cleanup_steps+=("umount -R -l '$target'")
          mapfile -t submounts < <(findmnt -R -n -o TARGET --list "$target")
          for m in "${submounts[@]}"; do
            mount -o remount,bind,ro "$m" || die "remount $m read-only"
          done
          if findmnt -R -n -o TARGET,OPTIONS --list "$target" | grep -vE '[[:space:]](ro,|ro$)' >"$tmp/rw-mounts"; then
            die "not read-only under $target: $(cat "$tmp/rw-mounts")"
          fi
          echo "mounted $a read-only at <root>${b#"$hostroot"} (${#submounts[@]} mount(s))"
        else
          echo "$a does not exist here: an empty folder in its place (the runtime creates a missing hostPath)"
        fi
        ;;
      cap) caps+=("+$a") ;;
      no_new_privs) nnp=$a ;;
      privileged) [[ $a == false ]] || die "the default DaemonSet is privileged" ;;
      run_as_user) ruid=$a ;;
      arg)
        case $a in
          --host-root=*) args+=("--host-root=$root") ;;
          --listen=*) args+=("--listen=127.0.0.1:0") ;;
          *) args+=("$a") ;;
        esac
        ;;
      *) die "unknown line '$kind' from check.mjs daemonset-lines" ;;
    esac
  done <"$DEPLOY_DS_LINES"
  [[ -n $hostroot && -n $ruid && ${#caps[@]} -gt 0 ]] || die "the DaemonSet's lines lack root, runAsUser or capabilities"
  local bounding
  bounding=-all,$(IFS=,; echo "${caps[*]}")
  local confine=(setpriv --reuid "$ruid" --regid "$ruid" --clear-groups --bounding-set "$bounding" --inh-caps -all)
  [[ $nnp == true ]] && confine+=(--no-new-privs)
  echo "confinement: ${confine[*]}"

  # No GPU here: --gpu none (in a pod the NVIDIA toolkit brings NVML). The
  # files exist before the job opens them: the ready-line poll reads at once.
  : >"$tmp/exporter.out"
  : >"$tmp/exporter.err"
  "${confine[@]}" -- "$gpureap" "${args[@]}" --gpu none >>"$tmp/exporter.out" 2>>"$tmp/exporter.err" &
  local pid=$! port="" i status=""
  cleanup_steps+=("kill $pid 2>/dev/null; wait $pid 2>/dev/null")
  for ((i = 0; i < 100; i++)); do # 10 s at most
    port=$(sed -n 's/.*listening on port \([0-9][0-9]*\).*/\1/p' "$tmp/exporter.out")
    [[ -n $port ]] && break
    kill -0 "$pid" 2>/dev/null || die "gpureap exporter exited: $(cat "$tmp/exporter.err")"
    sleep 0.1
  done
  [[ -n $port ]] || die "gpureap exporter printed no ready line within 10 s: $(cat "$tmp/exporter.err")"
  grep -q '^NoNewPrivs:[[:space:]]*1' "/proc/$pid/status" || [[ $nnp != true ]] ||
    die "the exporter runs without no_new_privs"
  echo "exporter: $(grep -E '^(CapEff|NoNewPrivs)' "/proc/$pid/status" | tr '\n\t' '  ')"
  for ((i = 0; i < 100; i++)); do # 10 s at most
    status=$(curl -s -o "$tmp/healthz" -w '%{http_code}' "http://127.0.0.1:$port/healthz" || true)
    [[ $status == 200 ]] && break
    sleep 0.1
  done
  [[ $status == 200 ]] || die "/healthz answered '$status' within 10 s: $(cat "$tmp/healthz" 2>/dev/null) $(cat "$tmp/exporter.err")"
  curl -fs "http://127.0.0.1:$port/metrics" >"$tmp/metrics" || die "/metrics did not answer"
  grep -qx 'gpureap_scan_errors_total 0' "$tmp/metrics" || die "scans failed confined: $(grep scan_ "$tmp/metrics")"
  grep -qx 'gpureap_scan_skipped_entries{reason="denied"} 0' "$tmp/metrics" ||
    die "the confined scan was denied entries: $(grep skipped "$tmp/metrics")"

  local rc=0
  "${confine[@]}" -- "$gpureap" trace --host-root="$root" --gpu none --json >"$tmp/confined.json" 2>"$tmp/confined.err" || rc=$?
  ((rc <= 1)) || die "gpureap trace (confined) exit $rc: $(cat "$tmp/confined.err")"
  local want got
  want=$(jq -r .scan.fds_from "$DEPLOY_UNCONFINED")
  got=$(jq -r .scan.fds_from "$tmp/confined.json")
  [[ $got == "$want" ]] || die "confined, descriptors came from '$got' ($(jq -r .scan.fds_note "$tmp/confined.json")); unconfined from '$want'"
  [[ $(jq -r .scan.denied "$tmp/confined.json") == 0 ]] || die "the confined trace was denied entries: $(jq -c .scan "$tmp/confined.json")"
  echo "least privilege: /healthz 200, no scan errors, nothing denied, descriptors from $got as unconfined; scan $(jq -c .scan "$tmp/confined.json")"
}

# start_registry [tls]: tests/deploy/lib/registry.sh's registry under
# $tmp/registry; sets $port (with tls also $cert and $registry_password, for
# user "ci"). Stopped by its PID on exit.
start_registry() {
  need docker-registry curl python3
  [[ ${1:-} == tls ]] && need openssl
  local started=0
  registry_start "$tmp/registry" "${1:-}" || started=$?
  [[ -n $registry_pid ]] && cleanup_steps+=("kill $registry_pid 2>/dev/null; wait $registry_pid 2>/dev/null")
  ((started == 0)) || die "$registry_error"
  port=$registry_port
  cert=$registry_cert
  local scheme=http
  [[ -n $cert ]] && scheme=https
  echo "docker-registry: $scheme://127.0.0.1:$port (pid $registry_pid)"
}

t_oci() {
  need "$helm"
  local port
  start_registry
  local ref=127.0.0.1:$port/gpureap chart version=0.0.0-ci.1
  mkdir -p "$tmp/packaged" "$tmp/pulled"
  for chart in "${charts[@]}"; do
    "$helm" package "$repo/charts/$chart" --version "$version" --app-version "v$version" \
      --destination "$tmp/packaged" >/dev/null || die "helm package charts/$chart"
    "$helm" push "$tmp/packaged/$chart-$version.tgz" "oci://$ref" --plain-http >"$tmp/push.log" 2>&1 ||
      die "helm push $chart to oci://$ref: $(cat "$tmp/push.log")"
    "$helm" pull "oci://$ref/$chart" --version "$version" --plain-http --destination "$tmp/pulled" >"$tmp/pull.log" 2>&1 ||
      die "helm pull oci://$ref/$chart: $(cat "$tmp/pull.log")"
    cmp -s "$tmp/packaged/$chart-$version.tgz" "$tmp/pulled/$chart-$version.tgz" ||
      die "$chart: the chart pulled back differs from the one pushed"
    "$helm" show chart "$tmp/pulled/$chart-$version.tgz" >"$tmp/show" || die "helm show chart $chart"
    grep -qx "version: $version" "$tmp/show" || die "$chart: pulled chart's version is not $version: $(cat "$tmp/show")"
    grep -qx "appVersion: v$version" "$tmp/show" || die "$chart: pulled chart's appVersion is not v$version"
    "$helm" template "$chart" "$tmp/pulled/$chart-$version.tgz" --namespace "$(namespace_of "$chart")" \
      >"$tmp/$chart.yaml" 2>"$tmp/template.err" || die "helm template of the pulled $chart: $(cat "$tmp/template.err")"
  done
  "$gpureap" lab --print-scenarios >"$tmp/scenarios.json"
  check scenarios "$tmp/scenarios.json" "$tmp/gpu-zombie-test.yaml"
  check exporter "$repo" "$tmp/gpureap.yaml"
  check validate "$tmp/gpu-zombie-test.yaml" "$tmp/gpureap.yaml"
  echo "oci: both charts packaged, pushed to and pulled from docker-registry on 127.0.0.1:$port, rendered"
}

# The context runner.mjs gives cd.yaml's job: TAG, then the registry's.
cd_context() {
  cat <<EOF
{"vars": {"REGISTRY": "127.0.0.1:$port", "REGISTRY_PROJECT": "gpureap"},
 "secrets": {"REGISTRY_USER": "ci", "REGISTRY_PASSWORD": "$registry_password"},
 "env": {"GITHUB_REF": "refs/tags/$1", "GITHUB_REF_NAME": "$1", "GITHUB_REF_TYPE": "tag",
         "GITHUB_SHA": "0123456789abcdef0123456789abcdef01234567", "SSL_CERT_FILE": "$cert"}}
EOF
}

# .gitea/workflows/cd.yaml's job, run here by runner.mjs as a Gitea runner
# runs its steps, for a release tag, against a registry on loopback with TLS
# (a self-signed certificate the steps trust through SSL_CERT_FILE, as a
# runner trusts Harbor's) and basic auth: both charts must come back from it
# with the tag's version and appVersion. A tag that is not v<semver> must fail.
t_cd() {
  need node "$helm" git tar
  local port cert registry_password
  start_registry tls
  # The checkout: the tree as git would check it out, the tools already here.
  local work=$tmp/work
  mkdir -p "$work/build"
  (cd "$repo" && git ls-files -z --cached --others --exclude-standard | tar -c --null -T - -f -) | tar -x -C "$work" ||
    die "copying the tree"
  ln -s "$tools" "$work/build/tools"
  local tag=v0.3.1-rc.1 version=0.3.1-rc.1 chart
  cd_context "$tag" >"$tmp/context.json"
  DEPLOY_TOOLS=$tools node "$here/runner.mjs" "$work/.gitea/workflows/cd.yaml" charts "$work" "$tmp/context.json" ||
    die ".gitea/workflows/cd.yaml's job failed for tag $tag (output above)"
  mkdir -p "$tmp/pulled"
  for chart in "${charts[@]}"; do
    SSL_CERT_FILE=$cert "$helm" pull "oci://127.0.0.1:$port/gpureap/$chart" --version "$version" \
      --destination "$tmp/pulled" >"$tmp/pull.log" 2>&1 || die "helm pull $chart $version after cd.yaml: $(cat "$tmp/pull.log")"
    "$helm" show chart "$tmp/pulled/$chart-$version.tgz" >"$tmp/show" || die "helm show chart $chart"
    grep -qx "version: $version" "$tmp/show" || die "$chart: cd.yaml pushed $(grep '^version' "$tmp/show"), want version $version"
    grep -qx "appVersion: $tag" "$tmp/show" || die "$chart: cd.yaml pushed $(grep '^appVersion' "$tmp/show"), want appVersion $tag"
  done
  cd_context v1.2 >"$tmp/context.json"
  if DEPLOY_TOOLS=$tools node "$here/runner.mjs" "$work/.gitea/workflows/cd.yaml" charts "$work" "$tmp/context.json" >"$tmp/bad.log" 2>&1; then
    die "cd.yaml accepted tag v1.2 (not v<semver>)"
  fi
  grep -q "tag 'v1.2' is not v<semver>" "$tmp/bad.log" || die "cd.yaml refused v1.2 without saying why: $(cat "$tmp/bad.log")"
  echo "cd.yaml: tag $tag -> both charts $version (appVersion $tag) in a TLS + basic-auth registry; tag v1.2 refused"
}

# .gitea/workflows/ci.yaml's job run here by runner.mjs for two entries of
# its matrix (a scenario image and the node image) on a release tag, with
# deploy/images/build.sh and buildah (its own storage under $tmp), against
# docker-registry with TLS and basic auth on loopback. The dependency install
# and the build are the caller's (the gpureap build tree given to the test).
# The tags must be in the registry: the scenario's image_tag and its
# <tag>-sha-<7> pin, the node image's sha-<7> and the release tag.
t_ci() {
  need node git tar buildah skopeo
  [[ -x $repo/deploy/images/build.sh ]] || die "deploy/images/build.sh is missing (docs/deploy-images.md)"
  local port cert registry_password
  start_registry tls
  local work=$tmp/work build
  build=$(dirname "$(dirname "$(dirname "$gpureap")")")
  mkdir -p "$work" "$tmp/storage/root" "$tmp/storage/run"
  (cd "$repo" && git ls-files -z --cached --others --exclude-standard | tar -c --null -T - -f -) | tar -x -C "$work" ||
    die "copying the tree"
  cat >"$tmp/storage.conf" <<EOF
[storage]
driver = "vfs"
graphroot = "$tmp/storage/root"
runroot = "$tmp/storage/run"
EOF
  cleanup_steps+=("buildah --storage-driver vfs --root '$tmp/storage/root' --runroot '$tmp/storage/run' rm --all >/dev/null 2>&1")
  local image sha=0123456789abcdef0123456789abcdef01234567 tag=v0.3.1
  for image in tini node; do
    cat >"$tmp/context.json" <<EOF
{"vars": {"REGISTRY": "127.0.0.1:$port", "REGISTRY_PROJECT": "gpureap"},
 "secrets": {"REGISTRY_USER": "ci", "REGISTRY_PASSWORD": "$registry_password"},
 "matrix": {"image": "$image"},
 "skip": ["Install the build dependencies", "Build gpureap"],
 "env": {"GITHUB_REF": "refs/tags/$tag", "GITHUB_SHA": "$sha", "SSL_CERT_FILE": "$cert",
         "GPUREAP_BUILD_DIR": "$build", "CONTAINERS_STORAGE_CONF": "$tmp/storage.conf",
         "REGISTRY_AUTH_FILE": "$tmp/auth.json"}}
EOF
    DEPLOY_TOOLS=$tools node "$here/runner.mjs" "$work/.gitea/workflows/ci.yaml" images "$work" "$tmp/context.json" ||
      die ".gitea/workflows/ci.yaml's job failed for image $image (output above)"
  done
  local repo_ref want got
  for want in "gpu-zombie-test:tini" "gpu-zombie-test:tini-sha-${sha::7}" "gpureap:sha-${sha::7}" "gpureap:$tag"; do
    repo_ref=127.0.0.1:$port/gpureap/$want
    SSL_CERT_FILE=$cert skopeo inspect --authfile "$tmp/auth.json" "docker://$repo_ref" >"$tmp/inspect.json" 2>"$tmp/inspect.err" ||
      die "ci.yaml did not push $repo_ref: $(cat "$tmp/inspect.err")"
  done
  got=$(SSL_CERT_FILE=$cert skopeo inspect --authfile "$tmp/auth.json" --config "docker://127.0.0.1:$port/gpureap/gpu-zombie-test:tini" |
    node -e 'const c = JSON.parse(require("fs").readFileSync(0)).config; console.log(JSON.stringify([...(c.Entrypoint ?? []), ...(c.Cmd ?? [])]))')
  "$gpureap" lab --print-scenarios >"$tmp/scenarios.json"
  want=$(node -e 'console.log(JSON.stringify(JSON.parse(require("fs").readFileSync(process.argv[1])).scenarios.find((s) => s.id === "S2").pid1_argv))' "$tmp/scenarios.json")
  [[ $got == "$want" ]] || die "the pushed tini image runs $got as PID 1, scenario S2's pid1_argv is $want"
  echo "ci.yaml: tini and node built by deploy/images/build.sh and pushed to a TLS + basic-auth registry with their scenario, sha and release tags; tini's ENTRYPOINT+CMD is S2's pid1_argv"
}

case $test in
  generated | lint | render | manifests | least_privilege | actionlint | yamllint | shellcheck | oci | cd | ci) "t_$test" ;;
  _confined) t__confined ;; # least_privilege's half inside its mount namespace
  *) die "unknown test '$test'" ;;
esac
