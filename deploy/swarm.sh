# Sourced by scripts/up.sh for `--swarm`: keel as a Docker Swarm stack (deploy/swarm/keel-stack.yml).
#   swarm_up PROJECT      a swarm if there is none (remembered, so that down leaves it again),
#                         the etcd members' node labels where no node has them yet, the
#                         certificates (kept in .keel/PROJECT/certs across ups), the stack;
#                         waits until every task is healthy, then writes the kubeconfig.
#   swarm_down PROJECT    the stack, its volumes, and what swarm_up added to the machine.
# Ports: KEEL_API_PORT (6443) and KEEL_HTTP_PORT (6080) on every node.

# swarm_state: the engine's swarm state (inactive, active, pending, ...).
swarm_state() { docker info -f '{{.Swarm.LocalNodeState}}'; }

# swarm_tasks PROJECT: "<service> <status>" of each of the stack's containers on this node.
swarm_tasks() {
  docker ps -a --filter "label=com.docker.stack.namespace=$1" \
    --format '{{.Label "com.docker.swarm.service.name"}} {{.Status}}'
}

# swarm_healthy PROJECT N: whether N of the stack's containers run and are healthy.
swarm_healthy() {
  [ "$(swarm_tasks "$1" | grep -c '(healthy)')" = "$2" ]
}

# The address `docker swarm init` advertises when the engine cannot choose one: the source
# address of the default route.
default_address() {
  ip -4 route get 1.1.1.1 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") print $(i + 1)}' | head -1
}

# has_ipvs: whether this kernel has IPVS, which Swarm's virtual IPs and routing mesh are built
# on (loaded, loadable as a module, or built in).
has_ipvs() {
  [ -d /proc/sys/net/ipv4/vs ] && return 0
  [ -n "$(find "/lib/modules/$(uname -r)" -name 'ip_vs.ko*' 2>/dev/null | head -1)" ] && return 0
  # Read whole (no grep -q): under pipefail an early exit would fail the writer.
  zcat /proc/config.gz 2>/dev/null | grep '^CONFIG_IP_VS=[ym]' >/dev/null
}

# swarm_edge: how the API servers are published: `mesh` (Swarm's routing mesh) where the kernel
# has IPVS, else `haproxy` (deploy/swarm/keel-edge.yml); KEEL_SWARM_EDGE chooses.
swarm_edge() {
  if [ -n "${KEEL_SWARM_EDGE:-}" ]; then echo "$KEEL_SWARM_EDGE"; elif has_ipvs; then echo mesh; else echo haproxy; fi
}

swarm_up() {
  local project=$1 dir=$PWD/.keel/$1
  mkdir -p "$dir"
  if [ "$(swarm_state)" != active ]; then
    echo "==> docker swarm init (a one-node swarm; scripts/up.sh --swarm down leaves it again)"
    if ! docker swarm init >/dev/null 2>"$dir/swarm-init.err"; then
      local addr
      addr=$(default_address)
      [ -n "$addr" ] || addr=127.0.0.1
      docker swarm init --advertise-addr "$addr" >/dev/null
    fi
    touch "$dir/made-swarm"
  fi
  # The etcd members' homes: a node labelled keel.etcd-<n>=true each. Any member no node is
  # labelled for goes on this one (a one-node swarm holds all three).
  local self n
  self=$(docker info -f '{{.Swarm.NodeID}}')
  for n in 0 1 2; do
    if [ -z "$(docker node ls -q --filter "node.label=keel.etcd-$n=true")" ]; then
      docker node update --label-add "keel.etcd-$n=true" "$self" >/dev/null
      echo "keel.etcd-$n $self" >>"$dir/labels-added"
    fi
  done
  # The certificates, once: the API servers' names are the service's, loopback's and this
  # host's (KEEL_SWARM_SERVER_NAMES adds more, e.g. the other nodes' addresses). keel-certs
  # keeps what exists, so a directory from before the service account key gets only that.
  if [ ! -f "$dir/certs/ca.crt" ] || [ ! -f "$dir/certs/service-account.key" ]; then
    local names="localhost,127.0.0.1,apiserver,$(hostname)"
    local addr
    addr=$(docker info -f '{{.Swarm.NodeAddr}}')
    [ -n "$addr" ] && names="$names,$addr"
    [ -n "${KEEL_SWARM_SERVER_NAMES:-}" ] && names="$names,$KEEL_SWARM_SERVER_NAMES"
    ./target/release/keel-certs --dir "$dir/certs" --server-name "$names" >/dev/null
  fi
  local edge file want=8
  edge=$(swarm_edge)
  case $edge in
    mesh) file=deploy/swarm/keel-mesh.yml ;;
    haproxy) file=deploy/swarm/keel-edge.yml want=9 ;;
    *) echo "KEEL_SWARM_EDGE=$edge: mesh or haproxy" >&2; return 1 ;;
  esac
  echo "==> docker stack deploy $project (API servers published by: $edge)"
  KEEL_SWARM_CERTS=$dir/certs docker stack deploy --resolve-image never \
    -c deploy/swarm/keel-stack.yml -c "$file" "$project" >/dev/null
  echo "==> waiting for every task to be healthy"
  for _ in $(seq 1 360); do
    if swarm_healthy "$project" "$want"; then
      docker stack services "$project"
      cp "$dir/certs/ca.crt" "$dir/certs/admin.crt" "$dir/certs/admin.key" \
        "$dir/certs/loadtest.crt" "$dir/certs/loadtest.key" "$dir/"
      chmod 0600 "$dir"/*.key
      stack_kubeconfig "$dir" "https://127.0.0.1:${KEEL_API_PORT:-6443}"
      return 0
    fi
    sleep 0.5
  done
  echo "keel did not become healthy on the swarm:" >&2
  docker stack ps --no-trunc "$project" >&2
  swarm_tasks "$project" >&2
  return 1
}

swarm_down() {
  local project=$1 dir=$PWD/.keel/$1
  if [ "$(swarm_state)" = active ]; then
    docker stack rm "$project" >/dev/null 2>&1 || true
    # The stack's containers go first; its volumes and network only once they are gone.
    for _ in $(seq 1 120); do
      [ -z "$(docker ps -aq --filter "label=com.docker.stack.namespace=$project")" ] &&
        [ -z "$(docker network ls -q --filter "label=com.docker.stack.namespace=$project")" ] && break
      sleep 0.5
    done
    local v
    for v in $(docker volume ls -q --filter "label=com.docker.stack.namespace=$project"); do
      docker volume rm "$v" >/dev/null
    done
    if [ -f "$dir/labels-added" ]; then
      local label node
      while read -r label node; do
        docker node update --label-rm "$label" "$node" >/dev/null 2>&1 || true
      done <"$dir/labels-added"
    fi
    if [ -f "$dir/made-swarm" ]; then
      echo "==> docker swarm leave --force (scripts/up.sh --swarm made it)"
      docker swarm leave --force >/dev/null
    fi
  fi
  rm -rf "$dir"
}
