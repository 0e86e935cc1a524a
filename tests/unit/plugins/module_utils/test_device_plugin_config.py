"""Resolving the device plugin settings once (plugins/module_utils/device_plugin_config.py).

The refusals mirror the device plugin's own parser and flag checks (NVIDIA/k8s-device-plugin v0.20.0):
api/config/v1/replicas_test.go TestUnmarshalReplicatedResource (no replicas, replicas -1 or 0 are errors;
replicas.go: "number of replicas must be >= 2"; "no resources specified"), api/config/v1/resources.go
NewResourceName (a resource name is nvidia.com/<DNS subdomain>), cmd/nvidia-device-plugin/main.go validateFlags
(MPS with mig-strategy mixed).
"""
import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import device_plugin_config as dpc
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

DEFAULT = {"mig_strategy": "none", "sharing_strategy": "none", "device_list_strategy": "envvar",
           "device_id_strategy": "uuid", "fail_on_init_error": True, "pass_device_specs": False,
           "rename_by_default": False, "fail_requests_greater_than_one": False, "replicas": 1,
           "sharing_resources": []}


def test_the_default_config_is_the_device_plugins_defaults():
    assert dpc.resolve() == {"default_config": "default", "configs": {"default": DEFAULT}, "product_configs": {},
                             "node_configs": {}}


def test_named_configs_start_from_the_defaults_and_override_what_they_name():
    resolved = dpc.resolve(defaults={"mig_strategy": "single", "device_list_strategy": "volume-mounts"},
                           configs={"t4-shared": {"sharing_strategy": "time-slicing", "replicas": 4},
                                    "default": {"pass_device_specs": True}},
                           product_configs={"Tesla-T4": "t4-shared"}, node_configs={"gpu-7": "default"})
    assert resolved["configs"]["default"] == dict(DEFAULT, mig_strategy="single", device_list_strategy="volume-mounts",
                                                  pass_device_specs=True)
    assert resolved["configs"]["t4-shared"] == dict(
        DEFAULT, mig_strategy="single", device_list_strategy="volume-mounts", sharing_strategy="time-slicing",
        replicas=4, sharing_resources=[{"name": "nvidia.com/gpu", "replicas": 4}])
    assert resolved["product_configs"] == {"Tesla-T4": "t4-shared"}
    assert resolved["node_configs"] == {"gpu-7": "default"}


