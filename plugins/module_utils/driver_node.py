# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The read of ``nvidia_driver_info``: a node's driver packages, kernels, modules, Secure Boot and files.

One implementation for the module ``nvidia_driver_info`` and the ``driver`` entry of ``nvidia_gpu_facts``'
``gather_subset`` (``ansible_facts.nvidia_gpu.driver_state``): ``gather(module, params)`` reads with
``module.run_command`` and ``module.get_bin_path`` and the options ``params`` (``ARGUMENT_SPEC``, checked by
``check_params`` where they come as the facts module's ``driver_options``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.kubegpu.nvidia.plugins.module_utils import driver_packages as pkgs
from ansible_collections.kubegpu.nvidia.plugins.module_utils import driver_state
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError, KubegpuError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.secure_boot import efivars_state

ARGUMENT_SPEC = dict(
    packages=dict(type="list", elements="str", default=[]),
    available=dict(type="list", elements="str", default=[]),
    mok_certificate=dict(type="path", default="/var/lib/dkms/mok.pub"),
    read_files=dict(type="list", elements="path", default=[]),
    efivars_dir=dict(type="path", default=driver_state.EFIVARS),
)


def check_params(options):
    """``options`` (``nvidia_gpu_facts``' ``driver_options``) with the defaults filled in, or an InputError
    naming the first bad one."""
    checked = ArgumentSpecValidator(ARGUMENT_SPEC).validate(dict(options or {}))
    if checked.error_messages:
        raise InputError("driver_options: %s" % checked.error_messages[0])
    return checked.validated_parameters


MAX_FILE = 65536


def _run(module, argv):
    rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
    return rc, out, err


def last_line(rc, out, err):
    """The last line a failed command printed (its error, usually), or its return code."""
    lines = (err or out or "").strip().splitlines()
    return lines[-1].strip() if lines else "rc %d" % rc


def read_packages(module, family, packages):
    """(installed, held, hold_tool) for the package manager ``family``."""
    rc, out, err = _run(module, pkgs.installed_argv(family))
    if rc != 0:
        raise KubegpuError("listing the installed packages failed (%s): %s" % (
            " ".join(pkgs.installed_argv(family)[:2]), last_line(rc, out, err)))
    wanted = set(packages)
    installed = dict((name, version) for name, version in pkgs.parse_installed(out).items()
                     if name in wanted or pkgs.is_stack_name(name))
    rc, out, err = _run(module, pkgs.held_argv(family))
    hold_tool = rc == 0
    held = [name for name in pkgs.parse_held(family, out) if name in installed] if hold_tool else []
    return installed, held, hold_tool


def read_available(module, family, names):
    if not names:
        return {}
    rc, out, err = _run(module, pkgs.available_argv(family, names))
    if rc != 0 and not out:
        raise KubegpuError("listing the versions the repositories offer of %s failed: %s" % (
            ", ".join(names), last_line(rc, out, err)))
    return pkgs.parse_available(family, out)


def read_kernels(module):
    running = os.uname()[2]
    grubby = module.get_bin_path("grubby")
    default = None
    if grubby:
        rc, out, _err = _run(module, [grubby, "--default-kernel"])
        default = out.strip() if rc == 0 else None
    nxt, how = driver_state.next_kernel(running, grubby_default=default)
    dkms = None
    dkms_bin = module.get_bin_path("dkms")
    if dkms_bin:
        rc, out, _err = _run(module, [dkms_bin, "status"])
        dkms = driver_state.parse_dkms_status(out) if rc == 0 else {}
    modules = {}
    for kernel in sorted(set([running, nxt])):
        modules[kernel] = driver_state.kernel_module(kernel, dkms)
    return ({"running": running, "next": nxt, "next_source": how, "installed": driver_state.installed_kernels(),
             "dkms": dkms is not None}, modules)


def read_files(paths):
    found = {}
    for path in paths:
        try:
            with open(path, "rb") as handle:
                found[path] = handle.read(MAX_FILE).decode("utf-8", "replace")
        except (IOError, OSError):
            found[path] = None
    return found


def gather(module, params=None):
    """The driver state of the node (what ``nvidia_driver_info`` returns, without ``changed``) for the options
    ``params`` (the module's own by default)."""
    params = module.params if params is None else params
    family = None
    if module.get_bin_path("dpkg-query"):
        family = pkgs.APT
    elif module.get_bin_path("rpm") and module.get_bin_path("dnf"):
        family = pkgs.DNF
    installed, held, hold_tool, available = {}, [], False, {}
    if family:
        installed, held, hold_tool = read_packages(module, family, params["packages"])
        available = read_available(module, family, params["available"])
    kernel, modules = read_kernels(module)
    efivars = params["efivars_dir"]
    secure_boot, warnings = efivars_state(efivars)
    for warning in warnings:
        module.warn(warning)
    return dict(
        package_manager=family,
        installed=installed,
        held=held,
        hold_tool=hold_tool,
        available=available,
        kernel=kernel,
        modules=modules,
        loaded=driver_state.loaded_module(),
        secure_boot=secure_boot,
        mok=driver_state.mok_state(params["mok_certificate"], efivars),
        files=read_files(params["read_files"]),
    )


def state_for(state, options):
    """The driver state ``state`` (``nvidia_gpu_facts``' ``nvidia_gpu.driver_state``, with the ``options`` it was
    read with) without its ``options``, when it answers a read with ``options``; else None (read the node).

    It answers when it was read from the same EFI variables and MOK certificate, its files and offered versions
    include the ones asked for, and each package asked for was reported: named in its ``packages``, or a name of
    the driver stack, which every read reports.
    """
    if not isinstance(state, dict) or not isinstance(state.get("options"), dict):
        return None
    try:
        wanted = check_params(options)
        have = check_params(state["options"])
    except InputError:
        return None
    if wanted["efivars_dir"] != have["efivars_dir"] or wanted["mok_certificate"] != have["mok_certificate"]:
        return None
    if not set(wanted["read_files"]) <= set(have["read_files"]) or not set(wanted["available"]) <= set(have["available"]):
        return None
    if [name for name in wanted["packages"] if name not in have["packages"] and not pkgs.is_stack_name(name)]:
        return None
    return dict((key, value) for key, value in state.items() if key != "options")
