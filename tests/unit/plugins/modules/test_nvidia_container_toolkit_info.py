# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia_container_toolkit_info end to end with the node's commands answered as a Debian node answers them.

dpkg-query, systemctl and k3s are replaced by their output; the repository files, the record and the CDI
specification are real files under a temp directory. The lab runs the module for real (tests/functional).
"""

from __future__ import absolute_import, division, print_function

import hashlib
import json
import os

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.kubegpu.nvidia.plugins.module_utils import toolkit_node, toolkit_repo, toolkit_state
from ansible_collections.kubegpu.nvidia.plugins.modules import nvidia_container_toolkit_info as mod

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "module_utils", "fixtures", "openpgp")
NVIDIA = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"
URL = "http://mirror.example/stable/deb/$(ARCH)"
INSTALLED = ("nvidia-container-toolkit ii  1.20.0-1\nnvidia-container-toolkit-base ii  1.20.0-1\n"
             "libnvidia-container-tools ii  1.20.0-1\nlibnvidia-container1 ii  1.20.0-1\npython3-tomlkit ii  0.11.7-1\n")


def unit_block(load="not-found", active="inactive", enabled=""):
    return "LoadState=%s\nActiveState=%s\nUnitFileState=%s\n" % (load, active, enabled)


class Node:
    """The commands' answers, and the files, of one node."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.dpkg = INSTALLED
        self.units = {}
        self.k3s_version = None
        self.calls = []

    def systemctl_show(self, units):
        return "\n".join(unit_block(*self.units.get(unit, ())) for unit in units)

    def as_method(self):
        """run_command as a method of AnsibleModule that answers from this node."""
        def run_command(module, argv, **kwargs):
            return self.run_command(module, argv, **kwargs)
        return run_command

    def run_command(self, module, argv, **kwargs):
        self.calls.append(argv)
        if argv[0] == "dpkg-query":
            return (0 if "never" not in self.dpkg else 1), self.dpkg, ""
        if argv[0].endswith("systemctl"):
            return 0, self.systemctl_show(argv[argv.index("--") + 1:]), ""
        if argv[0].endswith("k3s"):
            return 0, "k3s version %s (abcdef)\ngo version go1.22\n" % self.k3s_version, ""
        raise AssertionError("unexpected command %s" % argv)


@pytest.fixture(name="node")
def fixture_node(tmp_path, monkeypatch):
    node = Node(tmp_path)
    monkeypatch.setattr(mod.AnsibleModule, "run_command", node.as_method())
    monkeypatch.setattr(mod.AnsibleModule, "get_bin_path",
                        lambda self, name, *a, **kw: ("/usr/bin/" + name) if name == "systemctl" or (
                            name == "k3s" and node.k3s_version) else None)
    monkeypatch.setattr(toolkit_state.platform, "machine", lambda: "x86_64")
    # the repository files and apt's lists under tmp_path
    paths = {"key_path": str(tmp_path / "toolkit.asc"), "source_path": str(tmp_path / "toolkit.list"),
             "manager": "apt"}
    monkeypatch.setitem(toolkit_repo.FAMILIES, "Debian", paths)
    monkeypatch.setattr(toolkit_repo, "APT_LISTS", str(tmp_path))
    monkeypatch.setattr(toolkit_repo, "file_attributes_ok", lambda path, mode=0o644: os.path.exists(path))
    monkeypatch.setattr(toolkit_node, "CDI_REFRESH_OUTPUT", str(tmp_path / "run-cdi-nvidia.yaml"))
    node.units["containerd.service"] = ("loaded", "active", "enabled")
    return node


