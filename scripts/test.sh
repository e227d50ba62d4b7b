#!/usr/bin/env bash
# Runs every test: installs what is missing, builds the binaries the end-to-end tests start,
# runs unit, integration and end-to-end tests (each against its own real etcd), the gRPC
# conformance test with Python's grpcio (tests/python), the compose
# fault test, the 2-minute chaos test and the swarm test (real containers, a real one-node
# swarm; KEEL_SKIP_COMPOSE=1 skips all three),
# then the fresh-machine check: the install, the build, a real-etcd test and both README
# commands in a clean Debian container (KEEL_SKIP_FRESH_MACHINE=1 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step's line says when it began (minutes:seconds since the start).
step() { printf '==> [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }
trap 'step "done (exit $?)"' EXIT
./scripts/install-deps.sh
step building
cargo build --workspace --bins --locked
step testing
cargo test --workspace --locked
step "Python tests (grpcio conformance, the Kubernetes client)"
./tests/python/run.sh
if [ "${KEEL_SKIP_COMPOSE:-}" = 1 ]; then
  echo "==> compose and chaos tests skipped (KEEL_SKIP_COMPOSE=1)"
else
  step "compose test"
  ./deploy/compose-test.sh
  step "chaos test (2 minutes)"
  ./deploy/chaos-test.sh --duration 2m
  step "swarm test"
  ./deploy/swarm-test.sh
fi
if [ "${KEEL_SKIP_FRESH_MACHINE:-}" = 1 ]; then
  echo "==> fresh-machine check skipped (KEEL_SKIP_FRESH_MACHINE=1)"
else
  step "fresh-machine check"
  ./deploy/fresh-machine-check.sh
fi
