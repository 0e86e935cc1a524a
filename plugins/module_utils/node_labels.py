# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure logic for node labels and taints: what a node should carry, and what to write.

Nothing here talks to the API: the module lists nodes once, and these functions
work out, per node, the label changes and the new taint list. They take and
return plain dicts (the JSON shape of the Kubernetes API), so they are cheap to
run over thousands of nodes and easy to test.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import threading
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.kubegpu.nvidia.plugins.module_utils.gfd_labels import is_managed_label
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError, KubegpuError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import K8sError

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class NodeLabelError(InputError):
    """A user-supplied label or taint that cannot be applied."""


class NodeMatchError(KubegpuError):
    """A requested host that matches no Kubernetes node, or two hosts that match the same one."""

    kind = "node_match"


def normalise_labels(labels):
    """Labels as a dict of str -> str (booleans and numbers as Kubernetes strings)."""
    result = {}
    for key, value in (labels or {}).items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif value is None:
            value = ""
        elif not isinstance(value, str):
            value = str(value)
        result[str(key)] = value
    return result


def normalise_taint(taint):
    """One taint as ``{key, value, effect}``; raises NodeLabelError when it is incomplete.

    Accepts a dict, or the kubectl string form ``key=value:Effect`` / ``key:Effect``.
    """
    if isinstance(taint, str):
        spec, sep, effect = taint.rpartition(":")
        if not sep:
            raise NodeLabelError("taint %r must look like key=value:Effect" % taint)
        key, _sep, value = spec.partition("=")
        taint = {"key": key, "value": value, "effect": effect}
    if not isinstance(taint, dict):
        raise NodeLabelError("taint %r must be a dict with key, value and effect" % (taint,))
    key = taint.get("key")
    effect = taint.get("effect")
    if not key:
        raise NodeLabelError("taint %r has no key" % (taint,))
    if effect not in TAINT_EFFECTS:
        raise NodeLabelError("taint %r: effect must be one of %s" % (key, ", ".join(TAINT_EFFECTS)))
    value = taint.get("value")
    value = "" if value is None else str(value)
    result = {"key": str(key), "value": value, "effect": effect}
    return result


def taint_str(taint):
    """``key=value:Effect`` as kubectl prints it."""
    if taint.get("value"):
        return "%s=%s:%s" % (taint["key"], taint["value"], taint["effect"])
    return "%s:%s" % (taint["key"], taint["effect"])


def _same_taint(left, right):
    # A node holds at most one taint per (key, effect): kubectl and the API treat that pair as the identity.
    return left.get("key") == right.get("key") and left.get("effect") == right.get("effect")


def diff_labels(current, desired, state="present", remove_stale=False, managed=is_managed_label):
    """Work out the label changes for one node.

    ``current``: the node's labels. ``desired``: labels to set (state present) or
    remove (state absent; values are ignored). ``remove_stale``: also remove every
    managed label (``managed(key, value)`` true: by default the labels this
    collection derives from GPU facts, ``gfd_labels.is_managed_label``) that
    ``desired`` does not name (present), or every managed label (absent). Any
    other label is only ever touched when named in ``desired``.

    Returns ``(added, removed)``: ``added`` maps keys to their new value (new or
    changed labels), ``removed`` is the sorted list of keys to delete.
    """
    current = current or {}
    added = {}
    removed = set()
    if state == "present":
        for key, value in desired.items():
            if current.get(key) != value:
                added[key] = value
        if remove_stale:
            removed.update(k for k, v in current.items() if k not in desired and managed(k, v))
    else:
        removed.update(k for k in desired if k in current)
        if remove_stale:
            removed.update(k for k, v in current.items() if managed(k, v))
    return added, sorted(removed)


