# Sourced by the bench scripts: builds the release binaries and starts a benchmark's own etcd
# (127.0.0.1:32379) and keel-apiserver (gRPC 127.0.0.1:36443, HTTP :36080) in a temporary
# directory `$work`, stopped and removed on exit; returns once the API server is ready.
# ETCD_EXTRA: more etcd flags (a larger `--quota-backend-bytes`, say); APISERVER: another
# keel-apiserver binary (an older build, for a before-and-after).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/install-deps.sh
cargo build --release --locked --bins >/dev/null

work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
etcd --name bench --data-dir "$work/etcd" \
  --listen-client-urls http://127.0.0.1:32379 --advertise-client-urls http://127.0.0.1:32379 \
  --listen-peer-urls http://127.0.0.1:32380 --initial-advertise-peer-urls http://127.0.0.1:32380 \
  --initial-cluster bench=http://127.0.0.1:32380 --max-request-bytes 2097152 --log-level error \
  --experimental-watch-progress-notify-interval 1s ${ETCD_EXTRA:-} \
  >"$work/etcd.log" 2>&1 &
etcd_pid=$!
APISERVER=${APISERVER:-./target/release/keel-apiserver}
"$APISERVER" --listen 127.0.0.1:36443 --http-listen 127.0.0.1:36080 \
  --etcd-servers http://127.0.0.1:32379 >/dev/null 2>"$work/apiserver.log" &
apiserver_pid=$!
for _ in $(seq 1 100); do curl -fsS http://127.0.0.1:36080/readyz >/dev/null 2>&1 && break; sleep 0.1; done

# N Deployments web-1..web-N of R replicas each, as one multi-document YAML on stdout.
deployments_yaml() {
  local n=$1 r=$2 i
  for i in $(seq 1 "$n"); do
    cat <<YAML
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web-$i
spec:
  replicas: $r
  selector:
    matchLabels: {app: web-$i}
  template:
    metadata:
      labels: {app: web-$i}
    spec:
      containers:
        - name: nginx
          image: nginx:1.7.9
YAML
  done
}

# N Jobs of R completions, R at a time (each Pod runs the controller-manager's --pod-run-time).
jobs_yaml() {
  local n=$1 r=$2 i
  for i in $(seq 1 "$n"); do
    cat <<YAML
---
apiVersion: batch/v1
kind: Job
metadata:
  name: job-$i
spec:
  completions: $r
  parallelism: $r
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: work
          image: busybox
YAML
  done
}

# Waits, showing progress, until N objects of a resource ($1: deployments or jobs) have R
# in a status field ($2: availableReplicas or succeeded) ($5: a namespace, or none for the
# current one; $6: seconds between polls, 0.2 unless given).
wait_count() {
  local resource=$1 field=$2 n=$3 r=$4 ns=${5:-} every=${6:-0.2} done_count
  while :; do
    done_count=$(./target/release/keelctl --server http://127.0.0.1:36443 get "$resource" \
      ${ns:+-n "$ns"} -o json | grep -o "\"$field\": *[0-9]*" | grep -c ": *$r\$" || true)
    printf '\r    %d/%d done' "$done_count" "$n" >&2
    [ "$done_count" = "$n" ] && break
    sleep "$every"
  done
  echo >&2
}
wait_available() { wait_count deployments availableReplicas "$@"; }
wait_complete() { wait_count jobs succeeded "$@"; }

kc() { ./target/release/keelctl --server http://127.0.0.1:36443 "$@"; }
# A process's peak RSS in MB (VmHWM); its arguments joined by "/" (a cell per replica).
peak_mb() { awk '/VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }
join() { local IFS=/; echo "$*"; }

# The shards each running replica holds, sorted, once all 32 leases name one of "$@".
split() {
  kc get leases -n keel-system -o json 2>/dev/null | awk -F'"' -v ids="$*" '
    BEGIN { n = split(ids, a, " "); for (i = 1; i <= n; i++) live[a[i]] = 1 }
    /"name":/ { name = $4 }
    /"holderIdentity":/ { if (name ~ /^keel-controller-manager-shard-[0-9]+$/) { held[$4]++; total++ } }
    END {
      for (h in held) if (!(h in live)) { print "none"; exit }
      if (total != 32) { print "none"; exit }
      for (h in held) print held[h]
    }' | sort -n | tr '\n' ' ' | sed 's/ $//'
}
# Whether the $1 replicas "${@:2}" hold all 32 shards, each its fair share (floor or ceiling).
balanced() {
  local n=$1 counts
  shift
  counts=$(split "$@")
  [ "$counts" != none ] && [ "$(echo "$counts" | wc -w)" = "$n" ] &&
    [ $(( $(echo "$counts" | awk '{print $NF}') - $(echo "$counts" | awk '{print $1}') )) -le 1 ]
}

# Starts $2 keel-controller-manager replicas for run $1 (more flags: "${@:3}"), their pids and
# ids in the arrays `pids` and `ids`; returns once they have split the 32 shards evenly, with
# the run's namespace run-$1 made.
start_replicas() {
  local run=$1 n=$2 i
  shift 2
  pids=() ids=()
  for i in $(seq 1 "$n"); do
    ./target/release/keel-controller-manager --server http://127.0.0.1:36443 \
      --id "bench-$run-$i" --http-listen "127.0.0.1:$((36090 + i))" "$@" \
      >/dev/null 2>"$work/cm-$run-$i.log" &
    pids+=($!)
    ids+=("bench-$run-$i")
  done
  echo "==> $n controller-manager(s): waiting for the shards to be split" >&2
  while ! balanced "$n" "${ids[@]}"; do sleep 0.5; done
  printf 'apiVersion: v1\nkind: Namespace\nmetadata: {name: %s}\n' "run-$run" | kc apply -f - >/dev/null
}

# Deletes run $1's namespace, with its replicas still running (the namespace controller empties
# it), then stops them.
stop_replicas() {
  kc delete namespace "run-$1" --wait=false >/dev/null
  echo "==> emptying namespace run-$1" >&2
  while kc get namespace "run-$1" >/dev/null 2>&1; do
    printf '\r    %s objects left' "$(kc get pods,jobs,events -n "run-$1" -o name 2>/dev/null | wc -l)" >&2
    sleep 1
  done
  echo >&2
  kill -TERM "${pids[@]}"
  wait "${pids[@]}" 2>/dev/null || true
}

# Creates throughput runs (bench/webhooks.sh, bench/policies.sh): `fill NS` creates $OBJECTS
# ConfigMaps in NS with $WRITERS writers, its JSON summary in $work/NS.json; `row NS LABEL`
# prints it as a Markdown row (created, throughput, p50, p99, errors).
fill() {
  ./target/release/keel-loadtest --server http://127.0.0.1:36443 --namespace "$1" --json \
    fill --objects "$OBJECTS" --writers "$WRITERS" >"$work/$1.json"
}
field() { grep -o "\"$2\":[0-9.]*" "$work/$1.json" | head -1 | cut -d: -f2; }
row() {
  printf '| %s | %s | %.0f/s | %.1f ms | %.1f ms | %s |\n' "$2" "$(field "$1" ok)" \
    "$(field "$1" ok_per_s)" "$(field "$1" p50_ms)" "$(field "$1" p99_ms)" "$(field "$1" errors)"
}
