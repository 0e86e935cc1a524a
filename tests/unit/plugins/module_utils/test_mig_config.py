"""mig-parted v1 configurations (plugins/module_utils/mig_config.py) and the shipped configs (mig_configs.py).

Cases marked "spec_test.go" follow NVIDIA/mig-parted api/spec/v1/spec_test.go (TestSpec, TestMigConfigSpec),
"mig_config" pkg/types/mig_config.go (AssertValidFormat), "mig_profile" go-nvlib
pkg/nvlib/device/mig_profile.go (parseMigProfile) and "device.go" pkg/types/device.go (NewDeviceIDFromString).
"""
from __future__ import absolute_import, division, print_function

import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_config as mc
from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_configs
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

DISABLED = {"devices": "all", "mig-enabled": False}


def doc(*specs, name="c"):
    return {"version": "v1", "mig-configs": {name: list(specs)}}


# ------------------------------------------------------------------ documents (spec_test.go TestSpec)
@pytest.mark.parametrize("source,configs", [
    ("", {}),                                                        # "Empty"
    ('{"version": "v1"}', {}),                                       # "Only version field"
    ('{"version": "v1", "mig-configs": {"all-disabled": [{"devices": "all", "mig-enabled": false}]}}',
     {"all-disabled": [{"devices": "all", "mig_enabled": False, "mig_devices": {}, "device_filter": []}]}),
    ("version: v1\nmig-configs:\n  half:\n    - devices: [0, 1]\n      mig-enabled: false\n"
     "    - devices: [2, 3]\n      mig-enabled: true\n      mig-devices: {1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}\n",
     {"half": [{"devices": [0, 1], "mig_enabled": False, "mig_devices": {}, "device_filter": []},
               {"devices": [2, 3], "mig_enabled": True, "mig_devices": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
                "device_filter": []}]}),
])
def test_documents_mig_parted_accepts(source, configs):
    assert mc.parse(source) == configs


@pytest.mark.parametrize("source,message", [
    ('{"version": "v2", "mig-configs": {"a": [{"devices": "all", "mig-enabled": false}]}}',
     "the MIG configuration has version 'v2'; only version: v1 is known"),          # "Well formed - wrong version"
    ('{"version": "v2"}', "has version 'v2'"),                                      # "Only version field - wrong"
    ('{"mig-configs": {"a": [{"devices": "all", "mig-enabled": false}]}}',
     "the MIG configuration has no 'version' field"),                                # "Missing version field"
    ('{"bogus": "field", "version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": false}]}}',
     "the MIG configuration has an unexpected field 'bogus'"),                       # "Erroneous field"
    ('{"version": "v1", "mig-configs": {}}', "mig-configs is empty"),               # "Empty 'mig-configs'"
    ('{"version": "v1", "mig-configs": {"a": []}}', "config 'a' is empty"),        # spec.go: empty list of a config
    ("version: v1\nmig-configs: [a]\n", "mig-configs must be a mapping"),
    ("version: v1\nmig-configs:\n  a: {devices: all}\n", "config 'a' must be a list of specs, not a mapping"),
    ("- just\n- a list\n", "must be a mapping with version and mig-configs, not a list"),
    ("version: v1\nmig-configs: {a: [\n", "the MIG configuration is not valid YAML (line"),
    (42, "must be YAML text or a mapping, not a number"),
])
def test_documents_refused(source, message):
    with pytest.raises(InputError) as err:
        mc.parse(source)
    assert message in err.value.msg
    assert "\n" not in err.value.msg


