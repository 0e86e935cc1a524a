"""The API resources the test server serves, as discovery describes them."""

from dataclasses import dataclass, field
from typing import Tuple

RW = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
STATUS_VERBS = ("get", "patch", "update")


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    name: str  # plural, as in the URL
    kind: str
    namespaced: bool
    short_names: Tuple[str, ...] = ()
    verbs: Tuple[str, ...] = RW
    subresources: Tuple[str, ...] = ()
    categories: Tuple[str, ...] = ()
    # resources whose `status` is written only through the status subresource
    generation: bool = False
    singular: str = field(default="")
    # a custom resource: served (URLs and discovery) only while this CustomResourceDefinition exists, as the
    # apiextensions-apiserver serves a CRD's resource (staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/
    # customresource_handler.go answers 404 for a resource whose CRD it does not find)
    crd: str = field(default="")

    @property
    def group_version(self):
        return "%s/%s" % (self.group, self.version) if self.group else self.version

    @property
    def singular_name(self):
        return self.singular or self.kind.lower()

    @property
    def has_status(self):
        return "status" in self.subresources

    @property
    def qualified(self):
        """`nodes` or `daemonsets.apps`, the way Status messages name a resource."""
        return "%s.%s" % (self.name, self.group) if self.group else self.name


ALL = "all"

RESOURCES = [
    Resource("", "v1", "namespaces", "Namespace", False, ("ns",),
             verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
             subresources=("status",)),
    Resource("", "v1", "nodes", "Node", False, ("no",), subresources=("status",)),
    Resource("", "v1", "configmaps", "ConfigMap", True, ("cm",)),
    Resource("", "v1", "secrets", "Secret", True),
    Resource("", "v1", "serviceaccounts", "ServiceAccount", True, ("sa",)),
    Resource("", "v1", "services", "Service", True, ("svc",), subresources=("status",),
             categories=(ALL,)),
    Resource("", "v1", "events", "Event", True, ("ev",)),
    Resource("", "v1", "pods", "Pod", True, ("po",),
             subresources=("status", "log", "eviction"), categories=(ALL,)),
    Resource("", "v1", "resourcequotas", "ResourceQuota", True, ("quota",), subresources=("status",)),
    Resource("apps", "v1", "daemonsets", "DaemonSet", True, ("ds",), subresources=("status",),
             categories=(ALL,), generation=True),
    Resource("apps", "v1", "deployments", "Deployment", True, ("deploy",), subresources=("status",),
             categories=(ALL,), generation=True),
    Resource("apps", "v1", "replicasets", "ReplicaSet", True, ("rs",), subresources=("status",),
             categories=(ALL,), generation=True),
    Resource("batch", "v1", "jobs", "Job", True, subresources=("status",), categories=(ALL,),
             generation=True),
    Resource("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False),
    Resource("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
    Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
    Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
    Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, ("pc",)),
    Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ("pdb",),
             subresources=("status",), generation=True),
    # Dynamic Resource Allocation, GA in 1.34 (staging/src/k8s.io/api/resource/v1/types.go); see dra.py
    Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False, generation=True),
    Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True, subresources=("status",)),
    Resource("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True),
    Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False),
    # stored; of the resources CRDs define, only those below are served, each while its CRD exists
    Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False,
             ("crd", "crds"), subresources=("status",), generation=True),
    # the Prometheus Operator's ServiceMonitor (the dcgm_exporter role applies one where the CRD exists)
    Resource("monitoring.coreos.com", "v1", "servicemonitors", "ServiceMonitor", True, ("smon",),
             generation=True, crd="servicemonitors.monitoring.coreos.com"),
    # NVIDIA's DRA driver's ComputeDomain part (kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1 chart
    # crds/resource.nvidia.com_computedomains.yaml, with a status subresource, and _computedomaincliques.yaml)
    Resource("resource.nvidia.com", "v1beta1", "computedomains", "ComputeDomain", True, subresources=("status",),
             generation=True, crd="computedomains.resource.nvidia.com"),
    Resource("resource.nvidia.com", "v1beta1", "computedomaincliques", "ComputeDomainClique", True,
             generation=True, crd="computedomaincliques.resource.nvidia.com"),
]

SUBRESOURCE_KIND = {"status": None, "log": "Pod", "eviction": "Eviction"}
SUBRESOURCE_VERBS = {"status": STATUS_VERBS, "log": ("get",), "eviction": ("create",)}

BY_PATH = {(r.group, r.version, r.name): r for r in RESOURCES}
BY_KIND = {(r.group, r.kind): r for r in RESOURCES}


def _served(res, served):
    return served is None or served(res)


def group_versions(served=None):
    """{group: [versions]} in a stable order, the legacy core group excluded; ``served(res)`` says whether a
    custom resource is served now (None: every resource)."""
    groups = {}
    for res in RESOURCES:
        if res.group and _served(res, served):
            versions = groups.setdefault(res.group, [])
            if res.version not in versions:
                versions.append(res.version)
    return groups


def resource_list(group, version, served=None):
    """The APIResourceList body for /api/v1 or /apis/<group>/<version>, or None."""
    items = []
    for res in RESOURCES:
        if res.group != group or res.version != version or not _served(res, served):
            continue
        entry = {
            "name": res.name,
            "singularName": res.singular_name,
            "namespaced": res.namespaced,
            "kind": res.kind,
            "verbs": list(res.verbs),
        }
        if res.short_names:
            entry["shortNames"] = list(res.short_names)
        if res.categories:
            entry["categories"] = list(res.categories)
        items.append(entry)
        for sub in res.subresources:
            sub_entry = {
                "name": "%s/%s" % (res.name, sub),
                "singularName": "",
                "namespaced": res.namespaced,
                "kind": SUBRESOURCE_KIND[sub] or res.kind,
                "verbs": list(SUBRESOURCE_VERBS[sub]),
            }
            if sub == "eviction":
                sub_entry["group"] = "policy"
                sub_entry["version"] = "v1"
            items.append(sub_entry)
    if not items:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "%s/%s" % (group, version) if group else version,
        "resources": items,
    }
