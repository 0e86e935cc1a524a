"""The MIG geometry planner (plugins/module_utils/mig_plan.py) over four GPU models and every shipped config.

The GPUs come from tests/support/mig_profiles.py (fixtures: profile tables as NVML reports them). Cases marked
"known_configs_test.go" follow NVIDIA/mig-parted pkg/mig/config/known_configs_test.go (TestValidConfiguration),
"config_test.go" pkg/mig/config/config_test.go, "apply/config.go" cmd/nvidia-mig-parted/apply/config.go and
"assert.go" cmd/nvidia-mig-parted/assert/assert.go (WalkSelectedMigConfigForEachGPU).
"""
from __future__ import absolute_import, division, print_function

import pytest

import mig_profiles as fx
from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_config, mig_configs
from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_plan as mp
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

SHIPPED = mig_configs.shipped()
MODELS = sorted(fx.MODELS)

# The shipped configs that address each model and change an 8-GPU node with MIG off (all-disabled changes nothing).
PLANNED = {
    "A100-40GB": {"all-enabled", "all-balanced", "all-1g.5gb", "all-1g.5gb.me", "all-1g.10gb", "all-2g.10gb",
                  "all-3g.20gb", "all-4g.20gb", "all-7g.40gb"},
    "A100-80GB": {"all-enabled", "all-balanced", "all-1g.10gb", "all-1g.10gb.me", "all-1g.20gb", "all-2g.20gb",
                  "all-3g.40gb", "all-4g.40gb", "all-7g.80gb"},
    "H100-80GB": {"all-enabled", "all-balanced", "all-1g.10gb", "all-1g.10gb.me", "all-1g.20gb", "all-2g.20gb",
                  "all-3g.40gb", "all-4g.40gb", "all-7g.80gb"},
    "H200": {"all-enabled", "all-balanced", "all-1g.18gb", "all-1g.18gb.me", "all-1g.35gb", "all-2g.35gb",
             "all-3g.71gb", "all-4g.71gb", "all-7g.141gb"},
}


def configs(*specs, name="c"):
    return mig_config.parse({"version": "v1", "mig-configs": {name: list(specs)}})


def enabled(mig_devices, **extra):
    return dict({"devices": "all", "mig-enabled": True, "mig-devices": mig_devices}, **extra)


def addressing(config, model):
    return [s for s in SHIPPED[config] if mig_config.matches_filter(s, fx.MODELS[model]["pci_device_id"])]


def applied(gpus, node_plan):
    """The GPUs as they would read back once ``node_plan`` is applied (a stand-in for the applier)."""
    result = []
    for gpu, gpu_plan in zip(gpus, node_plan["gpus"]):
        gpu = dict(gpu)
        if gpu_plan["selected"]:
            desired = gpu_plan["mode"]["desired"]
            gpu["mode"] = {"current": desired, "pending": desired}
            if gpu_plan["destroy"] or gpu_plan["create"] or not desired:
                gpu["instances"] = fx.instances_from(gpu_plan["create"])
        result.append(gpu)
    return result


def assert_valid_layout(gpu, created):
    used = 0
    for item in created:
        start, size = item["placement"]
        assert (start, size) in [tuple(p) for p in gpu["profiles"][item["profile"]]["placements"]]
        assert item["profile_id"] == gpu["profiles"][item["profile"]]["id"]
        mask = ((1 << size) - 1) << start
        assert not used & mask, "overlapping placements %r" % created
        used |= mask


