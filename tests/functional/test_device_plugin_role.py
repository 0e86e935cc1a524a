"""Role kubegpu.nvidia.k8s_device_plugin: ansible-playbook against the Kubernetes API test server.

Simulated GPU nodes (annotation kubegpu.io/simulated-gpus) advertise nvidia.com/gpu once the
role's DaemonSet selects and tolerates them, with the replicas of the configuration the
node's nvidia.com/device-plugin.config label picks. The hosts' nvidia_gpu facts come from
Ansible's fact cache, as an earlier nvidia_gpu_facts run would have left them.
"""
import json

import pytest

import ansible_run

kubernetes = pytest.importorskip("kubernetes")

SIMULATED = "kubegpu.io/simulated-gpus"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}

PLAYBOOK = """
- name: Deploy the NVIDIA device plugin
  hosts: localhost
  gather_facts: false
  roles:
    - role: kubegpu.nvidia.k8s_device_plugin
"""


def run_playbook(directory, kubeconfig, extra_vars, check=False, playbook="site.yml"):
    """Run a playbook with the JSON callback; returns (rc, stats of localhost, {task name: result})."""
    res = ansible_run.run_playbook(directory / playbook, directory / "inventory.json", extra_vars, check=check,
                                   kubeconfig=kubeconfig, fact_cache=directory / "facts")
    return res.rc, res.stats.get("localhost", {}), res.tasks()


def write_facts(directory, host, nvidia_gpu):
    """Leave nvidia_gpu facts for `host` in the jsonfile fact cache."""
    ansible_run.write_cached_facts(directory / "facts", host, {"nvidia_gpu": nvidia_gpu})


def failure(tasks):
    failed = [(name, res) for name, res in tasks.items() if res.get("failed")]
    assert failed, "no task failed"
    return failed[-1]


@pytest.fixture
def cluster(kube_server, kube, tmp_path):
    """GPU hosts h100 (8 GPUs), t4 (1 GPU, node named differently, found by InternalIP) and a CPU host."""
    core = kubernetes.client.CoreV1Api(kube.api_client())
    nodes = {
        # node: (simulated GPUs, labels)
        "h100": (8, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
        "ip-10-66-0-4": (1, {"nvidia.com/gpu.product": "Tesla-T4"}),
        "cpu": (0, {}),
    }
    for name, (gpus, labels) in nodes.items():
        labels = dict(labels, **{"kubernetes.io/hostname": name})
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
        if gpus:
            labels["nvidia.com/gpu.present"] = "true"
            body["metadata"]["annotations"] = {SIMULATED: str(gpus)}
            body["spec"] = {"taints": [GPU_TAINT]}
        core.create_node(body)
    core.patch_node_status("ip-10-66-0-4", {"status": {"addresses": [{"type": "InternalIP", "address": "10.66.0.4"}]}},
                           _content_type="application/strategic-merge-patch+json")
    facts = tmp_path / "facts"
    facts.mkdir()
    hosts = {"h100": (gpu_facts(H100, 8), {}),
             "t4": (gpu_facts(T4, 1), {"ansible_host": "10.66.0.4"}),
             "cpu": ({"present": False, "count": 0, "devices": []}, {})}
    inventory = {"gpu_nodes": {"hosts": {}}, "all": {"hosts": {"localhost": {"ansible_connection": "local"}}}}
    for host, (gpu, hostvars) in hosts.items():
        write_facts(tmp_path, host, gpu)
        inventory["gpu_nodes"]["hosts"][host] = dict(hostvars, ansible_connection="local")
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "site.yml").write_text(PLAYBOOK)
    return {"dir": tmp_path, "core": core, "apps": kubernetes.client.AppsV1Api(kube.api_client()),
            "kubeconfig": kube.kubeconfig}


H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "compute_capability": "9.0", "pci_class": "0x030200",
        "mig": {"current": 0, "pending": 0, "devices": []}}
T4 = {"name": "Tesla T4", "memory_mib": 15360, "compute_capability": "7.5", "pci_class": "0x030200",
      "mig": {"current": None, "pending": None, "devices": None}}


def gpu_facts(device, count):
    """nvidia_gpu facts of a host with ``count`` GPUs like ``device``."""
    return {"present": True, "count": count, "source": "nvml", "driver_version": "535.183.01",
            "cuda_driver_version": "12.2", "machine": "lab", "devices": [dict(device, index=i) for i in range(count)]}


