"""The node after converge (switched from the device plugin to DRA), then a `--check --diff` run of the switch back
(the drain listed, nothing changed) and the switch back itself, as the Kubernetes API test server shows them
(docs/dra.md, Switching a node)."""
import json
import os
import subprocess

import pytest
import testinfra.utils.ansible_runner

kubernetes = pytest.importorskip("kubernetes")

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("dra-h100")

STATE = os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]
SCENARIO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE = "dra-h100"
DRA_LABEL = "nvidia.com/dra-kubelet-plugin"
DEVICE_PLUGIN_NS = "nvidia-device-plugin"
DRA_NS = "nvidia-dra-driver-gpu"
DRAIN = "Drain the GPU work of the nodes that switch between the device plugin and DRA"
UNCORDON = "Uncordon the nodes that switched between the device plugin and DRA, now validated"


@pytest.fixture(name="api", scope="module")
def fixture_api():
    return kubernetes.config.new_client_from_config(config_file=os.path.join(STATE, "kubeconfig"))


def pods_on_node(api, namespace):
    return [p.metadata.name for p in kubernetes.client.CoreV1Api(api).list_namespaced_pod(
        namespace, field_selector="spec.nodeName=" + NODE).items if not p.metadata.deletion_timestamp]


def slices(api):
    dyn = kubernetes.dynamic.DynamicClient(api)
    res = dyn.resources.get(api_version="resource.k8s.io/v1", kind="ResourceSlice")
    return res.get(field_selector="spec.driver=gpu.nvidia.com").to_dict()["items"]


def profile_uuids(host):
    return sorted(line.split("=", 1)[1].strip() for line in host.file("/etc/fakenvml/gpus.conf").content_string.splitlines()
                  if line.startswith("uuid"))


def site(allocation, tags=None, check=False):
    """site.yml with the node's kubegpu_gpu_allocation (``check``: with --check --diff), the JSON callback's plays."""
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    cmd = ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], "kubegpu.nvidia.site",
           "-e", "@" + os.path.join(STATE, "site-vars.yml"), "-e", "@" + os.path.join(SCENARIO, "vars", "site.yml"),
           "-e", "kubegpu_gpu_allocation=" + allocation]
    if tags:
        cmd += ["--tags", tags]
    if check:
        cmd += ["--check", "--diff"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    out = json.loads(proc.stdout)
    assert proc.returncode == 0, [(t["task"]["name"], r.get("msg")) for p in out["plays"] for t in p["tasks"]
                                  for r in t["hosts"].values() if r.get("failed")]
    return out


def task_results(out, name):
    """The results of the task ``name`` that were not skipped (each loop item's for a loop)."""
    return [item for p in out["plays"] for t in p["tasks"] if t["task"]["name"].endswith(name) for r in t["hosts"].values()
            for item in r.get("results", [r]) if not item.get("skipped")]


def claim_pod(core, name):
    """A pod of a ReplicaSet on the node that holds a resource claim (from a template) and requests no nvidia.com/*."""
    core.create_namespaced_pod("default", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name + "-rs", "controller": True,
            "uid": "00000000-0000-4000-8000-000000000003"}]},
        "spec": {"nodeName": NODE, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                 "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                 "containers": [{"name": "main", "image": "registry.invalid/app:1", "resources": {"claims": [{"name": "gpu"}]}}]}})


def test_on_dra_then_back_on_the_device_plugin(host, api):
    core = kubernetes.client.CoreV1Api(api)
    # converge switched the node to DRA: its GPU pod drained first, the web pod left running, the node uncordoned
    node = core.read_node(NODE)
    assert node.metadata.labels[DRA_LABEL] == "true"
    assert not node.spec.unschedulable
    assert pods_on_node(api, "default") == ["web"]
    assert pods_on_node(api, DEVICE_PLUGIN_NS) == []
    assert len(pods_on_node(api, DRA_NS)) == 1
    (published,) = slices(api)
    assert published["spec"]["nodeName"] == NODE
    assert sorted(d["attributes"]["uuid"]["string"] for d in published["spec"]["devices"]) == profile_uuids(host)
    with open(os.path.join(STATE, "summary.json"), encoding="utf-8") as handle:
        (row,) = [row for row in json.load(handle) if row["host"] == NODE]
    assert row["allocatable"] == "DRA: 8 gpu"
    # the claim validation passes on the node as converge left it
    (validation,) = task_results(site("dra", tags="dra"), "Record the claim validation per node")
    assert [(r["node"], r["passed"]) for r in validation["ansible_facts"]["nvidia_dra_driver_validation"]] == [(NODE, True)]

    # a pod holding a claim; --check --diff of the switch back lists its eviction and changes nothing
    claim_pod(core, "infer")
    out = site("device_plugin", check=True)
    (drain,) = task_results(out, DRAIN)
    assert (drain["changed"], drain["evicted"], drain["cordoned"]) == (True, ["default/infer"], True)
    (say,) = task_results(out, "Say which nodes switch between the device plugin and DRA")
    assert say["msg"] == ["node %s switches from DRA to the device plugin: cordoned and drained of its GPU work (pods "
                          "that request nvidia.com/* resources or hold resource claims) before its label %s changes; "
                          "uncordoned once validated" % (NODE, DRA_LABEL)]
    node = core.read_node(NODE)
    assert node.metadata.labels[DRA_LABEL] == "true"
    assert not node.spec.unschedulable
    assert pods_on_node(api, "default") == ["infer", "web"]
    assert len(slices(api)) == 1

    # back on the device plugin: the claim's pod evicted, the web pod left; nvidia.com/gpu allocatable again, no DRA
    # kubelet plugin, no slice
    out = site("device_plugin")
    (drain,) = task_results(out, DRAIN)
    assert drain["evicted"] == ["default/infer"] and drain["left"]["not_gpu"] == ["default/web"]
    assert [r["changed"] for r in task_results(out, UNCORDON)] == [True]
    node = core.read_node(NODE)
    assert DRA_LABEL not in node.metadata.labels
    assert not node.spec.unschedulable
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    assert pods_on_node(api, DRA_NS) == []
    assert len(pods_on_node(api, DEVICE_PLUGIN_NS)) == 1
    assert slices(api) == []
    assert pods_on_node(api, "default") == ["web"]
