# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU tenants: teams' namespaces with GPU quotas, RBAC, priority tiers and default tolerations.

``check_declarations()`` validates the declarations (tenants, priority tiers, the GPU nodes' taints) and
returns them normalised, or raises one ``InputError`` naming every problem. ``check_capacity()`` compares
the sum of the quotas per resource with what the nodes advertise. ``Plan`` works out, from what the cluster
holds (one listing per kind), which objects to create, update or delete, and ``apply_plan()`` writes them,
in an order where nothing refers to what does not exist yet.

Kubernetes rules followed (REFERENCE.md 8.4; kubernetes/kubernetes):

- A ResourceQuota limits an extended resource only as ``requests.<resource>``
  (``pkg/quota/v1/evaluator/core/pods.go``, ``isExtendedResourceNameForQuota``); DRA devices per device class
  as ``<class>.deviceclass.resource.k8s.io/devices`` and claims as ``count/resourceclaims.resource.k8s.io``
  (``pkg/quota/v1/evaluator/core/resource_claims.go``).
- Namespace names are DNS-1123 labels; PriorityClass names DNS-1123 subdomains, not starting with
  ``system-``, values at most 1000000000 (``pkg/apis/scheduling/validation/validation.go``), and the value of
  an existing PriorityClass cannot change.
- RBAC subjects are ``User``, ``Group`` (API group ``rbac.authorization.k8s.io``) and ``ServiceAccount``
  (with a namespace) (``pkg/apis/rbac/validation/validation.go`` ``ValidateRoleBindingSubject``).
- The namespace annotation ``scheduler.alpha.kubernetes.io/defaultTolerations`` (a JSON list) gives new pods
  of the namespace these tolerations where the API server enables ``PodTolerationRestriction``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import K8sError, quote

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "kubegpu.nvidia"
# what marks the objects of a tenant (the device plugin role's objects carry the managed-by label as well)
TENANT_LABEL = "kubegpu.nvidia/tenant"
DEFAULT_TOLERATIONS = "scheduler.alpha.kubernetes.io/defaultTolerations"
QUOTA_NAME = "gpu-tenant-quota"
ROLE_NAME = "gpu-tenant"
BINDING_NAME = "gpu-tenant"
RBAC_GROUP = "rbac.authorization.k8s.io"
SUBJECT_KINDS = ("User", "Group", "ServiceAccount")
HIGHEST_USER_PRIORITY = 1000000000
PREEMPTION_POLICIES = ("PreemptLowerPriority", "Never")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TENANT_KEYS = ("namespace", "quota", "subjects", "tier", "state", "delete_namespace")
TIER_KEYS = ("name", "value", "description", "preemption_policy")
DEFAULT_TIER_DESCRIPTION = "Priority for GPU workloads, above ordinary pods."

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# nvidia.com/mig-<profile>: "+" of a profile written "." (k8s-device-plugin), optional ".shared" (renameByDefault)
MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-([0-9]+c\.)?[0-9]+g\.[0-9]+gb(\.(me|me\.all|gfx))?(-me)?(\.shared)?$")
GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared")
DRA_DEVICES_SUFFIX = ".deviceclass.resource.k8s.io/devices"
DRA_CLAIMS = "count/resourceclaims.resource.k8s.io"

# What a team's subjects may do in their namespace: run and watch workloads, nothing cluster-wide
# (no DaemonSets: they would place pods on every node).
WORKLOAD_RULES = [
    {"apiGroups": [""], "resources": ["pods", "pods/log", "pods/exec", "pods/attach", "pods/portforward",
                                      "configmaps", "secrets", "services", "persistentvolumeclaims"],
     "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]},
    {"apiGroups": [""], "resources": ["events", "resourcequotas"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets", "replicasets"],
     "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]},
    {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"],
     "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims", "resourceclaimtemplates"],
     "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]},
]

NAMESPACES = "/api/v1/namespaces"
PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
MERGE_PATCH = "application/merge-patch+json"


class Kind:
    """Where a kind lives in the API."""

    def __init__(self, kind, api_version, plural, group_path, namespaced):
        self.kind = kind
        self.api_version = api_version
        self.plural = plural
        self.group_path = group_path
        self.namespaced = namespaced

    def collection(self, namespace=None):
        if self.namespaced and namespace:
            return "%s/namespaces/%s/%s" % (self.group_path, quote(namespace), self.plural)
        return "%s/%s" % (self.group_path, self.plural)

    def path(self, name, namespace=None):
        return "%s/%s" % (self.collection(namespace), quote(name))


NAMESPACE = Kind("Namespace", "v1", "namespaces", "/api/v1", False)
PRIORITY_CLASS = Kind("PriorityClass", "scheduling.k8s.io/v1", "priorityclasses", "/apis/scheduling.k8s.io/v1", False)
QUOTA = Kind("ResourceQuota", "v1", "resourcequotas", "/api/v1", True)
ROLE = Kind("Role", "rbac.authorization.k8s.io/v1", "roles", "/apis/rbac.authorization.k8s.io/v1", True)
BINDING = Kind("RoleBinding", "rbac.authorization.k8s.io/v1", "rolebindings", "/apis/rbac.authorization.k8s.io/v1",
               True)
TENANT_KINDS = (QUOTA, ROLE, BINDING)


def _type_name(value):
    return {bool: "a boolean", int: "an integer", float: "a number", dict: "a dict", list: "a list"}.get(
        type(value), "a string" if isinstance(value, str) else type(value).__name__)


def quota_key(resource):
    """The ResourceQuota key of a resource name (``requests.`` for extended resources; DRA keys as they are)."""
    if resource == DRA_CLAIMS or resource.endswith(DRA_DEVICES_SUFFIX):
        return resource
    return "requests." + resource


def resource_problem(resource):
    """Why a quota key is not a GPU resource name this collection knows, or None."""
    if not isinstance(resource, str) or not resource:
        return "a quota key must be a resource name, got %r" % (resource,)
    if resource.startswith("requests.") or resource.startswith("limits."):
        return ("quota key %s: give the resource name (%s); the quota's requests. form is written for it"
                % (resource, resource.split(".", 1)[1]))
    if resource in GPU_RESOURCES or MIG_RESOURCE.match(resource) or resource == DRA_CLAIMS:
        return None
    if resource.endswith(DRA_DEVICES_SUFFIX):
        device_class = resource[:-len(DRA_DEVICES_SUFFIX)]
        if DNS_SUBDOMAIN.match(device_class) and len(device_class) <= 253:
            return None
        return "quota key %s: %r is not a DeviceClass name (a DNS-1123 subdomain)" % (resource, device_class)
    return ("quota key %s is not a GPU resource: use nvidia.com/gpu, nvidia.com/gpu.shared, nvidia.com/mig-<profile>, "
            "<deviceclass>%s or %s" % (resource, DRA_DEVICES_SUFFIX, DRA_CLAIMS))


def quota_count(value):
    """A quota's count as an int, or None when it is not a non-negative integer."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def tolerations_for(taints):
    """The tolerations of the GPU nodes' taints (``k8s_gpu_node_taints``): Equal with a value, else Exists."""
    out = []
    for taint in taints:
        tol = {"key": taint["key"], "effect": taint["effect"]}
        if taint.get("value") not in (None, ""):
            tol.update(operator="Equal", value=str(taint["value"]))
        else:
            tol["operator"] = "Exists"
        out.append(tol)
    return out


def _check_taints(taints, problems):
    if not isinstance(taints, list):
        problems.append("taints must be a list of {key, value, effect}, got %s" % _type_name(taints))
        return []
    good = []
    for i, taint in enumerate(taints):
        if not isinstance(taint, dict) or not taint.get("key") or not isinstance(taint.get("key"), str):
            problems.append("taints[%d] must be a dict with a key, got %r" % (i, taint))
            continue
        if taint.get("effect") not in TAINT_EFFECTS:
            problems.append("taints[%d] (%s): effect must be one of %s, got %r"
                            % (i, taint["key"], ", ".join(TAINT_EFFECTS), taint.get("effect")))
            continue
        good.append(taint)
    return good


def _check_tiers(tiers, problems):
    if not isinstance(tiers, list):
        problems.append("priority tiers must be a list of {name, value}, got %s" % _type_name(tiers))
        return {}
    out = {}
    for i, tier in enumerate(tiers):
        where = "priority tier %d" % (i + 1)
        if not isinstance(tier, dict):
            problems.append("%s must be a dict with name and value, got %s" % (where, _type_name(tier)))
            continue
        tier = {k: v for k, v in tier.items() if v is not None}
        unknown = sorted(set(tier) - set(TIER_KEYS))
        name = tier.get("name")
        if isinstance(name, str) and name:
            where = "priority tier %s" % name
        if unknown:
            problems.append("%s: unknown keys %s (known: %s)" % (where, ", ".join(unknown), ", ".join(TIER_KEYS)))
        if not isinstance(name, str) or not DNS_SUBDOMAIN.match(name) or len(name) > 253:
            problems.append("%s: name %r is not a PriorityClass name (a DNS-1123 subdomain)" % (where, name))
            continue
        if name.startswith("system-"):
            problems.append("%s: names starting with system- are reserved for the system's PriorityClasses" % where)
            continue
        value = tier.get("value")
        if isinstance(value, str) and re.match(r"^-?[0-9]+$", value.strip()):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value > HIGHEST_USER_PRIORITY:
            problems.append("%s: value must be an integer of at most %d, got %r" % (where, HIGHEST_USER_PRIORITY, value))
            continue
        policy = tier.get("preemption_policy") or "PreemptLowerPriority"
        if policy not in PREEMPTION_POLICIES:
            problems.append("%s: preemption_policy must be one of %s, got %r"
                            % (where, ", ".join(PREEMPTION_POLICIES), policy))
            continue
        if name in out:
            problems.append("%s is declared twice" % where)
            continue
        description = tier.get("description")
        out[name] = {"name": name, "value": value, "preemption_policy": policy,
                     "description": DEFAULT_TIER_DESCRIPTION if description is None else str(description)}
    return out


def _check_subjects(subjects, where, namespace, problems):
    if subjects is None:
        return []
    if not isinstance(subjects, list):
        problems.append("%s: subjects must be a list of {kind, name}, got %s" % (where, _type_name(subjects)))
        return []
    out = []
    for i, subject in enumerate(subjects):
        if not isinstance(subject, dict):
            problems.append("%s: subjects[%d] must be a dict with kind and name, got %s"
                            % (where, i, _type_name(subject)))
            continue
        subject = {k: v for k, v in subject.items() if v is not None}
        kind, name = subject.get("kind"), subject.get("name")
        unknown = sorted(set(subject) - {"kind", "name", "namespace"})
        if unknown:
            problems.append("%s: subjects[%d]: unknown keys %s (known: kind, name, namespace)"
                            % (where, i, ", ".join(unknown)))
            continue
        if kind not in SUBJECT_KINDS:
            problems.append("%s: subjects[%d]: kind %r is not a Kubernetes subject kind (%s)"
                            % (where, i, kind, ", ".join(SUBJECT_KINDS)))
            continue
        if not isinstance(name, str) or not name:
            problems.append("%s: subjects[%d] (%s): name must be a non-empty string" % (where, i, kind))
            continue
        if kind == "ServiceAccount":
            sa_namespace = subject.get("namespace") or namespace
            if not isinstance(sa_namespace, str) or not DNS_LABEL.match(sa_namespace) or len(sa_namespace) > 63:
                problems.append("%s: subjects[%d] (ServiceAccount %s): namespace %r is not a namespace name"
                                % (where, i, name, sa_namespace))
                continue
            if not DNS_SUBDOMAIN.match(name) or len(name) > 253:
                problems.append("%s: subjects[%d]: %r is not a ServiceAccount name" % (where, i, name))
                continue
            entry = {"kind": kind, "name": name, "namespace": sa_namespace}
        else:
            if subject.get("namespace"):
                problems.append("%s: subjects[%d] (%s %s): only a ServiceAccount has a namespace"
                                % (where, i, kind, name))
                continue
            entry = {"kind": kind, "apiGroup": RBAC_GROUP, "name": name}
        if entry in out:
            problems.append("%s: subjects[%d] (%s %s) is listed twice" % (where, i, kind, name))
            continue
        out.append(entry)
    return out


def _check_quota(quota, where, problems):
    if quota is None:
        return {}
    if not isinstance(quota, dict):
        problems.append("%s: quota must be a dict {resource name: count}, got %s" % (where, _type_name(quota)))
        return {}
    out = {}
    for resource in sorted(quota, key=str):
        problem = resource_problem(resource)
        if problem:
            problems.append("%s: %s" % (where, problem))
            continue
        count = quota_count(quota[resource])
        if count is None:
            problems.append("%s: quota %s must be a non-negative integer, got %r" % (where, resource, quota[resource]))
            continue
        out[resource] = count
    return out


def check_declarations(tenants, tiers, taints):
    """``(tenants, tiers, tolerations)`` normalised, or ``InputError`` naming every problem on one line.

    Each tenant: ``namespace``, ``quota`` ({resource: count}), ``subjects`` (RBAC subjects), ``tier`` (or None),
    ``state`` (present / absent), ``delete_namespace``. ``tiers``: {name: {name, value, description,
    preemption_policy}}.
    """
    problems = []
    taints = _check_taints(taints, problems)
    tiers = _check_tiers(tiers, problems)
    out = []
    owners = {}
    if not isinstance(tenants, list):
        problems.append("tenants must be a list, got %s" % _type_name(tenants))
        tenants = []
    for i, tenant in enumerate(tenants):
        where = "tenant %d" % (i + 1)
        if not isinstance(tenant, dict):
            problems.append("%s must be a dict with a namespace, got %s" % (where, _type_name(tenant)))
            continue
        tenant = {k: v for k, v in tenant.items() if v is not None}
        namespace = tenant.get("namespace")
        if isinstance(namespace, str) and namespace:
            where = "tenant %s" % namespace
        unknown = sorted(set(tenant) - set(TENANT_KEYS))
        if unknown:
            problems.append("%s: unknown keys %s (known: %s)" % (where, ", ".join(unknown), ", ".join(TENANT_KEYS)))
        if not isinstance(namespace, str) or not DNS_LABEL.match(namespace) or len(namespace) > 63:
            problems.append("%s: namespace %r is not a DNS-1123 label (lower case letters, digits and '-', "
                            "starting and ending with a letter or digit, at most 63 characters)" % (where, namespace))
            continue
        if namespace in owners:
            problems.append("tenants %d and %d both claim namespace %s" % (owners[namespace], i + 1, namespace))
            continue
        owners[namespace] = i + 1
        state = tenant.get("state") or "present"
        if state not in ("present", "absent"):
            problems.append("%s: state must be present or absent, got %r" % (where, state))
            continue
        delete_namespace = tenant.get("delete_namespace", False)
        if not isinstance(delete_namespace, bool):
            problems.append("%s: delete_namespace must be true or false, got %r" % (where, delete_namespace))
            continue
        if delete_namespace and state != "absent":
            problems.append("%s: delete_namespace applies only with state: absent" % where)
            continue
        quota = _check_quota(tenant.get("quota"), where, problems)
        subjects = _check_subjects(tenant.get("subjects"), where, namespace, problems)
        tier = tenant.get("tier")
        if tier not in (None, ""):
            if not isinstance(tier, str) or tier not in tiers:
                problems.append("%s: tier %r names no declared priority tier (%s)"
                                % (where, tier, ", ".join(sorted(tiers)) or "none declared"))
                continue
        out.append({"namespace": namespace, "quota": quota, "subjects": subjects, "tier": tier or None,
                    "state": state, "delete_namespace": delete_namespace})
    if problems:
        raise InputError("GPU tenants: %s" % "; ".join(problems), problems=problems)
    return out, tiers, tolerations_for(taints)


def _count(value):
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def node_allocatable(nodes):
    """{resource: total} of every ``nvidia.com/`` resource the nodes advertise (``status.allocatable``)."""
    totals = {}
    for node in nodes:
        for key, value in (((node.get("status") or {}).get("allocatable")) or {}).items():
            if key.startswith("nvidia.com/"):
                totals[key] = totals.get(key, 0) + _count(value)
    return totals


def rows_allocatable(rows):
    """{resource: total} of the ``nvidia.com/`` resources in the device plugin role's capacity rows
    (``k8s_device_plugin_capacity``: per GPU node, what the node model ``expected`` it to advertise under its
    configuration, else its ``allocatable`` as the role last read it). The model's figure counts: in check mode
    (nothing applied) a new node advertises nothing yet, and a node that falls short is the device plugin role's
    finding, not the quotas'."""
    totals = {}
    for row in rows:
        resources = row.get("expected")
        if resources is None:
            resources = row.get("allocatable") or {}
        for key, value in resources.items():
            if key.startswith("nvidia.com/"):
                totals[key] = totals.get(key, 0) + _count(value)
    return totals


def check_capacity(tenants, allocatable, mode="warn"):
    """Quota totals per resource against what the nodes advertise.

    Returns ``(rows, warnings)``: rows ``{resource, quota, allocatable}`` per ``nvidia.com/`` resource with a
    quota (DRA device counts are not checked: the node model does not know them). A positive quota on a resource
    no node advertises raises ``InputError`` unless ``mode`` is ``ignore``; quotas above what the nodes advertise
    are warnings, or an ``InputError`` with ``mode`` ``fail``.
    """
    totals = {}
    for tenant in tenants:
        if tenant["state"] != "present":
            continue
        for resource, count in tenant["quota"].items():
            if resource.startswith("nvidia.com/"):
                totals[resource] = totals.get(resource, 0) + count
    rows, missing, over = [], [], []
    for resource in sorted(totals):
        have = allocatable.get(resource, 0)
        rows.append({"resource": resource, "quota": totals[resource], "allocatable": have})
        if mode == "ignore" or not totals[resource]:
            continue
        if not have:
            missing.append(resource)
        elif totals[resource] > have:
            over.append("%s: quotas %d, nodes %d" % (resource, totals[resource], have))
    if missing:
        raise InputError("GPU tenants: no node advertises %s, so a quota on it limits nothing (offered: %s); "
                         "check the resource names or the device plugin's sharing and MIG settings"
                         % (", ".join(missing), ", ".join(sorted(allocatable)) or "no nvidia.com/ resources"))
    warnings = []
    if over:
        text = ("GPU tenants: the quotas add up to more than the GPU nodes advertise (%s): a quota larger than the "
                "cluster hides the real limit" % "; ".join(over))
        if mode == "fail":
            raise InputError(text)
        warnings.append(text)
    return rows, warnings


def _labels(namespace):
    return {MANAGED_BY_LABEL: MANAGED_BY, TENANT_LABEL: namespace}


def desired_objects(tenant, tolerations):
    """The namespaced objects of a present tenant: {(Kind, name): body}."""
    namespace = tenant["namespace"]
    meta = {"name": None, "namespace": namespace, "labels": _labels(namespace)}
    out = {}
    if tenant["quota"]:
        out[(QUOTA, QUOTA_NAME)] = {
            "apiVersion": QUOTA.api_version, "kind": QUOTA.kind, "metadata": dict(meta, name=QUOTA_NAME),
            "spec": {"hard": {quota_key(r): str(c) for r, c in tenant["quota"].items()}}}
    if tenant["subjects"]:
        out[(ROLE, ROLE_NAME)] = {
            "apiVersion": ROLE.api_version, "kind": ROLE.kind, "metadata": dict(meta, name=ROLE_NAME),
            "rules": WORKLOAD_RULES}
        out[(BINDING, BINDING_NAME)] = {
            "apiVersion": BINDING.api_version, "kind": BINDING.kind, "metadata": dict(meta, name=BINDING_NAME),
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": ROLE_NAME},
            "subjects": tenant["subjects"]}
    return out


def _content(kind, obj):
    """The part of an object the plan compares and shows in a diff."""
    if obj is None:
        return {}
    meta = obj.get("metadata") or {}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k in (MANAGED_BY_LABEL, TENANT_LABEL)}
    if kind is NAMESPACE:
        annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k == DEFAULT_TOLERATIONS}
        return {"metadata": {"labels": labels, "annotations": annotations}}
    if kind is QUOTA:
        return {"metadata": {"labels": labels}, "spec": {"hard": dict((obj.get("spec") or {}).get("hard") or {})}}
    if kind is ROLE:
        return {"metadata": {"labels": labels}, "rules": obj.get("rules") or []}
    if kind is BINDING:
        return {"metadata": {"labels": labels}, "roleRef": obj.get("roleRef"), "subjects": obj.get("subjects") or []}
    return {"metadata": {"labels": labels}, "value": obj.get("value"), "description": obj.get("description", ""),
            "preemptionPolicy": obj.get("preemptionPolicy", "PreemptLowerPriority"),
            "globalDefault": obj.get("globalDefault", False)}


class Change:
    """One write: ``action`` create / update / delete of ``kind`` ``name`` (in ``namespace``)."""

    def __init__(self, action, kind, name, namespace=None, body=None, before=None, after=None):
        self.action = action
        self.kind = kind
        self.name = name
        self.namespace = namespace
        self.body = body
        self.before = before
        self.after = after

    @property
    def label(self):
        return "%s %s%s" % (self.kind.kind, "%s/" % self.namespace if self.namespace else "", self.name)

    def diff(self):
        return {"before_header": self.label, "after_header": self.label,
                "before": self.before or {}, "after": self.after or {}}

    def to_result(self):
        out = {"action": self.action, "kind": self.kind.kind, "name": self.name}
        if self.namespace:
            out["namespace"] = self.namespace
        return out


def _patch_for(before, after):
    """A JSON merge patch turning ``before`` into ``after`` for the keys the plan owns."""
    patch = {}
    for key, value in after.items():
        old = before.get(key)
        if isinstance(value, dict) and isinstance(old, dict) and key != "hard":
            sub = _patch_for(old, value)
            for gone in set(old) - set(value):
                sub[gone] = None
            if sub:
                patch[key] = sub
        elif key == "hard":
            sub = {k: v for k, v in value.items() if old is None or old.get(k) != v}
            for gone in set(old or {}) - set(value):
                sub[gone] = None
            if sub:
                patch[key] = sub
        elif value != old:
            patch[key] = value
    return patch


class Plan:
    """The writes that bring the cluster to the declarations.

    ``namespaces``: every namespace (one listing); ``priority_classes``: every PriorityClass; ``objects``: the
    ResourceQuotas, Roles and RoleBindings carrying the tenant label (one listing per kind, every namespace).
    Raises ``InputError`` before any write for what cannot be applied: a declared namespace another tool
    manages, a tier whose PriorityClass exists with another value.
    """

    def __init__(self, tenants, tiers, tolerations, namespaces, priority_classes, objects):
        self.changes = []
        self.undeclared = []
        problems = []
        by_name = {ns["metadata"]["name"]: ns for ns in namespaces}
        declared = {t["namespace"] for t in tenants}
        annotation = json.dumps(tolerations, sort_keys=True, separators=(",", ":")) if tolerations else None

        pcs = {pc["metadata"]["name"]: pc for pc in priority_classes}
        for name in sorted(tiers):
            tier = tiers[name]
            after = {"metadata": {"labels": {MANAGED_BY_LABEL: MANAGED_BY}}, "value": tier["value"],
                     "description": tier["description"], "preemptionPolicy": tier["preemption_policy"],
                     "globalDefault": False}
            existing = pcs.get(name)
            if existing is None:
                body = {"apiVersion": PRIORITY_CLASS.api_version, "kind": PRIORITY_CLASS.kind,
                        "metadata": {"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
                        "value": tier["value"], "description": tier["description"],
                        "preemptionPolicy": tier["preemption_policy"], "globalDefault": False}
                self.changes.append(Change("create", PRIORITY_CLASS, name, body=body, after=after))
                continue
            before = _content(PRIORITY_CLASS, existing)
            before["metadata"]["labels"] = {k: v for k, v in before["metadata"]["labels"].items()
                                            if k == MANAGED_BY_LABEL}
            if existing.get("value") != tier["value"]:
                problems.append("PriorityClass %s exists with value %s, the tier declares %s: a PriorityClass's value "
                                "cannot change (delete it or name another tier)" % (name, existing.get("value"),
                                                                                    tier["value"]))
                continue
            if existing.get("preemptionPolicy", "PreemptLowerPriority") != tier["preemption_policy"]:
                problems.append("PriorityClass %s exists with preemptionPolicy %s, the tier declares %s: it cannot "
                                "change" % (name, existing.get("preemptionPolicy"), tier["preemption_policy"]))
                continue
            after["globalDefault"] = before["globalDefault"]
            if before != after:
                self.changes.append(Change("update", PRIORITY_CLASS, name, body=_patch_for(before, after),
                                           before=before, after=after))

        existing_objects = {}
        for kind, items in objects.items():
            for obj in items:
                meta = obj["metadata"]
                existing_objects.setdefault(meta.get("namespace"), {})[(kind, meta["name"])] = obj

        deletes = []
        for tenant in tenants:
            namespace = tenant["namespace"]
            ns = by_name.get(namespace)
            ns_labels = ((ns or {}).get("metadata") or {}).get("labels") or {}
            manager = ns_labels.get(MANAGED_BY_LABEL)
            if tenant["state"] == "present":
                if ns is not None and manager not in (None, MANAGED_BY):
                    problems.append("namespace %s is managed by %s (label %s): not taking it over"
                                    % (namespace, manager, MANAGED_BY_LABEL))
                    continue
                ns_after = {"metadata": {"labels": _labels(namespace),
                                         "annotations": {DEFAULT_TOLERATIONS: annotation} if annotation else {}}}
                if ns is None:
                    body = {"apiVersion": "v1", "kind": "Namespace",
                            "metadata": {"name": namespace, "labels": _labels(namespace),
                                         "annotations": ns_after["metadata"]["annotations"]}}
                    self.changes.append(Change("create", NAMESPACE, namespace, body=body, after=ns_after))
                else:
                    before = _content(NAMESPACE, ns)
                    if before != ns_after:
                        self.changes.append(Change("update", NAMESPACE, namespace, body=_patch_for(before, ns_after),
                                                   before=before, after=ns_after))
                want = desired_objects(tenant, tolerations)
                have = existing_objects.get(namespace, {})
                for (kind, name), body in sorted(want.items(), key=lambda item: TENANT_KINDS.index(item[0][0])):
                    after = _content(kind, body)
                    old = have.get((kind, name))
                    if old is None:
                        self.changes.append(Change("create", kind, name, namespace, body=body, after=after))
                        continue
                    before = _content(kind, old)
                    if before != after:
                        self.changes.append(Change("update", kind, name, namespace, body=_patch_for(before, after),
                                                   before=before, after=after))
                for (kind, name), old in sorted(have.items(), key=lambda item: (item[0][0].kind, item[0][1])):
                    if (kind, name) not in want:
                        deletes.append(Change("delete", kind, name, namespace, before=_content(kind, old)))
            else:
                for (kind, name), old in sorted(existing_objects.get(namespace, {}).items(),
                                                key=lambda item: (item[0][0].kind, item[0][1])):
                    deletes.append(Change("delete", kind, name, namespace, before=_content(kind, old)))
                if ns is not None and ns_labels.get(TENANT_LABEL) == namespace:
                    before = _content(NAMESPACE, ns)
                    if tenant["delete_namespace"]:
                        deletes.append(Change("delete", NAMESPACE, namespace, before=before))
                    else:
                        after = {"metadata": {"labels": {}, "annotations": {}}}
                        deletes.append(Change("update", NAMESPACE, namespace, body=_patch_for(before, after),
                                              before=before, after=after))
        if problems:
            raise InputError("GPU tenants: %s" % "; ".join(problems), problems=problems)
        # bindings before roles before quotas, namespaces last
        order = {BINDING: 0, ROLE: 1, QUOTA: 2, NAMESPACE: 3}
        self.changes += sorted(deletes, key=lambda c: order[c.kind])
        for ns in namespaces:
            meta = ns["metadata"]
            labels = meta.get("labels") or {}
            if labels.get(TENANT_LABEL) and meta["name"] not in declared:
                self.undeclared.append(meta["name"])
        self.undeclared.sort()

    @property
    def changed(self):
        return bool(self.changes)


def apply_plan(api, plan):
    """Send the plan's writes in order; returns the changes applied.

    A failed write raises ``K8sError`` naming it, what was applied before it and what was not.
    """
    applied = []
    for i, change in enumerate(plan.changes):
        kind = change.kind
        what = "%s %s" % ({"create": "creating", "update": "updating", "delete": "deleting"}[change.action],
                          change.label)
        try:
            if change.action == "create":
                api.request("create", what, "POST", kind.collection(change.namespace), body=change.body, decode=None,
                            exists_ok_on_retry=True)
            elif change.action == "update":
                api.request("patch", what, "PATCH", kind.path(change.name, change.namespace), body=change.body,
                            content_type=MERGE_PATCH, decode=None)
            else:
                api.request("delete", what, "DELETE", kind.path(change.name, change.namespace), decode=None,
                            missing_ok=True)
        except K8sError as exc:
            left = [c.label for c in plan.changes[i + 1:]]
            raise K8sError("%s; applied: %s; not applied: %s" % (
                exc.msg, ", ".join(c.label for c in applied) or "nothing",
                ", ".join([change.label] + left)), status=exc.status,
                applied=[c.to_result() for c in applied],
                not_applied=[c.to_result() for c in plan.changes[i:]], changed=bool(applied))
        applied.append(change)
    return applied


def read_cluster(api, nodes=True):
    """What the plan needs, in one listing per kind: (namespaces, priority classes, {Kind: objects}, nodes).

    ``nodes`` false: the nodes are not listed (their capacity is known), and the last item is ``[]``."""
    namespaces = api.list_all("listing namespaces", NAMESPACE.collection())
    priority_classes = api.list_all("listing PriorityClasses", PRIORITY_CLASS.collection())
    objects = {}
    for kind in TENANT_KINDS:
        objects[kind] = api.list_all("listing %ss" % kind.kind, kind.collection(), label_selector=TENANT_LABEL)
    nodes = api.list_all("listing nodes", "/api/v1/nodes") if nodes else []
    return namespaces, priority_classes, objects, nodes


def report(tenants, plan, capacity, check_mode=False):
    """Lines for the role's report: per tenant its quota and tier, the writes, the capacity, the undeclared."""
    lines = []
    for tenant in tenants:
        quota = ", ".join("%s=%d" % (r, c) for r, c in sorted(tenant["quota"].items())) or "no quota"
        if tenant["state"] == "absent":
            lines.append("%s: absent%s" % (tenant["namespace"], " (namespace deleted)" if tenant["delete_namespace"]
                                           else ""))
        else:
            lines.append("%s: %s; %d subject(s); tier %s"
                         % (tenant["namespace"], quota, len(tenant["subjects"]), tenant["tier"] or "none"))
    for row in capacity:
        lines.append("capacity %s: quotas %d of %d allocatable" % (row["resource"], row["quota"], row["allocatable"]))
    for change in plan.changes:
        lines.append("%s%s %s" % ("would " if check_mode else "", change.action, change.label))
    if not plan.changes:
        lines.append("no change")
    for name in plan.undeclared:
        lines.append("undeclared tenant namespace %s: kept (declare it with state: absent to remove its objects)"
                     % name)
    return lines
