"""Unit tests of NodeAPI's two ways to reach the API (no server)."""
import json
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("kubernetes")

from ansible_collections.kubegpu.nvidia.plugins.module_utils import k8s_client as kc  # noqa: E402


class Answer:
    def __init__(self, obj):
        self.data = json.dumps(obj).encode()


def test_a_generated_client_is_driven_without_core_v1_api(monkeypatch):
    monkeypatch.setattr(kc.k8s, "CoreV1Api", lambda client: pytest.fail("CoreV1Api built"))
    cfg = kc.k8s.Configuration()
    cfg.host = "https://192.0.2.1:6443"
    api = kc.NodeAPI(kc.k8s.ApiClient(configuration=cfg))
    sent = []

    def call_api(method, url, header_params=None, body=None, post_params=None, _request_timeout=None):
        sent.append((method, url, header_params.get("Content-Type"), body))

        class Response:
            status = 200
            data = json.dumps({"metadata": {}, "items": [{"metadata": {"name": "a b"}}]}).encode()

            def read(self):
                return self.data
        return Response()
    monkeypatch.setattr(api.api_client, "call_api", call_api)
    monkeypatch.setattr(api, "_write_pool", None)  # writes through call_api too (see the write pool tests)
    assert api.direct is True
    assert api.list_nodes(field_selector="metadata.name=a b") == [{"metadata": {"name": "a b"}}]
    assert api.patch_node("a b", {"metadata": {"labels": {"x": "1"}}}) is None
    assert sent[0][:2] == ("GET", "https://192.0.2.1:6443/api/v1/nodes?limit=500&fieldSelector=metadata.name%3Da%20b")
    assert sent[1][:3] == ("PATCH", "https://192.0.2.1:6443/api/v1/nodes/a%20b", kc.STRATEGIC_MERGE_PATCH)
    assert api.counts == {"list": 1, "patch": 1}


def test_an_older_client_goes_through_core_v1_api(monkeypatch):
    calls = []

    class Core:
        def __init__(self, client):
            pass

        def list_node(self, **kwargs):
            calls.append(("list", kwargs))
            return Answer({"metadata": {}, "items": [{"metadata": {"name": "n1"}}]})

        def patch_node(self, name, body, **kwargs):
            calls.append(("patch", name, kwargs["_content_type"]))
            return Answer({})
    monkeypatch.setattr(kc.k8s, "CoreV1Api", Core)

    class OldClient:  # kubernetes < 35: no param_serialize
        class configuration:
            host = "https://192.0.2.1:6443"
    api = kc.NodeAPI(OldClient())
    assert api.direct is False
    assert api.list_nodes() == [{"metadata": {"name": "n1"}}]
    api.patch_node("n1", {})
    assert calls == [("list", {"limit": 500, "_preload_content": False}),
                     ("patch", "n1", kc.STRATEGIC_MERGE_PATCH)]


def _client(host="https://192.0.2.1:6443", proxy=None):
    cfg = kc.k8s.Configuration()
    cfg.host = host
    cfg.api_key = {"BearerToken": "t0ken"}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    if proxy:
        cfg.proxy = proxy
    return kc.k8s.ApiClient(configuration=cfg)


class FakePool:
    """Stands in for the urllib3 connection pool: records each request, answers 200 with a node."""

    def __init__(self, status=200, body=b'{"metadata": {"name": "n1"}}', headers=None):
        self.sent = []
        self.status = status
        self.body = body
        self.headers = headers or {}

    def request(self, method, url, body=None, headers=None, **kwargs):
        self.sent.append((method, url, headers, body, kwargs))
        pool = self

        class Response:
            status = pool.status
            reason = "OK" if pool.status == 200 else "Too Many Requests"
            headers = pool.headers
            data = pool.body
        return Response()


