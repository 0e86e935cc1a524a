"""Unit tests of PodAPI (module_utils/k8s_pods.py): both ways to reach the API, retries, 404s (no server)."""
import json

import pytest

pytest.importorskip("kubernetes")

from kubernetes import client as k8s  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402
from urllib3.exceptions import MaxRetryError  # noqa: E402

from ansible_collections.kubegpu.nvidia.plugins.module_utils import k8s_pods  # noqa: E402
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import K8sError  # noqa: E402

HOST = "https://192.0.2.1:6443"


class Response:
    def __init__(self, status, data, headers=None, reason="OK"):
        self.status = status
        self.data = data if isinstance(data, bytes) else json.dumps(data).encode()
        self.reason = reason
        self.headers = headers or {}

    def read(self):
        return self.data

    def getheaders(self):
        return self.headers

    def getheader(self, name, default=None):
        return self.headers.get(name, default)


def direct_api(monkeypatch, answers, **kwargs):
    """A PodAPI over a real ApiClient whose call_api answers from ``answers`` (a list, in order)."""
    monkeypatch.setattr(k8s, "CoreV1Api", lambda client: pytest.fail("CoreV1Api built"))
    cfg = k8s.Configuration()
    cfg.host = HOST
    sleeps = []
    api = k8s_pods.PodAPI(k8s.ApiClient(configuration=cfg), sleep=sleeps.append, **kwargs)
    sent = []

    def call_api(method, url, header_params=None, body=None, post_params=None, _request_timeout=None):
        sent.append((method, url[len(HOST):], header_params.get("Accept"), body))
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer
    monkeypatch.setattr(api.api_client, "call_api", call_api)
    return api, sent, sleeps


def status(code, message, headers=None):
    return Response(code, {"kind": "Status", "message": message}, headers, reason="Reason%d" % code)


def test_a_generated_client_is_driven_without_core_v1_api(monkeypatch):
    listing = {"metadata": {}, "items": [{"metadata": {"name": "p1"}}]}
    api, sent, _sleeps = direct_api(monkeypatch, [
        Response(200, {"metadata": {}, "items": [{"metadata": {"name": "n1"}}]}),
        Response(200, {"metadata": {"name": "ns"}}), Response(201, {}), Response(200, listing),
        Response(201, {}), Response(200, b"Test PASSED\n"), Response(200, {})])
    assert api.direct is True
    assert api.list_nodes("nvidia.com/gpu.present=true") == [{"metadata": {"name": "n1"}}]
    assert api.get_namespace("ns") == {"metadata": {"name": "ns"}}
    api.create_namespace({"metadata": {"name": "ns"}})
    assert api.list_pods("ns", "a=b,c=d") == [{"metadata": {"name": "p1"}}]
    api.create_pod("ns", {"metadata": {"name": "p1"}})
    assert api.read_pod_log("ns", "p1") == "Test PASSED\n"
    assert api.delete_pod("ns", "p1") is True
    assert [s[:3] for s in sent] == [
        ("GET", "/api/v1/nodes?limit=500&labelSelector=nvidia.com/gpu.present%3Dtrue", "application/json"),
        ("GET", "/api/v1/namespaces/ns", "application/json"),
        ("POST", "/api/v1/namespaces", "application/json"),
        ("GET", "/api/v1/namespaces/ns/pods?limit=500&labelSelector=a%3Db%2Cc%3Dd", "application/json"),
        ("POST", "/api/v1/namespaces/ns/pods", "application/json"),
        ("GET", "/api/v1/namespaces/ns/pods/p1/log", "*/*"),
        ("DELETE", "/api/v1/namespaces/ns/pods/p1", "application/json")]
    assert sent[4][3] == {"metadata": {"name": "p1"}}
    assert api.counts == {"list": 2, "get": 2, "create": 2, "delete": 1}


def test_listings_follow_continue_tokens(monkeypatch):
    api, sent, _sleeps = direct_api(monkeypatch, [
        Response(200, {"metadata": {"continue": "t1"}, "items": [{"metadata": {"name": "a"}}]}),
        Response(200, {"metadata": {}, "items": [{"metadata": {"name": "b"}}]})], page_size=1)
    assert [p["metadata"]["name"] for p in api.list_pods("ns", "a=b")] == ["a", "b"]
    assert sent[1][1] == "/api/v1/namespaces/ns/pods?limit=1&labelSelector=a%3Db&continue=t1"


