"""Unit tests of the label and taint diff logic (no API)."""
import threading
import time

import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import K8sError
from ansible_collections.kubegpu.nvidia.plugins.module_utils import node_labels as nl

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def node(name, labels=None, taints=None, rv="7", addresses=None):
    obj = {"metadata": {"name": name, "labels": labels or {}, "resourceVersion": rv}, "spec": {}, "status": {}}
    if taints is not None:
        obj["spec"]["taints"] = taints
    if addresses:
        obj["status"]["addresses"] = addresses
    return obj


# --- labels -------------------------------------------------------------------------------

def test_diff_labels_adds_new_and_changed_only():
    added, removed = nl.diff_labels({"a": "1", "b": "2"}, {"a": "1", "b": "3", "c": "4"})
    assert added == {"b": "3", "c": "4"}
    assert removed == []


def test_diff_labels_remove_stale_only_under_nvidia_prefix():
    current = {"nvidia.com/mig.capable": "true", "nvidia.com/gpu.count": "4", "team": "ml",
               "feature.node.kubernetes.io/pci-10de.present": "true"}
    added, removed = nl.diff_labels(current, {"nvidia.com/gpu.count": "4"}, remove_stale=True)
    assert added == {}
    assert removed == ["nvidia.com/mig.capable"]


def test_diff_labels_remove_stale_keeps_nvidia_labels_it_does_not_manage():
    # set by k8s_device_plugin, by GFD itself, by the GPU operator: not derived from the facts
    current = {"nvidia.com/device-plugin.config": "t4-shared", "nvidia.com/gfd.timestamp": "1700000000",
               "nvidia.com/mig-1g.5gb.multiprocessors": "14", "nvidia.com/gpu.deploy.driver": "true",
               "nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-1g.5gb.count": "7", "nvidia.com/gpu.count": "4"}
    added, removed = nl.diff_labels(current, {"nvidia.com/gpu.count": "4"}, remove_stale=True)
    assert added == {}
    # the labels of an earlier mig_strategy mixed go (the MIG attribute labels too); what only GFD writes stays
    assert sorted(removed) == ["nvidia.com/mig-1g.5gb.count", "nvidia.com/mig-1g.5gb.multiprocessors",
                               "nvidia.com/mig.strategy"]


def test_diff_labels_remove_stale_accelerator_only_with_a_value_it_writes():
    _added, removed = nl.diff_labels({"accelerator": "nvidia-tesla-t4"}, {}, remove_stale=True)
    assert removed == ["accelerator"]
    _added, removed = nl.diff_labels({"accelerator": "tpu-v4"}, {}, remove_stale=True)
    assert removed == []


def test_diff_labels_without_remove_stale_keeps_old_managed_labels():
    _added, removed = nl.diff_labels({"nvidia.com/mig.capable": "true"}, {})
    assert removed == []


def test_diff_labels_absent_removes_named_keys_that_exist():
    added, removed = nl.diff_labels({"x": "1", "nvidia.com/a": "b"}, {"x": "ignored", "y": "z"}, state="absent")
    assert added == {}
    assert removed == ["x"]


def test_diff_labels_absent_remove_stale_drops_all_managed():
    current = {"x": "1", "nvidia.com/gpu.present": "true", "nvidia.com/mig.capable": "false",
               "accelerator": "nvidia-h100-80gb-hbm3", "nvidia.com/device-plugin.config": "default"}
    _added, removed = nl.diff_labels(current, {}, state="absent", remove_stale=True)
    assert removed == ["accelerator", "nvidia.com/gpu.present", "nvidia.com/mig.capable"]


def test_normalise_labels_stringifies_like_kubernetes():
    expected = {"p": "true", "n": "8", "f": "false", "e": ""}
    assert nl.normalise_labels({"p": True, "n": 8, "f": False, "e": None}) == expected


# --- taints -------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("nvidia.com/gpu=present:NoSchedule", GPU_TAINT),
    ("dedicated:NoExecute", {"key": "dedicated", "value": "", "effect": "NoExecute"}),
])
def test_normalise_taint_parses_kubectl_form(text, expected):
    assert nl.normalise_taint(text) == expected


@pytest.mark.parametrize("bad", ["nocolon", {"key": "k"}, {"effect": "NoSchedule"}, 5,
                                 {"key": "k", "effect": "NoSchedule", "operator": "Exists"}])
