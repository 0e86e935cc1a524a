# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""daemon.json merging over the real-world corpus."""

from __future__ import absolute_import, division, print_function

import json
import os

import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import docker_config as dc
from ansible_collections.kubegpu.nvidia.plugins.module_utils.config_file import ConfigFileError, detect_json_indent

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "runtime")
NV = "/usr/bin/nvidia-container-runtime"
CORPUS = {
    "daemon-log-opts.json": 2,
    "daemon-registry-mirrors.json": 4,
    "daemon-other-runtime.json": 2,
    "daemon-default-runtime.json": "\t",
    "daemon-existing-nvidia.json": 4,
}


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_present_keeps_everything_else(name):
    text = fixture(name)
    before = json.loads(text)
    new = dc.edit_text(text, name, "present", "nvidia", NV, set_as_default=False, cdi=True)
    after = json.loads(new)
    assert after["runtimes"]["nvidia"]["path"] == NV
    assert after["features"] == {"cdi": True}
    for key, value in before.items():
        if key == "runtimes":
            for other, entry in value.items():
                if other != "nvidia":
                    assert after["runtimes"][other] == entry
        elif key == "default-runtime" and value == "nvidia":
            assert "default-runtime" not in after  # we held it and set_as_default is false
        else:
            assert after[key] == value
    assert detect_json_indent(new) == CORPUS[name]
    kept = [key for key in before if key in after]
    assert list(after)[: len(kept)] == kept  # key order kept
    assert dc.edit_text(new, name, "present", "nvidia", NV, False, True) is new


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_set_as_default_and_absent(name):
    text = fixture(name)
    new = dc.edit_text(text, name, "present", "nvidia", NV, set_as_default=True)
    assert json.loads(new)["default-runtime"] == "nvidia"
    assert dc.edit_text(new, name, "present", "nvidia", NV, True) is new
    gone = json.loads(dc.edit_text(new, name, "absent", "nvidia", NV))
    assert "nvidia" not in gone.get("runtimes", {})
    assert gone.get("default-runtime") != "nvidia"
    expected = json.loads(text)
    expected.get("runtimes", {}).pop("nvidia", None)
    if not expected.get("runtimes", True):
        del expected["runtimes"]
    # set_as_default replaced whatever default there was; absent does not bring it back
    expected.pop("default-runtime", None)
    assert gone == expected


def test_foreign_default_kept_unless_asked():
    text = fixture("daemon-default-runtime.json")
    kept = json.loads(dc.edit_text(text, "f", "present", "nvidia", NV, set_as_default=False))
    assert kept["default-runtime"] == "runsc"
    assert json.loads(dc.edit_text(text, "f", "absent", "nvidia", NV) or text)["default-runtime"] == "runsc"
    assert dc.edit_text(text, "f", "absent", "nvidia", NV) is text


def test_existing_entry_keeps_its_extra_keys():
    text = '{"runtimes": {"nvidia": {"path": "old", "runtimeArgs": ["--debug"]}}}'
    data = json.loads(dc.edit_text(text, "f", "present", "nvidia", NV))
    assert data["runtimes"]["nvidia"] == {"path": NV, "runtimeArgs": ["--debug"]}


@pytest.mark.parametrize("text", [None, "", "  \n"])
def test_missing_or_empty(text):
    new = dc.edit_text(text, "f", "present", "nvidia", NV)
    assert json.loads(new) == {"runtimes": {"nvidia": {"args": [], "path": NV}}}
    assert "\n    \"runtimes\"" in new
    assert dc.edit_text(text, "f", "absent", "nvidia", NV) is text


def test_cdi_false_is_written():
    assert json.loads(dc.edit_text("{}", "f", "present", "nvidia", NV, cdi=False))["features"] == {"cdi": False}


@pytest.mark.parametrize("text,line,col", [('{\n  "a": 1,\n}\n', 3, 1), ('{"a": }', 1, 7)])
def test_parse_error_position(text, line, col):
    with pytest.raises(ConfigFileError) as err:
        dc.edit_text(text, "/etc/docker/daemon.json", "present", "nvidia", NV)
    assert err.value.msg.startswith("/etc/docker/daemon.json is not valid JSON: line %d, column %d" % (line, col))


