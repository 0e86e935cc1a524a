# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The driver role's decisions: module flavour, branch support, Secure Boot, holds, reboots, the summary.

``plan()`` runs before anything is installed and refuses, with one message, what cannot work: a
kernel module flavour that cannot drive a GPU found, a branch too old or too new for one, a held
package at another version than asked, Secure Boot without signed modules or a MOK key, a MOK key
without its certificate, module parameters that are not ``NVreg_*``. ``summary()`` runs at the end
and gives the summary's DRIVER column: the driver version and any of ``held``, the module flavour,
``reboot pending``, ``not built for the next kernel``, ``Secure Boot blocking``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.kubegpu.nvidia.plugins.module_utils import driver_packages as pkgs
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_architecture import (
    FLAVOURS,
    OPEN,
    OPEN_MODULES_FIRST_BRANCH,
    PROPRIETARY,
    classify,
    describe,
)

AUTO = "auto"
MODULE_TYPES = (AUTO, OPEN, PROPRIETARY)
PRECOMPILED_CHOICES = ("auto", "true", "false")
MODULE_PARAMETER = re.compile(r"^NVreg_[A-Za-z0-9_]+$")
MODULE_PARAMETER_VALUE = re.compile(r"^[A-Za-z0-9_.,:=/+-]+$")
MOK_DIR = "/var/lib/dkms"
MOK_KEY_PATH = MOK_DIR + "/mok.key"
MOK_CERT_PATH = MOK_DIR + "/mok.pub"


# ------------------------------------------------------------------ kernel module flavour
def choose_flavour(gpus, requested, default):
    """``(flavour, reason)`` for the GPUs ``classify`` returned; InputError when no flavour can drive them.

    ``requested``: ``auto`` (or empty), ``open`` or ``proprietary``; ``default``: the distribution's
    choice where the GPUs accept both.
    """
    requested = requested or AUTO
    if isinstance(requested, str):
        requested = requested.strip().lower()
    if requested not in MODULE_TYPES:
        raise InputError("nvidia_driver_kernel_module_type must be auto, open or proprietary (got %r)" % (requested,))
    open_only = [g for g in gpus if g["flavours"] == [OPEN]]
    proprietary_only = [g for g in gpus if g["flavours"] == [PROPRIETARY]]
    if open_only and proprietary_only:
        raise InputError(
            "no kernel module flavour drives every GPU of this node: %s needs the open modules and %s the "
            "proprietary ones; give such GPUs nodes of their own" % (describe(open_only[0]), describe(proprietary_only[0])))
    if requested != AUTO:
        for gpu in gpus:
            if requested not in gpu["flavours"]:
                raise InputError(
                    "nvidia_driver_kernel_module_type=%s cannot drive %s: it needs the %s kernel modules%s"
                    % (requested, describe(gpu), gpu["flavours"][0],
                       " (%s)" % "; ".join(gpu["notes"]) if gpu["notes"] else ""))
        return requested, "%s kernel modules, as nvidia_driver_kernel_module_type asks" % requested
    if open_only:
        return OPEN, "open kernel modules: %s is driven by them only" % describe(open_only[0])
    if proprietary_only:
        return PROPRIETARY, "proprietary kernel modules: %s is driven by them only" % describe(proprietary_only[0])
    if default not in FLAVOURS:
        raise InputError("the distribution's default kernel module flavour %r is neither open nor proprietary" % (default,))
    if gpus:
        return default, "%s kernel modules, the distribution's default (the GPUs take either)" % default
    return default, "%s kernel modules, the distribution's default (no GPU model known)" % default


