"""kubegpu.nvidia.nvidia_mig run by ansible-playbook over the real pynvml and the fake libnvidia-ml.so.1.

One playbook run covers every case, as in test_gpu_health_module.py: each task points LD_LIBRARY_PATH at the fake
library, FAKENVML_CONFIG at a profile and FAKENVML_STATE at the node's MIG state file (tests/support/fakenvml:
the state is kept across processes, so the tasks of one scenario run one after another on one "node"). The GPU
reset is tests/support/fakenvml/nvidia-smi. NVML writes are counted by the state's ``writes`` counter.
"""
import base64
import json
import os
import pathlib
import subprocess
import sys

import pytest

import ansible_run
import mig_profiles
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gfd_labels import gfd_labels
from ansible_collections.kubegpu.nvidia.plugins.module_utils.mig_role import planned_facts
from fakenvml.profile import PROFILES

ROOT = pathlib.Path(__file__).resolve().parents[2]
SMI = ROOT / "tests" / "support" / "fakenvml" / "nvidia-smi"
HEADER = "driver_version = 535.161.08\ncuda_driver_version = 12020\n"


def gpu(model, index, mig_mode=1, extra=""):
    spec = mig_profiles.MODELS[model]
    cc = "9.0" if model.startswith("H") else "8.0"
    return ("[gpu]\nname = %s\nuuid = GPU-00000000-0000-4000-8000-%012d\nmemory_total_mib = %d\n"
            "pci_bus_id = 00000000:%02X:00.0\npci_device_id = 0x%08X\ncompute_capability = %s\nmig_mode = %d\n"
            "max_mig_devices = 7\n%s" % (spec["name"], index, spec["memory_mib"], 0x10 + index, spec["pci_device_id"],
                                         cc, mig_mode, extra))


PROFILE_TEXTS = {
    "ampere-off": HEADER + gpu("A100-40GB", 0, 0) + gpu("A100-40GB", 1, 0),
    "passthrough": HEADER + gpu("A100-40GB", 0, 0, "mig_passthrough = 1\n"),
    "busy": HEADER + gpu("A100-40GB", 0) + gpu("A100-40GB", 1, 1, "processes = 4242:python3, 4243:trainer\n"),
    "halfway": HEADER + gpu("A100-40GB", 0, 1, "mig_devices = 3g.20gb, 3g.20gb\nmig_fail_create_after = 2\n"),
    "hopper-off": HEADER + gpu("H100-80GB", 0, 0),
    "half-off": HEADER + gpu("A100-40GB", 0, 1) + gpu("A100-40GB", 1, 0),
}

BAD_FILE = "version: v1\nmig-configs:\n  broken: [\n"
OWN = {"version": "v1", "mig-configs": {
    "unknown-profile": [{"devices": "all", "mig-enabled": True, "mig-devices": {"2g.11gb": 1}}],
    "too-many": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.20gb": 3}}],
    "no-room": [{"devices": "all", "mig-enabled": True, "mig-devices": {"4g.20gb": 1, "3g.20gb": 1, "1g.5gb": 1}}],
    "out-of-range": [{"devices": [7], "mig-enabled": True, "mig-devices": {}}],
    "overlap": [{"devices": [0], "mig-enabled": True, "mig-devices": {}},
                {"devices": [0, 1], "mig-enabled": False}],
    "t4-by-index": [{"devices": [0], "mig-enabled": True, "mig-devices": {}}],
}}

