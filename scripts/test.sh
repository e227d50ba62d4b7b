#!/usr/bin/env bash
# Runs every test: installs what is missing, builds the binaries the end-to-end tests start,
# then runs unit, integration and end-to-end tests (each against its own real etcd).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
echo "==> building"
cargo build --workspace --bins --locked
echo "==> testing"
cargo test --workspace --locked
