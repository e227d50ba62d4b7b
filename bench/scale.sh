#!/usr/bin/env bash
# Scale (issue 20): what N objects cost the API server, as users run it. One etcd, two release
# API servers on it: a plain-text one (gRPC and REST on 127.0.0.1:36443) and a secured one (TLS,
# client certificates, RBAC; :36444). keel-loadtest fills N ConfigMaps of about B bytes through
# the secured one; both cache every object, so each line below holds both figures. Then, on
# the plain server: a full LIST from the watch cache (resourceVersion=0), a LIST paged from etcd
# (limit 500) and single pages of it at five offsets, a watch from resourceVersion 0 until it
# has sent every object, and two restarts, alone and while 64 writers PATCH through the
# secured server (time to ready, RSS after).
#
#   bench/scale.sh                          # 100,000 objects of 230 bytes
#   OBJECTS=1000000 bench/scale.sh
#   APISERVER=/tmp/old/keel-apiserver bench/scale.sh      # another build's figures
#
# RSS and peaks come from /proc/<pid>/status (VmRSS; VmHWM, reset through clear_refs before
# each step). Prints one line per figure; raw JSON lines in bench/results/.
OBJECTS=${OBJECTS:-100000}
BYTES=${BYTES:-230}
ETCD_EXTRA="--quota-backend-bytes 8589934592"
source "$(dirname "$0")/lib.sh"

certs=$work/certs
./target/release/keel-certs --dir "$certs" >/dev/null
start_secured() {
  "$APISERVER" --listen 127.0.0.1:36444 --http-listen 127.0.0.1:36081 \
    --etcd-servers http://127.0.0.1:32379 --user-qps 0 \
    --tls-cert-file "$certs/apiserver.crt" --tls-private-key-file "$certs/apiserver.key" \
    --client-ca-file "$certs/ca.crt" >/dev/null 2>>"$work/apiserver-tls.log" &
  secured=$!
  for _ in $(seq 1 600); do
    curl -fsS --cacert "$certs/ca.crt" https://127.0.0.1:36081/readyz >/dev/null 2>&1 && return
    sleep 0.1
  done
  echo "the secured API server did not get ready" >&2
  exit 1
}
start_secured
plain=$(pgrep -f 'keel-apiserver --listen 127.0.0.1:36443')

