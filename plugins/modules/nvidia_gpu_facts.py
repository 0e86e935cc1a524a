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
    NVML driver not loaded, an unreadable NVML configuration, ...).
  - An optional NVML call the GPU or the library does not support (compute capability, MIG mode,
    CUDA driver version) leaves only that field V(null).
author:
  - kubegpu.nvidia maintainers (@kubegpu)
options:
  require:
    description:
      - Fail when no usable GPU and driver are found, that is when the facts come from the
        V(pci) source (GPUs without a usable driver) or from V(none).
    type: bool
    default: false
  mig_strategy:
    description:
      - MIG strategy of the device plugin, used for RV(ansible_facts.nvidia_gpu.labels)
        exactly as GPU Feature Discovery applies it.
      - V(none) labels full GPUs only, V(single) and V(mixed) add C(nvidia.com/mig.strategy).
      - V(single) labels the MIG devices as C(nvidia.com/gpu) when every GPU is MIG-enabled and holds
        MIG devices of one profile, else GPU Feature Discovery's C(<model>-MIG-INVALID) labels (also when
        the MIG devices are not known, with facts from C(nvidia-smi) or the PCI bus).
      - V(mixed) adds C(nvidia.com/mig-<profile>.product|count|replicas|memory|slices.gi|slices.ci) per MIG
        profile. GPU Feature Discovery also sets C(multiprocessors) and C(engines.*) from NVML's device
        attributes, which these facts do not read.
    type: str
    choices: [none, single, mixed]
    default: none
  sharing_strategy:
    description:
      - GPU sharing configured in the device plugin, used for the labels C(nvidia.com/gpu.sharing-strategy)
        and C(nvidia.com/gpu.product) (suffix C(-SHARED)) when O(replicas) is above 1.
    type: str
    choices: [none, time-slicing, mps]
    default: none
  replicas:
    description:
      - Replicas per GPU configured for sharing, used for the label C(nvidia.com/gpu.replicas).
      - Must be 1 when O(sharing_strategy=none).
    type: int
    default: 1
  gather_subset:
    description:
      - Also gather these subsets of Ansible's own host facts in the same run, with the collectors, subset
        rules and names of M(ansible.builtin.setup) (for example C(ansible_facts.distribution)).
      - A play that needs a few host facts as well as the GPU facts then makes one module run per host instead
        of two; the C(kubegpu.nvidia.site) playbook gathers its facts this way.
      - As for M(ansible.builtin.setup), the minimal subset is added unless the list holds V(!min);
        V([]) (the default) gathers no host facts.
    type: list
    elements: str
    default: []
  gather_timeout:
    description: Seconds each host fact collector may take (as for M(ansible.builtin.setup)).
    type: int
    default: 10
attributes:
  check_mode:
    support: full
    description: The module only reads; it runs the same way in check mode and never reports a change.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no difference to show.
  facts:
    support: full
    description: Sets C(ansible_facts.nvidia_gpu), and the host facts of O(gather_subset).
  idempotent:
    support: full
    description: Repeated runs on an unchanged machine return the same facts.
requirements:
  - The Python library C(pynvml) (PyPI C(nvidia-ml-py), Debian C(python3-pynvml)) on the target
    for the V(nvml) source. Without it the module falls back to C(nvidia-smi) and warns.
notes:
  - Label values follow GPU Feature Discovery's sanitising; C(nvidia.com/gpu.machine) is also
    sanitised so that every value is a valid Kubernetes label value.
  - With several GPU models on one node, the model of the lowest-index GPU names the
    C(nvidia.com/gpu.*) labels and the module warns (GPU Feature Discovery picks one model too).
  - C(nvidia-smi) does not report the CUDA driver version, so that source leaves
    RV(ansible_facts.nvidia_gpu.cuda_driver_version) V(null).
seealso:
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
                    index:
                      description: The MIG device's slot on its GPU.
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
                      description: The MIG device's memory in MiB.
                      type: int
                      sample: 20480
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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError, KubegpuError, run_module
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gfd_labels import (
    MIG_STRATEGIES,
    SHARING_STRATEGIES,
    validate_label_options,
)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery import (
    discover_gpus,
    unusable_reason,
)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.host_facts import gather_host_facts


def gather(module):
    """The module's work: the facts, or a ``KubegpuError``."""
    params = module.params
    error = validate_label_options(params["mig_strategy"], params["sharing_strategy"], params["replicas"])
    if error:
        raise InputError(error)

    ansible_facts = {}
    if params["gather_subset"]:
        ansible_facts = gather_host_facts(module, params["gather_subset"], params["gather_timeout"])

    def run_command(argv):
        return module.run_command(argv, environ_update={"LC_ALL": "C"})

    facts, warnings = discover_gpus(
        run_command=run_command,
        which=module.get_bin_path,
        mig_strategy=params["mig_strategy"],
        sharing_strategy=params["sharing_strategy"],
        replicas=params["replicas"],
    )
    for warning in warnings:
        module.warn(warning)
    if params["require"]:
        reason = unusable_reason(facts, warnings)
        if reason:
            raise KubegpuError(reason, kind="runtime", ansible_facts={"nvidia_gpu": facts})
    ansible_facts["nvidia_gpu"] = facts
    return dict(changed=False, ansible_facts=ansible_facts)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            require=dict(type="bool", default=False),
            mig_strategy=dict(type="str", default="none", choices=list(MIG_STRATEGIES)),
            sharing_strategy=dict(type="str", default="none", choices=list(SHARING_STRATEGIES)),
            replicas=dict(type="int", default=1),
            gather_subset=dict(type="list", elements="str", default=[]),
            gather_timeout=dict(type="int", default=10),
        ),
        supports_check_mode=True,
    )
    run_module(module, gather)


if __name__ == "__main__":
    main()
