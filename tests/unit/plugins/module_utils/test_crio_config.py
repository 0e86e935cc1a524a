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


# ------------------------------------------------------------- upstream behaviour, several runtimes, shapes
# "upstream" cases follow NVIDIA/nvidia-container-toolkit pkg/config/engine/crio/crio_test.go (TestAddRuntime)
# and cmd/nvidia-ctk-installer/container/operator/operator.go (nvidia, nvidia-cdi, nvidia-legacy).

from ansible_collections.kubegpu.nvidia.plugins.module_utils import containerd_config as cc  # noqa: E402

THREE = [cc.runtime("nvidia", NV, default=True), cc.runtime("nvidia-cdi", NV + ".cdi"),
         cc.runtime("nvidia-legacy", NV + ".legacy")]


def drop_in(tmp_path, crio_conf=None, **others):
    (tmp_path / "crio.conf.d").mkdir(exist_ok=True)
    if crio_conf is not None:
        (tmp_path / "crio.conf").write_text(crio_conf)
    for name, text in others.items():
        (tmp_path / "crio.conf.d" / name).write_text(text)
    return str(tmp_path / "crio.conf.d" / "99-nvidia.toml")


def runtimes_of(text):
    return tomlkit.parse(text).unwrap()["crio"]["runtime"]


@pytest.mark.parametrize("conf,expected,source", [
    # upstream "options from runc are imported"
    ('[crio.runtime.runtimes.runc]\nruntime_path = "/usr/bin/runc"\nruntime_type = "oci"\nrunc_option = "option"\n',
     {"runtime_path": "/usr/bin/test", "runtime_type": "oci", "runc_option": "option"}, "runc"),
    # upstream "options from default runtime are imported"
    ('[crio.runtime]\ndefault_runtime = "default"\n[crio.runtime.runtimes.default]\nruntime_path = "/usr/bin/default"\n'
     'runtime_type = "oci"\ndefault_option = "option"\n',
     {"runtime_path": "/usr/bin/test", "runtime_type": "oci", "default_option": "option"}, "default"),
    # upstream "options from the default runtime take precedence over runc"
    ('[crio.runtime]\ndefault_runtime = "default"\n[crio.runtime.runtimes.default]\nruntime_path = "/usr/bin/default"\n'
     'runtime_type = "oci"\ndefault_option = "option"\n[crio.runtime.runtimes.runc]\nruntime_path = "/usr/bin/runc"\n'
     'runc_option = "option"\n',
     {"runtime_path": "/usr/bin/test", "runtime_type": "oci", "default_option": "option"}, "default"),
    # differs from upstream: a VM runtime (Kata) as the default is not copied, runc is
    ('[crio.runtime]\ndefault_runtime = "kata"\n[crio.runtime.runtimes.kata]\nruntime_type = "vm"\nkata_option = 1\n'
     '[crio.runtime.runtimes.runc]\nruntime_path = "/usr/bin/runc"\nrunc_option = "option"\n',
     {"runtime_path": "/usr/bin/test", "runtime_type": "oci", "runc_option": "option"}, "runc"),
    # upstream "empty config not default runtime"
    (None, {"runtime_path": "/usr/bin/test", "runtime_type": "oci"}, None),
])
def test_upstream_options(tmp_path, conf, expected, source):
    path = drop_in(tmp_path, conf)
    info = {}
    text = crio_config.edit_text(None, path, "present", [cc.runtime("test", "/usr/bin/test")], info=info)
    assert runtimes_of(text) == {"runtimes": {"test": expected}}
    assert info["options_source"] == source


def test_upstream_existing_runtime_default_and_not(tmp_path):
    """upstream "runtime already exists in config, (not) default runtime"."""
    path = drop_in(tmp_path)
    default = crio_config.edit_text(None, path, "present", "test", "/usr/bin/test", set_as_default=True)
    assert runtimes_of(default)["default_runtime"] == "test"
    assert crio_config.edit_text(default, path, "present", "test", "/usr/bin/test", True) is default
    not_default = crio_config.edit_text(default, path, "present", "test", "/usr/bin/test", False)
    assert "default_runtime" not in runtimes_of(not_default)


