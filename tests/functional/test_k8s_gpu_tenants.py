"""k8s_gpu_tenants through `ansible localhost -m` against the Kubernetes API test server.

The module runs with the real kubernetes client over HTTP; the server's request log proves what was read and
written (nothing at all for bad input, six listings for a run with nothing to do).
"""
import json

import pytest

from kubeapi import admission  # pylint: disable=import-error

kubernetes = pytest.importorskip("kubernetes")

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
TIERS = [{"name": "gpu-workload", "value": 100000}]
TEAM_A = {"namespace": "ml-a", "quota": {"nvidia.com/gpu": 8}, "subjects": [{"kind": "Group", "name": "team-a"}],
          "tier": "gpu-workload"}
TEAM_B = {"namespace": "ml-b", "quota": {"nvidia.com/gpu.shared": 2},
          "subjects": [{"kind": "User", "name": "bob@example.com"}, {"kind": "ServiceAccount", "name": "pipeline"}]}
WRITES = ("create", "update", "patch", "delete", "deletecollection")


@pytest.fixture
def cluster(kube_server, kube):
    """An H100 node with 8 nvidia.com/gpu, a T4 node with 4 nvidia.com/gpu.shared (time-slicing), a CPU node."""
    core = kubernetes.client.CoreV1Api(kube.api_client())
    for name, allocatable in (("h100", {"nvidia.com/gpu": "8"}), ("t4", {"nvidia.com/gpu.shared": "4"}),
                              ("cpu", None)):
        body = {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}
        if allocatable:
            body["spec"] = {"taints": [GPU_TAINT]}
        core.create_node(body)
        if allocatable:
            core.patch_node_status(name, {"status": {"capacity": allocatable, "allocatable": allocatable}},
                                   _content_type="application/strategic-merge-patch+json")
    kube_server.reset_counts()
    return {"core": core, "rbac": kubernetes.client.RbacAuthorizationV1Api(kube.api_client()),
            "scheduling": kubernetes.client.SchedulingV1Api(kube.api_client()), "server": kube_server, "kube": kube}


def run(cluster_, tenants, check=False, diff=False, **args):
    cluster_["server"].reset_counts()
    args = dict({"tenants": tenants, "tiers": TIERS, "taints": [GPU_TAINT]}, **args)
    return cluster_["kube"].ansible("kubegpu.nvidia.k8s_gpu_tenants", args, check=check, diff=diff)


def writes(server):
    return {verb: n for verb, n in server.request_counts().items() if verb in WRITES}


