"""keel's gRPC API as a third-party client sees it: Python's grpcio, with its default channel
options, and stubs generated from proto/keel/v1/keel.proto. Errors are read as any client
would read them: the gRPC code, and keel's Status JSON in `grpc-status-details-bin`; never
the message text.

Starts its own etcd and keel-apiserver (cluster.py). Run by tests/python/run.sh.
"""

import json
import time
import unittest

import grpc

from cluster import Cluster, eventually

from keel.v1 import keel_pb2 as pb
from keel.v1 import keel_pb2_grpc as rpc

CONFIGMAPS = pb.ResourceRef(group="", version="v1", resource="configmaps")
# gRPC core refuses trailers past this many bytes at random, and past 16 KiB always.
SOFT_METADATA_LIMIT = 8 * 1024


def status_of(e):
    """keel's Status JSON from a failed call's trailers, as a third-party client reads it."""
    for key, value in e.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            return json.loads(value)
    raise AssertionError(f"no keel Status in the trailers of {e.code()}: {e.details()!r}")


def trailer_size(e):
    """What gRPC core counts for the trailers: name + value + 32 per field, binary values as
    their base64 text, the message percent-encoded (its worst: three bytes per byte)."""
    size = 0
    for key, value in e.trailing_metadata() or ():
        n = len(value) if isinstance(value, (bytes, str)) else 0
        if key.endswith("-bin"):
            n = (n + 2) // 3 * 4
        size += len(key) + n + 32
    details = (e.details() or "").encode()
    return size + len("grpc-message") + 3 * len(details) + 32 + len("grpc-status") + 2 + 32


def configmap(name, data=None, labels=None, namespace="default"):
    meta = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
                       "data": data or {}}).encode()


