#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: k8s_gpu_label
short_description: Label and taint Kubernetes GPU nodes
version_added: 1.0.0
description:
  - Sets the labels and taints of one Kubernetes node, or of many nodes in one call.
  - Labels come from O(labels) and from the C(nvidia_gpu) facts gathered by M(kubegpu.nvidia.nvidia_gpu_facts)
    (O(facts)); from the facts, the labels GPU Feature Discovery sets (C(nvidia.com/gpu.product),
    C(nvidia.com/gpu.count), C(nvidia.com/gpu.memory), ...) plus C(accelerator=nvidia-<model>) for C(nodeSelector).
  - Lists the nodes once (in pages of 500), works out locally what differs and writes only the nodes that differ,
    with one strategic-merge patch per node, O(concurrency) at a time. A re-run with nothing to change makes
    one request.
  - C(spec.taints) is an atomic list, so a taint change writes the node's whole taint list (taints set by others
    are kept) together with the node's C(resourceVersion); when the node changed in between, the API answers
    409 Conflict and the module reads that node again and retries.
  - Answers 429 (honouring C(Retry-After)) and 5xx are retried with backoff, O(retries) times per request.
  - A host is matched to its Kubernetes node by node name, else by the node's C(kubernetes.io/hostname) label or
    its Hostname, InternalIP or InternalDNS address, trying the host's name and its O(nodes[].aliases).
    When any host matches no node, the module fails naming it before writing anything.
author:
  - kubegpu.nvidia maintainers (@kubegpu)
extends_documentation_fragment:
  - kubegpu.nvidia.k8s_auth
  - kubegpu.nvidia.k8s_auth.retries
attributes:
  check_mode:
    support: full
    description: Reads the nodes, writes nothing, and reports what would change.
  diff_mode:
    support: full
    description: Shows, per changed node, the labels and taints before and after.
  idempotent:
    support: full
    description: A second run with the same options changes nothing and makes a single LIST request.
