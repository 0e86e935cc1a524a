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
      - Without it, the first file in the E(KUBECONFIG) environment variable, else C(~/.kube/config), is read
        when O(context) is given or O(host) is not; without O(host) and with no such file, the in-cluster
        service account is used. O(host) alone reads no file.
      - The options given (O(host), O(api_key), O(ca_cert), O(validate_certs), O(client_cert), O(client_key),
        O(proxy)) override their part of the kubeconfig, as with C(kubernetes.core).
      - A kubeconfig that cannot be used (not YAML, no such context, a certificate file that does not exist,
        ...) fails the module with one line naming the file and what is wrong (C(error_kind=input)).
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
      - Overrides the credentials of the kubeconfig (its token, C(exec) plugin or auth provider).
      - Can also be given with the E(K8S_AUTH_API_KEY) environment variable.
    type: str
  validate_certs:
    description:
      - Whether to verify the API server's TLS certificate.
      - The kubeconfig's setting when not given (verification on by default).
      - Can also be given with the E(K8S_AUTH_VERIFY_SSL) or E(K8S_AUTH_VALIDATE_CERTS) environment variable.
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description:
      - Path to a CA certificate file (PEM) to verify the API server with; overrides the kubeconfig's CA.
      - Can also be given with the E(K8S_AUTH_SSL_CA_CERT) or E(K8S_AUTH_CA_CERT) environment variable.
    type: path
    aliases: [ssl_ca_cert]
  client_cert:
    description:
      - Path to a client certificate (PEM) to authenticate with; overrides the kubeconfig's. Needs O(client_key)
        (or a key in the kubeconfig).
      - Can also be given with the E(K8S_AUTH_CERT_FILE) or E(K8S_AUTH_CLIENT_CERT) environment variable.
    type: path
    aliases: [cert_file]
  client_key:
    description:
      - Path to the private key (PEM, without passphrase) of O(client_cert).
      - Can also be given with the E(K8S_AUTH_KEY_FILE) or E(K8S_AUTH_CLIENT_KEY) environment variable.
    type: path
    aliases: [key_file]
  proxy:
    description:
      - URL of an HTTP proxy to reach the API server through, for example C(http://proxy.example.com:3128).
      - Overrides the kubeconfig's C(proxy-url). Without either, the C(kubernetes) library version 35 and later
        uses the E(HTTPS_PROXY) / E(HTTP_PROXY) environment variables; earlier versions use no proxy.
      - Can also be given with the E(K8S_AUTH_PROXY) environment variable.
    type: str
  no_proxy:
    description:
      - Comma-separated hosts, domains, IP addresses or CIDRs to reach without the proxy, for example
        C(localhost,.cluster.local,10.0.0.0/8).
      - Can also be given with the E(K8S_AUTH_NO_PROXY) environment variable.
    type: str
  proxy_headers:
    description:
      - Headers for the proxy.
      - Without this option, its suboptions can be given with the E(K8S_AUTH_PROXY_HEADERS_PROXY_BASIC_AUTH),
        E(K8S_AUTH_PROXY_HEADERS_BASIC_AUTH) and E(K8S_AUTH_PROXY_HEADERS_USER_AGENT) environment variables.
    type: dict
    suboptions:
      proxy_basic_auth:
        description: C(username:password) for the proxy's basic authentication.
        type: str
      basic_auth:
        description: C(username:password) for a basic authentication header.
        type: str
      user_agent:
        description: The C(User-Agent) header to send.
        type: str
  impersonate_user:
    description:
      - Act as this user (the C(Impersonate-User) header); the credentials must allow impersonating it.
      - Can also be given with the E(K8S_AUTH_IMPERSONATE_USER) environment variable.
    type: str
  impersonate_groups:
    description:
      - Act as a member of these groups (one C(Impersonate-Group) header each); needs O(impersonate_user).
      - Can also be given with the E(K8S_AUTH_IMPERSONATE_GROUPS) environment variable, comma-separated.
    type: list
    elements: str
  request_timeout:
    description:
      - Seconds to wait for the API server to accept a connection, and then for each part of its answer,
        on every request.
      - A request that runs out of time is retried at once, counted in the module's O(retries) (so a server
        that never answers fails the module after (O(retries) + 1) x O(request_timeout) seconds), with
        C(error_kind=timeout) and a message naming the server.
      - Can also be given with the E(K8S_AUTH_REQUEST_TIMEOUT) environment variable.
    type: float
    default: 30
requirements:
  - kubernetes >= 24.2.0 (Python library)
notes:
  - "C(module_defaults: {group/kubegpu.nvidia.k8s: {...}}) sets these options for every module of this collection
    that talks to the API, and for the C(kubernetes.core) modules of the group C(kubernetes.core.k8s) too
    (C(request_timeout) is this collection's own: set it per module, or as E(K8S_AUTH_REQUEST_TIMEOUT))."
"""

    # the retry count of the modules that retry every failed request alike (k8s_gpu_label, k8s_gpu_validate)
    RETRIES = r"""
options:
  retries:
    description:
      - How many times one API request is retried after a 429 or 5xx answer, a dropped connection or no answer
        within O(request_timeout), before the module fails.
    type: int
    default: 5
"""