class Conformance(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # A small watch window and quick compaction, so that the expired path is reachable.
        cls.cluster = Cluster(["--watch-cache-size", "16", "--compaction-interval", "2s"])
        cls.channel = grpc.insecure_channel(cls.cluster.grpc)
        cls.objects = rpc.ObjectsStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.cluster.stop()

    def create(self, name, **kw):
        r = self.objects.Create(pb.CreateRequest(resource=CONFIGMAPS, namespace="default",
                                                 object=configmap(name, **kw)))
        return json.loads(r.object)

    def refused(self, call, request, code, reason):
        """Calls, expects the typed error, and returns its Status."""
        with self.assertRaises(grpc.RpcError) as cm:
            r = call(request)
            if hasattr(r, "__next__"):
                for _ in r:
                    pass
        e = cm.exception
        self.assertEqual(e.code(), code, e.details())
        status = status_of(e)
        self.assertEqual(status["reason"], reason, status)
        self.assertLess(trailer_size(e), SOFT_METADATA_LIMIT, status)
        return status

    # Hostile input: every error arrives typed, its trailers under gRPC core's soft limit.

    def test_many_invalid_keys_are_invalid_with_causes(self):
        data = {f"bad key {i} " + "x" * 10: "v" for i in range(40)}
        for attempt in range(20):  # past 8 KiB, grpcio refuses at random: try many times
            status = self.refused(
                self.objects.Create,
                pb.CreateRequest(resource=CONFIGMAPS, namespace="default",
                                 object=configmap(f"keys-{attempt}", data=data)),
                grpc.StatusCode.INVALID_ARGUMENT, "Invalid")
        self.assertEqual(status["details"]["kind"], "ConfigMap")
        self.assertEqual(status["details"]["name"], "keys-19")
        causes = status["details"]["causes"]
        # As many causes as fit; the message says how many there are in all.
        # Each at its key, as Kubernetes names a bad data key: data[<key>].
        self.assertTrue(causes and all(c["field"].startswith("data[bad key ") for c in causes), causes)
        self.assertIn("bad key 0 ", causes[0]["message"])
        # Several causes are listed in brackets, as apimachinery's aggregate prints them.
        self.assertTrue(status["message"].endswith(" more]"), status["message"])
        self.assertEqual(status["code"], 422)

    def test_many_invalid_labels_with_long_values_are_invalid(self):
        labels = {f"k{i}": "v" * 2000 for i in range(200)}
        status = self.refused(
            self.objects.Create,
            pb.CreateRequest(resource=CONFIGMAPS, namespace="default",
                             object=configmap("labels", labels=labels)),
            grpc.StatusCode.INVALID_ARGUMENT, "Invalid")
        self.assertTrue(status["details"]["causes"][0]["field"].startswith("metadata.labels"))

    def test_a_long_name_is_not_found(self):
        self.refused(self.objects.Get,
                     pb.GetRequest(resource=CONFIGMAPS, namespace="default", name="n" * 5000),
                     grpc.StatusCode.NOT_FOUND, "NotFound")
        self.refused(self.objects.Delete,
                     pb.DeleteRequest(resource=CONFIGMAPS, namespace="default",
                                      name="\x01" * 5000),
                     grpc.StatusCode.NOT_FOUND, "NotFound")

    def test_a_long_invalid_name_on_create_is_invalid(self):
        status = self.refused(
            self.objects.Create,
            pb.CreateRequest(resource=CONFIGMAPS, namespace="default",
                             object=configmap("N" * 5000)),
            grpc.StatusCode.INVALID_ARGUMENT, "Invalid")
        self.assertEqual(status["details"]["causes"][0]["field"], "metadata.name")

    def test_a_long_selector_is_a_bad_request(self):
        selector = ",".join(f"key{i} in (a, b, c" for i in range(400))
        self.refused(self.objects.List,
                     pb.ListRequest(resource=CONFIGMAPS, namespace="default",
                                    label_selector=selector),
                     grpc.StatusCode.INVALID_ARGUMENT, "BadRequest")
        self.refused(self.objects.Watch,
                     pb.WatchRequest(resource=CONFIGMAPS, namespace="default",
                                     field_selector="metadata.name==" + "x" * 4000 + ",,"),
                     grpc.StatusCode.INVALID_ARGUMENT, "BadRequest")

    def test_oversized_objects_and_requests_are_too_large(self):
        for size in (2 << 20, 9 << 20, 20 << 20):
            status = self.refused(
                self.objects.Create,
                pb.CreateRequest(resource=CONFIGMAPS, namespace="default",
                                 object=configmap("big", data={"blob": "x" * size})),
                grpc.StatusCode.RESOURCE_EXHAUSTED, "RequestEntityTooLarge")
            self.assertEqual(status["code"], 413)
        self.refused(self.objects.Get,
                     pb.GetRequest(resource=CONFIGMAPS, namespace="default", name="big"),
                     grpc.StatusCode.NOT_FOUND, "NotFound")

    def test_a_future_resource_version_times_out_as_too_large(self):
        rv = int(self.create("future")["metadata"]["resourceVersion"]) + 1000
        status = self.refused(
            self.objects.Get,
            pb.GetRequest(resource=CONFIGMAPS, namespace="default", name="future",
                          resource_version=str(rv)),
            grpc.StatusCode.DEADLINE_EXCEEDED, "Timeout")
        self.assertEqual(status["details"]["causes"][0]["reason"], "ResourceVersionTooLarge")
        self.assertEqual(status["details"]["retryAfterSeconds"], 1)
        self.assertEqual(status["code"], 504)

    def test_a_top_level_strategic_delete_is_a_bad_request(self):
        self.create("whole")
        self.refused(self.objects.Patch,
                     pb.PatchRequest(resource=CONFIGMAPS, namespace="default", name="whole",
                                     patch_type=pb.PATCH_TYPE_STRATEGIC,
                                     patch=b'{"$patch": "delete"}'),
                     grpc.StatusCode.INVALID_ARGUMENT, "BadRequest")

    def test_an_empty_namespace_is_default_for_one_object(self):
        made = self.create("nsless")
        got = json.loads(self.objects.Get(
            pb.GetRequest(resource=CONFIGMAPS, namespace="", name="nsless")).object)
        self.assertEqual(got["metadata"]["uid"], made["metadata"]["uid"])

    # The everyday paths.

    def test_a_stale_update_is_a_conflict(self):
        obj = self.create("cas", data={"n": "0"})
        obj["data"]["n"] = "1"
        self.objects.Update(pb.UpdateRequest(resource=CONFIGMAPS, namespace="default",
                                             object=json.dumps(obj).encode()))
        obj["data"]["n"] = "2"  # still at the old resourceVersion
        status = self.refused(
            self.objects.Update,
            pb.UpdateRequest(resource=CONFIGMAPS, namespace="default",
                             object=json.dumps(obj).encode()),
            grpc.StatusCode.ABORTED, "Conflict")
        self.assertEqual(status["details"]["name"], "cas")

    def test_strict_field_validation_refuses_misspelt_fields(self):
        bad = json.loads(configmap("strict"))
        bad["dta"] = {"a": "1"}
        body = json.dumps(bad).encode()
        status = self.refused(
            self.objects.Create,
            pb.CreateRequest(resource=CONFIGMAPS, namespace="default", object=body,
                             field_validation="Strict"),
            grpc.StatusCode.INVALID_ARGUMENT, "BadRequest")
        self.assertIn('unknown field "dta"', status["message"])
        self.refused(
            self.objects.Create,
            pb.CreateRequest(resource=CONFIGMAPS, namespace="default", object=body,
                             field_validation="Sloppy"),
            grpc.StatusCode.INVALID_ARGUMENT, "BadRequest")
        # Without Strict (Warn, the default), it is accepted and, as Kubernetes does, the
        # field its schema lacks is dropped.
        r = self.objects.Create(pb.CreateRequest(resource=CONFIGMAPS, namespace="default",
                                                 object=body))
        created = json.loads(r.object)
        self.assertNotIn("dta", created)
        self.assertEqual(created["metadata"]["name"], "strict")

    def test_paging_returns_every_object_once(self):
        names = {f"page-{i:02}" for i in range(25)}
        for n in names:
            self.create(n, labels={"paging": "yes"})
        seen, token, pages = [], "", 0
        while True:
            r = self.objects.List(pb.ListRequest(resource=CONFIGMAPS, namespace="default",
                                                 label_selector="paging=yes", limit=10,
                                                 continue_token=token))
            seen += [json.loads(i)["metadata"]["name"] for i in r.items]
            pages += 1
            token = r.continue_token
            if not token:
                break
        self.assertEqual(pages, 3)
        self.assertEqual(sorted(seen), sorted(names))

    def test_a_watch_resumes_from_its_last_version_without_loss_or_repeats(self):
        rv = self.create("watched", data={"n": "0"})["metadata"]["resourceVersion"]
        request = lambda rv: pb.WatchRequest(resource=CONFIGMAPS, namespace="default",
                                             field_selector="metadata.name=watched",
                                             resource_version=rv)

        def patch(n):
            self.objects.Patch(pb.PatchRequest(
                resource=CONFIGMAPS, namespace="default", name="watched",
                patch_type=pb.PATCH_TYPE_MERGE, patch=json.dumps({"data": {"n": str(n)}}).encode()))

        seen = []
        stream = self.objects.Watch(request(rv))
        for n in range(1, 4):
            patch(n)
        for event in stream:
            obj = json.loads(event.object)
            seen.append(obj["data"]["n"])
            rv = obj["metadata"]["resourceVersion"]
            if len(seen) == 3:
                break
        stream.cancel()
        for n in range(4, 7):  # while no watch is open
            patch(n)
        stream = self.objects.Watch(request(rv))
        for event in stream:
            seen.append(json.loads(event.object)["data"]["n"])
            if len(seen) == 6:
                break
        stream.cancel()
        self.assertEqual(seen, [str(n) for n in range(1, 7)])

    def test_a_watch_from_a_compacted_version_is_expired(self):
        first = self.create("expire-0")["metadata"]["resourceVersion"]
        for i in range(1, 40):  # more events than the watch window holds
            self.create(f"expire-{i}")

        def compacted():
            try:
                self.objects.List(pb.ListRequest(resource=CONFIGMAPS, namespace="default",
                                                 resource_version=first,
                                                 resource_version_match="Exact", limit=1))
                return False
            except grpc.RpcError as e:
                return e.code() == grpc.StatusCode.OUT_OF_RANGE

        eventually("etcd's history compacted past the first create", compacted)
        status = self.refused(self.objects.Watch,
                              pb.WatchRequest(resource=CONFIGMAPS, namespace="default",
                                              resource_version=first),
                              grpc.StatusCode.OUT_OF_RANGE, "Expired")
        self.assertEqual(status["code"], 410)


if __name__ == "__main__":
    unittest.main()
