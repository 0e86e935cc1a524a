"""The toolkit is installed from the local mirror and both runtimes run the nvidia runtime."""

import json
import os
import re

import testinfra.utils.ansible_runner

GPU_NODES = ["container-runtime-containerd", "container-runtime-docker"]
testinfra_hosts = [
    host for host in testinfra.utils.ansible_runner.AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("gpu_nodes")
    if host in GPU_NODES
]
# without hosts pytest would skip every test here
assert sorted(testinfra_hosts) == GPU_NODES, testinfra_hosts

RUNTIME = "/usr/bin/nvidia-container-runtime"
PACKAGES = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1"]


def name(host):
    return host.backend.get_hostname()


def nvidia_options(dump):
    """The body of the nvidia runtime's options table in a containerd config dump."""
    match = re.search(r'\.runtimes\.nvidia\.options\]\n((?:[ \t]+[^\[\s].*\n)*)', dump)
    assert match, "no nvidia runtime options table in:\n" + dump
    return match.group(1)


def started_at(host, service):
    stamp = host.check_output("systemctl show -p ActiveEnterTimestamp --value %s" % service)
    return int(host.check_output("date -d '%s' +%%s" % stamp))


def modified_at(host, path):
    return int(host.check_output("stat -c %%Y %s" % path))


def test_pinned_packages_from_the_mirror(host):
    # The mirror has 1.17.8-1, 1.18.1-1 and 1.20.0-1; the role pins 1.20.0-1 (the toolkit scenario
    # moves a node between pinned versions: extensions/molecule/toolkit/tests/test_key_rotation.py).
    for package in PACKAGES:
        assert host.package(package).version == "1.20.0-1", package
    source = host.file("/etc/apt/sources.list.d/nvidia-container-toolkit.list").content_string
    assert re.search(r"^deb \[signed-by=/etc/apt/keyrings/nvidia-container-toolkit.asc\] http://[0-9.]+:\d+/stable/deb/\$\(ARCH\) /$",
                     source, re.M), source
    key = host.file("/etc/apt/keyrings/nvidia-container-toolkit.asc")
    assert key.content_string.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    assert (key.user, key.group, key.mode) == ("root", "root", 0o644)
    # the key the mirror signs with, which prepare trusted by its fingerprint
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "toolkit_repo", "vars.yml"), encoding="utf-8") as handle:
        trusted = handle.read()
    listing = host.check_output("gpg --show-keys --with-colons /etc/apt/keyrings/nvidia-container-toolkit.asc")
    fingerprint = [line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:")][0]
    assert fingerprint in trusted
    assert host.file(RUNTIME).mode == 0o755


def test_containerd_runs_the_nvidia_runtime(host):
    assert host.service("containerd").is_running
    dump = host.check_output("containerd config dump")
    options = nvidia_options(dump)
    assert re.search(r'^\s*BinaryName = "%s"$' % re.escape(RUNTIME), options, re.M), options
    assert re.search(r'\.runtimes\.nvidia\]\n(?:[ \t]+.*\n)*?[ \t]+runtime_type = "io\.containerd\.runc\.v2"', dump)
    if name(host) == "container-runtime-containerd":
        # prepare set SystemdCgroup = true on runc; the nvidia runtime inherits it
        assert re.search(r"^\s*SystemdCgroup = true$", options, re.M), options
    # the running daemon started after its configuration last changed (the handler restarted it)
    assert started_at(host, "containerd") >= modified_at(host, "/etc/containerd/config.toml")


def test_containerd_backup(host):
    backups = host.check_output("find /etc/containerd -maxdepth 1 -name 'config.toml.*~'").split()
    assert len(backups) == 1, backups
    assert "nvidia" not in host.file(backups[0]).content_string


def test_dockerd_runs_the_nvidia_runtime(host):
    if name(host) != "container-runtime-docker":
        assert not host.service("docker").is_running
        assert "nvidia" not in host.file("/etc/docker/daemon.json").content_string
        return
    assert host.service("docker").is_running
    runtimes = json.loads(host.check_output("docker info --format '{{json .Runtimes}}'"))
    assert runtimes["nvidia"]["path"] == RUNTIME, runtimes
    assert "runc" in runtimes
    daemon = json.loads(host.file("/etc/docker/daemon.json").content_string)
    # every key prepare wrote is kept
    assert daemon["storage-driver"] == "vfs"
    assert daemon["log-opts"] == {"max-size": "10m", "max-file": "3"}
    assert daemon["iptables"] is False and daemon["bridge"] == "none"
    assert "default-runtime" not in daemon
    assert started_at(host, "docker") >= modified_at(host, "/etc/docker/daemon.json")


def test_docker_backup(host):
    if name(host) != "container-runtime-docker":
        return
    backups = host.check_output("find /etc/docker -maxdepth 1 -name 'daemon.json.*~'").split()
    assert backups, "no backup of daemon.json"
    contents = [json.loads(host.file(path).content_string) for path in backups]
    # the file prepare wrote, before the role added its runtime
    assert [c for c in contents if "runtimes" not in c and c["storage-driver"] == "vfs"], contents


def test_cdi_spec_is_kept_current_by_the_toolkits_refresh_units(host):
    # toolkit 1.18 and newer: nvidia-cdi-refresh.path enabled and watching, the service wrote the spec once
    path_unit = host.service("nvidia-cdi-refresh.path")
    assert path_unit.is_enabled and path_unit.is_running
    spec = host.file("/var/run/cdi/nvidia.yaml")
    assert spec.exists and "cdiVersion:" in spec.content_string and "kind: nvidia.com/gpu" in spec.content_string
    # the spec names the node's driver (the simulated T4 profile's 535.104.05)
    assert "libcuda.so.535.104.05" in spec.content_string
    # and the role did not write a second spec for the same devices
    assert not host.file("/etc/cdi/nvidia.yaml").exists


def test_nvidia_ctk_never_configured_a_runtime(host):
    calls = host.file("/var/log/nvidia-ctk-stand-in.log")
    assert calls.exists, "the role did not run nvidia-ctk cdi generate"
    lines = calls.content_string.splitlines()
    assert "cdi generate" in lines
    assert not [line for line in lines if line.startswith("runtime")], lines
