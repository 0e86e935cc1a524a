"""The PCI device ID -> architecture table and what each architecture needs.

Sources of the cases (see plugins/module_utils/gpu_architecture.py):
- pci.ids (github.com/pciutils/pciids, commit c1c12547d626): the chip of each device ID;
- NVIDIA open-gpu-kernel-modules README.md, "Compatible GPUs" (595.45.04): every GPU listed there is
  driven by the open modules, so each must map to Turing or newer; the IDs below are a sample of its
  data-centre entries (product name as the README spells it);
- docs.nvidia.com/datacenter/tesla/driver-installation-guide "Kernel Modules" (Maxwell, Pascal, Volta:
  proprietary only), driver README 560.35.03 kernel_open.html (Blackwell: open only),
  cuda-toolkit-driver-and-architecture-matrix (Maxwell/Pascal/Volta end with R580; Blackwell from R570).
"""
import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_architecture as ga

# (device ID, product name from the open-gpu-kernel-modules README, architecture from pci.ids)
OPEN_MODULE_README = [
    (0x1EB8, "Tesla T4", "turing"),
    (0x20B0, "NVIDIA A100-SXM4-40GB", "ampere"),
    (0x20B2, "NVIDIA A100-SXM4-80GB", "ampere"),
    (0x20B5, "NVIDIA A100 80GB PCIe", "ampere"),
    (0x20B7, "NVIDIA A30", "ampere"),
    (0x2235, "NVIDIA A40", "ampere"),
    (0x2236, "NVIDIA A10", "ampere"),
    (0x25B6, "NVIDIA A16", "ampere"),
    (0x2321, "NVIDIA H100 NVL", "hopper"),
    (0x2330, "NVIDIA H100 80GB HBM3", "hopper"),
    (0x2331, "NVIDIA H100 PCIe", "hopper"),
    (0x2335, "NVIDIA H200", "hopper"),
    (0x233B, "NVIDIA H200 NVL", "hopper"),
    (0x2342, "NVIDIA GH200 120GB", "hopper"),
    (0x2348, "NVIDIA GH200 144G HBM3e", "hopper"),
    (0x26B5, "NVIDIA L40", "ada-lovelace"),
    (0x26B9, "NVIDIA L40S", "ada-lovelace"),
    (0x27B8, "NVIDIA L4", "ada-lovelace"),
    (0x2901, "NVIDIA B200", "blackwell"),
    (0x2941, "NVIDIA GB200", "blackwell"),
    (0x2BB5, "NVIDIA RTX PRO 6000 Blackwell Server Edition", "blackwell"),
    (0x2B85, "NVIDIA GeForce RTX 5090", "blackwell"),
    (0x3182, "NVIDIA B300 SXM6 AC", "blackwell"),
    (0x31C2, "NVIDIA GB300", "blackwell"),
]
# GPUs the open modules do not drive (pci.ids chip names GK/GM/GP/GV)
BEFORE_TURING = [
    (0x102D, "Tesla K80 (GK210)", "kepler"),
    (0x13F2, "Tesla M60 (GM204)", "maxwell"),
    (0x17FD, "Tesla M40 24GB (GM200)", "maxwell"),
    (0x15F8, "Tesla P100 PCIe 16GB (GP100)", "pascal"),
    (0x1B38, "Tesla P40 (GP102)", "pascal"),
    (0x1BB3, "Tesla P4 (GP104)", "pascal"),
    (0x1DB1, "Tesla V100 SXM2 16GB (GV100)", "volta"),
    (0x1DF6, "Tesla V100S PCIe 32GB (GV100)", "volta"),
]


@pytest.mark.parametrize("device_id,name,arch", OPEN_MODULE_README + BEFORE_TURING)
def test_device_id_to_architecture(device_id, name, arch):
    assert ga.architecture_of_device_id(device_id) == arch, name


@pytest.mark.parametrize("device_id,name,arch", OPEN_MODULE_README)
def test_every_gpu_the_open_modules_drive_is_turing_or_newer(device_id, name, arch):
    assert ga.OPEN in ga.ARCHITECTURES[ga.architecture_of_device_id(device_id)].flavours, name


