# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters kubegpu.nvidia.mig_decide, kubegpu.nvidia.mig_state_patch, kubegpu.nvidia.mig_reboot_blockers,
kubegpu.nvidia.mig_resources_missing, kubegpu.nvidia.mig_advertised, kubegpu.nvidia.mig_validation_resource and
kubegpu.nvidia.mig_planned_facts: the decisions of the role nvidia_mig (module_utils/mig_role.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The filters import the module_utils they use when called, not here (docs/development.md, Conventions).

from ansible.errors import AnsibleFilterError


def mig_decide(node, config="", user_configs=None):
    """Which MIG config the node must have, where that comes from, and what is wrong with it."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_role
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

    try:
        return mig_role.decide(node, config, user_configs)
    except InputError as exc:
        raise AnsibleFilterError(str(exc))


def mig_state_patch(state, reason=""):
    """The node metadata patch recording nvidia.com/mig.config.state (and the reason of a failure)."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_role
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

    try:
        return mig_role.state_patch(state, reason)
    except InputError as exc:
        raise AnsibleFilterError(str(exc))


def mig_reboot_blockers(allowed, local=False, container=""):
    """Why the node may not be rebooted for its MIG mode ([] when it may)."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_role

    return mig_role.reboot_blockers(bool(allowed), bool(local), container or "")


def mig_resources_missing(expected, allocatable):
    """The MIG resources the node does not advertise yet as the module's result expects them."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_role

    if not isinstance(expected, dict) or not isinstance(allocatable, dict):
        raise AnsibleFilterError("mig_resources_missing expects two dicts of resource name to count")
    return mig_role.resources_missing(expected, allocatable)


def mig_advertised(node):
    """Whether the node advertises nvidia.com/mig-* resources (the device plugin's mixed strategy runs there)."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_role

    return mig_role.advertises_mig(node if isinstance(node, dict) else {})


def mig_validation_resource(expected):
    """The MIG resource the validation pod of a changed node requests ("" when there is none)."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_role

    if not isinstance(expected, dict):
        raise AnsibleFilterError("mig_validation_resource expects a dict of resource name to count")
    return mig_role.validation_resource(expected)


def mig_planned_facts(facts, result):
    """The node's GPU facts as they will read once the nvidia_mig module's planned change is made (check mode)."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_role

    if not isinstance(facts, dict) or not isinstance(result, dict):
        raise AnsibleFilterError("mig_planned_facts expects the GPU facts and the nvidia_mig result, two dicts")
    return mig_role.planned_facts(facts, result)


class FilterModule:
    """The collection's filters."""

    def filters(self):
        return {"mig_decide": mig_decide, "mig_state_patch": mig_state_patch, "mig_reboot_blockers": mig_reboot_blockers,
                "mig_resources_missing": mig_resources_missing, "mig_advertised": mig_advertised,
                "mig_validation_resource": mig_validation_resource, "mig_planned_facts": mig_planned_facts}
