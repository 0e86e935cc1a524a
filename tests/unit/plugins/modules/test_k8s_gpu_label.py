"""Unit tests of the k8s_gpu_label module's branches (API replaced by a fake)."""
import json
import threading

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.kubegpu.nvidia.plugins.modules import k8s_gpu_label as mod
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import K8sError

T4_FACTS = {
    "present": True, "count": 1, "source": "nvml", "driver_version": "535.183.01", "cuda_driver_version": "12.2",
    "machine": "lab", "devices": [{"index": 0, "name": "Tesla T4", "product": "Tesla-T4", "memory_mib": 15360,
                                   "compute_capability": "7.5", "family": "turing",
                                   "mig": {"current": None, "pending": None}}],
}
BASE = {"mig_strategy": "none", "sharing_strategy": "none", "replicas": 1, "labels": {}, "facts": None,
        "taints": [], "node": None, "nodes": None}


class Exit(Exception):
    pass


@pytest.fixture
def run(monkeypatch):
    """Run main() with args against a fake API; return (result, failed, api)."""
    def _run(args, nodes=(), errors=None, check_mode=False, diff=False):
        api = FakeNodeAPI(list(nodes), errors or {})

        def get_api_client(params, pool_size=None):
            api.pool_size = pool_size
            return object()
        monkeypatch.setattr(mod, "get_api_client", get_api_client)
        monkeypatch.setattr(mod, "NodeAPI", lambda client, **kwargs: api.configure(**kwargs))
        out = {}

        def exit_json(self, **kw):
            out.update(kw)
            raise Exit()

        def fail_json(self, **kw):
            out.update(kw, failed=True)
            raise Exit()
        monkeypatch.setattr(mod.AnsibleModule, "exit_json", exit_json)
        monkeypatch.setattr(mod.AnsibleModule, "fail_json", fail_json)
        args = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff)
        with patch_module_args(args):
            with pytest.raises(Exit):
                mod.main()
        return out, api
    return _run


class FakeNodeAPI:
    def __init__(self, nodes, errors):
        self.nodes = nodes
        self.errors = errors
        self.counts = {}
        self.patches = []
        self.threads = set()
        self.pool_size = None
        self.options = None

    def configure(self, **kwargs):
        self.options = kwargs
        return self

    def _count(self, verb):
        self.counts[verb] = self.counts.get(verb, 0) + 1

    def list_nodes(self, field_selector=None):
        self._count("list")
        if "list" in self.errors:
            raise self.errors["list"]
        if field_selector:
            return [n for n in self.nodes if "metadata.name=" + n["metadata"]["name"] == field_selector]
        return self.nodes

    def get_node(self, name):
        self._count("get")
        return [n for n in self.nodes if n["metadata"]["name"] == name][0]

    def patch_node(self, name, body):
        self._count("patch")
        self.patches.append((name, json.loads(json.dumps(body))))
        self.threads.add(threading.current_thread().name)
        if name in self.errors:
            raise self.errors[name]
        return None


def node(name, labels=None, taints=None):
    return {"metadata": {"name": name, "labels": labels or {}, "resourceVersion": "1"},
            "spec": {"taints": taints} if taints else {}, "status": {}}


def test_labels_from_facts_adds_accelerator_and_gfd_labels():
    labels = mod.labels_from_facts(T4_FACTS)
    assert labels["accelerator"] == "nvidia-tesla-t4"
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4"
    assert labels["nvidia.com/gpu.count"] == "1"


def test_labels_from_facts_accepts_ansible_facts_and_empty():
    assert mod.labels_from_facts({"nvidia_gpu": T4_FACTS}) == mod.labels_from_facts(T4_FACTS)
    assert mod.labels_from_facts(None) == {}
    assert mod.labels_from_facts({"present": False, "count": 0, "devices": []}) == {}


def test_build_requests_item_values_win_over_top_level():
    params = dict(BASE, labels={"team": "ml", "tier": "a"}, taints=["a=b:NoSchedule"],
                  nodes=[{"name": "n1", "aliases": ["10.0.0.1"], "labels": {"tier": "b"}, "facts": T4_FACTS,
                          "taints": None},
                         {"name": "n2", "aliases": None, "labels": None, "facts": None, "taints": []}])
    (first, second), problems = mod.build_requests(params)
    assert problems == []
    assert first["labels"]["tier"] == "b" and first["labels"]["team"] == "ml"
    assert first["labels"]["accelerator"] == "nvidia-tesla-t4"
    assert first["aliases"] == ["10.0.0.1"]
    assert first["taints"] == [{"key": "a", "value": "b", "effect": "NoSchedule"}]
    assert second["taints"] == []
    assert "accelerator" not in second["labels"]


