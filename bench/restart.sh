#!/usr/bin/env bash
# A restart and a paged List over an etcd that already holds many ConfigMaps (issue 45): for
# each API server binary given, in turn on the same data, the time from start to /readyz, the
# API server's and etcd's CPU seconds meanwhile, RSS when ready, then one page of 500 at five
# offsets of the List (the median of 9 of curl's times to the last byte on loopback, and the
# mean of the server's own time for them, from its request-duration metric). Fill the etcd
# first, e.g. with keel-loadtest's `fill` through an API server.
#
#   ETCD=http://127.0.0.1:52379 ETCD_PID=<pid> bench/restart.sh /tmp/old/keel-apiserver ./target/release/keel-apiserver
set -euo pipefail
ETCD=${ETCD:?the etcd endpoint holding the objects}
ETCD_PID=${ETCD_PID:?etcd process id, for its CPU time}
mkdir -p bench/results
out="bench/results/restart-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
cpu() { awk '{printf "%.2f", ($14 + $15) / 100}' "/proc/$1/stat"; }
# The sum and count of the API server's own time for Lists of ConfigMaps (from the request's
# arrival at the handler to its answer, the HTTP transport's encoding left out).
list_time() {
  curl -fsS http://127.0.0.1:56080/metrics |
    awk '/^keel_apiserver_request_duration_seconds_(sum|count)\{verb="list",resource="configmaps"\}/ {printf "%s ", $2}'
}
# The sum and count of its etcd reads of the current revision (what a List without a
# resourceVersion asks etcd before the cache may answer), for the first page's share.
revision_time() {
  curl -fsS http://127.0.0.1:56080/metrics |
    awk '/^keel_apiserver_etcd_request_duration_seconds_(sum|count)\{operation="revision"\}/ {printf "%s ", $2}'
}
figure() { # binary name value unit
  printf '%-40s %-44s %10s %s\n' "$1" "$2" "$3" "$4"
  printf '{"mode":"restart","binary":"%s","figure":"%s","value":%s,"unit":"%s"}\n' "$1" "$2" "$3" "$4" >>"$out"
}
for bin in "$@"; do
  e0=$(cpu "$ETCD_PID")
  t0=$(date +%s.%N)
  "$bin" --listen 127.0.0.1:56443 --http-listen 127.0.0.1:56080 --etcd-servers "$ETCD" \
    >/dev/null 2>"$work/apiserver.log" &
  pid=$!
  until curl -fsS http://127.0.0.1:56080/readyz >/dev/null 2>&1; do sleep 0.05; done
  t1=$(date +%s.%N)
  figure "$bin" "restart to ready, no load" "$(python3 -c "print(f'{$t1 - $t0:.2f}')")" s
  figure "$bin" "  API server CPU meanwhile" "$(cpu "$pid")" s
  figure "$bin" "  etcd CPU meanwhile" "$(python3 -c "print(f'{$(cpu "$ETCD_PID") - $e0:.2f}')")" s
  figure "$bin" "  RSS when ready" "$(awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$pid/status")" MB
  python3 - "$work/tokens" <<'EOF'
import json, sys, urllib.request
token, n, pages = "", 0, []
while True:
    url = "http://127.0.0.1:56443/api/v1/configmaps?limit=500" + (f"&continue={token}" if token else "")
    pages.append(token)
    token = json.load(urllib.request.urlopen(url))["metadata"].get("continue", "")
    if not token:
        break
marks = {"first": 0, "1/4": len(pages) // 4, "1/2": len(pages) // 2, "3/4": 3 * len(pages) // 4, "last": len(pages) - 1}
open(sys.argv[1], "w").write("".join(f"{m} {pages[i]}\n" for m, i in marks.items()))
EOF
  while read -r mark token; do
    before=$(list_time)
    before_rev=$(revision_time)
    ms=$(for _ in $(seq 1 9); do
      curl -fsS -o /dev/null -w '%{time_total}\n' \
        "http://127.0.0.1:56443/api/v1/configmaps?limit=500${token:+&continue=$token}"
    done | sort -n | sed -n 5p | awk '{printf "%.2f", $1 * 1000}')
    after=$(list_time)
    after_rev=$(revision_time)
    figure "$bin" "  a page of 500 at the $mark page" "$ms" ms
    figure "$bin" "    its server time (mean of 9)" \
      "$(echo "$before $after" | awk '{printf "%.2f", ($3 - $1) / ($4 - $2) * 1000}')" ms
    if [ "$mark" = first ]; then
      figure "$bin" "    of which etcd's read of its revision" \
        "$(echo "$before_rev $after_rev" | awk '$4 > $2 {printf "%.2f", ($3 - $1) / ($4 - $2) * 1000; next} {print "null"}')" ms
    fi
  done <"$work/tokens"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
done
echo "results: $out" >&2
