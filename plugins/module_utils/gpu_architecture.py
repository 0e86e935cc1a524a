# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NVIDIA GPU architectures, what drives them, and from which driver branch on.

A node's GPUs are visible on the PCI bus before any driver is installed (``nvidia_gpu_facts`` then
reports each GPU's ``pci_device_id`` and no compute capability), so the architecture is looked up by
PCI device ID first, and by compute capability only where the ID is unknown.

Sources:

* ``DEVICE_RANGES``: pci.ids (github.com/pciutils/pciids, commit c1c12547d626, 2026-08-22) names the
  chip of every NVIDIA device ID (GF Fermi, GK Kepler, GM Maxwell, GP Pascal, GV Volta, TU Turing,
  GA Ampere, GH Hopper, AD Ada Lovelace, GB Blackwell, GR Rubin). The ranges merge consecutive GPU
  IDs of one architecture (audio functions, bridges and NVSwitches left out); an ID between two
  ranges is not known. Cross-checked against the "Compatible GPUs" table of NVIDIA's
  open-gpu-kernel-modules README.md (595.45.04): every one of its 825 entries falls in a Turing or
  newer range.
* Kernel module flavours: NVIDIA's open kernel modules drive Turing and newer GPUs, Maxwell, Pascal
  and Volta need the proprietary ones (docs.nvidia.com/datacenter/tesla/driver-installation-guide,
  "Kernel Modules"; open-gpu-kernel-modules README "Compatible GPUs"); Blackwell and newer GPUs are
  driven by the open modules only (driver README 560.35.03, chapter "Open Linux Kernel Modules",
  kernel_open.html); Grace Hopper (GH200) needs the open modules (GPU Operator platform-support.rst).
  The open modules first shipped in R515.
* Branches: the CUDA toolkit / driver / architecture matrix
  (docs.nvidia.com/datacenter/tesla/drivers/cuda-toolkit-driver-and-architecture-matrix.html):
  Kepler's last branch is R470, Maxwell, Pascal and Volta end with R580; Ada and Hopper arrived
  with CUDA 11.8 (R520), Blackwell with CUDA 12.8 (R570). HGX B200 needs 570.133.20 or later
  (GPU Operator platform-support.rst). No source gives Rubin's first branch: Blackwell's is used
  as the floor.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

OPEN = "open"
PROPRIETARY = "proprietary"
FLAVOURS = (OPEN, PROPRIETARY)
# first branch with NVIDIA's open GPU kernel modules
OPEN_MODULES_FIRST_BRANCH = 515

# (first device ID, last device ID, architecture), from pci.ids (see the module's docstring)
DEVICE_RANGES = (
    (0x06C0, 0x0F06, "fermi"),
    (0x0FC0, 0x103F, "kepler"),
    (0x1040, 0x1140, "fermi"),
    (0x1180, 0x11FF, "kepler"),
    (0x1200, 0x1251, "fermi"),
    (0x1280, 0x130B, "kepler"),
    (0x1340, 0x1436, "maxwell"),
    (0x15C2, 0x15FF, "pascal"),
    (0x1613, 0x1676, "maxwell"),
    (0x1725, 0x172F, "pascal"),
    (0x174D, 0x17FD, "maxwell"),
    (0x1B00, 0x1D56, "pascal"),
    (0x1D81, 0x1DF6, "volta"),
    (0x1E02, 0x1FF9, "turing"),
    (0x2080, 0x20FF, "ampere"),
    (0x2182, 0x21D1, "turing"),
    (0x2200, 0x223F, "ampere"),
    (0x2302, 0x23F0, "hopper"),
    (0x2414, 0x25FB, "ampere"),
    (0x2681, 0x28F8, "ada-lovelace"),
    (0x2900, 0x2F58, "blackwell"),
    (0x3000, 0x30C0, "rubin"),
    (0x3180, 0x3340, "blackwell"),
)


