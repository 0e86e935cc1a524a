"""The role's record of the runtime configuration: a re-run skips the module until a file changes.

Runs after test_runtimes.py (which counts the backups the converge made): the edit below makes one more.
"""

import os
import re

import testinfra.utils.ansible_runner

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]
).get_hosts("container-runtime-containerd")
assert testinfra_hosts == ["container-runtime-containerd"], testinfra_hosts

RECORD = "/var/lib/kubegpu-nvidia-container-runtimes.record"
CONFIG = "/etc/containerd/config.toml"
PLAYBOOK = """
- name: Converge the containerd node only
  hosts: container-runtime-containerd
  gather_facts: false
  vars_files:
    - "{{ lookup('ansible.builtin.env', 'MOLECULE_EPHEMERAL_DIRECTORY') }}/toolkit_repo/vars.yml"
  vars:
    nvidia_container_toolkit_cdi_generate: true
  roles:
    - role: kubegpu.nvidia.nvidia_container_toolkit
"""
CONFIGURE = "TASK [kubegpu.nvidia.nvidia_container_toolkit : Configure the nvidia runtime in each container runtime]"


def rows(host):
    return [line.split() for line in host.file(RECORD).content_string.splitlines() if line and not line.startswith("#")]


def configure_output(output):
    """The lines the configuration task printed."""
    start = output.index(CONFIGURE)
    return output[start:output.index("\nTASK [", start + 1)]


def test_the_record_lets_a_re_run_skip_the_module_until_a_file_changes(host, run_playbook, tmp_path):
    sha = host.check_output("sha256sum %s" % CONFIG).split()[0]
    (record,) = rows(host)
    assert record[0] == "containerd" and record[2:] == [CONFIG, sha]
    assert re.fullmatch(r"[0-9a-f]{64}", record[1])
    assert host.file(RECORD).mode == 0o644
    playbook = tmp_path / "converge-containerd.yml"
    playbook.write_text(PLAYBOOK)

    # settings and file as recorded: nothing to configure, so the role's install and configuration steps are
    # skipped as a whole (the module does not run), and nothing changes
    returncode, output = run_playbook(playbook)
    assert returncode == 0, output
    assert CONFIGURE not in output, output
    assert "(item=containerd)" not in output, output
    assert re.search(r"container-runtime-containerd +: ok=\d+ +changed=0 ", output), output

    # the file edited by hand: the module runs, puts the nvidia runtime back, containerd restarts
    host.run_test("sed -i 's#BinaryName = \"/usr/bin/nvidia-container-runtime\"#BinaryName = \"/usr/bin/runc\"#' %s"
                  % CONFIG)
    assert "/usr/bin/nvidia-container-runtime" not in host.file(CONFIG).content_string
    returncode, output = run_playbook(playbook)
    assert returncode == 0, output
    assert "changed: [container-runtime-containerd] => (item=containerd)" in configure_output(output), output
    assert "RUNNING HANDLER [kubegpu.nvidia.nvidia_container_toolkit : Restart NVIDIA-configured container runtimes]" in output
    assert host.check_output("sha256sum %s" % CONFIG).split()[0] == sha
    assert rows(host) == [record]
    assert host.service("containerd").is_running

    # another setting (no backups): the module runs again; with nothing to change, only the record's key does
    other = tmp_path / "converge-containerd-no-backup.yml"
    other.write_text(PLAYBOOK.replace("nvidia_container_toolkit_cdi_generate: true",
                                      "nvidia_container_toolkit_cdi_generate: true\n    nvidia_container_toolkit_backup: false"))
    returncode, output = run_playbook(other)
    assert returncode == 0, output
    assert "ok: [container-runtime-containerd] => (item=containerd)" in configure_output(output), output
    (changed,) = rows(host)
    assert changed[0] == "containerd" and changed[1] != record[1] and changed[2:] == record[2:]
    # and back to the scenario's settings, recorded as before
    returncode, output = run_playbook(playbook)
    assert returncode == 0, output
    assert rows(host) == [record]
