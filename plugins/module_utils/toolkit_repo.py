# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The NVIDIA Container Toolkit package repository on a node: its definition, its signing key, its index.

Shared by ``nvidia_container_toolkit_repo`` (which writes them) and ``nvidia_container_toolkit_info`` (which
only tells whether they are in place), so both judge "in place" by the same rules.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import hashlib
import os
import re

from ansible_collections.kubegpu.nvidia.plugins.module_utils import openpgp
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError, KubegpuError

# The key NVIDIA signs https://nvidia.github.io/libnvidia-container with: "NVIDIA CORPORATION (Open Source
# Projects) <cudatools@nvidia.com>", rsa4096, 2017-09-28. Its fingerprint as NVIDIA's maintainers quote it in
# NVIDIA/libnvidia-container issue 109 ("C95B 321B 61E8 8C18 09C4 F759 DDCA E044 F796 ECB0") and as the key at
# https://nvidia.github.io/libnvidia-container/gpgkey shows it (NVIDIA/nvidia-container-toolkit issues 650 and
# 1460); apt names it NO_PUBKEY DDCAE044F796ECB0 when it is missing.
NVIDIA_FINGERPRINTS = ("C95B321B61E88C1809C4F759DDCAE044F796ECB0",)

REPO_ID = "nvidia-container-toolkit"
MARKER = "# Managed by kubegpu.nvidia.nvidia_container_toolkit"
FAMILIES = {
    "Debian": {
        "manager": "apt",
        "key_path": "/etc/apt/keyrings/nvidia-container-toolkit.asc",
        "source_path": "/etc/apt/sources.list.d/nvidia-container-toolkit.list",
    },
    "RedHat": {
        "manager": "dnf",
        "key_path": "/etc/pki/rpm-gpg/nvidia-container-toolkit.asc",
        "source_path": "/etc/yum.repos.d/nvidia-container-toolkit.repo",
    },
}
APT_LISTS = "/var/lib/apt/lists"
DEBIAN_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64el"}


class RepositoryError(KubegpuError):
    """The repository or its key cannot be used as configured (one line, names what and why)."""

    kind = "runtime"


def family_defaults(family):
    """The paths and package manager of an OS family; InputError for a family the role does not serve."""
    if family not in FAMILIES:
        raise InputError("The NVIDIA Container Toolkit role supports the Debian and RedHat families, not %s." % family)
    return FAMILIES[family]


def source_text(family, url, key_path, validate_certs=True):
    """The repository definition the role writes.

    Debian/Ubuntu: a flat apt source signed by the key file only (``signed-by``), as NVIDIA publishes it.
    RHEL family: a yum/dnf repository that checks the signature of every package (``gpgcheck=1``) and of the
    repository metadata (``repo_gpgcheck=1``) with the key file, never a key fetched by dnf from the network.
    """
    if family == "Debian":
        return "%s\ndeb [signed-by=%s] %s /\n" % (MARKER, key_path, url)
    lines = [
        MARKER,
        "[%s]" % REPO_ID,
        "name=NVIDIA Container Toolkit",
        "baseurl=%s" % url,
        "enabled=1",
        "gpgcheck=1",
        "repo_gpgcheck=1",
        "gpgkey=file://%s" % key_path,
        "sslverify=%d" % (1 if validate_certs else 0),
    ]
    return "\n".join(lines) + "\n"


