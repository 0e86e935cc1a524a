"""HTTP(S) front of the Kubernetes API test server."""

import base64
import json
import os
import re
import secrets
import select
import socket
import ssl
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import yaml

from . import admission, errors, kubelet, resources, tables
from .errors import ApiError
from .resources import BY_PATH
from .store import Store, clone

SERVER_VERSION = {
    "major": "1", "minor": "34", "gitVersion": "v1.34.2", "gitCommit": "8cc511e399b929453cd98ae65b419c3cc227ec79",
    "gitTreeState": "clean", "buildDate": "2025-11-11T19:04:47Z", "goVersion": "go1.24.9",
    "compiler": "gc", "platform": "linux/amd64",
}
PUBLIC_PATHS = ("/version", "/healthz", "/livez", "/readyz")
# What Go's net/http (kube-apiserver) answers when a client speaks plain HTTP to its TLS port.
PLAIN_HTTP_ON_TLS_ANSWER = (b"HTTP/1.0 400 Bad Request\r\n\r\n"
                            b"Client sent an HTTP request to an HTTPS server.\n")
ADMIN_GROUP = "system:masters"
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
READ_VERBS = ("get", "list", "watch")


class _NoAnswer(Exception):
    """A request the server leaves without an answer (a "hang" fault); the connection is closed."""


class _PlainHTTP(Exception):
    """Plain HTTP on the TLS port: answered 400 and closed, as Go's net/http does."""


class Fault:
    def __init__(self, method=None, path_regex=".*", status=None, retry_after=None, times=1,
                 delay=None, message=None, hang=False):
        self.method = method.upper() if method else None
        self.path_regex = path_regex or ".*"
        self.pattern = re.compile(self.path_regex)
        self.status = status
        self.retry_after = retry_after
        self.times = times  # None or 0: every matching request
        self.delay = delay
        self.message = message
        self.hang = bool(hang)  # never answer: hold the request until the client or the server gives up
        self.fired = 0

    def matches(self, method, path):
        return (self.method is None or self.method == method) and self.pattern.match(path) is not None

    def spent(self):
        return bool(self.times) and self.fired >= self.times

    def describe(self):
        return {"method": self.method, "path_regex": self.path_regex, "status": self.status,
                "retry_after": self.retry_after, "times": self.times, "delay": self.delay,
                "hang": self.hang, "fired": self.fired}


