# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Merge the NVIDIA runtime into Docker's daemon.json, keeping every other key."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json

from ansible_collections.kubegpu.nvidia.plugins.module_utils.config_file import (
    ConfigFileError,
    detect_json_indent,
)

DEFAULT_PATH = "/etc/docker/daemon.json"


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
        raise ConfigFileError("%s: expected a JSON object at the top level, found %s" % (path, type(data).__name__))
    return data


def _dict_at(data, key, path):
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ConfigFileError("%s: %r is not an object" % (path, key))
    return value


def apply(data, state, runtime_name, runtime_path, set_as_default=False, cdi=None, path=DEFAULT_PATH):
    """Return a new dict with our runtime added (present) or removed (absent)."""
    data = copy.deepcopy(data)
    runtimes = _dict_at(data, "runtimes", path)
    if state == "present":
        if runtimes is None:
            runtimes = data["runtimes"] = {}
        entry = runtimes.get(runtime_name)
        if not isinstance(entry, dict):
            runtimes[runtime_name] = {"args": [], "path": runtime_path}
        elif entry.get("path") != runtime_path:
            entry["path"] = runtime_path
        if set_as_default:
            data["default-runtime"] = runtime_name
        elif data.get("default-runtime") == runtime_name:
            del data["default-runtime"]
        if cdi is not None:
            features = _dict_at(data, "features", path)
            if features is None:
                features = data["features"] = {}
            features["cdi"] = bool(cdi)
    else:
        if runtimes is not None and runtime_name in runtimes:
            del runtimes[runtime_name]
            if not runtimes:
                del data["runtimes"]
        if data.get("default-runtime") == runtime_name:
            del data["default-runtime"]
    return data


def edit_text(text, path, state, runtime_name, runtime_path, set_as_default=False, cdi=None):
    """Return the new daemon.json text (the old text itself when nothing changes)."""
    data = parse(text, path)
    new = apply(data, state, runtime_name, runtime_path, set_as_default, cdi, path)
    if new == data and text is not None:
        return text
    if new == data and not new:
        return text
    indent = detect_json_indent(text or "", default=4)
    return json.dumps(new, indent=indent, separators=(",", ": ")) + "\n"