def diff_taints(current, desired, state="present"):
    """Work out the taint list for one node.

    ``current``: the node's ``spec.taints`` (API dicts, ``timeAdded`` kept).
    ``desired``: normalised taints. Present: each desired taint is added, or its
    value updated when a taint with the same key and effect exists. Absent: taints
    with the same key and effect are removed. Every other taint is kept as it is.

    Returns ``(new_list, added, removed)``; ``new_list`` is None when nothing changes.
    """
    current = list(current or [])
    new = [dict(t) for t in current]
    added = []
    removed = []
    for want in desired:
        matches = [t for t in new if _same_taint(t, want)]
        if state == "present":
            if not matches:
                new.append(dict(want))
                added.append(dict(want))
                continue
            have = matches[0]
            if (have.get("value") or "") != want["value"]:
                removed.append(_plain_taint(have))
                have["value"] = want["value"]
                have.pop("timeAdded", None)
                added.append(dict(want))
        else:
            for have in matches:
                new.remove(have)
                removed.append(_plain_taint(have))
    if not added and not removed:
        return None, [], []
    return new, added, removed


def _plain_taint(taint):
    return {"key": taint.get("key"), "value": taint.get("value") or "", "effect": taint.get("effect")}


def node_matches(node, names):
    """True when ``node`` (API dict) is known by one of ``names``.

    A node is known by its name, its ``kubernetes.io/hostname`` label, and the
    Hostname, InternalIP and InternalDNS addresses in its status.
    """
    wanted = set(n for n in names if n)
    if not wanted:
        return False
    meta = node.get("metadata") or {}
    if meta.get("name") in wanted:
        return True
    if (meta.get("labels") or {}).get("kubernetes.io/hostname") in wanted:
        return True
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") in ("Hostname", "InternalIP", "InternalDNS") and address.get("address") in wanted:
            return True
    return False


def resolve_node(nodes_by_name, all_nodes, name, aliases=None):
    """Find the node for a host: by node name first, then by hostname or address.

    ``nodes_by_name``: dict name -> node. Returns ``(node, error)``; error is a
    one-line message naming the host when no node, or more than one, matches.
    """
    node = nodes_by_name.get(name)
    if node is not None:
        return node, None
    candidates = [name] + [a for a in (aliases or []) if a and a != name]
    found = [n for n in all_nodes if node_matches(n, candidates)]
    if len(found) == 1:
        return found[0], None
    if not found:
        return None, "no Kubernetes node matches host %s (tried name, hostname and InternalIP: %s)" % (
            name, ", ".join(candidates))
    return None, "host %s matches several Kubernetes nodes: %s" % (
        name, ", ".join(sorted(n["metadata"]["name"] for n in found)))


def build_patch(added, removed, new_taints=None, resource_version=None):
    """The strategic-merge patch for one node: label changes, and the whole taint list when it changes.

    ``spec.taints`` has no merge key, so a patch replaces the list: it carries the
    node's ``resourceVersion`` so that a concurrent change makes the API answer 409.
    """
    patch = {}
    labels = dict(added)
    for key in removed:
        labels[key] = None
    if labels:
        patch["metadata"] = {"labels": labels}
    if new_taints is not None:
        patch.setdefault("metadata", {})["resourceVersion"] = resource_version
        patch["spec"] = {"taints": new_taints}
    return patch