def test_normalise_taint_rejects_incomplete(bad):
    with pytest.raises(nl.NodeLabelError):
        nl.normalise_taint(bad)


def test_diff_taints_adds_and_keeps_foreign_taints():
    foreign = {"key": "dedicated", "value": "ml", "effect": "NoExecute", "timeAdded": "2024-01-01T00:00:00Z"}
    new, added, removed = nl.diff_taints([foreign], [GPU_TAINT])
    assert new == [foreign, GPU_TAINT]
    assert added == [GPU_TAINT]
    assert removed == []


def test_diff_taints_unchanged_returns_none():
    assert nl.diff_taints([dict(GPU_TAINT)], [GPU_TAINT]) == (None, [], [])


def test_diff_taints_updates_value_of_same_key_and_effect():
    new, added, removed = nl.diff_taints([{"key": "nvidia.com/gpu", "value": "old", "effect": "NoSchedule"}],
                                         [GPU_TAINT])
    assert new == [GPU_TAINT]
    assert added == [GPU_TAINT]
    assert removed == [{"key": "nvidia.com/gpu", "value": "old", "effect": "NoSchedule"}]


def test_diff_taints_same_key_other_effect_is_another_taint():
    other = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoExecute"}
    new, _added, _removed = nl.diff_taints([other], [GPU_TAINT])
    assert new == [other, GPU_TAINT]


def test_diff_taints_absent_removes_by_key_and_effect_only():
    keep = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    new, added, removed = nl.diff_taints([keep, {"key": "nvidia.com/gpu", "value": "x", "effect": "NoSchedule"}],
                                         [GPU_TAINT], state="absent")
    assert new == [keep]
    assert added == []
    assert removed == [{"key": "nvidia.com/gpu", "value": "x", "effect": "NoSchedule"}]


# --- patch and plan -----------------------------------------------------------------------

def test_build_patch_labels_only_has_no_resource_version():
    assert nl.build_patch({"a": "1"}, ["b"], None, "9") == {"metadata": {"labels": {"a": "1", "b": None}}}


def test_build_patch_with_taints_carries_full_list_and_resource_version():
    patch = nl.build_patch({}, [], [GPU_TAINT], "9")
    assert patch == {"metadata": {"resourceVersion": "9"}, "spec": {"taints": [GPU_TAINT]}}


def test_plan_node_unchanged_has_no_patch():
    plan = nl.plan_node(node("n1", {"a": "1"}, [GPU_TAINT]), {"a": "1"}, [GPU_TAINT])
    assert plan["changed"] is False
    assert plan["patch"] is None


def test_plan_node_reports_before_and_after():
    plan = nl.plan_node(node("n1", {"nvidia.com/mig.capable": "true", "a": "0"}), {"a": "1"}, [GPU_TAINT],
                        remove_stale=True)
    assert plan["changed"] is True
    assert plan["before"] == {"labels": {"a": "0", "nvidia.com/mig.capable": "true"}, "taints": []}
    assert plan["after"] == {"labels": {"a": "1"}, "taints": ["nvidia.com/gpu=present:NoSchedule"]}
    assert plan["patch"]["metadata"]["labels"] == {"a": "1", "nvidia.com/mig.capable": None}


# --- resolution ---------------------------------------------------------------------------

NODES = [
    node("ip-10-0-0-5.ec2.internal", {"kubernetes.io/hostname": "gpu-a"},
         addresses=[{"type": "InternalIP", "address": "10.0.0.5"}, {"type": "ExternalIP", "address": "3.3.3.3"}]),
    node("worker-2", {"kubernetes.io/hostname": "worker-2"}, addresses=[{"type": "InternalIP", "address": "10.0.0.6"}]),
]
BY_NAME = dict((n["metadata"]["name"], n) for n in NODES)


@pytest.mark.parametrize("name, aliases, expected", [
    ("worker-2", [], "worker-2"),
    ("gpu-a", [], "ip-10-0-0-5.ec2.internal"),
    ("lab-host", ["somehost", "10.0.0.5"], "ip-10-0-0-5.ec2.internal"),
])
def test_resolve_node_by_name_hostname_or_internal_ip(name, aliases, expected):
    found, error = nl.resolve_node(BY_NAME, NODES, name, aliases)
    assert error is None
    assert found["metadata"]["name"] == expected


def test_resolve_node_ignores_external_ip_and_names_the_host():
    found, error = nl.resolve_node(BY_NAME, NODES, "lab-host", ["3.3.3.3"])
    assert found is None
    assert "lab-host" in error and "no Kubernetes node" in error


