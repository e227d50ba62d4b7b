#!/usr/bin/env bash
# The cost of security per request (issue 16): PATCH throughput and latency through a plain
# API server and, in the same run on the same etcd, through one with TLS on its listeners,
# every request authenticated (the load tester's client certificate, user keel-loadtest) and
# authorized by RBAC (its bootstrap ClusterRole). The secured server's per-user rate limit is
# off (`--user-qps 0`): the figure is what TLS, authentication and RBAC cost, not a throttle
# (by default one user gets 1,000 requests/s per replica). Runs alternate plain / secured for
# each case. Prints the Markdown table; raw JSON lines in bench/results/.
#
#   bench/security.sh               # 1, 8, 64 writers x 1, 64 objects, 10 s a run
#   DURATION=5s bench/security.sh
DURATION=${DURATION:-10s}
source "$(dirname "$0")/lib.sh"

certs=$work/certs
./target/release/keel-certs --dir "$certs" >/dev/null
./target/release/keel-apiserver --listen 127.0.0.1:36444 --http-listen 127.0.0.1:36081 \
  --etcd-servers http://127.0.0.1:32379 --user-qps 0 \
  --tls-cert-file "$certs/apiserver.crt" --tls-private-key-file "$certs/apiserver.key" \
  --client-ca-file "$certs/ca.crt" >/dev/null 2>"$work/apiserver-tls.log" &
for _ in $(seq 1 100); do
  curl -fsS --cacert "$certs/ca.crt" https://127.0.0.1:36081/readyz >/dev/null 2>&1 && break
  sleep 0.1
done

mkdir -p bench/results
out="bench/results/security-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
lt() {
  echo "==> keel-loadtest $*" >&2
  ./target/release/keel-loadtest --duration "$DURATION" --json "$@" >>"$out"
}
for w in 1 8 64; do
  for o in 1 64; do
    lt --server http://127.0.0.1:36443 --namespace plain patch --writers "$w" --objects "$o"
    lt --server https://127.0.0.1:36444 --certificate-authority "$certs/ca.crt" \
      --client-certificate "$certs/loadtest.crt" --client-key "$certs/loadtest.key" \
      --namespace secured patch --writers "$w" --objects "$o"
  done
done
echo "results: $out" >&2
./target/release/keel-loadtest table "$out"
