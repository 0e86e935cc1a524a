#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_driver_hold
short_description: Hold the NVIDIA driver's packages at their installed version, or release them
version_added: 1.0.0
description:
  - "V(held): holds every package of the installed NVIDIA driver: the packages of O(packages) and every installed
    package of the driver stack whose upstream version is O(version) (the user-space libraries, the kernel module
    sources, the tools, Fabric Manager). On apt systems with C(apt-mark hold), plus a drop-in
    C(/etc/apt/apt.conf.d/51kubegpu-nvidia-driver) that lists them in C(Unattended-Upgrade::Package-Blacklist);
    on dnf systems with C(dnf versionlock add) (which dnf-automatic honours as well)."
  - "V(released): releases every held package of the driver stack and removes the drop-in, so that
    C(kubegpu.nvidia.upgrade_driver) can install another version; the role holds the new one again."
  - The Container Toolkit's packages and Ubuntu's per-kernel C(linux-modules-nvidia-*) packages are never held.
author:
  - kubegpu.nvidia maintainers (@kubegpu)
attributes:
  check_mode:
    support: full
    description: Reports what would be held or released, and the diff, without changing anything.
  diff_mode:
    support: full
    description: Returns the held packages and the drop-in before and after.
  idempotent:
    support: full
    description: A second run with the same options reports no change.
options:
  state:
    description: Whether the driver's packages are held or released.
    type: str
    choices: [held, released]
    default: held
  packages:
    description:
      - Packages that belong to the driver whatever their version (the packages the role installed). Each must be
        installed when O(state=held).
    type: list
    elements: str
    default: []
  version:
    description:
      - The driver version (upstream, for example V(535.183.01)); installed driver-stack packages at this version are
        held as well. Empty takes the version of the first package of O(packages).
    type: str
    default: ""
  unattended_upgrades:
    description: On apt systems, also list the held packages in unattended-upgrades' package blacklist (a drop-in).
    type: bool
    default: true
requirements:
  - On dnf systems, the versionlock plugin (C(python3-dnf-plugin-versionlock)).
"""

EXAMPLES = r"""
- name: Hold the driver at its installed version
  kubegpu.nvidia.nvidia_driver_hold:
    packages: [nvidia-driver-570-server, nvidia-fabricmanager-570]

- name: Release the hold before an upgrade
  kubegpu.nvidia.nvidia_driver_hold:
    state: released
"""

RETURN = r"""
held:
  description: The held packages of the driver stack after the run.
  type: list
  elements: str
  returned: always
  sample: [libcuda1, libnvidia-ml1, nvidia-driver, nvidia-kernel-dkms]
version:
  description: The driver version whose packages are held (V(state=held)).
  type: str
  returned: always
  sample: 535.183.01
added:
  description: Packages this run held.
  type: list
  elements: str
  returned: always
removed:
  description: Packages this run released.
  type: list
  elements: str
  returned: always
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubegpu.nvidia.plugins.module_utils import driver_packages as pkgs
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError, KubegpuError, run_module


def _cmd(module, argv, what):
    rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
    if rc != 0:
        lines = (err or out or "").strip().splitlines()
        raise KubegpuError("%s failed (%s): %s" % (what, " ".join(argv[:3]), lines[-1].strip() if lines else "rc %d" % rc),
                           rc=rc)
    return out


def _family(module):
    if module.get_bin_path("apt-mark") and module.get_bin_path("dpkg-query"):
        return pkgs.APT
    if module.get_bin_path("dnf") and module.get_bin_path("rpm"):
        return pkgs.DNF
    raise KubegpuError("neither apt nor dnf found: the driver's packages cannot be held on this node", kind="runtime")


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def _write(module, path, content):
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".kubegpu-")
    with os.fdopen(fd, "w") as handle:
        handle.write(content)
    os.chmod(tmp, 0o644)
    module.atomic_move(tmp, path)


def run(module):
    params = module.params
    family = _family(module)
    installed = pkgs.parse_installed(_cmd(module, pkgs.installed_argv(family), "listing the installed packages"))
    rc, out, err = module.run_command(pkgs.held_argv(family), environ_update={"LC_ALL": "C"})
    if rc != 0:
        if family == pkgs.DNF:
            raise KubegpuError("dnf versionlock is not available: install python3-dnf-plugin-versionlock",
                               kind="dependency")
        raise KubegpuError("listing the held packages failed: %s" % (err or out).strip())
    held_before = sorted(name for name in pkgs.parse_held(family, out) if name in installed)
    stack_held = [name for name in held_before if pkgs.is_stack_name(name) or name in params["packages"]]

    version = params["version"] or None
    if params["state"] == "held":
        missing = [name for name in params["packages"] if name not in installed]
        if missing:
            raise InputError("cannot hold %s: not installed" % ", ".join(missing))
        if not version and params["packages"]:
            version = pkgs.upstream_version(installed[params["packages"][0]])
        wanted = pkgs.driver_stack(installed, version, params["packages"])
        if not wanted:
            module.warn("no package of the NVIDIA driver %sis installed, so there is nothing to hold (a driver "
                        "installed otherwise, for example with NVIDIA's .run installer, cannot be held)"
                        % ("%s " % version if version else ""))
            return dict(changed=False, held=[], version=version, added=[], removed=[])
        add = [name for name in wanted if name not in held_before]
        # holds left from a driver of another branch (an older Fabric Manager, ...) are released
        remove = pkgs.stale_holds(installed, stack_held, wanted, version)
        held_after = sorted((set(held_before) | set(wanted)) - set(remove))
        conf = pkgs.unattended_upgrades_conf(wanted) if family == pkgs.APT and params["unattended_upgrades"] else None
    else:
        add = []
        remove = stack_held
        held_after = sorted(set(held_before) - set(remove))
        conf = None

    conf_path = pkgs.UNATTENDED_UPGRADES_CONF
    conf_before = _read(conf_path) if family == pkgs.APT else None
    conf_changes = family == pkgs.APT and conf_before != conf
    changed = bool(add or remove or conf_changes)

    result = dict(changed=changed, held=[n for n in held_after if pkgs.is_stack_name(n) or n in params["packages"]],
                  version=version, added=add, removed=remove)
    if module._diff:
        result["diff"] = [{"before_header": "held packages", "after_header": "held packages",
                           "before": "\n".join(held_before) + "\n", "after": "\n".join(held_after) + "\n"}]
        if conf_changes:
            result["diff"].append({"before_header": conf_path, "after_header": conf_path,
                                   "before": conf_before or "", "after": conf or ""})
    if module.check_mode or not changed:
        return result
    if add:
        _cmd(module, pkgs.hold_argv(family, add, hold=True), "holding %s" % ", ".join(add))
    if remove:
        _cmd(module, pkgs.hold_argv(family, remove, hold=False), "releasing %s" % ", ".join(remove))
    if conf_changes:
        if conf is None:
            os.unlink(conf_path)
        elif os.path.isdir(os.path.dirname(conf_path)):
            _write(module, conf_path, conf)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", default="held", choices=["held", "released"]),
            packages=dict(type="list", elements="str", default=[]),
            version=dict(type="str", default=""),
            unattended_upgrades=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    run_module(module, run)


if __name__ == "__main__":
    main()
