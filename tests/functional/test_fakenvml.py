"""The fake libnvidia-ml.so.1 under the real pynvml.

Each case starts a fresh Python (pynvml loads the library once per process) with
LD_LIBRARY_PATH on the built library and FAKENVML_CONFIG on a profile, runs
tests/support/fakenvml/probe.py and checks what pynvml returned.
"""
import ctypes
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import mig_profiles
from ansible_collections.kubegpu.nvidia.plugins.module_utils.mig_plan import gpu_instance_profile_name
from fakenvml.profile import PROFILES, load_profile

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROBE = ROOT / "tests" / "support" / "fakenvml" / "probe.py"
NODE_IMAGE = "kubegpu-lab-node:latest"
MIB = 1024 * 1024

GPU_PROFILES = ("h100x8", "a100x4-mig", "t4x1")
LEGACY_MISSING = ("nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount",
                  "nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceGetCudaComputeCapability",
                  "nvmlDeviceGetAttributes", "nvmlDeviceGetAttributes_v2")
NEW_PROFILES = ("b200x8", "gb200x4", "h100x2-mig", "rtx6000ada-vga", "non-utf8")


@pytest.fixture(scope="session")
def libdir():
    """Build the libraries once (a no-op when they are current) and return their folder."""
    out = subprocess.run([str(ROOT / "scripts" / "build-fakenvml.sh")], check=True, capture_output=True, text=True)
    path = pathlib.Path(out.stdout.strip().splitlines()[-1])
    assert (path / "full" / "libnvidia-ml.so.1").is_file()
    assert (path / "legacy" / "libnvidia-ml.so.1").is_file()
    assert (path / "attributes-v1" / "libnvidia-ml.so.1").is_file()
    return path


def run_probe(libdir, config, flavour="full", timeout=60):
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir / flavour), FAKENVML_CONFIG=str(config))
    proc = subprocess.run([sys.executable, str(PROBE)], env=env, capture_output=True, text=True, check=True,
                          timeout=timeout)
    return json.loads(proc.stdout), proc.stderr


def error_of(value):
    assert isinstance(value, dict) and "error" in value, f"expected an NVML error, got {value!r}"
    return value["error"]


