#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_container_toolkit_cdi
short_description: Keep the node's CDI specification of its NVIDIA GPUs current
version_added: 1.0.0
description:
  - "With NVIDIA Container Toolkit 1.18 or newer, which ships the systemd units C(nvidia-cdi-refresh.path) and
    C(nvidia-cdi-refresh.service): enables and starts the path unit, which regenerates the specification
    (C(/var/run/cdi/nvidia.yaml)) whenever a kernel module is installed (a driver install or upgrade) or
    C(nvidia-ctk) changes, and runs the service once when the specification is missing or O(regenerate=true)."
  - "With an older toolkit: runs C(nvidia-ctk cdi generate) and writes its output to O(spec_path) atomically when the
    file is missing, does not name the loaded driver (O(driver_version)), or O(regenerate=true), and only when the
    content differs (so the file does not change on every run)."
author:
  - kubegpu.nvidia maintainers (@kubegpu)
attributes:
  check_mode:
    support: full
    description: Reports what would be enabled, started or written (running C(nvidia-ctk cdi generate) to its output only).
  diff_mode:
    support: full
    description: The specification's text before and after, in the C(generate) mode.
  idempotent:
    support: full
    description: A second run changes nothing.
options:
  mode:
    description:
      - V(auto) uses the toolkit's C(nvidia-cdi-refresh) units where the node has them, else V(generate).
      - V(refresh) requires the units; V(generate) always writes O(spec_path) with C(nvidia-ctk cdi generate).
    type: str
    choices: [auto, refresh, generate]
    default: auto
  spec_path:
    description: Where the V(generate) mode writes the specification.
    type: path
    default: /etc/cdi/nvidia.yaml
  driver_version:
    description: The loaded driver version; a specification that does not name it is generated again.
    type: str
    default: ""
  regenerate:
    description: Generate the specification even when it looks current (for example after a toolkit upgrade).
    type: bool
    default: false
  nvidia_ctk:
    description: The C(nvidia-ctk) binary.
    type: path
    default: /usr/bin/nvidia-ctk
  backup:
    description: Keep a timestamped copy of O(spec_path) before replacing it.
    type: bool
    default: false
notes:
  - C(nvidia-cdi-refresh.service) of NVIDIA's packages runs only where C(nvidia-smi) and the nvidia kernel module
    exist; where it wrote nothing, the module warns instead of failing.
"""

EXAMPLES = r"""
- name: Keep the CDI specification current
  kubegpu.nvidia.nvidia_container_toolkit_cdi:
    driver_version: "{{ ansible_facts.nvidia_gpu.driver_version }}"
"""

RETURN = r"""
mode:
  description: The mode used, V(refresh) or V(generate).
  returned: always
  type: str
spec_path:
  description: The specification the mode keeps (C(/var/run/cdi/nvidia.yaml) for V(refresh)).
  returned: always
  type: str
actions:
  description: What was (or, in check mode, would be) done, in order.
  returned: always
  type: list
  elements: str
  sample: ["systemctl enable nvidia-cdi-refresh.path", "systemctl start nvidia-cdi-refresh.path"]
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_text

from ansible_collections.kubegpu.nvidia.plugins.module_utils import toolkit_node as node
from ansible_collections.kubegpu.nvidia.plugins.module_utils.config_file import make_diff, read_text, write_file
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import KubegpuError, run_module

UNIT_DIRS = ("/etc/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system")


def systemctl(module, *args):
    rc, out, err = module.run_command(["systemctl"] + list(args))
    if rc != 0:
        raise KubegpuError("systemctl %s failed (rc %d): %s" % (" ".join(args), rc, (err or out).strip() or "no output"),
                           rc=rc, stdout=out, stderr=err)
    return out


def unit_state(module, unit):
    out = systemctl(module, "show", "--property=LoadState,ActiveState,UnitFileState", "--", unit)
    return node.parse_unit_states(out, [unit])[unit]


