#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: k8s_gpu_tenants
short_description: Give teams GPU namespaces with quotas, RBAC, priority tiers and default GPU tolerations
version_added: 1.1.0
description:
  - From one declaration per team (O(tenants)), creates or updates in one run the team's namespace (labelled
    C(app.kubernetes.io/managed-by=kubegpu.nvidia) and C(kubegpu.nvidia/tenant=<namespace>)), a ResourceQuota
    C(gpu-tenant-quota) with a C(requests.<resource>) entry per GPU resource (the only form quotas accept for
    extended resources; DRA device and claim counts under their own keys), a Role and RoleBinding C(gpu-tenant)
    letting the team's subjects run workloads in that namespace only, the PriorityClasses of O(tiers), and the
    namespace annotation C(scheduler.alpha.kubernetes.io/defaultTolerations) with the tolerations of O(taints),
    so that where the API server enables the C(PodTolerationRestriction) admission plugin, pods in the namespace
    land on the GPU nodes without spelling the toleration.
  - Every declaration is checked first; any problem (a namespace name that is not a DNS-1123 label, a quota that
    is not a non-negative integer or on a resource that is not a GPU resource, a subject kind Kubernetes does not
    have, a tier that names no declared tier, two tenants claiming one namespace) fails the module with one line
    naming every problem, before any request.
  - The cluster is then read with one listing per kind (namespaces, PriorityClasses, the tenant-labelled
    ResourceQuotas, Roles and RoleBindings of every namespace, nodes), whatever the number of tenants. The sum of
    the quotas per C(nvidia.com/) resource is compared with the nodes' allocatable (O(capacity_check)); a
    namespace another tool manages, or a tier whose PriorityClass exists with another value, fails the module
    before any write.
  - Only what differs is written (JSON merge patches on the fields the module owns). A second run writes nothing.
  - A namespace labelled as a tenant that is no longer declared is reported (RV(undeclared), and a warning), never
    changed. A tenant declared with O(tenants[].state=absent) loses its ResourceQuota, Role and RoleBinding and the
    namespace its tenant labels and annotation; the namespace itself (with every workload in it) is deleted only
    with O(tenants[].delete_namespace=true).
  - A write that fails stops the run; the message names it, what was applied before it and what was not.
author:
  - kubegpu.nvidia maintainers (@kubegpu)
extends_documentation_fragment:
  - kubegpu.nvidia.k8s_auth
  - kubegpu.nvidia.k8s_auth.retries
attributes:
  check_mode:
    support: full
    description: Reads the cluster and reports every write it would make (RV(changes)); writes nothing.
  diff_mode:
    support: full
    description: One diff per object written, its owned fields before and after.
  idempotent:
    support: full
    description: A second run with the same declarations makes no write.
