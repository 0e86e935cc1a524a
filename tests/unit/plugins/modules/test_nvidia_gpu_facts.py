"""Unit tests for the nvidia_gpu_facts and nvidia_gpu_host_facts entry points (discovery stubbed at its boundary)."""
import ast
import json
import os
import pathlib

import pytest
from ansible.module_utils import _internal as ansible_internal
from ansible.module_utils.common import warnings as ansible_warnings
from ansible.module_utils.testing import patch_module_args

from ansible_collections.kubegpu.nvidia.plugins.action import nvidia_gpu_facts as action
from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_discovery as gd
from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_discovery_module as gm
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_smi import parse_query_output
from ansible_collections.kubegpu.nvidia.plugins.modules import nvidia_gpu_facts, nvidia_gpu_host_facts

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """Module warnings live in a process-wide registry; start every test with an empty one.

    Once controller code has been imported in this process (other tests render role templates),
    ansible-core sends module warnings to the controller's display instead: switch that off here.
    """
    monkeypatch.setattr(ansible_warnings, "_global_warnings", {})
    monkeypatch.setattr(ansible_internal, "is_controller", False)


@pytest.fixture(autouse=True)
def no_efi(monkeypatch, tmp_path):
    """No EFI firmware: the test machine's own must not leak into the facts."""
    monkeypatch.setattr(gd, "EFI_ROOT", str(tmp_path / "no-efi"))


def warning_texts(result):
    """Warnings as text (ansible-core 2.19 wraps each one in a WarningSummary)."""
    return [w["event"]["msg"] if isinstance(w, dict) else w for w in result.get("warnings", [])]


def run_module(capsys, args, check_mode=False, module=nvidia_gpu_facts):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit) as caught:
            module.main()
    result = json.loads(capsys.readouterr().out)
    return caught.value.code, result


def nvml_source(facts_file):
    with open(os.path.join(FIXTURES, facts_file)) as handle:
        recorded = json.load(handle)

    def discover(*dummy, **kwargs):
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
    # Ansible's own argument checks fail with the kind of every other bad input
    assert result["error_kind"] == "input"


def test_warnings_reach_the_user(capsys, monkeypatch):
    warning = "No NVIDIA GPU found: NVML could not be initialised: Unknown Error (NVML_ERROR_UNKNOWN)"
    monkeypatch.setattr(gm, "discover", lambda **kw: gd.Discovery(
        {"present": False, "count": 0, "source": "none", "driver_version": None, "cuda_driver_version": None,
         "devices": [], "machine": None, "labels": {}}, [warning], [], [warning]))
    rc, result = run_module(capsys, {})
    assert rc == 0 and result["changed"] is False
    assert warning_texts(result) == ["No NVIDIA GPU found: NVML could not be initialised: Unknown Error (NVML_ERROR_UNKNOWN)"]
    assert result["ansible_facts"]["nvidia_gpu"]["present"] is False


def test_require_fails_without_gpu(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(gd.gpu_discovery_nvml, "discover_nvml", lambda *a, **k: ("535.183.01", "12.2", []))
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
    def fail(*dummy, **kwargs):
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


def nvml_unusable(monkeypatch):
    def fail(*dummy, **kwargs):
        raise gd.SourceUnavailable("NVML could not be initialised: Driver Not Loaded (NVML_ERROR_DRIVER_NOT_LOADED)")
    monkeypatch.setattr(gd.gpu_discovery_nvml, "discover_nvml", fail)


def fake_smi(tmp_path, monkeypatch, body):
    script = tmp_path / "bin" / "nvidia-smi"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (script.parent, os.environ["PATH"]))


def test_require_with_a_hanging_nvidia_smi_fails_as_timeout(capsys, monkeypatch, tmp_path):
    nvml_unusable(monkeypatch)
    monkeypatch.setattr(gd, "PCI_DEVICES", str(tmp_path / "no-pci"))
    fake_smi(tmp_path, monkeypatch, "sleep 300\n")
    rc, result = run_module(capsys, {"require": True, "command_timeout": 1})
    assert rc == 1 and result["error_kind"] == "timeout"
    assert result["msg"] == ("No NVIDIA GPU found on this machine: No NVIDIA GPU found: NVML could not be initialised: "
                             "Driver Not Loaded (NVML_ERROR_DRIVER_NOT_LOADED); nvidia-smi did not answer within 1 s "
                             "(command_timeout) and was stopped")


