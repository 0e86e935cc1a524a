"""k8s_gpu_label against a Kubernetes API (the test server, or a real cluster with --kubeconfig).

Every run goes through `ansible localhost -m kubegpu.nvidia.k8s_gpu_label` and the real `kubernetes`
client over HTTP. Nodes are created per test with unique names and deleted afterwards. Tests that inject
faults or count server-side requests skip on a real cluster.
"""
import copy
import json
import threading
import time
import uuid

import pytest

import ansible_run
from ansible_collections.kubegpu.nvidia.plugins.modules.k8s_gpu_label import labels_from_facts

kubernetes = pytest.importorskip("kubernetes")

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def _device(index, name, memory, cc, bus, mig=None):
    return {"index": index, "name": name, "product": name.replace(" ", "-"), "uuid": "GPU-%08d-0000-4000-8000-000000000000" % index,
            "memory_mib": memory, "pci_bus_id": bus, "compute_capability": cc, "family": None,
            "mig": mig or {"current": None, "pending": None}}


def _facts(devices):
    return {"present": True, "count": len(devices), "source": "nvml", "driver_version": "535.183.01",
            "cuda_driver_version": "12.2", "devices": devices, "machine": "KubeGPU Lab Node"}


# The nvidia_gpu facts of the lab profiles (tests/support/fakenvml/profiles).
H100X8 = _facts([_device(i, "NVIDIA H100 80GB HBM3", 81559, "9.0", "00000000:%02X:00.0" % (0x18 + i),
                         {"current": 0, "pending": 0}) for i in range(8)])
A100X4_MIG = _facts([_device(i, "NVIDIA A100-SXM4-40GB", 40960, "8.0", "00000000:%02X:00.0" % (0x07 + i),
                             {"current": 1, "pending": 1}) for i in range(4)])
T4X1 = _facts([_device(0, "Tesla T4", 15360, "7.5", "00000000:00:1E.0")])
for _f in (H100X8, A100X4_MIG, T4X1):
    for _d in _f["devices"]:
        _d["family"] = {"9.0": "hopper", "8.0": "ampere", "7.5": "turing"}[_d["compute_capability"]]
A100X4_MIG_OFF = copy.deepcopy(A100X4_MIG)
for _d in A100X4_MIG_OFF["devices"]:
    _d["mig"] = {"current": 0, "pending": 0}


@pytest.fixture
def core(kube):
    return kubernetes.client.CoreV1Api(kube.api_client())


@pytest.fixture
def server(kube):
    if not kube.is_test_server:
        pytest.skip("needs the Kubernetes API test server (fault injection, request counts)")
    return kube.server


@pytest.fixture
def make_nodes(core):
    """Create nodes with unique names; delete them afterwards."""
    created = []

    def _make(count=1, labels=None, taints=None, addresses=None):
        names = []
        for _i in range(count):
            name = "kubegpu-test-%s" % uuid.uuid4().hex[:10]
            body = {"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": dict(labels or {}, **{"kubernetes.io/hostname": name})},
                    "spec": {"taints": list(taints)} if taints else {}}
            core.create_node(body)
            created.append(name)
            if addresses:
                core.patch_node_status(name, {"status": {"addresses": addresses}},
                                       _content_type="application/strategic-merge-patch+json")
            names.append(name)
        return names
    yield _make
    for name in created:
        try:
            core.delete_node(name)
        except kubernetes.client.exceptions.ApiException:
            pass


def read(core, name):
    node = core.read_node(name)
    labels = node.metadata.labels or {}
    taints = [{"key": t.key, "value": t.value or "", "effect": t.effect} for t in ((node.spec and node.spec.taints) or [])]
    return labels, taints


def run_module(kube, args, check=False, diff=False, env=None):
    """Run the module through `ansible` and return its result dict."""
    result = ansible_run.run_module("kubegpu.nvidia.k8s_gpu_label", args, check=check, diff=diff, env=env,
                                    kubeconfig=kube.kubeconfig, timeout=300).module_result()
    assert "Traceback" not in result.get("msg", ""), json.dumps(result, indent=1)
    return result


