"""kubegpu.nvidia.nvidia_gpu_facts run by ansible-playbook over the real pynvml and the fake libnvidia-ml.so.1.

One playbook run covers every case: each task points LD_LIBRARY_PATH at a fake library build
and FAKENVML_CONFIG at a profile through its `environment:` (the module process loads the library).
The facts are checked against the profiles themselves (tests/support/fakenvml/profile.py) and, for the
MIG device attributes, against what the real pynvml reads from the same library (tests/support/fakenvml/probe.py).
The same discovery also runs under Debian's python3-pynvml 11.525 in the lab node image, and in-process over
the fake sysfs views (tests/support/fakenvml/sysfs.py) for the PCI class: this machine's own
/sys/bus/pci/devices is not the profiles', so the module runs here leave the PCI class as they find it.
Faults, hangs and bad input: test_gpu_facts_reliability.py.
"""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

import ansible_run
from fakenvml.profile import PROFILES, load_profile

ROOT = pathlib.Path(__file__).resolve().parents[2]
NODE_IMAGE = "kubegpu-lab-node:latest"
GPU_PROFILES = ("h100x8", "a100x4-mig", "t4x1")
NEW_PROFILES = ("b200x8", "gb200x4", "h100x2-mig", "rtx6000ada-vga")
PROBE = ROOT / "tests" / "support" / "fakenvml" / "probe.py"

# name -> (library build, profile or None for "no config file", module arguments, extra task keys)
CASES = {
    "h100x8": ("full", "h100x8", {}, {}),
    "a100x4-mig": ("full", "a100x4-mig", {}, {}),
    "t4x1": ("full", "t4x1", {}, {}),
    "b200x8": ("full", "b200x8", {}, {}),
    "gb200x4": ("full", "gb200x4", {}, {}),
    "h100x2-mig": ("full", "h100x2-mig", {}, {}),
    "rtx6000ada-vga": ("full", "rtx6000ada-vga", {}, {}),
    "h100x2-mig-attributes-v1": ("attributes-v1", "h100x2-mig", {}, {}),
    "a100x4-mig-legacy": ("legacy", "a100x4-mig", {}, {}),
    "not-supported": ("full", "not-supported", {}, {}),
    "driver-not-loaded": ("full", "driver-not-loaded", {}, {}),
    "corrupt": ("full", "corrupt", {}, {}),
    "no-config": ("full", None, {}, {}),
    "require-no-driver": ("full", "driver-not-loaded", {"require": True}, {}),
    "require-gpu": ("full", "t4x1", {"require": True}, {}),
    "check-mode": ("full", "h100x8", {}, {"check_mode": True}),
    "time-slicing": ("full", "h100x8", {"sharing_strategy": "time-slicing", "replicas": 4}, {}),
    "mig-single": ("full", "a100x4-mig", {"mig_strategy": "single"}, {}),
    "mig-mixed": ("full", "a100x4-mig", {"mig_strategy": "mixed"}, {}),
    "bad-option": ("full", "h100x8", {"colour": "red"}, {}),
    "bad-type": ("full", "h100x8", {"replicas": "many"}, {}),
    "bad-replicas": ("full", "h100x8", {"replicas": 2}, {}),
    "smi-fallback": ("full", "driver-not-loaded", {}, {"smi": True}),
    "smi-unused": ("full", "h100x8", {}, {"smi": True}),
    "host-facts": ("full", "t4x1", {"gather_subset": ["!all", "!min", "distribution", "platform", "network", "virtual"]}, {}),
    "host-facts-min": ("full", "t4x1", {"gather_subset": ["!all"]}, {}),
    "bad-subset": ("full", "t4x1", {"gather_subset": ["!all", "gpus"]}, {}),
}
# ansible.builtin.setup with these subsets runs in the same playbook: host-facts must return the same facts
REFERENCE = {"setup-host-facts": CASES["host-facts"][2]["gather_subset"], "setup-host-facts-min": ["!all"]}

SMI_OUTPUT = ("0, NVIDIA A100-SXM4-40GB, GPU-5d1c3b6e-7a9f-4e21-9c3d-000000000000, 40960, 00000000:07:00.0, "
              "0x20B010DE, 535.183.01, 8.0, Enabled, Enabled\n")


