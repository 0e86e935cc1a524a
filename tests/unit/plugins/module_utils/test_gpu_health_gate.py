"""The health gate's decisions, one node or one batch at a time (module_utils/gpu_health_gate.py).

Taint identity and the merge of spec.taints follow kubernetes/kubernetes
pkg/util/taints/taints.go (a taint is matched by key and effect; the list is replaced whole), the key and value
rules staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go (IsQualifiedName, IsValidLabelValue) and
the effects pkg/apis/core/validation/validation.go validateTaintEffect.
"""
import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_health_gate as gate
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import ApiError, InputError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.node_labels import NodeMatchError

TAINT = dict(gate.DEFAULT_TAINT)
OURS = {"key": "nvidia.com/gpu.health", "value": "unhealthy", "effect": "NoSchedule", "timeAdded": "2026-11-27T00:00:00Z"}
GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
UNHEALTHY = {"severity": "unhealthy", "action": "reset_gpu", "reason": "GPU 1: 2 uncorrectable ECC errors"}
HEALTHY = {"severity": "healthy", "action": "none", "reason": None}
DEGRADED = {"severity": "degraded", "action": "none", "reason": "GPU 5: PCIe link x8 of x16"}
UNKNOWN = {"severity": "unknown", "action": "none", "reason": "no GPU found"}


def node(name="gpu01", label=None, taints=(), unschedulable=False, annotations=None):
    labels = {"kubernetes.io/hostname": name}
    if label:
        labels[gate.HEALTH_LABEL] = label
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations or {}, "resourceVersion": "7"},
            "spec": {"taints": [dict(t) for t in taints], "unschedulable": unschedulable}}


@pytest.mark.parametrize("current, health, taint, label, new_taints", [
    # unhealthy, untainted: our taint added beside the others, the label set
    (node(taints=[GPU]), UNHEALTHY, "added", "unhealthy", [GPU, TAINT]),
    # unhealthy and already ours: nothing
    (node(label="unhealthy", taints=[GPU, OURS]), UNHEALTHY, "kept", "unhealthy", None),
    # healthy again: only our taint removed (same key and value), every other kept
    (node(label="unhealthy", taints=[GPU, OURS]), HEALTHY, "removed", "healthy", [GPU]),
    # degraded is not gated: our taint removed too
    (node(label="unhealthy", taints=[OURS]), DEGRADED, "removed", "degraded", []),
    # an earlier run's taint with another effect is ours (key and value): replaced by the configured one
    (node(label="unhealthy", taints=[dict(OURS, effect="NoExecute")]), UNHEALTHY, "added", "unhealthy", [TAINT]),
    # healthy and never tainted: the label only
    (node(taints=[GPU]), HEALTHY, "none", "healthy", None),
])
def test_plan_taints_untaints_keeps(current, health, taint, label, new_taints):
    plan = gate.plan_gate(current, health, TAINT)
    assert plan["taint"] == taint
    assert plan["label"][1] == label
    patch = plan["patch"] or {}
    if new_taints is None:
        assert "taints" not in patch.get("spec", {})
    else:
        assert [{k: t[k] for k in ("key", "value", "effect")} for t in patch["spec"]["taints"]] == new_taints
        # the taint list is replaced whole: the write carries resourceVersion (409 on a concurrent change)
        assert patch["metadata"]["resourceVersion"] == "7"


def test_plan_nothing_to_do_is_no_write():
    plan = gate.plan_gate(node(label="healthy", taints=[GPU]), HEALTHY, TAINT)
    assert plan["changed"] is False and plan["patch"] is None


def test_foreign_taint_same_key_other_value_is_left_and_reported():
    foreign = {"key": "nvidia.com/gpu.health", "value": "maintenance", "effect": "NoSchedule"}
    plan = gate.plan_gate(node(taints=[foreign]), UNHEALTHY, TAINT)
    assert plan["taint"] == "foreign"
    assert plan["foreign_taint"] == "nvidia.com/gpu.health=maintenance:NoSchedule"
    assert "taints" not in (plan["patch"].get("spec") or {})
    assert plan["patch"]["metadata"]["labels"] == {gate.HEALTH_LABEL: "unhealthy"}
    assert "someone else's" in plan["why"]
    # healthy again: someone else's taint is not ours to remove
    again = gate.plan_gate(node(label="unhealthy", taints=[foreign]), HEALTHY, TAINT)
    assert again["taint"] == "none" and "taints" not in (again["patch"].get("spec") or {})