def test_first_run_creates_every_object_and_second_run_writes_nothing(cluster):
    res = run(cluster, [TEAM_A, TEAM_B])
    assert res.get("failed") is not True, res.get("msg")
    assert res["changed"] is True
    assert [(c["action"], c["kind"], c.get("namespace"), c["name"]) for c in res["changes"]] == [
        ("create", "PriorityClass", None, "gpu-workload"),
        ("create", "Namespace", None, "ml-a"),
        ("create", "ResourceQuota", "ml-a", "gpu-tenant-quota"),
        ("create", "Role", "ml-a", "gpu-tenant"),
        ("create", "RoleBinding", "ml-a", "gpu-tenant"),
        ("create", "Namespace", None, "ml-b"),
        ("create", "ResourceQuota", "ml-b", "gpu-tenant-quota"),
        ("create", "Role", "ml-b", "gpu-tenant"),
        ("create", "RoleBinding", "ml-b", "gpu-tenant"),
    ]
    assert res["capacity"] == [{"resource": "nvidia.com/gpu", "quota": 8, "allocatable": 8},
                               {"resource": "nvidia.com/gpu.shared", "quota": 2, "allocatable": 4}]
    assert res["api_requests"] == {"list": 6, "create": 9}
    core, rbac = cluster["core"], cluster["rbac"]
    ns = core.read_namespace("ml-a").metadata
    assert ns.labels["app.kubernetes.io/managed-by"] == "kubegpu.nvidia"
    assert ns.labels["kubegpu.nvidia/tenant"] == "ml-a"
    assert json.loads(ns.annotations[admission.NS_DEFAULT_TOLERATIONS]) == [TOLERATION]
    assert core.read_namespaced_resource_quota("gpu-tenant-quota", "ml-a").spec.hard == {"requests.nvidia.com/gpu": "8"}
    assert core.read_namespaced_resource_quota("gpu-tenant-quota", "ml-b").spec.hard == {
        "requests.nvidia.com/gpu.shared": "2"}
    binding = rbac.read_namespaced_role_binding("gpu-tenant", "ml-b")
    assert binding.role_ref.name == "gpu-tenant" and binding.role_ref.kind == "Role"
    assert [(s.kind, s.name, s.namespace) for s in binding.subjects] == [
        ("User", "bob@example.com", None), ("ServiceAccount", "pipeline", "ml-b")]
    rules = rbac.read_namespaced_role("gpu-tenant", "ml-a").rules
    assert any("pods" in r.resources and "create" in r.verbs for r in rules)
    assert not any("daemonsets" in r.resources for r in rules)
    # nothing cluster-wide besides the tier
    assert not [c for c in rbac.list_cluster_role_binding().items if "gpu-tenant" in c.metadata.name]
    assert cluster["scheduling"].read_priority_class("gpu-workload").value == 100000

    again = run(cluster, [TEAM_A, TEAM_B])
    assert again["changed"] is False and again["changes"] == []
    assert again["api_requests"] == {"list": 6}
    assert writes(cluster["server"]) == {}


def test_check_mode_writes_nothing_and_diffs_each_object(cluster):
    run(cluster, [TEAM_A])
    changed = dict(TEAM_A, quota={"nvidia.com/gpu": 4}, subjects=[{"kind": "Group", "name": "team-a2"}])
    res = run(cluster, [changed, TEAM_B], check=True, diff=True)
    assert res["changed"] is True
    assert writes(cluster["server"]) == {}
    assert cluster["core"].read_namespaced_resource_quota("gpu-tenant-quota", "ml-a").spec.hard == {
        "requests.nvidia.com/gpu": "8"}
    with pytest.raises(kubernetes.client.ApiException):
        cluster["core"].read_namespace("ml-b")
    diffs = {d["before_header"]: d for d in res["diff"]}
    assert diffs["ResourceQuota ml-a/gpu-tenant-quota"]["before"]["spec"]["hard"] == {"requests.nvidia.com/gpu": "8"}
    assert diffs["ResourceQuota ml-a/gpu-tenant-quota"]["after"]["spec"]["hard"] == {"requests.nvidia.com/gpu": "4"}
    assert diffs["RoleBinding ml-a/gpu-tenant"]["after"]["subjects"] == [
        {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "team-a2"}]
    assert diffs["Namespace ml-b"]["before"] == {}
    assert "Namespace ml-a" not in diffs

    # the same change applied: only the two objects that differ are patched
    res = run(cluster, [changed, TEAM_B])
    assert writes(cluster["server"]) == {"patch": 2, "create": 4}
    assert cluster["core"].read_namespaced_resource_quota("gpu-tenant-quota", "ml-a").spec.hard == {
        "requests.nvidia.com/gpu": "4"}


