"""Playbook kubegpu.nvidia.upgrade_driver against the Kubernetes API test server.

Two GPU "nodes" are inventory hosts on a local connection with nvidia_driver_skip, so the
driver role runs its skip path and no package work happens on this machine; what is
exercised is the rolling part: cordon, drain (a workload pod evicted, the device plugin's
DaemonSet pod kept, PodDisruptionBudgets respected), wait for Ready and nvidia.com/gpu,
the validation pod, uncordon, and the stop-on-failure path.
"""
import json
import os

import pytest

import ansible_run

kubernetes = pytest.importorskip("kubernetes")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK = os.path.join(ROOT, "playbooks", "upgrade_driver.yml")
SIMULATED = "kubegpu.io/simulated-gpus"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
NODES = {"gpu-a": "node-a", "gpu-b": "node-b"}
# the driver role's check, which also says what the role does on the host
DRIVER_REPORT = "Check the distribution and the options, and report what the role does"
FAST = {
    "nvidia_driver_skip": True,
    "upgrade_driver_drain_timeout": 2, "upgrade_driver_drain_delay": 1,
    "upgrade_driver_ready_timeout": 10, "upgrade_driver_poll_delay": 1,
    "gpu_validation_delay": 1, "gpu_validation_timeout": 30, "gpu_validation_unschedulable_timeout": 3,
}


def run_upgrade(directory, kubeconfig, extra_vars=None):
    """Run the playbook with the JSON callback; returns (rc, [(host, task, result)] in order)."""
    res = ansible_run.run_playbook(PLAYBOOK, directory / "inventory.json", dict(FAST, **(extra_vars or {})),
                                   kubeconfig=kubeconfig, env={"ANSIBLE_PIPELINING": "1"})
    return res.rc, res.events()


def ran(events, host):
    """Names of the tasks that ran (not skipped) for host, in order."""
    return [name for h, name, res in events if h == host and not res.get("skipped")]


def result(events, host, name):
    found = [res for h, n, res in events if h == host and n == name]
    assert found, "task %r did not run on %s" % (name, host)
    return found[-1]


@pytest.fixture
def cluster(kube_server, kube, tmp_path):  # pylint: disable=unused-argument
    """Nodes node-a and node-b (2 simulated GPUs each) with the device plugin running, and a workload."""
    core = kubernetes.client.CoreV1Api(kube.api_client())
    apps = kubernetes.client.AppsV1Api(kube.api_client())
    for node in NODES.values():
        core.create_node({"apiVersion": "v1", "kind": "Node",
                          "metadata": {"name": node, "annotations": {SIMULATED: "2"},
                                       "labels": {"kubernetes.io/hostname": node, "nvidia.com/gpu.present": "true"}},
                          "spec": {"taints": [GPU_TAINT]}})
    namespace = kube.namespace()
    apps.create_namespaced_daemon_set(namespace, {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "nvidia-device-plugin"},
        "spec": {"selector": {"matchLabels": {"app": "nvidia-device-plugin"}},
                 "template": {"metadata": {"labels": {"app": "nvidia-device-plugin"}},
                              "spec": {"nodeSelector": {"nvidia.com/gpu.present": "true"},
                                       "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                                        "effect": "NoSchedule"}],
                                       "containers": [{"name": "plugin",
                                                       "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"}],
                                       "volumes": [{"name": "dp", "hostPath": {
                                           "path": "/var/lib/kubelet/device-plugins"}}]}}}})
    for node in NODES.values():
        assert allocatable(core, node) == "2"
    # as the device plugin role leaves it: pods reach the nvidia runtime through this RuntimeClass
    try:
        kubernetes.client.NodeV1Api(kube.api_client()).create_runtime_class(
            {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"})
    except kubernetes.client.exceptions.ApiException as exc:
        if exc.status != 409:
            raise
    inventory = {
        "gpu_nodes": {"hosts": {host: {"ansible_connection": "local", "k8s_node_name": node}
                                for host, node in NODES.items()}},
        "k8s_control": {"hosts": {"control": {"ansible_connection": "local"}}},
    }
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    return {"dir": tmp_path, "core": core, "ns": namespace, "kubeconfig": kube.kubeconfig,
            "policy": kubernetes.client.PolicyV1Api(kube.api_client())}


def allocatable(core, node):
    return (core.read_node(node).status.allocatable or {}).get("nvidia.com/gpu")


def workload_pod(core, namespace, name, node, app):
    """A running pod on `node` owned by a ReplicaSet (so a drain may evict it)."""
    core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": app + "-rs",
                                          "uid": "00000000-0000-4000-8000-0000000000%02d" % len(name),
                                          "controller": True}]},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.invalid/app:1"}],
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}})


