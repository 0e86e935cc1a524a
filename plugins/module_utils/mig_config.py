# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""mig-parted ``version: v1`` MIG configurations, parsed and checked as mig-parted parses them.

The rules follow NVIDIA/mig-parted ``api/spec/v1/spec.go`` (``Spec`` and ``MigConfigSpec``'s
``UnmarshalJSON``), ``pkg/types/mig_config.go`` (``AssertValidFormat``), ``pkg/types/device.go``
(device filters) and go-nvlib ``pkg/nvlib/device/mig_profile.go`` (the profile grammar):

* the document has ``version: v1`` (required as soon as anything else is there) and ``mig-configs``,
  nothing else; ``mig-configs`` maps a name to a non-empty list of specs;
* a spec has ``devices`` (``all`` or a list of GPU indices; required), ``mig-enabled`` (a boolean;
  required), ``mig-devices`` (profile -> count; required when MIG is enabled, ``{}`` allowed; empty or
  absent when it is disabled) and ``device-filter`` (one or a list of ``0x<device><vendor>`` PCI ids such
  as ``0x20B010DE``, optionally ``:0x<subsystem device><subsystem vendor>``); any other key is refused;
* a profile is ``[<c>c.]<g>g.<gb>gb`` with ``+<attributes>`` or ``-<attributes>`` (``1g.10gb+me``,
  ``1g.24gb+me.all``, ``1g.24gb+gfx``, ``2g.48gb-me``); counts are non-negative integers and a non-empty
  ``mig-devices`` must ask for at least one device.

Stricter than mig-parted where mig-parted accepts input it can never use: an empty ``devices`` or
``device-filter`` list, a negative index and a device filter that is not a PCI id are refused here
(mig-parted keeps such a spec and it silently matches no GPU).

Parsed configurations are plain data: ``{name: [spec, ...]}`` where a spec is a dict with ``devices``
(``"all"`` or a list of ints), ``mig_enabled`` (bool), ``mig_devices`` ({profile: count}, as written) and
``device_filter`` (a list of ``(device_vendor, subsystem_or_None)`` int pairs; empty: any GPU).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import re
from collections import namedtuple

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

try:
    import yaml
    HAS_YAML = True
except ImportError:  # pragma: no cover - PyYAML ships with ansible-core
    HAS_YAML = False

VERSION = "v1"
SPEC_KEYS = ("device-filter", "devices", "mig-enabled", "mig-devices")
ATTRIBUTE = re.compile(r"^[A-Za-z][A-Za-z0-9.]*$")
PCI_ID = re.compile(r"^(?:0[xX][0-9A-Fa-f]{1,8}|[0-9]+)$")

# A profile as go-nvlib's parseMigProfile reads it; attributes sorted, as MigProfileInfo.Matches compares them.
Profile = namedtuple("Profile", "c g gb attributes negative")


# ------------------------------------------------------------------ profiles
def _field(text, suffix, profile):
    if text.strip() != text or not text.endswith(suffix):
        raise InputError("MIG profile %r is malformed: expected [<c>c.]<g>g.<gb>gb[+attribute|-attribute]" % (profile,))
    number = text[:-len(suffix)]
    if not number.isdigit():
        raise InputError("MIG profile %r is malformed: %r is not a number of %s" % (profile, number, suffix))
    return int(number)


def parse_profile(profile):
    """The ``Profile`` of a profile name; InputError naming it when it does not follow the grammar."""
    if not isinstance(profile, str) or not profile:
        raise InputError("MIG profile %r is malformed: expected a string such as 1g.10gb" % (profile,))
    if "+" in profile and "-" in profile:
        raise InputError("MIG profile %r is malformed: it has both '+' and '-' attributes" % (profile,))
    sign = "+" if "+" in profile else ("-" if "-" in profile else "")
    fields, _sep, attrs = profile.partition(sign) if sign else (profile, "", "")
    parts = fields.split(".", 2)
    if len(parts) == 3:
        c, g, gb = _field(parts[0], "c", profile), _field(parts[1], "g", profile), _field(parts[2], "gb", profile)
    elif len(parts) == 2:
        g, gb = _field(parts[0], "g", profile), _field(parts[1], "gb", profile)
        c = g
    else:
        raise InputError("MIG profile %r is malformed: expected [<c>c.]<g>g.<gb>gb[+attribute|-attribute]" % (profile,))
    attributes = ()
    if sign:
        names = attrs.split(",")
        for name in names:
            if not ATTRIBUTE.match(name) or name.endswith("."):
                raise InputError("MIG profile %r is malformed: bad attribute %r (a letter, then letters, digits or "
                                 "dots, such as me, me.all, gfx)" % (profile, name))
        if len(set(names)) != len(names):
            raise InputError("MIG profile %r is malformed: an attribute is repeated" % (profile,))
        attributes = tuple(sorted(names))
    if sign == "-":
        return Profile(c, g, gb, (), attributes)
    return Profile(c, g, gb, attributes, ())


