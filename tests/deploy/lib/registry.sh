# shellcheck shell=bash
# Sourced by the deploy tests (tests/deploy/charts/run.sh,
# tests/deploy/pipeline/pipeline.sh): Debian's docker-registry, the stand-in
# for Harbor, on a free loopback port.
#
# registry_start DIR [tls]: its config, storage and log under DIR. Sets
# registry_pid as soon as it runs (the caller stops it by that PID, also when
# the start fails), then registry_port once /v2/ answers; with tls also
# registry_cert (a self-signed certificate for 127.0.0.1) and basic auth for
# user "ci" with password registry_password. Returns 1 with registry_error set
# when it does not come up within 20 s. Needs curl and python3 (openssl for tls).
# shellcheck disable=SC2034  # registry_* are the results, read by the caller
registry_start() {
  local dir=$1 tls=${2:-}
  registry_pid="" registry_port="" registry_cert="" registry_password="" registry_error=""
  mkdir -p "$dir/storage"
  # A free port on loopback: bind port 0, read it back, let it go.
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  cat >"$dir/config.yml" <<CONFIG
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $dir/storage
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
CONFIG
  local scheme=http curl_args=()
  if [[ $tls == tls ]]; then
    registry_cert=$dir/cert.pem
    if ! openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 \
      -addext subjectAltName=IP:127.0.0.1 -keyout "$dir/key.pem" -out "$registry_cert" 2>"$dir/openssl.log"; then
      registry_error="openssl: $(cat "$dir/openssl.log")"
      return 1
    fi
    registry_password=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
    # bcrypt, as the registry's htpasswd wants (glibc's libxcrypt through Python).
    REGISTRY_PASSWORD=$registry_password python3 -W ignore -c \
      'import crypt, os; print("ci:" + crypt.crypt(os.environ["REGISTRY_PASSWORD"], crypt.mksalt(crypt.METHOD_BLOWFISH)))' \
      >"$dir/htpasswd"
    cat >>"$dir/config.yml" <<CONFIG
  tls:
    certificate: $registry_cert
    key: $dir/key.pem
auth:
  htpasswd:
    realm: gpureap-test
    path: $dir/htpasswd
CONFIG
    scheme=https
    curl_args=(--cacert "$registry_cert")
  fi
  docker-registry serve "$dir/config.yml" >"$dir/log" 2>&1 &
  registry_pid=$!
  local code="" i
  for ((i = 0; i < 200; i++)); do # 20 s at most
    if ! kill -0 "$registry_pid" 2>/dev/null; then
      registry_error="docker-registry exited: $(cat "$dir/log")"
      return 1
    fi
    code=$(curl -s "${curl_args[@]}" -o /dev/null -w '%{http_code}' "$scheme://127.0.0.1:$port/v2/" || true)
    # 200: open; 401: asking for the credentials. Up either way.
    if [[ $code == 200 || $code == 401 ]]; then
      registry_port=$port
      return 0
    fi
    sleep 0.1
  done
  registry_error="docker-registry on $scheme://127.0.0.1:$port did not answer /v2/ within 20 s: $(cat "$dir/log")"
  return 1
}
