#!/usr/bin/env bash
# CRDs at scale (issue 45): what a CRD costs the API server's memory, and how fast discovery and
# OpenAPI answer with thousands of them. One etcd, one release API server (bench/lib.sh).
#
#   bench/crds.sh                                   # 2,000 small CRDs
#   PROM_CRDS=<dir of YAML> bench/crds.sh           # first a set of large CRDs, e.g. the
#                                                   # Prometheus Operator's example/prometheus-operator-crd
#   PROM_COPIES=10 PROM_CRDS=<dir> bench/crds.sh    # that set 10 times, each copy in its own groups
#   CRDS=300 APISERVER=/tmp/old/keel-apiserver bench/crds.sh   # another build's figures
#
# Each set is created on a freshly started API server (the previous set deleted first), and
# measured once discovery lists every CRD's resource and RSS has settled: RSS growth (VmRSS,
# and RssAnon without the binary's pages, from /proc) per CRD and over the CRDs' own JSON; then
# again after one List of each resource (its schema compiled, its watch cache started) and a
# read of the OpenAPI documents. Then the median and worst of 20 requests for
# discovery (/apis, aggregated and not; one group) and OpenAPI v3 (the index; one group-version).
# Prints one line per figure; raw JSON lines in bench/results/.
CRDS=${CRDS:-2000}
source "$(dirname "$0")/lib.sh"

