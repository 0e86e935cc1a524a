# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: k8s_nodes
author: kubegpu.nvidia maintainers (@kubegpu)
version_added: 1.1.0
short_description: The GPU nodes of a Kubernetes cluster as an inventory for kubegpu.nvidia.site
description:
  - Lists the cluster's nodes through the collection's own Kubernetes connection (the options below, with the
    C(K8S_AUTH_*) environment fallbacks the collection's modules read) and puts the GPU nodes, as
    O(gpu_selection) picks them, in group C(gpu_nodes), each named after its node, with C(ansible_host) set to the
    node's address of type O(address_type), C(kubegpu_node_name) to the node's name and C(kubegpu_node) to what
    the inventory read of the node (C(name), C(labels), C(taints), C(unschedulable), C(addresses) by type,
    C(capacity), C(allocatable), C(node_info)), for O(compose), O(groups) and O(keyed_groups).
  - Puts O(control_host) in group C(k8s_control), the host the collection's plays reach the API from.
  - The configuration file's name must end in C(k8s_nodes.yml) or C(k8s_nodes.yaml).
  - A node without an address of O(address_type) is left out with a warning naming it, or fails the inventory
    when O(strict) is true. Two selected nodes with one address fail the inventory. A selection that matches no
    node warns, naming the selection, and leaves C(gpu_nodes) empty.
  - "With O(cache) on, the nodes are read from the cache while it is younger than O(cache_timeout) (Ansible's
    inventory cache: C(--flush-cache) reads the cluster again). When the cluster is read and the read fails, the
    inventory fails with one line; with O(cache_fallback) the cached nodes are used instead, with a warning
    naming the time they were read and the failure."
extends_documentation_fragment:
  - constructed
  - inventory_cache
  - kubegpu.nvidia.k8s_auth
options:
  plugin:
    description: The name of this plugin; this file is its configuration.
    type: str
    required: true
    choices: [kubegpu.nvidia.k8s_nodes]
  gpu_selection:
    description:
      - Which nodes are GPU nodes.
      - V(gpu_labels) - the nodes with NFD's C(feature.node.kubernetes.io/pci-10de.present=true) (an NVIDIA PCI
        device) or this collection's C(nvidia.com/gpu.present=true) (written by C(kubegpu.nvidia.site) on the nodes
        where it found a GPU).
      - V(nfd) - NFD's label only. V(gpu_present) - the collection's label only.
      - V(label_selector) - the nodes the API selects with O(label_selector).
      - V(workers) - every node without a control-plane role label (C(node-role.kubernetes.io/control-plane),
        C(node-role.kubernetes.io/master)); the choice for a first run on a cluster without NFD, where no node has
        a GPU label yet (C(kubegpu.nvidia.site) reports the hosts without a GPU and skips them).
    type: str
    choices: [gpu_labels, nfd, gpu_present, label_selector, workers]
    default: gpu_labels
  label_selector:
    description:
      - A Kubernetes label selector (for example C(nvidia.com/gpu.present=true,pool in (a100,h100))), with
        O(gpu_selection=label_selector) only.
    type: str
  address_type:
    description:
      - The node address (C(status.addresses)) that becomes C(ansible_host).
    type: str
    choices: [InternalIP, ExternalIP, Hostname, InternalDNS, ExternalDNS]
    default: InternalIP
  control_host:
    description:
      - The host put in group C(k8s_control), from which the collection's plays reach the Kubernetes API.
      - V(localhost) gets C(ansible_connection=local) and the Python that runs Ansible as
        C(ansible_python_interpreter), unless O(control_host_vars) sets C(ansible_connection).
      - Empty leaves group C(k8s_control) to another inventory source.
    type: str
    default: localhost
  control_host_vars:
    description:
      - Variables of O(control_host), for example C(ansible_host) and C(ansible_user) of a bastion.
    type: dict
    default: {}
  connection_vars:
    description:
      - Whether O(control_host) gets the connection options given in this file as the C(kubegpu_*) variables
        (C(kubegpu_kubeconfig), C(kubegpu_context), C(kubegpu_host), ...), so that the plays talk to the cluster the
        inventory came from.
      - O(api_key) never becomes a variable (C(ansible-inventory --list) would show it); set C(kubegpu_api_key)
        from a vault.
    type: bool
    default: true
  cache_fallback:
    description:
      - When the cluster is read (no cached nodes younger than O(cache_timeout), or C(--flush-cache)) and the read
        fails, use the nodes still in the cache, with a warning naming when they were read and why the read failed.
      - Off, the read failure fails the inventory, saying that the cached nodes were not used.
      - Needs O(cache). A cache entry older than O(cache_timeout) is gone from the cache and cannot be used.
    type: bool
    default: false
  request_timeout:
    description:
      - Seconds to wait for the API server to accept a connection, and then for each part of its answer.
      - A request that runs out of time is retried at once, up to O(retries) times.
      - Can also be given with the E(K8S_AUTH_REQUEST_TIMEOUT) environment variable.
    type: float
    default: 30
  retries:
    description:
      - How many times one API request is retried after a 429 or 5xx answer, a dropped connection or no answer
        within O(request_timeout). A refused connection is not retried.
    type: int
    default: 2
