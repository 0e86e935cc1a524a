"""Manifests of kubegpu.nvidia.dcgm_exporter, rendered as the role renders them.

Every object is validated, strictly, against the Kubernetes OpenAPI schemas kubernetes-validate ships (the
ServiceMonitor, a custom resource, against its own shape). What the DaemonSet must do follows the dcgm-exporter
chart (NVIDIA/dcgm-exporter deployment/templates/daemonset.yaml, service.yaml, service-monitor.yaml) with its
traps corrected (docs/dcgm_exporter.md), and the pause of the GPU daemons (module_utils/k8s_eviction.py).
"""
import json

import pytest

import kubernetes_validate

import role_render
from kubeapi import kubelet

from ansible_collections.kubegpu.nvidia.plugins.module_utils import dcgm_exporter as dcgm
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_eviction import PAUSE_TAINT, uses_gpu

K8S_VERSIONS = ["1.29", "1.30", "1.31", "1.32", "1.33", "1.34", "1.35"]
ROLE = "dcgm_exporter"

VARIABLE_SETS = {
    "defaults": {},
    "profiling": {"dcgm_exporter_profiling": True},
    "air-gapped": {"k8s_device_plugin_image_registry": "registry.example.internal:5000",
                   "k8s_device_plugin_image_pull_secrets": ["regcred"]},
    "digest": {"dcgm_exporter_image_tag": "", "dcgm_exporter_image_digest": "sha256:" + "a" * 64},
    "default-runtime": {"dcgm_exporter_runtime_class_name": ""},
    "extra": {"dcgm_exporter_extra_counters": [{"field": "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
                                                "type": "counter", "help": "NVLink CRC flit errors."}],
              "dcgm_exporter_extra_tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu",
                                                   "effect": "NoSchedule"}],
              "k8s_gpu_node_taints": [{"key": "gpu-pool", "value": "a100", "effect": "NoExecute"}]},
}


def manifests(variables=None):
    return role_render.render(ROLE, "{{ _dcgm_exporter_manifests }}", variables)


def render(expression, variables=None):
    return role_render.render(ROLE, expression, variables)


def by_kind(objects, kind):
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, kind
    return found[0]


def pod_spec(objects):
    return by_kind(objects, "DaemonSet")["spec"]["template"]["spec"]


def exporter(objects):
    return pod_spec(objects)["containers"][0]


def env(container):
    return dict((e["name"], e.get("value")) for e in container["env"])


@pytest.fixture(scope="module", name="distinct_objects")
def fixture_distinct_objects():
    seen = {}
    for name in sorted(VARIABLE_SETS):
        for obj in manifests(VARIABLE_SETS[name]):
            seen.setdefault(json.dumps(obj, sort_keys=True), []).append(name)
    return seen


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_dcgm_exporter_manifests_match_the_kubernetes_schema(distinct_objects, version):
    kinds = set()
    for text, sets in distinct_objects.items():
        obj = json.loads(text)
        kinds.add(obj["kind"])
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail("%s %s (variables %s) invalid for Kubernetes %s: %s"
                        % (obj["kind"], obj["metadata"]["name"], ", ".join(sets), version, err))
    assert kinds == {"Namespace", "ServiceAccount", "ConfigMap", "DaemonSet", "Service"}


def test_the_daemonset_follows_the_chart():
    objects = manifests()
    assert [o["kind"] for o in objects] == ["Namespace", "ServiceAccount", "ConfigMap", "DaemonSet", "Service"]
    spec = pod_spec(objects)
    ctr = exporter(objects)
    assert ctr["image"] == "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless"
    assert env(ctr)["DCGM_EXPORTER_KUBERNETES"] == "true"
    assert env(ctr)["DCGM_EXPORTER_LISTEN"] == ":9400"
    node_name = [e for e in ctr["env"] if e["name"] == "NODE_NAME"][0]
    assert node_name["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert ctr["ports"] == [{"name": "metrics", "containerPort": 9400}]
    for probe in ("livenessProbe", "readinessProbe"):
        assert ctr[probe]["httpGet"] == {"path": "/health", "port": 9400}
    # pod attribution: the kubelet's pod-resources directory, read-only
    mounts = dict((m["name"], m) for m in ctr["volumeMounts"])
    assert mounts["pod-gpu-resources"] == {"name": "pod-gpu-resources", "mountPath": "/var/lib/kubelet/pod-resources",
                                           "readOnly": True}
    volumes = dict((v["name"], v) for v in spec["volumes"])
    assert volumes["pod-gpu-resources"]["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    # the counters file, from the ConfigMap, passed with -f
    assert ctr["args"][:2] == ["-f", "/etc/dcgm-exporter/counters.csv"]
    assert mounts["counters"]["mountPath"] == "/etc/dcgm-exporter/counters.csv"
    assert volumes["counters"]["configMap"]["name"] == by_kind(objects, "ConfigMap")["metadata"]["name"]
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["runtimeClassName"] == "nvidia"
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}]


