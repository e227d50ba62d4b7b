#!/usr/bin/env bash
# CPU per PATCH (issue 32): the CPU time the API server, etcd and keel-loadtest each use over
# 8 s of a 10 s run of 64 PATCH writers, and the API server's microseconds per PATCH
# acknowledged in those 8 s. A 3 s run first fills the object (a hot object's 64 appliers).
#
#   bench/cpu-per-patch.sh apply 1          # TYPE (merge, apply, ...) OBJECTS
#   APISERVER=/path/to/keel-apiserver bench/cpu-per-patch.sh merge 1
source "$(dirname "$0")/lib.sh"
type=${1:-apply} objects=${2:-1}
args=(--server http://127.0.0.1:36443 --json patch --writers 64 --objects "$objects" --patch-type "$type")
./target/release/keel-loadtest --duration 3s "${args[@]}" >/dev/null 2>&1
# PATCHes the API server has committed through its coalescer (its batch sizes' sum).
patches() {
  curl -fsS http://127.0.0.1:36080/metrics |
    awk '/^keel_apiserver_patch_batch_size_sum/ {s += $2} END {printf "%d", s}'
}
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; } # user + system, in clock ticks
./target/release/keel-loadtest --duration 10s "${args[@]}" >"$work/run.json" 2>/dev/null &
run=$!
sleep 1
a0=$(cpu "$apiserver_pid") e0=$(cpu "$etcd_pid") l0=$(cpu "$run")
s0=$(patches)
sleep 8
a1=$(cpu "$apiserver_pid") e1=$(cpu "$etcd_pid") l1=$(cpu "$run")
s1=$(patches)
wait "$run"
python3 - "$type" "$objects" "$(getconf CLK_TCK)" "$((s1 - s0))" "$((a1 - a0))" "$((e1 - e0))" "$((l1 - l0))" <<'PY'
import sys
kind, objects, hz, patches, api, etcd, lt = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:])
print(f"{kind}, {objects} objects: {patches:.0f} PATCHes in 8 s; CPU s: apiserver {api / hz:.2f}, "
      f"etcd {etcd / hz:.2f}, keel-loadtest {lt / hz:.2f}; apiserver µs per PATCH: "
      f"{api / hz * 1e6 / max(patches, 1):.0f}")
PY
