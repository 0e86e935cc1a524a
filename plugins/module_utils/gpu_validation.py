# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU validation pods: building them, deciding when they are done, and the result per node.

The functions here are pure (no I/O). ``Validation.run()`` drives one validation run through an
API object (``k8s_pods.PodAPI`` or a stand-in with the same methods), with the clock and the sleep
passed in, so every branch can be tested without a cluster.

A passing node can carry a record of its validation (annotation ``RECORD_ANNOTATION``): the digest of
what the pod's success depended on (``node_state()``) and when it passed. A later run that finds the
same digest on a node's current listing knows the proof still holds (``recorded_results()``) and
need not run the pod again.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import hashlib
import json
import time

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import KubegpuError

POD_PREFIX = "gpu-validation-"
TERMINAL_PHASES = ("Succeeded", "Failed")
DEFAULT_EXPECTED_LOG = "Test PASSED"
DETAIL_LENGTH = 200
FIRST_POLL_DELAY = 0.2
# the record of a passed validation on the node: {"state": node_state(), "passed": "<UTC time>"}
RECORD_ANNOTATION = "kubegpu.nvidia/gpu-validation"
# what a validation pod's result depends on, besides the caller's revision: the boot, the kubelet and
# the container runtime (status.nodeInfo), and the node's nvidia.com/ labels and allocatable resources
STATE_NODE_INFO = ("bootID", "kernelVersion", "kubeletVersion", "containerRuntimeVersion")
STATE_PREFIX = "nvidia.com/"


class ValidationError(KubegpuError):
    """A failure of the run itself (not of a node), with a one-line message for the user."""

    kind = "input"


class ValidationFailed(KubegpuError):
    """The run went through and some nodes did not pass (with ``fail_on_failure``)."""

    kind = "runtime"


def pod_name(node):
    """Name of the validation pod of ``node``."""
    return POD_PREFIX + node


def label_selector(labels):
    """``key=value,...`` selecting exactly the objects carrying ``labels``."""
    return ",".join("%s=%s" % (key, labels[key]) for key in sorted(labels))


def template_labels(template):
    """The template's ``metadata.labels``, which must be a non-empty dict of strings."""
    if not isinstance(template, dict):
        raise ValidationError("pod_template must be a Pod manifest (a dict)")
    if template.get("kind", "Pod") != "Pod":
        raise ValidationError("pod_template must be a Pod manifest, not kind %s" % template.get("kind"))
    labels = (template.get("metadata") or {}).get("labels")
    if not isinstance(labels, dict) or not labels:
        raise ValidationError("pod_template needs metadata.labels: the module finds its pods again by them")
    return dict((str(key), str(value)) for key, value in labels.items())


def request_resource(pod, resource):
    """Make the first container of ``pod`` ask for ``resource`` instead of its ``nvidia.com/`` resources.

    Each ``nvidia.com/`` limit and request of that container is replaced by one of ``resource`` with the same
    count (a MIG node under the device plugin's ``mixed`` strategy advertises ``nvidia.com/mig-<profile>``, no
    ``nvidia.com/gpu``). Raises ValidationError when that container asks for none.
    """
    containers = (pod.get("spec") or {}).get("containers") or []
    wants = (containers[0].get("resources") or {}) if containers else {}
    found = False
    for kind in ("limits", "requests"):
        amounts = wants.get(kind) or {}
        for name in [key for key in amounts if str(key).startswith("nvidia.com/")]:
            amounts[resource] = amounts.pop(name)
            found = True
    if not found:
        raise ValidationError("resources: the first container of pod_template requests no nvidia.com/ resource "
                              "to replace with %s" % resource)
    return pod


