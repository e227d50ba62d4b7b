#!/usr/bin/env bash
# Brings the whole keel system up in containers: installs what is missing, builds the images
# from nothing (deploy/build-images.sh), runs docker compose up, waits until every service is
# healthy and says how to reach the API servers. `scripts/up.sh down` removes it all (volumes
# too).
set -euo pipefail
cd "$(dirname "$0")/.."
project=${KEEL_PROJECT:-keel}
# Before compose.sh: on a new machine the compose tool is among what it installs.
[ "${1:-}" = "down" ] || ./scripts/install-deps.sh
source deploy/compose.sh
if [ "${1:-}" = "down" ]; then
  $compose -p "$project" down -v --remove-orphans
  exit 0
fi
./deploy/build-images.sh
$compose -p "$project" up -d
echo "==> waiting for every service to be healthy"
for _ in $(seq 1 240); do
  total=$(docker ps -a --filter "label=com.docker.compose.project=$project" -q | wc -l)
  healthy=$(docker ps --filter "label=com.docker.compose.project=$project" --filter health=healthy -q | wc -l)
  if [ "$total" -gt 0 ] && [ "$healthy" = "$total" ]; then
    $compose -p "$project" ps
    cat <<MSG

keel is up: $healthy services healthy.
  API servers (gRPC):  http://127.0.0.1:${KEEL_API_PORT_0:-6443}  http://127.0.0.1:${KEEL_API_PORT_1:-6444}
  health and metrics:  http://127.0.0.1:${KEEL_HTTP_PORT_0:-6080}/metrics  http://127.0.0.1:${KEEL_HTTP_PORT_1:-6081}/metrics
  try:                 ./target/release/keelctl --server http://127.0.0.1:6443,http://127.0.0.1:6444 get ns
  stop:                scripts/up.sh down
MSG
    exit 0
  fi
  sleep 0.5
done
echo "keel did not become healthy:" >&2
$compose -p "$project" ps >&2
exit 1
