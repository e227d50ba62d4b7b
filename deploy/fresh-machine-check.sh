#!/usr/bin/env bash
# The README's two commands on a new machine, as a test: a clean Debian bookworm root file system,
# built from Debian's packages (mmdebstrap; no image registry, so `docker import`), plays the new
# machine: Debian with Docker and nothing else. Inside a container of it, with only the host's Rust
# toolchain mounted read-only, this runs scripts/install-deps.sh, the release build, a test
# against a real etcd, the structured-merge-diff oracle's test (Go), scripts/local-up.sh, and scripts/up.sh against the host's Docker engine
# (socket mounted, stack under a project and ports of its own, removed afterwards). Any package
# missing from install-deps.sh fails one of these steps, and so this check.
#
# The image is cached under a tag derived from its recipe (below) and rebuilt when it changes.
# Crates downloaded from crates.io are cached in a Docker volume; nothing built is reused, so every
# build script runs against the fresh machine's packages.
#
# The new machine builds with the release profile unoptimized (opt-level 0, no debug info): what
# this check proves is that every package the build, the tests and the README's commands need is
# installed, not how fast the binaries run, and an optimized build would take twice as long
# (8 minutes on 2 cores). The compose and chaos tests run the optimized images.
#
# scripts/test.sh runs it beside its other steps, on the CPU they leave idle: KEEL_FRESH_GATE names
# a directory the container waits in, after its builds and before its tests, until a file `go`
# appears there; KEEL_FRESH_CPU_SHARES weighs the container against the host's processes (Docker's
# --cpu-shares; 1024, a process's weight, by default).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--inside" ]; then
  # Inside the container: the new machine, in /keel, a copy of the tree. Beside the host's
  # tests (a gate, below), the install and the builds take only the CPU the host leaves idle
  # (SCHED_IDLE: the container's CPU weight alone does not give a waking host process the CPU
  # back at once).
  idle=()
  if [ -d /gate ]; then idle=(chrt --idle 0); fi
  echo "==> [new machine] scripts/install-deps.sh"
  "${idle[@]}" ./scripts/install-deps.sh
  echo "==> [new machine] release build"
  "${idle[@]}" cargo build --release --locked --workspace --bins
  echo "==> [new machine] the tests' build"
  "${idle[@]}" cargo test --release --locked --no-run -p keel-tests --test verbs
  "${idle[@]}" cargo test --release --locked --no-run -p keel-patch --test smd_oracle
  "${idle[@]}" cargo test --release --locked --no-run -p keel-apiserver --test openapi_oracle
  if [ -d /gate ]; then
    # Run beside the host's tests (scripts/test.sh): what follows runs tests with deadlines, and
    # the last step uses the host's Docker engine, so it waits until the host is done with both.
    echo "==> [new machine] built; waiting for the host's tests to finish"
    for _ in $(seq 1 3600); do [ -e /gate/go ] && break; sleep 1; done
    [ -e /gate/go ] || { echo "the host's tests did not finish within an hour" >&2; exit 1; }
  fi
  echo "==> [new machine] a test against a real etcd (tests/tests/verbs.rs)"
  cargo test --release --locked -p keel-tests --test verbs -- --test-threads 2
  echo "==> [new machine] the structured-merge-diff differential test (Go and the library from Debian)"
  SMD_ORACLE_SEQUENCES=20 cargo test --release --locked -p keel-patch --test smd_oracle
  echo "==> [new machine] the kube-openapi differential test of CRD schema errors (Go and the library from Debian)"
  OPENAPI_ORACLE_OBJECTS=50 cargo test --release --locked -p keel-apiserver --test openapi_oracle
  echo "==> [new machine] the grpcio conformance test (python3-venv, grpcio from PyPI)"
  KEEL_BIN_DIR=target/release ./tests/python/run.sh
  echo "==> [new machine] scripts/local-up.sh"
  ./scripts/local-up.sh
  ./target/release/keelctl --server http://127.0.0.1:6443 get namespaces
  ./scripts/local-up.sh down
  echo "==> [new machine] scripts/up.sh (host's Docker engine)"
  ./scripts/up.sh
  ./scripts/up.sh down
  echo "==> [new machine] all steps passed"
  exit 0
