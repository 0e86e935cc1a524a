# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: k8s_auth
author: kubegpu.nvidia maintainers (@kubegpu)
version_added: 1.1.0
short_description: The Kubernetes connection of the collection's plays and roles, from the kubegpu_* variables
description:
  - "Returns the connection options of the Kubernetes modules (this collection's and C(kubernetes.core)'s) as a dict,
    built from the variables C(kubegpu_kubeconfig), C(kubegpu_context), C(kubegpu_host), C(kubegpu_api_key),
    C(kubegpu_validate_certs), C(kubegpu_ca_cert), C(kubegpu_client_cert), C(kubegpu_client_key), C(kubegpu_proxy),
    C(kubegpu_no_proxy), C(kubegpu_impersonate_user) and C(kubegpu_impersonate_groups)."
  - Meant for C(module_defaults) on the action group C(group/kubegpu.nvidia.k8s), which holds every module of this
    collection that talks to the API and the C(kubernetes.core) modules, so that a play sets its connection once.
  - A variable that is not defined, null or empty is left out, and the modules then fall back to the C(K8S_AUTH_*)
    environment, C($KUBECONFIG) and C(~/.kube/config) of the host they run on.
  - The roles' own connection variables of earlier releases (for example C(k8s_device_plugin_kubeconfig)) are still
    read, with a deprecation warning, when the term names their prefix and the C(kubegpu_) variable is not set.
options:
  _terms:
    description: Prefixes of deprecated role connection variables to read as well (for example V(k8s_device_plugin_)).
    type: list
    elements: str
    required: false
"""

EXAMPLES = r"""
- name: Deploy the device plugin
  hosts: localhost
  module_defaults:
    group/kubegpu.nvidia.k8s: "{{ lookup('kubegpu.nvidia.k8s_auth') }}"
  roles:
    - kubegpu.nvidia.k8s_device_plugin
"""

RETURN = r"""
_raw:
  description: 'One dict of the connection options that are set, for example C({"kubeconfig": "/etc/kubernetes/admin.conf"}).'
  type: list
  elements: dict
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible.utils.display import Display

display = Display()

# module option -> the type it must have (str options are paths, names or URLs)
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
PREFIX = "kubegpu_"


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
        raise AnsibleLookupError("%s must be a %s, not %s" % (name, kind, type(value).__name__))
    return value


def connection(variables, legacy_prefixes=(), warn=None):
    """The connection options set in ``variables`` (a mapping of variable names to values)."""
    result = {}
    for option, wanted in OPTIONS.items():
        name = PREFIX + option
        value = variables.get(name)
        if not _is_set(value):
            for prefix in legacy_prefixes:
                legacy = prefix + option
                if _is_set(variables.get(legacy)):
                    if warn:
                        warn("%s is deprecated: set %s instead (one connection for every play and role of "
                             "kubegpu.nvidia)" % (legacy, name))
                    name, value = legacy, variables[legacy]
                    break
        if _is_set(value):
            result[option] = _checked(name, value, wanted)
    return result


class LookupModule(LookupBase):
    """The lookup plugin."""

    def run(self, terms, variables=None, **kwargs):
        variables = variables or {}
        prefixes = [str(term) for term in terms or []]
        names = [PREFIX + option for option in OPTIONS]
        names += [prefix + option for prefix in prefixes for option in OPTIONS]
        values = {}
        for name in names:
            if name in variables:
                values[name] = self._templar.template(variables[name])

        def warn(message):
            display.deprecated(message, version="2.0.0", collection_name="kubegpu.nvidia")

        return [connection(values, prefixes, warn)]