def profile_name(profile):
    """The canonical name of a ``Profile`` (go-nvlib ``MigProfileInfo.String``): ``<c>c.`` only when c != g."""
    suffix = ""
    if profile.attributes:
        suffix = "+" + ",".join(profile.attributes)
    if profile.negative:
        suffix = "-" + ",".join(profile.negative)
    if profile.c == profile.g:
        return "%dg.%dgb%s" % (profile.g, profile.gb, suffix)
    return "%dc.%dg.%dgb%s" % (profile.c, profile.g, profile.gb, suffix)


def canonical_profile(name):
    """``canonical_profile("3c.3g.20gb") == "3g.20gb"``; InputError when ``name`` is malformed."""
    return profile_name(parse_profile(name))


# ------------------------------------------------------------------ device filters
def parse_device_id(text):
    """``(device_vendor, subsystem or None)`` of ``0x20B010DE`` or ``0x20B010DE:0x134F10DE`` (pkg/types/device.go)."""
    if not isinstance(text, str):
        raise ValueError("not a string")
    parts = text.split(":")
    if len(parts) > 2 or not all(PCI_ID.match(p) for p in parts):
        raise ValueError("not a PCI id")
    values = [int(p, 0) if not p.isdigit() else int(p) for p in parts]
    if any(v > 0xFFFFFFFF for v in values):
        raise ValueError("more than 32 bits")
    return values[0], (values[1] if len(values) == 2 else None)


def format_device_id(device_id):
    primary, subsystem = device_id
    text = "0x%08X" % primary
    return text if subsystem is None else "%s:0x%08X" % (text, subsystem)


def matches_filter(spec, pci_device_id, pci_subsystem_id=None):
    """Whether a GPU with these NVML ``pciDeviceId`` / ``pciSubSystemId`` passes ``spec``'s device filter.

    As ``MigConfigSpec.MatchesDeviceFilter``: no filter matches every GPU; a filter with a subsystem needs
    both ids to match, one without only the device and vendor.
    """
    if not spec["device_filter"]:
        return True
    for primary, subsystem in spec["device_filter"]:
        if primary != pci_device_id:
            continue
        if subsystem is None or subsystem == pci_subsystem_id:
            return True
    return False


# ------------------------------------------------------------------ documents
def _kind(value):
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "empty"
    return type(value).__name__


