#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_container_toolkit_repo
short_description: Configure the NVIDIA Container Toolkit package repository with a signing key checked by fingerprint
version_added: 1.0.0
description:
  - "Writes the repository's signing key and the repository definition, and refreshes the package index of that
    repository alone, on the Debian family (apt, a flat source with C(signed-by)) and the RHEL family (dnf, with
    C(gpgcheck=1) and C(repo_gpgcheck=1): the signatures of the packages and of the repository metadata are checked)."
  - "The key is never trusted on first download: it is downloaded from O(key_url) only when the installed key file is
    missing, holds a key whose fingerprint is not in O(key_fingerprints) or differs from O(key_checksum), and the
    downloaded key must pass the same checks before it is written. A key that does not fails the module with one line
    naming its fingerprint."
  - "Rotated keys: before it refreshes the index, the module reads which key signed the repository (apt's C(InRelease),
    dnf's C(repomd.xml.asc)). When the installed key file does not hold that key (apt would fail with
    C(NO_PUBKEY)), it downloads O(key_url) again and replaces the key when the new one holds the signing key and passes
    the fingerprint check; otherwise it fails with one line that says so, and leaves the installed key in place."
author:
  - kubegpu.nvidia maintainers (@kubegpu)
attributes:
  check_mode:
    support: full
    description: Downloads and checks the key as in a real run, reports what would change and writes nothing.
  diff_mode:
    support: full
    description: The repository definition's text before and after, and the key's fingerprints before and after.
  idempotent:
    support: full
    description: A second run with the same options changes nothing and refreshes nothing unless O(refresh=true).