def put_repo_in_place(node, cached=True):
    with open(os.path.join(FIXTURES, "nvidia-container-toolkit.asc"), "rb") as src:
        (node.tmp / "toolkit.asc").write_bytes(src.read())
    (node.tmp / "toolkit.list").write_text(toolkit_repo.source_text("Debian", URL, str(node.tmp / "toolkit.asc")))
    if cached:
        (node.tmp / "mirror.example_stable_deb_amd64_Packages").write_text(
            "".join("Package: %s\nVersion: 1.20.0-1\n\n" % p for p in [
                "nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                "libnvidia-container1"]))


def run(capsys, node, **args):
    params = dict(family="Debian", version="1.20.0-1", repo_deb_url=URL, repo_key_fingerprints=[NVIDIA],
                  record_path=str(node.tmp / "record"), cdi_spec_path=str(node.tmp / "etc-cdi-nvidia.yaml"))
    params.update(args)
    with patch_module_args(params):
        with pytest.raises(SystemExit):
            mod.main()
    return json.loads(capsys.readouterr().out)


def test_a_fresh_node_needs_everything(capsys, node):
    node.dpkg = "python3-tomlkit ii  0.11.7-1\n"
    out = run(capsys, node, cdi_generate=True)
    assert out["changed"] is False and out["manager"] == "apt"
    assert out["packages_wanted"] == ["nvidia-container-toolkit", "nvidia-container-toolkit-base",
                                      "libnvidia-container-tools", "libnvidia-container1"]
    assert out["package_specs"][0] == "nvidia-container-toolkit=1.20.0-1"
    assert out["install_needed"] is True and out["tomlkit_missing"] is False
    repo = out["repo"]
    assert repo["needed"] is True and repo["index_ready"] is False
    assert (repo["source_in_place"], repo["key_in_place"], repo["cached"]) == (False, False, False)
    assert out["runtimes"] == ["containerd"] and out["services"] == {"containerd": "containerd"}
    assert [c["name"] for c in out["configure"]] == ["containerd"]
    assert out["cdi"]["mode"] == "refresh" and out["cdi"]["action"] == "refresh"


def test_everything_in_place_needs_nothing(capsys, node):
    put_repo_in_place(node)
    node.units["nvidia-cdi-refresh.path"] = ("loaded", "active", "enabled")
    (node.tmp / "run-cdi-nvidia.yaml").write_text("cdiVersion: 0.5.0\n")
    first = run(capsys, node, cdi_generate=True)
    # the record as the role writes it after the configuration module ran
    config = node.tmp / "config.toml"
    config.write_text("version = 2\n")
    key = first["record"]["keys"]["containerd"]
    (node.tmp / "record").write_text("%s\ncontainerd %s %s %s\n" % (
        toolkit_node.RECORD_HEADER, key, config, hashlib.sha256(b"version = 2\n").hexdigest()))
    out = run(capsys, node, cdi_generate=True)
    assert out["install_needed"] is False and out["packages_wanted"] == [] and out["repo"]["needed"] is False
    assert out["repo"]["index_ready"] is True
    assert out["configure"] == [] and out["in_place"] == ["containerd"]
    assert out["cdi"]["action"] == "none"
    # a file changed since the record: the module runs again
    config.write_text("version = 2\n# edited\n")
    assert [c["name"] for c in run(capsys, node)["configure"]] == ["containerd"]


def test_a_pinned_version_not_in_apts_index_is_not_ready_for_check_mode(capsys, node):
    put_repo_in_place(node)
    out = run(capsys, node, version="1.18.1-1")
    assert out["packages_wanted"] and out["repo"]["needed"] is True
    assert out["repo"]["cached"] is False and out["repo"]["index_ready"] is False


def test_an_installed_key_with_another_fingerprint_is_not_in_place(capsys, node):
    put_repo_in_place(node)
    out = run(capsys, node, repo_key_fingerprints=["3C495121AD7F138EC332D53B99DCE03292D11331"])
    assert out["repo"]["key_in_place"] is False and out["repo"]["needed"] is True
    assert out["repo"]["key_fingerprints"] == [NVIDIA]
    assert "is not one of the trusted fingerprints" in out["repo"]["key_problem"]


def test_an_unsupported_family_is_refused_before_the_node_is_read(capsys, node):
    out = run(capsys, node, family="Archlinux")
    assert out["msg"] == "The NVIDIA Container Toolkit role supports the Debian and RedHat families, not Archlinux."
    assert node.calls == []


def test_no_runtime_and_an_unknown_runtime_fail_with_one_line(capsys, node):
    node.units.clear()
    assert run(capsys, node)["msg"].startswith("No container runtime (containerd, Docker, CRI-O, k3s, RKE2) runs or is enabled")
    assert run(capsys, node, runtimes=["podman"])["msg"].startswith("Unknown container runtime(s) podman")


def test_k3s_v1_29_and_newer_finds_the_runtime_itself(capsys, node):
    node.units = {"k3s.service": ("loaded", "active", "enabled")}
    node.k3s_version = "v1.30.4+k3s1"
    out = run(capsys, node, set_as_default=True)
    assert out["runtimes"] == ["k3s"] and out["configure"] == []
    assert out["k3s"]["k3s"]["detection"] is True and out["k3s"]["k3s"]["detected"] is False
    assert out["k3s_actions"] == [{"name": "k3s", "path": "/etc/rancher/k3s/config.yaml.d/90-kubegpu-nvidia-runtime.yaml",
                                   "content": "# Managed by kubegpu.nvidia.nvidia_container_toolkit\n"
                                              "default-runtime: nvidia\n", "write": True}]
    node.k3s_version = "v1.28.5+k3s1"
    older = run(capsys, node)
    assert [c["args"]["flavor"] for c in older["configure"]] == ["k3s"] and older["k3s_actions"] == []