mkdir -p bench/results
out="bench/results/crds-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
mb() { awk '$1 == "VmRSS:" {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }
# RssAnon: the heap and stacks, without the binary's own pages (file-backed, shared, paid once
# whatever the number of CRDs: the first CRD's write pages in the code that handles it).
anon_mb() { awk '$1 == "RssAnon:" {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }
# Waits out the allocator's decay time (jemalloc returns what the writes freed over 10 s), or $1
# seconds, then until RSS has not fallen for 3 s (at most 40 s more): a figure taken sooner
# measures the decay.
settle() {
  local last now still=0
  sleep "${1:-11}"
  last=$(mb "$apiserver_pid")
  for _ in $(seq 1 40); do
    sleep 1
    now=$(mb "$apiserver_pid")
    if python3 -c "import sys; sys.exit(0 if $now < $last - 0.2 else 1)"; then still=0; else still=$((still + 1)); fi
    last=$now
    [ "$still" -ge 3 ] && break
  done
}
figure() { # set name value unit: one line for people, one JSON line for the record
  printf '%-10s %-52s %12s %s\n' "$1" "$2" "$3" "$4"
  printf '{"mode":"crds","set":"%s","figure":"%s","value":%s,"unit":"%s"}\n' \
    "$1" "$2" "$3" "$4" >>"$out"
}
restart() {
  kill "$apiserver_pid"
  wait "$apiserver_pid" 2>/dev/null || true
  "$APISERVER" --listen 127.0.0.1:36443 --http-listen 127.0.0.1:36080 \
    --etcd-servers http://127.0.0.1:32379 >/dev/null 2>>"$work/apiserver.log" &
  apiserver_pid=$!
  for _ in $(seq 1 300); do curl -fsS http://127.0.0.1:36080/readyz >/dev/null 2>&1 && break; sleep 0.1; done
}
# Waits until discovery lists every CRD of $work/crds.json (no request reads its resource).
wait_served() {
  python3 - "$work/crds.json" <<'EOF'
import json, sys, time, urllib.request
crds = json.load(open(sys.argv[1]))
want = {}
for c in crds:
    v = next(v["name"] for v in c["spec"]["versions"] if v.get("served"))
    want.setdefault(f"{c['spec']['group']}/{v}", set()).add(c["spec"]["names"]["plural"])
while True:
    served = 0
    for gv, plurals in want.items():
        try:
            doc = json.load(urllib.request.urlopen(f"http://127.0.0.1:36443/apis/{gv}"))
            served += len(plurals & {r["name"] for r in doc["resources"]})
        except Exception:
            pass
    print(f"\r    {served}/{len(crds)} served", end="", file=sys.stderr)
    if served == len(crds):
        break
    time.sleep(0.5)
print(file=sys.stderr)
EOF
}
# Uses each CRD once: lists its resource (its schema compiled: validation, pruning, defaults, rules,
# merge keys; its watch cache started), and reads the OpenAPI v2 document and each group
# version's v3 document.
use_each() {
  python3 - "$work/crds.json" <<'EOF'
import json, sys, urllib.request
base = "http://127.0.0.1:36443"
gvs = set()
for c in json.load(open(sys.argv[1])):
    v = next(v["name"] for v in c["spec"]["versions"] if v.get("served"))
    urllib.request.urlopen(f"{base}/apis/{c['spec']['group']}/{v}/{c['spec']['names']['plural']}").read()
    gvs.add(f"{c['spec']['group']}/{v}")
for gv in sorted(gvs):
    urllib.request.urlopen(f"{base}/openapi/v3/apis/{gv}").read()
urllib.request.urlopen(f"{base}/openapi/v2").read()
EOF
}
# Creates the CRDs of $work/crds.json and measures them as set $1.
measure() {
  local set=$1 before after used before_anon after_anon used_anon n json_bytes
  restart
  # What the server makes once, whatever the CRDs, before the figure they are measured from: the
  # built-in OpenAPI v2 document (a few MB, made on its first read), the OpenAPI v3 index and
  # discovery.
  for path in /openapi/v2 /openapi/v3 /apis /api; do
    curl -fsS -o /dev/null "http://127.0.0.1:36443$path"
  done
  settle
  before=$(mb "$apiserver_pid")
  before_anon=$(anon_mb "$apiserver_pid")
  n=$(python3 -c "import json; print(len(json.load(open('$work/crds.json'))))")
  json_bytes=$(python3 -c "import json; print(sum(len(json.dumps(c, separators=(',', ':'))) for c in json.load(open('$work/crds.json'))))")
  echo "==> $set: creating $n CRDs" >&2
  python3 - "$work/crds.json" <<'EOF'
import json, sys, urllib.request
crds = json.load(open(sys.argv[1]))
for i, c in enumerate(crds):
    req = urllib.request.Request(
        "http://127.0.0.1:36443/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        data=json.dumps(c).encode(), headers={"Content-Type": "application/json"}, method="POST")
    urllib.request.urlopen(req).read()
    if (i + 1) % 100 == 0 or i + 1 == len(crds):
        print(f"\r    {i + 1}/{len(crds)} created", end="", file=sys.stderr)
print(file=sys.stderr)
EOF
  wait_served
  # The watch cache's window lets the CRDs' replaced versions (as created, before their status)
  # go 75 to 90 s after the writes (WINDOW_AGE and TRIM_EVERY in storage/watch_cache.rs): RSS
  # before that, and after.
  settle
  figure "$set" "RSS growth / JSON, the window not yet past" \
    "$(python3 -c "print(f'{($(mb "$apiserver_pid") - $before) * 1048576 / $json_bytes:.2f}')")" x
  settle 80
  after=$(mb "$apiserver_pid")
  after_anon=$(anon_mb "$apiserver_pid")
  figure "$set" "CRDs" "$n" ""
  figure "$set" "their JSON" "$(python3 -c "print(f'{$json_bytes / 1048576:.2f}')")" MB
  figure "$set" "RSS before" "$before" MB
  figure "$set" "RSS after" "$after" MB
  figure "$set" "RSS growth per CRD" "$(python3 -c "print(round(($after - $before) * 1024 / $n))")" KiB
  figure "$set" "RSS growth per CRD beyond its JSON" \
    "$(python3 -c "print(round((($after - $before) * 1048576 - $json_bytes) / 1024 / $n))")" KiB
  figure "$set" "RSS growth / JSON" "$(python3 -c "print(f'{($after - $before) * 1048576 / $json_bytes:.2f}')")" x
  figure "$set" "RssAnon growth / JSON" "$(python3 -c "print(f'{($after_anon - $before_anon) * 1048576 / $json_bytes:.2f}')")" x
  use_each
  settle
  used=$(mb "$apiserver_pid")
  used_anon=$(anon_mb "$apiserver_pid")
  figure "$set" "RSS after a List of each resource and its OpenAPI" "$used" MB
  figure "$set" "  growth per CRD" "$(python3 -c "print(round(($used - $before) * 1024 / $n))")" KiB
  figure "$set" "  growth / JSON" "$(python3 -c "print(f'{($used - $before) * 1048576 / $json_bytes:.2f}')")" x
  figure "$set" "  RssAnon growth / JSON" "$(python3 -c "print(f'{($used_anon - $before_anon) * 1048576 / $json_bytes:.2f}')")" x
  # What that first use compiled (schemas, OpenAPI documents), alone.
  figure "$set" "  of which the use / JSON" "$(python3 -c "print(f'{($used - $after) * 1048576 / $json_bytes:.2f}')")" x
  local group version
  group=$(python3 -c "import json; print(json.load(open('$work/crds.json'))[0]['spec']['group'])")
  version=$(python3 -c "import json; c = json.load(open('$work/crds.json'))[0]; print(next(v['name'] for v in c['spec']['versions'] if v.get('served')))")
  timed "$set" "GET /apis" /apis
  timed "$set" "GET /apis (aggregated discovery)" /apis \
    'application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList'
  timed "$set" "GET /apis/<group>/<version>" "/apis/$group/$version"
  timed "$set" "GET /openapi/v3" /openapi/v3
  timed "$set" "GET /openapi/v3/apis/<group>/<version>" "/openapi/v3/apis/$group/$version"
}
# The median and worst of 20 GETs of path $3 (Accept $4), as set $1's figure $2.
timed() {
  local times
  times=$(for _ in $(seq 1 20); do
    curl -fsS -o /dev/null -w '%{time_total}\n' -H "Accept: ${4:-application/json}" "http://127.0.0.1:36443$3"
  done | sort -n)
  figure "$1" "$2, median" "$(echo "$times" | awk '{a[NR] = $1} END {printf "%.2f", a[int((NR + 1) / 2)] * 1000}')" ms
  figure "$1" "$2, worst" "$(echo "$times" | tail -1 | awk '{printf "%.2f", $1 * 1000}')" ms
}
delete_all() {
  python3 - "$work/crds.json" <<'EOF'
import json, sys, urllib.request
for c in json.load(open(sys.argv[1])):
    req = urllib.request.Request(
        "http://127.0.0.1:36443/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" + c["metadata"]["name"],
        method="DELETE")
    urllib.request.urlopen(req).read()
EOF
  while [ "$(curl -fsS http://127.0.0.1:36443/apis/apiextensions.k8s.io/v1/customresourcedefinitions |
    python3 -c 'import json, sys; print(len(json.load(sys.stdin)["items"]))')" != 0 ]; do sleep 0.5; done
}

if [ -n "${PROM_CRDS:-}" ]; then
  python3 - "$PROM_CRDS" "$work/crds.json" <<'EOF'
import glob, json, os, sys, yaml
# "=" as a key is YAML 1.1's value tag to PyYAML: a plain string, as to every other parser.
yaml.SafeLoader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: node.value)
crds = []
for path in sorted(glob.glob(sys.argv[1] + "/*.yaml")):
    for doc in yaml.safe_load_all(open(path)):
        if doc and doc.get("kind") == "CustomResourceDefinition":
            crds.append(doc)
# PROM_COPIES: the set that many times, each copy in groups of its own (`<group>` renamed
# `c<i>.<group>`), to see what each more CRD costs once the allocator's first growth is paid.
copies = []
for i in range(int(os.environ.get("PROM_COPIES", "1"))):
    for doc in crds:
        c = json.loads(json.dumps(doc))
        if i > 0:
            group = f"c{i}." + c["spec"]["group"]
            c["spec"]["group"] = group
            c["metadata"]["name"] = c["spec"]["names"]["plural"] + "." + group
        copies.append(c)
json.dump(copies, open(sys.argv[2], "w"))
EOF
  measure large
  delete_all
fi

# Small CRDs, 20 to a group: a spec of a few typed fields, a status with conditions.
CRDS=$CRDS python3 - "$work/crds.json" <<'EOF'
import json, os, sys
n = int(os.environ["CRDS"])
def crd(i):
    group, plural, kind = f"g{i // 20}.bench.keel.dev", f"widget{i}s", f"Widget{i}"
    spec = {"type": "object", "properties": {
        "size": {"type": "integer", "minimum": 0},
        "image": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "mode": {"type": "string", "enum": ["fast", "safe"]},
        "ports": {"type": "array", "items": {"type": "object", "required": ["port"], "properties": {
            "name": {"type": "string"}, "port": {"type": "integer"}}},
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port"]},
    }}
    status = {"type": "object", "properties": {
        "phase": {"type": "string"},
        "conditions": {"type": "array", "items": {"type": "object", "properties": {
            "type": {"type": "string"}, "status": {"type": "string"},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
            "reason": {"type": "string"}, "message": {"type": "string"}}}},
    }}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"plural": plural, "singular": f"widget{i}", "kind": kind,
                               "listKind": f"{kind}List"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                       "spec": spec, "status": status}}}}]}}
json.dump([crd(i) for i in range(n)], open(sys.argv[1], "w"))
EOF
measure small
echo "results: $out" >&2
