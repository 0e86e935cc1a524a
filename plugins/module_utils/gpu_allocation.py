# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""How a GPU node hands out its GPUs: through the device plugin or through Dynamic Resource Allocation.

One variable, ``kubegpu_gpu_allocation`` (host or group level, default ``device_plugin``), is read here and
nowhere else (``host_allocation``). A DRA node carries the label ``nvidia.com/dra-kubelet-plugin=true`` (the
label the GPU Operator uses, ``DRA_LABEL``): the DRA driver's kubelet plugin selects it, the device plugin's
DaemonSet excludes it, so that no node is ever served by both (the two would hand out the same GPUs:
dra-driver-nvidia-gpu refuses to render its chart next to the device plugin unless told
``gpuResourcesEnabledOverride``).

``dra_problems`` is the DRA preflight: every refusal at once, before anything is applied (Kubernetes older
than 1.34, a driver older than 565, CDI not enabled in the runtime, a node set to both, a DeviceClass name or
CEL selector that does not compile, the ComputeDomain classes included when asked). It runs twice on one
site run: right after the GPU facts are read, on what the run will leave (``planned_driver``: the driver
the driver role installs; ``runtime_cdi``: the CDI the toolkit role enables), before any play changes
anything; and as the DRA driver role's first task, on what it finds. ``slice_readiness`` compares, from ONE list of the driver's
ResourceSlices, each DRA node's published devices with what its GPU facts say it has.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kubegpu.nvidia.plugins.module_utils import driver_packages as pkgs
from ansible_collections.kubegpu.nvidia.plugins.module_utils.driver_plan import needs_install
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

try:
    import celpy
    HAS_CELPY = True
except ImportError:
    HAS_CELPY = False

VARIABLE = "kubegpu_gpu_allocation"
DEVICE_PLUGIN = "device_plugin"
DRA = "dra"
CHOICES = (DEVICE_PLUGIN, DRA)
DEFAULT = DEVICE_PLUGIN
# the label the GPU Operator v26.7 puts on nodes that run the DRA driver's kubelet plugin
DRA_LABEL = "nvidia.com/dra-kubelet-plugin"
# dra-driver-nvidia-gpu's driver name (the ResourceSlices' spec.driver and the attributes' domain)
DRIVER = "gpu.nvidia.com"
# README of dra-driver-nvidia-gpu v0.4.1: Kubernetes 1.34 (resource.k8s.io/v1 GA) and an NVIDIA driver >= 565
MIN_KUBERNETES = (1, 34)
MIN_DRIVER = 565
# a DNS-1123 subdomain, as DeviceClass names are validated (k8s.io/apimachinery validation.IsDNS1123Subdomain)
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAMES = {DEVICE_PLUGIN: "the device plugin", DRA: "DRA"}
# the toleration of a cordon (the node controller's taint on an unschedulable node): validation pods on a node
# that switched mechanism run while it is still cordoned
CORDON_TOLERATION = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
# The DeviceClasses of the ComputeDomain part (dra-driver-nvidia-gpu v0.4.1 chart
# templates/deviceclass-compute-domain-daemon.yaml and deviceclass-compute-domain-default-channel.yaml): the
# IMEX daemon of a ComputeDomain and its default IMEX channel, devices of the driver compute-domain.nvidia.com
COMPUTE_DOMAIN_DRIVER = "compute-domain.nvidia.com"
COMPUTE_DOMAIN_DEVICE_CLASSES = {
    "compute-domain-daemon.nvidia.com": [
        "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == 'daemon'"],
    "compute-domain-default-channel.nvidia.com": [
        "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == 'channel'"
        " && device.attributes['compute-domain.nvidia.com'].id == 0"],
}
_QUANTITY = re.compile(r"^([0-9]+)(Ki|Mi|Gi|Ti|)$")
_FACTOR_MIB = {"Ki": 1.0 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 * 1024}


def host_allocation(host, hostvars):
    """``device_plugin`` or ``dra`` for inventory host ``host`` from its ``kubegpu_gpu_allocation``.

    Raises InputError naming the host when the value is neither, and when it names both mechanisms (a list of
    both or ``both``): a node served by the device plugin and by DRA would hand out each GPU twice.
    """
    value = (hostvars or {}).get(VARIABLE, DEFAULT)
    if value is None or value == "":
        return DEFAULT
    if isinstance(value, (list, tuple)):
        chosen = sorted(set(str(item) for item in value))
        if len(chosen) == 1 and chosen[0] in CHOICES:
            return chosen[0]
        value = "both" if set(chosen) >= set(CHOICES) else ", ".join(chosen)
    if value == "both":
        raise InputError("host %s sets %s to both device_plugin and dra: a node is served by one of them, never "
                         "both (they would hand out the same GPUs twice)" % (host, VARIABLE))
    if value not in CHOICES:
        raise InputError("host %s sets %s to %r: choose device_plugin or dra" % (host, VARIABLE, value))
    return value