def write(tmp_path, text, name="gpus.conf"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --- profiles --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", GPU_PROFILES)
def test_profile_reports_its_gpus(libdir, name):
    profile = load_profile(name)
    got, stderr = run_probe(libdir, PROFILES / f"{name}.conf")
    assert got["init"] == "ok", stderr
    assert got["driver_version"] == profile["driver_version"]
    assert got["cuda_driver_version"] == profile["cuda_driver_version"]
    assert got["cuda_driver_version_v2"] == profile["cuda_driver_version"]
    assert got["nvml_version"] == "12." + profile["driver_version"]
    assert got["count"] == len(profile["gpus"])
    for index, (device, gpu) in enumerate(zip(got["devices"], profile["gpus"])):
        assert device["index"] == index
        assert device["name"] == gpu["name"]
        assert device["uuid"] == gpu["uuid"]
        assert device["memory"] == {"total": gpu["memory_total_mib"] * MIB, "free": gpu["memory_total_mib"] * MIB,
                                    "used": 0}
        assert device["memory_v2"]["total"] == gpu["memory_total_mib"] * MIB
        assert device["pci"]["bus_id"] == gpu["pci_bus_id"]
        assert device["pci"]["bus_id_legacy"] == gpu["pci_bus_id"][4:]
        assert device["pci"]["pci_device_id"] == gpu["pci_device_id"]
        assert device["pci"]["bus"] == int(gpu["pci_bus_id"][9:11], 16)
        assert device["compute_capability"] == gpu["compute_capability"]
        if "mig_mode" in gpu:
            assert device["mig_mode"] == [gpu["mig_mode"], gpu["mig_pending"]]
            assert device["max_mig_devices"] == gpu["max_mig_devices"]
        else:
            assert error_of(device["mig_mode"]) == "NVMLError_NotSupported"
            assert error_of(device["max_mig_devices"]) == "NVMLError_NotSupported"
    assert error_of(got["index_out_of_range"]) == "NVMLError_InvalidArgument"
    assert got["shutdown"] == "ok"
    assert error_of(got["after_shutdown"]) == "NVMLError_Uninitialized"


def test_profiles_hold_the_documented_hardware():
    """The lab profiles describe the machines the docs promise (values other tests rely on)."""
    # the H100 runs on DRA in the lab, whose driver needs 565 or newer: a 570 driver (CUDA 12.8)
    expected = {
        "h100x8": (("570.", 12080), 8, "NVIDIA H100 80GB HBM3", [9, 0], 81559, 0x233010DE, (0, 0)),
        "a100x4-mig": (("535.", 12020), 4, "NVIDIA A100-SXM4-40GB", [8, 0], 40960, 0x20B010DE, (1, 1)),
        "t4x1": (("535.", 12020), 1, "Tesla T4", [7, 5], 15360, 0x1EB810DE, None),
    }
    for name, ((branch, cuda), count, product, cc, memory, device_id, mig) in expected.items():
        profile = load_profile(name)
        assert profile["driver_version"].startswith(branch)
        assert profile["cuda_driver_version"] == cuda
        assert len(profile["gpus"]) == count
        uuids = {gpu["uuid"] for gpu in profile["gpus"]}
        assert len(uuids) == count
        for gpu in profile["gpus"]:
            assert (gpu["name"], gpu["compute_capability"], gpu["memory_total_mib"], gpu["pci_device_id"]) == (
                product, cc, memory, device_id)
            assert (None if "mig_mode" not in gpu else (gpu["mig_mode"], gpu["mig_pending"])) == mig


def test_mig_devices_of_an_enabled_gpu(libdir):
    got, _stderr = run_probe(libdir, PROFILES / "a100x4-mig.conf")
    first = got["devices"][0]
    assert [m["name"] for m in first["mig_devices"][:2]] == ["NVIDIA A100-SXM4-40GB MIG 3g.20gb"] * 2
    assert all(m["uuid"].startswith("MIG-") for m in first["mig_devices"][:2])
    assert first["mig_devices"][0]["uuid"] != first["mig_devices"][1]["uuid"]
    assert error_of(first["mig_devices"][2]) == "NVMLError_NotFound"
    # MIG enabled but no MIG device created yet
    assert error_of(got["devices"][1]["mig_devices"][0]) == "NVMLError_NotFound"


@pytest.mark.parametrize("name", NEW_PROFILES)
def test_new_profiles_report_their_gpus(libdir, name):
    """The Blackwell, MIG-with-media-extensions, VGA and non-UTF-8 profiles under the real pynvml."""
    profile = load_profile(name)
    got, stderr = run_probe(libdir, PROFILES / f"{name}.conf")
    assert got["init"] == "ok", stderr
    assert got["driver_version"] == profile["driver_version"]
    assert got["count"] == len(profile["gpus"])
    for device, gpu in zip(got["devices"], profile["gpus"]):
        if gpu["name_bytes"].isascii():
            assert device["name"] == gpu["name"]
        else:
            # nvidia-ml-py decodes the name itself and fails on bytes that are not UTF-8
            assert device["name"] == {"error": "UnicodeDecodeError",
                                      "raw": gpu["name_bytes"].decode("utf-8", "backslashreplace")}
        assert device["compute_capability"] == gpu["compute_capability"]
        assert device["memory"]["total"] == gpu["memory_total_mib"] * MIB
        # NVML answers attributes for MIG device handles only
        assert error_of(device["attributes_v2"]) == "NVMLError_NotSupported"


def test_blackwell_profiles_hold_the_documented_hardware():
    expected = {"b200x8": (8, "NVIDIA B200", [10, 0], 0x290110DE, "570."),
                "gb200x4": (4, "NVIDIA GB200", [10, 0], 0x294110DE, "570.")}
    for name, (count, product, cc, device_id, branch) in expected.items():
        profile = load_profile(name)
        assert len(profile["gpus"]) == count and profile["driver_version"].startswith(branch)
        assert {(g["name"], tuple(g["compute_capability"]), g["pci_device_id"]) for g in profile["gpus"]} == {
            (product, tuple(cc), device_id)}


# MIG device attributes the fake derives from a profile (fakenvml.c mig_attributes): A100 media engines per
# GPU instance size, copy engines = GPU slices, multiprocessors = compute slices x mig_multiprocessors_per_slice;
# the memory is the GPU instance profile's memorySizeMB on this 81559 MiB H100 (fakenvml.c shape_mib: the table's
# value scaled down and kept under the profile's eighths), as NVML gives a MIG device's memory.
ATTRIBUTES = {
    "1g.10gb+me": dict(multiprocessorCount=16, sharedCopyEngineCount=1, sharedDecoderCount=1, sharedEncoderCount=0,
                       sharedJpegCount=1, sharedOfaCount=1, gpuInstanceSliceCount=1, computeInstanceSliceCount=1,
                       memorySizeMB=10130),
    "1g.10gb": dict(multiprocessorCount=16, sharedCopyEngineCount=1, sharedDecoderCount=0, sharedEncoderCount=0,
                    sharedJpegCount=0, sharedOfaCount=0, gpuInstanceSliceCount=1, computeInstanceSliceCount=1,
                    memorySizeMB=10130),
    "2g.20gb": dict(multiprocessorCount=32, sharedCopyEngineCount=2, sharedDecoderCount=1, sharedEncoderCount=0,
                    sharedJpegCount=0, sharedOfaCount=0, gpuInstanceSliceCount=2, computeInstanceSliceCount=2,
                    memorySizeMB=20261),
    "3g.40gb": dict(multiprocessorCount=48, sharedCopyEngineCount=3, sharedDecoderCount=2, sharedEncoderCount=0,
                    sharedJpegCount=0, sharedOfaCount=0, gpuInstanceSliceCount=3, computeInstanceSliceCount=3,
                    memorySizeMB=40523),
    "7g.80gb": dict(multiprocessorCount=112, sharedCopyEngineCount=7, sharedDecoderCount=5, sharedEncoderCount=0,
                    sharedJpegCount=1, sharedOfaCount=1, gpuInstanceSliceCount=7, computeInstanceSliceCount=7,
                    memorySizeMB=81047),
}


@pytest.mark.parametrize("flavour", ["full", "attributes-v1"])
def test_mig_device_attributes(libdir, flavour):
    got, _stderr = run_probe(libdir, PROFILES / "h100x2-mig.conf", flavour=flavour)
    migs = [m for device in got["devices"] for m in device["mig_devices"] if "error" not in m]
    profiles = [m["name"].rsplit(" MIG ", 1)[1] for m in migs]
    assert profiles == ["1g.10gb+me", "1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]
    for mig, profile in zip(migs, profiles):
        assert mig["attributes_v1"] == ATTRIBUTES[profile], profile
        if flavour == "full":
            assert mig["attributes_v2"] == ATTRIBUTES[profile], profile
        else:  # a driver before R470: only the v1 symbol
            assert error_of(mig["attributes_v2"]) == "NVMLError_FunctionNotFound"
        assert mig["memory"]["total"] == ATTRIBUTES[profile]["memorySizeMB"] * MIB


def test_compute_instance_profiles_and_extensions(libdir, tmp_path):
    gpu = ("[gpu]\nname = NVIDIA A100-SXM4-40GB\nuuid = GPU-3b041641-1788-44f2-a60d-f25453fe2e85\n"
           "memory_total_mib = 40960\npci_bus_id = 00000000:01:00.0\npci_device_id = 0x20B010DE\n"
           "mig_mode = 1\nmax_mig_devices = 7\nmig_devices = 1c.3g.20gb, 2c.3g.20gb, 1g.5gb+me.all\n")
    got, stderr = run_probe(libdir, write(tmp_path, "driver_version = 535.1\ncuda_driver_version = 12020\n" + gpu))
    assert got["init"] == "ok", stderr
    migs = got["devices"][0]["mig_devices"][:3]
    assert [m["name"] for m in migs] == ["NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb", "NVIDIA A100-SXM4-40GB MIG 2c.3g.20gb",
                                         "NVIDIA A100-SXM4-40GB MIG 1g.5gb+me.all"]
    assert [(m["attributes_v2"]["gpuInstanceSliceCount"], m["attributes_v2"]["computeInstanceSliceCount"],
             m["attributes_v2"]["multiprocessorCount"]) for m in migs] == [(3, 1, 14), (3, 2, 28), (1, 1, 14)]
    # +me.all: the media engines of the whole GPU
    assert (migs[2]["attributes_v2"]["sharedDecoderCount"], migs[2]["attributes_v2"]["sharedJpegCount"]) == (5, 1)


def test_names_with_escapes_reach_pynvml_as_bytes(libdir, tmp_path):
    text = ("driver_version = 535\\x2e1\ncuda_driver_version = 12020\n[gpu]\nname = A\\\\B \\xff\n"
            "uuid = GPU-3b041641-1788-44f2-a60d-f25453fe2e85\nmemory_total_mib = 1\npci_bus_id = 00000000:01:00.0\n"
            "pci_device_id = 0x20B010DE\n")
    got, stderr = run_probe(libdir, write(tmp_path, text))
    assert got["init"] == "ok", stderr
    assert got["driver_version"] == "535.1"
    assert got["devices"][0]["name"] == {"error": "UnicodeDecodeError", "raw": "A\\B \\xff"}


def test_sysfs_views_carry_the_pci_class(tmp_path):
    from fakenvml import sysfs  # pylint: disable=import-outside-toplevel

    for name in ("h100x8", "rtx6000ada-vga", "gb200x4"):
        root = sysfs.write_profile(tmp_path, name) / "pci" / "devices"
        for gpu in load_profile(name)["gpus"]:
            domain, bus, rest = gpu["pci_bus_id"].split(":")
            entry = root / ("%04x:%s:%s" % (int(domain, 16), bus.lower(), rest.lower()))
            assert (entry / "class").read_text() == "0x%06x\n" % gpu.get("pci_class", 0x030200)
            assert (entry / "vendor").read_text() == "0x10de\n"


# --- faults ----------------------------------------------------------------------------------------------

def test_hang_fault_never_returns_from_init(libdir):
    with pytest.raises(subprocess.TimeoutExpired):
        run_probe(libdir, PROFILES / "hang.conf", timeout=3)


def test_missing_config_is_driver_not_loaded(libdir, tmp_path):
    got, _stderr = run_probe(libdir, tmp_path / "absent.conf")
    assert error_of(got["init"]) == "NVMLError_DriverNotLoaded"


def test_driver_not_loaded_profile(libdir):
    got, _stderr = run_probe(libdir, PROFILES / "driver-not-loaded.conf")
    assert error_of(got["init"]) == "NVMLError_DriverNotLoaded"


@pytest.mark.parametrize("fault, nvml_error", [
    ("no_permission", "NVMLError_NoPermission"),
    ("unknown", "NVMLError_Unknown"),
    ("driver_not_loaded", "NVMLError_DriverNotLoaded"),
])
def test_fault_fails_init(libdir, tmp_path, fault, nvml_error):
    got, _stderr = run_probe(libdir, write(tmp_path, f"fault = {fault}\n"))
    assert error_of(got["init"]) == nvml_error


def test_not_supported_profile(libdir):
    profile = load_profile("not-supported")
    got, _stderr = run_probe(libdir, PROFILES / "not-supported.conf")
    assert got["init"] == "ok"
    assert got["driver_version"] == profile["driver_version"]
    assert error_of(got["cuda_driver_version"]) == "NVMLError_NotSupported"
    assert error_of(got["cuda_driver_version_v2"]) == "NVMLError_NotSupported"
    device = got["devices"][0]
    assert device["name"] == profile["gpus"][0]["name"]
    assert device["uuid"] == profile["gpus"][0]["uuid"]
    assert device["memory"]["total"] == profile["gpus"][0]["memory_total_mib"] * MIB
    for key in ("compute_capability", "mig_mode", "max_mig_devices"):
        assert error_of(device[key]) == "NVMLError_NotSupported", key


def test_corrupt_profile_fails_with_location(libdir):
    path = PROFILES / "corrupt.conf"
    got, stderr = run_probe(libdir, path)
    assert error_of(got["init"]) == "NVMLError_Unknown"
    assert f"fakenvml: {path}:7: expected 'key = value'" in stderr


@pytest.mark.parametrize("text, line, reason", [
    ("driver_version = 535.1\ncuda_driver_version = 12020\nbogus = 1\n", 3, "unknown key 'bogus'"),
    ("driver_version = 535.1\ncuda_driver_version = 12.2\n", 2, "cuda_driver_version must be an integer"),
    ("driver_version = 535.1\ncuda_driver_version = 12020\nfault = broken\n", 3, "fault must be none"),
    ("driver_version = 535.1\ncuda_driver_version = 12020\nfault = hanging\n", 3, "unknown or hang"),
    ("driver_version = 535.1\ncuda_driver_version = 12020\nnot_supported = nvmlNoSuch\n", 3,
     "unknown function 'nvmlNoSuch'"),
    ("driver_version = 535.1\ncuda_driver_version = 12020\n[cpu]\n", 3, "unknown section"),
    ("driver_version = 535.1\ncuda_driver_version = 12020\n[gpu]\nuuid = 1234\n", 4, "uuid must look like"),
    ("driver_version = 535.1\ncuda_driver_version = 12020\n[gpu]\npci_bus_id = 0000:18:00.0\n", 4,
     "pci_bus_id must look like"),
    ("driver_version = 535.1\ncuda_driver_version = 12020\n[gpu]\ncompute_capability = nine\n", 4,
     "compute_capability must look like"),
    ("driver_version = 535.1\ncuda_driver_version = 12020\n[gpu]\nmig_mode = 2\n", 4, "mig_mode must be 0 or 1"),
    ("driver_version = 535.1\ncuda_driver_version = 12020\n[gpu]\npci_class = 0x020000\n", 4,
     "pci_class must be a display controller class"),
    ("driver_version = 535.1\ncuda_driver_version = 12020\n[gpu]\nname = A\\x00B\n", 4, "name has a bad escape"),
    ("driver_version = 535\\q\ncuda_driver_version = 12020\n", 1, "driver_version has a bad escape"),
    ("driver_version = 535.1\ncuda_driver_version = 12020\n[gpu]\nmig_multiprocessors_per_slice = 0\n", 4,
     "mig_multiprocessors_per_slice must be 1 to 64"),
    ("driver_version = 535.1\ncuda_driver_version = 12020\n[gpu]\nname = A\n"
     "uuid = GPU-3b041641-1788-44f2-a60d-f25453fe2e85\nmemory_total_mib = 1\npci_bus_id = 00000000:01:00.0\n"
     "pci_device_id = 0x20B010DE\nmig_mode = 1\nmax_mig_devices = 7\nmig_devices = 1g.5gb+xx\n", 11,
     "mig_devices entry '1g.5gb+xx' must look like"),
    ("driver_version = 535.1\ncuda_driver_version = 12020\n[gpu]\nname = A\nname = B\n", 5, "given twice"),
    ("driver_version = 535.1\ncuda_driver_version = 12020\n[gpu]\ndriver_version = 1\n", 4,
     "belongs before the first [gpu] section"),
    ("driver_version = 535.1\ncuda_driver_version = 12020\n[gpu]\nname = A\n", 3, "lacks 'uuid'"),
    ("cuda_driver_version = 12020\n", 1, "driver_version is required"),
])
def test_malformed_config_names_line_and_reason(libdir, tmp_path, text, line, reason):
    path = write(tmp_path, text)
    got, stderr = run_probe(libdir, path)
    assert error_of(got["init"]) == "NVMLError_Unknown"
    assert stderr.startswith(f"fakenvml: {path}:{line}: ")
    assert reason in stderr


def test_duplicate_uuid_is_refused(libdir, tmp_path):
    gpu = ("[gpu]\nname = Tesla T4\nuuid = GPU-de1b1471-320a-48ea-b7a7-88d106762832\nmemory_total_mib = 15360\n"
           "pci_bus_id = 00000000:{bus}:00.0\npci_device_id = 0x1EB810DE\n")
    path = write(tmp_path, "driver_version = 535.1\ncuda_driver_version = 12020\n" + gpu.format(bus="1E")
                 + gpu.format(bus="1F"))
    got, stderr = run_probe(libdir, path)
    assert error_of(got["init"]) == "NVMLError_Unknown"
    assert f"{path}:9: [gpu] section 1 repeats the uuid of section 0" in stderr


def test_legacy_library_lacks_new_functions(libdir):
    profile = load_profile("h100x8")
    got, _stderr = run_probe(libdir, PROFILES / "h100x8.conf", flavour="legacy")
    assert got["init"] == "ok"
    assert got["count"] == 8
    device = got["devices"][0]
    assert device["name"] == profile["gpus"][0]["name"]
    assert device["pci"]["bus_id"] == profile["gpus"][0]["pci_bus_id"]
    for key in ("compute_capability", "mig_mode", "max_mig_devices"):
        assert error_of(device[key]) == "NVMLError_FunctionNotFound", key
    assert error_of(device["mig_devices"][0]) == "NVMLError_FunctionNotFound"


def test_legacy_library_exports_no_new_symbols(libdir):
    full = ctypes.CDLL(str(libdir / "full" / "libnvidia-ml.so.1"))
    legacy = ctypes.CDLL(str(libdir / "legacy" / "libnvidia-ml.so.1"))
    for symbol in LEGACY_MISSING:
        assert hasattr(full, symbol)
        assert not hasattr(legacy, symbol)
    assert hasattr(legacy, "nvmlDeviceGetCount_v2")


def test_c_level_contract(libdir):
    """Calls pynvml never makes wrong: uninitialised use, short buffers, init reference counting."""
    script = r"""
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
count = ctypes.c_uint()
print(lib.nvmlDeviceGetCount_v2(ctypes.byref(count)))
print(lib.nvmlInit_v2(), lib.nvmlInitWithFlags(0))
handle = ctypes.c_void_p()
print(lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)))
small = ctypes.create_string_buffer(4)
print(lib.nvmlDeviceGetName(handle, small, 4))
print(lib.nvmlDeviceGetName(ctypes.c_void_p(12345), small, 4))
print(lib.nvmlShutdown(), lib.nvmlDeviceGetCount_v2(ctypes.byref(count)), count.value)
print(lib.nvmlShutdown(), lib.nvmlShutdown())
lib.nvmlErrorString.restype = ctypes.c_char_p
print(lib.nvmlErrorString(9).decode())
"""
    env = dict(os.environ, FAKENVML_CONFIG=str(PROFILES / "t4x1.conf"))
    out = subprocess.run([sys.executable, "-c", script, str(libdir / "full" / "libnvidia-ml.so.1")], env=env,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == [
        "1",          # NVML_ERROR_UNINITIALIZED before init
        "0 0",        # init twice
        "0",
        "7",          # NVML_ERROR_INSUFFICIENT_SIZE
        "2",          # NVML_ERROR_INVALID_ARGUMENT for a handle it never gave out
        "0 0 1",      # still initialised after one of two shutdowns
        "0 1",        # the second shutdown ends it; a third is UNINITIALIZED
        "Driver Not Loaded",
    ]


def test_config_is_read_again_on_next_init(libdir, tmp_path):
    """After nvmlShutdown, nvmlInit reads the file again (tests rewrite it between runs)."""
    t4 = (PROFILES / "t4x1.conf").read_text(encoding="utf-8")
    path = write(tmp_path, t4)
    script = r"""
import pathlib, sys, pynvml
pynvml.nvmlInit()
print(pynvml.nvmlDeviceGetCount())
pynvml.nvmlShutdown()
pathlib.Path(sys.argv[1]).write_text(sys.argv[2])
pynvml.nvmlInit()
print(pynvml.nvmlDeviceGetCount())
"""
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir / "full"), FAKENVML_CONFIG=str(path))
    out = subprocess.run([sys.executable, "-c", script, str(path), (PROFILES / "h100x8.conf").read_text()], env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["1", "8"]


# --- Debian's python3-pynvml 11 on the lab node image ---------------------------------------------------

def _have_node_image():
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "image", "inspect", NODE_IMAGE], capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(not _have_node_image(), reason=f"needs Docker and the {NODE_IMAGE} image (lab/image/build.sh)")
def test_debian_pynvml_on_node_image(libdir):
    """The same library under Debian's python3-pynvml 11 in the node image: one profile, one fault, legacy."""
    script = (
        "set -e; cd /probe; "
        "LD_LIBRARY_PATH=/fakenvml/full FAKENVML_CONFIG=/profiles/a100x4-mig.conf python3 probe.py > /tmp/a100.json; "
        "LD_LIBRARY_PATH=/fakenvml/full FAKENVML_CONFIG=/profiles/not-supported.conf python3 probe.py > /tmp/ns.json; "
        "LD_LIBRARY_PATH=/fakenvml/legacy FAKENVML_CONFIG=/profiles/t4x1.conf python3 probe.py > /tmp/legacy.json; "
        "LD_LIBRARY_PATH=/fakenvml/full FAKENVML_CONFIG=/profiles/h100x2-mig.conf python3 probe.py > /tmp/mig.json; "
        "LD_LIBRARY_PATH=/fakenvml/attributes-v1 FAKENVML_CONFIG=/profiles/h100x2-mig.conf python3 probe.py "
        "> /tmp/v1.json; "
        "LD_LIBRARY_PATH=/fakenvml/full FAKENVML_CONFIG=/profiles/non-utf8.conf python3 probe.py > /tmp/bad.json; "
        "python3 -c 'import json,sys; print(json.dumps([json.load(open(f)) for f in sys.argv[1:]]))' "
        "/tmp/a100.json /tmp/ns.json /tmp/legacy.json /tmp/mig.json /tmp/v1.json /tmp/bad.json"
    )
    proc = subprocess.run(
        ["docker", "run", "--rm", "--name", f"kubegpu-lab-fakenvml-test-{os.getpid()}",
         "-v", f"{libdir}:/fakenvml:ro", "-v", f"{PROFILES}:/profiles:ro", "-v", f"{PROBE.parent}:/probe:ro",
         NODE_IMAGE, "bash", "-c", script],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    a100, not_supported, legacy, mig, v1, bad = json.loads(proc.stdout)
    profile = load_profile("a100x4-mig")
    assert a100["pynvml"] is None or not a100["pynvml"].startswith("13.")
    assert a100["driver_version"] == profile["driver_version"]
    assert [d["uuid"] for d in a100["devices"]] == [g["uuid"] for g in profile["gpus"]]
    assert [d["mig_mode"] for d in a100["devices"]] == [[1, 1]] * 4
    assert a100["devices"][0]["pci"]["bus_id"] == profile["gpus"][0]["pci_bus_id"]
    assert a100["devices"][0]["compute_capability"] == [8, 0]
    assert a100["devices"][0]["memory"]["total"] == 40960 * MIB
    assert error_of(not_supported["devices"][0]["mig_mode"]) == "NVMLError_NotSupported"
    assert error_of(legacy["devices"][0]["compute_capability"]) == "NVMLError_FunctionNotFound"
    assert legacy["devices"][0]["name"] == "Tesla T4"
    # MIG device attributes through Debian's bindings: _v2, and the v1 symbol where _v2 is missing
    plus_me = mig["devices"][0]["mig_devices"][0]
    assert plus_me["name"] == "NVIDIA H100 80GB HBM3 MIG 1g.10gb+me"
    assert plus_me["attributes_v2"] == ATTRIBUTES["1g.10gb+me"]
    assert error_of(v1["devices"][0]["mig_devices"][0]["attributes_v2"]) == "NVMLError_FunctionNotFound"
    assert v1["devices"][0]["mig_devices"][0]["attributes_v1"] == ATTRIBUTES["1g.10gb+me"]
    # python3-pynvml 11 decodes names itself too, and fails on bytes that are not UTF-8
    assert bad["devices"][0]["name"] == {"error": "UnicodeDecodeError", "raw": "NVIDIA A100\\xe9-SXM4-40GB \\xff"}


# --- health signals ----------------------------------------------------------------------------------------------

HEALTH_PROFILES = ("h100x8", "t4x1", "a100x4-mig", "h100x8-faults")
NOT_SUPPORTED = {"error": "NVMLError_NotSupported", "message": "Not Supported"}
_RECOVERY = {"none": 0, "gpu_reset": 1, "node_reboot": 2, "drain_p2p": 3, "drain_and_reset": 4}
_FABRIC_STATES = {"not_started": 1, "in_progress": 2, "completed": 3}
_FABRIC_HEALTH = {"healthy": 1, "unhealthy": 2, "limited": 3}


def expected_health(gpu):
    """What probe.health() should read for a profile's [gpu] section (fakenvml.c's defaults filled in)."""
    remaps = gpu["remaps_rows"] and not (gpu.get("mig_mode") == 1 and gpu.get("mig_devices"))
    retired = not gpu["remaps_rows"]
    pages = [[((cause + 1) << 32) | ((i + 1) << 12) for i in range(gpu["retired_pages_" + name])]
             for cause, name in enumerate(("sbe", "dbe"))]
    fabric = gpu["fabric_state"]
    return {
        "ecc": {"%s_%s" % (counter, kind): gpu["ecc_%s_%s" % (counter, kind)]
                for kind in ("uncorrected", "corrected") for counter in ("volatile", "aggregate")},
        "remapped_rows": [gpu["remapped_rows_corrected"], gpu["remapped_rows_uncorrected"], gpu["remap_pending"],
                          gpu["remap_failure"]] if remaps else NOT_SUPPORTED,
        "retired_pages": pages if retired else [NOT_SUPPORTED, NOT_SUPPORTED],
        "retired_pages_v2": [[{"address": a, "timestamp": 1700000000 + i} for i, a in enumerate(cause)]
                             for cause in pages] if retired else [NOT_SUPPORTED, NOT_SUPPORTED],
        "retired_pages_pending": gpu["retired_pages_pending"] if retired else NOT_SUPPORTED,
        "clocks_event_reasons": gpu["clocks_event_reasons"],
        "clocks_throttle_reasons": gpu["clocks_event_reasons"],
        "pcie": {"CurrPcieLinkGeneration": gpu["pcie_link_gen"], "MaxPcieLinkGeneration": gpu["pcie_link_gen_max"],
                 "CurrPcieLinkWidth": gpu["pcie_link_width"], "MaxPcieLinkWidth": gpu["pcie_link_width_max"],
                 "PcieReplayCounter": gpu["pcie_replay_counter"]},
        "temperature": gpu["temperature"],
        "temperature_slowdown": gpu["temperature_slowdown"],
        "temperature_shutdown": gpu["temperature_slowdown"] + 5,
        "fabric": {"state": _FABRIC_STATES[fabric], "status": 0, "health_mask": gpu["fabric_health_mask"],
                   "health_summary": _FABRIC_HEALTH[gpu["fabric_health"]]} if fabric else NOT_SUPPORTED,
        "recovery_action": {"return": 0, "value": _RECOVERY[gpu["recovery_action"]]}
        if gpu["recovery_action"] != "not_supported" else {"return": 3, "value": 0},
    }


@pytest.mark.parametrize("name", HEALTH_PROFILES)
def test_health_signals_match_the_profile(libdir, name):
    """Every health call answers per GPU from the profile; healthy where the profile says nothing."""
    profile = load_profile(name)
    got, stderr = run_probe(libdir, PROFILES / f"{name}.conf")
    assert got["init"] == "ok", stderr
    for index, (device, gpu) in enumerate(zip(got["devices"], profile["gpus"])):
        if gpu["gpu_state"] == "lost":
            assert device == {"error": "NVMLError_GpuIsLost", "message": "GPU is lost"}, index
            continue
        assert device["health"] == expected_health(gpu), index


def test_healthy_by_default(libdir):
    """The profiles written before the health keys read as healthy GPUs (no error, no slowdown, full link)."""
    got, _stderr = run_probe(libdir, PROFILES / "h100x8.conf")
    for device in got["devices"]:
        health = device["health"]
        assert set(health["ecc"].values()) == {0}
        assert health["remapped_rows"] == [0, 0, 0, 0]
        assert health["retired_pages"] == [NOT_SUPPORTED, NOT_SUPPORTED]  # Hopper remaps rows
        assert health["clocks_event_reasons"] == 0
        assert health["pcie"]["CurrPcieLinkWidth"] == health["pcie"]["MaxPcieLinkWidth"] == 16
        assert health["pcie"]["CurrPcieLinkGeneration"] == health["pcie"]["MaxPcieLinkGeneration"] == 5
        assert health["temperature"] < health["temperature_slowdown"]
        assert health["fabric"] == NOT_SUPPORTED  # no NVSwitch in the profile
        assert health["recovery_action"] == {"return": 0, "value": 0}
    t4 = run_probe(libdir, PROFILES / "t4x1.conf")[0]["devices"][0]["health"]
    assert t4["remapped_rows"] == NOT_SUPPORTED  # Turing retires pages instead
    assert t4["retired_pages"] == [[], []] and t4["retired_pages_pending"] == 0
    assert t4["pcie"]["MaxPcieLinkGeneration"] == 3


def test_fault_profile_has_one_fault_per_gpu():
    gpus = load_profile("h100x8-faults")["gpus"]
    assert len(gpus) == 8
    assert gpus[1]["ecc_volatile_uncorrected"] > 0
    assert gpus[2]["remap_pending"] == 1 and gpus[3]["remap_failure"] == 1
    assert gpus[4]["gpu_state"] == "lost"
    assert gpus[5]["pcie_link_width"] < gpus[5]["pcie_link_width_max"]
    assert gpus[6]["clocks_event_reasons"] & 0x40 and gpus[6]["temperature"] >= gpus[6]["temperature_slowdown"]
    assert gpus[7]["fabric_state"] == "in_progress"


GPU_HEADER = ("driver_version = 570.86.15\ncuda_driver_version = 12080\n[gpu]\nname = NVIDIA A100-SXM4-40GB\n"
              "uuid = GPU-3b041641-1788-44f2-a60d-f25453fe2e85\nmemory_total_mib = 40960\n"
              "pci_bus_id = 00000000:07:00.0\npci_device_id = 0x20B010DE\ncompute_capability = 8.0\n")


def test_reset_required_answers_only_the_health_queries(libdir, tmp_path):
    got, _stderr = run_probe(libdir, write(tmp_path, GPU_HEADER + "gpu_state = reset_required\n"))
    device = got["devices"][0]
    assert device["name"] == "NVIDIA A100-SXM4-40GB"
    assert device["pci"]["bus_id"] == "00000000:07:00.0"
    health = device["health"]
    assert error_of(health["ecc"]["volatile_uncorrected"]) == "NVMLError_ResetRequired"
    assert error_of(health["remapped_rows"]) == "NVMLError_ResetRequired"
    assert error_of(health["temperature"]) == "NVMLError_ResetRequired"
    assert error_of(health["recovery_action"]) == "NVMLError_ResetRequired"


def test_per_gpu_not_supported_recovery_and_fabric_health(libdir, tmp_path):
    text = GPU_HEADER + ("not_supported = nvmlDeviceGetPcieReplayCounter, nvmlDeviceGetTotalEccErrors\n"
                         "recovery_action = drain_and_reset\nfabric_state = completed\nfabric_health = limited\n"
                         "fabric_health_mask = 0x10\n"
                         "[gpu]\nname = NVIDIA A100-SXM4-40GB\nuuid = GPU-3b041641-1788-44f2-a60d-f25453fe2e86\n"
                         "memory_total_mib = 40960\npci_bus_id = 00000000:08:00.0\npci_device_id = 0x20B010DE\n"
                         "compute_capability = 8.0\nrecovery_action = not_supported\n")
    got, stderr = run_probe(libdir, write(tmp_path, text))
    first, second = (device["health"] for device in got["devices"])
    assert error_of(first["pcie"]["PcieReplayCounter"]) == "NVMLError_NotSupported", stderr
    assert error_of(first["ecc"]["volatile_uncorrected"]) == "NVMLError_NotSupported"
    assert first["recovery_action"] == {"return": 0, "value": 4}
    assert first["fabric"] == {"state": 3, "status": 0, "health_mask": 0x10, "health_summary": 3}
    assert first["pcie"]["MaxPcieLinkGeneration"] == 4  # Ampere: Gen4
    # the second GPU keeps what the first one's section said about itself
    assert second["pcie"]["PcieReplayCounter"] == 0 and second["ecc"]["volatile_uncorrected"] == 0
    assert second["recovery_action"] == {"return": 3, "value": 0}


def test_remapped_rows_not_supported_while_mig_devices_exist(libdir):
    got, _stderr = run_probe(libdir, PROFILES / "a100x4-mig.conf")
    profile = load_profile("a100x4-mig")
    for device, gpu in zip(got["devices"], profile["gpus"]):
        with_instances = gpu.get("mig_mode") == 1 and gpu.get("mig_devices")
        assert (device["health"]["remapped_rows"] == NOT_SUPPORTED) == bool(with_instances)


@pytest.mark.parametrize("key_value, reason", [
    ("gpu_state = gone", "gpu_state must be ok, lost or reset_required"),
    ("ecc_volatile_uncorrected = -1", "ecc_volatile_uncorrected must be a number from 0"),
    ("remap_pending = 2", "remap_pending must be a number from 0 to 1"),
    ("pcie_link_width = 64", "pcie_link_width must be a number from 0 to 32"),
    ("pcie_link_width = 8\npcie_link_width_max = 4", "has a PCIe link above its maximum"),
    ("clocks_event_reasons = 72", "clocks_event_reasons must be a hexadecimal mask"),
    ("fabric_state = done", "fabric_state must be not_started, in_progress or completed"),
    ("fabric_health = limited", "sets fabric_health without fabric_state"),
    ("fabric_health_mask = 0x10", "sets fabric_health without fabric_state"),
    ("fabric_health_mask = 16", "fabric_health_mask must be a hexadecimal mask"),
    ("recovery_action = pray", "recovery_action must be none, gpu_reset"),
    ("not_supported = nvmlDeviceGetNothing", "unknown function 'nvmlDeviceGetNothing'"),
    ("temperature = 40\ntemperature = 41", "given twice"),
])
def test_malformed_health_keys(libdir, tmp_path, key_value, reason):
    path = write(tmp_path, GPU_HEADER + key_value + "\n")
    got, stderr = run_probe(libdir, path)
    assert error_of(got["init"]) == "NVMLError_Unknown"
    assert stderr.startswith(f"fakenvml: {path}:")
    assert reason in stderr


def test_health_c_level_contract(libdir, tmp_path):
    """Buffer sizing of nvmlDeviceGetRetiredPages and the fabric info struct versions, called as NVML's users do."""
    script = r"""
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
print(lib.nvmlInit_v2())
handle = ctypes.c_void_p()
lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle))
count = ctypes.c_uint(0)
print(lib.nvmlDeviceGetRetiredPages(handle, 1, ctypes.byref(count), None), count.value)
pages = (ctypes.c_ulonglong * 2)()
count.value = 2
print(lib.nvmlDeviceGetRetiredPages(handle, 1, ctypes.byref(count), pages), count.value)
count.value = 3
pages = (ctypes.c_ulonglong * 3)()
print(lib.nvmlDeviceGetRetiredPages(handle, 1, ctypes.byref(count), pages), count.value, hex(pages[2]))
print(lib.nvmlDeviceGetRetiredPages(handle, 2, ctypes.byref(count), pages))
info = (ctypes.c_uint * 10)()
info[0] = 0x01000020
print(lib.nvmlDeviceGetGpuFabricInfoV(handle, info))
print(lib.nvmlDeviceGetTemperature(handle, 1, ctypes.byref(count)))
print(lib.nvmlShutdown(), lib.nvmlDeviceGetRetiredPages(handle, 1, ctypes.byref(count), pages))
"""
    text = GPU_HEADER.replace("compute_capability = 8.0", "compute_capability = 7.0") + "retired_pages_dbe = 3\n"
    env = dict(os.environ, FAKENVML_CONFIG=str(write(tmp_path, text)))
    out = subprocess.run([sys.executable, "-c", script, str(libdir / "full" / "libnvidia-ml.so.1")], env=env,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == [
        "0",
        "7 3",             # NVML_ERROR_INSUFFICIENT_SIZE with the count needed
        "7 3",             # still too small
        "0 3 0x200003000",  # cause 1 (double-bit), third page
        "2",               # NVML_ERROR_INVALID_ARGUMENT: no such cause
        "25",              # NVML_ERROR_ARGUMENT_VERSION_MISMATCH for a struct version it does not know
        "2",               # only the GPU sensor exists
        "0 1",             # NVML_ERROR_UNINITIALIZED after shutdown
    ]


# --- MIG management and the MIG state ---------------------------------------------------------------------
# NVML's MIG calls as the real pynvml (nvidia-ml-py 13) makes them, against the profile tables of
# tests/support/mig_profiles.py (REFERENCE 8.1); the state is kept in $FAKENVML_STATE across processes.

NVIDIA_SMI = ROOT / "tests" / "support" / "fakenvml" / "nvidia-smi"
MIG_HELPERS = r"""
import json, sys
import pynvml as n
def err(f, *a):
    try:
        r = f(*a)
        return r if isinstance(r, (int, list, str, type(None))) else "ok"
    except n.NVMLError as e:
        return type(e).__name__
def placement(start, size):
    p = n.c_nvmlGpuInstancePlacement_t(); p.start = start; p.size = size
    return n.byref(p)
def instances(h):
    out = []
    for c in range(n.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = n.nvmlDeviceGetGpuInstanceProfileInfo(h, c)
        except n.NVMLError:
            continue
        arr = (n.c_nvmlGpuInstance_t * 8)(); cnt = n.c_uint(8)
        n.nvmlDeviceGetGpuInstances(h, info.id, arr, n.byref(cnt))
        for i in range(cnt.value):
            gi = n.nvmlGpuInstanceGetInfo(arr[i])
            cis = []
            for p in range(n.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
                carr = (n.c_nvmlComputeInstance_t * 8)(); ccnt = n.c_uint(8)
                n.nvmlGpuInstanceGetComputeInstances(arr[i], p, carr, n.byref(ccnt))
                cis += [n.nvmlComputeInstanceGetInfo(carr[k]).id for k in range(ccnt.value)]
            out.append([gi.id, gi.profileId, gi.placement.start, gi.placement.size, cis])
    return sorted(out)
def migs(h):
    names = []
    for i in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):
        try:
            names.append(n.nvmlDeviceGetName(n.nvmlDeviceGetMigDeviceHandleByIndex(h, i)))
        except n.NVMLError:
            break
    return names
n.nvmlInit()
out = {}
"""


def run_mig(libdir, config, code, state=None):
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir / "full"), FAKENVML_CONFIG=str(config))
    env.pop("FAKENVML_STATE", None)
    if state is not None:
        env["FAKENVML_STATE"] = str(state)
    proc = subprocess.run([sys.executable, "-c", MIG_HELPERS + code + "\nprint(json.dumps(out))"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def mig_gpu_profile(model, mig_mode=1, extra="", memory=None, index=0):
    spec = mig_profiles.MODELS[model]
    cc = "9.0" if model.startswith("H") else "8.0"
    return ("[gpu]\nname = %s\nuuid = GPU-00000000-0000-4000-8000-%012d\nmemory_total_mib = %d\n"
            "pci_bus_id = 00000000:%02X:00.0\npci_device_id = 0x%08X\ncompute_capability = %s\nmig_mode = %d\n"
            "max_mig_devices = 7\n%s" % (spec["name"], index, memory or spec["memory_mib"], 0x10 + index,
                                         spec["pci_device_id"], cc, mig_mode, extra))


def mig_config(tmp_path, *gpus):
    return write(tmp_path, "driver_version = 535.161.08\ncuda_driver_version = 12020\n" + "".join(gpus))


def state_writes(state):
    if not state.exists():
        return 0
    line = [x for x in state.read_text().splitlines() if x.startswith("writes = ")][0]
    return int(line.split("=")[1])


@pytest.mark.parametrize("model, memory", [("A100-40GB", None), ("A100-80GB", None), ("H100-80GB", None),
                                           ("H100-80GB", 81559), ("H200", None), ("H200", 143771)])
def test_profile_info_and_placements_per_model(libdir, tmp_path, model, memory):
    """Profile info ids, slices, instance counts and placements as mig_profiles.py (REFERENCE 8.1); the memory
    names each profile as go-nvlib does (mig_plan.gpu_instance_profile_name), on the fixtures' memory and on
    the real parts' (81559 MiB H100, 143771 MiB H200)."""
    config = mig_config(tmp_path, mig_gpu_profile(model, memory=memory))
    got = run_mig(libdir, config, r"""
h = n.nvmlDeviceGetHandleByIndex(0)
total = n.nvmlDeviceGetMemoryInfo(h).total
for c in range(n.NVML_GPU_INSTANCE_PROFILE_COUNT + 1):
    try:
        info = n.nvmlDeviceGetGpuInstanceProfileInfo(h, c)
    except n.NVMLError as e:
        out[c] = type(e).__name__
        continue
    arr = (n.c_nvmlGpuInstancePlacement_t * 8)(); cnt = n.c_uint(8)
    n.nvmlDeviceGetGpuInstancePossiblePlacements(h, info.id, arr, n.byref(cnt))
    v1 = n.nvmlDeviceGetGpuInstanceProfileInfo(h, c, version=1)
    out[c] = [info.id, info.sliceCount, info.instanceCount, info.memorySizeMB, total, v1.id, v1.memorySizeMB,
              [[arr[i].start, arr[i].size] for i in range(cnt.value)],
              n.nvmlDeviceGetGpuInstanceRemainingCapacity(h, info.id)]
""")
    table = mig_profiles.MODELS[model]["profiles"]
    seen = {}
    for constant, value in got.items():
        if isinstance(value, str):
            continue
        pid, slices, instances, mib, total, v1_id, v1_mib, placements, remaining = value
        name = gpu_instance_profile_name(int(constant), slices, mib, total)
        assert name in table, (constant, name)
        want = table[name]
        assert (pid, slices, instances, remaining) == (want["id"], want["slices"], want["instances"], want["instances"])
        assert [tuple(p) for p in placements] == want["placements"]
        assert (v1_id, v1_mib) == (pid, mib)
        assert mib <= want["memory_mib"]
        if memory is None and model.startswith("A100"):
            assert mib == want["memory_mib"]
        seen[name] = constant
    assert sorted(seen) == sorted(table)
    # constants the GPU has no profile for answer NOT_SUPPORTED; one past the last, INVALID_ARGUMENT
    assert got[str(0x12)] == "NVMLError_InvalidArgument"
    assert {got[str(c)] for c in (5, 6, 8, 10, 11, 12, 13, 14, 15, 16, 17)} == {"NVMLError_NotSupported"}


def test_profile_info_needs_mig_enabled_and_a_known_model(libdir, tmp_path):
    """NVML answers profile info only while MIG is on (mig_plan's reader contract); a model without a table
    (B200 here) and a GPU without MIG answer NOT_SUPPORTED."""
    b200 = (PROFILES / "b200x8.conf").read_text().split("[gpu]")[1].replace("mig_mode = 0", "mig_mode = 1")
    b200 = b200.replace("mig_pending = 0", "mig_pending = 1").replace("00000000:", "00000001:")
    config = mig_config(tmp_path, mig_gpu_profile("A100-40GB", mig_mode=0), "[gpu]" + b200)
    got = run_mig(libdir, config, r"""
for i in range(2):
    h = n.nvmlDeviceGetHandleByIndex(i)
    out[i] = [err(n.nvmlDeviceGetGpuInstanceProfileInfo, h, 0), err(n.nvmlDeviceCreateGpuInstance, h, 19)]
""")
    assert got == {"0": ["NVMLError_NotSupported"] * 2, "1": ["NVMLError_NotSupported"] * 2}


def test_instances_persist_across_processes_and_make_the_mig_devices(libdir, tmp_path):
    """Create at explicit placements in one process; the next sees the instances, and its MIG devices follow them
    (names as nvidia_gpu_facts reads them); overlaps and placements NVML does not offer are refused."""
    config = mig_config(tmp_path, mig_gpu_profile("A100-40GB"))
    state = tmp_path / "mig.state"
    got = run_mig(libdir, config, r"""
h = n.nvmlDeviceGetHandleByIndex(0)
gi = n.nvmlDeviceCreateGpuInstanceWithPlacement(h, 9, placement(4, 4))
out["overlap"] = err(n.nvmlDeviceCreateGpuInstanceWithPlacement, h, 14, placement(4, 2))
out["not offered"] = err(n.nvmlDeviceCreateGpuInstanceWithPlacement, h, 14, placement(1, 2))
out["unknown profile"] = err(n.nvmlDeviceCreateGpuInstance, h, 77)
ci_info = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, n.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, 0)
out["ci profile"] = [ci_info.id, ci_info.sliceCount, ci_info.instanceCount]
out["ci too big"] = err(n.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, n.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE, 0)
n.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
out["ci full"] = err(n.nvmlGpuInstanceCreateComputeInstance, gi, n.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE)
gi2 = n.nvmlDeviceCreateGpuInstanceWithPlacement(h, 19, placement(0, 1))
n.nvmlGpuInstanceCreateComputeInstance(gi2, 0)
out["remaining 3g"] = n.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 9)
out["remaining 1g"] = n.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19)
""", state)
    assert got == {"overlap": "NVMLError_InsufficientResources", "not offered": "NVMLError_InvalidArgument",
                   "unknown profile": "NVMLError_InvalidArgument", "ci profile": [2, 3, 1],
                   "ci too big": "NVMLError_NotSupported", "ci full": "NVMLError_InsufficientResources",
                   "remaining 3g": 0, "remaining 1g": 3}
    writes = state_writes(state)
    assert writes == 4  # two GPU instances, two compute instances
    again = run_mig(libdir, config, r"""
h = n.nvmlDeviceGetHandleByIndex(0)
out["instances"] = instances(h)
out["migs"] = migs(h)
out["by id"] = n.nvmlGpuInstanceGetInfo(n.nvmlDeviceGetGpuInstanceById(h, 2)).profileId
""", state)
    assert again == {"instances": [[1, 9, 4, 4, [0]], [2, 19, 0, 1, [0]]],
                     "migs": ["NVIDIA A100-SXM4-40GB MIG 3g.20gb", "NVIDIA A100-SXM4-40GB MIG 1g.5gb"], "by id": 19}
    assert state_writes(state) == writes  # reading writes nothing


def test_destroy_order_and_the_seed(libdir, tmp_path):
    """The profile's mig_devices seed the state; a GPU instance with compute instances is IN_USE; destroying
    compute instances then GPU instances empties the GPU; MIG can then be disabled (IN_USE before)."""
    config = mig_config(tmp_path, mig_gpu_profile("H100-80GB", memory=81559,
                                                  extra="mig_devices = 1g.10gb+me, 1c.2g.20gb, 3g.40gb\n"))
    state = tmp_path / "mig.state"
    got = run_mig(libdir, config, r"""
h = n.nvmlDeviceGetHandleByIndex(0)
out["seed"] = instances(h)
out["migs"] = migs(h)
out["disable first"] = err(n.nvmlDeviceSetMigMode, h, 0)
arr = (n.c_nvmlGpuInstance_t * 8)(); cnt = n.c_uint(8)
n.nvmlDeviceGetGpuInstances(h, 9, arr, n.byref(cnt))
gi = arr[0]
out["gi in use"] = err(n.nvmlGpuInstanceDestroy, gi)
carr = (n.c_nvmlComputeInstance_t * 8)(); ccnt = n.c_uint(8)
n.nvmlGpuInstanceGetComputeInstances(gi, n.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, carr, n.byref(ccnt))
n.nvmlComputeInstanceDestroy(carr[0])
out["ci gone"] = err(n.nvmlComputeInstanceDestroy, carr[0])
n.nvmlGpuInstanceDestroy(gi)
out["after"] = instances(h)
""", state)
    assert got["seed"] == [[1, 20, 0, 1, [0]], [2, 14, 2, 2, [0]], [3, 9, 4, 4, [0]]]
    assert got["migs"] == ["NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", "NVIDIA H100 80GB HBM3 MIG 1c.2g.20gb",
                           "NVIDIA H100 80GB HBM3 MIG 3g.40gb"]
    assert got["disable first"] == "NVMLError_InUse"
    assert got["gi in use"] == "NVMLError_InUse"
    assert got["ci gone"] == "NVMLError_InvalidArgument"
    assert got["after"] == [[1, 20, 0, 1, [0]], [2, 14, 2, 2, [0]]]


def smi(config, state, *args):
    env = dict(os.environ, FAKENVML_CONFIG=str(config), FAKENVML_STATE=str(state))
    return subprocess.run([str(NVIDIA_SMI)] + list(args), env=env, capture_output=True, text=True, check=False,
                          timeout=60)


MODE_CODE = r"""
out["set"] = []
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    out["set"].append(err(n.nvmlDeviceSetMigMode, h, 1))
    out.setdefault("mode", []).append(n.nvmlDeviceGetMigMode(h))
"""


def test_set_mig_mode_ampere_pending_until_reset_hopper_at_once(libdir, tmp_path):
    """Ampere: the mode is pending (activation status RESET_REQUIRED) until nvidia-smi -r; Hopper: at once;
    a GPU a process holds: activation status IN_USE. The reset stand-in resets only the GPU asked for."""
    config = mig_config(tmp_path, mig_gpu_profile("A100-40GB", mig_mode=0, index=0),
                        mig_gpu_profile("H100-80GB", mig_mode=0, index=1),
                        mig_gpu_profile("A100-40GB", mig_mode=0, index=2, extra="processes = 4242:python3\n"),
                        mig_gpu_profile("A100-40GB", mig_mode=0, index=3))
    state = tmp_path / "mig.state"
    got = run_mig(libdir, config, MODE_CODE.replace("range(n.nvmlDeviceGetCount())", "range(3)") + r"""
h = n.nvmlDeviceGetHandleByIndex(2)
procs = n.nvmlDeviceGetComputeRunningProcesses(h)
out["procs"] = [[p.pid, n.nvmlSystemGetProcessName(p.pid)] for p in procs]
out["idle"] = n.nvmlDeviceGetComputeRunningProcesses(n.nvmlDeviceGetHandleByIndex(0))
""", state)
    assert got["set"] == [16, 0, 19]  # RESET_REQUIRED, SUCCESS, IN_USE
    assert got["mode"] == [[0, 1], [1, 1], [0, 1]]
    assert got["procs"] == [[4242, "python3"]] and got["idle"] == []
    writes = state_writes(state)
    reset = smi(config, state, "-r", "-i", "0")
    assert reset.returncode == 0, reset.stderr
    assert reset.stdout.splitlines() == ["GPU 00000000:10:00.0 was successfully reset.", "All done."]
    busy = smi(config, state, "-r", "-i", "2")
    assert busy.returncode == 1
    assert busy.stdout.startswith("GPU 00000000:12:00.0 is currently in use by another process.")
    got = run_mig(libdir, config, r"""
out["mode"] = [n.nvmlDeviceGetMigMode(n.nvmlDeviceGetHandleByIndex(i)) for i in range(4)]
""", state)
    assert got["mode"] == [[1, 1], [1, 1], [0, 1], [0, 0]]
    assert state_writes(state) == writes + 1


def test_passthrough_gpu_refuses_the_reset(libdir, tmp_path):
    config = mig_config(tmp_path, mig_gpu_profile("A100-40GB", mig_mode=0, extra="mig_passthrough = 1\n"))
    state = tmp_path / "mig.state"
    got = run_mig(libdir, config, MODE_CODE, state)
    assert got == {"set": [16], "mode": [[0, 1]]}
    reset = smi(config, state, "-r")
    assert reset.returncode == 3
    assert reset.stdout.strip() == "Resetting GPU 00000000:10:00.0 is not supported."
    assert run_mig(libdir, config, MODE_CODE, state)["mode"] == [[0, 1]]
    assert smi(config, state, "-q").returncode == 2


def test_same_mode_and_reads_write_nothing(libdir, tmp_path):
    """Setting the mode a GPU already has, and every read, leave the state file unwritten."""
    config = mig_config(tmp_path, mig_gpu_profile("H200"))
    state = tmp_path / "mig.state"
    got = run_mig(libdir, config, MODE_CODE + "out['instances'] = instances(n.nvmlDeviceGetHandleByIndex(0))", state)
    assert got == {"set": [0], "mode": [[1, 1]], "instances": []}
    assert not state.exists()


def test_creation_fails_half_way_when_the_profile_says_so(libdir, tmp_path):
    """mig_fail_create_after = 2: the third GPU instance fails with a driver error (NVML_ERROR_UNKNOWN)."""
    config = mig_config(tmp_path, mig_gpu_profile("A100-40GB", extra="mig_fail_create_after = 2\n"))
    got = run_mig(libdir, config, r"""
h = n.nvmlDeviceGetHandleByIndex(0)
out["create"] = [err(n.nvmlDeviceCreateGpuInstanceWithPlacement, h, 19, placement(s, 1)) for s in range(3)]
""", tmp_path / "mig.state")
    assert got == {"create": ["ok", "ok", "NVMLError_Unknown"]}


@pytest.mark.parametrize("line, reason", [
    ("processes = python3", "processes must be up to 4 entries like 4242:python3"),
    ("mig_passthrough = 2", "mig_passthrough must be 0 or 1"),
    ("mig_fail_create_after = 9", "mig_fail_create_after must be 0 to 7"),
])
def test_malformed_mig_keys(libdir, tmp_path, line, reason):
    got, stderr = run_probe(libdir, mig_config(tmp_path, mig_gpu_profile("A100-40GB", extra=line + "\n")))
    assert error_of(got["init"]) == "NVMLError_Unknown"
    assert reason in stderr


def test_state_of_another_profile_is_refused(libdir, tmp_path):
    config = mig_config(tmp_path, mig_gpu_profile("A100-40GB"))
    state = write(tmp_path, "writes = 1\nmode = 0 GPU-not-this-one 1 1\n", "mig.state")
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir / "full"), FAKENVML_CONFIG=str(config),
               FAKENVML_STATE=str(state))
    proc = subprocess.run([sys.executable, str(PROBE)], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert error_of(json.loads(proc.stdout)["init"]) == "NVMLError_Unknown"
    assert "mig.state:2: not a MIG state line" in proc.stderr


def test_probe_reports_instances_and_processes(libdir, tmp_path):
    """probe.py shows what the MIG state holds: a100x4-mig's GPU 0 seeded with two 3g.20gb (placements 0 and 4)."""
    got, _stderr = run_probe(libdir, PROFILES / "a100x4-mig.conf")
    assert got["devices"][0]["gpu_instances"] == [[1, 9, 0, 4, [0]], [2, 9, 4, 4, [0]]]
    assert [d["gpu_instances"] for d in got["devices"][1:]] == [[], [], []]
    assert got["devices"][0]["processes"] == []
    config = mig_config(tmp_path, mig_gpu_profile("H100-80GB", mig_mode=0, extra="processes = 7:python3\n"))
    got, _stderr = run_probe(libdir, config)
    assert got["devices"][0]["gpu_instances"] == []
    assert got["devices"][0]["processes"] == [[7, "python3"]]


def test_mig_c_level_contract(libdir, tmp_path):
    """What pynvml never gets wrong but a C caller may: handles the library never gave out, NULL outputs,
    versioned structs with the wrong version, calls before nvmlInit."""
    script = r"""
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
out = ctypes.c_void_p()
print(lib.nvmlGpuInstanceDestroy(ctypes.c_void_p(12345)))
print(lib.nvmlInit_v2())
handle = ctypes.c_void_p()
lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle))
print(lib.nvmlGpuInstanceDestroy(ctypes.c_void_p(12345)), lib.nvmlComputeInstanceDestroy(ctypes.c_void_p(8)))
print(lib.nvmlDeviceCreateGpuInstance(handle, 19, None), lib.nvmlDeviceCreateGpuInstanceWithPlacement(handle, 19, None,
      ctypes.byref(out)))
info = (ctypes.c_uint * 64)()
info[0] = 0x01000098
print(lib.nvmlDeviceGetGpuInstanceProfileInfoV(handle, 0, info))
status = ctypes.c_uint(99)
print(lib.nvmlDeviceSetMigMode(handle, 2, ctypes.byref(status)), lib.nvmlDeviceSetMigMode(handle, 1, None))
count = ctypes.c_uint(0)
print(lib.nvmlDeviceGetGpuInstancePossiblePlacements_v2(handle, 9, None, ctypes.byref(count)), count.value)
print(lib.nvmlDeviceGetGpuInstancePossiblePlacements_v2(handle, 19, (ctypes.c_uint * 2)(), ctypes.byref(count)),
      count.value)
"""
    config = mig_config(tmp_path, mig_gpu_profile("A100-40GB"))
    env = dict(os.environ, FAKENVML_CONFIG=str(config))
    env.pop("FAKENVML_STATE", None)
    out = subprocess.run([sys.executable, "-c", script, str(libdir / "full" / "libnvidia-ml.so.1")], env=env,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == [
        "1",      # NVML_ERROR_UNINITIALIZED
        "0",
        "2 2",    # INVALID_ARGUMENT for GPU and compute instance handles it never gave out
        "2 2",    # NULL output, NULL placement
        "25",     # ARGUMENT_VERSION_MISMATCH
        "2 2",    # mode 2, NULL activation status
        "0 2",    # the 3g profile's two placements, counted with a NULL array
        "7 7",    # INSUFFICIENT_SIZE with the count needed
    ]
