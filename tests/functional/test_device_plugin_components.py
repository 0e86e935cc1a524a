"""Role kubegpu.nvidia.k8s_device_plugin's components beside the plugin, applied to the Kubernetes API test server.

What the API can show is checked through it: the MPS control daemon, GPU Feature Discovery with Node Feature
Discovery's nfd-master, nfd-gc and CRDs, their RBAC objects and their pods' security contexts as stored; the
refusals (images that are not pinned references, MPS under MIG strategy mixed, GFD without an NFD to publish to)
stop the role before it writes anything. The test server's DaemonSet controller places pods by node selector,
so the MPS daemon runs only where nvidia.com/mps.capable=true. (GFD and nfd-master themselves do not run here:
no NodeFeature object appears.)
"""
import json

import pytest

import ansible_run

kubernetes = pytest.importorskip("kubernetes")

NAMESPACE = "nvidia-device-plugin"
DIGEST = "sha256:" + "0123456789abcdef" * 4
PLAYBOOK = """
- name: Deploy the NVIDIA device plugin
  hosts: localhost
  gather_facts: false
  roles:
    - role: kubegpu.nvidia.k8s_device_plugin
"""
BASE = {"k8s_device_plugin_wait_timeout": 20, "k8s_device_plugin_wait_delay": 1,
        "k8s_device_plugin_gpu_hosts": [], "k8s_device_plugin_node_gpus": {"gpu-mps": 2, "gpu-ts": 1}}
# T4s shared by MPS on the node that GFD (or the labels role) marks mps.capable, time-slicing elsewhere,
# GFD with NFD, everything pinned by digest
FULL = dict(BASE, k8s_device_plugin_gfd_enabled=True, k8s_device_plugin_image_digest=DIGEST,
            k8s_device_plugin_nfd_image_digest=DIGEST,
            k8s_device_plugin_configs={"mps": {"sharing_strategy": "mps", "replicas": 2},
                                       "ts": {"sharing_strategy": "time-slicing", "replicas": 3}},
            k8s_device_plugin_node_configs={"gpu-mps": "mps", "gpu-ts": "ts"})


def run(cluster, extra_vars, check=False):
    res = ansible_run.run_playbook(cluster["dir"] / "play.yml", cluster["dir"] / "inventory.json", extra_vars,
                                   check=check, kubeconfig=cluster["kubeconfig"])
    return res.rc, res.stats.get("localhost", {}), res.tasks()


def failed_task(tasks):
    failed = [(name, res) for name, res in tasks.items() if res.get("failed")]
    assert failed, "no task failed"
    return failed[-1]


@pytest.fixture
def cluster(kube_server, kube, tmp_path):
    """Two simulated GPU nodes with the labels GFD publishes for their configurations, and a CPU node."""
    client = kube.api_client()
    core = kubernetes.client.CoreV1Api(client)
    nodes = {"gpu-mps": (2, {"nvidia.com/mps.capable": "true"}), "gpu-ts": (1, {"nvidia.com/mps.capable": "false"}),
             "cpu": (0, {})}
    for name, (gpus, labels) in nodes.items():
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels)}}
        if gpus:
            body["metadata"]["labels"]["nvidia.com/gpu.present"] = "true"
            body["metadata"]["annotations"] = {"kubegpu.io/simulated-gpus": str(gpus)}
        core.create_node(body)
    (tmp_path / "inventory.json").write_text(json.dumps({"all": {"hosts": {"localhost": {
        "ansible_connection": "local"}}}}))
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    return {"dir": tmp_path, "core": core, "apps": kubernetes.client.AppsV1Api(client),
            "rbac": kubernetes.client.RbacAuthorizationV1Api(client),
            "crd": kubernetes.client.ApiextensionsV1Api(client), "client": client, "kubeconfig": kube.kubeconfig}


def raw(cluster, obj):
    """An object as the API stores it (camelCase keys), read through the client's deserialiser-free path."""
    return cluster["client"].sanitize_for_serialization(obj)


def namespace_exists(cluster):
    return NAMESPACE in [ns.metadata.name for ns in cluster["core"].list_namespace().items]