def allocatable(core, node):
    return (core.read_node(node).status.allocatable or {}).get("nvidia.com/gpu")


BASE = {"k8s_device_plugin_wait_timeout": 20, "k8s_device_plugin_wait_delay": 1}
SHARED_T4 = dict(BASE, k8s_device_plugin_configs={"t4-shared": {"sharing_strategy": "time-slicing", "replicas": 4}},
                 k8s_device_plugin_product_configs={"Tesla-T4": "t4-shared"})


def test_allocatable_appears_per_config_and_second_run_changes_nothing(cluster):
    rc, stats, tasks = run_playbook(cluster["dir"], cluster["kubeconfig"], SHARED_T4)
    assert rc == 0, failure(tasks)
    assert stats["changed"] >= 2
    core = cluster["core"]
    assert allocatable(core, "h100") == "8"
    assert allocatable(core, "ip-10-66-0-4") == "4"  # 1 GPU x 4 time-slicing replicas
    assert allocatable(core, "cpu") is None
    # every GPU host's node names its config; the T4 gets its product's, the H100 the default
    assert core.read_node("ip-10-66-0-4").metadata.labels["nvidia.com/device-plugin.config"] == "t4-shared"
    assert core.read_node("h100").metadata.labels["nvidia.com/device-plugin.config"] == "default"
    assert "nvidia.com/device-plugin.config" not in core.read_node("cpu").metadata.labels
    ds = cluster["apps"].read_namespaced_daemon_set("nvidia-device-plugin", "nvidia-device-plugin")
    assert ds.status.desired_number_scheduled == ds.status.number_ready == 2
    capacity = tasks["Record the GPU capacity per node and the revision of the DaemonSet"]["ansible_facts"]["k8s_device_plugin_capacity"]
    assert sorted((c["node"], c["host"], c["config"], c["expected"]) for c in capacity) == [
        ("h100", "h100", "default", {"nvidia.com/gpu": 8}), ("ip-10-66-0-4", "t4", "t4-shared", {"nvidia.com/gpu": 4})]

    rc, stats, tasks = run_playbook(cluster["dir"], cluster["kubeconfig"], SHARED_T4)
    assert rc == 0, failure(tasks)
    assert stats["changed"] == 0, [name for name, res in tasks.items() if res.get("changed")]


def test_shortfall_fails_naming_the_node(cluster):
    # the host's facts say 4 GPUs; its node advertises only 1 (the plugin sees one)
    write_facts(cluster["dir"], "t4", gpu_facts(T4, 4))
    rc, _stats, tasks = run_playbook(cluster["dir"], cluster["kubeconfig"], dict(BASE, k8s_device_plugin_wait_timeout=2))
    assert rc != 0
    name, result = failure(tasks)
    assert name == "Check the GPUs each node advertises"
    assert "GPU allocatable falls short on 1 node(s)" in result["msg"]
    assert "ip-10-66-0-4 (allocatable 1, expected 4 under config default)" in result["msg"]
    assert "h100" not in result["msg"]


def test_unknown_host_is_named(cluster):
    rc, _stats, tasks = run_playbook(cluster["dir"], cluster["kubeconfig"],
                                     dict(BASE, k8s_device_plugin_wait_timeout=2,
                                          k8s_device_plugin_node_gpus={"h100": 8, "gone-node": 2}))
    assert rc != 0
    assert "gone-node (node not found)" in failure(tasks)[1]["msg"]


def test_check_mode_creates_nothing(cluster):
    rc, stats, tasks = run_playbook(cluster["dir"], cluster["kubeconfig"], BASE, check=True)
    assert rc == 0, failure(tasks)
    assert stats["changed"] >= 1
    with pytest.raises(kubernetes.client.exceptions.ApiException) as err:
        cluster["apps"].read_namespaced_daemon_set("nvidia-device-plugin", "nvidia-device-plugin")
    assert err.value.status == 404


