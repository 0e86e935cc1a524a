# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The cluster's NVIDIA device plugin configuration, declared once and resolved once.

The settings of the ``k8s_device_plugin`` role (``k8s_device_plugin_mig_strategy``, ``_sharing_strategy``,
``_replicas``, ``_sharing_resources``, ``_rename_by_default``, ``_configs``, ``_default_config``,
``_product_configs``, ``_node_configs``, ...) become one *resolved configuration*::

    {"default_config": "default",
     "configs": {name: {every setting of SETTINGS}},   # the default config included
     "product_configs": {GPU product: config name},
     "node_configs": {node name: config name}}

That dict drives the device plugin's ConfigMap (``config_documents``), the labels of each node and the
allocatable it must advertise (``node_model``).  ``resolve`` checks it the way the device plugin's own
parser would (NVIDIA/k8s-device-plugin v0.20.0 ``api/config/v1``) and fails with one line naming what to
fix; resolving a resolved configuration gives it back unchanged.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible.module_utils.parsing.convert_bool import BOOLEANS, boolean

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gfd_labels import (
    GPU_RESOURCE, MIG_RESOURCE_PREFIX, MIG_STRATEGIES, SHARING_STRATEGIES, plugin_view, sanitise_label_value)

DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
DEVICE_ID_STRATEGIES = ("uuid", "index")

# setting -> default (the device plugin's own defaults; the role's defaults/main.yml has the same)
SETTINGS = {
    "mig_strategy": "none",
    "fail_on_init_error": True,
    "pass_device_specs": False,
    "device_list_strategy": "envvar",
    "device_id_strategy": "uuid",
    "sharing_strategy": "none",
    "replicas": 1,
    "sharing_resources": [],
    "rename_by_default": False,
    "fail_requests_greater_than_one": False,
}
_CHOICES = {
    "mig_strategy": MIG_STRATEGIES,
    "sharing_strategy": SHARING_STRATEGIES,
    "device_list_strategy": DEVICE_LIST_STRATEGIES,
    "device_id_strategy": DEVICE_ID_STRATEGIES,
}
_BOOLS = ("fail_on_init_error", "pass_device_specs", "rename_by_default", "fail_requests_greater_than_one")

# a config name: a ConfigMap data key ([-._a-zA-Z0-9]+) that is also a label value (it is written as the
# node label nvidia.com/device-plugin.config)
_CONFIG_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
# a resource name's part after nvidia.com/ (a DNS subdomain, api/config/v1/resources.go NewResourceName)
_RESOURCE_PART = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _fail(msg):
    raise InputError(msg)


def _where(name):
    return "device plugin config %s" % name


def _bool(where, key, value):
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in BOOLEANS or isinstance(value, int) and value in (0, 1):
        return boolean(value)
    _fail("%s: %s must be true or false, got %r" % (where, key, value))


def _int(where, key, value):
    if isinstance(value, bool):
        _fail("%s: %s must be a whole number, got %r" % (where, key, value))
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    _fail("%s: %s must be a whole number, got %r" % (where, key, value))


def _choice(where, key, value):
    if value not in _CHOICES[key]:
        _fail("%s: %s must be one of %s, got %r" % (where, key, ", ".join(_CHOICES[key]), value))
    return value


def _check_keys(where, settings):
    if not isinstance(settings, dict):
        _fail("%s: the settings must be a dict, got %r" % (where, settings))
    unknown = sorted(str(key) for key in settings if key not in SETTINGS)
    if unknown:
        _fail("%s: unknown setting %s (settings: %s)" % (where, ", ".join(unknown), ", ".join(sorted(SETTINGS))))


def _resource_name(where, name):
    """Check a sharing entry's resource name as the plugin parses it; a hint for a MIG profile written with "+"."""
    text = str(name or "")
    part = text[len("nvidia.com/"):] if text.startswith("nvidia.com/") else None
    if part is not None and len(text) <= 63 and _RESOURCE_PART.match(part):
        return text
    hint = ""
    if "+" in text:
        hint = " (a MIG profile's '+' is written '.': %s)" % text.replace("+", ".")
    _fail("%s: sharing resource %r is not a resource name such as %s or %s1g.10gb%s" % (
        where, name, GPU_RESOURCE, MIG_RESOURCE_PREFIX, hint))


