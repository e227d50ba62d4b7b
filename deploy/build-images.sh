#!/usr/bin/env bash
# Builds keel's images from nothing (no registry is needed): each is FROM scratch plus release
# binaries, exactly the shared libraries `ldd` says they link, and a non-root user (10001).
#   keel:local       every keel binary (keel-apiserver, keelctl, keel-loadtest, keel-probe, ...)
#   keel-etcd:local  etcd from Debian's etcd-server package, and keel-probe for health checks
#   keel-edge:local  HAProxy from Debian's haproxy package, and keel-probe: the swarm stack's
#                    edge on engines without IPVS (deploy/swarm/keel-edge.yml)
set -euo pipefail
cd "$(dirname "$0")/.."
TAG=${KEEL_IMAGE_TAG:-local}

echo "==> building release binaries"
cargo build --release --locked --bins

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The base of every image: a passwd and group naming the unprivileged user, and /tmp.
base_rootfs() {
  local root=$1
  mkdir -p "$root/etc" "$root/tmp"
  chmod 1777 "$root/tmp"
  printf 'root:x:0:0:root:/:/sbin/nologin\nkeel:x:10001:10001:keel:/nonexistent:/sbin/nologin\n' >"$root/etc/passwd"
  printf 'root:x:0:\nkeel:x:10001:\n' >"$root/etc/group"
}

# add_binary ROOT BINARY: installs BINARY in ROOT/usr/local/bin and every library it links
# (as ldd resolves them on this machine, the dynamic loader included) at the same path.
add_binary() {
  local root=$1 bin=$2
  # Stripped: line tables serve profiling on the build machine, not the image.
  install -D -m 0755 -s "$bin" "$root/usr/local/bin/$(basename "$bin")"
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u |
    while read -r lib; do
      # 0755: the dynamic loader among them must be executable.
      [ -e "$root$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
    done
}

echo "==> assembling keel:$TAG"
mkdir -p "$work/keel/certs" # the certificates volume's mount point, owned by the user
base_rootfs "$work/keel/rootfs"
for bin in $(find target/release -maxdepth 1 -type f -executable \( -name 'keel-*' -o -name 'keelctl' \) | sort); do
  add_binary "$work/keel/rootfs" "$bin"
done
cp deploy/images/keel.Dockerfile "$work/keel/Dockerfile"
docker build -q -t "keel:$TAG" "$work/keel" >/dev/null

echo "==> assembling keel-etcd:$TAG from $(command -v etcd)"
mkdir -p "$work/etcd/data"
chmod 0700 "$work/etcd/data" # etcd refuses a data directory others can read
base_rootfs "$work/etcd/rootfs"
add_binary "$work/etcd/rootfs" "$(command -v etcd)"
add_binary "$work/etcd/rootfs" target/release/keel-probe
cp deploy/images/etcd.Dockerfile "$work/etcd/Dockerfile"
docker build -q -t "keel-etcd:$TAG" "$work/etcd" >/dev/null

echo "==> assembling keel-edge:$TAG from Debian's haproxy (the swarm stack's edge without IPVS)"
mkdir -p "$work/edge/deb"
(cd "$work/edge/deb" && { apt-get download haproxy >/dev/null 2>&1 ||
  { apt-get update -qq && apt-get download haproxy >/dev/null; }; })
dpkg-deb -x "$work"/edge/deb/haproxy_*.deb "$work/edge/pkg"
base_rootfs "$work/edge/rootfs"
add_binary "$work/edge/rootfs" "$work/edge/pkg/usr/sbin/haproxy"
add_binary "$work/edge/rootfs" target/release/keel-probe
cp deploy/images/edge.Dockerfile "$work/edge/Dockerfile"
docker build -q -t "keel-edge:$TAG" "$work/edge" >/dev/null

docker image ls --format 'table {{.Repository}}:{{.Tag}}\t{{.Size}}' | grep -E "^(REPOSITORY|keel(-etcd|-edge)?:$TAG)"
