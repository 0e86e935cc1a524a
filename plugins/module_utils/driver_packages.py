# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The NVIDIA driver's packages on apt and dnf systems: which are the driver's, their versions, holds.

The driver stack is every installed package whose upstream version is the driver's (``535.183.01``
in ``535.183.01-1``, ``570.172.08-0ubuntu0.22.04.1``, ``3:580.95.05-1.el9``) and whose name is one
the NVIDIA driver packages use: the kernel module sources, the user-space libraries (``libcuda1``,
``libnvidia-ml1``, ``libnvidia-compute-570-server``, ...), the tools and Fabric Manager, in each
distribution's and NVIDIA's own naming. The Container Toolkit's packages (``nvidia-container-*``,
``libnvidia-container*``) carry other versions and are never part of it, and neither are Ubuntu's
per-kernel module packages (``linux-modules-nvidia-*``): holding those would keep a new kernel from
getting its module.

Holds: ``apt-mark hold`` on apt systems, which unattended-upgrades also honours (it skips packages
whose selection state is hold: unattended-upgrade, ``is_pkg_change_allowed``), and a
``Unattended-Upgrade::Package-Blacklist`` drop-in naming the held packages as a second guard; on dnf
systems ``dnf versionlock`` (python3-dnf-plugin-versionlock), which dnf-automatic honours because it
loads dnf's plugins (dnf/automatic/main.py, which sets ``demands.resolving`` for the versionlock
plugin's sake).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

APT = "apt"
DNF = "dnf"
FAMILIES = (APT, DNF)

# names the NVIDIA driver packages use (Debian, Ubuntu, NVIDIA's CUDA repositories, RHEL)
STACK_NAME = re.compile(
    r"^(nvidia|libnvidia|libcuda|libnvcuvid|libnvoptix|libegl-nvidia|libgl1-nvidia|libgles-nvidia|"
    r"libglx-nvidia|xserver-xorg-video-nvidia|firmware-nvidia|cuda-drivers|kmod-nvidia|dkms-nvidia)")
# packages with NVIDIA's names that are not the driver's: the Container Toolkit
NOT_STACK_NAME = re.compile(r"container|^nvidia-docker")

UNATTENDED_UPGRADES_CONF = "/etc/apt/apt.conf.d/51kubegpu-nvidia-driver"
APT_PREFERENCES = "/etc/apt/preferences.d/kubegpu-nvidia-driver"
# STACK_NAME for apt_preferences(5), which takes POSIX extended regular expressions between slashes
APT_STACK_PATTERN = ("/^(nvidia|libnvidia|libcuda|libnvcuvid|libnvoptix|libegl-nvidia|libgl1-nvidia|libgles-nvidia|"
                     "libglx-nvidia|xserver-xorg-video-nvidia|firmware-nvidia|cuda-drivers)/")


def is_stack_name(name):
    """Whether ``name`` is a name the NVIDIA driver's packages use (the Container Toolkit's are not)."""
    return bool(STACK_NAME.match(name)) and not NOT_STACK_NAME.search(name)


def upstream_version(version):
    """The upstream part of a package version: no epoch, no Debian revision or RPM release.

    ``"1:535.183.01-1~deb12u1"`` -> ``"535.183.01"``, ``"3:580.95.05-1.el9"`` -> ``"580.95.05"``.
    """
    if not version:
        return None
    text = str(version)
    if ":" in text:
        text = text.split(":", 1)[1]
    return text.split("-", 1)[0] or None


def version_key(version):
    """A sort key for a driver version (``"570.133.20"`` -> ``(570, 133, 20)``); None for anything else."""
    if not version:
        return None
    parts = str(version).split(".")
    try:
        return tuple(int(part) for part in parts)
    except ValueError:
        return None


def branch_of(version):
    """The branch (major version) of a driver version, as a string; None when there is none."""
    key = version_key(upstream_version(version))
    return str(key[0]) if key else None


# ------------------------------------------------------------------ commands
def installed_argv(family):
    """The command that lists the installed packages with their versions."""
    if family == APT:
        return ["dpkg-query", "-W", "-f=${Package}\t${Version}\t${db:Status-Abbrev}\n"]
    return ["rpm", "-qa", "--qf", "%{NAME}\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\tii\n"]


def parse_installed(text):
    """``{name: version}`` of the installed packages from ``installed_argv``'s output."""
    found = {}
    for line in (text or "").splitlines():
        fields = line.split("\t")
        if len(fields) < 3:
            continue
        name, version, status = fields[0].strip(), fields[1].strip(), fields[2].strip()
        # dpkg's abbreviated status: "ii" installed, "hi" held and installed; "rc" is removed
        if len(status) >= 2 and status[1] == "i" and name and version:
            found[name.split(":", 1)[0]] = version
    return found


def held_argv(family):
    """The command that lists the held packages."""
    if family == APT:
        return ["apt-mark", "showhold"]
    return ["dnf", "-q", "versionlock", "list"]


# "nvidia-driver-3:580.95.05-1.el9.*" as dnf versionlock lists an entry
_VERSIONLOCK_ENTRY = re.compile(r"^(?:\d+:)?(?P<name>.+?)-(?:(?P<epoch>\d+):)?(?P<version>[^-]+)-(?P<release>[^-]+)$")


