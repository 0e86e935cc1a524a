"""Which pods a driver upgrade evicts, which it leaves, which GPU daemons it stops (k8s_eviction.py).

The order of the checks follows kubectl drain's filters (k8s.io/kubectl pkg/drain/filters.go: mirror pods
skipped, DaemonSet pods skipped before the local-storage check, unmanaged pods and emptyDir pods needing
--force / --delete-emptydir-data), which kubernetes.core's k8s_drain does not (kubernetes.core issue 622:
it refuses a DaemonSet pod with an emptyDir). The API side is tested against the test server in
tests/functional/test_k8s_gpu_evict.py.
"""
import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import k8s_eviction as ev


def pod(name, owner="ReplicaSet", phase="Running", volumes=None, limits=None, claims=None, mirror=False, env=None,
        runtime_class=None):
    meta = {"name": name, "namespace": "ns", "uid": name}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": owner.lower(), "controller": True}]
    if mirror:
        meta["annotations"] = {ev.MIRROR_ANNOTATION: "abc"}
    container = {"name": "c", "resources": {"limits": limits or {}}, "env": env or []}
    spec = {"containers": [container], "volumes": volumes or []}
    if claims:
        spec["resourceClaims"] = claims
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def names(found, fate):
    return [p["metadata"]["name"] for p in found[fate]]


def test_daemonset_pods_are_skipped_before_their_emptydir_is_looked_at():
    volumes = [{"name": "config", "emptyDir": {}}, {"name": "dp", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}]
    plugin = pod("device-plugin", owner="DaemonSet", volumes=volumes)
    found = ev.classify_pods([plugin, pod("web")])
    assert names(found, "daemonset") == ["device-plugin"]
    assert names(found, "evict") == ["web"]
    assert found["emptydir"] == []


def test_mirror_finished_unmanaged_and_emptydir_pods():
    found = ev.classify_pods([
        pod("etcd", owner=None, mirror=True), pod("job-done", owner="Job", phase="Succeeded"),
        pod("lone", owner=None), pod("cache", volumes=[{"name": "tmp", "emptyDir": {}}]), pod("web")])
    assert names(found, "mirror") == ["etcd"]
    assert names(found, "finished") == ["job-done"]
    assert names(found, "evict") == ["lone", "cache", "web"]
    assert names(found, "unmanaged") == ["lone"]
    assert names(found, "emptydir") == ["cache"]


@pytest.mark.parametrize("candidate,gpu", [
    (pod("train", limits={"nvidia.com/gpu": "1"}), True),
    (pod("mig", limits={"nvidia.com/mig-1g.10gb": "1"}), True),
    (pod("shared", limits={"nvidia.com/gpu.shared": "1"}), True),
    (pod("dra", claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]), True),
    (pod("web", limits={"cpu": "1"}), False),
    (pod("amd", limits={"amd.com/gpu": "1"}), False),
])
def test_gpu_only_evicts_nvidia_resources_and_dra_claims(candidate, gpu):
    found = ev.classify_pods([candidate], gpu_only=True)
    assert (names(found, "evict"), names(found, "not_gpu")) == (([candidate["metadata"]["name"]], []) if gpu else
                                                                ([], [candidate["metadata"]["name"]]))


@pytest.mark.parametrize("candidate,uses", [
    (pod("device-plugin", owner="DaemonSet", volumes=[{"name": "dp", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}]), True),
    (pod("mps", owner="DaemonSet", volumes=[{"name": "mps", "hostPath": {"path": "/run/nvidia/mps"}}]), True),
    (pod("dcgm", owner="DaemonSet", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]), True),
    (pod("gfd", owner="DaemonSet", runtime_class="nvidia"), True),
    (pod("dev", owner="DaemonSet", volumes=[{"name": "dev", "hostPath": {"path": "/dev/nvidia0"}}]), True),
    (pod("none", owner="DaemonSet", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]), False),
    (pod("logs", owner="DaemonSet", volumes=[{"name": "log", "hostPath": {"path": "/var/log"}}]), False),
])
def test_gpu_daemons(candidate, uses):
    assert ev.uses_gpu(candidate) is uses


def test_taints_are_replaced_by_key_and_effect():
    taints = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
              {"key": ev.PAUSE_TAINT["key"], "value": "old", "effect": "NoSchedule"}]
    assert ev.with_taint(taints, ev.PAUSE_TAINT) == [taints[0], ev.PAUSE_TAINT]
    assert ev.without_taint(ev.with_taint(taints, ev.PAUSE_TAINT), ev.PAUSE_TAINT) == [taints[0]]
    assert ev.with_taint(None, ev.PAUSE_TAINT) == [ev.PAUSE_TAINT]
