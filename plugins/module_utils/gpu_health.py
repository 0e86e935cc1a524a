# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""GPU health: how each signal a GPU reports becomes a finding with a severity and an action.

Pure Python: the readers (``gpu_health_nvml`` for NVML, ``gpu_health_xid`` for the kernel log) hand plain values
to the ``classify_*`` functions here, which return findings. A finding is a dict::

    {"signal": "ecc", "severity": "unhealthy", "action": "reset_gpu",
     "reason": "2 volatile uncorrectable ECC errors", "source": "DCGM modules/health/DcgmHealthWatch.cpp ..."}

Severities, from best to worst: ``healthy``, ``degraded`` (usable, watch it), ``unhealthy`` (keep work off it).
Actions, from least to most drastic: ``none``, ``restart_application``, ``reset_gpu``, ``reboot_node``,
``field_diagnostics`` (run NVIDIA's field diagnostics and, when they fail, return the board).

The rules follow NVIDIA's classification, cited per rule:

- DCGM ``modules/health/DcgmHealthWatch.cpp`` (NVIDIA/DCGM): FAIL becomes ``unhealthy``, WARN ``degraded``;
  its limits from ``common/DcgmGPUHardwareLimits.h``;
- NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors, "Xid Error Listing": the recommended action of
  each Xid) for the actions, and for Xids DCGM does not watch;
- k8s-device-plugin ``internal/rm/health.go`` for the Xids that are ignored by default (application errors).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

SEVERITIES = ("healthy", "degraded", "unhealthy")
ACTIONS = ("none", "restart_application", "reset_gpu", "reboot_node", "field_diagnostics")
NOT_SUPPORTED = "not supported"

DCGM = "DCGM modules/health/DcgmHealthWatch.cpp"
DCGM_LIMITS = "DCGM common/DcgmGPUHardwareLimits.h"
XID_CATALOG = "NVIDIA Xid catalog (docs.nvidia.com/deploy/xid-errors)"
DEVICE_PLUGIN = "k8s-device-plugin internal/rm/health.go"
NVML_DOC = "NVML API reference (nvml.h)"

# k8s-device-plugin internal/rm/health.go getDisabledHealthCheckXids: application errors, the GPU is still healthy
DEVICE_PLUGIN_IGNORED_XIDS = (13, 31, 43, 45, 68, 109)

# What an Xid the table below does not know gets: a GPU error worth a look, not a reason to drain the node.
UNKNOWN_XID_SEVERITY = "degraded"

