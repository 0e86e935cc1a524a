"""Role kubegpu.nvidia.nvidia_dra_driver: ansible-playbook against the Kubernetes API test server.

The test server (tests/support/kubeapi/dra.py) serves resource.k8s.io/v1 and, through its kubelet stand-in,
publishes a ResourceSlice for each node annotated kubegpu.io/simulated-gpus that runs a ready pod of a
DaemonSet whose image is the DRA driver's, from the node annotation kubegpu.io/simulated-gpu-devices. The hosts'
nvidia_gpu facts come from Ansible's fact cache, as an earlier nvidia_gpu_facts run would have left them.
"""
import json

import pytest

import ansible_run

kubernetes = pytest.importorskip("kubernetes")
pytest.importorskip("celpy")

SIMULATED = "kubegpu.io/simulated-gpus"
DEVICES = "kubegpu.io/simulated-gpu-devices"
NAMESPACE = "nvidia-dra-driver-gpu"
DS = "nvidia-dra-driver-gpu-kubelet-plugin"
PLAYBOOK = """
- name: Deploy the DRA driver
  hosts: localhost
  gather_facts: false
  roles:
    - role: kubegpu.nvidia.nvidia_dra_driver
      vars:
        nvidia_dra_driver_hosts: "{{ groups['gpu_nodes'] }}"
"""
VARS = {"nvidia_dra_driver_wait_timeout": 20, "nvidia_dra_driver_wait_delay": 1,
        "kubegpu_cluster": {"version": "1.34.2"}}


def device(index, product="NVIDIA H100 80GB HBM3", memory=81559):
    return {"index": index, "name": product, "uuid": "GPU-h100-%d" % index, "memory_mib": memory}


def facts(count, driver="570.172.08"):
    return {"present": True, "count": count, "source": "nvml", "driver_version": driver, "cuda_driver_version": "12.8",
            "machine": "lab", "devices": [device(i) for i in range(count)]}


@pytest.fixture
def cluster(kube_server, kube, tmp_path):
    """h100 (2 GPUs, DRA: labelled as k8s_gpu_node labels it) and t4 (1 GPU, device plugin)."""
    annotations = {SIMULATED: "2", DEVICES: json.dumps([
        {"productName": "NVIDIA H100 80GB HBM3", "uuid": "GPU-h100-%d" % i, "memory": "81559Mi"} for i in range(2)])}
    kube.node("h100", labels={"nvidia.com/gpu.present": "true", "nvidia.com/dra-kubelet-plugin": "true"},
              annotations=annotations)
    kube.node("t4", labels={"nvidia.com/gpu.present": "true"}, annotations={SIMULATED: "1"})
    (tmp_path / "facts").mkdir()
    ansible_run.write_cached_facts(tmp_path / "facts", "h100", {"nvidia_gpu": facts(2)})
    ansible_run.write_cached_facts(tmp_path / "facts", "t4", {"nvidia_gpu": facts(1, driver="535.183.01")})
    inventory = {"gpu_nodes": {"hosts": {"h100": {"kubegpu_gpu_allocation": "dra", "ansible_connection": "local"},
                                         "t4": {"ansible_connection": "local"}}},
                 "all": {"hosts": {"localhost": {"ansible_connection": "local"}}}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "site.yml").write_text(PLAYBOOK)
    return {"dir": tmp_path, "kube": kube}


def run(cluster, extra=None, check=False):
    d = cluster["dir"]
    res = ansible_run.run_playbook(d / "site.yml", d / "inventory.json", dict(VARS, **(extra or {})), check=check,
                                   kubeconfig=cluster["kube"].kubeconfig, fact_cache=d / "facts")
    return res.rc, res.stats.get("localhost", {}), res.tasks()


def failed(tasks):
    return [(name, res.get("msg")) for name, res in tasks.items() if res.get("failed")]


def slices(kube):
    api = kube.dynamic().resources.get(api_version="resource.k8s.io/v1", kind="ResourceSlice")
    return api.get(field_selector="spec.driver=gpu.nvidia.com").to_dict()["items"]


