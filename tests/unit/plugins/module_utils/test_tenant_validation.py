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


# ------------------------------------------------------------------ the DRA path
# The quota key of a device class: the ResourceQuota docs ("Resource quota for dynamic resource allocation") and
# pkg/quota/v1/evaluator/core/resource_claims.go (V1ResourceByDeviceClass: <class>.deviceclass.resource.k8s.io/devices).
DRA = "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"


@pytest.mark.parametrize("resource, path, key", [
    ("nvidia.com/gpu", ("device_plugin", "nvidia.com/gpu"), "requests.nvidia.com/gpu"),
    ("nvidia.com/mig-1g.10gb", ("device_plugin", "nvidia.com/mig-1g.10gb"), "requests.nvidia.com/mig-1g.10gb"),
    (DRA, ("dra", "gpu.nvidia.com"), DRA),
    ("mig.nvidia.com.deviceclass.resource.k8s.io/devices", ("dra", "mig.nvidia.com"),
     "mig.nvidia.com.deviceclass.resource.k8s.io/devices"),
    # a device class name is a DNS-1123 subdomain (pkg/apis/resource/validation/validation.go)
    ("GPU.deviceclass.resource.k8s.io/devices", (None, None), "requests.GPU.deviceclass.resource.k8s.io/devices"),
    (".deviceclass.resource.k8s.io/devices", (None, None), "requests..deviceclass.resource.k8s.io/devices"),
    ("count/resourceclaims.resource.k8s.io", (None, None), "requests.count/resourceclaims.resource.k8s.io"),
    ("amd.com/gpu", (None, None), "requests.amd.com/gpu"),
])
def test_tenant_path_and_quota_key(resource, path, key):
    assert tv.tenant_path(resource) == path
    assert tv.quota_key(resource) == key


def test_check_tenants_takes_a_dra_quota_key_and_refuses_other_keys():
    assert tv.check_tenants([{"namespace": "team-h100", "resource": DRA}]) == [
        {"namespace": "team-h100", "resource": DRA, "count": 1, "product": ""}]
    with pytest.raises(InputError) as err:
        tv.check_tenants([{"namespace": "a", "resource": "count/resourceclaims.resource.k8s.io"}])
    assert err.value.msg == (
        "GPU validation of the tenants: tenant a: resource count/resourceclaims.resource.k8s.io is not an nvidia.com/ "
        "GPU resource nor a DRA device-class quota key (<class>.deviceclass.resource.k8s.io/devices)")


def test_the_dra_path_builds_a_claim_template_and_a_pod_that_uses_it_without_an_extended_resource():
    tenant = {"namespace": "team-h100", "resource": DRA, "count": 2, "product": "NVIDIA-H100-80GB-HBM3"}
    assert tv.build_claim_template(TEMPLATE, tenant) == {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu-tenant-validation", "namespace": "team-h100", "labels": {"app": "t"}},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2}}]}}}}
    pod = tv.build_pod(TEMPLATE, tenant)
    assert "tolerations" not in pod["spec"]
    assert pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "gpu-tenant-validation"}]
    first = pod["spec"]["containers"][0]["resources"]
    # the template's nvidia.com/gpu limit is dropped, nothing extended is asked for; other limits stay
    assert first == {"limits": {"cpu": "1"}, "claims": [{"name": "gpu"}]}
    assert pod["spec"]["nodeSelector"] == {"zone": "a", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    bare = tv.build_pod({"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}},
                        tenant)
    assert bare["spec"]["containers"][0]["resources"] == {"claims": [{"name": "gpu"}]}
    # the nvidia.com/gpu path has no template
    assert tv.build_claim_template(TEMPLATE, TENANT) is None


H100 = {"namespace": "team-h100", "resource": DRA, "count": 1, "product": ""}
DRA_QUOTA = {"status": {"hard": {DRA: "8"}, "used": {DRA: "1"}}}
NO_DEVICE = {"spec": {}, "status": {"phase": "Pending", "conditions": [
    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
     "message": "0/3 nodes are available: 3 cannot allocate all claims."}]}}


@pytest.mark.parametrize("pod, quota, passed, reason", [
    (dict(RUNNING, spec={"nodeName": "h100"}), DRA_QUOTA, True, ""),
    (NO_DEVICE, None, False, "Unschedulable: 0/3 nodes are available: 3 cannot allocate all claims."),
    # a quota on nvidia.com/gpu does not count a claim
    (dict(RUNNING, spec={"nodeName": "h100"}), QUOTA, False,
     "ResourceQuota gpu-tenant-quota counts 0 of gpu.nvidia.com.deviceclass.resource.k8s.io/devices while the pod "
     "runs, not its 1"),
])
def test_tenant_result_of_the_dra_path(pod, quota, passed, reason):
    result = tv.tenant_result(H100, pod, None, quota, 60)
    assert (result["passed"], result["reason"], result["path"], result["device_class"]) == (
        passed, reason, "dra", "gpu.nvidia.com")


def test_report_of_a_dra_tenant():
    result = tv.tenant_result(H100, dict(RUNNING, spec={"nodeName": "h100"}), None, DRA_QUOTA, 60)
    assert tv.report([result]) == [
        "tenant team-h100: pod without tolerations, a claim of 1 gpu.nvidia.com device(s) -> node h100 (tolerations "
        "added: none); quota gpu.nvidia.com.deviceclass.resource.k8s.io/devices used 1 of 8: passed"]
    assert tv.tenant_result(TENANT, RUNNING, T4, QUOTA, 60)["path"] == "device_plugin"
