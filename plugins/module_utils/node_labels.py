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

import re
import threading
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.kubegpu.nvidia.plugins.module_utils.gfd_labels import is_managed_label
# the API's errors are caught as errors.ApiError (k8s_client.K8sError is one): importing k8s_client here would
# load the kubernetes library for every user of the label and match rules (filters, every play task using them)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import ApiError, InputError, KubegpuError

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

# Kubernetes' rules for label keys and values (k8s.io/apimachinery pkg/util/validation: IsQualifiedName,
# IsValidLabelValue, IsDNS1123Subdomain) and taints (k8s.io/kubernetes pkg/apis/core/validation:
# validateNodeTaints: the key a qualified name, the value a label value, the effect one of three).
QUALIFIED_NAME_MAX = 63
PREFIX_MAX = 253
LABEL_VALUE_MAX = 63
_NAME = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*\Z")
_NAME_RULE = "alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character"
# how many nodes a problem shared by many names before "and N more"
PROBLEM_NODES_SHOWN = 3
# the answers so far (a batch repeats the same keys and values on every node)
_KEY_PROBLEMS = {}
_VALUE_PROBLEMS = {}


class NodeLabelError(InputError):
    """A user-supplied label or taint that cannot be applied."""


class NodeMatchError(KubegpuError):
    """A requested host that matches no Kubernetes node, or two hosts that match the same one."""

    kind = "node_match"


def qualified_name_problems(name):
    """Why ``name`` is not a valid label (or taint) key, as Kubernetes says it: a list, empty when valid."""
    if not isinstance(name, str):
        return ["must be a string"]
    known = _KEY_PROBLEMS.get(name)
    if known is None:
        known = _KEY_PROBLEMS[name] = tuple(_qualified_name_problems(name))
    return list(known)


def _qualified_name_problems(name):
    parts = name.split("/")
    problems = []
    if len(parts) > 2:
        return ["must be a name with at most one '/': an optional DNS subdomain prefix and '/', then the name"]
    if len(parts) == 2:
        prefix, name = parts
        if not prefix:
            problems.append("prefix part must be non-empty")
        elif len(prefix) > PREFIX_MAX:
            problems.append("prefix part must be no more than %d characters" % PREFIX_MAX)
        elif not _DNS1123_SUBDOMAIN.match(prefix):
            problems.append("prefix part must be a lowercase DNS subdomain (a-z, 0-9, '-' and '.', starting and "
                            "ending with a-z or 0-9)")
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX:
        problems.append("name part must be no more than %d characters" % QUALIFIED_NAME_MAX)
    elif not _NAME.match(name):
        problems.append("name part must consist of %s" % _NAME_RULE)
    return problems


def label_value_problems(value):
    """Why ``value`` is not a valid label (or taint) value, as Kubernetes says it: a list, empty when valid."""
    if not isinstance(value, str):
        return ["must be a string"]
    known = _VALUE_PROBLEMS.get(value)
    if known is None:
        known = _VALUE_PROBLEMS[value] = tuple(_label_value_problems(value))
    return list(known)


def _label_value_problems(value):
    if len(value) > LABEL_VALUE_MAX:
        return ["must be no more than %d characters" % LABEL_VALUE_MAX]
    if value and not _NAME.match(value):
        return ["must be empty or consist of %s" % _NAME_RULE]
    return []


def _shown(value):
    text = value if len(value) <= 80 else value[:77] + "..."
    return '"%s"' % text


def request_problems(requests, state="present"):
    """Every invalid label key or value and taint key, value or effect of a batch, as ``[(problem, node)]``.

    ``requests``: as ``apply_nodes`` takes them (labels and taints normalised). With ``state=absent``
    label values and taint values are not checked (they are ignored). Two taints with the same key and
    effect but different values are a problem too (a node holds one taint per key and effect).
    """
    problems = []
    values = state == "present"
    for req in requests:
        node = req["name"]
        labels = req["labels"]
        if callable(labels):
            # labels that depend on the node the host resolves to: the given part now, the rest once resolved
            labels = getattr(labels, "extra", {})
        for key, value in labels.items():
            # the common case (a valid key and value seen before) costs two dict lookups
            if _KEY_PROBLEMS.get(key) != () or values and _VALUE_PROBLEMS.get(value) != ():
                for problem in qualified_name_problems(key):
                    problems.append(("label key %s: %s" % (_shown(key), problem), node))
                for problem in label_value_problems(value) if values else ():
                    problems.append(("label %s value %s: %s" % (_shown(key), _shown(value), problem), node))
        seen = {}
        for taint in req["taints"]:
            text = _shown(taint_str(taint))
            for problem in qualified_name_problems(taint["key"]):
                problems.append(("taint %s key: %s" % (text, problem), node))
            for problem in label_value_problems(taint["value"]) if values else ():
                problems.append(("taint %s value: %s" % (text, problem), node))
            if taint["effect"] not in TAINT_EFFECTS:
                problems.append(("taint %s: effect must be one of %s" % (text, ", ".join(TAINT_EFFECTS)), node))
            identity = (taint["key"], taint["effect"])
            if values and identity in seen and seen[identity] != taint["value"]:
                problems.append(("taint %s:%s given twice with different values (a node holds one taint per key and "
                                 "effect)" % identity, node))
            seen[identity] = taint["value"]
    return problems


