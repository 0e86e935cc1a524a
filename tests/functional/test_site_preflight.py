"""kubegpu.nvidia.site refuses bad input early: one clear message, nothing changed.

Each case runs ``ansible-playbook kubegpu.nvidia.site`` with a small inventory of local-connection hosts
against the Kubernetes API test server (or the cluster of ``--kubeconfig``). The GPU host is this machine
with the fake NVML library (tests/support/fakenvml) on LD_LIBRARY_PATH and the T4 profile, so its
nvidia_gpu_facts show one GPU. A bad case must fail with exactly one failed task whose message says what
is wrong, before any play that changes a node starts, and without a write to the API; the good case (the
same inventory with the host's node registered) shows the checks pass.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml
from kubernetes import client

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROFILE = ROOT / "tests" / "support" / "fakenvml" / "profiles" / "t4x1.conf"
# plays that only read; every later play changes something
READ_ONLY_PLAYS = {
    "Check the inventory, the control host and the cluster settings",
    "Discover the GPUs and find each GPU host's Kubernetes node",
}
FACTS_PLAY = "Discover the GPUs and find each GPU host's Kubernetes node"
CLUSTER_READ = "kubegpu.nvidia.preflight : Check the cluster connection and read its version"
LABEL_CALL = "kubegpu.nvidia.k8s_gpu_node : Label and taint the GPU nodes in one API batch"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection", "post", "put"}


@pytest.fixture(scope="module", name="fake_nvml")
def fixture_fake_nvml():
    out = subprocess.run([str(ROOT / "scripts" / "build-fakenvml.sh")], check=True, capture_output=True, text=True)
    return pathlib.Path(out.stdout.strip().splitlines()[-1]) / "full"


def local(**extra):
    return dict({"ansible_connection": "local", "ansible_python_interpreter": sys.executable}, **extra)


class Site:
    """Writes an inventory, runs site.yml with it, and reads the JSON callback's result."""

    def __init__(self, kube, tmp_path, fake_nvml):
        self.kube = kube
        self.dir = tmp_path
        self.fake_nvml = fake_nvml
        self.gpu_host = kube.unique("site-gpu")

    def inventory(self, groups=None, control=None):
        groups = groups if groups is not None else {"gpu_nodes": {"hosts": {self.gpu_host: local()}}}
        if control is not None:
            groups["k8s_control"] = {"hosts": control}
        path = self.dir / "inventory.yml"
        path.write_text(yaml.safe_dump(groups))
        return path

    def run(self, inventory, kubeconfig=None, *extra, env=None, gpu=True):
        """``gpu=False``: without the fake NVML library, so the host's facts find no GPU (a CPU-only host).
        ``env``: more environment for ansible-playbook."""
        env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
                   ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_HOST_KEY_CHECKING="false",
                   LD_LIBRARY_PATH=str(self.fake_nvml), FAKENVML_CONFIG=str(PROFILE), **(env or {}))
        for name in ("KUBECONFIG", "K8S_AUTH_KUBECONFIG") + (() if gpu else ("LD_LIBRARY_PATH", "FAKENVML_CONFIG")):
            env.pop(name, None)
        if self.kube.is_test_server:
            self.kube.server.reset_counts()
        # kubeconfig "" runs without one (the inventory gives kubegpu_host and kubegpu_api_key)
        cmd = ["ansible-playbook", "-i", str(inventory), "kubegpu.nvidia.site"] + list(extra)
        if kubeconfig != "":
            cmd += ["-e", "kubegpu_kubeconfig=%s" % (kubeconfig or self.kube.kubeconfig)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
        try:
            out = json.loads(proc.stdout)
        except ValueError:
            raise AssertionError("no JSON output\nstdout:\n%s\nstderr:\n%s" % (proc.stdout, proc.stderr)) from None
        return Result(proc.returncode, out, proc.stderr)


class Result:
    def __init__(self, rc, out, stderr):
        self.rc = rc
        self.out = out
        self.stderr = stderr
        self.plays = [p["play"]["name"] for p in out["plays"]]
        self.failures = [(t["task"]["name"], host, res.get("msg", ""))
                         for p in out["plays"] for t in p["tasks"] for host, res in t["hosts"].items()
                         if res.get("failed")]
        self.changed = [(t["task"]["name"], host)
                        for p in out["plays"] for t in p["tasks"] for host, res in t["hosts"].items()
                        if res.get("changed")]

    def assert_refused(self, site, message):
        """Failed with exactly this one message, no play past the read-only ones, no change, no API write."""
        assert self.rc != 0, self.out
        assert len(self.failures) == 1, self.failures
        assert message in self.failures[0][2], self.failures[0]
        assert set(self.plays) <= READ_ONLY_PLAYS, self.plays
        assert not self.changed, self.changed
        if site.kube.is_test_server:
            verbs = set(site.kube.server.request_counts())
            assert not verbs & WRITE_VERBS, verbs
        return self.failures[0][2]


@pytest.fixture(name="site")
def fixture_site(kube, tmp_path, fake_nvml):
    return Site(kube, tmp_path, fake_nvml)


def test_the_checks_pass_when_the_input_is_right(site):
    # the good twin of the cases below: same inventory, the host's node registered; --tags preflight runs the checks
    # and no play that changes anything
    site.kube.node(site.gpu_host)
    result = site.run(site.inventory(control={"localhost": local()}), None, "--tags", "preflight")
    assert result.rc == 0, (result.failures, result.stderr[-2000:])
    assert not result.failures
    assert FACTS_PLAY in result.plays
    # the preflight's one read of the cluster, kept for the later plays
    (cluster,) = [res for p in result.out["plays"] for t in p["tasks"]
                  if t["task"]["name"] == CLUSTER_READ for res in t["hosts"].values()]
    git_version = client.VersionApi(site.kube.api_client()).get_code().git_version
    assert cluster["git_version"] == git_version and cluster["changed"] is False
    assert git_version.lstrip("v").startswith(cluster["version"])
    # the labels role's dry run, by the preflight's nodes entry point: the match, and what the labels play would write
    (facts_play,) = [p for p in result.out["plays"] if p["play"]["name"] == FACTS_PLAY]
    matched = [res for t in facts_play["tasks"] if t["task"]["name"] == LABEL_CALL for res in t["hosts"].values()]
    assert matched and [n["name"] for n in matched[0]["nodes"]] == [site.gpu_host]
    assert matched[0]["hosts"] == {site.gpu_host: site.gpu_host}
    assert matched[0]["changed"] is True  # what the labels play would write (it is skipped by --tags)
    if site.kube.is_test_server:
        assert not set(site.kube.server.request_counts()) & WRITE_VERBS


def test_missing_gpu_nodes_group(site):
    inventory = site.inventory(groups={"gpus": {"hosts": {site.gpu_host: local()}}})
    msg = site.run(inventory).assert_refused(
        site, "the inventory has no group gpu_nodes (its groups: gpus): put the GPU worker nodes in a group named gpu_nodes")
    assert "k8s_control" in msg


def test_empty_gpu_nodes_group(site):
    inventory = site.inventory(groups={"gpu_nodes": {"hosts": {}}, "k8s_control": {"hosts": {"localhost": local()}}})
    site.run(inventory).assert_refused(site, "group gpu_nodes has no hosts")


def test_empty_k8s_control_group(site):
    inventory = site.inventory(groups={"gpu_nodes": {"hosts": {site.gpu_host: local()}}, "k8s_control": {"hosts": {}}})
    site.run(inventory).assert_refused(site, "group k8s_control has no hosts")


def test_unreachable_control_host(site):
    # nothing listens on port 1: ssh is refused at once
    control = {"site-control": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1,
                                "ansible_ssh_common_args": "-o ConnectTimeout=5"}}
    msg = site.run(site.inventory(control=control)).assert_refused(
        site, "control host site-control (group k8s_control) is unreachable:")
    assert "Connection refused" in msg


