#!/usr/bin/env bash
# Installs what keel needs to build and test on a Debian machine, when it is missing:
# etcd (Debian's etcd-server), protoc (protobuf-compiler, for etcd-client's build), a C
# toolchain. Idempotent; needs root (or sudo) only when something is missing.
set -euo pipefail

missing=()
command -v etcd >/dev/null 2>&1 || [ -n "${ETCD_BIN:-}" ] || missing+=(etcd-server)
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
command -v cc >/dev/null 2>&1 || missing+=(build-essential)
command -v curl >/dev/null 2>&1 || missing+=(curl)
# The compose stack and its test: Docker must be there (it cannot be installed and started from
# here on every machine), docker-compose can.
if command -v docker >/dev/null 2>&1 && ! docker compose version >/dev/null 2>&1 &&
  ! command -v docker-compose >/dev/null 2>&1; then
  missing+=(docker-compose)
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "==> installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian's package may start an etcd service of its own; keel's scripts start their own.
command -v cargo >/dev/null 2>&1 || { echo "cargo not found: install Rust (rustup) first" >&2; exit 1; }
