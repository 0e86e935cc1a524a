# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The work of ``nvidia_gpu_health``: options, one NVML read, the kernel log's Xids, the verdict.

``gather(module, run_command=None, which=None, read_nvml=None, uptime=None)``: each collaborator can be replaced
(tests); by default commands run bounded by ``command_timeout`` (``gpu_discovery_common.run_bounded``), NVML is
read by ``gpu_health_nvml.read_health`` within ``nvml_timeout``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_common import (
    SourceUnavailable,
    run_bounded,
)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_health import (
    DEVICE_PLUGIN_IGNORED_XIDS,
    NVML_DOC,
    SEVERITIES,
    UNKNOWN_XID_SEVERITY,
    assess_gpu,
    check_thresholds,
    check_xids,
    finding,
    summarise,
    classify_xid,
    xid_summary,
)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_health_nvml import read_health
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_health_xid import (
    SOURCES,
    bus_key,
    parse_time,
    parse_xids,
    read_kernel_log,
    read_uptime,
)

ARGUMENT_SPEC = dict(
    kernel_log=dict(type="str", default="auto", choices=list(SOURCES)),
    kernel_log_path=dict(type="path"),
    since=dict(type="str"),
    ignore_xids=dict(type="list", elements="raw", default=list(DEVICE_PLUGIN_IGNORED_XIDS)),
    unknown_xid_severity=dict(type="str", default=UNKNOWN_XID_SEVERITY, choices=list(SEVERITIES)),
    thresholds=dict(type="dict", default={}),
    nvml_timeout=dict(type="int", default=30),
    command_timeout=dict(type="int", default=10),
)


class HealthModule(AnsibleModule):
    """``AnsibleModule`` with ``ARGUMENT_SPEC``; its own failures (wrong types, unknown options) are input errors."""

    def __init__(self):
        super(HealthModule, self).__init__(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                                           required_if=[("kernel_log", "file", ("kernel_log_path",))])

    def fail_json(self, msg, **kwargs):  # pylint: disable=arguments-differ
        kwargs.setdefault("error_kind", "input")
        super(HealthModule, self).fail_json(msg, **kwargs)


def check_options(params):
    """(thresholds, ignored Xids, since in epoch seconds or None), or an InputError with a one-line message."""
    for name in ("nvml_timeout", "command_timeout"):
        if params[name] < 1:
            raise InputError("%s must be at least 1 (seconds), got %d" % (name, params[name]))
    thresholds, problem = check_thresholds(params["thresholds"])
    if problem:
        raise InputError(problem)
    ignored, problem = check_xids(params["ignore_xids"], "ignore_xids")
    if problem:
        raise InputError(problem)
    since = None
    if params["since"] not in (None, ""):
        since = parse_time(params["since"])
        if since is None:
            raise InputError("since must be an ISO 8601 time such as 2026-11-27T01:00:00Z, got %r" % params["since"])
    if params["kernel_log_path"] and params["kernel_log"] != "file":
        raise InputError("kernel_log_path is only read with kernel_log=file (kernel_log is %s)" % params["kernel_log"])
    return thresholds, ignored, since


def _nvml_finding(error):
    action = "reboot_node" if error.timed_out else "none"
    return finding("nvml", "unhealthy", action, str(error), NVML_DOC)


def _attribute(events, gpus):
    """{gpu index: [events]} and the events of PCI addresses no GPU has."""
    index_of = {}
    for gpu in gpus:
        key = bus_key(gpu.get("pci_bus_id"))
        if key is not None:
            index_of[key] = gpu["index"]
    per_gpu, stray = {}, []
    for event in events:
        index = index_of.get(bus_key(event["pci"]))
        if index is None:
            stray.append(event)
        else:
            per_gpu.setdefault(index, []).append(event)
    return per_gpu, stray


def gather(module, run_command=None, which=None, read_nvml=None, uptime=None):
    """The module's result, or a ``KubegpuError``."""
    health = read_node_health(module.params, which or module.get_bin_path, run_command=run_command,
                              read_nvml=read_nvml, uptime=uptime)
    return dict(changed=False, health=health)


def check_params(options, nvml_timeout=None):
    """``options`` (a dict of this module's options, e.g. ``nvidia_gpu_facts``' ``health_options``) with the
    defaults filled in, or an InputError naming the first bad one. ``nvml_timeout``: the default of that key."""
    options = dict(options or {})
    if nvml_timeout is not None:
        options.setdefault("nvml_timeout", nvml_timeout)
    validator = ArgumentSpecValidator(ARGUMENT_SPEC, required_if=[("kernel_log", "file", ("kernel_log_path",))])
    checked = validator.validate(options)
    if checked.error_messages:
        raise InputError("health_options: %s" % checked.error_messages[0])
    return checked.validated_parameters


def read_node_health(params, which, run_command=None, read_nvml=None, uptime=None):
    """The node's ``health`` (what ``nvidia_gpu_health`` returns) for the module options ``params``."""
    thresholds, ignored, since = check_options(params)
    if run_command is None:
        run_command = functools.partial(run_bounded, timeout=params["command_timeout"], environ_update={"LC_ALL": "C"})
    read_nvml = read_nvml or functools.partial(read_health, timeout=params["nvml_timeout"])
    uptime = uptime or read_uptime

    node_findings = []
    driver_version, readings = None, []
    try:
        driver_version, readings = read_nvml()
    except SourceUnavailable as error:
        node_findings.append(_nvml_finding(error))

    lines, source, problem = read_kernel_log(params["kernel_log"], path=params["kernel_log_path"], since=since,
                                             run_command=run_command, which=which, uptime=uptime)
    events = parse_xids(lines or [])
    if problem:
        node_findings.append(finding("kernel_log", "degraded", "none",
                                     "cannot read the kernel log for Xids: %s" % problem,
                                     "kubegpu.nvidia (an unread log hides Xids)"))
    per_gpu, stray = _attribute(events, readings)
    stray_xids = xid_summary(stray, ignored)
    for entry in stray_xids:
        addresses = ", ".join(sorted(set(event["pci"] for event in stray if event["xid"] == entry["xid"])))
        entry["pci"] = addresses
        node_findings.extend(dict(item, reason="PCI %s (no GPU NVML lists): %s" % (addresses, item["reason"]))
                             for item in classify_xid(entry["xid"], entry["count"], ignored,
                                                      params["unknown_xid_severity"]))

    seconds = uptime()
    minutes = seconds / 60.0 if seconds else None
    gpus = [assess_gpu(reading, thresholds, per_gpu.get(reading["index"], ()), ignored,
                       params["unknown_xid_severity"], minutes) for reading in readings]
    verdict = summarise(gpus, node_findings)
    health = {
        "severity": verdict["severity"],
        "action": verdict["action"],
        "reason": verdict["reason"],
        "gpus_by_severity": verdict["gpus_by_severity"],
        "findings": verdict["findings"],
        "driver_version": driver_version,
        "gpus": gpus,
        "kernel_log": {"source": source, "read": lines is not None and source != "none", "problem": problem,
                       "since": params["since"] or "boot", "xid_events": len(events), "stray_xids": stray_xids},
        "ignored_xids": ignored,
        "thresholds": thresholds,
    }
    return health
