# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Read every health signal of every GPU through NVML (the ``pynvml`` bindings).

One NVML session (``gpu_discovery_nvml.run_nvml``: one init and shutdown, bounded by a timeout). Per GPU, each
signal is a dict of values, ``"not supported"`` where the GPU, the driver or the bindings do not have it, or
``{"error": "..."}`` where NVML failed otherwise. A GPU NVML has lost, or that waits for a reset, keeps the
NVML error's constant in ``access_error`` and is not read further; the other GPUs are read all the same.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_common import SourceUnavailable
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_nvml import (
    describe_error,
    error_code,
    run_nvml,
)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_health import NOT_SUPPORTED

# nvml.h values, for bindings that lack the constants
_NOT_SUPPORTED = 3
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
_RESET_REQUIRED = 16
_FI_RECOVERY_ACTION = 230
_ACCESS_ERRORS = {_GPU_IS_LOST: "NVML_ERROR_GPU_IS_LOST", _RESET_REQUIRED: "NVML_ERROR_RESET_REQUIRED"}


class _NotSupported(Exception):
    """The signal does not exist on this GPU, driver or bindings."""


def _missing(lib, error):
    return error_code(error) in (getattr(lib, "NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED),
                                 getattr(lib, "NVML_ERROR_FUNCTION_NOT_FOUND", _FUNCTION_NOT_FOUND))


def _optional(lib, name, *args):
    """``lib.<name>(*args)``; None when the bindings lack the function or NVML answers not supported."""
    function = getattr(lib, name, None)
    if function is None:
        return None
    try:
        return function(*args)
    except lib.NVMLError as error:
        if _missing(lib, error):
            return None
        raise


def _all_or_nothing(values):
    if all(value is None for value in values.values()):
        raise _NotSupported()
    return values


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def read_ecc(lib, handle):
    values = {}
    for name, error_type, counter in (("volatile_uncorrected", 1, 0), ("aggregate_uncorrected", 1, 1),
                                      ("volatile_corrected", 0, 0), ("aggregate_corrected", 0, 1)):
        value = _optional(lib, "nvmlDeviceGetTotalEccErrors", handle, error_type, counter)
        values[name] = int(value) if value is not None else None
    return _all_or_nothing(values)


def read_row_remap(lib, handle):
    rows = _optional(lib, "nvmlDeviceGetRemappedRows", handle)
    if rows is None:
        raise _NotSupported()
    corrected, uncorrected, pending, failure = (int(value) for value in rows)
    return {"corrected": corrected, "uncorrected": uncorrected, "pending": bool(pending), "failure": bool(failure)}


def read_retired_pages(lib, handle):
    single = _optional(lib, "nvmlDeviceGetRetiredPages", handle, 0)
    double = _optional(lib, "nvmlDeviceGetRetiredPages", handle, 1)
    pending = _optional(lib, "nvmlDeviceGetRetiredPagesPendingStatus", handle)
    return _all_or_nothing({
        "single_bit": len(single) if single is not None else None,
        "double_bit": len(double) if double is not None else None,
        "pending": bool(pending) if pending is not None else None,
    })


def read_clocks(lib, handle):
    # nvmlDeviceGetCurrentClocksEventReasons from R535; the older name before (and in older bindings)
    mask = _optional(lib, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if mask is None:
        mask = _optional(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    if mask is None:
        raise _NotSupported()
    return {"reasons": int(mask)}


def read_pcie(lib, handle):
    values = {}
    for name, function in (("generation", "nvmlDeviceGetCurrPcieLinkGeneration"),
                           ("generation_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                           ("width", "nvmlDeviceGetCurrPcieLinkWidth"),
                           ("width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
                           ("replays", "nvmlDeviceGetPcieReplayCounter")):
        value = _optional(lib, function, handle)
        values[name] = int(value) if value is not None else None
    return _all_or_nothing(values)


def read_temperature(lib, handle):
    current = _optional(lib, "nvmlDeviceGetTemperature", handle, getattr(lib, "NVML_TEMPERATURE_GPU", 0))
    slowdown = _optional(lib, "nvmlDeviceGetTemperatureThreshold", handle,
                         getattr(lib, "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", 1))
    return _all_or_nothing({"current": int(current) if current is not None else None,
                            "slowdown": int(slowdown) if slowdown is not None else None})


def _fabric_struct(lib):
    """The newest fabric info struct the bindings know with its getter: v3, v2 (``...InfoV``), else v1."""
    for struct_name in ("c_nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfo_v2_t"):
        struct = getattr(lib, struct_name, None)
        if struct is not None and hasattr(lib, "nvmlDeviceGetGpuFabricInfoV"):
            return struct, lib.nvmlDeviceGetGpuFabricInfoV
    struct = getattr(lib, "c_nvmlGpuFabricInfo_t", None)
    if struct is not None and hasattr(lib, "nvmlDeviceGetGpuFabricInfo"):
        return struct, lib.nvmlDeviceGetGpuFabricInfo
    return None, None


def read_fabric(lib, handle):
    struct, getter = _fabric_struct(lib)
    if struct is None:
        raise _NotSupported()
    info = struct()
    try:
        getter(handle, lib.byref(info) if hasattr(lib, "byref") else info)
    except lib.NVMLError as error:
        if _missing(lib, error):
            raise _NotSupported()
        raise
    state = int(info.state)
    if state == 0:  # NVML_GPU_FABRIC_STATE_NOT_SUPPORTED
        raise _NotSupported()
    status = int(info.status)
    return {
        "state": state,
        "status": describe_error(lib, lib.NVMLError(status)) if status else None,
        "health_mask": int(getattr(info, "healthMask", 0)),
        "health_summary": int(getattr(info, "healthSummary", 0)) or None,
    }


_VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def read_recovery_action(lib, handle):
    field = getattr(lib, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", _FI_RECOVERY_ACTION)
    values = _optional(lib, "nvmlDeviceGetFieldValues", handle, [field])
    if values is None:
        raise _NotSupported()
    entry = values[0]
    if entry.nvmlReturn:
        error = lib.NVMLError(entry.nvmlReturn)
        if _missing(lib, error):
            raise _NotSupported()
        raise error
    return {"action": int(getattr(entry.value, _VALUE_FIELDS.get(int(entry.valueType), "uiVal")))}


SIGNALS = (
    ("ecc", read_ecc),
    ("row_remap", read_row_remap),
    ("retired_pages", read_retired_pages),
    ("recovery_action", read_recovery_action),
    ("clocks", read_clocks),
    ("pcie", read_pcie),
    ("temperature", read_temperature),
    ("fabric", read_fabric),
)


def _access_error(lib, error):
    code = error_code(error)
    if code in _ACCESS_ERRORS:
        return _ACCESS_ERRORS[code]
    return None


def read_gpu(lib, index):
    """One GPU's identity and signals; never raises an NVMLError."""
    gpu = {"index": index, "name": None, "uuid": None, "pci_bus_id": None, "access_error": None, "signals": {}}
    try:
        handle = lib.nvmlDeviceGetHandleByIndex(index)
    except lib.NVMLError as error:
        gpu["access_error"] = _access_error(lib, error) or describe_error(lib, error)
        return gpu
    for key, function in (("name", "nvmlDeviceGetName"), ("uuid", "nvmlDeviceGetUUID")):
        try:
            gpu[key] = _text(_optional(lib, function, handle))
        except (lib.NVMLError, UnicodeDecodeError):
            pass
    try:
        gpu["pci_bus_id"] = _text(lib.nvmlDeviceGetPciInfo(handle).busId)
    except (lib.NVMLError, UnicodeDecodeError):
        pass
    for signal, reader in SIGNALS:
        try:
            gpu["signals"][signal] = reader(lib, handle)
        except _NotSupported:
            gpu["signals"][signal] = NOT_SUPPORTED
        except lib.NVMLError as error:
            access = _access_error(lib, error)
            if access:
                gpu["access_error"] = access
                gpu["signals"] = {}
                break
            gpu["signals"][signal] = {"error": describe_error(lib, error)}
    return gpu


def read_health(lib=None, timeout=None):
    """``(driver_version, [gpu, ...])`` of every GPU NVML counts; raises SourceUnavailable when NVML cannot serve."""

    def work(lib):
        try:
            driver = _text(lib.nvmlSystemGetDriverVersion())
            count = int(lib.nvmlDeviceGetCount())
        except lib.NVMLError as error:
            raise SourceUnavailable("NVML query failed: %s" % describe_error(lib, error))
        return driver, [read_gpu(lib, index) for index in range(count)]

    return run_nvml(work, lib=lib, timeout=timeout, thread_name="nvml-health")
