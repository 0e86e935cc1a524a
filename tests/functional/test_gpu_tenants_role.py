"""Role kubegpu.nvidia.gpu_tenants through ansible-playbook against the Kubernetes API test server.

The server runs the PodTolerationRestriction admission plugin (tests/support/kubeapi/admission.py), so a pod
created in a tenant namespace without tolerations gets the GPU taint's toleration from the namespace and the
scheduler stand-in places it on the tainted GPU node.
"""
import json

import pytest

import ansible_run
from kubeapi import admission  # pylint: disable=import-error

kubernetes = pytest.importorskip("kubernetes")

PLAYBOOK = """
- name: GPU tenants
  hosts: localhost
  gather_facts: false
  roles:
    - role: kubegpu.nvidia.gpu_tenants
"""
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TENANTS = [
    {"namespace": "team-h100", "quota": {"nvidia.com/gpu": 2}, "subjects": [{"kind": "Group", "name": "team-h100"}],
     "tier": "gpu-workload"},
    {"namespace": "team-t4", "quota": {"nvidia.com/gpu.shared": 2}, "subjects": [{"kind": "User", "name": "ann"}]},
]


@pytest.fixture
def cluster(kube_server, kube, tmp_path):
    kube_server.store.admission_plugins = {admission.POD_TOLERATION_RESTRICTION}
    core = kubernetes.client.CoreV1Api(kube.api_client())
    for name, resource in (("h100", "nvidia.com/gpu"), ("t4", "nvidia.com/gpu.shared")):
        core.create_node({"metadata": {"name": name}, "spec": {"taints": [GPU_TAINT]}})
        core.patch_node_status(name, {"status": {"capacity": {resource: "4"}, "allocatable": {resource: "4"}}},
                               _content_type="application/strategic-merge-patch+json")
    core.create_node({"metadata": {"name": "cpu"}})
    (tmp_path / "site.yml").write_text(PLAYBOOK)
    return {"dir": tmp_path, "core": core, "kube": kube, "server": kube_server}


def play(cluster_, extra_vars, check=False, diff=False):
    res = ansible_run.run_playbook(cluster_["dir"] / "site.yml", "localhost,", extra_vars, check=check, diff=diff,
                                   connection="local", kubeconfig=cluster_["kube"].kubeconfig, timeout=300)
    return res.rc, res.stats.get("localhost", {}), res.tasks()


def failure(tasks):
    return [(name, res.get("msg")) for name, res in tasks.items() if res.get("failed")]


def test_a_pod_without_tolerations_in_a_tenant_namespace_lands_on_its_gpu_node(cluster):
    rc, stats, tasks = play(cluster, {"gpu_tenants_tenants": TENANTS})
    assert rc == 0, failure(tasks)
    result = tasks["Apply the GPU tenants"]
    assert result["changed"] is True
    # the taint came from k8s_gpu_node's defaults, the tier from k8s_device_plugin's
    core = cluster["core"]
    annotation = core.read_namespace("team-t4").metadata.annotations[admission.NS_DEFAULT_TOLERATIONS]
    assert json.loads(annotation) == [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                                       "effect": "NoSchedule"}]
    pc = kubernetes.client.SchedulingV1Api(cluster["kube"].api_client()).read_priority_class("gpu-workload")
    assert pc.value == 100000
    assert "team-t4: nvidia.com/gpu.shared=2; 1 subject(s); tier none" in tasks["Report the GPU tenants"]["msg"]

    for namespace, resource, node in (("team-h100", "nvidia.com/gpu", "h100"),
                                      ("team-t4", "nvidia.com/gpu.shared", "t4")):
        core.create_namespaced_pod(namespace, {"metadata": {"name": "work"}, "spec": {
            "restartPolicy": "Always",
            "containers": [{"name": "c", "image": "cuda:12", "resources": {"limits": {resource: "1"}}}]}})
        cluster["server"].settle()
        pod = core.read_namespaced_pod("work", namespace)
        assert pod.spec.node_name == node, pod.status.conditions
        assert "nvidia.com/gpu" in [t.key for t in pod.spec.tolerations]
        quota = core.read_namespaced_resource_quota("gpu-tenant-quota", namespace)
        assert quota.status.used == {"requests.%s" % resource: "1"}

    # a second run changes nothing and writes nothing
    cluster["server"].reset_counts()
    rc, stats, tasks = play(cluster, {"gpu_tenants_tenants": TENANTS})
    assert rc == 0, failure(tasks)
    assert stats["changed"] == 0
    assert tasks["Apply the GPU tenants"]["api_requests"] == {"list": 6}
    assert set(cluster["server"].request_counts()) == {"list"}


def test_the_taints_and_the_tier_follow_the_other_roles_variables(cluster):
    extra = {"gpu_tenants_tenants": [dict(TENANTS[0], tier="critical-gpu")],
             "k8s_gpu_node_taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}],
             "k8s_device_plugin_workload_priority_class_name": "critical-gpu",
             "k8s_device_plugin_workload_priority_class_value": 5000}
    rc, _stats, tasks = play(cluster, extra, check=True, diff=True)
    assert rc == 0, failure(tasks)
    result = tasks["Apply the GPU tenants"]
    assert result["changed"] is True
    assert [c["kind"] for c in result["changes"]][:2] == ["PriorityClass", "Namespace"]
    assert cluster["core"].list_namespace(label_selector="kubegpu.nvidia/tenant").items == []
    ns_diff = [d for d in result["diff"] if d["after_header"] == "Namespace team-h100"][0]
    assert json.loads(ns_diff["after"]["metadata"]["annotations"][admission.NS_DEFAULT_TOLERATIONS]) == [
        {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    pc_diff = [d for d in result["diff"] if d["after_header"] == "PriorityClass critical-gpu"][0]
    assert pc_diff["after"]["value"] == 5000


def test_bad_input_fails_with_one_line_and_no_tenant_skips_the_role(cluster):
    rc, _stats, tasks = play(cluster, {"gpu_tenants_tenants": [dict(TENANTS[0], tier="gold")]})
    assert rc != 0
    (name, msg), = failure(tasks)
    assert name == "Apply the GPU tenants"
    assert msg == "GPU tenants: tenant team-h100: tier 'gold' names no declared priority tier (gpu-workload)"

    cluster["server"].reset_counts()
    rc, stats, tasks = play(cluster, {})
    assert rc == 0 and stats["changed"] == 0
    assert tasks["Apply the GPU tenants"].get("skipped") is True
    assert cluster["server"].request_counts() == {}