class Architecture:
    """What an architecture needs: the kernel module flavours that drive it and its branches."""

    def __init__(self, name, order, flavours, first_branch=None, last_branch=None, first_branch_known=True):
        self.name = name
        self.order = order
        self.flavours = flavours
        self.first_branch = first_branch
        self.last_branch = last_branch
        # False where no source gives the first branch and first_branch is a floor
        self.first_branch_known = first_branch_known


BOTH = (OPEN, PROPRIETARY)
ARCHITECTURES = dict((arch.name, arch) for arch in (
    Architecture("fermi", 1, (PROPRIETARY,), last_branch=390),
    Architecture("kepler", 2, (PROPRIETARY,), last_branch=470),
    Architecture("maxwell", 3, (PROPRIETARY,), last_branch=580),
    Architecture("pascal", 4, (PROPRIETARY,), last_branch=580),
    Architecture("volta", 5, (PROPRIETARY,), last_branch=580),
    Architecture("turing", 6, BOTH, first_branch=410),
    Architecture("ampere", 7, BOTH, first_branch=450),
    Architecture("ada-lovelace", 8, BOTH, first_branch=520),
    Architecture("hopper", 9, BOTH, first_branch=520),
    Architecture("blackwell", 10, (OPEN,), first_branch=570),
    Architecture("rubin", 11, (OPEN,), first_branch=570, first_branch_known=False),
))

# Product names of common data-centre GPUs, as the driver reports them (open-gpu-kernel-modules README
# "Compatible GPUs"; for the GPUs before Turing, pci.ids), so that a node without a driver gets named
# GPUs in messages.
DEVICE_NAMES = {
    0x15F7: "Tesla P100-PCIE-12GB", 0x15F8: "Tesla P100-PCIE-16GB", 0x15F9: "Tesla P100-SXM2-16GB",
    0x1B38: "Tesla P40", 0x1BB3: "Tesla P4", 0x1DB1: "Tesla V100-SXM2-16GB", 0x1DB4: "Tesla V100-PCIE-16GB",
    0x1DB5: "Tesla V100-SXM2-32GB", 0x1DB6: "Tesla V100-PCIE-32GB", 0x1EB8: "Tesla T4",
    0x20B0: "NVIDIA A100-SXM4-40GB", 0x20B2: "NVIDIA A100-SXM4-80GB", 0x20B5: "NVIDIA A100 80GB PCIe",
    0x20B7: "NVIDIA A30", 0x20F1: "NVIDIA A100-PCIE-40GB", 0x2235: "NVIDIA A40", 0x2236: "NVIDIA A10",
    0x2237: "NVIDIA A10G", 0x25B6: "NVIDIA A16", 0x2321: "NVIDIA H100 NVL", 0x2322: "NVIDIA H800 PCIe",
    0x2324: "NVIDIA H800", 0x2329: "NVIDIA H20", 0x2330: "NVIDIA H100 80GB HBM3", 0x2331: "NVIDIA H100 PCIe",
    0x2335: "NVIDIA H200", 0x2339: "NVIDIA H100", 0x233B: "NVIDIA H200 NVL", 0x2342: "NVIDIA GH200 120GB",
    0x2348: "NVIDIA GH200 144G HBM3e", 0x26B5: "NVIDIA L40", 0x26B9: "NVIDIA L40S", 0x26BA: "NVIDIA L20",
    0x27B8: "NVIDIA L4", 0x2901: "NVIDIA B200", 0x2941: "NVIDIA GB200",
    0x2BB5: "NVIDIA RTX PRO 6000 Blackwell Server Edition", 0x3182: "NVIDIA B300 SXM6 AC", 0x31C2: "NVIDIA GB300",
}

# Devices that need more than their architecture: (flavours or None, first version or None, why)
DEVICE_EXCEPTIONS = {
    0x2342: ((OPEN,), None, "Grace Hopper needs the open kernel modules"),
    0x2348: ((OPEN,), None, "Grace Hopper needs the open kernel modules"),
    0x2901: (None, "570.133.20", "HGX B200 needs 570.133.20 or later"),
    0x2909: (None, "570.133.20", "HGX B200 needs 570.133.20 or later"),
}