def refresh(module, result):
    params = module.params
    state = unit_state(module, node.CDI_REFRESH_PATH)
    if state.get("LoadState") == "not-found" and any(
            os.path.exists(os.path.join(d, node.CDI_REFRESH_PATH)) for d in UNIT_DIRS):
        # installed since systemd last looked
        result["actions"].append("systemctl daemon-reload")
        if not module.check_mode:
            systemctl(module, "daemon-reload")
            state = unit_state(module, node.CDI_REFRESH_PATH)
    if state.get("LoadState") == "not-found" and not module.check_mode:
        raise KubegpuError("%s is not installed: the NVIDIA Container Toolkit ships it from 1.18 on (mode=refresh)"
                           % node.CDI_REFRESH_PATH)
    if state.get("UnitFileState") not in ("enabled", "static"):
        result["actions"].append("systemctl enable %s" % node.CDI_REFRESH_PATH)
    if state.get("ActiveState") != "active":
        result["actions"].append("systemctl start %s" % node.CDI_REFRESH_PATH)
    if params["regenerate"] or not os.path.exists(node.CDI_REFRESH_OUTPUT):
        result["actions"].append("systemctl start %s" % node.CDI_REFRESH_SERVICE)
    if module.check_mode:
        return
    for action in result["actions"]:
        if action.startswith("systemctl ") and action != "systemctl daemon-reload":
            systemctl(module, *action.split()[1:])
    if result["actions"] and result["actions"][-1].endswith(node.CDI_REFRESH_SERVICE) and not os.path.exists(node.CDI_REFRESH_OUTPUT):
        module.warn("%s ran but wrote no %s (NVIDIA's unit runs only where nvidia-smi and the nvidia kernel module exist)"
                    % (node.CDI_REFRESH_SERVICE, node.CDI_REFRESH_OUTPUT))


def generate(module, result):
    params = module.params
    path = params["spec_path"]
    before = read_text(path)
    stale = before is None or params["regenerate"] or (params["driver_version"] and params["driver_version"] not in before)
    if not stale:
        return
    rc, out, err = module.run_command([params["nvidia_ctk"], "cdi", "generate"])
    if rc != 0:
        raise KubegpuError("nvidia-ctk cdi generate failed (rc %d): %s" % (rc, (err or out).strip() or "no output"),
                           rc=rc, stdout=out, stderr=err)
    after = to_text(out)
    if not after.endswith("\n"):
        after += "\n"
    if after == before:
        return
    result["actions"].append("write %s" % path)
    if module._diff:
        result["diff"] = make_diff(path, before, after)
    if not module.check_mode:
        backup = write_file(module, path, after, backup=params["backup"], mode=0o644)
        if backup:
            result["backup_file"] = backup


def run(module):
    params = module.params
    result = {"actions": [], "changed": False}
    if not os.path.exists(params["nvidia_ctk"]):
        if module.check_mode:
            # the toolkit is installed by this same run
            result.update(changed=True, mode=params["mode"], spec_path=params["spec_path"],
                          actions=["set up once %s is installed" % params["nvidia_ctk"]])
            return result
        raise KubegpuError("%s is not installed: install the NVIDIA Container Toolkit first" % params["nvidia_ctk"])
    mode = params["mode"]
    if mode == "auto":
        state = unit_state(module, node.CDI_REFRESH_PATH)
        has_unit = state.get("LoadState") != "not-found" or any(
            os.path.exists(os.path.join(d, node.CDI_REFRESH_PATH)) for d in UNIT_DIRS)
        mode = "refresh" if has_unit else "generate"
    result["mode"] = mode
    if mode == "refresh":
        result["spec_path"] = node.CDI_REFRESH_OUTPUT
        refresh(module, result)
    else:
        result["spec_path"] = params["spec_path"]
        generate(module, result)
    result["changed"] = bool(result["actions"])
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            mode=dict(type="str", default="auto", choices=["auto", "refresh", "generate"]),
            spec_path=dict(type="path", default="/etc/cdi/nvidia.yaml"),
            driver_version=dict(type="str", default=""),
            regenerate=dict(type="bool", default=False),
            nvidia_ctk=dict(type="path", default="/usr/bin/nvidia-ctk"),
            backup=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    run_module(module, run)


if __name__ == "__main__":
    main()
