#!/usr/bin/env bash
# The controller-manager scaled out: the same batch (N Deployments x R replicas, one
# `keelctl apply`) converged by 1, 2 and 4 replicas, each run in a namespace of its own on one
# etcd and keel-apiserver (release builds). Every run waits until the replicas have split the 32
# shard leases, then times from the apply until every Deployment reports R available replicas.
# Per replica: objects cached and received by its informers, reconciles, peak RSS. Run twice:
# with reconciles as fast as they are (the API server and etcd on the same two cores bound the
# total), and with each reconcile first waiting LATENCY (a controller calling a slow external
# system; fixed WORKERS per controller per replica), where throughput should grow with replicas.
#
#   bench/shards.sh                       # N=300 R=3, REPLICAS="1 2 4", LATENCIES="0s 20ms"
#   N=100 REPLICAS="1 2" bench/shards.sh
N=${N:-300}
R=${R:-3}
REPLICAS=${REPLICAS:-1 2 4}
LATENCIES=${LATENCIES:-0s 20ms}
WORKERS=${WORKERS:-1}
source "$(dirname "$0")/lib.sh"
# The sum of a metric's samples on a replica's /metrics.
metric() { curl -fsS "http://127.0.0.1:$1/metrics" | awk -v m="$2" 'index($0, m "{") == 1 || index($0, m "_total{") == 1 {s += $NF} END {printf "%d", s}'; }

echo "| replicas | reconcile latency | time to all available | speed-up | objects cached per replica | objects received per replica | reconciles per replica | peak RSS per replica (MB) |"
echo "|---|---|---|---|---|---|---|---|"
run=0
for latency in $LATENCIES; do
  base=""
  for n in $REPLICAS; do
    run=$((run + 1))
    ns=run-$run
    echo "==> latency $latency" >&2
    start_replicas "$run" "$n" --workers "$WORKERS" --simulated-latency "$latency" --pod-start-delay 0s
    deployments_yaml "$N" "$R" >"$work/deployments.yaml"
    start=$(date +%s.%N)
    kc apply -n "$ns" -f "$work/deployments.yaml" >/dev/null
    wait_available "$N" "$R" "$ns"
    end=$(date +%s.%N)
    seconds=$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", b - a}')
    [ -z "$base" ] && base=$seconds
    speedup=$(awk -v a="$base" -v b="$seconds" 'BEGIN {printf "%.2f", a / b}')
    cached=() received=() reconciles=() rss=()
    for i in $(seq 1 "$n"); do
      port=$((36090 + i))
      cached+=("$(metric "$port" keel_informer_objects)")
      received+=("$(metric "$port" keel_informer_received)")
      reconciles+=("$(metric "$port" keel_controller_shard_reconciles)")
      rss+=("$(peak_mb "${pids[$((i - 1))]}")")
    done
    echo "| $n | $latency | $seconds s | ${speedup}x | $(join "${cached[@]}") | $(join "${received[@]}") | $(join "${reconciles[@]}") | $(join "${rss[@]}") |"
    stop_replicas "$run"
  done
done