# Xid -> (severity, action, what it means, source). Severities from DCGM's BuildXidMappings (FAIL/WARN) where DCGM
# watches the Xid, else from the catalog's action; actions from the catalog.
XIDS = {
    13: ("degraded", "restart_application", "graphics engine exception (an application error)", XID_CATALOG),
    31: ("degraded", "restart_application", "GPU memory page fault (MMU error)", DCGM + " BuildXidMappings"),
    32: ("degraded", "restart_application", "invalid or corrupted push buffer stream (PBDMA error)",
         DCGM + " BuildXidMappings"),
    38: ("degraded", "none", "PCIe bus error", DCGM + " BuildXidMappings"),
    39: ("degraded", "none", "PCIe fabric error", DCGM + " BuildXidMappings"),
    42: ("degraded", "none", "PCIe replay error", DCGM + " BuildXidMappings"),
    43: ("degraded", "restart_application", "GPU stopped processing (reset channel verification error)",
         DCGM + " BuildXidMappings"),
    45: ("healthy", "none", "preemptive cleanup after earlier errors", XID_CATALOG),
    48: ("unhealthy", "reset_gpu", "double-bit ECC error", DCGM + " BuildXidMappings"),
    54: ("degraded", "none", "power state change", DCGM + " BuildXidMappings"),
    56: ("degraded", "none", "clock change", DCGM + " BuildXidMappings"),
    57: ("degraded", "none", "clock change due to power", DCGM + " BuildXidMappings"),
    58: ("degraded", "none", "clock change due to thermal", DCGM + " BuildXidMappings"),
    60: ("degraded", "none", "clocks held low for thermal reasons", DCGM + " BuildXidMappings"),
    61: ("degraded", "none", "EDPP power brake thermal limit", DCGM + " BuildXidMappings"),
    62: ("degraded", "none", "thermal violation", DCGM + " BuildXidMappings"),
    63: ("degraded", "reset_gpu", "ECC page retirement or row remap recorded, pending until a GPU reset",
         DCGM + " BuildXidMappings"),
    64: ("unhealthy", "reset_gpu", "ECC page retirement or row remap recording failure", DCGM + " BuildXidMappings"),
    67: ("degraded", "none", "NVLink error", DCGM + " BuildXidMappings"),
    68: ("degraded", "restart_application", "video processor exception", XID_CATALOG),
    73: ("degraded", "none", "NVLink flow control error", DCGM + " BuildXidMappings"),
    74: ("unhealthy", "reset_gpu", "NVLink critical error", DCGM + " BuildXidMappings"),
    78: ("degraded", "none", "power state forced change", DCGM + " BuildXidMappings"),
    79: ("unhealthy", "reboot_node", "GPU has fallen off the bus", DCGM + " BuildXidMappings"),
    92: ("degraded", "none", "high single-bit ECC error rate", XID_CATALOG),
    93: ("degraded", "field_diagnostics", "corrupt InfoROM", DCGM + " BuildXidMappings"),
    94: ("degraded", "restart_application", "contained ECC error (the application that hit it must restart)",
         DCGM + " BuildXidMappings"),
    95: ("unhealthy", "reset_gpu", "uncontained ECC error", DCGM + " BuildXidMappings"),
    109: ("degraded", "reset_gpu", "context switch timeout", XID_CATALOG),
    119: ("unhealthy", "reset_gpu", "GSP RPC timeout", DCGM + " BuildXidMappings"),
    120: ("unhealthy", "reset_gpu", "GSP error", DCGM + " BuildXidMappings"),
    121: ("degraded", "none", "C2C link corrected error", DCGM + " BuildXidMappings"),
    137: ("degraded", "none", "NVLink FLA privilege error", DCGM + " BuildXidMappings"),
    140: ("unhealthy", "reset_gpu", "ECC unrecovered error", DCGM + " BuildXidMappings"),
}

# Clock event reasons (nvml.h nvmlClocksEventReason*): bit -> what it means. The software power cap (0x4) and
# idle/application clocks are normal operation and not listed.
CLOCK_EVENT_REASONS = (
    (0x8, "hardware slowdown", DCGM + " MonitorThermal"),
    (0x20, "software thermal slowdown", DCGM + " MonitorThermal"),
    (0x40, "hardware thermal slowdown", DCGM + " MonitorThermal"),
    (0x80, "hardware power brake slowdown", DCGM + " MonitorPower"),
)

# nvml.h nvmlGpuFabricState_t and the healthSummary of nvmlGpuFabricInfo_v3_t
FABRIC_STATES = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}
FABRIC_HEALTH = {0: "not supported", 1: "healthy", 2: "unhealthy", 3: "limited capacity"}

# nvml.h nvmlDeviceGpuRecoveryAction_t (field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) -> (name, severity, action);
# DCGM MonitorGpuRecoveryAction: GPU_RESET, NODE_REBOOT and DRAIN_AND_RESET FAIL, DRAIN_P2P WARN
RECOVERY_ACTIONS = {
    0: ("none", "healthy", "none"),
    1: ("gpu_reset", "unhealthy", "reset_gpu"),
    2: ("node_reboot", "unhealthy", "reboot_node"),
    3: ("drain_p2p", "degraded", "restart_application"),
    4: ("drain_and_reset", "unhealthy", "reset_gpu"),
}

# DCGM MonitorPcie: PCIe replays per minute per lane each generation may have (a bit error rate of 1e-12)
PCIE_REPLAYS_PER_LANE_MINUTE = (2.5 / 1000 * 60, 5.0 / 1000 * 60, 8.0 / 1000 * 60, 16.0 / 1000 * 60,
                                32.0 / 1000 * 60, 64.0 / 1000 * 60)

# thresholds: name -> (default, lowest, highest, what it is)
THRESHOLDS = {
    # DcgmGPUHardwareLimits.h DCGM_LIMIT_MAX_RETIRED_PAGES: FAIL at this many retired pages (both causes)
    "retired_pages": (63, 1, 100000, "retired pages that make a GPU unhealthy"),
    # DcgmGPUHardwareLimits.h DCGM_LIMIT_MAX_RETIRED_PAGES_SOFT_LIMIT: double-bit retirements above it
    "retired_pages_dbe": (15, 1, 100000, "pages retired for double-bit errors above which a GPU is degraded"),
    # DcgmGPUHardwareLimits.h DCGM_LIMIT_MAX_ROW_REMAP_UNCORRECTABLE: WARN at this many uncorrectable remaps
    "row_remap_uncorrectable": (512, 1, 100000, "rows remapped for uncorrectable errors that degrade a GPU"),
    # degrees below the slowdown threshold from which the temperature counts as a finding
    "temperature_margin": (0, 0, 50, "degrees C below the slowdown temperature that already degrade a GPU"),
}


