# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The health gate: from each GPU node's health (``nvidia_gpu.health``), its health label, its health taint and,
optionally, its cordon.

``check_options``: the taint, the guard's share and the nodes, every problem before any request.
``plan_gate(node, request, options)``: what one node needs (pure; unit tested case by case).
``guard_problem(plans, options)``: the message that stops the run before any write, or "".
``run_gate(api, requests, options, check_mode)``: one LIST, the plans, the guard, one PATCH per node that changes
(its taints with the node's ``resourceVersion``, a 409 re-read and planned again, as ``node_labels`` writes taints).

The taint contract: the gate adds only its taint (``key=value:effect``) and removes only a taint with its key AND
its value (whatever the effect: an earlier run's); a taint with its key and another value is someone else's: it is
never changed, the gate adds none beside it, and the node's result says so (``foreign_taint``). It cordons only with
``cordon`` and uncordons only a node it cordoned itself (annotation ``CORDON_ANNOTATION``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import ApiError, InputError, KubegpuError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.inventory_hosts import host_aliases, node_name
from ansible_collections.kubegpu.nvidia.plugins.module_utils.node_labels import (
    TAINT_EFFECTS,
    NodeMatchError,
    label_value_problems,
    qualified_name_problems,
    resolve_node,
    taint_str,
)

HEALTH_LABEL = "nvidia.com/gpu.health"
DEFAULT_TAINT = {"key": HEALTH_LABEL, "value": "unhealthy", "effect": "NoSchedule"}
CORDON_ANNOTATION = "kubegpu.nvidia/health-cordoned"
SEVERITIES = ("healthy", "degraded", "unhealthy")
UNKNOWN = "unknown"
DEFAULT_MAX_UNHEALTHY_PERCENT = 30.0
NODES_SHOWN = 10


class GateGuardError(KubegpuError):
    """The guard stopped the gate before any write."""

    kind = "runtime"


def check_options(taint, max_unhealthy_percent, requests):
    """The taint as ``{key, value, effect}``, or an InputError with one line naming every problem."""
    problems = []
    taint = dict(DEFAULT_TAINT, **dict((k, v) for k, v in (taint or {}).items() if v is not None))
    unknown = sorted(str(k) for k in taint if k not in ("key", "value", "effect"))
    if unknown:
        problems.append("taint: unknown field %s (a taint has key, value and effect)" % ", ".join(unknown))
    key, value, effect = (str(taint.get(k, "")) for k in ("key", "value", "effect"))
    for problem in qualified_name_problems(key):
        problems.append("taint key %r: %s" % (key, problem))
    if not value:
        problems.append("taint value must not be empty (the gate removes only the taint with its key and value)")
    else:
        for problem in label_value_problems(value):
            problems.append("taint value %r: %s" % (value, problem))
    if effect not in TAINT_EFFECTS:
        problems.append("taint effect must be one of %s, got %r" % (", ".join(TAINT_EFFECTS), effect))
    if isinstance(max_unhealthy_percent, bool) or not isinstance(max_unhealthy_percent, (int, float)) \
            or not 0 <= max_unhealthy_percent <= 100:
        problems.append("max_unhealthy_percent must be a number from 0 to 100, got %r" % (max_unhealthy_percent,))
    seen = set()
    for index, req in enumerate(requests):
        name = req.get("name")
        if not name or not isinstance(name, str):
            problems.append("nodes[%d] has no name" % index)
            continue
        if name in seen:
            problems.append("node %s is listed twice" % name)
        seen.add(name)
        severity = (req.get("health") or {}).get("severity")
        if severity not in SEVERITIES + (UNKNOWN,):
            problems.append("node %s: health.severity must be one of %s, got %r (the health of nvidia_gpu_facts "
                            "with gather_subset health, or of nvidia_gpu_health)"
                            % (name, ", ".join(SEVERITIES + (UNKNOWN,)), severity))
    if problems:
        raise InputError("; ".join(problems))
    return {"key": key, "value": value, "effect": effect}


def _ours(existing, taint):
    return existing.get("key") == taint["key"] and (existing.get("value") or "") == taint["value"]


def _plain(existing):
    return {"key": existing.get("key"), "value": existing.get("value") or "", "effect": existing.get("effect")}


def plan_gate(node, health, taint, cordon=False):
    """What the gate does to one node (API dict) whose health is ``health``.

    Returns a dict: ``name``, ``severity``, ``reason``, ``action``, ``label`` (``[before, after]``), ``taint``
    (``added``, ``removed``, ``kept``, ``none``, ``foreign``), ``foreign_taint`` (the other value's taint, or None),
    ``cordon`` (``cordoned``, ``uncordoned`` or None), ``was_tainted`` (our taint before the run), ``changed``,
    ``why`` (one line), ``patch`` (None when nothing changes).
    """
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    current = list(spec.get("taints") or [])
    severity = (health or {}).get("severity") or UNKNOWN
    reason = (health or {}).get("reason")
    ours = [t for t in current if _ours(t, taint)]
    foreign = [t for t in current if t.get("key") == taint["key"] and not _ours(t, taint)]
    result = {
        "name": meta.get("name"), "severity": severity, "reason": reason, "action": (health or {}).get("action"),
        "label": [labels.get(HEALTH_LABEL), labels.get(HEALTH_LABEL)], "taint": "none",
        "foreign_taint": taint_str(_plain(foreign[0])) if foreign else None, "cordon": None,
        "was_tainted": bool(ours), "changed": False, "patch": None,
    }
    if severity == UNKNOWN:
        result["taint"] = "kept" if ours else "none"
        result["why"] = "health unknown (%s): left as it is" % (reason or "not read")
        return result

    patch = {}
    if labels.get(HEALTH_LABEL) != severity:
        patch["metadata"] = {"labels": {HEALTH_LABEL: severity}}
        result["label"][1] = severity
    new_taints = None
    want = dict(taint)
    if severity == "unhealthy":
        if foreign:
            result["taint"] = "foreign"
        elif [t for t in ours if t.get("effect") == taint["effect"]] and len(ours) == 1:
            result["taint"] = "kept"
        else:
            # ours is missing (or an earlier run's with another effect): one taint of ours, every other kept
            new_taints = [t for t in current if not _ours(t, taint)] + [want]
            result["taint"] = "added"
        if cordon and not spec.get("unschedulable"):
            patch.setdefault("spec", {})["unschedulable"] = True
            patch.setdefault("metadata", {}).setdefault("annotations", {})[CORDON_ANNOTATION] = "true"
            result["cordon"] = "cordoned"
    else:
        if ours:
            new_taints = [t for t in current if not _ours(t, taint)]
            result["taint"] = "removed"
        if annotations.get(CORDON_ANNOTATION) is not None:
            if spec.get("unschedulable"):
                patch.setdefault("spec", {})["unschedulable"] = False
                result["cordon"] = "uncordoned"
            patch.setdefault("metadata", {}).setdefault("annotations", {})[CORDON_ANNOTATION] = None
    if new_taints is not None:
        patch.setdefault("metadata", {})["resourceVersion"] = meta.get("resourceVersion")
        patch.setdefault("spec", {})["taints"] = new_taints
    if patch:
        result["changed"] = True
        result["patch"] = patch
    result["why"] = _why(result, taint)
    return result


def _why(result, taint):
    severity = result["severity"]
    detail = ": %s" % result["reason"] if result["reason"] else ""
    if result["taint"] == "added":
        text = "taint %s (%s%s)" % (taint_str(taint), severity, detail)
    elif result["taint"] == "removed":
        text = "remove taint %s (%s again)" % (taint_str(taint), severity)
    elif result["taint"] == "foreign":
        text = ("%s%s; not tainted: it already has taint %s, someone else's (same key, another value), left as it is"
                % (severity, detail, result["foreign_taint"]))
    elif result["taint"] == "kept":
        text = "stays tainted (%s%s)" % (severity, detail)
    else:
        text = "%s%s" % (severity, detail)
    if result["cordon"]:
        text += "; " + ("cordon" if result["cordon"] == "cordoned" else "uncordon")
    if result["label"][0] != result["label"][1]:
        text += "; label %s=%s" % (HEALTH_LABEL, result["label"][1])
    return text


def guard_problem(plans, max_unhealthy_percent):
    """One line when more than ``max_unhealthy_percent`` of the GPU nodes would become unhealthy in this run (nodes
    already tainted by the gate do not count as becoming unhealthy), else ""."""
    if not plans:
        return ""
    becoming = [p for p in plans if p["severity"] == "unhealthy" and not p["was_tainted"]]
    share = 100.0 * len(becoming) / len(plans)
    if not becoming or share <= max_unhealthy_percent:
        return ""
    shown = ", ".join("%s (%s)" % (p["name"], p["reason"] or "unhealthy") for p in becoming[:NODES_SHOWN])
    if len(becoming) > NODES_SHOWN:
        shown += " and %d more" % (len(becoming) - NODES_SHOWN)
    return ("health gate stopped before any write: %d of %d GPU nodes (%s%%) would become unhealthy in this run, more "
            "than max_unhealthy_percent %s%%: %s. A systematic misreading must not empty the cluster: check these "
            "nodes, then raise max_unhealthy_percent for one run if they are really unhealthy"
            % (len(becoming), len(plans), _percent(share), _percent(max_unhealthy_percent), shown))


def _percent(value):
    return ("%.1f" % value).rstrip("0").rstrip(".")


def public(plan, host=None):
    """A node's result as the module returns it."""
    result = dict((k, v) for k, v in plan.items() if k not in ("patch", "was_tainted"))
    result["label"] = {"before": plan["label"][0], "after": plan["label"][1]}
    if host:
        result["host"] = host
    return result


def diff(plan, node):
    """The before/after of one changed node: its health label, taints and cordon."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    before_taints = [taint_str(_plain(t)) for t in spec.get("taints") or []]
    after_spec = (plan["patch"] or {}).get("spec") or {}
    after_taints = [taint_str(_plain(t)) for t in after_spec.get("taints", spec.get("taints") or [])]
    return {
        "before_header": "node/%s" % plan["name"], "after_header": "node/%s" % plan["name"],
        "before": {"labels": {HEALTH_LABEL: (meta.get("labels") or {}).get(HEALTH_LABEL)}, "taints": before_taints,
                   "unschedulable": bool(spec.get("unschedulable"))},
        "after": {"labels": {HEALTH_LABEL: plan["label"][1]}, "taints": after_taints,
                  "unschedulable": bool(after_spec.get("unschedulable", spec.get("unschedulable")))},
    }


def _write(api, plan, health, taint, cordon, conflict_retries):
    """Write one node's plan; the plan written (after a 409, planned again on the node read anew)."""
    conflicts = 0
    while True:
        try:
            api.patch_node(plan["name"], plan["patch"])
            return plan
        except ApiError as exc:
            if exc.status != 409 or conflicts >= conflict_retries:
                suffix = " (gave up after %d conflicting writes)" % (conflicts + 1) if exc.status == 409 else ""
                raise KubegpuError("%s%s" % (exc.msg, suffix), kind="write")
            conflicts += 1
            node = api.get_node(plan["name"])
            was_tainted = plan["was_tainted"]
            plan = plan_gate(node, health, taint, cordon)
            plan["was_tainted"] = was_tainted
            if not plan["changed"]:
                return plan


def run_gate(api, requests, taint, max_unhealthy_percent=DEFAULT_MAX_UNHEALTHY_PERCENT, cordon=False,
             check_mode=False, conflict_retries=5):
    """The gate over ``requests`` (``{name, aliases, host, health}``): one LIST of the nodes, the plans, the guard,
    then one PATCH per node that changes (none in check mode).

    Returns ``(results, diffs)``. Raises NodeMatchError (a host without its node) or GateGuardError before any
    write; a failed write stops the run (KubegpuError of kind ``write``, with the nodes written before it).
    """
    nodes = api.list_nodes()
    by_name = dict((n["metadata"]["name"], n) for n in nodes)
    errors, resolved = [], []
    for req in requests:
        node, error = resolve_node(by_name, nodes, req["name"], req.get("aliases"))
        if error:
            errors.append(error)
        else:
            resolved.append((req, node))
    if errors:
        raise NodeMatchError("; ".join(errors))
    plans = [plan_gate(node, req.get("health"), taint, cordon) for req, node in resolved]
    problem = guard_problem(plans, max_unhealthy_percent)
    if problem:
        becoming = [p["name"] for p in plans if p["severity"] == "unhealthy" and not p["was_tainted"]]
        raise GateGuardError(problem, guard={"nodes": becoming, "total": len(plans)})
    diffs = [diff(plan, node) for plan, (_req, node) in zip(plans, resolved) if plan["changed"]]
    if not check_mode:
        for index, ((req, _node), plan) in enumerate(zip(resolved, plans)):
            if not plan["changed"]:
                continue
            try:
                plans[index] = _write(api, plan, req.get("health"), taint, cordon, conflict_retries)
            except KubegpuError as exc:
                done = [public(p, r.get("host")) for (r, _n), p in zip(resolved[:index], plans[:index])]
                raise KubegpuError("writing node %s: %s" % (plan["name"], exc.msg), kind="write", nodes=done,
                                   changed=any(p["changed"] for p in done))
    results = [public(plan, req.get("host")) for (req, _node), plan in zip(resolved, plans)]
    return results, diffs


def report(results, check_mode=False):
    """One line per node: what the gate did (or, in check mode, would do) and why."""
    lines = []
    for result in results:
        prefix = "would " if check_mode and result["changed"] else ""
        lines.append("%s: %s%s" % (result["name"], prefix, result["why"]))
    return lines


def gate_nodes(hosts, hostvars):
    """The gate's ``nodes`` for inventory ``hosts``: each host's Kubernetes node (``kubegpu_node_name``, else the
    host, with its names and addresses as aliases) and its ``nvidia_gpu.health``; ``unknown`` when it was not read."""
    nodes = []
    for host in hosts or []:
        host_vars = hostvars[host] if host in hostvars else {}
        facts = host_vars.get("ansible_facts") or {}
        health = (facts.get("nvidia_gpu") or {}).get("health")
        if not isinstance(health, dict):
            health = {"severity": UNKNOWN, "action": "none",
                      "reason": "health not read (kubegpu.nvidia.nvidia_gpu_facts with gather_subset health)"}
        name = node_name(host, host_vars)
        nodes.append({"name": name, "host": host, "aliases": [a for a in host_aliases(host, host_vars, facts) if a != name],
                      "health": health})
    return nodes
