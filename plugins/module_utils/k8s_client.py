# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes API client for the collection's modules.

``AUTH_ARG_SPEC`` holds the connection options (documented by the ``kubegpu.nvidia.k8s_auth`` doc
fragment) with the ``K8S_AUTH_*`` environment fallbacks ``kubernetes.core`` reads.
``get_api_client()`` builds an ``ApiClient`` from them: the kubeconfig (checked, with a one-line
``InputError`` naming the file and what is wrong with it) gives the base, and every option given
overrides its part of it, as kubernetes.core does.

``ApiSession`` (shared by ``NodeAPI`` and ``k8s_pods.PodAPI``) sends every request the same way,
through the ``kubernetes`` library's public ``DynamicClient.request(method, path, ...)`` with
``serialize=False`` (the answers are read as plain JSON), with a connect and read timeout on every
request. It counts requests by verb, retries 429, 5xx, timed-out and dropped requests with backoff
(honouring ``Retry-After``) up to a bound, and turns every failure into a one-line ``K8sError``.
An ``ApiSession`` may be used from several threads.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii
import json
import os
import re
import ssl
import threading
import time
import traceback

from ansible.module_utils.basic import env_fallback

try:
    from urllib.parse import quote as _quote
except ImportError:  # Python 2
    from urllib import quote as _quote  # pylint: disable=ungrouped-imports

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import ApiError, InputError

K8S_IMPORT_ERROR = None
try:
    import yaml
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.dynamic import DynamicClient
    from urllib3 import Retry
    from urllib3.exceptions import (
        ConnectTimeoutError, HTTPError as Urllib3Error, NewConnectionError, ProtocolError, ProxyError,
        ReadTimeoutError, SSLError as Urllib3SSLError)
    from urllib3.util import make_headers
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


DEFAULT_REQUEST_TIMEOUT = 30
AUTH_ARG_SPEC = dict(
    kubeconfig=dict(type="path", fallback=(env_fallback, ["K8S_AUTH_KUBECONFIG"])),
    context=dict(type="str", fallback=(env_fallback, ["K8S_AUTH_CONTEXT"])),
    host=dict(type="str", fallback=(env_fallback, ["K8S_AUTH_HOST"])),
    api_key=dict(type="str", no_log=True, fallback=(env_fallback, ["K8S_AUTH_API_KEY"])),
    validate_certs=dict(type="bool", aliases=["verify_ssl"],
                        fallback=(env_fallback, ["K8S_AUTH_VALIDATE_CERTS", "K8S_AUTH_VERIFY_SSL"])),
    ca_cert=dict(type="path", aliases=["ssl_ca_cert"],
                 fallback=(env_fallback, ["K8S_AUTH_CA_CERT", "K8S_AUTH_SSL_CA_CERT"])),
    client_cert=dict(type="path", aliases=["cert_file"],
                     fallback=(env_fallback, ["K8S_AUTH_CLIENT_CERT", "K8S_AUTH_CERT_FILE"])),
    client_key=dict(type="path", aliases=["key_file"], no_log=False,
                    fallback=(env_fallback, ["K8S_AUTH_CLIENT_KEY", "K8S_AUTH_KEY_FILE"])),
    proxy=dict(type="str", fallback=(env_fallback, ["K8S_AUTH_PROXY"])),
    no_proxy=dict(type="str", fallback=(env_fallback, ["K8S_AUTH_NO_PROXY"])),
    proxy_headers=dict(type="dict", options=dict(
        proxy_basic_auth=dict(type="str", no_log=True),
        basic_auth=dict(type="str", no_log=True),
        user_agent=dict(type="str"),
    )),
    impersonate_user=dict(type="str", fallback=(env_fallback, ["K8S_AUTH_IMPERSONATE_USER"])),
    impersonate_groups=dict(type="list", elements="str", fallback=(env_fallback, ["K8S_AUTH_IMPERSONATE_GROUPS"])),
    request_timeout=dict(type="float", default=DEFAULT_REQUEST_TIMEOUT,
                         fallback=(env_fallback, ["K8S_AUTH_REQUEST_TIMEOUT"])),
)
# proxy_headers, when the option is not given: from K8S_AUTH_PROXY_HEADERS_<SUBOPTION> as kubernetes.core reads them
PROXY_HEADER_KEYS = ("proxy_basic_auth", "basic_auth", "user_agent")

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
DEFAULT_RETRIES = 5
DEFAULT_PAGE_SIZE = 500
MAX_DELAY = 60.0
# A request never gets less time than this, also when the caller's deadline is (nearly) spent.
MIN_REQUEST_TIMEOUT = 1.0


