"""Role kubegpu.nvidia.nvidia_mig run by ansible-playbook against the Kubernetes API test server, on a GPU "node"
that is this machine on a local connection with the real pynvml over the fake libnvidia-ml.so.1 (its MIG state kept
in a state file, tests/support/fakenvml; the GPU reset by tests/support/fakenvml/nvidia-smi).

What the role promises: a bad input or a GPU that cannot change is recorded as nvidia.com/mig.config.state=failed
with the reason and nothing is changed on the GPUs; a node is evicted of its GPU work only, repartitioned, marked
success and uncordoned; a second run changes nothing. The boot unit is left out (nvidia_mig_boot_unit: false; its
entry point is tested in test_mig_boot.py) and so is the wait for the MIG resources (the kubelet stand-in does not
read the fake NVML's state).
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

import ansible_run
import mig_profiles
from fakenvml.profile import PROFILES

kubernetes = pytest.importorskip("kubernetes")

ROOT = pathlib.Path(__file__).resolve().parents[2]
SMI = ROOT / "tests" / "support" / "fakenvml" / "nvidia-smi"
HEADER = "driver_version = 535.161.08\ncuda_driver_version = 12020\n"
NODE = "node-a"
STATE = "nvidia.com/mig.config.state"
REASON = "kubegpu.nvidia/mig.config.reason"
PAUSE_TAINT = "kubegpu.nvidia/driver-upgrade"


def gpu(model, index, mig_mode=1, extra=""):
    spec = mig_profiles.MODELS[model]
    return ("[gpu]\nname = %s\nuuid = GPU-00000000-0000-4000-8000-%012d\nmemory_total_mib = %d\n"
            "pci_bus_id = 00000000:%02X:00.0\npci_device_id = 0x%08X\ncompute_capability = 8.0\nmig_mode = %d\n"
            "max_mig_devices = 7\n%s" % (spec["name"], index, spec["memory_mib"], 0x10 + index, spec["pci_device_id"],
                                         mig_mode, extra))


PROFILE_TEXTS = {
    "busy": HEADER + gpu("A100-40GB", 0) + gpu("A100-40GB", 1, 1, "processes = 4242:python3, 4243:trainer\n"),
    "passthrough": HEADER + gpu("A100-40GB", 0, 0, "mig_passthrough = 1\n"),
}


@pytest.fixture(scope="module")
def libdir():
    out = subprocess.run([str(ROOT / "scripts" / "build-fakenvml.sh")], check=True, capture_output=True, text=True)
    return pathlib.Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def node(kube_server, kube, tmp_path, libdir):  # pylint: disable=unused-argument
    core = kubernetes.client.CoreV1Api(kube.api_client())

    def make(profile, labels=None):
        core.create_node({"apiVersion": "v1", "kind": "Node",
                          "metadata": {"name": NODE, "labels": dict({"kubernetes.io/hostname": NODE,
                                                                     "nvidia.com/gpu.present": "true"},
                                                                    **(labels or {}))}})
        # a node whose kubelet admits a GPU pod (the stand-in rejects pods asking more than allocatable)
        resources = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "4"}
        core.patch_node_status(NODE, {"status": {"capacity": resources, "allocatable": resources}})
        if profile in PROFILE_TEXTS:
            config = tmp_path / ("%s.conf" % profile)
            config.write_text(PROFILE_TEXTS[profile])
        else:
            config = PROFILES / ("%s.conf" % profile)
        env = {"LD_LIBRARY_PATH": str(libdir / "full"), "FAKENVML_CONFIG": str(config),
               "FAKENVML_STATE": str(tmp_path / "node.state"), "PYTHONPATH": os.pathsep.join(sys.path)}
        return {"core": core, "env": env, "ns": kube.namespace(), "kubeconfig": kube.kubeconfig, "dir": tmp_path}
    return make


def run_role(cluster, role_vars, check=False, diff=False):
    playbook = cluster["dir"] / "mig.yml"
    playbook.write_text(json.dumps([{
        "hosts": "gpu-a", "gather_facts": False, "environment": cluster["env"],
        "vars": dict({"nvidia_mig_node": NODE, "nvidia_mig_boot_unit": False, "nvidia_mig_wait_resources": False,
                      "nvidia_mig_drain_timeout": 5, "nvidia_mig_drain_delay": 1,
                      "nvidia_mig_nvidia_smi": str(SMI)}, **role_vars),
        "roles": [{"role": "kubegpu.nvidia.nvidia_mig"}]}]))
    inventory = cluster["dir"] / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {"gpu-a": {"ansible_connection": "local"},
                                                       "localhost": {"ansible_connection": "local"}}}}))
    return ansible_run.run_playbook(playbook, inventory, kubeconfig=cluster["kubeconfig"], check=check, diff=diff,
                                    env={"ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".cache" / "collections")})


def failure(run):
    failed = [(name, res) for _h, name, res in run.events() if res.get("failed") and not res.get("ignore_errors")]
    assert failed, "the run did not fail"
    name, res = failed[-1]
    assert "\n" not in res["msg"].strip() and "Traceback" not in res["msg"], res["msg"]
    return name, res["msg"]


def writes(cluster):
    path = cluster["dir"] / "node.state"
    if not path.exists():
        return 0
    return int([line for line in path.read_text().splitlines() if line.startswith("writes = ")][0].split("=")[1])


def meta(cluster):
    obj = cluster["core"].read_node(NODE)
    spec = obj.spec or kubernetes.client.V1NodeSpec()
    return obj.metadata.labels or {}, obj.metadata.annotations or {}, bool(spec.unschedulable), [
        t.key for t in (spec.taints or [])]


def workload_pod(cluster, name, gpus=0):
    container = {"name": "main", "image": "registry.invalid/app:1"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    cluster["core"].create_namespaced_pod(cluster["ns"], {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name + "-rs", "controller": True,
            "uid": "00000000-0000-4000-8000-0000000000%02d" % len(name)}]},
        "spec": {"nodeName": NODE, "containers": [container]}})


def pods(cluster):
    return sorted((p.metadata.name, p.status.phase) for p in cluster["core"].list_namespaced_pod(cluster["ns"]).items
                  if p.metadata.deletion_timestamp is None)


def test_label_naming_an_unknown_config_fails_and_changes_nothing(node):
    cluster = node("a100x4-mig", {"nvidia.com/mig.config": "all-balancd"})
    run = run_role(cluster, {"nvidia_mig_config": "all-1g.5gb"})
    assert run.rc != 0
    name, msg = failure(run)
    assert name == "Stop on a MIG config that cannot be used"
    assert msg.startswith("MIG geometry of node node-a: the node's label nvidia.com/mig.config=all-balancd: MIG config "
                          "'all-balancd' does not exist (did you mean 'all-balanced'?)")
    labels, annotations, cordoned, taints = meta(cluster)
    assert labels[STATE] == "failed" and "'all-balancd' does not exist" in annotations[REASON]
    assert not cordoned and PAUSE_TAINT not in taints
    assert writes(cluster) == 0


def test_busy_gpu_fails_before_any_change(node):
    cluster = node("busy")
    workload_pod(cluster, "trainer", gpus=1)
    run = run_role(cluster, {"nvidia_mig_config": "all-balanced"})
    assert run.rc != 0
    name, msg = failure(run)
    assert name == "Stop on a MIG config the node's GPUs cannot take"
    assert "4242" in msg and "python3" in msg and "trainer" in msg
    labels, annotations, cordoned, taints = meta(cluster)
    assert labels[STATE] == "failed" and "python3" in annotations[REASON]
    # nothing half-done: no GPU write, no eviction, the node not cordoned
    assert writes(cluster) == 0
    assert [name for name, _phase in pods(cluster)] == ["trainer"] and not cordoned and PAUSE_TAINT not in taints


def test_reset_refused_needs_a_reboot_the_role_may_not_do_on_a_local_connection(node):
    cluster = node("passthrough")
    run = run_role(cluster, {"nvidia_mig_config": "all-enabled"})
    events = [(n, r.get("skipped"), r.get("changed"), r.get("msg"), r.get("reboot_required"))
              for _h, n, r in run.events()]
    assert run.rc != 0, "\n".join(repr(event) for event in events)
    name, msg = failure(run)
    assert name == "Stop, naming the node and the step"
    assert "step 'apply'" in msg and "reboot" in msg and "local connection" in msg
    labels, annotations, cordoned, _taints = meta(cluster)
    assert labels[STATE] == "failed" and "local connection" in annotations[REASON]
    # the node stays cordoned on purpose: its GPU's mode waits for the reboot
    assert cordoned


def test_repartition_evicts_only_gpu_work_and_ends_success_then_changes_nothing(node):
    cluster = node("a100x4-mig", {"nvidia.com/mig.config": "all-balanced"})
    workload_pod(cluster, "trainer", gpus=1)
    workload_pod(cluster, "web")
    assert pods(cluster) == [("trainer", "Running"), ("web", "Running")]
    # --check --diff, the boot unit included: shown, nothing written
    check = run_role(cluster, {"nvidia_mig_boot_unit": True}, check=True, diff=True)
    assert check.rc == 0, failure(check)
    unit = [res for _h, name, res in check.events() if name == "Install kubegpu-mig.service"][0]
    assert unit["changed"] is True
    assert "ExecStart=/usr/bin/python3 -m ansible_collections.kubegpu.nvidia.plugins.module_utils.mig_boot" in (
        unit["diff"][0]["after"] if isinstance(unit["diff"], list) else unit["diff"]["after"])
    assert not os.path.exists("/etc/systemd/system/kubegpu-mig.service")
    planned = [res for _h, name, res in check.events() if name == "Read the GPUs' MIG geometry and plan the change"][0]
    assert planned["changed"] is True and planned["changed_gpus"] == [0, 1, 2, 3]
    assert "3g.20gb x2" in planned["diff"]["before"] and "1g.5gb x2" in planned["diff"]["after"]
    assert writes(cluster) == 0 and STATE not in meta(cluster)[0]

    run = run_role(cluster, {})
    assert run.rc == 0, failure(run)
    applied = [res for _h, name, res in run.events() if name == "Apply the MIG config"][0]
    assert applied["mig_devices"]["resources"] == {"nvidia.com/mig-1g.5gb": 8, "nvidia.com/mig-2g.10gb": 4,
                                                   "nvidia.com/mig-3g.20gb": 4}
    labels, annotations, cordoned, taints = meta(cluster)
    assert labels[STATE] == "success" and REASON not in annotations
    assert not cordoned and PAUSE_TAINT not in taints
    evicted = [res for _h, name, res in run.events() if name == "Evict the node's GPU work and pause its GPU daemons"][0]
    assert evicted["evicted"] == ["%s/trainer" % cluster["ns"]], evicted
    assert [name for name, _phase in pods(cluster)] == ["web"]  # only the GPU work was evicted
    count = writes(cluster)
    assert count > 0

    again = run_role(cluster, {})
    assert again.rc == 0, failure(again)
    ran = [name for _h, name, res in again.events() if not res.get("skipped")]
    assert "Evict the node's work and stop its GPU daemons" not in ran and "Apply the MIG config" not in ran
    assert not any(res.get("changed") for _h, _n, res in again.events())
    assert writes(cluster) == count


def test_repartition_waits_for_the_new_mig_resources_the_node_advertises(node, kube):
    """With a device plugin of strategy mixed on the node (the kubelet stand-in advertises what the node's fake NVML
    state holds, annotation kubegpu.io/simulated-nvml), the role waits until the new counts are advertised."""
    cluster = node("a100x4-mig", {"nvidia.com/mig.config": "all-balanced", "nvidia.com/device-plugin.config": "mixed"})
    core = cluster["core"]
    core.patch_node(NODE, {"metadata": {"annotations": {
        "kubegpu.io/simulated-gpus": "4",
        "kubegpu.io/simulated-nvml": json.dumps({"config": cluster["env"]["FAKENVML_CONFIG"],
                                                 "state": cluster["env"]["FAKENVML_STATE"]})}}})
    ns = cluster["ns"]
    core.create_namespaced_config_map(ns, {"metadata": {"name": "configs"}, "data": {
        "mixed": "version: v1\nflags:\n  migStrategy: mixed\n"}})
    spec = {"containers": [
        {"name": "plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"},
        {"name": "config-manager", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
         "env": [{"name": "NODE_LABEL", "value": "nvidia.com/device-plugin.config"},
                 {"name": "DEFAULT_CONFIG", "value": "mixed"}]}],
        "volumes": [{"name": "dp", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}},
                    {"name": "available-configs", "configMap": {"name": "configs"}}]}
    kube.apps().create_namespaced_daemon_set(ns, {"metadata": {"name": "nvidia-device-plugin"}, "spec": {
        "selector": {"matchLabels": {"app": "nvidia-device-plugin"}},
        "template": {"metadata": {"labels": {"app": "nvidia-device-plugin"}}, "spec": spec}}})
    # the validation pod's runtime class (the device plugin role creates it on a cluster)
    kubernetes.client.NodeV1Api(kube.api_client()).create_runtime_class(
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"})
    allocatable = core.read_node(NODE).status.allocatable or {}
    assert allocatable.get("nvidia.com/mig-3g.20gb") == "2"  # the profile's own layout: GPU 0 3g.20gb x2

    run = run_role(cluster, {"nvidia_mig_wait_resources": True, "nvidia_mig_poll_delay": 1,
                             "nvidia_mig_ready_timeout": 30})
    assert run.rc == 0, failure(run)
    waited = [res for _h, name, res in run.events() if name == "Wait for the node to advertise its MIG devices"][0]
    assert not waited.get("skipped"), waited
    # then a validation pod that requested one of the new MIG devices (the most numerous) passed on the node
    validated = [res for _h, name, res in run.events() if name == "Validate the GPU nodes"]
    assert len(validated) == 1 and validated[0]["nodes"] == [NODE], validated
    assert [(r["node"], r["passed"]) for r in validated[0]["results"]] == [(NODE, True)], validated[0]["results"]
    template = validated[0]["invocation"]["module_args"]["pod_template"]
    assert template["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-1g.5gb": 1}
    allocatable = core.read_node(NODE).status.allocatable
    assert {k: v for k, v in allocatable.items() if k.startswith("nvidia.com/mig-")} == {
        "nvidia.com/mig-1g.5gb": "8", "nvidia.com/mig-2g.10gb": "4", "nvidia.com/mig-3g.20gb": "4"}
    labels, _annotations, cordoned, _taints = meta(cluster)
    assert labels[STATE] == "success" and not cordoned


def site_mig_plays():
    """The two MIG plays of playbooks/site.yml as they are (the play connection's module_defaults left out: the
    run's kubeconfig gives it)."""
    import yaml
    plays = [play for play in yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text())
             if "mig" in play.get("tags", [])]
    assert [play["hosts"] for play in plays] == ["kubegpu_gpu", "kubegpu_mig_change"]
    for play in plays:
        play.pop("module_defaults", None)
    return plays


