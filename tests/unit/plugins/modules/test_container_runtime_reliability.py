# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bad input and faults, table-driven, through the real module code (AnsibleModule, files in tmp_path).

Every case states its input and the outcome: a clean failure (one line, an ``error_kind``, no
``exception``, every file left as it was: bytes, inode, mode, links; no temp file, no backup) or a
success with what must hold. Every configuration holds a registry password, which must appear nowhere
in the module's output (``--diff`` included). A read-only bind mount, where the machine allows one, is
tested for real at the end.
"""

from __future__ import absolute_import, division, print_function

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.kubegpu.nvidia.plugins.module_utils import config_file
from ansible_collections.kubegpu.nvidia.plugins.modules import container_runtime_nvidia as mod

SECRET = "s3cr3t-registry-password"
NV = "/usr/bin/nvidia-container-runtime"
CONTAINERD = '''version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
[plugins."io.containerd.grpc.v1.cri".registry.configs."registry.example".auth]
  username = "robot"
  password = "%s"
''' % SECRET
DOTTED = '''version = 2
plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options.SystemdCgroup = true
plugins."io.containerd.grpc.v1.cri".registry.configs."registry.example".auth.password = "%s"
''' % SECRET
INLINE = '''version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  runtimes = { runc = { runtime_type = "io.containerd.runc.v2", options = { SystemdCgroup = true } } }
[plugins."io.containerd.grpc.v1.cri".registry.configs."registry.example".auth]
  password = "%s"
''' % SECRET
DAEMON = '{\n  "registry-mirrors": ["https://robot:%s@mirror.example"],\n  "log-driver": "json-file"\n}\n' % SECRET
CRIO = '[crio.runtime]\ndefault_runtime = "crun"\n[crio.runtime.runtimes.crun]\nruntime_path = "/usr/bin/crun"\n' \
       '[crio.image]\nglobal_auth_file = "/etc/crio/auth.json"\n# password = "%s"\n' % SECRET


# Each case: id, files (relative path -> text, or ("link", target), or "dir"), module arguments (paths
# relative to tmp_path are made absolute), and the outcome: ("fail", error_kind, message) with the
# message an exact string or ("prefix", text); or ("ok", check) with check(tmp_path, result).
def ok_link_kept(link, target):
    def check(tmp, result):
        assert os.path.islink(str(tmp / link)) and os.readlink(str(tmp / link)) == target
        assert "nvidia" in (tmp / link).read_text()
        assert result["checksums"][str(tmp / link)] == hashlib.sha256((tmp / link).read_bytes()).hexdigest()
    return check


def ok_contains(name, *fragments):
    def check(tmp, result):
        text = (tmp / name).read_text()
        for fragment in fragments:
            assert fragment in text, fragment
    return check


CASES = [
    # --- runtime names (issue 12 item 2)
    ("name-quote-dot-bracket", {"config.toml": CONTAINERD}, dict(runtime="containerd", path="config.toml", runtime_name='nv"idia.x]'),
     ("fail", "input", 'runtime name "nv\\"idia.x]" is not valid for containerd: a CRI runtime is chosen by the '
      "handler of a Kubernetes RuntimeClass, which must be a DNS-1123 label: lowercase letters, digits and '-', "
      "starting and ending with a letter or digit, at most 63 characters")),
    ("name-newline", {"config.toml": CONTAINERD}, dict(runtime="containerd", path="config.toml", runtime_name="nvidia\nx"),
     ("fail", "input", ("prefix", 'runtime name "nvidia\\nx" is not valid for containerd'))),
    ("name-control-char", {"config.toml": CONTAINERD}, dict(runtime="containerd", path="config.toml", runtime_name="nv\x07"),
     ("fail", "input", ("prefix", 'runtime name "nv\\u0007" is not valid for containerd'))),
    ("name-in-runtimes-list", {"config.toml": CONTAINERD},
     dict(runtime="containerd", path="config.toml", runtimes=[{"name": "nvidia"}, {"name": "nvidia.cdi"}]),
     ("fail", "input", ("prefix", 'runtime name "nvidia.cdi" is not valid for containerd'))),
    ("name-docker-reserved", {"daemon.json": DAEMON}, dict(runtime="docker", path="daemon.json", runtime_name="runc"),
     ("fail", "input", ("prefix", 'runtime name "runc" is reserved by dockerd'))),
    ("name-docker-slash", {"daemon.json": DAEMON}, dict(runtime="docker", path="daemon.json", runtime_name="a/b"),
     ("fail", "input", ("prefix", 'runtime name "a/b" is not valid for Docker'))),
    ("name-crio-upper", {"crio.conf": CRIO}, dict(runtime="crio", path="crio.conf.d/99-nvidia.toml", runtime_name="NV"),
     ("fail", "input", ("prefix", 'runtime name "NV" is not valid for CRI-O'))),
    ("name-empty", {"daemon.json": DAEMON}, dict(runtime="docker", path="daemon.json", runtime_name=" "),
     ("fail", "input", "runtime_name must not be empty")),
    # --- the runtimes list (issue 15 bad input)
    ("runtimes-same-name-twice", {"config.toml": CONTAINERD},
     dict(runtime="containerd", path="config.toml", runtimes=[{"name": "nvidia"}, {"name": "nvidia", "mode": "cdi"}]),
     ("fail", "input", 'runtime "nvidia" appears twice in runtimes: each name once')),
    ("runtimes-two-defaults", {"config.toml": CONTAINERD},
     dict(runtime="containerd", path="config.toml",
          runtimes=[{"name": "nvidia", "default": True}, {"name": "nvidia-cdi", "mode": "cdi", "default": True}]),
     ("fail", "input", 'runtimes "nvidia", "nvidia-cdi" are all marked default: at most one runtime can be the default')),
    ("runtimes-empty", {"config.toml": CONTAINERD}, dict(runtime="containerd", path="config.toml", runtimes=[]),
     ("fail", "input", "runtimes must name at least one runtime")),
    ("runtimes-with-set-as-default", {"config.toml": CONTAINERD},
     dict(runtime="containerd", path="config.toml", runtimes=[{"name": "nvidia"}], set_as_default=True),
     ("fail", "input", "set_as_default applies to runtime_name; with runtimes, mark one entry default: true")),
    ("runtimes-with-runtime-name", {"config.toml": CONTAINERD},
     dict(runtime="containerd", path="config.toml", runtimes=[{"name": "nvidia"}], runtime_name="nvidia"),
     ("fail", None, "parameters are mutually exclusive: runtimes|runtime_name")),
    ("runtimes-unknown-mode", {"config.toml": CONTAINERD},
     dict(runtime="containerd", path="config.toml", runtimes=[{"name": "nvidia", "mode": "jit"}]),
     ("fail", None, ("prefix", "value of mode must be one of: auto, cdi, legacy, got: jit"))),
    # --- paths (issue 12 item 5)
    ("runtime-path-empty", {"config.toml": CONTAINERD}, dict(runtime="containerd", path="config.toml", runtime_path=""),
     ("fail", "input", 'runtime path of "nvidia" must not be empty')),
    ("runtime-path-relative", {"daemon.json": DAEMON}, dict(runtime="docker", path="daemon.json", runtime_path="bin/nv"),
     ("fail", "input", 'runtime path "bin/nv" of "nvidia" must be an absolute path without control characters')),
    ("drop-in-is-main", {"config.toml": CONTAINERD},
     dict(runtime="containerd", path="config.toml", mode="drop_in", drop_in_path="config.toml"),
     ("fail", "input", ("prefix", "drop_in_path {tmp}/config.toml is the main configuration {tmp}/config.toml itself"))),
    ("drop-in-links-to-main", {"config.toml": CONTAINERD, "conf.d/99-nvidia.toml": ("link", "../config.toml")},
     dict(runtime="containerd", path="config.toml", mode="drop_in", drop_in_path="conf.d/99-nvidia.toml"),
     ("fail", "input", ("prefix", "drop_in_path {tmp}/conf.d/99-nvidia.toml is the main configuration"))),
    ("drop-in-outside-imports", {"config.toml": CONTAINERD},
     dict(runtime="containerd", path="config.toml", mode="drop_in", drop_in_path="conf.d/99-nvidia.conf"),
     ("fail", "input", ("prefix", "drop_in_path {tmp}/conf.d/99-nvidia.conf would not be loaded"))),
    ("drop-in-version-1", {"config.toml": "[plugins.cri]\n"},
     dict(runtime="containerd", path="config.toml", mode="drop_in", drop_in_path="conf.d/99-nvidia.toml"),
     ("fail", "input", "{tmp}/config.toml: config version 1 has no imports; use mode=in_place")),
    ("crio-main-file-as-path", {"crio.conf": CRIO}, dict(runtime="crio", path="crio.conf"),
     ("fail", "input", ("prefix", "{tmp}/crio.conf is CRI-O's main configuration"))),
    # --- validate (issue 12 item 5)
    ("validate-missing-command", {"config.toml": CONTAINERD},
     dict(runtime="containerd", path="config.toml", validate="containerd-not-installed --config %s config dump"),
     ("fail", "not_found", "validate command for {tmp}/config.toml not found: containerd-not-installed is not "
                           "installed or not on PATH")),
    ("validate-without-placeholder", {"config.toml": CONTAINERD},
     dict(runtime="containerd", path="config.toml", validate="true"),
     ("fail", "input", "validate must contain %s (the candidate file): true")),
    # --- links (issue 12 item 1)
    ("dangling-link", {"config.toml": ("link", "real/config.toml")}, dict(runtime="containerd", path="config.toml"),
     ("fail", "not_found", "{tmp}/config.toml is a symbolic link to {tmp}/real/config.toml, which does not exist: "
                           "create {tmp}/real/config.toml or remove the link")),
    ("link-loop", {"config.toml": ("link", "loop.toml"), "loop.toml": ("link", "config.toml")},
     dict(runtime="containerd", path="config.toml"),
     ("fail", "input", "{tmp}/config.toml is a symbolic link loop (more than 40 links): fix or remove the link")),
    ("linked-config-toml", {"real/config.toml": CONTAINERD, "config.toml": ("link", "real/config.toml")},
     dict(runtime="containerd", path="config.toml", backup=True), ("ok", ok_link_kept("config.toml", "real/config.toml"))),
    ("linked-daemon-json", {"real/daemon.json": DAEMON, "daemon.json": ("link", "real/daemon.json")},
     dict(runtime="docker", path="daemon.json"), ("ok", ok_link_kept("daemon.json", "real/daemon.json"))),
    ("linked-crio-drop-in", {"crio.conf": CRIO, "managed/99-nvidia.toml": "", "crio.conf.d/99-nvidia.toml":
                             ("link", "../managed/99-nvidia.toml")},
     dict(runtime="crio", path="crio.conf.d/99-nvidia.toml"),
     ("ok", ok_link_kept("crio.conf.d/99-nvidia.toml", "../managed/99-nvidia.toml"))),
    ("linked-drop-in", {"config.toml": CONTAINERD, "managed/99-nvidia.toml": "", "conf.d/99-nvidia.toml":
                        ("link", "../managed/99-nvidia.toml")},
     dict(runtime="containerd", path="config.toml", mode="drop_in", drop_in_path="conf.d/99-nvidia.toml"),
     ("ok", ok_link_kept("conf.d/99-nvidia.toml", "../managed/99-nvidia.toml"))),
    # --- files that cannot be used
    ("path-is-directory", {"config.toml": "dir"}, dict(runtime="containerd", path="config.toml"),
     ("fail", "input", "{tmp}/config.toml is a directory, not a configuration file")),
    ("not-toml", {"config.toml": "version = 2\n[plugins\n" + CONTAINERD}, dict(runtime="containerd", path="config.toml"),
     ("fail", "input", ("prefix", "{tmp}/config.toml is not valid TOML: line 2, column"))),
    ("not-utf8", {"config.toml": b"version = 2\n# \xff\n"}, dict(runtime="containerd", path="config.toml"),
     ("fail", "input", "cannot read {tmp}/config.toml: not UTF-8 text (byte 14)")),
    ("version-4", {"config.toml": CONTAINERD.replace("version = 2", "version = 4")}, dict(runtime="containerd", path="config.toml"),
     ("fail", "input", "{tmp}/config.toml: unsupported containerd config version 4 (expected 1, 2 or 3)")),
    ("daemon-json-array", {"daemon.json": "[]"}, dict(runtime="docker", path="daemon.json"),
     ("fail", "input", "{tmp}/daemon.json: expected a JSON object at the top level, found an array")),
    ("daemon-json-runtime-string", {"daemon.json": '{"runtimes": {"nvidia": "x"}}'}, dict(runtime="docker", path="daemon.json"),
     ("fail", "input", "{tmp}/daemon.json: runtimes.nvidia must be an object, found a string")),
    # --- shapes (issue 12 item 6)
    ("containerd-runtimes-string", {"config.toml": 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
                                                   '  runtimes = "x"\n'},
     dict(runtime="containerd", path="config.toml"),
     ("fail", "input", '{tmp}/config.toml: plugins."io.containerd.grpc.v1.cri".containerd.runtimes must be a table, found a string')),
    ("containerd-plugins-int", {"config.toml": "version = 2\nplugins = 3\n"}, dict(runtime="containerd", path="config.toml"),
     ("fail", "input", "{tmp}/config.toml: plugins must be a table, found an integer")),
    ("containerd-containerd-array", {"config.toml": 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\ncontainerd = []\n'},
     dict(runtime="containerd", path="config.toml", state="absent"),
     ("fail", "input", '{tmp}/config.toml: plugins."io.containerd.grpc.v1.cri".containerd must be a table, found an array')),
    ("crio-other-drop-in-crio-5", {"crio.conf": CRIO, "crio.conf.d/10-other.conf": "crio = 5\n"},
     dict(runtime="crio", path="crio.conf.d/99-nvidia.toml"),
     ("fail", "input", "{tmp}/crio.conf.d/10-other.conf: crio must be a table, found an integer")),
    ("crio-runtimes-5", {"crio.conf": CRIO, "crio.conf.d/10-other.conf": "[crio.runtime]\nruntimes = 5\n"},
     dict(runtime="crio", path="crio.conf.d/99-nvidia.toml"),
     ("fail", "input", "{tmp}/crio.conf.d/10-other.conf: crio.runtime.runtimes must be a table, found an integer")),
    ("crio-conf-runtime-string", {"crio.conf": '[crio]\nruntime = "x"\n'}, dict(runtime="crio", path="crio.conf.d/99-nvidia.toml"),
     ("fail", "input", "{tmp}/crio.conf: crio.runtime must be a table, found a string")),
    ("crio-runtime-not-table", {"crio.conf": "[crio.runtime.runtimes]\nrunc = 5\n"}, dict(runtime="crio", path="crio.conf.d/99-nvidia.toml"),
     ("fail", "input", "{tmp}/crio.conf: crio.runtime.runtimes.runc must be a table, found an integer")),
    # --- spellings (issue 12 item 3): succeed, nothing lost
    ("dotted-keys", {"config.toml": DOTTED}, dict(runtime="containerd", path="config.toml"),
     ("ok", ok_contains("config.toml", "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]", SECRET))),
    ("inline-runtimes", {"config.toml": INLINE}, dict(runtime="containerd", path="config.toml"),
     ("ok", ok_contains("config.toml", "nvidia = {", "SystemdCgroup = true", SECRET))),
    # --- templates
    ("k3s-not-started", {}, dict(runtime="containerd", flavor="k3s", path="config.toml"),
     ("fail", "input", ("prefix", "k3s has not generated {tmp}/config.toml yet"))),
]


def materialize(tmp_path, files):
    for name, content in files.items():
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if content == "dir":
            target.mkdir()
        elif isinstance(content, tuple):
            os.symlink(content[1], str(target))
        elif isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)


def snapshot(tmp_path):
    """Every entry under tmp_path: kind, bytes, inode, mode, link target."""
    state = {}
    for root, dirs, names in os.walk(str(tmp_path)):
        for name in dirs + names:
            path = os.path.join(root, name)
            info = os.lstat(path)
            if os.path.islink(path):
                state[path] = ("link", os.readlink(path))
            elif os.path.isdir(path):
                state[path] = ("dir", info.st_mode)
            else:
                with open(path, "rb") as handle:
                    state[path] = ("file", handle.read(), info.st_ino, info.st_mode)
    return state


def run_module(capsys, args, check=False, diff=True):
    args = dict(args, _ansible_check_mode=check, _ansible_diff=diff)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            mod.main()
    out = capsys.readouterr().out
    return out, json.loads(out)


def absolute(tmp_path, args):
    args = dict(args)
    for key in ("path", "drop_in_path"):
        if key in args and not args[key].startswith("/"):
            args[key] = str(tmp_path / args[key])
    return args


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_reliability(capsys, tmp_path, case):
    _name, files, args, outcome = case
    materialize(tmp_path, files)
    before = snapshot(tmp_path)
    out, result = run_module(capsys, absolute(tmp_path, args))
    assert SECRET not in out
    assert "Traceback" not in out
    if outcome[0] == "fail":
        kind, message = outcome[1], outcome[2]
        assert result.get("failed") is True, result
        if isinstance(message, tuple):
            assert result["msg"].startswith(message[1].format(tmp=tmp_path)), result["msg"]
        else:
            assert result["msg"] == message.format(tmp=tmp_path)
        assert "\n" not in result["msg"]
        assert result.get("error_kind") == kind
        assert "exception" not in result
        assert snapshot(tmp_path) == before  # bytes, inode, mode, links; no temp file, no backup
    else:
        assert not result.get("failed"), result
        assert result["changed"] is True
        assert result.get("diff") and "exception" not in result
        outcome[1](tmp_path, result)
        # idempotent, and a second look changes nothing on disk
        middle = snapshot(tmp_path)
        _out, again = run_module(capsys, absolute(tmp_path, args))
        assert again["changed"] is False and snapshot(tmp_path) == middle
        leftovers = [p for p in middle if os.path.basename(p).endswith(".tmp")]
        assert leftovers == []


@pytest.mark.parametrize("code,kind_of_failure", [(errno.EBUSY, "it is a mount point"), (errno.EROFS, "read-only"),
                                                  (errno.EPERM, "not permitted")])
@pytest.mark.parametrize("runtime,name,text", [("containerd", "config.toml", CONTAINERD), ("docker", "daemon.json", DAEMON),
                                               ("crio", "crio.conf.d/99-nvidia.toml", "")])
def test_replacement_refused(capsys, tmp_path, monkeypatch, code, kind_of_failure, runtime, name, text):
    """A file that cannot be replaced (monkeypatched rename; the real bind mount is tested below)."""
    materialize(tmp_path, {name: text, "crio.conf": CRIO})
    before = snapshot(tmp_path)

    def refuse(src, dst):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(config_file.os, "rename", refuse)
    out, result = run_module(capsys, dict(runtime=runtime, path=str(tmp_path / name), backup=True))
    assert result["failed"] is True and result["error_kind"] == "runtime"
    assert result["msg"].startswith("cannot replace %s: " % (tmp_path / name)) and kind_of_failure in result["msg"]
    assert result["msg"].endswith("; file left unchanged")
    assert "exception" not in result and SECRET not in out
    assert snapshot(tmp_path) == before


def test_temp_file_cannot_be_created(capsys, tmp_path, monkeypatch):
    materialize(tmp_path, {"config.toml": CONTAINERD})
    before = snapshot(tmp_path)

    def erofs(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(config_file.tempfile, "mkstemp", erofs)
    _out, result = run_module(capsys, dict(runtime="containerd", path=str(tmp_path / "config.toml")))
    assert result["msg"] == "cannot write %s: Read-only file system" % (tmp_path / "config.toml")
    assert result["error_kind"] == "runtime" and snapshot(tmp_path) == before


def test_diff_masks_secrets_but_the_file_keeps_them(capsys, tmp_path):
    materialize(tmp_path, {"config.toml": CONTAINERD})
    out, result = run_module(capsys, dict(runtime="containerd", path=str(tmp_path / "config.toml")), check=True)
    assert SECRET not in out
    assert 'password = "********"' in result["diff"]["before"] and 'password = "********"' in result["diff"]["after"]
    _out, result = run_module(capsys, dict(runtime="containerd", path=str(tmp_path / "config.toml")))
    assert SECRET in (tmp_path / "config.toml").read_text()


def test_validate_output_is_masked(capsys, tmp_path):
    materialize(tmp_path, {"config.toml": CONTAINERD})
    before = snapshot(tmp_path)
    out, result = run_module(capsys, dict(runtime="containerd", path=str(tmp_path / "config.toml"),
                                          validate="sh -c 'cat \"$0\"; exit 1' %s"))
    assert result["failed"] is True and result["rc"] == 1
    assert SECRET not in out and 'password = "********"' in result["stdout"]
    assert snapshot(tmp_path) == before


def test_config_command_failing_falls_back_with_a_warning(capsys, tmp_path, monkeypatch):
    # the test process is an Ansible controller (tests/conftest.py), where warnings are displayed, not returned
    warned = []
    monkeypatch.setattr(mod.AnsibleModule, "warn",
                        lambda self, msg: warned.append(msg) if msg.startswith("config_source") else None)
    materialize(tmp_path, {"config.toml": CONTAINERD})
    _out, result = run_module(capsys, dict(runtime="containerd", path=str(tmp_path / "config.toml"),
                                           config_source="command", config_command="false %s"))
    assert result["changed"] is True and result["config_source"] == "file"
    assert warned == ["config_source=command: %s %s failed (rc=1: no output); runtime options are taken from the "
                      "files instead" % (shutil.which("false"), tmp_path / "config.toml")]
    del warned[:]
    _out, missing = run_module(capsys, dict(runtime="containerd", path=str(tmp_path / "config.toml"),
                                            config_source="command", config_command="no-such-containerd %s"))
    assert warned == ["config_source=command: no-such-containerd is not installed or not on PATH; runtime options are "
                      "taken from the files instead"]
    del warned[:]
    run_module(capsys, dict(runtime="containerd", path=str(tmp_path / "config.toml"), config_source="command",
                            config_command="containerd 'x"))
    assert warned == ["config_source=command: config_command is not a valid command line (No closing quotation); "
                      "runtime options are taken from the files instead"]


# ------------------------------------------------------------- a real read-only bind mount

RUNNER = r'''
import json, sys
sys.path.insert(0, sys.argv[1])
from ansible.module_utils.testing import patch_module_args
from ansible_collections.kubegpu.nvidia.plugins.modules import container_runtime_nvidia as mod
with patch_module_args(json.loads(sys.argv[2])):
    try:
        mod.main()
    except SystemExit:
        pass
'''


def can_bind_mount():
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("mount"):
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(not can_bind_mount(), reason="needs root and unshare -m to bind-mount a file read-only")
@pytest.mark.parametrize("runtime,name,text", [("containerd", "config.toml", CONTAINERD), ("docker", "daemon.json", DAEMON)])
def test_read_only_bind_mounted_file(tmp_path, runtime, name, text):
    """The file is a read-only bind mount (as a container or an immutable image mounts it): the rename
    fails with EBUSY; the module says so in one line and leaves the file and the directory as they were."""
    source = tmp_path / "source" / name
    etc = tmp_path / "etc"
    materialize(tmp_path, {"source/" + name: text, "etc/" + name: text})
    before = snapshot(etc)
    collections = os.path.join(os.path.dirname(os.path.dirname(mod.__file__)), "..", "..", "..", "..")
    args = json.dumps(dict(runtime=runtime, path=str(etc / name), backup=True, _ansible_diff=True))
    script = 'mount --bind "$1" "$2" && mount -o remount,ro,bind "$2" && exec "$3" -c "$4" "$5" "$6"'
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", str(source), str(etc / name), sys.executable,
                           RUNNER, os.path.abspath(collections), args],
                          capture_output=True, text=True, check=False, timeout=120)
    result = json.loads(proc.stdout)
    assert result["failed"] is True, result
    assert result["msg"] == ("cannot replace %s: it is a mount point (a file bind-mounted into place, for example "
                             "read-only), which a rename cannot replace; change it where it is mounted from; file left "
                             "unchanged" % (etc / name))
    assert result["error_kind"] == "runtime" and "exception" not in result
    assert SECRET not in proc.stdout
    assert snapshot(etc) == before  # no temp file and no backup left in the directory
