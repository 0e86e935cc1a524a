# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The boot-time apply of a node's declared MIG geometry (``kubegpu-mig.service`` of the role ``nvidia_mig``).

GPU and compute instances do not survive a reboot (NVIDIA/mig-parted ``deployments/systemd/`` re-applies its
config at boot for the same reason). The role copies this package's MIG code to ``/usr/local/lib/kubegpu`` and
writes the node's declaration to ``DECLARATION`` (JSON: ``config``, ``configs``, ``nvidia_smi``); the unit runs
``python3 -m ansible_collections.kubegpu.nvidia.plugins.module_utils.mig_boot`` before the container runtime and
the kubelet. ``main()`` reads, plans and applies with the module's own code (``mig_plan``, ``mig_nvml``): one
implementation. It needs no Ansible. Exit status 0 with one line saying what was done, 1 with one line saying why not.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import subprocess
import sys

from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_config, mig_configs, mig_nvml, mig_plan
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import KubegpuError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_common import SourceUnavailable
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_nvml import run_nvml

DECLARATION = "/etc/kubegpu/mig.yaml"
# what the role copies next to this file (with the package's __init__.py files)
MODULE_UTILS = ("errors", "gfd_labels", "gpu_discovery_common", "gpu_discovery_nvml", "mig_boot", "mig_config",
                "mig_configs", "mig_nvml", "mig_plan")


def read_declaration(path=DECLARATION):
    """``(config name, user configs or None, nvidia-smi)`` from the role's file; KubegpuError when unusable."""
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (IOError, OSError) as error:
        raise KubegpuError("%s cannot be read: %s" % (path, error.strerror or error), kind="input")
    except ValueError as error:
        raise KubegpuError("%s is not the JSON the role nvidia_mig writes: %s" % (path, error), kind="input")
    if not isinstance(data, dict) or not isinstance(data.get("config"), str) or not data["config"]:
        raise KubegpuError("%s names no MIG config (key config)" % path, kind="input")
    return data["config"], data.get("configs") or None, data.get("nvidia_smi") or "nvidia-smi"


def run_command(argv):
    """``(rc, out, err)``; rc 127 when the command does not exist."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as error:
        return 127, "", "%s: %s" % (argv[0], error.strerror or error)
    out, err = proc.communicate()
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def _session(timeout):
    def session(work):
        try:
            return run_nvml(work, timeout=timeout, thread_name="nvml-mig-boot")
        except SourceUnavailable as error:
            raise KubegpuError("MIG geometry: %s" % error, kind="dependency")
    return session


def apply_declared(path=DECLARATION, session=None, command=None, timeout=120):
    """Apply the declared config; one line saying what was done. Raises KubegpuError (one line) when it cannot."""
    name, user, smi = read_declaration(path)
    configs = mig_configs.configs(user, "%s configs" % path)
    mig_config.select(configs, name)
    session = session or _session(timeout)
    command = command or run_command
    gpus = session(mig_nvml.read_gpus)
    node_plan = mig_plan.plan(gpus, configs, name)
    if not node_plan["changed"]:
        return "MIG config %s: every GPU already at its geometry" % name
    outcome = mig_nvml.apply(node_plan, gpus, session, command, configs, name, smi=smi)
    if outcome["reboot_required"]:
        raise KubegpuError("MIG config %s: a GPU reset was refused (%s); the node must reboot"
                           % (name, outcome["reboot_reason"]), kind="runtime")
    changed = [str(p["index"]) for p in node_plan["gpus"] if p["changed"]]
    return "MIG config %s applied on GPU %s" % (name, ", ".join(changed))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    path = argv[0] if argv else DECLARATION
    # the entry point of kubegpu-mig.service, run by systemd and not by Ansible: it reports on its output (the
    # unit's journal) and by its exit status
    try:
        print(apply_declared(path))  # pylint: disable=ansible-bad-function
    except KubegpuError as error:
        print("kubegpu-mig: %s" % error, file=sys.stderr)  # pylint: disable=ansible-bad-function
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())  # pylint: disable=ansible-bad-function