def rank(severity):
    return SEVERITIES.index(severity)


def worst(findings):
    """The node's or a GPU's (severity, action, reason): its worst finding's; healthy with no finding."""
    if not findings:
        return "healthy", "none", None
    top = max(findings, key=lambda f: (rank(f["severity"]), ACTIONS.index(f["action"])))
    if top["severity"] == "healthy":
        return "healthy", "none", None
    action = max((f["action"] for f in findings if f["severity"] != "healthy"), key=ACTIONS.index)
    return top["severity"], action, top["reason"]


def finding(signal, severity, action, reason, source):
    return {"signal": signal, "severity": severity, "action": action, "reason": reason, "source": source}


def check_thresholds(given):
    """Defaults merged with ``given`` (a dict), or a one-line message about the first bad value."""
    given = given or {}
    merged = {}
    for name in sorted(given):
        if name not in THRESHOLDS:
            return None, "thresholds.%s is not a threshold; known: %s" % (name, ", ".join(sorted(THRESHOLDS)))
    for name, (default, low, high, _what) in THRESHOLDS.items():
        value = given.get(name, default)
        if value is None:
            value = default
        if isinstance(value, bool) or not isinstance(value, int):
            try:
                value = int(str(value).strip())
            except ValueError:
                return None, "thresholds.%s must be a whole number from %d to %d, got %r" % (name, low, high, value)
        if not low <= value <= high:
            return None, "thresholds.%s must be from %d to %d, got %d" % (name, low, high, value)
        merged[name] = value
    return merged, None


def check_xids(values, option):
    """Sorted unique Xid numbers from ``values``, or a one-line message naming the first bad one."""
    xids = set()
    for value in values or []:
        text = str(value).strip()
        if not text.isdigit() or not 0 < int(text) < 100000:
            return None, "%s must list Xid numbers (1 to 99999), got %r" % (option, value)
        xids.add(int(text))
    return sorted(xids), None


# --- NVML signals -------------------------------------------------------------------------------------------------

def classify_access(error_name):
    """A GPU NVML cannot serve: lost (NVML_ERROR_GPU_IS_LOST), waiting for a reset, or another NVML error."""
    if error_name == "NVML_ERROR_GPU_IS_LOST":
        # Xid 79 in the catalog: the GPU has fallen off the bus; only a reboot (or a re-seat) brings it back
        return finding("gpu", "unhealthy", "reboot_node", "the GPU is lost (fallen off the bus)",
                       XID_CATALOG + " Xid 79; " + NVML_DOC + " NVML_ERROR_GPU_IS_LOST")
    if error_name == "NVML_ERROR_RESET_REQUIRED":
        return finding("gpu", "unhealthy", "reset_gpu", "the GPU needs a reset", NVML_DOC + " NVML_ERROR_RESET_REQUIRED")
    return finding("gpu", "unhealthy", "reboot_node", "NVML cannot read the GPU (%s)" % error_name, NVML_DOC)


def classify_unreadable(signal, message):
    """One signal NVML failed to read (an error other than not supported): the GPU is not known to be healthy."""
    return finding(signal, "degraded", "none", "cannot read %s: %s" % (signal.replace("_", " "), message), NVML_DOC)


def classify_ecc(values):
    """``values``: {volatile_uncorrected, aggregate_uncorrected, volatile_corrected, aggregate_corrected}."""
    count = values.get("volatile_uncorrected") or 0
    if count > 0:
        # MonitorMemVolatileDbes: FAIL for any volatile double-bit (uncorrectable) error; the catalog's Xid 48
        # workflow: reset the GPU (that applies the remap), field diagnostics when it recurs
        return [finding("ecc", "unhealthy", "reset_gpu",
                        "%d uncorrectable ECC error%s since the last GPU reset" % (count, "s" if count != 1 else ""),
                        DCGM + " MonitorMemVolatileDbes")]
    return []


