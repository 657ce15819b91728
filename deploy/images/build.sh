#!/usr/bin/env bash
# Builds one of gpureap's images with buildah from the project's own binaries.
#
#   deploy/images/build.sh [--build-dir DIR] NAME TAG
#
# NAME is a folder of deploy/images (deploy/images/list.sh prints them). The
# binaries come from a finished build tree: --build-dir, else
# $GPUREAP_BUILD_DIR, else build/default (cmake --preset default; targets
# gpureap gpureap-exporter gpureap-init gpureap-worker gpureap-worker-dynamic). They are staged
# with every shared library they load (ldd), so the images build FROM scratch
# and RUN nothing: no base image, no network, no container runtime at build.
#
# References, printed on stdout one a line once built (stderr has the rest):
#   scenario images and cuda-worker: $GPUREAP_IMAGE_REPO:NAME and :NAME-TAG
#     (default repo localhost/gpu-zombie-test: the plan's one repository, the
#     scenario's image_tag as tag, plus the plan's "<tag>-sha-<sha>" pin when
#     TAG is "sha-<sha>")
#   node: $GPUREAP_NODE_IMAGE_REPO:TAG (default localhost/gpureap)
#
# A scenario image (NAME is the image_tag of a scenario of
# `gpureap lab --print-scenarios`) is checked after the build: its
# ENTRYPOINT + CMD must equal the scenario's pid1_argv and its
# GPUREAP_SCENARIO_WORKER the scenario's worker, else the build fails.
# buildah's storage is its default one, or $CONTAINERS_STORAGE_CONF's.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build_dir=${GPUREAP_BUILD_DIR:-$repo/build/default}

die() { echo "build.sh: $*" >&2; exit 1; }
usage() { echo "usage: $0 [--build-dir DIR] NAME TAG (NAME: $(tr '\n' ' ' < <("$here/list.sh" --all)))" >&2; exit 64; }

