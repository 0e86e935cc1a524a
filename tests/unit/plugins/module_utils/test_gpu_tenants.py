"""module_utils/gpu_tenants: declarations, capacity check and plan, one function at a time."""
import json

import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_tenants as gt
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import K8sError

TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TIERS = [{"name": "gpu-workload", "value": 100000}]


def tenant(**kw):
    return dict({"namespace": "ml-a", "quota": {"nvidia.com/gpu": 2}, "subjects": [{"kind": "Group", "name": "a"}]},
                **kw)


def check(tenants, tiers=None, taints=None):
    return gt.check_declarations(tenants, TIERS if tiers is None else tiers, [TAINT] if taints is None else taints)


def problem(tenants, tiers=None, taints=None):
    with pytest.raises(InputError) as info:
        check(tenants, tiers, taints)
    assert "\n" not in info.value.msg
    return info.value.msg


# Resource names the device plugin advertises (k8s-device-plugin internal/rm/rm.go, api/config/v1/resources.go:
# MIG profiles as nvidia.com/mig-<profile> with "+" written "."; renameByDefault adds ".shared") and the DRA quota
# keys of the Kubernetes ResourceQuota docs (REFERENCE.md 8.4).
@pytest.mark.parametrize("resource, key", [
    ("nvidia.com/gpu", "requests.nvidia.com/gpu"),
    ("nvidia.com/gpu.shared", "requests.nvidia.com/gpu.shared"),
    ("nvidia.com/mig-1g.10gb", "requests.nvidia.com/mig-1g.10gb"),
    ("nvidia.com/mig-3g.40gb", "requests.nvidia.com/mig-3g.40gb"),
    ("nvidia.com/mig-1g.10gb.me", "requests.nvidia.com/mig-1g.10gb.me"),
    ("nvidia.com/mig-1c.3g.40gb", "requests.nvidia.com/mig-1c.3g.40gb"),
    ("nvidia.com/mig-1g.10gb.shared", "requests.nvidia.com/mig-1g.10gb.shared"),
    ("gpu.nvidia.com.deviceclass.resource.k8s.io/devices", "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"),
    ("count/resourceclaims.resource.k8s.io", "count/resourceclaims.resource.k8s.io"),
])
def test_known_resources_and_their_quota_keys(resource, key):
    assert gt.resource_problem(resource) is None
    assert gt.quota_key(resource) == key


@pytest.mark.parametrize("resource, needle", [
    ("cpu", "quota key cpu is not a GPU resource"),
    ("nvidia.com/gpus", "is not a GPU resource"),
    ("nvidia.com/mig-1g", "is not a GPU resource"),
    ("requests.nvidia.com/gpu", "give the resource name (nvidia.com/gpu)"),
    ("Bad_Class.deviceclass.resource.k8s.io/devices", "'Bad_Class' is not a DeviceClass name"),
])
def test_unknown_resources(resource, needle):
    assert needle in gt.resource_problem(resource)


@pytest.mark.parametrize("value, count", [
    (0, 0), (8, 8), ("4", 4), (" 2 ", 2), (-1, None), (1.5, None), ("1.5", None), ("2Gi", None), (True, None),
    (None, None), ("-3", None),
])
def test_quota_count(value, count):
    assert gt.quota_count(value) == count


@pytest.mark.parametrize("taints, tolerations", [
    ([TAINT], [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]),
    # the AKS guide's taint (az aks nodepool add --node-taints sku=gpu:NoSchedule)
    ([{"key": "sku", "value": "gpu", "effect": "NoSchedule"}],
     [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]),
    ([{"key": "nvidia.com/gpu", "effect": "NoExecute"}],
     [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}]),
    ([], []),
])
def test_tolerations_of_the_taints(taints, tolerations):
    assert gt.tolerations_for(taints) == tolerations


def test_a_declaration_is_normalised():
    tenants, tiers, tolerations = check([tenant(tier="gpu-workload", subjects=[
        {"kind": "User", "name": "bob"}, {"kind": "ServiceAccount", "name": "ci"},
        {"kind": "ServiceAccount", "name": "x", "namespace": "tools"}], quota={"nvidia.com/gpu": "4"})])
    assert tenants == [{"namespace": "ml-a", "quota": {"nvidia.com/gpu": 4}, "tier": "gpu-workload",
                        "state": "present", "delete_namespace": False, "subjects": [
                            {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "bob"},
                            {"kind": "ServiceAccount", "name": "ci", "namespace": "ml-a"},
                            {"kind": "ServiceAccount", "name": "x", "namespace": "tools"}]}]
    assert tiers["gpu-workload"]["value"] == 100000
    assert tiers["gpu-workload"]["description"] == gt.DEFAULT_TIER_DESCRIPTION
    assert tolerations[0]["key"] == "nvidia.com/gpu"


