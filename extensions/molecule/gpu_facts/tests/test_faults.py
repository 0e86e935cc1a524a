"""Faults injected on the H100 node: the module falls back or leaves fields empty, never fails or hangs."""
import time

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
    # the h100x8 profile's driver (570: the lab runs its H100 on DRA, which needs 565 or newer)
    assert facts["driver_version"] == "570.172.08"


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


def test_a_hanging_driver_and_nvidia_smi_are_given_up_in_time(host, faults):
    """NVML never answers (fake fault = hang) and nvidia-smi hangs: the module returns after the two timeouts."""
    faults.use_profile("hang")
    faults.use_nvidia_smi("sleep 300 &\nsleep 300\n")
    started = time.monotonic()
    result = run_facts(host, "nvml_timeout=2 command_timeout=2")
    elapsed = time.monotonic() - started
    facts = gpu_facts(result)
    # the GPUs are still found on the PCI bus
    assert facts["source"] == "pci" and facts["count"] == 8
    assert any("NVML did not answer within 2 s (nvml_timeout)" in warning and
               "nvidia-smi did not answer within 2 s (command_timeout) and was stopped" in warning
               for warning in result["warnings"]), result["warnings"]
    assert 4 <= elapsed < 60
    assert "sleep 300" not in host.check_output("ps -eo args")


def test_require_with_a_hanging_driver_fails_as_timeout(host, faults):
    faults.use_profile("hang")
    result = run_facts(host, "nvml_timeout=2 require=true")
    assert result["failed"] is True and result["error_kind"] == "timeout"
    assert "NVML did not answer within 2 s (nvml_timeout)" in result["msg"]


def test_a_name_that_is_not_utf8_under_debians_pynvml(host, faults):
    faults.use_profile("non-utf8")
    result = run_facts(host)
    facts = gpu_facts(result)
    assert facts["source"] == "nvml"
    assert facts["devices"][0]["name"] == "NVIDIA A100\ufffd-SXM4-40GB \ufffd"
    assert facts["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert any("NVML's name of GPU 0 is not valid UTF-8 (NVIDIA A100\\xe9-SXM4-40GB \\xff)" in warning
               for warning in result["warnings"]), result["warnings"]