def test_resolve_node_ambiguous():
    found, error = nl.resolve_node(BY_NAME, NODES, "h", ["10.0.0.5", "10.0.0.6"])
    assert found is None
    assert "several" in error


# --- apply_nodes with a fake API ----------------------------------------------------------

class FakeAPI:
    def __init__(self, nodes, patch_errors=None, on_get=None):
        self.nodes = dict((n["metadata"]["name"], n) for n in nodes)
        self.patch_errors = list(patch_errors or [])
        self.calls = []
        self.on_get = on_get

    def list_nodes(self, field_selector=None):
        self.calls.append(("list", field_selector) if field_selector else ("list",))
        if field_selector:
            name = field_selector.split("=", 1)[1]
            return [n for n in self.nodes.values() if n["metadata"]["name"] == name]
        return list(self.nodes.values())

    def get_node(self, name):
        self.calls.append(("get", name))
        return self.on_get(name) if self.on_get else self.nodes[name]

    def patch_node(self, name, body):
        self.calls.append(("patch", name, body))
        if self.patch_errors:
            raise self.patch_errors.pop(0)
        return {}


def req(name, labels=None, taints=None, aliases=None):
    return {"name": name, "aliases": aliases or [], "labels": labels or {}, "taints": taints or []}


def test_apply_nodes_writes_only_nodes_that_differ():
    api = FakeAPI([node("a", {"x": "1"}), node("b", {"x": "0"})])
    results, diffs = nl.apply_nodes(api, [req("a", {"x": "1"}), req("b", {"x": "1"})])
    assert [c[0] for c in api.calls] == ["list", "patch"]
    assert api.calls[1][1] == "b"
    assert [r["changed"] for r in results] == [False, True]
    assert [d["before_header"] for d in diffs] == ["node/b"]


def test_apply_nodes_check_mode_writes_nothing():
    api = FakeAPI([node("a")])
    results, _diffs = nl.apply_nodes(api, [req("a", {"x": "1"})], check_mode=True)
    assert api.calls == [("list", "metadata.name=a")]
    assert results[0]["changed"] is True
    assert results[0]["added"] == {"x": "1"}


def test_apply_nodes_returns_the_nodes_only_when_asked():
    # labels after the run (written, and in check mode as they would be); allocatable, addresses, node info
    # and annotations as listed
    addresses = [{"type": "InternalIP", "address": "10.0.0.1"}]
    listed = node("a", {"keep": "1", "nvidia.com/mig.strategy": "single"}, addresses=addresses)
    listed["status"]["allocatable"] = {"cpu": "8", "nvidia.com/gpu": "4"}
    listed["status"]["nodeInfo"] = {"bootID": "b-1", "kubeletVersion": "v1.31.2"}
    listed["metadata"]["annotations"] = {"kubegpu.nvidia/gpu-validation": "{}"}
    wanted = req("a", {"nvidia.com/gpu.present": "true"})
    for check_mode in (False, True):
        api = FakeAPI([listed])
        (plain,), _diffs = nl.apply_nodes(api, [wanted], remove_stale=True, check_mode=check_mode)
        assert not {"labels", "allocatable", "addresses", "node_info", "annotations"} & set(plain)
        (result,), _diffs = nl.apply_nodes(api, [wanted], remove_stale=True, check_mode=check_mode, return_nodes=True)
        assert result["labels"] == {"keep": "1", "nvidia.com/gpu.present": "true"}
        assert result["allocatable"] == {"cpu": "8", "nvidia.com/gpu": "4"}
        assert result["addresses"] == addresses
        assert result["node_info"] == {"bootID": "b-1", "kubeletVersion": "v1.31.2"}
        assert result["annotations"] == {"kubegpu.nvidia/gpu-validation": "{}"}
        assert result["removed"] == ["nvidia.com/mig.strategy"]


def test_apply_nodes_unknown_host_fails_before_any_write():
    api = FakeAPI([node("a")])
    with pytest.raises(nl.NodeMatchError, match="host ghost"):
        nl.apply_nodes(api, [req("a", {"x": "1"}), req("ghost", {"x": "1"})])
    assert api.calls == [("list",)]


def test_apply_nodes_two_hosts_one_node_fails():
    api = FakeAPI([node("a", addresses=[{"type": "InternalIP", "address": "10.1.1.1"}])])
    with pytest.raises(nl.NodeMatchError, match="both resolve"):
        nl.apply_nodes(api, [req("a"), req("other", aliases=["10.1.1.1"])])


