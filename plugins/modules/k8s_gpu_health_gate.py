#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: k8s_gpu_health_gate
short_description: Label, taint and untaint GPU nodes by their GPU health, with a guard
version_added: 1.1.0
description:
  - From each GPU node's health (O(nodes[].health), as C(nvidia_gpu_facts) with C(gather_subset=[health]) or
    M(kubegpu.nvidia.nvidia_gpu_health) return it), labels the node C(nvidia.com/gpu.health=healthy|degraded|unhealthy),
    taints an V(unhealthy) node with O(taint) (C(nvidia.com/gpu.health=unhealthy:NoSchedule) by default) and, with
    O(cordon), cordons it; once the node reads V(healthy) or V(degraded) again, removes that taint and only that
    taint (the same key B(and) value; whatever its effect), and uncordons the node only if the gate cordoned it.
  - A node that already has a taint with O(taint)'s key and another value (someone else's) is labelled but not
    tainted, and its taint is left as it is; its result says so (RV(nodes[].taint=foreign)).
  - A node whose health is V(unknown) (no NVML; no GPU, no driver yet) is left as it is.
  - The guard. When more than O(max_unhealthy_percent) of the nodes would become unhealthy in this run (nodes
    already carrying the gate's taint do not count), the module fails with one line naming them and the share,
    before any write (also in check mode), since a systematic misreading must not empty the cluster.
  - One LIST of the nodes, then one strategic-merge PATCH per node that changes (label, taints with the node's
    C(resourceVersion), cordon); a 409 Conflict re-reads that node, plans it again and retries. A second run
    writes nothing. Every option is checked before the first request.
author:
  - kubegpu.nvidia maintainers (@kubegpu)
extends_documentation_fragment:
  - kubegpu.nvidia.k8s_auth
  - kubegpu.nvidia.k8s_auth.retries
attributes:
  check_mode:
    support: full
    description: Reads the nodes and reports, per node, what would be tainted, untainted or labelled and why; writes
      nothing. The guard refuses as in a real run.
  diff_mode:
    support: full
    description: One diff per node that changes (health label, taints, unschedulable).
  idempotent:
    support: full
    description: A second run with the same health makes no write.
options:
  nodes:
    description: The GPU nodes and their health.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The Kubernetes node (or the host, found by hostname or address like M(kubegpu.nvidia.k8s_gpu_label)).
        type: str
        required: true
      host:
        description: The inventory host it stands for (results name it).
        type: str
      aliases:
        description: Other names of the host to find its node by.
        type: list
        elements: str
        default: []
      health:
        description: The node's health; C(severity) (V(healthy), V(degraded), V(unhealthy), V(unknown)), C(reason),
          C(action) are read.
        type: dict
        required: true
  taint:
    description:
      - The taint of an unhealthy node; unset fields keep the default C(nvidia.com/gpu.health=unhealthy:NoSchedule).
      - C(key) a Kubernetes qualified name, C(value) a non-empty label value, C(effect) one of V(NoSchedule),
        V(PreferNoSchedule), V(NoExecute).
    type: dict
    default: {}
  cordon:
    description: Also cordon an unhealthy node (and uncordon it when it is healthy again, only if the gate cordoned it).
    type: bool
    default: false
  max_unhealthy_percent:
    description: The guard. The most nodes, in percent of O(nodes) (0 to 100), that may become unhealthy in one run.
    type: float
    default: 30
  conflict_retries:
    description: How many times a node's write is retried after a 409 Conflict.
    type: int
    default: 5
seealso:
  - module: kubegpu.nvidia.nvidia_gpu_health
  - module: kubegpu.nvidia.nvidia_gpu_facts
"""

EXAMPLES = r"""
- name: Gate the GPU nodes by their health
  kubegpu.nvidia.k8s_gpu_health_gate:
    nodes:
      - name: gpu01
        health: "{{ hostvars['gpu01'].ansible_facts.nvidia_gpu.health }}"
    max_unhealthy_percent: 30
"""

RETURN = r"""
nodes:
  description: One entry per node.
  returned: always
  type: list
  elements: dict
  contains:
    name: {description: The Kubernetes node., type: str}
    host: {description: "The inventory host (O(nodes[].host)), when given.", type: str}
    severity: {description: The node's health., type: str, sample: unhealthy}
    reason: {description: The worst finding's reason., type: str}
    action: {description: The action the health read recommends., type: str, sample: reset_gpu}
    label: {description: The health label before and after., type: dict, sample: {before: healthy, after: unhealthy}}
    taint: {description: "V(added), V(removed), V(kept), V(none), or V(foreign) (someone else's taint with the key)", type: str}
    foreign_taint: {description: "Someone else's taint with the gate's key, as C(key=value:Effect).", type: str}
    cordon: {description: "V(cordoned), V(uncordoned) or null.", type: str}
    changed: {description: "Whether the node was (check mode, would be) written.", type: bool}
    why: {description: "One line, what and why.", type: str}
taint:
  description: The taint in force, as checked.
  returned: always
  type: dict
  sample: {key: nvidia.com/gpu.health, value: unhealthy, effect: NoSchedule}
report:
  description: One line per node, what the gate did (check mode, would do) and why.
  returned: always
  type: list
  elements: str
api_requests:
  description: API requests made, counted by verb (C(list), C(get), C(patch)), retries included.
  returned: always
  type: dict
diff:
  description: Before and after of each changed node.
  returned: when diff mode is on
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_health_gate
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import run_module
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import (
    AUTH_ARG_SPEC, HAS_KUBERNETES, K8S_IMPORT_ERROR, NodeAPI, get_api_client)


def main():
    argument_spec = dict(AUTH_ARG_SPEC)
    argument_spec.update(
        nodes=dict(type="list", elements="dict", required=True, options=dict(
            name=dict(type="str", required=True),
            host=dict(type="str"),
            aliases=dict(type="list", elements="str", default=[]),
            health=dict(type="dict", required=True),
        )),
        taint=dict(type="dict", default={}, no_log=False),
        cordon=dict(type="bool", default=False),
        max_unhealthy_percent=dict(type="float", default=gpu_health_gate.DEFAULT_MAX_UNHEALTHY_PERCENT),
        conflict_retries=dict(type="int", default=5),
        retries=dict(type="int", default=5),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), error_kind="dependency", exception=K8S_IMPORT_ERROR)
    state = {"api": None}

    def extra():
        api = state["api"]
        return dict(changed=False, api_requests=api.counts if api else {})

    def work(module):
        params = module.params
        taint = gpu_health_gate.check_options(params["taint"], params["max_unhealthy_percent"], params["nodes"])
        api = state["api"] = NodeAPI(get_api_client(params), retries=params["retries"],
                                     request_timeout=params["request_timeout"])
        results, diffs = gpu_health_gate.run_gate(api, params["nodes"], taint, params["max_unhealthy_percent"],
                                                  params["cordon"], module.check_mode, params["conflict_retries"])
        for result in results:
            if result["taint"] == "foreign":
                module.warn("node %s: %s" % (result["name"], result["why"]))
        result = dict(changed=any(r["changed"] for r in results), nodes=results, api_requests=api.counts,
                      report=gpu_health_gate.report(results, module.check_mode), taint=taint)
        if module._diff:
            result["diff"] = diffs
        return result

    run_module(module, work, extra)


if __name__ == "__main__":
    main()
