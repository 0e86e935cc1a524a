"""Playbook kubegpu.nvidia.upgrade_driver against the Kubernetes API test server.

Two GPU "nodes" are inventory hosts on a local connection with nvidia_driver_skip, so the
driver role runs its skip path and no package work happens on this machine; what is
exercised is the rolling part: the eviction (a workload pod evicted, DaemonSet pods kept,
PodDisruptionBudgets respected, the GPU daemons stopped), wait for Ready and nvidia.com/gpu,
the validation pod, uncordon, and the stop-on-failure path.

The device plugin is the one the role kubegpu.nvidia.k8s_device_plugin deploys with the lab's
configuration (lab/cluster.yml: a time-sliced configuration chosen per product): its pods carry
the config-manager's emptyDir, which kubernetes.core.k8s_drain refuses (kubernetes.core issue 622).
"""
import json
import os
import time

import pytest
import yaml

import ansible_run

kubernetes = pytest.importorskip("kubernetes")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK = os.path.join(ROOT, "playbooks", "upgrade_driver.yml")
SIMULATED = "kubegpu.io/simulated-gpus"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
PAUSE_TAINT = "kubegpu.nvidia/driver-upgrade"
# host -> (node, simulated GPUs, product label)
NODES = {"gpu-a": ("node-a", 1, "Tesla-T4"), "gpu-b": ("node-b", 2, "NVIDIA-H100-80GB-HBM3")}
PLUGIN_NS = "nvidia-device-plugin"
# the driver role's report when nvidia_driver_skip is set
DRIVER_REPORT = "Check the distribution"
EVICT = "Evict the node's work and stop its GPU daemons"
FAST = {
    "nvidia_driver_skip": True,
    "upgrade_driver_drain_timeout": 2, "upgrade_driver_drain_delay": 1,
    "upgrade_driver_ready_timeout": 10, "upgrade_driver_poll_delay": 1,
    "gpu_validation_delay": 1, "gpu_validation_timeout": 30, "gpu_validation_unschedulable_timeout": 3,
}
DEVICE_PLUGIN_PLAY = """
- name: Deploy the NVIDIA device plugin
  hosts: localhost
  gather_facts: false
  roles:
    - role: kubegpu.nvidia.k8s_device_plugin
"""


def lab_device_plugin_vars():
    """The device plugin settings lab/cluster.yml writes for site.yml (its site-vars.yml, minus the templated lines)."""
    with open(os.path.join(ROOT, "lab", "cluster.yml"), encoding="utf-8") as handle:
        plays = yaml.safe_load(handle)
    task = next(t for play in plays for t in play.get("tasks", [])
                if t["name"] == "Write the variables site.yml needs in the lab")
    content = task["ansible.builtin.copy"]["content"]
    settings = yaml.safe_load("\n".join(line for line in content.splitlines() if "{{" not in line))
    return dict((key, value) for key, value in settings.items() if key.startswith("k8s_device_plugin_"))


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
    """Nodes node-a (1 T4, shared 4 ways) and node-b (2 H100) with the lab's device plugin running, and a workload."""
    core = kubernetes.client.CoreV1Api(kube.api_client())
    for node, gpus, product in NODES.values():
        core.create_node({"apiVersion": "v1", "kind": "Node",
                          "metadata": {"name": node, "annotations": {SIMULATED: str(gpus)},
                                       "labels": {"kubernetes.io/hostname": node, "nvidia.com/gpu.present": "true",
                                                  "nvidia.com/gpu.product": product}},
                          "spec": {"taints": [GPU_TAINT]}})
    facts = tmp_path / "facts"
    facts.mkdir()
    for host, (_node, gpus, _product) in NODES.items():
        ansible_run.write_cached_facts(facts, host, {"nvidia_gpu": {"present": True, "count": gpus}})
    inventory = {
        "gpu_nodes": {"hosts": {host: {"ansible_connection": "local", "kubegpu_node_name": node}
                                for host, (node, _gpus, _product) in NODES.items()}},
        "k8s_control": {"hosts": {"control": {"ansible_connection": "local"}}},
        "all": {"hosts": {"localhost": {"ansible_connection": "local"}}},
    }
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "device_plugin.yml").write_text(DEVICE_PLUGIN_PLAY)
    plugin_vars = dict(lab_device_plugin_vars(), k8s_device_plugin_wait_timeout=20)
    deployed = ansible_run.run_playbook(tmp_path / "device_plugin.yml", tmp_path / "inventory.json", plugin_vars,
                                        kubeconfig=kube.kubeconfig, fact_cache=facts)
    assert deployed.rc == 0, [(n, r.get("msg")) for _h, n, r in deployed.events() if r.get("failed")]
    # the lab's configuration: the T4 shared 4 ways through a config map, chosen per product
    assert allocatable(core, "node-a") == "4" and allocatable(core, "node-b") == "2"
    assert core.read_node("node-a").metadata.labels["nvidia.com/device-plugin.config"] == "t4-shared"
    for node in ("node-a", "node-b"):
        pods = list(core.list_namespaced_pod(PLUGIN_NS, field_selector="spec.nodeName=%s" % node).items)
        assert len(pods) == 1
        assert any(v.empty_dir is not None for v in pods[0].spec.volumes), "no emptyDir: not the case to prove"
    namespace = kube.namespace()
    return {"dir": tmp_path, "core": core, "ns": namespace, "kubeconfig": kube.kubeconfig,
            "policy": kubernetes.client.PolicyV1Api(kube.api_client())}


