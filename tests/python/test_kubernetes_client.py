"""The official Python client (PyPI's `kubernetes`) against keel's REST dialect, used as its
documentation shows: typed models, paging, patches, watches that resume, and an ApiException
with Kubernetes' status code and Status body for each class of error.

Starts its own etcd and keel-apiserver (cluster.py). Run by tests/python/run.sh.
"""

import json
import threading
import unittest

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from cluster import Cluster


def configmap(name, data=None, labels=None):
    return client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, labels=labels), data=data or {"a": "1"})


class KubernetesClient(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster()
        config = client.Configuration(host=cls.cluster.url)
        cls.api_client = client.ApiClient(config)
        cls.core = client.CoreV1Api(cls.api_client)

    @classmethod
    def tearDownClass(cls):
        cls.api_client.close()
        cls.cluster.stop()

    def refused(self, status, reason, call, *args, **kwargs):
        with self.assertRaises(ApiException) as cm:
            call(*args, **kwargs)
        e = cm.exception
        self.assertEqual(e.status, status, e.body)
        body = json.loads(e.body)
        self.assertEqual((body["kind"], body["reason"], body["code"]), ("Status", reason, status))
        return body

    def test_create_get_patch_and_delete(self):
        made = self.core.create_namespaced_config_map("default", configmap("py-crud"))
        self.assertEqual(made.metadata.namespace, "default")
        self.assertTrue(made.metadata.uid and made.metadata.resource_version)
        got = self.core.read_namespaced_config_map("py-crud", "default")
        self.assertEqual(got.data, {"a": "1"})
        patched = self.core.patch_namespaced_config_map(
            "py-crud", "default", {"data": {"b": "2"}})
        self.assertEqual(patched.data, {"a": "1", "b": "2"})
        patched = self.core.patch_namespaced_config_map(
            "py-crud", "default", [{"op": "replace", "path": "/data/a", "value": "3"}])
        self.assertEqual(patched.data, {"a": "3", "b": "2"})
        status = self.core.delete_namespaced_config_map("py-crud", "default")
        self.assertEqual(status.status, "Success")
        self.refused(404, "NotFound", self.core.read_namespaced_config_map, "py-crud", "default")

    def test_list_pages_through_every_object_once(self):
        names = {f"py-page-{i:02}" for i in range(23)}
        for n in names:
            self.core.create_namespaced_config_map("default", configmap(n, labels={"paging": "py"}))
        seen, token, pages = [], None, 0
        while True:
            page = self.core.list_namespaced_config_map(
                "default", label_selector="paging=py", limit=10, _continue=token)
            seen += [i.metadata.name for i in page.items]
            pages += 1
            token = page.metadata._continue
            if not token:
                break
        self.assertEqual(pages, 3)
        self.assertEqual(sorted(seen), sorted(names))

    def test_a_watch_resumes_from_its_last_version(self):
        rv = self.core.create_namespaced_config_map(
            "default", configmap("py-watched")).metadata.resource_version
        selector = "metadata.name=py-watched"

        def patch(n):
            self.core.patch_namespaced_config_map(
                "py-watched", "default", {"data": {"n": str(n)}})

        seen = []
        w = watch.Watch()
        # The patches go while the watch is open; the events arrive in order.
        writer = threading.Thread(target=lambda: [patch(n) for n in range(1, 4)])
        stream = w.stream(self.core.list_namespaced_config_map, "default",
                          field_selector=selector, resource_version=rv, timeout_seconds=30)
        writer.start()
        for event in stream:
            self.assertEqual(event["type"], "MODIFIED")
            seen.append(event["object"].data["n"])
            rv = event["object"].metadata.resource_version
            if len(seen) == 3:
                w.stop()
        writer.join()
        for n in range(4, 6):  # while no watch is open
            patch(n)
        w = watch.Watch()
        for event in w.stream(self.core.list_namespaced_config_map, "default",
                              field_selector=selector, resource_version=rv, timeout_seconds=30):
            seen.append(event["object"].data["n"])
            if len(seen) == 5:
                w.stop()
        self.assertEqual(seen, ["1", "2", "3", "4", "5"])

    def test_delete_collection_deletes_what_the_selector_chooses(self):
        for i in range(5):
            self.core.create_namespaced_config_map(
                "default", configmap(f"py-coll-{i}", labels={"batch": "even" if i % 2 == 0 else "odd"}))
        # Kubernetes answers with the list of what it deleted (the client reads it as a Status).
        self.core.delete_collection_namespaced_config_map("default", label_selector="batch=even")
        left = self.core.list_namespaced_config_map("default", label_selector="batch")
        self.assertEqual(sorted(i.metadata.name for i in left.items), ["py-coll-1", "py-coll-3"])

    def test_each_error_class_is_an_api_exception_with_its_status(self):
        self.core.create_namespaced_config_map("default", configmap("py-errors"))
        self.refused(409, "AlreadyExists", self.core.create_namespaced_config_map,
                     "default", configmap("py-errors"))
        stale = self.core.read_namespaced_config_map("py-errors", "default")
        self.core.patch_namespaced_config_map("py-errors", "default", {"data": {"x": "1"}})
        stale.data = {"y": "2"}
        self.refused(409, "Conflict", self.core.replace_namespaced_config_map,
                     "py-errors", "default", stale)
        body = self.refused(422, "Invalid", self.core.create_namespaced_config_map,
                            "default", configmap("Not_Valid"))
        self.assertEqual(body["details"]["causes"][0]["field"], "metadata.name")
        self.refused(400, "BadRequest", self.core.list_namespaced_config_map,
                     "default", label_selector="a in (b")
        self.refused(404, "NotFound", self.core.read_namespaced_config_map,
                     "missing", "default")
        self.refused(404, "NotFound", self.core.create_namespaced_config_map,
                     "no-such-namespace", configmap("x"))


if __name__ == "__main__":
    unittest.main()
