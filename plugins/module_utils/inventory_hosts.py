# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the inventory says about a host's Kubernetes node: its name, and the names and addresses to find it by.

One host variable names a host's Kubernetes node everywhere in the collection: ``kubegpu_node_name``
(set in the inventory when the node's name is not the host's, and set as a fact once
``kubegpu.nvidia.k8s_gpu_label`` matched the host to its node). The names of earlier releases are read
for one more release, with a deprecation warning. ``node_labels.resolve_node`` does the matching itself.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

NODE_NAME_VAR = "kubegpu_node_name"
# the node-name variables of earlier releases, in the order they are read
DEPRECATED_NODE_NAME_VARS = ("k8s_gpu_node_name", "k8s_device_plugin_node_name", "k8s_node_name")


def node_name(host, host_vars, warn=None):
    """The name ``host``'s Kubernetes node is looked up by: ``kubegpu_node_name``, a deprecated name, else ``host``.

    ``warn(message)`` is called once per deprecated variable found in use.
    """
    name = host_vars.get(NODE_NAME_VAR)
    if name:
        return str(name)
    for variable in DEPRECATED_NODE_NAME_VARS:
        name = host_vars.get(variable)
        if name:
            if warn:
                warn("the host variable %s is deprecated: set %s instead (host %s)" % (variable, NODE_NAME_VAR, host))
            return str(name)
    return host


def host_aliases(host, host_vars, facts):
    """The names and addresses an inventory host is known by (to find its node by hostname or InternalIP).

    ``facts``: the host's ``ansible_facts``. Loopback addresses are left out.
    """
    default_ipv4 = facts.get("default_ipv4") or {}
    candidates = [host, host_vars.get("ansible_host") or "", facts.get("hostname") or "", facts.get("fqdn") or "",
                  facts.get("nodename") or "", default_ipv4.get("address") or ""]
    candidates += list(facts.get("all_ipv4_addresses") or [])
    aliases = []
    for value in candidates:
        value = str(value)
        if value and not value.startswith("127.") and value not in aliases:
            aliases.append(value)
    return aliases
