#!/usr/bin/env bash
# Brings keel up locally: etcd on 127.0.0.1:2379 (data in .keel/etcd), one keel-apiserver on
# 127.0.0.1:6443 (gRPC) and 127.0.0.1:6080 (HTTP health and metrics), and one
# keel-controller-manager (HTTP 127.0.0.1:6090). Logs in .keel/.
# `scripts/local-up.sh down` stops them. (scripts/up.sh runs the whole system in containers.)
set -euo pipefail
cd "$(dirname "$0")/.."
state=.keel
mkdir -p "$state"

stop() {
  for p in controller-manager apiserver etcd; do
    if [ -f "$state/$p.pid" ]; then
      kill "$(cat "$state/$p.pid")" 2>/dev/null || true
      rm -f "$state/$p.pid"
    fi
  done
}
if [ "${1:-}" = "down" ]; then
  stop
  echo "keel stopped"
  exit 0
fi

./scripts/install-deps.sh
echo "==> building keel (release)"
cargo build --release --locked --bins
stop

echo "==> starting etcd on 127.0.0.1:2379"
etcd --name keel --data-dir "$state/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster keel=http://127.0.0.1:2380 --max-request-bytes 2097152 \
  --experimental-watch-progress-notify-interval 1s \
  >"$state/etcd.log" 2>&1 &
echo $! >"$state/etcd.pid"

echo "==> starting keel-apiserver on 127.0.0.1:6443"
./target/release/keel-apiserver --etcd-servers http://127.0.0.1:2379 \
  >"$state/apiserver.out" 2>"$state/apiserver.log" &
echo $! >"$state/apiserver.pid"

for _ in $(seq 1 150); do
  if curl -fsS http://127.0.0.1:6080/readyz >/dev/null 2>&1; then
    echo "==> starting keel-controller-manager (HTTP 127.0.0.1:6090)"
    ./target/release/keel-controller-manager --server http://127.0.0.1:6443 \
      >"$state/controller-manager.out" 2>"$state/controller-manager.log" &
    echo $! >"$state/controller-manager.pid"
    for _ in $(seq 1 150); do
      curl -fsS http://127.0.0.1:6090/readyz >/dev/null 2>&1 && break
      sleep 0.2
    done
    echo "keel is up: gRPC at http://127.0.0.1:6443, health and metrics at http://127.0.0.1:6080/{healthz,readyz,metrics}"
    echo "logs in $state/; stop with: scripts/local-up.sh down"
    exit 0
  fi
  sleep 0.2
done
echo "keel-apiserver did not become ready; see $state/apiserver.log and $state/etcd.log" >&2
exit 1