def server_counts(server):
    return dict((verb.lower(), n) for verb, n in server.request_counts().items() if n)


# --- labels from facts ----------------------------------------------------------------------------------

@pytest.mark.parametrize("facts, product, accelerator", [
    (H100X8, "NVIDIA-H100-80GB-HBM3", "nvidia-h100-80gb-hbm3"),
    (A100X4_MIG, None, "nvidia-a100-sxm4-40gb"),
    (T4X1, "Tesla-T4", "nvidia-tesla-t4"),
], ids=["h100x8", "a100x4-mig", "t4x1"])
def test_labels_and_taint_from_lab_profile_facts(kube, core, make_nodes, facts, product, accelerator):
    (name,) = make_nodes(labels={"team": "ml"})
    result = run_module(kube, {"node": name, "facts": facts, "taints": [GPU_TAINT]})
    assert result["changed"] is True
    assert result["api_requests"] == {"list": 1, "patch": 1}
    labels, taints = read(core, name)
    expected = labels_from_facts(facts)
    assert dict((k, labels.get(k)) for k in expected) == expected
    assert labels["accelerator"] == accelerator
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["nvidia.com/gpu.count"] == str(facts["count"])
    if product:
        assert labels["nvidia.com/gpu.product"] == product
    assert labels["team"] == "ml"
    assert taints == [GPU_TAINT]
    assert result["nodes"][0]["added"] == expected
    assert result["nodes"][0]["taints_added"] == [GPU_TAINT]


def test_batch_then_rerun_makes_one_list_and_no_writes(kube, core, server, make_nodes):
    names = make_nodes(3)
    nodes = [{"name": n, "facts": f} for n, f in zip(names, (H100X8, A100X4_MIG, T4X1))]
    server.reset_counts()
    first = run_module(kube, {"nodes": nodes, "taints": [GPU_TAINT], "remove_stale": True})
    assert first["changed"] is True
    assert first["api_requests"] == {"list": 1, "patch": 3}
    assert server_counts(server) == {"list": 1, "patch": 3}

    server.reset_counts()
    second = run_module(kube, {"nodes": nodes, "taints": [GPU_TAINT], "remove_stale": True})
    assert second["changed"] is False
    assert [n["changed"] for n in second["nodes"]] == [False, False, False]
    assert second["api_requests"] == {"list": 1}
    assert server_counts(server) == {"list": 1}


def test_remove_stale_after_mig_is_turned_off(kube, core, make_nodes):
    (name,) = make_nodes(labels={"team": "ml", "feature.node.kubernetes.io/pci-10de.present": "true",
                                 "nvidia.com/device-plugin.config": "a100-mig", "nvidia.com/gfd.timestamp": "1"})
    run_module(kube, {"node": name, "facts": A100X4_MIG, "mig_strategy": "single"})
    with_mig = labels_from_facts(A100X4_MIG, mig_strategy="single")
    without_mig = labels_from_facts(A100X4_MIG_OFF)
    stale = sorted(k for k in with_mig if k not in without_mig)
    assert "nvidia.com/mig.strategy" in stale

    kept = run_module(kube, {"node": name, "facts": A100X4_MIG_OFF})
    assert kept["nodes"][0]["removed"] == []
    labels, _taints = read(core, name)
    assert all(k in labels for k in stale)

    result = run_module(kube, {"node": name, "facts": A100X4_MIG_OFF, "remove_stale": True})
    assert result["changed"] is True
    assert result["nodes"][0]["removed"] == stale
    labels, _taints = read(core, name)
    assert not any(k in labels for k in stale)
    assert dict((k, labels.get(k)) for k in without_mig) == without_mig
    assert labels["team"] == "ml"
    assert labels["feature.node.kubernetes.io/pci-10de.present"] == "true"
    # nvidia.com/ labels these rules never produce belong to others (k8s_device_plugin, GFD)
    assert labels["nvidia.com/device-plugin.config"] == "a100-mig"
    assert labels["nvidia.com/gfd.timestamp"] == "1"


