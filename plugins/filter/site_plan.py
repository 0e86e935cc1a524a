# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters kubegpu.nvidia.inventory_problem, kubegpu.nvidia.site_uses_api and kubegpu.nvidia.validation_plan: a site
run's cross-play decisions."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The filters import the module_utils they use when called, not here (docs/development.md, Conventions).

from ansible.errors import AnsibleFilterError


def inventory_problem(groups, gpu_group=None, control_group=None):
    """What is wrong with the inventory's groups, in one line; "" when nothing is.

    ``gpu_group`` / ``control_group``: the groups' names (default ``gpu_nodes`` / ``k8s_control``).
    """
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import site_plan

    if not isinstance(groups, dict):
        raise AnsibleFilterError("inventory_problem expects the groups (a dict)")
    if gpu_group is None:
        gpu_group = site_plan.GPU_GROUP
    if control_group is None:
        control_group = site_plan.CONTROL_GROUP
    return site_plan.inventory_problem(groups, gpu_group, control_group)


def site_uses_api(run_tags, skip_tags=None):
    """Whether a site run with these tags talks to the Kubernetes API (module_utils/site_plan.py)."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import site_plan

    for name, value in (("run_tags", run_tags), ("skip_tags", skip_tags)):
        if value is not None and not isinstance(value, (list, tuple)):
            raise AnsibleFilterError("site_uses_api expects %s as a list of tags, not %s" % (name, type(value).__name__))
    return site_plan.uses_api(run_tags, skip_tags)


def validation_plan(hosts, hostvars, nodes=None, active_hosts=None, revalidate=False, capacity=None):
    """The nodes to validate and those whose recorded validation may stand in (module_utils/site_plan.py)."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import site_plan
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

    if isinstance(hosts, str):
        hosts = [hosts]
    try:
        return site_plan.validation_plan(hosts, hostvars, nodes, active_hosts, revalidate, capacity)
    except InputError as exc:
        raise AnsibleFilterError("validation_plan: %s" % exc.msg)
    except (AttributeError, TypeError) as exc:
        raise AnsibleFilterError("validation_plan: the nodes it was given are not of the expected shape: %s" % exc)


class FilterModule:
    """The collection's filters."""

    def filters(self):
        return {"inventory_problem": inventory_problem, "site_uses_api": site_uses_api, "validation_plan": validation_plan}