def test_single_node_labels_written(run):
    out, api = run({"node": "n1", "labels": {"nvidia.com/gpu.present": True}}, nodes=[node("n1")])
    assert out["changed"] is True
    assert api.patches == [("n1", {"metadata": {"labels": {"nvidia.com/gpu.present": "true"}}})]
    assert out["api_requests"] == {"list": 1, "patch": 1}
    assert "diff" not in out


def test_nodes_written_by_default_concurrency_with_a_pool_that_size(run):
    out, api = run({"nodes": [{"name": "n%d" % i} for i in range(6)], "labels": {"a": "1"}},
                   nodes=[node("n%d" % i) for i in range(6)])
    assert api.pool_size == 8
    assert threading.current_thread().name not in api.threads
    assert [r["name"] for r in out["nodes"]] == ["n%d" % i for i in range(6)]
    assert out["api_requests"] == {"list": 1, "patch": 6}


def test_concurrency_one_writes_from_the_module_thread(run):
    out, api = run({"nodes": [{"name": "n%d" % i} for i in range(3)], "labels": {"a": "1"}, "concurrency": 1},
                   nodes=[node("n%d" % i) for i in range(3)])
    assert api.pool_size == 1
    assert api.threads == {threading.current_thread().name}
    assert [p[0] for p in api.patches] == ["n0", "n1", "n2"]
    assert out["changed"] is True


def test_concurrency_below_one_fails_with_one_line(run):
    out, api = run({"node": "n1", "labels": {"a": "1"}, "concurrency": 0}, nodes=[node("n1")])
    assert out["failed"] is True
    assert out["msg"] == "concurrency must be 1 or more, not 0"
    assert out["error_kind"] == "input"
    assert api.counts == {}


def test_failed_write_in_parallel_names_the_node_and_keeps_the_results(run):
    out, _api = run({"nodes": [{"name": "n%d" % i} for i in range(2)], "labels": {"a": "1"}},
                    nodes=[node("n%d" % i) for i in range(2)],
                    errors={"n0": K8sError("patching node n0 failed after 6 attempts: 500 Internal Server Error", 500)})
    assert out["failed"] is True
    assert out["msg"] == "patching node n0 failed after 6 attempts: 500 Internal Server Error"
    assert out["error_kind"] == "write"
    assert [r["name"] for r in out["nodes"]] in ([], ["n1"])  # n1 is listed when its write was under way
    assert out["changed"] is bool(out["nodes"])


def test_unchanged_node_is_not_written(run):
    out, api = run({"node": "n1", "labels": {"a": "1"}}, nodes=[node("n1", {"a": "1"})])
    assert out["changed"] is False
    assert api.patches == []
    assert out["api_requests"] == {"list": 1}


def test_check_mode_with_diff_reports_and_writes_nothing(run):
    out, api = run({"node": "n1", "taints": ["nvidia.com/gpu=present:NoSchedule"]}, nodes=[node("n1")],
                   check_mode=True, diff=True)
    assert out["changed"] is True
    assert api.patches == []
    assert out["diff"] == [{"before_header": "node/n1", "after_header": "node/n1",
                            "before": {"labels": {}, "taints": []},
                            "after": {"labels": {}, "taints": ["nvidia.com/gpu=present:NoSchedule"]}}]


def test_unknown_node_fails_naming_it(run):
    out, api = run({"node": "ghost", "labels": {"a": "1"}}, nodes=[node("n1")])
    assert out["failed"] is True
    assert "ghost" in out["msg"]
    assert out["error_kind"] == "node_match"
    assert api.patches == []


def test_bad_taint_fails_with_one_line(run):
    out, _api = run({"node": "n1", "taints": [{"key": "k", "effect": "Never"}]}, nodes=[node("n1")])
    assert out["failed"] is True
    assert "effect must be one of" in out["msg"]
    assert out["error_kind"] == "input"


def test_invalid_strategy_combination_fails(run):
    out, _api = run({"node": "n1", "replicas": 4}, nodes=[node("n1")])
    assert out["failed"] is True
    assert "replicas" in out["msg"]


def test_api_error_fails_with_its_message(run):
    out, _api = run({"node": "n1"}, nodes=[node("n1")],
                    errors={"list": K8sError("listing nodes failed: 403 Forbidden: nodes is forbidden", 403)})
    assert out["failed"] is True
    assert out["msg"] == "listing nodes failed: 403 Forbidden: nodes is forbidden"
    assert out["error_kind"] == "api"
    assert out["api_requests"] == {"list": 1}


def test_node_and_nodes_are_exclusive(run):
    out, _api = run({"node": "n1", "nodes": [{"name": "n2"}]})
    assert out["failed"] is True
    assert "mutually exclusive" in out["msg"]


