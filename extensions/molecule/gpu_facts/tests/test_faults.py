"""Faults injected on the H100 node: the module falls back or leaves fields empty, never fails."""
from conftest import NODE_CONFIG, run_facts

testinfra_hosts = ["ansible://gpu-facts-h100"]

H100_PCI = ["00000000:%s:00.0" % bus for bus in ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")]


def gpu_facts(result):
    assert not result.get("failed"), result
    assert result["changed"] is False
    return result["ansible_facts"]["nvidia_gpu"]


def test_driver_not_loaded_falls_back_to_pci(host, faults):
    faults.use_profile("driver-not-loaded")
    result = run_facts(host)
    facts = gpu_facts(result)
    assert facts["source"] == "pci"
    # the eight GPUs of the PCI view; the four NVSwitches (vendor 0x10de, class 0x0680) are not GPUs
    assert facts["count"] == 8
    assert [device["pci_bus_id"] for device in facts["devices"]] == H100_PCI
    assert {device["name"] for device in facts["devices"]} == {"NVIDIA H100 80GB HBM3"}
    assert {device["uuid"] for device in facts["devices"]} == {None}
    assert facts["driver_version"] is None
    assert any("Driver Not Loaded" in warning for warning in result["warnings"]), result["warnings"]


def test_missing_symbols_leave_fields_null(host, faults):
    faults.use_library("legacy")
    result = run_facts(host)
    facts = gpu_facts(result)
    assert facts["source"] == "nvml"
    assert facts["count"] == 8
    for device in facts["devices"]:
        assert device["name"] == "NVIDIA H100 80GB HBM3"
        assert device["uuid"].startswith("GPU-")
        assert device["compute_capability"] is None
        assert device["mig"] == {"current": None, "pending": None, "devices": None}
    assert facts["driver_version"] == "535.183.01"


def test_not_supported_leaves_fields_null(host, faults):
    faults.use_profile("not-supported")
    facts = gpu_facts(run_facts(host))
    assert facts["source"] == "nvml"
    assert facts["count"] == 1
    device = facts["devices"][0]
    assert device["uuid"] == "GPU-47eaa099-2cb6-416d-86dc-283cf0480ff9"
    assert device["memory_mib"] == 81559
    assert device["compute_capability"] is None
    assert device["mig"] == {"current": None, "pending": None, "devices": None}
    assert facts["cuda_driver_version"] is None
    assert facts["driver_version"] == "535.183.01"


def test_corrupt_config_is_reported_and_left_alone(host, faults):
    faults.use_profile("corrupt")
    before = host.file(NODE_CONFIG).sha256sum
    result = run_facts(host)
    facts = gpu_facts(result)
    assert facts["source"] == "pci"
    assert facts["count"] == 8
    assert any("%s:7: expected 'key = value'" % NODE_CONFIG in warning for warning in result["warnings"]), \
        result["warnings"]
    assert host.file(NODE_CONFIG).sha256sum == before


def test_check_mode_gives_the_same_facts(host, facts_result):
    checked = run_facts(host, check=True)
    assert checked["changed"] is False
    assert checked["ansible_facts"] == facts_result["ansible_facts"]
