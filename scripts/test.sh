#!/usr/bin/env bash
# Runs every test: installs what is missing, builds the binaries the end-to-end tests start,
# runs unit, integration and end-to-end tests (each against its own real etcd), the compose
# fault test (real containers; KEEL_SKIP_COMPOSE=1 skips it), then the fresh-machine check: the
# install, the build, a real-etcd test and both README commands in a clean Debian container
# (KEEL_SKIP_FRESH_MACHINE=1 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
echo "==> building"
cargo build --workspace --bins --locked
echo "==> testing"
cargo test --workspace --locked
if [ "${KEEL_SKIP_COMPOSE:-}" = 1 ]; then
  echo "==> compose test skipped (KEEL_SKIP_COMPOSE=1)"
else
  echo "==> compose test"
  ./deploy/compose-test.sh
fi
if [ "${KEEL_SKIP_FRESH_MACHINE:-}" = 1 ]; then
  echo "==> fresh-machine check skipped (KEEL_SKIP_FRESH_MACHINE=1)"
else
  echo "==> fresh-machine check"
  ./deploy/fresh-machine-check.sh
fi