# (name, node (state file), profile, module arguments, task options)
CASES = [
    ("balanced-check", "a100", "a100x4-mig", {"config": "all-balanced"}, {"check_mode": True, "diff": True}),
    ("balanced", "a100", "a100x4-mig", {"config": "all-balanced"}, {"diff": True}),
    ("balanced-state", "a100", None, None, {}),
    ("balanced-again", "a100", "a100x4-mig", {"config": "all-balanced"}, {}),
    ("balanced-again-state", "a100", None, None, {}),
    ("facts-after", "a100", "a100x4-mig", "facts", {}),
    ("reset", "ampere", "@ampere-off", {"config": "all-balanced", "nvidia_smi": str(SMI)}, {}),
    ("reset-state", "ampere", None, None, {}),
    ("reset-again", "ampere", "@ampere-off", {"config": "all-balanced", "nvidia_smi": str(SMI)}, {}),
    ("reset-again-state", "ampere", None, None, {}),
    ("hopper", "hopper", "@hopper-off", {"config": "all-1g.10gb", "nvidia_smi": str(SMI)}, {}),
    ("persistenced", "persistenced", "@ampere-off", {"config": "all-enabled", "nvidia_smi": str(SMI)},
     {"systemctl": "active"}),
    ("reboot", "passthrough", "@passthrough", {"config": "all-enabled", "nvidia_smi": str(SMI)}, {}),
    ("busy", "busy", "@busy", {"config": "all-balanced"}, {}),
    ("halfway", "halfway", "@halfway", {"config": "all-balanced"}, {}),
    ("halfway-after", "halfway", "@halfway", {"config": "all-3g.20gb"}, {"check_mode": True}),
    ("unknown-config", "bad", "a100x4-mig", {"config": "all-balancd"}, {}),
    ("malformed-file", "bad", "a100x4-mig", {"config": "broken", "configs_file": "@bad.yaml"}, {}),
    ("unknown-profile", "bad", "a100x4-mig", {"config": "unknown-profile", "configs": OWN}, {}),
    ("too-many", "bad", "a100x4-mig", {"config": "too-many", "configs": OWN}, {}),
    ("no-room", "bad", "a100x4-mig", {"config": "no-room", "configs": OWN}, {}),
    ("out-of-range", "bad", "a100x4-mig", {"config": "out-of-range", "configs": OWN}, {}),
    ("overlap", "bad", "a100x4-mig", {"config": "overlap", "configs": OWN}, {}),
    ("t4-by-index", "bad", "t4x1", {"config": "t4-by-index", "configs": OWN}, {}),
    ("t4-all", "bad", "t4x1", {"config": "all-balanced"}, {}),
    # check mode's labels of a geometry new to the node against the labels after the real change: GPU 0 with MIG
    # on and no MIG device, GPU 1 with MIG off (to all-1g.5gb), then all-1g.5gb to all-3g.20gb
    ("labels-facts", "labels", "@half-off", "facts", {}),
    ("labels-check-1g", "labels", "@half-off", {"config": "all-1g.5gb", "nvidia_smi": str(SMI)}, {"check_mode": True}),
    ("labels-apply-1g", "labels", "@half-off", {"config": "all-1g.5gb", "nvidia_smi": str(SMI)}, {}),
    ("labels-facts-1g", "labels", "@half-off", "facts", {}),
    ("labels-check-3g", "labels", "@half-off", {"config": "all-3g.20gb"}, {"check_mode": True}),
    ("labels-apply-3g", "labels", "@half-off", {"config": "all-3g.20gb"}, {}),
    ("labels-facts-3g", "labels", "@half-off", "facts", {}),
    # MIG off on every GPU of the model: NVML answers no profile info before the change
    ("off-facts", "off", "@ampere-off", "facts", {}),
    ("off-check", "off", "@ampere-off", {"config": "all-1g.5gb", "nvidia_smi": str(SMI)}, {"check_mode": True}),
    ("off-apply", "off", "@ampere-off", {"config": "all-1g.5gb", "nvidia_smi": str(SMI)}, {}),
    ("off-facts-after", "off", "@ampere-off", "facts", {}),
]


