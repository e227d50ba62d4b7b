#!/usr/bin/env bash
# Pod create -> visible-and-initialized latency with keel-initializer: its own etcd,
# keel-apiserver and keel-initializer (release builds), the seeds' ConfigMap and
# InitializerConfiguration applied, then `keel-loadtest initialize` creating Pods at each rate
# and timing each from its create to its ADDED event at an ordinary watcher (the moment the
# sidecar is in and `pending` is empty). Prints one Markdown row per rate for BENCHMARKS.md.
#
#   bench/initializers.sh                  # 1 and 100 Pods/s, 30 s each
#   RATES="10 200" DURATION=20s bench/initializers.sh
RATES=${RATES:-"1 100"}
DURATION=${DURATION:-30s}
source "$(dirname "$0")/lib.sh"
kc() { ./target/release/keelctl --server http://127.0.0.1:36443 "$@"; }
kc apply -f deploy/examples/envoy-initializer.yaml >/dev/null
kc apply -f deploy/examples/initializer-configuration.yaml >/dev/null
./target/release/keel-initializer --server http://127.0.0.1:36443 \
  --http-listen 127.0.0.1:36091 >/dev/null 2>"$work/initializer.log" &
for _ in $(seq 1 100); do curl -fsS http://127.0.0.1:36091/readyz >/dev/null 2>&1 && break; sleep 0.1; done

echo "| rate | Pods | p50 | p90 | p99 | max | never initialized | without sidecar |"
echo "|---|---|---|---|---|---|---|---|"
for rate in $RATES; do
  echo "==> $rate Pods/s for $DURATION" >&2
  ./target/release/keel-loadtest --server http://127.0.0.1:36443 --duration "$DURATION" \
    --namespace "bench-init-$rate" --json initialize --rate "$rate" >"$work/out.json"
  field() { grep -o "\"$1\":[0-9.]*" "$work/out.json" | head -1 | cut -d: -f2; }
  ms() { printf '%.1f ms' "$(field "$1")"; }
  echo "| $rate Pods/s | $(field events_expected) | $(ms p50_ms) | $(ms p90_ms) | $(ms p99_ms) | $(ms max_ms) | $(field events_missed) | $(field sidecars_missing) |"
done
