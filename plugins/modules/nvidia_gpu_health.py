#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_gpu_health
short_description: Read the health of every NVIDIA GPU of a node
version_added: 1.1.0
description:
  - Reads, per GPU and through NVML (the C(pynvml) bindings, one NVML session), whether NVML has lost the GPU or
    it needs a reset, its uncorrectable ECC errors, its row remapping (Ampere and later) or retired pages (before
    Ampere), the recovery action the driver recommends, its clock slowdown reasons, its PCIe link width and
    replays against the maximum, its temperature against the slowdown threshold, and its NVSwitch fabric state.
  - Reads the Xids in the kernel log since boot (or since O(since)) and attributes them to the GPUs by PCI
    address.
  - Gives each finding a severity (V(healthy), V(degraded), V(unhealthy)) and an action (V(none),
    V(restart_application), V(reset_gpu), V(reboot_node), V(field_diagnostics)) following DCGM's health
    watches and NVIDIA's Xid catalog; each finding names its source. The node's severity and action are its
    worst finding's. See C(docs/health.md).
  - A signal a GPU does not support is reported as V(not supported), not as an error. A GPU NVML cannot read
    is an V(unhealthy) finding for that GPU; the other GPUs are read all the same. A kernel log that cannot
    be read is a V(degraded) finding with the reason. NVML that cannot be used at all (no driver, a driver
    that does not answer within O(nvml_timeout)) is an V(unhealthy) finding of the node.
  - Only reads; never changes the node.
author:
  - kubegpu.nvidia maintainers (@kubegpu)
extends_documentation_fragment:
  - kubegpu.nvidia.attributes.read_only