class K8sError(ApiError):
    """A failure talking to the API, with a one-line message for the user (``status``: the HTTP status)."""


def one_line(text):
    """``text`` with every run of white space (newlines included) as one space."""
    return " ".join(str(text).split())


# ---------------------------------------------------------------------------------------------- options
def _proxy_headers(params):
    """The proxy_headers option, else the K8S_AUTH_PROXY_HEADERS_* environment variables, as HTTP headers."""
    given = params.get("proxy_headers")
    if given is None:
        given = {}
        for key in PROXY_HEADER_KEYS:
            value = os.environ.get("K8S_AUTH_PROXY_HEADERS_%s" % key.upper())
            if value is not None:
                given[key] = value
    given = dict((key, value) for key, value in (given or {}).items() if value is not None)
    return make_headers(**given) if given else None


def check_options(params):
    """Raise ``InputError`` for a connection option that cannot work, naming it; files are checked later."""
    timeout = params.get("request_timeout")
    if timeout is not None and not timeout > 0:
        raise InputError("request_timeout must be more than 0 seconds, not %s" % timeout)
    host = params.get("host")
    if host is not None and not re.match(r"^https?://[^/\s]+", host):
        raise InputError("host must be the API server's URL, such as https://k8s.example.com:6443, not %r" % host)
    proxy = params.get("proxy")
    if proxy is not None and not re.match(r"^(https?|socks5h?)://[^/\s]+", proxy):
        raise InputError("proxy must be a URL, such as http://proxy.example.com:3128, not %r" % proxy)
    if params.get("impersonate_groups") and not params.get("impersonate_user"):
        raise InputError("impersonate_groups needs impersonate_user: Kubernetes impersonates groups only of a user")
    for option in ("ca_cert", "client_cert", "client_key"):
        path = params.get(option)
        if path and not os.path.isfile(path):
            raise InputError("%s %s %s" % (option, path, "is not a file" if os.path.exists(path) else "does not exist"))


