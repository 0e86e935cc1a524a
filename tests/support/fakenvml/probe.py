"""Print, as JSON, what pynvml reports about the GPUs of this machine.

Run it in a fresh process (the library is chosen when pynvml first loads it):

    LD_LIBRARY_PATH=.cache/fakenvml/full FAKENVML_CONFIG=profile.conf python3 probe.py

Every value is either the value pynvml returned or {"error": "<NVMLError class name>"}. A string that
is not UTF-8 is shown with backslash escapes: {"error": "UnicodeDecodeError", "raw": "..."} where pynvml
itself failed to decode it (nvidia-ml-py 13), else the escaped text (bindings that return bytes).
Works with nvidia-ml-py 13 and with Debian's python3-pynvml 11.
"""
import json
import sys

import pynvml


def _text(value):
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value


def _call(function, *args):
    try:
        return function(*args)
    except pynvml.NVMLError as error:
        return {"error": type(error).__name__, "message": str(error)}
    except UnicodeDecodeError as error:
        return {"error": "UnicodeDecodeError", "raw": error.object.decode("utf-8", "backslashreplace")}


def _attributes(handle, v1=False):
    info = _call(_v1_attributes if v1 else pynvml.nvmlDeviceGetAttributes_v2, handle)
    if _failed(info):
        return info
    return {name: getattr(info, name) for name, _type in info._fields_}


def _v1_attributes(handle):
    """nvmlDeviceGetAttributes (v1) by symbol: the bindings map their nvmlDeviceGetAttributes to _v2."""
    attributes = pynvml.c_nvmlDeviceAttributes()
    function = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetAttributes")  # pylint: disable=protected-access
    pynvml._nvmlCheckReturn(function(handle, pynvml.byref(attributes)))  # pylint: disable=protected-access
    return attributes


def _failed(value):
    return isinstance(value, dict) and "error" in value


def _memory(handle):
    info = _call(pynvml.nvmlDeviceGetMemoryInfo, handle)
    return info if _failed(info) else {"total": info.total, "free": info.free, "used": info.used}


def _memory_v2(handle):
    info = _call(pynvml.nvmlDeviceGetMemoryInfo, handle, pynvml.nvmlMemory_v2)
    if _failed(info):
        return info
    return {"total": info.total, "reserved": info.reserved, "free": info.free, "used": info.used}


def _pci(handle):
    info = _call(pynvml.nvmlDeviceGetPciInfo, handle)
    if _failed(info):
        return info
    return {
        "bus_id": _text(info.busId),
        "bus_id_legacy": _text(info.busIdLegacy),
        "domain": info.domain,
        "bus": info.bus,
        "device": info.device,
        "pci_device_id": info.pciDeviceId,
        "pci_subsystem_id": info.pciSubSystemId,
    }


def _listed(value):
    return list(value) if isinstance(value, (list, tuple)) else value


def _optional_call(name, *args):
    """pynvml.<name>(*args), or {"error": "missing"} where these bindings lack the function."""
    function = getattr(pynvml, name, None)
    return _call(function, *args) if function else {"error": "missing"}


def _fabric(handle):
    struct = getattr(pynvml, "c_nvmlGpuFabricInfo_v3_t", None)
    if struct is None:
        return {"error": "missing"}
    info = struct()
    status = _call(pynvml.nvmlDeviceGetGpuFabricInfoV, handle, pynvml.byref(info))
    if _failed(status):
        return status
    return {"state": info.state, "status": info.status, "health_mask": info.healthMask,
            "health_summary": info.healthSummary}


