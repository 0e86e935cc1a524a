# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Action plugin of kubegpu.nvidia.nvidia_gpu_facts: one module run per host, sized to what is asked.

A module's payload holds every module_utils file it imports. Ansible's host fact collectors (about 70
files) would double the nvidia_gpu_facts payload and the time to build, send and unpack it on every
call. So the collectors live in a second module, kubegpu.nvidia.nvidia_gpu_host_facts, with the same
options; this plugin runs it when ``gather_subset`` asks for host facts, and the small
kubegpu.nvidia.nvidia_gpu_facts otherwise. Either way the task is one module run.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase
from ansible.utils.vars import merge_hash

FACTS_MODULE = "kubegpu.nvidia.nvidia_gpu_facts"
HOST_FACTS_MODULE = "kubegpu.nvidia.nvidia_gpu_host_facts"
# the entries of gather_subset the small module reads itself (gpu_discovery_module.NODE_SUBSETS)
NODE_SUBSETS = ("health", "driver", "toolkit")


def module_for(args):
    """The module that serves the task arguments ``args``: host facts need the collectors; the GPU health, the
    driver state and the toolkit state (``gather_subset: [health, driver, toolkit]``) do not."""
    subsets = args.get("gather_subset") or []
    if isinstance(subsets, str):
        subsets = subsets.split(",")
    return HOST_FACTS_MODULE if [s for s in subsets if str(s).strip() not in ("",) + NODE_SUBSETS] else FACTS_MODULE


class ActionModule(ActionBase):

    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp  # tmp no longer has any effect
        wrap_async = self._task.async_val and not self._connection.has_native_async
        module_args = dict(self._task.args)
        result = merge_hash(result, self._execute_module(module_name=module_for(module_args), module_args=module_args,
                                                         task_vars=task_vars, wrap_async=wrap_async))
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
