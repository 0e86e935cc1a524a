# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    """Connection options of the modules that talk to the Kubernetes API."""

    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a kubeconfig file.
      - Without it, and without O(host), the first file in the E(KUBECONFIG) environment variable,
        else C(~/.kube/config), else the in-cluster service account is used.
      - Can also be given with the E(K8S_AUTH_KUBECONFIG) environment variable.
    type: path
  context:
    description:
      - The kubeconfig context to use; the file's current context when not given.
      - Can also be given with the E(K8S_AUTH_CONTEXT) environment variable.
    type: str
  host:
    description:
      - URL of the Kubernetes API server, for example C(https://k8s.example.com:6443).
      - Overrides the server of the kubeconfig.
      - Can also be given with the E(K8S_AUTH_HOST) environment variable.
    type: str
  api_key:
    description:
      - Bearer token to authenticate with.
      - Overrides the credentials of the kubeconfig.
      - Can also be given with the E(K8S_AUTH_API_KEY) environment variable.
    type: str
  validate_certs:
    description:
      - Whether to verify the API server's TLS certificate.
      - The kubeconfig's setting when not given (verification on by default).
      - Can also be given with the E(K8S_AUTH_VERIFY_SSL) environment variable.
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description:
      - Path to a CA certificate file to verify the API server with.
      - Can also be given with the E(K8S_AUTH_SSL_CA_CERT) environment variable.
    type: path
    aliases: [ssl_ca_cert]
requirements:
  - kubernetes >= 24.2.0 (Python library)
"""
