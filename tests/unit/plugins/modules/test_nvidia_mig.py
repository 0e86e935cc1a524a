"""Unit tests for nvidia_mig's entry point: its documentation against its argument spec, and mig_module.work with
the NVML session replaced at the boundary (GPUs from tests/support/mig_profiles.py).
The module against the real pynvml and the fake NVML: tests/functional/test_mig_module.py."""
import json

import pytest
import yaml
from ansible.module_utils import _internal as ansible_internal
from ansible.module_utils.common import warnings as ansible_warnings
from ansible.module_utils.testing import patch_module_args

import mig_profiles as fx
from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_module as mm
from ansible_collections.kubegpu.nvidia.plugins.modules import nvidia_mig


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(ansible_warnings, "_global_warnings", {})
    monkeypatch.setattr(ansible_internal, "is_controller", False)


def test_documentation_matches_the_argument_spec():
    options = yaml.safe_load(nvidia_mig.DOCUMENTATION)["options"]
    assert set(options) == set(mm.ARGUMENT_SPEC)
    for name, spec in mm.ARGUMENT_SPEC.items():
        documented = options[name]
        assert documented["type"] == spec["type"], name
        assert documented.get("default") == spec.get("default"), name
        assert bool(documented.get("required")) == bool(spec.get("required")), name
    yaml.safe_load(nvidia_mig.EXAMPLES)
    assert {"changed_gpus", "reset_required", "reboot_required", "mig_devices", "plan"} <= set(
        yaml.safe_load(nvidia_mig.RETURN))


def work(args, gpus, check_mode=False, diff=False):
    sessions = []

    def session(reader):
        sessions.append(reader)
        return [dict(gpu) for gpu in gpus]

    with patch_module_args(dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff)):
        module = mm.MigModule()
    return mm.work(module, session=session, run_command=lambda argv: (127, "", "")), sessions


def test_check_mode_plans_from_one_read_and_shows_the_diff():
    gpus = fx.node("A100-40GB", count=2, current=True)
    result, sessions = work({"config": "all-balanced"}, gpus, check_mode=True, diff=True)
    assert len(sessions) == 1
    assert result["changed"] is True and result["changed_gpus"] == [0, 1]
    assert result["diff"]["after"].splitlines()[1] == (
        "GPU 1 (NVIDIA A100-SXM4-40GB): MIG enabled; 1g.5gb x2 (2:1, 3:1), 2g.10gb (0:2), 3g.20gb (4:4)")
    assert result["mig_devices"]["resources"] == {"nvidia.com/mig-1g.5gb": 4, "nvidia.com/mig-2g.10gb": 2,
                                                  "nvidia.com/mig-3g.20gb": 2}


def test_user_configs_are_merged_over_the_shipped_ones():
    own = {"version": "v1", "mig-configs": {"all-balanced": [{"devices": "all", "mig-enabled": False}]}}
    result, _sessions = work({"config": "all-balanced", "configs": own}, fx.node("A100-40GB", count=1), check_mode=True)
    assert result["changed"] is False
    assert result["mig_devices"]["resources"] == {"nvidia.com/gpu": 1}


def test_module_main_fails_with_one_line_for_an_unknown_config(capsys):
    with patch_module_args({"config": "all-balancd"}):
        with pytest.raises(SystemExit) as caught:
            nvidia_mig.main()
    result = json.loads(capsys.readouterr().out)
    assert caught.value.code == 1
    assert result["msg"] == ("MIG config 'all-balancd' does not exist (did you mean 'all-balanced'?); 81 configs are "
                             "known, the shipped ones and your own")
    assert result["error_kind"] == "input"


def test_configs_and_configs_file_exclude_each_other(capsys):
    with patch_module_args({"config": "x", "configs": {}, "configs_file": "/x"}):
        with pytest.raises(SystemExit):
            nvidia_mig.main()
    result = json.loads(capsys.readouterr().out)
    assert result["msg"] == "parameters are mutually exclusive: configs|configs_file"
    assert result["error_kind"] == "input"
