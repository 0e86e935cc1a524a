"""Unit tests for nvidia_gpu_health's entry point: its documentation against its argument spec, and
gpu_health_module.gather with its collaborators (command runner, NVML reader, uptime) replaced at the boundary.
The module against the real pynvml and the fake NVML: tests/functional/test_gpu_health_module.py."""
import json

import pytest
import yaml
from ansible.module_utils import _internal as ansible_internal
from ansible.module_utils.common import warnings as ansible_warnings
from ansible.module_utils.testing import patch_module_args

from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_health_module as hm
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_common import SourceUnavailable
from ansible_collections.kubegpu.nvidia.plugins.modules import nvidia_gpu_health


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(ansible_warnings, "_global_warnings", {})
    monkeypatch.setattr(ansible_internal, "is_controller", False)


def test_documentation_matches_the_argument_spec():
    options = yaml.safe_load(nvidia_gpu_health.DOCUMENTATION)["options"]
    assert set(options) == set(hm.ARGUMENT_SPEC)
    for name, spec in hm.ARGUMENT_SPEC.items():
        documented = options[name]
        assert documented["type"] == spec["type"], name
        assert documented.get("default") == spec.get("default"), name
        assert documented.get("choices") == spec.get("choices"), name
        assert documented.get("elements") == spec.get("elements"), name
    yaml.safe_load(nvidia_gpu_health.EXAMPLES)
    assert "health" in yaml.safe_load(nvidia_gpu_health.RETURN)


GPU = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0", "pci_bus_id": "00000000:18:00.0",
       "access_error": None, "signals": {"clocks": {"reasons": 0}}}
JOURNAL = (b"2026-11-27T00:10:00+0000 n kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.\n"
           b"2026-11-27T00:10:00+0000 n kernel: NVRM: Xid (PCI:0000:c1:00): 48, pid=1, DBE\n")


def gather(args, read_nvml, journal=(0, JOURNAL, b""), which="/usr/bin/journalctl"):
    calls = []

    def run_command(argv):
        calls.append(argv)
        return journal

    with patch_module_args(args):
        module = hm.HealthModule()
    result = hm.gather(module, run_command=run_command, which=lambda name: which, read_nvml=read_nvml,
                       uptime=lambda: 600.0)
    return result, calls


def test_xids_from_the_journal_go_to_their_gpu_and_strays_to_the_node():
    result, calls = gather({"kernel_log": "journal"}, lambda: ("570.86.15", [dict(GPU)]))
    health = result["health"]
    assert result["changed"] is False
    assert calls == [["/usr/bin/journalctl", "-k", "-o", "short-iso", "--no-pager", "-q", "-b"]]
    assert health["gpus"][0]["xids"][0]["xid"] == 79
    assert health["gpus"][0]["action"] == "reboot_node"
    assert [(f["gpu"], f["signal"]) for f in health["findings"]] == [(0, "xid"), (None, "xid")]
    assert health["kernel_log"]["stray_xids"][0]["pci"] == "0000:c1:00"
    assert health["findings"][1]["reason"] == "PCI 0000:c1:00 (no GPU NVML lists): Xid 48: double-bit ECC error"


def test_nvml_unusable_is_a_finding_and_the_log_is_still_read():
    def unusable():
        raise SourceUnavailable("NVML could not be initialised: Driver Not Loaded (NVML_ERROR_DRIVER_NOT_LOADED)")

    health = gather({"kernel_log": "journal"}, unusable)[0]["health"]
    assert health["gpus"] == []
    # the Xids (79: reboot, 48: reset) of GPUs NVML does not list, then NVML itself (no action of its own)
    assert [(f["signal"], f["action"]) for f in health["findings"]] == [
        ("xid", "reboot_node"), ("xid", "reset_gpu"), ("nvml", "none")]
    assert health["reason"].startswith("PCI 0000:18:00 (no GPU NVML lists): Xid 79")
    assert health["kernel_log"]["xid_events"] == 2


def test_a_journal_that_fails_is_degraded_not_an_error():
    health = gather({"kernel_log": "journal"}, lambda: ("570.86.15", [dict(GPU)]),
                    journal=(1, b"", b"Failed to open journal: Permission denied\n"))[0]["health"]
    assert (health["severity"], health["action"]) == ("degraded", "none")
    assert health["reason"] == ("cannot read the kernel log for Xids: journalctl -k exited with 1: Failed to open "
                                "journal: Permission denied")


def test_module_main_fails_with_one_line_for_bad_input(capsys):
    with patch_module_args({"thresholds": {"temperature_margin": -1}}):
        with pytest.raises(SystemExit) as caught:
            nvidia_gpu_health.main()
    result = json.loads(capsys.readouterr().out)
    assert caught.value.code == 1
    assert result["msg"] == "thresholds.temperature_margin must be from 0 to 50, got -1"
    assert result["error_kind"] == "input"
