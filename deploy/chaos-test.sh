#!/usr/bin/env bash
# The chaos test (issue 15): the compose stack under load while its components fail, one at a
# time, every interval.
#
#   deploy/chaos-test.sh [--duration 2m] [--interval 10s] [--seed N]
#   KEEL_CHAOS_LOGS=DIR keeps the loadtests' results and error logs, the faults and every
#   container's log there.
#
# Builds the images, brings the stack up under its own project (keel-chaos; gRPC ports 45443
# and 45444, HTTP 45080 and 45081) and runs three keel-loadtest processes through both API
# servers for the whole run: 64 PATCH writers, 4 replace (read-modify-write Update) writers,
# 100 watchers with 4 writers at 40 writes/s. Every interval it applies one fault to one
# component, holds it HOLD_S (3) seconds, lifts it and measures the time until that component
# is healthy again. The faults cycle in a fixed order, so that any run of 80 s or more (the
# default 2 minutes: 11 faults) applies every kind:
#
#   kill etcd-N           docker kill, then docker start
#   kill apiserver-N      docker kill, then docker start
#   pause etcd-N          docker pause, then docker unpause
#   kill controller-manager (one replica)
#   pause apiserver-N
#   disconnect etcd-N     docker network disconnect, then connect (with its service alias)
#   kill initializer
#
# Which member, server or replica is hit rotates with each fault of its kind, starting at
# --seed (default 0): the same seed is the same run. A fault starts only once the previous
# one's component is healthy again: two etcd members down at once would be a lost quorum.
#
# Healthy again means (polled every 100 ms):
#   etcd member         its /health answers 200 (a leader, a proposal through raft), it
#                       answers a linearizable read (as keel's probers send), and both API
#                       servers' probers count it up again (keel_apiserver_etcd_member_up 1)
#   API server          its /readyz answers 200 on its host port
#   controller-manager  its /readyz answers 200 and the 2 replicas hold the 32 shard Leases 16/16
#   initializer         its /readyz answers 200
# measured from the moment the container runs again (docker start, unpause or network connect
# returned): Docker's own start is reported apart, since it is the machine's, not keel's (here,
# 2 cores, fuse-overlayfs: 0.6-1.5 s, up to 2.3 s when other builds ran alongside).
# Budgets, 2x the interval each is checked at or the lease it depends on:
#   API server, initializer: 4 s = 2 x their compose health-check interval (2 s): Docker would
#     see them healthy at the second check after they are.
#   etcd member: 6 s = 2 x its compose health-check interval (3 s; kubeadm probes etcd every
#     10 s). Most of it is etcd's own: a restarted member replays its log and catches up before
#     its /health (a quorum read) passes, and a member cut off is back only when the TCP
#     connections of its raft streams, stalled through the cut, retransmit (backed off to 1-2 s
#     by then) or are replaced. keel's own share is checked apart: both API servers count the
#     member back within 2.4 s of it answering linearizable reads, 2 x the longest their probers can take
#     (a probe sent just before the member returned times out after 0.7 s, then 2 answers
#     0.25 s apart on a new connection: 1.2 s).
#   controller-manager: 20 s = 2 x the shard lease duration (10 s): the survivor takes a dead
#     replica's shards within one lease; the restarted one gets its share back in the next.
# Measured (2 cores, the longest of each kind over several runs): API server killed 0.5 s,
# paused 0.2 s; initializer killed 0.5 s; controller-manager killed 3.8 s; etcd member paused
# 1.1 s, killed 3.4 s, cut off 3.97 s (own health 3.5 s of it). Before the API servers replaced
# a member's connection when a probe failed, their probers could take up to 2 s more after
# etcd's own health, waiting on a connection from before the cut. A member back from a cut can
# pass /health 2 s and more before it answers linearizable reads (its ReadIndex waits for raft
# streams to the leader that stalled through the cut); timed from /health, the API servers then
# seemed to count it back late (2.5 s) when they did so within milliseconds of its first answer.
#
# Checks, at the end: no acknowledged write lost (patch and replace), every watcher saw every
# event exactly once, every recovery within its budget, every fault kind applied, the stack
# healthy. Client-visible errors (failed requests, and watch streams the watchers had to
# resume) are listed by cause and attributed to the fault they happened under, from the
# loadtests' --error-log, which has each error's time and its request's. The one expected
# source: a killed API server's requests and watches in flight (sent before the kill, failed
# at it: at most one per writer, one stream per watcher); any other error is a FAIL naming
# fault, phase, cause and time. Exit status 1 on any failed check. Everything is torn down at
# exit (containers, network, volumes).
set -euo pipefail
cd "$(dirname "$0")/.."

