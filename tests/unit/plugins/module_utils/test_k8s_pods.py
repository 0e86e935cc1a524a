"""Unit tests of PodAPI (module_utils/k8s_pods.py): its requests, retries and 404s/409s (no server:
DynamicClient.request is replaced by a stand-in; tests/functional/test_k8s_gpu_validate.py drives the real one)."""
import json

import pytest

pytest.importorskip("kubernetes")

from kubernetes import client as k8s  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402
from urllib3.exceptions import MaxRetryError, NewConnectionError, ReadTimeoutError  # noqa: E402

from ansible_collections.kubegpu.nvidia.plugins.module_utils import k8s_pods  # noqa: E402
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import K8sError  # noqa: E402

HOST = "https://192.0.2.1:6443"


class Answer:
    def __init__(self, data):
        self.status = 200
        self.data = data if isinstance(data, bytes) else json.dumps(data).encode()


def status(code, message, headers=None):
    exc = ApiException(status=code, reason="Reason%d" % code)
    exc.body = json.dumps({"kind": "Status", "message": message})
    exc.headers = headers or {}
    return exc


def pod_api(monkeypatch, answers, **kwargs):
    """A PodAPI over a real ApiClient whose DynamicClient.request answers from ``answers`` (in order)."""
    cfg = k8s.Configuration()
    cfg.host = HOST
    sleeps = []
    api = k8s_pods.PodAPI(k8s.ApiClient(configuration=cfg), sleep=sleeps.append, **kwargs)
    sent = []

    def request(method, path, body=None, **params):
        sent.append((method, path, params.get("query_params"), params["header_params"]["Accept"], body,
                     params["serialize"], params["_request_timeout"]))
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer
    monkeypatch.setattr(api.client, "request", request)
    return api, sent, sleeps


def test_every_call_is_one_request_by_path(monkeypatch):
    listing = {"metadata": {}, "items": [{"metadata": {"name": "p1"}}]}
    api, sent, _sleeps = pod_api(monkeypatch, [
        Answer({"metadata": {}, "items": [{"metadata": {"name": "n1"}}]}),
        Answer({"metadata": {"name": "ns"}}), Answer({}), Answer(listing),
        Answer({}), Answer(b"Test PASSED\n"), Answer({}), Answer({})], request_timeout=12)
    assert api.list_nodes("nvidia.com/gpu.present=true") == [{"metadata": {"name": "n1"}}]
    assert api.get_namespace("ns") == {"metadata": {"name": "ns"}}
    api.create_namespace({"metadata": {"name": "ns"}})
    assert api.list_pods("ns", "a=b,c=d") == [{"metadata": {"name": "p1"}}]
    api.create_pod("ns", {"metadata": {"name": "p1"}})
    assert api.read_pod_log("ns", "p1", "first") == "Test PASSED\n"
    assert api.delete_pod("ns", "p1") is True
    api.patch_node("n1", {"metadata": {"annotations": {"a": None}}})
    assert [s[:4] for s in sent] == [
        ("GET", "/api/v1/nodes", [("limit", 500), ("labelSelector", "nvidia.com/gpu.present=true")],
         "application/json"),
        ("GET", "/api/v1/namespaces/ns", [], "application/json"),
        ("POST", "/api/v1/namespaces", [], "application/json"),
        ("GET", "/api/v1/namespaces/ns/pods", [("limit", 500), ("labelSelector", "a=b,c=d")], "application/json"),
        ("POST", "/api/v1/namespaces/ns/pods", [], "application/json"),
        ("GET", "/api/v1/namespaces/ns/pods/p1/log", [("container", "first")], "*/*"),
        ("DELETE", "/api/v1/namespaces/ns/pods/p1", [], "application/json"),
        ("PATCH", "/api/v1/nodes/n1", [], "application/json")]
    assert sent[4][4] == {"metadata": {"name": "p1"}}
    assert all(s[5] is False and s[6] == (12.0, 12.0) for s in sent)
    assert api.counts == {"list": 2, "get": 2, "create": 2, "delete": 1, "patch": 1}


def test_listings_follow_continue_tokens(monkeypatch):
    api, sent, _sleeps = pod_api(monkeypatch, [
        Answer({"metadata": {"continue": "t1"}, "items": [{"metadata": {"name": "a"}}]}),
        Answer({"metadata": {}, "items": [{"metadata": {"name": "b"}}]})], page_size=1)
    assert [p["metadata"]["name"] for p in api.list_pods("ns", "a=b")] == ["a", "b"]
    assert sent[1][2] == [("limit", 1), ("labelSelector", "a=b"), ("continue", "t1")]


def test_missing_objects_are_fine_where_they_may_be(monkeypatch):
    api, _sent, _sleeps = pod_api(monkeypatch, [
        status(404, 'namespaces "ns" not found'), status(404, 'pods "p1" not found'),
        status(409, 'namespaces "ns" already exists')])
    assert api.get_namespace("ns") is None
    assert api.delete_pod("ns", "p1") is False
    assert api.create_namespace({"metadata": {"name": "ns"}}) is None


def test_a_pod_create_answered_409_after_a_timed_out_attempt_went_through(monkeypatch):
    timeout = MaxRetryError(None, "/x", ReadTimeoutError(None, "/x", "Read timed out."))
    api, sent, _sleeps = pod_api(monkeypatch, [timeout, status(409, 'pods "p1" already exists')])
    assert api.create_pod("ns", {"metadata": {"name": "p1"}}) is None
    assert len(sent) == 2 and api.counts == {"create": 2}
    # a first attempt answered 409 is a pod someone else made: a failure
    api, _sent, _sleeps = pod_api(monkeypatch, [status(409, 'pods "p1" already exists')])
    with pytest.raises(K8sError, match="already exists") as err:
        api.create_pod("ns", {"metadata": {"name": "p1"}})
    assert err.value.kind == "conflict"


def test_throttling_and_server_errors_are_retried_honouring_retry_after(monkeypatch):
    api, _sent, sleeps = pod_api(monkeypatch, [
        status(429, "slow down", {"Retry-After": "3"}), status(503, "unavailable"),
        Answer({"metadata": {}, "items": []})])
    assert api.list_pods("ns") == []
    assert sleeps == [3.0, 1.0]  # Retry-After, then backoff 0.5 * 2**1
    assert api.counts == {"list": 3}


def test_failures_are_one_line_messages(monkeypatch):
    refused = MaxRetryError(None, "/x", NewConnectionError(
        None, "Failed to establish a new connection: [Errno 111] Connection refused"))
    api, _sent, _sleeps = pod_api(monkeypatch, [
        status(500, "etcd down"), status(500, "etcd down"),
        status(403, 'pods is forbidden: User "x" cannot create resource "pods"'), refused], retries=1)
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
    assert err.value.msg == ("reading the log of pod ns/p1 failed: cannot connect to the API server at %s: "
                             "[Errno 111] Connection refused" % HOST)
