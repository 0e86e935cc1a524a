"""Role kubegpu.nvidia.gpu_validation against the Kubernetes API test server.

The device plugin role runs first so the simulated GPU nodes advertise nvidia.com/gpu;
the test server's kubelet stand-in runs a GPU pod to `Test PASSED` where it fits and leaves
it Pending/Unschedulable (with the scheduler's message) where it does not.
"""
import pytest

from test_device_plugin_role import BASE, cluster, failure, run_playbook  # noqa: F401  pylint: disable=import-error,unused-import

kubernetes = pytest.importorskip("kubernetes")

PLAYBOOK = """
- name: Deploy the device plugin and validate the GPU nodes
  hosts: localhost
  gather_facts: false
  roles:
    - role: kubegpu.nvidia.k8s_device_plugin
      when: with_plugin | default(true) | bool
    - role: kubegpu.nvidia.gpu_validation
"""

VALIDATION = {"gpu_validation_delay": 1, "gpu_validation_timeout": 30, "gpu_validation_unschedulable_timeout": 3}


def validation_pods(cluster_):  # pylint: disable=redefined-outer-name
    return cluster_["core"].list_namespaced_pod("gpu-validation").items


def test_every_gpu_node_passes_and_the_pods_are_deleted(cluster):  # pylint: disable=redefined-outer-name
    (cluster["dir"] / "validate.yml").write_text(PLAYBOOK)
    rc, stats, tasks = run_playbook(cluster["dir"], cluster["kubeconfig"], dict(BASE, **VALIDATION),
                                    playbook="validate.yml")
    assert rc == 0, failure(tasks)
    assert stats["changed"] >= 1
    results = tasks["Record the result per node"]["ansible_facts"]["gpu_validation_results"]
    assert [(r["node"], r["passed"], r["phase"]) for r in results] == [
        ("h100", True, "Succeeded"), ("ip-10-66-0-4", True, "Succeeded")]
    table = tasks["Show the result per node"]["msg"]
    assert table[0].split() == ["NODE", "RESULT", "DETAIL"]
    assert table[1].split()[:2] == ["h100", "PASS"]
    assert validation_pods(cluster) == []
    # the pods come and go: only the namespace is a change
    run = tasks["Validate the GPU nodes"]
    assert run["changed"] is True

    # a second run validates again (new pods, logs read) and reports no change
    rc, stats, tasks = run_playbook(cluster["dir"], cluster["kubeconfig"], dict(BASE, **VALIDATION),
                                    playbook="validate.yml")
    assert rc == 0, failure(tasks)
    assert stats["changed"] == 0, [name for name, res in tasks.items() if res.get("changed")]
    run = tasks["Validate the GPU nodes"]
    assert [(r["pod"], r["phase"], r["reason"]) for r in run["results"]] == [
        ("gpu-validation-h100", "Succeeded", "Test PASSED"), ("gpu-validation-ip-10-66-0-4", "Succeeded", "Test PASSED")]
    # one node listing, namespace read, leftover listing, two creates, one poll, two log reads, two deletes,
    # one listing until gone
    assert run["api_requests"] == {"list": 4, "get": 3, "create": 2, "delete": 2}
    assert validation_pods(cluster) == []


def test_a_node_that_cannot_take_the_pod_fails_with_the_scheduler_reason(cluster):  # pylint: disable=redefined-outer-name
    (cluster["dir"] / "validate.yml").write_text(PLAYBOOK)
    rc, _stats, tasks = run_playbook(cluster["dir"], cluster["kubeconfig"],
                                     dict(BASE, gpu_validation_nodes=["h100", "cpu"], **VALIDATION),
                                     playbook="validate.yml")
    assert rc != 0
    name, result = failure(tasks)
    assert name == "Fail when a node did not pass"
    assert "GPU validation failed on 1 of 2 node(s): cpu: Unschedulable: 0/3 nodes are available" in result["msg"]
    assert "Insufficient nvidia.com/gpu" in result["msg"]
    rows = {line.split()[0]: line.split()[1] for line in tasks["Show the result per node"]["msg"][1:]}
    assert rows == {"h100": "PASS", "cpu": "FAIL"}
    assert validation_pods(cluster) == []


