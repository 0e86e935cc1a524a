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
    "gfd-mig": {"k8s_device_plugin_gfd_enabled": True, "k8s_device_plugin_mig_strategy": "single"},
    "gfd-vgpu-no-gc": {"k8s_device_plugin_gfd_enabled": True, "k8s_device_plugin_gfd_vgpu_labels": True,
                       "k8s_device_plugin_nfd_gc_enabled": False,
                       "k8s_device_plugin_image_pull_secrets": ["regcred"]},
    "gfd-external-nfd": {"k8s_device_plugin_gfd_enabled": True, "k8s_device_plugin_nfd_deploy": False},
    "mps-gfd": {"k8s_device_plugin_gfd_enabled": True, "k8s_device_plugin_sharing_strategy": "mps",
                "k8s_device_plugin_replicas": 4, "k8s_device_plugin_mps_root": "/var/run/mps",
                "k8s_device_plugin_configs": {"mig": {"sharing_strategy": "none", "mig_strategy": "single"}}},
    "cdi": {"k8s_device_plugin_device_list_strategy": "cdi-cri"},
    "pinned-by-digest": {"k8s_device_plugin_image_tag": "", "k8s_device_plugin_image_digest": "sha256:" + "a" * 64,
                         "k8s_device_plugin_gfd_enabled": True,
                         "k8s_device_plugin_nfd_image_digest": "sha256:" + "b" * 64},
    "writable-root": {"k8s_device_plugin_read_only_root_filesystem": False, "k8s_device_plugin_gfd_enabled": True,
                      "k8s_device_plugin_sharing_strategy": "mps", "k8s_device_plugin_replicas": 2},
    "air-gapped": {
        "k8s_device_plugin_image_registry": "registry.example.internal:5000",
        "k8s_device_plugin_image_repository": "mirror/nvidia/k8s-device-plugin",
        "k8s_device_plugin_image_pull_secrets": ["regcred", "backup-cred"],
        "k8s_device_plugin_image_pull_policy": "Always",
    },
    "health-xids": {"k8s_device_plugin_health_ignored_xids": [94, 48], "k8s_device_plugin_health_forced_xids": [109]},
    "health-off": {"k8s_device_plugin_health_checks": False},
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


# every container's floor: no escalation, no capability, the runtime's seccomp profile, a read-only root
RESTRICTED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True,
              "seccompProfile": {"type": "RuntimeDefault"}}


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
                     "PriorityClass", "ResourceQuota", "DaemonSet", "CustomResourceDefinition", "Role", "RoleBinding",
                     "Deployment"}


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
    # the GPU nodes, less those that chose DRA (the GPU Operator v26.7's nvidia.com/dra-kubelet-plugin label;
    # dra-driver-nvidia-gpu v0.4.1 templates/validation.yaml: the two must never serve one node)
    assert terms == [{"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]},
                                           {"key": "nvidia.com/dra-kubelet-plugin", "operator": "NotIn",
                                            "values": ["true"]}]}]
    ctr = containers(ds)["nvidia-device-plugin-ctr"]
    assert ctr["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
    assert ctr["securityContext"] == RESTRICTED
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


# ---------------------------------------------------------------- security contexts, per component and mode
# The floor is the chart's (deployments/helm/nvidia-device-plugin/templates/_helpers.tpl, v0.20.0): plugin and
# GFD containers "allowPrivilegeEscalation: false, capabilities.drop [ALL]" unless MIG or volume-mounts ask for
# SYS_ADMIN; the MPS control daemon privileged (templates/daemonset-mps-control-daemon.yml); NFD's master and gc
# "allowPrivilegeEscalation: false, drop [ALL], readOnlyRootFilesystem, runAsNonRoot" (its chart's values.yaml
# and templates/nfd-gc.yaml).
CHART_FLOOR = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
SYS_ADMIN = dict(RESTRICTED, capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]})
NON_ROOT = {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534}
PRIVILEGED = {"privileged": True, "readOnlyRootFilesystem": True, "seccompProfile": {"type": "RuntimeDefault"}}
NFD = dict(RESTRICTED, runAsNonRoot=True)

PLUGIN = "nvidia-device-plugin"
GFD = "nvidia-device-plugin-gpu-feature-discovery"
MPS = "nvidia-device-plugin-mps-control-daemon"


def workloads(objects):
    return {o["metadata"]["name"]: o for o in objects if o["kind"] in ("DaemonSet", "Deployment")}