def test_a_hanging_nvidia_smi_without_require_is_a_warning(capsys, monkeypatch, tmp_path):
    nvml_unusable(monkeypatch)
    monkeypatch.setattr(gd, "PCI_DEVICES", str(tmp_path / "no-pci"))
    fake_smi(tmp_path, monkeypatch, "sleep 300\n")
    rc, result = run_module(capsys, {"command_timeout": 1})
    assert rc == 0 and result["ansible_facts"]["nvidia_gpu"]["source"] == "none"
    assert warning_texts(result) == ["No NVIDIA GPU found: NVML could not be initialised: Driver Not Loaded "
                                     "(NVML_ERROR_DRIVER_NOT_LOADED); nvidia-smi did not answer within 1 s "
                                     "(command_timeout) and was stopped"]


@pytest.mark.parametrize("option", ["command_timeout", "nvml_timeout", "gather_timeout"])
def test_timeouts_below_one_second_are_refused(capsys, h100x8, option):
    rc, result = run_module(capsys, {option: 0})
    assert rc == 1 and result["error_kind"] == "input"
    assert result["msg"] == "%s must be at least 1 (seconds), got 0" % option


def test_the_small_module_refuses_host_facts(capsys, h100x8):
    rc, result = run_module(capsys, {"gather_subset": ["!all"]})
    assert rc == 1 and result["error_kind"] == "input"
    assert result["msg"].startswith("gather_subset needs the host fact collectors, which this module does not carry")


def test_the_host_facts_module_gathers_both(capsys, h100x8):
    rc, result = run_module(capsys, {"gather_subset": ["!all"]}, module=nvidia_gpu_host_facts)
    assert rc == 0 and result["changed"] is False
    facts = result["ansible_facts"]
    assert facts["nvidia_gpu"]["count"] == 8
    assert facts["ansible_distribution"] and facts["ansible_python_version"]


@pytest.mark.parametrize("args, module", [
    ({}, "kubegpu.nvidia.nvidia_gpu_facts"),
    ({"gather_subset": []}, "kubegpu.nvidia.nvidia_gpu_facts"),
    ({"gather_subset": ["!all"], "require": True}, "kubegpu.nvidia.nvidia_gpu_host_facts"),
    ({"gather_subset": "all"}, "kubegpu.nvidia.nvidia_gpu_host_facts"),
    # the GPU health needs no host fact collector
    ({"gather_subset": ["health"]}, "kubegpu.nvidia.nvidia_gpu_facts"),
    ({"gather_subset": "health"}, "kubegpu.nvidia.nvidia_gpu_facts"),
    ({"gather_subset": ["!all", "health"]}, "kubegpu.nvidia.nvidia_gpu_host_facts"),
    # nor does the driver state
    ({"gather_subset": ["driver"]}, "kubegpu.nvidia.nvidia_gpu_facts"),
    ({"gather_subset": "health,driver"}, "kubegpu.nvidia.nvidia_gpu_facts"),
    ({"gather_subset": ["driver", "network"]}, "kubegpu.nvidia.nvidia_gpu_host_facts"),
])
def test_the_action_picks_the_module(args, module):
    assert action.module_for(args) == module


def test_both_modules_document_the_options_they_take():
    """One option list for both modules: the doc fragment documents exactly ARGUMENT_SPEC."""
    import yaml
    from ansible_collections.kubegpu.nvidia.plugins.doc_fragments.nvidia_gpu_facts import ModuleDocFragment

    options = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"]
    assert set(options) == set(gm.ARGUMENT_SPEC)
    for name, spec in gm.ARGUMENT_SPEC.items():
        assert (options[name]["type"], options[name]["default"]) == (spec["type"], spec["default"]), name
    for module in (nvidia_gpu_facts, nvidia_gpu_host_facts):
        documentation = yaml.safe_load(module.DOCUMENTATION)
        assert "kubegpu.nvidia.nvidia_gpu_facts" in documentation["extends_documentation_fragment"]
        assert "options" not in documentation


COLLECTION = pathlib.Path(nvidia_gpu_facts.__file__).resolve().parents[2]


def imported_modules(path, seen=None):
    """Every module the file imports, following this collection's module_utils (as AnsiballZ packs them)."""
    seen = set() if seen is None else seen
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + ["%s.%s" % (node.module, alias.name) for alias in node.names]
        for name in names:
            if name in seen:
                continue
            seen.add(name)
            prefix = "ansible_collections.kubegpu.nvidia."
            if name.startswith(prefix):
                target = COLLECTION.joinpath(*name[len(prefix):].split(".")).with_suffix(".py")
                if target.is_file():
                    imported_modules(target, seen)
    return seen


