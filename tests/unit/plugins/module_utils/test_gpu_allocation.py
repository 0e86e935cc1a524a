"""The per-node choice between the device plugin and DRA, the DRA preflight and the slice readiness check.

Where each expectation comes from:

* [readme]  kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1 README.md: Kubernetes 1.34 or newer
  (resource.k8s.io/v1), NVIDIA driver 565 or newer, CDI enabled in the container runtime.
* [chart]   deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-gpu.yaml and deviceclass-mig.yaml:
  the DeviceClasses' CEL selectors; templates/validation.yaml: refuses to render next to the device plugin
  (gpuResourcesEnabledOverride), i.e. a node is served by one mechanism, never both.
* [name]    k8s.io/apimachinery pkg/util/validation/validation.go IsDNS1123Subdomain (DeviceClass names).
* [slice]   staging/src/k8s.io/api/resource/v1/types.go ResourceSlice (driver, nodeName, devices with
  attributes and capacity); cmd/gpu-kubelet-plugin/deviceinfo.go (gpu-<minor>, uuid, productName, memory).
* [mig]     kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1 cmd/gpu-kubelet-plugin/nvlib.go GetPerGpuAllocatableDevices
  (a GPU with MIG on is announced as its MIG devices, never whole), deviceinfo.go MigDeviceInfo.GetDevice and
  mig.go CommonAttributesMig / ToCanonicalName (gpu-<minor>-mig-<profile>-<profile id>-<start>; type mig,
  uuid, parentUUID, profile). The facts' MIG devices: nvidia_gpu_facts RETURN (mig.current, mig.devices[].profile
  and uuid).
* [cd]      the same chart's templates/deviceclass-compute-domain-daemon.yaml and
  deviceclass-compute-domain-default-channel.yaml (the ComputeDomain DeviceClasses, resources.computeDomains).
* [rollout] k8s.io/kubectl pkg/polymorphichelpers/rollout_status.go DeploymentStatusViewer (a Deployment rolled
  out: observedGeneration current, updated == wanted == replicas, available == updated).
* [operator] NVIDIA/gpu-operator v26.7 (the label nvidia.com/dra-kubelet-plugin marks the nodes the DRA driver's
  kubelet plugin runs on; without it, the device plugin's DaemonSet runs there).
"""
import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_allocation as ga
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

GPU_SELECTOR = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
MIG_SELECTOR = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"


@pytest.mark.parametrize("hostvars, expected", [
    ({}, "device_plugin"),
    ({"kubegpu_gpu_allocation": None}, "device_plugin"),
    ({"kubegpu_gpu_allocation": "device_plugin"}, "device_plugin"),
    ({"kubegpu_gpu_allocation": "dra"}, "dra"),
    ({"kubegpu_gpu_allocation": ["dra"]}, "dra"),
])
def test_host_allocation(hostvars, expected):
    assert ga.host_allocation("gpu-1", hostvars) == expected


@pytest.mark.parametrize("value, message", [
    ("both", "host gpu-1 sets kubegpu_gpu_allocation to both device_plugin and dra"),  # [chart]
    (["dra", "device_plugin"], "host gpu-1 sets kubegpu_gpu_allocation to both device_plugin and dra"),
    ("DRA", "host gpu-1 sets kubegpu_gpu_allocation to 'DRA': choose device_plugin or dra"),
    ("mig", "host gpu-1 sets kubegpu_gpu_allocation to 'mig': choose device_plugin or dra"),
])
def test_host_allocation_refused(value, message):
    with pytest.raises(InputError) as exc:
        ga.host_allocation("gpu-1", {"kubegpu_gpu_allocation": value})
    assert str(exc.value).startswith(message)
    assert "\n" not in str(exc.value)


def test_node_labels():
    assert ga.node_labels("dra") == {"nvidia.com/dra-kubelet-plugin": "true"}
    assert ga.node_labels("device_plugin") == {"nvidia.com/dra-kubelet-plugin": None}


GOOD = {"host": "h100", "driver_version": "570.172.08", "cdi": True, "runtime": True}
CLASSES = {"gpu.nvidia.com": [GPU_SELECTOR], "mig.nvidia.com": [MIG_SELECTOR]}  # [chart]


def test_dra_preflight_passes():
    assert ga.dra_problems("1.34.2", [GOOD], CLASSES) == []
    assert ga.dra_problems("1.35.0", [dict(GOOD, driver_version="565.57.01")], CLASSES) == []
    ga.check_dra("1.34.2", [GOOD], CLASSES)


