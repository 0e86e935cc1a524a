# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver role's decisions as filters: nvidia_driver_plan, nvidia_driver_resolve, nvidia_driver_hold_check,
nvidia_driver_loaded, nvidia_driver_summary and nvidia_driver_state_from_facts."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The filters import the module_utils they use when called, not here (docs/development.md, Conventions).

from ansible.errors import AnsibleFilterError


def nvidia_driver_plan(gpu_facts, settings):
    """What the driver role does on a node, or ``error`` with the one message it stops with."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import driver_plan

    if gpu_facts is not None and not isinstance(gpu_facts, dict):
        raise AnsibleFilterError("nvidia_driver_plan expects the GPU facts (a dict), got %s" % type(gpu_facts).__name__)
    if not isinstance(settings, dict):
        raise AnsibleFilterError("nvidia_driver_plan expects its settings as a dict, got %s" % type(settings).__name__)
    return driver_plan.plan(gpu_facts, settings)


def nvidia_driver_loaded(gpu_facts, version=None, branch=None):
    """Whether the GPU facts show the wanted driver loaded: exactly ``version``, else any of ``branch``."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import driver_plan

    if gpu_facts is not None and not isinstance(gpu_facts, dict):
        raise AnsibleFilterError("nvidia_driver_loaded expects the GPU facts (a dict), got %s" % type(gpu_facts).__name__)
    install, _reason = driver_plan.needs_install(gpu_facts or {}, {}, version or None, branch, None)
    return not install


def nvidia_driver_summary(version, plan, state=None, reboot_pending=False, check_next_kernel=True, held=None,
                          packages=None):
    """The driver's state for the summary's DRIVER column: ``text`` and its parts.

    ``version``: the driver version (None: the installed version of the first of ``packages``).
    """
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import driver_plan

    if plan is not None and not isinstance(plan, dict):
        raise AnsibleFilterError("nvidia_driver_summary expects the plan (a dict), got %s" % type(plan).__name__)
    if not version:
        version = driver_plan.installed_driver_version(state, packages)
    return driver_plan.summary(version, plan, state, reboot_pending=reboot_pending,
                               check_next_kernel=check_next_kernel, held=held)


def nvidia_driver_state_from_facts(state, options):
    """The driver state the facts hold (``nvidia_gpu.driver_state``) when it answers a read with ``options``, else
    None: the role then reads the node itself."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import driver_node

    if state is not None and not isinstance(state, dict):
        raise AnsibleFilterError("nvidia_driver_state_from_facts expects the driver state (a dict), got %s"
                                 % type(state).__name__)
    if not isinstance(options, dict):
        raise AnsibleFilterError("nvidia_driver_state_from_facts expects the read's options as a dict, got %s"
                                 % type(options).__name__)
    return driver_node.state_for(state, options)


def nvidia_driver_resolve(available, names, branch, version=None):
    """``{"version", "error"}``: the one version every package of ``names`` is installed at."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import driver_plan

    if available is not None and not isinstance(available, dict):
        raise AnsibleFilterError("nvidia_driver_resolve expects the offered versions (a dict), got %s"
                                 % type(available).__name__)
    return driver_plan.resolve_version(available, names, branch, version)


def nvidia_driver_hold_check(state, packages, version=None, unattended_upgrades=True):
    """Whether the driver's packages are held, and whether nvidia_driver_hold has anything to do."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import driver_plan

    if state is not None and not isinstance(state, dict):
        raise AnsibleFilterError("nvidia_driver_hold_check expects the driver state (a dict), got %s"
                                 % type(state).__name__)
    return driver_plan.hold_check(state, packages, version, unattended_upgrades)


class FilterModule:
    """The collection's filters."""

    def filters(self):
        return {"nvidia_driver_hold_check": nvidia_driver_hold_check,
                "nvidia_driver_loaded": nvidia_driver_loaded, "nvidia_driver_plan": nvidia_driver_plan,
                "nvidia_driver_resolve": nvidia_driver_resolve, "nvidia_driver_summary": nvidia_driver_summary,
                "nvidia_driver_state_from_facts": nvidia_driver_state_from_facts}
