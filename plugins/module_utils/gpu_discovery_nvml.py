# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""GPU discovery through NVML (the ``pynvml`` bindings).

Works with nvidia-ml-py 13.x and with older bindings such as Debian's
python3-pynvml 11.525: strings may come back as bytes, and every call goes
through the names both versions share.

A driver that hangs (a GPU fallen off the bus, a wedged kernel module) would hang the
calling thread inside the library, where no Python signal can interrupt it: with a
``timeout`` the whole NVML session runs in a daemon thread and the caller stops waiting
for it after that many seconds (the thread stays blocked until the process exits).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import os
import tempfile
import threading
import traceback

try:
    import pynvml
except ImportError:
    pynvml = None
    PYNVML_IMPORT_ERROR = traceback.format_exc()
else:
    PYNVML_IMPORT_ERROR = None

from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_common import (
    SourceUnavailable,
    TextDecoder,
    device_facts,
)

MIB = 1024 * 1024

# NVML return codes (nvml.h); used when a binding lacks the constant.
_NOT_SUPPORTED = 3
_NOT_FOUND = 6
_FUNCTION_NOT_FOUND = 13
_LIBRARY_NOT_FOUND = 12


def error_code(error):
    """Return the NVML return code carried by an NVMLError (or None)."""
    return getattr(error, "value", None)


def _error_constant(lib, code):
    for name in dir(lib):
        if name.startswith("NVML_ERROR_") and getattr(lib, name, None) == code:
            return name
    return None


def describe_error(lib, error):
    """Return ``"Driver Not Loaded (NVML_ERROR_DRIVER_NOT_LOADED)"`` for an NVMLError."""
    code = error_code(error)
    try:
        message = str(error)
    except Exception:  # pylint: disable=broad-except
        message = ""
    constant = _error_constant(lib, code) if code is not None else None
    if not message or message.startswith("NVML Error with code"):
        message = constant or ("NVML error %s" % code)
        constant = None
    if constant:
        return "%s (%s)" % (message, constant)
    return message


