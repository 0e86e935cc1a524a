"""Role kubegpu.nvidia.nvidia_dra_driver: ansible-playbook against the Kubernetes API test server.

The test server (tests/support/kubeapi/dra.py) serves resource.k8s.io/v1 and, through its kubelet stand-in,
publishes a ResourceSlice for each node annotated kubegpu.io/simulated-gpus that runs a ready pod of a
DaemonSet whose image is the DRA driver's, from the node annotation kubegpu.io/simulated-gpu-devices. The hosts'
nvidia_gpu facts come from Ansible's fact cache, as an earlier nvidia_gpu_facts run would have left them.
"""
import json
import pathlib
import re
import subprocess

import pytest

import ansible_run
from fakenvml.profile import PROFILES, load_profile, simulated_gpu_devices

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


CD_CLASSES = ["compute-domain-daemon.nvidia.com", "compute-domain-default-channel.nvidia.com"]


def compute_domain_state(kube):
    """What of the ComputeDomain part the cluster holds: CRDs, controller, DeviceClasses, kubelet plugin containers."""
    ext = kubernetes.client.ApiextensionsV1Api(kube.api_client())
    crds = [c.metadata.name for c in ext.list_custom_resource_definition().items]
    deployments = [d.metadata.name for d in kube.apps().list_namespaced_deployment(NAMESPACE).items]
    classes = kube.dynamic().resources.get(api_version="resource.k8s.io/v1", kind="DeviceClass").get().to_dict()
    ds = kube.apps().read_namespaced_daemon_set(DS, NAMESPACE)
    return {"crds": sorted(crds), "deployments": deployments,
            "classes": sorted(c["metadata"]["name"] for c in classes["items"]),
            "containers": [c.name for c in ds.spec.template.spec.containers]}


def test_compute_domains_when_asked_and_a_slice_that_differs_from_the_facts_fails_naming_the_node(cluster):
    # this run takes the ComputeDomain part (chart resources.computeDomains.enabled): it gets as far as the slices
    kube = cluster["kube"]
    ansible_run.write_cached_facts(cluster["dir"] / "facts", "h100", {"nvidia_gpu": facts(3)})
    rc, stats, tasks = run(cluster, {"nvidia_dra_driver_compute_domains": True})
    assert rc != 0
    assert failed(tasks)[-1][1] == "node h100's ResourceSlice lists 2 GPUs, its facts 3"
    assert compute_domain_state(kube) == {
        "crds": ["computedomaincliques.resource.nvidia.com", "computedomains.resource.nvidia.com"],
        "deployments": ["nvidia-dra-driver-gpu-controller"],
        "classes": CD_CLASSES + ["gpu.nvidia.com", "mig.nvidia.com"],
        "containers": ["compute-domains", "gpus"]}
    dep = kube.apps().read_namespaced_deployment("nvidia-dra-driver-gpu-controller", NAMESPACE)
    assert dep.status.available_replicas == dep.spec.replicas == 1
    (check,) = [res for name, res in tasks.items() if name.endswith("Check that the ComputeDomain controller is available")]
    assert not check.get("skipped") and not check.get("failed")
    # the CRD is served: a ComputeDomain (demo/specs/imex/channel-injection.yaml's shape) can be created
    custom = kubernetes.client.CustomObjectsApi(kube.api_client())
    domain = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
              "metadata": {"name": "imex-channel-injection", "namespace": "default"},
              "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "imex-channel-0"}}}}
    custom.create_namespaced_custom_object("resource.nvidia.com", "v1beta1", "default", "computedomains", domain)
    custom.delete_namespaced_custom_object("resource.nvidia.com", "v1beta1", "default", "computedomains",
                                           "imex-channel-injection")

    # turned off again (and the facts right): what it added is removed, the kubelet plugin is the gpus container
    ansible_run.write_cached_facts(cluster["dir"] / "facts", "h100", {"nvidia_gpu": facts(2)})
    rc, stats, tasks = run(cluster)
    assert rc == 0, failed(tasks)
    assert compute_domain_state(kube) == {"crds": [], "deployments": [], "classes": ["gpu.nvidia.com", "mig.nvidia.com"],
                                          "containers": ["gpus"]}
    role = kubernetes.client.RbacAuthorizationV1Api(kube.api_client()).read_cluster_role(
        "nvidia-dra-driver-gpu-kubeletplugin")
    assert [(r.resources, r.verbs) for r in role.rules if r.resources in (["computedomains"], ["nodes"])] == [
        (["nodes"], ["get", "list", "watch"])]
    with pytest.raises(kubernetes.client.exceptions.ApiException) as err:
        custom.list_namespaced_custom_object("resource.nvidia.com", "v1beta1", "default", "computedomains")
    assert err.value.status == 404


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


# ------------------------------------------------------------------ MIG devices in the slice
# A DRA node whose GPUs have MIG on (the fake NVML profile h100x2-mig, on a driver the DRA driver accepts): its
# facts are read by nvidia_gpu_facts through the real pynvml over the fake library, in the same run, and the test
# server's kubelet plugin publishes the MIG devices of the same fake NVML state (kubegpu.io/simulated-nvml), as
# kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1 does (cmd/gpu-kubelet-plugin/nvlib.go, deviceinfo.go, mig.go).
ROOT = pathlib.Path(__file__).resolve().parents[2]
MIG_PLAYBOOK = """
- name: Read the GPU facts from NVML
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Read the GPU facts
      kubegpu.nvidia.nvidia_gpu_facts:
      environment: "{{ fakenvml_env }}"
""" + PLAYBOOK
# the h100x2-mig profile's MIG devices as the kubelet plugin names them (the fake seeds them at the first free
# placement, in the listed order: 1g.10gb+me at 0, 1g.10gb at 1, 2g.20gb at 2, 3g.40gb at 4; GPU 1 one 7g.80gb)
MIG_TEXT = "DRA: 1 mig-1g.10gb, 1 mig-1g.10gb+me, 1 mig-2g.20gb, 1 mig-3g.40gb, 1 mig-7g.80gb"


