# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""nvidia-container-runtime's own configuration (/etc/nvidia-container-runtime/config.toml).

What ``nvidia-ctk config --in-place --set key=value`` does (cmd/nvidia-ctk/config/config.go of
NVIDIA/nvidia-container-toolkit): every key is a dotted path of the configuration's TOML tags
(api/config/v1/config.go, cli.go, runtime.go, hook.go, toolkit-cli.go, features.go); a value of the wrong
type, or a key the configuration does not have, is refused; a key set to null is removed. Unlike
nvidia-ctk, which writes the file anew, the edit here keeps the file's comments, order and formatting
(tomlkit), and a key that the file carries as a commented default (``#debug = "..."``) is set in place
of that comment, as nvidia-ctk uncomments it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

try:
    import tomlkit
    from tomlkit.exceptions import TOMLKitError
    from tomlkit.items import Table
    HAS_TOMLKIT = True
    TOMLKIT_IMPORT_ERROR = None
except ImportError as exc:  # pragma: no cover - depends on the node
    HAS_TOMLKIT = False
    TOMLKIT_IMPORT_ERROR = exc
    TOMLKitError = Exception

DEFAULT_PATH = "/etc/nvidia-container-runtime/config.toml"
MODES = ("auto", "legacy", "csv", "cdi", "jit-cdi")
CUDA_COMPAT_MODES = ("disabled", "hook", "ldconfig", "mount")

# key -> type: "bool", "str", "list" (of strings), or a tuple of allowed strings. NVIDIA Container Toolkit v1.20.
SCHEMA = {
    "disable-require": "bool",
    "swarm-resource": "str",
    "accept-nvidia-visible-devices-envvar-when-unprivileged": "bool",
    "accept-nvidia-visible-devices-as-volume-mounts": "bool",
    "supported-driver-capabilities": "str",
    "nvidia-container-cli.root": "str",
    "nvidia-container-cli.path": "str",
    "nvidia-container-cli.environment": "list",
    "nvidia-container-cli.debug": "str",
    "nvidia-container-cli.ldcache": "str",
    "nvidia-container-cli.load-kmods": "bool",
    "nvidia-container-cli.no-pivot": "bool",
    "nvidia-container-cli.no-cgroups": "bool",
    "nvidia-container-cli.user": "str",
    "nvidia-container-cli.ldconfig": "str",
    "nvidia-ctk.path": "str",
    "nvidia-container-runtime.debug": "str",
    "nvidia-container-runtime.log-level": "str",
    "nvidia-container-runtime.runtimes": "list",
    "nvidia-container-runtime.mode": MODES,
    "nvidia-container-runtime.modes.csv.mount-spec-path": "str",
    "nvidia-container-runtime.modes.csv.compat-container-root": "str",
    "nvidia-container-runtime.modes.cdi.spec-dirs": "list",
    "nvidia-container-runtime.modes.cdi.default-kind": "str",
    "nvidia-container-runtime.modes.cdi.annotation-prefixes": "list",
    "nvidia-container-runtime.modes.jit-cdi.nvcdi-feature-flags": "list",
    "nvidia-container-runtime.modes.jit-cdi.nvcdi-disable-hooks": "list",
    "nvidia-container-runtime.modes.legacy.cuda-compat-mode": CUDA_COMPAT_MODES,
    "nvidia-container-runtime-hook.path": "str",
    "nvidia-container-runtime-hook.skip-mode-detection": "bool",
    "features.allow-cuda-compat-libs-from-container": "bool",
    "features.allow-ldconfig-from-container": "bool",
    "features.allow-unknown-oci-spec-fields": "bool",
    "features.disable-cuda-compat-lib-hook": "bool",
    "features.disable-imex-channel-creation": "bool",
    "features.ignore-imex-channel-requests": "bool",
    "features.no-additional-gids-for-device-nodes": "bool",
}
# Settings that older toolkits do not know: (key, value or None for any) -> the first version with it.
SINCE = {
    ("nvidia-container-runtime.mode", "jit-cdi"): (1, 18, 0),
    ("nvidia-container-runtime.modes.jit-cdi.nvcdi-feature-flags", None): (1, 18, 0),
    ("nvidia-container-runtime.modes.jit-cdi.nvcdi-disable-hooks", None): (1, 20, 0),
}
LOG_LEVELS = ("trace", "debug", "info", "warning", "error", "fatal", "panic")


class RuntimeConfigError(InputError):
    """A setting the configuration cannot take, or a file that cannot be used (one line)."""


def _type_name(kind):
    if isinstance(kind, tuple):
        return "one of %s" % ", ".join(kind)
    return {"bool": "a boolean", "str": "a string", "list": "a list of strings"}[kind]


def check_setting(key, value, toolkit_version=None):
    """Check one ``key: value`` against the schema; returns the value as it is written (None: remove the key)."""
    if key not in SCHEMA:
        near = [k for k in SCHEMA if k.split(".")[-1] == key.split(".")[-1]]
        hint = " (did you mean %s?)" % " or ".join(near) if near else ""
        raise RuntimeConfigError("nvidia-container-runtime has no setting %r%s" % (key, hint))
    if value is None:
        return None
    kind = SCHEMA[key]
    ok = ((kind == "bool" and isinstance(value, bool))
          or (kind == "str" and isinstance(value, str))
          or (kind == "list" and isinstance(value, list) and all(isinstance(v, str) for v in value))
          or (isinstance(kind, tuple) and isinstance(value, str) and value in kind))
    if not ok:
        raise RuntimeConfigError("%s must be %s, not %r" % (key, _type_name(kind), value))
    if key == "nvidia-container-runtime.log-level" and value not in LOG_LEVELS:
        raise RuntimeConfigError("%s must be one of %s, not %r" % (key, ", ".join(LOG_LEVELS), value))
    if key == "nvidia-container-cli.ldconfig" and not value.startswith("@"):
        raise RuntimeConfigError("%s must start with @ (a path on the host): %r is a path in the container, which "
                                 "nvidia-container-cli refuses unless features.allow-ldconfig-from-container" % (key, value))
    if toolkit_version:
        for (since_key, since_value), version in SINCE.items():
            if since_key == key and since_value in (None, value) and toolkit_version < version:
                raise RuntimeConfigError("%s = %r needs NVIDIA Container Toolkit %s or newer; the node has %s" % (
                    key, value, ".".join(str(v) for v in version), ".".join(str(v) for v in toolkit_version)))
    return value


def _toml_value(value):
    """``value`` as TOML text (``"x"``, ``true``, ``["a", "b"]``)."""
    return tomlkit.item(value).as_string()


def uncomment_defaults(text, settings, doc):
    """``text`` with each setting that the file has only as a commented default (``#name = ...`` in its table, as
    nvidia-ctk writes defaults) set on that line instead, as ``nvidia-ctk config --set`` uncomments it."""
    lines = (text or "").splitlines(True)
    for key in sorted(settings):
        value = settings[key]
        if value is None:
            continue
        table, _sep, name = key.rpartition(".")
        node = doc
        for part in table.split(".") if table else []:
            node = node.get(part) if hasattr(node, "get") else None
            if node is None:
                break
        if node is None or (hasattr(node, "get") and name in node):
            continue
        header = "[%s]" % table if table else None
        inside = header is None  # the top level runs from the first line to the first table header
        for index, line in enumerate(lines):
            stripped = line.strip()
            if stripped.startswith("["):
                if header is None:
                    break
                inside = stripped == header
                continue
            if inside and re.match(r"^#\s*%s\s*=" % re.escape(name), stripped):
                ending = "\n" if line.endswith("\n") else ""
                lines[index] = "%s = %s%s" % (name, _toml_value(value), ending)
                break
    return "".join(lines)


def _set(doc, key, value):
    """Set dotted ``key`` to ``value`` in the tomlkit document (None removes it). Tables are created as needed."""
    parts = key.split(".")
    table = doc
    for index, part in enumerate(parts[:-1]):
        if part not in table:
            table[part] = tomlkit.table()
        table = table[part]
        if not isinstance(table, (Table, dict)):
            raise RuntimeConfigError("%s: %s is not a table" % (key, ".".join(parts[:index + 1])))
    name = parts[-1]
    if value is None:
        if name in table:
            del table[name]
        return
    if name in table and table[name] == value:
        return
    table[name] = value


def edit_text(text, path, settings, toolkit_version=None):
    """The configuration ``text`` (None: no file) with ``settings`` ({dotted key: value or None}) applied."""
    for key, value in settings.items():
        check_setting(key, value, toolkit_version)
    try:
        doc = tomlkit.parse(text or "")
        doc = tomlkit.parse(uncomment_defaults(text, settings, doc))
    except TOMLKitError as exc:
        raise RuntimeConfigError("%s is not valid TOML: %s" % (path, exc))
    # keys of the top level first: a key added after a new table would land inside it
    for key in sorted(settings, key=lambda k: ("." in k, k)):
        _set(doc, key, settings[key])
    return tomlkit.dumps(doc)


def current_values(text, keys):
    """{key: value} of ``keys`` as the file ``text`` has them (absent keys left out)."""
    try:
        doc = tomlkit.parse(text or "")
    except TOMLKitError:
        return {}
    out = {}
    for key in keys:
        node = doc
        for part in key.split("."):
            if not hasattr(node, "get") or part not in node:
                node = None
                break
            node = node[part]
        if node is not None:
            out[key] = node.unwrap() if hasattr(node, "unwrap") else node
    return out
