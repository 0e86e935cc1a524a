# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia_container_toolkit_cdi: the toolkit's nvidia-cdi-refresh units (1.18 and newer), else nvidia-ctk cdi generate.

The units and what they do follow deployments/systemd/nvidia-cdi-refresh.{path,service} of
NVIDIA/nvidia-container-toolkit v1.20.0 (the path unit watches modules.dep and /usr/bin/nvidia-ctk; the
service writes /var/run/cdi/nvidia.yaml). systemctl is replaced by a recorder here; the lab runs the real
units of the stand-in packages (extensions/molecule/container_runtime, tests/test_cdi.py).
"""

from __future__ import absolute_import, division, print_function

import json
import os

import pytest
from ansible.module_utils import _internal as ansible_internal
from ansible.module_utils.common import warnings as ansible_warnings
from ansible.module_utils.testing import patch_module_args

from ansible_collections.kubegpu.nvidia.plugins.module_utils import toolkit_node
from ansible_collections.kubegpu.nvidia.plugins.modules import nvidia_container_toolkit_cdi as mod

SPEC = "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n# libcuda.so.%s\n"


class Systemd:
    def __init__(self, tmp_path):
        self.state = {"LoadState": "loaded", "ActiveState": "inactive", "UnitFileState": "disabled"}
        self.calls = []
        self.output = tmp_path / "run-cdi.yaml"
        self.driver = "535.183.01"

    def as_method(self):
        """run_command as a method of AnsibleModule that answers from this fake systemd."""
        def run_command(module, argv, **kwargs):
            return self.run_command(module, argv, **kwargs)
        return run_command

    def run_command(self, module, argv, **kwargs):
        self.calls.append(argv)
        if argv[:2] == ["systemctl", "show"]:
            return 0, "\n".join("%s=%s" % item for item in self.state.items()) + "\n", ""
        if argv[0] == "systemctl":
            if argv[1] == "enable":
                self.state["UnitFileState"] = "enabled"
            elif argv[1:] == ["start", toolkit_node.CDI_REFRESH_PATH]:
                self.state["ActiveState"] = "active"
            elif argv[1:] == ["start", toolkit_node.CDI_REFRESH_SERVICE]:
                self.output.write_text(SPEC % self.driver)
            return 0, "", ""
        if argv[1:] == ["cdi", "generate"]:
            return 0, SPEC % self.driver, ""
        raise AssertionError(argv)


@pytest.fixture(name="systemd")
def fixture_systemd(tmp_path, monkeypatch):
    systemd = Systemd(tmp_path)
    monkeypatch.setattr(mod.AnsibleModule, "run_command", systemd.as_method())
    monkeypatch.setattr(toolkit_node, "CDI_REFRESH_OUTPUT", str(systemd.output))
    ctk = tmp_path / "nvidia-ctk"
    ctk.write_text("#!/bin/sh\n")
    systemd.ctk = str(ctk)
    return systemd


def run(capsys, systemd, check=False, diff=False, **args):
    args = dict(args, nvidia_ctk=systemd.ctk, _ansible_check_mode=check, _ansible_diff=diff)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            mod.main()
    return json.loads(capsys.readouterr().out)


def test_refresh_enables_and_starts_the_path_unit_and_generates_once(capsys, systemd):
    checked = run(capsys, systemd, check=True)
    assert checked["changed"] is True and checked["mode"] == "refresh"
    assert checked["actions"] == ["systemctl enable nvidia-cdi-refresh.path", "systemctl start nvidia-cdi-refresh.path",
                                  "systemctl start nvidia-cdi-refresh.service"]
    assert [c for c in systemd.calls if c[1] != "show"] == [] and not systemd.output.exists()

    done = run(capsys, systemd)
    assert done["actions"] == checked["actions"] and done["spec_path"] == str(systemd.output)
    assert systemd.output.read_text() == SPEC % "535.183.01"
    again = run(capsys, systemd)
    assert again["changed"] is False and again["actions"] == []
    # regenerate (the toolkit changed): the service runs again, nothing else
    assert run(capsys, systemd, regenerate=True)["actions"] == ["systemctl start nvidia-cdi-refresh.service"]


def test_refresh_warns_when_the_service_writes_nothing(capsys, systemd, monkeypatch):
    # module warnings reach the result only outside a controller process (see test_nvidia_gpu_facts.py)
    monkeypatch.setattr(ansible_warnings, "_global_warnings", {})
    monkeypatch.setattr(ansible_internal, "is_controller", False)
    monkeypatch.setattr(systemd, "output", systemd.output.parent / "never-written.yaml")
    monkeypatch.setattr(toolkit_node, "CDI_REFRESH_OUTPUT", str(systemd.output.parent / "elsewhere.yaml"))
    out = run(capsys, systemd)
    assert out["changed"] is True
    warnings = [w["event"]["msg"] if isinstance(w, dict) else w for w in out.get("warnings", [])]
    assert any("ran but wrote no %s" % toolkit_node.CDI_REFRESH_OUTPUT in w for w in warnings), out


def test_an_older_toolkit_writes_the_spec_with_nvidia_ctk_when_the_driver_changes(capsys, systemd, tmp_path):
    systemd.state["LoadState"] = "not-found"
    spec = tmp_path / "etc-cdi" / "nvidia.yaml"
    args = dict(spec_path=str(spec), driver_version="535.183.01")
    checked = run(capsys, systemd, check=True, diff=True, **args)
    assert checked["mode"] == "generate" and checked["changed"] is True and not spec.exists()
    assert checked["diff"]["after"] == SPEC % "535.183.01"
    assert run(capsys, systemd, **args)["changed"] is True and spec.read_text() == SPEC % "535.183.01"
    generated = len([c for c in systemd.calls if c[1:] == ["cdi", "generate"]])
    # the spec names the loaded driver: nvidia-ctk is not even run
    assert run(capsys, systemd, **args)["changed"] is False
    assert len([c for c in systemd.calls if c[1:] == ["cdi", "generate"]]) == generated
    # a new driver: the spec is written again
    systemd.driver = "550.127.08"
    out = run(capsys, systemd, spec_path=str(spec), driver_version="550.127.08", backup=True)
    assert out["changed"] is True and "550.127.08" in spec.read_text() and os.path.exists(out["backup_file"])


def test_without_nvidia_ctk_check_mode_reports_and_a_real_run_fails(capsys, systemd):
    systemd.ctk = "/nonexistent/nvidia-ctk"
    checked = run(capsys, systemd, check=True)
    assert checked["changed"] is True and checked["actions"] == ["set up once /nonexistent/nvidia-ctk is installed"]
    failed = run(capsys, systemd)
    assert failed["msg"] == "/nonexistent/nvidia-ctk is not installed: install the NVIDIA Container Toolkit first"


def test_refresh_mode_without_the_units_fails_clearly(capsys, systemd, monkeypatch):
    systemd.state["LoadState"] = "not-found"
    monkeypatch.setattr(mod, "UNIT_DIRS", ())
    failed = run(capsys, systemd, mode="refresh")
    assert failed["msg"].startswith("nvidia-cdi-refresh.path is not installed: the NVIDIA Container Toolkit ships it from 1.18")
