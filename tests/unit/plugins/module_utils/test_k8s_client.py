"""Unit tests of NodeAPI's two ways to reach the API (no server)."""
import json

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