# Every bad input of issue 27, and the others the API server would refuse later.
@pytest.mark.parametrize("tenants, tiers, needle", [
    ([tenant(namespace="ML-A")], None, "tenant ML-A: namespace 'ML-A' is not a DNS-1123 label"),
    ([tenant(namespace="a" * 64)], None, "is not a DNS-1123 label"),
    ([tenant(namespace="ml.a")], None, "is not a DNS-1123 label"),
    ([tenant(namespace=None)], None, "tenant 1: namespace None is not a DNS-1123 label"),
    ([tenant(quota={"nvidia.com/gpu": -1})], None, "tenant ml-a: quota nvidia.com/gpu must be a non-negative integer, got -1"),
    ([tenant(quota={"nvidia.com/gpu": 0.5})], None, "must be a non-negative integer, got 0.5"),
    ([tenant(quota={"nvidia.com/gpu": "one"})], None, "got 'one'"),
    ([tenant(quota={"memory": 1})], None, "quota key memory is not a GPU resource"),
    ([tenant(quota=[1])], None, "quota must be a dict"),
    ([tenant(subjects=[{"kind": "Team", "name": "a"}])], None, "kind 'Team' is not a Kubernetes subject kind"),
    ([tenant(subjects=[{"kind": "user", "name": "a"}])], None, "kind 'user' is not a Kubernetes subject kind"),
    ([tenant(subjects=[{"kind": "User"}])], None, "subjects[0] (User): name must be a non-empty string"),
    ([tenant(subjects=[{"kind": "Group", "name": "a", "namespace": "x"}])], None, "only a ServiceAccount has a namespace"),
    ([tenant(subjects=[{"kind": "ServiceAccount", "name": "a", "namespace": "Bad"}])], None, "namespace 'Bad' is not"),
    ([tenant(subjects=[{"kind": "User", "name": "a"}, {"kind": "User", "name": "a"}])], None, "is listed twice"),
    ([tenant(tier="gold")], None, "tier 'gold' names no declared priority tier (gpu-workload)"),
    ([tenant(tier="gold")], [], "tier 'gold' names no declared priority tier (none declared)"),
    ([tenant(), tenant(quota={"nvidia.com/gpu.shared": 1})], None, "tenants 1 and 2 both claim namespace ml-a"),
    ([tenant(state="gone")], None, "state must be present or absent"),
    ([tenant(delete_namespace=True)], None, "delete_namespace applies only with state: absent"),
    ([tenant(quotas={})], None, "unknown keys quotas"),
    ("ml-a", None, "tenants must be a list"),
    ([tenant()], [{"name": "Gold", "value": 1}], "name 'Gold' is not a PriorityClass name"),
    ([tenant()], [{"name": "system-gpu", "value": 1}], "reserved for the system's PriorityClasses"),
    ([tenant()], [{"name": "gold", "value": 2000000000}], "value must be an integer of at most 1000000000"),
    ([tenant()], [{"name": "gold", "value": "high"}], "value must be an integer"),
    ([tenant()], [{"name": "gold", "value": 1}, {"name": "gold", "value": 2}], "priority tier gold is declared twice"),
    ([tenant()], [{"name": "gold", "value": 1, "preemption_policy": "Always"}], "preemption_policy must be one of"),
])
def test_bad_declarations(tenants, tiers, needle):
    assert needle in problem(tenants, tiers)


@pytest.mark.parametrize("taints, needle", [
    ([{"key": "nvidia.com/gpu", "effect": "Never"}], "taints[0] (nvidia.com/gpu): effect must be one of"),
    ([{"value": "x", "effect": "NoSchedule"}], "taints[0] must be a dict with a key"),
    ({"key": "x"}, "taints must be a list"),
])
def test_bad_taints(taints, needle):
    assert needle in problem([tenant()], taints=taints)


def test_every_problem_is_in_one_message():
    msg = problem([tenant(namespace="A"), tenant(namespace="b", quota={"nvidia.com/gpu": -1}, tier="x")])
    assert msg.startswith("GPU tenants: tenant A: namespace 'A' is not a DNS-1123 label")
    assert "tenant b: quota nvidia.com/gpu must be a non-negative integer, got -1" in msg
    assert "tenant b: tier 'x' names no declared priority tier" in msg


def present(**kw):
    return check([tenant(**kw)])[0][0]


