#!/usr/bin/env bash
# Brings the whole keel system up in containers: installs what is missing, builds the images
# from nothing (deploy/build-images.sh), runs docker compose up, waits until every service is
# healthy, copies the stack's CA and admin's client certificate to .keel/<project>/ with a
# kubeconfig, and says how to reach the API servers. `scripts/up.sh down` removes it all
# (volumes too, the certificates among them).
#
# `scripts/up.sh --swarm` deploys the same images as a Docker Swarm stack instead
# (deploy/swarm/keel-stack.yml: etcd members pinned to labelled nodes, the API servers a
# replicated service on a published port, certificates as swarm secrets), making a one-node
# swarm if the engine is in none; `scripts/up.sh --swarm down` removes the stack and leaves
# the swarm again if it made it. The same kubeconfig is written.
set -euo pipefail
cd "$(dirname "$0")/.."
project=${KEEL_PROJECT:-keel}
if [ "${1:-}" = "--swarm" ]; then
  source deploy/compose.sh # stack_kubeconfig
  source deploy/swarm.sh
  if [ "${2:-}" = "down" ]; then
    swarm_down "$project"
    exit 0
  fi
  ./scripts/install-deps.sh
  ./deploy/build-images.sh
  swarm_up "$project"
  dir=$PWD/.keel/$project
  cat <<MSG

keel is up on the swarm: every task healthy, TLS everywhere, RBAC on.
  kubeconfig:          export KUBECONFIG=$dir/kubeconfig   (user admin, group system:masters)
  API servers (gRPC):  https://127.0.0.1:${KEEL_API_PORT:-6443} (any node's address, on a swarm of several)
  try:                 ./target/release/keelctl get ns
  scale:               docker service scale ${project}_controller-manager=3
  stop:                scripts/up.sh --swarm down
MSG
  exit 0
fi
# Before compose.sh: on a new machine the compose tool is among what it installs.
[ "${1:-}" = "down" ] || ./scripts/install-deps.sh
source deploy/compose.sh
if [ "${1:-}" = "down" ]; then
  $compose -p "$project" down -v --remove-orphans
  rm -rf ".keel/$project"
  exit 0
fi
./deploy/build-images.sh
$compose -p "$project" up -d
echo "==> waiting for every service to be healthy"
for _ in $(seq 1 240); do
  states=$(stack_states "$project")
  total=$(echo "$states" | grep -c . || true)
  healthy=$(echo "$states" | grep -c '(healthy)' || true)
  if [ "$total" -gt 0 ] && [ "$healthy" = "$total" ]; then
    $compose -p "$project" ps
    # The CA and admin's certificate (from the stack's certs volume), and a kubeconfig.
    dir=$PWD/.keel/$project
    stack_certs "$project" "$dir"
    stack_kubeconfig "$dir" "https://127.0.0.1:${KEEL_API_PORT_0:-6443}"
    cat <<MSG

keel is up: $healthy services healthy, TLS everywhere, RBAC on.
  kubeconfig:          export KUBECONFIG=$dir/kubeconfig   (user admin, group system:masters)
  API servers (gRPC):  https://127.0.0.1:${KEEL_API_PORT_0:-6443}  https://127.0.0.1:${KEEL_API_PORT_1:-6444}
  try:                 ./target/release/keelctl get ns
                       (both servers: --server https://127.0.0.1:${KEEL_API_PORT_0:-6443},https://127.0.0.1:${KEEL_API_PORT_1:-6444})
  metrics:             curl --cacert $dir/ca.crt --cert $dir/admin.crt --key $dir/admin.key https://127.0.0.1:${KEEL_HTTP_PORT_0:-6080}/metrics
  stop:                scripts/up.sh down
MSG
    exit 0
  fi
  sleep 0.5
done
echo "keel did not become healthy:" >&2
$compose -p "$project" ps >&2
exit 1