def test_dra_preflight_no_dra_node_ignores_the_version():
    assert ga.dra_problems("1.31.4", [], {}) == []


@pytest.mark.parametrize("version, nodes, classes, problem", [
    # [readme] Kubernetes 1.34
    ("1.33.5", [GOOD], {}, "the cluster runs Kubernetes 1.33.5; DRA (resource.k8s.io/v1) needs 1.34 or newer"),
    (None, [GOOD], {}, "the cluster runs Kubernetes of an unknown version; DRA (resource.k8s.io/v1) needs 1.34"),
    # [readme] driver 565 (the lab's old H100 profile ran 535.183.01)
    ("1.34.2", [dict(GOOD, driver_version="535.183.01")], {},
     "DRA host h100 runs NVIDIA driver 535.183.01; the DRA driver needs 565 or newer"),
    ("1.34.2", [dict(GOOD, driver_version=None)], {},
     "DRA host h100: its GPU facts name no driver version (the DRA driver needs 565 or newer)"),
    # [readme] CDI
    ("1.34.2", [dict(GOOD, cdi=False)], {}, "DRA host h100 does not have CDI enabled in its container runtime"),
    ("1.34.2", [dict(GOOD, cdi=None)], {}, "DRA host h100 does not have CDI enabled in its container runtime"),
    ("1.34.2", [dict(GOOD, runtime=False)], {}, "DRA host h100 has no NVIDIA runtime configured"),
    # [name]
    ("1.34.2", [GOOD], {"GPU_nvidia": [GPU_SELECTOR]}, "DeviceClass name 'GPU_nvidia' is not a DNS-1123 subdomain"),
    ("1.34.2", [GOOD], {"gpu.nvidia.com": [""]}, "DeviceClass gpu.nvidia.com has an empty CEL selector"),
])
def test_dra_preflight_refusals(version, nodes, classes, problem):
    problems = ga.dra_problems(version, nodes, classes)
    assert len(problems) == 1
    assert problems[0].startswith(problem)


def test_dra_preflight_on_the_planned_driver_names_it_as_this_run_s():
    # the early check (site.yml's facts play) gives the driver the driver role installs, not the loaded one
    (problem,) = ga.dra_problems("1.34.2", [dict(GOOD, driver_version="550", driver_planned=True)], {})
    assert problem == "DRA host h100 gets NVIDIA driver 550 from this run's driver role; the DRA driver needs 565 or newer"
    assert ga.dra_problems("1.34.2", [dict(GOOD, driver_version="580", driver_planned=True)], {}) == []


def test_dra_preflight_without_the_cluster_leaves_its_version_out():
    # a run of the node plays alone does not read the cluster: the DRA driver role checks its version later
    assert ga.dra_problems(None, [GOOD], {}, check_cluster=False) == []
    assert ga.dra_problems("1.33.5", [GOOD], {}, check_cluster=False) == []


T4_535 = {"present": True, "count": 1, "driver_version": "535.104.05"}


@pytest.mark.parametrize("gpu, host_vars, runs, default, planned", [
    # nothing asked and no default known: the loaded driver stays
    (T4_535, {}, True, None, ("535.104.05", False)),
    # the distribution's default branch (roles/nvidia_driver/vars/Ubuntu.yml 580) replaces another branch
    (T4_535, {}, True, "580", ("580", True)),
    # the same branch loaded: the role installs nothing (driver_plan.needs_install)
    (T4_535, {}, True, "535", ("535.104.05", False)),
    (T4_535, {"nvidia_driver_branch": 570}, True, "535", ("570", True)),
    (T4_535, {"nvidia_driver_version": "570.195.03"}, True, "535", ("570.195.03", True)),
    (T4_535, {"nvidia_driver_version": "535.104.05"}, True, "580", ("535.104.05", False)),
    (T4_535, {"nvidia_driver_branch": "550"}, True, None, ("550", True)),
    # a pre-installed driver (nvidia_driver_skip) or a run whose tags leave the driver play out keeps the loaded one
    (T4_535, {"nvidia_driver_branch": 570, "nvidia_driver_skip": True}, True, None, ("535.104.05", False)),
    (T4_535, {"nvidia_driver_branch": 570, "nvidia_driver_skip": "yes"}, True, None, ("535.104.05", False)),
    (T4_535, {"nvidia_driver_branch": 570}, False, None, ("535.104.05", False)),
    # no driver loaded: the role installs the branch asked for
    ({"present": True, "count": 1}, {"nvidia_driver_branch": 580}, True, None, ("580", True)),
    ({"present": True, "count": 1}, {}, True, None, (None, False)),
])
def test_planned_driver(gpu, host_vars, runs, default, planned):
    assert ga.planned_driver(gpu, host_vars, runs, default) == planned


