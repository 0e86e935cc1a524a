"""What the pytest `kube` fixture hands to tests: one cluster, test server or real."""

import os
import subprocess
import sys
import uuid

import yaml

import ansible_run


class Kube:
    """A cluster to test against.

    `.kubeconfig` path, `.api_client()`, `.is_test_server`, `.server` (KubeAPIServer or None),
    `.namespace()` (a fresh namespace deleted afterwards), `.kubectl(...)`, `.ansible(...)`.
    """

    def __init__(self, kubeconfig, server=None):
        self.kubeconfig = kubeconfig
        self.server = server
        self.is_test_server = server is not None
        self._namespaces = []
        self._nodes = []

    # ---------------------------------------------------------------- clients
    def api_client(self, kubeconfig=None):
        from kubernetes import config

        return config.new_client_from_config(config_file=kubeconfig or self.kubeconfig)

    def core(self):
        from kubernetes import client

        return client.CoreV1Api(self.api_client())

    def apps(self):
        from kubernetes import client

        return client.AppsV1Api(self.api_client())

    def dynamic(self):
        from kubernetes import dynamic

        return dynamic.DynamicClient(self.api_client())

    # ---------------------------------------------------------------- scratch objects
    def unique(self, prefix="kubegpu-test"):
        return "%s-%s" % (prefix, uuid.uuid4().hex[:8])

    def namespace(self):
        """A new namespace, removed when the test ends."""
        name = self.unique()
        self.core().create_namespace({"metadata": {"name": name}})
        self._namespaces.append(name)
        return name

    def node(self, name=None, labels=None, annotations=None, taints=None, addresses=None):
        """Create a Node object (a kubelet-less node on a real cluster), removed afterwards."""
        name = name or self.unique()
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": dict(labels or {}),
                             "annotations": dict(annotations or {})},
                "spec": {"taints": list(taints)} if taints else {}}
        if addresses:
            body["status"] = {"addresses": addresses}
        self.core().create_node(body)
        self._nodes.append(name)
        return name

    def cleanup(self):
        from kubernetes.client.exceptions import ApiException

        core = self.core() if (self._namespaces or self._nodes) else None
        for name in self._namespaces:
            try:
                core.delete_namespace(name)
            except ApiException:
                pass
        for name in self._nodes:
            try:
                core.delete_node(name)
            except ApiException:
                pass
        self._namespaces, self._nodes = [], []

    # ---------------------------------------------------------------- tools as subprocesses
    def kubectl(self, *args, kubeconfig=None, check=False):
        proc = subprocess.run(["kubectl", "--kubeconfig", kubeconfig or self.kubeconfig] + list(args),
                              capture_output=True, text=True, timeout=120, check=False)
        if check and proc.returncode != 0:
            raise AssertionError("kubectl %s failed:\n%s%s" % (" ".join(args), proc.stdout, proc.stderr))
        return proc

    def ansible(self, module, args, check=False, diff=False, env=None):
        """Run one module on localhost with `ansible`; returns its result dict."""
        return ansible_run.run_module(module, args, check=check, diff=diff, env=env, kubeconfig=self.kubeconfig,
                                      python=os.environ.get("KUBEAPI_PYTHON") or sys.executable,
                                      timeout=300).module_result()

    def readonly_kubeconfig(self, directory):
        """A kubeconfig whose user may only read (test server only)."""
        path = os.path.join(str(directory), "kubeconfig-readonly")
        with open(self.kubeconfig) as handle:
            config = yaml.safe_load(handle)
        config["current-context"] = "kubeapi-readonly"
        with open(path, "w") as handle:
            yaml.safe_dump(config, handle)
        return path
