"""The role nvidia_container_toolkit: YAML says what runs where, its decisions live in Python.

The decisions themselves are tested where they are made: tests/unit/plugins/module_utils/test_toolkit_node.py
and test_toolkit_repo.py, tests/unit/plugins/modules/test_nvidia_container_toolkit_*.py and
tests/unit/plugins/filter/test_toolkit_runtimes.py. This file checks that the role holds no logic of its own
and that its variables, their documentation and the modules' defaults agree.
"""
import glob
import os
import re

import yaml

import role_render
from ansible_collections.kubegpu.nvidia.plugins.module_utils import toolkit_repo
from toolkit_repo import build as standin_repo

ROLE = os.path.join(role_render.ROLES, "nvidia_container_toolkit")


def role_files():
    return sorted(path for part in ("tasks", "vars", "defaults", "handlers")
                  for path in glob.glob(os.path.join(ROLE, part, "*.yml")))


def load(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def test_no_jinja_statement_raw_command_or_collection_source_read_in_the_role():
    assert role_files()
    for path in role_files():
        with open(path) as handle:
            text = handle.read()
        name = os.path.relpath(path, ROLE)
        assert "{%" not in text, name
        assert not re.search(r"ansible\.builtin\.raw\b|^\s*raw:", text, re.M), name
        assert "role_path" not in text, name
    # no vars/ at all: what the role knows about runtimes and families is in module_utils
    assert not os.path.exists(os.path.join(ROLE, "vars"))


def test_every_default_is_documented_with_the_same_default():
    defaults = load("defaults", "main.yml")
    options = load("meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(options)
    for name, value in defaults.items():
        if isinstance(value, str) and "{{" in value:
            assert options[name]["default"] == value, name
        elif "default" in options[name]:
            assert options[name]["default"] == value, name
        else:
            assert value is None, name


def test_the_default_signing_key_is_nvidias_everywhere():
    defaults = load("defaults", "main.yml")
    assert defaults["nvidia_container_toolkit_repo_gpg_key_fingerprints"] == list(toolkit_repo.NVIDIA_FINGERPRINTS)


def test_the_default_toolkit_is_the_current_line_and_the_standin_repository_carries_it():
    version = load("defaults", "main.yml")["nvidia_container_toolkit_version"]
    major, minor, _patch = (int(part) for part in version.split("-")[0].split("."))
    # at least 1.18.1 (fixes dropped containerd imports, toolkit issue 1382); 1.20 is the line the GPU Operator ships
    assert (major, minor) >= (1, 20)
    assert version in standin_repo.DEFAULT_VERSIONS
    # an older and a newer-than-1.18 version as well, for the pin and for the CDI path of toolkits before 1.18
    assert any(v.startswith("1.17.") for v in standin_repo.DEFAULT_VERSIONS)


def module_of(task):
    return next((key for key in task if key.startswith(("kubegpu.", "ansible.builtin."))), "block")


def test_the_node_is_read_by_a_module_of_the_collection_and_the_repository_written_by_another():
    assert module_of(load("tasks", "node.yml")[0]) == "kubegpu.nvidia.nvidia_container_toolkit_info"
    install = [module_of(task) for task in load("tasks", "install.yml")]
    assert "kubegpu.nvidia.nvidia_container_toolkit_repo" in install
    assert "ansible.builtin.get_url" not in install and "ansible.builtin.yum_repository" not in install