def test_missing_kubeconfig(site):
    missing = site.dir / "no-such-kubeconfig"
    site.run(site.inventory(control={"localhost": local()}), str(missing)).assert_refused(
        site, "kubeconfig %s does not exist" % missing)


def test_unreachable_api(site):
    config = yaml.safe_load(pathlib.Path(site.kube.kubeconfig).read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = "https://127.0.0.1:1"
    dead = site.dir / "kubeconfig-dead"
    dead.write_text(yaml.safe_dump(config))
    msg = site.run(site.inventory(control={"localhost": local()}), str(dead)).assert_refused(
        site, "reading the API server's version failed: cannot connect to the API server at https://127.0.0.1:1")
    assert "Connection refused" in msg


def test_gpu_node_without_kubernetes_node(site):
    # the GPU host has no Node object: the preflight's dry run fails before the driver play
    site.kube.node(site.kube.unique("site-other"))
    site.run(site.inventory(control={"localhost": local()})).assert_refused(
        site, "no Kubernetes node matches host %s" % site.gpu_host)


def test_host_and_token_reach_the_kubernetes_plays_without_a_kubeconfig(site, kube_server):
    # kubegpu_host, kubegpu_api_key and kubegpu_ca_cert instead of a kubeconfig: the plays' one connection
    # (module_defaults from the k8s_auth lookup) reaches the dry run and the labels play, and the token never
    # shows in the output
    site.kube.node(site.gpu_host)
    control = {"localhost": local(kubegpu_host=kube_server.url, kubegpu_api_key=kube_server.token,
                                  kubegpu_ca_cert=kube_server.ca_path)}
    result = site.run(site.inventory(control=control), "", "--tags", "facts,labels")
    assert result.rc == 0, (result.failures, result.stderr[-2000:])
    node = site.kube.core().read_node(site.gpu_host)
    assert node.metadata.labels["nvidia.com/gpu.present"] == "true"
    assert [(t.key, t.effect) for t in node.spec.taints or []] == [("nvidia.com/gpu", "NoSchedule")]
    assert kube_server.token not in json.dumps(result.out) + result.stderr


def test_the_labels_play_writes_only_what_the_match_found_to_change(site):
    # first run: the preflight's dry run finds the labels missing, the labels play writes them;
    # second run: the dry run finds them in place and the labels play makes no call (one LIST in the whole run)
    site.kube.node(site.gpu_host)
    inventory = site.inventory(control={"localhost": local()})
    first = site.run(inventory, None, "--tags", "facts,labels")
    assert first.rc == 0, (first.failures, first.stderr[-2000:])
    # the dry run's prediction (check mode) and the labels play's write
    assert first.changed == [(LABEL_CALL, site.gpu_host)] * 2
    assert site.kube.core().read_node(site.gpu_host).metadata.labels["nvidia.com/gpu.present"] == "true"
    second = site.run(inventory, None, "--tags", "facts,labels")
    assert second.rc == 0, (second.failures, second.stderr[-2000:])
    assert not second.changed
    (labels_play,) = [p for p in second.out["plays"] if p["play"]["name"] == "Label and taint the GPU nodes"]
    (call,) = [t for t in labels_play["tasks"] if t["task"]["name"] == LABEL_CALL]
    assert all(res.get("skipped") for res in call["hosts"].values())
    if site.kube.is_test_server:
        assert site.kube.server.request_counts() == {"list": 1}


GATE_CALL = "kubegpu.nvidia.gpu_health : Label and taint the GPU nodes by their health"


def test_the_health_play_gates_from_the_facts_the_preflight_read(site):
    # --tags health: the preflight (its one facts run per node reads the health too), then the gate on the control
    # host; no other play. The node gets its health label, once: the second run writes nothing.
    site.kube.node(site.gpu_host)
    inventory = site.inventory(control={"localhost": local()})
    first = site.run(inventory, None, "--tags", "health")
    assert first.rc == 0, (first.failures, first.stderr[-2000:])
    assert "Gate the GPU nodes by their health" in first.plays
    # the labels play's call is left out by the tag
    assert not [t for p in first.out["plays"] for t in p["tasks"] if t["task"]["name"] == LABEL_CALL
                and p["play"]["name"] == "Label and taint the GPU nodes"]
    (gate,) = [res for p in first.out["plays"] for t in p["tasks"] if t["task"]["name"] == GATE_CALL
               for res in t["hosts"].values()]
    # the T4 profile is healthy; this machine's kernel log may not be readable (a degraded finding, not a taint)
    (node,) = gate["nodes"]
    assert node["severity"] in ("healthy", "degraded") and node["taint"] == "none"
    labels = site.kube.core().read_node(site.gpu_host).metadata.labels
    assert labels["nvidia.com/gpu.health"] == node["severity"]
    second = site.run(inventory, None, "--tags", "health")
    assert second.rc == 0 and (GATE_CALL, "localhost") not in second.changed
    if site.kube.is_test_server:
        assert not set(site.kube.server.request_counts()) & WRITE_VERBS


# kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1 README.md: Kubernetes 1.34 or newer, NVIDIA driver 565 or newer.
DRA_CHECK = "kubegpu.nvidia.preflight : Check DRA before any play changes anything"


def _dra_host(site):
    # a DRA host whose driver the run keeps (pre-installed: nvidia_driver_skip), the T4 profile's 535.104.05
    site.kube.node(site.gpu_host)
    labels = dict(site.kube.core().read_node(site.gpu_host).metadata.labels or {})
    host = local(kubegpu_gpu_allocation="dra", nvidia_driver_skip=True)
    return site.inventory(groups={"gpu_nodes": {"hosts": {site.gpu_host: host}}},
                          control={"localhost": local()}), labels


def _refused_early(site, result, message):
    # one failure, the early check's, in the facts play; no task changed anything on any host
    msg = result.assert_refused(site, message)
    assert result.failures[0][0] == DRA_CHECK, result.failures
    assert "\n" not in msg
    assert all(stats.get("changed", 0) == 0 for stats in result.out["stats"].values()), result.out["stats"]
    return msg


def test_a_dra_host_with_an_old_driver_is_refused_before_anything_changes(site):
    inventory, labels = _dra_host(site)
    result = site.run(inventory)
    msg = _refused_early(site, result, "DRA cannot be deployed: DRA host %s runs NVIDIA driver 535.104.05; the DRA "
                                       "driver needs 565 or newer" % site.gpu_host)
    assert "Kubernetes" not in msg  # the test server answers 1.34.2
    # the node as it was: no DRA label, no taint, no cordon
    after = site.kube.core().read_node(site.gpu_host)
    assert dict(after.metadata.labels or {}) == labels
    assert not after.spec.taints and not after.spec.unschedulable


def test_a_dra_host_on_a_cluster_older_than_1_34_is_refused_before_anything_changes(site):
    if not site.kube.is_test_server:
        pytest.skip("needs the API test server to answer an older version")
    inventory, labels = _dra_host(site)
    server = site.kube.server
    server.version = dict(server.version, minor="33", gitVersion="v1.33.5")
    try:
        result = site.run(inventory, None, "--tags", "labels")
    finally:
        server.version = dict(server.version, minor="34", gitVersion="v1.34.2")
    msg = _refused_early(site, result, "DRA cannot be deployed: the cluster runs Kubernetes 1.33")
    assert "DRA host %s runs NVIDIA driver 535.104.05" % site.gpu_host in msg
    assert dict(site.kube.core().read_node(site.gpu_host).metadata.labels or {}) == labels
