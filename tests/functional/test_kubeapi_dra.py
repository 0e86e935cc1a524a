"""`resource.k8s.io/v1` (Dynamic Resource Allocation) in the Kubernetes API test server, through the real
kubernetes client over HTTPS (test server only: simulated GPUs and its controllers).

Upstream rules each case follows (kubernetes/kubernetes v1.34 unless said otherwise):
staging/src/k8s.io/api/resource/v1/types.go, pkg/apis/resource/v1/defaults.go,
pkg/apis/resource/validation/validation.go (and validation_resourceslice_test.go,
validation_resourceclaim_test.go for the cases), pkg/registry/resource/*/strategy.go,
staging/src/k8s.io/dynamic-resource-allocation/cel/compile.go,
pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go,
staging/src/k8s.io/dynamic-resource-allocation/structured/, pkg/controller/resourceclaim/controller.go,
kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/deviceinfo.go and
deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-gpu.yaml.
"""

import importlib.util
import json
import os

import pytest

kubernetes = pytest.importorskip("kubernetes")
pytest.importorskip("celpy")
from kubernetes.client.exceptions import ApiException  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIMULATED = "kubegpu.io/simulated-gpus"
DEVICES = "kubegpu.io/simulated-gpu-devices"
V1 = "resource.k8s.io/v1"
GPU_CLASS_CEL = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
MIG_CLASS_CEL = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"
PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0"
A100 = {"productName": "NVIDIA A100-SXM4-40GB", "memory": "40960Mi", "architecture": "Ampere",
        "cudaComputeCapability": "8.0"}


def api(kube, kind):
    return kube.dynamic().resources.get(api_version=V1, kind=kind)


def status_of(exc):
    return json.loads(exc.body)


def plugin_daemonset(ns):
    """The kubelet-plugin DaemonSet as the driver's chart renders it (the part the stand-in reads)."""
    return {"metadata": {"name": "nvidia-dra-driver-gpu-kubelet-plugin", "namespace": ns},
            "spec": {"selector": {"matchLabels": {"app": "dra-plugin"}},
                     "template": {"metadata": {"labels": {"app": "dra-plugin"}}, "spec": {
                         "nodeSelector": {"nvidia.com/dra-kubelet-plugin": "true"},
                         "containers": [{"name": "gpus", "image": PLUGIN_IMAGE,
                                         "securityContext": {"privileged": True}}],
                         "volumes": [{"name": "plugins", "hostPath": {"path": "/var/lib/kubelet/plugins"}},
                                     {"name": "cdi", "hostPath": {"path": "/var/run/cdi"}}]}}}}


def device_classes(kube):
    classes = api(kube, "DeviceClass")
    for name, expression in (("gpu.nvidia.com", GPU_CLASS_CEL), ("mig.nvidia.com", MIG_CLASS_CEL)):
        classes.create(body={"apiVersion": V1, "kind": "DeviceClass", "metadata": {"name": name},
                             "spec": {"selectors": [{"cel": {"expression": expression}}]}})


def template(name, selectors=None, count=None, klass="gpu.nvidia.com"):
    exactly = {"deviceClassName": klass}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if count is not None:
        exactly["count"] = count
    return {"apiVersion": V1, "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}}


def claim_pod(name, template_name, node=None, restart="Never"):
    spec = {"restartPolicy": restart,
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template_name}],
            "containers": [{"name": "cuda", "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
                            "resources": {"claims": [{"name": "gpu"}]}}]}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"metadata": {"name": name}, "spec": spec}


