#!/usr/bin/env bash
# Create throughput with admission webhooks against none (issue 43): its own etcd and
# keel-apiserver (release builds, bench/lib.sh), `keel-loadtest fill` creating ConfigMaps with
# 64 writers, first with no webhook, then with one mutating webhook (it adds an annotation, a
# JSON patch) and one validating webhook (it allows), both served by `keel-loadtest
# webhook-server` over HTTPS on loopback (keel-certs' injector.crt) and registered for every
# ConfigMap create. Prints Markdown rows for BENCHMARKS.md.
#
#   bench/webhooks.sh                 # 20,000 ConfigMaps each way
#   OBJECTS=5000 bench/webhooks.sh
OBJECTS=${OBJECTS:-20000}
WRITERS=${WRITERS:-64}
source "$(dirname "$0")/lib.sh"
kc() { ./target/release/keelctl --server http://127.0.0.1:36443 "$@"; }
./target/release/keel-certs --dir "$work/certs" >/dev/null

echo "==> $OBJECTS ConfigMaps, no webhook" >&2
fill bench-none

./target/release/keel-loadtest webhook-server --listen 127.0.0.1:36445 \
  --tls-cert-file "$work/certs/injector.crt" --tls-private-key-file "$work/certs/injector.key" \
  >/dev/null 2>"$work/webhook.log" &
for _ in $(seq 1 100); do curl -fsS --cacert "$work/certs/ca.crt" https://127.0.0.1:36445/healthz >/dev/null 2>&1 && break; sleep 0.1; done
bundle=$(base64 -w0 "$work/certs/ca.crt")
for hook in Mutating:mutate Validating:validate; do
  kind=${hook%%:*} path=${hook#*:}
  cat >"$work/$path.yaml" <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: ${kind}WebhookConfiguration
metadata:
  name: bench-$path
webhooks:
  - name: $path.bench.keel.dev
    clientConfig: {url: "https://127.0.0.1:36445/$path", caBundle: "$bundle"}
    rules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}]
    sideEffects: None
    admissionReviewVersions: [v1]
YAML
  kc apply -f "$work/$path.yaml" >/dev/null
done

echo "==> $OBJECTS ConfigMaps, one mutating and one validating webhook" >&2
fill bench-hooks
annotated=$(kc get configmap fill-0 -n bench-hooks -o json | grep -c '"bench.keel.dev/mutated"' || true)

echo "| webhooks | created | throughput | p50 | p99 | errors |"
echo "|---|---|---|---|---|---|"
row bench-none "none"
row bench-hooks "1 mutating + 1 validating (HTTPS, loopback)"
awk -v a="$(field bench-hooks ok_per_s)" -v b="$(field bench-none ok_per_s)" \
  'BEGIN { printf "\nwith webhooks: %.0f%% of the throughput without\n", 100 * a / b }'
echo "the mutating webhook's annotation on fill-0: $annotated"