def test_no_capability_unless_profiling_metrics_are_asked_for():
    plain = exporter(manifests())["securityContext"]
    assert plain["capabilities"] == {"drop": ["ALL"], "add": []}
    assert plain["allowPrivilegeEscalation"] is False
    assert plain["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "privileged" not in plain
    profiling = manifests(VARIABLE_SETS["profiling"])
    assert exporter(profiling)["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in by_kind(profiling, "ConfigMap")["data"]["counters.csv"]
    assert "DCGM_FI_PROF_" not in by_kind(manifests(), "ConfigMap")["data"]["counters.csv"]


def fields(csv):
    return [line.split(",")[0] for line in csv.splitlines() if line and not line.startswith("#")]


def test_the_counters_add_the_health_fields_the_chart_leaves_commented_out():
    csv = by_kind(manifests(), "ConfigMap")["data"]["counters.csv"]
    names = fields(csv)
    # NVIDIA/dcgm-exporter etc/default-counters.csv: these are commented out there
    for field in ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
                  "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_RETIRED_DBE",
                  "DCGM_FI_DEV_RETIRED_PENDING"):
        assert field in names
    # and these are there already: the Xid and the row remapper
    for field in ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
                  "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"):
        assert field in names
    assert len(names) == len(set(names))
    for line in csv.splitlines()[1:]:
        assert line.split(", ")[1] in ("gauge", "counter"), line


def test_extra_counters_follow_once():
    csv = by_kind(manifests(VARIABLE_SETS["extra"]), "ConfigMap")["data"]["counters.csv"]
    assert fields(csv)[-1] == "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
    doubled = dcgm.counters_csv(False, [{"field": "DCGM_FI_DEV_GPU_UTIL", "type": "counter"}])
    assert fields(doubled).count("DCGM_FI_DEV_GPU_UTIL") == 1


def test_the_memory_limit_holds_an_8_gpu_node():
    ctr = exporter(manifests())
    # dcgm-exporter#609: 400-500 MiB in use on any node; 512Mi OOMKills on 8-GPU nodes
    assert ctr["resources"]["limits"] == {"memory": "1Gi"}
    assert "cpu" not in ctr["resources"]["limits"]
    assert env(ctr)["GOMEMLIMIT"] == "768MiB"


@pytest.mark.parametrize("name, taints", [
    ("defaults", [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]),
    ("extra", [{"key": "gpu-pool", "value": "a100", "effect": "NoExecute"},
               {"key": "sku", "value": "gpu", "effect": "NoSchedule"}]),
])
def test_the_exporter_runs_on_gpu_nodes_tainted_for_gpus_and_for_health(name, taints):
    spec = pod_spec(manifests(VARIABLE_SETS[name]))
    health = [{"key": "nvidia.com/gpu.health", "value": value, "effect": effect}
              for value, effect in (("unhealthy", "NoSchedule"), ("unhealthy", "NoExecute"), ("degraded", "NoSchedule"))]
    for taint in taints + health:
        node = {"metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.present": "true"}},
                "spec": {"taints": [taint]}}
        assert kubelet.daemonset_nodes({"spec": {"template": {"spec": spec}}}, [node]) == [node], taint


def test_the_health_taint_key_is_the_gate_s():
    spec = pod_spec(manifests({"gpu_health_taint_key": "example.com/gpu-health"}))
    assert {"key": "example.com/gpu-health", "operator": "Exists"} in spec["tolerations"]


def test_the_exporter_is_paused_with_the_other_gpu_daemons():
    """k8s_gpu_evict stops the driver's clients (uses_gpu) and taints the node with PAUSE_TAINT, which their
    DaemonSets do not tolerate: the exporter must be one of them, and must not come back while the taint is on."""
    for name in sorted(VARIABLE_SETS):
        spec = pod_spec(manifests(VARIABLE_SETS[name]))
        assert uses_gpu({"spec": spec}), name
        ds = {"spec": {"template": {"spec": spec}}}
        paused = {"metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.present": "true"}},
                  "spec": {"taints": [dict(PAUSE_TAINT)]}}
        assert kubelet.daemonset_nodes(ds, [paused]) == [], name
        assert kubelet.untolerated_taint(spec["tolerations"], paused) == PAUSE_TAINT


