"""Validation pods of kubegpu.nvidia.gpu_validation: the role's template, rendered as the role renders it,
made into one pod per node by the module's builder (module_utils/gpu_validation.py); and the role's table.

The pods are validated, strictly (unknown fields are errors), against the Kubernetes
OpenAPI schemas kubernetes-validate ships for each Kubernetes version the docs claim.
"""
import pytest

import kubernetes_validate

import role_render

from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_validation as gv
from ansible_collections.kubegpu.nvidia.plugins.filter.site_summary import validation as validation_table
from test_device_plugin_manifests import K8S_VERSIONS  # pylint: disable=import-error

VALIDATION_SETS = {
    "defaults": {"gpu_validation_nodes": ["gpu-1", "gpu-2.example.com"]},
    "air-gapped": {"gpu_validation_nodes": ["gpu-1"], "gpu_validation_image": "mirror.local/cuda-sample:vectoradd",
                   "gpu_validation_image_pull_secrets": ["regcred"], "gpu_validation_nvidia_default_runtime": True,
                   "gpu_validation_priority_class_name": "gpu-workload", "gpu_validation_gpus": 2},
}


def template(variables):
    return role_render.render("gpu_validation", "{{ _gpu_validation_pod_template }}", variables)


def pods(variables):
    """The pods k8s_gpu_validate makes from the role's template, one per node, in the role's namespace."""
    tmpl = template(variables)
    namespace = role_render.render("gpu_validation", "{{ gpu_validation_namespace }}", variables)
    return [gv.build_pod(tmpl, node, namespace) for node in variables["gpu_validation_nodes"]]


@pytest.fixture(scope="module", params=sorted(VALIDATION_SETS))
def validation_pods(request):
    return request.param, pods(VALIDATION_SETS[request.param])


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_validation_pods_match_the_kubernetes_schema(validation_pods, version):
    built = validation_pods[1]
    assert built
    for pod in built:
        kubernetes_validate.validate(pod, version, strict=True)


def test_the_template_leaves_name_namespace_and_node_to_the_module():
    tmpl = template(VALIDATION_SETS["defaults"])
    assert tmpl["metadata"] == {"labels": {"app.kubernetes.io/name": "gpu-validation",
                                           "app.kubernetes.io/managed-by": "kubegpu.nvidia"}}
    assert "affinity" not in tmpl["spec"] and "nodeName" not in tmpl["spec"]


def test_validation_pod_is_pinned_by_the_scheduler_and_requests_a_gpu_in_limits():
    built = pods(VALIDATION_SETS["defaults"])
    assert [p["metadata"]["name"] for p in built] == ["gpu-validation-gpu-1", "gpu-validation-gpu-2.example.com"]
    assert {p["metadata"]["namespace"] for p in built} == {"gpu-validation"}
    spec = built[1]["spec"]
    assert "nodeName" not in spec
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-2.example.com"]}]}]
    ctr = spec["containers"][0]
    assert ctr["image"] == "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
    assert ctr["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert ctr["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert spec["restartPolicy"] == "Never"
    assert spec["runtimeClassName"] == "nvidia"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]


def test_validation_pod_overrides():
    pod = pods(dict(VALIDATION_SETS["air-gapped"], gpu_validation_namespace="checks",
                    gpu_validation_extra_tolerations=[{"key": "sku", "operator": "Equal", "value": "gpu",
                                                       "effect": "NoSchedule"}]))[0]
    spec = pod["spec"]
    assert pod["metadata"]["namespace"] == "checks"
    assert "runtimeClassName" not in spec
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert spec["priorityClassName"] == "gpu-workload"
    assert spec["containers"][0]["image"] == "mirror.local/cuda-sample:vectoradd"
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"} in spec["tolerations"]


def test_the_table_shows_one_row_per_node():
    results = [{"node": "ok", "pod": "gpu-validation-ok", "passed": True, "phase": "Succeeded",
                "reason": "Test PASSED"},
               {"node": "a-long-node-name", "pod": "gpu-validation-a-long-node-name", "passed": False,
                "phase": "Pending", "reason": "Unschedulable: 0/3 nodes are available"}]
    lines = validation_table(results)
    assert lines == ["NODE              RESULT  DETAIL",
                     "ok                PASS    Test PASSED",
                     "a-long-node-name  FAIL    Unschedulable: 0/3 nodes are available"]
    failed = role_render.render("gpu_validation", "{{ _gpu_validation_failed }}", {"gpu_validation_results": results})
    assert [r["node"] for r in failed] == ["a-long-node-name"]
