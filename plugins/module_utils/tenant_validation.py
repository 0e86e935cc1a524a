# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The tenant path of the GPU validation: one pod per tenant namespace, without tolerations.

A tenant's pod asks for ``count`` of the tenant's GPU resource and carries no toleration: it lands on a GPU
node only when the API server gave it the namespace's default tolerations (``PodTolerationRestriction``) or the
extended resource's toleration (``ExtendedResourceToleration``). With ``product``, the pod selects the nodes
labelled ``nvidia.com/gpu.product=<product>`` (the label GPU Feature Discovery writes). It passes when it runs on
such a node and the tenant's ResourceQuota (``gpu-tenant-quota``) counts its request in ``status.used`` while it
runs, as the quota controller does for every pod not in a terminal phase (pkg/quota/v1/evaluator/core/pods.go).

A tenant whose resource is a DRA device-class quota key (``<class>.deviceclass.resource.k8s.io/devices``, the
key of a quota on the devices its claims request) takes the DRA path instead (``tenant_path``): a
ResourceClaimTemplate of the same name asks for ``count`` devices of that class, the pod uses it through a claim
and asks for no extended resource, and the quota's ``status.used`` of that key must count the claim's devices
while the pod runs (pkg/quota/v1/evaluator/core/resource_claims.go). The claim goes with the pod; the template
is deleted after it.

``check_tenants()`` checks the entries (one ``InputError`` naming each problem); ``TenantValidation.run()``
drives one run through an API object (``k8s_pods.PodAPI`` or a stand-in) with the clock and sleep passed in.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import re
import time

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_tenants import QUOTA_NAME
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_validation import (
    ValidationError, error_text, is_terminal, is_unschedulable, next_delay, pod_phase, scheduler_reason, truncate)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import quote

POD_NAME = "gpu-tenant-validation"
PRODUCT_LABEL = "nvidia.com/gpu.product"
# The ResourceQuota key of the devices a namespace's claims request of one device class (ResourceQuota docs,
# "Resource quota for dynamic resource allocation"; pkg/quota/v1/evaluator/core/resource_claims.go)
DRA_QUOTA_SUFFIX = ".deviceclass.resource.k8s.io/devices"
CLAIM_NAME = "gpu"
# DNS-1123 subdomain, the name of a DeviceClass (validation.go IsDNS1123Subdomain)
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# DNS-1123 label (k8s.io/apimachinery/pkg/util/validation/validation.go IsDNS1123Label)
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def tenant_path(resource):
    """The tenant path for ``resource``: ``("dra", <device class>)`` for a DRA device-class quota key,
    ``("device_plugin", resource)`` for an ``nvidia.com/`` extended resource, ``(None, None)`` for anything else."""
    if resource.endswith(DRA_QUOTA_SUFFIX):
        device_class = resource[:-len(DRA_QUOTA_SUFFIX)]
        if DNS_SUBDOMAIN.match(device_class) and len(device_class) <= 253:
            return "dra", device_class
        return None, None
    if resource.startswith("nvidia.com/"):
        return "device_plugin", resource
    return None, None


def quota_key(resource):
    """The key of ``gpu-tenant-quota`` that counts the pod: the DRA key itself, else ``requests.<resource>``."""
    return resource if tenant_path(resource)[0] == "dra" else "requests." + resource


def check_tenants(tenants):
    """The entries normalised ({namespace, resource, count, product}), or one InputError naming each problem."""
    problems, out, seen = [], [], set()
    for index, entry in enumerate(tenants):
        entry = entry or {}
        namespace = entry.get("namespace") or ""
        where = "tenant %s" % (namespace or "#%d" % (index + 1))
        if not (DNS_LABEL.match(namespace) and len(namespace) <= 63):
            problems.append("%s: namespace %r is not a DNS-1123 label" % (where, namespace))
        elif namespace in seen:
            problems.append("%s: listed twice" % where)
        seen.add(namespace)
        resource = entry.get("resource") or "nvidia.com/gpu"
        if tenant_path(resource)[0] is None:
            problems.append("%s: resource %s is not an nvidia.com/ GPU resource nor a DRA device-class quota key "
                            "(<class>%s)" % (where, resource, DRA_QUOTA_SUFFIX))
        count = entry.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            problems.append("%s: count must be a positive integer, not %r" % (where, count))
        out.append({"namespace": namespace, "resource": resource, "count": count,
                    "product": entry.get("product") or ""})
    if problems:
        raise InputError("GPU validation of the tenants: " + "; ".join(problems))
    return out


