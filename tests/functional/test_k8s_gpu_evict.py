"""Module kubegpu.nvidia.k8s_gpu_evict against a Kubernetes API (the test server by default), run with `ansible`.

A node with a device plugin DaemonSet whose pod has an emptyDir (as the device plugin role deploys it
with config maps: the case kubernetes.core.k8s_drain refuses, kubernetes.core issue 622), workloads
with and without GPUs, a PodDisruptionBudget; the module cordons, evicts, stops the GPU daemons and
brings them back. Tests that need the test server's simulated GPUs or timing take `kube_server`.
"""
import time

import pytest

kubernetes = pytest.importorskip("kubernetes")

MODULE = "kubegpu.nvidia.k8s_gpu_evict"
TAINT = "kubegpu.nvidia/driver-upgrade"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.fixture(name="cluster")
def fixture_cluster(kube, kube_server):  # pylint: disable=unused-argument
    core = kube.core()
    apps = kube.apps()
    node = kube.node(labels={"nvidia.com/gpu.present": "true"}, annotations={"kubegpu.io/simulated-gpus": "2"},
                     taints=[GPU_TAINT])
    other = kube.node(labels={"nvidia.com/gpu.present": "true"}, annotations={"kubegpu.io/simulated-gpus": "2"},
                      taints=[GPU_TAINT])
    namespace = kube.namespace()
    # the device plugin as k8s_device_plugin deploys it with config maps: a config emptyDir beside the socket hostPath
    apps.create_namespaced_daemon_set(namespace, {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "nvidia-device-plugin"},
        "spec": {"selector": {"matchLabels": {"app": "nvidia-device-plugin"}},
                 "template": {"metadata": {"labels": {"app": "nvidia-device-plugin"}},
                              "spec": {"nodeSelector": {"nvidia.com/gpu.present": "true"},
                                       "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                                        "effect": "NoSchedule"}],
                                       "containers": [{"name": "plugin",
                                                       "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"}],
                                       "volumes": [{"name": "dp", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}},
                                                   {"name": "config", "emptyDir": {}}]}}}})
    # a log shipper: a DaemonSet that does not use the GPU and tolerates every taint
    apps.create_namespaced_daemon_set(namespace, {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "logs"},
        "spec": {"selector": {"matchLabels": {"app": "logs"}},
                 "template": {"metadata": {"labels": {"app": "logs"}},
                              "spec": {"tolerations": [{"operator": "Exists"}],
                                       "containers": [{"name": "logs", "image": "registry.invalid/logs:1"}],
                                       "volumes": [{"name": "buffer", "emptyDir": {}}]}}}})
    assert allocatable(core, node) == "2"
    return {"core": core, "ns": namespace, "node": node, "other": other, "kube": kube,
            "policy": kubernetes.client.PolicyV1Api(kube.api_client())}


def allocatable(core, node):
    return (core.read_node(node).status.allocatable or {}).get("nvidia.com/gpu")


