"""The test server's kubelet stand-in, controllers and eviction (test server only, except where noted)."""

import json

import pytest

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

SIMULATED = "kubegpu.io/simulated-gpus"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
CONFIGS = {
    "default": "version: v1\nflags:\n  migStrategy: none\n",
    "ts4": "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n",
}


def device_plugin(ns, default_config="default", node_affinity=True):
    spec = {
        "tolerations": [GPU_TOLERATION, {"key": "CriticalAddonsOnly", "operator": "Exists"}],
        "priorityClassName": "system-node-critical",
        "containers": [
            {"name": "nvidia-device-plugin-ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
             "env": [{"name": "CONFIG_FILE", "value": "/config/config.yaml"}]},
            {"name": "config-manager", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
             "command": ["config-manager"],
             "env": [{"name": "NODE_LABEL", "value": "nvidia.com/device-plugin.config"},
                     {"name": "DEFAULT_CONFIG", "value": default_config}]}],
        "volumes": [{"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}},
                    {"name": "available-configs", "configMap": {"name": "nvdp-configs"}}],
    }
    if node_affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}]}}}
    return {"metadata": {"name": "nvdp", "namespace": ns},
            "spec": {"selector": {"matchLabels": {"app": "nvdp"}},
                     "template": {"metadata": {"labels": {"app": "nvdp"}}, "spec": spec}}}