def classify_row_remap(values, thresholds):
    """``values``: {corrected, uncorrected, pending, failure} of nvmlDeviceGetRemappedRows."""
    found = []
    if values.get("failure"):
        # MonitorMemRowRemapFailures: FAIL; no spare row is left for the bank: the board needs field diagnostics
        found.append(finding("row_remap", "unhealthy", "field_diagnostics", "a row remap failed (no spare row left)",
                             DCGM + " MonitorMemRowRemapFailures"))
    if values.get("pending"):
        # nvml.h nvmlDeviceGetRemappedRows: a pending remap takes effect at the next GPU reset
        found.append(finding("row_remap", "degraded", "reset_gpu", "a row remap is pending until the GPU is reset",
                             NVML_DOC + " nvmlDeviceGetRemappedRows; " + XID_CATALOG + " Xid 63"))
    uncorrected = values.get("uncorrected") or 0
    if uncorrected >= thresholds["row_remap_uncorrectable"]:
        found.append(finding("row_remap", "degraded", "field_diagnostics",
                             "%d rows remapped for uncorrectable errors (limit %d)"
                             % (uncorrected, thresholds["row_remap_uncorrectable"]),
                             DCGM + " MonitorMemRowRemapUncorrectable; " + DCGM_LIMITS))
    return found


def classify_retired_pages(values, thresholds):
    """``values``: {single_bit, double_bit, pending} of nvmlDeviceGetRetiredPages and ...PendingStatus."""
    found = []
    total = (values.get("single_bit") or 0) + (values.get("double_bit") or 0)
    if total >= thresholds["retired_pages"]:
        # MonitorMemSbeDbeRetiredPages: FAIL at DCGM_LIMIT_MAX_RETIRED_PAGES retired pages
        found.append(finding("retired_pages", "unhealthy", "field_diagnostics",
                             "%d retired pages (limit %d)" % (total, thresholds["retired_pages"]),
                             DCGM + " MonitorMemSbeDbeRetiredPages; " + DCGM_LIMITS))
    elif (values.get("double_bit") or 0) > thresholds["retired_pages_dbe"]:
        # DCGM fails only when more than one more page is retired within a week after the soft limit; one reading
        # has no history, so it is a warning here
        found.append(finding("retired_pages", "degraded", "field_diagnostics",
                             "%d pages retired for double-bit errors (soft limit %d)"
                             % (values["double_bit"], thresholds["retired_pages_dbe"]),
                             DCGM + " MonitorMemSbeDbeRetiredPages; " + DCGM_LIMITS))
    if values.get("pending"):
        # MonitorMemRetiredPending: WARN; the retirement takes effect when the GPU is reset
        found.append(finding("retired_pages", "degraded", "reset_gpu",
                             "a page retirement is pending until the GPU is reset",
                             DCGM + " MonitorMemRetiredPending"))
    return found


def classify_clocks(mask):
    """``mask``: nvmlDeviceGetCurrentClocksEventReasons. DCGM warns on thermal and power-brake slowdowns."""
    names = [name for bit, name, _source in CLOCK_EVENT_REASONS if mask & bit]
    if not names:
        return []
    sources = sorted(set(source for bit, _name, source in CLOCK_EVENT_REASONS if mask & bit))
    return [finding("clocks", "degraded", "none", "clocks slowed down: %s (reasons 0x%x)" % (", ".join(names), mask),
                    "; ".join(sources))]


def expected_pcie_replays(generation, width, minutes):
    """Replays a link may count in ``minutes`` at DCGM's rate (MonitorPcie), at least one minute's worth."""
    generation = min(max(int(generation or 1), 1), len(PCIE_REPLAYS_PER_LANE_MINUTE))
    per_minute = math.ceil(PCIE_REPLAYS_PER_LANE_MINUTE[generation - 1] * max(int(width or 1), 1))
    return per_minute * max(minutes or 1.0, 1.0)


