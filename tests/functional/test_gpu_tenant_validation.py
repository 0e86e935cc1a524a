"""The tenant path of role kubegpu.nvidia.gpu_validation (module k8s_gpu_tenant_validate), after role
kubegpu.nvidia.gpu_tenants, through ansible-playbook against the Kubernetes API test server.

The server runs PodTolerationRestriction and ExtendedResourceToleration (tests/support/kubeapi/admission.py,
after plugin/pkg/admission/podtolerationrestriction/admission.go and
plugin/pkg/admission/extendedresourcetoleration/admission.go) and computes ResourceQuota status.used over the pods
not in a terminal phase, as pkg/quota/v1/evaluator/core/pods.go does, and over the namespace's ResourceClaims per
device class, as pkg/quota/v1/evaluator/core/resource_claims.go does (the DRA path).
"""
import pytest

import ansible_run
from kubeapi import admission  # pylint: disable=import-error

kubernetes = pytest.importorskip("kubernetes")

PLAYBOOK = """
- name: GPU tenants and their validation
  hosts: localhost
  gather_facts: false
  roles:
    - role: kubegpu.nvidia.gpu_tenants
    - role: kubegpu.nvidia.gpu_validation
"""
TENANTS = [
    {"namespace": "team-h100", "quota": {"nvidia.com/gpu": 4}, "subjects": [{"kind": "Group", "name": "h100"}]},
    {"namespace": "team-t4", "quota": {"nvidia.com/gpu": 2}, "subjects": [{"kind": "User", "name": "ann"}]},
]
CHECKS = [{"namespace": "team-h100", "product": "NVIDIA-H100-80GB-HBM3"},
          {"namespace": "team-t4", "resource": "nvidia.com/gpu", "product": "Tesla-T4"}]
BASE = {"gpu_tenants_tenants": TENANTS, "gpu_validation_tenants": CHECKS, "gpu_validation_delay": 1,
        "gpu_validation_unschedulable_timeout": 2, "gpu_validation_timeout": 60,
        "gpu_validation_nvidia_default_runtime": True}


@pytest.fixture
def cluster(kube_server, kube, tmp_path):
    kube_server.store.admission_plugins = set(admission.PLUGINS)
    core = kubernetes.client.CoreV1Api(kube.api_client())
    # the T4 and the H100 node, both tainted as the k8s_gpu_node role's default taint, and a CPU node
    for name, product, gpus in (("h100", "NVIDIA-H100-80GB-HBM3", "8"), ("t4", "Tesla-T4", "4")):
        core.create_node({"metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true",
                                                                "nvidia.com/gpu.product": product}},
                          "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}})
        core.patch_node_status(name, {"status": {"capacity": {"nvidia.com/gpu": gpus},
                                                 "allocatable": {"nvidia.com/gpu": gpus}}},
                               _content_type="application/strategic-merge-patch+json")
    core.create_node({"metadata": {"name": "cpu"}})
    (tmp_path / "site.yml").write_text(PLAYBOOK)
    return {"dir": tmp_path, "core": core, "kube": kube, "server": kube_server}


def play(cluster_, extra_vars, check=False):
    res = ansible_run.run_playbook(cluster_["dir"] / "site.yml", "localhost,", extra_vars, check=check,
                                   connection="local", kubeconfig=cluster_["kube"].kubeconfig, timeout=300)
    return res.rc, res.stats.get("localhost", {}), res.tasks()


def failure(tasks):
    return [(name, res.get("msg")) for name, res in tasks.items() if res.get("failed")]


def test_a_pod_without_tolerations_lands_on_the_tenants_gpu_node_and_counts(cluster):
    rc, _stats, tasks = play(cluster, BASE)
    assert rc == 0, failure(tasks)
    results = tasks["Validate the GPU tenants with a pod without tolerations"]["results"]
    assert [(r["namespace"], r["node"], r["passed"], r["quota_used"], r["quota_hard"]) for r in results] == [
        ("team-h100", "h100", True, 1, 4), ("team-t4", "t4", True, 1, 2)]
    # the toleration came from the API server, not from the pod
    assert all("nvidia.com/gpu" in r["tolerations"] for r in results)
    assert tasks["Show the result per tenant"]["msg"][1] == (
        "tenant team-t4: pod without tolerations, 1 nvidia.com/gpu -> node t4 (tolerations added: "
        "node.kubernetes.io/memory-pressure, node.kubernetes.io/not-ready, node.kubernetes.io/unreachable, "
        "nvidia.com/gpu); quota requests.nvidia.com/gpu used 1 of 2: passed")
    assert tasks["Fail when a tenant did not pass"]["msg"] == "GPU tenant validation passed in 2 namespace(s)"
    # nothing is left behind: the pods are gone and the quotas count nothing again
    core = cluster["core"]
    for namespace in ("team-h100", "team-t4"):
        assert core.list_namespaced_pod(namespace).items == []
        cluster["server"].settle()
        assert core.read_namespaced_resource_quota("gpu-tenant-quota", namespace).status.used == {
            "requests.nvidia.com/gpu": "0"}

    # check mode runs no tenant pod
    cluster["server"].reset_counts()
    rc, stats, tasks = play(cluster, BASE, check=True)
    assert rc == 0, failure(tasks)
    assert stats["changed"] == 0
    assert "create" not in cluster["server"].request_counts()