def test_the_dra_node_publishes_its_gpus_and_a_second_run_changes_nothing(cluster):
    kube = cluster["kube"]
    rc, stats, tasks = run(cluster)
    assert rc == 0, failed(tasks)
    assert stats["changed"] >= 1
    ds = kube.apps().read_namespaced_daemon_set(DS, NAMESPACE)
    # only the DRA node runs the kubelet plugin
    assert ds.status.desired_number_scheduled == ds.status.number_ready == 1
    assert [s["spec"]["nodeName"] for s in slices(kube)] == ["h100"]
    record = [res for name, res in tasks.items() if name.endswith("Record what each DRA node offers")][0]
    assert record["ansible_facts"]["nvidia_dra_driver_nodes"] == [
        {"host": "h100", "node": "h100", "ok": True, "reason": "", "allocatable_text": "DRA: 2 gpu",
         "expected_text": "DRA: 2 gpu"}]
    # the claim validation: one pod on the DRA node, its GPU from the claim template, passed
    validation = [res for name, res in tasks.items() if name.endswith("Record the claim validation per node")][0]
    (result,) = validation["ansible_facts"]["nvidia_dra_driver_validation"]
    assert (result["node"], result["passed"], result["phase"]) == ("h100", True, "Succeeded")
    assert kube.core().list_namespaced_pod(NAMESPACE, label_selector="app.kubernetes.io/name=gpu-validation-dra").items == []
    classes = kube.dynamic().resources.get(api_version="resource.k8s.io/v1", kind="DeviceClass").get().to_dict()
    assert sorted(c["metadata"]["name"] for c in classes["items"]) == ["gpu.nvidia.com", "mig.nvidia.com"]
    rc, stats, tasks = run(cluster)
    assert rc == 0, failed(tasks)
    assert stats["changed"] == 0


def test_a_slice_that_differs_from_the_facts_fails_naming_the_node(cluster):
    ansible_run.write_cached_facts(cluster["dir"] / "facts", "h100", {"nvidia_gpu": facts(3)})
    rc, stats, tasks = run(cluster)
    assert rc != 0
    assert failed(tasks)[-1][1] == "node h100's ResourceSlice lists 2 GPUs, its facts 3"


@pytest.mark.parametrize("extra, facts_h100, message", [
    ({"kubegpu_cluster": {"version": "1.33.5"}}, None,
     "DRA cannot be deployed: the cluster runs Kubernetes 1.33.5; DRA (resource.k8s.io/v1) needs 1.34 or newer"),
    ({}, facts(2, driver="535.183.01"),
     "DRA cannot be deployed: DRA host h100 runs NVIDIA driver 535.183.01; the DRA driver needs 565 or newer"),
    ({"nvidia_container_toolkit_cdi": False}, None,
     "DRA cannot be deployed: DRA host h100 does not have CDI enabled in its container runtime (set "
     "nvidia_container_toolkit_cdi: true or leave it null for DRA hosts)"),
    ({"nvidia_dra_driver_device_classes": {"gpu.nvidia.com": ["device.driver =="]}}, None,
     "DRA cannot be deployed: DeviceClass gpu.nvidia.com CEL selector 'device.driver ==' does not compile"),
])
def test_the_preflight_refuses_before_anything_is_applied(cluster, extra, facts_h100, message):
    if facts_h100:
        ansible_run.write_cached_facts(cluster["dir"] / "facts", "h100", {"nvidia_gpu": facts_h100})
    rc, stats, tasks = run(cluster, extra)
    assert rc != 0
    name, msg = failed(tasks)[-1]
    assert name.endswith("Check DRA before applying anything")
    assert msg.startswith(message) and "\n" not in msg
    with pytest.raises(kubernetes.client.exceptions.ApiException):
        cluster["kube"].core().read_namespace(NAMESPACE)


def test_a_claim_no_device_matches_fails_with_the_schedulers_reason(cluster):
    # a DeviceClass whose selector matches no published GPU: the validation pod stays Pending, and says why
    rc, stats, tasks = run(cluster, {"nvidia_dra_driver_wait": True, "nvidia_dra_driver_device_classes": {
        "gpu.nvidia.com": ["device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'vgpu'"],
        "mig.nvidia.com": ["device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"]},
        "nvidia_dra_driver_validation_unschedulable_timeout": 2})
    assert rc != 0
    name, msg = failed(tasks)[-1]
    assert name.endswith("Fail when a DRA node did not pass")
    assert msg.startswith("DRA claim validation failed on 1 node(s): h100: Unschedulable: 0/2 nodes are available: ")
    assert "cannot allocate all claims" in msg
