# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The MIG geometry planner: what to change on each GPU of a node for a named mig-parted config.

Pure decisions, no NVML call: a reader gives the node's GPUs as NVML reports them, ``plan()`` checks the
selected config against every GPU first (one InputError naming the GPU, the profile and why; nothing is
planned when anything is wrong) and returns per GPU the mode change, whether a reset is needed, the
instances to destroy and those to create at explicit placements, and the geometry before and after.
An applier carries the plan out in mig-parted's order (NVIDIA/mig-parted ``cmd/nvidia-mig-parted/apply``):
compute instances destroyed before their GPU instances, the mode set, the GPUs with a pending mode reset,
GPU instances created at the planned placements, then one full-size compute instance in each. After the
apply it reads the GPUs again and ``verify()`` says whether they hold the plan's geometry.

A GPU as the reader gives it (dict)::

    index            NVML index (the PCI order mig-parted's ``devices`` indices follow)
    name             NVML name, e.g. "NVIDIA A100-SXM4-40GB"
    pci_device_id    NVML pciInfo.pciDeviceId as an int, e.g. 0x20B010DE
    pci_subsystem_id NVML pciInfo.pciSubSystemId as an int (optional; for filters with a subsystem)
    mig_capable      whether nvmlDeviceGetMigMode answers (False: not MIG-capable)
    mode             {"current": bool, "pending": bool} (nvmlDeviceGetMigMode)
    profiles         {profile name: {"id": NVML profile info id, "slices": sliceCount,
                      "instances": instanceCount, "memory_mib": memorySizeMB,
                      "placements": [(start, size), ...] (nvmlDeviceGetGpuInstancePossiblePlacements),
                      optional "multiprocessors": multiprocessorCount, "engines": {"copy": copyEngineCount,
                      "decoder", "encoder", "jpeg", "ofa": decoderCount ... ofaCount}}}
                     for each GPU-instance profile the GPU has (name as go-nvlib names it, see
                     ``gpu_instance_profile_name``)
    instances        [{"id": GPU instance id, "profile": name, "placement": (start, size),
                       "compute_instances": [{"id": ci id, "slices": CI sliceCount}, ...]}, ...]
    processes        [{"pid": int, "name": str}, ...] (nvmlDeviceGetComputeRunningProcesses, with names)

Placement (how a layout is found): mig-parted flattens the requested counts into one list of profiles
sorted by GPU slices, then compute slices, then attributes, all descending (``pkg/types/mig_config.go``
``Flatten``), tries every distinct order of that list (``pkg/mig/config/config.go``
``iteratePermutationsUntilSuccess``) and lets NVML place each GPU instance. The planner takes the first of
those orders (ties broken by memory, descending, then name) and searches the placements itself: each GPU
instance, in that order, takes the first free placement of NVML's possible placements (lowest start
first), backtracking when a later one has no room. That finds a layout whenever any order mig-parted
tries could, reports "does not fit" only when no layout exists, and always gives the same layout.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_config
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError, KubegpuError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gfd_labels import GPU_RESOURCE, mig_resource_name

# go-nvlib pkg/nvlib/device/mig_profile.go NewMigProfile: the attributes of NVML's GPU-instance profile constants
# (NVML_GPU_INSTANCE_PROFILE_*: 7/8 = 1/2 slice REV1, 15/16 = ALL_ME, 10/11/12/17 = GFX, 13/14 = NO_ME).
PROFILE_ATTRIBUTES = {7: ("me",), 8: ("me",), 15: ("me.all",), 16: ("me.all",), 10: ("gfx",), 11: ("gfx",),
                      12: ("gfx",), 17: ("gfx",)}
PROFILE_NEGATIVE_ATTRIBUTES = {13: ("me",), 14: ("me",)}


class BusyGpuError(KubegpuError):
    """A GPU whose geometry must change has running processes (the caller refuses the whole node)."""

    kind = "runtime"