def test_without_the_namespace_tolerations_the_tenant_fails_with_the_scheduler_reason(cluster):
    # a taint ExtendedResourceToleration does not cover (the AKS guide's sku=gpu), and PodTolerationRestriction off:
    # nothing gives the pod the toleration
    cluster["server"].store.admission_plugins = {admission.EXTENDED_RESOURCE_TOLERATION}
    core = cluster["core"]
    for name in ("h100", "t4"):
        core.patch_node(name, {"spec": {"taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]}})
    extra = dict(BASE, k8s_gpu_node_taints=[{"key": "sku", "value": "gpu", "effect": "NoSchedule"}],
                 gpu_validation_tolerations=[{"key": "sku", "operator": "Exists", "effect": "NoSchedule"}])
    rc, _stats, tasks = play(cluster, extra)
    assert rc != 0
    (name, msg), = failure(tasks)
    assert name == "Fail when a tenant did not pass"
    assert msg.startswith("GPU tenant validation failed in 2 of 2 namespace(s): team-h100: Unschedulable: 0/3 nodes")
    assert "untolerated taint" in msg
    assert core.list_namespaced_pod("team-t4").items == []

    # with PodTolerationRestriction on, the namespace's default toleration (sku=gpu) lets them land
    cluster["server"].store.admission_plugins = set(admission.PLUGINS)
    rc, _stats, tasks = play(cluster, extra)
    assert rc == 0, failure(tasks)
    results = tasks["Validate the GPU tenants with a pod without tolerations"]["results"]
    assert [(r["node"], r["passed"]) for r in results] == [("h100", True), ("t4", True)]
    assert all("sku" in r["tolerations"] for r in results)


def test_a_gpu_model_no_node_has_an_undeclared_namespace_and_bad_entries_fail(cluster):
    wrong = [{"namespace": "team-t4", "product": "Tesla-V100-SXM2-16GB"}]
    rc, _stats, tasks = play(cluster, dict(BASE, gpu_validation_tenants=wrong))
    assert rc != 0
    (name, msg), = failure(tasks)
    assert name == "Fail when a tenant did not pass"
    assert msg.startswith("GPU tenant validation failed in 1 of 1 namespace(s): team-t4: Unschedulable: 0/3 nodes")
    assert "node affinity/selector" in msg

    rc, _stats, tasks = play(cluster, dict(BASE, gpu_validation_tenants=[{"namespace": "team-x"}]))
    assert rc != 0
    (name, msg), = failure(tasks)
    assert name == "Validate the GPU tenants with a pod without tolerations"
    assert msg == "namespace team-x does not exist: the tenant is not created (role gpu_tenants)"

    rc, _stats, tasks = play(cluster, dict(BASE, gpu_validation_tenants=[{"namespace": "Team_X", "count": 0}]))
    assert rc != 0
    (name, msg), = failure(tasks)
    assert msg == ("GPU validation of the tenants: tenant Team_X: namespace 'Team_X' is not a DNS-1123 label; "
                   "tenant Team_X: count must be a positive integer, not 0")


# ------------------------------------------------------------------ the DRA path
DRA_KEY = "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"
GPU_CLASS_CEL = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
MIG_CLASS_CEL = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"


@pytest.fixture
def dra_cluster(cluster):
    """The cluster above plus a tainted H100 node whose 8 GPUs the DRA driver's kubelet plugin publishes (no
    nvidia.com/gpu), the driver's DeviceClasses gpu.nvidia.com and mig.nvidia.com (its chart's CEL)."""
    pytest.importorskip("celpy")
    kube = cluster["kube"]
    kube.node("h100-dra", labels={"nvidia.com/dra-kubelet-plugin": "true",
                                  "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
              annotations={"kubegpu.io/simulated-gpus": "8"},
              taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
    ns = kube.namespace()
    kube.apps().create_namespaced_daemon_set(ns, {
        "metadata": {"name": "nvidia-dra-driver-gpu-kubelet-plugin"},
        "spec": {"selector": {"matchLabels": {"app": "dra-plugin"}}, "template": {
            "metadata": {"labels": {"app": "dra-plugin"}}, "spec": {
                "nodeSelector": {"nvidia.com/dra-kubelet-plugin": "true"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [{"name": "gpus", "image": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0"}]}}}})
    classes = kube.dynamic().resources.get(api_version="resource.k8s.io/v1", kind="DeviceClass")
    for name, expression in (("gpu.nvidia.com", GPU_CLASS_CEL), ("mig.nvidia.com", MIG_CLASS_CEL)):
        classes.create(body={"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
                             "spec": {"selectors": [{"cel": {"expression": expression}}]}})
    return cluster


DRA_TENANTS = [
    {"namespace": "team-h100", "quota": {DRA_KEY: 8}, "subjects": [{"kind": "Group", "name": "h100"}]},
    {"namespace": "team-t4", "quota": {"nvidia.com/gpu": 2}, "subjects": [{"kind": "User", "name": "ann"}]},
    {"namespace": "team-mig", "quota": {"mig.nvidia.com.deviceclass.resource.k8s.io/devices": 2},
     "subjects": [{"kind": "User", "name": "bob"}]},
]


def test_a_dra_tenant_passes_on_the_dra_node_with_its_quota_counting_the_claims_device(dra_cluster):
    checks = [{"namespace": "team-h100", "resource": DRA_KEY, "product": "NVIDIA-H100-80GB-HBM3"},
              {"namespace": "team-t4", "product": "Tesla-T4"}]
    rc, _stats, tasks = play(dra_cluster, dict(BASE, gpu_tenants_tenants=DRA_TENANTS,
                                               gpu_validation_tenants=checks))
    assert rc == 0, failure(tasks)
    results = tasks["Validate the GPU tenants with a pod without tolerations"]["results"]
    assert [(r["namespace"], r["path"], r["device_class"], r["node"], r["passed"], r["quota_used"], r["quota_hard"])
            for r in results] == [("team-h100", "dra", "gpu.nvidia.com", "h100-dra", True, 1, 8),
                                  ("team-t4", "device_plugin", "", "t4", True, 1, 2)]
    # no extended resource: the toleration came from the namespace's defaults (PodTolerationRestriction)
    assert "nvidia.com/gpu" in results[0]["tolerations"]
    assert tasks["Show the result per tenant"]["msg"][0].startswith(
        "tenant team-h100: pod without tolerations, a claim of 1 gpu.nvidia.com device(s) -> node h100-dra")
    assert tasks["Show the result per tenant"]["msg"][0].endswith(
        "; quota gpu.nvidia.com.deviceclass.resource.k8s.io/devices used 1 of 8: passed")
    # nothing is left behind: pod, template and the pod's claim are gone, the quota counts nothing again
    server, kube = dra_cluster["server"], dra_cluster["kube"]
    server.settle()
    assert dra_cluster["core"].list_namespaced_pod("team-h100").items == []
    for kind in ("ResourceClaimTemplate", "ResourceClaim"):
        res = kube.dynamic().resources.get(api_version="resource.k8s.io/v1", kind=kind)
        assert res.get(namespace="team-h100").to_dict()["items"] == []
    assert dra_cluster["core"].read_namespaced_resource_quota("gpu-tenant-quota", "team-h100").status.used == {
        DRA_KEY: "0"}


def test_a_dra_tenant_whose_class_matches_no_device_fails_with_the_schedulers_reason(dra_cluster):
    checks = [{"namespace": "team-mig", "resource": "mig.nvidia.com.deviceclass.resource.k8s.io/devices"}]
    rc, _stats, tasks = play(dra_cluster, dict(BASE, gpu_tenants_tenants=DRA_TENANTS,
                                               gpu_validation_tenants=checks))
    assert rc != 0
    (name, msg), = failure(tasks)
    assert name == "Fail when a tenant did not pass"
    assert msg.startswith("GPU tenant validation failed in 1 of 1 namespace(s): team-mig: Unschedulable: 0/4 nodes "
                          "are available: ")
    assert "cannot allocate all claims" in msg and "\n" not in msg
    kube = dra_cluster["kube"]
    assert dra_cluster["core"].list_namespaced_pod("team-mig").items == []
    res = kube.dynamic().resources.get(api_version="resource.k8s.io/v1", kind="ResourceClaimTemplate")
    assert res.get(namespace="team-mig").to_dict()["items"] == []