def _sharing_resources(where, strategy, entries):
    if not isinstance(entries, list):
        _fail("%s: sharing_resources must be a list of {name, replicas}, got %r" % (where, entries))
    resolved, seen = [], set()
    for entry in entries:
        if not isinstance(entry, dict) or set(entry) - {"name", "replicas"} or "name" not in entry:
            _fail("%s: each sharing_resources item must be {name: <resource>, replicas: <2 or more>}, got %r" % (
                where, entry))
        name = _resource_name(where, entry["name"])
        if name in seen:
            _fail("%s: sharing resource %s is listed twice" % (where, name))
        seen.add(name)
        replicas = _replicas(where, strategy, entry.get("replicas"), "replicas of %s" % name)
        resolved.append({"name": name, "replicas": replicas})
    return resolved


def _replicas(where, strategy, value, what="replicas"):
    replicas = _int(where, what, value)
    if replicas < 2:
        # api/config/v1/replicas.go ReplicatedResource.UnmarshalJSON: "number of replicas must be >= 2"
        _fail("%s: %s must be 2 or more to share GPUs with %s (the device plugin refuses fewer), got %d" % (
            where, what, strategy, replicas))
    return replicas


def _resolve_one(name, merged, own):
    """One config's complete settings; ``own`` holds what the config itself (not its defaults) sets."""
    where = _where(name)
    out = {}
    for key in ("mig_strategy", "sharing_strategy", "device_list_strategy", "device_id_strategy"):
        out[key] = _choice(where, key, merged[key])
    for key in _BOOLS:
        out[key] = _bool(where, key, merged[key])
    replicas = _int(where, "replicas", merged["replicas"])
    if replicas < 1:
        _fail("%s: replicas must be 1 or more, got %d" % (where, replicas))
    strategy = out["sharing_strategy"]
    if strategy == "none":
        given = [key for key in ("replicas", "sharing_resources") if key in own
                 and (own[key] if key == "sharing_resources" else _int(where, key, own[key]) != 1)]
        if given:
            _fail("%s: %s set without sharing: set sharing_strategy to time-slicing or mps, or leave %s out" % (
                where, " and ".join(given), " and ".join(given)))
        out["replicas"], out["sharing_resources"] = 1, []
    else:
        entries = merged["sharing_resources"] or []
        if entries:
            out["sharing_resources"] = _sharing_resources(where, strategy, entries)
            gpu = [entry["replicas"] for entry in out["sharing_resources"] if entry["name"] == GPU_RESOURCE]
            out["replicas"] = gpu[0] if gpu else 1
        else:
            out["replicas"] = _replicas(where, strategy, replicas)
            out["sharing_resources"] = [{"name": GPU_RESOURCE, "replicas": out["replicas"]}]
        if strategy == "mps" and out["mig_strategy"] == "mixed":
            # cmd/nvidia-device-plugin/main.go validateFlags
            _fail("%s: MPS sharing does not work with mig_strategy mixed (the device plugin refuses it): use "
                  "mig_strategy single or none, or time-slicing" % where)
    return out


def _name_map(what, mapping, configs, key_form=str):
    if mapping is None:
        return {}
    if not isinstance(mapping, dict):
        _fail("%s must be a dict of {%s: config name}, got %r" % (what, what.split()[0], mapping))
    out = {}
    for key, config in mapping.items():
        if config not in configs:
            _fail("%s %s names config %s, which is not defined (configs: %s)" % (
                what, key, config, ", ".join(sorted(configs))))
        key = key_form(key)
        if out.get(key, config) != config:
            _fail("%s %s is given twice, with configs %s and %s" % (what, key, out[key], config))
        out[key] = config
    return out


