"""kubegpu.nvidia.site run as slices at the same time ends where one full run ends.

AWX job slicing, or ``ansible-playbook --limit`` on disjoint sets of GPU hosts started in parallel, runs
``site.yml`` several times at once, each with the control host. The cluster must end in the same state as
after one run over every host: each slice labels, taints and validates only its own nodes, and the device
plugin's objects (ConfigMap with every named and per-node config, DaemonSet, RBAC) do not depend on which
hosts are in the run, so concurrent writers converge.

Four GPU hosts are local-connection hosts of this machine with the fake NVML library (tests/support/fakenvml);
each host's Python is a small wrapper that points FAKENVML_CONFIG at its own profile, so the hosts of one run see
different GPUs. Their nodes on the Kubernetes API test server are simulated GPU nodes (annotation
kubegpu.io/simulated-gpus: the test server's device plugin advertises their GPUs and runs the validation pods).
The run skips the driver and toolkit plays (``--tags labels,device_plugin,validation``): nothing is installed here.
"""
import json
import os
import pathlib
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

kubernetes = pytest.importorskip("kubernetes")

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROFILES = ROOT / "tests" / "support" / "fakenvml" / "profiles"
SIMULATED = "kubegpu.io/simulated-gpus"
# the validation record: a digest of the node's state (with its boot ID, which the test server makes up per
# server, and the DaemonSet's uid) and the time; compared as present or not. That each record holds for its node
# as it is shows in the second pair of runs: a record that does not hold means a new pod and a new record (changed).
RECORD = "kubegpu.nvidia/gpu-validation"
NAMESPACE = "nvidia-device-plugin"
# host: (profile, GPUs the node simulates)
HOSTS = {"slice-t4-a": ("t4x1", 1), "slice-t4-b": ("t4x1", 1), "slice-h100-a": ("h100x8", 8),
         "slice-h100-b": ("h100x8", 8)}
SLICES = (["slice-t4-a", "slice-h100-a"], ["slice-t4-b", "slice-h100-b"])
# a named config per product, and one node with a config of its own (the per-node selection by node label)
EXTRA_VARS = {
    "k8s_device_plugin_configs": {"t4-shared": {"sharing_strategy": "time-slicing", "replicas": 4},
                                  "h100-shared": {"sharing_strategy": "time-slicing", "replicas": 2}},
    "k8s_device_plugin_product_configs": {"Tesla-T4": "t4-shared"},
    "k8s_device_plugin_node_configs": {"slice-h100-b": "h100-shared"},
    "k8s_device_plugin_wait_timeout": 60, "k8s_device_plugin_wait_delay": 1,
    "gpu_validation_timeout": 60, "gpu_validation_delay": 1,
}
TAGS = "labels,device_plugin,validation"


@pytest.fixture(scope="module", name="fake_nvml")
def fixture_fake_nvml():
    out = subprocess.run([str(ROOT / "scripts" / "build-fakenvml.sh")], check=True, capture_output=True, text=True)
    return pathlib.Path(out.stdout.strip().splitlines()[-1]) / "full"


def start_server(directory):
    from kubeapi import KubeAPIServer

    directory.mkdir()
    return KubeAPIServer(tls=True, kubeconfig_path=str(directory / "kubeconfig")).start()


