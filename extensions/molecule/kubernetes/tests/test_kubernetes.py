"""State the kubernetes scenario leaves in the Kubernetes API test server after converge."""
import os

import pytest

kubernetes = pytest.importorskip("kubernetes")

GPU_NODES = {"gpu-h100-node": ("8", "NVIDIA-H100-80GB-HBM3", "8"),  # node: (gpu.count, gpu.product, allocatable)
             "gpu-t4-node": ("1", "Tesla-T4-SHARED", "4")}           # 1 T4 x 4 time-slicing replicas
CPU_NODE = "cpu-node"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.fixture(name="api", scope="module")
def fixture_api():
    kubeconfig = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "kubeconfig")
    client = kubernetes.config.new_client_from_config(config_file=kubeconfig)
    return kubernetes.client.CoreV1Api(client), kubernetes.client.AppsV1Api(client)


@pytest.mark.parametrize("node", sorted(GPU_NODES))
def test_gpu_nodes_are_labelled_tainted_and_advertise_their_gpus(api, node):
    core, _apps = api
    obj = core.read_node(node)
    count, product, allocatable = GPU_NODES[node]
    labels = obj.metadata.labels
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["nvidia.com/gpu.count"] == count
    assert labels["nvidia.com/gpu.product"] == product
    taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in obj.spec.taints or []]
    assert GPU_TAINT in taints
    assert obj.status.allocatable["nvidia.com/gpu"] == allocatable


def test_t4_node_uses_the_shared_config_and_its_labels_say_so(api):
    core, _apps = api
    t4 = core.read_node("gpu-t4-node").metadata.labels
    assert (t4["nvidia.com/device-plugin.config"], t4["nvidia.com/gpu.replicas"],
            t4["nvidia.com/gpu.sharing-strategy"]) == ("t4-shared", "4", "time-slicing")
    h100 = core.read_node("gpu-h100-node").metadata.labels
    assert (h100["nvidia.com/device-plugin.config"], h100["nvidia.com/gpu.replicas"],
            h100["nvidia.com/gpu.sharing-strategy"]) == ("default", "1", "none")


def test_cpu_node_is_left_alone(api):
    core, _apps = api
    obj = core.read_node(CPU_NODE)
    assert not [k for k in obj.metadata.labels or {} if k.startswith("nvidia.com/")]
    assert not (obj.spec and obj.spec.taints)
    assert "nvidia.com/gpu" not in (obj.status.allocatable or {})


@pytest.mark.parametrize("name", ["nvidia-device-plugin", "nvidia-device-plugin-gpu-feature-discovery"])
def test_daemonsets_are_ready_on_the_gpu_nodes(api, name):
    core, apps = api
    ds = apps.read_namespaced_daemon_set(name, "nvidia-device-plugin")
    status = ds.status
    assert status.observed_generation == ds.metadata.generation
    assert status.desired_number_scheduled == status.updated_number_scheduled == status.number_ready == 2
    pods = core.list_namespaced_pod("nvidia-device-plugin", label_selector="app.kubernetes.io/instance=nvidia-device-plugin")
    assert {p.spec.node_name for p in pods.items if p.metadata.name.startswith(name + "-")} == set(GPU_NODES)


def test_runtime_class_exists(api):
    core, _apps = api
    node_api = kubernetes.client.NodeV1Api(core.api_client)
    assert node_api.read_runtime_class("nvidia").handler == "nvidia"


def test_validation_pods_are_cleaned_up(api):
    core, _apps = api
    assert core.list_namespaced_pod("gpu-validation").items == []