def resolve(default_config="default", configs=None, product_configs=None, node_configs=None, defaults=None):
    """The resolved configuration; raises InputError with one line naming the first problem.

    ``defaults``: the settings of the default configuration (the role's top-level variables); the named
    ``configs`` (``{name: settings}``) start from them and override what they name, and an entry named like
    the default configuration overrides the default configuration itself.  A setting not given anywhere
    takes the device plugin's default (``SETTINGS``).
    """
    if not isinstance(default_config, str) or not _CONFIG_NAME.match(default_config):
        _fail("the default config name %r is not a valid name (letters, digits, '-', '_' and '.', starting and "
              "ending with a letter or digit, at most 63 characters)" % (default_config,))
    configs = {} if configs is None else configs
    if not isinstance(configs, dict):
        _fail("the named configs must be a dict of {name: settings}, got %r" % (configs,))
    defaults = {} if defaults is None else defaults
    _check_keys("the default settings", defaults)
    base = dict(SETTINGS, **defaults)
    resolved = {}
    for name in [default_config] + sorted(str(key) for key in configs if key != default_config):
        if not _CONFIG_NAME.match(name):
            _fail("device plugin config name %r is not a valid name (letters, digits, '-', '_' and '.', starting "
                  "and ending with a letter or digit, at most 63 characters)" % name)
        override = configs.get(name) or {}
        _check_keys(_where(name), override)
        own = dict(defaults, **override) if name == default_config else override
        resolved[name] = _resolve_one(name, dict(base, **override), own)
    return {
        "default_config": default_config,
        "configs": resolved,
        "product_configs": _name_map("product config", product_configs, resolved, sanitise_label_value),
        "node_configs": _name_map("node config", node_configs, resolved),
    }


def check(resolved):
    """``resolved`` resolved again (a module option holding a resolved configuration is re-checked)."""
    if not isinstance(resolved, dict):
        _fail("the device plugin configuration must be a dict, got %r" % (resolved,))
    unknown = sorted(set(resolved) - {"default_config", "configs", "product_configs", "node_configs"})
    if unknown:
        _fail("the device plugin configuration has unknown keys: %s" % ", ".join(unknown))
    return resolve(resolved.get("default_config") or "default", resolved.get("configs"),
                   resolved.get("product_configs"), resolved.get("node_configs"))


def config_document(settings):
    """The device plugin config file (``version: v1``) of one resolved config."""
    doc = {
        "version": "v1",
        "flags": {
            "migStrategy": settings["mig_strategy"],
            "failOnInitError": settings["fail_on_init_error"],
            "plugin": {
                "passDeviceSpecs": settings["pass_device_specs"],
                "deviceListStrategy": settings["device_list_strategy"],
                "deviceIDStrategy": settings["device_id_strategy"],
            },
        },
    }
    if settings["sharing_strategy"] != "none":
        sharing = {"renameByDefault": settings["rename_by_default"],
                   "resources": [dict(entry) for entry in settings["sharing_resources"]]}
        if settings["sharing_strategy"] == "time-slicing":
            sharing["failRequestsGreaterThanOne"] = settings["fail_requests_greater_than_one"]
            doc["sharing"] = {"timeSlicing": sharing}
        else:
            doc["sharing"] = {"mps": sharing}
    return doc


def config_documents(resolved):
    """``{config name: config file}`` for the ConfigMap."""
    return dict((name, config_document(settings)) for name, settings in resolved["configs"].items())


def view(settings):
    """What the labels and the allocatable read of one resolved config (``gfd_labels.plugin_view``)."""
    return plugin_view(settings["mig_strategy"], settings["sharing_strategy"], settings["rename_by_default"],
                       dict((entry["name"], entry["replicas"]) for entry in settings["sharing_resources"]))


def gpu_product(facts):
    """The GPU product a node's ``product_configs`` are matched by: GFD's product of its first GPU's model
    (``Tesla-T4``), without the ``-SHARED`` or MIG suffix the node's label may carry; None without GPUs."""
    devices = (facts or {}).get("devices") or []
    if not devices:
        return None
    return sanitise_label_value(devices[0].get("name")) or None


def select_config(resolved, node_name=None, product=None):
    """The config a node gets: its node config, else its GPU product's config, else the default config."""
    if node_name is not None and node_name in resolved["node_configs"]:
        return resolved["node_configs"][node_name]
    if product is not None and product in resolved["product_configs"]:
        return resolved["product_configs"][product]
    return resolved["default_config"]
