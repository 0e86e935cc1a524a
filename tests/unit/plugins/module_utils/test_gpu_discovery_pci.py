"""Unit tests for the PCI sysfs source (plugins/module_utils/gpu_discovery_pci.py)."""
from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_discovery_pci as pci


def add(root, address, vendor, pci_class, device):
    path = root / address
    path.mkdir()
    (path / "vendor").write_text(vendor + "\n")
    (path / "class").write_text(pci_class + "\n")
    (path / "device").write_text(device + "\n")


def test_finds_nvidia_display_and_3d_controllers_in_bus_order(tmp_path):
    add(tmp_path, "0000:3b:00.0", "0x10de", "0x030200", "0x2330")
    add(tmp_path, "0000:18:00.0", "0x10de", "0x030000", "0x1eb8")
    add(tmp_path, "0000:00:1f.3", "0x8086", "0x040300", "0xa348")   # Intel audio
    add(tmp_path, "0000:19:00.1", "0x10de", "0x040300", "0x22a3")   # NVIDIA audio function
    add(tmp_path, "0000:5e:00.0", "0x10de", "0x068000", "0x22a3")   # NVSwitch bridge
    add(tmp_path, "0000:af:00.0", "0x10de", "0x030200", "0x9999")   # unknown model
    devices = pci.scan_pci(str(tmp_path))
    assert [d["pci_bus_id"] for d in devices] == ["00000000:18:00.0", "00000000:3B:00.0", "00000000:AF:00.0"]
    assert [d["index"] for d in devices] == [0, 1, 2]
    assert devices[0]["name"] == "Tesla T4" and devices[0]["family"] == "turing"
    assert devices[0]["pci_class"] == "0x030000"
    assert devices[1] == {
        "index": 1,
        "name": "NVIDIA H100 80GB HBM3",
        "product": "NVIDIA-H100-80GB-HBM3",
        "uuid": None,
        "memory_mib": None,
        "pci_bus_id": "00000000:3B:00.0",
        "pci_device_id": "0x233010DE",
        "pci_class": "0x030200",
        "compute_capability": "9.0",
        "family": "hopper",
        "mig": {"current": None, "pending": None, "devices": None},
    }
    assert devices[2]["name"] is None and devices[2]["product"] is None
    assert devices[2]["pci_device_id"] == "0x999910DE"


def test_unreadable_entries_are_skipped(tmp_path):
    (tmp_path / "0000:01:00.0").mkdir()
    add(tmp_path, "0000:02:00.0", "0x10de", "garbage", "0x2330")
    assert pci.scan_pci(str(tmp_path)) == []


def test_missing_sysfs_is_no_gpu(tmp_path):
    assert pci.scan_pci(str(tmp_path / "absent")) == []


def test_nvml_bus_id():
    assert pci.nvml_bus_id("0000:3b:00.0") == "00000000:3B:00.0"
    assert pci.nvml_bus_id("zz:3b:00.0") == "ZZ:3B:00.0"
    assert pci.nvml_bus_id("odd") == "ODD"


def test_read_pci_class_by_nvml_bus_id(tmp_path):
    add(tmp_path, "0000:3b:00.0", "0x10de", "0x030200", "0x2330")
    add(tmp_path, "0000:18:00.0", "0x10de", "0x30000", "0x1eb8")
    add(tmp_path, "10000:e1:00.0", "0x10de", "0x030200", "0x2330")   # a domain above 0xffff (Intel VMD)
    assert pci.read_pci_class("00000000:3B:00.0", str(tmp_path)) == "0x030200"
    assert pci.read_pci_class("00000000:18:00.0", str(tmp_path)) == "0x030000"
    assert pci.read_pci_class("00010000:E1:00.0", str(tmp_path)) == "0x030200"
    assert pci.read_pci_class("00000000:AF:00.0", str(tmp_path)) is None
    assert pci.read_pci_class("not a bus id", str(tmp_path)) is None
    assert pci.read_pci_class("zz:3b:00.0", str(tmp_path)) is None


def test_sysfs_address():
    assert pci.sysfs_address("00000000:3B:00.0") == "0000:3b:00.0"
    assert pci.sysfs_address("00000008:01:00.0") == "0008:01:00.0"
    assert pci.sysfs_address(None) is None
