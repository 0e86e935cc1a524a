# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd configuration editing over the real-world corpus."""

from __future__ import absolute_import, division, print_function

import os

import pytest
import tomlkit

from ansible_collections.kubegpu.nvidia.plugins.module_utils import containerd_config as cc
from ansible_collections.kubegpu.nvidia.plugins.module_utils.config_file import ConfigFileError

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "runtime")
NV = "/usr/bin/nvidia-container-runtime"

# fixture -> (version, source runtime the nvidia table is copied from, SystemdCgroup expected on nvidia)
CORPUS = {
    "containerd-1.6-default.toml": (2, "runc", False),
    "containerd-1.7-default.toml": (2, "runc", False),
    "containerd-2.1-default.toml": (3, "runc", False),
    "containerd-2.x-systemd.toml": (3, "runc", True),
    "containerd-debian-12-package.toml": (2, None, False),
    "containerd-v1.toml": (1, "runc", True),
    "containerd-systemd-cgroup-comments.toml": (2, "runc", True),
    "containerd-existing-nvidia.toml": (2, None, True),
    "containerd-custom-default.toml": (2, "crun", True),
    "containerd-kata-default.toml": (2, "runc", True),
    "containerd-imports.toml": (2, "runc", True),
    "k3s-config.toml": (2, "runc", True),
    "rke2-config.toml": (3, "runc", True),
}


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def cri(data, version):
    return data["plugins"][cc.CRI_PLUGIN[version]]


def load(text):
    return cc.plain(tomlkit.parse(text))


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_present_content(name):
    version, source, systemd = CORPUS[name]
    text = fixture(name)
    new, got_version = cc.edit_text(text, name, "present", "nvidia", NV, set_as_default=True, cdi=True)
    assert got_version == version
    data = load(new)
    table = cri(data, version)
    nvidia = table["containerd"]["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"]["BinaryName"] == NV
    assert nvidia["options"].get("SystemdCgroup", False) is systemd
    assert table["containerd"]["default_runtime_name"] == "nvidia"
    assert table["enable_cdi"] is True
    if source:
        src = cri(load(text), version)["containerd"]["runtimes"][source]
        for key, value in src.items():
            if key not in ("runtime_type", "options"):
                assert nvidia[key] == value, key
        for key, value in src.get("options", {}).items():
            if key != "BinaryName":
                assert nvidia["options"][key] == value, key
    # every other runtime and every comment is still there
    before = load(text)
    for other, table_before in cri(before, version).get("containerd", {}).get("runtimes", {}).items():
        if other != "nvidia":
            assert table["containerd"]["runtimes"][other] == table_before
    for line in text.splitlines():
        if line.strip().startswith("#"):
            assert line in new.splitlines()


@pytest.mark.parametrize("name", sorted(CORPUS))
@pytest.mark.parametrize("set_as_default,cdi", [(False, None), (True, True), (False, False)])
def test_idempotent(name, set_as_default, cdi):
    text = fixture(name)
    once, _v = cc.edit_text(text, name, "present", "nvidia", NV, set_as_default, cdi)
    twice, _v = cc.edit_text(once, name, "present", "nvidia", NV, set_as_default, cdi)
    assert twice is once


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_untouched_lines_survive(name):
    """Only added lines and the changed default line differ: formatting of the rest is kept."""
    text = fixture(name)
    new, _v = cc.edit_text(text, name, "present", "nvidia", NV, set_as_default=False)
    old_lines = [line for line in text.splitlines() if "nvidia" not in line and line.strip()]
    new_lines = new.splitlines()
    missing = [line for line in old_lines if line not in new_lines]
    if name == "containerd-existing-nvidia.toml":
        missing = [line for line in missing if "runc.v1" not in line]
    assert missing == []


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_absent_after_present_restores(name):
    text = fixture(name)
    added, version = cc.edit_text(text, name, "present", "nvidia", NV, set_as_default=True)
    removed, _v = cc.edit_text(added, name, "absent", "nvidia", NV)
    data = load(removed)
    containerd = cri(data, version).get("containerd", {})
    assert "nvidia" not in containerd.get("runtimes", {})
    assert containerd.get("default_runtime_name", "runc") != "nvidia"
    original = load(text)
    if name != "containerd-existing-nvidia.toml":
        # custom defaults are handed back to runc, the containerd default
        expected = original
        orig_default = cri(original, version).get("containerd", {}).get("default_runtime_name")
        if orig_default not in (None, "runc"):
            cri(expected, version)["containerd"]["default_runtime_name"] = "runc"
        elif orig_default is None and "runc" in cri(original, version).get("containerd", {}).get("runtimes", {}):
            cri(expected, version)["containerd"]["default_runtime_name"] = "runc"
        assert data == expected
    again, _v = cc.edit_text(removed, name, "absent", "nvidia", NV)
    assert again is removed