def runtime_cdi(host, hostvars):
    """Whether the toolkit role enables CDI in ``host``'s runtime: its ``nvidia_container_toolkit_cdi`` when set,
    else True on a DRA host (the DRA driver hands GPUs to containers through CDI), else None (left as it is)."""
    value = (hostvars or {}).get("nvidia_container_toolkit_cdi")
    if value is not None:
        return bool(value)
    return True if host_allocation(host, hostvars) == DRA else None


def planned_driver(gpu_facts, host_vars, driver_runs=True, default_branch=None):
    """``(version, planned)``: the NVIDIA driver ``host_vars``' host runs once this run's driver role is done.

    The loaded one (``gpu_facts["driver_version"]``, ``planned`` False) unless the driver role runs on the host
    (``driver_runs``, and ``nvidia_driver_skip`` not true) and installs another: the role's own test
    (``driver_plan.needs_install``) against ``nvidia_driver_version``, else ``nvidia_driver_branch``, else
    ``default_branch`` (the distribution's, from the role's vars). The result is the version or the branch the
    host asks for (the exact version of a branch is resolved on the node, later; its major is what counts).
    """
    gpu_facts = gpu_facts or {}
    host_vars = host_vars or {}
    loaded = gpu_facts.get("driver_version")
    skip = host_vars.get("nvidia_driver_skip")
    if not driver_runs or skip is True or str(skip).lower() in ("true", "yes", "1"):
        return loaded, False
    version = str(host_vars.get("nvidia_driver_version") or "") or None
    branch = pkgs.branch_of(version) if version else str(host_vars.get("nvidia_driver_branch") or default_branch or "")
    if not branch:
        return loaded, False
    if needs_install(gpu_facts, {}, version, branch, None)[0]:
        return version or branch, True
    return loaded, False


def node_labels(allocation):
    """The label the collection writes for ``allocation``: ``{DRA_LABEL: "true"}`` on a DRA node, None (remove
    it) on a device plugin node."""
    return {DRA_LABEL: "true" if allocation == DRA else None}


def _version_tuple(text):
    numbers = re.findall(r"[0-9]+", str(text or ""))
    return tuple(int(number) for number in numbers[:3])


def device_class_problems(name, selectors):
    """Why a DeviceClass named ``name`` with CEL ``selectors`` (strings) would be refused, as a list.

    The name must be a DNS-1123 subdomain of at most 253 characters; each selector must compile as CEL
    (cel-python, when installed on the controller; the API server refuses it anyway).
    """
    problems = []
    if not isinstance(name, str) or len(name) > 253 or not _SUBDOMAIN.match(name):
        problems.append("DeviceClass name %r is not a DNS-1123 subdomain (lower case letters, digits, '-' and '.')"
                        % (name,))
    for selector in selectors or []:
        if not isinstance(selector, str) or not selector.strip():
            problems.append("DeviceClass %s has an empty CEL selector" % name)
            continue
        if HAS_CELPY:
            try:
                celpy.Environment().compile(selector)
            except celpy.CELParseError as exc:
                problems.append("DeviceClass %s CEL selector %r does not compile: %s"
                                % (name, selector, str(exc).splitlines()[0] if str(exc) else type(exc).__name__))
    return problems


def compute_domain_classes(compute_domains):
    """The ComputeDomain DeviceClasses ``{name: [CEL selector]}`` when ``compute_domains`` is on, else ``{}``."""
    return dict((name, list(selectors)) for name, selectors in COMPUTE_DOMAIN_DEVICE_CLASSES.items()) \
        if compute_domains else {}


