#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_container_toolkit_info
short_description: Read a node's NVIDIA Container Toolkit state and plan what the toolkit role does on it
version_added: 1.0.0
description:
  - Reads, without changing anything, what the role M(kubegpu.nvidia.nvidia_container_toolkit) needs to know about a
    node, in one module run, and returns it as data together with the decisions the role's tasks carry out.
  - "Packages: the installed versions of the toolkit packages and of C(python3-tomlkit) (C(dpkg-query), or C(rpm) on
    the RHEL family), and which of them are missing or at another version than O(version)."
  - "Repository: whether the repository definition and its signing key are as M(kubegpu.nvidia.nvidia_container_toolkit_repo)
    writes them (content, owner, mode, and the key's fingerprints against O(repo_key_fingerprints)), and on Debian
    whether apt's cached index already has the wanted packages (check mode installs from it only then)."
  - "Container runtimes: the services of containerd, Docker, CRI-O, k3s and RKE2 (one C(systemctl show)), the runtimes to
    configure (O(runtimes), else every runtime whose service runs or is enabled), the unit to restart for each, and the
    arguments of M(kubegpu.nvidia.container_runtime_nvidia) for each."
  - "Record: with O(record=true), the runtimes whose configuration is as the role recorded it in O(record_path) after
    its last run with the same arguments and the same collection version (each file's SHA-256 still matching): the
    role does not run the configuration module for them."
  - "k3s and RKE2: whether the runtime finds the NVIDIA runtime itself (v1.29 and newer, the standard runtime name and
    binary) or needs its C(config.toml.tmpl) edited."
  - "CDI: whether the C(nvidia-cdi-refresh) units of the toolkit (1.18 and newer) keep the CDI specification current, or
    C(nvidia-ctk cdi generate) must write it, and whether anything has to be done now."
author:
  - kubegpu.nvidia maintainers (@kubegpu)
extends_documentation_fragment:
  - kubegpu.nvidia.attributes.read_only
options:
  family:
    description: The OS family of the node (C(ansible_facts.os_family)); the role serves C(Debian) and C(RedHat).
    type: str
    required: true
  packages:
    description: The toolkit packages.
    type: list
    elements: str
    default: [nvidia-container-toolkit, nvidia-container-toolkit-base, libnvidia-container-tools, libnvidia-container1]
  version:
    description: The version all of O(packages) must have (C(1.20.0-1)); empty accepts any installed version.
    type: str
    default: ""
  install_tomlkit:
    description: Whether C(python3-tomlkit), which the runtime configuration modules need, is to be installed.
    type: bool
    default: true
  package_files:
    description: Package files on the node the role installs instead of using a repository.
    type: list
    elements: path
    default: []
  repo_manage:
    description: Whether the role manages the repository definition and its key.
    type: bool
    default: true
  repo_deb_url:
    description: The apt source URL (Debian family).
    type: str
    default: ""
  repo_rpm_url:
    description: The C(baseurl) (RHEL family).
    type: str
    default: ""
  repo_key_fingerprints:
    description: Fingerprints of the keys the repository may be signed with; an installed key with another one is fetched again.
    type: list
    elements: str
    default: []
  repo_key_checksum:
    description: C(sha256:<hex>) the key file must have; empty checks none.
    type: str
    default: ""
  repo_validate_certs:
    description: Written into the RHEL repository definition (C(sslverify)).
    type: bool
    default: true
  runtimes:
    description: Container runtimes to configure (C(containerd), C(docker), C(crio), C(k3s), C(rke2)); empty detects them.
    type: list
    elements: str
    default: []
  runtime_name:
    description: Name of the NVIDIA runtime.
    type: str
    default: nvidia
  runtime_path:
    description: Binary of the NVIDIA runtime.
    type: str
    default: /usr/bin/nvidia-container-runtime
  set_as_default:
    description: Whether the NVIDIA runtime becomes the default runtime.
    type: bool
    default: false
  cdi:
    description: Enable or disable CDI in the runtimes; not set leaves it.
    type: bool
  backup:
    description: Whether the configuration module keeps backups.
    type: bool
    default: true
  validate:
    description: Whether containerd's new configuration is checked with C(containerd config dump) before it is used.
    type: bool
    default: true
  containerd_mode:
    description: C(in_place) or C(drop_in).
    type: str
    choices: [in_place, drop_in]
    default: in_place
  config_paths:
    description: Configuration file per runtime where it is not the default.
    type: dict
    default: {}
  nvidia_runtimes:
    description:
      - Several NVIDIA runtimes managed together (C(name), C(mode) V(auto)/V(cdi)/V(legacy), C(path), C(default)), as
        M(kubegpu.nvidia.container_runtime_nvidia)'s O(kubegpu.nvidia.container_runtime_nvidia#module:runtimes) takes
        them; replaces O(runtime_name), O(runtime_path) and O(set_as_default). Empty manages the one runtime of those.
    type: list
    elements: dict
    default: []
  config_source:
    description: V(command) has containerd and CRI-O take the new runtimes' options from their effective configuration.
    type: str
    choices: [file, command]
    default: file
  record:
    description: Whether the role records the runtime configuration and skips the module while the record holds.
    type: bool
    default: true
  record_path:
    description: The record file.
    type: path
    default: /var/lib/kubegpu-nvidia-container-runtimes.record
  k3s_runtime_detection:
    description:
      - V(auto) leaves k3s and RKE2 v1.29 and newer to find the NVIDIA runtime themselves, older ones get their template edited.
      - V(always) and V(never) force either way.
    type: str
    choices: [auto, always, never]
    default: auto
  cdi_generate:
    description: Whether the role keeps a CDI specification current.
    type: bool
    default: false
  cdi_spec_path:
    description: Where C(nvidia-ctk cdi generate) writes the specification for a toolkit without C(nvidia-cdi-refresh).
    type: path
    default: /etc/cdi/nvidia.yaml
  driver_version:
    description: The loaded driver version (C(ansible_facts.nvidia_gpu.driver_version)); a CDI specification that does not name it is stale.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Read the node's toolkit state
  kubegpu.nvidia.nvidia_container_toolkit_info:
    family: "{{ ansible_facts.os_family }}"
    version: 1.20.0-1
    repo_deb_url: https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)
    repo_key_fingerprints: [C95B321B61E88C1809C4F759DDCAE044F796ECB0]
  register: toolkit