duration=2m interval=10s seed=0
usage() { echo "usage: $0 [--duration 2m] [--interval 10s] [--seed N]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --duration) duration=${2:?}; shift 2 ;;
    --interval) interval=${2:?}; shift 2 ;;
    --seed) seed=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) usage ;;
  esac
done
# Seconds of "90", "90s", "2m", "1h".
seconds() {
  case $1 in
    *h) echo $((${1%h} * 3600)) ;; *m) echo $((${1%m} * 60)) ;; *s) echo "${1%s}" ;; *) echo "$1" ;;
  esac
}
run_s=$(seconds "$duration") interval_s=$(seconds "$interval")
[[ $run_s =~ ^[0-9]+$ && $interval_s =~ ^[0-9]+$ && $seed =~ ^[0-9]+$ && $interval_s -ge 5 ]] || usage

# How long each fault is held.
HOLD_S=3
# The loadtests write this much longer than faults are applied, so that the last fault's
# recovery happens under load and the final read-back meets a healthy stack.
TAIL_S=15
# Budgets in ms (see above).
BUDGET_ETCD=6000 BUDGET_APISERVER=4000 BUDGET_INITIALIZER=4000 BUDGET_CONTROLLER_MANAGER=20000
# keel's share of an etcd member's recovery: from its own /health to both API servers using it.
BUDGET_ETCD_COUNTED_BACK=2400
# An error counts as in flight at a kill if it comes at most this long after it.
IN_FLIGHT_MS=2000
# An error counts towards a fault until this long after the component is healthy again.
AFTER_MS=3000
# The load.
PATCH_WRITERS=64 REPLACE_WRITERS=4 WATCHERS=100 WATCH_WRITERS=4 WATCH_RATE=40
KINDS=(kill-etcd kill-apiserver pause-etcd kill-controller-manager pause-apiserver disconnect-etcd kill-initializer)

project=keel-chaos
export KEEL_API_PORT_0=${KEEL_API_PORT_0:-45443} KEEL_API_PORT_1=${KEEL_API_PORT_1:-45444}
export KEEL_HTTP_PORT_0=${KEEL_HTTP_PORT_0:-45080} KEEL_HTTP_PORT_1=${KEEL_HTTP_PORT_1:-45081}
api="https://127.0.0.1:$KEEL_API_PORT_0,https://127.0.0.1:$KEEL_API_PORT_1"
source deploy/lib.sh # dc, $work, $certs, check, wait_healthy, stack_teardown, the stack_* helpers
loadtest_pids=()

# KEEL_CHAOS_LOGS=DIR keeps the loadtests' results and error logs, the faults, and every
# container's log with timestamps.
teardown() {
  local pid c
  for pid in "${loadtest_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  # Killing `docker run` need not stop its container.
  for c in $(docker ps -aq --filter "label=keel-chaos-load=$project"); do
    docker rm -f "$c" >/dev/null 2>&1 || true
  done
  stack_teardown "${KEEL_CHAOS_LOGS:-}"
}
trap teardown EXIT
now_ms() { date +%s%3N; }
# Seconds since the first fault's slot, for progress lines.
t0=0
stamp() { local ms=$(($(now_ms) - t0)); printf '[%4d.%01ds]' $((ms / 1000)) $((ms % 1000 / 100)); }
# 1234 -> 1.23s
secs() { printf '%d.%02ds' $(($1 / 1000)) $(($1 % 1000 / 10)); }
sleep_until() { local d=$(($1 - $(now_ms))); [ $d -le 0 ] || sleep "$((d / 1000)).$(printf %03d $((d % 1000)))"; }

