# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the cluster is, read once: the API server's version.

``read_cluster(api)`` sends one ``GET /version`` through an ``ApiSession`` (so every connection fault
is the session's one-line ``K8sError``) and returns the server's URL and version. kube-apiserver answers
``/version`` to any client it authenticates (and to anonymous ones where anonymous access is on), and
refuses credentials it does not accept with 401 before that: the read proves the kubeconfig, the
server's address, its certificate and the credentials at once.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import ApiError

# gitVersion as kube-apiserver reports it: v<major>.<minor>.<patch>[-<pre-release>][+<build>]
# (k8s.io/component-base/version; distributions add a suffix, e.g. v1.31.4-eks-2d5f260, v1.30.6+k3s1)
_GIT_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:[-+].*)?$")


def parse_version(info):
    """``(major, minor, patch)`` of a ``/version`` answer; the patch is 0 when only major and minor are known.

    gitVersion is read first; ``major`` and ``minor`` (which some distributions suffix with ``+``) otherwise.
    Raises ``ApiError`` when neither gives a version (the server is not a Kubernetes API server).
    """
    if not isinstance(info, dict):
        raise ApiError("the API server's /version answer is not a JSON object: is the URL a Kubernetes API server?")
    match = _GIT_VERSION.match(str(info.get("gitVersion") or ""))
    if match:
        return tuple(int(part) for part in match.groups())
    try:
        return (int(str(info.get("major")).rstrip("+")), int(str(info.get("minor")).rstrip("+")), 0)
    except ValueError:
        raise ApiError("the API server's /version answer names no version (gitVersion %r, major %r, minor %r): "
                       "is the URL a Kubernetes API server?"
                       % (info.get("gitVersion"), info.get("major"), info.get("minor")))


def read_cluster(api):
    """The cluster as one ``GET /version`` finds it: ``{"server", "version", "version_info", "git_version"}``.

    ``version`` is ``major.minor.patch`` (for comparisons, e.g. ``"1.34.2"``); ``version_info`` the answer as the
    server gave it. Connection faults raise the ``ApiSession``'s ``K8sError``.
    """
    info = api.request("get", "reading the API server's version", "GET", "/version")
    major, minor, patch = parse_version(info)
    return {
        "server": api.host,
        "version": "%d.%d.%d" % (major, minor, patch),
        "git_version": str(info.get("gitVersion") or ""),
        "version_info": info,
    }
