#!/usr/bin/env bash
# Kubernetes' REST dialect against keel's gRPC (issue 19): the same writers PATCH the same
# objects through one plain-text API server, over gRPC and then over REST (HTTP/2 in clear
# text, JSON bodies, as client-go speaks it), one right after the other in one keel-loadtest
# run (`--protocol both`); then 1,000 watchers on each protocol while 16 gRPC writers write
# 1,000/s. Prints the Markdown table; raw JSON lines in bench/results/.
#
#   bench/rest.sh                   # 1, 64 writers x 1 (hot), 64 (own) objects, 10 s a run
#   DURATION=5s bench/rest.sh
DURATION=${DURATION:-10s}
source "$(dirname "$0")/lib.sh"

mkdir -p bench/results
out="bench/results/rest-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
lt() {
  echo "==> keel-loadtest $*" >&2
  ./target/release/keel-loadtest --server http://127.0.0.1:36443 --duration "$DURATION" --json "$@" >>"$out"
}
for w in 1 64; do
  for o in 1 64; do
    lt patch --writers "$w" --objects "$o" --protocol both
  done
done
lt watch --watchers 1000 --writers 16 --objects 16 --rate 1000 --protocol both
echo "results: $out" >&2
./target/release/keel-loadtest table "$out"
