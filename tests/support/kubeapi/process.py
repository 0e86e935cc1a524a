"""The API test server in a process of its own, as its command line (``python -m kubeapi``) runs it.

For benchmarks: the server's work does not share the measuring process's interpreter, and its request
counts are read over HTTP (``/_test/requests``). ``ServerProcess(workdir)`` starts it (TLS, a free port,
the kubeconfig in ``workdir``) and waits until it answers; ``counts()`` / ``reset()`` read and clear the
request counts per verb; ``stop()`` ends it.
"""

import json
import os
import signal
import subprocess
import sys
import time

import kubernetes
import urllib3

SUPPORT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ServerProcess:
    """The API test server in its own process; ``core`` and ``client`` talk to it with the kubernetes library.

    ``admission_plugins``: the optional admission plugins to enable (``--enable-admission-plugins``).
    ``pool_size``: connections the kubernetes client keeps (more for a client used from several threads).
    """

    def __init__(self, workdir, admission_plugins=(), pool_size=None):
        self.kubeconfig = os.path.join(workdir, "kubeconfig")
        port_file = os.path.join(workdir, "port")
        command = [sys.executable, "-m", "kubeapi", "--tls", "--port", "0", "--kubeconfig-out", self.kubeconfig,
                   "--port-file", port_file]
        if admission_plugins:
            command += ["--enable-admission-plugins", ",".join(admission_plugins)]
        self.proc = subprocess.Popen(command, cwd=SUPPORT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self._connect(port_file, pool_size)
        except BaseException:
            self.stop()
            raise

    def _connect(self, port_file, pool_size):
        deadline = time.monotonic() + 60
        while not os.path.exists(port_file):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the API test server did not start")
            time.sleep(0.1)
        cfg = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(config_file=self.kubeconfig, client_configuration=cfg)
        if pool_size:
            cfg.connection_pool_maxsize = pool_size
        self.client = kubernetes.client.ApiClient(cfg)
        self.core = kubernetes.client.CoreV1Api(self.client)
        self.http = urllib3.PoolManager(ca_certs=cfg.ssl_ca_cert)
        self.url = cfg.host
        self.headers = {"Authorization": cfg.get_api_key_with_prefix("BearerToken", alias="authorization"),
                        "Content-Type": "application/json"}

    def counts(self):
        """``{verb: n}`` of the requests since the last ``reset()`` (verbs with none left out)."""
        answer = self.http.request("GET", self.url + "/_test/requests", headers=self.headers)
        return dict((k, v) for k, v in json.loads(answer.data)["counts"].items() if v)

    def reset(self):
        self.http.request("POST", self.url + "/_test/requests", body=b"{}", headers=self.headers)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