def build_pod(template, tenant):
    """The tenant's pod: ``template`` named ``POD_NAME`` in the tenant's namespace, without tolerations, asking
    for the tenant's resource in its first container (on the DRA path: the claim of ``build_claim_template``),
    with a node selector on the product when given."""
    pod = copy.deepcopy(template)
    pod.setdefault("apiVersion", "v1")
    pod.setdefault("kind", "Pod")
    meta = pod.setdefault("metadata", {})
    meta["name"] = POD_NAME
    meta["namespace"] = tenant["namespace"]
    spec = pod.setdefault("spec", {})
    spec.pop("tolerations", None)
    spec.pop("nodeName", None)
    if tenant["product"]:
        selector = dict(spec.get("nodeSelector") or {})
        selector[PRODUCT_LABEL] = tenant["product"]
        spec["nodeSelector"] = selector
    containers = spec.get("containers") or []
    if not containers:
        raise InputError("GPU validation of the tenants: the pod template has no container")
    resources = containers[0].setdefault("resources", {})
    limits = dict((key, value) for key, value in (resources.get("limits") or {}).items()
                  if not key.startswith("nvidia.com/"))
    if tenant_path(tenant["resource"])[0] == "dra":
        spec["resourceClaims"] = [{"name": CLAIM_NAME, "resourceClaimTemplateName": POD_NAME}]
        resources["claims"] = [{"name": CLAIM_NAME}]
        if limits:
            resources["limits"] = limits
        else:
            resources.pop("limits", None)
        return pod
    limits[tenant["resource"]] = tenant["count"]
    resources["limits"] = limits
    return pod


def build_claim_template(template, tenant):
    """The DRA path's ResourceClaimTemplate ``POD_NAME`` in the tenant's namespace, with the pod template's labels:
    one request ``gpu`` for exactly ``count`` devices of the tenant's device class; None on the other path."""
    path, device_class = tenant_path(tenant["resource"])
    if path != "dra":
        return None
    meta = {"name": POD_NAME, "namespace": tenant["namespace"]}
    labels = ((template or {}).get("metadata") or {}).get("labels")
    if labels:
        meta["labels"] = dict(labels)
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": meta,
            "spec": {"spec": {"devices": {"requests": [{"name": CLAIM_NAME, "exactly": {
                "deviceClassName": device_class, "allocationMode": "ExactCount", "count": tenant["count"]}}]}}}}


def quota_used(quota, resource):
    """What the quota's ``status.used`` counts of the tenant's key (``quota_key``; 0 when absent), and its hard
    limit."""
    status = (quota or {}).get("status") or {}
    key = quota_key(resource)

    def number(value):
        try:
            return int(str(value))
        except (TypeError, ValueError):
            return 0
    return number((status.get("used") or {}).get(key)), number((status.get("hard") or {}).get(key))


