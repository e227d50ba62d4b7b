#!/usr/bin/env bash
# Watch fan-out (issue 20): the API server's CPU per event delivered to a watcher. keel-loadtest
# (a separate process) runs 1, 100 and 1,000 watchers on one namespace while 8 writers write
# 500/s; the server's CPU time comes from /proc/<pid>/stat over each run. The writes cost the
# same in every run, so the cost of a delivery is what the CPU grows by beyond one watcher:
# (cpu(N) - cpu(1)) / ((N - 1) · events each watcher got). Prints the Markdown table; raw JSON
# lines in bench/results/.
#
#   bench/fanout.sh
#   DURATION=30s RATE=1000 bench/fanout.sh
DURATION=${DURATION:-20s}
RATE=${RATE:-500}
source "$(dirname "$0")/lib.sh"

server=$(pgrep -f 'keel-apiserver --listen 127.0.0.1:36443')
mkdir -p bench/results
out="bench/results/fanout-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
cpu_s() { awk '{printf "%.2f", ($14 + $15) / 100}' "/proc/$server/stat"; }
for w in 1 100 1000; do
  echo "==> $w watchers, $RATE writes/s for $DURATION" >&2
  before=$(cpu_s)
  line=$(./target/release/keel-loadtest --server http://127.0.0.1:36443 --namespace "fanout-$w" \
    --duration "$DURATION" --json watch --watchers "$w" --writers 8 --objects 8 --rate "$RATE")
  after=$(cpu_s)
  echo "$line" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
r["server_cpu_s"] = round(float(sys.argv[2]) - float(sys.argv[1]), 2)
print(json.dumps(r))' "$before" "$after" >>"$out"
done
echo "results: $out" >&2
python3 - "$out" <<'EOF'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
base = runs[0]
print("| watchers | writes/s | events per watcher | delivery p50 ms | p99 ms | missed | server CPU s | µs per delivery |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in runs:
    n = r["watchers"]
    per = "–"
    if n > 1:
        extra = (n - 1) * r["events_expected"]
        per = f'{(r["server_cpu_s"] - base["server_cpu_s"] * r["events_expected"] / max(base["events_expected"], 1)) * 1e6 / extra:.2f}'
    print(f'| {n} | {r["ok_per_s"]:.0f} | {r["events_expected"]} | {r["latency"]["p50_ms"]:.2f} | '
          f'{r["latency"]["p99_ms"]:.2f} | {r["events_missed"]} | {r["server_cpu_s"]:.2f} | {per} |')
EOF