def test_taints_merged_and_foreign_taint_kept(kube, core, make_nodes):
    foreign = {"key": "dedicated", "value": "ml", "effect": "NoExecute"}
    (name,) = make_nodes(taints=[foreign])
    result = run_module(kube, {"node": name, "taints": [GPU_TAINT, "example.com/maintenance:PreferNoSchedule"]})
    maintenance = {"key": "example.com/maintenance", "value": "", "effect": "PreferNoSchedule"}
    _labels, taints = read(core, name)
    assert taints == [foreign, GPU_TAINT, maintenance]
    assert result["nodes"][0]["taints"] == [foreign, GPU_TAINT, maintenance]

    result = run_module(kube, {"node": name, "taints": ["example.com/maintenance:PreferNoSchedule"], "state": "absent"})
    assert result["nodes"][0]["taints_removed"] == [maintenance]
    _labels, taints = read(core, name)
    assert taints == [foreign, GPU_TAINT]


def test_concurrent_taint_change_gets_409_and_is_retried(kube, core, server, make_nodes):
    (name,) = make_nodes()
    concurrent = {"key": "example.com/drain", "value": "", "effect": "NoSchedule"}
    # The module's PATCH is held back by the server; meanwhile another client adds a taint, so the
    # module's resourceVersion is stale: 409, re-read, retry with both taints.
    fault = server.inject(method="PATCH", path_regex="/api/v1/nodes/%s$" % name, delay=2.0, times=1)

    def other_client():
        deadline = time.monotonic() + 120
        while not fault.fired and time.monotonic() < deadline:
            time.sleep(0.05)
        fresh = core.read_node(name)
        body = {"metadata": {"resourceVersion": fresh.metadata.resource_version},
                "spec": {"taints": [concurrent]}}
        kubernetes.client.CoreV1Api(kube.api_client()).patch_node(
            name, body, _content_type="application/strategic-merge-patch+json")
    thread = threading.Thread(target=other_client)
    server.reset_counts()
    thread.start()
    result = run_module(kube, {"node": name, "taints": [GPU_TAINT]})
    thread.join()
    assert result["changed"] is True
    assert result["api_requests"] == {"list": 1, "patch": 2, "get": 1}
    _labels, taints = read(core, name)
    assert taints == [concurrent, GPU_TAINT]


def test_429_with_retry_after_is_retried(kube, core, server, make_nodes):
    (name,) = make_nodes()
    server.inject(method="PATCH", path_regex="/api/v1/nodes/%s$" % name, status=429, retry_after=1, times=2)
    result = run_module(kube, {"node": name, "labels": {"nvidia.com/gpu.present": "true"}})
    assert result["changed"] is True
    assert result["api_requests"] == {"list": 1, "patch": 3}
    labels, _taints = read(core, name)
    assert labels["nvidia.com/gpu.present"] == "true"


def test_a_429_on_the_listing_is_retried_and_counted_by_the_module(kube, core, server, make_nodes):
    # urllib3 would retry a GET answered 429 with Retry-After on its own, unseen by the module's counts
    # and its max_delay: the module's client leaves that to the module
    (name,) = make_nodes()
    server.reset_counts()
    server.inject(method="GET", path_regex="/api/v1/nodes$", status=429, retry_after=1, times=2)
    result = run_module(kube, {"node": name, "labels": {"nvidia.com/gpu.present": "true"}})
    assert result["changed"] is True
    assert result["api_requests"] == {"list": 3, "patch": 1}
    assert server.request_counts() == {"list": 3, "patch": 1}


def test_500_until_the_bound_fails_naming_the_node(kube, core, server, make_nodes):
    (name,) = make_nodes()
    server.inject(method="PATCH", path_regex="/api/v1/nodes/%s$" % name, status=500, times=10)
    result = run_module(kube, {"node": name, "labels": {"nvidia.com/gpu.present": "true"}, "retries": 2})
    assert result.get("failed") is True
    assert name in result["msg"]
    assert "500" in result["msg"] and "after 3 attempts" in result["msg"]
    assert result["api_requests"] == {"list": 1, "patch": 3}
    labels, _taints = read(core, name)
    assert "nvidia.com/gpu.present" not in labels