@pytest.fixture(scope="session")
def libdir():
    out = subprocess.run([str(ROOT / "scripts" / "build-fakenvml.sh")], check=True, capture_output=True, text=True)
    return pathlib.Path(out.stdout.strip().splitlines()[-1])


def fake_nvidia_smi(folder):
    """An nvidia-smi that records each call in a marker file and prints one A100."""
    folder.mkdir()
    marker = folder / "called"
    script = folder / "nvidia-smi"
    script.write_text("#!/bin/sh\necho \"$@\" >> %s\ncat <<'EOF'\n%sEOF\n" % (marker, SMI_OUTPUT))
    script.chmod(0o755)
    return folder, marker


@pytest.fixture(scope="session")
def results(libdir, tmp_path_factory):
    """Run the playbook once; return {case: (task result, profile path)} and the run's output."""
    tmp = tmp_path_factory.mktemp("gpu_facts")
    smi_dir, marker = fake_nvidia_smi(tmp / "smi")
    tasks = []
    for name, (flavour, profile, args, extra) in CASES.items():
        config = str(PROFILES / ("%s.conf" % profile)) if profile else str(tmp / "absent.conf")
        env = {"LD_LIBRARY_PATH": str(libdir / flavour), "FAKENVML_CONFIG": config}
        path = os.environ["PATH"]
        if extra.get("smi"):
            env["PATH"] = "%s:%s" % (smi_dir, path)
        else:
            env["PATH"] = ":".join(p for p in path.split(":") if not (pathlib.Path(p) / "nvidia-smi").exists())
        task = {"name": name, "kubegpu.nvidia.nvidia_gpu_facts": args, "environment": env, "ignore_errors": True}
        if extra.get("check_mode"):
            task["check_mode"] = True
        tasks.append(task)
    for name, subset in REFERENCE.items():
        tasks.append({"name": name, "ansible.builtin.setup": {"gather_subset": subset}})
    playbook = tmp / "facts.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    run = ansible_run.run_playbook(playbook, "localhost,", connection="local", timeout=300, cwd=str(tmp),
                                   env={"ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".cache" / "collections"),
                                        "ANSIBLE_NOCOLOR": "1"})
    found = run.tasks()
    assert set(found) == set(CASES) | set(REFERENCE)
    return {"tasks": found, "stdout": run.stdout, "stderr": run.stderr, "marker": marker}


@pytest.fixture(scope="session")
def probed(libdir):
    """{(profile, flavour): what the real pynvml reads from the fake library}, one probe process each."""
    found = {}
    for flavour, profile in (("full", name) for name in GPU_PROFILES + NEW_PROFILES):
        found[(profile, flavour)] = _probe(libdir, profile, flavour)
    found[("h100x2-mig", "attributes-v1")] = _probe(libdir, "h100x2-mig", "attributes-v1")
    return found


def _probe(libdir, profile, flavour):
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir / flavour), FAKENVML_CONFIG=str(PROFILES / (profile + ".conf")))
    return json.loads(subprocess.run([sys.executable, str(PROBE)], env=env, capture_output=True, text=True,
                                     check=True, timeout=60).stdout)


def facts_of(result):
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is False
    return result["ansible_facts"]["nvidia_gpu"]


def warnings_of(result):
    return [w["event"]["msg"] if isinstance(w, dict) else w for w in result.get("warnings", [])]


def expected_devices(profile, with_optional=True, probe=None):
    """The devices a profile describes; ``probe``: the real pynvml's view of the library, for MIG attributes."""
    devices = []
    for index, gpu in enumerate(profile["gpus"]):
        has_mig = with_optional and "mig_mode" in gpu
        cc = "%d.%d" % tuple(gpu["compute_capability"]) if with_optional and "compute_capability" in gpu else None
        devices.append({
            "index": index,
            "name": gpu["name"],
            "uuid": gpu["uuid"],
            "memory_mib": gpu["memory_total_mib"],
            "pci_bus_id": gpu["pci_bus_id"],
            "pci_device_id": "0x%08X" % gpu["pci_device_id"],
            "compute_capability": cc,
            "mig": {"current": gpu["mig_mode"] if has_mig else None, "pending": gpu["mig_pending"] if has_mig else None,
                    "devices": expected_mig_devices(gpu, probe["devices"][index] if probe else None)
                    if has_mig else None},
        })
    return devices


