"""k3s finds the NVIDIA runtime itself from v1.29 on; older versions get their config.toml.tmpl edited.

The nodes run a stand-in k3s (tests/support/k3s_standin) that does to its containerd configuration what k3s
does when it starts; the role runs with nvidia_container_toolkit_runtimes [k3s], set_as_default true, and
nvidia-container-runtime's mode cdi with two CDI annotation prefixes.
"""
import os
import re

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


def test_older_versions_get_the_template(host):
    if name(host) != "toolkit-k3s-old":
        pytest.skip("k3s v1.30")
    template = host.file(DIR + "/config.toml.tmpl")
    assert template.exists and "/usr/bin/nvidia-container-runtime" in template.content_string
    assert not host.file(DROP_IN).exists
    record = host.file("/var/lib/kubegpu-nvidia-container-runtimes.record").content_string
    assert re.search(r"^k3s [0-9a-f]{64} %s/config.toml.tmpl [0-9a-f]{64}$" % re.escape(DIR), record, re.M), record


def test_nvidia_container_runtime_is_in_cdi_mode_with_both_prefixes(host):
    doc = tomlkit.parse(host.file("/etc/nvidia-container-runtime/config.toml").content_string)
    runtime = doc["nvidia-container-runtime"]
    assert runtime["mode"] == "cdi"
    assert runtime["modes"]["cdi"]["annotation-prefixes"] == ["cdi.k8s.io/", "nvidia.cdi.k8s.io/"]
    # the rest of the file the package wrote is kept, comments included
    text = host.file("/etc/nvidia-container-runtime/config.toml").content_string
    assert '#swarm-resource = "DOCKER_RESOURCE_GPU"' in text and runtime["log-level"] == "info"
