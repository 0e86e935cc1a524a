"""What kubegpu.nvidia.site leaves after the node's nvidia.com/mig.config label asked for all-1g.5gb on a lab A100 node
partitioned with all-balanced: the API test server's objects and the node's fake NVML, read back as they are."""
import json
import os
import re
import shlex

import pytest
import testinfra.utils.ansible_runner

kubernetes = pytest.importorskip("kubernetes")

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]
).get_hosts("gpu_nodes")

STATE = os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]
NODE = "mig-a100"
# The GPU Operator's all-1g.5gb (assets/state-mig-manager/0400_configmap.yaml, REFERENCE 8.1): seven 1g.5gb MIG
# devices on each A100-SXM4-40GB; the device plugin's mixed strategy advertises them as nvidia.com/mig-1g.5gb.
MIG_RESOURCE = "nvidia.com/mig-1g.5gb"
GPU_TAINT = ("nvidia.com/gpu", "present", "NoSchedule")
# the node's MIG devices as its own pynvml lists them: [[MIG mode current, [MIG device names]] per GPU]
NVML_SCRIPT = """
import json, pynvml
pynvml.nvmlInit()
gpus = []
for index in range(pynvml.nvmlDeviceGetCount()):
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    names = []
    for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except pynvml.NVMLError:
            continue
        name = pynvml.nvmlDeviceGetName(mig)
        names.append(name.decode() if isinstance(name, bytes) else name)
    gpus.append([pynvml.nvmlDeviceGetMigMode(handle)[0], names])
print(json.dumps(gpus))
"""


@pytest.fixture(name="core", scope="module")
def fixture_core():
    client = kubernetes.config.new_client_from_config(config_file=os.path.join(STATE, "kubeconfig"))
    return kubernetes.client.CoreV1Api(client)


@pytest.fixture(name="node", scope="module")
def fixture_node(core):
    return core.read_node(NODE)


def pod_names(core, namespace):
    return sorted(pod.metadata.name for pod in core.list_namespaced_pod(namespace).items)


def test_only_the_gpu_pod_was_evicted(core):
    assert pod_names(core, "mig-work") == ["cpu-work"]
    assert core.read_namespaced_pod("cpu-work", "mig-work").status.phase == "Running"


def test_the_node_records_the_new_config_as_done_and_is_uncordoned(node):
    labels = node.metadata.labels
    assert labels["nvidia.com/mig.config"] == "all-1g.5gb"
    assert labels["nvidia.com/mig.config.state"] == "success"
    assert not node.spec.unschedulable
    assert [(t.key, t.value, t.effect) for t in node.spec.taints or []] == [GPU_TAINT]


def test_the_node_advertises_the_new_mig_devices_only(node):
    advertised = dict((k, v) for k, v in node.status.allocatable.items() if k.startswith("nvidia.com/"))
    assert advertised == {MIG_RESOURCE: "28"}


def test_the_labels_are_those_of_the_new_geometry(node):
    labels = node.metadata.labels
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig-1g.5gb.count"] == "28"
    assert labels["nvidia.com/gpu.count"] == "4"
    assert labels["nvidia.com/mig-1g.5gb.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
    # nothing left of all-balanced's 2g.10gb and 3g.20gb
    assert {re.match(r"nvidia\.com/(mig-[^.]+\.[^.]+)\.", k).group(1) for k in labels
            if k.startswith("nvidia.com/mig-")} == {"mig-1g.5gb"}


def test_a_validation_pod_passed_on_the_new_geometry(core, node):
    # the record is written only after a pod passed; the node advertises nothing but MIG devices, so that pod
    # requested one (a pod asking for nvidia.com/gpu stays Unschedulable there)
    record = json.loads(node.metadata.annotations["kubegpu.nvidia/gpu-validation"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", record["passed"])
    with open(os.path.join(STATE, "summary.json"), encoding="utf-8") as handle:
        row = dict((r["host"], r) for r in json.load(handle))[NODE]
    # the summary is the idempotence run's: the pass the converge run recorded still holds
    assert row["validation"] == "passed (recorded, %s)" % record["passed"]
    assert pod_names(core, "gpu-validation") == []


def test_the_fake_nvml_holds_the_new_geometry(host):
    run = host.run("python3 -c %s" % shlex.quote(NVML_SCRIPT))
    assert run.rc == 0, run.stderr
    assert json.loads(run.stdout) == [[1, ["NVIDIA A100-SXM4-40GB MIG 1g.5gb"] * 7]] * 4
