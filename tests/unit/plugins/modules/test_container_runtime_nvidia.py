# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module end to end on temp files: check mode, diff, backup, validate, failures."""

from __future__ import absolute_import, division, print_function

import errno
import hashlib
import json
import os
import shutil
import stat

import pytest
import tomlkit
from ansible.module_utils.testing import patch_module_args

from ansible_collections.kubegpu.nvidia.plugins.module_utils import config_file, containerd_config
from ansible_collections.kubegpu.nvidia.plugins.modules import container_runtime_nvidia as mod

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "module_utils", "fixtures", "runtime")
NV = "/usr/bin/nvidia-container-runtime"


def run_module(capsys, args, check=False, diff=False):
    args = dict(args)
    args["_ansible_check_mode"] = check
    args["_ansible_diff"] = diff
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            mod.main()
    return json.loads(capsys.readouterr().out)


def copy_fixture(tmp_path, name, dest=None):
    target = tmp_path / (dest or name)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(os.path.join(FIXTURES, name), str(target))
    return target


def listing(path):
    return sorted(os.listdir(str(path)))


@pytest.mark.parametrize("runtime,name", [
    ("containerd", "containerd-systemd-cgroup-comments.toml"),
    ("containerd", "containerd-2.1-default.toml"),
    ("docker", "daemon-other-runtime.json"),
])
def test_check_mode_diff_then_apply_then_idempotent(capsys, tmp_path, runtime, name):
    cfg = copy_fixture(tmp_path, name)
    os.chmod(str(cfg), 0o640)
    original = cfg.read_text()
    args = dict(runtime=runtime, path=str(cfg), set_as_default=True, backup=True)

    checked = run_module(capsys, args, check=True, diff=True)
    assert checked["changed"] is True and checked["restart_required"] is True
    assert cfg.read_text() == original
    assert listing(tmp_path) == [name]
    assert checked["diff"]["before"] == original
    assert checked["diff"]["before_header"] == str(cfg)
    assert "nvidia" in checked["diff"]["after"]
    assert "backup_file" not in checked

    applied = run_module(capsys, args, diff=True)
    assert applied["changed"] is True
    assert cfg.read_text() == checked["diff"]["after"]
    assert stat.S_IMODE(os.stat(str(cfg)).st_mode) == 0o640
    with open(applied["backup_file"]) as handle:
        assert handle.read() == original
    assert applied["backup_files"] == [applied["backup_file"]]
    if runtime == "containerd":
        assert applied["config_version"] in (2, 3)
        assert applied["flavor"] == "containerd"

    again = run_module(capsys, args, diff=True)
    assert again["changed"] is False and again["restart_required"] is False
    assert "diff" not in again and "backup_file" not in again
    assert len(listing(tmp_path)) == 2  # the file and one backup, no temp files
    # the checksum of the file as it will be (check mode), as it is (sha256sum's)
    written = hashlib.sha256(cfg.read_bytes()).hexdigest()
    assert checked["checksums"] == applied["checksums"] == again["checksums"] == {str(cfg): written}


def test_new_file_mode_and_parent(capsys, tmp_path):
    cfg = tmp_path / "etc" / "containerd" / "config.toml"
    result = run_module(capsys, dict(runtime="containerd", path=str(cfg)))
    assert result["changed"] is True and result["config_version"] == 2
    assert stat.S_IMODE(os.stat(str(cfg)).st_mode) == 0o644
    assert run_module(capsys, dict(runtime="containerd", path=str(cfg)))["changed"] is False


@pytest.mark.parametrize("runtime,content,fragment", [
    ("containerd", 'version = 2\n[plugins."io.containerd.grpc.v1.cri"\n', "is not valid TOML: line 2, column"),
    ("docker", '{\n  "log-driver": "json-file",\n}\n', "is not valid JSON: line 3, column 1"),
    ("crio", '[crio.runtime\n', "is not valid TOML: line 1, column"),
])
def test_unparsable_file_untouched_no_litter(capsys, tmp_path, runtime, content, fragment):
    cfg = tmp_path / "cfg"
    cfg.write_text(content)
    result = run_module(capsys, dict(runtime=runtime, path=str(cfg), backup=True))
    assert result["failed"] is True
    assert result["msg"].startswith(str(cfg))
    assert fragment in result["msg"]
    assert "exception" not in result
    assert cfg.read_text() == content
    assert listing(tmp_path) == ["cfg"]