options:
  tenants:
    description: One entry per team.
    type: list
    elements: dict
    default: []
    suboptions:
      namespace:
        description: The team's namespace (a DNS-1123 label); created when missing. One tenant per namespace.
        type: str
        required: true
      quota:
        description:
          - "GPU quota per resource name: C(nvidia.com/gpu), C(nvidia.com/gpu.shared), C(nvidia.com/mig-<profile>)
            (for example C(nvidia.com/mig-1g.10gb)), C(<deviceclass>.deviceclass.resource.k8s.io/devices) and
            C(count/resourceclaims.resource.k8s.io) (DRA). Counts are non-negative integers."
          - Empty or missing writes no ResourceQuota (and removes the module's one).
        type: dict
        default: {}
      subjects:
        description:
          - RBAC subjects allowed to run workloads in the namespace, each C({kind, name}) with kind C(User), C(Group)
            or C(ServiceAccount) (the latter with a C(namespace), default the tenant's).
          - Empty writes no Role and RoleBinding (and removes the module's ones).
        type: list
        elements: dict
        default: []
      tier:
        description: The name of a tier of O(tiers) the team's workloads use (checked, and reported in RV(tenants)).
        type: str
      state:
        description: V(absent) removes the tenant's objects (see O(tenants[].delete_namespace)).
        type: str
        choices: [present, absent]
        default: present
      delete_namespace:
        description: With O(tenants[].state=absent), delete the namespace and everything in it.
        type: bool
        default: false
  tiers:
    description:
      - Priority tiers, one PriorityClass each (created when missing, labels and description kept up to date). A
        PriorityClass's value cannot change; a tier whose class exists with another value fails the module.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The PriorityClass name (a DNS-1123 subdomain, not starting with C(system-)).
        type: str
        required: true
      value:
        description: Its priority, at most 1000000000.
        type: int
        required: true
      description:
        description: Its description; default C(Priority for GPU workloads, above ordinary pods.)
        type: str
      preemption_policy:
        description: Whether its pods preempt lower-priority pods.
        type: str
        choices: [PreemptLowerPriority, Never]
        default: PreemptLowerPriority
  taints:
    description:
      - The taints of the GPU nodes (as the C(kubegpu.nvidia.k8s_gpu_node) role's C(k8s_gpu_node_taints)); their
        tolerations (C(Equal) with the value, else C(Exists)) become the namespaces' default tolerations. Empty
        writes no annotation (and removes the module's one).
    type: list
    elements: dict
    default: []
    suboptions:
      key:
        description: Taint key.
        type: str
        required: true
      value:
        description: Taint value.
        type: str
      effect:
        description: C(NoSchedule), C(PreferNoSchedule) or C(NoExecute).
        type: str
        required: true
  capacity_check:
    description:
      - How to treat quotas the GPU nodes cannot back. The totals of the C(nvidia.com/) quotas are compared with the
        sum of the nodes' C(status.allocatable).
      - V(warn) a quota on a resource no node advertises fails; totals above what the nodes advertise are a warning.
        V(fail) both fail. V(ignore) checks nothing.
      - DRA device counts are not checked.
    type: str
    choices: [warn, fail, ignore]
    default: warn
  capacity:
    description:
      - The GPU nodes' capacity as the C(kubegpu.nvidia.k8s_device_plugin) role recorded it
        (C(k8s_device_plugin_capacity), one row per GPU node with what the node model C(expected) it to advertise
        and its C(allocatable)); O(capacity_check) then compares the quotas with the sum of the rows' C(expected)
        (else C(allocatable)) and the module lists no nodes. So in check mode, before the device plugin runs on new
        nodes, the quotas are checked against what the run would leave.
      - Empty (the default) lists the nodes and sums their C(status.allocatable).
    type: list
    elements: dict
    default: []
requirements:
  - kubernetes >= 24.2.0 (Python library)
notes:
  - "Requests per run: six listings (namespaces, PriorityClasses, ResourceQuotas, Roles, RoleBindings, nodes; five
    with O(capacity); more only past 500 objects of one kind), then one request per object written."
  - The default tolerations take effect only where the API server runs the C(PodTolerationRestriction) admission
    plugin (C(--enable-admission-plugins)); C(ExtendedResourceToleration) adds the toleration of a taint named like
    an extended resource (C(nvidia.com/gpu)) to every pod requesting it.
seealso:
  - module: kubegpu.nvidia.k8s_gpu_label
"""

EXAMPLES = r"""
- name: Two teams, one on the T4's shared slices, one on the H100's GPUs
  kubegpu.nvidia.k8s_gpu_tenants:
    tenants:
      - namespace: ml-a
        quota:
          nvidia.com/gpu: 8
        subjects:
          - kind: Group
            name: team-a
        tier: gpu-workload
      - namespace: ml-b
        quota:
          nvidia.com/gpu.shared: 2
        subjects:
          - kind: User
            name: bob@example.com
          - kind: ServiceAccount
            name: pipeline
    tiers:
      - name: gpu-workload
        value: 100000
    taints:
      - key: nvidia.com/gpu
        value: present
        effect: NoSchedule
  delegate_to: localhost
  run_once: true

- name: Remove team C's quota and RBAC, keep its namespace
  kubegpu.nvidia.k8s_gpu_tenants:
    tenants:
      - namespace: ml-c
        state: absent
"""

RETURN = r"""
changed:
  description: Whether anything was (or, in check mode, would be) written.
  returned: always
  type: bool
changes:
  description: The writes made (or, in check mode, that would be), in order.
  returned: success
  type: list
  elements: dict
  sample: [{"action": "create", "kind": "Namespace", "name": "ml-a"},
           {"action": "create", "kind": "ResourceQuota", "name": "gpu-tenant-quota", "namespace": "ml-a"}]
tenants:
  description: One entry per declared tenant, with its C(namespace), C(state), C(tier) and C(quota).
  returned: success
  type: list
  elements: dict
capacity:
  description: Per C(nvidia.com/) resource with a quota, the C(quota) total and what the nodes advertise (C(allocatable)).
  returned: success
  type: list
  elements: dict
  sample: [{"resource": "nvidia.com/gpu", "quota": 8, "allocatable": 8}]
report:
  description: One line per tenant, per C(nvidia.com/) resource with a quota, per write and per undeclared namespace.
  returned: success
  type: list
  elements: str
  sample: ["ml-a: nvidia.com/gpu=8; 1 subject(s); tier gpu-workload", "create Namespace ml-a"]
undeclared:
  description: Namespaces labelled as tenants that no declaration names; left as they are.
  returned: success
  type: list
  elements: str
applied:
  description: When a write failed, the writes made before it.
  returned: when a write fails
  type: list
  elements: dict
not_applied:
  description: When a write failed, that write and those after it.
  returned: when a write fails
  type: list
  elements: dict
error_kind:
  description:
    - On failure, V(input) a declaration the module cannot apply (nothing was written), V(api) / V(conflict) /
      V(timeout) the API server refused or did not answer, V(dependency) the C(kubernetes) library is missing,
      V(bug) a defect of the collection.
  returned: failure (except Ansible's own argument errors)
  type: str
api_requests:
  description: API requests made, counted by verb, retries included.
  returned: always
  type: dict
  sample: {"list": 6}
diff:
  description: One entry per object written, its owned fields before and after (with C(--diff)).
  returned: when diff mode is on
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_tenants
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import run_module
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import (
    AUTH_ARG_SPEC, HAS_KUBERNETES, K8S_IMPORT_ERROR, ApiSession, get_api_client)


def main():
    argument_spec = dict(AUTH_ARG_SPEC)
    argument_spec.update(
        # the values are checked by gpu_tenants.check_declarations (every problem in one message)
        tenants=dict(type="list", elements="dict", default=[], options=dict(
            namespace=dict(type="str", required=True),
            quota=dict(type="dict", default={}),
            subjects=dict(type="list", elements="dict", default=[]),
            tier=dict(type="str"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            delete_namespace=dict(type="bool", default=False),
        )),
        tiers=dict(type="list", elements="dict", default=[], options=dict(
            name=dict(type="str", required=True),
            value=dict(type="int", required=True),
            description=dict(type="str"),
            preemption_policy=dict(type="str", choices=["PreemptLowerPriority", "Never"],
                                   default="PreemptLowerPriority"),
        )),
        taints=dict(type="list", elements="dict", default=[], options=dict(
            key=dict(type="str", required=True, no_log=False),
            value=dict(type="str"),
            effect=dict(type="str", required=True),
        )),
        capacity_check=dict(type="str", choices=["warn", "fail", "ignore"], default="warn"),
        capacity=dict(type="list", elements="dict", default=[]),
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
        tenants, tiers, tolerations = gpu_tenants.check_declarations(params["tenants"], params["tiers"],
                                                                     params["taints"])
        api = state["api"] = ApiSession(get_api_client(params), retries=params["retries"],
                                        request_timeout=params["request_timeout"])
        known = params["capacity"]
        namespaces, priority_classes, objects, nodes = gpu_tenants.read_cluster(api, nodes=not known)
        allocatable = gpu_tenants.rows_allocatable(known) if known else gpu_tenants.node_allocatable(nodes)
        capacity, warnings = gpu_tenants.check_capacity(tenants, allocatable, params["capacity_check"])
        plan = gpu_tenants.Plan(tenants, tiers, tolerations, namespaces, priority_classes, objects)
        for text in warnings:
            module.warn(text)
        for name in plan.undeclared:
            module.warn("namespace %s is labelled as a GPU tenant (%s) but no tenant declares it: left as it is; "
                        "declare it with state: absent to remove its quota and RBAC" % (name, gpu_tenants.TENANT_LABEL))
        if not module.check_mode:
            gpu_tenants.apply_plan(api, plan)
        result = dict(changed=plan.changed, changes=[c.to_result() for c in plan.changes], capacity=capacity,
                      undeclared=plan.undeclared, api_requests=api.counts,
                      tenants=[{"namespace": t["namespace"], "state": t["state"], "tier": t["tier"],
                                "quota": t["quota"]} for t in tenants])
        result["report"] = gpu_tenants.report(tenants, plan, capacity, module.check_mode)
        if module._diff:
            result["diff"] = [c.diff() for c in plan.changes]
        return result

    run_module(module, work, extra)


if __name__ == "__main__":
    main()