@pytest.mark.parametrize("text,match", [
    ("[]", "^f: expected a JSON object at the top level, found an array$"),
    ('{"runtimes": []}', "^f: runtimes must be an object, found an array$"),
    ('{"features": 1}', "^f: features must be an object, found a number$"),
    ('{"default-runtime": 1}', "^f: default-runtime must be a string, found a number$"),
    ('{"runtimes": {"nvidia": "x"}}', "^f: runtimes.nvidia must be an object, found a string$"),
])
def test_wrong_shapes(text, match):
    with pytest.raises(ConfigFileError, match=match):
        dc.edit_text(text, "f", "present", "nvidia", NV, cdi=True)


# ------------------------------------------------------------- names, several runtimes, upstream cases
# "upstream" cases follow NVIDIA/nvidia-container-toolkit pkg/config/engine/docker/docker_test.go
# (TestUpdateConfigDefaultRuntime, TestUpdateConfigRuntimes).

from ansible_collections.kubegpu.nvidia.plugins.module_utils import containerd_config as cc  # noqa: E402


@pytest.mark.parametrize("name", ['nv"idia', "nv[idia]", "nvidia\n", "nv idia", "-nvidia", "nv/idia", "nv\x01", ""])
def test_invalid_docker_names(name):
    with pytest.raises(ConfigFileError) as err:
        dc.check_name(name)
    assert err.value.msg in ("runtime name must not be empty",
                             "runtime name %s is not valid for Docker: letters, digits, '_', '.' and '-', starting with "
                             "a letter or digit (Docker's name rule)" % cc.show(name))


@pytest.mark.parametrize("name", ["runc", "io.containerd.runc.v2"])
def test_reserved_docker_names(name):
    with pytest.raises(ConfigFileError, match="is reserved by dockerd for its built-in runc"):
        dc.check_name(name)


@pytest.mark.parametrize("name", ["nvidia", "NVIDIA", "nvidia_cdi", "nvidia.legacy", "9"])
def test_valid_docker_names(name):
    dc.check_name(name)


@pytest.mark.parametrize("config,default,expected", [
    ({}, False, None),
    ({}, True, "NAME"),
    ({"default-runtime": "ALREADY_SET"}, False, "ALREADY_SET"),
    ({"default-runtime": "ALREADY_SET"}, True, "NAME"),
])
def test_upstream_default_runtime(config, default, expected):
    assert dc.apply(config, "present", "NAME", "/x", default).get("default-runtime") == expected


@pytest.mark.parametrize("config,expected", [
    ({}, {"runtime1": {"path": "/test/runtime/dir/runtime1", "args": []},
          "runtime2": {"path": "/test/runtime/dir/runtime2", "args": []}}),
    ({"runtimes": {"runtime1": {"path": "runtime1", "args": []}}},
     {"runtime1": {"path": "/test/runtime/dir/runtime1", "args": []},
      "runtime2": {"path": "/test/runtime/dir/runtime2", "args": []}}),
    ({"runtimes": {"not-nvidia": {"path": "some-other-path", "args": []}}},
     {"not-nvidia": {"path": "some-other-path", "args": []},
      "runtime1": {"path": "/test/runtime/dir/runtime1", "args": []},
      "runtime2": {"path": "/test/runtime/dir/runtime2", "args": []}}),
])
def test_upstream_runtimes(config, expected):
    runtimes = [cc.runtime("runtime1", "/test/runtime/dir/runtime1"), cc.runtime("runtime2", "/test/runtime/dir/runtime2")]
    assert dc.apply(config, "present", runtimes)["runtimes"] == expected


def test_several_runtimes_one_default_and_partial_absent():
    runtimes = [cc.runtime("nvidia", NV, True), cc.runtime("nvidia-cdi", NV + ".cdi"),
                cc.runtime("nvidia-legacy", NV + ".legacy")]
    text = dc.edit_text(fixture("daemon-other-runtime.json"), "f", "present", runtimes, cdi=True)
    data = json.loads(text)
    assert data["default-runtime"] == "nvidia"
    assert {n: e["path"] for n, e in data["runtimes"].items() if n.startswith("nvidia")} == {
        "nvidia": NV, "nvidia-cdi": NV + ".cdi", "nvidia-legacy": NV + ".legacy"}
    assert dc.edit_text(text, "f", "present", [runtimes[1]], cdi=True) is text  # the others stay
    fewer = json.loads(dc.edit_text(text, "f", "absent", [runtimes[0]]))
    assert "default-runtime" not in fewer and sorted(fewer["runtimes"]) == ["nvidia-cdi", "nvidia-legacy", "runsc"]
