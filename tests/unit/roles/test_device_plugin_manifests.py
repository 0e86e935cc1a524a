"""Manifests of kubegpu.nvidia.k8s_device_plugin, rendered as the role renders them.

Every object is validated, strictly (unknown fields are errors), against the Kubernetes
OpenAPI schemas kubernetes-validate ships for each Kubernetes version the docs claim.
"""
import json

import pytest
import yaml

import kubernetes_validate

import role_render

# docs/k8s_device_plugin.md: "Kubernetes 1.29 to 1.35".
K8S_VERSIONS = ["1.29", "1.30", "1.31", "1.32", "1.33", "1.34", "1.35"]

VARIABLE_SETS = {
    "defaults": {},
    "time-slicing": {
        "k8s_device_plugin_sharing_strategy": "time-slicing",
        "k8s_device_plugin_replicas": 4,
        "k8s_device_plugin_fail_requests_greater_than_one": True,
    },
    "mps": {"k8s_device_plugin_sharing_strategy": "mps", "k8s_device_plugin_replicas": 2,
            "k8s_device_plugin_rename_by_default": True},
    "mig-mixed": {"k8s_device_plugin_mig_strategy": "mixed"},
    "gfd": {"k8s_device_plugin_gfd_enabled": True},
    "air-gapped": {
        "k8s_device_plugin_image_registry": "registry.example.internal:5000",
        "k8s_device_plugin_image_repository": "mirror/nvidia/k8s-device-plugin",
        "k8s_device_plugin_image_pull_secrets": ["regcred", "backup-cred"],
        "k8s_device_plugin_image_pull_policy": "Always",
    },
    "default-runtime-nvidia": {"k8s_device_plugin_nvidia_default_runtime": True,
                               "k8s_device_plugin_runtime_class_create": False},
    "per-product": {
        "k8s_device_plugin_configs": {
            "t4-shared": {"sharing_strategy": "time-slicing", "replicas": 8},
            "a100-mig": {"mig_strategy": "single", "device_list_strategy": "volume-mounts"},
        },
        "k8s_device_plugin_product_configs": {"Tesla-T4": "t4-shared"},
        "k8s_device_plugin_node_configs": {"node-7": "a100-mig"},
    },
    "quotas-and-priority": {
        "k8s_device_plugin_resource_quotas": {"team-a": 4, "team-b": 8},
        "k8s_device_plugin_workload_priority_class_create": True,
        "k8s_device_plugin_resources": {"limits": {"memory": "512Mi"}, "requests": {"cpu": "50m"}},
        "k8s_device_plugin_extra_tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu",
                                                 "effect": "NoSchedule"}],
    },
}


def by_kind(objects, kind, name=None):
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert found, "no %s %s rendered" % (kind, name or "")
    return found[0]


