"""A node that switches between the device plugin and DRA is drained of its GPU work before its label flips.

kubegpu.nvidia.site over one GPU host and the Kubernetes API test server. The host is a local-connection host of
this machine with the fake NVML library and the h100x8 profile (its Python points FAKENVML_CONFIG at it, as in
test_site_slices.py); its node is a simulated GPU node whose annotations give the profile's GPUs (the test
server's device plugin advertises them; its DRA kubelet plugin stand-in publishes them in a ResourceSlice). The
run skips the driver, MIG and toolkit plays (nothing is installed here).

What the switch must do (issue 29; the eviction follows k8s_gpu_evict, as the driver upgrade uses it): cordon,
evict only the pods that request nvidia.com/* resources or hold resource claims, flip the label
nvidia.com/dra-kubelet-plugin (the DaemonSets move: the device plugin's excludes the node, the DRA kubelet
plugin's selects it), readiness, validation, uncordon. In check mode the eviction is listed and nothing changes.
"""
import json
import os
import pathlib
import subprocess
import sys
import time

import pytest
import yaml

kubernetes = pytest.importorskip("kubernetes")
pytest.importorskip("celpy")

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "support"))
from fakenvml.profile import load_profile, simulated_gpu_devices  # noqa: E402  pylint: disable=wrong-import-position

HOST = "switch-h100"
DRA_LABEL = "nvidia.com/dra-kubelet-plugin"
TAGS = "labels,device_plugin,dra,validation"
EXTRA_VARS = {"k8s_device_plugin_wait_timeout": 60, "k8s_device_plugin_wait_delay": 1,
              "gpu_validation_timeout": 60, "gpu_validation_delay": 1,
              "nvidia_dra_driver_wait_timeout": 60, "nvidia_dra_driver_wait_delay": 1, "k8s_gpu_node_drain_timeout": 60}
DRAIN = "Drain the GPU work of the nodes that switch between the device plugin and DRA"
UNCORDON = "Uncordon the nodes that switched between the device plugin and DRA, now validated"
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture(name="cluster")
def fixture_cluster(tmp_path):
    from kubeapi import KubeAPIServer
    from kubeapi.testing import Kube

    out = subprocess.run([str(ROOT / "scripts" / "build-fakenvml.sh")], check=True, capture_output=True, text=True)
    fake_nvml = pathlib.Path(out.stdout.strip().splitlines()[-1]) / "full"
    profile = ROOT / "tests" / "support" / "fakenvml" / "profiles" / "h100x8.conf"
    server = KubeAPIServer(tls=True, kubeconfig_path=str(tmp_path / "kubeconfig")).start()
    try:
        kube = Kube(server.kubeconfig_path, server)
        kube.node(HOST, labels={"kubernetes.io/hostname": HOST}, annotations={
            "kubegpu.io/simulated-gpus": "8",
            "kubegpu.io/simulated-gpu-devices": json.dumps(simulated_gpu_devices(load_profile(profile)))})
        python = tmp_path / "python-node"
        python.write_text("#!/bin/sh\nLD_LIBRARY_PATH=%s FAKENVML_CONFIG=%s exec %s \"$@\"\n"
                          % (fake_nvml, profile, sys.executable))
        python.chmod(0o755)
        core = kube.core()
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "work"}})
        yield {"kube": kube, "core": core, "server": server, "dir": tmp_path, "python": str(python)}
    finally:
        server.stop()


def site(cluster, allocation, check=False):
    """One site run with the host's kubegpu_gpu_allocation; returns the JSON callback's plays."""
    host = {"ansible_connection": "local", "ansible_python_interpreter": cluster["python"],
            "kubegpu_gpu_allocation": allocation}
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = cluster["dir"] / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {
        "gpu_nodes": {"hosts": {HOST: host}}, "k8s_control": {"hosts": {"localhost": local}}}}}))
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_LOCALHOST_WARNING="false")
    for name in ("KUBECONFIG", "K8S_AUTH_KUBECONFIG", "LD_LIBRARY_PATH", "FAKENVML_CONFIG"):
        env.pop(name, None)
    cmd = ["ansible-playbook", "-i", str(inventory), "kubegpu.nvidia.site", "--tags", TAGS,
           "-e", "kubegpu_kubeconfig=%s" % cluster["server"].kubeconfig_path, "-e", json.dumps(EXTRA_VARS)]
    if check:
        cmd += ["--check", "--diff"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("no JSON output\nstdout:\n%s\nstderr:\n%s" % (proc.stdout[-4000:], proc.stderr)) from None
    failures = [(t["task"]["name"], h, r.get("msg", "")) for p in out["plays"] for t in p["tasks"]
                for h, r in t["hosts"].items() if r.get("failed")]
    assert proc.returncode == 0, (failures, proc.stderr[-2000:])
    return out


def results(out, name):
    """The per-host results of the task called ``name`` (``<role> : name`` in a role; each loop item's result for
    a loop) that were not skipped (the labels role runs in the preflight too, as a dry run)."""
    found = []
    for play in out["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"] == name or task["task"]["name"].endswith(" : " + name):
                for res in task["hosts"].values():
                    found.extend(item for item in res.get("results", [res]) if not item.get("skipped"))
    return found


def changed(out):
    return sum(stats.get("changed", 0) for stats in out["stats"].values())


def workload(cluster, name, gpu=None, claim=False):
    """A pod of a ReplicaSet on the node: requesting a GPU (``gpu``: the resource name), holding a claim, or neither."""
    container = {"name": "main", "image": "registry.invalid/app:1"}
    spec = {"nodeName": HOST, "containers": [container], "tolerations": [TOLERATION]}
    if gpu:
        container["resources"] = {"limits": {gpu: "1"}}
    if claim:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
        container["resources"] = {"claims": [{"name": "gpu"}]}
    cluster["core"].create_namespaced_pod("work", {
        "apiVersion": "v1", "kind": "Pod", "spec": spec,
        "metadata": {"name": name, "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name + "-rs", "controller": True,
            "uid": "00000000-0000-4000-8000-%012d" % (sum(map(ord, name)))}]}})


