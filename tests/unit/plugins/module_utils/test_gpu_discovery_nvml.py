"""Unit tests for the NVML source (plugins/module_utils/gpu_discovery_nvml.py) over a pynvml stand-in."""
import os
import sys
import threading
import time

import pynvml
import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_discovery_nvml as nv
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_common import SourceUnavailable

MIB = 1024 * 1024
CODES = {
    "NVML_ERROR_UNINITIALIZED": 1,
    "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_ERROR_NO_PERMISSION": 4,
    "NVML_ERROR_NOT_FOUND": 6,
    "NVML_ERROR_DRIVER_NOT_LOADED": 9,
    "NVML_ERROR_LIBRARY_NOT_FOUND": 12,
    "NVML_ERROR_FUNCTION_NOT_FOUND": 13,
    "NVML_ERROR_GPU_IS_LOST": 15,
    "NVML_ERROR_UNKNOWN": 999,
}
MESSAGES = {1: "Uninitialized", 3: "Not Supported", 4: "Insufficient Permissions", 6: "Not Found", 9: "Driver Not Loaded",
            13: "Function Not Found", 15: "GPU is lost", 999: "Unknown Error"}


class StubError(Exception):
    def __init__(self, value):
        super(StubError, self).__init__(value)
        self.value = value

    def __str__(self):
        # pynvml's own fallback text when nvmlErrorString cannot be called
        return MESSAGES.get(self.value, "NVML Error with code %d" % self.value)


class Struct:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class StubNvml:
    """The pynvml calls discover_nvml makes, answering from a list of GPU dicts."""

    NVMLError = StubError

    def __init__(self, gpus, driver="535.183.01", cuda=12020, init_error=None, stderr=None,
                 errors=None, as_bytes=False, attributes=None, decode=False, init_blocks=None):
        for name, code in CODES.items():
            setattr(self, name, code)
        self.gpus = gpus
        self.driver = driver
        self.cuda = cuda
        self.init_error = init_error
        self.stderr = stderr
        self.errors = errors or {}  # function name -> code, or (index, code)
        self.as_bytes = as_bytes
        self.attributes = attributes  # "v2", "v1" (the library lacks the _v2 symbol) or None (no attributes calls)
        self.decode = decode  # decode bytes as nvidia-ml-py does (UnicodeDecodeError for bytes that are not UTF-8)
        self.init_blocks = init_blocks  # a threading.Event nvmlInit waits for
        self.calls = []
        if attributes == "v1":
            self.c_nvmlDeviceAttributes = pynvml.c_nvmlDeviceAttributes

    def _enter(self, name, index=None):
        self.calls.append(name)
        error = self.errors.get(name)
        if isinstance(error, tuple):
            if error[0] == index:
                raise StubError(error[1])
        elif error is not None:
            raise StubError(error)

    def _str(self, value):
        raw = value if isinstance(value, bytes) else value.encode()
        if self.decode:
            return raw.decode()
        return raw if self.as_bytes else value

    def nvmlInit(self):
        self.calls.append("nvmlInit")
        if self.init_blocks is not None:
            self.init_blocks.wait()
        if self.stderr:
            os.write(2, self.stderr.encode())
        if self.init_error is not None:
            raise StubError(self.init_error)

    def nvmlShutdown(self):
        self._enter("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self):
        self._enter("nvmlSystemGetDriverVersion")
        return self._str(self.driver)

    def nvmlSystemGetCudaDriverVersion(self):
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.cuda

    def nvmlDeviceGetCount(self):
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        self._enter("nvmlDeviceGetHandleByIndex", index)
        return index

    def _of(self, handle):
        """A GPU's dict, or for a MIG handle (gpu index, slot) the MIG device's."""
        if isinstance(handle, tuple):
            gpu_dict = self.gpus[handle[0]]
            profile = gpu_dict["migs"][handle[1]]
            name = gpu_dict["name"] + (b" MIG " if isinstance(gpu_dict["name"], bytes) else " MIG ") + (
                profile.encode() if isinstance(gpu_dict["name"], bytes) else profile)
            return {"name": name, "uuid": "MIG-%d-%d" % handle,
                    "memory_mib": int(profile.split("+")[0].split(".")[1][:-2]) * 1024}
        return self.gpus[handle]

    def _attributes(self, handle, out=None):
        """nvmlDeviceAttributes_t of a MIG handle: from the profile, with memorySizeMB 1 MiB under the memory info."""
        if not isinstance(handle, tuple):
            raise StubError(3)
        profile = self.gpus[handle[0]]["migs"][handle[1]]
        gi = int(profile.split("g.")[0].split(".")[-1])
        attributes = out if out is not None else pynvml.c_nvmlDeviceAttributes()
        attributes.multiprocessorCount = 14 * gi
        attributes.sharedCopyEngineCount = gi
        attributes.sharedDecoderCount = gi - 1
        attributes.sharedEncoderCount = 0
        attributes.sharedJpegCount = 1 if profile.endswith("+me") else 0
        attributes.sharedOfaCount = 1 if profile.endswith("+me") else 0
        attributes.gpuInstanceSliceCount = gi
        attributes.computeInstanceSliceCount = gi
        attributes.memorySizeMB = self._of(handle)["memory_mib"] - 1
        return attributes

    def nvmlDeviceGetAttributes_v2(self, handle):
        self._enter("nvmlDeviceGetAttributes_v2", handle)
        if self.attributes != "v2":
            raise StubError(13)
        return self._attributes(handle)

    def _nvmlGetFunctionPointer(self, name):
        if self.attributes != "v1" or name != "nvmlDeviceGetAttributes":
            raise StubError(13)

        def v1(handle, pointer):
            self.calls.append("nvmlDeviceGetAttributes")
            try:
                self._attributes(handle, pointer._obj)  # pylint: disable=protected-access
            except StubError as error:
                return error.value
            return 0
        return v1

    def nvmlDeviceGetName(self, handle):
        self._enter("nvmlDeviceGetName", handle)
        return self._str(self._of(handle)["name"])

    def nvmlDeviceGetUUID(self, handle):
        self._enter("nvmlDeviceGetUUID", handle)
        return self._str(self._of(handle)["uuid"])

    def nvmlDeviceGetMemoryInfo(self, handle):
        self._enter("nvmlDeviceGetMemoryInfo", handle)
        total = self._of(handle)["memory_mib"] * MIB
        return Struct(total=total, free=total, used=0)

    def nvmlDeviceGetPciInfo(self, handle):
        self._enter("nvmlDeviceGetPciInfo", handle)
        gpu = self.gpus[handle]
        return Struct(busId=self._str(gpu["bus"]), pciDeviceId=gpu["device_id"])

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        self._enter("nvmlDeviceGetCudaComputeCapability", handle)
        return self.gpus[handle]["cc"]

    def nvmlDeviceGetMigMode(self, handle):
        self._enter("nvmlDeviceGetMigMode", handle)
        return list(self.gpus[handle]["mig"])

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        self._enter("nvmlDeviceGetMaxMigDeviceCount", handle)
        return len(self.gpus[handle]["migs"])

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, slot):
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        if self.gpus[handle]["migs"][slot] is None:
            raise StubError(6)
        return (handle, slot)