def dra_problems(cluster_version, nodes, device_classes=None, compute_domains=False, check_cluster=True):
    """Every reason the DRA driver cannot be deployed, as one list of one-line texts (empty: go ahead).

    ``cluster_version``: ``kubegpu_cluster.version`` (``"1.34.2"``), not looked at with ``check_cluster``
    false (a run of the node plays alone, which does not read the cluster). ``nodes``: one dict per DRA host with
    ``host``, ``driver_version`` (its GPU facts', None when unknown), ``driver_planned`` (true when that
    version is the one this run's driver role installs, not the loaded one), ``cdi`` (whether the runtime has CDI
    enabled, None when the toolkit role did not say), ``runtime`` (whether the NVIDIA runtime is configured,
    None when unknown). ``device_classes``: ``{name: [CEL selector, ...]}`` the role would create;
    ``compute_domains``: whether the ComputeDomain part is deployed too (its two DeviceClasses are checked, and
    a configured class of the same name refused: both would be applied under one name).
    """
    problems = []
    if nodes and check_cluster and _version_tuple(cluster_version)[:2] < MIN_KUBERNETES:
        problems.append("the cluster runs Kubernetes %s; DRA (resource.k8s.io/v1) needs 1.34 or newer"
                        % (cluster_version or "of an unknown version"))
    for node in nodes or []:
        host = node.get("host")
        major = _version_tuple(node.get("driver_version"))[:1]
        if not major:
            problems.append("DRA host %s: its GPU facts name no driver version (the DRA driver needs %d or newer)"
                            % (host, MIN_DRIVER))
        elif major[0] < MIN_DRIVER and node.get("driver_planned"):
            problems.append("DRA host %s gets NVIDIA driver %s from this run's driver role; the DRA driver needs %d "
                            "or newer" % (host, node.get("driver_version"), MIN_DRIVER))
        elif major[0] < MIN_DRIVER:
            problems.append("DRA host %s runs NVIDIA driver %s; the DRA driver needs %d or newer"
                            % (host, node.get("driver_version"), MIN_DRIVER))
        if node.get("runtime") is False:
            problems.append("DRA host %s has no NVIDIA runtime configured" % host)
        if node.get("cdi") is not True:
            problems.append("DRA host %s does not have CDI enabled in its container runtime (set "
                            "nvidia_container_toolkit_cdi: true or leave it null for DRA hosts)" % host)
    for name, selectors in sorted((device_classes or {}).items()):
        problems.extend(device_class_problems(name, selectors))
    for name, selectors in sorted(compute_domain_classes(compute_domains).items()):
        if name in (device_classes or {}):
            problems.append("DeviceClass %s is created by the ComputeDomain part (nvidia_dra_driver_compute_domains); "
                            "remove it from nvidia_dra_driver_device_classes" % name)
        problems.extend(device_class_problems(name, selectors))
    return problems


def check_dra(cluster_version, nodes, device_classes=None):
    """Raise one InputError listing every ``dra_problems`` entry; return None when there is none."""
    problems = dra_problems(cluster_version, nodes, device_classes)
    if problems:
        raise InputError("DRA cannot be deployed: " + "; ".join(problems))


def deployment_problem(deployment):
    """Why a Deployment is not rolled out and available, in one line ("" when it is; ``not found`` for none).

    ``kubectl rollout status``'s test (k8s.io/kubectl pkg/polymorphichelpers/rollout_status.go,
    DeploymentStatusViewer): the controller saw the current spec (``observedGeneration``), every wanted replica
    is updated, no old replica is left and every updated one is available.
    """
    if not deployment:
        return "not found"
    spec = deployment.get("spec") or {}
    status = deployment.get("status") or {}
    wanted = spec.get("replicas", 1)
    counts = (status.get("updatedReplicas", 0), status.get("replicas", 0), status.get("availableReplicas", 0))
    generation = (deployment.get("metadata") or {}).get("generation", 0)
    if status.get("observedGeneration", -1) >= generation and counts == (wanted, wanted, wanted):
        return ""
    return ("%d replica(s) wanted, %d updated, %d in all, %d available, observedGeneration %s of generation %s"
            % ((wanted,) + counts + (status.get("observedGeneration", "none"), generation)))


def quantity_mib(text):
    """MiB in a memory quantity such as ``81559Mi``, ``80Gi`` or a byte count; None when not understood."""
    match = _QUANTITY.match(str(text or "").strip())
    if not match:
        return None
    number, suffix = int(match.group(1)), match.group(2)
    if not suffix:
        return number // (1024 * 1024)
    return int(number * _FACTOR_MIB[suffix])


def _attribute(device, name):
    value = ((device.get("attributes") or {}).get(name) or {})
    for kind in ("string", "int", "version", "bool"):
        if kind in value:
            return value[kind]
    return None