@pytest.fixture(scope="session")
def libdir():
    out = subprocess.run([str(ROOT / "scripts" / "build-fakenvml.sh")], check=True, capture_output=True, text=True)
    return pathlib.Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def results(libdir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mig")
    (tmp / "bad.yaml").write_text(BAD_FILE)
    tasks = []
    for name, node, profile, args, options in CASES:
        state = tmp / ("%s.state" % node)
        if args is None:
            tasks.append({"name": name, "ansible.builtin.slurp": {"src": str(state)}, "ignore_errors": True})
            continue
        if profile.startswith("@"):
            config = tmp / ("%s.conf" % profile[1:])
            config.write_text(PROFILE_TEXTS[profile[1:]])
        else:
            config = PROFILES / ("%s.conf" % profile)
        env = {"LD_LIBRARY_PATH": str(libdir / "full"), "FAKENVML_CONFIG": str(config), "FAKENVML_STATE": str(state),
               "PYTHONPATH": os.pathsep.join(sys.path)}
        if options.get("systemctl"):
            folder = tmp / ("bin-" + name)
            folder.mkdir()
            (folder / "systemctl").write_text("#!/bin/sh\necho %s\n" % options["systemctl"])
            (folder / "systemctl").chmod(0o755)
            env["PATH"] = "%s:%s" % (folder, os.environ["PATH"])
        if args == "facts":
            task = {"name": name, "kubegpu.nvidia.nvidia_gpu_facts": {}, "environment": env, "ignore_errors": True}
        else:
            args = dict(args)
            if args.get("configs_file") == "@bad.yaml":
                args["configs_file"] = str(tmp / "bad.yaml")
            task = {"name": name, "kubegpu.nvidia.nvidia_mig": args, "environment": env, "ignore_errors": True}
        for key in ("check_mode", "diff"):
            if options.get(key):
                task[key] = True
        tasks.append(task)
    playbook = tmp / "mig.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    run = ansible_run.run_playbook(playbook, "localhost,", connection="local", timeout=600, cwd=str(tmp),
                                   env={"ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".cache" / "collections"),
                                        "ANSIBLE_NOCOLOR": "1"})
    found = run.tasks()
    assert set(found) == set(name for name, *_rest in CASES), run.stderr
    return {"tasks": found, "tmp": tmp}


def ok(results, name):
    result = results["tasks"][name]
    assert not result.get("failed"), result.get("msg")
    return result


def failed(results, name):
    result = results["tasks"][name]
    assert result.get("failed"), result
    assert "\n" not in result["msg"] and "Traceback" not in result["msg"]
    return result


def writes(text):
    return int([line for line in text.splitlines() if line.startswith("writes = ")][0].split("=")[1])


def slurped(results, name):
    return base64.b64decode(ok(results, name)["content"]).decode()


BALANCED_40GB = {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}


def test_check_mode_shows_the_change_and_writes_nothing(results):
    result = ok(results, "balanced-check")
    assert result["changed"] is True
    assert result["changed_gpus"] == [0, 1, 2, 3]
    assert result["reset_required"] == []
    assert result["diff"]["before"].splitlines()[0] == "GPU 0 (NVIDIA A100-SXM4-40GB): MIG enabled; 3g.20gb x2 (0:4, 4:4)"
    assert result["diff"]["after"].splitlines()[0] == (
        "GPU 0 (NVIDIA A100-SXM4-40GB): MIG enabled; 1g.5gb x2 (2:1, 3:1), 2g.10gb (0:2), 3g.20gb (4:4)")
    assert result["mig_devices"]["gpus"]["0"] == BALANCED_40GB


def test_apply_all_balanced_on_four_a100(results):
    """The GPU Operator's all-balanced on 4 x A100-SXM4-40GB; mixed strategy totals as the device plugin
    advertises them (the issue's 1g.5gb: 8, 2g.10gb: 4, 3g.20gb: 4)."""
    result = ok(results, "balanced")
    assert result["changed"] is True and result["changed_gpus"] == [0, 1, 2, 3]
    assert result["reboot_required"] is False and result["reset"] == []
    assert result["mig_devices"]["resources"] == {"nvidia.com/mig-1g.5gb": 8, "nvidia.com/mig-2g.10gb": 4,
                                                  "nvidia.com/mig-3g.20gb": 4}
    state = slurped(results, "balanced-state")
    # GPU 0: 2 CIs and 2 GIs destroyed; every GPU: 4 GIs and 4 CIs created
    assert writes(state) == 4 + 4 * 8
    # at the planned placements, one full compute instance each (GPU instance ids in creation order)
    assert [line for line in state.splitlines() if line.startswith(("gi = 3 ", "ci = 3 "))] == [
        "gi = 3 1 9 4 4", "ci = 3 1 0 3", "gi = 3 2 14 0 2", "ci = 3 2 0 2", "gi = 3 3 19 2 1", "ci = 3 3 0 1",
        "gi = 3 4 19 3 1", "ci = 3 4 0 1"]


