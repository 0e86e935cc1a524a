# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The summary of a site run: one row per host of ``gpu_nodes``, and the table it prints.

Every column is worked out here, from what each play left: the host's GPU facts, the driver and
toolkit roles' facts, the node the host was matched to, the labels play's node results, the device
plugin's capacity check and the validation results. The ``kubegpu.nvidia.site_summary`` and
``kubegpu.nvidia.summary_table`` filters call these functions.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

COLUMNS = ("node", "gpus", "driver", "runtime", "labels", "allocatable", "validation", "health")
GPU_TAINT_KEY = "nvidia.com/gpu"


def _gpus(gpu):
    names = []
    for device in gpu.get("devices") or []:
        name = device.get("name")
        if name and name not in names:
            names.append(name)
    return "%s x %s" % (gpu.get("count"), " + ".join(names))


def _driver(gpu, host_vars):
    """The driver role's own account (``nvidia_driver_summary``: version, held, module flavour, reboot pending,
    not built for the next kernel, Secure Boot blocking), else the facts' driver version."""
    summary = host_vars.get("nvidia_driver_summary")
    if isinstance(summary, dict) and summary.get("text"):
        return summary["text"]
    text = gpu.get("driver_version") or "none"
    if host_vars.get("nvidia_driver_reboot_pending") in (True, "true", "True"):
        text += " (reboot pending)"
    return text


def _runtime(host_vars):
    runtimes = host_vars.get("nvidia_container_toolkit_selected_runtimes")
    if runtimes is None:
        return "not run"
    if not runtimes:
        return "none"
    return "%s: nvidia" % ", ".join(runtimes)


def _labels(node, labelled, check_mode=False):
    if labelled is None:
        return "not run"
    if not node:
        return "no node"
    if node.get("changed"):
        text = "%sset +%d -%d" % ("would " if check_mode else "", len(node.get("added") or {}),
                                  len(node.get("removed") or []))
    else:
        text = "up to date"
    if any(taint.get("key") == GPU_TAINT_KEY for taint in node.get("taints") or []):
        text += ", tainted"
    return text


def _allocatable(check):
    """What the node advertises (``allocatable_text``: per resource name), and what it should when it falls short."""
    if not check:
        return "not checked"
    text = str(check.get("allocatable_text", check.get("allocatable")))
    if not check.get("ok"):
        text += " (expected %s)" % check.get("expected_text", check.get("expected"))
    return text


def _validation(check):
    if not check:
        return "not run"
    if not check.get("passed"):
        return "FAILED: %s" % check.get("reason")
    if check.get("phase") == "Recorded":
        return "passed (recorded, %s)" % check.get("validated_at")
    return "passed"


# nvidia_gpu_health's actions, as the HEALTH column says them
ACTION_WORDS = {
    "restart_application": "restart the application",
    "reset_gpu": "reset the GPU",
    "reboot_node": "reboot the node",
    "field_diagnostics": "run field diagnostics",
}
GATE_WORDS = {"added": "tainted", "kept": "tainted", "removed": "untainted", "foreign": "not tainted: foreign taint"}


def _health(health, gate, gated, check_mode=False):
    """HEALTH: the node's severity, its first reason and the action to take; what the health gate did to it.

    ``health``: the host's ``nvidia_gpu.health`` (None when it was not read); ``gate``: the gate's result for its
    node (``k8s_gpu_health_gate``); ``gated``: whether the gate ran.
    """
    if not isinstance(health, dict) or not health.get("severity"):
        return "not read"
    severity = health["severity"]
    if severity == "healthy":
        text = "healthy"
    else:
        text = "%s: %s" % (severity, health.get("reason") or "no reason given")
        action = ACTION_WORDS.get(health.get("action"))
        if action:
            text += " (%s)" % action
    if gated and gate:
        done = GATE_WORDS.get(gate.get("taint"))
        if done and gate.get("taint") in ("added", "removed") and check_mode:
            done = "would be " + done
        if done:
            text += "; " + done
    elif gated is False and severity == "unhealthy":
        text += "; gate not run"
    return text


def _first(items, key, value):
    for item in items or []:
        if item.get(key) == value:
            return item
    return {}


