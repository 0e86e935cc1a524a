# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the device plugin configuration and of what each GPU node must show under it.

``device_plugin_config`` / ``device_plugin_config_error`` resolve the role variables once
(module_utils/device_plugin_config.py); ``device_plugin_config_documents`` gives the ConfigMap's config
files; ``gpu_node_capacity`` compares each GPU host's node with its model (module_utils/node_model.py);
``device_plugin_node_labels`` gives the ``nvidia.com/device-plugin.config`` patches of the nodes whose label
differs; ``device_plugin_input_problems`` / ``device_plugin_nfd_problem`` say what stops the role before it
applies anything and ``device_plugin_health_checks`` the plugin's health check environment
(module_utils/device_plugin_checks.py).  Hosts are matched to nodes by
node_labels.resolve_node, the match k8s_gpu_label uses.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The filters import the module_utils they use when called, not here (docs/development.md, Conventions).

from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.nvidia.plugins.filter.gpu_node_requests import deprecated

INPUT_KEYS = ("default_config", "defaults", "configs", "product_configs", "node_configs")


def _resolve(settings):
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import device_plugin_config as dpc
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

    if not isinstance(settings, dict):
        raise InputError("the device plugin settings must be a dict with %s, got %r" % (", ".join(INPUT_KEYS), settings))
    unknown = sorted(set(settings) - set(INPUT_KEYS))
    if unknown:
        raise InputError("the device plugin settings have unknown keys: %s" % ", ".join(unknown))
    return dpc.resolve(settings.get("default_config") or "default", settings.get("configs"),
                       settings.get("product_configs"), settings.get("node_configs"), settings.get("defaults"))


def device_plugin_config(settings):
    """The resolved device plugin configuration of ``settings`` ({default_config, defaults, configs,
    product_configs, node_configs}); AnsibleFilterError with the one-line reason when they are not valid."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

    try:
        return _resolve(settings)
    except InputError as exc:
        raise AnsibleFilterError(exc.msg)


def device_plugin_config_error(settings):
    """Why ``settings`` are not a valid device plugin configuration, in one line; "" when they are."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

    try:
        _resolve(settings)
    except InputError as exc:
        return exc.msg
    return ""


def _checked(resolved):
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import device_plugin_config as dpc
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

    try:
        return dpc.check(resolved)
    except InputError as exc:
        raise AnsibleFilterError(exc.msg)


def device_plugin_config_documents(resolved):
    """``{config name: device plugin config file}`` of a resolved configuration (the ConfigMap's data)."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import device_plugin_config as dpc

    return dpc.config_documents(_checked(resolved))


def _node_object(node):
    """A Node API object, from one (k8s_info) or from a k8s_gpu_label ``return_nodes`` entry."""
    if "metadata" in node:
        return node
    return {"metadata": {"name": node.get("name"), "labels": node.get("labels") or {}},
            "status": {"allocatable": node.get("allocatable") or {}, "addresses": node.get("addresses") or []}}


def _gpu_facts(host_vars):
    facts = host_vars.get("ansible_facts") or {}
    return facts, facts.get("nvidia_gpu") or host_vars.get("nvidia_gpu") or {}


def _has_gpu(gpu):
    if gpu.get("present") is not None:
        return bool(gpu["present"])
    return bool(gpu.get("count"))


def _match(nodes, hosts, hostvars):
    """[(host, facts, node or None, error)] of the GPU hosts, each matched as k8s_gpu_label matches it."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.inventory_hosts import host_aliases, node_name
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.node_labels import resolve_node

    by_name = dict((node["metadata"]["name"], node) for node in nodes)
    out = []
    for host in hosts or []:
        try:
            host_vars = hostvars[host]
        except KeyError:
            raise AnsibleFilterError("%s is not a host of the inventory" % host)
        facts, gpu = _gpu_facts(host_vars)
        if not _has_gpu(gpu):
            continue
        name = node_name(host, host_vars, deprecated)
        node, error = resolve_node(by_name, nodes, name, host_aliases(host, host_vars, facts))
        out.append((host, gpu, node, error))
    return out


def _count(value):
    try:
        return int(str(value))
    except ValueError:
        return 0


