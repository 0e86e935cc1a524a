# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""MIG through NVML (the ``pynvml`` bindings): read a node's GPUs for ``mig_plan`` and carry a plan out.

``read_gpus(lib)`` is an NVML session's work (``gpu_discovery_nvml.run_nvml``): only reads. It gives each GPU
as ``mig_plan``'s docstring defines it (profile names as go-nvlib gives them,
``mig_plan.gpu_instance_profile_name``; ``profiles`` None while MIG is off, as NVML answers profile info only
then), plus ``compute_capability`` and ``bus_id``.

``apply(node_plan, gpus, ...)`` carries a plan out in mig-parted's order (NVIDIA/mig-parted
``cmd/nvidia-mig-parted/apply``, ``pkg/mig/config``): on the GPUs whose mode changes, compute instances are
destroyed before their GPU instances and the mode is set; the GPUs whose mode is still pending are reset, each
by ``nvidia-smi -r -i <index>`` (NVML has no reset call), and only those; the GPUs are read again and planned
again (the profile tables exist once MIG is on); on each GPU whose geometry differs the instances are destroyed,
GPU instances created at the planned placements and one full-size compute instance in each; the GPUs are read
back and ``mig_plan.verify`` must find nothing. Safety:

* a reset is needed but ``nvidia-persistenced`` runs or ``nvidia_drm`` is loaded: ResetBlockedError before any
  NVML write, naming them (the caller stops the first and retries; the second needs a reboot or unloading);
* the reset refused (passthrough, a VM): the result says ``reboot_required`` with the reason, nothing more is
  changed on the node;
* a creation failing half-way: the GPU's instances are put back as they were (what was created destroyed,
  what was destroyed created again at its placement) and MigApplyError says so.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_plan
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import KubegpuError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_nvml import describe_error, error_code

# nvml.h values, for bindings that lack the constants
_INVALID_ARGUMENT = 2
_NOT_SUPPORTED = 3
_FUNCTION_NOT_FOUND = 13
_GPU_INSTANCE_PROFILE_COUNT = 0x12
_COMPUTE_INSTANCE_PROFILE_COUNT = 0x9
# NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE constants by slice count
_CI_PROFILE_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
_MAX_INSTANCES = 8


class MigApplyError(KubegpuError):
    """NVML refused a step of the apply (the message says which GPU, which step, and what was put back)."""

    kind = "runtime"


class ResetBlockedError(KubegpuError):
    """A GPU reset is needed but nvidia-persistenced or nvidia_drm would block it (nothing was changed)."""

    kind = "runtime"


def _absent(lib, error):
    return error_code(error) in (getattr(lib, "NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED),
                                 getattr(lib, "NVML_ERROR_FUNCTION_NOT_FOUND", _FUNCTION_NOT_FOUND),
                                 getattr(lib, "NVML_ERROR_INVALID_ARGUMENT", _INVALID_ARGUMENT))


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


# ------------------------------------------------------------------ reading
# the GPU-instance profile info's engine counts; a MIG device (one full-size compute instance) shares them all
_ENGINE_FIELDS = (("copy", "copyEngineCount"), ("decoder", "decoderCount"), ("encoder", "encoderCount"),
                  ("jpeg", "jpegCount"), ("ofa", "ofaCount"))


def _field(info, name):
    value = getattr(info, name, None)
    return int(value) if value is not None else None


def _profiles(lib, handle, memory_bytes):
    """``{name: {id, slices, instances, memory_mib, placements, constant, multiprocessors, engines}}`` of the GPU's
    profile table (``engines``: ``{copy, decoder, encoder, jpeg, ofa}`` counts)."""
    table = {}
    for constant in range(getattr(lib, "NVML_GPU_INSTANCE_PROFILE_COUNT", _GPU_INSTANCE_PROFILE_COUNT)):
        try:
            info = lib.nvmlDeviceGetGpuInstanceProfileInfo(handle, constant)
        except lib.NVMLError as error:
            if _absent(lib, error):
                continue
            raise
        name = mig_plan.gpu_instance_profile_name(constant, info.sliceCount, info.memorySizeMB, memory_bytes)
        if name in table:
            continue
        places = (lib.c_nvmlGpuInstancePlacement_t * _MAX_INSTANCES)()
        count = lib.c_uint(_MAX_INSTANCES)
        lib.nvmlDeviceGetGpuInstancePossiblePlacements(handle, info.id, places, lib.byref(count))
        table[name] = {"id": info.id, "slices": info.sliceCount, "instances": info.instanceCount,
                       "memory_mib": info.memorySizeMB, "constant": constant,
                       "placements": [(places[i].start, places[i].size) for i in range(count.value)],
                       "multiprocessors": _field(info, "multiprocessorCount"),
                       "engines": dict((engine, _field(info, field)) for engine, field in _ENGINE_FIELDS)}
    return table


def _gpu_instance_handles(lib, handle, profiles):
    """``[(profile name, GPU instance handle)]`` of every GPU instance of the GPU."""
    found = []
    for name, info in sorted(profiles.items()):
        handles = (lib.c_nvmlGpuInstance_t * _MAX_INSTANCES)()
        count = lib.c_uint(_MAX_INSTANCES)
        lib.nvmlDeviceGetGpuInstances(handle, info["id"], handles, lib.byref(count))
        found.extend((name, handles[i]) for i in range(count.value))
    return found


def _compute_instances(lib, gi_handle):
    result = []
    for constant in range(getattr(lib, "NVML_COMPUTE_INSTANCE_PROFILE_COUNT", _COMPUTE_INSTANCE_PROFILE_COUNT)):
        try:
            info = lib.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi_handle, constant, 0)
        except lib.NVMLError as error:
            if _absent(lib, error):
                continue
            raise
        handles = (lib.c_nvmlComputeInstance_t * _MAX_INSTANCES)()
        count = lib.c_uint(_MAX_INSTANCES)
        lib.nvmlGpuInstanceGetComputeInstances(gi_handle, info.id, handles, lib.byref(count))
        for i in range(count.value):
            result.append({"id": lib.nvmlComputeInstanceGetInfo(handles[i]).id, "slices": info.sliceCount})
    return sorted(result, key=lambda ci: ci["id"])


