# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia_container_runtime_config: nvidia-container-runtime's config.toml, as `nvidia-ctk config --set` edits it.

Cases follow NVIDIA/nvidia-container-toolkit v1.20.0:
- cmd/nvidia-ctk/config/config_test.go (TestSetFlagToKeyValue): unknown and nested unknown keys are refused,
  booleans take true/false only, strings keep what they are given ("5", "true", "a=b"), lists are lists of strings;
- api/config/v1/toml_test.go (TestTomlSave): the file the toolkit writes carries defaults as comments
  (#debug = ...), and setting such a key uncomments it;
- api/config/v1/config.go, cli.go, runtime.go, hook.go, toolkit-cli.go, features.go: the keys and their types;
- internal/info/auto.go: the modes auto, legacy, csv, cdi and jit-cdi (the last new in 1.18).
The file the module edits is the stand-in packages' config.toml (tests/support/toolkit_repo/payload), which has
the layout and defaults the toolkit writes on install.
"""

from __future__ import absolute_import, division, print_function

import json
import os
import stat

import pytest
import tomlkit
from ansible.module_utils.testing import patch_module_args

from ansible_collections.kubegpu.nvidia.plugins.module_utils import nvidia_runtime_config as rc
from ansible_collections.kubegpu.nvidia.plugins.modules import nvidia_container_runtime_config as mod

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
DEFAULT = os.path.join(ROOT, "tests", "support", "toolkit_repo", "payload", "config.toml")


@pytest.fixture(name="config")
def fixture_config(tmp_path):
    path = tmp_path / "config.toml"
    with open(DEFAULT) as handle:
        path.write_text(handle.read().replace("@VERSION@", "1.20.0-1"))
    os.chmod(str(path), 0o640)
    return path


def run(capsys, args, check=False, diff=False, ctk=None):
    args = dict(args, _ansible_check_mode=check, _ansible_diff=diff, nvidia_ctk=ctk or "/nonexistent/nvidia-ctk")
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            mod.main()
    return json.loads(capsys.readouterr().out)


def test_check_mode_then_apply_then_idempotent_keeping_comments_and_mode(capsys, config):
    original = config.read_text()
    args = dict(path=str(config), mode="cdi", cdi_annotation_prefixes=["cdi.k8s.io/", "nvidia.cdi.k8s.io/"],
                runtimes=["crun", "runc"], backup=True)
    checked = run(capsys, args, check=True, diff=True)
    assert checked["changed"] is True and config.read_text() == original
    assert '-mode = "auto"' not in checked["diff"]["after"] and 'mode = "cdi"' in checked["diff"]["after"]

    done = run(capsys, args)
    assert done["changed"] is True and os.path.exists(done["backup_file"])
    doc = tomlkit.parse(config.read_text())
    runtime = doc["nvidia-container-runtime"]
    assert runtime["mode"] == "cdi" and runtime["runtimes"] == ["crun", "runc"]
    assert runtime["modes"]["cdi"]["annotation-prefixes"] == ["cdi.k8s.io/", "nvidia.cdi.k8s.io/"]
    # comments, other settings and the file's mode stay
    text = config.read_text()
    assert "#swarm-resource = \"DOCKER_RESOURCE_GPU\"" in text and "# /etc/nvidia-container-runtime/config.toml" in text
    assert doc["nvidia-container-cli"]["ldconfig"] == "@/sbin/ldconfig"
    assert stat.S_IMODE(os.stat(str(config)).st_mode) == 0o640
    assert done["settings"]["nvidia-container-runtime.mode"] == "cdi"

    again = run(capsys, args)
    assert again["changed"] is False and "backup_file" not in again


def test_a_commented_default_is_set_in_its_place(capsys, config):
    # toml_test.go "set debug to default uncomments": #debug = "..." becomes debug = "..."
    run(capsys, dict(path=str(config), container_cli={"debug": "/var/log/nvidia-container-toolkit.log"},
                     settings={"nvidia-container-runtime.debug": "/var/log/nvidia-container-runtime.log"}))
    lines = config.read_text().splitlines()
    assert 'debug = "/var/log/nvidia-container-toolkit.log"' in lines
    assert '#debug = "/var/log/nvidia-container-toolkit.log"' not in lines
    # in place: right under its table header, where the comment was
    cli = lines.index("[nvidia-container-cli]")
    assert lines[cli + 1] == 'debug = "/var/log/nvidia-container-toolkit.log"'
    runtime = lines.index("[nvidia-container-runtime]")
    assert lines[runtime + 1] == 'debug = "/var/log/nvidia-container-runtime.log"'


def test_null_removes_a_key_and_new_tables_are_added(capsys, config):
    run(capsys, dict(path=str(config), settings={"disable-require": None,
                                                 "features.allow-ldconfig-from-container": True,
                                                 "nvidia-container-runtime.modes.legacy.cuda-compat-mode": "hook"}))
    doc = tomlkit.parse(config.read_text())
    assert "disable-require" not in doc
    assert doc["features"]["allow-ldconfig-from-container"] is True
    assert doc["nvidia-container-runtime"]["modes"]["legacy"]["cuda-compat-mode"] == "hook"


def test_a_missing_file_is_created_with_the_settings_or_refused(capsys, tmp_path):
    path = tmp_path / "etc" / "config.toml"
    done = run(capsys, dict(path=str(path), mode="legacy"))
    assert done["changed"] is True and tomlkit.parse(path.read_text()) == {"nvidia-container-runtime": {"mode": "legacy"}}
    failed = run(capsys, dict(path=str(tmp_path / "none.toml"), mode="legacy", create=False))
    assert failed["msg"].endswith("none.toml does not exist (install the NVIDIA Container Toolkit, or create: true)")


@pytest.mark.parametrize("settings, message", [
    # config_test.go: "option not present returns an error", "undefined nexted option returns error"
    ({"undefined": "new-value"}, "nvidia-container-runtime has no setting 'undefined'"),
    ({"nvidia-container-cli.undefined": True}, "nvidia-container-runtime has no setting 'nvidia-container-cli.undefined'"),
    # "invalid boolean option returns error"
    ({"disable-require": "something"}, "disable-require must be a boolean, not 'something'"),
    # a string option does not take another type; a list must hold strings
    ({"swarm-resource": 5}, "swarm-resource must be a string, not 5"),
    ({"nvidia-container-cli.environment": "x"}, "nvidia-container-cli.environment must be a list of strings, not 'x'"),
    ({"nvidia-container-runtime.modes.legacy.cuda-compat-mode": "fast"},
     "nvidia-container-runtime.modes.legacy.cuda-compat-mode must be one of disabled, hook, ldconfig, mount, not 'fast'"),
    ({"nvidia-container-cli.ldconfig": "/sbin/ldconfig"}, "nvidia-container-cli.ldconfig must start with @"),
    ({"debug": "/x"}, "no setting 'debug' (did you mean nvidia-container-cli.debug or nvidia-container-runtime.debug?)"),
])
def test_settings_the_configuration_does_not_have_fail_before_anything_is_written(capsys, config, settings, message):
    original = config.read_text()
    failed = run(capsys, dict(path=str(config), settings=settings))
    assert failed["failed"] is True and failed["error_kind"] == "input"
    assert message in failed["msg"] and "\n" not in failed["msg"]
    assert config.read_text() == original
    assert os.listdir(str(config.parent)) == ["config.toml"]


@pytest.mark.parametrize("value", ["string-value", "string-value=more", "true", "5"])
def test_string_settings_keep_their_value_as_given(value):
    # config_test.go: "string option returns value [with equals]", "treats bool/int value as string"
    assert rc.check_setting("swarm-resource", value) == value


def test_a_mode_the_installed_toolkit_does_not_know_is_refused(capsys, config, tmp_path):
    ctk = tmp_path / "nvidia-ctk"
    ctk.write_text("#!/bin/sh\necho 'NVIDIA Container Toolkit CLI version 1.17.8'\n")
    os.chmod(str(ctk), 0o755)
    failed = run(capsys, dict(path=str(config), mode="jit-cdi"), ctk=str(ctk))
    assert failed["msg"] == ("nvidia-container-runtime.mode = 'jit-cdi' needs NVIDIA Container Toolkit 1.18.0 or newer; "
                             "the node has 1.17.8")
    ctk.write_text("#!/bin/sh\necho 'NVIDIA Container Toolkit CLI version 1.20.0'\n")
    assert run(capsys, dict(path=str(config), mode="jit-cdi"), ctk=str(ctk))["changed"] is True
    # the mode option's choices are NVIDIA's modes
    assert run(capsys, dict(path=str(config), mode="magic"))["msg"].startswith("value of mode must be one of: auto, legacy")


def test_a_file_that_is_not_toml_is_named_and_left_alone(capsys, tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("[nvidia-container-runtime\nmode = 1\n")
    failed = run(capsys, dict(path=str(path), mode="cdi"))
    assert failed["msg"].startswith("%s is not valid TOML: " % path) and path.read_text().startswith("[nvidia")


def test_nothing_to_set_is_an_error(capsys, config):
    assert run(capsys, dict(path=str(config)))["msg"].startswith("no setting given")


def test_every_key_of_the_schema_is_a_path_of_the_default_file_or_an_optional_one():
    """The schema's tables are the file's tables (the keys NVIDIA writes by default exist under them)."""
    with open(DEFAULT) as handle:
        doc = tomlkit.parse(handle.read())
    present = rc.current_values(tomlkit.dumps(doc), list(rc.SCHEMA))
    for key in ("disable-require", "nvidia-container-cli.load-kmods", "nvidia-container-runtime.mode",
                "nvidia-container-runtime.modes.cdi.annotation-prefixes", "nvidia-container-runtime-hook.path",
                "nvidia-ctk.path"):
        assert key in present
        rc.check_setting(key, present[key])  # the defaults pass the schema's checks
