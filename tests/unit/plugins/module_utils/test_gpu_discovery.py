"""Unit tests for the source order and warnings (plugins/module_utils/gpu_discovery.py)."""
import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_discovery as gd
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_common import (
    SourceUnavailable,
    device_facts,
)

H100 = device_facts(0, name="NVIDIA H100 80GB HBM3", uuid="GPU-1", memory_mib=81559, pci_bus_id="00000000:18:00.0",
                    compute_capability="9.0", mig_current=0, mig_pending=0)
T4 = device_facts(1, name="Tesla T4", uuid="GPU-2", memory_mib=15360, compute_capability="7.5")


def nvml_ok(*dummy, **kwargs):
    return "535.183.01", "12.2", [dict(H100)]


def nvml_fails(message, expected=False, timed_out=False):
    def fail(*dummy, **kwargs):
        raise SourceUnavailable(message, expected=expected, timed_out=timed_out)
    return fail


@pytest.fixture(autouse=True)
def no_efi(monkeypatch, tmp_path):
    """No EFI firmware unless a test gives one: the host's own must not leak into the facts."""
    monkeypatch.setattr(gd, "EFI_ROOT", str(tmp_path / "no-efi"))


def smi_must_not_run(argv):
    raise AssertionError("nvidia-smi must not run: %r" % (argv,))


@pytest.fixture
def machine(tmp_path):
    path = tmp_path / "product_name"
    path.write_text("DGX H100\n")
    return str(path)


@pytest.fixture
def no_pci(tmp_path):
    return str(tmp_path / "no-pci")


@pytest.fixture
def pci_h100(tmp_path):
    path = tmp_path / "pci" / "0000:18:00.0"
    path.mkdir(parents=True)
    (path / "vendor").write_text("0x10de")
    (path / "class").write_text("0x030200")
    (path / "device").write_text("0x2330")
    return str(tmp_path / "pci")