def _is_optional_error(lib, error):
    code = error_code(error)
    return code in (
        getattr(lib, "NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED),
        getattr(lib, "NVML_ERROR_FUNCTION_NOT_FOUND", _FUNCTION_NOT_FOUND),
    )


def _optional(lib, func, *args):
    """Call an optional NVML function: None when NotSupported or FunctionNotFound."""
    try:
        return func(*args)
    except lib.NVMLError as error:
        if _is_optional_error(lib, error):
            return None
        raise


class _StderrCapture:
    """Collect what a native library prints on file descriptor 2 while it runs.

    ``release()`` puts file descriptor 2 back from another thread (when the library hangs); the capture
    then ends without text.
    """

    def __init__(self):
        self.text = ""
        self._saved = None
        self._file = None
        self._released = False
        self._lock = threading.Lock()

    def __enter__(self):
        with self._lock:
            if self._released:
                return self
            try:
                self._file = tempfile.TemporaryFile()
                self._saved = os.dup(2)
                os.dup2(self._file.fileno(), 2)
            except (OSError, ValueError):
                self._close()
        return self

    def __exit__(self, *exc_info):
        with self._lock:
            if self._saved is not None:
                os.dup2(self._saved, 2)
                os.close(self._saved)
                self._saved = None
                self._file.seek(0)
                self.text = self._file.read().decode("utf-8", "replace").strip()
            self._close()
        return False

    def release(self):
        with self._lock:
            self._released = True
            if self._saved is not None:
                os.dup2(self._saved, 2)
            self._close()

    def _close(self):
        if self._saved is not None:
            os.close(self._saved)
            self._saved = None
        if self._file is not None:
            self._file.close()
            self._file = None


def _cuda_version(value):
    if value is None:
        return None
    value = int(value)
    return "%d.%d" % (value // 1000, (value % 1000) // 10)


def mig_profile(name):
    """The MIG profile in a MIG device's NVML name: "3g.20gb" of "NVIDIA A100-SXM4-40GB MIG 3g.20gb"."""
    name = name or ""
    return name.rsplit(" MIG ", 1)[1].strip() or None if " MIG " in name else None


def _attribute_struct(lib, handle):
    """NVML's attributes of a MIG device: nvmlDeviceGetAttributes_v2, else the older nvmlDeviceGetAttributes.

    GPU Feature Discovery reads them the same way (go-nvml falls back to the v1 symbol). The bindings map
    their nvmlDeviceGetAttributes to the v2 symbol, so the v1 symbol is called through the bindings' own
    function lookup. None where the library or the device does not tell.
    """
    getter = getattr(lib, "nvmlDeviceGetAttributes_v2", None)
    if getter is not None:
        try:
            return getter(handle)
        except lib.NVMLError as error:
            if error_code(error) != getattr(lib, "NVML_ERROR_FUNCTION_NOT_FOUND", _FUNCTION_NOT_FOUND):
                if _is_optional_error(lib, error):
                    return None
                raise
    lookup = getattr(lib, "_nvmlGetFunctionPointer", None)
    struct = getattr(lib, "c_nvmlDeviceAttributes", None)
    if lookup is None or struct is None:
        return None
    try:
        function = lookup("nvmlDeviceGetAttributes")
    except lib.NVMLError as error:
        if _is_optional_error(lib, error):
            return None
        raise
    attributes = struct()
    code = function(handle, ctypes.byref(attributes))
    if code == 0:
        return attributes
    error = lib.NVMLError(code)
    if _is_optional_error(lib, error):
        return None
    raise error


def _count(attributes, name):
    value = getattr(attributes, name, None) if attributes is not None else None
    return int(value) if value is not None else None


def mig_attributes(attributes):
    """The facts' MIG device attributes from NVML's nvmlDeviceAttributes_t (None: all None)."""
    return {
        "multiprocessors": _count(attributes, "multiprocessorCount"),
        "slices": {"gi": _count(attributes, "gpuInstanceSliceCount"),
                   "ci": _count(attributes, "computeInstanceSliceCount")},
        "engines": {"copy": _count(attributes, "sharedCopyEngineCount"),
                    "decoder": _count(attributes, "sharedDecoderCount"),
                    "encoder": _count(attributes, "sharedEncoderCount"),
                    "jpeg": _count(attributes, "sharedJpegCount"),
                    "ofa": _count(attributes, "sharedOfaCount")},
    }


def _mig_devices(lib, handle, decoder, gpu_index):
    """The MIG devices of a MIG-enabled GPU, in slot order (empty slots skipped).

    None when the bindings or the driver cannot enumerate them.
    """
    slots = _optional(lib, lib.nvmlDeviceGetMaxMigDeviceCount, handle)
    get_handle = getattr(lib, "nvmlDeviceGetMigDeviceHandleByIndex", None)
    if slots is None or get_handle is None:
        return None
    found = []
    for slot in range(int(slots)):
        try:
            mig = get_handle(handle, slot)
        except lib.NVMLError as error:
            if error_code(error) == getattr(lib, "NVML_ERROR_NOT_FOUND", _NOT_FOUND):
                continue
            if _is_optional_error(lib, error):
                return None
            raise
        what = "MIG device %d of GPU %d" % (slot, gpu_index)
        name = decoder.call("NVML's name of " + what, lib.nvmlDeviceGetName, mig)
        attributes = _attribute_struct(lib, mig)
        # GPU Feature Discovery's memory of a MIG device is the attributes' memorySizeMB
        memory_mib = _count(attributes, "memorySizeMB")
        if not memory_mib:
            memory_mib = int(lib.nvmlDeviceGetMemoryInfo(mig).total) // MIB
        entry = {
            "slot": slot,
            "name": name,
            "profile": mig_profile(name),
            "uuid": decoder.call("NVML's UUID of " + what, lib.nvmlDeviceGetUUID, mig),
            "memory_mib": memory_mib,
        }
        entry.update(mig_attributes(attributes))
        found.append(entry)
    return found


def _device(lib, index, decoder, pci_class):
    handle = lib.nvmlDeviceGetHandleByIndex(index)
    name = decoder.call("NVML's name of GPU %d" % index, lib.nvmlDeviceGetName, handle)
    uuid = decoder.call("NVML's UUID of GPU %d" % index, lib.nvmlDeviceGetUUID, handle)
    memory = lib.nvmlDeviceGetMemoryInfo(handle)
    pci = lib.nvmlDeviceGetPciInfo(handle)
    capability = _optional(lib, lib.nvmlDeviceGetCudaComputeCapability, handle)
    mig = _optional(lib, lib.nvmlDeviceGetMigMode, handle)
    bus_id = decoder.decode(pci.busId, "NVML's PCI bus id of GPU %d" % index)
    return device_facts(
        index=index,
        name=name,
        uuid=uuid,
        memory_mib=int(memory.total) // MIB,
        pci_bus_id=bus_id,
        pci_device_id="0x%08X" % int(pci.pciDeviceId),
        pci_class=pci_class(bus_id) if pci_class else None,
        compute_capability="%d.%d" % tuple(capability) if capability else None,
        mig_current=int(mig[0]) if mig else None,
        mig_pending=int(mig[1]) if mig else None,
        # MIG enabled: its MIG devices; disabled: none; MIG not supported: not known
        mig_devices=(_mig_devices(lib, handle, decoder, index) if int(mig[0]) == 1 else []) if mig else None,
    )


def discover_nvml(lib=None, decoder=None, pci_class=None, timeout=None):
    """Return ``(driver_version, cuda_driver_version, devices)`` read through NVML.

    One ``nvmlInit``/``nvmlShutdown`` pair.  Raises SourceUnavailable naming
    the cause when the bindings are missing or NVML cannot be used, or when it
    has not answered within ``timeout`` seconds (None: wait as long as it takes).
    ``decoder``: a ``TextDecoder`` collecting warnings about strings that are not
    UTF-8; ``pci_class(bus_id)``: a GPU's PCI class.
    """
    decoder = decoder if decoder is not None else TextDecoder()

    def work(lib):
        try:
            driver_version = decoder.call("NVML's driver version", lib.nvmlSystemGetDriverVersion)
            cuda_driver_version = _cuda_version(_optional(lib, lib.nvmlSystemGetCudaDriverVersion))
            count = int(lib.nvmlDeviceGetCount())
            devices = [_device(lib, index, decoder, pci_class) for index in range(count)]
        except lib.NVMLError as error:
            raise SourceUnavailable("NVML query failed: %s" % describe_error(lib, error), expected=False)
        return driver_version, cuda_driver_version, devices

    return run_nvml(work, lib=lib, timeout=timeout)


def run_nvml(work, lib=None, timeout=None, thread_name="nvml-discovery"):
    """Return ``work(lib)`` run between one ``nvmlInit`` and ``nvmlShutdown``.

    Raises SourceUnavailable naming the cause when the bindings are missing or NVML cannot be initialised, or
    when the session has not ended within ``timeout`` seconds (None: wait as long as it takes; the session then
    runs in a daemon thread, see the module's docstring). What ``work`` raises is raised here.
    """
    lib = lib if lib is not None else pynvml
    if lib is None:
        raise SourceUnavailable(
            "the Python library pynvml (package nvidia-ml-py or python3-pynvml) is not installed",
            expected=False,
        )
    capture = _StderrCapture()
    if not timeout:
        return _session(lib, work, capture)
    outcome = {}

    def run():
        try:
            outcome["result"] = _session(lib, work, capture)
        except BaseException as error:  # pylint: disable=broad-except  # handed to the waiting thread
            outcome["error"] = error

    worker = threading.Thread(target=run, name=thread_name)
    worker.daemon = True
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        capture.release()
        raise SourceUnavailable("NVML did not answer within %s s (nvml_timeout): the driver or a GPU is not "
                                "responding" % timeout, timed_out=True)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _session(lib, work, capture):
    with capture:
        try:
            lib.nvmlInit()
        except lib.NVMLError as error:
            init_error = error
        else:
            init_error = None
    if init_error is not None:
        cause = describe_error(lib, init_error)
        if capture.text:
            cause = "%s: %s" % (cause, " ".join(capture.text.split()))
        expected = error_code(init_error) == getattr(lib, "NVML_ERROR_LIBRARY_NOT_FOUND", _LIBRARY_NOT_FOUND)
        raise SourceUnavailable("NVML could not be initialised: %s" % cause, expected=expected)
    try:
        return work(lib)
    finally:
        try:
            lib.nvmlShutdown()
        except lib.NVMLError:
            pass