# The containers of a service, by name.
containers() {
  docker ps -a --filter "label=com.docker.compose.project=$project" \
    --filter "label=com.docker.compose.service=$1" --format '{{.Names}}' | sort
}
http_port() { if [ "$1" = apiserver-0 ]; then echo "$KEEL_HTTP_PORT_0"; else echo "$KEEL_HTTP_PORT_1"; fi; }

kc() { ./target/release/keelctl --kubeconfig "$certs/kubeconfig" --server "$api" "$@"; }
# The controller-managers' host names, for split (deploy/lib.sh).
cm_hosts() {
  container_hosts --filter "label=com.docker.compose.project=$project" --filter "label=com.docker.compose.service=controller-manager"
}
# Whether both API servers' probers count etcd member $1 (etcd-N) up.
member_up_everywhere() {
  local port
  for port in "$KEEL_HTTP_PORT_0" "$KEEL_HTTP_PORT_1"; do
    stack_curl "$certs" "https://127.0.0.1:$port/metrics" 2>/dev/null |
      grep -q "^keel_apiserver_etcd_member_up{[^}]*$1:2379[^}]*} 1\$" || return 1
  done
}
# Whether component $1 (a service name) in container $2 answers its own health check now.
self_healthy() {
  case $1 in
    # /health, then a linearizable read through the member's JSON gateway: after a network
    # cut, /health (a raft proposal) passes seconds before ReadIndex does, and keel's probers
    # (linearizable reads) rightly wait for the latter.
    etcd-*) docker exec "$2" keel-probe http://127.0.0.1:2381/health >/dev/null 2>&1 &&
      docker exec "$2" keel-probe --cacert /certs/ca.crt --cert /certs/etcd.crt --key /certs/etcd.key \
        --data '{"key":"Lw==","count_only":true}' https://127.0.0.1:2379/v3/kv/range >/dev/null 2>&1 ;;
    apiserver-*) stack_curl "$certs" "https://127.0.0.1:$(http_port "$1")/readyz" >/dev/null 2>&1 ;;
    controller-manager) docker exec "$2" keel-probe http://127.0.0.1:6090/readyz >/dev/null 2>&1 ;;
    initializer) docker exec "$2" keel-probe http://127.0.0.1:6091/readyz >/dev/null 2>&1 ;;
  esac
}
# Whether the rest of the system counts it back (see the header): both API servers for an
# etcd member, the shard split for a controller-manager; nothing more for the others.
counted_back() {
  case $1 in
    etcd-*) member_up_everywhere "$1" ;;
    controller-manager) [ "$(split)" = "16 16" ] ;;
    *) true ;;
  esac
}
healthy_now() { self_healthy "$1" "$2" && counted_back "$1"; }
# The container's address on the stack's network ("-" when it has none).
address() {
  local a
  a=$(docker inspect -f "{{with index .NetworkSettings.Networks \"$network\"}}{{.IPAddress}}{{end}}" "$1" 2>/dev/null)
  echo "${a:--}"
}
budget_of() {
  case $1 in
    etcd-*) echo $BUDGET_ETCD ;; apiserver-*) echo $BUDGET_APISERVER ;;
    controller-manager) echo $BUDGET_CONTROLLER_MANAGER ;; initializer) echo $BUDGET_INITIALIZER ;;
  esac
}

# `docker pause` freezes the container's cgroup, and runc gives up ("unable to freeze") when a
# process does not stop in time, e.g. etcd inside an fsync on fuse-overlayfs; the container
# then runs on, thawed. That is the machine's, not keel's: try again, up to 5 times.
pause() {
  local attempt
  for attempt in 1 2 3 4 5; do
    docker pause "$1" >/dev/null && return 0
    echo "    (docker pause failed, attempt $attempt of 5)"
  done
  return 1
}

# inject KIND CONTAINER / restore KIND CONTAINER SERVICE
inject() {
  case $1 in
    kill-*) docker kill "$2" >/dev/null ;;
    pause-*) pause "$2" ;;
    disconnect-*) docker network disconnect "$network" "$2" ;;
  esac
}
restore() {
  case $1 in
    kill-*) docker start "$2" >/dev/null ;;
    pause-*) docker unpause "$2" >/dev/null ;;
    # Compose gave it its service name as an alias on the network: that is how the others
    # (API servers, peers) reach it.
    disconnect-*) docker network connect --alias "$3" "$network" "$2" ;;
  esac
}