def containers(daemonset, init=False):
    spec = daemonset["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec.get("initContainers" if init else "containers", [])}


def env(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


@pytest.fixture(scope="module", params=sorted(VARIABLE_SETS))
def rendered(request):
    return request.param, role_render.manifests(VARIABLE_SETS[request.param])


@pytest.fixture(scope="module", name="distinct_objects")
def fixture_distinct_objects():
    """Every object any variable set renders, once: {json: [variable set names]}."""
    seen = {}
    for name in sorted(VARIABLE_SETS):
        for obj in role_render.manifests(VARIABLE_SETS[name]):
            seen.setdefault(json.dumps(obj, sort_keys=True), []).append(name)
    return seen


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_device_plugin_manifests_match_the_kubernetes_schema(distinct_objects, version):
    kinds = set()
    for text, sets in distinct_objects.items():
        obj = json.loads(text)
        kinds.add(obj["kind"])
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail("%s %s (variables %s) invalid for Kubernetes %s: %s"
                        % (obj["kind"], obj["metadata"]["name"], ", ".join(sets), version, err))
    assert kinds == {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "RuntimeClass",
                     "PriorityClass", "ResourceQuota", "DaemonSet"}


def test_the_docs_claim_the_versions_tested():
    with open(role_render.os.path.join(role_render.ROOT, "docs", "k8s_device_plugin.md")) as handle:
        assert "Kubernetes %s to %s" % (K8S_VERSIONS[0], K8S_VERSIONS[-1]) in handle.read()


def test_validation_never_widens_beyond_shipped_schemas():
    shipped = kubernetes_validate.utils.all_versions()
    for version in K8S_VERSIONS:
        assert any(v.startswith(version + ".") for v in shipped), version


def test_objects_are_applied_namespace_first_daemonset_after_its_config(rendered):
    objects = rendered[1]
    kinds = [o["kind"] for o in objects]
    assert kinds[0] == "Namespace"
    assert kinds.index("ConfigMap") < kinds.index("DaemonSet")
    assert kinds.index("ServiceAccount") < kinds.index("DaemonSet")


def test_default_daemonset_follows_the_upstream_chart():
    objects = role_render.manifests()
    ds = by_kind(objects, "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    assert ds["metadata"]["namespace"] == "nvidia-device-plugin"
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["runtimeClassName"] == "nvidia"
    assert {"key": "CriticalAddonsOnly", "operator": "Exists"} in spec["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}]
    ctr = containers(ds)["nvidia-device-plugin-ctr"]
    assert ctr["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
    assert ctr["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert env(ctr)["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env(ctr)["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    assert env(ctr)["CONFIG_FILE"] == "/config/config.yaml"
    mounts = {m["name"]: m["mountPath"] for m in ctr["volumeMounts"]}
    assert mounts["kubelet-device-plugins-dir"] == "/var/lib/kubelet/device-plugins"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["kubelet-device-plugins-dir"]["hostPath"]["path"] == "/var/lib/kubelet/device-plugins"
    assert volumes["available-configs"]["configMap"]["name"] == by_kind(objects, "ConfigMap")["metadata"]["name"]
    assert "imagePullSecrets" not in spec
    assert spec["serviceAccountName"] == by_kind(objects, "ServiceAccount")["metadata"]["name"]
    rc = by_kind(objects, "RuntimeClass")
    assert (rc["metadata"]["name"], rc["handler"]) == ("nvidia", "nvidia")
    selector = ds["spec"]["selector"]["matchLabels"]
    assert selector.items() <= ds["spec"]["template"]["metadata"]["labels"].items()


def test_config_manager_runs_as_init_and_sidecar_with_the_node_label():
    ds = by_kind(role_render.manifests({"k8s_device_plugin_default_config": "shared"}), "DaemonSet")
    init = containers(ds, init=True)["nvidia-device-plugin-init"]
    sidecar = containers(ds)["nvidia-device-plugin-sidecar"]
    for ctr, oneshot in ((init, "true"), (sidecar, "false")):
        assert ctr["command"] == ["config-manager"]
        values = env(ctr)
        assert values["ONESHOT"] == oneshot
        assert values["NODE_LABEL"] == "nvidia.com/device-plugin.config"
        assert values["DEFAULT_CONFIG"] == "shared"
        assert values["CONFIG_FILE_SRCDIR"] == "/available-configs"
    assert env(sidecar)["PROCESS_TO_SIGNAL"] == "nvidia-device-plugin"
    assert ds["spec"]["template"]["spec"]["shareProcessNamespace"] is True


def test_configmap_holds_one_device_plugin_config_per_name():
    objects = role_render.manifests(VARIABLE_SETS["per-product"])
    data = by_kind(objects, "ConfigMap")["data"]
    assert sorted(data) == ["a100-mig", "default", "t4-shared"]
    default = yaml.safe_load(data["default"])
    assert default == {"version": "v1", "flags": {
        "migStrategy": "none", "failOnInitError": True,
        "plugin": {"passDeviceSpecs": False, "deviceListStrategy": "envvar", "deviceIDStrategy": "uuid"}}}
    t4 = yaml.safe_load(data["t4-shared"])
    assert t4["sharing"] == {"timeSlicing": {"renameByDefault": False, "failRequestsGreaterThanOne": False,
                                             "resources": [{"name": "nvidia.com/gpu", "replicas": 8}]}}
    mig = yaml.safe_load(data["a100-mig"])
    assert mig["flags"]["migStrategy"] == "single"
    assert mig["flags"]["plugin"]["deviceListStrategy"] == "volume-mounts"
    assert "sharing" not in mig


def test_mps_config_and_rename():
    data = by_kind(role_render.manifests(VARIABLE_SETS["mps"]), "ConfigMap")["data"]
    assert yaml.safe_load(data["default"])["sharing"] == {
        "mps": {"renameByDefault": True, "resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}


def test_sys_admin_only_for_mig_or_volume_mounts():
    for name, wants in (("defaults", False), ("time-slicing", False), ("mig-mixed", True), ("per-product", True)):
        ds = by_kind(role_render.manifests(VARIABLE_SETS[name]), "DaemonSet")
        ctx = containers(ds)["nvidia-device-plugin-ctr"]["securityContext"]
        if wants:
            assert ctx == {"capabilities": {"add": ["SYS_ADMIN"]}}, name
            assert env(containers(ds)["nvidia-device-plugin-ctr"])["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
        else:
            assert ctx["capabilities"] == {"drop": ["ALL"]}, name
            assert ctx["allowPrivilegeEscalation"] is False


def test_air_gapped_image_and_pull_secrets():
    objects = role_render.manifests(VARIABLE_SETS["air-gapped"])
    spec = by_kind(objects, "DaemonSet")["spec"]["template"]["spec"]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}, {"name": "backup-cred"}]
    for ctr in spec["containers"] + spec["initContainers"]:
        assert ctr["image"] == "registry.example.internal:5000/mirror/nvidia/k8s-device-plugin:v0.20.0"
        assert ctr["imagePullPolicy"] == "Always"


def test_no_runtime_class_when_nvidia_is_the_default_runtime():
    objects = role_render.manifests(VARIABLE_SETS["default-runtime-nvidia"])
    assert "RuntimeClass" not in [o["kind"] for o in objects]
    assert "runtimeClassName" not in by_kind(objects, "DaemonSet")["spec"]["template"]["spec"]


def test_gfd_daemonset_shares_config_and_scheduling():
    objects = role_render.manifests(VARIABLE_SETS["gfd"])
    gfd = by_kind(objects, "DaemonSet", "nvidia-device-plugin-gpu-feature-discovery")
    plugin = by_kind(objects, "DaemonSet", "nvidia-device-plugin")
    assert containers(gfd)["gpu-feature-discovery-ctr"]["command"] == ["gpu-feature-discovery"]
    assert gfd["spec"]["selector"] != plugin["spec"]["selector"]
    for key in ("tolerations", "affinity", "priorityClassName", "runtimeClassName"):
        assert gfd["spec"]["template"]["spec"][key] == plugin["spec"]["template"]["spec"][key]
    assert "gpu-feature-discovery" not in [o["metadata"]["name"] for o in role_render.manifests()]


def test_quotas_priority_class_resources_and_extra_tolerations():
    objects = role_render.manifests(VARIABLE_SETS["quotas-and-priority"])
    quotas = [o for o in objects if o["kind"] == "ResourceQuota"]
    assert {(q["metadata"]["namespace"], q["spec"]["hard"]["requests.nvidia.com/gpu"]) for q in quotas} == {
        ("team-a", "4"), ("team-b", "8")}
    namespaces = [o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"]
    assert {"team-a", "team-b"} <= set(namespaces)
    for quota in quotas:  # each quota after its namespace
        assert namespaces.index(quota["metadata"]["namespace"]) < objects.index(quota)
    pc = by_kind(objects, "PriorityClass")
    assert (pc["metadata"]["name"], pc["value"], pc["globalDefault"]) == ("gpu-workload", 100000, False)
    spec = by_kind(objects, "DaemonSet")["spec"]["template"]["spec"]
    assert {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"} in spec["tolerations"]
    assert containers(by_kind(objects, "DaemonSet"))["nvidia-device-plugin-ctr"]["resources"]["limits"] == {
        "memory": "512Mi"}


def test_rbac_lets_the_config_manager_read_nodes():
    objects = role_render.manifests()
    role = by_kind(objects, "ClusterRole")
    assert {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]} in role["rules"]
    binding = by_kind(objects, "ClusterRoleBinding")
    sa = by_kind(objects, "ServiceAccount")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": sa["metadata"]["namespace"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_rendering_is_stable():
    assert role_render.manifests(VARIABLE_SETS["per-product"]) == role_render.manifests(VARIABLE_SETS["per-product"])


# The configs' resolution, the config labels and the capacity check are Python (plugins/filter/device_plugin.py,
# module_utils/device_plugin_config.py, module_utils/node_model.py): tests/unit/plugins/filter/test_device_plugin.py
# renders them through this role's variables.


def applied(status, generation=2, name="nvidia-device-plugin"):
    daemonset = {"kind": "DaemonSet", "metadata": {"name": name, "generation": generation}, "status": status}
    return {"result": {"results": [
        {"changed": False, "method": "update", "result": {"kind": "Namespace", "metadata": {"name": "ns"}}},
        {"changed": False, "method": "update", "result": daemonset}]}}


READY = {"desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberReady": 3, "observedGeneration": 2}


@pytest.mark.parametrize("status, generation, name, ready", [
    (READY, 2, "nvidia-device-plugin", True),                              # nothing to wait for: the wait is skipped
    (READY, 3, "nvidia-device-plugin", False),                             # the apply changed the spec: not observed yet
    (dict(READY, numberReady=2), 2, "nvidia-device-plugin", False),        # a pod not ready
    (dict(READY, updatedNumberScheduled=1), 2, "nvidia-device-plugin", False),  # rolling
    ({}, 1, "nvidia-device-plugin", False),                                # just created
    (READY, 2, "gpu-feature-discovery", False),                            # another DaemonSet
])
def test_the_rollout_wait_runs_unless_the_applied_daemonset_is_ready(status, generation, name, ready):
    variables = {"_k8s_device_plugin_applied": applied(status, generation, name)}
    assert role_render.render("k8s_device_plugin", "{{ _k8s_device_plugin_applied_ready }}", variables) is ready
    # with the wait skipped, the rollout check and its message read the applied DaemonSet
    assert role_render.render("k8s_device_plugin", "{{ _k8s_device_plugin_daemonset_ready }}",
                              dict(variables, _k8s_device_plugin_ds_info={"skipped": True})) is ready


def test_the_rollout_check_reads_the_wait_when_it_ran():
    variables = {"_k8s_device_plugin_applied": applied({}, 1),
                 "_k8s_device_plugin_ds_info": {"resources": [
                     {"kind": "DaemonSet", "metadata": {"name": "nvidia-device-plugin", "generation": 1},
                      "status": dict(READY, observedGeneration=1)}]}}
    assert role_render.render("k8s_device_plugin", "{{ _k8s_device_plugin_daemonset_ready }}", variables) is True
