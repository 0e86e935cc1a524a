# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Merge the NVIDIA runtimes into Docker's daemon.json, keeping every other key."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import re

from ansible_collections.kubegpu.nvidia.plugins.module_utils import containerd_config as cc
from ansible_collections.kubegpu.nvidia.plugins.module_utils.config_file import (
    ConfigFileError,
    detect_json_indent,
)

DEFAULT_PATH = "/etc/docker/daemon.json"
# Docker's own name grammar (container and runtime names: RestrictedNameChars in moby's
# daemon/names), so a name is usable on the command line (docker run --runtime NAME).
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# dockerd defines these itself and refuses to start when daemon.json defines them again
# ("runtime name 'runc' is reserved"; moby daemon/config StockRuntimeName and LinuxV2RuntimeName).
RESERVED = ("runc", "io.containerd.runc.v2")


def check_name(name):
    """ConfigFileError unless ``name`` can name a Docker runtime."""
    if not isinstance(name, str) or not name:
        raise ConfigFileError("runtime name must not be empty")
    if not _NAME.fullmatch(name):
        raise ConfigFileError(
            "runtime name %s is not valid for Docker: letters, digits, '_', '.' and '-', starting with a letter "
            "or digit (Docker's name rule)" % cc.show(name))
    if name in RESERVED:
        raise ConfigFileError("runtime name %s is reserved by dockerd for its built-in runc (dockerd refuses to start "
                              "when daemon.json defines it): choose another name" % cc.show(name))


def parse(text, path):
    """daemon.json text -> dict. Empty or missing -> {}. ConfigFileError with line/column."""
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        line = getattr(exc, "lineno", None)
        col = getattr(exc, "colno", None)
        reason = getattr(exc, "msg", str(exc))
        raise ConfigFileError(
            "%s is not valid JSON: line %s, column %s: %s" % (path, line, col, reason),
            line=line, column=col,
        )
    if not isinstance(data, dict):
        raise ConfigFileError("%s: expected a JSON object at the top level, found %s" % (path, _kind(data)))
    return data


def _kind(value):
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _dict_at(data, key, path):
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ConfigFileError("%s: %s must be an object, found %s" % (path, key, _kind(value)))
    return value


def check_shape(data, path, names=()):
    """``runtimes``, ``features`` and the managed runtimes' entries are objects, ``default-runtime`` a string."""
    runtimes = _dict_at(data, "runtimes", path) or {}
    _dict_at(data, "features", path)
    default = data.get("default-runtime")
    if default is not None and not isinstance(default, str):
        raise ConfigFileError("%s: default-runtime must be a string, found %s" % (path, _kind(default)))
    for name in names:
        entry = runtimes.get(name)
        if entry is not None and not isinstance(entry, dict):
            raise ConfigFileError("%s: runtimes.%s must be an object, found %s" % (path, name, _kind(entry)))


def apply(data, state, runtimes, runtime_path=None, set_as_default=False, cdi=None, path=DEFAULT_PATH):
    """Return a new dict with the runtimes added (present) or removed (absent).

    ``runtimes`` is a list of Runtime, or one name with ``runtime_path`` and ``set_as_default``.
    An existing entry keeps its other keys (``runtimeArgs``); only ``path`` is enforced.
    """
    runtimes = cc.as_runtimes(runtimes, runtime_path, set_as_default)
    names = [r.name for r in runtimes]
    check_shape(data, path, names)
    data = copy.deepcopy(data)
    current = data.get("runtimes")
    if state == "present":
        if current is None:
            current = data["runtimes"] = {}
        for item in runtimes:
            entry = current.get(item.name)
            if entry is None:
                current[item.name] = {"args": [], "path": item.path}
            elif entry.get("path") != item.path:
                entry["path"] = item.path
        defaults = [r.name for r in runtimes if r.default]
        if defaults:
            data["default-runtime"] = defaults[0]
        elif data.get("default-runtime") in names:
            del data["default-runtime"]
        if cdi is not None:
            features = data.get("features")
            if features is None:
                features = data["features"] = {}
            features["cdi"] = bool(cdi)
    else:
        for name in names:
            if current is not None and name in current:
                del current[name]
        if current is not None and not current:
            del data["runtimes"]
        if data.get("default-runtime") in names:
            del data["default-runtime"]
    return data


def edit_text(text, path, state, runtimes, runtime_path=None, set_as_default=False, cdi=None):
    """Return the new daemon.json text (the old text itself when nothing changes)."""
    data = parse(text, path)
    new = apply(data, state, runtimes, runtime_path, set_as_default, cdi, path)
    if new == data and text is not None:
        return text
    if new == data and not new:
        return text
    indent = detect_json_indent(text or "", default=4)
    return json.dumps(new, indent=indent, separators=(",", ": ")) + "\n"
