# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""GPU discovery: NVML, then nvidia-smi, then a PCI sysfs scan, then nothing; and the Secure Boot state.

``discover_gpus()`` returns the ``ansible_facts.nvidia_gpu`` dictionary and
the warnings explaining each fallback.  It never raises for a machine that
simply has no GPU or no driver.  ``discover()`` returns the same and the causes
of each fallback (``Discovery``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools

from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_discovery_nvml
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gfd_labels import (
    gfd_labels,
    multiple_models,
)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_common import (
    SourceUnavailable,
    TextDecoder,
)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_pci import (
    PCI_DEVICES,
    read_pci_class,
    scan_pci,
)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_smi import discover_smi
from ansible_collections.kubegpu.nvidia.plugins.module_utils.secure_boot import EFI_ROOT, secure_boot_state

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


class Discovery:
    """One discovery run: ``facts`` (``nvidia_gpu``), ``warnings``, ``causes`` (a SourceUnavailable per
    source that could not be used, in the order they were tried) and ``fallback_warnings`` (the warnings
    among ``warnings`` that explain the fallbacks)."""

    def __init__(self, facts, warnings, causes, fallback_warnings):
        self.facts = facts
        self.warnings = warnings
        self.causes = causes
        self.fallback_warnings = fallback_warnings

    @property
    def timed_out(self):
        """Whether a source was given up because it ran out of time."""
        return any(cause.timed_out for cause in self.causes)


def discover(nvml=None, run_command=None, which=None, pci_root=None, machine_path=None, efi_root=None,
             mig_strategy="none", sharing_strategy="none", replicas=1, nvml_timeout=None):
    """Return a ``Discovery``.

    ``nvml``: the pynvml module (default: the one importable here, or None).
    ``run_command(argv) -> (rc, out, err)`` and ``which(name)`` run nvidia-smi and mokutil; they are
    only called when NVML cannot be used (nvidia-smi) or the EFI variables cannot be read (mokutil).
    ``run_command`` raises ``CommandTimeout`` for a command that ran out of time (``run_bounded``).
    ``nvml_timeout``: seconds the NVML session may take (None: no limit).
    ``pci_root``, ``machine_path``, ``efi_root``: the sysfs paths read, for tests.
    """
    run_command = run_command or _no_command
    which = which or _no_which
    pci_root = pci_root or PCI_DEVICES
    pci_class = functools.partial(read_pci_class, root=pci_root)
    machine = read_machine(machine_path or DMI_PRODUCT_NAME)
    decoder = TextDecoder()
    causes = []
    facts = None

    try:
        facts = _facts("nvml", *gpu_discovery_nvml.discover_nvml(nvml, decoder=decoder, pci_class=pci_class,
                                                                 timeout=nvml_timeout), machine=machine)
    except SourceUnavailable as error:
        causes.append(error)

    if facts is None:
        try:
            facts = _facts("nvidia-smi", *discover_smi(run_command, which, decoder=decoder, pci_class=pci_class),
                           machine=machine)
        except SourceUnavailable as error:
            causes.append(error)

    if facts is None:
        devices = scan_pci(pci_root)
        facts = _facts("pci", None, None, devices, machine)

    fallback_warnings = _warnings(facts, causes)
    warnings = fallback_warnings + decoder.warnings
    facts["secure_boot"], secure_boot_warnings = secure_boot_state(efi_root or EFI_ROOT, run_command, which)
    warnings.extend(secure_boot_warnings)
    facts["labels"] = gfd_labels(facts, mig_strategy=mig_strategy, sharing_strategy=sharing_strategy,
                                 replicas=replicas)
    models = multiple_models(facts)
    if models:
        warnings.append("Multiple GPU models on this node (%s): the node labels describe %s"
                        % (", ".join(str(model) for model in models), models[0]))
    return Discovery(facts, warnings, causes, fallback_warnings)


def discover_gpus(nvml=None, run_command=None, which=None, pci_root=None, machine_path=None, efi_root=None,
                  mig_strategy="none", sharing_strategy="none", replicas=1, nvml_timeout=None):
    """Return ``(facts, warnings)`` of ``discover()`` (same arguments)."""
    found = discover(nvml=nvml, run_command=run_command, which=which, pci_root=pci_root,
                     machine_path=machine_path, efi_root=efi_root, mig_strategy=mig_strategy,
                     sharing_strategy=sharing_strategy, replicas=replicas, nvml_timeout=nvml_timeout)
    return found.facts, found.warnings


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
    """Return why ``require: true`` must fail for ``facts``, or None when a usable GPU was found.

    ``warnings``: the warnings that explain the fallbacks (``Discovery.fallback_warnings``).
    """
    if facts["source"] in ("nvml", "nvidia-smi") and facts["count"] > 0:
        return None
    if facts["source"] == "pci":
        detail = warnings[0] if warnings else "no NVIDIA driver is usable"
        return "No usable NVIDIA GPU: %s" % detail
    return "No NVIDIA GPU found on this machine" + (": %s" % warnings[0] if warnings else "")
