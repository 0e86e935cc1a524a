"""Role kubegpu.nvidia.dcgm_exporter: ansible-playbook against the Kubernetes API test server.

The test server's DaemonSet controller and kubelet stand-in (tests/support/kubeapi/kubelet.py) start one exporter
pod per GPU node the DaemonSet selects and tolerates; the ServiceMonitor is served only while the Prometheus
Operator's CRD exists (tests/support/kubeapi/resources.py), as kube-apiserver serves custom resources.
"""
import json

import pytest

import ansible_run

from test_kubeapi_custom_resources import CRD

kubernetes = pytest.importorskip("kubernetes")

NAMESPACE = NAME = "nvidia-dcgm-exporter"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
HEALTH_TAINT = {"key": "nvidia.com/gpu.health", "value": "unhealthy", "effect": "NoSchedule"}
# module_utils/k8s_eviction.py PAUSE_TAINT: k8s_gpu_evict pauses the GPU daemons of a node with it
PAUSE_TAINT = {"key": "kubegpu.nvidia/driver-upgrade", "value": "paused", "effect": "NoSchedule"}
VARS = {"dcgm_exporter_wait_timeout": 30, "dcgm_exporter_wait_delay": 1}

PLAYBOOK = """
- name: Deploy dcgm-exporter
  hosts: localhost
  gather_facts: false
  roles:
    - role: kubegpu.nvidia.dcgm_exporter
"""


def run(cluster, extra=None, check=False, diff=False):
    res = ansible_run.run_playbook(cluster["dir"] / "site.yml", cluster["dir"] / "inventory.json",
                                   dict(VARS, **(extra or {})), check=check, diff=diff,
                                   kubeconfig=cluster["kubeconfig"])
    return res.rc, res.stats.get("localhost", {}), res.tasks()


def failed(tasks):
    return [(name, res.get("msg")) for name, res in tasks.items() if res.get("failed")]