@pytest.mark.parametrize("quotas, allocatable, mode, rows, warning", [
    ([{"nvidia.com/gpu": 4}, {"nvidia.com/gpu": 4}], {"nvidia.com/gpu": 8}, "warn",
     [{"resource": "nvidia.com/gpu", "quota": 8, "allocatable": 8}], None),
    ([{"nvidia.com/gpu": 4}, {"nvidia.com/gpu": 6}], {"nvidia.com/gpu": 8}, "warn",
     [{"resource": "nvidia.com/gpu", "quota": 10, "allocatable": 8}], "nvidia.com/gpu: quotas 10, nodes 8"),
    ([{"nvidia.com/gpu": 40}], {}, "ignore", [{"resource": "nvidia.com/gpu", "quota": 40, "allocatable": 0}], None),
    # a zero quota forbids the resource: nothing to back
    ([{"nvidia.com/mig-1g.10gb": 0}], {"nvidia.com/gpu": 8}, "fail",
     [{"resource": "nvidia.com/mig-1g.10gb", "quota": 0, "allocatable": 0}], None),
    # DRA device counts are not compared
    ([{"gpu.nvidia.com.deviceclass.resource.k8s.io/devices": 4}], {}, "fail", [], None),
])
def test_capacity(quotas, allocatable, mode, rows, warning):
    tenants = [dict(present(), namespace="t%d" % i, quota=q) for i, q in enumerate(quotas)]
    got_rows, warnings = gt.check_capacity(tenants, allocatable, mode)
    assert got_rows == rows
    if warning:
        assert len(warnings) == 1 and warning in warnings[0]
    else:
        assert warnings == []


def test_capacity_refuses_a_resource_no_node_offers_and_fails_over_commitment_when_asked():
    with pytest.raises(InputError, match=r"no node advertises nvidia.com/mig-1g.10gb, .*\(offered: nvidia.com/gpu\)"):
        gt.check_capacity([present(quota={"nvidia.com/mig-1g.10gb": 1})], {"nvidia.com/gpu": 8})
    with pytest.raises(InputError, match="quotas 9, nodes 8"):
        gt.check_capacity([present(quota={"nvidia.com/gpu": 9})], {"nvidia.com/gpu": 8}, "fail")
    # an absent tenant's quota counts for nothing
    assert gt.check_capacity([dict(present(quota={"nvidia.com/gpu": 9}), state="absent")], {}, "fail") == ([], [])