def parse_held(family, text):
    """Names of the held packages from ``held_argv``'s output."""
    names = []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if family == APT:
            names.append(line.split(":", 1)[0])
            continue
        if line.startswith("!") or " " in line:
            # an exclusion entry, or a message ("Last metadata expiration check ...")
            continue
        match = _VERSIONLOCK_ENTRY.match(line[:-2] if line.endswith(".*") else line)
        if match:
            names.append(match.group("name"))
    return sorted(set(names))


def hold_argv(family, names, hold=True):
    """The command that holds (``hold=True``) or releases the named packages."""
    if family == APT:
        return ["apt-mark", "hold" if hold else "unhold"] + list(names)
    return ["dnf", "-q", "-y", "versionlock", "add" if hold else "delete"] + list(names)


def available_argv(family, names):
    """The command that lists the versions the repositories offer of the named packages."""
    if family == APT:
        return ["apt-cache", "madison"] + list(names)
    return ["dnf", "-q", "repoquery", "--qf", "%{name}\t%{epoch}:%{version}-%{release}"] + list(names)


def parse_available(family, text):
    """``{name: [version, ...]}`` from ``available_argv``'s output."""
    found = {}
    for line in (text or "").splitlines():
        if family == APT:
            fields = [field.strip() for field in line.split("|")]
        else:
            fields = [field.strip() for field in line.split("\t")]
        if len(fields) < 2 or not fields[0] or not fields[1]:
            continue
        versions = found.setdefault(fields[0], [])
        if fields[1] not in versions:
            versions.append(fields[1])
    return found


# ------------------------------------------------------------------ decisions
def driver_stack(installed, version, names=()):
    """The installed packages that make up the driver at ``version`` (upstream), sorted.

    ``names``: packages that belong to it whatever their version (the packages the role installed).
    """
    stack = set(name for name in names if name in installed)
    if version:
        for name, package_version in installed.items():
            if is_stack_name(name) and upstream_version(package_version) == version:
                stack.add(name)
    return sorted(stack)


def stale_holds(installed, held, stack, version):
    """Held packages of the stack left from a driver of another branch (an older Fabric Manager, ...), sorted.

    A held package of the same branch at another version (Debian's nvidia-persistenced has versions of its own)
    is not one of them.
    """
    branch = branch_of(version)
    return sorted(name for name in held if name in installed and name not in stack and is_stack_name(name)
                  and branch_of(installed[name]) not in (None, branch))


def held_at_other_version(installed, held, names=(), version=None, branch=None):
    """Held packages of the driver whose version is not the wanted one: ``[(name, version)]``.

    The driver's packages are those of ``names`` (the packages the role installs) and every package of
    the stack at the same upstream version as the first of them installed (its libraries, ...); a
    package with a version of its own (Debian's nvidia-persistenced) is not one of them.
    ``version``: the exact driver version wanted, else ``branch``: any version of that branch.
    """
    names = [name for name in names if name in installed]
    current = upstream_version(installed[names[0]]) if names else None
    driver = set(names) | set(driver_stack(installed, current))
    found = []
    for name in sorted(set(held) & driver):
        upstream = upstream_version(installed[name])
        if version and upstream != version:
            found.append((name, installed[name]))
        elif not version and branch and branch_of(upstream) != str(branch):
            found.append((name, installed[name]))
    return found


def common_version(available, names, branch=None):
    """The newest upstream driver version that every package of ``names`` is offered at (in ``branch``).

    None when there is none: one of them is not offered at all, or not at any version another has.
    """
    common = None
    for name in names:
        versions = set(upstream_version(v) for v in available.get(name) or [])
        versions = set(v for v in versions if version_key(v) and (not branch or branch_of(v) == str(branch)))
        common = versions if common is None else common & versions
    if not common:
        return None
    return max(common, key=version_key)


def apt_preferences(version):
    """The apt_preferences(5) file that makes apt take every package of the driver stack at ``version``.

    Without it, ``apt-get install nvidia-driver=V`` fails once the archive has a newer driver: apt picks
    the newest libcuda1, libnvidia-ml1, ... and cannot satisfy the driver's ``(= V)`` dependencies. A
    package with no version ``V*`` (the Container Toolkit, Debian's nvidia-persistenced) is not affected.
    """
    return ("# Managed by kubegpu.nvidia.nvidia_driver: the NVIDIA driver's packages at %s, one version.\n"
            "Package: %s\n"
            "Pin: version %s*\n"
            "Pin-Priority: 1001\n" % (version, APT_STACK_PATTERN, version))


def unattended_upgrades_conf(names):
    """The apt.conf drop-in that keeps the held packages out of unattended-upgrades (regular expressions)."""
    lines = ["// Managed by kubegpu.nvidia: the NVIDIA driver changes only through kubegpu.nvidia.upgrade_driver.",
             "Unattended-Upgrade::Package-Blacklist {"]
    # unattended-upgrades matches each entry with re.match; a "." in a name matching any character is harmless
    lines += ['    "^%s$";' % name for name in sorted(names)]
    lines.append("};")
    return "\n".join(lines) + "\n"