def read_bytes(path):
    """The content of ``path`` or None when it does not exist."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (IOError, OSError):
        if not os.path.exists(path):
            return None
        raise RepositoryError("cannot read %s" % path)


def allowed_fingerprints(values):
    """The fingerprints a user trusts, normalized; InputError for one that is not 40 or 64 hex digits."""
    out = []
    for value in values or []:
        fpr = openpgp.normalize_fingerprint(value)
        if not re.match(r"^([0-9A-F]{40}|[0-9A-F]{64})$", fpr):
            raise InputError("nvidia_container_toolkit_repo_gpg_key_fingerprints: %r is not a key fingerprint "
                             "(40 or 64 hex digits)" % value)
        out.append(fpr)
    return out


def key_problem(data, allowed, checksum, source):
    """Why key file ``data`` (bytes) must not be trusted, or None: no key, an unknown fingerprint, another checksum.

    ``allowed``: normalized fingerprints (empty: any key); ``checksum``: ``sha256:<hex>`` or empty;
    ``source``: where the data came from, for the message.
    """
    if checksum:
        algo, _sep, expected = checksum.partition(":")
        if algo.lower() != "sha256" or not expected:
            raise InputError("nvidia_container_toolkit_repo_gpg_key_checksum must be sha256:<hex>, not %r" % checksum)
        actual = hashlib.sha256(data).hexdigest()
        if actual != expected.lower():
            return "%s has SHA-256 %s, not the %s of nvidia_container_toolkit_repo_gpg_key_checksum" % (
                source, actual, expected.lower())
    try:
        found = openpgp.keys(data)
    except openpgp.OpenPGPError as exc:
        return "%s is not an OpenPGP public key (%s)" % (source, exc)
    if allowed:
        unknown = [key["fingerprint"] for key in found if key["fingerprint"] not in allowed]
        if unknown:
            return "%s holds the key %s, which is not one of the trusted fingerprints %s" % (
                source, ", ".join(unknown), ", ".join(allowed))
    return None


def key_fingerprints(data):
    """Primary key fingerprints of key file data; [] when it does not parse."""
    try:
        return [key["fingerprint"] for key in openpgp.keys(data)]
    except openpgp.OpenPGPError:
        return []


def file_attributes_ok(path, mode=0o644):
    """Whether ``path`` is a regular file owned by root:root with ``mode``."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return st.st_uid == 0 and st.st_gid == 0 and (st.st_mode & 0o7777) == mode


def expand_url(url, arch):
    """The repository URL with apt's ``$(ARCH)`` and dnf's ``$basearch`` filled in."""
    return url.replace("$(ARCH)", arch).replace("$basearch", arch)


def signature_url(family, url, arch):
    """Where the repository's signed metadata is: apt's flat ``InRelease``, or dnf's ``repomd.xml.asc``."""
    base = expand_url(url, arch).rstrip("/")
    if family == "Debian":
        return base + "/InRelease"
    return base + "/repodata/repomd.xml.asc"


def apt_lists_prefix(url, arch):
    """The name prefix of apt's list files for a flat source at ``url`` (apt's URItoFileName of ``<url>/``)."""
    uri = expand_url(url, arch).rstrip("/") + "/"
    uri = re.sub(r"^[A-Za-z][A-Za-z0-9+.-]*://", "", uri)
    uri = re.sub(r"^[^@/]*@", "", uri)  # user:password@
    return uri.replace("/", "_")


def cached_versions(url, arch, lists_dir=None):
    """{package: set(versions)} of the Packages index apt has for the flat source at ``url`` (empty: none cached)."""
    lists_dir = lists_dir or APT_LISTS
    prefix = apt_lists_prefix(url, arch)
    versions = {}
    for path in glob.glob(os.path.join(lists_dir, glob.escape(prefix) + "Packages")):
        data = read_bytes(path) or b""
        package = None
        for line in data.decode("utf-8", "replace").splitlines():
            if line.startswith("Package:"):
                package = line.split(":", 1)[1].strip()
            elif line.startswith("Version:") and package:
                versions.setdefault(package, set()).add(line.split(":", 1)[1].strip())
            elif not line.strip():
                package = None
    return versions


def available(versions, packages, version):
    """Whether the cached index ``versions`` has every package, at ``version`` when one is pinned."""
    for name in packages:
        if name not in versions or (version and version not in versions[name]):
            return False
    return True


def debian_arch(machine):
    """dpkg's architecture name of a kernel machine name (x86_64 -> amd64)."""
    return DEBIAN_ARCH.get(machine, machine)