./deploy/build-images.sh
dc down -v --remove-orphans >/dev/null 2>&1 || true
echo "==> docker compose up (project $project)"
dc up -d
wait_healthy "the stack is up: 3 etcd members, 2 API servers, 2 controller-managers, the initializer" 120
stack_certs "$project" "$certs"
stack_kubeconfig "$certs" "https://127.0.0.1:$KEEL_API_PORT_0"
network=$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{end}}' "$(containers etcd-0)")
check "the 2 controller-managers split the 32 shards 16/16" \
  "wait_split '16 16' 60"

# The load runs inside the stack's network, as in-cluster clients (the controller-managers) do.
# From the host, Docker's port proxy accepts connections to a restarting API server's port for
# about a second before keel-apiserver listens, then resets them: a client cannot tell such a
# write from one the server took. Inside the network a stopped server's name does not resolve
# and a starting one refuses connections: provably never sent, so keel-client retries them.
# It runs as this script's user, who owns $work (the image's own user may not write there).
lt() {
  docker run --rm --label "keel-chaos-load=$project" --network "$network" -v "$work:$work" \
    --user "$(id -u):$(id -g)" \
    --entrypoint keel-loadtest keel:local \
    --certificate-authority "$certs/ca.crt" --client-certificate "$certs/loadtest.crt" \
    --client-key "$certs/loadtest.key" "$@"
}
lt_api="https://apiserver-0:6443,https://apiserver-1:6443"
load_s=$((run_s + TAIL_S))
echo "==> load for ${load_s}s through both API servers: $PATCH_WRITERS PATCH writers, $REPLACE_WRITERS replace writers, $WATCHERS watchers ($WATCH_WRITERS writers, $WATCH_RATE/s)"
lt --server "$lt_api" --namespace chaos-patch --duration "${load_s}s" --json --error-log "$work/patch.errors" \
  patch --writers $PATCH_WRITERS --objects 4 >"$work/patch.json" 2>"$work/patch.err" &
loadtest_pids+=($!)
lt --server "$lt_api" --namespace chaos-replace --duration "${load_s}s" --json --error-log "$work/replace.errors" \
  replace --writers $REPLACE_WRITERS --objects 2 >"$work/replace.json" 2>"$work/replace.err" &
loadtest_pids+=($!)
lt --server "$lt_api" --namespace chaos-watch --duration "${load_s}s" --json --error-log "$work/watch.errors" \
  watch --watchers $WATCHERS --writers $WATCH_WRITERS --objects 4 --rate $WATCH_RATE >"$work/watch.json" 2>"$work/watch.err" &
loadtest_pids+=($!)

