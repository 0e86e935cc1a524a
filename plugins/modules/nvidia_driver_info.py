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
seealso:
  - module: kubegpu.nvidia.nvidia_gpu_facts
    description: Makes the same read in its own module run with C(driver) in its C(gather_subset).
notes:
  - M(kubegpu.nvidia.nvidia_gpu_facts) with C(driver) in its C(gather_subset) returns this module's result as
    C(ansible_facts.nvidia_gpu.driver_state) (options O(packages) and so on as its C(driver_options)).
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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubegpu.nvidia.plugins.module_utils import driver_node
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import run_module


def gather(module):
    return dict(driver_node.gather(module), changed=False)


def main():
    module = AnsibleModule(argument_spec=driver_node.ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, gather)


if __name__ == "__main__":
    main()
