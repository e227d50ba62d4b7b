#!/usr/bin/env bash
# How fast keel-controller-manager converges N Deployments x R replicas, with 1 or more
# replicas of it: its own etcd and keel-apiserver, then for each count in REPLICAS that many
# controller-managers (release builds, default flags: 5 workers per controller, the pod-lifecycle
# controller's 1 s start delay, 32 shards) and, once they have split the shards, one `keelctl
# apply` of N Deployments in a namespace of its own, timed until every Deployment reports R
# available replicas. Per component over that span: CPU (user + system, /proc/<pid>/stat) and
# peak RSS (VmHWM, reset through clear_refs at the apply). Prints Markdown rows for
# BENCHMARKS.md.
#
# KIND=jobs: N Jobs of R completions (R at a time) instead, timed until every Job has R
# successes (each Pod runs --pod-run-time, 1 s).
#
#   bench/controllers.sh                          # 100 Deployments x 3 replicas, 1 controller-manager
#   N=1000 REPLICAS="1 3" bench/controllers.sh    # issue 20's scale run
#   KIND=jobs N=1000 REPLICAS="1 3" bench/controllers.sh   # issue 42's
N=${N:-100}
R=${R:-3}
REPLICAS=${REPLICAS:-1}
KIND=${KIND:-deployments}
source "$(dirname "$0")/lib.sh"

ticks=$(getconf CLK_TCK)
cpu() { awk -v t="$ticks" '{printf "%.2f", ($14 + $15) / t}' "/proc/$1/stat"; }
# Polling 1,000 Deployments is itself work for the API server: poll less often at that size.
every=$(awk -v n="$N" 'BEGIN {print (n >= 500 ? 1 : 0.2)}')
if [ "$KIND" = jobs ]; then
  jobs_yaml "$N" "$R" >"$work/objects.yaml"
  what="Jobs x completions" until="time to all complete" done_phase=Succeeded
else
  deployments_yaml "$N" "$R" >"$work/objects.yaml"
  what="Deployments x replicas" until="time to all available" done_phase=Running
fi

echo "| $what | controller-managers | $until | CPU s: etcd | API server | controller-managers | peak RSS MB: etcd | API server | controller-managers | Pods $done_phase |"
echo "|---|---:|---:|---:|---:|---|---:|---:|---|---:|"
run=0
for n in $REPLICAS; do
  run=$((run + 1))
  ns=run-$run
  start_replicas "$run" "$n"

  all=("$etcd_pid" "$apiserver_pid" "${pids[@]}")
  before=()
  for p in "${all[@]}"; do
    echo 5 >"/proc/$p/clear_refs"
    before+=("$(cpu "$p")")
  done
  start=$(date +%s.%N)
  kc apply -n "$ns" -f "$work/objects.yaml" >/dev/null
  echo "==> applied $N $KIND x $R; waiting until all are done" >&2
  if [ "$KIND" = jobs ]; then
    wait_complete "$N" "$R" "$ns" "$every"
  else
    wait_available "$N" "$R" "$ns" "$every"
  fi
  end=$(date +%s.%N)
  seconds=$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", b - a}')
  used=() peaks=()
  for k in "${!all[@]}"; do
    used+=("$(awk -v a="${before[$k]}" -v b="$(cpu "${all[$k]}")" 'BEGIN {printf "%.1f", b - a}')")
    peaks+=("$(peak_mb "${all[$k]}")")
  done
  pods=$(kc get pods -n "$ns" -o json | grep -c "\"phase\": *\"$done_phase\"" || true)
  echo "| $N x $R | $n | $seconds s | ${used[0]} | ${used[1]} | $(join "${used[@]:2}") | ${peaks[0]} | ${peaks[1]} | $(join "${peaks[@]:2}") | $pods |"

  stop_replicas "$run"
done