# The nodes as k8s_gpu_label returns them with return_nodes (site.yml's labels play), passed in.
GIVEN_NODES_PLAYBOOK = """
- name: Read the nodes with the labels call, then deploy the device plugin from them
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Label the GPU nodes and return them
      kubegpu.nvidia.k8s_gpu_label:
        nodes: [{name: h100, labels: {}}, {name: ip-10-66-0-4, labels: {}}]
        return_nodes: true
      register: labelled
    - name: Deploy the device plugin
      ansible.builtin.include_role:
        name: kubegpu.nvidia.k8s_device_plugin
      vars:
        k8s_device_plugin_nodes: "{{ labelled.nodes | map('combine', given_override | default({})) }}"
"""


def test_nodes_given_stand_in_for_the_read_and_a_shortfall_among_them_is_polled(cluster):
    (cluster["dir"] / "given.yml").write_text(GIVEN_NODES_PLAYBOOK)
    # first run: the plugin is applied (changed), so the role polls the nodes itself
    rc, _stats, tasks = run_playbook(cluster["dir"], cluster["kubeconfig"], SHARED_T4, playbook="given.yml")
    assert rc == 0, failure(tasks)
    assert tasks["Wait until every GPU node advertises its GPUs"].get("skipped") is not True
    # re-run: the given nodes show every GPU and the apply changes nothing: the nodes are not read again
    rc, stats, tasks = run_playbook(cluster["dir"], cluster["kubeconfig"], SHARED_T4, playbook="given.yml")
    assert rc == 0, failure(tasks)
    assert stats["changed"] == 0, [name for name, res in tasks.items() if res.get("changed")]
    assert tasks["Read the nodes"]["skipped"] is True
    assert tasks["Wait until every GPU node advertises its GPUs"]["skipped"] is True
    capacity = tasks["Record the GPU capacity per node and the revision of the DaemonSet"]["ansible_facts"]["k8s_device_plugin_capacity"]
    assert sorted((c["node"], c["host"], c["allocatable_text"], c["ok"]) for c in capacity) == [
        ("h100", "h100", "8", True), ("ip-10-66-0-4", "t4", "4", True)]
    # given nodes that show no GPU (read before the plugin ran, say): the role reads the nodes until they do
    extra = dict(SHARED_T4, given_override={"allocatable": {}})
    rc, _stats, tasks = run_playbook(cluster["dir"], cluster["kubeconfig"], extra, playbook="given.yml")
    assert rc == 0, failure(tasks)
    poll = tasks["Wait until every GPU node advertises its GPUs"]
    assert poll.get("skipped") is not True and len(poll["resources"]) == 3
    capacity = tasks["Record the GPU capacity per node and the revision of the DaemonSet"]["ansible_facts"]["k8s_device_plugin_capacity"]
    assert all(c["ok"] for c in capacity)


def test_health_check_settings_reach_the_plugin_and_a_conflict_stops_the_role_before_anything_is_applied(cluster):
    # k8s-device-plugin v0.20 internal/rm/health.go reads DP_DISABLE_HEALTHCHECKS / DP_ENABLE_HEALTHCHECKS
    conflict = dict(BASE, k8s_device_plugin_health_ignored_xids=[48, 79], k8s_device_plugin_health_forced_xids=[79])
    rc, _stats, tasks = run_playbook(cluster["dir"], cluster["kubeconfig"], conflict)
    assert rc != 0
    name, result = failure(tasks)
    assert name == "Check the role's input before applying anything"
    assert result["msg"] == ("Xid 79 both ignored and forced: remove it from k8s_device_plugin_health_ignored_xids "
                             "or from k8s_device_plugin_health_forced_xids")
    with pytest.raises(kubernetes.client.exceptions.ApiException):
        cluster["apps"].read_namespaced_daemon_set("nvidia-device-plugin", "nvidia-device-plugin")

    settings = dict(BASE, k8s_device_plugin_health_ignored_xids=[94, 48], k8s_device_plugin_health_forced_xids=[109])
    rc, _stats, tasks = run_playbook(cluster["dir"], cluster["kubeconfig"], settings)
    assert rc == 0, failure(tasks)
    ds = cluster["apps"].read_namespaced_daemon_set("nvidia-device-plugin", "nvidia-device-plugin")
    plugin = [c for c in ds.spec.template.spec.containers if c.name == "nvidia-device-plugin-ctr"][0]
    assert dict((e.name, e.value) for e in plugin.env if e.name.startswith("DP_")) == {
        "DP_DISABLE_HEALTHCHECKS": "48,94", "DP_ENABLE_HEALTHCHECKS": "109"}