def gpu_pod(name, gpus="1", node_selector=None, tolerate=True, node_name=None, restart="Never"):
    spec = {"restartPolicy": restart,
            "containers": [{"name": "cuda", "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
                            "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    if tolerate:
        spec["tolerations"] = [GPU_TOLERATION]
    if node_selector:
        spec["nodeSelector"] = node_selector
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name}, "spec": spec}


def allocatable(core, node):
    return (core.read_node(node).status.allocatable or {}).get("nvidia.com/gpu")


def scheduled_condition(pod):
    return next(c for c in pod.status.conditions if c.type == "PodScheduled")


@pytest.fixture
def gpu_cluster(kube, kube_server):
    """Three nodes: h100 (8 simulated GPUs, tainted), t4 (1 GPU, tainted, per-node time-slicing), cpu."""
    core = kube.core()
    ns = kube.namespace()
    h100 = kube.node("h100", labels={"nvidia.com/gpu.present": "true"}, annotations={SIMULATED: "8"},
                     taints=[GPU_TAINT])
    t4 = kube.node("t4", labels={"nvidia.com/gpu.present": "true", "nvidia.com/device-plugin.config": "ts4"},
                   annotations={SIMULATED: "1"}, taints=[GPU_TAINT])
    cpu = kube.node("cpu")
    core.create_namespaced_config_map(ns, {"metadata": {"name": "nvdp-configs"}, "data": dict(CONFIGS)})
    return core, ns, h100, t4, cpu


def test_allocatable_appears_with_the_device_plugin_and_follows_its_config(kube, gpu_cluster):
    core, ns, h100, t4, cpu = gpu_cluster
    apps = kube.apps()
    assert allocatable(core, h100) is None
    apps.create_namespaced_daemon_set(ns, device_plugin(ns))
    assert allocatable(core, h100) == "8"
    assert allocatable(core, t4) == "4"  # node label picks the time-slicing config: 1 GPU x 4 replicas
    assert allocatable(core, cpu) is None
    ds = apps.read_namespaced_daemon_set("nvdp", ns)
    assert (ds.status.desired_number_scheduled, ds.status.current_number_scheduled,
            ds.status.updated_number_scheduled, ds.status.number_ready) == (2, 2, 2, 2)
    assert ds.status.observed_generation == ds.metadata.generation
    pods = core.list_namespaced_pod(ns, label_selector="app=nvdp").items
    assert sorted(p.spec.node_name for p in pods) == [h100, t4]
    assert all(p.metadata.owner_references[0].kind == "DaemonSet" for p in pods)

    # another default config for every node: 8 x 4
    core.patch_namespaced_config_map("nvdp-configs", ns, {"data": {"default": CONFIGS["ts4"]}})
    assert allocatable(core, h100) == "32"
    # a node label naming a config that does not exist: the plugin cannot start there
    core.patch_node(t4, {"metadata": {"labels": {"nvidia.com/device-plugin.config": "missing"}}})
    assert allocatable(core, t4) is None
    ds = apps.read_namespaced_daemon_set("nvdp", ns)
    assert ds.status.number_ready == 1 and ds.status.number_unavailable == 1
    # a node that is no longer selected loses its plugin pod and its GPUs
    core.patch_node(h100, {"metadata": {"labels": {"nvidia.com/gpu.present": "false"}}})
    assert allocatable(core, h100) is None
    assert apps.read_namespaced_daemon_set("nvdp", ns).status.desired_number_scheduled == 1
    # deleting the DaemonSet removes its pods (garbage collection)
    apps.delete_namespaced_daemon_set("nvdp", ns)
    assert core.list_namespaced_pod(ns, label_selector="app=nvdp").items == []


def test_daemonset_that_does_not_tolerate_the_taint_gets_no_nodes(kube, gpu_cluster):
    core, ns, h100, _t4, _cpu = gpu_cluster
    body = device_plugin(ns)
    body["spec"]["template"]["spec"]["tolerations"] = []
    kube.apps().create_namespaced_daemon_set(ns, body)
    assert kube.apps().read_namespaced_daemon_set("nvdp", ns).status.desired_number_scheduled == 0
    assert allocatable(core, h100) is None


def test_gpu_pods_succeed_or_stay_pending_with_a_reason(kube, gpu_cluster):
    core, ns, h100, t4, cpu = gpu_cluster
    kube.apps().create_namespaced_daemon_set(ns, device_plugin(ns))

    core.create_namespaced_pod(ns, gpu_pod("on-h100", node_selector={"kubernetes.io/hostname": h100}))
    pod = core.read_namespaced_pod("on-h100", ns)
    assert pod.status.phase == "Succeeded" and pod.spec.node_name == h100
    assert pod.status.container_statuses[0].state.terminated.exit_code == 0
    assert "Test PASSED" in core.read_namespaced_pod_log("on-h100", ns)

    core.create_namespaced_pod(ns, gpu_pod("untolerated", node_selector={"kubernetes.io/hostname": h100},
                                           tolerate=False))
    core.create_namespaced_pod(ns, gpu_pod("too-many", gpus="9", node_selector={"kubernetes.io/hostname": h100}))
    core.create_namespaced_pod(ns, gpu_pod("on-cpu", node_selector={"kubernetes.io/hostname": cpu}))
    messages = {}
    for name in ("untolerated", "too-many", "on-cpu"):
        pod = core.read_namespaced_pod(name, ns)
        cond = scheduled_condition(pod)
        assert (pod.status.phase, cond.status, cond.reason) == ("Pending", "False", "Unschedulable")
        assert pod.spec.node_name is None
        messages[name] = cond.message
    assert "untolerated taint {nvidia.com/gpu: present}" in messages["untolerated"]
    assert "Insufficient nvidia.com/gpu" in messages["too-many"]
    assert "Insufficient nvidia.com/gpu" in messages["on-cpu"]
    assert messages["on-cpu"].startswith("0/3 nodes are available")
    with pytest.raises(ApiException) as info:
        core.read_namespaced_pod_log("too-many", ns)
    assert info.value.status == 400

    # a long-running GPU pod holds its GPU: the t4 (4 time-sliced replicas) takes four, not five
    for i in range(5):
        core.create_namespaced_pod(ns, gpu_pod("svc-%d" % i, node_selector={"kubernetes.io/hostname": t4},
                                               restart="Always"))
    phases = [core.read_namespaced_pod("svc-%d" % i, ns).status.phase for i in range(5)]
    assert phases == ["Running"] * 4 + ["Pending"]
    core.delete_namespaced_pod("svc-0", ns)
    assert core.read_namespaced_pod("svc-4", ns).status.phase == "Running"


def test_pinned_pod_is_rejected_by_the_kubelet_without_gpus(kube, gpu_cluster):
    core, ns, _h100, _t4, cpu = gpu_cluster
    core.create_namespaced_pod(ns, gpu_pod("pinned", node_name=cpu))
    pod = core.read_namespaced_pod("pinned", ns)
    assert pod.status.phase == "Failed" and pod.status.reason == "OutOfnvidia.com/gpu"


def test_simulated_failure_and_log(kube, gpu_cluster):
    core, ns, _h100, _t4, cpu = gpu_cluster
    core.create_namespaced_pod(ns, {"metadata": {"name": "fails", "annotations": {
        "kubegpu.io/simulated-exit-code": "1", "kubegpu.io/simulated-log": "boom\n"}},
        "spec": {"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": cpu},
                 "containers": [{"name": "c", "image": "busybox:1.36"}]}})
    pod = core.read_namespaced_pod("fails", ns)
    assert pod.status.phase == "Failed" and pod.status.container_statuses[0].state.terminated.exit_code == 1
    assert core.read_namespaced_pod_log("fails", ns) == "boom\n"