def _instances(lib, handle, profiles):
    result = []
    for name, gi_handle in _gpu_instance_handles(lib, handle, profiles):
        info = lib.nvmlGpuInstanceGetInfo(gi_handle)
        result.append({"id": info.id, "profile": name, "placement": (info.placement.start, info.placement.size),
                       "compute_instances": _compute_instances(lib, gi_handle)})
    return sorted(result, key=lambda gi: gi["id"])


def _running(lib, handle):
    """NVML's compute processes of the GPU; a driver without the _v3 call (nvidia-ml-py 13 then raises its
    NVMLLibraryMismatchError, not an NVMLError) is asked with _v2."""
    mismatch = getattr(lib, "NVMLLibraryMismatchError", None)
    try:
        return lib.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception as error:  # pylint: disable=broad-except  # re-raised unless it is the bindings' mismatch
        if (mismatch is None or not isinstance(error, mismatch)
                or not hasattr(lib, "nvmlDeviceGetComputeRunningProcesses_v2")):
            raise
    return lib.nvmlDeviceGetComputeRunningProcesses_v2(handle)


def _processes(lib, handle):
    result = []
    for process in _running(lib, handle):
        try:
            name = _text(lib.nvmlSystemGetProcessName(process.pid))
        except lib.NVMLError:
            name = "?"
        result.append({"pid": process.pid, "name": name})
    return result


def read_gpu(lib, index):
    handle = lib.nvmlDeviceGetHandleByIndex(index)
    pci = lib.nvmlDeviceGetPciInfo(handle)
    memory = lib.nvmlDeviceGetMemoryInfo(handle).total
    gpu = {"index": index, "name": _text(lib.nvmlDeviceGetName(handle)), "pci_device_id": pci.pciDeviceId,
           "pci_subsystem_id": pci.pciSubSystemId, "bus_id": _text(pci.busId), "compute_capability": None,
           "mig_capable": True, "mode": {"current": False, "pending": False}, "profiles": None, "instances": [],
           "processes": []}
    try:
        gpu["compute_capability"] = list(lib.nvmlDeviceGetCudaComputeCapability(handle))
    except lib.NVMLError as error:
        if not _absent(lib, error):
            raise
    try:
        current, pending = lib.nvmlDeviceGetMigMode(handle)
    except lib.NVMLError as error:
        if not _absent(lib, error):
            raise
        gpu["mig_capable"] = False
        return gpu
    gpu["mode"] = {"current": bool(current), "pending": bool(pending)}
    gpu["processes"] = _processes(lib, handle)  # only a MIG-capable GPU can change
    if current:
        gpu["profiles"] = _profiles(lib, handle, memory)
        gpu["instances"] = _instances(lib, handle, gpu["profiles"])
    return gpu


def read_gpus(lib):
    """Every GPU of the node as ``mig_plan`` takes them (an NVML session's work: reads only)."""
    gpus = []
    for index in range(lib.nvmlDeviceGetCount()):
        try:
            gpus.append(read_gpu(lib, index))
        except lib.NVMLError as error:
            raise MigApplyError("MIG geometry not read: GPU %d: NVML failed: %s" % (index, describe_error(lib, error)),
                                nvml_error=error_code(error))
    return gpus


