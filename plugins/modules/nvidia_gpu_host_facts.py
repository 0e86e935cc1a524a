#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_gpu_host_facts
short_description: Gather the NVIDIA GPU facts and Ansible's host facts of a node in one run
version_added: 1.0.0
description:
  - Does what M(kubegpu.nvidia.nvidia_gpu_facts) does, and gathers the subsets O(gather_subset) of Ansible's
    own host facts in the same run, with the collectors, subset rules and names of M(ansible.builtin.setup).
  - M(kubegpu.nvidia.nvidia_gpu_facts) runs this module by itself when its O(gather_subset) is not empty; call
    M(kubegpu.nvidia.nvidia_gpu_facts) in playbooks. This module carries setup's collectors, so a run of it
    costs about what a setup run costs; M(kubegpu.nvidia.nvidia_gpu_facts) without host facts does not.
author:
  - kubegpu.nvidia maintainers (@kubegpu)
extends_documentation_fragment:
  - kubegpu.nvidia.attributes.read_only
  - kubegpu.nvidia.nvidia_gpu_facts
attributes:
  facts:
    support: full
    description: Sets C(ansible_facts.nvidia_gpu) and the host facts of O(gather_subset).
seealso:
  - module: kubegpu.nvidia.nvidia_gpu_facts
  - module: ansible.builtin.setup
"""

EXAMPLES = r"""
# Usually through nvidia_gpu_facts, which runs this module when gather_subset is given:
- name: Gather the GPU facts and the host facts the roles need
  kubegpu.nvidia.nvidia_gpu_facts:
    gather_subset: ['!all', '!min', distribution, platform, network, virtual]

- name: The same, naming this module
  kubegpu.nvidia.nvidia_gpu_host_facts:
    gather_subset: ['!all', '!min', distribution, platform, network, virtual]
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    nvidia_gpu:
      description: The NVIDIA GPUs of the machine, exactly as M(kubegpu.nvidia.nvidia_gpu_facts) returns them.
      returned: always
      type: dict
    ansible_distribution:
      description:
        - One of the host facts of O(gather_subset), with the names M(ansible.builtin.setup) gives them
          (C(ansible_) prefix; without it under C(ansible_facts) in a play).
      returned: when O(gather_subset) holds a subset that gathers it
      type: str
      sample: Debian
"""

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import run_module
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_module import FactsModule, gather
from ansible_collections.kubegpu.nvidia.plugins.module_utils.host_facts import gather_host_facts


def work(module):
    return gather(module, host_facts=gather_host_facts)


def main():
    module = FactsModule()
    run_module(module, work)


if __name__ == "__main__":
    main()
