"""A node whose GPU facts show no GPU is left alone."""

import os

import testinfra.utils.ansible_runner

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]
).get_hosts("container-runtime-cpu")
assert testinfra_hosts == ["container-runtime-cpu"], testinfra_hosts


def test_cpu_node_is_skipped(host):
    assert not host.package("nvidia-container-toolkit").is_installed
    assert not host.file("/etc/apt/sources.list.d/nvidia-container-toolkit.list").exists
    assert not host.file("/etc/cdi/nvidia.yaml").exists
    config = host.file("/etc/containerd/config.toml").content_string
    assert "nvidia" not in config
    assert not host.check_output("find /etc/containerd -maxdepth 1 -name 'config.toml.*~'")
    assert host.service("containerd").is_running
