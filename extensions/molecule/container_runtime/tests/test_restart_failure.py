"""A runtime that fails to restart after the change gets its backup back, runs again, and the host fails."""

import json
import os
import shlex

import testinfra.utils.ansible_runner

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]
).get_hosts("container-runtime-docker")
assert testinfra_hosts == ["container-runtime-docker"], testinfra_hosts

HERE = os.path.dirname(os.path.abspath(__file__))


def backups(host):
    return set(host.check_output("find /etc/docker -maxdepth 1 -name 'daemon.json.*~'").split())


def test_restart_failure_restores_the_backup(host, run_playbook):
    before = host.file("/etc/docker/daemon.json").content_string
    assert "nvidia" in json.loads(before)["runtimes"]
    backups_before = backups(host)
    defaults = host.file("/etc/default/docker")
    defaults_before = defaults.content_string if defaults.exists else None

    try:
        returncode, output = run_playbook(os.path.join(HERE, "..", "restart_failure.yml"))
    finally:
        # dockerd's command line as it was (restart_failure.yml gave it --default-runtime=runc)
        if defaults_before is None:
            host.run("rm -f /etc/default/docker")
        else:
            host.run("printf '%%s' %s > /etc/default/docker" % shlex.quote(defaults_before))
        host.run("systemctl restart docker")
    assert returncode == 2, output
    assert "failed=1" in output, output
    # both outcomes: the first restart's error, and the restart with the restored file
    assert "Restarting docker after adding the nvidia runtime failed" in output, output
    assert "Unable to restart service docker" in output, output
    # dockerd's own error, from its log
    assert "specified both as a flag and in the configuration file: default-runtime" in output, output
    assert "The previous configuration was restored from /etc/docker/daemon.json." in output, output
    assert "The runtime was restarted with it and runs again." in output, output

    # the module made a backup of the working file and the role put it back
    new_backups = backups(host) - backups_before
    assert len(new_backups) == 1, new_backups
    assert host.file("/etc/docker/daemon.json").content_string == before
    assert host.file(new_backups.pop()).content_string == before
    assert host.service("docker").is_running
    runtimes = json.loads(host.check_output("docker info --format '{{json .Runtimes}}'"))
    assert runtimes["nvidia"]["path"] == "/usr/bin/nvidia-container-runtime"
