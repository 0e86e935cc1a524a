#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_container_runtime_config
short_description: Manage nvidia-container-runtime's own configuration (mode, CDI annotation prefixes, low-level runtimes)
version_added: 1.0.0
description:
  - Edits C(/etc/nvidia-container-runtime/config.toml), the configuration of C(nvidia-container-runtime),
    C(nvidia-container-runtime-hook) and C(nvidia-container-cli), as C(nvidia-ctk config --in-place --set key=value)
    does, keeping the file's comments, order and formatting.
  - "Every setting is checked against the configuration of NVIDIA Container Toolkit 1.20 (its api/config/v1): a key
    the configuration does not have, or a value of the wrong type, fails the module with one line before anything is
    written. A setting the file has only as a commented default (C(#debug = ...), as the toolkit writes defaults) is
    set in place of that comment."
  - "Settings an older toolkit does not know (C(nvidia-container-runtime.mode = jit-cdi) before 1.18) are refused when
    the installed C(nvidia-ctk) reports an older version."
  - The file is only read by the runtime when it starts a container; no service needs a restart.
author:
  - kubegpu.nvidia maintainers (@kubegpu)
requirements:
  - tomlkit (Debian/Ubuntu package C(python3-tomlkit)) on the managed node.
attributes:
  check_mode:
    support: full
    description: Reports what would change (with the diff when asked) and writes nothing.
  diff_mode:
    support: full
    description: The file's text before and after.
  idempotent:
    support: full
    description: A second run with the same options reports no change.
options:
  path:
    description: The configuration file.
    type: path
    default: /etc/nvidia-container-runtime/config.toml
  mode:
    description:
      - C(nvidia-container-runtime.mode). V(auto) picks C(cdi) for CDI device requests, C(csv) on Tegra and C(jit-cdi)
        (C(legacy) before 1.18) otherwise; V(cdi) injects only CDI devices; V(legacy) uses the prestart hook and
        C(nvidia-container-cli); V(jit-cdi) (1.18 and newer) generates CDI specifications in memory.
      - Not set leaves the setting as it is.
    type: str
    choices: [auto, cdi, legacy, csv, jit-cdi]
  cdi_annotation_prefixes:
    description: C(nvidia-container-runtime.modes.cdi.annotation-prefixes), the annotation prefixes that request CDI devices.
    type: list
    elements: str
  cdi_default_kind:
    description: C(nvidia-container-runtime.modes.cdi.default-kind).
    type: str
  cdi_spec_dirs:
    description: C(nvidia-container-runtime.modes.cdi.spec-dirs).
    type: list
    elements: str
  runtimes:
    description: C(nvidia-container-runtime.runtimes), the low-level runtimes it hands containers to, the first found wins.
    type: list
    elements: str
  log_level:
    description: C(nvidia-container-runtime.log-level).
    type: str
    choices: [trace, debug, info, warning, error, fatal, panic]
  container_cli:
    description:
      - Settings of the C(nvidia-container-cli) table, by their names in the file (C(root), C(path), C(environment),
        C(debug), C(ldcache), C(load-kmods), C(no-pivot), C(no-cgroups), C(user), C(ldconfig)).
    type: dict
    default: {}
  settings:
    description:
      - Any other setting, as a dotted key of the file (what C(nvidia-ctk config --set) takes), for example
        C(nvidia-container-runtime.modes.legacy.cuda-compat-mode) or C(features.allow-ldconfig-from-container).
      - A value of C(null) removes the key (the runtime then uses its default).
    type: dict
    default: {}
  create:
    description: Create the file when it does not exist (with only the settings given); V(false) fails instead.
    type: bool
    default: true
  backup:
    description: Keep a timestamped copy of the file before changing it.
    type: bool
    default: false
  nvidia_ctk:
    description: The C(nvidia-ctk) whose version tells which settings the installed toolkit knows (skipped when absent).
    type: path
    default: /usr/bin/nvidia-ctk
seealso:
  - module: kubegpu.nvidia.container_runtime_nvidia
  - name: nvidia-container-runtime configuration
    description: NVIDIA's description of the modes and settings.
    link: https://github.com/NVIDIA/nvidia-container-toolkit/blob/main/cmd/nvidia-container-runtime/README.md
"""

EXAMPLES = r"""
- name: CDI mode, with the device plugin's annotation prefix
  kubegpu.nvidia.nvidia_container_runtime_config:
    mode: cdi
    cdi_annotation_prefixes: [cdi.k8s.io/, nvidia.cdi.k8s.io/]

- name: crun first, debug logs of nvidia-container-cli
  kubegpu.nvidia.nvidia_container_runtime_config:
    runtimes: [crun, runc]
    container_cli:
      debug: /var/log/nvidia-container-toolkit.log
    settings:
      nvidia-container-runtime.modes.legacy.cuda-compat-mode: hook
"""

RETURN = r"""
path:
  description: The file.
  returned: always
  type: str
settings:
  description: Every setting the module managed, as a dotted key, with its value after the run.
  returned: always
  type: dict
  sample: {"nvidia-container-runtime.mode": "cdi"}
backup_file:
  description: The backup made before the change.
  returned: when O(backup=true) and the file changed
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.common.text.converters import to_text

from ansible_collections.kubegpu.nvidia.plugins.module_utils import nvidia_runtime_config as rc
from ansible_collections.kubegpu.nvidia.plugins.module_utils.config_file import make_diff, read_text, write_file
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import run_module
from ansible_collections.kubegpu.nvidia.plugins.module_utils.toolkit_node import version_tuple

OPTION_KEYS = {
    "mode": "nvidia-container-runtime.mode",
    "cdi_annotation_prefixes": "nvidia-container-runtime.modes.cdi.annotation-prefixes",
    "cdi_default_kind": "nvidia-container-runtime.modes.cdi.default-kind",
    "cdi_spec_dirs": "nvidia-container-runtime.modes.cdi.spec-dirs",
    "runtimes": "nvidia-container-runtime.runtimes",
    "log_level": "nvidia-container-runtime.log-level",
}


def wanted_settings(params):
    """{dotted key: value} of every option given (O(settings) last, so the named options win)."""
    settings = dict(params["settings"] or {})
    for name, value in (params["container_cli"] or {}).items():
        settings["nvidia-container-cli.%s" % name] = value
    for option, key in OPTION_KEYS.items():
        if params[option] is not None:
            settings[key] = params[option]
    return settings


def installed_version(module):
    """(major, minor, patch) of the installed nvidia-ctk, or None when it is not installed (yet)."""
    path = module.params["nvidia_ctk"]
    if not os.path.exists(path):
        return None
    code, out, _err = module.run_command([path, "--version"])
    return version_tuple(out) if code == 0 else None


def run(module):
    params = module.params
    path = params["path"]
    settings = wanted_settings(params)
    if not settings:
        raise rc.RuntimeConfigError("no setting given: set mode, cdi_annotation_prefixes, runtimes, container_cli or settings")
    before = read_text(path)
    if before is None and not params["create"]:
        raise rc.RuntimeConfigError("%s does not exist (install the NVIDIA Container Toolkit, or create: true)" % path)
    after = rc.edit_text(before, path, settings, installed_version(module))
    changed = after != to_text(before or "") or before is None
    result = {"changed": changed, "path": path,
              "settings": dict((key, value) for key, value in sorted(settings.items()))}
    if changed and module._diff:
        result["diff"] = make_diff(path, before, after)
    if changed and not module.check_mode:
        backup = write_file(module, path, after, backup=params["backup"], mode=0o644)
        if backup:
            result["backup_file"] = backup
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default=rc.DEFAULT_PATH),
            mode=dict(type="str", choices=list(rc.MODES)),
            cdi_annotation_prefixes=dict(type="list", elements="str"),
            cdi_default_kind=dict(type="str"),
            cdi_spec_dirs=dict(type="list", elements="str"),
            runtimes=dict(type="list", elements="str"),
            log_level=dict(type="str", choices=list(rc.LOG_LEVELS)),
            container_cli=dict(type="dict", default={}),
            settings=dict(type="dict", default={}),
            create=dict(type="bool", default=True),
            backup=dict(type="bool", default=False),
            nvidia_ctk=dict(type="path", default="/usr/bin/nvidia-ctk"),
        ),
        supports_check_mode=True,
    )
    if not rc.HAS_TOMLKIT:
        module.fail_json(msg=missing_required_lib("tomlkit (python3-tomlkit)"), error_kind="dependency",
                         exception=str(rc.TOMLKIT_IMPORT_ERROR))
    run_module(module, run)


if __name__ == "__main__":
    main()