"""

EXAMPLES = r"""
# inventory/k8s_nodes.yml: the GPU nodes of another cluster's GPU pool, reached on their ExternalIP, one group
# per GPU product, the nodes read at most every 10 minutes (the smallest file is the first line alone: the
# GPU-labelled nodes of the cluster of ~/.kube/config, reached on their InternalIP)
plugin: kubegpu.nvidia.k8s_nodes
kubeconfig: /etc/kubernetes/admin.conf
gpu_selection: label_selector
label_selector: cloud.google.com/gke-accelerator
address_type: ExternalIP
keyed_groups:
  - key: kubegpu_node.labels['nvidia.com/gpu.product']
    prefix: gpu
compose:
  ansible_user: "'ubuntu'"
cache: true
cache_plugin: ansible.builtin.jsonfile
cache_connection: ~/.cache/kubegpu-inventory
cache_timeout: 600
"""

import datetime
import os
import sys

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable
from ansible.utils.display import Display
from ansible.utils.vars import combine_vars, load_extra_vars

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError, KubegpuError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import (
    AUTH_ARG_SPEC, HAS_KUBERNETES, NodeAPI, get_api_client)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_connection import CONTROL_GROUP
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_inventory import (
    AUTH_OPTIONS, auth_params, check_selection, connection_vars, empty_message, node_record, plan_hosts, select,
    skipped_message)

display = Display()

GPU_GROUP = "gpu_nodes"
CACHE_FORMAT = 1


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):
    """The inventory plugin."""

    NAME = "kubegpu.nvidia.k8s_nodes"

    def verify_file(self, path):
        return super(InventoryModule, self).verify_file(path) and path.endswith(("k8s_nodes.yml", "k8s_nodes.yaml"))

    def parse(self, inventory, loader, path, cache=True):
        super(InventoryModule, self).parse(inventory, loader, path, cache=cache)
        self._read_config_data(path)
        try:
            check_selection(self.get_option("gpu_selection"), self.get_option("label_selector"))
            data = self._nodes(path, cache)
            self._populate(data)
        except KubegpuError as exc:
            raise AnsibleParserError("%s: %s" % (self.NAME, exc.msg))

    # ------------------------------------------------------------------------------------------ reading
    def _read_cluster(self):
        if not HAS_KUBERNETES:
            raise KubegpuError("needs the Python library kubernetes on the host that runs Ansible "
                               "(pip install kubernetes)", kind="dependency")
        options = dict((name, self.get_option(name)) for name in AUTH_OPTIONS)
        params = auth_params(options, os.environ, AUTH_ARG_SPEC)
        api = NodeAPI(get_api_client(params), retries=self.get_option("retries"),
                      request_timeout=params["request_timeout"])
        label_selector = self._listing()
        if label_selector:
            nodes = api.list_all("listing the nodes of label selector %s" % label_selector, "/api/v1/nodes",
                                 label_selector=label_selector)
        else:
            nodes = api.list_nodes()
        read_at = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        return {"format": CACHE_FORMAT, "read_at": read_at.isoformat().replace("+00:00", "Z"),
                "server": api.host, "label_selector": label_selector, "nodes": [node_record(node) for node in nodes]}

    def _listing(self):
        """The label selector the API lists the nodes with (None: every node)."""
        if self.get_option("gpu_selection") == "label_selector":
            return self.get_option("label_selector")
        return None

    def _nodes(self, path, cache):
        """The cluster's nodes: from the cache when it may be used and holds them, else read (and cached)."""
        use_cache = bool(self.get_option("cache"))
        key = self.get_cache_key(path)
        if use_cache and cache:
            cached = self._cached(key)
            if cached is not None:
                display.v("%s: the cached inventory from %s (--flush-cache reads the cluster)"
                          % (self.NAME, cached["read_at"]))
                return cached
        try:
            data = self._read_cluster()
        except KubegpuError as exc:
            cached = self._cached(key) if use_cache else None
            if cached is None:
                raise
            if self.get_option("cache_fallback"):
                display.warning("%s: using the cached inventory from %s because the refresh failed: %s"
                                % (self.NAME, cached["read_at"], exc.msg))
                return cached
            raise KubegpuError("%s (the cached inventory from %s is not used: cache_fallback: true uses it)"
                               % (exc.msg, cached["read_at"]), kind=exc.kind)
        if use_cache:
            self._cache[key] = data
        return data

    def _cached(self, key):
        try:
            data = self._cache.get(key)
        except KeyError:
            return None
        if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
            return None  # written by another version, or by another plugin under the same key
        if data.get("label_selector") != self._listing():
            return None  # another listing: the configuration's selection changed since
        return data

    # ------------------------------------------------------------------------------------------ inventory
    def _populate(self, data):
        selection = self.get_option("gpu_selection")
        label_selector = self.get_option("label_selector")
        address_type = self.get_option("address_type")
        strict = self.get_option("strict")
        records = data["nodes"]
        selected = select(records, selection)
        hosts, skipped = plan_hosts(selected, address_type)
        if skipped:
            message = skipped_message(skipped, address_type, selected, strict=strict)
            if strict:
                raise InputError(message)
            display.warning("%s: %s" % (self.NAME, message))
        if not selected:
            display.warning("%s: %s" % (self.NAME, empty_message(selection, label_selector, len(records))))

        self.inventory.add_group(GPU_GROUP)
        extra_vars = load_extra_vars(self.loader) if self.get_option("use_extra_vars") else {}
        for record, address in hosts:
            name = self.inventory.add_host(record["name"], group=GPU_GROUP)
            self.inventory.set_variable(name, "ansible_host", address)
            self.inventory.set_variable(name, "kubegpu_node_name", record["name"])
            self.inventory.set_variable(name, "kubegpu_node", record)
            variables = combine_vars(self.inventory.get_host(name).get_vars(), extra_vars)
            self._set_composite_vars(self.get_option("compose"), variables, name, strict=strict)
            variables = combine_vars(self.inventory.get_host(name).get_vars(), extra_vars)
            self._add_host_to_composed_groups(self.get_option("groups"), variables, name, strict=strict)
            self._add_host_to_keyed_groups(self.get_option("keyed_groups"), variables, name, strict=strict)
        self._add_control_host()

    def _add_control_host(self):
        host = self.get_option("control_host")
        if not host:
            return
        self.inventory.add_group(CONTROL_GROUP)
        name = self.inventory.add_host(host, group=CONTROL_GROUP)
        given = dict(self.get_option("control_host_vars") or {})
        values = {}
        if host == "localhost" and "ansible_connection" not in given:
            values["ansible_connection"] = "local"
            values["ansible_python_interpreter"] = sys.executable  # the Python running Ansible: this one
        if self.get_option("connection_vars"):
            values.update(connection_vars(dict((option, self.get_option(option)) for option in AUTH_OPTIONS)))
        values.update(given)
        for var, value in values.items():
            self.inventory.set_variable(name, var, value)