options:
  node:
    description:
      - Name of one node (or of a host whose node is found as described above).
      - Mutually exclusive with O(nodes).
    type: str
  nodes:
    description:
      - Several nodes in one call.
      - O(labels), O(facts) and O(taints) apply to every item; an item's own C(labels) are added on top
        (and win), its own C(facts) and C(taints) replace the top-level ones.
    type: list
    elements: dict
    suboptions:
      name:
        description: Node name, or the inventory name of the host.
        type: str
        required: true
      host:
        description:
          - The inventory host this item stands for, as RV(hosts) names it.
          - Defaults to O(nodes[].name).
        type: str
      aliases:
        description: Other names and addresses of the host (hostname, FQDN, IP addresses) to match a node by.
        type: list
        elements: str
        default: []
      labels:
        description: Labels for this node.
        type: dict
      facts:
        description: C(nvidia_gpu) facts of this node.
        type: dict
      taints:
        description: Taints for this node, as O(taints).
        type: list
        elements: raw
  labels:
    description:
      - Labels to set (O(state=present)) or remove (O(state=absent); values are then ignored).
      - Booleans and numbers are written as the strings Kubernetes expects.
    type: dict
    default: {}
  facts:
    description:
      - The C(nvidia_gpu) facts of the node (C(ansible_facts.nvidia_gpu)); the labels GPU Feature Discovery would
        set are derived from them, plus C(accelerator=nvidia-<model>).
      - A dict holding an C(nvidia_gpu) key (all of a host's C(ansible_facts)) is accepted too.
      - A device entry with C(count) stands for that many identical devices (the filter
        P(kubegpu.nvidia.gpu_node_requests#filter) merges identical neighbouring devices that way).
    type: dict
  device_plugin:
    description:
      - The cluster's NVIDIA device plugin configuration, as the C(kubegpu.nvidia.k8s_device_plugin) role resolves
        it (its C(settings) entry point sets it as the fact C(k8s_device_plugin_resolved)), so that each node's
        labels are those GPU Feature Discovery v0.20 publishes under the config the node gets (sharing, replicas,
        C(-SHARED), C(renameByDefault), MIG strategy) and the node carries C(nvidia.com/device-plugin.config)
        naming that config.
      - A node's config is its O(device_plugin.node_configs) entry (by Kubernetes node name), else the
        O(device_plugin.product_configs) entry of its first GPU's product (C(Tesla-T4); without C(-SHARED) or
        MIG suffix), else O(device_plugin.default_config).
      - Checked as the device plugin parses its configs. A config name no config defines, sharing replicas
        below 2, MPS with O(device_plugin.configs) C(mig_strategy=mixed), or MPS for a node with MIG-enabled
        GPUs fail the module with one message before any node is written.
      - Without it, the labels are those of the device plugin's defaults (no sharing, MIG strategy C(none))
        and C(nvidia.com/device-plugin.config) is left alone.
    type: dict
    suboptions:
      default_config:
        description: Name of the config of nodes that no other entry picks.
        type: str
        default: default
      configs:
        description:
          - C({name => settings}); settings use the keys C(mig_strategy), C(sharing_strategy), C(replicas),
            C(sharing_resources), C(rename_by_default), C(fail_requests_greater_than_one), C(fail_on_init_error),
            C(pass_device_specs), C(device_list_strategy), C(device_id_strategy) (see the
            C(kubegpu.nvidia.k8s_device_plugin) role); a key left out takes the device plugin's default.
        type: dict
        default: {}
      product_configs:
        description: C({GPU product => config name}).
        type: dict
        default: {}
      node_configs:
        description: C({node name => config name}); wins over O(device_plugin.product_configs).
        type: dict
        default: {}
  mig_strategy:
    description:
      - Deprecated, use O(device_plugin) (C(configs) with C(mig_strategy)), which also labels the node with its
        device plugin config. Cannot be combined with O(device_plugin).
      - MIG strategy reported in C(nvidia.com/mig.strategy) and used for the MIG labels; V(none) when not set.
    type: str
    choices: [none, single, mixed]
  sharing_strategy:
    description:
      - Deprecated, use O(device_plugin). Cannot be combined with O(device_plugin).
      - GPU sharing reported in C(nvidia.com/gpu.sharing-strategy); V(none) when not set.
    type: str
    choices: [none, time-slicing, mps]
  replicas:
    description:
      - Deprecated, use O(device_plugin). Cannot be combined with O(device_plugin).
      - Replicas per GPU with time-slicing or MPS, reported in C(nvidia.com/gpu.replicas); V(1) when not set.
    type: int
  taints:
    description:
      - Taints to add or update (O(state=present)) or remove (O(state=absent)).
      - Each is a dict with C(key), C(value) (optional) and C(effect) (V(NoSchedule), V(PreferNoSchedule) or
        V(NoExecute)), or a string C(key=value:Effect).
      - A taint is identified by key and effect, as C(kubectl taint) does; taints not named here are never changed.
      - Default none; the roles of this collection default to C(nvidia.com/gpu=present:NoSchedule).
    type: list
    elements: raw
    default: []
  state:
    description: Whether the labels and taints should be present or absent.
    type: str
    choices: [present, absent]
    default: present
  remove_stale:
    description:
      - Also remove the managed labels that the node carries but that are not wanted any more
        (for example C(nvidia.com/mig.strategy) after MIG is turned off).
      - The managed labels are exactly those this module derives from O(facts) - the GPU Feature Discovery
        keys C(nvidia.com/gpu.present), C(nvidia.com/gpu.machine), C(nvidia.com/gpu.mode), C(nvidia.com/gpu.count),
        C(nvidia.com/gpu.replicas), C(nvidia.com/gpu.sharing-strategy), C(nvidia.com/gpu.product),
        C(nvidia.com/gpu.memory), C(nvidia.com/gpu.family), C(nvidia.com/gpu.compute.major|minor),
        C(nvidia.com/mig.capable), C(nvidia.com/mig.strategy), C(nvidia.com/mps.capable), C(nvidia.com/cuda.driver.*),
        C(nvidia.com/cuda.driver-version.*), C(nvidia.com/cuda.runtime.*), C(nvidia.com/cuda.runtime-version.*),
        the MIG attribute keys C(nvidia.com/gpu.multiprocessors|slices.gi|slices.ci|engines.*) (MIG strategy single)
        and C(nvidia.com/mig-<profile>.product|count|replicas|sharing-strategy|memory|multiprocessors|slices.*|engines.*)
        (MIG strategy mixed) - and C(accelerator) when its value has the C(nvidia-<model>) form the module writes.
      - With O(state=absent), remove every managed label.
      - Any other label, under C(nvidia.com/) or not (GFD's own C(nvidia.com/gfd.timestamp) or C(nvidia.com/gpu.clique)),
        is only ever changed when named. C(nvidia.com/device-plugin.config) is written on every node when
        O(device_plugin) is given and left alone otherwise.
    type: bool
    default: false
  concurrency:
    description:
      - How many nodes are written at the same time, each over its own connection to the API server.
      - V(1) writes one node after the other.
      - The results (RV(nodes)) and the diff are in the order of the requested nodes either way. When a write
        fails (after its retries), no further write starts, the writes under way finish, and the module fails
        naming the first failed node in that order.
    type: int
    default: 8
  return_nodes:
    description:
      - Also return, for each node, its labels after the run (in check mode, as they would be), and its
        C(allocatable) resources, C(addresses), C(node_info) and C(annotations) as the module listed them, so
        that later tasks of the play need not read the nodes again (the C(kubegpu.nvidia.k8s_device_plugin) role
        takes them as C(k8s_device_plugin_nodes), the C(kubegpu.nvidia.gpu_validation) role as
        C(gpu_validation_known_nodes)).
      - Off by default, to keep the result small on large clusters.
    type: bool
    default: false
requirements:
  - kubernetes >= 24.2.0 (Python library)
notes:
  - Run it once for the whole cluster (C(run_once) on the control host) with O(nodes) rather than once per host;
    the role C(kubegpu.nvidia.k8s_gpu_node) does that.
  - The arguments echoed back in the result (C(invocation.module_args), shown with C(-vvv)) leave out the
    C(facts) of each O(nodes) item, so that a call for thousands of nodes does not send their facts back
    through Ansible.
seealso:
  - module: kubegpu.nvidia.nvidia_gpu_facts
  - module: kubernetes.core.k8s
"""

EXAMPLES = r"""
- name: Label one node from its GPU facts and taint it
  kubegpu.nvidia.k8s_gpu_label:
    node: gpu-node-1
    facts: "{{ hostvars['gpu-node-1'].ansible_facts.nvidia_gpu }}"
    taints:
      - key: nvidia.com/gpu
        value: present
        effect: NoSchedule

- name: Label and taint every GPU host in one call, dropping GPU labels that no longer hold
  kubegpu.nvidia.k8s_gpu_label:
    kubeconfig: /etc/kubernetes/admin.conf
    nodes: "{{ gpu_nodes_spec }}"
    taints: ["nvidia.com/gpu=present:NoSchedule"]
    remove_stale: true
  run_once: true
  delegate_to: localhost

- name: Label every GPU host's node as GPU Feature Discovery would under the device plugin configuration
  kubegpu.nvidia.k8s_gpu_label:
    nodes: "{{ groups['gpu_nodes'] | kubegpu.nvidia.gpu_node_requests(hostvars) }}"
    device_plugin:
      configs:
        t4-shared: {sharing_strategy: time-slicing, replicas: 4}
      product_configs:
        Tesla-T4: t4-shared
    remove_stale: true
  run_once: true
  delegate_to: localhost

- name: Remove the GPU taint
  kubegpu.nvidia.k8s_gpu_label:
    node: gpu-node-1
    taints: ["nvidia.com/gpu:NoSchedule"]
    state: absent
"""

RETURN = r"""
changed:
  description: Whether any node was (or, in check mode, would be) changed.
  returned: always
  type: bool
hosts:
  description:
    - The Kubernetes node each requested host was matched to, by O(nodes[].host) (else the requested name).
    - The one host-to-node match of the collection; later tasks read it instead of matching again.
  returned: success
  type: dict
  sample: {"lab-h100": "kubegpu-lab-h100", "gpu07": "ip-10-0-3-12.ec2.internal"}
nodes:
  description:
    - One entry per requested node, in the order requested.
    - When a write fails, the nodes before the failed one, and the later ones already written.
  returned: success, and when a write fails
  type: list
  elements: dict
  contains:
    name:
      description: Kubernetes node name.
      type: str
      sample: gpu-node-1
    host:
      description: The requested host (O(nodes[].host), else the requested name), when it differs from the node name.
      type: str
      returned: when the host's name is not the node's
      sample: lab-h100
    changed:
      description: Whether this node was changed.
      type: bool
    added:
      description: Labels set (new or with a new value).
      type: dict
      sample: {"nvidia.com/gpu.present": "true", "accelerator": "nvidia-tesla-t4"}
    removed:
      description: Label keys removed.
      type: list
      elements: str
      sample: ["nvidia.com/mig.capable"]
    taints:
      description: The node's taints after the change.
      type: list
      elements: dict
      sample: [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    taints_added:
      description: Taints added or given a new value.
      type: list
      elements: dict
    taints_removed:
      description: Taints removed (or replaced by a new value).
      type: list
      elements: dict
    labels:
      description: All the node's labels after the run (in check mode, as they would be).
      type: dict
      returned: with O(return_nodes=true), on success
      sample: {"kubernetes.io/hostname": "gpu-node-1", "nvidia.com/gpu.product": "Tesla-T4"}
    allocatable:
      description: The node's C(status.allocatable), as listed before any write.
      type: dict
      returned: with O(return_nodes=true), on success
      sample: {"cpu": "8", "nvidia.com/gpu": "1"}
    addresses:
      description: The node's C(status.addresses), as listed.
      type: list
      elements: dict
      returned: with O(return_nodes=true), on success
      sample: [{"type": "InternalIP", "address": "10.0.0.11"}]
    node_info:
      description: The node's C(status.nodeInfo) (boot ID, kernel, kubelet and container runtime versions), as listed.
      type: dict
      returned: with O(return_nodes=true), on success
      sample: {"bootID": "1b3c...", "kubeletVersion": "v1.31.2", "containerRuntimeVersion": "containerd://1.7.22"}
    annotations:
      description: The node's C(metadata.annotations), as listed before any write.
      type: dict
      returned: with O(return_nodes=true), on success
      sample: {"kubegpu.nvidia/gpu-validation": "{\"passed\":\"2026-11-21T10:00:00Z\",\"state\":\"9f2c...\"}"}
error_kind:
  description:
    - On failure, what failed, for a play that handles the failure itself (with C(failed_when) or
      C(ignore_errors)).
    - V(node_match) a requested host matches no Kubernetes node, or two hosts the same node (the API answered;
      nothing was written); V(api) the API server could not be reached or refused a request; V(conflict) the
      API kept answering 409; V(timeout) the API server did not answer within O(request_timeout), retries
      included; V(write) a node write failed (RV(nodes) has what was done); V(input) a label, taint, fact,
      option or kubeconfig the module cannot use (nothing was sent); V(dependency) the C(kubernetes) library
      is missing; V(bug) anything else, a defect of the collection (the message names the exception; please
      report it).
  returned: failure (except Ansible's own argument errors)
  type: str
  sample: node_match
api_requests:
  description: API requests made, counted by verb (C(list), C(get), C(patch)), retries included.
  returned: always
  type: dict
  sample: {"list": 1, "patch": 3}
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.kubegpu.nvidia.plugins.module_utils import device_plugin_config
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError, run_module
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gfd_labels import (
    accelerator_label_value, gfd_labels, validate_label_options)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import (
    AUTH_ARG_SPEC, HAS_KUBERNETES, K8S_IMPORT_ERROR, NodeAPI, get_api_client)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.node_labels import (
    NodeLabelError, apply_nodes, check_requests, facts_problems, normalise_labels, normalise_taint)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.node_model import NodeModel

DEPRECATED_OPTIONS = ("mig_strategy", "sharing_strategy", "replicas")


def _gpu_facts(facts):
    if facts and isinstance(facts.get("nvidia_gpu"), dict):
        return facts["nvidia_gpu"]
    return facts


def _accelerator(facts, labels):
    devices = facts.get("devices") or []
    if facts.get("present", bool(devices)) and devices:
        product = devices[0].get("name") or devices[0].get("product")
        if product:
            labels["accelerator"] = accelerator_label_value(product)
    return labels


def labels_from_facts(facts, mig_strategy="none", sharing_strategy="none", replicas=1, model=None, node_name=None):
    """GFD labels plus ``accelerator=nvidia-<model>`` from ``nvidia_gpu`` facts (of the shape ``facts_problems``
    accepts).

    ``model``: a ``NodeModel`` of the device plugin configuration; the labels are then those of the config the
    node (``node_name``) gets, plus ``nvidia.com/device-plugin.config`` naming it.  Without it, the labels of
    the per-option form (``mig_strategy``, ``sharing_strategy``, ``replicas``).
    """
    facts = _gpu_facts(facts)
    if not facts:
        return {}
    if model is not None:
        labels = dict(model.desired_labels(facts, node_name)) if facts.get("present") else {}
    else:
        labels = dict(gfd_labels(facts, mig_strategy=mig_strategy, sharing_strategy=sharing_strategy,
                                 replicas=replicas))
    return _accelerator(facts, labels)


def label_model(params):
    """``(NodeModel or None, per-option kwargs)`` for the module's parameters; InputError for a bad combination."""
    legacy = dict((key, params[key]) for key in DEPRECATED_OPTIONS if params.get(key) is not None)
    if params.get("device_plugin") is not None:
        if legacy:
            raise InputError("%s cannot be combined with device_plugin: give the sharing and MIG settings in "
                             "device_plugin's configs only" % ", ".join(sorted(legacy)))
        return NodeModel(device_plugin_config.check(params["device_plugin"])), {}
    options = dict(mig_strategy="none", sharing_strategy="none", replicas=1)
    options.update(legacy)
    error = validate_label_options(**options)
    if error:
        raise InputError(error)
    return None, options


def _taints(raw, where, node, problems):
    """The normalised taints of ``raw``; the ones that cannot be read go to ``problems`` as ``(problem, node)``."""
    taints = []
    for index, taint in enumerate(raw or []):
        try:
            taints.append(normalise_taint(taint))
        except NodeLabelError as exc:
            problems.append(("%s[%d]: %s" % (where, index, exc.msg), node))
    return taints


def _facts_ok(facts, where, node, problems):
    found = facts_problems(facts)
    problems.extend(("%s.%s" % (where, problem) if not problem.startswith("must") else "%s %s" % (where, problem),
                     node) for problem in found)
    return not found


def build_requests(params, model=None, options=None):
    """``(requests, problems)``: one request dict (name, aliases, labels, taints) per node from the module's
    parameters, and what is wrong with them (``[(problem, node)]``: facts of the wrong shape, taints that
    cannot be read); ``check_requests`` adds the label and taint rules and fails before writing anything.

    With a ``model`` whose node configs name nodes, a node's labels depend on the Kubernetes node the host
    resolves to: ``labels`` is then a function of the node name (``node_labels.apply_nodes`` calls it, and
    checks what it returns before the first write); its ``extra`` attribute holds the labels given in the
    module's arguments, checked here with the rest.
    """
    options = options or {}
    problems = []
    top_taints = _taints(params["taints"], "taints", None, problems)
    top_facts_ok = _facts_ok(params["facts"], "facts", None, problems)
    per_node = model is not None and bool(model.resolved["node_configs"])
    top_labels = None
    items = params["nodes"] if params["nodes"] is not None else [{"name": params["node"]}]
    per_node = model is not None and bool(model.resolved["node_configs"])
    requests = []
    for position, item in enumerate(items):
        name = item["name"]
        where = "nodes[%d]" % position if params["nodes"] is not None else None
        extra = dict(params["labels"] or {})
        extra.update(item.get("labels") or {})
        if item.get("facts") is not None:
            facts = item["facts"]
            ok = _facts_ok(facts, where + ".facts" if where else "facts", name, problems)
        else:
            facts, ok = params["facts"], top_facts_ok
        if not ok:
            labels = normalise_labels(extra)
        elif per_node:
            labels = _labels_of_node(facts, model, extra)
        elif item.get("facts") is not None:
            labels = labels_from_facts(facts, model=model, node_name=name, **options)
            labels.update(extra)
            labels = normalise_labels(labels)
        else:
            if top_labels is None:
                top_labels = labels_from_facts(facts, model=model, node_name=name, **options)
            labels = dict(top_labels)
            labels.update(extra)
            labels = normalise_labels(labels)
        if item.get("taints") is None:
            taints = top_taints
        else:
            taints = _taints(item["taints"], where + ".taints" if where else "taints", name, problems)
        requests.append({
            "name": name,
            "host": item.get("host") or name,
            "aliases": item.get("aliases") or [],
            "labels": labels,
            "taints": taints,
        })
    return requests, problems


def _labels_of_node(facts, model, extra):
    def labels(node_name):
        result = labels_from_facts(facts, model=model, node_name=node_name)
        result.update(extra)
        return normalise_labels(result)
    labels.extra = normalise_labels(extra)
    return labels


def compact_invocation(params):
    """The ``invocation`` echoed in the result: the module's arguments without each O(nodes) item's facts.

    Ansible echoes every argument back by default; for a whole cluster that would send the facts of
    every node (megabytes) back through the controller, its result queue and callbacks.
    """
    args = dict(params)
    if args.get("nodes") is not None:
        args["nodes"] = [dict((k, v) for k, v in item.items() if k != "facts") for item in args["nodes"]]
    return {"module_args": args}


def main():
    argument_spec = dict(AUTH_ARG_SPEC)
    argument_spec.update(
        node=dict(type="str"),
        nodes=dict(type="list", elements="dict", options=dict(
            name=dict(type="str", required=True),
            host=dict(type="str"),
            aliases=dict(type="list", elements="str", default=[]),
            labels=dict(type="dict"),
            facts=dict(type="dict"),
            taints=dict(type="list", elements="raw"),
        )),
        labels=dict(type="dict", default={}),
        facts=dict(type="dict"),
        device_plugin=dict(type="dict", options=dict(
            default_config=dict(type="str", default="default"),
            configs=dict(type="dict", default={}),
            product_configs=dict(type="dict", default={}),
            node_configs=dict(type="dict", default={}),
        )),
        mig_strategy=dict(type="str", choices=["none", "single", "mixed"],
                          removed_in_version="2.0.0", removed_from_collection="kubegpu.nvidia"),
        sharing_strategy=dict(type="str", choices=["none", "time-slicing", "mps"],
                              removed_in_version="2.0.0", removed_from_collection="kubegpu.nvidia"),
        replicas=dict(type="int", removed_in_version="2.0.0", removed_from_collection="kubegpu.nvidia"),
        taints=dict(type="list", elements="raw", default=[]),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        remove_stale=dict(type="bool", default=False),
        retries=dict(type="int", default=5),
        concurrency=dict(type="int", default=8),
        return_nodes=dict(type="bool", default=False),
    )
    module = AnsibleModule(
        argument_spec=argument_spec,
        mutually_exclusive=[("node", "nodes")],
        required_one_of=[("node", "nodes")],
        supports_check_mode=True,
    )
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), error_kind="dependency", exception=K8S_IMPORT_ERROR)

    state = {"api": None}
    invocation = compact_invocation(module.params)

    def work(module):
        params = module.params
        model, options = label_model(params)
        if params["concurrency"] < 1:
            raise InputError("concurrency must be 1 or more, not %d" % params["concurrency"])
        requests, problems = build_requests(params, model, options)
        # every label and taint of the batch checked before the client is made and the first request
        check_requests(requests, params["state"], problems)
        concurrency = params["concurrency"]
        api = state["api"] = NodeAPI(get_api_client(params, pool_size=concurrency), retries=params["retries"],
                                     request_timeout=params["request_timeout"])
        results, diffs = apply_nodes(api, requests, state=params["state"], remove_stale=params["remove_stale"],
                                     check_mode=module.check_mode, concurrency=concurrency,
                                     return_nodes=params["return_nodes"], checked=True)
        hosts = dict((r.get("host", r["name"]), r["name"]) for r in results)
        result = dict(changed=any(r["changed"] for r in results), hosts=hosts, nodes=results,
                      api_requests=api.counts, invocation=invocation)
        if module._diff:
            result["diff"] = diffs
        return result

    def extra():
        counts = state["api"].counts if state["api"] else {}
        return dict(changed=False, api_requests=counts, invocation=invocation)

    run_module(module, work, extra)


if __name__ == "__main__":
    main()
