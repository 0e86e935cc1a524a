# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes API client for the collection's modules.

``AUTH_ARG_SPEC`` holds the connection options (documented by the
``kubegpu.nvidia.k8s_auth`` doc fragment) with the same ``K8S_AUTH_*``
environment fallbacks as ``kubernetes.core``; ``get_api_client()`` builds an
``ApiClient`` from them; ``NodeAPI`` lists, reads and patches nodes, counts its
requests by verb and retries 429 and 5xx answers with backoff, honouring
``Retry-After``, up to a bound.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import time
import traceback

from ansible.module_utils.basic import env_fallback

K8S_IMPORT_ERROR = None
try:
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError as Urllib3Error
    HAS_KUBERNETES = True
except ImportError:
    HAS_KUBERNETES = False
    K8S_IMPORT_ERROR = traceback.format_exc()

    class ApiException(Exception):  # pylint: disable=missing-class-docstring
        pass

    class ConfigException(Exception):  # pylint: disable=missing-class-docstring
        pass

    class Urllib3Error(Exception):  # pylint: disable=missing-class-docstring
        pass


AUTH_ARG_SPEC = dict(
    kubeconfig=dict(type="path", fallback=(env_fallback, ["K8S_AUTH_KUBECONFIG"])),
    context=dict(type="str", fallback=(env_fallback, ["K8S_AUTH_CONTEXT"])),
    host=dict(type="str", fallback=(env_fallback, ["K8S_AUTH_HOST"])),
    api_key=dict(type="str", no_log=True, fallback=(env_fallback, ["K8S_AUTH_API_KEY"])),
    validate_certs=dict(type="bool", aliases=["verify_ssl"], fallback=(env_fallback, ["K8S_AUTH_VERIFY_SSL"])),
    ca_cert=dict(type="path", aliases=["ssl_ca_cert"], fallback=(env_fallback, ["K8S_AUTH_SSL_CA_CERT"])),
)

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
DEFAULT_RETRIES = 5
DEFAULT_PAGE_SIZE = 500
MAX_DELAY = 60.0


class K8sError(Exception):
    """A failure talking to the API, with a one-line message for the user."""

    def __init__(self, msg, status=None):
        super(K8sError, self).__init__(msg)
        self.msg = msg
        self.status = status


def get_api_client(params):
    """An ``ApiClient`` from the module's connection options.

    A kubeconfig (the named one, else ``KUBECONFIG`` or ``~/.kube/config``) gives the
    base configuration, else the in-cluster service account; ``host``, ``api_key``,
    ``validate_certs`` and ``ca_cert`` then override it. With ``host`` and no
    kubeconfig, no file is read.
    """
    cfg = k8s.Configuration()
    kubeconfig = params.get("kubeconfig")
    context = params.get("context")
    host = params.get("host")
    try:
        if kubeconfig or not host:
            path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")
            if kubeconfig and not os.path.exists(kubeconfig):
                raise K8sError("kubeconfig %s does not exist" % kubeconfig)
            if os.path.exists(path):
                k8s_config.load_kube_config(config_file=path, context=context, client_configuration=cfg,
                                            persist_config=False)
            elif not host:
                try:
                    k8s_config.load_incluster_config(client_configuration=cfg)
                except ConfigException:
                    raise K8sError("no Kubernetes connection: give kubeconfig or host (or K8S_AUTH_KUBECONFIG / "
                                   "K8S_AUTH_HOST), or run in a pod with a service account")
    except ConfigException as exc:
        raise K8sError("cannot load kubeconfig: %s" % exc)
    if host:
        cfg.host = host
    if params.get("api_key"):
        cfg.api_key = {"authorization": "Bearer %s" % params["api_key"]}
        cfg.api_key_prefix = {}
        # The kubeconfig loader re-reads its own credentials before each request unless this is cleared.
        cfg.refresh_api_key_hook = None
    if params.get("validate_certs") is not None:
        cfg.verify_ssl = params["validate_certs"]
    if params.get("ca_cert"):
        cfg.ssl_ca_cert = params["ca_cert"]
    return k8s.ApiClient(configuration=cfg)


def retry_after(headers):
    """Seconds from a ``Retry-After`` header (delta-seconds form), or None."""
    if not headers:
        return None
    value = headers.get("Retry-After") or headers.get("retry-after")
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        return None


