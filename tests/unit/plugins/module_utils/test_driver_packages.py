"""Driver package decisions: versions, the driver stack, holds per package manager, the one version."""
import re

import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import driver_packages as pkgs


@pytest.mark.parametrize("version,upstream", [
    ("535.183.01-1~deb12u1", "535.183.01"), ("1:535.183.01-1", "535.183.01"),
    ("570.172.08-0ubuntu0.22.04.1", "570.172.08"), ("3:580.95.05-1.el9", "580.95.05"),
    ("580.95.05-1ubuntu1", "580.95.05"), ("", None), (None, None)])
def test_upstream_version(version, upstream):
    assert pkgs.upstream_version(version) == upstream


def test_version_order_and_branch():
    assert pkgs.version_key("570.133.20") > pkgs.version_key("570.124.06")
    assert pkgs.version_key("535.216.01") > pkgs.version_key("535.183.01")
    assert pkgs.version_key("abc") is None
    assert pkgs.branch_of("3:580.95.05-1.el9") == "580"


@pytest.mark.parametrize("name,stack", [
    ("nvidia-driver", True), ("nvidia-kernel-dkms", True), ("libcuda1", True), ("libnvidia-ml1", True),
    ("nvidia-driver-570-server-open", True), ("libnvidia-compute-570-server", True),
    ("nvidia-fabricmanager-570", True), ("cuda-drivers-580", True), ("kmod-nvidia-open-dkms", True),
    ("xserver-xorg-video-nvidia-570-server", True),
    # the Container Toolkit's packages are not the driver's
    ("nvidia-container-toolkit", False), ("nvidia-container-toolkit-base", False), ("libnvidia-container1", False),
    ("libnvidia-container-tools", False), ("nvidia-docker2", False),
    # per-kernel precompiled modules: holding them would keep a kernel update from its module
    ("linux-modules-nvidia-570-server-open-generic", False), ("linux-objects-nvidia-570-server-6.8.0-49-generic", False),
    ("curl", False)])
def test_stack_names(name, stack):
    assert pkgs.is_stack_name(name) is stack


DPKG = ("nvidia-driver\t535.183.01-1\tii \n"
        "libcuda1:amd64\t535.183.01-1\thi \n"
        "nvidia-kernel-dkms\t535.183.01-1\tii \n"
        "nvidia-persistenced\t535.171.04-1\tii \n"
        "nvidia-container-toolkit\t1.17.8-1\tii \n"
        "nvidia-kernel-dkms-old\t525.147.05-1\trc \n"
        "firmware-misc-nonfree\t20230210-5\tii \n"
        "garbage line\n")


def test_installed_packages_from_dpkg_query():
    assert pkgs.installed_argv(pkgs.APT)[0] == "dpkg-query"
    assert pkgs.parse_installed(DPKG) == {
        "nvidia-driver": "535.183.01-1", "libcuda1": "535.183.01-1", "nvidia-kernel-dkms": "535.183.01-1",
        "nvidia-persistenced": "535.171.04-1", "nvidia-container-toolkit": "1.17.8-1",
        "firmware-misc-nonfree": "20230210-5"}


def test_driver_stack_is_what_carries_the_driver_version():
    installed = pkgs.parse_installed(DPKG)
    # nvidia-persistenced has its own version on Debian; the toolkit and firmware are not the driver's
    assert pkgs.driver_stack(installed, "535.183.01", ["nvidia-driver"]) == [
        "libcuda1", "nvidia-driver", "nvidia-kernel-dkms"]
    # a named package belongs to it whatever its version
    assert pkgs.driver_stack(installed, "535.183.01", ["firmware-misc-nonfree"]) == [
        "firmware-misc-nonfree", "libcuda1", "nvidia-driver", "nvidia-kernel-dkms"]
    assert pkgs.driver_stack(installed, None, ["nvidia-driver", "absent"]) == ["nvidia-driver"]


@pytest.mark.parametrize("family,hold,release,showhold", [
    (pkgs.APT, ["apt-mark", "hold", "nvidia-driver", "libcuda1"], ["apt-mark", "unhold", "nvidia-driver", "libcuda1"],
     ["apt-mark", "showhold"]),
    (pkgs.DNF, ["dnf", "-q", "-y", "versionlock", "add", "nvidia-driver", "libcuda1"],
     ["dnf", "-q", "-y", "versionlock", "delete", "nvidia-driver", "libcuda1"], ["dnf", "-q", "versionlock", "list"]),
])
def test_hold_commands_per_family(family, hold, release, showhold):
    assert pkgs.hold_argv(family, ["nvidia-driver", "libcuda1"]) == hold
    assert pkgs.hold_argv(family, ["nvidia-driver", "libcuda1"], hold=False) == release
    assert pkgs.held_argv(family) == showhold


def test_held_packages_apt():
    assert pkgs.parse_held(pkgs.APT, "nvidia-driver\nlibcuda1:amd64\n\n") == ["libcuda1", "nvidia-driver"]


