"""Three runtimes in one containerd drop-in, a run each: containerd on the node registers all three.

Runs last (after test_runtimes*.py): it moves the nvidia runtime the role wrote into config.toml into
the drop-in.
"""

import os
import tomllib

import testinfra.utils.ansible_runner

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]
).get_hosts("container-runtime-containerd")
assert testinfra_hosts == ["container-runtime-containerd"], testinfra_hosts

HERE = os.path.dirname(os.path.abspath(__file__))
RUNTIME = "/usr/bin/nvidia-container-runtime"
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
CRI = "io.containerd.grpc.v1.cri"
EXPECTED = {"nvidia": RUNTIME, "nvidia-cdi": RUNTIME + ".cdi", "nvidia-legacy": RUNTIME + ".legacy"}


def test_three_runtimes_in_one_drop_in(host, run_playbook):
    returncode, output = run_playbook(os.path.join(HERE, "..", "three_runtimes.yml"))
    assert returncode == 0, output
    assert "Traceback" not in output, output

    # what the running node's containerd loads: the main file imports the drop-in
    dump = tomllib.loads(host.check_output("containerd config dump"))
    containerd = dump["plugins"][CRI]["containerd"]
    for name, binary in EXPECTED.items():
        runtime = containerd["runtimes"][name]
        assert runtime["runtime_type"] == "io.containerd.runc.v2", name
        assert runtime["options"]["BinaryName"] == binary, name
        # prepare set SystemdCgroup = true on runc; each runtime inherits it
        assert runtime["options"]["SystemdCgroup"] is True, name
    assert containerd["default_runtime_name"] == "nvidia"  # the first run's default survived the others

    drop_in = tomllib.loads(host.file(DROP_IN).content_string)
    assert sorted(n for n in drop_in["plugins"][CRI]["containerd"]["runtimes"] if n.startswith("nvidia")) == \
        sorted(EXPECTED)
    main = tomllib.loads(host.file("/etc/containerd/config.toml").content_string)
    assert "/etc/containerd/conf.d/*.toml" in main["imports"]
    assert "nvidia" not in main["plugins"][CRI]["containerd"]["runtimes"]  # moved into the drop-in

    # containerd was restarted after the files changed, and runs with them
    assert host.service("containerd").is_running
    started = host.check_output("systemctl show -p ActiveEnterTimestamp --value containerd")
    assert int(host.check_output("date -d '%s' +%%s" % started)) >= int(host.check_output("stat -c %%Y %s" % DROP_IN))

    # a second pass changes nothing
    returncode, output = run_playbook(os.path.join(HERE, "..", "three_runtimes.yml"))
    assert returncode == 0 and "changed=0" in output, output
