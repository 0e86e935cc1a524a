#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: k8s_gpu_evict
short_description: Empty a Kubernetes node of its GPU work for a driver upgrade, and bring it back
version_added: 1.0.0
description:
  - "V(evicted): cordons the node, evicts its pods through the Eviction API (so PodDisruptionBudgets hold), then stops
    the driver's clients among its DaemonSet pods (device plugin, GPU Feature Discovery, MPS daemon, DCGM exporter):
    the node gets the taint C(kubegpu.nvidia/driver-upgrade=paused:NoSchedule), which keeps their DaemonSets from
    starting them again, and they are deleted."
  - Pods evicted are every pod of the node except mirror (static) pods, DaemonSet pods and finished pods, or with
    O(gpu_only) only those that request an C(nvidia.com/*) resource or hold a DRA resource claim.
  - DaemonSet pods are skipped whatever their volumes. (M(kubernetes.core.k8s_drain) refuses the device plugin's own
    pod for its C(emptyDir), because it checks local storage before the owner, kubernetes.core issue 622;
    C(kubectl drain) and this module check the owner first.)
  - An eviction a PodDisruptionBudget refuses (429) is tried again every O(delay) seconds. When pods still block after
    O(timeout) seconds, the module fails with one message naming them and the reason the API gave, and leaves the
    node cordoned on purpose, so that no new work lands on a node in the middle of an upgrade.
  - Pods no controller manages and pods with C(emptyDir) data are named before anything is evicted, unless O(force)
    or O(delete_emptydir_data) allows them, as C(kubectl drain) asks.
  - "V(restored): removes the taint (the GPU daemons come back) and, with O(uncordon), uncordons the node."
author:
  - kubegpu.nvidia maintainers (@kubegpu)
extends_documentation_fragment:
  - kubegpu.nvidia.k8s_auth
attributes:
  check_mode:
    support: full
    description: Reads the node and its pods and reports what would be cordoned, evicted and stopped; changes nothing.
  diff_mode:
    support: none
    description: The result lists the pods evicted and stopped.
  idempotent:
    support: full
    description: A second run on a drained node (or a restored one) changes nothing.
options:
  node:
    description: The Kubernetes node.
    type: str
    required: true
  state:
    description: V(evicted) empties the node; V(restored) brings its GPU daemons back (and uncordons it).
    type: str
    choices: [evicted, restored]
    default: evicted
  gpu_only:
    description:
      - Evict only the pods that request an C(nvidia.com/*) resource (limits or requests) or hold a DRA resource
        claim (C(spec.resourceClaims)); other pods keep running on the cordoned node.
    type: bool
    default: false
  timeout:
    description: Seconds the evictions may take, PodDisruptionBudget waits and termination included.
    type: int
    default: 600
  delay:
    description: Seconds between eviction attempts of pods a PodDisruptionBudget protects.
    type: float
    default: 5
  grace_period:
    description: Termination grace period of the evicted pods in seconds; the pods' own when not given.
    type: int
  delete_emptydir_data:
    description: Also evict pods with C(emptyDir) volumes (their data is lost). DaemonSet pods are never evicted.
    type: bool
    default: false
  force:
    description: Also evict pods that no controller manages (nothing starts them again).
    type: bool
    default: false
  stop_gpu_daemonsets:
    description:
      - After the evictions, stop the node's DaemonSet pods that use the GPU (they request a GPU, mount the device
        plugin directory, C(/dev/nvidia*) or C(/run/nvidia), use the C(nvidia) RuntimeClass or set
        C(NVIDIA_VISIBLE_DEVICES)), so that the driver's kernel module can be unloaded.
      - A DaemonSet that tolerates every taint comes back at once; RV(restarted) names its pods.
    type: bool
    default: true
  uncordon:
    description: With O(state=restored), also uncordon the node.
    type: bool
    default: true
  retries:
    description: How many times a request answered 429 (other than an eviction) or 5xx is retried.
    type: int
    default: 5
notes:
  - Needs RBAC to get and patch nodes, list, get and delete pods and create C(pods/eviction).
"""

EXAMPLES = r"""
- name: Evict the GPU work of a node and stop its GPU daemons
  kubegpu.nvidia.k8s_gpu_evict:
    node: gpu07
    gpu_only: true
    timeout: 900

- name: Bring the GPU daemons back and uncordon
  kubegpu.nvidia.k8s_gpu_evict:
    node: gpu07
    state: restored
"""

RETURN = r"""
cordoned:
  description: Whether the node is cordoned after the run.
  type: bool
  returned: always
evicted:
  description: The pods evicted (namespace/name).
  type: list
  elements: str
  returned: always
  sample: [shop/web-7d9c-x2x8q]
stopped:
  description: The DaemonSet pods that used the GPU and were stopped.
  type: list
  elements: str
  returned: always
  sample: [nvidia-device-plugin/nvidia-device-plugin-4xk2p]
restarted:
  description: GPU DaemonSet pods that came back at once (their DaemonSet tolerates every taint).
  type: list
  elements: str
  returned: when a DaemonSet pod was stopped
left:
  description: Pods left on the node, by reason (C(daemonset), C(mirror), C(finished), C(not_gpu)).
  type: dict
  returned: always
paused:
  description: Whether the node carries the taint that keeps the GPU daemons away.
  type: bool
  returned: always
blocking:
  description: The pods that kept the drain from finishing (on a timeout).
  type: list
  elements: str
  returned: on failure
api_requests:
  description: API requests made, by verb.
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError, run_module
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import (
    AUTH_ARG_SPEC,
    HAS_KUBERNETES,
    K8S_IMPORT_ERROR,
    get_api_client,
)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_eviction import Drain, EvictionAPI


def main():
    argument_spec = dict(AUTH_ARG_SPEC)
    argument_spec.update(
        node=dict(type="str", required=True),
        state=dict(type="str", default="evicted", choices=["evicted", "restored"]),
        gpu_only=dict(type="bool", default=False),
        timeout=dict(type="int", default=600),
        delay=dict(type="float", default=5),
        grace_period=dict(type="int"),
        delete_emptydir_data=dict(type="bool", default=False),
        force=dict(type="bool", default=False),
        stop_gpu_daemonsets=dict(type="bool", default=True),
        uncordon=dict(type="bool", default=True),
        retries=dict(type="int", default=5),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), error_kind="dependency", exception=K8S_IMPORT_ERROR)
    state = {"api": None}

    def requests():
        return {"api_requests": state["api"].counts if state["api"] else {}}

    def work(module):
        params = module.params
        if params["timeout"] < 0 or params["delay"] < 0 or (params["grace_period"] or 0) < 0:
            raise InputError("timeout, delay and grace_period must not be negative")
        api = state["api"] = EvictionAPI(get_api_client(params), retries=params["retries"],
                                         request_timeout=params["request_timeout"])
        drain = Drain(api, params["node"], gpu_only=params["gpu_only"], timeout=params["timeout"],
                      delay=params["delay"], grace_period=params["grace_period"],
                      delete_emptydir_data=params["delete_emptydir_data"], force=params["force"],
                      stop_gpu_daemonsets=params["stop_gpu_daemonsets"], check_mode=module.check_mode)
        if params["state"] == "evicted":
            result = drain.drain()
        else:
            result = drain.restore(uncordon=params["uncordon"])
        return dict(result, changed=drain.changed, evicted=sorted(result["evicted"]),
                    stopped=sorted(result["stopped"]), api_requests=api.counts)

    run_module(module, work, extra=requests)


if __name__ == "__main__":
    main()
