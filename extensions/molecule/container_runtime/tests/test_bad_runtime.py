"""An unknown runtime name fails the host with one message, before anything is installed."""

import os

import testinfra.utils.ansible_runner

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]
).get_hosts("container-runtime-cpu")
assert testinfra_hosts == ["container-runtime-cpu"], testinfra_hosts

HERE = os.path.dirname(os.path.abspath(__file__))


def test_unknown_runtime_fails_before_anything_is_installed(host, run_playbook):
    returncode, output = run_playbook(os.path.join(HERE, "..", "bad_runtime.yml"))
    assert returncode == 2, output
    assert ("Unknown container runtime(s) podman in nvidia_container_toolkit_runtimes: "
            "choose from containerd, k3s, rke2, crio, docker") in output, output
    assert "changed=0" in output and "failed=1" in output, output
    assert "Traceback" not in output, output
    # the runtimes are checked before the install tasks: the node still has no toolkit and no source
    assert not host.package("nvidia-container-toolkit").is_installed
    assert not host.file("/etc/apt/sources.list.d/nvidia-container-toolkit.list").exists
    assert "nvidia" not in host.file("/etc/containerd/config.toml").content_string