# ------------------------------------------------------------------ names
def gpu_instance_profile_name(profile_constant, slices, memory_mib, device_memory_bytes):
    """The profile name go-nvlib gives a GPU-instance profile (``NewMigProfile``, ``getMigMemorySizeGB``).

    ``profile_constant``: the NVML_GPU_INSTANCE_PROFILE_* value the reader asked the profile info for;
    ``slices``/``memory_mib``: its sliceCount/memorySizeMB; ``device_memory_bytes``: nvmlDeviceGetMemoryInfo total.
    The memory is rounded up to eighths of the GPU's memory, times the GPU's memory in whole GiB.
    """
    one_mib, one_gib = 1024 * 1024, 1024 * 1024 * 1024
    fraction = float(memory_mib * one_mib) / float(device_memory_bytes)
    eighths = -(-int(round(fraction * 8 * 1e9)) // int(1e9))  # ceil, robust to float noise
    total_gib = (device_memory_bytes + one_gib - 1) // one_gib
    gb = int(eighths / 8.0 * total_gib + 0.5)
    profile = mig_config.Profile(slices, slices, gb, PROFILE_ATTRIBUTES.get(profile_constant, ()),
                                 PROFILE_NEGATIVE_ATTRIBUTES.get(profile_constant, ()))
    return mig_config.profile_name(profile)


def describe(gpu):
    return "GPU %s (%s)" % (gpu.get("index"), gpu.get("name") or "unknown model")


def _count(layout):
    devices = {}
    for item in layout:
        devices[item["profile"]] = devices.get(item["profile"], 0) + 1
    return devices


def _placement_text(items):
    """``1g.5gb x2 (0:1, 1:1), 3g.20gb (4:4)``: profiles by name, placements as nvidia-smi writes them."""
    by_profile = {}
    for item in items:
        by_profile.setdefault(item["profile"], []).append(item.get("placement"))
    parts = []
    for profile in sorted(by_profile, key=_profile_sort_key):
        places = sorted(p for p in by_profile[profile] if p is not None)
        count = len(by_profile[profile])
        where = " (%s)" % ", ".join("%d:%d" % tuple(p) for p in places) if places else ""
        parts.append("%s%s%s" % (profile, " x%d" % count if count > 1 else "", where))
    return ", ".join(parts)


def _profile_sort_key(name):
    try:
        p = mig_config.parse_profile(name.split(" ")[0])
        return (p.g, p.c, p.gb, name)
    except InputError:
        return (99, 99, 99, name)


def _mode_text(current, pending):
    if current == pending:
        return "MIG %s" % ("enabled" if current else "disabled")
    return "MIG %s, %s pending a reset" % ("enabled" if current else "disabled", "enabled" if pending else "disabled")


def _instance_profile(instance):
    """The name mig-parted's GetMigConfig gives the devices of a GPU instance, and whether it is one full CI."""
    profile = instance["profile"]
    cis = instance.get("compute_instances") or []
    try:
        parsed = mig_config.parse_profile(profile)
    except InputError:
        return profile, False
    if len(cis) == 1 and cis[0].get("slices") in (None, parsed.g):
        return profile, True
    if not cis:
        return "%s (no compute instance)" % profile, False
    names = sorted(mig_config.profile_name(parsed._replace(c=ci.get("slices") or parsed.g)) for ci in cis)
    return "%s [%s]" % (profile, ", ".join(names)), False


def geometry(gpu):
    """``(mode current, mode pending, {profile: count}, full)`` of a GPU as read; ``full``: one full-size CI per GI."""
    mode = gpu.get("mode") or {}
    counts, full = {}, True
    for instance in gpu.get("instances") or []:
        name, ok = _instance_profile(instance)
        full = full and ok
        counts[name] = counts.get(name, 0) + 1
    return bool(mode.get("current")), bool(mode.get("pending")), counts, full


def geometry_text(gpu):
    """One line of the GPU's mode and instances as read, for ``--diff``."""
    if not gpu.get("mig_capable"):
        return "%s: not MIG-capable" % describe(gpu)
    current, pending, _counts, _full = geometry(gpu)
    items = []
    for instance in gpu.get("instances") or []:
        items.append({"profile": _instance_profile(instance)[0], "placement": instance.get("placement")})
    text = "%s: %s" % (describe(gpu), _mode_text(current, pending))
    if items:
        text += "; " + _placement_text(items)
    return text


# ------------------------------------------------------------------ selection
def select(gpus, specs, config_name):
    """``{gpu index: spec}`` for the GPUs a spec of ``config_name`` addresses, as mig-parted walks them.

    A spec addresses the GPUs its device filter matches, all of them (``devices: all``) or those at its
    indices (assert.go WalkSelectedMigConfigForEachGPU: indices are NVML indices on the node, whatever the
    filter). Refused: an index no GPU of the node has, one GPU addressed by two specs, MIG asked by index
    of a GPU that is not MIG-capable. A non-capable GPU under ``devices: all``,
    or by index with MIG disabled, is left alone (apply/config.go ApplyMigConfig).
    """
    by_index = dict((gpu["index"], gpu) for gpu in gpus)
    selected, owner = {}, {}
    for number, spec in enumerate(specs):
        matching = [gpu for gpu in gpus
                    if mig_config.matches_filter(spec, gpu.get("pci_device_id"), gpu.get("pci_subsystem_id"))]
        if spec["devices"] == "all":
            addressed = matching
        else:
            addressed = []
            for index in spec["devices"]:
                if index not in by_index:
                    raise InputError("MIG config %r, spec %d: GPU index %d does not exist on this node (GPUs %s)"
                                     % (config_name, number, index, _index_range(gpus)))
                if by_index[index] in matching and by_index[index] not in addressed:
                    addressed.append(by_index[index])
        for gpu in addressed:
            if gpu["index"] in owner:
                raise InputError("MIG config %r: overlapping specs %d and %d both address %s"
                                 % (config_name, owner[gpu["index"]], number, describe(gpu)))
            owner[gpu["index"]] = number
            if not gpu.get("mig_capable"):
                if spec["mig_enabled"] and spec["devices"] != "all":
                    raise InputError("MIG config %r, spec %d: %s is not MIG-capable; MIG cannot be enabled on it"
                                     % (config_name, number, describe(gpu)))
                continue
            selected[gpu["index"]] = spec
    return selected


def _index_range(gpus):
    indices = sorted(gpu["index"] for gpu in gpus)
    if not indices:
        return "none"
    return "%d-%d" % (indices[0], indices[-1]) if len(indices) > 1 else str(indices[0])


# ------------------------------------------------------------------ layout
def _resolve(gpu, requested, config_name):
    """``[(table name, info), count]`` for a spec's mig-devices on this GPU's own profile table."""
    table = {}
    for name, info in (gpu.get("profiles") or {}).items():
        table[mig_config.canonical_profile(name)] = (name, info)
    resolved = []
    for profile, count in sorted(requested.items()):
        if not count:
            continue
        parsed = mig_config.parse_profile(profile)
        if parsed.c != parsed.g:
            raise InputError("MIG config %r: %s: profile %s asks for compute instances smaller than their GPU instance; "
                             "only one full-size compute instance per GPU instance is supported"
                             % (config_name, describe(gpu), profile))
        key = mig_config.profile_name(parsed)
        if key not in table:
            known = ", ".join(sorted(table, key=_profile_sort_key)) or "none"
            raise InputError("MIG config %r: %s has no MIG profile %s (its profiles: %s)"
                             % (config_name, describe(gpu), profile, known))
        name, info = table[key]
        if count > info.get("instances", count):
            raise InputError("MIG config %r: %s: %d x %s do not fit (NVML allows at most %d)"
                             % (config_name, describe(gpu), count, name, info["instances"]))
        resolved.append((name, info, count))
    return resolved


def _flatten_key(entry):
    name, _info, _count = entry
    p = mig_config.parse_profile(name)
    return (-p.g, -p.c, tuple(sorted(p.attributes, reverse=True)), -p.gb, name)


def fit(gpu, requested, config_name="?"):
    """The layout of ``requested`` ({profile: count}) on ``gpu``, in creation order.

    ``[{"profile", "profile_id" (NVML profile info id), "slices" (its sliceCount: the full-size compute
    instance's slices), "placement": [start, size]}]``.

    InputError naming the GPU and the profiles when a profile is unknown to the GPU or no layout exists.
    """
    resolved = sorted(_resolve(gpu, requested, config_name), key=_flatten_key)
    items = []
    for name, info, count in resolved:
        spans = []
        for start, size in info.get("placements") or []:
            spans.append((int(start), int(size), ((1 << int(size)) - 1) << int(start)))
        for copy in range(count):
            items.append((name, info, spans, copy > 0))
    chosen = [None] * len(items)

    def place(position, used, floor):
        if position == len(items):
            return True
        name, _info, spans, same_as_previous = items[position]
        first = floor if same_as_previous else 0
        for option in range(first, len(spans)):
            start, size, mask = spans[option]
            if used & mask:
                continue
            chosen[position] = (start, size)
            if place(position + 1, used | mask, option + 1 if position + 1 < len(items) and items[position + 1][3] else 0):
                return True
        return False

    if not place(0, 0, 0):
        asked = ", ".join("%s: %d" % (name, count) for name, _info, count in resolved)
        raise InputError("MIG config %r: %s: {%s} does not fit: no placement of NVML's possible placements holds "
                         "them all" % (config_name, describe(gpu), asked))
    return [{"profile": name, "profile_id": info.get("id"), "slices": info.get("slices"), "placement": list(chosen[i])}
            for i, (name, info, _spans, _same) in enumerate(items)]


# ------------------------------------------------------------------ plan
def _gpu_plan(gpu, spec, config_name):
    current, pending, counts, full = geometry(gpu)
    desired = spec["mig_enabled"]
    # NVML answers profile info only while MIG is enabled: a reader gives ``profiles`` None for a GPU whose
    # MIG mode is off, and the layout is worked out by a second plan once the mode is on (``replan``).
    replan = bool(desired and any(spec["mig_devices"].values()) and gpu.get("profiles") is None)
    layout = fit(gpu, spec["mig_devices"], config_name) if desired and not replan else []
    wanted = spec_devices(spec) if replan else _count(layout)
    table = dict((mig_config.canonical_profile(name), info) for name, info in (gpu.get("profiles") or {}).items())
    result = {
        "index": gpu["index"], "name": gpu.get("name"), "selected": True,
        "mode": {"current": current, "pending": pending, "desired": desired},
        "mode_change": None, "reset_required": current != desired, "replan": replan,
        "destroy": [], "create": [], "devices": wanted,
        "attributes": dict((name, device_attributes(table[mig_config.canonical_profile(name)]))
                           for name in wanted if mig_config.canonical_profile(name) in table),
        "before": geometry_text(gpu),
    }
    if pending != desired:
        result["mode_change"] = "enable" if desired else "disable"
    geometry_differs = (counts != wanted) or not full
    if gpu.get("instances") and (not desired or geometry_differs):
        for instance in gpu["instances"]:
            for ci in instance.get("compute_instances") or []:
                result["destroy"].append({"kind": "compute_instance", "gpu_instance": instance.get("id"),
                                          "id": ci.get("id")})
        for instance in gpu["instances"]:
            result["destroy"].append({"kind": "gpu_instance", "id": instance.get("id"), "profile": instance["profile"],
                                      "placement": list(instance.get("placement") or [])})
    if desired and geometry_differs:
        result["create"] = [dict(item, compute_instance="full") for item in layout]
    result["changed"] = bool(result["mode_change"] or result["reset_required"] or result["destroy"]
                             or result["create"] or replan)
    if not result["changed"]:
        result["after"] = result["before"]
        return result
    after = "%s: %s" % (describe(gpu), _mode_text(desired, desired))
    if result["reset_required"]:
        after += " (after a reset)"
    if replan:
        after += "; %s (placed once MIG is on)" % _placement_text(
            [{"profile": name} for name, count in sorted(wanted.items()) for dummy in range(count)])
    elif result["create"]:
        after += "; " + _placement_text(result["create"])
    elif desired and gpu.get("instances"):
        after += "; " + _placement_text([{"profile": _instance_profile(i)[0], "placement": i.get("placement")}
                                         for i in gpu["instances"]])
    result["after"] = after
    return result


def device_attributes(info):
    """The attributes of a MIG device of a GPU-instance profile (``info``: an entry of a GPU's ``profiles``) with
    its one full-size compute instance, keyed as the GPU facts key a MIG device's (``gpu_discovery_nvml``
    ``mig_attributes``): ``memory_mib`` (memorySizeMB), ``multiprocessors``, ``slices`` ({gi, ci}: the sliceCount
    twice) and ``engines`` ({copy, decoder, encoder, jpeg, ofa}); None where the reader did not give it."""
    engines = info.get("engines") or {}
    return {"memory_mib": info.get("memory_mib"), "multiprocessors": info.get("multiprocessors"),
            "slices": {"gi": info.get("slices"), "ci": info.get("slices")},
            "engines": dict((engine, engines.get(engine)) for engine in ("copy", "decoder", "encoder", "jpeg", "ofa"))}


def spec_devices(spec):
    """``{canonical profile: count}`` a spec asks for (counts of 0 left out)."""
    return dict((mig_config.canonical_profile(name), count) for name, count in spec["mig_devices"].items() if count)


def _untouched(gpu, why):
    current, pending, counts, _full = geometry(gpu)
    # MIG devices are GPU instances with their one full-size compute instance (named without a note)
    devices = dict((k, v) for k, v in counts.items() if " " not in k) if current and gpu.get("mig_capable") else {}
    return {"index": gpu["index"], "name": gpu.get("name"), "selected": False, "skipped": why,
            "mode": {"current": current, "pending": pending, "desired": None}, "mode_change": None,
            "reset_required": False, "destroy": [], "create": [], "devices": devices, "changed": False,
            "before": geometry_text(gpu), "after": geometry_text(gpu)}


def plan(gpus, configs, config_name):
    """The node's plan for config ``config_name`` of ``configs`` (``{name: [spec]}`` as ``mig_config.parse`` gives).

    Returns ``{"config", "changed", "reset_required" (indices), "gpus": [per-GPU plan], "warnings"}`` (a
    warning when the config addresses no GPU of the node, which mig-parted accepts silently); a per-GPU plan
    has ``index``, ``name``, ``selected``, ``mode`` ({current, pending, desired}), ``mode_change``
    (``enable``/``disable``/None), ``reset_required``, ``destroy`` (compute instances first, then GPU
    instances), ``create`` (``{profile, profile_id, slices, placement: [start, size], compute_instance: "full"}``
    in creation order), ``devices`` ({profile: count} once applied), ``attributes`` ({profile of ``devices``:
    ``device_attributes``} for each profile the GPU's profile table, or that of a GPU of its model, has),
    ``before``/``after`` (one line each),
    ``replan`` (MIG is off and no GPU of the model on the node gave a profile table: plan again once the mode
    is on, before creating anything) and ``changed``; GPUs no spec addresses (or skipped as not MIG-capable) have ``selected`` False and
    ``skipped`` saying why. Raises InputError for a bad config or GPU before planning any GPU, and
    BusyGpuError naming the processes when a GPU that must change has some.
    """
    specs = mig_config.select(configs, config_name)
    gpus = sorted(gpus, key=lambda gpu: gpu["index"])
    selected = select(gpus, specs, config_name)
    tables = dict((gpu.get("pci_device_id"), gpu["profiles"]) for gpu in gpus if gpu.get("profiles") is not None)
    plans = []
    for gpu in gpus:
        if gpu["index"] in selected:
            if gpu.get("profiles") is None and gpu.get("pci_device_id") in tables:
                # MIG off on this GPU: the profile table of a GPU of the same model on the node stands in
                gpu = dict(gpu, profiles=tables[gpu["pci_device_id"]])
            plans.append(_gpu_plan(gpu, selected[gpu["index"]], config_name))
        elif not gpu.get("mig_capable"):
            plans.append(_untouched(gpu, "not MIG-capable"))
        else:
            plans.append(_untouched(gpu, "no spec of MIG config %r addresses it" % config_name))
    busy = []
    for gpu, gpu_plan in zip(gpus, plans):
        if gpu_plan["changed"] and gpu.get("processes"):
            names = ", ".join("%s (pid %s)" % (p.get("name") or "?", p.get("pid")) for p in gpu["processes"])
            busy.append("%s is used by %s" % (describe(gpu), names))
    if busy:
        raise BusyGpuError("MIG geometry not changed on any GPU of this node: %s; stop them first" % "; ".join(busy),
                           busy=busy)
    warnings = []
    if not selected:
        warnings.append("MIG config %r addresses no MIG-capable GPU of this node (its device filters or indices match "
                        "none of %s); nothing changes" % (config_name, ", ".join(describe(gpu) for gpu in gpus) or "no GPU"))
    return {"config": config_name, "changed": any(p["changed"] for p in plans),
            "reset_required": [p["index"] for p in plans if p["reset_required"]], "gpus": plans,
            "warnings": warnings}


def diff(node_plan, header="MIG geometry"):
    """``{"before", "after", "before_header", "after_header"}`` for ``--diff``: one line per GPU."""
    return {"before_header": "%s (before)" % header, "after_header": "%s (config %s)" % (header, node_plan["config"]),
            "before": "".join(p["before"] + "\n" for p in node_plan["gpus"]),
            "after": "".join(p["after"] + "\n" for p in node_plan["gpus"])}


# ------------------------------------------------------------------ after the apply
def verify(gpus, node_plan):
    """The differences between GPUs read back after the apply and the plan (``[]``: the node is as planned).

    A selected GPU must have its mode current and pending as desired (a GPU still pending a reset is a
    difference) and, with MIG enabled, exactly the planned MIG devices, one full-size compute instance each.
    """
    by_index = dict((gpu["index"], gpu) for gpu in gpus)
    problems = []
    for gpu_plan in node_plan["gpus"]:
        if not gpu_plan["selected"]:
            continue
        gpu = by_index.get(gpu_plan["index"])
        if gpu is None:
            problems.append("GPU %s (%s) is gone" % (gpu_plan["index"], gpu_plan["name"]))
            continue
        current, pending, counts, full = geometry(gpu)
        desired = gpu_plan["mode"]["desired"]
        if current != desired or pending != desired:
            wanted = "enabled" if desired else "disabled"
            problems.append("%s: %s, not MIG %s" % (describe(gpu), _mode_text(current, pending), wanted))
            continue
        if desired and (counts != gpu_plan["devices"] or not full):
            have = ", ".join("%s: %d" % kv for kv in sorted(counts.items())) or "none"
            want = ", ".join("%s: %d" % kv for kv in sorted(gpu_plan["devices"].items())) or "none"
            problems.append("%s has MIG devices {%s}, not {%s}" % (describe(gpu), have, want))
    return problems


def mig_devices(node_plan):
    """What the node's GPUs hold once the plan is applied.

    ``{"gpus": {index: {profile: count}}, "resources": {resource: count}}``: ``resources`` as the device
    plugin advertises them under the ``mixed`` strategy (``nvidia.com/mig-<profile>`` per MIG device,
    ``nvidia.com/gpu`` per GPU without MIG).
    """
    gpus, resources = {}, {}
    for gpu_plan in node_plan["gpus"]:
        enabled = gpu_plan["mode"]["desired"] if gpu_plan["selected"] else gpu_plan["mode"]["current"]
        if not enabled:
            resources[GPU_RESOURCE] = resources.get(GPU_RESOURCE, 0) + 1
            gpus[gpu_plan["index"]] = {}
            continue
        gpus[gpu_plan["index"]] = dict(gpu_plan["devices"])
        for profile, count in gpu_plan["devices"].items():
            name = mig_resource_name(profile)
            resources[name] = resources.get(name, 0) + count
    return {"gpus": gpus, "resources": resources}