@pytest.fixture
def dra_cluster(kube, kube_server):
    """h100 (8 GPUs, DRA), a100 (2 GPUs, DRA, its GPUs described by annotation), dp (1 GPU, no DRA plugin)."""
    core = kube.core()
    ns = kube.namespace()
    dra = {"nvidia.com/dra-kubelet-plugin": "true"}
    h100_labels = dict(dra, **{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"})
    h100 = kube.node("h100", labels=h100_labels, annotations={SIMULATED: "8"})
    a100 = kube.node("a100", labels=dict(dra), annotations={SIMULATED: "2", DEVICES: json.dumps([A100, A100])})
    dp = kube.node("dp", annotations={SIMULATED: "1"})
    kube.apps().create_namespaced_daemon_set(ns, plugin_daemonset(ns))
    device_classes(kube)
    return core, ns, h100, a100, dp


def slices_by_node(kube, **query):
    items = api(kube, "ResourceSlice").get(**query).to_dict()["items"]
    return {item["spec"]["nodeName"]: item for item in items}


# ------------------------------------------------------------------ discovery and version
def test_discovery_serves_resource_k8s_io_v1_as_kube_apiserver_does(kube, kube_server):
    listed = json.loads(kube.kubectl("get", "--raw", "/apis", check=True).stdout)
    groups = {g["name"]: g for g in listed["groups"]}
    assert groups["resource.k8s.io"]["preferredVersion"] == {"groupVersion": V1, "version": "v1"}
    listing = json.loads(kube.kubectl("get", "--raw", "/apis/resource.k8s.io/v1", check=True).stdout)
    got = {r["name"]: (r["kind"], r["namespaced"]) for r in listing["resources"]}
    # types.go: DeviceClass and ResourceSlice are cluster-scoped, claims and templates namespaced
    assert got == {"deviceclasses": ("DeviceClass", False), "resourceclaims": ("ResourceClaim", True),
                   "resourceclaims/status": ("ResourceClaim", True),
                   "resourceclaimtemplates": ("ResourceClaimTemplate", True),
                   "resourceslices": ("ResourceSlice", False)}
    verbs = {r["name"]: set(r["verbs"]) for r in listing["resources"]}
    assert verbs["resourceclaims/status"] == {"get", "patch", "update"}
    assert {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"} == verbs["resourceslices"]


def test_version_endpoint_says_1_34(kube, kube_server):
    version = kube.dynamic().version["kubernetes"]
    assert (version["major"], version["minor"]) == ("1", "34")
    assert version["gitVersion"].startswith("v1.34.")


# ------------------------------------------------------------------ defaulting and validation
def test_claim_requests_are_defaulted_to_one_device_exact_count(kube, kube_server):
    ns = kube.namespace()
    device_classes(kube)
    body = {"apiVersion": V1, "kind": "ResourceClaim", "metadata": {"generateName": "gpu-"},
            "spec": {"devices": {"requests": [
                {"name": "one", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
                {"name": "all", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}},
                {"name": "alt", "firstAvailable": [{"name": "big", "deviceClassName": "gpu.nvidia.com"}]}]}}}
    created = api(kube, "ResourceClaim").create(body=body, namespace=ns).to_dict()
    assert created["metadata"]["name"].startswith("gpu-") and len(created["metadata"]["name"]) == 9
    requests = created["spec"]["devices"]["requests"]
    # defaults.go: ExactCount and count 1; All gets no count; each firstAvailable entry is defaulted too
    assert requests[0]["exactly"] == {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}
    assert requests[1]["exactly"] == {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}
    assert requests[2]["firstAvailable"][0]["allocationMode"] == "ExactCount"
    assert requests[2]["firstAvailable"][0]["count"] == 1
    assert "status" not in created or not created["status"]


def _slice(nodes=None, devices=None, **spec):
    body = {"driver": "gpu.nvidia.com", "pool": {"name": "pool", "generation": 1, "resourceSliceCount": 1}}
    body.update(spec)
    if nodes is None:
        body["nodeName"] = "worker"
    if devices is not None:
        body["devices"] = devices
    return {"apiVersion": V1, "kind": "ResourceSlice", "metadata": {"name": "s"}, "spec": body}


def _gpu(name, **attributes):
    return {"name": name, "attributes": attributes or {"type": {"string": "gpu"}}}


INVALID = [
    # (case, kind, body, field, message part) from validation.go and its tests
    ("request with neither exactly nor firstAvailable", "ResourceClaim",
     {"spec": {"devices": {"requests": [{"name": "gpu"}]}}},
     "spec.devices.requests[0]", "exactly one of `exactly` or `firstAvailable` is required"),
    ("request with both", "ResourceClaim",
     {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "c"},
                                         "firstAvailable": [{"name": "a", "deviceClassName": "c"}]}]}}},
     "spec.devices.requests[0]", "but multiple fields are set"),
    ("request name not a DNS label", "ResourceClaim",
     {"spec": {"devices": {"requests": [{"name": "GPU_0", "exactly": {"deviceClassName": "c"}}]}}},
     "spec.devices.requests[0].name", "RFC 1123 label"),
    ("count zero", "ResourceClaim",
     {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "c", "count": 0}}]}}},
     "spec.devices.requests[0].exactly.count", "must be greater than zero"),
    ("unknown allocation mode", "ResourceClaim",
     {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
         "deviceClassName": "c", "allocationMode": "Some"}}]}}},
     "spec.devices.requests[0].exactly.allocationMode", 'Unsupported value: "Some"'),
    ("template request CEL that does not compile", "ResourceClaimTemplate",
     {"spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
         "deviceClassName": "c", "selectors": [{"cel": {"expression": "device.driver =="}}]}}]}}}},
     "spec.spec.devices.requests[0].exactly.selectors[0].cel.expression", "compilation failed"),
    ("DeviceClass CEL naming an undeclared variable", "DeviceClass",
     {"spec": {"selectors": [{"cel": {"expression": "gpu.type == 'gpu'"}}]}},
     "spec.selectors[0].cel.expression", "undeclared reference to 'gpu'"),
    ("DeviceClass CEL that is not bool", "DeviceClass",
     {"spec": {"selectors": [{"cel": {"expression": "device.driver"}}]}},
     "spec.selectors[0].cel.expression", None),
    ("slice with 129 devices", "ResourceSlice",
     _slice(devices=[_gpu("gpu-%d" % i) for i in range(129)]),
     "spec.devices", "Too many: 129: must have at most 128 items"),
    ("slice with no node selection", "ResourceSlice", _slice(nodes=False, devices=[]),
     "spec", "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"),
    ("slice with nodeName and allNodes", "ResourceSlice", _slice(allNodes=True),
     "spec", "but multiple fields are set"),
    ("attribute with two values", "ResourceSlice",
     _slice(devices=[_gpu("gpu-0", type={"string": "gpu", "int": 1})]),
     "spec.devices[0].attributes[type]", "exactly one value must be specified"),
    ("attribute with no value", "ResourceSlice", _slice(devices=[_gpu("gpu-0", type={})]),
     "spec.devices[0].attributes[type]", "exactly one value must be specified"),
    ("attribute name not a C identifier", "ResourceSlice",
     _slice(devices=[_gpu("gpu-0", **{"product-name": {"string": "x"}})]),
     "spec.devices[0].attributes[product-name]", "a valid C identifier"),
    ("version attribute not semver", "ResourceSlice",
     _slice(devices=[_gpu("gpu-0", driverVersion={"version": "570"})]),
     "spec.devices[0].attributes[driverVersion].version", "semver.org spec 2.0.0"),
    ("device name not a DNS label", "ResourceSlice", _slice(devices=[_gpu("GPU 0")]),
     "spec.devices[0].name", "RFC 1123 label"),
]


