# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every containerd configuration the module writes is loaded by a real containerd.

containerd 1.6 is Debian 12's package on this machine. containerd 1.7 (Debian 13) and
2.x (Debian sid, config version 3) are fetched once with ``apt-get download`` into
``.cache/containerd/`` and unpacked there (never installed); when that is impossible
(no mirror) those cases skip and say why.

``containerd --config FILE config dump`` parses the file the way the daemon does and
drops unknown keys silently, so the tests check the dump, not the exit code alone.
The module also runs through ``ansible localhost -m ...`` (check mode, diff, twice).
"""

from __future__ import absolute_import, division, print_function

import json
import os
import shutil
import subprocess

import pytest
import tomllib

from ansible_collections.kubegpu.nvidia.plugins.module_utils import containerd_config as cc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "unit", "plugins", "module_utils", "fixtures", "runtime")
CACHE = os.path.join(ROOT, ".cache", "containerd")
NV = "/usr/bin/nvidia-container-runtime"
SUITES = {"1.7": "trixie", "2.x": "sid"}

CORPUS = {  # fixture -> (config version, SystemdCgroup expected on the nvidia runtime)
    "containerd-1.6-default.toml": (2, False),
    "containerd-1.7-default.toml": (2, False),
    "containerd-2.1-default.toml": (3, False),
    "containerd-2.x-systemd.toml": (3, True),
    "containerd-debian-12-package.toml": (2, False),
    "containerd-v1.toml": (1, True),
    "containerd-systemd-cgroup-comments.toml": (2, True),
    "containerd-existing-nvidia.toml": (2, True),
    "containerd-custom-default.toml": (2, True),
    "containerd-kata-default.toml": (2, True),
    "containerd-imports.toml": (2, True),
    "k3s-config.toml": (2, True),
    "rke2-config.toml": (3, True),
}


def _fetch(release):
    """Unpack Debian's containerd package of ``release`` under .cache/containerd; return the binary."""
    suite = SUITES[release]
    dest = os.path.join(CACHE, suite)
    binary = os.path.join(dest, "root", "usr", "bin", "containerd")
    if os.access(binary, os.X_OK):
        return binary
    apt = os.path.join(CACHE, "apt")
    for sub in ("lists/partial", "cache/archives/partial", "etc"):
        os.makedirs(os.path.join(apt, sub), exist_ok=True)
    sources = os.path.join(apt, "etc", "sources.list")
    with open(sources, "w") as handle:
        handle.write("deb http://deb.debian.org/debian trixie main\ndeb http://deb.debian.org/debian sid main\n")
    opts = ["-o", "Dir::Etc::SourceList=" + sources, "-o", "Dir::Etc::SourceParts=/dev/null",
            "-o", "Dir::State::Lists=" + os.path.join(apt, "lists"), "-o", "Dir::Cache=" + os.path.join(apt, "cache"),
            "-o", "APT::Sandbox::User=root", "-qq"]
    if not os.listdir(os.path.join(apt, "lists")) or len(os.listdir(os.path.join(apt, "lists"))) < 3:
        subprocess.run(["apt-get"] + opts + ["update"], check=True, capture_output=True, timeout=300)
    os.makedirs(dest, exist_ok=True)
    for name in os.listdir(dest):
        if name.endswith(".deb"):
            os.unlink(os.path.join(dest, name))
    subprocess.run(["apt-get"] + opts + ["download", "containerd/" + suite], check=True, capture_output=True,
                   cwd=dest, timeout=300)
    deb = [name for name in os.listdir(dest) if name.endswith(".deb")][0]
    subprocess.run(["dpkg-deb", "-x", os.path.join(dest, deb), os.path.join(dest, "root")], check=True)
    os.unlink(os.path.join(dest, deb))
    return binary


@pytest.fixture(scope="session")
def containerds():
    """{release: binary or skip reason} for 1.6 (system), 1.7 and 2.x."""
    found = {}
    system = shutil.which("containerd")
    found["1.6"] = system if system else "containerd is not installed (apt-get install containerd)"
    for release in SUITES:
        try:
            binary = _fetch(release)
            subprocess.run([binary, "--version"], check=True, capture_output=True)
            found[release] = binary
        except (OSError, subprocess.SubprocessError, IndexError) as exc:
            found[release] = "containerd %s from Debian %s not available: %s" % (release, SUITES[release], exc)
    return found


def binary_for(containerds, release):
    value = containerds[release]
    if not os.path.isabs(value):
        pytest.skip(value)
    return value