@pytest.fixture
def cluster(kube_server, kube, tmp_path):
    """GPU nodes: healthy, unhealthy (the health gate's taint), paused for a driver upgrade; and a CPU node."""
    client = kube.api_client()
    core = kubernetes.client.CoreV1Api(client)
    nodes = {"gpu-healthy": [GPU_TAINT], "gpu-unhealthy": [GPU_TAINT, HEALTH_TAINT],
             "gpu-paused": [GPU_TAINT, PAUSE_TAINT], "cpu": None}
    for name, taints in nodes.items():
        labels = {"kubernetes.io/hostname": name}
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
        if taints is not None:
            labels["nvidia.com/gpu.present"] = "true"
            body["spec"] = {"taints": taints}
        core.create_node(body)
    # the device plugin role's RuntimeClass, which the exporter runs with
    kubernetes.client.NodeV1Api(client).create_runtime_class(
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"})
    (tmp_path / "inventory.json").write_text(json.dumps(
        {"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}}))
    (tmp_path / "site.yml").write_text(PLAYBOOK)
    return {"dir": tmp_path, "core": core, "apps": kubernetes.client.AppsV1Api(client), "kube": kube,
            "custom": kubernetes.client.CustomObjectsApi(client),
            "ext": kubernetes.client.ApiextensionsV1Api(client), "kubeconfig": kube.kubeconfig}


def exporter_nodes(cluster):
    pods = cluster["core"].list_namespaced_pod(NAMESPACE).items
    return sorted(p.spec.node_name for p in pods if p.status.phase == "Running")


def test_without_the_crd_it_deploys_the_exporter_and_service_and_says_why_no_servicemonitor(cluster):
    rc, stats, tasks = run(cluster)
    assert rc == 0, failed(tasks)
    assert stats["changed"] >= 1
    ds = cluster["apps"].read_namespaced_daemon_set(NAME, NAMESPACE)
    # the GPU nodes, the unhealthy one included (it keeps exporting why); not the paused one, not the CPU node
    assert ds.status.desired_number_scheduled == ds.status.number_ready == 2
    assert exporter_nodes(cluster) == ["gpu-healthy", "gpu-unhealthy"]
    service = cluster["core"].read_namespaced_service(NAME, NAMESPACE)
    assert service.spec.type == "ClusterIP" and [p.port for p in service.spec.ports] == [9400]
    counters = cluster["core"].read_namespaced_config_map(NAME + "-counters", NAMESPACE).data["counters.csv"]
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter" in counters
    note = tasks["Say why no ServiceMonitor is applied"]["msg"]
    assert note.startswith("no ServiceMonitor applied: the CustomResourceDefinition "
                           "servicemonitors.monitoring.coreos.com does not exist on this cluster")
    assert "Check that the DaemonSet rolled out" in tasks and not tasks["Check that the DaemonSet rolled out"].get("failed")

    # second run: nothing to change, nothing written, no rollout wait
    rc, stats, tasks = run(cluster)
    assert rc == 0, failed(tasks)
    assert stats["changed"] == 0, [name for name, res in tasks.items() if res.get("changed")]
    assert tasks["Wait until the DaemonSet is ready on every GPU node it selects"]["skipped"] is True

    # the driver upgrade is over on gpu-paused: its taint goes, the exporter comes back there
    cluster["core"].patch_node("gpu-paused", {"spec": {"taints": [GPU_TAINT]}})
    rc, stats, tasks = run(cluster)
    assert rc == 0, failed(tasks)
    assert exporter_nodes(cluster) == ["gpu-healthy", "gpu-paused", "gpu-unhealthy"]


def test_with_the_crd_a_servicemonitor_is_applied_once(cluster):
    cluster["ext"].create_custom_resource_definition(CRD)
    rc, _stats, tasks = run(cluster)
    assert rc == 0, failed(tasks)
    assert tasks["Say why no ServiceMonitor is applied"]["skipped"] is True
    monitor = cluster["custom"].get_namespaced_custom_object("monitoring.coreos.com", "v1", NAMESPACE,
                                                             "servicemonitors", NAME)
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]
    assert monitor["spec"]["selector"]["matchLabels"] == cluster["core"].read_namespaced_service(
        NAME, NAMESPACE).spec.selector
    rc, stats, tasks = run(cluster)
    assert rc == 0, failed(tasks)
    assert stats["changed"] == 0, [name for name, res in tasks.items() if res.get("changed")]


def test_k8s_gpu_evict_stops_the_exporter_with_the_other_gpu_daemons_and_restore_brings_it_back(cluster):
    """What upgrade_driver.yml (and a MIG change) does to a node: k8s_gpu_evict taints it with the pause taint and
    deletes the pods that hold the driver; their DaemonSets must not start them again until it is restored."""
    rc, _stats, tasks = run(cluster)
    assert rc == 0, failed(tasks)
    exporter = ["%s/%s" % (NAMESPACE, p.metadata.name) for p in cluster["core"].list_namespaced_pod(
        NAMESPACE, field_selector="spec.nodeName=gpu-healthy").items]
    assert len(exporter) == 1
    evict = cluster["kube"].ansible("kubegpu.nvidia.k8s_gpu_evict", {"node": "gpu-healthy", "delay": 0.2})
    assert evict.get("failed") is not True, evict
    assert evict["paused"] is True and evict["stopped"] == exporter
    assert evict["restarted"] == []
    assert exporter_nodes(cluster) == ["gpu-unhealthy"]
    restored = cluster["kube"].ansible("kubegpu.nvidia.k8s_gpu_evict", {"node": "gpu-healthy", "state": "restored",
                                                                        "delay": 0.2})
    assert restored["changed"] is True and restored["paused"] is False
    assert exporter_nodes(cluster) == ["gpu-healthy", "gpu-unhealthy"]


def test_check_mode_creates_nothing_and_shows_the_objects(cluster):
    rc, stats, tasks = run(cluster, check=True, diff=True)
    assert rc == 0, failed(tasks)
    assert stats["changed"] >= 1
    shown = tasks["Show the dcgm-exporter objects this run would create in its new namespace"]["msg"]
    assert sorted(o["kind"] for o in shown) == ["ConfigMap", "DaemonSet", "Service", "ServiceAccount"]
    with pytest.raises(kubernetes.client.exceptions.ApiException) as err:
        cluster["apps"].read_namespaced_daemon_set(NAME, NAMESPACE)
    assert err.value.status == 404


def test_a_toleration_of_the_pause_taint_stops_the_role_before_anything_is_applied(cluster):
    rc, _stats, tasks = run(cluster, {"dcgm_exporter_extra_tolerations": [{"operator": "Exists"}]})
    assert rc != 0
    assert failed(tasks) == [("Check the role's input before applying anything",
                              'dcgm_exporter_extra_tolerations {"operator": "Exists"} tolerates the taint '
                              "kubegpu.nvidia/driver-upgrade=paused:NoSchedule that pauses the GPU daemons during "
                              "driver upgrades and MIG changes: the exporter would keep the driver open; name the "
                              "taints to tolerate by key")]
    assert cluster["core"].list_namespace().items and NAMESPACE not in [
        n.metadata.name for n in cluster["core"].list_namespace().items]