def build_pod(template, node, namespace, resource=None):
    """The validation pod of ``node``: the template named ``gpu-validation-<node>`` and pinned to the node.

    The pin is a required node affinity ``matchFields metadata.name In [node]``, so the scheduler
    places the pod (and reports why it cannot). Node selector terms the template already has keep
    their expressions and get the pin added (terms are ORed, requirements within a term ANDed).
    ``resource``: the extended resource it asks for instead of the template's (``request_resource``).
    """
    pod = copy.deepcopy(template)
    if resource:
        request_resource(pod, resource)
    pod["apiVersion"] = pod.get("apiVersion") or "v1"
    pod["kind"] = "Pod"
    metadata = pod.setdefault("metadata", {})
    metadata.pop("generateName", None)
    metadata["name"] = pod_name(node)
    metadata["namespace"] = namespace
    spec = pod.setdefault("spec", {})
    spec.pop("nodeName", None)
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    required = (spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
                .setdefault("requiredDuringSchedulingIgnoredDuringExecution", {}))
    terms = required.get("nodeSelectorTerms") or []
    if terms:
        for term in terms:
            term["matchFields"] = list(term.get("matchFields") or []) + [pin]
    else:
        terms = [{"matchFields": [pin]}]
    required["nodeSelectorTerms"] = terms
    return pod


def namespace_manifest(name, labels):
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels)}}


def pod_status(pod):
    return (pod or {}).get("status") or {}


def pod_phase(pod):
    return pod_status(pod).get("phase")


def is_terminal(pod):
    return pod_phase(pod) in TERMINAL_PHASES


def not_scheduled(pod):
    """The pod's ``PodScheduled`` condition when it is False, else an empty dict."""
    for condition in pod_status(pod).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return condition
    return {}


def is_unschedulable(pod):
    return not_scheduled(pod).get("reason") == "Unschedulable"


def scheduler_reason(pod):
    """``Reason: message`` of the pod's False ``PodScheduled`` condition (empty when the pod is not held back)."""
    sched = not_scheduled(pod)
    if not sched:
        return ""
    return "%s: %s" % (sched.get("reason", "NotScheduled"), sched.get("message", ""))


def validation_done(pods, names, elapsed, timeout, unschedulable_timeout):
    """Whether to stop waiting for the pods ``names`` (``pods``: {name: pod} from the last listing).

    Done when every pod has finished; or when every pod that has not finished is one the scheduler
    reports Unschedulable and ``unschedulable_timeout`` seconds have passed since the pods were
    created; or when ``timeout`` seconds have passed.
    """
    if elapsed >= timeout:
        return True
    waiting = [name for name in names if not is_terminal(pods.get(name))]
    if not waiting:
        return True
    return elapsed >= unschedulable_timeout and all(is_unschedulable(pods.get(name)) for name in waiting)


def next_delay(delay, poll_interval):
    """The pause before the next poll: 0.2 s, doubling up to ``poll_interval``."""
    if delay is None:
        return min(FIRST_POLL_DELAY, poll_interval)
    return min(delay * 2, poll_interval)


def truncate(text, length=DETAIL_LENGTH, end="...", leeway=5):
    """Jinja's ``truncate`` filter (word boundary, default leeway), as the role's messages used it."""
    if len(text) <= length + leeway:
        return text
    return text[:length - len(end)].rsplit(" ", 1)[0] + end


def _container_state(status, state):
    for container in status.get("containerStatuses") or []:
        value = (container.get("state") or {}).get(state)
        if value is not None:
            return value
    return {}


def node_result(node, pod, log, expected_log=DEFAULT_EXPECTED_LOG, timeout=300):
    """``{node, pod, passed, phase, reason}`` of one node from its pod (None when gone) and log.

    A node passes when its pod Succeeded and the log holds ``expected_log``. Otherwise the reason is
    the scheduler's (``Reason: message`` of a False PodScheduled condition), ``log lacks ...`` for a
    pod that Succeeded without the text, ``reason: message`` of a Failed pod (from its status, else
    its terminated container, whose message is the log tail), ``reason: message`` of a waiting
    container, else ``still <phase> after <timeout>s`` (phase ``Missing`` for a pod that is gone).
    """
    status = pod_status(pod)
    phase = status.get("phase") or "Missing"
    log = log or ""
    passed = phase == "Succeeded" and expected_log in log
    sched = scheduler_reason(pod)
    waiting = _container_state(status, "waiting")
    terminated = _container_state(status, "terminated")
    if passed:
        reason = expected_log
    elif sched:
        reason = sched
    elif phase == "Succeeded":
        reason = 'log lacks "%s": %s' % (expected_log, truncate(log.strip()))
    elif phase == "Failed":
        why = status.get("reason") or terminated.get("reason") or "Failed"
        detail = status.get("message") or truncate((terminated.get("message") or log).strip())
        reason = "%s: %s" % (why, detail)
    elif waiting:
        reason = "%s: %s" % (waiting.get("reason", ""), waiting.get("message", ""))
    else:
        reason = "still %s after %ss" % (phase, timeout)
    return {"node": node, "pod": pod_name(node), "passed": passed, "phase": phase, "reason": reason}