def plan_node(node, desired_labels, desired_taints, state="present", remove_stale=False):
    """Everything to do for one node (API dict). Returns a dict with changed, added, removed, taints, patch."""
    meta = node.get("metadata") or {}
    current_labels = meta.get("labels") or {}
    current_taints = (node.get("spec") or {}).get("taints") or []
    added, removed = diff_labels(current_labels, desired_labels, state, remove_stale)
    new_taints, taints_added, taints_removed = diff_taints(current_taints, desired_taints or [], state)
    changed = bool(added or removed or new_taints is not None)
    final_taints = new_taints if new_taints is not None else current_taints
    final_labels = dict((k, v) for k, v in current_labels.items() if k not in removed)
    final_labels.update(added)
    status = node.get("status") or {}
    return {
        "name": meta.get("name"),
        "changed": changed,
        "added": added,
        "removed": removed,
        "taints": [_plain_taint(t) for t in final_taints],
        "taints_added": taints_added,
        "taints_removed": taints_removed,
        "patch": build_patch(added, removed, new_taints, meta.get("resourceVersion")) if changed else None,
        "before": {
            "labels": dict((k, current_labels[k]) for k in sorted(set(added) | set(removed)) if k in current_labels),
            "taints": [taint_str(t) for t in current_taints],
        },
        "after": {
            "labels": dict(sorted(added.items())),
            "taints": [taint_str(t) for t in final_taints],
        },
        # the node as it is after the run (labels), as read (status): returned with return_nodes
        "node": {
            "labels": final_labels,
            "allocatable": status.get("allocatable") or {},
            "addresses": status.get("addresses") or [],
            "node_info": status.get("nodeInfo") or {},
            "annotations": meta.get("annotations") or {},
        },
    }


class NodeLabelRunFailed(KubegpuError):
    """A failure during a run, with the per-node results reached so far (``results``, also as ``nodes``)."""

    kind = "write"

    def __init__(self, msg, results):
        super(NodeLabelRunFailed, self).__init__(msg, nodes=results, changed=any(r["changed"] for r in results))
        self.results = results


def _public(plan, host, return_nodes=False):
    result = dict((k, v) for k, v in plan.items() if k not in ("patch", "before", "after", "node"))
    if host != plan["name"]:
        result["host"] = host
    if return_nodes:
        result.update(plan["node"])
    return result


def apply_nodes(api, requests, state="present", remove_stale=False, check_mode=False, conflict_retries=5,
                concurrency=1, return_nodes=False):
    """Label and taint a batch of nodes with one LIST and at most one PATCH per node that differs.

    A batch of one lists only that node (field selector on its name), then, when no node has that
    name, every node to find it by hostname or address.

    ``api``: an object with ``list_nodes()``, ``get_node(name)`` and
    ``patch_node(name, body)`` (``k8s_client.NodeAPI``) that raise ``K8sError``; with
    ``concurrency`` above 1 it is called from several threads at once. ``requests``: dicts with
    ``name``, ``aliases``, ``labels`` (normalised; or a function of the resolved node name returning them)
    and ``taints`` (normalised). A 409 Conflict on a
    taint write re-reads that node, plans again and retries, ``conflict_retries`` times at most.

    ``concurrency``: how many nodes are written at the same time (1: one after the other). Results
    and diffs are in the order of ``requests`` either way.

    ``return_nodes``: each result also carries the node's ``labels`` after the run (in check mode, as
    they would be) and its ``allocatable``, ``addresses``, ``node_info`` (``status.nodeInfo``) and
    ``annotations`` as listed.

    Returns ``(results, diffs)``: one result per request, and a before/after
    diff per changed node. Raises NodeMatchError when a host matches no node
    (before anything is written), NodeLabelRunFailed when a write fails: its message is that of
    the first failed node in the order of ``requests``, its results are the nodes before that one,
    plus the later nodes whose write went through before the run stopped (no new write starts
    once one has failed).
    """
    nodes = None
    if len(requests) == 1:
        # One node: list just that one (a field selector on its name) rather than the whole cluster,
        # and the whole cluster only when it has to be found by hostname or address.
        nodes = api.list_nodes(field_selector="metadata.name=%s" % requests[0]["name"]) or None
    if nodes is None:
        nodes = api.list_nodes()
    by_name = dict((n["metadata"]["name"], n) for n in nodes)
    resolved = []
    errors = []
    seen = {}
    for req in requests:
        node, error = resolve_node(by_name, nodes, req["name"], req.get("aliases"))
        if error:
            errors.append(error)
            continue
        node_name = node["metadata"]["name"]
        if node_name in seen:
            errors.append("hosts %s and %s both resolve to Kubernetes node %s" % (seen[node_name], req["name"], node_name))
            continue
        seen[node_name] = req["name"]
        resolved.append((req, node))
    if errors:
        raise NodeMatchError("; ".join(errors))
    # labels that depend on the node a host resolved to (k8s_gpu_label's per-node device plugin configs):
    # worked out for every node before anything is written, so that a node they cannot be given stops the run
    resolved = [(dict(req, labels=req["labels"](node["metadata"]["name"])) if callable(req["labels"]) else req, node)
                for req, node in resolved]

    plans = [plan_node(node, req["labels"], req["taints"], state, remove_stale) for req, node in resolved]
    todo = [] if check_mode else [i for i, plan in enumerate(plans) if plan["changed"]]

    def write(index):
        req, node = resolved[index]
        return _write(api, plans[index], node, req, state, remove_stale, conflict_retries)

    if concurrency > 1 and len(todo) > 1:
        _write_parallel(write, todo, plans, resolved, concurrency)
    else:
        for index in todo:
            plan, error = write(index)
            if error:
                raise NodeLabelRunFailed(error, [_public(plans[i], resolved[i][0]["name"]) for i in range(index)])
            plans[index] = plan

    results = []
    diffs = []
    for (req, _node), plan in zip(resolved, plans):
        results.append(_public(plan, req["name"], return_nodes))
        if plan["changed"]:
            diffs.append({
                "before_header": "node/%s" % plan["name"], "after_header": "node/%s" % plan["name"],
                "before": plan["before"], "after": plan["after"],
            })
    return results, diffs


