import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import tenant_validation as tv
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

TEMPLATE = {"metadata": {"labels": {"app": "t"}}, "spec": {
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}], "nodeSelector": {"zone": "a"},
    "containers": [{"name": "cuda", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": 8, "cpu": "1"}}},
                   {"name": "side", "image": "busybox"}]}}


def test_check_tenants_defaults():
    assert tv.check_tenants([{"namespace": "team-t4", "product": "Tesla-T4"}]) == [
        {"namespace": "team-t4", "resource": "nvidia.com/gpu", "count": 1, "product": "Tesla-T4"}]


@pytest.mark.parametrize("entries, message", [
    ([{"namespace": "Team"}], "tenant Team: namespace 'Team' is not a DNS-1123 label"),
    ([{"namespace": "a" * 64}], "is not a DNS-1123 label"),
    ([{"namespace": "a"}, {"namespace": "a"}], "tenant a: listed twice"),
    ([{"namespace": "a", "resource": "amd.com/gpu"}], "tenant a: resource amd.com/gpu is not an nvidia.com/ GPU resource"),
    ([{"namespace": "a", "count": 0}], "tenant a: count must be a positive integer, not 0"),
    ([{"namespace": "a", "count": True}], "count must be a positive integer, not True"),
    ([{}], "tenant #1: namespace '' is not a DNS-1123 label"),
])
def test_check_tenants_names_each_problem(entries, message):
    with pytest.raises(InputError) as err:
        tv.check_tenants(entries)
    assert message in err.value.msg and "\n" not in err.value.msg


def test_build_pod_has_no_tolerations_and_the_tenants_resource_and_model():
    tenant = {"namespace": "team-t4", "resource": "nvidia.com/gpu.shared", "count": 2, "product": "Tesla-T4"}
    pod = tv.build_pod(TEMPLATE, tenant)
    assert pod["metadata"]["name"] == "gpu-tenant-validation" and pod["metadata"]["namespace"] == "team-t4"
    assert "tolerations" not in pod["spec"]
    assert pod["spec"]["nodeSelector"] == {"zone": "a", "nvidia.com/gpu.product": "Tesla-T4"}
    # the template's GPU limit is replaced by the tenant's; other limits stay
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "1", "nvidia.com/gpu.shared": 2}
    assert "resources" not in pod["spec"]["containers"][1]
    # the template is not changed
    assert TEMPLATE["spec"]["tolerations"] and TEMPLATE["spec"]["nodeSelector"] == {"zone": "a"}
    # without a product, no selector is added
    assert tv.build_pod({"spec": {"containers": [{"name": "c"}]}}, dict(tenant, product=""))["spec"].get(
        "nodeSelector") is None
    with pytest.raises(InputError, match="the pod template has no container"):
        tv.build_pod({"spec": {}}, tenant)


TENANT = {"namespace": "team-t4", "resource": "nvidia.com/gpu", "count": 1, "product": "Tesla-T4"}
RUNNING = {"spec": {"nodeName": "t4", "tolerations": [{"key": "nvidia.com/gpu"}, {"operator": "Exists"}]},
           "status": {"phase": "Running"}}
T4 = {"metadata": {"name": "t4", "labels": {"nvidia.com/gpu.product": "Tesla-T4"}}}
QUOTA = {"status": {"hard": {"requests.nvidia.com/gpu": "2"}, "used": {"requests.nvidia.com/gpu": "1"}}}
UNSCHEDULABLE = {"spec": {}, "status": {"phase": "Pending", "conditions": [
    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
     "message": "0/3 nodes are available: 2 node(s) had untolerated taint {sku: gpu}"}]}}


@pytest.mark.parametrize("pod, node, quota, passed, reason", [
    (RUNNING, T4, QUOTA, True, ""),
    (UNSCHEDULABLE, None, None, False, "Unschedulable: 0/3 nodes are available: 2 node(s) had untolerated taint {sku: gpu}"),
    ({"spec": {"nodeName": "t4"}, "status": {"phase": "Succeeded"}}, None, None, False, "the pod is Succeeded after 60s"),
    ({"spec": {"nodeName": "t4"}, "status": {"phase": "Failed", "message": "OutOfnvidia.com/gpu"}}, None, None, False,
     "the pod is Failed after 60s: OutOfnvidia.com/gpu"),
    (RUNNING, {"metadata": {"labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}}, QUOTA, False,
     "the pod runs on node t4, which is not a Tesla-T4 node"),
    (RUNNING, T4, None, False, "namespace team-t4 has no ResourceQuota gpu-tenant-quota"),
    (RUNNING, T4, {"status": {"hard": {"requests.nvidia.com/gpu": "2"}, "used": {"requests.nvidia.com/gpu": "0"}}},
     False, "ResourceQuota gpu-tenant-quota counts 0 of requests.nvidia.com/gpu while the pod runs, not its 1"),
    (None, None, None, False, "the pod was not found"),
])
def test_tenant_result(pod, node, quota, passed, reason):
    result = tv.tenant_result(TENANT, pod, node, quota, 60)
    assert (result["passed"], result["reason"]) == (passed, reason)


def test_tenant_result_and_report_of_a_pass():
    result = tv.tenant_result(TENANT, RUNNING, T4, QUOTA, 60)
    assert (result["node"], result["tolerations"], result["quota_used"], result["quota_hard"]) == (
        "t4", ["nvidia.com/gpu"], 1, 2)
    failed = tv.tenant_result(dict(TENANT, namespace="team-h100"), UNSCHEDULABLE, None, None, 60)
    assert tv.report([result, failed]) == [
        "tenant team-t4: pod without tolerations, 1 nvidia.com/gpu -> node t4 (tolerations added: nvidia.com/gpu); "
        "quota requests.nvidia.com/gpu used 1 of 2: passed",
        "tenant team-h100: pod without tolerations, 1 nvidia.com/gpu: FAILED: Unschedulable: 0/3 nodes are "
        "available: 2 node(s) had untolerated taint {sku: gpu}"]
    assert tv.failure_message([result, failed]) == (
        "GPU tenant validation failed in 1 of 2 namespace(s): team-h100: Unschedulable: 0/3 nodes are available: "
        "2 node(s) had untolerated taint {sku: gpu}")
    assert tv.failure_message([result]) == ""