@pytest.mark.skipif(not ga.HAS_CELPY, reason="cel-python is not installed")
@pytest.mark.parametrize("selector", [
    "device.driver == ",
    "device.attributes['gpu.nvidia.com'].type == 'gpu' &&",
    "device.driver = 'gpu.nvidia.com'",
])
def test_dra_preflight_cel_does_not_compile(selector):
    problems = ga.dra_problems("1.34.2", [GOOD], {"gpu.nvidia.com": [selector]})
    assert len(problems) == 1
    assert problems[0].startswith("DeviceClass gpu.nvidia.com CEL selector %r does not compile: " % selector)
    assert "\n" not in problems[0]


def test_check_dra_one_message_for_every_problem():
    with pytest.raises(InputError) as exc:
        ga.check_dra("1.33.0", [dict(GOOD, driver_version="550.54.15", cdi=False)], {"x_y": []})
    message = str(exc.value)
    assert message.startswith("DRA cannot be deployed: the cluster runs Kubernetes 1.33.0")
    for part in ("runs NVIDIA driver 550.54.15", "does not have CDI enabled", "'x_y' is not a DNS-1123"):
        assert part in message
    assert "\n" not in message


@pytest.mark.parametrize("text, mib", [
    ("81559Mi", 81559), ("80Gi", 81920), ("40960Mi", 40960), ("1048576Ki", 1024), (str(16 * 1024 ** 3), 16384),
    ("lots", None), (None, None),
])
def test_quantity_mib(text, mib):
    assert ga.quantity_mib(text) == mib


