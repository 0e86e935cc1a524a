# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters kubegpu.nvidia.gpu_node_requests (the O(nodes) argument of k8s_gpu_label for inventory hosts) and
kubegpu.nvidia.node_name (the name a host's Kubernetes node is looked up by)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The filters import the module_utils they use when called, not here (docs/development.md, Conventions).

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

display = Display()


def deprecated(message):
    """A deprecation warning of the collection (Ansible shows each one once)."""
    display.deprecated(message, version="2.0.0", collection_name="kubegpu.nvidia")


# The per-device facts the labels are derived from (UUIDs, PCI addresses and the like would only
# make the module's arguments, and Ansible's handling of them, larger for a whole cluster).
DEVICE_KEYS = ("name", "product", "memory_mib", "compute_capability", "pci_class", "mig")
# of each MIG device: what GFD's MIG labels and the device plugin's MIG resources read (not its UUID or slot)
MIG_ATTRIBUTE_KEYS = ("multiprocessors", "slices", "engines")
GPU_KEYS = ("source", "driver_version", "cuda_driver_version", "machine")


def _label_mig(mig):
    """The MIG mode and, of each MIG device, what the labels read: its profile, memory and attributes."""
    if not isinstance(mig, dict) or mig.get("devices") is None:
        return mig
    return dict(mig, devices=[_label_mig_device(one) for one in mig["devices"]])


def _label_mig_device(mig):
    entry = {"profile": mig.get("profile"), "memory_mib": mig.get("memory_mib")}
    entry.update((key, mig[key]) for key in MIG_ATTRIBUTE_KEYS if mig.get(key) is not None)
    return entry


def label_facts(gpu):
    """The part of ``nvidia_gpu`` facts the labels come from.

    Identical neighbouring devices (same model, memory, compute capability, PCI class, MIG mode and MIG
    devices: the usual node of 4 or 8 GPUs) become one entry with ``count``, so the arguments for a
    whole cluster stay small; k8s_gpu_label counts such an entry as that many devices.
    """
    devices = []
    for device in gpu.get("devices") or []:
        entry = dict((key, device.get(key)) for key in DEVICE_KEYS)
        entry["mig"] = _label_mig(entry["mig"])
        if devices and dict((k, v) for k, v in devices[-1].items() if k != "count") == entry:
            devices[-1]["count"] = devices[-1].get("count", 1) + 1
        else:
            devices.append(entry)
    summary = dict((key, gpu.get(key)) for key in GPU_KEYS)
    summary.update(present=gpu["present"], devices=devices)
    return summary


def gpu_node_requests(hosts, hostvars):
    """One ``{name, host, aliases, facts}`` per host of ``hosts`` whose ``nvidia_gpu`` facts show a GPU.

    ``name`` is the host variable ``kubegpu_node_name`` (``inventory_hosts.node_name``), else the inventory
    name; ``host`` the inventory name; ``aliases`` are the names and addresses the host is known by (to find
    its node by hostname or InternalIP); ``facts`` is the part of its ``nvidia_gpu`` facts the labels come
    from (``label_facts``). A host whose ``kubegpu_gpu_allocation`` is ``dra`` also gets ``labels``
    ``{nvidia.com/dra-kubelet-plugin: "true"}`` (module_utils/gpu_allocation.py); on the others that label is
    stale and k8s_gpu_label's ``remove_stale`` removes it.
    """
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_allocation import DRA, host_allocation, node_labels
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.inventory_hosts import host_aliases, node_name

    if isinstance(hosts, str):
        hosts = [hosts]
    requests = []
    for host in hosts or []:
        try:
            host_vars = hostvars[host]
        except KeyError:
            raise AnsibleFilterError("gpu_node_requests: %s is not a host of the inventory" % host)
        facts = host_vars.get("ansible_facts") or {}
        gpu = facts.get("nvidia_gpu") or {}
        if not gpu.get("present"):
            continue
        try:
            allocation = host_allocation(host, host_vars)
        except InputError as exc:
            raise AnsibleFilterError("gpu_node_requests: %s" % exc)
        request = {"name": node_name(host, host_vars, deprecated), "host": host,
                   "aliases": host_aliases(host, host_vars, facts), "facts": label_facts(gpu)}
        if allocation == DRA:
            request["labels"] = node_labels(allocation)
        requests.append(request)
    return requests


def kubernetes_node_name(host, hostvars):
    """The name ``host``'s Kubernetes node is looked up by (``inventory_hosts.node_name``)."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.inventory_hosts import node_name

    try:
        host_vars = hostvars[host]
    except KeyError:
        raise AnsibleFilterError("node_name: %s is not a host of the inventory" % host)
    return node_name(host, host_vars, deprecated)


class FilterModule:
    """The collection's filters."""

    def filters(self):
        return {"gpu_node_requests": gpu_node_requests, "node_name": kubernetes_node_name}
