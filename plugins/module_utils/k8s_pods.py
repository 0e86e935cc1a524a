# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Namespaces, pods, pod logs and node listings for k8s_gpu_validate.

``PodAPI`` is a ``k8s_client.ApiSession``, as ``NodeAPI`` is: every request goes by path through the
``kubernetes`` library's ``DynamicClient.request`` with a timeout; answers are read as plain JSON (logs
as text); requests are counted by verb; 429, 5xx, timed-out and dropped requests are retried with
backoff, honouring ``Retry-After``; every failure is a ``K8sError`` with a one-line message.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import ApiSession, K8sError, quote


class PodAPI(ApiSession):
    """Read and create namespaces; list, create and delete pods; read pod logs; list nodes by label
    and patch them (``ApiSession.patch_node``).

    An ``ApiSession``: ``counts`` holds the requests made, by verb (``list``, ``get``, ``create``,
    ``delete``, ``patch``; a log read is a ``get``), retries included.
    """

    # ------------------------------------------------------------------ nodes
    def list_nodes(self, label_selector=None):
        """The nodes ``label_selector`` selects (every node without one), in pages of ``page_size``."""
        what = "listing nodes" + (" with labels %s" % label_selector if label_selector else "")
        return self.list_all(what, "/api/v1/nodes", label_selector=label_selector)

    # ------------------------------------------------------------------ namespaces
    def get_namespace(self, name):
        """The namespace, or None when it does not exist."""
        return self.request("get", "reading namespace %s" % name, "GET", "/api/v1/namespaces/%s" % quote(name),
                            missing_ok=True)

    def create_namespace(self, body):
        name = body["metadata"]["name"]
        try:
            return self.request("create", "creating namespace %s" % name, "POST", "/api/v1/namespaces", body=body)
        except K8sError as exc:
            if exc.status == 409:  # created in between: fine
                return None
            raise

    # ------------------------------------------------------------------ pods
    def _pods_path(self, namespace, name=None, sub=None):
        path = "/api/v1/namespaces/%s/pods" % quote(namespace)
        if name is not None:
            path += "/%s" % quote(name)
        if sub is not None:
            path += "/%s" % sub
        return path

    def list_pods(self, namespace, label_selector=None):
        """The pods of ``namespace`` that ``label_selector`` selects."""
        what = "listing pods in namespace %s" % namespace + (
            " with labels %s" % label_selector if label_selector else "")
        return self.list_all(what, self._pods_path(namespace), label_selector=label_selector)

    def create_pod(self, namespace, body):
        """Create a pod. A retry answered 409 means the earlier attempt went through: that is fine."""
        name = body["metadata"]["name"]
        return self.request("create", "creating pod %s/%s" % (namespace, name), "POST", self._pods_path(namespace),
                            body=body, exists_ok_on_retry=True)

    def delete_pod(self, namespace, name):
        """Delete a pod (gracefully); True when it was there, False when it was already gone."""
        return self.request("delete", "deleting pod %s/%s" % (namespace, name), "DELETE",
                            self._pods_path(namespace, name), missing_ok=True) is not None

    def read_pod_log(self, namespace, name, container=None):
        """The pod's log as text (of ``container``, needed only for pods with several containers)."""
        query = [("container", container)] if container else []
        return self.request("get", "reading the log of pod %s/%s" % (namespace, name), "GET",
                            self._pods_path(namespace, name, "log"), query=query, accept="*/*", decode="text")
