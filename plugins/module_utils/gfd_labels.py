# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Node labels computed from GPU facts the way GPU Feature Discovery (GFD) computes them.

The rules follow NVIDIA/k8s-device-plugin ``internal/lm`` (GFD): product names
are sanitised, one GPU model names the ``nvidia.com/gpu.*`` resource labels,
MIG-enabled GPUs are labelled without sharing information, the MIG strategy
``single`` replaces the resource labels with the MIG ones, and ``mixed`` adds
``nvidia.com/mig-<profile>.*`` labels per MIG profile.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

MANAGED_LABEL_PREFIX = "nvidia.com/"

# Every fixed label key gfd_labels() can produce: with the per-MIG-profile keys below, the labels this
# collection owns on a node.  Other nvidia.com/ labels (nvidia.com/device-plugin.config set by
# k8s_device_plugin, labels only GFD itself sets, such as nvidia.com/gfd.timestamp or a MIG profile's
# multiprocessors and engines.*) belong to someone else.  tests/unit keep these equal to what the
# rules yield.
MANAGED_LABEL_KEYS = frozenset(MANAGED_LABEL_PREFIX + key for key in (
    "gpu.present",
    "gpu.machine",
    "gpu.count",
    "gpu.replicas",
    "gpu.sharing-strategy",
    "gpu.product",
    "gpu.memory",
    "gpu.family",
    "gpu.compute.major",
    "gpu.compute.minor",
    "gpu.slices.gi",
    "gpu.slices.ci",
    "mig.capable",
    "mig.strategy",
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
))

# mig_strategy mixed: nvidia.com/mig-<profile>.<suffix> for each MIG profile on the node.
MIG_RESOURCE_PREFIX = MANAGED_LABEL_PREFIX + "mig-"
MIG_LABEL_SUFFIXES = ("product", "count", "replicas", "memory", "slices.gi", "slices.ci")
# a MIG profile: [<compute slices>c.]<GPU slices>g.<memory>gb, such as 3g.20gb or 1c.3g.20gb. A profile with
# an extension (1g.10gb+me) gets no nvidia.com/mig-<profile>.* labels: a label key cannot hold a "+".
_MIG_PROFILE = re.compile(r"^(?:(?P<ci>[0-9]+)c\.)?(?P<gi>[0-9]+)g\.[0-9]+gb$")

# The seeds' nodeSelector label, set from the facts as accelerator=nvidia-<model>.
ACCELERATOR_LABEL = "accelerator"
ACCELERATOR_VALUE_PREFIX = "nvidia-"

MIG_STRATEGIES = ("none", "single", "mixed")
SHARING_STRATEGIES = ("none", "time-slicing", "mps")

LABEL_VALUE_MAX = 63

_INVALID_CHARS = re.compile(r"[^A-Za-z0-9\-_. ]")
_EDGE_JUNK = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")

# compute capability major -> family, as GFD's getArchFamily (minor splits below)
_FAMILY_BY_MAJOR = {
    1: "tesla",
    2: "fermi",
    3: "kepler",
    5: "maxwell",
    6: "pascal",
    9: "hopper",
    10: "blackwell",
    12: "blackwell",
}


def sanitise_label_value(text):
    """Return ``text`` as GFD sanitises a label value.

    Characters outside ``[A-Za-z0-9-_. ]`` are dropped and every run of
    white space becomes one ``-`` ("Tesla T4" -> "Tesla-T4").  So that the
    result is always a valid Kubernetes label value, it is then cut to 63
    characters and stripped of anything but ``[A-Za-z0-9]`` at both ends.
    """
    if text is None:
        return ""
    value = "-".join(_INVALID_CHARS.sub("", str(text)).split())
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
    capability no family is known for.
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