def test_unknown_health_leaves_the_node_as_it_is():
    plan = gate.plan_gate(node(label="unhealthy", taints=[OURS]), UNKNOWN, TAINT)
    assert plan["changed"] is False and plan["taint"] == "kept"
    assert plan["why"] == "health unknown (no GPU found): left as it is"


def test_cordon_only_with_cordon_and_uncordon_only_what_the_gate_cordoned():
    plan = gate.plan_gate(node(), UNHEALTHY, TAINT, cordon=True)
    assert plan["patch"]["spec"]["unschedulable"] is True
    assert plan["patch"]["metadata"]["annotations"] == {gate.CORDON_ANNOTATION: "true"}
    assert plan["cordon"] == "cordoned"
    back = gate.plan_gate(node(label="unhealthy", taints=[OURS], unschedulable=True,
                               annotations={gate.CORDON_ANNOTATION: "true"}), HEALTHY, TAINT, cordon=True)
    assert back["patch"]["spec"]["unschedulable"] is False and back["cordon"] == "uncordoned"
    assert back["patch"]["metadata"]["annotations"] == {gate.CORDON_ANNOTATION: None}
    # cordoned by someone else (no annotation): stays cordoned
    other = gate.plan_gate(node(label="unhealthy", taints=[OURS], unschedulable=True), HEALTHY, TAINT, cordon=True)
    assert "unschedulable" not in other["patch"]["spec"] and other["cordon"] is None


def plans(severities, tainted=()):
    return [dict(gate.plan_gate(node("n%d" % i, taints=[OURS] if i in tainted else []),
                                {"severity": s, "reason": "r%d" % i}, TAINT)) for i, s in enumerate(severities)]


@pytest.mark.parametrize("severities, tainted, limit, stops", [
    (["unhealthy", "healthy", "healthy", "healthy"], (), 30, False),    # 25 % <= 30 %
    (["unhealthy", "unhealthy", "healthy", "healthy"], (), 30, True),   # 50 % > 30 %
    (["unhealthy", "unhealthy", "healthy", "healthy"], (0,), 30, False),  # one already tainted: 25 % becoming
    (["unhealthy", "unhealthy", "healthy", "healthy"], (), 50, False),  # exactly the limit passes
    (["unhealthy"], (), 100, False),
    (["unhealthy", "healthy"], (), 0, True),
    (["healthy", "degraded"], (), 0, False),
])
def test_guard(severities, tainted, limit, stops):
    problem = gate.guard_problem(plans(severities, tainted), limit)
    assert bool(problem) is stops


def test_guard_message_names_nodes_and_share():
    problem = gate.guard_problem(plans(["unhealthy", "unhealthy", "unhealthy", "healthy"]), 30)
    assert problem.startswith("health gate stopped before any write: 3 of 4 GPU nodes (75%) would become unhealthy "
                              "in this run, more than max_unhealthy_percent 30%: n0 (r0), n1 (r1), n2 (r2).")
    assert "\n" not in problem


@pytest.mark.parametrize("taint, percent, message", [
    ({"key": "nvidia.com/gpu health"}, 30, "taint key 'nvidia.com/gpu health': name part must consist of"),
    ({"key": "Bad_Prefix.io/x"}, 30, "taint key 'Bad_Prefix.io/x': prefix part must be a lowercase DNS subdomain"),
    ({"effect": "NoRun"}, 30, "taint effect must be one of NoSchedule, PreferNoSchedule, NoExecute, got 'NoRun'"),
    ({"value": ""}, 30, "taint value must not be empty"),
    ({}, 101, "max_unhealthy_percent must be a number from 0 to 100, got 101"),
    ({}, -1, "max_unhealthy_percent must be a number from 0 to 100, got -1"),
    ({"colour": "red"}, 30, "taint: unknown field colour"),
])
def test_bad_input_is_one_line(taint, percent, message):
    with pytest.raises(InputError) as err:
        gate.check_options(taint, percent, [{"name": "gpu01", "health": HEALTHY}])
    assert message in err.value.msg and "\n" not in err.value.msg


def test_bad_health_is_one_line():
    with pytest.raises(InputError) as err:
        gate.check_options({}, 30, [{"name": "gpu01", "health": {}}])
    assert err.value.msg.startswith("node gpu01: health.severity must be one of healthy, degraded, unhealthy, unknown")