def test_check_mode_runs_no_pod_and_reports_the_namespace(cluster):  # pylint: disable=redefined-outer-name
    (cluster["dir"] / "validate.yml").write_text(PLAYBOOK)
    rc, stats, tasks = run_playbook(cluster["dir"], cluster["kubeconfig"],
                                    dict(BASE, with_plugin=False, **VALIDATION), check=True, playbook="validate.yml")
    assert rc == 0, failure(tasks)
    assert stats["changed"] == 1
    run = tasks["Validate the GPU nodes"]
    assert (run["changed"], run["results"], run["nodes"]) == (True, [], ["h100", "ip-10-66-0-4"])
    assert tasks["Record the result per node"].get("skipped") is True
    assert tasks["Fail when a node did not pass"].get("skipped") is True
    names = [ns.metadata.name for ns in cluster["core"].list_namespace().items]
    assert "gpu-validation" not in names


def test_no_node_to_validate_fails_with_the_selector(cluster):  # pylint: disable=redefined-outer-name
    (cluster["dir"] / "validate.yml").write_text(PLAYBOOK)
    rc, _stats, tasks = run_playbook(cluster["dir"], cluster["kubeconfig"],
                                     dict(BASE, with_plugin=False, gpu_validation_node_selector="gpu=none",
                                          **VALIDATION), playbook="validate.yml")
    assert rc != 0
    name, result = failure(tasks)
    assert name == "Validate the GPU nodes"
    assert result["msg"] == ("No node to validate: no node matches the label selector gpu=none "
                             "(label the GPU nodes, or name them in nodes)")


RECORDING_PLAYBOOK = """
- name: Validate the GPU nodes, recording each pass, and trust the records that hold
  hosts: localhost
  gather_facts: false
  tasks:
    - name: List the nodes
      kubernetes.core.k8s_info:
        kind: Node
      register: listed
    - name: Validate
      ansible.builtin.include_role:
        name: kubegpu.nvidia.gpu_validation
      vars:
        gpu_validation_nodes: [h100, ip-10-66-0-4]
        gpu_validation_record: true
        gpu_validation_revision: "{{ revision | default('plugin-1') }}"
        gpu_validation_known_nodes: "{{ listed.resources if trust | default(true) | bool else [] }}"
"""


def test_recorded_passes_spare_the_pods_until_something_they_depend_on_changes(cluster):  # pylint: disable=redefined-outer-name
    (cluster["dir"] / "record.yml").write_text(RECORDING_PLAYBOOK)
    (cluster["dir"] / "validate.yml").write_text(PLAYBOOK)
    # the device plugin first, so that the nodes advertise their GPUs
    rc, _stats, tasks = run_playbook(cluster["dir"], cluster["kubeconfig"], dict(BASE, **VALIDATION),
                                     playbook="validate.yml")
    assert rc == 0, failure(tasks)

    def run(**extra):
        rc_, stats_, tasks_ = run_playbook(cluster["dir"], cluster["kubeconfig"], dict(BASE, **dict(VALIDATION, **extra)),
                                           playbook="record.yml")
        assert rc_ == 0, failure(tasks_)
        results = tasks_["Record the result per node"]["ansible_facts"]["gpu_validation_results"]
        return stats_, tasks_, dict((r["node"], r["phase"]) for r in results)

    # no record yet: a pod per node, and each pass recorded (a change)
    stats, tasks, phases = run()
    assert phases == {"h100": "Succeeded", "ip-10-66-0-4": "Succeeded"}
    assert stats["changed"] == 1 and tasks["Validate the GPU nodes"]["api_requests"]["patch"] == 2
    annotations = cluster["core"].read_node("h100").metadata.annotations
    assert '"passed":' in annotations["kubegpu.nvidia/gpu-validation"]

    # the records hold: no pod, the module does not run, nothing changes, both nodes pass from their records
    stats, tasks, phases = run()
    assert phases == {"h100": "Recorded", "ip-10-66-0-4": "Recorded"}
    assert tasks["Validate the GPU nodes"].get("skipped") is True
    assert stats["changed"] == 0
    assert tasks["Show the result per node"]["msg"][1].split()[:4] == ["h100", "PASS", "passed", "at"]

    # a node whose GPU labels changed gets its pod again; another revision, or no trust, validates every node
    cluster["core"].patch_node("h100", {"metadata": {"labels": {"nvidia.com/gpu.product": "NVIDIA-H100-NVL"}}})
    _stats, tasks, phases = run()
    assert phases == {"h100": "Succeeded", "ip-10-66-0-4": "Recorded"}
    assert tasks["Validate the GPU nodes"]["nodes"] == ["h100"]
    assert run(revision="plugin-2")[2] == {"h100": "Succeeded", "ip-10-66-0-4": "Succeeded"}
    stats, tasks, phases = run(revision="plugin-2", trust=False)
    assert phases == {"h100": "Succeeded", "ip-10-66-0-4": "Succeeded"}
    assert stats["changed"] == 0  # the records held already (same state, same revision)
    assert validation_pods(cluster) == []
