#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_mig
short_description: Partition a node's NVIDIA GPUs into MIG devices as a mig-parted config declares
version_added: 1.1.0
description:
  - Reads each GPU's MIG mode (current and pending), GPU instances (profile, placement) and compute instances
    through NVML (one session), plans the change to the named mig-parted v1 config (O(config)) and
    carries it out in mig-parted's order; see C(docs/mig.md).
  - Every check comes before any change. The config must parse as mig-parted parses it; each profile must be
    one the GPU's own NVML profile table has; the counts must fit the GPU's placements; C(devices) indices
    must exist; a GPU that is not MIG-capable is skipped when a spec says C(devices) V(all) and refused when addressed by
    index. One line names the GPU, the profile and why; nothing is changed.
  - A GPU that must change and has processes (NVML running processes) refuses the whole node, naming the
    processes, before any change.
  - Compute instances are destroyed before their GPU instances; the mode is set; only the GPUs whose mode is
    still pending are reset (C(nvidia-smi -r -i <index>)); GPU instances are created at the planned placements
    with one full-size compute instance each; the GPUs are read back and compared with the plan.
  - A reset that nvidia-persistenced or a loaded nvidia_drm would block fails before any change, naming them.
    A reset the GPU refuses (passthrough) returns RV(reboot_required) with the reason and changes nothing
    more. A creation that fails half-way puts the GPU's instances back as they were and fails saying so.
  - A node already at the config's geometry costs one NVML session of reads and makes no NVML write.
author:
  - kubegpu.nvidia maintainers (@kubegpu)
extends_documentation_fragment:
  - kubegpu.nvidia.attributes
attributes:
  check_mode:
    support: full
    description: Plans and reports the change (and whether a reset is needed) with no NVML write and no reset.
  diff_mode:
    support: full
    description: One line per GPU, its geometry before and after.
  idempotent:
    support: full
    description: A second run on a node at its geometry reports no change and makes no NVML write.
options:
  config:
    description:
      - The name of the mig-parted config to apply, one of the shipped configs (the GPU Operator's,
        C(all-disabled), C(all-enabled), C(all-1g.10gb), C(all-balanced), ...) or of O(configs) /
        O(configs_file). An unknown name fails with the nearest known names.
    type: str
    required: true
  configs:
    description:
      - More configs, a mig-parted v1 document (YAML text or a mapping with C(version) and
        C(mig-configs)), merged over the shipped ones by name.
    type: raw
  configs_file:
    description:
      - A file holding such a document, instead of O(configs).
    type: path
  nvidia_smi:
    description:
      - The C(nvidia-smi) that resets a GPU (C(-r -i <index>)).
    type: str
    default: nvidia-smi
  nvml_timeout:
    description:
      - Seconds each NVML session may take before the module fails (a driver that does not answer).
    type: int
    default: 60
requirements:
  - The Python library C(pynvml) (PyPI C(nvidia-ml-py), Debian C(python3-pynvml)) on the target.
notes:
  - GPU and compute instances do not survive a reboot; the config must be applied again at boot.
  - The module never reboots; RV(reboot_required) says when the node must.
"""

EXAMPLES = r"""
- name: Partition every A100/H100/H200 GPU as the GPU Operator's all-balanced config
  kubegpu.nvidia.nvidia_mig:
    config: all-balanced

- name: Apply an own config
  kubegpu.nvidia.nvidia_mig:
    config: two-3g
    configs:
      version: v1
      mig-configs:
        two-3g:
          - devices: [0, 1]
            mig-enabled: true
            mig-devices: {"3g.20gb": 2}
          - devices: [2, 3]
            mig-enabled: false

- name: Show what would change
  kubegpu.nvidia.nvidia_mig:
    config: all-1g.5gb
  check_mode: true
  diff: true
"""

RETURN = r"""
changed_gpus:
  description: The indices of the GPUs whose mode or geometry changes.
  returned: always
  type: list
  elements: int
  sample: [0, 1, 2, 3]
reset_required:
  description: The indices of the GPUs whose mode change needs a GPU reset (Hopper and later apply most at once).
  returned: always
  type: list
  elements: int
  sample: [1]
reset:
  description: The indices of the GPUs the module reset.
  returned: when changed and not in check mode
  type: list
  elements: int
reboot_required:
  description: A GPU refused the reset (passthrough); its mode is pending until the node reboots.
  returned: always
  type: bool
reboot_reason:
  description: Why a reboot is needed (the reset's answer).
  returned: always
  type: str
mig_devices:
  description:
    - The MIG devices per GPU (C(gpus), index to profile counts) and per node as the device plugin's C(mixed)
      strategy advertises them (C(resources), C(nvidia.com/mig-<profile>) and C(nvidia.com/gpu) counts).
  returned: always
  type: dict
  sample: {gpus: {"0": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}},
           resources: {"nvidia.com/mig-1g.5gb": 2, "nvidia.com/mig-2g.10gb": 1, "nvidia.com/mig-3g.20gb": 1}}
plan:
  description:
    - The plan (C(mig_plan.plan)); per GPU its mode, what is destroyed and created, before and after.
    - Per GPU, C(attributes) maps each profile of its planned C(devices) to the attributes a MIG device of that
      profile will have, as NVML's profile info of the GPU (or of a GPU of the same model) reports them and
      keyed as the GPU facts key a MIG device's (C(memory_mib), C(multiprocessors), C(slices) C(gi)/C(ci),
      C(engines) C(copy)/C(decoder)/C(encoder)/C(jpeg)/C(ofa)); a profile is missing while MIG is off on every
      GPU of the model (NVML answers profile info only once MIG is on).
  returned: always
  type: dict
  sample: {gpus: [{index: 0, devices: {"1g.5gb": 7}, attributes: {"1g.5gb": {memory_mib: 4864, multiprocessors: 14,
           slices: {gi: 1, ci: 1}, engines: {copy: 1, decoder: 0, encoder: 0, jpeg: 0, ofa: 0}}}}]}
"""

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import run_module
from ansible_collections.kubegpu.nvidia.plugins.module_utils.mig_module import MigModule, work


def main():
    module = MigModule()
    run_module(module, work)


if __name__ == "__main__":
    main()