def _check_tls(where, ca_file=None, ca_data=None, cert_file=None, key_file=None):
    """Load the CA and the client certificate and key as the TLS layer will; InputError naming ``where``."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        if ca_file or ca_data:
            context.load_verify_locations(cafile=ca_file, cadata=ca_data)
    except (ssl.SSLError, ValueError, OSError) as exc:
        raise InputError("%s: the CA certificate %s is not a PEM certificate (%s)"
                         % (where, ca_file or "data", one_line(exc)))
    if cert_file or key_file:
        if not (cert_file and key_file):
            raise InputError("%s: a client certificate needs its key, and a key its certificate" % where)
        try:
            # a key protected by a passphrase is refused here rather than prompted for
            context.load_cert_chain(cert_file, key_file, password=lambda: b"")
        except (ssl.SSLError, ValueError, OSError) as exc:
            raise InputError("%s: the client certificate %s and key %s cannot be used together (%s): both must be "
                             "PEM, the key without passphrase and matching the certificate"
                             % (where, cert_file, key_file, one_line(exc)))


# ---------------------------------------------------------------------------------------------- kubeconfig
def default_kubeconfig():
    """The kubeconfig used when none is named: the first file of ``$KUBECONFIG``, else ``~/.kube/config``."""
    return os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")


def read_kubeconfig(path):
    """The kubeconfig at ``path`` as a dict; InputError naming the file and what is wrong with it.

    The message never quotes the file's content (it holds credentials).
    """
    if not os.path.exists(path):
        raise InputError("kubeconfig %s does not exist" % path)
    if not os.path.isfile(path):
        raise InputError("kubeconfig %s is not a file" % path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except (IOError, OSError) as exc:
        raise InputError("kubeconfig %s cannot be read: %s" % (path, exc.strerror or one_line(exc)))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError("kubeconfig %s is not a text file (not UTF-8 at byte %d): is it the right file?"
                         % (path, exc.start))
    try:
        # libyaml's safe loader when there is one (ten times faster: the module runs once per task)
        doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # nosec: a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = " at line %d, column %d" % (mark.line + 1, mark.column + 1) if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc.__class__.__name__
        raise InputError("kubeconfig %s is not valid YAML%s: %s" % (path, where, one_line(problem)))
    if doc is None:
        raise InputError("kubeconfig %s is empty" % path)
    if not isinstance(doc, dict):
        raise InputError("kubeconfig %s is not a kubeconfig: it holds a %s, not a mapping with clusters, contexts "
                         "and users" % (path, _type_name(doc)))
    return doc


def _type_name(value):
    return {dict: "mapping", list: "list", str: "string", bool: "boolean", int: "number",
            float: "number"}.get(type(value), type(value).__name__)


def _named(doc, path, section):
    """``{name: entry}`` of a kubeconfig section (``clusters``, ``contexts``, ``users``)."""
    entries = doc.get(section)
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise InputError("kubeconfig %s: %s must be a list, not a %s" % (path, section, _type_name(entries)))
    out = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise InputError("kubeconfig %s: %s[%d] must be a mapping with a name" % (path, section, index))
        out[entry["name"]] = entry
    return out


def _section(entry, key, path, what):
    value = entry.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError("kubeconfig %s: %s must be a mapping, not a %s" % (path, what, _type_name(value)))
    return dict(value)


def _resolve_file(entry, key, base, path, what):
    """Make ``entry[key]`` (a file the kubeconfig names) absolute, relative to the kubeconfig's folder; must exist."""
    value = entry.get(key)
    if not value:
        return None
    if not isinstance(value, str):
        raise InputError("kubeconfig %s: %s %s must be a file name" % (path, what, key))
    full = value if os.path.isabs(value) else os.path.join(base, value)
    if not os.path.isfile(full):
        raise InputError("kubeconfig %s: the %s file %s of %s does not exist" % (path, key, full, what))
    entry[key] = full
    return full


def _decode_data(entry, key, path, what):
    value = entry.get(key)
    if value is None:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (TypeError, ValueError, binascii.Error):
        raise InputError("kubeconfig %s: %s of %s is not base64" % (path, key, what))


