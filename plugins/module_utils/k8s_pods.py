# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Namespaces, pods, pod logs and node listings through the Kubernetes client's ``ApiClient``.

``PodAPI`` works like ``k8s_client.NodeAPI``: clients generated with ``param_serialize``
(kubernetes >= 35) are driven directly, older ones through ``CoreV1Api`` with
``_preload_content=False``; answers are read as plain JSON (logs as text); requests are counted by
verb; 429 and 5xx answers are retried with backoff, honouring ``Retry-After``; every failure is a
``K8sError`` with a one-line message.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time
from functools import partial

from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import (
    ApiException, K8sError, Urllib3Error, api_error_message, is_retriable, retry_after)

DEFAULT_RETRIES = 5
DEFAULT_PAGE_SIZE = 500
MAX_DELAY = 60.0


class PodAPI:
    """Read and create namespaces; list, create and delete pods; read pod logs; list nodes by label.

    ``retries``: how many times one request is retried on 429 or 5xx before it fails. The delay is
    the answer's ``Retry-After`` when given, else ``backoff * 2**attempt``; either is capped at
    ``max_delay`` seconds. ``counts``: requests made, by verb (``list``, ``get``, ``create``,
    ``delete``; a log read is a ``get``), retries included.
    """

    def __init__(self, api_client, retries=DEFAULT_RETRIES, backoff=0.5, max_delay=MAX_DELAY, sleep=time.sleep,
                 page_size=DEFAULT_PAGE_SIZE):
        self.api_client = api_client
        self._core = None
        # as NodeAPI: importing CoreV1Api and its models costs about a second per module run
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
            from kubernetes.client import CoreV1Api  # pylint: disable=import-outside-toplevel
            self._core = CoreV1Api(self.api_client)
        return self._core

    def _legacy(self, method, *args):
        """A CoreV1Api method with its leading arguments, looked up only when called (old clients)."""
        return lambda **kwargs: getattr(self.core, method)(*args, **kwargs)

    # ------------------------------------------------------------------ transport
    def _request(self, method, path, path_params=None, query=None, body=None, accept="application/json"):
        """One request through the ApiClient without the generated API class, raising ApiException as it does."""
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = "application/json"
        request = self.api_client.param_serialize(
            method=method, resource_path=path, path_params=path_params, query_params=query or [],
            header_params=headers, body=body, auth_settings=["BearerToken"])
        response = self.api_client.call_api(*request)
        response.read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response

    def _call(self, verb, what, func, missing_ok=False, text=False):
        """Run ``func`` (one request) with retries; its answer as JSON (``text``: as a string).

        ``missing_ok``: a 404 answer returns None instead of failing.
        """
        attempt = 0
        while True:
            self.counts[verb] = self.counts.get(verb, 0) + 1
            try:
                data = func().data
                if isinstance(data, bytes):
                    data = data.decode("utf-8", "replace")
                return data if text else json.loads(data)
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

    def _list(self, what, direct_path, path_params, legacy, label_selector):
        items = []
        token = None
        while True:
            if self.direct:
                query = [("limit", self.page_size)]
                if label_selector:
                    query.append(("labelSelector", label_selector))
                if token:
                    query.append(("continue", token))
                page = self._call("list", what, partial(self._request, "GET", direct_path, path_params, query))
            else:
                kwargs = {"limit": self.page_size, "_preload_content": False}
                if label_selector:
                    kwargs["label_selector"] = label_selector
                if token:
                    kwargs["_continue"] = token
                page = self._call("list", what, partial(legacy, **kwargs))
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    # ------------------------------------------------------------------ nodes
    def list_nodes(self, label_selector=None):
        """The nodes ``label_selector`` selects (every node without one), in pages of ``page_size``."""
        what = "listing nodes" + (" with labels %s" % label_selector if label_selector else "")
        return self._list(what, "/api/v1/nodes", None, self._legacy("list_node"), label_selector)

    # ------------------------------------------------------------------ namespaces
    def get_namespace(self, name):
        """The namespace, or None when it does not exist."""
        if self.direct:
            func = partial(self._request, "GET", "/api/v1/namespaces/{name}", {"name": name})
        else:
            func = partial(self.core.read_namespace, name, _preload_content=False)
        return self._call("get", "reading namespace %s" % name, func, missing_ok=True)

    def create_namespace(self, body):
        name = body["metadata"]["name"]
        if self.direct:
            func = partial(self._request, "POST", "/api/v1/namespaces", body=body)
        else:
            func = partial(self.core.create_namespace, body, _preload_content=False)
        try:
            return self._call("create", "creating namespace %s" % name, func)
        except K8sError as exc:
            if exc.status == 409:  # created in between: fine
                return None
            raise

    # ------------------------------------------------------------------ pods
    def list_pods(self, namespace, label_selector=None):
        """The pods of ``namespace`` that ``label_selector`` selects."""
        what = "listing pods in namespace %s" % namespace + (
            " with labels %s" % label_selector if label_selector else "")
        return self._list(what, "/api/v1/namespaces/{namespace}/pods", {"namespace": namespace},
                          self._legacy("list_namespaced_pod", namespace), label_selector)

    def create_pod(self, namespace, body):
        name = body["metadata"]["name"]
        if self.direct:
            func = partial(self._request, "POST", "/api/v1/namespaces/{namespace}/pods", {"namespace": namespace},
                           body=body)
        else:
            func = partial(self.core.create_namespaced_pod, namespace, body, _preload_content=False)
        return self._call("create", "creating pod %s/%s" % (namespace, name), func)

    def delete_pod(self, namespace, name):
        """Delete a pod (gracefully); True when it was there, False when it was already gone."""
        if self.direct:
            func = partial(self._request, "DELETE", "/api/v1/namespaces/{namespace}/pods/{name}",
                           {"namespace": namespace, "name": name})
        else:
            func = partial(self.core.delete_namespaced_pod, name, namespace, _preload_content=False)
        return self._call("delete", "deleting pod %s/%s" % (namespace, name), func, missing_ok=True) is not None

    def read_pod_log(self, namespace, name, container=None):
        """The pod's log as text (of ``container``, needed only for pods with several containers)."""
        query = [("container", container)] if container else []
        if self.direct:
            func = partial(self._request, "GET", "/api/v1/namespaces/{namespace}/pods/{name}/log",
                           {"namespace": namespace, "name": name}, query, accept="*/*")
        else:
            kwargs = {"container": container} if container else {}
            func = partial(self.core.read_namespaced_pod_log, name, namespace, _preload_content=False, **kwargs)
        return self._call("get", "reading the log of pod %s/%s" % (namespace, name), func, text=True)