@pytest.mark.parametrize("device_id,name,arch", BEFORE_TURING)
def test_gpus_before_turing_take_the_proprietary_modules_only(device_id, name, arch):
    assert ga.ARCHITECTURES[arch].flavours == (ga.PROPRIETARY,), name


def test_ranges_are_sorted_and_disjoint():
    previous = -1
    for first, last, arch in ga.DEVICE_RANGES:
        assert previous < first <= last <= 0xFFFF, (hex(first), hex(last))
        assert arch in ga.ARCHITECTURES
        previous = last


@pytest.mark.parametrize("device_id", [0x0000, 0x0F50, 0x1437, 0x2050, 0x2FFF, 0x3400, 0xFFFF])
def test_ids_between_the_ranges_are_not_known(device_id):
    assert ga.architecture_of_device_id(device_id) is None


@pytest.mark.parametrize("value,device_id", [
    ("0x233010DE", 0x2330), ("0x290110de", 0x2901), ("0x2330", 0x2330), ("2330", 0x2330), (0x2330, 0x2330),
    ("0x233013B5", None),      # another vendor's ID in NVML's combined form
    ("GPU", None), ("", None), (None, None), (True, None), (0x10000, None), ("0x12345", None),
])
def test_parse_device_id(value, device_id):
    assert ga.parse_device_id(value) == device_id


@pytest.mark.parametrize("capability,arch", [
    ("3.7", "kepler"), ("5.2", "maxwell"), ("6.0", "pascal"), ("7.0", "volta"), ("7.2", "volta"),
    ("7.5", "turing"), ("8.0", "ampere"), ("8.6", "ampere"), ("8.9", "ada-lovelace"), ("9.0", "hopper"),
    ("10.0", "blackwell"), ("12.0", "blackwell"), ("13.0", "rubin"), ("14.0", None), ("x", None), (None, None),
])
def test_architecture_from_compute_capability(capability, arch):
    # GPU Feature Discovery's families (REFERENCE 7.1, internal/resource getArchFamily)
    assert ga.architecture_of_compute_capability(capability) == arch


@pytest.mark.parametrize("arch,first,last", [
    ("kepler", None, 470), ("maxwell", None, 580), ("pascal", None, 580), ("volta", None, 580),
    ("ada-lovelace", 520, None), ("hopper", 520, None), ("blackwell", 570, None)])
def test_branch_support_per_architecture(arch, first, last):
    info = ga.ARCHITECTURES[arch]
    assert (info.first_branch if first else None, info.last_branch) == (first, last)


def test_classify_uses_the_pci_id_before_the_compute_capability_and_names_known_gpus():
    devices = [
        {"name": None, "pci_device_id": "0x290110DE", "compute_capability": None},     # PCI source, no driver
        {"name": None, "pci_device_id": "0x290110DE", "compute_capability": None},
        {"name": "Some GPU", "pci_device_id": "0xFFFF10DE", "compute_capability": "9.0"},
        {"name": None, "pci_device_id": None, "compute_capability": None},
    ]
    gpus = ga.classify(devices)
    assert [(g["name"], g["architecture"], g["source"], g["flavours"]) for g in gpus] == [
        ("NVIDIA B200", "blackwell", "pci-id", ["open"]),
        ("Some GPU", "hopper", "compute-capability", ["open", "proprietary"]),
        ("a GPU of unknown model", None, None, ["open", "proprietary"]),
    ]
    assert gpus[0]["first_version"] == "570.133.20"
    assert ga.describe(gpus[0]) == "NVIDIA B200 (0x2901, blackwell)"
    assert ga.describe(gpus[2]) == "a GPU of unknown model (architecture not known)"


def test_grace_hopper_needs_the_open_modules():
    gh200 = ga.classify([{"pci_device_id": "0x234210DE"}])[0]
    assert gh200["architecture"] == "hopper" and gh200["flavours"] == ["open"]
    assert "Grace Hopper" in gh200["notes"][0]
