# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Node labels computed from GPU facts the way GPU Feature Discovery (GFD) v0.20 computes them.

The rules follow NVIDIA/k8s-device-plugin v0.20.0 ``internal/lm`` (GFD's labelers) for a node's GPU
facts and the device plugin configuration the node gets (``plugin_view``: its MIG strategy, its
sharing strategy, ``renameByDefault`` and the replicas of each shared resource):

* ``nvml.go``: the version labels, ``mig.capable``, ``mps.capable`` (``true`` only with MPS sharing;
  MIG-enabled GPUs make MPS an error) and ``gpu.mode`` from the GPUs' PCI class;
* ``resource.go``: per resource, ``product`` (sanitised, ``-SHARED`` when shared and not renamed),
  ``count``, ``replicas``, ``sharing-strategy``, ``memory`` and the architecture labels of full GPUs,
  the MIG device attribute labels (``memory``, ``multiprocessors``, ``slices.*``, ``engines.*``) of MIG
  resources;
* ``mig-strategy.go``: MIG-enabled GPUs are labelled without sharing (replicas 0), full GPUs override
  them; ``single`` relabels ``nvidia.com/gpu`` from the MIG devices (or ``<model>-MIG-INVALID``);
  ``mixed`` adds ``nvidia.com/mig-<profile>.*`` per MIG profile (``+`` of a profile becomes ``.``).

Labels GFD alone writes and the facts cannot give (``nvidia.com/gfd.timestamp``, ``nvidia.com/gpu.clique``
of fabric-attached GPUs, the vGPU labels) are not produced; a MIG attribute the facts do not know
(``None``) leaves its label out.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from functools import lru_cache

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

MANAGED_LABEL_PREFIX = "nvidia.com/"
GPU_RESOURCE = "nvidia.com/gpu"
CONFIG_LABEL = "nvidia.com/device-plugin.config"

# The MIG device attribute labels of a MIG resource (internal/resource/nvml-mig-device.go GetAttributes).
MIG_ENGINES = ("copy", "decoder", "encoder", "jpeg", "ofa")
MIG_ATTRIBUTE_SUFFIXES = ("memory", "multiprocessors", "slices.gi", "slices.ci") + tuple(
    "engines." + engine for engine in MIG_ENGINES)

# Every fixed label key node_labels() can produce: with the per-MIG-profile keys below, the labels this
# collection owns on a node.  Other nvidia.com/ labels (nvidia.com/device-plugin.config, written from the
# device plugin configuration, labels only GFD itself sets, such as nvidia.com/gfd.timestamp) belong to
# someone else.  tests/unit keep these equal to what the rules yield.
# written on the hosts that chose DRA (module_utils/gpu_allocation.py DRA_LABEL, which tests keep equal)
DRA_LABEL = "nvidia.com/dra-kubelet-plugin"
MANAGED_LABEL_KEYS = frozenset(MANAGED_LABEL_PREFIX + key for key in (
    "gpu.present",
    "gpu.machine",
    "gpu.mode",
    "gpu.count",
    "gpu.replicas",
    "gpu.sharing-strategy",
    "gpu.product",
    "gpu.family",
    "gpu.compute.major",
    "gpu.compute.minor",
    "mig.capable",
    "mig.strategy",
    "mps.capable",
    "cuda.driver.major",
    "cuda.driver.minor",
    "cuda.driver.rev",
    "cuda.driver-version.major",
    "cuda.driver-version.minor",
    "cuda.driver-version.revision",
    "cuda.driver-version.full",
    "cuda.runtime.major",
    "cuda.runtime.minor",
    "cuda.runtime-version.major",
    "cuda.runtime-version.minor",
    "cuda.runtime-version.full",
) + tuple("gpu." + suffix for suffix in MIG_ATTRIBUTE_SUFFIXES))

# mig_strategy mixed: nvidia.com/mig-<profile>.<suffix> for each MIG profile on the node.
MIG_RESOURCE_PREFIX = MANAGED_LABEL_PREFIX + "mig-"
MIG_LABEL_SUFFIXES = ("product", "count", "replicas", "sharing-strategy") + MIG_ATTRIBUTE_SUFFIXES
# a MIG profile as go-nvlib writes it (pkg/nvlib/device/mig_profile.go): [<c>c.]<g>g.<gb>gb, optionally with an
# extension such as +me, +me.all, +gfx or -me.
_MIG_PROFILE = re.compile(r"^(?:(?P<ci>[0-9]+)c\.)?(?P<gi>[0-9]+)g\.[0-9]+gb(?P<ext>[+-][A-Za-z.]+)?$")
# the same in a label key or resource name, where "+" became "."
_MIG_PROFILE_IN_KEY = re.compile(r"^(?:[0-9]+c\.)?[0-9]+g\.[0-9]+gb(?:[.-][A-Za-z]+(?:\.[A-Za-z]+)?)?$")

# The seeds' nodeSelector label, set from the facts as accelerator=nvidia-<model>.
ACCELERATOR_LABEL = "accelerator"
ACCELERATOR_VALUE_PREFIX = "nvidia-"

MIG_STRATEGIES = ("none", "single", "mixed")
SHARING_STRATEGIES = ("none", "time-slicing", "mps")

LABEL_VALUE_MAX = 63

# PCI classes GFD tells apart (go-nvlib nvpci: PCIVgaControllerClass, PCI3dControllerClass)
PCI_VGA_CLASS = 0x030000
PCI_3D_CLASS = 0x030200

_INVALID_CHARS = re.compile(r"[^A-Za-z0-9\-_. ]")
_EDGE_JUNK = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")

# compute capability major -> family, as GFD's getArchFamily (internal/lm/resource.go; minor splits below)
_FAMILY_BY_MAJOR = {
    1: "tesla",
    2: "fermi",
    3: "kepler",
    5: "maxwell",
    6: "pascal",
    9: "hopper",
    10: "blackwell",
    12: "blackwell",
    13: "rubin",
}


class LabelError(InputError):
    """GPU facts and a device plugin configuration GFD refuses to label (MPS on MIG-enabled GPUs)."""


def sanitise_label_value(text):
    """Return ``text`` as GFD sanitises a label value (internal/lm/resource.go sanitise).

    Characters outside ``[A-Za-z0-9-_. ]`` are dropped and every run of
    white space becomes one ``-`` ("Tesla T4" -> "Tesla-T4").  So that the
    result is always a valid Kubernetes label value, it is then cut to 63
    characters and stripped of anything but ``[A-Za-z0-9]`` at both ends.
    """
    if text is None:
        return ""
    return _sanitised(str(text))


@lru_cache(maxsize=4096)
def _sanitised(text):
    # the same few model names and MIG profiles come back for every node of a cluster
    value = "-".join(_INVALID_CHARS.sub("", text).split())
    value = _EDGE_JUNK.sub("", value)
    if len(value) > LABEL_VALUE_MAX:
        value = _EDGE_JUNK.sub("", value[:LABEL_VALUE_MAX])
    return value


def parse_compute_capability(compute_capability):
    """Return ``(major, minor)`` ints from ``"9.0"``, a tuple or None."""
    if compute_capability is None:
        return None
    if isinstance(compute_capability, (tuple, list)):
        parts = list(compute_capability)
    else:
        parts = str(compute_capability).strip().split(".")
    if len(parts) != 2:
        return None
    try:
        return int(parts[0]), int(parts[1])
    except (TypeError, ValueError):
        return None


def gpu_family(compute_capability):
    """Return the architecture family for a compute capability (``"8.0"`` -> ``"ampere"``).

    None when the capability is unknown; ``"undefined"`` (as GFD) for a
    capability no family is known for (11.x, 4.x).
    """
    parsed = parse_compute_capability(compute_capability)
    if parsed is None:
        return None
    major, minor = parsed
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    return _FAMILY_BY_MAJOR.get(major, "undefined")


def accelerator_label_value(product_name):
    """Return the ``accelerator`` label value the seeds use (``"Tesla T4"`` -> ``"nvidia-tesla-t4"``)."""
    text = str(product_name or "").strip()
    if text.lower().startswith("nvidia"):
        text = text[len("nvidia"):]
    value = sanitise_label_value("nvidia " + text).lower()
    return value


@lru_cache(maxsize=1024)
def mig_profile_parts(profile):
    """``(gpu slices, compute slices)`` of a MIG profile (``"1c.3g.20gb"`` -> ``(3, 1)``), None when unparsable."""
    match = _MIG_PROFILE.match(profile or "")
    if not match:
        return None
    gi = int(match.group("gi"))
    return gi, int(match.group("ci")) if match.group("ci") else gi


def mig_resource_name(profile):
    """The resource (and label key prefix) GFD and the device plugin use for a MIG profile under ``mixed``.

    ``"1g.10gb+me"`` -> ``"nvidia.com/mig-1g.10gb.me"`` (internal/resource/nvml-mig-device.go GetName,
    internal/rm/rm.go AddDefaultResourcesToConfig).
    """
    return MIG_RESOURCE_PREFIX + str(profile or "").replace("+", ".")


def is_managed_label(key, value=None):
    """True when the label ``key`` (with ``value``) is one this collection sets from GPU facts.

    That is a key of MANAGED_LABEL_KEYS, a per-MIG-profile key of ``mig_strategy: mixed``
    (``nvidia.com/mig-<profile>.<suffix>``), or the ``accelerator`` label holding a value of the form
    this collection writes (``nvidia-<model>``).  Any other label, under ``nvidia.com/`` or not,
    is someone else's: stale-label removal never touches it. The DRA label ``nvidia.com/dra-kubelet-plugin=true``
    (module_utils/gpu_allocation.py) is the collection's too: a host switched back to the device plugin loses it.
    """
    if key in MANAGED_LABEL_KEYS or (key == DRA_LABEL and value == "true"):
        return True
    if key.startswith(MIG_RESOURCE_PREFIX):
        for suffix in MIG_LABEL_SUFFIXES:
            if key.endswith("." + suffix) and _MIG_PROFILE_IN_KEY.match(key[len(MIG_RESOURCE_PREFIX):-len(suffix) - 1]):
                return True
        return False
    return key == ACCELERATOR_LABEL and str(value or "").startswith(ACCELERATOR_VALUE_PREFIX)


def plugin_view(mig_strategy="none", sharing_strategy="none", rename_by_default=False, replicas=None):
    """What the labels read of one device plugin configuration.

    ``replicas``: {resource name: replicas} of the configuration's sharing entries (each 2 or more).
    """
    return {"mig_strategy": mig_strategy, "sharing_strategy": sharing_strategy,
            "rename_by_default": bool(rename_by_default), "replicas": dict(replicas or {})}


NO_SHARING = plugin_view()


def _sharing(plugin, resource, disabled=False):
    """``(replicas, sharing-strategy, -SHARED suffix)`` of ``resource`` (internal/lm/resource.go baseLabeler).

    ``disabled``: the labeler of MIG-enabled full GPUs, which has no sharing (replicas 0).
    """
    if disabled:
        return 0, "none", False
    replicas = plugin["replicas"].get(resource, 1)
    if replicas > 1:
        return replicas, plugin["sharing_strategy"], not plugin["rename_by_default"]
    return replicas, "none", False


def _product(parts, shared):
    names = [sanitise_label_value(part) for part in parts if part]
    names = [name for name in names if name]
    if not names:
        return ""
    if shared:
        names.append("SHARED")
    return sanitise_label_value("-".join(names))


def _resource_labels(plugin, name, devices, count, disabled):
    """Labels of the ``nvidia.com/gpu`` resource for one GPU model (NewGPUResourceLabeler)."""
    prefix = GPU_RESOURCE + "."
    replicas, strategy, shared = _sharing(plugin, GPU_RESOURCE, disabled)
    labels = {
        prefix + "count": str(count),
        prefix + "replicas": str(replicas),
        prefix + "sharing-strategy": strategy,
    }
    product = _product([name], shared)
    if product:
        labels[prefix + "product"] = product
    device = devices[0]
    memory = device.get("memory_mib")
    if memory:
        labels[prefix + "memory"] = str(int(memory))
    parsed = parse_compute_capability(device.get("compute_capability"))
    if parsed is not None and parsed[0] != 0:
        labels[prefix + "family"] = gpu_family(device.get("compute_capability"))
        labels[prefix + "compute.major"] = str(parsed[0])
        labels[prefix + "compute.minor"] = str(parsed[1])
    return labels


def _version_labels(driver_version, cuda_driver_version):
    labels = {}
    parts = str(driver_version or "").strip().split(".")
    if driver_version and 2 <= len(parts) <= 3:
        major, minor = parts[0], parts[1]
        rev = parts[2] if len(parts) > 2 else ""
        labels.update({
            "nvidia.com/cuda.driver.major": major,
            "nvidia.com/cuda.driver.minor": minor,
            "nvidia.com/cuda.driver.rev": rev,
            "nvidia.com/cuda.driver-version.major": major,
            "nvidia.com/cuda.driver-version.minor": minor,
            "nvidia.com/cuda.driver-version.revision": rev,
            "nvidia.com/cuda.driver-version.full": str(driver_version).strip(),
        })
    cuda = parse_compute_capability(cuda_driver_version)
    if cuda is not None:
        labels.update({
            "nvidia.com/cuda.runtime.major": str(cuda[0]),
            "nvidia.com/cuda.runtime.minor": str(cuda[1]),
            "nvidia.com/cuda.runtime-version.major": str(cuda[0]),
            "nvidia.com/cuda.runtime-version.minor": str(cuda[1]),
            "nvidia.com/cuda.runtime-version.full": "%d.%d" % cuda,
        })
    return labels


def _pci_class(value):
    """A PCI class as an int (``"0x030200"``, ``"030200"`` or an int), None when unknown."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip(), 16)
    except ValueError:
        return None


def gpu_mode(devices):
    """``nvidia.com/gpu.mode`` of the GPUs (internal/lm/nvml.go newGPUModeLabeler, getModeForClasses).

    All ``0x030000`` (VGA controller): ``graphics``; all ``0x030200`` (3D controller): ``compute``; a mix,
    another class, or a class that could not be read: ``unknown``.
    """
    classes = set(_pci_class(device.get("pci_class")) for device in devices)
    if len(classes) != 1:
        return "unknown"
    return {PCI_VGA_CLASS: "graphics", PCI_3D_CLASS: "compute"}.get(classes.pop(), "unknown")


def _models(devices):
    """Group devices by model name, keeping the order of first appearance."""
    order, groups = [], {}
    for device in devices:
        name = device.get("name") or ""
        if name not in groups:
            groups[name] = []
            order.append(name)
        groups[name].append(device)
    return order, groups


def mig_enabled(device):
    """Whether a facts device has MIG mode on."""
    return (device.get("mig") or {}).get("current") == 1


def _mig_attribute_labels(prefix, profile, mig):
    """The MIG device attribute labels (nvml-mig-device.go GetAttributes) of one MIG device of a resource.

    Attributes the facts do not know are left out, except the slices, which the profile's name gives.
    """
    labels = {}
    memory = mig.get("memory_mib")
    if memory is not None:
        labels[prefix + "memory"] = str(int(memory))
    if mig.get("multiprocessors") is not None:
        labels[prefix + "multiprocessors"] = str(int(mig["multiprocessors"]))
    slices = mig.get("slices") or {}
    parts = mig_profile_parts(profile)
    gi = slices.get("gi") if slices.get("gi") is not None else (parts[0] if parts else None)
    ci = slices.get("ci") if slices.get("ci") is not None else (parts[1] if parts else None)
    if gi is not None:
        labels[prefix + "slices.gi"] = str(int(gi))
    if ci is not None:
        labels[prefix + "slices.ci"] = str(int(ci))
    engines = mig.get("engines") or {}
    for engine in MIG_ENGINES:
        if engines.get(engine) is not None:
            labels[prefix + "engines." + engine] = str(int(engines[engine]))
    return labels


def _mig_resource_labels(plugin, resource, model, profile, migs):
    """The labels of one MIG resource (NewMIGResourceLabeler): ``resource`` is ``nvidia.com/gpu`` (single) or
    ``nvidia.com/mig-<profile>`` (mixed); sharing is that of the configuration's entry of that name.
    """
    prefix = resource + "."
    replicas, strategy, shared = _sharing(plugin, resource)
    labels = {
        prefix + "count": str(len(migs)),
        prefix + "replicas": str(replicas),
        prefix + "sharing-strategy": strategy,
    }
    product = _product([model, "MIG", str(profile or "").replace("+", ".")], shared)
    if product:
        labels[prefix + "product"] = product
    labels.update(_mig_attribute_labels(prefix, profile, migs[0]))
    return labels


def mig_profiles(devices):
    """[(profile, model, [MIG devices])] of the MIG-enabled GPUs' known MIG devices, by first appearance."""
    order, groups, models = [], {}, {}
    for device in devices:
        if not mig_enabled(device):
            continue
        for mig in (device.get("mig") or {}).get("devices") or []:
            profile = mig.get("profile") or ""
            if profile not in groups:
                order.append(profile)
                groups[profile] = []
                models[profile] = device.get("name")
            groups[profile].append(mig)
    return [(profile, models[profile], groups[profile]) for profile in order]


def mig_single_invalid(devices):
    """Why mig_strategy single cannot use these GPUs (GFD then labels <model>-MIG-INVALID), or None.

    As mig-strategy.go newMigStrategySingleLabeler: a MIG-enabled GPU without MIG devices, MIG-enabled next to
    MIG-disabled GPUs, or more than one MIG profile; also when the facts do not know the MIG devices.
    """
    enabled = [device for device in devices if mig_enabled(device)]
    if not enabled:
        return None
    if any((device.get("mig") or {}).get("devices") is None for device in enabled):
        return "the facts do not list the MIG devices"
    if any(not (device.get("mig") or {}).get("devices") for device in enabled):
        return "a MIG-enabled GPU has no MIG device"
    if len(enabled) != len(devices):
        return "MIG-enabled and MIG-disabled GPUs"
    if len(mig_profiles(enabled)) != 1:
        return "more than one MIG profile"
    return None


def validate_label_options(mig_strategy="none", sharing_strategy="none", replicas=1):
    """Return an error message for an invalid combination of the per-option form, else None."""
    if mig_strategy not in MIG_STRATEGIES:
        return "mig_strategy must be one of %s, got %r" % (", ".join(MIG_STRATEGIES), mig_strategy)
    if sharing_strategy not in SHARING_STRATEGIES:
        return "sharing_strategy must be one of %s, got %r" % (", ".join(SHARING_STRATEGIES), sharing_strategy)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
        return "replicas must be an integer of at least 1, got %r" % (replicas,)
    if sharing_strategy == "none" and replicas != 1:
        return "replicas=%d needs sharing_strategy time-slicing or mps" % replicas
    return None


def expand_devices(devices):
    """The device list with an entry that has ``count`` (that many identical devices) repeated that often.

    The filter kubegpu.nvidia.gpu_node_requests merges identical neighbouring devices that way.
    """
    expanded = []
    for device in devices or []:
        count = device.get("count", 1) if isinstance(device, dict) else 1
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise InputError("a device's count must be a positive integer, got %r" % (count,))
        expanded.extend([device] * count)
    return expanded


def node_labels(facts, plugin=None):
    """Return the GFD v0.20 ``nvidia.com/`` node labels for ``facts`` (``ansible_facts.nvidia_gpu``).

    ``plugin``: the device plugin configuration the node gets, as ``plugin_view`` returns it (no sharing
    and MIG strategy ``none`` by default).

    A machine without GPUs gets no labels.  With several GPU models, the model of the lowest-index GPU
    names the resource labels (GFD picks one at random and warns), and ``gpu.count`` counts the GPUs of
    that model.  Raises LabelError for MPS sharing on a node with a MIG-enabled GPU, which GFD refuses
    (internal/lm/nvml.go isMPSCapable).
    """
    plugin = plugin or NO_SHARING
    facts = facts or {}
    devices = expand_devices(facts.get("devices"))
    if not facts.get("present") or not devices:
        return {}
    driver_known = facts.get("source") in ("nvml", "nvidia-smi")
    mps = plugin["sharing_strategy"] == "mps" and any(r > 1 for r in plugin["replicas"].values())
    if mps and any(mig_enabled(device) for device in devices):
        raise LabelError("MPS sharing is not supported on MIG-enabled GPUs (GPU Feature Discovery and the device "
                         "plugin refuse it)")

    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.machine": sanitise_label_value(facts.get("machine")) or "unknown",
        "nvidia.com/mps.capable": "true" if mps else "false",
        "nvidia.com/gpu.mode": gpu_mode(devices),
    }
    labels.update(_version_labels(facts.get("driver_version"), facts.get("cuda_driver_version")))
    if driver_known:
        capable = any((device.get("mig") or {}).get("current") is not None for device in devices)
        labels["nvidia.com/mig.capable"] = "true" if capable else "false"

    order, groups = _models(devices)
    counts = dict((name, len(groups[name])) for name in order)
    mig_models = [name for name in order if any(mig_enabled(d) for d in groups[name])]
    full_models = [name for name in order if any(not mig_enabled(d) for d in groups[name])]
    # Later labelers override earlier ones (GFD merge order: MIG-enabled models first, full GPUs after);
    # walking each list backwards makes the lowest-index model the one that wins.
    for name in reversed(mig_models):
        enabled = [d for d in groups[name] if mig_enabled(d)]
        labels.update(_resource_labels(plugin, name, enabled, counts[name], disabled=True))
    for name in reversed(full_models):
        full = [d for d in groups[name] if not mig_enabled(d)]
        labels.update(_resource_labels(plugin, name, full, counts[name], disabled=False))

    strategy = plugin["mig_strategy"]
    if strategy != "none":
        labels["nvidia.com/mig.strategy"] = strategy
        enabled = [d for d in devices if mig_enabled(d)]
        if strategy == "single" and enabled:
            if mig_single_invalid(devices):
                prefix = GPU_RESOURCE + "."
                labels.update({
                    prefix + "product": _product([enabled[0].get("name"), "MIG", "INVALID"], False),
                    prefix + "count": "0",
                    prefix + "replicas": "0",
                    prefix + "sharing-strategy": "",
                    prefix + "memory": "0",
                })
            else:
                profile, model, migs = mig_profiles(enabled)[0]
                labels.update(_mig_resource_labels(plugin, GPU_RESOURCE, model, profile, migs))
        elif strategy == "mixed":
            for profile, model, migs in mig_profiles(enabled):
                labels.update(_mig_resource_labels(plugin, mig_resource_name(profile), model, profile, migs))
    return dict((key, value) for key, value in labels.items() if value is not None)


def gfd_labels(facts, mig_strategy="none", sharing_strategy="none", replicas=1):
    """``node_labels`` for the per-option form (one MIG strategy, one sharing strategy and its replicas).

    ``replicas`` shares ``nvidia.com/gpu`` (under ``single``, the MIG devices); ``replicas=1`` with a sharing
    strategy is no sharing.  Raises InputError for an invalid combination.
    """
    error = validate_label_options(mig_strategy, sharing_strategy, replicas)
    if error:
        raise InputError(error)
    shared = sharing_strategy != "none" and replicas > 1
    return node_labels(facts, plugin_view(mig_strategy, sharing_strategy if shared else "none", False,
                                          {GPU_RESOURCE: replicas} if shared else {}))


def multiple_models(facts):
    """Return the distinct GPU model names when a node mixes models (GFD warns then), else []."""
    order, dummy = _models((facts or {}).get("devices") or [])
    return order if len(order) > 1 else []