def expected_mig_devices(gpu, probed_gpu=None):
    """The MIG devices the fake library makes of a profile's mig_devices (tests/support/fakenvml/fakenvml.c add_mig),
    with the attributes the real pynvml reads for them (nvmlDeviceGetAttributes_v2, else the v1 symbol)."""
    if gpu["mig_mode"] != 1:
        return []
    devices = []
    for slot, profile in enumerate(gpu.get("mig_devices", [])):
        device = {"slot": slot,
                  "name": "%s MIG %s" % (gpu["name"], profile),
                  "profile": profile,
                  "uuid": "MIG-%s%04x" % (gpu["uuid"][4:36], slot + 1),
                  "memory_mib": int(profile.split("+")[0].split("-")[0].split(".")[-1][:-2]) * 1024,
                  "multiprocessors": None,
                  "slices": {"gi": None, "ci": None},
                  "engines": {"copy": None, "decoder": None, "encoder": None, "jpeg": None, "ofa": None}}
        attributes = probed_gpu["mig_devices"][slot] if probed_gpu else {}
        attributes = attributes.get("attributes_v2") if "error" not in attributes.get("attributes_v2", {"error": 1}) \
            else attributes.get("attributes_v1")
        if attributes:
            device.update(multiprocessors=attributes["multiprocessorCount"],
                          slices={"gi": attributes["gpuInstanceSliceCount"],
                                  "ci": attributes["computeInstanceSliceCount"]},
                          engines={"copy": attributes["sharedCopyEngineCount"],
                                   "decoder": attributes["sharedDecoderCount"],
                                   "encoder": attributes["sharedEncoderCount"], "jpeg": attributes["sharedJpegCount"],
                                   "ofa": attributes["sharedOfaCount"]},
                          memory_mib=attributes["memorySizeMB"])
        devices.append(device)
    return devices


def strip_derived(devices):
    """Without the values derived from others, and without the PCI class: read from this machine's sysfs."""
    for device in devices:
        assert device["pci_class"] is None or re.match(r"^0x[0-9a-f]{6}$", device["pci_class"]), device["pci_class"]
    return [dict((k, v) for k, v in device.items() if k not in ("product", "family", "pci_class")) for device in devices]