# ------------------------------------------------------------------ specs (spec_test.go TestMigConfigSpec)
@pytest.mark.parametrize("spec,parsed", [
    ({"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 2}},            # "Well formed"
     {"devices": "all", "mig_enabled": True, "mig_devices": {"1g.5gb": 2}, "device_filter": []}),
    ({"device-filter": "0x20B010DE", "devices": "all", "mig-enabled": True,             # "Well formed with filter"
      "mig-devices": {"1g.5gb": 2}},
     {"devices": "all", "mig_enabled": True, "mig_devices": {"1g.5gb": 2}, "device_filter": [(0x20B010DE, None)]}),
    ({"device-filter": ["0x20B010DE", "0x20B110DE"], "devices": "all", "mig-enabled": True,  # "multi-filter"
      "mig-devices": {"1g.5gb": 2}},
     {"devices": "all", "mig_enabled": True, "mig_devices": {"1g.5gb": 2},
      "device_filter": [(0x20B010DE, None), (0x20B110DE, None)]}),
    ({"devices": "all", "mig-enabled": False},                                          # "Missing 'mig-devices', false"
     {"devices": "all", "mig_enabled": False, "mig_devices": {}, "device_filter": []}),
    ({"devices": [0, 1, 2, 3], "mig-enabled": False},                                   # "'devices' []int"
     {"devices": [0, 1, 2, 3], "mig_enabled": False, "mig_devices": {}, "device_filter": []}),
    ({"devices": "all", "mig-enabled": True, "mig-devices": {}},                        # all-enabled: {} allowed
     {"devices": "all", "mig_enabled": True, "mig_devices": {}, "device_filter": []}),
    ({"devices": "all", "mig-enabled": False, "mig-devices": {}},                       # disabled with {} is empty
     {"devices": "all", "mig_enabled": False, "mig_devices": {}, "device_filter": []}),
    ({"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 0, "3g.20gb": 1}},  # a zero count among others
     {"devices": "all", "mig_enabled": True, "mig_devices": {"1g.5gb": 0, "3g.20gb": 1}, "device_filter": []}),
    ({"device-filter": "0x20B010DE:0x134F10DE", "devices": "all", "mig-enabled": False},  # device.go: subsystem
     {"devices": "all", "mig_enabled": False, "mig_devices": {}, "device_filter": [(0x20B010DE, 0x134F10DE)]}),
    ({"device-filter": "", "devices": "all", "mig-enabled": False},                     # helpers.go: "" is no filter
     {"devices": "all", "mig_enabled": False, "mig_devices": {}, "device_filter": []}),
])
def test_specs_mig_parted_accepts(spec, parsed):
    assert mc.parse(doc(spec)) == {"c": [parsed]}


@pytest.mark.parametrize("spec,message", [
    ({"mig-enabled": True, "mig-devices": {"1g.5gb": 2}}, "spec 0 is missing the required field 'devices'"),
    ({"devices": "all", "mig-devices": {"1g.5gb": 2}}, "spec 0 is missing the required field 'mig-enabled'"),
    ({"devices": "all", "mig-enabled": True}, "mig-devices is required when mig-enabled is true"),
    ({"devices": "all", "mig-enabled": True, "mig-devices": {"bogus": 2}}, "MIG profile 'bogus' is malformed"),
    ({"bogus": "field", "devices": "all", "mig-enabled": False}, "spec 0 has an unexpected field 'bogus'"),
    ({"devices": "bogus", "mig-enabled": False}, "devices must be 'all' or a list of GPU indices, not 'bogus'"),
    ({"devices": {}, "mig-enabled": False}, "devices must be 'all' or a list of GPU indices, not a mapping"),
    ({"devices": [], "mig-enabled": False}, "devices is an empty list"),
    ({"devices": [0, -1], "mig-enabled": False}, "devices has -1; GPU indices are non-negative integers"),
    ({"devices": [0, True], "mig-enabled": False}, "devices has True"),
    ({"devices": "all", "mig-enabled": "yes please"}, "mig-enabled must be true or false"),
    ({"devices": "all", "mig-enabled": False, "mig-devices": {"1g.5gb": 1}},
     "mig-devices must be empty when mig-enabled is false"),
    ({"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": -1}},            # mig_config: invalid count
     "the count of 1g.5gb must be a non-negative integer, not -1"),
    ({"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 1.5}}, "not 1.5"),
    ({"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": "2"}}, "not '2'"),
    ({"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 0}},             # mig_config: all counts 0
     "every count in mig-devices is 0"),
    ({"devices": "all", "mig-enabled": True, "mig-devices": ["1g.5gb"]}, "mig-devices must be a mapping"),
    ({"device-filter": [], "devices": "all", "mig-enabled": False}, "device-filter is an empty list"),
    ({"device-filter": "A100-SXM4-40GB", "devices": "all", "mig-enabled": False},
     "device-filter 'A100-SXM4-40GB' is not a PCI id such as 0x20B010DE"),
    ({"device-filter": "0x20B010DE:0x1:0x2", "devices": "all", "mig-enabled": False}, "is not a PCI id"),
    ({"device-filter": "0x120B010DE", "devices": "all", "mig-enabled": False}, "is not a PCI id"),
    ({"device-filter": {"id": 1}, "devices": "all", "mig-enabled": False}, "device-filter must be a PCI id"),
    ("all", "spec 0 must be a mapping with devices and mig-enabled, not a string"),
])
def test_specs_refused_with_the_config_and_the_spec_index(spec, message):
    with pytest.raises(InputError) as err:
        mc.parse(doc(DISABLED, spec, name="mine"), "mig_configs")
    assert err.value.msg.startswith("mig_configs: config 'mine', spec 1")
    assert message.replace("spec 0", "spec 1") in err.value.msg
    assert "\n" not in err.value.msg


# ------------------------------------------------------------------ profiles (mig_profile.go parseMigProfile)
@pytest.mark.parametrize("text,profile,name", [
    ("1g.5gb", (1, 1, 5, (), ()), "1g.5gb"),
    ("3c.3g.20gb", (3, 3, 20, (), ()), "3g.20gb"),
    ("1c.3g.20gb", (1, 3, 20, (), ()), "1c.3g.20gb"),
    ("1g.10gb+me", (1, 1, 10, ("me",), ()), "1g.10gb+me"),
    ("1g.24gb+me.all", (1, 1, 24, ("me.all",), ()), "1g.24gb+me.all"),
    ("1g.24gb+gfx", (1, 1, 24, ("gfx",), ()), "1g.24gb+gfx"),
    ("2g.48gb-me", (2, 2, 48, (), ("me",)), "2g.48gb-me"),
    ("1g.5gb+me,gfx", (1, 1, 5, ("gfx", "me"), ()), "1g.5gb+gfx,me"),
    ("0g.0gb", (0, 0, 0, (), ()), "0g.0gb"),        # spec_test.go: "valid-format-non-existent-devices"
])
def test_profile_grammar(text, profile, name):
    assert tuple(mc.parse_profile(text)) == profile
    assert mc.canonical_profile(text) == name


@pytest.mark.parametrize("text", [
    "", "bogus", "1g", "1g.5", "1g.5gb.", "g.5gb", "1g.5gb+", "1g.5gb+me-gfx", "1g.5gb+me,me", "1g.5gb+1me",
    "1g.5gb+.me", "1g.5gb+me.", "1g.5gb+m e", " 1g.5gb", "1c.2c.1g.5gb", "1x.1g.5gb", "1g.5GB", "-1g.5gb",
])
def test_profile_grammar_refused(text):
    with pytest.raises(InputError) as err:
        mc.parse_profile(text)
    assert "is malformed" in err.value.msg


def test_device_filter_matching():
    """helpers.go MatchesDeviceFilter with device.go Matches: a subsystem in the filter must match too."""
    spec = mc.parse(doc({"device-filter": ["0x20B010DE", "0x233010DE:0x16C110DE"], "devices": "all",
                         "mig-enabled": False}))["c"][0]
    assert mc.matches_filter(spec, 0x20B010DE)
    assert mc.matches_filter(spec, 0x20B010DE, 0x12345678)
    assert not mc.matches_filter(spec, 0x233010DE)
    assert mc.matches_filter(spec, 0x233010DE, 0x16C110DE)
    assert not mc.matches_filter(spec, 0x20B210DE)
    assert mc.matches_filter(mc.parse(doc(DISABLED))["c"][0], 0x1EB810DE)
    assert [mc.format_device_id(f) for f in spec["device_filter"]] == ["0x20B010DE", "0x233010DE:0x16C110DE"]


# ------------------------------------------------------------------ selecting and merging
def test_unknown_config_name_suggests_the_nearest():
    with pytest.raises(InputError) as err:
        mc.select(mig_configs.shipped(), "all-balance")
    assert err.value.msg.startswith("MIG config 'all-balance' does not exist (did you mean 'all-balanced'")
    with pytest.raises(InputError) as err:
        mc.select(mig_configs.shipped(), "")
    assert "no MIG config selected" in err.value.msg


def test_users_configs_merge_over_the_shipped_ones_by_name():
    user = "version: v1\nmig-configs:\n  all-balanced:\n    - devices: all\n      mig-enabled: false\n" \
           "  mine:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices: {7g.40gb: 1}\n"
    merged = mig_configs.configs(user)
    assert merged["all-balanced"] == [{"devices": "all", "mig_enabled": False, "mig_devices": {}, "device_filter": []}]
    assert merged["mine"][0]["mig_devices"] == {"7g.40gb": 1}
    assert merged["all-1g.5gb"] == mig_configs.shipped()["all-1g.5gb"]
    assert mig_configs.shipped()["all-balanced"][0]["mig_enabled"] is True   # the shipped set is left as it was
    with pytest.raises(InputError) as err:
        mig_configs.configs({"version": "v1", "mig-configs": {"x": [{"devices": "all"}]}})
    assert err.value.msg == "mig_configs: config 'x', spec 0 is missing the required field 'mig-enabled'"


# ------------------------------------------------------------------ the shipped configs (GPU Operator v26.7.0)
def test_the_gpu_operators_configs_are_shipped():
    shipped = mig_configs.shipped()
    for name in ("all-disabled", "all-enabled", "all-balanced", "all-1g.5gb", "all-1g.5gb.me", "all-2g.10gb",
                 "all-3g.20gb", "all-4g.20gb", "all-7g.40gb", "all-1g.10gb", "all-3g.40gb", "all-7g.80gb",
                 "all-1g.18gb", "all-3g.71gb", "all-7g.141gb"):
        assert name in shipped, name
    assert len(shipped) == 81
    assert shipped["all-disabled"] == [{"devices": "all", "mig_enabled": False, "mig_devices": {}, "device_filter": []}]
    assert shipped["all-enabled"] == [{"devices": "all", "mig_enabled": True, "mig_devices": {}, "device_filter": []}]


@pytest.mark.parametrize("pci_id,devices", [
    (0x20B010DE, {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),      # A100-SXM4-40GB
    (0x20B210DE, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),     # A100-SXM4-80GB
    (0x233010DE, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),     # H100 80GB HBM3
    (0x233510DE, {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}),     # H200
    (0x20B710DE, {"1g.6gb": 2, "2g.12gb": 1}),                    # A30
])
def test_all_balanced_by_device_filter(pci_id, devices):
    """REFERENCE.md 8.1: the same name means other profiles on 40 GB, 80 GB and 141 GB parts."""
    specs = [s for s in mig_configs.shipped()["all-balanced"] if mc.matches_filter(s, pci_id)]
    assert len(specs) == 1
    assert specs[0]["mig_devices"] == devices
