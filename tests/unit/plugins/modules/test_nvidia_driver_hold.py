"""nvidia_driver_hold: holds and releases per package manager, check mode, diff, clear failures.

The package manager is stubbed at the module's boundary (run_command, get_bin_path); the Molecule
scenario `driver` proves the holds with the real apt on a node.
"""
import json

import pytest
from ansible.module_utils import _internal as ansible_internal
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common import warnings as ansible_warnings
from ansible.module_utils.testing import patch_module_args

from ansible_collections.kubegpu.nvidia.plugins.module_utils import driver_packages as pkgs
from ansible_collections.kubegpu.nvidia.plugins.modules import nvidia_driver_hold

DPKG = ("nvidia-driver\t535.183.01-1\tii \n"
        "libcuda1\t535.183.01-1\tii \n"
        "libnvidia-ml1\t535.183.01-1\tii \n"
        "nvidia-kernel-dkms\t535.183.01-1\tii \n"
        "nvidia-fabricmanager-535\t535.183.01-1\tii \n"
        "nvidia-fabricmanager-525\t525.147.05-1\tii \n"
        "nvidia-persistenced\t535.171.04-1\tii \n"
        "nvidia-container-toolkit\t1.17.8-1\tii \n")


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(ansible_warnings, "_global_warnings", {})
    monkeypatch.setattr(ansible_internal, "is_controller", False)


class Node:
    """A node's apt state: installed packages, holds, and the commands run against it."""

    def __init__(self, monkeypatch, tmp_path, held=(), family="apt", versionlock=True):
        self.held = set(held)
        self.family = family
        self.versionlock = versionlock
        self.commands = []
        self.conf = tmp_path / "51kubegpu-nvidia-driver"
        monkeypatch.setattr(pkgs, "UNATTENDED_UPGRADES_CONF", str(self.conf))
        monkeypatch.setattr(AnsibleModule, "run_command", self.run_command)
        monkeypatch.setattr(AnsibleModule, "get_bin_path", self.get_bin_path)

    def get_bin_path(self, name, *args, **kwargs):
        tools = {"apt": ("apt-mark", "dpkg-query"), "dnf": ("dnf", "rpm")}[self.family]
        return "/usr/bin/" + name if name in tools else None

    def run_command(self, argv, **kwargs):
        self.commands.append(list(argv))
        if argv[0] in ("dpkg-query", "rpm"):
            return 0, DPKG, ""
        if argv[:2] == ["apt-mark", "showhold"]:
            return 0, "".join(name + "\n" for name in sorted(self.held)), ""
        if argv[:3] == ["dnf", "-q", "versionlock"] and argv[3] == "list":
            if not self.versionlock:
                return 1, "", "No such command: versionlock."
            return 0, "".join("%s-0:535.183.01-1.*\n" % name for name in sorted(self.held)), ""
        if argv[0] == "apt-mark" or argv[:4] == ["dnf", "-q", "-y", "versionlock"]:
            names = argv[2:] if argv[0] == "apt-mark" else argv[5:]
            if argv[1] == "hold" or "add" in argv:
                self.held |= set(names)
            else:
                self.held -= set(names)
            return 0, "", ""
        raise AssertionError("unexpected command %s" % argv)


def run(capsys, args, check=False, diff=False):
    if check:
        args = dict(args, _ansible_check_mode=True)
    if diff:
        args = dict(args, _ansible_diff=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit) as caught:
            nvidia_driver_hold.main()
    return caught.value.code, json.loads(capsys.readouterr().out)


def test_holds_the_driver_stack_at_its_version(capsys, monkeypatch, tmp_path):
    node = Node(monkeypatch, tmp_path, held=["nvidia-fabricmanager-525"])
    rc, result = run(capsys, {"packages": ["nvidia-driver", "nvidia-fabricmanager-535"]})
    assert rc == 0, result
    stack = ["libcuda1", "libnvidia-ml1", "nvidia-driver", "nvidia-fabricmanager-535", "nvidia-kernel-dkms"]
    assert result["changed"] is True and result["version"] == "535.183.01"
    assert result["added"] == stack
    # a hold left from another driver version is released; Debian's persistenced and the toolkit are left alone
    assert result["removed"] == ["nvidia-fabricmanager-525"]
    assert node.held == set(stack)
    assert ["apt-mark", "hold"] + stack in node.commands
    assert ["apt-mark", "unhold", "nvidia-fabricmanager-525"] in node.commands
    assert node.conf.read_text() == pkgs.unattended_upgrades_conf(stack)
    # a second run changes nothing
    rc, result = run(capsys, {"packages": ["nvidia-driver", "nvidia-fabricmanager-535"]})
    assert (rc, result["changed"], result["held"]) == (0, False, stack)


def test_check_mode_and_diff_change_nothing(capsys, monkeypatch, tmp_path):
    node = Node(monkeypatch, tmp_path)
    rc, result = run(capsys, {"packages": ["nvidia-driver"]}, check=True, diff=True)
    assert rc == 0 and result["changed"] is True
    assert node.held == set() and not node.conf.exists()
    assert not [c for c in node.commands if c[:2] == ["apt-mark", "hold"]]
    assert result["diff"][0]["after"].splitlines() == [
        "libcuda1", "libnvidia-ml1", "nvidia-driver", "nvidia-fabricmanager-535", "nvidia-kernel-dkms"]
    assert result["diff"][1]["after_header"] == str(node.conf)


def test_release_unholds_the_stack_and_removes_the_blacklist(capsys, monkeypatch, tmp_path):
    node = Node(monkeypatch, tmp_path, held=["nvidia-driver", "libcuda1", "nvidia-container-toolkit"])
    node.conf.write_text("old\n")
    rc, result = run(capsys, {"state": "released"})
    assert rc == 0 and result["changed"] is True
    assert result["removed"] == ["libcuda1", "nvidia-driver"]
    # the toolkit's hold is not the driver's
    assert node.held == {"nvidia-container-toolkit"}
    assert not node.conf.exists()
    rc, result = run(capsys, {"state": "released"})
    assert result["changed"] is False


def test_dnf_uses_versionlock(capsys, monkeypatch, tmp_path):
    node = Node(monkeypatch, tmp_path, family="dnf")
    rc, result = run(capsys, {"packages": ["nvidia-driver"], "version": "535.183.01"})
    assert rc == 0, result
    assert node.commands[-1][:5] == ["dnf", "-q", "-y", "versionlock", "add"]
    assert not node.conf.exists()     # no unattended-upgrades on dnf systems


def test_dnf_without_the_versionlock_plugin(capsys, monkeypatch, tmp_path):
    Node(monkeypatch, tmp_path, family="dnf", versionlock=False)
    rc, result = run(capsys, {"packages": ["nvidia-driver"]})
    assert rc == 1
    assert result["msg"] == "dnf versionlock is not available: install python3-dnf-plugin-versionlock"
    assert result["error_kind"] == "dependency"


def test_a_package_that_is_not_installed_cannot_be_held(capsys, monkeypatch, tmp_path):
    node = Node(monkeypatch, tmp_path)
    rc, result = run(capsys, {"packages": ["nvidia-driver", "nvidia-fabricmanager-570"]})
    assert rc == 1
    assert (result["msg"], result["error_kind"]) == ("cannot hold nvidia-fabricmanager-570: not installed", "input")
    assert node.held == set()
