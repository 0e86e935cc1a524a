"""Unit tests for the nvidia-smi source (plugins/module_utils/gpu_discovery_smi.py)."""
import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_discovery_smi as smi
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_common import (
    CommandTimeout,
    SourceUnavailable,
    TextDecoder,
)

A100_MIG = (
    "0, NVIDIA A100-SXM4-40GB, GPU-aaaa, 40960, 00000000:07:00.0, 0x20B010DE, 535.183.01, 8.0, Enabled, Enabled\n"
    "1, NVIDIA A100-SXM4-40GB, GPU-bbbb, 40960, 00000000:0F:00.0, 0x20B010DE, 535.183.01, 8.0, Disabled, Enabled\n"
)
T4 = "0, Tesla T4, GPU-cccc, 15360, 00000000:00:04.0, 0x1EB810DE, 535.183.01, 7.5, [N/A], [N/A]\n"


class Runner:
    def __init__(self, *results):
        self.results = list(results)
        self.argvs = []

    def __call__(self, argv):
        self.argvs.append(argv)
        return self.results.pop(0)


def which(name):
    return "/usr/bin/" + name


def test_query_command():
    assert smi.query_command("/usr/bin/nvidia-smi") == [
        "/usr/bin/nvidia-smi",
        "--query-gpu=index,name,uuid,memory.total,pci.bus_id,pci.device_id,driver_version,compute_cap,"
        "mig.mode.current,mig.mode.pending",
        "--format=csv,noheader,nounits",
    ]


def test_parses_mig_gpus():
    runner = Runner((0, A100_MIG, ""))
    driver, cuda, devices = smi.discover_smi(runner, which)
    assert (driver, cuda) == ("535.183.01", None)
    assert devices[0] == {
        "index": 0,
        "name": "NVIDIA A100-SXM4-40GB",
        "product": "NVIDIA-A100-SXM4-40GB",
        "uuid": "GPU-aaaa",
        "memory_mib": 40960,
        "pci_bus_id": "00000000:07:00.0",
        "pci_device_id": "0x20B010DE",
        "pci_class": None,
        "compute_capability": "8.0",
        "family": "ampere",
        "mig": {"current": 1, "pending": 1, "devices": None},
    }
    assert devices[1]["mig"] == {"current": 0, "pending": 1, "devices": None}
    assert len(runner.argvs) == 1


def test_not_available_fields_are_null():
    driver, dummy, devices = smi.discover_smi(Runner((0, T4, "")), which)
    assert devices[0]["mig"] == {"current": None, "pending": None, "devices": None}
    assert devices[0]["family"] == "turing"
    assert driver == "535.183.01"


def test_old_nvidia_smi_without_compute_cap_is_retried():
    fields = [f for f in smi.QUERY_FIELDS if f != "compute_cap"]
    old = "0, Tesla T4, GPU-cccc, 15360, 00000000:00:04.0, 0x1EB810DE, 470.82.01, [N/A], [N/A]\n"
    runner = Runner((2, 'Field "compute_cap" is not a valid field to query.', ""), (0, old, ""))
    driver, dummy, devices = smi.discover_smi(runner, which)
    assert runner.argvs[1][1] == "--query-gpu=" + ",".join(fields)
    assert driver == "470.82.01"
    assert devices[0]["compute_capability"] is None


def test_missing_binary_is_expected():
    with pytest.raises(SourceUnavailable, match="nvidia-smi was not found") as caught:
        smi.discover_smi(Runner(), lambda name: None)
    assert caught.value.expected is True


def test_failure_names_the_first_error_line():
    runner = Runner((9, "", "\nNVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\nMore\n"))
    with pytest.raises(SourceUnavailable, match=r"nvidia-smi failed \(rc=9\): NVIDIA-SMI has failed because") as caught:
        smi.discover_smi(runner, which)
    assert caught.value.expected is False


def test_failure_without_output():
    with pytest.raises(SourceUnavailable, match=r"\(rc=6\): no output"):
        smi.discover_smi(Runner((6, "", "")), which)


def test_unexpected_output_is_a_failure():
    with pytest.raises(SourceUnavailable, match="unexpected line"):
        smi.discover_smi(Runner((0, "garbage\n", "")), which)


def test_odd_values():
    line = "x, Tesla T4, [N/A], abc, 00000000:00:04.0, zz, [Not Supported], 7.5, Unknown, Disabled\n"
    dummy, devices = smi.parse_query_output(line)
    assert devices[0]["index"] == 0
    assert devices[0]["uuid"] is None
    assert devices[0]["memory_mib"] is None
    assert devices[0]["pci_device_id"] is None
    assert devices[0]["mig"] == {"current": None, "pending": 0, "devices": None}


def test_no_gpus_is_an_empty_list():
    assert smi.parse_query_output("\n") == (None, [])


def test_bytes_output_and_the_pci_class():
    runner = Runner((0, A100_MIG.encode(), b""))
    dummy, dummy, devices = smi.discover_smi(runner, which, pci_class=lambda bus: "0x030200" if "07" in bus else None)
    assert [d["pci_class"] for d in devices] == ["0x030200", None]


def test_output_that_is_not_utf8_is_replaced_and_reported():
    decoder = TextDecoder()
    raw = A100_MIG.replace("NVIDIA A100", "NVIDIA A100\xe9", 1).encode("latin-1")
    dummy, dummy, devices = smi.discover_smi(Runner((0, raw, b"")), which, decoder=decoder)
    assert devices[0]["name"] == "NVIDIA A100\ufffd-SXM4-40GB" and devices[1]["name"] == "NVIDIA A100-SXM4-40GB"
    assert devices[0]["product"] == "NVIDIA-A100-SXM4-40GB"
    # only the line with the bad byte is shown, escaped
    assert decoder.warnings == [
        "The output of nvidia-smi is not valid UTF-8 (0, NVIDIA A100\\xe9-SXM4-40GB, GPU-aaaa, 40960, 00000000:07:00.0, "
        "0x20B010DE, 535.183.01, 8.0, Enabled, Enabled); the facts show each invalid byte as U+FFFD"]


def test_errors_that_are_not_utf8():
    decoder = TextDecoder()
    with pytest.raises(SourceUnavailable, match="nvidia-smi failed \\(rc=9\\): NVIDIA-SMI \ufffd failed"):
        smi.discover_smi(Runner((9, b"", b"NVIDIA-SMI \xff failed\n")), which, decoder=decoder)
    assert decoder.warnings[0].startswith("The error output of nvidia-smi is not valid UTF-8 (NVIDIA-SMI \\xff failed)")


def test_a_command_that_runs_out_of_time():
    def hangs(argv):
        raise CommandTimeout(argv, 10)
    with pytest.raises(SourceUnavailable) as caught:
        smi.discover_smi(hangs, which)
    assert str(caught.value) == "nvidia-smi did not answer within 10 s (command_timeout) and was stopped"
    assert caught.value.timed_out is True and caught.value.expected is False