def test_a_tenant_no_longer_declared_is_reported_and_kept_and_state_absent_removes_it(cluster):
    run(cluster, [TEAM_A, TEAM_B])
    res = run(cluster, [TEAM_A])
    assert res["changed"] is False and res["undeclared"] == ["ml-b"]
    assert any("namespace ml-b is labelled as a GPU tenant" in w for w in res.get("warnings", []))
    assert writes(cluster["server"]) == {}
    assert cluster["core"].read_namespaced_resource_quota("gpu-tenant-quota", "ml-b")

    res = run(cluster, [TEAM_A, {"namespace": "ml-b", "state": "absent"}])
    assert [(c["action"], c["kind"]) for c in res["changes"]] == [
        ("delete", "RoleBinding"), ("delete", "Role"), ("delete", "ResourceQuota"), ("update", "Namespace")]
    assert res["undeclared"] == []
    core = cluster["core"]
    assert core.list_namespaced_resource_quota("ml-b").items == []
    assert cluster["rbac"].list_namespaced_role("ml-b").items == []
    ns = core.read_namespace("ml-b").metadata
    assert "kubegpu.nvidia/tenant" not in (ns.labels or {})
    assert admission.NS_DEFAULT_TOLERATIONS not in (ns.annotations or {})
    # absent again: nothing left to do
    assert run(cluster, [TEAM_A, {"namespace": "ml-b", "state": "absent"}])["changed"] is False

    run(cluster, [TEAM_A, TEAM_B])
    res = run(cluster, [TEAM_A, {"namespace": "ml-b", "state": "absent", "delete_namespace": True}])
    assert res["changes"][-1] == {"action": "delete", "kind": "Namespace", "name": "ml-b"}
    assert "ml-b" not in [n.metadata.name for n in core.list_namespace().items]


# Each bad input of issue 27: one line, and not one request sent (or, for what needs the cluster, no write).
@pytest.mark.parametrize("tenants, tiers, needle", [
    ([dict(TEAM_A, namespace="ML_A")], TIERS, "tenant ML_A: namespace 'ML_A' is not a DNS-1123 label"),
    ([dict(TEAM_A, quota={"nvidia.com/gpu": -1})], TIERS, "quota nvidia.com/gpu must be a non-negative integer, got -1"),
    ([dict(TEAM_A, quota={"nvidia.com/gpu": 1.5})], TIERS, "quota nvidia.com/gpu must be a non-negative integer, got 1.5"),
    ([dict(TEAM_A, quota={"nvidia.com/gpu": "2Gi"})], TIERS, "got '2Gi'"),
    ([dict(TEAM_A, subjects=[{"kind": "Team", "name": "a"}])], TIERS,
     "kind 'Team' is not a Kubernetes subject kind (User, Group, ServiceAccount)"),
    ([dict(TEAM_A, tier="gold")], TIERS, "tier 'gold' names no declared priority tier (gpu-workload)"),
    ([TEAM_A, dict(TEAM_B, namespace="ml-a")], TIERS, "tenants 1 and 2 both claim namespace ml-a"),
    ([dict(TEAM_A, quota={"cpu": 4})], TIERS, "quota key cpu is not a GPU resource"),
])
def test_bad_input_is_refused_before_any_request(cluster, tenants, tiers, needle):
    res = run(cluster, tenants, tiers=tiers)
    assert res["failed"] is True and res["error_kind"] == "input"
    assert needle in res["msg"] and "\n" not in res["msg"]
    assert cluster["server"].request_counts() == {}


def test_every_problem_is_named_in_one_line(cluster):
    res = run(cluster, [dict(TEAM_A, namespace="Bad"), dict(TEAM_B, quota={"nvidia.com/gpu": -2}, tier="x")])
    assert res["failed"] is True and "\n" not in res["msg"]
    assert "tenant Bad: namespace 'Bad'" in res["msg"]
    assert "tenant ml-b: quota nvidia.com/gpu must be a non-negative integer" in res["msg"]
    assert "tenant ml-b: tier 'x' names no declared priority tier" in res["msg"]


def test_a_quota_no_node_can_offer_is_refused_before_any_write(cluster):
    res = run(cluster, [dict(TEAM_A, quota={"nvidia.com/mig-1g.10gb": 2})])
    assert res["failed"] is True and res["error_kind"] == "input"
    assert "no node advertises nvidia.com/mig-1g.10gb" in res["msg"]
    assert "offered: nvidia.com/gpu, nvidia.com/gpu.shared" in res["msg"]
    assert writes(cluster["server"]) == {}


