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
api="https://127.0.0.1:$KEEL_API_PORT_0,https://127.0.0.1:$KEEL_API_PORT_1"
source deploy/lib.sh # dc, $work, $certs, check, wait_healthy, stack_teardown, the stack_* helpers
# KEEL_COMPOSE_LOGS=DIR keeps every container's log there.
teardown() { stack_teardown "${KEEL_COMPOSE_LOGS:-}"; }
trap teardown EXIT

# Reads a counter summed over both API servers' metrics.
writes_seen() {
  local total=0 n
  for port in "$KEEL_HTTP_PORT_0" "$KEEL_HTTP_PORT_1"; do
    n=$(stack_curl "$certs" "https://127.0.0.1:$port/metrics" 2>/dev/null |
        awk '/^keel_apiserver_requests_total\{verb="patch".*code="OK"/ {s += $NF} END {print s + 0}')
    total=$((total + ${n%.*}))
  done
  echo "$total"
}

./deploy/build-images.sh
dc down -v --remove-orphans >/dev/null 2>&1 || true
echo "==> docker compose up"
dc up -d
wait_healthy "the stack is up: 3 etcd members, 2 API servers, 2 controller-managers, the initializer, the injector, all healthy" 120
# The CA and the client certificates, for the clients on this host.
stack_certs "$project" "$certs"
stack_kubeconfig "$certs" "https://127.0.0.1:$KEEL_API_PORT_0"

# Nothing in plain text between containers: from a container on the stack's network, a
# plain-text request to each port gets no HTTP 200 (TLS ports answer with an error; the
# controllers' side ports and etcd's health listen on their own loopback only), while the
# same request over TLS works.
network=$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{end}}' \
  "$(docker ps -q --filter "label=com.docker.compose.project=$project" --filter label=com.docker.compose.service=apiserver-0)")
probe() { docker run --rm --network "$network" -v "${project}_certs:/certs:ro" --entrypoint keel-probe keel:local "$@" 2>&1; }
# A plain-text GET must reach the container and be turned away there: refused (nothing
# listens but on loopback), reset or cut short (a TLS server), or a 400 (etcd's answer to
# plain HTTP on a TLS port); a name that does not resolve is no proof.
turned_away() {
  local out
  if out=$(probe "http://$1/health"); then echo "answered: $out"; return 1; fi
  echo "$out" | grep -Eqi 'refused|reset|HTTP 400|HTTP $|end of file|broken pipe|unexpected eof|os error 104'
}
for target in etcd-0:2379 etcd-0:2380 etcd-0:2381 apiserver-0:6443 apiserver-0:6080 controller-manager:6090 initializer:6091 injector:6092 injector:8443; do
  check "no plain text on $target" "turned_away $target"
done
check "TLS to apiserver-0:6080 from the network works" "probe --cacert /certs/ca.crt https://apiserver-0:6080/readyz >/dev/null"

lt="./target/release/keel-loadtest --certificate-authority $certs/ca.crt --client-certificate $certs/loadtest.crt --client-key $certs/loadtest.key"
echo "==> writing and watching through both API servers for 40s, as the user keel-loadtest"
$lt --server "$api" --namespace lt-patch --duration 40s --json \
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
  "$lt --server https://127.0.0.1:$KEEL_API_PORT_0 --namespace lt-after --duration 2s --json patch --writers 2 >$work/after.json 2>/dev/null && [ \$(field $work/after.json errors) = 0 ]"

# The controller-managers: the replicas split the 32 shard leases; the survivors take a dead
# one's shards; a restarted or added replica takes its share.
kc() { ./target/release/keelctl --kubeconfig "$certs/kubeconfig" --server "$api" "$@"; }
# A number from keelctl's JSON output: json_number FIELD.
json_number() { grep -o "\"$1\": *[0-9]*" | head -1 | grep -o '[0-9]*$'; }
available() { kc get deployment nginx -o json 2>/dev/null | json_number availableReplicas; }
wait_available() {
  local n=$1 deadline=$((SECONDS + $2))
  while [ "$(available)" != "$n" ] && [ $SECONDS -lt $deadline ]; do sleep 0.5; done
  [ "$(available)" = "$n" ]
}
cm_filter=(--filter "label=com.docker.compose.project=$project" --filter "label=com.docker.compose.service=controller-manager")
cm_containers() { docker ps -q "${cm_filter[@]}"; }
cm_hosts() { container_hosts "${cm_filter[@]}"; } # for split (deploy/lib.sh)
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
wait_healthy "the third controller-manager is healthy" 120 10
check "3 controller-managers split the shards 10/11/11" "wait_split '10 11 11' 60"
kc patch deployment nginx --type merge -p '{"spec":{"replicas":1}}' >/dev/null
check "and scale the Deployment down to 1" "wait_available 1 60"