def check_branch(gpus, branch, version=None, flavour=None):
    """InputError naming the GPU, the branch and the branch that would drive it, for the first GPU the
    branch (or exact version) cannot drive; None when every GPU is fine."""
    try:
        number = int(str(branch))
    except (TypeError, ValueError):
        raise InputError("driver branch %r is not a number" % (branch,))
    for gpu in gpus:
        first, last = gpu["first_branch"], gpu["last_branch"]
        if first is not None and number < first:
            lowest = "%d" % first if gpu["first_branch_known"] else (
                "at least %d (no source this collection cites gives %s's first branch; %d is the previous "
                "architecture's)" % (first, gpu["architecture"], first))
            raise InputError("driver branch %d cannot drive %s: the lowest branch that supports it is %s"
                             % (number, describe(gpu), lowest))
        if last is not None and number > last:
            raise InputError("driver branch %d cannot drive %s: the last branch that supports it is %d"
                             % (number, describe(gpu), last))
        wanted = pkgs.version_key(version)
        minimum = pkgs.version_key(gpu["first_version"])
        if wanted and minimum and wanted < minimum:
            raise InputError("driver %s cannot drive %s: %s" % (version, describe(gpu), "; ".join(gpu["notes"])))
    if flavour == OPEN and number < OPEN_MODULES_FIRST_BRANCH:
        raise InputError("driver branch %d has no open kernel modules (they start with branch %d)"
                         % (number, OPEN_MODULES_FIRST_BRANCH))
    return None


# ------------------------------------------------------------------ module parameters
def modprobe_options(parameters):
    """The ``/etc/modprobe.d`` file for the ``NVreg_*`` parameters (a dict), or "" for none."""
    if not parameters:
        return ""
    if not isinstance(parameters, dict):
        raise InputError("nvidia_driver_module_parameters must be a mapping of NVreg_* names to values")
    options = []
    for name in sorted(parameters):
        value = parameters[name]
        if not MODULE_PARAMETER.match(str(name)):
            raise InputError("nvidia_driver_module_parameters: %r is not an NVreg_* parameter of the nvidia module" % (name,))
        if isinstance(value, bool):
            value = int(value)
        if value is None or not MODULE_PARAMETER_VALUE.match(str(value)):
            raise InputError("nvidia_driver_module_parameters: %s=%r is not a value modprobe takes (a number or a "
                             "word without spaces)" % (name, value))
        options.append("%s=%s" % (name, value))
    return ("# Managed by kubegpu.nvidia.nvidia_driver (nvidia_driver_module_parameters).\n"
            "options nvidia %s\n" % " ".join(options))


# ------------------------------------------------------------------ Secure Boot and MOK
def _pem_kind(value):
    """``"key"``, ``"certificate"`` or None for PEM text; ``"der"`` for a DER certificate's bytes."""
    if isinstance(value, bytes):
        if value[:1] == b"\x30":
            return "der"
        value = value.decode("ascii", "replace")
    if "PRIVATE KEY-----" in value:
        return "key"
    if "BEGIN CERTIFICATE-----" in value:
        return "certificate"
    return None


def check_mok(key, cert, path_exists=os.path.isfile, read=None):
    """``(key_given, cert_given)`` as ``"path"``/``"content"``/None; InputError for a MOK pair that cannot work.

    Each of ``key`` and ``cert`` is a path on the controller (a file, which ansible-vault may have
    encrypted) or the PEM text itself. ``read(path)`` returns a file's first bytes (to check plain files).
    """
    kinds = []
    for label, value, wanted in (("nvidia_driver_mok_key", key, "key"), ("nvidia_driver_mok_cert", cert, "certificate")):
        if not value:
            kinds.append(None)
            continue
        if not isinstance(value, str):
            raise InputError("%s must be a path on the controller or the PEM text itself" % label)
        if "-----BEGIN" in value:
            if _pem_kind(value) != wanted:
                what = "private key" if wanted == "key" else "certificate"
                raise InputError("%s holds PEM text that is not a %s" % (label, what))
            kinds.append("content")
            continue
        if not path_exists(value):
            raise InputError("%s: %s does not exist on the controller" % (label, value))
        head = read(value) if read else None
        if head is not None and not head.startswith(b"$ANSIBLE_VAULT"):
            kind = _pem_kind(head)
            if wanted == "key" and kind != "key":
                raise InputError("%s: %s is not a PEM private key" % (label, value))
            if wanted == "certificate" and kind not in ("certificate", "der"):
                raise InputError("%s: %s is not a certificate (PEM or DER)" % (label, value))
        kinds.append("path")
    if kinds[0] and not kinds[1]:
        raise InputError("nvidia_driver_mok_key is set without nvidia_driver_mok_cert: DKMS signs the module with the "
                         "key, and the certificate is what the node's firmware must have enrolled; give both")
    if kinds[1] and not kinds[0]:
        raise InputError("nvidia_driver_mok_cert is set without nvidia_driver_mok_key: DKMS needs the private key to "
                         "sign the module; give both")
    return kinds[0], kinds[1]


