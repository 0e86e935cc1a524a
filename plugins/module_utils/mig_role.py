# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The decisions of the role ``nvidia_mig`` (filter ``kubegpu.nvidia.mig_decide``).

``decide(node, config, user_configs)``: which mig-parted config a node must have and where that comes from.
The node's ``nvidia.com/mig.config`` label (the GPU Operator's contract, ``pkg/mig/reconfigure/reconfigure.go``
of NVIDIA/mig-parted) wins over the inventory's ``nvidia_mig_config``: a node relabelled with ``kubectl label``
is repartitioned by the next run, and a cluster moving from the Operator keeps its nodes' choices. The
inventory's value is the default of the nodes without the label. A name that is no known config (shipped or
the user's) is a problem in one line; coming from the label, the role records it in
``nvidia.com/mig.config.state=failed`` and the reason in the annotation ``REASON_ANNOTATION``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_config, mig_configs
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

CONFIG_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"
# a label value cannot hold a sentence: the reason of a failed state is an annotation
REASON_ANNOTATION = "kubegpu.nvidia/mig.config.reason"
STATES = ("pending", "rebooting", "success", "failed")


def _labels(node):
    if not isinstance(node, dict):
        return {}
    labels = node.get("labels")
    if labels is None:
        labels = (node.get("metadata") or {}).get("labels")
    return labels if isinstance(labels, dict) else {}


def decide(node, config="", user_configs=None):
    """``{"config", "source", "problem", "state"}`` for one node.

    ``node``: the Node object (``metadata.labels``) or a node record with ``labels``; ``config``: the inventory's
    ``nvidia_mig_config`` ("" or None: none); ``user_configs``: the user's mig-parted v1 document (merged over
    the shipped configs). ``source`` is ``label``, ``variable`` or ``none`` (the node is left alone);
    ``state`` is the node's current ``nvidia.com/mig.config.state`` ("" when unset). ``problem`` is "" or one
    line; the user's configs that do not parse are a problem whatever the source.
    """
    labels = _labels(node)
    label = labels.get(CONFIG_LABEL) or ""
    config = config or ""
    if not isinstance(config, str):
        raise InputError("nvidia_mig_config must be the name of a MIG config, not %s" % type(config).__name__)
    result = {"config": label or config or None, "source": "label" if label else ("variable" if config else "none"),
              "problem": "", "state": labels.get(STATE_LABEL) or ""}
    try:
        known = mig_configs.configs(user_configs or None, "nvidia_mig_configs")
    except InputError as error:
        result["problem"] = str(error)
        return result
    if result["config"] is None:
        return result
    try:
        mig_config.select(known, result["config"])
    except InputError as error:
        where = ("the node's label %s=%s" % (CONFIG_LABEL, label) if label
                 else "nvidia_mig_config=%s" % config)
        result["problem"] = "%s: %s" % (where, error)
    return result


def state_patch(state, reason=""):
    """The metadata patch that records ``state`` (and the reason of ``failed``; cleared for the other states)."""
    if state not in STATES:
        raise InputError("MIG config state must be one of %s, got %r" % (", ".join(STATES), state))
    reason = " ".join(str(reason or "").split()) if state == "failed" else None
    return {"metadata": {"labels": {STATE_LABEL: state}, "annotations": {REASON_ANNOTATION: reason or None}}}


def reboot_blockers(allowed, local, container=""):
    """Why the role may not reboot a node whose MIG mode waits for one, as the role nvidia_driver decides it:
    never in a container, never on a local connection, never when ``nvidia_mig_reboot`` is false. ``[]``: it may."""
    blockers = []
    if container:
        blockers.append("the node is a container (%s)" % container)
    if local:
        blockers.append("Ansible runs on the node itself (local connection)")
    if not allowed:
        blockers.append("nvidia_mig_reboot is false")
    return blockers