def is_managed_label(key, value=None):
    """True when the label ``key`` (with ``value``) is one this collection sets from GPU facts.

    That is a key of MANAGED_LABEL_KEYS, or the ``accelerator`` label holding a value of the form
    this collection writes (``nvidia-<model>``).  Any other label, under ``nvidia.com/`` or not,
    is someone else's: stale-label removal never touches it.
    """
    if key in MANAGED_LABEL_KEYS:
        return True
    if key.startswith(MIG_RESOURCE_PREFIX):
        for suffix in MIG_LABEL_SUFFIXES:
            if key.endswith("." + suffix) and _MIG_PROFILE.match(key[len(MIG_RESOURCE_PREFIX):-len(suffix) - 1]):
                return True
        return False
    return key == ACCELERATOR_LABEL and str(value or "").startswith(ACCELERATOR_VALUE_PREFIX)


def _product(parts, shared):
    names = [sanitise_label_value(part) for part in parts if part]
    names = [name for name in names if name]
    if not names:
        return ""
    if shared:
        names.append("SHARED")
    return sanitise_label_value("-".join(names))


def _resource_labels(name, devices, count, sharing_strategy, replicas):
    """Labels of the ``nvidia.com/gpu`` resource for one GPU model.

    ``sharing_strategy`` None means "sharing disabled" (MIG-enabled GPUs):
    replicas is then 0, as in GFD.
    """
    prefix = MANAGED_LABEL_PREFIX + "gpu."
    if sharing_strategy is None:
        replicas_value, strategy, shared = 0, "none", False
    else:
        replicas_value = replicas
        shared = replicas > 1 and sharing_strategy != "none"
        strategy = sharing_strategy if shared else "none"
    labels = {
        prefix + "count": str(count),
        prefix + "replicas": str(replicas_value),
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


def _mig_enabled(device):
    return (device.get("mig") or {}).get("current") == 1


def _mig_resource_labels(prefix, model, profile, migs, sharing_strategy, replicas):
    """The labels of one MIG resource: ``prefix`` is ``nvidia.com/gpu.`` (single) or ``nvidia.com/mig-<profile>.``.

    As GFD's MIG resource labeler, less what it reads from NVML's device attributes and the facts do not
    carry (multiprocessors, engines.*); the slices come from the profile's name.
    """
    shared = sharing_strategy not in (None, "none") and replicas > 1
    labels = {
        prefix + "count": str(len(migs)),
        prefix + "replicas": str(replicas if shared else 1),
    }
    product = _product([model, "MIG", profile], shared)
    if product:
        labels[prefix + "product"] = product
    memory = migs[0].get("memory_mib")
    if memory:
        labels[prefix + "memory"] = str(int(memory))
    parsed = _MIG_PROFILE.match(profile or "")
    if parsed:
        labels[prefix + "slices.gi"] = parsed.group("gi")
        labels[prefix + "slices.ci"] = parsed.group("ci") or parsed.group("gi")
    return labels


def _mig_profiles(devices):
    """[(profile, model, [MIG devices])] of the MIG devices the facts know, by first appearance."""
    order, groups, models = [], {}, {}
    for device in devices:
        if not _mig_enabled(device):
            continue
        for mig in (device.get("mig") or {}).get("devices") or []:
            profile = mig.get("profile") or ""
            if profile not in groups:
                order.append(profile)
                groups[profile] = []
                models[profile] = device.get("name")
            groups[profile].append(mig)
    return [(profile, models[profile], groups[profile]) for profile in order]


def _mig_single_invalid(devices, enabled, profiles):
    """Why mig_strategy single cannot label these GPUs (GFD then labels <model>-MIG-INVALID), or None.

    ``enabled``: the MIG-enabled ones of ``devices``; ``profiles``: ``_mig_profiles(enabled)``.
    """
    if any((device.get("mig") or {}).get("devices") is None for device in enabled):
        return "the MIG devices are not known"
    if any(not (device.get("mig") or {}).get("devices") for device in enabled):
        return "a MIG-enabled GPU has no MIG device"
    if len(enabled) != len(devices):
        return "MIG-enabled and MIG-disabled GPUs"
    if len(profiles) != 1:
        return "more than one MIG profile"
    return None


def validate_label_options(mig_strategy="none", sharing_strategy="none", replicas=1):
    """Return an error message for an invalid option combination, else None."""
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
            raise ValueError("a device's count must be a positive integer, got %r" % (count,))
        expanded.extend([device] * count)
    return expanded


def gfd_labels(facts, mig_strategy="none", sharing_strategy="none", replicas=1):
    """Return the GFD-compatible ``nvidia.com/`` node labels for ``facts`` (``ansible_facts.nvidia_gpu``).

    A machine without GPUs gets no labels.  With several GPU models, the model
    of the lowest-index GPU names the resource labels (GFD picks one at
    random and warns), and ``gpu.count`` counts the GPUs of that model.
    ``mig_strategy=single`` labels the MIG devices as ``nvidia.com/gpu`` when
    every GPU is MIG-enabled and holds MIG devices of one profile, else GFD's
    ``<model>-MIG-INVALID`` labels (also when the facts do not know the MIG
    devices: ``nvidia-smi`` or the PCI bus as source); ``mixed`` adds
    ``nvidia.com/mig-<profile>.*`` for each profile of the MIG devices known.
    """
    error = validate_label_options(mig_strategy, sharing_strategy, replicas)
    if error:
        raise ValueError(error)
    devices = expand_devices((facts or {}).get("devices"))
    if not (facts or {}).get("present") or not devices:
        return {}
    source = facts.get("source")
    driver_known = source in ("nvml", "nvidia-smi")

    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.machine": sanitise_label_value(facts.get("machine")) or "unknown",
    }
    labels.update(_version_labels(facts.get("driver_version"), facts.get("cuda_driver_version")))
    if driver_known:
        capable = any((device.get("mig") or {}).get("current") is not None for device in devices)
        labels["nvidia.com/mig.capable"] = "true" if capable else "false"

    order, groups = _models(devices)
    counts = dict((name, len(groups[name])) for name in order)
    mig_models = [name for name in order if any(_mig_enabled(d) for d in groups[name])]
    full_models = [name for name in order if any(not _mig_enabled(d) for d in groups[name])]
    # Later labelers override earlier ones (GFD merge order: MIG-enabled
    # models first, full GPUs after); walking each list backwards makes the
    # lowest-index model the one that wins.
    for name in reversed(mig_models):
        enabled = [d for d in groups[name] if _mig_enabled(d)]
        labels.update(_resource_labels(name, enabled, counts[name], None, replicas))
    for name in reversed(full_models):
        full = [d for d in groups[name] if not _mig_enabled(d)]
        labels.update(_resource_labels(name, full, counts[name], sharing_strategy, replicas))

    if mig_strategy != "none":
        labels["nvidia.com/mig.strategy"] = mig_strategy
        enabled = [d for d in devices if _mig_enabled(d)]
        profiles = _mig_profiles(enabled)
        if mig_strategy == "single" and enabled:
            if _mig_single_invalid(devices, enabled, profiles):
                labels.update({
                    "nvidia.com/gpu.product": _product([enabled[0].get("name"), "MIG", "INVALID"], False),
                    "nvidia.com/gpu.count": "0",
                    "nvidia.com/gpu.replicas": "0",
                    "nvidia.com/gpu.memory": "0",
                })
            else:
                profile, model, migs = profiles[0]
                labels.update(_mig_resource_labels(MANAGED_LABEL_PREFIX + "gpu.", model, profile, migs,
                                                   sharing_strategy, replicas))
        elif mig_strategy == "mixed":
            for profile, model, migs in profiles:
                if _MIG_PROFILE.match(profile):
                    labels.update(_mig_resource_labels(MIG_RESOURCE_PREFIX + profile + ".", model, profile, migs,
                                                       None, 1))
    return dict((key, value) for key, value in labels.items() if value is not None)


def multiple_models(facts):
    """Return the distinct GPU model names when a node mixes models (GFD warns then), else []."""
    order, dummy = _models((facts or {}).get("devices") or [])
    return order if len(order) > 1 else []
