"""Validation pods and per-node results of kubegpu.nvidia.gpu_validation.

The pods are validated, strictly (unknown fields are errors), against the Kubernetes
OpenAPI schemas kubernetes-validate ships for each Kubernetes version the docs claim.
"""
import pytest

import kubernetes_validate

import role_render

from test_device_plugin_manifests import K8S_VERSIONS  # pylint: disable=import-error


VALIDATION_SETS = {
    "defaults": {"gpu_validation_nodes": ["gpu-1", "gpu-2.example.com"]},
    "air-gapped": {"gpu_validation_nodes": ["gpu-1"], "gpu_validation_image": "mirror.local/cuda-sample:vectoradd",
                   "gpu_validation_image_pull_secrets": ["regcred"], "gpu_validation_nvidia_default_runtime": True,
                   "gpu_validation_priority_class_name": "gpu-workload", "gpu_validation_gpus": 2},
}


@pytest.fixture(scope="module", params=sorted(VALIDATION_SETS))
def validation_pods(request):
    return request.param, role_render.render("gpu_validation", "{{ _gpu_validation_pods }}",
                                             VALIDATION_SETS[request.param])


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_validation_pods_match_the_kubernetes_schema(validation_pods, version):
    pods = validation_pods[1]
    assert pods
    for pod in pods:
        kubernetes_validate.validate(pod, version, strict=True)


def test_validation_pod_is_pinned_by_the_scheduler_and_requests_a_gpu_in_limits():
    pods = role_render.render("gpu_validation", "{{ _gpu_validation_pods }}", VALIDATION_SETS["defaults"])
    assert [p["metadata"]["name"] for p in pods] == ["gpu-validation-gpu-1", "gpu-validation-gpu-2.example.com"]
    spec = pods[1]["spec"]
    assert "nodeName" not in spec
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-2.example.com"]}]}]
    ctr = spec["containers"][0]
    assert ctr["image"] == "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
    assert ctr["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert spec["restartPolicy"] == "Never"
    assert spec["runtimeClassName"] == "nvidia"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]


def test_validation_pod_overrides():
    pod = role_render.render("gpu_validation", "{{ _gpu_validation_pods }}", VALIDATION_SETS["air-gapped"])[0]
    spec = pod["spec"]
    assert "runtimeClassName" not in spec
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert spec["priorityClassName"] == "gpu-workload"
    assert spec["containers"][0]["image"] == "mirror.local/cuda-sample:vectoradd"
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 2


def pod(name, phase, conditions=None, reason=None, message=None):
    status = {"phase": phase, "conditions": conditions or []}
    if reason:
        status.update(reason=reason, message=message)
    return {"metadata": {"name": name}, "status": status}


def test_validation_results_per_node():
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                     "message": "0/3 nodes are available: 1 Insufficient nvidia.com/gpu."}
    pods = [pod("gpu-validation-ok", "Succeeded"), pod("gpu-validation-nolog", "Succeeded"),
            pod("gpu-validation-full", "Pending", [unschedulable]),
            pod("gpu-validation-rejected", "Failed", reason="OutOfnvidia.com/gpu", message="Node didn't have enough")]
    logs = {"results": [{"item": {"metadata": {"name": "gpu-validation-ok"}}, "log": "...\nTest PASSED\nDone\n"},
                        {"item": {"metadata": {"name": "gpu-validation-nolog"}}, "log": "CUDA error\n"}]}
    variables = {"gpu_validation_nodes": ["ok", "nolog", "full", "rejected", "missing"],
                 "_gpu_validation_pod_info": {"resources": pods}, "_gpu_validation_log_info": logs}
    results = role_render.render("gpu_validation", "{{ _gpu_validation_results }}", variables)
    table = {r["node"]: (r["passed"], r["reason"]) for r in results}
    assert table["ok"] == (True, "Test PASSED")
    assert table["nolog"] == (False, 'log lacks "Test PASSED": CUDA error')
    assert table["full"] == (False, "Unschedulable: 0/3 nodes are available: 1 Insufficient nvidia.com/gpu.")
    assert table["rejected"] == (False, "OutOfnvidia.com/gpu: Node didn't have enough")
    assert table["missing"][0] is False and table["missing"][1].startswith("still Missing")
    lines = role_render.render("gpu_validation", "{{ _gpu_validation_table }}", variables)
    assert lines[0].split() == ["NODE", "RESULT", "DETAIL"]
    assert lines[1].split()[:3] == ["ok", "PASS", "Test"]
    assert lines[3].split()[:3] == ["full", "FAIL", "Unschedulable:"]


def test_validation_stops_waiting_for_unschedulable_pods_after_their_grace():
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no"}
    base = {"gpu_validation_nodes": ["a", "b"], "gpu_validation_delay": 2, "gpu_validation_unschedulable_timeout": 10}
    pods = [pod("gpu-validation-a", "Succeeded"), pod("gpu-validation-b", "Pending", [unschedulable])]
    early = dict(base, _gpu_validation_pod_info={"resources": pods, "attempts": 2})
    late = dict(base, _gpu_validation_pod_info={"resources": pods, "attempts": 5})
    assert role_render.render("gpu_validation", "{{ _gpu_validation_done }}", early) is False
    assert role_render.render("gpu_validation", "{{ _gpu_validation_done }}", late) is True
    running = dict(base, _gpu_validation_pod_info={"resources": [pods[0], pod("gpu-validation-b", "Running")],
                                                   "attempts": 5})
    assert role_render.render("gpu_validation", "{{ _gpu_validation_done }}", running) is False


def test_a_failed_pod_is_reported_with_its_log_tail_without_a_log_read():
    pods = role_render.render("gpu_validation", "{{ _gpu_validation_pods }}", VALIDATION_SETS["defaults"])
    assert pods[0]["spec"]["containers"][0]["terminationMessagePolicy"] == "FallbackToLogsOnError"
    crashed = pod("gpu-validation-bad", "Failed")
    crashed["status"]["containerStatuses"] = [{"state": {"terminated": {
        "reason": "Error", "exitCode": 1, "message": "Failed to allocate device vector A (error code no CUDA device)"}}}]
    variables = {"gpu_validation_nodes": ["bad"], "_gpu_validation_pod_info": {"resources": [crashed]}}
    results = role_render.render("gpu_validation", "{{ _gpu_validation_results }}", variables)
    assert results == [{"node": "bad", "pod": "gpu-validation-bad", "passed": False, "phase": "Failed",
                        "reason": "Error: Failed to allocate device vector A (error code no CUDA device)"}]