def test_gfd_nfd_and_mps_are_applied_with_their_rbac_and_a_rerun_changes_nothing(cluster):
    rc, stats, tasks = run(cluster, FULL)
    assert rc == 0, failed_task(tasks)
    apps, rbac = cluster["apps"], cluster["rbac"]
    # CRDs of NFD, managed here
    crds = {c.metadata.name: c for c in cluster["crd"].list_custom_resource_definition().items}
    assert set(crds) == {"nodefeatures.nfd.k8s-sigs.io", "nodefeaturerules.nfd.k8s-sigs.io"}
    assert crds["nodefeatures.nfd.k8s-sigs.io"].metadata.labels["app.kubernetes.io/managed-by"] == "kubegpu.nvidia"
    # the DaemonSets, pinned by digest, with the security contexts the role rendered
    daemonsets = {d.metadata.name: raw(cluster, d) for d in apps.list_namespaced_daemon_set(NAMESPACE).items}
    assert set(daemonsets) == {"nvidia-device-plugin", "nvidia-device-plugin-mps-control-daemon",
                               "nvidia-device-plugin-gpu-feature-discovery"}
    for ds in daemonsets.values():
        spec = ds["spec"]["template"]["spec"]
        for ctr in spec.get("initContainers", []) + spec["containers"]:
            assert ctr["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.20.0@" + DIGEST
            assert ctr["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
            assert ctr["securityContext"]["readOnlyRootFilesystem"] is True
    gfd = daemonsets["nvidia-device-plugin-gpu-feature-discovery"]["spec"]["template"]["spec"]
    assert gfd["serviceAccountName"] == "nvidia-device-plugin-gpu-feature-discovery"
    assert {c["name"]: c["securityContext"].get("runAsUser") for c in gfd["initContainers"] + gfd["containers"]} == {
        "gpu-feature-discovery-init": 65534, "gpu-feature-discovery-sidecar": 65534, "gpu-feature-discovery-ctr": 65534}
    sys_mount = [m for m in gfd["containers"][1]["volumeMounts"] if m["mountPath"] == "/sys"]
    assert sys_mount == [{"name": "host-sys", "mountPath": "/sys", "readOnly": True}]
    mps = daemonsets["nvidia-device-plugin-mps-control-daemon"]["spec"]["template"]["spec"]
    assert mps["hostPID"] is True and mps["nodeSelector"] == {"nvidia.com/mps.capable": "true"}
    plugin_ctr = daemonsets["nvidia-device-plugin"]["spec"]["template"]["spec"]["containers"][1]
    assert {"name": "MPS_ROOT", "value": "/run/nvidia/mps"} in plugin_ctr["env"]
    # the MPS daemon runs only on the node labelled mps.capable; GFD and the plugin on both GPU nodes
    pods = cluster["core"].list_namespaced_pod(NAMESPACE).items
    placed = {}
    for pod in pods:
        placed.setdefault(pod.metadata.owner_references[0].name, set()).add(pod.spec.node_name)
    assert placed == {"nvidia-device-plugin": {"gpu-mps", "gpu-ts"},
                      "nvidia-device-plugin-gpu-feature-discovery": {"gpu-mps", "gpu-ts"},
                      "nvidia-device-plugin-mps-control-daemon": {"gpu-mps"}}
    # nfd-master and nfd-gc with their RBAC; GFD's rights in its namespace only
    deployments = {d.metadata.name: d for d in apps.list_namespaced_deployment(NAMESPACE).items}
    assert set(deployments) == {"nvidia-device-plugin-nfd-master", "nvidia-device-plugin-nfd-gc"}
    assert deployments["nvidia-device-plugin-nfd-master"].spec.template.spec.containers[0].image == (
        "registry.k8s.io/nfd/node-feature-discovery:v0.19.0@" + DIGEST)
    role = rbac.read_namespaced_role("nvidia-device-plugin-gpu-feature-discovery", NAMESPACE)
    assert [(r.api_groups, r.resources) for r in role.rules] == [(["nfd.k8s-sigs.io"], ["nodefeatures"]),
                                                                 ([""], ["pods"])]
    binding = rbac.read_namespaced_role_binding("nvidia-device-plugin-gpu-feature-discovery", NAMESPACE)
    assert [(s.kind, s.name) for s in binding.subjects] == [
        ("ServiceAccount", "nvidia-device-plugin-gpu-feature-discovery")]
    cluster_roles = {r.metadata.name for r in rbac.list_cluster_role().items}
    assert {"nvidia-device-plugin-role", "nvidia-device-plugin-nfd-master", "nvidia-device-plugin-nfd-gc"} <= cluster_roles
    plugin_role = rbac.read_cluster_role("nvidia-device-plugin-role")
    assert [r.resources for r in plugin_role.rules] == [["nodes"]]
    accounts = {sa.metadata.name for sa in cluster["core"].list_namespaced_service_account(NAMESPACE).items}
    assert {"nvidia-device-plugin-service-account", "nvidia-device-plugin-gpu-feature-discovery",
            "nvidia-device-plugin-nfd-master", "nvidia-device-plugin-nfd-gc"} <= accounts
    # the plugin advertises the shared GPUs (2 x 2 MPS, 1 x 3 time-slicing)
    assert cluster["core"].read_node("gpu-mps").status.allocatable["nvidia.com/gpu"] == "4"
    assert cluster["core"].read_node("gpu-ts").status.allocatable["nvidia.com/gpu"] == "3"

    rc, stats, tasks = run(cluster, FULL)
    assert rc == 0, failed_task(tasks)
    assert stats["changed"] == 0, [name for name, res in tasks.items() if res.get("changed")]


@pytest.mark.parametrize("extra, message", [
    ({"k8s_device_plugin_image_digest": "sha256:1234"},
     "k8s_device_plugin_image_digest 'sha256:1234' is not a digest: sha256: followed by 64 lowercase hex digits"),
    ({"k8s_device_plugin_image_tag": ""},
     "k8s_device_plugin_image_tag and k8s_device_plugin_image_digest are both empty"),
    ({"k8s_device_plugin_configs": {"a100-mps": {"sharing_strategy": "mps", "replicas": 2, "mig_strategy": "mixed"}}},
     "k8s_device_plugin settings: device plugin config a100-mps: MPS sharing does not work with mig_strategy mixed "
     "(the device plugin refuses it)"),
    ({"k8s_device_plugin_gfd_enabled": True, "k8s_device_plugin_nfd_deploy": False},
     "k8s_device_plugin_gfd_enabled needs Node Feature Discovery: GPU Feature Discovery publishes its labels as "
     "NodeFeature objects that only nfd-master turns into node labels"),
])
def test_refusals_come_before_anything_is_applied(cluster, extra, message):
    rc, _stats, tasks = run(cluster, dict(BASE, **extra))
    assert rc != 0
    name, result = failed_task(tasks)
    assert result["msg"].startswith(message), result["msg"]
    assert "\n" not in result["msg"]
    assert "Apply the device plugin objects" not in tasks
    assert not namespace_exists(cluster)


def helm_crd():
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "nodefeatures.nfd.k8s-sigs.io", "labels": {"app.kubernetes.io/managed-by": "Helm"}},
            "spec": {"group": "nfd.k8s-sigs.io", "scope": "Namespaced",
                     "names": {"kind": "NodeFeature", "plural": "nodefeatures", "singular": "nodefeature",
                               "listKind": "NodeFeatureList"},
                     "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {"type": "object",
                                                                  "x-kubernetes-preserve-unknown-fields": True}}}]}}