def _gpu_resources(allocatable):
    """The nvidia.com/gpu[.*] and nvidia.com/mig-* resources of an allocatable map, as ints, zeros left out."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.gfd_labels import GPU_RESOURCE, MIG_RESOURCE_PREFIX

    out = {}
    for name, value in (allocatable or {}).items():
        if name == GPU_RESOURCE or name.startswith(GPU_RESOURCE + ".") or name.startswith(MIG_RESOURCE_PREFIX):
            number = _count(value)
            if number:
                out[name] = number
    return dict(sorted(out.items()))


def resources_text(resources):
    """``4`` for nvidia.com/gpu alone, else ``name=count, ...`` (``0`` for none, ``unknown`` for None)."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.gfd_labels import GPU_RESOURCE

    if resources is None:
        return "unknown"
    if not resources:
        return "0"
    if list(resources) == [GPU_RESOURCE]:
        return str(resources[GPU_RESOURCE])
    return ", ".join("%s=%d" % item for item in sorted(resources.items()))


def _product_of_label(labels):
    product = (labels or {}).get("nvidia.com/gpu.product") or ""
    return product[:-len("-SHARED")] if product.endswith("-SHARED") else product or None


def _row(host, node_name, node, config, gpus, expected, problem, settings):
    allocatable = _gpu_resources(((node or {}).get("status") or {}).get("allocatable"))
    ok = node is not None and problem is None and expected is not None and allocatable == expected
    row = {"host": host, "node": node_name, "found": node is not None, "config": config, "gpus": gpus,
           "expected": expected, "allocatable": allocatable, "ok": ok,
           "expected_text": resources_text(expected), "allocatable_text": resources_text(allocatable)}
    if ok:
        row["reason"] = ""
    elif node is None:
        row["reason"] = "%s (node not found)" % node_name
    elif problem is not None and expected == {}:
        row["reason"] = "%s (allocatable %s; the device plugin cannot start under config %s: %s)" % (
            node_name, row["allocatable_text"], config, problem)
    elif expected is None:
        row["reason"] = ("%s (allocatable %s; its GPUs run MIG with strategy %s under config %s, and %s: give "
                         "k8s_device_plugin_node_gpus)" % (node_name, row["allocatable_text"], settings["mig_strategy"],
                                                           config, problem))
    else:
        row["reason"] = "%s (allocatable %s, expected %s under config %s)" % (
            node_name, row["allocatable_text"], row["expected_text"], config)
    return row


def gpu_node_capacity(nodes, hosts, hostvars, device_plugin, node_gpus=None):
    """One row per GPU host (or per ``node_gpus`` entry): the allocatable its node must show under the model.

    Rows: ``host``, ``node`` ('' when no node matches), ``found``, ``config``, ``gpus``, ``expected`` and
    ``allocatable`` ({resource name: count}; expected None when the facts cannot tell), ``ok``, ``reason``
    (one line naming the node, for a row that is not ok) and the ``expected_text`` / ``allocatable_text``
    a summary prints. A host whose ``kubegpu_gpu_allocation`` is ``dra`` must advertise no device plugin
    resource (its GPUs are published in a ResourceSlice, which the nvidia_dra_driver role checks).
    """
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import device_plugin_config as dpc
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.gfd_labels import GPU_RESOURCE
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_allocation import host_allocation
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.node_model import SHARED_SUFFIX, NodeModel

    resolved = _checked(device_plugin)
    model = NodeModel(resolved)
    nodes = [_node_object(node) for node in nodes or []]
    rows = []
    if node_gpus:
        by_name = dict((node["metadata"]["name"], node) for node in nodes)
        for name in sorted(node_gpus):
            node = by_name.get(name)
            labels = ((node or {}).get("metadata") or {}).get("labels") or {}
            config = dpc.select_config(resolved, name, _product_of_label(labels))
            settings = resolved["configs"][config]
            count = _count(node_gpus[name])
            replicas = model.views[config]["replicas"].get(GPU_RESOURCE, 1)
            resource = GPU_RESOURCE + SHARED_SUFFIX if replicas > 1 and settings["rename_by_default"] else GPU_RESOURCE
            expected = {resource: count * replicas} if count else {}
            rows.append(_row(name, name, node, config, count, expected, None, settings))
        return rows
    for host, gpu, node, error in _match(nodes, hosts, hostvars):
        if node is None:
            rows.append({"host": host, "node": "", "found": False, "config": None, "gpus": gpu.get("count"),
                         "expected": None, "allocatable": {}, "ok": False, "reason": error,
                         "expected_text": "unknown", "allocatable_text": "0"})
            continue
        name = node["metadata"]["name"]
        try:
            want = model.node(gpu, name, _product_of_label(node["metadata"].get("labels")),
                              host_allocation(host, hostvars[host]))
        except InputError as exc:
            raise AnsibleFilterError(exc.msg)
        gpus = gpu.get("count")
        if gpus is None:
            gpus = len(gpu.get("devices") or [])
        rows.append(_row(host, name, node, want["config"], gpus, want["allocatable"], want["problem"],
                         resolved["configs"][want["config"]]))
    return rows