def _parse_path(path, served=None):
    """(res, namespace, name, subresource) for a resource URL, or None; ``served(res)`` False: not found."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if not rest:
        return None
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3 and (group, version, rest[2]) in BY_PATH:
        namespace, rest = rest[1], rest[2:]
    res = BY_PATH.get((group, version, rest[0]))
    if res is None or (served is not None and not served(res)):
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    if namespace is not None and not res.namespaced:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if len(rest) > 3 or (sub is not None and sub not in res.subresources):
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    return res, namespace, name, sub


def _delete_answer(res, obj):
    """What DELETE answers: the object for pods (graceful) and namespaces (finalized), else a Status."""
    if res.name == "pods":
        obj["metadata"].setdefault("deletionTimestamp", obj["metadata"].get("creationTimestamp"))
        obj["metadata"].setdefault("deletionGracePeriodSeconds",
                                   obj["spec"].get("terminationGracePeriodSeconds", 30))
        return obj
    if res.name == "namespaces":
        obj["metadata"].setdefault("deletionTimestamp", obj["metadata"].get("creationTimestamp"))
        obj["status"] = {"phase": "Terminating"}
        return obj
    if obj["metadata"].get("finalizers"):
        return obj
    details = {"name": obj["metadata"]["name"], "kind": res.name, "uid": obj["metadata"]["uid"]}
    if res.group:
        details["group"] = res.group
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kubeapi-test"
    # TCP_NODELAY as Go's net/http sets it: an answer written in pieces does not wait for delayed ACKs
    disable_nagle_algorithm = True
    # Answers are buffered and sent whole when the request is done (headers and a small body in one
    # write, one TLS record), as Go's net/http buffers them; a watch flushes what it streams.
    wbufsize = 64 * 1024

    def log_message(self, format, *args):  # noqa: A002  (quiet)
        pass

    def setup(self):
        """TLS: answer plain HTTP with 400 as Go's net/http does; else the handshake, in this connection's thread."""
        self.peer_cert = None
        if isinstance(self.request, ssl.SSLSocket):
            # the first byte of a TLS connection is a handshake record (0x16); read it without taking it
            first = socket.socket.recv(self.request, 1, socket.MSG_PEEK)
            if first and first != b"\x16":
                socket.socket.sendall(self.request, PLAIN_HTTP_ON_TLS_ANSWER)
                raise _PlainHTTP()
            self.request.do_handshake()
            # a client certificate the CA signed (None without one: the server asks, a client may decline)
            self.peer_cert = self.request.getpeercert() or None
        super().setup()

    def handle_expect_100(self):
        # the interim answer goes out now, not with the final one
        result = super().handle_expect_100()
        self.wfile.flush()
        return result

    # ---------------------------------------------------------------- plumbing
    @property
    def api(self):
        return self.server.api

    def _send(self, code, body, content_type="application/json", headers=None):
        data = body if isinstance(body, bytes) else (
            body.encode() if isinstance(body, str) else json.dumps(body).encode())
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for key, value in (headers or {}).items():
            self.send_header(key, str(value))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        try:
            if ctype.endswith("yaml"):
                return yaml.safe_load(raw)
            return json.loads(raw)
        except ValueError as exc:
            raise errors.bad_request("couldn't decode the request body: %s" % exc) from None

    def do_GET(self):  # noqa: N802
        self._dispatch("GET")

    def do_POST(self):  # noqa: N802
        self._dispatch("POST")

    def do_PUT(self):  # noqa: N802
        self._dispatch("PUT")

    def do_PATCH(self):  # noqa: N802
        self._dispatch("PATCH")

    def do_DELETE(self):  # noqa: N802
        self._dispatch("DELETE")

    def _dispatch(self, method):
        self._body_read = False
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        query = dict(parse_qs(url.query, keep_blank_values=True))
        record = {"method": method, "path": path, "verb": None, "resource": None, "code": None,
                  "user": None, "time": time.time()}
        try:
            if path.startswith("/_test/"):
                self._test_endpoint(method, path)
                return
            user = self._impersonate(self._authenticate(path))
            record["user"] = user
            target = None if path in PUBLIC_PATHS else _parse_path(path, self.api.served)
            if target is not None:
                record["verb"] = self._verb(method, target, query)
                record["resource"] = target[0].name + ("/" + target[3] if target[3] else "")
            self.api._record(record)
            self._apply_faults(method, path)
            if target is None:
                self._discovery(method, path)
                record["code"] = 200
                return
            self._authorize(user, record["verb"], target)
            self._resource(method, target, query, record)
        except _NoAnswer:
            self.close_connection = True
        except ApiError as exc:
            record["code"] = exc.code
            if exc.code in (400, 401, 403):
                self.api._record(record)
            try:
                self._drain_body()
            except Exception:  # noqa: BLE001
                pass
            self._send(exc.code, exc.status(), headers=exc.headers)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _drain_body(self):
        if not getattr(self, "_body_read", False):
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            self._body_read = True

    def _read_body(self):
        self._body_read = True
        return self._body()

    # ---------------------------------------------------------------- auth
    def _authenticate(self, path):
        """The user: from a client certificate the CA signed (first, as kube-apiserver's x509 authenticator
        comes first), else from the bearer token."""
        if self.peer_cert:
            return _certificate_user(self.peer_cert)
        header = self.headers.get("Authorization") or ""
        token = header[7:].strip() if header.lower().startswith("bearer ") else None
        user = self.api._users.get(token) if token else None
        if user is None:
            if path in PUBLIC_PATHS and not token:
                return None
            raise errors.unauthorized()
        return user

    def _impersonate(self, user):
        """``Impersonate-User`` / ``Impersonate-Group`` headers, as kube-apiserver's impersonation filter.

        Only an admin may impersonate; the request then acts as the impersonated user, with the admin's
        rights only when the groups hold system:masters (else read-only, as a user without RBAC rules).
        """
        name = self.headers.get("Impersonate-User")
        groups = self.headers.get_all("Impersonate-Group") or []
        if name is None and not groups:
            return user
        if name is None:
            raise ApiError(400, "BadRequest", "requested %s without impersonating a user"
                           % ", ".join("{Group %s}" % group for group in groups))
        if user is None:
            raise errors.unauthorized()
        if not user["admin"]:
            raise ApiError(403, "Forbidden", 'users "%s" is forbidden: User "%s" cannot impersonate resource '
                           '"users" in API group "" at the cluster scope' % (name, user["name"]))
        return {"name": name, "admin": ADMIN_GROUP in groups, "groups": list(groups),
                "impersonated_by": user["name"]}

    def _verb(self, method, target, query):
        res, namespace, name, sub = target
        if method == "GET":
            if name is None:
                return "watch" if query.get("watch", [""])[0] in ("true", "1") else "list"
            return "get"
        if method == "POST":
            return "create"
        if method == "PUT":
            return "update"
        if method == "PATCH":
            return "patch"
        if method == "DELETE":
            return "delete" if name else "deletecollection"
        raise errors.method_not_allowed()

    def _authorize(self, user, verb, target):
        if user is None:
            raise errors.unauthorized()
        if user["admin"] or verb in READ_VERBS:
            return
        res, namespace, name, sub = target
        what = res.name + ("/" + sub if sub else "")
        scope = 'in the namespace "%s"' % namespace if namespace else "at the cluster scope"
        subject = '%s "%s"' % (res.qualified, name) if name else res.qualified
        raise errors.forbidden('%s is forbidden: User "%s" cannot %s resource "%s" in API group "%s" %s'
                               % (subject, user["name"], verb, what, res.group, scope), res, name)

    # ---------------------------------------------------------------- faults
    def _apply_faults(self, method, path):
        fault = self.api._take_fault(method, path)
        if fault is None:
            return
        if fault.delay:
            time.sleep(fault.delay)
        if fault.hang:
            self._hang()
            raise _NoAnswer()
        if fault.status:
            code = int(fault.status)
            reason = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
                      504: "Timeout", 409: "Conflict", 403: "Forbidden", 404: "NotFound"}.get(code, "Unknown")
            message = fault.message or {
                429: "the server has received too many requests and has asked us to try again later",
                500: "an error on the server (\"injected fault\") has prevented the request from succeeding",
            }.get(code, "injected fault")
            headers = {}
            details = None
            if fault.retry_after is not None:
                headers["Retry-After"] = str(fault.retry_after)
                details = {"retryAfterSeconds": int(fault.retry_after)}
            raise ApiError(code, reason, message, details, headers)

    def _hang(self):
        """Hold the connection without answering until the client closes it or the server stops."""
        self.connection.settimeout(0.2)
        while not self.api._stopping:
            try:
                ready = select.select([self.connection], [], [], 0.2)[0]
                if ready and not self.connection.recv(4096):
                    return  # the client gave up
            except (socket.timeout, ssl.SSLWantReadError):
                continue
            except (OSError, ValueError):
                return

    # ---------------------------------------------------------------- test endpoints
    def _test_endpoint(self, method, path):
        body = self._read_body() if method in ("POST", "PUT") else None
        if path == "/_test/faults":
            if method == "GET":
                self._send(200, {"faults": self.api.faults()})
            elif method == "POST":
                items = body if isinstance(body, list) else [body or {}]
                for item in items:
                    if item.get("clear"):
                        self.api.clear_faults()
                    else:
                        self.api.inject(**{k: v for k, v in item.items() if k != "clear"})
                self._send(200, {"faults": self.api.faults()})
            elif method == "DELETE":
                self.api.clear_faults()
                self._send(200, {"faults": []})
            else:
                raise errors.method_not_allowed()
        elif path == "/_test/requests":
            if method == "GET":
                self._send(200, {"counts": self.api.request_counts(), "requests": self.api.requests()})
            elif method in ("POST", "DELETE"):
                if method == "DELETE" or (body or {}).get("reset", True):
                    self.api.reset_counts()
                self._send(200, {"counts": self.api.request_counts()})
            else:
                raise errors.method_not_allowed()
        else:
            raise ApiError(404, "NotFound", "no such test endpoint")

    # ---------------------------------------------------------------- discovery
    def _discovery(self, method, path):
        if method != "GET":
            raise errors.method_not_allowed()
        if path == "/version":
            self._send(200, self.api.version)
        elif path in ("/healthz", "/livez", "/readyz"):
            self._send(200, "ok", "text/plain; charset=utf-8")
        elif path == "/api":
            self._send(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:%d" % self.api.port}]})
        elif path == "/apis":
            groups = []
            for group, versions in resources.group_versions(self.api.served).items():
                groups.append(self._group(group, versions))
            self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        elif path == "/api/v1":
            self._send(200, resources.resource_list("", "v1"))
        else:
            parts = [p for p in path.split("/") if p]
            served = self.api.served
            groups = resources.group_versions(served)
            if len(parts) == 2 and parts[0] == "apis" and parts[1] in groups:
                body = self._group(parts[1], groups[parts[1]])
                body.update({"kind": "APIGroup", "apiVersion": "v1"})
                self._send(200, body)
            elif len(parts) == 3 and parts[0] == "apis" and resources.resource_list(parts[1], parts[2], served):
                self._send(200, resources.resource_list(parts[1], parts[2], served))
            else:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")

    @staticmethod
    def _group(group, versions):
        items = [{"groupVersion": "%s/%s" % (group, v), "version": v} for v in versions]
        return {"name": group, "versions": items, "preferredVersion": items[0]}

    # ---------------------------------------------------------------- resources
    def _dry_run(self, query):
        values = query.get("dryRun") or []
        for value in values:
            if value != "All":
                raise errors.bad_request('dryRun: Unsupported value: "%s": supported values: "All"' % value)
        return bool(values)

    def _resource(self, method, target, query, record):
        res, namespace, name, sub = target
        verb = record["verb"]
        api = self.api
        store = api.store

        def q(key, default=None):
            return (query.get(key) or [default])[0]

        if verb == "watch":
            return self._watch(res, namespace, query)
        body = self._read_body() if method in ("POST", "PUT", "PATCH", "DELETE") else None
        dry_run = self._dry_run(query)
        if method == "PATCH" and (self.headers.get("Content-Type") or "").startswith("application/apply-patch"):
            raise ApiError(415, "UnsupportedMediaType",
                           "server-side apply is not supported by this test server")
        if res.namespaced and name is None and namespace is None and method == "POST":
            namespace = (body or {}).get("metadata", {}).get("namespace") if isinstance(body, dict) else None
            if namespace is None:
                raise errors.bad_request("the namespace of the object must be given")
        with store.lock:
            if store.dirty and (verb in READ_VERBS or sub in ("log", "eviction")):
                # reads see the settled cluster; writes do not wait for the controllers
                kubelet.reconcile(store)
            if sub == "log":
                return self._log(res, namespace, name, query)
            if sub == "eviction":
                return self._evict(res, namespace, name, body, dry_run)
            code = 200
            if verb == "list":
                # stored objects are replaced on write, never changed in place: no copy needed
                items, rv = store.list(res, namespace, q("labelSelector"), q("fieldSelector"),
                                       copy_items=False)
                limit = int(q("limit", "0") or 0)
                start = int(base64.b64decode(q("continue")).decode()) if q("continue") else 0
                meta = {"resourceVersion": rv}
                if limit and start + limit < len(items):
                    meta["continue"] = base64.b64encode(str(start + limit).encode()).decode()
                    meta["remainingItemCount"] = len(items) - start - limit
                    items = items[start:start + limit]
                elif start:
                    items = items[start:]
                out = {"kind": res.kind + "List", "apiVersion": res.group_version, "metadata": meta,
                       "items": items}
            elif verb == "get":
                out = store.get(res, namespace, name)
            elif verb == "create":
                if sub:
                    raise errors.method_not_allowed()
                out = store.create(res, namespace, body, dry_run=dry_run)
                code = 201
            elif verb == "update":
                out = store.update(res, namespace, name, body, dry_run=dry_run, subresource=sub)
            elif verb == "patch":
                out = store.patch(res, namespace, name, self.headers.get("Content-Type"), body,
                                  dry_run=dry_run, subresource=sub)
            elif verb == "delete":
                options = body if isinstance(body, dict) else {}
                if q("propagationPolicy"):
                    options["propagationPolicy"] = q("propagationPolicy")
                dry_run = dry_run or "All" in (options.get("dryRun") or [])
                out = store.delete(res, namespace, name, options, dry_run=dry_run)
                out = _delete_answer(res, out)
            elif verb == "deletecollection":
                items, _rv = store.list(res, namespace, q("labelSelector"), q("fieldSelector"))
                deleted = []
                for item in items:
                    try:
                        deleted.append(store.delete(res, item["metadata"].get("namespace"),
                                                    item["metadata"]["name"], body or {}, dry_run=dry_run))
                    except ApiError:
                        pass
                out = {"kind": res.kind + "List", "apiVersion": res.group_version,
                       "metadata": {"resourceVersion": str(store.rv)}, "items": deleted}
            else:
                raise errors.method_not_allowed()
            if verb in WRITE_VERBS and store.dirty and not dry_run:
                api._wake()
            if verb in ("list", "get") and tables.wants_table(self.headers.get("Accept")):
                objects = out["items"] if verb == "list" else [out]
                rv = out["metadata"].get("resourceVersion", "")
                table = tables.table(res, objects, rv, q("includeObject", "Metadata"))
                if verb == "list" and out["metadata"].get("continue"):
                    table["metadata"]["continue"] = out["metadata"]["continue"]
                out = table
        record["code"] = code
        self._send(code, out)

    def _log(self, res, namespace, name, query):
        store = self.api.store
        pod = store.get(res, namespace, name)
        containers = [c["name"] for c in pod["spec"].get("containers") or []]
        container = (query.get("container") or [None])[0]
        if container is None:
            if len(containers) != 1:
                raise errors.bad_request("a container name must be specified for pod %s, choose one of: [%s]"
                                         % (name, " ".join(containers)))
            container = containers[0]
        elif container not in containers:
            raise errors.bad_request("container %s is not valid for pod %s" % (container, name))
        if pod["status"].get("phase") == "Pending" or not pod["status"].get("containerStatuses"):
            raise errors.bad_request('container "%s" in pod "%s" is waiting to start: ContainerCreating'
                                     % (container, name))
        text = store.logs.get((namespace, name), "")
        tail = (query.get("tailLines") or [None])[0]
        if tail is not None:
            lines = text.splitlines(True)
            text = "".join(lines[-int(tail):]) if int(tail) else ""
        self._send(200, text, "text/plain")

    def _evict(self, res, namespace, name, body, dry_run):
        store = self.api.store
        pod = store.get(res, namespace, name)
        options = (body or {}).get("deleteOptions") or {}
        dry_run = dry_run or "All" in (options.get("dryRun") or [])
        phase = pod["status"].get("phase")
        if phase not in ("Succeeded", "Failed", "Pending") and not pod["metadata"].get("deletionTimestamp"):
            pdbs = [p for p in store.all(kubelet.PDBS, namespace)
                    if p["spec"].get("selector") is not None and kubelet.selectors.matches(
                        kubelet.selectors.selector_from_dict(p["spec"]["selector"]),
                        pod["metadata"].get("labels"))]
            if len(pdbs) > 1:
                raise ApiError(500, "InternalError", "This pod has more than one PodDisruptionBudget, "
                               "which the eviction subresource does not support.")
            if pdbs:
                status = kubelet.pdb_status(store, pdbs[0])
                if status["disruptionsAllowed"] <= 0:
                    raise ApiError(
                        429, "TooManyRequests",
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                        {"causes": [{"reason": "DisruptionBudget", "message":
                                     "The disruption budget %s needs %d healthy pods and has %d currently"
                                     % (pdbs[0]["metadata"]["name"], status["desiredHealthy"],
                                        status["currentHealthy"])}]})
        store.delete(res, namespace, name, options, dry_run=dry_run)
        if not dry_run:
            self.api._wake()
        self._send(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                         "code": 201})

    def _watch(self, res, namespace, query):
        store = self.api.store

        def q(key, default=None):
            return (query.get(key) or [default])[0]

        reqs = kubelet.selectors.parse_label_selector(q("labelSelector"))
        freqs = kubelet.selectors.parse_field_selector(q("fieldSelector"), res.name)
        timeout = float(q("timeoutSeconds", "0") or 0) or 1800.0
        deadline = time.time() + timeout
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

        as_table = tables.wants_table(self.headers.get("Accept"))

        def emit(kind, obj):
            if as_table:
                obj = tables.table(res, [obj], obj["metadata"].get("resourceVersion", ""),
                                   q("includeObject", "Metadata"))
            line = json.dumps({"type": kind, "object": obj}).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()

        def wanted(obj):
            if namespace is not None and obj["metadata"].get("namespace") != namespace:
                return False
            return kubelet.selectors.matches(reqs, obj["metadata"].get("labels")) and \
                kubelet.selectors.fields_match(freqs, obj)

        try:
            with store.lock:
                if store.dirty:
                    kubelet.reconcile(store)
                since = q("resourceVersion")
                if not since or since == "0":
                    items, _rv = store.list(res, namespace)
                    pending = [("ADDED", o) for o in items if wanted(o)]
                    since = store.rv
                else:
                    since = int(since)
                    pending = []
            for kind, obj in pending:
                emit(kind, obj)
            while time.time() < deadline and not self.api._stopping:
                with store.lock:
                    batch = [(rv, kind, obj) for rv, kind, r, obj in list(store.events)
                             if r is res and rv > since and wanted(obj)]
                    if not batch:
                        store.changed.wait(min(1.0, max(0.0, deadline - time.time())))
                        batch = [(rv, kind, obj) for rv, kind, r, obj in list(store.events)
                                 if r is res and rv > since and wanted(obj)]
                for rv, kind, obj in batch:
                    emit(kind, obj)
                    since = max(since, rv)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass
        self.close_connection = True


def _certificate_user(cert):
    """The user of a verified client certificate: common name = user, organizations = groups (x509 authenticator)."""
    name, groups = None, []
    for rdn in cert.get("subject") or ():
        for key, value in rdn:
            if key == "commonName":
                name = value
            elif key == "organizationName":
                groups.append(value)
    return {"name": name, "admin": ADMIN_GROUP in groups, "groups": groups}


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        import sys
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionResetError, BrokenPipeError, ssl.SSLError, TimeoutError, _PlainHTTP, OSError)):
            return
        super().handle_error(request, client_address)


class BlackHole:
    """A TCP port that accepts connections (the kernel completes the handshake) and never answers.

    An API server whose process hangs, or a load balancer that black-holes traffic, looks like this:
    a client connects, sends its TLS hello or request, and waits. ``url`` is ``https://127.0.0.1:<port>``.
    """

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)  # never accept(): connections wait in the backlog
        self.port = self.sock.getsockname()[1]
        self.url = "https://127.0.0.1:%d" % self.port

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class KubeAPIServer:
    """A Kubernetes API server for tests.

    `srv = KubeAPIServer(tls=True); srv.start(); srv.kubeconfig_path; srv.url; srv.token; srv.stop()`
    """

    def __init__(self, host="127.0.0.1", port=0, tls=True, token=None, readonly_token=None,
                 kubeconfig_path=None, admission_plugins=()):
        if host not in ("127.0.0.1", "localhost"):
            raise ValueError("the test server binds 127.0.0.1 only")
        self.host = "127.0.0.1"
        self.port = port
        self.tls = tls
        self.token = token or secrets.token_hex(16)
        self.readonly_token = readonly_token or secrets.token_hex(16)
        self.kubeconfig_path = kubeconfig_path
        self.store = Store()
        # what GET /version answers (a test may give another release, e.g. {"minor": "33", "gitVersion": "v1.33.5"})
        self.version = dict(SERVER_VERSION)
        # optional admission plugins (admission.py), off as in kube-apiserver unless named
        self.store.admission_plugins = admission.check_plugins(admission_plugins)
        self._users = {self.token: {"name": "kubeapi-admin", "admin": True},
                       self.readonly_token: {"name": "kubeapi-readonly", "admin": False}}
        self._faults = []
        self._log = []
        self._lock = threading.Lock()
        self._stopping = False
        self._httpd = None
        self._threads = []
        self._wake_event = threading.Event()
        self._last_write = 0.0
        self._tmpdir = None
        self.ca_path = None

    def served(self, res):
        """Whether a resource is served now: a custom resource only while its CustomResourceDefinition exists."""
        if not res.crd:
            return True
        return self.store.find(BY_PATH[("apiextensions.k8s.io", "v1", "customresourcedefinitions")], None,
                               res.crd) is not None

    # ---------------------------------------------------------------- lifecycle
    @property
    def url(self):
        return "%s://127.0.0.1:%d" % ("https" if self.tls else "http", self.port)

    def start(self):
        self._httpd = _HTTPServer((self.host, self.port), Handler)
        self._httpd.api = self
        self.port = self._httpd.server_address[1]
        if self.tls:
            from .tlsutil import certificate_files

            ca_path, cert_path, key_path = certificate_files()
            self.ca_path = ca_path
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert_path, key_path)
            # client certificates signed by the test CA authenticate (srv.client_certificate()); none is needed
            context.verify_mode = ssl.CERT_OPTIONAL
            context.load_verify_locations(ca_path)
            # the handshake happens in the connection's own thread: a client that connects and
            # sends nothing (a port probe) cannot stall the accept loop
            self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True,
                                                     do_handshake_on_connect=False)
        if self.kubeconfig_path is None:
            self._tmpdir = tempfile.mkdtemp(prefix="kubeapi-")
            self.kubeconfig_path = os.path.join(self._tmpdir, "kubeconfig")
        self.write_kubeconfig(self.kubeconfig_path)
        serve = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                 name="kubeapi-http", daemon=True)
        settle = threading.Thread(target=self._settle_loop, name="kubeapi-kubelet", daemon=True)
        self._threads = [serve, settle]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self):
        self._stopping = True
        self._wake_event.set()
        with self.store.lock:
            self.store.changed.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _wake(self):
        self._last_write = time.monotonic()
        self._wake_event.set()

    def _settle_loop(self):
        """Run the controllers once writes pause (at the latest 2 s after the first one).

        Reads settle the cluster by themselves; this makes it move without readers (watches).
        """
        while not self._stopping:
            self._wake_event.wait(1.0)
            self._wake_event.clear()
            first = time.monotonic()
            while not self._stopping and time.monotonic() - first < 2.0 \
                    and time.monotonic() - self._last_write < 0.2:
                time.sleep(0.05)
            if self._stopping:
                break
            with self.store.lock:
                if self.store.dirty:
                    kubelet.reconcile(self.store)

    def kubeconfig(self, token=None, user="kubeapi-admin"):
        cluster = {"server": self.url}
        if self.tls:
            with open(self.ca_path, "rb") as handle:
                cluster["certificate-authority-data"] = base64.b64encode(handle.read()).decode()
        return {
            "apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": "kubeapi", "cluster": cluster}],
            "users": [{"name": "kubeapi-admin", "user": {"token": token or self.token}},
                      {"name": "kubeapi-readonly", "user": {"token": self.readonly_token}}],
            "contexts": [{"name": "kubeapi", "context": {"cluster": "kubeapi", "user": user,
                                                         "namespace": "default"}},
                         {"name": "kubeapi-readonly", "context": {"cluster": "kubeapi",
                                                                  "user": "kubeapi-readonly",
                                                                  "namespace": "default"}}],
            "current-context": "kubeapi",
        }

    def write_kubeconfig(self, path, token=None, user="kubeapi-admin"):
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".kubeconfig-")
        with os.fdopen(fd, "w") as handle:
            yaml.safe_dump(self.kubeconfig(token, user), handle, default_flow_style=False)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
        return path

    def client_certificate(self, user="kubeapi-admin", groups=(ADMIN_GROUP,), trusted=True):
        """(cert_path, key_path) of a client certificate for ``user`` in ``groups`` (organizations).

        Signed by the server's CA, it authenticates as that user (an admin with system:masters);
        ``trusted=False``: signed by another CA, so the server refuses it in the TLS handshake.
        """
        from .tlsutil import client_certificate_files

        return client_certificate_files(user, tuple(groups), "kubeapi-test-ca" if trusted else "kubeapi-other-ca")

    # ---------------------------------------------------------------- fault injection
    def inject(self, method=None, path_regex=".*", status=None, retry_after=None, times=1, delay=None,
               message=None, hang=False):
        """Answer the next `times` matching requests with `status` (after `delay` seconds).

        ``hang=True``: never answer them; each is held until its client gives up (or the server stops).
        """
        fault = Fault(method, path_regex, status, retry_after, times, delay, message, hang)
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self):
        with self._lock:
            self._faults = []

    def faults(self):
        with self._lock:
            return [f.describe() for f in self._faults]

    def _take_fault(self, method, path):
        with self._lock:
            for fault in self._faults:
                if not fault.spent() and fault.matches(method, path):
                    fault.fired += 1
                    return fault
        return None

    # ---------------------------------------------------------------- request accounting
    def _record(self, record):
        with self._lock:
            if not record.get("_logged"):
                record["_logged"] = True
                self._log.append(record)

    def request_counts(self, resource=None):
        """{verb: n} over resource requests (discovery not counted), optionally one resource."""
        counts = {}
        with self._lock:
            for rec in self._log:
                if rec["verb"] and (resource is None or rec["resource"] == resource):
                    counts[rec["verb"]] = counts.get(rec["verb"], 0) + 1
        return counts

    def requests(self):
        with self._lock:
            return [{k: v for k, v in rec.items() if not k.startswith("_")} for rec in self._log]

    def reset_counts(self):
        with self._lock:
            self._log = []

    # ---------------------------------------------------------------- direct access for tests
    def settle(self):
        """Run the controllers now over every object (reads do this by themselves)."""
        with self.store.lock:
            kubelet.reconcile(self.store, full=True)

    def objects(self, resource, namespace=None):
        """A copy of the stored objects of a resource (plural name, e.g. "nodes")."""
        res = next(r for r in resources.RESOURCES if r.name == resource)
        with self.store.lock:
            if self.store.dirty:
                kubelet.reconcile(self.store)
            return clone(self.store.all(res, namespace))