@pytest.mark.parametrize("case,kind,body,field,message", INVALID, ids=[c[0] for c in INVALID])
def test_invalid_objects_are_refused_with_422_and_the_field(kube, kube_server, case, kind, body, field, message):
    ns = kube.namespace()
    obj = json.loads(json.dumps(body))
    obj.setdefault("apiVersion", V1)
    obj["kind"] = kind
    obj.setdefault("metadata", {"name": "x"})
    resource = api(kube, kind)
    with pytest.raises(ApiException) as err:
        if resource.namespaced:
            resource.create(body=obj, namespace=ns)
        else:
            resource.create(body=obj)
    assert err.value.status == 422
    status = status_of(err.value)
    assert status["reason"] == "Invalid" and status["details"]["kind"] == kind
    fields = {c["field"]: c["message"] for c in status["details"]["causes"]}
    assert field in fields, fields
    if message:
        assert message in fields[field]
    else:
        assert "must evaluate to bool" in fields[field]


def test_at_most_128_devices_a_slice_are_accepted(kube, kube_server):
    created = api(kube, "ResourceSlice").create(body=_slice(devices=[_gpu("gpu-%d" % i) for i in range(128)]))
    assert len(created.spec.devices) == 128


def test_claim_spec_and_slice_driver_are_immutable(kube, kube_server):
    ns = kube.namespace()
    claims = api(kube, "ResourceClaim")
    claims.create(namespace=ns, body={"apiVersion": V1, "kind": "ResourceClaim", "metadata": {"name": "c"},
                                      "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                                          "deviceClassName": "gpu.nvidia.com"}}]}}})
    with pytest.raises(ApiException) as err:
        claims.patch(namespace=ns, name="c", content_type="application/merge-patch+json",
                     body={"spec": {"devices": {"requests": [{"name": "two", "exactly": {
                         "deviceClassName": "gpu.nvidia.com"}}]}}})
    assert err.value.status == 422 and "field is immutable" in status_of(err.value)["message"]
    slices = api(kube, "ResourceSlice")
    slices.create(body=_slice(devices=[]))
    with pytest.raises(ApiException) as err:
        slices.patch(name="s", content_type="application/merge-patch+json", body={"spec": {"driver": "other.example.com"}})
    assert err.value.status == 422
    assert {c["field"] for c in status_of(err.value)["details"]["causes"]} == {"spec.driver"}


def test_claim_status_is_written_only_through_the_status_subresource(kube, kube_server):
    ns = kube.namespace()
    claims = api(kube, "ResourceClaim")
    body = {"apiVersion": V1, "kind": "ResourceClaim", "metadata": {"name": "c"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
            "status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}}
    assert not claims.create(namespace=ns, body=body).to_dict().get("status")
    claims.patch(namespace=ns, name="c", content_type="application/merge-patch+json",
                 body={"status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}})
    assert not claims.get(namespace=ns, name="c").to_dict().get("status")


def test_finalizers_keep_a_deleted_claim_until_they_are_removed(kube, kube_server):
    ns = kube.namespace()
    claims = api(kube, "ResourceClaim")
    claims.create(namespace=ns, body={"apiVersion": V1, "kind": "ResourceClaim",
                                      "metadata": {"name": "c", "finalizers": ["example.com/keep"]},
                                      "spec": {"devices": {"requests": []}}})
    claims.delete(namespace=ns, name="c")
    kept = claims.get(namespace=ns, name="c")
    assert kept.metadata.deletionTimestamp
    claims.patch(namespace=ns, name="c", content_type="application/merge-patch+json",
                 body={"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as err:
        claims.get(namespace=ns, name="c")
    assert err.value.status == 404


def test_slice_field_selectors_are_spec_driver_and_spec_node_name(kube, kube_server):
    slices = api(kube, "ResourceSlice")
    for name, driver, node in (("a", "gpu.nvidia.com", "n1"), ("b", "gpu.nvidia.com", "n2"),
                               ("c", "net.example.com", "n1")):
        body = _slice(devices=[])
        body["metadata"]["name"] = name
        body["spec"].update(driver=driver, nodeName=node)
        slices.create(body=body)

    def names(selector):
        return sorted(i["metadata"]["name"] for i in slices.get(field_selector=selector).to_dict()["items"])

    assert names("spec.driver=gpu.nvidia.com") == ["a", "b"]
    assert names("spec.nodeName=n1") == ["a", "c"]
    assert names("spec.driver=gpu.nvidia.com,spec.nodeName=n1") == ["a"]
    # claims select on metadata only (resourceclaim/strategy.go): anything else is a 400
    with pytest.raises(ApiException) as err:
        api(kube, "ResourceClaim").get(namespace="default", field_selector="spec.devices=x")
    assert err.value.status == 400


# ------------------------------------------------------------------ kubelet plugin: slices
def test_a_node_running_a_ready_dra_plugin_publishes_its_gpus_as_the_nvidia_plugin_names_them(kube, dra_cluster):
    core, ns, h100, a100, dp = dra_cluster
    published = slices_by_node(kube, field_selector="spec.driver=gpu.nvidia.com")
    assert sorted(published) == ["a100", "h100"]  # dp runs no DRA plugin pod
    h = published["h100"]
    assert h["metadata"]["name"].startswith("h100-gpu.nvidia.com-")
    assert h["metadata"]["ownerReferences"][0]["kind"] == "Node"
    assert h["spec"]["pool"] == {"name": "h100", "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in h["spec"]["devices"]] == ["gpu-%d" % i for i in range(8)]
    gpu0 = h["spec"]["devices"][0]
    assert set(gpu0["attributes"]) == {"type", "uuid", "productName", "brand", "architecture",
                                       "cudaComputeCapability", "driverVersion", "cudaDriverVersion",
                                       "resource.kubernetes.io/pciBusID"}
    assert gpu0["attributes"]["type"] == {"string": "gpu"}
    assert gpu0["attributes"]["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert gpu0["attributes"]["cudaComputeCapability"] == {"version": "9.0.0"}
    assert gpu0["capacity"] == {"memory": {"value": "81559Mi"}}
    assert len({d["attributes"]["uuid"]["string"] for d in h["spec"]["devices"]}) == 8
    a = published["a100"]["spec"]["devices"]
    assert [d["attributes"]["productName"]["string"] for d in a] == ["NVIDIA A100-SXM4-40GB"] * 2
    assert a[1]["capacity"]["memory"]["value"] == "40960Mi"
    assert a[1]["attributes"]["architecture"] == {"string": "Ampere"}


def test_the_slice_goes_when_the_plugin_pod_goes(kube, dra_cluster):
    core, ns, h100, a100, dp = dra_cluster
    assert "a100" in slices_by_node(kube)
    core.patch_node("a100", {"metadata": {"labels": {"nvidia.com/dra-kubelet-plugin": None}}})
    assert sorted(slices_by_node(kube)) == ["h100"]
    kube.apps().delete_namespaced_daemon_set("nvidia-dra-driver-gpu-kubelet-plugin", ns)
    assert slices_by_node(kube) == {}


# ------------------------------------------------------------------ controller, scheduler, release
def _wait_pod(core, ns, name):
    return core.read_namespaced_pod(name, ns)


def _claims(kube, ns):
    return api(kube, "ResourceClaim").get(namespace=ns).to_dict()["items"]


def test_a_claim_by_product_name_is_allocated_reserved_and_the_pod_bound(kube, dra_cluster):
    core, ns, h100, a100, dp = dra_cluster
    api(kube, "ResourceClaimTemplate").create(namespace=ns, body=template(
        "a100", ["device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100-SXM4-40GB'"]))
    core.create_namespaced_pod(ns, claim_pod("work", "a100", restart="Always"))
    pod = _wait_pod(core, ns, "work")
    assert pod.spec.node_name == "a100"
    assert pod.status.phase == "Running"
    [claim] = _claims(kube, ns)
    meta = claim["metadata"]
    # the resourceclaim controller: <pod>-<claim>- name, owned by the pod, pod-claim-name annotation
    assert meta["name"].startswith("work-gpu-")
    assert meta["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpu"
    assert meta["ownerReferences"][0]["kind"] == "Pod" and meta["ownerReferences"][0]["uid"] == pod.metadata.uid
    assert [s.to_dict() for s in pod.status.resource_claim_statuses] == [
        {"name": "gpu", "resource_claim_name": meta["name"]}]
    # the scheduler: finalizer, allocation with a node selector, reservation for the pod
    assert meta["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    allocation = claim["status"]["allocation"]
    assert allocation["devices"]["results"] == [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "a100", "device": "gpu-0"}]
    assert allocation["nodeSelector"] == {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["a100"]}]}]}
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "work", "uid": pod.metadata.uid}]


def test_claims_by_memory_take_distinct_devices_and_release_them_when_the_pods_end(kube, dra_cluster):
    core, ns, h100, a100, dp = dra_cluster
    big = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('64Gi')) >= 0"
    api(kube, "ResourceClaimTemplate").create(namespace=ns, body=template("big", [big], count=4))
    core.create_namespaced_pod(ns, claim_pod("first", "big", restart="Always"))
    core.create_namespaced_pod(ns, claim_pod("second", "big", restart="Always"))
    assert _wait_pod(core, ns, "first").spec.node_name == "h100"
    assert _wait_pod(core, ns, "second").spec.node_name == "h100"
    results = [r["device"] for c in _claims(kube, ns) for r in c["status"]["allocation"]["devices"]["results"]]
    assert sorted(results) == ["gpu-%d" % i for i in range(8)]
    # all 8 H100s are taken: a third pod waits, with the scheduler's words
    core.create_namespaced_pod(ns, claim_pod("third", "big", restart="Always"))
    third = _wait_pod(core, ns, "third")
    assert third.spec.node_name is None and third.status.phase == "Pending"
    cond = next(c for c in third.status.conditions if c.type == "PodScheduled")
    assert (cond.status, cond.reason) == ("False", "Unschedulable")
    assert cond.message.startswith("0/3 nodes are available: 3 cannot allocate all claims.")
    # the first pod is deleted: its claim is released and deleted, and the third pod gets its GPUs
    core.delete_namespaced_pod("first", ns)
    names = [c["metadata"]["name"] for c in _claims(kube, ns)]
    assert not any(n.startswith("first-gpu-") for n in names)
    assert _wait_pod(core, ns, "third").spec.node_name == "h100"


def test_a_claim_for_more_gpus_than_any_node_has_stays_pending_with_the_reason(kube, dra_cluster):
    core, ns, h100, a100, dp = dra_cluster
    api(kube, "ResourceClaimTemplate").create(namespace=ns, body=template("nine", count=9))
    core.create_namespaced_pod(ns, claim_pod("nine", "nine"))
    pod = _wait_pod(core, ns, "nine")
    assert pod.status.phase == "Pending"
    cond = next(c for c in pod.status.conditions if c.type == "PodScheduled")
    assert cond.message == ("0/3 nodes are available: 3 cannot allocate all claims. preemption: 0/3 nodes are "
                            "available: 3 Preemption is not helpful for scheduling.")
    [claim] = _claims(kube, ns)
    assert not claim.get("status")  # nothing allocated, nothing reserved


def test_a_pod_pinned_to_a_node_without_a_slice_is_told_so(kube, dra_cluster):
    core, ns, h100, a100, dp = dra_cluster
    api(kube, "ResourceClaimTemplate").create(namespace=ns, body=template("one"))
    core.create_namespaced_pod(ns, claim_pod("on-dp", "one", node="dp"))
    cond = next(c for c in _wait_pod(core, ns, "on-dp").status.conditions if c.type == "PodScheduled")
    assert cond.message.startswith("0/3 nodes are available: 1 cannot allocate all claims, "
                                   "2 node(s) didn't match Pod's node affinity/selector.")


def test_a_finished_pod_releases_its_claim_and_the_generated_claim_is_deleted(kube, dra_cluster):
    core, ns, h100, a100, dp = dra_cluster
    api(kube, "ResourceClaimTemplate").create(namespace=ns, body=template("one"))
    core.create_namespaced_pod(ns, claim_pod("job", "one", node="h100"))
    pod = _wait_pod(core, ns, "job")
    assert (pod.spec.node_name, pod.status.phase) == ("h100", "Succeeded")
    assert "Test PASSED" in core.read_namespaced_pod_log("job", ns)
    # controller.go: a pod that is done needs no reservation; a claim reserved by no pod is deallocated;
    # a claim generated for a pod that is done is deleted
    assert _claims(kube, ns) == []


def test_a_shared_claim_by_name_keeps_its_allocation_and_lists_each_pod(kube, dra_cluster):
    core, ns, h100, a100, dp = dra_cluster
    api(kube, "ResourceClaim").create(namespace=ns, body={
        "apiVersion": V1, "kind": "ResourceClaim", "metadata": {"name": "shared"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}})
    for name in ("p1", "p2"):
        body = claim_pod(name, "unused", restart="Always")
        body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared"}]
        core.create_namespaced_pod(ns, body)
    p1, p2 = _wait_pod(core, ns, "p1"), _wait_pod(core, ns, "p2")
    assert p1.spec.node_name == p2.spec.node_name == "a100"
    claim = api(kube, "ResourceClaim").get(namespace=ns, name="shared").to_dict()
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["p1", "p2"]
    core.delete_namespaced_pod("p1", ns)
    core.delete_namespaced_pod("p2", ns)
    claim = api(kube, "ResourceClaim").get(namespace=ns, name="shared").to_dict()
    # not generated for a pod: kept, but released (no reservation, no allocation, no finalizer)
    assert not (claim.get("status") or {}).get("allocation") and not (claim.get("status") or {}).get("reservedFor")
    assert not claim["metadata"].get("finalizers")


def test_a_missing_device_class_or_template_is_the_pending_reason(kube, dra_cluster):
    core, ns, h100, a100, dp = dra_cluster
    core.create_namespaced_pod(ns, claim_pod("no-template", "absent"))
    cond = next(c for c in _wait_pod(core, ns, "no-template").status.conditions if c.type == "PodScheduled")
    # dynamicresources.go PreFilter, UnschedulableAndUnresolvable: it counts against every node
    assert cond.message.startswith('0/3 nodes are available: 3 waiting for dynamic resource controller to create '
                                   'the resourceclaim "no-template-gpu".')
    api(kube, "ResourceClaimTemplate").create(namespace=ns, body=template("other", klass="vfio.gpu.nvidia.com"))
    core.create_namespaced_pod(ns, claim_pod("no-class", "other"))
    cond = next(c for c in _wait_pod(core, ns, "no-class").status.conditions if c.type == "PodScheduled")
    assert 'could not retrieve device class vfio.gpu.nvidia.com' in cond.message


def test_a_changed_gpu_count_updates_the_slice_in_place_and_nothing_else_is_rewritten(kube, dra_cluster):
    core, ns, h100, a100, dp = dra_cluster
    before = slices_by_node(kube)["a100"]
    again = slices_by_node(kube)["a100"]
    assert again["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    core.patch_node("a100", {"metadata": {"annotations": {SIMULATED: "3"}}})
    after = slices_by_node(kube)["a100"]
    assert after["metadata"]["name"] == before["metadata"]["name"]
    assert [d["name"] for d in after["spec"]["devices"]] == ["gpu-0", "gpu-1", "gpu-2"]
    # resourceslicecontroller.go: one update keeps the pool generation
    assert after["spec"]["pool"]["generation"] == 1


def test_slices_are_watched_and_listed_by_kubectl(kube, dra_cluster):
    core, ns, h100, a100, dp = dra_cluster
    events = [e["type"] for e in api(kube, "ResourceSlice").watch(timeout=1, resource_version="1")]
    assert events.count("ADDED") == 2
    out = kube.kubectl("get", "resourceslices", "-o", "name", check=True).stdout.split()
    assert sorted(n.split("-gpu.nvidia.com-")[0] for n in out) == [
        "resourceslice.resource.k8s.io/a100", "resourceslice.resource.k8s.io/h100"]
    classes = kube.kubectl("get", "deviceclasses", check=True).stdout
    assert "gpu.nvidia.com" in classes and "mig.nvidia.com" in classes


def test_kubernetes_core_applies_a_device_class_idempotently_and_refuses_bad_cel(kube, kube_server):
    """What the role nvidia_dra_driver relies on: kubernetes.core.k8s over resource.k8s.io/v1."""
    definition = {"apiVersion": V1, "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
                  "spec": {"selectors": [{"cel": {"expression": GPU_CLASS_CEL}}]}}
    args = {"state": "present", "definition": definition}
    assert kube.ansible("kubernetes.core.k8s", args, check=True)["changed"] is True
    assert kube.ansible("kubernetes.core.k8s", args)["changed"] is True
    assert kube.ansible("kubernetes.core.k8s", args)["changed"] is False
    bad = json.loads(json.dumps(definition))
    bad["metadata"]["name"] = "broken"
    bad["spec"]["selectors"][0]["cel"]["expression"] = "device.attributes['gpu.nvidia.com'].type =="
    result = kube.ansible("kubernetes.core.k8s", {"state": "present", "definition": bad})
    assert result.get("failed") and "compilation failed" in result["msg"] + json.dumps(result.get("error", ""))


@pytest.mark.skipif(os.environ.get("KUBECONFIG") is not None, reason="the bench starts its own test server")
def test_many_dra_nodes_publish_and_allocate_with_a_bounded_number_of_calls():
    """bench/dra_api.py's steps at a smaller size (its figures for 1,000 nodes x 8 GPUs are printed by the bench):
    every node's slice is published and every claim allocated, and the readiness check is one LIST of the driver's
    slices whatever the number of nodes."""
    spec = importlib.util.spec_from_file_location("bench_dra_api", os.path.join(ROOT, "bench", "dra_api.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    steps, failures = bench.run(100, 8, out=lambda _line: None)
    assert failures == []
    assert steps["readiness"]["calls"] == {"list resourceslices": 1}
    assert steps["publishing"]["calls"] == {"create daemonsets": 1, "list resourceslices": 1}


# ------------------------------------------------------------------ quota
# Cases from pkg/quota/v1/evaluator/core/resource_claims_test.go (TestResourceClaimEvaluatorUsage): a claim counts
# one count/resourceclaims.resource.k8s.io and, per device class, the devices its requests may take: "simple"
# (one request: 1), "many-requests" (5 requests: 5), "count" (an exact count), "all" (allocationMode All: 32,
# AllocationResultsMaxSize), "first-available" (the largest alternative per class).
def _claim(name, requests):
    return {"apiVersion": V1, "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": requests}}}


def test_a_resource_quota_counts_claims_and_their_devices_per_class(kube, kube_server):
    core = kube.core()
    ns = kube.namespace()
    hard = {"count/resourceclaims.resource.k8s.io": "10", "gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "64",
            "mig.nvidia.com.deviceclass.resource.k8s.io/devices": "8"}
    core.create_namespaced_resource_quota(ns, {"metadata": {"name": "q"}, "spec": {"hard": hard}})

    def used():
        kube_server.settle()
        return core.read_namespaced_resource_quota("q", ns).status.used

    assert used() == {key: "0" for key in hard}
    claims = api(kube, "ResourceClaim")
    one = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    claims.create(namespace=ns, body=_claim("simple", [one]))
    assert used() == dict(hard, **{"count/resourceclaims.resource.k8s.io": "1",
                                   "gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "1",
                                   "mig.nvidia.com.deviceclass.resource.k8s.io/devices": "0"})
    claims.create(namespace=ns, body=_claim("many", [dict(one, name="r%d" % i) for i in range(5)]))
    claims.create(namespace=ns, body=_claim("count", [{"name": "gpu", "exactly": {
        "deviceClassName": "gpu.nvidia.com", "count": 3}}]))
    claims.create(namespace=ns, body=_claim("all", [{"name": "gpu", "exactly": {
        "deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}}]))
    claims.create(namespace=ns, body=_claim("first", [{"name": "gpu", "firstAvailable": [
        {"name": "big", "deviceClassName": "mig.nvidia.com", "count": 2},
        {"name": "small", "deviceClassName": "mig.nvidia.com", "count": 1},
        {"name": "whole", "deviceClassName": "gpu.nvidia.com"}]}]))
    assert used() == {"count/resourceclaims.resource.k8s.io": "5",
                      "gpu.nvidia.com.deviceclass.resource.k8s.io/devices": str(1 + 5 + 3 + 32 + 1),
                      "mig.nvidia.com.deviceclass.resource.k8s.io/devices": "2"}
    for name in ("simple", "many", "count", "all", "first"):
        claims.delete(namespace=ns, name=name)
    assert used() == {key: "0" for key in hard}


# ------------------------------------------------------------------ MIG devices in the slices
# kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1: cmd/gpu-kubelet-plugin/nvlib.go GetPerGpuAllocatableDevices (a GPU
# with MIG on is announced as its MIG devices, never as a whole), deviceinfo.go MigDeviceInfo.GetDevice, mig.go
# ToCanonicalName / CommonAttributesMig / CommonCapacitiesMig, and the chart's templates/deviceclass-mig.yaml.
SIMULATED_MIG = "kubegpu.io/simulated-mig-devices"
SIMULATED_NVML = "kubegpu.io/simulated-nvml"


@pytest.fixture
def mig_cluster(kube, kube_server):
    """a100 (2 A100s, DRA; GPU 0 partitioned 7x 1g.5gb, GPU 1 whole), h100 (the fake NVML profile h100x2-mig:
    both GPUs partitioned), big (8 A100s all-1g.5gb: 56 MIG devices)."""
    from fakenvml.profile import load_profile, simulated_gpu_devices
    ns = kube.namespace()
    dra = {"nvidia.com/dra-kubelet-plugin": "true"}
    kube.node("a100", labels=dict(dra), annotations={SIMULATED: "2", DEVICES: json.dumps([A100, A100]),
                                                     SIMULATED_MIG: json.dumps([["1g.5gb"] * 7, None])})
    kube.node("h100", labels=dict(dra), annotations={
        SIMULATED: "2", DEVICES: json.dumps(simulated_gpu_devices(load_profile("h100x2-mig"))),
        SIMULATED_NVML: json.dumps({"config": "h100x2-mig", "state": "/nonexistent/state"})})
    kube.node("big", labels=dict(dra), annotations={SIMULATED: "8", DEVICES: json.dumps([A100] * 8),
                                                    SIMULATED_MIG: json.dumps([["1g.5gb"] * 7] * 8)})
    kube.apps().create_namespaced_daemon_set(ns, plugin_daemonset(ns))
    device_classes(kube)
    return kube.core(), ns


def test_a_gpu_with_mig_on_is_published_as_its_mig_devices_as_the_nvidia_plugin_names_them(kube, mig_cluster):
    published = slices_by_node(kube, field_selector="spec.driver=gpu.nvidia.com")
    a100 = published["a100"]["spec"]["devices"]
    assert [d["name"] for d in a100] == ["gpu-0-mig-1g5gb-19-%d" % start for start in range(7)] + ["gpu-1"]
    mig, whole = a100[0], a100[7]
    parent = whole["attributes"]["uuid"]["string"]
    assert set(mig["attributes"]) == {"type", "uuid", "parentUUID", "profile", "productName", "brand",
                                      "architecture", "cudaComputeCapability", "driverVersion",
                                      "cudaDriverVersion", "resource.kubernetes.io/pciBusID"}
    assert mig["attributes"]["type"] == {"string": "mig"}
    assert mig["attributes"]["profile"] == {"string": "1g.5gb"}
    assert mig["attributes"]["productName"] == {"string": "NVIDIA A100-SXM4-40GB"}
    assert mig["attributes"]["cudaComputeCapability"] == {"version": "8.0.0"}
    gpu0 = mig["attributes"]["parentUUID"]["string"]
    assert gpu0 != parent and gpu0.startswith("GPU-")
    # the fake NVML's MIG UUIDs: the parent's digits with the instance number in the last group
    assert [d["attributes"]["uuid"]["string"] for d in a100[:7]] == [
        "MIG-%s%04x" % (gpu0[4:36], i) for i in range(1, 8)]
    assert mig["capacity"] == {"multiprocessors": {"value": "14"}, "copyEngines": {"value": "1"},
                               "decoders": {"value": "0"}, "encoders": {"value": "0"},
                               "jpegEngines": {"value": "0"}, "ofaEngines": {"value": "0"},
                               "memory": {"value": "4864Mi"}, "memorySlice0": {"value": "1"}}
    # the fake NVML's MIG layout (h100x2-mig): placed as the fake seeds it, the parents not listed
    h100 = published["h100"]["spec"]["devices"]
    assert [d["name"] for d in h100] == ["gpu-0-mig-1g10gb-19-1", "gpu-0-mig-1g10gb-me-20-0", "gpu-0-mig-2g20gb-14-2",
                                         "gpu-0-mig-3g40gb-9-4", "gpu-1-mig-7g80gb-0-0"]
    assert h100[1]["attributes"]["profile"] == {"string": "1g.10gb+me"}
    assert h100[1]["attributes"]["uuid"] == {"string": "MIG-8c3a5e71-9d2b-4f60-b1a4-3e5d7f9a0001"}
    assert (h100[1]["capacity"]["decoders"], h100[1]["capacity"]["multiprocessors"]) == ({"value": "1"}, {"value": "16"})
    assert sorted(k for k in h100[3]["capacity"] if k.startswith("memorySlice")) == [
        "memorySlice4", "memorySlice5", "memorySlice6", "memorySlice7"]
    assert len(published["big"]["spec"]["devices"]) == 56  # within the 128 a slice may hold


def test_a_mig_claim_by_profile_is_allocated_on_a_mig_device(kube, mig_cluster):
    core, ns = mig_cluster
    api(kube, "ResourceClaimTemplate").create(namespace=ns, body=template(
        "small", ["device.attributes['gpu.nvidia.com'].profile == '1g.10gb+me'"], klass="mig.nvidia.com"))
    core.create_namespaced_pod(ns, claim_pod("small", "small", restart="Always"))
    assert _wait_pod(core, ns, "small").spec.node_name == "h100"
    [claim] = _claims(kube, ns)
    assert claim["status"]["allocation"]["devices"]["results"] == [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "h100", "device": "gpu-0-mig-1g10gb-me-20-0"}]
    api(kube, "ResourceClaimTemplate").create(namespace=ns, body=template(
        "tiny", ["device.attributes['gpu.nvidia.com'].profile == '1g.5gb'"], count=2, klass="mig.nvidia.com"))
    core.create_namespaced_pod(ns, claim_pod("tiny", "tiny", node="a100", restart="Always"))
    assert _wait_pod(core, ns, "tiny").spec.node_name == "a100"
    claim = next(c for c in _claims(kube, ns) if c["metadata"]["name"].startswith("tiny-"))
    assert [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]] == [
        "gpu-0-mig-1g5gb-19-0", "gpu-0-mig-1g5gb-19-1"]


def test_a_gpu_claim_never_gets_a_partitioned_gpu(kube, mig_cluster):
    core, ns = mig_cluster
    api(kube, "ResourceClaimTemplate").create(namespace=ns, body=template("whole"))
    # on a100 only gpu-1 is whole: it is the one allocated
    core.create_namespaced_pod(ns, claim_pod("whole", "whole", node="a100", restart="Always"))
    assert _wait_pod(core, ns, "whole").spec.node_name == "a100"
    [claim] = _claims(kube, ns)
    assert [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]] == ["gpu-1"]
    # h100 has both GPUs partitioned: a claim for a whole GPU there waits, with the scheduler's reason
    core.create_namespaced_pod(ns, claim_pod("nowhere", "whole", node="h100"))
    pod = _wait_pod(core, ns, "nowhere")
    assert pod.spec.node_name is None and pod.status.phase == "Pending"
    cond = next(c for c in pod.status.conditions if c.type == "PodScheduled")
    assert (cond.status, cond.reason) == ("False", "Unschedulable")
    assert "cannot allocate all claims" in cond.message
