"""What kubegpu.nvidia.site leaves on the lab nodes and in the Kubernetes API test server."""
import json
import os
import re

import pytest
import testinfra.utils.ansible_runner

kubernetes = pytest.importorskip("kubernetes")

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]
).get_hosts("gpu_nodes")

STATE = os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]
# node: (GPUs, gpu.product label, allocatable nvidia.com/gpu = GPUs x replicas of its config)
# node: the driver its fake NVML profile reports (tests/support/fakenvml/profiles: the H100's is 570, the DRA minimum
# being 565, since the lab runs its H100 on DRA)
DRIVERS = {"cluster-h100": "570.172.08", "cluster-a100": "535.161.08", "cluster-t4": "535.104.05"}
GPU_NODES = {
    "cluster-h100": (8, "NVIDIA-H100-80GB-HBM3", 8),
    "cluster-a100": (4, "NVIDIA-A100-SXM4-40GB", 4),
    "cluster-t4": (1, "Tesla-T4-SHARED", 4),  # time-slicing, 4 replicas (config t4-shared), as GFD labels it
}
# node: (device plugin config, gpu.replicas, gpu.sharing-strategy) as the labels say
SHARING = {"cluster-h100": ("default", "1", "none"), "cluster-a100": ("default", "0", "none"),  # MIG on: replicas 0
           "cluster-t4": ("t4-shared", "4", "time-slicing")}
CPU_NODE = "cluster-cpu"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
PACKAGES = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1"]


@pytest.fixture(name="core", scope="module")
def fixture_core():
    client = kubernetes.config.new_client_from_config(config_file=os.path.join(STATE, "kubeconfig"))
    return kubernetes.client.CoreV1Api(client)


@pytest.fixture(name="summary", scope="module")
def fixture_summary():
    with open(os.path.join(STATE, "summary.json"), encoding="utf-8") as handle:
        return {row["host"]: row for row in json.load(handle)}


def name(host):
    return host.backend.get_hostname()


def test_gpu_node_is_labelled_tainted_and_advertises_its_gpus(host, core):
    node = name(host)
    if node == CPU_NODE:
        pytest.skip("CPU-only node")
    gpus, product, allocatable = GPU_NODES[node]
    obj = core.read_node(node)
    labels = obj.metadata.labels
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["nvidia.com/gpu.count"] == str(gpus)
    assert labels["nvidia.com/gpu.product"] == product
    config, replicas, strategy = SHARING[node]
    assert (labels["nvidia.com/device-plugin.config"], labels["nvidia.com/gpu.replicas"],
            labels["nvidia.com/gpu.sharing-strategy"]) == (config, replicas, strategy)
    taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in obj.spec.taints or []]
    assert taints == [GPU_TAINT]
    assert obj.status.allocatable["nvidia.com/gpu"] == str(allocatable)


def test_cpu_node_is_skipped(host, core):
    if name(host) != CPU_NODE:
        pytest.skip("GPU node")
    obj = core.read_node(CPU_NODE)
    assert not [k for k in obj.metadata.labels or {} if k.startswith("nvidia.com/")]
    assert not (obj.spec and obj.spec.taints)
    assert "nvidia.com/gpu" not in (obj.status.allocatable or {})
    for package in PACKAGES:
        assert not host.package(package).is_installed, package
    assert "nvidia" not in host.check_output("containerd config dump")


def test_containerd_runs_the_nvidia_runtime(host):
    if name(host) == CPU_NODE:
        pytest.skip("CPU-only node")
    assert host.service("containerd").is_running
    for package in PACKAGES:
        assert host.package(package).version == "1.20.0-1", package
    dump = host.check_output("containerd config dump")
    assert re.search(r'\.runtimes\.nvidia\.options\][^\[]*BinaryName = "/usr/bin/nvidia-container-runtime"', dump), dump


def test_summary_row(host, summary, core):
    node = name(host)
    row = summary[node]
    if node == CPU_NODE:
        assert row["gpus"] == "none (CPU-only)"
        assert row["validation"] == "skipped"
        return
    gpus, _product, allocatable = GPU_NODES[node]
    assert row["gpus"].startswith("%d x " % gpus)
    assert row["driver"] == DRIVERS[node]
    assert row["runtime"] == "containerd: nvidia"
    assert row["labels"].endswith(", tainted")
    assert row["allocatable"] == str(allocatable)
    # the summary is the idempotence run's: the pass the converge run recorded on the node still holds,
    # so that run ran no pod on it
    match = re.fullmatch(r"passed \(recorded, (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)\)", row["validation"])
    assert match, row["validation"]
    record = json.loads(core.read_node(node).metadata.annotations["kubegpu.nvidia/gpu-validation"])
    assert record["passed"] == match.group(1)
    assert re.fullmatch(r"[0-9a-f]{64}", record["state"])


def test_validation_pods_are_cleaned_up(core):
    assert core.list_namespaced_pod("gpu-validation").items == []


# the lab's two GPU tenants (lab/cluster.yml site-vars: role gpu_tenants): namespace, quota on requests.<resource>
# (the H100 tenant's on the DRA devices of class gpu.nvidia.com, as the lab's H100 is on DRA), and the default
# tolerations for the GPU taint the labels role writes
TENANTS = {"team-t4": ("requests.nvidia.com/gpu", "4"),
           "team-h100": ("gpu.nvidia.com.deviceclass.resource.k8s.io/devices", "8")}


def test_gpu_tenants_have_their_quota_and_the_gpu_taint_s_default_toleration(core):
    for namespace, (key, gpus) in TENANTS.items():
        quota = core.read_namespaced_resource_quota("gpu-tenant-quota", namespace)
        assert quota.spec.hard[key] == gpus
        annotations = core.read_namespace(namespace).metadata.annotations or {}
        tolerations = json.loads(annotations["scheduler.alpha.kubernetes.io/defaultTolerations"])
        assert {"key": GPU_TAINT["key"], "operator": "Equal", "value": GPU_TAINT["value"],
                "effect": GPU_TAINT["effect"]} in tolerations


def test_dcgm_exporter_runs_on_every_gpu_node_behind_its_service(core):
    client = kubernetes.config.new_client_from_config(config_file=os.path.join(STATE, "kubeconfig"))
    daemonset = kubernetes.client.AppsV1Api(client).read_namespaced_daemon_set(
        "nvidia-dcgm-exporter", "nvidia-dcgm-exporter")
    assert daemonset.status.desired_number_scheduled == len(GPU_NODES)
    assert daemonset.status.number_ready == len(GPU_NODES)
    service = core.read_namespaced_service("nvidia-dcgm-exporter", "nvidia-dcgm-exporter")
    assert service.spec.type == "ClusterIP" and [p.port for p in service.spec.ports] == [9400]