def classify_pcie(values, uptime_minutes=None):
    """``values``: {generation, generation_max, width, width_max, replays}; any of them None when not supported.

    The link generation drops while the GPU idles (power saving), so only a narrower link than the maximum is a
    finding; the replay counter (since boot) against DCGM's replay rate over the uptime.
    """
    found = []
    width, width_max = values.get("width"), values.get("width_max")
    if width is not None and width_max and width < width_max:
        link = "PCIe link x%d of x%d (Gen%s of Gen%s)" % (width, width_max, values.get("generation"),
                                                          values.get("generation_max"))
        found.append(finding("pcie", "degraded", "none", link, NVML_DOC + " nvmlDeviceGetCurrPcieLinkWidth"))
    replays = values.get("replays")
    if replays:
        allowed = expected_pcie_replays(values.get("generation_max") or values.get("generation"),
                                        width_max or width, uptime_minutes)
        if replays > allowed:
            found.append(finding("pcie", "degraded", "none",
                                 "%d PCIe replays since boot (more than %d at DCGM's rate)" % (replays, allowed),
                                 DCGM + " MonitorPcie"))
    return found


def classify_temperature(values, thresholds):
    """``values``: {current, slowdown} in degrees C."""
    current, slowdown = values.get("current"), values.get("slowdown")
    if current is None or not slowdown:
        return []
    if current >= slowdown - thresholds["temperature_margin"]:
        return [finding("temperature", "degraded", "none",
                        "GPU at %d C, slowdown at %d C" % (current, slowdown),
                        DCGM + " MonitorThermal; " + NVML_DOC + " NVML_TEMPERATURE_THRESHOLD_SLOWDOWN")]
    return []


# nvml.h NVML_GPU_FABRIC_HEALTH_MASK_*: (what, shift, width, values that are a fault); DCGM MonitorFabricFields
# FAILs on each of them
FABRIC_HEALTH_MASK = (
    ("bandwidth degraded", 0, 0x3, (1,)),
    ("route recovery in progress", 2, 0x3, (1,)),
    ("route unhealthy", 4, 0x3, (1,)),
    ("access timeout recovery in progress", 6, 0x3, (1,)),
    ("incorrect configuration", 8, 0xf, tuple(range(2, 16))),
)


def classify_fabric(values):
    """``values``: {state, status, health_mask, health_summary} of nvmlDeviceGetGpuFabricInfoV (NVSwitch systems).

    DCGM MonitorFabricFields: fabric manager training in progress WARN, not started or failed FAIL, each fault bit of
    the health mask FAIL. CUDA cannot use the GPU until the fabric manager has registered it.
    """
    state = values.get("state")
    source = DCGM + " MonitorFabricFields; " + NVML_DOC + " nvmlDeviceGetGpuFabricInfoV"
    if state == 2:
        return [finding("fabric", "degraded", "none",
                        "NVSwitch fabric registration in progress (nvidia-fabricmanager has not finished)", source)]
    if state == 1:
        return [finding("fabric", "unhealthy", "none",
                        "NVSwitch fabric registration not started (is nvidia-fabricmanager running?)", source)]
    if state != 3:
        return []
    if values.get("status"):
        return [finding("fabric", "unhealthy", "reset_gpu",
                        "NVSwitch fabric registration failed (%s)" % values["status"], source)]
    mask = values.get("health_mask") or 0
    faults = [what for what, shift, width, bad in FABRIC_HEALTH_MASK if (mask >> shift) & width in bad]
    if faults:
        return [finding("fabric", "unhealthy", "reset_gpu", "NVSwitch fabric: %s (health mask 0x%x)"
                        % (", ".join(faults), mask), source)]
    # nvmlGpuFabricInfo_v3_t healthSummary (R560 and later): 2 unhealthy, 3 limited capacity
    health = values.get("health_summary")
    if health == 2:
        return [finding("fabric", "unhealthy", "reset_gpu", "NVSwitch fabric unhealthy", source)]
    if health == 3:
        return [finding("fabric", "degraded", "none", "NVSwitch fabric at limited capacity", source)]
    return []


def classify_recovery_action(value):
    """``value``: NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, what the driver recommends (DCGM MonitorGpuRecoveryAction)."""
    if value is None or value == 0:
        return []
    name, severity, action = RECOVERY_ACTIONS.get(value, ("unknown (%s)" % value, "degraded", "none"))
    return [finding("recovery_action", severity, action, "the driver recommends a recovery action: %s" % name,
                    DCGM + " MonitorGpuRecoveryAction; " + NVML_DOC + " nvmlDeviceGpuRecoveryAction_t")]


# --- Xids ---------------------------------------------------------------------------------------------------------

