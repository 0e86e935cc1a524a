"""kubegpu.nvidia.nvidia_gpu_facts under bad input and faults: a clean result every time.

One ansible-playbook run over the real pynvml and the fake libnvidia-ml.so.1 holds every case of the table
below: a missing or broken library, profiles that do not parse, a driver that hangs (fake NVML
``fault = hang``), nvidia-smi stand-ins that hang, fail, print garbage or bytes that are not UTF-8, and
options of the wrong type or value. For each case the table says whether the module succeeds or fails,
with which ``error_kind`` and message, and which warning it gives. Every case must end without a
traceback, with a result ansible-core accepts (it went through the JSON callback), a failure message on
one line, and within its time limits: a hanging source is given up after its timeout.
"""
import json
import os
import pathlib
import subprocess

import pytest

import ansible_run
from fakenvml.profile import PROFILES

ROOT = pathlib.Path(__file__).resolve().parents[2]
SMI_LINE = ("0, NVIDIA A100-SXM4-40GB, GPU-5d1c3b6e-7a9f-4e21-9c3d-000000000000, 40960, 00000000:07:00.0, "
            "0x20B010DE, 535.183.01, 8.0, Enabled, Enabled")
# a hanging nvidia-smi's children sleep this long: a figure no other process on the machine is likely to sleep,
# so that a leftover one is this test's own
HANG = "sleep 317.25"
# nvidia-smi stand-ins: name -> shell script body
SMI = {
    "hangs": "%s &\n%s\n" % (HANG, HANG),
    "not-utf8": "printf '%s\\n'\n" % SMI_LINE.replace("NVIDIA A100", "NVIDIA A100\\351"),
    "garbage": "echo 'this is not CSV'\n",
    "fails": "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.' >&2\nexit 9\n",
    "fails-not-utf8": "printf 'NVIDIA-SMI \\377 failed\\n' >&2\nexit 9\n",
}
DRIVER_NOT_LOADED = "NVML could not be initialised: Driver Not Loaded (NVML_ERROR_DRIVER_NOT_LOADED)"
NVML_HANGS = "NVML did not answer within 2 s (nvml_timeout): the driver or a GPU is not responding"
SMI_HANGS = "nvidia-smi did not answer within 2 s (command_timeout) and was stopped"
FAST = {"nvml_timeout": 2, "command_timeout": 2}

# name: (library build or None for no library, profile (a name, "absent", "directory" or "unknown-key"),
#        nvidia-smi stand-in or None, module arguments,
#        expected: ("ok", source, warning fragment or None) or ("failed", error_kind, message fragment),
#        (lowest, highest) seconds the task may take, or None)
CASES = {
    "no-library": (None, "h100x8", None, {}, ("ok", "none", None), None),
    "no-library-require": (None, "h100x8", None, {"require": True},
                           ("failed", "runtime", "No NVIDIA GPU found on this machine"), None),
    "no-config": ("full", "absent", None, {}, ("ok", "none", DRIVER_NOT_LOADED), None),
    "corrupt-profile": ("full", "corrupt", None, {},
                        ("ok", "none", "NVML could not be initialised: Unknown Error (NVML_ERROR_UNKNOWN): fakenvml: "),
                        None),
    "unknown-key": ("full", "unknown-key", None, {}, ("ok", "none", ":4: unknown key 'colour'"), None),
    "config-is-a-directory": ("full", "directory", None, {}, ("ok", "none", "read error"), None),
    "nvml-hangs": ("full", "hang", None, FAST, ("ok", "none", NVML_HANGS), (2, 20)),
    "nvml-hangs-require": ("full", "hang", None, dict(FAST, require=True), ("failed", "timeout", NVML_HANGS), (2, 20)),
    "smi-hangs": ("full", "driver-not-loaded", "hangs", FAST, ("ok", "none", SMI_HANGS), (2, 20)),
    "smi-hangs-require": ("full", "driver-not-loaded", "hangs", dict(FAST, require=True),
                          ("failed", "timeout", DRIVER_NOT_LOADED + "; " + SMI_HANGS), (2, 20)),
    "both-hang-require": ("full", "hang", "hangs", dict(FAST, require=True),
                          ("failed", "timeout", NVML_HANGS + "; " + SMI_HANGS), (4, 25)),
    "nvml-not-utf8": ("full", "non-utf8", None, {},
                      ("ok", "nvml", "NVML's name of GPU 0 is not valid UTF-8 (NVIDIA A100\\xe9-SXM4-40GB \\xff)"), None),
    "smi-not-utf8": ("full", "driver-not-loaded", "not-utf8", {},
                     ("ok", "nvidia-smi", "The output of nvidia-smi is not valid UTF-8 (0, NVIDIA A100\\xe9-SXM4-40GB"),
                     None),
    "smi-garbage": ("full", "driver-not-loaded", "garbage", {},
                    ("ok", "none", "nvidia-smi printed an unexpected line: this is not CSV"), None),
    "smi-fails": ("full", "driver-not-loaded", "fails", {},
                  ("ok", "none", "nvidia-smi failed (rc=9): NVIDIA-SMI has failed because"), None),
    "smi-fails-not-utf8": ("full", "driver-not-loaded", "fails-not-utf8", {},
                           ("ok", "none", "nvidia-smi failed (rc=9): NVIDIA-SMI \ufffd failed"), None),
    "timeout-not-a-number": ("full", "t4x1", None, {"command_timeout": "soon"},
                             ("failed", "input", "command_timeout"), None),
    "timeout-zero": ("full", "t4x1", None, {"nvml_timeout": 0},
                     ("failed", "input", "nvml_timeout must be at least 1 (seconds), got 0"), None),
    "require-not-a-bool": ("full", "t4x1", None, {"require": "maybe"}, ("failed", "input", "require"), None),
    "subset-not-a-list": ("full", "t4x1", None, {"gather_subset": {"a": 1}}, ("failed", "input", "gather_subset"),
                          None),
    "subset-unknown": ("full", "t4x1", None, {"gather_subset": ["!all", "gpus"]},
                       ("failed", "input", "Bad subset 'gpus'"), None),
    "replicas-without-sharing": ("full", "t4x1", None, {"replicas": 3},
                                 ("failed", "input", "replicas=3 needs sharing_strategy time-slicing or mps"), None),
    "unknown-option": ("full", "t4x1", None, {"colour": "red"}, ("failed", "input", "Unsupported parameters"), None),
}


