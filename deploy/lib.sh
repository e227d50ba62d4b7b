# Sourced by the stack tests (compose-test.sh, chaos-test.sh) after setting $project: the
# compose helpers (deploy/compose.sh), a work directory, checks that count passes and failures,
# waiting for health, and the teardown that leaves nothing behind.
source "$(dirname "${BASH_SOURCE[0]}")/compose.sh" # $compose and the stack_* helpers
dc() { $compose -p "$project" "$@"; }
work=$(mktemp -d)
# The stack's CA and client certificates, copied out once it is up (stack_certs).
certs=$work/certs
passed=0
failed=0
failures=() # the descriptions of the failed checks, repeated at the end (stack_summary)

# check DESCRIPTION COMMAND: runs COMMAND, counts and prints "ok:" or "FAIL:".
check() {
  if eval "$2"; then echo "ok: $1"; passed=$((passed + 1)); else echo "FAIL: $1"; failed=$((failed + 1)); failures+=("$1"); fi
}

# stack_summary NAME: the last lines of a stack test: its failed checks again (CI may show only
# the end of the output, after the containers' logs), then the counts.
stack_summary() {
  local f
  for f in "${failures[@]}"; do echo "failed: $f"; done
  echo "$1: $passed passed, $failed failed"
}

# wait_healthy DESCRIPTION SECONDS [N]: waits until N containers of the project (3 etcd
# members, 2 API servers, 2 controller-managers, the initializer and the injector: 9 by
# default) are healthy.
wait_healthy() {
  local what=$1 deadline=$((SECONDS + $2)) want=${3:-9}
  while [ $SECONDS -lt $deadline ]; do
    if [ "$(stack_states "$project" | grep -c '(healthy)')" = "$want" ]; then
      echo "ok: $what"; passed=$((passed + 1)); return 0
    fi
    sleep 0.5
  done
  echo "FAIL: $what"; docker ps -a --filter "label=com.docker.compose.project=$project"; failed=$((failed + 1)); failures+=("$what"); return 1
}

# stack_teardown [LOG_DIR]: after a failure, the end of each keel container's log (to tell what
# went wrong from CI's output alone); every container's whole log into LOG_DIR when given; then
# the stack down with its volumes, a FAIL if anything is left, and the work directory removed.
stack_teardown() {
  local c logs=${1:-}
  if [ "$failed" -gt 0 ]; then
    for c in $(docker ps -a --filter "label=com.docker.compose.project=$project" --format '{{.Names}}' | grep -v etcd | sort); do
      echo "--- last lines of $c"
      docker logs --tail 15 "$c" 2>&1 | sed 's/\x1b\[[0-9;]*m//g'
    done
  fi
  if [ -n "$logs" ]; then
    mkdir -p "$logs"
    cp -r "$work"/. "$logs"/
    for c in $(docker ps -a --filter "label=com.docker.compose.project=$project" --format '{{.Names}}'); do
      docker logs -t "$c" >"$logs/$c.log" 2>&1 || true
    done
    echo "logs kept in $logs"
  fi
  # A paused container cannot be removed by compose.
  for c in $(docker ps -q --filter "label=com.docker.compose.project=$project" --filter status=paused); do
    docker unpause "$c" >/dev/null 2>&1 || true
  done
  dc down -v --remove-orphans >/dev/null 2>&1 || true
  local left
  left=$(docker ps -aq --filter "label=com.docker.compose.project=$project"; \
         docker network ls -q --filter "label=com.docker.compose.project=$project"; \
         docker volume ls -q --filter "label=com.docker.compose.project=$project")
  if [ -n "$left" ]; then echo "FAIL: left behind after teardown: $left"; failed=$((failed + 1)); failures+=("left behind after teardown"); fi
  rm -rf "$work"
}

# split: the shards each running controller-manager holds, sorted ("16 16"); "none" if a shard
# lease is missing or names no running replica. A replica's identity in the shard Leases is its
# container's host name. The test defines cm_hosts (the running replicas' host names, a line
# each; container_hosts gives them) and kc (keelctl with the stack's kubeconfig).
split() {
  local hosts holders
  hosts=$(cm_hosts)
  holders=$(kc get leases -n keel-system -o json 2>/dev/null | awk -F'"' '
    /"name":/ { name = $4 }
    /"holderIdentity":/ { if (name ~ /^keel-controller-manager-shard-[0-9]+$/) print $4 }')
  if [ "$(echo "$holders" | grep -c .)" != 32 ] || echo "$holders" | grep -qvxF "$hosts"; then
    echo none
    return
  fi
  echo "$holders" | sort | uniq -c | awk '{print $1}' | sort -n | tr '\n' ' ' | sed 's/ $//'
}

# wait_split WANT SECONDS: waits until split says WANT.
wait_split() {
  local want=$1 deadline=$((SECONDS + $2))
  while [ "$(split)" != "$want" ] && [ $SECONDS -lt $deadline ]; do sleep 0.5; done
  [ "$(split)" = "$want" ]
}

# container_hosts FILTER...: the host names of the running containers `docker ps` selects.
container_hosts() {
  local id
  for id in $(docker ps -q "$@"); do docker inspect -f '{{.Config.Hostname}}' "$id"; done
}