class Cluster:
    """One API test server with the four simulated GPU nodes and a CPU node, and an inventory for it."""

    def __init__(self, server, directory, fake_nvml):
        from kubeapi.testing import Kube

        self.server = server
        self.kube = Kube(server.kubeconfig_path, server)
        self.dir = directory
        for host, (_profile, gpus) in HOSTS.items():
            self.kube.node(host, labels={"kubernetes.io/hostname": host}, annotations={SIMULATED: str(gpus)})
        self.kube.node("slice-cpu", labels={"kubernetes.io/hostname": "slice-cpu"})
        hosts = {}
        for host, (profile, _gpus) in HOSTS.items():
            # the host's own GPUs: its Python runs with its profile (the module process loads the library)
            python = directory / ("python-" + host)
            python.write_text("#!/bin/sh\nLD_LIBRARY_PATH=%s FAKENVML_CONFIG=%s exec %s \"$@\"\n"
                              % (fake_nvml, PROFILES / (profile + ".conf"), sys.executable))
            python.chmod(0o755)
            hosts[host] = {"ansible_connection": "local", "ansible_python_interpreter": str(python)}
        local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        self.inventory = directory / "inventory.yml"
        self.inventory.write_text(yaml.safe_dump({"all": {"children": {
            "gpu_nodes": {"hosts": hosts}, "k8s_control": {"hosts": {"localhost": local}}}}}))

    def run(self, limit=None):
        """One site run (``limit``: its GPU hosts, with the control host); returns (rc, stats, output)."""
        env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
                   ANSIBLE_LOCALHOST_WARNING="false")
        for name in ("KUBECONFIG", "K8S_AUTH_KUBECONFIG", "LD_LIBRARY_PATH", "FAKENVML_CONFIG"):
            env.pop(name, None)
        cmd = ["ansible-playbook", "-i", str(self.inventory), "kubegpu.nvidia.site", "--tags", TAGS,
               "-e", "kubegpu_kubeconfig=%s" % self.server.kubeconfig_path, "-e", json.dumps(EXTRA_VARS)]
        if limit:
            cmd += ["--limit", ",".join(["localhost"] + limit)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
        try:
            out = json.loads(proc.stdout)
        except ValueError:
            raise AssertionError("no JSON output\nstdout:\n%s\nstderr:\n%s" % (proc.stdout[-4000:], proc.stderr)) from None
        failures = [(t["task"]["name"], host, res.get("msg", ""))
                    for p in out["plays"] for t in p["tasks"] for host, res in t["hosts"].items() if res.get("failed")]
        assert proc.returncode == 0, (limit, failures, proc.stderr[-2000:])
        return out

    def state(self):
        """What a site run leaves in the cluster, without what the API server or the clock add."""
        api = self.kube.api_client()
        core = kubernetes.client.CoreV1Api(api)
        apps = kubernetes.client.AppsV1Api(api)
        rbac = kubernetes.client.RbacAuthorizationV1Api(api)
        state = {"nodes": {}, "configmaps": {}, "daemonsets": {}, "rbac": {}}
        for node in core.list_node().items:
            annotations = dict(node.metadata.annotations or {})
            if RECORD in annotations:
                # {"state": what was validated, "passed": when}
                assert sorted(json.loads(annotations[RECORD])) == ["passed", "state"], annotations[RECORD]
                annotations[RECORD] = "present"
            state["nodes"][node.metadata.name] = {
                "labels": node.metadata.labels or {}, "annotations": annotations,
                "taints": sorted((t.key, t.value, t.effect) for t in node.spec.taints or []),
                "allocatable": {k: v for k, v in (node.status.allocatable or {}).items() if k.startswith("nvidia.com/")}}
        for cm in core.list_namespaced_config_map(NAMESPACE).items:
            if cm.metadata.name != "kube-root-ca.crt":
                state["configmaps"][cm.metadata.name] = {"labels": cm.metadata.labels, "data": cm.data}
        for ds in apps.list_namespaced_daemon_set(NAMESPACE).items:
            state["daemonsets"][ds.metadata.name] = api.sanitize_for_serialization(ds.spec)
        for role in rbac.list_cluster_role().items:
            if (role.metadata.labels or {}).get("app.kubernetes.io/managed-by") == "kubegpu.nvidia":
                state["rbac"][role.metadata.name] = api.sanitize_for_serialization(role.rules)
        return state


def assert_same(got, want):
    """Object by object, so that a difference names its object."""
    for kind in want:
        assert sorted(got[kind]) == sorted(want[kind]), kind
        for name in want[kind]:
            assert got[kind][name] == want[kind][name], (kind, name)


def changed(out):
    """The tasks that changed something, with their host."""
    return [(t["task"]["name"], host) for p in out["plays"] for t in p["tasks"] for host, res in t["hosts"].items()
            if res.get("changed")]


def summary_hosts(out):
    (task,) = [t for p in out["plays"] for t in p["tasks"] if t["task"]["name"] == "Print the summary"]
    return [line.split()[0] for line in task["hosts"]["localhost"]["msg"].splitlines()[1:]]


def test_parallel_slices_end_as_one_full_run_and_a_second_pair_changes_nothing(tmp_path, fake_nvml):
    servers = [start_server(tmp_path / "full"), start_server(tmp_path / "sliced")]
    try:
        full, sliced = (Cluster(server, server_dir, fake_nvml)
                        for server, server_dir in zip(servers, (tmp_path / "full", tmp_path / "sliced")))
        full.run()
        want = full.state()
        # the run did what it is for: every GPU node labelled, tainted, configured, advertising and validated
        assert sorted(name for name, node in want["nodes"].items()
                      if node["labels"].get("nvidia.com/gpu.present") == "true") == sorted(HOSTS)
        assert {name: node["labels"].get("nvidia.com/device-plugin.config") for name, node in want["nodes"].items()} == {
            "slice-t4-a": "t4-shared", "slice-t4-b": "t4-shared", "slice-h100-a": "default",
            "slice-h100-b": "h100-shared", "slice-cpu": None}
        assert {name: node["allocatable"].get("nvidia.com/gpu") for name, node in want["nodes"].items()} == {
            "slice-t4-a": "4", "slice-t4-b": "4", "slice-h100-a": "8", "slice-h100-b": "16", "slice-cpu": None}
        # one ConfigMap with every config (the per-node one among them), the plugin's DaemonSet and ClusterRole
        (configmap,) = want["configmaps"].values()
        assert sorted(configmap["data"]) == ["default", "h100-shared", "t4-shared"]
        assert NAMESPACE in want["daemonsets"] and want["rbac"]
        assert {name: node["annotations"].get(RECORD) for name, node in want["nodes"].items()} == dict(
            dict.fromkeys(HOSTS, "present"), **{"slice-cpu": None})

        with ThreadPoolExecutor(max_workers=len(SLICES)) as pool:
            first = list(pool.map(sliced.run, SLICES))
        assert_same(sliced.state(), want)
        # each slice's summary covers its own GPU hosts
        assert [sorted(summary_hosts(out)) for out in first] == [sorted(hosts) for hosts in SLICES]

        with ThreadPoolExecutor(max_workers=len(SLICES)) as pool:
            second = list(pool.map(sliced.run, SLICES))
        assert [changed(out) for out in second] == [[], []]
        assert all(stats.get("changed", 0) == 0 for out in second for stats in out["stats"].values())
        assert_same(sliced.state(), want)
    finally:
        for server in servers:
            server.stop()
