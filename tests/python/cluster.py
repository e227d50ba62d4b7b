"""One etcd (Debian's etcd-server, or $ETCD_BIN) and one keel-apiserver (from $KEEL_BIN_DIR,
default target/debug) on free loopback ports, for the Python tests."""

import os
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def eventually(what, cond, timeout=30.0):
    """Polls `cond` until it returns something true; fails naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def http_ok(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


class Cluster:
    """One etcd and one keel-apiserver, in a temporary directory; stopped again if either
    fails to start."""

    def __init__(self, extra_args=()):
        self.dir = tempfile.mkdtemp(prefix="keel-python-")
        self.procs = []
        try:
            etcd_url = self.start_etcd()
            self.start_apiserver(etcd_url, list(extra_args))
        except BaseException:
            self.stop()
            raise

    def start_etcd(self):
        # A free port may be taken again before etcd binds it: then try other ports.
        for attempt in range(5):
            client, peer = free_port(), free_port()
            etcd_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
            etcd = self.spawn(
                [os.environ.get("ETCD_BIN", "etcd"), "--name", "conformance",
                 "--data-dir", os.path.join(self.dir, f"etcd-{attempt}"),
                 "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
                 "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                 "--initial-cluster", f"conformance={peer_url}", "--log-level", "error",
                 "--experimental-watch-progress-notify-interval", "1s"],
                f"etcd-{attempt}.log",
            )
            if eventually("etcd", lambda: etcd.poll() is not None or http_ok(f"{etcd_url}/health")):
                if etcd.poll() is None:
                    return etcd_url
        raise AssertionError(f"etcd did not start; logs in {self.dir}")

    def start_apiserver(self, etcd_url, extra_args):
        bin_dir = os.environ.get("KEEL_BIN_DIR", os.path.join(ROOT, "target", "debug"))
        api = self.spawn(
            [os.path.join(bin_dir, "keel-apiserver"),
             "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
             "--etcd-servers", etcd_url] + extra_args,
            "keel-apiserver.log",
            stdout=subprocess.PIPE,
        )
        # The first line names the bound addresses: "... grpc=ADDR http=ADDR".
        ready, _, _ = select.select([api.stdout], [], [], 30)
        line = api.stdout.readline().decode() if ready else ""
        words = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if "grpc" not in words or "http" not in words:
            raise AssertionError(f"keel-apiserver did not announce its addresses: {line!r}")
        self.grpc, http = words["grpc"], words["http"]
        # Kubernetes' REST dialect is served on the same port as gRPC.
        self.url = f"http://{self.grpc}"
        # Whatever else it prints is drained, so that it never blocks on a full pipe.
        threading.Thread(target=lambda: api.stdout.read(), daemon=True).start()
        eventually("keel-apiserver /readyz", lambda: http_ok(f"http://{http}/readyz"))

    def spawn(self, args, log, stdout=subprocess.DEVNULL):
        with open(os.path.join(self.dir, log), "wb") as f:
            p = subprocess.Popen(args, stdout=stdout, stderr=f)
        self.procs.append(p)
        return p

    def stop(self):
        for p in reversed(self.procs):
            p.kill()
            p.wait()
        if os.environ.get("KEEL_CONFORMANCE_KEEP_LOGS"):
            print(f"logs kept in {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
