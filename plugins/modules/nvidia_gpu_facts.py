#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_gpu_facts
short_description: Gather facts about the NVIDIA GPUs of a node
version_added: 1.0.0
description:
  - Finds the NVIDIA GPUs of the target machine and returns them as C(ansible_facts.nvidia_gpu),
    together with the node labels GPU Feature Discovery would set for them.
  - Sources are tried in order, the first usable one wins. V(nvml) reads NVML through the Python
    bindings C(pynvml) in the module process (one NVML init and shutdown, no subprocess).
    V(nvidia-smi) runs C(nvidia-smi --query-gpu) when NVML cannot be used.
    V(pci) scans C(/sys/bus/pci/devices) for NVIDIA display and 3D controllers (GPUs installed,
    no driver yet). V(none) means no NVIDIA GPU was found.
  - A machine without a GPU is not an error; it gets RV(ansible_facts.nvidia_gpu.present=false) and
    RV(ansible_facts.nvidia_gpu.count=0). Use O(require=true) to fail there instead.
  - Each fallback is reported as a warning that names its cause (Python bindings not installed,
    NVML driver not loaded, an unreadable NVML configuration, a command or driver that did not answer in
    time, ...).
  - An optional NVML call the GPU or the library does not support (compute capability, MIG mode,
    CUDA driver version, MIG device attributes) leaves only that field V(null).
  - Also reports the PCI class of each GPU (for GPU Feature Discovery's C(nvidia.com/gpu.mode)) and the
    machine's UEFI Secure Boot state (RV(ansible_facts.nvidia_gpu.secure_boot)).
author:
  - kubegpu.nvidia maintainers (@kubegpu)
extends_documentation_fragment:
  - kubegpu.nvidia.attributes.read_only
  - kubegpu.nvidia.nvidia_gpu_facts
attributes:
  action:
    support: full
    description:
      - An action plugin of the same name runs this module, or M(kubegpu.nvidia.nvidia_gpu_host_facts) when
        O(gather_subset) asks for host facts.
  facts:
    support: full
    description: Sets C(ansible_facts.nvidia_gpu), and the host facts of O(gather_subset).
seealso:
  - module: kubegpu.nvidia.nvidia_gpu_host_facts
  - name: GPU Feature Discovery
    description: The labels this module computes.
    link: https://github.com/NVIDIA/k8s-device-plugin/tree/main/docs/gpu-feature-discovery
"""

EXAMPLES = r"""
- name: Gather GPU facts
  kubegpu.nvidia.nvidia_gpu_facts:

- name: Show the GPU inventory
  ansible.builtin.debug:
    msg: "{{ ansible_facts.nvidia_gpu.count }} x {{ ansible_facts.nvidia_gpu.devices | map(attribute='name') | unique | join(', ') }}"
  when: ansible_facts.nvidia_gpu.present

- name: Fail on nodes without a usable GPU and driver
  kubegpu.nvidia.nvidia_gpu_facts:
    require: true

- name: Compute the labels for time-slicing with 4 replicas per GPU
  kubegpu.nvidia.nvidia_gpu_facts:
    sharing_strategy: time-slicing
    replicas: 4

- name: Compute the labels for the single MIG strategy
  kubegpu.nvidia.nvidia_gpu_facts:
    mig_strategy: single

- name: Give a slow driver more time, and nvidia-smi less
  kubegpu.nvidia.nvidia_gpu_facts:
    nvml_timeout: 120
    command_timeout: 5

- name: Gather the GPU facts and some host facts in one module run per host
  kubegpu.nvidia.nvidia_gpu_facts:
    gather_subset: ['!all', '!min', distribution, platform]

- name: Stop where Secure Boot would refuse an unsigned kernel module
  ansible.builtin.assert:
    that: not (ansible_facts.nvidia_gpu.secure_boot.enabled and not ansible_facts.nvidia_gpu.secure_boot.setup_mode)
    fail_msg: Secure Boot is enforcing; use signed driver modules
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    nvidia_gpu:
      description: The NVIDIA GPUs of the machine.
      returned: always
      type: dict
      contains:
        present:
          description: Whether at least one NVIDIA GPU was found.
          type: bool
          returned: always
          sample: true
        count:
          description: Number of GPUs.
          type: int
          returned: always
          sample: 8
        source:
          description: Where the facts come from.
          type: str
          returned: always
          choices: [nvml, nvidia-smi, pci, none]
          sample: nvml
        driver_version:
          description: NVIDIA driver version; V(null) without a usable driver.
          type: str
          returned: always
          sample: 535.183.01
        cuda_driver_version:
          description: Highest CUDA version the driver supports, V(major.minor); V(null) when unknown.
          type: str
          returned: always
          sample: "12.2"
        machine:
          description: DMI product name of the machine (C(/sys/class/dmi/id/product_name)), V(null) when unreadable.
          type: str
          returned: always
          sample: DGX H100
        devices:
          description: One entry per GPU, in index order.
          type: list
          elements: dict
          returned: always
          contains:
            index:
              description: GPU index.
              type: int
              sample: 0
            name:
              description: Model name as NVML reports it; from a table of known device ids for the V(pci) source, else V(null).
              type: str
              sample: NVIDIA H100 80GB HBM3
            product:
              description: Model name sanitised as GPU Feature Discovery does for C(nvidia.com/gpu.product).
              type: str
              sample: NVIDIA-H100-80GB-HBM3
            uuid:
              description: GPU UUID; V(null) for the V(pci) source.
              type: str
              sample: GPU-4a1b2c3d-0000-4000-8000-000000000000
            memory_mib:
              description: Total memory in MiB; V(null) for the V(pci) source.
              type: int
              sample: 81559
            pci_bus_id:
              description: PCI bus id in NVML's form.
              type: str
              sample: 00000000:18:00.0
            pci_device_id:
              description: Combined PCI device and vendor id as NVML reports it.
              type: str
              sample: "0x233010DE"
            pci_class:
              description:
                - PCI class of the GPU from C(/sys/bus/pci/devices/<bus id>/class), six hexadecimal digits
                  (V(0x030200) 3D controller, V(0x030000) VGA controller); V(null) when it cannot be read.
                - GPU Feature Discovery's C(nvidia.com/gpu.mode) comes from it (compute or graphics).
              type: str
              sample: "0x030200"
            compute_capability:
              description: CUDA compute capability V(major.minor); V(null) when unsupported or unknown.
              type: str
              sample: "9.0"
            family:
              description: Architecture family from the compute capability (V(undefined) for an unknown one).
              type: str
              sample: hopper
            mig:
              description: MIG mode, V(1) enabled and V(0) disabled; both V(null) where MIG is not supported.
              type: dict
              contains:
                current:
                  description: Current MIG mode.
                  type: int
                  sample: 0
                pending:
                  description: MIG mode after the next GPU reset.
                  type: int
                  sample: 0
                devices:
                  description:
                    - The MIG devices of a MIG-enabled GPU, in NVML's slot order (empty slots left out);
                      V([]) when MIG is disabled or no MIG device is created yet.
                    - V(null) where they are not known, MIG unsupported, or the facts come from C(nvidia-smi)
                      or the PCI bus, or the NVML bindings lack the MIG calls.
                  type: list
                  elements: dict
                  contains:
                    slot:
                      description: The MIG device's slot on its GPU (NVML's MIG device index).
                      type: int
                      sample: 0
                    name:
                      description: NVML's name of the MIG device.
                      type: str
                      sample: NVIDIA A100-SXM4-40GB MIG 3g.20gb
                    profile:
                      description: The MIG profile, from the name.
                      type: str
                      sample: 3g.20gb
                    uuid:
                      description: The MIG device's UUID.
                      type: str
                      sample: MIG-3b041641-1788-44f2-a60d-f25453fe2e850001
                    memory_mib:
                      description:
                        - The MIG device's memory in MiB, from NVML's device attributes (C(memorySizeMB), as
                          GPU Feature Discovery reads it), else from its memory information.
                      type: int
                      sample: 20480
                    multiprocessors:
                      description: Streaming multiprocessors of the MIG device; V(null) when NVML does not tell.
                      type: int
                      sample: 42
                    slices:
                      description: GPU instance and compute instance slices (each V(null) when NVML does not tell).
                      type: dict
                      sample: {gi: 3, ci: 3}
                    engines:
                      description:
                        - Shared engines of the MIG device (each V(null) when NVML does not tell). GPU Feature
                          Discovery labels them as C(nvidia.com/mig-<profile>.engines.*).
                      type: dict
                      sample: {copy: 3, decoder: 2, encoder: 0, jpeg: 0, ofa: 0}
        secure_boot:
          description:
            - The machine's UEFI Secure Boot state. With Secure Boot enabled and the platform not in setup mode,
              the kernel loads only signed modules.
            - From the EFI variables C(SecureBoot) and C(SetupMode) (C(/sys/firmware/efi/efivars)), else from
              C(mokutil --sb-state); every value V(null) when neither can tell (legacy BIOS boot, or a
              container that does not see the firmware).
          type: dict
          returned: always
          contains:
            enabled:
              description: Whether Secure Boot is enabled; V(false) on UEFI firmware without Secure Boot.
              type: bool
              sample: true
            setup_mode:
              description: Whether the platform is in setup mode (no platform key enrolled, nothing enforced).
              type: bool
              sample: false
            source:
              description: Where the state comes from.
              type: str
              choices: [efivars, mokutil]
              sample: efivars
        labels:
          description:
            - Node labels GPU Feature Discovery would set for these GPUs (empty when no GPU is present),
              plus C(nvidia.com/gpu.present=true) and the older C(nvidia.com/cuda.driver.*) and
              C(nvidia.com/cuda.runtime.*) names.
          type: dict
          returned: always
          sample:
            nvidia.com/gpu.present: "true"
            nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
            nvidia.com/gpu.count: "8"
            nvidia.com/gpu.memory: "81559"
            nvidia.com/gpu.family: hopper
            nvidia.com/gpu.compute.major: "9"
            nvidia.com/gpu.compute.minor: "0"
            nvidia.com/gpu.replicas: "1"
            nvidia.com/gpu.sharing-strategy: none
            nvidia.com/gpu.machine: DGX-H100
            nvidia.com/mig.capable: "true"
            nvidia.com/cuda.driver-version.full: 535.183.01
            nvidia.com/cuda.driver-version.major: "535"
            nvidia.com/cuda.driver-version.minor: "183"
            nvidia.com/cuda.driver-version.revision: "01"
            nvidia.com/cuda.driver.major: "535"
            nvidia.com/cuda.driver.minor: "183"
            nvidia.com/cuda.driver.rev: "01"
            nvidia.com/cuda.runtime-version.full: "12.2"
            nvidia.com/cuda.runtime-version.major: "12"
            nvidia.com/cuda.runtime-version.minor: "2"
            nvidia.com/cuda.runtime.major: "12"
            nvidia.com/cuda.runtime.minor: "2"
"""

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import run_module
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_module import FactsModule, gather


def main():
    module = FactsModule()
    run_module(module, gather)


if __name__ == "__main__":
    main()