def test_node_allocatable_sums_the_nvidia_resources():
    nodes = [{"status": {"allocatable": {"cpu": "16", "nvidia.com/gpu": "8"}}},
             {"status": {"allocatable": {"nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "4"}}}, {}]
    assert gt.node_allocatable(nodes) == {"nvidia.com/gpu": 9, "nvidia.com/gpu.shared": 4}


def test_rows_allocatable_sums_the_device_plugin_roles_capacity_rows():
    # rows as the gpu_node_capacity filter makes them (k8s_device_plugin_capacity); a row without allocatable
    # (no node found) adds nothing
    rows = [{"node": "h100", "expected": {"nvidia.com/gpu": 8}, "allocatable": {"nvidia.com/gpu": 8}},
            {"node": "t4", "expected": {"nvidia.com/gpu": 4}, "allocatable": {"nvidia.com/gpu": "4"}},
            {"node": "a100", "allocatable": {"nvidia.com/mig-1g.10gb": 7, "cpu": 64}},
            {"node": "", "allocatable": {}}]
    assert gt.rows_allocatable(rows) == {"nvidia.com/gpu": 12, "nvidia.com/mig-1g.10gb": 7}
    # and the capacity check reads them as it reads the nodes
    checked, warnings = gt.check_capacity([present(quota={"nvidia.com/gpu": 13})], gt.rows_allocatable(rows[:2]))
    assert checked == [{"resource": "nvidia.com/gpu", "quota": 13, "allocatable": 12}] and len(warnings) == 1


def test_rows_allocatable_counts_what_the_node_model_expects():
    # check mode on new nodes: the device plugin has not run, so nothing is advertised yet, but the node model says
    # what each node will advertise under its configuration; a node that falls short counts its configuration too
    rows = [{"node": "h100", "expected": {"nvidia.com/gpu": 8}, "allocatable": {}},
            {"node": "t4", "expected": {"nvidia.com/gpu": 4}, "allocatable": {"nvidia.com/gpu": 1}},
            {"node": "a100", "expected": {}, "allocatable": {}}]
    assert gt.rows_allocatable(rows) == {"nvidia.com/gpu": 12}
    checked, warnings = gt.check_capacity([present(quota={"nvidia.com/gpu": 12})], gt.rows_allocatable(rows))
    assert checked == [{"resource": "nvidia.com/gpu", "quota": 12, "allocatable": 12}] and warnings == []


def plan(tenants, namespaces=(), pcs=(), objects=None, tiers=None):
    tenants, tiers, tolerations = check(tenants, tiers)
    objs = {kind: [] for kind in gt.TENANT_KINDS}
    objs.update(objects or {})
    return gt.Plan(tenants, tiers, tolerations, list(namespaces), list(pcs), objs)


def applied(p):
    """The cluster after a plan: its bodies as the server would hold them (creates only)."""
    out = {"namespaces": [], "pcs": [], "objects": {kind: [] for kind in gt.TENANT_KINDS}}
    for c in p.changes:
        assert c.action == "create"
        if c.kind is gt.NAMESPACE:
            out["namespaces"].append(c.body)
        elif c.kind is gt.PRIORITY_CLASS:
            out["pcs"].append(c.body)
        else:
            out["objects"][c.kind].append(c.body)
    return out


def test_plan_of_a_new_tenant_and_its_second_run():
    p = plan([tenant(tier="gpu-workload")])
    assert [c.label for c in p.changes] == ["PriorityClass gpu-workload", "Namespace ml-a",
                                            "ResourceQuota ml-a/gpu-tenant-quota", "Role ml-a/gpu-tenant",
                                            "RoleBinding ml-a/gpu-tenant"]
    ns = p.changes[1].body
    assert ns["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kubegpu.nvidia", "kubegpu.nvidia/tenant": "ml-a"}
    assert json.loads(ns["metadata"]["annotations"][gt.DEFAULT_TOLERATIONS]) == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]
    assert p.changes[2].body["spec"]["hard"] == {"requests.nvidia.com/gpu": "2"}
    assert p.changes[4].body["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "gpu-tenant"}
    # Role rules: namespaced workloads only
    assert all(rule["apiGroups"] != ["rbac.authorization.k8s.io"] for rule in p.changes[3].body["rules"])
    state = applied(p)
    again = plan([tenant(tier="gpu-workload")], state["namespaces"], state["pcs"], state["objects"])
    assert again.changes == [] and not again.changed


def test_plan_patches_only_what_differs():
    state = applied(plan([tenant()]))
    state["namespaces"][0]["metadata"]["labels"]["team"] = "a"  # labels of others stay
    p = plan([tenant(quota={"nvidia.com/gpu": 4, "nvidia.com/gpu.shared": 1})], state["namespaces"], state["pcs"],
             state["objects"])
    assert [(c.action, c.label) for c in p.changes] == [("update", "ResourceQuota ml-a/gpu-tenant-quota")]
    assert p.changes[0].body == {"spec": {"hard": {"requests.nvidia.com/gpu": "4",
                                                   "requests.nvidia.com/gpu.shared": "1"}}}
    p = plan([tenant(quota={"nvidia.com/gpu.shared": 1})], state["namespaces"], state["pcs"], state["objects"])
    assert p.changes[0].body == {"spec": {"hard": {"requests.nvidia.com/gpu": None,
                                                   "requests.nvidia.com/gpu.shared": "1"}}}
    # no subjects any more: the Role and RoleBinding go, binding first
    p = plan([tenant(subjects=[])], state["namespaces"], state["pcs"], state["objects"])
    assert [(c.action, c.label) for c in p.changes] == [("delete", "RoleBinding ml-a/gpu-tenant"),
                                                        ("delete", "Role ml-a/gpu-tenant")]
    # no taints: the annotation is removed
    tenants, tiers = check([tenant()], taints=[])[:2]
    p = gt.Plan(tenants, tiers, [], state["namespaces"], state["pcs"], state["objects"])
    assert [c.body for c in p.changes] == [{"metadata": {"annotations": {gt.DEFAULT_TOLERATIONS: None}}}]


def test_plan_of_absent_tenants_and_undeclared_namespaces():
    state = applied(plan([tenant(), tenant(namespace="ml-b")]))
    p = plan([tenant()], state["namespaces"], state["pcs"], state["objects"])
    assert p.changes == [] and p.undeclared == ["ml-b"]
    p = plan([tenant(), {"namespace": "ml-b", "state": "absent"}], state["namespaces"], state["pcs"],
             state["objects"])
    assert [(c.action, c.label) for c in p.changes] == [
        ("delete", "RoleBinding ml-b/gpu-tenant"), ("delete", "Role ml-b/gpu-tenant"),
        ("delete", "ResourceQuota ml-b/gpu-tenant-quota"), ("update", "Namespace ml-b")]
    assert p.changes[-1].body == {"metadata": {"labels": {"app.kubernetes.io/managed-by": None,
                                                          "kubegpu.nvidia/tenant": None},
                                               "annotations": {gt.DEFAULT_TOLERATIONS: None}}}
    p = plan([{"namespace": "ml-b", "state": "absent", "delete_namespace": True}], state["namespaces"],
             state["pcs"], state["objects"])
    assert p.changes[-1].action == "delete" and p.changes[-1].label == "Namespace ml-b"
    # an absent tenant whose namespace was never a tenant's: nothing to do
    assert plan([{"namespace": "other", "state": "absent", "delete_namespace": True}],
                [{"metadata": {"name": "other"}}], tiers=[]).changes == []


def test_plan_refuses_what_it_cannot_apply():
    with pytest.raises(InputError, match="namespace ml-a is managed by Helm"):
        plan([tenant()], [{"metadata": {"name": "ml-a", "labels": {"app.kubernetes.io/managed-by": "Helm"}}}])
    with pytest.raises(InputError, match="PriorityClass gpu-workload exists with value 7, the tier declares 100000"):
        plan([tenant()], pcs=[{"metadata": {"name": "gpu-workload"}, "value": 7}])
    # the device plugin role's PriorityClass (same value and description): adopted, only the label added
    p = plan([tenant()], pcs=[{"metadata": {"name": "gpu-workload", "labels": {"app.kubernetes.io/name": "x"}},
                               "value": 100000, "description": gt.DEFAULT_TIER_DESCRIPTION,
                               "preemptionPolicy": "PreemptLowerPriority", "globalDefault": False}])
    assert p.changes[0].label == "PriorityClass gpu-workload"
    assert p.changes[0].body == {"metadata": {"labels": {"app.kubernetes.io/managed-by": "kubegpu.nvidia"}}}


class FailingAPI:
    """Answers every request until the ``fail_at``-th, which fails as the API would."""

    def __init__(self, fail_at):
        self.fail_at = fail_at
        self.sent = []

    def request(self, verb, what, method, path, **_kwargs):
        if len(self.sent) == self.fail_at:
            raise K8sError("%s failed: 403 Forbidden: no" % what, status=403)
        self.sent.append((verb, method, path))


def test_apply_plan_sends_each_write_and_names_what_was_and_was_not_applied():
    p = plan([tenant()], tiers=[])
    api = FailingAPI(fail_at=99)
    assert len(gt.apply_plan(api, p)) == 4
    assert api.sent[0] == ("create", "POST", "/api/v1/namespaces")
    assert api.sent[1] == ("create", "POST", "/api/v1/namespaces/ml-a/resourcequotas")
    with pytest.raises(K8sError) as info:
        gt.apply_plan(FailingAPI(fail_at=2), p)
    assert info.value.msg == ("creating Role ml-a/gpu-tenant failed: 403 Forbidden: no; applied: Namespace ml-a, "
                              "ResourceQuota ml-a/gpu-tenant-quota; not applied: Role ml-a/gpu-tenant, "
                              "RoleBinding ml-a/gpu-tenant")
    assert info.value.details["changed"] is True
    assert [c["kind"] for c in info.value.details["not_applied"]] == ["Role", "RoleBinding"]


def test_report_lines():
    tenants, tiers, tolerations = check([tenant(tier="gpu-workload"), {"namespace": "old", "state": "absent",
                                                                       "delete_namespace": True}])
    p = gt.Plan(tenants, tiers, tolerations, [{"metadata": {"name": "gone", "labels": {gt.TENANT_LABEL: "gone"}}}],
                [], {kind: [] for kind in gt.TENANT_KINDS})
    capacity, _warnings = gt.check_capacity(tenants, {"nvidia.com/gpu": 8})
    lines = gt.report(tenants, p, capacity, check_mode=True)
    assert lines[:3] == ["ml-a: nvidia.com/gpu=2; 1 subject(s); tier gpu-workload", "old: absent (namespace deleted)",
                         "capacity nvidia.com/gpu: quotas 2 of 8 allocatable"]
    assert "would create Namespace ml-a" in lines
    assert lines[-1] == ("undeclared tenant namespace gone: kept (declare it with state: absent to remove its "
                         "objects)")
    p = gt.Plan(tenants[1:], {}, [], [], [], {kind: [] for kind in gt.TENANT_KINDS})
    assert gt.report(tenants[1:], p, []) == ["old: absent (namespace deleted)", "no change"]
