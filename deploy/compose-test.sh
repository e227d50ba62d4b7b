#!/usr/bin/env bash
# The distributed control plane under faults, from nothing: builds the images, brings the
# compose stack up, and while keel-loadtest writes and watches through both API servers,
# kills one etcd member and one API server. Checks that no acknowledged write is lost, that
# every watcher sees every event exactly once across the failover, and that the killed
# containers rejoin when restarted; then that the controller-managers share the shards and
# take over a dead one's, and the README's
# Istio story (the initializer injects Envoy). Tears everything down (containers, network,
# volumes).
set -euo pipefail
cd "$(dirname "$0")/.."

project=keel-citest
export KEEL_API_PORT_0=${KEEL_API_PORT_0:-46443} KEEL_API_PORT_1=${KEEL_API_PORT_1:-46444}
export KEEL_HTTP_PORT_0=${KEEL_HTTP_PORT_0:-46080} KEEL_HTTP_PORT_1=${KEEL_HTTP_PORT_1:-46081}
api="http://127.0.0.1:$KEEL_API_PORT_0,http://127.0.0.1:$KEEL_API_PORT_1"
metrics="http://127.0.0.1:$KEEL_HTTP_PORT_0/metrics,http://127.0.0.1:$KEEL_HTTP_PORT_1/metrics"
source deploy/compose.sh # sets $compose: docker-compose, or the docker compose plugin
dc() { $compose -p "$project" "$@"; }
work=$(mktemp -d)
passed=0
failed=0

teardown() {
  dc down -v --remove-orphans >/dev/null 2>&1 || true
  local left
  left=$(docker ps -aq --filter "label=com.docker.compose.project=$project"; \
         docker network ls -q --filter "label=com.docker.compose.project=$project"; \
         docker volume ls -q --filter "label=com.docker.compose.project=$project")
  if [ -n "$left" ]; then echo "FAIL: left behind after teardown: $left"; failed=$((failed + 1)); fi
  rm -rf "$work"
}
trap teardown EXIT
check() {
  if eval "$2"; then echo "ok: $1"; passed=$((passed + 1)); else echo "FAIL: $1"; failed=$((failed + 1)); fi
}

# Waits (up to $2 seconds) until every container of the project (3 etcd members, 2 API servers,
# 2 controller-managers, 1 initializer: 8, or $3) is running and healthy.
wait_healthy() {
  local what=$1 deadline=$((SECONDS + $2)) want=${3:-8}
  while [ $SECONDS -lt $deadline ]; do
    local states
    states=$(docker ps -a --filter "label=com.docker.compose.project=$project" --format '{{.Names}} {{.Status}}')
    if [ "$(echo "$states" | grep -c '(healthy)')" = "$want" ]; then echo "ok: $what"; passed=$((passed + 1)); return 0; fi
    sleep 0.5
  done
  echo "FAIL: $what"; docker ps -a --filter "label=com.docker.compose.project=$project"; failed=$((failed + 1)); return 1
}

# Reads a counter summed over both API servers' metrics.
writes_seen() {
  local total=0 n
  for port in "$KEEL_HTTP_PORT_0" "$KEEL_HTTP_PORT_1"; do
    n=$(curl -fsS "http://127.0.0.1:$port/metrics" 2>/dev/null |
        awk '/^keel_apiserver_requests_total\{verb="patch".*code="OK"/ {s += $NF} END {print s + 0}')
    total=$((total + ${n%.*}))
  done
  echo "$total"
}

./deploy/build-images.sh
dc down -v --remove-orphans >/dev/null 2>&1 || true
echo "==> docker compose up"
dc up -d
wait_healthy "the stack is up: 3 etcd members, 2 API servers, 2 controller-managers, the initializer, all healthy" 120

lt=./target/release/keel-loadtest
echo "==> writing and watching through both API servers for 40s"
$lt --server "$api" --metrics-url "$metrics" --namespace lt-patch --duration 40s --json \
  patch --writers 16 --objects 4 >"$work/patch.json" 2>"$work/patch.err" &
patch_pid=$!
$lt --server "$api" --namespace lt-watch --duration 40s --json \
  watch --watchers 10 --writers 2 --objects 2 --rate 50 >"$work/watch.json" 2>"$work/watch.err" &
watch_pid=$!

# Faults once writes are flowing.
deadline=$((SECONDS + 60))
while [ "$(writes_seen)" -lt 500 ] && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
echo "==> killing etcd-1 and apiserver-0 ($(writes_seen) PATCHes so far)"
docker kill "${project}_etcd-1_1" "${project}_apiserver-0_1" >/dev/null 2>&1 ||
  docker kill "${project}-etcd-1-1" "${project}-apiserver-0-1" >/dev/null
killed_at=$(writes_seen)
# The survivors carry on: wait for 500 more writes, then bring the killed ones back.
deadline=$((SECONDS + 60))
while [ "$(writes_seen)" -lt $((killed_at + 500)) ] && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
check "writes go on while a member and a server are down" "[ $(writes_seen) -ge $((killed_at + 500)) ]"
echo "==> restarting them"
dc start etcd-1 apiserver-0 >/dev/null
wait_healthy "the killed containers rejoin: all healthy again" 120

