"""Manifests of kubegpu.nvidia.nvidia_dra_driver, rendered as the role renders them, and its preflight.

Every object is validated strictly against the Kubernetes 1.34 and 1.35 OpenAPI schemas kubernetes-validate
ships (they include resource.k8s.io/v1). Expectations follow kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1
deployments/helm/dra-driver-nvidia-gpu: templates/kubeletplugin.yaml (the gpus container, privileged, its
mounts), templates/rbac-kubeletplugin.yaml, templates/deviceclass-{gpu,mig}.yaml, values.yaml (the image).
The ComputeDomain part (nvidia_dra_driver_compute_domains) follows the same chart's crds/ (computedomains and
computedomaincliques), templates/controller.yaml, templates/rbac-controller.yaml,
templates/rbac-compute-domain-daemon.yaml, templates/kubeletplugin.yaml (the compute-domains container),
templates/rbac-kubeletplugin.yaml (its computedomain rules) and templates/deviceclass-compute-domain-*.yaml.
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
    "compute-domains": {"nvidia_dra_driver_compute_domains": True},
    "compute-domains-air-gapped": {"nvidia_dra_driver_compute_domains": True,
                                   "nvidia_dra_driver_image_registry": "registry.example.internal:5000",
                                   "nvidia_dra_driver_image_repository": "mirror/dra-driver-nvidia-gpu",
                                   "nvidia_dra_driver_image_pull_secrets": ["regcred", "mirror"]},
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


CD = {"nvidia_dra_driver_compute_domains": True}
# the chart's objects of resources.computeDomains.enabled, in the order the role applies them
COMPUTE_DOMAIN_OBJECTS = [
    ("CustomResourceDefinition", "computedomains.resource.nvidia.com"),
    ("CustomResourceDefinition", "computedomaincliques.resource.nvidia.com"),
    ("Role", "nvidia-dra-driver-gpu-kubeletplugin"),
    ("RoleBinding", "nvidia-dra-driver-gpu-kubeletplugin"),
    ("ServiceAccount", "nvidia-dra-driver-gpu-controller"),
    ("ClusterRole", "nvidia-dra-driver-gpu-controller"),
    ("ClusterRoleBinding", "nvidia-dra-driver-gpu-controller"),
    ("Role", "nvidia-dra-driver-gpu-controller"),
    ("RoleBinding", "nvidia-dra-driver-gpu-controller"),
    ("ServiceAccount", "compute-domain-daemon-service-account"),
    ("ClusterRole", "nvidia-dra-driver-gpu-compute-domain-daemon"),
    ("ClusterRoleBinding", "nvidia-dra-driver-gpu-compute-domain-daemon"),
    ("Deployment", "nvidia-dra-driver-gpu-controller"),
    ("DeviceClass", "compute-domain-daemon.nvidia.com"),
    ("DeviceClass", "compute-domain-default-channel.nvidia.com")]


def names(objects):
    return [(o["kind"], o["metadata"]["name"]) for o in objects]


def rules_of(objects, kind, name):
    (role,) = [o for o in by_kind(objects, kind) if o["metadata"]["name"] == name]
    return [(r["apiGroups"], r["resources"], r["verbs"]) for r in role["rules"]]


def test_compute_domains_add_the_chart_objects_and_change_nothing_else():
    off, on = manifests(), manifests(CD)
    assert [o for o in on if (o["kind"], o["metadata"]["name"]) not in COMPUTE_DOMAIN_OBJECTS
            and o["kind"] not in ("DaemonSet", "ClusterRole")] == [
        o for o in off if o["kind"] not in ("DaemonSet", "ClusterRole")]
    added = [n for n in names(on) if n not in names(off)]
    assert added == COMPUTE_DOMAIN_OBJECTS
    # applied after the DeviceClasses for GPUs, before the kubelet plugin that watches the CRDs
    assert names(on).index(added[0]) == names(off).index(("DeviceClass", "mig.nvidia.com")) + 1
    assert names(on)[-2:] == [("DaemonSet", "nvidia-dra-driver-gpu-kubelet-plugin"),
                              ("ResourceClaimTemplate", "gpu-validation")]


def test_the_compute_domain_crds_as_the_chart_ships_them():
    crds = dict((o["metadata"]["name"], o["spec"]) for o in by_kind(manifests(CD), "CustomResourceDefinition"))
    cd, clique = crds["computedomains.resource.nvidia.com"], crds["computedomaincliques.resource.nvidia.com"]
    assert (cd["group"], cd["scope"], cd["names"]["kind"], cd["names"]["plural"]) == (
        "resource.nvidia.com", "Namespaced", "ComputeDomain", "computedomains")
    (version,) = cd["versions"]
    assert (version["name"], version["served"], version["storage"], version["subresources"]) == (
        "v1beta1", True, True, {"status": {}})
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["required"] == ["channel"]
    assert spec["x-kubernetes-validations"] == [{"rule": "self == oldSelf", "message": "A computeDomain.spec is immutable"}]
    channel = spec["properties"]["channel"]
    assert channel["required"] == ["resourceClaimTemplate"]
    assert channel["properties"]["allocationMode"] == {"type": "string", "default": "Single", "enum": ["All", "Single"]}
    assert spec["properties"]["numNodes"] == {"type": "integer", "default": 0, "minimum": 0}
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status["required"] == ["status"]
    assert status["properties"]["nodes"]["x-kubernetes-list-map-keys"] == ["name"]
    assert status["properties"]["nodes"]["items"]["required"] == ["cliqueID", "ipAddress", "name"]
    (version,) = clique["versions"]
    assert (clique["names"]["kind"], clique["scope"], version["name"], "subresources" in version) == (
        "ComputeDomainClique", "Namespaced", "v1beta1", False)
    daemons = version["schema"]["openAPIV3Schema"]["properties"]["daemons"]
    assert daemons["x-kubernetes-list-map-keys"] == ["nodeName"]
    assert daemons["items"]["required"] == ["cliqueID", "ipAddress", "nodeName"]


def test_the_compute_domain_device_classes_and_their_cel():
    classes = dict((o["metadata"]["name"], o["spec"]["selectors"]) for o in by_kind(manifests(CD), "DeviceClass"))
    assert classes["compute-domain-daemon.nvidia.com"] == [{"cel": {"expression": (
        "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == 'daemon'")}}]
    assert classes["compute-domain-default-channel.nvidia.com"] == [{"cel": {"expression": (
        "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == 'channel'"
        " && device.attributes['compute-domain.nvidia.com'].id == 0")}}]
    assert sorted(classes) == ["compute-domain-daemon.nvidia.com", "compute-domain-default-channel.nvidia.com",
                               "gpu.nvidia.com", "mig.nvidia.com"]


def test_the_controller_deployment_as_the_chart_renders_it():
    (dep,) = by_kind(manifests(CD), "Deployment")
    assert dep["metadata"]["namespace"] == "nvidia-dra-driver-gpu" and dep["spec"]["replicas"] == 1
    spec = dep["spec"]["template"]["spec"]
    assert dep["spec"]["selector"]["matchLabels"]["dra-driver-nvidia-gpu-component"] == "controller"
    assert spec["serviceAccountName"] == "nvidia-dra-driver-gpu-controller"
    assert spec["priorityClassName"] == "system-node-critical"
    (ctr,) = spec["containers"]
    assert ctr["name"] == "compute-domain" and "securityContext" not in ctr  # not privileged
    assert ctr["command"] == ["compute-domain-controller", "-v", "$(LOG_VERBOSITY)"]
    assert ctr["image"] == "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1"
    env = dict((e["name"], e.get("value", e.get("valueFrom"))) for e in ctr["env"])
    assert (env["LOG_VERBOSITY"], env["LOG_VERBOSITY_CD_DAEMON"], env["NVIDIA_VISIBLE_DEVICES"]) == ("4", "4", "void")
    assert env["IMAGE_NAME"] == ctr["image"] and env["LEADER_ELECTION_ENABLED"] == "false"
    assert env["NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert "CD_DAEMON_IMAGE_PULL_SECRET_NAMES" not in env
    # values.yaml controller.tolerations and affinity
    assert spec["tolerations"] == [
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "CriticalAddonsOnly", "operator": "Exists"}]
    assert spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 100


def test_the_controller_and_its_daemons_in_an_air_gapped_cluster():
    objects = manifests(VARIABLE_SETS["compute-domains-air-gapped"])
    (dep,) = by_kind(objects, "Deployment")
    spec = dep["spec"]["template"]["spec"]
    (ctr,) = spec["containers"]
    env = dict((e["name"], e.get("value")) for e in ctr["env"])
    image = "registry.example.internal:5000/mirror/dra-driver-nvidia-gpu:v0.4.1"
    # the IMEX daemons the controller starts take the same mirror image and pull secrets
    assert (ctr["image"], env["IMAGE_NAME"], env["CD_DAEMON_IMAGE_PULL_SECRET_NAMES"]) == (image, image, "regcred,mirror")
    assert spec["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}]
    (ds,) = by_kind(objects, "DaemonSet")
    assert set(c["image"] for c in ds["spec"]["template"]["spec"]["containers"]) == {image}


def test_the_compute_domain_rbac_is_the_charts_without_leases():
    objects = manifests(CD)
    assert rules_of(objects, "ClusterRole", "nvidia-dra-driver-gpu-controller") == [
        (["resource.nvidia.com"], ["computedomains"], ["get", "list", "watch", "update"]),
        (["resource.nvidia.com"], ["computedomains/status"], ["update"]),
        (["resource.k8s.io"], ["resourceclaimtemplates"], ["get", "list", "watch", "create", "update", "delete"]),
        ([""], ["nodes"], ["get", "list", "watch", "update"]),
        ([""], ["pods"], ["get", "list", "watch"])]
    assert rules_of(objects, "Role", "nvidia-dra-driver-gpu-controller") == [
        (["apps"], ["daemonsets"], ["get", "list", "watch", "create", "update", "patch", "delete"]),
        (["resource.nvidia.com"], ["computedomaincliques"], ["get", "list", "watch", "update"])]
    assert rules_of(objects, "Role", "nvidia-dra-driver-gpu-kubeletplugin") == [
        (["resource.nvidia.com"], ["computedomaincliques"], ["get"])]
    assert rules_of(objects, "ClusterRole", "nvidia-dra-driver-gpu-compute-domain-daemon") == [
        (["resource.nvidia.com"], ["computedomains", "computedomains/status"], ["get", "list", "watch", "update", "patch"]),
        (["resource.nvidia.com"], ["computedomaincliques"], ["get", "list", "watch", "create", "update", "patch"]),
        ([""], ["pods"], ["get", "list", "watch", "patch"])]
    # the kubelet plugin: computedomains read, nodes updated (the compute-domains container labels its node)
    plugin = dict((r[1][0], r[2]) for r in rules_of(objects, "ClusterRole", "nvidia-dra-driver-gpu-kubeletplugin"))
    assert plugin["computedomains"] == ["get", "list", "watch"]
    assert plugin["nodes"] == ["get", "list", "watch", "update"]
    bindings = dict((o["metadata"]["name"], o) for o in by_kind(objects, "ClusterRoleBinding"))
    assert bindings["nvidia-dra-driver-gpu-compute-domain-daemon"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "compute-domain-daemon-service-account", "namespace": "nvidia-dra-driver-gpu"}]


def test_the_kubelet_plugin_gets_the_compute_domains_container_first():
    (ds,) = by_kind(manifests(CD), "DaemonSet")
    cd, gpus = ds["spec"]["template"]["spec"]["containers"]
    (gpus_off,) = by_kind(manifests(), "DaemonSet")[0]["spec"]["template"]["spec"]["containers"]
    assert (cd["name"], gpus) == ("compute-domains", gpus_off)
    assert cd["securityContext"] == {"privileged": True}
    assert cd["command"] == ["compute-domain-kubelet-plugin"] and cd["args"] == ["-v", "4"]
    env = dict((e["name"], e.get("value")) for e in cd["env"])
    assert (env["HEALTHCHECK_PORT"], env["CDI_ROOT"], env["NVIDIA_VISIBLE_DEVICES"]) == ("51515", "/var/run/cdi", "void")
    assert cd["startupProbe"] == {"grpc": {"port": 51515, "service": "liveness"}, "failureThreshold": 600,
                                  "periodSeconds": 1, "timeoutSeconds": 10}
    assert cd["livenessProbe"] == {"grpc": {"port": 51515, "service": "liveness"}, "failureThreshold": 3,
                                   "periodSeconds": 10, "timeoutSeconds": 10}
    mounts = dict((m["name"], m) for m in cd["volumeMounts"])
    assert mounts["plugins"]["mountPropagation"] == "Bidirectional"
    assert mounts["driver-root"] == {"name": "driver-root", "mountPath": "/driver-root", "readOnly": True,
                                     "mountPropagation": "HostToContainer"}


def test_turning_compute_domains_off_removes_exactly_the_objects_it_added():
    # rendered with the setting off too: the role removes them then, DeviceClasses first, the CRDs last
    removed = role_render.render(ROLE, "{{ _nvidia_dra_driver_compute_domain_objects }}")
    assert names(removed) == COMPUTE_DOMAIN_OBJECTS[::-1]
    on = dict(((o["kind"], o["metadata"]["name"]), o) for o in manifests(CD))
    assert all(on[(o["kind"], o["metadata"]["name"])] == o for o in removed)


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
    ({"nvidia_dra_driver_compute_domains": True}, []),
    ({"nvidia_dra_driver_compute_domains": True, "nvidia_dra_driver_device_classes": {
        "gpu.nvidia.com": ["device.driver == 'gpu.nvidia.com'"], "compute-domain-daemon.nvidia.com": ["true"]}},
     ["DRA cannot be deployed: DeviceClass compute-domain-daemon.nvidia.com is created by the ComputeDomain part "
      "(nvidia_dra_driver_compute_domains); remove it from nvidia_dra_driver_device_classes"]),
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