def pod(cluster, name, gpus=0, owner=True, empty_dir=False, claims=False, app=None):
    """A running pod on the cluster's node (owned by a ReplicaSet unless owner=False)."""
    meta = {"name": name, "labels": {"app": app or name}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": (app or name) + "-rs",
                                    "uid": "00000000-0000-4000-8000-%012d" % (abs(hash(name)) % 10 ** 12),
                                    "controller": True}]
    container = {"name": "main", "image": "registry.invalid/app:1"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec = {"nodeName": cluster["node"], "containers": [container],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    if empty_dir:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    if claims:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    cluster["core"].create_namespaced_pod(cluster["ns"], {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                                                          "spec": spec})
    return "%s/%s" % (cluster["ns"], name)


def pdb(cluster, name, app, **spec):
    cluster["policy"].create_namespaced_pod_disruption_budget(cluster["ns"], {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
        "spec": dict(spec, selector={"matchLabels": {"app": app}})})


def names_on(cluster, node=None):
    return sorted("%s/%s" % (p.metadata.namespace, p.metadata.name) for p in cluster["core"].list_pod_for_all_namespaces(
        field_selector="spec.nodeName=%s" % (node or cluster["node"])).items)


def plugin_pods(cluster, node=None):
    return [n for n in names_on(cluster, node) if "/nvidia-device-plugin-" in n]


def evict(cluster, check=False, **args):
    return cluster["kube"].ansible(MODULE, dict({"node": cluster["node"], "delay": 0.2}, **args), check=check)


def test_drains_the_node_past_the_device_plugins_emptydir_and_stops_the_gpu_daemons(cluster):
    web = [pod(cluster, "web-%d" % i, app="web") for i in range(2)]
    train = pod(cluster, "train", gpus=1)
    pdb(cluster, "web", "web", maxUnavailable=1)
    logs = [n for n in names_on(cluster) if "/logs-" in n]
    plugin = plugin_pods(cluster)
    assert len(plugin) == 1 and len(logs) == 1

    result = evict(cluster)
    assert result.get("failed") is not True, result
    assert result["changed"] is True and result["cordoned"] is True and result["paused"] is True
    assert result["evicted"] == sorted(web + [train])
    # DaemonSet pods are not evicted, the device plugin's emptyDir notwithstanding
    assert result["left"]["daemonset"] == sorted(plugin + logs)
    # the device plugin (a GPU daemon) is stopped and kept away; the log shipper stays
    assert result["stopped"] == plugin
    assert names_on(cluster) == logs
    node = cluster["core"].read_node(cluster["node"])
    assert node.spec.unschedulable is True
    taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in node.spec.taints]
    assert {"key": TAINT, "value": "paused", "effect": "NoSchedule"} in taints
    assert GPU_TAINT in taints
    # the other node keeps its device plugin
    assert len(plugin_pods(cluster, cluster["other"])) == 1
    # a second run changes nothing
    again = evict(cluster)
    assert (again["changed"], again["evicted"], again["stopped"]) == (False, [], [])

    restored = evict(cluster, state="restored")
    assert restored["changed"] is True and restored["cordoned"] is False and restored["paused"] is False
    node = cluster["core"].read_node(cluster["node"])
    assert not node.spec.unschedulable
    assert [t.key for t in node.spec.taints] == ["nvidia.com/gpu"]
    assert len(plugin_pods(cluster)) == 1
    assert allocatable(cluster["core"], cluster["node"]) == "2"
    assert evict(cluster, state="restored")["changed"] is False


def test_gpu_only_evicts_the_pods_that_request_gpus_or_hold_a_dra_claim(cluster):
    train = pod(cluster, "train", gpus=1)
    dra = pod(cluster, "dra", claims=True)
    web = pod(cluster, "web")
    result = evict(cluster, gpu_only=True)
    assert result.get("failed") is not True, result
    assert result["evicted"] == sorted([train, dra])
    assert result["left"]["not_gpu"] == [web]
    assert web in names_on(cluster)


def test_a_pdb_that_allows_no_disruption_fails_within_the_timeout_naming_the_pod(cluster):
    db = pod(cluster, "db-0", app="db")
    train = pod(cluster, "train", gpus=1)
    pdb(cluster, "db", "db", minAvailable=1)
    started = time.monotonic()
    result = evict(cluster, timeout=2)
    elapsed = time.monotonic() - started
    assert result["failed"] is True
    assert result["error_kind"] == "timeout"
    assert result["msg"].startswith("draining node %s did not finish within 2 s: 1 pod(s) block it: %s (Cannot evict "
                                    "pod as it would violate the pod's disruption budget" % (cluster["node"], db))
    assert "The disruption budget db needs 1 healthy pods and has 1 currently" in result["msg"]
    assert result["msg"].endswith("The node stays cordoned on purpose, so that no new work lands on it; fix the cause "
                                  "and run again, or uncordon it to give up")
    assert result["blocking"] == [db]
    assert result["evicted"] == [train]
    assert elapsed < 2 + 30, elapsed          # the module's deadline, plus starting ansible
    assert cluster["core"].read_node(cluster["node"]).spec.unschedulable is True
    assert db in names_on(cluster)
    # nothing was stopped: the GPU daemons go only once the node is empty
    assert len(plugin_pods(cluster)) == 1


def test_unmanaged_and_emptydir_pods_are_named_before_anything_is_evicted(cluster):
    lone = pod(cluster, "lone", owner=False)
    cache = pod(cluster, "cache", empty_dir=True)
    train = pod(cluster, "train", gpus=1)
    result = evict(cluster)
    assert result["failed"] is True and result["error_kind"] == "input"
    assert result["msg"] == (
        "node %s was cordoned and nothing was evicted: %s not managed by a controller (force: true evicts them, and "
        "nothing recreates them); %s with emptyDir data (delete_emptydir_data: true evicts them, and the data is "
        "lost). The node stays cordoned on purpose, so that no new work lands on it" % (cluster["node"], lone, cache))
    assert sorted([lone, cache, train]) == [n for n in names_on(cluster) if n.split("/")[1] in ("lone", "cache", "train")]
    result = evict(cluster, force=True, delete_emptydir_data=True)
    assert result.get("failed") is not True, result
    assert result["evicted"] == sorted([lone, cache, train])


def test_check_mode_changes_nothing(cluster):
    train = pod(cluster, "train", gpus=1)
    result = evict(cluster, check=True)
    assert result["changed"] is True
    assert result["evicted"] == [train] and len(result["stopped"]) == 1
    node = cluster["core"].read_node(cluster["node"])
    assert not node.spec.unschedulable and [t.key for t in node.spec.taints] == ["nvidia.com/gpu"]
    assert train in names_on(cluster) and len(plugin_pods(cluster)) == 1


def test_a_node_that_does_not_exist(cluster):
    result = cluster["kube"].ansible(MODULE, {"node": "no-such-node"})
    assert result["failed"] is True
    assert (result["msg"], result["error_kind"]) == ("node no-such-node does not exist", "not_found")
