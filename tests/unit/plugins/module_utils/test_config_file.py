# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""config_file: symbolic links, atomic replacement and its failures, validate commands."""

from __future__ import absolute_import, division, print_function

import errno
import os
import stat

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.kubegpu.nvidia.plugins.module_utils import config_file
from ansible_collections.kubegpu.nvidia.plugins.module_utils.config_file import ConfigFileError


@pytest.fixture
def module():
    with patch_module_args({}):
        return AnsibleModule(argument_spec={})


def listing(path):
    return sorted(os.listdir(str(path)))


# ------------------------------------------------------------- resolve

def test_resolve_plain_and_missing(tmp_path):
    assert config_file.resolve(str(tmp_path / "a.toml")) == str(tmp_path / "a.toml")
    (tmp_path / "a.toml").write_text("x")
    assert config_file.resolve(str(tmp_path / "a.toml")) == str(tmp_path / "a.toml")


def test_resolve_follows_relative_links_and_chains(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "config.toml").write_text("x")
    os.symlink("real/config.toml", str(tmp_path / "hop.toml"))
    os.symlink("hop.toml", str(tmp_path / "config.toml"))
    assert config_file.resolve(str(tmp_path / "config.toml")) == str(tmp_path / "real" / "config.toml")


def test_resolve_follows_a_linked_directory(tmp_path):
    (tmp_path / "data").mkdir()
    os.symlink(str(tmp_path / "data"), str(tmp_path / "etc"))
    assert config_file.resolve(str(tmp_path / "etc" / "new.toml")) == str(tmp_path / "data" / "new.toml")


def test_resolve_dangling_link(tmp_path):
    os.symlink("gone/config.toml", str(tmp_path / "config.toml"))
    with pytest.raises(ConfigFileError) as err:
        config_file.resolve(str(tmp_path / "config.toml"))
    target = tmp_path / "gone" / "config.toml"
    assert err.value.msg == "%s is a symbolic link to %s, which does not exist: create %s or remove the link" % (
        tmp_path / "config.toml", target, target)
    assert err.value.kind == "not_found"


def test_resolve_loop(tmp_path):
    os.symlink("b.toml", str(tmp_path / "a.toml"))
    os.symlink("a.toml", str(tmp_path / "b.toml"))
    with pytest.raises(ConfigFileError, match=r"a.toml is a symbolic link loop \(more than 40 links\)"):
        config_file.resolve(str(tmp_path / "a.toml"))
    with pytest.raises(ConfigFileError, match="symbolic link loop"):
        config_file.read_text(str(tmp_path / "a.toml"))


def test_same_file(tmp_path):
    (tmp_path / "config.toml").write_text("x")
    os.symlink("config.toml", str(tmp_path / "link.toml"))
    assert config_file.same_file(str(tmp_path / "link.toml"), str(tmp_path / "config.toml"))
    assert config_file.same_file(str(tmp_path / "x" / ".." / "config.toml"), str(tmp_path / "config.toml"))
    assert not config_file.same_file(str(tmp_path / "other.toml"), str(tmp_path / "config.toml"))


# ------------------------------------------------------------- writing through a link

def test_write_through_link_keeps_link_and_target_attributes(module, tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "config.toml"
    target.write_text("old\n")
    os.chmod(str(target), 0o600)
    link = tmp_path / "config.toml"
    os.symlink("real/config.toml", str(link))
    backup = config_file.write_file(module, str(link), "new\n", backup=True)
    assert os.path.islink(str(link)) and os.readlink(str(link)) == "real/config.toml"
    assert target.read_text() == "new\n"
    assert stat.S_IMODE(os.stat(str(target)).st_mode) == 0o600
    assert os.path.dirname(backup) == str(tmp_path / "real")
    with open(backup) as handle:
        assert handle.read() == "old\n"
    assert listing(tmp_path) == ["config.toml", "real"]


def test_remove_link_keeps_target(module, tmp_path):
    (tmp_path / "target.toml").write_text("x")
    os.symlink("target.toml", str(tmp_path / "link.toml"))
    config_file.remove_file(module, str(tmp_path / "link.toml"))
    assert listing(tmp_path) == ["target.toml"]


def test_backup_dir(module, tmp_path):
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "99.toml").write_text("old")
    backup = config_file.write_file(module, str(tmp_path / "conf.d" / "99.toml"), "new", backup=True,
                                    backup_dir=str(tmp_path))
    assert os.path.dirname(backup) == str(tmp_path)
    assert listing(tmp_path / "conf.d") == ["99.toml"]