# ------------------------------------------------------------------ reset preconditions
def reset_blockers(run_command, modules_path="/proc/modules"):
    """What would block a GPU reset: ``["nvidia-persistenced is running", "nvidia_drm is loaded"]`` or fewer."""
    blockers = []
    rc, out, _err = run_command(["systemctl", "is-active", "nvidia-persistenced"])
    if rc == 0 and out.strip() == "active":
        blockers.append("nvidia-persistenced is running")
    try:
        with open(modules_path) as handle:
            modules = [line.split(" ", 1)[0] for line in handle]
    except (IOError, OSError):
        modules = []
    if "nvidia_drm" in modules:
        blockers.append("nvidia_drm is loaded")
    return blockers


def _needs_reset(gpu, gpu_plan):
    """Whether the plan's mode change on this GPU will wait for a reset (Ampere, or a mode already pending)."""
    if not gpu_plan.get("reset_required"):
        return False
    mode = gpu.get("mode") or {}
    if mode.get("pending") != mode.get("current"):
        return True
    capability = gpu.get("compute_capability") or [0, 0]
    return capability[0] < 9


# ------------------------------------------------------------------ writing
def _nvml_step(lib, gpu, what, function, *args):
    try:
        return function(*args)
    except lib.NVMLError as error:
        raise MigApplyError("%s: %s failed: %s" % (mig_plan.describe(gpu), what, describe_error(lib, error)),
                            nvml_error=error_code(error))


def _destroy_all(lib, handle, gpu):
    """Destroy every compute instance, then every GPU instance, of the GPU as read in ``gpu``."""
    for instance in gpu.get("instances") or []:
        gi = _nvml_step(lib, gpu, "looking up GPU instance %s" % instance["id"], lib.nvmlDeviceGetGpuInstanceById,
                        handle, instance["id"])
        for ci in instance.get("compute_instances") or []:
            ci_handle = _nvml_step(lib, gpu, "looking up compute instance %s" % ci["id"],
                                   lib.nvmlGpuInstanceGetComputeInstanceById, gi, ci["id"])
            _nvml_step(lib, gpu, "destroying compute instance %s of GPU instance %s" % (ci["id"], instance["id"]),
                       lib.nvmlComputeInstanceDestroy, ci_handle)
    for instance in gpu.get("instances") or []:
        gi = _nvml_step(lib, gpu, "looking up GPU instance %s" % instance["id"], lib.nvmlDeviceGetGpuInstanceById,
                        handle, instance["id"])
        _nvml_step(lib, gpu, "destroying GPU instance %s (%s)" % (instance["id"], instance["profile"]),
                   lib.nvmlGpuInstanceDestroy, gi)


def _create(lib, handle, gpu, profile_id, placement, ci_slices):
    where = lib.c_nvmlGpuInstancePlacement_t()
    where.start, where.size = placement
    gi = _nvml_step(lib, gpu, "creating GPU instance of profile id %s at %d:%d" % (profile_id, placement[0],
                                                                                   placement[1]),
                    lib.nvmlDeviceCreateGpuInstanceWithPlacement, handle, profile_id, lib.byref(where))
    for slices in ci_slices:
        info = _nvml_step(lib, gpu, "reading compute instance profile %dc" % slices,
                          lib.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, _CI_PROFILE_BY_SLICES[slices], 0)
        _nvml_step(lib, gpu, "creating compute instance %dc" % slices, lib.nvmlGpuInstanceCreateComputeInstance, gi,
                   info.id)


def _restore(lib, handle, gpu):
    """Put the GPU's instances back as ``gpu`` (read before the change) had them; a message saying how it went."""
    try:
        _destroy_all(lib, handle, read_gpu(lib, gpu["index"]))
        for instance in gpu.get("instances") or []:
            info = gpu["profiles"][instance["profile"]]
            _create(lib, handle, gpu, info["id"], instance["placement"],
                    [ci.get("slices") or info["slices"] for ci in instance.get("compute_instances") or []])
    except MigApplyError as error:
        return "restoring its previous geometry failed too (%s)" % error.msg
    return "it is back to its previous geometry (%s)" % (mig_plan.geometry_text(gpu))


def apply_geometry(lib, gpu, gpu_plan):
    """Destroy the GPU's instances and create the plan's (an NVML session's work for one GPU); restore on failure."""
    handle = lib.nvmlDeviceGetHandleByIndex(gpu["index"])
    try:
        _destroy_all(lib, handle, gpu)
        for item in gpu_plan["create"]:
            _create(lib, handle, gpu, item["profile_id"], tuple(item["placement"]), [item["slices"]])
    except MigApplyError as error:
        raise MigApplyError("MIG geometry not applied: %s; %s" % (error.msg, _restore(lib, handle, gpu)),
                            **error.details)


