# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The work of the GPU facts modules, shared by ``nvidia_gpu_facts`` and ``nvidia_gpu_host_facts``.

Both modules take the same options (``ARGUMENT_SPEC``; documented in the ``kubegpu.nvidia.nvidia_gpu_facts``
doc fragment). ``nvidia_gpu_facts`` does not import Ansible's host fact collectors, so its payload stays
small; ``nvidia_gpu_host_facts`` does, and gathers ``gather_subset`` in the same run. The
``nvidia_gpu_facts`` action plugin runs the second when ``gather_subset`` is given.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubegpu.nvidia.plugins.module_utils import driver_node, toolkit_state
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError, KubegpuError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gfd_labels import (
    MIG_STRATEGIES,
    SHARING_STRATEGIES,
    validate_label_options,
)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery import discover, unusable_reason
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_common import run_bounded
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_health_module import check_params, read_node_health

HOST_FACTS_MODULE = "kubegpu.nvidia.nvidia_gpu_host_facts"

ARGUMENT_SPEC = dict(
    require=dict(type="bool", default=False),
    mig_strategy=dict(type="str", default="none", choices=list(MIG_STRATEGIES)),
    sharing_strategy=dict(type="str", default="none", choices=list(SHARING_STRATEGIES)),
    replicas=dict(type="int", default=1),
    command_timeout=dict(type="int", default=10),
    nvml_timeout=dict(type="int", default=30),
    gather_subset=dict(type="list", elements="str", default=[]),
    gather_timeout=dict(type="int", default=10),
    health_options=dict(type="dict", default={}),
    driver_options=dict(type="dict", default={}),
)
# the gather_subset entry that adds the GPU health (nvidia_gpu_health's read) to the facts, as nvidia_gpu.health
HEALTH_SUBSET = "health"
# the gather_subset entry that adds the driver state (nvidia_driver_info's read) as nvidia_gpu.driver_state
DRIVER_SUBSET = "driver"
# the gather_subset entry that adds the toolkit state (nvidia_container_toolkit_info's read, no option) as
# nvidia_gpu.toolkit_state
TOOLKIT_SUBSET = "toolkit"
# the entries of gather_subset this collection reads itself (no host fact collector needed)
NODE_SUBSETS = (HEALTH_SUBSET, DRIVER_SUBSET, TOOLKIT_SUBSET)


def split_subsets(gather_subset):
    """``(host subsets, node subsets)``: the entries of ``gather_subset`` for Ansible's host fact collectors, and
    the set of this collection's own reads it asks for (``NODE_SUBSETS``). A string is split at commas, as
    ``setup`` does."""
    if isinstance(gather_subset, str):
        gather_subset = gather_subset.split(",")
    subsets = [str(entry).strip() for entry in gather_subset or []]
    return ([entry for entry in subsets if entry and entry not in NODE_SUBSETS],
            set(entry for entry in subsets if entry in NODE_SUBSETS))


class FactsModule(AnsibleModule):
    """``AnsibleModule`` with ``ARGUMENT_SPEC`` whose own failures (options of the wrong type, unknown options)
    carry ``error_kind: input`` like every other failure the user causes."""

    def __init__(self):
        super(FactsModule, self).__init__(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)

    def fail_json(self, msg, **kwargs):  # pylint: disable=arguments-differ
        kwargs.setdefault("error_kind", "input")
        super(FactsModule, self).fail_json(msg, **kwargs)