def _read_head(path, size=64):
    try:
        with open(path, "rb") as handle:
            return handle.read(size)
    except (IOError, OSError):
        return None


def secure_boot_of(facts_state, node_state):
    """The Secure Boot state to act on: the node's own reading of the EFI variables where it found them,
    else the facts' (``nvidia_gpu.secure_boot``)."""
    node_state = node_state or {}
    if node_state.get("source"):
        return dict(node_state)
    facts_state = facts_state or {}
    return {"enabled": facts_state.get("enabled"), "setup_mode": facts_state.get("setup_mode"),
            "source": facts_state.get("source")}


def choose_module_source(secure_boot, precompiled, offered, mok_given, distribution, install=True):
    """``(precompiled, sign, reason)``: whether to install precompiled modules and whether DKMS signs with the MOK.

    ``precompiled``: ``auto``, ``true`` or ``false``; ``offered``: whether the distribution ships signed
    precompiled modules for this source and flavour. ``install``: whether the role installs the driver
    in this run (Secure Boot without a way to sign refuses only then).
    """
    precompiled = str(precompiled).lower() if precompiled is not None else "auto"
    precompiled = {"yes": "true", "on": "true", "1": "true", "no": "false", "off": "false", "0": "false"}.get(
        precompiled, precompiled)
    if precompiled not in PRECOMPILED_CHOICES:
        raise InputError("nvidia_driver_precompiled must be auto, true or false (got %r)" % (precompiled,))
    enabled = bool(secure_boot.get("enabled"))
    state = "on" if enabled else "off" if secure_boot.get("enabled") is False else "not known"
    if precompiled == "true":
        if not offered:
            raise InputError("nvidia_driver_precompiled is true but %s ships no precompiled NVIDIA modules for this "
                             "source and kernel module flavour" % distribution)
        return True, False, "precompiled modules, as nvidia_driver_precompiled asks"
    if precompiled == "auto" and enabled and offered:
        return True, False, "Secure Boot is on: the distribution's signed precompiled modules"
    if mok_given:
        return False, True, "DKMS builds the module and signs it with the MOK key (Secure Boot is %s)" % state
    if enabled and install:
        raise InputError(
            "Secure Boot is on and the NVIDIA module would be built by DKMS unsigned on %s: give nvidia_driver_mok_key "
            "and nvidia_driver_mok_cert (a Machine Owner Key whose certificate the firmware has enrolled, or will) so "
            "that DKMS signs it%s" % (distribution, ", or leave nvidia_driver_precompiled at auto for the "
                                      "distribution's signed precompiled modules" if offered else ""))
    return False, False, "DKMS builds the module (Secure Boot is %s)" % state


def needs_install(gpu_facts, state, version, branch, flavour, explicit=False):
    """``(install, reason)``: whether the wanted driver still has to be installed or loaded.

    It has not when the facts show GPUs running exactly ``version`` (else any version of ``branch``),
    with the wanted flavour where ``explicit`` and the loaded module tells its flavour.
    """
    loaded = gpu_facts.get("driver_version")
    wanted = version or "branch %s" % branch
    if not gpu_facts.get("present") or not gpu_facts.get("count"):
        return True, "no GPU with a driver is seen (wanted: %s)" % wanted
    if not loaded:
        return True, "no NVIDIA driver is loaded (wanted: %s)" % wanted
    if (version and loaded != version) or (not version and pkgs.branch_of(loaded) != str(branch)):
        return True, "driver %s is loaded, %s is wanted" % (loaded, wanted)
    loaded_flavour = ((state or {}).get("loaded") or {}).get("flavour")
    if explicit and loaded_flavour and loaded_flavour != flavour:
        return True, "driver %s is loaded with the %s kernel modules, %s ones are wanted" % (loaded, loaded_flavour, flavour)
    return False, "driver %s is loaded (wanted: %s)" % (loaded, wanted)