def problems_message(problems, what="invalid labels, taints or facts"):
    """One line for ``[(problem, node)]``: each problem once, with the nodes it concerns (``None``: no node)."""
    order = []
    nodes = {}
    for problem, node in problems:
        if problem not in nodes:
            order.append(problem)
            nodes[problem] = []
        if node is not None and node not in nodes[problem]:
            nodes[problem].append(node)
    parts = []
    for problem in order:
        names = nodes[problem]
        if not names:
            parts.append(problem)
            continue
        shown = ", ".join(names[:PROBLEM_NODES_SHOWN])
        if len(names) > PROBLEM_NODES_SHOWN:
            shown += " and %d more" % (len(names) - PROBLEM_NODES_SHOWN)
        parts.append("%s %s: %s" % ("nodes" if len(names) > 1 else "node", shown, problem))
    return "%s, nothing was written: %s" % (what, "; ".join(parts))


def check_requests(requests, state="present", problems=None):
    """Raise NodeLabelError naming every invalid label and taint of the batch (and ``problems`` found before,
    ``[(problem, node)]``), before anything is written."""
    found = list(problems or []) + request_problems(requests, state)
    if found:
        raise NodeLabelError(problems_message(found))


def _kind(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "the string %s" % _shown(value)
    if isinstance(value, (int, float)):
        return "the number %s" % value
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return "a %s" % type(value).__name__


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check(problems, path, value, ok, wanted):
    if value is not None and not ok(value):
        problems.append("%s must be %s, not %s" % (path, wanted, _kind(value)))
        return False
    return True


def _check_version(problems, path, value):
    _check(problems, path, value, lambda v: isinstance(v, str) or _is_number(v), "a version string such as \"9.0\"")


def facts_problems(facts):
    """Why ``facts`` (``nvidia_gpu`` facts, or all of a host's ``ansible_facts``) cannot be labelled from: a list
    of one-line problems naming the field (``devices[0].memory_mib must be a number, not the string "80GB"``),
    empty when their shape is right.

    The shape is what ``nvidia_gpu_facts`` returns (and ``gpu_node_requests`` passes on): ``present`` a
    boolean, ``count`` an integer, ``devices`` a list of mappings with ``name``/``product`` strings,
    ``memory_mib`` a number, ``compute_capability`` a version, ``count`` a positive integer (that many
    identical GPUs) and ``mig`` a mapping (``current``/``pending`` 0, 1 or null, ``devices`` a list of
    mappings with ``profile`` and ``memory_mib``); driver and CUDA versions strings (or numbers).
    """
    problems = []
    if facts is None:
        return problems
    if not isinstance(facts, dict):
        return ["must be a mapping (the nvidia_gpu facts), not %s" % _kind(facts)]
    if "nvidia_gpu" in facts:
        if not isinstance(facts["nvidia_gpu"], dict):
            return ["nvidia_gpu must be a mapping (the GPU facts), not %s" % _kind(facts["nvidia_gpu"])]
        facts = facts["nvidia_gpu"]
    _check(problems, "present", facts.get("present"), lambda v: isinstance(v, bool), "true or false")
    _check(problems, "count", facts.get("count"), lambda v: _is_int(v) and v >= 0, "a whole number")
    for key in ("source", "machine"):
        _check(problems, key, facts.get(key), lambda v: isinstance(v, str), "a string")
    for key in ("driver_version", "cuda_driver_version"):
        _check_version(problems, key, facts.get(key))
    devices = facts.get("devices")
    if not _check(problems, "devices", devices, lambda v: isinstance(v, list), "a list of GPUs"):
        return problems
    for index, device in enumerate(devices or []):
        path = "devices[%d]" % index
        if not _check(problems, path, device, lambda v: isinstance(v, dict), "a mapping (one GPU's facts)"):
            continue
        if device is None:
            problems.append("%s must be a mapping (one GPU's facts), not null" % path)
            continue
        for key in ("name", "product"):
            _check(problems, path + "." + key, device.get(key), lambda v: isinstance(v, str), "a string")
        _check(problems, path + ".memory_mib", device.get("memory_mib"), lambda v: _is_number(v) and v >= 0,
               "a number of MiB")
        _check(problems, path + ".count", device.get("count"), lambda v: _is_int(v) and v >= 1,
               "a whole number of at least 1")
        capability = device.get("compute_capability")
        if isinstance(capability, (list, tuple)):
            _check(problems, path + ".compute_capability", capability,
                   lambda v: len(v) == 2 and all(_is_int(x) for x in v), "two whole numbers or a string such as \"9.0\"")
        else:
            _check_version(problems, path + ".compute_capability", capability)
        mig = device.get("mig")
        if not _check(problems, path + ".mig", mig, lambda v: isinstance(v, dict), "a mapping"):
            continue
        for key in ("current", "pending"):
            _check(problems, "%s.mig.%s" % (path, key), (mig or {}).get(key), lambda v: _is_int(v) and v in (0, 1),
                   "0, 1 or null")
        migs = (mig or {}).get("devices")
        if not _check(problems, path + ".mig.devices", migs, lambda v: isinstance(v, list), "a list of MIG devices"):
            continue
        for number, one in enumerate(migs or []):
            where = "%s.mig.devices[%d]" % (path, number)
            if one is None or not isinstance(one, dict):
                problems.append("%s must be a mapping (one MIG device), not %s" % (where, _kind(one)))
                continue
            _check(problems, where + ".profile", one.get("profile"), lambda v: isinstance(v, str), "a string")
            _check(problems, where + ".memory_mib", one.get("memory_mib"), lambda v: _is_number(v) and v >= 0,
                   "a number of MiB")
    return problems


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

    Accepts a dict, or the kubectl string form ``key=value:Effect`` / ``key:Effect``. Whether the key,
    value and effect follow Kubernetes' rules is ``request_problems``' business (it checks a whole batch).
    """
    if isinstance(taint, str):
        spec, sep, effect = taint.rpartition(":")
        if not sep:
            raise NodeLabelError("taint %s must look like key=value:Effect" % _shown(taint))
        key, _sep, value = spec.partition("=")
        taint = {"key": key, "value": value, "effect": effect}
    if not isinstance(taint, dict):
        raise NodeLabelError("taint %r must be a dict with key, value and effect" % (taint,))
    unknown = sorted(str(k) for k in taint if k not in ("key", "value", "effect", "timeAdded"))
    if unknown:
        raise NodeLabelError("taint %r: unknown field %s (a taint has key, value and effect)"
                             % (taint, ", ".join(unknown)))
    key = taint.get("key")
    effect = taint.get("effect")
    if not key:
        raise NodeLabelError("taint %r has no key" % (taint,))
    if not isinstance(effect, str) or not effect:
        raise NodeLabelError("taint %r has no effect (one of %s)" % (taint, ", ".join(TAINT_EFFECTS)))
    value = taint.get("value")
    if isinstance(value, bool):
        value = "true" if value else "false"
    value = "" if value is None else str(value)
    if isinstance(key, (dict, list)):
        raise NodeLabelError("taint %r: key must be a string" % (taint,))
    return {"key": str(key), "value": value, "effect": effect}


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


def _requested_host(req):
    """The host a request stands for: its ``host`` (an inventory host), else its requested name."""
    return req.get("host") or req["name"]


def _public(plan, host, return_nodes=False):
    result = dict((k, v) for k, v in plan.items() if k not in ("patch", "before", "after", "node"))
    if host != plan["name"]:
        result["host"] = host
    if return_nodes:
        result.update(plan["node"])
    return result


def apply_nodes(api, requests, state="present", remove_stale=False, check_mode=False, conflict_retries=5,
                concurrency=1, return_nodes=False, checked=False):
    """Label and taint a batch of nodes with one LIST and at most one PATCH per node that differs.

    A batch of one lists only that node (field selector on its name), then, when no node has that
    name, every node to find it by hostname or address.

    ``api``: an object with ``list_nodes()``, ``get_node(name)`` and
    ``patch_node(name, body)`` (``k8s_client.NodeAPI``) that raise ``errors.ApiError``; with
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
    diff per changed node. Raises NodeLabelError listing every invalid label and taint of the batch
    before any request (``checked``: the caller did that already, with ``check_requests``),
    NodeMatchError when a host matches no node (before anything is written), NodeLabelRunFailed when
    a write fails: its message is that of the first failed node in the order of ``requests``, its
    results are the nodes before that one, plus the later nodes whose write went through before the
    run stopped (no new write starts once one has failed).
    """
    if not checked:
        check_requests(requests, state)
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
    if any(callable(req["labels"]) for req in requests):
        check_requests([req for req, _node in resolved], state)

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
                raise NodeLabelRunFailed(error, [_public(plans[i], _requested_host(resolved[i][0])) for i in range(index)])
            plans[index] = plan

    results = []
    diffs = []
    for (req, _node), plan in zip(resolved, plans):
        results.append(_public(plan, _requested_host(req), return_nodes))
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
        raise NodeLabelRunFailed(outcome[first][1], [_public(plans[i], _requested_host(resolved[i][0])) for i in done])


def _write(api, plan, node, req, state, remove_stale, conflict_retries):
    """Write one node's plan; returns ``(plan, None)`` (the plan written) or ``(None, message)``."""
    name = plan["name"]
    conflicts = 0
    while True:
        try:
            api.patch_node(name, plan["patch"])
            return plan, None
        except ApiError as exc:
            status = exc.status
            msg = exc.msg
            if status == 409 and conflicts < conflict_retries:
                conflicts += 1
                try:
                    node = api.get_node(name)
                except ApiError as exc2:
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
