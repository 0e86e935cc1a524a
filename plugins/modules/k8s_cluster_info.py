#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: k8s_cluster_info
short_description: Check the connection to a Kubernetes cluster and read its version, in one request
version_added: 1.1.0
description:
  - Sends one C(GET /version) to the Kubernetes API server with the connection options, and returns the server's URL
    and version.
  - The request proves the whole connection at once, so it is the check to run before anything else talks to the
    cluster; C(kubegpu.nvidia.site) runs it in its preflight. A kubeconfig that is missing, unreadable or not a
    kubeconfig, a context it does not have, a server that refuses the connection or never answers, a server
    certificate the CA did not sign, and credentials the server refuses (401) each fail the module with one line
    naming the file, the server and the cause.
  - The version is what later checks compare against (for example Dynamic Resource Allocation needs Kubernetes 1.34).
author: kubegpu.nvidia maintainers (@kubegpu)
extends_documentation_fragment:
  - kubegpu.nvidia.k8s_auth
  - kubegpu.nvidia.k8s_auth.retries
  - kubegpu.nvidia.attributes.read_only
options:
  timeout:
    description:
      - Seconds the read may take in all, retries included; no request waits past it (a server that never answers
        fails the module after about this long, whatever O(request_timeout) and O(retries) are).
    type: float
    default: 60
notes:
  - kube-apiserver answers C(/version) to every client it authenticates; with anonymous access on, also to a client
    without credentials. The read does not check the rights of the credentials (each later module reports a 403
    with the right it lacks).
"""

EXAMPLES = r"""
- name: Check the cluster connection and read the version
  kubegpu.nvidia.k8s_cluster_info:
    kubeconfig: ~/.kube/config
  register: cluster

- name: Require Kubernetes 1.34 or newer
  ansible.builtin.assert:
    that: cluster.version is version('1.34.0', '>=')
    fail_msg: "Kubernetes {{ cluster.version }} is older than 1.34"
"""

RETURN = r"""
server:
  description: The API server's URL, as the connection options resolved it.
  returned: success
  type: str
  sample: https://10.0.0.1:6443
version:
  description: The server's Kubernetes version as C(major.minor.patch), from its C(gitVersion) (patch 0 when the server
    gives only C(major) and C(minor)).
  returned: success
  type: str
  sample: 1.34.2
git_version:
  description: The server's C(gitVersion), distribution suffix included.
  returned: success
  type: str
  sample: v1.34.2-eks-2d5f260
version_info:
  description: The C(/version) answer as the server gave it.
  returned: success
  type: dict
  sample: {"major": "1", "minor": "34", "gitVersion": "v1.34.2", "platform": "linux/amd64"}
api_requests:
  description: The API requests the module sent, by verb (retries counted).
  returned: always
  type: dict
  sample: {"get": 1}
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError, run_module
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import (
    AUTH_ARG_SPEC, HAS_KUBERNETES, K8S_IMPORT_ERROR, ApiSession, check_options, get_api_client)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_cluster import read_cluster


def main():
    argument_spec = dict(AUTH_ARG_SPEC)
    argument_spec.update(
        retries=dict(type="int", default=5),
        timeout=dict(type="float", default=60),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), error_kind="dependency", exception=K8S_IMPORT_ERROR)
    state = {"api": None}

    def progress():
        api = state["api"]
        return dict(changed=False, api_requests=api.counts if api else {})

    def work(module):
        params = module.params
        if params["retries"] < 0:
            raise InputError("retries must be 0 or more, not %d" % params["retries"])
        if not params["timeout"] > 0:
            raise InputError("timeout must be more than 0 seconds, not %s" % params["timeout"])
        check_options(params)
        api = state["api"] = ApiSession(get_api_client(params), retries=params["retries"],
                                        request_timeout=params["request_timeout"])
        api.within(params["timeout"])
        result = progress()
        result.update(read_cluster(api))
        return result

    run_module(module, work, progress)


if __name__ == "__main__":
    main()