echo "==> the README's Istio story: the sidecar ConfigMap, the InitializerConfiguration, myapp-pod"
kc apply -f deploy/examples/envoy-initializer.yaml >/dev/null
kc apply -f deploy/examples/initializer-configuration.yaml >/dev/null
check "keelctl create returns once the initializer is done" \
  "kc create -f deploy/examples/myapp-pod.yaml --timeout 60s >$work/create.out 2>&1"
# On a failure, what keelctl said and the Pod as it is, for the log.
has_sidecar() {
  kc get pod myapp-pod -o json >"$work/myapp-pod.json" 2>&1 && grep -q '"name": *"envoy"' "$work/myapp-pod.json" && return 0
  echo "keelctl create said:"; cat "$work/create.out"; echo "the Pod ($(date -u +%T)):"; cat "$work/myapp-pod.json"
  return 1
}
check "myapp-pod runs with the envoy sidecar it never asked for" has_sidecar

# wait_for COMMAND SECONDS: until COMMAND succeeds, or its last try's status.
wait_for() { local deadline=$((SECONDS + $2)); while ! eval "$1" && [ $SECONDS -lt $deadline ]; do sleep 0.5; done; eval "$1"; }
echo "==> today's Istio story: the injector as a MutatingAdmissionWebhook, a Deployment's Pods"
registered() { kc get mutatingwebhookconfigurations envoy-sidecar-injector >/dev/null 2>&1; }
check "the injector registered its MutatingWebhookConfiguration" "wait_for registered 30"
kc apply -f deploy/examples/injected-deployment.yaml >/dev/null
# Both Pods of the Deployment exist with Envoy, and none waits for an initializer.
injected() {
  kc get pods -l app=myapp-injected -o json >"$work/injected.json" 2>/dev/null || return 1
  [ "$(grep -c '"name": *"envoy"' "$work/injected.json")" -ge 2 ] && ! grep -q '"pending"' "$work/injected.json"
}
check "the Deployment's Pods come up with Envoy from the webhook" "wait_for injected 60"

echo "==> the README's Network story: the CRD, example-network, the controller's allocation"
kc apply -f deploy/examples/network-crd.yaml >/dev/null
served() { kc get networks >/dev/null 2>&1; }
check "the API servers serve Networks" "wait_for served 10"
kc apply -f deploy/examples/example-network.yaml >/dev/null
ready() { kc get network example-network -o json 2>/dev/null | grep '"phase": *"Ready"' >/dev/null; }
check "example-network is Ready, its range allocated" "wait_for ready 60"
check "keelctl get networks shows the CRD's columns" \
  "kc get networks | grep -E '^example-network +192\.168\.0\.0/16 +192\.168\.0\.1 +Ready' >/dev/null"

# kubectl itself, with the kubeconfig scripts/up.sh writes (TLS, the admin's client
# certificate): Kubernetes' REST dialect on the API servers' port.
if command -v kubectl >/dev/null 2>&1; then
  echo "==> kubectl with the stack's kubeconfig"
  k() { KUBECONFIG="$certs/kubeconfig" HOME="$work" kubectl "$@"; }
  check "kubectl get networks shows the CRD's columns" \
    "k get networks | grep -E '^example-network +192\.168\.0\.0/16 +192\.168\.0\.1 +Ready' >/dev/null"
  check "kubectl get deployment nginx: 1/1 ready" "k get deployment nginx | grep -E '^nginx +1/1 +1 +1 ' >/dev/null"
  check "kubectl rollout status sees it rolled out" \
    "k rollout status deployment/nginx --timeout 60s | grep 'successfully rolled out' >/dev/null"
  printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-kubectl\ndata:\n  a: \"1\"\n' >"$work/cm.yaml"
  check "kubectl apply creates, then leaves unchanged" \
    "k apply -f $work/cm.yaml | grep created >/dev/null && k apply -f $work/cm.yaml | grep unchanged >/dev/null"
  # The whole output is read before it is searched: under pipefail, `grep -q` leaving early
  # makes the writer's next line fail with a broken pipe, and the check with it.
  reads_back() {
    kc get configmap from-kubectl -o json >"$work/from-kubectl.json" 2>&1 &&
      grep '"a": *"1"' "$work/from-kubectl.json" >/dev/null && return 0
    echo "keelctl get said:"; cat "$work/from-kubectl.json"
    return 1
  }
  check "keelctl reads what kubectl wrote" reads_back
else
  echo "==> kubectl not found: its checks are skipped"
fi

trap - EXIT
teardown
stack_summary "compose test"
[ "$failed" = 0 ]