# The faults. Slot i starts at t0 + i x interval (i >= 1), or when the previous fault's
# component is healthy again if that is later: faults never overlap (two etcd members down
# at once would be a lost quorum, which no client can ride out).
t0=$(now_ms)
end=$((t0 + run_s * 1000))
slots=$(((run_s - 1) / interval_s))
[ "$slots" -ge ${#KINDS[@]} ] || echo "note: $slots faults in ${run_s}s do not cover all ${#KINDS[@]} kinds"
echo "==> $slots faults, one every ${interval_s}s, each held ${HOLD_S}s (seed $seed)"
# The rotation: the n-th fault of a kind hits member (seed + n + offset) of its service, the
# offset spreading the kinds of one service over its members (at seed 0: kill-etcd etcd-0,
# pause-etcd etcd-1, disconnect-etcd etcd-2, kill-apiserver apiserver-0, pause-apiserver
# apiserver-1; the next of each kind, the next member).
declare -A OFFSET=([kill-etcd]=0 [pause-etcd]=1 [disconnect-etcd]=2 [kill-apiserver]=0 [pause-apiserver]=1
                   [kill-controller-manager]=0 [kill-initializer]=0)
declare -A nth # faults so far per kind
: >"$work/faults"
for ((i = 1; ; i++)); do
  start=$((t0 + i * interval_s * 1000))
  [ "$start" -lt "$(now_ms)" ] && start=$(now_ms)
  [ $((start + HOLD_S * 1000)) -le "$end" ] || break
  kind=${KINDS[$(((i - 1) % ${#KINDS[@]}))]}
  group=${kind#*-}
  n=$((seed + ${nth[$kind]:-0} + ${OFFSET[$kind]}))
  nth[$kind]=$((${nth[$kind]:-0} + 1))
  case $group in
    etcd) service=etcd-$((n % 3)); container=$(containers "$service") ;;
    apiserver) service=apiserver-$((n % 2)); container=$(containers "$service") ;;
    controller-manager)
      service=controller-manager
      mapfile -t replicas < <(containers controller-manager)
      container=${replicas[$((n % ${#replicas[@]}))]} ;;
    initializer) service=initializer; container=$(containers initializer) ;;
  esac
  sleep_until "$start"
  address_before=$(address "$container")
  t_fault=$(now_ms)
  inject "$kind" "$container"
  t_injected=$(now_ms)
  echo "$(stamp) fault $i: ${kind%%-*} $service ($container), held ${HOLD_S}s"
  sleep "$HOLD_S"
  was_down=yes
  healthy_now "$service" "$container" && was_down=no
  t_restore=$(now_ms)
  restore "$kind" "$container" "$service"
  t_restored=$(now_ms)
  budget=$(budget_of "$service")
  deadline=$((t_restore + 60000))
  # Recovery in two steps, each timed: the component answers its own health check, then the
  # others count it back.
  t_self=""
  while [ "$(now_ms)" -lt "$deadline" ]; do
    if [ -z "$t_self" ] && self_healthy "$service" "$container"; then t_self=$(now_ms); fi
    if [ -n "$t_self" ] && counted_back "$service"; then break; fi
    sleep 0.1
  done
  t_healthy=$(now_ms)
  # Recovery counts from the moment the container runs again (see the header): Docker's own
  # start is reported apart, not charged to the component.
  took=$((t_healthy - t_restored))
  verdict=ok
  [ "$took" -le "$budget" ] || verdict=FAIL
  if [ "$group" = etcd ] && [ -n "$t_self" ] && [ $((t_healthy - t_self)) -gt $BUDGET_ETCD_COUNTED_BACK ]; then
    verdict="FAIL (the API servers counted it back $(secs $((t_healthy - t_self))) after its own health; budget $(secs $BUDGET_ETCD_COUNTED_BACK))"
  fi
  [ "$t_healthy" -lt "$deadline" ] || verdict="FAIL (not healthy after 60s)"
  steps="docker $(echo "${kind%%-*}" | sed 's/kill/start/; s/disconnect/network connect/; s/pause/unpause/') took $(secs $((t_restored - t_restore)))"
  steps+="; then own health $(secs $((${t_self:-$t_healthy} - t_restored)))"
  case $service in
    etcd-*) steps+=", both API servers use it $(secs "$took")" ;;
    controller-manager) steps+=", shards 16/16 $(secs "$took")" ;;
  esac
  [ "$group" != etcd ] || [ "$address_before" = "$(address "$container")" ] ||
    steps+="; its address changed: $address_before -> $(address "$container")"
  echo "$(stamp)   restored; healthy again after $(secs $took) (budget $(secs "$budget")): $verdict$([ $was_down = yes ] || echo ", but it looked healthy while faulted")"
  echo "$(stamp)     ($steps)"
  echo "$steps" >"$work/steps.$i"
  echo "$i $kind $service $container $t_fault $t_injected $t_restore $t_restored $t_healthy $took $budget $verdict" >>"$work/faults"
done

echo "==> faults done; waiting for the load to finish"
for pid in "${loadtest_pids[@]}"; do wait "$pid" || true; done
loadtest_pids=()
wait_healthy "the stack is healthy at the end" 60

# A top-level number from a keel-loadtest --json result.
# -1 when the result is missing (the loadtest failed): every check on it fails then.
field() { local v; v=$(grep -o "\"$2\":[0-9]*" "$1" | head -1 | cut -d: -f2); echo "${v:--1}"; }
for m in patch replace watch; do
  [ -s "$work/$m.json" ] || { echo "--- $m: no result; its stderr:"; cat "$work/$m.err"; }
done
echo "--- patch: $(cat "$work/patch.json")"
echo "--- replace: $(cat "$work/replace.json")"
echo "--- watch: $(cat "$work/watch.json")"

echo
echo "==> recovery per fault"
awk '
  {
    verdict = $12; for (f = 13; f <= NF; f++) verdict = verdict " " $f
    rows[NR] = sprintf("%-3s %-24s %-20s %9.2fs %9.2fs  %s", $1, $2, $3, $10 / 1000, $11 / 1000, verdict)
  }
  END { printf "%-3s %-24s %-20s %10s %10s  %s\n", "#", "fault", "component", "recovery", "budget", "verdict"; for (i = 1; i <= NR; i++) print rows[i] }
' "$work/faults"
echo
echo "==> recovery per kind (max)"
awk '
  { k = $2; if (!(k in max) || $10 > max[k]) max[k] = $10; n[k]++; if (!(k in order)) { order[k] = ++kinds; names[kinds] = k } }
  END { printf "%-24s %6s %10s\n", "fault", "count", "max"; for (i = 1; i <= kinds; i++) { k = names[i]; printf "%-24s %6d %9.2fs\n", k, n[k], max[k] / 1000 } }
' "$work/faults"

# Every error, attributed: to the fault it came under (from 500 ms before it was applied until
# AFTER_MS after its component was healthy again) and the phase of that fault: "in flight at
# the kill" when the fault killed an API server, the request was sent (the watch opened) before
# the kill and failed within IN_FLIGHT_MS of it (expected); otherwise UNEXPECTED, while the
# fault held (for a killed API server: a request sent after the kill), while the component
# recovered (from the moment the fault was lifted until healthy), after it recovered, or under
# no fault.
cat "$work"/patch.errors "$work"/replace.errors "$work"/watch.errors 2>/dev/null >"$work/errors" || true
awk -F'\t' -v faults="$work/faults" -v inflight="$IN_FLIGHT_MS" -v after="$AFTER_MS" -v t0="$t0" '
  BEGIN {
    while ((getline line < faults) > 0) {
      split(line, f, " ")
      nf++; kind[nf] = f[2]; svc[nf] = f[3]; tf[nf] = f[5]; ti[nf] = f[6]; tl[nf] = f[7]; tr[nf] = f[8]; th[nf] = f[9]
    }
  }
  {
    t = $1; sent = $2; what = ($3 == "watch-stream") ? "watch-stream" : "request"; j = 0
    for (i = 1; i <= nf; i++) if (tf[i] - 500 <= t) j = i
    if (j > 0 && t <= th[j] + after) {
      fault = "fault " j ": " kind[j] " " svc[j]
      expected = (kind[j] == "kill-apiserver" && sent < ti[j] && t >= tf[j] && t <= tf[j] + inflight)
      if (expected) class = "in flight at the kill"
      else if (t < tl[j]) class = "UNEXPECTED: while held"
      else if (t <= th[j]) class = "UNEXPECTED: recovering"
      else class = "UNEXPECTED: after recovery"
    } else {
      fault = "no fault"; expected = 0; class = "UNEXPECTED: no fault"
    }
    key = fault SUBSEP what SUBSEP $5 SUBSEP class
    if (!(key in count)) { keys[++n] = key; first[key] = t; fj[key] = j }
    count[key]++
    if (!expected) { unexpected++; if (!(key in sample)) sample[key] = $6 }
    # Per API server kill: requests and streams in flight, and the most of one caller (the
    # loadtest mode and the writer or watcher index).
    if (expected) {
      inflight_count[j SUBSEP what]++
      c = ++per_caller[j SUBSEP what SUBSEP $3 SUBSEP $4]
      if (c > most[j SUBSEP what]) most[j SUBSEP what] = c
    }
  }
  END {
    printf "%6s  %-40s %-13s %-27s %s\n", "count", "fault", "what", "class", "cause"
    for (i = 1; i <= n; i++) {
      split(keys[i], k, SUBSEP)
      printf "%6d  %-40s %-13s %-27s %s\n", count[keys[i]], k[1], k[2], k[4], k[3]
      if (!(keys[i] in sample)) continue
      j = fj[keys[i]]
      when = sprintf("first at +%.1fs", (first[keys[i]] - t0) / 1000)
      if (j > 0) when = when sprintf(" (fault at +%.1fs, lifted at +%.1fs, running again at +%.1fs, healthy at +%.1fs)", (tf[j] - t0) / 1000, (tl[j] - t0) / 1000, (tr[j] - t0) / 1000, (th[j] - t0) / 1000)
      printf "%6s  %s: %s\n", "", when, sample[keys[i]]
    }
    if (n == 0) print "     0  (no client-visible error)"
    for (key in inflight_count) { split(key, k, SUBSEP); print "INFLIGHT", k[1], k[2], inflight_count[key], most[key] > "/dev/stderr" }
    print "UNEXPECTED", unexpected + 0 > "/dev/stderr"
  }
' "$work/errors" >"$work/attribution" 2>"$work/attribution.counts"
echo
echo "==> client-visible errors by cause, attributed to faults"
cat "$work/attribution"
echo

log_requests=$(awk -F'\t' '$3 != "watch-stream"' "$work/errors" | grep -c . || true)
reported=$(( $(field "$work/patch.json" errors) + $(field "$work/replace.json" errors) + $(field "$work/watch.json" errors) ))
check "PATCH writers acknowledged writes ($(field "$work/patch.json" ok))" "[ $(field "$work/patch.json" ok) -gt 1000 ]"
check "replace writers acknowledged writes ($(field "$work/replace.json" ok))" "[ $(field "$work/replace.json" ok) -gt 100 ]"
check "no acknowledged PATCH lost ($(field "$work/patch.json" lost_updates))" "[ $(field "$work/patch.json" lost_updates) = 0 ]"
check "no acknowledged replace lost ($(field "$work/replace.json" lost_updates))" "[ $(field "$work/replace.json" lost_updates) = 0 ]"
check "watchers missed no event ($(field "$work/watch.json" events_missed) of $(field "$work/watch.json" events_expected) per watcher)" \
  "[ $(field "$work/watch.json" events_missed) = 0 ]"
check "watchers saw no event twice ($(field "$work/watch.json" events_duplicated))" "[ $(field "$work/watch.json" events_duplicated) = 0 ]"
kinds_applied=$(awk '{print $2}' "$work/faults" | sort -u | grep -c . || true)
check "every fault kind was applied ($kinds_applied of ${#KINDS[@]})" "[ $kinds_applied = ${#KINDS[@]} ]"
# The faults over budget, with their steps: "fault 1 kill-etcd etcd-0: 6.31s of 6.00s (docker ...)".
over=$(awk '/FAIL/ { printf "%s\t%s %s %s: %.2fs of %.2fs\n", $1, $1, $2, $3, $10 / 1000, $11 / 1000 }' "$work/faults" |
  while IFS=$'\t' read -r i what; do printf 'fault %s (%s); ' "$what" "$(cat "$work/steps.$i")"; done)
over=${over%; }
check "every component was healthy again within its budget${over:+ (over: $over)}" "! grep -q FAIL '$work/faults'"
check "the error logs hold every error the loadtests counted ($log_requests of $reported)" "[ $log_requests = $reported ]"
while read -r _ j what n most; do
  check "fault $j: at most one $what in flight per client failed at the kill ($n in all, at most $most of one client)" "[ $most -le 1 ]"
done < <(grep '^INFLIGHT' "$work/attribution.counts" | tr '\t' ' ')
check "no client-visible error but a killed API server's in-flight ones ($(grep '^UNEXPECTED' "$work/attribution.counts" | cut -d' ' -f2) others)" \
  "grep -qx 'UNEXPECTED 0' '$work/attribution.counts'"

trap - EXIT
teardown
stack_summary "chaos test (${run_s}s, one fault every ${interval_s}s, seed $seed)"
[ "$failed" = 0 ]
