"""The device plugin filters, rendered through the k8s_device_plugin role's variables as the role renders them.

The settings check, the ConfigMap's config files, the nvidia.com/device-plugin.config patches and the capacity
check (plugins/filter/device_plugin.py) follow the node model (module_utils/node_model.py); hosts are matched to
nodes by node_labels.resolve_node, as k8s_gpu_label matches them.
"""
import os
import sys

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.nvidia.plugins.filter import device_plugin as f

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles"))
import role_render  # noqa: E402

H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "compute_capability": "9.0", "pci_class": "0x030200",
        "mig": {"current": 0, "pending": 0, "devices": []}}
T4 = {"name": "Tesla T4", "memory_mib": 15360, "compute_capability": "7.5", "pci_class": "0x030200",
      "mig": {"current": None, "pending": None, "devices": None}}


def gpus(*devices):
    return {"present": True, "count": len(devices), "source": "nvml", "driver_version": "535.183.01",
            "cuda_driver_version": "12.2", "machine": "lab", "devices": list(devices)}


def node(name, labels=None, allocatable=None, addresses=None):
    return {"metadata": {"name": name, "labels": labels or {}},
            "status": {"allocatable": allocatable or {}, "addresses": addresses or []}}


def render(expression, variables):
    return role_render.render("k8s_device_plugin", expression, variables)


SHARED_T4 = {"k8s_device_plugin_configs": {"shared": {"sharing_strategy": "time-slicing", "replicas": 4}},
             "k8s_device_plugin_product_configs": {"Tesla-T4": "shared"}}


