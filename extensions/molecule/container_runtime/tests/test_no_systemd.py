"""A node without systemd fails the role with one message, before anything is installed.

The node is a container of the lab image that runs `sleep` instead of systemd, started for this test
only and reached with the docker connection, as the scenario's nodes are.
"""

import json
import os
import subprocess
import uuid

import pytest
import testinfra.utils.ansible_runner

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]
).get_hosts("container-runtime-cpu")

PLAYBOOK = """
- name: Run the role on a node without systemd
  hosts: bare
  gather_facts: false
  roles:
    - role: kubegpu.nvidia.nvidia_container_toolkit
      vars:
        nvidia_container_toolkit_force: true
"""


@pytest.fixture(name="bare")
def fixture_bare(tmp_path):
    name = "kubegpu-no-systemd-%s" % uuid.uuid4().hex[:8]
    subprocess.run(["docker", "run", "-d", "--name", name, "kubegpu-lab-node:latest", "sleep", "600"],
                   check=True, capture_output=True)
    try:
        yield name
    finally:
        subprocess.run(["docker", "rm", "-f", name], check=False, capture_output=True)


def test_a_node_without_systemd_fails_with_one_message(bare, tmp_path, run_playbook):
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {"bare": {
        "ansible_connection": "community.docker.docker", "ansible_host": bare,
        "ansible_python_interpreter": "/usr/bin/python3"}}}}))
    playbook = tmp_path / "site.yml"
    playbook.write_text(PLAYBOOK)
    returncode, output = run_playbook(playbook, inventory)
    assert returncode == 2, output
    messages = [json.loads(line.split("=> ", 1)[1])["msg"] for line in output.splitlines() if line.startswith("fatal: [bare]")]
    assert len(messages) == 1, output
    assert messages[0].startswith("Cannot read the services of the container runtimes (systemctl show, rc "), messages
    assert messages[0].endswith("The role needs systemd on the node."), messages
    assert "failed=1" in output and "changed=0" in output, output
    assert "Traceback" not in output, output
    installed = subprocess.run(["docker", "exec", bare, "dpkg-query", "--show", "nvidia-container-toolkit"],
                               capture_output=True, text=True, check=False)
    assert installed.returncode != 0, installed.stdout