def kubeconfig_for(doc, path, params):
    """The kubeconfig to load: the context chosen (``context``, else current-context) with its cluster and user
    only, every connection option given written over its part of them, files made absolute and checked.

    With the options inside the kubeconfig, the library's loader keeps them: it re-applies the kubeconfig
    before each request to refresh credentials. Raises InputError naming the file and what is wrong.
    """
    context = params.get("context")
    contexts = _named(doc, path, "contexts")
    clusters = _named(doc, path, "clusters")
    users = _named(doc, path, "users")
    name = context or doc.get("current-context")
    if not name:
        raise InputError("kubeconfig %s has no current-context: name one with context (contexts: %s)"
                         % (path, ", ".join(sorted(contexts)) or "none"))
    if name not in contexts:
        raise InputError("kubeconfig %s has no context %s (contexts: %s)"
                         % (path, name, ", ".join(sorted(contexts)) or "none"))
    ctx = _section(contexts[name], "context", path, "context %s" % name)
    cluster_name = ctx.get("cluster")
    if not cluster_name:
        raise InputError("kubeconfig %s: context %s names no cluster" % (path, name))
    if cluster_name not in clusters:
        raise InputError("kubeconfig %s: context %s names cluster %s, which the file does not define"
                         % (path, name, cluster_name))
    what = "cluster %s" % cluster_name
    cluster = _section(clusters[cluster_name], "cluster", path, what)
    user_name = ctx.get("user")
    user = {}
    if user_name:
        if user_name not in users:
            raise InputError("kubeconfig %s: context %s names user %s, which the file does not define"
                             % (path, name, user_name))
        user = _section(users[user_name], "user", path, "user %s" % user_name)
    base = os.path.dirname(os.path.abspath(path))

    if params.get("host"):
        cluster["server"] = params["host"].rstrip("/")
    if not cluster.get("server"):
        raise InputError("kubeconfig %s: %s has no server (or give host)" % (path, what))
    if params.get("ca_cert"):
        cluster.pop("certificate-authority-data", None)
        cluster["certificate-authority"] = os.path.abspath(params["ca_cert"])
    if params.get("validate_certs") is not None:
        cluster["insecure-skip-tls-verify"] = not params["validate_certs"]
    if params.get("proxy"):
        cluster.pop("proxy-url", None)  # set on the configuration itself
    if params.get("api_key"):
        # the token replaces the user's other credentials (a client certificate stays, as with kubectl --token)
        for key in ("token", "tokenFile", "exec", "auth-provider", "username", "password"):
            user.pop(key, None)
        user["token"] = params["api_key"]
    for option, key in (("client_cert", "client-certificate"), ("client_key", "client-key")):
        if params.get(option):
            user.pop(key + "-data", None)
            user[key] = os.path.abspath(params[option])

    user_what = "user %s" % (user_name or "(none)")
    ca_file = _resolve_file(cluster, "certificate-authority", base, path, what)
    ca_data = _decode_data(cluster, "certificate-authority-data", path, what)
    cert_file = _resolve_file(user, "client-certificate", base, path, user_what)
    key_file = _resolve_file(user, "client-key", base, path, user_what)
    _resolve_file(user, "tokenFile", base, path, user_what)
    command = (user.get("exec") or {}).get("command") if isinstance(user.get("exec"), dict) else None
    if isinstance(command, str) and os.sep in command and not os.path.isabs(command):
        # as kubectl: an exec plugin's command with a path is relative to the kubeconfig's folder
        user["exec"] = dict(user["exec"], command=os.path.join(base, command))
    cert_data = _decode_data(user, "client-certificate-data", path, user_what)
    key_data = _decode_data(user, "client-key-data", path, user_what)
    if (cert_file or cert_data) and not (key_file or key_data) or (key_file or key_data) and not (cert_file or cert_data):
        raise InputError("kubeconfig %s: %s has a client certificate without its key, or a key without its "
                         "certificate" % (path, user_what))
    if (ca_file or ca_data) and not cluster.get("insecure-skip-tls-verify"):
        _check_tls("kubeconfig %s, %s" % (path, what), ca_file=ca_file,
                   ca_data=ca_data.decode("ascii", "replace") if ca_data else None)
    if cert_file and key_file:
        _check_tls("kubeconfig %s, %s" % (path, user_what), cert_file=cert_file, key_file=key_file)

    user_name = user_name or ("kubegpu-options" if user else None)
    ctx = dict(ctx, cluster=cluster_name)
    loadable = {"apiVersion": "v1", "kind": "Config", "current-context": name,
                "clusters": [{"name": cluster_name, "cluster": cluster}],
                "contexts": [{"name": name, "context": ctx}], "users": []}
    if user_name:
        ctx["user"] = user_name
        loadable["users"] = [{"name": user_name, "user": user}]
    return loadable


# ---------------------------------------------------------------------------------------------- client
class _RepeatedHeader(str):
    """A header name that may be sent several times (one ``Impersonate-Group`` header per group).

    Default headers are a dict: each name compares equal only to itself, so the dict keeps one entry per
    group and the HTTP layer sends each; kubernetes.core's ``client.py`` (``unique_string``) does the same.
    """

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    def lower(self):
        return self


