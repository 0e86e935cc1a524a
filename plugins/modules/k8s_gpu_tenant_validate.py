#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: k8s_gpu_tenant_validate
short_description: Prove that a GPU pod without tolerations lands in each GPU tenant's namespace and counts against its quota
version_added: 1.0.0
description:
  - For each entry of O(tenants), one after another, runs one pod named C(gpu-tenant-validation) in the tenant's
    namespace from O(pod_template), without any toleration (the template's are removed), asking for RV(results[].count)
    of the tenant's GPU resource, and with O(tenants[].product) a node selector on
    C(nvidia.com/gpu.product=<product>).
  - The pod can only land on a tainted GPU node when the API server adds the namespace's default tolerations
    (admission plugin C(PodTolerationRestriction), annotation C(scheduler.alpha.kubernetes.io/defaultTolerations)
    that M(kubegpu.nvidia.k8s_gpu_tenants) writes) or the extended resource's toleration
    (C(ExtendedResourceToleration)).
  - A tenant passes when its pod runs, on a node labelled with O(tenants[].product) when given, and the
    tenant's ResourceQuota C(gpu-tenant-quota) counts the pod's request in C(status.used) while it runs.
  - "A tenant whose O(tenants[].resource) is a DRA device-class quota key (C(<class>.deviceclass.resource.k8s.io/devices))
    takes the DRA path: a ResourceClaimTemplate C(gpu-tenant-validation) requests O(tenants[].count) devices of that
    class, the pod uses it through a claim and asks for no extended resource (its toleration can only come from the
    namespace's defaults), and the quota must count the claim's devices under that key. A pod no node can allocate
    the claim on fails with the scheduler's reason."
  - The pod (and on the DRA path its template; the claim goes with the pod) is deleted again, also when a step
    fails. Nothing is left behind, so the module never reports a change.
author:
  - kubegpu.nvidia maintainers (@kubegpu)
extends_documentation_fragment:
  - kubegpu.nvidia.k8s_auth
  - kubegpu.nvidia.k8s_auth.retries
attributes:
  check_mode:
    support: full
    description: Checks the entries and runs no pod.
  diff_mode:
    support: none
    description: The module changes nothing it could show as a difference (its pods are deleted again).
  idempotent:
    support: full
    description: The pods come and go within the run; a second run validates again and reports no change.
options:
  tenants:
    description: The tenants to validate.
    type: list
    elements: dict
    required: true
    suboptions:
      namespace:
        description: The tenant's namespace (created by M(kubegpu.nvidia.k8s_gpu_tenants)).
        type: str
        required: true
      resource:
        description:
          - The GPU resource the pod asks for, one of the tenant's quota keys - an C(nvidia.com/) extended resource
            (for example C(nvidia.com/gpu)), or a DRA device-class key such as
            C(gpu.nvidia.com.deviceclass.resource.k8s.io/devices), which the pod gets through a claim.
        type: str
        default: nvidia.com/gpu
      count:
        description: How many of O(tenants[].resource) the pod asks for.
        type: int
        default: 1
      product:
        description:
          - The GPU model the tenant's work runs on, as the node label C(nvidia.com/gpu.product) writes it (for example
            C(Tesla-T4); C(Tesla-T4-SHARED) where the device plugin shares the GPU without renaming the resource).
            The pod selects those nodes, and passes only on one of them.
          - Empty lets the scheduler pick any node offering the resource.
        type: str
        default: ""
  pod_template:
    description:
      - The pod, as a Pod manifest without name, namespace, tolerations or GPU limits. The first container gets
        the tenant's GPU limit.
      - The pod must keep running while the quota is read (a long C(sleep), for example).
    type: dict
    required: true
  timeout:
    description: Seconds to wait, per tenant, for the pod to run, for the quota to count it, and for it to be gone.
    type: int
    default: 300
  unschedulable_timeout:
    description: Seconds after the pod's creation after which a pod the scheduler reports Unschedulable is given up.
    type: int
    default: 20
  poll_interval:
    description: Longest pause between two polls, in seconds (the first polls come after 0.2 s, doubling).
    type: float
    default: 2
  fail_on_failure:
    description: Fail when a tenant does not pass; with V(false) the results report it and the module succeeds.
    type: bool
    default: true
requirements:
  - kubernetes >= 24.2.0 (Python library)
notes:
  - "Requests per tenant: a namespace read, a pod read (and a delete of a pod left from an earlier run), one create,
    the polls of the pod and of the ResourceQuota (one read each), one node read, one delete and the reads until
    the pod is gone; on the DRA path also a delete and a create of the ResourceClaimTemplate before the pod and a
    delete after it."
seealso:
  - module: kubegpu.nvidia.k8s_gpu_tenants
  - module: kubegpu.nvidia.k8s_gpu_validate
"""

EXAMPLES = r"""
- name: A pod without tolerations in each tenant namespace
  kubegpu.nvidia.k8s_gpu_tenant_validate:
    tenants:
      - namespace: team-t4
        resource: nvidia.com/gpu
        product: Tesla-T4-SHARED
      - namespace: team-a100
        product: NVIDIA-A100-SXM4-40GB
      # a tenant whose quota is on DRA devices: one claim of one gpu.nvidia.com device
      - namespace: team-h100
        resource: gpu.nvidia.com.deviceclass.resource.k8s.io/devices
        product: NVIDIA-H100-80GB-HBM3
    pod_template:
      spec:
        terminationGracePeriodSeconds: 0
        containers:
          - name: cuda
            image: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0
            command: [sleep, "300"]
"""

RETURN = r"""
results:
  description: One entry per tenant, in the order of O(tenants).
  returned: when the pods ran (not in check mode)
  type: list
  elements: dict
  contains:
    namespace:
      description: The tenant's namespace.
      type: str
    resource:
      description: The GPU resource the pod asked for.
      type: str
    path:
      description: C(device_plugin) (an C(nvidia.com/) extended resource) or C(dra) (a claim of a device class).
      type: str
    device_class:
      description: The DeviceClass of the claim on the DRA path (empty on the other).
      type: str
    count:
      description: How many it asked for.
      type: int
    node:
      description: The node the pod ran on (empty when it was not scheduled).
      type: str
    phase:
      description: The pod's phase when it was checked.
      type: str
    tolerations:
      description: The keys of the tolerations the API server gave the pod.
      type: list
      elements: str
    quota_used:
      description: C(status.used) of C(requests.<resource>) (on the DRA path of the key itself) in C(gpu-tenant-quota)
        while the pod ran.
      type: int
    quota_hard:
      description: C(status.hard) of the same key.
      type: int
    passed:
      description: Whether the tenant passed.
      type: bool
    reason:
      description: Why it did not pass (empty when it did).
      type: str
  sample:
    - {namespace: team-t4, resource: nvidia.com/gpu, count: 1, product: Tesla-T4-SHARED, pod: gpu-tenant-validation,
       node: kubegpu-lab-t4, phase: Running, tolerations: [nvidia.com/gpu], quota_used: 1, quota_hard: 2,
       passed: true, reason: "", path: device_plugin, device_class: ""}
passed:
  description: Whether every tenant passed.
  returned: when the pods ran (not in check mode)
  type: bool
report:
  description: One line per tenant.
  returned: when the pods ran (not in check mode)
  type: list
  elements: str
api_requests:
  description: API requests made, counted by verb, retries included.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError, run_module
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_validation import ValidationFailed
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import (
    AUTH_ARG_SPEC, HAS_KUBERNETES, K8S_IMPORT_ERROR, get_api_client)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_pods import PodAPI
from ansible_collections.kubegpu.nvidia.plugins.module_utils import tenant_validation


def main():
    argument_spec = dict(AUTH_ARG_SPEC)
    argument_spec.update(
        tenants=dict(type="list", elements="dict", required=True, options=dict(
            namespace=dict(type="str", required=True),
            resource=dict(type="str", default="nvidia.com/gpu"),
            count=dict(type="int", default=1),
            product=dict(type="str", default=""),
        )),
        pod_template=dict(type="dict", required=True),
        timeout=dict(type="int", default=300),
        unschedulable_timeout=dict(type="int", default=20),
        poll_interval=dict(type="float", default=2.0),
        fail_on_failure=dict(type="bool", default=True),
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
        for name in ("timeout", "unschedulable_timeout", "retries"):
            if params[name] < 0:
                raise InputError("%s must not be negative" % name)
        if params["poll_interval"] <= 0:
            raise InputError("poll_interval must be greater than 0")
        tenants = tenant_validation.check_tenants(params["tenants"])
        for tenant in tenants:  # a template the pods cannot be made from fails before any request
            tenant_validation.build_pod(params["pod_template"], tenant)
        api = state["api"] = PodAPI(get_api_client(params), retries=params["retries"],
                                    request_timeout=params["request_timeout"])
        run = tenant_validation.TenantValidation(api, params["pod_template"], tenants, timeout=params["timeout"],
                                                 unschedulable_timeout=params["unschedulable_timeout"],
                                                 poll_interval=params["poll_interval"])
        results = run.run(module.check_mode)
        result = dict(changed=False, api_requests=api.counts)
        if module.check_mode:
            return result
        result.update(results=results, passed=all(r["passed"] for r in results),
                      report=tenant_validation.report(results))
        message = tenant_validation.failure_message(results)
        if message and params["fail_on_failure"]:
            raise ValidationFailed(message, **result)
        result["msg"] = message or "GPU tenant validation passed in %d namespace(s)" % len(results)
        return result

    run_module(module, work, extra)


if __name__ == "__main__":
    main()