# ------------------------------------------------------------------ the plan
def plan(gpu_facts, settings):
    """Everything the role decides before it installs anything, or ``error`` (one message) when it must not.

    ``gpu_facts``: ``ansible_facts.nvidia_gpu``. ``settings`` (all optional):

    ``kernel_module_type``, ``default_flavour``, ``branch``, ``version``, ``distribution``,
    ``precompiled`` (auto|true|false), ``precompiled_offered`` (the flavours the distribution ships signed
    precompiled modules of), ``mok_key``,
    ``mok_cert``, ``module_parameters``, ``packages`` (the driver's packages the role installs),
    ``state`` (``nvidia_driver_info``'s result), ``install``
    (overrides ``needs_install``), ``check_files`` (False: do not look at the controller's files, for tests).
    """
    try:
        return _plan(gpu_facts or {}, settings or {})
    except InputError as exc:
        return {"error": exc.msg}


def _plan(gpu_facts, settings):
    gpus = classify(gpu_facts.get("devices") or [])
    flavour, flavour_reason = choose_flavour(gpus, settings.get("kernel_module_type"), settings.get("default_flavour"))
    version = settings.get("version") or None
    branch = str(settings.get("branch") or pkgs.branch_of(version) or "")
    if version and pkgs.version_key(version) is None:
        raise InputError("nvidia_driver_version %r is not a driver version such as 570.195.03" % (version,))
    check_branch(gpus, branch, version, flavour)

    state = settings.get("state") or {}
    install, install_reason = needs_install(gpu_facts, state, version, branch, flavour,
                                            explicit=(settings.get("kernel_module_type") or AUTO) != AUTO)
    if "install" in settings:
        install = bool(settings["install"])
    installed = state.get("installed") or {}
    held = state.get("held") or []
    conflicts = pkgs.held_at_other_version(installed, held, settings.get("packages") or [], version=version,
                                           branch=branch)
    if conflicts:
        name, at = conflicts[0]
        raise InputError(
            "%s is held at %s but %s is asked%s: upgrade with kubegpu.nvidia.upgrade_driver (it releases and re-takes "
            "the hold), or release the hold (%s) first"
            % (name, at, ("driver %s" % version) if version else ("branch %s" % branch),
               " (%d held package(s) of the driver in all)" % len(conflicts) if len(conflicts) > 1 else "",
               "apt-mark unhold" if state.get("package_manager") == pkgs.APT else "dnf versionlock delete"))

    modprobe = modprobe_options(settings.get("module_parameters"))
    check_files = settings.get("check_files", True)
    key_kind, cert_kind = check_mok(settings.get("mok_key"), settings.get("mok_cert"),
                                    path_exists=os.path.isfile if check_files else (lambda path: True),
                                    read=_read_head if check_files else None)
    secure_boot = secure_boot_of(gpu_facts.get("secure_boot"), state.get("secure_boot"))
    offered = flavour in (settings.get("precompiled_offered") or [])
    precompiled, sign, module_reason = choose_module_source(
        secure_boot, settings.get("precompiled"), offered, bool(key_kind), settings.get("distribution") or "this system",
        install=install)
    return {
        "error": "",
        "install": install,
        "install_reason": install_reason,
        "gpus": gpus,
        "flavour": flavour,
        "flavour_reason": flavour_reason,
        "branch": branch,
        "version": version,
        "precompiled": precompiled,
        "sign": sign,
        "module_reason": module_reason,
        "mok": {"key": key_kind, "cert": cert_kind, "key_path": MOK_KEY_PATH, "cert_path": MOK_CERT_PATH},
        "secure_boot": secure_boot,
        "modprobe_conf": modprobe,
    }