@pytest.mark.parametrize("variables, message", [
    ({"dcgm_exporter_extra_tolerations": [{"operator": "Exists"}]},
     'dcgm_exporter_extra_tolerations {"operator": "Exists"} tolerates the taint '
     "kubegpu.nvidia/driver-upgrade=paused:NoSchedule that pauses the GPU daemons during driver upgrades and MIG "
     "changes: the exporter would keep the driver open; name the taints to tolerate by key"),
    ({"dcgm_exporter_extra_tolerations": [{"key": "kubegpu.nvidia/driver-upgrade", "operator": "Exists"}]},
     'dcgm_exporter_extra_tolerations {"key": "kubegpu.nvidia/driver-upgrade", "operator": "Exists"} tolerates the '
     "taint kubegpu.nvidia/driver-upgrade=paused:NoSchedule that pauses the GPU daemons during driver upgrades and "
     "MIG changes: the exporter would keep the driver open; name the taints to tolerate by key"),
    ({"dcgm_exporter_health_taint_key": "gpu health"},
     'dcgm_exporter_health_taint_key "gpu health" is not a Kubernetes taint key ([prefix/]name)'),
    ({"dcgm_exporter_extra_counters": [{"field": "GPU_UTIL"}]},
     'dcgm_exporter_extra_counters: {"field": "GPU_UTIL"} has no field DCGM_FI_<NAME>'),
    ({"dcgm_exporter_extra_counters": [{"field": "DCGM_FI_DEV_GPU_UTIL", "type": "histogram"}]},
     'dcgm_exporter_extra_counters: DCGM_FI_DEV_GPU_UTIL has type "histogram", not one of gauge, counter, label'),
    ({"dcgm_exporter_image_tag": ""}, None),   # neither tag nor digest
    ({"dcgm_exporter_extra_tolerations": [{"key": "kubegpu.nvidia/driver-upgrade", "operator": "Equal",
                                           "value": "other"}]}, ""),
])
def test_input_that_cannot_work_stops_the_role_in_one_line(variables, message):
    found = render("{{ _dcgm_exporter_problems }}", variables)
    if message is None:     # the container_image filter's own message, naming the variable
        assert len(found) == 1 and found[0].startswith("dcgm_exporter_image"), found
    elif message == "":
        assert found == []
    else:
        assert found == [message]


def test_air_gapped_registry_and_pull_secrets_follow_the_device_plugin_s():
    objects = manifests(VARIABLE_SETS["air-gapped"])
    assert exporter(objects)["image"] == "registry.example.internal:5000/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless"
    assert pod_spec(objects)["imagePullSecrets"] == [{"name": "regcred"}]
    digest = exporter(manifests(VARIABLE_SETS["digest"]))["image"]
    assert digest == "nvcr.io/nvidia/k8s/dcgm-exporter@sha256:" + "a" * 64
    assert "runtimeClassName" not in pod_spec(manifests(VARIABLE_SETS["default-runtime"]))


def test_the_service_account_has_no_api_access():
    objects = manifests()
    assert by_kind(objects, "ServiceAccount")["automountServiceAccountToken"] is False
    assert pod_spec(objects)["automountServiceAccountToken"] is False
    assert not [o for o in objects if o["kind"] in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")]


def test_the_service_and_servicemonitor_select_the_exporter_pods():
    objects = manifests()
    selector = by_kind(objects, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    service = by_kind(objects, "Service")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"] == selector
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9400, "targetPort": "metrics", "protocol": "TCP"}]
    monitor = render("{{ _dcgm_exporter_servicemonitor }}")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["kind"] == "ServiceMonitor"
    assert monitor["spec"]["selector"]["matchLabels"] == selector
    assert set(service["metadata"]["labels"].items()) >= set(selector.items())
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["nvidia-dcgm-exporter"]}


@pytest.mark.parametrize("crd, wanted, applies", [
    ({"resources": [{"kind": "CustomResourceDefinition", "metadata": {"name": dcgm.SERVICEMONITOR_CRD}}]}, True, True),
    ({"resources": []}, True, False),
    ({"resources": [{"kind": "CustomResourceDefinition"}]}, False, False),
])
def test_the_servicemonitor_is_applied_only_where_its_crd_exists(crd, wanted, applies):
    variables = {"_dcgm_exporter_servicemonitor_crd": crd, "dcgm_exporter_servicemonitor": wanted}
    assert render("{{ _dcgm_exporter_servicemonitor_applies }}", variables) is applies
    note = render("{{ _dcgm_exporter_servicemonitor_note }}", variables)
    if wanted and not applies:
        assert note.startswith("no ServiceMonitor applied: the CustomResourceDefinition "
                               "servicemonitors.monitoring.coreos.com does not exist")
    else:
        assert note == ""
