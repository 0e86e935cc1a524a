"""Manifests of kubegpu.nvidia.nvidia_dra_driver, rendered as the role renders them, and its preflight.

Every object is validated strictly against the Kubernetes 1.34 and 1.35 OpenAPI schemas kubernetes-validate
ships (they include resource.k8s.io/v1). Expectations follow kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1
deployments/helm/dra-driver-nvidia-gpu: templates/kubeletplugin.yaml (the gpus container, privileged, its
mounts), templates/rbac-kubeletplugin.yaml, templates/deviceclass-{gpu,mig}.yaml, values.yaml (the image).
"""
import pytest

import kubernetes_validate

import role_render

K8S_VERSIONS = ["1.34", "1.35"]
ROLE = "nvidia_dra_driver"


def manifests(overrides=None, extra=None):
    return role_render.render(ROLE, "{{ _nvidia_dra_driver_manifests }}", overrides, extra)


def problems(overrides=None, extra=None):
    return role_render.render(ROLE, "{{ _nvidia_dra_driver_problems }}", overrides, extra)


def by_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


VARIABLE_SETS = {
    "defaults": {},
    "air-gapped": {"nvidia_dra_driver_image_registry": "registry.example.internal:5000",
                   "nvidia_dra_driver_image_repository": "mirror/dra-driver-nvidia-gpu",
                   "nvidia_dra_driver_image_pull_secrets": ["regcred"], "nvidia_dra_driver_image_pull_policy": "Always"},
    "digest": {"nvidia_dra_driver_image_tag": "", "nvidia_dra_driver_image_digest": "sha256:" + "c" * 64},
    "driver-container": {"nvidia_dra_driver_driver_root": "/run/nvidia/driver"},
}


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", sorted(VARIABLE_SETS))
def test_manifests_match_the_kubernetes_schema(name, version):
    for obj in manifests(VARIABLE_SETS[name]):
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_chart_objects_for_gpus_and_no_compute_domain():
    objects = manifests()
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("Namespace", "nvidia-dra-driver-gpu"),
        ("ServiceAccount", "nvidia-dra-driver-gpu-kubeletplugin"),
        ("ClusterRole", "nvidia-dra-driver-gpu-kubeletplugin"),
        ("ClusterRoleBinding", "nvidia-dra-driver-gpu-kubeletplugin"),
        ("DeviceClass", "gpu.nvidia.com"),
        ("DeviceClass", "mig.nvidia.com"),
        ("DaemonSet", "nvidia-dra-driver-gpu-kubelet-plugin"),
        # the claim validation's template (demo/specs/quickstart/v1/gpu-test1.yaml): one gpu.nvidia.com device,
        # else (a node whose GPUs all have MIG on publishes none) one mig.nvidia.com device
        ("ResourceClaimTemplate", "gpu-validation")]
    (claim,) = by_kind(objects, "ResourceClaimTemplate")
    assert claim["spec"]["spec"]["devices"]["requests"] == [{"name": "gpu", "firstAvailable": [
        {"name": "gpu", "deviceClassName": "gpu.nvidia.com"}, {"name": "mig", "deviceClassName": "mig.nvidia.com"}]}]
    classes = dict((o["metadata"]["name"], o["spec"]["selectors"]) for o in by_kind(objects, "DeviceClass"))
    assert classes["gpu.nvidia.com"] == [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && "
                                                                "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]
    assert classes["mig.nvidia.com"] == [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && "
                                                                "device.attributes['gpu.nvidia.com'].type == 'mig'"}}]
    # least privilege where the chart allows: no ComputeDomain rules, claims read-only, nodes not written
    (role,) = by_kind(objects, "ClusterRole")
    rules = dict((r["resources"][0], r["verbs"]) for r in role["rules"])
    assert "computedomains" not in rules and "computedomaincliques" not in rules
    assert rules["resourceclaims"] == ["get", "list", "watch"]
    assert rules["nodes"] == ["get", "list", "watch"]


def test_the_kubelet_plugin_runs_on_the_dra_nodes_only():
    (ds,) = by_kind(manifests(), "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "nvidia.com/dra-kubelet-plugin", "operator": "In",
                                            "values": ["true"]}]}]
    (ctr,) = spec["containers"]
    assert ctr["name"] == "gpus" and ctr["securityContext"] == {"privileged": True}
    assert ctr["image"] == "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1"
    mounts = dict((m["name"], m) for m in ctr["volumeMounts"])
    assert mounts["plugins"]["mountPropagation"] == "Bidirectional"
    assert mounts["cdi"]["mountPath"] == "/var/run/cdi"
    assert spec["serviceAccountName"] == "nvidia-dra-driver-gpu-kubeletplugin"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert "imagePullSecrets" not in spec


def test_air_gapped_and_digest_images():
    (ds,) = by_kind(manifests(VARIABLE_SETS["air-gapped"]), "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    images = set(c["image"] for c in spec["containers"] + spec["initContainers"])
    assert images == {"registry.example.internal:5000/mirror/dra-driver-nvidia-gpu:v0.4.1"}
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    (ds,) = by_kind(manifests(VARIABLE_SETS["digest"]), "DaemonSet")
    assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu@sha256:" + "c" * 64)
    (ds,) = by_kind(manifests(VARIABLE_SETS["driver-container"]), "DaemonSet")
    volumes = dict((v["name"], v["hostPath"]["path"]) for v in ds["spec"]["template"]["spec"]["volumes"])
    assert (volumes["driver-root"], volumes["driver-root-parent"]) == ("/run/nvidia/driver", "/run/nvidia")


H100 = {"present": True, "count": 1, "driver_version": "570.172.08",
        "devices": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0", "memory_mib": 81559}]}


def hostvars(**host):
    return {"h100": dict({"kubegpu_gpu_allocation": "dra", "ansible_facts": {"nvidia_gpu": H100}}, **host)}


@pytest.mark.parametrize("overrides, expected", [
    ({}, []),
    ({"kubegpu_cluster": {"version": "1.33.4"}},
     ["DRA cannot be deployed: the cluster runs Kubernetes 1.33.4; DRA (resource.k8s.io/v1) needs 1.34 or newer"]),
    ({"nvidia_dra_driver_image_tag": "", "nvidia_dra_driver_image_digest": ""}, None),
    ({"nvidia_dra_driver_device_classes": {"gpu.nvidia.com": ["device.driver =="]}}, None),
])
def test_the_preflight_refuses_before_anything_is_applied(overrides, expected):
    variables = dict({"kubegpu_cluster": {"version": "1.34.2"}, "hostvars": hostvars(),
                      "groups": {"all": ["h100"]}}, **overrides)
    found = problems(variables)
    if expected is not None:
        assert found == expected
    else:
        assert len(found) == 1 and "\n" not in found[0]
        assert ("nvidia_dra_driver_image" in found[0]) or ("does not compile" in found[0])


def test_the_validation_pod_gets_its_gpu_from_the_claim_only():
    pod = role_render.render(ROLE, "{{ _nvidia_dra_driver_validation_pod }}")
    kubernetes_validate.validate(dict(pod, metadata=dict(pod["metadata"], name="x")), "1.34", strict=True)
    assert pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "gpu-validation"}]
    (ctr,) = pod["spec"]["containers"]
    assert ctr["resources"] == {"claims": [{"name": "gpu"}]}  # no nvidia.com/gpu: the device plugin is not there
    assert ctr["image"] == "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