def gpu(index, name="NVIDIA H100 80GB HBM3", memory=81559, cc=(9, 0), mig=(0, 0), device_id=0x233010DE, migs=()):
    """One GPU; ``migs``: its MIG slots, a profile such as "3g.20gb" or None for an empty slot."""
    return {"name": name, "uuid": "GPU-%08d" % index, "memory_mib": memory,
            "bus": "00000000:%02X:00.0" % (0x18 + index), "device_id": device_id, "cc": cc, "mig": mig,
            "migs": list(migs)}


def test_reads_every_gpu_with_one_init_and_shutdown():
    lib = StubNvml([gpu(i) for i in range(8)])
    driver, cuda, devices = nv.discover_nvml(lib)
    assert driver == "535.183.01"
    assert cuda == "12.2"
    assert len(devices) == 8
    assert devices[3] == {
        "index": 3,
        "name": "NVIDIA H100 80GB HBM3",
        "product": "NVIDIA-H100-80GB-HBM3",
        "uuid": "GPU-00000003",
        "memory_mib": 81559,
        "pci_bus_id": "00000000:1B:00.0",
        "pci_device_id": "0x233010DE",
        "pci_class": None,
        "compute_capability": "9.0",
        "family": "hopper",
        "mig": {"current": 0, "pending": 0, "devices": []},
    }
    assert lib.calls.count("nvmlInit") == 1
    assert lib.calls.count("nvmlShutdown") == 1