def test_read_only_token_gets_403(kube, core, server, make_nodes):
    token = getattr(server, "readonly_token", None)
    if not token:
        pytest.skip("the test server has no read-only token")
    (name,) = make_nodes()
    result = run_module(kube, {"node": name, "labels": {"nvidia.com/gpu.present": "true"}, "api_key": token})
    assert result.get("failed") is True
    assert "403" in result["msg"] and name in result["msg"]


def test_unknown_node_fails_naming_it_and_writes_nothing(kube, server, make_nodes):
    (name,) = make_nodes()
    server.reset_counts()
    result = run_module(kube, {"nodes": [{"name": name}, {"name": "no-such-gpu-host", "aliases": ["10.99.99.99"]}],
                               "labels": {"nvidia.com/gpu.present": "true"}})
    assert result.get("failed") is True
    assert "no-such-gpu-host" in result["msg"] and "no Kubernetes node" in result["msg"]
    assert server_counts(server) == {"list": 1}


def test_node_found_by_internal_ip(kube, core, make_nodes):
    (name,) = make_nodes(addresses=[{"type": "InternalIP", "address": "10.77.0.5"},
                                    {"type": "Hostname", "address": "gpu-box-5"}])
    result = run_module(kube, {"nodes": [{"name": "inventory-gpu-5", "aliases": ["10.77.0.5"], "facts": T4X1}]})
    assert result["nodes"][0]["name"] == name
    assert result["nodes"][0]["host"] == "inventory-gpu-5"
    labels, _taints = read(core, name)
    assert labels["accelerator"] == "nvidia-tesla-t4"


def test_invalid_label_value_is_refused_before_any_request(kube, core, server, make_nodes):
    (name,) = make_nodes()
    server.reset_counts()
    result = run_module(kube, {"node": name, "labels": {"example.com/zone": "-not valid-"}})
    assert result.get("failed") is True and result["error_kind"] == "input"
    assert result["msg"] == ('invalid labels, taints or facts, nothing was written: node %s: label "example.com/zone" '
                             'value "-not valid-": must be empty or consist of alphanumeric characters, \'-\', \'_\' '
                             "or '.', starting and ending with an alphanumeric character" % name)
    assert server.request_counts() == {}
    labels, _taints = read(core, name)
    assert "example.com/zone" not in labels


def test_a_write_the_server_rejects_names_the_node(kube, core, server, make_nodes):
    # what the module does not check itself (an admission webhook, a policy) the API answers 422
    (name,) = make_nodes()
    server.inject(method="PATCH", path_regex="/api/v1/nodes/%s$" % name, status=422, times=1,
                  message='Node "%s" is invalid: metadata.labels: denied by policy' % name)
    result = run_module(kube, {"node": name, "labels": {"example.com/zone": "eu"}})
    assert result.get("failed") is True and result["error_kind"] == "write"
    assert result["msg"].startswith("the API server rejected the labels or taints of node %s: patching node %s "
                                    "failed: 422" % (name, name))
    labels, _taints = read(core, name)
    assert "example.com/zone" not in labels


def test_check_mode_writes_nothing(kube, core, server, make_nodes):
    (name,) = make_nodes()
    server.reset_counts()
    result = run_module(kube, {"node": name, "facts": T4X1, "taints": [GPU_TAINT]}, check=True)
    assert result["changed"] is True
    assert result["nodes"][0]["added"]["accelerator"] == "nvidia-tesla-t4"
    assert server_counts(server) == {"list": 1}
    labels, taints = read(core, name)
    assert "accelerator" not in labels and taints == []


