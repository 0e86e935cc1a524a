# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The CRI-O drop-in."""

from __future__ import absolute_import, division, print_function

import os
import shutil

import pytest
import tomlkit

from ansible_collections.kubegpu.nvidia.plugins.module_utils import crio_config
from ansible_collections.kubegpu.nvidia.plugins.module_utils.config_file import ConfigFileError

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "runtime")
NV = "/usr/bin/nvidia-container-runtime"


@pytest.fixture
def crio_dir(tmp_path):
    shutil.copy(os.path.join(FIXTURES, "crio.conf"), str(tmp_path / "crio.conf"))
    (tmp_path / "crio.conf.d").mkdir()
    return tmp_path


def test_copies_default_runtime(crio_dir):
    path = str(crio_dir / "crio.conf.d" / "99-nvidia.toml")
    text = crio_config.edit_text(None, path, "present", "nvidia", NV, set_as_default=True)
    data = tomlkit.parse(text).unwrap()
    assert data["crio"]["runtime"]["default_runtime"] == "nvidia"
    nvidia = data["crio"]["runtime"]["runtimes"]["nvidia"]
    assert nvidia == {
        "runtime_path": NV, "runtime_type": "oci", "runtime_root": "/run/crun",
        "monitor_path": "/usr/libexec/crio/conmon",
        "allowed_annotations": ["io.containerd.cri.runtime-handler"],
    }
    assert crio_config.edit_text(text, path, "present", "nvidia", NV, True) is text
    assert crio_config.edit_text(text, path, "absent", "nvidia", NV) is None


def test_later_drop_in_overrides_default(crio_dir):
    (crio_dir / "crio.conf.d" / "10-runc.conf").write_text('[crio.runtime]\ndefault_runtime = "runc"\n')
    path = str(crio_dir / "crio.conf.d" / "99-nvidia.toml")
    data = tomlkit.parse(crio_config.edit_text(None, path, "present", "nvidia", NV)).unwrap()
    assert data["crio"]["runtime"]["runtimes"]["nvidia"]["runtime_root"] == "/run/runc"
    assert "default_runtime" not in data["crio"]["runtime"]


def test_without_crio_conf(tmp_path):
    path = str(tmp_path / "crio.conf.d" / "99-nvidia.toml")
    data = tomlkit.parse(crio_config.edit_text(None, path, "present", "nvidia", NV)).unwrap()
    assert data == {"crio": {"runtime": {"runtimes": {"nvidia": {"runtime_path": NV, "runtime_type": "oci"}}}}}


def test_broken_drop_in_is_refused(crio_dir):
    path = str(crio_dir / "crio.conf.d" / "99-nvidia.toml")
    with pytest.raises(ConfigFileError, match="99-nvidia.toml is not valid TOML: line 1"):
        crio_config.edit_text("[crio\n", path, "present", "nvidia", NV)


def test_broken_crio_conf_is_reported(crio_dir):
    (crio_dir / "crio.conf").write_text("[crio.runtime\n")
    with pytest.raises(ConfigFileError, match="crio.conf is not valid TOML"):
        crio_config.edit_text(None, str(crio_dir / "crio.conf.d" / "99-nvidia.toml"), "present", "nvidia", NV)