def published_devices(slices, driver=DRIVER):
    """``{node name: [device, ...]}`` of the devices in ``slices`` (one LIST's items): each ``{name, type, uuid,
    product, memory_mib}``, ``type`` ``gpu`` for a full GPU (also when the attribute is missing) or ``mig`` for a
    MIG device, which adds ``parent`` (its GPU's UUID) and ``profile``; devices of other types are left out."""
    out = {}
    for item in slices or []:
        spec = item.get("spec") or {}
        if spec.get("driver") != driver or not spec.get("nodeName"):
            continue
        devices = out.setdefault(spec["nodeName"], [])
        for device in spec.get("devices") or []:
            kind = _attribute(device, "type") or "gpu"
            if kind not in ("gpu", "mig"):
                continue
            entry = {
                "name": device.get("name"),
                "type": kind,
                "uuid": _attribute(device, "uuid"),
                "product": _attribute(device, "productName"),
                "memory_mib": quantity_mib(((device.get("capacity") or {}).get("memory") or {}).get("value")),
            }
            if kind == "mig":
                entry.update(parent=_attribute(device, "parentUUID"), profile=_attribute(device, "profile"))
            devices.append(entry)
    return out


def _mig_on(device):
    return bool(((device or {}).get("mig") or {}).get("current"))


def expected_devices(facts):
    """The devices the DRA driver publishes for a node with ``facts`` (its ``nvidia_gpu`` facts), in the shape of
    ``published_devices``: a GPU with MIG off as a full GPU; a GPU with MIG on as its MIG devices only (the kubelet
    plugin does not announce it whole: cmd/gpu-kubelet-plugin/nvlib.go of dra-driver-nvidia-gpu v0.4.1), none
    where the facts do not list them (``mig.devices`` null)."""
    out = []
    for device in (facts or {}).get("devices") or []:
        if not _mig_on(device):
            out.append({"type": "gpu", "uuid": device.get("uuid"), "product": device.get("name"),
                        "memory_mib": device.get("memory_mib")})
            continue
        for mig in (device.get("mig") or {}).get("devices") or []:
            out.append({"type": "mig", "uuid": mig.get("uuid"), "parent": device.get("uuid"),
                        "profile": mig.get("profile")})
    return out


def _profiles_text(devices):
    counts = {}
    for device in devices:
        counts[device.get("profile")] = counts.get(device.get("profile"), 0) + 1
    return ", ".join("%dx%s" % (counts[name], name) for name in sorted(counts, key=str)) or "none"


def _mig_readiness(node, facts_devices, full, migs):
    """Why the MIG devices in a node's slice (``migs``) differ from its facts, None when they agree."""
    by_uuid = dict((device.get("uuid"), device) for device in facts_devices)
    for device in full:
        if _mig_on(by_uuid.get(device["uuid"])):
            return "node %s's ResourceSlice lists GPU %s whole, its facts say MIG is on there" % (node, device["uuid"])
    for device in migs:
        # a MIG device of a GPU whose MIG mode the facts do not know (nvidia-smi or PCI facts) is not judged
        parent = by_uuid.get(device.get("parent")) or {}
        if ((parent.get("mig") or {}).get("current")) is not None and not _mig_on(parent):
            return "node %s's ResourceSlice lists MIG device %s of GPU %s, whose MIG mode its facts say is off" % (
                node, device["name"], device.get("parent"))
    for gpu in facts_devices:
        want = (gpu.get("mig") or {}).get("devices")
        if not _mig_on(gpu) or want is None:
            continue
        got = [device for device in migs if device.get("parent") == gpu.get("uuid")]
        if _profiles_text(got) != _profiles_text(want):
            return "node %s's ResourceSlice lists MIG devices %s on GPU %s, its facts %s" % (
                node, _profiles_text(got), gpu.get("uuid"), _profiles_text(want))
        uuids = set(device.get("uuid") for device in got)
        for mig in want:
            if mig.get("uuid") and mig["uuid"] not in uuids:
                return "node %s's ResourceSlice does not list MIG device %s (%s on GPU %s)" % (
                    node, mig["uuid"], mig.get("profile"), gpu.get("uuid"))
    return None


def _expected(device):
    return {"uuid": device.get("uuid"), "product": device.get("name"), "memory_mib": device.get("memory_mib")}