@pytest.fixture(scope="module")
def libdir():
    out = subprocess.run([str(ROOT / "scripts" / "build-fakenvml.sh")], check=True, capture_output=True, text=True)
    return pathlib.Path(out.stdout.strip().splitlines()[-1])


def _config(tmp, profile):
    if profile == "absent":
        return tmp / "absent.conf"
    if profile == "directory":
        (tmp / "config-dir").mkdir(exist_ok=True)
        return tmp / "config-dir"
    if profile == "unknown-key":
        path = tmp / "unknown-key.conf"
        path.write_text("driver_version = 535.1\ncuda_driver_version = 12020\n[gpu]\ncolour = red\n")
        return path
    return PROFILES / ("%s.conf" % profile)


@pytest.fixture(scope="module")
def results(libdir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu_facts_reliability")
    (tmp / "no-library").mkdir()
    base_path = ":".join(p for p in os.environ["PATH"].split(":") if not (pathlib.Path(p) / "nvidia-smi").exists())
    tasks = []
    for name, (flavour, profile, smi, args, dummy, dummy) in CASES.items():
        path = base_path
        if smi:
            folder = tmp / ("smi-" + smi)
            if not folder.exists():
                folder.mkdir()
                (folder / "nvidia-smi").write_text("#!/bin/sh\n" + SMI[smi])
                (folder / "nvidia-smi").chmod(0o755)
            path = "%s:%s" % (folder, base_path)
        env = {"LD_LIBRARY_PATH": str(libdir / flavour) if flavour else str(tmp / "no-library"),
               "FAKENVML_CONFIG": str(_config(tmp, profile)), "PATH": path}
        tasks.append({"name": name, "kubegpu.nvidia.nvidia_gpu_facts": args, "environment": env,
                      "ignore_errors": True})
    playbook = tmp / "reliability.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    run = ansible_run.run_playbook(playbook, "localhost,", connection="local", timeout=300, cwd=str(tmp),
                                   env={"ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".cache" / "collections"),
                                        "ANSIBLE_NOCOLOR": "1"})
    # a task without an end (the run cut short) has no duration: its case fails on the missing entry
    durations = dict((task["task"]["name"], ansible_run.task_seconds(task))
                     for play in run.data["plays"] for task in play["tasks"] if "end" in task["task"]["duration"])
    return {"tasks": run.tasks(), "durations": durations, "stdout": run.stdout, "stderr": run.stderr}


def warnings_of(result):
    return [w["event"]["msg"] if isinstance(w, dict) else w for w in result.get("warnings", [])]


@pytest.mark.parametrize("name", sorted(CASES))
def test_case_ends_cleanly(results, name):
    dummy, dummy, dummy, dummy, expected, limits = CASES[name]
    result = results["tasks"][name]
    # no traceback, no raw module output: the module answered with a result
    assert "module_stderr" not in result and "module_stdout" not in result, result
    assert "Traceback" not in str(result.get("exception", "")), result.get("exception")
    assert result["changed"] is False
    if expected[0] == "ok":
        assert not result.get("failed"), result.get("msg")
        facts = result["ansible_facts"]["nvidia_gpu"]
        assert facts["source"] == expected[1]
        warnings = warnings_of(result)
        if expected[2] is None:
            assert warnings == []
        else:
            assert any(expected[2] in warning for warning in warnings), warnings
        assert all("\n" not in warning for warning in warnings)
    else:
        assert result["failed"] is True
        assert result["error_kind"] == expected[1], result
        assert expected[2] in result["msg"]
        assert "\n" not in result["msg"]
    if limits:
        lowest, highest = limits
        assert lowest <= results["durations"][name] <= highest, results["durations"][name]


def test_text_that_is_not_utf8_reaches_the_facts_replaced(results):
    facts = results["tasks"]["nvml-not-utf8"]["ansible_facts"]["nvidia_gpu"]
    device = facts["devices"][0]
    assert device["name"] == "NVIDIA A100\ufffd-SXM4-40GB \ufffd"
    assert device["mig"]["devices"][0]["name"] == "NVIDIA A100\ufffd-SXM4-40GB \ufffd MIG 3g.20gb"
    assert device["mig"]["devices"][0]["profile"] == "3g.20gb"
    # every label value stays a valid Kubernetes label value
    assert facts["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    smi = results["tasks"]["smi-not-utf8"]["ansible_facts"]["nvidia_gpu"]
    assert smi["devices"][0]["name"] == "NVIDIA A100\ufffd-SXM4-40GB"


def test_a_hanging_command_leaves_no_process_behind(results):
    assert results["tasks"]["smi-hangs"]
    procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert not [line for line in procs.splitlines() if "smi-hangs" in line or line.strip() == HANG]


def test_no_traceback_anywhere(results):
    assert "Traceback" not in results["stdout"] and "Traceback" not in results["stderr"]
