# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes API client for the collection's modules.

``AUTH_ARG_SPEC`` holds the connection options (documented by the
``kubegpu.nvidia.k8s_auth`` doc fragment) with the same ``K8S_AUTH_*``
environment fallbacks as ``kubernetes.core``; ``get_api_client()`` builds an
``ApiClient`` from them; ``NodeAPI`` lists, reads and patches nodes, counts its
requests by verb and retries 429 and 5xx answers with backoff, honouring
``Retry-After``, up to a bound (``ApiSession``, which ``k8s_pods.PodAPI`` shares). A ``NodeAPI``
may be used from several threads.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import threading
import time
import traceback

from ansible.module_utils.basic import env_fallback

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import ApiError

K8S_IMPORT_ERROR = None
try:
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config
    from kubernetes.client import rest as k8s_rest
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3 import PoolManager, ProxyManager, Retry
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
# How often the kubeconfig loader's credential hook runs at most (it runs before every request
# otherwise). The loader refreshes a token 5 minutes before it expires, so a few seconds lose nothing.
CREDENTIAL_CHECK_INTERVAL = 5.0


class K8sError(ApiError):
    """A failure talking to the API, with a one-line message for the user (``status``: the HTTP status)."""


class _ThrottledHook:
    """The kubeconfig loader's ``refresh_api_key_hook``, run at most once per ``interval`` seconds.

    The loader's hook re-applies its whole configuration before every request (host included, which
    makes the client re-read the proxy settings from the environment): for thousands of requests a
    noticeable share of the client's time. It refreshes tokens 5 minutes before they expire, so
    running it every few seconds is as good. Thread-safe.
    """

    def __init__(self, hook, interval=CREDENTIAL_CHECK_INTERVAL, clock=time.monotonic):
        self.hook = hook
        self.interval = interval
        self.clock = clock
        self.last = None
        self.lock = threading.Lock()

    def __call__(self, configuration):
        with self.lock:
            now = self.clock()
            if self.last is None or now - self.last >= self.interval:
                self.hook(configuration)
                self.last = now
                # the loader's hook installs itself again: keep it behind this one
                if configuration.refresh_api_key_hook is not self:
                    self.hook = configuration.refresh_api_key_hook or self.hook
                    configuration.refresh_api_key_hook = self


