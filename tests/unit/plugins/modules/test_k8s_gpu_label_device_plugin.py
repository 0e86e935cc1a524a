"""k8s_gpu_label's device_plugin option and its deprecated per-option form (API replaced by a fake)."""
import json

import pytest

from ansible.module_utils.common.warnings import get_deprecation_messages
from ansible.module_utils.testing import patch_module_args

from ansible_collections.kubegpu.nvidia.plugins.modules import k8s_gpu_label as mod

T4 = {"present": True, "count": 1, "source": "nvml", "driver_version": "535.183.01", "cuda_driver_version": "12.2",
      "machine": "lab", "devices": [{"name": "Tesla T4", "memory_mib": 15360, "compute_capability": "7.5",
                                     "pci_class": "0x030200", "mig": {"current": None, "pending": None}}]}
A100_MIG = {"present": True, "count": 1, "source": "nvml", "driver_version": "535.161.08", "cuda_driver_version": "12.2",
            "machine": "lab", "devices": [{"name": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960,
                                           "compute_capability": "8.0", "pci_class": "0x030200",
                                           "mig": {"current": 1, "pending": 1, "devices": []}}]}
SHARED_T4 = {"configs": {"t4-shared": {"sharing_strategy": "time-slicing", "replicas": 4}},
             "product_configs": {"Tesla-T4": "t4-shared"}}


class Exit(Exception):
    pass


class FakeNodeAPI:
    def __init__(self, nodes):
        self.nodes = nodes
        self.counts = {}
        self.patches = []

    def list_nodes(self, field_selector=None):
        self.counts["list"] = self.counts.get("list", 0) + 1
        if field_selector:
            return [n for n in self.nodes if "metadata.name=" + n["metadata"]["name"] == field_selector]
        return self.nodes

    def get_node(self, name):
        return [n for n in self.nodes if n["metadata"]["name"] == name][0]

    def patch_node(self, name, body):
        self.counts["patch"] = self.counts.get("patch", 0) + 1
        self.patches.append((name, json.loads(json.dumps(body))))


def node(name, addresses=None):
    return {"metadata": {"name": name, "labels": {}, "resourceVersion": "1"}, "spec": {},
            "status": {"addresses": addresses or []}}


@pytest.fixture
def run(monkeypatch):
    def _run(args, nodes=()):
        api = FakeNodeAPI(list(nodes))
        monkeypatch.setattr(mod, "get_api_client", lambda params, pool_size=None: object())
        monkeypatch.setattr(mod, "NodeAPI", lambda client, retries, request_timeout=None: api)
        out = {}

        def exit_json(self, **kw):
            out.update(kw)
            raise Exit()

        def fail_json(self, **kw):
            out.update(kw, failed=True)
            raise Exit()
        monkeypatch.setattr(mod.AnsibleModule, "exit_json", exit_json)
        monkeypatch.setattr(mod.AnsibleModule, "fail_json", fail_json)
        with patch_module_args(dict(args, concurrency=1)):
            with pytest.raises(Exit):
                mod.main()
        return out, api
    return _run


def written(api, name):
    return dict(next(body for n, body in api.patches if n == name)["metadata"]["labels"])


def test_the_labels_follow_the_config_the_node_gets_and_name_it(run):
    out, api = run({"nodes": [{"name": "t4", "facts": T4}], "device_plugin": SHARED_T4}, nodes=[node("t4")])
    assert out["changed"] is True
    labels = written(api, "t4")
    assert labels["nvidia.com/device-plugin.config"] == "t4-shared"
    assert (labels["nvidia.com/gpu.product"], labels["nvidia.com/gpu.replicas"],
            labels["nvidia.com/gpu.sharing-strategy"]) == ("Tesla-T4-SHARED", "4", "time-slicing")
    assert labels["accelerator"] == "nvidia-tesla-t4"


def test_a_node_config_is_matched_by_the_node_the_host_resolves_to(run):
    # the host is known by its address only; its node's name picks the config
    device_plugin = dict(SHARED_T4, configs=dict(SHARED_T4["configs"], solo={}), node_configs={"ip-10-0-0-4": "solo"})
    out, api = run({"nodes": [{"name": "t4", "aliases": ["10.0.0.4"], "facts": T4}], "device_plugin": device_plugin},
                   nodes=[node("ip-10-0-0-4", [{"type": "InternalIP", "address": "10.0.0.4"}])])
    assert out["nodes"][0]["host"] == "t4"
    labels = written(api, "ip-10-0-0-4")
    assert labels["nvidia.com/device-plugin.config"] == "solo"
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4"


def test_mps_on_a_mig_node_fails_before_anything_is_written(run):
    device_plugin = {"configs": {"mps": {"sharing_strategy": "mps", "replicas": 2}}, "node_configs": {"a100": "mps"}}
    out, api = run({"nodes": [{"name": "t4", "facts": T4}, {"name": "a100", "facts": A100_MIG}],
                    "device_plugin": device_plugin}, nodes=[node("t4"), node("a100")])
    assert out["failed"] is True
    assert out["error_kind"] == "input"
    assert out["msg"].startswith("node a100 gets device plugin config mps: MPS sharing is not supported on MIG-enabled")
    assert api.patches == []


@pytest.mark.parametrize("device_plugin, message", [
    ({"configs": {"ts": {"sharing_strategy": "time-slicing", "replicas": 1}}},
     "device plugin config ts: replicas must be 2 or more"),
    ({"product_configs": {"Tesla-T4": "nope"}}, "product config Tesla-T4 names config nope, which is not defined"),
    ({"node_configs": {"t4": "nope"}}, "node config t4 names config nope, which is not defined"),
])
def test_a_bad_configuration_fails_with_one_line_and_reads_nothing(run, device_plugin, message):
    out, api = run({"nodes": [{"name": "t4", "facts": T4}], "device_plugin": device_plugin}, nodes=[node("t4")])
    assert out["failed"] is True and out["error_kind"] == "input"
    assert message in out["msg"]
    assert api.counts == {}


def test_deprecated_options_still_label_and_warn(run, capfd):
    out, api = run({"nodes": [{"name": "t4", "facts": T4}], "sharing_strategy": "time-slicing", "replicas": 4},
                   nodes=[node("t4")])
    assert out["changed"] is True
    labels = written(api, "t4")
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    assert "nvidia.com/device-plugin.config" not in labels
    # outside a real module run, Ansible shows the deprecation at once (in a play: in the task's result)
    shown = "".join(capfd.readouterr()) + "".join(str(d) for d in get_deprecation_messages())
    assert "'sharing_strategy' is deprecated" in shown and "version 2.0.0" in shown


def test_deprecated_options_and_device_plugin_do_not_mix(run):
    out, api = run({"node": "t4", "facts": T4, "replicas": 4, "device_plugin": SHARED_T4}, nodes=[node("t4")])
    assert out["failed"] is True
    assert out["msg"] == ("replicas cannot be combined with device_plugin: give the sharing and MIG settings in "
                          "device_plugin's configs only")


def test_without_device_plugin_the_config_label_is_left_alone(run):
    out, api = run({"node": "t4", "facts": T4}, nodes=[node("t4")])
    labels = written(api, "t4")
    assert "nvidia.com/device-plugin.config" not in labels
    assert (labels["nvidia.com/gpu.product"], labels["nvidia.com/gpu.replicas"]) == ("Tesla-T4", "1")
