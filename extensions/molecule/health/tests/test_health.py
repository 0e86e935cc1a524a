"""What kubegpu.nvidia.health leaves in the Kubernetes API test server, with one lab node's GPU failing and then
recovered (its fake NVML profile changed on the node)."""
import json
import os
import subprocess

import pytest
import testinfra.utils.ansible_runner

kubernetes = pytest.importorskip("kubernetes")

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]
).get_hosts("gpu_nodes")

STATE = os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]
SICK = "health-sick"
HEALTH = "nvidia.com/gpu.health"
HEALTH_TAINT = ("nvidia.com/gpu.health", "unhealthy", "NoSchedule")
PROFILE = "/etc/fakenvml/gpus.conf"


@pytest.fixture(name="core", scope="module")
def fixture_core():
    client = kubernetes.config.new_client_from_config(config_file=os.path.join(STATE, "kubeconfig"))
    return kubernetes.client.CoreV1Api(client)


def summary():
    with open(os.path.join(STATE, "summary.json"), encoding="utf-8") as handle:
        return {row["host"]: row for row in json.load(handle)}


def state(core, node):
    obj = core.read_node(node)
    taints = (obj.spec.taints if obj.spec else None) or []
    return dict(obj.metadata.labels), [(t.key, t.value, t.effect) for t in taints]


def name(host):
    return host.backend.get_hostname()


def test_the_failing_node_is_labelled_and_tainted_the_other_only_labelled(host, core):
    labels, taints = state(core, name(host))
    if name(host) == SICK:
        assert labels[HEALTH] == "unhealthy"
        assert HEALTH_TAINT in taints
    else:
        assert labels[HEALTH] == "healthy"
        assert not [t for t in taints if t[0] == HEALTH]


def test_the_summary_says_why(host):
    row = summary()[name(host)]
    if name(host) == SICK:
        assert row["health"].startswith("unhealthy: GPU 0 (00000000:00:1E.0): 2 uncorrectable ECC errors")
        assert row["health"].endswith("(reset the GPU); tainted")
        assert [(f["signal"], f["severity"], f["action"]) for f in row["health_findings"]] == [
            ("ecc", "unhealthy", "reset_gpu")]
    else:
        assert row["health"] == "healthy" and row["health_findings"] == []


def test_once_the_fault_is_cleared_the_next_run_removes_the_taint_and_nothing_else(host, core):
    if name(host) != SICK:
        pytest.skip("the failing node only")
    labels, taints = state(core, SICK)
    other_labels, other_taints = state(core, "health-well")
    assert host.run("sed -i '/^ecc_volatile_uncorrected/d' %s" % PROFILE).rc == 0
    assert "ecc_volatile_uncorrected" not in host.file(PROFILE).content_string
    run = subprocess.run(
        ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], "kubegpu.nvidia.health",
         "-e", "@%s" % os.path.join(STATE, "site-vars.yml"),
         "-e", "kubegpu_summary_path=%s" % os.path.join(STATE, "summary.json"),
         "-e", json.dumps({"kubegpu_health_options": {"kernel_log": "none"}})],
        capture_output=True, text=True, check=False, timeout=600, env=dict(os.environ, ANSIBLE_NOCOLOR="1"))
    assert run.returncode == 0, run.stdout[-3000:]
    after_labels, after_taints = state(core, SICK)
    assert after_labels == dict(labels, **{HEALTH: "healthy"})
    assert after_taints == [t for t in taints if t != HEALTH_TAINT]
    assert state(core, "health-well") == (other_labels, other_taints)
    assert summary()[SICK]["health"] == "healthy; untainted"