def test_absent_keeps_foreign_default_and_cdi():
    text = fixture("containerd-custom-default.toml")
    assert cc.edit_text(text, "f", "absent", "nvidia", NV) == (text, 2)
    added, _v = cc.edit_text(text, "f", "present", "nvidia", NV, set_as_default=False, cdi=True)
    assert cri(load(added), 2)["containerd"]["default_runtime_name"] == "crun"
    removed, _v = cc.edit_text(added, "f", "absent", "nvidia", NV)
    assert cri(load(removed), 2)["enable_cdi"] is True
    assert cri(load(removed), 2)["containerd"]["default_runtime_name"] == "crun"


def test_existing_runtime_is_refreshed_not_replaced():
    text = fixture("containerd-existing-nvidia.toml")
    new, _v = cc.edit_text(text, "f", "present", "nvidia", NV)
    nvidia = cri(load(new), 2)["containerd"]["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"] == {"BinaryName": NV, "SystemdCgroup": True}
    assert nvidia["runtime_engine"] == ""  # kept from the existing table


def test_kata_default_is_not_copied():
    new, _v = cc.edit_text(fixture("containerd-kata-default.toml"), "f", "present", "nvidia", NV)
    nvidia = cri(load(new), 2)["containerd"]["runtimes"]["nvidia"]
    assert "ConfigPath" not in nvidia["options"]
    assert "privileged_without_host_devices" not in nvidia


@pytest.mark.parametrize("text,version", [(None, 2), ("", 2), ("# only a comment\n", 2)])
def test_missing_or_empty_file_is_version_2(text, version):
    new, got = cc.edit_text(text, "f", "present", "nvidia", NV)
    assert got == version
    data = load(new)
    assert data["version"] == 2
    nvidia = cri(data, 2)["containerd"]["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"]["BinaryName"] == NV
    assert cc.edit_text(new, "f", "present", "nvidia", NV)[0] is new


def test_missing_file_absent_stays_missing():
    assert cc.edit_text(None, "f", "absent", "nvidia", NV) == (None, 2)


def test_literal_strings_style_kept_for_v3():
    new, _v = cc.edit_text(fixture("containerd-2.1-default.toml"), "f", "present", "nvidia", NV, True)
    assert "BinaryName = '%s'" % NV in new
    assert "default_runtime_name = 'nvidia'" in new


def test_new_key_takes_table_indentation():
    new, _v = cc.edit_text(fixture("containerd-1.6-default.toml"), "f", "present", "nvidia", NV, cdi=True)
    assert "\n    enable_cdi = true\n" in new


@pytest.mark.parametrize("text,fragment", [
    ('version = 2\n[plugins\n', "line 2"),
    ('version = 2\nroot = "/var/lib/containerd\n', "line 2"),
    ('version = 2\na = 1\na = 2\n', "not valid TOML"),
])
def test_parse_errors_name_the_position(text, fragment):
    with pytest.raises(ConfigFileError) as err:
        cc.edit_text(text, "/etc/containerd/config.toml", "present", "nvidia", NV)
    assert err.value.msg.startswith("/etc/containerd/config.toml is not valid TOML")
    assert fragment in err.value.msg


@pytest.mark.parametrize("text", ['version = 4\n', 'version = "2"\n'])
def test_unsupported_versions(text):
    with pytest.raises(ConfigFileError, match="unsupported containerd config version"):
        cc.edit_text(text, "f", "present", "nvidia", NV)


def test_wrong_type_for_table():
    with pytest.raises(ConfigFileError, match="^f: plugins must be a table, found an integer$"):
        cc.edit_text('version = 2\nplugins = 3\n', "f", "present", "nvidia", NV)


def test_base_template_adds_runtime_from_reference():
    tmpl = fixture("k3s-base.toml.tmpl")
    new, version = cc.edit_text(tmpl, "t", "present", "nvidia", NV,
                                reference_text=fixture("k3s-config.toml"), reference_path="g")
    assert version == 2
    assert new.startswith('{{ template "base" . }}\n')
    body = load(new.split("\n", 1)[1])
    nvidia = cri(body, 2)["containerd"]["runtimes"]["nvidia"]
    assert nvidia["options"] == {"BinaryName": NV, "SystemdCgroup": True}
    assert "runsc" in cri(body, 2)["containerd"]["runtimes"]
    assert "version" not in body  # the base provides it
    assert cc.edit_text(new, "t", "present", "nvidia", NV, reference_text=fixture("k3s-config.toml"))[0] is new


@pytest.mark.parametrize("kwargs", [{"set_as_default": True}, {"cdi": True}])
def test_base_template_refuses_tables_of_the_base(kwargs):
    with pytest.raises(ConfigFileError, match="template"):
        cc.edit_text(fixture("k3s-base.toml.tmpl"), "t", "present", "nvidia", NV, **kwargs)


