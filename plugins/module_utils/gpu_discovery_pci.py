# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""GPU discovery from PCI sysfs: NVIDIA GPUs are visible there before any driver is installed."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_common import device_facts

PCI_DEVICES = "/sys/bus/pci/devices"
NVIDIA_VENDOR = 0x10DE
# PCI class prefixes: 0x0300 VGA compatible controller, 0x0302 3D controller
GPU_CLASSES = (0x0300, 0x0302)

# PCI device id -> (name as NVML reports it, compute capability) for common
# data-centre GPUs, so that a node without a driver still gets a model name.
KNOWN_DEVICES = {
    0x1DB1: ("Tesla V100-SXM2-16GB", "7.0"),
    0x1DB4: ("Tesla V100-PCIE-16GB", "7.0"),
    0x1DB5: ("Tesla V100-SXM2-32GB", "7.0"),
    0x1EB8: ("Tesla T4", "7.5"),
    0x20B0: ("NVIDIA A100-SXM4-40GB", "8.0"),
    0x20B2: ("NVIDIA A100-SXM4-80GB", "8.0"),
    0x20B5: ("NVIDIA A100 80GB PCIe", "8.0"),
    0x20F1: ("NVIDIA A100-PCIE-40GB", "8.0"),
    0x2235: ("NVIDIA A40", "8.6"),
    0x2236: ("NVIDIA A10", "8.6"),
    0x25B6: ("NVIDIA A16", "8.6"),
    0x26B5: ("NVIDIA L40", "8.9"),
    0x26B9: ("NVIDIA L40S", "8.9"),
    0x27B8: ("NVIDIA L4", "8.9"),
    0x2330: ("NVIDIA H100 80GB HBM3", "9.0"),
    0x2331: ("NVIDIA H100 PCIe", "9.0"),
    0x2335: ("NVIDIA H200", "9.0"),
    0x26B1: ("NVIDIA RTX 6000 Ada Generation", "8.9"),
    0x2901: ("NVIDIA B200", "10.0"),
    0x2941: ("NVIDIA GB200", "10.0"),
}


def _read_hex(path):
    try:
        with open(path) as handle:
            return int(handle.read().strip(), 16)
    except (IOError, OSError, ValueError):
        return None


def pci_class_text(value):
    """The PCI class as the facts carry it: ``0x030200`` (None when unknown)."""
    return None if value is None else "0x%06x" % value


def sysfs_address(bus_id):
    """``00000000:18:00.0`` (NVML, nvidia-smi) -> ``0000:18:00.0`` (the sysfs entry); None when it is no bus id."""
    parts = (bus_id or "").split(":")
    if len(parts) != 3:
        return None
    try:
        domain = int(parts[0], 16)
    except ValueError:
        return None
    return "%04x:%s:%s" % (domain, parts[1].lower(), parts[2].lower())


def read_pci_class(bus_id, root=PCI_DEVICES):
    """The PCI class of the device at ``bus_id`` (NVML's form) from sysfs, as ``0x030200``; None when unreadable.

    NVML has no call for it; GPU Feature Discovery reads it from sysfs too (go-nvlib's nvpci).
    """
    address = sysfs_address(bus_id)
    if address is None:
        return None
    return pci_class_text(_read_hex(os.path.join(root, address, "class")))


def nvml_bus_id(address):
    """``0000:3b:00.0`` -> ``00000000:3B:00.0`` (the form NVML reports)."""
    parts = address.split(":")
    if len(parts) == 3:
        try:
            domain = int(parts[0], 16)
        except ValueError:
            return address.upper()
        return "%08X:%s:%s" % (domain, parts[1].upper(), parts[2].upper())
    return address.upper()


def scan_pci(root=PCI_DEVICES):
    """Return device facts for every NVIDIA display/3D controller under ``root``, in bus order."""
    try:
        entries = sorted(os.listdir(root))
    except (IOError, OSError):
        return []
    devices = []
    for entry in entries:
        path = os.path.join(root, entry)
        if _read_hex(os.path.join(path, "vendor")) != NVIDIA_VENDOR:
            continue
        pci_class = _read_hex(os.path.join(path, "class"))
        if pci_class is None or (pci_class >> 8) not in GPU_CLASSES:
            continue
        device_id = _read_hex(os.path.join(path, "device"))
        name, capability = KNOWN_DEVICES.get(device_id, (None, None))
        devices.append(device_facts(
            index=len(devices),
            name=name,
            pci_bus_id=nvml_bus_id(entry),
            pci_device_id="0x%04X%04X" % (device_id, NVIDIA_VENDOR) if device_id is not None else None,
            pci_class=pci_class_text(pci_class),
            compute_capability=capability,
        ))
    return devices