def classify_xid(xid, count, ignored, unknown_severity=UNKNOWN_XID_SEVERITY):
    """One Xid seen ``count`` times. Ignored Xids give no finding; an Xid not in ``XIDS`` gets ``unknown_severity``."""
    if xid in ignored:
        return []
    if xid in XIDS:
        severity, action, meaning, source = XIDS[xid]
    else:
        severity, action, source = unknown_severity, "none", "kubegpu.nvidia (unknown Xid default)"
        meaning = "not in this collection's Xid table, see NVIDIA's Xid catalog"
    if severity == "healthy":
        return []
    times = "" if count == 1 else " (%d times)" % count
    return [finding("xid", severity, action, "Xid %d%s: %s" % (xid, times, meaning), source)]


def summarise(gpus, node_findings):
    """The node's verdict from its GPUs and its own findings (NVML, kernel log, Xids of unknown GPUs).

    ``findings``: every finding of the node, its own (``gpu`` None) and each GPU's (``gpu`` its index, the reason
    prefixed with the GPU), worst first.
    """
    everything = [dict(item, gpu=None) for item in node_findings]
    for gpu in gpus:
        label = "GPU %s" % gpu["index"] + (" (%s)" % gpu["pci_bus_id"] if gpu.get("pci_bus_id") else "")
        everything.extend(dict(item, gpu=gpu["index"], reason="%s: %s" % (label, item["reason"]))
                          for item in gpu["findings"])
    everything = [item for item in everything if item["severity"] != "healthy"]
    everything.sort(key=lambda f: (-rank(f["severity"]), -ACTIONS.index(f["action"])))
    severity, action, reason = worst(everything)
    counts = dict((name, 0) for name in SEVERITIES)
    for gpu in gpus:
        counts[gpu["severity"]] += 1
    return {"severity": severity, "action": action, "reason": reason, "gpus_by_severity": counts,
            "findings": everything}


def _signal_findings(signal, value, thresholds, uptime_minutes):
    if signal == "ecc":
        return classify_ecc(value)
    if signal == "row_remap":
        return classify_row_remap(value, thresholds)
    if signal == "retired_pages":
        return classify_retired_pages(value, thresholds)
    if signal == "recovery_action":
        return classify_recovery_action(value.get("action"))
    if signal == "clocks":
        return classify_clocks(value.get("reasons") or 0)
    if signal == "pcie":
        return classify_pcie(value, uptime_minutes)
    if signal == "temperature":
        return classify_temperature(value, thresholds)
    if signal == "fabric":
        return classify_fabric(value)
    return []


def xid_summary(events, ignored):
    """[{"xid", "count", "ignored", "last_message"}] of one GPU's Xid events, by Xid number."""
    by_xid = {}
    for event in events:
        entry = by_xid.setdefault(event["xid"], {"xid": event["xid"], "count": 0, "ignored": event["xid"] in ignored,
                                                 "last_message": None})
        entry["count"] += 1
        entry["last_message"] = event["message"] or None
    return [by_xid[xid] for xid in sorted(by_xid)]


def xid_findings(xids, ignored, unknown_severity):
    found = []
    for entry in xids:
        found.extend(classify_xid(entry["xid"], entry["count"], ignored, unknown_severity))
    return found


def assess_gpu(reading, thresholds, xid_events=(), ignored=DEVICE_PLUGIN_IGNORED_XIDS,
               unknown_severity=UNKNOWN_XID_SEVERITY, uptime_minutes=None):
    """A GPU's result from its NVML reading (``gpu_health_nvml.read_gpu``) and its Xid events."""
    findings = []
    if reading.get("access_error"):
        findings.append(classify_access(reading["access_error"]))
    signals = reading.get("signals") or {}
    not_supported = sorted(name for name, value in signals.items() if value == NOT_SUPPORTED)
    for signal, value in signals.items():
        if value == NOT_SUPPORTED:
            continue
        if "error" in value:
            findings.append(classify_unreadable(signal, value["error"]))
            continue
        findings.extend(_signal_findings(signal, value, thresholds, uptime_minutes))
    xids = xid_summary(xid_events, ignored)
    findings.extend(xid_findings(xids, ignored, unknown_severity))
    severity, action, reason = worst(findings)
    return {
        "index": reading["index"],
        "name": reading.get("name"),
        "uuid": reading.get("uuid"),
        "pci_bus_id": reading.get("pci_bus_id"),
        "severity": severity,
        "action": action,
        "reason": reason,
        "findings": [item for item in findings if item["severity"] != "healthy"],
        "signals": signals,
        "not_supported": not_supported,
        "xids": xids,
    }