def every_container(workload):
    spec = workload["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec.get("initContainers", []) + spec["containers"]}


# variables -> {workload: {container: securityContext}} for every container the role runs
@pytest.mark.parametrize("variables, expected", [
    ({}, {PLUGIN: {"nvidia-device-plugin-init": RESTRICTED, "nvidia-device-plugin-sidecar": RESTRICTED,
                   "nvidia-device-plugin-ctr": RESTRICTED}}),
    # MIG: the plugin container alone gets SYS_ADMIN back, keeping the drop list and the escalation guard
    ({"k8s_device_plugin_mig_strategy": "mixed"},
     {PLUGIN: {"nvidia-device-plugin-init": RESTRICTED, "nvidia-device-plugin-sidecar": RESTRICTED,
               "nvidia-device-plugin-ctr": SYS_ADMIN}}),
    # volume-mounts in one named configuration is enough
    ({"k8s_device_plugin_configs": {"vm": {"device_list_strategy": "volume-mounts"}}},
     {PLUGIN: {"nvidia-device-plugin-init": RESTRICTED, "nvidia-device-plugin-sidecar": RESTRICTED,
               "nvidia-device-plugin-ctr": SYS_ADMIN}}),
    # GFD: not root, nothing added; its config-managers as the same user (the sidecar signals GFD)
    ({"k8s_device_plugin_gfd_enabled": True},
     {PLUGIN: {"nvidia-device-plugin-init": RESTRICTED, "nvidia-device-plugin-sidecar": RESTRICTED,
               "nvidia-device-plugin-ctr": RESTRICTED},
      GFD: {"gpu-feature-discovery-init": dict(RESTRICTED, **NON_ROOT),
            "gpu-feature-discovery-sidecar": dict(RESTRICTED, **NON_ROOT),
            "gpu-feature-discovery-ctr": dict(RESTRICTED, **NON_ROOT)},
      "nvidia-device-plugin-nfd-master": {"master": NFD}, "nvidia-device-plugin-nfd-gc": {"gc": NFD}}),
    # GFD under MIG: root with SYS_ADMIN (NVIDIA_MIG_MONITOR_DEVICES needs it); volume-mounts does not concern GFD
    ({"k8s_device_plugin_gfd_enabled": True, "k8s_device_plugin_mig_strategy": "single",
      "k8s_device_plugin_nfd_deploy": False},
     {PLUGIN: {"nvidia-device-plugin-init": RESTRICTED, "nvidia-device-plugin-sidecar": RESTRICTED,
               "nvidia-device-plugin-ctr": SYS_ADMIN},
      GFD: {"gpu-feature-discovery-init": RESTRICTED, "gpu-feature-discovery-sidecar": RESTRICTED,
            "gpu-feature-discovery-ctr": SYS_ADMIN}}),
    ({"k8s_device_plugin_gfd_enabled": True, "k8s_device_plugin_device_list_strategy": "volume-mounts",
      "k8s_device_plugin_nfd_deploy": False},
     {PLUGIN: {"nvidia-device-plugin-init": RESTRICTED, "nvidia-device-plugin-sidecar": RESTRICTED,
               "nvidia-device-plugin-ctr": SYS_ADMIN},
      GFD: {"gpu-feature-discovery-init": dict(RESTRICTED, **NON_ROOT),
            "gpu-feature-discovery-sidecar": dict(RESTRICTED, **NON_ROOT),
            "gpu-feature-discovery-ctr": dict(RESTRICTED, **NON_ROOT)}}),
    # vGPU labels: root with SYS_ADMIN to read the PCI config space (the chart makes GFD privileged for it)
    ({"k8s_device_plugin_gfd_enabled": True, "k8s_device_plugin_gfd_vgpu_labels": True,
      "k8s_device_plugin_nfd_deploy": False},
     {PLUGIN: {"nvidia-device-plugin-init": RESTRICTED, "nvidia-device-plugin-sidecar": RESTRICTED,
               "nvidia-device-plugin-ctr": RESTRICTED},
      GFD: {"gpu-feature-discovery-init": RESTRICTED, "gpu-feature-discovery-sidecar": RESTRICTED,
            "gpu-feature-discovery-ctr": SYS_ADMIN}}),
    # another user, or root by choice
    ({"k8s_device_plugin_gfd_enabled": True, "k8s_device_plugin_gfd_run_as_user": 1000,
      "k8s_device_plugin_nfd_deploy": False},
     {PLUGIN: {"nvidia-device-plugin-init": RESTRICTED, "nvidia-device-plugin-sidecar": RESTRICTED,
               "nvidia-device-plugin-ctr": RESTRICTED},
      GFD: {name: dict(RESTRICTED, runAsNonRoot=True, runAsUser=1000, runAsGroup=1000)
            for name in ("gpu-feature-discovery-init", "gpu-feature-discovery-sidecar", "gpu-feature-discovery-ctr")}}),
    ({"k8s_device_plugin_gfd_enabled": True, "k8s_device_plugin_gfd_run_as_user": 0,
      "k8s_device_plugin_nfd_deploy": False},
     {PLUGIN: {"nvidia-device-plugin-init": RESTRICTED, "nvidia-device-plugin-sidecar": RESTRICTED,
               "nvidia-device-plugin-ctr": RESTRICTED},
      GFD: {name: RESTRICTED
            for name in ("gpu-feature-discovery-init", "gpu-feature-discovery-sidecar", "gpu-feature-discovery-ctr")}}),
    # MPS: the control daemon's mount init and daemon privileged (as upstream); its config-managers restricted
    ({"k8s_device_plugin_sharing_strategy": "mps", "k8s_device_plugin_replicas": 2},
     {PLUGIN: {"nvidia-device-plugin-init": RESTRICTED, "nvidia-device-plugin-sidecar": RESTRICTED,
               "nvidia-device-plugin-ctr": RESTRICTED},
      MPS: {"mps-control-daemon-mounts": PRIVILEGED, "mps-control-daemon-init": RESTRICTED,
            "mps-control-daemon-sidecar": RESTRICTED, "mps-control-daemon-ctr": PRIVILEGED}}),
])
def test_each_container_gets_the_least_it_needs(variables, expected):
    found = {name: {ctr: c["securityContext"] for ctr, c in every_container(w).items()}
             for name, w in workloads(role_render.manifests(variables)).items()}
    assert found == expected


@pytest.mark.parametrize("name", sorted(VARIABLE_SETS))
def test_no_container_is_below_the_chart_floor(name):
    """Whatever the variables: seccomp everywhere, and only the MPS daemon privileged or without the floor."""
    for workload in workloads(role_render.manifests(VARIABLE_SETS[name])).values():
        for ctr_name, ctr in every_container(workload).items():
            ctx = ctr["securityContext"]
            assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}, (name, ctr_name)
            assert ctx["readOnlyRootFilesystem"] is (name != "writable-root"), (name, ctr_name)
            if ctx.get("privileged"):
                assert workload["metadata"]["name"] == MPS and ctr_name in (
                    "mps-control-daemon-mounts", "mps-control-daemon-ctr"), (name, ctr_name)
                continue
            assert ctx["allowPrivilegeEscalation"] is CHART_FLOOR["allowPrivilegeEscalation"], (name, ctr_name)
            assert ctx["capabilities"]["drop"] == CHART_FLOOR["capabilities"]["drop"], (name, ctr_name)
            assert ctx["capabilities"].get("add", []) in ([], ["SYS_ADMIN"]), (name, ctr_name)
            if ctx["capabilities"].get("add"):
                assert ctr_name in ("nvidia-device-plugin-ctr", "gpu-feature-discovery-ctr"), (name, ctr_name)
                assert ctx.get("runAsNonRoot") is not True  # a capability only root can use


