# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The machine's UEFI Secure Boot state, as ``nvidia_gpu.secure_boot``.

``{"enabled": bool|None, "setup_mode": bool|None, "source": "efivars"|"mokutil"|None}``, read from,
in order:

1. the EFI variables ``SecureBoot`` and ``SetupMode`` (EFI global variable GUID) in efivarfs,
   ``<efi>/efivars/<name>-<guid>``: 4 bytes of attributes, then the 1-byte value; or in the older
   sysfs interface ``<efi>/vars/<name>-<guid>/data`` (the value alone). An EFI variable folder that
   can be read but holds no ``SecureBoot`` variable: firmware without Secure Boot (``enabled: false``);
   an empty one is efivarfs not mounted there, and the next source is asked;
2. ``mokutil --sb-state``, when the variables cannot be read directly and mokutil is installed;
3. nothing: ``None`` values. A machine booted without UEFI (legacy BIOS) has no ``<efi>`` folder, and a
   container usually does not see it: neither can tell.

The facts (``secure_boot_state``) ask every source; the driver role's node read (module
``nvidia_driver_info``, ``efivars_state``) reads the efivarfs folder it is given, where it also reads
shim's MOK list (module_utils/driver_state.py).

Kernel module loading is refused for unsigned modules when Secure Boot is enabled and the platform is
not in setup mode (in setup mode no platform key is enrolled and nothing is enforced).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os

from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_common import (
    CommandTimeout,
    TextDecoder,
)

EFI_ROOT = "/sys/firmware/efi"
EFI_GLOBAL_GUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
SOURCES = ("efivars", "mokutil")
_ATTRIBUTES_SIZE = 4


def unknown():
    """The state when no source can tell."""
    return {"enabled": None, "setup_mode": None, "source": None}


class _Unreadable(Exception):
    """An EFI variable exists but cannot be read or has no value byte."""


def _flag(value):
    return None if value is None else value != 0


def _read_efivarfs(folder, name):
    """The value byte of an efivarfs variable; None when it does not exist."""
    path = os.path.join(folder, "%s-%s" % (name, EFI_GLOBAL_GUID))
    try:
        with open(path, "rb") as handle:
            data = handle.read(_ATTRIBUTES_SIZE + 1)
    except (IOError, OSError) as error:
        if error.errno == errno.ENOENT:
            return None
        raise _Unreadable("%s: %s" % (path, error.strerror or error))
    if len(data) < _ATTRIBUTES_SIZE + 1:
        raise _Unreadable("%s: %d bytes, expected the 4 attribute bytes and a value" % (path, len(data)))
    return bytearray(data)[_ATTRIBUTES_SIZE]


def _read_sysfs_vars(folder, name):
    """The value byte of a variable of the older sysfs interface (``<name>-<guid>/data``); None when absent."""
    path = os.path.join(folder, "%s-%s" % (name, EFI_GLOBAL_GUID), "data")
    try:
        with open(path, "rb") as handle:
            data = handle.read(1)
    except (IOError, OSError) as error:
        if error.errno == errno.ENOENT:
            return None
        raise _Unreadable("%s: %s" % (path, error.strerror or error))
    if not data:
        raise _Unreadable("%s: empty" % path)
    return bytearray(data)[0]


def _from_variables(folder, reader):
    """The state from one EFI variable folder; None when the folder cannot be listed or is empty.

    UEFI firmware always has variables (boot order, language): an empty folder is efivarfs not mounted
    at its mount point, which says nothing about Secure Boot.
    """
    try:
        if not os.listdir(folder):
            return None
    except (IOError, OSError):
        return None
    secure_boot = reader(folder, "SecureBoot")
    setup_mode = reader(folder, "SetupMode")
    if secure_boot is None:
        # UEFI firmware without Secure Boot support has no SecureBoot variable
        return {"enabled": False, "setup_mode": _flag(setup_mode), "source": "efivars"}
    return {"enabled": _flag(secure_boot), "setup_mode": _flag(setup_mode), "source": "efivars"}


def parse_mokutil(output):
    """The state from ``mokutil --sb-state`` output; None when it says nothing about Secure Boot.

    mokutil prints ``SecureBoot enabled`` or ``SecureBoot disabled``, then ``Platform is in Setup Mode``
    when it is; ``This system doesn't support Secure Boot`` on UEFI firmware without it; ``EFI variables
    are not supported on this system`` without UEFI (unknown here).
    """
    lines = [line.strip().lower() for line in output.splitlines() if line.strip()]
    enabled = None
    for line in lines:
        if line.startswith("secureboot enabled"):
            enabled = True
        elif line.startswith("secureboot disabled"):
            enabled = False
        elif "doesn't support secure boot" in line or "does not support secure boot" in line:
            return {"enabled": False, "setup_mode": None, "source": "mokutil"}
    if enabled is None:
        return None
    return {"enabled": enabled, "setup_mode": any("setup mode" in line for line in lines), "source": "mokutil"}


def _from_mokutil(run_command, which, warnings):
    binary = which("mokutil") if which else None
    if not binary or run_command is None:
        return None
    decoder = TextDecoder()
    try:
        rc, out, err = run_command([binary, "--sb-state"])
    except CommandTimeout as error:
        warnings.append("Secure Boot state unknown: mokutil --sb-state did not answer within %s s "
                        "(command_timeout) and was stopped" % error.timeout)
        return None
    out = decoder.decode(out, "the output of mokutil") or ""
    err = decoder.decode(err, "the error output of mokutil") or ""
    warnings.extend(decoder.warnings)
    state = parse_mokutil(out + "\n" + err)
    if state is None and rc != 0 and "not supported" not in (out + err).lower():
        first = (err or out).strip().splitlines()
        warnings.append("Secure Boot state unknown: mokutil --sb-state failed (rc=%d): %s"
                        % (rc, first[0] if first else "no output"))
    return state


def _variables_state(folder, reader, warnings):
    """``_from_variables``, with a variable that cannot be read told in ``warnings`` (and None)."""
    try:
        return _from_variables(folder, reader)
    except _Unreadable as error:
        warnings.append("Secure Boot: cannot read the EFI variable %s" % error)
        return None


def efivars_state(folder):
    """Return ``(state, warnings)`` from one efivarfs folder alone (``<efi>/efivars``): unknown when it is
    missing or empty, or when a variable cannot be read (with a warning)."""
    warnings = []
    state = _variables_state(folder, _read_efivarfs, warnings)
    return (state or unknown()), warnings


def secure_boot_state(efi_root=EFI_ROOT, run_command=None, which=None):
    """Return ``(state, warnings)``: the Secure Boot state and why a source could not be read.

    ``run_command(argv) -> (rc, stdout, stderr)`` runs mokutil (bounded: it raises ``CommandTimeout``);
    ``which(name)`` finds it. mokutil is only asked when the firmware is UEFI (``efi_root`` exists) but
    its variables cannot be read here.
    """
    warnings = []
    if not os.path.isdir(efi_root):
        return unknown(), warnings
    for folder, reader in ((os.path.join(efi_root, "efivars"), _read_efivarfs),
                           (os.path.join(efi_root, "vars"), _read_sysfs_vars)):
        state = _variables_state(folder, reader, warnings)
        if state is not None:
            return state, warnings
    state = _from_mokutil(run_command, which, warnings)
    return (state or unknown()), warnings