def tenant_result(tenant, pod, node, quota, timeout):
    """{namespace, resource, node, passed, phase, reason, tolerations, quota_used, quota_hard} of one tenant."""
    status = (pod or {}).get("status") or {}
    spec = (pod or {}).get("spec") or {}
    used, hard = quota_used(quota, tenant["resource"])
    path, device_class = tenant_path(tenant["resource"])
    result = {"namespace": tenant["namespace"], "resource": tenant["resource"], "count": tenant["count"],
              "product": tenant["product"], "pod": POD_NAME, "path": path,
              "device_class": device_class if path == "dra" else "", "node": spec.get("nodeName") or "",
              "phase": status.get("phase") or "", "tolerations": sorted(
                  set(t.get("key") or "" for t in spec.get("tolerations") or []) - set([""])),
              "quota_used": used, "quota_hard": hard, "passed": False, "reason": ""}
    if pod is None:
        result["reason"] = "the pod was not found"
    elif is_unschedulable(pod):
        result["reason"] = truncate(scheduler_reason(pod))
    elif result["phase"] != "Running":
        result["reason"] = "the pod is %s after %ss%s" % (result["phase"] or "not scheduled", timeout, (
            ": " + truncate(status.get("message") or status.get("reason") or "")) if status.get("message") else "")
    elif tenant["product"] and ((node or {}).get("metadata") or {}).get("labels", {}).get(PRODUCT_LABEL) \
            != tenant["product"]:
        result["reason"] = "the pod runs on node %s, which is not a %s node" % (result["node"], tenant["product"])
    elif quota is None:
        result["reason"] = "namespace %s has no ResourceQuota %s" % (tenant["namespace"], QUOTA_NAME)
    elif used < tenant["count"]:
        result["reason"] = ("ResourceQuota %s counts %d of %s while the pod runs, not its %d"
                            % (QUOTA_NAME, used, quota_key(tenant["resource"]), tenant["count"]))
    else:
        result["passed"] = True
    return result


def report(results):
    """One line per tenant for the role's report."""
    lines = []
    for r in results:
        path, device_class = tenant_path(r["resource"])
        what = ("a claim of %d %s device(s)" % (r["count"], device_class) if path == "dra"
                else "%d %s" % (r["count"], r["resource"]))
        head = "tenant %s: pod without tolerations, %s" % (r["namespace"], what)
        if r["passed"]:
            lines.append("%s -> node %s (tolerations added: %s); quota %s used %d of %d: passed"
                         % (head, r["node"], ", ".join(r["tolerations"]) or "none", quota_key(r["resource"]),
                            r["quota_used"], r["quota_hard"]))
        else:
            lines.append("%s: FAILED: %s" % (head, r["reason"]))
    return lines


def failure_message(results):
    failed = [r for r in results if not r["passed"]]
    if not failed:
        return ""
    return "GPU tenant validation failed in %d of %d namespace(s): %s" % (
        len(failed), len(results), "; ".join("%s: %s" % (r["namespace"], r["reason"]) for r in failed))


