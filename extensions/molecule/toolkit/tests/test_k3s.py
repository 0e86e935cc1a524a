"""k3s finds the NVIDIA runtime itself from v1.29 on; older versions get their config.toml.tmpl edited.

The nodes run a stand-in k3s (tests/support/k3s_standin) that does to its containerd configuration what k3s
does when it starts; the role runs with nvidia_container_toolkit_runtimes [k3s], set_as_default true, and
nvidia-container-runtime's mode cdi with two CDI annotation prefixes.
"""
import os
import re
import subprocess

import pytest
import testinfra.utils.ansible_runner
import tomlkit

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("k3s")
assert sorted(testinfra_hosts) == ["toolkit-k3s-node", "toolkit-k3s-old"], testinfra_hosts

DIR = "/var/lib/rancher/k3s/agent/etc/containerd"
DROP_IN = "/etc/rancher/k3s/config.yaml.d/90-kubegpu-nvidia-runtime.yaml"
CRI = 'plugins."io.containerd.grpc.v1.cri".containerd'


def name(host):
    return host.backend.get_hostname()


def generated(host):
    return tomlkit.parse(host.file(DIR + "/config.toml").content_string)


def containerd_table(doc):
    return doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]


def test_k3s_runs_with_the_nvidia_runtime_as_its_default(host):
    assert host.service("k3s").is_running
    containerd = containerd_table(generated(host))
    assert containerd["default_runtime_name"] == "nvidia"
    assert containerd["runtimes"]["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    # k3s started after the toolkit was installed (it finds the runtime when it starts)
    started = host.check_output("date -d \"$(systemctl show -p ActiveEnterTimestamp --value k3s)\" +%s")
    installed = host.check_output("stat -c %Y /usr/bin/nvidia-container-runtime")
    assert int(started) >= int(installed)


def test_v1_29_and_newer_find_the_runtime_without_a_template(host):
    if name(host) != "toolkit-k3s-node":
        pytest.skip("k3s v1.28")
    assert not host.file(DIR + "/config.toml.tmpl").exists
    drop_in = host.file(DROP_IN)
    assert drop_in.content_string.splitlines()[-1] == "default-runtime: nvidia"
    assert (drop_in.user, drop_in.mode) == ("root", 0o644)
    # k3s added the nvidia-cdi runtime by itself too
    assert "nvidia-cdi" in containerd_table(generated(host))["runtimes"]
    assert not host.file("/var/lib/kubegpu-nvidia-container-runtimes.record").exists


def test_older_versions_get_the_template_with_the_three_runtimes(host):
    if name(host) != "toolkit-k3s-old":
        pytest.skip("k3s v1.30")
    template = host.file(DIR + "/config.toml.tmpl")
    assert template.exists and "/usr/bin/nvidia-container-runtime" in template.content_string
    assert not host.file(DROP_IN).exists
    record = host.file("/var/lib/kubegpu-nvidia-container-runtimes.record").content_string
    assert re.search(r"^k3s [0-9a-f]{64} %s/config.toml.tmpl [0-9a-f]{64}$" % re.escape(DIR), record, re.M), record
    # what k3s rendered from it: the GPU Operator's three runtimes, each with its binary
    runtimes = containerd_table(generated(host))["runtimes"]
    for runtime, binary in (("nvidia", ""), ("nvidia-cdi", ".cdi"), ("nvidia-legacy", ".legacy")):
        assert runtimes[runtime]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime" + binary, runtime
        assert runtimes[runtime]["options"]["SystemdCgroup"] is True, runtime


PLAYBOOK = """
- name: The toolkit role on the k3s v1.28 node, as converge runs it
  hosts: toolkit-k3s-old
  gather_facts: false
  vars_files:
    - %s/toolkit_repo/vars.yml
  vars:
    nvidia_container_toolkit_runtimes: [k3s]
    nvidia_container_toolkit_set_as_default: true
    nvidia_container_toolkit_runtime_mode: cdi
    nvidia_container_toolkit_runtime_cdi_annotation_prefixes: [cdi.k8s.io/, nvidia.cdi.k8s.io/]
  roles:
    - role: kubegpu.nvidia.nvidia_container_toolkit
""" % os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]


def test_an_older_toolkit_gets_its_cdi_spec_again_when_the_driver_changes(host, tmp_path):
    if name(host) != "toolkit-k3s-old":
        pytest.skip("toolkit 1.20 (nvidia-cdi-refresh)")
    spec = host.file("/etc/cdi/nvidia.yaml")
    assert spec.exists and "libcuda.so.535.104.05" in spec.content_string  # the simulated T4's driver
    assert not host.file("/lib/systemd/system/nvidia-cdi-refresh.path").exists
    profile = host.file("/etc/fakenvml/gpus.conf").content_string
    playbook = tmp_path / "toolkit.yml"
    playbook.write_text(PLAYBOOK)
    try:
        host.run_test("sed -i 's/^driver_version = .*/driver_version = 550.127.08/' /etc/fakenvml/gpus.conf")
        proc = subprocess.run(["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(playbook)],
                              capture_output=True, text=True, check=False, env=dict(os.environ, ANSIBLE_NOCOLOR="1"))
        assert proc.returncode == 0, proc.stdout[-4000:]
        assert "libcuda.so.550.127.08" in host.file("/etc/cdi/nvidia.yaml").content_string
        assert "changed: [toolkit-k3s-old]" in proc.stdout.split("TASK [kubegpu.nvidia.nvidia_container_toolkit : Keep the CDI "
                                                                 "specification current]")[1].split("TASK [")[0]
    finally:
        host.run_test("cat > /etc/fakenvml/gpus.conf <<'EOF'\n%sEOF" % profile)


def test_nvidia_container_runtime_is_in_cdi_mode_with_both_prefixes(host):
    doc = tomlkit.parse(host.file("/etc/nvidia-container-runtime/config.toml").content_string)
    runtime = doc["nvidia-container-runtime"]
    assert runtime["mode"] == "cdi"
    assert runtime["modes"]["cdi"]["annotation-prefixes"] == ["cdi.k8s.io/", "nvidia.cdi.k8s.io/"]
    # the rest of the file the package wrote is kept, comments included
    text = host.file("/etc/nvidia-container-runtime/config.toml").content_string
    assert '#swarm-resource = "DOCKER_RESOURCE_GPU"' in text and runtime["log-level"] == "info"
