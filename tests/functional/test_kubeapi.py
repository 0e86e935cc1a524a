"""The Kubernetes API test server, driven by the unmodified `kubernetes` client and `kubectl`.

Every test that does not use `kube_server` states real kube-apiserver behaviour and also runs
against a real cluster (`pytest --kubeconfig PATH`).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client, dynamic, watch  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
NOWHERE = {"kubegpu.io/test-no-such-node": "true"}  # a nodeSelector no node matches


def status_of(exc):
    body = json.loads(exc.body)
    assert body["kind"] == "Status" and body["status"] == "Failure", body
    return body


def expect_error(code, func, *args, **kwargs):
    with pytest.raises(ApiException) as info:
        func(*args, **kwargs)
    assert info.value.status == code, info.value.body
    body = status_of(info.value)
    assert body["code"] == code
    return body


def daemonset(name, node_selector=None, tolerations=None, env=None, volumes=None, image=None):
    ctr = {"name": "main", "image": image or "registry.example/app:1.0"}
    if env:
        ctr["env"] = env
    spec = {"containers": [ctr], "nodeSelector": node_selector if node_selector is not None else dict(NOWHERE)}
    if tolerations:
        spec["tolerations"] = tolerations
    if volumes:
        spec["volumes"] = volumes
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


# --------------------------------------------------------------------------- discovery
def test_discovery_resolves_every_kind_for_the_dynamic_client(kube):
    dyn = dynamic.DynamicClient(kube.api_client())
    for api_version, kind in (
            ("v1", "Node"), ("v1", "Namespace"), ("v1", "ConfigMap"), ("v1", "Secret"),
            ("v1", "ServiceAccount"), ("v1", "Pod"), ("v1", "ResourceQuota"),
            ("apps/v1", "DaemonSet"), ("apps/v1", "Deployment"), ("batch/v1", "Job"),
            ("node.k8s.io/v1", "RuntimeClass"), ("rbac.authorization.k8s.io/v1", "ClusterRole"),
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ("rbac.authorization.k8s.io/v1", "Role"),
            ("rbac.authorization.k8s.io/v1", "RoleBinding"), ("scheduling.k8s.io/v1", "PriorityClass"),
            ("policy/v1", "PodDisruptionBudget")):
        res = dyn.resources.get(api_version=api_version, kind=kind)
        assert res.kind == kind
    nodes = dyn.resources.get(api_version="v1", kind="Node")
    node = kube.node()
    assert nodes.get(name=node).metadata.name == node
    patched = nodes.patch(name=node, body={"metadata": {"labels": {"kubegpu.io/dynamic": "yes"}}},
                          content_type="application/merge-patch+json")
    assert patched.metadata.labels["kubegpu.io/dynamic"] == "yes"
    assert node in [n.metadata.name for n in nodes.get(label_selector="kubegpu.io/dynamic=yes").items]
    pods = dyn.resources.get(api_version="v1", kind="Pod")
    assert {"log", "eviction", "status"} <= set(pods.subresources)
    assert dyn.resources.get(api_version="v1", kind="Node").namespaced is False
    assert dyn.resources.get(api_version="apps/v1", kind="DaemonSet").namespaced is True
    version = client.VersionApi(kube.api_client()).get_code()
    assert version.major == "1" and int(version.minor.rstrip("+")) >= 20
    names = {r.name for r in client.CoreV1Api(kube.api_client()).get_api_resources().resources}
    assert {"nodes", "nodes/status", "pods/log", "pods/eviction"} <= names


# --------------------------------------------------------------------------- reads, selectors
def test_label_selectors(kube):
    core = kube.core()
    ns = kube.namespace()
    for name, labels in (("a", {"tier": "gpu", "model": "h100"}), ("b", {"tier": "gpu", "model": "t4"}),
                         ("c", {"tier": "cpu"}), ("d", {})):
        core.create_namespaced_config_map(ns, {"metadata": {"name": name, "labels": labels}})

    def names(selector):
        return sorted(cm.metadata.name for cm in core.list_namespaced_config_map(ns, label_selector=selector).items
                      if cm.metadata.name in "abcd")

    assert names("tier=gpu") == ["a", "b"]
    assert names("tier==gpu,model=t4") == ["b"]
    assert names("tier!=gpu") == ["c", "d"]
    assert names("model in (h100, t4)") == ["a", "b"]
    assert names("model notin (h100)") == ["b", "c", "d"]
    assert names("model") == ["a", "b"]
    assert names("!model") == ["c", "d"]
    expect_error(400, core.list_namespaced_config_map, ns, label_selector="tier in gpu")


def test_field_selectors_and_list_resource_version(kube):
    core = kube.core()
    ns = kube.namespace()
    core.create_namespaced_config_map(ns, {"metadata": {"name": "one"}})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "two"}})
    listed = core.list_config_map_for_all_namespaces(field_selector="metadata.name=one,metadata.namespace=%s" % ns)
    assert [cm.metadata.name for cm in listed.items] == ["one"]
    assert int(listed.metadata.resource_version) >= int(listed.items[0].metadata.resource_version)
    listed = core.list_namespaced_config_map(ns, field_selector="metadata.name!=one")
    assert "one" not in [cm.metadata.name for cm in listed.items]
    node = kube.node()
    assert [n.metadata.name for n in core.list_node(field_selector="metadata.name=%s" % node).items] == [node]
    assert core.list_namespaced_pod(ns, field_selector="spec.nodeName=%s" % node).items == []
    expect_error(400, core.list_namespaced_config_map, ns, field_selector="data.x=1")


# --------------------------------------------------------------------------- writes
def test_resource_version_conflicts(kube):
    core = kube.core()
    ns = kube.namespace()
    first = core.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}, "data": {"k": "1"}})
    stale = first.metadata.resource_version
    second = core.patch_namespaced_config_map("cm", ns, {"data": {"k": "2"}})
    assert int(second.metadata.resource_version) > int(stale)
    body = {"metadata": {"name": "cm", "resourceVersion": stale}, "data": {"k": "3"}}
    err = expect_error(409, core.replace_namespaced_config_map, "cm", ns, body)
    assert err["reason"] == "Conflict" and "the object has been modified" in err["message"]
    err = expect_error(409, core.patch_namespaced_config_map, "cm", ns,
                       {"metadata": {"resourceVersion": stale}, "data": {"k": "3"}})
    assert err["reason"] == "Conflict"
    # current resourceVersion: accepted; no resourceVersion: unconditional update
    body["metadata"]["resourceVersion"] = second.metadata.resource_version
    assert core.replace_namespaced_config_map("cm", ns, body).data == {"k": "3"}
    assert core.replace_namespaced_config_map("cm", ns, {"metadata": {"name": "cm"}, "data": {"k": "4"}}).data == {"k": "4"}
    err = expect_error(409, core.create_namespaced_config_map, ns, {"metadata": {"name": "cm"}})
    assert err["reason"] == "AlreadyExists"
    assert expect_error(404, core.read_namespaced_config_map, "nope", ns)["reason"] == "NotFound"


def test_uid_timestamps_generate_name_and_delete(kube):
    core = kube.core()
    ns = kube.namespace()
    made = core.create_namespaced_config_map(ns, {"metadata": {"generateName": "gen-"}})
    assert made.metadata.name.startswith("gen-") and len(made.metadata.name) == len("gen-") + 5
    assert made.metadata.uid and made.metadata.creation_timestamp and made.metadata.resource_version
    core.delete_namespaced_config_map(made.metadata.name, ns)
    expect_error(404, core.read_namespaced_config_map, made.metadata.name, ns)
    expect_error(404, core.delete_namespaced_config_map, made.metadata.name, ns)
    expect_error(404, core.create_namespaced_config_map, kube.unique("no-such-ns"), {"metadata": {"name": "x"}})


def test_generation_follows_spec_changes_only(kube):
    apps = kube.apps()
    ns = kube.namespace()
    made = apps.create_namespaced_daemon_set(ns, daemonset("gen"))
    assert made.metadata.generation == 1
    labelled = apps.patch_namespaced_daemon_set("gen", ns, {"metadata": {"labels": {"x": "y"}}})
    assert labelled.metadata.generation == 1
    changed = apps.patch_namespaced_daemon_set(
        "gen", ns, {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "registry.example/app:2.0"}]}}}})
    assert changed.metadata.generation == 2
    assert changed.spec.template.spec.containers[0].image == "registry.example/app:2.0"
    err = expect_error(422, apps.patch_namespaced_daemon_set, "gen", ns,
                       {"spec": {"selector": {"matchLabels": {"app": "other"}}}})
    assert err["reason"] == "Invalid"


def test_strategic_merge_patch(kube):
    apps = kube.apps()
    core = kube.core()
    ns = kube.namespace()
    env = [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    body = daemonset("smp", tolerations=[GPU_TOLERATION, {"key": "CriticalAddonsOnly", "operator": "Exists"}], env=env)
    body["metadata"]["labels"] = {"keep": "1", "drop": "1"}
    body["spec"]["template"]["spec"]["containers"].append({"name": "side", "image": "registry.example/side:1"})
    apps.create_namespaced_daemon_set(ns, body)
    patched = apps.patch_namespaced_daemon_set("smp", ns, {
        "metadata": {"labels": {"drop": None, "new": "1"}},
        "spec": {"template": {"spec": {
            "containers": [{"name": "main", "env": [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}]}],
            "tolerations": [{"key": "only", "operator": "Exists"}]}}}})
    assert patched.metadata.labels == {"keep": "1", "new": "1"}
    containers = {c.name: c for c in patched.spec.template.spec.containers}
    assert set(containers) == {"main", "side"}  # merged by name
    assert containers["main"].image == "registry.example/app:1.0"
    assert [(e.name, e.value) for e in containers["main"].env] == [("A", "1"), ("B", "20"), ("C", "3")]
    assert [t.key for t in patched.spec.template.spec.tolerations] == ["only"]  # atomic list
    deleted = apps.patch_namespaced_daemon_set("smp", ns, {"spec": {"template": {"spec": {
        "containers": [{"name": "side", "$patch": "delete"}]}}}})
    assert [c.name for c in deleted.spec.template.spec.containers] == ["main"]

    other = {"key": "example.com/maintenance", "value": "", "effect": "PreferNoSchedule"}
    node = kube.node(taints=[other])
    tainted = core.patch_node(node, {"spec": {"taints": [GPU_TAINT]}}, _content_type=SMP)
    assert [(t.key, t.value, t.effect) for t in tainted.spec.taints
            if not t.key.startswith("node.kubernetes.io/")] == [("nvidia.com/gpu", "present", "NoSchedule")]


def test_merge_patch_and_json_patch(kube):
    core = kube.core()
    ns = kube.namespace()
    core.create_namespaced_config_map(ns, {"metadata": {"name": "p", "labels": {"a": "1", "b": "2"}},
                                           "data": {"x": "1"}})
    merged = core.patch_namespaced_config_map("p", ns, {"metadata": {"labels": {"a": None, "c": "3"}}},
                                              _content_type=MERGE)
    assert merged.metadata.labels == {"b": "2", "c": "3"}
    patched = core.patch_namespaced_config_map("p", ns, [
        {"op": "add", "path": "/metadata/labels/nvidia.com~1gpu.present", "value": "true"},
        {"op": "replace", "path": "/data/x", "value": "2"},
        {"op": "remove", "path": "/metadata/labels/b"},
        {"op": "test", "path": "/data/x", "value": "2"}], _content_type=JSON_PATCH)
    assert patched.metadata.labels == {"c": "3", "nvidia.com/gpu.present": "true"}
    assert patched.data == {"x": "2"}
    expect_error(422, core.patch_namespaced_config_map, "p", ns,
                 [{"op": "test", "path": "/data/x", "value": "9"}], _content_type=JSON_PATCH)
    expect_error(422, core.patch_namespaced_config_map, "p", ns,
                 [{"op": "remove", "path": "/metadata/labels/absent"}], _content_type=JSON_PATCH)
    assert core.read_namespaced_config_map("p", ns).data == {"x": "2"}


def test_dry_run_validates_and_stores_nothing(kube):
    core = kube.core()
    ns = kube.namespace()
    before = core.create_namespaced_config_map(ns, {"metadata": {"name": "dry"}, "data": {"v": "1"}})
    made = core.create_namespaced_config_map(ns, {"metadata": {"name": "dry-new"}}, dry_run="All")
    assert made.metadata.name == "dry-new"
    expect_error(404, core.read_namespaced_config_map, "dry-new", ns)
    patched = core.patch_namespaced_config_map("dry", ns, {"data": {"v": "2"}}, dry_run="All")
    assert patched.data == {"v": "2"}
    after = core.read_namespaced_config_map("dry", ns)
    assert after.data == {"v": "1"} and after.metadata.resource_version == before.metadata.resource_version
    expect_error(422, core.patch_namespaced_config_map, "dry", ns, {"metadata": {"labels": {"bad key": "x"}}},
                 dry_run="All")
    core.delete_namespaced_config_map("dry", ns, dry_run="All")
    assert core.read_namespaced_config_map("dry", ns).data == {"v": "1"}


@pytest.mark.parametrize("labels", [
    {"bad key": "x"},
    {"-starts-with-dash": "x"},
    {"n" * 64: "x"},
    {"UPPER.example.com/name": "x"},
    {"p" * 254 + "/name": "x"},
    {"ok": "v" * 64},
    {"ok": "bad value"},
    {"ok": "-x"},
])
def test_invalid_labels_are_422(kube, labels):
    core = kube.core()
    node = kube.node()
    err = expect_error(422, core.patch_node, node, {"metadata": {"labels": labels}})
    assert err["reason"] == "Invalid" and "metadata.labels" in err["message"]
    assert not set(labels) & set(core.read_node(node).metadata.labels)


def test_valid_label_edge_cases_are_accepted(kube):
    core = kube.core()
    node = kube.node()
    labels = {"n" * 63: "v" * 63, "example.com/a_b.c-d": "", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert set(labels.items()) <= set(core.patch_node(node, {"metadata": {"labels": labels}}).metadata.labels.items())


@pytest.mark.parametrize("taint, field", [
    ({"key": "nvidia.com/gpu", "value": "present", "effect": "Sometimes"}, "effect"),
    ({"key": "nvidia.com/gpu", "value": "bad value", "effect": "NoSchedule"}, "value"),
    ({"key": "bad key", "effect": "NoSchedule"}, "key"),
])
def test_invalid_taints_are_422(kube, taint, field):
    node = kube.node()
    err = expect_error(422, kube.core().patch_node, node, {"spec": {"taints": [taint]}})
    assert "spec.taints[0].%s" % field in err["message"]


# --------------------------------------------------------------------------- auth
def test_wrong_token_is_401(kube):
    api = kube.api_client()
    api.configuration.api_key = {"authorization": "Bearer not-a-valid-token"}
    api.configuration.api_key_prefix = {}
    api.configuration.refresh_api_key_hook = None
    if "authorization" in api.default_headers:
        del api.default_headers["authorization"]
    expect_error(401, client.CoreV1Api(api).list_node)


def test_readonly_token_reads_but_cannot_write(kube, kube_server, tmp_path):
    node = kube.node()
    ro = client.CoreV1Api(kube.api_client(kube.readonly_kubeconfig(tmp_path)))
    assert node in [n.metadata.name for n in ro.list_node().items]
    assert ro.read_node(node).metadata.name == node
    err = expect_error(403, ro.patch_node, node, {"metadata": {"labels": {"a": "b"}}})
    assert err["reason"] == "Forbidden" and 'cannot patch resource "nodes"' in err["message"]
    expect_error(403, ro.create_namespace, {"metadata": {"name": "ro-ns"}})
    req = urllib.request.Request(kube_server.url + "/api/v1/nodes")
    ctx = __import__("ssl").create_default_context(cafile=kube_server.ca_path)
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, context=ctx, timeout=10)
    assert info.value.code == 401


# --------------------------------------------------------------------------- faults
def test_injected_429_500_and_delay(kube, kube_server):
    core = kube.core()
    node = kube.node()
    kube_server.reset_counts()
    kube_server.inject(method="PATCH", path_regex="/api/v1/nodes/.*", status=429, retry_after=3, times=2)
    for _attempt in range(2):
        with pytest.raises(ApiException) as info:
            core.patch_node(node, {"metadata": {"labels": {"a": "b"}}})
        assert info.value.status == 429 and info.value.headers["Retry-After"] == "3"
        assert status_of(info.value)["reason"] == "TooManyRequests"
    assert core.patch_node(node, {"metadata": {"labels": {"a": "b"}}}).metadata.labels["a"] == "b"
    kube_server.inject(method="GET", path_regex="/api/v1/nodes$", status=500, times=1)
    assert expect_error(500, core.list_node)["reason"] == "InternalError"
    assert core.list_node().items
    assert kube_server.request_counts() == {"patch": 3, "list": 2}
    fault = kube_server.inject(method="GET", path_regex="/api/v1/nodes/", delay=0.3, times=1)
    start = time.monotonic()
    core.read_node(node)
    assert time.monotonic() - start >= 0.3 and fault.fired == 1
    kube_server.reset_counts()
    assert kube_server.request_counts() == {}


def test_fault_and_request_endpoints_over_http(kube, kube_server):
    core = kube.core()
    ctx = __import__("ssl").create_default_context(cafile=kube_server.ca_path)

    def call(method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(kube_server.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return json.loads(resp.read())

    node = kube.node()
    call("POST", "/_test/requests", {"reset": True})
    # PATCH: urllib3 itself retries idempotent requests (GET) answered 429 with a Retry-After
    call("POST", "/_test/faults", {"method": "PATCH", "path_regex": "/api/v1/nodes/", "status": 429,
                                   "retry_after": 1, "times": 1})
    expect_error(429, core.patch_node, node, {"metadata": {"labels": {"a": "b"}}})
    core.patch_node(node, {"metadata": {"labels": {"a": "b"}}})
    assert call("GET", "/_test/requests")["counts"] == {"patch": 2}
    assert call("GET", "/_test/faults")["faults"][0]["fired"] == 1
    call("DELETE", "/_test/faults")
    assert call("GET", "/_test/faults")["faults"] == []


# --------------------------------------------------------------------------- kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_get_label_taint_cordon(kube):
    node = kube.node(labels={"kubegpu.io/test": "kubectl"})
    assert node in kube.kubectl("get", "nodes", "-l", "kubegpu.io/test=kubectl", "-o", "name", check=True).stdout
    header, row = kube.kubectl("get", "nodes", node, check=True).stdout.splitlines()[:2]
    assert header.split()[:5] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"] and row.split()[0] == node
    kube.kubectl("label", "node", node, "nvidia.com/gpu.present=true", check=True)
    refused = kube.kubectl("label", "node", node, "nvidia.com/gpu.present=false")
    assert refused.returncode != 0 and "--overwrite" in refused.stderr
    kube.kubectl("label", "node", node, "nvidia.com/gpu.present=false", "--overwrite", check=True)
    invalid = kube.kubectl("label", "node", node, "nvidia.com/gpu.count=not valid")
    assert invalid.returncode != 0 and "invalid" in invalid.stderr.lower()
    kube.kubectl("taint", "node", node, "nvidia.com/gpu=present:NoSchedule", check=True)
    kube.kubectl("cordon", node, check=True)
    got = json.loads(kube.kubectl("get", "node", node, "-o", "json", check=True).stdout)
    assert got["metadata"]["labels"]["nvidia.com/gpu.present"] == "false"
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in got["spec"]["taints"]
    assert got["spec"]["unschedulable"] is True
    kube.kubectl("taint", "node", node, "nvidia.com/gpu:NoSchedule-", check=True)
    kube.kubectl("uncordon", node, check=True)
    kube.kubectl("label", "node", node, "nvidia.com/gpu.present-", check=True)
    node_obj = kube.core().read_node(node)
    assert "nvidia.com/gpu.present" not in node_obj.metadata.labels
    assert not [t for t in node_obj.spec.taints or [] if t.key == "nvidia.com/gpu"]
    assert not node_obj.spec.unschedulable


# --------------------------------------------------------------------------- watch
def test_watch_streams_changes(kube):
    core = kube.core()
    ns = kube.namespace()
    first = core.create_namespaced_config_map(ns, {"metadata": {"name": "w1"}})
    core.patch_namespaced_config_map("w1", ns, {"data": {"a": "1"}})
    core.delete_namespaced_config_map("w1", ns)
    seen = []
    for event in watch.Watch().stream(core.list_namespaced_config_map, ns, timeout_seconds=2,
                                      resource_version=first.metadata.resource_version):
        if event["object"].metadata.name == "w1":
            seen.append(event["type"])
        if len(seen) == 2:
            break
    assert seen == ["MODIFIED", "DELETED"]


# --------------------------------------------------------------------------- never answering, plain HTTP, TLS
def test_a_hang_fault_never_answers_and_other_requests_still_do(kube, kube_server):
    import urllib3

    core = kube.core()
    fault = kube_server.inject(method="GET", path_regex="/api/v1/nodes$", hang=True, times=0)
    http = urllib3.PoolManager(ca_certs=kube_server.ca_path, retries=False)
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        http.request("GET", kube_server.url + "/api/v1/nodes", headers={"Authorization": "Bearer " + kube_server.token},
                     timeout=urllib3.Timeout(connect=5, read=1))
    assert fault.fired == 1
    assert core.read_namespace("default", _request_timeout=5).metadata.name == "default"
    listed = [r for r in kube_server.requests() if r["path"] == "/api/v1/nodes"]
    assert [(r["verb"], r["code"]) for r in listed] == [("list", None)]  # counted, never answered
    kube_server.clear_faults()
    assert core.list_node(_request_timeout=5).kind == "NodeList"


def test_a_black_hole_accepts_connections_and_never_answers(kube_server):
    import socket

    import urllib3
    from kubeapi import BlackHole

    with BlackHole() as hole:
        with socket.create_connection(("127.0.0.1", hole.port), timeout=5):
            pass  # the kernel accepts: a client connects, then waits for an answer
        http = urllib3.PoolManager(ca_certs=kube_server.ca_path, retries=False)
        with pytest.raises(urllib3.exceptions.ReadTimeoutError):
            http.request("GET", hole.url + "/api/v1/nodes", timeout=urllib3.Timeout(connect=1, read=1))


def test_plain_http_to_the_tls_port_is_answered_400_as_go_does(kube_server):
    import urllib3

    http = urllib3.PoolManager(retries=False)
    answer = http.request("GET", kube_server.url.replace("https://", "http://") + "/api/v1/nodes")
    assert answer.status == 400
    assert answer.data == b"Client sent an HTTP request to an HTTPS server.\n"


def test_client_certificates_authenticate_as_their_common_name_and_organizations(kube, kube_server):
    import urllib3

    def client(cert_key):
        cert, key = cert_key
        return urllib3.PoolManager(ca_certs=kube_server.ca_path, cert_file=cert, key_file=key, retries=False)

    body = json.dumps({"metadata": {"name": "from-a-cert"}})
    answer = client(kube_server.client_certificate("alice", ["system:masters"])).request(
        "POST", kube_server.url + "/api/v1/namespaces", body=body, headers={"Content-Type": "application/json"})
    assert answer.status == 201
    assert kube_server.requests()[-1]["user"] == {"name": "alice", "admin": True, "groups": ["system:masters"]}
    answer = client(kube_server.client_certificate("bob", [])).request(
        "POST", kube_server.url + "/api/v1/namespaces", body=body, headers={"Content-Type": "application/json"})
    assert answer.status == 403
    assert 'User "bob" cannot create resource "namespaces"' in json.loads(answer.data)["message"]
    assert client(kube_server.client_certificate("bob", [])).request(
        "GET", kube_server.url + "/api/v1/nodes").status == 200
    # refused in the handshake (with TLS 1.3 the client may see the alert or only the closed connection)
    with pytest.raises((urllib3.exceptions.SSLError, urllib3.exceptions.ProtocolError)):
        client(kube_server.client_certificate("eve", ["system:masters"], trusted=False)).request(
            "GET", kube_server.url + "/api/v1/nodes")
    assert "eve" not in [(r["user"] or {}).get("name") for r in kube_server.requests()]
    # without a certificate: the bearer token, as before
    assert kube.core().read_namespace("from-a-cert").metadata.name == "from-a-cert"


def test_impersonation_acts_as_the_user_and_groups_named(kube, kube_server, tmp_path):
    import urllib3

    http = urllib3.PoolManager(ca_certs=kube_server.ca_path, retries=False)

    def call(token, user=None, groups=(), method="POST"):
        headers = urllib3.HTTPHeaderDict({"Authorization": "Bearer " + token, "Content-Type": "application/json"})
        if user is not None:
            headers.add("Impersonate-User", user)
        for group in groups:
            headers.add("Impersonate-Group", group)
        body = json.dumps({"metadata": {"name": "ns-%d" % len(kube_server.requests())}}) if method == "POST" else None
        return http.request(method, kube_server.url + "/api/v1/namespaces", body=body, headers=headers)

    answer = call(kube_server.token, "alice", ["team-a", "team-b"])
    assert answer.status == 403
    assert 'User "alice" cannot create resource "namespaces"' in json.loads(answer.data)["message"]
    assert kube_server.requests()[-1]["user"] == {"name": "alice", "admin": False, "groups": ["team-a", "team-b"],
                                                  "impersonated_by": "kubeapi-admin"}
    assert call(kube_server.token, "alice", ["system:masters"]).status == 201
    assert call(kube_server.token, "alice", method="GET").status == 200
    answer = call(kube_server.readonly_token, "alice")
    assert answer.status == 403 and "cannot impersonate" in json.loads(answer.data)["message"]
    assert call(kube_server.token, None, ["team-a"]).status == 400


def test_a_connect_proxy_tunnels_to_the_server_and_records_what_it_was_asked(kube, kube_server):
    from kubeapi.proxy import ConnectProxy

    with ConnectProxy(credentials="user:pa55") as proxy:
        api = kube.api_client()
        api.configuration.proxy = proxy.url
        api.configuration.retries = False
        from kubernetes import client as k8s_client

        refused = k8s_client.ApiClient(api.configuration)
        with pytest.raises(Exception):
            client.CoreV1Api(refused).list_node(_request_timeout=5)
        import urllib3

        api.configuration.proxy_headers = urllib3.util.make_headers(proxy_basic_auth="user:pa55")
        assert client.CoreV1Api(k8s_client.ApiClient(api.configuration)).list_node(_request_timeout=5).kind == "NodeList"
    assert [r["code"] for r in proxy.requests] == [407, 200]
    assert proxy.requests[-1]["target"] == "127.0.0.1:%d" % kube_server.port


# --------------------------------------------------------------------------- the command line
def test_a_silent_connection_does_not_block_other_clients(kube, kube_server):
    import socket

    with socket.create_connection(("127.0.0.1", kube_server.port), timeout=5):
        assert kube.core().read_namespace("default", _request_timeout=5).metadata.name == "default"


def test_command_line_writes_kubeconfig_and_port_file_and_stops_on_sigterm(tmp_path):
    support = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support")
    kubeconfig, port_file, pid_file = tmp_path / "kc", tmp_path / "port", tmp_path / "pid"
    proc = subprocess.Popen([sys.executable, os.path.join(support, "kubeapi", "__main__.py"), "--port", "0",
                             "--tls", "--kubeconfig-out", str(kubeconfig), "--port-file", str(port_file),
                             "--pid-file", str(pid_file), "--token", "secret-token"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert port_file.exists(), proc.stdout.read() if proc.poll() is not None else "no port file"
        port = int(port_file.read_text())
        assert int(pid_file.read_text()) == proc.pid
        api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        assert api.configuration.host == "https://127.0.0.1:%d" % port
        assert client.CoreV1Api(api).read_namespace("default").metadata.name == "default"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert not port_file.exists() and not pid_file.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