def test_apply_nodes_conflict_rereads_and_keeps_concurrent_taint():
    concurrent = {"key": "maintenance", "value": "", "effect": "NoSchedule"}
    fresh = node("a", taints=[concurrent], rv="8")
    api = FakeAPI([node("a", rv="7")], patch_errors=[K8sError("conflict", status=409)], on_get=lambda n: fresh)
    results, _diffs = nl.apply_nodes(api, [req("a", taints=[GPU_TAINT])])
    patches = [c for c in api.calls if c[0] == "patch"]
    assert [c[0] for c in api.calls] == ["list", "patch", "get", "patch"]
    assert api.calls[0] == ("list", "metadata.name=a")
    assert patches[1][2] == {"metadata": {"resourceVersion": "8"}, "spec": {"taints": [concurrent, GPU_TAINT]}}
    assert results[0]["taints"] == [concurrent, GPU_TAINT]


def test_apply_nodes_conflict_gives_up_after_bound():
    api = FakeAPI([node("a")], patch_errors=[K8sError("conflict", status=409)] * 10)
    with pytest.raises(nl.NodeLabelRunFailed, match="gave up after 3"):
        nl.apply_nodes(api, [req("a", taints=[GPU_TAINT])], conflict_retries=2)


def test_apply_nodes_failure_keeps_results_so_far():
    api = FakeAPI([node("a"), node("b")])

    def patch(name, body):
        api.calls.append(("patch", name, body))
        if name == "b":
            raise K8sError("patching node b failed: 422 Unprocessable Entity: invalid value", status=422)
        return {}
    api.patch_node = patch
    with pytest.raises(nl.NodeLabelRunFailed) as info:
        nl.apply_nodes(api, [req("a", {"x": "1"}), req("b", {"x": "2"})])
    assert "rejected the labels or taints of node b" in info.value.msg
    assert [r["name"] for r in info.value.results] == ["a"]


def test_apply_nodes_single_host_by_address_lists_all_nodes_after_selector_misses():
    api = FakeAPI([node("n1", addresses=[{"type": "InternalIP", "address": "10.1.1.1"}])])
    results, _diffs = nl.apply_nodes(api, [req("host1", {"x": "1"}, aliases=["10.1.1.1"])])
    assert [c[:2] for c in api.calls] == [("list", "metadata.name=host1"), ("list",), ("patch", "n1")]
    assert results[0]["host"] == "host1" and results[0]["name"] == "n1"


# --- apply_nodes writing several nodes at once ----------------------------------------------

class ThreadedAPI(FakeAPI):
    """FakeAPI whose patch_node runs ``behave(name)`` (from the worker threads) and counts writes in flight."""

    def __init__(self, nodes, behave=None, on_get=None):
        super(ThreadedAPI, self).__init__(nodes, on_get=on_get)
        self.behave = behave
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0
        self.threads = set()

    def patch_node(self, name, body):
        with self.lock:
            self.calls.append(("patch", name, body))
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.threads.add(threading.current_thread().name)
        try:
            if self.behave:
                self.behave(name)
        finally:
            with self.lock:
                self.in_flight -= 1
        return None


def names(count):
    return ["n%d" % i for i in range(count)]


def test_apply_nodes_parallel_writes_at_once_and_keeps_input_order():
    # Four writes wait for each other: they only get through when all four are sent at the same time.
    barrier = threading.Barrier(4, timeout=10)
    # node n0 is already right (no write), n1..n4 differ; after the barrier, n1 finishes last
    n4_done = threading.Event()

    def behave(name):
        barrier.wait()
        if name == "n1":
            n4_done.wait(10)
        elif name == "n4":
            n4_done.set()
    api = ThreadedAPI([node("n0", {"x": "1"})] + [node(n) for n in names(5)[1:]], behave=behave)
    before = threading.active_count()
    results, diffs = nl.apply_nodes(api, [req(n, {"x": "1"}) for n in names(5)], concurrency=4)
    assert api.most_in_flight == 4
    assert [r["name"] for r in results] == names(5)
    assert [r["changed"] for r in results] == [False, True, True, True, True]
    assert [d["before_header"] for d in diffs] == ["node/n%d" % i for i in range(1, 5)]
    assert sorted(c[1] for c in api.calls if c[0] == "patch") == names(5)[1:]
    assert threading.active_count() == before  # no worker left behind