def test_second_run_changes_nothing_and_writes_nothing(results):
    result = ok(results, "balanced-again")
    assert result["changed"] is False and result["changed_gpus"] == []
    assert writes(slurped(results, "balanced-again-state")) == writes(slurped(results, "balanced-state"))
    assert result["mig_devices"]["resources"]["nvidia.com/mig-1g.5gb"] == 8


def test_facts_see_the_created_mig_devices(results):
    facts = ok(results, "facts-after")["ansible_facts"]["nvidia_gpu"]
    assert len(facts["devices"]) == 4
    for gpu_facts in facts["devices"]:
        profiles = sorted(device["profile"] for device in gpu_facts["mig"]["devices"])
        assert profiles == ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"]


def test_ampere_mode_change_is_reset_by_nvidia_smi(results):
    result = ok(results, "reset")
    assert result["reset_required"] == [0, 1] and result["reset"] == [0, 1]
    assert result["mig_devices"]["gpus"] == {"0": BALANCED_40GB, "1": BALANCED_40GB}


def test_after_the_reset_a_second_run_changes_nothing(results):
    result = ok(results, "reset-again")
    assert result["changed"] is False and result["reset_required"] == []
    assert writes(slurped(results, "reset-again-state")) == writes(slurped(results, "reset-state"))


def test_hopper_enables_mig_without_a_reset(results):
    result = ok(results, "hopper")
    assert result["reset"] == []
    assert result["mig_devices"]["resources"] == {"nvidia.com/mig-1g.10gb": 7}


def test_persistenced_blocks_the_reset_before_any_change(results):
    result = failed(results, "persistenced")
    assert result["msg"] == ("MIG mode of GPU 0, 1 needs a GPU reset, but nvidia-persistenced is running; nothing was "
                             "changed: stop nvidia-persistenced, apply again, then start it")
    assert result["reset_blocked_by"] == ["nvidia-persistenced is running"]
    assert not (results["tmp"] / "persistenced.state").exists()


def test_passthrough_gpu_needs_a_reboot(results):
    result = ok(results, "reboot")
    assert result["reboot_required"] is True
    assert "Resetting GPU 00000000:10:00.0 is not supported." in result["reboot_reason"]


def test_busy_gpu_refuses_the_node(results):
    result = failed(results, "busy")
    assert "python3 (pid 4242)" in result["msg"] and "trainer (pid 4243)" in result["msg"]
    assert not (results["tmp"] / "busy.state").exists()


def test_creation_failing_half_way_restores_the_geometry(results):
    result = failed(results, "halfway")
    assert "back to its previous geometry" in result["msg"]
    again = ok(results, "halfway-after")
    assert again["changed"] is False  # two 3g.20gb as before


@pytest.mark.parametrize("name, words", [
    ("unknown-config", ["'all-balancd' does not exist", "did you mean 'all-balanced'"]),
    ("malformed-file", ["is not valid YAML"]),
    ("unknown-profile", ["has no MIG profile 2g.11gb"]),
    ("too-many", ["3 x 3g.20gb do not fit"]),
    ("no-room", ["does not fit"]),
    ("out-of-range", ["GPU index 7 does not exist on this node (GPUs 0-3)"]),
    ("overlap", ["overlapping specs 0 and 1 both address GPU 0"]),
    ("t4-by-index", ["GPU 0 (Tesla T4) is not MIG-capable"]),
])
def test_bad_input_is_one_line_and_changes_nothing(results, name, words):
    result = failed(results, name)
    for word in words:
        assert word in result["msg"]
    assert not (results["tmp"] / "bad.state").exists()


