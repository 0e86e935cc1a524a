# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the per-node choice between the device plugin and DRA (module_utils/gpu_allocation.py):
kubegpu.nvidia.gpu_allocation, runtime_cdi, dra_hosts, dra_problems, dra_planned_problems, dra_compute_domain_classes,
dra_deployment_problem, dra_slice_readiness, allocation_switches and switch_tolerations."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

# The filters import the module_utils they use when called, not here (docs/development.md, Conventions).

from ansible.errors import AnsibleFilterError


def _host_vars(host, hostvars, name):
    try:
        return hostvars[host]
    except KeyError:
        raise AnsibleFilterError("%s: %s is not a host of the inventory" % (name, host))


def gpu_allocation(host, hostvars):
    """``device_plugin`` or ``dra``: how ``host``'s node hands out its GPUs (``kubegpu_gpu_allocation``)."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_allocation import host_allocation

    try:
        return host_allocation(host, _host_vars(host, hostvars, "gpu_allocation"))
    except InputError as exc:
        raise AnsibleFilterError(exc.msg)


def runtime_cdi(host, hostvars):
    """True, False or None: the CDI setting the toolkit role gives ``host``'s runtime."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_allocation as ga

    try:
        return ga.runtime_cdi(host, _host_vars(host, hostvars, "runtime_cdi"))
    except InputError as exc:
        raise AnsibleFilterError(exc.msg)


def dra_hosts(hosts, hostvars):
    """The hosts of ``hosts`` whose ``kubegpu_gpu_allocation`` is ``dra``, in order."""
    return [host for host in hosts or [] if gpu_allocation(host, hostvars) == "dra"]


def _dra_message(name, hosts, hostvars, cluster_version, device_classes, compute_domains, driver_runs=None):
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_allocation as ga

    nodes = []
    for host in dra_hosts(hosts, hostvars):
        host_vars = _host_vars(host, hostvars, name)
        gpu = (host_vars.get("ansible_facts") or {}).get("nvidia_gpu") or {}
        version, planned = gpu.get("driver_version"), False
        if driver_runs is not None:
            version, planned = ga.planned_driver(gpu, host_vars, driver_runs, _default_branch(host_vars))
        nodes.append({"host": host, "driver_version": version, "driver_planned": planned,
                      "cdi": ga.runtime_cdi(host, host_vars)})
    problems = ga.dra_problems(cluster_version, nodes, device_classes, bool(compute_domains),
                               check_cluster=driver_runs is None or cluster_version is not None)
    return ("DRA cannot be deployed: " + "; ".join(problems)) if problems else ""


def dra_problems(hosts, hostvars, cluster_version, device_classes=None, compute_domains=False):
    """Every reason the DRA driver cannot be deployed on the DRA hosts of ``hosts``, as one line ("" when none)."""
    return _dra_message("dra_problems", hosts, hostvars, cluster_version, device_classes, compute_domains)


def _default_branch(host_vars):
    """The driver branch the driver role installs on a host that asks for none: ``_nvidia_driver_default_branch``
    of the vars file the role loads for the host's distribution (the role's first_found candidates, in its order)."""
    import yaml

    facts = host_vars.get("ansible_facts") or {}
    names = [facts.get("distribution"), facts.get("os_family")]
    major = facts.get("distribution_major_version")
    candidates = [n for name in names if name for n in ("%s-%s.yml" % (name, major), "%s.yml" % name)] + ["default.yml"]
    vars_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "roles", "nvidia_driver", "vars")
    for candidate in candidates:
        path = os.path.join(vars_dir, candidate)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                branch = (yaml.safe_load(handle) or {}).get("_nvidia_driver_default_branch")
            return str(branch) if branch else None
    return None


def dra_planned_problems(hosts, hostvars, cluster_version, run_tags=None, skip_tags=None, device_classes=None,
                         compute_domains=False):
    """``dra_problems`` on what the site run will leave, before it changes anything: the driver this run's driver
    role installs on a DRA host (when its play runs under ``run_tags`` / ``skip_tags``), else the loaded one;
    ``cluster_version`` None when the run does not read the cluster (not checked then; the DRA driver role, which
    needs the cluster, checks it)."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import site_plan

    for name, value in (("run_tags", run_tags), ("skip_tags", skip_tags)):
        if value is not None and not isinstance(value, (list, tuple)):
            raise AnsibleFilterError("dra_planned_problems expects %s as a list of tags, not %s" % (name, type(value).__name__))
    return _dra_message("dra_planned_problems", hosts, hostvars, cluster_version, device_classes, compute_domains,
                        driver_runs=site_plan.driver_play_runs(run_tags, skip_tags))


def dra_compute_domain_classes(compute_domains):
    """The ComputeDomain DeviceClasses ``{name: [CEL selector]}`` when ``compute_domains`` is true, else ``{}``."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_allocation import compute_domain_classes

    return compute_domain_classes(bool(compute_domains))


def dra_deployment_problem(deployment):
    """Why a Deployment (the ComputeDomain controller) is not available, in one line; "" when it is."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_allocation import deployment_problem

    if deployment is not None and not isinstance(deployment, dict):
        raise AnsibleFilterError("dra_deployment_problem expects a Deployment object (a dict), got %s"
                                 % type(deployment).__name__)
    return deployment_problem(deployment)


def dra_slice_readiness(slices, hosts, hostvars):
    """One row per DRA host of ``hosts``: ``host``, ``node``, ``ok``, ``reason`` ("" when ok) and
    ``allocatable_text`` (``DRA: 8 gpu``, ``DRA: 7 gpu, 7 mig-1g.5gb``) and ``expected_text`` (what the facts name),
    from ``slices``, the items of ONE list of the driver's ResourceSlices."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_allocation as ga
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.inventory_hosts import node_name

    published = ga.published_devices(slices)
    rows = []
    for host in dra_hosts(hosts, hostvars):
        host_vars = _host_vars(host, hostvars, "dra_slice_readiness")
        node = node_name(host, host_vars)
        gpu = (host_vars.get("ansible_facts") or {}).get("nvidia_gpu") or {}
        why = ga.node_readiness(node, gpu, published.get(node))
        rows.append({"host": host, "node": node, "ok": why is None, "reason": why or "",
                     "allocatable_text": ga.allocatable_text(published.get(node)),
                     "expected_text": ga.allocatable_text(ga.expected_devices(gpu))})
    return rows


def allocation_switches(hosts, hostvars, nodes):
    """The nodes of ``hosts`` whose mechanism the run switches (``[{host, node, from, to, msg}]``), from ``nodes``,
    the preflight's node list."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_allocation as ga

    try:
        switches = ga.allocation_switches(hosts, hostvars, nodes)
    except InputError as exc:
        raise AnsibleFilterError(exc.msg)
    return [dict(switch, msg=ga.switch_message(switch)) for switch in switches]


def switch_tolerations(switches):
    """The toleration of a cordon when ``switches`` (allocation_switches) is not empty, else []."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_allocation import CORDON_TOLERATION

    return [dict(CORDON_TOLERATION)] if switches else []


class FilterModule:
    """The collection's filters."""

    def filters(self):
        return {"gpu_allocation": gpu_allocation, "runtime_cdi": runtime_cdi, "dra_hosts": dra_hosts,
                "dra_problems": dra_problems, "dra_planned_problems": dra_planned_problems,
                "dra_compute_domain_classes": dra_compute_domain_classes,
                "dra_deployment_problem": dra_deployment_problem,
                "dra_slice_readiness": dra_slice_readiness,
                "allocation_switches": allocation_switches, "switch_tolerations": switch_tolerations}