@pytest.mark.parametrize("runtime", ["containerd", "docker", "crio"])
def test_path_is_a_directory(capsys, tmp_path, runtime):
    result = run_module(capsys, dict(runtime=runtime, path=str(tmp_path)))
    assert result["failed"] is True
    assert result["msg"] == "%s is a directory, not a configuration file" % tmp_path


def test_unreadable_file(capsys, tmp_path, monkeypatch):
    cfg = copy_fixture(tmp_path, "daemon-log-opts.json")
    real_open = open

    def deny(path, *args, **kwargs):
        if os.fsdecode(path) == str(cfg):
            raise IOError(errno.EACCES, "Permission denied", str(cfg))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(config_file, "open", deny, raising=False)
    result = run_module(capsys, dict(runtime="docker", path=str(cfg)))
    assert result["failed"] is True
    assert result["msg"] == "cannot read %s: Permission denied" % cfg


def test_read_only_filesystem(capsys, tmp_path, monkeypatch):
    cfg = copy_fixture(tmp_path, "containerd-1.6-default.toml")
    original = cfg.read_text()

    def erofs(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(config_file.tempfile, "mkstemp", erofs)
    result = run_module(capsys, dict(runtime="containerd", path=str(cfg), backup=True))
    assert result["failed"] is True
    assert result["msg"] == "cannot write %s: Read-only file system" % cfg
    assert cfg.read_text() == original
    assert listing(tmp_path) == ["containerd-1.6-default.toml"]


def test_validate_failure_keeps_old_file(capsys, tmp_path):
    cfg = copy_fixture(tmp_path, "containerd-1.6-default.toml")
    original = cfg.read_text()
    script = tmp_path / "check.sh"
    script.write_text("#!/bin/sh\necho \"checked $1\"\necho 'bad runtime table' >&2\nexit 3\n")
    os.chmod(str(script), 0o755)
    result = run_module(capsys, dict(runtime="containerd", path=str(cfg), backup=True,
                                     validate="%s %%s" % script))
    assert result["failed"] is True
    assert result["rc"] == 3
    assert "validate command failed for %s (rc=3)" % cfg in result["msg"]
    assert "bad runtime table" in result["msg"] and "checked %s/." % tmp_path in result["msg"]
    assert cfg.read_text() == original
    assert listing(tmp_path) == ["check.sh", "containerd-1.6-default.toml"]


def test_validate_success_and_needs_placeholder(capsys, tmp_path):
    cfg = copy_fixture(tmp_path, "daemon-log-opts.json")
    ok = run_module(capsys, dict(runtime="docker", path=str(cfg), validate="python3 -m json.tool %s"))
    assert ok["changed"] is True
    bad = run_module(capsys, dict(runtime="docker", path=str(cfg), state="absent", validate="true"))
    assert bad["failed"] is True and "must contain %s" in bad["msg"]


def test_missing_tomlkit(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(containerd_config, "HAS_TOMLKIT", False)
    result = run_module(capsys, dict(runtime="containerd", path=str(tmp_path / "c.toml")))
    assert result["failed"] is True
    assert "tomlkit" in result["msg"] and "python3-tomlkit" in result["msg"]
    # Docker needs no tomlkit
    assert run_module(capsys, dict(runtime="docker", path=str(tmp_path / "d.json")))["changed"] is True


def test_drop_in_mode(capsys, tmp_path):
    cfg = copy_fixture(tmp_path, "containerd-1.7-default.toml", "config.toml")
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    args = dict(runtime="containerd", path=str(cfg), mode="drop_in", drop_in_path=str(drop),
                set_as_default=True, cdi=True, backup=True)
    checked = run_module(capsys, args, check=True, diff=True)
    assert checked["changed"] is True and not drop.exists()
    assert [d["after_header"] for d in checked["diff"]] == [str(drop), str(cfg)]
    assert checked["diff"][0]["before_header"] == "%s (absent)" % drop
    applied = run_module(capsys, args)
    assert applied["drop_in_path"] == str(drop)
    assert tomlkit.parse(cfg.read_text())["imports"] == [str(tmp_path / "conf.d" / "*.toml")]
    assert "nvidia" in drop.read_text()
    assert applied["backup_file"].startswith(str(cfg) + ".")
    assert run_module(capsys, args)["changed"] is False
    assert applied["checksums"] == {str(cfg): hashlib.sha256(cfg.read_bytes()).hexdigest(),
                                    str(drop): hashlib.sha256(drop.read_bytes()).hexdigest()}
    removed = run_module(capsys, dict(args, state="absent"))
    assert removed["changed"] is True and not drop.exists()
    assert removed["checksums"][str(drop)] is None
    assert run_module(capsys, dict(args, state="absent"))["changed"] is False


def test_drop_in_rolls_back_when_main_fails(capsys, tmp_path):
    cfg = copy_fixture(tmp_path, "containerd-imports.toml", "config.toml")
    original = cfg.read_text()
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    # the validate command accepts the drop-in and refuses the main file
    result = run_module(capsys, dict(runtime="containerd", path=str(cfg), mode="drop_in", drop_in_path=str(drop),
                                     validate="grep -q Managed %s"))
    assert result["failed"] is True and "validate command failed for %s" % cfg in result["msg"]
    assert cfg.read_text() == original
    assert not drop.exists()


@pytest.mark.parametrize("flavor", ["k3s", "rke2"])
def test_k3s_rke2_template_created_from_generated(capsys, tmp_path, flavor):
    generated = copy_fixture(tmp_path, "%s-config.toml" % flavor, "config.toml")
    os.chmod(str(generated), 0o600)
    generated_text = generated.read_text()
    args = dict(runtime="containerd", flavor=flavor, path=str(generated), set_as_default=True)
    checked = run_module(capsys, args, check=True, diff=True)
    assert checked["path"] == str(generated) + ".tmpl"
    assert checked["diff"]["before_header"] == "%s.tmpl (absent)" % generated
    assert not os.path.exists(str(generated) + ".tmpl")
    applied = run_module(capsys, args)
    assert applied["changed"] is True and applied["flavor"] == flavor
    template = tmp_path / "config.toml.tmpl"
    data = tomlkit.parse(template.read_text()).unwrap()
    cri = data["plugins"][containerd_config.CRI_PLUGIN[applied["config_version"]]]
    assert cri["containerd"]["runtimes"]["nvidia"]["options"] == {"BinaryName": NV, "SystemdCgroup": True}
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert generated.read_text() == generated_text  # the file k3s regenerates is left alone
    assert stat.S_IMODE(os.stat(str(template)).st_mode) == 0o600
    assert run_module(capsys, args)["changed"] is False


def test_k3s_auto_by_path_and_base_template(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(containerd_config.FLAVOR_DIRS, "k3s", str(tmp_path))
    copy_fixture(tmp_path, "k3s-config.toml", "config.toml")
    template = copy_fixture(tmp_path, "k3s-base.toml.tmpl", "config.toml.tmpl")
    result = run_module(capsys, dict(runtime="containerd", path=str(template)))
    assert result["flavor"] == "k3s" and result["changed"] is True and result["config_version"] == 2
    assert template.read_text().startswith('{{ template "base" . }}\n')
    refused = run_module(capsys, dict(runtime="containerd", path=str(template), set_as_default=True))
    assert refused["failed"] is True and "--default-runtime" in refused["msg"]


def test_k3s_not_started_yet(capsys, tmp_path):
    result = run_module(capsys, dict(runtime="containerd", flavor="k3s", path=str(tmp_path / "config.toml")))
    assert result["failed"] is True and "has not generated" in result["msg"]
    assert listing(tmp_path) == []


def test_crio_drop_in(capsys, tmp_path):
    copy_fixture(tmp_path, "crio.conf")
    drop = tmp_path / "crio.conf.d" / "99-nvidia.toml"
    args = dict(runtime="crio", path=str(drop), set_as_default=True)
    assert run_module(capsys, args)["changed"] is True
    assert 'default_runtime = "nvidia"' in drop.read_text()
    assert run_module(capsys, args)["changed"] is False
    removed = run_module(capsys, dict(args, state="absent", backup=True))
    assert removed["changed"] is True and not drop.exists()
    assert os.path.exists(removed["backup_file"])


def test_empty_runtime_name(capsys, tmp_path):
    result = run_module(capsys, dict(runtime="docker", path=str(tmp_path / "d.json"), runtime_name=" "))
    assert result["failed"] is True and result["msg"] == "runtime_name must not be empty"


# ------------------------------------------------------------- several runtimes (issue 15 item 1)

THREE = [{"name": "nvidia", "default": True}, {"name": "nvidia-cdi", "mode": "cdi"},
         {"name": "nvidia-legacy", "mode": "legacy"}]


def test_three_runtimes_check_mode_diff_apply_idempotent(capsys, tmp_path):
    cfg = copy_fixture(tmp_path, "containerd-systemd-cgroup-comments.toml", "config.toml")
    original = cfg.read_text()
    args = dict(runtime="containerd", path=str(cfg), runtimes=THREE, cdi=True, backup=True)
    checked = run_module(capsys, args, check=True, diff=True)
    assert checked["changed"] is True and cfg.read_text() == original
    assert checked["runtimes"] == [
        {"name": "nvidia", "path": NV, "mode": None, "default": True},
        {"name": "nvidia-cdi", "path": NV + ".cdi", "mode": "cdi", "default": False},
        {"name": "nvidia-legacy", "path": NV + ".legacy", "mode": "legacy", "default": False}]
    assert checked["options_source"] == "runc" and checked["config_source"] == "file"
    applied = run_module(capsys, args)
    assert cfg.read_text() == checked["diff"]["after"]
    data = tomlkit.parse(cfg.read_text()).unwrap()
    containerd = data["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert containerd["default_runtime_name"] == "nvidia"
    for entry in applied["runtimes"]:
        assert containerd["runtimes"][entry["name"]]["options"] == {"BinaryName": entry["path"], "SystemdCgroup": True}
    assert os.path.exists(applied["backup_file"])
    again = run_module(capsys, args, diff=True)
    assert again["changed"] is False and "diff" not in again
    # a run that manages one of them keeps the others
    one = run_module(capsys, dict(runtime="containerd", path=str(cfg), runtimes=[THREE[1]], cdi=True))
    assert one["changed"] is False


def test_three_runs_into_one_drop_in(capsys, tmp_path):
    """As issue 15 measured it: three runs, one runtime each, the first one default; nothing is lost."""
    cfg = copy_fixture(tmp_path, "containerd-1.7-default.toml", "config.toml")
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    results = []
    for name, default in (("nvidia", True), ("nvidia-cdi", False), ("nvidia-legacy", False)):
        results.append(run_module(capsys, dict(runtime="containerd", path=str(cfg), mode="drop_in", drop_in_path=str(drop),
                                               runtime_name=name, runtime_path=NV + name[6:].replace("-", "."),
                                               set_as_default=default)))
    assert [r["changed"] for r in results] == [True, True, True]
    data = tomlkit.parse(drop.read_text()).unwrap()
    containerd = data["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert containerd["default_runtime_name"] == "nvidia"
    assert {n: containerd["runtimes"][n]["options"]["BinaryName"] for n in ("nvidia", "nvidia-cdi", "nvidia-legacy")} == {
        "nvidia": NV, "nvidia-cdi": NV + ".cdi", "nvidia-legacy": NV + ".legacy"}
    again = run_module(capsys, dict(runtime="containerd", path=str(cfg), mode="drop_in", drop_in_path=str(drop),
                                    runtime_name="nvidia-cdi", runtime_path=NV + ".cdi"))
    assert again["changed"] is False
    gone = run_module(capsys, dict(runtime="containerd", path=str(cfg), mode="drop_in", drop_in_path=str(drop),
                                   runtimes=[{"name": "nvidia-cdi"}], state="absent"))
    assert gone["changed"] is True and drop.exists()
    assert "nvidia-cdi" not in tomlkit.parse(drop.read_text()).unwrap()["plugins"]["io.containerd.grpc.v1.cri"][
        "containerd"]["runtimes"]


@pytest.mark.parametrize("runtime,name", [("docker", "daemon-other-runtime.json"), ("crio", None)])
def test_three_runtimes_docker_and_crio(capsys, tmp_path, runtime, name):
    if runtime == "crio":
        copy_fixture(tmp_path, "crio.conf")
        cfg = tmp_path / "crio.conf.d" / "99-nvidia.toml"
    else:
        cfg = copy_fixture(tmp_path, name)
    args = dict(runtime=runtime, path=str(cfg), runtimes=THREE)
    applied = run_module(capsys, args)
    assert applied["changed"] is True
    assert run_module(capsys, args)["changed"] is False
    text = cfg.read_text()
    for suffix in ("", ".cdi", ".legacy"):
        assert NV + suffix + '"' in text
    if runtime == "crio":
        assert applied["options_source"] == "crun"


def test_crio_backup_lies_outside_the_drop_in_directory(capsys, tmp_path):
    """CRI-O reads every file under crio.conf.d: a backup there would be loaded after the drop-in."""
    copy_fixture(tmp_path, "crio.conf")
    drop = tmp_path / "crio.conf.d" / "99-nvidia.toml"
    run_module(capsys, dict(runtime="crio", path=str(drop)))
    changed = run_module(capsys, dict(runtime="crio", path=str(drop), set_as_default=True, backup=True))
    assert os.path.dirname(changed["backup_file"]) == str(tmp_path)
    assert listing(tmp_path / "crio.conf.d") == ["99-nvidia.toml"]
    removed = run_module(capsys, dict(runtime="crio", path=str(drop), state="absent", backup=True))
    assert os.path.dirname(removed["backup_file"]) == str(tmp_path) and listing(tmp_path / "crio.conf.d") == []


def test_config_source_command(capsys, tmp_path):
    """The effective configuration comes from the command's output (here a script printing a dump)."""
    cfg = tmp_path / "config.toml"
    cfg.write_text('version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n')
    script = tmp_path / "dump.sh"
    script.write_text('#!/bin/sh\ntest "$1" = --config && test "$2" = %s || exit 9\ncat <<EOF\nversion = 2\n'
                      '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
                      'runtime_type = "io.containerd.runc.v2"\n'
                      '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
                      'SystemdCgroup = true\nBinaryName = ""\nEOF\n' % cfg)
    os.chmod(str(script), 0o755)
    result = run_module(capsys, dict(runtime="containerd", path=str(cfg), runtimes=THREE, config_source="command",
                                     config_command="%s --config %%s" % script))
    assert result["config_source"] == "command" and result["options_source"] == "runc"
    runtimes = tomlkit.parse(cfg.read_text()).unwrap()["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    assert runtimes["nvidia-cdi"]["options"] == {"BinaryName": NV + ".cdi", "SystemdCgroup": True}


def test_missing_binary_of_a_mode_is_a_warning(capsys, tmp_path, monkeypatch):
    """A mode whose binary the installed toolkit does not ship: the file is written, the run warns."""
    warned = []
    monkeypatch.setattr(mod.AnsibleModule, "warn", lambda self, msg: warned.append(msg))
    present = tmp_path / "nvidia-container-runtime"
    present.write_text("#!/bin/sh\n")
    result = run_module(capsys, dict(runtime="docker", path=str(tmp_path / "daemon.json"), runtimes=[
        {"name": "nvidia", "path": str(present)}, {"name": "nvidia-cdi", "path": str(tmp_path / "nvidia-container-runtime.cdi"),
                                                   "mode": "cdi"}]))
    assert result["changed"] is True
    assert warned == ["the binary of runtime nvidia-cdi, %s (mode cdi), is not on the node (yet): containers of that "
                      "runtime cannot start until an installed NVIDIA Container Toolkit provides it"
                      % (tmp_path / "nvidia-container-runtime.cdi")]
