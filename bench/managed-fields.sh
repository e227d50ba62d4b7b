#!/usr/bin/env bash
# Run from the repository root: bench/managed-fields.sh (2,000 ConfigMaps of about 230 bytes, as bench/scale.sh fills).
# managedFields' bytes per object in the watch cache (which holds each object's JSON).
source bench/lib.sh
./target/release/keel-loadtest --server http://127.0.0.1:36443 fill --objects 2000 >/dev/null 2>&1
curl -fsS 'http://127.0.0.1:36443/api/v1/configmaps?resourceVersion=0' > "$work/list.json"
python3 - "$work/list.json" <<'PY'
import json, sys
items = json.load(open(sys.argv[1]))["items"]
with_mf = [len(json.dumps(i, separators=(",", ":"))) for i in items]
def strip(i):
    i = json.loads(json.dumps(i)); i["metadata"].pop("managedFields", None); return i
without = [len(json.dumps(strip(i), separators=(",", ":"))) for i in items]
n = len(items)
print(f"objects {n}; JSON per object {sum(with_mf)/n:.0f} B, without managedFields {sum(without)/n:.0f} B; managedFields {sum(with_mf)/n - sum(without)/n:.0f} B")
print(json.dumps(items[0]["metadata"]["managedFields"]))
PY
