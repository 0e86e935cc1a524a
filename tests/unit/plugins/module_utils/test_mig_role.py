"""plugins/module_utils/mig_role.py: which MIG config a node must have, and how its state is recorded.

The label contract is the GPU Operator's MIG manager's (NVIDIA/mig-parted ``pkg/mig/reconfigure/reconfigure.go``:
desired config in ``nvidia.com/mig.config``, progress in ``nvidia.com/mig.config.state``).
"""
from __future__ import absolute_import, division, print_function

import pytest

import mig_profiles as fx
from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_configs, mig_plan, mig_role
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gfd_labels import gfd_labels, plugin_view
from ansible_collections.kubegpu.nvidia.plugins.module_utils.node_model import plugin_allocatable
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

OWN = {"version": "v1", "mig-configs": {"two-3g": [
    {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.20gb": 2}}]}}


def node(**labels):
    return {"metadata": {"name": "a100", "labels": labels}}


@pytest.mark.parametrize("the_node, config, user, expected", [
    # the label wins over the inventory
    (node(**{"nvidia.com/mig.config": "all-1g.5gb"}), "all-balanced", None,
     {"config": "all-1g.5gb", "source": "label", "problem": "", "state": ""}),
    # the inventory is the default of a node without the label
    (node(), "all-balanced", None, {"config": "all-balanced", "source": "variable", "problem": "", "state": ""}),
    # a node record (k8s_gpu_node's nodes) has the labels at the top
    ({"name": "a100", "labels": {"nvidia.com/mig.config": "all-disabled", "nvidia.com/mig.config.state": "success"}},
     "", None, {"config": "all-disabled", "source": "label", "problem": "", "state": "success"}),
    # neither: the node is left alone
    (node(), "", None, {"config": None, "source": "none", "problem": "", "state": ""}),
    (node(**{"nvidia.com/mig.config": ""}), None, None, {"config": None, "source": "none", "problem": "", "state": ""}),
    # the user's config by name
    (node(**{"nvidia.com/mig.config": "two-3g"}), "", OWN,
     {"config": "two-3g", "source": "label", "problem": "", "state": ""}),
])
def test_decide(the_node, config, user, expected):
    assert mig_role.decide(the_node, config, user) == expected


@pytest.mark.parametrize("the_node, config, user, problem", [
    (node(**{"nvidia.com/mig.config": "all-balancd"}), "all-balanced", None,
     "the node's label nvidia.com/mig.config=all-balancd: MIG config 'all-balancd' does not exist (did you mean "
     "'all-balanced'?)"),
    (node(), "two-3g", None, "nvidia_mig_config=two-3g: MIG config 'two-3g' does not exist"),
    (node(), "all-balanced", {"version": "v2", "mig-configs": {}}, "nvidia_mig_configs"),
])
def test_decide_names_the_problem_in_one_line(the_node, config, user, problem):
    result = mig_role.decide(the_node, config, user)
    assert problem in result["problem"] and "\n" not in result["problem"]


def test_decide_refuses_a_config_that_is_not_a_name():
    with pytest.raises(InputError, match="nvidia_mig_config must be the name of a MIG config, not list"):
        mig_role.decide(node(), ["all-balanced"])


@pytest.mark.parametrize("state, reason, expected", [
    ("failed", "GPU 1 busy:\n  4242 python3", {"metadata": {
        "labels": {"nvidia.com/mig.config.state": "failed"},
        "annotations": {"kubegpu.nvidia/mig.config.reason": "GPU 1 busy: 4242 python3"}}}),
    # the other states clear an earlier reason
    ("success", "ignored", {"metadata": {"labels": {"nvidia.com/mig.config.state": "success"},
                                         "annotations": {"kubegpu.nvidia/mig.config.reason": None}}}),
    ("pending", "", {"metadata": {"labels": {"nvidia.com/mig.config.state": "pending"},
                                  "annotations": {"kubegpu.nvidia/mig.config.reason": None}}}),
])
def test_state_patch(state, reason, expected):
    assert mig_role.state_patch(state, reason) == expected


def test_state_patch_refuses_an_unknown_state():
    with pytest.raises(InputError, match="MIG config state must be one of pending, rebooting, success, failed"):
        mig_role.state_patch("done")


# the rules of roles/nvidia_driver (vars/main.yml _nvidia_driver_reboot_blocker), one line each
@pytest.mark.parametrize("allowed, local, container, blockers", [
    (True, False, "", []),
    (False, False, "", ["nvidia_mig_reboot is false"]),
    (True, True, "", ["Ansible runs on the node itself (local connection)"]),
    (True, False, "docker", ["the node is a container (docker)"]),
    (False, True, "podman", ["the node is a container (podman)", "Ansible runs on the node itself (local connection)",
                             "nvidia_mig_reboot is false"]),
])
def test_reboot_blockers(allowed, local, container, blockers):
    assert mig_role.reboot_blockers(allowed, local, container) == blockers


@pytest.mark.parametrize("allocatable, missing", [
    ({"nvidia.com/mig-1g.5gb": "8", "nvidia.com/mig-2g.10gb": "4", "nvidia.com/mig-3g.20gb": "4", "cpu": "8"}, []),
    ({"nvidia.com/mig-1g.5gb": "8", "nvidia.com/mig-2g.10gb": "4"}, ["nvidia.com/mig-3g.20gb: 0 advertised, 4 expected"]),
    # the daemons paused: nothing advertised yet
    ({"nvidia.com/mig-1g.5gb": "0"}, ["nvidia.com/mig-1g.5gb: 0 advertised, 8 expected",
                                      "nvidia.com/mig-2g.10gb: 0 advertised, 4 expected",
                                      "nvidia.com/mig-3g.20gb: 0 advertised, 4 expected"]),
])
def test_resources_missing(allocatable, missing):
    expected = {"nvidia.com/mig-1g.5gb": 8, "nvidia.com/mig-2g.10gb": 4, "nvidia.com/mig-3g.20gb": 4,
                "nvidia.com/gpu": 0}
    assert mig_role.resources_missing(expected, allocatable) == missing


def test_boot_files_of_the_role_are_what_the_boot_entry_imports():
    """The role copies module_utils/mig_boot.py MODULE_UTILS; each of them imports only those (and the stdlib,
    yaml, pynvml), so the copy under /usr/local/lib/kubegpu runs on its own."""
    import ast
    import pathlib

    import yaml

    from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_boot

    root = pathlib.Path(mig_boot.__file__).parent
    role_vars = yaml.safe_load((root.parents[1] / "roles" / "nvidia_mig" / "vars" / "main.yml").read_text())
    assert sorted(role_vars["_nvidia_mig_boot_files"]) == sorted(mig_boot.MODULE_UTILS)
    prefix = "ansible_collections.kubegpu.nvidia.plugins.module_utils"
    for name in mig_boot.MODULE_UTILS:
        tree = ast.parse((root / ("%s.py" % name)).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ansible"):
                used = [node.module[len(prefix) + 1:]] if node.module != prefix else [a.name for a in node.names]
                assert node.module.startswith(prefix), (name, node.module)
                assert set(used) <= set(mig_boot.MODULE_UTILS), (name, used)
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("ansible") for a in node.names), name


@pytest.mark.parametrize("the_node, waits", [
    ({"status": {"allocatable": {"nvidia.com/mig-3g.20gb": "2", "nvidia.com/gpu": "3"}}}, True),
    ({"status": {"allocatable": {"nvidia.com/gpu": "4"}}}, False),  # strategy none/single: nothing to wait for
    ({"status": {}}, False),  # no device plugin yet (a new cluster: its play comes later)
    ({}, False),
    # a node record as the preflight's dry run lists it (k8s_gpu_label return_nodes)
    ({"name": "lab-a100", "labels": {}, "allocatable": {"nvidia.com/mig-1g.5gb": "8"}}, True),
    ({"name": "lab-t4", "labels": {}, "allocatable": {"nvidia.com/gpu": "1"}}, False),
])
def test_advertises_mig(the_node, waits):
    assert mig_role.advertises_mig(the_node) is waits


@pytest.mark.parametrize("expected, resource", [
    # all-balanced on 4 x A100-40GB (the module's mig_devices.resources): the most numerous, the smallest profile
    ({"nvidia.com/mig-1g.5gb": 8, "nvidia.com/mig-2g.10gb": 4, "nvidia.com/mig-3g.20gb": 4}, "nvidia.com/mig-1g.5gb"),
    # a tie: by name
    ({"nvidia.com/mig-3g.40gb": 2, "nvidia.com/mig-2g.20gb": 2}, "nvidia.com/mig-2g.20gb"),
    # all-disabled: whole GPUs only, no MIG device to ask for
    ({"nvidia.com/gpu": 4}, ""),
    ({}, ""),
])
def test_validation_resource(expected, resource):
    assert mig_role.validation_resource(expected) == resource


# The lab's A100 node as nvidia_gpu_facts reads its fake NVML (tests/support/fakenvml/profiles/a100x4-mig.conf): MIG
# on everywhere, GPU 0 with two 3g.20gb MIG devices (attributes as NVML gives them), GPUs 1 to 3 with none.
THREE_G = {"slot": 0, "name": "NVIDIA A100-SXM4-40GB MIG 3g.20gb", "profile": "3g.20gb", "uuid": "MIG-1",
           "memory_mib": 19968, "multiprocessors": 42, "slices": {"gi": 3, "ci": 3},
           "engines": {"copy": 3, "decoder": 2, "encoder": 0, "jpeg": 0, "ofa": 0}}


def lab_a100_facts():
    devices = [{"index": i, "name": "NVIDIA A100-SXM4-40GB", "pci_device_id": "0x20B010DE", "memory_mib": 40960,
                "mig": {"current": 1, "pending": 1,
                        "devices": [THREE_G, dict(THREE_G, slot=1, uuid="MIG-2")] if i == 0 else []}}
               for i in range(4)]
    return {"present": True, "count": 4, "devices": devices, "health": {"status": "healthy"}}


# What mig_nvml reads from NVML's GPU-instance profile info of an A100-40GB besides tests/support/mig_profiles.py's
# table (multiprocessorCount; copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount), as the fake NVML
# answers it (tests/support/fakenvml/fakenvml.c profile_info: 14 SMs a slice, media_engines): the 3g.20gb row is
# THREE_G's, the attributes of the MIG device NVML reports for that profile.
A100_INFO = {"1g.5gb": (14, (1, 0, 0, 0, 0)), "1g.5gb+me": (14, (1, 1, 0, 1, 1)), "1g.10gb": (14, (1, 0, 0, 0, 0)),
             "2g.10gb": (28, (2, 1, 0, 0, 0)), "3g.20gb": (42, (3, 2, 0, 0, 0)), "4g.20gb": (56, (4, 2, 0, 0, 0)),
             "7g.40gb": (98, (7, 5, 0, 1, 1))}
ENGINES = ("copy", "decoder", "encoder", "jpeg", "ofa")


def a100_node(current=True, info=True, count=4):
    """4 x A100-40GB as mig_nvml reads them; ``info``: with the profile info's SM and engine counts."""
    gpus = fx.node("A100-40GB", count, current=current)
    for gpu in gpus:
        gpu["profiles"] = dict((name, dict(row, multiprocessors=A100_INFO[name][0],
                                           engines=dict(zip(ENGINES, A100_INFO[name][1]))) if info else dict(row))
                               for name, row in gpu["profiles"].items()) if current else None
    return gpus


def planned(facts, config, current=True, info=False):
    """The facts after the plan (mig_plan over tests/support/mig_profiles.py's A100-40GB, MIG on as in the facts)."""
    gpus = a100_node(current, info)
    return mig_role.planned_facts(facts, {"plan": mig_plan.plan(gpus, mig_configs.shipped(), config)})


def attributes(memory, multiprocessors, slices, engines):
    return {"memory_mib": memory, "multiprocessors": multiprocessors, "slices": {"gi": slices, "ci": slices},
            "engines": dict(zip(ENGINES, engines))}


NONE = (None,) * 5


@pytest.mark.parametrize("current, info, profile, expected", [
    # a profile already on a GPU of the model lends that MIG device's attributes
    (True, True, "3g.20gb", dict((k, THREE_G[k]) for k in mig_role.MIG_PROFILE_ATTRIBUTES)),
    # a profile new to the node: those NVML's profile info gives for it, as the facts read them once it exists
    (True, True, "1g.5gb", attributes(4864, 14, 1, (1, 0, 0, 0, 0))),
    (True, True, "2g.10gb", attributes(9856, 28, 2, (2, 1, 0, 0, 0))),
    # a reader that gave no SM or engine counts: the memory and slices of the table, the rest unknown
    (True, False, "1g.5gb", attributes(4864, None, 1, NONE)),
    # MIG off on every GPU of the model: NVML answers no profile info, only the profile and name are known
    (False, True, "1g.5gb", {}),
    (False, True, "3g.20gb", dict((k, THREE_G[k]) for k in mig_role.MIG_PROFILE_ATTRIBUTES)),
])
def test_planned_facts_attributes_of_a_planned_mig_device(current, info, profile, expected):
    after = planned(lab_a100_facts(), "all-balanced", current, info)
    for device in after["devices"]:
        migs = [m for m in device["mig"]["devices"] if m["profile"] == profile]
        assert migs and all(m == dict(expected, name="NVIDIA A100-SXM4-40GB MIG " + profile, profile=profile)
                            for m in migs)


def test_planned_facts_give_the_node_model_the_geometry_the_change_makes():
    facts = lab_a100_facts()
    after = planned(facts, "all-balanced", info=True)
    # the GPU Operator's all-balanced on the A100-40GB (REFERENCE 8.1): 1g.5gb x2, 2g.10gb, 3g.20gb per GPU
    for device in after["devices"]:
        assert (device["mig"]["current"], device["mig"]["pending"]) == (1, 1)
        assert [m["profile"] for m in device["mig"]["devices"]] == ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"]
    assert plugin_allocatable(after["devices"], plugin_view("mixed")) == (
        {"nvidia.com/mig-1g.5gb": 8, "nvidia.com/mig-2g.10gb": 4, "nvidia.com/mig-3g.20gb": 4}, None)
    # every per-profile label of the mixed strategy, the new profiles' included (internal/lm/mig-strategy.go)
    labels = gfd_labels(after, "mixed")
    assert dict((k, v) for k, v in labels.items() if k.startswith("nvidia.com/mig-1g.5gb.")) == {
        "nvidia.com/mig-1g.5gb.count": "8", "nvidia.com/mig-1g.5gb.replicas": "1",
        "nvidia.com/mig-1g.5gb.sharing-strategy": "none", "nvidia.com/mig-1g.5gb.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
        "nvidia.com/mig-1g.5gb.memory": "4864", "nvidia.com/mig-1g.5gb.multiprocessors": "14",
        "nvidia.com/mig-1g.5gb.slices.gi": "1", "nvidia.com/mig-1g.5gb.slices.ci": "1",
        "nvidia.com/mig-1g.5gb.engines.copy": "1", "nvidia.com/mig-1g.5gb.engines.decoder": "0",
        "nvidia.com/mig-1g.5gb.engines.encoder": "0", "nvidia.com/mig-1g.5gb.engines.jpeg": "0",
        "nvidia.com/mig-1g.5gb.engines.ofa": "0"}
    # the facts read are left alone, and every other fact is kept
    assert facts == lab_a100_facts()
    assert after["health"] == facts["health"] and after["count"] == 4


def test_planned_facts_of_mig_turned_off_and_of_an_unchanged_node():
    off = planned(lab_a100_facts(), "all-disabled")
    assert [(d["mig"]["current"], d["mig"]["pending"], d["mig"]["devices"]) for d in off["devices"]] == [(0, 0, [])] * 4
    assert plugin_allocatable(off["devices"], plugin_view("mixed")) == ({"nvidia.com/gpu": 4}, None)
    # no plan (the module did not run) or a plan that changes nothing: the facts as read
    assert mig_role.planned_facts(lab_a100_facts(), {}) == lab_a100_facts()
    assert mig_role.planned_facts(lab_a100_facts(), {"plan": {"gpus": [
        {"index": 0, "selected": True, "changed": False, "mode": {"desired": False}, "devices": {}}]}}) == lab_a100_facts()