def test_missing_objects_are_fine_where_they_may_be(monkeypatch):
    api, _sent, _sleeps = direct_api(monkeypatch, [
        status(404, 'namespaces "ns" not found'), status(404, 'pods "p1" not found'),
        status(409, 'namespaces "ns" already exists')])
    assert api.get_namespace("ns") is None
    assert api.delete_pod("ns", "p1") is False
    assert api.create_namespace({"metadata": {"name": "ns"}}) is None


def test_throttling_and_server_errors_are_retried_honouring_retry_after(monkeypatch):
    api, _sent, sleeps = direct_api(monkeypatch, [
        status(429, "slow down", {"Retry-After": "3"}), status(503, "unavailable"),
        Response(200, {"metadata": {}, "items": []})])
    assert api.list_pods("ns") == []
    assert sleeps == [3.0, 1.0]  # Retry-After, then backoff 0.5 * 2**1
    assert api.counts == {"list": 3}


def test_failures_are_one_line_messages(monkeypatch):
    api, _sent, _sleeps = direct_api(monkeypatch, [
        status(500, "etcd down"), status(500, "etcd down"),
        status(403, 'pods is forbidden: User "x" cannot create resource "pods"'),
        MaxRetryError(None, "/api", "connection refused")], retries=1)
    with pytest.raises(K8sError) as err:
        api.list_pods("ns", "a=b")
    assert err.value.msg == ("listing pods in namespace ns with labels a=b failed after 2 attempts: "
                             "500 Reason500: etcd down")
    with pytest.raises(K8sError) as err:
        api.create_pod("ns", {"metadata": {"name": "p1"}})
    assert err.value.msg == ('creating pod ns/p1 failed: 403 Reason403: pods is forbidden: '
                             'User "x" cannot create resource "pods"')
    assert err.value.status == 403
    with pytest.raises(K8sError) as err:
        api.read_pod_log("ns", "p1")
    assert err.value.msg.startswith("reading the log of pod ns/p1 failed: cannot reach the API server at %s" % HOST)
    assert "\n" not in err.value.msg


def test_an_older_client_goes_through_core_v1_api(monkeypatch):
    calls = []

    class Answer:
        def __init__(self, obj):
            self.data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()

    class Core:
        def __init__(self, client):
            pass

        def list_node(self, **kwargs):
            calls.append(("list_node", kwargs))
            return Answer({"metadata": {}, "items": [{"metadata": {"name": "n1"}}]})

        def read_namespace(self, name, **kwargs):
            calls.append(("read_namespace", name, kwargs))
            raise ApiException(status=404, reason="Not Found")

        def create_namespace(self, body, **kwargs):
            calls.append(("create_namespace", body["metadata"]["name"], kwargs))
            return Answer({})

        def list_namespaced_pod(self, namespace, **kwargs):
            calls.append(("list_namespaced_pod", namespace, kwargs))
            return Answer({"metadata": {}, "items": []})

        def create_namespaced_pod(self, namespace, body, **kwargs):
            calls.append(("create_namespaced_pod", namespace, body["metadata"]["name"], kwargs))
            return Answer({})

        def read_namespaced_pod_log(self, name, namespace, **kwargs):
            calls.append(("read_namespaced_pod_log", name, namespace, kwargs))
            return Answer(b"Test PASSED\n")

        def delete_namespaced_pod(self, name, namespace, **kwargs):
            calls.append(("delete_namespaced_pod", name, namespace, kwargs))
            return Answer({})
    monkeypatch.setattr(k8s, "CoreV1Api", Core)

    class OldClient:  # kubernetes < 35: no param_serialize
        class configuration:  # pylint: disable=invalid-name
            host = HOST
    api = k8s_pods.PodAPI(OldClient())
    assert api.direct is False
    assert api.list_nodes("gpu=yes") == [{"metadata": {"name": "n1"}}]
    assert api.get_namespace("ns") is None
    api.create_namespace({"metadata": {"name": "ns"}})
    assert api.list_pods("ns", "a=b") == []
    api.create_pod("ns", {"metadata": {"name": "p1"}})
    assert api.read_pod_log("ns", "p1") == "Test PASSED\n"
    assert api.delete_pod("ns", "p1") is True
    plain = {"_preload_content": False}
    assert calls == [
        ("list_node", {"limit": 500, "_preload_content": False, "label_selector": "gpu=yes"}),
        ("read_namespace", "ns", plain), ("create_namespace", "ns", plain),
        ("list_namespaced_pod", "ns", {"limit": 500, "_preload_content": False, "label_selector": "a=b"}),
        ("create_namespaced_pod", "ns", "p1", plain), ("read_namespaced_pod_log", "p1", "ns", plain),
        ("delete_namespaced_pod", "p1", "ns", plain)]