def resources_missing(expected, allocatable):
    """The ``nvidia.com/mig-<profile>`` counts of ``expected`` (the module's ``mig_devices.resources``, the mixed
    strategy's) that ``allocatable`` does not advertise yet, one line each; ``[]`` when the node advertises them."""
    missing = []
    for name in sorted(expected or {}):
        if not name.startswith("nvidia.com/mig-"):
            continue
        have = str((allocatable or {}).get(name, "0"))
        if have != str(expected[name]):
            missing.append("%s: %s advertised, %s expected" % (name, have, expected[name]))
    return missing


def advertises_mig(node):
    """Whether the node (as read before the change) advertises ``nvidia.com/mig-*`` resources: a device plugin with
    the ``mixed`` strategy runs there, so the role can wait for the new counts. On a new cluster the device plugin
    comes later in the site run (its play checks what each node advertises). ``node``: the Node object
    (``status.allocatable``) or a node record as listed (``allocatable``)."""
    node = node or {}
    allocatable = node.get("allocatable")
    if allocatable is None:
        allocatable = (node.get("status") or {}).get("allocatable")
    return any(name.startswith("nvidia.com/mig-") for name in (allocatable or {}))


def validation_resource(expected):
    """The ``nvidia.com/mig-<profile>`` resource of ``expected`` (the module's ``mig_devices.resources``) that the
    validation pod requests: the one with the most devices (the smallest profile), by name on a tie; "" when the
    node has no MIG device."""
    names = [name for name in (expected or {}) if name.startswith("nvidia.com/mig-")]
    if not names:
        return ""
    return sorted(names, key=lambda name: (-int(expected[name]), name))[0]


# the attributes of a MIG device in the GPU facts (gpu_discovery_nvml._mig_devices) that its profile fixes
MIG_PROFILE_ATTRIBUTES = ("memory_mib", "multiprocessors", "slices", "engines")


def planned_facts(facts, result):
    """The node's GPU facts (``ansible_facts.nvidia_gpu``) as they will read once ``result``'s plan is applied.

    ``result``: the ``nvidia_mig`` module's result in check mode (its ``plan``). Each changed GPU gets the
    desired MIG mode (current and pending) and, MIG on, one MIG device per planned one, with the attributes of a
    MIG device of that profile already on a GPU of the same model, else those the plan gives for the profile
    (``attributes``: NVML's profile info of the GPU's model), else only its profile and name (MIG off on every
    GPU of the model: NVML answers profile info only once MIG is on); every other
    GPU and every other fact is left as read. Check mode uses it, so that the labels, the allocatable the device
    plugin role expects and the summary show the geometry the change would make; a real change reads the facts
    again instead.
    """
    facts = copy.deepcopy(facts or {})
    plans = dict((gpu.get("index"), gpu) for gpu in ((result or {}).get("plan") or {}).get("gpus") or [])
    known = {}
    for device in facts.get("devices") or []:
        for mig in (device.get("mig") or {}).get("devices") or []:
            known.setdefault((device.get("pci_device_id"), mig.get("profile")), mig)
    for device in facts.get("devices") or []:
        plan = plans.get(device.get("index"))
        if not plan or not plan.get("selected") or not plan.get("changed"):
            continue
        mode = 1 if plan["mode"]["desired"] else 0
        migs = []
        for profile in sorted(plan.get("devices") or {}) if mode else []:
            like = known.get((device.get("pci_device_id"), profile)) or (plan.get("attributes") or {}).get(profile) or {}
            entry = dict((key, copy.deepcopy(like[key])) for key in MIG_PROFILE_ATTRIBUTES if key in like)
            entry.update(name="%s MIG %s" % (device.get("name"), profile), profile=profile)
            migs.extend(copy.deepcopy(entry) for dummy in range(int(plan["devices"][profile])))
        device["mig"] = dict(device.get("mig") or {}, current=mode, pending=mode, devices=migs)
    return facts
