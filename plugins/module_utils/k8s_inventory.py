# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The decisions of the ``kubegpu.nvidia.k8s_nodes`` inventory plugin, apart from Ansible's inventory objects.

``node_record(node)`` keeps what the inventory needs of a Node (name, labels, taints, addresses by type,
capacity, allocatable, nodeInfo); ``select(records, selection)`` picks the GPU nodes; ``plan_hosts(...)`` gives
each selected node its address (``ansible_host``), the nodes skipped for want of one, and refuses two nodes with
one address; ``auth_params(options, environ)`` turns the plugin's connection options, with the same
``K8S_AUTH_*`` environment fallbacks the modules read, into the parameters of ``k8s_client.get_api_client``.
Every refusal is an ``InputError`` with one line.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

# NFD's PCI vendor feature for NVIDIA (vendor id 10de), as NFD labels a node with an NVIDIA PCI device; the GPU
# Operator's NFD configuration and the device plugin's chart select GPU nodes by it
NFD_LABEL = "feature.node.kubernetes.io/pci-10de.present"
# set by this collection's k8s_gpu_label on every node where NVML found a GPU (gfd_labels.py), as GFD does
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
# kubeadm's role labels of a control-plane node (the current one and the one before Kubernetes 1.24)
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
# NodeAddressType values (k8s.io/api/core/v1/types.go)
ADDRESS_TYPES = ("InternalIP", "ExternalIP", "Hostname", "InternalDNS", "ExternalDNS")
SELECTIONS = ("gpu_labels", "nfd", "gpu_present", "label_selector", "workers")

# plugin option -> the K8S_AUTH_* variables read when it is not given, in order (k8s_client.AUTH_ARG_SPEC)
AUTH_OPTIONS = ("kubeconfig", "context", "host", "api_key", "validate_certs", "ca_cert", "client_cert", "client_key",
                "proxy", "no_proxy", "proxy_headers", "impersonate_user", "impersonate_groups", "request_timeout")


def _env_names(spec):
    fallback = spec.get("fallback")
    return list(fallback[1]) if fallback else []


def _convert(name, value, kind):
    if kind == "bool":
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on", "y", "t"):
            return True
        if text in ("0", "false", "no", "off", "n", "f", ""):
            return False
        raise InputError("%s must be a boolean, not %r" % (name, value))
    if kind == "float":
        try:
            return float(value)
        except (TypeError, ValueError):
            raise InputError("%s must be a number of seconds, not %r" % (name, value))
    if kind == "list":
        return [part.strip() for part in str(value).split(",") if part.strip()]
    return value


def auth_params(options, environ, arg_spec):
    """The ``get_api_client`` parameters: each option given, else its first ``K8S_AUTH_*`` variable that is set.

    ``arg_spec``: ``k8s_client.AUTH_ARG_SPEC`` (its fallbacks and types); ``options``: the plugin's options.
    """
    params = {}
    for option in AUTH_OPTIONS:
        spec = arg_spec[option]
        value = options.get(option)
        if value is None:
            for name in _env_names(spec):
                if environ.get(name) not in (None, ""):
                    value = _convert(name, environ[name], spec.get("type"))
                    break
        if value is None:
            value = spec.get("default")
        params[option] = value
    return params


def connection_vars(options):
    """The ``kubegpu_*`` variables of the control host for the connection options given in the configuration.

    The token (``api_key``) is never one of them: ``ansible-inventory --list`` would print it.
    """
    out = {}
    for option in ("kubeconfig", "context", "host", "validate_certs", "ca_cert", "client_cert", "client_key",
                   "proxy", "no_proxy", "impersonate_user", "impersonate_groups"):
        value = options.get(option)
        if value is not None and value != "" and value != []:
            out["kubegpu_" + option] = value
    return out


