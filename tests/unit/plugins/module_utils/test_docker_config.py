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