class TenantValidation:
    """One run over the tenants, one after another: remove a pod left from an earlier run, create the pod (on the
    DRA path after its ResourceClaimTemplate), wait until it runs (or the scheduler gives up on it), wait until the
    quota counts it, read its node, delete it (and the template).

    ``api``: a ``k8s_pods.PodAPI`` (``create_pod``, ``delete_pod``, ``request``).
    """

    def __init__(self, api, template, tenants, timeout=300, unschedulable_timeout=20, poll_interval=2.0,
                 clock=time.monotonic, sleep=time.sleep):
        self.api = api
        self.template = template
        self.tenants = tenants
        self.timeout = timeout
        self.unschedulable_timeout = unschedulable_timeout
        self.poll_interval = poll_interval
        self.clock = clock
        self.sleep = sleep
        self.results = []

    def _bound(self):
        within = getattr(self.api, "within", None)
        if within is not None:
            within(self.timeout)

    def _get(self, what, path):
        return self.api.request("get", what, "GET", path, missing_ok=True)

    def _pod(self, namespace):
        return self._get("reading pod %s/%s" % (namespace, POD_NAME),
                         "/api/v1/namespaces/%s/pods/%s" % (quote(namespace), POD_NAME))

    def _quota(self, namespace):
        return self._get("reading ResourceQuota %s/%s" % (namespace, QUOTA_NAME),
                         "/api/v1/namespaces/%s/resourcequotas/%s" % (quote(namespace), QUOTA_NAME))

    @staticmethod
    def _template_path(namespace, name=None):
        path = "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaimtemplates" % quote(namespace)
        return path + ("/%s" % quote(name) if name else "")

    def _delete_template(self, namespace):
        """Delete the DRA path's ResourceClaimTemplate (nothing when it is not there)."""
        self.api.request("delete", "deleting ResourceClaimTemplate %s/%s" % (namespace, POD_NAME), "DELETE",
                         self._template_path(namespace, POD_NAME), missing_ok=True)

    def _wait(self, done, fetch, limit):
        """Poll ``fetch()`` until ``done(value, elapsed)`` or ``limit`` seconds; the last value."""
        start = self.clock()
        delay = None
        while True:
            value = fetch()
            elapsed = self.clock() - start
            if done(value, elapsed) or elapsed >= limit:
                return value
            delay = next_delay(delay, self.poll_interval)
            self.sleep(max(min(delay, limit - elapsed), 0))

    def _gone(self, namespace):
        self._wait(lambda pod, _elapsed: pod is None, lambda: self._pod(namespace), self.timeout)
        if self._pod(namespace) is not None:
            raise ValidationError("the validation pod %s/%s is still present %ss after deleting it"
                                  % (namespace, POD_NAME, self.timeout), kind="timeout")

    def validate(self, tenant):
        namespace = tenant["namespace"]
        self._bound()
        if self._get("reading namespace %s" % namespace, "/api/v1/namespaces/%s" % quote(namespace)) is None:
            raise ValidationError("namespace %s does not exist: the tenant is not created (role gpu_tenants)"
                                  % namespace, kind="not_found")
        if self._pod(namespace) is not None:
            self.api.delete_pod(namespace, POD_NAME)
            self._gone(namespace)
        claim_template = build_claim_template(self.template, tenant)
        pod = node = quota = None
        try:
            self._bound()
            if claim_template is not None:  # the DRA path: a template left from an earlier run goes first
                self._delete_template(namespace)
                self.api.request("create", "creating ResourceClaimTemplate %s/%s" % (namespace, POD_NAME), "POST",
                                 self._template_path(namespace), body=claim_template, exists_ok_on_retry=True)
            self.api.create_pod(namespace, build_pod(self.template, tenant))

            def placed(current, elapsed):
                if current is None or is_terminal(current) or pod_phase(current) == "Running":
                    return True
                return is_unschedulable(current) and elapsed >= self.unschedulable_timeout
            pod = self._wait(placed, lambda: self._pod(namespace), self.timeout)
            if pod_phase(pod) == "Running":
                self._bound()
                quota = self._wait(lambda q, _e: q is None or quota_used(q, tenant["resource"])[0] >= tenant["count"],
                                   lambda: self._quota(namespace), self.timeout)
                name = (pod.get("spec") or {}).get("nodeName")
                if name:
                    node = self._get("reading node %s" % name, "/api/v1/nodes/%s" % quote(name))
        except BaseException as exc:
            try:
                self.api.delete_pod(namespace, POD_NAME)
                self._gone(namespace)
                if claim_template is not None:
                    self._delete_template(namespace)
            except Exception as cleanup_exc:  # pylint: disable=broad-exception-caught
                raise ValidationError("%s; deleting the validation pod %s/%s failed too: %s"
                                      % (error_text(exc), namespace, POD_NAME, error_text(cleanup_exc)), kind="api")
            raise
        self._bound()
        self.api.delete_pod(namespace, POD_NAME)
        self._gone(namespace)
        if claim_template is not None:
            self._delete_template(namespace)
        return tenant_result(tenant, pod, node, quota, self.timeout)

    def run(self, check_mode=False):
        """The result per tenant (empty in check mode: no pod runs)."""
        if check_mode:
            return []
        self.results = [self.validate(tenant) for tenant in self.tenants]
        return self.results
