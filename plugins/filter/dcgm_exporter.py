# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the dcgm_exporter role: its counters file, its tolerations, what stops it, and why no ServiceMonitor
is applied (module_utils/dcgm_exporter.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The filters import the module_utils they use when called, not here (docs/development.md, Conventions).


def dcgm_exporter_counters(profiling, extra=None):
    """The counters file dcgm-exporter reads with ``-f``."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import dcgm_exporter

    return dcgm_exporter.counters_csv(bool(profiling), extra)


def dcgm_exporter_tolerations(gpu_taints, health_taint_key, extra=None):
    """The DaemonSet's tolerations: the GPU nodes' taints, the health taint, then ``extra``."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import dcgm_exporter

    return dcgm_exporter.tolerations(gpu_taints, health_taint_key, extra)


def dcgm_exporter_input_problems(image_error, health_taint_key, extra_tolerations, extra_counters):
    """The one-line reasons the role variables cannot make valid manifests."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import dcgm_exporter

    return dcgm_exporter.input_problems(image_error, health_taint_key, extra_tolerations, extra_counters)


def dcgm_exporter_servicemonitor_note(crd_info, wanted):
    """Why no ServiceMonitor is applied ("" when it is or none is wanted), from the k8s_info result of its CRD."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import dcgm_exporter

    resources = (crd_info or {}).get("resources") or []
    return dcgm_exporter.servicemonitor_note(bool(wanted), resources[0] if resources else None)


class FilterModule:
    """The collection's filters."""

    def filters(self):
        return {
            "dcgm_exporter_counters": dcgm_exporter_counters,
            "dcgm_exporter_tolerations": dcgm_exporter_tolerations,
            "dcgm_exporter_input_problems": dcgm_exporter_input_problems,
            "dcgm_exporter_servicemonitor_note": dcgm_exporter_servicemonitor_note,
        }
