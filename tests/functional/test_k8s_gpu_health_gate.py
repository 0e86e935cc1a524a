"""k8s_gpu_health_gate through `ansible localhost -m` against the Kubernetes API test server.

The module runs with the real kubernetes client over HTTP; the server's request log proves what was read and
written: one LIST, one PATCH per node whose health changed, nothing at all for bad input, a guard that refuses or
check mode.
"""
import pytest

kubernetes = pytest.importorskip("kubernetes")

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
HEALTH_TAINT = {"key": "nvidia.com/gpu.health", "value": "unhealthy", "effect": "NoSchedule"}
LABEL = "nvidia.com/gpu.health"
UNHEALTHY = {"severity": "unhealthy", "action": "field_diagnostics",
             "reason": "GPU 3 (00000000:5D:00.0): a row remap failed (no spare row left)"}
HEALTHY = {"severity": "healthy", "action": "none", "reason": None}
WRITES = ("create", "update", "patch", "delete", "deletecollection")
NODES = ("gpu01", "gpu02", "gpu03", "gpu04")


@pytest.fixture
def cluster(kube_server, kube):
    core = kubernetes.client.CoreV1Api(kube.api_client())
    for name in NODES:
        core.create_node({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                          "spec": {"taints": [GPU_TAINT]}})
    kube_server.reset_counts()
    return {"core": core, "server": kube_server, "kube": kube}


def run(cluster_, health, check=False, diff=False, **args):
    """The gate over NODES; ``health``: {node: health}, healthy when not named."""
    cluster_["server"].reset_counts()
    nodes = [{"name": name, "health": health.get(name, HEALTHY)} for name in NODES]
    return cluster_["kube"].ansible("kubegpu.nvidia.k8s_gpu_health_gate", dict({"nodes": nodes}, **args),
                                    check=check, diff=diff)


def writes(server):
    return {verb: n for verb, n in server.request_counts().items() if verb in WRITES}


def state(cluster_, name):
    node = cluster_["core"].read_node(name)
    taints = [(t.key, t.value, t.effect) for t in node.spec.taints or []]
    return node.metadata.labels.get(LABEL), taints, bool(node.spec.unschedulable)


def test_taint_then_untaint_only_ours_with_one_list_and_one_write_per_changed_node(cluster):
    first = run(cluster, {"gpu02": UNHEALTHY})
    assert first.get("failed") is not True, first.get("msg")
    assert first["changed"] is True
    # every node gets its label on the first run: one LIST, one PATCH each
    assert first["api_requests"] == {"list": 1, "patch": 4}
    assert cluster["server"].request_counts() == {"list": 1, "patch": 4}
    assert state(cluster, "gpu02") == ("unhealthy", [("nvidia.com/gpu", "present", "NoSchedule"),
                                                     ("nvidia.com/gpu.health", "unhealthy", "NoSchedule")], False)
    assert state(cluster, "gpu01") == ("healthy", [("nvidia.com/gpu", "present", "NoSchedule")], False)
    by_name = {n["name"]: n for n in first["nodes"]}
    assert by_name["gpu02"]["taint"] == "added"
    assert by_name["gpu02"]["reason"] == UNHEALTHY["reason"]

    again = run(cluster, {"gpu02": UNHEALTHY})
    assert again["changed"] is False and again["api_requests"] == {"list": 1}
    assert writes(cluster["server"]) == {}

    # someone adds a taint of their own meanwhile; the node recovers: only our taint goes
    cluster["core"].patch_node("gpu02", {"spec": {"taints": [GPU_TAINT, HEALTH_TAINT,
                                                             {"key": "team", "value": "a", "effect": "NoSchedule"}]}})
    healed = run(cluster, {})
    assert healed["changed"] is True
    assert healed["api_requests"] == {"list": 1, "patch": 1}
    assert state(cluster, "gpu02") == ("healthy", [("nvidia.com/gpu", "present", "NoSchedule"),
                                                   ("team", "a", "NoSchedule")], False)
    assert [n["taint"] for n in healed["nodes"]] == ["none", "removed", "none", "none"]