def test_bytes_from_older_bindings_become_text():
    lib = StubNvml([gpu(0, name="Tesla T4", cc=(7, 5))], driver="535.216.01", cuda=12040, as_bytes=True)
    driver, cuda, devices = nv.discover_nvml(lib)
    assert driver == "535.216.01" and cuda == "12.4"
    assert devices[0]["name"] == "Tesla T4"
    assert devices[0]["uuid"] == "GPU-00000000"
    assert devices[0]["pci_bus_id"] == "00000000:18:00.0"


@pytest.mark.parametrize("code", [3, 13])
def test_optional_calls_not_supported_leave_their_field_null(code):
    lib = StubNvml([gpu(0), gpu(1)], errors={
        "nvmlDeviceGetMigMode": (1, code),
        "nvmlDeviceGetCudaComputeCapability": code,
        "nvmlSystemGetCudaDriverVersion": code,
    })
    driver, cuda, devices = nv.discover_nvml(lib)
    assert driver == "535.183.01"
    assert cuda is None
    assert devices[0]["mig"] == {"current": 0, "pending": 0, "devices": []}
    assert devices[1]["mig"] == {"current": None, "pending": None, "devices": None}
    assert devices[0]["compute_capability"] is None and devices[0]["family"] is None
    assert devices[0]["memory_mib"] == 81559


A100 = {"name": "NVIDIA A100-SXM4-40GB", "memory": 40960, "cc": (8, 0), "device_id": 0x20B010DE}


def test_mig_devices_of_a_mig_enabled_gpu_in_slot_order():
    lib = StubNvml([gpu(0, mig=(1, 1), migs=["3g.20gb", None, "1g.5gb", None, None, None, None], **A100),
                    gpu(1, mig=(1, 1), migs=[None] * 7, **A100), gpu(2, mig=(0, 1), migs=[None] * 7, **A100)])
    devices = nv.discover_nvml(lib)[2]
    unknown = {"multiprocessors": None, "slices": {"gi": None, "ci": None},
               "engines": {"copy": None, "decoder": None, "encoder": None, "jpeg": None, "ofa": None}}
    assert devices[0]["mig"] == {"current": 1, "pending": 1, "devices": [
        dict(unknown, slot=0, name="NVIDIA A100-SXM4-40GB MIG 3g.20gb", profile="3g.20gb", uuid="MIG-0-0",
             memory_mib=20480),
        dict(unknown, slot=2, name="NVIDIA A100-SXM4-40GB MIG 1g.5gb", profile="1g.5gb", uuid="MIG-0-2",
             memory_mib=5120)]}
    # enabled without MIG devices yet; disabled (enabled after the next reset): not enumerated
    assert devices[1]["mig"]["devices"] == []
    assert devices[2]["mig"] == {"current": 0, "pending": 1, "devices": []}
    assert lib.calls.count("nvmlDeviceGetMaxMigDeviceCount") == 2


@pytest.mark.parametrize("code", [3, 13])
def test_mig_devices_unknown_where_the_calls_are_missing(code):
    lib = StubNvml([gpu(0, mig=(1, 1), migs=["3g.20gb"], **A100)], errors={"nvmlDeviceGetMaxMigDeviceCount": code})
    assert nv.discover_nvml(lib)[2][0]["mig"] == {"current": 1, "pending": 1, "devices": None}


def test_mig_device_error_fails_the_source():
    lib = StubNvml([gpu(0, mig=(1, 1), migs=["3g.20gb"], **A100)], errors={"nvmlDeviceGetMigDeviceHandleByIndex": 15})
    with pytest.raises(SourceUnavailable, match=r"NVML query failed: GPU is lost"):
        nv.discover_nvml(lib)


@pytest.mark.parametrize("name, profile", [
    ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", "3g.20gb"), ("NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb", "1c.3g.40gb"),
    ("NVIDIA A100-SXM4-40GB", None), ("", None), (None, None)])
def test_mig_profile_from_the_name(name, profile):
    assert nv.mig_profile(name) == profile


def test_other_error_in_optional_call_fails_the_source():
    lib = StubNvml([gpu(0)], errors={"nvmlDeviceGetMigMode": 15})
    with pytest.raises(SourceUnavailable, match=r"NVML query failed: GPU is lost \(NVML_ERROR_GPU_IS_LOST\)"):
        nv.discover_nvml(lib)
    assert lib.calls.count("nvmlShutdown") == 1


def test_required_call_failing_fails_the_source_and_shuts_down():
    lib = StubNvml([gpu(0)], errors={"nvmlDeviceGetName": (0, 3)})
    with pytest.raises(SourceUnavailable, match="NVML query failed: Not Supported"):
        nv.discover_nvml(lib)
    assert lib.calls[-1] == "nvmlShutdown"


