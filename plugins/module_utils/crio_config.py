# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The CRI-O drop-in holding the NVIDIA runtime (``/etc/crio/crio.conf.d/99-nvidia.toml``).

The drop-in belongs to the module: it is generated whole. The runtime starts
from the options of CRI-O's default runtime, read from ``crio.conf`` and the
other drop-ins in the same directory.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.kubegpu.nvidia.plugins.module_utils import containerd_config
from ansible_collections.kubegpu.nvidia.plugins.module_utils.config_file import ConfigFileError, read_text

DEFAULT_PATH = "/etc/crio/crio.conf.d/99-nvidia.toml"
HEADER = "# Managed by kubegpu.nvidia.container_runtime_nvidia: the NVIDIA runtime for CRI-O.\n"


def source_files(path):
    """crio.conf next to the drop-in directory, then the other drop-ins in lexical order."""
    directory = os.path.dirname(path)
    files = [os.path.join(os.path.dirname(directory), "crio.conf")]
    if os.path.isdir(directory):
        files.extend(
            os.path.join(directory, name) for name in sorted(os.listdir(directory))
            if os.path.join(directory, name) != path and not name.startswith(".")
            and os.path.isfile(os.path.join(directory, name))
        )
    return files


def merged_runtime_config(paths):
    """(default_runtime, runtimes dict) after CRI-O's merge of the given files."""
    default = None
    runtimes = {}
    for path in paths:
        text = read_text(path)
        if text is None:
            continue
        data = containerd_config.plain(containerd_config.parse(text, path))
        runtime = (data.get("crio") or {}).get("runtime") or {}
        if runtime.get("default_runtime"):
            default = runtime["default_runtime"]
        for name, table in (runtime.get("runtimes") or {}).items():
            if isinstance(table, dict):
                runtimes.setdefault(name, {}).update(table)
    return default, runtimes


def desired(runtime_name, runtime_path, set_as_default, default, runtimes):
    source = None
    for candidate in (default, "runc", "crun"):
        if candidate and candidate != runtime_name and candidate in runtimes:
            source = runtimes[candidate]
            break
    table = dict(source or {})
    table["runtime_path"] = runtime_path
    table["runtime_type"] = "oci"
    runtime = {}
    if set_as_default:
        runtime["default_runtime"] = runtime_name
    runtime["runtimes"] = {runtime_name: table}
    return {"crio": {"runtime": runtime}}


def render(data):
    runtime = data["crio"]["runtime"]
    text = HEADER
    if "default_runtime" in runtime:
        text += "\n[crio.runtime]\ndefault_runtime = %s\n" % containerd_config.render_value(runtime["default_runtime"])
    for name, table in runtime["runtimes"].items():
        text += "\n" + containerd_config.render_table(["crio", "runtime", "runtimes", name], table, 0, 0)
    return text


def edit_text(text, path, state, runtime_name, runtime_path, set_as_default=False):
    """Return the new drop-in text, ``None`` when the file should not exist."""
    if text is not None:
        containerd_config.parse(text, path)  # refuse to replace a file that does not parse
    if state == "absent":
        return None
    default, runtimes = merged_runtime_config(source_files(path))
    data = desired(runtime_name, runtime_path, set_as_default, default, runtimes)
    if text is not None:
        current = containerd_config.plain(containerd_config.parse(text, path))
        if current == data:
            return text
    if not isinstance(runtime_path, str) or not runtime_path:
        raise ConfigFileError("runtime_path must not be empty")
    return render(data)