def load_document(source, what="the MIG configuration"):
    """The dict of a YAML text (or the dict itself); InputError naming ``what`` when it is not YAML or not a mapping."""
    if isinstance(source, dict):
        return source
    if source is None:
        return {}
    if not isinstance(source, str):
        raise InputError("%s must be YAML text or a mapping, not %s" % (what, _kind(source)))
    if not HAS_YAML:  # pragma: no cover
        raise InputError("%s cannot be read: the PyYAML library is missing" % what, kind="dependency")
    try:
        doc = yaml.load(source, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # nosec: a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = " (line %d)" % (mark.line + 1) if mark is not None else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise InputError("%s is not valid YAML%s: %s" % (what, where, " ".join(str(problem).split())))
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise InputError("%s must be a mapping with version and mig-configs, not %s" % (what, _kind(doc)))
    return doc


def parse(source, what="the MIG configuration"):
    """``{name: [spec, ...]}`` of a mig-parted v1 document (YAML text or a dict), checked as mig-parted checks it.

    An empty document, or ``version: v1`` alone, gives ``{}`` (mig-parted accepts both). Every error is an
    InputError with one line naming ``what``, the config, the spec's index and what is wrong.
    """
    doc = load_document(source, what)
    if not doc:
        return {}
    if "version" not in doc:
        raise InputError("%s has no 'version' field (mig-parted needs version: v1)" % what)
    if doc["version"] != VERSION:
        raise InputError("%s has version %r; only version: v1 is known" % (what, doc["version"]))
    for key in doc:
        if key not in ("version", "mig-configs"):
            raise InputError("%s has an unexpected field %r (only version and mig-configs)" % (what, key))
    if "mig-configs" not in doc:
        return {}
    configs = doc["mig-configs"]
    if not isinstance(configs, dict):
        raise InputError("%s: mig-configs must be a mapping of config names to lists of specs, not %s"
                         % (what, _kind(configs)))
    if not configs:
        raise InputError("%s: mig-configs is empty; at least one config is required" % what)
    result = {}
    for name, specs in configs.items():
        if not isinstance(name, str) or not name:
            raise InputError("%s: config name %r is not a string" % (what, name))
        if not isinstance(specs, list):
            raise InputError("%s: config %r must be a list of specs, not %s" % (what, name, _kind(specs)))
        if not specs:
            raise InputError("%s: config %r is empty; at least one spec is required" % (what, name))
        result[name] = [parse_spec(spec, name, index, what) for index, spec in enumerate(specs)]
    return result


def parse_spec(spec, name, index, what="the MIG configuration"):
    """One spec of config ``name`` at position ``index`` (see the module's docstring for the result)."""
    where = "%s: config %r, spec %d" % (what, name, index)
    if not isinstance(spec, dict):
        raise InputError("%s must be a mapping with devices and mig-enabled, not %s" % (where, _kind(spec)))
    for key in spec:
        if key not in SPEC_KEYS:
            raise InputError("%s has an unexpected field %r (only %s)" % (where, key, ", ".join(SPEC_KEYS)))
    for key in ("devices", "mig-enabled"):
        if key not in spec:
            raise InputError("%s is missing the required field %r" % (where, key))
    devices = spec["devices"]
    if isinstance(devices, str):
        if devices != "all":
            raise InputError("%s: devices must be 'all' or a list of GPU indices, not %r" % (where, devices))
    elif isinstance(devices, list):
        if not devices:
            raise InputError("%s: devices is an empty list; give GPU indices or 'all'" % where)
        for device in devices:
            if isinstance(device, bool) or not isinstance(device, int) or device < 0:
                raise InputError("%s: devices has %r; GPU indices are non-negative integers" % (where, device))
        devices = list(devices)
    else:
        raise InputError("%s: devices must be 'all' or a list of GPU indices, not %s" % (where, _kind(devices)))
    enabled = spec["mig-enabled"]
    if not isinstance(enabled, bool):
        raise InputError("%s: mig-enabled must be true or false, not %r" % (where, enabled))
    mig_devices = spec.get("mig-devices")
    if mig_devices is not None:
        if not isinstance(mig_devices, dict):
            raise InputError("%s: mig-devices must be a mapping of MIG profiles to counts, not %s"
                             % (where, _kind(mig_devices)))
        for profile, count in mig_devices.items():
            try:
                parse_profile(profile)
            except InputError as exc:
                raise InputError("%s: %s" % (where, exc.msg))
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise InputError("%s: the count of %s must be a non-negative integer, not %r" % (where, profile, count))
        if mig_devices and not any(mig_devices.values()):
            raise InputError("%s: every count in mig-devices is 0; use {} for MIG enabled without devices" % where)
    if enabled and mig_devices is None:
        raise InputError("%s: mig-devices is required when mig-enabled is true ({} for none)" % where)
    if not enabled and mig_devices:
        raise InputError("%s: mig-devices must be empty when mig-enabled is false" % where)
    device_filter = spec.get("device-filter")
    filters = []
    if device_filter is not None:
        items = [device_filter] if isinstance(device_filter, str) else device_filter
        if not isinstance(items, list):
            raise InputError("%s: device-filter must be a PCI id such as 0x20B010DE or a list of them, not %s"
                             % (where, _kind(device_filter)))
        if not items:
            raise InputError("%s: device-filter is an empty list; leave it out to match every GPU" % where)
        for item in items:
            if item == "" and isinstance(device_filter, str):
                continue  # mig-parted: an empty filter string is no filter
            try:
                filters.append(parse_device_id(item))
            except ValueError:
                raise InputError("%s: device-filter %r is not a PCI id such as 0x20B010DE (NVML pciDeviceId, "
                                 "device then vendor)" % (where, item))
    return {"devices": devices, "mig_enabled": enabled, "mig_devices": dict(mig_devices or {}),
            "device_filter": filters}


# ------------------------------------------------------------------ sets of configs
def merge(*configs):
    """The configs of each argument in turn, a later one replacing an earlier one of the same name."""
    result = {}
    for item in configs:
        result.update(item or {})
    return result


def select(configs, name):
    """The specs of config ``name``; InputError naming it (and the nearest known names) when there is none."""
    if not isinstance(name, str) or not name:
        raise InputError("no MIG config selected: name one of the %d known configs" % len(configs))
    if name in configs:
        return configs[name]
    near = difflib.get_close_matches(name, sorted(configs), n=3)
    hint = " (did you mean %s?)" % " or ".join(repr(n) for n in near) if near else ""
    raise InputError("MIG config %r does not exist%s; %d configs are known, the shipped ones and your own"
                     % (name, hint, len(configs)))