class FakeAPI:
    """Nodes in a dict; counts requests; a 409 on the first patch of the names in ``conflict``."""

    def __init__(self, nodes, conflict=()):
        self.nodes = dict((n["metadata"]["name"], n) for n in nodes)
        self.counts = {}
        self.conflict = set(conflict)
        self.patches = []

    def _count(self, verb):
        self.counts[verb] = self.counts.get(verb, 0) + 1

    def list_nodes(self, field_selector=None):
        self._count("list")
        return list(self.nodes.values())

    def get_node(self, name):
        self._count("get")
        return self.nodes[name]

    def patch_node(self, name, body):
        self._count("patch")
        if name in self.conflict:
            self.conflict.discard(name)
            # someone else added a taint meanwhile
            self.nodes[name]["spec"]["taints"].append({"key": "other", "value": "x", "effect": "NoSchedule"})
            raise ApiError("patching node %s failed: conflict" % name, status=409)
        self.patches.append((name, body))


def test_run_gate_one_list_one_write_per_changed_node():
    api = FakeAPI([node("a"), node("b", label="healthy"), node("c", label="unhealthy", taints=[OURS])])
    req = [{"name": "a", "health": UNHEALTHY}, {"name": "b", "health": HEALTHY}, {"name": "c", "health": HEALTHY}]
    results, diffs = gate.run_gate(api, req, TAINT, 50)
    assert api.counts == {"list": 1, "patch": 2}
    assert [r["taint"] for r in results] == ["added", "none", "removed"]
    assert [d["before_header"] for d in diffs] == ["node/a", "node/c"]


def test_run_gate_conflict_rereads_and_keeps_the_new_taint():
    api = FakeAPI([node("a", taints=[GPU])], conflict=["a"])
    results, _diffs = gate.run_gate(api, [{"name": "a", "health": UNHEALTHY}], TAINT, 100)
    assert api.counts == {"list": 1, "patch": 2, "get": 1}
    written = api.patches[-1][1]["spec"]["taints"]
    assert [t["key"] for t in written] == ["nvidia.com/gpu", "other", "nvidia.com/gpu.health"]
    assert results[0]["changed"] is True


def test_run_gate_guard_and_node_match_write_nothing():
    api = FakeAPI([node("a"), node("b")])
    with pytest.raises(gate.GateGuardError):
        gate.run_gate(api, [{"name": "a", "health": UNHEALTHY}, {"name": "b", "health": UNHEALTHY}], TAINT, 30)
    with pytest.raises(NodeMatchError):
        gate.run_gate(api, [{"name": "zz", "health": UNHEALTHY}], TAINT, 100)
    assert "patch" not in api.counts


def test_check_mode_writes_nothing_and_says_would():
    api = FakeAPI([node("a")])
    results, diffs = gate.run_gate(api, [{"name": "a", "health": UNHEALTHY}], TAINT, 100, check_mode=True)
    assert "patch" not in api.counts and results[0]["changed"] is True
    assert diffs[0]["after"]["taints"] == ["nvidia.com/gpu.health=unhealthy:NoSchedule"]
    assert gate.report(results, check_mode=True) == [
        "a: would taint nvidia.com/gpu.health=unhealthy:NoSchedule (unhealthy: GPU 1: 2 uncorrectable ECC errors); "
        "label nvidia.com/gpu.health=unhealthy"]


def test_gate_nodes_from_hosts_facts():
    hostvars = {
        "gpu01": {"ansible_facts": {"nvidia_gpu": {"health": UNHEALTHY}, "hostname": "ip-10-0-0-1",
                                    "default_ipv4": {"address": "10.0.0.1"}}},
        "gpu02": {"kubegpu_node_name": "node-b", "ansible_facts": {"nvidia_gpu": {"present": True}}},
    }
    nodes = gate.gate_nodes(["gpu01", "gpu02"], hostvars)
    assert nodes[0] == {"name": "gpu01", "host": "gpu01", "aliases": ["ip-10-0-0-1", "10.0.0.1"], "health": UNHEALTHY}
    # no health read: unknown, which the gate leaves as it is
    assert nodes[1]["name"] == "node-b" and nodes[1]["health"]["severity"] == "unknown"
    assert gate.plan_gate(node("node-b", label="unhealthy", taints=[OURS]), nodes[1]["health"], TAINT)["changed"] is False