def test_a_resolved_configuration_resolves_to_itself():
    resolved = dpc.resolve(configs={"a": {"sharing_strategy": "mps", "replicas": 3, "rename_by_default": True},
                                    "b": {"mig_strategy": "mixed", "sharing_strategy": "time-slicing",
                                          "sharing_resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]}},
                           product_configs={"Tesla T4": "a"}, node_configs={"n": "b"})
    assert dpc.check(resolved) == resolved
    # a product is matched as GFD writes it
    assert resolved["product_configs"] == {"Tesla-T4": "a"}


def test_values_given_as_strings_on_the_command_line_are_taken():
    resolved = dpc.resolve(defaults={"sharing_strategy": "time-slicing", "replicas": "4", "rename_by_default": "yes"})
    assert resolved["configs"]["default"]["replicas"] == 4
    assert resolved["configs"]["default"]["rename_by_default"] is True


def test_a_named_config_without_sharing_ignores_the_inherited_replicas():
    resolved = dpc.resolve(defaults={"sharing_strategy": "time-slicing", "replicas": 4},
                           configs={"exclusive": {"sharing_strategy": "none"}})
    assert resolved["configs"]["exclusive"]["replicas"] == 1
    assert resolved["configs"]["exclusive"]["sharing_resources"] == []


def test_sharing_resources_replace_replicas():
    resolved = dpc.resolve(configs={"mig": {"mig_strategy": "mixed", "sharing_strategy": "time-slicing", "replicas": 4,
                                            "sharing_resources": [{"name": "nvidia.com/mig-1g.10gb.me", "replicas": 2},
                                                                  {"name": "nvidia.com/gpu", "replicas": 3}]}})
    assert resolved["configs"]["mig"]["sharing_resources"] == [{"name": "nvidia.com/mig-1g.10gb.me", "replicas": 2},
                                                               {"name": "nvidia.com/gpu", "replicas": 3}]
    assert resolved["configs"]["mig"]["replicas"] == 3


@pytest.mark.parametrize("kwargs, message", [
    # replicas.go: "number of replicas must be >= 2"; replicas_test.go: replicas 0 and -1 are errors
    (dict(configs={"x": {"sharing_strategy": "time-slicing", "replicas": 1}}),
     "device plugin config x: replicas must be 2 or more to share GPUs with time-slicing (the device plugin refuses "
     "fewer), got 1"),
    (dict(configs={"x": {"sharing_strategy": "mps", "replicas": 0}}), "device plugin config x: replicas must be 1 or more, got 0"),
    (dict(configs={"x": {"sharing_strategy": "mps", "replicas": -1}}), "device plugin config x: replicas must be 1 or more, got -1"),
    (dict(configs={"x": {"sharing_strategy": "time-slicing", "sharing_resources": [{"name": "nvidia.com/gpu"}]}}),
     "device plugin config x: replicas of nvidia.com/gpu must be a whole number, got None"),
    (dict(configs={"x": {"sharing_strategy": "time-slicing",
                         "sharing_resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 1}]}}),
     "device plugin config x: replicas of nvidia.com/mig-1g.10gb must be 2 or more"),
    # replicas asked for without a sharing strategy
    (dict(defaults={"replicas": 4}),
     "device plugin config default: replicas set without sharing: set sharing_strategy to time-slicing or mps, or "
     "leave replicas out"),
    (dict(configs={"x": {"sharing_resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}),
     "device plugin config x: sharing_resources set without sharing"),
    # config names: defined, and usable as a label value
    (dict(node_configs={"gpu-3": "nope"}), "node config gpu-3 names config nope, which is not defined (configs: default)"),
    (dict(configs={"t4": {}}, product_configs={"Tesla-T4": "t5"}),
     "product config Tesla-T4 names config t5, which is not defined (configs: default, t4)"),
    (dict(configs={"t4": {}, "t5": {}}, product_configs={"Tesla T4": "t4", "Tesla-T4": "t5"}),
     "product config Tesla-T4 is given twice, with configs t4 and t5"),
    (dict(configs={"Bad Name": {}}), "device plugin config name 'Bad Name' is not a valid name"),
    (dict(default_config="-x"), "the default config name '-x' is not a valid name"),
    # validateFlags: MPS with mig-strategy mixed
    (dict(configs={"x": {"sharing_strategy": "mps", "replicas": 2, "mig_strategy": "mixed"}}),
     "device plugin config x: MPS sharing does not work with mig_strategy mixed"),
    # settings and values
    (dict(configs={"x": {"replica": 2}}), "device plugin config x: unknown setting replica (settings: "),
    (dict(defaults={"sharing": "mps"}), "the default settings: unknown setting sharing"),
    (dict(configs={"x": {"mig_strategy": "all"}}), "device plugin config x: mig_strategy must be one of none, single, mixed"),
    (dict(configs={"x": {"device_list_strategy": "cdi"}}), "device_list_strategy must be one of envvar, volume-mounts"),
    (dict(configs={"x": {"rename_by_default": "maybe"}}), "rename_by_default must be true or false, got 'maybe'"),
    (dict(configs={"x": {"replicas": 2.5, "sharing_strategy": "time-slicing"}}), "replicas must be a whole number"),
    (dict(configs={"x": "time-slicing"}), "device plugin config x: the settings must be a dict"),
    (dict(configs=["x"]), "the named configs must be a dict of {name: settings}"),
    # resource names as the plugin parses them; a MIG profile's "+" is a "." in a resource name
    (dict(configs={"x": {"sharing_strategy": "time-slicing",
                         "sharing_resources": [{"name": "nvidia.com/mig-1g.10gb+me", "replicas": 2}]}}),
     "sharing resource 'nvidia.com/mig-1g.10gb+me' is not a resource name such as nvidia.com/gpu or "
     "nvidia.com/mig-1g.10gb (a MIG profile's '+' is written '.': nvidia.com/mig-1g.10gb.me)"),
    (dict(configs={"x": {"sharing_strategy": "time-slicing", "sharing_resources": [{"name": "gpu", "replicas": 2}]}}),
     "sharing resource 'gpu' is not a resource name"),
    (dict(configs={"x": {"sharing_strategy": "time-slicing", "sharing_resources": [
        {"name": "nvidia.com/gpu", "replicas": 2}, {"name": "nvidia.com/gpu", "replicas": 3}]}}),
     "sharing resource nvidia.com/gpu is listed twice"),
    (dict(configs={"x": {"sharing_strategy": "time-slicing", "sharing_resources": [
        {"name": "nvidia.com/gpu", "replicas": 2, "rename": "nvidia.com/gpu.half"}]}}),
     "each sharing_resources item must be {name: <resource>, replicas: <2 or more>}"),
])
def test_refusals_name_what_to_fix(kwargs, message):
    with pytest.raises(InputError) as err:
        dpc.resolve(**kwargs)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_check_refuses_unknown_keys():
    with pytest.raises(InputError, match="unknown keys: config"):
        dpc.check({"config": {}})
    with pytest.raises(InputError, match="must be a dict"):
        dpc.check("default")


def test_config_documents():
    resolved = dpc.resolve(configs={
        "ts": {"sharing_strategy": "time-slicing", "replicas": 4, "fail_requests_greater_than_one": True},
        "mps": {"sharing_strategy": "mps", "replicas": 2, "rename_by_default": True},
        "mig": {"mig_strategy": "mixed", "sharing_strategy": "time-slicing",
                "sharing_resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]}})
    docs = dpc.config_documents(resolved)
    flags = {"migStrategy": "none", "failOnInitError": True,
             "plugin": {"passDeviceSpecs": False, "deviceListStrategy": "envvar", "deviceIDStrategy": "uuid"}}
    assert docs["default"] == {"version": "v1", "flags": flags}
    assert docs["ts"] == {"version": "v1", "flags": flags, "sharing": {"timeSlicing": {
        "renameByDefault": False, "failRequestsGreaterThanOne": True,
        "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
    # failRequestsGreaterThanOne is forced on for MPS by the plugin (config.go): not written
    assert docs["mps"]["sharing"] == {"mps": {"renameByDefault": True,
                                              "resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}
    assert docs["mig"]["flags"]["migStrategy"] == "mixed"
    assert docs["mig"]["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]


def test_select_config_and_gpu_product():
    resolved = dpc.resolve(configs={"t4": {}, "pinned": {}}, product_configs={"Tesla-T4": "t4"},
                           node_configs={"special": "pinned"})
    t4 = {"devices": [{"name": "Tesla T4"}]}
    assert dpc.gpu_product(t4) == "Tesla-T4"
    assert dpc.gpu_product({"devices": []}) is None
    assert dpc.select_config(resolved, "a", "Tesla-T4") == "t4"
    assert dpc.select_config(resolved, "special", "Tesla-T4") == "pinned"
    assert dpc.select_config(resolved, "a", "NVIDIA-H100-80GB-HBM3") == "default"
    assert dpc.select_config(resolved) == "default"