def failure_message(results):
    """``GPU validation failed on X of Y node(s): node: reason; ...``, or None when every node passed."""
    failed = [r for r in results if not r["passed"]]
    if not failed:
        return None
    return "GPU validation failed on %d of %d node(s): %s" % (
        len(failed), len(results), "; ".join("%s: %s" % (r["node"], r["reason"]) for r in failed))


def success_message(results):
    return "GPU validation passed on %d node(s)" % len(results)


def no_node_message(selector):
    return ("No node to validate: no node matches the label selector %s "
            "(label the GPU nodes, or name them in nodes)" % selector)


def node_parts(node):
    """``(name, labels, allocatable, node_info, annotations)`` of a node.

    ``node`` is a Node as the API lists it, or a node as ``k8s_gpu_label`` returns it with
    ``return_nodes`` (``name``, ``labels``, ``allocatable``, ``node_info``, ``annotations``).
    """
    if "metadata" in node:
        meta = node.get("metadata") or {}
        status = node.get("status") or {}
        return (meta.get("name"), meta.get("labels") or {}, status.get("allocatable") or {},
                status.get("nodeInfo") or {}, meta.get("annotations") or {})
    return (node.get("name"), node.get("labels") or {}, node.get("allocatable") or {},
            node.get("node_info") or {}, node.get("annotations") or {})


def node_state(node, revision=""):
    """Digest (sha256, hex) of what a passing validation pod proved on ``node``.

    It covers the node's boot, kernel, kubelet and container runtime (``status.nodeInfo``), its
    ``nvidia.com/`` labels (GPU model and count, driver and CUDA versions, MIG and sharing settings,
    device plugin configuration) and allocatable resources, and ``revision``: whatever else the
    caller's proof depends on (the pod, the device plugin's rollout). A reboot, a driver, kubelet or
    runtime upgrade, a relabelling or another device plugin gives another digest.
    """
    labels, allocatable, info = node_parts(node)[1:4]
    doc = {
        "node_info": dict((key, info.get(key)) for key in STATE_NODE_INFO),
        "labels": dict((k, v) for k, v in labels.items() if k.startswith(STATE_PREFIX)),
        "allocatable": dict((k, v) for k, v in allocatable.items() if k.startswith(STATE_PREFIX)),
        "revision": revision or "",
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode("utf-8")).hexdigest()


def record_value(state, passed_at):
    """The annotation value recording a validation that passed at ``passed_at`` in ``state``."""
    return json.dumps({"state": state, "passed": passed_at}, sort_keys=True, separators=(",", ":"))


def read_record(node):
    """The node's record ``{"state", "passed"}``, or None (none, or not one this module wrote)."""
    raw = node_parts(node)[4].get(RECORD_ANNOTATION)
    try:
        record = json.loads(raw) if raw else None
    except (TypeError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("state"), str):
        return None
    return record


def recorded_results(nodes, revision=""):
    """The results of the ``nodes`` whose record still holds: the same ``node_state()`` as when they passed.

    Each is ``{node, pod: None, passed: True, phase: "Recorded", reason, validated_at}``, the node's
    result without running its pod again. Nodes without a record, or whose state changed since, are left out.
    """
    results = []
    for node in nodes:
        record = read_record(node)
        if record is None or record["state"] != node_state(node, revision):
            continue
        passed_at = record.get("passed") or "unknown"
        results.append({"node": node_parts(node)[0], "pod": None, "passed": True, "phase": "Recorded",
                        "reason": "passed at %s; nothing it depends on changed since" % passed_at,
                        "validated_at": passed_at})
    return results


def utc_now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def unique(names):
    seen = set()
    out = []
    for name in names:
        if name not in seen:
            seen.add(name)
            out.append(name)
    return out