options:
  kernel_log:
    description:
      - Where to read the Xids from.
      - V(journal) runs C(journalctl -k) (kernel messages of the systemd journal). V(kmsg) reads C(/dev/kmsg),
        the kernel ring buffer (root or CAP_SYSLOG; also in a container). V(auto) tries V(journal), then
        V(kmsg). V(file) reads O(kernel_log_path) (C(dmesg) or C(journalctl -o short-iso) lines). V(none)
        reads no Xid.
    type: str
    choices: [auto, journal, kmsg, file, none]
    default: auto
  kernel_log_path:
    description:
      - The file of kernel log lines to read with O(kernel_log=file).
    type: path
  since:
    description:
      - Only Xids logged from this time on, as ISO 8601 (V(2026-11-27T01:00:00Z); without a zone, UTC).
        Lines of a O(kernel_log_path) file without a time are always read.
      - Unset, the Xids since boot (for V(kmsg), those the ring buffer still holds).
    type: str
  ignore_xids:
    description:
      - Xids that give no finding (they are still listed in RV(health.gpus[].xids) with C(ignored=true)).
      - The default is the device plugin's list of application errors (k8s-device-plugin
        C(internal/rm/health.go)). V([]) counts every Xid.
    type: list
    elements: raw
    default: [13, 31, 43, 45, 68, 109]
  unknown_xid_severity:
    description:
      - Severity of an Xid the collection's table does not know (its action is V(none)).
    type: str
    choices: [healthy, degraded, unhealthy]
    default: degraded
  thresholds:
    description:
      - Limits of the counters, each a whole number; unset keys keep their default.
      - C(retired_pages) (1 to 100000, default 63, DCGM's C(DCGM_LIMIT_MAX_RETIRED_PAGES)) retired pages make a
        GPU V(unhealthy).
      - C(retired_pages_dbe) (1 to 100000, default 15, DCGM's soft limit) more pages retired for double-bit
        errors make it V(degraded).
      - C(row_remap_uncorrectable) (1 to 100000, default 512, DCGM's C(DCGM_LIMIT_MAX_ROW_REMAP_UNCORRECTABLE))
        rows remapped for uncorrectable errors make it V(degraded).
      - C(temperature_margin) (0 to 50, default 0) degrees C below the slowdown temperature from which the
        temperature is a V(degraded) finding.
    type: dict
    default: {}
  nvml_timeout:
    description:
      - Seconds the NVML session may take; a driver or GPU that does not answer by then is an V(unhealthy)
        finding with the action V(reboot_node). At least 1.
    type: int
    default: 30
  command_timeout:
    description:
      - Seconds C(journalctl) may run. At least 1.
    type: int
    default: 10
notes:
  - The PCIe link generation drops while a GPU idles (power saving), so only a link narrower than its maximum
    width is a finding; the generation is reported.
  - The PCIe replay counter counts since boot; it is a finding when it exceeds DCGM's replay rate for the
    link's maximum generation and width over the uptime.
seealso:
  - module: kubegpu.nvidia.nvidia_gpu_facts
  - name: NVIDIA Xid catalog
    description: What each Xid means and the action NVIDIA recommends.
    link: https://docs.nvidia.com/deploy/xid-errors/
  - name: DCGM health watches
    description: The classification the severities follow (modules/health/DcgmHealthWatch.cpp).
    link: https://github.com/NVIDIA/DCGM
"""

EXAMPLES = r"""
- name: Read the GPU health
  kubegpu.nvidia.nvidia_gpu_health:
  register: gpu_health

- name: Show what to do
  ansible.builtin.debug:
    msg: "{{ gpu_health.health.severity }}: {{ gpu_health.health.reason }} ({{ gpu_health.health.action }})"
  when: gpu_health.health.severity != 'healthy'

- name: Count every Xid, also the application errors the device plugin ignores
  kubegpu.nvidia.nvidia_gpu_health:
    ignore_xids: []

- name: Only Xids of the last maintenance window, from the journal
  kubegpu.nvidia.nvidia_gpu_health:
    kernel_log: journal
    since: "2026-11-27T00:00:00Z"

- name: Stricter limits
  kubegpu.nvidia.nvidia_gpu_health:
    thresholds:
      retired_pages: 32
      temperature_margin: 5
"""

RETURN = r"""
health:
  description: The node's GPU health.
  returned: always
  type: dict
  contains:
    severity:
      description: The node's severity, its worst finding's (V(healthy) without findings).
      type: str
      choices: [healthy, degraded, unhealthy]
      sample: unhealthy
    action:
      description: The most drastic action of the node's findings.
      type: str
      choices: [none, restart_application, reset_gpu, reboot_node, field_diagnostics]
      sample: reset_gpu
    reason:
      description: The worst finding's reason, naming the GPU; V(null) when healthy.
      type: str
      sample: "GPU 1 (00000000:2A:00.0): 2 uncorrectable ECC errors since the last GPU reset"
    gpus_by_severity:
      description: How many GPUs have each severity.
      type: dict
      sample: {healthy: 7, degraded: 0, unhealthy: 1}
    findings:
      description:
        - Every finding of the node that is not V(healthy), worst first. Each has C(signal), C(severity),
          C(action), C(reason), C(source) (the rule's upstream source) and C(gpu) (the GPU's index, V(null)
          for the node's own findings).
        - Signals of the node's own findings are C(nvml) (NVML unusable), C(kernel_log) (log unreadable) and
          C(xid) (an Xid on a PCI address no GPU has).
      type: list
      elements: dict
      sample:
        - {signal: ecc, severity: unhealthy, action: reset_gpu, gpu: 1,
           reason: "GPU 1 (00000000:2A:00.0): 2 uncorrectable ECC errors since the last GPU reset",
           source: DCGM modules/health/DcgmHealthWatch.cpp MonitorMemVolatileDbes}
    driver_version:
      description: The driver version NVML reports; V(null) when NVML could not be used.
      type: str
      sample: 570.86.15
    gpus:
      description: One entry per GPU NVML counts, in index order.
      type: list
      elements: dict
      contains:
        index:
          description: GPU index.
          type: int
        name:
          description: Model name; V(null) when NVML cannot tell (a lost GPU).
          type: str
        uuid:
          description: GPU UUID; V(null) when NVML cannot tell.
          type: str
        pci_bus_id:
          description: PCI bus id in NVML's form; V(null) when NVML cannot tell.
          type: str
        severity:
          description: The GPU's severity.
          type: str
        action:
          description: The most drastic action of the GPU's findings.
          type: str
        reason:
          description: The GPU's worst finding's reason; V(null) when healthy.
          type: str
        findings:
          description: The GPU's findings that are not V(healthy) (C(signal), C(severity), C(action), C(reason), C(source)).
          type: list
          elements: dict
        signals:
          description:
            - "What NVML read, per signal (C(ecc), C(row_remap), C(retired_pages), C(recovery_action), C(clocks),
              C(pcie), C(temperature), C(fabric)): a dict of values, V(not supported), or C({error}) when NVML
              failed. Empty for a GPU NVML has lost or that needs a reset."
          type: dict
          sample:
            ecc: {volatile_uncorrected: 0, aggregate_uncorrected: 0, volatile_corrected: 0, aggregate_corrected: 0}
            row_remap: {corrected: 0, uncorrected: 0, pending: false, failure: false}
            retired_pages: not supported
            recovery_action: {action: 0}
            clocks: {reasons: 0}
            pcie: {generation: 5, generation_max: 5, width: 16, width_max: 16, replays: 0}
            temperature: {current: 40, slowdown: 90}
            fabric: {state: 3, status: null, health_mask: 0, health_summary: 1}
        not_supported:
          description: The signals the GPU does not support.
          type: list
          elements: str
          sample: [retired_pages]
        xids:
          description: The GPU's Xids in the kernel log (C(xid), C(count), C(ignored), C(last_message)).
          type: list
          elements: dict
    kernel_log:
      description: >-
        Which log was read (C(source)), whether it could be (C(read)), why not (C(problem)), from when
        (C(since)), how many Xid lines it had (C(xid_events)) and the Xids of PCI addresses no GPU has
        (C(stray_xids)).
      type: dict
      sample: {source: journal, read: true, problem: null, since: boot, xid_events: 0, stray_xids: []}
    ignored_xids:
      description: The Xids that gave no finding.
      type: list
      elements: int
      sample: [13, 31, 43, 45, 68, 109]
    thresholds:
      description: The thresholds in force, defaults included.
      type: dict
      sample: {retired_pages: 63, retired_pages_dbe: 15, row_remap_uncorrectable: 512, temperature_margin: 0}
"""

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import run_module
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_health_module import HealthModule, gather


def main():
    module = HealthModule()
    run_module(module, gather)


if __name__ == "__main__":
    main()