def host_mounts(workload):
    """{host path: read only} of every hostPath volume the workload's containers mount."""
    spec = workload["spec"]["template"]["spec"]
    paths = {v["name"]: v["hostPath"]["path"] for v in spec.get("volumes", []) if "hostPath" in v}
    out = {}
    for ctr in every_container(workload).values():
        for mount in ctr.get("volumeMounts", []):
            if mount["name"] in paths:
                out[paths[mount["name"]]] = out.get(paths[mount["name"]], True) and mount.get("readOnly", False)
    return out


@pytest.mark.parametrize("variables, expected", [
    ({}, {PLUGIN: {"/var/lib/kubelet/device-plugins": False}}),
    # the CDI specification directory only for the cdi-* strategies, the MPS directories only with MPS
    ({"k8s_device_plugin_configs": {"c": {"device_list_strategy": "cdi-annotations"}}},
     {PLUGIN: {"/var/lib/kubelet/device-plugins": False, "/var/run/cdi": False}}),
    ({"k8s_device_plugin_sharing_strategy": "mps", "k8s_device_plugin_replicas": 2},
     {PLUGIN: {"/var/lib/kubelet/device-plugins": False, "/run/nvidia/mps": False, "/run/nvidia/mps/shm": False},
      MPS: {"/run/nvidia/mps": False, "/run/nvidia/mps/shm": False}}),
    # GFD reads the host's /sys and writes nothing on the host (it publishes through the API)
    ({"k8s_device_plugin_gfd_enabled": True},
     {PLUGIN: {"/var/lib/kubelet/device-plugins": False}, GFD: {"/sys": True},
      "nvidia-device-plugin-nfd-master": {}, "nvidia-device-plugin-nfd-gc": {}}),
])
def test_host_paths_are_mounted_only_where_needed_and_read_only_where_possible(variables, expected):
    found = {name: host_mounts(w) for name, w in workloads(role_render.manifests(variables)).items()}
    assert found == expected


# ---------------------------------------------------------------- images pinned by tag, digest or both
DIGEST_A = "sha256:" + "a" * 64


def problems(variables):
    return role_render.render("k8s_device_plugin", "{{ _k8s_device_plugin_problems }}", variables)


@pytest.mark.parametrize("tag, digest, image", [
    ("v0.20.0", "", "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"),
    ("", DIGEST_A, "nvcr.io/nvidia/k8s-device-plugin@" + DIGEST_A),
    ("v0.20.0", DIGEST_A, "nvcr.io/nvidia/k8s-device-plugin:v0.20.0@" + DIGEST_A),
])
def test_every_container_runs_the_pinned_image(tag, digest, image):
    variables = {"k8s_device_plugin_image_tag": tag, "k8s_device_plugin_image_digest": digest,
                 "k8s_device_plugin_gfd_enabled": True, "k8s_device_plugin_sharing_strategy": "mps",
                 "k8s_device_plugin_replicas": 2, "k8s_device_plugin_nfd_image_digest": DIGEST_A}
    assert problems(variables) == []
    for workload in workloads(role_render.manifests(variables)).values():
        wanted = image
        if workload["kind"] == "Deployment":
            wanted = "registry.k8s.io/nfd/node-feature-discovery:v0.19.0@" + DIGEST_A
        for ctr in every_container(workload).values():
            assert ctr["image"] == wanted