- name: Show which runtimes would be configured
  ansible.builtin.debug:
    msg: "{{ toolkit.runtimes }} ({{ toolkit.configure | map(attribute='name') | list }} to configure)"
"""

RETURN = r"""
manager:
  description: The package manager of the node's family.
  returned: always
  type: str
  sample: apt
packages:
  description: Installed version of each toolkit package (and C(python3-tomlkit)); null when not installed.
  returned: always
  type: dict
  sample: {"nvidia-container-toolkit": "1.20.0-1", "libnvidia-container1": null}
packages_wanted:
  description: Toolkit packages missing or at another version than O(version).
  returned: always
  type: list
  elements: str
package_specs:
  description: What to ask the package manager for (C(name=version) for apt, C(name-version) for dnf); all of O(packages).
  returned: always
  type: list
  elements: str
install_needed:
  description: Whether the role's install step has anything to do (packages, package files, tomlkit, the repository).
  returned: always
  type: bool
repo:
  description:
    - "The repository: C(managed), C(url), C(source_path), C(source_in_place), C(key_path), C(key_in_place),
      C(key_fingerprints) (of the installed key), C(key_problem) (why it is not trusted), C(needed) (the repository
      module has something to do), C(cached) (Debian: apt's index already has the wanted packages), C(index_ready)
      (the package manager can look the packages up without this run setting anything up: check mode installs
      only then)."
  returned: always
  type: dict
runtimes:
  description: The container runtimes the role configures, in the order it configures and restarts them.
  returned: always
  type: list
  elements: str
  sample: [containerd, docker]
nvidia_runtimes:
  description: The NVIDIA runtimes each container runtime gets, each with C(name) and C(path) (what the role verifies).
  returned: always
  type: list
  elements: dict
  sample: [{"name": "nvidia", "path": "/usr/bin/nvidia-container-runtime"}]
services:
  description: The systemd unit to restart for each runtime.
  returned: always
  type: dict
  sample: {"containerd": "containerd", "k3s": "k3s-agent"}
configure:
  description: The runtimes the configuration module has to run for, each with C(name) and its module C(args).
  returned: always
  type: list
  elements: dict
in_place:
  description: Runtimes whose recorded configuration still holds (the module is not run for them).
  returned: always
  type: list
  elements: str
record:
  description: C(enabled), C(path), C(keys) (per runtime) and C(rows) (as recorded) for the record written after the run.
  returned: always
  type: dict
k3s:
  description:
    - "Per k3s/RKE2 runtime configured: C(detection) (true when it finds the NVIDIA runtime itself), C(reason),
      C(version), C(generated) (the C(config.toml) it generates), C(drop_in_path) and C(drop_in_content) (the
      C(default-runtime) drop-in, null to remove it), C(drop_in_in_place), C(detected) (its generated C(config.toml)
      already has the runtime, as the default runtime when O(set_as_default=true))."
  returned: always
  type: dict
k3s_actions:
  description:
    - The k3s/RKE2 runtimes that find the NVIDIA runtime themselves and need the role now, each with C(name), C(path)
      and C(content) of the C(default-runtime) drop-in (null, to remove it) and C(write) (the drop-in differs); each is
      restarted (k3s finds runtimes when it starts).
  returned: always
  type: list
  elements: dict
cdi:
  description: C(mode) (C(refresh), C(generate) or C(off)), C(action) (C(none) when in place) and C(reason).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubegpu.nvidia.plugins.module_utils import toolkit_state
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import run_module


def gather(module):
    params = module.params
    state = toolkit_state.read(module, params["family"], packages=toolkit_state.read_names(params),
                               record_path=params["record_path"], cdi_spec_path=params["cdi_spec_path"])
    return dict(toolkit_state.plan(state, params), changed=False)


def main():
    module = AnsibleModule(argument_spec=toolkit_state.ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, gather)


if __name__ == "__main__":
    main()