def _write_parallel(write, todo, plans, resolved, concurrency):
    """``write(index)`` for each index of ``todo`` on ``concurrency`` threads; ``plans`` updated in place.

    Once a write fails no new one starts; the writes under way finish, and then NodeLabelRunFailed
    reports the first failed node in input order. Every thread has ended when this returns or raises.
    """
    stop = threading.Event()
    outcome = {}

    def work(index):
        if stop.is_set():
            return index, None, None
        try:
            plan, error = write(index)
        except BaseException:
            stop.set()
            raise
        if error:
            stop.set()
        return index, plan, error

    # Leaving the with block waits for every worker; after a failure the queued writes return at once.
    with ThreadPoolExecutor(max_workers=min(concurrency, len(todo))) as pool:
        for index, plan, error in pool.map(work, todo):
            outcome[index] = (plan, error)
    written = set(index for index, (plan, _error) in outcome.items() if plan is not None)
    for index in written:
        plans[index] = outcome[index][0]
    failed = [index for index in todo if outcome[index][1]]
    if failed:
        first = failed[0]
        # as one after the other would have it: every node before the failed one (none needed a write, or its
        # write went through), and the later nodes that were written before the run stopped
        done = [i for i in range(len(plans)) if i in written or (i < first and i not in outcome)]
        raise NodeLabelRunFailed(outcome[first][1], [_public(plans[i], resolved[i][0]["name"]) for i in done])


def _write(api, plan, node, req, state, remove_stale, conflict_retries):
    """Write one node's plan; returns ``(plan, None)`` (the plan written) or ``(None, message)``."""
    name = plan["name"]
    conflicts = 0
    while True:
        try:
            api.patch_node(name, plan["patch"])
            return plan, None
        except K8sError as exc:
            status = exc.status
            msg = exc.msg
            if status == 409 and conflicts < conflict_retries:
                conflicts += 1
                try:
                    node = api.get_node(name)
                except K8sError as exc2:
                    return None, exc2.msg
                plan = plan_node(node, req["labels"], req["taints"], state, remove_stale)
                if not plan["changed"]:
                    return plan, None
                continue
            if status == 409:
                msg = "%s (gave up after %d conflicting writes)" % (msg, conflicts + 1)
            if status == 422:
                msg = "the API server rejected the labels or taints of node %s: %s" % (name, msg)
            return None, msg