def allocatable(core, node):
    return (core.read_node(node).status.allocatable or {}).get("nvidia.com/gpu")


def workload_pod(core, namespace, name, node, app, gpus=0):
    """A running pod on `node` owned by a ReplicaSet (so a drain may evict it)."""
    container = {"name": "main", "image": "registry.invalid/app:1"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": app + "-rs",
                                          "uid": "00000000-0000-4000-8000-0000000000%02d" % len(name),
                                          "controller": True}]},
        "spec": {"nodeName": node, "containers": [container],
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}})


def pdb(cluster_, name, app, **spec):  # pylint: disable=redefined-outer-name
    cluster_["policy"].create_namespaced_pod_disruption_budget(cluster_["ns"], {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
        "spec": dict(spec, selector={"matchLabels": {"app": app}})})


def pod_names(core, namespace, node):
    return sorted(p.metadata.name for p in core.list_namespaced_pod(
        namespace, field_selector="spec.nodeName=%s" % node).items)


def plugin_pods(core, node):
    return [p.metadata.uid for p in core.list_namespaced_pod(PLUGIN_NS, field_selector="spec.nodeName=%s" % node).items]


def test_rolling_upgrade_evicts_validates_and_uncordons_with_the_labs_device_plugin(cluster):  # pylint: disable=redefined-outer-name
    core, ns = cluster["core"], cluster["ns"]
    workload_pod(core, ns, "web-a", "node-a", "web")
    workload_pod(core, ns, "web-b", "node-b", "web")
    pdb(cluster, "web", "web", maxUnavailable=1)
    plugins_before = {node: plugin_pods(core, node) for node, _g, _p in NODES.values()}

    rc, events = run_upgrade(cluster["dir"], cluster["kubeconfig"])
    assert rc == 0, [(h, n, r.get("msg")) for h, n, r in events if r.get("failed")]

    steps = [EVICT, "Upgrade the driver", "Bring the GPU daemons back",
             "Wait for the node to be Ready with its GPUs advertised", "Validate the node with a GPU pod",
             "Uncordon the node"]
    for host, (node, gpus, _product) in NODES.items():
        order = ran(events, host)
        assert [name for name in order if name in steps] == steps, order
        drained = result(events, host, EVICT)
        assert drained["changed"] is True and drained["cordoned"] is True
        assert drained["evicted"] == ["%s/web-%s" % (ns, host[-1])]
        # the device plugin's pod was not evicted for its emptyDir: it was stopped as a GPU daemon
        assert len(drained["stopped"]) == 1 and drained["stopped"][0].startswith(PLUGIN_NS + "/")
        assert "nvidia_driver_skip is true" in result(events, host, DRIVER_REPORT)["msg"]
        assert result(events, host, "Uncordon the node")["changed"] is True
        # the validation pod passed on this node while it was still cordoned
        validation = result(events, host, "Record the result per node")["ansible_facts"]["gpu_validation_results"]
        assert [(r["node"], r["passed"]) for r in validation] == [(node, True)]
        # the workload was evicted (the PDB allows one at a time); a new device plugin pod runs
        assert [p.metadata.name for p in core.list_namespaced_pod(
            ns, field_selector="spec.nodeName=%s" % node).items] == []
        after = plugin_pods(core, node)
        assert len(after) == 1 and after != plugins_before[node]
        read = core.read_node(node)
        assert not read.spec.unschedulable
        assert PAUSE_TAINT not in [t.key for t in read.spec.taints]
        assert allocatable(core, node) == ("4" if node == "node-a" else "2")
    # serial 1: node-a was uncordoned before node-b was cordoned
    names = [(h, n) for h, n, r in events if not r.get("skipped")]
    assert names.index(("gpu-a", "Uncordon the node")) < names.index(("gpu-b", EVICT))
    # the validation pods were removed
    assert core.list_namespaced_pod("gpu-validation").items == []


def test_only_gpu_work_is_evicted_when_asked(cluster):  # pylint: disable=redefined-outer-name
    core, ns = cluster["core"], cluster["ns"]
    workload_pod(core, ns, "web-a", "node-a", "web")
    workload_pod(core, ns, "train-a", "node-a", "train", gpus=1)
    rc, events = run_upgrade(cluster["dir"], cluster["kubeconfig"], {"upgrade_driver_hosts": "gpu-a",
                                                                     "upgrade_driver_evict": "gpu"})
    assert rc == 0, [(h, n, r.get("msg")) for h, n, r in events if r.get("failed")]
    drained = result(events, "gpu-a", EVICT)
    assert drained["evicted"] == ["%s/train-a" % ns]
    assert drained["left"]["not_gpu"] == ["%s/web-a" % ns]
    assert [p.metadata.name for p in core.list_namespaced_pod(ns, field_selector="spec.nodeName=node-a").items] == [
        "web-a"]