def test_over_commitment_warns_or_fails_when_asked(cluster):
    teams = [TEAM_A, dict(TEAM_B, quota={"nvidia.com/gpu": 4})]
    res = run(cluster, teams, capacity_check="fail")
    assert res["failed"] is True
    assert "quotas add up to more than the GPU nodes advertise (nvidia.com/gpu: quotas 12, nodes 8)" in res["msg"]
    assert writes(cluster["server"]) == {}
    res = run(cluster, teams)
    assert res["changed"] is True
    assert any("nvidia.com/gpu: quotas 12, nodes 8" in w for w in res["warnings"])


def test_a_priority_class_with_another_value_is_refused_before_any_write(cluster):
    cluster["scheduling"].create_priority_class({"metadata": {"name": "gpu-workload"}, "value": 5})
    res = run(cluster, [TEAM_A])
    assert res["failed"] is True
    assert "PriorityClass gpu-workload exists with value 5, the tier declares 100000" in res["msg"]
    assert writes(cluster["server"]) == {}


def test_a_namespace_another_tool_manages_is_not_taken_over(cluster):
    cluster["core"].create_namespace({"metadata": {"name": "ml-a", "labels": {"app.kubernetes.io/managed-by": "Helm"}}})
    res = run(cluster, [TEAM_A])
    assert res["failed"] is True and "namespace ml-a is managed by Helm" in res["msg"]
    assert writes(cluster["server"]) == {}


def test_a_failed_write_names_what_was_applied_and_what_not(cluster):
    cluster["server"].inject(method="POST", path_regex=r".*/namespaces/ml-a/roles$", status=403, times=0)
    res = run(cluster, [TEAM_A])
    assert res["failed"] is True and res["changed"] is True
    assert res["msg"].startswith("creating Role ml-a/gpu-tenant failed: 403")
    assert ("applied: PriorityClass gpu-workload, Namespace ml-a, ResourceQuota ml-a/gpu-tenant-quota; "
            "not applied: Role ml-a/gpu-tenant, RoleBinding ml-a/gpu-tenant") in res["msg"]
    assert [c["kind"] for c in res["not_applied"]] == ["Role", "RoleBinding"]
    cluster["server"].clear_faults()
    res = run(cluster, [TEAM_A])
    assert [c["kind"] for c in res["changes"]] == ["Role", "RoleBinding"]


def test_a_pod_in_a_tenant_namespace_gets_the_toleration_lands_on_a_gpu_node_and_counts_against_the_quota(cluster):
    cluster["server"].store.admission_plugins = {admission.POD_TOLERATION_RESTRICTION}
    run(cluster, [dict(TEAM_A, quota={"nvidia.com/gpu": 2})])
    core = cluster["core"]

    def pod(name, gpus):
        return core.create_namespaced_pod("ml-a", {"metadata": {"name": name}, "spec": {
            "restartPolicy": "Always", "containers": [{"name": "c", "image": "cuda:12",
                                                       "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}})

    created = pod("train", 2)
    assert TOLERATION in [{k: v for k, v in t.to_dict().items() if v is not None} for t in created.spec.tolerations]
    cluster["server"].settle()
    assert core.read_namespaced_pod("train", "ml-a").spec.node_name == "h100"
    quota = core.read_namespaced_resource_quota("gpu-tenant-quota", "ml-a")
    assert quota.status.used == {"requests.nvidia.com/gpu": "2"}
    with pytest.raises(kubernetes.client.ApiException) as info:
        pod("more", 1)
    assert info.value.status == 403
    assert json.loads(info.value.body)["message"] == (
        'pods "more" is forbidden: exceeded quota: gpu-tenant-quota, requested: requests.nvidia.com/gpu=1, '
        'used: requests.nvidia.com/gpu=2, limited: requests.nvidia.com/gpu=2')
