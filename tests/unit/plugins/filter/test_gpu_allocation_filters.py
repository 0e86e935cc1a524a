"""Filters kubegpu.nvidia.gpu_allocation, runtime_cdi, dra_hosts, dra_problems, dra_compute_domain_classes,
dra_deployment_problem, dra_slice_readiness,
allocation_switches and switch_tolerations: the DRA decisions (module_utils/gpu_allocation.py, tested in test_gpu_allocation.py) from the inventory's hostvars.

Source: kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1 README.md (Kubernetes 1.34, driver 565, CDI);
cmd/gpu-kubelet-plugin/deviceinfo.go (a slice's devices gpu-<minor>: uuid, productName, capacity memory).
"""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.nvidia.plugins.filter import gpu_allocation as f

H100 = {"present": True, "count": 2, "driver_version": "570.172.08",
        "devices": [{"index": i, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-%d" % i, "memory_mib": 81559}
                    for i in range(2)]}
HOSTVARS = {
    "h100": {"kubegpu_gpu_allocation": "dra", "kubegpu_node_name": "lab-h100", "ansible_facts": {"nvidia_gpu": H100}},
    "t4": {"ansible_facts": {"nvidia_gpu": dict(H100, driver_version="535.183.01")}},
    "old": {"kubegpu_gpu_allocation": "dra", "ansible_facts": {"nvidia_gpu": dict(H100, driver_version="550.54.15")},
            "nvidia_container_toolkit_cdi": False},
}


def test_allocation_and_cdi_per_host():
    assert [f.gpu_allocation(h, HOSTVARS) for h in ("h100", "t4", "old")] == ["dra", "device_plugin", "dra"]
    # the toolkit role enables CDI on a DRA host unless told otherwise, and leaves other hosts as they are
    assert [f.runtime_cdi(h, HOSTVARS) for h in ("h100", "t4", "old")] == [True, None, False]
    assert f.dra_hosts(["t4", "old", "h100"], HOSTVARS) == ["old", "h100"]
    with pytest.raises(AnsibleFilterError, match="gpu_allocation: nope is not a host of the inventory"):
        f.gpu_allocation("nope", HOSTVARS)


def test_dra_problems_in_one_line():
    assert f.dra_problems(["h100", "t4"], HOSTVARS, "1.34.2", {"gpu.nvidia.com": ["device.driver == 'gpu.nvidia.com'"]}) == ""
    # the device plugin host with an old driver is not the DRA preflight's business
    assert f.dra_problems(["t4"], HOSTVARS, "1.31.0") == ""
    assert f.dra_problems(["h100", "old"], HOSTVARS, "1.33.1") == (
        "DRA cannot be deployed: the cluster runs Kubernetes 1.33.1; DRA (resource.k8s.io/v1) needs 1.34 or newer; "
        "DRA host old runs NVIDIA driver 550.54.15; the DRA driver needs 565 or newer; DRA host old does not have "
        "CDI enabled in its container runtime (set nvidia_container_toolkit_cdi: true or leave it null for DRA hosts)")


def test_dra_planned_problems_checks_what_the_run_will_leave():
    # the early check: the driver the driver role installs (nvidia_driver_branch) instead of the loaded one
    hostvars = dict(HOSTVARS, old=dict(HOSTVARS["old"], nvidia_container_toolkit_cdi=None, nvidia_driver_branch="580"))
    assert f.dra_planned_problems(["h100", "old", "t4"], hostvars, "1.34.2", ["all"], []) == ""
    # the driver play left out by the tags: the loaded 550 stays
    assert f.dra_planned_problems(["old"], hostvars, "1.34.2", ["labels", "dra"], []) == (
        "DRA cannot be deployed: DRA host old runs NVIDIA driver 550.54.15; the DRA driver needs 565 or newer")
    assert f.dra_planned_problems(["old"], hostvars, "1.34.2", ["all"], ["driver"]).startswith(
        "DRA cannot be deployed: DRA host old runs NVIDIA driver 550.54.15")
    lower = dict(hostvars, old=dict(hostvars["old"], nvidia_driver_branch="560"))
    assert f.dra_planned_problems(["old"], lower, "1.33.1", ["driver", "labels"], []) == (
        "DRA cannot be deployed: the cluster runs Kubernetes 1.33.1; DRA (resource.k8s.io/v1) needs 1.34 or newer; "
        "DRA host old gets NVIDIA driver 560 from this run's driver role; the DRA driver needs 565 or newer")
    # a run that does not read the cluster: its version is left to the DRA driver role
    assert f.dra_planned_problems(["h100"], HOSTVARS, None, ["toolkit"], []) == ""
    with pytest.raises(AnsibleFilterError, match="dra_planned_problems expects run_tags as a list of tags, not str"):
        f.dra_planned_problems(["h100"], HOSTVARS, "1.34.2", "all")


@pytest.mark.parametrize("facts, branch", [
    # roles/nvidia_driver/tasks/main.yml's first_found over roles/nvidia_driver/vars
    ({"distribution": "Ubuntu", "distribution_major_version": "24", "os_family": "Debian"}, "580"),
    ({"distribution": "Debian", "distribution_major_version": "12", "os_family": "Debian"}, "535"),
    ({"distribution": "Rocky", "distribution_major_version": "9", "os_family": "RedHat"}, "580"),
    ({"distribution": "Plan9", "distribution_major_version": "4", "os_family": "Plan9"}, None),
    ({}, None),
])
def test_the_default_branch_is_the_driver_role_s(facts, branch):
    gpu = {"present": True, "count": 1, "driver_version": "535.104.05"}
    hostvars = {"dra": {"kubegpu_gpu_allocation": "dra", "ansible_facts": dict(facts, nvidia_gpu=gpu)}}
    problem = f.dra_planned_problems(["dra"], hostvars, "1.34.2", ["all"], [])
    if branch == "580":
        assert problem == ""
    else:
        assert problem == ("DRA cannot be deployed: DRA host dra runs NVIDIA driver 535.104.05; the DRA driver "
                           "needs 565 or newer")


def test_dra_problems_with_compute_domains():
    classes = {"compute-domain-default-channel.nvidia.com": ["device.driver == 'gpu.nvidia.com'"]}
    assert f.dra_problems(["h100"], HOSTVARS, "1.34.2", classes) == ""
    assert f.dra_problems(["h100"], HOSTVARS, "1.34.2", classes, True) == (
        "DRA cannot be deployed: DeviceClass compute-domain-default-channel.nvidia.com is created by the ComputeDomain "
        "part (nvidia_dra_driver_compute_domains); remove it from nvidia_dra_driver_device_classes")
    assert f.dra_compute_domain_classes(False) == {}
    assert sorted(f.dra_compute_domain_classes(True)) == ["compute-domain-daemon.nvidia.com",
                                                          "compute-domain-default-channel.nvidia.com"]


def test_dra_deployment_problem():
    assert f.dra_deployment_problem({}) == "not found"
    assert f.dra_deployment_problem({"metadata": {"generation": 1}, "spec": {"replicas": 1}, "status": {
        "observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1}}) == ""
    with pytest.raises(AnsibleFilterError, match="dra_deployment_problem expects a Deployment object"):
        f.dra_deployment_problem("nope")


def _slice(node, count):
    return {"spec": {"driver": "gpu.nvidia.com", "nodeName": node, "devices": [
        {"name": "gpu-%d" % i, "attributes": {
            "type": {"string": "gpu"}, "uuid": {"string": "GPU-%d" % i},
            "productName": {"string": "NVIDIA H100 80GB HBM3"}},
         "capacity": {"memory": {"value": "81559Mi"}}} for i in range(count)]}}


def test_slice_readiness_rows_by_node_name():
    hostvars = dict((h, HOSTVARS[h]) for h in ("h100", "t4"))
    assert f.dra_slice_readiness([_slice("lab-h100", 2)], ["h100", "t4"], hostvars) == [
        {"host": "h100", "node": "lab-h100", "ok": True, "reason": "", "allocatable_text": "DRA: 2 gpu",
         "expected_text": "DRA: 2 gpu"}]
    (row,) = f.dra_slice_readiness([_slice("h100", 2)], ["h100"], hostvars)
    assert (row["ok"], row["reason"]) == (False, "node lab-h100 has no ResourceSlice of driver gpu.nvidia.com")


def test_slice_readiness_rows_of_a_node_with_mig_on():
    # GPU 0 with MIG on and two 3g.20gb devices (the facts' mig.devices), GPU 1 whole; the slice lists only one of
    # the MIG devices (mig.go CommonAttributesMig: type mig, parentUUID, profile)
    migs = [{"index": i, "profile": "3g.20gb", "uuid": "MIG-0-%d" % i} for i in range(2)]
    facts = dict(H100, devices=[dict(H100["devices"][0], mig={"current": 1, "pending": 1, "devices": migs}),
                                H100["devices"][1]])
    hostvars = {"h100": dict(HOSTVARS["h100"], ansible_facts={"nvidia_gpu": facts})}
    published = _slice("lab-h100", 2)
    published["spec"]["devices"][0] = {"name": "gpu-0-mig-3g20gb-9-0", "attributes": {
        "type": {"string": "mig"}, "uuid": {"string": "MIG-0-0"}, "parentUUID": {"string": "GPU-0"},
        "profile": {"string": "3g.20gb"}}}
    (row,) = f.dra_slice_readiness([published], ["h100"], hostvars)
    assert row == {"host": "h100", "node": "lab-h100", "ok": False,
                   "reason": "node lab-h100's ResourceSlice lists MIG devices 1x3g.20gb on GPU GPU-0, its facts 2x3g.20gb",
                   "allocatable_text": "DRA: 1 gpu, 1 mig-3g.20gb", "expected_text": "DRA: 1 gpu, 2 mig-3g.20gb"}


def test_allocation_switches_with_their_message_and_the_cordon_toleration():
    # the preflight's node list: lab-h100 gets the DRA label this run (it had GPU labels: the device plugin served it)
    nodes = [{"name": "lab-h100", "host": "h100", "labels": {"nvidia.com/gpu.present": "true",
                                                             "nvidia.com/dra-kubelet-plugin": "true"},
              "added": {"nvidia.com/dra-kubelet-plugin": "true"}, "removed": []},
             {"name": "t4", "labels": {"nvidia.com/gpu.present": "true"}, "added": {}, "removed": []}]
    (switch,) = f.allocation_switches(["h100", "t4"], HOSTVARS, nodes)
    assert (switch["host"], switch["node"], switch["from"], switch["to"]) == ("h100", "lab-h100", "device_plugin", "dra")
    assert switch["msg"].startswith("node lab-h100 switches from the device plugin to DRA: cordoned and drained")
    # validation pods on the still cordoned node tolerate the cordon (the node controller's taint)
    assert f.switch_tolerations([switch]) == [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]
    assert f.switch_tolerations([]) == []
    with pytest.raises(AnsibleFilterError, match="host t4 sets kubegpu_gpu_allocation to 'gpu'"):
        f.allocation_switches(["t4"], {"t4": {"kubegpu_gpu_allocation": "gpu"}}, nodes)


def test_filters_are_registered():
    assert sorted(f.FilterModule().filters()) == ["allocation_switches", "dra_compute_domain_classes",
                                                  "dra_deployment_problem", "dra_hosts", "dra_planned_problems", "dra_problems",
                                                  "dra_slice_readiness", "gpu_allocation", "runtime_cdi",
                                                  "switch_tolerations"]