options:
  family:
    description: The node's OS family (C(ansible_facts.os_family)), C(Debian) or C(RedHat).
    type: str
    required: true
  url:
    description:
      - The repository URL. Debian family, a flat repository (apt replaces C($(ARCH)));
        RHEL family, the C(baseurl) (dnf replaces C($basearch)).
    type: str
    required: true
  key_url:
    description: URL of the armored signing key (C(https://), C(http://) or C(file://) for a key already on the node).
    type: str
    required: true
  key_fingerprints:
    description:
      - Fingerprints (40 or 64 hex digits, spaces allowed) of the keys the repository may be signed with. Every primary
        key in the key file must be one of them.
      - The default is the key NVIDIA signs its repository with; a mirror signed with another key needs its own.
      - "An empty list checks no fingerprint (the module warns: the key is then trusted on first download)."
    type: list
    elements: str
    default: [C95B321B61E88C1809C4F759DDCAE044F796ECB0]
  key_checksum:
    description: C(sha256:<hex>) the key file must have as well; empty checks none.
    type: str
    default: ""
  key_path:
    description:
      - Where the key is stored. Defaults, C(/etc/apt/keyrings/nvidia-container-toolkit.asc) (Debian family, named in
        C(signed-by)) and C(/etc/pki/rpm-gpg/nvidia-container-toolkit.asc) (RHEL family, the repository's C(gpgkey)).
    type: path
  source_path:
    description:
      - The repository definition. Defaults, C(/etc/apt/sources.list.d/nvidia-container-toolkit.list) and
        C(/etc/yum.repos.d/nvidia-container-toolkit.repo).
    type: path
  validate_certs:
    description: Verify TLS certificates of the downloads; written into the RHEL repository definition as C(sslverify).
    type: bool
    default: true
  refresh:
    description:
      - Refresh this repository's package index (apt-get update of this source only, or dnf makecache of this
        repository) even when neither the key nor the definition changed. It is refreshed whenever one of them changed.
    type: bool
    default: false
  timeout:
    description: Seconds each download may take.
    type: int
    default: 30
  backup:
    description: Keep a timestamped copy of the key and the definition before they are replaced.
    type: bool
    default: false
  owner:
    description: Owner of the key file and the definition.
    type: str
    default: root
  group:
    description: Group of the key file and the definition.
    type: str
    default: root
seealso:
  - module: kubegpu.nvidia.nvidia_container_toolkit_info
  - name: NVIDIA Container Toolkit installation guide
    description: NVIDIA's repository and key.
    link: https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html
notes:
  - The key NVIDIA signs its repository with has the fingerprint C(C95B 321B 61E8 8C18 09C4 F759 DDCA E044 F796 ECB0)
    ("NVIDIA CORPORATION (Open Source Projects)", as NVIDIA's maintainers quote it in NVIDIA/libnvidia-container issue 109).
"""

EXAMPLES = r"""
- name: NVIDIA's repository, its key checked by fingerprint
  kubegpu.nvidia.nvidia_container_toolkit_repo:
    family: "{{ ansible_facts.os_family }}"
    url: https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)
    key_url: https://nvidia.github.io/libnvidia-container/gpgkey

- name: An air-gapped mirror signed with the site's own key, and a refreshed index
  kubegpu.nvidia.nvidia_container_toolkit_repo:
    family: "{{ ansible_facts.os_family }}"
    url: https://mirror.example.com/libnvidia-container/stable/rpm/$basearch
    key_url: https://mirror.example.com/libnvidia-container/gpgkey
    key_fingerprints: ["0123 4567 89AB CDEF 0123 4567 89AB CDEF 0123 4567"]
    refresh: true
"""

RETURN = r"""
key_path:
  description: The key file.
  returned: always
  type: str
key_fingerprints:
  description: Fingerprints of the keys in the key file after the run (in check mode, as it would be).
  returned: always
  type: list
  elements: str
key_changed:
  description: Whether the key file was (or would be) written.
  returned: always
  type: bool
rotated:
  description: Whether the key was replaced because the repository is signed with a key the old one does not hold.
  returned: always
  type: bool
source_path:
  description: The repository definition.
  returned: always
  type: str
source_changed:
  description: Whether the definition was (or would be) written.
  returned: always
  type: bool
refreshed:
  description: Whether the package index of the repository was refreshed.
  returned: always
  type: bool
signed_by:
  description: The key IDs that signed the repository's metadata, when the module read them (before a refresh).
  returned: when read
  type: list
  elements: str
"""

import os
import platform

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.urls import fetch_url

from ansible_collections.kubegpu.nvidia.plugins.module_utils import openpgp
from ansible_collections.kubegpu.nvidia.plugins.module_utils import toolkit_repo as repo
from ansible_collections.kubegpu.nvidia.plugins.module_utils.config_file import make_diff, write_file
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import run_module

FILE_MODE = 0o644


def download(module, url):
    """The bytes at ``url`` (http, https or file); RepositoryError naming the URL when they cannot be had."""
    if url.startswith("file://"):
        path = url[len("file://"):]
        data = repo.read_bytes(path)
        if data is None:
            raise repo.RepositoryError("cannot read %s: no such file on the node" % url)
        return data
    response, info = fetch_url(module, url, timeout=module.params["timeout"])
    status = info.get("status")
    if response is None or status != 200:
        raise repo.RepositoryError("cannot download %s: %s" % (url, info.get("msg") or "HTTP %s" % status))
    try:
        return response.read()
    finally:
        response.close()


def arch_of(family):
    machine = platform.machine()
    return repo.debian_arch(machine) if family == "Debian" else machine


def signing_keys(module, family, url):
    """Key IDs that signed the repository's metadata, or None when it cannot be read (apt or dnf will say why)."""
    sig_url = repo.signature_url(family, url, arch_of(family))
    try:
        data = download(module, sig_url)
        return sorted(openpgp.signature_issuers(data))
    except repo.RepositoryError as exc:
        module.warn("could not read which key signs the repository (%s); the package manager checks it" % exc)
    except openpgp.OpenPGPError as exc:
        module.warn("%s: %s; the package manager checks the signature" % (sig_url, exc))
    return None


def refresh_index(module, family, source_path):
    env = {"LC_ALL": "C", "LANG": "C"}
    if family == "Debian":
        argv = ["apt-get", "update", "-o", "Dir::Etc::sourcelist=%s" % source_path, "-o", "Dir::Etc::sourceparts=-",
                "-o", "APT::Get::List-Cleanup=0"]
    else:
        argv = ["dnf", "makecache", "-y", "--disablerepo=*", "--enablerepo=%s" % repo.REPO_ID]
    rc, out, err = module.run_command(argv, environ_update=env)
    problems = [line.strip() for line in (out + "\n" + err).splitlines()
                if line.startswith(("E:", "W: GPG error", "Error:")) or "NO_PUBKEY" in line]
    if rc != 0 or problems:
        raise repo.RepositoryError("refreshing the package index of %s failed (%s, rc %d): %s" % (
            source_path, argv[0], rc, problems[0] if problems else ((err or out).strip().splitlines() or ["no output"])[-1]),
            rc=rc, stdout=out, stderr=err)


def plan_key(module, params, allowed, installed):
    """(new key bytes or None when the installed one stays, why)."""
    problem = repo.key_problem(installed, allowed, params["key_checksum"], params["key_path"]) if installed is not None \
        else "%s does not exist" % params["key_path"]
    if problem is None:
        return None, None
    fetched = download(module, params["key_url"])
    fetched_problem = repo.key_problem(fetched, allowed, params["key_checksum"], "the key at %s" % params["key_url"])
    if fetched_problem:
        raise repo.RepositoryError("The NVIDIA Container Toolkit repository key cannot be trusted: %s (installed key: %s)"
                                   % (fetched_problem, problem))
    return fetched, problem


def rotate_if_needed(module, params, allowed, key_bytes, result):
    """Read which key signs the repository; when ``key_bytes`` does not hold it, fetch ``key_url`` again.

    Returns the key to write (``key_bytes`` when it holds the signing key or the signer cannot be read).
    """
    issuers = signing_keys(module, params["family"], params["url"])
    if issuers is None:
        return key_bytes
    result["signed_by"] = issuers
    try:
        current = openpgp.keys(key_bytes)
    except openpgp.OpenPGPError:
        current = []
    if openpgp.holds_issuer(current, issuers):
        return key_bytes
    old = ", ".join(key["fingerprint"] for key in current) or "none"
    fetched = download(module, params["key_url"])
    problem = repo.key_problem(fetched, allowed, params["key_checksum"], "the key at %s" % params["key_url"])
    if problem:
        raise repo.RepositoryError(
            "The repository %s is signed with key %s, which the installed key (%s) does not hold, and the new key cannot "
            "be trusted: %s" % (params["url"], "/".join(issuers), old, problem))
    if not openpgp.holds_issuer(openpgp.keys(fetched), issuers):
        raise repo.RepositoryError(
            "The repository %s is signed with key %s, which neither the installed key (%s) nor the key at %s (%s) holds"
            % (params["url"], "/".join(issuers), old, params["key_url"], ", ".join(repo.key_fingerprints(fetched))))
    result["rotated"] = True
    return fetched


def run(module):
    params = module.params
    defaults = repo.family_defaults(params["family"])
    params["key_path"] = params["key_path"] or defaults["key_path"]
    params["source_path"] = params["source_path"] or defaults["source_path"]
    allowed = repo.allowed_fingerprints(params["key_fingerprints"])
    if not allowed:
        module.warn("key_fingerprints is empty: the repository key at %s is trusted as downloaded" % params["key_url"])

    installed = repo.read_bytes(params["key_path"])
    new_key, _why = plan_key(module, params, allowed, installed)
    key_bytes = new_key if new_key is not None else installed

    want_source = repo.source_text(params["family"], params["url"], params["key_path"], params["validate_certs"])
    source_before = repo.read_bytes(params["source_path"])
    source_before = None if source_before is None else to_text(source_before, errors="surrogate_or_replace")
    result = {"changed": False, "key_path": params["key_path"], "source_path": params["source_path"],
              "rotated": False, "refreshed": False}

    source_changed = source_before != want_source
    key_changed = new_key is not None and new_key != installed
    refresh = params["refresh"] or source_changed or key_changed
    if refresh:
        rotated = rotate_if_needed(module, params, allowed, key_bytes, result)
        if rotated is not key_bytes:
            key_bytes = rotated
            key_changed = key_bytes != installed

    key_args = module.load_file_common_arguments(dict(path=params["key_path"], owner=params["owner"],
                                                      group=params["group"], mode="0644"))
    source_args = module.load_file_common_arguments(dict(path=params["source_path"], owner=params["owner"],
                                                         group=params["group"], mode="0644"))
    result["key_fingerprints"] = repo.key_fingerprints(key_bytes)
    result["key_changed"] = key_changed
    result["source_changed"] = source_changed
    diffs = []
    if key_changed:
        before = "\n".join(repo.key_fingerprints(installed)) + "\n" if installed is not None else None
        diffs.append(make_diff(params["key_path"] + " (key fingerprints)", before, "\n".join(result["key_fingerprints"]) + "\n"))
    if source_changed:
        diffs.append(make_diff(params["source_path"], source_before, want_source))

    if not module.check_mode:
        if key_changed:
            write_file(module, params["key_path"], key_bytes, backup=params["backup"], mode=FILE_MODE)
        if source_changed:
            write_file(module, params["source_path"], want_source, backup=params["backup"], mode=FILE_MODE)
    changed = key_changed or source_changed
    # owner and mode of files already in place
    for args in (key_args, source_args):
        if os.path.exists(args["path"]):
            changed = module.set_fs_attributes_if_different(args, changed)

    if refresh and not module.check_mode:
        refresh_index(module, params["family"], params["source_path"])
        result["refreshed"] = True
    result["changed"] = bool(changed)
    if module._diff and diffs:
        result["diff"] = diffs[0] if len(diffs) == 1 else diffs
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            family=dict(type="str", required=True),
            url=dict(type="str", required=True),
            key_url=dict(type="str", required=True, no_log=False),
            key_fingerprints=dict(type="list", elements="str", default=list(repo.NVIDIA_FINGERPRINTS), no_log=False),
            key_checksum=dict(type="str", default="", no_log=False),
            key_path=dict(type="path"),
            source_path=dict(type="path"),
            validate_certs=dict(type="bool", default=True),
            refresh=dict(type="bool", default=False),
            timeout=dict(type="int", default=30),
            backup=dict(type="bool", default=False),
            owner=dict(type="str", default="root"),
            group=dict(type="str", default="root"),
        ),
        supports_check_mode=True,
    )
    run_module(module, run)


if __name__ == "__main__":
    main()
