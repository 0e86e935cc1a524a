# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The CRI-O drop-in holding the NVIDIA runtimes (``/etc/crio/crio.conf.d/99-nvidia.toml``).

The drop-in belongs to the module: it is generated whole. New runtimes start from the options of
CRI-O's default runtime, read from ``crio.conf`` and the other drop-ins of the same directory (or
from ``crio status config``, what the running CRI-O loaded). Runtimes an earlier run put into the
drop-in and this run does not manage stay in it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import os

from ansible_collections.kubegpu.nvidia.plugins.module_utils import containerd_config as cc
from ansible_collections.kubegpu.nvidia.plugins.module_utils.config_file import ConfigFileError, read_text

DEFAULT_PATH = "/etc/crio/crio.conf.d/99-nvidia.toml"
HEADER = "# Managed by kubegpu.nvidia.container_runtime_nvidia: the NVIDIA runtimes for CRI-O.\n"
RUNTIME_KEYS = ("crio", "runtime")
# Runtime types whose options an OCI runtime wrapper can take over (a "vm" runtime such as Kata cannot).
OCI_TYPES = ("oci", "")


def check_name(name):
    cc.check_name(name, "CRI-O")


def check_path(path):
    """The drop-in must be a drop-in: CRI-O's main file is never written whole."""
    if os.path.basename(path) == "crio.conf":
        raise ConfigFileError("%s is CRI-O's main configuration; the module writes a drop-in of its own whole: "
                              "point path at a file in crio.conf.d (default %s)" % (path, DEFAULT_PATH))


def source_files(path):
    """crio.conf beside the drop-in directory, then every file under that directory in the order CRI-O
    reads them (Go's filepath.Walk: lexical, depth first, hidden files included), without ``path``."""
    directory = os.path.dirname(path)
    files = [os.path.join(os.path.dirname(directory), "crio.conf")]
    if os.path.isdir(directory):
        for root, dirs, names in os.walk(directory):
            dirs.sort()
            for name in sorted(names):
                candidate = os.path.join(root, name)
                if candidate != path and os.path.isfile(candidate):
                    files.append(candidate)
    return files


def check_shape(data, path):
    """The tables CRI-O's runtime settings live in are tables; ConfigFileError naming file and key."""
    cc.expect(data, ("crio",), dict, path)
    cc.expect(data, RUNTIME_KEYS, dict, path)
    cc.expect(data, RUNTIME_KEYS + ("default_runtime",), str, path)
    runtimes = cc.expect(data, RUNTIME_KEYS + ("runtimes",), dict, path, {})
    for name in runtimes:
        cc.expect(data, RUNTIME_KEYS + ("runtimes", name), dict, path)
        cc.expect(data, RUNTIME_KEYS + ("runtimes", name, "runtime_type"), str, path)


def merged_runtime_config(paths):
    """(default_runtime, runtimes dict) after CRI-O's merge of the given files."""
    default = None
    runtimes = {}
    for path in paths:
        text = read_text(path)
        if text is None:
            continue
        data = cc.load(text, path)
        check_shape(data, path)
        runtime = cc.get(data, RUNTIME_KEYS) or {}
        if runtime.get("default_runtime"):
            default = runtime["default_runtime"]
        for name, table in (runtime.get("runtimes") or {}).items():
            runtimes.setdefault(name, {}).update(table)
    return default, runtimes


def effective_runtime_config(effective):
    """(default_runtime, runtimes) of ``crio status config`` output (its zero values dropped)."""
    check_shape(effective, "crio status config")
    runtime = cc.get(effective, RUNTIME_KEYS) or {}
    runtimes = dict((name, cc.nonzero(table))
                    for name, table in (runtime.get("runtimes") or {}).items())
    return runtime.get("default_runtime"), runtimes


def choose_source(default, runtimes, managed):
    """The runtime new runtimes copy: the default runtime when it is an OCI runtime and not an NVIDIA
    one, else runc, else crun; managed runtimes never count (nvidia-ctk's GetLowLevelRuntimes,
    pkg/config/engine/engine.go, with CRI-O's runtime types)."""
    return cc.low_level_runtime(default, runtimes, managed, OCI_TYPES)


def desired(runtimes, default, sources, current=None, removed=()):
    """The drop-in's data: the managed runtimes (copies of the source), a default marked on one of them,
    and what ``current`` (the drop-in as it is) holds for runtimes this run neither manages nor removes."""
    managed = [r.name for r in runtimes] + list(removed)
    source_name = choose_source(default, sources, managed)
    source = sources.get(source_name) if source_name else None
    data = {}
    kept = {}
    current_runtime = cc.get(current or {}, RUNTIME_KEYS) or {}
    for name, table in (current_runtime.get("runtimes") or {}).items():
        if name not in managed:
            kept[name] = table
    chosen = [r.name for r in runtimes if r.default]
    if chosen:
        data["default_runtime"] = chosen[0]
    elif current_runtime.get("default_runtime") in kept:
        data["default_runtime"] = current_runtime["default_runtime"]
    tables = dict(kept)
    for item in runtimes:
        table = copy.deepcopy(dict(source or {}))
        table["runtime_path"] = item.path
        table["runtime_type"] = "oci"
        tables[item.name] = table
    if tables:
        data["runtimes"] = tables
    return ({"crio": {"runtime": data}} if data else {}), source_name


def render(data):
    runtime = cc.get(data, RUNTIME_KEYS) or {}
    text = HEADER
    if "default_runtime" in runtime:
        text += "\n[crio.runtime]\ndefault_runtime = %s\n" % cc.render_value(runtime["default_runtime"])
    for name, table in (runtime.get("runtimes") or {}).items():
        text += "\n" + cc.render_table(["crio", "runtime", "runtimes", name], table, 0, 0)
    return text


def edit_text(text, path, state, runtimes, runtime_path=None, set_as_default=False, effective=None, info=None):
    """Return the new drop-in text, ``None`` when the file should not exist.

    ``runtimes`` is a list of Runtime, or one name with ``runtime_path`` and ``set_as_default``.
    ``effective`` is the parsed ``crio status config`` (what CRI-O loaded), else the files are read.
    ``info``, a dict, receives ``options_source``.
    """
    runtimes = cc.as_runtimes(runtimes, runtime_path, set_as_default)
    info = {} if info is None else info
    current = None
    if text is not None:
        current = cc.load(text, path)  # refuse to replace a file that does not parse
        check_shape(current, path)
    removed = ()
    if state == "absent":
        removed = [r.name for r in runtimes]
        runtime = cc.get(current or {}, RUNTIME_KEYS) or {}
        if not [n for n in (runtime.get("runtimes") or {}) if n not in removed]:
            return None
        runtimes = []
        default, sources = None, {}
    elif effective is not None:
        default, sources = effective_runtime_config(effective)
    else:
        default, sources = merged_runtime_config(source_files(path))
    data, source_name = desired(runtimes, default, sources, current, removed)
    if state == "present":
        info["options_source"] = source_name
    if current is not None and current == data:
        return text
    return render(data)
