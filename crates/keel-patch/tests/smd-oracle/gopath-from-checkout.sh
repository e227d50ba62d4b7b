#!/usr/bin/env bash
# Makes a GOPATH that holds another version of structured-merge-diff, for
# SMD_ORACLE_GOPATH (tests/smd_oracle.rs): `gopath-from-checkout.sh <smd checkout> <dir>`.
# v4.2 and later import sigs.k8s.io/yaml/goyaml.v2, a copy of gopkg.in/yaml.v2 under another
# name, which Debian does not package: it is linked to Debian's gopkg.in/yaml.v2 (the oracle
# uses it only to read its schema). Nothing is downloaded.
#
# Kubernetes 1.32's v4.4.2, with the library's git history at hand:
#   mkdir /tmp/smd && git -C <smd repository> archive v4.4.2 | tar -x -C /tmp/smd
#   crates/keel-patch/tests/smd-oracle/gopath-from-checkout.sh /tmp/smd /tmp/smd-gopath
#   SMD_ORACLE_GOPATH=/tmp/smd-gopath SMD_ORACLE_EXACT_ORDER=1 cargo test -p keel-patch --test smd_oracle
set -euo pipefail
checkout=$(cd "$1" && pwd)
out=$2
debian=/usr/share/gocode/src
mkdir -p "$out/src/sigs.k8s.io/yaml" "$out/src/github.com" "$out/src/gopkg.in"
rm -rf "$out/src/sigs.k8s.io/structured-merge-diff"
cp -r "$checkout" "$out/src/sigs.k8s.io/structured-merge-diff"
# Its vendor directory, where there is one, is not Debian's: the Debian packages are used.
rm -rf "$out/src/sigs.k8s.io/structured-merge-diff/vendor"
ln -sfn "$debian/gopkg.in/yaml.v2" "$out/src/sigs.k8s.io/yaml/goyaml.v2"
ln -sfn "$debian/gopkg.in/yaml.v2" "$out/src/gopkg.in/yaml.v2"
ln -sfn "$debian/github.com/json-iterator" "$out/src/github.com/json-iterator"
ln -sfn "$debian/github.com/modern-go" "$out/src/github.com/modern-go"