class Validation:
    """One validation run over an API object; see ``run()``.

    ``api`` needs: ``list_nodes(label_selector)``, ``get_namespace(name)`` (None when missing),
    ``create_namespace(body)``, ``list_pods(namespace, label_selector)``, ``create_pod(namespace, body)``,
    ``delete_pod(namespace, name)`` (a missing pod is fine) and ``read_pod_log(namespace, name, container)``
    (``container`` None for a pod with one container; else the first container of the template); with
    ``record``, also ``patch_node(name, body)``.

    ``resources``: ``{node: resource}``, the extended resource a node's pod asks for instead of the template's.

    ``record``: after the pods, write each passing node's record (``RECORD_ANNOTATION``: its
    ``node_state()`` with ``revision``, as listed before the pods ran, and the time) unless it holds that
    state already, and remove the record of a node that failed; each result then says ``recorded``.
    """

    def __init__(self, api, template, namespace="gpu-validation", nodes=None,
                 node_selector="nvidia.com/gpu.present=true", create_namespace=True,
                 expected_log=DEFAULT_EXPECTED_LOG, timeout=300, unschedulable_timeout=20, poll_interval=2.0,
                 record=False, revision="", clock=time.monotonic, sleep=time.sleep, now=utc_now, resources=None):
        self.api = api
        self.template = template
        # {node: resource} its pod asks for instead of the template's
        self.resources = dict(resources or {})
        for resource in set(self.resources.values()):
            request_resource(copy.deepcopy(template), resource)
        self.labels = template_labels(template)
        self.selector = label_selector(self.labels)
        # with several containers the log read must name one: the first is the check
        containers = (template.get("spec") or {}).get("containers") or []
        self.log_container = containers[0].get("name") if len(containers) > 1 else None
        self.namespace = namespace
        self.nodes = unique(nodes or [])
        self.node_selector = node_selector
        self.create_namespace = create_namespace
        self.expected_log = expected_log
        self.timeout = timeout
        self.unschedulable_timeout = unschedulable_timeout
        self.poll_interval = poll_interval
        self.record = record
        self.revision = revision
        self.clock = clock
        self.sleep = sleep
        self.now = now
        self.changed = False
        self.diff = None
        self.results = []
        self.node_names = []
        # the selected nodes as listed, by name (only read when needed: a selector, or record)
        self.listed = {}

    def _bound(self):
        """Each step of a run (selecting, the namespace and leftovers, the pods, the logs, the cleanup, the
        records) gets ``timeout`` seconds for its requests, retries included (an ``api`` with ``within``)."""
        within = getattr(self.api, "within", None)
        if within is not None:
            within(self.timeout)

    def select_nodes(self):
        if self.nodes:
            if self.record:
                self.listed = dict((node["metadata"]["name"], node) for node in self.api.list_nodes())
            return self.nodes
        found = self.api.list_nodes(self.node_selector)
        self.listed = dict((node["metadata"]["name"], node) for node in found)
        names = sorted(self.listed)
        if not names:
            raise ValidationError(no_node_message(self.node_selector), kind="not_found")
        return names

    def write_records(self, results):
        """Record each passing node's state (unless it holds it already); remove a failed node's record."""
        for result in results:
            node = self.listed.get(result["node"])
            held = read_record(node) if node is not None else None
            body = None
            if result["passed"] and node is not None:
                state = node_state(node, self.revision)
                if held is None or held["state"] != state:
                    body = {"metadata": {"annotations": {RECORD_ANNOTATION: record_value(state, self.now())}}}
                result["recorded"] = True
            else:
                if node is not None and RECORD_ANNOTATION in node_parts(node)[4]:
                    body = {"metadata": {"annotations": {RECORD_ANNOTATION: None}}}
                result["recorded"] = False
            if body is not None:
                try:
                    self.api.patch_node(result["node"], body)
                except Exception as exc:  # pylint: disable=broad-exception-caught
                    raise ValidationError(
                        "the validation pods ran (%s), but recording the result on node %s failed: %s "
                        "(recording needs the right to patch nodes; or turn record off)"
                        % (failure_message(results) or success_message(results), result["node"], error_text(exc)),
                        kind="api")
                self.changed = True

    def ensure_namespace(self, check_mode):
        """Read the namespace, create it when missing (not in check mode); True when it was missing."""
        before = self.api.get_namespace(self.namespace)
        wanted = namespace_manifest(self.namespace, self.labels)
        if before is not None:
            current = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
            self.diff = {"before": current, "after": current}
            return False
        if not self.create_namespace:
            raise ValidationError("namespace %s does not exist: create it, or set create_namespace" % self.namespace,
                                  kind="not_found")
        self.diff = {"before": {}, "after": wanted}
        self.changed = True
        if not check_mode:
            self.api.create_namespace(wanted)
        return True

    def _pods(self):
        return dict((pod["metadata"]["name"], pod) for pod in self.api.list_pods(self.namespace, self.selector))

    def _wait_gone(self, names, what):
        """Poll until no pod of ``names`` (None: no pod with the labels) is left, at most ``timeout`` s."""
        start = self.clock()
        delay = None
        while True:
            pods = self._pods()
            left = sorted(pods if names is None else [name for name in names if name in pods])
            if not left:
                return
            elapsed = self.clock() - start
            if elapsed >= self.timeout:
                raise ValidationError("%s still present %ss after deleting them: %s"
                                      % (what, self.timeout, ", ".join(left)), kind="timeout")
            delay = next_delay(delay, self.poll_interval)
            self.sleep(min(delay, max(self.timeout - elapsed, 0)))

    def remove_leftovers(self):
        """Delete the pods an earlier run left for this run's nodes, and wait until they are gone. The pods of
        other nodes stay: another run (a slice of the same fleet, started at the same time) may be using them."""
        mine = set(pod_name(node) for node in self.node_names)
        leftovers = sorted(name for name in self._pods() if name in mine)
        for name in leftovers:
            self.api.delete_pod(self.namespace, name)
        if leftovers:
            self._bound()
            self._wait_gone(leftovers, "validation pods left from an earlier run")

    def wait_for_pods(self, names, created_at):
        delay = None
        while True:
            pods = self._pods()
            elapsed = self.clock() - created_at
            if validation_done(pods, names, elapsed, self.timeout, self.unschedulable_timeout):
                return pods
            deadline = self.timeout
            if all(is_unschedulable(pods.get(n)) for n in names if not is_terminal(pods.get(n))):
                deadline = min(deadline, self.unschedulable_timeout)
            delay = next_delay(delay, self.poll_interval)
            self.sleep(max(min(delay, deadline - elapsed), 0))

    def run(self, check_mode=False):
        """Validate; returns the results (empty in check mode). Raises ValidationError or the API's errors.

        The pods are always deleted again, and waited for until gone, also when a step fails; when
        the cleanup fails after another failure, the error names both.
        """
        self._bound()
        self.node_names = self.select_nodes()
        created = self.ensure_namespace(check_mode)
        if check_mode:
            return []
        nodes = self.node_names
        names = [pod_name(node) for node in nodes]
        pods = {}
        logs = {}
        attempted = []
        try:
            if not created:
                self.remove_leftovers()
            self._bound()
            created_at = self.clock()
            for node in nodes:
                # a create that fails may still have made the pod: it is deleted too
                attempted.append(pod_name(node))
                self.api.create_pod(self.namespace, build_pod(self.template, node, self.namespace,
                                                              self.resources.get(node)))
            pods = self.wait_for_pods(names, created_at)
            self._bound()
            for name in names:
                if pod_phase(pods.get(name)) == "Succeeded":
                    logs[name] = self.api.read_pod_log(self.namespace, name, self.log_container)
        except BaseException as exc:
            try:
                self.cleanup(attempted)
            except Exception as cleanup_exc:  # pylint: disable=broad-exception-caught
                raise ValidationError("%s; deleting the validation pods failed too: %s"
                                      % (error_text(exc), error_text(cleanup_exc)),
                                      kind=exc.kind if isinstance(exc, KubegpuError) else "bug")
            raise
        self.cleanup(attempted)
        self._bound()
        self.results = [node_result(node, pods.get(pod_name(node)), logs.get(pod_name(node)),
                                    self.expected_log, self.timeout) for node in nodes]
        if self.record:
            self.write_records(self.results)
        return self.results

    def cleanup(self, names):
        """Delete the pods ``names`` (a missing one is fine) and wait until they are gone."""
        if not names:
            return
        self._bound()
        for name in names:
            self.api.delete_pod(self.namespace, name)
        self._wait_gone(names, "validation pods")


def error_text(exc):
    """The one-line message of an error raised during a run."""
    return getattr(exc, "msg", None) or str(exc) or exc.__class__.__name__