def work_pods(cluster):
    return sorted(p.metadata.name for p in cluster["core"].list_namespaced_pod("work").items
                  if not p.metadata.deletion_timestamp)


def node(cluster):
    return cluster["core"].read_node(HOST)


def pods_on_node(cluster, namespace):
    return [p.metadata.name for p in cluster["core"].list_namespaced_pod(
        namespace, field_selector="spec.nodeName=%s" % HOST).items if not p.metadata.deletion_timestamp]


def slices(cluster):
    api = cluster["kube"].dynamic().resources.get(api_version="resource.k8s.io/v1", kind="ResourceSlice")
    return api.get(field_selector="spec.driver=gpu.nvidia.com").to_dict()["items"]


def wait(predicate, timeout=30):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_switching_drains_gpu_work_first_and_check_mode_only_lists_it(cluster):
    # on the device plugin: the node advertises its GPUs, a training pod uses one, a web pod uses none
    site(cluster, "device_plugin")
    assert node(cluster).status.allocatable["nvidia.com/gpu"] == "8"
    workload(cluster, "train", gpu="nvidia.com/gpu")
    workload(cluster, "web")

    # --check --diff: the switch and its eviction listed, nothing evicted, the node neither cordoned nor relabelled
    out = site(cluster, "dra", check=True)
    (drain,) = results(out, DRAIN)
    assert (drain["changed"], drain["evicted"], drain["cordoned"]) == (True, ["work/train"], True)
    assert "web" not in json.dumps(drain["evicted"])
    (say,) = results(out, "Say which nodes switch between the device plugin and DRA")
    assert say["msg"] == ["node %s switches from the device plugin to DRA: cordoned and drained of its GPU work (pods "
                          "that request nvidia.com/* resources or hold resource claims) before its label %s changes; "
                          "uncordoned once validated" % (HOST, DRA_LABEL)]
    assert work_pods(cluster) == ["train", "web"]
    assert not node(cluster).spec.unschedulable
    assert DRA_LABEL not in node(cluster).metadata.labels

    # the switch to DRA: the GPU pod evicted, the web pod left; the node's GPUs in its slice, validated, uncordoned
    out = site(cluster, "dra")
    (drain,) = results(out, DRAIN)
    assert drain["evicted"] == ["work/train"] and drain["left"]["not_gpu"] == ["work/web"]
    wait(lambda: work_pods(cluster) == ["web"])
    assert node(cluster).metadata.labels[DRA_LABEL] == "true"
    assert not node(cluster).spec.unschedulable
    assert [r["changed"] for r in results(out, UNCORDON)] == [True]
    assert pods_on_node(cluster, "nvidia-device-plugin") == []
    (published,) = slices(cluster)
    assert len(published["spec"]["devices"]) == 8
    assert sorted(d["attributes"]["uuid"]["string"] for d in published["spec"]["devices"]) == sorted(
        gpu["uuid"] for gpu in load_profile("h100x8")["gpus"])
    (validated,) = results(out, "Record the claim validation per node")
    assert [(r["node"], r["passed"]) for r in validated["ansible_facts"]["nvidia_dra_driver_validation"]] == [(HOST, True)]

    # a second run: no switch, nothing drained
    out = site(cluster, "dra")
    assert results(out, DRAIN) == []
    assert work_pods(cluster) == ["web"]

    # and back: the pod holding a claim evicted, the web pod left; nvidia.com/gpu again, no DRA plugin, no slice
    workload(cluster, "infer", claim=True)
    out = site(cluster, "device_plugin")
    (drain,) = results(out, DRAIN)
    assert drain["evicted"] == ["work/infer"]
    wait(lambda: work_pods(cluster) == ["web"])
    assert DRA_LABEL not in node(cluster).metadata.labels
    assert not node(cluster).spec.unschedulable
    assert node(cluster).status.allocatable["nvidia.com/gpu"] == "8"
    assert pods_on_node(cluster, "nvidia-dra-driver-gpu") == []
    assert slices(cluster) == []