# ------------------------------------------------------------------ every shipped config on every model
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("config", sorted(SHIPPED))
def test_every_shipped_config_on_an_8_gpu_node(config, model):
    gpus = fx.node(model, 8)
    specs = addressing(config, model)
    profiles = set(fx.MODELS[model]["profiles"])
    asked = set(p for s in specs for p in s["mig_devices"])
    if asked - profiles:
        with pytest.raises(InputError) as err:
            mp.plan(gpus, SHIPPED, config)
        missing = sorted(asked - profiles)[0]
        assert "GPU 0 (%s) has no MIG profile %s" % (fx.MODELS[model]["name"], missing) in err.value.msg
        assert config not in PLANNED[model]
        return
    node_plan = mp.plan(gpus, SHIPPED, config)
    assert node_plan["changed"] == (config in PLANNED[model])
    if not specs:
        assert node_plan["warnings"] and "addresses no MIG-capable GPU" in node_plan["warnings"][0]
        assert not any(p["selected"] for p in node_plan["gpus"])
        return
    wanted = dict((k, v) for k, v in specs[0]["mig_devices"].items() if v)
    for gpu, gpu_plan in zip(gpus, node_plan["gpus"]):
        assert gpu_plan["devices"] == wanted
        assert_valid_layout(gpu, gpu_plan["create"])
        assert sorted(i["profile"] for i in gpu_plan["create"]) == sorted(p for p, n in wanted.items() for dummy in range(n))
    totals = mp.mig_devices(node_plan)["resources"]
    if specs[0]["mig_enabled"]:
        assert totals == dict(("nvidia.com/mig-" + p.replace("+", "."), 8 * n) for p, n in wanted.items())
    else:
        assert totals == {"nvidia.com/gpu": 8}
    assert mp.verify(applied(gpus, node_plan), node_plan) == []
    again = mp.plan(applied(gpus, node_plan), SHIPPED, config)
    assert not again["changed"]


def test_lab_node_all_balanced_under_mixed():
    """The issue's lab: 4 x A100-SXM4-40GB with all-balanced advertise 1g.5gb: 8, 2g.10gb: 4, 3g.20gb: 4."""
    node_plan = mp.plan(fx.node("A100-40GB", 4), SHIPPED, "all-balanced")
    assert mp.mig_devices(node_plan) == {
        "gpus": dict((i, {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}) for i in range(4)),
        "resources": {"nvidia.com/mig-1g.5gb": 8, "nvidia.com/mig-2g.10gb": 4, "nvidia.com/mig-3g.20gb": 4}}
    assert node_plan["reset_required"] == [0, 1, 2, 3]


def test_placements_are_deterministic_and_in_mig_parteds_order():
    """Largest first (types/mig_config.go Flatten), each at the first free possible placement, backtracking."""
    gpu = fx.gpu("A100-40GB")
    layout = mp.fit(gpu, {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1})
    assert [(i["profile"], i["placement"]) for i in layout] == [
        ("3g.20gb", [4, 4]), ("2g.10gb", [0, 2]), ("1g.5gb", [2, 1]), ("1g.5gb", [3, 1])]
    reordered = dict(gpu, profiles=dict(reversed(list(gpu["profiles"].items()))))
    assert mp.fit(reordered, {"3g.20gb": 1, "1g.5gb": 2, "2g.10gb": 1}) == layout
    assert [i["placement"] for i in mp.fit(gpu, {"1g.5gb": 7})] == [[s, 1] for s in range(7)]
    assert [(i["profile"], i["placement"]) for i in mp.fit(gpu, {"4g.20gb": 1, "3g.20gb": 1})] == [
        ("4g.20gb", [0, 4]), ("3g.20gb", [4, 4])]