# ------------------------------------------------------------- a replacement the node refuses

@pytest.mark.parametrize("code,reason", [
    (errno.EBUSY, "it is a mount point (a file bind-mounted into place, for example read-only), which a rename "
                  "cannot replace; change it where it is mounted from"),
    (errno.EROFS, "its file system is mounted read-only"),
    (errno.EPERM, "the operation is not permitted (an immutable file or directory? see lsattr)"),
    (errno.EACCES, "permission denied on its directory"),
    (errno.ENOSPC, os.strerror(errno.ENOSPC)),
])
def test_rename_refused(module, tmp_path, monkeypatch, code, reason):
    cfg = tmp_path / "config.toml"
    cfg.write_text("old\n")

    def refuse(src, dst):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(config_file.os, "rename", refuse)
    with pytest.raises(ConfigFileError) as err:
        config_file.write_file(module, str(cfg), "new\n")
    assert err.value.msg == "cannot replace %s: %s; file left unchanged" % (cfg, reason)
    assert err.value.kind == "runtime"
    assert cfg.read_text() == "old\n"
    assert listing(tmp_path) == ["config.toml"]  # no temp file left


def test_cross_device_rename_goes_to_atomic_move(module, tmp_path, monkeypatch):
    cfg = tmp_path / "config.toml"
    cfg.write_text("old\n")
    moved = []
    real_rename = os.rename

    def exdev(src, dst):
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    def atomic_move(src, dst, unsafe_writes=False):
        moved.append(dst)
        real_rename(src, dst)

    monkeypatch.setattr(config_file.os, "rename", exdev)
    monkeypatch.setattr(module, "atomic_move", atomic_move)
    config_file.write_file(module, str(cfg), "new\n")
    assert moved == [str(cfg)] and cfg.read_text() == "new\n"


# ------------------------------------------------------------- validate

def test_validate_missing_command(module, tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text("old\n")
    with pytest.raises(ConfigFileError) as err:
        config_file.write_file(module, str(cfg), "new\n", validate="no-such-containerd --config %s config dump")
    assert err.value.msg == ("validate command for %s not found: no-such-containerd is not installed or not on PATH"
                             % cfg)
    assert err.value.kind == "not_found"
    assert cfg.read_text() == "old\n" and listing(tmp_path) == ["config.toml"]


def test_validate_missing_absolute_command(module, tmp_path):
    with pytest.raises(ConfigFileError, match="not found: /nonexistent/containerd is not installed"):
        config_file.write_file(module, str(tmp_path / "c.toml"), "x", validate="/nonexistent/containerd %s")
    assert listing(tmp_path) == []


def test_validate_unbalanced_quote(module, tmp_path):
    with pytest.raises(ConfigFileError, match="validate is not a valid command line"):
        config_file.write_file(module, str(tmp_path / "c.toml"), "x", validate="check '%s")
    assert listing(tmp_path) == []


def test_find_command(monkeypatch, tmp_path):
    tool = tmp_path / "containerd"
    tool.write_text("#!/bin/sh\n")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert config_file.find_command("containerd") in (None, "/usr/sbin/containerd", "/sbin/containerd")
    os.chmod(str(tool), 0o644)
    assert config_file.find_command(str(tool)) is None  # not executable
    monkeypatch.setenv("PATH", "/nonexistent:%s" % tmp_path)
    assert config_file.find_command("containerd") is None
    os.chmod(str(tool), 0o755)
    assert config_file.find_command(str(tool)) == str(tool)
    assert config_file.find_command("containerd") == str(tool)
