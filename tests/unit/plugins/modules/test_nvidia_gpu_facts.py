"""Unit tests for the nvidia_gpu_facts module entry point (discovery stubbed at its boundary)."""
import json
import os

import pytest
from ansible.module_utils import _internal as ansible_internal
from ansible.module_utils.common import warnings as ansible_warnings
from ansible.module_utils.testing import patch_module_args

from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_discovery as gd
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_smi import parse_query_output
from ansible_collections.kubegpu.nvidia.plugins.modules import nvidia_gpu_facts

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """Module warnings live in a process-wide registry; start every test with an empty one.

    Once controller code has been imported in this process (other tests render role templates),
    ansible-core sends module warnings to the controller's display instead: switch that off here.
    """
    monkeypatch.setattr(ansible_warnings, "_global_warnings", {})
    monkeypatch.setattr(ansible_internal, "is_controller", False)


def warning_texts(result):
    """Warnings as text (ansible-core 2.19 wraps each one in a WarningSummary)."""
    return [w["event"]["msg"] if isinstance(w, dict) else w for w in result.get("warnings", [])]


def run_module(capsys, args, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit) as caught:
            nvidia_gpu_facts.main()
    result = json.loads(capsys.readouterr().out)
    return caught.value.code, result


def nvml_source(facts_file):
    with open(os.path.join(FIXTURES, facts_file)) as handle:
        recorded = json.load(handle)

    def discover(*dummy):
        return recorded["driver_version"], recorded["cuda_driver_version"], recorded["devices"]
    return discover


@pytest.fixture
def h100x8(monkeypatch):
    monkeypatch.setattr(gd.gpu_discovery_nvml, "discover_nvml", nvml_source("nvml_h100x8.json"))
    monkeypatch.setattr(gd, "DMI_PRODUCT_NAME", "/nonexistent")


def test_returns_facts_and_never_changes(capsys, h100x8):
    rc, result = run_module(capsys, {})
    assert rc == 0
    assert result["changed"] is False
    facts = result["ansible_facts"]["nvidia_gpu"]
    assert facts["source"] == "nvml" and facts["count"] == 8 and facts["present"] is True
    assert facts["labels"]["nvidia.com/gpu.count"] == "8"
    assert facts["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert "warnings" not in result


def test_check_mode_gives_the_same_facts(capsys, h100x8):
    dummy, normal = run_module(capsys, {})
    rc, checked = run_module(capsys, {}, check_mode=True)
    assert rc == 0 and checked["changed"] is False
    assert checked["ansible_facts"] == normal["ansible_facts"]


def test_label_options(capsys, h100x8):
    dummy, result = run_module(capsys, {"sharing_strategy": "time-slicing", "replicas": 4, "mig_strategy": "single"})
    labels = result["ansible_facts"]["nvidia_gpu"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/mig.strategy"] == "single"


def test_replicas_without_sharing_is_refused(capsys, h100x8):
    rc, result = run_module(capsys, {"replicas": 4})
    assert rc == 1 and result["failed"] is True
    assert result["msg"] == "replicas=4 needs sharing_strategy time-slicing or mps"


@pytest.mark.parametrize("args, fragment", [
    ({"mig_strategy": "all"}, "value of mig_strategy must be one of: none, single, mixed"),
    ({"replicas": "many"}, "replicas"),
    ({"colour": "red"}, "Unsupported parameters"),
])
def test_argument_errors(capsys, h100x8, args, fragment):
    rc, result = run_module(capsys, args)
    assert rc == 1 and fragment in result["msg"]


def test_warnings_reach_the_user(capsys, monkeypatch):
    monkeypatch.setattr(nvidia_gpu_facts, "discover_gpus", lambda **kw: (
        {"present": False, "count": 0, "source": "none", "driver_version": None, "cuda_driver_version": None,
         "devices": [], "machine": None, "labels": {}},
        ["No NVIDIA GPU found: NVML could not be initialised: Unknown Error (NVML_ERROR_UNKNOWN)"]))
    rc, result = run_module(capsys, {})
    assert rc == 0 and result["changed"] is False
    assert warning_texts(result) == ["No NVIDIA GPU found: NVML could not be initialised: Unknown Error (NVML_ERROR_UNKNOWN)"]
    assert result["ansible_facts"]["nvidia_gpu"]["present"] is False


def test_require_fails_without_gpu(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(gd.gpu_discovery_nvml, "discover_nvml", lambda *a: ("535.183.01", "12.2", []))
    monkeypatch.setattr(gd, "PCI_DEVICES", str(tmp_path))
    rc, result = run_module(capsys, {"require": True})
    assert rc == 1
    assert result["msg"] == "No NVIDIA GPU found on this machine"
    assert "\n" not in result["msg"]
    assert result["ansible_facts"]["nvidia_gpu"]["count"] == 0


def test_require_passes_with_gpu(capsys, h100x8):
    rc, result = run_module(capsys, {"require": True})
    assert rc == 0 and result["ansible_facts"]["nvidia_gpu"]["count"] == 8


def test_nvidia_smi_runs_through_the_module(capsys, monkeypatch, tmp_path):
    """With NVML unusable, the module runs nvidia-smi (found on PATH) with LC_ALL=C."""
    def fail(*dummy):
        raise gd.SourceUnavailable("NVML could not be initialised: Driver Not Loaded (NVML_ERROR_DRIVER_NOT_LOADED)")
    monkeypatch.setattr(gd.gpu_discovery_nvml, "discover_nvml", fail)
    with open(os.path.join(FIXTURES, "nvidia-smi-a100x2.csv")) as handle:
        output = handle.read()
    script = tmp_path / "nvidia-smi"
    script.write_text("#!/bin/sh\n[ \"$LC_ALL\" = C ] || exit 3\ncat <<'EOF'\n%sEOF\n" % output)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path, os.environ["PATH"]))
    rc, result = run_module(capsys, {"require": True})
    assert rc == 0
    facts = result["ansible_facts"]["nvidia_gpu"]
    assert facts["source"] == "nvidia-smi"
    assert facts["devices"] == parse_query_output(output)[1]
    assert warning_texts(result)[0].startswith("GPU facts come from nvidia-smi: NVML could not be initialised")