def test_non_capable_gpu_is_skipped_under_all(results):
    result = ok(results, "t4-all")
    assert result["changed"] is False
    assert result["plan"]["gpus"][0]["skipped"] == "not MIG-capable"


def gpu_facts(results, name):
    return ok(results, name)["ansible_facts"]["nvidia_gpu"]


def labels_of(facts):
    """The GFD labels of the facts, under either MIG strategy (k8s-device-plugin internal/lm/mig-strategy.go)."""
    return dict((strategy, gfd_labels(facts, strategy)) for strategy in ("single", "mixed"))


ATTRIBUTE_SUFFIXES = (".memory", ".multiprocessors", ".slices.gi", ".slices.ci", ".engines.copy", ".engines.decoder",
                      ".engines.encoder", ".engines.jpeg", ".engines.ofa")


@pytest.mark.parametrize("before, check, after, profile", [
    # GPU 1 from MIG off and GPU 0 from no MIG device, both to a profile no GPU of the node has yet
    ("labels-facts", "labels-check-1g", "labels-facts-1g", "1g.5gb"),
    # all-1g.5gb to all-3g.20gb: another profile new to the node
    ("labels-facts-1g", "labels-check-3g", "labels-facts-3g", "3g.20gb"),
])
def test_check_mode_labels_equal_the_labels_after_the_change(results, before, check, after, profile):
    """The facts check mode plans (mig_role.planned_facts over the module's plan) label the node exactly as the
    facts read after the real change do, the new profile's memory, multiprocessors, slices and engines included."""
    result = ok(results, check)
    assert result["changed"] is True
    planned = labels_of(planned_facts(gpu_facts(results, before), result))
    real = labels_of(gpu_facts(results, after))
    assert planned == real
    prefix = "nvidia.com/mig-%s" % profile
    assert set(key for key in real["mixed"] if key.startswith(prefix + ".")) == set(
        prefix + suffix for suffix in ATTRIBUTE_SUFFIXES + (".count", ".product", ".replicas", ".sharing-strategy"))
    # the plan's attributes are those the facts read of the MIG devices the change made
    made = gpu_facts(results, after)["devices"][1]["mig"]["devices"][0]
    assert result["plan"]["gpus"][1]["attributes"] == {profile: dict(
        (key, made[key]) for key in ("memory_mib", "multiprocessors", "slices", "engines"))}


def test_check_mode_from_mig_off_on_every_gpu_labels_what_the_profile_name_says(results):
    """No GPU of the model has MIG on: NVML gives no profile info before the change, so check mode labels the
    new profile's count, product and slices (from its name) and leaves out its multiprocessors and engines and its
    memory (single: the whole GPU's memory stays); every other label equals the one after the real change."""
    result = ok(results, "off-check")
    assert result["plan"]["gpus"][0]["replan"] is True and result["plan"]["gpus"][0]["attributes"] == {}
    planned = labels_of(planned_facts(gpu_facts(results, "off-facts"), result))
    real = labels_of(gpu_facts(results, "off-facts-after"))
    for strategy in ("single", "mixed"):
        prefix = "nvidia.com/gpu" if strategy == "single" else "nvidia.com/mig-1g.5gb"
        unknown = set(prefix + suffix for suffix in ATTRIBUTE_SUFFIXES if "slices" not in suffix)
        assert unknown <= set(real[strategy])
        assert (dict((k, v) for k, v in planned[strategy].items() if k not in unknown)
                == dict((k, v) for k, v in real[strategy].items() if k not in unknown))
        # single: the whole GPU's memory label stays, as no MIG device memory replaces it
        assert dict((k, planned[strategy][k]) for k in unknown if k in planned[strategy]) == (
            {"nvidia.com/gpu.memory": "40960"} if strategy == "single" else {})