fi

# The recipe of the new machine. Docker's client comes with docker.io (Debian's Docker), as a new
# machine has Docker; everything else must come from install-deps.sh.
suite=bookworm
mirror=http://deb.debian.org/debian
variant=minbase
include=docker.io
recipe="mmdebstrap --variant=$variant --include=$include $suite $mirror"
tag=$(printf '%s\n' "$recipe" | sha256sum | cut -c1-12)
image=keel-fresh-machine:$tag

started=$SECONDS
if docker image inspect "$image" >/dev/null 2>&1; then
  echo "==> new machine image $image (cached)"
else
  echo "==> building the new machine's root file system: $recipe"
  command -v mmdebstrap >/dev/null 2>&1 || { echo "mmdebstrap missing: run scripts/install-deps.sh" >&2; exit 1; }
  rootfs=$(mktemp -d)
  trap 'rm -rf "$rootfs"' EXIT
  mmdebstrap --quiet --variant="$variant" --include="$include" "$suite" "$rootfs/rootfs.tar" "$mirror"
  docker import "$rootfs/rootfs.tar" "$image" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
  # Older recipes' images are no longer needed.
  docker image ls --format '{{.Repository}}:{{.Tag}}' keel-fresh-machine |
    { grep -vx "$image" || true; } | xargs -r docker image rm >/dev/null
  echo "==> $image built in $((SECONDS - started)) s"
fi

# What a fresh clone holds (tracked and new files, nothing ignored: no target/).
input=$(mktemp -d)
trap 'rm -rf "$input"' EXIT
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf "$input/src.tar"

# Site certificate authorities (a TLS-inspecting egress proxy, say) belong to every machine of the
# site, new or not: the host's local ones are handed to the container, where Debian's
# ca-certificates, once install-deps.sh installs it, adds them to the bundle as on the host.
site_cas=/usr/local/share/ca-certificates
sysroot=$(rustc --print sysroot)
echo "==> running the README's commands in a container of $image (toolchain: $(basename "$sysroot"))"
gate=()
if [ -n "${KEEL_FRESH_GATE:-}" ]; then
  mkdir -p "$KEEL_FRESH_GATE"
  gate=(-v "$KEEL_FRESH_GATE:/gate:ro")
fi
# Named, so that the container ends with this script even when it is stopped (the docker client
# going does not stop the container).
name=${KEEL_FRESH_NAME:-keel-fresh-machine-check-$$}
trap 'docker rm -f "$name" >/dev/null 2>&1 || true; rm -rf "$input"' EXIT
docker run --rm --init --name "$name" --cpu-shares "${KEEL_FRESH_CPU_SHARES:-1024}" "${gate[@]}" \
  -v "$HOME/.rustup:$HOME/.rustup:ro" \
  -v "$HOME/.cargo:$HOME/.cargo:ro" \
  -v "$input:/input:ro" \
  -v "$site_cas:$site_cas:ro" \
  -v /var/run/docker.sock:/var/run/docker.sock \
  -v keel-fresh-machine-crates:/cargo-home \
  -e CARGO_HOME=/cargo-home \
  -e PATH="$sysroot/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  -e CARGO_PROFILE_RELEASE_OPT_LEVEL=0 \
  -e CARGO_PROFILE_RELEASE_DEBUG=false \
  -e CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256 \
  -e KEEL_PROJECT=keel-freshcheck \
  -e KEEL_API_PORT_0=47443 -e KEEL_API_PORT_1=47444 \
  -e KEEL_HTTP_PORT_0=47080 -e KEEL_HTTP_PORT_1=47081 \
  "$image" bash -c 'mkdir /keel && tar -xf /input/src.tar -C /keel && exec /keel/deploy/fresh-machine-check.sh --inside'
echo "==> fresh-machine check passed in $((SECONDS - started)) s"
