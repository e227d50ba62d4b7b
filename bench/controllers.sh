#!/usr/bin/env bash
# How fast one keel-controller-manager converges N Deployments x R replicas: its own etcd,
# keel-apiserver and keel-controller-manager (release builds, the default 1 s pod start delay),
# then `keelctl apply` of N Deployments in one file, timed from the apply until every Deployment
# reports R available replicas. Prints the time and the controller-manager's CPU time and peak
# RSS, as a Markdown row for BENCHMARKS.md.
#
#   bench/controllers.sh            # 100 Deployments x 3 replicas
#   N=20 R=5 bench/controllers.sh
N=${N:-100}
R=${R:-3}
source "$(dirname "$0")/lib.sh"
./target/release/keel-controller-manager --server http://127.0.0.1:36443 \
  --http-listen 127.0.0.1:36090 >/dev/null 2>"$work/cm.log" &
cm=$!
for _ in $(seq 1 100); do curl -fsS http://127.0.0.1:36090/readyz >/dev/null 2>&1 && break; sleep 0.1; done
# Timed from when it holds every shard (alone, it takes all 32 in its first rounds).
held() { curl -fsS http://127.0.0.1:36090/metrics | awk '/^keel_shard_leases_held / {print $2}'; }
for _ in $(seq 1 100); do [ "$(held)" = 32 ] && break; sleep 0.1; done

deployments_yaml "$N" "$R" >"$work/deployments.yaml"

ticks=$(getconf CLK_TCK)
cpu() { awk -v t="$ticks" '{printf "%.2f", ($14 + $15) / t}' "/proc/$cm/stat"; }
cpu_before=$(cpu)
kc() { ./target/release/keelctl --server http://127.0.0.1:36443 "$@"; }
start=$(date +%s.%N)
kc apply -f "$work/deployments.yaml" >/dev/null
echo "==> applied $N Deployments x $R replicas; waiting until all are available" >&2
wait_available "$N" "$R"
end=$(date +%s.%N)
seconds=$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", b - a}')
cpu_used=$(awk -v a="$cpu_before" -v b="$(cpu)" 'BEGIN {printf "%.2f", b - a}')
rss_mb=$(awk '/VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$cm/status")
pods=$(kc get pods -o json | grep -c '"phase": *"Running"' || true)
echo "| $N Deployments x $R replicas | $seconds s | $cpu_used s | $rss_mb MB | $pods Pods Running |"
