"""kubegpu.nvidia.site --check --diff on fresh nodes runs to the end, shows its changes and makes none.

The nodes are as lab/prepare.yml left them (no toolkit, no repository, containerd without the nvidia
runtime) and the Kubernetes API test server has only their Node objects. One check-mode run of site.yml
happens between two snapshots: of every node (files written under /etc, /usr, /var/lib and /opt since a
marker, the installed packages, the units' enablement) and of the cluster (the API's resourceVersion, which
the test server bumps on every write, and every Node's labels and taints).
"""
import os
import re
import subprocess
import time

import pytest
import testinfra
import testinfra.utils.ansible_runner

kubernetes = pytest.importorskip("kubernetes")

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
STATE = os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]
testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY).get_hosts("gpu_nodes")
GPU_NODES = ["site-check-h100", "site-check-t4"]
CPU_NODE = "site-check-cpu"
assert sorted(testinfra_hosts) == sorted(GPU_NODES + [CPU_NODE]), testinfra_hosts

MARKER = "/run/kubegpu-site-check.marker"
SCANNED = "/etc /usr /var/lib /opt"
# written by the node itself while the run goes on, not by the run
VOLATILE = re.compile(r"^/var/lib/(systemd|private|containerd|docker)/")


def node(name):
    return testinfra.get_host("ansible://%s" % name, ansible_inventory=INVENTORY)


def node_state(host):
    return {
        "packages": host.check_output("dpkg-query --show --showformat='${Package} ${Version} ${db:Status-Abbrev}\\n'"),
        "unit files": host.check_output("systemctl list-unit-files --no-legend --no-pager"),
        "containerd started": host.check_output("systemctl show --property=ActiveEnterTimestamp --value containerd"),
    }


def cluster_state():
    client = kubernetes.config.new_client_from_config(config_file=os.path.join(STATE, "kubeconfig"))
    core = kubernetes.client.CoreV1Api(client)
    nodes = core.list_node()
    return {
        # the test server bumps one resourceVersion on every write to any object
        "resourceVersion": nodes.metadata.resource_version,
        "namespaces": sorted(ns.metadata.name for ns in core.list_namespace().items),
        "nodes": {n.metadata.name: (n.metadata.labels, [t.to_dict() for t in (n.spec.taints if n.spec else None) or []])
                  for n in nodes.items},
        "pods": sorted("%s/%s" % (p.metadata.namespace, p.metadata.name) for p in core.list_pod_for_all_namespaces().items),
    }


class CheckRun:
    """site.yml's output, and the nodes and the cluster before and after it."""


@pytest.fixture(name="run", scope="module")
def fixture_run():
    hosts = {name: node(name) for name in testinfra_hosts}
    run = CheckRun()
    for host in hosts.values():
        host.run_test("touch %s" % MARKER)
    time.sleep(1.1)  # file times are compared with the marker's, to the second on some file systems
    run.nodes_before = {name: node_state(host) for name, host in hosts.items()}
    run.cluster_before = cluster_state()
    proc = subprocess.run(
        ["ansible-playbook", "-i", INVENTORY, "-e", "@%s" % os.path.join(STATE, "site-vars.yml"),
         "kubegpu.nvidia.site", "--check", "--diff"],
        capture_output=True, text=True, check=False,
        env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0"))
    run.rc, run.output = proc.returncode, proc.stdout + proc.stderr
    run.nodes_after = {name: node_state(host) for name, host in hosts.items()}
    run.cluster_after = cluster_state()
    run.written = {}
    for name, host in hosts.items():
        found = host.check_output("find %s -xdev -newer %s ! -type d 2>/dev/null || true" % (SCANNED, MARKER))
        run.written[name] = [path for path in found.splitlines() if path and not VOLATILE.match(path)]
    return run


def task_output(output, name):
    """What one task printed (up to the next task or play)."""
    start = output.index("TASK [%s]" % name)
    end = min(i for i in (output.find("\nTASK [", start + 1), output.find("\nPLAY ", start + 1), len(output)) if i > 0)
    return output[start:end]


def test_the_run_reaches_its_summary_without_a_failure(run):
    assert run.rc == 0, run.output[-6000:]
    assert re.search(r"NODE +GPUS +DRIVER +RUNTIME +LABELS +ALLOCATABLE +VALIDATION", run.output), run.output[-3000:]
    for name in GPU_NODES + [CPU_NODE]:
        assert re.search(r"^%s +: ok=\d+ +changed=\d+ +unreachable=0 +failed=0 " % name, run.output, re.M), run.output[-3000:]
    # the toolkit's packages are reported as would-install, not looked up in an index the node does not have yet
    assert "No package matching 'nvidia-container-toolkit" not in run.output
    assert "No package matching 'libnvidia-container" not in run.output


def test_nothing_changed_on_any_node(run):
    assert run.written == {name: [] for name in testinfra_hosts}
    assert run.nodes_after == run.nodes_before


def test_nothing_changed_in_the_cluster(run):
    assert run.cluster_after == run.cluster_before


def test_it_shows_the_packages_it_would_install_from_the_repository_it_would_set_up(run):
    repo = task_output(run.output, "kubegpu.nvidia.nvidia_container_toolkit : Configure the NVIDIA Container Toolkit repository")
    assert "+++ after: /etc/apt/sources.list.d/nvidia-container-toolkit.list" in repo
    assert "+deb [signed-by=/etc/apt/keyrings/nvidia-container-toolkit.asc]" in repo
    report = task_output(run.output, "kubegpu.nvidia.nvidia_container_toolkit : Report the toolkit packages this run would "
                                     "install from the repository it sets up")
    for name in GPU_NODES:
        assert "changed: [%s]" % name in report, report
    assert "would install nvidia-container-toolkit=1.20.0-1, nvidia-container-toolkit-base=1.20.0-1" in report, report


def test_it_shows_the_containerd_diff(run):
    configure = task_output(run.output, "kubegpu.nvidia.nvidia_container_toolkit : Configure the nvidia runtime in each "
                                        "container runtime")
    assert configure.count("+++ after: /etc/containerd/config.toml") == len(GPU_NODES), configure
    assert '+            BinaryName = "/usr/bin/nvidia-container-runtime"' in configure, configure


def test_it_shows_the_label_and_taint_diffs(run):
    labels = task_output(run.output, "kubegpu.nvidia.k8s_gpu_node : Label and taint the GPU nodes in one API batch")
    for name in GPU_NODES:
        assert "+++ after: node/%s" % name in labels, labels
    # (the diff is YAML or JSON, as the callback prints it)
    assert re.search(r"""^\+\s+"?nvidia\.com/gpu\.present"?: ["']true["']""", labels, re.M), labels
    assert re.search(r"^\+.*nvidia\.com/gpu=present:NoSchedule", labels, re.M), labels
    assert "node/%s" % CPU_NODE not in labels


def test_it_shows_the_device_plugin_objects(run):
    shown = task_output(run.output, "kubegpu.nvidia.k8s_device_plugin : Show the device plugin objects this run would "
                                    "create in its new namespaces")
    kinds = re.findall(r"""^\s*"?kind"?: "?(\w+)"?,?$""", shown, re.M)
    assert {"DaemonSet", "ConfigMap", "ServiceAccount", "ClusterRole"} <= set(kinds), kinds
    assert "nvidia-device-plugin" in shown