def api_error_message(exc):
    """The API's own message from a Status body, else the HTTP reason."""
    message = None
    try:
        body = json.loads(exc.body)
        message = body.get("message")
    except (TypeError, ValueError, AttributeError):
        pass
    reason = exc.reason or ""
    return "%s %s%s" % (exc.status, reason, ": %s" % message if message else "")


def is_retriable(status):
    return status == 429 or (status is not None and 500 <= status <= 599)


class NodeAPI:
    """List, read and patch nodes; count requests by verb; retry throttling and server errors.

    ``retries``: how many times one request is retried on 429 or 5xx before it
    fails. The delay is the answer's ``Retry-After`` when given, else
    ``backoff * 2**attempt``; either is capped at ``max_delay`` seconds.
    """

    def __init__(self, api_client, retries=DEFAULT_RETRIES, backoff=0.5, max_delay=MAX_DELAY, sleep=time.sleep,
                 page_size=DEFAULT_PAGE_SIZE):
        self.api_client = api_client
        self._core = None
        # Clients generated with param_serialize (kubernetes >= 35) are driven directly: importing
        # CoreV1Api and the models it pulls in costs about a second per module run, and the answers
        # are read as plain JSON anyway.
        self.direct = hasattr(api_client, "param_serialize") and hasattr(api_client, "call_api")
        self.host = api_client.configuration.host
        self.retries = retries
        self.backoff = backoff
        self.max_delay = max_delay
        self.sleep = sleep
        self.page_size = page_size
        self.counts = {}

    @property
    def core(self):
        if self._core is None:
            self._core = k8s.CoreV1Api(self.api_client)
        return self._core

    def _request(self, method, path, path_params=None, query=None, body=None, content_type=None):
        """One request through the ApiClient without the generated API class, raising ApiException as it does."""
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        request = self.api_client.param_serialize(
            method=method, resource_path=path, path_params=path_params, query_params=query or [],
            header_params=headers, body=body, auth_settings=["BearerToken"])
        response = self.api_client.call_api(*request)
        response.read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response

    def _call(self, verb, what, func):
        attempt = 0
        while True:
            self.counts[verb] = self.counts.get(verb, 0) + 1
            try:
                response = func()
                return json.loads(response.data)
            except ApiException as exc:
                if is_retriable(exc.status) and attempt < self.retries:
                    delay = retry_after(exc.headers)
                    if delay is None:
                        delay = self.backoff * (2 ** attempt)
                    self.sleep(min(delay, self.max_delay))
                    attempt += 1
                    continue
                suffix = " after %d attempts" % (attempt + 1) if attempt else ""
                raise K8sError("%s failed%s: %s" % (what, suffix, api_error_message(exc)), status=exc.status)
            except Urllib3Error as exc:
                raise K8sError("%s failed: cannot reach the API server at %s: %s" % (what, self.host, exc))

    def _list_page(self, field_selector, token):
        if self.direct:
            query = [("limit", self.page_size)]
            if field_selector:
                query.append(("fieldSelector", field_selector))
            if token:
                query.append(("continue", token))
            return self._request("GET", "/api/v1/nodes", query=query)
        kwargs = {"limit": self.page_size, "_preload_content": False}
        if field_selector:
            kwargs["field_selector"] = field_selector
        if token:
            kwargs["_continue"] = token
        return self.core.list_node(**kwargs)

    def list_nodes(self, field_selector=None):
        """Every node (or those ``field_selector`` selects) as API dicts, in pages of ``page_size``.

        One request unless the cluster holds more than ``page_size`` nodes.
        """
        items = []
        token = None
        while True:
            page = self._call("list", "listing nodes",
                              lambda tok=token: self._list_page(field_selector, tok))
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    def _read(self, name):
        if self.direct:
            return self._request("GET", "/api/v1/nodes/{name}", {"name": name})
        return self.core.read_node(name, _preload_content=False)

    def _patch(self, name, body):
        if self.direct:
            return self._request("PATCH", "/api/v1/nodes/{name}", {"name": name}, body=body,
                                 content_type=STRATEGIC_MERGE_PATCH)
        return self.core.patch_node(name, body, _content_type=STRATEGIC_MERGE_PATCH, _preload_content=False)

    def get_node(self, name):
        return self._call("get", "reading node %s" % name, lambda: self._read(name))

    def patch_node(self, name, body):
        return self._call("patch", "patching node %s" % name, lambda: self._patch(name, body))
