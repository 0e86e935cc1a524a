# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The decisions of a site run that span its plays.

``inventory_problem``: what is wrong with the inventory's groups, before anything runs.
``uses_api``: whether the run's tags select a play that talks to the Kubernetes API, so that the preflight reads
the cluster (and matches the GPU hosts to their nodes) first.
``validation_plan``: which GPU nodes get a validation pod, and which may be reported from their recorded
validation, from what the run did to each node (driver, toolkit, labels) and which hosts are still in it.
The ``kubegpu.nvidia.inventory_problem`` and ``kubegpu.nvidia.validation_plan`` filters call them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_allocation import DRA, host_allocation
from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_role
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gfd_labels import GPU_RESOURCE

GPU_GROUP = "gpu_nodes"
CONTROL_GROUP = "k8s_control"
# The tags of the plays (or roles) of kubegpu.nvidia.site that talk to the Kubernetes API (health gate, MIG geometry,
# labels, device plugin, DRA driver, dcgm-exporter, tenants, validation), one tuple each. The preflight's tag, named
# explicitly, asks for the cluster's checks as well.
API_PLAY_TAGS = (("health",), ("mig",), ("labels",), ("device_plugin",), ("dra",), ("dcgm_exporter",), ("tenants",),
                 ("validation",))
PREFLIGHT_TAG = "preflight"
DRIVER_TAGS = ("driver", "nvidia_driver", "nvidia_driver_install")


def inventory_problem(groups, gpu_group=GPU_GROUP, control_group=CONTROL_GROUP):
    """One line saying what is wrong with the inventory's groups, or "" when nothing is."""
    if gpu_group not in groups:
        names = sorted(name for name in groups if name not in ("all", "ungrouped"))
        return ("the inventory has no group %s (its groups: %s): put the GPU worker nodes in a group named %s and "
                "the host that reaches the Kubernetes API in %s"
                % (gpu_group, ", ".join(names) or "none", gpu_group, control_group))
    if not groups[gpu_group]:
        return "group %s has no hosts: put the GPU worker nodes in it" % gpu_group
    if control_group in groups and not groups[control_group]:
        return ("group %s has no hosts: put the host that reaches the Kubernetes API in it, or remove the group "
                "to use localhost" % control_group)
    return ""


def _play_runs(tags, only_tags, skip_tags):
    """Whether a play tagged ``tags`` (without ``always``) runs under ``--tags`` / ``--skip-tags``, as Ansible's
    ``Taggable.evaluate_tags`` decides it (ansible/playbook/taggable.py)."""
    tags = set(tags)
    if only_tags and not ("all" in only_tags or "tagged" in only_tags or tags & only_tags):
        return False
    return not (skip_tags and ("all" in skip_tags or "tagged" in skip_tags or tags & skip_tags))


def uses_api(run_tags, skip_tags=None):
    """Whether a site run with these tags (``ansible_run_tags``, ``ansible_skip_tags``) talks to the Kubernetes API.

    True when a play of ``API_PLAY_TAGS`` runs, or ``--tags`` names ``preflight``; false for runs of the node
    plays alone (``--tags facts``, ``driver``, ``toolkit``, ``runtime``, or skipping every API play).
    """
    only_tags = set(run_tags or ["all"])
    skip_tags = set(skip_tags or [])
    if PREFLIGHT_TAG in only_tags and PREFLIGHT_TAG not in skip_tags:
        return True
    return any(_play_runs(tags, only_tags, skip_tags) for tags in API_PLAY_TAGS)


def driver_play_runs(run_tags, skip_tags=None):
    """Whether the driver play (tag ``driver``, its role's tasks ``nvidia_driver`` and ``nvidia_driver_install``)
    runs under these tags (``ansible_run_tags``, ``ansible_skip_tags``)."""
    return _play_runs(DRIVER_TAGS, set(run_tags or ["all"]), set(skip_tags or []))


def _truthy(value):
    return value is True or (isinstance(value, str) and value.lower() in ("true", "yes", "1"))


def node_resource(expected):
    """The resource a node's validation pod requests instead of ``nvidia.com/gpu``, "" when it keeps that.

    ``expected``: what the node model says the node advertises (``{resource: count}``). A node that advertises
    ``nvidia.com/gpu`` (or its ``.shared`` replicas) keeps the pod's; one whose GPUs are all MIG devices under the
    device plugin's ``mixed`` strategy gets its most plentiful ``nvidia.com/mig-<profile>`` (``mig_role``).
    """
    expected = expected or {}
    if any(name.startswith(GPU_RESOURCE) and name[len(GPU_RESOURCE):] in ("", ".shared") for name in expected):
        return ""
    return mig_role.validation_resource(expected)


def validation_plan(hosts, hostvars, nodes=None, active_hosts=None, revalidate=False, capacity=None):
    """``{"nodes": [...], "known": [...], "resources": {...}}``: the nodes of the GPU ``hosts`` to validate, those of
    them whose recorded validation may stand in for a pod, and per node the resource its pod requests instead of
    ``nvidia.com/gpu`` (``node_resource`` of its row in ``capacity``, the device plugin role's
    ``k8s_device_plugin_capacity``: ``{node, expected}``; only nodes whose pod requests another).

    A host's node is its ``kubegpu_node_name``. ``nodes``: the GPU nodes as the labels role last read or wrote
    them (``k8s_gpu_node_nodes``: labels, allocatable, annotations, ``changed``). A node may be reported from its
    record unless the run changed it: its driver (``nvidia_driver_changed``), its toolkit or runtime configuration
    (``nvidia_container_toolkit_changed``), its labels or taints (``changed`` in ``nodes``), or its host left the
    run before the labels play (not in ``active_hosts``, when given). ``revalidate`` trusts no record.
    A host whose ``kubegpu_gpu_allocation`` is ``dra`` is left out: its node advertises no device plugin resource,
    and the DRA driver role validates it with a claim.
    """
    names = []
    changed = set()
    for host in hosts or []:
        host_vars = hostvars[host] if host in hostvars else {}
        if host_allocation(host, host_vars) == DRA:
            continue
        name = host_vars.get("kubegpu_node_name") or host
        if name in names:
            continue
        names.append(name)
        if (_truthy(host_vars.get("nvidia_driver_changed")) or _truthy(host_vars.get("nvidia_container_toolkit_changed"))
                or (active_hosts is not None and host not in active_hosts)):
            changed.add(name)
    known = []
    if not revalidate:
        for node in nodes or []:
            if node.get("name") in names and node.get("name") not in changed and not node.get("changed"):
                known.append(node)
    resources = {}
    for row in capacity or []:
        resource = node_resource(row.get("expected")) if row.get("node") in names else ""
        if resource:
            resources[row["node"]] = resource
    return {"nodes": names, "known": known, "resources": resources}