def _fact(index):
    return {"index": index, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-%d" % index, "memory_mib": 81559}


def _device(index, product="NVIDIA H100 80GB HBM3", memory="81559Mi", kind="gpu"):  # [slice]
    return {"name": "gpu-%d" % index,
            "attributes": {"type": {"string": kind}, "uuid": {"string": "GPU-%d" % index},
                           "productName": {"string": product}},
            "capacity": {"memory": {"value": memory}}}


def _slice(node, devices, driver="gpu.nvidia.com"):
    return {"spec": {"driver": driver, "nodeName": node, "pool": {"name": node}, "devices": devices}}


FACTS = {"devices": [_fact(0), _fact(1)]}


@pytest.mark.parametrize("slices, why", [
    ([_slice("h100", [_device(0), _device(1)])], None),
    # a MIG device beside the GPUs is not a full GPU
    ([_slice("h100", [_device(0), _device(1), dict(_device(9), attributes={"type": {"string": "mig"}})])], None),
    ([], "node h100 has no ResourceSlice of driver gpu.nvidia.com"),
    ([_slice("h100", [_device(0), _device(1)], driver="other.example.com")],
     "node h100 has no ResourceSlice of driver gpu.nvidia.com"),
    ([_slice("a100", [_device(0), _device(1)])], "node h100 has no ResourceSlice of driver gpu.nvidia.com"),
    ([_slice("h100", [_device(0)])], "node h100's ResourceSlice lists 1 GPUs, its facts 2"),
    ([_slice("h100", [_device(0), _device(2)])], "node h100's ResourceSlice does not list GPU GPU-1"),
    ([_slice("h100", [_device(0), _device(1, product="NVIDIA A100-SXM4-40GB")])],
     "node h100's ResourceSlice names GPU GPU-1 'NVIDIA A100-SXM4-40GB', its facts 'NVIDIA H100 80GB HBM3'"),
    ([_slice("h100", [_device(0), _device(1, memory="40960Mi")])],
     "node h100's ResourceSlice gives GPU GPU-1 40960 MiB, its facts 81559 MiB"),
])
def test_slice_readiness(slices, why):
    assert ga.slice_readiness(slices, {"h100": FACTS}) == {"h100": why}


def test_allocatable_text():
    published = ga.published_devices([_slice("h100", [_device(i) for i in range(8)])])
    assert ga.allocatable_text(published.get("h100")) == "DRA: 8 gpu"
    assert ga.allocatable_text(published.get("t4")) == "DRA: no slice"
    assert ga.allocatable_text([]) == "DRA: none"
    # [mig] MIG devices per profile after the full GPUs; a node with every GPU partitioned lists only those
    published = ga.published_devices([_slice("a100", _migs(0, ["1g.5gb"] * 7) + [_device(1)]),
                                      _slice("h100", _migs(0, ["3g.40gb", "1g.10gb+me", "3g.40gb"]))])
    assert ga.allocatable_text(published["a100"]) == "DRA: 1 gpu, 7 mig-1g.5gb"
    assert ga.allocatable_text(published["h100"]) == "DRA: 1 mig-1g.10gb+me, 2 mig-3g.40gb"
    # what the facts name, in the same words
    assert ga.allocatable_text(ga.expected_devices(MIG_FACTS)) == "DRA: 1 gpu, 7 mig-1g.5gb"
    assert ga.allocatable_text(ga.expected_devices(FACTS)) == "DRA: 2 gpu"


def _mig_fact(parent, slot, profile):
    return {"index": slot, "name": "NVIDIA A100-SXM4-40GB MIG " + profile, "profile": profile,
            "uuid": "MIG-%d-%d" % (parent, slot), "memory_mib": 5120}


def _migs(parent, profiles, uuids=True):  # [mig] the kubelet plugin's MIG devices of GPU-<parent>
    devices = []
    for slot, profile in enumerate(profiles):
        attributes = {"type": {"string": "mig"}, "parentUUID": {"string": "GPU-%d" % parent},
                      "profile": {"string": profile}, "productName": {"string": "NVIDIA A100-SXM4-40GB"}}
        if uuids:
            attributes["uuid"] = {"string": "MIG-%d-%d" % (parent, slot)}
        devices.append({"name": "gpu-%d-mig-%s-19-%d" % (parent, profile.replace(".", ""), slot),
                        "attributes": attributes, "capacity": {"memory": {"value": "4864Mi"}}})
    return devices


def _partitioned(index, profiles):
    return dict(_fact(index), mig={"current": 1, "pending": 1,
                                   "devices": [_mig_fact(index, slot, p) for slot, p in enumerate(profiles)]})


# GPU 0 partitioned 7x 1g.5gb, GPU 1 whole (MIG off)
MIG_FACTS = {"devices": [_partitioned(0, ["1g.5gb"] * 7), dict(_fact(1), mig={"current": 0, "pending": 0, "devices": []})]}


@pytest.mark.parametrize("slices, why", [
    ([_slice("h100", _migs(0, ["1g.5gb"] * 7) + [_device(1)])], None),
    # the order of the devices does not matter
    ([_slice("h100", [_device(1)] + list(reversed(_migs(0, ["1g.5gb"] * 7))))], None),
    ([_slice("h100", _migs(0, ["1g.5gb"] * 3) + [_device(1)])],
     "node h100's ResourceSlice lists MIG devices 3x1g.5gb on GPU GPU-0, its facts 7x1g.5gb"),
    ([_slice("h100", _migs(0, ["1g.5gb"] * 6 + ["1g.10gb"]) + [_device(1)])],
     "node h100's ResourceSlice lists MIG devices 1x1g.10gb, 6x1g.5gb on GPU GPU-0, its facts 7x1g.5gb"),
    ([_slice("h100", [_device(1)])],
     "node h100's ResourceSlice lists MIG devices none on GPU GPU-0, its facts 7x1g.5gb"),
    # [mig] the partitioned GPU is never published whole
    ([_slice("h100", [_device(0), _device(1)])],
     "node h100's ResourceSlice lists GPU GPU-0 whole, its facts say MIG is on there"),
    ([_slice("h100", _migs(0, ["1g.5gb"] * 7) + _migs(1, ["7g.40gb"]))],
     "node h100's ResourceSlice lists MIG device gpu-1-mig-7g40gb-19-0 of GPU GPU-1, whose MIG mode its facts say "
     "is off"),
    ([_slice("h100", _migs(0, ["1g.5gb"] * 7, uuids=False) + [_device(1)])],
     "node h100's ResourceSlice does not list MIG device MIG-0-0 (1g.5gb on GPU GPU-0)"),
    # the whole GPU beside the MIG devices is still checked as before
    ([_slice("h100", _migs(0, ["1g.5gb"] * 7))], "node h100's ResourceSlice lists 0 GPUs, its facts 1"),
    ([_slice("h100", _migs(0, ["1g.5gb"] * 7) + [_device(1, memory="40960Mi")])],
     "node h100's ResourceSlice gives GPU GPU-1 40960 MiB, its facts 81559 MiB"),
])
def test_slice_readiness_of_a_node_with_mig(slices, why):
    assert ga.slice_readiness(slices, {"h100": MIG_FACTS}) == {"h100": why}


def test_mig_devices_the_facts_do_not_list_are_not_counted():
    # MIG on, its devices unknown to the facts (mig.devices null): whatever MIG devices the slice lists pass
    facts = {"devices": [dict(_fact(0), mig={"current": 1, "pending": 1, "devices": None})]}
    assert ga.slice_readiness([_slice("h100", _migs(0, ["2g.10gb"]))], {"h100": facts}) == {"h100": None}
    assert ga.slice_readiness([_slice("h100", [_device(0)])], {"h100": facts}) == {
        "h100": "node h100's ResourceSlice lists GPU GPU-0 whole, its facts say MIG is on there"}
    assert ga.expected_devices(facts) == []


def test_published_devices_keeps_mig_devices_with_their_parent_and_profile():
    (mig,) = ga.published_devices([_slice("h100", _migs(2, ["1g.5gb"]))])["h100"]
    assert mig == {"name": "gpu-2-mig-1g5gb-19-0", "type": "mig", "uuid": "MIG-2-0", "product": "NVIDIA A100-SXM4-40GB",
                   "memory_mib": 4864, "parent": "GPU-2", "profile": "1g.5gb"}
    # a device of another type (vfio) is left out
    assert ga.published_devices([_slice("h100", [_device(0, kind="vfio")])]) == {"h100": []}


def test_the_dra_label_is_the_collections_to_remove_when_stale():
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import gfd_labels
    assert gfd_labels.DRA_LABEL == ga.DRA_LABEL
    assert gfd_labels.is_managed_label(ga.DRA_LABEL, "true")
    assert not gfd_labels.is_managed_label(ga.DRA_LABEL, "false")  # someone else's value: left alone


GPU_LABELS = {"nvidia.com/gpu.present": "true"}
DRA_ON = {ga.DRA_LABEL: "true"}


def listed(labels_after, added=(), removed=()):
    """A node of the preflight's node list: its labels as the run leaves them and what the run adds and removes."""
    return {"name": "node-a", "host": "gpu-a", "labels": dict(labels_after),
            "added": dict((key, labels_after[key]) for key in added), "removed": list(removed)}


# wanted mechanism, the node as the dry run lists it -> the switch (None: none). The current mechanism is the
# DRA label before the run [operator].
@pytest.mark.parametrize("wanted, node, switch", [
    # device plugin node (labelled before) set to DRA: the label is added
    ("dra", listed(dict(GPU_LABELS, **DRA_ON), added=[ga.DRA_LABEL]), ("device_plugin", "dra")),
    # DRA node set back to the device plugin: the label is removed
    ("device_plugin", listed(GPU_LABELS, removed=[ga.DRA_LABEL]), ("dra", "device_plugin")),
    # no change of mechanism
    ("dra", listed(dict(GPU_LABELS, **DRA_ON)), None),
    ("device_plugin", listed(GPU_LABELS), None),
    ("device_plugin", listed(GPU_LABELS, added=["nvidia.com/gpu.present"]), None),
    # a node never labelled serves no GPU work: labelled for DRA, nothing to drain
    ("dra", listed(dict(GPU_LABELS, **DRA_ON), added=["nvidia.com/gpu.present", ga.DRA_LABEL]), None),
    # labelled by hand for DRA before the first run, set to the device plugin: it runs the DRA plugin today
    ("device_plugin", listed({}, added=[], removed=[ga.DRA_LABEL]), ("dra", "device_plugin")),
])
def test_allocation_switches(wanted, node, switch):
    got = ga.allocation_switches(["gpu-a"], {"gpu-a": {"kubegpu_gpu_allocation": wanted}}, [node])
    if switch is None:
        assert got == []
    else:
        assert got == [{"host": "gpu-a", "node": "node-a", "from": switch[0], "to": switch[1]}]


def test_allocation_switches_by_node_name_and_in_host_order():
    nodes = [dict(listed(GPU_LABELS, removed=[ga.DRA_LABEL]), name="b", host=None),
             dict(listed(dict(GPU_LABELS, **DRA_ON), added=[ga.DRA_LABEL]), name="a", host=None),
             dict(listed(GPU_LABELS), name="c", host=None)]
    hostvars = {"a": {"kubegpu_gpu_allocation": "dra"}, "b": {}, "c": {}, "d": {"kubegpu_gpu_allocation": "dra"}}
    got = ga.allocation_switches(["a", "b", "c", "d"], hostvars, nodes)
    assert [(item["host"], item["from"], item["to"]) for item in got] == [
        ("a", "device_plugin", "dra"), ("b", "dra", "device_plugin")]


def test_allocation_switches_refuse_a_bad_choice():
    with pytest.raises(InputError, match="choose device_plugin or dra"):
        ga.allocation_switches(["gpu-a"], {"gpu-a": {"kubegpu_gpu_allocation": "both-ways"}}, [listed(GPU_LABELS)])


def test_switch_message():
    assert ga.switch_message({"node": "n1", "from": "device_plugin", "to": "dra"}) == (
        "node n1 switches from the device plugin to DRA: cordoned and drained of its GPU work (pods that request "
        "nvidia.com/* resources or hold resource claims) before its label nvidia.com/dra-kubelet-plugin changes; "
        "uncordoned once validated")


# [cd]
def test_the_compute_domain_classes_are_checked_only_when_asked():
    assert ga.compute_domain_classes(False) == {}
    assert sorted(ga.compute_domain_classes(True)) == ["compute-domain-daemon.nvidia.com",
                                                       "compute-domain-default-channel.nvidia.com"]
    assert ga.dra_problems("1.34.2", [GOOD], {"gpu.nvidia.com": [GPU_SELECTOR]}, True) == []
    # a configured class of the same name would be applied twice under one name
    problems = ga.dra_problems("1.34.2", [GOOD], {"compute-domain-daemon.nvidia.com": [GPU_SELECTOR]}, True)
    assert problems == ["DeviceClass compute-domain-daemon.nvidia.com is created by the ComputeDomain part "
                        "(nvidia_dra_driver_compute_domains); remove it from nvidia_dra_driver_device_classes"]
    assert ga.dra_problems("1.34.2", [GOOD], {"compute-domain-daemon.nvidia.com": [GPU_SELECTOR]}, False) == []


@pytest.mark.skipif(not ga.HAS_CELPY, reason="cel-python is not installed")
def test_the_compute_domain_classes_cel_compiles(monkeypatch):
    assert all(ga.device_class_problems(name, selectors) == []
               for name, selectors in ga.compute_domain_classes(True).items())
    # the same check refuses the chart's classes once broken
    monkeypatch.setitem(ga.COMPUTE_DOMAIN_DEVICE_CLASSES, "compute-domain-daemon.nvidia.com", ["device.driver =="])
    (problem,) = ga.dra_problems("1.34.2", [GOOD], {}, True)
    assert problem.startswith("DeviceClass compute-domain-daemon.nvidia.com CEL selector 'device.driver ==' does not compile")


def _deployment(wanted=1, generation=2, **status):
    return {"metadata": {"generation": generation}, "spec": {"replicas": wanted}, "status": status}


# [rollout]
@pytest.mark.parametrize("deployment, expected", [
    (_deployment(observedGeneration=2, replicas=1, updatedReplicas=1, availableReplicas=1), ""),
    (_deployment(wanted=3, generation=1, observedGeneration=1, replicas=3, updatedReplicas=3, availableReplicas=3), ""),
    (None, "not found"),
    ({}, "not found"),
    # created, not yet seen by the deployment controller
    (_deployment(), "1 replica(s) wanted, 0 updated, 0 in all, 0 available, observedGeneration none of generation 2"),
    # an old spec seen
    (_deployment(observedGeneration=1, replicas=1, updatedReplicas=1, availableReplicas=1),
     "1 replica(s) wanted, 1 updated, 1 in all, 1 available, observedGeneration 1 of generation 2"),
    # the pod is not available yet (its image is being pulled)
    (_deployment(observedGeneration=2, replicas=1, updatedReplicas=1),
     "1 replica(s) wanted, 1 updated, 1 in all, 0 available, observedGeneration 2 of generation 2"),
    # an old replica still there during the rollout
    (_deployment(observedGeneration=2, replicas=2, updatedReplicas=1, availableReplicas=2),
     "1 replica(s) wanted, 1 updated, 2 in all, 2 available, observedGeneration 2 of generation 2"),
])
def test_deployment_problem(deployment, expected):
    assert ga.deployment_problem(deployment) == expected