def test_guard_refuses_before_any_write(cluster):
    res = run(cluster, {"gpu01": UNHEALTHY, "gpu02": UNHEALTHY, "gpu03": UNHEALTHY})
    assert res["failed"] is True
    assert res["msg"].startswith("health gate stopped before any write: 3 of 4 GPU nodes (75%) would become "
                                 "unhealthy in this run, more than max_unhealthy_percent 30%: gpu01 (GPU 3")
    assert "\n" not in res["msg"]
    assert cluster["server"].request_counts() == {"list": 1}
    assert state(cluster, "gpu01") == (None, [("nvidia.com/gpu", "present", "NoSchedule")], False)
    # raised for one run, it lets them through
    assert run(cluster, {"gpu01": UNHEALTHY, "gpu02": UNHEALTHY, "gpu03": UNHEALTHY},
               max_unhealthy_percent=75)["changed"] is True
    assert state(cluster, "gpu03")[0] == "unhealthy"


def test_check_mode_writes_nothing_and_says_which_and_why(cluster):
    res = run(cluster, {"gpu03": UNHEALTHY}, check=True, diff=True)
    assert res["changed"] is True
    assert writes(cluster["server"]) == {}
    assert state(cluster, "gpu03") == (None, [("nvidia.com/gpu", "present", "NoSchedule")], False)
    assert ("gpu03: would taint nvidia.com/gpu.health=unhealthy:NoSchedule (unhealthy: %s); label "
            "nvidia.com/gpu.health=unhealthy" % UNHEALTHY["reason"]) in res["report"]
    diff = [d for d in res["diff"] if d["before_header"] == "node/gpu03"][0]
    assert diff["after"]["taints"] == ["nvidia.com/gpu=present:NoSchedule", "nvidia.com/gpu.health=unhealthy:NoSchedule"]


def test_foreign_taint_is_left_and_reported(cluster):
    cluster["core"].patch_node("gpu04", {"spec": {"taints": [GPU_TAINT, dict(HEALTH_TAINT, value="maintenance")]}})
    res = run(cluster, {"gpu04": UNHEALTHY})
    node = [n for n in res["nodes"] if n["name"] == "gpu04"][0]
    assert node["taint"] == "foreign" and node["foreign_taint"] == "nvidia.com/gpu.health=maintenance:NoSchedule"
    assert any("gpu04" in w and "someone else's" in w for w in res.get("warnings", []))
    assert state(cluster, "gpu04") == ("unhealthy", [("nvidia.com/gpu", "present", "NoSchedule"),
                                                     ("nvidia.com/gpu.health", "maintenance", "NoSchedule")], False)
    # recovered: someone else's taint stays
    run(cluster, {})
    assert state(cluster, "gpu04")[1] == [("nvidia.com/gpu", "present", "NoSchedule"),
                                          ("nvidia.com/gpu.health", "maintenance", "NoSchedule")]


def test_cordon_and_uncordon(cluster):
    run(cluster, {"gpu01": UNHEALTHY}, cordon=True)
    assert state(cluster, "gpu01")[2] is True
    run(cluster, {}, cordon=True)
    assert state(cluster, "gpu01") == ("healthy", [("nvidia.com/gpu", "present", "NoSchedule")], False)


@pytest.mark.parametrize("args, message", [
    ({"taint": {"key": "bad key"}}, "taint key 'bad key': name part must consist of"),
    ({"taint": {"effect": "Never"}}, "taint effect must be one of NoSchedule, PreferNoSchedule, NoExecute"),
    ({"max_unhealthy_percent": 130}, "max_unhealthy_percent must be a number from 0 to 100, got 130"),
])
def test_bad_input_one_line_before_any_request(cluster, args, message):
    res = run(cluster, {"gpu01": UNHEALTHY}, **args)
    assert res["failed"] is True and message in res["msg"] and "\n" not in res["msg"]
    assert res["error_kind"] == "input"
    assert cluster["server"].request_counts() == {}