def test_held_packages_dnf_versionlock_list():
    # dnf versionlock list prints one "name-epoch:version-release.*" per lock (dnf-plugins-core versionlock.py)
    text = ("Last metadata expiration check: 0:01:02 ago on Mon 1 Jan 2024.\n"
            "nvidia-driver-3:580.95.05-1.el9.*\n"
            "kmod-nvidia-open-dkms-3:580.95.05-1.el9.*\n"
            "nvidia-fabric-manager-0:580.95.05-1.*\n"
            "!nvidia-driver-3:575.51.03-1.el9.*\n")
    assert pkgs.parse_held(pkgs.DNF, text) == ["kmod-nvidia-open-dkms", "nvidia-driver", "nvidia-fabric-manager"]


def test_held_at_other_version():
    installed = {"nvidia-driver": "535.183.01-1", "libcuda1": "535.183.01-1", "nvidia-persistenced": "535.171.04-1",
                 "nvidia-container-toolkit": "1.17.8-1"}
    held = ["nvidia-driver", "libcuda1", "nvidia-persistenced", "nvidia-container-toolkit"]
    names = ["nvidia-driver", "nvidia-kernel-dkms"]
    assert pkgs.held_at_other_version(installed, held, names, version="535.183.01") == []
    # the driver and its library, at the installed driver's version; not Debian's nvidia-persistenced,
    # which has its own version, nor the toolkit
    assert pkgs.held_at_other_version(installed, held, names, version="535.216.01") == [
        ("libcuda1", "535.183.01-1"), ("nvidia-driver", "535.183.01-1")]
    assert pkgs.held_at_other_version(installed, held, names, branch="535") == []
    assert [name for name, _v in pkgs.held_at_other_version(installed, held, names, branch="580")] == [
        "libcuda1", "nvidia-driver"]
    # a library held while its driver package is not
    assert pkgs.held_at_other_version(installed, ["libcuda1"], names, version="535.216.01") == [
        ("libcuda1", "535.183.01-1")]
    assert pkgs.held_at_other_version(installed, held, [], version="535.216.01") == []


def test_available_versions_apt_cache_madison():
    text = (" nvidia-driver | 535.216.01-1~standin1 | file:/srv/mirror bookworm/non-free amd64 Packages\n"
            " nvidia-driver | 535.183.01-1~standin1 | file:/srv/mirror bookworm/non-free amd64 Packages\n"
            "nvidia-fabricmanager-535 | 535.183.01-1~standin1 | file:/srv/mirror bookworm/non-free amd64 Packages\n")
    assert pkgs.available_argv(pkgs.APT, ["nvidia-driver"]) == ["apt-cache", "madison", "nvidia-driver"]
    offered = pkgs.parse_available(pkgs.APT, text)
    assert offered == {"nvidia-driver": ["535.216.01-1~standin1", "535.183.01-1~standin1"],
                       "nvidia-fabricmanager-535": ["535.183.01-1~standin1"]}
    # Fabric Manager is not offered at 535.216.01: the driver goes in at the version both have
    assert pkgs.common_version(offered, ["nvidia-driver", "nvidia-fabricmanager-535"], "535") == "535.183.01"
    assert pkgs.common_version(offered, ["nvidia-driver"], "535") == "535.216.01"
    assert pkgs.common_version(offered, ["nvidia-driver"], "570") is None
    assert pkgs.common_version(offered, ["nvidia-driver", "absent"], "535") is None


def test_available_versions_dnf_repoquery():
    text = "nvidia-driver\t3:580.95.05-1.el9\nnvidia-driver\t3:580.82.07-1.el9\n"
    assert pkgs.parse_available(pkgs.DNF, text) == {"nvidia-driver": ["3:580.95.05-1.el9", "3:580.82.07-1.el9"]}
    assert pkgs.common_version(pkgs.parse_available(pkgs.DNF, text), ["nvidia-driver"]) == "580.95.05"


def test_unattended_upgrades_blacklist_matches_exactly_the_held_packages():
    conf = pkgs.unattended_upgrades_conf(["nvidia-driver", "libcuda1"])
    entries = re.findall(r'"([^"]+)";', conf)
    assert entries == ["^libcuda1$", "^nvidia-driver$"]
    assert "Unattended-Upgrade::Package-Blacklist {" in conf
    # unattended-upgrades matches each entry with re.match (unattended-upgrade, is_pkgname_in_blacklist)
    for name, blocked in (("nvidia-driver", True), ("nvidia-driver-bin", False), ("libcuda1", True)):
        assert any(re.match(entry, name) for entry in entries) is blocked, name


def test_apt_preferences_pin_the_whole_stack_to_one_version():
    text = pkgs.apt_preferences("535.183.01")
    fields = dict(line.split(": ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert fields["Pin"] == "version 535.183.01*"
    assert fields["Pin-Priority"] == "1001"      # above 1000: apt downgrades to it when needed
    pattern = re.compile(fields["Package"].strip("/"))
    for name in ("nvidia-driver", "libcuda1", "libnvidia-ml1", "nvidia-kernel-dkms", "nvidia-fabricmanager-535",
                 "libnvidia-compute-570-server", "xserver-xorg-video-nvidia", "firmware-nvidia-gsp"):
        assert pattern.match(name), name
    for name in ("linux-modules-nvidia-570-server-open-generic", "curl", "dkms"):
        assert not pattern.match(name), name
    # the same names as the stack (the toolkit's match the pattern but never carry a driver version)
    assert all(pattern.match(name) for name in ("nvidia-container-toolkit", "libnvidia-container1"))