def test_nvidia_gpu_facts_does_not_carry_the_host_fact_collectors():
    """The payload of every nvidia_gpu_facts call holds what it imports: not setup's ~70 collector files."""
    small = imported_modules(COLLECTION / "plugins" / "modules" / "nvidia_gpu_facts.py")
    assert not [name for name in small if name.startswith("ansible.module_utils.facts")]
    assert "ansible_collections.kubegpu.nvidia.plugins.module_utils.host_facts" not in small
    full = imported_modules(COLLECTION / "plugins" / "modules" / "nvidia_gpu_host_facts.py")
    assert "ansible.module_utils.facts.ansible_collector" in full


NVML_GONE = {"signal": "nvml", "severity": "unhealthy", "action": "none", "reason": "NVML driver not loaded"}
NVML_HANGS = dict(NVML_GONE, action="reboot_node", reason="NVML did not answer within 30 s")
ECC = {"signal": "ecc", "severity": "unhealthy", "action": "reset_gpu", "gpu": 1, "reason": "GPU 1: 2 ECC"}


@pytest.mark.parametrize("facts, health, severity", [
    # NVML read the GPUs: its verdict stands, whatever source the facts fell back to (a lost GPU)
    ({"source": "nvml", "present": True}, {"severity": "unhealthy", "gpus": [{}], "findings": [ECC]}, "unhealthy"),
    ({"source": "pci", "present": True}, {"severity": "unhealthy", "gpus": [{}], "findings": [ECC]}, "unhealthy"),
    # no driver yet (GPUs on the PCI bus only), or no GPU: unknown, so that no gate taints them
    ({"source": "pci", "present": True}, {"severity": "unhealthy", "gpus": [], "findings": [NVML_GONE]}, "unknown"),
    ({"source": "none", "present": False}, {"severity": "unhealthy", "gpus": [], "findings": [NVML_GONE]}, "unknown"),
    # a driver that hangs is a fault of the node
    ({"source": "pci", "present": True}, {"severity": "unhealthy", "gpus": [], "findings": [NVML_HANGS]}, "unhealthy"),
])
def test_node_health_unknown_only_without_nvml_and_driver(facts, health, severity):
    health = dict(health, action="x", reason="r")
    result = gm.node_health(facts, {}, None, read=lambda params, which: health)
    assert result["severity"] == severity
    if severity == "unknown":
        assert result["findings"] == [] and result["action"] == "none"
        assert result["reason"] == ("no GPU found" if not facts["present"] else
                                    "NVML cannot be used (NVML driver not loaded; GPU facts from pci): the health is "
                                    "read once the driver answers")


@pytest.mark.parametrize("args, message", [
    ({"driver_options": {"packages": ["nvidia-driver-570"]}},
     "driver_options is only read when gather_subset lists driver"),
    ({"gather_subset": ["driver"], "driver_options": {"colour": "red"}}, "driver_options: "),
    ({"gather_subset": ["driver"], "driver_options": {"packages": "x", "read_files": {"a": 1}}}, "driver_options: "),
])
def test_driver_options_are_checked_before_anything_is_read(capsys, h100x8, monkeypatch, args, message):
    def no_read(*dummy):
        raise AssertionError("the node was read")
    monkeypatch.setattr(gm.driver_node, "gather", no_read)
    rc, result = run_module(capsys, args)
    assert rc == 1 and result["error_kind"] == "input"
    assert result["msg"].startswith(message) and "\n" not in result["msg"]


def test_the_driver_subset_reads_with_the_given_options(capsys, h100x8, monkeypatch):
    """nvidia_gpu.driver_state: driver_node.gather (nvidia_driver_info's read) with the options filled in, and
    those options under ``options``, in the small module."""
    seen = []

    def read(module, params):
        seen.append(dict(params))
        return {"installed": {"nvidia-driver-570": "570.172.08-1"}, "loaded": {"version": "570.172.08"}}
    monkeypatch.setattr(gm.driver_node, "gather", read)
    rc, result = run_module(capsys, {"gather_subset": ["driver"], "driver_options": {"packages": ["nvidia-driver-570"]}})
    assert rc == 0 and result["changed"] is False
    state = result["ansible_facts"]["nvidia_gpu"]["driver_state"]
    assert seen == [dict(gm.driver_node.check_params({}), packages=["nvidia-driver-570"])]
    assert state == {"installed": {"nvidia-driver-570": "570.172.08-1"}, "loaded": {"version": "570.172.08"},
                     "options": seen[0]}
    assert result["ansible_facts"]["nvidia_gpu"]["count"] == 8
    # without the subset, no driver state and no read
    seen[:] = []
    rc, result = run_module(capsys, {})
    assert rc == 0 and "driver_state" not in result["ansible_facts"]["nvidia_gpu"] and seen == []
