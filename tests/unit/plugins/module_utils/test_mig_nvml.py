"""One function of plugins/module_utils/mig_nvml.py at a time, with stand-ins for the command runner and NVML.

The whole reader and applier run against the fake libnvidia-ml.so.1 in tests/functional/test_mig_module.py.
"""
from __future__ import absolute_import, division, print_function

import pytest

import mig_profiles as fx
from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_configs, mig_nvml, mig_plan


def runner(answers, calls):
    def run(argv):
        calls.append(argv)
        return answers.get(argv[0], (127, "", "not found"))
    return run


@pytest.mark.parametrize("systemctl, modules, blockers", [
    ((0, "active\n", ""), "nvidia 1 0 - Live\n", ["nvidia-persistenced is running"]),
    ((3, "inactive\n", ""), "nvidia_drm 1 0 - Live\nnvidia 1 0 - Live\n", ["nvidia_drm is loaded"]),
    ((0, "active\n", ""), "nvidia_drm 1 0 - Live\n", ["nvidia-persistenced is running", "nvidia_drm is loaded"]),
    ((127, "", "systemctl: command not found"), "nvidia_drmx 1 0 - Live\n", []),
])
def test_reset_blockers(tmp_path, systemctl, modules, blockers):
    path = tmp_path / "modules"
    path.write_text(modules)
    calls = []
    assert mig_nvml.reset_blockers(runner({"systemctl": systemctl}, calls), str(path)) == blockers
    assert calls == [["systemctl", "is-active", "nvidia-persistenced"]]


def test_reset_blockers_without_proc_modules(tmp_path):
    assert mig_nvml.reset_blockers(runner({}, []), str(tmp_path / "absent")) == []


def test_reset_gpus_one_at_a_time_and_stops_at_a_refusal():
    calls = []
    answers = {"nvidia-smi": (0, "GPU 00000000:10:00.0 was successfully reset.\nAll done.\n", "")}
    assert mig_nvml.reset_gpus([0, 2], runner(answers, calls)) is None
    assert calls == [["nvidia-smi", "-r", "-i", "0"], ["nvidia-smi", "-r", "-i", "2"]]
    refused = {"nvidia-smi": (3, "Resetting GPU 00000000:10:00.0 is not supported.\n", "")}
    calls = []
    assert mig_nvml.reset_gpus([0, 2], runner(refused, calls)) == (
        "nvidia-smi -r -i 0 failed: Resetting GPU 00000000:10:00.0 is not supported.")
    assert len(calls) == 1


@pytest.mark.parametrize("capability, mode, reset_required, needs", [
    ([8, 0], {"current": False, "pending": False}, True, True),    # Ampere: pending until a reset
    ([9, 0], {"current": False, "pending": False}, True, False),   # Hopper: at once
    ([9, 0], {"current": False, "pending": True}, True, True),     # already pending (busy or passthrough before)
    ([8, 0], {"current": True, "pending": True}, False, False),    # no mode change
    (None, {"current": False, "pending": False}, True, True),      # unknown architecture: assume a reset
])
def test_needs_reset(capability, mode, reset_required, needs):
    gpu = {"compute_capability": capability, "mode": mode}
    assert mig_nvml._needs_reset(gpu, {"reset_required": reset_required}) is needs


def test_apply_refuses_a_blocked_reset_before_any_nvml_session(tmp_path):
    gpus = fx.node("A100-40GB", count=2)
    for gpu in gpus:
        gpu.update(profiles=None, compute_capability=[8, 0])
    configs = mig_configs.shipped()
    node_plan = mig_plan.plan(gpus, configs, "all-balanced")
    sessions = []
    modules = tmp_path / "modules"
    modules.write_text("nvidia_drm 1 0 - Live\n")
    with pytest.raises(mig_nvml.ResetBlockedError) as caught:
        mig_nvml.apply(node_plan, gpus, sessions.append, runner({"systemctl": (3, "inactive", "")}, []), configs,
                       "all-balanced", modules_path=str(modules))
    assert caught.value.msg == ("MIG mode of GPU 0, 1 needs a GPU reset, but nvidia_drm is loaded; nothing was changed: "
                                "unload nvidia_drm (stop the display manager, then modprobe -r nvidia_drm) or reboot "
                                "the node")
    assert caught.value.details["reset_blocked_by"] == ["nvidia_drm is loaded"]
    assert sessions == []


class FakeLib(object):
    """The few pynvml names one function uses (nvidia-ml-py 13 raises NVMLLibraryMismatchError, not an NVMLError,
    from nvmlDeviceGetComputeRunningProcesses when the library lacks _v3)."""

    class NVMLError(Exception):
        def __init__(self, value):
            super(FakeLib.NVMLError, self).__init__(value)
            self.value = value

    class NVMLLibraryMismatchError(Exception):
        pass

    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_FUNCTION_NOT_FOUND = 13

    def __init__(self, v3=True, v2=True):
        self.v3 = v3
        if v2:
            self.nvmlDeviceGetComputeRunningProcesses_v2 = lambda handle: ["v2"]

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        if not self.v3:
            raise self.NVMLLibraryMismatchError("Unversioned function called")
        return ["v3"]

    def nvmlErrorString(self, code):
        return "Unknown Error"

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, index):
        raise self.NVMLError(999)


@pytest.mark.parametrize("v3, v2, answer", [(True, True, ["v3"]), (False, True, ["v2"])])
def test_running_processes_fall_back_to_v2(v3, v2, answer):
    assert mig_nvml._running(FakeLib(v3, v2), None) == answer


def test_running_processes_without_either_call_is_not_swallowed():
    with pytest.raises(FakeLib.NVMLLibraryMismatchError):
        mig_nvml._running(FakeLib(v3=False, v2=False), None)


def test_read_gpus_turns_an_nvml_failure_into_one_line():
    with pytest.raises(mig_nvml.MigApplyError) as caught:
        mig_nvml.read_gpus(FakeLib())
    assert caught.value.msg.startswith("MIG geometry not read: GPU 0: NVML failed: ")
    assert "\n" not in caught.value.msg


def test_reset_without_nvidia_smi_is_an_error_not_a_reboot():
    with pytest.raises(mig_nvml.MigApplyError) as caught:
        mig_nvml.reset_gpus([1], runner({}, []))
    assert caught.value.msg == ("MIG mode of GPU 1 is pending a reset, but nvidia-smi cannot be run (not found); "
                                "install it or reboot the node")


def test_apply_refuses_a_reset_without_nvidia_smi_before_any_nvml_session(tmp_path):
    gpus = fx.node("A100-40GB", count=1)
    gpus[0].update(profiles=None, compute_capability=[8, 0])
    configs = mig_configs.shipped()
    node_plan = mig_plan.plan(gpus, configs, "all-enabled")
    sessions = []
    with pytest.raises(mig_nvml.MigApplyError) as caught:
        mig_nvml.apply(node_plan, gpus, sessions.append, runner({}, []), configs, "all-enabled",
                       modules_path=str(tmp_path / "none"), which=lambda name: None)
    assert caught.value.msg == "MIG mode of GPU 0 needs a GPU reset, but nvidia-smi is not installed; nothing was changed"
    assert sessions == []