def pdb(cluster_, name, app, **spec):  # pylint: disable=redefined-outer-name
    cluster_["policy"].create_namespaced_pod_disruption_budget(cluster_["ns"], {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
        "spec": dict(spec, selector={"matchLabels": {"app": app}})})


def pod_names(core, namespace, node):
    return sorted(p.metadata.name for p in core.list_namespaced_pod(
        namespace, field_selector="spec.nodeName=%s" % node).items)


def daemonset_pods(core, namespace, node):
    return [p.metadata.uid for p in core.list_namespaced_pod(
        namespace, field_selector="spec.nodeName=%s" % node).items
        if any(ref.kind == "DaemonSet" for ref in p.metadata.owner_references or [])]


def test_rolling_upgrade_cordons_drains_validates_and_uncordons(cluster):  # pylint: disable=redefined-outer-name
    core, ns = cluster["core"], cluster["ns"]
    workload_pod(core, ns, "web-a", "node-a", "web")
    workload_pod(core, ns, "web-b", "node-b", "web")
    pdb(cluster, "web", "web", maxUnavailable=1)
    plugin_pods = {node: daemonset_pods(core, ns, node) for node in NODES.values()}
    assert all(len(uids) == 1 for uids in plugin_pods.values())
    for node, pod in (("node-a", "web-a"), ("node-b", "web-b")):
        assert pod in pod_names(core, ns, node) and len(pod_names(core, ns, node)) == 2

    rc, events = run_upgrade(cluster["dir"], cluster["kubeconfig"])
    assert rc == 0, [(h, n, r.get("msg")) for h, n, r in events if r.get("failed")]

    steps = ["Cordon the node", "Drain the node", "Upgrade the driver", "Wait for the node to be Ready with its GPUs advertised",
             "Validate the node with a GPU pod", "Uncordon the node"]
    for host, node in NODES.items():
        order = ran(events, host)
        assert [name for name in order if name in steps] == steps, order
        assert "node %s marked unschedulable" % node in result(events, host, "Cordon the node")["result"]
        assert result(events, host, "Drain the node")["changed"] is True
        assert "nvidia_driver_skip is true" in result(events, host, DRIVER_REPORT)["msg"]
        assert result(events, host, "Uncordon the node")["changed"] is True
        # the validation pod passed on this node while it was still cordoned
        validation = result(events, host, "Record the result per node")["ansible_facts"]["gpu_validation_results"]
        assert [(r["node"], r["passed"]) for r in validation] == [(node, True)]
        # the workload was evicted (the PDB allows one at a time); only the plugin's DaemonSet pod, the same one, is left
        assert [p.metadata.uid for p in core.list_namespaced_pod(
            ns, field_selector="spec.nodeName=%s" % node).items] == plugin_pods[node]
        assert not core.read_node(node).spec.unschedulable
        assert allocatable(core, node) == "2"
    # serial 1: node-a was uncordoned before node-b was cordoned
    names = [(h, n) for h, n, r in events if not r.get("skipped")]
    assert names.index(("gpu-a", "Uncordon the node")) < names.index(("gpu-b", "Cordon the node"))
    # the validation pods were removed
    assert core.list_namespaced_pod("gpu-validation").items == []


