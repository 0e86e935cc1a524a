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
