r"""Read a fake NVML profile (tests/support/fakenvml/profiles/*.conf) into plain Python.

Tests use it to know what a node should report without repeating the profile's values:

    from fakenvml.profile import load_profile, PROFILES
    profile = load_profile(PROFILES / "h100x8.conf")
    profile["gpus"][0]["name"]  # 'NVIDIA H100 80GB HBM3'

It reads well-formed profiles only; the library itself is the judge of malformed ones.
``name`` and ``driver_version`` come back as NVML's bindings would decode them with replacement
(``\xHH`` escapes that are not UTF-8 become U+FFFD); ``name_bytes`` keeps the raw bytes.
"""
import pathlib
import re

PROFILES = pathlib.Path(__file__).resolve().parent / "profiles"

# health signals of a [gpu] section and their values when the profile does not set them (fakenvml.c)
HEALTH_DEFAULTS = {
    "gpu_state": "ok",
    "ecc_volatile_uncorrected": 0, "ecc_aggregate_uncorrected": 0,
    "ecc_volatile_corrected": 0, "ecc_aggregate_corrected": 0,
    "remapped_rows_corrected": 0, "remapped_rows_uncorrected": 0, "remap_pending": 0, "remap_failure": 0,
    "retired_pages_sbe": 0, "retired_pages_dbe": 0, "retired_pages_pending": 0,
    "clocks_event_reasons": 0,
    "pcie_link_width_max": 16, "pcie_replay_counter": 0,
    "temperature": 40, "temperature_slowdown": 90,
    "fabric_state": None, "fabric_health": "healthy", "fabric_health_mask": 0, "recovery_action": "none",
}
_HEALTH_INT_KEYS = tuple(key for key, value in HEALTH_DEFAULTS.items()
                         if isinstance(value, int) and key not in ("clocks_event_reasons", "fabric_health_mask")) + (
    "pcie_link_gen", "pcie_link_gen_max", "pcie_link_width")
_INT_KEYS = ("memory_total_mib", "memory_used_mib", "cuda_driver_version", "max_mig_devices", "mig_mode",
             "mig_pending", "mig_multiprocessors_per_slice", "mig_passthrough",
             "mig_fail_create_after") + _HEALTH_INT_KEYS
_HEX_KEYS = ("pci_device_id", "pci_subsystem_id", "pci_class", "clocks_event_reasons", "fabric_health_mask")
_LIST_KEYS = ("not_supported", "mig_devices", "processes")
_ESCAPED_KEYS = ("name", "driver_version")


def unescape(text):
    r"""The bytes a profile value with ``\xHH`` and ``\\`` escapes stands for (as fakenvml.c reads it)."""
    return re.sub(rb"\\(x[0-9A-Fa-f]{2}|\\)",
                  lambda m: b"\\" if m.group(1) == b"\\" else bytes([int(m.group(1)[1:], 16)]),
                  text.encode("utf-8"))


def _value(key, text):
    if key in _INT_KEYS:
        return int(text)
    if key in _HEX_KEYS:
        return int(text, 16)
    if key in _LIST_KEYS:
        return [item.strip() for item in text.split(",") if item.strip()]
    if key == "compute_capability":
        major, minor = text.split(".")
        return [int(major), int(minor)]
    if key in _ESCAPED_KEYS:
        return unescape(text).decode("utf-8", "replace")
    return text


def parse_profile(text):
    """Return {'fault': str, 'not_supported': [...], ..., 'gpus': [{...}, ...]} from profile text."""
    profile = {"fault": "none", "not_supported": [], "gpus": []}
    section = profile
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line == "[gpu]":
            section = {}
            profile["gpus"].append(section)
            continue
        key, _sep, value = line.partition("=")
        key = key.strip()
        section[key] = _value(key, value.strip())
        if key in _ESCAPED_KEYS:
            section[key + "_bytes"] = unescape(value.strip())
    for gpu in profile["gpus"]:
        if "mig_mode" in gpu:
            gpu.setdefault("mig_pending", gpu["mig_mode"])
        _health_defaults(gpu)
    return profile


def _health_defaults(gpu):
    """Fill in the health signals a [gpu] section leaves at fakenvml.c's defaults."""
    for key, value in HEALTH_DEFAULTS.items():
        gpu.setdefault(key, value)
    gpu.setdefault("not_supported", [])
    major = gpu["compute_capability"][0] if "compute_capability" in gpu else None
    gpu.setdefault("pcie_link_gen_max", 3 if major is None or major < 8 else 4 if major == 8 else 5)
    gpu.setdefault("pcie_link_gen", gpu["pcie_link_gen_max"])
    gpu.setdefault("pcie_link_width", gpu["pcie_link_width_max"])
    # row remapping from Ampere (8.0) on, page retirement before it
    gpu["remaps_rows"] = major is not None and major >= 8


def load_profile(path):
    """parse_profile() of a file; a bare name like 'h100x8' means PROFILES / 'h100x8.conf'."""
    path = pathlib.Path(path)
    if not path.suffix and not path.exists():
        path = PROFILES / (path.name + ".conf")
    return parse_profile(path.read_text(encoding="utf-8"))


def _semver(text):
    """``570.172.08`` -> ``570.172.8``: a version attribute as the DRA kubelet plugin writes it (semver, no
    leading zeros)."""
    parts = [str(int(part)) for part in re.findall(r"[0-9]+", str(text))[:3]]
    return ".".join(parts + ["0"] * (3 - len(parts)))


def simulated_gpu_devices(profile):
    """The node annotation ``kubegpu.io/simulated-gpu-devices`` for a profile (tests/support/kubeapi/dra.py):
    one object per GPU, in index order, with what the kubelet stand-in cannot read from GFD's labels (UUID,
    PCI bus id, minor number) and what the facts compare (product name, memory)."""
    cuda = profile.get("cuda_driver_version")
    devices = []
    for minor, gpu in enumerate(profile["gpus"]):
        device = {"minor": minor, "uuid": gpu["uuid"], "productName": gpu["name"],
                  "memory": "%dMi" % gpu["memory_total_mib"], "driverVersion": _semver(profile["driver_version"])}
        if cuda:
            device["cudaDriverVersion"] = "%d.%d.0" % (cuda // 1000, cuda % 1000 // 10)
        if "compute_capability" in gpu:
            device["cudaComputeCapability"] = "%d.%d.0" % tuple(gpu["compute_capability"])
        if "pci_bus_id" in gpu:
            # NVML's 8-digit domain, as the kubelet plugin's pciBusID attribute has it: 4 digits, lower case
            domain, rest = gpu["pci_bus_id"].split(":", 1)
            device["pciBusID"] = ("%04x:%s" % (int(domain, 16), rest)).lower()
        devices.append(device)
    return devices


if __name__ == "__main__":
    # python3 profile.py PROFILE: the annotation kubegpu.io/simulated-gpu-devices of PROFILE, as JSON (lab/cluster.yml)
    import json
    import sys
    print(json.dumps(simulated_gpu_devices(load_profile(sys.argv[1])), separators=(",", ":")))