def test_shutdown_error_is_ignored():
    lib = StubNvml([gpu(0)], errors={"nvmlShutdown": 1})
    assert nv.discover_nvml(lib)[2][0]["index"] == 0


@pytest.mark.parametrize("code, message, expected", [
    (9, "NVML could not be initialised: Driver Not Loaded (NVML_ERROR_DRIVER_NOT_LOADED)", False),
    (4, "NVML could not be initialised: Insufficient Permissions (NVML_ERROR_NO_PERMISSION)", False),
    (999, "NVML could not be initialised: Unknown Error (NVML_ERROR_UNKNOWN)", False),
    (12, "NVML could not be initialised: NVML_ERROR_LIBRARY_NOT_FOUND", True),
])
def test_init_failure_names_the_cause(code, message, expected):
    lib = StubNvml([gpu(0)], init_error=code)
    with pytest.raises(SourceUnavailable) as caught:
        nv.discover_nvml(lib)
    assert str(caught.value) == message
    assert caught.value.expected is expected
    assert "nvmlShutdown" not in lib.calls


def test_init_failure_includes_what_the_library_printed():
    lib = StubNvml([gpu(0)], init_error=999, stderr="fakenvml: /etc/fakenvml/gpus.conf:3: unknown key 'colour'\n")
    with pytest.raises(SourceUnavailable) as caught:
        nv.discover_nvml(lib)
    assert str(caught.value) == ("NVML could not be initialised: Unknown Error (NVML_ERROR_UNKNOWN): "
                                 "fakenvml: /etc/fakenvml/gpus.conf:3: unknown key 'colour'")


def test_stderr_is_restored_after_init():
    before = os.fstat(2)
    lib = StubNvml([gpu(0)], stderr="noise\n")
    nv.discover_nvml(lib)
    after = os.fstat(2)
    assert (before.st_ino, before.st_dev) == (after.st_ino, after.st_dev)


def test_missing_bindings(monkeypatch):
    monkeypatch.setattr(nv, "pynvml", None)
    with pytest.raises(SourceUnavailable, match=r"pynvml \(package nvidia-ml-py or python3-pynvml\) is not installed") as caught:
        nv.discover_nvml()
    assert caught.value.expected is False


def test_default_library_is_the_imported_pynvml(monkeypatch):
    lib = StubNvml([gpu(0)])
    monkeypatch.setattr(nv, "pynvml", lib)
    assert nv.discover_nvml()[2][0]["name"] == "NVIDIA H100 80GB HBM3"


def test_no_gpus():
    assert nv.discover_nvml(StubNvml([])) == ("535.183.01", "12.2", [])


def test_describe_error_without_message():
    lib = StubNvml([])
    assert nv.describe_error(lib, StubError(12)) == "NVML_ERROR_LIBRARY_NOT_FOUND"
    assert nv.describe_error(lib, StubError(77)) == "NVML error 77"
    assert nv.describe_error(lib, StubError(9)) == "Driver Not Loaded (NVML_ERROR_DRIVER_NOT_LOADED)"


def test_real_pynvml_is_importable_here():
    """The controller venv ships nvidia-ml-py; the module must find it."""
    assert nv.pynvml is not None and nv.PYNVML_IMPORT_ERROR is None
    assert "pynvml" in sys.modules


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_mig_device_attributes(version):
    """GFD's MIG labels come from nvmlDeviceGetAttributes_v2, the v1 symbol where a driver lacks _v2
    (k8s-device-plugin internal/resource/nvml-mig-device.go GetAttributes; go-nvml's versioned symbols)."""
    lib = StubNvml([gpu(0, mig=(1, 1), migs=["3g.20gb", "1g.5gb+me"], **A100)], attributes=version)
    migs = nv.discover_nvml(lib)[2][0]["mig"]["devices"]
    assert migs[0] == {"slot": 0, "name": "NVIDIA A100-SXM4-40GB MIG 3g.20gb", "profile": "3g.20gb",
                       "uuid": "MIG-0-0", "memory_mib": 20479, "multiprocessors": 42, "slices": {"gi": 3, "ci": 3},
                       "engines": {"copy": 3, "decoder": 2, "encoder": 0, "jpeg": 0, "ofa": 0}}
    assert migs[1]["profile"] == "1g.5gb+me"
    assert migs[1]["engines"] == {"copy": 1, "decoder": 0, "encoder": 0, "jpeg": 1, "ofa": 1}
    # memory from the attributes' memorySizeMB, as GFD: no memory info call
    assert "nvmlDeviceGetMemoryInfo" not in lib.calls[lib.calls.index("nvmlDeviceGetMaxMigDeviceCount"):]
    assert ("nvmlDeviceGetAttributes" in lib.calls) is (version == "v1")


