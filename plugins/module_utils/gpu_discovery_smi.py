# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""GPU discovery through ``nvidia-smi --query-gpu`` (used when NVML bindings cannot be)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import csv

from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_common import (
    CommandTimeout,
    SourceUnavailable,
    TextDecoder,
    device_facts,
)

QUERY_FIELDS = (
    "index",
    "name",
    "uuid",
    "memory.total",
    "pci.bus_id",
    "pci.device_id",
    "driver_version",
    "compute_cap",
    "mig.mode.current",
    "mig.mode.pending",
)
# compute_cap appeared in nvidia-smi 510; older ones reject the whole query.
OPTIONAL_FIELDS = ("compute_cap",)

_MISSING = ("", "[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]")
_MIG_MODES = {"enabled": 1, "disabled": 0}


def query_command(binary, fields=QUERY_FIELDS):
    return [binary, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"]


def _value(raw):
    value = raw.strip()
    return None if value.lower() in _MISSING else value


def _int(raw):
    value = _value(raw)
    try:
        return int(float(value)) if value is not None else None
    except ValueError:
        return None


def _mig(raw):
    value = _value(raw)
    return _MIG_MODES.get(value.lower()) if value else None


def _device_id(raw):
    value = _value(raw)
    if value is None:
        return None
    try:
        return "0x%08X" % int(value, 16)
    except ValueError:
        return None


def parse_query_output(output, fields=QUERY_FIELDS, pci_class=None):
    """Return ``(driver_version, devices)`` from ``--format=csv,noheader,nounits`` output (text).

    ``pci_class(bus_id)`` gives a GPU's PCI class (None: not known).
    """
    devices = []
    driver_version = None
    for row in csv.reader(line for line in output.splitlines() if line.strip()):
        if len(row) != len(fields):
            raise SourceUnavailable("nvidia-smi printed an unexpected line: %s" % ",".join(row))
        raw = dict(zip(fields, row))
        driver_version = driver_version or _value(raw["driver_version"])
        index = _int(raw["index"])
        bus_id = _value(raw["pci.bus_id"])
        devices.append(device_facts(
            index=index if index is not None else len(devices),
            name=_value(raw["name"]),
            uuid=_value(raw["uuid"]),
            memory_mib=_int(raw["memory.total"]),
            pci_bus_id=bus_id,
            pci_device_id=_device_id(raw["pci.device_id"]),
            pci_class=pci_class(bus_id) if pci_class and bus_id else None,
            compute_capability=_value(raw.get("compute_cap", "")),
            mig_current=_mig(raw["mig.mode.current"]),
            mig_pending=_mig(raw["mig.mode.pending"]),
        ))
    return driver_version, devices


def _first_line(out, err):
    for stream in (err, out):
        for line in (stream or "").splitlines():
            if line.strip():
                return line.strip()
    return "no output"


def _run(run_command, argv, decoder):
    """Run nvidia-smi; its output as text (bytes that are not UTF-8 replaced, with a warning)."""
    try:
        rc, out, err = run_command(argv)
    except CommandTimeout as error:
        raise SourceUnavailable("nvidia-smi did not answer within %s s (command_timeout) and was stopped"
                                % error.timeout, timed_out=True)
    return rc, decoder.decode(out, "the output of nvidia-smi") or "", decoder.decode(err, "the error output of nvidia-smi") or ""


def discover_smi(run_command, which, decoder=None, pci_class=None):
    """Return ``(driver_version, cuda_driver_version, devices)`` from nvidia-smi.

    ``run_command(argv) -> (rc, stdout, stderr)`` (bytes or text; raises ``CommandTimeout`` when the command
    runs out of time); ``which(name) -> path or None``; ``decoder``: a ``TextDecoder`` that collects the
    warnings about output that is not UTF-8; ``pci_class(bus_id)``: a GPU's PCI class.
    The CUDA driver version is not among nvidia-smi's query fields: it is None.
    """
    decoder = decoder or TextDecoder()
    binary = which("nvidia-smi")
    if not binary:
        raise SourceUnavailable("nvidia-smi was not found", expected=True)
    fields = QUERY_FIELDS
    rc, out, err = _run(run_command, query_command(binary, fields), decoder)
    if rc != 0 and "not a valid field" in (out + err):
        fields = tuple(field for field in QUERY_FIELDS if field not in OPTIONAL_FIELDS)
        rc, out, err = _run(run_command, query_command(binary, fields), decoder)
    if rc != 0:
        raise SourceUnavailable("nvidia-smi failed (rc=%d): %s" % (rc, _first_line(out, err)))
    driver_version, devices = parse_query_output(out, fields, pci_class)
    return driver_version, None, devices