def dump(binary, path):
    proc = subprocess.run([binary, "--config", str(path), "config", "dump"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return tomllib.loads(proc.stdout)


def releases_for(version):
    return ["1.6", "1.7"] if version == 1 else ["1.6", "1.7", "2.x"] if version == 2 else ["2.x"]


def dump_cri(data):
    """The CRI runtime table of a dump (2.x dumps version 3 even for a version 2 input)."""
    plugins = data["plugins"]
    return plugins.get("io.containerd.cri.v1.runtime") or plugins["io.containerd.grpc.v1.cri"]


def check_dump(data, release, systemd, default):
    cri = dump_cri(data)
    nvidia = cri["containerd"]["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"]["BinaryName"] == NV
    assert nvidia["options"].get("SystemdCgroup", False) is systemd
    assert cri["containerd"]["default_runtime_name"] == default
    if release != "1.6":  # containerd 1.6 has no CDI and drops the key
        assert cri["enable_cdi"] is True


CASES = [(name, release) for name, (version, _s) in sorted(CORPUS.items()) for release in releases_for(version)]


@pytest.mark.parametrize("name,release", CASES)
def test_in_place_output_loads(containerds, tmp_path, name, release):
    binary = binary_for(containerds, release)
    version, systemd = CORPUS[name]
    with open(os.path.join(FIXTURES, name)) as handle:
        text = handle.read()
    new, got = cc.edit_text(text, name, "present", "nvidia", NV, set_as_default=True, cdi=True)
    assert got == version
    path = tmp_path / "config.toml"
    path.write_text(new)
    check_dump(dump(binary, path), release, systemd, "nvidia")
    # not the default: the file's own default stays in force
    kept, _v = cc.edit_text(text, name, "present", "nvidia", NV, set_as_default=False, cdi=True)
    path.write_text(kept)
    before = dump_cri(dump(binary, tmp_path / "config.toml"))["containerd"]["default_runtime_name"]
    expected = cc.plain(cc.parse(text, name)).get("plugins", {}).get(cc.CRI_PLUGIN[version], {}) \
        .get("containerd", {}).get("default_runtime_name", "runc")
    assert before == expected


@pytest.mark.parametrize("release", ["1.6", "1.7", "2.x"])
def test_drop_in_loads(containerds, tmp_path, release):
    """containerd < 2.1 replaces a plugin table per import: the drop-in must carry all of it."""
    binary = binary_for(containerds, release)
    name = "containerd-2.x-systemd.toml" if release == "2.x" else "containerd-systemd-cgroup-comments.toml"
    main = tmp_path / "config.toml"
    shutil.copy(os.path.join(FIXTURES, name), str(main))
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    new_main, new_drop, _v = cc.edit_drop_in(main.read_text(), str(main), None, str(drop), "present", "nvidia", NV,
                                             set_as_default=True, cdi=True)
    main.write_text(new_main)
    drop.parent.mkdir()
    drop.write_text(new_drop)
    data = dump(binary, main)
    check_dump(data, release, True, "nvidia")
    runc = dump_cri(data)["containerd"]["runtimes"]["runc"]
    assert runc["options"]["SystemdCgroup"] is True  # the rest of the CRI table survived the import


def test_base_template_renders_like_k3s(containerds, tmp_path):
    """k3s renders {{ template "base" . }} as its generated config; the result must load."""
    binary = binary_for(containerds, "1.6")
    with open(os.path.join(FIXTURES, "k3s-config.toml")) as handle:
        generated = handle.read()
    with open(os.path.join(FIXTURES, "k3s-base.toml.tmpl")) as handle:
        template = handle.read()
    new, _v = cc.edit_text(template, "t", "present", "nvidia", NV, reference_text=generated)
    rendered = new.replace('{{ template "base" . }}', generated)
    (tmp_path / "config.toml").write_text(rendered)
    cri = dump_cri(dump(binary, tmp_path / "config.toml"))
    assert cri["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == NV
    assert cri["containerd"]["runtimes"]["nvidia"]["options"]["SystemdCgroup"] is True
    assert "runsc" in cri["containerd"]["runtimes"]


def ansible(args, check=False, diff=False):
    cmd = ["ansible", "localhost", "-m", "kubegpu.nvidia.container_runtime_nvidia", "-a", json.dumps(args)]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_DEPRECATION_WARNINGS="0",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
    out = proc.stdout
    marker = out.index("localhost | ")
    status = out[marker:].split("=>", 1)
    result = json.loads(status[1]) if len(status) > 1 and status[1].strip().startswith("{") else {}
    result["status"] = status[0].split("|", 1)[1].strip()
    return proc.returncode, out[:marker], result


@pytest.mark.parametrize("release", ["1.6", "2.x"])
def test_ansible_adhoc(containerds, tmp_path, release):
    binary = binary_for(containerds, release)
    name = "containerd-2.1-default.toml" if release == "2.x" else "containerd-1.6-default.toml"
    cfg = tmp_path / "config.toml"
    shutil.copy(os.path.join(FIXTURES, name), str(cfg))
    original = cfg.read_text()
    args = {"runtime": "containerd", "path": str(cfg), "set_as_default": True, "cdi": True, "backup": True,
            "validate": "%s --config %%s config dump" % binary}

    rc, shown, result = ansible(args, check=True, diff=True)
    assert rc == 0 and result["changed"] is True
    assert '+        [plugins."io.containerd' in shown or "+        [plugins.'io.containerd" in shown
    assert cfg.read_text() == original

    rc, _shown, result = ansible(args)
    assert rc == 0 and result["changed"] is True and result["restart_required"] is True
    check_dump(dump(binary, cfg), release, False, "nvidia")
    assert os.path.exists(result["backup_file"])

    rc, shown, result = ansible(args, diff=True)
    assert rc == 0 and result["changed"] is False and shown.strip() == ""

    rc, _shown, result = ansible(dict(args, state="absent", set_as_default=False))
    assert rc == 0 and result["changed"] is True
    cri = dump_cri(dump(binary, cfg))
    assert "nvidia" not in cri["containerd"]["runtimes"]
    assert cri["containerd"]["default_runtime_name"] == "runc"


def test_ansible_validate_refuses(containerds, tmp_path):
    """A file the real containerd rejects (wrong type) never replaces the old one."""
    binary = binary_for(containerds, "1.6")
    cfg = tmp_path / "config.toml"
    cfg.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  max_concurrent_downloads = "many"\n')
    original = cfg.read_text()
    rc, _shown, result = ansible({"runtime": "containerd", "path": str(cfg),
                                  "validate": "%s --config %%s config dump" % binary})
    assert rc != 0 and result["status"] == "FAILED!"
    assert "validate command failed" in result["msg"]
    assert cfg.read_text() == original
    assert sorted(os.listdir(str(tmp_path))) == ["config.toml"]


# ------------------------------------------------------------- several runtimes, every spelling, the effective config

THREE = [cc.runtime("nvidia", NV, default=True), cc.runtime("nvidia-cdi", NV + ".cdi", mode="cdi"),
         cc.runtime("nvidia-legacy", NV + ".legacy", mode="legacy")]


def check_three(data, release, systemd, default="nvidia"):
    """containerd registered all three runtimes, each with its binary and the inherited options."""
    cri = dump_cri(data)
    runtimes = cri["containerd"]["runtimes"]
    for item in THREE:
        table = runtimes[item.name]
        assert table["runtime_type"] == "io.containerd.runc.v2", item.name
        assert table["options"]["BinaryName"] == item.path, item.name
        assert table["options"].get("SystemdCgroup", False) is systemd, item.name
    assert cri["containerd"]["default_runtime_name"] == default


@pytest.mark.parametrize("name,release", CASES)
def test_three_runtimes_in_place_load(containerds, tmp_path, name, release):
    binary = binary_for(containerds, release)
    version, systemd = CORPUS[name]
    with open(os.path.join(FIXTURES, name)) as handle:
        text = handle.read()
    new, _v = cc.edit_text(text, name, "present", THREE, cdi=True)
    path = tmp_path / "config.toml"
    path.write_text(new)
    check_three(dump(binary, path), release, systemd)


SPELLINGS = {
    "tables": '''version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
SystemdCgroup = true
''',
    "dotted-top-level": '''version = 2
plugins."io.containerd.grpc.v1.cri".containerd.default_runtime_name = "runc"
plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options.SystemdCgroup = true
plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.runtime_type = "io.containerd.runc.v2"
''',
    "dotted-under-plugins": '''version = 2
[plugins]
"io.containerd.grpc.v1.cri".containerd.default_runtime_name = "runc"
"io.containerd.grpc.v1.cri".containerd.runtimes.runc.runtime_type = "io.containerd.runc.v2"
"io.containerd.grpc.v1.cri".containerd.runtimes.runc.options.SystemdCgroup = true
''',
    "inline-runtimes": '''version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "runc"
runtimes = { runc = { runtime_type = "io.containerd.runc.v2", options = { SystemdCgroup = true } } }
''',
    "inline-options": '''version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"
options = { SystemdCgroup = true }
''',
    "mixed": '''version = 2
[plugins."io.containerd.grpc.v1.cri"]
  containerd.default_runtime_name = "runc"
  containerd.runtimes.runc.options = { SystemdCgroup = true }
  containerd.runtimes.runc.runtime_type = "io.containerd.runc.v2"
''',
}


def comparable(data):
    """A dump without ``imports`` (containerd 2.x lists the loaded file itself there)."""
    return dict((k, v) for k, v in data.items() if k != "imports")


@pytest.mark.parametrize("release", ["1.6", "1.7", "2.x"])
@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_every_spelling_loads_as_the_table_spelling(containerds, tmp_path, release, spelling):
    """Issue 12 item 3: the same configuration spelled differently gives the same config dump."""
    binary = binary_for(containerds, release)
    (tmp_path / "original.toml").write_text(SPELLINGS[spelling])
    (tmp_path / "tables.toml").write_text(SPELLINGS["tables"])
    assert comparable(dump(binary, tmp_path / "original.toml")) == comparable(dump(binary, tmp_path / "tables.toml"))
    new, _v = cc.edit_text(SPELLINGS[spelling], spelling, "present", THREE, cdi=True)
    expected, _v = cc.edit_text(SPELLINGS["tables"], "tables", "present", THREE, cdi=True)
    (tmp_path / "edited.toml").write_text(new)
    (tmp_path / "expected.toml").write_text(expected)
    data = dump(binary, tmp_path / "edited.toml")
    check_three(data, release, True)
    assert comparable(data) == comparable(dump(binary, tmp_path / "expected.toml"))


@pytest.mark.parametrize("release", ["1.6", "1.7", "2.x"])
def test_runs_into_one_drop_in_load(containerds, tmp_path, release):
    """Three runs, one runtime each, into one drop-in: containerd registers all three."""
    binary = binary_for(containerds, release)
    name = "containerd-2.x-systemd.toml" if release == "2.x" else "containerd-systemd-cgroup-comments.toml"
    main = tmp_path / "config.toml"
    shutil.copy(os.path.join(FIXTURES, name), str(main))
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    drop.parent.mkdir()
    for item in THREE:
        before = drop.read_text() if drop.exists() else None
        new_main, new_drop, _v = cc.edit_drop_in(main.read_text(), str(main), before, str(drop), "present", [item])
        main.write_text(new_main)
        drop.write_text(new_drop)
    check_three(dump(binary, main), release, True)


def test_config_source_command_takes_options_from_imports(containerds, tmp_path):
    """Issue 15 item 3: runc's SystemdCgroup set in an imported file reaches the new runtimes through
    `containerd config dump`; without it (or when the command fails) only the main file is read."""
    binary = binary_for(containerds, "2.x")
    cfg = tmp_path / "config.toml"
    (tmp_path / "conf.d").mkdir()
    cfg.write_text('version = 3\nimports = ["%s/conf.d/*.toml"]\n' % tmp_path)
    (tmp_path / "conf.d" / "10-runc.toml").write_text(
        "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n"
        "SystemdCgroup = true\nNoPivotRoot = true\n")
    args = {"runtime": "containerd", "path": str(cfg), "flavor": "containerd",
            "runtimes": [{"name": "nvidia", "default": True}, {"name": "nvidia-cdi", "mode": "cdi"},
                         {"name": "nvidia-legacy", "mode": "legacy"}]}
    rc, _shown, result = ansible(dict(args, config_source="command",
                                      config_command="%s --config %%s config dump" % binary), check=True)
    assert rc == 0 and result["config_source"] == "command" and result["options_source"] == "runc"
    rc, _shown, result = ansible(dict(args, config_source="command", config_command="%s --config %%s config dump" % binary))
    assert rc == 0 and result["changed"] is True
    data = dump(binary, cfg)
    check_three(data, "2.x", True)
    assert all(dump_cri(data)["containerd"]["runtimes"][r.name]["options"]["NoPivotRoot"] is True for r in THREE)
    plain = tmp_path / "plain.toml"
    plain.write_text('version = 3\n')
    rc, _shown, result = ansible(dict(args, path=str(plain), config_source="command",
                                      config_command="/nonexistent/containerd --config %s config dump"))
    assert rc == 0 and result["config_source"] == "file" and result["options_source"] is None


def test_ansible_edits_through_a_link_with_validate(containerds, tmp_path):
    """Issue 12 item 1: config.toml is a link; the target is edited (validated by containerd), the link stays."""
    binary = binary_for(containerds, "1.6")
    (tmp_path / "real").mkdir()
    shutil.copy(os.path.join(FIXTURES, "containerd-1.6-default.toml"), str(tmp_path / "real" / "config.toml"))
    os.symlink("real/config.toml", str(tmp_path / "config.toml"))
    rc, _shown, result = ansible({"runtime": "containerd", "path": str(tmp_path / "config.toml"), "backup": True,
                                  "validate": "%s --config %%s config dump" % binary})
    assert rc == 0 and result["changed"] is True
    assert os.readlink(str(tmp_path / "config.toml")) == "real/config.toml"
    assert os.path.dirname(result["backup_file"]) == str(tmp_path / "real")
    nvidia = dump_cri(dump(binary, tmp_path / "config.toml"))["containerd"]["runtimes"]["nvidia"]
    assert nvidia["options"]["BinaryName"] == NV