def run_site_plays(cluster, records):
    """site.yml's MIG plays over two GPU hosts, the control host holding the nodes as the preflight listed them."""
    preflight = {"hosts": "localhost", "gather_facts": False,
                 "tasks": [{"name": "Keep the nodes as the preflight listed them",
                            "ansible.builtin.set_fact": {"k8s_gpu_node_nodes": records}}]}
    plays = site_mig_plays()
    for play in plays:
        play["environment"] = cluster["env"]
    playbook = cluster["dir"] / "site-mig.yml"
    playbook.write_text(json.dumps([preflight] + plays))
    inventory = cluster["dir"] / "site-inventory.json"
    common = {"ansible_connection": "local", "nvidia_mig_boot_unit": False, "nvidia_mig_wait_resources": False,
              "nvidia_mig_drain_timeout": 5, "nvidia_mig_drain_delay": 1, "nvidia_mig_nvidia_smi": str(SMI)}
    inventory.write_text(json.dumps({"all": {
        "hosts": {"localhost": {"ansible_connection": "local"}},
        "children": {"kubegpu_gpu": {"hosts": {"gpu-a": dict(common, kubegpu_node_name=NODE),
                                               "gpu-b": dict(common, kubegpu_node_name="node-b")}}}}}))
    return ansible_run.run_playbook(playbook, inventory, kubeconfig=cluster["kubeconfig"],
                                    env={"ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".cache" / "collections")})


def play_hosts(run, name):
    """[[hosts of one task] per task] of each run of the play named (one run per serial batch)."""
    return [[sorted(task["hosts"]) for task in play["tasks"]] for play in run.data["plays"]
            if play["play"]["name"] == name]


def test_site_decides_every_node_at_once_and_changes_only_the_nodes_that_need_it(node):
    cluster = node("a100x4-mig", {"nvidia.com/mig.config": "all-balanced"})
    cluster["core"].create_node({"apiVersion": "v1", "kind": "Node",
                                 "metadata": {"name": "node-b", "labels": {"kubernetes.io/hostname": "node-b"}}})
    workload_pod(cluster, "trainer", gpus=1)
    workload_pod(cluster, "web")
    records = [{"name": NODE, "labels": {"nvidia.com/mig.config": "all-balanced"}, "allocatable": {}},
               {"name": "node-b", "labels": {}, "allocatable": {}}]

    run = run_site_plays(cluster, records)
    assert run.rc == 0, failure(run)
    # one pass over both hosts (no serial), the node labels taken from the preflight's list: no read of any node
    decide = play_hosts(run, "Decide each GPU node's MIG geometry")
    assert len(decide) == 1 and ["gpu-a", "gpu-b"] in decide[0]
    reads = [res for _h, name, res in run.events() if name == "Read the node"]
    assert len(reads) == 2 and all(res.get("skipped") for res in reads)
    # the NVML read only where a config is declared
    planned = {h: res for h, name, res in run.events() if name == "Read the GPUs' MIG geometry and plan the change"}
    assert not planned["gpu-a"].get("skipped") and planned["gpu-b"].get("skipped")
    # the serial play ran the one node that changes
    applied = play_hosts(run, "Partition the GPUs into MIG devices, one node at a time")
    assert applied and all(hosts == ["gpu-a"] for batch in applied for hosts in batch)
    labels, _annotations, cordoned, _taints = meta(cluster)
    assert labels[STATE] == "success" and not cordoned
    assert [name for name, _phase in pods(cluster)] == ["web"]
    assert STATE not in (cluster["core"].read_node("node-b").metadata.labels or {})
    count = writes(cluster)

    # the next run: the preflight lists node-a at success; nothing is grouped, no serial pass, no write
    records[0]["labels"][STATE] = "success"
    again = run_site_plays(cluster, records)
    assert again.rc == 0, failure(again)
    assert play_hosts(again, "Partition the GPUs into MIG devices, one node at a time") in ([], [[]])
    assert not any(res.get("changed") for _h, _n, res in again.events())
    assert writes(cluster) == count


def test_site_records_success_on_a_node_already_at_its_geometry(node):
    """A node at its declared geometry whose state was never recorded: state success, no eviction, no NVML write."""
    cluster = node("a100x4-mig")
    workload_pod(cluster, "trainer", gpus=1)
    records = [{"name": NODE, "labels": {}, "allocatable": {}}, {"name": "node-b", "labels": {}, "allocatable": {}}]
    cluster["core"].create_node({"apiVersion": "v1", "kind": "Node",
                                 "metadata": {"name": "node-b", "labels": {"kubernetes.io/hostname": "node-b"}}})
    first = run_site_plays(cluster, [dict(records[0], labels={"nvidia.com/mig.config": "all-balanced"}), records[1]])
    assert first.rc == 0, failure(first)
    cluster["core"].patch_node(NODE, {"metadata": {"labels": {STATE: None}}})
    workload_pod(cluster, "trainer2", gpus=1)
    count = writes(cluster)

    run = run_site_plays(cluster, [dict(records[0], labels={"nvidia.com/mig.config": "all-balanced"}), records[1]])
    assert run.rc == 0, failure(run)
    ran = [name for _h, name, res in run.events() if not res.get("skipped")]
    assert "Evict the node's GPU work and pause its GPU daemons" not in ran and "Apply the MIG config" not in ran
    assert "Record the node's MIG geometry as done" in ran
    assert meta(cluster)[0][STATE] == "success"
    assert "trainer2" in [name for name, _phase in pods(cluster)]
    assert writes(cluster) == count
