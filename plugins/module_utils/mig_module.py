# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The work of ``nvidia_mig``: options, one NVML read, the plan, the apply (``mig_nvml``), the result.

``work(module, session=None, run_command=None)``: ``session(work)`` runs ``work(lib)`` in one bounded NVML session
(default ``gpu_discovery_nvml.run_nvml`` within ``nvml_timeout``); ``run_command(argv)`` -> ``(rc, out, err)``
(default the module's, with a missing command answering rc 127 instead of failing the module); ``which(name)``
finds a command (default the module's ``get_bin_path``).
A node already at its geometry costs one NVML session of reads and no write.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_config, mig_configs, mig_nvml, mig_plan
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError, KubegpuError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_common import SourceUnavailable
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_nvml import run_nvml

ARGUMENT_SPEC = dict(
    config=dict(type="str", required=True),
    configs=dict(type="raw"),
    configs_file=dict(type="path"),
    nvidia_smi=dict(type="str", default="nvidia-smi"),
    nvml_timeout=dict(type="int", default=60),
)


class MigModule(AnsibleModule):
    """``AnsibleModule`` with ``ARGUMENT_SPEC``; its own failures (wrong types, unknown options) are input errors."""

    def __init__(self):
        super(MigModule, self).__init__(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                                        mutually_exclusive=[("configs", "configs_file")])

    def fail_json(self, msg, **kwargs):  # pylint: disable=arguments-differ
        kwargs.setdefault("error_kind", "input")
        super(MigModule, self).fail_json(msg, **kwargs)


def load_configs(params):
    """The shipped configs with the user's (``configs`` or ``configs_file``) merged over them by name."""
    if params.get("configs_file"):
        path = params["configs_file"]
        try:
            with open(path) as handle:
                text = handle.read()
        except (IOError, OSError) as error:
            raise InputError("configs_file %s cannot be read: %s" % (path, error.strerror or error))
        return mig_configs.configs(text, "configs_file %s" % path)
    return mig_configs.configs(params.get("configs"), "configs")


def _command_runner(module):
    def run(argv):
        if not module.get_bin_path(argv[0]):
            return 127, "", "%s: command not found" % argv[0]
        return module.run_command(argv)
    return run


def _session(timeout):
    def session(work):
        try:
            return run_nvml(work, timeout=timeout, thread_name="nvml-mig")
        except SourceUnavailable as error:
            raise KubegpuError("MIG geometry: %s" % error, kind="dependency")
    return session


def _result(node_plan, module):
    changed_gpus = [p["index"] for p in node_plan["gpus"] if p["changed"]]
    result = {"changed": node_plan["changed"], "changed_gpus": changed_gpus,
              "reset_required": list(node_plan["reset_required"]), "reboot_required": False, "reboot_reason": None,
              "mig_devices": mig_plan.mig_devices(node_plan), "plan": node_plan}
    if module._diff:  # pylint: disable=protected-access
        result["diff"] = mig_plan.diff(node_plan)
    if node_plan.get("warnings"):
        result["warnings"] = list(node_plan["warnings"])
    return result


def work(module, session=None, run_command=None, which=None):
    params = module.params
    if params["nvml_timeout"] < 1:
        raise InputError("nvml_timeout must be at least 1 (seconds), got %d" % params["nvml_timeout"])
    configs = load_configs(params)
    mig_config.select(configs, params["config"])  # an unknown name fails before NVML is touched
    session = session or _session(params["nvml_timeout"])
    run_command = run_command or _command_runner(module)
    gpus = session(mig_nvml.read_gpus)
    node_plan = mig_plan.plan(gpus, configs, params["config"])
    result = _result(node_plan, module)
    if not node_plan["changed"] or module.check_mode:
        return result
    outcome = mig_nvml.apply(node_plan, gpus, session, run_command, configs, params["config"],
                             smi=params["nvidia_smi"], which=which or module.get_bin_path)
    result.update(changed=True, reboot_required=outcome["reboot_required"], reboot_reason=outcome["reboot_reason"],
                  reset=outcome["reset"])
    if outcome["reboot_required"]:
        gpus = ", ".join(str(i) for i in node_plan["reset_required"])
        result["msg"] = ("MIG mode change pending on GPU %s: the GPU reset was refused (%s); the node must reboot, "
                         "then apply again" % (gpus, outcome["reboot_reason"]))
        return result
    final = outcome["plan"]
    result["mig_devices"] = mig_plan.mig_devices(final)
    result["applied_plan"] = final
    return result