def set_modes(lib, gpus, node_plan):
    """On each GPU whose mode changes: destroy its instances, set the mode. ``{index: activation status}``."""
    by_index = dict((gpu["index"], gpu) for gpu in gpus)
    statuses = {}
    for gpu_plan in node_plan["gpus"]:
        if not gpu_plan.get("mode_change"):
            continue
        gpu = by_index[gpu_plan["index"]]
        handle = lib.nvmlDeviceGetHandleByIndex(gpu["index"])
        _destroy_all(lib, handle, gpu)
        mode = 1 if gpu_plan["mode_change"] == "enable" else 0
        statuses[gpu["index"]] = _nvml_step(lib, gpu, "setting the MIG mode", lib.nvmlDeviceSetMigMode, handle, mode)
    return statuses


def reset_gpus(indices, run_command, smi="nvidia-smi"):
    """Reset each GPU by ``nvidia-smi -r -i <index>``. ``None``, or the reason a GPU refused (reboot instead)."""
    for index in indices:
        rc, out, err = run_command([smi, "-r", "-i", str(index)])
        if rc == 127:
            raise MigApplyError("MIG mode of GPU %s is pending a reset, but %s cannot be run (%s); install it or "
                                "reboot the node" % (", ".join(str(i) for i in indices), smi,
                                                     " ".join((err or out).split()) or "not found"))
        if rc != 0:
            text = " ".join((out + " " + err).split()) or "exit status %d" % rc
            return "nvidia-smi -r -i %d failed: %s" % (index, text)
    return None


def apply(node_plan, gpus, session, run_command, configs, config_name, modules_path="/proc/modules",
          smi="nvidia-smi", which=None):
    """Carry ``node_plan`` (made from ``gpus``) out. ``session(work)`` runs ``work(lib)`` in an NVML session.

    Returns ``{"plan": the final plan, "gpus": GPUs read back, "reset": [indices reset], "reboot_required": bool,
    "reboot_reason": str or None, "activation": {index: status}}``. Raises ResetBlockedError (before any
    write), MigApplyError (with what was put back; also before any write when ``which(smi)`` finds no nvidia-smi
    and a reset is expected), or InputError/BusyGpuError from planning again.
    """
    by_index = dict((gpu["index"], gpu) for gpu in gpus)
    expected = [p["index"] for p in node_plan["gpus"] if _needs_reset(by_index[p["index"]], p)]
    if expected and which is not None and not which(smi):
        raise MigApplyError("MIG mode of GPU %s needs a GPU reset, but %s is not installed; nothing was changed"
                            % (", ".join(str(i) for i in expected), smi), reset_required=expected)
    if expected:
        blockers = reset_blockers(run_command, modules_path)
        if blockers:
            advice = []
            if "nvidia-persistenced is running" in blockers:
                advice.append("stop nvidia-persistenced, apply again, then start it")
            if "nvidia_drm is loaded" in blockers:
                advice.append("unload nvidia_drm (stop the display manager, then modprobe -r nvidia_drm) or reboot "
                              "the node")
            raise ResetBlockedError(
                "MIG mode of GPU %s needs a GPU reset, but %s; nothing was changed: %s"
                % (", ".join(str(i) for i in expected), " and ".join(blockers), "; ".join(advice)),
                reset_blocked_by=blockers, reset_required=expected)
    result = {"reset": [], "reboot_required": False, "reboot_reason": None, "activation": {}}
    if any(p.get("mode_change") for p in node_plan["gpus"]):
        result["activation"] = session(lambda lib: set_modes(lib, gpus, node_plan))
    gpus = session(read_gpus)
    pending = [gpu["index"] for gpu in gpus
               if gpu["mig_capable"] and gpu["mode"]["current"] != gpu["mode"]["pending"]]
    if pending:
        reason = reset_gpus(pending, run_command, smi)
        if reason:
            result.update(reboot_required=True, reboot_reason=reason, plan=node_plan, gpus=gpus)
            return result
        result["reset"] = pending
        gpus = session(read_gpus)
    final = mig_plan.plan(gpus, configs, config_name)
    by_index = dict((gpu["index"], gpu) for gpu in gpus)
    for gpu_plan in final["gpus"]:
        if gpu_plan["selected"] and (gpu_plan["destroy"] or gpu_plan["create"]):
            gpu = by_index[gpu_plan["index"]]
            session(lambda lib, gpu=gpu, gpu_plan=gpu_plan: apply_geometry(lib, gpu, gpu_plan))
    gpus = session(read_gpus)
    problems = mig_plan.verify(gpus, final)
    if problems:
        raise MigApplyError("MIG geometry not as planned after the apply: %s" % "; ".join(problems), problems=problems)
    result.update(plan=final, gpus=gpus)
    return result