@pytest.mark.parametrize("name", GPU_PROFILES + NEW_PROFILES)
def test_facts_match_the_profile(results, probed, name):
    profile = load_profile(PROFILES / ("%s.conf" % name))
    result = results["tasks"][name]
    facts = facts_of(result)
    assert warnings_of(result) == []
    assert facts["present"] is True
    assert facts["source"] == "nvml"
    assert facts["count"] == len(profile["gpus"])
    assert facts["driver_version"] == profile["driver_version"]
    cuda = profile["cuda_driver_version"]
    assert facts["cuda_driver_version"] == "%d.%d" % (cuda // 1000, (cuda % 1000) // 10)
    assert strip_derived(facts["devices"]) == expected_devices(profile, probe=probed[(name, "full")])
    # no Secure Boot state in this test machine's view (no /sys/firmware/efi here, or not readable)
    assert set(facts["secure_boot"]) == {"enabled", "setup_mode", "source"}


def test_mig_attributes_and_media_extensions(results, probed):
    """GFD's MIG attribute labels come from these fields (k8s-device-plugin internal/resource/nvml-mig-device.go)."""
    facts = facts_of(results["tasks"]["h100x2-mig"])
    migs = facts["devices"][0]["mig"]["devices"]
    assert [m["profile"] for m in migs] == ["1g.10gb+me", "1g.10gb", "2g.20gb", "3g.40gb"]
    assert migs[0]["engines"] == {"copy": 1, "decoder": 1, "encoder": 0, "jpeg": 1, "ofa": 1}
    assert migs[1]["engines"] == {"copy": 1, "decoder": 0, "encoder": 0, "jpeg": 0, "ofa": 0}
    # the memory: each GPU instance profile's memorySizeMB on this 81559 MiB H100 (tests/functional/test_fakenvml.py)
    assert [(m["multiprocessors"], m["slices"]["gi"], m["slices"]["ci"], m["memory_mib"]) for m in migs] == [
        (16, 1, 1, 10130), (16, 1, 1, 10130), (32, 2, 2, 20261), (48, 3, 3, 40523)]
    # a driver without nvmlDeviceGetAttributes_v2: the same values through the v1 symbol
    older = facts_of(results["tasks"]["h100x2-mig-attributes-v1"])
    assert warnings_of(results["tasks"]["h100x2-mig-attributes-v1"]) == []
    assert older["devices"] == facts["devices"]
    expected = expected_devices(load_profile("h100x2-mig"), probe=probed[("h100x2-mig", "attributes-v1")])
    assert strip_derived(older["devices"]) == expected


@pytest.mark.parametrize("name, family, capability", [("b200x8", "blackwell", "10.0"), ("gb200x4", "blackwell", "10.0"),
                                                      ("rtx6000ada-vga", "ada-lovelace", "8.9")])
def test_newer_architectures(results, name, family, capability):
    facts = facts_of(results["tasks"][name])
    assert {(d["compute_capability"], d["family"]) for d in facts["devices"]} == {(capability, family)}
    assert facts["labels"]["nvidia.com/gpu.compute.major"] == capability.split(".")[0]


@pytest.mark.parametrize("name, product, family, memory, mig_capable", [
    ("h100x8", "NVIDIA-H100-80GB-HBM3", "hopper", "81559", "true"),
    ("a100x4-mig", "NVIDIA-A100-SXM4-40GB", "ampere", "40960", "true"),
    ("t4x1", "Tesla-T4", "turing", "15360", "false"),
])
def test_labels_match_the_profile(results, name, product, family, memory, mig_capable):
    profile = load_profile(PROFILES / ("%s.conf" % name))
    facts = facts_of(results["tasks"][name])
    labels = facts["labels"]
    assert [d["product"] for d in facts["devices"]] == [product] * len(profile["gpus"])
    assert [d["family"] for d in facts["devices"]] == [family] * len(profile["gpus"])
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["nvidia.com/gpu.product"] == product
    assert labels["nvidia.com/gpu.count"] == str(len(profile["gpus"]))
    assert labels["nvidia.com/gpu.memory"] == memory
    assert labels["nvidia.com/gpu.family"] == family
    assert labels["nvidia.com/mig.capable"] == mig_capable
    assert labels["nvidia.com/cuda.driver-version.full"] == profile["driver_version"]
    assert labels["nvidia.com/cuda.driver.major"] == profile["driver_version"].split(".")[0]
    cuda = profile["cuda_driver_version"]
    assert labels["nvidia.com/cuda.runtime-version.full"] == "%d.%d" % (cuda // 1000, cuda % 1000 // 10)
    # MIG-enabled GPUs carry no sharing information (replicas 0), as GPU Feature Discovery labels them
    assert labels["nvidia.com/gpu.replicas"] == ("0" if name == "a100x4-mig" else "1")


def test_legacy_library_leaves_missing_functions_null(results):
    result = results["tasks"]["a100x4-mig-legacy"]
    facts = facts_of(result)
    profile = load_profile(PROFILES / "a100x4-mig.conf")
    assert strip_derived(facts["devices"]) == expected_devices(profile, with_optional=False)
    assert all(d["mig"]["devices"] is None for d in facts["devices"])
    assert all(d["family"] is None for d in facts["devices"])
    assert warnings_of(result) == []
    assert facts["labels"]["nvidia.com/mig.capable"] == "false"
    assert "nvidia.com/gpu.family" not in facts["labels"]


def test_not_supported_optional_calls_leave_fields_null(results):
    result = results["tasks"]["not-supported"]
    facts = facts_of(result)
    assert warnings_of(result) == []
    assert facts["cuda_driver_version"] is None
    device = facts["devices"][0]
    assert (device["compute_capability"], device["family"], device["mig"]) == (None, None, {"current": None, "pending": None, "devices": None})
    assert device["memory_mib"] == 81559 and device["name"] == "NVIDIA H100 80GB HBM3"
    assert "nvidia.com/cuda.runtime-version.full" not in facts["labels"]


@pytest.mark.parametrize("name, cause", [
    ("driver-not-loaded", "NVML could not be initialised: Driver Not Loaded (NVML_ERROR_DRIVER_NOT_LOADED)"),
    ("no-config", "NVML could not be initialised: Driver Not Loaded (NVML_ERROR_DRIVER_NOT_LOADED)"),
    ("corrupt", "NVML could not be initialised: Unknown Error (NVML_ERROR_UNKNOWN): fakenvml: %s:7: "
                % (PROFILES / "corrupt.conf")),
])
def test_faults_fall_back_with_a_warning_naming_the_cause(results, name, cause):
    result = results["tasks"][name]
    facts = facts_of(result)
    assert (facts["present"], facts["count"], facts["source"]) == (False, 0, "none")
    assert facts["labels"] == {}
    warnings = warnings_of(result)
    assert len(warnings) == 1
    assert warnings[0].startswith("No NVIDIA GPU found: " + cause)
    assert warnings[0].endswith("; nvidia-smi was not found")


def test_require_fails_with_one_line(results):
    result = results["tasks"]["require-no-driver"]
    assert result["failed"] is True
    assert result["msg"].startswith("No NVIDIA GPU found on this machine: No NVIDIA GPU found: NVML could not be "
                                    "initialised: Driver Not Loaded")
    assert "\n" not in result["msg"]
    assert no_traceback(result)


def test_require_passes_on_a_gpu_node(results):
    assert facts_of(results["tasks"]["require-gpu"])["count"] == 1


def test_check_mode_reports_the_same_facts(results):
    assert facts_of(results["tasks"]["check-mode"]) == facts_of(results["tasks"]["h100x8"])


def test_label_options(results):
    labels = facts_of(results["tasks"]["time-slicing"])["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    # GPU 0 holds two 3g.20gb MIG devices, GPUs 1 to 3 none: single cannot label them, mixed labels the profile
    labels = facts_of(results["tasks"]["mig-single"])["labels"]
    assert labels["nvidia.com/mig.strategy"] == "single"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-INVALID"
    labels = facts_of(results["tasks"]["mig-mixed"])["labels"]
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    mig = dict((key, value) for key, value in labels.items() if key.startswith("nvidia.com/mig-"))
    # (and the MIG attribute labels, multiprocessors and engines.*, where NVML gives them)
    assert {
        "nvidia.com/mig-3g.20gb.product": "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb",
        "nvidia.com/mig-3g.20gb.count": "2",
        "nvidia.com/mig-3g.20gb.replicas": "1",
        "nvidia.com/mig-3g.20gb.sharing-strategy": "none",
        # the GPU instance profile's memorySizeMB, as NVML gives a MIG device's memory (REFERENCE 8.1)
        "nvidia.com/mig-3g.20gb.memory": "19968",
        "nvidia.com/mig-3g.20gb.slices.gi": "3",
        "nvidia.com/mig-3g.20gb.slices.ci": "3",
    }.items() <= mig.items()
    assert all(key.startswith("nvidia.com/mig-3g.20gb.") for key in mig)


@pytest.mark.parametrize("name, reference", [("host-facts", "setup-host-facts"), ("host-facts-min", "setup-host-facts-min")])
def test_gather_subset_returns_the_host_facts_setup_returns(results, name, reference):
    # the same run: the GPU facts, and exactly the host facts ansible.builtin.setup gathers for the subsets
    result = results["tasks"][name]
    facts = dict(result["ansible_facts"])
    assert facts.pop("nvidia_gpu") == facts_of(results["tasks"]["t4x1"])
    setup = dict(results["tasks"][reference]["ansible_facts"])
    facts, setup = without_container_links(facts), without_container_links(setup)
    assert set(facts) == set(setup)
    # the time moves on, and the environment is the task's (each GPU task here sets LD_LIBRARY_PATH and
    # FAKENVML_CONFIG)
    for gathered in (facts, setup):
        for volatile in ("ansible_date_time", "ansible_env"):
            assert (volatile in gathered) == (name == "host-facts-min")
            gathered.pop(volatile, None)
    assert unordered(facts) == unordered(setup)
    if name == "host-facts":
        assert facts["ansible_os_family"] and facts["ansible_all_ipv4_addresses"] and facts["ansible_kernel"]


def without_container_links(facts):
    """The facts less the host side of container network links (veth*), which come and go between the two
    reads whenever a container starts or stops on this machine, and the IPv6 link-local addresses in the
    address list (each interface's own facts still carry its addresses)."""
    links = set(name for name in facts.get("ansible_interfaces", []) if name.startswith("veth"))
    facts = dict((key, value) for key, value in facts.items() if not key.startswith("ansible_veth"))
    if "ansible_interfaces" in facts:
        facts["ansible_interfaces"] = [name for name in facts["ansible_interfaces"] if name not in links]
    if "ansible_all_ipv6_addresses" in facts:
        facts["ansible_all_ipv6_addresses"] = [address for address in facts["ansible_all_ipv6_addresses"]
                                               if not address.lower().startswith("fe80:")]
    return facts


def unordered(value):
    """Lists of names (interfaces, addresses, virtualization techs) sorted: setup builds several from sets."""
    if isinstance(value, dict):
        return dict((key, unordered(item)) for key, item in value.items())
    if isinstance(value, list):
        items = [unordered(item) for item in value]
        return sorted(items) if all(isinstance(item, str) for item in items) else items
    return value


def test_no_host_facts_unless_asked(results):
    assert list(results["tasks"]["t4x1"]["ansible_facts"]) == ["nvidia_gpu"]


@pytest.mark.parametrize("name, message", [
    ("bad-subset", "gather_subset !all, gpus: Bad subset 'gpus' given to Ansible."),
    ("bad-option", "Unsupported parameters for (kubegpu.nvidia.nvidia_gpu_facts) module: colour"),
    ("bad-type", "replicas"),
    ("bad-replicas", "replicas=2 needs sharing_strategy time-slicing or mps"),
])
def test_bad_input_is_a_clear_failure(results, name, message):
    result = results["tasks"][name]
    assert result["failed"] is True and result["changed"] is False
    assert message in result["msg"]
    assert no_traceback(result)


def test_nvidia_smi_only_when_nvml_fails(results):
    unused = facts_of(results["tasks"]["smi-unused"])
    assert unused["source"] == "nvml"
    fallback = results["tasks"]["smi-fallback"]
    facts = facts_of(fallback)
    assert facts["source"] == "nvidia-smi"
    assert facts["devices"][0]["name"] == "NVIDIA A100-SXM4-40GB"
    # nvidia-smi's query gives the MIG mode, not the MIG devices
    assert facts["devices"][0]["mig"] == {"current": 1, "pending": 1, "devices": None}
    assert warnings_of(fallback) == ["GPU facts come from nvidia-smi: NVML could not be initialised: "
                                     "Driver Not Loaded (NVML_ERROR_DRIVER_NOT_LOADED)"]
    # one call in the whole run: the fallback task; the NVML task ran no subprocess
    calls = results["marker"].read_text().splitlines()
    assert len(calls) == 1 and calls[0].startswith("--query-gpu=index,name,uuid")


def no_traceback(result):
    """ansible-core 2.19 marks failures with exception '(traceback unavailable)' when none was raised."""
    return "Traceback" not in str(result.get("exception", "")) and "module_stderr" not in result


def test_no_traceback_reaches_the_user(results):
    assert "Traceback" not in results["stdout"] and "Traceback" not in results["stderr"]
    for result in results["tasks"].values():
        assert no_traceback(result)


DEBIAN_SCRIPT = r"""
import json, sys
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery import discover_gpus
facts, warnings = discover_gpus()
import pynvml
print(json.dumps({"facts": facts, "warnings": warnings, "pynvml": pynvml.__file__}))
"""


@pytest.fixture(scope="session")
def debian_results(libdir):
    """Discovery under the node image's python3 and Debian's python3-pynvml 11.525, every profile in one container."""
    if not shutil.which("docker"):
        pytest.skip("docker is not available")
    if subprocess.run(["docker", "image", "inspect", NODE_IMAGE], capture_output=True, check=False).returncode != 0:
        pytest.skip("%s is not built (lab/image/build.sh)" % NODE_IMAGE)
    names = GPU_PROFILES + NEW_PROFILES + ("not-supported", "driver-not-loaded", "corrupt")
    loop = " ; ".join(
        "echo '== %s' ; LD_LIBRARY_PATH=/fake/%s FAKENVML_CONFIG=%s/%s.conf python3 -c \"$SCRIPT\""
        % (name, "full", PROFILES, name) for name in names)
    loop += " ; echo '== a100x4-mig-legacy' ; LD_LIBRARY_PATH=/fake/legacy FAKENVML_CONFIG=%s/a100x4-mig.conf " \
            "python3 -c \"$SCRIPT\"" % PROFILES
    loop += " ; echo '== h100x2-mig-attributes-v1' ; LD_LIBRARY_PATH=/fake/attributes-v1 " \
            "FAKENVML_CONFIG=%s/h100x2-mig.conf python3 -c \"$SCRIPT\"" % PROFILES
    proc = subprocess.run(
        ["docker", "run", "--rm", "--name", "gpu-facts-debian-pynvml-%d" % os.getpid(),
         "-v", "%s:/coll:ro" % (ROOT / ".cache" / "collections"), "-v", "%s:%s:ro" % (ROOT, ROOT),
         "-v", "%s:/fake:ro" % libdir, "-e", "PYTHONPATH=/coll", "-e", "SCRIPT=" + DEBIAN_SCRIPT,
         NODE_IMAGE, "sh", "-c", loop],
        capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr
    found = {}
    for chunk in proc.stdout.split("== ")[1:]:
        name, output = chunk.split("\n", 1)
        found[name.strip()] = json.loads(output)
    return found


DEBIAN_CASES = GPU_PROFILES + NEW_PROFILES + ("not-supported", "driver-not-loaded", "corrupt", "a100x4-mig-legacy",
                                              "h100x2-mig-attributes-v1")


@pytest.mark.parametrize("name", DEBIAN_CASES)
def test_debian_pynvml_gives_the_same_facts(results, debian_results, name):
    got = debian_results[name]
    assert got["pynvml"] == "/usr/lib/python3/dist-packages/pynvml.py"
    venv = results["tasks"][name]
    venv_facts = facts_of(venv)
    assert got["facts"]["machine"] == venv_facts["machine"] or got["facts"]["machine"] is None
    for key in ("present", "count", "source", "driver_version", "cuda_driver_version", "devices"):
        assert got["facts"][key] == venv_facts[key], key
    assert [w.split(": fakenvml:")[0] for w in got["warnings"]] == [w.split(": fakenvml:")[0] for w in warnings_of(venv)]


PCI_CLASS_SCRIPT = r"""
import json, sys
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery import discover_gpus
facts, warnings = discover_gpus(pci_root=sys.argv[1], efi_root=sys.argv[2])
print(json.dumps({"facts": facts, "warnings": warnings}))
"""


@pytest.mark.parametrize("name, flavour, profile, source", [
    ("h100x8", "full", "h100x8", "nvml"),
    ("rtx6000ada-vga", "full", "rtx6000ada-vga", "nvml"),
    ("gb200x4", "full", "gb200x4", "nvml"),
    ("rtx6000ada-vga", "full", "driver-not-loaded", "pci"),   # GPUs on the bus, no driver
])
def test_pci_class_from_the_fake_sysfs_views(libdir, tmp_path, name, flavour, profile, source):
    """The PCI class (GFD's gpu.mode: 0x0302 compute, 0x0300 graphics) from the sysfs views lab nodes mount."""
    from fakenvml import sysfs  # pylint: disable=import-outside-toplevel

    view = sysfs.write_profile(tmp_path, name)
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir / flavour), FAKENVML_CONFIG=str(PROFILES / (profile + ".conf")),
               PYTHONPATH=str(ROOT / ".cache" / "collections"))
    out = subprocess.run([sys.executable, "-c", PCI_CLASS_SCRIPT, str(view / "pci" / "devices"),
                          str(tmp_path / "no-efi")], env=env, capture_output=True, text=True, check=True, timeout=60)
    facts = json.loads(out.stdout)["facts"]
    assert facts["source"] == source
    gpus = load_profile(name)["gpus"]
    assert [d["pci_bus_id"] for d in facts["devices"]] == [g["pci_bus_id"] for g in gpus]
    assert [d["pci_class"] for d in facts["devices"]] == ["0x%06x" % g.get("pci_class", 0x030200) for g in gpus]
