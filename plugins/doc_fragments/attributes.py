# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    """Attributes shared by the collection's modules."""

    DOCUMENTATION = r"""
options: {}
"""

    # the modules that only read (nvidia_gpu_facts, nvidia_gpu_host_facts, nvidia_driver_info,
    # nvidia_container_toolkit_info)
    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    description: The module only reads; it runs the same way in check mode and never reports a change.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no difference to show.
  idempotent:
    support: full
    description: Repeated runs on an unchanged node return the same result.
"""
