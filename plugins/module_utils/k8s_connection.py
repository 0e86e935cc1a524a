# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One Kubernetes connection for every play and role of the collection, from the ``kubegpu_*`` variables.

``connection(variables)`` gives the connection options that are set, for ``module_defaults`` on the action
group ``group/kubegpu.nvidia.k8s`` (the ``kubegpu.nvidia.k8s_auth`` lookup); ``retired_message(names)`` the
one line a role fails with when a connection variable of an earlier release is still set (the
``kubegpu.nvidia.retired_connection`` filter).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

PREFIX = "kubegpu_"
# module option -> the type its variable must have (str options are paths, names or URLs)
OPTIONS = {
    "kubeconfig": str,
    "context": str,
    "host": str,
    "api_key": str,
    "validate_certs": bool,
    "ca_cert": str,
    "client_cert": str,
    "client_key": str,
    "proxy": str,
    "no_proxy": str,
    "impersonate_user": str,
    "impersonate_groups": list,
}


def _is_set(value):
    return value is not None and value != "" and value != []


def _checked(name, value, wanted):
    if wanted is bool and isinstance(value, str) and value.lower() in ("true", "false", "yes", "no"):
        return value.lower() in ("true", "yes")
    if wanted is list and isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if wanted is str and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, wanted):
        kind = "boolean" if wanted is bool else wanted.__name__
        raise InputError("%s must be a %s, not %s" % (name, kind, type(value).__name__))
    return value


def connection(variables):
    """The connection options set in ``variables`` (variable name -> value); unset means undefined, null or empty."""
    result = {}
    for option, wanted in OPTIONS.items():
        name = PREFIX + option
        value = variables.get(name)
        if _is_set(value):
            result[option] = _checked(name, value, wanted)
    return result


def _option_of(name):
    for option in sorted(OPTIONS, key=len, reverse=True):
        if name.endswith("_" + option):
            return option
    return name


def retired_message(names):
    """One line for the roles' connection variables of earlier releases that are set (``names``); "" for none."""
    names = sorted(names or [])
    if not names:
        return ""
    wanted = sorted(set(PREFIX + _option_of(name) for name in names))
    return ("%s no longer read: the roles' Kubernetes connection comes from the play's module_defaults for "
            "group/kubegpu.nvidia.k8s, built from the kubegpu_* variables (set %s, and give the play module_defaults: "
            "{group/kubegpu.nvidia.k8s: \"{{ lookup('kubegpu.nvidia.k8s_auth') }}\"}, as kubegpu.nvidia.site does)"
            % (", ".join(names), ", ".join(wanted)))
