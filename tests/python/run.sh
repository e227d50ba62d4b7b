#!/usr/bin/env bash
# The Python tests: the gRPC conformance test (Python's grpcio with stubs generated from
# proto/keel/v1/keel.proto) and the official Kubernetes client against the REST dialect, from
# PyPI (pinned in requirements.txt, into a virtual environment under target/), each against a
# keel-apiserver it starts itself (KEEL_BIN_DIR, default target/debug: build it first) and
# Debian's etcd. Needs python3 with venv (install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/python-venv
# pip trusts its own bundled certificates; a site's own authorities (a TLS-inspecting proxy) are
# in the system bundle, as cargo and curl use it.
if [ -z "${PIP_CERT:-}" ] && [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  export PIP_CERT=/etc/ssl/certs/ca-certificates.crt
fi
# Made again when the pins change, or when the interpreter it was made with is gone.
if ! cmp -s tests/python/requirements.txt "$venv/requirements.txt" 2>/dev/null ||
  ! "$venv/bin/python" -c 'import grpc, grpc_tools, kubernetes' 2>/dev/null; then
  echo "==> python virtual environment in $venv (grpcio from PyPI)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/python/requirements.txt
  cp tests/python/requirements.txt "$venv/requirements.txt"
fi
gen=target/python-gen
rm -rf "$gen" && mkdir -p "$gen"
"$venv/bin/python" -m grpc_tools.protoc -I proto --python_out="$gen" --grpc_python_out="$gen" \
  proto/keel/v1/keel.proto
echo "==> Python tests: grpcio conformance, the Kubernetes client (tests/python)"
PYTHONPATH="$gen:tests/python" exec "$venv/bin/python" -m unittest -v \
  test_conformance test_kubernetes_client "$@"