def test_the_role_resolves_its_variables_once():
    resolved = render("{{ _k8s_device_plugin_resolved }}", dict(SHARED_T4, k8s_device_plugin_replicas=1))
    assert sorted(resolved["configs"]) == ["default", "shared"]
    assert resolved["configs"]["shared"]["sharing_resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert resolved["product_configs"] == {"Tesla-T4": "shared"}
    assert render("{{ _k8s_device_plugin_settings_error }}", SHARED_T4) == ""
    # the internal per-config settings other templates read keep their shape
    settings = render("{{ _k8s_device_plugin_settings }}", SHARED_T4)
    assert settings["shared"]["sharing_strategy"] == "time-slicing" and settings["default"]["mig_strategy"] == "none"


@pytest.mark.parametrize("variables, message", [
    ({"k8s_device_plugin_product_configs": {"Tesla-T4": "nope"}},
     "product config Tesla-T4 names config nope, which is not defined (configs: default)"),
    ({"k8s_device_plugin_node_configs": {"n1": "gone"}}, "node config n1 names config gone, which is not defined"),
    ({"k8s_device_plugin_sharing_strategy": "time-slicing", "k8s_device_plugin_replicas": 1},
     "device plugin config default: replicas must be 2 or more"),
    ({"k8s_device_plugin_replicas": 4}, "device plugin config default: replicas set without sharing"),
    ({"k8s_device_plugin_sharing_strategy": "mps", "k8s_device_plugin_replicas": 2,
      "k8s_device_plugin_mig_strategy": "mixed"}, "MPS sharing does not work with mig_strategy mixed"),
])
def test_bad_settings_give_one_line(variables, message):
    error = render("{{ _k8s_device_plugin_settings_error }}", variables)
    assert message in error and "\n" not in error
    with pytest.raises(Exception, match="names config|replicas|MPS"):
        render("{{ _k8s_device_plugin_resolved }}", variables)


def test_configmap_holds_one_config_file_per_name():
    objects = role_render.manifests(dict(SHARED_T4, k8s_device_plugin_node_configs={"n7": "mig"},
                                         k8s_device_plugin_configs={
                                             "shared": {"sharing_strategy": "time-slicing", "replicas": 4},
                                             "mig": {"mig_strategy": "mixed", "sharing_strategy": "time-slicing",
                                                     "sharing_resources": [{"name": "nvidia.com/mig-1g.10gb",
                                                                            "replicas": 2}]}}))
    data = [o for o in objects if o["kind"] == "ConfigMap"][0]["data"]
    assert sorted(data) == ["default", "mig", "shared"]
    assert yaml.safe_load(data["shared"])["sharing"] == {"timeSlicing": {
        "renameByDefault": False, "failRequestsGreaterThanOne": False,
        "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}
    mig = yaml.safe_load(data["mig"])
    assert mig["flags"]["migStrategy"] == "mixed"
    assert mig["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]


def capacity(variables):
    return render("{{ _k8s_device_plugin_capacity }}", variables)


def test_capacity_matches_hosts_to_nodes_as_k8s_gpu_label_and_names_the_short_ones():
    nodes = [node("node-a", {"kubernetes.io/hostname": "alpha"}, {"nvidia.com/gpu": "8"}),
             node("ip-10-0-0-2", {}, {"nvidia.com/gpu": "2"}, [{"type": "InternalIP", "address": "10.0.0.2"}]),
             node("gamma", {}, {}),
             node("ip-10-0-0-9", {}, {}, [{"type": "InternalIP", "address": "10.0.0.9"}]),
             node("ip-10-0-0-10", {}, {}, [{"type": "InternalIP", "address": "10.0.0.9"}])]
    hostvars = {
        "alpha": {"ansible_facts": {"nvidia_gpu": gpus(*[H100] * 8)}},                            # hostname label
        "beta": {"ansible_host": "10.0.0.2", "ansible_facts": {"nvidia_gpu": gpus(T4)}},            # InternalIP
        "gamma": {"ansible_facts": {"nvidia_gpu": gpus(H100, H100)}},                             # name, no GPUs yet
        "delta": {"ansible_facts": {"nvidia_gpu": gpus(T4)}},                                     # no node
        "epsilon": {"ansible_host": "10.0.0.9", "ansible_facts": {"nvidia_gpu": gpus(T4)}},        # two nodes
        "cpu": {"ansible_facts": {"nvidia_gpu": {"count": 0, "present": False}}},                 # not a GPU host
    }
    variables = dict(SHARED_T4, hostvars=hostvars, k8s_device_plugin_gpu_hosts=list(hostvars),
                     _k8s_device_plugin_nodes_info={"resources": nodes})
    rows = {c["host"]: (c["node"], c["config"], c["expected"], c["allocatable"], c["ok"]) for c in capacity(variables)}
    assert rows == {"alpha": ("node-a", "default", {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 8}, True),
                    "beta": ("ip-10-0-0-2", "shared", {"nvidia.com/gpu": 4}, {"nvidia.com/gpu": 2}, False),
                    "gamma": ("gamma", "default", {"nvidia.com/gpu": 2}, {}, False),
                    "delta": ("", None, None, {}, False),
                    "epsilon": ("", None, None, {}, False)}
    message = render("{{ _k8s_device_plugin_short_message }}", variables)
    assert message.startswith("GPU allocatable falls short on 4 node(s) after 300s: ")
    assert "ip-10-0-0-2 (allocatable 2, expected 4 under config shared)" in message
    assert "gamma (allocatable 0, expected 2 under config default)" in message
    assert "no Kubernetes node matches host delta" in message
    assert "host epsilon matches several Kubernetes nodes: ip-10-0-0-10, ip-10-0-0-9" in message
    assert "node-a" not in message


def test_capacity_per_resource_name_with_rename_and_mig():
    a100 = {"name": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960, "compute_capability": "8.0", "pci_class": "0x030200",
            "mig": {"current": 1, "pending": 1, "devices": [{"profile": "3g.20gb", "memory_mib": 20096}] * 2}}
    full = dict(a100, mig={"current": 0, "pending": 0, "devices": []})
    unlisted = dict(a100, mig={"current": 1, "pending": 1, "devices": None})
    hostvars = {"renamed": {"ansible_facts": {"nvidia_gpu": gpus(T4)}},
                "mixed": {"ansible_facts": {"nvidia_gpu": gpus(a100, full)}},
                "single": {"ansible_facts": {"nvidia_gpu": gpus(a100, a100)}},
                "invalid": {"ansible_facts": {"nvidia_gpu": gpus(a100, full)}},
                "unlisted": {"ansible_facts": {"nvidia_gpu": gpus(unlisted)}}}
    nodes = [node("renamed", {}, {"nvidia.com/gpu.shared": "4", "nvidia.com/gpu": "0", "cpu": "8"}),
             node("mixed", {}, {"nvidia.com/gpu": "1", "nvidia.com/mig-3g.20gb": "2"}),
             node("single", {}, {"nvidia.com/gpu": "3"}),
             node("invalid", {}, {}),
             node("unlisted", {}, {"nvidia.com/gpu": "2"})]
    variables = {
        "hostvars": hostvars, "k8s_device_plugin_gpu_hosts": list(hostvars),
        "k8s_device_plugin_configs": {"renamed": {"sharing_strategy": "time-slicing", "replicas": 4,
                                                  "rename_by_default": True},
                                      "mixed": {"mig_strategy": "mixed"}, "single": {"mig_strategy": "single"}},
        "k8s_device_plugin_node_configs": {"renamed": "renamed", "mixed": "mixed", "single": "single",
                                           "invalid": "single", "unlisted": "single"},
        "_k8s_device_plugin_nodes_info": {"resources": nodes}}
    rows = dict((c["host"], c) for c in capacity(variables))
    assert (rows["renamed"]["expected"], rows["renamed"]["ok"]) == ({"nvidia.com/gpu.shared": 4}, True)
    assert rows["renamed"]["allocatable_text"] == "nvidia.com/gpu.shared=4"
    assert (rows["mixed"]["expected"], rows["mixed"]["ok"]) == ({"nvidia.com/gpu": 1, "nvidia.com/mig-3g.20gb": 2}, True)
    assert (rows["single"]["expected"], rows["single"]["ok"]) == ({"nvidia.com/gpu": 4}, False)
    assert not rows["invalid"]["ok"] and rows["invalid"]["expected"] == {}
    assert rows["invalid"]["reason"] == (
        "invalid (allocatable 0; the device plugin cannot start under config single: mig strategy single needs every "
        "GPU MIG-enabled with MIG devices of one kind (MIG-enabled and MIG-disabled GPUs))")
    assert rows["unlisted"]["expected"] is None and not rows["unlisted"]["ok"]
    assert rows["unlisted"]["reason"] == (
        "unlisted (allocatable 2; its GPUs run MIG with strategy single under config single, and the facts do not "
        "list the MIG devices of its MIG-enabled GPUs: give k8s_device_plugin_node_gpus)")


def test_node_gpus_stand_in_for_the_facts():
    nodes = [node("n1", {"nvidia.com/gpu.product": "Tesla-T4-SHARED"}, {"nvidia.com/gpu": "8"}), node("n2")]
    rows = capacity(dict(SHARED_T4, k8s_device_plugin_node_gpus={"n1": 2, "gone": 1},
                         _k8s_device_plugin_nodes_info={"resources": nodes}))
    assert [(r["node"], r["config"], r["expected"], r["ok"]) for r in rows] == [
        ("gone", "default", {"nvidia.com/gpu": 1}, False), ("n1", "shared", {"nvidia.com/gpu": 8}, True)]
    assert rows[0]["reason"] == "gone (node not found)"


def test_nodes_as_k8s_gpu_label_returns_them_are_taken():
    hostvars = {"t4": {"ansible_host": "10.0.0.4", "ansible_facts": {"nvidia_gpu": gpus(T4)}}}
    given = [{"name": "ip-10-0-0-4", "host": "t4", "changed": False, "labels": {}, "allocatable": {"nvidia.com/gpu": "4"},
              "addresses": [{"type": "InternalIP", "address": "10.0.0.4"}]}]
    rows = capacity(dict(SHARED_T4, hostvars=hostvars, k8s_device_plugin_gpu_hosts=["t4"],
                         k8s_device_plugin_nodes=given))
    assert [(r["host"], r["node"], r["ok"], r["expected_text"]) for r in rows] == [("t4", "ip-10-0-0-4", True, "4")]


def test_config_label_patches_only_where_the_label_differs():
    nodes = [node("t4-a", {"nvidia.com/gpu.product": "Tesla-T4"}),
             node("t4-b", {"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/device-plugin.config": "t4"}),
             node("h100", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
             node("special", {"nvidia.com/gpu.product": "Tesla-T4"}),
             node("host-t4", {"nvidia.com/device-plugin.config": "default"}),
             node("host-h100", {"nvidia.com/device-plugin.config": "default"})]
    hostvars = {"host-t4": {"ansible_facts": {"nvidia_gpu": gpus(T4)}},
                "host-h100": {"ansible_facts": {"nvidia_gpu": gpus(H100)}}}
    patches = render("{{ _k8s_device_plugin_node_label_patches }}", {
        "hostvars": hostvars, "k8s_device_plugin_gpu_hosts": list(hostvars),
        "k8s_device_plugin_configs": {"t4": {}, "pinned": {}},
        "k8s_device_plugin_product_configs": {"Tesla-T4": "t4"},
        "k8s_device_plugin_node_configs": {"special": "pinned"},
        "_k8s_device_plugin_nodes_info": {"resources": nodes}})
    assert [(p["metadata"]["name"], p["metadata"]["labels"]) for p in patches] == [
        ("t4-a", {"nvidia.com/device-plugin.config": "t4"}),
        ("special", {"nvidia.com/device-plugin.config": "pinned"}),
        # a GPU host's node gets its model's config, from the facts (not from a label)
        ("host-t4", {"nvidia.com/device-plugin.config": "t4"})]
    assert all(p["apiVersion"] == "v1" and p["kind"] == "Node" for p in patches)


def test_an_unknown_host_and_a_bad_configuration_are_filter_errors():
    with pytest.raises(AnsibleFilterError, match="nope is not a host of the inventory"):
        f.gpu_node_capacity([], ["nope"], {}, f.device_plugin_config({}))
    with pytest.raises(AnsibleFilterError, match="unknown keys: node"):
        f.device_plugin_config({"node": {}})
    with pytest.raises(AnsibleFilterError, match="unknown keys: config"):
        f.device_plugin_config_documents({"config": {}})
    assert f.device_plugin_config_error("x").startswith("the device plugin settings must be a dict")


def test_mps_on_a_mig_node_is_a_filter_error_naming_the_node():
    a100 = {"name": "NVIDIA A100-SXM4-40GB", "mig": {"current": 1, "pending": 1, "devices": []}}
    resolved = f.device_plugin_config({"defaults": {"sharing_strategy": "mps", "replicas": 2}})
    with pytest.raises(AnsibleFilterError, match="node a100-1 gets device plugin config default: MPS sharing"):
        f.gpu_node_capacity([node("a100-1")], ["a100-1"], {"a100-1": {"ansible_facts": {"nvidia_gpu": gpus(a100)}}},
                            resolved)


@pytest.mark.parametrize("allocatable, ok", [
    ({}, True),
    # a DRA node where the device plugin still advertises its GPUs would hand them out twice
    ({"nvidia.com/gpu": 1}, False),
])
def test_a_dra_host_must_advertise_no_device_plugin_resource(allocatable, ok):
    hostvars = {"h100": {"kubegpu_gpu_allocation": "dra", "ansible_facts": {"nvidia_gpu": gpus(H100)}}}
    (row,) = f.gpu_node_capacity([node("h100", allocatable=allocatable)], ["h100"], hostvars,
                                 f.device_plugin_config({}))
    assert (row["expected"], row["ok"]) == ({}, ok)
    if not ok:
        assert row["reason"] == "h100 (allocatable 1, expected 0 under config default)"


def test_a_host_set_to_an_unknown_allocation_is_a_filter_error():
    hostvars = {"h100": {"kubegpu_gpu_allocation": "both", "ansible_facts": {"nvidia_gpu": gpus(H100)}}}
    with pytest.raises(AnsibleFilterError, match="host h100 sets kubegpu_gpu_allocation to both device_plugin and dra"):
        f.gpu_node_capacity([node("h100")], ["h100"], hostvars, f.device_plugin_config({}))


@pytest.mark.parametrize("resources, text", [({}, "0"), (None, "unknown"), ({"nvidia.com/gpu": 4}, "4"),
                                             ({"nvidia.com/mig-1g.5gb": 7, "nvidia.com/gpu": 1},
                                              "nvidia.com/gpu=1, nvidia.com/mig-1g.5gb=7")])
def test_resources_text(resources, text):
    assert f.resources_text(resources) == text


def test_filters_are_registered():
    assert sorted(f.FilterModule().filters()) == ["device_plugin_config", "device_plugin_config_documents",
                                                  "device_plugin_config_error", "device_plugin_health_checks",
                                                  "device_plugin_hosts_error", "device_plugin_input_problems", "device_plugin_nfd_problem",
                                                  "device_plugin_node_labels", "gpu_node_capacity"]


def test_the_hosts_check_names_a_mig_host_given_mps_before_anything_is_applied():
    a100 = {"name": "NVIDIA A100-SXM4-40GB", "compute_capability": "8.0",
            "mig": {"current": 1, "pending": 1, "devices": []}}
    hostvars = {"t4": {"ansible_facts": {"nvidia_gpu": gpus(T4)}},
                "a100": {"k8s_gpu_node_name": "node-a100", "ansible_facts": {"nvidia_gpu": gpus(a100)}},
                "nofacts": {}}
    variables = {"hostvars": hostvars, "k8s_device_plugin_gpu_hosts": ["nofacts", "t4", "a100"],
                 "k8s_device_plugin_configs": {"mps": {"sharing_strategy": "mps", "replicas": 2}}}
    assert render("{{ _k8s_device_plugin_hosts_error }}", dict(variables, k8s_device_plugin_product_configs={
        "Tesla-T4": "mps"})) == ""
    # by the node name the host is known by
    error = render("{{ _k8s_device_plugin_hosts_error }}", dict(variables, k8s_device_plugin_node_configs={
        "node-a100": "mps"}))
    assert error.startswith("node node-a100 gets device plugin config mps: MPS sharing is not supported on MIG-enabled")
