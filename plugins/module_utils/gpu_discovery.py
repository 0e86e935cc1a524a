# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""GPU discovery: NVML, then nvidia-smi, then a PCI sysfs scan, then nothing.

``discover_gpus()`` returns the ``ansible_facts.nvidia_gpu`` dictionary and
the warnings explaining each fallback.  It never raises for a machine that
simply has no GPU or no driver.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_discovery_nvml
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gfd_labels import (
    gfd_labels,
    multiple_models,
)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_common import SourceUnavailable
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_pci import PCI_DEVICES, scan_pci
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_smi import discover_smi

DMI_PRODUCT_NAME = "/sys/class/dmi/id/product_name"

SOURCES = ("nvml", "nvidia-smi", "pci", "none")


def read_machine(path):
    """Return the DMI product name, or None when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            value = handle.read().decode("utf-8", "replace").strip()
    except (IOError, OSError):
        return None
    return value or None


def _no_command(dummy_argv):
    return 127, "", "cannot run commands here"


def _no_which(dummy_name):
    return None


def _facts(source, driver_version, cuda_driver_version, devices, machine):
    devices = sorted(devices, key=lambda device: device["index"])
    return {
        "present": bool(devices),
        "count": len(devices),
        "source": source if devices else "none",
        "driver_version": driver_version,
        "cuda_driver_version": cuda_driver_version,
        "devices": devices,
        "machine": machine,
        "labels": {},
    }


def discover_gpus(nvml=None, run_command=None, which=None, pci_root=None, machine_path=None,
                  mig_strategy="none", sharing_strategy="none", replicas=1):
    """Return ``(facts, warnings)``.

    ``nvml``: the pynvml module (default: the one importable here, or None).
    ``run_command(argv) -> (rc, out, err)`` and ``which(name)`` run nvidia-smi;
    they are only called when NVML cannot be used.
    """
    run_command = run_command or _no_command
    which = which or _no_which
    machine = read_machine(machine_path or DMI_PRODUCT_NAME)
    causes = []
    facts = None

    try:
        facts = _facts("nvml", *gpu_discovery_nvml.discover_nvml(nvml), machine=machine)
    except SourceUnavailable as error:
        causes.append(error)

    if facts is None:
        try:
            facts = _facts("nvidia-smi", *discover_smi(run_command, which), machine=machine)
        except SourceUnavailable as error:
            causes.append(error)

    if facts is None:
        devices = scan_pci(pci_root or PCI_DEVICES)
        facts = _facts("pci", None, None, devices, machine)

    warnings = _warnings(facts, causes)
    facts["labels"] = gfd_labels(facts, mig_strategy=mig_strategy, sharing_strategy=sharing_strategy,
                                 replicas=replicas)
    models = multiple_models(facts)
    if models:
        warnings.append("Multiple GPU models on this node (%s): the node labels describe %s"
                        % (", ".join(str(model) for model in models), models[0]))
    return facts, warnings


def _warnings(facts, causes):
    """Explain each fallback; stay silent where nothing is installed and no GPU exists."""
    if not causes:
        return []
    if facts["source"] == "none" and all(cause.expected for cause in causes):
        return []
    reasons = "; ".join(str(cause) for cause in causes)
    if facts["source"] == "pci":
        return ["%d NVIDIA GPU(s) found on the PCI bus but no usable driver: %s"
                % (facts["count"], reasons)]
    if facts["source"] == "none":
        return ["No NVIDIA GPU found: %s" % reasons]
    return ["GPU facts come from %s: %s" % (facts["source"], reasons)]


def unusable_reason(facts, warnings):
    """Return why ``require: true`` must fail for ``facts``, or None when a usable GPU was found."""
    if facts["source"] in ("nvml", "nvidia-smi") and facts["count"] > 0:
        return None
    if facts["source"] == "pci":
        detail = warnings[0] if warnings else "no NVIDIA driver is usable"
        return "No usable NVIDIA GPU: %s" % detail
    return "No NVIDIA GPU found on this machine" + (": %s" % warnings[0] if warnings else "")