def test_diff_shows_label_and_taint_changes(kube, core, make_nodes):
    (name,) = make_nodes(labels={"nvidia.com/gpu.count": "2"})
    result = run_module(kube, {"node": name, "labels": {"nvidia.com/gpu.count": "1"}, "taints": [GPU_TAINT]},
                        diff=True)
    assert result["diff"] == [{
        "before_header": "node/%s" % name, "after_header": "node/%s" % name,
        "before": {"labels": {"nvidia.com/gpu.count": "2"}, "taints": []},
        "after": {"labels": {"nvidia.com/gpu.count": "1"}, "taints": ["nvidia.com/gpu=present:NoSchedule"]},
    }]


def test_parallel_writes_retry_409_and_429_per_node(kube, core, server, make_nodes):
    names = make_nodes(6)
    held, throttled = names[0], names[1:3]
    concurrent = {"key": "example.com/drain", "value": "", "effect": "NoSchedule"}
    # The first node's PATCH is held back while another client changes its taints (409 for the module,
    # which re-reads that node and writes again); two others are throttled once with Retry-After.
    fault = server.inject(method="PATCH", path_regex="/api/v1/nodes/%s$" % held, delay=2.0, times=1)
    for name in throttled:
        server.inject(method="PATCH", path_regex="/api/v1/nodes/%s$" % name, status=429, retry_after=1, times=1)

    def other_client():
        deadline = time.monotonic() + 120
        while not fault.fired and time.monotonic() < deadline:
            time.sleep(0.05)
        fresh = core.read_node(held)
        body = {"metadata": {"resourceVersion": fresh.metadata.resource_version}, "spec": {"taints": [concurrent]}}
        kubernetes.client.CoreV1Api(kube.api_client()).patch_node(
            held, body, _content_type="application/strategic-merge-patch+json")
    thread = threading.Thread(target=other_client)
    server.reset_counts()
    thread.start()
    result = run_module(kube, {"nodes": [{"name": n} for n in names], "labels": {"nvidia.com/gpu.present": "true"},
                               "taints": [GPU_TAINT]})
    thread.join()
    requests = server.requests()
    assert result["changed"] is True, result.get("msg")
    assert [n["name"] for n in result["nodes"]] == names
    assert result["nodes"][0]["taints"] == [concurrent, GPU_TAINT]
    # six writes, the 409 one again after one read, the two throttled ones again
    assert result["api_requests"] == {"list": 1, "patch": 9, "get": 1}
    for name in names:
        labels, taints = read(core, name)
        assert labels["nvidia.com/gpu.present"] == "true"
        assert taints == ([concurrent, GPU_TAINT] if name == held else [GPU_TAINT])
    # The other nodes were written while the first one's write was held: their first PATCHes reached the
    # server before the module read the first node again (the second GET of it; the first is the other
    # client's). One node after the other, the module would have read it again before any of them.
    log = [(r["method"], r["path"].rsplit("/", 1)[-1]) for r in requests if r["path"].startswith("/api/v1/nodes/")]
    gets = [i for i, request in enumerate(log) if request == ("GET", held)]
    assert len(gets) == 2
    assert all(log.index(("PATCH", name)) < gets[1] for name in names[1:]), log


# --- connection: timeouts, precedence, auth options -----------------------------------------------------

@pytest.fixture
def second_server(tmp_path):
    from kubeapi import KubeAPIServer

    srv = KubeAPIServer(tls=True, kubeconfig_path=str(tmp_path / "second-kubeconfig")).start()
    yield srv
    srv.stop()


def timed(kube, args, env=None, **kwargs):
    start = time.monotonic()
    result = run_module(kube, args, env=env, **kwargs)
    return result, time.monotonic() - start


