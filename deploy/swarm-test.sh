#!/usr/bin/env bash
# keel as a Docker Swarm stack, from nothing: `scripts/up.sh --swarm` on this engine (a
# one-node swarm the test makes if the engine is in none), then: every task healthy, kubectl
# through the published port with the stack's kubeconfig, `docker service scale` of the
# controller-managers 2 -> 3 rebalancing the shards, a rolling `docker service update --image`
# of the API servers under 16 PATCH writers with no error and nothing lost, and
# `scripts/up.sh --swarm down` leaving the machine as the test found it (the swarm left only if
# the test made it).
set -euo pipefail
cd "$(dirname "$0")/.."

project=keel-swarmtest
export KEEL_PROJECT=$project
export KEEL_API_PORT=${KEEL_API_PORT:-47443} KEEL_HTTP_PORT=${KEEL_HTTP_PORT:-47080}
api="https://127.0.0.1:$KEEL_API_PORT"
source deploy/lib.sh   # check, stack_summary, $work, stack_kubeconfig
source deploy/swarm.sh # swarm_state, swarm_tasks
rolled=keel:swarm-test-rolled
swarm_before=$(swarm_state)
dir=$PWD/.keel/$project

# What of the stack is left on the engine: containers, services, networks, volumes, secrets.
leftovers() {
  docker ps -aq --filter "label=com.docker.stack.namespace=$project"
  docker volume ls -q --filter "label=com.docker.stack.namespace=$project"
  docker network ls -q --filter "label=com.docker.stack.namespace=$project"
  if [ "$(swarm_state)" = active ]; then
    docker service ls -q --filter "label=com.docker.stack.namespace=$project"
    docker secret ls -q --filter "label=com.docker.stack.namespace=$project"
  fi
}
teardown() {
  if [ "$failed" -gt 0 ] && [ "$(swarm_state)" = active ]; then
    docker stack ps --no-trunc "$project" 2>/dev/null | head -30 || true
    local s
    for s in $(docker service ls -q --filter "label=com.docker.stack.namespace=$project" 2>/dev/null); do
      echo "--- last lines of $(docker service inspect -f '{{.Spec.Name}}' "$s")"
      docker service logs --tail 10 --no-task-ids "$s" 2>&1 | sed 's/\x1b\[[0-9;]*m//g' || true
    done
  fi
  ./scripts/up.sh --swarm down
  docker rmi "$rolled" >/dev/null 2>&1 || true
  local left
  left=$(leftovers)
  if [ -n "$left" ]; then echo "FAIL: left behind after down: $left"; failed=$((failed + 1)); failures+=("left behind after down"); fi
  if [ "$(swarm_state)" != "$swarm_before" ]; then
    echo "FAIL: the engine's swarm state is $(swarm_state), was $swarm_before"; failed=$((failed + 1)); failures+=("swarm state changed")
  fi
  rm -rf "$work"
}
trap teardown EXIT

echo "==> scripts/up.sh --swarm (the engine's swarm: $swarm_before)"
if ./scripts/up.sh --swarm >"$work/up.out" 2>&1; then
  echo "ok: every task of the stack is healthy"; passed=$((passed + 1))
else
  cat "$work/up.out"
  echo "FAIL: the stack came up healthy"; failed=$((failed + 1)); failures+=("the stack came up healthy")
  exit 1
fi
replicas_ok() { docker stack services "$project" --format '{{.Replicas}}' | awk -F/ '$1 != $2 {bad = 1} END {exit bad}'; }
check "every service runs all its replicas" replicas_ok
check "the etcd members are pinned by node label" \
  "docker service inspect -f '{{.Spec.TaskTemplate.Placement.Constraints}}' ${project}_etcd-1 | grep 'node.labels.keel.etcd-1 == true' >/dev/null"
check "the certificates are swarm secrets" \
  "[ \$(docker secret ls -q --filter label=com.docker.stack.namespace=$project | wc -l) = 12 ]"

kc() { ./target/release/keelctl --kubeconfig "$dir/kubeconfig" "$@"; }
if command -v kubectl >/dev/null 2>&1; then
  k() { KUBECONFIG="$dir/kubeconfig" HOME="$work" kubectl "$@"; }
  check "kubectl lists namespaces through the published port" "k get namespaces | grep -E '^default +Active' >/dev/null"
  printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-kubectl\ndata:\n  a: \"1\"\n' >"$work/cm.yaml"
  check "kubectl apply creates" "k apply -f $work/cm.yaml | grep created >/dev/null"
fi
# The whole output is read before it is searched: under pipefail, `grep -q` leaving early
# breaks the writer's pipe and fails the check.
check "keelctl reads through the published port" "kc get namespaces | grep '^default ' >/dev/null"

cm_hosts() { container_hosts --filter "label=com.docker.swarm.service.name=${project}_controller-manager"; }
check "2 controller-managers split the 32 shards 16/16" "wait_split '16 16' 60"
echo "==> docker service scale ${project}_controller-manager=3"
docker service scale --detach "${project}_controller-manager=3" >/dev/null
check "3 controller-managers split the shards 10/11/11" "wait_split '10 11 11' 90"

# A rolling update of the API servers while 16 writers PATCH through the published port.
lt="./target/release/keel-loadtest --certificate-authority $dir/ca.crt --client-certificate $dir/loadtest.crt --client-key $dir/loadtest.key"
echo "==> 16 writers through $api for 60s; a rolling update of the API servers meanwhile"
$lt --server "$api" --namespace lt-swarm --duration 60s --json \
  patch --writers 16 --objects 4 >"$work/patch.json" 2>"$work/patch.err" &
patch_pid=$!
writing() { [ "$(kc get configmaps -n lt-swarm 2>/dev/null | grep -c .)" -gt 1 ]; }
deadline=$((SECONDS + 30))
while ! writing && [ $SECONDS -lt $deadline ]; do sleep 0.5; done
check "the writers are writing" writing
docker tag keel:local "$rolled"
started=$SECONDS
if docker service update --image "$rolled" --no-resolve-image --detach=false \
  "${project}_apiserver" >"$work/update.out" 2>&1; then :; fi
echo "    the update took $((SECONDS - started)) s"
# The CLI returns once the tasks converged; the update is `completed` after its monitor period.
update_state() { docker service inspect -f '{{.UpdateStatus.State}}' "${project}_apiserver"; }
completed() {
  local deadline=$((SECONDS + 30))
  while [ "$(update_state)" != completed ] && [ $SECONDS -lt $deadline ]; do sleep 0.5; done
  [ "$(update_state)" = completed ] && return 0
  echo "update state: $(update_state)"; tail -5 "$work/update.out"; return 1
}
check "the rolling update completed" completed
check "both API servers run the new image" \
  "[ \$(docker ps --filter label=com.docker.swarm.service.name=${project}_apiserver --format '{{.Image}}' | grep -cx '$rolled') = 2 ]"
check "the writers were still writing when it completed" "kill -0 $patch_pid"
wait $patch_pid || true
# A top-level number from a keel-loadtest --json result.
field() { grep -o "\"$2\":[0-9]*" "$1" | head -1 | cut -d: -f2; }
echo "--- patch: $(cat "$work/patch.json")"
check "writers acknowledged writes" "[ \"\$(field $work/patch.json ok)\" -gt 500 ]"
check "no client-visible error" "[ \"\$(field $work/patch.json errors)\" = 0 ] || { tail -5 $work/patch.err; false; }"
check "no acknowledged write was lost" "[ \"\$(field $work/patch.json lost_updates)\" = 0 ]"

trap - EXIT
teardown
stack_summary "swarm test"
[ "$failed" = 0 ]
