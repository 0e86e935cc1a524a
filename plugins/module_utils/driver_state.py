# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a node's files say about its NVIDIA driver: kernels, built modules, the loaded module, MOK.

Every reader takes its root directories as arguments, so tests point them at fake trees.

* The kernel that boots next: ``grubby --default-kernel`` where grubby exists (RHEL), else the target
  of ``/boot/vmlinuz`` or ``/vmlinuz`` (the symlinks Debian's and Ubuntu's kernel packages keep on the
  newest kernel), else the newest ``/boot/vmlinuz-*``, else the running kernel.
* A kernel's NVIDIA module: ``dkms status`` (``nvidia-current/535.183.01, 6.1.0-28-amd64, x86_64:
  installed``; DKMS 2 separates the name and version with a comma), and module files named
  ``nvidia.ko``, ``nvidia-current.ko`` or ``nvidia-current-open.ko`` (compressed or not) under
  ``/lib/modules/<kernel>`` (DKMS builds, Ubuntu's ``linux-modules-nvidia-*`` packages, RHEL's kmods).
* The loaded module: ``/proc/driver/nvidia/version``, whose first line names "Open Kernel Module" for
  NVIDIA's open modules.
* Machine Owner Keys (Secure Boot itself: module_utils/secure_boot.py): shim's list
  ``MokListRT-605dab50-...`` (also split as ``MokListRT1``, ``MokListRT2``, ... when long), a sequence
  of EFI_SIGNATURE_LISTs of which the X.509 entries (type a5c059a1-94e4-4aa7-87b5-ab155c2bf072) hold
  the enrolled certificates in DER.
  ``MokNew`` exists while an import waits for confirmation in MOK Manager at the next boot.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii
import os
import re
import struct
import uuid

EFIVARS = "/sys/firmware/efi/efivars"
SHIM_GUID = "605dab50-e046-4300-abb6-3dd810dd8b23"
EFI_CERT_X509_GUID = uuid.UUID("a5c059a1-94e4-4aa7-87b5-ab155c2bf072")

MODULE_FILE = re.compile(r"^nvidia(-current)?(-open)?\.ko(\.(xz|zst|gz))?$")
# DKMS 3: "nvidia/535.183.01, 6.1.0-28-amd64, x86_64: installed"; DKMS 2: "nvidia, 535.183.01, 6.1.0-28-amd64, ..."
DKMS_LINE = re.compile(r"^(?P<name>[^,/\s]+)[/,]\s*(?P<version>[^,\s]+),\s*(?P<kernel>[^,\s]+)(?:,\s*[^:]+)?:\s*(?P<state>.*)$")