def get_api_client(params, pool_size=None):
    """An ``ApiClient`` from the module's connection options (``AUTH_ARG_SPEC``).

    The base is a kubeconfig: the one named (``kubeconfig``), else with ``context`` or without ``host``
    the first file of ``$KUBECONFIG`` or ``~/.kube/config``; with neither and no ``host``, the in-cluster
    service account. ``host`` alone (no kubeconfig named) reads no file. Every option given then
    overrides its part of that base: ``host`` the server, ``api_key`` the credentials, ``ca_cert``,
    ``validate_certs``, ``client_cert``/``client_key``, ``proxy``/``no_proxy``/``proxy_headers``, and
    ``impersonate_user``/``impersonate_groups`` add the impersonation headers. A kubeconfig or option
    that cannot work raises ``InputError`` naming it. ``pool_size``: keep at least that many connections
    open to the API server (one per thread that sends requests at the same time).
    """
    check_options(params)
    cfg = k8s.Configuration()
    kubeconfig = params.get("kubeconfig")
    host = params.get("host")
    loaded = False
    if kubeconfig or params.get("context") or not host:
        path = kubeconfig or default_kubeconfig()
        if kubeconfig or params.get("context") or os.path.exists(path):
            doc = kubeconfig_for(read_kubeconfig(path), path, params)
            try:
                k8s_config.load_kube_config_from_dict(config_dict=doc, context=doc["current-context"],
                                                      client_configuration=cfg, persist_config=False)
            except ConfigException as exc:
                raise InputError("kubeconfig %s cannot be used: %s" % (path, one_line(exc)))
            loaded = True
        elif not host:
            try:
                # with options to keep, the service account's token is not re-read before each request
                k8s_config.load_incluster_config(client_configuration=cfg, try_refresh_token=not (
                    params.get("api_key") or params.get("ca_cert")))
            except ConfigException:
                raise InputError("no Kubernetes connection: give kubeconfig or host (or K8S_AUTH_KUBECONFIG / "
                                 "K8S_AUTH_HOST), or run in a pod with a service account")
    if not loaded:
        # no kubeconfig: the options are the whole configuration
        if host:
            cfg.host = host.rstrip("/")
        if params.get("api_key"):
            cfg.api_key = {"authorization": "Bearer %s" % params["api_key"]}
            cfg.api_key_prefix = {}
        if params.get("validate_certs") is not None:
            cfg.verify_ssl = params["validate_certs"]
        if params.get("ca_cert"):
            cfg.ssl_ca_cert = params["ca_cert"]
        if params.get("client_cert") or params.get("client_key"):
            cfg.cert_file = params.get("client_cert")
            cfg.key_file = params.get("client_key")
        if cfg.verify_ssl and cfg.ssl_ca_cert:
            _check_tls("ca_cert", ca_file=cfg.ssl_ca_cert)
        if cfg.cert_file or cfg.key_file:
            _check_tls("client_cert/client_key", cert_file=cfg.cert_file, key_file=cfg.key_file)
    if params.get("proxy"):
        cfg.proxy = params["proxy"]
    else:
        # Resolve the proxy (the kubeconfig's proxy-url, else the environment's) once: kubernetes >= 35
        # re-reads the environment whenever the host is set, which the kubeconfig loader's credential
        # refresh does before every request.
        cfg.proxy = cfg.proxy
    if params.get("no_proxy"):
        cfg.no_proxy = params["no_proxy"]
    headers = _proxy_headers(params)
    if headers:
        cfg.proxy_headers = headers
    if pool_size and (cfg.connection_pool_maxsize or 0) < pool_size:
        # urllib3 keeps at most this many connections: more threads would open (and TLS-handshake)
        # a new one for many of their requests and drop it again
        cfg.connection_pool_maxsize = pool_size
    # urllib3 retries nothing by itself (it would retry timed-out reads and 413/429/503 answers unseen):
    # ApiSession retries, counted and bounded. An idle connection the server closed is replaced anyway.
    cfg.retries = Retry(0, respect_retry_after_header=False)
    client = k8s.ApiClient(configuration=cfg)
    if params.get("impersonate_user"):
        client.set_default_header("Impersonate-User", params["impersonate_user"])
        for group in params.get("impersonate_groups") or []:
            client.set_default_header(_RepeatedHeader("Impersonate-Group"), group)
    return client


class _PathDiscoverer:
    """The discoverer of a ``DynamicClient`` that only sends requests by path (``DynamicClient.request``).

    The library's default (``LazyDiscoverer``) asks the server for its API groups when the client is
    made, without a timeout, and caches them in a file; the requests here name their path, so nothing
    needs discovering. (kubernetes.core passes its own discoverer the same way.)
    """

    def __init__(self, client, cache_file=None):
        self.client = client


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
    """The API's own message from a Status body, else a short plain-text body, else the HTTP reason; one line."""
    message = None
    body = exc.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        message = json.loads(body).get("message")
    except (TypeError, ValueError, AttributeError):
        if isinstance(body, str) and 0 < len(body.strip()) <= 200:
            message = body.strip()
    reason = exc.reason or ""
    return one_line("%s %s%s" % (exc.status, reason, ": %s" % message if message else ""))


def seconds(value):
    """``2s``, ``2.5s``: a number of seconds for a message."""
    return ("%.1f" % value).rstrip("0").rstrip(".") + "s"