def node_readiness(node, facts, published):
    """``None`` when ``published`` (the node's devices in its slices) lists the GPUs its ``facts`` say it has,
    else why not (one line): no slice, a count, a UUID, a product or a memory that differs; on a GPU with MIG on,
    its MIG devices instead of the GPU (count per profile, UUIDs where the facts have them)."""
    facts_devices = (facts or {}).get("devices") or []
    expected = [_expected(device) for device in facts_devices if not _mig_on(device)]
    if published is None:
        return "node %s has no ResourceSlice of driver %s" % (node, DRIVER)
    full = [device for device in published if device.get("type", "gpu") == "gpu"]
    migs = [device for device in published if device.get("type") == "mig"]
    if migs or len(expected) != len(facts_devices):
        why = _mig_readiness(node, facts_devices, full, migs)
        if why:
            return why
    if len(full) != len(expected):
        return "node %s's ResourceSlice lists %d GPUs, its facts %d" % (node, len(full), len(expected))
    by_uuid = dict((device["uuid"], device) for device in full)
    for want in expected:
        got = by_uuid.get(want["uuid"])
        if got is None:
            return "node %s's ResourceSlice does not list GPU %s" % (node, want["uuid"])
        if want["product"] and got["product"] != want["product"]:
            return "node %s's ResourceSlice names GPU %s %r, its facts %r" % (
                node, want["uuid"], got["product"], want["product"])
        if want["memory_mib"] and got["memory_mib"] != want["memory_mib"]:
            return "node %s's ResourceSlice gives GPU %s %s MiB, its facts %s MiB" % (
                node, want["uuid"], got["memory_mib"], want["memory_mib"])
    return None


def slice_readiness(slices, expected):
    """``{node: None or why}`` for ``expected`` (``{node name: its nvidia_gpu facts}``) from ``slices``, the
    items of ONE ``LIST resourceslices?fieldSelector=spec.driver=gpu.nvidia.com``."""
    published = published_devices(slices)
    return dict((node, node_readiness(node, facts, published.get(node))) for node, facts in expected.items())


def _label_before(node, key):
    """The value of label ``key`` on ``node`` before the labels play writes (an entry of the preflight's node list:
    ``labels`` as they will be, ``added`` and ``removed`` by the run); ``"?"`` for a label the run removes (its old
    value is not listed: it was there), None for one the node did not have."""
    labels, added = node.get("labels") or {}, node.get("added") or {}
    if key in (node.get("removed") or []):
        return "?"
    if key in added:
        return None
    return labels.get(key)


def allocation_switches(hosts, hostvars, nodes):
    """The GPU nodes whose mechanism the run switches, in host order: ``[{host, node, from, to}]``.

    ``nodes``: the preflight's node list (``k8s_gpu_label`` in check mode, ``return_nodes``: each node's labels as
    the run leaves them, with what it adds and removes). A node's current mechanism is its ``DRA_LABEL`` before
    the run: with it, DRA; without it, the device plugin, if the node was labelled as a GPU node already
    (``nvidia.com/gpu.present``); a node never labelled serves no GPU work yet and does not switch. A switch is a
    host whose ``kubegpu_gpu_allocation`` differs from that: its GPU work is drained before the label flips.
    """
    by_host = dict((node.get("host") or node.get("name"), node) for node in nodes or [] if node.get("name"))
    switches = []
    for host in hosts or []:
        node = by_host.get(host)
        if node is None:
            continue
        want = host_allocation(host, (hostvars or {}).get(host) or {})
        if _label_before(node, DRA_LABEL) is not None:
            current = DRA
        elif _label_before(node, "nvidia.com/gpu.present") is not None:
            current = DEVICE_PLUGIN
        else:
            continue
        if want != current:
            switches.append({"host": host, "node": node["name"], "from": current, "to": want})
    return switches


def switch_message(switch):
    """One line for the run's output: what happens to a switching node."""
    return ("node %s switches from %s to %s: cordoned and drained of its GPU work (pods that request nvidia.com/* "
            "resources or hold resource claims) before its label %s changes; uncordoned once validated"
            % (switch["node"], _NAMES[switch["from"]], _NAMES[switch["to"]], DRA_LABEL))


def allocatable_text(published):
    """What a DRA node offers, for the summary's ALLOCATABLE column: ``DRA: 8 gpu``, with MIG devices per profile
    after the full GPUs (``DRA: 7 gpu, 7 mig-1g.5gb``; a node whose GPUs are all partitioned lists only its MIG
    devices); ``DRA: none`` when its slice lists no device, ``DRA: no slice`` when it has none. ``published``: a
    node's ``published_devices`` or ``expected_devices`` (entries without ``type`` count as full GPUs)."""
    if published is None:
        return "DRA: no slice"
    if not published:
        return "DRA: none"
    full = sum(1 for device in published if device.get("type", "gpu") == "gpu")
    counts = {}
    for device in published:
        if device.get("type") == "mig":
            counts[device.get("profile")] = counts.get(device.get("profile"), 0) + 1
    parts = ["%d gpu" % full] if full or not counts else []
    parts.extend("%d mig-%s" % (counts[name], name) for name in sorted(counts, key=str))
    return "DRA: " + ", ".join(parts)
