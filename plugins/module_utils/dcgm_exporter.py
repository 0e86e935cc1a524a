# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The decisions of the dcgm_exporter role: the counters it exports, the taints it tolerates, what stops it.

``counters_csv`` writes the counters file dcgm-exporter reads with ``-f`` (``<DCGM field>, <type>, <help>``, as
NVIDIA/dcgm-exporter ``etc/default-counters.csv``): the exporter's default counters plus the ECC, retired-page,
row-remap and Xid fields its file leaves commented out, and the profiling fields only when asked for (they need
CAP_SYS_ADMIN).  ``tolerations`` gives the DaemonSet the tolerations of the GPU nodes' taints and of the health
taint, never that of the pause taint of driver upgrades (module_utils/k8s_eviction.py ``PAUSE_TAINT``), so the
exporter stops with the other GPU daemons.  ``input_problems`` and ``servicemonitor_note`` say, in one line each,
what stops the role and why no ServiceMonitor is applied.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_eviction import PAUSE_TAINT

SERVICEMONITOR_CRD = "servicemonitors.monitoring.coreos.com"

# (DCGM field, Prometheus type, help). The exporter's default counters first, in its order.
DEFAULT_COUNTERS = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "counter", "PCIe bytes transmitted (in KB)."),
    ("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "counter", "PCIe bytes received (in KB)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    # the last Xid; it never goes back to 0 (dcgm-exporter#500): alert on changes, not on the value
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last Xid error."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "NVLink bandwidth counters of all lanes."),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU license status."),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Rows remapped for uncorrectable errors."),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Rows remapped for correctable errors."),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether a row remap has failed."),
)
# The health fields the exporter's file leaves commented out (ECC, retired pages), and the pending remap.
HEALTH_COUNTERS = (
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "Whether a row remap is pending (a GPU reset applies it)."),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter", "Single-bit persistent ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "Double-bit persistent ECC errors."),
    ("DCGM_FI_DEV_RETIRED_SBE", "counter", "Pages retired for single-bit errors."),
    ("DCGM_FI_DEV_RETIRED_DBE", "counter", "Pages retired for double-bit errors."),
    ("DCGM_FI_DEV_RETIRED_PENDING", "counter", "Pages pending retirement."),
    ("DCGM_FI_DEV_POWER_VIOLATION", "counter", "Throttling for power (in us)."),
    ("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "Throttling for temperature (in us)."),
)
# Profiling (DCP) fields: the exporter needs CAP_SYS_ADMIN to read them (dcgm-exporter#165).
PROFILING_COUNTERS = (
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor pipe is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles the device memory interface is active."),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "PCIe bytes transmitted per second."),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "PCIe bytes received per second."),
)
COUNTER_TYPES = ("gauge", "counter", "label")

# the cluster's critical add-ons, as the device plugin tolerates them
CRITICAL_ADDONS = {"key": "CriticalAddonsOnly", "operator": "Exists"}
_FIELD = re.compile(r"DCGM_FI_[A-Z0-9_]+")
# a qualified name with an optional DNS subdomain prefix (Kubernetes validation IsQualifiedName)
_NAME = r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)"
_KEY = re.compile(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?" + _NAME)


def counters(profiling=False, extra=None):
    """[(field, type, help)] the exporter reads: the default and health counters, the profiling ones when asked,
    then ``extra`` (``[{field, type, help}]``), each field once (the first wins)."""
    rows = list(DEFAULT_COUNTERS) + list(HEALTH_COUNTERS) + (list(PROFILING_COUNTERS) if profiling else [])
    for item in extra or []:
        rows.append((item.get("field"), item.get("type", "gauge"), item.get("help") or item.get("field")))
    seen, out = set(), []
    for row in rows:
        if row[0] not in seen:
            seen.add(row[0])
            out.append(row)
    return out


def counters_csv(profiling=False, extra=None):
    """The counters file, one ``<field>, <type>, <help>`` line each."""
    lines = ["# DCGM field, Prometheus metric type, help message (written by kubegpu.nvidia.dcgm_exporter)"]
    lines += ["%s, %s, %s" % row for row in counters(profiling, extra)]
    return "\n".join(lines) + "\n"


def tolerations(gpu_taints, health_taint_key, extra=None):
    """The DaemonSet's tolerations: critical add-ons, each GPU node taint (any value), the health taint (any value,
    any effect, so a node the health gate takes out of service keeps exporting why), then ``extra``."""
    out = [dict(CRITICAL_ADDONS)]
    for taint in gpu_taints or []:
        toleration = {"key": taint.get("key"), "operator": "Exists"}
        if taint.get("effect"):
            toleration["effect"] = taint["effect"]
        if toleration not in out:
            out.append(toleration)
    if health_taint_key:
        out.append({"key": health_taint_key, "operator": "Exists"})
    return out + list(extra or [])


def _tolerates(toleration, taint):
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    operator = toleration.get("operator") or "Equal"
    if not toleration.get("key"):
        return operator == "Exists"
    if toleration["key"] != taint["key"]:
        return False
    return operator == "Exists" or str(toleration.get("value") or "") == taint["value"]


def input_problems(image_error, health_taint_key, extra_tolerations, extra_counters):
    """The reasons the role variables cannot make valid manifests, one line each, in the order the role reports."""
    problems = [image_error] if image_error else []
    if health_taint_key and not (isinstance(health_taint_key, str) and _KEY.fullmatch(health_taint_key)):
        problems.append("dcgm_exporter_health_taint_key %s is not a Kubernetes taint key ([prefix/]name)"
                        % json.dumps(health_taint_key))
    if not isinstance(extra_tolerations, list) or not all(isinstance(t, dict) for t in extra_tolerations):
        problems.append("dcgm_exporter_extra_tolerations must be a list of tolerations, got %s"
                        % json.dumps(extra_tolerations, default=str))
    else:
        for toleration in extra_tolerations:
            if _tolerates(toleration, PAUSE_TAINT):
                problems.append(
                    "dcgm_exporter_extra_tolerations %s tolerates the taint %s=%s:%s that pauses the GPU daemons "
                    "during driver upgrades and MIG changes: the exporter would keep the driver open; name the "
                    "taints to tolerate by key" % (json.dumps(toleration, sort_keys=True), PAUSE_TAINT["key"],
                                                   PAUSE_TAINT["value"], PAUSE_TAINT["effect"]))
    if not isinstance(extra_counters, list):
        problems.append("dcgm_exporter_extra_counters must be a list of {field, type, help}, got %s"
                        % json.dumps(extra_counters, default=str))
    else:
        for item in extra_counters:
            field = item.get("field") if isinstance(item, dict) else None
            if not isinstance(field, str) or not _FIELD.fullmatch(field):
                problems.append("dcgm_exporter_extra_counters: %s has no field DCGM_FI_<NAME>"
                                % json.dumps(item, default=str))
            elif item.get("type", "gauge") not in COUNTER_TYPES:
                problems.append("dcgm_exporter_extra_counters: %s has type %s, not one of %s"
                                % (field, json.dumps(item.get("type")), ", ".join(COUNTER_TYPES)))
    return problems


def servicemonitor_note(wanted, crd):
    """Why no ServiceMonitor is applied, in one line ("" when it is, or when none is wanted).

    ``crd``: the CustomResourceDefinition servicemonitors.monitoring.coreos.com as the API returned it, or None.
    """
    if not wanted or crd:
        return ""
    return ("no ServiceMonitor applied: the CustomResourceDefinition %s does not exist on this cluster (install the "
            "Prometheus Operator, then run again); scrape the Service on port 9400 otherwise" % SERVICEMONITOR_CRD)
