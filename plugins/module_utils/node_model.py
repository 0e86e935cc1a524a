# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One model of a GPU node's desired state: its device plugin config, its labels and its allocatable.

From a node's ``nvidia_gpu`` facts and the cluster's resolved device plugin configuration
(``device_plugin_config.resolve``), ``NodeModel.node`` works out:

* ``config``: the config the device plugin's config-manager gives the node (its node config, else its GPU
  product's config, else the default), which the node's ``nvidia.com/device-plugin.config`` label names;
* ``labels``: the labels GPU Feature Discovery v0.20 publishes for those GPUs under that config
  (``gfd_labels.node_labels``);
* ``allocatable``: what the device plugin v0.20 advertises per resource name under that config
  (``plugin_allocatable``), or None where the facts cannot tell (MIG devices not listed); ``problem`` says
  why the plugin cannot start on the node (an invalid MIG layout for the strategy), else None.

Every consumer reads this one model: ``k8s_gpu_label`` writes the labels and the config label, the
``k8s_device_plugin`` role writes the configs and checks the allocatable, ``site.yml`` summarises it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.nvidia.plugins.module_utils import device_plugin_config
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_allocation import DEVICE_PLUGIN, DRA
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gfd_labels import (
    CONFIG_LABEL, GPU_RESOURCE, LabelError, expand_devices, mig_enabled, mig_profile_parts, mig_resource_name,
    mig_single_invalid, node_labels)

SHARED_SUFFIX = ".shared"


def _mig_kind(mig):
    """What tells two MIG devices apart for the device plugin (device_map.go compares their attributes)."""
    return (mig.get("profile"), mig.get("memory_mib"), mig.get("multiprocessors"),
            tuple(sorted((mig.get("slices") or {}).items())), tuple(sorted((mig.get("engines") or {}).items())))


def _base_resources(devices, mig_strategy):
    """``({resource: devices}, problem)`` before sharing, as internal/rm/device_map.go builds its device map.

    ``none``: every GPU, MIG-enabled or not, is ``nvidia.com/gpu``.  ``single``: GPUs without MIG, or else
    every MIG device, are ``nvidia.com/gpu``; an empty MIG-enabled GPU, MIG on next to MIG off, or MIG devices
    of more than one kind stop the plugin.  ``mixed``: GPUs without MIG are ``nvidia.com/gpu``, each MIG device
    ``nvidia.com/mig-<profile>``; the plugin has resource patterns only for profiles with as many compute as GPU
    slices (internal/rm/rm.go AddDefaultResourcesToConfig), so a MIG device of another profile stops it.
    Returns ``(None, why)`` when the facts do not list the MIG devices the count depends on.
    """
    enabled = [device for device in devices if mig_enabled(device)]
    if mig_strategy == "none" or not enabled:
        return {GPU_RESOURCE: len(devices)}, None
    if any((device.get("mig") or {}).get("devices") is None for device in enabled):
        return None, "the facts do not list the MIG devices of its MIG-enabled GPUs"
    migs = [mig for device in enabled for mig in device["mig"]["devices"]]
    if mig_strategy == "single":
        why = mig_single_invalid(devices)
        if why is None and len(set(_mig_kind(mig) for mig in migs)) > 1:
            why = "MIG devices of more than one kind"
        if why:
            return {}, "mig strategy single needs every GPU MIG-enabled with MIG devices of one kind (%s)" % why
        return {GPU_RESOURCE: len(migs)}, None
    resources = {}
    full = len(devices) - len(enabled)
    if full:
        resources[GPU_RESOURCE] = full
    for mig in migs:
        parts = mig_profile_parts(mig.get("profile"))
        if parts is None or parts[0] != parts[1]:
            return {}, ("mig strategy mixed has no resource for MIG profile %s (only profiles with as many compute "
                        "as GPU slices have one)" % mig.get("profile"))
        name = mig_resource_name(mig["profile"])
        resources[name] = resources.get(name, 0) + 1
    return resources, None


def plugin_allocatable(devices, plugin, count=None):
    """``({resource name: count}, problem)`` the device plugin advertises for ``devices`` under ``plugin``.

    ``plugin``: a ``gfd_labels.plugin_view``.  Each sharing entry replaces its resource's devices by
    ``replicas`` replicas of each, advertised as ``<name>.shared`` with ``renameByDefault``
    (internal/rm/device_map.go updateDeviceMapWithReplicas, api/config/v1/config.go
    DisableResourceNamingInConfig).  ``count``: the GPUs when the facts list no devices (taken as full GPUs).
    ``problem`` (allocatable ``{}``) when the plugin cannot start; allocatable None when the facts cannot tell.
    """
    devices = expand_devices(devices)
    if not devices:
        base, problem = ({GPU_RESOURCE: count} if count else {}), None
    else:
        base, problem = _base_resources(devices, plugin["mig_strategy"])
    if base is None:
        return None, problem
    advertised = {}
    for name, number in base.items():
        replicas = plugin["replicas"].get(name, 1)
        if replicas > 1:
            name = name + SHARED_SUFFIX if plugin["rename_by_default"] else name
            number *= replicas
        if number:
            advertised[name] = number
    return advertised, problem


class NodeModel:
    """The desired state of GPU nodes under one resolved device plugin configuration."""

    def __init__(self, resolved):
        self.resolved = resolved
        self.views = dict((name, device_plugin_config.view(settings))
                          for name, settings in resolved["configs"].items())

    def config(self, facts, node_name=None, product=None):
        """The config name the node gets; ``product``: its GPU product when the facts list no devices."""
        return device_plugin_config.select_config(self.resolved, node_name,
                                                  device_plugin_config.gpu_product(facts) or product)

    def _labels(self, facts, node_name, product):
        config = self.config(facts, node_name, product)
        try:
            return config, node_labels(facts, self.views[config])
        except LabelError as exc:
            raise InputError("node %s gets device plugin config %s: %s; give it a config without MPS "
                             "(node_configs or product_configs) or turn MIG off" % (node_name or "?", config, exc))

    def node(self, facts, node_name=None, product=None, allocation=DEVICE_PLUGIN):
        """``{config, labels, allocatable, problem, allocation}`` of a node with ``facts`` (its ``nvidia_gpu`` facts).

        ``labels`` are GFD's (the config label is not among them: ``desired_labels`` adds it).  Raises
        InputError naming the node (``node_name``) when its config asks for what GFD refuses (MPS on MIG).
        ``product``: the node's GPU product when the facts list no devices (from its labels).
        ``allocation``: the host's ``gpu_allocation.host_allocation``; a ``dra`` node keeps GFD's labels, but
        the device plugin does not run there, so it advertises nothing (its GPUs are in a ResourceSlice).
        """
        facts = facts or {}
        config, labels = self._labels(facts, node_name, product)
        if allocation == DRA:
            return {"config": config, "labels": labels, "allocatable": {}, "problem": None, "allocation": DRA}
        if facts.get("present") is False:
            allocatable, problem = {}, None
        else:
            allocatable, problem = plugin_allocatable(facts.get("devices"), self.views[config], facts.get("count"))
        return {"config": config, "labels": labels, "allocatable": allocatable, "problem": problem,
                "allocation": DEVICE_PLUGIN}

    def desired_labels(self, facts, node_name=None):
        """The GFD labels of the node plus ``nvidia.com/device-plugin.config`` naming its config."""
        config, labels = self._labels(facts or {}, node_name, None)
        labels[CONFIG_LABEL] = config
        return labels


def node_model(facts, resolved, node_name=None):
    """``NodeModel(resolved).node(facts, node_name)`` for one node."""
    return NodeModel(resolved).node(facts, node_name)