def summary_rows(hosts, hostvars, matches=None, labelled=None, capacity=None, validation=None, check_mode=False,
                 health=None):
    """One row (a dict with ``host`` and every column of ``COLUMNS``) per host of ``hosts``.

    ``matches``: ``{host: Kubernetes node name}`` of the GPU hosts; ``labelled``: the labels play's node
    results (``None`` when it did not run); ``capacity``: the device plugin's check per host
    (``{host, allocatable, expected, ok}``); ``validation``: the validation results per node; ``check_mode``:
    the run changed nothing (LABELS says what it would set). ``health``: the health gate's node results
    (``None`` when it did not run). Each row also carries ``health_findings``, every finding of the host's health
    read (for the JSON summary).
    """
    matches = matches or {}
    rows = []
    for host in hosts or []:
        host_vars = hostvars[host] if host in hostvars else {}
        gpu = (host_vars.get("ansible_facts") or {}).get("nvidia_gpu") or {}
        if not gpu:
            rows.append({"host": host, "node": host, "gpus": "unknown (no facts)", "driver": "-", "runtime": "-",
                         "labels": "-", "allocatable": "-", "validation": "not run", "health": "-",
                         "health_findings": []})
            continue
        if not gpu.get("present"):
            rows.append({"host": host, "node": host, "gpus": "none (CPU-only)", "driver": "-", "runtime": "-",
                         "labels": "-", "allocatable": "-", "validation": "skipped", "health": "-",
                         "health_findings": []})
            continue
        name = matches.get(host) or ""
        node = _first(labelled, "name", name) if name else {}
        rows.append({
            "host": host,
            "node": host if name in ("", host) else "%s (%s)" % (host, name),
            "gpus": _gpus(gpu),
            "driver": _driver(gpu, host_vars),
            "runtime": _runtime(host_vars),
            "labels": _labels(node, labelled, check_mode),
            "allocatable": _allocatable(_first(capacity, "host", host)),
            "validation": _validation(_first(validation, "node", name) if name else {}),
            "health": _health(gpu.get("health"),
                              _first(health, "host", host) or (_first(health, "name", name) if name else {}),
                              health is not None, check_mode),
            "health_findings": (gpu.get("health") or {}).get("findings") or [],
        })
    return rows


def summary_table(rows, columns=COLUMNS):
    """The rows as text lines: a header of the upper-cased column names, columns padded, two spaces apart."""
    cells = [[column.upper() for column in columns]]
    cells.extend([str(row.get(column, "")) for column in columns] for row in rows)
    widths = [max(len(line[index]) for line in cells) for index in range(len(columns))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in cells]


def validation_table(results):
    """The validation results as table lines: NODE, RESULT (PASS or FAIL) and DETAIL (the reason)."""
    rows = [{"node": row.get("node"), "result": "PASS" if row.get("passed") else "FAIL", "detail": row.get("reason")}
            for row in results]
    return summary_table(rows, ("node", "result", "detail"))


def tenant_table(tenants, validation=None, check_mode=False):
    """The GPU tenants as table lines: TENANT (namespace), QUOTA (``resource=count``, comma-separated), TIER and
    VALIDATION (the tenant path's node and PASS, or FAIL and the reason; "not run" without a result; "check mode"
    in a dry run). ``tenants``: ``k8s_gpu_tenants``' ``tenants``; ``validation``: ``k8s_gpu_tenant_validate``'s
    ``results``. A tenant declared absent shows "absent" as its quota. No tenant: no lines."""
    if not tenants:
        return []
    rows = []
    for tenant in tenants:
        namespace = tenant.get("namespace")
        result = _first(validation or [], "namespace", namespace)
        if result:
            outcome = ("PASS on %s (quota used %s of %s)" % (result.get("node"), result.get("quota_used"),
                                                             result.get("quota_hard"))
                       if result.get("passed") else "FAIL: %s" % result.get("reason"))
        else:
            outcome = "check mode" if check_mode else "not run"
        quota = tenant.get("quota") or {}
        rows.append({"tenant": namespace, "tier": tenant.get("tier") or "-", "validation": outcome,
                     "quota": "absent" if tenant.get("state") == "absent"
                     else ", ".join("%s=%s" % (key, quota[key]) for key in sorted(quota)) or "-"})
    return summary_table(rows, ("tenant", "quota", "tier", "validation"))