@pytest.mark.parametrize("where", ["hang", "black-hole"])
def test_a_server_that_never_answers_fails_with_a_timeout_naming_it(kube, server, make_nodes, where):
    from kubeapi import BlackHole

    (name,) = make_nodes()
    args = {"node": name, "labels": {"nvidia.com/gpu.present": "true"}, "request_timeout": 2, "retries": 1}
    hole = None
    if where == "hang":
        server.inject(path_regex="/api/v1/nodes", hang=True, times=0)
        url = server.url
    else:
        hole = BlackHole()
        url = args["host"] = hole.url
        args["api_key"] = server.token
    server.reset_counts()
    try:
        result, elapsed = timed(kube, args)
    finally:
        if hole:
            hole.close()
    assert result.get("failed") is True, result
    assert result["error_kind"] == "timeout"
    assert result["msg"] == ("listing nodes failed: the API server at %s did not answer within 2s (request_timeout), "
                             "2 attempts" % url)
    assert result["api_requests"] == {"list": 2}
    if where == "hang":
        assert server.request_counts() == {"list": 2}
    # two attempts of 2 s, Ansible's start and end around them: it returned (no hang), after the timeouts ran
    assert 4 <= elapsed < 60
    server.clear_faults()
    labels, _taints = read(kube.core(), name)
    assert "nvidia.com/gpu.present" not in labels


def test_host_overrides_the_kubeconfig_server(kube, core, server, second_server, make_nodes):
    # kubernetes.core's precedence (plugins/module_utils/k8s/client.py): options over the kubeconfig
    (name,) = make_nodes()
    kubernetes.client.CoreV1Api(kube.api_client(second_server.kubeconfig_path)).create_node(
        {"metadata": {"name": name}})
    result = run_module(kube, {"node": name, "labels": {"written-to": "second"}, "host": second_server.url,
                               "api_key": second_server.token, "ca_cert": second_server.ca_path})
    assert result["changed"] is True, result
    assert second_server.objects("nodes")[0]["metadata"]["labels"]["written-to"] == "second"
    assert "written-to" not in read(core, name)[0]
    # K8S_AUTH_HOST as well, with the kubeconfig's other settings (its CA: both servers share it in one process)
    result = run_module(kube, {"node": name, "labels": {"written-to": "second-by-env"},
                               "api_key": second_server.token}, env={"K8S_AUTH_HOST": second_server.url})
    assert result["changed"] is True, result
    assert second_server.objects("nodes")[0]["metadata"]["labels"]["written-to"] == "second-by-env"
    assert "written-to" not in read(core, name)[0]


def test_an_http_host_against_the_tls_port_fails_and_writes_nothing(kube, core, server, make_nodes):
    (name,) = make_nodes()
    server.reset_counts()
    result = run_module(kube, {"node": name, "labels": {"a": "b"}, "host": server.url.replace("https:", "http:")})
    assert result.get("failed") is True
    assert result["error_kind"] == "api"
    assert result["msg"] == ("listing nodes failed: 400 Bad Request: Client sent an HTTP request to an HTTPS server. "
                             "(the server's URL starts with https://)")
    assert server.request_counts() == {}  # plain HTTP never reached the API
    assert "a" not in read(core, name)[0]


def test_a_client_certificate_authenticates_over_tls(kube, core, server, make_nodes):
    (name,) = make_nodes()
    cert, key = server.client_certificate("gpu-operator", ["system:masters"])
    connection = {"host": server.url, "ca_cert": server.ca_path, "client_cert": cert, "client_key": key}
    server.reset_counts()
    result = run_module(kube, dict(connection, node=name, labels={"via": "cert"}),
                        env={"K8S_AUTH_KUBECONFIG": "", "KUBECONFIG": "/nonexistent"})
    assert result["changed"] is True, result
    assert set(r["user"]["name"] for r in server.requests()) == {"gpu-operator"}
    assert read(core, name)[0]["via"] == "cert"
    # a certificate without the rights: the API's 403, naming the user
    cert, key = server.client_certificate("viewer", [])
    result = run_module(kube, dict(connection, node=name, labels={"via": "viewer"}, client_cert=cert, client_key=key),
                        env={"K8S_AUTH_KUBECONFIG": "", "KUBECONFIG": "/nonexistent"})
    assert result["error_kind"] == "write" and '403' in result["msg"] and 'User "viewer"' in result["msg"]
    # given as K8S_AUTH_CERT_FILE / K8S_AUTH_KEY_FILE over the kubeconfig's token: the certificate is presented
    cert, key = server.client_certificate("env-operator", ["system:masters"])
    server.reset_counts()
    result = run_module(kube, {"node": name, "labels": {"via": "env-cert"}},
                        env={"K8S_AUTH_CERT_FILE": cert, "K8S_AUTH_KEY_FILE": key})
    assert result["changed"] is True, result
    assert set(r["user"]["name"] for r in server.requests()) == {"env-operator"}
    assert read(core, name)[0]["via"] == "env-cert"