def device_plugin_hosts_error(hosts, hostvars, device_plugin):
    """Why a GPU host's config cannot be given to its GPUs (MPS on MIG-enabled GPUs), in one line; "" when none.

    The node a host's config is looked up by is named like the host (``kubegpu_node_name``, else the
    inventory name): what the node list would tell is not read yet.
    """
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.inventory_hosts import node_name
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.node_model import NodeModel

    model = NodeModel(_checked(device_plugin))
    for host in hosts or []:
        host_vars = hostvars[host] if host in hostvars else {}
        _facts, gpu = _gpu_facts(host_vars)
        if not _has_gpu(gpu):
            continue
        name = node_name(host, host_vars, deprecated)
        try:
            model.desired_labels(gpu, name)
        except InputError as exc:
            return exc.msg
    return ""


def device_plugin_input_problems(image_errors, uses_mps, mps_root, gfd_enabled, gfd_run_as_user):
    """The reasons the role variables cannot make valid manifests (module_utils/device_plugin_checks.py)."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import device_plugin_checks

    return device_plugin_checks.input_problems(image_errors, uses_mps, mps_root, gfd_enabled, gfd_run_as_user)


def device_plugin_health_checks(enabled, ignored_xids, forced_xids):
    """``{env, problems}``: the device plugin's health check environment, or why the variables cannot make it
    (module_utils/device_plugin_checks.py health_checks)."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import device_plugin_checks

    return device_plugin_checks.health_checks(enabled, ignored_xids, forced_xids)


def device_plugin_nfd_problem(crd_info, gfd_enabled, nfd_deploy):
    """Why GPU Feature Discovery would have no Node Feature Discovery to publish to, in one line; "" when it has.

    ``crd_info``: the kubernetes.core.k8s_info result of the NodeFeature CustomResourceDefinition (empty or
    undefined when it was not looked up: then it counts as absent).
    """
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import device_plugin_checks

    resources = (crd_info or {}).get("resources") or []
    return device_plugin_checks.nfd_problem(gfd_enabled, nfd_deploy, resources[0] if resources else None)


def device_plugin_node_labels(nodes, hosts, hostvars, device_plugin):
    """Node patches setting ``nvidia.com/device-plugin.config`` where a node's label differs from its config.

    A GPU host's node gets the config of its model (node config, product of its GPUs, default; the product its
    label names when the facts list no devices); another node its node config, else the config of the product
    its ``nvidia.com/gpu.product`` label names (without ``-SHARED``); other nodes are left alone.
    """
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.gfd_labels import CONFIG_LABEL
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.node_model import NodeModel

    resolved = _checked(device_plugin)
    model = NodeModel(resolved)
    nodes = [_node_object(node) for node in nodes or []]
    matched = dict((node["metadata"]["name"], gpu) for _host, gpu, node, _error in _match(nodes, hosts, hostvars)
                   if node is not None)
    patches = []
    for node in nodes:
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        if name in matched:
            want = model.config(matched[name], name, _product_of_label(labels))
        elif name in resolved["node_configs"]:
            want = resolved["node_configs"][name]
        else:
            want = resolved["product_configs"].get(_product_of_label(labels))
        if want and labels.get(CONFIG_LABEL) != want:
            patches.append({"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": name, "labels": {CONFIG_LABEL: want}}})
    return patches


class FilterModule:
    """The collection's filters."""

    def filters(self):
        return {
            "device_plugin_config": device_plugin_config,
            "device_plugin_config_error": device_plugin_config_error,
            "device_plugin_config_documents": device_plugin_config_documents,
            "gpu_node_capacity": gpu_node_capacity,
            "device_plugin_hosts_error": device_plugin_hosts_error,
            "device_plugin_node_labels": device_plugin_node_labels,
            "device_plugin_input_problems": device_plugin_input_problems,
            "device_plugin_nfd_problem": device_plugin_nfd_problem,
            "device_plugin_health_checks": device_plugin_health_checks,
        }