def test_a_pdb_that_forbids_the_eviction_stops_the_play_with_the_node_cordoned(cluster):  # pylint: disable=redefined-outer-name
    core, ns = cluster["core"], cluster["ns"]
    workload_pod(core, ns, "db-0", "node-a", "db")
    pdb(cluster, "db", "db", minAvailable=1)

    started = time.monotonic()
    rc, events = run_upgrade(cluster["dir"], cluster["kubeconfig"])
    elapsed = time.monotonic() - started
    assert rc != 0
    message = result(events, "gpu-a", "Stop the upgrade, naming the node and the step")["msg"]
    assert message.startswith(
        "Driver upgrade stopped on node node-a (host gpu-a) at step 'drain' (task '%s'): draining node node-a did not "
        "finish within 2 s: 1 pod(s) block it: %s/db-0 (Cannot evict pod as it would violate the pod's disruption "
        "budget (The disruption budget db needs 1 healthy pods and has 1 currently))" % (EVICT, ns)), message
    assert "The node stays cordoned on purpose; nodes after it were not touched" in message
    # the drain's own deadline (2 s) ended it, not the play's retries
    assert elapsed < 60, elapsed
    # the PDB held: the pod is still there; node-a stays cordoned; node-b was not touched
    assert "db-0" in pod_names(core, ns, "node-a")
    assert core.read_node("node-a").spec.unschedulable is True
    assert "Upgrade the driver" not in ran(events, "gpu-a")
    assert "Uncordon the node" not in ran(events, "gpu-a")
    assert ran(events, "gpu-b") == []
    assert not core.read_node("node-b").spec.unschedulable


def test_a_host_without_a_node_stops_before_anything_is_cordoned(cluster):  # pylint: disable=redefined-outer-name
    rc, events = run_upgrade(cluster["dir"], cluster["kubeconfig"], {"upgrade_driver_hosts": "gpu-a",
                                                                     "kubegpu_node_name": "node-x"})
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
    assert "nothing to install" in result(events, "gpu-a", "Check the GPUs and the options, and report what the role does")["msg"]
    done = ran(events, "gpu-a")
    for step in ("Gather the GPU facts", "Install the driver packages", "Blacklist nouveau", "Load the kernel module and decide on a reboot"):
        assert step not in done
    assert out["stats"]["gpu-a"]["changed"] == 0


def test_a_node_without_gpus_is_skipped_untouched(cluster, kube):  # pylint: disable=redefined-outer-name
    kube.node("node-cpu", labels={"kubernetes.io/hostname": "node-cpu"})
    rc, events = run_upgrade(cluster["dir"], cluster["kubeconfig"], {"upgrade_driver_hosts": "gpu-a",
                                                                     "kubegpu_node_name": "node-cpu"})
    assert rc == 0, [(h, n, r.get("msg")) for h, n, r in events if r.get("failed")]
    assert "node-cpu (host gpu-a) advertises no nvidia.com/gpu" in result(
        events, "gpu-a", "Report a node that advertises no GPU")["msg"]
    assert EVICT not in ran(events, "gpu-a")
    assert not cluster["core"].read_node("node-cpu").spec.unschedulable


def test_a_node_an_earlier_run_left_paused_is_resumed_not_skipped(cluster):  # pylint: disable=redefined-outer-name
    core = cluster["core"]
    # what a run that stopped after its eviction leaves: node-a cordoned and its GPU daemons paused by the
    # upgrade's taint, so its device plugin pod is gone and it advertises no GPU
    core.patch_node("node-a", {"spec": {"unschedulable": True,
                                        "taints": [GPU_TAINT, {"key": PAUSE_TAINT, "value": "paused",
                                                               "effect": "NoSchedule"}]}})
    deadline = time.monotonic() + 30
    while allocatable(core, "node-a") not in ("0", None) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert allocatable(core, "node-a") in ("0", None)

    rc, events = run_upgrade(cluster["dir"], cluster["kubeconfig"], {"upgrade_driver_hosts": "gpu-a"})
    assert rc == 0, [(h, n, r.get("msg")) for h, n, r in events if r.get("failed")]
    assert "its upgrade is resumed" in result(events, "gpu-a", "Report a node an earlier run left paused")["msg"]
    assert "Report a node that advertises no GPU" not in ran(events, "gpu-a")
    assert "Uncordon the node" in ran(events, "gpu-a")
    read = core.read_node("node-a")
    assert not read.spec.unschedulable
    assert PAUSE_TAINT not in [t.key for t in read.spec.taints]
    assert allocatable(core, "node-a") == "4"