def test_nvml_first_and_no_subprocess(monkeypatch, machine, no_pci):
    monkeypatch.setattr(gd.gpu_discovery_nvml, "discover_nvml", nvml_ok)
    facts, warnings = gd.discover_gpus(run_command=smi_must_not_run, which=lambda n: "/bin/" + n,
                                       pci_root=no_pci, machine_path=machine)
    assert warnings == []
    assert facts["source"] == "nvml"
    assert facts["present"] is True and facts["count"] == 1
    assert facts["driver_version"] == "535.183.01" and facts["cuda_driver_version"] == "12.2"
    assert facts["machine"] == "DGX H100"
    assert facts["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert facts["labels"]["nvidia.com/gpu.machine"] == "DGX-H100"
    assert gd.unusable_reason(facts, warnings) is None


def test_label_options_reach_the_labels(monkeypatch, machine, no_pci):
    monkeypatch.setattr(gd.gpu_discovery_nvml, "discover_nvml", nvml_ok)
    facts, dummy = gd.discover_gpus(pci_root=no_pci, machine_path=machine, mig_strategy="mixed",
                                    sharing_strategy="time-slicing", replicas=3)
    assert facts["labels"]["nvidia.com/gpu.replicas"] == "3"
    assert facts["labels"]["nvidia.com/mig.strategy"] == "mixed"


def test_nvml_failure_falls_back_to_nvidia_smi(monkeypatch, machine, no_pci):
    monkeypatch.setattr(gd.gpu_discovery_nvml, "discover_nvml",
                        nvml_fails("NVML could not be initialised: Driver Not Loaded (NVML_ERROR_DRIVER_NOT_LOADED)"))
    output = "0, Tesla T4, GPU-2, 15360, 00000000:00:04.0, 0x1EB810DE, 535.183.01, 7.5, [N/A], [N/A]\n"
    facts, warnings = gd.discover_gpus(run_command=lambda argv: (0, output, ""), which=lambda n: "/bin/" + n,
                                       pci_root=no_pci, machine_path=machine)
    assert facts["source"] == "nvidia-smi"
    assert facts["devices"][0]["pci_class"] is None
    assert facts["devices"][0]["name"] == "Tesla T4"
    assert facts["cuda_driver_version"] is None
    assert warnings == ["GPU facts come from nvidia-smi: NVML could not be initialised: Driver Not Loaded "
                        "(NVML_ERROR_DRIVER_NOT_LOADED)"]
    assert gd.unusable_reason(facts, warnings) is None


def test_gpus_without_driver_come_from_pci(monkeypatch, machine, pci_h100):
    monkeypatch.setattr(gd.gpu_discovery_nvml, "discover_nvml",
                        nvml_fails("NVML could not be initialised: NVML_ERROR_LIBRARY_NOT_FOUND", expected=True))
    facts, warnings = gd.discover_gpus(pci_root=pci_h100, machine_path=machine)
    assert facts["source"] == "pci"
    assert facts["present"] is True and facts["count"] == 1
    assert facts["driver_version"] is None
    assert facts["devices"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert warnings == ["1 NVIDIA GPU(s) found on the PCI bus but no usable driver: NVML could not be "
                        "initialised: NVML_ERROR_LIBRARY_NOT_FOUND; nvidia-smi was not found"]
    assert "nvidia.com/mig.capable" not in facts["labels"]
    assert facts["labels"]["nvidia.com/gpu.count"] == "1"
    assert gd.unusable_reason(facts, warnings) == "No usable NVIDIA GPU: " + warnings[0]


def test_cpu_machine_with_nothing_installed_is_quiet(monkeypatch, no_pci, tmp_path):
    monkeypatch.setattr(gd.gpu_discovery_nvml, "discover_nvml",
                        nvml_fails("NVML could not be initialised: NVML_ERROR_LIBRARY_NOT_FOUND", expected=True))
    facts, warnings = gd.discover_gpus(pci_root=no_pci, machine_path=str(tmp_path / "absent"))
    assert facts == {"present": False, "count": 0, "source": "none", "driver_version": None,
                     "cuda_driver_version": None, "devices": [], "machine": None, "labels": {},
                     "secure_boot": {"enabled": None, "setup_mode": None, "source": None}}
    assert warnings == []
    assert gd.unusable_reason(facts, warnings) == "No NVIDIA GPU found on this machine"


def test_cpu_machine_with_broken_nvml_warns(monkeypatch, no_pci, machine):
    monkeypatch.setattr(gd.gpu_discovery_nvml, "discover_nvml",
                        nvml_fails("NVML could not be initialised: Unknown Error (NVML_ERROR_UNKNOWN)"))
    facts, warnings = gd.discover_gpus(pci_root=no_pci, machine_path=machine)
    assert facts["source"] == "none" and facts["present"] is False
    assert warnings == ["No NVIDIA GPU found: NVML could not be initialised: Unknown Error (NVML_ERROR_UNKNOWN); "
                        "nvidia-smi was not found"]
    assert gd.unusable_reason(facts, warnings) == "No NVIDIA GPU found on this machine: " + warnings[0]


def test_nvidia_smi_failure_is_reported_too(monkeypatch, no_pci, machine):
    monkeypatch.setattr(gd.gpu_discovery_nvml, "discover_nvml",
                        nvml_fails("the Python library pynvml (package nvidia-ml-py or python3-pynvml) is not installed"))
    facts, warnings = gd.discover_gpus(run_command=lambda argv: (9, "", "NVIDIA-SMI has failed"),
                                       which=lambda n: "/bin/" + n, pci_root=no_pci, machine_path=machine)
    assert facts["source"] == "none"
    assert warnings == ["No NVIDIA GPU found: the Python library pynvml (package nvidia-ml-py or python3-pynvml) "
                        "is not installed; nvidia-smi failed (rc=9): NVIDIA-SMI has failed"]


def test_nvml_without_gpus_is_none(monkeypatch, no_pci, machine):
    monkeypatch.setattr(gd.gpu_discovery_nvml, "discover_nvml", lambda *a, **k: ("535.183.01", "12.2", []))
    facts, warnings = gd.discover_gpus(run_command=smi_must_not_run, pci_root=no_pci, machine_path=machine)
    assert (facts["present"], facts["count"], facts["source"]) == (False, 0, "none")
    assert facts["labels"] == {}
    assert warnings == []


def test_mixed_models_warn(monkeypatch, no_pci, machine):
    monkeypatch.setattr(gd.gpu_discovery_nvml, "discover_nvml",
                        lambda *a, **k: ("535.183.01", "12.2", [dict(T4), dict(H100)]))
    facts, warnings = gd.discover_gpus(pci_root=no_pci, machine_path=machine)
    assert [d["index"] for d in facts["devices"]] == [0, 1]
    assert warnings == ["Multiple GPU models on this node (NVIDIA H100 80GB HBM3, Tesla T4): "
                        "the node labels describe NVIDIA H100 80GB HBM3"]


def test_defaults_run_no_command(monkeypatch, no_pci, machine):
    monkeypatch.setattr(gd.gpu_discovery_nvml, "discover_nvml", nvml_fails("NVML broke"))
    facts, warnings = gd.discover_gpus(pci_root=no_pci, machine_path=machine)
    assert warnings == ["No NVIDIA GPU found: NVML broke; nvidia-smi was not found"]
    assert gd._no_command(["nvidia-smi"]) == (127, "", "cannot run commands here")


def test_read_machine(tmp_path):
    path = tmp_path / "product_name"
    path.write_bytes(b"  PowerEdge XE9680 \n")
    assert gd.read_machine(str(path)) == "PowerEdge XE9680"
    path.write_bytes(b"\n")
    assert gd.read_machine(str(path)) is None


def test_nvml_gets_the_pci_class_reader_and_the_timeout(monkeypatch, machine, pci_h100):
    seen = {}

    def nvml(lib, decoder, pci_class, timeout):
        seen.update(timeout=timeout, decoder=decoder)
        return "535.183.01", "12.2", [dict(H100, pci_class=pci_class(H100["pci_bus_id"]))]
    monkeypatch.setattr(gd.gpu_discovery_nvml, "discover_nvml", nvml)
    facts, warnings = gd.discover_gpus(pci_root=pci_h100, machine_path=machine, nvml_timeout=7)
    assert facts["devices"][0]["pci_class"] == "0x030200"
    assert seen["timeout"] == 7 and warnings == []


def test_nvidia_smi_devices_get_their_pci_class(monkeypatch, machine, pci_h100):
    monkeypatch.setattr(gd.gpu_discovery_nvml, "discover_nvml", nvml_fails("NVML broke"))
    output = "0, NVIDIA H100 80GB HBM3, GPU-1, 81559, 00000000:18:00.0, 0x233010DE, 535.183.01, 9.0, Disabled, Disabled\n"
    facts, dummy = gd.discover_gpus(run_command=lambda argv: (0, output.encode(), b""), which=lambda n: "/bin/" + n,
                                    pci_root=pci_h100, machine_path=machine)
    assert facts["source"] == "nvidia-smi"
    assert facts["devices"][0]["pci_class"] == "0x030200"


def test_strings_that_are_not_utf8_are_replaced_with_a_warning(monkeypatch, machine, no_pci):
    monkeypatch.setattr(gd.gpu_discovery_nvml, "discover_nvml", nvml_fails("NVML broke"))
    output = b"0, Tesla T4\xff, GPU-2, 15360, 00000000:00:04.0, 0x1EB810DE, 535.183.01, 7.5, [N/A], [N/A]\n"
    found = gd.discover(run_command=lambda argv: (0, output, b""), which=lambda n: "/bin/" + n, pci_root=no_pci,
                        machine_path=machine)
    assert found.facts["devices"][0]["name"] == "Tesla T4\ufffd"
    assert found.facts["labels"]["nvidia.com/gpu.product"] == "Tesla-T4"
    assert found.warnings == [
        "GPU facts come from nvidia-smi: NVML broke",
        "The output of nvidia-smi is not valid UTF-8 (0, Tesla T4\\xff, GPU-2, 15360, 00000000:00:04.0, 0x1EB810DE, "
        "535.183.01, 7.5, [N/A], [N/A]); the facts show each invalid byte as U+FFFD"]
    # the failure of require: true names the fallback only
    assert found.fallback_warnings == found.warnings[:1]


def test_timed_out_sources_are_marked(monkeypatch, no_pci, machine):
    monkeypatch.setattr(gd.gpu_discovery_nvml, "discover_nvml",
                        nvml_fails("NVML did not answer within 30 s (nvml_timeout)", timed_out=True))
    found = gd.discover(pci_root=no_pci, machine_path=machine)
    assert found.timed_out is True
    assert [str(cause) for cause in found.causes] == [
        "NVML did not answer within 30 s (nvml_timeout)", "nvidia-smi was not found"]
    monkeypatch.setattr(gd.gpu_discovery_nvml, "discover_nvml", nvml_fails("NVML broke"))
    assert gd.discover(pci_root=no_pci, machine_path=machine).timed_out is False


def test_secure_boot_state_is_in_the_facts(monkeypatch, no_pci, machine, tmp_path):
    efivars = tmp_path / "efi" / "efivars"
    efivars.mkdir(parents=True)
    (efivars / "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c").write_bytes(b"\x06\x00\x00\x00\x01")
    (efivars / "SetupMode-8be4df61-93ca-11d2-aa0d-00e098032b8c").write_bytes(b"\x06\x00\x00\x00\x00")
    monkeypatch.setattr(gd.gpu_discovery_nvml, "discover_nvml", nvml_ok)
    facts, warnings = gd.discover_gpus(pci_root=no_pci, machine_path=machine, efi_root=str(tmp_path / "efi"))
    assert facts["secure_boot"] == {"enabled": True, "setup_mode": False, "source": "efivars"}
    assert warnings == []


def test_unusable_reason_on_none_uses_the_fallback_warning():
    facts = {"source": "none", "count": 0}
    assert gd.unusable_reason(facts, []) == "No NVIDIA GPU found on this machine"
    assert gd.unusable_reason(facts, ["No NVIDIA GPU found: x"]) == ("No NVIDIA GPU found on this machine: "
                                                                     "No NVIDIA GPU found: x")
