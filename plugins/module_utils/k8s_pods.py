# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Namespaces, pods, pod logs and node listings through the Kubernetes client's ``ApiClient``.

``PodAPI`` is a ``k8s_client.ApiSession``, as ``NodeAPI`` is: clients generated with ``param_serialize``
(kubernetes >= 35) are driven directly, older ones through ``CoreV1Api`` with
``_preload_content=False``; answers are read as plain JSON (logs as text); requests are counted by
verb; 429 and 5xx answers are retried with backoff, honouring ``Retry-After``; every failure is a
``K8sError`` with a one-line message.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from functools import partial

from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import ApiSession, K8sError


class PodAPI(ApiSession):
    """Read and create namespaces; list, create and delete pods; read pod logs; list nodes by label
    and patch them (``ApiSession.patch_node``).

    An ``ApiSession``: ``counts`` holds the requests made, by verb (``list``, ``get``, ``create``,
    ``delete``, ``patch``; a log read is a ``get``), retries included.
    """

    def _legacy(self, method, *args):
        """A CoreV1Api method with its leading arguments, looked up only when called (old clients)."""
        return lambda **kwargs: getattr(self.core, method)(*args, **kwargs)

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
        return self._call("get", "reading the log of pod %s/%s" % (namespace, name), func, decode="text")