def test_a_write_goes_straight_on_the_connection_pool_of_the_api_server():
    # a host with a path (an API behind a proxying front end) keeps its path in the request target
    api = kc.NodeAPI(_client("https://192.0.2.1:6443/k8s/clusters/c-1"))
    pool, origin = api._write_pool
    assert origin == "https://192.0.2.1:6443"
    assert pool is api.api_client.rest_client.pool_manager.connection_from_url("https://192.0.2.1:6443")
    fake = FakePool()
    api._write_pool = (fake, origin)
    body = {"metadata": {"labels": {"x": "1", "gone": None}}}
    assert api.patch_node("a b", body) is None
    ((method, url, headers, sent, kwargs),) = fake.sent
    assert (method, url) == ("PATCH", "/k8s/clusters/c-1/api/v1/nodes/a%20b")
    assert headers["Content-Type"] == kc.STRATEGIC_MERGE_PATCH and headers["authorization"] == "Bearer t0ken"
    assert json.loads(sent) == body
    assert kwargs["preload_content"] is False
    assert api.counts == {"patch": 1}


def test_a_write_on_the_pool_retries_429_after_retry_after():
    slept = []
    api = kc.NodeAPI(_client(), sleep=slept.append)
    throttled = FakePool(status=429, body=b'{"kind": "Status", "message": "slow down"}', headers={"Retry-After": "3"})
    api._write_pool = (throttled, "https://192.0.2.1:6443")
    with pytest.raises(kc.K8sError, match=r"patching node n1 failed after 6 attempts: 429 Too Many Requests: slow down"):
        api.patch_node("n1", {"metadata": {"labels": {"x": "1"}}})
    assert slept == [3.0] * 5 and api.counts == {"patch": 6}


def test_behind_a_proxy_writes_take_the_rest_layer():
    assert kc.write_pool(_client(proxy="http://192.0.2.9:3128")) is None
    assert kc.NodeAPI(_client(proxy="http://192.0.2.9:3128"))._write_pool is None


def test_counts_stay_exact_when_threads_send_at_once():
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        api = kc.NodeAPI(_client())

        class Done:
            data = b"{}"

        def send(_index):
            for _i in range(2000):
                api._call("patch", "patching", lambda: Done, decode=False)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(send, range(8)))
    finally:
        sys.setswitchinterval(interval)
    assert api.counts == {"patch": 16000}


def test_pool_size_at_least_the_number_of_workers(tmp_path):
    client = kc.get_api_client({"host": "https://192.0.2.1:6443", "api_key": "x"}, pool_size=64)
    assert client.configuration.connection_pool_maxsize == 64
    assert client.rest_client.pool_manager.connection_pool_kw["maxsize"] == 64
    # never made smaller than the client's own default
    default = kc.k8s.Configuration().connection_pool_maxsize
    client = kc.get_api_client({"host": "https://192.0.2.1:6443", "api_key": "x"}, pool_size=1)
    assert client.configuration.connection_pool_maxsize == default


def test_credential_hook_runs_at_most_once_per_interval_and_stays_installed():
    now = [100]
    runs = []
    cfg = kc.k8s.Configuration()

    def loader_hook(configuration):
        runs.append(now[0])
        configuration.refresh_api_key_hook = loader_hook  # as the kubeconfig loader does on each run
    hook = kc._ThrottledHook(loader_hook, interval=5.0, clock=lambda: now[0])
    cfg.refresh_api_key_hook = hook
    for step in (0, 1, 4, 1, 1, 5):
        now[0] += step
        cfg.refresh_api_key_hook(cfg)
        assert cfg.refresh_api_key_hook is hook
    assert runs == [100, 105, 112]


def test_kubeconfig_token_hook_is_throttled(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://192.0.2.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "abc"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    client = kc.get_api_client({"kubeconfig": str(path)})
    cfg = client.configuration
    assert isinstance(cfg.refresh_api_key_hook, kc._ThrottledHook)
    assert cfg.get_api_key_with_prefix("BearerToken", alias="authorization") == "Bearer abc"
    assert isinstance(cfg.refresh_api_key_hook, kc._ThrottledHook)
