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
  - The roles of this collection take no connection variables of their own. A play that runs them sets this lookup's
    result as C(module_defaults) once, as C(kubegpu.nvidia.site) and C(kubegpu.nvidia.upgrade_driver) do.
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

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_connection import OPTIONS, PREFIX, connection


class LookupModule(LookupBase):
    """The lookup plugin."""

    def run(self, terms, variables=None, **kwargs):
        variables = variables or {}
        values = {}
        for option in OPTIONS:
            name = PREFIX + option
            if name in variables:
                values[name] = self._templar.template(variables[name])
        try:
            return [connection(values)]
        except InputError as exc:
            raise AnsibleLookupError(exc.msg)
