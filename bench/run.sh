#!/usr/bin/env bash
# Runs the benchmark matrix of BENCHMARKS.md in one go: its own etcd and keel-apiserver (release
# builds) on loopback, then keel-loadtest for the etcd ceiling, PATCH and replace writers
# (1/8/64/256 writers x 1/64 objects) and 1,000 watchers at 1,000 writes/s. Prints the Markdown
# table; the raw JSON lines are kept in bench/results/.
#
#   bench/run.sh                 # the whole matrix, 10 s a run
#   DURATION=5s bench/run.sh     # shorter runs
#   ONLY="patch" bench/run.sh    # one family: etcd, patch, replace, watch
DURATION=${DURATION:-10s}
ONLY=${ONLY:-"etcd patch replace watch"}
source "$(dirname "$0")/lib.sh"

mkdir -p bench/results
out="bench/results/$(date -u +%Y%m%dT%H%M%SZ).jsonl"
lt() {
  echo "==> keel-loadtest $*" >&2
  ./target/release/keel-loadtest --server http://127.0.0.1:36443 --metrics-url http://127.0.0.1:36080/metrics \
    --duration "$DURATION" --json "$@" >>"$out"
}
for family in $ONLY; do
  for w in 1 8 64 256; do
    for o in 1 64; do
      case $family in
        etcd)
          if [ "$o" = 1 ]; then
            lt etcd --etcd-servers http://127.0.0.1:32379 --writers "$w" --objects 1
          else
            lt etcd --etcd-servers http://127.0.0.1:32379 --writers "$w" --objects 64 --only cas
          fi ;;
        patch) lt patch --writers "$w" --objects "$o" ;;
        replace) lt replace --writers "$w" --objects "$o" ;;
      esac
    done
  done
  if [ "$family" = watch ]; then
    lt watch --watchers 1000 --writers 16 --objects 16 --rate 1000
  fi
done
echo "results: $out" >&2
./target/release/keel-loadtest table "$out"