def test_apply_nodes_concurrency_one_writes_one_after_the_other_in_order():
    api = ThreadedAPI([node(n) for n in names(5)])
    results, _diffs = nl.apply_nodes(api, [req(n, {"x": "1"}) for n in names(5)], concurrency=1)
    assert api.most_in_flight == 1
    assert api.threads == {threading.current_thread().name}
    assert [c[1] for c in api.calls if c[0] == "patch"] == names(5)
    assert [r["name"] for r in results] == names(5)


def test_apply_nodes_parallel_reports_the_first_failure_in_input_order():
    # all four writes are under way together; n3 fails first in time, n1 fails after it: n1 is reported
    barrier = threading.Barrier(4, timeout=10)
    n3_failed = threading.Event()

    def behave(name):
        barrier.wait()
        if name == "n3":
            n3_failed.set()
            raise K8sError("patching node n3 failed: 500 Internal Server Error", status=500)
        if name == "n1":
            n3_failed.wait(10)
            raise K8sError("patching node n1 failed: 403 Forbidden", status=403)
    api = ThreadedAPI([node(n) for n in names(4)], behave=behave)
    before = threading.active_count()
    with pytest.raises(nl.NodeLabelRunFailed) as info:
        nl.apply_nodes(api, [req(n, {"x": "1"}) for n in names(4)], concurrency=4)
    assert info.value.msg == "patching node n1 failed: 403 Forbidden"
    # n0 (before the failed node) and n2 (after it, written before the run stopped)
    assert [(r["name"], r["changed"]) for r in info.value.results] == [("n0", True), ("n2", True)]
    assert threading.active_count() == before


def test_apply_nodes_parallel_starts_no_write_after_a_failure():
    n1_sent = threading.Event()
    n0_failed = threading.Event()

    def behave(name):
        if name == "n0":
            n1_sent.wait(10)  # n1 is under way while n0 fails
            n0_failed.set()
            raise K8sError("patching node n0 failed: 422 Unprocessable Entity: bad", status=422)
        n1_sent.set()
        n0_failed.wait(10)
        time.sleep(0.2)  # n0's worker stops the run meanwhile
    api = ThreadedAPI([node(n) for n in names(20)], behave=behave)
    with pytest.raises(nl.NodeLabelRunFailed) as info:
        nl.apply_nodes(api, [req(n, {"x": "1"}) for n in names(20)], concurrency=2)
    assert "rejected the labels or taints of node n0" in info.value.msg
    assert sorted(c[1] for c in api.calls if c[0] == "patch") == ["n0", "n1"]
    assert [r["name"] for r in info.value.results] == ["n1"]


def test_apply_nodes_parallel_conflict_rereads_that_node_only():
    concurrent = {"key": "maintenance", "value": "", "effect": "NoSchedule"}
    fresh = {"n2": node("n2", taints=[concurrent], rv="9")}
    conflicts = {"n2": 1}
    lock = threading.Lock()

    def behave(name):
        with lock:
            if conflicts.get(name):
                conflicts[name] -= 1
                raise K8sError("conflict", status=409)
    api = ThreadedAPI([node(n) for n in names(4)], behave=behave, on_get=lambda name: fresh[name])
    results, _diffs = nl.apply_nodes(api, [req(n, taints=[GPU_TAINT]) for n in names(4)], concurrency=4)
    patches = [c for c in api.calls if c[0] == "patch"]
    assert [c for c in api.calls if c[0] == "get"] == [("get", "n2")]
    assert len(patches) == 5
    last_n2 = [c[2] for c in patches if c[1] == "n2"][-1]
    assert last_n2 == {"metadata": {"resourceVersion": "9"}, "spec": {"taints": [concurrent, GPU_TAINT]}}
    assert [r["taints"] for r in results] == [[GPU_TAINT], [GPU_TAINT], [concurrent, GPU_TAINT], [GPU_TAINT]]


def test_apply_nodes_check_mode_starts_no_worker():
    api = ThreadedAPI([node(n) for n in names(3)])
    results, diffs = nl.apply_nodes(api, [req(n, {"x": "1"}) for n in names(3)], check_mode=True, concurrency=8)
    assert [c[0] for c in api.calls] == ["list"]
    assert [r["changed"] for r in results] == [True, True, True] and len(diffs) == 3


