"""Role kubegpu.nvidia.k8s_gpu_node: a playbook run against the Kubernetes API with a small inventory.

A first play stands in for nvidia_gpu_facts: it sets each host's nvidia_gpu facts (cacheable set_fact, so
they land in ansible_facts) from the inventory, so no GPU host is needed; the role's single module call
runs on localhost.
"""
import json
import uuid

import pytest

import ansible_run
from test_k8s_gpu_label_module import A100X4_MIG, GPU_TAINT, H100X8, T4X1  # pylint: disable=import-error

kubernetes = pytest.importorskip("kubernetes")

PLAYBOOK = """
- name: Set the GPU facts of the lab profiles
  hosts: gpu
  gather_facts: false
  tasks:
    - name: Set nvidia_gpu facts
      ansible.builtin.set_fact:
        nvidia_gpu: "{{ test_nvidia_gpu }}"
        cacheable: true
      when: test_nvidia_gpu is defined

- name: Label and taint the GPU nodes
  hosts: gpu
  gather_facts: false
  roles:
    - role: kubegpu.nvidia.k8s_gpu_node
"""


@pytest.fixture
def lab(kube, tmp_path):
    """Three GPU hosts and a CPU host; their nodes exist under other names (found by hostname and InternalIP)."""
    core = kubernetes.client.CoreV1Api(kube.api_client())
    suffix = uuid.uuid4().hex[:8]
    hosts = {
        # inventory name: (node name, node addresses, facts, host variables)
        "h100-%s" % suffix: ("h100-%s" % suffix, [], H100X8, {}),
        "a100-%s" % suffix: ("node-a100-%s.cluster.local" % suffix,
                             [{"type": "Hostname", "address": "a100-%s" % suffix}], A100X4_MIG, {}),
        "t4-%s" % suffix: ("ip-10-66-0-4-%s" % suffix, [{"type": "InternalIP", "address": "10.66.0.4"}], T4X1,
                           {"ansible_host": "10.66.0.4"}),
        "cpu-%s" % suffix: ("cpu-%s" % suffix, [], {"present": False, "count": 0, "devices": []}, {}),
    }
    inventory = {"gpu": {"hosts": {}}}
    for host, (node, addresses, facts, hostvars) in hosts.items():
        core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
        if addresses:
            core.patch_node_status(node, {"status": {"addresses": addresses}},
                                   _content_type="application/strategic-merge-patch+json")
        inventory["gpu"]["hosts"][host] = dict(hostvars, ansible_connection="local", test_nvidia_gpu=facts)
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "site.yml").write_text(PLAYBOOK)
    yield {"dir": tmp_path, "hosts": hosts, "core": core}
    for node, _addresses, _facts, _hostvars in hosts.values():
        try:
            core.delete_node(node)
        except kubernetes.client.exceptions.ApiException:
            pass


def play(kube, lab, extra_vars=None):
    res = ansible_run.run_playbook(lab["dir"] / "site.yml", lab["dir"] / "inventory.json", extra_vars,
                                   kubeconfig=kube.kubeconfig, timeout=300)
    return res.rc, res.task_hosts()


def label_result(tasks):
    (hosts,) = [h for name, h in tasks.items() if name.endswith("Label and taint the GPU nodes in one API batch")]
    results = [r for r in hosts.values() if not r.get("skipped")]
    assert len(results) == 1, "the module must run once for the whole inventory"
    return results[0]


def test_role_labels_and_taints_every_gpu_host_once(kube, lab):
    core = lab["core"]
    rc, tasks = play(kube, lab)
    result = label_result(tasks)
    assert rc == 0, result
    assert result["changed"] is True
    assert result["api_requests"] == {"list": 1, "patch": 3}
    resolved = dict((r.get("host", r["name"]), r["name"]) for r in result["nodes"])
    expected = dict((h, n) for h, (n, _a, f, _v) in lab["hosts"].items() if f["present"])
    assert resolved == expected
    for host, (node_name, _a, facts, _v) in lab["hosts"].items():
        node = core.read_node(node_name)
        labels = node.metadata.labels or {}
        taints = [{"key": t.key, "value": t.value or "", "effect": t.effect} for t in ((node.spec and node.spec.taints) or [])]
        if facts["present"]:
            assert labels["nvidia.com/gpu.count"] == str(facts["count"]), host
            assert labels["accelerator"].startswith("nvidia-"), host
            assert taints == [GPU_TAINT], host
        else:
            assert "nvidia.com/gpu.present" not in labels and taints == [], host

    rc, tasks = play(kube, lab)
    again = label_result(tasks)
    assert rc == 0
    assert again["changed"] is False
    assert again["api_requests"] == {"list": 1}


def test_role_without_taint(kube, lab):
    rc, tasks = play(kube, lab, {"k8s_gpu_node_taints": []})
    assert rc == 0
    for node_name, _a, facts, _v in lab["hosts"].values():
        node = lab["core"].read_node(node_name)
        assert not (node.spec and node.spec.taints)
        if facts["present"]:
            assert node.metadata.labels["nvidia.com/gpu.present"] == "true"


def test_role_fails_naming_a_host_without_a_node(kube, lab):
    inventory = json.loads((lab["dir"] / "inventory.json").read_text())
    inventory["gpu"]["hosts"]["ghost-gpu"] = {"ansible_connection": "local", "ansible_host": "10.250.0.1",
                                              "test_nvidia_gpu": T4X1}
    (lab["dir"] / "inventory.json").write_text(json.dumps(inventory))
    rc, tasks = play(kube, lab)
    result = label_result(tasks)
    assert rc != 0
    assert result["failed"] is True
    assert "ghost-gpu" in result["msg"] and "no Kubernetes node" in result["msg"]
    assert "patch" not in result["api_requests"]


def test_role_fails_naming_hosts_without_facts(kube, lab):
    inventory = json.loads((lab["dir"] / "inventory.json").read_text())
    inventory["gpu"]["hosts"]["nofacts-gpu"] = {"ansible_connection": "local"}
    (lab["dir"] / "inventory.json").write_text(json.dumps(inventory))
    rc, tasks = play(kube, lab)
    assert rc != 0
    (hosts,) = [h for name, h in tasks.items() if name.endswith("Check the role's input")]
    (result,) = hosts.values()
    assert result["failed"] is True
    assert "no nvidia_gpu facts for nofacts-gpu:" in result["msg"]