def test_an_nfd_installed_otherwise_is_left_alone(cluster):
    cluster["crd"].create_custom_resource_definition(helm_crd())
    # deploying NFD here would overwrite its CRD: refused, nothing applied
    rc, _stats, tasks = run(cluster, dict(BASE, k8s_device_plugin_gfd_enabled=True))
    assert rc != 0
    assert failed_task(tasks)[1]["msg"] == (
        "Node Feature Discovery is already installed (CustomResourceDefinition nodefeatures.nfd.k8s-sigs.io managed "
        "by Helm): set k8s_device_plugin_nfd_deploy: false to have GPU Feature Discovery publish to it")
    assert not namespace_exists(cluster)
    # publishing to it: GFD and its RBAC, no NFD objects, the CRD untouched
    before = cluster["crd"].read_custom_resource_definition("nodefeatures.nfd.k8s-sigs.io").metadata.resource_version
    rc, _stats, tasks = run(cluster, dict(BASE, k8s_device_plugin_gfd_enabled=True, k8s_device_plugin_nfd_deploy=False))
    assert rc == 0, failed_task(tasks)
    crd = cluster["crd"].read_custom_resource_definition("nodefeatures.nfd.k8s-sigs.io")
    assert crd.metadata.resource_version == before
    assert [c.metadata.name for c in cluster["crd"].list_custom_resource_definition().items] == [
        "nodefeatures.nfd.k8s-sigs.io"]
    assert cluster["apps"].list_namespaced_deployment(NAMESPACE).items == []
    cluster["apps"].read_namespaced_daemon_set("nvidia-device-plugin-gpu-feature-discovery", NAMESPACE)
    cluster["rbac"].read_namespaced_role("nvidia-device-plugin-gpu-feature-discovery", NAMESPACE)


def test_check_mode_with_gfd_and_mps_creates_nothing(cluster):
    rc, stats, tasks = run(cluster, FULL, check=True)
    assert rc == 0, failed_task(tasks)
    assert stats["changed"] >= 1
    assert cluster["crd"].list_custom_resource_definition().items == []
    assert not namespace_exists(cluster)