def node_record(node):
    """What the inventory keeps of a Node (an API dict): its name, labels, taints, addresses, resources, nodeInfo."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    addresses = {}
    for entry in status.get("addresses") or []:
        kind, address = entry.get("type"), entry.get("address")
        if kind and address and kind not in addresses:
            addresses[kind] = address  # the first of a type, as the kubelet lists the preferred one first
    return {
        "name": meta.get("name"),
        "labels": dict(meta.get("labels") or {}),
        "taints": list(spec.get("taints") or []),
        "unschedulable": bool(spec.get("unschedulable")),
        "addresses": addresses,
        "capacity": dict(status.get("capacity") or {}),
        "allocatable": dict(status.get("allocatable") or {}),
        "node_info": dict(status.get("nodeInfo") or {}),
    }


def is_control_plane(record):
    labels = record.get("labels") or {}
    return any(key in labels for key in CONTROL_PLANE_LABELS)


def _label_true(record, key):
    return (record.get("labels") or {}).get(key) == "true"


def check_selection(selection, label_selector):
    """Refuse a selection that cannot work: ``label_selector`` goes with ``selection: label_selector`` only."""
    if selection not in SELECTIONS:
        raise InputError("gpu_selection must be one of %s, not %r" % (", ".join(SELECTIONS), selection))
    if selection == "label_selector" and not label_selector:
        raise InputError("gpu_selection: label_selector needs the option label_selector (for example "
                         "nvidia.com/gpu.present=true,pool=gpu)")
    if selection != "label_selector" and label_selector:
        raise InputError("label_selector %r is used only with gpu_selection: label_selector (gpu_selection is %s)"
                         % (label_selector, selection))


def describe_selection(selection, label_selector=None):
    """The selection in words, for messages."""
    return {
        "gpu_labels": "%s=true or %s=true" % (NFD_LABEL, GPU_PRESENT_LABEL),
        "nfd": "%s=true" % NFD_LABEL,
        "gpu_present": "%s=true" % GPU_PRESENT_LABEL,
        "label_selector": "label selector %s" % label_selector,
        "workers": "every node without a control-plane role label (%s)" % ", ".join(CONTROL_PLANE_LABELS),
    }[selection]


def select(records, selection):
    """The records of the GPU nodes under ``selection`` (``label_selector``: the API has already selected them)."""
    if selection == "gpu_labels":
        return [r for r in records if _label_true(r, NFD_LABEL) or _label_true(r, GPU_PRESENT_LABEL)]
    if selection == "nfd":
        return [r for r in records if _label_true(r, NFD_LABEL)]
    if selection == "gpu_present":
        return [r for r in records if _label_true(r, GPU_PRESENT_LABEL)]
    if selection == "workers":
        return [r for r in records if not is_control_plane(r)]
    return list(records)


def plan_hosts(records, address_type):
    """``(hosts, skipped)`` for the selected nodes: ``hosts`` a list of ``(record, address)`` by node name,
    ``skipped`` the names of the nodes without an address of ``address_type``.

    Two nodes with one address would make two inventory hosts of one machine (and one node's labels
    written from the other's GPUs): refused with an ``InputError`` naming both.
    """
    if address_type not in ADDRESS_TYPES:
        raise InputError("address_type must be one of %s, not %r" % (", ".join(ADDRESS_TYPES), address_type))
    hosts, skipped, owners = [], [], {}
    for record in sorted(records, key=lambda r: r["name"]):
        address = (record.get("addresses") or {}).get(address_type)
        if not address:
            skipped.append(record["name"])
            continue
        if address in owners:
            raise InputError("nodes %s and %s both have the %s %s: one address cannot be two inventory hosts "
                             "(choose another address_type, or fix the nodes' addresses)"
                             % (owners[address], record["name"], address_type, address))
        owners[address] = record["name"]
        hosts.append((record, address))
    return hosts, skipped


def skipped_message(skipped, address_type, records, strict=False):
    """The one line for the selected nodes that have no address of ``address_type`` (``strict``: as a failure)."""
    kinds = sorted(set(kind for r in records if r["name"] in skipped for kind in (r.get("addresses") or {})))
    what = "node%s %s %s no %s address (%s)" % (
        "s" if len(skipped) > 1 else "", ", ".join(skipped), "have" if len(skipped) > 1 else "has", address_type,
        "addresses: %s" % ", ".join(kinds) if kinds else "no addresses at all")
    if strict:
        return "%s and strict is true (address_type chooses another type)" % what
    return "%s: left out of gpu_nodes (address_type chooses another type; strict: true fails instead)" % what


def empty_message(selection, label_selector, listed):
    """The warning when no node matches the selection."""
    if selection == "label_selector":
        return "no node matches the label selector %s: gpu_nodes is empty" % label_selector
    return ("no node matches the GPU selection (%s) among the cluster's %d node%s: gpu_nodes is empty"
            % (describe_selection(selection, label_selector), listed, "" if listed == 1 else "s"))
