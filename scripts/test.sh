#!/usr/bin/env bash
# Runs every test: installs what is missing, builds the binaries the end-to-end tests start,
# runs unit, integration and end-to-end tests (each against its own real etcd), then the
# compose fault test (real containers; KEEL_SKIP_COMPOSE=1 skips it).
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
