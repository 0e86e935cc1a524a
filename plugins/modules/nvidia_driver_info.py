#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_driver_info
short_description: Read the state of a node's NVIDIA driver packages, kernels, modules and Secure Boot
version_added: 1.0.0
description:
  - Reads, in one run, what the C(kubegpu.nvidia.nvidia_driver) role decides on before it changes anything and what
    the summary reports afterwards; changes nothing.
  - "Packages: the installed packages of the NVIDIA driver stack with their versions (C(dpkg-query) or C(rpm)),
    which of them are held (C(apt-mark showhold) or C(dnf versionlock list)) and, for O(available), the versions
    the repositories offer (C(apt-cache madison) or C(dnf repoquery))."
  - "Kernels: the running kernel, the kernel that boots next (C(grubby --default-kernel) where grubby exists, else
    the target of C(/boot/vmlinuz) or C(/vmlinuz), else the newest C(/boot/vmlinuz-*)), and for both whether the
    NVIDIA module is built for them (C(dkms status) and the module files under C(/lib/modules/<kernel>))."
  - "The loaded module's version and flavour (C(/proc/driver/nvidia/version)); Secure Boot from the EFI variables,
    and whether the MOK certificate O(mok_certificate) is enrolled (shim's C(MokListRT)) or waits for enrollment
    (C(MokNew))."
author:
  - kubegpu.nvidia maintainers (@kubegpu)
extends_documentation_fragment:
  - kubegpu.nvidia.attributes.read_only
options:
  packages:
    description:
      - Package names to report in RV(installed) even when their names are not ones the NVIDIA driver packages use.
    type: list
    elements: str
    default: []
  available:
    description:
      - Package names whose versions offered by the configured repositories are listed in RV(available).
      - Reads the package manager's cache as it is; update it first.
    type: list
    elements: str
    default: []
  mok_certificate:
    description: The Machine Owner Key certificate (PEM or DER) whose enrollment RV(mok) reports.
    type: path
    default: /var/lib/dkms/mok.pub
  read_files:
    description: Small files whose content RV(files) returns (V(null) for a file that does not exist).
    type: list
    elements: path
    default: []
  efivars_dir:
    description: The EFI variable file system. Tests point it at a fake directory.
    type: path
    default: /sys/firmware/efi/efivars
notes:
  - The kernel that boots next is the one GRUB's default entry starts on Debian and Ubuntu when the default is the
    newest kernel; a GRUB_DEFAULT that names another entry is not followed.
"""

EXAMPLES = r"""
- name: Read the driver state of the node
  kubegpu.nvidia.nvidia_driver_info:
    packages: [nvidia-driver-570-server]
  register: driver_state

- name: Show whether the module is built for the kernel that boots next
  ansible.builtin.debug:
    msg: "{{ driver_state.modules[driver_state.kernel.next].built }}"
"""

RETURN = r"""
package_manager:
  description: V(apt) or V(dnf); V(null) where neither is found.
  type: str
  returned: always
  sample: apt
installed:
  description: Installed packages of the driver stack (and O(packages)) with their versions.
  type: dict
  returned: always
  sample: {nvidia-driver: 535.183.01-1, libcuda1: 535.183.01-1}
held:
  description: Held packages among them.
  type: list
  elements: str
  returned: always
  sample: [libcuda1, nvidia-driver]
hold_tool:
  description: Whether holds can be listed and set (C(apt-mark), or dnf with the versionlock plugin).
  type: bool
  returned: always
available:
  description: Versions the repositories offer, per package of O(available).
  type: dict
  returned: always
  sample: {nvidia-driver: [535.216.01-1, 535.183.01-1]}
kernel:
  description: The running kernel, the kernel that boots next and how that was found, the installed kernels.
  type: dict
  returned: always
  sample: {running: 6.1.0-28-amd64, next: 6.1.0-31-amd64, next_source: the /vmlinuz symlink,
           installed: [6.1.0-28-amd64, 6.1.0-31-amd64]}
modules:
  description:
    - Per kernel (the running one and the next one), whether the NVIDIA module is built for it, the version DKMS
      installed, the module files and DKMS's entries.
  type: dict
  returned: always
  sample: {6.1.0-28-amd64: {built: true, version: 535.183.01, files: [], dkms: []}}
loaded:
  description: Version and flavour (V(open) or V(proprietary)) of the loaded module; V(null) without one.
  type: dict
  returned: always
  sample: {version: 535.183.01, flavour: proprietary}
secure_boot:
  description:
    - Secure Boot from the EFI variables in O(efivars_dir); V(null) values without them (BIOS boot, container,
      efivarfs not mounted), and with a warning when one cannot be read.
  type: dict
  returned: always
  sample: {enabled: true, setup_mode: false, source: efivars}
mok:
  description:
    - The MOK certificate O(mok_certificate) and whether it is C(readable), C(enrolled) (V(null) when it cannot be
      told) and whether an enrollment is C(pending).
  type: dict
  returned: always
  sample: {certificate: /var/lib/dkms/mok.pub, readable: true, enrolled: false, pending: false}
files:
  description: Content of each file of O(read_files), V(null) when it does not exist.
  type: dict
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubegpu.nvidia.plugins.module_utils import driver_packages as pkgs
from ansible_collections.kubegpu.nvidia.plugins.module_utils import driver_state
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import KubegpuError, run_module
from ansible_collections.kubegpu.nvidia.plugins.module_utils.secure_boot import efivars_state

MAX_FILE = 65536


def _run(module, argv):
    rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
    return rc, out, err


def last_line(rc, out, err):
    """The last line a failed command printed (its error, usually), or its return code."""
    lines = (err or out or "").strip().splitlines()
    return lines[-1].strip() if lines else "rc %d" % rc


def read_packages(module, family):
    """(installed, held, hold_tool) for the package manager ``family``."""
    rc, out, err = _run(module, pkgs.installed_argv(family))
    if rc != 0:
        raise KubegpuError("listing the installed packages failed (%s): %s" % (
            " ".join(pkgs.installed_argv(family)[:2]), last_line(rc, out, err)))
    wanted = set(module.params["packages"])
    installed = dict((name, version) for name, version in pkgs.parse_installed(out).items()
                     if name in wanted or pkgs.is_stack_name(name))
    rc, out, err = _run(module, pkgs.held_argv(family))
    hold_tool = rc == 0
    held = [name for name in pkgs.parse_held(family, out) if name in installed] if hold_tool else []
    return installed, held, hold_tool


def read_available(module, family, names):
    if not names:
        return {}
    rc, out, err = _run(module, pkgs.available_argv(family, names))
    if rc != 0 and not out:
        raise KubegpuError("listing the versions the repositories offer of %s failed: %s" % (
            ", ".join(names), last_line(rc, out, err)))
    return pkgs.parse_available(family, out)


def read_kernels(module):
    running = os.uname()[2]
    grubby = module.get_bin_path("grubby")
    default = None
    if grubby:
        rc, out, _err = _run(module, [grubby, "--default-kernel"])
        default = out.strip() if rc == 0 else None
    nxt, how = driver_state.next_kernel(running, grubby_default=default)
    dkms = None
    dkms_bin = module.get_bin_path("dkms")
    if dkms_bin:
        rc, out, _err = _run(module, [dkms_bin, "status"])
        dkms = driver_state.parse_dkms_status(out) if rc == 0 else {}
    modules = {}
    for kernel in sorted(set([running, nxt])):
        modules[kernel] = driver_state.kernel_module(kernel, dkms)
    return ({"running": running, "next": nxt, "next_source": how, "installed": driver_state.installed_kernels(),
             "dkms": dkms is not None}, modules)


def read_files(paths):
    found = {}
    for path in paths:
        try:
            with open(path, "rb") as handle:
                found[path] = handle.read(MAX_FILE).decode("utf-8", "replace")
        except (IOError, OSError):
            found[path] = None
    return found


def gather(module):
    params = module.params
    family = None
    if module.get_bin_path("dpkg-query"):
        family = pkgs.APT
    elif module.get_bin_path("rpm") and module.get_bin_path("dnf"):
        family = pkgs.DNF
    installed, held, hold_tool, available = {}, [], False, {}
    if family:
        installed, held, hold_tool = read_packages(module, family)
        available = read_available(module, family, params["available"])
    kernel, modules = read_kernels(module)
    efivars = params["efivars_dir"]
    secure_boot, warnings = efivars_state(efivars)
    for warning in warnings:
        module.warn(warning)
    return dict(
        changed=False,
        package_manager=family,
        installed=installed,
        held=held,
        hold_tool=hold_tool,
        available=available,
        kernel=kernel,
        modules=modules,
        loaded=driver_state.loaded_module(),
        secure_boot=secure_boot,
        mok=driver_state.mok_state(params["mok_certificate"], efivars),
        files=read_files(params["read_files"]),
    )


def main():
    module = AnsibleModule(
        argument_spec=dict(
            packages=dict(type="list", elements="str", default=[]),
            available=dict(type="list", elements="str", default=[]),
            mok_certificate=dict(type="path", default="/var/lib/dkms/mok.pub"),
            read_files=dict(type="list", elements="path", default=[]),
            efivars_dir=dict(type="path", default=driver_state.EFIVARS),
        ),
        supports_check_mode=True,
    )
    run_module(module, gather)


if __name__ == "__main__":
    main()