def test_a_pdb_that_forbids_the_eviction_stops_the_play_with_the_node_cordoned(cluster):  # pylint: disable=redefined-outer-name
    core, ns = cluster["core"], cluster["ns"]
    workload_pod(core, ns, "db-0", "node-a", "db")
    pdb(cluster, "db", "db", minAvailable=1)

    rc, events = run_upgrade(cluster["dir"], cluster["kubeconfig"])
    assert rc != 0
    message = result(events, "gpu-a", "Stop the upgrade, naming the node and the step")["msg"]
    assert "Driver upgrade stopped on node node-a (host gpu-a) at step 'drain'" in message
    assert "db-0" in message and "disruption budget" in message
    assert "The node stays cordoned" in message
    # the PDB held: the pod is still there; node-a stays cordoned; node-b was not touched
    assert "db-0" in pod_names(core, ns, "node-a")
    assert core.read_node("node-a").spec.unschedulable is True
    assert "Upgrade the driver" not in ran(events, "gpu-a")
    assert "Uncordon the node" not in ran(events, "gpu-a")
    assert ran(events, "gpu-b") == []
    assert not core.read_node("node-b").spec.unschedulable


def test_a_host_without_a_node_stops_before_anything_is_cordoned(cluster):  # pylint: disable=redefined-outer-name
    rc, events = run_upgrade(cluster["dir"], cluster["kubeconfig"], {"upgrade_driver_hosts": "gpu-a",
                                                                     "k8s_node_name": "node-x"})
    assert rc != 0
    message = result(events, "gpu-a", "Stop the upgrade, naming the node and the step")["msg"]
    assert "stopped on node node-x (host gpu-a) at step 'read the node'" in message
    assert "no Kubernetes node named 'node-x'" in message
    assert "was not cordoned" in message
    assert not cluster["core"].read_node("node-a").spec.unschedulable


ROLE_PLAYBOOK = """
- name: Install the NVIDIA driver
  hosts: gpu_nodes
  gather_facts: false
  roles:
    - role: kubegpu.nvidia.nvidia_driver
"""


def test_the_driver_role_does_nothing_when_the_wanted_driver_is_loaded(tmp_path):
    """The node's facts (left in the fact cache, as nvidia_gpu_facts leaves them) show 535.183.01 on 8 GPUs."""
    facts = tmp_path / "facts"
    facts.mkdir()
    gpu = {"present": True, "count": 8, "source": "nvml", "driver_version": "535.183.01"}
    ansible_run.write_cached_facts(facts, "gpu-a", {"nvidia_gpu": gpu})
    (tmp_path / "inventory.json").write_text(json.dumps(
        {"gpu_nodes": {"hosts": {"gpu-a": {"ansible_connection": "local"}}}}))
    (tmp_path / "driver.yml").write_text(ROLE_PLAYBOOK)
    # --check: were the decision wrong, nothing would be written on this machine
    run = ansible_run.run_playbook(tmp_path / "driver.yml", tmp_path / "inventory.json",
                                   {"nvidia_driver_version": "535.183.01"}, check=True, fact_cache=facts,
                                   env={"ANSIBLE_PIPELINING": "1"}, timeout=300)
    out, events = run.data, run.events()
    assert run.rc == 0, [(n, r.get("msg")) for _h, n, r in events if r.get("failed")]
    assert "nothing to do" in result(events, "gpu-a", DRIVER_REPORT)["msg"]
    done = ran(events, "gpu-a")
    for step in ("Gather the GPU facts", "Install the driver packages", "Blacklist nouveau", "Load the kernel module and decide on a reboot"):
        assert step not in done
    assert out["stats"]["gpu-a"]["changed"] == 0


def test_a_node_without_gpus_is_skipped_untouched(cluster, kube):  # pylint: disable=redefined-outer-name
    kube.node("node-cpu", labels={"kubernetes.io/hostname": "node-cpu"})
    rc, events = run_upgrade(cluster["dir"], cluster["kubeconfig"], {"upgrade_driver_hosts": "gpu-a",
                                                                     "k8s_node_name": "node-cpu"})
    assert rc == 0, [(h, n, r.get("msg")) for h, n, r in events if r.get("failed")]
    assert "node-cpu (host gpu-a) advertises no nvidia.com/gpu" in result(
        events, "gpu-a", "Report a node that advertises no GPU")["msg"]
    assert "Cordon the node" not in ran(events, "gpu-a")
    assert not cluster["core"].read_node("node-cpu").spec.unschedulable
