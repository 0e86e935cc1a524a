# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pieces shared by the GPU discovery sources (NVML, nvidia-smi, PCI sysfs)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.nvidia.plugins.module_utils.gfd_labels import (
    gpu_family,
    sanitise_label_value,
)


class SourceUnavailable(Exception):
    """A discovery source cannot be used here; the message names the cause.

    ``expected`` is True when the cause is simply that the software is not
    installed (no library, no command): nothing worth a warning on a machine
    without GPUs.
    """

    def __init__(self, message, expected=False):
        super(SourceUnavailable, self).__init__(message)
        self.expected = expected


def text(value):
    """Return ``value`` as str: older pynvml bindings return bytes."""
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value).strip("\x00").strip()


def device_facts(index, name=None, uuid=None, memory_mib=None, pci_bus_id=None, pci_device_id=None,
                 compute_capability=None, mig_current=None, mig_pending=None, mig_devices=None):
    """Return one entry of ``nvidia_gpu.devices``.

    ``mig_devices``: the MIG devices of a MIG-enabled GPU (``[]`` when MIG is disabled), None where
    the source cannot enumerate them (nvidia-smi, the PCI bus, bindings without the MIG calls).
    """
    return {
        "index": index,
        "name": name or None,
        "product": sanitise_label_value(name) or None if name else None,
        "uuid": uuid or None,
        "memory_mib": memory_mib,
        "pci_bus_id": pci_bus_id or None,
        "pci_device_id": pci_device_id,
        "compute_capability": compute_capability,
        "family": gpu_family(compute_capability),
        "mig": {"current": mig_current, "pending": mig_pending, "devices": mig_devices},
    }