def _recovery_action(handle):
    field = getattr(pynvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
    if field is None:
        return {"error": "missing"}
    values = _call(pynvml.nvmlDeviceGetFieldValues, handle, [field])
    if _failed(values):
        return values
    return {"return": values[0].nvmlReturn, "value": values[0].value.uiVal}


def health(handle):
    """Every health signal of a GPU (nvidia_gpu_health reads these)."""
    return {
        "ecc": {"%s_%s" % (counter, kind): _call(pynvml.nvmlDeviceGetTotalEccErrors, handle, error_type, counter_type)
                for kind, error_type in (("uncorrected", 1), ("corrected", 0))
                for counter, counter_type in (("volatile", 0), ("aggregate", 1))},
        "remapped_rows": _listed(_optional_call("nvmlDeviceGetRemappedRows", handle)),
        "retired_pages": [_listed(_call(pynvml.nvmlDeviceGetRetiredPages, handle, cause)) for cause in (0, 1)],
        "retired_pages_v2": [_listed(_optional_call("nvmlDeviceGetRetiredPages_v2", handle, cause)) for cause in (0, 1)],
        "retired_pages_pending": _call(pynvml.nvmlDeviceGetRetiredPagesPendingStatus, handle),
        "clocks_event_reasons": _optional_call("nvmlDeviceGetCurrentClocksEventReasons", handle),
        "clocks_throttle_reasons": _optional_call("nvmlDeviceGetCurrentClocksThrottleReasons", handle),
        "pcie": {name: _call(getattr(pynvml, "nvmlDeviceGet%s" % name), handle)
                 for name in ("CurrPcieLinkGeneration", "MaxPcieLinkGeneration", "CurrPcieLinkWidth",
                              "MaxPcieLinkWidth", "PcieReplayCounter")},
        "temperature": _call(pynvml.nvmlDeviceGetTemperature, handle, 0),
        "temperature_slowdown": _call(pynvml.nvmlDeviceGetTemperatureThreshold, handle, 1),
        "temperature_shutdown": _call(pynvml.nvmlDeviceGetTemperatureThreshold, handle, 0),
        "fabric": _fabric(handle),
        "recovery_action": _recovery_action(handle),
    }


def _gpu_instances(handle):
    """[[id, profile id, placement start, size, [compute instance ids]], ...] ([] while MIG is off)."""
    if not hasattr(pynvml, "nvmlDeviceGetGpuInstances"):
        return {"error": "missing"}
    found = []
    for constant in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        info = _call(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, handle, constant)
        if _failed(info):  # a profile the GPU lacks, or MIG off: NOT_SUPPORTED
            continue
        handles = (pynvml.c_nvmlGpuInstance_t * 8)()
        count = pynvml.c_uint(8)
        pynvml.nvmlDeviceGetGpuInstances(handle, info.id, handles, pynvml.byref(count))
        for i in range(count.value):
            gi = pynvml.nvmlGpuInstanceGetInfo(handles[i])
            cis = []
            for ci_constant in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
                ci_handles = (pynvml.c_nvmlComputeInstance_t * 8)()
                ci_count = pynvml.c_uint(8)
                pynvml.nvmlGpuInstanceGetComputeInstances(handles[i], ci_constant, ci_handles, pynvml.byref(ci_count))
                cis += [pynvml.nvmlComputeInstanceGetInfo(ci_handles[k]).id for k in range(ci_count.value)]
            found.append([gi.id, gi.profileId, gi.placement.start, gi.placement.size, sorted(cis)])
    return sorted(found)


def _processes(handle):
    mismatch = getattr(pynvml, "NVMLLibraryMismatchError", None)
    try:
        procs = _optional_call("nvmlDeviceGetComputeRunningProcesses", handle)
    except Exception as error:  # pylint: disable=broad-except  # nvidia-ml-py 13: _v3 missing from the library
        if mismatch is None or not isinstance(error, mismatch):
            raise
        return {"error": type(error).__name__}
    if _failed(procs):
        return procs
    return [[p.pid, _text(_call(pynvml.nvmlSystemGetProcessName, p.pid))] for p in procs]


def _device(handle, mig=False):
    device = {
        "name": _text(_call(pynvml.nvmlDeviceGetName, handle)),
        "uuid": _text(_call(pynvml.nvmlDeviceGetUUID, handle)),
        "memory": _memory(handle),
    }
    if mig:
        device["attributes_v2"] = _attributes(handle)
        device["attributes_v1"] = _attributes(handle, v1=True)
        return device
    device.update({
        "index": _call(pynvml.nvmlDeviceGetIndex, handle),
        "memory_v2": _memory_v2(handle),
        "pci": _pci(handle),
        "compute_capability": _listed(_call(pynvml.nvmlDeviceGetCudaComputeCapability, handle)),
        "mig_mode": _listed(_call(pynvml.nvmlDeviceGetMigMode, handle)),
        "max_mig_devices": _call(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle),
        "attributes_v2": _attributes(handle),
        "health": health(handle),
        "gpu_instances": _gpu_instances(handle),
        "processes": _processes(handle),
    })
    migs = []
    limit = device["max_mig_devices"] if isinstance(device["max_mig_devices"], int) else 1
    for index in range(max(limit, 1)):
        mig_handle = _call(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, index)
        if _failed(mig_handle):
            migs.append(mig_handle)
            break
        migs.append(_device(mig_handle, mig=True))
    device["mig_devices"] = migs
    return device


def probe():
    result = {"pynvml": getattr(pynvml, "__version__", None)}
    init = _call(pynvml.nvmlInit)
    if _failed(init):
        result["init"] = init
        return result
    result["init"] = "ok"
    result["driver_version"] = _text(_call(pynvml.nvmlSystemGetDriverVersion))
    result["nvml_version"] = _text(_call(pynvml.nvmlSystemGetNVMLVersion))
    result["cuda_driver_version"] = _call(pynvml.nvmlSystemGetCudaDriverVersion)
    result["cuda_driver_version_v2"] = _call(pynvml.nvmlSystemGetCudaDriverVersion_v2)
    count = _call(pynvml.nvmlDeviceGetCount)
    result["count"] = count
    result["devices"] = []
    if isinstance(count, int):
        for index in range(count):
            handle = _call(pynvml.nvmlDeviceGetHandleByIndex, index)
            result["devices"].append(handle if _failed(handle) else _device(handle))
        result["index_out_of_range"] = _call(pynvml.nvmlDeviceGetHandleByIndex, count)
    result["shutdown"] = _call(pynvml.nvmlShutdown) or "ok"
    result["after_shutdown"] = _call(pynvml.nvmlDeviceGetCount)
    return result


if __name__ == "__main__":
    json.dump(probe(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