def is_retriable(status):
    return status == 429 or (status is not None and 500 <= status <= 599)


def _tls_hint(text):
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
        return (" (the server's certificate is not signed by the CA of the kubeconfig or ca_cert, or names "
                "another host; validate_certs: false skips the check)")
    if "UNKNOWN_CA" in text or "unknown ca" in text or "bad certificate" in text.lower():
        return " (the server refused the client certificate: client_cert / client_key)"
    if "WRONG_VERSION_NUMBER" in text or "wrong version number" in text:
        return " (is the server's URL http:// rather than https://?)"
    return ""


class ApiSession:
    """Requests by path through ``DynamicClient.request``: counted by verb, timed out, retried, failures as
    ``K8sError``.

    ``retries``: how many times one request is retried after a 429 or 5xx answer, a timeout or a dropped
    connection before it fails. The delay before a retry is the answer's ``Retry-After`` when given,
    else ``backoff * 2**attempt``, capped at ``max_delay`` seconds; a request that timed out is sent
    again at once. ``request_timeout``: seconds to connect and, once sent, between bytes of the answer.
    ``deadline`` (``within()``): a time (``clock()``) after which no retry starts, and that no request's
    timeout reaches past (every request still gets at least ``MIN_REQUEST_TIMEOUT``). Requests may be
    sent from several threads at once (``counts`` stays exact; a retry delays only its thread).
    """

    def __init__(self, api_client, retries=DEFAULT_RETRIES, backoff=0.5, max_delay=MAX_DELAY, sleep=time.sleep,
                 page_size=DEFAULT_PAGE_SIZE, request_timeout=DEFAULT_REQUEST_TIMEOUT, clock=time.monotonic):
        self.api_client = api_client
        self.client = DynamicClient(api_client, discoverer=_PathDiscoverer)
        self.host = api_client.configuration.host
        self.retries = retries
        self.backoff = backoff
        self.max_delay = max_delay
        self.sleep = sleep
        self.page_size = page_size
        self.request_timeout = float(request_timeout)
        self.clock = clock
        self.deadline = None
        self.counts = {}
        self._counts_lock = threading.Lock()

    def within(self, seconds):
        """From now on, no retry starts and no request waits past ``seconds`` from now (None: no bound)."""
        self.deadline = None if seconds is None else self.clock() + seconds

    def _timeout(self):
        timeout = self.request_timeout
        if self.deadline is not None:
            timeout = min(timeout, max(self.deadline - self.clock(), MIN_REQUEST_TIMEOUT))
        return timeout

    def _may_retry(self, attempt, delay):
        if attempt >= self.retries:
            return False
        return self.deadline is None or self.clock() + delay < self.deadline

    def request(self, verb, what, method, path, query=None, body=None, content_type=None, accept="application/json",
                decode="json", missing_ok=False, exists_ok_on_retry=False):
        """One API request with retries; its answer as JSON (``decode="text"``: as a string, ``decode=None``:
        read but not decoded, None returned).

        ``verb``: what it counts as (``list``, ``get``, ``patch``, ...); ``what``: what the request does,
        for messages ("listing nodes"). ``missing_ok``: a 404 answer returns None instead of failing.
        ``exists_ok_on_retry``: a create answered 409 after an earlier attempt of it (which timed out or
        failed on the server's side, but went through) returns None.
        """
        attempt = 0
        while True:
            with self._counts_lock:
                self.counts[verb] = self.counts.get(verb, 0) + 1
            timeout = self._timeout()
            try:
                response = self.client.request(
                    method, path, body=body, query_params=list(query or []), header_params={"Accept": accept},
                    content_type=content_type, serialize=False, _request_timeout=(timeout, timeout))
                data = response.data
                if not decode:
                    return None
                if isinstance(data, bytes):
                    data = data.decode("utf-8", "replace")
                return data if decode == "text" else json.loads(data)
            except ApiException as exc:
                status = exc.status
                if missing_ok and status == 404:
                    return None
                if exists_ok_on_retry and attempt and status == 409:
                    return None
                if not status:  # a TLS failure, as the library reports it (no HTTP answer)
                    text = one_line(exc.reason or exc)
                    raise K8sError("%s failed: TLS error with the API server at %s: %s%s"
                                   % (what, self.host, text, _tls_hint(text)))
                if is_retriable(status):
                    delay = retry_after(exc.headers)
                    if delay is None:
                        delay = self.backoff * (2 ** attempt)
                    delay = min(delay, self.max_delay)
                    if self._may_retry(attempt, delay):
                        self.sleep(delay)
                        attempt += 1
                        continue
                suffix = " after %d attempts" % (attempt + 1) if attempt else ""
                message = api_error_message(exc)
                if status == 400 and "HTTP request to an HTTPS server" in message:
                    message += " (the server's URL starts with https://)"
                elif status == 401:
                    message += (" (the API server does not accept the credentials: the token, client certificate "
                                "or exec plugin of the kubeconfig's user, or api_key)")
                raise K8sError("%s failed%s: %s" % (what, suffix, message), status=status)
            except Urllib3Error as exc:
                reason = getattr(exc, "reason", None) or exc
                # (urllib3's NewConnectionError, a refused connection, is a ConnectTimeoutError too)
                if isinstance(reason, (ReadTimeoutError, ConnectTimeoutError)) and not isinstance(
                        reason, NewConnectionError):
                    if self._may_retry(attempt, 0):
                        attempt += 1
                        continue
                    raise K8sError("%s failed: the API server at %s did not answer within %s (request_timeout)%s"
                                   % (what, self.host, seconds(timeout),
                                      ", %d attempts" % (attempt + 1) if attempt else ""), kind="timeout")
                if isinstance(reason, ProtocolError) and not isinstance(reason, ProxyError):
                    delay = min(self.backoff * (2 ** attempt), self.max_delay)
                    if self._may_retry(attempt, delay):
                        self.sleep(delay)
                        attempt += 1
                        continue
                    raise K8sError("%s failed: the API server at %s closed the connection without answering%s: %s"
                                   % (what, self.host, " (%d attempts)" % (attempt + 1) if attempt else "",
                                      one_line(reason)))
                raise K8sError("%s failed: %s" % (what, self._unreachable(reason)))
            except ValueError as exc:
                raise K8sError("%s failed: the API server's answer is not JSON: %s" % (what, one_line(exc)))

    def _unreachable(self, reason):
        if isinstance(reason, ProxyError):
            return "cannot reach the API server at %s through the proxy: %s" % (self.host, one_line(reason))
        if isinstance(reason, NewConnectionError):
            text = one_line(reason)
            text = text.split("Failed to establish a new connection: ", 1)[-1]
            return "cannot connect to the API server at %s: %s" % (self.host, text)
        if isinstance(reason, Urllib3SSLError):
            text = one_line(reason)
            return "TLS error with the API server at %s: %s%s" % (self.host, text, _tls_hint(text))
        return "cannot reach the API server at %s: %s" % (self.host, one_line(reason))

    def list_all(self, what, path, field_selector=None, label_selector=None):
        """Every object of a listing, in pages of ``page_size``: one request unless there are more."""
        items = []
        token = None
        while True:
            query = [("limit", self.page_size)]
            if field_selector:
                query.append(("fieldSelector", field_selector))
            if label_selector:
                query.append(("labelSelector", label_selector))
            if token:
                query.append(("continue", token))
            page = self.request("list", what, "GET", path, query=query)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    def patch_node(self, name, body):
        """Apply a strategic-merge patch to a node; returns None (the node the API answers with is not decoded)."""
        return self.request("patch", "patching node %s" % name, "PATCH", "/api/v1/nodes/%s" % quote(name),
                            body=body, content_type=STRATEGIC_MERGE_PATCH, decode=None)


def quote(name):
    """A name as one URL path segment."""
    return _quote(name, safe="")


class NodeAPI(ApiSession):
    """List and read nodes, and patch them (``ApiSession.patch_node``)."""

    def list_nodes(self, field_selector=None):
        """Every node (or those ``field_selector`` selects) as API dicts, in pages of ``page_size``."""
        return self.list_all("listing nodes", "/api/v1/nodes", field_selector=field_selector)

    def get_node(self, name):
        """The node as an API dict."""
        return self.request("get", "reading node %s" % name, "GET", "/api/v1/nodes/%s" % quote(name))