def parse_device_id(value):
    """The 16-bit PCI device ID from NVML's combined form (``"0x233010DE"``) or a bare ID (``"0x2330"``, 0x2330).

    None for anything else (no ID, not NVIDIA's vendor ID, not hexadecimal).
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= 0xFFFF else None
    text = str(value).strip().lower()
    if text.startswith("0x"):
        text = text[2:]
    try:
        number = int(text, 16)
    except ValueError:
        return None
    if len(text) == 8:
        if number & 0xFFFF != 0x10DE:
            return None
        return number >> 16
    if len(text) <= 4:
        return number
    return None


def architecture_of_device_id(device_id):
    """The architecture name of a PCI device ID (an int), or None when pci.ids does not place it."""
    if device_id is None:
        return None
    for first, last, arch in DEVICE_RANGES:
        if first <= device_id <= last:
            return arch
    return None


def architecture_of_compute_capability(capability):
    """The architecture of a compute capability ``"major.minor"`` (GPU Feature Discovery's families), or None."""
    if capability is None:
        return None
    try:
        major, minor = (int(part) for part in str(capability).split(".", 1))
    except ValueError:
        return None
    if major == 2:
        return "fermi"
    if major == 3:
        return "kepler"
    if major == 5:
        return "maxwell"
    if major == 6:
        return "pascal"
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    if major == 9:
        return "hopper"
    if major in (10, 11, 12):
        return "blackwell"
    if major == 13:
        return "rubin"
    return None


def describe(device):
    """A GPU as the messages name it: ``NVIDIA B200 (0x2901, blackwell)``, ``GPU 0x2B00 (blackwell)``."""
    parts = [part for part in (device["device_id_hex"], device["architecture"] or "architecture not known")
             if part and part not in device["name"]]
    return "%s (%s)" % (device["name"], ", ".join(parts)) if parts else device["name"]


def classify(devices):
    """The GPUs of ``nvidia_gpu.devices`` with what drives them, one entry per distinct model.

    Each entry: ``name``, ``device_id`` (int or None), ``device_id_hex``, ``architecture`` (None when
    neither the PCI ID nor the compute capability tells), ``source`` (``pci-id``, ``compute-capability``
    or None), ``flavours``, ``first_branch``, ``first_branch_known``, ``last_branch``, ``first_version``
    and ``notes`` (why a device needs more than its architecture).
    """
    seen = {}
    for device in devices or []:
        if not isinstance(device, dict):
            continue
        device_id = parse_device_id(device.get("pci_device_id"))
        arch = architecture_of_device_id(device_id)
        source = "pci-id" if arch else None
        if arch is None:
            arch = architecture_of_compute_capability(device.get("compute_capability"))
            source = "compute-capability" if arch else None
        name = (device.get("name") or DEVICE_NAMES.get(device_id)
                or ("GPU 0x%04X" % device_id if device_id is not None else "a GPU of unknown model"))
        key = (name, device_id, arch)
        if key in seen:
            continue
        info = ARCHITECTURES.get(arch)
        entry = {
            "name": name,
            "device_id": device_id,
            "device_id_hex": "0x%04X" % device_id if device_id is not None else None,
            "architecture": arch,
            "source": source,
            "flavours": list(info.flavours) if info else list(FLAVOURS),
            "first_branch": info.first_branch if info else None,
            "first_branch_known": info.first_branch_known if info else True,
            "last_branch": info.last_branch if info else None,
            "first_version": None,
            "notes": [],
        }
        exception = DEVICE_EXCEPTIONS.get(device_id)
        if exception:
            flavours, first_version, why = exception
            if flavours:
                entry["flavours"] = list(flavours)
            if first_version:
                entry["first_version"] = first_version
            entry["notes"].append(why)
        seen[key] = entry
    return list(seen.values())