while (($#)); do
  case $1 in
    --build-dir) (($# >= 2)) || usage; build_dir=$2; shift 2 ;;
    --build-dir=*) build_dir=${1#*=}; shift ;;
    -h|--help) usage ;;
    -*) echo "build.sh: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
(($# == 2)) || usage
name=$1 tag=$2
[[ $name =~ ^[a-z0-9][a-z0-9-]*$ ]] || die "NAME '$name' is not an image name (see deploy/images/list.sh)"
[[ $tag =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "TAG '$tag' is not a valid image tag"
containerfile=$here/$name/Containerfile
[[ -f $containerfile ]] || die "no image '$name': $containerfile does not exist (deploy/images/list.sh --all lists them)"
command -v buildah >/dev/null || die "buildah not found (scripts/install-deps.sh installs it)"

image_repo=${GPUREAP_IMAGE_REPO:-localhost/gpu-zombie-test}
node_repo=${GPUREAP_NODE_IMAGE_REPO:-localhost/gpureap}
if [[ $name == node ]]; then
  refs=("$node_repo:$tag")
else
  refs=("$image_repo:$name" "$image_repo:$name-$tag")
fi

ctx=$(mktemp -d "${TMPDIR:-/tmp}/gpureap-image-XXXXXX")
trap 'rm -rf "$ctx"' EXIT

# --- staging -------------------------------------------------------------
# One subtree of $ctx per component; each Containerfile COPYs the ones its
# image holds. Only regular files and directories (no links): COPY keeps them.

need_file() { [[ -f $1 && -x $1 ]] || die "$1: missing or not executable ($2)"; }
# (Whole outputs are read: an early-exiting reader would SIGPIPE the writer,
# which pipefail turns into a failure.)
is_static() {
  local headers
  headers=$(readelf -lW "$1" 2>/dev/null) || return 1
  [[ $headers != *"Requesting program interpreter"* ]]
}

# put SRC DEST_ROOT PATH_IN_IMAGE [MODE]
# ELF files lose their debug sections (a RelWithDebInfo gpureap is ~80 MB).
put() {
  install -D -m "${4:-0755}" "$1" "$2$3"
  if [[ $(head -c 4 "$2$3" | od -An -c | tr -d ' ') == 177ELF ]]; then
    strip --strip-debug "$2$3" || die "strip $1 failed"
  fi
}

# A dynamically linked program and every library it loads (ldd's closure,
# glibc and the loader included) at the paths the loader searches by default.
put_dynamic() {
  local bin=$1 root=$2 dest=$3 line lib path interp
  put "$bin" "$root" "$dest"
  interp=$(readelf -lW "$bin" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
  [[ -n $interp ]] || die "$bin: not dynamically linked"
  put "$(readlink -f "$interp")" "$root" "$interp"
  while read -r line; do
    # "libfoo.so.1 => /lib/x86_64-linux-gnu/libfoo.so.1 (0x…)"
    [[ $line == *" => "* ]] || continue
    lib=${line%% =>*}
    path=${line#*=> }; path=${path%% (*}
    [[ $path == /* && -f $path ]] || die "$bin: ldd cannot resolve $lib ('$line')"
    put "$(readlink -f "$path")" "$root" "/usr/lib/$(basename "$(dirname "$path")")/$lib" 0644
  done < <(ldd "$bin")
}

stage() {
  local bin=$build_dir
  local gpureap=$bin/src/cli/gpureap exporter=$bin/src/cli/gpureap-exporter init=$bin/src/init/gpureap-init
  local worker=$bin/src/workers/gpureap-worker worker_dyn=$bin/src/workers/gpureap-worker-dynamic
  local hint="build it: cmake --preset default && cmake --build --preset default --target gpureap gpureap-exporter gpureap-init gpureap-worker gpureap-worker-dynamic, or pass --build-dir"
  need_file "$gpureap" "$hint"
  need_file "$exporter" "$hint"
  need_file "$init" "$hint"
  need_file "$worker" "$hint"
  need_file "$worker_dyn" "$hint"
  is_static "$init" || die "$init is dynamically linked (a sanitizer build?); the images need the static one"
  is_static "$worker" || die "$worker is dynamically linked (a sanitizer build?); the images need the static one"
  local bash_static=/usr/bin/bash-static busybox=/bin/busybox tini=/usr/bin/tini-static
  for f in "$bash_static" "$busybox" "$tini"; do
    need_file "$f" "scripts/install-deps.sh installs bash-static, busybox-static and tini"
    is_static "$f" || die "$f is not statically linked"
  done

  # fs: the directories and files every image has.
  install -d -m 0755 "$ctx/fs/etc" "$ctx/fs/root" "$ctx/fs/app"
  install -d -m 1777 "$ctx/fs/tmp"
  printf 'root:x:0:0:root:/root:/bin/bash\nworker:x:1000:1000:worker:/tmp:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' \
    > "$ctx/fs/etc/passwd"
  printf 'root:x:0:\nworker:x:1000:\nnogroup:x:65534:\n' > "$ctx/fs/etc/group"
  chmod 0644 "$ctx/fs/etc/passwd" "$ctx/fs/etc/group"
  # shell: static bash as /bin/bash and /bin/sh; busybox as /bin/sleep (it
  # picks its applet from argv[0]) and /bin/busybox (ps, cat, … for exec).
  put "$bash_static" "$ctx/shell" /bin/bash
  put "$bash_static" "$ctx/shell" /bin/sh
  put "$busybox" "$ctx/shell" /bin/sleep
  put "$busybox" "$ctx/shell" /bin/busybox
  put "$tini" "$ctx/tini" /usr/bin/tini
  put "$init" "$ctx/init" /usr/local/bin/gpureap-init
  put "$worker" "$ctx/worker" /usr/local/bin/gpureap-worker
  put "$here/start-workers" "$ctx/worker" /usr/local/bin/start-workers
  put_dynamic "$worker_dyn" "$ctx/worker-dynamic" /usr/local/bin/gpureap-worker-dynamic
  put "$here/start-workers" "$ctx/worker-dynamic" /usr/local/bin/start-workers
  put_dynamic "$gpureap" "$ctx/gpureap" /usr/bin/gpureap
  # `gpureap exporter` runs the program beside gpureap.
  put_dynamic "$exporter" "$ctx/gpureap" /usr/bin/gpureap-exporter
  # civetweb loads libssl with dlopen for the exporter's TLS (web config).
  local so path
  for so in libssl.so.3 libcrypto.so.3; do
    path=$(ldconfig -p | awk -v n="$so" '$1 == n && /x86-64/ && !p {p = $NF} END {print p}')
    [[ -n $path ]] || die "$so not found (package libssl3): the exporter's TLS loads it with dlopen"
    put "$(readlink -f "$path")" "$ctx/gpureap" "/usr/lib/$(basename "$(dirname "$path")")/$so" 0644
  done
}

stage_torch() {
  cp -r "$repo/src/lab/python" "$ctx/python"
}

if [[ -e $here/$name/NOT-BUILT-HERE ]]; then
  echo "build.sh: $name needs a networked builder ($(head -1 "$here/$name/NOT-BUILT-HERE"))" >&2
  stage_torch
else
  stage
fi

# --- build -----------------------------------------------------------------
echo "build.sh: building $name from $build_dir" >&2
tag_args=()
for r in "${refs[@]}"; do tag_args+=(--tag "$r"); done
buildah build --quiet --layers=false --format oci \
  --label "org.opencontainers.image.source=gpureap" \
  --label "org.opencontainers.image.version=$tag" \
  --file "$containerfile" "${tag_args[@]}" "$ctx" >/dev/null \
  || die "buildah build of $containerfile failed"

# --- scenario images: the image must be the lab's scenario ------------------
scenarios_json() { "$build_dir/src/cli/gpureap" lab --print-scenarios; }
if [[ ! -e $here/$name/NOT-BUILT-HERE ]]; then
  scen=$(scenarios_json) || die "$build_dir/src/cli/gpureap lab --print-scenarios failed"
  ids=$(jq -r --arg t "$name" '[.scenarios[] | select(.image_tag == $t) | .id] | join(",")' <<<"$scen")
  if [[ -n $ids ]]; then
    config=$(buildah inspect --type image "${refs[0]}" | jq -c '.OCIv1.config')
    got_argv=$(jq -c '(.Entrypoint // []) + (.Cmd // [])' <<<"$config")
    got_worker=$(jq -r '.Env[] | select(startswith("GPUREAP_SCENARIO_WORKER=")) | sub("^[^=]*=";"")' <<<"$config")
    while read -r want; do
      id=$(jq -r .id <<<"$want")
      want_argv=$(jq -c .pid1_argv <<<"$want")
      want_worker=$(jq -r .worker <<<"$want")
      [[ $got_argv == "$want_argv" ]] ||
        die "$containerfile: ENTRYPOINT+CMD $got_argv differ from scenario $id's pid1_argv $want_argv"
      [[ $got_worker == "$want_worker" ]] ||
        die "$containerfile: GPUREAP_SCENARIO_WORKER '$got_worker' differs from scenario $id's worker '$want_worker'"
    done < <(jq -c --arg t "$name" '.scenarios[] | select(.image_tag == $t)' <<<"$scen")
    echo "build.sh: $name matches scenario(s) $ids of gpureap lab --print-scenarios" >&2
  fi
fi
printf '%s\n' "${refs[@]}"