mkdir -p bench/results
out="bench/results/scale-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
mb() { awk -v k="$2" '$1 == k":" {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }
reset_peak() { echo 5 >"/proc/$1/clear_refs"; }
figure() { # name value unit: one line for people, one JSON line for the record
  printf '%-52s %12s %s\n' "$1" "$2" "$3"
  printf '{"mode":"scale","objects":%s,"figure":"%s","value":%s,"unit":"%s"}\n' \
    "$OBJECTS" "$1" "$2" "$3" >>"$out"
}
secs() { python3 -c "import time; print(f'{time.monotonic() - $1:.2f}')"; }
now() { python3 -c 'import time; print(time.monotonic())'; }
secured_flags=(--server https://127.0.0.1:36444 --certificate-authority "$certs/ca.crt"
  --client-certificate "$certs/loadtest.crt" --client-key "$certs/loadtest.key")

plain_before=$(mb "$plain" VmRSS)
secured_before=$(mb "$secured" VmRSS)
declare -A growth
figure "plain RSS before" "$plain_before" MB
figure "secured RSS before" "$secured_before" MB
./target/release/keel-loadtest "${secured_flags[@]}" --namespace scale --json \
  fill --objects "$OBJECTS" --object-bytes "$BYTES" --namespaces 10 --writers 64 >>"$out"

# The watch from resourceVersion 0 ends once it has seen every object: then the plain
# server's cache holds them all, and nothing has yet assembled a whole LIST.
reset_peak "$plain"
t=$(now)
OBJECTS=$OBJECTS python3 - <<'EOF'
import os, urllib.request
want, added = int(os.environ["OBJECTS"]), 0
r = urllib.request.urlopen(
    "http://127.0.0.1:36443/api/v1/configmaps?watch=1&resourceVersion=0&timeoutSeconds=600")
for line in r:
    if line.startswith(b'{"type":"ADDED"'):
        added += 1
        if added == want:
            break
EOF
figure "watch from resourceVersion 0 (initial events)" "$(secs "$t")" s
figure "  peak RSS during it" "$(mb "$plain" VmHWM)" MB

for who in plain secured; do
  pid=${!who}
  rss=$(mb "$pid" VmRSS)
  figure "$who RSS after fill" "$rss" MB
  growth["$who"]=$rss
done
json_bytes=$(curl -fsS 'http://127.0.0.1:36443/api/v1/configmaps?resourceVersion=0' | wc -c)
figure "JSON cached (a full LIST)" "$(python3 -c "print(f'{$json_bytes / 1048576:.1f}')")" MB
figure "JSON per object" "$((json_bytes / OBJECTS))" bytes
for who in plain secured; do
  before=${who}_before
  rss=${growth[$who]}
  figure "$who RSS growth / JSON cached" "$(python3 -c "print(f'{($rss - ${!before}) * 1048576 / $json_bytes:.2f}')")" x
  figure "$who RSS growth per object" "$(python3 -c "print(round(($rss - ${!before}) * 1048576 / $OBJECTS))")" bytes
done

reset_peak "$plain"
t=$(now)
curl -fsS -o /dev/null 'http://127.0.0.1:36443/api/v1/configmaps?resourceVersion=0'
figure "full LIST from the cache" "$(secs "$t")" s
figure "  peak RSS during it" "$(mb "$plain" VmHWM)" MB

reset_peak "$plain"
t=$(now)
OBJECTS=$OBJECTS python3 - "$work/tokens" <<'EOF'
import json, os, sys, urllib.parse, urllib.request
# The continue tokens of the pages at 0, 1/4, 1/2, 3/4 of the list and of its last page, kept
# for the page timings below.
pages = -(-int(os.environ["OBJECTS"]) // 500)
marks = {0: "first", pages // 4: "1/4", pages // 2: "1/2", 3 * pages // 4: "3/4", pages - 1: "last"}
token, items, n, kept = "", 0, 0, []
while True:
    if n in marks:
        kept.append(f"{marks[n]} {token}")
    url = "http://127.0.0.1:36443/api/v1/configmaps?limit=500"
    if token:
        url += "&continue=" + urllib.parse.quote(token)
    page = json.load(urllib.request.urlopen(url))
    items += len(page["items"])
    n += 1
    token = page["metadata"].get("continue", "")
    if not token:
        break
open(sys.argv[1], "w").write("\n".join(kept) + "\n")
EOF
figure "LIST paged from etcd (limit 500)" "$(secs "$t")" s
figure "  peak RSS during it" "$(mb "$plain" VmHWM)" MB
# One page of 500 at each mark, read again 9 times: the median of curl's time to the last byte
# (on loopback, about the server's time).
while read -r mark token; do
  ms=$(for _ in $(seq 1 9); do
    curl -fsS -o /dev/null -w '%{time_total}\n' \
      "http://127.0.0.1:36443/api/v1/configmaps?limit=500${token:+&continue=$token}"
  done | sort -n | sed -n 5p | awk '{printf "%.2f", $1 * 1000}')
  figure "  a page of 500, at the $mark page (median of 9)" "$ms" ms
done <"$work/tokens"

# A restart of the plain replica with nothing else going on.
restart_plain() {
  kill "$plain"
  wait "$plain" 2>/dev/null || true
  t=$(now)
  "$APISERVER" --listen 127.0.0.1:36443 --http-listen 127.0.0.1:36080 \
    --etcd-servers http://127.0.0.1:32379 >/dev/null 2>>"$work/apiserver.log" &
  plain=$!
  for _ in $(seq 1 6000); do curl -fsS http://127.0.0.1:36080/readyz >/dev/null 2>&1 && break; sleep 0.05; done
}
restart_plain
figure "restart to ready, no load (cache primed)" "$(secs "$t")" s
figure "  RSS when ready" "$(mb "$plain" VmRSS)" MB

# A restart of the plain replica while 64 writers PATCH through the secured one.
./target/release/keel-loadtest "${secured_flags[@]}" --namespace scale-load --duration 60s \
  --json patch --writers 64 --objects 64 >>"$out" &
load=$!
sleep 5
restart_plain
figure "restart to ready under load (cache primed)" "$(secs "$t")" s
figure "  RSS when ready" "$(mb "$plain" VmRSS)" MB
wait "$load"
echo "results: $out" >&2
