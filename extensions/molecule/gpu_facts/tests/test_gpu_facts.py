"""Every node reports exactly the GPUs its lab profile describes; the cpu node reports none."""
import re

import pytest

FAMILY = {"9.0": "hopper", "8.0": "ampere", "7.5": "turing"}


def sanitised(name):
    """GFD label value of a product name ('Tesla T4' -> 'Tesla-T4'), written out for the lab's names."""
    return re.sub(r"\s+", "-", re.sub(r"[^A-Za-z0-9_. -]", "", name).strip())


# NVML's attributes of the lab's MIG profiles as the fake library gives them (tests/support/fakenvml/fakenvml.c
# mig_attributes: an A100's media engines, 14 multiprocessors per slice; mig_rebuild: the memory of the GPU
# instance profile, REFERENCE 8.1)
MIG_ATTRIBUTES = {
    "3g.20gb": {"memory_mib": 19968, "multiprocessors": 42, "slices": {"gi": 3, "ci": 3},
                "engines": {"copy": 3, "decoder": 2, "encoder": 0, "jpeg": 0, "ofa": 0}},
}


def expected_device(index, gpu):
    capability = "%d.%d" % tuple(gpu["compute_capability"])
    # a MIG-enabled GPU's MIG devices as the fake library makes them of the profile's mig_devices
    migs = [dict(MIG_ATTRIBUTES[profile], slot=slot, name="%s MIG %s" % (gpu["name"], profile), profile=profile,
                 uuid="MIG-%s%04x" % (gpu["uuid"][4:36], slot + 1))
            for slot, profile in enumerate(gpu.get("mig_devices", []))] if gpu.get("mig_mode") == 1 else []
    mig = ({"current": gpu["mig_mode"], "pending": gpu["mig_pending"], "devices": migs} if "mig_mode" in gpu
           else {"current": None, "pending": None, "devices": None})
    return {
        "index": index,
        "name": gpu["name"],
        "product": sanitised(gpu["name"]),
        "uuid": gpu["uuid"],
        "memory_mib": gpu["memory_total_mib"],
        "pci_bus_id": gpu["pci_bus_id"],
        "pci_device_id": "0x%08X" % gpu["pci_device_id"],
        # from the node's PCI view (tests/support/fakenvml/sysfs.py), mounted over /sys/bus/pci/devices
        "pci_class": "0x%06x" % gpu.get("pci_class", 0x030200),
        "compute_capability": capability,
        "family": FAMILY[capability],
        "mig": mig,
    }


@pytest.fixture(name="result")
def fixture_result(facts_result):
    return facts_result


def test_module_changes_nothing(result):
    assert result["changed"] is False
    assert "failed" not in result or result["failed"] is False


def test_facts_match_profile(profile, result):
    name, content = profile
    facts = result["ansible_facts"]["nvidia_gpu"]
    if content is None:
        assert facts["present"] is False
        assert facts["count"] == 0
        assert facts["source"] == "none"
        assert facts["devices"] == []
        assert facts["driver_version"] is None
        assert facts["labels"] == {}
        return
    gpus = content["gpus"]
    assert facts["present"] is True
    assert facts["count"] == len(gpus)
    assert facts["source"] == "nvml"
    assert facts["driver_version"] == content["driver_version"]
    cuda = content["cuda_driver_version"]
    assert facts["cuda_driver_version"] == "%d.%d" % (cuda // 1000, cuda % 1000 // 10)
    assert facts["devices"] == [expected_device(index, gpu) for index, gpu in enumerate(gpus)], name
    assert not result.get("warnings"), result.get("warnings")


def test_secure_boot_is_unknown_in_a_container(result):
    # Docker hides /sys/firmware from containers: neither the EFI variables nor mokutil can tell
    assert result["ansible_facts"]["nvidia_gpu"]["secure_boot"] == {"enabled": None, "setup_mode": None,
                                                                    "source": None}


def test_labels_match_profile(host, profile, result):
    _name, content = profile
    labels = result["ansible_facts"]["nvidia_gpu"]["labels"]
    if content is None:
        assert labels == {}
        return
    gpu = content["gpus"][0]
    major, minor = gpu["compute_capability"]
    driver = content["driver_version"]
    machine = host.file("/sys/class/dmi/id/product_name")
    expected = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": str(len(content["gpus"])),
        "nvidia.com/gpu.product": sanitised(gpu["name"]),
        "nvidia.com/gpu.memory": str(gpu["memory_total_mib"]),
        "nvidia.com/gpu.family": FAMILY["%d.%d" % (major, minor)],
        "nvidia.com/gpu.compute.major": str(major),
        "nvidia.com/gpu.compute.minor": str(minor),
        "nvidia.com/gpu.machine": sanitised(machine.content_string.strip()) if machine.exists else "unknown",
        "nvidia.com/cuda.driver-version.full": driver,
        "nvidia.com/cuda.driver-version.major": driver.split(".")[0],
        "nvidia.com/cuda.driver-version.minor": driver.split(".")[1],
        "nvidia.com/cuda.driver-version.revision": driver.split(".")[2],
        # GFD's cuda.runtime-version is the CUDA version the driver supports (cuDriverGetVersion)
        "nvidia.com/cuda.runtime-version.full": "%d.%d" % divmod(content["cuda_driver_version"] // 10, 100),
        "nvidia.com/mig.capable": "true" if "mig_mode" in gpu else "false",
    }
    assert {key: labels.get(key) for key in expected} == expected