def get_api_client(params, pool_size=None):
    """An ``ApiClient`` from the module's connection options.

    A kubeconfig (the named one, else ``KUBECONFIG`` or ``~/.kube/config``) gives the
    base configuration, else the in-cluster service account; ``host``, ``api_key``,
    ``validate_certs`` and ``ca_cert`` then override it. With ``host`` and no
    kubeconfig, no file is read. ``pool_size``: keep at least that many connections open
    to the API server (one per thread that sends requests at the same time).
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
    if cfg.refresh_api_key_hook is not None:
        cfg.refresh_api_key_hook = _ThrottledHook(cfg.refresh_api_key_hook)
    if pool_size and (cfg.connection_pool_maxsize or 0) < pool_size:
        # urllib3 keeps at most this many connections: more threads would open (and TLS-handshake)
        # a new one for many of their requests and drop it again
        cfg.connection_pool_maxsize = pool_size
    if cfg.retries is None:
        # urllib3 would otherwise retry 413/429/503 answers with Retry-After itself, up to 3 times and
        # unseen: the callers' own retries (counted, capped at max_delay) handle those; a connection that
        # fails is still retried here
        cfg.retries = Retry(3, respect_retry_after_header=False)
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


def write_pool(api_client):
    """``(pool, origin)``: the urllib3 pool of connections to the API server, for writes sent straight on it.

    The REST layer of the kubernetes client parses each URL and looks its pool up again, checks the
    content type against a list, and wraps the answer: for thousands of writes about a sixth of the
    client's time per write. The pool is the one that layer uses (same connections, TLS settings and size).
    None when a proxy is in the way or the client is not built as expected: writes then take the
    REST layer too.
    """
    configuration = getattr(api_client, "configuration", None)
    manager = getattr(getattr(api_client, "rest_client", None), "pool_manager", None)
    if (configuration is None or not isinstance(manager, PoolManager) or isinstance(manager, ProxyManager)
            or getattr(configuration, "proxy", None)):
        return None
    host = configuration.host or ""
    scheme = host.find("://")
    if scheme < 0:
        return None
    path = host.find("/", scheme + 3)
    origin = host if path < 0 else host[:path]
    try:
        return manager.connection_from_url(origin), origin
    except (Urllib3Error, ValueError):
        return None


class ApiSession:
    """Requests through an ``ApiClient``: counted by verb, 429 and 5xx retried, failures as ``K8sError``.

    Clients generated with ``param_serialize`` (kubernetes >= 35) are driven directly: importing
    ``CoreV1Api`` and the models it pulls in costs about a second per module run, and the answers are
    read as plain JSON anyway; older clients go through ``core`` (``CoreV1Api``) with
    ``_preload_content=False``. ``retries``: how many times one request is retried on 429 or 5xx
    before it fails. The delay is the answer's ``Retry-After`` when given, else
    ``backoff * 2**attempt``; either is capped at ``max_delay`` seconds. Requests may be sent from
    several threads at once (``counts`` stays exact; a retry delays only its thread).
    """

    def __init__(self, api_client, retries=DEFAULT_RETRIES, backoff=0.5, max_delay=MAX_DELAY, sleep=time.sleep,
                 page_size=DEFAULT_PAGE_SIZE):
        self.api_client = api_client
        self._core = None
        self.direct = hasattr(api_client, "param_serialize") and hasattr(api_client, "call_api")
        self.host = api_client.configuration.host
        self.retries = retries
        self.backoff = backoff
        self.max_delay = max_delay
        self.sleep = sleep
        self.page_size = page_size
        self.counts = {}
        self._counts_lock = threading.Lock()

    @property
    def core(self):
        if self._core is None:
            self._core = k8s.CoreV1Api(self.api_client)
        return self._core

    def _request(self, method, path, path_params=None, query=None, body=None, content_type=None,
                 accept="application/json"):
        """One request through the ApiClient without the generated API class, raising ApiException as it does.

        A body is sent as ``content_type`` (JSON unless given).
        """
        return self._send(self.api_client.param_serialize(
            method=method, resource_path=path, path_params=path_params, query_params=query or [],
            header_params=self._headers(body, content_type, accept), body=body, auth_settings=["BearerToken"]))

    @staticmethod
    def _headers(body, content_type, accept):
        headers = {"Accept": accept}
        if content_type or body is not None:
            headers["Content-Type"] = content_type or "application/json"
        return headers

    def _send(self, request):
        """Send a request ``param_serialize`` built; the answer, read, or ApiException."""
        response = self.api_client.call_api(*request)
        return self._checked(response)

    @staticmethod
    def _checked(response):
        response.read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response

    def _call(self, verb, what, func, decode="json", missing_ok=False):
        """Run ``func`` (one request) with retries; its answer as JSON (``decode="text"``: as a string,
        ``decode=None``: not read). ``missing_ok``: a 404 answer returns None instead of failing."""
        attempt = 0
        while True:
            with self._counts_lock:
                self.counts[verb] = self.counts.get(verb, 0) + 1
            try:
                response = func()
                if not decode:
                    return None
                data = response.data
                if isinstance(data, bytes):
                    data = data.decode("utf-8", "replace")
                return data if decode == "text" else json.loads(data)
            except ApiException as exc:
                if missing_ok and exc.status == 404:
                    return None
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
            except ValueError as exc:
                raise K8sError("%s failed: the API server's answer is not JSON: %s" % (what, exc))

    def _patch(self, name, body):
        if self.direct:
            return self._request("PATCH", "/api/v1/nodes/{name}", {"name": name}, body=body,
                                 content_type=STRATEGIC_MERGE_PATCH)
        return self.core.patch_node(name, body, _content_type=STRATEGIC_MERGE_PATCH, _preload_content=False)

    def patch_node(self, name, body):
        """Apply a strategic-merge patch to a node; returns None (the node the API answers with is not decoded)."""
        return self._call("patch", "patching node %s" % name, lambda: self._patch(name, body), decode=None)


class NodeAPI(ApiSession):
    """List and read nodes, and patch them (``ApiSession.patch_node``) straight on the connection pool."""

    def __init__(self, api_client, **kwargs):
        super(NodeAPI, self).__init__(api_client, **kwargs)
        self._write_pool = write_pool(api_client) if self.direct else None

    def _send(self, request):
        """A PATCH with a JSON body goes straight on the connection pool (``write_pool``) when it can."""
        method, url, headers, body, post_params = request
        if (self._write_pool and method == "PATCH" and body is not None and not post_params
                and url.startswith(self._write_pool[1] + "/")):
            pool, origin = self._write_pool
            raw = pool.request(method, url[len(origin):], body=json.dumps(body), headers=headers, timeout=None,
                               preload_content=False)
            return self._checked(k8s_rest.RESTResponse(raw))
        return super(NodeAPI, self)._send(request)

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

    def get_node(self, name):
        """The node as an API dict."""
        return self._call("get", "reading node %s" % name, lambda: self._read(name))