# --- Kubernetes' rules for labels and taints, checked for the whole batch before any request ---------------
# Cases from Kubernetes' own tests: k8s.io/apimachinery pkg/util/validation/validation_test.go
# (TestIsQualifiedName, TestIsValidLabelValue; in kubernetes/kubernetes at
# staging/src/k8s.io/apimachinery/pkg/util/validation/validation_test.go).
QUALIFIED_NAME_GOOD = [
    "simple", "now-with-dashes", "1-starts-with-num", "1234", "simple/simple", "now-with-dashes/simple",
    "now-with-dashes/now-with-dashes", "now.with.dots/simple", "now-with.dashes-and.dots/simple", "1-num.2-num/3-num",
    "1234/5678", "1.2.3.4/5678", "Uppercase_Is_OK_123", "example.com/Uppercase_Is_OK_123", "requests.storage-foo",
    "a" * 63, "a" * 253 + "/" + "b" * 63,
]
QUALIFIED_NAME_BAD = [
    "nospecialchars%^=@", "cantendwithadash-", "-cantstartwithadash-", "only/one/slash", "Example.com/abc",
    "example_com/abc", "example.com/", "/simple", "a" * 64, "a" * 254 + "/abc",
]
LABEL_VALUE_GOOD = ["simple", "now-with-dashes", "1-starts-with-num", "end-with-num-1", "1234", "a" * 63, ""]
LABEL_VALUE_BAD = [
    "nospecialchars%^=@", "Tama-nui-te-r\u0101.is.M\u0101ori.sun", "\\backslashes\\are\\bad", "-starts-with-dash",
    "ends-with-dash-", ".starts.with.dot", "ends.with.dot.", "a" * 64,
]


@pytest.mark.parametrize("name", QUALIFIED_NAME_GOOD)
def test_qualified_names_kubernetes_accepts(name):
    assert nl.qualified_name_problems(name) == []


@pytest.mark.parametrize("name", QUALIFIED_NAME_BAD)
def test_qualified_names_kubernetes_refuses(name):
    assert nl.qualified_name_problems(name)


@pytest.mark.parametrize("value", LABEL_VALUE_GOOD)
def test_label_values_kubernetes_accepts(value):
    assert nl.label_value_problems(value) == []


@pytest.mark.parametrize("value", LABEL_VALUE_BAD)
def test_label_values_kubernetes_refuses(value):
    assert nl.label_value_problems(value)


@pytest.mark.parametrize("name, problem", [
    ("example.com/", "name part must be non-empty"),
    ("/simple", "prefix part must be non-empty"),
    ("Example.com/abc", "prefix part must be a lowercase DNS subdomain"),
    ("a" * 254 + "/abc", "prefix part must be no more than 253 characters"),
    ("a" * 64, "name part must be no more than 63 characters"),
    ("only/one/slash", "at most one '/'"),
])
def test_qualified_name_problems_say_which_rule(name, problem):
    assert any(problem in p for p in nl.qualified_name_problems(name)), nl.qualified_name_problems(name)


def test_a_batch_with_one_bad_label_or_taint_writes_nothing_and_lists_every_problem():
    # three nodes, only the third one wrong: nothing may be written (the API would take the first two)
    api = FakeAPI([node("a"), node("b"), node("c")])
    batch = [req("a", {"x": "1"}), req("b", {"x": "1"}),
             req("c", {"x": "1", "example.com/zone": "-eu-", "bad key": "y"},
                 taints=[{"key": "k", "value": "v", "effect": "Sometimes"}, {"key": "k/", "value": "", "effect": "NoSchedule"}])]
    with pytest.raises(nl.NodeLabelError) as info:
        nl.apply_nodes(api, batch)
    assert api.calls == []
    msg = info.value.msg
    assert msg.startswith("invalid labels, taints or facts, nothing was written: node c: ")
    for part in ('label key "bad key": name part must consist of', 'label "example.com/zone" value "-eu-": must be empty',
                 'taint "k=v:Sometimes": effect must be one of NoSchedule, PreferNoSchedule, NoExecute',
                 'taint "k/:NoSchedule" key: name part must be non-empty'):
        assert part in msg
    assert info.value.kind == "input" and "\n" not in msg


def test_a_problem_shared_by_many_nodes_is_listed_once():
    batch = [req("n%d" % i, {"bad key": "1"}) for i in range(6)]
    msg = nl.problems_message(nl.request_problems(batch))
    assert msg == ("invalid labels, taints or facts, nothing was written: nodes n0, n1, n2 and 3 more: label key "
                   "\"bad key\": name part must consist of alphanumeric characters, '-', '_' or '.', starting and "
                   "ending with an alphanumeric character")