def node_health(facts, health_params, which, read=read_node_health):
    """``nvidia_gpu.health``: the node's GPU health (``nvidia_gpu_health``'s read).

    When NVML cannot be used at all and the GPU facts did not come from NVML either (no GPU, no driver installed
    yet), saying ``unhealthy`` would taint every node before its first driver install: the severity is then
    ``unknown`` with the reason, and a health gate leaves such a node as it is. A driver that does not answer
    (NVML timed out) stays ``unhealthy``; so does a node whose GPUs NVML lists but cannot read (a lost GPU, which
    may also make the facts fall back to another source).
    """
    health = read(health_params, which)
    nvml_unusable = [f for f in health.get("findings") or [] if f.get("signal") == "nvml"]
    if health.get("gpus") or not nvml_unusable or facts.get("source") == "nvml":
        return health
    if any(f.get("action") == "reboot_node" for f in nvml_unusable):  # the driver hangs
        return health
    if facts.get("present"):
        reason = ("NVML cannot be used (%s; GPU facts from %s): the health is read once the driver answers"
                  % (nvml_unusable[0].get("reason"), facts.get("source")))
    else:
        reason = "no GPU found"
    return dict(health, severity="unknown", action="none", reason=reason, findings=[])


def node_driver_state(module, driver_params):
    """``nvidia_gpu.driver_state``: what ``nvidia_driver_info`` returns for ``driver_params`` (the same read),
    with ``options``, the options it was read with, so that a role reading with other options knows this state
    does not answer it."""
    return dict(driver_node.gather(module, driver_params), options=driver_params)


def _check_timeouts(params):
    for name in ("command_timeout", "nvml_timeout", "gather_timeout"):
        if params[name] < 1:
            raise InputError("%s must be at least 1 (seconds), got %d" % (name, params[name]))


def gather(module, host_facts=None):
    """The modules' work: the facts, or a ``KubegpuError``.

    ``host_facts(module, gather_subset, gather_timeout)`` gathers Ansible's host facts; None in the module
    that does not carry the collectors.
    """
    params = module.params
    error = validate_label_options(params["mig_strategy"], params["sharing_strategy"], params["replicas"])
    if error:
        raise InputError(error)
    _check_timeouts(params)

    host_subsets, node_subsets = split_subsets(params["gather_subset"])
    want_health = HEALTH_SUBSET in node_subsets
    health_params = None
    if want_health:
        health_params = check_params(params["health_options"], nvml_timeout=params["nvml_timeout"])
    elif params["health_options"]:
        raise InputError("health_options is only read when gather_subset lists %s" % HEALTH_SUBSET)
    driver_params = None
    if DRIVER_SUBSET in node_subsets:
        driver_params = driver_node.check_params(params["driver_options"])
    elif params["driver_options"]:
        raise InputError("driver_options is only read when gather_subset lists %s" % DRIVER_SUBSET)

    ansible_facts = {}
    if host_subsets:
        if host_facts is None:
            raise InputError("gather_subset needs the host fact collectors, which this module does not carry: "
                             "run kubegpu.nvidia.nvidia_gpu_facts as a task (its action plugin then runs %s) "
                             "or %s itself" % (HOST_FACTS_MODULE, HOST_FACTS_MODULE))
        ansible_facts = host_facts(module, host_subsets, params["gather_timeout"])

    run_command = functools.partial(run_bounded, timeout=params["command_timeout"], environ_update={"LC_ALL": "C"})
    found = discover(
        run_command=run_command,
        which=module.get_bin_path,
        mig_strategy=params["mig_strategy"],
        sharing_strategy=params["sharing_strategy"],
        replicas=params["replicas"],
        nvml_timeout=params["nvml_timeout"],
    )
    for warning in found.warnings:
        module.warn(warning)
    if params["require"]:
        reason = unusable_reason(found.facts, found.fallback_warnings)
        if reason:
            raise KubegpuError(reason, kind="timeout" if found.timed_out else "runtime",
                               ansible_facts={"nvidia_gpu": found.facts})
    if want_health:
        found.facts["health"] = node_health(found.facts, health_params, module.get_bin_path)
    if driver_params is not None:
        found.facts["driver_state"] = node_driver_state(module, driver_params)
    if TOOLKIT_SUBSET in node_subsets:
        found.facts["toolkit_state"] = toolkit_state.node_state(module)
    ansible_facts["nvidia_gpu"] = found.facts
    return dict(changed=False, ansible_facts=ansible_facts)
