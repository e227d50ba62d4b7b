#!/usr/bin/env bash
# Runs every test: installs what is missing, builds the binaries the end-to-end tests start,
# runs unit, integration and end-to-end tests (each against its own real etcd), the gRPC
# conformance test with Python's grpcio (tests/python), the compose
# fault test, the 2-minute chaos test and the swarm test (real containers, a real one-node
# swarm; KEEL_SKIP_COMPOSE=1 skips all three),
# then the fresh-machine check: the install, the build, a real-etcd test and both README
# commands in a clean Debian container (KEEL_SKIP_FRESH_MACHINE=1 skips it).
#
# The tests leave about half of the CPU idle (they wait on etcd, servers and containers): the
# release build the compose tests' images need, and the fresh-machine check's install and builds,
# run meanwhile in the background under Linux's SCHED_IDLE policy (`chrt --idle 0`), so they take
# only what the tests leave: a test's process that wakes takes the CPU back at once (under
# `nice 19` it waited up to a scheduler slice, and the tests ran a third slower). The
# fresh-machine check runs its own tests and the README's commands after the host's are done,
# and its output is shown then.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step's line says when it began (minutes:seconds since the start).
step() { printf '==> [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }
bg=$(mktemp -d)
fresh_name=keel-fresh-machine-check-$$
fresh_pid= release_pid=
finish() {
  local status=$?
  for pid in $fresh_pid $release_pid; do kill "$pid" 2>/dev/null || true; done
  [ -z "$fresh_pid" ] || docker rm -f "$fresh_name" >/dev/null 2>&1 || true
  rm -rf "$bg"
  step "done (exit $status)"
}
trap finish EXIT
./scripts/install-deps.sh
if [ "${KEEL_SKIP_FRESH_MACHINE:-}" != 1 ]; then
  step "fresh-machine check: started in the background (its output comes at its step)"
  KEEL_FRESH_GATE=$bg/gate KEEL_FRESH_NAME=$fresh_name KEEL_FRESH_CPU_SHARES=2 \
    chrt --idle 0 ./deploy/fresh-machine-check.sh >"$bg/fresh.log" 2>&1 &
  fresh_pid=$!
fi
step building
cargo build --workspace --bins --locked
if [ "${KEEL_SKIP_COMPOSE:-}" != 1 ]; then
  step "release build for the compose tests' images: started in the background"
  chrt --idle 0 cargo build --release --locked --bins >"$bg/release.log" 2>&1 &
  release_pid=$!
fi
step testing
cargo test --workspace --locked
step "Python tests (grpcio conformance, the Kubernetes client)"
./tests/python/run.sh
if [ "${KEEL_SKIP_COMPOSE:-}" = 1 ]; then
  echo "==> compose and chaos tests skipped (KEEL_SKIP_COMPOSE=1)"
else
  step "release build (background): waiting for it to finish"
  status=0
  wait "$release_pid" || status=$?
  release_pid=
  tail -n 3 "$bg/release.log"
  [ "$status" = 0 ] || { cat "$bg/release.log"; exit "$status"; }
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
  step "fresh-machine check (its output from the start; its tests run now)"
  touch "$bg/gate/go" 2>/dev/null || { mkdir -p "$bg/gate" && touch "$bg/gate/go"; }
  tail -n +1 -f --pid="$fresh_pid" "$bg/fresh.log"
  status=0
  wait "$fresh_pid" || status=$?
  fresh_pid=
  [ "$status" = 0 ] || exit "$status"
fi