def test_job_runs_its_pod_to_completion(kube, gpu_cluster):
    core, ns, h100, _t4, _cpu = gpu_cluster
    kube.apps().create_namespaced_daemon_set(ns, device_plugin(ns))
    template = gpu_pod("unused", node_selector={"kubernetes.io/hostname": h100})
    del template["metadata"]
    batch = client.BatchV1Api(kube.api_client())
    batch.create_namespaced_job(ns, {"metadata": {"name": "validate"}, "spec": {"template": template}})
    job = batch.read_namespaced_job("validate", ns)
    assert job.status.succeeded == 1
    assert any(c.type == "Complete" and c.status == "True" for c in job.status.conditions)
    pods = core.list_namespaced_pod(ns, label_selector="job-name=validate").items
    assert len(pods) == 1 and "Test PASSED" in core.read_namespaced_pod_log(pods[0].metadata.name, ns)


def test_cordon_taint_and_eviction_with_a_disruption_budget(kube, gpu_cluster):
    core, ns, _h100, _t4, cpu = gpu_cluster
    for i in range(2):
        core.create_namespaced_pod(ns, {"metadata": {"name": "web-%d" % i, "labels": {"app": "web"}},
                                        "spec": {"nodeSelector": {"kubernetes.io/hostname": cpu},
                                                 "containers": [{"name": "c", "image": "nginx:1.27"}]}})
    assert core.read_namespaced_pod("web-0", ns).status.phase == "Running"
    policy = client.PolicyV1Api(kube.api_client())
    policy.create_namespaced_pod_disruption_budget(ns, {"metadata": {"name": "web"}, "spec": {
        "minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}})
    pdb = policy.read_namespaced_pod_disruption_budget("web", ns)
    assert (pdb.status.current_healthy, pdb.status.desired_healthy, pdb.status.disruptions_allowed) == (2, 1, 1)

    core.patch_node(cpu, {"spec": {"unschedulable": True}})
    taints = core.read_node(cpu).spec.taints
    assert [(t.key, t.effect) for t in taints] == [("node.kubernetes.io/unschedulable", "NoSchedule")]

    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-0", "namespace": ns}}
    core.create_namespaced_pod_eviction("web-0", ns, eviction)
    with pytest.raises(ApiException) as info:
        core.read_namespaced_pod("web-0", ns)
    assert info.value.status == 404
    eviction["metadata"]["name"] = "web-1"
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod_eviction("web-1", ns, eviction)
    assert info.value.status == 429
    body = json.loads(info.value.body)
    assert body["reason"] == "TooManyRequests" and "disruption budget" in body["message"]
    assert core.read_namespaced_pod("web-1", ns).status.phase == "Running"

    # a pod created on the cordoned node stays pending
    core.create_namespaced_pod(ns, {"metadata": {"name": "late"}, "spec": {
        "nodeSelector": {"kubernetes.io/hostname": cpu}, "containers": [{"name": "c", "image": "nginx:1.27"}]}})
    assert "were unschedulable" in scheduled_condition(core.read_namespaced_pod("late", ns)).message
    core.patch_node(cpu, {"spec": {"unschedulable": None}})
    assert core.read_node(cpu).spec.taints is None
    assert core.read_namespaced_pod("late", ns).status.phase == "Running"


def test_namespace_deletion_removes_its_objects(kube, kube_server):
    core = kube.core()
    ns = kube.namespace()
    core.create_namespaced_config_map(ns, {"metadata": {"name": "c"}})
    core.delete_namespace(ns)
    with pytest.raises(ApiException) as info:
        core.read_namespaced_config_map("c", ns)
    assert info.value.status == 404
    assert kube_server.objects("configmaps", ns) == []


def test_resource_quota_counts_gpu_requests(kube, gpu_cluster):
    core, ns, h100, _t4, _cpu = gpu_cluster
    kube.apps().create_namespaced_daemon_set(ns, device_plugin(ns))
    core.create_namespaced_resource_quota(ns, {"metadata": {"name": "gpus"},
                                               "spec": {"hard": {"requests.nvidia.com/gpu": "4"}}})
    core.create_namespaced_pod(ns, gpu_pod("hold", gpus="2", restart="Always",
                                           node_selector={"kubernetes.io/hostname": h100}))
    quota = core.read_namespaced_resource_quota("gpus", ns)
    assert quota.status.hard == {"requests.nvidia.com/gpu": "4"}
    assert quota.status.used == {"requests.nvidia.com/gpu": "2"}
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod(ns, gpu_pod("over", gpus="3", node_selector={"kubernetes.io/hostname": h100}))
    assert info.value.status == 403 and "exceeded quota: gpus" in json.loads(info.value.body)["message"]


def test_runtime_class_is_required_and_its_node_selector_applies(kube, gpu_cluster):
    core, ns, h100, _t4, _cpu = gpu_cluster
    kube.apps().create_namespaced_daemon_set(ns, device_plugin(ns))
    body = gpu_pod("rc")
    body["spec"]["runtimeClassName"] = "nvidia"
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod(ns, body)
    assert info.value.status == 403 and 'RuntimeClass "nvidia" not found' in json.loads(info.value.body)["message"]
    client.NodeV1Api(kube.api_client()).create_runtime_class({
        "metadata": {"name": "nvidia"}, "handler": "nvidia",
        "scheduling": {"nodeSelector": {"kubernetes.io/hostname": h100}}})
    pod = core.create_namespaced_pod(ns, body)
    assert pod.spec.node_selector == {"kubernetes.io/hostname": h100}
    assert core.read_namespaced_pod("rc", ns).spec.node_name == h100


def test_nodes_without_the_annotation_keep_the_status_they_were_given(kube, kube_server):
    core = kube.core()
    node = kube.node(addresses=[{"type": "InternalIP", "address": "10.1.2.3"}])
    core.patch_node_status(node, {"status": {"allocatable": {"nvidia.com/gpu": "2"},
                                             "capacity": {"nvidia.com/gpu": "2"}}})
    got = core.read_node(node).status
    assert got.allocatable["nvidia.com/gpu"] == "2"
    assert [(a.type, a.address) for a in got.addresses] == [("InternalIP", "10.1.2.3")]
    assert next(c for c in got.conditions if c.type == "Ready").status == "True"


def test_controllers_look_only_at_the_nodes_written_since_they_last_ran(kube, gpu_cluster, monkeypatch):
    """A node write costs the controllers that node, not every node (labelling thousands of nodes stays linear)."""
    from kubeapi import kubelet

    core, ns, h100, t4, cpu = gpu_cluster
    kube.apps().create_namespaced_daemon_set(ns, device_plugin(ns))
    assert allocatable(core, h100) == "8"
    seen = []
    for name in ("node_lifecycle", "node_gpu_resources"):
        original = getattr(kubelet, name)

        def spy(store, nodes, _original=original, _name=name):
            seen.append((_name, sorted(n["metadata"]["name"] for n in nodes)))
            return _original(store, nodes)
        monkeypatch.setattr(kubelet, name, spy)

    core.patch_node(t4, {"metadata": {"labels": {"team": "ml"}}})
    assert allocatable(core, t4) == "4"
    assert seen and all(nodes == [t4] for _name, nodes in seen)
    # and the node written is still fully handled: cordon it, the node controller taints it
    del seen[:]
    core.patch_node(t4, {"spec": {"unschedulable": True}})
    taints = [t.key for t in core.read_node(t4).spec.taints]
    assert "node.kubernetes.io/unschedulable" in taints
    assert all(nodes == [t4] for _name, nodes in seen)
    # a write to anything else (here the configs) makes them look at every node again
    del seen[:]
    core.patch_namespaced_config_map("nvdp-configs", ns, {"data": {"default": CONFIGS["ts4"]}})
    assert allocatable(core, h100) == "32"
    assert ("node_gpu_resources", sorted(n.metadata.name for n in core.list_node().items)) in seen