def test_missing_kubernetes_library(run, monkeypatch):
    monkeypatch.setattr(mod, "HAS_KUBERNETES", False)
    out, _api = run({"node": "n1"})
    assert out["failed"] is True
    assert "kubernetes" in out["msg"] and "required" in out["msg"].lower()
    assert out["error_kind"] == "dependency"


def test_invocation_echo_leaves_out_the_facts_of_each_node(run):
    nodes = [{"name": "n1", "facts": T4_FACTS, "labels": {"team": "ml"}}, {"name": "n2", "facts": T4_FACTS}]
    out, _api = run({"nodes": nodes, "facts": T4_FACTS}, nodes=[node("n1"), node("n2")])
    echoed = out["invocation"]["module_args"]
    assert [item["name"] for item in echoed["nodes"]] == ["n1", "n2"]
    assert not any("facts" in item for item in echoed["nodes"])
    assert echoed["nodes"][0]["labels"] == {"team": "ml"}
    assert echoed["facts"] == T4_FACTS  # one top-level copy is small: kept


def test_invocation_echo_on_failure_leaves_out_the_facts_too(run):
    out, _api = run({"nodes": [{"name": "missing", "facts": T4_FACTS}]}, nodes=[node("n1")])
    assert out["failed"] is True
    assert "facts" not in out["invocation"]["module_args"]["nodes"][0]


def test_request_timeout_reaches_the_api_session(run):
    _out, api = run({"node": "n1", "labels": {"a": "1"}}, nodes=[node("n1")])
    assert api.options == {"retries": 5, "request_timeout": 30.0}
    _out, api = run({"node": "n1", "labels": {"a": "1"}, "request_timeout": 2.5, "retries": 1}, nodes=[node("n1")])
    assert api.options == {"retries": 1, "request_timeout": 2.5}


def test_facts_of_the_wrong_shape_fail_naming_the_node_and_field_before_any_request(run):
    nodes = [{"name": "n1", "facts": T4_FACTS}, {"name": "n2", "facts": dict(T4_FACTS, devices=["Tesla T4"])},
             {"name": "n3", "facts": dict(T4_FACTS, count="1")}]
    out, api = run({"nodes": nodes}, nodes=[node("n1"), node("n2"), node("n3")])
    assert out["failed"] is True and out["error_kind"] == "input"
    assert out["msg"] == ("invalid labels, taints or facts, nothing was written: node n2: nodes[1].facts.devices[0] "
                          "must be a mapping (one GPU's facts), not the string \"Tesla T4\"; node n3: "
                          "nodes[2].facts.count must be a whole number, not the string \"1\"")
    assert api.pool_size is None and api.counts == {}  # no client made, no request sent
    out, _api = run({"node": "n1", "facts": {"present": True, "devices": "Tesla T4"}}, nodes=[node("n1")])
    assert out["msg"].endswith("facts.devices must be a list of GPUs, not the string \"Tesla T4\"")


def test_one_invalid_label_of_a_batch_fails_it_before_any_request(run):
    nodes = [{"name": "n1"}, {"name": "n2"}, {"name": "n3", "labels": {"example.com/zone": "eu west"}}]
    out, api = run({"nodes": nodes, "labels": {"a": "1"}, "taints": ["gpu=yes:NoSchedule", "x:Later"]},
                   nodes=[node("n1"), node("n2"), node("n3")])
    assert out["failed"] is True and out["error_kind"] == "input"
    assert 'node n3: label "example.com/zone" value "eu west": must be empty or consist of' in out["msg"]
    assert 'nodes n1, n2, n3: taint "x:Later": effect must be one of' in out["msg"]
    assert api.patches == [] and api.counts == {} and api.pool_size is None


def test_a_taint_that_cannot_be_read_is_named_with_its_position(run):
    out, _api = run({"nodes": [{"name": "n1", "taints": ["k=v:NoSchedule", "novalue"]}]}, nodes=[node("n1")])
    assert out["msg"] == ('invalid labels, taints or facts, nothing was written: node n1: nodes[0].taints[1]: '
                          'taint "novalue" must look like key=value:Effect')


def test_the_result_maps_each_inventory_host_to_the_node_it_was_matched_to(run):
    matched = node("ip-10-0-0-7")
    matched["status"] = {"addresses": [{"type": "InternalIP", "address": "10.0.0.7"}]}
    out, _api = run({"nodes": [{"name": "gpu01", "host": "gpu01", "aliases": ["10.0.0.7"]},
                               {"name": "n2", "host": "lab-n2"}], "labels": {"a": "1"}},
                    nodes=[matched, node("n2")])
    assert out["hosts"] == {"gpu01": "ip-10-0-0-7", "lab-n2": "n2"}
    assert [(r["name"], r.get("host")) for r in out["nodes"]] == [("ip-10-0-0-7", "gpu01"), ("n2", "lab-n2")]