def test_template_masking_roundtrip():
    text = '{{- if .X }}\nversion = 2\n{{ end }}\n'
    masked, saved = cc.mask_template(text)
    assert "{{" not in masked
    assert cc.unmask_template(masked, saved) == text


# ------------------------------------------------------------- drop-in mode

DROP = "/etc/containerd/conf.d/99-nvidia.toml"


@pytest.mark.parametrize("name", [n for n, v in sorted(CORPUS.items()) if v[0] != 1 and not n.startswith(("k3s", "rke2"))])
def test_drop_in(name):
    version = CORPUS[name][0]
    text = fixture(name)
    main, drop, got = cc.edit_drop_in(text, "m", None, DROP, "present", "nvidia", NV, set_as_default=True, cdi=True)
    assert got == version
    main_data = load(main)
    assert "/etc/containerd/conf.d/*.toml" in main_data["imports"]
    for old in load(text).get("imports", []):
        assert old in main_data["imports"]
    assert "nvidia" not in cri(main_data, version).get("containerd", {}).get("runtimes", {}) if "plugins" in main_data else True
    drop_data = load(drop)
    assert drop_data["version"] == version
    table = cri(drop_data, version)
    assert table["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == NV
    assert table["containerd"]["default_runtime_name"] == "nvidia"
    assert table["enable_cdi"] is True
    # the whole CRI table of the main file is carried (containerd < 2.1 replaces it per import)
    main_cri = cri(main_data, version)
    for key in main_cri:
        if key not in ("enable_cdi", "containerd"):
            assert table[key] == main_cri[key]
    # idempotent
    main2, drop2, _v = cc.edit_drop_in(main, "m", drop, DROP, "present", "nvidia", NV, set_as_default=True, cdi=True)
    assert main2 is main and drop2 is drop
    # absent removes the drop-in and keeps the import (other drop-ins may use it)
    main3, drop3, _v = cc.edit_drop_in(main, "m", drop, DROP, "absent", "nvidia", NV)
    assert drop3 is None
    assert main3 is main


def test_drop_in_from_nothing_and_back():
    main, drop, version = cc.edit_drop_in(None, "m", None, DROP, "present", "nvidia", NV)
    assert version == 2
    assert load(main) == {"version": 2, "imports": ["/etc/containerd/conf.d/*.toml"]}
    assert drop.startswith("# Managed by kubegpu.nvidia")
    main2, drop2, _v = cc.edit_drop_in(main, "m", drop, DROP, "absent", "nvidia", NV)
    assert main2 == "" and drop2 is None


def test_drop_in_refuses_v1():
    with pytest.raises(ConfigFileError, match="version 1"):
        cc.edit_drop_in(fixture("containerd-v1.toml"), "m", None, DROP, "present", "nvidia", NV)


def test_drop_in_moves_runtime_out_of_main():
    text = fixture("containerd-existing-nvidia.toml")
    main, drop, _v = cc.edit_drop_in(text, "m", None, DROP, "present", "nvidia", NV)
    assert "nvidia" not in cri(load(main), 2)["containerd"]["runtimes"]
    assert cri(load(drop), 2)["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == NV


def test_drop_in_refuses_broken_drop_in():
    with pytest.raises(ConfigFileError, match="99-nvidia.toml is not valid TOML"):
        cc.edit_drop_in(None, "m", "[x\n", DROP, "present", "nvidia", NV)


# ------------------------------------------------------------- flavors

def test_detect_flavor_by_path():
    assert cc.detect_flavor("/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl") == "k3s"
    assert cc.detect_flavor("/var/lib/rancher/rke2/agent/etc/containerd/config.toml") == "rke2"
    assert cc.detect_flavor("/etc/containerd/config.toml") == "containerd"


def test_detect_flavor_by_directory(tmp_path):
    assert cc.detect_flavor(root=str(tmp_path)) == "containerd"
    (tmp_path / "var/lib/rancher/rke2/agent/etc/containerd").mkdir(parents=True)
    assert cc.detect_flavor(root=str(tmp_path)) == "rke2"
    (tmp_path / "var/lib/rancher/k3s/agent/etc/containerd").mkdir(parents=True)
    assert cc.detect_flavor(root=str(tmp_path)) == "k3s"


def test_template_paths():
    assert cc.template_paths("k3s") == ("/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl",
                                        "/var/lib/rancher/k3s/agent/etc/containerd/config.toml")
    assert cc.template_paths("rke2", "/x/config.toml") == ("/x/config.toml.tmpl", "/x/config.toml")
    assert cc.template_paths("rke2", "/x/config.toml.tmpl") == ("/x/config.toml.tmpl", "/x/config.toml")