def test_mig_device_attributes_not_supported_leave_them_null():
    lib = StubNvml([gpu(0, mig=(1, 1), migs=["3g.20gb"], **A100)], attributes="v2",
                   errors={"nvmlDeviceGetAttributes_v2": 3})
    mig = nv.discover_nvml(lib)[2][0]["mig"]["devices"][0]
    assert mig["multiprocessors"] is None and mig["slices"] == {"gi": None, "ci": None}
    assert mig["memory_mib"] == 20480


def test_mig_device_attributes_error_fails_the_source():
    lib = StubNvml([gpu(0, mig=(1, 1), migs=["3g.20gb"], **A100)], attributes="v2",
                   errors={"nvmlDeviceGetAttributes_v2": 15})
    with pytest.raises(SourceUnavailable, match="NVML query failed: GPU is lost"):
        nv.discover_nvml(lib)


def test_pci_class_comes_from_the_reader():
    lib = StubNvml([gpu(0), gpu(1)])
    seen = []

    def pci_class(bus_id):
        seen.append(bus_id)
        return "0x030200" if bus_id.endswith("18:00.0") else None
    devices = nv.discover_nvml(lib, pci_class=pci_class)[2]
    assert [d["pci_class"] for d in devices] == ["0x030200", None]
    assert seen == ["00000000:18:00.0", "00000000:19:00.0"]


@pytest.mark.parametrize("decode", [False, True], ids=["bytes-from-older-bindings", "nvidia-ml-py-decodes"])
def test_strings_that_are_not_utf8_are_replaced_and_reported(decode):
    lib = StubNvml([gpu(0, mig=(1, 1), migs=["3g.20gb"], name=b"NVIDIA A100\xe9-SXM4-40GB",
                        memory=40960, cc=(8, 0), device_id=0x20B010DE)],
                   driver=b"535.161.08\xff", as_bytes=True, decode=decode)
    decoder = nv.TextDecoder()
    driver, dummy, devices = nv.discover_nvml(lib, decoder=decoder)
    assert driver == "535.161.08\ufffd"
    assert devices[0]["name"] == "NVIDIA A100\ufffd-SXM4-40GB"
    assert devices[0]["product"] == "NVIDIA-A100-SXM4-40GB"
    assert devices[0]["mig"]["devices"][0]["name"] == "NVIDIA A100\ufffd-SXM4-40GB MIG 3g.20gb"
    assert devices[0]["mig"]["devices"][0]["profile"] == "3g.20gb"
    assert decoder.warnings == [
        "NVML's driver version is not valid UTF-8 (535.161.08\\xff); the facts show each invalid byte as U+FFFD",
        "NVML's name of GPU 0 is not valid UTF-8 (NVIDIA A100\\xe9-SXM4-40GB); the facts show each invalid byte "
        "as U+FFFD",
        "NVML's name of MIG device 0 of GPU 0 is not valid UTF-8 (NVIDIA A100\\xe9-SXM4-40GB MIG 3g.20gb); the facts "
        "show each invalid byte as U+FFFD"]


def test_a_hanging_driver_is_given_up_after_the_timeout():
    release = threading.Event()
    lib = StubNvml([gpu(0)], init_blocks=release)
    before = os.fstat(2)
    started = time.monotonic()
    try:
        with pytest.raises(SourceUnavailable) as caught:
            nv.discover_nvml(lib, timeout=0.2)
        assert time.monotonic() - started < 5
        assert caught.value.timed_out is True and caught.value.expected is False
        assert str(caught.value) == ("NVML did not answer within 0.2 s (nvml_timeout): the driver or a GPU is not "
                                     "responding")
        after = os.fstat(2)
        assert (before.st_ino, before.st_dev) == (after.st_ino, after.st_dev)
    finally:
        release.set()


def test_with_a_timeout_results_and_errors_come_from_the_thread():
    assert nv.discover_nvml(StubNvml([gpu(0)]), timeout=30)[2][0]["index"] == 0
    with pytest.raises(SourceUnavailable, match="Driver Not Loaded") as caught:
        nv.discover_nvml(StubNvml([gpu(0)], init_error=9), timeout=30)
    assert caught.value.timed_out is False