wait $patch_pid || true
wait $watch_pid || true
# A top-level number from a keel-loadtest --json result.
field() { grep -o "\"$2\":[0-9]*" "$1" | head -1 | cut -d: -f2; }
echo "--- patch: $(cat "$work/patch.json")"
echo "--- watch: $(cat "$work/watch.json")"
check "writers acknowledged writes" "[ $(field "$work/patch.json" ok) -gt 1000 ]"
check "no acknowledged write was lost" "[ $(field "$work/patch.json" lost_updates) = 0 ]"
check "watchers missed no event" "[ $(field "$work/watch.json" events_missed) = 0 ]"
check "watchers saw no event twice" "[ $(field "$work/watch.json" events_duplicated) = 0 ]"
check "the restarted API server serves writes" \
  "$lt --server http://127.0.0.1:$KEEL_API_PORT_0 --namespace lt-after --duration 2s --json patch --writers 2 >$work/after.json 2>/dev/null && [ \$(field $work/after.json errors) = 0 ]"

# The controller-managers: the replicas split the 32 shard leases; the survivors take a dead
# one's shards; a restarted or added replica takes its share.
kc() { ./target/release/keelctl --server "$api" "$@"; }
# A number from keelctl's JSON output: json_number FIELD.
json_number() { grep -o "\"$1\": *[0-9]*" | head -1 | grep -o '[0-9]*$'; }
available() { kc get deployment nginx -o json 2>/dev/null | json_number availableReplicas; }
wait_available() {
  local n=$1 deadline=$((SECONDS + $2))
  while [ "$(available)" != "$n" ] && [ $SECONDS -lt $deadline ]; do sleep 0.5; done
  [ "$(available)" = "$n" ]
}
cm_containers() {
  docker ps -q --filter "label=com.docker.compose.project=$project" --filter "label=com.docker.compose.service=controller-manager"
}
# The shards each running controller-manager holds, sorted ("16 16"); "none" if a shard lease
# is missing or names no running replica. A replica's identity is its container's host name.
split() {
  local hosts holders
  hosts=$(for id in $(cm_containers); do docker inspect -f '{{.Config.Hostname}}' "$id"; done)
  holders=$(kc get leases -n keel-system -o json 2>/dev/null | awk -F'"' '
    /"name":/ { name = $4 }
    /"holderIdentity":/ { if (name ~ /^keel-controller-manager-shard-[0-9]+$/) print $4 }')
  if [ "$(echo "$holders" | grep -c .)" != 32 ] || echo "$holders" | grep -qvxF "$hosts"; then
    echo none
    return
  fi
  echo "$holders" | sort | uniq -c | awk '{print $1}' | sort -n | tr '\n' ' ' | sed 's/ $//'
}
wait_split() {
  local want=$1 deadline=$((SECONDS + $2))
  while [ "$(split)" != "$want" ] && [ $SECONDS -lt $deadline ]; do sleep 0.5; done
  [ "$(split)" = "$want" ]
}
echo "==> a Deployment rolled out by the controller-managers"
kc apply -f - <<'YAML' >/dev/null
apiVersion: apps/v1
kind: Deployment
metadata:
  name: nginx
spec:
  replicas: 2
  selector:
    matchLabels: {app: nginx}
  template:
    metadata:
      labels: {app: nginx}
    spec:
      containers:
        - name: nginx
          image: nginx:1.7.9
YAML
check "the Deployment's 2 Pods are available" "wait_available 2 60"
check "the 2 controller-managers split the 32 shards 16/16" "wait_split '16 16' 60"
victim=$(cm_containers | head -1)
echo "==> killing controller-manager $victim and scaling the Deployment to 3"
docker kill "$victim" >/dev/null
kc patch deployment nginx --type merge -p '{"spec":{"replicas":3}}' >/dev/null
check "the survivor scales it: 3 Pods available" "wait_available 3 90"
check "the survivor holds all 32 shards" "wait_split 32 60"
docker start "$victim" >/dev/null
wait_healthy "the killed controller-manager comes back" 120
check "it takes its share back: 16/16" "wait_split '16 16' 60"
echo "==> scaling the controller-manager to 3 replicas"
dc up -d --no-recreate --scale controller-manager=3 controller-manager >/dev/null 2>&1
wait_healthy "the third controller-manager is healthy" 120 9
check "3 controller-managers split the shards 10/11/11" "wait_split '10 11 11' 60"
kc patch deployment nginx --type merge -p '{"spec":{"replicas":1}}' >/dev/null
check "and scale the Deployment down to 1" "wait_available 1 60"

echo "==> the README's Istio story: the sidecar ConfigMap, the InitializerConfiguration, myapp-pod"
kc apply -f deploy/examples/envoy-initializer.yaml >/dev/null
kc apply -f deploy/examples/initializer-configuration.yaml >/dev/null
check "keelctl create returns once the initializer is done" \
  "kc create -f deploy/examples/myapp-pod.yaml --timeout 60s >/dev/null 2>&1"
check "myapp-pod runs with the envoy sidecar it never asked for" \
  "kc get pod myapp-pod -o json | grep -q '\"name\": *\"envoy\"'"

echo "==> the README's Network story: the CRD, example-network, the controller's allocation"
kc apply -f deploy/examples/network-crd.yaml >/dev/null
served() { kc get networks >/dev/null 2>&1; }
wait_for() { local deadline=$((SECONDS + $2)); while ! eval "$1" && [ $SECONDS -lt $deadline ]; do sleep 0.5; done; eval "$1"; }
check "the API servers serve Networks" "wait_for served 10"
kc apply -f deploy/examples/example-network.yaml >/dev/null
ready() { kc get network example-network -o json 2>/dev/null | grep -q '"phase": *"Ready"'; }
check "example-network is Ready, its range allocated" "wait_for ready 60"
check "keelctl get networks shows the CRD's columns" \
  "kc get networks | grep -Eq '^example-network +192\.168\.0\.0/16 +192\.168\.0\.1 +Ready'"

trap - EXIT
teardown
echo "compose test: $passed passed, $failed failed"
[ "$failed" = 0 ]
