# Sourced by the deploy scripts: picks Debian's docker-compose or the docker compose plugin.
if docker compose version >/dev/null 2>&1; then
  compose="docker compose"
elif command -v docker-compose >/dev/null 2>&1; then
  compose="docker-compose"
else
  echo "neither 'docker compose' nor 'docker-compose' is installed" >&2
  exit 1
fi

# stack_certs PROJECT DIR: copies from the stack's `certs` service what clients on the host
# need into DIR: the CA's certificate, admin's and the load tester's client certificates.
stack_certs() {
  local id
  id=$(docker ps -aq --filter "label=com.docker.compose.project=$1" --filter "label=com.docker.compose.service=certs" | head -1)
  [ -n "$id" ] || { echo "no certs container in project $1" >&2; return 1; }
  mkdir -p "$2"
  # What the host's clients need; not the CA's key, which could sign anyone in.
  local f
  for f in ca.crt admin.crt admin.key loadtest.crt loadtest.key; do
    docker cp "$id:/certs/$f" "$2/$f"
  done
  chmod 0600 "$2"/*.key
}

# stack_kubeconfig DIR SERVER: writes DIR/kubeconfig for keelctl and kubectl: the cluster at
# SERVER (https://...) trusting DIR/ca.crt, the user admin (system:masters) by its client
# certificate in DIR (paths relative to the file, as kubectl reads them).
stack_kubeconfig() {
  cat >"$1/kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters:
  - name: keel
    cluster:
      server: $2
      certificate-authority: ca.crt
users:
  - name: admin
    user:
      client-certificate: admin.crt
      client-key: admin.key
contexts:
  - name: keel
    context: {cluster: keel, user: admin}
current-context: keel
YAML
}

# stack_states PROJECT: "<service> <status>" of each long-running container of the project
# (the one-shot `certs` left out).
stack_states() {
  docker ps -a --filter "label=com.docker.compose.project=$1" \
    --format '{{.Label "com.docker.compose.service"}} {{.Status}}' | grep -v '^certs ' || true
}

# stack_curl DIR URL: curl on an API server's HTTPS side port as admin, with the certificates
# stack_certs copied into DIR (3 s at most).
stack_curl() {
  curl -fsS -m 3 --cacert "$1/ca.crt" --cert "$1/admin.crt" --key "$1/admin.key" "$2"
}
