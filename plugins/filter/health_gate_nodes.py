# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter kubegpu.nvidia.health_gate_nodes: the GPU hosts as the health gate's nodes, each with its health."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The filters import the module_utils they use when called, not here (docs/development.md, Conventions).

from ansible.errors import AnsibleFilterError


def health_gate_nodes(hosts, hostvars):
    """``k8s_gpu_health_gate``'s ``nodes`` for inventory ``hosts`` (module_utils/gpu_health_gate.py gate_nodes)."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_health_gate import gate_nodes

    if isinstance(hosts, str):
        hosts = [hosts]
    if not isinstance(hosts, list):
        raise AnsibleFilterError("health_gate_nodes expects a list of inventory hosts, got %s" % type(hosts).__name__)
    return gate_nodes(hosts, hostvars)


class FilterModule:
    """The collection's filters."""

    def filters(self):
        return {"health_gate_nodes": health_gate_nodes}