def _version_key(text):
    """A natural sort key for kernel release strings (``6.1.0-28-amd64`` < ``6.1.0-101-amd64``)."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text) if part]


# ------------------------------------------------------------------ kernels
def installed_kernels(boot_dir="/boot"):
    """Kernel releases with a ``vmlinuz-<release>`` in ``boot_dir``, oldest first."""
    try:
        names = os.listdir(boot_dir)
    except OSError:
        return []
    kernels = [name[len("vmlinuz-"):] for name in names if name.startswith("vmlinuz-") and not name.endswith(".old")]
    return sorted(kernels, key=_version_key)


def next_kernel(running, boot_dir="/boot", root="/", grubby_default=None):
    """``(release, how)``: the kernel that boots next and how that was found.

    ``grubby_default``: what ``grubby --default-kernel`` printed (a path), where grubby exists.
    """
    if grubby_default:
        name = os.path.basename(grubby_default.strip())
        if name.startswith("vmlinuz-"):
            return name[len("vmlinuz-"):], "grubby --default-kernel"
    for link in (os.path.join(boot_dir, "vmlinuz"), os.path.join(root, "vmlinuz")):
        if os.path.islink(link):
            name = os.path.basename(os.readlink(link))
            if name.startswith("vmlinuz-"):
                return name[len("vmlinuz-"):], "the %s symlink" % link
    kernels = installed_kernels(boot_dir)
    if kernels:
        return kernels[-1], "the newest kernel in %s" % boot_dir
    return running, "the running kernel (no other kernel installed)"


def parse_dkms_status(text):
    """``{kernel: [{"name", "version", "state"}]}`` of the NVIDIA modules ``dkms status`` lists."""
    found = {}
    for line in (text or "").splitlines():
        match = DKMS_LINE.match(line.strip())
        if not match or not match.group("name").startswith("nvidia"):
            continue
        found.setdefault(match.group("kernel"), []).append({
            "name": match.group("name"), "version": match.group("version"),
            "state": match.group("state").strip()})
    return found


def module_files(kernel, modules_dir="/lib/modules"):
    """Paths of the NVIDIA module files built for ``kernel`` (symlinked trees such as build/ are not followed)."""
    top = os.path.join(modules_dir, kernel)
    found = []
    for path, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d not in ("build", "source")]
        found.extend(os.path.join(path, name) for name in files if MODULE_FILE.match(name))
    return sorted(found)


def kernel_module(kernel, dkms=None, modules_dir="/lib/modules"):
    """Whether the NVIDIA module is built for ``kernel``: ``{"built", "version", "files", "dkms"}``.

    ``dkms``: ``parse_dkms_status``'s result, None where DKMS is not installed. ``version`` is the
    version DKMS installed for the kernel, None when only module files tell (precompiled modules).
    """
    entries = (dkms or {}).get(kernel, [])
    installed = [e for e in entries if e["state"].startswith("installed")]
    files = module_files(kernel, modules_dir)
    return {
        "built": bool(installed or files),
        "version": installed[0]["version"] if installed else None,
        "files": files,
        "dkms": entries,
    }


# ------------------------------------------------------------------ the loaded module
def loaded_module(proc_version="/proc/driver/nvidia/version", proc_modules="/proc/modules"):
    """``{"version", "flavour", "modules"}`` of the loaded NVIDIA driver: the module's version and flavour (None
    when none is loaded) and the NVIDIA modules in the kernel (``nvidia``, ``nvidia_uvm``, ...)."""
    modules = []
    try:
        with open(proc_modules) as handle:
            for line in handle:
                name = line.split(" ", 1)[0]
                if name == "nvidia" or name.startswith("nvidia_"):
                    modules.append(name)
    except (IOError, OSError):
        pass
    try:
        with open(proc_version) as handle:
            first = handle.readline()
    except (IOError, OSError):
        return {"version": None, "flavour": None, "modules": modules}
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", first)
    return {"version": match.group(1) if match else None,
            "flavour": "open" if "Open Kernel Module" in first else "proprietary",
            "modules": modules}


# ------------------------------------------------------------------ EFI variables
def read_efivar(efivars_dir, name, guid):
    """The data of an EFI variable (without its 4 attribute bytes), or None when it does not exist."""
    try:
        with open(os.path.join(efivars_dir, "%s-%s" % (name, guid)), "rb") as handle:
            data = handle.read()
    except (IOError, OSError):
        return None
    return data[4:] if len(data) >= 4 else None


def signature_list_certificates(data):
    """The X.509 certificates (DER) in a sequence of EFI_SIGNATURE_LISTs; stops at the first malformed one."""
    certificates = []
    offset = 0
    while offset + 28 <= len(data):
        sig_type = uuid.UUID(bytes_le=bytes(data[offset:offset + 16]))
        list_size, header_size, sig_size = struct.unpack("<III", data[offset + 16:offset + 28])
        if list_size < 28 or offset + list_size > len(data) or sig_size <= 16:
            break
        position = offset + 28 + header_size
        end = offset + list_size
        while position + sig_size <= end:
            if sig_type == EFI_CERT_X509_GUID:
                # each signature: 16 bytes of owner GUID, then the data
                certificates.append(bytes(data[position + 16:position + sig_size]))
            position += sig_size
        offset += list_size
    return certificates


def enrolled_certificates(efivars_dir=EFIVARS):
    """The certificates shim has enrolled as Machine Owner Keys (``MokListRT``, ``MokListRT1``, ...), or None
    when the variable does not exist (no shim, or no EFI)."""
    chunks = []
    data = read_efivar(efivars_dir, "MokListRT", SHIM_GUID)
    if data is not None:
        chunks.append(data)
    index = 1
    while True:
        part = read_efivar(efivars_dir, "MokListRT%d" % index, SHIM_GUID)
        if part is None:
            break
        chunks.append(part)
        index += 1
    if not chunks:
        return None
    certificates = []
    for chunk in chunks:
        certificates.extend(signature_list_certificates(chunk))
    return certificates


def enrollment_pending(efivars_dir=EFIVARS):
    """Whether a MOK import waits for confirmation in MOK Manager at the next boot (``MokNew`` exists)."""
    return read_efivar(efivars_dir, "MokNew", SHIM_GUID) is not None


def certificate_der(data):
    """The DER bytes of a certificate given as DER or PEM bytes; None when it is neither."""
    if not data:
        return None
    if data[:1] == b"\x30":
        return bytes(data)
    match = re.search(br"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", data, re.S)
    if not match:
        return None
    try:
        return base64.b64decode(b"".join(match.group(1).split()))
    except (binascii.Error, ValueError):
        return None


def mok_state(certificate_path, efivars_dir=EFIVARS):
    """``{"certificate", "readable", "format", "enrolled", "pending"}`` for the MOK certificate at
    ``certificate_path`` (``format``: ``der`` or ``pem``, what ``mokutil --import`` needs to know).

    ``enrolled`` is None when it cannot be told: no certificate there, or no MOK list (no shim).
    """
    state = {"certificate": certificate_path, "readable": False, "format": None, "enrolled": None,
             "pending": enrollment_pending(efivars_dir)}
    try:
        with open(certificate_path, "rb") as handle:
            data = handle.read()
    except (IOError, OSError, TypeError):
        data = b""
    der = certificate_der(data)
    if der is None:
        return state
    state["readable"] = True
    state["format"] = "der" if data[:1] == b"\x30" else "pem"
    enrolled = enrolled_certificates(efivars_dir)
    if enrolled is not None:
        state["enrolled"] = der in enrolled
    return state


def mok_list_variable(certificates, owner="00000000-0000-0000-0000-000000000000", attributes=7):
    """The bytes of an efivarfs file holding ``certificates`` (DER) as one EFI_SIGNATURE_LIST each.

    What shim writes to ``MokListRT``; used to build fake EFI variable directories for tests.
    """
    data = struct.pack("<I", attributes)
    owner_bytes = uuid.UUID(owner).bytes_le
    for der in certificates:
        sig_size = 16 + len(der)
        data += EFI_CERT_X509_GUID.bytes_le + struct.pack("<III", 28 + sig_size, 0, sig_size) + owner_bytes + der
    return data