def test_state_absent_checks_keys_but_not_values():
    batch = [req("a", {"nvidia.com/gpu.present": "-ignored-"}, taints=[{"key": "k", "value": "-", "effect": "NoSchedule"}])]
    assert nl.request_problems(batch, state="absent") == []
    assert len(nl.request_problems(batch, state="present")) == 2
    assert nl.request_problems([req("a", {"bad key": ""})], state="absent")


def test_the_same_taint_twice_with_two_values_is_a_problem():
    taints = [{"key": "k", "value": "a", "effect": "NoSchedule"}, {"key": "k", "value": "b", "effect": "NoSchedule"}]
    (problem, node_name), = nl.request_problems([req("a", taints=taints)])
    assert "k:NoSchedule given twice" in problem and node_name == "a"
    other_effect = [{"key": "k", "value": "a", "effect": "NoSchedule"}, {"key": "k", "value": "b", "effect": "NoExecute"}]
    assert nl.request_problems([req("a", taints=other_effect)]) == []


# --- the shape of nvidia_gpu facts ----------------------------------------------------------
GOOD_FACTS = {"present": True, "count": 8, "source": "nvml", "driver_version": "535.183.01",
              "cuda_driver_version": "12.2", "machine": "DGX",
              "devices": [{"name": "NVIDIA A100-SXM4-40GB", "product": "NVIDIA-A100", "memory_mib": 40960,
                           "compute_capability": "8.0", "count": 8,
                           "mig": {"current": 1, "pending": 1,
                                   "devices": [{"profile": "3g.20gb", "memory_mib": 19968}]}}]}


@pytest.mark.parametrize("facts", [None, {}, GOOD_FACTS, {"nvidia_gpu": GOOD_FACTS},
                                   {"present": False, "count": 0, "devices": []},
                                   dict(GOOD_FACTS, cuda_driver_version=12.2),
                                   {"present": True, "devices": [{"name": "T4", "compute_capability": [7, 5],
                                                                  "mig": None}]}])
def test_facts_of_the_right_shape(facts):
    assert nl.facts_problems(facts) == []


@pytest.mark.parametrize("facts, problem", [
    (["H100"], "must be a mapping (the nvidia_gpu facts), not a list"),
    ({"nvidia_gpu": "yes"}, "nvidia_gpu must be a mapping (the GPU facts), not the string \"yes\""),
    (dict(GOOD_FACTS, devices=["H100", "H100"]), "devices[0] must be a mapping (one GPU's facts), not the string \"H100\""),
    (dict(GOOD_FACTS, count="8"), "count must be a whole number, not the string \"8\""),
    (dict(GOOD_FACTS, present="yes"), "present must be true or false, not the string \"yes\""),
    (dict(GOOD_FACTS, devices="H100 x 8"), "devices must be a list of GPUs, not the string \"H100 x 8\""),
    (dict(GOOD_FACTS, devices=[dict(GOOD_FACTS["devices"][0], memory_mib="40GB")]),
     "devices[0].memory_mib must be a number of MiB, not the string \"40GB\""),
    (dict(GOOD_FACTS, devices=[dict(GOOD_FACTS["devices"][0], count=0)]),
     "devices[0].count must be a whole number of at least 1, not the number 0"),
    (dict(GOOD_FACTS, devices=[dict(GOOD_FACTS["devices"][0], mig={"current": "on"})]),
     "devices[0].mig.current must be 0, 1 or null, not the string \"on\""),
    (dict(GOOD_FACTS, devices=[dict(GOOD_FACTS["devices"][0], mig={"current": 1, "devices": ["3g.20gb"]})]),
     "devices[0].mig.devices[0] must be a mapping (one MIG device), not the string \"3g.20gb\""),
    (dict(GOOD_FACTS, devices=[dict(GOOD_FACTS["devices"][0], compute_capability={"major": 8})]),
     "devices[0].compute_capability must be a version string such as \"9.0\", not a mapping"),
    (dict(GOOD_FACTS, devices=[None]), "devices[0] must be a mapping (one GPU's facts), not null"),
])
def test_facts_of_the_wrong_shape_name_the_field(facts, problem):
    assert problem in nl.facts_problems(facts)