# ------------------------------------------------------------------ fit (known_configs_test.go TestValidConfiguration)
@pytest.mark.parametrize("devices,fits", [
    ({"1g.5gb": 7}, True),                      # "Single device (equal to max)"
    ({"1g.5gb": 8}, False),                     # "Single device (greater than max)"
    ({"1g.5gb": 6}, True),                      # "Single device (less than max)"
    ({"1g.5gb": 3, "2g.10gb": 2}, True),        # "Mix of devices (all at max)"
    ({"1g.5gb": 2, "2g.10gb": 2}, True),        # "Mix of devices (one smaller than max)"
    ({"1g.5gb": 2, "2g.10gb": 1}, True),        # "Mix of devices (all smaller than max)"
    ({"1g.5gb": 4, "2g.10gb": 2}, False),       # "Mix of devices (one greater than max)"
    ({}, True),                                 # "Empty config"
    ({"3g.20gb": 3}, False),                    # the issue: not a count check
    ({"3g.20gb": 2}, True),
    ({"4g.20gb": 1, "3g.20gb": 1}, True),
    ({"4g.20gb": 1, "2g.10gb": 2}, False),      # 2g.10gb starts at 0, 2, 4: only 4 is free
    ({"7g.40gb": 1, "1g.5gb": 1}, False),
    ({"1g.5gb+me": 1, "1g.5gb": 6}, True),
    ({"1g.5gb+me": 2}, False),
    ({"1g.10gb": 4}, True),
    ({"1g.10gb": 3, "1g.5gb": 1}, True),
    ({"1g.10gb": 4, "1g.5gb": 1}, False),
    ({"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 3}, False),   # 8 memory slices, but 1g.5gb never at start 7
])
def test_counts_fit_the_a100_40gb_placements(devices, fits):
    gpu = fx.gpu("A100-40GB")
    if fits:
        layout = mp.fit(gpu, devices)
        assert_valid_layout(gpu, layout)
        assert mp._count(layout) == dict((k, v) for k, v in devices.items() if v)
    else:
        with pytest.raises(InputError) as err:
            mp.fit(gpu, devices, "mine")
        assert err.value.msg.startswith("MIG config 'mine': GPU 0 (NVIDIA A100-SXM4-40GB): ")
        assert "do not fit" in err.value.msg or "does not fit" in err.value.msg


# ------------------------------------------------------------------ bad input, one message, nothing planned
@pytest.mark.parametrize("gpus,specs,message", [
    (fx.node("A100-40GB", 2), [enabled({"7g.80gb": 1})],                      # unknown profile
     "MIG config 'c': GPU 0 (NVIDIA A100-SXM4-40GB) has no MIG profile 7g.80gb (its profiles: 1g.5gb, "
     "1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb)"),
    (fx.node("A100-40GB", 2), [enabled({"3g.20gb": 3})],                      # counts that do not fit
     "MIG config 'c': GPU 0 (NVIDIA A100-SXM4-40GB): 3 x 3g.20gb do not fit (NVML allows at most 2)"),
    (fx.node("A100-40GB", 2), [enabled({"4g.20gb": 1, "2g.10gb": 2})],
     "MIG config 'c': GPU 0 (NVIDIA A100-SXM4-40GB): {4g.20gb: 1, 2g.10gb: 2} does not fit: no placement"),
    (fx.node("A100-40GB", 2), [enabled({"1c.3g.20gb": 1})],
     "profile 1c.3g.20gb asks for compute instances smaller than their GPU instance"),
    (fx.node("A100-40GB", 4), [{"devices": [0, 1], "mig-enabled": False}, enabled({"1g.5gb": 7}, devices=[1, 2])],
     "MIG config 'c': overlapping specs 0 and 1 both address GPU 1 (NVIDIA A100-SXM4-40GB)"),
    (fx.node("A100-40GB", 4), [enabled({"1g.5gb": 7}), enabled({"7g.40gb": 1}, **{"device-filter": "0x20B010DE"})],
     "overlapping specs 0 and 1 both address GPU 0"),
    (fx.node("A100-40GB", 4), [enabled({"1g.5gb": 7}, devices=[0, 4])],       # index out of range
     "MIG config 'c', spec 0: GPU index 4 does not exist on this node (GPUs 0-3)"),
    ([fx.gpu("T4", 0)], [enabled({"1g.5gb": 1}, devices=[0])],                # apply/config.go: by index, refused
     "MIG config 'c', spec 0: GPU 0 (Tesla T4) is not MIG-capable; MIG cannot be enabled on it"),
    # the second GPU's profile is wrong: nothing is planned for the first either
    ([fx.gpu("A100-40GB", 0), fx.gpu("H100-80GB", 1)], [enabled({"1g.5gb": 7})],
     "GPU 1 (NVIDIA H100 80GB HBM3) has no MIG profile 1g.5gb"),
])
def test_bad_input_is_refused_with_one_line(gpus, specs, message):
    with pytest.raises(InputError) as err:
        mp.plan(gpus, configs(*specs), "c")
    assert message in err.value.msg
    assert "\n" not in err.value.msg


def test_unknown_config_name():
    with pytest.raises(InputError) as err:
        mp.plan(fx.node("A100-40GB", 1), SHIPPED, "all-3g.40")
    assert "MIG config 'all-3g.40' does not exist (did you mean" in err.value.msg


def test_non_capable_gpus_are_skipped_under_devices_all():
    """apply/config.go: a non-capable GPU is skipped under ``devices: all``, and by index when MIG is off."""
    gpus = [fx.gpu("T4", 0), fx.gpu("A100-40GB", 1)]
    node_plan = mp.plan(gpus, SHIPPED, "all-1g.5gb")
    assert [(p["selected"], p.get("skipped")) for p in node_plan["gpus"]] == [(False, "not MIG-capable"), (True, None)]
    assert mp.mig_devices(node_plan)["resources"] == {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.5gb": 7}
    off = mp.plan(gpus, configs({"devices": [0], "mig-enabled": False}), "c")
    assert not off["changed"] and off["gpus"][0]["skipped"] == "not MIG-capable"


def test_gpus_no_spec_addresses_are_left_alone():
    """assert.go: a spec acts on the GPUs its filter and its indices match, no other."""
    gpus = [fx.gpu("A100-40GB", 0), fx.gpu("H100-80GB", 1, current=True,
                                           instances=fx.instances_from([{"profile": "7g.80gb", "placement": [0, 8]}]))]
    node_plan = mp.plan(gpus, configs(enabled({"1g.5gb": 7}, **{"device-filter": "0x20B010DE"})), "c")
    assert [p["selected"] for p in node_plan["gpus"]] == [True, False]
    assert node_plan["gpus"][1]["skipped"] == "no spec of MIG config 'c' addresses it"
    assert node_plan["gpus"][1]["destroy"] == [] and not node_plan["gpus"][1]["changed"]
    assert mp.mig_devices(node_plan)["resources"] == {"nvidia.com/mig-1g.5gb": 7, "nvidia.com/mig-7g.80gb": 1}


def test_an_index_listed_twice_is_one_gpu():
    node_plan = mp.plan(fx.node("A100-40GB", 2), configs(enabled({"7g.40gb": 1}, devices=[1, 1])), "c")
    assert [p["selected"] for p in node_plan["gpus"]] == [False, True]


def test_an_untouched_gpu_counts_only_its_mig_devices():
    instances = fx.instances_from([{"profile": "3g.40gb", "placement": [0, 4]}, {"profile": "3g.40gb", "placement": [4, 4]}])
    instances[1]["compute_instances"] = []
    gpus = [fx.gpu("A100-40GB", 0), fx.gpu("H100-80GB", 1, current=True, instances=instances)]
    node_plan = mp.plan(gpus, configs(enabled({"7g.40gb": 1}, devices=[0])), "c")
    assert node_plan["gpus"][1]["before"] == ("GPU 1 (NVIDIA H100 80GB HBM3): MIG enabled; 3g.40gb (0:4), "
                                              "3g.40gb (no compute instance) (4:4)")
    assert mp.mig_devices(node_plan)["resources"] == {"nvidia.com/mig-7g.40gb": 1, "nvidia.com/mig-3g.40gb": 1}


def test_each_gpu_uses_its_own_profile_table():
    """config_test.go TestSetMigConfigResolvesMigProfileOnTargetGPU: a profile resolves on the GPU it is for."""
    gpus = fx.node("A100-40GB", 2) + [fx.gpu("H200", 2), fx.gpu("H100-80GB", 3)]
    node_plan = mp.plan(gpus, SHIPPED, "all-balanced")
    assert [p["devices"] for p in node_plan["gpus"]] == [
        {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}, {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2},
        {"3g.71gb": 1, "2g.35gb": 1, "1g.18gb": 2}, {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}]
    assert [(i["profile_id"], i["slices"]) for i in node_plan["gpus"][2]["create"]] == [(9, 3), (14, 2), (19, 1), (19, 1)]


# ------------------------------------------------------------------ processes
def test_a_busy_gpu_that_must_change_refuses_the_node():
    gpus = fx.node("A100-40GB", 3)
    gpus[2]["processes"] = [{"pid": 4242, "name": "python3"}, {"pid": 77, "name": "nvidia-persistenced"}]
    with pytest.raises(mp.BusyGpuError) as err:
        mp.plan(gpus, SHIPPED, "all-balanced")
    assert err.value.msg == ("MIG geometry not changed on any GPU of this node: GPU 2 (NVIDIA A100-SXM4-40GB) is "
                             "used by python3 (pid 4242), nvidia-persistenced (pid 77); stop them first")
    assert err.value.kind == "runtime"


def test_a_busy_gpu_that_is_already_right_is_fine():
    gpus = fx.node("A100-40GB", 2)
    gpus = applied(gpus, mp.plan(gpus, SHIPPED, "all-balanced"))
    gpus[0]["processes"] = [{"pid": 1, "name": "train"}]
    assert not mp.plan(gpus, SHIPPED, "all-balanced")["changed"]


# ------------------------------------------------------------------ already there, modes, resets
def test_a_gpu_at_its_geometry_plans_nothing():
    gpus = applied(fx.node("H100-80GB", 8), mp.plan(fx.node("H100-80GB", 8), SHIPPED, "all-balanced"))
    node_plan = mp.plan(gpus, SHIPPED, "all-balanced")
    assert not node_plan["changed"] and node_plan["reset_required"] == []
    for gpu_plan in node_plan["gpus"]:
        assert (gpu_plan["mode_change"], gpu_plan["destroy"], gpu_plan["create"]) == (None, [], [])
        assert gpu_plan["after"] == gpu_plan["before"]


def test_same_devices_at_other_placements_is_no_change():
    """mig-parted compares MIG devices by profile and count (apply/config.go current.Equals(desired))."""
    instances = fx.instances_from([{"profile": "3g.20gb", "placement": [4, 4]}, {"profile": "2g.10gb", "placement": [2, 2]},
                                   {"profile": "1g.5gb", "placement": [1, 1]}, {"profile": "1g.5gb", "placement": [0, 1]}])
    gpu = fx.gpu("A100-40GB", current=True, instances=instances)
    assert mp.fit(gpu, {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1})[1]["placement"] == [0, 2]   # the planner's own choice
    assert not mp.plan([gpu], SHIPPED, "all-balanced")["changed"]


def test_other_geometry_is_destroyed_compute_instances_first():
    instances = fx.instances_from([{"profile": "7g.40gb", "placement": [0, 8]}], first_id=5)
    gpu = fx.gpu("A100-40GB", current=True, instances=instances)
    gpu_plan = mp.plan([gpu], SHIPPED, "all-3g.20gb")["gpus"][0]
    assert gpu_plan["destroy"] == [{"kind": "compute_instance", "gpu_instance": 5, "id": 0},
                                   {"kind": "gpu_instance", "id": 5, "profile": "7g.40gb", "placement": [0, 8]}]
    assert [(c["profile"], c["placement"], c["compute_instance"]) for c in gpu_plan["create"]] == [
        ("3g.20gb", [0, 4], "full"), ("3g.20gb", [4, 4], "full")]
    assert (gpu_plan["mode_change"], gpu_plan["reset_required"]) == (None, False)
    assert gpu_plan["before"] == "GPU 0 (NVIDIA A100-SXM4-40GB): MIG enabled; 7g.40gb (0:8)"
    assert gpu_plan["after"] == "GPU 0 (NVIDIA A100-SXM4-40GB): MIG enabled; 3g.20gb x2 (0:4, 4:4)"


def test_a_gpu_instance_without_its_full_compute_instance_is_redone():
    instances = fx.instances_from([{"profile": "7g.40gb", "placement": [0, 8]}])
    instances[0]["compute_instances"] = [{"id": 0, "slices": 3}]
    gpu = fx.gpu("A100-40GB", current=True, instances=instances)
    gpu_plan = mp.plan([gpu], SHIPPED, "all-7g.40gb")["gpus"][0]
    assert gpu_plan["changed"] and len(gpu_plan["destroy"]) == 2 and len(gpu_plan["create"]) == 1
    assert "7g.40gb [3c.7g.40gb]" in gpu_plan["before"]


@pytest.mark.parametrize("current,pending,config,change,reset,after", [
    (False, False, "all-7g.40gb", "enable", True, "MIG enabled (after a reset); 7g.40gb (0:8)"),
    (False, True, "all-7g.40gb", None, True, "MIG enabled (after a reset); 7g.40gb (0:8)"),    # pending: reset only
    (True, False, "all-7g.40gb", "enable", False, "MIG enabled; 7g.40gb (0:8)"),
    (True, True, "all-disabled", "disable", True, "MIG disabled (after a reset)"),
    (False, True, "all-disabled", "disable", False, "MIG disabled"),
    (True, True, "all-enabled", None, False, None),
    (False, False, "all-disabled", None, False, None),
])
def test_modes_and_resets(current, pending, config, change, reset, after):
    gpu = fx.gpu("A100-40GB", current=current, pending=pending)
    node_plan = mp.plan([gpu], SHIPPED, config)
    gpu_plan = node_plan["gpus"][0]
    assert (gpu_plan["mode_change"], gpu_plan["reset_required"]) == (change, reset)
    assert node_plan["reset_required"] == ([0] if reset else [])
    if after is None:
        assert not gpu_plan["changed"]
    else:
        assert gpu_plan["changed"]
        assert gpu_plan["after"] == "GPU 0 (NVIDIA A100-SXM4-40GB): " + after


def test_disabling_destroys_the_instances_first():
    gpu = fx.gpu("H200", current=True, instances=fx.instances_from([{"profile": "4g.71gb", "placement": [0, 4]},
                                                                    {"profile": "3g.71gb", "placement": [4, 4]}]))
    gpu_plan = mp.plan([gpu], SHIPPED, "all-disabled")["gpus"][0]
    kinds = [d["kind"] for d in gpu_plan["destroy"]]
    assert kinds == ["compute_instance", "compute_instance", "gpu_instance", "gpu_instance"]
    assert (gpu_plan["mode_change"], gpu_plan["create"], gpu_plan["devices"]) == ("disable", [], {})


def test_without_a_profile_table_the_layout_waits_for_the_mode():
    """NVML gives profile info only with MIG on: a sibling of the same model stands in, else plan again later."""
    lone = dict(fx.gpu("A100-40GB"), profiles=None)
    gpu_plan = mp.plan([lone], SHIPPED, "all-balanced")["gpus"][0]
    assert gpu_plan["replan"] and gpu_plan["create"] == [] and gpu_plan["mode_change"] == "enable"
    assert gpu_plan["devices"] == {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
    assert gpu_plan["after"].endswith("1g.5gb x2, 2g.10gb, 3g.20gb (placed once MIG is on)")
    sibling = fx.gpu("A100-40GB", 1, current=True)
    node_plan = mp.plan([lone, sibling], SHIPPED, "all-balanced")
    assert not node_plan["gpus"][0]["replan"] and len(node_plan["gpus"][0]["create"]) == 4
    with pytest.raises(InputError) as err:
        mp.plan([lone, sibling], SHIPPED, "all-7g.80gb")
    assert "GPU 0 (NVIDIA A100-SXM4-40GB) has no MIG profile 7g.80gb" in err.value.msg


# ------------------------------------------------------------------ after the apply, and the diff
def test_verify_reads_back_the_plan():
    gpus = fx.node("A100-40GB", 2)
    node_plan = mp.plan(gpus, SHIPPED, "all-balanced")
    done = applied(gpus, node_plan)
    assert mp.verify(done, node_plan) == []
    done[1] = dict(done[1], instances=done[1]["instances"][:-1])
    pending = dict(done[0], mode={"current": False, "pending": True})
    assert mp.verify([pending, done[1]], node_plan) == [
        "GPU 0 (NVIDIA A100-SXM4-40GB): MIG disabled, enabled pending a reset, not MIG enabled",
        "GPU 1 (NVIDIA A100-SXM4-40GB) has MIG devices {1g.5gb: 1, 2g.10gb: 1, 3g.20gb: 1}, "
        "not {1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}"]
    assert mp.verify(done[:1], node_plan) == ["GPU 1 (NVIDIA A100-SXM4-40GB) is gone"]


def test_diff_has_one_line_per_gpu():
    gpus = [fx.gpu("A100-40GB", 0), fx.gpu("T4", 1)]
    result = mp.diff(mp.plan(gpus, SHIPPED, "all-balanced"))
    assert result == {
        "before_header": "MIG geometry (before)", "after_header": "MIG geometry (config all-balanced)",
        "before": "GPU 0 (NVIDIA A100-SXM4-40GB): MIG disabled\nGPU 1 (Tesla T4): not MIG-capable\n",
        "after": "GPU 0 (NVIDIA A100-SXM4-40GB): MIG enabled (after a reset); 1g.5gb x2 (2:1, 3:1), 2g.10gb (0:2), "
                 "3g.20gb (4:4)\nGPU 1 (Tesla T4): not MIG-capable\n"}


# ------------------------------------------------------------------ profile names as go-nvlib gives them
@pytest.mark.parametrize("constant,slices,memory_mib,device_mib,name", [
    (0, 1, 4864, 40960, "1g.5gb"),           # A100-SXM4-40GB (go-nvml mock/gpus/a100.go)
    (7, 1, 4864, 40960, "1g.5gb+me"),        # NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1
    (9, 1, 9856, 40960, "1g.10gb"),          # 1_SLICE_REV2
    (1, 2, 9856, 40960, "2g.10gb"),
    (2, 3, 19968, 40960, "3g.20gb"),
    (3, 4, 19968, 40960, "4g.20gb"),
    (4, 7, 40192, 40960, "7g.40gb"),
    (0, 1, 9856, 81920, "1g.10gb"),          # A100-SXM4-80GB
    (2, 3, 40960, 81920, "3g.40gb"),         # H100 80GB HBM3 (mock/gpus/h100.go)
    (15, 1, 24064, 97887, "1g.24gb+me.all"),  # RTX PRO 6000 shapes: attributes from the constant
    (10, 1, 24064, 97887, "1g.24gb+gfx"),
    (14, 2, 48128, 97887, "2g.48gb-me"),
])
def test_gpu_instance_profile_names(constant, slices, memory_mib, device_mib, name):
    assert mp.gpu_instance_profile_name(constant, slices, memory_mib, device_mib * 1024 * 1024) == name


def _with_info(gpus):
    """The GPUs with the SM and engine counts mig_nvml reads of each profile (here made up per slice count)."""
    for gpu in gpus:
        gpu["profiles"] = dict((name, dict(row, multiprocessors=14 * row["slices"], engines={
            "copy": row["slices"], "decoder": 0, "encoder": 0, "jpeg": 0, "ofa": 0}))
            for name, row in gpu["profiles"].items()) if gpu["profiles"] is not None else None
    return gpus


@pytest.mark.parametrize("gpus, config, expected", [
    # MIG on: each planned profile's attributes from the GPU's own table (memory of tests/support/mig_profiles.py)
    (_with_info(fx.node("A100-40GB", 1, current=True)), "all-balanced", {
        "1g.5gb": {"memory_mib": 4864, "multiprocessors": 14, "slices": {"gi": 1, "ci": 1},
                   "engines": {"copy": 1, "decoder": 0, "encoder": 0, "jpeg": 0, "ofa": 0}},
        "2g.10gb": {"memory_mib": 9856, "multiprocessors": 28, "slices": {"gi": 2, "ci": 2},
                    "engines": {"copy": 2, "decoder": 0, "encoder": 0, "jpeg": 0, "ofa": 0}},
        "3g.20gb": {"memory_mib": 19968, "multiprocessors": 42, "slices": {"gi": 3, "ci": 3},
                    "engines": {"copy": 3, "decoder": 0, "encoder": 0, "jpeg": 0, "ofa": 0}}}),
    # a reader without SM and engine counts: those unknown (None), as the facts key them
    (fx.node("H100-80GB", 1, current=True), "all-1g.10gb", {
        "1g.10gb": {"memory_mib": 10240, "multiprocessors": None, "slices": {"gi": 1, "ci": 1},
                    "engines": {"copy": None, "decoder": None, "encoder": None, "jpeg": None, "ofa": None}}}),
    # MIG off on the GPU, another of its model on: that GPU's table stands in
    ([fx.gpu("A100-40GB", 0, current=True), dict(fx.gpu("A100-40GB", 1), profiles=None)], "all-3g.20gb", {
        "3g.20gb": {"memory_mib": 19968, "multiprocessors": None, "slices": {"gi": 3, "ci": 3},
                    "engines": {"copy": None, "decoder": None, "encoder": None, "jpeg": None, "ofa": None}}}),
    # MIG off on every GPU of the model: NVML gave no table, nothing is known before the change
    ([dict(fx.gpu("A100-40GB", 0), profiles=None)], "all-3g.20gb", {}),
    # MIG turned off: no MIG device, no attributes
    (fx.node("A100-40GB", 1, current=True), "all-disabled", {}),
])
def test_plan_attributes_of_each_planned_profile(gpus, config, expected):
    assert mp.plan(gpus, SHIPPED, config)["gpus"][-1]["attributes"] == expected