def test_impersonation_headers_reach_the_server(kube, core, server, make_nodes):
    (name,) = make_nodes()
    server.reset_counts()
    result = run_module(kube, {"node": name, "labels": {"as": "alice"}, "impersonate_user": "alice",
                               "impersonate_groups": ["gpu-admins", "system:masters"]})
    assert result["changed"] is True, result
    users = [r["user"] for r in server.requests()]
    assert users and all(u == {"name": "alice", "admin": True, "groups": ["gpu-admins", "system:masters"],
                               "impersonated_by": "kubeapi-admin"} for u in users)
    result = run_module(kube, {"node": name, "labels": {"as": "bob"}}, env={"K8S_AUTH_IMPERSONATE_USER": "bob"})
    assert result["error_kind"] == "write" and 'User "bob" cannot patch resource "nodes"' in result["msg"]
    assert read(core, name)[0]["as"] == "alice"


def test_a_proxy_with_basic_auth_and_no_proxy(kube, core, server, make_nodes):
    from kubeapi.proxy import ConnectProxy

    (name,) = make_nodes()
    with ConnectProxy(credentials="gpu:pa55") as proxy:
        result = run_module(kube, {"node": name, "labels": {"via": "proxy"}, "proxy": proxy.url,
                                   "proxy_headers": {"proxy_basic_auth": "gpu:pa55"}})
        assert result["changed"] is True, result
        assert proxy.requests and all(r["code"] == 200 and r["target"] == "127.0.0.1:%d" % server.port
                                      for r in proxy.requests)
        tunnelled = len(proxy.requests)
        result = run_module(kube, {"node": name, "labels": {"via": "direct"}, "proxy": proxy.url,
                                   "no_proxy": "localhost,127.0.0.1"})
        assert result["changed"] is True and len(proxy.requests) == tunnelled
        result = run_module(kube, {"node": name, "labels": {"via": "refused"}},
                            env={"K8S_AUTH_PROXY": proxy.url})  # no credentials: the proxy answers 407
        assert result.get("failed") is True and result["error_kind"] == "api"
        assert "through the proxy" in result["msg"] and "407" in result["msg"]
    assert read(core, name)[0]["via"] == "direct"


def test_module_defaults_on_the_action_group_set_the_connection_of_both_collections(kube, core, tmp_path, make_nodes):
    (name,) = make_nodes()
    playbook = tmp_path / "play.yml"
    playbook.write_text(json.dumps([{
        "name": "One connection for the play", "hosts": "localhost", "gather_facts": False,
        "module_defaults": {"group/kubegpu.nvidia.k8s": {"kubeconfig": kube.kubeconfig, "context": "kubeapi"}},
        "tasks": [
            {"name": "Label", "kubegpu.nvidia.k8s_gpu_label": {"node": name, "labels": {"grouped": "yes"}}},
            {"name": "Read back", "kubernetes.core.k8s_info": {"kind": "Node", "name": name}, "register": "info"},
        ]}]))
    result = ansible_run.run_playbook(str(playbook), "localhost,", connection="local",
                                      env={"K8S_AUTH_KUBECONFIG": "", "KUBECONFIG": "/nonexistent"})
    assert result.rc == 0, result.stdout[-3000:]
    tasks = result.tasks()
    assert tasks["Label"]["changed"] is True
    assert tasks["Read back"]["resources"][0]["metadata"]["labels"]["grouped"] == "yes"
