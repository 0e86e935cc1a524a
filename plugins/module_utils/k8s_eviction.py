# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Empty a node of its (GPU) work through the Eviction API, as ``kubectl drain`` does, for a driver upgrade.

Which pods go (``pods_to_evict``): every pod of the node except mirror (static) pods, DaemonSet pods
and finished pods; with ``gpu_only``, only pods that request an ``nvidia.com/*`` resource or hold a
DRA resource claim. A DaemonSet pod is skipped whatever its volumes: ``kubernetes.core.k8s_drain``
checks local storage before the owner and so refuses the device plugin's own pod for its ``emptyDir``
(kubernetes.core issue 622); ``kubectl drain`` skips DaemonSet pods first, as this does. Pods without
a controller, and pods with ``emptyDir`` data, are evicted only when asked (``force``,
``delete_emptydir_data``), as ``kubectl drain`` asks; otherwise they are named before anything is evicted.

Evictions honour PodDisruptionBudgets: an eviction the API refuses with 429 is tried again every
``delay`` seconds until ``timeout``; then the drain fails with one message naming the pods that block
it, and the node stays cordoned on purpose.

The driver's own clients among the DaemonSet pods (the device plugin, GPU Feature Discovery, the MPS
daemon, the DCGM exporter: ``uses_gpu``) are stopped after the evictions: the node gets the taint
``kubegpu.nvidia/driver-upgrade=paused:NoSchedule``, which their DaemonSets do not tolerate, so their
controller does not start them again, and they are deleted. ``restore`` removes the taint (they come
back) and uncordons the node.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError, TimeoutExpired
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import (
    ApiException,
    K8sError,
    Urllib3Error,
    api_error_message,
    is_retriable,
    retry_after,
)

PAUSE_TAINT = {"key": "kubegpu.nvidia/driver-upgrade", "value": "paused", "effect": "NoSchedule"}
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
GPU_HOST_PATHS = ("/var/lib/kubelet/device-plugins", "/dev/nvidia", "/run/nvidia", "/var/run/nvidia")
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
DEFAULT_REQUEST_TIMEOUT = 30


def pod_name(pod):
    meta = pod.get("metadata") or {}
    return "%s/%s" % (meta.get("namespace"), meta.get("name"))


def _containers(pod):
    spec = pod.get("spec") or {}
    return list(spec.get("containers") or []) + list(spec.get("initContainers") or [])


def requests_gpu(pod):
    """Whether the pod asks for an ``nvidia.com/*`` resource (limits or requests) or holds a DRA resource claim."""
    for container in _containers(pod):
        resources = container.get("resources") or {}
        for part in ("limits", "requests"):
            if any(str(name).startswith("nvidia.com/") for name in (resources.get(part) or {})):
                return True
    return bool((pod.get("spec") or {}).get("resourceClaims"))


def uses_gpu(pod):
    """Whether a pod opens the driver: it requests a GPU, mounts the device plugin socket directory, /dev/nvidia*
    or /run/nvidia, runs with the nvidia RuntimeClass, or asks the NVIDIA runtime for every GPU."""
    if requests_gpu(pod):
        return True
    spec = pod.get("spec") or {}
    for volume in spec.get("volumes") or []:
        path = ((volume.get("hostPath") or {}).get("path") or "")
        if path.startswith(GPU_HOST_PATHS):
            return True
    if str(spec.get("runtimeClassName") or "").startswith("nvidia"):
        return True
    for container in _containers(pod):
        for env in container.get("env") or []:
            if env.get("name") == "NVIDIA_VISIBLE_DEVICES" and str(env.get("value") or "") not in ("", "void", "none"):
                return True
    return False


def owner_kind(pod):
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("kind")
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return refs[0].get("kind") if refs else None


def has_emptydir(pod):
    return any("emptyDir" in volume for volume in (pod.get("spec") or {}).get("volumes") or [])


def classify_pods(pods, gpu_only=False):
    """``{"evict", "daemonset", "mirror", "finished", "not_gpu", "unmanaged", "emptydir"}``: pod dicts by fate.

    ``unmanaged`` and ``emptydir`` are pods to evict that need ``force`` / ``delete_emptydir_data``
    (also listed in ``evict``).
    """
    found = {"evict": [], "daemonset": [], "mirror": [], "finished": [], "not_gpu": [], "unmanaged": [], "emptydir": []}
    for pod in pods:
        meta = pod.get("metadata") or {}
        if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
            found["mirror"].append(pod)
        elif owner_kind(pod) == "DaemonSet":
            found["daemonset"].append(pod)
        elif ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed"):
            found["finished"].append(pod)
        elif gpu_only and not requests_gpu(pod):
            found["not_gpu"].append(pod)
        else:
            found["evict"].append(pod)
            if owner_kind(pod) is None:
                found["unmanaged"].append(pod)
            if has_emptydir(pod):
                found["emptydir"].append(pod)
    return found


def with_taint(taints, taint):
    """The taint list with ``taint`` (replacing one of the same key and effect)."""
    kept = [t for t in taints or [] if not (t.get("key") == taint["key"] and t.get("effect") == taint["effect"])]
    return kept + [dict(taint)]


def without_taint(taints, taint):
    return [t for t in taints or [] if not (t.get("key") == taint["key"] and t.get("effect") == taint["effect"])]


class EvictionAPI:
    """The calls an eviction needs, through the ``kubernetes`` client's public ``CoreV1Api`` (answers read as
    JSON). Counts requests by verb; retries 5xx and 429 answers of everything but evictions (a 429 there is a
    PodDisruptionBudget's refusal, handled by the drain)."""

    def __init__(self, api_client, retries=5, backoff=0.5, max_delay=30.0, sleep=time.sleep, request_timeout=None):
        from kubernetes import client as k8s  # imported when used: the module fails cleanly without it
        self.core = k8s.CoreV1Api(api_client)
        self.host = api_client.configuration.host
        self.retries = retries
        self.backoff = backoff
        self.max_delay = max_delay
        self.sleep = sleep
        self.timeout = request_timeout or DEFAULT_REQUEST_TIMEOUT
        self.counts = {}

    def _call(self, verb, what, func, retry=True, missing_ok=False, **kwargs):
        attempt = 0
        while True:
            self.counts[verb] = self.counts.get(verb, 0) + 1
            try:
                response = func(_preload_content=False, _request_timeout=self.timeout, **kwargs)
                data = response.data
                if isinstance(data, bytes):
                    data = data.decode("utf-8", "replace")
                return json.loads(data) if data else {}
            except ApiException as exc:
                if missing_ok and exc.status == 404:
                    return None
                if retry and is_retriable(exc.status) and attempt < self.retries:
                    delay = retry_after(exc.headers)
                    self.sleep(min(self.backoff * (2 ** attempt) if delay is None else delay, self.max_delay))
                    attempt += 1
                    continue
                raise K8sError("%s failed: %s" % (what, api_error_message(exc)), status=exc.status)
            except ValueError as exc:
                raise K8sError("%s failed: the API server's answer is not JSON: %s" % (what, exc))
            except Urllib3Error as exc:
                raise K8sError("%s failed: cannot reach the API server at %s: %s" % (what, self.host, exc),
                               kind="timeout" if "Timeout" in type(exc).__name__ else None)

    def get_node(self, name):
        node = self._call("get", "reading node %s" % name, self.core.read_node, missing_ok=True, name=name)
        if node is None:
            raise K8sError("node %s does not exist" % name, status=404)
        return node

    def patch_node(self, name, body):
        return self._call("patch", "patching node %s" % name, self.core.patch_node, name=name, body=body,
                          _content_type=STRATEGIC_MERGE_PATCH)

    def node_pods(self, node):
        pods = []
        token = None
        while True:
            kwargs = {"field_selector": "spec.nodeName=%s" % node, "limit": 500}
            if token:
                kwargs["_continue"] = token
            page = self._call("list", "listing the pods of node %s" % node, self.core.list_pod_for_all_namespaces,
                              **kwargs)
            pods.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return pods

    def get_pod(self, namespace, name):
        return self._call("get", "reading pod %s/%s" % (namespace, name), self.core.read_namespaced_pod,
                          missing_ok=True, name=name, namespace=namespace)

    def evict(self, namespace, name, grace_period=None):
        """None when the pod is evicted (or gone); the API's message when a disruption budget refuses (429)."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        if grace_period is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": grace_period}
        self.counts["create"] = self.counts.get("create", 0) + 1
        try:
            self.core.create_namespaced_pod_eviction(name=name, namespace=namespace, body=body,
                                                     _preload_content=False, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status == 429:
                return _refusal(exc)
            raise K8sError("evicting pod %s/%s failed: %s" % (namespace, name, api_error_message(exc)),
                           status=exc.status)
        except Urllib3Error as exc:
            raise K8sError("evicting pod %s/%s failed: cannot reach the API server at %s: %s"
                           % (namespace, name, self.host, exc))
        return None

    def delete_pod(self, namespace, name, grace_period=None):
        kwargs = {"name": name, "namespace": namespace}
        if grace_period is not None:
            kwargs["grace_period_seconds"] = grace_period
        return self._call("delete", "deleting pod %s/%s" % (namespace, name), self.core.delete_namespaced_pod,
                          missing_ok=True, **kwargs)


def _refusal(exc):
    """The message of a 429 eviction answer, with its cause ("The disruption budget db needs 1 healthy pods ...")."""
    try:
        body = json.loads(exc.body)
    except (TypeError, ValueError):
        return "the eviction API answered 429 Too Many Requests"
    message = (body.get("message") or "the eviction API answered 429").rstrip(".")
    causes = [c.get("message") for c in (body.get("details") or {}).get("causes") or [] if c.get("message")]
    return "%s (%s)" % (message, "; ".join(causes)) if causes else message


class Drain:
    """One node's drain for a driver upgrade: cordon, evictions, the driver's clients stopped."""

    def __init__(self, api, node, gpu_only=False, timeout=600, delay=5.0, grace_period=None,
                 delete_emptydir_data=False, force=False, stop_gpu_daemonsets=True, check_mode=False,
                 clock=time.monotonic, sleep=time.sleep):
        self.api = api
        self.node = node
        self.gpu_only = gpu_only
        self.timeout = timeout
        self.delay = max(delay, 0.1)
        self.grace_period = grace_period
        self.delete_emptydir_data = delete_emptydir_data
        self.force = force
        self.stop_gpu_daemonsets = stop_gpu_daemonsets
        self.check_mode = check_mode
        self.clock = clock
        self.sleep = sleep
        self.changed = False
        self.result = {"cordoned": False, "evicted": [], "stopped": [], "left": {}, "paused": False}

    # ------------------------------------------------------------------ node
    def _update_node(self, change, what):
        """Read the node, apply ``change(node) -> patch or None``, write it with its resourceVersion; retry on 409."""
        for _attempt in range(5):
            node = self.api.get_node(self.node)
            patch = change(node)
            if patch is None:
                return False
            if self.check_mode:
                return True
            patch.setdefault("metadata", {})["resourceVersion"] = node["metadata"].get("resourceVersion")
            try:
                self.api.patch_node(self.node, patch)
                return True
            except K8sError as exc:
                if exc.status != 409:
                    raise
        raise K8sError("%s of node %s failed: the node kept changing (409 Conflict five times)" % (what, self.node),
                       status=409)

    def cordon(self):
        changed = self._update_node(
            lambda node: None if (node.get("spec") or {}).get("unschedulable") else {"spec": {"unschedulable": True}},
            "cordoning")
        self.changed |= changed
        self.result["cordoned"] = True
        return changed

    def uncordon(self):
        changed = self._update_node(
            lambda node: {"spec": {"unschedulable": None}} if (node.get("spec") or {}).get("unschedulable") else None,
            "uncordoning")
        self.changed |= changed
        self.result["cordoned"] = False
        return changed

    def _set_pause(self, paused):
        def change(node):
            taints = (node.get("spec") or {}).get("taints") or []
            present = any(t.get("key") == PAUSE_TAINT["key"] and t.get("effect") == PAUSE_TAINT["effect"]
                          for t in taints)
            if present == paused:
                return None
            return {"spec": {"taints": with_taint(taints, PAUSE_TAINT) if paused else without_taint(taints, PAUSE_TAINT)}}
        changed = self._update_node(change, "tainting" if paused else "removing the taint")
        self.changed |= changed
        self.result["paused"] = paused
        return changed

    # ------------------------------------------------------------------ drain
    def drain(self):
        self.cordon()
        pods = self.api.node_pods(self.node)
        found = classify_pods(pods, self.gpu_only)
        self.result["left"] = dict((fate, [pod_name(p) for p in found[fate]])
                                   for fate in ("daemonset", "mirror", "finished", "not_gpu"))
        problems = []
        if found["unmanaged"] and not self.force:
            problems.append("%s not managed by a controller (force: true evicts them, and nothing recreates them)"
                            % ", ".join(pod_name(p) for p in found["unmanaged"]))
        if found["emptydir"] and not self.delete_emptydir_data:
            problems.append("%s with emptyDir data (delete_emptydir_data: true evicts them, and the data is lost)"
                            % ", ".join(pod_name(p) for p in found["emptydir"]))
        if problems:
            raise InputError("node %s was cordoned and nothing was evicted: %s. The node stays cordoned on purpose, "
                             "so that no new work lands on it" % (self.node, "; ".join(problems)),
                             **self.details())
        self._evict(found["evict"])
        if self.stop_gpu_daemonsets:
            self._stop_clients(found["daemonset"])
        return self.result

    def _evict(self, pods):
        waiting = dict((pod_name(p), p) for p in pods)
        if self.check_mode:
            self.result["evicted"] = sorted(waiting)
            self.changed |= bool(waiting)
            return
        deadline = self.clock() + self.timeout
        refused = {}
        evicted = {}
        while waiting or evicted:
            for name, pod in sorted(waiting.items()):
                meta = pod["metadata"]
                reason = self.api.evict(meta["namespace"], meta["name"], self.grace_period)
                if reason is None:
                    evicted[name] = pod
                    refused.pop(name, None)
                    self.changed = True
                else:
                    refused[name] = reason
            for name in list(evicted):
                waiting.pop(name, None)
            # an evicted pod counts once it is gone (its grace period over)
            for name, pod in list(evicted.items()):
                meta = pod["metadata"]
                current = self.api.get_pod(meta["namespace"], meta["name"])
                if current is None or current["metadata"].get("uid") != meta.get("uid"):
                    self.result["evicted"].append(name)
                    del evicted[name]
            if not waiting and not evicted:
                break
            if self.clock() >= deadline:
                blocking = ["%s (%s)" % (name, refused[name]) for name in sorted(waiting)]
                blocking += ["%s (evicted, still terminating)" % name for name in sorted(evicted)]
                raise TimeoutExpired(
                    "draining node %s did not finish within %d s: %d pod(s) block it: %s. The node stays cordoned on "
                    "purpose, so that no new work lands on it; fix the cause and run again, or uncordon it to give up"
                    % (self.node, self.timeout, len(blocking), "; ".join(blocking)),
                    blocking=sorted(list(waiting) + list(evicted)), **self.details())
            self.sleep(self.delay)

    def _stop_clients(self, daemonset_pods):
        clients = [pod for pod in daemonset_pods if uses_gpu(pod)]
        if not clients:
            return
        self._set_pause(True)
        if self.check_mode:
            self.result["stopped"] = sorted(pod_name(p) for p in clients)
            return
        for pod in clients:
            self.api.delete_pod(pod["metadata"]["namespace"], pod["metadata"]["name"], self.grace_period)
            self.changed = True
        deadline = self.clock() + self.timeout
        left = dict((pod_name(p), p) for p in clients)
        while left:
            for name, pod in list(left.items()):
                current = self.api.get_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])
                if current is None or current["metadata"].get("uid") != pod["metadata"].get("uid"):
                    self.result["stopped"].append(name)
                    del left[name]
            if not left:
                break
            if self.clock() >= deadline:
                raise TimeoutExpired("stopping the GPU daemons of node %s did not finish within %d s: %s still run"
                                     % (self.node, self.timeout, ", ".join(sorted(left))), **self.details())
            self.sleep(self.delay)
        # a DaemonSet that tolerates every taint starts its pod again at once: it keeps using the GPU
        back = [pod_name(p) for p in self.api.node_pods(self.node)
                if owner_kind(p) == "DaemonSet" and uses_gpu(p) and not p["metadata"].get("deletionTimestamp")]
        self.result["restarted"] = sorted(back)

    def restore(self, uncordon=True):
        self._set_pause(False)
        if uncordon:
            self.uncordon()
        else:
            self.result["cordoned"] = bool((self.api.get_node(self.node).get("spec") or {}).get("unschedulable"))
        return self.result

    def details(self):
        return dict(changed=self.changed, node=self.node, cordoned=self.result["cordoned"],
                    evicted=sorted(self.result["evicted"]), left=self.result["left"])