@pytest.mark.parametrize("variables, message", [
    ({"k8s_device_plugin_image_digest": "sha256:abc"},
     "k8s_device_plugin_image_digest 'sha256:abc' is not a digest: sha256: followed by 64 lowercase hex digits"),
    ({"k8s_device_plugin_image_tag": "v0.20.0@" + DIGEST_A},
     "k8s_device_plugin_image_tag 'v0.20.0@%s' carries a digest: give it in k8s_device_plugin_image_digest" % DIGEST_A),
    ({"k8s_device_plugin_image_tag": ""},
     "k8s_device_plugin_image_tag and k8s_device_plugin_image_digest are both empty: pin the image by a tag, a digest "
     "or both"),
    ({"k8s_device_plugin_image_repository": "nvidia/k8s-device-plugin:v0.20.0"},
     "k8s_device_plugin_image_repository 'nvidia/k8s-device-plugin:v0.20.0' carries a tag or digest"),
    ({"k8s_device_plugin_image_registry": "https://nvcr.io"}, "k8s_device_plugin_image_registry 'https://nvcr.io'"),
    # NFD's image is checked only when NFD is deployed
    ({"k8s_device_plugin_gfd_enabled": True, "k8s_device_plugin_nfd_image_tag": "v0.19.0 "
      "rc1"}, "k8s_device_plugin_nfd_image_tag 'v0.19.0 rc1' is not a tag"),
])
def test_an_image_that_is_not_a_pinned_reference_is_refused_by_name(variables, message):
    found = problems(variables)
    assert len(found) == 1 and found[0].startswith(message), found


def test_the_nfd_image_is_not_checked_when_nfd_is_not_deployed():
    assert problems({"k8s_device_plugin_nfd_image_tag": "", "k8s_device_plugin_gfd_enabled": False}) == []
    assert problems({"k8s_device_plugin_nfd_image_tag": "", "k8s_device_plugin_gfd_enabled": True,
                     "k8s_device_plugin_nfd_deploy": False}) == []


