# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter kubegpu.nvidia.retired_connection: why a role's connection variables of an earlier release stop it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The filters import the module_utils they use when called, not here (docs/development.md, Conventions).


def retired_connection(names):
    """One line naming the retired connection variables that are set and what to set instead; "" for none."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_connection import retired_message

    return retired_message(names)


class FilterModule:
    """The collection's filters."""

    def filters(self):
        return {"retired_connection": retired_connection}