# ------------------------------------------------------------------ the exact version
def resolve_version(available, names, branch, version=None):
    """``{"version", "error", "apt_preferences"}``: the one driver version every package of ``names`` is
    installed at, and the apt_preferences(5) file that pins the driver stack to it.

    ``version`` given: every package must be offered at it. Else the newest version of ``branch`` that
    every package is offered at: the driver's packages and Fabric Manager never end up at two versions
    because a mirror has one of them newer than the other.
    """
    names = [name for name in names or [] if name]
    if not names:
        return {"version": version or None, "error": "",
                "apt_preferences": pkgs.apt_preferences(version) if version else ""}
    available = available or {}

    def offered(name):
        found = sorted(set(pkgs.upstream_version(v) for v in available.get(name) or [] if pkgs.version_key(
            pkgs.upstream_version(v))), key=pkgs.version_key)
        return ", ".join(found[-5:]) or "none"

    if version:
        missing = [name for name in names if version not in
                   [pkgs.upstream_version(v) for v in available.get(name) or []]]
        if missing:
            return {"version": None, "error": "driver %s is not offered for %s (offered: %s)" % (
                version, ", ".join(missing), "; ".join("%s: %s" % (name, offered(name)) for name in missing))}
        return {"version": version, "error": "", "apt_preferences": pkgs.apt_preferences(version)}
    common = pkgs.common_version(available, names, branch)
    if not common:
        return {"version": None, "error": "no version of branch %s is offered for all of %s (offered: %s); the driver "
                                          "and Fabric Manager must be at one version" % (
                                              branch, ", ".join(names),
                                              "; ".join("%s: %s" % (name, offered(name)) for name in names))}
    return {"version": common, "error": "", "apt_preferences": pkgs.apt_preferences(common)}


# ------------------------------------------------------------------ holds
def hold_check(state, names, version=None, unattended_upgrades=True):
    """``{"stack", "held", "needed"}``: the driver's packages on the node, whether all of them are held (and kept out
    of unattended-upgrades), and whether ``nvidia_driver_hold`` has anything to do (a package to hold, a hold left
    from another driver version to release, the blacklist drop-in to write).

    ``state``: ``nvidia_driver_info``'s result, with the drop-in among its ``files``; ``version``: the driver version
    (empty: that of the first of ``names`` installed).
    """
    state = state or {}
    installed = state.get("installed") or {}
    held = set(state.get("held") or [])
    names = [name for name in names or [] if name in installed]
    version = version or (pkgs.upstream_version(installed[names[0]]) if names else None)
    stack = pkgs.driver_stack(installed, version, names)
    stale = pkgs.stale_holds(installed, held, stack, version)
    all_held = bool(stack) and set(stack) <= held
    conf_ok = True
    if state.get("package_manager") == pkgs.APT:
        wanted = pkgs.unattended_upgrades_conf(stack) if unattended_upgrades and stack else None
        conf_ok = (state.get("files") or {}).get(pkgs.UNATTENDED_UPGRADES_CONF) == wanted
    return {"stack": stack, "held": all_held, "needed": bool(stack) and not (all_held and conf_ok and not stale)}


# ------------------------------------------------------------------ after the installation
def installed_driver_version(state, names):
    """The upstream version of the first of ``names`` installed, else of any installed driver-stack package."""
    installed = (state or {}).get("installed") or {}
    for name in names or []:
        if name in installed:
            return pkgs.upstream_version(installed[name])
    return None


def next_kernel_status(state):
    """``{"kernel", "running", "built", "version", "how"}`` for the kernel that boots next, from ``nvidia_driver_info``."""
    kernel = (state or {}).get("kernel") or {}
    nxt = kernel.get("next")
    module = ((state or {}).get("modules") or {}).get(nxt) or {}
    return {"kernel": nxt, "running": kernel.get("running"), "how": kernel.get("next_source"),
            "built": module.get("built"), "version": module.get("version")}