@pytest.fixture(scope="module")
def libdir():
    out = subprocess.run([str(ROOT / "scripts" / "build-fakenvml.sh")], check=True, capture_output=True, text=True)
    return pathlib.Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def mig_cluster(kube_server, kube, tmp_path, libdir):
    """h100 (the fake NVML's two H100s, both partitioned; DRA) and its inventory; returns the run's folder."""
    profile = tmp_path / "h100x2-mig.conf"
    profile.write_text(re.sub(r"(?m)^driver_version = .*$", "driver_version = 570.172.08",
                              (PROFILES / "h100x2-mig.conf").read_text()))
    state = tmp_path / "mig-state"
    kube.node("h100", labels={"nvidia.com/gpu.present": "true", "nvidia.com/dra-kubelet-plugin": "true"},
              annotations={SIMULATED: "2", DEVICES: json.dumps(simulated_gpu_devices(load_profile(profile))),
                           "kubegpu.io/simulated-nvml": json.dumps({"config": str(profile), "state": str(state)})})
    env = {"LD_LIBRARY_PATH": str(libdir / "full"), "FAKENVML_CONFIG": str(profile), "FAKENVML_STATE": str(state)}
    inventory = {"gpu_nodes": {"hosts": {"h100": {"kubegpu_gpu_allocation": "dra", "ansible_connection": "local",
                                                  "fakenvml_env": env}}},
                 "all": {"hosts": {"localhost": {"ansible_connection": "local"}}}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "site.yml").write_text(MIG_PLAYBOOK)
    return {"dir": tmp_path, "kube": kube, "profile": profile, "state": state}


def run_mig(cluster, extra=None):
    d = cluster["dir"]
    res = ansible_run.run_playbook(d / "site.yml", d / "inventory.json", dict(VARS, **(extra or {})),
                                   kubeconfig=cluster["kube"].kubeconfig)
    return res.rc, res.tasks()


def test_a_node_with_mig_on_is_ready_when_its_slice_lists_its_mig_devices_and_a_claim_gets_one(mig_cluster):
    rc, tasks = run_mig(mig_cluster)
    assert rc == 0, failed(tasks)
    # no whole GPU: each GPU is published as its MIG devices, whose UUIDs the facts read from NVML
    names = [d["name"] for s in slices(mig_cluster["kube"]) for d in s["spec"]["devices"]]
    assert names == ["gpu-0-mig-1g10gb-19-1", "gpu-0-mig-1g10gb-me-20-0", "gpu-0-mig-2g20gb-14-2",
                     "gpu-0-mig-3g40gb-9-4", "gpu-1-mig-7g80gb-0-0"]
    record = [res for name, res in tasks.items() if name.endswith("Record what each DRA node offers")][0]
    assert record["ansible_facts"]["nvidia_dra_driver_nodes"] == [
        {"host": "h100", "node": "h100", "ok": True, "reason": "", "allocatable_text": MIG_TEXT,
         "expected_text": MIG_TEXT}]
    # the validation claim: no whole GPU there, so its second choice, a mig.nvidia.com device, ran the pod
    validation = [res for name, res in tasks.items() if name.endswith("Record the claim validation per node")][0]
    (result,) = validation["ansible_facts"]["nvidia_dra_driver_validation"]
    assert (result["node"], result["passed"], result["phase"]) == ("h100", True, "Succeeded")


def test_a_slice_whose_mig_devices_differ_from_the_facts_fails_with_one_line(mig_cluster):
    # the kubelet plugin reads another MIG state than NVML gives the facts (its slice is stale): GPU 0 holds one
    # 1g.10gb (fakenvml.c mig_save's lines), GPU 1 its 7g.80gb
    stale = mig_cluster["dir"] / "stale-state"
    uuids = [gpu["uuid"] for gpu in load_profile(mig_cluster["profile"])["gpus"]]
    stale.write_text("writes = 1\nmode = 0 %s 1 1\ngi = 0 1 19 0 1\nci = 0 1 0 1\n"
                     "mode = 1 %s 1 1\ngi = 1 1 0 0 8\nci = 1 1 0 7\n" % tuple(uuids))
    node = mig_cluster["kube"].core().read_node("h100")
    annotations = dict(node.metadata.annotations)
    annotations["kubegpu.io/simulated-nvml"] = json.dumps({"config": str(mig_cluster["profile"]), "state": str(stale)})
    mig_cluster["kube"].core().patch_node("h100", {"metadata": {"annotations": annotations}})
    rc, tasks = run_mig(mig_cluster, {"nvidia_dra_driver_wait_timeout": 2})
    assert rc != 0
    name, msg = failed(tasks)[-1]
    assert name.endswith("Check every DRA node's ResourceSlice")
    assert msg == ("node h100's ResourceSlice lists MIG devices 1x1g.10gb on GPU %s, its facts 1x1g.10gb, "
                   "1x1g.10gb+me, 1x2g.20gb, 1x3g.40gb" % uuids[0])