# ---------------------------------------------------------------- MPS
def test_mps_control_daemon_follows_the_chart():
    """templates/daemonset-mps-control-daemon.yml of the chart v0.20.0, with the role's scheduling."""
    objects = role_render.manifests(VARIABLE_SETS["mps-gfd"])
    mps = by_kind(objects, "DaemonSet", MPS)
    plugin = by_kind(objects, "DaemonSet", PLUGIN)
    spec = mps["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/mps.capable": "true"}
    assert spec["hostPID"] is True and "shareProcessNamespace" not in spec
    for key in ("tolerations", "affinity", "priorityClassName", "runtimeClassName", "serviceAccountName"):
        assert spec[key] == plugin["spec"]["template"]["spec"][key], key
    assert mps["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "mps-control-daemon",
                                                      "app.kubernetes.io/instance": "nvidia-device-plugin"}
    assert mps["spec"]["selector"]["matchLabels"].items() <= mps["spec"]["template"]["metadata"]["labels"].items()
    inits = containers(mps, init=True)
    assert list(inits) == ["mps-control-daemon-mounts", "mps-control-daemon-init"]
    assert inits["mps-control-daemon-mounts"]["command"] == ["mps-control-daemon", "mount-shm"]
    assert inits["mps-control-daemon-mounts"]["volumeMounts"] == [
        {"name": "mps-root", "mountPath": "/mps", "mountPropagation": "Bidirectional"}]
    assert env(inits["mps-control-daemon-init"])["ONESHOT"] == "true"
    ctrs = containers(mps)
    assert env(ctrs["mps-control-daemon-sidecar"])["PROCESS_TO_SIGNAL"] == "/usr/bin/mps-control-daemon"
    daemon = ctrs["mps-control-daemon-ctr"]
    assert daemon["command"] == ["mps-control-daemon"]
    assert env(daemon) == {"NODE_NAME": None, "CONFIG_FILE": "/config/config.yaml", "NVIDIA_MIG_MONITOR_DEVICES": "all",
                           "NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
    assert {m["name"]: m["mountPath"] for m in daemon["volumeMounts"]} == {
        "mps-shm": "/dev/shm", "mps-root": "/mps", "available-configs": "/available-configs", "config": "/config"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["mps-root"]["hostPath"] == {"path": "/var/run/mps", "type": "DirectoryOrCreate"}
    assert volumes["mps-shm"]["hostPath"] == {"path": "/var/run/mps/shm"}
    assert volumes["available-configs"]["configMap"]["name"] == by_kind(objects, "ConfigMap")["metadata"]["name"]
    # the plugin gets MPS_ROOT (the host path it hands to workloads) and the same mounts
    plugin_ctr = containers(plugin)["nvidia-device-plugin-ctr"]
    assert env(plugin_ctr)["MPS_ROOT"] == "/var/run/mps"
    assert {m["name"]: m["mountPath"] for m in plugin_ctr["volumeMounts"]}.items() >= {
        "mps-shm": "/dev/shm", "mps-root": "/mps"}.items()
    plugin_volumes = {v["name"]: v for v in plugin["spec"]["template"]["spec"]["volumes"]}
    assert plugin_volumes["mps-root"] == volumes["mps-root"] and plugin_volumes["mps-shm"] == volumes["mps-shm"]


@pytest.mark.parametrize("variables, deployed", [
    ({}, False),
    (VARIABLE_SETS["time-slicing"], False),
    (VARIABLE_SETS["mps"], True),
    # one named configuration with MPS is enough (nodes pick it by label)
    ({"k8s_device_plugin_configs": {"t4-mps": {"sharing_strategy": "mps", "replicas": 4}}}, True),
])
def test_mps_control_daemon_only_when_a_configuration_uses_mps(variables, deployed):
    objects = role_render.manifests(variables)
    assert (MPS in workloads(objects)) is deployed
    ctr = containers(by_kind(objects, "DaemonSet", PLUGIN))["nvidia-device-plugin-ctr"]
    assert ("MPS_ROOT" in env(ctr)) is deployed
    assert ("mps-root" in [m["name"] for m in ctr["volumeMounts"]]) is deployed


@pytest.mark.parametrize("variables, refused", [
    # cmd/nvidia-device-plugin/main.go validateFlags: "using --mig-strategy=mixed is not supported with MPS"
    ({"k8s_device_plugin_sharing_strategy": "mps", "k8s_device_plugin_replicas": 2,
      "k8s_device_plugin_mig_strategy": "mixed"}, "default"),
    ({"k8s_device_plugin_configs": {"b": {"sharing_strategy": "mps", "replicas": 2, "mig_strategy": "mixed"},
                                    "a": {"sharing_strategy": "mps", "replicas": 2, "mig_strategy": "mixed"},
                                    "ok": {"sharing_strategy": "mps", "replicas": 2}}}, "a"),
    # a default with mixed and a named MPS configuration that sets none: the named one is fine
    ({"k8s_device_plugin_mig_strategy": "mixed",
      "k8s_device_plugin_configs": {"mps": {"sharing_strategy": "mps", "replicas": 2, "mig_strategy": "none"}}}, None),
    # single is refused only per GPU (MIG devices), which the node model checks
    ({"k8s_device_plugin_sharing_strategy": "mps", "k8s_device_plugin_replicas": 2,
      "k8s_device_plugin_mig_strategy": "single"}, None),
    ({"k8s_device_plugin_sharing_strategy": "time-slicing", "k8s_device_plugin_replicas": 2,
      "k8s_device_plugin_mig_strategy": "mixed"}, None),
])
def test_mps_with_mig_strategy_mixed_is_refused_in_one_message(variables, refused):
    # the settings check (tasks/settings.yml) names the first such configuration, before anything is applied
    error = role_render.render("k8s_device_plugin", "{{ _k8s_device_plugin_settings_error }}", variables)
    if refused is None:
        assert error == ""
        assert problems(variables) == []
        return
    assert error == ("device plugin config %s: MPS sharing does not work with mig_strategy mixed (the device plugin "
                     "refuses it): use mig_strategy single or none, or time-slicing" % refused)


@pytest.mark.parametrize("variables, message", [
    ({"k8s_device_plugin_mps_root": "run/nvidia/mps"}, 'k8s_device_plugin_mps_root "run/nvidia/mps" is not an absolute path'),
    ({"k8s_device_plugin_mps_root": "/"}, 'k8s_device_plugin_mps_root "/" is not an absolute path'),
    ({"k8s_device_plugin_mps_root": "/run/my mps"}, 'k8s_device_plugin_mps_root "/run/my mps" is not an absolute path'),
    ({"k8s_device_plugin_mps_root": "/var/run/mps"}, None),
    ({"k8s_device_plugin_gfd_enabled": True, "k8s_device_plugin_gfd_run_as_user": -1},
     "k8s_device_plugin_gfd_run_as_user -1 is not a user ID (0 for root, or above)"),
    ({"k8s_device_plugin_gfd_enabled": True, "k8s_device_plugin_gfd_run_as_user": 0}, None),
])
def test_mps_root_and_gfd_user_are_checked(variables, message):
    found = problems(dict({"k8s_device_plugin_sharing_strategy": "mps", "k8s_device_plugin_replicas": 2}, **variables))
    assert found == ([message] if message else [])
    # the MPS root matters only with MPS
    if "k8s_device_plugin_mps_root" in variables:
        assert problems(variables) == []


def test_problems_of_both_kinds_are_reported_together():
    found = problems({"k8s_device_plugin_image_digest": "sha256:1", "k8s_device_plugin_sharing_strategy": "mps",
                      "k8s_device_plugin_replicas": 2, "k8s_device_plugin_mps_root": "mps"})
    assert [p.split(" ")[0] for p in found] == ["k8s_device_plugin_image_digest", "k8s_device_plugin_mps_root"]


# The plugin's health checks, as k8s-device-plugin v0.20 internal/rm/health.go reads its environment.
@pytest.mark.parametrize("name, expected", [
    ("defaults", {}),
    ("health-xids", {"DP_DISABLE_HEALTHCHECKS": "48,94", "DP_ENABLE_HEALTHCHECKS": "109"}),
    ("health-off", {"DP_DISABLE_HEALTHCHECKS": "all"}),
])
def test_the_health_check_variables_reach_the_plugin_container_only(name, expected):
    objects = role_render.manifests(VARIABLE_SETS[name])
    plugin = containers(by_kind(objects, "DaemonSet", "nvidia-device-plugin"))
    found = dict((key, value) for key, value in env(plugin["nvidia-device-plugin-ctr"]).items()
                 if key.startswith("DP_"))
    assert found == expected
    # the config-manager sidecar has no health check to configure
    assert not [key for key in env(plugin["nvidia-device-plugin-sidecar"]) if key.startswith("DP_")]


@pytest.mark.parametrize("variables, message", [
    ({"k8s_device_plugin_health_ignored_xids": [0]},
     "k8s_device_plugin_health_ignored_xids: 0 is not an Xid (a whole number from 1; 0 would stand for every Xid in "
     "the device plugin)"),
    ({"k8s_device_plugin_health_ignored_xids": [79], "k8s_device_plugin_health_forced_xids": ["79"]},
     "Xid 79 both ignored and forced: remove it from k8s_device_plugin_health_ignored_xids or from "
     "k8s_device_plugin_health_forced_xids"),
    ({"k8s_device_plugin_health_checks": False, "k8s_device_plugin_health_forced_xids": [109]},
     "k8s_device_plugin_health_checks is false, so the device plugin watches no Xid: "
     "k8s_device_plugin_health_ignored_xids and k8s_device_plugin_health_forced_xids must be empty (to watch only "
     "some Xids, keep the checks on and ignore the others)"),
])
def test_health_check_variables_are_checked_before_anything_is_applied(variables, message):
    assert problems(variables) == [message]


# ---------------------------------------------------------------- GPU Feature Discovery and Node Feature Discovery
def test_gfd_daemonset_shares_config_and_scheduling():
    objects = role_render.manifests(VARIABLE_SETS["gfd"])
    gfd = by_kind(objects, "DaemonSet", GFD)
    plugin = by_kind(objects, "DaemonSet", PLUGIN)
    assert containers(gfd)["gpu-feature-discovery-ctr"]["command"] == ["gpu-feature-discovery"]
    assert gfd["spec"]["selector"] != plugin["spec"]["selector"]
    for key in ("tolerations", "priorityClassName", "runtimeClassName"):
        assert gfd["spec"]["template"]["spec"][key] == plugin["spec"]["template"]["spec"][key]
    # GFD also runs on the nodes that chose DRA (they keep GFD's labels); the device plugin does not
    gfd_terms = gfd["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    plugin_terms = plugin["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    gfd_terms = gfd_terms["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"]
    plugin_terms = plugin_terms["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert plugin_terms["matchExpressions"] == gfd_terms + [
        {"key": "nvidia.com/dra-kubelet-plugin", "operator": "NotIn", "values": ["true"]}]
    assert GFD not in [o["metadata"]["name"] for o in role_render.manifests()]


def test_gfd_publishes_node_feature_objects_under_its_own_service_account():
    """internal/lm/output.go: NODE_NAME and NAMESPACE required, POD_NAME for the ownerReferences."""
    objects = role_render.manifests(VARIABLE_SETS["gfd"])
    gfd = by_kind(objects, "DaemonSet", GFD)
    ctr = containers(gfd)["gpu-feature-discovery-ctr"]
    fields = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in ctr["env"] if "valueFrom" in e}
    assert fields == {"NODE_NAME": "spec.nodeName", "NAMESPACE": "metadata.namespace", "POD_NAME": "metadata.name"}
    assert env(ctr)["GFD_USE_NODE_FEATURE_API"] == "true"
    assert "NVIDIA_MIG_MONITOR_DEVICES" not in env(ctr)
    assert env(containers(by_kind(role_render.manifests(VARIABLE_SETS["gfd-mig"]), "DaemonSet", GFD))[
        "gpu-feature-discovery-ctr"])["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
    account = gfd["spec"]["template"]["spec"]["serviceAccountName"]
    assert account == "nvidia-device-plugin-gpu-feature-discovery"
    assert account != by_kind(objects, "DaemonSet", PLUGIN)["spec"]["template"]["spec"]["serviceAccountName"]
    assert by_kind(objects, "ServiceAccount", account)["metadata"]["namespace"] == "nvidia-device-plugin"


def subjects_of(objects, kind, role_name):
    return [s for o in objects if o["kind"] == kind and o["roleRef"]["name"] == role_name for s in o["subjects"]]


def test_gfd_rbac_is_namespaced_and_its_own():
    """templates/role.yml grants these verbs cluster-wide to the plugin's account; here GFD's, in its namespace."""
    objects = role_render.manifests(VARIABLE_SETS["gfd"])
    role = by_kind(objects, "Role", "nvidia-device-plugin-gpu-feature-discovery")
    assert role["metadata"]["namespace"] == "nvidia-device-plugin"
    assert role["rules"] == [
        {"apiGroups": ["nfd.k8s-sigs.io"], "resources": ["nodefeatures"],
         "verbs": ["get", "list", "watch", "create", "update"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    gfd_account = {"kind": "ServiceAccount", "name": "nvidia-device-plugin-gpu-feature-discovery",
                   "namespace": "nvidia-device-plugin"}
    assert subjects_of(objects, "RoleBinding", role["metadata"]["name"]) == [gfd_account]
    # its config-managers read the node's labels through the plugin's nodes ClusterRole
    assert gfd_account in subjects_of(objects, "ClusterRoleBinding", "nvidia-device-plugin-role")
    # the plugin's ClusterRole stays nodes get/list/watch: no NodeFeature rights for the plugin
    assert by_kind(objects, "ClusterRole", "nvidia-device-plugin-role")["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]
    for obj in objects:
        if obj["kind"] in ("ClusterRole", "Role"):
            for rule in obj["rules"]:
                assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], obj["metadata"]["name"]


def test_nfd_master_and_gc_follow_the_nfd_chart():
    objects = role_render.manifests(VARIABLE_SETS["gfd"])
    crds = {o["metadata"]["name"]: o for o in objects if o["kind"] == "CustomResourceDefinition"}
    assert sorted(crds) == ["nodefeaturerules.nfd.k8s-sigs.io", "nodefeatures.nfd.k8s-sigs.io"]
    nodefeature = crds["nodefeatures.nfd.k8s-sigs.io"]["spec"]
    assert (nodefeature["group"], nodefeature["scope"], nodefeature["names"]["kind"]) == (
        "nfd.k8s-sigs.io", "Namespaced", "NodeFeature")
    assert [(v["name"], v["served"], v["storage"]) for v in nodefeature["versions"]] == [("v1alpha1", True, True)]
    assert crds["nodefeaturerules.nfd.k8s-sigs.io"]["spec"]["scope"] == "Cluster"
    for crd in crds.values():
        assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kubegpu.nvidia"
    master = by_kind(objects, "Deployment", "nvidia-device-plugin-nfd-master")
    spec = master["spec"]["template"]["spec"]
    ctr = spec["containers"][0]
    assert ctr["image"] == "registry.k8s.io/nfd/node-feature-discovery:v0.19.0"
    assert ctr["command"] == ["nfd-master"] and ctr["args"] == ["-port=8080"]
    assert spec["serviceAccountName"] == "nvidia-device-plugin-nfd-master"
    assert yaml.safe_load(by_kind(objects, "ConfigMap", "nvidia-device-plugin-nfd-master-conf")["data"][
        "nfd-master.conf"]) == {"extraLabelNs": ["nvidia.com"]}
    assert master["spec"]["selector"]["matchLabels"].items() <= master["spec"]["template"]["metadata"]["labels"].items()
    rules = by_kind(objects, "ClusterRole", "nvidia-device-plugin-nfd-master")["rules"]
    # templates/clusterrole.yaml of NFD's chart v0.19.0: it labels nodes from NodeFeature objects it only reads
    assert {"apiGroups": [""], "resources": ["nodes", "nodes/status"], "verbs": ["get", "patch", "update", "list"]} in rules
    assert {"apiGroups": ["nfd.k8s-sigs.io"], "resources": ["nodefeatures", "nodefeaturerules", "nodefeaturegroups"],
            "verbs": ["get", "list", "watch"]} in rules
    assert subjects_of(objects, "ClusterRoleBinding", "nvidia-device-plugin-nfd-master") == [
        {"kind": "ServiceAccount", "name": "nvidia-device-plugin-nfd-master", "namespace": "nvidia-device-plugin"}]
    gc = by_kind(objects, "Deployment", "nvidia-device-plugin-nfd-gc")
    assert gc["spec"]["template"]["spec"]["containers"][0]["command"] == ["nfd-gc"]
    assert by_kind(objects, "ClusterRole", "nvidia-device-plugin-nfd-gc")["rules"][-1] == {
        "apiGroups": ["nfd.k8s-sigs.io"], "resources": ["nodefeatures"], "verbs": ["delete", "list"]}
    # no nfd-worker: GFD is the feature source
    assert not [o for o in objects if "worker" in o["metadata"]["name"]]


@pytest.mark.parametrize("name, expected", [
    ("gfd", {"nodefeatures.nfd.k8s-sigs.io", "nodefeaturerules.nfd.k8s-sigs.io", "nvidia-device-plugin-nfd-master",
             "nvidia-device-plugin-nfd-gc"}),
    ("gfd-vgpu-no-gc", {"nodefeatures.nfd.k8s-sigs.io", "nodefeaturerules.nfd.k8s-sigs.io",
                        "nvidia-device-plugin-nfd-master"}),
    ("gfd-external-nfd", set()),
    ("defaults", set()),
])
def test_nfd_objects_come_with_gfd_unless_nfd_is_installed_otherwise(name, expected):
    objects = role_render.manifests(VARIABLE_SETS[name])
    found = {o["metadata"]["name"] for o in objects if o["kind"] in ("CustomResourceDefinition", "Deployment")}
    assert found == expected
    assert (GFD in workloads(objects)) is (name != "defaults")


def test_nfd_pods_use_the_pull_secrets():
    for workload in workloads(role_render.manifests(VARIABLE_SETS["gfd-vgpu-no-gc"])).values():
        assert workload["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]


def crd_schema(name):
    crd = by_kind(role_render.manifests(VARIABLE_SETS["gfd"]), "CustomResourceDefinition", name)
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_the_nodefeature_crd_accepts_what_gfd_writes():
    """The object of internal/lm/output.go (Features: NewFeatures(), i.e. empty sets; Labels: every label)."""
    import jsonschema
    obj = {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature",
           "metadata": {"name": "nvidia-features-for-gpu01", "labels": {"nfd.node.kubernetes.io/node-name": "gpu01"}},
           "spec": {"features": {"flags": {}, "attributes": {}, "instances": {}},
                    "labels": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "8"}}}
    jsonschema.validate(obj, crd_schema("nodefeatures.nfd.k8s-sigs.io"))
    for bad in ({"spec": {"labels": {"nvidia.com/gpu.count": 8}}}, {"metadata": {}},
                {"spec": {"features": {"flags": {"x": {}}}}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(dict(obj, **bad) if "spec" in bad else {"metadata": {}}, crd_schema(
                "nodefeatures.nfd.k8s-sigs.io"))


def test_the_nodefeaturerule_crd_accepts_nfd_sample_rules():
    """Rules shaped as NFD's deployment/base/nfd-crds/cr-sample.yaml (v0.19.0)."""
    import jsonschema
    rule = {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeatureRule", "metadata": {"name": "my-rule"},
            "spec": {"rules": [{"name": "my feature rule", "labels": {"my-complex-feature": "my-value"},
                                "matchFeatures": [{"feature": "cpu.cpuid",
                                                   "matchExpressions": {"AVX512F": {"op": "Exists"}}}]},
                               {"name": "my dummy rule with no labels", "vars": {"my.dummy.var": "1"}}]}}
    jsonschema.validate(rule, crd_schema("nodefeaturerules.nfd.k8s-sigs.io"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(dict(rule, spec={"rules": [{"labels": {}}]}), crd_schema("nodefeaturerules.nfd.k8s-sigs.io"))


def crd_info(labels=None):
    if labels is False:
        return {"resources": []}
    return {"resources": [{"kind": "CustomResourceDefinition",
                           "metadata": {"name": "nodefeatures.nfd.k8s-sigs.io", "labels": labels}}]}


@pytest.mark.parametrize("deploy, info, message", [
    (True, crd_info(False), ""),                                                  # fresh cluster
    (True, crd_info({"app.kubernetes.io/managed-by": "kubegpu.nvidia"}), ""),      # ours, from an earlier run
    (True, crd_info({"app.kubernetes.io/managed-by": "Helm"}),
     "Node Feature Discovery is already installed (CustomResourceDefinition nodefeatures.nfd.k8s-sigs.io managed by "
     "Helm): set k8s_device_plugin_nfd_deploy: false to have GPU Feature Discovery publish to it"),
    (True, crd_info(None), "Node Feature Discovery is already installed (CustomResourceDefinition "
                           "nodefeatures.nfd.k8s-sigs.io not managed by kubegpu.nvidia)"),
    (False, crd_info({"app.kubernetes.io/managed-by": "Helm"}), ""),
    (False, crd_info(False),
     "k8s_device_plugin_gfd_enabled needs Node Feature Discovery: GPU Feature Discovery publishes its labels as "
     "NodeFeature objects that only nfd-master turns into node labels, and the CustomResourceDefinition "
     "nodefeatures.nfd.k8s-sigs.io does not exist; set k8s_device_plugin_nfd_deploy: true or install Node Feature "
     "Discovery v0.14 or newer first"),
])
def test_gfd_needs_a_node_feature_discovery_it_can_publish_to(deploy, info, message):
    variables = {"k8s_device_plugin_gfd_enabled": True, "k8s_device_plugin_nfd_deploy": deploy,
                 "_k8s_device_plugin_nfd_crd_info": info}
    found = role_render.render("k8s_device_plugin", "{{ _k8s_device_plugin_nfd_problem }}", variables)
    assert found.startswith(message) and (found == "") is (message == "")
    assert role_render.render("k8s_device_plugin", "{{ _k8s_device_plugin_nfd_problem }}",
                              dict(variables, k8s_device_plugin_gfd_enabled=False)) == ""


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
