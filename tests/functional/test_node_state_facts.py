"""nvidia_gpu_facts' driver subset returns what nvidia_driver_info returns on the same host (one read, one
implementation), run by ansible-playbook over the real pynvml and the fake libnvidia-ml.so.1 as
test_gpu_facts_module.py runs the facts.

This machine's packages, kernels and DKMS are what they are; both reads see the same ones in the same run. The
EFI variables come from a fake directory (Secure Boot on, a MOK certificate waiting for enrollment: the EFI
variable layout of tests/unit/plugins/module_utils/test_secure_boot.py), so that every branch of the state is set.
"""
import json
import pathlib
import subprocess

import pytest

import ansible_run
from fakenvml.profile import PROFILES

ROOT = pathlib.Path(__file__).resolve().parents[2]
SECURE_BOOT_GUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"


@pytest.fixture(scope="module")
def libdir():
    out = subprocess.run([str(ROOT / "scripts" / "build-fakenvml.sh")], check=True, capture_output=True, text=True)
    return pathlib.Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def reads(libdir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("node_state")
    efivars = tmp / "efivars"
    efivars.mkdir()
    # attributes (4 bytes) then the value: SecureBoot=1, SetupMode=0
    (efivars / ("SecureBoot-%s" % SECURE_BOOT_GUID)).write_bytes(b"\x06\x00\x00\x00\x01")
    (efivars / ("SetupMode-%s" % SECURE_BOOT_GUID)).write_bytes(b"\x06\x00\x00\x00\x00")
    conf = tmp / "kubegpu-nvidia.conf"
    conf.write_text("options nvidia NVreg_OpenRmEnableUnsupportedGpus=1\n")
    options = {"packages": ["nvidia-driver-570-server", "libc6"], "read_files": [str(conf), str(tmp / "absent")],
               "efivars_dir": str(efivars), "mok_certificate": str(tmp / "mok.pub")}
    env = {"LD_LIBRARY_PATH": str(libdir / "full"), "FAKENVML_CONFIG": str(PROFILES / "t4x1.conf")}
    tasks = [
        {"name": "facts", "kubegpu.nvidia.nvidia_gpu_facts": {"gather_subset": ["driver"], "driver_options": options},
         "environment": env},
        {"name": "facts-check-mode", "kubegpu.nvidia.nvidia_gpu_facts": {"gather_subset": ["health", "driver"],
                                                                         "driver_options": options},
         "environment": env, "check_mode": True},
        {"name": "info", "kubegpu.nvidia.nvidia_driver_info": options},
        {"name": "facts-defaults", "kubegpu.nvidia.nvidia_gpu_facts": {"gather_subset": "driver"}, "environment": env},
        {"name": "info-defaults", "kubegpu.nvidia.nvidia_driver_info": {}},
        {"name": "bad-option", "kubegpu.nvidia.nvidia_gpu_facts": {"gather_subset": ["driver"],
                                                                   "driver_options": {"packages": "x", "colour": 1}},
         "environment": env, "ignore_errors": True},
    ]
    playbook = tmp / "node_state.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    run = ansible_run.run_playbook(playbook, "localhost,", connection="local", timeout=300, cwd=str(tmp),
                                   env={"ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".cache" / "collections"),
                                        "ANSIBLE_NOCOLOR": "1"})
    found = run.tasks()
    return found, options


def info_state(result):
    assert not result.get("failed"), result.get("msg")
    return dict((key, value) for key, value in result.items()
                if key not in ("changed", "invocation", "warnings", "deprecations", "_ansible_no_log", "action"))


@pytest.mark.parametrize("facts, info", [("facts", "info"), ("facts-check-mode", "info"),
                                         ("facts-defaults", "info-defaults")])
def test_the_driver_subset_returns_what_nvidia_driver_info_returns(reads, facts, info):
    found, _options = reads
    result = found[facts]
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is False
    state = dict(result["ansible_facts"]["nvidia_gpu"]["driver_state"])
    state.pop("options")
    expected = info_state(found[info])
    assert state == expected
    # the GPU facts are there too, from the fake NVML, in the same module run
    assert result["ansible_facts"]["nvidia_gpu"]["source"] == "nvml"
    assert result["ansible_facts"]["nvidia_gpu"]["count"] == 1


def test_the_state_names_the_options_it_was_read_with(reads):
    found, options = reads
    state = found["facts"]["ansible_facts"]["nvidia_gpu"]["driver_state"]
    # every option of nvidia_driver_info, the given ones as given and the others at their defaults
    assert state["options"] == dict(options, available=[])
    assert state["secure_boot"]["enabled"] is True
    assert state["files"] == {options["read_files"][0]: "options nvidia NVreg_OpenRmEnableUnsupportedGpus=1\n",
                              options["read_files"][1]: None}
    assert found["facts-defaults"]["ansible_facts"]["nvidia_gpu"]["driver_state"]["options"]["packages"] == []


def test_a_bad_driver_option_is_one_line(reads):
    found, _options = reads
    result = found["bad-option"]
    assert result["failed"] is True and result["msg"].startswith("driver_options: ")
    assert "\n" not in result["msg"] and "Traceback" not in json.dumps(result)
