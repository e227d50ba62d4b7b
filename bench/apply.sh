#!/usr/bin/env bash
# Server-side apply against merge PATCH (issue 32): 64 writers on one object (hot) and on 64
# objects (one each), merge, apply, apply, merge in turn so that drift over the runs cancels
# out. Each apply writer is its own field manager (writer-<i>) and applies a configuration
# holding only its own field. Prints the Markdown table; raw JSON lines in bench/results/.
#
#   bench/apply.sh                  # 20 s a run
#   DURATION=10s bench/apply.sh
DURATION=${DURATION:-20s}
source "$(dirname "$0")/lib.sh"

mkdir -p bench/results
out="bench/results/apply-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
lt() {
  echo "==> keel-loadtest $*" >&2
  ./target/release/keel-loadtest --server http://127.0.0.1:36443 --metrics-url http://127.0.0.1:36080/metrics \
    --duration "$DURATION" --json "$@" >>"$out"
}
for o in 1 64; do
  for t in merge apply apply merge; do
    lt patch --writers 64 --objects "$o" --patch-type "$t"
  done
done
echo "results: $out" >&2
./target/release/keel-loadtest table "$out"