def test_three_runtimes_and_runs_that_keep_each_other(crio_dir):
    path = str(crio_dir / "crio.conf.d" / "99-nvidia.toml")
    once = crio_config.edit_text(None, path, "present", THREE)
    data = runtimes_of(once)
    assert data["default_runtime"] == "nvidia"
    assert {n: t["runtime_path"] for n, t in data["runtimes"].items()} == {
        "nvidia": NV, "nvidia-cdi": NV + ".cdi", "nvidia-legacy": NV + ".legacy"}
    assert all(t["runtime_root"] == "/run/crun" for t in data["runtimes"].values())
    step = None
    for item in THREE:
        step = crio_config.edit_text(step, path, "present", [item])
    assert runtimes_of(step) == data  # one run per runtime: nothing lost, the first default kept
    assert crio_config.edit_text(step, path, "present", [THREE[2]]) is step
    fewer = crio_config.edit_text(step, path, "absent", [THREE[0]])
    assert sorted(runtimes_of(fewer)["runtimes"]) == ["nvidia-cdi", "nvidia-legacy"]
    assert "default_runtime" not in runtimes_of(fewer)
    assert crio_config.edit_text(fewer, path, "absent", THREE[1:]) is None


@pytest.mark.parametrize("text,message", [
    ("crio = 5\n", "crio must be a table, found an integer"),
    ('[crio]\nruntime = "x"\n', "crio.runtime must be a table, found a string"),
    ("[crio.runtime]\nruntimes = 5\n", "crio.runtime.runtimes must be a table, found an integer"),
    ("[crio.runtime.runtimes]\nrunc = 5\n", "crio.runtime.runtimes.runc must be a table, found an integer"),
    ("[crio.runtime]\ndefault_runtime = 1\n", "crio.runtime.default_runtime must be a string, found an integer"),
    ("[crio.runtime.runtimes.runc]\nruntime_type = []\n",
     "crio.runtime.runtimes.runc.runtime_type must be a string, found an array"),
])
@pytest.mark.parametrize("where", ["crio.conf", "10-other.conf", ".hidden.conf", "sub/20-deeper.conf", "drop-in"])
def test_wrong_shapes_name_file_and_key(tmp_path, text, message, where):
    path = drop_in(tmp_path)
    current = None
    if where == "crio.conf":
        broken = tmp_path / "crio.conf"
    elif where == "drop-in":
        broken, current = tmp_path / "crio.conf.d" / "99-nvidia.toml", text
    else:
        broken = tmp_path / "crio.conf.d" / where
        broken.parent.mkdir(exist_ok=True)
    broken.write_text(text)
    with pytest.raises(ConfigFileError) as err:
        crio_config.edit_text(current, path, "present", THREE)
    assert err.value.msg == "%s: %s" % (broken, message)


def test_files_are_read_in_crio_order(tmp_path):
    """CRI-O walks crio.conf.d (Go filepath.Walk): lexical, depth first, hidden files too."""
    path = drop_in(tmp_path, None, **{"10-a.conf": "", ".z-hidden": ""})
    (tmp_path / "crio.conf.d" / "50-sub").mkdir()
    (tmp_path / "crio.conf.d" / "50-sub" / "x.conf").write_text("")
    (tmp_path / "crio.conf.d" / "99-nvidia.toml").write_text("")
    names = [p[len(str(tmp_path)) + 1:] for p in crio_config.source_files(path)]
    assert names == ["crio.conf", "crio.conf.d/.z-hidden", "crio.conf.d/10-a.conf", "crio.conf.d/50-sub/x.conf"]


def test_effective_configuration_from_crio_status_config(tmp_path):
    path = drop_in(tmp_path, '[crio.runtime]\ndefault_runtime = "runc"\n')
    status = {"crio": {"runtime": {"default_runtime": "crun", "runtimes": {
        "crun": {"runtime_path": "/usr/bin/crun", "runtime_type": "oci", "runtime_root": "/run/crun",
                 "monitor_env": [], "privileged_without_host_devices": False},
        "runc": {"runtime_path": "/usr/bin/runc", "runtime_type": "oci", "runtime_root": "/run/runc"}}}}}
    info = {}
    text = crio_config.edit_text(None, path, "present", THREE, effective=status, info=info)
    assert info["options_source"] == "crun"
    assert runtimes_of(text)["runtimes"]["nvidia-cdi"] == {"runtime_path": NV + ".cdi", "runtime_type": "oci",
                                                           "runtime_root": "/run/crun"}


def test_crio_conf_is_never_the_drop_in():
    with pytest.raises(ConfigFileError, match="^/etc/crio/crio.conf is CRI-O's main configuration"):
        crio_config.check_path("/etc/crio/crio.conf")


@pytest.mark.parametrize("name", ["NVIDIA", "nv.idia", 'nv"idia', "nvidia\n"])
def test_names(name):
    with pytest.raises(ConfigFileError, match="is not valid for CRI-O: a CRI runtime is chosen by the handler"):
        crio_config.check_name(name)