def secure_boot_blocker(plan_, state):
    """What keeps a signed module from loading under Secure Boot, or "" when nothing does."""
    secure_boot = (plan_ or {}).get("secure_boot") or {}
    if not secure_boot.get("enabled") or not (plan_ or {}).get("sign"):
        return ""
    mok = (state or {}).get("mok") or {}
    if mok.get("enrolled"):
        return ""
    cert = mok.get("certificate") or MOK_CERT_PATH
    if mok.get("pending"):
        return ("Secure Boot is on and the MOK certificate %s waits for enrollment: confirm it in MOK Manager at the "
                "node's console during the next boot, then run the role again" % cert)
    if mok.get("format") == "pem":
        der = re.sub(r"(\.[A-Za-z]+)?$", ".der", cert, count=1)
        command = "'openssl x509 -in %s -outform DER -out %s && mokutil --import %s'" % (cert, der, der)
    else:
        command = "'mokutil --import %s'" % cert
    return ("Secure Boot is on and the MOK certificate %s that signs the module is not enrolled: run %s on the node, "
            "reboot it at its console and enroll the key in MOK Manager, then run the role again" % (cert, command))


MODULE_PACKAGE = re.compile(r"dkms|kernel|linux-modules-nvidia|^nvidia-driver-|^cuda-drivers|^nvidia-open|headless")


def installed_flavour(state, version):
    """The kernel module flavour of the driver packages installed at ``version``, or None when none tells."""
    installed = (state or {}).get("installed") or {}
    names = [name for name, package_version in installed.items()
             if pkgs.is_stack_name(name) and MODULE_PACKAGE.search(name)
             and (not version or pkgs.upstream_version(package_version) == version)]
    if any("open" in name for name in names):
        return "open"
    return "proprietary" if names else None


def summary(version, plan_, state, reboot_pending=False, check_next_kernel=True, held=None, loaded_flavour=None):
    """The driver's state for the summary: ``{"text", "version", "held", "flavour", "reboot_pending",
    "next_kernel", "not_built_for_next_kernel", "secure_boot_blocking", "reboot_blockers"}``.

    ``text`` is the DRIVER column: ``535.183.01, held, open, reboot pending``.
    """
    plan_ = plan_ or {}
    state = state or {}
    nxt = next_kernel_status(state)
    not_built = bool(check_next_kernel and nxt["kernel"] and nxt["built"] is False)
    stale = bool(check_next_kernel and nxt["built"] and nxt["version"] and version and nxt["version"] != version)
    blocking = secure_boot_blocker(plan_, state)
    # the loaded module's, else the installed packages': not a guess where neither tells (a driver installed otherwise)
    flavour = loaded_flavour or ((state.get("loaded") or {}).get("flavour")) or installed_flavour(state, version)
    held = bool(held) if held is not None else False
    parts = [version or "none"]
    if held:
        parts.append("held")
    if flavour:
        parts.append(flavour)
    if reboot_pending:
        parts.append("reboot pending")
    if not_built or stale:
        parts.append("not built for the next kernel")
    if blocking:
        parts.append("Secure Boot blocking")
    blockers = []
    if not_built:
        blockers.append("the nvidia module is not built for kernel %s, which boots next (%s)" % (nxt["kernel"], nxt["how"]))
    elif stale:
        blockers.append("the nvidia module built for kernel %s, which boots next, is %s, not %s"
                        % (nxt["kernel"], nxt["version"], version))
    if blocking:
        blockers.append(blocking)
    return {
        "text": ", ".join(parts),
        "version": version,
        "held": held,
        "flavour": flavour,
        "reboot_pending": bool(reboot_pending),
        "next_kernel": nxt,
        "not_built_for_next_kernel": not_built or stale,
        "secure_boot_blocking": bool(blocking),
        "reboot_blockers": blockers,
    }
